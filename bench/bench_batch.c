/* `agentloop-bench batch`: many agent jobs at once (issue 24), the same N
 * jobs of a fixed 3-turn tool scenario run several ways in one run, against
 * one agentloop-mockllm served in this process (on a thread of its own, so
 * this thread can spawn and wait for the processes it measures):
 *   batch  `agentloop batch run JOBS --out DIR -j C`, one process;
 *   run    the reference: each job an `agentloop run` process, C at a time
 *          (what harnesses do with agent CLIs today);
 *   fleet  a redis-server on a unix socket, 2 `agentloopd --queue` workers
 *          with C/2 slots each, `agentloop batch submit` then
 *          `agentloop batch results --follow`;
 *   claude, codex  (bench/compare.sh --batch) each job a `claude -p` /
 *          `codex exec` process, C at a time, when given their paths.
 * Every job's conversation is its own track of the mock (matched by the
 * job's marker in its first user message): a read_file of the job's
 * workspace, a glob, then the final text. Reported per mode: jobs/hour
 * (from the median wall time over the repeats) and its ratio to `run` of
 * the same run, CPU seconds per job (the processes' own rusage, their
 * reaped descendants included, the mock's excluded, the fleet's
 * redis-server included), each process's own peak RSS (VmHWM, read while
 * it runs) and memory per concurrent session.
 *
 * `rss`: RSS per in-flight session. K jobs whose first turn runs `bash`
 * (so each session's warm sandbox pool exists) and whose second reply the
 * mock holds --hold-ms before its first byte, all K at once: (peak RSS with
 * K - peak RSS with 1) / (K - 1), each peak the median over --repeat.
 * Goal <= 256 KiB.
 *
 * `queue`: the fleet primitives (src/fleet) per job against a real
 * redis-server on a unix socket, on one loop, pipelined as a worker does
 * (submit all; then read at most W entries, claim, renew, complete each),
 * beside the same number of bare PING round trips (5 per job, W in flight).
 * Goal <= 1 ms per job. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <uv.h>

#include "bench.h"
#include "bench_util.h"
#include "fleet/fleet.h"
#include "mockllm/mockllm.h"

#define TARGET_SESSION_KIB 256.0
#define TARGET_QUEUE_MS 1.0
#define MAX_MODES 5
#define MAX_REPEAT 32
#define WORKER_WAIT_MS 20000

enum { M_BATCH = 0, M_RUN, M_FLEET, M_CLAUDE, M_CODEX };
static const char *const mode_names[MAX_MODES] = {"batch", "run", "fleet",
                                                  "claude", "codex"};

typedef struct {
  size_t jobs;
  unsigned conc;
  unsigned repeat;
  bool modes[MAX_MODES];
  bool do_jobs, do_rss, do_queue;
  unsigned rss_k[4];
  size_t n_rss_k;
  unsigned hold_ms;
  size_t queue_jobs;
  unsigned queue_window;
  const char *json_path;
  const char *claude;
  const char *codex;
  bool keep;
} opts_t;

/* ---- one measured mode run --------------------------------------------- */

typedef struct {
  bool ran;
  bool unavailable;
  char why[256];
  size_t ok;        /* jobs that ended done with 3 turns */
  double wall_s;    /* first spawn -> last exit */
  double cpu_s;     /* every process of the mode */
  double cpu_aux_s; /* of that: redis-server (fleet) */
  long rss_kb;      /* batch: the process; run/peers: the largest one */
  long rss_med_kb;  /* run/peers: the median process */
  long rss_worker_kb[2];
  uint64_t invalid; /* requests the mock refused */
} result_t;

/* snprintf whose truncation is accepted: every path here is under a
 * 64-byte mkdtemp root or the build directory, and a message cut short is
 * still a message. */
static int bfmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bfmt(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  return n;
}

/* ---- paths and the environment ------------------------------------------ */

static char g_bin[PATH_MAX]; /* the build directory (this binary's) */
/* --timeout: a mode's process (a process per job: the whole pool) is
 * killed past it and its jobs count as not done. */
static unsigned g_timeout_ms = 1800000;
/* agentloop and agentloopd: beside this binary unless --agentloop /
 * --agentloopd name others (a build of another branch). */
static char g_exe_agentloop[PATH_MAX + 16];
static char g_exe_agentloopd[PATH_MAX + 16];
static char g_root[64]; /* a temp directory for everything (mkdtemp) */

static double now_s(void) {
  return (double)uv_hrtime() / 1e9;
}

static double tv_s(const struct timeval *tv) {
  return (double)tv->tv_sec + (double)tv->tv_usec / 1e6;
}

static double ru_cpu(const struct rusage *ru) {
  return tv_s(&ru->ru_utime) + tv_s(&ru->ru_stime);
}

static void msleep(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");

  if (f == NULL) {
    return -1;
  }
  fputs(text, f);
  return fclose(f);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = NULL;
  size_t len = 0, cap = 0, n;

  if (f == NULL) {
    return NULL;
  }
  do {
    if (len + 4096 + 1 > cap) {
      char *nb;

      cap = cap ? cap * 2 : 8192;
      nb = realloc(buf, cap);
      if (nb == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
    }
    n = fread(buf + len, 1, 4096, f);
    len += n;
  } while (n > 0);
  fclose(f);
  buf[len] = '\0';
  return buf;
}

static int rm_rf(const char *path) {
  char cmd[PATH_MAX + 32];

  bfmt(cmd, sizeof(cmd), "rm -rf '%s'", path);
  return system(cmd);
}

static int mkdirs(const char *path) {
  char cmd[PATH_MAX + 32];

  bfmt(cmd, sizeof(cmd), "mkdir -p '%s'", path);
  return system(cmd) == 0 ? 0 : -1;
}

/* The children's environment: a private HOME and XDG directories under the
 * run's root, a key for the peers (the mock needs none), no colour. */
typedef struct {
  char *v[24];
  size_t n;
  char store[24][PATH_MAX + 64];
} env_t;

static void env_add(env_t *e, const char *fmt, const char *a) {
  if (e->n + 1 >= sizeof(e->v) / sizeof(e->v[0])) {
    return;
  }
  bfmt(e->store[e->n], sizeof(e->store[0]), fmt, a);
  e->v[e->n] = e->store[e->n];
  e->n++;
  e->v[e->n] = NULL;
}

static void env_base(env_t *e, const char *url) {
  const char *path = getenv("PATH");

  e->n = 0;
  e->v[0] = NULL;
  env_add(e, "PATH=%s", path != NULL ? path : "/usr/bin:/bin");
  env_add(e, "HOME=%s/home", g_root);
  env_add(e, "XDG_CONFIG_HOME=%s/home/.config", g_root);
  env_add(e, "XDG_STATE_HOME=%s/home/.state", g_root);
  env_add(e, "XDG_RUNTIME_DIR=%s/home/.run", g_root);
  env_add(e, "CODEX_HOME=%s/home/.codex", g_root);
  env_add(e, "NO_COLOR=%s", "1");
  env_add(e, "ANTHROPIC_BASE_URL=%s", url);
  env_add(e, "ANTHROPIC_API_KEY=%s", "sk-bench");
  env_add(e, "OPENAI_API_KEY=%s", "sk-bench");
  /* claude: no update check, telemetry or other traffic off the mock. */
  env_add(e, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=%s", "1");
  env_add(e, "DISABLE_AUTOUPDATER=%s", "1");
  env_add(e, "DISABLE_TELEMETRY=%s", "1");
}

/* fork + execve, stdout to out (NULL: /dev/null, appended), stderr to err
 * (appended), in cwd (NULL: here). The child dies with this process. */
static pid_t spawn(char *const argv[], char *const envp[], const char *cwd,
                   const char *out, const char *err) {
  pid_t parent = getpid();
  pid_t pid = fork();

  if (pid != 0) {
    return pid;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) {
    _exit(126);
  }
  {
    int fi = open("/dev/null", O_RDONLY);
    int fo = open(out != NULL ? out : "/dev/null",
                  O_WRONLY | O_CREAT | O_APPEND, 0600);
    int fe = open(err != NULL ? err : "/dev/null",
                  O_WRONLY | O_CREAT | O_APPEND, 0600);

    if (fi < 0 || fo < 0 || fe < 0) {
      _exit(126);
    }
    dup2(fi, 0);
    dup2(fo, 1);
    dup2(fe, 2);
  }
  if (cwd != NULL && chdir(cwd) != 0) {
    _exit(126);
  }
  execve(argv[0], argv, envp);
  _exit(127);
}

/* A live process's own peak RSS in KB (VmHWM), 0 when gone. wait4's
 * ru_maxrss is the largest of the process and its reaped descendants (a
 * sandbox, a git), so the peak of the process itself is read here, while
 * it runs: VmHWM only grows, so the last reading before the exit is its
 * peak to within one poll. */
static long vm_hwm_kb(pid_t pid) {
  char path[64], line[128];
  FILE *f;
  long kb = 0;

  bfmt(path, sizeof(path), "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "VmHWM: %ld", &kb) == 1) {
      break;
    }
  }
  fclose(f);
  return kb;
}

/* Waits for pid at most timeout_ms (polling; this thread only
 * orchestrates), then SIGKILLs it. Returns the wait status; *hwm (may be
 * NULL) the process's own peak RSS seen (vm_hwm_kb). */
static int wait_pid_hwm(pid_t pid, struct rusage *ru, unsigned timeout_ms,
                        long *hwm) {
  int st = 0;
  unsigned waited = 0;

  for (;;) {
    pid_t r;

    if (hwm != NULL) {
      long kb = vm_hwm_kb(pid);

      if (kb > *hwm) {
        *hwm = kb;
      }
    }
    r = wait4(pid, &st, WNOHANG, ru);

    if (r == pid) {
      return st;
    }
    if (r < 0 && errno != EINTR) {
      memset(ru, 0, sizeof(*ru));
      return -1;
    }
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      wait4(pid, &st, 0, ru);
      return -1;
    }
    msleep(5);
    waited += 5;
  }
}

