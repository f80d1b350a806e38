/* The server stream of a Streamable HTTP MCP server that sends one event
 * and closes (issue 22, defect 5: it was reopened 570-1,125 times a
 * second): reopened with exponential backoff, at most per_window times in
 * any window, at the pace of its SSE retry:, and given up after a run of
 * short streams, with a notice when it degrades and when it gives up.
 *
 * The server is an in-test loopback one (tsrv). Counts are taken over a
 * fixed interval that starts before anything is opened, so a loaded
 * machine can only lower them: every bound asserted is one the backoff
 * guarantees however late the timers fire, and without the backoff each
 * is exceeded many times over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../transport/tsrv.h"
#include "client/run_int.h"
#include "mcp/mcp.h"
#include "test.h"

typedef struct {
  uv_loop_t loop;
  tsrv_t srv;
  al_mcp_t *m;
  int gets;        /* server-stream GETs the server answered */
  int retry_ms;    /* > 0: the stream carries retry: N */
  json_t *notices; /* texts given to on_notice */
  bool ready;
  bool closed;
  bool flag; /* a run_until timer fired */
} bk_t;

static void reply_json(tsrv_conn_t *c, const char *sid, const char *body) {
  tsrv_writef(c,
              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s%s%s"
              "Content-Length: %zu\r\n\r\n%s",
              sid != NULL ? "Mcp-Session-Id: " : "", sid != NULL ? sid : "",
              sid != NULL ? "\r\n" : "", strlen(body), body);
}

static void h_srv(tsrv_conn_t *c) {
  bk_t *t = c->srv->data;
  json_t *msg;
  const char *method;
  char out[512];

  if (strcmp(c->method, "DELETE") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    return;
  }
  if (strcmp(c->method, "GET") == 0) {
    /* The server stream: one event, then the connection ends. */
    t->gets++;
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Connection: close\r\n\r\n");
    if (t->retry_ms > 0) {
      tsrv_writef(c, "retry: %d\n\n", t->retry_ms);
    }
    tsrv_writef(c, "id: L%d\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
                   "\"notifications/message\",\"params\":{\"level\":"
                   "\"info\",\"data\":\"tick\"}}\n\n",
                t->gets);
    tsrv_end(c);
    return;
  }
  msg = json_loadb(c->body, c->body_len, 0, NULL);
  method = json_string_value(json_object_get(msg, "method"));
  if (method != NULL && strcmp(method, "initialize") == 0) {
    snprintf(out, sizeof(out),
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{"
             "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{"
             "\"tools\":{}},\"serverInfo\":{\"name\":\"bk\",\"version\":"
             "\"1\"}}}",
             (long long)json_integer_value(json_object_get(msg, "id")));
    reply_json(c, "sess-1", out);
  } else if (method != NULL && strcmp(method, "tools/list") == 0) {
    snprintf(out, sizeof(out),
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"tools\":[{"
             "\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}}]}}",
             (long long)json_integer_value(json_object_get(msg, "id")));
    reply_json(c, NULL, out);
  } else {
    tsrv_writes(c, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
  }
  json_decref(msg);
}

static void on_state(al_mcp_t *m, al_mcp_server_t *s, void *data) {
  (void)m;
  if (al__mcp_server_state(s) == AL_MCP_READY) {
    ((bk_t *)data)->ready = true;
  }
}

static void on_notice(al_mcp_t *m, al_mcp_server_t *s, const char *text,
                      void *data) {
  (void)m;
  ASSERT_STR_EQ(al__mcp_server_name(s), "h");
  json_array_append_new(((bk_t *)data)->notices, json_string(text));
}

static void bk_init(bk_t *t, const al_mcp_stream_backoff_t *b) {
  tsrv_opts_t so;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  char c[256];

  memset(t, 0, sizeof(*t));
  ASSERT_EQ(uv_loop_init(&t->loop), 0);
  t->notices = json_array();
  memset(&so, 0, sizeof(so));
  so.on_request = h_srv;
  so.data = t;
  ASSERT_EQ(tsrv_start(&t->srv, &t->loop, &so), 0);
  t->srv.data = t;
  snprintf(c, sizeof(c),
           "{\"mcpServers\":{\"h\":{\"url\":\"http://127.0.0.1:%d/mcp\"}}}",
           t->srv.port);
  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(c, strlen(c), &cfg, &err), 0);
  al_buf_free(&err);
  al__mcp_options_init(&o);
  o.loop = &t->loop;
  o.workspace = "/tmp";
  o.max_restarts = 0;
  o.on_state = on_state;
  o.on_notice = on_notice;
  o.data = t;
  o.stream_backoff = *b;
  o.stream_backoff.jitter_seed = 22;
  ASSERT_EQ(al__mcp_new(&o, &cfg, &t->m), 0);
}

static void on_flag(uv_timer_t *h) { ((bk_t *)h->data)->flag = true; }

/* Runs the loop until cond holds (NULL: for ms exactly); fails when a
 * cond is not met within 20 s (scaled). */
static void run_until(bk_t *t, bool (*cond)(bk_t *t), uint64_t ms) {
  uv_timer_t guard;

  uv_timer_init(&t->loop, &guard);
  guard.data = t;
  t->flag = false;
  uv_timer_start(&guard, on_flag,
                 cond != NULL
                     ? 20000 * (uint64_t)al_test_timeout_multiplier()
                     : ms,
                 0);
  while (!(cond != NULL && cond(t)) && !t->flag) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&guard, NULL);
  uv_run(&t->loop, UV_RUN_NOWAIT);
  if (cond != NULL && !cond(t)) {
    char *n = json_dumps(t->notices, JSON_COMPACT);

    AL_TEST_FAIL("condition never held: %d GETs, notices %s", t->gets, n);
  }
}

