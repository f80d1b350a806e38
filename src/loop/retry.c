/* Retry policy: classification tables, full-jitter backoff, the fallback
 * and max_tokens continuation counters. See retry.h for the decisions.
 *
 * Everything here is a pure function of its arguments and the small state
 * struct, so the loop can be tested without a clock or a server and every
 * test replays the same delays from the same seed. */
#include "loop/retry.h"

#include <string.h>

#include <jansson.h>

#include "common/common.h"

#define SPEND_CAP_CODE "enforced_spend_limit_reached"

const char *al__retry_class_name(al_retry_class_t c) {
  static const char *const names[] = {
#define AL_RETRY_CLASS_GEN(u, s) s,
      AL_RETRY_CLASS_MAP(AL_RETRY_CLASS_GEN)
#undef AL_RETRY_CLASS_GEN
  };
  if ((unsigned)c >= AL_ARRAY_SIZE(names)) {
    return "unknown";
  }
  return names[c];
}

/* ---- classification ------------------------------------------------------ */

typedef struct rule_s {
  al_retry_class_t cls;
  bool retryable;
  const char *reason;
} rule_t;

/* The status rule, by transport kind. The SDKs retry 408, 409, 429, every
 * 5xx and connection errors; stalls are ours (SPEC §3, §6). TLS, proxy and
 * size-limit failures are configuration or limits that a retry cannot
 * change; a malformed response is treated like a decode error. */
static const rule_t kind_rules[AL_HTTP_ERR_KIND_COUNT_] = {
    [AL_HTTP_ERR_NONE] = {AL_RETRY_CLASS_NONE, false, "no error"},
    [AL_HTTP_ERR_AUTHENTICATION] = {AL_RETRY_CLASS_AUTH, false,
                                    "authentication failed"},
    [AL_HTTP_ERR_PERMISSION] = {AL_RETRY_CLASS_AUTH, false,
                                "permission denied"},
    [AL_HTTP_ERR_NOT_FOUND] = {AL_RETRY_CLASS_NOT_FOUND, false, "not found"},
    [AL_HTTP_ERR_INVALID_REQUEST] = {AL_RETRY_CLASS_CLIENT, false,
                                     "invalid request"},
    [AL_HTTP_ERR_RATE_LIMIT] = {AL_RETRY_CLASS_RATE_LIMIT, true,
                                "rate limited"},
    [AL_HTTP_ERR_OVERLOADED] = {AL_RETRY_CLASS_OVERLOADED, true,
                                "overloaded"},
    [AL_HTTP_ERR_API_ERROR] = {AL_RETRY_CLASS_SERVER, true, "server error"},
    [AL_HTTP_ERR_TIMEOUT] = {AL_RETRY_CLASS_TIMEOUT, true, "timeout"},
    [AL_HTTP_ERR_NETWORK] = {AL_RETRY_CLASS_NETWORK, true, "network error"},
    [AL_HTTP_ERR_TLS] = {AL_RETRY_CLASS_LOCAL, false, "tls failure"},
    [AL_HTTP_ERR_STALL_IDLE] = {AL_RETRY_CLASS_STALL, true, "stream idle"},
    [AL_HTTP_ERR_STALL_PROGRESS] = {AL_RETRY_CLASS_STALL, true,
                                    "stream made no progress"},
    [AL_HTTP_ERR_PROXY] = {AL_RETRY_CLASS_LOCAL, false, "proxy refused"},
    [AL_HTTP_ERR_HTTP_PARSE] = {AL_RETRY_CLASS_DECODE, false,
                                "malformed response"},
    [AL_HTTP_ERR_TOO_BIG] = {AL_RETRY_CLASS_LOCAL, false,
                             "size limit exceeded"},
    [AL_HTTP_ERR_TOO_SLOW] = {AL_RETRY_CLASS_STALL, true,
                              "server below the minimum transfer rate"},
    /* A 2xx that is not an event stream (an HTML login page, a gzip body
     * we never asked for): the same request gets the same answer. */
    [AL_HTTP_ERR_UNEXPECTED_BODY] = {AL_RETRY_CLASS_LOCAL, false,
                                     "unexpected response body"},
    [AL_HTTP_ERR_CANCELLED] = {AL_RETRY_CLASS_CANCELLED, false, "cancelled"},
};

