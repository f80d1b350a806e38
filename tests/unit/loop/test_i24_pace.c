/* Shared pacing (transport/pace.h, issue 24): the gate math on an injected
 * clock, and agents sharing one al_client_t against the mock: a 429's
 * cool-down holds every agent of the key (no retry storm), an rpm cap
 * spreads requests, and a cancel while PACED fires nothing after.
 * Arrival times are the mock's own (uv_hrtime, the test's clock too);
 * every bound is a lower one, so load can only make it easier to meet. */
#include "test.h"
#include "unit/loop/agent_fx.h"

#include "config/agent_opts.h"
#include "config/config.h"
#include "transport/pace.h"

#define NAG 20

/* ---- the gate, pure -------------------------------------------------------
 */

TEST_IMPL(i24_pace_gate_math) {
  al_pace_gate_t g;

  al__pace_gate_init(&g);
  ASSERT_EQ(al__pace_gate_delay(&g, 0), 0); /* no cap, no cool-down */
  g.rpm = 600;                              /* one per 100 ms */
  ASSERT_EQ(al__pace_gate_delay(&g, 1000), 0);
  al__pace_gate_take(&g, 1000);
  ASSERT_EQ(al__pace_gate_delay(&g, 1000), 100);
  ASSERT_EQ(al__pace_gate_delay(&g, 1060), 40);
  ASSERT_EQ(al__pace_gate_delay(&g, 1100), 0);
  al__pace_gate_take(&g, 1100);
  /* Idle time does not bank more than the burst. */
  ASSERT_EQ(al__pace_gate_delay(&g, 9000), 0);
  al__pace_gate_take(&g, 9000);
  ASSERT_EQ(al__pace_gate_delay(&g, 9000), 100);
  /* A burst of 3: three back to back, then the spacing. */
  al__pace_gate_init(&g);
  g.rpm = 600;
  g.burst = 3;
  al__pace_gate_take(&g, 0);
  ASSERT_EQ(al__pace_gate_delay(&g, 0), 0);
  al__pace_gate_take(&g, 0);
  ASSERT_EQ(al__pace_gate_delay(&g, 0), 0);
  al__pace_gate_take(&g, 0);
  ASSERT_EQ(al__pace_gate_delay(&g, 0), 100);
  /* The cool-down wins over the cap and is never shortened. */
  al__pace_gate_cool(&g, 5000);
  al__pace_gate_cool(&g, 2000);
  ASSERT_EQ(al__pace_gate_delay(&g, 1000), 4000);
  ASSERT_EQ(al__pace_gate_delay(&g, 5000), 0);
  return 0;
}

/* ---- agents on one client -------------------------------------------------
 */

typedef struct pa_s {
  fx_t *f;
  al_agent_t *agent;
  int ends;
  int events;
  int retries;
  int finals;
} pa_t;

typedef struct pfx_s {
  fx_t f;
  al_client_t *client;
  pa_t ag[NAG];
  int n;
  int started; /* agents 1..n-1 started from agent 0's retry */
} pfx_t;

static void pa_event(const al_event_t *ev, void *data) {
  pa_t *p = data;

  p->events++;
  if (ev->path != NULL) {
    return;
  }
  if (ev->type == AL_EVENT_RETRY) {
    p->retries++;
  }
  if (ev->type == AL_EVENT_FINAL) {
    p->finals++;
  }
  if (ev->type == AL_EVENT_FINAL || ev->type == AL_EVENT_ERROR ||
      ev->type == AL_EVENT_INTERRUPTED) {
    p->ends++;
  }
}

static void pfx_init(pfx_t *x, const char *yaml, int n, int rpm) {
  al_client_options_t co;
  int i;

  memset(x, 0, sizeof(*x));
  fx_init(&x->f, yaml);
  al_client_options_init(&co);
  ASSERT_EQ(al_client_new(&x->f.loop, &co, &x->client), 0);
  x->n = n;
  for (i = 0; i < n; i++) {
    al_agent_options_t o = x->f.opts;
    char sid[32];

    snprintf(sid, sizeof(sid), "s_pace_%d", i);
    o.session_id = sid;
    o.client = x->client;
    o.pace_rpm = rpm;
    o.idle_timeout_ms = 5000;
    x->ag[i].f = &x->f;
    ASSERT_EQ(al_agent_new(&x->f.loop, &o, &x->ag[i].agent), 0);
    ASSERT_EQ(al_agent_subscribe(x->ag[i].agent, pa_event, &x->ag[i], NULL), 0);
  }
}

static int pfx_ends(const pfx_t *x) {
  int i;
  int e = 0;

  for (i = 0; i < x->n; i++) {
    e += x->ag[i].ends;
  }
  return e;
}

