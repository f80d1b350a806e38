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

/* A scenario that plays `sse` byte for byte, then `reply` (one scenario
 * list item); starts the agent on it, runs `prompt` and requires the run
 * to end final. y holds the scenario for the fixture's life. */
static void run_raw(fx_t *f, al_buf_t *y, size_t cap, const char *sse,
                    const char *reply, const char *prompt) {
  al_buf_init(y, cap);
  al_buf_append_str(y, "responses:\n");
  append_raw(y, sse);
  al_buf_append_str(y, reply);
  fx_init(f, y->data);
  fx_start(f);
  fx_run(f, prompt);
  if (strcmp(fx_last_type(f), "final") != 0) {
    long e = fx_find(f, "error", NULL, 0);

    AL_TEST_FAIL("ended with %s: %s", fx_last_type(f),
                 e >= 0 ? jstr(fx_event(f, e), "message") : "");
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

    run_raw(&f, &y, (size_t)1 << 24, sse,
            "  - reply: {content: [{text: 'libuv 1.51 is out.'}], "
            "usage: {input_tokens: 5200}}\n",
            "libuv news");
    free(sse);
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

/* ---- defect 14: the validity gate's orphan beside real results ------------ */

static json_t *J(const char *text) {
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);

  if (j == NULL) {
    AL_TEST_FAIL("bad test JSON: %s: %s", e.text, text);
  }
  return j;
}

#define U(c) "{\"role\":\"user\",\"content\":[" c "]}"
#define A(c) "{\"role\":\"assistant\",\"content\":[" c "]}"
#define T(s) "{\"type\":\"text\",\"text\":\"" s "\"}"
#define USE(id) \
  "{\"type\":\"tool_use\",\"id\":\"" id "\",\"name\":\"x\",\"input\":{}}"
#define RES(id)                                                       \
  "{\"type\":\"tool_result\",\"tool_use_id\":\"" id "\",\"content\":" \
  "\"r" id "\"}"

/* One message answers the calls a and b and holds a result of a call no
 * one made (between, before and after the real ones): only that one goes,
 * the real results stay whole and in order, one repair named. */
static void orphan_case(const char *in, const char *want_text) {
  json_t *msgs = J(in);
  json_t *want = J(want_text);
  json_t *done = json_array();
  char *got;

  ASSERT_EQ(al__validity_repair(msgs, done), 1);
  if (!json_equal(msgs, want)) {
    got = json_dumps(msgs, JSON_COMPACT);
    AL_TEST_FAIL("repair of %s\n  got:      %s\n  expected: %s", in, got,
                 want_text);
  }
  got = json_dumps(done, JSON_COMPACT);
  ASSERT_STR_EQ(got, "[{\"rule\":\"tool_result_without_use\",\"message\":2,"
                     "\"id\":\"ghost\"}]");
  free(got);
  json_decref(done);
  json_decref(want);
  json_decref(msgs);
}

static void gate_drops_orphan(const char *provider) {
  fx_t f;
  json_t *u;
  json_t *before;
  const json_t *sent;
  const json_t *ev;
  char *text;

  fx_init_proto(&f,
                "responses:\n"
                "  - reply: {content: [{tool_use: {id: t1, name: "
                "list_directory, input: {path: .}}}]}\n"
                "  - reply: {content: [{text: listed}]}\n"
                "  - reply: {content: [{text: again}]}\n",
                provider);
  fx_start(&f);
  fx_run(&f, "list");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  u = json_array_get(al__agent_messages(f.agent), 2);
  before = json_deep_copy(json_object_get(u, "content"));
  json_array_append_new(json_object_get(u, "content"), J(RES("ghost")));
  fx_run(&f, "and again");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "history_repaired"), 1);
  ev = fx_event(&f, fx_find(&f, "history_repaired", NULL, 0));
  text = json_dumps(json_object_get(ev, "repairs"), JSON_COMPACT);
  ASSERT_STR_EQ(text, "[{\"rule\":\"tool_result_without_use\",\"message\":2,"
                      "\"id\":\"ghost\"}]");
  free(text);
  /* The history the agent keeps answers t1 with its own result only. */
  u = json_array_get(al__agent_messages(f.agent), 2);
  ASSERT(json_equal(json_object_get(u, "content"), before));
  /* And the request carried t1's result, not the ghost's. */
  sent = fx_request(&f, 2)->body;
  text = json_dumps(sent, JSON_COMPACT);
  ASSERT_NULL(strstr(text, "ghost"));
  ASSERT_NOT_NULL(strstr(text, "t1"));
  free(text);
  json_decref(before);
  fx_finish(&f);
}

