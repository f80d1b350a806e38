/* Bounds on a response (issue 15): header count, a minimum transfer rate
 * (a slowloris server that sends one byte at a time, which keeps resetting
 * the idle timer) and a total time limit. */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "trec.h"
#include "tsrv.h"

static char url_buf[128];

static const char *url_for(const tsrv_t *s, const char *path) {
  snprintf(url_buf, sizeof(url_buf), "http://127.0.0.1:%d%s", s->port, path);
  return url_buf;
}

static void h_many_headers(tsrv_conn_t *c) {
  int i;

  tsrv_writes(c, "HTTP/1.1 200 OK\r\n");
  for (i = 0; i < 40; i++) {
    tsrv_writef(c, "X-H%d: v\r\n", i);
  }
  tsrv_writes(c, "Content-Length: 2\r\n\r\nok");
}

TEST_IMPL(limits_header_count) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  al_http_client_options_t co;
  rec_t r1, r2;
  al_http_request_options_t o;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_many_headers;
  tsrv_start(&srv, &loop, &so);
  al_http_client_options_init(&co);
  co.max_header_count = 20;
  c = rec_client(&loop, &co);
  rec_init(&r1);
  ASSERT_EQ(rec_get(c, &r1, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.ncomplete, 1);
  ASSERT_EQ(r1.status, AL_ETOOBIG);
  ASSERT_EQ(r1.kind, AL_HTTP_ERR_TOO_BIG);
  ASSERT_NOT_NULL(strstr(r1.msg, "more than 20 headers"));
  ASSERT_EQ(r1.nresp, 0);

  /* A per-request value above the count lets the same response through. */
  rec_init(&r2);
  al_http_request_options_init(&o);
  o.url = url_for(&srv, "/");
  o.max_header_count = 64;
  ASSERT_EQ(rec_start(c, &r2, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r2.status, 0);
  ASSERT_MEM_EQ(r2.body, r2.body_len, "ok", 2);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* One byte per tick, in the headers or in the body: each byte resets the
 * idle timer, so only the rate or the total bound can end it. */
static const char slow_head[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

static void drip_head(tsrv_conn_t *c) {
  if (slow_head[c->step] == '\0') {
    return; /* then silence would be the idle timer's case: keep going */
  }
  tsrv_write(c, slow_head + c->step, 1);
  c->step++;
}

static void drip_body(tsrv_conn_t *c) {
  if (c->step == 0) {
    tsrv_writes(c, slow_head);
  }
  /* one chunk of one byte */
  tsrv_writes(c, "1\r\nx\r\n");
  c->step++;
}

static void h_slow(tsrv_conn_t *c) {
  unsigned tick = 4;

  c->step = 0;
  if (strcmp(c->url, "/head") == 0) {
    tsrv_every(c, tick, drip_head);
  } else {
    tsrv_every(c, tick, drip_body);
  }
}

static void run_slow(uv_loop_t *loop, al_http_client_t *c, const char *url,
                     int64_t window_ms, int64_t min_bytes, int64_t total_ms,
                     rec_t *r) {
  al_http_request_options_t o;

  rec_init(r);
  al_http_request_options_init(&o);
  o.url = url;
  o.idle_timeout_ms = 1000 * al_test_timeout_multiplier();
  o.progress_timeout_ms = 0;
  o.min_rate_window_ms = window_ms;
  o.min_rate_bytes = min_bytes;
  o.total_timeout_ms = total_ms;
  ASSERT_EQ(rec_start(c, r, &o), 0);
  uv_run(loop, UV_RUN_DEFAULT);
}

TEST_IMPL(limits_min_rate_slowloris) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  int64_t w = 60 * al_test_timeout_multiplier();

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_slow;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);

  /* Headers at one byte per 4 ms: at most ~w/4 bytes a window, far below
   * 4096. */
  run_slow(&loop, c, url_for(&srv, "/head"), w, 4096, 0, &r);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_ESTALL);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_TOO_SLOW);
  ASSERT_STR_EQ(al_http_error_kind_name(r.kind), "too_slow");
  ASSERT_NOT_NULL(strstr(r.msg, "below the minimum of 4096"));
  ASSERT_EQ(r.nresp, 0);

  /* The body: headers arrive at once, then a byte per tick. */
  run_slow(&loop, c, url_for(&srv, "/body"), w, 4096, 0, &r);
  ASSERT_EQ(r.status, AL_ESTALL);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_TOO_SLOW);
  ASSERT_EQ(r.nresp, 1);
  ASSERT_GE(r.body_len, 1);

  /* Rate off, total time on: the whole exchange is capped. */
  run_slow(&loop, c, url_for(&srv, "/body"), 0, 0, 3 * w, &r);
  ASSERT_EQ(r.status, AL_ETIMEDOUT);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_TIMEOUT);
  ASSERT_NOT_NULL(strstr(r.msg, "total time limit"));

  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* A 2xx that cannot be an event stream says what it was (issue 15). */
static void h_not_sse(tsrv_conn_t *c) {
  if (strcmp(c->url, "/html") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: text/html; "
                   "charset=utf-8\r\nContent-Length: 13\r\n\r\n<html></html>");
  } else if (strcmp(c->url, "/gzip") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\n"
                   "\x1f\x8b\x08\x00");
  } else {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Content-Length: 4\r\n\r\ndata");
  }
}

TEST_IMPL(limits_unexpected_body) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  al_http_request_options_t o;
  rec_t r;
  static const struct {
    const char *path;
    int status;
    const char *msg;
  } cases[] = {
      {"/html", AL_EPROTO, "200 with text/html instead of an event stream"},
      {"/gzip", AL_EPROTO, "200 with a gzip-encoded body"},
      {"/sse", 0, ""},
  };
  size_t i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_not_sse;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    rec_init(&r);
    al_http_request_options_init(&o);
    o.url = url_for(&srv, cases[i].path);
    o.expect_event_stream = true;
    ASSERT_EQ(rec_start(c, &r, &o), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.status, cases[i].status);
    if (cases[i].status != 0) {
      ASSERT_EQ(r.kind, AL_HTTP_ERR_UNEXPECTED_BODY);
      ASSERT_STR_EQ(al_http_error_kind_name(r.kind), "unexpected_body");
      if (strstr(r.msg, cases[i].msg) == NULL) {
        AL_TEST_FAIL("%s: %s", cases[i].path, r.msg);
      }
      ASSERT_EQ(r.nresp, 0);
    }
  }
  /* Without the expectation the page is just a body. */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/html")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
