/* issue 24, the fleet's remaining failure tests (docs/fleet.md, "Failure
 * tests"): Redis SIGKILLed under AOF (F4), a 429 storm (F6), duplicate
 * submission (F8), a bounded chaos run of random SIGKILLs (F9) and a
 * SIGTERM drain that finishes within its grace. Real agentloopd workers
 * and the real `agentloop batch submit | results | status` on a real
 * redis-server (fleet_fx.h). Every wait is for a condition. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "test.h"
#include "unit/fleet/fleet_fx.h"

/* ---- the CLI, spawned on the fixture's loop ------------------------------
 */

typedef struct {
  uv_process_t proc;
  uv_pipe_t out, err;
  char *obuf;
  size_t olen, ocap;
  char ebuf[4096];
  size_t elen;
  char scratch[4096];
  int open; /* pipes and the process not closed yet */
  bool running;
  int64_t status;
} cli_t;

static void cli_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  cli_t *c = h->data;

  (void)hint;
  if ((uv_pipe_t *)h == &c->err) {
    if (c->elen + 1 >= sizeof(c->ebuf)) {
      *buf = uv_buf_init(c->scratch, sizeof(c->scratch));
    } else {
      *buf = uv_buf_init(c->ebuf + c->elen,
                         (unsigned)(sizeof(c->ebuf) - c->elen - 1));
    }
    return;
  }
  if (c->ocap - c->olen < 65536) {
    c->ocap = c->ocap * 2 + 65536;
    c->obuf = realloc(c->obuf, c->ocap);
    ASSERT_NOT_NULL(c->obuf);
  }
  *buf = uv_buf_init(c->obuf + c->olen, (unsigned)(c->ocap - c->olen - 1));
}

static void cli_closed(uv_handle_t *h) {
  cli_t *c = h->data;

  c->open--;
}

static void cli_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  cli_t *c = s->data;

  if (n > 0 && buf->base == c->scratch) {
    return;
  }
  if (n > 0 && s == (uv_stream_t *)&c->out) {
    c->olen += (size_t)n;
    c->obuf[c->olen] = '\0';
  } else if (n > 0) {
    c->elen += (size_t)n;
    c->ebuf[c->elen] = '\0';
  } else if (n < 0) {
    uv_close((uv_handle_t *)s, cli_closed);
  }
}

static void cli_exit(uv_process_t *p, int64_t status, int sig) {
  cli_t *c = p->data;

  c->status = sig != 0 ? 128 + sig : status;
  c->running = false;
  uv_close((uv_handle_t *)p, cli_closed);
}

/* agentloop ARGS... (NULL-terminated), output read into c. */
static void cli_start(fw_t *fx, cli_t *c, const char *const *args) {
  char bin[4096], cfg[256], st[256];
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", cfg, st, NULL};
  char *argv[24];
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  int n = 0;

  memset(c, 0, sizeof(*c));
  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  snprintf(cfg, sizeof(cfg), "XDG_CONFIG_HOME=%s/cfg", fx->root);
  snprintf(st, sizeof(st), "XDG_STATE_HOME=%s/xstate", fx->root);
  argv[n++] = bin;
  while (*args != NULL && n < 23) {
    argv[n++] = (char *)*args++;
  }
  argv[n] = NULL;
  ASSERT_EQ(uv_pipe_init(&fx->loop, &c->out, 0), 0);
  ASSERT_EQ(uv_pipe_init(&fx->loop, &c->err, 0), 0);
  c->out.data = c->err.data = c->proc.data = c;
  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&c->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&c->err;
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = cli_exit;
  ASSERT_EQ(uv_spawn(&fx->loop, &c->proc, &po), 0);
  c->running = true;
  c->open = 3;
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->out, cli_alloc, cli_read), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->err, cli_alloc, cli_read), 0);
}

static bool p_cli_done(fw_t *fx, void *arg) {
  cli_t *c = arg;

  (void)fx;
  return c->open == 0;
}

