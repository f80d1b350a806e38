/* issue 24, the fleet worker end to end (src/fleet/worker.c,
 * docs/fleet.md "The worker"): real agentloopd processes with --queue on a
 * real redis-server (tests/redis_server.h), an in-process
 * agentloop-mockllm, short leases. Nothing sleeps for timing: every wait
 * is for a condition (a request recorded by the mock, a key in Redis, a
 * line on a worker's stderr, a process exit), checked on a short poll,
 * with a deadline sized for a loaded 2-core machine. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "mockllm/mockllm.h"
#include "redis_server.h"
#include "session/session.h"
#include "test.h"

#define LEASE_MS 800
#define MAX_W 8

typedef struct fw_s fw_t;

typedef struct {
  fw_t *fx;
  uv_process_t proc;
  uv_pipe_t err;
  char ebuf[65536];
  size_t elen;
  bool running;
  bool err_open;
  int64_t status;
  int sig;
  char name[32];
} fw_proc_t;

struct fw_s {
  char root[64];
  char url[400];
  uv_loop_t loop;
  al_mockllm_t *mock;
  al_test_redis_t redis;
  fw_proc_t w[MAX_W];
  int nw;
  /* the wait */
  uv_timer_t poll;
  bool (*pred)(fw_t *fx, void *arg);
  void *arg;
  bool met;
};

/* ---- redis --------------------------------------------------------------- */

static char *fw_rcmd(fw_t *fx, int argc, const char **argv) {
  return al_test_redis_cmd(&fx->redis, argc, argv);
}

static char *get_key(fw_t *fx, const char *kind, const char *id) {
  char k[256];
  const char *argv[] = {"GET", k};

  snprintf(k, sizeof(k), "t:%s:%s", kind, id);
  return fw_rcmd(fx, 2, argv);
}

static bool key_exists(fw_t *fx, const char *kind, const char *id) {
  char *v = get_key(fx, kind, id);
  bool yes = v != NULL && strcmp(v, "(nil)") != 0;

  free(v);
  return yes;
}

static long long lua_int(fw_t *fx, const char *script, const char *arg) {
  const char *argv[] = {"EVAL", script, "2", "t:jobs", "t:results", "g", arg};
  char *v = fw_rcmd(fx, 7, argv);
  long long n;

  ASSERT_NOT_NULL(v);
  if (strncmp(v, "ERR", 3) == 0) {
    AL_TEST_FAIL("redis: %s", v);
  }
  n = atoll(v);
  free(v);
  return n;
}

/* Entries of P:results for this id. */
static long long results_for(fw_t *fx, const char *id) {
  return lua_int(fx,
                 "local n = 0\n"
                 "for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+'))"
                 " do if e[2][2] == ARGV[2] then n = n + 1 end end\n"
                 "return n\n",
                 id);
}

static long long pending_count(fw_t *fx) {
  return lua_int(fx,
                 "local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], "
                 "ARGV[1])\n"
                 "if not ok then return 0 end\n"
                 "return p[1]\n",
                 "");
}

static void submit(fw_t *fx, const char *id, const char *prompt) {
  char body[1024], k[128];
  const char *set[] = {"SET", k, body, "NX"};
  const char *add[] = {"XADD", "t:jobs", "*", "id", id};
  char *v;

  snprintf(k, sizeof(k), "t:job:%s", id);
  snprintf(body, sizeof(body),
           "{\"id\":\"%s\",\"prompt\":\"%s\",\"workspace\":\"%s/ws\","
           "\"base_url\":\"http://127.0.0.1:%d\"}",
           id, prompt, fx->root, al_mockllm_port(fx->mock));
  v = fw_rcmd(fx, 4, set);
  ASSERT_STR_EQ(v, "OK");
  free(v);
  v = fw_rcmd(fx, 5, add);
  ASSERT_NOT_NULL(v);
  free(v);
}

/* ---- workers ---------------------------------------------------------------
 */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  fw_proc_t *p = h->data;

  (void)hint;
  *buf =
      uv_buf_init(p->ebuf + p->elen, (unsigned)(sizeof(p->ebuf) - p->elen - 1));
}

