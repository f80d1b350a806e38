/* Transport tests over plain HTTP against the in-process loopback server:
 * body framings, keep-alive reuse and the dead-connection retry, stall
 * timers, cancellation, limits, error classification, connect failures. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentloop/agentloop.h"
#include "common/common.h"
#include "test.h"
#include "transport/transport.h"
#include "unit/transport/trec.h"
#include "unit/transport/tsrv.h"

static char url_buf[256];

static const char *url_for(const tsrv_t *s, const char *path) {
  snprintf(url_buf, sizeof(url_buf), "http://127.0.0.1:%d%s", s->port, path);
  return url_buf;
}

/* ---- content-length ------------------------------------------------------- */

static void h_hello(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-Test: yes\r\n"
                 "\r\nhello world");
}

TEST_IMPL(transport_content_length) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  char ua[128];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_hello;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/x?y=1")), 0);
  ASSERT_EQ(r.ncomplete, 0); /* nothing synchronous */
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(r.nresp, 1);
  ASSERT_EQ(r.code, 200);
  ASSERT_STR_EQ(r.hdr_x, "yes");
  ASSERT_MEM_EQ(r.body, r.body_len, "hello world", 11);
  ASSERT_STR_EQ(srv.last_url, "/x?y=1");
  ASSERT_NOT_NULL(strstr(srv.last_head, "host: 127.0.0.1:"));
  {
    /* The server's copy of the request headers. */
    tsrv_conn_t fake;
    memset(&fake, 0, sizeof(fake));
    snprintf(fake.head, sizeof(fake.head), "%s", srv.last_head);
    ASSERT_NOT_NULL(tsrv_header(&fake, "user-agent", ua, sizeof(ua)));
    ASSERT(strncmp(ua, "agentloop/", 10) == 0);
  }
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- chunked, split odd ways ---------------------------------------------- */

static const char chunked_resp[] =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Test: ch\r\n\r\n"
    "5\r\nhello\r\n"
    "1;ext=\"x\"\r\n \r\n"
    "10\r\n0123456789abcdef\r\n"
    "A\r\nworld, end\r\n"
    "0\r\nX-Trailer: t\r\n\r\n";

/* Piece sizes cycle through 1, 2, 3, 5, 7, 11, 13 bytes so chunk sizes,
 * CRLFs and data are cut at every kind of place. */
static void drip_chunked(tsrv_conn_t *c) {
  static const size_t sizes[] = {1, 2, 3, 5, 7, 11, 13};
  size_t total = sizeof(chunked_resp) - 1;
  size_t off = (size_t)c->step;
  size_t n = sizes[(off / 3) % 7];

  if (off >= total) {
    tsrv_stop(c);
    return;
  }
  if (n > total - off) {
    n = total - off;
  }
  tsrv_write(c, chunked_resp + off, n);
  c->step = (int)(off + n);
}

static void h_chunked(tsrv_conn_t *c) {
  c->step = 0;
  tsrv_every(c, 1, drip_chunked);
}

static void h_chunked_whole(tsrv_conn_t *c) { tsrv_writes(c, chunked_resp); }

TEST_IMPL(transport_chunked) {
  static const char expect[] = "hello 0123456789abcdefworld, end";
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  int pass;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  for (pass = 0; pass < 2; pass++) {
    so.on_request = pass == 0 ? h_chunked : h_chunked_whole;
    tsrv_start(&srv, &loop, &so);
    c = rec_client(&loop, NULL);
    rec_init(&r);
    ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/")), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.ncomplete, 1);
    ASSERT_EQ(r.status, 0);
    ASSERT_STR_EQ(r.hdr_x, "ch");
    ASSERT_MEM_EQ(r.body, r.body_len, expect, sizeof(expect) - 1);
    ASSERT_GE(r.ndata, pass == 0 ? 4 : 1);
    /* Chunked keeps the connection: it went back to the pool. */
    {
      al_http_client_stats_t st;
      al_http_client_stats(c, &st);
      ASSERT_EQ(st.idle_conns, 1);
    }
    rec_client_close(c);
    tsrv_close(&srv);
    uv_run(&loop, UV_RUN_DEFAULT);
  }
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- close-delimited --------------------------------------------------------- */

static void drip_close(tsrv_conn_t *c) {
  static const char *pieces[] = {"first,", "second,", "third"};

  if (c->step < 3) {
    tsrv_writes(c, pieces[c->step++]);
  } else {
    tsrv_end(c);
  }
}

static void h_close_delim(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
  c->step = 0;
  tsrv_every(c, 2, drip_close);
}

TEST_IMPL(transport_close_delimited) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  al_http_client_stats_t st;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_close_delim;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "first,second,third", 18);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.idle_conns, 0); /* the body ended with the connection */
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- keep-alive reuse -------------------------------------------------------- */

