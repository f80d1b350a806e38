/* Tests of the retry policy (src/loop/retry.c): classification by kind,
 * status, header and in-stream type; full-jitter bounds from seeded draws;
 * retry-after; attempt limits; model fallback; max_tokens continuations. */
#include "loop/retry.h"
#include "test.h"

static al_retry_err_t classify(al_http_error_kind_t kind, int status,
                               int should_retry) {
  al_retry_err_t e;
  al__retry_classify(kind, status, should_retry, NULL, false, -1, &e);
  return e;
}

TEST_IMPL(retry_classify_status) {
  static const struct {
    al_http_error_kind_t kind;
    int status;
    al_retry_class_t cls;
    bool retryable;
  } v[] = {
      {AL_HTTP_ERR_INVALID_REQUEST, 400, AL_RETRY_CLASS_CLIENT, false},
      {AL_HTTP_ERR_AUTHENTICATION, 401, AL_RETRY_CLASS_AUTH, false},
      {AL_HTTP_ERR_PERMISSION, 403, AL_RETRY_CLASS_AUTH, false},
      {AL_HTTP_ERR_NOT_FOUND, 404, AL_RETRY_CLASS_NOT_FOUND, false},
      {AL_HTTP_ERR_TIMEOUT, 408, AL_RETRY_CLASS_TIMEOUT, true},
      {AL_HTTP_ERR_INVALID_REQUEST, 409, AL_RETRY_CLASS_CONFLICT, true},
      {AL_HTTP_ERR_INVALID_REQUEST, 413, AL_RETRY_CLASS_CLIENT, false},
      {AL_HTTP_ERR_INVALID_REQUEST, 422, AL_RETRY_CLASS_CLIENT, false},
      {AL_HTTP_ERR_RATE_LIMIT, 429, AL_RETRY_CLASS_RATE_LIMIT, true},
      {AL_HTTP_ERR_API_ERROR, 500, AL_RETRY_CLASS_SERVER, true},
      {AL_HTTP_ERR_API_ERROR, 502, AL_RETRY_CLASS_SERVER, true},
      {AL_HTTP_ERR_API_ERROR, 503, AL_RETRY_CLASS_SERVER, true},
      {AL_HTTP_ERR_TIMEOUT, 504, AL_RETRY_CLASS_TIMEOUT, true},
      {AL_HTTP_ERR_OVERLOADED, 529, AL_RETRY_CLASS_OVERLOADED, true},
      {AL_HTTP_ERR_API_ERROR, 302, AL_RETRY_CLASS_CLIENT, false},
      {AL_HTTP_ERR_TIMEOUT, 0, AL_RETRY_CLASS_TIMEOUT, true},
      {AL_HTTP_ERR_NETWORK, 0, AL_RETRY_CLASS_NETWORK, true},
      {AL_HTTP_ERR_STALL_IDLE, 200, AL_RETRY_CLASS_STALL, true},
      {AL_HTTP_ERR_STALL_PROGRESS, 200, AL_RETRY_CLASS_STALL, true},
      {AL_HTTP_ERR_TLS, 0, AL_RETRY_CLASS_LOCAL, false},
      {AL_HTTP_ERR_PROXY, 0, AL_RETRY_CLASS_LOCAL, false},
      {AL_HTTP_ERR_TOO_BIG, 200, AL_RETRY_CLASS_LOCAL, false},
      {AL_HTTP_ERR_TOO_SLOW, 200, AL_RETRY_CLASS_STALL, true},
      {AL_HTTP_ERR_UNEXPECTED_BODY, 200, AL_RETRY_CLASS_LOCAL, false},
      {AL_HTTP_ERR_HTTP_PARSE, 0, AL_RETRY_CLASS_DECODE, false},
      {AL_HTTP_ERR_CANCELLED, 0, AL_RETRY_CLASS_CANCELLED, false},
      {AL_HTTP_ERR_NONE, 200, AL_RETRY_CLASS_NONE, false},
  };
  size_t i;
  int k;
  bool seen[AL_HTTP_ERR_KIND_COUNT_] = {false};

  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    al_retry_err_t e = classify(v[i].kind, v[i].status, -1);
    if (e.cls != v[i].cls || e.retryable != v[i].retryable) {
      AL_TEST_FAIL("kind %s status %d: got %s/%d",
                   al_http_error_kind_name(v[i].kind), v[i].status,
                   al__retry_class_name(e.cls), (int)e.retryable);
    }
    ASSERT_NOT_NULL(e.reason);
    ASSERT_EQ(e.retry_after_ms, -1);
    seen[v[i].kind] = true;
  }
  /* Every transport kind has a row above. */
  for (k = 0; k < AL_HTTP_ERR_KIND_COUNT_; k++) {
    ASSERT(seen[k]);
  }
  /* An out-of-range kind is unknown, not a crash. */
  ASSERT_EQ(classify(AL_HTTP_ERR_KIND_COUNT_, 0, -1).retryable, false);
  ASSERT_STR_EQ(al__retry_class_name(AL_RETRY_CLASS_SPEND_CAP), "spend_cap");
  ASSERT_STR_EQ(al__retry_class_name(AL_RETRY_CLASS_COUNT_), "unknown");
  return 0;
}

