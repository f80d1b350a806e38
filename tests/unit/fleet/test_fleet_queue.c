/* The job protocol's primitives (src/fleet/queue.c) against a real
 * redis-server. Each step is started and the loop run until its one
 * callback; what Redis holds is read back with the harness's own
 * connection. A lease's expiry is made by deleting the owner key and an
 * entry's idleness by reaping with a zero minimum, so nothing waits. */
#include <hiredis/hiredis.h>

#include "fleet/fleet.h"
#include "redis_server.h"
#include "test.h"

typedef struct {
  bool done;
  int status;
  bool flag; /* fresh (submit), done (claim) */
  int64_t epoch;
  size_t n;
  size_t dead;
  char entry[8][64];
  char job[8][64];
} res_t;

typedef struct {
  uv_loop_t loop;
  al_test_redis_t srv;
  al_fleet_redis_t *r;
  al_fleet_queue_t w1;
  al_fleet_queue_t w2;
} fx_t;

static int downs;

static void on_state(al_fleet_redis_t *r, bool up, int status) {
  if (!up) {
    downs++;
  }
}

static void wait_res(fx_t *f, res_t *res) {
  while (!res->done) {
    ASSERT(uv_run(&f->loop, UV_RUN_ONCE) != 0 || res->done);
  }
}

static void status_cb(int status, void *data) {
  res_t *res = data;

  ASSERT(!res->done);
  res->done = true;
  res->status = status;
}

static void submit_cb(int status, bool fresh, void *data) {
  res_t *res = data;

  status_cb(status, data);
  res->flag = fresh;
}

static void claim_cb(int status, int64_t epoch, bool done, void *data) {
  res_t *res = data;

  status_cb(status, data);
  res->epoch = epoch;
  res->flag = done;
}

static void entries_cb(int status, const al_fleet_entry_t *e, size_t n,
                       size_t dead, void *data) {
  res_t *res = data;
  size_t i;

  status_cb(status, data);
  ASSERT_LE(n, 8);
  res->n = n;
  res->dead = dead;
  for (i = 0; i < n; i++) {
    snprintf(res->entry[i], sizeof(res->entry[i]), "%s", e[i].entry_id);
    snprintf(res->job[i], sizeof(res->job[i]), "%s", e[i].job_id);
  }
}

static void fx_setup_aof(fx_t *f, bool aof) {
  al_fleet_redis_options_t o;
  res_t res = {0};

  memset(f, 0, sizeof(*f));
  al_test_redis_start(&f->srv, aof);
  ASSERT_EQ(uv_loop_init(&f->loop), 0);
  al_fleet_redis_options_init(&o);
  o.unix_path = f->srv.sock;
  o.on_state = on_state;
  o.backoff_min_ms = 5;
  o.backoff_max_ms = 20;
  ASSERT_EQ(al_fleet_redis_new(&f->loop, &o, &f->r), 0);
  while (!al_fleet_redis_is_up(f->r)) {
    ASSERT(uv_run(&f->loop, UV_RUN_ONCE) != 0);
  }
  f->w1.redis = f->r;
  f->w1.prefix = "t";
  f->w1.group = "g";
  f->w1.consumer = "w1";
  f->w1.lease_ms = 60000;
  f->w1.max_deliveries = 3;
  f->w2 = f->w1;
  f->w2.consumer = "w2";
  ASSERT_EQ(al_fleet_queue_ensure_group(&f->w1, status_cb, &res), 0);
  wait_res(f, &res);
  ASSERT_EQ(res.status, 0);
}

static void fx_setup(fx_t *f) {
  fx_setup_aof(f, false);
}

static void fx_teardown(fx_t *f) {
  al_fleet_redis_close(f->r, NULL);
  ASSERT_LOOP_CLOSES(&f->loop);
  al_test_redis_cleanup(&f->srv);
}

/* The harness's view of one value, as text. */
static char *peek(fx_t *f, const char *a0, const char *a1, const char *a2) {
  const char *argv[3] = {a0, a1, a2};

  return al_test_redis_cmd(&f->srv, a2 ? 3 : 2, argv);
}

static void expect(fx_t *f, const char *a0, const char *a1, const char *a2,
                   const char *want) {
  char *got = peek(f, a0, a1, a2);

  ASSERT_STR_EQ(got, want);
  free(got);
}