/* Waits for its exit and output; returns the status. */
static int64_t cli_wait(fw_t *fx, cli_t *c, uint64_t ms, const char *what) {
  fw_wait_for(fx, p_cli_done, c, ms, what);
  if (c->status != 0) {
    fprintf(stderr, "%s: exit %lld\nstdout:\n%s\nstderr:\n%s\n", what,
            (long long)c->status, c->obuf != NULL ? c->obuf : "", c->ebuf);
  }
  return c->status;
}

/* ---- jobs ----------------------------------------------------------------
 */

/* Writes ROOT/NAME: n jobs "<pfx>NNNN" whose prompt is "JOB <id> END". */
static void write_jobs(fw_t *fx, const char *name, const char *pfx, int n,
                       char *path, size_t len) {
  FILE *f;
  int i;

  snprintf(path, len, "%s/%s", fx->root, name);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  for (i = 0; i < n; i++) {
    fprintf(f,
            "{\"id\":\"%s%04d\",\"prompt\":\"JOB %s%04d END\","
            "\"workspace\":\"%s/ws\",\"base_url\":\"http://127.0.0.1:%d\"}\n",
            pfx, i, pfx, i, fx->root, al_mockllm_port(fx->mock));
  }
  ASSERT_EQ(fclose(f), 0);
}

static void submit_file(fw_t *fx, const char *path, cli_t *c) {
  const char *args[] = {"batch", "submit", path, "--queue", fx->url, NULL};

  cli_start(fx, c, args);
}

/* The number of first requests (one user message) the mock saw for job
 * id: a run that started (again) from nothing. */
static int first_requests(fw_t *fx, const char *id) {
  char needle[64];
  size_t i, n = al_mockllm_record_count(fx->mock);
  int k = 0;

  snprintf(needle, sizeof(needle), "JOB %s END", id);
  for (i = 0; i < n; i++) {
    const al_mockllm_record_t *r = al_mockllm_record_get(fx->mock, i);
    json_t *msgs = json_object_get(r->body, "messages");
    char *s;

    if (json_array_size(msgs) != 1) {
      continue;
    }
    s = json_dumps(msgs, JSON_COMPACT);
    k += s != NULL && strstr(s, needle) != NULL;
    free(s);
  }
  return k;
}

/* Jobs whose id is in t:results other than exactly once, of ids
 * <pfx>0000..<pfx>(n-1); and the entries t:results holds. */
static long long results_not_once(fw_t *fx, const char *pfx, int n) {
  char arg[64];

  snprintf(arg, sizeof(arg), "%s|%d", pfx, n);
  return fw_lua_int(
      fx,
      "local sep = string.find(ARGV[2], '|', 1, true)\n"
      "local pfx = string.sub(ARGV[2], 1, sep - 1)\n"
      "local n = tonumber(string.sub(ARGV[2], sep + 1))\n"
      "local seen = {}\n"
      "for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do\n"
      "  seen[e[2][2]] = (seen[e[2][2]] or 0) + 1\n"
      "end\n"
      "local bad = 0\n"
      "for i = 0, n - 1 do\n"
      "  local id = pfx .. string.format('%04d', i)\n"
      "  if seen[id] ~= 1 then bad = bad + 1 end\n"
      "  if redis.call('EXISTS', 't:result:' .. id) ~= 1 then\n"
      "    bad = bad + 1 end\n"
      "end\n"
      "return bad\n",
      arg);
}

static long long xlen(fw_t *fx, const char *key) {
  const char *argv[] = {"XLEN", key};
  char *v = fw_rcmd(fx, 2, argv);
  long long n;

  ASSERT_NOT_NULL(v);
  n = atoll(v);
  free(v);
  return n;
}

typedef struct {
  long long n;
} count_t;

static bool p_results_at_least(fw_t *fx, void *arg) {
  count_t *c = arg;

  return xlen(fx, "t:results") >= c->n;
}

