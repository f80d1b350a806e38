/* MCP over Streamable HTTP (src/mcp/mcp_http.c) against an in-test MCP
 * server on the loopback (tsrv, llhttp-parsed requests, jansson bodies):
 * handshake, session id and protocol version echoed, JSON and SSE replies,
 * a 404 for an expired session re-initializes once, a broken event stream
 * resumes with Last-Event-ID, DELETE on close, ${VAR} headers, and a
 * server that never answers fails within its startup timeout.
 *
 * Waiting is event-driven (run_until with a guard timer); the only times
 * are injected short timeouts scaled by AL_TEST_TIMEOUT_MULTIPLIER. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <jansson.h>

#include "../transport/tsrv.h"
#include "mcp/mcp.h"
#include "test.h"
#include "unit/loop/agent_fx.h"

typedef enum { R_JSON = 0, R_SSE } reply_t;

typedef struct {
  uv_loop_t loop;
  tsrv_t srv;
  al_mcp_t *m;
  json_t *states;
  json_t *seen; /* [{method, session, version, accept, auth, last_event_id}] */
  int closed;
  bool guard_fired;
  /* server script */
  reply_t reply;
  bool hang;         /* never answer anything */
  bool break_stream; /* the first call's stream ends before its answer */
  bool no_ids;       /* ... and its events carry no ids */
  bool expire_always; /* every session is unknown right after initialize */
  int init_status;    /* answer initialize with this status (0: 200) */
  bool ping_in_stream; /* a call's stream carries a ping to the client */
  bool listen_stream;  /* offer the GET stream (else 405) */
  int inits;
  int deletes;
  char valid[64]; /* the session the server knows */
  /* the last call */
  int done;
  bool is_error;
  char *text;
  int progress;
} ht_t;

/* ---- the server ------------------------------------------------------------ */

static void reply_json(tsrv_conn_t *c, int status, const char *sid,
                       const char *body) {
  tsrv_writef(c,
              "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n%s%s%s"
              "Content-Length: %zu\r\n\r\n%s",
              status, sid != NULL ? "Mcp-Session-Id: " : "",
              sid != NULL ? sid : "", sid != NULL ? "\r\n" : "", strlen(body),
              body);
}

/* One event, written in two pieces cut mid-line so the client's parser
 * sees a split. */
static void sse_event(tsrv_conn_t *c, const char *id, const char *data) {
  char b[4096];
  size_t n;

  n = (size_t)snprintf(b, sizeof(b), "%s%s%sdata: %s\n\n",
                       id != NULL ? "id: " : "", id != NULL ? id : "",
                       id != NULL ? "\n" : "", data);
  tsrv_write(c, b, n / 2);
  tsrv_write(c, b + n / 2, n - n / 2);
}

static void sse_head(tsrv_conn_t *c, const char *sid) {
  tsrv_writef(c,
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s%s%s"
              "Connection: close\r\n\r\n",
              sid != NULL ? "Mcp-Session-Id: " : "", sid != NULL ? sid : "",
              sid != NULL ? "\r\n" : "");
}

/* The answer to msg as JSON or as an event stream (with a progress
 * notification first when the request asked for progress). */
static void answer(ht_t *t, tsrv_conn_t *c, const char *sid, json_t *msg,
                   json_t *result) {
  json_t *a = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                        json_object_get(msg, "id"), "result", result);
  char *s = json_dumps(a, JSON_COMPACT);
  const json_t *tok = json_object_get(
      json_object_get(json_object_get(msg, "params"), "_meta"),
      "progressToken");

  if (t->reply == R_JSON) {
    reply_json(c, 200, sid, s);
  } else {
    sse_head(c, sid);
    if (t->ping_in_stream && tok != NULL) {
      sse_event(c, "ev-0",
                "{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":"
                "\"ping\"}");
    }
    if (tok != NULL) {
      char p[256];

      snprintf(p, sizeof(p),
               "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
               "\"params\":{\"progressToken\":%lld,\"progress\":1}}",
               (long long)json_integer_value(tok));
      sse_event(c, "ev-1", p);
    }
    sse_event(c, "ev-2", s);
    tsrv_end(c);
  }
  free(s);
  json_decref(a);
}