TEST_IMPL(validity_orphan_beside_real_results) {
  orphan_case("[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("a") "," RES("ghost") "," RES("b")) "]",
              "[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("a") "," RES("b")) "]");
  orphan_case("[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("ghost") "," RES("a") "," RES("b") "," T("note")) "]",
              "[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("a") "," RES("b") "," T("note")) "]");
  orphan_case("[" U(T("go")) "," A(USE("a")) "," U(RES("a") "," RES("ghost")) "," A(T("ok")) "]",
              "[" U(T("go")) "," A(USE("a")) "," U(RES("a")) "," A(T("ok")) "]");
  gate_drops_orphan("anthropic");
  gate_drops_orphan("openai");
  return 0;
}

/* ---- defect 14: the 95% refusal after compaction, at its edge ------------- */

/* A first prompt nothing can be compacted out of (one message): the
 * automatic compaction finds nothing to drop, and the request then
 * needs P tokens. With a window where P is 95% (floor) it is sent; where
 * it is 96%, the run ends with context_limit_exceeded. P is what an agent
 * holding that one message projects before anything was sent. */
TEST_IMPL(compact_refusal_at_95_edge) {
  static const char *const yaml = "responses:\n"
                                  "  - reply: {content: [{text: sent}]}\n";
  char *big = malloc(48001);
  json_t *h;
  char *hist;
  int64_t p;
  int pct;
  fx_t f;

  memset(big, 'z', 48000);
  memcpy(big, "GOAL ", 5);
  big[48000] = '\0';
  h = json_pack("{s:n, s:[{s:s, s:[{s:s, s:s}]}]}", "system", "messages",
                "role", "user", "content", "type", "text", "text", big);
  hist = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  fx_init(&f, yaml);
  f.opts.context_window = 1000000;
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  ASSERT_EQ(al_agent_load_history_json(f.agent, hist, strlen(hist)), 0);
  p = al__agent_projected(f.agent);
  ASSERT(p > 12000);
  fx_finish(&f);
  free(hist);
  for (pct = 95; pct <= 96; pct++) {
    const json_t *e;

    fx_init(&f, yaml);
    /* The middle of the window range where P is pct% (floor). */
    f.opts.context_window = (uint32_t)(p * 1000 / (pct * 10 + 5));
    f.opts.micro_min_tokens = -1;
    fx_start(&f);
    fx_run(&f, big);
    ASSERT_EQ(fx_count(&f, "compaction_completed"), 1);
    e = fx_event(&f, fx_find(&f, "compaction_completed", NULL, 0));
    ASSERT_EQ(jint(e, "tokens_after") * 100 / f.opts.context_window, pct);
    if (pct == 95) {
      ASSERT_STR_EQ(fx_last_type(&f), "final");
      ASSERT_EQ(fx_requests(&f), 1);
    } else {
      ASSERT_STR_EQ(fx_last_type(&f), "error");
      e = fx_event(&f, fx_find(&f, "error", NULL, 0));
      ASSERT_STR_EQ(jstr(e, "code_name"), "ECONTEXT");
      ASSERT_NOT_NULL(strstr(jstr(e, "message"),
                             "(96% of the"));
      ASSERT_NOT_NULL(strstr(jstr(e, "message"),
                             "remain after compaction"));
      ASSERT_EQ(fx_requests(&f), 0);
    }
    fx_finish(&f);
  }
  free(big);
  return 0;
}