/* Each id <pfx>NNNN printed once in `batch results` ndjson output. */
static void assert_printed_once(const char *out, const char *pfx, int n) {
  int i;

  for (i = 0; i < n; i++) {
    char needle[64];
    const char *p = out;
    int k = 0;

    snprintf(needle, sizeof(needle), "\"id\":\"%s%04d\"", pfx, i);
    while ((p = strstr(p, needle)) != NULL) {
      k++;
      p++;
    }
    if (k != 1) {
      AL_TEST_FAIL("%s%04d printed %d times by batch results", pfx, i, k);
    }
  }
}

static const char k_plain[] =
    "responses:\n"
    "  - reply: {content: [{text: 'plain answer'}]}\n";

/* ---- SIGTERM within the grace ---------------------------------------------
 */

/* DRAIN-JOB streams its answer over about a second; the grace (30 s) is
 * far longer. */
static const char k_drain[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'DRAIN-JOB'}\n"
    "    responses:\n"
    "      - delay_ms: 120\n"
    "        reply: {content: [{text: 'drained in time', chunks: 8}]}\n";

TEST_IMPL(fleet_sigterm_drain_finishes_within_grace) {
  fw_t fx;
  fw_saw_t streaming = {0, 0};
  fw_proc_t *w;
  json_t *r;

  al_test_timeout_s(60);
  fw_init(&fx, k_drain);
  /* Two slots: one stays free, so intake would take the next job if the
   * drain did not stop it. */
  w = fw_spawn_worker(&fx, 2, "30000", NULL);
  fw_submit(&fx, "d1", "DRAIN-JOB");
  fw_wait_for(&fx, fw_p_saw, &streaming, 20000, "d1's request");
  ASSERT_EQ(uv_process_kill(&w->proc, SIGTERM), 0);
  fw_wait_stderr(&fx, "w0", "draining", 20000);
  fw_submit(&fx, "f1", "first");
  fw_wait_for(&fx, fw_p_exited, w, 30000, "the drained worker's exit");
  ASSERT_EQ(w->sig, 0);
  ASSERT_EQ(w->status, 0);
  /* d1 finished by w0 within the grace; f1 never taken. */
  r = fw_result_of(&fx, "d1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")),
                "drained in time");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w0");
  ASSERT_EQ(json_integer_value(json_object_get(r, "deliveries")), 1);
  json_decref(r);
  ASSERT_EQ(fw_results_for(&fx, "d1"), 1);
  ASSERT(!fw_key_exists(&fx, "result", "f1"));
  ASSERT(!fw_key_exists(&fx, "owner", "d1"));
  ASSERT_EQ(fw_pending_count(&fx), 0); /* d1 acked; f1 never delivered */
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 1);
  fw_assert_chain(&fx, "d1");
  fw_finish(&fx);
  return 0;
}

