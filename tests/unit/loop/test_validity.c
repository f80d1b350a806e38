/* The validity gate (docs/context.md): repairs of the history, and the
 * gate before every send, through the agent, for both providers. */
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "loop/agent_int.h"
#include "loop/validity.h"
#include "test.h"

#define jstr fx_jstr

static json_t *J(const char *text) {
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);

  if (j == NULL) {
    AL_TEST_FAIL("bad test JSON: %s: %s", e.text, text);
  }
  return j;
}

static void expect_repair(const char *in, const char *out, const char *rules) {
  json_t *msgs = J(in);
  json_t *want = J(out);
  json_t *done = json_array();
  json_t *body;
  json_t *got_rules = json_array();
  al_validate_verdict_t v;
  const json_t *d;
  size_t i;
  char *a;
  char *b;

  ASSERT(al__validity_repair(msgs, done) > 0);
  if (!json_equal(msgs, want)) {
    a = json_dumps(msgs, JSON_COMPACT);
    b = json_dumps(want, JSON_COMPACT);
    AL_TEST_FAIL("repair of %s\n  got:      %s\n  expected: %s", in, a, b);
  }
  json_array_foreach(done, i, d) {
    json_array_append(got_rules, json_object_get(d, "rule"));
  }
  a = json_dumps(got_rules, JSON_COMPACT);
  ASSERT_STR_EQ(a, rules);
  free(a);
  /* What comes out is accepted, and a second repair finds nothing. */
  body = json_pack("{s:s, s:i, s:O}", "model", "m", "max_tokens", 10,
                   "messages", msgs);
  if (!al__validate_anthropic(body, NULL, &v)) {
    AL_TEST_FAIL("repaired history refused: %s", v.message);
  }
  ASSERT_EQ(al__validity_repair(msgs, NULL), 0);
  json_decref(body);
  json_decref(got_rules);
  json_decref(done);
  json_decref(want);
  json_decref(msgs);
}

#define U(c) "{\"role\":\"user\",\"content\":[" c "]}"
#define A(c) "{\"role\":\"assistant\",\"content\":[" c "]}"
#define T(s) "{\"type\":\"text\",\"text\":\"" s "\"}"
#define USE(id) "{\"type\":\"tool_use\",\"id\":\"" id "\",\"name\":\"x\",\"input\":{}}"
#define RES(id) "{\"type\":\"tool_result\",\"tool_use_id\":\"" id "\",\"content\":\"r" id "\"}"
#define SYN(id)                                                              \
  "{\"type\":\"tool_result\",\"tool_use_id\":\"" id "\",\"content\":\"Error: " \
  "no result was recorded for this tool call (agentloop repaired the "       \
  "history before sending it)\",\"is_error\":true}"

TEST_IMPL(validity_repairs) {
  /* A result missing: a synthetic error result, in tool_use order. */
  expect_repair("[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("a")) "]",
                "[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("a") "," SYN("b")) "]",
                "[\"tool_use_without_result\"]");
  /* No results message at all: the two assistant messages join (as the
   * API reads them), then the result follows. */
  expect_repair("[" U(T("go")) "," A(USE("a")) "," A(T("hm")) "]",
                "[" U(T("go")) "," A(USE("a") "," T("hm")) "," U(SYN("a")) "]",
                "[\"same_role_joined\",\"tool_use_without_result\"]");
  /* The turn ends with the tool_use: a results message is added. */
  expect_repair("[" U(T("go")) "," A(USE("a")) "]",
                "[" U(T("go")) "," A(USE("a")) "," U(SYN("a")) "]",
                "[\"tool_use_without_result\"]");
  /* A result nobody asked for is dropped; its message keeps its text. */
  expect_repair("[" U(T("go")) "," A(T("ok")) "," U(RES("z") "," T("more")) "]",
                "[" U(T("go")) "," A(T("ok")) "," U(T("more")) "]",
                "[\"tool_result_without_use\"]");
  /* Duplicate results: the first stays; results go first, in order. */
  expect_repair("[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(T("note") "," RES("b") "," RES("a") "," RES("b")) "]",
                "[" U(T("go")) "," A(USE("a") "," USE("b")) "," U(RES("a") "," RES("b") "," T("note")) "]",
                "[\"duplicate_tool_result\",\"tool_results_first\"]");
  /* A message left empty goes, and its neighbours of one role join. */
  expect_repair("[" U(T("go")) "," A(T("ok")) "," U(RES("z")) "," A(T("again")) "]",
                "[" U(T("go")) "," A(T("ok") "," T("again")) "]",
                "[\"tool_result_without_use\",\"empty_content\",\"same_role_joined\"]");
  return 0;
}