/* Error types inside a 200 stream (Anthropic `error` event, OpenAI error
 * payload). The SDKs retry none of these; SPEC §6 retries the transient
 * ones, since the request itself was fine. */
static const struct {
  const char *type;
  rule_t rule;
} stream_rules[] = {
    {"overloaded_error", {AL_RETRY_CLASS_OVERLOADED, true, "overloaded"}},
    {"api_error", {AL_RETRY_CLASS_SERVER, true, "server error"}},
    {"server_error", {AL_RETRY_CLASS_SERVER, true, "server error"}},
    {"rate_limit_error", {AL_RETRY_CLASS_RATE_LIMIT, true, "rate limited"}},
    {"timeout_error", {AL_RETRY_CLASS_TIMEOUT, true, "timeout"}},
    {"invalid_request_error",
     {AL_RETRY_CLASS_CLIENT, false, "invalid request"}},
    {"request_too_large", {AL_RETRY_CLASS_CLIENT, false, "request too large"}},
    {"billing_error", {AL_RETRY_CLASS_CLIENT, false, "billing error"}},
    {"authentication_error",
     {AL_RETRY_CLASS_AUTH, false, "authentication failed"}},
    {"permission_error", {AL_RETRY_CLASS_AUTH, false, "permission denied"}},
    {"not_found_error", {AL_RETRY_CLASS_NOT_FOUND, false, "not found"}},
};

static void set_rule(al_retry_err_t *out, const rule_t *r) {
  out->cls = r->cls;
  out->retryable = r->retryable;
  out->reason = r->reason;
}

void al__retry_classify(al_http_error_kind_t kind, int http_status,
                        int should_retry, const char *api_type,
                        bool spend_cap, int64_t retry_after_ms,
                        al_retry_err_t *out) {
  static const rule_t conflict = {AL_RETRY_CLASS_CONFLICT, true, "conflict"};
  static const rule_t unexpected = {AL_RETRY_CLASS_CLIENT, false,
                                    "unexpected status"};
  static const rule_t overloaded = {AL_RETRY_CLASS_OVERLOADED, true,
                                    "overloaded"};
  static const rule_t unknown = {AL_RETRY_CLASS_UNKNOWN, false,
                                 "unknown error"};

  out->retry_after_ms = retry_after_ms;
  if ((unsigned)kind >= AL_HTTP_ERR_KIND_COUNT_) {
    set_rule(out, &unknown);
    return;
  }
  set_rule(out, &kind_rules[kind]);
  /* The transport folds 409 into invalid_request; the SDKs retry it. */
  if (http_status == 409) {
    set_rule(out, &conflict);
  }
  /* "Unexpected status" is api_error too; the SDKs retry only >= 500. */
  if (kind == AL_HTTP_ERR_API_ERROR && http_status > 0 &&
      http_status < 500) {
    set_rule(out, &unexpected);
  }
  /* A gateway may send overloaded_error with a plain 5xx status; it must
   * still count towards the fallback. */
  if (api_type != NULL && strcmp(api_type, "overloaded_error") == 0 &&
      (kind == AL_HTTP_ERR_API_ERROR || kind == AL_HTTP_ERR_OVERLOADED)) {
    set_rule(out, &overloaded);
  }
  if (kind == AL_HTTP_ERR_CANCELLED) {
    return; /* the user asked to stop; no header overrides that */
  }
  if (spend_cap) {
    /* The cap holds until the month ends; no header makes a retry
     * useful (PROTOCOLS §2.6). */
    out->cls = AL_RETRY_CLASS_SPEND_CAP;
    out->retryable = false;
    out->reason = "monthly spend cap reached";
    return;
  }
  if (should_retry == 1 && !out->retryable) {
    out->retryable = true;
    out->reason = "x-should-retry: true";
  } else if (should_retry == 0 && out->retryable) {
    out->retryable = false;
    out->reason = "x-should-retry: false";
  }
}

