/* Issue 22 through the real agent against agentloop-mockllm: the token
 * estimate and server-side tools (defect 15), and rules of the loop that
 * no test guarded (defect 14): the validity gate's repair of an orphan
 * result beside real ones, the 95% refusal after compaction at its edge,
 * the first user message's blocks kept whole by compaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "common/common.h"
#include "loop/agent_int.h"
#include "loop/budget.h"
#include "loop/validity.h"
#include "test.h"

#define jstr fx_jstr

static int64_t jint(const json_t *o, const char *k) {
  return (int64_t)json_integer_value(json_object_get(o, k));
}

/* A scenario response that plays `sse` byte for byte. */
static void append_raw(al_buf_t *b, const char *sse) {
  const char *p = sse;

  al_buf_append_str(b, "  - raw: |+\n");
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);

    if (n > 0) {
      al_buf_append_str(b, "      ");
      al_buf_append(b, p, n);
    }
    al_buf_append_str(b, "\n");
    p += n + (nl != NULL ? 1 : 0);
  }
}

/* ---- defect 15: server-side tools and the estimate ------------------------ */

/* A reply paused (pause_turn) in the middle of two server-side web
 * searches, as Anthropic sends it: server_tool_use blocks with their
 * input, web_search_tool_result blocks with encrypted content, and a
 * usage that counts the server's own model calls over the search results
 * (389,670 input tokens for a request of a few thousand). */
static char *web_search_pause(bool counted) {
  static const char *const head =
      "event: message_start\n"
      "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_ws1\","
      "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"mock-model\","
      "\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":2811,\"cache_creation_input_tokens\":0,"
      "\"cache_read_input_tokens\":0,\"output_tokens\":3}}}\n\n";
  al_buf_t b;
  char enc[4001];
  int k;

  memset(enc, 'E', sizeof(enc) - 1);
  enc[sizeof(enc) - 1] = '\0';
  al_buf_init(&b, (size_t)1 << 24);
  al_buf_append_str(&b, head);
  for (k = 0; k < 2; k++) {
    al_buf_printf(
        &b,
        "event: content_block_start\n"
        "data: {\"type\":\"content_block_start\",\"index\":%d,"
        "\"content_block\":{\"type\":\"server_tool_use\",\"id\":"
        "\"srvtoolu_0%d\",\"name\":\"web_search\",\"input\":{}}}\n\n"
        "event: content_block_delta\n"
        "data: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":"
        "{\"type\":\"input_json_delta\",\"partial_json\":"
        "\"{\\\"query\\\": \\\"libuv release %d\\\"}\"}}\n\n"
        "event: content_block_stop\n"
        "data: {\"type\":\"content_block_stop\",\"index\":%d}\n\n"
        "event: content_block_start\n"
        "data: {\"type\":\"content_block_start\",\"index\":%d,"
        "\"content_block\":{\"type\":\"web_search_tool_result\","
        "\"tool_use_id\":\"srvtoolu_0%d\",\"content\":[{\"type\":"
        "\"web_search_result\",\"title\":\"libuv\",\"url\":"
        "\"https://w.example/libuv%d\",\"encrypted_content\":\"%s\","
        "\"page_age\":\"1 day\"}]}}\n\n"
        "event: content_block_stop\n"
        "data: {\"type\":\"content_block_stop\",\"index\":%d}\n\n",
        2 * k, k + 1, 2 * k, k, 2 * k, 2 * k + 1, k + 1, k, enc, 2 * k + 1);
  }
  al_buf_append_str(
      &b, "event: message_delta\n"
          "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
          "\"pause_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":"
          "389670,\"cache_creation_input_tokens\":0,"
          "\"cache_read_input_tokens\":0,\"output_tokens\":311");
  /* Without the count (a proxy that drops it): the blocks still tell. */
  al_buf_append_str(&b, counted ? ",\"server_tool_use\":{"
                                  "\"web_search_requests\":2}}}\n\n"
                                : "}}\n\n");
  al_buf_append_str(&b, "event: message_stop\n"
                        "data: {\"type\":\"message_stop\"}\n\n");
  return b.data;
}

