/* mockllm over real loopback HTTP: rendering in both protocols, keep-alive,
 * pipelining, non-streaming bodies, bulk streams, timestamps, routing. */
#include <jansson.h>

#include "unit/mockllm/mtest.h"

static const char text_yaml[] =
    "model: claude-test\n"
    "responses:\n"
    "  - reply:\n"
    "      id: msg_1\n"
    "      content:\n"
    "        - text: \"Hello world\"\n"
    "          chunk_size: 6\n"
    "      usage: {input_tokens: 7, output_tokens: 3}\n";

TEST_IMPL(mockllm_anthropic_text_stream) {
  static const char expected[] =
      "event: message_start\n"
      "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
      "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\","
      "\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{"
      "\"input_tokens\":7,\"cache_creation_input_tokens\":0,"
      "\"cache_read_input_tokens\":0,\"output_tokens\":1,\"service_tier\":"
      "\"standard\"}}}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
      "{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"text_delta\",\"text\":\"Hello \"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"text_delta\",\"text\":\"world\"}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: message_delta\n"
      "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
      "\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}"
      "\n\n"
      "event: message_stop\n"
      "data: {\"type\":\"message_stop\"}\n\n";
  mt_client_t c;
  char *req = mt_anthropic(mt_simple_anthropic);

  mt_run_one(text_yaml, req, &c);
  ASSERT_EQ(c.ncomplete, 1);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_STR_EQ(mt_header(&c, 0, "content-type"),
                "text/event-stream; charset=utf-8");
  ASSERT_STR_EQ(mt_header(&c, 0, "transfer-encoding"), "chunked");
  ASSERT_NOT_NULL(mt_header(&c, 0, "request-id"));
  ASSERT_MEM_EQ(c.body[0].data, c.body[0].len, expected, strlen(expected));
  mt_client_free(&c);
  free(req);
  return 0;
}

TEST_IMPL(mockllm_openai_stream) {
  mt_client_t c;
  mt_event_t ev[32];
  size_t n, i;
  char *req = mt_openai(
      "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":"
      "true},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
  json_t *j;
  al_buf_t text;

  mt_run_one(text_yaml, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_NOT_NULL(mt_header(&c, 0, "x-request-id"));
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 32);
  /* role, 2 content deltas, finish, usage, [DONE] */
  ASSERT_EQ(n, 6);
  for (i = 0; i < n; i++) {
    ASSERT_STR_EQ(ev[i].name, ""); /* OpenAI events are unnamed */
  }
  ASSERT_STR_EQ(ev[5].data, "[DONE]");
  j = json_loads(ev[0].data, 0, NULL);
  ASSERT_NOT_NULL(j);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "object")),
                "chat.completion.chunk");
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "model")), "claude-test");
  ASSERT(json_is_null(json_object_get(j, "usage")));
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(json_array_get(json_object_get(j, "choices"),
                                                   0),
                                    "delta"),
                    "role")),
                "assistant");
  json_decref(j);
  al_buf_init(&text, 1024);
  for (i = 1; i <= 2; i++) {
    json_t *d;

    j = json_loads(ev[i].data, 0, NULL);
    d = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                        "delta");
    al_buf_append_str(&text, json_string_value(json_object_get(d, "content")));
    json_decref(j);
  }
  ASSERT_STR_EQ(text.data, "Hello world");
  al_buf_free(&text);
  j = json_loads(ev[3].data, 0, NULL);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(j, "choices"), 0),
                    "finish_reason")),
                "stop");
  json_decref(j);
  j = json_loads(ev[4].data, 0, NULL);
  ASSERT_EQ(json_array_size(json_object_get(j, "choices")), 0);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                               "prompt_tokens")),
            7);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                               "completion_tokens")),
            3);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                               "total_tokens")),
            10);
  json_decref(j);
  mt_sse_free(ev, n);
  mt_client_free(&c);

  /* Without include_usage: no usage chunk, no "usage": null. */
  req = mt_openai(mt_simple_openai);
  mt_run_one(text_yaml, req, &c);
  free(req);
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 32);
  ASSERT_EQ(n, 5);
  ASSERT_STR_EQ(ev[4].data, "[DONE]");
  ASSERT_NULL(strstr(c.body[0].data, "\"usage\""));
  mt_sse_free(ev, n);
  mt_client_free(&c);
  return 0;
}

