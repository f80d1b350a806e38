/* Tests of the conversation history (src/loop/history.c).
 *
 * Every scenario builds its history through the API, then builds a real
 * request body with al_provider_build_request for both providers and runs
 * it through the mock server's validators, which answer as the APIs do
 * (PROTOCOLS §2.3, §3.1): the history must be sendable, and our own
 * al__history_validate must reach the same verdict. Hand-broken histories
 * check the other direction: both validators must refuse them. */
#include "loop/history.h"
#include "mockllm/mockllm.h"
#include "provider/provider.h"
#include "test.h"

/* JSON from a literal written with single quotes (tests only). */
static json_t *J(const char *s) {
  char buf[4096];
  size_t i;
  json_error_t e;
  json_t *j;

  ASSERT(strlen(s) < sizeof(buf));
  for (i = 0; s[i] != '\0'; i++) {
    buf[i] = s[i] == '\'' ? '"' : s[i];
  }
  buf[i] = '\0';
  j = json_loads(buf, 0, &e);
  if (j == NULL) {
    AL_TEST_FAIL("bad test JSON: %s: %s", e.text, buf);
  }
  return j;
}

static json_t *tools_json(void) {
  return J("[{'name':'bash','description':'run','input_schema':"
           "{'type':'object'}},{'name':'read','description':'read',"
           "'input_schema':{'type':'object'}}]");
}

/* Builds the request body for one provider from messages (+ system). */
static json_t *build_body(const al_provider_t *p, const json_t *messages,
                          const char *system, bool tools) {
  al_provider_options_t o;
  al_provider_request_t r;
  json_t *t = tools ? tools_json() : NULL;
  json_t *body;

  al_provider_options_init(&o);
  o.model = "test-model";
  o.system = system;
  o.tools = t;
  ASSERT_EQ(al_provider_build_request(p, messages, &o, &r), 0);
  body = json_loads(r.body, 0, NULL);
  ASSERT_NOT_NULL(body);
  al_provider_request_free(&r);
  json_decref(t);
  return body;
}

static bool mock_valid(const al_provider_t *p, const json_t *messages,
                       const char *system, char *msg, size_t len) {
  json_t *body = build_body(p, messages, system, true);
  al_mockllm_verdict_t v;
  bool ok = p == &al_provider_anthropic
                ? al_mockllm_validate_anthropic(body, NULL, &v)
                : al_mockllm_validate_openai(body, NULL, &v);

  snprintf(msg, len, "%s", ok ? "" : v.message);
  json_decref(body);
  return ok;
}

/* The history must be valid for both providers, by both validators. */
static void check_both(const al_history_t *h) {
  char why[512];
  char msg[1024];
  const json_t *m = al__history_to_json(h);

  if (al__history_validate(h, why, sizeof(why)) != 0) {
    AL_TEST_FAIL("al__history_validate: %s", why);
  }
  if (!mock_valid(&al_provider_anthropic, m, al__history_system(h), msg,
                  sizeof(msg))) {
    AL_TEST_FAIL("anthropic validator: %s", msg);
  }
  if (!mock_valid(&al_provider_openai, m, al__history_system(h), msg,
                  sizeof(msg))) {
    AL_TEST_FAIL("openai validator: %s", msg);
  }
}

static const json_t *msg_at(const al_history_t *h, size_t i) {
  const json_t *m = json_array_get(al__history_to_json(h), i);

  ASSERT_NOT_NULL(m);
  return m;
}

static const char *role_at(const al_history_t *h, size_t i) {
  return json_string_value(json_object_get(msg_at(h, i), "role"));
}

static const json_t *block_at(const al_history_t *h, size_t i, size_t b) {
  const json_t *blk =
      json_array_get(json_object_get(msg_at(h, i), "content"), b);

  ASSERT_NOT_NULL(blk);
  return blk;
}

