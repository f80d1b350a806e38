/* Loopback HTTP/HTTPS test server and CONNECT proxy (see tsrv.h).
 *
 * Server connections own a uv_tcp_t and a uv_timer_t and are freed in the
 * second close callback. TLS runs mbedtls server-side over memory buffers,
 * independently of the client's tls.c, so a bug there is not mirrored. */
#include "unit/transport/tsrv.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llhttp.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "test.h"

#define CONTAINER(p, t, m) ((t *)((char *)(p)-offsetof(t, m)))

typedef struct srv_impl_s srv_impl_t;

typedef struct conn_impl_s {
  tsrv_conn_t pub;
  srv_impl_t *si;
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t sreq;
  int open;
  bool closing;
  bool ending;
  tsrv_timer_cb tick;
  bool tls;
  bool hs_done;
  mbedtls_ssl_context ssl;
  unsigned char *in;
  size_t in_len, in_off, in_cap;
  unsigned char *out;
  size_t out_len, out_cap;
  llhttp_t parser;
  char field[128];
  size_t field_len;
  bool in_value;
  struct conn_impl_s *next;
  struct conn_impl_s *prev;
} conn_impl_t;

struct srv_impl_s {
  tsrv_t *pub;
  uv_tcp_t listener;
  bool tls;
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_x509_crt crt;
  mbedtls_pk_context pk;
  mbedtls_ssl_config conf;
  llhttp_settings_t settings;
  conn_impl_t *conns;
  bool listener_closed;
};

static void srv_free(srv_impl_t *si);

static const char *alpn[] = {"http/1.1", NULL};

const char *tsrv_cert_path(const char *name) {
  static char path[4096];

  snprintf(path, sizeof(path), "%s/%s", AL_TEST_CERTS_DIR, name);
  return path;
}

/* ---- writes ------------------------------------------------------------- */

typedef struct {
  uv_write_t w;
  char data[];
} wreq_t;

static void wcb(uv_write_t *w, int status) {
  (void)status;
  free(CONTAINER(w, wreq_t, w));
}

static void raw_write(uv_stream_t *s, const void *p, size_t n) {
  wreq_t *w;
  uv_buf_t b;

  if (n == 0 || uv_is_closing((uv_handle_t *)s)) {
    return;
  }
  w = malloc(sizeof(*w) + n);
  ASSERT_NOT_NULL(w);
  memcpy(w->data, p, n);
  b = uv_buf_init(w->data, (unsigned)n);
  if (uv_write(&w->w, s, &b, 1, wcb) != 0) {
    free(w);
  }
}

static int bio_send(void *ctx, const unsigned char *buf, size_t len) {
  conn_impl_t *c = ctx;

  if (c->out_len + len > c->out_cap) {
    c->out_cap = (c->out_len + len) * 2;
    c->out = realloc(c->out, c->out_cap);
    ASSERT_NOT_NULL(c->out);
  }
  memcpy(c->out + c->out_len, buf, len);
  c->out_len += len;
  return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len) {
  conn_impl_t *c = ctx;
  size_t avail = c->in_len - c->in_off;

  if (avail == 0) {
    return MBEDTLS_ERR_SSL_WANT_READ;
  }
  if (len > avail) {
    len = avail;
  }
  memcpy(buf, c->in + c->in_off, len);
  c->in_off += len;
  return (int)len;
}

static void flush_tls(conn_impl_t *c) {
  raw_write((uv_stream_t *)&c->tcp, c->out, c->out_len);
  c->out_len = 0;
}

void tsrv_write(tsrv_conn_t *pc, const char *p, size_t n) {
  conn_impl_t *c = pc->impl_;

  if (c->closing || c->ending) {
    return;
  }
  if (!c->tls) {
    raw_write((uv_stream_t *)&c->tcp, p, n);
    return;
  }
  while (n > 0) {
    int ret = mbedtls_ssl_write(&c->ssl, (const unsigned char *)p, n);

    if (ret <= 0) {
      break;
    }
    p += ret;
    n -= (size_t)ret;
  }
  flush_tls(c);
}

void tsrv_writes(tsrv_conn_t *c, const char *s) { tsrv_write(c, s, strlen(s)); }

void tsrv_writef(tsrv_conn_t *c, const char *fmt, ...) {
  char buf[70000];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  ASSERT(n >= 0 && (size_t)n < sizeof(buf));
  tsrv_write(c, buf, (size_t)n);
}

/* ---- connection lifecycle -------------------------------------------------- */

