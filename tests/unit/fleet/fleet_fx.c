/* The fleet end-to-end fixture (fleet_fx.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session/session.h"
#include "test.h"
#include "unit/fleet/fleet_fx.h"

/* ---- redis --------------------------------------------------------------- */

char *fw_rcmd(fw_t *fx, int argc, const char **argv) {
  return al_test_redis_cmd(&fx->redis, argc, argv);
}

char *fw_get_key(fw_t *fx, const char *kind, const char *id) {
  char k[256];
  const char *argv[] = {"GET", k};

  snprintf(k, sizeof(k), "t:%s:%s", kind, id);
  return fw_rcmd(fx, 2, argv);
}

bool fw_key_exists(fw_t *fx, const char *kind, const char *id) {
  char *v = fw_get_key(fx, kind, id);
  bool yes = v != NULL && strcmp(v, "(nil)") != 0;

  free(v);
  return yes;
}

long long fw_lua_int(fw_t *fx, const char *script, const char *arg) {
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
long long fw_results_for(fw_t *fx, const char *id) {
  return fw_lua_int(
      fx,
      "local n = 0\n"
      "for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+'))"
      " do if e[2][2] == ARGV[2] then n = n + 1 end end\n"
      "return n\n",
      id);
}

long long fw_pending_count(fw_t *fx) {
  return fw_lua_int(fx,
                    "local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], "
                    "ARGV[1])\n"
                    "if not ok then return 0 end\n"
                    "return p[1]\n",
                    "");
}

void fw_submit(fw_t *fx, const char *id, const char *prompt) {
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
  if (sizeof(p->ebuf) - p->elen - 1 == 0) {
    /* Full: drain into scratch so a chatty worker never meets a closed
     * pipe (its tail is dropped, the head kept for a failure's report). */
    *buf = uv_buf_init(p->scratch, sizeof(p->scratch));
    return;
  }
  *buf =
      uv_buf_init(p->ebuf + p->elen, (unsigned)(sizeof(p->ebuf) - p->elen - 1));
}

static void on_err_closed(uv_handle_t *h) {
  fw_proc_t *p = h->data;

  p->err_open = false;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  fw_proc_t *p = s->data;

  if (n > 0 && buf->base == p->scratch) {
    return;
  }
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
fw_proc_t *fw_spawn_worker(fw_t *fx, unsigned slots, const char *grace,
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

fw_proc_t *fw_worker_named(fw_t *fx, const char *name) {
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
void fw_wait_for(fw_t *fx, bool (*pred)(fw_t *fx, void *arg), void *arg,
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

bool fw_p_exited(fw_t *fx, void *arg) {
  fw_proc_t *p = arg;

  (void)fx;
  return !p->running && !p->err_open;
}

bool fw_p_stderr_has(fw_t *fx, void *arg) {
  const char **a = arg; /* {worker name, text} */
  fw_proc_t *p = fw_worker_named(fx, a[0]);

  return p != NULL && strstr(p->ebuf, a[1]) != NULL;
}

bool fw_p_result(fw_t *fx, void *arg) {
  return fw_key_exists(fx, "result", arg);
}

void fw_wait_stderr(fw_t *fx, const char *name, const char *text, uint64_t ms) {
  const char *a[] = {name, text};

  fw_wait_for(fx, fw_p_stderr_has, a, ms, text);
}

/* The request the mock recorded of (track, response index), if any. */
bool fw_mock_saw(fw_t *fx, int track, int index) {
  size_t i, n = al_mockllm_record_count(fx->mock);

  for (i = 0; i < n; i++) {
    const al_mockllm_record_t *r = al_mockllm_record_get(fx->mock, i);

    if (r->track == track && r->response_index == index) {
      return true;
    }
  }
  return false;
}

bool fw_p_saw(fw_t *fx, void *arg) {
  fw_saw_t *s = arg;

  return fw_mock_saw(fx, s->track, s->index);
}

/* ---- set-up and tear-down -------------------------------------------------
 */

void fw_init(fw_t *fx, const char *yaml) {
  fw_init_aof(fx, yaml, false);
}

void fw_init_aof(fw_t *fx, const char *yaml, bool aof) {
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

void fw_finish(fw_t *fx) {
  int i;

  for (i = 0; i < fx->nw; i++) {
    if (fx->w[i].running) {
      (void)uv_process_kill(&fx->w[i].proc, SIGKILL);
      (void)uv_process_kill(&fx->w[i].proc, SIGCONT);
    }
  }
  for (i = 0; i < fx->nw; i++) {
    fw_wait_for(fx, fw_p_exited, &fx->w[i], 20000, "a worker's exit");
  }
  uv_close((uv_handle_t *)&fx->poll, NULL);
  al_mockllm_close(fx->mock, on_mock_closed);
  ASSERT_LOOP_CLOSES(&fx->loop);
  al_test_redis_cleanup(&fx->redis);
  (void)al_test_rm_tree(fx->root);
}

/* The transcript of a job loads with its hash chain whole. */
void fw_assert_chain(fw_t *fx, const char *id) {
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

json_t *fw_result_of(fw_t *fx, const char *id) {
  char *v = fw_get_key(fx, "result", id);
  json_t *o = v != NULL ? json_loads(v, 0, NULL) : NULL;

  if (o == NULL) {
    AL_TEST_FAIL("job %s: no result (%s)", id, v != NULL ? v : "NULL");
  }
  free(v);
  return o;
}

/* Who owns the job now ("wN"), from the owner key "wN:epoch". */
bool fw_owner_of(fw_t *fx, const char *id, char *out, size_t len) {
  char *v = fw_get_key(fx, "owner", id);
  char *colon = v != NULL ? strrchr(v, ':') : NULL;
  bool ok = v != NULL && strcmp(v, "(nil)") != 0 && colon != NULL;

  if (ok) {
    *colon = '\0';
    snprintf(out, len, "%s", v);
  }
  free(v);
  return ok;
}