static const char *field(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

static char *dump(const al_history_t *h) {
  return json_dumps(al__history_to_json(h), JSON_COMPACT | JSON_SORT_KEYS);
}

/* Commits a literal assistant message. */
static int commit(al_history_t *h, const char *literal) {
  json_t *m = J(literal);
  int err = al__history_commit_assistant(h, m);

  json_decref(m);
  return err;
}

#define THREE_TOOLS                                                         \
  "{'role':'assistant','content':[{'type':'text','text':'running'},"        \
  "{'type':'tool_use','id':'toolu_a','name':'bash','input':{'cmd':'ls'}},"  \
  "{'type':'tool_use','id':'toolu_b','name':'read','input':{'p':'x'}},"     \
  "{'type':'tool_use','id':'toolu_c','name':'bash','input':{}}]}"

TEST_IMPL(history_single_text_turn) {
  al_history_t h;

  al__history_init(&h);
  ASSERT_EQ(al__history_set_system(&h, "You are terse."), 0);
  ASSERT_EQ(al__history_append_user_text(&h, "hello"), 0);
  check_both(&h);
  ASSERT_EQ(commit(&h, "{'id':'msg_1','type':'message','role':'assistant',"
                       "'model':'m','content':[{'type':'text','text':'hi'}],"
                       "'stop_reason':'end_turn','stop_sequence':null,"
                       "'usage':{'input_tokens':3,'output_tokens':1}}"),
            0);
  ASSERT(!al__history_turn_open(&h));
  ASSERT_EQ(al__history_count(&h), 2);
  /* Only role and content are kept: the API rejects the other fields. */
  ASSERT_EQ(json_object_size(msg_at(&h, 1)), 2);
  ASSERT_STR_EQ(field(block_at(&h, 1, 0), "text"), "hi");
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* The system prompt is sent once, at top level (Anthropic) or as the one
 * first system message (OpenAI), never as a history message. */
TEST_IMPL(history_system_prompt_once) {
  al_history_t h;
  json_t *a, *o;
  size_t i, nsys = 0;

  al__history_init(&h);
  ASSERT_EQ(al__history_set_system(&h, "SYS"), 0);
  ASSERT_EQ(al__history_set_system(&h, "SYSTEM"), 0);
  ASSERT_EQ(al__history_append_user_text(&h, "q1"), 0);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'a1'}]}"),
            0);
  ASSERT_EQ(al__history_append_user_text(&h, "q2"), 0);
  check_both(&h);
  a = build_body(&al_provider_anthropic, al__history_to_json(&h),
                 al__history_system(&h), false);
  o = build_body(&al_provider_openai, al__history_to_json(&h),
                 al__history_system(&h), false);
  /* With cache_control on (the default) the system is one text block. */
  ASSERT_STR_EQ(field(json_array_get(json_object_get(a, "system"), 0), "text"),
                "SYSTEM");
  ASSERT_EQ(json_array_size(json_object_get(a, "system")), 1);
  ASSERT_EQ(json_array_size(json_object_get(a, "messages")), 3);
  for (i = 0; i < json_array_size(json_object_get(o, "messages")); i++) {
    if (strcmp(field(json_array_get(json_object_get(o, "messages"), i),
                     "role"), "system") == 0) {
      ASSERT_EQ(i, 0);
      nsys++;
    }
  }
  ASSERT_EQ(nsys, 1);
  json_decref(a);
  json_decref(o);
  al__history_free(&h);
  return 0;
}

/* S5.2 + S5.3: parallel tools whose results arrive in reverse order; the
 * history has them in tool_use order, in one user message. */