static void on_err_closed(uv_handle_t *h) {
  fw_proc_t *p = h->data;

  p->err_open = false;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  fw_proc_t *p = s->data;

  (void)buf;
  if (n > 0) {
    p->elen += (size_t)n;
    p->ebuf[p->elen] = '\0';
  } else if (n < 0) {
    uv_close((uv_handle_t *)s, on_err_closed);
  }
}

static void on_exit_cb(uv_process_t *proc, int64_t status, int sig) {
  fw_proc_t *p = proc->data;

  p->status = status;
  p->sig = sig;
  p->running = false;
  uv_close((uv_handle_t *)proc, NULL);
}

/* A worker named wN, with extra environment (NULL-terminated, may be
 * NULL) and extra arguments. */
static fw_proc_t *spawn_worker(fw_t *fx, unsigned slots, const char *grace,
                               const char *const *xenv) {
  fw_proc_t *p;
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char bin[4096], sock[256], state[256], sessions[256], work[256], slots_s[16],
      lease_s[16];
  char cfg[256], xstate[256], rt[256];
  char *env[16];
  char *argv[40];
  int n = 0, e = 0;

  ASSERT(fx->nw < MAX_W);
  p = &fx->w[fx->nw];
  memset(p, 0, sizeof(*p));
  p->fx = fx;
  snprintf(p->name, sizeof(p->name), "w%d", fx->nw);
  fx->nw++;
  snprintf(bin, sizeof(bin), "%s/agentloopd", AL_BINARY_DIR);
  snprintf(sock, sizeof(sock), "%s/rt/%s.sock", fx->root, p->name);
  snprintf(state, sizeof(state), "%s/state-%s", fx->root, p->name);
  snprintf(sessions, sizeof(sessions), "%s/sessions", fx->root);
  snprintf(work, sizeof(work), "%s/work", fx->root);
  snprintf(slots_s, sizeof(slots_s), "%u", slots);
  snprintf(lease_s, sizeof(lease_s), "%d", LEASE_MS);
  snprintf(cfg, sizeof(cfg), "XDG_CONFIG_HOME=%s/cfg", fx->root);
  snprintf(xstate, sizeof(xstate), "XDG_STATE_HOME=%s/xstate", fx->root);
  snprintf(rt, sizeof(rt), "XDG_RUNTIME_DIR=%s/rt", fx->root);
  env[e++] = "PATH=/usr/bin:/bin";
  env[e++] = "ANTHROPIC_API_KEY=k";
  env[e++] = cfg;
  env[e++] = xstate;
  env[e++] = rt;
  while (xenv != NULL && *xenv != NULL && e < 15) {
    env[e++] = (char *)*xenv++;
  }
  env[e] = NULL;
  argv[n++] = bin;
  argv[n++] = "--foreground";
  argv[n++] = "--socket";
  argv[n++] = sock;
  argv[n++] = "--state-dir";
  argv[n++] = state;
  argv[n++] = "--queue";
  argv[n++] = fx->url;
  argv[n++] = "--group";
  argv[n++] = "g";
  argv[n++] = "--consumer";
  argv[n++] = p->name;
  argv[n++] = "--slots";
  argv[n++] = slots_s;
  argv[n++] = "--lease-ms";
  argv[n++] = lease_s;
  argv[n++] = "--sessions";
  argv[n++] = sessions;
  argv[n++] = "--work";
  argv[n++] = work;
  argv[n++] = "--drain-grace-ms";
  argv[n++] = (char *)(grace != NULL ? grace : "30000");
  argv[n] = NULL;
  ASSERT_EQ(uv_pipe_init(&fx->loop, &p->err, 0), 0);
  p->err.data = p;
  p->proc.data = p;
  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_IGNORE;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&p->err;
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  ASSERT_EQ(uv_spawn(&fx->loop, &p->proc, &po), 0);
  p->running = true;
  p->err_open = true;
  ASSERT_EQ(uv_read_start((uv_stream_t *)&p->err, on_alloc, on_read), 0);
  return p;
}