static void conn_closed(uv_handle_t *h) {
  conn_impl_t *c = h->data;

  if (--c->open > 0) {
    return;
  }
  if (c->prev != NULL) {
    c->prev->next = c->next;
  } else {
    c->si->conns = c->next;
  }
  if (c->next != NULL) {
    c->next->prev = c->prev;
  }
  if (c->tls) {
    mbedtls_ssl_free(&c->ssl);
  }
  free(c->in);
  free(c->out);
  if (c->si->listener_closed && c->si->conns == NULL) {
    srv_free(c->si);
  }
  free(c);
}

void tsrv_abort(tsrv_conn_t *pc) {
  conn_impl_t *c = pc->impl_;

  if (c->closing) {
    return;
  }
  c->closing = true;
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
  uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void shutdown_cb(uv_shutdown_t *r, int status) {
  conn_impl_t *c = r->data;

  (void)status;
  tsrv_abort(&c->pub);
}

void tsrv_end(tsrv_conn_t *pc) {
  conn_impl_t *c = pc->impl_;

  if (c->closing || c->ending) {
    return;
  }
  if (c->tls && c->hs_done) {
    mbedtls_ssl_close_notify(&c->ssl);
    flush_tls(c);
  }
  c->ending = true;
  uv_timer_stop(&c->timer);
  c->sreq.data = c;
  if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, shutdown_cb) != 0) {
    tsrv_abort(pc);
  }
}

static void tick_cb(uv_timer_t *t) {
  conn_impl_t *c = t->data;

  if (c->tick != NULL && !c->closing && !c->ending) {
    c->tick(&c->pub);
  }
}

void tsrv_every(tsrv_conn_t *pc, unsigned ms, tsrv_timer_cb cb) {
  conn_impl_t *c = pc->impl_;

  c->tick = cb;
  uv_timer_start(&c->timer, tick_cb, ms, ms);
}

void tsrv_stop(tsrv_conn_t *pc) {
  conn_impl_t *c = pc->impl_;

  uv_timer_stop(&c->timer);
}

const char *tsrv_header(const tsrv_conn_t *c, const char *name, char *buf,
                        size_t len) {
  char pat[160];
  const char *p;
  const char *e;

  snprintf(pat, sizeof(pat), "%s: ", name);
  for (p = c->head; (p = strstr(p, pat)) != NULL; p++) {
    if (p == c->head || p[-1] == '\n') {
      p += strlen(pat);
      e = strchr(p, '\n');
      snprintf(buf, len, "%.*s", (int)(e - p), p);
      return buf;
    }
  }
  return NULL;
}

/* ---- request parsing ------------------------------------------------------- */

static void head_append(tsrv_conn_t *pc, const char *p, size_t n) {
  size_t have = strlen(pc->head);

  if (have + n + 1 < sizeof(pc->head)) {
    memcpy(pc->head + have, p, n);
    pc->head[have + n] = '\0';
  }
}

static int on_msg_begin(llhttp_t *p) {
  conn_impl_t *c = p->data;

  c->pub.method[0] = c->pub.url[0] = c->pub.head[0] = '\0';
  c->pub.body_len = 0;
  c->in_value = false;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  conn_impl_t *c = p->data;
  size_t have = strlen(c->pub.url);

  if (have + n < sizeof(c->pub.url)) {
    memcpy(c->pub.url + have, at, n);
    c->pub.url[have + n] = '\0';
  }
  return 0;
}

static int on_field(llhttp_t *p, const char *at, size_t n) {
  conn_impl_t *c = p->data;
  size_t i;
  char low[256];

  if (c->in_value) {
    head_append(&c->pub, "\n", 1);
    c->in_value = false;
  }
  for (i = 0; i < n && i < sizeof(low); i++) {
    low[i] = (char)tolower((unsigned char)at[i]);
  }
  head_append(&c->pub, low, i);
  return 0;
}

static int on_value(llhttp_t *p, const char *at, size_t n) {
  conn_impl_t *c = p->data;

  if (!c->in_value) {
    head_append(&c->pub, ": ", 2);
    c->in_value = true;
  }
  head_append(&c->pub, at, n);
  return 0;
}

static int on_headers_done(llhttp_t *p) {
  conn_impl_t *c = p->data;

  if (c->in_value) {
    head_append(&c->pub, "\n", 1);
    c->in_value = false;
  }
  snprintf(c->pub.method, sizeof(c->pub.method), "%s",
           llhttp_method_name((llhttp_method_t)p->method));
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  conn_impl_t *c = p->data;

  if (c->pub.body_len + n < sizeof(c->pub.body)) {
    memcpy(c->pub.body + c->pub.body_len, at, n);
    c->pub.body_len += n;
  }
  return 0;
}

