/* MCP call and start-up events (docs/events.md): mcp_tool_call_begin after
 * the call's tool_use_started, mcp_tool_call_end exactly once per begin
 * before its tool_use_completed -- for an answer, an error, a cancel, a
 * timeout and a server that dies mid-call -- and mcp_startup_complete once,
 * before the first turn, with the ready, failed and still-starting
 * servers. The model is agentloop-mockllm; the server is the fault server
 * (mcp_server.c). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "unit/loop/agent_fx.h"
#include "test.h"

#define jstr fx_jstr

#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_KEY ",\"sandbox\":false"
#else
#define SANDBOX_KEY ""
#endif

/* {"mcpServers":{name:{fault server with args, keys}}} plus top-level
 * extra. */
static char *cfg1(const char *extra, const char *name, const char *args,
                  const char *keys) {
  al_buf_t b;

  al_buf_init(&b, 1 << 16);
  al_buf_printf(&b,
                "{%s\"mcpServers\":{\"%s\":{\"command\":\"%s\",\"args\":"
                "[\"--helper\",\"mcp_server\"%s%s]%s%s}}}",
                extra != NULL ? extra : "", name, al_test_exe(),
                args[0] != '\0' ? "," : "", args, SANDBOX_KEY,
                keys != NULL ? keys : "");
  return b.data;
}

static void dump(const fx_t *f) {
  size_t i;
  json_t *e;

  if (getenv("AL_TEST_DUMP") == NULL) {
    return;
  }
  json_array_foreach(f->events, i, e) {
    char *s = json_dumps(e, JSON_COMPACT);

    fprintf(stderr, "%3zu %.300s\n", i, s);
    free(s);
  }
}

/* Every begin has exactly one end, after it, for the same call, and every
 * end has a begin; returns the number of begins. */
static size_t check_pairs(const fx_t *f) {
  size_t i, n = 0;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    const char *type = jstr(e, "type");
    const char *id = jstr(e, "call_id");
    long b, b2, end, end2, started, done;

    if (strcmp(type, "mcp_tool_call_begin") != 0 &&
        strcmp(type, "mcp_tool_call_end") != 0) {
      continue;
    }
    b = fx_find(f, "mcp_tool_call_begin", id, 0);
    b2 = fx_find(f, "mcp_tool_call_begin", id, 1);
    end = fx_find(f, "mcp_tool_call_end", id, 0);
    end2 = fx_find(f, "mcp_tool_call_end", id, 1);
    ASSERT(b >= 0);
    ASSERT(end > b);
    ASSERT_EQ(b2, -1);
    ASSERT_EQ(end2, -1);
    started = fx_find(f, "tool_use_started", id, 0);
    done = fx_find(f, "tool_use_completed", id, 0);
    ASSERT(started >= 0 && started < b);
    ASSERT(done > end);
    ASSERT_STR_EQ(jstr(fx_event(f, b), "name"), jstr(fx_event(f, end), "name"));
    ASSERT_STR_EQ(jstr(fx_event(f, b), "tool"), jstr(fx_event(f, end), "tool"));
    ASSERT_STR_EQ(jstr(fx_event(f, b), "server"),
                  jstr(fx_event(f, end), "server"));
    /* The end agrees with the result the model gets. */
    ASSERT_EQ(json_is_true(json_object_get(fx_event(f, end), "is_error")),
              json_is_true(json_object_get(fx_event(f, done), "is_error")));
    n += strcmp(type, "mcp_tool_call_begin") == 0;
  }
  return n;
}

static const json_t *end_of(const fx_t *f, const char *id) {
  return fx_event(f, fx_find(f, "mcp_tool_call_end", id, 0));
}

TEST_IMPL(mcp_events_call_begin_end) {
  fx_t f;
  char *cfg = cfg1(NULL, "f", "", NULL);
  const json_t *b, *e, *sc, *r0;
  long sci;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__f__echo, input: {text: hi}}\n"
              "        - tool_use: {id: m2, name: mcp__f__fail, input: {}}\n"
              "  - reply: {content: [{tool_use: {id: m3, name: mcp__f__rpcerr, input: {}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n"
              "  - reply: {content: [{text: 'again'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(check_pairs(&f), 3);
  b = fx_event(&f, fx_find(&f, "mcp_tool_call_begin", "m1", 0));
  ASSERT_STR_EQ(jstr(b, "server"), "f");
  ASSERT_STR_EQ(jstr(b, "tool"), "echo");
  ASSERT_STR_EQ(jstr(b, "name"), "mcp__f__echo");
  e = end_of(&f, "m1");
  ASSERT(json_is_false(json_object_get(e, "is_error")));
  ASSERT_NULL(json_object_get(e, "end")); /* an answer */
  ASSERT(json_is_integer(json_object_get(e, "duration_ms")));
  /* isError and a JSON-RPC error are answers too, with is_error. */
  ASSERT(json_is_true(json_object_get(end_of(&f, "m2"), "is_error")));
  ASSERT_NULL(json_object_get(end_of(&f, "m2"), "end"));
  ASSERT(json_is_true(json_object_get(end_of(&f, "m3"), "is_error")));
  ASSERT_NULL(json_object_get(end_of(&f, "m3"), "end"));
  /* Start-up: once, before the first turn, the server ready. */
  ASSERT_EQ(fx_count(&f, "mcp_startup_complete"), 1);
  sci = fx_find(&f, "mcp_startup_complete", NULL, 0);
  ASSERT(sci < fx_find(&f, "turn_started", NULL, 0));
  ASSERT(sci > fx_find(&f, "run_started", NULL, 0));
  sc = fx_event(&f, sci);
  ASSERT_EQ(json_array_size(json_object_get(sc, "ready")), 1);
  r0 = json_array_get(json_object_get(sc, "ready"), 0);
  ASSERT_STR_EQ(jstr(r0, "server"), "f");
  ASSERT_EQ(json_integer_value(json_object_get(r0, "tools")), 11);
  ASSERT_EQ(json_array_size(json_object_get(sc, "failed")), 0);
  ASSERT_EQ(json_array_size(json_object_get(sc, "pending")), 0);
  /* A second run does not repeat it. */
  fx_run(&f, "again");
  ASSERT_EQ(fx_count(&f, "mcp_startup_complete"), 1);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* The server dies while a call is in flight: that call ends with
 * server_failed, once. echo is answered first (--exit-after 1), then the
 * server exits with stall unanswered. */