typedef struct {
  al_http_client_t *c;
  tsrv_t *srv;
  rec_t *next;
  const char *path;
  const char *method;
  const char *body;
} chain_t;

static void h_echo(tsrv_conn_t *c) {
  char cl[32];

  if (strcmp(c->url, "/die-on-second") == 0 && c->nreq == 2) {
    tsrv_abort(c); /* a kept-alive connection dies under the next request */
    return;
  }
  if (strcmp(c->url, "/die") == 0) {
    tsrv_abort(c);
    return;
  }
  tsrv_writef(c,
              "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nX-Test: %s %s\r\n"
              "\r\n",
              c->body_len, c->method,
              tsrv_header(c, "content-length", cl, sizeof(cl)) ? cl : "-");
  tsrv_write(c, c->body, c->body_len);
}

static void start_next(rec_t *prev) {
  chain_t *ch = prev->ctx;
  al_http_request_options_t o;

  if (ch->next == NULL) {
    return;
  }
  al_http_request_options_init(&o);
  o.url = url_for(ch->srv, ch->path);
  o.method = ch->method;
  o.body = ch->body;
  o.body_len = ch->body ? strlen(ch->body) : 0;
  ASSERT_EQ(rec_start(ch->c, ch->next, &o), 0);
}

TEST_IMPL(transport_keepalive_reuse) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r1, r2;
  chain_t ch;
  al_http_client_stats_t st;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_echo;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r1);
  rec_init(&r2);
  ch.c = c;
  ch.srv = &srv;
  ch.next = &r2;
  ch.path = "/second";
  ch.method = "POST";
  ch.body = "{\"k\":1}";
  r1.ctx = &ch;
  r1.then = start_next; /* the second request starts from on_complete */
  ASSERT_EQ(rec_get(c, &r1, url_for(&srv, "/first")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.status, 0);
  ASSERT_EQ(r1.body_len, 0);
  ASSERT_STR_EQ(r1.hdr_x, "GET -");
  ASSERT_EQ(r2.ncomplete, 1);
  ASSERT_EQ(r2.status, 0);
  ASSERT_STR_EQ(r2.hdr_x, "POST 7");
  ASSERT_MEM_EQ(r2.body, r2.body_len, "{\"k\":1}", 7);
  ASSERT_EQ(srv.accepts, 1); /* one connection carried both */
  ASSERT_EQ(srv.requests, 2);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.connects, 1);
  ASSERT_EQ(st.reuses, 1);
  ASSERT_EQ(st.idle_conns, 1);
  /* The loop ran dry with a pooled connection: idle sockets are unref'd. */
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

TEST_IMPL(transport_reused_conn_closed_retry) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r1, r2, r3;
  chain_t ch;
  al_http_client_stats_t st;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_echo;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r1);
  rec_init(&r2);
  ch.c = c;
  ch.srv = &srv;
  ch.next = &r2;
  ch.path = "/die-on-second";
  ch.method = "GET";
  ch.body = NULL;
  r1.ctx = &ch;
  r1.then = start_next;
  ASSERT_EQ(rec_get(c, &r1, url_for(&srv, "/die-on-second")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.status, 0);
  /* The second request went out on the pooled connection, which the server
   * closed without answering; it was resent once on a fresh connection. */
  ASSERT_EQ(r2.ncomplete, 1);
  ASSERT_EQ(r2.status, 0);
  ASSERT_EQ(r2.nresp, 1);
  ASSERT_EQ(srv.accepts, 2);
  ASSERT_EQ(srv.requests, 3);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.reuses, 1);
  ASSERT_EQ(st.retries, 1);
  ASSERT_EQ(st.connects, 2);

  /* A fresh connection that dies is not retried: it is an error. The
   * pooled connection is taken first and dies too, so exactly one retry
   * (on a fresh connection) happens and the second death is reported. */
  rec_init(&r3);
  ASSERT_EQ(rec_get(c, &r3, url_for(&srv, "/die")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r3.ncomplete, 1);
  ASSERT(r3.status == AL_EOF || r3.status == AL_ECONNRESET);
  ASSERT_EQ(r3.kind, AL_HTTP_ERR_NETWORK);
  ASSERT_EQ(r3.nresp, 0);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.retries, 2);
  ASSERT_EQ(srv.accepts, 3);
  ASSERT_EQ(st.idle_conns, 0);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- HEAD, 204, 304 ---------------------------------------------------------- */

