/* mockllm fault injection over loopback: HTTP status with retry-after, error
 * event after N events, reset after N bytes, stall after headers, pings
 * only, slow drip, exhausted scenarios. No sleeps: the stall test ends on
 * the client's own short timer, the others on the server's behaviour. */
#include <jansson.h>

#include "unit/mockllm/mtest.h"

TEST_IMPL(mockllm_fault_status_retry_after) {
  static const char yaml[] =
      "responses:\n"
      "  - fault: {status: 429, retry_after: 2}\n"
      "  - fault: {status: 529}\n"
      "  - fault: {status: 500, error_message: \"boom\"}\n"
      "  - reply: {content: [{text: ok}]}\n";
  uv_loop_t loop;
  mt_client_t c;
  json_t *j;
  char *r1 = mt_anthropic(mt_simple_anthropic);
  char *r2 = mt_anthropic(mt_simple_anthropic);
  char *r3 = mt_openai(mt_simple_openai);
  char *r4 = mt_anthropic(mt_simple_anthropic);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, r1);
  mt_client_add(&c, r2);
  mt_client_add(&c, r3);
  mt_client_add(&c, r4);
  c.server = mt_server(&loop, yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.ncomplete, 4);

  ASSERT_EQ(c.status[0], 429);
  ASSERT_STR_EQ(mt_header(&c, 0, "retry-after"), "2");
  ASSERT_STR_EQ(mt_header(&c, 0, "content-type"), "application/json");
  j = json_loadb(c.body[0].data, c.body[0].len, 0, NULL);
  ASSERT_NOT_NULL(j);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "type")), "error");
  ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"),
                                                  "type")),
                "rate_limit_error");
  ASSERT(strncmp(json_string_value(json_object_get(j, "request_id")), "req_",
                 4) == 0);
  json_decref(j);

  ASSERT_EQ(c.status[1], 529);
  ASSERT_NULL(mt_header(&c, 1, "retry-after"));
  ASSERT_NOT_NULL(strstr(c.body[1].data,
                         "{\"type\":\"overloaded_error\",\"message\":"
                         "\"Overloaded\"}"));

  /* OpenAI shape for the same kind of fault. */
  ASSERT_EQ(c.status[2], 500);
  ASSERT_MEM_EQ(c.body[2].data, c.body[2].len,
                "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\","
                "\"param\":null,\"code\":null}}",
                strlen("{\"error\":{\"message\":\"boom\",\"type\":"
                       "\"server_error\",\"param\":null,\"code\":null}}"));

  /* The connection survived every error response. */
  ASSERT_EQ(c.status[3], 200);
  ASSERT_NOT_NULL(strstr(c.body[3].data, "message_stop"));
  mt_client_free(&c);
  free(r1);
  free(r2);
  free(r3);
  free(r4);
  return 0;
}

static const char long_reply[] =
    "      content:\n"
    "        - text: \"The quick brown fox jumps over the lazy dog.\"\n"
    "          chunk_size: 4\n";

TEST_IMPL(mockllm_fault_error_event) {
  char yaml[512];
  mt_client_t c;
  mt_event_t ev[64];
  size_t n;
  char *req;

  snprintf(yaml, sizeof(yaml),
           "responses:\n  - fault: {error_event_after: 4}\n    reply:\n%s",
           long_reply);
  req = mt_anthropic(mt_simple_anthropic);
  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_EQ(c.ncomplete, 1); /* the chunked body ended properly */
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 64);
  ASSERT_EQ(n, 5);
  ASSERT_STR_EQ(ev[0].name, "message_start");
  ASSERT_STR_EQ(ev[3].name, "content_block_delta");
  ASSERT_STR_EQ(ev[4].name, "error");
  ASSERT_NOT_NULL(strstr(ev[4].data, "{\"type\":\"error\",\"error\":{\"type\":"
                                     "\"overloaded_error\",\"message\":"
                                     "\"Overloaded\"}"));
  ASSERT_NULL(strstr(c.body[0].data, "message_stop"));
  mt_sse_free(ev, n);
  mt_client_free(&c);

  req = mt_openai(mt_simple_openai);
  mt_run_one(yaml, req, &c);
  free(req);
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 64);
  ASSERT_EQ(n, 5);
  ASSERT_STR_EQ(ev[4].data, "{\"error\":{\"message\":\"Overloaded\",\"type\":"
                            "\"overloaded_error\",\"param\":null,\"code\":"
                            "null}}");
  ASSERT_NULL(strstr(c.body[0].data, "[DONE]"));
  mt_sse_free(ev, n);
  mt_client_free(&c);
  return 0;
}

