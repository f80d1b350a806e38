/* A loop that runs late (a loaded 2-core machine, a stopped process) must
 * not turn into a verdict about the peer (issue 22, defect 12).
 *
 * The loop is made late on purpose: a data callback holds it for three
 * times the stall timeout, so the server's next bytes and the client's
 * stall deadline come due in the same timer pass, and libuv runs timers
 * before it polls. It does so twice in a row: the second hold is inside
 * the pass that reads the bytes sent during the first (a machine loaded
 * for a while), which must earn the next deadline its own pass. What this simulates is a descheduled process, so the
 * test holds the loop with a clock wait; nothing waits for an outcome. */
#include <time.h>

#include "agentloop/agentloop.h"
#include "test.h"
#include "transport/transport.h"
#include "unit/transport/trec.h"
#include "unit/transport/tsrv.h"

#define PINGS 10      /* the chunks the server sends, one every 5 ms */
#define LATE_AT 3     /* the first data callback that holds the loop */
#define TIMEOUT_MS 40 /* the stall timeout under test */

typedef struct {
  int ndata;
  size_t bytes;
  bool progress; /* report content progress on every data callback */
  int ncomplete;
  int status;
  al_http_error_kind_t kind;
} late_t;

static void hold_loop_ms(uint64_t ms) {
  uint64_t end = uv_hrtime() + ms * 1000000u;
  struct timespec ts = {0, 1000000};

  while (uv_hrtime() < end) {
    nanosleep(&ts, NULL);
  }
}

static void ping(tsrv_conn_t *c) {
  if (c->step < PINGS) {
    c->step++;
    tsrv_writes(c, "6\r\nping\n\n\r\n");
  }
}

static void h_pings(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  c->step = 0;
  tsrv_every(c, 5, ping);
}

static void on_data(al_http_request_t *req, const char *p, size_t n) {
  late_t *l = al_http_request_get_data(req);

  l->ndata++;
  l->bytes += n;
  if (l->progress) {
    al_http_request_progress(req);
  }
  if (l->ndata == LATE_AT || l->ndata == LATE_AT + 1) {
    hold_loop_ms(3 * TIMEOUT_MS);
  }
}

static void on_complete(al_http_request_t *req, int status,
                        const al_http_error_t *e) {
  late_t *l = al_http_request_get_data(req);

  l->ncomplete++;
  l->status = status;
  l->kind = e != NULL ? e->kind : AL_HTTP_ERR_NONE;
}

static void late_run(uv_loop_t *loop, al_http_client_t *c, const char *url,
                     int64_t idle_ms, int64_t progress_ms, late_t *l) {
  al_http_request_options_t o;
  al_http_request_t *req;

  memset(l, 0, sizeof(*l));
  al_http_request_options_init(&o);
  o.url = url;
  o.idle_timeout_ms = idle_ms;
  o.progress_timeout_ms = progress_ms;
  o.on_data = on_data;
  o.on_complete = on_complete;
  o.data = l;
  l->progress = progress_ms > 0;
  ASSERT_EQ(al_http_request_start(c, &o, &req), 0);
  uv_run(loop, UV_RUN_DEFAULT);
  ASSERT_EQ(l->ncomplete, 1);
}

/* The idle and the progress stall timers, each with the loop held late
 * once: the bytes sent meanwhile count, and the stall comes only once the
 * server really stops (idle) or the content does (progress), after every
 * ping was read. */
TEST_IMPL(transport_stall_after_late_loop) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  late_t l;
  char url[128];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_pings;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/", srv.port);

  /* Progress: reported for every ping; the stall only after the last. */
  late_run(&loop, c, url, 0, TIMEOUT_MS, &l);
  ASSERT_EQ(l.status, AL_ESTALL);
  ASSERT_EQ(l.kind, AL_HTTP_ERR_STALL_PROGRESS);
  ASSERT_EQ(l.bytes, PINGS * 6);

  /* Idle: bytes, with no content, until the server goes quiet. */
  late_run(&loop, c, url, TIMEOUT_MS, 0, &l);
  ASSERT_EQ(l.status, AL_ESTALL);
  ASSERT_EQ(l.kind, AL_HTTP_ERR_STALL_IDLE);
  ASSERT_EQ(l.bytes, PINGS * 6);

  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