static void submit(fx_t *f, const char *id, bool fresh) {
  res_t res = {0};

  ASSERT_EQ(
      al_fleet_queue_submit(&f->w1, id, "{\"prompt\":\"hi\"}", submit_cb, &res),
      0);
  wait_res(f, &res);
  ASSERT_EQ(res.status, 0);
  ASSERT_EQ(res.flag, fresh);
}

static res_t read_n(fx_t *f, al_fleet_queue_t *q, unsigned slots) {
  res_t res = {0};

  ASSERT_EQ(al_fleet_queue_read(q, slots, entries_cb, &res), 0);
  wait_res(f, &res);
  ASSERT_EQ(res.status, 0);
  return res;
}

static res_t claim(fx_t *f, al_fleet_queue_t *q, const char *id) {
  res_t res = {0};

  ASSERT_EQ(al_fleet_queue_claim(q, id, claim_cb, &res), 0);
  wait_res(f, &res);
  return res;
}

static int fence(fx_t *f, al_fleet_queue_t *q, const char *id, int64_t e) {
  res_t res = {0};

  ASSERT_EQ(al_fleet_queue_fence(q, id, e, status_cb, &res), 0);
  wait_res(f, &res);
  return res.status;
}

static int renew(fx_t *f, al_fleet_queue_t *q, const char *id, int64_t e,
                 const char *entry) {
  res_t res = {0};

  ASSERT_EQ(al_fleet_queue_renew(q, id, e, entry, status_cb, &res), 0);
  wait_res(f, &res);
  return res.status;
}

static int complete(fx_t *f, al_fleet_queue_t *q, const char *id, int64_t e,
                    const char *entry, const char *result) {
  res_t res = {0};

  ASSERT_EQ(al_fleet_queue_complete(q, id, e, entry, result, status_cb, &res),
            0);
  wait_res(f, &res);
  return res.status;
}

static res_t reap(fx_t *f, al_fleet_queue_t *q, uint64_t min_idle) {
  al_fleet_queue_t r = *q;
  res_t res = {0};

  r.lease_ms = min_idle;
  ASSERT_EQ(al_fleet_queue_reap(&r, 8, entries_cb, &res), 0);
  wait_res(f, &res);
  ASSERT_EQ(res.status, 0);
  return res;
}

/* ---- the tests --------------------------------------------------------------
 */

TEST_IMPL(i24_queue_submit_idempotent) {
  fx_t f;
  res_t res = {0};

  fx_setup(&f);
  submit(&f, "j1", true);
  submit(&f, "j1", false);
  submit(&f, "j2", true);
  expect(&f, "XLEN", "t:jobs", NULL, "2");
  expect(&f, "GET", "t:job:j1", NULL, "{\"prompt\":\"hi\"}");
  /* A second worker's ensure_group finds the group there. */
  ASSERT_EQ(al_fleet_queue_ensure_group(&f.w2, status_cb, &res), 0);
  wait_res(&f, &res);
  ASSERT_EQ(res.status, 0);
  fx_teardown(&f);
  return 0;
}

TEST_IMPL(i24_queue_read_takes_at_most_free_slots) {
  fx_t f;
  res_t res;
  int i;

  fx_setup(&f);
  for (i = 0; i < 5; i++) {
    char id[8];

    snprintf(id, sizeof(id), "j%d", i);
    submit(&f, id, true);
  }
  res = read_n(&f, &f.w1, 2);
  ASSERT_EQ(res.n, 2);
  ASSERT_STR_EQ(res.job[0], "j0");
  ASSERT_STR_EQ(res.job[1], "j1");
  res = read_n(&f, &f.w2, 4);
  ASSERT_EQ(res.n, 3);
  ASSERT_STR_EQ(res.job[2], "j4");
  res = read_n(&f, &f.w1, 1);
  ASSERT_EQ(res.n, 0);
  ASSERT_EQ(al_fleet_queue_read(&f.w1, 0, entries_cb, &res), AL_EINVAL);
  fx_teardown(&f);
  return 0;
}