/* Concatenates partial_json / arguments of every tool block. */
static void collect_tool_input(const mt_client_t *c, bool openai, al_buf_t *out,
                               size_t *pieces) {
  mt_event_t ev[128];
  size_t n = mt_sse(c->body[0].data, c->body[0].len, ev, 128);
  size_t i;

  *pieces = 0;
  for (i = 0; i < n; i++) {
    json_t *j;
    const char *s = NULL;

    if (ev[i].data == NULL || strcmp(ev[i].data, "[DONE]") == 0) {
      continue;
    }
    j = json_loads(ev[i].data, 0, NULL);
    ASSERT_NOT_NULL(j);
    if (openai) {
      json_t *tc = json_object_get(
          json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                          "delta"),
          "tool_calls");

      if (tc != NULL && json_object_get(json_array_get(tc, 0), "id") == NULL) {
        s = json_string_value(json_object_get(
            json_object_get(json_array_get(tc, 0), "function"), "arguments"));
      }
    } else if (strcmp(ev[i].name, "content_block_delta") == 0) {
      json_t *d = json_object_get(j, "delta");

      if (strcmp(json_string_value(json_object_get(d, "type")),
                 "input_json_delta") == 0) {
        s = json_string_value(json_object_get(d, "partial_json"));
      }
    }
    if (s != NULL && *s != '\0') {
      al_buf_append_str(out, s);
      (*pieces)++;
    }
    json_decref(j);
  }
  mt_sse_free(ev, n);
}

TEST_IMPL(mockllm_tool_use_pieces) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"Let me look.\"\n"
      "        - tool_use:\n"
      "            id: toolu_01\n"
      "            name: bash\n"
      "            input:\n"
      "              command: \"echo \\\"quoted\\\" \\\\ back\\u00e9\"\n"
      "              n: 42\n"
      "              flags: [true, null, 1.5]\n"
      "            pieces: 9\n";
  static const char want[] =
      "{\"command\":\"echo \\\"quoted\\\" \\\\ back\xc3\xa9\",\"n\":42,"
      "\"flags\":[true,null,1.5]}";
  mt_client_t c;
  al_buf_t got;
  size_t pieces;
  char *req;
  int proto;

  for (proto = 0; proto < 2; proto++) {
    req = proto ? mt_openai(mt_simple_openai) : mt_anthropic(mt_simple_anthropic);
    mt_run_one(yaml, req, &c);
    free(req);
    ASSERT_EQ(c.status[0], 200);
    al_buf_init(&got, 4096);
    collect_tool_input(&c, proto == 1, &got, &pieces);
    ASSERT_STR_EQ(got.data, want);
    ASSERT_EQ(pieces, 9);
    if (proto == 0) {
      ASSERT_NOT_NULL(strstr(c.body[0].data, "\"stop_reason\":\"tool_use\""));
      ASSERT_NOT_NULL(strstr(c.body[0].data,
                             "{\"type\":\"tool_use\",\"id\":\"toolu_01\","
                             "\"name\":\"bash\",\"input\":{}}"));
    } else {
      ASSERT_NOT_NULL(strstr(c.body[0].data,
                             "\"finish_reason\":\"tool_calls\""));
      ASSERT_NOT_NULL(strstr(c.body[0].data,
                             "{\"index\":0,\"id\":\"toolu_01\",\"type\":"
                             "\"function\",\"function\":{\"name\":\"bash\","
                             "\"arguments\":\"\"}}"));
    }
    al_buf_free(&got);
    mt_client_free(&c);
  }
  return 0;
}

