/* HTTP/1.1 client: requests, connections and the keep-alive pool.
 *
 * Objects and ownership:
 *  - al_http_client_t owns the TLS configuration, the idle pool (a list of
 *    conn_t in CONN_IDLE) and a count of live requests and connections; it
 *    is freed from the close callback of its one handle (close_timer) once
 *    both counts reach zero and no CA load is in flight.
 *  - conn_t owns a uv_tcp_t, a uv_timer_t (connect timeout while
 *    connecting, idle-pool expiry while pooled), an optional getaddrinfo
 *    request and an optional TLS session. It is freed in the last close
 *    callback after the getaddrinfo callback (if any) has run.
 *  - al_http_request_t owns three timers (kick: deferred start and deferred
 *    aborts; idle: bytes-idle stall; progress: content stall), the
 *    serialized request, the llhttp parser and the bounded header and error
 *    body buffers. It is freed in the last timer close callback, so after
 *    cancel or completion the memory stays valid until the loop turns.
 *
 * A request attaches to one connection at a time (r->conn / conn->req).
 * Either side may end first: a cancelled request closes its connection; a
 * connection failure completes its request (or retries it once on a fresh
 * connection when a reused connection died before any response byte).
 *
 * Re-entrancy (STYLE §3.3.6): user callbacks run from inside llhttp's
 * callbacks and from timers. Each may cancel the request or close the
 * client, which only sets flags and calls uv_close, never frees; after
 * every dispatch the code re-checks r->done before touching state again.
 *
 * Stall timers are lazy: each received byte only records uv_now(); when the
 * timer fires it re-arms itself for the remaining time unless the full
 * timeout has passed (the nginx/libuv idiom, no heap churn per read). */
#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#include <llhttp.h>

#include "agentloop/version.h"
#include "transport/transport_int.h"
#include "transport/pace.h"

/* Read buffers start small: a paced stream's reads are a few hundred
 * bytes, and thousands of idle or slow streams should not pin 64 KB each.
 * A read that fills the buffer grows it to the maximum for bulk transfers.
 * TLS plaintext goes through pbuf, allocated for TLS connections only. */
#define RBUF_MIN 1024
#define RBUF_MAX 65536
#define PBUF_SIZE 16384
#define DEFAULT_CA_FILE "/etc/ssl/certs/ca-certificates.crt"

typedef enum {
  CONN_RESOLVING,
  CONN_CONNECTING,
  CONN_TUNNEL,    /* CONNECT sent to the proxy, waiting for 200 */
  CONN_HANDSHAKE, /* TLS handshake */
  CONN_ACTIVE,    /* carrying a request */
  CONN_IDLE,      /* in the pool */
  CONN_CLOSING
} conn_state_t;

typedef enum { TLS_NONE, TLS_LOADING, TLS_READY, TLS_FAILED } tls_state_t;

typedef struct conn_s conn_t;

struct al_http_client_s {
  uv_loop_t *loop;
  al_http_client_options_t o; /* string fields point to our copies */
  char *ca_file;
  char *ca_dir;
  char *no_proxy;
  al__transport_url_t https_proxy; /* host == NULL when none */
  al__transport_url_t http_proxy;
  al_list_t requests; /* live, not yet completed */
  al_list_t idle;     /* pooled connections */
  size_t n_requests;  /* allocated requests (until freed) */
  size_t n_conns;     /* allocated connections (until freed) */
  tls_state_t tls_state;
  al__transport_tls_config_t *tls_cfg;
  char tls_err[256];
  uv_work_t tls_work;
  int tls_work_status;
  al_list_t tls_waiters;
  uv_timer_t close_timer; /* only ever closed: defers the close callback */
  bool closing;
  bool close_started;
  void (*close_cb)(al_http_client_t *c);
  al_http_client_stats_t stats;
  /* Shared pacing (pace.c): NULL until an agent asks for a pacer. */
  al_pace_set_t *paces;
  bool paces_closing;
  void *data; /* the owner's */
};

void al_http_client_set_data(al_http_client_t *c, void *data) {
  c->data = data;
}

void *al_http_client_get_data(const al_http_client_t *c) { return c->data; }

al_pace_set_t **al__http_client_paces(al_http_client_t *c) {
  return &c->paces;
}

uv_loop_t *al__http_client_loop(al_http_client_t *c) { return c->loop; }

bool al__http_client_closing(const al_http_client_t *c) { return c->closing; }

struct conn_s {
  al_http_client_t *client;
  al_http_request_t *req;
  al_list_t node; /* client->idle while pooled */
  conn_state_t state;
  char *key;
  /* Where the socket goes: the proxy when there is one, else the origin. */
  char *dial_host;
  uint16_t dial_port;
  bool dial_is_ip;
  /* The origin, for TLS (SNI, name check) and the CONNECT line. */
  char *host;
  uint16_t port;
  bool host_is_ip;
  bool https;
  bool tunnel;      /* CONNECT through a proxy before TLS */
  char *proxy_auth; /* "Basic ..." for Proxy-Authorization, or NULL */
  uv_getaddrinfo_t gai;
  bool gai_pending;
  struct addrinfo *ai;
  struct addrinfo *ai_cur;
  struct sockaddr_storage lit;
  bool lit_tried;
  uv_tcp_t tcp;
  uv_connect_t creq;
  bool tcp_closing;
  bool reconnecting;
  uv_timer_t timer;
  int open_handles;
  al__transport_tls_t *tls;
  al_buf_t tunnel_resp;
  int last_err;
  char *rbuf;      /* al_malloc'd, rbuf_len bytes; NULL until the first read */
  size_t rbuf_len;
  bool rbuf_full;  /* the last read filled it: grow before the next */
  char *pbuf;      /* TLS plaintext, PBUF_SIZE bytes */
};

typedef struct {
  uv_write_t w;
  conn_t *conn;
  char *buf;
} write_req_t;

typedef struct {
  uint32_t no, nl, vo, vl;
} hdr_idx_t;

struct al_http_request_s {
  al_http_client_t *client;
  al_list_t node;       /* client->requests while live */
  al_list_t tls_node;   /* client->tls_waiters while waiting for the CA */
  void *data;
  al_http_request_response_cb on_response;
  al_http_request_data_cb on_data;
  al_http_request_complete_cb on_complete;
  al__transport_url_t url;
  char *key;
  bool head;
  bool use_proxy;
  al__transport_url_t *proxy; /* points into the client */
  char *wire;
  size_t wire_len;
  int64_t connect_timeout_ms;
  int64_t idle_timeout_ms;
  int64_t progress_timeout_ms;
  size_t max_header_bytes;
  size_t max_error_body_bytes;
  size_t max_header_count;
  int64_t total_timeout_ms;
  size_t min_rate_bytes;
  int64_t min_rate_window_ms;
  conn_t *conn;
  uv_timer_t kick;
  uv_timer_t idle;
  uv_timer_t progress;
  uv_timer_t watch; /* total deadline and minimum-rate windows */
  uint64_t started;     /* uv_now at start */
  uint64_t window_start; /* 0 until the first response byte */
  uint64_t window_bytes;
  bool too_many_headers;
  bool expect_sse;
  char *stop_msg; /* a parser stop's own text, or NULL */
  int open_handles;
  bool handles_closing;
  uint64_t last_rx;
  uint64_t last_progress;
  bool idle_graced;     /* idle deadline passed, no byte since: one pass left */
  bool progress_graced; /* the same for the progress deadline and content */
  bool cancelled;
  bool done;
  bool reused;
  bool retried;
  bool got_bytes;  /* any response byte on the current connection */
  int abort_status; /* set by al_http_client_close */
  /* response */
  llhttp_t parser;
  llhttp_settings_t settings;
  size_t head_bytes;
  bool headers_done;
  bool interim;
  bool message_complete;
  bool keep_alive;
  bool stop_parse_err; /* a limit hit inside a parser callback */
  int parse_err;
  al_http_error_kind_t parse_kind;
  int status_code;
  al_buf_t hdr;
  al_buf_t hdr_ix;
  size_t mark;
  al_http_header_t *hv;
  size_t hn;
  al_buf_t err_body;
  bool err_truncated;
  char *api_type;
  char *api_message;
  char *api_code;
};

static void conn_close(conn_t *conn);
static void conn_read_start(conn_t *conn);
static void conn_established(conn_t *conn);
static void conn_fail(conn_t *conn, int status, al_http_error_kind_t kind,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void req_acquire(al_http_request_t *r);
static void req_finish(al_http_request_t *r, int status,
                       al_http_error_kind_t kind, const char *detail,
                       const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void req_send(al_http_request_t *r);
static void req_on_conn_error(al_http_request_t *r, int status);
static void client_maybe_finish_close(al_http_client_t *c);
static void tls_start_loading(al_http_client_t *c);
static void watch_arm(al_http_request_t *r);

/* ---- small helpers -------------------------------------------------------- */

static int64_t pick(int64_t v, int64_t dflt) { return v < 0 ? dflt : v; }

static bool is_token(const char *s) {
  if (*s == '\0') {
    return false;
  }
  for (; *s != '\0'; s++) {
    if (!isalnum((unsigned char)*s) && strchr("!#$%&'*+-.^_`|~", *s) == NULL) {
      return false;
    }
  }
  return true;
}

static bool has_crlf(const char *s, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0') {
      return true;
    }
  }
  return false;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') {
    return ch - '0';
  }
  ch = (char)tolower((unsigned char)ch);
  if (ch >= 'a' && ch <= 'f') {
    return ch - 'a' + 10;
  }
  return -1;
}