TEST_IMPL(retry_classify_should_retry_overrides) {
  al_retry_err_t e;

  /* true makes a 400 retryable; false stops a 529, a 500 and a 429. */
  e = classify(AL_HTTP_ERR_INVALID_REQUEST, 400, 1);
  ASSERT(e.retryable);
  ASSERT_EQ(e.cls, AL_RETRY_CLASS_CLIENT);
  ASSERT_STR_EQ(e.reason, "x-should-retry: true");
  ASSERT(classify(AL_HTTP_ERR_AUTHENTICATION, 401, 1).retryable);
  e = classify(AL_HTTP_ERR_OVERLOADED, 529, 0);
  ASSERT(!e.retryable);
  ASSERT_STR_EQ(e.reason, "x-should-retry: false");
  ASSERT(!classify(AL_HTTP_ERR_API_ERROR, 500, 0).retryable);
  ASSERT(!classify(AL_HTTP_ERR_RATE_LIMIT, 429, 0).retryable);
  /* Agreeing headers change nothing. */
  ASSERT(classify(AL_HTTP_ERR_RATE_LIMIT, 429, 1).retryable);
  ASSERT(!classify(AL_HTTP_ERR_NOT_FOUND, 404, 0).retryable);
  /* A cancelled request never retries. */
  ASSERT(!classify(AL_HTTP_ERR_CANCELLED, 0, 1).retryable);
  return 0;
}

