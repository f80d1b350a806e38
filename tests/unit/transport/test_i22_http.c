/* The raw header-byte bound of the HTTP transport (src/transport/http.c,
 * req_on_bytes; issue 22 defect 14): bytes llhttp reads but does not hand
 * over (whitespace before a value, a long reason phrase, folded lines)
 * count against max_header_bytes like stored ones, so a server cannot
 * grow the head without limit with padding. */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "unit/transport/trec.h"
#include "unit/transport/tsrv.h"

static const char *url_of(const tsrv_t *s, const char *path) {
  static char buf[128];

  snprintf(buf, sizeof(buf), "http://127.0.0.1:%d%s", s->port, path);
  return buf;
}

/* More than one read can carry (the client reads up to 64 KiB at a
 * time), so the head cannot complete inside the first read. */
#define PAD (1024 * 1024)

static void h_padded(tsrv_conn_t *c) {
  static char pad[PAD];
  size_t i;

  memset(pad, ' ', sizeof(pad));
  if (strcmp(c->url, "/ows") == 0) {
    /* Whitespace before the value: skipped, never a value byte. */
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nX-Pad:");
    tsrv_write(c, pad, sizeof(pad));
    tsrv_writes(c, "v\r\nContent-Length: 2\r\n\r\nok");
  } else if (strcmp(c->url, "/reason") == 0) {
    /* A reason phrase the client does not keep. */
    memset(pad, 'R', sizeof(pad));
    tsrv_writes(c, "HTTP/1.1 200 ");
    tsrv_write(c, pad, sizeof(pad));
    tsrv_writes(c, "\r\nContent-Length: 2\r\n\r\nok");
  } else {
    /* Many empty folded continuation lines (obs-fold). */
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nX-Fold: a");
    for (i = 0; i < PAD / 4; i++) {
      tsrv_writes(c, "\r\n \t ");
    }
    tsrv_writes(c, "\r\nContent-Length: 2\r\n\r\nok");
  }
  tsrv_end(c);
}

/* Each shape is refused as too big once its raw head passes the bound,
 * however little of it llhttp stored; the same response under a bound it
 * fits is read whole (the shapes are legal HTTP, or refused by llhttp for
 * its own reason, never the bound's). */
TEST_IMPL(transport_raw_header_bytes_bounded) {
  static const char *const paths[] = {"/ows", "/reason", "/fold"};
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  al_http_request_options_t o;
  size_t i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_padded;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    rec_t r;

    rec_init(&r);
    al_http_request_options_init(&o);
    o.url = url_of(&srv, paths[i]);
    o.max_header_bytes = 4096;
    ASSERT_EQ(rec_start(c, &r, &o), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.ncomplete, 1);
    if (r.status != AL_ETOOBIG || r.kind != AL_HTTP_ERR_TOO_BIG) {
      AL_TEST_FAIL("%s: status %d (%s), kind %d: %s", paths[i], r.status,
                   al_err_name(r.status), (int)r.kind, r.msg);
    }
    ASSERT_NOT_NULL(strstr(r.msg, "exceed 4096 bytes"));
    ASSERT_EQ(r.nresp, 0);
    /* The bound is what refused it: under a larger one, no such error. */
    rec_init(&r);
    al_http_request_options_init(&o);
    o.url = url_of(&srv, paths[i]);
    o.max_header_bytes = 4 * PAD;
    ASSERT_EQ(rec_start(c, &r, &o), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.ncomplete, 1);
    ASSERT(r.status != AL_ETOOBIG);
  }
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