TEST_IMPL(mcp_events_end_on_server_crash) {
  fx_t f;
  char *cfg = cfg1(NULL, "f", "\"--exit-after\",\"1\"", NULL);
  const json_t *e;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__f__echo, input: {text: hi}}\n"
              "        - tool_use: {id: m2, name: mcp__f__stall, input: {}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(check_pairs(&f), 2);
  ASSERT_NULL(json_object_get(end_of(&f, "m1"), "end"));
  e = end_of(&f, "m2");
  ASSERT_STR_EQ(jstr(e, "end"), "server_failed");
  ASSERT(json_is_true(json_object_get(e, "is_error")));
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

TEST_IMPL(mcp_events_end_on_timeout) {
  fx_t f;
  char *cfg = cfg1(NULL, "f", "", ",\"timeout_ms\":100");
  const json_t *e;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: m1, name: mcp__f__stall, input: {}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(check_pairs(&f), 1);
  e = end_of(&f, "m1");
  ASSERT_STR_EQ(jstr(e, "end"), "timeout");
  ASSERT_GE(json_integer_value(json_object_get(e, "duration_ms")), 100);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

static void cancel_at_begin(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)j;
  if (ev->type == AL_EVENT_MCP_TOOL_CALL_BEGIN) {
    ASSERT_EQ(al_agent_cancel(f->agent), 0);
  }
}

/* A cancel while the call is in flight: the end (cancelled) comes before
 * the run's interrupted, and nothing of the call after it. */
TEST_IMPL(mcp_events_end_on_cancel) {
  fx_t f;
  char *cfg = cfg1(NULL, "f", "", NULL);
  long end, intr;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: m1, name: mcp__f__stall, input: {}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  f.hook = cancel_at_begin;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_EQ(fx_count(&f, "mcp_tool_call_begin"), 1);
  ASSERT_EQ(fx_count(&f, "mcp_tool_call_end"), 1);
  end = fx_find(&f, "mcp_tool_call_end", "m1", 0);
  intr = fx_find(&f, "interrupted", NULL, 0);
  ASSERT(end < intr);
  ASSERT_STR_EQ(jstr(fx_event(&f, end), "end"), "cancelled");
  ASSERT(json_is_true(json_object_get(fx_event(&f, end), "is_error")));
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* A server that hangs at initialize is pending when the wait is given up;
 * one that exits at once is failed, with its error. */
TEST_IMPL(mcp_events_startup_pending_and_failed) {
  fx_t f;
  al_buf_t b;
  const json_t *sc, *f0;
  long sci;

  signal(SIGPIPE, SIG_IGN);
  al_buf_init(&b, 1 << 16);
  al_buf_printf(&b,
                "{\"startup_wait_ms\":1000,\"mcpServers\":{"
                "\"h\":{\"command\":\"%s\",\"args\":[\"--helper\","
                "\"mcp_server\",\"--hang-init\"]%s},"
                "\"x\":{\"command\":\"%s\",\"args\":[\"--helper\","
                "\"mcp_server\",\"--exit-at-start\",\"7\"]%s}}}",
                al_test_exe(), SANDBOX_KEY, al_test_exe(), SANDBOX_KEY);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hello'}]}\n");
  f.opts.mcp_config = b.data;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "mcp_startup_complete"), 1);
  sci = fx_find(&f, "mcp_startup_complete", NULL, 0);
  ASSERT(sci < fx_find(&f, "turn_started", NULL, 0));
  sc = fx_event(&f, sci);
  ASSERT_EQ(json_array_size(json_object_get(sc, "ready")), 0);
  ASSERT_EQ(json_array_size(json_object_get(sc, "pending")), 1);
  ASSERT_STR_EQ(json_string_value(
                    json_array_get(json_object_get(sc, "pending"), 0)),
                "h");
  ASSERT_EQ(json_array_size(json_object_get(sc, "failed")), 1);
  f0 = json_array_get(json_object_get(sc, "failed"), 0);
  ASSERT_STR_EQ(jstr(f0, "server"), "x");
  ASSERT_NOT_NULL(strstr(jstr(f0, "error"), "status 7"));
  /* It gave up on the hanging one within the wait (counted from the
   * servers' start, so how much of it the run saw depends on the
   * machine: no lower bound). */
  ASSERT_LE(json_integer_value(json_object_get(sc, "waited_ms")),
            1000 + 250 * (int64_t)al_test_timeout_multiplier());
  fx_finish(&f);
  al_buf_free(&b);
  return 0;
}