/* ---- defect 14: the first user message's blocks survive compaction ------ */

/* The first user message has two text blocks (the prompt and, say, what a
 * hook added): after a compaction the first message starts with both,
 * byte for byte, then the summary. */
TEST_IMPL(compact_keeps_first_message_blocks) {
  static const char *const hook_text =
      "HOOK-CONTEXT-81: branch main, 3 files changed \\u00e9\\n";
  json_t *msgs = json_array();
  json_t *first;
  json_t *h;
  const json_t *m0;
  const json_t *c;
  char *text;
  char *bigq = malloc(4001);
  int i;

  memset(bigq, 'q', 4000);
  bigq[4000] = '\0';
  first = json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:s}]}", "role", "user",
                    "content", "type", "text", "text",
                    "GOAL-ZEBRA-42: count the x", "type", "text", "text",
                    hook_text);
  json_array_append(msgs, first);
  for (i = 0; i < 20; i++) {
    char id[16];

    snprintf(id, sizeof(id), "old%d", i);
    json_array_append_new(
        msgs, json_pack("{s:s, s:[{s:s, s:s, s:s, s:{s:s}}]}", "role",
                        "assistant", "content", "type", "tool_use", "id", id,
                        "name", "read_file", "input", "path", "f1"));
    json_array_append_new(
        msgs, json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "role", "user",
                        "content", "type", "tool_result", "tool_use_id", id,
                        "content", bigq));
  }
  json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role",
                                        "assistant", "content", "type", "text",
                                        "text", "ok"));
  h = json_pack("{s:n, s:o}", "system", "messages", msgs);
  text = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  free(bigq);
  {
    fx_t f;

    fx_init(&f, "usage_from_request: {bytes_per_token: 4}\n"
                "responses:\n"
                "  - reply: {content: [{text: \"## Goal\\nsummed\"}]}\n"
                "  - reply: {content: [{text: done}]}\n");
    f.opts.context_window = 10000;
    f.opts.micro_min_tokens = -1;
    fx_start(&f);
    ASSERT_EQ(al_agent_load_history_json(f.agent, text, strlen(text)), 0);
    fx_run(&f, "continue");
    ASSERT_STR_EQ(fx_last_type(&f), "final");
    ASSERT_EQ(fx_count(&f, "compaction_completed"), 1);
    ASSERT_EQ(fx_requests(&f), 2);
    m0 = json_array_get(json_object_get(fx_request(&f, 1)->body, "messages"),
                        0);
    c = json_object_get(m0, "content");
    ASSERT(json_array_size(c) >= 3);
    ASSERT(json_equal(json_array_get(c, 0),
                      json_array_get(json_object_get(first, "content"), 0)));
    ASSERT(json_equal(json_array_get(c, 1),
                      json_array_get(json_object_get(first, "content"), 1)));
    ASSERT_NOT_NULL(strstr(jstr(json_array_get(c, 2), "text"), "summed"));
    /* The history the agent keeps too. */
    m0 = json_array_get(al__agent_messages(f.agent), 0);
    ASSERT(json_equal(json_array_get(json_object_get(m0, "content"), 1),
                      json_array_get(json_object_get(first, "content"), 1)));
    fx_finish(&f);
  }
  json_decref(first);
  free(text);
  return 0;
}

/* ---- defect 14: NUL in a content_block_start block's own payload -------- */

/* Text and a tool call whose NUL (\u0000) arrive in content_block_start
 * itself, not in a delta: they become U+FFFD in the events, the history
 * and the next request, as NUL from deltas do; the thinking block before
 * them is sent back as it came. */
