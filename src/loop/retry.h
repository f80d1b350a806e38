/* Retry policy for model requests (SPEC §6 "Retries", PROTOCOLS §2.6, §3.4).
 *
 * Pure: no uv handles, no clock reads, no global RNG. The loop owns one
 * al_retry_state_t per run, classifies every failed attempt, asks
 * al__retry_decide() what to do, and arms its own timer for the answer.
 * Time comes in as a parameter and jitter from a seeded al_retry_rng_t, so
 * tests replay every decision exactly (STYLE §3.6).
 *
 * Decisions recorded here (the seeds leave them open):
 *  - max_attempts counts tries of one request, the first included: the
 *    default 4 means 3 retries. Attempt counting restarts per request.
 *  - Backoff before retry k (k = 1 for the first retry) is full jitter:
 *    uniform in [0, min(cap_ms, base_ms * 2^(k-1))].
 *  - A retry-after in (0, retry_after_max_ms] is used exactly, without
 *    jitter, as the SDKs do: the server said earlier retries fail, and its
 *    value already spreads clients. 0 or absent: the jittered backoff.
 *    Longer than retry_after_max_ms (default 10 min): give up at once, since
 *    a retry before that time is documented to fail and a run should not
 *    sit silent for longer.
 *  - x-should-retry overrides the status rule both ways, except that a
 *    cancelled request and the monthly spend cap (429 with
 *    error.details.error_code "enforced_spend_limit_reached") never retry.
 *  - Fallback: after fallback_after (default 3, Claude Code's limit of
 *    consecutive 529s) overloaded errors since the last success, switch to
 *    the fallback model once, with no delay and a fresh attempt count. */
#ifndef AL_LOOP_RETRY_H
#define AL_LOOP_RETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "provider/provider.h"
#include "transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* XX(UPPER, "name"): what kind of failure an attempt had. */
#define AL_RETRY_CLASS_MAP(XX)                                           \
  XX(NONE, "none")             /* not a failure */                      \
  XX(RATE_LIMIT, "rate_limit") /* 429, rate_limit_error */              \
  XX(OVERLOADED, "overloaded") /* 529, overloaded_error (counts to fb) */ \
  XX(SERVER, "server")         /* other 5xx, api_error */               \
  XX(TIMEOUT, "timeout")       /* 408, 504, connect timeout */          \
  XX(CONFLICT, "conflict")     /* 409: the SDKs retry it */             \
  XX(NETWORK, "network")       /* DNS, refused, reset, EOF */           \
  XX(STALL, "stall")           /* idle or progress stall */             \
  XX(CLIENT, "client")         /* 400 413 422, other 4xx */             \
  XX(AUTH, "auth")             /* 401 403 */                            \
  XX(NOT_FOUND, "not_found")   /* 404 */                                \
  XX(SPEND_CAP, "spend_cap")   /* 429 monthly spend cap */              \
  XX(DECODE, "decode")         /* undecodable stream or response */     \
  XX(LOCAL, "local")           /* tls, proxy, too_big: config/limits */ \
  XX(UNKNOWN, "unknown")       /* unrecognised in-stream error type */  \
  XX(CANCELLED, "cancelled")   /* the client cancelled */

typedef enum {
#define AL_RETRY_CLASS_GEN(u, s) AL_RETRY_CLASS_##u,
  AL_RETRY_CLASS_MAP(AL_RETRY_CLASS_GEN)
#undef AL_RETRY_CLASS_GEN
      AL_RETRY_CLASS_COUNT_
} al_retry_class_t;

/* "rate_limit", ...; never NULL. */
const char *al__retry_class_name(al_retry_class_t c);

/* One classified failure. reason is a static string. */
typedef struct al_retry_err_s {
  al_retry_class_t cls;
  bool retryable;
  int64_t retry_after_ms; /* -1 when absent */
  const char *reason;
} al_retry_err_t;

/* A non-2xx response or a transport failure. Uses kind, http_status,
 * should_retry, api_type, api_code, body and retry_after_ms. */
void al__retry_classify_http(const al_http_error_t *e, al_retry_err_t *out);

/* The same from parts: the status rule by kind (http_status refines 408,
 * 409 and unexpected non-5xx), then api_type ("overloaded_error" on a 5xx
 * counts as overloaded), then spend_cap, then should_retry (1, 0, -1). */