/* "Basic base64(percent-decoded userinfo)"; NULL on ENOMEM. */
static char *basic_auth(const char *userinfo) {
  static const char b64[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = strlen(userinfo);
  char *dec = al_malloc(n + 1);
  char *out;
  size_t i, j = 0, o;

  if (dec == NULL) {
    return NULL;
  }
  for (i = 0; i < n; i++) {
    if (userinfo[i] == '%' && i + 2 < n && hexval(userinfo[i + 1]) >= 0 &&
        hexval(userinfo[i + 2]) >= 0) {
      dec[j++] =
          (char)(hexval(userinfo[i + 1]) * 16 + hexval(userinfo[i + 2]));
      i += 2;
    } else {
      dec[j++] = userinfo[i];
    }
  }
  out = al_malloc(6 + (j + 2) / 3 * 4 + 1);
  if (out == NULL) {
    al_free(dec);
    return NULL;
  }
  memcpy(out, "Basic ", 6);
  o = 6;
  for (i = 0; i < j; i += 3) {
    unsigned v = (unsigned char)dec[i] << 16;

    if (i + 1 < j) {
      v |= (unsigned char)dec[i + 1] << 8;
    }
    if (i + 2 < j) {
      v |= (unsigned char)dec[i + 2];
    }
    out[o++] = b64[(v >> 18) & 63];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = i + 1 < j ? b64[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < j ? b64[v & 63] : '=';
  }
  out[o] = '\0';
  al_free(dec);
  return out;
}

/* ---- options -------------------------------------------------------------- */

void al_http_client_options_init(al_http_client_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->proxy_from_env = true;
  o->connect_timeout_ms = 10000;
  o->idle_timeout_ms = 30000;
  o->progress_timeout_ms = 120000;
  o->max_header_bytes = 64 * 1024;
  o->max_error_body_bytes = 64 * 1024;
  o->max_header_count = 256;
  o->total_timeout_ms = 1800000;
  o->min_rate_bytes = 128;
  o->min_rate_window_ms = 60000;
  o->pool_max_idle_per_origin = 4;
  o->pool_idle_timeout_ms = 30000;
}

void al_http_request_options_init(al_http_request_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->method = "GET";
  o->connect_timeout_ms = -1;
  o->idle_timeout_ms = -1;
  o->progress_timeout_ms = -1;
  o->max_header_bytes = -1;
  o->max_error_body_bytes = -1;
  o->max_header_count = -1;
  o->total_timeout_ms = -1;
  o->min_rate_bytes = -1;
  o->min_rate_window_ms = -1;
}

/* ---- client --------------------------------------------------------------- */

static const char *env2(const char *lower, const char *upper) {
  const char *v = getenv(lower);

  if (v == NULL && upper != NULL) {
    v = getenv(upper);
  }
  return v;
}

/* Parses a proxy setting; a bad value from the environment is ignored
 * with a warning, a bad explicit option is an error. */
static int set_proxy(al__transport_url_t *dst, const char *v, bool explicit) {
  int err;

  if (v == NULL || v[0] == '\0') {
    return 0;
  }
  err = al__transport_url_parse(v, true, dst);
  if (err == 0 && dst->https) {
    /* TLS to the proxy itself is not supported; say so instead of
     * silently sending plaintext CONNECT to a TLS port. */
    al__transport_url_free(dst);
    err = AL_ENOTSUP;
  }
  if (err == AL_ENOMEM) {
    return err;
  }
  if (err != 0) {
    if (explicit) {
      return AL_EINVAL;
    }
    al_log(AL_LOG_WARN, "transport: ignoring unusable proxy setting '%s'", v);
  }
  return 0;
}

static void client_free(al_http_client_t *c) {
  al__transport_tls_config_free(c->tls_cfg);
  al__transport_url_free(&c->https_proxy);
  al__transport_url_free(&c->http_proxy);
  al_free(c->ca_file);
  al_free(c->ca_dir);
  al_free(c->no_proxy);
  al_free(c);
}

int al_http_client_new(uv_loop_t *loop, const al_http_client_options_t *opts,
                       al_http_client_t **out) {
  al_http_client_t *c;
  al_http_client_options_t d;
  const char *v;
  const char *hp;
  const char *sp;
  int err;

  *out = NULL;
  if (opts == NULL) {
    al_http_client_options_init(&d);
    opts = &d;
  }
  c = al_calloc(1, sizeof(*c));
  if (c == NULL) {
    return AL_ENOMEM;
  }
  c->loop = loop;
  c->o = *opts;
  al_list_init(&c->requests);
  al_list_init(&c->idle);
  al_list_init(&c->tls_waiters);

  v = opts->ca_file != NULL ? opts->ca_file : getenv("SSL_CERT_FILE");
  if (v == NULL || v[0] == '\0') {
    v = DEFAULT_CA_FILE;
  }
  c->ca_file = al_strdup(v);
  v = opts->ca_dir != NULL ? opts->ca_dir
                           : (opts->ca_file == NULL ? getenv("SSL_CERT_DIR")
                                                    : NULL);
  if (v != NULL && v[0] != '\0') {
    c->ca_dir = al_strdup(v);
    if (c->ca_dir == NULL) {
      goto out_nomem;
    }
  }
  if (c->ca_file == NULL) {
    goto out_nomem;
  }

  sp = opts->https_proxy;
  hp = opts->http_proxy;
  v = opts->no_proxy;
  if (opts->proxy_from_env) {
    const char *all = env2("all_proxy", "ALL_PROXY");

    if (sp == NULL) {
      sp = env2("https_proxy", "HTTPS_PROXY");
    }
    if (hp == NULL) {
      /* httpoxy: CGI turns a request's Proxy: header into HTTP_PROXY, so
       * the uppercase form is not trusted inside a CGI (Go's rule). */
      hp = env2("http_proxy",
                getenv("REQUEST_METHOD") == NULL ? "HTTP_PROXY" : NULL);
    }
    if (sp == NULL) {
      sp = all;
    }
    if (hp == NULL) {
      hp = all;
    }
    if (v == NULL) {
      v = env2("no_proxy", "NO_PROXY");
    }
  }
  err = set_proxy(&c->https_proxy, sp, opts->https_proxy != NULL);
  if (err == 0) {
    err = set_proxy(&c->http_proxy, hp, opts->http_proxy != NULL);
  }
  if (err != 0) {
    client_free(c);
    return err;
  }
  if (v != NULL) {
    c->no_proxy = al_strdup(v);
    if (c->no_proxy == NULL) {
      goto out_nomem;
    }
  }
  c->o.ca_file = c->ca_file;
  c->o.ca_dir = c->ca_dir;
  c->o.no_proxy = c->no_proxy;
  c->o.https_proxy = NULL;
  c->o.http_proxy = NULL;
  if (c->o.max_header_bytes == 0) {
    c->o.max_header_bytes = 64 * 1024;
  }
  err = uv_timer_init(loop, &c->close_timer);
  if (err != 0) {
    client_free(c);
    return err;
  }
  /* The timer is never started; unref it so an idle client does not keep
   * the embedder's loop alive. */
  uv_unref((uv_handle_t *)&c->close_timer);
  *out = c;
  return 0;

out_nomem:
  client_free(c);
  return AL_ENOMEM;
}

void al_http_client_stats(const al_http_client_t *c,
                          al_http_client_stats_t *out) {
  const al_list_t *it;

  *out = c->stats;
  out->idle_conns = 0;
  al_list_foreach(it, &c->idle) { out->idle_conns++; }
}

static void client_closed_cb(uv_handle_t *h) {
  al_http_client_t *c = AL_CONTAINER_OF(h, al_http_client_t, close_timer);
  void (*cb)(al_http_client_t *) = c->close_cb;

  if (cb != NULL) {
    cb(c);
  }
  client_free(c);
}

static void client_maybe_finish_close(al_http_client_t *c) {
  if (!c->closing || c->close_started || c->n_requests > 0 ||
      c->n_conns > 0 || c->tls_state == TLS_LOADING || c->paces_closing) {
    return;
  }
  c->close_started = true;
  uv_close((uv_handle_t *)&c->close_timer, client_closed_cb);
}

static void on_paces_closed(void *arg) {
  al_http_client_t *c = arg;

  c->paces_closing = false;
  client_maybe_finish_close(c);
}

static void abort_cb(uv_timer_t *t) {
  al_http_request_t *r = AL_CONTAINER_OF(t, al_http_request_t, kick);

  req_finish(r, r->abort_status, AL_HTTP_ERR_CANCELLED, NULL,
             "client closed");
}

void al_http_client_close(al_http_client_t *c,
                          void (*cb)(al_http_client_t *c)) {
  al_list_t *it;

  /* Closing twice is a programmer error, as with uv_close. */
  assert(!c->closing);
  c->closing = true;
  c->close_cb = cb;
  /* Requests still running complete with ECANCELED on a later iteration
   * (an internal abort completes; only _cancel is silent). */
  al_list_foreach(it, &c->requests) {
    al_http_request_t *r = AL_CONTAINER_OF(it, al_http_request_t, node);

    r->abort_status = AL_ECANCELED;
    uv_timer_start(&r->kick, abort_cb, 0, 0);
  }
  while (!al_list_empty(&c->idle)) {
    conn_close(AL_CONTAINER_OF(c->idle.next, conn_t, node));
  }
  if (c->paces != NULL) {
    c->paces_closing = al__pace_set_close(c->paces, on_paces_closed, c);
    c->paces = NULL;
  }
  client_maybe_finish_close(c);
}

/* ---- CA loading in the threadpool ----------------------------------------- */

static void tls_work_cb(uv_work_t *w) {
  al_http_client_t *c = AL_CONTAINER_OF(w, al_http_client_t, tls_work);

  c->tls_work_status = al__transport_tls_config_new(
      c->ca_file, c->ca_dir, &c->tls_cfg, c->tls_err, sizeof(c->tls_err));
}

static void tls_after_work_cb(uv_work_t *w, int status) {
  al_http_client_t *c = AL_CONTAINER_OF(w, al_http_client_t, tls_work);

  if (status != 0 && c->tls_work_status == 0) {
    c->tls_work_status = status;
    snprintf(c->tls_err, sizeof(c->tls_err), "CA loading: %s",
             uv_strerror(status));
  }
  c->tls_state = c->tls_work_status == 0 ? TLS_READY : TLS_FAILED;
  /* Move-pop: a waiter's acquire may fail and complete it, which unlinks
   * it from the list we are walking. */
  while (!al_list_empty(&c->tls_waiters)) {
    al_http_request_t *r =
        AL_CONTAINER_OF(c->tls_waiters.next, al_http_request_t, tls_node);

    al_list_remove(&r->tls_node);
    if (!r->done) {
      req_acquire(r);
    }
  }
  client_maybe_finish_close(c);
}

static void tls_start_loading(al_http_client_t *c) {
  int err;

  c->tls_state = TLS_LOADING;
  err = uv_queue_work(c->loop, &c->tls_work, tls_work_cb, tls_after_work_cb);
  if (err != 0) {
    c->tls_state = TLS_FAILED;
    snprintf(c->tls_err, sizeof(c->tls_err), "CA loading: %s",
             uv_strerror(err));
  }
}

/* ---- connections ---------------------------------------------------------- */

static void conn_maybe_free(conn_t *conn) {
  al_http_client_t *c = conn->client;

  if (conn->open_handles > 0 || conn->gai_pending) {
    return;
  }
  if (conn->ai != NULL) {
    uv_freeaddrinfo(conn->ai);
  }
  al__transport_tls_free(conn->tls);
  al_buf_free(&conn->tunnel_resp);
  al_free(conn->key);
  al_free(conn->dial_host);
  al_free(conn->host);
  al_free(conn->proxy_auth);
  al_free(conn->rbuf);
  al_free(conn->pbuf);
  al_free(conn);
  c->n_conns--;
  client_maybe_finish_close(c);
}

static void conn_handle_closed(uv_handle_t *h) {
  conn_t *conn = h->data;

  conn->open_handles--;
  conn_maybe_free(conn);
}

static void tcp_closed_cb(uv_handle_t *h);

/* Closes the connection at once; its request (if any) is detached and not
 * told: callers decide what the request sees. */
static void conn_close(conn_t *conn) {
  if (conn->state == CONN_CLOSING) {
    return;
  }
  if (conn->state == CONN_IDLE) {
    al_list_remove(&conn->node);
  }
  conn->state = CONN_CLOSING;
  if (conn->req != NULL) {
    conn->req->conn = NULL;
    conn->req = NULL;
  }
  if (conn->gai_pending) {
    /* Fails if the lookup already runs; its callback frees the result. */
    uv_cancel((uv_req_t *)&conn->gai);
  }
  if (!conn->tcp_closing) {
    conn->tcp_closing = true;
    uv_close((uv_handle_t *)&conn->tcp, tcp_closed_cb);
  }
  uv_close((uv_handle_t *)&conn->timer, conn_handle_closed);
}

/* Connection failed while owned by a request: close it and complete (or
 * retry) the request. */
static void conn_fail(conn_t *conn, int status, al_http_error_kind_t kind,
                      const char *fmt, ...) {
  al_http_request_t *r = conn->req;
  const char *detail = NULL;
  char msg[400];
  char det[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (conn->tls != NULL && al__transport_tls_detail(conn->tls) != NULL) {
    snprintf(det, sizeof(det), "%s", al__transport_tls_detail(conn->tls));
    detail = det;
  }
  conn_close(conn);
  if (r != NULL) {
    req_finish(r, status, kind, detail, "%s", msg);
  }
}

static void write_cb(uv_write_t *w, int status) {
  write_req_t *wr = AL_CONTAINER_OF(w, write_req_t, w);
  conn_t *conn = wr->conn;

  al_free(wr->buf);
  al_free(wr);
  if (status < 0 && conn->state != CONN_CLOSING) {
    if (conn->req != NULL) {
      req_on_conn_error(conn->req, status);
    } else {
      conn_close(conn);
    }
  }
}

/* Writes buf (al_malloc'd; ownership taken) to the socket. */
static int conn_write_take(conn_t *conn, char *buf, size_t len) {
  write_req_t *wr;
  uv_buf_t b;
  int err;

  wr = al_malloc(sizeof(*wr));
  if (wr == NULL) {
    al_free(buf);
    return AL_ENOMEM;
  }
  wr->conn = conn;
  wr->buf = buf;
  b = uv_buf_init(buf, (unsigned)len);
  err = uv_write(&wr->w, (uv_stream_t *)&conn->tcp, &b, 1, write_cb);
  if (err != 0) {
    al_free(buf);
    al_free(wr);
  }
  return err;
}

static int conn_flush_tls(conn_t *conn) {
  char *buf;
  size_t len;
  int err = al__transport_tls_take_out(conn->tls, &buf, &len);

  if (err != 0 || buf == NULL) {
    return err;
  }
  return conn_write_take(conn, buf, len);
}

/* Sends application bytes (copied), through TLS when there is TLS. */
static int conn_send(conn_t *conn, const char *p, size_t n) {
  char *copy;
  int err;

  /* The CONNECT exchange precedes TLS and goes in the clear. */
  if (conn->tls != NULL && conn->state != CONN_TUNNEL) {
    err = al__transport_tls_write(conn->tls, p, n);
    if (err != 0) {
      return err;
    }
    return conn_flush_tls(conn);
  }
  copy = al_malloc(n);
  if (copy == NULL) {
    return AL_ENOMEM;
  }
  memcpy(copy, p, n);
  return conn_write_take(conn, copy, n);
}

static void pool_timer_cb(uv_timer_t *t) {
  conn_close(AL_CONTAINER_OF(t, conn_t, timer));
}

/* Returns a connection whose response ended cleanly to the pool, or
 * closes it when the pool is full or the client is closing. */
static void conn_release(conn_t *conn) {
  al_http_client_t *c = conn->client;
  al_list_t *it;
  size_t same = 0;

  if (conn->req != NULL) {
    conn->req->conn = NULL;
    conn->req = NULL;
  }
  al_list_foreach(it, &c->idle) {
    if (strcmp(AL_CONTAINER_OF(it, conn_t, node)->key, conn->key) == 0) {
      same++;
    }
  }
  if (c->closing || same >= c->o.pool_max_idle_per_origin) {
    conn_close(conn);
    return;
  }
  conn->state = CONN_IDLE;
  al_list_insert_head(&c->idle, &conn->node);
  /* Idle sockets must not keep the embedder's loop alive (STYLE 3.3.8);
   * we keep reading so a server close is noticed and the socket dropped. */
  uv_unref((uv_handle_t *)&conn->tcp);
  uv_unref((uv_handle_t *)&conn->timer);
  if (c->o.pool_idle_timeout_ms > 0) {
    uv_timer_start(&conn->timer, pool_timer_cb,
                   (uint64_t)c->o.pool_idle_timeout_ms, 0);
  }
}

/* Takes the most recently pooled connection for key, or NULL. */
static conn_t *pool_take(al_http_client_t *c, const char *key) {
  al_list_t *it;

  al_list_foreach(it, &c->idle) {
    conn_t *conn = AL_CONTAINER_OF(it, conn_t, node);

    if (strcmp(conn->key, key) == 0) {
      al_list_remove(&conn->node);
      uv_timer_stop(&conn->timer);
      uv_ref((uv_handle_t *)&conn->tcp);
      uv_ref((uv_handle_t *)&conn->timer);
      conn->state = CONN_ACTIVE;
      return conn;
    }
  }
  return NULL;
}

static void connect_timeout_cb(uv_timer_t *t) {
  conn_t *conn = AL_CONTAINER_OF(t, conn_t, timer);
  const char *phase = conn->state == CONN_RESOLVING    ? "resolving"
                      : conn->state == CONN_CONNECTING ? "connecting to"
                      : conn->state == CONN_TUNNEL     ? "tunnelling to"
                                                       : "TLS handshake with";

  conn_fail(conn, AL_ECONNTIMEDOUT, AL_HTTP_ERR_TIMEOUT, "timeout %s %s:%u",
            phase, conn->host, (unsigned)conn->port);
}

static void try_next_address(conn_t *conn);

static void connect_cb(uv_connect_t *creq, int status) {
  conn_t *conn = AL_CONTAINER_OF(creq, conn_t, creq);

  if (conn->state == CONN_CLOSING || status == UV_ECANCELED) {
    return;
  }
  if (status != 0) {
    /* Try the next address on a fresh handle: close this one, continue
     * from its close callback. */
    conn->last_err = status;
    conn->reconnecting = true;
    conn->tcp_closing = true;
    uv_close((uv_handle_t *)&conn->tcp, tcp_closed_cb);
    return;
  }
  conn->client->stats.connects++;
  conn_read_start(conn);
  if (conn->state == CONN_CLOSING) {
    return;
  }
  if (conn->tunnel) {
    char line[600];
    char hp[300];
    int n;

    al__transport_hostport(conn->host, conn->port,
                           strchr(conn->host, ':') != NULL, hp, sizeof(hp));
    n = snprintf(line, sizeof(line),
                 "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", hp, hp,
                 conn->proxy_auth ? "Proxy-Authorization: " : "",
                 conn->proxy_auth ? conn->proxy_auth : "",
                 conn->proxy_auth ? "\r\n" : "");
    conn->state = CONN_TUNNEL;
    if (n < 0 || (size_t)n >= sizeof(line)) {
      conn_fail(conn, AL_EINVAL, AL_HTTP_ERR_PROXY,
                "proxy credentials too long");
      return;
    }
    status = conn_send(conn, line, (size_t)n);
    if (status != 0) {
      conn_fail(conn, status, AL_HTTP_ERR_PROXY, "CONNECT: %s",
                al_strerror(status));
    }
    return;
  }
  conn_established(conn);
}

static void try_next_address(conn_t *conn) {
  const struct sockaddr *sa = NULL;
  int err;

  conn->state = CONN_CONNECTING;
  if (conn->ai == NULL) {
    if (!conn->lit_tried) {
      conn->lit_tried = true;
      sa = (const struct sockaddr *)&conn->lit;
    }
  } else {
    while (conn->ai_cur != NULL && conn->ai_cur->ai_family != AF_INET &&
           conn->ai_cur->ai_family != AF_INET6) {
      conn->ai_cur = conn->ai_cur->ai_next;
    }
    if (conn->ai_cur != NULL) {
      struct addrinfo *a = conn->ai_cur;

      conn->ai_cur = a->ai_next;
      if (a->ai_family == AF_INET) {
        ((struct sockaddr_in *)a->ai_addr)->sin_port = htons(conn->dial_port);
      } else {
        ((struct sockaddr_in6 *)a->ai_addr)->sin6_port =
            htons(conn->dial_port);
      }
      sa = a->ai_addr;
    }
  }
  if (sa == NULL) {
    conn_fail(conn, conn->last_err ? conn->last_err : AL_ECONNREFUSED,
              AL_HTTP_ERR_NETWORK, "cannot connect to %s:%u: %s",
              conn->dial_host, (unsigned)conn->dial_port,
              al_strerror(conn->last_err ? conn->last_err : AL_ECONNREFUSED));
    return;
  }
  err = uv_tcp_connect(&conn->creq, &conn->tcp, sa, connect_cb);
  if (err != 0) {
    conn->last_err = err;
    conn->reconnecting = true;
    conn->tcp_closing = true;
    uv_close((uv_handle_t *)&conn->tcp, tcp_closed_cb);
  }
}

static void tcp_closed_cb(uv_handle_t *h) {
  conn_t *conn = h->data;
  int err;

  if (conn->reconnecting && conn->state != CONN_CLOSING) {
    conn->reconnecting = false;
    conn->tcp_closing = false;
    err = uv_tcp_init(conn->client->loop, &conn->tcp);
    if (err != 0) {
      /* The handle was never re-opened: account for it as closed. */
      conn->tcp_closing = true;
      conn->open_handles--;
      conn_fail(conn, err, AL_HTTP_ERR_NETWORK, "socket: %s",
                al_strerror(err));
      return;
    }
    conn->tcp.data = conn;
    uv_tcp_nodelay(&conn->tcp, 1);
    try_next_address(conn);
    return;
  }
  conn_handle_closed(h);
}

static void gai_cb(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
  conn_t *conn = AL_CONTAINER_OF(g, conn_t, gai);

  conn->gai_pending = false;
  conn->ai = res;
  conn->ai_cur = res;
  if (conn->state == CONN_CLOSING) {
    conn_maybe_free(conn);
    return;
  }
  if (status != 0 || res == NULL) {
    conn_fail(conn, status ? status : UV_EAI_NONAME, AL_HTTP_ERR_NETWORK,
              "cannot resolve %s: %s", conn->dial_host,
              uv_strerror(status ? status : UV_EAI_NONAME));
    return;
  }
  try_next_address(conn);
}

/* Opens a fresh connection for r (DNS, connect, proxy, TLS). */
static int conn_open(al_http_request_t *r) {
  al_http_client_t *c = r->client;
  conn_t *conn;
  int err;

  conn = al_calloc(1, sizeof(*conn));
  if (conn == NULL) {
    return AL_ENOMEM;
  }
  conn->client = c;
  al_list_init(&conn->node);
  al_buf_init(&conn->tunnel_resp, r->max_header_bytes);
  conn->key = al_strdup(r->key);
  conn->host = al_strdup(r->url.host);
  conn->dial_host = al_strdup(r->use_proxy ? r->proxy->host : r->url.host);
  if (conn->key == NULL || conn->host == NULL || conn->dial_host == NULL) {
    goto out_free;
  }
  conn->port = r->url.port;
  conn->host_is_ip = r->url.host_is_ip;
  conn->https = r->url.https;
  conn->dial_port = r->use_proxy ? r->proxy->port : r->url.port;
  conn->dial_is_ip = r->use_proxy ? r->proxy->host_is_ip : r->url.host_is_ip;
  conn->tunnel = r->use_proxy && r->url.https;
  if (conn->tunnel && r->proxy->userinfo != NULL) {
    conn->proxy_auth = basic_auth(r->proxy->userinfo);
    if (conn->proxy_auth == NULL) {
      goto out_free;
    }
  }
  if (conn->https) {
    err = al__transport_tls_new(c->tls_cfg, conn->host, conn->host_is_ip,
                                &conn->tls);
    if (err != 0) {
      goto out_free_err;
    }
  }
  if (conn->dial_is_ip) {
    if (uv_ip4_addr(conn->dial_host, conn->dial_port,
                    (struct sockaddr_in *)&conn->lit) != 0 &&
        uv_ip6_addr(conn->dial_host, conn->dial_port,
                    (struct sockaddr_in6 *)&conn->lit) != 0) {
      err = AL_EINVAL;
      goto out_free_err;
    }
  }
  /* From here on the connection is freed through its close callbacks. */
  uv_tcp_init(c->loop, &conn->tcp); /* no socket yet: cannot fail */
  uv_timer_init(c->loop, &conn->timer);
  conn->tcp.data = conn;
  conn->timer.data = conn;
  conn->open_handles = 2;
  c->n_conns++;
  conn->req = r;
  r->conn = conn;
  r->reused = false;
  uv_tcp_nodelay(&conn->tcp, 1);
  if (r->connect_timeout_ms > 0) {
    uv_timer_start(&conn->timer, connect_timeout_cb,
                   (uint64_t)r->connect_timeout_ms, 0);
  }
  if (conn->dial_is_ip) {
    try_next_address(conn);
    return 0;
  }
  {
    struct addrinfo hints;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* No AI_ADDRCONFIG: on a host with only loopback configured it hides
     * "localhost". Unusable families just fail over to the next address. */
    conn->state = CONN_RESOLVING;
    err = uv_getaddrinfo(c->loop, &conn->gai, gai_cb, conn->dial_host, NULL,
                         &hints);
    if (err != 0) {
      conn_fail(conn, err, AL_HTTP_ERR_NETWORK, "cannot resolve %s: %s",
                conn->dial_host, uv_strerror(err));
      return 0;
    }
    conn->gai_pending = true;
  }
  return 0;

out_free:
  err = AL_ENOMEM;
out_free_err:
  al__transport_tls_free(conn->tls);
  al_free(conn->key);
  al_free(conn->host);
  al_free(conn->dial_host);
  al_free(conn->proxy_auth);
  al_free(conn);
  return err;
}

static void tls_step(conn_t *conn) {
  int ret = al__transport_tls_handshake(conn->tls);
  int err = conn_flush_tls(conn);

  if (ret == AL_ECERT) {
    /* Say it was verification, and why: the fix (a CA file, the right
     * host name, a renewed certificate) depends on it. */
    conn_fail(conn, ret, AL_HTTP_ERR_TLS,
              "certificate verification failed for %s: %s", conn->host,
              al__transport_tls_detail(conn->tls));
    return;
  }
  if (ret < 0) {
    conn_fail(conn, ret, AL_HTTP_ERR_TLS, "TLS handshake with %s failed",
              conn->host);
    return;
  }
  if (err != 0) {
    conn_fail(conn, err, AL_HTTP_ERR_NETWORK, "write: %s", al_strerror(err));
    return;
  }
  if (ret == 0) {
    uv_timer_stop(&conn->timer);
    conn->state = CONN_ACTIVE;
    if (conn->req != NULL) {
      req_send(conn->req);
    }
  }
}

/* TCP (and tunnel) up: TLS handshake or straight to the request. */
static void conn_established(conn_t *conn) {
  if (conn->tls != NULL) {
    conn->state = CONN_HANDSHAKE;
    tls_step(conn);
    return;
  }
  uv_timer_stop(&conn->timer);
  conn->state = CONN_ACTIVE;
  if (conn->req != NULL) {
    req_send(conn->req);
  }
}

static void tunnel_bytes(conn_t *conn, const char *p, size_t n) {
  char *end;
  int status = 0;
  size_t head_len;

  if (al_buf_append(&conn->tunnel_resp, p, n) != 0) {
    conn_fail(conn, AL_ETOOBIG, AL_HTTP_ERR_PROXY,
              "proxy response headers too large");
    return;
  }
  end = strstr(conn->tunnel_resp.data, "\r\n\r\n");
  if (end == NULL) {
    return;
  }
  head_len = (size_t)(end + 4 - conn->tunnel_resp.data);
  if (sscanf(conn->tunnel_resp.data, "HTTP/1.%*1[01] %3d", &status) != 1) {
    conn_fail(conn, AL_EPROXY, AL_HTTP_ERR_PROXY,
              "malformed proxy response to CONNECT");
    return;
  }
  if (status < 200 || status > 299) {
    conn_fail(conn, AL_EPROXY, AL_HTTP_ERR_PROXY,
              "proxy %s:%u refused CONNECT to %s:%u with status %d",
              conn->dial_host, (unsigned)conn->dial_port, conn->host,
              (unsigned)conn->port, status);
    return;
  }
  /* Bytes after the header block already belong to the tunnel. */
  if (conn->tunnel_resp.len > head_len && conn->tls != NULL) {
    if (al__transport_tls_feed(conn->tls, conn->tunnel_resp.data + head_len,
                               conn->tunnel_resp.len - head_len) != 0) {
      conn_fail(conn, AL_ETOOBIG, AL_HTTP_ERR_TLS, "TLS input too large");
      return;
    }
  }
  al_buf_free(&conn->tunnel_resp);
  conn_established(conn);
}

static void req_on_bytes(al_http_request_t *r, const char *p, size_t n);
static void req_on_eof(al_http_request_t *r, int status);

/* Plaintext from the connection, dispatched by state. */
static void conn_plain(conn_t *conn, const char *p, size_t n) {
  switch (conn->state) {
  case CONN_TUNNEL:
    tunnel_bytes(conn, p, n);
    break;
  case CONN_ACTIVE:
    if (conn->req != NULL) {
      req_on_bytes(conn->req, p, n);
    } else {
      conn_close(conn);
    }
    break;
  default:
    /* Data on an idle pooled connection: the exchange is out of sync (or
     * the server is closing), so the socket cannot be reused. */
    conn_close(conn);
    break;
  }
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  conn_t *conn = h->data;
  size_t want = conn->rbuf == NULL ? RBUF_MIN
                : conn->rbuf_full  ? RBUF_MAX
                                   : conn->rbuf_len;
  char *nb;

  (void)hint;
  if (want != conn->rbuf_len) {
    /* Not in use between reads: safe to replace. On failure keep the old
     * buffer (or report ENOBUFS with an empty one). */
    nb = al_realloc(conn->rbuf, want);
    if (nb != NULL) {
      conn->rbuf = nb;
      conn->rbuf_len = want;
    }
  }
  conn->rbuf_full = false;
  buf->base = conn->rbuf;
  buf->len = conn->rbuf != NULL ? conn->rbuf_len : 0;
}

static void conn_on_read_error(conn_t *conn, int status) {
  if (conn->state == CONN_IDLE || conn->req == NULL) {
    conn_close(conn);
  } else if (conn->state == CONN_ACTIVE) {
    req_on_eof(conn->req, status);
  } else {
    conn_fail(conn, status,
              conn->state == CONN_TUNNEL ? AL_HTTP_ERR_PROXY
              : conn->state == CONN_HANDSHAKE ? AL_HTTP_ERR_TLS
                                              : AL_HTTP_ERR_NETWORK,
              "connection to %s:%u closed during %s: %s", conn->dial_host,
              (unsigned)conn->dial_port,
              conn->state == CONN_TUNNEL ? "CONNECT" : "TLS handshake",
              al_strerror(status));
  }
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *conn = s->data;

  if (conn->state == CONN_CLOSING) {
    return;
  }
  if (nread < 0) {
    conn_on_read_error(conn, (int)nread);
    return;
  }
  if (nread == 0) {
    return;
  }
  conn->rbuf_full = (size_t)nread == conn->rbuf_len;
  /* Any received byte counts for the bytes-idle timer (pings too). */
  if (conn->req != NULL) {
    al_http_request_t *rq = conn->req;

    rq->last_rx = uv_now(conn->client->loop);
    rq->idle_graced = false;
    if (rq->window_start == 0 && rq->min_rate_bytes > 0 &&
        rq->min_rate_window_ms > 0) {
      rq->window_start = rq->last_rx;
      rq->window_bytes = 0;
      watch_arm(rq);
    }
    rq->window_bytes += (uint64_t)nread;
  }
  if (conn->tls == NULL || conn->state == CONN_TUNNEL) {
    conn_plain(conn, buf->base, (size_t)nread);
    return;
  }
  if (al__transport_tls_feed(conn->tls, buf->base, (size_t)nread) != 0) {
    conn_fail(conn, AL_ETOOBIG, AL_HTTP_ERR_TLS, "TLS input too large");
    return;
  }
  if (conn->state == CONN_HANDSHAKE) {
    tls_step(conn);
    if (conn->state != CONN_ACTIVE) {
      return;
    }
  }
  if (conn->pbuf == NULL && (conn->pbuf = al_malloc(PBUF_SIZE)) == NULL) {
    conn_fail(conn, AL_ENOMEM, AL_HTTP_ERR_TLS, "out of memory");
    return;
  }
  for (;;) {
    ssize_t n = al__transport_tls_read(conn->tls, conn->pbuf, PBUF_SIZE);

    if (n == 0) {
      break;
    }
    if (n < 0) {
      if (n == AL_EOF) {
        conn_on_read_error(conn, AL_EOF);
      } else if (conn->req != NULL && conn->state == CONN_ACTIVE) {
        /* A TLS failure mid-response; keep the mbedtls text. */
        conn_fail(conn, (int)n, AL_HTTP_ERR_TLS, "TLS error from %s",
                  conn->host);
      } else {
        conn_close(conn);
      }
      return;
    }
    conn_plain(conn, conn->pbuf, (size_t)n);
    if (conn->state == CONN_CLOSING) {
      return;
    }
  }
}

static void conn_read_start(conn_t *conn) {
  int err = uv_read_start((uv_stream_t *)&conn->tcp, alloc_cb, read_cb);

  if (err != 0) {
    conn_fail(conn, err, AL_HTTP_ERR_NETWORK, "read: %s", al_strerror(err));
  }
}

/* ---- requests: lifecycle -------------------------------------------------- */

static void req_free(al_http_request_t *r) {
  al_http_client_t *c = r->client;

  al__transport_url_free(&r->url);
  al_free(r->key);
  al_free(r->wire);
  al_buf_free(&r->hdr);
  al_buf_free(&r->hdr_ix);
  al_free(r->hv);
  al_buf_free(&r->err_body);
  al_free(r->api_type);
  al_free(r->api_message);
  al_free(r->api_code);
  al_free(r->stop_msg);
  al_free(r);
  c->n_requests--;
  client_maybe_finish_close(c);
}

static void req_handle_closed(uv_handle_t *h) {
  al_http_request_t *r = h->data;

  if (--r->open_handles == 0) {
    req_free(r);
  }
}

/* Marks the request done, detaches it from everything and starts closing
 * its handles. Its memory lives until the close callbacks run. */
static void req_retire(al_http_request_t *r) {
  r->done = true;
  al_list_remove(&r->node);
  al_list_remove(&r->tls_node);
  if (!r->handles_closing) {
    r->handles_closing = true;
    uv_close((uv_handle_t *)&r->kick, req_handle_closed);
    uv_close((uv_handle_t *)&r->idle, req_handle_closed);
    uv_close((uv_handle_t *)&r->progress, req_handle_closed);
    uv_close((uv_handle_t *)&r->watch, req_handle_closed);
  }
}

static void build_api_error(al_http_request_t *r, al_http_error_t *e,
                            char *msg, size_t msg_len) {
  al_http_headers_t hs = {r->hv, r->hn};
  const al_http_header_t *h;
  const al_http_header_t *ms;
  const al_http_header_t *s;

  e->http_status = r->status_code;
  e->kind = al_http_status_kind(r->status_code);
  e->body = r->err_body.data != NULL ? r->err_body.data : "";
  e->body_len = r->err_body.len;
  e->body_truncated = r->err_truncated;
  al__transport_parse_error_body(r->err_body.data, r->err_body.len,
                                 &r->api_type, &r->api_message, &r->api_code);
  e->api_type = r->api_type;
  e->api_message = r->api_message;
  e->api_code = r->api_code;
  ms = al_http_headers_get(&hs, "retry-after-ms");
  s = al_http_headers_get(&hs, "retry-after");
  e->retry_after_ms = al_http_parse_retry_after(
      ms ? ms->value : NULL, s ? s->value : NULL, (int64_t)time(NULL));
  h = al_http_headers_get(&hs, "x-should-retry");
  if (h != NULL && strcasecmp(h->value, "true") == 0) {
    e->should_retry = 1;
  } else if (h != NULL && strcasecmp(h->value, "false") == 0) {
    e->should_retry = 0;
  }
  h = al_http_headers_get(&hs, "request-id");
  if (h == NULL) {
    h = al_http_headers_get(&hs, "x-request-id");
  }
  e->request_id = h ? h->value : NULL;
  snprintf(msg, msg_len, "HTTP %d (%s)%s%s", r->status_code,
           al_http_error_kind_name(e->kind), r->api_message ? ": " : "",
           r->api_message ? r->api_message : "");
  e->message = msg;
}

/* The single completion point: exactly once, never after cancel. */
static void req_finish(al_http_request_t *r, int status,
                       al_http_error_kind_t kind, const char *detail,
                       const char *fmt, ...) {
  al_http_error_t e;
  /* On the stack: the texts are borrowed by on_complete only, and every
   * open stream would otherwise carry 512 idle bytes. */
  char msg[400];
  char det[256];
  va_list ap;

  if (r->done) {
    return;
  }
  msg[0] = '\0';
  req_retire(r);
  memset(&e, 0, sizeof(e));
  e.retry_after_ms = -1;
  e.should_retry = -1;
  e.code = status;
  e.kind = kind;
  if (fmt != NULL) {
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
  }
  e.message = msg;
  if (detail != NULL) {
    snprintf(det, sizeof(det), "%s", detail);
    e.detail = det;
  }
  if (status == AL_EAPI) {
    build_api_error(r, &e, msg, sizeof(msg));
  }
  if (r->conn != NULL) {
    conn_close(r->conn);
  }
  if (!r->cancelled) {
    r->on_complete(r, status, status == 0 ? NULL : &e);
  }
}

/* ---- requests: response parsing ------------------------------------------- */

static int hp_stop(al_http_request_t *r, int err, al_http_error_kind_t kind) {
  r->stop_parse_err = true;
  r->parse_err = err;
  r->parse_kind = kind;
  return HPE_USER;
}

static int hp_header_field(llhttp_t *p, const char *at, size_t n) {
  al_http_request_t *r = p->data;

  if (r->headers_done) {
    return 0; /* trailers are ignored */
  }
  if (al_buf_append(&r->hdr, at, n) != 0) {
    return hp_stop(r, AL_ETOOBIG, AL_HTTP_ERR_TOO_BIG);
  }
  return 0;
}

static int hp_header_value(llhttp_t *p, const char *at, size_t n) {
  return hp_header_field(p, at, n);
}

/* Names and values are stored back to back in hdr, each NUL-terminated;
 * hdr_ix records offsets, turned into slices once the block is complete
 * (hdr may move while it grows). */
static int hp_field_complete(llhttp_t *p) {
  al_http_request_t *r = p->data;
  hdr_idx_t ix;

  if (r->headers_done) {
    return 0;
  }
  if (r->hdr_ix.len / sizeof(ix) >= r->max_header_count) {
    r->too_many_headers = true;
    return hp_stop(r, AL_ETOOBIG, AL_HTTP_ERR_TOO_BIG);
  }
  memset(&ix, 0, sizeof(ix));
  ix.no = (uint32_t)r->mark;
  ix.nl = (uint32_t)(r->hdr.len - r->mark);
  if (al_buf_append(&r->hdr, "", 1) != 0 ||
      al_buf_append(&r->hdr_ix, &ix, sizeof(ix)) != 0) {
    return hp_stop(r, AL_ETOOBIG, AL_HTTP_ERR_TOO_BIG);
  }
  r->mark = r->hdr.len;
  return 0;
}

static int hp_value_complete(llhttp_t *p) {
  al_http_request_t *r = p->data;
  hdr_idx_t *ix;

  if (r->headers_done || r->hdr_ix.len < sizeof(*ix)) {
    return 0;
  }
  ix = (hdr_idx_t *)(r->hdr_ix.data + r->hdr_ix.len - sizeof(*ix));
  ix->vo = (uint32_t)r->mark;
  ix->vl = (uint32_t)(r->hdr.len - r->mark);
  if (al_buf_append(&r->hdr, "", 1) != 0) {
    return hp_stop(r, AL_ETOOBIG, AL_HTTP_ERR_TOO_BIG);
  }
  r->mark = r->hdr.len;
  return 0;
}

/* Media type of a header value, without parameters, lowercased. */
static void media_type(const al_http_header_t *h, char *out, size_t len) {
  size_t i = 0;

  out[0] = '\0';
  if (h == NULL) {
    return;
  }
  while (i + 1 < len && i < h->value_len && h->value[i] != ';' &&
         h->value[i] != ' ') {
    out[i] = (char)tolower((unsigned char)h->value[i]);
    i++;
  }
  out[i] = '\0';
}

/* expect_event_stream: true when the 2xx body can be an event stream;
 * else r->stop_msg says what arrived instead. */
static bool body_is_event_stream(al_http_request_t *r) {
  al_http_headers_t hs = {r->hv, r->hn};
  const al_http_header_t *ce = al_http_headers_get(&hs, "content-encoding");
  const al_http_header_t *ct = al_http_headers_get(&hs, "content-type");
  char enc[48], type[64], msg[256];

  media_type(ce, enc, sizeof(enc));
  media_type(ct, type, sizeof(type));
  if (ce != NULL && strcmp(enc, "identity") != 0) {
    snprintf(msg, sizeof(msg),
             "%s answered %d with a %s-encoded body (Content-Type %s), "
             "which was not asked for and is not decoded; a proxy or "
             "gateway in between may have added it",
             r->url.host, r->status_code, enc[0] ? enc : "?",
             type[0] ? type : "absent");
  } else if (ct != NULL && strcmp(type, "text/event-stream") != 0 &&
             strcmp(type, "application/json") != 0) {
    snprintf(msg, sizeof(msg),
             "%s answered %d with %s instead of an event stream "
             "(text/event-stream): is the base URL a model API endpoint, "
             "or a login page or proxy in front of it?",
             r->url.host, r->status_code, type[0] ? type : "an empty type");
  } else {
    return true;
  }
  al_free(r->stop_msg);
  r->stop_msg = al_strdup(msg);
  return false;
}

static void reset_headers(al_http_request_t *r) {
  al_buf_reset(&r->hdr);
  al_buf_reset(&r->hdr_ix);
  r->mark = 0;
  al_free(r->hv);
  r->hv = NULL;
  r->hn = 0;
}

static void progress_timer_cb(uv_timer_t *t);

static int hp_headers_complete(llhttp_t *p) {
  al_http_request_t *r = p->data;
  al_http_headers_t hs;
  size_t i;
  int status = p->status_code;

  r->status_code = status;
  if (status == 101) {
    /* Switching Protocols answers an Upgrade we never send: a broken
     * server, not a final response (found by fuzz_http_response). */
    return hp_stop(r, AL_EHTTP, AL_HTTP_ERR_HTTP_PARSE);
  }
  if (status < 200) {
    /* An interim response (100 Continue, 103 Early Hints): no body; the
     * final response follows on the same stream. */
    r->interim = true;
    reset_headers(r);
    return 1;
  }
  r->headers_done = true;
  r->hn = r->hdr_ix.len / sizeof(hdr_idx_t);
  if (r->hn > 0) {
    const hdr_idx_t *ix = (const hdr_idx_t *)r->hdr_ix.data;

    r->hv = al_malloc(r->hn * sizeof(*r->hv));
    if (r->hv == NULL) {
      r->hn = 0;
      return hp_stop(r, AL_ENOMEM, AL_HTTP_ERR_NETWORK);
    }
    for (i = 0; i < r->hn; i++) {
      r->hv[i].name = r->hdr.data + ix[i].no;
      r->hv[i].name_len = ix[i].nl;
      r->hv[i].value = r->hdr.data + ix[i].vo;
      r->hv[i].value_len = ix[i].vl;
    }
  }
  if (status >= 200 && status <= 299 && r->expect_sse &&
      !body_is_event_stream(r)) {
    return hp_stop(r, AL_EPROTO, AL_HTTP_ERR_UNEXPECTED_BODY);
  }
  if (status >= 200 && status <= 299) {
    if (r->progress_timeout_ms > 0) {
      r->last_progress = uv_now(r->client->loop);
      r->progress_graced = false;
      uv_timer_start(&r->progress, progress_timer_cb,
                     (uint64_t)r->progress_timeout_ms, 0);
    }
  } else {
    al_buf_init(&r->err_body, r->max_error_body_bytes);
  }
  if (r->on_response != NULL) {
    hs.v = r->hv;
    hs.n = r->hn;
    r->on_response(r, status, &hs);
    if (r->done) {
      return HPE_USER;
    }
  }
  /* Responses to HEAD, and 204/304, have headers only, whatever they
   * announce (RFC 9112 6.3); llhttp 8.1 leaves that to us. */
  return (r->head || status == 204 || status == 304) ? 1 : 0;
}

static int hp_body(llhttp_t *p, const char *at, size_t n) {
  al_http_request_t *r = p->data;

  if (r->status_code >= 200 && r->status_code <= 299) {
    if (r->on_data != NULL && n > 0) {
      r->on_data(r, at, n);
      if (r->done) {
        return HPE_USER;
      }
    }
    return 0;
  }
  {
    size_t room = r->err_body.max - r->err_body.len;

    if (al_buf_append(&r->err_body, at, AL_MIN(n, room)) != 0) {
      return hp_stop(r, AL_ENOMEM, AL_HTTP_ERR_NETWORK);
    }
    if (n > room) {
      /* Enough to classify; the rest is not worth reading. */
      r->err_truncated = true;
      return HPE_USER;
    }
  }
  return 0;
}

static int hp_message_complete(llhttp_t *p) {
  al_http_request_t *r = p->data;

  if (r->interim) {
    r->interim = false;
    return 0;
  }
  r->message_complete = true;
  r->keep_alive = llhttp_should_keep_alive(p) != 0;
  /* Stop here: anything after the response is not ours. */
  return HPE_PAUSED;
}

/* The response is complete: pool or close the connection, then report. */
static void req_message_done(al_http_request_t *r, bool reusable) {
  conn_t *conn = r->conn;

  if (conn != NULL) {
    if (reusable && r->client->o.pool_max_idle_per_origin > 0) {
      conn_release(conn);
    } else {
      conn_close(conn);
    }
  }
  if (r->status_code >= 200 && r->status_code <= 299) {
    req_finish(r, 0, AL_HTTP_ERR_NONE, NULL, NULL);
  } else {
    req_finish(r, AL_EAPI, AL_HTTP_ERR_API_ERROR, NULL, NULL);
  }
}

static void req_after_parse(al_http_request_t *r, llhttp_errno_t err,
                            const char *end) {
  if (r->done) {
    return;
  }
  if (r->message_complete) {
    const char *pos = llhttp_get_error_pos(&r->parser);

    req_message_done(r, r->keep_alive && (end == NULL || pos == end));
    return;
  }
  if (r->err_truncated) {
    if (r->conn != NULL) {
      conn_close(r->conn);
    }
    req_finish(r, AL_EAPI, AL_HTTP_ERR_API_ERROR, NULL, NULL);
    return;
  }
  if (r->stop_parse_err) {
    if (r->parse_err == AL_ETOOBIG && r->too_many_headers) {
      req_finish(r, AL_ETOOBIG, AL_HTTP_ERR_TOO_BIG, NULL,
                 "response from %s has more than %zu headers", r->url.host,
                 r->max_header_count);
    } else if (r->parse_err == AL_ETOOBIG) {
      req_finish(r, AL_ETOOBIG, AL_HTTP_ERR_TOO_BIG, NULL,
                 "response headers from %s exceed %zu bytes", r->url.host,
                 r->max_header_bytes);
    } else {
      req_finish(r, r->parse_err, r->parse_kind, NULL, "%s",
                 r->stop_msg != NULL ? r->stop_msg
                                     : al_strerror(r->parse_err));
    }
    return;
  }
  if (err != HPE_OK) {
    req_finish(r, AL_EHTTP, AL_HTTP_ERR_HTTP_PARSE,
               llhttp_get_error_reason(&r->parser),
               "malformed HTTP response from %s (%s)", r->url.host,
               llhttp_errno_name(err));
  }
}

static void req_on_bytes(al_http_request_t *r, const char *p, size_t n) {
  llhttp_errno_t err;

  if (!r->got_bytes) {
    /* The serialized request is kept only for the dead-connection retry,
     * which is impossible from the first response byte on. */
    r->got_bytes = true;
    al_free(r->wire);
    r->wire = NULL;
    r->wire_len = 0;
  }
  err = llhttp_execute(&r->parser, p, n);
  if (r->done) {
    return;
  }
  if (err == HPE_OK && !r->headers_done) {
    /* llhttp itself has no header limit: count the raw bytes too, so
     * padding and folded lines cannot grow the wait unbounded. */
    r->head_bytes += n;
    if (r->head_bytes > r->max_header_bytes) {
      r->stop_parse_err = true;
      r->parse_err = AL_ETOOBIG;
      r->parse_kind = AL_HTTP_ERR_TOO_BIG;
    }
  }
  req_after_parse(r, err, p + n);
}

static bool req_try_retry(al_http_request_t *r, int status) {
  int err;

  if (r->got_bytes || !r->reused || r->retried ||
      (status != AL_EOF && status != AL_ECONNRESET && status != AL_EPIPE &&
       status != UV_ECONNABORTED)) {
    return false;
  }
  /* The pooled connection was dead (the server closed it while idle and
   * we had not noticed yet): the request never reached a live server, so
   * sending it again on a fresh connection is safe. Once only. */
  if (r->conn != NULL) {
    conn_close(r->conn);
  }
  r->retried = true;
  r->client->stats.retries++;
  uv_timer_stop(&r->idle);
  err = conn_open(r);
  if (err != 0) {
    req_finish(r, err, AL_HTTP_ERR_NETWORK, NULL, "cannot reconnect: %s",
               al_strerror(err));
  }
  return true;
}

static void req_on_eof(al_http_request_t *r, int status) {
  if (req_try_retry(r, status)) {
    return;
  }
  if (status == AL_EOF && r->got_bytes) {
    /* Close-delimited bodies end here; llhttp_finish says whether the
     * message was complete. */
    llhttp_errno_t err = llhttp_finish(&r->parser);

    if (r->done) {
      return;
    }
    if (r->message_complete || r->err_truncated || r->stop_parse_err) {
      r->keep_alive = false;
      req_after_parse(r, HPE_OK, NULL);
      return;
    }
    (void)err;
    req_finish(r, AL_ETRUNCATED, AL_HTTP_ERR_NETWORK, NULL,
               "connection to %s closed before the response was complete",
               r->url.host);
    return;
  }
  req_finish(r, status, AL_HTTP_ERR_NETWORK, NULL,
             "connection to %s failed: %s", r->url.host, al_strerror(status));
}

static void req_on_conn_error(al_http_request_t *r, int status) {
  if (req_try_retry(r, status)) {
    return;
  }
  req_finish(r, status, AL_HTTP_ERR_NETWORK, NULL,
             "sending to %s failed: %s", r->url.host, al_strerror(status));
}

/* ---- requests: timers ------------------------------------------------------ */

/* A stall deadline has passed, but the loop may have been late (a loaded
 * machine, a stopped process): timers run before the poll, so bytes that
 * came meanwhile are still unread and would be judged absent. The verdict
 * waits for one poll pass (a 1 ms re-arm); a byte (or, for progress,
 * content) in it gives the next late deadline its own pass, and only a
 * deadline still passed after a pass that brought nothing is a stall.
 * Returns true while that pass is pending. */
static bool stall_grace(uv_timer_t *t, uv_timer_cb cb, bool *graced) {
  if (*graced) {
    return false;
  }
  *graced = true;
  uv_timer_start(t, cb, 1, 0);
  return true;
}

static void idle_timer_cb(uv_timer_t *t) {
  al_http_request_t *r = AL_CONTAINER_OF(t, al_http_request_t, idle);
  uint64_t elapsed = uv_now(r->client->loop) - r->last_rx;

  if (elapsed < (uint64_t)r->idle_timeout_ms) {
    uv_timer_start(t, idle_timer_cb,
                   (uint64_t)r->idle_timeout_ms - elapsed, 0);
    return;
  }
  if (stall_grace(t, idle_timer_cb, &r->idle_graced)) {
    return;
  }
  req_finish(r, AL_ESTALL, AL_HTTP_ERR_STALL_IDLE, NULL,
             "no data from %s for %" PRId64 " ms", r->url.host,
             r->idle_timeout_ms);
}

static void progress_timer_cb(uv_timer_t *t) {
  al_http_request_t *r = AL_CONTAINER_OF(t, al_http_request_t, progress);
  uint64_t elapsed = uv_now(r->client->loop) - r->last_progress;

  if (elapsed < (uint64_t)r->progress_timeout_ms) {
    uv_timer_start(t, progress_timer_cb,
                   (uint64_t)r->progress_timeout_ms - elapsed, 0);
    return;
  }
  if (stall_grace(t, progress_timer_cb, &r->progress_graced)) {
    return;
  }
  req_finish(r, AL_ESTALL, AL_HTTP_ERR_STALL_PROGRESS, NULL,
             "no content progress from %s for %" PRId64 " ms", r->url.host,
             r->progress_timeout_ms);
}

/* One timer for both time bounds: it fires at the earlier of the total
 * deadline and the end of the current rate window. */
static void watch_cb(uv_timer_t *t);

static void watch_arm(al_http_request_t *r) {
  uint64_t now = uv_now(r->client->loop);
  uint64_t due = UINT64_MAX;

  if (r->done) {
    return;
  }
  if (r->total_timeout_ms > 0) {
    due = r->started + (uint64_t)r->total_timeout_ms;
  }
  if (r->window_start != 0) {
    due = AL_MIN(due, r->window_start + (uint64_t)r->min_rate_window_ms);
  }
  if (due == UINT64_MAX) {
    return;
  }
  uv_timer_start(&r->watch, watch_cb, due > now ? due - now : 0, 0);
}

static void watch_cb(uv_timer_t *t) {
  al_http_request_t *r = AL_CONTAINER_OF(t, al_http_request_t, watch);
  uint64_t now = uv_now(r->client->loop);

  if (r->total_timeout_ms > 0 &&
      now - r->started >= (uint64_t)r->total_timeout_ms) {
    if (r->conn != NULL) {
      conn_close(r->conn);
    }
    req_finish(r, AL_ETIMEDOUT, AL_HTTP_ERR_TIMEOUT, NULL,
               "the exchange with %s exceeded the total time limit of "
               "%" PRId64 " ms", r->url.host, r->total_timeout_ms);
    return;
  }
  if (r->window_start != 0 &&
      now - r->window_start >= (uint64_t)r->min_rate_window_ms) {
    if (r->window_bytes < r->min_rate_bytes) {
      if (r->conn != NULL) {
        conn_close(r->conn);
      }
      req_finish(r, AL_ESTALL, AL_HTTP_ERR_TOO_SLOW, NULL,
                 "%s sent %" PRIu64 " bytes in %" PRId64
                 " ms, below the minimum of %zu",
                 r->url.host, r->window_bytes, r->min_rate_window_ms,
                 r->min_rate_bytes);
      return;
    }
    r->window_start = now;
    r->window_bytes = 0;
  }
  watch_arm(r);
}

/* ---- requests: sending ----------------------------------------------------- */

static void req_send(al_http_request_t *r) {
  int err;

  llhttp_init(&r->parser, HTTP_RESPONSE, &r->settings);
  r->parser.data = r;
  r->got_bytes = false;
  r->headers_done = false;
  r->head_bytes = 0;
  reset_headers(r);
  r->last_rx = uv_now(r->client->loop);
  r->idle_graced = false;
  if (r->idle_timeout_ms > 0) {
    uv_timer_start(&r->idle, idle_timer_cb, (uint64_t)r->idle_timeout_ms, 0);
  }
  err = conn_send(r->conn, r->wire, r->wire_len);
  if (err != 0) {
    req_on_conn_error(r, err);
  }
}

static void req_acquire(al_http_request_t *r) {
  al_http_client_t *c = r->client;
  conn_t *conn;
  int err;

  if (r->done) {
    return;
  }
  if (r->url.https && c->tls_state != TLS_READY) {
    if (c->tls_state == TLS_NONE) {
      tls_start_loading(c);
    }
    if (c->tls_state == TLS_LOADING) {
      al_list_insert_tail(&c->tls_waiters, &r->tls_node);
      return;
    }
    req_finish(r, AL_ETLS, AL_HTTP_ERR_TLS, NULL, "%s", c->tls_err);
    return;
  }
  conn = r->retried ? NULL : pool_take(c, r->key);
  if (conn != NULL) {
    conn->req = r;
    r->conn = conn;
    r->reused = true;
    c->stats.reuses++;
    req_send(r);
    return;
  }
  err = conn_open(r);
  if (err != 0) {
    req_finish(r, err, err == AL_ENOMEM ? AL_HTTP_ERR_NETWORK
                                        : AL_HTTP_ERR_TLS,
               NULL, "cannot open a connection to %s: %s", r->url.host,
               al_strerror(err));
  }
}

static void kick_cb(uv_timer_t *t) {
  req_acquire(AL_CONTAINER_OF(t, al_http_request_t, kick));
}

static bool header_is(const al_http_header_t *h, const char *name) {
  return h->name_len == strlen(name) &&
         strncasecmp(h->name, name, h->name_len) == 0;
}

static int build_wire(al_http_request_t *r, const al_http_request_options_t *o,
                      const char *method) {
  al_buf_t b;
  char hp[300];
  bool default_port = r->url.port == (r->url.https ? 443 : 80);
  bool v6 = strchr(r->url.host, ':') != NULL;
  bool has_ua = false;
  size_t i;
  int err = 0;

  if (default_port) {
    snprintf(hp, sizeof(hp), v6 ? "[%s]" : "%s", r->url.host);
  } else {
    al__transport_hostport(r->url.host, r->url.port, v6, hp, sizeof(hp));
  }
  if (o->body_len > ((size_t)1 << 30)) {
    return AL_ETOOBIG;
  }
  al_buf_init(&b, ((size_t)1 << 20) + o->body_len);
  if (r->use_proxy && !r->url.https) {
    /* Plain HTTP through a proxy: absolute-form target (RFC 9112 3.2.2). */
    err = al_buf_printf(&b, "%s http://%s%s HTTP/1.1\r\n", method, hp,
                        r->url.target);
  } else {
    err = al_buf_printf(&b, "%s %s HTTP/1.1\r\n", method, r->url.target);
  }
  err = err ? err : al_buf_printf(&b, "Host: %s\r\n", hp);
  for (i = 0; i < o->n_headers; i++) {
    if (header_is(&o->headers[i], "user-agent")) {
      has_ua = true;
    }
  }
  if (!has_ua && err == 0) {
    err = al_buf_printf(&b, "User-Agent: agentloop/%s\r\n",
                        AL_VERSION_STRING);
  }
  if (err == 0 && (o->body_len > 0 || strcmp(method, "POST") == 0 ||
                   strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0)) {
    err = al_buf_printf(&b, "Content-Length: %zu\r\n", o->body_len);
  }
  if (err == 0 && r->use_proxy && !r->url.https && r->proxy->userinfo) {
    char *auth = basic_auth(r->proxy->userinfo);

    if (auth == NULL) {
      err = AL_ENOMEM;
    } else {
      err = al_buf_printf(&b, "Proxy-Authorization: %s\r\n", auth);
      al_free(auth);
    }
  }
  for (i = 0; i < o->n_headers && err == 0; i++) {
    const al_http_header_t *h = &o->headers[i];

    /* We own the framing and the Host line. */
    if (header_is(h, "host") || header_is(h, "content-length") ||
        header_is(h, "transfer-encoding")) {
      continue;
    }
    err = al_buf_append(&b, h->name, h->name_len);
    err = err ? err : al_buf_append(&b, ": ", 2);
    err = err ? err : al_buf_append(&b, h->value, h->value_len);
    err = err ? err : al_buf_append(&b, "\r\n", 2);
  }
  err = err ? err : al_buf_append(&b, "\r\n", 2);
  if (err == 0 && o->body_len > 0) {
    err = al_buf_append(&b, o->body, o->body_len);
  }
  if (err != 0) {
    al_buf_free(&b);
    return err;
  }
  r->wire = b.data;
  r->wire_len = b.len;
  return 0;
}

static int validate(const al_http_request_options_t *o) {
  size_t i;

  if (o->on_complete == NULL || o->url == NULL ||
      (o->body == NULL && o->body_len > 0) ||
      (o->method != NULL && !is_token(o->method)) ||
      (o->headers == NULL && o->n_headers > 0)) {
    return AL_EINVAL;
  }
  for (i = 0; i < o->n_headers; i++) {
    const al_http_header_t *h = &o->headers[i];
    char name[256];

    if (h->name == NULL || h->name_len == 0 || h->name_len >= sizeof(name) ||
        (h->value == NULL && h->value_len > 0) ||
        has_crlf(h->value ? h->value : "", h->value_len)) {
      return AL_EINVAL;
    }
    memcpy(name, h->name, h->name_len);
    name[h->name_len] = '\0';
    if (!is_token(name)) {
      return AL_EINVAL;
    }
  }
  return 0;
}

int al_http_request_start(al_http_client_t *c,
                          const al_http_request_options_t *o,
                          al_http_request_t **out) {
  al_http_request_t *r;
  const char *method;
  char key[700];
  int err;

  *out = NULL;
  if (c->closing) {
    return AL_ECLOSING;
  }
  err = validate(o);
  if (err != 0) {
    return err;
  }
  method = o->method != NULL ? o->method : "GET";
  r = al_calloc(1, sizeof(*r));
  if (r == NULL) {
    return AL_ENOMEM;
  }
  r->client = c;
  al_list_init(&r->node);
  al_list_init(&r->tls_node);
  al_buf_init(&r->hdr, c->o.max_header_bytes);
  al_buf_init(&r->hdr_ix, 0);
  al_buf_init(&r->err_body, 0);
  err = al__transport_url_parse(o->url, false, &r->url);
  if (err != 0) {
    al_free(r);
    return err == AL_ENOMEM ? err : AL_EINVAL;
  }
  r->data = o->data;
  r->on_response = o->on_response;
  r->on_data = o->on_data;
  r->on_complete = o->on_complete;
  r->head = strcmp(method, "HEAD") == 0;
  r->connect_timeout_ms = pick(o->connect_timeout_ms, c->o.connect_timeout_ms);
  r->idle_timeout_ms = pick(o->idle_timeout_ms, c->o.idle_timeout_ms);
  r->progress_timeout_ms =
      pick(o->progress_timeout_ms, c->o.progress_timeout_ms);
  r->max_header_bytes =
      (size_t)pick(o->max_header_bytes, (int64_t)c->o.max_header_bytes);
  r->max_error_body_bytes = (size_t)pick(o->max_error_body_bytes,
                                         (int64_t)c->o.max_error_body_bytes);
  r->max_header_count =
      (size_t)pick(o->max_header_count, (int64_t)c->o.max_header_count);
  if (r->max_header_count == 0) {
    r->max_header_count = SIZE_MAX;
  }
  r->total_timeout_ms = pick(o->total_timeout_ms, c->o.total_timeout_ms);
  r->min_rate_bytes =
      (size_t)pick(o->min_rate_bytes, (int64_t)c->o.min_rate_bytes);
  r->min_rate_window_ms =
      pick(o->min_rate_window_ms, c->o.min_rate_window_ms);
  r->expect_sse = o->expect_event_stream;
  al_buf_init(&r->hdr, r->max_header_bytes);
  /* Each header costs at least two bytes of hdr, so this bounds the index
   * by the same limit. */
  al_buf_init(&r->hdr_ix, r->max_header_bytes / 2 * sizeof(hdr_idx_t) +
                              sizeof(hdr_idx_t));

  /* Proxy choice: loopback never (unless asked), then NO_PROXY. */
  r->proxy = r->url.https ? &c->https_proxy : &c->http_proxy;
  r->use_proxy = r->proxy->host != NULL &&
                 (c->o.proxy_loopback ||
                  !al__transport_is_loopback(r->url.host)) &&
                 !al__transport_no_proxy_match(c->no_proxy, r->url.host,
                                               r->url.port);
  snprintf(key, sizeof(key), "%s://%s:%u|%s:%u",
           r->url.https ? "https" : "http", r->url.host,
           (unsigned)r->url.port, r->use_proxy ? r->proxy->host : "-",
           r->use_proxy ? (unsigned)r->proxy->port : 0u);
  r->key = al_strdup(key);
  if (r->key == NULL) {
    err = AL_ENOMEM;
    goto out_free;
  }
  err = build_wire(r, o, method);
  if (err != 0) {
    goto out_free;
  }
  llhttp_settings_init(&r->settings);
  r->settings.on_header_field = hp_header_field;
  r->settings.on_header_value = hp_header_value;
  r->settings.on_header_field_complete = hp_field_complete;
  r->settings.on_header_value_complete = hp_value_complete;
  r->settings.on_headers_complete = hp_headers_complete;
  r->settings.on_body = hp_body;
  r->settings.on_message_complete = hp_message_complete;

  uv_timer_init(c->loop, &r->kick);
  uv_timer_init(c->loop, &r->idle);
  uv_timer_init(c->loop, &r->progress);
  uv_timer_init(c->loop, &r->watch);
  r->kick.data = r;
  r->idle.data = r;
  r->progress.data = r;
  r->watch.data = r;
  r->open_handles = 4;
  al_list_insert_tail(&c->requests, &r->node);
  c->n_requests++;
  r->started = uv_now(c->loop);
  watch_arm(r);
  /* Everything else happens from the loop: no callback can run inside
   * this call (STYLE 3.3.4). */
  uv_timer_start(&r->kick, kick_cb, 0, 0);
  *out = r;
  return 0;

out_free:
  al__transport_url_free(&r->url);
  al_free(r->key);
  al_free(r);
  return err;
}

void *al_http_request_get_data(const al_http_request_t *r) { return r->data; }

void al_http_request_set_data(al_http_request_t *r, void *data) {
  r->data = data;
}

void al_http_request_progress(al_http_request_t *r) {
  if (!r->done) {
    r->last_progress = uv_now(r->client->loop);
    r->progress_graced = false;
  }
}

void al_http_request_cancel(al_http_request_t *r) {
  if (r->done) {
    return;
  }
  r->cancelled = true;
  if (r->conn != NULL) {
    conn_close(r->conn);
  }
  req_retire(r);
}