static fw_proc_t *worker_named(fw_t *fx, const char *name) {
  int i;

  for (i = 0; i < fx->nw; i++) {
    if (strcmp(fx->w[i].name, name) == 0) {
      return &fx->w[i];
    }
  }
  return NULL;
}

/* ---- waiting ----------------------------------------------------------------
 */

static void on_poll(uv_timer_t *t) {
  fw_t *fx = t->data;

  if (fx->pred(fx, fx->arg)) {
    fx->met = true;
    uv_timer_stop(t);
    uv_stop(&fx->loop);
  }
}

/* Runs the loop until pred holds; fails past ms (scaled). */
static void wait_for(fw_t *fx, bool (*pred)(fw_t *fx, void *arg), void *arg,
                     uint64_t ms, const char *what) {
  uint64_t deadline;
  int i;

  fx->pred = pred;
  fx->arg = arg;
  fx->met = false;
  uv_update_time(&fx->loop);
  deadline = uv_now(&fx->loop) + ms * (uint64_t)al_test_timeout_multiplier();
  uv_timer_start(&fx->poll, on_poll, 0, 10);
  while (!fx->met) {
    uv_run(&fx->loop, UV_RUN_ONCE);
    if (!fx->met && uv_now(&fx->loop) > deadline) {
      for (i = 0; i < fx->nw; i++) {
        fprintf(stderr, "--- %s (%s) stderr:\n%s\n", fx->w[i].name,
                fx->w[i].running ? "running" : "exited", fx->w[i].ebuf);
      }
      AL_TEST_FAIL("waited %llu ms for %s", (unsigned long long)ms, what);
    }
  }
  uv_timer_stop(&fx->poll);
}

static bool p_exited(fw_t *fx, void *arg) {
  fw_proc_t *p = arg;

  (void)fx;
  return !p->running && !p->err_open;
}

static bool p_stderr_has(fw_t *fx, void *arg) {
  const char **a = arg; /* {worker name, text} */
  fw_proc_t *p = worker_named(fx, a[0]);

  return p != NULL && strstr(p->ebuf, a[1]) != NULL;
}

static bool p_result(fw_t *fx, void *arg) {
  return key_exists(fx, "result", arg);
}

static void wait_stderr(fw_t *fx, const char *name, const char *text,
                        uint64_t ms) {
  const char *a[] = {name, text};

  wait_for(fx, p_stderr_has, a, ms, text);
}

/* The request the mock recorded of (track, response index), if any. */
static bool mock_saw(fw_t *fx, int track, int index) {
  size_t i, n = al_mockllm_record_count(fx->mock);

  for (i = 0; i < n; i++) {
    const al_mockllm_record_t *r = al_mockllm_record_get(fx->mock, i);

    if (r->track == track && r->response_index == index) {
      return true;
    }
  }
  return false;
}

typedef struct {
  int track, index;
} saw_t;

static bool p_saw(fw_t *fx, void *arg) {
  saw_t *s = arg;

  return mock_saw(fx, s->track, s->index);
}

/* ---- set-up and tear-down -------------------------------------------------
 */

static void fx_init_aof(fw_t *fx, const char *yaml, bool aof);

static void fx_init(fw_t *fx, const char *yaml) {
  fx_init_aof(fx, yaml, false);
}