/* ---- F8 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_duplicate_submission_one_run) {
  fw_t fx;
  char a[256], b[256];
  cli_t s1, s2, res;
  const char *rargs[] = {"batch",    "results",         "--queue", NULL,
                         "--follow", "--output-format", "ndjson",  NULL};
  unsigned long long sa = 0, sb = 0, xa = 0, xb = 0;
  int i;

  al_test_timeout_s(60);
  fw_init(&fx, k_plain);
  write_jobs(&fx, "a.jsonl", "a", 8, a, sizeof(a));
  write_jobs(&fx, "b.jsonl", "b", 8, b, sizeof(b));
  fw_spawn_worker(&fx, 2, NULL, NULL);
  fw_spawn_worker(&fx, 2, NULL, NULL);
  /* The same file twice in a row: the second adds nothing. */
  submit_file(&fx, a, &s1);
  ASSERT_EQ(cli_wait(&fx, &s1, 20000, "submit a"), 0);
  ASSERT_NOT_NULL(strstr(s1.obuf, "8 submitted, 0 already there"));
  free(s1.obuf);
  submit_file(&fx, a, &s1);
  ASSERT_EQ(cli_wait(&fx, &s1, 20000, "submit a again"), 0);
  ASSERT_NOT_NULL(strstr(s1.obuf, "0 submitted, 8 already there"));
  free(s1.obuf);
  /* Another file from two processes at once: each job is submitted by one
   * of them. */
  submit_file(&fx, b, &s1);
  submit_file(&fx, b, &s2);
  ASSERT_EQ(cli_wait(&fx, &s1, 20000, "submit b (1)"), 0);
  ASSERT_EQ(cli_wait(&fx, &s2, 20000, "submit b (2)"), 0);
  ASSERT_EQ(sscanf(s1.obuf, "%llu submitted, %llu", &sa, &xa), 2);
  ASSERT_EQ(sscanf(s2.obuf, "%llu submitted, %llu", &sb, &xb), 2);
  if (sa + sb != 8 || xa + xb != 8) {
    AL_TEST_FAIL("concurrent submits: %s / %s", s1.obuf, s2.obuf);
  }
  free(s1.obuf);
  free(s2.obuf);
  rargs[3] = fx.url;
  cli_start(&fx, &res, rargs);
  ASSERT_EQ(cli_wait(&fx, &res, 30000, "batch results --follow"), 0);
  assert_printed_once(res.obuf, "a", 8);
  assert_printed_once(res.obuf, "b", 8);
  free(res.obuf);
  ASSERT_EQ(results_not_once(&fx, "a", 8), 0);
  ASSERT_EQ(results_not_once(&fx, "b", 8), 0);
  ASSERT_EQ(xlen(&fx, "t:results"), 16);
  for (i = 0; i < 8; i++) {
    char id[16];

    snprintf(id, sizeof(id), "a%04d", i);
    ASSERT_EQ(first_requests(&fx, id), 1);
    snprintf(id, sizeof(id), "b%04d", i);
    ASSERT_EQ(first_requests(&fx, id), 1);
  }
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 16);
  fw_finish(&fx);
  return 0;
}

/* ---- F4 --------------------------------------------------------------------
 */

/* Each job streams for about half a second, so Redis dies under running
 * jobs (and under completions). */
static const char k_slowish[] =
    "responses:\n"
    "  - delay_ms: 60\n"
    "    reply: {content: [{text: 'steady answer', chunks: 8}]}\n";

#define F4_JOBS 40

TEST_IMPL(fleet_redis_aof_restart_loses_no_job) {
  fw_t fx;
  char path[256];
  cli_t sub, res;
  const char *rargs[] = {"batch",    "results",         "--queue", NULL,
                         "--follow", "--output-format", "ndjson",  NULL};
  count_t at;
  int i;

  al_test_timeout_s(120);
  fw_init_aof(&fx, k_slowish, true);
  write_jobs(&fx, "jobs.jsonl", "j", F4_JOBS, path, sizeof(path));
  fw_spawn_worker(&fx, 4, NULL, NULL);
  fw_spawn_worker(&fx, 4, NULL, NULL);
  submit_file(&fx, path, &sub);
  ASSERT_EQ(cli_wait(&fx, &sub, 20000, "submit"), 0);
  free(sub.obuf);
  rargs[3] = fx.url;
  cli_start(&fx, &res, rargs);
  /* Two crashes of Redis while jobs run, each restarted on its directory
   * (the AOF fsynced before every answer). */
  at.n = 6;
  fw_wait_for(&fx, p_results_at_least, &at, 30000, "6 results");
  al_test_redis_kill(&fx.redis);
  al_test_redis_restart(&fx.redis);
  at.n = 20;
  fw_wait_for(&fx, p_results_at_least, &at, 60000, "20 results");
  al_test_redis_kill(&fx.redis);
  al_test_redis_restart(&fx.redis);
  ASSERT_EQ(cli_wait(&fx, &res, 60000, "batch results --follow"), 0);
  assert_printed_once(res.obuf, "j", F4_JOBS);
  free(res.obuf);
  ASSERT_EQ(results_not_once(&fx, "j", F4_JOBS), 0);
  ASSERT_EQ(xlen(&fx, "t:results"), F4_JOBS);
  ASSERT_EQ(xlen(&fx, "t:dead"), 0);
  ASSERT_EQ(fw_pending_count(&fx), 0);
  for (i = 0; i < F4_JOBS; i++) {
    char id[16];
    json_t *r;

    snprintf(id, sizeof(id), "j%04d", i);
    r = fw_result_of(&fx, id);
    ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
    json_decref(r);
  }
  /* The workers rode both crashes out. */
  ASSERT(fx.w[0].running);
  ASSERT(fx.w[1].running);
  fw_finish(&fx);
  return 0;
}