TEST_IMPL(i24_queue_claim_renew_fence) {
  fx_t f;
  res_t rd;
  res_t c;
  char *pttl;

  fx_setup(&f);
  submit(&f, "j1", true);
  rd = read_n(&f, &f.w1, 1);
  ASSERT_EQ(rd.n, 1);
  c = claim(&f, &f.w1, "j1");
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.epoch, 1);
  ASSERT(!c.flag);
  expect(&f, "GET", "t:owner:j1", NULL, "w1:1");
  ASSERT_EQ(fence(&f, &f.w1, "j1", 1), 0);
  /* Another worker cannot claim a job whose lease is held. */
  c = claim(&f, &f.w2, "j1");
  ASSERT_EQ(c.status, AL_EFENCED);
  expect(&f, "GET", "t:epoch:j1", NULL, "1");
  /* Renewal puts the lease back to its full length. */
  expect(&f, "PEXPIRE", "t:owner:j1", "1000", "1");
  ASSERT_EQ(renew(&f, &f.w1, "j1", 1, rd.entry[0]), 0);
  pttl = peek(&f, "PTTL", "t:owner:j1", NULL);
  ASSERT_GE(atoi(pttl), 1001);
  free(pttl);
  fx_teardown(&f);
  return 0;
}

/* The lease ran out, another worker claimed: the old owner's fence, renew
 * and completion all fail and write nothing. */
TEST_IMPL(i24_queue_stale_owner_fails_fence) {
  fx_t f;
  res_t rd;
  res_t c;

  fx_setup(&f);
  submit(&f, "j1", true);
  rd = read_n(&f, &f.w1, 1);
  c = claim(&f, &f.w1, "j1");
  ASSERT_EQ(c.epoch, 1);
  expect(&f, "DEL", "t:owner:j1", NULL, "1"); /* the lease expired */
  c = claim(&f, &f.w2, "j1");
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.epoch, 2);
  ASSERT_EQ(fence(&f, &f.w1, "j1", 1), AL_EFENCED);
  ASSERT_EQ(renew(&f, &f.w1, "j1", 1, rd.entry[0]), AL_EFENCED);
  ASSERT_EQ(complete(&f, &f.w1, "j1", 1, rd.entry[0], "{\"by\":\"w1\"}"),
            AL_EFENCED);
  expect(&f, "EXISTS", "t:result:j1", NULL, "0");
  expect(&f, "GET", "t:owner:j1", NULL, "w2:2");
  /* The same consumer with an old epoch is fenced too. */
  ASSERT_EQ(fence(&f, &f.w2, "j1", 1), AL_EFENCED);
  ASSERT_EQ(fence(&f, &f.w2, "j1", 2), 0);
  ASSERT_EQ(complete(&f, &f.w2, "j1", 2, rd.entry[0], "{\"by\":\"w2\"}"), 0);
  expect(&f, "GET", "t:result:j1", NULL, "{\"by\":\"w2\"}");
  fx_teardown(&f);
  return 0;
}

/* One MULTI-like step: one result, acked, owner released; a later claim
 * sees the job done. */
TEST_IMPL(i24_queue_complete_once) {
  fx_t f;
  res_t rd;
  res_t c;

  fx_setup(&f);
  submit(&f, "j1", true);
  rd = read_n(&f, &f.w1, 1);
  c = claim(&f, &f.w1, "j1");
  ASSERT_EQ(complete(&f, &f.w1, "j1", c.epoch, rd.entry[0], "{\"ok\":1}"), 0);
  expect(&f, "XLEN", "t:results", NULL, "1");
  expect(&f, "EXISTS", "t:owner:j1", NULL, "0");
  /* Acked: nothing pending in the group. */
  expect(&f, "EVAL", "return redis.call('XPENDING', 't:jobs', 'g')[1]", "0",
         "0");
  /* Completing again: the owner key is gone, so fenced; still one result. */
  ASSERT_EQ(complete(&f, &f.w1, "j1", c.epoch, rd.entry[0], "{\"ok\":2}"),
            AL_EFENCED);
  expect(&f, "XLEN", "t:results", NULL, "1");
  expect(&f, "GET", "t:result:j1", NULL, "{\"ok\":1}");
  c = claim(&f, &f.w2, "j1");
  ASSERT_EQ(c.status, 0);
  ASSERT(c.flag);
  fx_teardown(&f);
  return 0;
}