static void fx_init_aof(fw_t *fx, const char *yaml, bool aof) {
  al_mockllm_options_t mo;
  char err[256], path[256];

  memset(fx, 0, sizeof(*fx));
  snprintf(fx->root, sizeof(fx->root), "/tmp/al-fw-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(fx->root));
  snprintf(path, sizeof(path), "%s/rt", fx->root);
  ASSERT_EQ(mkdir(path, 0700), 0);
  snprintf(path, sizeof(path), "%s/ws", fx->root);
  ASSERT_EQ(mkdir(path, 0700), 0);
  snprintf(path, sizeof(path), "%s/ws/MARKER-FILE", fx->root);
  {
    FILE *f = fopen(path, "w");

    ASSERT_NOT_NULL(f);
    fputs("x\n", f);
    fclose(f);
  }
  al_test_redis_start(&fx->redis, aof);
  snprintf(fx->url, sizeof(fx->url), "unix://%s?prefix=t", fx->redis.sock);
  ASSERT_EQ(uv_loop_init(&fx->loop), 0);
  ASSERT_EQ(uv_timer_init(&fx->loop, &fx->poll), 0);
  fx->poll.data = fx;
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  if (al_mockllm_new(&fx->loop, &mo, &fx->mock) != 0) {
    AL_TEST_FAIL("mockllm: %s", err);
  }
}

static void on_mock_closed(al_mockllm_t *m) {
  (void)m;
}

static void fx_finish(fw_t *fx) {
  int i;

  for (i = 0; i < fx->nw; i++) {
    if (fx->w[i].running) {
      (void)uv_process_kill(&fx->w[i].proc, SIGKILL);
      (void)uv_process_kill(&fx->w[i].proc, SIGCONT);
    }
  }
  for (i = 0; i < fx->nw; i++) {
    wait_for(fx, p_exited, &fx->w[i], 20000, "a worker's exit");
  }
  uv_close((uv_handle_t *)&fx->poll, NULL);
  al_mockllm_close(fx->mock, on_mock_closed);
  ASSERT_LOOP_CLOSES(&fx->loop);
  al_test_redis_cleanup(&fx->redis);
  (void)al_test_rm_tree(fx->root);
}

/* The transcript of a job loads with its hash chain whole. */
static void assert_chain(fw_t *fx, const char *id) {
  char path[256];
  al_tx_loaded_t l;

  snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", fx->root, id);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT(l.has_header);
  if (l.chain_breaks != 0 || l.bad_lines != 0) {
    char *text = al_test_read_file(path, NULL);

    AL_TEST_FAIL("%s: %zu chain breaks, %zu bad lines (%s):\n%s", path,
                 l.chain_breaks, l.bad_lines, l.why, text);
  }
  al__tx_loaded_free(&l);
}

static json_t *result_of(fw_t *fx, const char *id) {
  char *v = get_key(fx, "result", id);
  json_t *o = v != NULL ? json_loads(v, 0, NULL) : NULL;

  if (o == NULL) {
    AL_TEST_FAIL("job %s: no result (%s)", id, v != NULL ? v : "NULL");
  }
  free(v);
  return o;
}

/* Who owns the job now ("wN"), from the owner key "wN:epoch". */
static bool owner_of(fw_t *fx, const char *id, char *out, size_t len) {
  char *v = get_key(fx, "owner", id);
  char *colon = v != NULL ? strrchr(v, ':') : NULL;
  bool ok = v != NULL && strcmp(v, "(nil)") != 0 && colon != NULL;

  if (ok) {
    *colon = '\0';
    snprintf(out, len, "%s", v);
  }
  free(v);
  return ok;
}

/* SLOW's first reply lists the workspace (a committed turn); its second
 * request gets headers and then nothing (the worker is killed or stopped
 * there); its third, from the next owner, resumes the session. */
static const char k_slow[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'SLOW-JOB'}\n"
    "    responses:\n"
    "      - reply: {content: [{tool_use: {id: t1, name: list_directory, "
    "input: {path: '.'}}}]}\n"
    "      - fault: {stall_after_headers: true}\n"
    "      - expect_request: {contains: 'was interrupted'}\n"
    "        reply: {content: [{text: 'slow answer'}]}\n";

/* ---- F1 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_sigkill_mid_stream_taken_over) {
  fw_t fx;
  saw_t stalled = {0, 1};
  char owner[32];
  fw_proc_t *victim, *other;
  json_t *r;

  al_test_timeout_s(60);
  fx_init(&fx, k_slow);
  spawn_worker(&fx, 1, NULL, NULL);
  spawn_worker(&fx, 1, NULL, NULL);
  submit(&fx, "s1", "SLOW-JOB");
  submit(&fx, "f1", "first");
  wait_for(&fx, p_saw, &stalled, 20000, "the slow job's stalled request");
  ASSERT(owner_of(&fx, "s1", owner, sizeof(owner)));
  victim = worker_named(&fx, owner);
  ASSERT_NOT_NULL(victim);
  other = victim == &fx.w[0] ? &fx.w[1] : &fx.w[0];
  ASSERT_EQ(uv_process_kill(&victim->proc, SIGKILL), 0);
  wait_for(&fx, p_exited, victim, 10000, "the victim's exit");
  /* The other takes it over within a lease and a reap interval (the
   * deadline is wider for a loaded machine). */
  wait_for(&fx, p_result, "s1", 20000, "s1's result");
  wait_for(&fx, p_result, "f1", 20000, "f1's result");
  r = result_of(&fx, "s1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "slow answer");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), other->name);
  ASSERT(json_integer_value(json_object_get(r, "deliveries")) >= 2);
  json_decref(r);
  ASSERT_EQ(results_for(&fx, "s1"), 1);
  ASSERT_EQ(results_for(&fx, "f1"), 1);
  ASSERT(mock_saw(&fx, 0, 2));
  assert_chain(&fx, "s1");
  ASSERT_EQ(pending_count(&fx), 0);
  fx_finish(&fx);
  return 0;
}

/* ---- F2 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_sigkill_after_final_before_ack) {
  static const char *const stop[] = {
      "AGENTLOOP_TEST_FLEET_STOP_BEFORE_COMPLETE=1", NULL};
  fw_t fx;
  fw_proc_t *first;
  json_t *r;

  al_test_timeout_s(60);
  fx_init(&fx, k_slow);
  first = spawn_worker(&fx, 1, NULL, stop);
  submit(&fx, "f1", "first");
  /* It dies by its own SIGKILL once the final record is durable, before
   * the completion. */
  wait_for(&fx, p_exited, first, 20000, "the first worker's death");
  ASSERT_EQ(first->sig, SIGKILL);
  ASSERT(!key_exists(&fx, "result", "f1"));
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 1);
  spawn_worker(&fx, 1, NULL, NULL);
  wait_for(&fx, p_result, "f1", 20000, "f1's result");
  r = result_of(&fx, "f1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "fast answer");
  ASSERT(json_is_true(json_object_get(r, "recovered")));
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w1");
  json_decref(r);
  /* No model request from the next owner: the transcript had the answer. */
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 1);
  ASSERT_EQ(results_for(&fx, "f1"), 1);
  assert_chain(&fx, "f1");
  ASSERT_EQ(pending_count(&fx), 0);
  fx_finish(&fx);
  return 0;
}

