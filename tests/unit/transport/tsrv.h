/* In-process loopback servers for the transport tests.
 *
 * tsrv_t: a scripted HTTP/1.1 server (plain or TLS via mbedtls server-side)
 * bound to 127.0.0.1 port 0 on the test's loop. It parses each request with
 * llhttp and calls on_request; the handler answers with tsrv_write /
 * tsrv_end (graceful close after the writes flush) / tsrv_abort (close at
 * once), or schedules drips with tsrv_every. It counts accepts and
 * requests so tests can prove connection reuse.
 *
 * tproxy_t: an HTTP CONNECT proxy that pipes bytes both ways, or refuses
 * with a configured status.
 *
 * Both use plain malloc, not al_malloc, so allocation-failure sweeps hit
 * only the client under test. */
#ifndef AL_TEST_TSRV_H
#define AL_TEST_TSRV_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

typedef struct tsrv_s tsrv_t;
typedef struct tsrv_conn_s tsrv_conn_t;

typedef void (*tsrv_request_cb)(tsrv_conn_t *c);
typedef void (*tsrv_timer_cb)(tsrv_conn_t *c);

struct tsrv_conn_s {
  tsrv_t *srv;
  int nreq;    /* requests received on this connection (1 = first) */
  int step;    /* free for scripts */
  void *user;  /* free for scripts */
  /* The request that triggered on_request (NUL-terminated copies). */
  char method[16];
  char url[512];
  char head[8192]; /* "name: value\n" lines, names lowercased */
  char body[65536];
  size_t body_len;
  void *impl_;
};

typedef struct tsrv_opts_s {
  const char *cert; /* file name under tests/certs, e.g. "server.crt"; NULL =
                       plain HTTP */
  const char *key;
  tsrv_request_cb on_request;
  void *data;
  int backlog;      /* 0 = default */
} tsrv_opts_t;

struct tsrv_s {
  uv_loop_t *loop;
  int port;
  int accepts;
  int requests;
  tsrv_request_cb on_request;
  void *data;
  char last_head[8192];
  char last_url[512];
  void *impl_;
};

int tsrv_start(tsrv_t *s, uv_loop_t *loop, const tsrv_opts_t *o);
/* Closes the listener and every connection; nothing remains on the loop
 * once it has run. */
void tsrv_close(tsrv_t *s);

void tsrv_write(tsrv_conn_t *c, const char *p, size_t n);
void tsrv_writes(tsrv_conn_t *c, const char *s);
void tsrv_writef(tsrv_conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Graceful: flushes, TLS close_notify, shutdown, close. */
void tsrv_end(tsrv_conn_t *c);
/* Immediate close; unflushed writes are dropped. */
void tsrv_abort(tsrv_conn_t *c);
/* Calls cb every ms milliseconds until tsrv_stop or the connection ends. */
void tsrv_every(tsrv_conn_t *c, unsigned ms, tsrv_timer_cb cb);
void tsrv_stop(tsrv_conn_t *c);
/* Value of a request header (lowercase name) into buf, or NULL. */
const char *tsrv_header(const tsrv_conn_t *c, const char *name, char *buf,
                        size_t len);

/* ---- CONNECT proxy ---------------------------------------------------- */

typedef struct tproxy_s {
  uv_loop_t *loop;
  int port;
  int connects;         /* CONNECT requests seen */
  int refuse_status;    /* 0 = tunnel; else answer with this status */
  char last_target[256];
  char last_head[2048];
  void *impl_;
} tproxy_t;

int tproxy_start(tproxy_t *p, uv_loop_t *loop);
void tproxy_close(tproxy_t *p);

/* Path of a file in tests/certs (static buffer). */
const char *tsrv_cert_path(const char *name);

#endif