static void pfx_wait_ends(pfx_t *x, int ends) {
  while (pfx_ends(x) < ends) {
    ASSERT(uv_run(&x->f.loop, UV_RUN_ONCE) != 0 || pfx_ends(x) >= ends);
  }
}

static void pfx_finish(pfx_t *x) {
  int i;

  for (i = 0; i < x->n; i++) {
    al_agent_close(x->ag[i].agent, NULL);
  }
  uv_run(&x->f.loop, UV_RUN_NOWAIT);
  al_client_close(x->client, NULL);
  fx_finish(&x->f); /* closes the mock, asserts the loop closes */
}

static int64_t ms_after(const fx_t *f, size_t later, size_t earlier) {
  return (int64_t)(fx_request(f, later)->arrival_ns -
                   fx_request(f, earlier)->arrival_ns) /
         1000000;
}

/* 20 agents of one key on one client. The first request gets a 429 with
 * retry-after 300 ms; the other 19 agents start only once the first has
 * that answer (its retry event), so every one of them asks while the
 * cool-down holds. The promise: no request of the key reaches the server
 * before the cool-down ends, and each agent sends exactly one request
 * after it (the first agent its retry): 21 requests in all. Without the
 * shared cool-down the 19 go at once and are at the server within a few
 * ms of the 429. */
TEST_IMPL(i24_pace_429_cooldown_shared_no_storm) {
  static pfx_t x;
  al_buf_t y;
  size_t i;

  al_buf_init(&y, 1 << 16);
  al_buf_append_str(&y,
                    "responses:\n"
                    "  - fault: {status: 429}\n"
                    "    headers: {retry-after-ms: '300'}\n");
  for (i = 0; i < NAG; i++) {
    al_buf_append_str(&y, "  - reply: {content: [{text: 'ok'}]}\n");
  }
  pfx_init(&x, y.data, NAG, 0);
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "first"), 0);
  while (x.ag[0].retries == 0) {
    ASSERT(uv_run(&x.f.loop, UV_RUN_ONCE) != 0);
  }
  for (i = 1; i < NAG; i++) {
    ASSERT_EQ(al_agent_run(x.ag[i].agent, "then"), 0);
  }
  pfx_wait_ends(&x, NAG);
  for (i = 0; i < NAG; i++) {
    ASSERT_EQ(x.ag[i].finals, 1);
  }
  ASSERT_EQ(fx_requests(&x.f), NAG + 1);
  ASSERT_EQ(fx_request(&x.f, 0)->status, 429);
  for (i = 1; i < fx_requests(&x.f); i++) {
    /* 2 ms for libuv's millisecond clock on both sides. */
    if (ms_after(&x.f, i, 0) < 300 - 2) {
      AL_TEST_FAIL("request %zu came %" PRId64
                   " ms after the 429, inside its 300 ms cool-down",
                   i, ms_after(&x.f, i, 0));
    }
  }
  fx_assert_valid(&x.f);
  al_buf_free(&y);
  pfx_finish(&x);
  return 0;
}

/* rpm 600 (one request per 100 ms, no burst): five agents started at once
 * at t0 get slots t0 + 0, 100, .. 400 ms at the earliest, so the last
 * request reaches the server 400 ms after t0 or later (a lower bound:
 * load only adds to it), not together with the first. */
TEST_IMPL(i24_pace_rpm_cap_spreads_requests) {
  static pfx_t x;
  int i;
  uint64_t t0;
  uint64_t hi = 0;

  pfx_init(&x,
           "on_exhausted: cycle\n"
           "responses:\n"
           "  - reply: {content: [{text: 'ok'}]}\n",
           5, 600);
  t0 = uv_hrtime();
  for (i = 0; i < 5; i++) {
    ASSERT_EQ(al_agent_run(x.ag[i].agent, "go"), 0);
  }
  pfx_wait_ends(&x, 5);
  ASSERT_EQ(fx_requests(&x.f), 5);
  for (i = 0; i < 5; i++) {
    uint64_t t = fx_request(&x.f, (size_t)i)->arrival_ns;

    ASSERT_EQ(x.ag[i].finals, 1);
    hi = AL_MAX(hi, t);
  }
  if ((hi - t0) / 1000000 < 400 - 2) {
    AL_TEST_FAIL("5 requests at rpm 600 came within %" PRIu64 " ms",
                 (hi - t0) / 1000000);
  }
  pfx_finish(&x);
  return 0;
}

/* rpm 60: agent A takes the slot, agent B waits (PACED) about a second.
 * Cancelling B unlinks its wait at once (the pacer's queue is empty) and
 * ends its run with interrupted; nothing of B fires after, even once A's
 * next request, queued behind where B's wait was, has gone through. */