TEST_IMPL(retry_classify_spend_cap) {
  static const char cap[] =
      "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
      "\"message\":\"monthly cap\",\"details\":{\"error_code\":"
      "\"enforced_spend_limit_reached\"}}}";
  static const char plain[] =
      "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
      "\"message\":\"slow down\"}}";
  static const char other[] =
      "{\"error\":{\"details\":{\"error_code\":\"something_else\"}}}";
  al_http_error_t h;
  al_retry_err_t e;

  ASSERT(al__retry_is_spend_cap(cap, strlen(cap), NULL));
  ASSERT(!al__retry_is_spend_cap(plain, strlen(plain), NULL));
  ASSERT(!al__retry_is_spend_cap(other, strlen(other), NULL));
  ASSERT(!al__retry_is_spend_cap(NULL, 0, NULL));
  ASSERT(al__retry_is_spend_cap(NULL, 0, "enforced_spend_limit_reached"));
  /* Truncated body: the token is still found. */
  ASSERT(al__retry_is_spend_cap(cap, strlen(cap) - 3, NULL));
  ASSERT(!al__retry_is_spend_cap(plain, strlen(plain) - 5, NULL));

  memset(&h, 0, sizeof(h));
  h.kind = AL_HTTP_ERR_RATE_LIMIT;
  h.http_status = 429;
  h.message = "rate limited";
  h.body = cap;
  h.body_len = strlen(cap);
  h.api_type = "rate_limit_error";
  h.retry_after_ms = -1;
  h.should_retry = -1;
  al__retry_classify_http(&h, &e);
  ASSERT_EQ(e.cls, AL_RETRY_CLASS_SPEND_CAP);
  ASSERT(!e.retryable);
  /* Even x-should-retry: true does not retry the spend cap. */
  h.should_retry = 1;
  al__retry_classify_http(&h, &e);
  ASSERT(!e.retryable);
  ASSERT_EQ(e.cls, AL_RETRY_CLASS_SPEND_CAP);
  /* An ordinary 429 retries and keeps its retry-after. */
  h.should_retry = -1;
  h.body = plain;
  h.body_len = strlen(plain);
  h.retry_after_ms = 2500;
  al__retry_classify_http(&h, &e);
  ASSERT_EQ(e.cls, AL_RETRY_CLASS_RATE_LIMIT);
  ASSERT(e.retryable);
  ASSERT_EQ(e.retry_after_ms, 2500);
  return 0;
}

TEST_IMPL(retry_classify_stream_errors) {
  static const struct {
    const char *type;
    al_retry_class_t cls;
    bool retryable;
  } v[] = {
      {"overloaded_error", AL_RETRY_CLASS_OVERLOADED, true},
      {"api_error", AL_RETRY_CLASS_SERVER, true},
      {"server_error", AL_RETRY_CLASS_SERVER, true},
      {"rate_limit_error", AL_RETRY_CLASS_RATE_LIMIT, true},
      {"timeout_error", AL_RETRY_CLASS_TIMEOUT, true},
      {"invalid_request_error", AL_RETRY_CLASS_CLIENT, false},
      {"request_too_large", AL_RETRY_CLASS_CLIENT, false},
      {"billing_error", AL_RETRY_CLASS_CLIENT, false},
      {"authentication_error", AL_RETRY_CLASS_AUTH, false},
      {"permission_error", AL_RETRY_CLASS_AUTH, false},
      {"not_found_error", AL_RETRY_CLASS_NOT_FOUND, false},
      {"mystery_error", AL_RETRY_CLASS_UNKNOWN, false},
      {NULL, AL_RETRY_CLASS_UNKNOWN, false},
  };
  al_retry_err_t e;
  al_http_error_t h;
  size_t i;

  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    al__retry_classify_perr(AL_PERR_STREAM_EVENT, v[i].type, &e);
    if (e.cls != v[i].cls || e.retryable != v[i].retryable) {
      AL_TEST_FAIL("type %s: got %s/%d", v[i].type ? v[i].type : "(null)",
                   al__retry_class_name(e.cls), (int)e.retryable);
    }
    ASSERT_EQ(e.retry_after_ms, -1);
  }
  /* Decode errors never retry, whatever the type says. */
  al__retry_classify_perr(AL_PERR_DECODE, "overloaded_error", &e);
  ASSERT_EQ(e.cls, AL_RETRY_CLASS_DECODE);
  ASSERT(!e.retryable);
  al__retry_classify_perr(AL_PERR_HTTP, "overloaded_error", &e);
  ASSERT(!e.retryable);
  /* A 500 whose body says overloaded_error counts as overloaded. */
  memset(&h, 0, sizeof(h));
  h.kind = AL_HTTP_ERR_API_ERROR;
  h.http_status = 500;
  h.api_type = "overloaded_error";
  h.retry_after_ms = -1;
  h.should_retry = -1;
  al__retry_classify_http(&h, &e);
  ASSERT_EQ(e.cls, AL_RETRY_CLASS_OVERLOADED);
  ASSERT(e.retryable);
  return 0;
}