static void h_mcp(tsrv_conn_t *c) {
  ht_t *t = c->srv->data;
  char sid[128], ver[64], acc[128], auth[128], lei[64] = "";
  const char *sid_h = tsrv_header(c, "mcp-session-id", sid, sizeof(sid));
  json_t *msg;
  const char *method;
  char made[64];

  json_array_append_new(
      t->seen,
      json_pack("{s:s, s:s?, s:s?, s:s?, s:s?, s:s?}", "method", c->method,
                "session", sid_h,
                "version", tsrv_header(c, "mcp-protocol-version", ver,
                                       sizeof(ver)),
                "accept", tsrv_header(c, "accept", acc, sizeof(acc)),
                "auth", tsrv_header(c, "authorization", auth, sizeof(auth)),
                "last_event_id",
                tsrv_header(c, "last-event-id", lei, sizeof(lei))));
  if (strcmp(c->method, "DELETE") == 0) {
    t->deletes++;
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    return;
  }
  if (strcmp(c->method, "GET") == 0 && lei[0] == '\0') {
    if (!t->listen_stream) {
      tsrv_writes(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: "
                     "0\r\n\r\n");
      return;
    }
    /* The server stream: a tool list change, then it stays open. */
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n");
    {
      const char *ev = "id: L1\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
                       "\"notifications/tools/list_changed\"}\n\n";

      tsrv_writef(c, "%zx\r\n%s\r\n", strlen(ev), ev);
    }
    return;
  }
  if (strcmp(c->method, "GET") == 0) {
    /* A resume: the answer the broken stream did not deliver. */
    sse_head(c, NULL);
    sse_event(c, "ev-3",
              "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[{"
              "\"type\":\"text\",\"text\":\"resumed\"}]}}");
    tsrv_end(c);
    return;
  }
  msg = json_loadb(c->body, c->body_len, 0, NULL);
  method = json_string_value(json_object_get(msg, "method"));
  json_object_set_new(json_array_get(t->seen, json_array_size(t->seen) - 1),
                      "rpc", json_string(method != NULL ? method : "answer"));
  if (t->hang) {
    json_decref(msg);
    return;
  }
  if (method != NULL && strcmp(method, "initialize") == 0 &&
      t->init_status != 0) {
    t->inits++;
    reply_json(c, t->init_status, NULL,
               "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":"
               "-32603,\"message\":\"down\"}}");
  } else if (method != NULL && strcmp(method, "initialize") == 0) {
    t->inits++;
    snprintf(made, sizeof(made), "sess-%d", t->inits);
    snprintf(t->valid, sizeof(t->valid), "%s",
             t->expire_always ? "nobody" : made);
    answer(t, c, made, msg,
           json_pack("{s:s, s:{s:{}}, s:{s:s, s:s}}", "protocolVersion",
                     "2025-11-25", "capabilities", "tools", "serverInfo",
                     "name", "ht", "version", "1"));
  } else if (sid_h == NULL || strcmp(sid_h, t->valid) != 0) {
    reply_json(c, 404, NULL, "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":"
                             "-32001,\"message\":\"Session not found\"}}");
  } else if (method == NULL || json_object_get(msg, "id") == NULL) {
    tsrv_writes(c, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
  } else if (strcmp(method, "tools/list") == 0) {
    answer(t, c, NULL, msg,
           json_pack("{s:[{s:s, s:{s:s}}]}", "tools", "name", "echo",
                     "inputSchema", "type", "object"));
  } else if (strcmp(method, "tools/call") == 0 && t->break_stream) {
    t->break_stream = false;
    sse_head(c, NULL);
    sse_event(c, t->no_ids ? NULL : "ev-1", "");
    sse_event(c, t->no_ids ? NULL : "ev-2",
              "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\","
              "\"params\":{\"level\":\"info\",\"data\":\"working\"}}");
    tsrv_end(c); /* the connection ends, the answer never came */
  } else if (strcmp(method, "tools/call") == 0) {
    const char *text = json_string_value(json_object_get(
        json_object_get(json_object_get(msg, "params"), "arguments"),
        "text"));
    char out[256];

    snprintf(out, sizeof(out), "echo:%s", text != NULL ? text : "");
    answer(t, c, NULL, msg,
           json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text",
                     out));
  } else {
    reply_json(c, 200, NULL, "{\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{}}");
  }
  json_decref(msg);
}

/* ---- the client side --------------------------------------------------------- */

static void on_state(al_mcp_t *m, al_mcp_server_t *s, void *data) {
  ht_t *t = data;
  char b[128];

  (void)m;
  snprintf(b, sizeof(b), "%s:%s", al__mcp_server_name(s),
           al__mcp_state_name(al__mcp_server_state(s)));
  json_array_append_new(t->states, json_string(b));
}

