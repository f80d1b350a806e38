/* Summary compaction (docs/context.md): automatic, manual, overflow,
 * the fallback trim, the breaker, the 95% refusal, through the agent
 * against agentloop-mockllm with validation on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "common/common.h"
#include "loop/agent_int.h"
#include "loop/compact.h"
#include "test.h"

#define jstr fx_jstr
#define GOAL "GOAL-ZEBRA-42: count the x in every file"

static void write_files(fx_t *f, int n, size_t bytes) {
  char *big = malloc(bytes + 1);
  int k;

  for (k = 1; k <= n; k++) {
    char name[16];

    memset(big, 'a' + (k % 26), bytes);
    big[bytes] = '\0';
    snprintf(name, sizeof(name), "f%d", k);
    fx_write(f, name, big);
  }
  free(big);
}

static char *body_text(const fx_t *f, size_t i) {
  return json_dumps(fx_request(f, i)->body, JSON_COMPACT);
}

static bool body_has(const fx_t *f, size_t i, const char *s) {
  char *b = body_text(f, i);
  bool r = strstr(b, s) != NULL;

  free(b);
  return r;
}

static const json_t *ev_of(const fx_t *f, const char *type) {
  long i = fx_find(f, type, NULL, 0);

  ASSERT(i >= 0);
  return fx_event(f, i);
}

static int64_t jint(const json_t *o, const char *k) {
  return (int64_t)json_integer_value(json_object_get(o, k));
}

/* Window 8,000: compact at 4,000 (the 13,000 reserve capped at half the
 * window). Three 6 KB reads cross it before request 4, which is the
 * summary request; the run then continues on its own. */
/* The thresholds below were sized with the tools of the time (bash,
 * read_file, write_file, list_directory, done): the search and edit tools
 * added since are not offered here, so the requests keep their sizes. */
static const char *const sized_tools_off[] = {"edit_file", "grep", "glob",
                                              NULL};

static const char *auto_yaml =
    "usage_from_request: {bytes_per_token: 4}\n"
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{text: \"## Goal\\ncount the x\\n## Next step\\nread f4\"}]}\n"
    "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: f1}}}]}\n"
    "  - reply: {content: [{text: done}]}\n";

TEST_IMPL(compact_auto_continues_run) {
  fx_t f;
  const json_t *c;
  const json_t *m0;
  size_t i;

  fx_init(&f, auto_yaml);
  f.opts.context_window = 8000;
  f.opts.micro_min_tokens = -1;
  f.opts.deny_tools = sized_tools_off;
  fx_start(&f);
  write_files(&f, 3, 6000);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  /* The compacted history needed no repair by the validity gate. */
  ASSERT_EQ(fx_count(&f, "history_repaired"), 0);
  ASSERT_EQ(fx_requests(&f), 6);
  ASSERT_EQ(fx_count(&f, "compaction_started"), 1);
  ASSERT_EQ(fx_count(&f, "compaction_completed"), 1);
  ASSERT_STR_EQ(jstr(ev_of(&f, "compaction_started"), "trigger"), "auto");
  c = ev_of(&f, "compaction_completed");
  ASSERT_STR_EQ(jstr(c, "trigger"), "auto");
  ASSERT(json_is_false(json_object_get(c, "fallback")));
  ASSERT_EQ(jint(c, "dropped_messages"), 4);
  ASSERT_EQ(jint(c, "dropped_tool_results"), 2);
  ASSERT(jint(c, "tokens_after") < jint(c, "tokens_before"));
  /* It waited for turn 3's results, and came before anything was sent. */
  ASSERT(fx_find(&f, "turn_completed", NULL, 2) <
         fx_find(&f, "compaction_started", NULL, 0));
  ASSERT_EQ(fx_count(&f, "tool_use_completed"), 4);
  /* Request 4 is the summary request: tools off, the fixed sections. */
  ASSERT_STR_EQ(jstr(json_object_get(fx_request(&f, 3)->body, "tool_choice"),
                     "type"),
                "none");
  ASSERT(body_has(&f, 3, "## Failed attempts"));
  /* Request 5: the first user message verbatim, then the summary, then
   * the kept tail from an assistant message (t3 and its result). */
  m0 = json_array_get(json_object_get(fx_request(&f, 4)->body, "messages"), 0);
  ASSERT_STR_EQ(jstr(json_array_get(json_object_get(m0, "content"), 0), "text"),
                GOAL);
  ASSERT_NOT_NULL(strstr(
      jstr(json_array_get(json_object_get(m0, "content"), 1), "text"),
      "## Next step\nread f4"));
  ASSERT_EQ(json_array_size(json_object_get(fx_request(&f, 4)->body,
                                            "messages")),
            3);
  ASSERT_NOT_NULL(fx_tool_result(&f, 4, "t3"));
  ASSERT_NULL(fx_tool_result(&f, 4, "t1"));
  /* The goal is in every request. */
  for (i = 0; i < fx_requests(&f); i++) {
    ASSERT(body_has(&f, i, "GOAL-ZEBRA-42"));
  }
  fx_finish(&f);
  return 0;
}

/* The summary call is refused as too long: the deterministic trim takes
 * its place (with a notice and the fixed sections), the run goes on. */
TEST_IMPL(compact_summary_refused_falls_back) {
  fx_t f;
  const json_t *c;

  fx_init(&f,
          "usage_from_request: {bytes_per_token: 4}\n"
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f3}}}]}\n"
          "  - fault: {status: 400, error_message: 'prompt is too long: 9000 tokens > 8000 maximum'}\n"
          "  - reply: {content: [{text: done}]}\n");
  f.opts.context_window = 8000;
  f.opts.micro_min_tokens = -1;
  f.opts.deny_tools = sized_tools_off;
  fx_start(&f);
  write_files(&f, 3, 6000);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  c = ev_of(&f, "compaction_completed");
  ASSERT(json_is_true(json_object_get(c, "fallback")));
  ASSERT_EQ(jint(c, "dropped_messages"), 4);
  ASSERT_EQ(fx_requests(&f), 5);
  ASSERT(body_has(&f, 4, "could not be made"));
  ASSERT(body_has(&f, 4, "## Files touched\\nf1\\nf2"));
  ASSERT(body_has(&f, 4, GOAL));
  /* Only the refused summary request failed validation-free: the rest
   * the server accepted. */
  ASSERT(fx_request(&f, 4)->valid);
  fx_finish(&f);
  return 0;
}