/* ---- F3 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_sigstop_past_lease_writes_nothing) {
  fw_t fx;
  saw_t stalled = {0, 1};
  fw_proc_t *first;
  char path[256];
  char *before, *after;
  size_t blen, alen;
  json_t *r;

  al_test_timeout_s(60);
  fx_init(&fx, k_slow);
  first = spawn_worker(&fx, 1, NULL, NULL);
  submit(&fx, "s1", "SLOW-JOB");
  wait_for(&fx, p_saw, &stalled, 20000, "the slow job's stalled request");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGSTOP), 0);
  /* Another worker takes it over once the lease has run out, resumes it
   * and finishes it. */
  spawn_worker(&fx, 1, NULL, NULL);
  wait_for(&fx, p_result, "s1", 20000, "s1's result from the second");
  snprintf(path, sizeof(path), "%s/sessions/s1.jsonl", fx.root);
  before = al_test_read_file(path, &blen);
  ASSERT_NOT_NULL(before);
  /* The first wakes far past its lease: it must stop without writing. */
  ASSERT_EQ(uv_process_kill(&first->proc, SIGCONT), 0);
  wait_stderr(&fx, "w0", "job s1 fenced", 20000);
  after = al_test_read_file(path, &alen);
  ASSERT_NOT_NULL(after);
  if (alen != blen || memcmp(before, after, blen) != 0) {
    AL_TEST_FAIL(
        "the fenced worker wrote to the transcript (%zu bytes, "
        "then %zu):\n%s\n--- w0:\n%s",
        blen, alen, after + (alen > blen ? blen : 0), first->ebuf);
  }
  free(before);
  free(after);
  r = result_of(&fx, "s1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "slow answer");
  json_decref(r);
  ASSERT_EQ(results_for(&fx, "s1"), 1);
  assert_chain(&fx, "s1");
  fx_finish(&fx);
  return 0;
}