static bool is_spend_code(json_t *v) {
  return json_is_string(v) && strcmp(json_string_value(v), SPEND_CAP_CODE) == 0;
}

bool al__retry_is_spend_cap(const char *body, size_t body_len,
                            const char *api_code) {
  json_t *root;
  json_t *err;
  bool hit = false;

  if (api_code != NULL && strcmp(api_code, SPEND_CAP_CODE) == 0) {
    return true;
  }
  if (body == NULL || body_len == 0) {
    return false;
  }
  root = json_loadb(body, body_len, 0, NULL);
  if (root == NULL) {
    /* Truncated at the transport's limit: the token is distinctive
     * enough that finding it anywhere is the better guess. */
    return memmem(body, body_len, SPEND_CAP_CODE,
                  sizeof(SPEND_CAP_CODE) - 1) != NULL;
  }
  err = json_object_get(root, "error");
  if (json_is_object(err)) {
    hit = is_spend_code(json_object_get(json_object_get(err, "details"),
                                        "error_code")) ||
          is_spend_code(json_object_get(err, "code"));
  }
  json_decref(root);
  return hit;
}

void al__retry_classify_http(const al_http_error_t *e, al_retry_err_t *out) {
  bool cap = false;

  /* Only a 429 can be the spend cap; a 400 for a limit the user set is
   * already not retried. */
  if (e->kind == AL_HTTP_ERR_RATE_LIMIT || e->http_status == 429) {
    cap = al__retry_is_spend_cap(e->body, e->body_len, e->api_code);
  }
  al__retry_classify(e->kind, e->http_status, e->should_retry, e->api_type,
                     cap, e->retry_after_ms, out);
}

void al__retry_classify_perr(al_perr_kind_t kind, const char *error_type,
                             al_retry_err_t *out) {
  static const rule_t decode = {AL_RETRY_CLASS_DECODE, false,
                                "stream could not be decoded"};
  static const rule_t unknown = {AL_RETRY_CLASS_UNKNOWN, false,
                                 "unknown error"};
  size_t i;

  static const rule_t limit = {AL_RETRY_CLASS_LOCAL, false,
                               "a limit of this run was reached"};

  out->retry_after_ms = -1;
  if (kind == AL_PERR_DECODE && error_type != NULL &&
      (strcmp(error_type, "reply_too_large") == 0 ||
       strcmp(error_type, "tool_input_too_large") == 0)) {
    /* Our own bound, not a stream we could not read. */
    set_rule(out, &limit);
    return;
  }
  if (kind == AL_PERR_DECODE) {
    set_rule(out, &decode);
    return;
  }
  set_rule(out, &unknown);
  if (kind != AL_PERR_STREAM_EVENT || error_type == NULL) {
    return;
  }
  for (i = 0; i < AL_ARRAY_SIZE(stream_rules); i++) {
    if (strcmp(stream_rules[i].type, error_type) == 0) {
      set_rule(out, &stream_rules[i].rule);
      return;
    }
  }
}

/* ---- RNG ----------------------------------------------------------------- */

void al__retry_rng_seed(al_retry_rng_t *r, uint64_t seed) { r->s = seed; }

