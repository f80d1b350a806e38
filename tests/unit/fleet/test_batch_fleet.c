/* issue 24, fleet mode's producer and operator side: the real `agentloop
 * batch submit | results | status --queue URL` (src/client/batch_fleet.c,
 * src/fleet/admin.c) against a real redis-server (tests/redis_server.h).
 * No worker runs: the test plays one with the queue primitives on its own
 * connection (read, claim, complete, reap into a dead letter). Nothing
 * sleeps: the test's "worker" finishes the next job when the CLI has
 * printed the previous result (a poll of its stdout on the loop). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fleet/fleet.h"
#include "redis_server.h"
#include "test.h"
#include "unit/wire/wire_cli.h"

typedef struct {
  wire_cli_t c;
  al_test_redis_t srv;
  char root[64];
  char url[400];
  char xdg_cfg[128], xdg_state[128];
  char *env[6];
  al_fleet_redis_t *r;
  al_fleet_queue_t w1, w2;
  /* the jobs the test's worker holds */
  size_t n;
  char job[8][64];
  char entry[8][64];
  int64_t epoch[8];
  bool busy; /* a step in flight */
  int status;
} fx_t;

static void fx_start(fx_t *f, bool aof) {
  memset(f, 0, sizeof(*f));
  snprintf(f->root, sizeof(f->root), "/tmp/al-fleetcli-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(f->root));
  snprintf(f->xdg_cfg, sizeof(f->xdg_cfg), "XDG_CONFIG_HOME=%s/cfg", f->root);
  snprintf(f->xdg_state, sizeof(f->xdg_state), "XDG_STATE_HOME=%s/state",
           f->root);
  f->env[0] = "PATH=/usr/bin:/bin";
  f->env[1] = "NO_COLOR=1";
  f->env[2] = f->xdg_cfg;
  f->env[3] = f->xdg_state;
  f->env[4] = NULL;
  al_test_redis_start(&f->srv, aof);
  snprintf(f->url, sizeof(f->url), "unix://%s?prefix=t", f->srv.sock);
  ASSERT_EQ(uv_loop_init(&f->c.loop), 0);
  f->c.loop.data = &f->c;
}

static void fx_run(fx_t *f, const char *const *args) {
  f->c.olen = f->c.elen = 0;
  f->c.obuf[0] = f->c.ebuf[0] = '\0';
  f->c.exits = f->c.eofs = 0;
  wire_cli_run(&f->c, args, f->env);
}

static void fx_finish(fx_t *f) {
  if (f->r != NULL) {
    al_fleet_redis_close(f->r, NULL);
  }
  wire_cli_finish(&f->c);
  al_test_redis_cleanup(&f->srv);
}

static char *fx_cmd(fx_t *f, const char *a0, const char *a1) {
  const char *argv[2] = {a0, a1};

  return al_test_redis_cmd(&f->srv, 2, argv);
}

static void expect_cmd(fx_t *f, const char *a0, const char *a1,
                       const char *want) {
  char *got = fx_cmd(f, a0, a1);

  ASSERT_STR_EQ(got, want);
  free(got);
}

static size_t lines(const char *s) {
  size_t n = 0;

  for (; *s != '\0'; s++) {
    n += *s == '\n';
  }
  return n;
}

/* ---- the test's worker --------------------------------------------------- */

static void step_status(int status, void *data) {
  fx_t *f = data;

  f->busy = false;
  f->status = status;
}

static void step_entries(int status, const al_fleet_entry_t *e, size_t n,
                         size_t dead, void *data) {
  fx_t *f = data;
  size_t i;

  (void)dead;
  step_status(status, data);
  for (i = 0; i < n && f->n < 8; i++, f->n++) {
    snprintf(f->job[f->n], sizeof(f->job[f->n]), "%s", e[i].job_id);
    snprintf(f->entry[f->n], sizeof(f->entry[f->n]), "%s", e[i].entry_id);
  }
}

static void step_claim(int status, int64_t epoch, bool done, void *data) {
  fx_t *f = data;

  (void)done;
  step_status(status, data);
  f->epoch[f->n - 1] = epoch; /* claimed right after its read */
}

static void wait_step(fx_t *f) {
  while (f->busy) {
    ASSERT(uv_run(&f->c.loop, UV_RUN_ONCE) != 0 || !f->busy);
  }
  ASSERT_EQ(f->status, 0);
}

static void worker_connect(fx_t *f) {
  al_fleet_redis_options_t o;

  al_fleet_redis_options_init(&o);
  o.unix_path = f->srv.sock;
  o.backoff_min_ms = 5;
  o.backoff_max_ms = 20;
  ASSERT_EQ(al_fleet_redis_new(&f->c.loop, &o, &f->r), 0);
  while (!al_fleet_redis_is_up(f->r)) {
    ASSERT(uv_run(&f->c.loop, UV_RUN_ONCE) != 0);
  }
  f->w1.redis = f->r;
  f->w1.prefix = "t";
  f->w1.group = "agentloop";
  f->w1.consumer = "w1";
  f->w1.lease_ms = 600000;
  f->w1.max_deliveries = 3;
  f->w2 = f->w1;
  f->w2.consumer = "w2";
  f->busy = true;
  ASSERT_EQ(al_fleet_queue_ensure_group(&f->w1, step_status, f), 0);
  wait_step(f);
}

/* Reads one job as q's consumer and claims it. */
static void worker_take(fx_t *f, al_fleet_queue_t *q) {
  size_t before = f->n;

  f->busy = true;
  ASSERT_EQ(al_fleet_queue_read(q, 1, step_entries, f), 0);
  wait_step(f);
  ASSERT_EQ(f->n, before + 1);
  f->busy = true;
  ASSERT_EQ(al_fleet_queue_claim(q, f->job[f->n - 1], step_claim, f), 0);
  wait_step(f);
  ASSERT(f->epoch[f->n - 1] > 0);
}

static void worker_complete_start(fx_t *f, al_fleet_queue_t *q, size_t k) {
  char res[256];

  snprintf(res, sizeof(res),
           "{\"id\":\"%s\",\"outcome\":\"done\",\"text\":\"answer %s\\nmore\","
           "\"turns\":2,\"cost_usd\":0.5,\"worker\":\"%s\",\"deliveries\":1}",
           f->job[k], f->job[k], q->consumer);
  f->busy = true;
  ASSERT_EQ(al_fleet_queue_complete(q, f->job[k], f->epoch[k], f->entry[k], res,
                                    step_status, f),
            0);
}

/* Dead-letters the oldest pending entry: a reaper that counts every entry
 * idle (lease 0) and one delivery too many (max 0). */
static void worker_dead_letter_start(fx_t *f) {
  static al_fleet_queue_t reaper;

  reaper = f->w2;
  reaper.lease_ms = 0;
  reaper.max_deliveries = 0;
  f->busy = true;
  ASSERT_EQ(al_fleet_queue_reap(&reaper, 1, step_entries, f), 0);
}

static void write_jobs(fx_t *f, const char *rel, const char *const *ids,
                       size_t n) {
  char text[4096];
  size_t i, len = 0;

  for (i = 0; i < n; i++) {
    len += (size_t)snprintf(text + len, sizeof(text) - len,
                            "{\"id\": \"%s\", \"prompt\": \"do %s\", "
                            "\"workspace\": \"%s\"}\n",
                            ids[i], ids[i], f->root);
  }
  wire_write(f->root, rel, text);
}

static void submit_file(fx_t *f, const char *rel, const char *want) {
  char path[256];
  const char *args[] = {"batch", "submit", path, "--queue", f->url, NULL};

  snprintf(path, sizeof(path), "%s/%s", f->root, rel);
  fx_run(f, args);
  if (f->c.exit_status != 0 || strcmp(f->c.obuf, want) != 0) {
    AL_TEST_FAIL("submit %s: exit %d, want '%s'\nstdout: %s\nstderr: %s", rel,
                 (int)f->c.exit_status, want, f->c.obuf, f->c.ebuf);
  }
}

/* ---- submit -------------------------------------------------------------- */

TEST_IMPL(fleet_cli_submit_idempotent_duplicates) {
  static const char *const ids[] = {"j1", "j2", "j3", "j4"};
  fx_t f;
  char want[256];

  al_test_timeout_s(30);
  fx_start(&f, false);
  write_jobs(&f, "a.jsonl", ids, 3);
  write_jobs(&f, "b.jsonl", ids, 4);
  submit_file(&f, "a.jsonl", "3 submitted, 0 already there\n");
  submit_file(&f, "a.jsonl", "0 submitted, 3 already there\n");
  submit_file(&f, "b.jsonl", "1 submitted, 3 already there\n");
  /* Each job once on the stream, counted once, stored compact. */
  expect_cmd(&f, "XLEN", "t:jobs", "4");
  expect_cmd(&f, "GET", "t:submitted", "4");
  snprintf(want, sizeof(want),
           "{\"id\":\"j2\",\"prompt\":\"do j2\",\"workspace\":\"%s\"}", f.root);
  expect_cmd(&f, "GET", "t:job:j2", want);
  fx_finish(&f);
  return 0;
}

TEST_IMPL(fleet_cli_submit_bad_line_submits_nothing) {
  fx_t f;
  char path[256], text[1024];
  const char *args[] = {"batch", "submit", path, "--queue", f.url, NULL};

  al_test_timeout_s(30);
  fx_start(&f, false);
  snprintf(text, sizeof(text),
           "{\"id\":\"g1\",\"prompt\":\"p\",\"workspace\":\"%s\"}\n"
           "\n"
           "{\"id\":\"g2\",\"prompt\":\"p\",\"workspace\":\"%s\"}\n"
           "{\"id\":\"b3\",\"workspace\":\"%s\"}\n",
           f.root, f.root, f.root);
  wire_write(f.root, "jobs.jsonl", text);
  snprintf(path, sizeof(path), "%s/jobs.jsonl", f.root);
  fx_run(&f, args);
  ASSERT_EQ(f.c.exit_status, 2);
  if (strstr(f.c.ebuf, "jobs.jsonl:4: job b3:") == NULL) {
    AL_TEST_FAIL("stderr: %s", f.c.ebuf);
  }
  ASSERT_STR_EQ(f.c.obuf, "");
  expect_cmd(&f, "XLEN", "t:jobs", "0");
  expect_cmd(&f, "EXISTS", "t:job:g1", "0");
  expect_cmd(&f, "GET", "t:submitted", "(nil)");
  fx_finish(&f);
  return 0;
}

/* ---- results --follow ---------------------------------------------------- */

/* XREADs Redis has answered (a blocked one counts when it returns). */
static long long xread_calls(fx_t *f) {
  const char *argv[2] = {"INFO", "commandstats"};
  char *info = al_test_redis_cmd(&f->srv, 2, argv);
  const char *p = strstr(info, "cmdstat_xread:calls=");
  long long n = p != NULL ? atoll(p + 20) : 0;

  free(info);
  return n;
}

typedef struct {
  fx_t *f;
  uv_timer_t poll;
  long long idle_from; /* xread_calls when the last wait began; -1 none */
  bool poll_closed;
  unsigned reconnects; /* the worker's, before the restart */
  size_t done;         /* jobs finished by the test's worker */
  bool restart;        /* kill and restart redis after two results */
  bool restarted;
} follower_t;

static void on_poll_closed(uv_handle_t *h) {
  follower_t *w = h->data;

  w->poll_closed = true;
}

static void on_follow_poll(uv_timer_t *t) {
  follower_t *w = t->data;
  fx_t *f = w->f;
  size_t printed = lines(f->c.obuf);

  if (f->c.exits > 0 || w->done == f->n) {
    uv_close((uv_handle_t *)t, on_poll_closed);
    return;
  }
  if (f->busy || printed < w->done) {
    return; /* the last one not yet printed: the CLI must wait for it */
  }
  ASSERT_EQ(f->status, 0);
  if (w->restart && !w->restarted && w->done == 2) {
    /* The CLI is blocked in XREAD after two lines: a crash of Redis
     * (AOF, fsync always), then Redis back on the same socket. */
    w->reconnects = al_fleet_redis_reconnects(f->r);
    al_test_redis_kill(&f->srv);
    al_test_redis_restart(&f->srv);
    w->restarted = true;
  }
  /* The worker's own connection goes on once it has come back. */
  if (!al_fleet_redis_is_up(f->r) ||
      (w->restarted && al_fleet_redis_reconnects(f->r) == w->reconnects)) {
    return;
  }
  if (w->done + 1 == f->n) {
    /* Before the last one the CLI waits through an empty block: it must
     * not take a block that timed out for the end. */
    if (w->idle_from < 0) {
      w->idle_from = xread_calls(f);
      return;
    }
    if (xread_calls(f) <= w->idle_from) {
      return;
    }
    worker_dead_letter_start(f); /* the last one: a dead letter */
  } else {
    worker_complete_start(f, &f->w1, w->done);
  }
  w->done++;
}

static void follow(fx_t *f, bool restart) {
  static const char *const ids[] = {"r1", "r2", "r3", "r4"};
  const char *args[] = {"batch",    "results",         "--queue", f->url,
                        "--follow", "--output-format", "ndjson",  NULL};
  follower_t w;
  char *line, *save = NULL;
  size_t i, k = 0;
  json_t *seen = json_object();

  write_jobs(f, "jobs.jsonl", ids, 4);
  submit_file(f, "jobs.jsonl", "4 submitted, 0 already there\n");
  worker_connect(f);
  for (i = 0; i < 4; i++) {
    worker_take(f, &f->w1);
  }
  memset(&w, 0, sizeof(w));
  w.f = f;
  w.idle_from = -1;
  w.restart = restart;
  ASSERT_EQ(uv_timer_init(&f->c.loop, &w.poll), 0);
  w.poll.data = &w;
  ASSERT_EQ(uv_timer_start(&w.poll, on_follow_poll, 2, 2), 0);
  fx_run(f, args);
  if (f->c.exit_status != 0 || lines(f->c.obuf) != 4 || w.done != 4 ||
      (restart && !w.restarted)) {
    AL_TEST_FAIL(
        "results --follow: exit %d after %zu finished\nstdout: %s\n"
        "stderr: %s",
        (int)f->c.exit_status, w.done, f->c.obuf, f->c.ebuf);
  }
  /* Each line exactly the stored result, each job once, in order, the
   * dead letter last. */
  for (line = strtok_r(f->c.obuf, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save), k++) {
    char key[96];
    char *stored;

    snprintf(key, sizeof(key), "t:result:%s", f->job[k]);
    stored = fx_cmd(f, "GET", key);
    ASSERT_STR_EQ(line, stored);
    free(stored);
    ASSERT_NULL(json_object_get(seen, f->job[k]));
    json_object_set_new(seen, f->job[k], json_true());
  }
  ASSERT_EQ(k, 4);
  json_decref(seen);
  expect_cmd(f, "XLEN", "t:dead", "1");
  if (!uv_is_closing((uv_handle_t *)&w.poll)) {
    uv_close((uv_handle_t *)&w.poll, on_poll_closed);
  }
  while (!w.poll_closed) {
    uv_run(&f->c.loop, UV_RUN_ONCE);
  }
}

TEST_IMPL(fleet_cli_results_follow_until_all_done) {
  fx_t f;
  char *last;

  al_test_timeout_s(60);
  fx_start(&f, false);
  follow(&f, false);
  last = fx_cmd(&f, "GET", "t:result:r4");
  ASSERT_NOT_NULL(strstr(last, "\"outcome\":\"dead_letter\""));
  free(last);
  /* Without --follow, in text: the same four, a line each, then exit. */
  {
    const char *args[] = {"batch", "results", "--queue", f.url, NULL};

    fx_run(&f, args);
    ASSERT_EQ(f.c.exit_status, 0);
    ASSERT_EQ(lines(f.c.obuf), 4);
    ASSERT_NOT_NULL(
        strstr(f.c.obuf, "r1  done  2 turns  $0.5000  answer r1\n"));
    ASSERT_NOT_NULL(strstr(f.c.obuf, "r4  dead_letter  0 turns  -  \n"));
  }
  fx_finish(&f);
  return 0;
}

TEST_IMPL(fleet_cli_results_follow_survives_redis_restart) {
  fx_t f;

  al_test_timeout_s(60);
  fx_start(&f, true);
  follow(&f, true);
  fx_finish(&f);
  return 0;
}

/* ---- status -------------------------------------------------------------- */

TEST_IMPL(fleet_cli_status_counts) {
  static const char *const ids[] = {"s1", "s2", "s3", "s4", "s5"};
  fx_t f;
  const char *args[] = {"batch", "status", "--queue", f.url, NULL};
  const char *jargs[] = {"batch",           "status", "--queue", f.url,
                         "--output-format", "json",   NULL};
  json_t *o;

  al_test_timeout_s(60);
  fx_start(&f, false);
  write_jobs(&f, "jobs.jsonl", ids, 5);
  submit_file(&f, "jobs.jsonl", "5 submitted, 0 already there\n");
  worker_connect(&f);
  /* w1 takes s1-s3, w2 s4; s5 stays undelivered. s1 is done, s2 (the
   * oldest pending then) dead-lettered: w1 holds s3, w2 s4. */
  worker_take(&f, &f.w1);
  worker_take(&f, &f.w1);
  worker_take(&f, &f.w1);
  worker_take(&f, &f.w2);
  worker_complete_start(&f, &f.w1, 0);
  wait_step(&f);
  worker_dead_letter_start(&f);
  wait_step(&f);
  /* s4's lease runs out (its owner key gone): w2 holds it without one. */
  free(fx_cmd(&f, "DEL", "t:owner:s4"));
  fx_run(&f, args);
  ASSERT_EQ(f.c.exit_status, 0);
  if (strstr(f.c.obuf,
             "\nsubmitted: 5\ndone: 2\ndead letters: 1\n"
             "pending: 1\nrunning: 2\n  w1: 1, shortest lease "
             "left ") == NULL ||
      strstr(f.c.obuf,
             " s\n  w2: 1, 1 without a live lease\n"
             "results/min: 2 last minute, 0.2 last 10 minutes\n") == NULL) {
    AL_TEST_FAIL("status:\n%s", f.c.obuf);
  }
  /* No AOF on this server: said. */
  if (strstr(f.c.ebuf, "appendonly no") == NULL ||
      strstr(f.c.ebuf, "jobs can be lost: see docs/fleet.md") == NULL) {
    AL_TEST_FAIL("stderr: %s", f.c.ebuf);
  }
  fx_run(&f, jargs);
  ASSERT_EQ(f.c.exit_status, 0);
  o = json_loads(f.c.obuf, 0, NULL);
  ASSERT_NOT_NULL(o);
  ASSERT_EQ(json_integer_value(json_object_get(o, "submitted")), 5);
  ASSERT_EQ(json_integer_value(json_object_get(o, "done")), 2);
  ASSERT_EQ(json_integer_value(json_object_get(o, "dead")), 1);
  ASSERT_EQ(json_integer_value(json_object_get(o, "pending")), 1);
  ASSERT_EQ(json_integer_value(json_object_get(o, "running")), 2);
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(o, "running_by_consumer"), "w2")),
            1);
  ASSERT(json_is_false(json_object_get(o, "durable")));
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(json_object_get(o, "leases_by_consumer"), "w2"),
                "without_lease")),
            1);
  ASSERT_GE(json_integer_value(json_object_get(
                json_object_get(json_object_get(o, "leases_by_consumer"), "w1"),
                "shortest_left_ms")),
            1);
  json_decref(o);
  fx_finish(&f);

  /* With AOF and fsync always: no warning; an empty queue counts zeros. */
  fx_start(&f, true);
  fx_run(&f, args);
  ASSERT_EQ(f.c.exit_status, 0);
  ASSERT_STR_EQ(f.c.ebuf, "");
  ASSERT_NOT_NULL(strstr(f.c.obuf, "\nsubmitted: 0\ndone: 0\n"));
  fx_finish(&f);
  return 0;
}