/* ---- F5 --------------------------------------------------------------------
 */

/* Every request of CRASH-JOB stalls; the test SIGKILLs the worker that
 * sent it (the job's owner) and starts another in its place. */
static const char k_crash[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'CRASH-JOB'}\n"
    "    responses:\n"
    "      - fault: {stall_after_headers: true}\n";

typedef struct {
  size_t seen; /* crash-job requests handled */
  int kills;
} crasher_t;

static bool p_crash_loop(fw_t *fx, void *arg) {
  crasher_t *c = arg;
  size_t i, n = al_mockllm_record_count(fx->mock), mine = 0;

  for (i = 0; i < n; i++) {
    if (al_mockllm_record_get(fx->mock, i)->track == 0) {
      mine++;
    }
  }
  if (mine > c->seen) {
    char owner[32];
    fw_proc_t *p;

    c->seen = mine;
    ASSERT(owner_of(fx, "c1", owner, sizeof(owner)));
    p = worker_named(fx, owner);
    ASSERT_NOT_NULL(p);
    ASSERT(p->running);
    ASSERT_EQ(uv_process_kill(&p->proc, SIGKILL), 0);
    c->kills++;
    spawn_worker(fx, 1, NULL, NULL);
  }
  return key_exists(fx, "result", "c1") && key_exists(fx, "result", "f1") &&
         key_exists(fx, "result", "f2");
}

TEST_IMPL(fleet_crashing_job_dead_lettered) {
  fw_t fx;
  crasher_t c = {0, 0};
  json_t *r;
  const char *xlen[] = {"XLEN", "t:dead"};
  char *v;

  al_test_timeout_s(90);
  fx_init(&fx, k_crash);
  /* One slot each: a kill takes the crashing job alone, never another job
   * with it (which would be redelivered, and dead-lettered in turn when
   * it shared a killed worker three times). */
  spawn_worker(&fx, 1, NULL, NULL);
  spawn_worker(&fx, 1, NULL, NULL);
  submit(&fx, "c1", "CRASH-JOB");
  submit(&fx, "f1", "first");
  submit(&fx, "f2", "second");
  wait_for(&fx, p_crash_loop, &c, 60000, "the crashing job's dead letter");
  /* Delivered 3 times, a worker killed each time; the 4th reap
   * dead-letters it. */
  ASSERT_EQ(c.kills, 3);
  r = result_of(&fx, "c1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")),
                "dead_letter");
  ASSERT_EQ(json_integer_value(json_object_get(r, "deliveries")), 4);
  ASSERT_NOT_NULL(
      strstr(json_string_value(json_object_get(r, "error")), "taken over"));
  json_decref(r);
  v = fw_rcmd(&fx, 2, xlen);
  if (strcmp(v, "1") != 0) {
    AL_TEST_FAIL("%s dead letters, not 1", v);
  }
  free(v);
  r = result_of(&fx, "f1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  json_decref(r);
  ASSERT_EQ(results_for(&fx, "c1"), 1);
  ASSERT_EQ(results_for(&fx, "f1"), 1);
  ASSERT_EQ(results_for(&fx, "f2"), 1);
  ASSERT_EQ(pending_count(&fx), 0);
  fx_finish(&fx);
  return 0;
}

/* ---- F7 --------------------------------------------------------------------
 */

/* The sessions directory read-only: a read-only tmpfs in a private mount
 * namespace as root (root writes through mode bits), else mode 0555. */
static bool make_readonly(const char *dir) {
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
      return false;
    }
    return mount("none", dir, "tmpfs", MS_RDONLY, "size=64k,mode=0755") == 0;
  }
  return chmod(dir, 0555) == 0;
}

static bool p_released(fw_t *fx, void *arg) {
  return key_exists(fx, "error", arg) && !key_exists(fx, "owner", arg);
}

