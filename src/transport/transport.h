/* Transport layer: an HTTP/1.1 client on libuv (SPEC §3).
 *
 * One al_http_client_t per loop owns the TLS configuration (CA chain,
 * CTR-DRBG, loaded once in libuv's threadpool on first TLS use) and a pool
 * of idle keep-alive connections per origin (scheme + host + port + proxy).
 * Each al_http_request_t resolves the host (uv_getaddrinfo), connects with a
 * timeout (addresses tried in order), optionally tunnels through an HTTP
 * proxy with CONNECT, runs TLS 1.2+ via mbedtls with SNI and hostname
 * verification, sends one request and parses the response with llhttp
 * (content-length, chunked, close-delimited).
 *
 * Contract, libuv style (STYLE §3.3):
 *  - A refused start returns the error and never calls back. An accepted
 *    request reports 0..n on_data callbacks after one on_response, then
 *    exactly one on_complete, always from a later loop iteration.
 *  - al_http_request_cancel(): after it returns nothing of that request
 *    fires. It may be called from inside any of the request's callbacks.
 *  - Every buffer is bounded: response headers (max_header_bytes and
 *    max_header_count), error bodies (max_error_body_bytes); going past a
 *    limit is AL_ETOOBIG. Time is bounded too: total_timeout_ms (kind
 *    timeout) and a minimum rate (kind too_slow), beside the idle and
 *    progress stall timers.
 *  - mbedtls error codes never leave this layer: TLS failures are AL_ETLS
 *    or AL_ECERT with the mbedtls text kept as err->detail.
 *  - The transport retries nothing, except one transparent retry on a
 *    fresh connection when a reused keep-alive connection turns out dead
 *    before any response byte arrived. Retry policy belongs to the loop. */
#ifndef AL_TRANSPORT_H
#define AL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agentloop/errno.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct al_http_client_s al_http_client_t;
typedef struct al_http_request_s al_http_request_t;

/* ---- headers ------------------------------------------------------------- */

/* A header as a pair of slices. In callbacks the slices point into the
 * request's own buffers (valid only during the callback) and are also
 * NUL-terminated. */
typedef struct al_http_header_s {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} al_http_header_t;

typedef struct al_http_headers_s {
  const al_http_header_t *v;
  size_t n;
} al_http_headers_t;

/* The first header whose name equals `name` (ASCII case-insensitive), or
 * NULL. */
const al_http_header_t *al_http_headers_get(const al_http_headers_t *h,
                                            const char *name);

/* ---- errors -------------------------------------------------------------- */

/* XX(UPPER, "name"). The classification a retry policy keys on. */
#define AL_HTTP_ERROR_KIND_MAP(XX)                                          \
  XX(NONE, "none")                       /* success */                      \
  XX(AUTHENTICATION, "authentication")   /* 401 */                          \
  XX(PERMISSION, "permission")           /* 403 */                          \
  XX(NOT_FOUND, "not_found")             /* 404 */                          \
  XX(INVALID_REQUEST, "invalid_request") /* 400 409 413 422, other 4xx */   \
  XX(RATE_LIMIT, "rate_limit")           /* 429 */                          \
  XX(OVERLOADED, "overloaded")           /* 529 */                          \
  XX(API_ERROR, "api_error")             /* other 5xx, unexpected status */ \
  XX(TIMEOUT, "timeout")                 /* 408 504, connect timeout */     \
  XX(NETWORK, "network")                 /* DNS, refused, reset, EOF */     \
  XX(TLS, "tls")                         /* handshake, certificate */       \
  XX(STALL_IDLE, "stall_idle")           /* no byte for idle_timeout */     \
  XX(STALL_PROGRESS, "stall_progress")   /* no content progress */          \
  XX(PROXY, "proxy")                     /* proxy refused CONNECT */        \
  XX(HTTP_PARSE, "http_parse")           /* malformed response */           \
  XX(TOO_BIG, "too_big")                 /* a size limit was exceeded */    \
  XX(TOO_SLOW, "too_slow")               /* below the minimum rate */       \
  XX(UNEXPECTED_BODY, "unexpected_body") /* 2xx but not an event stream */  \
  XX(CANCELLED, "cancelled")             /* client closed under it */

typedef enum {
#define AL_HTTP_KIND_GEN(u, s) AL_HTTP_ERR_##u,
  AL_HTTP_ERROR_KIND_MAP(AL_HTTP_KIND_GEN)
#undef AL_HTTP_KIND_GEN
      AL_HTTP_ERR_KIND_COUNT_
} al_http_error_kind_t;