TEST_IMPL(mockllm_fault_reset_after_bytes) {
  char yaml[512];
  mt_client_t c;
  mt_client_t full;
  char *req = mt_anthropic(mt_simple_anthropic);

  snprintf(yaml, sizeof(yaml), "responses:\n  - reply:\n%s", long_reply);
  mt_run_one(yaml, req, &full);
  ASSERT_EQ(full.ncomplete, 1);

  snprintf(yaml, sizeof(yaml),
           "responses:\n  - fault: {reset_after_bytes: 300}\n    reply:\n%s",
           long_reply);
  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_EQ(c.ncomplete, 0); /* never completes */
  ASSERT(c.read_err == UV_ECONNRESET || c.read_err == UV_EOF);
  /* At most 300 body bytes on the wire, chunk framing included. */
  ASSERT_LE(c.body[0].len, 300);
  ASSERT(c.body[0].len < full.body[0].len);
  ASSERT_MEM_EQ(c.body[0].data, c.body[0].len, full.body[0].data,
                c.body[0].len);
  mt_client_free(&c);
  mt_client_free(&full);
  return 0;
}

TEST_IMPL(mockllm_fault_stall_after_headers) {
  static const char yaml[] =
      "responses:\n"
      "  - fault: {stall_after_headers: true}\n"
      "    reply: {content: [{text: never}]}\n";
  uv_loop_t loop;
  mt_client_t c;
  char *req = mt_anthropic(mt_simple_anthropic);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, req);
  free(req);
  c.timer_ms = 60; /* the test's own short timer ends it */
  c.server = mt_server(&loop, yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.nheaders, 1);
  ASSERT_EQ(c.status[0], 200);
  ASSERT(c.timer_fired);
  ASSERT_EQ(c.body_at_timer, 0);
  ASSERT_EQ(c.ncomplete, 0);
  ASSERT_EQ(c.read_err, 0); /* the server kept the connection open */
  mt_client_free(&c);
  return 0;
}

static bool enough_pings(mt_client_t *c) {
  const char *p = c->body[0].data;
  int n = 0;

  while ((p = strstr(p, "event: ping\n")) != NULL) {
    n++;
    p++;
  }
  return n >= 3;
}

TEST_IMPL(mockllm_fault_pings_only) {
  static const char yaml[] =
      "responses:\n"
      "  - fault: {pings_only: true, ping_interval_ms: 5}\n";
  uv_loop_t loop;
  mt_client_t c;
  mt_event_t ev[16];
  size_t n, i;
  char *req = mt_anthropic(mt_simple_anthropic);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, req);
  free(req);
  c.on_body = enough_pings;
  c.server = mt_server(&loop, yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_EQ(c.ncomplete, 0);
  n = mt_sse(c.body[0].data, c.body[0].len, ev, 16);
  ASSERT_GE(n, 3);
  for (i = 0; i < n; i++) {
    ASSERT_STR_EQ(ev[i].name, "ping");
    ASSERT_STR_EQ(ev[i].data, "{\"type\": \"ping\"}");
  }
  mt_sse_free(ev, n);
  mt_client_free(&c);
  return 0;
}

TEST_IMPL(mockllm_fault_drip) {
  char yaml[512];
  mt_client_t c;
  mt_client_t full;
  char *req = mt_anthropic(mt_simple_anthropic);

  snprintf(yaml, sizeof(yaml), "responses:\n  - reply:\n%s", long_reply);
  mt_run_one(yaml, req, &full);
  snprintf(yaml, sizeof(yaml),
           "responses:\n  - fault: {drip: {bytes: 64, interval_ms: 1}}\n"
           "    reply:\n%s",
           long_reply);
  mt_run_one(yaml, req, &c);
  free(req);
  ASSERT_EQ(c.ncomplete, 1);
  /* Same bytes, delivered in many small writes. */
  ASSERT_MEM_EQ(c.body[0].data, c.body[0].len, full.body[0].data,
                full.body[0].len);
  ASSERT_GE(c.nreads, (full.raw_bytes / 64) / 4 + 2);
  ASSERT(c.nreads > full.nreads);
  mt_client_free(&c);
  mt_client_free(&full);
  return 0;
}

