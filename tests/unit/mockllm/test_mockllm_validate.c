/* The request validator, called directly with JSON (both directions: valid
 * histories pass, each broken form is rejected with the API's exact text),
 * and over HTTP (400 in each API's error shape, 401 without auth), plus
 * request recording in memory and to an NDJSON file. */
#include <jansson.h>
#include <unistd.h>

#include "unit/mockllm/mtest.h"

static json_t *J(const char *s) {
  json_error_t e;
  json_t *j = json_loads(s, 0, &e);

  if (j == NULL) {
    AL_TEST_FAIL("bad test JSON at %d: %s\n%s", e.position, e.text, s);
  }
  return j;
}

static bool ant(const char *messages, al_mockllm_verdict_t *v) {
  char body[8192];
  json_t *j;
  bool ok;

  snprintf(body, sizeof(body),
           "{\"model\":\"claude-x\",\"max_tokens\":1024,\"system\":\"be "
           "nice\",\"tools\":[{\"name\":\"bash\",\"input_schema\":{\"type\":"
           "\"object\"}},{\"name\":\"read\",\"description\":\"r\","
           "\"input_schema\":{\"type\":\"object\"}}],\"messages\":%s}",
           messages);
  j = J(body);
  ok = al_mockllm_validate_anthropic(j, NULL, v);
  json_decref(j);
  return ok;
}

#define ANT_OK(msgs)                                                  \
  do {                                                                \
    al_mockllm_verdict_t v_;                                          \
    if (!ant(msgs, &v_)) {                                            \
      AL_TEST_FAIL("valid history rejected: %s\n  %s", v_.message, msgs); \
    }                                                                 \
  } while (0)

#define ANT_BAD(msgs, want)                          \
  do {                                               \
    al_mockllm_verdict_t v_;                         \
    ASSERT(!ant(msgs, &v_));                         \
    ASSERT_EQ(v_.status, 400);                       \
    ASSERT_STR_EQ(v_.type, "invalid_request_error"); \
    ASSERT_STR_EQ(v_.message, want);                 \
  } while (0)

#define U(c) "{\"role\":\"user\",\"content\":" c "}"
#define A(c) "{\"role\":\"assistant\",\"content\":" c "}"
#define TU(id) \
  "{\"type\":\"tool_use\",\"id\":\"" id "\",\"name\":\"bash\",\"input\":{\"c\":1}}"
#define TR(id) "{\"type\":\"tool_result\",\"tool_use_id\":\"" id "\",\"content\":\"out\"}"
#define TXT(t) "{\"type\":\"text\",\"text\":\"" t "\"}"
#define THINK \
  "{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"sig\"}"

TEST_IMPL(mockllm_validate_anthropic_valid) {
  ANT_OK("[" U("\"hi\"") "]");
  ANT_OK("[" U("[" TXT("hi") "]") "]");
  /* multi-turn with tools, thinking, parallel calls, is_error, text after
   * the results, a final prefill */
  ANT_OK("[" U("\"list files\"") "," A("[" THINK "," TXT("ok") "," TU("t1") "]")
         "," U("[" TR("t1") "]") "," A("[" TXT("done") "]") "]");
  ANT_OK("[" U("\"x\"") "," A("[" TU("a") "," TU("b") "," TU("c") "]") "," U(
      "[" TR("b") ",{\"type\":\"tool_result\",\"tool_use_id\":\"a\","
      "\"content\":[{\"type\":\"text\",\"text\":\"e\"}],\"is_error\":true},"
      TR("c") "," TXT("and also this") "]") "]");
  ANT_OK("[" U("\"x\"") "," A("[{\"type\":\"redacted_thinking\",\"data\":\"z\"},"
                              TU("t1") "]") "," U("[" TR("t1") "]") "," A(
      "[" TU("t2") "]") "," U("[" TR("t2") "]") "]");
  ANT_OK("[" U("\"x\"") "," A("\"prefill\"") "]");
  ANT_OK("[" U("\"x\"") "," A("[]") "]"); /* empty final assistant */
  ANT_OK("[" U("\"a\"") "," U("\"b\"") "]"); /* consecutive turns combine */
  return 0;
}

