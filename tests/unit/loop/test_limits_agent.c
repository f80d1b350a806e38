/* Reply bounds through the agent (issue 15): a reply larger than
 * limits.reply_bytes and tool input larger than limits.tool_input_bytes end
 * the run with an api_error naming the limit, and are not retried (the same
 * endpoint would send the same again). */
#include <string.h>

#include "agent_fx.h"
#include "test.h"

static const char big_reply[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - repeat_text: {count: 20000, text: \"0123456789abcdef\"}\n";

static void assert_limit_error(fx_t *f, const char *kind, const char *what) {
  long i = fx_find(f, "api_error", NULL, 0);
  const json_t *e;

  ASSERT(i >= 0);
  e = fx_event(f, i);
  ASSERT_STR_EQ(fx_jstr(e, "kind"), kind);
  ASSERT_NOT_NULL(strstr(fx_jstr(e, "message"), what));
  ASSERT_STR_EQ(fx_last_type(f), "error");
  /* Our own bound, named as one (not "stream could not be decoded"). */
  e = fx_event(f, fx_find(f, "error", NULL, 0));
  ASSERT_NOT_NULL(strstr(fx_jstr(e, "message"),
                         "(local, a limit of this run was reached)"));
  ASSERT_EQ(fx_count(f, "retry"), 0);
  ASSERT_EQ(fx_requests(f), 1);
  ASSERT_EQ(fx_count(f, "final"), 0);
}

TEST_IMPL(limits_agent_reply_bytes) {
  fx_t f;

  fx_init(&f, big_reply);
  f.opts.limits.reply_bytes = 64 * 1024;
  fx_start(&f);
  fx_run(&f, "hi");
  assert_limit_error(&f, "reply_too_large", "exceeds the limit of 65536");
  /* Below the limit the same reply is fine. */
  fx_finish(&f);

  fx_init(&f, big_reply);
  f.opts.limits.reply_bytes = 16 * 1024 * 1024;
  fx_start(&f);
  fx_run(&f, "hi");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_finish(&f);
  return 0;
}

TEST_IMPL(limits_agent_tool_input_bytes) {
  fx_t f;
  char yaml[8192];
  char big[4001];

  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  snprintf(yaml, sizeof(yaml),
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - tool_use: {id: t1, name: read_file, input: {path: "
           "\"%s\"}, pieces: 8}\n"
           "        - tool_use: {id: t2, name: read_file, input: {path: "
           "\"%s\"}, pieces: 8}\n",
           big, big);
  /* Each call alone fits; both together do not. */
  fx_init(&f, yaml);
  f.opts.limits.tool_input_bytes = 6000;
  fx_start(&f);
  fx_run(&f, "hi");
  assert_limit_error(&f, "tool_input_too_large", "limit of 6000 bytes");
  fx_finish(&f);
  return 0;
}

/* A gzip body (a proxy that compresses) is named and not retried. */
TEST_IMPL(limits_agent_gzip_not_retried) {
  fx_t f;
  long i;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{text: \"hi\"}]}\n"
              "    headers: {content-encoding: gzip}\n");
  f.opts.retry_max_attempts = 4;
  fx_start(&f);
  fx_run(&f, "hi");
  i = fx_find(&f, "api_error", NULL, 0);
  ASSERT(i >= 0);
  ASSERT_STR_EQ(fx_jstr(fx_event(&f, i), "kind"), "unexpected_body");
  ASSERT_NOT_NULL(strstr(fx_jstr(fx_event(&f, i), "message"), "gzip"));
  ASSERT_EQ(fx_count(&f, "retry"), 0);
  ASSERT_EQ(fx_requests(&f), 1);
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  fx_finish(&f);
  return 0;
}