/* A "prompt is too long" answer to a run's request: one compaction
 * (trigger overflow), then the same request again. */
TEST_IMPL(compact_on_overflow) {
  fx_t f;

  fx_init(&f,
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - fault: {status: 400, error_message: 'prompt is too long: 250000 tokens > 200000 maximum'}\n"
          "  - reply: {content: [{text: \"## Goal\\nsummarized\"}]}\n"
          "  - reply: {content: [{text: done}]}\n");
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  write_files(&f, 2, 100);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(jstr(ev_of(&f, "compaction_started"), "trigger"), "overflow");
  ASSERT_EQ(fx_requests(&f), 5);
  ASSERT(body_has(&f, 4, "summarized"));
  ASSERT(body_has(&f, 4, GOAL));
  fx_finish(&f);
  return 0;
}

/* Manual compaction of an idle agent, with the user's instructions; the
 * next run starts from the compacted history. */
TEST_IMPL(compact_manual_idle) {
  fx_t f;

  fx_init(&f,
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{text: first done}]}\n"
          "  - reply: {content: [{text: \"## Goal\\nmanual summary\"}]}\n"
          "  - reply: {content: [{text: second done}]}\n");
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  write_files(&f, 2, 100);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(al_agent_compact(f.agent, "keep the counts"), 0);
  ASSERT(al_agent_running(f.agent));
  ASSERT_EQ(al_agent_run(f.agent, "x"), AL_EBUSY);
  while (fx_count(&f, "compaction_completed") == 0) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  ASSERT(!al_agent_running(f.agent));
  ASSERT_STR_EQ(jstr(ev_of(&f, "compaction_started"), "trigger"), "manual");
  ASSERT(body_has(&f, 3, "Also, from the user: keep the counts"));
  fx_run(&f, "what next?");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(body_has(&f, 4, "manual summary"));
  ASSERT(body_has(&f, 4, GOAL));
  ASSERT(body_has(&f, 4, "what next?"));
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* Three failed compactions in a row end with ECOMPACT. */
TEST_IMPL(compact_three_failures_break) {
  fx_t f;
  int k;

  fx_init(&f,
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{text: done}]}\n"
          "  - fault: {status: 400}\n");
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  write_files(&f, 2, 100);
  fx_run(&f, GOAL);
  for (k = 1; k <= 3; k++) {
    ASSERT_EQ(al_agent_compact(f.agent, NULL), 0);
    while (fx_count(&f, "compaction_completed") < (size_t)k) {
      uv_run(&f.loop, UV_RUN_ONCE);
    }
    while (al_agent_running(f.agent)) {
      uv_run(&f.loop, UV_RUN_ONCE);
    }
    ASSERT(json_is_true(json_object_get(
        fx_event(&f, fx_find(&f, "compaction_completed", NULL, (size_t)k - 1)),
        "fallback")));
  }
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  ASSERT_STR_EQ(jstr(ev_of(&f, "error"), "code_name"), "ECOMPACT");
  fx_finish(&f);
  return 0;
}