/* ---- F6 --------------------------------------------------------------------
 */

#define F6_SLOTS 6
#define F6_JOBS 24
#define F6_STORM_MS 3000

static const char k_storm[] =
    "responses:\n"
    "  - fault: {status: 429, retry_after: 1}\n";

typedef struct {
  uint64_t until;
} clock_t_;

static bool p_first_request(fw_t *fx, void *arg) {
  (void)arg;
  return al_mockllm_record_count(fx->mock) > 0;
}

static bool p_past(fw_t *fx, void *arg) {
  clock_t_ *c = arg;

  return uv_now(&fx->loop) >= c->until;
}

static bool p_calm(fw_t *fx, void *arg) {
  al_mockllm_scenario_t *s = *(al_mockllm_scenario_t **)arg;

  /* AL_EBUSY while a response plays: tried again on the next poll. */
  if (al_mockllm_set_scenario(fx->mock, s) == 0) {
    *(al_mockllm_scenario_t **)arg = NULL;
    return true;
  }
  return false;
}

TEST_IMPL(fleet_429_storm_paced) {
  fw_t fx;
  char path[256], err[256];
  cli_t sub;
  clock_t_ storm;
  al_mockllm_scenario_t *calm = NULL;
  size_t during, bound;
  int i;

  al_test_timeout_s(120);
  fw_init(&fx, k_storm);
  ASSERT_EQ(al_mockllm_load_scenario_string(k_plain, strlen(k_plain), "calm",
                                            &calm, err, sizeof(err)),
            0);
  write_jobs(&fx, "jobs.jsonl", "s", F6_JOBS, path, sizeof(path));
  submit_file(&fx, path, &sub);
  ASSERT_EQ(cli_wait(&fx, &sub, 20000, "submit"), 0);
  free(sub.obuf);
  fw_spawn_worker(&fx, F6_SLOTS, NULL, NULL);
  fw_spawn_worker(&fx, F6_SLOTS, NULL, NULL);
  /* The storm: every request is a 429 with retry-after 1 s, for a window
   * of the test's clock from the first request. */
  fw_wait_for(&fx, p_first_request, NULL, 20000, "the first request");
  storm.until = uv_now(&fx.loop) + F6_STORM_MS;
  fw_wait_for(&fx, p_past, &storm, F6_STORM_MS + 20000, "the storm's end");
  during = al_mockllm_record_count(fx.mock);
  fw_wait_for(&fx, p_calm, &calm, 20000, "the calm scenario in place");
  /* Paced per endpoint and key within a worker: each sends its first
   * slots' requests (in flight before the first 429 came back), then one
   * probe per cool-down. Each job retrying on its own would send about
   * jobs in flight x (window / cool-down) = 12 x 3 more. */
  bound = 2 * (F6_SLOTS + F6_STORM_MS / 1000 + 2);
  fprintf(stderr, "429 storm: %zu requests in %d ms (bound %zu)\n", during,
          F6_STORM_MS, bound);
  if (during > bound) {
    AL_TEST_FAIL(
        "a retry storm: %zu requests during the %d ms storm, more "
        "than %zu",
        during, F6_STORM_MS, bound);
  }
  /* Then every job finishes, once. */
  {
    count_t all = {F6_JOBS};

    fw_wait_for(&fx, p_results_at_least, &all, 60000, "every result");
  }
  ASSERT_EQ(results_not_once(&fx, "s", F6_JOBS), 0);
  for (i = 0; i < F6_JOBS; i++) {
    char id[16];
    json_t *r;

    snprintf(id, sizeof(id), "s%04d", i);
    r = fw_result_of(&fx, id);
    if (strcmp(json_string_value(json_object_get(r, "outcome")), "done") != 0) {
      char *s = json_dumps(r, 0);

      AL_TEST_FAIL("job %s: %s", id, s);
    }
    json_decref(r);
  }
  ASSERT_EQ(xlen(&fx, "t:dead"), 0);
  fw_finish(&fx);
  return 0;
}