TEST_IMPL(history_parallel_results_reverse_order) {
  al_history_t h;
  json_t *o, *msgs;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "do three things"), 0);
  ASSERT_EQ(commit(&h, THREE_TOOLS), 0);
  ASSERT(al__history_turn_open(&h));
  ASSERT_EQ(al__history_pending(&h), 3);
  ASSERT_STR_EQ(al__history_open_id(&h, 0), "toolu_a");
  ASSERT_STR_EQ(al__history_open_id(&h, 2), "toolu_c");
  ASSERT_NE(al__history_validate(&h, NULL, 0), 0);

  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_c", "C", false), 0);
  ASSERT_EQ(al__history_close_turn(&h), AL_EBUSY);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_b", "B", false), 0);
  ASSERT_EQ(al__history_pending(&h), 1);
  ASSERT_EQ(al__history_close_turn(&h), AL_EBUSY);
  ASSERT_EQ(al__history_count(&h), 2);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_a", "A", false), 0);
  ASSERT_EQ(al__history_pending(&h), 0);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  ASSERT(!al__history_turn_open(&h));

  ASSERT_EQ(al__history_count(&h), 3);
  ASSERT_STR_EQ(role_at(&h, 2), "user");
  ASSERT_EQ(json_array_size(json_object_get(msg_at(&h, 2), "content")), 3);
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "tool_use_id"), "toolu_a");
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "content"), "A");
  ASSERT_STR_EQ(field(block_at(&h, 2, 1), "tool_use_id"), "toolu_b");
  ASSERT_STR_EQ(field(block_at(&h, 2, 2), "tool_use_id"), "toolu_c");
  ASSERT_STR_EQ(field(block_at(&h, 2, 2), "content"), "C");
  ASSERT_NULL(json_object_get(block_at(&h, 2, 0), "is_error"));
  check_both(&h);

  /* OpenAI: one tool message per call, in tool_call order. */
  o = build_body(&al_provider_openai, al__history_to_json(&h), NULL, true);
  msgs = json_object_get(o, "messages");
  ASSERT_EQ(json_array_size(msgs), 5);
  ASSERT_STR_EQ(field(json_array_get(msgs, 2), "tool_call_id"), "toolu_a");
  ASSERT_STR_EQ(field(json_array_get(msgs, 3), "tool_call_id"), "toolu_b");
  ASSERT_STR_EQ(field(json_array_get(msgs, 4), "tool_call_id"), "toolu_c");
  json_decref(o);

  /* S5.2: the model answers the results; the run can end. */
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'all done'}]}"),
            0);
  ASSERT(!al__history_turn_open(&h));
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* S5.4: an error result is sent with is_error true; content may also be a
 * list of blocks. */
TEST_IMPL(history_tool_error_result) {
  al_history_t h;
  json_t *blocks = J("[{'type':'text','text':'line 1'},"
                     "{'type':'text','text':'line 2'}]");

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':["
                       "{'type':'tool_use','id':'t1','name':'bash','input':{}},"
                       "{'type':'tool_use','id':'t2','name':'read',"
                       "'input':{}}]}"),
            0);
  ASSERT_EQ(al__history_add_tool_result_text(
                &h, "t1", "Error: Unknown tool 'nope'", true),
            0);
  ASSERT_EQ(al__history_add_tool_result(&h, "t2", blocks, false), 0);
  /* The stored copy is ours: changing the caller's value changes nothing. */
  json_array_clear(blocks);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  ASSERT(json_is_true(json_object_get(block_at(&h, 2, 0), "is_error")));
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "content"),
                "Error: Unknown tool 'nope'");
  ASSERT_EQ(json_array_size(json_object_get(block_at(&h, 2, 1), "content")),
            2);
  check_both(&h);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'the tool failed, sorry'}]}"),
            0);
  check_both(&h);
  json_decref(blocks);
  al__history_free(&h);
  return 0;
}

/* Thinking with its signature, redacted_thinking and server tool blocks go
 * back exactly as received, in order. */
TEST_IMPL(history_thinking_blocks_verbatim) {
  static const char content[] =
      "[{'type':'thinking','thinking':'let me think','signature':'EqQBCgIYAh"
      "IM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds'},"
      "{'type':'redacted_thinking','data':'EmwKAhgBEgy3va3pzix/LafPsn4a'},"
      "{'type':'text','text':'I will search','citations':null},"
      "{'type':'server_tool_use','id':'srvtoolu_1','name':'web_search',"
      "'input':{'query':'libuv'}},"
      "{'type':'web_search_tool_result','tool_use_id':'srvtoolu_1',"
      "'content':[{'type':'web_search_result','url':'https://libuv.org',"
      "'title':'libuv','encrypted_content':'abc'}]},"
      "{'type':'tool_use','id':'toolu_x','name':'bash','input':{'a':[1,2.5,"
      "null,{'b':'\\u00e9'}]}}]";
  al_history_t h;
  json_t *want = J(content);
  json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                          json_deep_copy(want));
  json_t *a;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "search"), 0);
  ASSERT_EQ(al__history_commit_assistant(&h, msg), 0);
  /* A server tool is not ours to answer: only toolu_x is open. */
  ASSERT_EQ(al__history_pending(&h), 1);
  ASSERT_STR_EQ(al__history_open_id(&h, 0), "toolu_x");
  ASSERT_EQ(al__history_add_tool_result_text(&h, "srvtoolu_1", "x", false),
            AL_ENOTFOUND);
  ASSERT(json_equal(json_object_get(msg_at(&h, 1), "content"), want));
  /* Our copy: the caller may free or change its message. */
  json_array_clear(json_object_get(msg, "content"));
  ASSERT_EQ(json_array_size(json_object_get(msg_at(&h, 1), "content")), 6);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_x", "ok", false), 0);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  check_both(&h);
  /* The Anthropic body carries the blocks unchanged. */
  a = build_body(&al_provider_anthropic, al__history_to_json(&h), NULL, true);
  ASSERT(json_equal(
      json_object_get(json_array_get(json_object_get(a, "messages"), 1),
                      "content"),
      want));
  json_decref(a);
  json_decref(msg);
  json_decref(want);
  al__history_free(&h);
  return 0;
}