/* Nothing can be dropped and the request is still above 95%: refused
 * with context_limit_exceeded before anything is sent. */
TEST_IMPL(compact_refuses_above_95) {
  fx_t f;
  const json_t *e;

  fx_init(&f,
          "usage_from_request: {bytes_per_token: 4}\n"
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{text: never}]}\n");
  f.opts.context_window = 4000;
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  write_files(&f, 1, 20000);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  e = ev_of(&f, "error");
  ASSERT_STR_EQ(jstr(e, "code_name"), "ECONTEXT");
  ASSERT_NOT_NULL(strstr(jstr(e, "message"), "context_limit_exceeded"));
  ASSERT_EQ(fx_requests(&f), 1);
  fx_finish(&f);
  return 0;
}

/* A resumed session already far over the window: the summary request is
 * bounded to 80% of it (oldest exchanges left out, with a notice). */
TEST_IMPL(compact_resumed_over_window) {
  fx_t f;
  json_t *msgs = json_array();
  json_t *h;
  char *text;
  char *big = malloc(4001);
  int i;
  long s;

  memset(big, 'q', 4000);
  big[4000] = '\0';
  json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role", "user",
                                        "content", "type", "text", "text", GOAL));
  for (i = 0; i < 20; i++) {
    char id[16];

    snprintf(id, sizeof(id), "old%d", i);
    json_array_append_new(
        msgs, json_pack("{s:s, s:[{s:s, s:s, s:s, s:{s:s}}]}", "role",
                        "assistant", "content", "type", "tool_use", "id", id,
                        "name", "read_file", "input", "path", "f1"));
    json_array_append_new(
        msgs, json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "role", "user", "content",
                        "type", "tool_result", "tool_use_id", id, "content",
                        big));
  }
  json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role",
                                        "assistant", "content", "type", "text",
                                        "text", "ok"));
  h = json_pack("{s:n, s:o}", "system", "messages", msgs);
  text = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  free(big);
  fx_init(&f, "usage_from_request: {bytes_per_token: 4}\n"
              "responses:\n"
              "  - reply: {content: [{text: \"## Goal\\nresumed\"}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.context_window = 10000;
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  ASSERT_EQ(al_agent_load_history_json(f.agent, text, strlen(text)), 0);
  free(text);
  fx_run(&f, "continue");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "history_repaired"), 0);
  ASSERT_EQ(fx_requests(&f), 2);
  /* The summary request (the first one sent) fits 80% of the window. */
  s = fx_find(&f, "usage", NULL, 0);
  ASSERT(jint(fx_event(&f, s), "context_tokens") <= 8000);
  ASSERT(body_has(&f, 0, "earlier messages were left out of this summary"));
  ASSERT(body_has(&f, 1, "resumed"));
  ASSERT(body_has(&f, 1, GOAL));
  ASSERT(body_has(&f, 1, "continue"));
  fx_finish(&f);
  return 0;
}

/* max_messages (seed 004): the request never holds more messages than the
 * limit; cuts are safe (no repair, nothing refused) and the first user
 * message stays. */
TEST_IMPL(compact_max_messages) {
  fx_t f;
  size_t i;
  al_buf_t y;
  int k;

  al_buf_init(&y, 1 << 16);
  al_buf_append_str(&y, "responses:\n");
  for (k = 1; k <= 8; k++) {
    al_buf_printf(&y, "  - reply: {content: [{tool_use: {id: t%d, name: "
                      "list_directory, input: {path: .}}}]}\n", k);
  }
  al_buf_append_str(&y, "  - reply: {content: [{text: done}]}\n");
  fx_init(&f, y.data);
  al_buf_free(&y);
  f.opts.max_messages = 6;
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "history_repaired"), 0);
  ASSERT(fx_count(&f, "compaction_completed") >= 1);
  ASSERT_STR_EQ(jstr(ev_of(&f, "compaction_completed"), "trigger"),
                "max_messages");
  for (i = 0; i < fx_requests(&f); i++) {
    ASSERT_LE(json_array_size(json_object_get(fx_request(&f, i)->body,
                                              "messages")),
              6);
    ASSERT(body_has(&f, i, GOAL));
  }
  fx_finish(&f);
  return 0;
}