/* ---- unreachable --------------------------------------------------------- */

TEST_IMPL(fleet_cli_unreachable_redis_clear_error) {
  fx_t f;
  char url[300];
  const char *args[] = {"batch", "status", "--queue", url, "--connect-timeout",
                        "0.3",   NULL};
  uint64_t t0, ms;

  al_test_timeout_s(30);
  fx_start(&f, false);
  /* A socket nobody listens on, and a refused loopback port. */
  snprintf(url, sizeof(url), "unix://%s/none.sock", f.root);
  t0 = uv_hrtime();
  fx_run(&f, args);
  ms = (uv_hrtime() - t0) / 1000000u;
  ASSERT_EQ(f.c.exit_status, 1);
  if (strstr(f.c.ebuf, "cannot reach Redis at ") == NULL ||
      strstr(f.c.ebuf, url) == NULL ||
      strstr(f.c.ebuf, "No such file or directory") == NULL) {
    AL_TEST_FAIL("stderr: %s", f.c.ebuf);
  }
  ASSERT_GE(ms, 300);
  ASSERT_LE(ms, 10000); /* bounded: not the default 5 s, not a hang */
  snprintf(url, sizeof(url), "redis://127.0.0.1:1/t");
  fx_run(&f, args);
  ASSERT_EQ(f.c.exit_status, 1);
  if (strstr(f.c.ebuf, "cannot reach Redis at redis://127.0.0.1:1/t: ") ==
      NULL) {
    AL_TEST_FAIL("stderr: %s", f.c.ebuf);
  }
  fx_finish(&f);
  return 0;
}