/* Block types we do not know are kept as given (the API may add types). */
TEST_IMPL(history_unknown_block_kept) {
  al_history_t h;
  json_t *m = J("{'role':'assistant','content':[{'type':'text','text':'a'},"
                "{'type':'future_block','x':{'y':[true]}}]}");

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "q"), 0);
  ASSERT_EQ(al__history_commit_assistant(&h, m), 0);
  ASSERT(json_equal(json_object_get(msg_at(&h, 1), "content"),
                    json_object_get(m, "content")));
  ASSERT_EQ(al__history_validate(&h, NULL, 0), 0);
  json_decref(m);
  al__history_free(&h);
  return 0;
}

/* Cancel mid-tools: the results that arrived stay, the others become the
 * cancelled text with is_error, in tool_use order; late results are refused. */
TEST_IMPL(history_cancel_mid_tools) {
  al_history_t h;
  size_t i;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "three"), 0);
  ASSERT_EQ(commit(&h, THREE_TOOLS), 0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_b", "B done", false),
            0);
  ASSERT_EQ(al__history_cancel_open(&h, NULL), 0);
  ASSERT(!al__history_turn_open(&h));
  ASSERT_EQ(al__history_count(&h), 3);
  ASSERT_EQ(json_array_size(json_object_get(msg_at(&h, 2), "content")), 3);
  for (i = 0; i < 3; i++) {
    static const char *const ids[] = {"toolu_a", "toolu_b", "toolu_c"};

    ASSERT_STR_EQ(field(block_at(&h, 2, i), "tool_use_id"), ids[i]);
  }
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "content"),
                "operation cancelled by user");
  ASSERT(json_is_true(json_object_get(block_at(&h, 2, 0), "is_error")));
  ASSERT_STR_EQ(field(block_at(&h, 2, 1), "content"), "B done");
  ASSERT_NULL(json_object_get(block_at(&h, 2, 1), "is_error"));
  ASSERT_STR_EQ(field(block_at(&h, 2, 2), "content"),
                "operation cancelled by user");
  ASSERT(json_is_true(json_object_get(block_at(&h, 2, 2), "is_error")));
  check_both(&h);
  /* A killed tool reporting late changes nothing. */
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_a", "late", false),
            AL_ENOTFOUND);
  /* A second cancel has nothing to do. */
  ASSERT_EQ(al__history_cancel_open(&h, NULL), 0);
  ASSERT_EQ(al__history_count(&h), 3);
  /* The next run continues from a valid history (S5.8). */
  ASSERT_EQ(al__history_append_user_text(&h, "try again"), 0);
  ASSERT_EQ(al__history_count(&h), 3);
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* Cancel right after the commit, before any tool reported. */
TEST_IMPL(history_cancel_right_after_commit) {
  al_history_t h;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':["
                       "{'type':'tool_use','id':'t1','name':'bash','input':{}},"
                       "{'type':'tool_use','id':'t2','name':'bash',"
                       "'input':{}}]}"),
            0);
  ASSERT_EQ(al__history_cancel_open(&h, "stopped"), 0);
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "content"), "stopped");
  ASSERT_STR_EQ(field(block_at(&h, 2, 1), "tool_use_id"), "t2");
  ASSERT(json_is_true(json_object_get(block_at(&h, 2, 1), "is_error")));
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* S5.5: cancelled before any block: the empty reply is not committed, the
 * history ends with the user message, and the next text merges into it. */