static void on_guard(uv_timer_t *h) { ((ht_t *)h->data)->guard_fired = true; }

static void run_until(ht_t *t, bool (*cond)(ht_t *t, void *arg), void *arg) {
  uv_timer_t guard;

  uv_timer_init(&t->loop, &guard);
  guard.data = t;
  t->guard_fired = false;
  uv_timer_start(&guard, on_guard,
                 20000 * (uint64_t)al_test_timeout_multiplier(), 0);
  while (!cond(t, arg) && !t->guard_fired) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&guard, NULL);
  uv_run(&t->loop, UV_RUN_NOWAIT);
  if (!cond(t, arg)) {
    char *s = json_dumps(t->states, JSON_COMPACT);
    char *r = json_dumps(t->seen, JSON_COMPACT);

    AL_TEST_FAIL("condition never held; states: %s; requests: %s", s, r);
  }
}

static bool has_state(ht_t *t, void *arg) {
  size_t i;
  json_t *v;

  json_array_foreach(t->states, i, v) {
    if (strcmp(json_string_value(v), (const char *)arg) == 0) {
      return true;
    }
  }
  return false;
}

static bool call_done(ht_t *t, void *arg) {
  (void)arg;
  return t->done > 0;
}

static bool is_closed(ht_t *t, void *arg) {
  (void)arg;
  return t->closed > 0;
}

static void ht_init(ht_t *t, const char *extra, int max_restarts) {
  tsrv_opts_t so;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  char c[1024];

  memset(t, 0, sizeof(*t));
  ASSERT_EQ(uv_loop_init(&t->loop), 0);
  t->states = json_array();
  t->seen = json_array();
  memset(&so, 0, sizeof(so));
  so.on_request = h_mcp;
  so.data = t;
  ASSERT_EQ(tsrv_start(&t->srv, &t->loop, &so), 0);
  t->srv.data = t;
  snprintf(c, sizeof(c),
           "{\"mcpServers\":{\"h\":{\"url\":\"http://127.0.0.1:%d/mcp\"%s}}}",
           t->srv.port, extra != NULL ? extra : "");
  al_buf_init(&err, 4096);
  if (al__mcp_config_parse(c, strlen(c), &cfg, &err) != 0) {
    AL_TEST_FAIL("config: %s\n%s", err.data, c);
  }
  al_buf_free(&err);
  al__mcp_options_init(&o);
  o.loop = &t->loop;
  o.workspace = "/tmp";
  o.shutdown_grace_ms = 2000 * (uint64_t)al_test_timeout_multiplier();
  o.restart_base_ms = 10;
  o.max_restarts = max_restarts;
  o.on_state = on_state;
  o.data = t;
  ASSERT_EQ(al__mcp_new(&o, &cfg, &t->m), 0);
}

static void on_closed(void *data) { ((ht_t *)data)->closed++; }

static void ht_finish(ht_t *t) {
  al__mcp_close(t->m, on_closed, t);
  run_until(t, is_closed, NULL);
  tsrv_close(&t->srv);
  ASSERT_LOOP_CLOSES(&t->loop);
  json_decref(t->states);
  json_decref(t->seen);
  free(t->text);
}

static void on_progress(al_mcp_call_t *c, const char *text, void *data) {
  (void)c;
  (void)text;
  ((ht_t *)data)->progress++;
}

static void on_done(al_mcp_call_t *c, bool is_error, const char *text,
                    size_t len, void *data) {
  ht_t *t = data;

  (void)c;
  (void)len;
  t->done++;
  t->is_error = is_error;
  free(t->text);
  t->text = strdup(text);
}

static void call_wait(ht_t *t, const char *args) {
  json_t *a = json_loads(args, 0, NULL);
  al_mcp_call_t *c = NULL;

  t->done = 0;
  t->progress = 0;
  ASSERT_EQ(al__mcp_call(al__mcp_server(t->m, 0), "echo", a, on_progress,
                         on_done, t, &c),
            0);
  json_decref(a);
  run_until(t, call_done, NULL);
}

/* The recorded request number i (field). */
static const char *seen(ht_t *t, size_t i, const char *field) {
  return json_string_value(json_object_get(json_array_get(t->seen, i), field));
}

/* The index of the first request with JSON-RPC method rpc (or HTTP method
 * for GET/DELETE) at or after from; -1 when none. */