TEST_IMPL(fleet_readonly_sessions_dir_not_acked) {
  fw_t fx;
  char dir[256], cmd[600];
  fw_proc_t *w;
  FILE *f;
  char out[4096];
  size_t n;
  char *err;

  al_test_timeout_s(60);
  fx_init(&fx, k_slow);
  snprintf(dir, sizeof(dir), "%s/sessions", fx.root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  if (!make_readonly(dir)) {
    if (al_test_ci()) {
      AL_TEST_FAIL("cannot make %s read-only", dir);
    }
    fprintf(stderr, "cannot make a read-only directory here: not run\n");
    fx_finish(&fx);
    exit(AL_TEST_SKIP_CODE);
  }
  w = spawn_worker(&fx, 1, NULL, NULL);
  submit(&fx, "r1", "first");
  submit(&fx, "r2", "second");
  wait_stderr(&fx, "w0", "stops taking jobs", 20000);
  wait_for(&fx, p_released, "r1", 20000, "r1 handed back with its error");
  /* Not acked, not completed: r1 waits in the pending list for a worker
   * that can write it; r2 was never taken. */
  ASSERT(!key_exists(&fx, "result", "r1"));
  ASSERT(!key_exists(&fx, "result", "r2"));
  ASSERT_EQ(pending_count(&fx), 1);
  err = get_key(&fx, "error", "r1");
  ASSERT_NOT_NULL(strstr(err, "transcript cannot be written"));
  free(err);
  ASSERT(w->running);
  /* And its status says so. */
  snprintf(cmd, sizeof(cmd),
           "AGENTLOOP_SOCKET=%s/rt/w0.sock XDG_RUNTIME_DIR=%s/rt "
           "%s/agentloop daemon status 2>&1",
           fx.root, fx.root, AL_BINARY_DIR);
  f = popen(cmd, "r");
  ASSERT_NOT_NULL(f);
  n = fread(out, 1, sizeof(out) - 1, f);
  out[n] = '\0';
  pclose(f);
  if (strstr(out, "intake stopped") == NULL ||
      strstr(out, "transcript cannot be written") == NULL) {
    AL_TEST_FAIL("agentloop daemon status:\n%s", out);
  }
  fx_finish(&fx);
  return 0;
}

/* ---- SIGTERM ---------------------------------------------------------------
 */

TEST_IMPL(fleet_sigterm_drains) {
  fw_t fx;
  saw_t stalled = {0, 1};
  fw_proc_t *first;
  json_t *r;

  al_test_timeout_s(60);
  fx_init(&fx, k_slow);
  first = spawn_worker(&fx, 1, "300", NULL);
  submit(&fx, "s1", "SLOW-JOB");
  wait_for(&fx, p_saw, &stalled, 20000, "the slow job's stalled request");
  submit(&fx, "f1", "first");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGTERM), 0);
  /* Its job stalls past the grace: handed back, then exit 0. */
  wait_for(&fx, p_exited, first, 20000, "the drained worker's exit");
  ASSERT_EQ(first->sig, 0);
  ASSERT_EQ(first->status, 0);
  ASSERT_NOT_NULL(strstr(first->ebuf, "draining"));
  ASSERT(!key_exists(&fx, "result", "s1"));
  ASSERT(!key_exists(&fx, "owner", "s1"));
  /* s1 pending (handed back, not acked); f1 never taken. */
  ASSERT_EQ(pending_count(&fx), 1);
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 2);
  /* The next worker takes both over at once and finishes them. */
  spawn_worker(&fx, 2, NULL, NULL);
  wait_for(&fx, p_result, "s1", 20000, "s1's result");
  wait_for(&fx, p_result, "f1", 20000, "f1's result");
  r = result_of(&fx, "s1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "slow answer");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w1");
  json_decref(r);
  ASSERT_EQ(results_for(&fx, "s1"), 1);
  ASSERT_EQ(results_for(&fx, "f1"), 1);
  assert_chain(&fx, "s1");
  fx_finish(&fx);
  return 0;
}

/* ---- Redis away ------------------------------------------------------------
 */