TEST_IMPL(history_empty_assistant_not_committed) {
  al_history_t h;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "first"), 0);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[]}"), 0);
  ASSERT_EQ(al__history_count(&h), 1);
  ASSERT(!al__history_turn_open(&h));
  ASSERT_EQ(al__history_cancel_open(&h, NULL), 0);
  ASSERT_EQ(al__history_count(&h), 1);
  check_both(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "second"), 0);
  ASSERT_EQ(al__history_count(&h), 1);
  ASSERT_STR_EQ(field(block_at(&h, 0, 0), "text"), "first");
  ASSERT_STR_EQ(field(block_at(&h, 0, 1), "text"), "second");
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* User text after tool results goes after them, in the same message. */
TEST_IMPL(history_user_text_after_results) {
  al_history_t h;
  json_t *o, *msgs;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':["
                       "{'type':'tool_use','id':'t1','name':'bash','input':{}},"
                       "{'type':'tool_use','id':'t2','name':'bash',"
                       "'input':{}}]}"),
            0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t1", "1", false), 0);
  /* While results are missing the text has nowhere valid to go. */
  ASSERT_EQ(al__history_append_user_text(&h, "early"), AL_EBUSY);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t2", "2", false), 0);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  ASSERT_EQ(al__history_append_user_text(&h, "also, hurry"), 0);
  ASSERT_EQ(al__history_count(&h), 3);
  ASSERT_EQ(json_array_size(json_object_get(msg_at(&h, 2), "content")), 3);
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "type"), "tool_result");
  ASSERT_STR_EQ(field(block_at(&h, 2, 1), "type"), "tool_result");
  ASSERT_STR_EQ(field(block_at(&h, 2, 2), "type"), "text");
  ASSERT_STR_EQ(field(block_at(&h, 2, 2), "text"), "also, hurry");
  check_both(&h);
  o = build_body(&al_provider_openai, al__history_to_json(&h), NULL, true);
  msgs = json_object_get(o, "messages");
  ASSERT_EQ(json_array_size(msgs), 5);
  ASSERT_STR_EQ(field(json_array_get(msgs, 2), "role"), "tool");
  ASSERT_STR_EQ(field(json_array_get(msgs, 3), "role"), "tool");
  ASSERT_STR_EQ(field(json_array_get(msgs, 4), "role"), "user");
  json_decref(o);
  /* Consecutive texts share one user message too. */
  ASSERT_EQ(al__history_append_user_text(&h, "p.s."), 0);
  ASSERT_EQ(al__history_count(&h), 3);
  ASSERT_EQ(al__history_append_user_text(&h, ""), AL_EINVAL);
  ASSERT_EQ(al__history_append_user_text(&h, NULL), AL_EINVAL);
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* S5.6: tool -> model -> tool -> model -> text, valid at every step. */
TEST_IMPL(history_multi_turn_tool_loop) {
  al_history_t h;
  int turn;

  al__history_init(&h);
  ASSERT_EQ(al__history_set_system(&h, "sys"), 0);
  ASSERT_EQ(al__history_append_user_text(&h, "loop"), 0);
  for (turn = 0; turn < 3; turn++) {
    char lit[256];
    char id[32];

    snprintf(id, sizeof(id), "toolu_%d", turn);
    snprintf(lit, sizeof(lit),
             "{'role':'assistant','content':[{'type':'text','text':'step'},"
             "{'type':'tool_use','id':'%s','name':'bash','input':{'n':%d}}]}",
             id, turn);
    ASSERT_EQ(commit(&h, lit), 0);
    ASSERT_EQ(al__history_add_tool_result_text(&h, id, "ok", false), 0);
    ASSERT_EQ(al__history_close_turn(&h), 0);
    check_both(&h);
  }
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'finished'}]}"),
            0);
  ASSERT_EQ(al__history_count(&h), 8);
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* S5.7: the max_turns summary runs on a deep copy; the original does not
 * change, and each outlives the other. */