/* ---- F9 --------------------------------------------------------------------
 */

#define F9_WORKERS 4
#define F9_SLOTS 8

typedef struct {
  unsigned seed;
  int kills, max_kills;
  long long at[64];     /* result counts at which to kill, ascending */
  int live[F9_WORKERS]; /* fixture indices of the live workers */
  long long total;
} chaos_t;

/* xorshift32: the same kills for the same seed. */
static unsigned chaos_rand(chaos_t *c) {
  c->seed ^= c->seed << 13;
  c->seed ^= c->seed >> 17;
  c->seed ^= c->seed << 5;
  return c->seed;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;

  return x < y ? -1 : x > y;
}

/* Kills a random live worker when the results pass the next mark, and
 * starts another in its place (a new consumer name); done when every job
 * has its result. */
static bool p_chaos(fw_t *fx, void *arg) {
  chaos_t *c = arg;
  long long n = xlen(fx, "t:results");

  if (c->kills < c->max_kills && n >= c->at[c->kills]) {
    int k = (int)(chaos_rand(c) % F9_WORKERS);
    fw_proc_t *p = &fx->w[c->live[k]];

    ASSERT(p->running);
    ASSERT_EQ(uv_process_kill(&p->proc, SIGKILL), 0);
    c->kills++;
    c->live[k] = fx->nw;
    fw_spawn_worker(fx, F9_SLOTS, NULL, NULL);
  }
  return c->kills == c->max_kills && n >= c->total;
}