TEST_IMPL(mockllm_exhausted_modes) {
  static const char err_yaml[] =
      "on_exhausted: error\n"
      "responses:\n"
      "  - reply: {content: [{text: one}]}\n";
  static const char last_yaml[] =
      "responses:\n"
      "  - reply: {content: [{text: one}]}\n"
      "  - reply: {content: [{text: two}]}\n";
  uv_loop_t loop;
  mt_client_t c;
  char *req = mt_anthropic(mt_simple_anthropic);
  int i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, req);
  mt_client_add(&c, req);
  c.server = mt_server(&loop, err_yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.status[0], 200);
  ASSERT_EQ(c.status[1], 500);
  ASSERT_NOT_NULL(strstr(c.body[1].data, "scenario exhausted"));
  ASSERT_NOT_NULL(strstr(c.body[1].data, "\"api_error\""));
  mt_client_free(&c);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  for (i = 0; i < 3; i++) {
    mt_client_add(&c, req);
  }
  c.server = mt_server(&loop, last_yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_NOT_NULL(strstr(c.body[0].data, "\"text\":\"one\""));
  ASSERT_NOT_NULL(strstr(c.body[1].data, "\"text\":\"two\""));
  ASSERT_NOT_NULL(strstr(c.body[2].data, "\"text\":\"two\""));
  mt_client_free(&c);
  free(req);
  return 0;
}

static int closed_calls;

static void on_server_closed(al_mockllm_t *m) {
  (void)m;
  closed_calls++;
}

static bool close_server_on_first_ping(mt_client_t *c) {
  if (c->server != NULL && strstr(c->body[0].data, "event: ping") != NULL) {
    al_mockllm_t *m = c->server;

    c->server = NULL; /* the client must not close it again */
    al_mockllm_close(m, on_server_closed);
    ASSERT_EQ(closed_calls, 0); /* never synchronously */
  }
  return false; /* keep reading until the server hangs up */
}

TEST_IMPL(mockllm_close_while_streaming) {
  static const char yaml[] =
      "responses:\n"
      "  - fault: {pings_only: true, ping_interval_ms: 1}\n";
  uv_loop_t loop;
  mt_client_t c;
  char *req = mt_anthropic(mt_simple_anthropic);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, req);
  free(req);
  c.on_body = close_server_on_first_ping;
  c.server = mt_server(&loop, yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(closed_calls, 1);
  ASSERT(c.read_err == UV_EOF || c.read_err == UV_ECONNRESET);
  ASSERT_EQ(c.ncomplete, 0);
  mt_client_free(&c);
  return 0;
}

static bool hang_up_early(mt_client_t *c) {
  return c->body[0].len > 0; /* close after the first body bytes */
}

TEST_IMPL(mockllm_client_hangs_up_mid_stream) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - repeat_text: {count: 1000, text: \"x\", delay_ms: 1}\n";
  uv_loop_t loop;
  mt_client_t c;
  al_mockllm_t *m;
  al_mockllm_stats_t st;
  char *req = mt_anthropic(mt_simple_anthropic);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, req);
  free(req);
  c.on_body = hang_up_early;
  m = mt_server(&loop, yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(m));
  /* The server notices the hang-up (it keeps reading while it streams) and
   * drops the connection and its timer. */
  do {
    al_mockllm_stats(m, &st);
  } while ((st.connections_accepted == 0 || st.connections_active > 0) &&
           uv_run(&loop, UV_RUN_ONCE) != 0);
  ASSERT_EQ(st.connections_accepted, 1);
  ASSERT_EQ(st.connections_active, 0);
  ASSERT(st.events_sent < 1000);
  al_mockllm_close(m, NULL);
  ASSERT_LOOP_CLOSES(&loop);
  mt_client_free(&c);
  return 0;
}