static void h_nobody(tsrv_conn_t *c) {
  if (strcmp(c->method, "HEAD") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
  } else if (strcmp(c->url, "/204") == 0) {
    tsrv_writes(c, "HTTP/1.1 204 No Content\r\n\r\n");
  } else {
    tsrv_writes(c, "HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n");
  }
}

TEST_IMPL(transport_head_204_304) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r[3];
  al_http_request_options_t o;
  int i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_nobody;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  for (i = 0; i < 3; i++) {
    rec_init(&r[i]);
    al_http_request_options_init(&o);
    o.method = i == 0 ? "HEAD" : "GET";
    o.url = url_for(&srv, i == 1 ? "/204" : "/304");
    ASSERT_EQ(rec_start(c, &r[i], &o), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r[i].ncomplete, 1);
    ASSERT_EQ(r[i].ndata, 0);
  }
  ASSERT_EQ(r[0].status, 0);
  ASSERT_EQ(r[0].code, 200);
  ASSERT_EQ(r[1].status, 0);
  ASSERT_EQ(r[1].code, 204);
  ASSERT_EQ(r[2].status, AL_EAPI);
  ASSERT_EQ(r[2].http_status, 304);
  ASSERT_EQ(srv.accepts, 1); /* framing stayed in sync across all three */
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- stall timers ------------------------------------------------------------ */

static void h_stall(tsrv_conn_t *c) {
  if (strcmp(c->url, "/partial") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial");
  }
  /* "/silent": never answers. */
}