static int on_msg_complete(llhttp_t *p) {
  conn_impl_t *c = p->data;
  tsrv_t *s = c->si->pub;

  c->pub.nreq++;
  s->requests++;
  snprintf(s->last_head, sizeof(s->last_head), "%s", c->pub.head);
  snprintf(s->last_url, sizeof(s->last_url), "%s", c->pub.url);
  if (s->on_request != NULL) {
    s->on_request(&c->pub);
  }
  return c->closing ? HPE_USER : 0;
}

static void feed_http(conn_impl_t *c, const char *p, size_t n) {
  if (llhttp_execute(&c->parser, p, n) != HPE_OK && !c->closing) {
    tsrv_abort(&c->pub);
  }
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)h;
  b->base = malloc(hint);
  b->len = hint;
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  conn_impl_t *c = st->data;

  if (nread < 0) {
    tsrv_abort(&c->pub);
  } else if (nread > 0 && !c->closing) {
    if (!c->tls) {
      feed_http(c, b->base, (size_t)nread);
    } else {
      if (c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
      }
      if (c->in_len + (size_t)nread > c->in_cap) {
        c->in_cap = (c->in_len + (size_t)nread) * 2;
        c->in = realloc(c->in, c->in_cap);
        ASSERT_NOT_NULL(c->in);
      }
      memcpy(c->in + c->in_len, b->base, (size_t)nread);
      c->in_len += (size_t)nread;
      if (!c->hs_done) {
        int ret = mbedtls_ssl_handshake(&c->ssl);

        flush_tls(c);
        if (ret == 0) {
          c->hs_done = true;
        } else if (ret != MBEDTLS_ERR_SSL_WANT_READ &&
                   ret != MBEDTLS_ERR_SSL_WANT_WRITE) {
          /* e.g. the client rejected our certificate: it sends an alert. */
          tsrv_abort(&c->pub);
        }
      }
      while (c->hs_done && !c->closing) {
        char pt[16384];
        int ret = mbedtls_ssl_read(&c->ssl, (unsigned char *)pt, sizeof(pt));

        if (ret > 0) {
          feed_http(c, pt, (size_t)ret);
          continue;
        }
        if (ret != MBEDTLS_ERR_SSL_WANT_READ) {
          tsrv_abort(&c->pub);
        }
        break;
      }
    }
  }
  free(b->base);
}