/* ---- results --follow and SIGINT ----------------------------------------- */

typedef struct {
  fx_t *f;
  uv_timer_t poll;
  bool sent;
  uint64_t sent_ns;
} interrupter_t;

static void on_int_poll(uv_timer_t *t) {
  interrupter_t *k = t->data;
  const char *argv[2] = {"INFO", "clients"};
  char *info;

  if (k->f->c.exits > 0) {
    uv_close((uv_handle_t *)t, NULL);
    return;
  }
  if (k->sent) {
    return;
  }
  /* The CLI is blocked in its XREAD: interrupt it there. */
  info = al_test_redis_cmd(&k->f->srv, 2, argv);
  if (strstr(info, "blocked_clients:1\r\n") != NULL) {
    ASSERT_EQ(uv_process_kill(&k->f->c.proc, SIGINT), 0);
    k->sent = true;
    k->sent_ns = uv_hrtime();
  }
  free(info);
}

TEST_IMPL(fleet_cli_results_follow_sigint_130) {
  static const char *const ids[] = {"i1"};
  fx_t f;
  const char *args[] = {"batch", "results", "--queue", f.url, "--follow", NULL};
  interrupter_t k;
  uint64_t ms;

  al_test_timeout_s(30);
  fx_start(&f, false);
  write_jobs(&f, "jobs.jsonl", ids, 1);
  submit_file(&f, "jobs.jsonl", "1 submitted, 0 already there\n");
  memset(&k, 0, sizeof(k));
  k.f = &f;
  ASSERT_EQ(uv_timer_init(&f.c.loop, &k.poll), 0);
  k.poll.data = &k;
  ASSERT_EQ(uv_timer_start(&k.poll, on_int_poll, 2, 2), 0);
  fx_run(&f, args);
  ms = (uv_hrtime() - k.sent_ns) / 1000000u;
  if (!k.sent || f.c.exit_status != 130) {
    AL_TEST_FAIL("exit %d, SIGINT %s\nstdout: %s\nstderr: %s",
                 (int)f.c.exit_status, k.sent ? "sent" : "not sent", f.c.obuf,
                 f.c.ebuf);
  }
  fprintf(stderr, "exit 130 %llu ms after SIGINT\n", (unsigned long long)ms);
  ASSERT_LE(ms, 10000);
  fx_finish(&f);
  return 0;
}