/* A crashed worker's entry is taken over; a live (renewed) one is not. */
TEST_IMPL(i24_queue_reap_takes_over_expired) {
  fx_t f;
  res_t rd;
  res_t rp;
  res_t c;

  fx_setup(&f);
  submit(&f, "j1", true);
  rd = read_n(&f, &f.w1, 1);
  c = claim(&f, &f.w1, "j1");
  ASSERT_EQ(renew(&f, &f.w1, "j1", c.epoch, rd.entry[0]), 0);
  /* Idle far less than a lease: not taken. */
  rp = reap(&f, &f.w2, 60000);
  ASSERT_EQ(rp.n, 0);
  /* w1 dies: its lease lapses and its entry is idle past it. */
  expect(&f, "DEL", "t:owner:j1", NULL, "1");
  rp = reap(&f, &f.w2, 0);
  ASSERT_EQ(rp.n, 1);
  ASSERT_EQ(rp.dead, 0);
  ASSERT_STR_EQ(rp.job[0], "j1");
  ASSERT_STR_EQ(rp.entry[0], rd.entry[0]);
  c = claim(&f, &f.w2, "j1");
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.epoch, 2);
  ASSERT_EQ(complete(&f, &f.w2, "j1", 2, rp.entry[0], "{}"), 0);
  rp = reap(&f, &f.w1, 0);
  ASSERT_EQ(rp.n, 0);
  fx_teardown(&f);
  return 0;
}

TEST_IMPL(i24_queue_dead_letter_after_max_deliveries) {
  fx_t f;
  res_t rd;
  res_t rp;
  res_t res = {0};
  char *r;

  fx_setup(&f);
  submit(&f, "j1", true);
  rd = read_n(&f, &f.w1, 1); /* delivery 1 */
  ASSERT_EQ(rd.n, 1);
  ASSERT_EQ(
      al_fleet_queue_set_error(&f.w1, "j1", "worker crashed", status_cb, &res),
      0);
  wait_res(&f, &res);
  ASSERT_EQ(res.status, 0);
  rp = reap(&f, &f.w2, 0); /* delivery 2 */
  ASSERT_EQ(rp.n, 1);
  rp = reap(&f, &f.w1, 0); /* delivery 3 */
  ASSERT_EQ(rp.n, 1);
  expect(&f, "XLEN", "t:dead", NULL, "0");
  rp = reap(&f, &f.w2, 0); /* would be delivery 4 */
  ASSERT_EQ(rp.n, 0);
  ASSERT_EQ(rp.dead, 1);
  expect(&f, "XLEN", "t:dead", NULL, "1");
  expect(&f, "XLEN", "t:results", NULL, "1");
  r = peek(&f, "GET", "t:result:j1", NULL);
  ASSERT_NOT_NULL(strstr(r, "\"outcome\":\"dead_letter\""));
  ASSERT_NOT_NULL(strstr(r, "worker crashed"));
  free(r);
  expect(&f, "EVAL", "return redis.call('XPENDING', 't:jobs', 'g')[1]", "0",
         "0");
  rp = reap(&f, &f.w1, 0);
  ASSERT_EQ(rp.n + rp.dead, 0);
  fx_teardown(&f);
  return 0;
}

/* F4 at the protocol's level: with appendonly yes and appendfsync always,
 * every submit that was answered survives a SIGKILL of redis-server, and
 * the connection comes back by itself. */
TEST_IMPL(i24_queue_acked_submits_survive_redis_crash) {
  fx_t f;
  res_t rd;
  size_t total = 0;
  int i;

  fx_setup_aof(&f, true);
  for (i = 0; i < 20; i++) {
    char id[8];

    snprintf(id, sizeof(id), "j%d", i);
    submit(&f, id, true);
  }
  al_test_redis_kill(&f.srv);
  while (downs == 0) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0);
  }
  al_test_redis_restart(&f.srv);
  while (!al_fleet_redis_is_up(f.r)) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0);
  }
  /* Resubmitting after the crash is a no-op: the jobs are known. */
  submit(&f, "j7", false);
  do {
    rd = read_n(&f, &f.w1, 8);
    total += rd.n;
  } while (rd.n > 0);
  ASSERT_EQ(total, 20);
  fx_teardown(&f);
  return 0;
}