static void on_connection(uv_stream_t *l, int status) {
  srv_impl_t *si = l->data;
  conn_impl_t *c;

  if (status != 0) {
    return;
  }
  c = calloc(1, sizeof(*c));
  ASSERT_NOT_NULL(c);
  c->pub.srv = si->pub;
  c->pub.impl_ = c;
  c->si = si;
  uv_tcp_init(l->loop, &c->tcp);
  uv_timer_init(l->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->open = 2;
  c->next = si->conns;
  if (si->conns != NULL) {
    si->conns->prev = c;
  }
  si->conns = c;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
    tsrv_abort(&c->pub);
    return;
  }
  si->pub->accepts++;
  /* The servers never keep the loop alive: each uv_run in a test lasts as
   * long as the client has work, then the test inspects and continues. */
  uv_unref((uv_handle_t *)&c->tcp);
  uv_unref((uv_handle_t *)&c->timer);
  llhttp_init(&c->parser, HTTP_REQUEST, &si->settings);
  c->parser.data = c;
  if (si->tls) {
    c->tls = true;
    mbedtls_ssl_init(&c->ssl);
    ASSERT_EQ(mbedtls_ssl_setup(&c->ssl, &si->conf), 0);
    mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
  }
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

int tsrv_start(tsrv_t *s, uv_loop_t *loop, const tsrv_opts_t *o) {
  srv_impl_t *si = calloc(1, sizeof(*si));
  struct sockaddr_in addr;
  struct sockaddr_storage ss;
  int len = sizeof(ss);

  ASSERT_NOT_NULL(si);
  memset(s, 0, sizeof(*s));
  s->loop = loop;
  s->impl_ = si;
  s->on_request = o->on_request;
  s->data = o->data;
  si->pub = s;
  llhttp_settings_init(&si->settings);
  si->settings.on_message_begin = on_msg_begin;
  si->settings.on_url = on_url;
  si->settings.on_header_field = on_field;
  si->settings.on_header_value = on_value;
  si->settings.on_headers_complete = on_headers_done;
  si->settings.on_body = on_body;
  si->settings.on_message_complete = on_msg_complete;
  if (o->cert != NULL) {
    si->tls = true;
    mbedtls_entropy_init(&si->entropy);
    mbedtls_ctr_drbg_init(&si->drbg);
    mbedtls_x509_crt_init(&si->crt);
    mbedtls_pk_init(&si->pk);
    mbedtls_ssl_config_init(&si->conf);
    ASSERT_EQ(mbedtls_ctr_drbg_seed(&si->drbg, mbedtls_entropy_func,
                                    &si->entropy, NULL, 0), 0);
    ASSERT_EQ(mbedtls_x509_crt_parse_file(&si->crt, tsrv_cert_path(o->cert)),
              0);
    ASSERT_EQ(mbedtls_pk_parse_keyfile(&si->pk, tsrv_cert_path(o->key), NULL),
              0);
    ASSERT_EQ(mbedtls_ssl_config_defaults(&si->conf, MBEDTLS_SSL_IS_SERVER,
                                          MBEDTLS_SSL_TRANSPORT_STREAM,
                                          MBEDTLS_SSL_PRESET_DEFAULT), 0);
    mbedtls_ssl_conf_rng(&si->conf, mbedtls_ctr_drbg_random, &si->drbg);
    ASSERT_EQ(mbedtls_ssl_conf_own_cert(&si->conf, &si->crt, &si->pk), 0);
    ASSERT_EQ(mbedtls_ssl_conf_alpn_protocols(&si->conf, alpn), 0);
  }
  ASSERT_EQ(uv_tcp_init(loop, &si->listener), 0);
  si->listener.data = si;
  ASSERT_EQ(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
  ASSERT_EQ(uv_tcp_bind(&si->listener, (struct sockaddr *)&addr, 0), 0);
  ASSERT_EQ(uv_listen((uv_stream_t *)&si->listener,
                      o->backlog > 0 ? o->backlog : 64, on_connection), 0);
  uv_unref((uv_handle_t *)&si->listener);
  ASSERT_EQ(uv_tcp_getsockname(&si->listener, (struct sockaddr *)&ss, &len),
            0);
  s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

/* uv runs close callbacks in LIFO order, so the listener's may come before
 * its connections': the last one of them frees the shared state. */
static void listener_closed(uv_handle_t *h) {
  srv_impl_t *si = h->data;

  si->listener_closed = true;
  if (si->conns == NULL) {
    srv_free(si);
  }
}

static void srv_free(srv_impl_t *si) {
  if (si->tls) {
    mbedtls_ssl_config_free(&si->conf);
    mbedtls_pk_free(&si->pk);
    mbedtls_x509_crt_free(&si->crt);
    mbedtls_ctr_drbg_free(&si->drbg);
    mbedtls_entropy_free(&si->entropy);
  }
  free(si);
}

void tsrv_close(tsrv_t *s) {
  srv_impl_t *si = s->impl_;
  conn_impl_t *c;

  for (c = si->conns; c != NULL; c = c->next) {
    tsrv_abort(&c->pub);
  }
  uv_close((uv_handle_t *)&si->listener, listener_closed);
}

/* ---- CONNECT proxy --------------------------------------------------------- */

typedef struct px_conn_s {
  tproxy_t *px;
  uv_tcp_t down;
  uv_tcp_t up;
  uv_connect_t creq;
  int open;
  bool closing;
  bool piping;
  char head[2048];
  size_t head_len;
  struct px_conn_s *next;
} px_conn_t;

typedef struct {
  uv_tcp_t listener;
  px_conn_t *conns;
  bool listener_closed;
} px_impl_t;

static void px_closed(uv_handle_t *h) {
  px_conn_t *c = h->data;

  if (--c->open == 0) {
    px_impl_t *pi = c->px->impl_;
    px_conn_t **pp;

    for (pp = &pi->conns; *pp != NULL; pp = &(*pp)->next) {
      if (*pp == c) {
        *pp = c->next;
        break;
      }
    }
    free(c);
    if (pi->listener_closed && pi->conns == NULL) {
      free(pi);
    }
  }
}

static void px_close(px_conn_t *c) {
  if (c->closing) {
    return;
  }
  c->closing = true;
  uv_close((uv_handle_t *)&c->down, px_closed);
  uv_close((uv_handle_t *)&c->up, px_closed);
}

static void px_up_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  px_conn_t *c = st->data;

  if (nread < 0) {
    px_close(c);
  } else if (nread > 0 && !c->closing) {
    raw_write((uv_stream_t *)&c->down, b->base, (size_t)nread);
  }
  free(b->base);
}

static void px_up_connected(uv_connect_t *r, int status) {
  px_conn_t *c = r->data;
  static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";

  if (c->closing) {
    return;
  }
  if (status != 0) {
    static const char bad[] =
        "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n";
    raw_write((uv_stream_t *)&c->down, bad, sizeof(bad) - 1);
    return;
  }
  c->piping = true;
  raw_write((uv_stream_t *)&c->down, ok, sizeof(ok) - 1);
  uv_read_start((uv_stream_t *)&c->up, alloc_cb, px_up_read);
}

static void px_down_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  px_conn_t *c = st->data;

  if (nread < 0) {
    px_close(c);
  } else if (nread > 0 && !c->closing) {
    if (c->piping) {
      raw_write((uv_stream_t *)&c->up, b->base, (size_t)nread);
    } else if (c->head_len + (size_t)nread < sizeof(c->head)) {
      memcpy(c->head + c->head_len, b->base, (size_t)nread);
      c->head_len += (size_t)nread;
      c->head[c->head_len] = '\0';
      if (strstr(c->head, "\r\n\r\n") != NULL) {
        tproxy_t *px = c->px;
        char host[200];
        int port = 0;
        struct sockaddr_in addr;

        px->connects++;
        snprintf(px->last_head, sizeof(px->last_head), "%s", c->head);
        if (sscanf(c->head, "CONNECT %255s HTTP/1.1", px->last_target) != 1 ||
            px->refuse_status != 0) {
          char resp[128];
          int n = snprintf(resp, sizeof(resp),
                           "HTTP/1.1 %d Refused\r\nContent-Length: 0\r\n\r\n",
                           px->refuse_status ? px->refuse_status : 400);
          raw_write((uv_stream_t *)&c->down, resp, (size_t)n);
        } else if (sscanf(px->last_target, "%199[^:]:%d", host, &port) == 2) {
          /* Targets in tests are localhost or 127.0.0.1: no DNS here. */
          uv_ip4_addr("127.0.0.1", port, &addr);
          c->creq.data = c;
          uv_tcp_connect(&c->creq, &c->up, (struct sockaddr *)&addr,
                         px_up_connected);
        }
      }
    } else {
      px_close(c);
    }
  }
  free(b->base);
}

static void px_on_connection(uv_stream_t *l, int status) {
  tproxy_t *px = l->data;
  px_impl_t *pi = px->impl_;
  px_conn_t *c;

  if (status != 0) {
    return;
  }
  c = calloc(1, sizeof(*c));
  ASSERT_NOT_NULL(c);
  c->px = px;
  uv_tcp_init(l->loop, &c->down);
  uv_tcp_init(l->loop, &c->up);
  c->down.data = c;
  c->up.data = c;
  c->open = 2;
  c->next = pi->conns;
  pi->conns = c;
  uv_unref((uv_handle_t *)&c->down);
  uv_unref((uv_handle_t *)&c->up);
  if (uv_accept(l, (uv_stream_t *)&c->down) != 0) {
    px_close(c);
    return;
  }
  uv_read_start((uv_stream_t *)&c->down, alloc_cb, px_down_read);
}

int tproxy_start(tproxy_t *p, uv_loop_t *loop) {
  px_impl_t *pi = calloc(1, sizeof(*pi));
  struct sockaddr_in addr;
  struct sockaddr_storage ss;
  int len = sizeof(ss);

  ASSERT_NOT_NULL(pi);
  memset(p, 0, sizeof(*p));
  p->loop = loop;
  p->impl_ = pi;
  ASSERT_EQ(uv_tcp_init(loop, &pi->listener), 0);
  pi->listener.data = p;
  ASSERT_EQ(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
  ASSERT_EQ(uv_tcp_bind(&pi->listener, (struct sockaddr *)&addr, 0), 0);
  ASSERT_EQ(uv_listen((uv_stream_t *)&pi->listener, 64, px_on_connection), 0);
  uv_unref((uv_handle_t *)&pi->listener);
  ASSERT_EQ(uv_tcp_getsockname(&pi->listener, (struct sockaddr *)&ss, &len),
            0);
  p->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

static void px_listener_closed(uv_handle_t *h) {
  px_impl_t *pi = CONTAINER(h, px_impl_t, listener);

  pi->listener_closed = true;
  if (pi->conns == NULL) {
    free(pi);
  }
}

void tproxy_close(tproxy_t *p) {
  px_impl_t *pi = p->impl_;
  px_conn_t *c;

  for (c = pi->conns; c != NULL; c = c->next) {
    px_close(c);
  }
  uv_close((uv_handle_t *)&pi->listener, px_listener_closed);
}