TEST_IMPL(history_max_turns_copy) {
  al_history_t h, c;
  char *before, *after;
  json_t *body;
  json_t *none = json_string("none");
  al_provider_options_t o;
  al_provider_request_t r;
  al_mockllm_verdict_t v;

  al__history_init(&h);
  ASSERT_EQ(al__history_set_system(&h, "sys"), 0);
  ASSERT_EQ(al__history_append_user_text(&h, "work"), 0);
  ASSERT_EQ(commit(&h, THREE_TOOLS), 0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_a", "a", false), 0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_b", "b", false), 0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_c", "c", false), 0);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  before = dump(&h);

  ASSERT_EQ(al__history_copy(&h, &c), 0);
  ASSERT_STR_EQ(al__history_system(&c), "sys");
  ASSERT(al__history_system(&c) != al__history_system(&h));
  ASSERT(json_equal(al__history_to_json(&c), al__history_to_json(&h)));
  ASSERT_EQ(al__history_append_user_text(&c, "Summarize your progress."), 0);
  /* The summary request: no tools, tool_choice none. */
  al_provider_options_init(&o);
  o.model = "m";
  o.system = al__history_system(&c);
  o.tool_choice = none;
  ASSERT_EQ(al_provider_build_request(&al_provider_openai,
                                      al__history_to_json(&c), &o, &r), 0);
  body = json_loads(r.body, 0, NULL);
  ASSERT(al_mockllm_validate_openai(body, NULL, &v));
  json_decref(body);
  al_provider_request_free(&r);
  check_both(&c);
  ASSERT_EQ(commit(&c, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'summary'}]}"),
            0);
  /* A change deep inside the copy's blocks does not reach the original. */
  json_object_set_new((json_t *)block_at(&c, 1, 1), "name",
                      json_string("changed"));

  after = dump(&h);
  ASSERT_STR_EQ(after, before);
  ASSERT_EQ(al__history_count(&h), 3);
  ASSERT_EQ(al__history_count(&c), 4);
  free(after);
  /* The original goes first: the copy must not share anything with it. */
  al__history_free(&h);
  ASSERT_STR_EQ(field(block_at(&c, 3, 0), "text"), "summary");
  ASSERT_STR_EQ(field(block_at(&c, 1, 1), "name"), "changed");
  al__history_free(&c);
  free(before);
  json_decref(none);
  return 0;
}

/* A copy taken while a tool turn is open carries the turn with it. */
TEST_IMPL(history_copy_open_turn) {
  al_history_t h, c;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "x"), 0);
  ASSERT_EQ(commit(&h, THREE_TOOLS), 0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "toolu_a", "a", false), 0);
  ASSERT_EQ(al__history_copy(&h, &c), 0);
  ASSERT_EQ(al__history_pending(&c), 2);
  ASSERT_EQ(al__history_cancel_open(&c, NULL), 0);
  check_both(&c);
  ASSERT_EQ(al__history_pending(&h), 2);
  ASSERT(al__history_turn_open(&h));
  ASSERT_EQ(al__history_count(&h), 2);
  al__history_free(&c);
  al__history_free(&h);
  return 0;
}

/* Refusals leave the history exactly as it was. */
TEST_IMPL(history_refuses_unknown_and_duplicate) {
  al_history_t h;
  char *before, *after;

  al__history_init(&h);
  /* The first message must be the user's. */
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'x'}]}"),
            AL_ESTATE);
  ASSERT_EQ(al__history_count(&h), 0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t1", "x", false),
            AL_ENOTFOUND);
  ASSERT_EQ(al__history_close_turn(&h), AL_ESTATE);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  ASSERT_EQ(commit(&h, "{'role':'user','content':[{'type':'text',"
                       "'text':'x'}]}"),
            AL_EINVAL);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':'text'}"), AL_EINVAL);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'tool_use',"
                       "'id':'t1','name':'bash'}]}"),
            AL_EINVAL);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'tool_use',"
                       "'id':'t1','name':'bash','input':{}},{'type':'tool_use',"
                       "'id':'t1','name':'bash','input':{}}]}"),
            AL_EINVAL);
  ASSERT_EQ(al__history_count(&h), 1);
  ASSERT(!al__history_turn_open(&h));
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':["
                       "{'type':'tool_use','id':'t1','name':'bash','input':{}},"
                       "{'type':'tool_use','id':'t2','name':'bash',"
                       "'input':{}}]}"),
            0);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t1", "one", false), 0);
  before = dump(&h);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "nope", "x", false),
            AL_ENOTFOUND);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t1", "again", true),
            AL_EEXIST);
  ASSERT_EQ(al__history_add_tool_result_text(&h, NULL, "x", false),
            AL_ENOTFOUND);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t2", NULL, false),
            AL_EINVAL);
  {
    json_t *num = json_integer(3);

    ASSERT_EQ(al__history_add_tool_result(&h, "t2", num, false), AL_EINVAL);
    json_decref(num);
  }
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'text',"
                       "'text':'x'}]}"),
            AL_EBUSY);
  ASSERT_EQ(al__history_append_user_text(&h, "more"), AL_EBUSY);
  after = dump(&h);
  ASSERT_STR_EQ(after, before);
  free(after);
  ASSERT_EQ(al__history_pending(&h), 1);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t2", "two", false), 0);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  /* The result kept for t1 is the first one. */
  ASSERT_STR_EQ(field(block_at(&h, 2, 0), "content"), "one");
  check_both(&h);
  /* An id used earlier in the conversation cannot be used again. */
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':[{'type':'tool_use',"
                       "'id':'t2','name':'bash','input':{}}]}"),
            AL_EINVAL);
  ASSERT_EQ(al__history_count(&h), 3);
  check_both(&h);
  free(before);
  al__history_free(&h);
  return 0;
}