TEST_IMPL(i24_pace_cancel_while_paced) {
  static pfx_t x;
  al_pace_t *p;
  int b_events;

  pfx_init(&x,
           "on_exhausted: cycle\n"
           "responses:\n"
           "  - reply: {content: [{text: 'ok'}]}\n",
           2, 60);
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "a"), 0);
  ASSERT_EQ(al_agent_run(x.ag[1].agent, "b"), 0);
  pfx_wait_ends(&x, 1);
  ASSERT_EQ(x.ag[0].finals, 1);
  ASSERT_EQ(x.ag[1].ends, 0);
  ASSERT_EQ(al__pace_get(x.client, x.f.opts.base_url, x.f.opts.api_key, &p), 0);
  ASSERT_EQ(al__pace_queued(p), 1);
  ASSERT_EQ(al_agent_cancel(x.ag[1].agent), 0);
  ASSERT_EQ(x.ag[1].ends, 1);
  ASSERT_EQ(al__pace_queued(p), 0);
  b_events = x.ag[1].events;
  /* A's next request waits for the next slot (~1 s); a stale wait of B's
   * would be served before it. */
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "a again"), 0);
  pfx_wait_ends(&x, 3);
  ASSERT_EQ(x.ag[0].finals, 2);
  ASSERT_EQ(x.ag[1].events, b_events);
  ASSERT_EQ(fx_requests(&x.f), 2);
  pfx_finish(&x);
  return 0;
}

/* pacing: {rpm, burst} in a configuration becomes the agent options every
 * front end builds with al_config_agent_options (run, batch); a value out
 * of range is an error with its place. */
TEST_IMPL(i24_pace_config_section) {
  static const char ok[] = "pacing:\n  rpm: 120\n  burst: 3\n";
  static const char bad[] = "pacing:\n  rpm: 0\n";
  al_config_t cfg;
  al_agent_opts_input_t in;
  al_agent_opts_store_t st;
  al_agent_options_t o;
  char why[512];

  al_config_init(&cfg);
  ASSERT_EQ(
      al_config_load_string(&cfg, AL_CFG_USER, "config.yaml", ok, strlen(ok)),
      0);
  ASSERT_EQ(cfg.n_errors, 0);
  al_agent_opts_input_init(&in);
  in.workspace = "/tmp";
  al_agent_opts_store_init(&st);
  ASSERT_EQ(al_config_agent_options(&cfg, &in, &o, &st, why, sizeof(why)), 0);
  ASSERT_EQ(o.pace_rpm, 120);
  ASSERT_EQ(o.pace_burst, 3);
  al_agent_opts_store_free(&st);
  al_config_free(&cfg);

  al_config_init(&cfg);
  (void)al_config_load_string(&cfg, AL_CFG_USER, "config.yaml", bad,
                              strlen(bad));
  ASSERT_EQ(cfg.n_errors, 1);
  ASSERT_NOT_NULL(strstr(cfg.errors.data, "pacing.rpm"));
  al_config_free(&cfg);
  return 0;
}

/* An agent that shares no client paces alone, with the same code: its
 * own client has its own pacer. rpm 600: the first request takes the slot
 * at or after t0 (before the run), the second waits for the next one, so
 * it reaches the server at least 100 ms after t0 (a lower bound: load
 * only adds to it). */
TEST_IMPL(i24_pace_own_client_paces_alone) {
  fx_t f;
  uint64_t t0;
  int64_t after;

  fx_init(&f,
          "on_exhausted: cycle\n"
          "responses:\n"
          "  - reply: {content: [{text: 'ok'}]}\n");
  f.opts.pace_rpm = 600;
  fx_start(&f);
  t0 = uv_hrtime();
  fx_run(&f, "one");
  fx_run(&f, "two");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 2);
  after = (int64_t)(fx_request(&f, 1)->arrival_ns - t0) / 1000000;
  if (after < 100 - 2) {
    AL_TEST_FAIL("the second request came %" PRId64
                 " ms after the start "
                 "at rpm 600",
                 after);
  }
  fx_finish(&f);
  return 0;
}

static int b_closed;

static void on_b_closed(al_agent_t *a) {
  (void)a;
  b_closed++;
}

/* Closing an agent while it waits in the pacer unlinks the wait: the
 * agent closes (its callback runs once), nothing of its run fires, and
 * the next agent's request is not held behind it. */