/* "rate_limit", ...; never NULL. */
const char *al_http_error_kind_name(al_http_error_kind_t k);

/* What on_complete gets when status != 0. Borrowed: every pointer is valid
 * only during on_complete; copy what you keep. Strings are NUL-terminated;
 * optional ones are NULL when absent. */
typedef struct al_http_error_s {
  al_http_error_kind_t kind;
  int code;          /* the same negative code as on_complete's status */
  int http_status;   /* 0 when no response status was received */
  const char *message; /* human text; never NULL */
  const char *detail;  /* e.g. mbedtls_strerror text, or NULL */
  const char *body;    /* raw error body (non-2xx), possibly truncated */
  size_t body_len;
  bool body_truncated;
  const char *api_type;    /* provider error type from the JSON body */
  const char *api_message; /* provider error message */
  const char *api_code;    /* OpenAI "code" (string or number as text) */
  const char *request_id;  /* request-id or x-request-id header */
  int64_t retry_after_ms;  /* retry-after-ms, else retry-after; -1 absent */
  int should_retry;        /* x-should-retry: 1 true, 0 false, -1 absent */
} al_http_error_t;

/* Classification of an HTTP status (>= 300) as above. */
al_http_error_kind_t al_http_status_kind(int http_status);

/* Parses the retry headers: `retry_after_ms` (a number of ms, may have a
 * fraction) wins, else `retry_after` as delta-seconds or an HTTP-date
 * relative to `now` (unix seconds). NULL means the header is absent.
 * Returns the delay in ms (>= 0), or -1 if absent or unparseable. */
int64_t al_http_parse_retry_after(const char *retry_after_ms,
                                  const char *retry_after, int64_t now);

/* 0 when url can be a model endpoint's base URL; else AL_EINVAL with the
 * reason in why ("no host", "the port must be a number 1..65535"). */
int al_http_url_check(const char *url, char *why, size_t len);

/* ---- client -------------------------------------------------------------- */

typedef struct al_http_client_options_s {
  /* CA bundle. NULL: $SSL_CERT_FILE, else
   * /etc/ssl/certs/ca-certificates.crt. ca_dir NULL: $SSL_CERT_DIR if set
   * (optional, added to the file's certificates). */
  const char *ca_file;
  const char *ca_dir;
  /* Proxies. proxy_from_env (default true) reads https_proxy/HTTPS_PROXY,
   * http_proxy (HTTP_PROXY too unless REQUEST_METHOD is set), ALL_PROXY /
   * all_proxy and no_proxy/NO_PROXY (lowercase wins) for any field left
   * NULL here. An empty string means "no proxy". */
  bool proxy_from_env;
  const char *https_proxy; /* "http://[user:pass@]host:port" */
  const char *http_proxy;
  const char *no_proxy; /* "*" or comma list of hosts / domain suffixes */
  /* Loopback hosts never go through a proxy unless this is set (tests). */
  bool proxy_loopback;
  /* Defaults for requests that leave theirs at -1. */
  int64_t connect_timeout_ms;  /* 10000 */
  int64_t idle_timeout_ms;     /* 30000; 0 disables */
  int64_t progress_timeout_ms; /* 120000; 0 disables */
  size_t max_header_bytes;     /* 64 KiB */
  size_t max_error_body_bytes; /* 64 KiB */
  size_t max_header_count;     /* 256 headers */
  /* Whole exchange, from the start to the last body byte; 0 disables. A
   * slowloris server cannot hold a request longer than this. */
  int64_t total_timeout_ms;    /* 1800000 (30 min) */
  /* Minimum transfer rate once the first response byte arrived: fewer than
   * min_rate_bytes in any min_rate_window_ms is kind too_slow (one byte a
   * second resets the idle timer for ever; this does not). 0 disables. */
  size_t min_rate_bytes;       /* 128 */
  int64_t min_rate_window_ms;  /* 60000 */
  /* Pool: idle connections kept per origin and for how long. */
  size_t pool_max_idle_per_origin; /* 4; 0 disables keep-alive reuse */
  int64_t pool_idle_timeout_ms;    /* 30000 */
} al_http_client_options_t;

void al_http_client_options_init(al_http_client_options_t *o);

/* Creates a client on `loop`. opts may be NULL (defaults). Copies every
 * string. Does no file I/O: the CA bundle is loaded in the threadpool on
 * first TLS use. Errors: AL_ENOMEM, AL_EINVAL (bad proxy URL). */