static int find(ht_t *t, const char *what, size_t from) {
  size_t i;

  for (i = from; i < json_array_size(t->seen); i++) {
    const char *r = seen(t, i, "rpc");

    if ((r != NULL && strcmp(r, what) == 0) ||
        strcmp(seen(t, i, "method"), what) == 0) {
      return (int)i;
    }
  }
  return -1;
}

static size_t count_prefix(ht_t *t, const char *prefix) {
  size_t i, n = 0;
  json_t *v;

  json_array_foreach(t->states, i, v) {
    n += strncmp(json_string_value(v), prefix, strlen(prefix)) == 0;
  }
  return n;
}

/* ---- tests ------------------------------------------------------------------- */

static void handshake_and_call(reply_t reply) {
  ht_t t;
  int i;

  setenv("AL_T_MCP_TOKEN", "s3cret", 1);
  ht_init(&t, ",\"headers\":{\"Authorization\":\"Bearer ${AL_T_MCP_TOKEN}\"}",
          3);
  t.reply = reply;
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:ready");
  ASSERT_EQ(json_array_size(al__mcp_server_tools(al__mcp_server(t.m, 0))), 1);
  ASSERT_STR_EQ(al__mcp_server_version(al__mcp_server(t.m, 0)), "2025-11-25");
  call_wait(&t, "{\"text\":\"hi\"}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "echo:hi");
  ASSERT_EQ(t.progress, reply == R_SSE ? 1 : 0);
  /* initialize: no session, no version yet; the Accept of the spec. */
  i = find(&t, "initialize", 0);
  ASSERT_EQ(i, 0);
  ASSERT_STR_EQ(seen(&t, 0, "method"), "POST");
  ASSERT_NULL(seen(&t, 0, "session"));
  ASSERT_NULL(seen(&t, 0, "version"));
  ASSERT_STR_EQ(seen(&t, 0, "accept"), "application/json, text/event-stream");
  ASSERT_STR_EQ(seen(&t, 0, "auth"), "Bearer s3cret");
  /* Every later request: the session id and the version. */
  ASSERT(find(&t, "notifications/initialized", 0) > 0);
  ASSERT(find(&t, "tools/list", 0) > 0);
  ASSERT(find(&t, "tools/call", 0) > 0);
  for (i = 1; i < (int)json_array_size(t.seen); i++) {
    ASSERT_STR_EQ(seen(&t, (size_t)i, "session"), "sess-1");
    ASSERT_STR_EQ(seen(&t, (size_t)i, "version"), "2025-11-25");
    ASSERT_STR_EQ(seen(&t, (size_t)i, "auth"), "Bearer s3cret");
  }
  ASSERT_EQ(t.inits, 1);
  ASSERT_EQ(t.deletes, 0);
  ht_finish(&t);
  /* Close ended the session on the server. */
  ASSERT_EQ(t.deletes, 1);
  unsetenv("AL_T_MCP_TOKEN");
}

TEST_IMPL(mcp_http_handshake_json) {
  handshake_and_call(R_JSON);
  return 0;
}

TEST_IMPL(mcp_http_handshake_sse) {
  handshake_and_call(R_SSE);
  return 0;
}

TEST_IMPL(mcp_http_expired_session_reinitializes_once) {
  ht_t t;
  int i, j;

  ht_init(&t, NULL, 0);
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:ready");
  snprintf(t.valid, sizeof(t.valid), "expired"); /* the server forgot it */
  call_wait(&t, "{\"text\":\"again\"}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "echo:again");
  ASSERT_EQ(t.inits, 2);
  /* The re-initialize carried no session; the call went again on the new
   * one after notifications/initialized. */
  i = find(&t, "initialize", 1);
  ASSERT(i > 0);
  ASSERT_NULL(seen(&t, (size_t)i, "session"));
  j = find(&t, "notifications/initialized", (size_t)i);
  ASSERT(j > i);
  ASSERT_STR_EQ(seen(&t, (size_t)j, "session"), "sess-2");
  j = find(&t, "tools/call", (size_t)i);
  ASSERT(j > i);
  ASSERT_STR_EQ(seen(&t, (size_t)j, "session"), "sess-2");
  ASSERT_EQ(count_prefix(&t, "h:failed") + count_prefix(&t, "h:restarting"),
            0);
  ht_finish(&t);
  ASSERT_EQ(t.deletes, 1);
  return 0;
}

TEST_IMPL(mcp_http_expired_twice_fails) {
  ht_t t;

  ht_init(&t, NULL, 0);
  t.expire_always = true;
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:failed");
  /* One re-initialize, no loop. */
  ASSERT_EQ(t.inits, 2);
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)), "404") != NULL);
  ht_finish(&t);
  return 0;
}