TEST_IMPL(retry_backoff_bounds) {
  al_retry_options_t o;
  al_retry_rng_t r1;
  al_retry_rng_t r2;
  int k;
  int i;

  al__retry_options_init(&o);
  ASSERT_EQ(o.max_attempts, 4);
  ASSERT_EQ(o.base_ms, 1000);
  ASSERT_EQ(o.cap_ms, 32000);
  al__retry_rng_seed(&r1, 42);
  for (k = 1; k <= 70; k++) {
    int64_t bound = k <= 6 ? (int64_t)1000 << (k - 1) : 32000;
    int64_t lo = INT64_MAX;
    int64_t hi = -1;
    for (i = 0; i < 2000; i++) {
      int64_t d = al__retry_backoff(&o, k, &r1);
      ASSERT_GE(d, 0);
      ASSERT_LE(d, bound);
      lo = AL_MIN(lo, d);
      hi = AL_MAX(hi, d);
    }
    /* Full jitter: the draws cover the range, down to 0 and up to the
     * bound, not only [bound/2, bound]. */
    ASSERT_LE(lo, bound / 50);
    ASSERT_GE(hi, bound - bound / 50);
  }
  /* Same seed, same delays; another seed differs. */
  al__retry_rng_seed(&r1, 7);
  al__retry_rng_seed(&r2, 7);
  for (i = 0; i < 100; i++) {
    ASSERT_EQ(al__retry_backoff(&o, 3, &r1), al__retry_backoff(&o, 3, &r2));
  }
  al__retry_rng_seed(&r2, 8);
  {
    int same = 0;
    for (i = 0; i < 100; i++) {
      same += al__retry_backoff(&o, 3, &r1) == al__retry_backoff(&o, 3, &r2);
    }
    ASSERT_LE(same, 5);
  }
  /* Configurable base and cap; a huge base never overflows. */
  o.base_ms = 10;
  o.cap_ms = 50;
  for (i = 0; i < 500; i++) {
    ASSERT_LE(al__retry_backoff(&o, 1, &r1), 10);
    ASSERT_LE(al__retry_backoff(&o, 2, &r1), 20);
    ASSERT_LE(al__retry_backoff(&o, 4, &r1), 50);
  }
  o.base_ms = INT64_MAX / 2;
  o.cap_ms = INT64_MAX;
  for (i = 0; i < 10; i++) {
    ASSERT_GE(al__retry_backoff(&o, 60, &r1), 0);
    ASSERT_GE(al__retry_backoff(&o, 2, &r1), 0);
  }
  /* Known splitmix64 output for seed 0 pins the generator. */
  al__retry_rng_seed(&r1, 0);
  ASSERT(al__retry_rng_next(&r1) == UINT64_C(0xE220A8397B1DCDAF));
  return 0;
}

static al_retry_err_t err_of(al_retry_class_t cls, bool retryable,
                             int64_t retry_after_ms) {
  al_retry_err_t e;
  e.cls = cls;
  e.retryable = retryable;
  e.retry_after_ms = retry_after_ms;
  e.reason = "test";
  return e;
}