uint64_t al__retry_rng_next(al_retry_rng_t *r) {
  uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

uint64_t al__retry_rng_upto(al_retry_rng_t *r, uint64_t max) {
  uint64_t x = al__retry_rng_next(r);
  if (max == UINT64_MAX) {
    return x;
  }
  return x % (max + 1);
}

/* ---- policy -------------------------------------------------------------- */

void al__retry_options_init(al_retry_options_t *o) {
  o->max_attempts = 4;
  o->base_ms = 1000;
  o->cap_ms = 32000;
  o->retry_after_max_ms = 600000;
  o->fallback_after = 3;
  o->has_fallback_model = false;
  o->max_continuations = 3;
}

void al__retry_state_init(al_retry_state_t *s) {
  s->attempt = 0;
  s->overloaded = 0;
  s->fallback_used = false;
  s->continuations = 0;
}

void al__retry_request_start(al_retry_state_t *s) { s->attempt = 1; }

void al__retry_on_success(al_retry_state_t *s) { s->overloaded = 0; }

int64_t al__retry_backoff(const al_retry_options_t *o, int k,
                          al_retry_rng_t *rng) {
  int64_t bound = o->cap_ms;
  int shift = k < 1 ? 0 : k - 1;

  if (o->base_ms <= 0 || bound <= 0) {
    return 0;
  }
  /* base * 2^shift without overflow: stop doubling once past the cap. */
  if (o->base_ms < bound) {
    int64_t b = o->base_ms;
    while (shift-- > 0 && b < bound) {
      b = b > bound / 2 ? bound : b * 2;
    }
    bound = AL_MIN(b, bound);
  }
  return (int64_t)al__retry_rng_upto(rng, (uint64_t)bound);
}

static void give_up(al_retry_decision_t *out, const char *reason) {
  out->retry = false;
  out->delay_ms = 0;
  out->reason = reason;
}

void al__retry_decide(al_retry_state_t *s, const al_retry_options_t *o,
                      const al_retry_err_t *err, al_retry_rng_t *rng,
                      int64_t now_ms, al_retry_decision_t *out) {
  int failed = s->attempt < 1 ? 1 : s->attempt;

  memset(out, 0, sizeof(*out));
  out->cls = err->cls;
  out->max_attempts = o->max_attempts;
  out->attempt = failed;
  out->retry_at_ms = now_ms;

  if (err->cls == AL_RETRY_CLASS_OVERLOADED) {
    s->overloaded++;
    /* Switching model is a new request, so it is tried even when this
     * one said x-should-retry: false or ran out of attempts. */
    if (o->has_fallback_model && !s->fallback_used &&
        o->fallback_after > 0 && s->overloaded >= o->fallback_after) {
      s->fallback_used = true;
      s->overloaded = 0;
      s->attempt = 1;
      out->retry = true;
      out->fallback = true;
      out->attempt = 1;
      out->reason = "switching to fallback model after repeated overload";
      return;
    }
  }
  if (!err->retryable) {
    give_up(out, err->reason != NULL ? err->reason : "not retryable");
    return;
  }
  if (failed >= o->max_attempts) {
    give_up(out, "retry attempts exhausted");
    return;
  }
  if (err->retry_after_ms > o->retry_after_max_ms) {
    give_up(out, "retry-after longer than the allowed maximum");
    out->retry_after_ms = err->retry_after_ms;
    out->retry_after_max_ms = o->retry_after_max_ms;
    return;
  }
  if (err->retry_after_ms > 0) {
    out->delay_ms = err->retry_after_ms;
  } else {
    out->delay_ms = al__retry_backoff(o, failed, rng);
  }
  s->attempt = failed + 1;
  out->retry = true;
  out->attempt = s->attempt;
  out->retry_at_ms = now_ms + out->delay_ms;
  out->reason = err->reason != NULL ? err->reason : "retryable";
}

bool al__retry_continuation_take(al_retry_state_t *s,
                                 const al_retry_options_t *o) {
  if (s->continuations >= o->max_continuations) {
    return false;
  }
  s->continuations++;
  return true;
}

void al__retry_continuation_reset(al_retry_state_t *s) {
  s->continuations = 0;
}