/* The paused reply's usage neither calibrates nor anchors the estimate:
 * the continuation is sent (not refused as 9742% of the window after a
 * compaction), the usage event shows the estimate, no warning. Whether
 * the usage counts the searches or only the blocks show them. */
TEST_IMPL(budget_web_search_pause_continues) {
  int counted;

  for (counted = 1; counted >= 0; counted--) {
    char *sse = web_search_pause(counted == 1);
    const json_t *u;
    al_buf_t y;
    fx_t f;

    al_buf_init(&y, (size_t)1 << 24);
    al_buf_append_str(&y, "responses:\n");
    append_raw(&y, sse);
    al_buf_append_str(&y, "  - reply: {content: [{text: 'libuv 1.51 is "
                          "out.'}], usage: {input_tokens: 5200}}\n");
    free(sse);
    fx_init(&f, y.data);
    fx_start(&f);
    fx_run(&f, "libuv news");
    if (strcmp(fx_last_type(&f), "final") != 0) {
      long e = fx_find(&f, "error", NULL, 0);

      AL_TEST_FAIL("ended with %s: %s", fx_last_type(&f),
                   e >= 0 ? jstr(fx_event(&f, e), "message") : "");
    }
    ASSERT_EQ(fx_requests(&f), 2);
    ASSERT_EQ(fx_count(&f, "compaction_started"), 0);
    ASSERT_EQ(fx_count(&f, "context_warning"), 0);
    fx_assert_valid(&f);
    /* The paused reply's usage event: the estimate, marked so. */
    u = fx_event(&f, fx_find(&f, "usage", NULL, 0));
    ASSERT(json_is_true(json_object_get(u, "context_estimated")));
    ASSERT(jint(u, "context_tokens") < 20000);
    ASSERT_EQ(jint(u, "input_tokens"), 389670);
    /* Nothing was learnt from it: the next request is projected near the
     * last true count. */
    ASSERT(al__agent_projected(f.agent) < 20000);
    fx_finish(&f);
    al_buf_free(&y);
  }
  return 0;
}

/* The budget on its own: a usage with server_tool_use, or a reply with
 * server blocks, teaches nothing; one outlier moves the ratio at most to
 * the band's edge, and the projection with it. */
TEST_IMPL(budget_outlier_bounded) {
  al_budget_t b;
  json_t *u;

  al__budget_init(&b);
  b.window = 200000;
  al__budget_sent(&b, 1000);
  u = json_pack("{s:i, s:{s:i}}", "input_tokens", 389670, "server_tool_use",
                "web_search_requests", 2);
  ASSERT_EQ(al__budget_observed(&b, "m", u, false), 0);
  json_decref(u);
  u = json_pack("{s:i}", "input_tokens", 389670);
  ASSERT_EQ(al__budget_observed(&b, "m", u, true), 0);
  ASSERT(al__budget_ratio(&b, "m") == 1.0);
  ASSERT_EQ(b.last_ctx, 0);
  ASSERT_EQ(al__budget_project(&b, "m", 1000), 1000);
  /* Without server tools: the count anchors, the ratio is clamped. */
  ASSERT_EQ(al__budget_observed(&b, "m", u, false), 389670);
  ASSERT(al__budget_ratio(&b, "m") == AL_BUDGET_RATIO_MAX);
  ASSERT_EQ(al__budget_project(&b, "m", 2000),
            389670 + (int64_t)(AL_BUDGET_RATIO_MAX * 1000));
  json_decref(u);
  al__budget_sent(&b, 100000);
  u = json_pack("{s:i}", "input_tokens", 1);
  ASSERT_EQ(al__budget_observed(&b, "m", u, false), 1);
  ASSERT(al__budget_ratio(&b, "m") ==
         AL_BUDGET_EWMA_NEW * AL_BUDGET_RATIO_MIN +
             (1 - AL_BUDGET_EWMA_NEW) * AL_BUDGET_RATIO_MAX);
  json_decref(u);
  /* Zero counts (a count of nothing) stay unknown. */
  u = json_pack("{s:i}", "server_tool_use", 0);
  ASSERT(!al__budget_has_server_tools(u));
  json_decref(u);
  al__budget_free(&b);
  return 0;
}