TEST_IMPL(retry_decide_attempts) {
  al_retry_options_t o;
  al_retry_state_t s;
  al_retry_rng_t rng;
  al_retry_decision_t d;
  al_retry_err_t e = err_of(AL_RETRY_CLASS_SERVER, true, -1);
  al_retry_err_t fatal = err_of(AL_RETRY_CLASS_AUTH, false, -1);
  int k;

  al__retry_options_init(&o);
  al__retry_state_init(&s);
  al__retry_rng_seed(&rng, 1);
  al__retry_request_start(&s);
  for (k = 1; k < 4; k++) {
    al__retry_decide(&s, &o, &e, &rng, 1000, &d);
    ASSERT(d.retry);
    ASSERT(!d.fallback);
    ASSERT_EQ(d.attempt, k + 1);
    ASSERT_EQ(d.max_attempts, 4);
    ASSERT_EQ(d.cls, AL_RETRY_CLASS_SERVER);
    ASSERT_GE(d.delay_ms, 0);
    ASSERT_LE(d.delay_ms, (int64_t)1000 << (k - 1));
    ASSERT_EQ(d.retry_at_ms, 1000 + d.delay_ms);
    ASSERT_STR_EQ(d.reason, "test");
  }
  /* The fourth failure exhausts the default 4 attempts. */
  al__retry_decide(&s, &o, &e, &rng, 1000, &d);
  ASSERT(!d.retry);
  ASSERT_EQ(d.attempt, 4);
  ASSERT_EQ(d.delay_ms, 0);
  ASSERT_STR_EQ(d.reason, "retry attempts exhausted");
  /* A new request starts counting again. */
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(d.retry);
  ASSERT_EQ(d.attempt, 2);
  /* Not retryable: give up at once with the classifier's reason. */
  al__retry_decide(&s, &o, &fatal, &rng, 0, &d);
  ASSERT(!d.retry);
  ASSERT_STR_EQ(d.reason, "test");
  /* max_attempts 1 never retries. */
  o.max_attempts = 1;
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(!d.retry);
  return 0;
}

TEST_IMPL(retry_decide_retry_after) {
  al_retry_options_t o;
  al_retry_state_t s;
  al_retry_rng_t rng;
  al_retry_decision_t d;
  al_retry_err_t e;

  al__retry_options_init(&o);
  al__retry_state_init(&s);
  al__retry_rng_seed(&rng, 3);
  /* Honoured exactly, even above the backoff cap. */
  e = err_of(AL_RETRY_CLASS_RATE_LIMIT, true, 45000);
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 500, &d);
  ASSERT(d.retry);
  ASSERT_EQ(d.delay_ms, 45000);
  ASSERT_EQ(d.retry_at_ms, 45500);
  e.retry_after_ms = 10;
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(d.retry);
  ASSERT_EQ(d.delay_ms, 10);
  /* At the maximum it is still honoured; above it we give up. */
  e.retry_after_ms = o.retry_after_max_ms;
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(d.retry);
  ASSERT_EQ(d.delay_ms, 600000);
  e.retry_after_ms = o.retry_after_max_ms + 1;
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(!d.retry);
  ASSERT_STR_EQ(d.reason, "retry-after longer than the allowed maximum");
  ASSERT_EQ(d.retry_after_ms, o.retry_after_max_ms + 1);
  ASSERT_EQ(d.retry_after_max_ms, o.retry_after_max_ms);
  /* The maximum is configurable. */
  o.retry_after_max_ms = 5000;
  e.retry_after_ms = 6000;
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(!d.retry);
  /* 0 means no usable header: jittered backoff instead. */
  e.retry_after_ms = 0;
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &e, &rng, 0, &d);
  ASSERT(d.retry);
  ASSERT_LE(d.delay_ms, 1000);
  return 0;
}