static int wait_pid(pid_t pid, struct rusage *ru, unsigned timeout_ms) {
  return wait_pid_hwm(pid, ru, timeout_ms, NULL);
}

/* ---- the mock on a thread of its own ------------------------------------ */

typedef struct {
  uv_loop_t loop;
  uv_async_t async;
  uv_sem_t sem;
  uv_thread_t th;
  al_mockllm_t *m;
  int cmd; /* 1: rewind, 2: stop */
  al_mockllm_stats_t stats;
  int port;
  char url[64];
} mock_t;

static void mock_async(uv_async_t *a) {
  mock_t *k = a->data;

  al_mockllm_stats(k->m, &k->stats);
  if (k->cmd == 1) {
    al_mockllm_rewind(k->m);
  } else {
    al_mockllm_close(k->m, NULL);
    uv_close((uv_handle_t *)&k->async, NULL);
  }
  uv_sem_post(&k->sem);
}

static void mock_thread(void *arg) {
  mock_t *k = arg;

  uv_run(&k->loop, UV_RUN_DEFAULT);
}

static const char *g_record; /* --record: the mock's requests, NDJSON */

static int mock_start(mock_t *k, const char *yaml, bool validate) {
  al_mockllm_options_t o;
  char err[256] = "";

  memset(k, 0, sizeof(*k));
  if (uv_loop_init(&k->loop) != 0) {
    return -1;
  }
  al_mockllm_options_init(&o);
  o.scenario_yaml = yaml;
  o.validate = validate;
  o.record_path = g_record;
  o.err = err;
  o.err_len = sizeof(err);
  if (al_mockllm_new(&k->loop, &o, &k->m) != 0) {
    fprintf(stderr, "agentloop-bench batch: mock: %s\n", err);
    uv_loop_close(&k->loop);
    return -1;
  }
  k->port = al_mockllm_port(k->m);
  bfmt(k->url, sizeof(k->url), "http://127.0.0.1:%d", k->port);
  uv_sem_init(&k->sem, 0);
  uv_async_init(&k->loop, &k->async, mock_async);
  k->async.data = k;
  return uv_thread_create(&k->th, mock_thread, k) == 0 ? 0 : -1;
}

/* Runs cmd on the mock's thread and waits for it; the stats are read there
 * first. Called between mode runs only, when no response plays. */
static void mock_cmd(mock_t *k, int cmd) {
  k->cmd = cmd;
  uv_async_send(&k->async);
  uv_sem_wait(&k->sem);
}

static void mock_stop(mock_t *k) {
  mock_cmd(k, 2);
  uv_thread_join(&k->th);
  uv_loop_close(&k->loop);
  uv_sem_destroy(&k->sem);
}

/* ---- jobs, workspaces and the scenario ----------------------------------- */

enum { S_AGENTLOOP = 0, S_CLAUDE, S_CODEX, S_HOLD };

static void job_id(size_t i, char *out, size_t len) {
  bfmt(out, len, "j%05u", (unsigned)(i + 1) % 100000u);
}

/* One track per job: its marker "[JOB-<id>]" is in the prompt. Each kind
 * of client gets the calls of its own tools; S_HOLD runs bash (the warm
 * sandbox pool) and then holds the second reply hold_ms before its first
 * byte. Anything else (a peer's side requests) gets the top level's short
 * text. */
static char *scenario_yaml(size_t n, int kind, unsigned hold_ms) {
  size_t cap = 512 + n * 640, len = 0, i;
  char *y = malloc(cap);

  if (y == NULL) {
    return NULL;
  }
  len += (size_t)bfmt(y + len, cap - len,
                      "on_exhausted: repeat_last\n"
                      "responses:\n"
                      "  - reply: {content: [{text: 'ok'}]}\n"
                      "tracks:\n");
  for (i = 0; i < n; i++) {
    char id[16];
    char ws[PATH_MAX];

    job_id(i, id, sizeof(id));
    bfmt(ws, sizeof(ws), "%s/ws/%s", g_root, id);
    /* codex's first user message is its environment context (the cwd);
     * the prompt comes second. */
    if (kind == S_CODEX) {
      len +=
          (size_t)bfmt(y + len, cap - len,
                       "  - match: {first_user_contains: 'ws/%s</cwd>'}\n", id);
    } else {
      len += (size_t)bfmt(y + len, cap - len,
                          "  - match: {first_user_contains: '[JOB-%s]'}\n", id);
    }
    len += (size_t)bfmt(y + len, cap - len,
                        "    on_exhausted: error\n"
                        "    responses:\n");
    switch (kind) {
      case S_CLAUDE:
        len += (size_t)bfmt(
            y + len, cap - len,
            "      - reply: {content: [{text: 'Reading.'}, {tool_use: {name: "
            "Read, input: {file_path: '%s/README'}}}]}\n"
            "      - reply: {content: [{tool_use: {name: Glob, input: "
            "{pattern: '*', path: '%s'}}}]}\n",
            ws, ws);
        break;
      case S_CODEX:
        len += (size_t)bfmt(
            y + len, cap - len,
            "      - reply: {content: [{text: 'Reading.'}, {tool_use: {name: "
            "exec_command, input: {cmd: 'cat README', tty: false}}}]}\n"
            "      - reply: {content: [{tool_use: {name: exec_command, input: "
            "{cmd: 'ls', tty: false}}}]}\n");
        break;
      case S_HOLD:
        len += (size_t)bfmt(
            y + len, cap - len,
            "      - reply: {content: [{text: 'Running.'}, {tool_use: {name: "
            "bash, input: {command: 'cat README'}}}]}\n"
            "      - first_byte_delay_ms: %u\n"
            "        reply: {content: [{tool_use: {name: glob, input: "
            "{pattern: '*'}}}]}\n",
            hold_ms);
        break;
      default:
        len += (size_t)bfmt(
            y + len, cap - len,
            "      - reply: {content: [{text: 'Reading.'}, {tool_use: {name: "
            "read_file, input: {path: README}}}]}\n"
            "      - reply: {content: [{tool_use: {name: glob, input: "
            "{pattern: '*'}}}]}\n");
        break;
    }
    len += (size_t)bfmt(y + len, cap - len,
                        "      - reply: {content: [{text: 'done %s'}]}\n", id);
  }
  return y;
}

static int make_workspaces(size_t n) {
  size_t i;
  char path[PATH_MAX + 32];

  for (i = 0; i < n; i++) {
    char id[16];

    job_id(i, id, sizeof(id));
    bfmt(path, sizeof(path), "%s/ws/%s", g_root, id);
    if (access(path, F_OK) == 0) {
      continue;
    }
    if (mkdir(path, 0700) != 0) {
      return -1;
    }
    bfmt(path, sizeof(path), "%s/ws/%s/README", g_root, id);
    if (write_file(path, "A workspace of agentloop-bench batch.\n") != 0) {
      return -1;
    }
  }
  return 0;
}