TEST_IMPL(mcp_http_broken_stream_resumes) {
  ht_t t;
  int g;

  ht_init(&t, NULL, 0);
  t.reply = R_SSE;
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:ready");
  t.break_stream = true;
  call_wait(&t, "{\"text\":\"x\"}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "resumed");
  g = find(&t, "GET", 0);
  while (g >= 0 && seen(&t, (size_t)g, "last_event_id") == NULL) {
    g = find(&t, "GET", (size_t)g + 1); /* past the server-stream GET */
  }
  ASSERT(g > 0);
  ASSERT_STR_EQ(seen(&t, (size_t)g, "last_event_id"), "ev-2");
  ASSERT_STR_EQ(seen(&t, (size_t)g, "session"), "sess-1");
  ht_finish(&t);
  return 0;
}

TEST_IMPL(mcp_http_broken_stream_without_ids_fails) {
  ht_t t;

  ht_init(&t, NULL, 0);
  t.reply = R_SSE;
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:ready");
  t.break_stream = true;
  t.no_ids = true;
  call_wait(&t, "{\"text\":\"x\"}");
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "without an answer") != NULL);
  {
    size_t i;

    for (i = 0; i < json_array_size(t.seen); i++) {
      ASSERT_NULL(seen(&t, i, "last_event_id")); /* no resume */
    }
  }
  ht_finish(&t);
  return 0;
}

TEST_IMPL(mcp_http_silent_server_times_out) {
  ht_t t;
  uint64_t t0, ms = 300 * (uint64_t)al_test_timeout_multiplier();
  char extra[64];

  snprintf(extra, sizeof(extra), ",\"startup_timeout_ms\":%llu",
           (unsigned long long)ms);
  ht_init(&t, extra, 0);
  t.hang = true;
  t0 = uv_now(&t.loop);
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:failed");
  uv_update_time(&t.loop);
  ASSERT_GE(uv_now(&t.loop) - t0, ms);
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)),
                "did not finish starting") != NULL);
  /* The hung request is cancelled; no session, so no DELETE. */
  ht_finish(&t);
  ASSERT_EQ(find(&t, "DELETE", 0), -1);
  return 0;
}

TEST_IMPL(mcp_http_config) {
  al_mcp_config_t cfg;
  al_buf_t err;
  const char *bad[] = {
      "{\"mcpServers\":{\"a\":{\"url\":\"ftp://x\"}}}",
      "{\"mcpServers\":{\"a\":{\"url\":\"http://x\",\"command\":\"y\"}}}",
      "{\"mcpServers\":{\"a\":{\"url\":\"http://x\",\"headers\":[]}}}",
      "{\"mcpServers\":{\"a\":{\"url\":\"http://x\",\"headers\":{\"A b\":"
      "\"v\"}}}}",
      "{\"mcpServers\":{\"a\":{\"url\":\"http://x\",\"headers\":{\"A\":"
      "\"${AL_T_MCP_NL}\"}}}}",
      "{\"mcpServers\":{\"a\":{\"url\":\"http://x\",\"type\":\"sse\"}}}",
      NULL};
  const char *good = "{\"mcpServers\":{\"a\":{\"url\":\"https://h.example/"
                     "mcp\",\"headers\":{\"X-K\":\"k=${AL_T_MCP_V}\"},"
                     "\"timeout_ms\":5}}}";
  size_t i;

  setenv("AL_T_MCP_V", "42", 1);
  setenv("AL_T_MCP_NL", "a\r\nInjected: 1", 1);
  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(good, strlen(good), &cfg, &err), 0);
  ASSERT_EQ(cfg.n, 1);
  ASSERT_STR_EQ(cfg.servers[0].url, "https://h.example/mcp");
  ASSERT_NULL(cfg.servers[0].argv);
  ASSERT_STR_EQ(cfg.servers[0].headers[0], "X-K: k=42");
  ASSERT_NULL(cfg.servers[0].headers[1]);
  ASSERT_EQ(cfg.servers[0].call_timeout_ms, 5);
  al__mcp_config_free(&cfg);
  for (i = 0; bad[i] != NULL; i++) {
    al_buf_reset(&err);
    if (al__mcp_config_parse(bad[i], strlen(bad[i]), &cfg, &err) == 0) {
      AL_TEST_FAIL("accepted: %s", bad[i]);
    }
    ASSERT(strstr(err.data, "mcpServers.a.") != NULL);
  }
  al_buf_free(&err);
  unsetenv("AL_T_MCP_V");
  unsetenv("AL_T_MCP_NL");
  return 0;
}