TEST_IMPL(mockllm_thinking_signature) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - thinking: \"abcdefgh\"\n"
      "          signature: \"sig-XYZ\"\n"
      "          chunks: 4\n"
      "        - redacted_thinking: \"opaque==\"\n"
      "        - text: \"done\"\n";
  mt_client_t c;
  mt_event_t ev[32];
  size_t n, i, k = 0;
  char *req = mt_anthropic(mt_simple_anthropic);
  const char *want_names[] = {
      "message_start",       "content_block_start", "content_block_delta",
      "content_block_delta", "content_block_delta", "content_block_delta",
      "content_block_delta", "content_block_stop",  "content_block_start",
      "content_block_stop",  "content_block_start", "content_block_delta",
      "content_block_stop",  "message_delta",       "message_stop"};

  mt_run_one(yaml, req, &c);
  free(req);
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 32);
  ASSERT_EQ(n, AL_ARRAY_SIZE(want_names));
  for (i = 0; i < n; i++) {
    ASSERT_STR_EQ(ev[i].name, want_names[i]);
  }
  ASSERT_NOT_NULL(strstr(ev[1].data, "{\"type\":\"thinking\",\"thinking\":\"\","
                                     "\"signature\":\"\"}"));
  for (i = 2; i < 6; i++) {
    ASSERT_NOT_NULL(strstr(ev[i].data, "\"type\":\"thinking_delta\""));
    k++;
  }
  ASSERT_EQ(k, 4);
  ASSERT_NOT_NULL(strstr(ev[2].data, "\"thinking\":\"ab\""));
  ASSERT_NOT_NULL(strstr(ev[6].data, "{\"type\":\"signature_delta\","
                                     "\"signature\":\"sig-XYZ\"}"));
  ASSERT_NOT_NULL(strstr(ev[8].data, "{\"type\":\"redacted_thinking\","
                                     "\"data\":\"opaque==\"}"));
  ASSERT_NOT_NULL(strstr(ev[8].data, "\"index\":1"));
  ASSERT_NOT_NULL(strstr(ev[11].data, "\"index\":2"));
  mt_sse_free(ev, n);
  mt_client_free(&c);

  /* OpenAI: thinking becomes reasoning_content; redacted is dropped. */
  req = mt_openai(mt_simple_openai);
  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_NOT_NULL(strstr(c.body[0].data, "{\"reasoning_content\":\"ab\"}"));
  ASSERT_NULL(strstr(c.body[0].data, "opaque"));
  ASSERT_NULL(strstr(c.body[0].data, "sig-XYZ"));
  mt_client_free(&c);
  return 0;
}

static void run_multi(const char *yaml, mt_client_t *c, bool pipelined,
                      al_mockllm_stats_t *st) {
  uv_loop_t loop;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  c->send_all_at_once = pipelined;
  c->server = mt_server(&loop, yaml, false);
  mt_client_start(c, &loop, al_mockllm_port(c->server));
  ASSERT_LOOP_CLOSES(&loop);
  *st = c->stats;
}

static const char two_yaml[] =
    "responses:\n"
    "  - reply: {content: [{text: \"first\"}]}\n"
    "  - reply: {content: [{text: \"second\"}]}\n";

TEST_IMPL(mockllm_keepalive_two_requests) {
  mt_client_t c;
  char *r1 = mt_anthropic(mt_simple_anthropic);
  char *r2 = mt_openai(mt_simple_openai);
  al_mockllm_stats_t st;

  memset(&st, 0, sizeof(st));
  mt_client_init(&c);
  mt_client_add(&c, r1);
  mt_client_add(&c, r2);
  run_multi(two_yaml, &c, false, &st);
  ASSERT_EQ(c.ncomplete, 2);
  ASSERT_EQ(c.read_err, 0);
  ASSERT_STR_EQ(mt_header(&c, 0, "connection"), "keep-alive");
  ASSERT_NOT_NULL(strstr(c.body[0].data, "\"text\":\"first\""));
  ASSERT_NOT_NULL(strstr(c.body[1].data, "{\"content\":\"second\"}"));
  ASSERT_EQ(st.connections_accepted, 1);
  ASSERT_EQ(st.requests, 2);
  ASSERT_EQ(st.responses_played, 2);
  mt_client_free(&c);
  free(r1);
  free(r2);
  return 0;
}

TEST_IMPL(mockllm_pipelined_requests) {
  mt_client_t c;
  char *r1 = mt_anthropic(mt_simple_anthropic);
  char *r2 = mt_request("GET", "/health", NULL, NULL);
  char *r3 = mt_anthropic(mt_simple_anthropic);
  al_mockllm_stats_t st;

  mt_client_init(&c);
  mt_client_add(&c, r1);
  mt_client_add(&c, r2);
  mt_client_add(&c, r3);
  run_multi(two_yaml, &c, true, &st);
  ASSERT_EQ(c.ncomplete, 3);
  ASSERT_NOT_NULL(strstr(c.body[0].data, "\"text\":\"first\""));
  ASSERT_MEM_EQ(c.body[1].data, c.body[1].len, "ok", 2);
  ASSERT_NOT_NULL(strstr(c.body[2].data, "\"text\":\"second\""));
  ASSERT_EQ(st.connections_accepted, 1);
  mt_client_free(&c);
  free(r1);
  free(r2);
  free(r3);
  return 0;
}