TEST_IMPL(mockllm_validate_anthropic_broken) {
  al_mockllm_verdict_t v;
  json_t *j;

  /* tool_use without its tool_result (text instead, or nothing). */
  ANT_BAD("[" U("\"x\"") "," A("[" TU("toolu_A") "]") "," U("\"next\"") "]",
          "messages.1: `tool_use` ids were found without `tool_result` blocks "
          "immediately after: toolu_A. Each `tool_use` block must have a "
          "corresponding `tool_result` block in the next message.");
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "," TU("b") "]") "," U("[" TR("a")
                                                                "]") "]",
          "messages.1: `tool_use` ids were found without `tool_result` blocks "
          "immediately after: b. Each `tool_use` block must have a "
          "corresponding `tool_result` block in the next message.");
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "]") "]",
          "messages.1: `tool_use` ids were found without `tool_result` blocks "
          "immediately after: a. Each `tool_use` block must have a "
          "corresponding `tool_result` block in the next message.");
  /* results in a later message, not the next one */
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "]") "," A("\"hm\"") "," U(
              "[" TR("a") "]") "]",
          "messages.1: `tool_use` ids were found without `tool_result` blocks "
          "immediately after: a. Each `tool_use` block must have a "
          "corresponding `tool_result` block in the next message.");
  /* unknown id */
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "]") "," U("[" TR("a") "," TR(
              "zzz") "]") "]",
          "messages.2.content.1: unexpected `tool_use_id` found in "
          "`tool_result` blocks: zzz. Each `tool_result` block must have a "
          "corresponding `tool_use` block in the previous message.");
  /* results not first */
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "]") "," U("[" TXT("first") "," TR(
              "a") "]") "]",
          "messages.2: Did not find 1 tool_result block(s) at the beginning "
          "of this message. Messages following `tool_use` blocks must begin "
          "with a matching number of tool_result blocks.");
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "," TU("b") "]") "," U(
              "[" TR("a") "," TXT("mid") "," TR("b") "]") "]",
          "messages.2: Did not find 2 tool_result block(s) at the beginning "
          "of this message. Messages following `tool_use` blocks must begin "
          "with a matching number of tool_result blocks.");
  /* tool_result with no tool_use before it */
  ANT_BAD("[" U("[" TR("ghost") "]") "]",
          "messages.0.content.0: unexpected `tool_use_id` found in "
          "`tool_result` blocks: ghost. Each `tool_result` block must have a "
          "corresponding `tool_use` block in the previous message.");
  ANT_BAD("[" U("\"x\"") "," A("\"plain\"") "," U("[" TR("ghost") "]") "]",
          "messages.2.content.0: unexpected `tool_use_id` found in "
          "`tool_result` blocks: ghost. Each `tool_result` block must have a "
          "corresponding `tool_use` block in the previous message.");
  /* duplicate tool_use ids */
  ANT_BAD("[" U("\"x\"") "," A("[" TU("a") "]") "," U("[" TR("a") "]") "," A(
              "[" TU("a") "]") "," U("[" TR("a") "]") "]",
          "messages.3.content.0: `tool_use` ids must be unique");
  /* roles */
  ANT_BAD("[{\"role\":\"system\",\"content\":\"s\"}," U("\"x\"") "]",
          "messages: Unexpected role \"system\". The Messages API accepts a "
          "top-level `system` parameter, not \"system\" as an input message "
          "role.");
  ANT_BAD("[" U("\"x\"") ",{\"role\":\"tool\",\"content\":\"s\"}]",
          "messages.1.role: Input should be 'user' or 'assistant'");
  ANT_BAD("[" A("\"x\"") "]",
          "messages: first message must use the \"user\" role");
  ANT_BAD("[" U("\"\"") "," A("\"x\"") "]",
          "messages.0: all messages must have non-empty content except for "
          "the optional final assistant message");
  ANT_BAD("[" U("[{\"type\":\"bogus\"}]") "]",
          "messages.0.content.0.type: Input tag 'bogus' found using 'type' "
          "does not match any of the expected tags: 'text', 'image', "
          "'document', 'search_result', 'tool_use', 'tool_result', "
          "'thinking', 'redacted_thinking', 'server_tool_use', "
          "'web_search_tool_result'");
  ANT_BAD("[" U("\"x\"") "," A("[{\"type\":\"thinking\",\"thinking\":\"t\"}]")
          "]",
          "messages.1.content.0.signature: Field required");
  ANT_BAD("[" U("[" TU("a") "]") "]",
          "messages.0.content.0: tool_use blocks can only be in assistant "
          "messages");
  ANT_BAD("[]", "messages: at least one message is required");

  /* required top-level fields */
  j = J("{\"max_tokens\":5,\"messages\":[" U("\"x\"") "]}");
  ASSERT(!al_mockllm_validate_anthropic(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "model: Field required");
  json_decref(j);
  j = J("{\"model\":\"m\",\"messages\":[" U("\"x\"") "]}");
  ASSERT(!al_mockllm_validate_anthropic(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "max_tokens: Field required");
  json_decref(j);
  j = J("{\"model\":\"m\",\"max_tokens\":0,\"messages\":[" U("\"x\"") "]}");
  ASSERT(!al_mockllm_validate_anthropic(j, NULL, &v));
  ASSERT_STR_EQ(v.message,
                "max_tokens: Input should be greater than or equal to 1");
  json_decref(j);
  j = J("{\"model\":\"m\",\"max_tokens\":5}");
  ASSERT(!al_mockllm_validate_anthropic(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "messages: Field required");
  json_decref(j);
  j = J("{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"x\"}],"
        "\"messages\":[" U("\"x\"") "]}");
  ASSERT(!al_mockllm_validate_anthropic(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "tools.0.custom.input_schema: Field required");
  json_decref(j);
  j = J("{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"input_schema\":{}}],"
        "\"messages\":[" U("\"x\"") "]}");
  ASSERT(!al_mockllm_validate_anthropic(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "tools.0.name: Field required");
  json_decref(j);

  /* headers */
  j = J("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[" U("\"x\"") "]}");
  {
    json_t *h = J("{\"anthropic-version\":\"2023-06-01\"}");

    ASSERT(!al_mockllm_validate_anthropic(j, h, &v));
    ASSERT_EQ(v.status, 401);
    ASSERT_STR_EQ(v.type, "authentication_error");
    json_object_set_new(h, "authorization", json_string("Bearer k"));
    ASSERT(al_mockllm_validate_anthropic(j, h, &v));
    json_object_del(h, "anthropic-version");
    ASSERT(!al_mockllm_validate_anthropic(j, h, &v));
    ASSERT_EQ(v.status, 400);
    ASSERT_STR_EQ(v.message, "anthropic-version: header is required");
    json_object_set_new(h, "anthropic-version", json_string("2026-10-21"));
    json_object_del(h, "authorization");
    json_object_set_new(h, "x-api-key", json_string("k"));
    ASSERT(al_mockllm_validate_anthropic(j, h, &v));
    json_decref(h);
  }
  json_decref(j);
  return 0;
}

static bool oai(const char *messages, al_mockllm_verdict_t *v) {
  char body[8192];
  json_t *j;
  bool ok;

  snprintf(body, sizeof(body),
           "{\"model\":\"gpt-x\",\"stream\":true,\"stream_options\":{"
           "\"include_usage\":true},\"tools\":[{\"type\":\"function\","
           "\"function\":{\"name\":\"bash\",\"parameters\":{}}}],"
           "\"messages\":%s}",
           messages);
  j = J(body);
  ok = al_mockllm_validate_openai(j, NULL, v);
  json_decref(j);
  return ok;
}

#define OU(c) "{\"role\":\"user\",\"content\":\"" c "\"}"
#define OS(c) "{\"role\":\"system\",\"content\":\"" c "\"}"
#define OTC(id)                                                       \
  "{\"id\":\"" id "\",\"type\":\"function\",\"function\":{\"name\":" \
  "\"bash\",\"arguments\":\"{}\"}}"
#define OA_CALLS(calls) \
  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" calls "]}"
#define OT(id) "{\"role\":\"tool\",\"tool_call_id\":\"" id "\",\"content\":\"r\"}"

#define OAI_OK(msgs)                                                   \
  do {                                                                 \
    al_mockllm_verdict_t v_;                                           \
    if (!oai(msgs, &v_)) {                                             \
      AL_TEST_FAIL("valid history rejected: %s\n  %s", v_.message, msgs); \
    }                                                                  \
  } while (0)

#define OAI_BAD(msgs, want, want_param)         \
  do {                                          \
    al_mockllm_verdict_t v_;                    \
    ASSERT(!oai(msgs, &v_));                    \
    ASSERT_EQ(v_.status, 400);                  \
    ASSERT_STR_EQ(v_.message, want);            \
    ASSERT_STR_EQ(v_.param, want_param);        \
  } while (0)

TEST_IMPL(mockllm_validate_openai) {
  al_mockllm_verdict_t v;
  json_t *j;
  json_t *h;

  OAI_OK("[" OU("hi") "]");
  OAI_OK("[" OS("sys") ",{\"role\":\"developer\",\"content\":\"d\"}," OU("x")
         "," OA_CALLS(OTC("c1") "," OTC("c2")) "," OT("c2") "," OT("c1")
         ",{\"role\":\"assistant\",\"content\":\"done\"}," OU("more") "]");
  OAI_OK("[" OU("x") ",{\"role\":\"assistant\",\"content\":\"text too\","
         "\"tool_calls\":[" OTC("c1") "]}," OT("c1") "]");

  OAI_BAD("[" OU("x") "," OA_CALLS(OTC("call_1") "," OTC("call_2")) "," OT(
              "call_1") "," OU("next") "]",
          "An assistant message with 'tool_calls' must be followed by tool "
          "messages responding to each 'tool_call_id'. The following "
          "tool_call_ids did not have response messages: call_2",
          "messages.[3].role");
  OAI_BAD("[" OU("x") "," OA_CALLS(OTC("call_1")) "]",
          "An assistant message with 'tool_calls' must be followed by tool "
          "messages responding to each 'tool_call_id'. The following "
          "tool_call_ids did not have response messages: call_1",
          "messages.[1].role");
  OAI_BAD("[" OU("x") "," OT("call_9") "]",
          "Invalid parameter: messages with role 'tool' must be a response to "
          "a preceeding message with 'tool_calls'.",
          "messages.[1].role");
  OAI_BAD("[" OU("x") "," OA_CALLS(OTC("c1")) "," OT("c1") "," OT("c1") "]",
          "Invalid parameter: messages with role 'tool' must be a response to "
          "a preceeding message with 'tool_calls'.",
          "messages.[3].role");
  OAI_BAD("[" OU("x") ",{\"role\":\"assistant\",\"content\":null}]",
          "Invalid value for 'content': expected a string, got null.",
          "messages.[1].content");
  OAI_BAD("[{\"role\":\"wizard\",\"content\":\"x\"}]",
          "Invalid value: 'wizard'. Supported values are: 'system', "
          "'assistant', 'user', 'function', 'tool', and 'developer'.",
          "messages[0].role");
  OAI_BAD("[" OU("x") ",{\"role\":\"tool\",\"content\":\"r\"}]",
          "Missing parameter 'tool_call_id': messages with role 'tool' must "
          "have a 'tool_call_id'.",
          "messages.[1].tool_call_id");
  OAI_BAD("[]",
          "Invalid 'messages': empty array. Expected an array with minimum "
          "length 1, but got an empty array instead.",
          "messages");

  j = J("{\"messages\":[" OU("x") "]}");
  ASSERT(!al_mockllm_validate_openai(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "you must provide a model parameter");
  json_decref(j);
  j = J("{\"model\":\"m\"}");
  ASSERT(!al_mockllm_validate_openai(j, NULL, &v));
  ASSERT_STR_EQ(v.message, "Missing required parameter: 'messages'.");
  json_decref(j);
  j = J("{\"model\":\"m\",\"messages\":[" OU("x") "]}");
  h = J("{\"x-api-key\":\"k\"}");
  ASSERT(!al_mockllm_validate_openai(j, h, &v));
  ASSERT_EQ(v.status, 401);
  json_object_set_new(h, "authorization", json_string("Bearer k"));
  ASSERT(al_mockllm_validate_openai(j, h, &v));
  json_decref(h);
  json_decref(j);
  return 0;
}

TEST_IMPL(mockllm_validate_over_http_and_record) {
  static const char broken_ant[] =
      "{\"model\":\"m\",\"max_tokens\":9,\"stream\":true,\"messages\":["
      U("\"x\"") "," A("[" TU("toolu_Z") "]") "," U("\"oops\"") "]}";
  static const char broken_oai[] =
      "{\"model\":\"m\",\"messages\":[" OU("x") "," OT("nope") "]}";
  uv_loop_t loop;
  mt_client_t c;
  al_mockllm_options_t o;
  al_mockllm_t *m;
  const al_mockllm_record_t *r;
  char path[256];
  char err[256];
  char *r1 = mt_anthropic(broken_ant);
  char *r2 = mt_openai(broken_oai);
  char *r3 = mt_request("POST", "/v1/messages",
                        "anthropic-version: 2023-06-01\r\n",
                        mt_simple_anthropic);
  char *r4 = mt_anthropic(mt_simple_anthropic);
  char *file;
  size_t flen;
  json_t *j;

  snprintf(path, sizeof(path), "/tmp/al-mockllm-record-%d.ndjson",
           (int)getpid());
  unlink(path);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al_mockllm_options_init(&o);
  o.record = true;
  o.require_api_key = true; /* the 401 below */
  o.record_path = path;
  o.scenario_yaml = "responses:\n  - reply: {content: [{text: fine}]}\n";
  o.err = err;
  o.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&loop, &o, &m), 0);
  mt_client_init(&c);
  mt_client_add(&c, r1);
  mt_client_add(&c, r2);
  mt_client_add(&c, r3);
  mt_client_add(&c, r4);
  mt_client_start(&c, &loop, al_mockllm_port(m));
  while (c.ncomplete < 4 && c.read_err == 0 &&
         uv_run(&loop, UV_RUN_ONCE) != 0) {
  }
  ASSERT_EQ(c.ncomplete, 4);

  ASSERT_EQ(c.status[0], 400);
  j = json_loadb(c.body[0].data, c.body[0].len, 0, NULL);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "type")), "error");
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "type")),
                "invalid_request_error");
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "message")),
                "messages.1: `tool_use` ids were found without `tool_result` "
                "blocks immediately after: toolu_Z. Each `tool_use` block "
                "must have a corresponding `tool_result` block in the next "
                "message.");
  ASSERT(strncmp(json_string_value(json_object_get(j, "request_id")), "req_",
                 4) == 0);
  json_decref(j);

  ASSERT_EQ(c.status[1], 400);
  j = json_loadb(c.body[1].data, c.body[1].len, 0, NULL);
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "param")),
                "messages.[1].role");
  ASSERT(json_is_null(json_object_get(json_object_get(j, "error"), "code")));
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "type")),
                "invalid_request_error");
  json_decref(j);

  ASSERT_EQ(c.status[2], 401);
  ASSERT_NOT_NULL(strstr(c.body[2].data, "authentication_error"));
  ASSERT_EQ(c.status[3], 200);
  ASSERT_NOT_NULL(strstr(c.body[3].data, "fine"));

  ASSERT_EQ(al_mockllm_record_count(m), 4);
  r = al_mockllm_record_get(m, 0);
  ASSERT_STR_EQ(r->method, "POST");
  ASSERT_STR_EQ(r->path, "/v1/messages");
  ASSERT(!r->valid);
  ASSERT_EQ(r->status, 400);
  ASSERT_EQ(r->proto, AL_MOCKLLM_PROTO_ANTHROPIC);
  ASSERT_EQ(r->response_index, -1);
  ASSERT_NOT_NULL(strstr(r->error, "toolu_Z"));
  ASSERT_STR_EQ(json_string_value(json_object_get(r->headers, "x-api-key")),
                "test-key");
  ASSERT_EQ(json_integer_value(json_object_get(r->body, "max_tokens")), 9);
  r = al_mockllm_record_get(m, 3);
  ASSERT(r->valid);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->response_index, 0);
  ASSERT_NULL(r->error);
  ASSERT_NULL(al_mockllm_record_get(m, 4));
  ASSERT_NOT_NULL(al_mockllm_last_error(m));
  ASSERT_STR_EQ(al_mockllm_last_error(m), "x-api-key header is required");
  {
    al_mockllm_stats_t st;

    al_mockllm_stats(m, &st);
    ASSERT_EQ(st.validation_failures, 3);
  }
  al_mockllm_close(m, NULL);
  ASSERT_LOOP_CLOSES(&loop);

  /* The NDJSON file got one line per request, written asynchronously. */
  file = al_test_read_file(path, &flen);
  ASSERT_NOT_NULL(file);
  {
    size_t lines = 0;
    char *p = file;
    char *nl;

    while ((nl = strchr(p, '\n')) != NULL) {
      j = json_loadb(p, (size_t)(nl - p), 0, NULL);
      ASSERT_NOT_NULL(j);
      ASSERT_STR_EQ(json_string_value(json_object_get(j, "method")), "POST");
      if (lines == 1) {
        ASSERT_STR_EQ(json_string_value(json_object_get(j, "protocol")),
                      "openai");
        ASSERT(json_is_false(json_object_get(j, "valid")));
      }
      json_decref(j);
      lines++;
      p = nl + 1;
    }
    ASSERT_EQ(lines, 4);
  }
  free(file);
  unlink(path);
  mt_client_free(&c);
  free(r1);
  free(r2);
  free(r3);
  free(r4);
  return 0;
}