/* The mock's expect_request step refuses a request that lacks (or holds)
 * a string, with a clear 400: how the long-session tests make the server
 * check the goal itself. */
TEST_IMPL(compact_mock_expect_request) {
  fx_t f;
  const json_t *e;

  fx_init(&f, "responses:\n"
              "  - expect_request: {contains: \"GOAL-ZEBRA\", not_contains: \"forbidden\"}\n"
              "    reply: {content: [{text: fine}]}\n"
              "  - expect_request: {contains: \"GOAL-ZEBRA\"}\n"
              "    reply: {content: [{text: never}]}\n");
  f.opts.retry_max_attempts = 1;
  fx_start(&f);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  /* Reset the conversation: a fresh agent without the goal. */
  fx_finish(&f);
  fx_init(&f, "responses:\n"
              "  - expect_request: {contains: \"GOAL-ZEBRA\"}\n"
              "    reply: {content: [{text: never}]}\n");
  f.opts.retry_max_attempts = 1;
  fx_start(&f);
  fx_run(&f, "no canary here");
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  e = fx_event(&f, fx_find(&f, "api_error", NULL, 0));
  ASSERT_EQ(json_integer_value(json_object_get(e, "status")), 400);
  ASSERT_NOT_NULL(strstr(jstr(e, "message"),
                         "expect_request: the request body does not contain "
                         "'GOAL-ZEBRA'"));
  ASSERT(!fx_request(&f, 0)->valid);
  fx_finish(&f);
  return 0;
}

static void compact_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)j;
  if (ev->type == AL_EVENT_STREAM_REQUEST_START && ev->run == 1 &&
      fx_count(f, "stream_request_start") == 3) {
    ASSERT_EQ(al_agent_compact(f->agent, NULL), 0);
  }
}

/* Manual compaction during a run waits for the next request; when the run
 * ends first, it runs before the next run's first request. */
TEST_IMPL(compact_manual_deferred) {
  fx_t f;

  fx_init(&f,
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{text: first done}]}\n"
          "  - reply: {content: [{text: \"## Goal\\ndeferred summary\"}]}\n"
          "  - reply: {content: [{text: second done}]}\n");
  f.opts.micro_min_tokens = -1;
  f.hook = compact_hook;
  fx_start(&f);
  write_files(&f, 2, 100);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "compaction_started"), 0);
  f.hook = NULL;
  fx_run(&f, "and then?");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "compaction_completed"), 1);
  ASSERT_STR_EQ(jstr(ev_of(&f, "compaction_started"), "trigger"), "manual");
  ASSERT(body_has(&f, 4, "deferred summary"));
  ASSERT(body_has(&f, 4, "and then?"));
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* A second compaction replaces the first summary instead of stacking it
 * (and its cut still lands on a safe point: the server accepts all). */
TEST_IMPL(compact_twice_replaces_summary) {
  fx_t f;
  const json_t *m0;
  const json_t *b;
  size_t i;
  size_t heads = 0;
  int k;

  fx_init(&f,
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{text: first done}]}\n"
          "  - reply: {content: [{text: \"## Goal\\nSUMMARY-ONE\"}]}\n"
          "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{text: second done}]}\n"
          "  - reply: {content: [{text: \"## Goal\\nSUMMARY-TWO\"}]}\n"
          "  - reply: {content: [{text: third done}]}\n");
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  write_files(&f, 2, 100);
  fx_run(&f, GOAL);
  for (k = 1; k <= 2; k++) {
    ASSERT_EQ(al_agent_compact(f.agent, NULL), 0);
    while (fx_count(&f, "compaction_completed") < (size_t)k) {
      uv_run(&f.loop, UV_RUN_ONCE);
    }
    if (k == 1) {
      fx_run(&f, "more");
    }
  }
  fx_run(&f, "last");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "history_repaired"), 0);
  m0 = json_array_get(
      json_object_get(fx_request(&f, fx_requests(&f) - 1)->body, "messages"),
      0);
  json_array_foreach(json_object_get(m0, "content"), i, b) {
    const char *t = jstr(b, "text");

    if (t != NULL && strncmp(t, "[agentloop compacted", 20) == 0) {
      heads++;
      ASSERT_NOT_NULL(strstr(t, "SUMMARY-TWO"));
    }
  }
  ASSERT_EQ(heads, 1);
  ASSERT_STR_EQ(jstr(json_array_get(json_object_get(m0, "content"), 0), "text"),
                GOAL);
  fx_finish(&f);
  return 0;
}