/* pause_turn / max_tokens continuation: a reply that follows a reply
 * extends it, so roles keep alternating. */
TEST_IMPL(history_assistant_continuation_merges) {
  al_history_t h;
  char msg[1024];

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "long task"), 0);
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':["
                       "{'type':'server_tool_use','id':'srvtoolu_1',"
                       "'name':'web_search','input':{'query':'q'}}]}"),
            0);
  ASSERT(!al__history_turn_open(&h));
  /* pause_turn is Anthropic's (server tools): the request goes back as is,
   * ending with the assistant message. */
  ASSERT_EQ(al__history_validate(&h, NULL, 0), 0);
  ASSERT(mock_valid(&al_provider_anthropic, al__history_to_json(&h), NULL,
                    msg, sizeof(msg)));
  ASSERT_EQ(commit(&h, "{'role':'assistant','content':["
                       "{'type':'web_search_tool_result','tool_use_id':"
                       "'srvtoolu_1','content':[]},{'type':'text',"
                       "'text':'found'},{'type':'tool_use','id':'t1',"
                       "'name':'bash','input':{}}]}"),
            0);
  ASSERT_EQ(al__history_count(&h), 2);
  ASSERT_EQ(json_array_size(json_object_get(msg_at(&h, 1), "content")), 4);
  ASSERT_EQ(al__history_pending(&h), 1);
  ASSERT_EQ(al__history_add_tool_result_text(&h, "t1", "ok", false), 0);
  ASSERT_EQ(al__history_close_turn(&h), 0);
  check_both(&h);
  al__history_free(&h);
  return 0;
}

/* Hand-broken histories: our validator and the mock's Anthropic validator
 * both refuse each; where the OpenAI conversion keeps the breakage (the
 * tool pairing), the OpenAI validator refuses it too. */