/* ---- a close drops pending commands: their data is released -------------- */

typedef struct {
  int replies;
  int releases;
} drop_t;

static void drop_reply(al_fleet_redis_t *r, int status, struct redisReply *rep,
                       void *data) {
  drop_t *d = data;

  (void)r;
  (void)status;
  (void)rep;
  d->replies++;
}

static void drop_release(void *data) {
  drop_t *d = data;

  d->releases++;
}

static void drop_submitted(int status, bool fresh, void *data) {
  (void)status;
  (void)fresh;
  AL_TEST_FAIL("a callback after close (%p)", data);
}

TEST_IMPL(fleet_redis_close_releases_dropped_commands) {
  fx_t f;
  drop_t d = {0, 0};
  const char *ping[] = {"PING"};

  al_test_timeout_s(30);
  fx_start(&f, false);
  worker_connect(&f);
  /* Pending when closed: no reply, the data released once. A queue op
   * (its own allocation) is released the same way: ASan sees no leak. */
  ASSERT_EQ(al_fleet_redis_command_rel(f.r, drop_reply, drop_release, &d, 1,
                                       ping, NULL),
            0);
  ASSERT_EQ(al_fleet_redis_command_rel(f.r, drop_reply, drop_release, &d, 1,
                                       ping, NULL),
            0);
  ASSERT_EQ(al_fleet_queue_submit(&f.w1, "x1", "{}", drop_submitted, &f), 0);
  al_fleet_redis_close(f.r, NULL);
  f.r = NULL;
  ASSERT_EQ(d.replies, 0);
  ASSERT_EQ(d.releases, 2);
  fx_finish(&f);
  ASSERT_EQ(d.replies, 0);
  ASSERT_EQ(d.releases, 2);
  return 0;
}