TEST_IMPL(retry_fallback_after_overloads) {
  al_retry_options_t o;
  al_retry_state_t s;
  al_retry_rng_t rng;
  al_retry_decision_t d;
  al_retry_err_t ov = err_of(AL_RETRY_CLASS_OVERLOADED, true, -1);
  al_retry_err_t srv = err_of(AL_RETRY_CLASS_SERVER, true, -1);

  al__retry_options_init(&o);
  ASSERT_EQ(o.fallback_after, 3);
  o.has_fallback_model = true;
  o.max_attempts = 10;
  al__retry_state_init(&s);
  al__retry_rng_seed(&rng, 9);
  al__retry_request_start(&s);
  /* Two overloads, then success: the count restarts. */
  al__retry_decide(&s, &o, &ov, &rng, 0, &d);
  ASSERT(d.retry && !d.fallback);
  al__retry_decide(&s, &o, &ov, &rng, 0, &d);
  ASSERT(d.retry && !d.fallback);
  al__retry_on_success(&s);
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &ov, &rng, 0, &d);
  ASSERT(!d.fallback);
  al__retry_decide(&s, &o, &ov, &rng, 0, &d);
  ASSERT(!d.fallback);
  /* The third since the last success switches, with no delay and a
   * fresh attempt count; another error type does not break the run. */
  al__retry_decide(&s, &o, &srv, &rng, 0, &d);
  ASSERT(!d.fallback);
  al__retry_decide(&s, &o, &ov, &rng, 77, &d);
  ASSERT(d.retry);
  ASSERT(d.fallback);
  ASSERT_EQ(d.delay_ms, 0);
  ASSERT_EQ(d.retry_at_ms, 77);
  ASSERT_EQ(d.attempt, 1);
  ASSERT_EQ(s.attempt, 1);
  ASSERT(s.fallback_used);
  /* Only once: more overloads just retry, then run out. */
  for (;;) {
    al__retry_decide(&s, &o, &ov, &rng, 0, &d);
    ASSERT(!d.fallback);
    if (!d.retry) {
      break;
    }
  }
  ASSERT_STR_EQ(d.reason, "retry attempts exhausted");
  ASSERT_EQ(s.attempt, 10);
  return 0;
}

TEST_IMPL(retry_fallback_disabled_or_unconfigured) {
  al_retry_options_t o;
  al_retry_state_t s;
  al_retry_rng_t rng;
  al_retry_decision_t d;
  al_retry_err_t ov = err_of(AL_RETRY_CLASS_OVERLOADED, true, -1);
  al_retry_err_t ov_stop = err_of(AL_RETRY_CLASS_OVERLOADED, false, -1);
  int i;

  al__retry_options_init(&o);
  o.max_attempts = 10;
  al__retry_state_init(&s);
  al__retry_rng_seed(&rng, 5);
  al__retry_request_start(&s);
  /* No fallback model: never switches. */
  for (i = 0; i < 9; i++) {
    al__retry_decide(&s, &o, &ov, &rng, 0, &d);
    ASSERT(d.retry && !d.fallback);
  }
  /* fallback_after 0 disables it. */
  o.has_fallback_model = true;
  o.fallback_after = 0;
  al__retry_state_init(&s);
  al__retry_request_start(&s);
  for (i = 0; i < 5; i++) {
    al__retry_decide(&s, &o, &ov, &rng, 0, &d);
    ASSERT(!d.fallback);
  }
  /* With a threshold of 1, even an overload marked x-should-retry: false
   * switches model (a new request), once. */
  o.fallback_after = 1;
  al__retry_state_init(&s);
  al__retry_request_start(&s);
  al__retry_decide(&s, &o, &ov_stop, &rng, 0, &d);
  ASSERT(d.retry && d.fallback);
  al__retry_decide(&s, &o, &ov_stop, &rng, 0, &d);
  ASSERT(!d.retry && !d.fallback);
  return 0;
}

TEST_IMPL(retry_max_tokens_continuations) {
  al_retry_options_t o;
  al_retry_state_t s;

  al__retry_options_init(&o);
  ASSERT_EQ(o.max_continuations, 3);
  al__retry_state_init(&s);
  ASSERT(al__retry_continuation_take(&s, &o));
  ASSERT(al__retry_continuation_take(&s, &o));
  ASSERT(al__retry_continuation_take(&s, &o));
  ASSERT(!al__retry_continuation_take(&s, &o));
  ASSERT(!al__retry_continuation_take(&s, &o));
  ASSERT_EQ(s.continuations, 3);
  al__retry_continuation_reset(&s);
  ASSERT(al__retry_continuation_take(&s, &o));
  o.max_continuations = 0;
  al__retry_continuation_reset(&s);
  ASSERT(!al__retry_continuation_take(&s, &o));
  return 0;
}
