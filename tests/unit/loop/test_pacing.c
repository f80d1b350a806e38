/* Retry pacing as the server sees it: each retried request arrives no
 * sooner than the delay its `retry` event announced (RELIABILITY A1, A6).
 * The event's field alone proves nothing: a retry that fired at once while
 * announcing a wait passed every other test. Arrival times are the mock
 * server's own (uv_hrtime when it parsed the request); the bound is a
 * lower one only, minus the 1 ms of libuv's millisecond clock, so load can
 * only make the test pass more easily, never fail it. */
#include "test.h"
#include "unit/loop/agent_fx.h"

/* Request i+1 arrived at least the i-th retry's delay after request i. */
static void assert_paced(const fx_t *f, size_t retries) {
  size_t i;

  ASSERT_EQ(fx_requests(f), retries + 1);
  for (i = 0; i < retries; i++) {
    const json_t *r = fx_event(f, fx_find(f, "retry", NULL, i));
    int64_t delay = json_integer_value(json_object_get(r, "delay_ms"));
    uint64_t gap_ms = (fx_request(f, i + 1)->arrival_ns -
                       fx_request(f, i)->arrival_ns) /
                      1000000u;

    if ((int64_t)gap_ms < delay - 1) {
      AL_TEST_FAIL("retry %zu announced %" PRId64 " ms but the request came "
                   "after %" PRIu64 " ms",
                   i + 1, delay, gap_ms);
    }
  }
}

TEST_IMPL(agent_retry_paced_by_server_clock) {
  fx_t f;
  const json_t *r;

  /* retry-after-ms: exactly that delay; then an overload: the jittered
   * backoff (whatever it drew, it is waited). */
  fx_init(&f, "responses:\n"
              "  - fault: {status: 429}\n"
              "    headers: {retry-after-ms: '60'}\n"
              "  - fault: {status: 529}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  f.opts.retry_base_ms = 40;
  f.opts.retry_cap_ms = 40;
  fx_start(&f);
  fx_run(&f, "hi");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "retry"), 2);
  r = fx_event(&f, fx_find(&f, "retry", NULL, 0));
  ASSERT_EQ(json_integer_value(json_object_get(r, "delay_ms")), 60);
  assert_paced(&f, 2);
  fx_finish(&f);
  return 0;
}