/* Not repairable: the rule is named, nothing is changed. */
TEST_IMPL(validity_unrepairable_named) {
  json_t *msgs = J("[" U(T("go")) "," A(USE("a")) "," U(RES("a")) "," A(USE("a")) "," U(RES("a")) "]");
  json_t *copy = json_deep_copy(msgs);
  json_t *body;
  al_validate_verdict_t v;

  ASSERT_EQ(al__validity_repair(msgs, NULL), 0);
  ASSERT(json_equal(msgs, copy));
  body = json_pack("{s:s, s:i, s:O}", "model", "m", "max_tokens", 10,
                   "messages", msgs);
  ASSERT(!al__validate_anthropic(body, NULL, &v));
  ASSERT_STR_EQ(v.rule, "duplicate_tool_use_id");
  json_decref(body);
  json_decref(copy);
  json_decref(msgs);
  return 0;
}

static const char *tool_then_text =
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: t1, name: list_directory, input: {path: .}}}]}\n"
    "  - reply: {content: [{text: listed}]}\n"
    "  - reply: {content: [{text: second run}]}\n";

/* Drops the tool_result of message 2 (a bug elsewhere would do this). */
static void lose_result(fx_t *f) {
  json_t *msgs = al__agent_messages(f->agent);
  json_t *u = json_array_get(msgs, 2);

  ASSERT_STR_EQ(jstr(u, "role"), "user");
  ASSERT_STR_EQ(jstr(json_array_get(json_object_get(u, "content"), 0), "type"),
                "tool_result");
  json_array_remove(json_object_get(u, "content"), 0);
}

static void gate_repairs(const char *provider) {
  fx_t f;
  const json_t *ev;
  char *body;

  fx_init_proto(&f, tool_then_text, provider);
  fx_start(&f);
  fx_run(&f, "list");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  lose_result(&f);
  fx_run(&f, "and again");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 3);
  fx_assert_valid(&f); /* nothing the server refused */
  ASSERT_EQ(fx_count(&f, "history_repaired"), 1);
  ev = fx_event(&f, fx_find(&f, "history_repaired", NULL, 0));
  ASSERT_EQ(json_integer_value(json_object_get(ev, "count")), 3);
  body = json_dumps(json_object_get(ev, "repairs"), JSON_COMPACT);
  ASSERT_STR_EQ(body, "[{\"rule\":\"empty_content\",\"message\":2},"
                      "{\"rule\":\"same_role_joined\",\"message\":2},"
                      "{\"rule\":\"tool_use_without_result\",\"message\":2,"
                      "\"id\":\"t1\"}]");
  free(body);
  /* The repaired request went out before the run's stream_request_start. */
  ASSERT(fx_find(&f, "history_repaired", NULL, 0) <
         fx_find(&f, "stream_request_start", NULL, 2));
  body = json_dumps(fx_request(&f, 2)->body, JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(body, "agentloop repaired the history"));
  free(body);
  fx_finish(&f);
}

TEST_IMPL(validity_gate_repairs_anthropic) {
  gate_repairs("anthropic");
  return 0;
}

TEST_IMPL(validity_gate_repairs_openai) {
  gate_repairs("openai");
  return 0;
}

/* An unrepairable history is never sent: the run fails with EHISTORY
 * naming the rule. */
TEST_IMPL(validity_gate_refuses) {
  fx_t f;
  const json_t *ev;
  json_t *msgs;
  json_t *use;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: t1, name: list_directory, input: {path: .}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t2, name: list_directory, input: {path: .}}}]}\n"
              "  - reply: {content: [{text: listed}]}\n");
  fx_start(&f);
  fx_run(&f, "list");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  /* Give the second call the first one's id, result and all. */
  msgs = al__agent_messages(f.agent);
  use = json_array_get(json_object_get(json_array_get(msgs, 3), "content"), 0);
  json_object_set_new(use, "id", json_string("t1"));
  json_object_set_new(
      json_array_get(json_object_get(json_array_get(msgs, 4), "content"), 0),
      "tool_use_id", json_string("t1"));
  fx_run(&f, "again");
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  ev = fx_event(&f, fx_find(&f, "error", NULL, 0));
  ASSERT_STR_EQ(jstr(ev, "code_name"), "EHISTORY");
  ASSERT_NOT_NULL(strstr(jstr(ev, "message"), "duplicate_tool_use_id"));
  ASSERT_EQ(fx_requests(&f), 3); /* nothing more was sent */
  ASSERT_EQ(fx_count(&f, "stream_request_start"), 3);
  fx_finish(&f);
  return 0;
}