TEST_IMPL(history_validate_catches_broken) {
  static const struct {
    const char *messages;
    bool openai_broken;
  } v[] = {
      /* a result missing */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}},"
       "{'type':'tool_use','id':'b','name':'bash','input':{}}]},"
       "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'}]}]",
       true},
      /* no results at all, history ends with the tool_use */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]}]",
       true},
      /* results not first */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]},"
       "{'role':'user','content':[{'type':'text','text':'hi'},"
       "{'type':'tool_result','tool_use_id':'a','content':'x'}]}]",
       false},
      /* unknown id */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]},"
       "{'role':'user','content':[{'type':'tool_result','tool_use_id':'zz',"
       "'content':'x'}]}]",
       true},
      /* duplicate result */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]},"
       "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'},{'type':'tool_result','tool_use_id':'a',"
       "'content':'y'}]}]",
       true},
      /* a result with no tool_use before it */
      {"[{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'}]}]",
       true},
      /* a message between the tool_use and its result */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]},"
       "{'role':'assistant','content':[{'type':'text','text':'hm'}]},"
       "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'}]}]",
       true},
      /* assistant first */
      {"[{'role':'assistant','content':'hi'},{'role':'user','content':'q'}]",
       false},
      /* empty content in the middle */
      {"[{'role':'user','content':[]},{'role':'assistant','content':'a'},"
       "{'role':'user','content':'q'}]",
       false},
      /* thinking without its signature */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'thinking','thinking':'t'},{'type':'text','text':'a'}]}]",
       false},
      /* a tool_use id used twice in the conversation */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]},"
       "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'}]},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash','input':{}}]},"
       "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'}]}]",
       false},
      /* tool_use without input */
      {"[{'role':'user','content':'q'},{'role':'assistant','content':["
       "{'type':'tool_use','id':'a','name':'bash'}]},{'role':'user',"
       "'content':[{'type':'tool_result','tool_use_id':'a',"
       "'content':'x'}]}]",
       false},
      /* a system message */
      {"[{'role':'system','content':'s'},{'role':'user','content':'q'}]",
       false},
      /* nothing */
      {"[]", false},
  };
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(v); i++) {
    json_t *msgs = J(v[i].messages);
    json_t *body = json_pack("{s:s,s:i,s:O}", "model", "m", "max_tokens", 16,
                             "messages", msgs);
    char why[512];
    char msg[1024];
    al_mockllm_verdict_t verdict;

    why[0] = '\0';
    if (al__history_validate_json(msgs, why, sizeof(why)) != AL_EINVAL) {
      AL_TEST_FAIL("case %zu: our validator accepted it", i);
    }
    ASSERT(why[0] != '\0');
    if (al_mockllm_validate_anthropic(body, NULL, &verdict)) {
      AL_TEST_FAIL("case %zu: the anthropic validator accepted it (ours: %s)",
                   i, why);
    }
    if (v[i].openai_broken &&
        mock_valid(&al_provider_openai, msgs, NULL, msg, sizeof(msg))) {
      AL_TEST_FAIL("case %zu: the openai validator accepted it", i);
    }
    json_decref(body);
    json_decref(msgs);
  }
  return 0;
}

/* The validator also accepts what the API accepts in shapes we do not
 * build ourselves (string content), and refuses an open turn. */
TEST_IMPL(history_validate_agrees_on_valid) {
  static const char *const ok[] = {
      "[{'role':'user','content':'q'}]",
      "[{'role':'user','content':'q'},{'role':'assistant','content':'a'},"
      "{'role':'user','content':[{'type':'text','text':'b'}]}]",
      "[{'role':'user','content':'q'},{'role':'assistant','content':["
      "{'type':'tool_use','id':'a','name':'bash','input':{}},"
      "{'type':'tool_use','id':'b','name':'bash','input':{}}]},"
      "{'role':'user','content':[{'type':'tool_result','tool_use_id':'a',"
      "'content':'x'},{'type':'tool_result','tool_use_id':'b',"
      "'content':[{'type':'text','text':'y'}],'is_error':true},"
      "{'type':'text','text':'and'}]}]",
  };
  size_t i;
  char why[512];
  char msg[1024];
  al_history_t h;

  for (i = 0; i < AL_ARRAY_SIZE(ok); i++) {
    json_t *msgs = J(ok[i]);

    if (al__history_validate_json(msgs, why, sizeof(why)) != 0) {
      AL_TEST_FAIL("case %zu: %s", i, why);
    }
    ASSERT(mock_valid(&al_provider_anthropic, msgs, NULL, msg, sizeof(msg)));
    ASSERT(mock_valid(&al_provider_openai, msgs, NULL, msg, sizeof(msg)));
    json_decref(msgs);
  }
  /* An empty history and an open turn cannot be sent. */
  al__history_init(&h);
  ASSERT_EQ(al__history_validate(&h, why, sizeof(why)), AL_EINVAL);
  ASSERT_EQ(al__history_append_user_text(&h, "q"), 0);
  ASSERT_EQ(commit(&h, THREE_TOOLS), 0);
  ASSERT_EQ(al__history_validate(&h, why, sizeof(why)), AL_EINVAL);
  ASSERT(!mock_valid(&al_provider_anthropic, al__history_to_json(&h), NULL,
                     msg, sizeof(msg)));
  ASSERT(!mock_valid(&al_provider_openai, al__history_to_json(&h), NULL, msg,
                     sizeof(msg)));
  al__history_free(&h);
  return 0;
}