/* ---- through the agent -------------------------------------------------------- */

static void on_agent_closed(al_agent_t *a) {
  fx_t *f = al_agent_get_data(a);

  f->closed = true;
}

/* Closes the agent (its MCP sessions end with DELETE on the server, which
 * runs on the same loop), then the server; fx_finish closes the rest. */
static void agent_finish(fx_t *f, ht_t *t) {
  al_agent_close(f->agent, on_agent_closed);
  f->agent = NULL;
  while (!f->closed) {
    uv_run(&f->loop, UV_RUN_ONCE);
  }
  tsrv_close(&t->srv);
  fx_finish(f);
  json_decref(t->seen);
}

static long find_state_ev(const fx_t *f, const char *state) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    if (strcmp(fx_jstr(e, "type"), "mcp_server_state") == 0 &&
        strcmp(fx_jstr(e, "state"), state) == 0) {
      return (long)i;
    }
  }
  return -1;
}

static void agent_server(fx_t *f, ht_t *t, const char *extra, char *cfg,
                         size_t n) {
  tsrv_opts_t so;

  memset(t, 0, sizeof(*t));
  t->seen = json_array();
  memset(&so, 0, sizeof(so));
  so.on_request = h_mcp;
  so.data = t;
  ASSERT_EQ(tsrv_start(&t->srv, &f->loop, &so), 0);
  t->srv.data = t;
  snprintf(cfg, n,
           "{%s\"mcpServers\":{\"web\":{\"url\":\"http://127.0.0.1:%d/mcp\"}}}",
           extra, t->srv.port);
  f->opts.mcp_config = cfg;
}

TEST_IMPL(agent_mcp_http_tool_called_from_run) {
  fx_t f;
  ht_t t;
  char cfg[512];
  const json_t *r;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__web__echo, input: "
              "{text: 'over http'}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  agent_server(&f, &t, "", cfg, sizeof(cfg));
  t.reply = R_SSE;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(find_state_ev(&f, "ready") >= 0);
  r = fx_tool_result(&f, 1, "m1");
  ASSERT_STR_EQ(fx_jstr(r, "content"), "echo:over http");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  ASSERT_EQ(t.inits, 1);
  ASSERT_STR_EQ(seen(&t, (size_t)find(&t, "tools/call", 0), "session"),
                "sess-1");
  fx_assert_valid(&f);
  agent_finish(&f, &t);
  ASSERT_EQ(t.deletes, 1);
  return 0;
}

TEST_IMPL(agent_mcp_http_silent_server_does_not_block) {
  fx_t f;
  ht_t t;
  char cfg[512];
  long rs, ts;
  uint64_t waited_ms;

  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hello'}]}\n");
  agent_server(&f, &t, "\"startup_wait_ms\":150,", cfg, sizeof(cfg));
  t.hang = true;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  rs = fx_find(&f, "run_started", NULL, 0);
  ts = fx_find(&f, "turn_started", NULL, 0);
  waited_ms = (uint64_t)(json_integer_value(
                             json_object_get(fx_event(&f, ts), "ts_ns")) -
                         json_integer_value(
                             json_object_get(fx_event(&f, rs), "ts_ns"))) /
              1000000;
  /* The server never answered: the run waited at most the startup wait,
   * and the first request went out without its tools. */
  ASSERT(waited_ms <= 150 + 250 * (uint64_t)al_test_timeout_multiplier());
  ASSERT_EQ(find_state_ev(&f, "ready"), -1);
  ASSERT_EQ(find(&t, "initialize", 0), 0);
  agent_finish(&f, &t);
  return 0;
}

/* ---- the real server-everything in its Streamable HTTP mode ------------------- */

#define EVERYTHING \
  AL_SOURCE_DIR "/tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

typedef struct {
  uv_process_t proc;
  uv_pipe_t err, out;
  char log[16384];
  size_t len;
  bool listening;
  bool deleted; /* it logged the termination of our session */
  bool exited;
} node_t;

static void node_alloc(uv_handle_t *h, size_t n, uv_buf_t *b) {
  node_t *nd = h->data;

  (void)n;
  *b = uv_buf_init(nd->log + nd->len, (unsigned)(sizeof(nd->log) - 1 - nd->len));
}