TEST_IMPL(transport_idle_stall) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r1, r2;
  al_http_request_options_t o;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_stall;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r1);
  al_http_request_options_init(&o);
  o.url = url_for(&srv, "/partial");
  o.idle_timeout_ms = 50;
  o.progress_timeout_ms = 0;
  ASSERT_EQ(rec_start(c, &r1, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.ncomplete, 1);
  ASSERT_EQ(r1.status, AL_ESTALL);
  ASSERT_EQ(r1.kind, AL_HTTP_ERR_STALL_IDLE);
  ASSERT_EQ(r1.nresp, 1);
  ASSERT_MEM_EQ(r1.body, r1.body_len, "partial", 7);

  /* No response at all: the same timer covers the wait for headers. */
  rec_init(&r2);
  o.url = url_for(&srv, "/silent");
  ASSERT_EQ(rec_start(c, &r2, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r2.status, AL_ESTALL);
  ASSERT_EQ(r2.kind, AL_HTTP_ERR_STALL_IDLE);
  ASSERT_EQ(r2.nresp, 0);
  ASSERT_STR_EQ(al_http_error_kind_name(AL_HTTP_ERR_STALL_IDLE),
                "stall_idle");
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

static void ping(tsrv_conn_t *c) { tsrv_writes(c, "6\r\nping\n\n\r\n"); }

static void h_pings(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  tsrv_every(c, 5, ping);
}

TEST_IMPL(transport_progress_stall) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r1, r2;
  al_http_request_options_t o;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_pings;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);

  /* Bytes keep coming (so the idle timer never fires) but none of them is
   * content: the progress timer must. */
  rec_init(&r1);
  al_http_request_options_init(&o);
  o.url = url_for(&srv, "/");
  /* Not scaled: a loop late past the deadline (a loaded machine) reads the
   * pings already sent before the stall is judged (http.c stall_grace),
   * so the first ping is always seen. The idle timer is the other timer
   * that could fire; its deadline is far past the progress one. */
  o.idle_timeout_ms = 1000;
  o.progress_timeout_ms = 40;
  ASSERT_EQ(rec_start(c, &r1, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.ncomplete, 1);
  ASSERT_EQ(r1.status, AL_ESTALL);
  ASSERT_EQ(r1.kind, AL_HTTP_ERR_STALL_PROGRESS);
  ASSERT_GE(r1.ndata, 1);
  ASSERT_LE(r1.ndata, 20);

  /* Progress reported for the first 30 pings (~150 ms, far past 40 ms)
   * keeps the request alive; the stall comes only after they stop. A late
   * loop between two pings does not end it early, for the same reason. */
  rec_init(&r2);
  o.progress_timeout_ms = 40;
  r2.progress_until = 30;
  ASSERT_EQ(rec_start(c, &r2, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r2.status, AL_ESTALL);
  ASSERT_EQ(r2.kind, AL_HTTP_ERR_STALL_PROGRESS);
  ASSERT_GE(r2.ndata, r2.progress_until + 1);
  ASSERT_EQ(srv.accepts, 2); /* a stalled connection is never reused */
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- cancellation ------------------------------------------------------------ */

static void drip_data(tsrv_conn_t *c) { tsrv_writes(c, "3\r\nabc\r\n"); }

static void h_drip(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3\r\nabc\r\n");
  tsrv_every(c, 3, drip_data);
}

typedef struct {
  uv_timer_t t;
  rec_t *r;
  int ndata_at_cancel;
} canceller_t;

static void cancel_timer_cb(uv_timer_t *t) {
  canceller_t *k = (canceller_t *)t;

  if (k->r->ndata < 2) {
    return; /* wait until mid-body */
  }
  k->ndata_at_cancel = k->r->ndata;
  k->r->in_api = true;
  al_http_request_cancel(k->r->req);
  k->r->in_api = false;
  uv_close((uv_handle_t *)t, NULL);
}

TEST_IMPL(transport_cancel_mid_body) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  canceller_t k;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_drip;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/")), 0);
  uv_timer_init(&loop, &k.t);
  k.r = &r;
  k.ndata_at_cancel = -1;
  uv_timer_start(&k.t, cancel_timer_cb, 5, 5);
  /* Runs until the server notices the close and stops dripping. */
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_GE(k.ndata_at_cancel, 2);
  ASSERT_EQ(r.ndata, k.ndata_at_cancel); /* nothing after cancel */
  ASSERT_EQ(r.ncomplete, 0);
  ASSERT_EQ(srv.accepts, 1);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

static void h_drip_big(tsrv_conn_t *c) {
  /* Headers and several chunks in one write: the cancel happens in the
   * middle of one llhttp_execute call. */
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3\r\nabc\r\n3\r\ndef\r\n3\r\nghi\r\n");
  tsrv_every(c, 3, drip_data);
}

TEST_IMPL(transport_cancel_in_callbacks) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r1, r2;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_drip_big;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);

  rec_init(&r1);
  r1.cancel_at_data = 2;
  ASSERT_EQ(rec_get(c, &r1, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.nresp, 1);
  ASSERT_EQ(r1.ndata, 2);
  ASSERT_MEM_EQ(r1.body, r1.body_len, "abcdef", 6);
  ASSERT_EQ(r1.ncomplete, 0);

  rec_init(&r2);
  r2.cancel_in_response = true;
  ASSERT_EQ(rec_get(c, &r2, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r2.nresp, 1);
  ASSERT_EQ(r2.ndata, 0);
  ASSERT_EQ(r2.ncomplete, 0);
  ASSERT_EQ(srv.accepts, 2); /* a cancelled connection is never reused */
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- limits ------------------------------------------------------------------ */

static void h_big_headers(tsrv_conn_t *c) {
  static char big[100001];
  int i;

  if (strcmp(c->url, "/one") == 0) {
    memset(big, 'a', sizeof(big) - 1);
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nX-Big: ");
    tsrv_write(c, big, sizeof(big) - 1);
    tsrv_writes(c, "\r\nContent-Length: 0\r\n\r\n");
  } else {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\n");
    for (i = 0; i < 3000; i++) {
      tsrv_writes(c, "X-N: 1\r\n");
    }
    tsrv_writes(c, "Content-Length: 0\r\n\r\n");
  }
}

TEST_IMPL(transport_oversized_headers) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r1, r2;
  al_http_request_options_t o;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_big_headers;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r1);
  al_http_request_options_init(&o);
  o.url = url_for(&srv, "/one");
  o.max_header_bytes = 4096;
  ASSERT_EQ(rec_start(c, &r1, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.ncomplete, 1);
  ASSERT_EQ(r1.status, AL_ETOOBIG);
  ASSERT_EQ(r1.kind, AL_HTTP_ERR_TOO_BIG);
  ASSERT_EQ(r1.nresp, 0);

  rec_init(&r2);
  o.url = url_for(&srv, "/many");
  ASSERT_EQ(rec_start(c, &r2, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r2.status, AL_ETOOBIG);
  ASSERT_EQ(r2.kind, AL_HTTP_ERR_TOO_BIG);
  ASSERT_EQ(r2.nresp, 0);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- error classification ------------------------------------------------------ */

static void h_errors(tsrv_conn_t *c) {
  static const char ant[] =
      "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
      "\"message\":\"slow down\"},\"request_id\":\"req_1\"}";
  static const char oai[] =
      "{\"error\":{\"message\":\"busy\",\"type\":\"server_error\","
      "\"param\":null,\"code\":\"overloaded\"}}";
  static const char ovl[] =
      "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
      "\"message\":\"Overloaded\"}}";
  static char big[5000];

  if (strcmp(c->url, "/429") == 0) {
    tsrv_writef(c,
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n"
                "X-Should-Retry: true\r\nRequest-Id: req_123\r\n"
                "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                "\r\n%s",
                sizeof(ant) - 1, ant);
  } else if (strcmp(c->url, "/503") == 0) {
    tsrv_writef(c,
                "HTTP/1.1 503 Service Unavailable\r\nretry-after-ms: 1500\r\n"
                "retry-after: 9\r\nx-should-retry: false\r\n"
                "x-request-id: abc\r\nTransfer-Encoding: chunked\r\n\r\n"
                "%zx\r\n%s\r\n0\r\n\r\n",
                sizeof(oai) - 1, oai);
  } else if (strcmp(c->url, "/529") == 0) {
    tsrv_writef(c,
                "HTTP/1.1 529 Overloaded\r\nContent-Length: %zu\r\n\r\n%s",
                sizeof(ovl) - 1, ovl);
  } else if (strcmp(c->url, "/401") == 0) {
    tsrv_writes(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\n"
                   "nope");
  } else {
    memset(big, 'x', sizeof(big));
    tsrv_writef(c, "HTTP/1.1 500 Internal\r\nContent-Length: %zu\r\n\r\n",
                sizeof(big));
    tsrv_write(c, big, sizeof(big));
  }
}

TEST_IMPL(transport_api_errors) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  al_http_request_options_t o;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_errors;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);

  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/429")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_EAPI);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_RATE_LIMIT);
  ASSERT_EQ(r.http_status, 429);
  ASSERT_EQ(r.nresp, 1);
  ASSERT_EQ(r.ndata, 0); /* error bodies are not streamed */
  ASSERT_EQ(r.retry_after_ms, 7000);
  ASSERT_EQ(r.should_retry, 1);
  ASSERT_STR_EQ(r.request_id, "req_123");
  ASSERT_STR_EQ(r.api_type, "rate_limit_error");
  ASSERT_STR_EQ(r.api_message, "slow down");
  ASSERT_NOT_NULL(strstr(r.err_body, "\"request_id\":\"req_1\""));
  ASSERT_NOT_NULL(strstr(r.msg, "429"));

  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/503")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, AL_EAPI);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_API_ERROR);
  ASSERT_EQ(r.retry_after_ms, 1500); /* -ms wins over seconds */
  ASSERT_EQ(r.should_retry, 0);
  ASSERT_STR_EQ(r.request_id, "abc");
  ASSERT_STR_EQ(r.api_type, "server_error");
  ASSERT_STR_EQ(r.api_message, "busy");
  ASSERT_STR_EQ(r.api_code, "overloaded");

  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/529")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, AL_EAPI);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_OVERLOADED);
  ASSERT_STR_EQ(al_http_error_kind_name(r.kind), "overloaded");
  ASSERT_STR_EQ(r.api_type, "overloaded_error");
  ASSERT_EQ(r.retry_after_ms, -1);
  ASSERT_EQ(r.should_retry, -1);

  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/401")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_AUTHENTICATION);
  ASSERT_MEM_EQ(r.err_body, r.err_body_len, "nope", 4);
  ASSERT_STR_EQ(r.api_type, ""); /* not JSON: nothing parsed */
  ASSERT_EQ(srv.accepts, 1); /* error responses keep the connection too */

  /* An error body larger than the limit is cut, not buffered whole. */
  rec_init(&r);
  al_http_request_options_init(&o);
  o.url = url_for(&srv, "/500");
  o.max_error_body_bytes = 1000;
  ASSERT_EQ(rec_start(c, &r, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, AL_EAPI);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_API_ERROR);
  ASSERT_EQ(r.err_body_len, 1000);
  ASSERT(r.body_truncated);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- connect failures ------------------------------------------------------------ */

/* A listening socket whose accept queue is full: further SYNs are dropped,
 * so a connect hangs until our timer fires. (Connecting to a non-routable
 * address such as 10.255.255.1 does not work here: the sandbox's network
 * completes such connects at once.) */
static int full_backlog(int *port, int fillers[2]) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int i;

  ASSERT(fd >= 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 0), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  for (i = 0; i < 2; i++) {
    fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT(fillers[i] >= 0);
    if (connect(fillers[i], (struct sockaddr *)&a, sizeof(a)) != 0) {
      ASSERT_EQ(errno, EINPROGRESS);
    }
  }
  return fd;
}

TEST_IMPL(transport_connect_timeout) {
  uv_loop_t loop;
  al_http_client_t *c;
  rec_t r;
  al_http_request_options_t o;
  int port, fd, fillers[2];
  char url[128];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  fd = full_backlog(&port, fillers);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
  al_http_request_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 50;
  ASSERT_EQ(rec_start(c, &r, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_ECONNTIMEDOUT);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_TIMEOUT);
  ASSERT_EQ(r.nresp, 0);
  rec_client_close(c);
  ASSERT_LOOP_CLOSES(&loop);
  close(fillers[0]);
  close(fillers[1]);
  close(fd);
  return 0;
}

TEST_IMPL(transport_connect_refused_and_dns) {
  uv_loop_t loop;
  al_http_client_t *c;
  rec_t r1, r2;
  al_http_request_options_t o;
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd;
  char url[128];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* A port that was just free: nothing listens there. */
  fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/", ntohs(a.sin_port));
  c = rec_client(&loop, NULL);
  rec_init(&r1);
  ASSERT_EQ(rec_get(c, &r1, url), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  close(fd);
  ASSERT_EQ(r1.ncomplete, 1);
  ASSERT_EQ(r1.status, AL_ECONNREFUSED);
  ASSERT_EQ(r1.kind, AL_HTTP_ERR_NETWORK);

  /* .invalid never resolves (RFC 6761); with no network it fails fast,
   * and the connect timeout bounds it if the resolver hangs. */
  rec_init(&r2);
  al_http_request_options_init(&o);
  o.url = "http://nonexistent.invalid/";
  o.connect_timeout_ms = 3000;
  ASSERT_EQ(rec_start(c, &r2, &o), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r2.ncomplete, 1);
  ASSERT(r2.status < 0);
  ASSERT_EQ(r2.kind, AL_HTTP_ERR_NETWORK);
  ASSERT_NOT_NULL(strstr(r2.msg, "nonexistent.invalid"));
  rec_client_close(c);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- refused starts, client close -------------------------------------------------- */

TEST_IMPL(transport_request_refused) {
  uv_loop_t loop;
  al_http_client_t *c;
  rec_t r;
  al_http_request_options_t o;
  al_http_header_t bad = {"X-A", 3, "1\r\nInjected: 1", 14};
  al_http_header_t badname = {"X A", 3, "1", 1};

  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, "ftp://example.com/"), AL_EINVAL);
  ASSERT_EQ(rec_get(c, &r, "http://"), AL_EINVAL);
  ASSERT_EQ(rec_get(c, &r, "http://a b/"), AL_EINVAL);
  ASSERT_EQ(rec_get(c, &r, "http://host:99999/"), AL_EINVAL);
  ASSERT_EQ(rec_get(c, &r, "http://host/a b"), AL_EINVAL);
  al_http_request_options_init(&o);
  o.url = "http://127.0.0.1:1/";
  o.headers = &bad;
  o.n_headers = 1;
  ASSERT_EQ(rec_start(c, &r, &o), AL_EINVAL);
  o.headers = &badname;
  ASSERT_EQ(rec_start(c, &r, &o), AL_EINVAL);
  o.headers = NULL;
  o.n_headers = 0;
  o.method = "G T";
  ASSERT_EQ(rec_start(c, &r, &o), AL_EINVAL);
  al_http_request_options_init(&o);
  o.url = "http://127.0.0.1:1/";
  ASSERT_EQ(al_http_request_start(c, &o, &r.req), AL_EINVAL); /* no cb */
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 0); /* a refused start never calls back */
  rec_client_close(c);
  ASSERT_EQ(rec_get(c, &r, "http://127.0.0.1:1/"), AL_ECLOSING);
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(r.ncomplete, 0);
  return 0;
}

static int closed_cb_count;
static void count_close(al_http_client_t *c) {
  (void)c;
  closed_cb_count++;
}

static void close_client_timer(uv_timer_t *t) {
  al_http_client_close(t->data, count_close);
  ASSERT_EQ(closed_cb_count, 0);
  uv_close((uv_handle_t *)t, NULL);
}

TEST_IMPL(transport_client_close_aborts) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  uv_timer_t t;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_stall; /* never answers "/silent" */
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/silent")), 0);
  uv_timer_init(&loop, &t);
  t.data = c;
  uv_timer_start(&t, close_client_timer, 30, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_ECANCELED);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_CANCELLED);
  ASSERT_EQ(closed_cb_count, 1);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

/* ---- pool expiry, plain-HTTP proxy ----------------------------------------------- */

static void stop_loop_timer(uv_timer_t *t) { uv_close((uv_handle_t *)t, NULL); }

TEST_IMPL(transport_pool_idle_expiry) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  al_http_client_options_t o;
  al_http_client_stats_t st;
  rec_t r;
  uv_timer_t keep;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_hello;
  tsrv_start(&srv, &loop, &so);
  al_http_client_options_init(&o);
  o.pool_idle_timeout_ms = 20;
  c = rec_client(&loop, &o);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.idle_conns, 1);
  /* The pooled socket is unref'd, so keep the loop alive with our own
   * timer long enough for the pool's expiry to fire. */
  uv_timer_init(&loop, &keep);
  uv_timer_start(&keep, stop_loop_timer, 80, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.idle_conns, 0);

  /* The next request needs a new connection. */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(srv.accepts, 2);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