void al__retry_classify(al_http_error_kind_t kind, int http_status,
                        int should_retry, const char *api_type,
                        bool spend_cap, int64_t retry_after_ms,
                        al_retry_err_t *out);

/* A provider failure: AL_PERR_DECODE is never retried; AL_PERR_STREAM_EVENT
 * (an error event inside a 200 stream) is classified by error_type:
 * overloaded_error, api_error, server_error, rate_limit_error,
 * timeout_error retry; everything else does not. AL_PERR_HTTP is for
 * al__retry_classify_http and is classified here as UNKNOWN. */
void al__retry_classify_perr(al_perr_kind_t kind, const char *error_type,
                             al_retry_err_t *out);

/* Whether an error body (or OpenAI api_code) is the monthly spend cap:
 * error.details.error_code (or error.code) = "enforced_spend_limit_reached".
 * A truncated body that cannot be parsed is searched for the token. */
bool al__retry_is_spend_cap(const char *body, size_t body_len,
                            const char *api_code);

/* ---- seeded RNG ---------------------------------------------------------- */

/* splitmix64: one word of state, any seed (0 included) is fine. */
typedef struct al_retry_rng_s {
  uint64_t s;
} al_retry_rng_t;

void al__retry_rng_seed(al_retry_rng_t *r, uint64_t seed);
uint64_t al__retry_rng_next(al_retry_rng_t *r);
/* Uniform in [0, max] (inclusive); bias is below max / 2^64. */
uint64_t al__retry_rng_upto(al_retry_rng_t *r, uint64_t max);

/* ---- policy -------------------------------------------------------------- */

typedef struct al_retry_options_s {
  int max_attempts;           /* 4: tries per request, first included */
  int64_t base_ms;            /* 1000 */
  int64_t cap_ms;             /* 32000 */
  int64_t retry_after_max_ms; /* 600000; longer retry-after gives up */
  int fallback_after;         /* 3 overloaded errors; 0 disables fallback */
  bool has_fallback_model;    /* false: fallback never triggers */
  int max_continuations;      /* 3 max_tokens continuations */
} al_retry_options_t;

void al__retry_options_init(al_retry_options_t *o);

typedef struct al_retry_state_s {
  int attempt;           /* tries made of the current request */
  int overloaded;        /* overloaded errors since the last success */
  bool fallback_used;    /* the fallback model is in use */
  int continuations;     /* max_tokens continuations so far */
} al_retry_state_t;

void al__retry_state_init(al_retry_state_t *s);

/* A new request is about to be sent (first try): attempt becomes 1. */
void al__retry_request_start(al_retry_state_t *s);

/* A request succeeded: the overloaded count restarts. */
void al__retry_on_success(al_retry_state_t *s);

typedef struct al_retry_decision_s {
  bool retry;
  /* Switch to the fallback model now (emit model_fallback). Implies retry,
   * with delay 0 and the attempt count restarted on the new model. */
  bool fallback;
  int64_t delay_ms;
  int64_t retry_at_ms;   /* now_ms + delay_ms */
  int attempt;           /* the try about to be made (2.., or 1 on fallback) */
  int max_attempts;
  al_retry_class_t cls;
  const char *reason;    /* static: why we retry or give up */
  /* Giving up on a retry-after above the maximum: the server's wait and
   * the maximum (0 otherwise), for the message that names them. */
  int64_t retry_after_ms;
  int64_t retry_after_max_ms;
} al_retry_decision_t;

/* Decides after the current try (s->attempt) failed with `err`. Updates s
 * (attempt, overloaded count, fallback_used). Never fails. */
void al__retry_decide(al_retry_state_t *s, const al_retry_options_t *o,
                      const al_retry_err_t *err, al_retry_rng_t *rng,
                      int64_t now_ms, al_retry_decision_t *out);

/* The jittered backoff before retry k (k >= 1). */
int64_t al__retry_backoff(const al_retry_options_t *o, int k,
                          al_retry_rng_t *rng);

/* A reply ended in max_tokens with an incomplete tool_use: true (and
 * counted) if one more continuation is allowed. */
bool al__retry_continuation_take(al_retry_state_t *s,
                                 const al_retry_options_t *o);
/* A reply ended normally: the continuation count restarts. */
void al__retry_continuation_reset(al_retry_state_t *s);

#ifdef __cplusplus
}
#endif

#endif