TEST_IMPL(nul_in_block_start_payload) {
  static const char *const sse =
      "event: message_start\n"
      "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_n1\","
      "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"mock-model\","
      "\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
      "{\"type\":\"thinking\",\"thinking\":\"think\",\"signature\":"
      "\"\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"signature_delta\",\"signature\":\"c2ln\"}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
      "{\"type\":\"text\",\"text\":\"pre\\u0000start\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":"
      "\"text_delta\",\"text\":\" more\"}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":"
      "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"list_directory\","
      "\"input\":{\"path\":\"no\\u0000such\"}}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
      "event: message_delta\n"
      "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
      "\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}"
      "\n\n"
      "event: message_stop\n"
      "data: {\"type\":\"message_stop\"}\n\n";
  const json_t *msgs;
  const json_t *a;
  const json_t *c;
  char *body;
  al_buf_t y;
  size_t i;
  fx_t f;

  run_raw(&f, &y, (size_t)1 << 20, sse,
          "  - reply: {content: [{text: done}]}\n", "go");
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  /* The assistant message as the next request carried it. */
  msgs = json_object_get(fx_request(&f, 1)->body, "messages");
  a = json_array_get(msgs, 1);
  ASSERT_STR_EQ(jstr(a, "role"), "assistant");
  c = json_object_get(a, "content");
  ASSERT_STR_EQ(jstr(json_array_get(c, 0), "thinking"), "think");
  ASSERT_STR_EQ(jstr(json_array_get(c, 0), "signature"), "c2ln");
  ASSERT_STR_EQ(jstr(json_array_get(c, 1), "text"),
                "pre\xef\xbf\xbdstart more");
  ASSERT_STR_EQ(jstr(json_object_get(json_array_get(c, 2), "input"), "path"),
                "no\xef\xbf\xbdsuch");
  /* The tool was called with the cleaned path. */
  i = (size_t)fx_find(&f, "tool_use_started", NULL, 0);
  body = json_dumps(fx_event(&f, (long)i), JSON_COMPACT);
  ASSERT_NULL(strstr(body, "\\u0000"));
  ASSERT_NOT_NULL(strstr(body, "no\xef\xbf\xbdsuch"));
  free(body);
  /* Nothing in the history holds a NUL. */
  body = json_dumps(al__agent_messages(f.agent), JSON_COMPACT);
  ASSERT_NULL(strstr(body, "\\u0000"));
  free(body);
  fx_finish(&f);
  al_buf_free(&y);
  return 0;
}

/* NUL in a thinking block stays: its bytes are what the signature covers, so
 * the scrub leaves it, and the next request must carry it as \u0000 (valid
 * JSON the API accepts) instead of being refused by the validity gate as
 * "not valid JSON" (jansson refuses \u0000 unless told to allow it). */
TEST_IMPL(nul_in_thinking_replayed) {
  static const char *const sse =
      "event: message_start\n"
      "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_n2\","
      "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"mock-model\","
      "\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
      "{\"type\":\"thinking\",\"thinking\":\"th\\u0000ink\",\"signature\":"
      "\"\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"thinking_delta\",\"thinking\":\" on\\u0000\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"signature_delta\",\"signature\":\"c2ln\"}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
      "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"list_directory\","
      "\"input\":{\"path\":\".\"}}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
      "event: message_delta\n"
      "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
      "\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}"
      "\n\n"
      "event: message_stop\n"
      "data: {\"type\":\"message_stop\"}\n\n";
  static const char want[] = "th\0ink on\0";
  const json_t *th;
  al_buf_t y;
  fx_t f;

  run_raw(&f, &y, (size_t)1 << 20, sse,
          "  - reply: {content: [{text: done}]}\n", "go");
  ASSERT_EQ(fx_requests(&f), 2);
  th = json_array_get(
      json_object_get(
          json_array_get(json_object_get(fx_request(&f, 1)->body, "messages"),
                         1),
          "content"),
      0);
  ASSERT_STR_EQ(jstr(th, "type"), "thinking");
  ASSERT_EQ(json_string_length(json_object_get(th, "thinking")),
            sizeof(want) - 1);
  ASSERT(memcmp(json_string_value(json_object_get(th, "thinking")), want,
                sizeof(want) - 1) == 0);
  ASSERT_STR_EQ(jstr(th, "signature"), "c2ln");
  fx_finish(&f);
  al_buf_free(&y);
  return 0;
}