TEST_IMPL(transport_proxy_plain_http) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  al_http_client_options_t o;
  rec_t r;
  char proxy[128];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_hello; /* plays the forward proxy */
  tsrv_start(&srv, &loop, &so);
  snprintf(proxy, sizeof(proxy), "127.0.0.1:%d", srv.port);
  al_http_client_options_init(&o);
  o.http_proxy = proxy; /* bare host:port, as env values often are */
  o.no_proxy = "other.example";
  c = rec_client(&loop, &o);
  rec_init(&r);
  /* Never resolved by us: the proxy gets the absolute-form target. */
  ASSERT_EQ(rec_get(c, &r, "http://api.example.invalid:8080/v1/x?y"), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "hello world", 11);
  ASSERT_STR_EQ(srv.last_url, "http://api.example.invalid:8080/v1/x?y");
  ASSERT_NOT_NULL(strstr(srv.last_head, "host: api.example.invalid:8080\n"));
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

static void h_extra(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200");
}

/* Bytes after a complete response mean the exchange is out of sync: the
 * response is delivered, but that connection is never reused. */
TEST_IMPL(transport_trailing_garbage_not_pooled) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  al_http_client_stats_t st;
  rec_t r;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_extra;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, url_for(&srv, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "ok", 2);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.idle_conns, 0);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