TEST_IMPL(mockllm_nonstream_and_close_delimited) {
  static const char yaml[] =
      "transfer: close\n"
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"Hi \"\n"
      "        - repeat_text: {count: 3, text: \"ab\"}\n"
      "        - tool_use: {id: toolu_9, name: t, input: {a: 1}}\n";
  mt_client_t c;
  json_t *j;
  char *req = mt_anthropic(
      "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
      "\"content\":\"x\"}]}");

  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_STR_EQ(mt_header(&c, 0, "content-type"), "application/json");
  j = json_loadb(c.body[0].data, c.body[0].len, 0, NULL);
  ASSERT_NOT_NULL(j);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "type")), "message");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(j, "content"), 1), "text")),
                "ababab");
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(json_array_get(json_object_get(j, "content"),
                                               2),
                                "input"),
                "a")),
            1);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "stop_reason")),
                "tool_use");
  json_decref(j);
  mt_client_free(&c);

  /* Streaming with transfer: close: no chunked framing, ends with EOF. */
  req = mt_openai(mt_simple_openai);
  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_NULL(mt_header(&c, 0, "transfer-encoding"));
  ASSERT_NULL(mt_header(&c, 0, "content-length"));
  ASSERT_STR_EQ(mt_header(&c, 0, "connection"), "close");
  ASSERT_EQ(c.ncomplete, 1);
  ASSERT(c.body[0].len > 14);
  ASSERT_MEM_EQ(c.body[0].data + c.body[0].len - 14, 14, "data: [DONE]\n\n",
                14);
  mt_client_free(&c);
  return 0;
}

TEST_IMPL(mockllm_repeat_text_bulk) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - repeat_text: {count: 50000, text: \"tok \"}\n";
  mt_client_t c;
  char *req = mt_anthropic(mt_simple_anthropic);
  const char *p;
  size_t deltas = 0;
  static const char needle[] =
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
      "\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok \"}}\n\n";

  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_EQ(c.ncomplete, 1);
  /* The deltas are back to back; walk them with memcmp (a strstr per
   * delta would be quadratic under ASan's interceptors). */
  p = strstr(c.body[0].data, needle);
  ASSERT_NOT_NULL(p);
  while ((size_t)(c.body[0].data + c.body[0].len - p) >= sizeof(needle) - 1 &&
         memcmp(p, needle, sizeof(needle) - 1) == 0) {
    deltas++;
    p += sizeof(needle) - 1;
  }
  ASSERT_EQ(deltas, 50000);
  ASSERT_NOT_NULL(strstr(c.body[0].data, "event: message_stop\n"));
  mt_client_free(&c);
  return 0;
}

TEST_IMPL(mockllm_timestamps_monotonic) {
  static const char yaml[] =
      "timestamps: true\n"
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"a b c d e f\"\n"
      "          chunk_size: 2\n"
      "          delay_ms: 2\n";
  mt_client_t c;
  mt_event_t ev[32];
  size_t n, i;
  uint64_t before = uv_hrtime();
  uint64_t after;
  char *req = mt_anthropic(mt_simple_anthropic);

  mt_run_one(yaml, req, &c);
  after = uv_hrtime();
  free(req);
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 32);
  ASSERT_EQ(n, 11); /* 6 deltas + 5 structural events */
  for (i = 0; i < n; i++) {
    ASSERT(ev[i].has_id);
    ASSERT_GE(ev[i].id, before);
    ASSERT_LE(ev[i].id, after);
    if (i > 0) {
      ASSERT_GE(ev[i].id, ev[i - 1].id);
    }
  }
  /* Paced deltas are sent at distinct times. */
  ASSERT(ev[3].id > ev[2].id);
  mt_sse_free(ev, n);
  mt_client_free(&c);

  /* Off by default. */
  req = mt_anthropic(mt_simple_anthropic);
  mt_run_one(text_yaml, req, &c);
  free(req);
  ASSERT_NULL(strstr(c.body[0].data, "id: "));
  mt_client_free(&c);
  return 0;
}