TEST_IMPL(i24_pace_close_while_paced) {
  static pfx_t x;
  al_pace_t *p;
  int b_events;

  pfx_init(&x,
           "on_exhausted: cycle\n"
           "responses:\n"
           "  - reply: {content: [{text: 'ok'}]}\n",
           2, 60);
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "a"), 0);
  ASSERT_EQ(al_agent_run(x.ag[1].agent, "b"), 0);
  pfx_wait_ends(&x, 1);
  ASSERT_EQ(al__pace_get(x.client, x.f.opts.base_url, x.f.opts.api_key, &p), 0);
  ASSERT_EQ(al__pace_queued(p), 1);
  al_agent_close(x.ag[1].agent, on_b_closed);
  /* The close cancels the run first: its interrupted, then nothing. */
  ASSERT_EQ(x.ag[1].ends, 1);
  b_events = x.ag[1].events;
  ASSERT_EQ(al__pace_queued(p), 0);
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "a again"), 0);
  pfx_wait_ends(&x, 3);
  ASSERT_EQ(b_closed, 1);
  ASSERT_EQ(x.ag[0].finals, 2);
  ASSERT_EQ(fx_requests(&x.f), 2);
  x.n = 1; /* B is closed already */
  pfx_finish(&x);
  ASSERT_EQ(x.ag[1].events, b_events);
  ASSERT_EQ(b_closed, 1);
  return 0;
}

/* Half-open after a cool-down: the limit outlasts the first retry-after
 * (the second request, the first after the cool-down, gets a 429 again).
 * That request went alone, as the probe: every later request comes at
 * least its 300 ms retry-after after it, none together with it. Without
 * the probe the whole queue goes when the first cool-down ends and meets
 * the second 429 side by side with it. */
TEST_IMPL(i24_pace_probe_after_cooldown) {
  static pfx_t x;
  al_buf_t y;
  size_t i;

  al_buf_init(&y, 1 << 16);
  al_buf_append_str(&y,
                    "responses:\n"
                    "  - fault: {status: 429}\n"
                    "    headers: {retry-after-ms: '300'}\n"
                    "  - fault: {status: 429}\n"
                    "    headers: {retry-after-ms: '300'}\n");
  for (i = 0; i < 10; i++) {
    al_buf_append_str(&y, "  - reply: {content: [{text: 'ok'}]}\n");
  }
  pfx_init(&x, y.data, 10, 0);
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "first"), 0);
  while (x.ag[0].retries == 0) {
    ASSERT(uv_run(&x.f.loop, UV_RUN_ONCE) != 0);
  }
  for (i = 1; i < 10; i++) {
    ASSERT_EQ(al_agent_run(x.ag[i].agent, "then"), 0);
  }
  pfx_wait_ends(&x, 10);
  for (i = 0; i < 10; i++) {
    ASSERT_EQ(x.ag[i].finals, 1);
  }
  ASSERT_EQ(fx_requests(&x.f), 12); /* each agent one answer, two 429s */
  ASSERT_EQ(fx_request(&x.f, 0)->status, 429);
  ASSERT_EQ(fx_request(&x.f, 1)->status, 429);
  ASSERT_GE(ms_after(&x.f, 1, 0), 300 - 2);
  for (i = 2; i < fx_requests(&x.f); i++) {
    if (ms_after(&x.f, i, 1) < 300 - 2) {
      AL_TEST_FAIL("request %zu came %" PRId64 " ms after the probe's 429", i,
                   ms_after(&x.f, i, 1));
    }
  }
  fx_assert_valid(&x.f);
  al_buf_free(&y);
  pfx_finish(&x);
  return 0;
}

/* The probe's answer is its status: once a 2xx stream starts, the queue
 * goes, without waiting for the whole reply. The probe's reply streams
 * for about 2 s (20 deltas 100 ms apart); the others reach the server
 * well before it ends (1.5 s of slack for a loaded box), not after. */
TEST_IMPL(i24_pace_probe_released_at_stream_start) {
  static pfx_t x;
  al_buf_t y;
  size_t i;

  al_buf_init(&y, 1 << 16);
  al_buf_append_str(&y,
                    "responses:\n"
                    "  - fault: {status: 429}\n"
                    "    headers: {retry-after-ms: '100'}\n"
                    "  - delay_ms: 100\n"
                    "    reply: {content: [{text: 'a slow reply of the "
                    "probe', chunks: 20}]}\n");
  for (i = 0; i < 5; i++) {
    al_buf_append_str(&y, "  - reply: {content: [{text: 'ok'}]}\n");
  }
  pfx_init(&x, y.data, 5, 0);
  ASSERT_EQ(al_agent_run(x.ag[0].agent, "first"), 0);
  while (x.ag[0].retries == 0) {
    ASSERT(uv_run(&x.f.loop, UV_RUN_ONCE) != 0);
  }
  for (i = 1; i < 5; i++) {
    ASSERT_EQ(al_agent_run(x.ag[i].agent, "then"), 0);
  }
  pfx_wait_ends(&x, 5);
  ASSERT_EQ(fx_requests(&x.f), 6);
  for (i = 2; i < fx_requests(&x.f); i++) {
    if (ms_after(&x.f, i, 1) >= 1500) {
      AL_TEST_FAIL("request %zu came %" PRId64
                   " ms after the probe: it "
                   "waited for the probe's whole reply",
                   i, ms_after(&x.f, i, 1));
    }
  }
  al_buf_free(&y);
  pfx_finish(&x);
  return 0;
}