TEST_IMPL(fleet_redis_away_pauses_intake) {
  fw_t fx;
  fw_proc_t *w;

  al_test_timeout_s(60);
  fx_init_aof(&fx, k_slow, true);
  w = spawn_worker(&fx, 1, NULL, NULL);
  submit(&fx, "f1", "first");
  wait_for(&fx, p_result, "f1", 20000, "f1's result");
  /* Redis goes away: the worker pauses and keeps trying; it does not
   * exit. Back (AOF: the queue survives), intake resumes. */
  al_test_redis_stop(&fx.redis);
  wait_stderr(&fx, "w0", "redis is away", 20000);
  ASSERT(w->running);
  al_test_redis_restart(&fx.redis);
  wait_stderr(&fx, "w0", "redis is back", 20000);
  submit(&fx, "f2", "second");
  wait_for(&fx, p_result, "f2", 20000, "f2's result");
  ASSERT_EQ(results_for(&fx, "f1"), 1);
  ASSERT_EQ(results_for(&fx, "f2"), 1);
  ASSERT(w->running);
  fx_finish(&fx);
  return 0;
}

/* SIGINT: the same drain with no grace (the worker's grace is 30 s here;
 * the exit comes long before it). */
TEST_IMPL(fleet_sigint_hands_back_at_once) {
  fw_t fx;
  saw_t stalled = {0, 1};
  fw_proc_t *first;

  al_test_timeout_s(60);
  fx_init(&fx, k_slow);
  first = spawn_worker(&fx, 1, "30000", NULL);
  submit(&fx, "s1", "SLOW-JOB");
  wait_for(&fx, p_saw, &stalled, 20000, "the slow job's stalled request");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGINT), 0);
  wait_for(&fx, p_exited, first, 15000, "the interrupted worker's exit");
  ASSERT_EQ(first->sig, 0);
  ASSERT_EQ(first->status, 0);
  ASSERT(!key_exists(&fx, "result", "s1"));
  ASSERT(!key_exists(&fx, "owner", "s1"));
  ASSERT_EQ(pending_count(&fx), 1);
  fx_finish(&fx);
  return 0;
}

/* F3 with a sub-agent: the job's `task` child is mid-stream when its
 * worker is stopped; woken past the lease, neither the session's file nor
 * the child's beside it changes. */
static const char k_child[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'PARENT-JOB'}\n"
    "    responses:\n"
    "      - reply: {content: [{tool_use: {id: k1, name: task, input: "
    "{description: a, prompt: 'CHILD-Q', agent: explore}}}]}\n"
    "      - expect_request: {contains: 'was interrupted'}\n"
    "        reply: {content: [{text: 'parent done'}]}\n"
    "  - match: {first_user_contains: 'CHILD-Q'}\n"
    "    responses:\n"
    "      - reply: {content: [{tool_use: {id: c1, name: list_directory, "
    "input: {path: '.'}}}]}\n"
    "      - fault: {stall_after_headers: true}\n";

TEST_IMPL(fleet_sigstop_child_transcript_untouched) {
  fw_t fx;
  saw_t stalled = {1, 1};
  fw_proc_t *first;
  char dir[256];
  char *before, *after;
  json_t *r;

  al_test_timeout_s(60);
  fx_init(&fx, k_child);
  first = spawn_worker(&fx, 1, NULL, NULL);
  submit(&fx, "p1", "PARENT-JOB");
  wait_for(&fx, p_saw, &stalled, 20000, "the child's stalled request");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGSTOP), 0);
  spawn_worker(&fx, 1, NULL, NULL);
  wait_for(&fx, p_result, "p1", 20000, "p1's result from the second");
  r = result_of(&fx, "p1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "parent done");
  json_decref(r);
  snprintf(dir, sizeof(dir), "%s/sessions", fx.root);
  before = al_test_tree_listing(dir);
  ASSERT_NOT_NULL(before);
  ASSERT_EQ(uv_process_kill(&first->proc, SIGCONT), 0);
  wait_stderr(&fx, "w0", "job p1 fenced", 20000);
  after = al_test_tree_listing(dir);
  ASSERT_NOT_NULL(after);
  if (strcmp(before, after) != 0) {
    AL_TEST_FAIL("the fenced worker wrote:\nbefore:\n%s\nafter:\n%s", before,
                 after);
  }
  free(before);
  free(after);
  ASSERT_EQ(results_for(&fx, "p1"), 1);
  fx_finish(&fx);
  return 0;
}