static void node_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  node_t *nd = s->data;

  (void)b;
  if (n > 0) {
    nd->len += (size_t)n;
    nd->log[nd->len] = '\0';
    nd->listening = nd->listening || strstr(nd->log, "listening on port") != NULL;
    nd->deleted = nd->deleted ||
                  strstr(nd->log, "session termination request") != NULL;
    if (nd->len + 1024 >= sizeof(nd->log)) {
      /* Keep the tail: a line may straddle the cut. */
      memmove(nd->log, nd->log + nd->len - 256, 256);
      nd->len = 256;
      nd->log[nd->len] = '\0';
    }
  } else if (n < 0) {
    uv_read_stop(s);
  }
}

static void node_exit(uv_process_t *p, int64_t st, int sig) {
  (void)st;
  (void)sig;
  ((node_t *)p->data)->exited = true;
}

/* A free loopback port (bound, read, released). */
static int free_port(uv_loop_t *loop) {
  uv_tcp_t tcp;
  struct sockaddr_in a;
  struct sockaddr_storage got;
  int len = sizeof(got);

  uv_tcp_init(loop, &tcp);
  uv_ip4_addr("127.0.0.1", 0, &a);
  ASSERT_EQ(uv_tcp_bind(&tcp, (const struct sockaddr *)&a, 0), 0);
  ASSERT_EQ(uv_tcp_getsockname(&tcp, (struct sockaddr *)&got, &len), 0);
  uv_close((uv_handle_t *)&tcp, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  return ntohs(((struct sockaddr_in *)&got)->sin_port);
}

static bool node_up(ht_t *t, void *arg) {
  (void)t;
  return ((node_t *)arg)->listening || ((node_t *)arg)->exited;
}

static bool node_deleted(ht_t *t, void *arg) {
  (void)t;
  return ((node_t *)arg)->deleted || ((node_t *)arg)->exited;
}

TEST_IMPL(mcp_http_real_server_everything) {
  ht_t t;
  node_t nd;
  uv_process_options_t po;
  uv_stdio_container_t io[3];
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  char c[512], env_port[32], env_path[4096];
  char *args[] = {"node", EVERYTHING, "streamableHttp", NULL};
  char *env[] = {env_port, env_path, NULL};
  struct stat st;
  int port;

  /* Starts the real Node server: 3.8 s on a loaded 2-core machine (issue
   * 22). */
  al_test_timeout_s(30);
  if (stat(EVERYTHING, &st) != 0) {
    AL_TEST_FAIL("the MCP test servers are not installed: run scripts/test.sh "
                 "(npm ci in tests/mcp)");
  }
  memset(&t, 0, sizeof(t));
  memset(&nd, 0, sizeof(nd));
  ASSERT_EQ(uv_loop_init(&t.loop), 0);
  t.states = json_array();
  t.seen = json_array();
  port = free_port(&t.loop);
  snprintf(env_port, sizeof(env_port), "PORT=%d", port);
  snprintf(env_path, sizeof(env_path), "PATH=%s",
           getenv("PATH") != NULL ? getenv("PATH") : "/usr/bin:/bin");
  uv_pipe_init(&t.loop, &nd.err, 0);
  uv_pipe_init(&t.loop, &nd.out, 0);
  nd.err.data = &nd;
  nd.out.data = &nd;
  nd.proc.data = &nd;
  memset(&po, 0, sizeof(po));
  io[0].flags = UV_IGNORE;
  io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  io[1].data.stream = (uv_stream_t *)&nd.out;
  io[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  io[2].data.stream = (uv_stream_t *)&nd.err;
  po.file = "node";
  po.args = args;
  po.env = env;
  po.stdio = io;
  po.stdio_count = 3;
  po.exit_cb = node_exit;
  ASSERT_EQ(uv_spawn(&t.loop, &nd.proc, &po), 0);
  uv_read_start((uv_stream_t *)&nd.err, node_alloc, node_read);
  uv_read_start((uv_stream_t *)&nd.out, node_alloc, node_read);
  run_until(&t, node_up, &nd);
  if (!nd.listening) {
    AL_TEST_FAIL("server-everything did not start: %s", nd.log);
  }
  snprintf(c, sizeof(c),
           "{\"mcpServers\":{\"everything\":{\"url\":"
           "\"http://127.0.0.1:%d/mcp\"}}}",
           port);
  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(c, strlen(c), &cfg, &err), 0);
  al_buf_free(&err);
  al__mcp_options_init(&o);
  o.loop = &t.loop;
  o.workspace = "/tmp";
  o.max_restarts = 0;
  o.on_state = on_state;
  o.data = &t;
  ASSERT_EQ(al__mcp_new(&o, &cfg, &t.m), 0);
  al__mcp_start(t.m);
  run_until(&t, has_state, "everything:ready");
  ASSERT_GE(json_array_size(al__mcp_server_tools(al__mcp_server(t.m, 0))), 10);
  ASSERT_NOT_NULL(al__mcp_server_version(al__mcp_server(t.m, 0)));
  t.done = 0;
  {
    json_t *a = json_pack("{s:s}", "message", "hi over http");
    al_mcp_call_t *call = NULL;

    ASSERT_EQ(al__mcp_call(al__mcp_server(t.m, 0), "echo", a, on_progress,
                           on_done, &t, &call),
              0);
    json_decref(a);
    run_until(&t, call_done, NULL);
  }
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, "hi over http") != NULL);
  al__mcp_close(t.m, on_closed, &t);
  run_until(&t, is_closed, NULL);
  /* The server logs the DELETE of our session (the close waited for its
   * answer, the log line may still be in flight). */
  run_until(&t, node_deleted, &nd);
  ASSERT(nd.deleted);
  uv_process_kill(&nd.proc, SIGTERM);
  while (!nd.exited) {
    uv_run(&t.loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&nd.proc, NULL);
  uv_close((uv_handle_t *)&nd.err, NULL);
  uv_close((uv_handle_t *)&nd.out, NULL);
  ASSERT_LOOP_CLOSES(&t.loop);
  json_decref(t.states);
  json_decref(t.seen);
  free(t.text);
  return 0;
}