static void prompt_of(size_t i, char *out, size_t len) {
  char id[16];

  job_id(i, id, sizeof(id));
  bfmt(out, len, "[JOB-%s] Read the README, list the files, then answer.", id);
}

/* One jobs-file line per job (as `batch run` and `batch submit` read). */
static int write_jobs(const char *path, size_t n, const char *url, bool bash) {
  FILE *f = fopen(path, "w");
  size_t i;

  if (f == NULL) {
    return -1;
  }
  for (i = 0; i < n; i++) {
    char id[16], prompt[128], ws[PATH_MAX];
    json_t *o;
    char *line;

    job_id(i, id, sizeof(id));
    prompt_of(i, prompt, sizeof(prompt));
    bfmt(ws, sizeof(ws), "%s/ws/%s", g_root, id);
    o = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "prompt", prompt,
                  "workspace", ws, "base_url", url);
    if (bash) {
      json_object_set_new(o, "tools", json_pack("[s]", "bash"));
    }
    line = json_dumps(o, JSON_COMPACT);
    fprintf(f, "%s\n", line);
    free(line);
    json_decref(o);
  }
  return fclose(f);
}

/* Result lines (results.jsonl or `batch results` ndjson) that say done in
 * 3 turns. */
static size_t count_done(const char *path) {
  char *text = read_text(path);
  char *line, *save = NULL;
  size_t ok = 0;

  if (text == NULL) {
    return 0;
  }
  for (line = strtok_r(text, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    json_t *o = json_loads(line, 0, NULL);
    const char *outcome = json_string_value(json_object_get(o, "outcome"));

    if (outcome != NULL && strcmp(outcome, "done") == 0 &&
        json_integer_value(json_object_get(o, "turns")) == 3) {
      ok++;
    }
    json_decref(o);
  }
  free(text);
  return ok;
}

/* ---- the modes ------------------------------------------------------------
 */

static void run_batch(const opts_t *o, mock_t *k, const char *jobs, size_t n,
                      unsigned conc, const char *tag, result_t *r) {
  char exe[PATH_MAX + 16], out[PATH_MAX + 32], res[PATH_MAX + 64];
  char err[PATH_MAX + 32], jc[16];
  char *argv[12];
  env_t e;
  struct rusage ru;
  double t0;
  int st;
  pid_t pid;
  long hwm = 0;

  (void)o;
  bfmt(exe, sizeof(exe), "%s", g_exe_agentloop);
  bfmt(out, sizeof(out), "%s/out-%s", g_root, tag);
  bfmt(err, sizeof(err), "%s/log/%s.err", g_root, tag);
  bfmt(jc, sizeof(jc), "%u", conc);
  rm_rf(out);
  env_base(&e, k->url);
  argv[0] = exe;
  argv[1] = "batch";
  argv[2] = "run";
  argv[3] = (char *)jobs;
  argv[4] = "--out";
  argv[5] = out;
  argv[6] = "-j";
  argv[7] = jc;
  argv[8] = "--output-format";
  argv[9] = "ndjson";
  argv[10] = NULL;
  t0 = now_s();
  pid = spawn(argv, e.v, NULL, NULL, err);
  st = wait_pid_hwm(pid, &ru, g_timeout_ms, &hwm);
  r->wall_s = now_s() - t0;
  r->ran = true;
  r->cpu_s = ru_cpu(&ru);
  r->rss_kb = hwm > 0 ? hwm : ru.ru_maxrss;
  bfmt(res, sizeof(res), "%s/results.jsonl", out);
  r->ok = count_done(res);
  if (st != 0) {
    bfmt(r->why, sizeof(r->why), "exit status %d (see %s)",
         WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
  }
  (void)n;
}

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;

  return x < y ? -1 : x > y;
}

/* n processes, conc at a time: argv_of(i) fills the job's command. */
typedef void (*argv_fn)(size_t i, const char *url, char **argv, char *store,
                        size_t store_len, char *cwd, size_t cwd_len);

static void pool_run(mock_t *k, size_t n, unsigned conc, argv_fn fn,
                     const char *tag, result_t *r) {
  pid_t *pids = calloc(n, sizeof(*pids));
  long *rss = calloc(n, sizeof(*rss));
  char err[PATH_MAX + 32], outp[PATH_MAX + 32];
  size_t next = 0, done = 0, running = 0, i;
  env_t e;
  double t0;

  bfmt(err, sizeof(err), "%s/log/%s.err", g_root, tag);
  bfmt(outp, sizeof(outp), "%s/log/%s.out", g_root, tag);
  env_base(&e, k->url);
  r->ran = true;
  t0 = now_s();
  while (done < n) {
    struct rusage ru;
    int st;
    pid_t p;

    while (running < conc && next < n) {
      char *argv[24];
      char store[4096], cwd[PATH_MAX];

      cwd[0] = '\0';
      fn(next, k->url, argv, store, sizeof(store), cwd, sizeof(cwd));
      pids[next] = spawn(argv, e.v, cwd[0] != '\0' ? cwd : NULL, outp, err);
      next++;
      running++;
    }
    p = wait4(-1, &st, WNOHANG, &ru);
    if (p == 0 && now_s() - t0 > g_timeout_ms / 1000.0) {
      for (i = 0; i < next; i++) {
        if (pids[i] > 0) {
          kill(pids[i], SIGKILL);
        }
      }
      if (r->why[0] == '\0') {
        bfmt(r->why, sizeof(r->why), "timed out");
      }
      done += n - next; /* never started */
      next = n;
      p = wait4(-1, &st, 0, &ru);
    }
    if (p == 0) {
      /* Every running process's own peak (vm_hwm_kb), every 10 ms. */
      for (i = 0; i < next; i++) {
        if (pids[i] > 0) {
          long kb = vm_hwm_kb(pids[i]);

          if (kb > rss[i]) {
            rss[i] = kb;
          }
        }
      }
      msleep(10);
      continue;
    }
    if (p < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    for (i = 0; i < next; i++) {
      if (pids[i] == p) {
        break;
      }
    }
    if (i == next) {
      continue; /* not one of ours */
    }
    pids[i] = 0;
    running--;
    done++;
    r->cpu_s += ru_cpu(&ru);
    if (rss[i] == 0) {
      rss[i] = ru.ru_maxrss; /* gone before the first reading */
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      r->ok++;
    } else if (r->why[0] == '\0') {
      bfmt(r->why, sizeof(r->why), "job %zu: status 0x%x (see %s)", i + 1,
           (unsigned)st, err);
    }
  }
  r->wall_s = now_s() - t0;
  /* An exit 0 counts only with the job's final text on stdout. */
  {
    char *text = read_text(outp);
    size_t said = 0;
    const char *p = text;

    while (p != NULL && (p = strstr(p, "done j")) != NULL) {
      said++;
      p += 6;
    }
    free(text);
    if (said < r->ok) {
      r->ok = said;
    }
  }
  qsort(rss, n, sizeof(*rss), cmp_long);
  r->rss_kb = rss[n - 1];
  r->rss_med_kb = rss[n / 2];
  free(rss);
  free(pids);
}

static const char *g_exe_claude;
static const char *g_exe_codex;

static void argv_run(size_t i, const char *url, char **argv, char *store,
                     size_t store_len, char *cwd, size_t cwd_len) {
  char id[16];
  size_t off = 0;
  int w;

  job_id(i, id, sizeof(id));
  argv[0] = g_exe_agentloop;
  argv[1] = "run";
  argv[2] = "-p";
  argv[3] = store + off;
  prompt_of(i, store + off, store_len - off);
  off += strlen(store + off) + 1;
  argv[4] = "--cwd";
  argv[5] = store + off;
  w = bfmt(store + off, store_len - off, "%s/ws/%s", g_root, id);
  off += (size_t)w + 1;
  argv[6] = "--base-url";
  argv[7] = (char *)url;
  argv[8] = "-q";
  argv[9] = NULL;
  (void)cwd;
  (void)cwd_len;
}

static void argv_claude(size_t i, const char *url, char **argv, char *store,
                        size_t store_len, char *cwd, size_t cwd_len) {
  char id[16];

  (void)url;
  job_id(i, id, sizeof(id));
  prompt_of(i, store, store_len);
  bfmt(cwd, cwd_len, "%s/ws/%s", g_root, id);
  argv[0] = (char *)g_exe_claude;
  argv[1] = "-p";
  argv[2] = store;
  argv[3] = "--allowedTools";
  argv[4] = "Read,Glob";
  argv[5] = "--max-turns";
  argv[6] = "5";
  argv[7] = "--model";
  argv[8] = "claude-sonnet-4-5";
  argv[9] = NULL;
}

static void argv_codex(size_t i, const char *url, char **argv, char *store,
                       size_t store_len, char *cwd, size_t cwd_len) {
  char id[16];

  (void)url;
  job_id(i, id, sizeof(id));
  prompt_of(i, store, store_len);
  bfmt(cwd, cwd_len, "%s/ws/%s", g_root, id);
  argv[0] = (char *)g_exe_codex;
  argv[1] = "exec";
  argv[2] = "--skip-git-repo-check";
  argv[3] = store;
  argv[4] = NULL;
}

/* codex reads its provider from $CODEX_HOME/config.toml: the mock's
 * Responses API. */
static int codex_config(const char *url) {
  char path[PATH_MAX + 64], text[1024];

  bfmt(path, sizeof(path), "%s/home/.codex", g_root);
  if (mkdirs(path) != 0) {
    return -1;
  }
  bfmt(path, sizeof(path), "%s/home/.codex/config.toml", g_root);
  bfmt(text, sizeof(text),
       "model = \"gpt-5\"\n"
       "model_provider = \"mock\"\n"
       "[model_providers.mock]\n"
       "name = \"mock\"\n"
       "base_url = \"%s/v1\"\n"
       "wire_api = \"responses\"\n"
       "env_key = \"OPENAI_API_KEY\"\n",
       url);
  return write_file(path, text);
}

/* ---- fleet -----------------------------------------------------------------
 */

static int sock_ready(const char *path) {
  struct sockaddr_un sa;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  int rc;

  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  bfmt(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  close(fd);
  return rc;
}

typedef struct {
  pid_t pid;
  char dir[PATH_MAX];
  char sock[PATH_MAX + 16];
} redis_t;

/* A redis-server on a unix socket in dir (no TCP port, no persistence:
 * the figures are the protocol's, not the disk's). */
static int redis_start(redis_t *s, const char *dir, char *why, size_t wl) {
  char logf[PATH_MAX + 16];
  char *argv[20];
  env_t e;
  unsigned waited = 0;
  int st;

  bfmt(s->dir, sizeof(s->dir), "%s", dir);
  bfmt(s->sock, sizeof(s->sock), "%s/redis.sock", dir);
  bfmt(logf, sizeof(logf), "%s/redis.log", dir);
  if (mkdirs(dir) != 0) {
    bfmt(why, wl, "cannot make %s", dir);
    return -1;
  }
  env_base(&e, "");
  argv[0] = "/usr/bin/redis-server";
  argv[1] = "--port";
  argv[2] = "0";
  argv[3] = "--unixsocket";
  argv[4] = s->sock;
  argv[5] = "--unixsocketperm";
  argv[6] = "700";
  argv[7] = "--dir";
  argv[8] = s->dir;
  argv[9] = "--save";
  argv[10] = "";
  argv[11] = "--appendonly";
  argv[12] = "no";
  argv[13] = "--daemonize";
  argv[14] = "no";
  argv[15] = "--logfile";
  argv[16] = logf;
  argv[17] = NULL;
  if (access(argv[0], X_OK) != 0) {
    bfmt(why, wl, "no %s", argv[0]);
    return -1;
  }
  s->pid = spawn(argv, e.v, NULL, NULL, NULL);
  while (sock_ready(s->sock) != 0) {
    if (waitpid(s->pid, &st, WNOHANG) == s->pid || waited > 10000) {
      bfmt(why, wl, "redis-server did not start (see %s)", logf);
      kill(s->pid, SIGKILL);
      s->pid = 0;
      return -1;
    }
    msleep(10);
    waited += 10;
  }
  return 0;
}

static double proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  FILE *f;
  char *p;
  unsigned long ut = 0, stime = 0;

  bfmt(path, sizeof(path), "/proc/%d/stat", (int)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  if (fgets(buf, sizeof(buf), f) == NULL || (p = strrchr(buf, ')')) == NULL ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
             &stime) != 2) {
    ut = stime = 0;
  }
  fclose(f);
  return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

static void redis_stop(redis_t *s, double *cpu) {
  struct rusage ru;

  if (s->pid <= 0) {
    return;
  }
  kill(s->pid, SIGTERM);
  wait_pid(s->pid, &ru, 10000);
  if (cpu != NULL) {
    *cpu = ru_cpu(&ru);
  }
  s->pid = 0;
}

/* Waits for a worker's start line on its stderr file, or its exit. */
static int worker_wait(pid_t pid, const char *err, char *why, size_t wl) {
  unsigned waited = 0;
  int st;

  for (;;) {
    char *text = read_text(err);
    bool up = text != NULL && strstr(text, "fleet worker") != NULL;

    if (up) {
      free(text);
      return 0;
    }
    if (waitpid(pid, &st, WNOHANG) == pid) {
      char *nl;

      if (text != NULL && (nl = strchr(text, '\n')) != NULL) {
        *nl = '\0';
      }
      if (text != NULL && strstr(text, "option --queue") != NULL) {
        bfmt(why, wl, "agentloopd has no --queue");
      } else {
        bfmt(why, wl, "agentloopd --queue exited: %s",
             text != NULL ? text : "");
      }
      free(text);
      return -1;
    }
    free(text);
    if (waited > WORKER_WAIT_MS) {
      bfmt(why, wl, "no worker start line in %u ms (see %s)", WORKER_WAIT_MS,
           err);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    msleep(20);
    waited += 20;
  }
}

static void run_fleet(mock_t *k, const char *jobs, size_t n, unsigned conc,
                      unsigned rep, result_t *r) {
  redis_t rs;
  char dir[PATH_MAX + 32], url[PATH_MAX + 64], slots[16];
  char d_exe[PATH_MAX + 16];
  char sessions[PATH_MAX + 48], work[PATH_MAX + 48];
  char wsock[2][PATH_MAX + 48], wstate[2][PATH_MAX + 48];
  char werr[2][PATH_MAX + 48], name[2][32];
  char res[PATH_MAX + 48], err[PATH_MAX + 48];
  pid_t w[2] = {0, 0};
  env_t e;
  struct rusage ru;
  double t0, redis_cpu = 0;
  int i, st;
  char *argv[24];
  pid_t p;

  r->ran = true;
  bfmt(dir, sizeof(dir), "%s/fleet%u", g_root, rep);
  rm_rf(dir);
  if (redis_start(&rs, dir, r->why, sizeof(r->why)) != 0) {
    r->unavailable = true;
    return;
  }
  bfmt(url, sizeof(url), "unix://%s?prefix=bench%u", rs.sock, rep);
  bfmt(slots, sizeof(slots), "%u", conc / 2 > 0 ? conc / 2 : 1);
  bfmt(d_exe, sizeof(d_exe), "%s", g_exe_agentloopd);
  bfmt(sessions, sizeof(sessions), "%s/sessions", dir);
  bfmt(work, sizeof(work), "%s/work", dir);
  mkdirs(sessions);
  mkdirs(work);
  env_base(&e, k->url);
  for (i = 0; i < 2; i++) {
    /* The daemon wants its socket's directory private. */
    bfmt(wstate[i], sizeof(wstate[i]), "%s/w%d", dir, i);
    mkdir(wstate[i], 0700);
    bfmt(wsock[i], sizeof(wsock[i]), "%s/w%d/d.sock", dir, i);
    bfmt(wstate[i], sizeof(wstate[i]), "%s/w%d/state", dir, i);
    bfmt(werr[i], sizeof(werr[i]), "%s/w%d.err", dir, i);
    bfmt(name[i], sizeof(name[i]), "bench-w%d", i);
    argv[0] = d_exe;
    argv[1] = "--foreground";
    argv[2] = "--socket";
    argv[3] = wsock[i];
    argv[4] = "--state-dir";
    argv[5] = wstate[i];
    argv[6] = "--queue";
    argv[7] = url;
    argv[8] = "--group";
    argv[9] = "g";
    argv[10] = "--slots";
    argv[11] = slots;
    argv[12] = "--consumer";
    argv[13] = name[i];
    argv[14] = "--sessions";
    argv[15] = sessions;
    argv[16] = "--work";
    argv[17] = work;
    argv[18] = NULL;
    w[i] = spawn(argv, e.v, NULL, NULL, werr[i]);
    if (worker_wait(w[i], werr[i], r->why, sizeof(r->why)) != 0) {
      r->unavailable = true;
      if (i == 1) {
        kill(w[0], SIGKILL);
        waitpid(w[0], &st, 0);
      }
      redis_stop(&rs, NULL);
      return;
    }
  }
  bfmt(res, sizeof(res), "%s/results.ndjson", dir);
  bfmt(err, sizeof(err), "%s/cli.err", dir);
  argv[0] = g_exe_agentloop;
  argv[1] = "batch";
  argv[2] = "submit";
  argv[3] = (char *)jobs;
  argv[4] = "--queue";
  argv[5] = url;
  argv[6] = NULL;
  t0 = now_s();
  p = spawn(argv, e.v, NULL, NULL, err);
  st = wait_pid(p, &ru, g_timeout_ms);
  r->cpu_s += ru_cpu(&ru);
  if (st != 0) {
    bfmt(r->why, sizeof(r->why), "batch submit: status 0x%x (see %s)",
         (unsigned)st, err);
  }
  argv[1] = "batch";
  argv[2] = "results";
  argv[3] = "--queue";
  argv[4] = url;
  argv[5] = "--follow";
  argv[6] = "--output-format";
  argv[7] = "ndjson";
  argv[8] = NULL;
  p = spawn(argv, e.v, NULL, res, err);
  st = wait_pid(p, &ru, g_timeout_ms);
  r->wall_s = now_s() - t0;
  r->cpu_s += ru_cpu(&ru);
  if (st != 0 && r->why[0] == '\0') {
    bfmt(r->why, sizeof(r->why), "batch results: status 0x%x (see %s)",
         (unsigned)st, err);
  }
  redis_cpu = proc_cpu_s(rs.pid);
  for (i = 0; i < 2; i++) {
    r->rss_worker_kb[i] = vm_hwm_kb(w[i]);
    kill(w[i], SIGTERM);
  }
  for (i = 0; i < 2; i++) {
    wait_pid(w[i], &ru, 60000);
    r->cpu_s += ru_cpu(&ru);
    if (r->rss_worker_kb[i] == 0) {
      r->rss_worker_kb[i] = ru.ru_maxrss;
    }
  }
  redis_stop(&rs, NULL);
  r->cpu_aux_s = redis_cpu;
  r->cpu_s += redis_cpu;
  r->rss_kb = r->rss_worker_kb[0] > r->rss_worker_kb[1] ? r->rss_worker_kb[0]
                                                        : r->rss_worker_kb[1];
  r->ok = count_done(res);
  (void)n;
}

/* ---- queue overhead ---------------------------------------------------- */

typedef struct {
  char job[16];
  char entry[48];
  int64_t epoch;
  struct qb_s *qb;
} qjob_t;

typedef struct qb_s {
  uv_loop_t loop;
  al_fleet_redis_t *r;
  al_fleet_queue_t q;
  size_t n;
  unsigned window;
  qjob_t *jobs;
  size_t sent, acked; /* the current phase's */
  size_t batch_left;
  size_t completed;
  int phase; /* 0 connect, 1 ping, 2 submit, 3 work, 4 done */
  uint64_t t_ping0, t_ping1, t_sub0, t_sub1, t_work1;
  int err;
  char why[200];
  bool started;
  bool closed;
} qb_t;

static void qb_next(qb_t *b);

static void qb_fail(qb_t *b, const char *what, int status) {
  if (b->err == 0) {
    b->err = status != 0 ? status : -1;
    bfmt(b->why, sizeof(b->why), "%s: %s", what, uv_strerror(status));
  }
  b->phase = 4;
  if (!b->closed) {
    b->closed = true;
    al_fleet_redis_close(b->r, NULL);
  }
}

static void on_ping(al_fleet_redis_t *r, int status, struct redisReply *reply,
                    void *data) {
  qb_t *b = data;

  (void)r;
  (void)reply;
  if (status != 0) {
    qb_fail(b, "PING", status);
    return;
  }
  b->acked++;
  qb_next(b);
}

static void on_submit(int status, bool fresh, void *data) {
  qb_t *b = data;

  if (status != 0 || !fresh) {
    qb_fail(b, "submit", status);
    return;
  }
  b->acked++;
  qb_next(b);
}

static void on_complete(int status, void *data) {
  qjob_t *j = data;
  qb_t *b = j->qb;

  if (status != 0) {
    qb_fail(b, "complete", status);
    return;
  }
  b->completed++;
  b->batch_left--;
  qb_next(b);
}

static void on_renew(int status, void *data) {
  qjob_t *j = data;
  qb_t *b = j->qb;
  char result[96];

  if (status != 0) {
    qb_fail(b, "renew", status);
    return;
  }
  bfmt(result, sizeof(result),
       "{\"id\":\"%s\",\"outcome\":\"done\",\"turns\":3}", j->job);
  if (al_fleet_queue_complete(&b->q, j->job, j->epoch, j->entry, result,
                              on_complete, j) != 0) {
    qb_fail(b, "complete", -1);
  }
}

static void on_claim(int status, int64_t epoch, bool done, void *data) {
  qjob_t *j = data;
  qb_t *b = j->qb;

  if (status != 0 || done || epoch <= 0) {
    qb_fail(b, "claim", status);
    return;
  }
  j->epoch = epoch;
  if (al_fleet_queue_renew(&b->q, j->job, epoch, j->entry, on_renew, j) != 0) {
    qb_fail(b, "renew", -1);
  }
}

static void on_read(int status, const al_fleet_entry_t *e, size_t n,
                    size_t dead, void *data) {
  qb_t *b = data;
  size_t i;

  (void)dead;
  if (status != 0) {
    qb_fail(b, "read", status);
    return;
  }
  if (n == 0) {
    qb_fail(b, "read: no entries", 0);
    return;
  }
  b->batch_left = n;
  for (i = 0; i < n; i++) {
    qjob_t *j = &b->jobs[b->sent++];

    j->qb = b;
    bfmt(j->job, sizeof(j->job), "%s", e[i].job_id);
    bfmt(j->entry, sizeof(j->entry), "%s", e[i].entry_id);
    if (al_fleet_queue_claim(&b->q, j->job, on_claim, j) != 0) {
      qb_fail(b, "claim", -1);
      return;
    }
  }
}

/* Each phase keeps `window` commands in flight (a worker's slots), then
 * moves on when every answer is in. */
static void qb_next(qb_t *b) {
  if (b->phase == 1) {
    size_t total = b->n * 5;

    while (b->sent < total && b->sent - b->acked < b->window) {
      static const char *argv[] = {"PING"};
      static const size_t len[] = {4};

      if (al_fleet_redis_command(b->r, on_ping, b, 1, argv, len) != 0) {
        qb_fail(b, "PING", -1);
        return;
      }
      b->sent++;
    }
    if (b->acked == total) {
      b->t_ping1 = uv_hrtime();
      b->phase = 2;
      b->sent = b->acked = 0;
      b->t_sub0 = uv_hrtime();
    } else {
      return;
    }
  }
  if (b->phase == 2) {
    while (b->sent < b->n && b->sent - b->acked < b->window) {
      char id[16], body[160];

      job_id(b->sent, id, sizeof(id));
      bfmt(body, sizeof(body),
           "{\"id\":\"%s\",\"prompt\":\"[JOB-%s]\",\"workspace\":\"/"
           "tmp\"}",
           id, id);
      if (al_fleet_queue_submit(&b->q, id, body, on_submit, b) != 0) {
        qb_fail(b, "submit", -1);
        return;
      }
      b->sent++;
    }
    if (b->acked == b->n) {
      b->t_sub1 = uv_hrtime();
      b->phase = 3;
      b->sent = 0;
      b->batch_left = 0;
    } else {
      return;
    }
  }
  if (b->phase == 3 && b->batch_left == 0) {
    size_t left = b->n - b->completed;

    if (left == 0) {
      b->t_work1 = uv_hrtime();
      b->phase = 4;
      b->closed = true;
      al_fleet_redis_close(b->r, NULL);
      return;
    }
    if (al_fleet_queue_read(&b->q,
                            (unsigned)(left < b->window ? left : b->window),
                            on_read, b) != 0) {
      qb_fail(b, "read", -1);
    }
  }
}

static void on_group(int status, void *data) {
  qb_t *b = data;

  if (status != 0) {
    qb_fail(b, "ensure_group", status);
    return;
  }
  b->phase = 1;
  b->sent = b->acked = 0;
  b->t_ping0 = uv_hrtime();
  qb_next(b);
}

static void on_redis_state(al_fleet_redis_t *r, bool up, int status) {
  qb_t *b = al_fleet_redis_data(r);

  if (!up) {
    qb_fail(b, "redis connection", status);
    return;
  }
  if (!b->started) {
    b->started = true;
    if (al_fleet_queue_ensure_group(&b->q, on_group, b) != 0) {
      qb_fail(b, "ensure_group", -1);
    }
  }
}

typedef struct {
  bool ran;
  char why[256];
  size_t n;
  unsigned window;
  double ms_per_job;        /* submit + read + claim + renew + complete */
  double ms_submit_per_job; /* of that: submit */
  double ms_ping_per_job;   /* 5 PINGs */
  double ms_per_ping;
  double redis_cpu_s;
} queue_res_t;

static void run_queue(const opts_t *o, queue_res_t *qr) {
  redis_t rs;
  al_fleet_redis_options_t ro;
  char dir[PATH_MAX + 16];
  qb_t *b = calloc(1, sizeof(*b));

  qr->ran = true;
  qr->n = o->queue_jobs;
  qr->window = o->queue_window;
  bfmt(dir, sizeof(dir), "%s/queue", g_root);
  if (redis_start(&rs, dir, qr->why, sizeof(qr->why)) != 0) {
    free(b);
    return;
  }
  uv_loop_init(&b->loop);
  b->n = o->queue_jobs;
  b->window = o->queue_window;
  b->jobs = calloc(b->n, sizeof(*b->jobs));
  al_fleet_redis_options_init(&ro);
  ro.unix_path = rs.sock;
  ro.on_state = on_redis_state;
  ro.data = b;
  if (al_fleet_redis_new(&b->loop, &ro, &b->r) != 0) {
    bfmt(qr->why, sizeof(qr->why), "al_fleet_redis_new failed");
  } else {
    b->q.redis = b->r;
    b->q.prefix = "qbench";
    b->q.group = "g";
    b->q.consumer = "bench";
    b->q.lease_ms = 30000;
    b->q.max_deliveries = 3;
    uv_run(&b->loop, UV_RUN_DEFAULT);
    if (b->err != 0) {
      bfmt(qr->why, sizeof(qr->why), "%s", b->why);
    } else {
      double nn = (double)b->n;

      qr->ms_ping_per_job = (double)(b->t_ping1 - b->t_ping0) / 1e6 / nn;
      qr->ms_per_ping = qr->ms_ping_per_job / 5;
      qr->ms_submit_per_job = (double)(b->t_sub1 - b->t_sub0) / 1e6 / nn;
      qr->ms_per_job = (double)(b->t_work1 - b->t_sub0) / 1e6 / nn;
    }
  }
  uv_loop_close(&b->loop);
  qr->redis_cpu_s = proc_cpu_s(rs.pid);
  redis_stop(&rs, NULL);
  free(b->jobs);
  free(b);
}

/* ---- RSS per in-flight session ------------------------------------------ */

typedef struct {
  unsigned k;
  long rss1_kb, rssk_kb;
  size_t ok1, okk;
  double wall_s;
  double kib_per_session;
  char why[256];
} rss_res_t;

static void run_rss(const opts_t *o, unsigned k, rss_res_t *rr) {
  mock_t m;
  char *yaml = scenario_yaml(k, S_HOLD, o->hold_ms);
  char jobs1[PATH_MAX + 32], jobsk[PATH_MAX + 32], tag[32];
  result_t r1, rk;

  memset(&r1, 0, sizeof(r1));
  memset(&rk, 0, sizeof(rk));
  rr->k = k;
  if (yaml == NULL || make_workspaces(k) != 0 ||
      mock_start(&m, yaml, true) != 0) {
    bfmt(rr->why, sizeof(rr->why), "set-up failed");
    free(yaml);
    return;
  }
  free(yaml);
  bfmt(jobs1, sizeof(jobs1), "%s/rss-1.jsonl", g_root);
  bfmt(jobsk, sizeof(jobsk), "%s/rss-%u.jsonl", g_root, k);
  write_jobs(jobs1, 1, m.url, true);
  write_jobs(jobsk, k, m.url, true);
  /* Both peaks are medians over the repeats: the one-job peak alone moves
   * by megabytes on a loaded machine (the thread pool's malloc arenas). */
  {
    long v1[MAX_REPEAT], vk[MAX_REPEAT];
    unsigned rep;

    for (rep = 0; rep < o->repeat; rep++) {
      memset(&r1, 0, sizeof(r1));
      memset(&rk, 0, sizeof(rk));
      bfmt(tag, sizeof(tag), "rss-1");
      mock_cmd(&m, 1);
      run_batch(o, &m, jobs1, 1, 1, tag, &r1);
      mock_cmd(&m, 1);
      bfmt(tag, sizeof(tag), "rss-%u", k);
      run_batch(o, &m, jobsk, k, k, tag, &rk);
      v1[rep] = r1.rss_kb;
      vk[rep] = rk.rss_kb;
    }
    qsort(v1, o->repeat, sizeof(v1[0]), cmp_long);
    qsort(vk, o->repeat, sizeof(vk[0]), cmp_long);
    rr->rss1_kb = v1[o->repeat / 2];
    rr->rssk_kb = vk[o->repeat / 2];
  }
  mock_stop(&m);
  rr->ok1 = r1.ok;
  rr->okk = rk.ok;
  rr->wall_s = rk.wall_s;
  if (k > 1) {
    rr->kib_per_session = (double)(rk.rss_kb - r1.rss_kb) / (double)(k - 1);
  }
  if (r1.why[0] != '\0' || rk.why[0] != '\0') {
    bfmt(rr->why, sizeof(rr->why), "%s%s", r1.why, rk.why);
  }
  /* All K sessions were waiting together only if the batch outlasted one
   * hold; else the figure undercounts. */
  if (rk.wall_s * 1000 < o->hold_ms && rr->why[0] == '\0') {
    bfmt(rr->why, sizeof(rr->why), "batch shorter than the hold");
  }
}

/* ---- report ----------------------------------------------------------------
 */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

static double median_wall(result_t *rs, unsigned n) {
  double v[MAX_REPEAT];
  unsigned i, m = 0;

  for (i = 0; i < n; i++) {
    if (rs[i].ran && !rs[i].unavailable) {
      v[m++] = rs[i].wall_s;
    }
  }
  if (m == 0) {
    return 0;
  }
  qsort(v, m, sizeof(v[0]), cmp_double);
  return v[m / 2];
}

static int parse_opts(int argc, char **argv, opts_t *o) {
  int i;

  memset(o, 0, sizeof(*o));
  o->jobs = 200;
  o->conc = 50;
  o->repeat = 1;
  o->modes[M_BATCH] = o->modes[M_RUN] = o->modes[M_FLEET] = true;
  o->do_jobs = o->do_rss = o->do_queue = true;
  o->rss_k[0] = 50;
  o->rss_k[1] = 200;
  o->n_rss_k = 2;
  o->hold_ms = 4000;
  o->queue_jobs = 2000;
  o->queue_window = 50;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;

    if (strcmp(a, "--keep") == 0) {
      o->keep = true;
      continue;
    }
    if (v == NULL) {
      fprintf(stderr, "agentloop-bench batch: %s needs a value\n", a);
      return -1;
    }
    i++;
    if (strcmp(a, "--jobs") == 0) {
      o->jobs = strtoul(v, NULL, 10);
    } else if (strcmp(a, "--concurrency") == 0) {
      o->conc = (unsigned)strtoul(v, NULL, 10);
    } else if (strcmp(a, "--repeat") == 0) {
      o->repeat = (unsigned)strtoul(v, NULL, 10);
    } else if (strcmp(a, "--hold-ms") == 0) {
      o->hold_ms = (unsigned)strtoul(v, NULL, 10);
    } else if (strcmp(a, "--queue-jobs") == 0) {
      o->queue_jobs = strtoul(v, NULL, 10);
    } else if (strcmp(a, "--queue-window") == 0) {
      o->queue_window = (unsigned)strtoul(v, NULL, 10);
    } else if (strcmp(a, "--json") == 0) {
      o->json_path = v;
    } else if (strcmp(a, "--timeout") == 0) {
      g_timeout_ms = (unsigned)strtoul(v, NULL, 10) * 1000u;
    } else if (strcmp(a, "--agentloop") == 0) {
      bfmt(g_exe_agentloop, sizeof(g_exe_agentloop), "%s", v);
    } else if (strcmp(a, "--agentloopd") == 0) {
      bfmt(g_exe_agentloopd, sizeof(g_exe_agentloopd), "%s", v);
    } else if (strcmp(a, "--record") == 0) {
      g_record = v;
    } else if (strcmp(a, "--claude") == 0) {
      o->claude = v;
    } else if (strcmp(a, "--codex") == 0) {
      o->codex = v;
    } else if (strcmp(a, "--rss-k") == 0) {
      char buf[64], *tok, *save = NULL;

      bfmt(buf, sizeof(buf), "%s", v);
      o->n_rss_k = 0;
      for (tok = strtok_r(buf, ",", &save); tok != NULL && o->n_rss_k < 4;
           tok = strtok_r(NULL, ",", &save)) {
        o->rss_k[o->n_rss_k++] = (unsigned)strtoul(tok, NULL, 10);
      }
    } else if (strcmp(a, "--modes") == 0 || strcmp(a, "--parts") == 0) {
      char buf[128], *tok, *save = NULL;
      bool modes = strcmp(a, "--modes") == 0;
      int m;

      bfmt(buf, sizeof(buf), "%s", v);
      if (modes) {
        memset(o->modes, 0, sizeof(o->modes));
      } else {
        o->do_jobs = o->do_rss = o->do_queue = false;
      }
      for (tok = strtok_r(buf, ",", &save); tok != NULL;
           tok = strtok_r(NULL, ",", &save)) {
        if (!modes) {
          if (strcmp(tok, "jobs") == 0) {
            o->do_jobs = true;
          } else if (strcmp(tok, "rss") == 0) {
            o->do_rss = true;
          } else if (strcmp(tok, "queue") == 0) {
            o->do_queue = true;
          } else {
            fprintf(stderr, "agentloop-bench batch: unknown part %s\n", tok);
            return -1;
          }
          continue;
        }
        for (m = 0; m < MAX_MODES; m++) {
          if (strcmp(tok, mode_names[m]) == 0) {
            o->modes[m] = true;
            break;
          }
        }
        if (m == MAX_MODES) {
          fprintf(stderr, "agentloop-bench batch: unknown mode %s\n", tok);
          return -1;
        }
      }
    } else {
      fprintf(stderr, "agentloop-bench batch: unknown option %s\n", a);
      return -1;
    }
  }
  if (o->jobs == 0 || o->jobs > 99999 || o->conc == 0 || o->conc > 4096 ||
      o->repeat == 0 || o->repeat > MAX_REPEAT || o->queue_jobs == 0 ||
      o->queue_window == 0) {
    fprintf(stderr, "agentloop-bench batch: a count out of range\n");
    return -1;
  }
  if (o->modes[M_CLAUDE] && o->claude == NULL) {
    fprintf(stderr, "agentloop-bench batch: mode claude needs --claude\n");
    return -1;
  }
  if (o->modes[M_CODEX] && o->codex == NULL) {
    fprintf(stderr, "agentloop-bench batch: mode codex needs --codex\n");
    return -1;
  }
  return 0;
}

int al_bench_batch(int argc, char **argv) {
  opts_t o;
  result_t res[MAX_MODES][MAX_REPEAT];
  queue_res_t qr;
  rss_res_t rr[4];
  json_t *js = json_object();
  json_t *jm = json_object();
  double ref_wall = 0;
  unsigned rep;
  int m, rc = 0;
  size_t i;
  char path[PATH_MAX + 32];

  if (parse_opts(argc, argv, &o) != 0) {
    return 2;
  }
  if (bu_exe_dir(g_bin, sizeof(g_bin)) != 0) {
    return 1;
  }
  if (g_exe_agentloop[0] == '\0') {
    bfmt(g_exe_agentloop, sizeof(g_exe_agentloop), "%s/agentloop", g_bin);
  }
  if (g_exe_agentloopd[0] == '\0') {
    bfmt(g_exe_agentloopd, sizeof(g_exe_agentloopd), "%s/agentloopd", g_bin);
  }
  g_exe_claude = o.claude;
  g_exe_codex = o.codex;
  bfmt(g_root, sizeof(g_root), "/var/tmp/al-bench-batch-XXXXXX");
  if (mkdtemp(g_root) == NULL) {
    return 1;
  }
  bfmt(path, sizeof(path), "%s/ws", g_root);
  mkdirs(path);
  bfmt(path, sizeof(path), "%s/log", g_root);
  mkdirs(path);
  bfmt(path, sizeof(path), "%s/home/.run", g_root);
  mkdirs(path);
  bfmt(path, sizeof(path), "%s/home/.config", g_root);
  mkdirs(path);
  memset(res, 0, sizeof(res));
  memset(&qr, 0, sizeof(qr));
  memset(rr, 0, sizeof(rr));
  fprintf(stderr, "agentloop-bench batch: working in %s\n", g_root);

  if (o.do_jobs) {
    mock_t mk;
    char jobs[PATH_MAX + 32];
    char *yaml = scenario_yaml(o.jobs, S_AGENTLOOP, 0);

    if (yaml == NULL || make_workspaces(o.jobs) != 0 ||
        mock_start(&mk, yaml, true) != 0) {
      fprintf(stderr, "agentloop-bench batch: set-up failed\n");
      free(yaml);
      return 1;
    }
    free(yaml);
    bfmt(jobs, sizeof(jobs), "%s/jobs.jsonl", g_root);
    write_jobs(jobs, o.jobs, mk.url, false);
    for (rep = 0; rep < o.repeat; rep++) {
      for (m = M_BATCH; m <= M_FLEET; m++) {
        char tag[32];
        result_t *r = &res[m][rep];

        if (!o.modes[m] || (rep > 0 && res[m][0].unavailable)) {
          continue;
        }
        fprintf(stderr, "agentloop-bench batch: %s, repeat %u/%u\n",
                mode_names[m], rep + 1, o.repeat);
        bfmt(tag, sizeof(tag), "%s%u", mode_names[m], rep);
        mock_cmd(&mk, 1);
        {
          uint64_t inv0 = mk.stats.validation_failures;

          if (m == M_BATCH) {
            run_batch(&o, &mk, jobs, o.jobs, o.conc, tag, r);
          } else if (m == M_RUN) {
            pool_run(&mk, o.jobs, o.conc, argv_run, tag, r);
          } else {
            run_fleet(&mk, jobs, o.jobs, o.conc, rep, r);
          }
          mock_cmd(&mk, 1);
          r->invalid = mk.stats.validation_failures - inv0;
        }
      }
    }
    mock_stop(&mk);
  }
  /* The peers: their own tool names and no request validation (their
   * requests carry fields the mock's rules do not know). */
  for (m = M_CLAUDE; m <= M_CODEX && o.do_jobs; m++) {
    mock_t mk;
    char *yaml;

    if (!o.modes[m]) {
      continue;
    }
    yaml = scenario_yaml(o.jobs, m == M_CLAUDE ? S_CLAUDE : S_CODEX, 0);
    if (yaml == NULL || mock_start(&mk, yaml, false) != 0) {
      free(yaml);
      continue;
    }
    free(yaml);
    if (m == M_CODEX) {
      codex_config(mk.url);
    }
    for (rep = 0; rep < o.repeat; rep++) {
      char tag[32];

      fprintf(stderr, "agentloop-bench batch: %s, repeat %u/%u\n",
              mode_names[m], rep + 1, o.repeat);
      bfmt(tag, sizeof(tag), "%s%u", mode_names[m], rep);
      mock_cmd(&mk, 1);
      pool_run(&mk, o.jobs, o.conc, m == M_CLAUDE ? argv_claude : argv_codex,
               tag, &res[m][rep]);
    }
    mock_stop(&mk);
  }
  if (o.do_rss) {
    for (i = 0; i < o.n_rss_k; i++) {
      fprintf(stderr, "agentloop-bench batch: rss, K=%u\n", o.rss_k[i]);
      run_rss(&o, o.rss_k[i], &rr[i]);
    }
  }
  if (o.do_queue) {
    fprintf(stderr, "agentloop-bench batch: queue, %zu jobs\n", o.queue_jobs);
    run_queue(&o, &qr);
  }

  /* The table. */
  if (o.do_jobs) {
    ref_wall = median_wall(res[M_RUN], o.repeat);
    printf(
        "batch: %zu jobs of 3 turns (read_file, glob, text), -j %u, "
        "median of %u\n",
        o.jobs, o.conc, o.repeat);
    printf("%-8s %6s %8s %10s %8s %10s %12s %14s %s\n", "mode", "ok", "wall_s",
           "jobs/h", "vs run", "cpu_s/job", "peak_rss_kb", "kb/concurrent",
           "note");
    for (m = 0; m < MAX_MODES; m++) {
      result_t *r0 = &res[m][0];
      double wall = median_wall(res[m], o.repeat);
      double cpu = 0, per_conc;
      size_t inflight = o.conc < o.jobs ? o.conc : o.jobs;
      size_t ok = 0;
      long rss = 0;
      uint64_t invalid = 0;
      json_t *jr;

      if (!o.modes[m] || !r0->ran) {
        continue;
      }
      if (r0->unavailable) {
        printf("%-8s not available (%s)\n", mode_names[m], r0->why);
        json_object_set_new(
            jm, mode_names[m],
            json_pack("{s:b, s:s}", "available", 0, "why", r0->why));
        continue;
      }
      for (rep = 0; rep < o.repeat; rep++) {
        cpu += res[m][rep].cpu_s;
        ok += res[m][rep].ok;
        invalid += res[m][rep].invalid;
        if (res[m][rep].rss_kb > rss) {
          rss = res[m][rep].rss_kb;
        }
      }
      cpu /= (double)o.repeat * (double)o.jobs;
      /* Memory per concurrent session: a process per job holds one, so its
       * (median) peak; batch and fleet hold min(C, N) in their processes. */
      if (m == M_BATCH) {
        per_conc = (double)rss / (double)inflight;
      } else if (m == M_FLEET) {
        per_conc = (double)(r0->rss_worker_kb[0] + r0->rss_worker_kb[1]) /
                   (double)inflight;
      } else {
        per_conc = (double)r0->rss_med_kb;
      }
      printf("%-8s %6zu %8.2f %10.0f %8.2f %10.3f %12ld %14.0f %s%s\n",
             mode_names[m], ok / o.repeat, wall,
             wall > 0 ? (double)o.jobs * 3600.0 / wall : 0,
             wall > 0 && ref_wall > 0 ? ref_wall / wall : 0, cpu, rss, per_conc,
             m == M_RUN || m >= M_CLAUDE ? "largest process; " : "",
             r0->why[0] != '\0' ? r0->why : "");
      if (m == M_FLEET) {
        printf(
            "%-8s workers peak RSS %ld / %ld KB; redis-server %.3f cpu_s "
            "(in cpu_s/job)\n",
            "", r0->rss_worker_kb[0], r0->rss_worker_kb[1], r0->cpu_aux_s);
      }
      if (m == M_RUN || m >= M_CLAUDE) {
        printf("%-8s median process peak RSS %ld KB\n", "", r0->rss_med_kb);
      }
      jr = json_pack(
          "{s:b, s:I, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:s}",
          "available", 1, "ok_per_repeat", (json_int_t)(ok / o.repeat),
          "wall_s_median", wall, "jobs_per_hour",
          wall > 0 ? (double)o.jobs * 3600.0 / wall : 0.0, "ratio_vs_run",
          wall > 0 && ref_wall > 0 ? ref_wall / wall : 0.0, "cpu_s_per_job",
          cpu, "peak_rss_kb", (json_int_t)rss, "kb_per_concurrent_session",
          (json_int_t)per_conc, "median_process_rss_kb",
          (json_int_t)r0->rss_med_kb, "invalid_requests", (json_int_t)invalid,
          "note", r0->why);
      if (m == M_FLEET) {
        json_object_set_new(jr, "worker_rss_kb",
                            json_pack("[I,I]", (json_int_t)r0->rss_worker_kb[0],
                                      (json_int_t)r0->rss_worker_kb[1]));
        json_object_set_new(jr, "redis_cpu_s", json_real(r0->cpu_aux_s));
      }
      json_object_set_new(jm, mode_names[m], jr);
      if (ok != (size_t)o.repeat * o.jobs || invalid != 0) {
        printf(
            "%-8s !! %zu of %zu jobs done in 3 turns, %llu invalid "
            "requests\n",
            "", ok, (size_t)o.repeat * o.jobs, (unsigned long long)invalid);
        rc = 1;
      }
    }
    json_object_set_new(js, "modes", jm);
    json_object_set_new(js, "jobs", json_integer((json_int_t)o.jobs));
    json_object_set_new(js, "concurrency", json_integer(o.conc));
    json_object_set_new(js, "repeat", json_integer(o.repeat));
  }
  if (o.do_rss) {
    json_t *ja = json_array();

    for (i = 0; i < o.n_rss_k; i++) {
      printf(
          "rss: K=%u in flight (bash ran, reply held %u ms): peak %ld KB, "
          "1 job %ld KB (medians) -> %.1f KiB per session (goal <= %.0f)%s%s\n",
          rr[i].k, o.hold_ms, rr[i].rssk_kb, rr[i].rss1_kb,
          rr[i].kib_per_session, TARGET_SESSION_KIB,
          rr[i].why[0] != '\0' ? "; " : "", rr[i].why);
      json_array_append_new(
          ja,
          json_pack("{s:i, s:I, s:I, s:f, s:I, s:f, s:s}", "k", rr[i].k,
                    "peak_rss_kb", (json_int_t)rr[i].rssk_kb, "one_job_rss_kb",
                    (json_int_t)rr[i].rss1_kb, "kib_per_session",
                    rr[i].kib_per_session, "ok", (json_int_t)rr[i].okk,
                    "wall_s", rr[i].wall_s, "note", rr[i].why));
      if (rr[i].okk != rr[i].k || rr[i].ok1 != 1) {
        rc = 1;
      }
    }
    json_object_set_new(js, "rss", ja);
  }
  if (o.do_queue) {
    if (qr.why[0] != '\0') {
      printf("queue: failed: %s\n", qr.why);
      rc = 1;
    } else {
      printf(
          "queue: %zu jobs, %u in flight: %.4f ms per job (submit %.4f + "
          "read/claim/renew/complete) (goal <= %.1f); 5 PINGs %.4f ms "
          "(%.4f ms each); ratio %.1fx; redis-server %.2f cpu_s\n",
          qr.n, qr.window, qr.ms_per_job, qr.ms_submit_per_job, TARGET_QUEUE_MS,
          qr.ms_ping_per_job, qr.ms_per_ping,
          qr.ms_ping_per_job > 0 ? qr.ms_per_job / qr.ms_ping_per_job : 0,
          qr.redis_cpu_s);
    }
    json_object_set_new(
        js, "queue",
        json_pack("{s:I, s:i, s:f, s:f, s:f, s:f, s:s}", "jobs",
                  (json_int_t)qr.n, "window", qr.window, "ms_per_job",
                  qr.ms_per_job, "ms_submit_per_job", qr.ms_submit_per_job,
                  "ms_5_pings_per_job", qr.ms_ping_per_job, "ms_per_ping",
                  qr.ms_per_ping, "error", qr.why));
  }
  if (o.json_path != NULL) {
    json_dump_file(js, o.json_path, JSON_INDENT(2));
  }
  json_decref(js);
  if (!o.keep) {
    rm_rf(g_root);
  } else {
    fprintf(stderr, "agentloop-bench batch: kept %s\n", g_root);
  }
  return rc;
}