/* ---- many jobs: the submit window and the results pages ------------------ */

TEST_IMPL(fleet_cli_many_jobs_window_and_pages) {
  fx_t f;
  char path[256];
  const char *sargs[] = {"batch", "submit", path, "--queue", f.url, NULL};
  const char *rargs[] = {"batch",           "results", "--queue", f.url,
                         "--output-format", "ndjson",  NULL};
  const char *fargs[] = {"batch",           "results", "--queue", f.url,
                         "--output-format", "ndjson",  "--follow", NULL};
  /* A result per job, written as a worker's completion would be. */
  const char *fill[] = {
      "EVAL",
      "for i = 1, 1200 do redis.call('XADD', KEYS[1], '*', 'id', 'm' .. i,"
      " 'result', '{\"id\":\"m' .. i .. '\",\"outcome\":\"done\"}') end",
      "1", "t:results"};
  char *text, *want;
  size_t i, len = 0, wlen = 0;

  al_test_timeout_s(60);
  fx_start(&f, false);
  /* More jobs than the 256 in flight, more results than a 500 page. */
  text = malloc(1200 * 128);
  want = malloc(1200 * 64);
  ASSERT_NOT_NULL(text);
  ASSERT_NOT_NULL(want);
  for (i = 1; i <= 1200; i++) {
    len += (size_t)snprintf(text + len, 128,
                            "{\"id\":\"m%zu\",\"prompt\":\"p\","
                            "\"workspace\":\"/tmp\"}\n",
                            i);
    wlen += (size_t)snprintf(want + wlen, 64,
                             "{\"id\":\"m%zu\",\"outcome\":\"done\"}\n", i);
  }
  wire_write(f.root, "jobs.jsonl", text);
  snprintf(path, sizeof(path), "%s/jobs.jsonl", f.root);
  fx_run(&f, sargs);
  ASSERT_EQ(f.c.exit_status, 0);
  ASSERT_STR_EQ(f.c.obuf, "1200 submitted, 0 already there\n");
  expect_cmd(&f, "XLEN", "t:jobs", "1200");
  expect_cmd(&f, "GET", "t:submitted", "1200");
  free(al_test_redis_cmd(&f.srv, 4, fill));
  /* Every page, in order, each result once; --follow ends with the last. */
  fx_run(&f, rargs);
  ASSERT_EQ(f.c.exit_status, 0);
  ASSERT_EQ(f.c.olen, wlen);
  ASSERT_STR_EQ(f.c.obuf, want);
  fx_run(&f, fargs);
  ASSERT_EQ(f.c.exit_status, 0);
  ASSERT_STR_EQ(f.c.obuf, want);
  free(text);
  free(want);
  fx_finish(&f);
  return 0;
}