/* An error status fails the server with the status in its error; the
 * close from inside the failing request's completion finishes. */
TEST_IMPL(mcp_http_error_status_fails) {
  ht_t t;

  ht_init(&t, NULL, 0);
  t.init_status = 500;
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:failed");
  ASSERT_EQ(t.inits, 1);
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)), "HTTP 500") !=
         NULL);
  /* The body's reason is kept. */
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)),
                "\"message\":\"down\"") != NULL);
  ht_finish(&t);
  ASSERT_EQ(find(&t, "DELETE", 0), -1);
  return 0;
}

static bool answer_seen(ht_t *t, void *arg) {
  (void)arg;
  return find(t, "answer", 0) >= 0;
}

/* A server request inside a call's stream is answered with its own POST
 * on the session (202 for it), and the call still completes. */
TEST_IMPL(mcp_http_server_request_answered) {
  ht_t t;
  size_t i;
  bool answered = false;

  ht_init(&t, NULL, 0);
  t.reply = R_SSE;
  t.ping_in_stream = true;
  al__mcp_start(t.m);
  run_until(&t, has_state, "h:ready");
  call_wait(&t, "{\"text\":\"p\"}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "echo:p");
  /* The answer's POST may still be on its way. */
  run_until(&t, answer_seen, NULL);
  for (i = 0; i < json_array_size(t.seen); i++) {
    if (seen(&t, i, "rpc") != NULL && strcmp(seen(&t, i, "rpc"), "answer") == 0) {
      answered = true;
      ASSERT_STR_EQ(seen(&t, i, "method"), "POST");
      ASSERT_STR_EQ(seen(&t, i, "session"), "sess-1");
      ASSERT_STR_EQ(seen(&t, i, "version"), "2025-11-25");
    }
  }
  ASSERT(answered);
  ht_finish(&t);
  return 0;
}

static bool relisted(ht_t *t, void *arg) {
  (void)arg;
  return al__mcp_server_gen(al__mcp_server(t->m, 0)) >= 2;
}

/* The GET stream after the handshake carries a list change: re-listed. A
 * server without one answers 405 and nothing else changes (the other
 * tests). */
TEST_IMPL(mcp_http_server_stream_list_changed) {
  ht_t t;
  int g;

  ht_init(&t, NULL, 0);
  t.listen_stream = true;
  al__mcp_start(t.m);
  run_until(&t, relisted, NULL);
  g = find(&t, "GET", 0);
  ASSERT(g > 0);
  ASSERT_STR_EQ(seen(&t, (size_t)g, "accept"), "text/event-stream");
  ASSERT_STR_EQ(seen(&t, (size_t)g, "session"), "sess-1");
  ASSERT_NULL(seen(&t, (size_t)g, "last_event_id"));
  ASSERT(find(&t, "tools/list", (size_t)g) > g);
  ht_finish(&t);
  ASSERT_EQ(t.deletes, 1);
  return 0;
}