TEST_IMPL(mockllm_routes_404_health) {
  mt_client_t c;
  char *req = mt_request("GET", "/nope", NULL, NULL);
  json_t *j;

  mt_run_one(NULL, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 404);
  j = json_loadb(c.body[0].data, c.body[0].len, 0, NULL);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "type")), "error");
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "type")),
                "not_found_error");
  json_decref(j);
  mt_client_free(&c);

  req = mt_request("POST", "/v1/chat/nothing", NULL, "{}");
  mt_run_one(NULL, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 404);
  j = json_loadb(c.body[0].data, c.body[0].len, 0, NULL);
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "type")),
                "invalid_request_error");
  ASSERT(json_is_null(json_object_get(json_object_get(j, "error"), "code")));
  json_decref(j);
  mt_client_free(&c);

  req = mt_request("GET", "/health", NULL, NULL);
  mt_run_one(NULL, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_MEM_EQ(c.body[0].data, c.body[0].len, "ok", 2);
  mt_client_free(&c);

  /* The default scenario (no YAML) answers with a short text. */
  req = mt_anthropic(mt_simple_anthropic);
  mt_run_one(NULL, req, &c);
  free(req);
  ASSERT_NOT_NULL(strstr(c.body[0].data, "Hello from agentloop-mockllm."));
  mt_client_free(&c);
  return 0;
}

TEST_IMPL(mockllm_oversized_413_431) {
  uv_loop_t loop;
  al_mockllm_options_t o;
  al_mockllm_t *m;
  mt_client_t c;
  char *big = malloc(9000);
  char *req;
  char hdrs[3000];

  memset(big, 'x', 8999);
  big[0] = '"';
  big[8997] = '"';
  big[8998] = '\0';
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al_mockllm_options_init(&o);
  o.max_body_bytes = 4096;
  o.max_header_bytes = 2048;
  ASSERT_EQ(al_mockllm_new(&loop, &o, &m), 0);
  mt_client_init(&c);
  req = mt_anthropic(big);
  mt_client_add(&c, req);
  free(req);
  c.server = m;
  mt_client_start(&c, &loop, al_mockllm_port(m));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.status[0], 413);
  ASSERT_NOT_NULL(strstr(c.body[0].data, "\"type\":\"request_too_large\""));
  ASSERT_STR_EQ(mt_header(&c, 0, "connection"), "close");
  mt_client_free(&c);

  /* Header block over the limit: 431. */
  memset(hdrs, 'a', sizeof(hdrs));
  memcpy(hdrs, "X-Big: ", 7);
  memcpy(hdrs + sizeof(hdrs) - 3, "\r\n", 3);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(al_mockllm_new(&loop, &o, &m), 0);
  mt_client_init(&c);
  req = mt_request("POST", "/v1/messages", hdrs, "{}");
  mt_client_add(&c, req);
  free(req);
  c.server = m;
  mt_client_start(&c, &loop, al_mockllm_port(m));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.status[0], 431);
  mt_client_free(&c);
  free(big);
  return 0;
}

typedef struct {
  int done;
  al_mockllm_t *m;
} many_t;

TEST_IMPL(mockllm_many_connections) {
  enum { N = 64 };
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"0123456789abcdef\"\n"
      "          chunk_size: 1\n"
      "          delay_ms: 1\n";
  uv_loop_t loop;
  al_mockllm_t *m;
  mt_client_t *c = calloc(N, sizeof(*c));
  al_mockllm_stats_t st;
  char *req = mt_anthropic(mt_simple_anthropic);
  int i;
  size_t done;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  m = mt_server(&loop, yaml, false);
  for (i = 0; i < N; i++) {
    mt_client_init(&c[i]);
    mt_client_add(&c[i], req);
    mt_client_start(&c[i], &loop, al_mockllm_port(m));
  }
  do {
    done = 0;
    for (i = 0; i < N; i++) {
      done += c[i].ncomplete;
    }
  } while (done < N && uv_run(&loop, UV_RUN_ONCE) != 0);
  al_mockllm_stats(m, &st);
  ASSERT_EQ(st.connections_accepted, N);
  ASSERT_EQ(st.requests, N);
  al_mockllm_close(m, NULL);
  ASSERT_LOOP_CLOSES(&loop);
  for (i = 0; i < N; i++) {
    ASSERT_EQ(c[i].status[0], 200);
    ASSERT_NOT_NULL(strstr(c[i].body[0].data, "event: message_stop"));
    mt_client_free(&c[i]);
  }
  free(c);
  free(req);
  return 0;
}