int al_http_client_new(uv_loop_t *loop, const al_http_client_options_t *opts,
                       al_http_client_t **out);

/* Closes the client: requests still running complete with AL_ECANCELED
 * (kind cancelled) on a later iteration, pooled connections close, then
 * cb runs (may be NULL) and the client is freed. Call once. */
void al_http_client_close(al_http_client_t *c,
                          void (*cb)(al_http_client_t *c));

/* The owner's pointer (for the close callback). */
void al_http_client_set_data(al_http_client_t *c, void *data);
void *al_http_client_get_data(const al_http_client_t *c);

/* Test/diagnostic counters. */
typedef struct al_http_client_stats_s {
  uint64_t connects;      /* TCP connections established */
  uint64_t reuses;        /* requests sent on a pooled connection */
  uint64_t retries;       /* transparent dead-connection retries */
  size_t idle_conns;      /* connections in the pool now */
} al_http_client_stats_t;
void al_http_client_stats(const al_http_client_t *c,
                          al_http_client_stats_t *out);

/* ---- request ------------------------------------------------------------- */

/* Called once per final response (status >= 200) with its headers, before
 * any on_data. For non-2xx the body is not streamed; on_complete gets it. */
typedef void (*al_http_request_response_cb)(al_http_request_t *r,
                                            int status_code,
                                            const al_http_headers_t *h);
/* A decoded piece of a 2xx body as it arrives (borrowed slice). */
typedef void (*al_http_request_data_cb)(al_http_request_t *r, const char *p,
                                        size_t n);
/* Exactly once at the end: status 0 on success, else a negative AL_E* or
 * UV_E* code with err describing it (err is NULL on success). The request
 * is freed after this returns; do not use it afterwards. */
typedef void (*al_http_request_complete_cb)(al_http_request_t *r, int status,
                                            const al_http_error_t *err);

typedef struct al_http_request_options_s {
  const char *method; /* default "GET" */
  const char *url;    /* http:// or https://; [v6] literals ok; required */
  const al_http_header_t *headers; /* extra headers, copied */
  size_t n_headers;
  const void *body; /* copied; may be NULL */
  size_t body_len;
  /* -1 takes the client's default. */
  int64_t connect_timeout_ms;  /* DNS + connect + proxy + TLS handshake */
  int64_t idle_timeout_ms;     /* bytes idle stall; 0 disables */
  int64_t progress_timeout_ms; /* content progress stall; 0 disables */
  int64_t max_header_bytes;
  int64_t max_error_body_bytes;
  int64_t max_header_count;
  int64_t total_timeout_ms;
  int64_t min_rate_bytes;
  int64_t min_rate_window_ms;
  /* A 2xx must be an event stream: a Content-Encoding other than identity
   * or a Content-Type other than text/event-stream (or application/json,
   * which the decoders report on) ends the request with kind
   * unexpected_body, naming what came instead (a login page, a gzip
   * body). No Content-Type at all is let through. */
  bool expect_event_stream;
  al_http_request_response_cb on_response; /* optional */
  al_http_request_data_cb on_data;         /* optional */
  al_http_request_complete_cb on_complete; /* required */
  void *data;                              /* copied to r->data */
} al_http_request_options_t;

void al_http_request_options_init(al_http_request_options_t *o);

/* Starts a request. On success *out is the request and callbacks follow on
 * later iterations; *out stays valid until on_complete returns or
 * al_http_request_cancel() returns, whichever comes first. Errors (nothing fires): AL_EINVAL (bad URL, method,
 * header with CR/LF, missing on_complete), AL_ECLOSING (client closing),
 * AL_ENOMEM. */
int al_http_request_start(al_http_client_t *c,
                          const al_http_request_options_t *o,
                          al_http_request_t **out);

/* The caller's data pointer (from the options); settable. */
void *al_http_request_get_data(const al_http_request_t *r);
void al_http_request_set_data(al_http_request_t *r, void *data);

/* Content progress (a delta, a block start or stop): resets the progress
 * stall timer. Any received byte resets the idle timer by itself. */
void al_http_request_progress(al_http_request_t *r);

/* Cancels: closes the connection at once; after it returns no callback of
 * this request fires. Safe from inside the request's own callbacks; a
 * no-op once on_complete has started. Memory is freed when the uv close
 * callbacks run. */
void al_http_request_cancel(al_http_request_t *r);

#ifdef __cplusplus
}
#endif
#endif