TEST_IMPL(fleet_chaos_random_sigkills) {
  fw_t *fx = calloc(1, sizeof(*fx));
  chaos_t c;
  char path[256], *env_seed = getenv("AL_CHAOS_SEED");
  const char *sargs[] = {"batch", "status",          "--queue", NULL, "--group",
                         "g",     "--output-format", "json",    NULL};
  cli_t sub, st;
  json_t *s;
  int jobs, i, dead = 0, taken_over = 0, checked = 0;
  uint64_t t0;

  ASSERT_NOT_NULL(fx);
  al_test_timeout_s(300);
  memset(&c, 0, sizeof(c));
  c.seed = env_seed != NULL ? (unsigned)strtoul(env_seed, NULL, 10)
                            : (unsigned)time(NULL) ^ (unsigned)getpid();
  if (c.seed == 0) {
    c.seed = 1;
  }
  /* Under a slowed build (ASan, valgrind) a quarter of the jobs and a
   * third of the kills, so the run keeps to its CI budget. */
  jobs = al_test_timeout_multiplier() > 1 ? 500 : 2000;
  c.max_kills = al_test_timeout_multiplier() > 1 ? 10 : 30;
  c.total = jobs;
  fprintf(stderr,
          "chaos: %d jobs, %d workers of %d slots, %d SIGKILLs, seed %u "
          "(AL_CHAOS_SEED=%u to replay the marks)\n",
          jobs, F9_WORKERS, F9_SLOTS, c.max_kills, c.seed, c.seed);
  /* The marks: result counts drawn from 1% to 90% of the jobs. */
  for (i = 0; i < c.max_kills; i++) {
    c.at[i] =
        jobs / 100 + (long long)(chaos_rand(&c) % (unsigned)(jobs * 89 / 100));
  }
  qsort(c.at, (size_t)c.max_kills, sizeof(c.at[0]), cmp_ll);
  fw_init(fx, k_plain);
  write_jobs(fx, "jobs.jsonl", "c", jobs, path, sizeof(path));
  submit_file(fx, path, &sub);
  ASSERT_EQ(cli_wait(fx, &sub, 30000, "submit"), 0);
  free(sub.obuf);
  uv_update_time(&fx->loop);
  t0 = uv_now(&fx->loop);
  for (i = 0; i < F9_WORKERS; i++) {
    c.live[i] = fx->nw;
    fw_spawn_worker(fx, F9_SLOTS, NULL, NULL);
  }
  fw_wait_for(fx, p_chaos, &c, 240000, "every job's result under the kills");
  uv_update_time(&fx->loop);
  fprintf(stderr, "chaos: %d jobs done in %llu ms with %d SIGKILLs\n", jobs,
          (unsigned long long)(uv_now(&fx->loop) - t0), c.kills);
  /* Every job exactly one result, in the stream and in its key. */
  ASSERT_EQ(xlen(fx, "t:results"), jobs);
  ASSERT_EQ(results_not_once(fx, "c", jobs), 0);
  for (i = 0; i < jobs; i++) {
    char id[16];
    json_t *r;
    const char *outcome;
    json_int_t deliveries;

    snprintf(id, sizeof(id), "c%04d", i);
    r = fw_result_of(fx, id);
    outcome = json_string_value(json_object_get(r, "outcome"));
    deliveries = json_integer_value(json_object_get(r, "deliveries"));
    if (outcome != NULL && strcmp(outcome, "dead_letter") == 0) {
      /* Only a job whose owner was killed under it on each of its
       * max_deliveries (3) deliveries. */
      dead++;
      fprintf(stderr, "chaos: %s dead-lettered after %lld deliveries\n", id,
              (long long)deliveries);
      ASSERT(deliveries > 3);
    } else {
      ASSERT_STR_EQ(outcome, "done");
      /* Every transcript taken over, and one in 20 of the others. */
      if (deliveries > 1 || i % 20 == 0) {
        taken_over += deliveries > 1;
        fw_assert_chain(fx, id);
        checked++;
      }
    }
    json_decref(r);
  }
  fprintf(stderr,
          "chaos: %d taken over, %d dead letters, %d transcripts' chains "
          "verified\n",
          taken_over, dead, checked);
  ASSERT_EQ(xlen(fx, "t:dead"), dead);
  ASSERT_EQ(fw_pending_count(fx), 0);
  /* The status agrees. */
  sargs[3] = fx->url;
  cli_start(fx, &st, sargs);
  ASSERT_EQ(cli_wait(fx, &st, 20000, "batch status"), 0);
  s = json_loads(st.obuf, 0, NULL);
  if (s == NULL) {
    AL_TEST_FAIL("batch status: %s", st.obuf);
  }
  ASSERT_EQ(json_integer_value(json_object_get(s, "submitted")), jobs);
  ASSERT_EQ(json_integer_value(json_object_get(s, "done")), jobs);
  ASSERT_EQ(json_integer_value(json_object_get(s, "dead")), dead);
  ASSERT_EQ(json_integer_value(json_object_get(s, "running")), 0);
  /* Queued counts the stream's entries (kept); none undelivered. */
  ASSERT_EQ(json_integer_value(json_object_get(s, "queued")), jobs);
  ASSERT_EQ(json_integer_value(json_object_get(s, "pending")), 0);
  json_decref(s);
  free(st.obuf);
  for (i = 0; i < F9_WORKERS; i++) {
    ASSERT(fx->w[c.live[i]].running);
  }
  fw_finish(fx);
  free(fx);
  return 0;
}