static void on_closed(void *data) { ((bk_t *)data)->closed = true; }

static bool is_closed(bk_t *t) { return t->closed; }
static bool two_gets(bk_t *t) { return t->gets >= 2; }
static bool four_gets(bk_t *t) { return t->gets >= 4; }
static bool two_notices(bk_t *t) { return json_array_size(t->notices) >= 2; }

static void bk_finish(bk_t *t) {
  al__mcp_close(t->m, on_closed, t);
  run_until(t, is_closed, 0);
  tsrv_close(&t->srv);
  ASSERT_LOOP_CLOSES(&t->loop);
  json_decref(t->notices);
}

static void backoff_init(al_mcp_stream_backoff_t *b) {
  memset(b, 0, sizeof(*b));
  b->healthy_ms = 600000; /* every stream here is short-lived */
  b->window_ms = 600000;
  b->per_window = 64;
  b->give_up = 1000;
}

/* Exponential: reopens 20..40, 40..80, 80..160, 160..320 ms apart (base
 * 40 ms, half to all of each), so within 200 ms of the start at most 4
 * GETs; without the backoff the one-event stream is reopened as fast as
 * the loop turns. */
TEST_IMPL(mcp_http_server_stream_backoff) {
  bk_t t;
  al_mcp_stream_backoff_t b;

  backoff_init(&b);
  b.base_ms = 40;
  b.max_ms = 10000;
  bk_init(&t, &b);
  al__mcp_start(t.m);
  run_until(&t, NULL, 200);
  if (t.gets > 4) {
    AL_TEST_FAIL("%d server-stream GETs within 200 ms (at most 4)", t.gets);
  }
  /* And it is reopened all the same. */
  run_until(&t, two_gets, 0);
  ASSERT(t.ready);
  bk_finish(&t);
  return 0;
}

/* retry: 250 in the stream: no reopen sooner, whatever the (1 ms)
 * backoff says. */
TEST_IMPL(mcp_http_server_stream_honours_retry) {
  bk_t t;
  al_mcp_stream_backoff_t b;

  backoff_init(&b);
  b.base_ms = 1;
  b.max_ms = 2;
  bk_init(&t, &b);
  t.retry_ms = 250;
  al__mcp_start(t.m);
  run_until(&t, NULL, 200);
  if (t.gets > 1) {
    AL_TEST_FAIL("%d server-stream GETs within 200 ms (retry: 250)", t.gets);
  }
  run_until(&t, two_gets, 0);
  bk_finish(&t);
  return 0;
}

/* At most 3 opens in any 400 ms, with a 1-2 ms backoff: within 350 ms of
 * the start at most 3 GETs; the fourth comes once the window moved. */
TEST_IMPL(mcp_http_server_stream_window_bound) {
  bk_t t;
  al_mcp_stream_backoff_t b;

  backoff_init(&b);
  b.base_ms = 1;
  b.max_ms = 2;
  b.window_ms = 400;
  b.per_window = 3;
  bk_init(&t, &b);
  al__mcp_start(t.m);
  run_until(&t, NULL, 350);
  if (t.gets > 3) {
    AL_TEST_FAIL("%d server-stream GETs within 350 ms (at most 3 in 400)",
                 t.gets);
  }
  run_until(&t, four_gets, 0);
  bk_finish(&t);
  return 0;
}

/* A notice when it degrades (the 2nd short stream in a row), another when
 * it gives up (the 5th): exactly 5 GETs, none after. */
TEST_IMPL(mcp_http_server_stream_gives_up_with_notice) {
  bk_t t;
  al_mcp_stream_backoff_t b;

  backoff_init(&b);
  b.base_ms = 1;
  b.max_ms = 2;
  b.degrade_after = 2;
  b.give_up = 5;
  bk_init(&t, &b);
  al__mcp_start(t.m);
  run_until(&t, two_notices, 0);
  ASSERT_EQ(t.gets, 5);
  ASSERT(strstr(json_string_value(json_array_get(t.notices, 0)),
                "reopened with backoff") != NULL);
  ASSERT(strstr(json_string_value(json_array_get(t.notices, 1)),
                "not opened again") != NULL);
  /* The session still works; the stream stays closed. */
  ASSERT_EQ(al__mcp_server_state(al__mcp_server(t.m, 0)), AL_MCP_READY);
  run_until(&t, NULL, 50);
  ASSERT_EQ(t.gets, 5);
  ASSERT_EQ(json_array_size(t.notices), 2);
  bk_finish(&t);
  return 0;
}

/* `agentloop run`'s text view shows the degraded notice (a ready state
 * is routine and is not). */
TEST_IMPL(mcp_view_run_text_degraded) {
  al__cli_view_t v;
  al_event_t ev[2];
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);

  ASSERT_NOT_NULL(f);
  memset(ev, 0, sizeof(ev));
  ev[0].type = AL_EVENT_MCP_SERVER_STATE;
  ev[0].u.mcp.server = (al_slice_t){"web", 3};
  ev[0].u.mcp.state = (al_slice_t){"ready", 5};
  ev[1] = ev[0];
  ev[1].u.mcp.state = (al_slice_t){"degraded", 8};
  ev[1].u.mcp.error = (al_slice_t){"the server stream ended", 23};
  al__cli_view_init(&v, f, false);
  al__cli_view_event(&v, &ev[0]);
  al__cli_view_event(&v, &ev[1]);
  al__cli_view_flush(&v);
  fclose(f);
  if (strstr(out, "mcp web: the server stream ended\n") == NULL ||
      strstr(out, "ready") != NULL) {
    AL_TEST_FAIL("view: %s", out);
  }
  free(out);
  return 0;
}
