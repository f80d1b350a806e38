/* spawn wrapper (src/tools/spawn.c) and bash tool (src/tools/bash.c).
 *
 * Child programs are helpers of this binary (al_tests --helper NAME),
 * spawned through the wrapper. Nothing sleeps: timeouts are 50-300 ms
 * options, and "no process is left" is polled from a loop timer (a killed
 * process needs a moment to die; orphaned zombies count as gone). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "test.h"

#include "executor/executor.h"
#include "tools/bash.h"
#include "tools/spawn.h"

extern char **environ;

/* ---- process checks ------------------------------------------------------ */

/* State letter of /proc/PID/stat, or 0 when the process does not exist. */
static char proc_state(long pid, long *pgrp) {
  char path[64];
  char buf[512];
  FILE *f;
  char *rp;
  char st = 0;

  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  if (fgets(buf, sizeof(buf), f) != NULL) {
    rp = strrchr(buf, ')');
    if (rp != NULL && sscanf(rp + 2, "%c %*d %ld", &st, pgrp) != 2) {
      st = 0;
    }
  }
  fclose(f);
  return st;
}

static bool pid_gone(long pid) {
  long pg = 0;
  char st;

  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
    return true;
  }
  st = proc_state(pid, &pg);
  return st == 0 || st == 'Z' || st == 'X';
}

/* No live (non-zombie) member left in process group pgid. */
static bool group_gone(long pgid) {
  DIR *d;
  struct dirent *e;
  bool gone = true;

  if (kill(-(pid_t)pgid, 0) != 0 && errno == ESRCH) {
    return true;
  }
  d = opendir("/proc");
  ASSERT_NOT_NULL(d);
  while ((e = readdir(d)) != NULL) {
    long pid = atol(e->d_name);
    long pg = 0;
    char st;

    if (pid <= 0) {
      continue;
    }
    st = proc_state(pid, &pg);
    if (st != 0 && st != 'Z' && st != 'X' && pg == pgid) {
      gone = false;
    }
  }
  closedir(d);
  return gone;
}

/* Polls from a 2 ms loop timer until pid and its group are gone (the test
 * runner's timeout catches "never"). */
typedef struct {
  uv_timer_t t;
  long pid;
  long extra; /* another pid to wait for, or 0 */
  int polls;
  bool done;
} gone_wait_t;

static void on_gone_close(uv_handle_t *h) {
  gone_wait_t *g = h->data;

  g->done = true;
}

static void on_gone_poll(uv_timer_t *t) {
  gone_wait_t *g = t->data;

  g->polls++;
  if (pid_gone(g->pid) && group_gone(g->pid) &&
      (g->extra == 0 || pid_gone(g->extra))) {
    uv_close((uv_handle_t *)t, on_gone_close);
  }
}

static void wait_gone(uv_loop_t *loop, long pid, long extra) {
  gone_wait_t g;

  memset(&g, 0, sizeof(g));
  g.pid = pid;
  g.extra = extra;
  ASSERT_EQ(uv_timer_init(loop, &g.t), 0);
  g.t.data = &g;
  ASSERT_EQ(uv_timer_start(&g.t, on_gone_poll, 0, 2), 0);
  while (!g.done) {
    uv_run(loop, UV_RUN_ONCE);
  }
}

static char workspace[256];

static void make_workspace(void) {
  snprintf(workspace, sizeof(workspace), "/tmp/al_bash_XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(workspace));
}

static void remove_workspace(void) {
  char cmd[512];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", workspace);
  ASSERT_EQ(system(cmd), 0);
}

/* ---- helpers (child programs) -------------------------------------------- */

static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);

    if (w <= 0) {
      if (w < 0 && errno == EINTR) {
        continue;
      }
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

static void write_str(int fd, const char *s) { write_all(fd, s, strlen(s)); }

/* spawn_print OUT ERR CODE */
HELPER_IMPL(spawn_print) {
  if (argc >= 1) {
    write_str(1, argv[0]);
  }
  if (argc >= 2) {
    write_str(2, argv[1]);
  }
  return argc >= 3 ? atoi(argv[2]) : 0;
}

/* Prints the child's SIGPIPE disposition and whether any signal is
 * blocked: "dfl unblocked" is what a spawned tool must start with. */
HELPER_IMPL(spawn_signals) {
  struct sigaction sa;
  sigset_t set;
  int i;
  bool blocked = false;

  (void)argc;
  (void)argv;
  sigaction(SIGPIPE, NULL, &sa);
  sigprocmask(SIG_BLOCK, NULL, &set);
  for (i = 1; i < 32; i++) {
    if (sigismember(&set, i) == 1) {
      blocked = true;
    }
  }
  write_str(1, sa.sa_handler == SIG_DFL ? "dfl" : "not-dfl");
  write_str(1, blocked ? " blocked" : " unblocked");
  return 0;
}

/* Prints the environment, one entry per line. */
HELPER_IMPL(spawn_env) {
  char **e;

  for (e = environ; *e != NULL; e++) {
    write_str(1, *e);
    write_str(1, "\n");
  }
  return 0;
}

/* "stdin=devnull bytes=N\ncwd=DIR\n" */
HELPER_IMPL(spawn_stdin_cwd) {
  struct stat a;
  struct stat b;
  char buf[4096];
  char line[4400];
  char cwd[4096];
  size_t total = 0;
  ssize_t n;
  bool devnull;

  devnull = fstat(0, &a) == 0 && stat("/dev/null", &b) == 0 &&
            S_ISCHR(a.st_mode) && a.st_rdev == b.st_rdev;
  while ((n = read(0, buf, sizeof(buf))) > 0) {
    total += (size_t)n;
  }
  if (getcwd(cwd, sizeof(cwd)) == NULL) {
    return 2;
  }
  snprintf(line, sizeof(line), "stdin=%s bytes=%zu\ncwd=%s\n",
           devnull ? "devnull" : "other", total, cwd);
  write_str(1, line);
  return 0;
}

/* spawn_flood N: N bytes of 'x' on stdout, then "end" on stderr. */
HELPER_IMPL(spawn_flood) {
  char buf[8192];
  long n = argc >= 1 ? atol(argv[0]) : 0;

  memset(buf, 'x', sizeof(buf));
  while (n > 0) {
    size_t k = n > (long)sizeof(buf) ? sizeof(buf) : (size_t)n;

    write_all(1, buf, k);
    n -= (long)k;
  }
  write_str(2, "end");
  return 0;
}

/* Forks a grandchild; both wait for a signal. Prints "GRANDCHILD_PID\n". */
HELPER_IMPL(spawn_sleeper) {
  char line[64];
  pid_t gc = fork();

  if (gc == 0) {
    for (;;) {
      pause();
    }
  }
  snprintf(line, sizeof(line), "%ld\n", (long)gc);
  write_str(1, line);
  for (;;) {
    pause();
  }
  return 0;
}

/* Ignores SIGTERM, then says "ready". */
HELPER_IMPL(spawn_ignore_term) {
  signal(SIGTERM, SIG_IGN);
  write_str(1, "ready\n");
  for (;;) {
    pause();
  }
  return 0;
}

/* Leaves a grandchild holding stdout/stderr (same process group), prints
 * its pid and exits 0 at once. */
HELPER_IMPL(spawn_double_fork) {
  char line[64];
  pid_t gc = fork();

  if (gc == 0) {
    signal(SIGTERM, SIG_IGN);
    for (;;) {
      pause();
    }
  }
  snprintf(line, sizeof(line), "%ld\n", (long)gc);
  write_str(1, line);
  _exit(0);
  return 0;
}

/* ---- spawn tests ----------------------------------------------------------- */

typedef struct {
  uv_loop_t loop;
  al_spawn_t *sp;
  int done;
  bool in_api;
  int status;
  int pid;
  int64_t exit_status;
  int term_signal;
  char *out;
  size_t out_len;
  size_t out_total;
  char *err;
  size_t err_len;
  size_t err_total;
  bool drain_killed;
  /* on_output */
  char seen[256];
  size_t seen_len;
  bool kill_on_output;
  long pgid_seen;
  long sid_seen;
} sctx_t;

static void s_on_done(al_spawn_t *sp, const al_spawn_result_t *r) {
  sctx_t *c = sp->data;

  ASSERT(!c->in_api);
  ASSERT(sp == c->sp);
  c->done++;
  c->status = r->status;
  c->pid = r->pid;
  c->exit_status = r->exit_status;
  c->term_signal = r->term_signal;
  c->out = strndup(r->out, r->out_len);
  c->out_len = r->out_len;
  c->out_total = r->out_total;
  c->err = strndup(r->err, r->err_len);
  c->err_len = r->err_len;
  c->err_total = r->err_total;
  c->drain_killed = r->drain_killed;
  ASSERT_EQ(r->out[r->out_len], '\0');
}

static void s_on_output(al_spawn_t *sp, int stream, const char *p,
                        size_t n) {
  sctx_t *c = sp->data;
  size_t k = AL_MIN(n, sizeof(c->seen) - 1 - c->seen_len);

  memcpy(c->seen + c->seen_len, p, k);
  c->seen_len += k;
  c->seen[c->seen_len] = '\0';
  if (c->kill_on_output && strchr(c->seen, '\n') != NULL) {
    c->kill_on_output = false;
    c->pgid_seen = (long)getpgid(c->sp->pid);
    c->sid_seen = (long)getsid(c->sp->pid);
    c->in_api = true;
    al__spawn_kill(c->sp);
    al__spawn_kill(c->sp); /* idempotent */
    c->in_api = false;
  }
}

static void s_init(sctx_t *c) {
  memset(c, 0, sizeof(*c));
  ASSERT_EQ(uv_loop_init(&c->loop), 0);
}

static void s_opts(sctx_t *c, al_spawn_options_t *o, const char **argv) {
  al__spawn_options_init(o);
  ASSERT_EQ(o->output_max, 200 * 1024);
  ASSERT_EQ(o->timeout_ms, 120000);
  o->argv = argv;
  o->cwd = workspace;
  o->on_done = s_on_done;
  o->on_output = s_on_output;
  o->data = c;
  o->timeout_ms = 4000;
  o->kill_grace_ms = 100;
  o->drain_ms = 100;
}

static void s_run(sctx_t *c, const al_spawn_options_t *o) {
  c->in_api = true;
  ASSERT_EQ(al__spawn_start(&c->loop, o, &c->sp), 0);
  c->in_api = false;
  ASSERT_NOT_NULL(c->sp);
  ASSERT_EQ(c->done, 0);
  while (c->done == 0) {
    uv_run(&c->loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(c->done, 1);
}

static void s_finish(sctx_t *c) {
  ASSERT_LOOP_CLOSES(&c->loop);
  ASSERT_EQ(c->done, 1);
  free(c->out);
  free(c->err);
}

TEST_IMPL(spawn_echo_output_async) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_print", "hello\n",
                        "", "0", NULL};

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  s_run(&c, &o);
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_EQ(c.term_signal, 0);
  ASSERT_STR_EQ(c.out, "hello\n");
  ASSERT_EQ(c.out_total, 6);
  ASSERT_EQ(c.err_len, 0);
  ASSERT(!c.drain_killed);
  ASSERT(c.pid > 0);
  s_finish(&c);
  ASSERT(pid_gone(c.pid));
  remove_workspace();
  return 0;
}

/* Both spawn paths: posix_spawn (the child's PATH is ours) and the
 * uv_spawn fallback (a declared PATH differs) give the same result, and
 * the child starts with default signal dispositions and nothing blocked
 * even though this process ignores SIGPIPE and blocks SIGUSR1. */
TEST_IMPL(spawn_fast_path_and_fallback_agree) {
  /* Found through PATH, so the child's PATH decides the path taken. */
  const char *argv[] = {"env", al_test_exe(), "--helper", "spawn_signals",
                        NULL};
  const char *env_other_path[] = {"PATH=/usr/bin:/bin:/nonexistent-agentloop",
                                  NULL};
  sigset_t usr1;
  int pass;

  signal(SIGPIPE, SIG_IGN);
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, NULL);
  make_workspace();
  for (pass = 0; pass < 2; pass++) {
    sctx_t c;
    al_spawn_options_t o;

    s_init(&c);
    s_opts(&c, &o, argv);
    if (pass == 1) {
      o.env = env_other_path;
    }
    c.in_api = true;
    ASSERT_EQ(al__spawn_start(&c.loop, &o, &c.sp), 0);
    c.in_api = false;
    ASSERT_EQ(c.sp->fast, pass == 0);
    while (c.done == 0) {
      uv_run(&c.loop, UV_RUN_ONCE);
    }
    ASSERT_EQ(c.status, 0);
    ASSERT_EQ(c.exit_status, 0);
    ASSERT_STR_EQ(c.out, "dfl unblocked");
    s_finish(&c);
    ASSERT(pid_gone(c.pid));
  }
  /* A program that does not exist fails the same way on the fast path. */
  {
    sctx_t c;
    al_spawn_options_t o;
    const char *missing[] = {"/nonexistent/agentloop-no-such-program", NULL};

    s_init(&c);
    s_opts(&c, &o, missing);
    ASSERT_EQ(al__spawn_start(&c.loop, &o, &c.sp), UV_ENOENT);
    ASSERT_LOOP_CLOSES(&c.loop);
  }
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_exit_code_and_stderr) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_print", "out",
                        "err!", "3", NULL};

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  s_run(&c, &o);
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.exit_status, 3);
  ASSERT_STR_EQ(c.out, "out");
  ASSERT_STR_EQ(c.err, "err!");
  ASSERT_EQ(c.err_total, 4);
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_env_allowlist) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_env", NULL};
  const char *extra[] = {"AL_DECLARED=yes", "TZ=UTC0", NULL};
  const char *bad1[] = {"NOEQUALS", NULL};
  const char *bad2[] = {"=x", NULL};
  char **env = NULL;
  al_spawn_t *sp = (al_spawn_t *)&c;
  const char *path = getenv("PATH");
  char want_path[4200];

  make_workspace();
  ASSERT_EQ(setenv("ANTHROPIC_API_KEY", "sk-ant-secret", 1), 0);
  ASSERT_EQ(setenv("OPENAI_API_KEY", "sk-openai-secret", 1), 0);
  ASSERT_EQ(setenv("TZ", "Europe/Paris", 1), 0);
  if (path == NULL) {
    ASSERT_EQ(setenv("PATH", "/usr/bin:/bin", 1), 0);
    path = getenv("PATH");
  }
  snprintf(want_path, sizeof(want_path), "\nPATH=%s\n", path);
  s_init(&c);
  s_opts(&c, &o, argv);
  o.env = extra;
  s_run(&c, &o);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_NULL(strstr(c.out, "ANTHROPIC_API_KEY"));
  ASSERT_NULL(strstr(c.out, "OPENAI_API_KEY"));
  ASSERT_NULL(strstr(c.out, "secret"));
  ASSERT_NULL(strstr(c.out, "Europe/Paris")); /* the declared TZ wins */
  ASSERT_NOT_NULL(strstr(c.out, "\nTZ=UTC0\n"));
  ASSERT_NOT_NULL(strstr(c.out, "\nAL_DECLARED=yes\n"));
  /* PATH is first in the allowlist, so it is the first line. */
  ASSERT_EQ(strncmp(c.out, want_path + 1, strlen(want_path + 1)), 0);
  s_finish(&c);

  /* Bad declared entries are refused before anything runs. */
  ASSERT_EQ(uv_loop_init(&c.loop), 0);
  o.env = bad1;
  ASSERT_EQ(al__spawn_start(&c.loop, &o, &sp), AL_EINVAL);
  ASSERT_NULL(sp);
  o.env = bad2;
  ASSERT_EQ(al__spawn_start(&c.loop, &o, &sp), AL_EINVAL);
  ASSERT_LOOP_CLOSES(&c.loop);
  ASSERT_EQ(al__spawn_env_build(NULL, &env), 0);
  ASSERT_NOT_NULL(env);
  ASSERT_EQ(strncmp(env[0], "PATH=", 5), 0);
  al__spawn_env_free(env);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_stdin_devnull_and_cwd) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_stdin_cwd", NULL};
  char want[4200];
  char real[4096];

  make_workspace();
  ASSERT_NOT_NULL(realpath(workspace, real));
  snprintf(want, sizeof(want), "stdin=devnull bytes=0\ncwd=%s\n", real);
  s_init(&c);
  s_opts(&c, &o, argv);
  s_run(&c, &o);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.out, want);
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_output_cap_counts_total) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_flood", "300000",
                        NULL};
  size_t i;

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  o.output_max = 1000;
  s_run(&c, &o);
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_EQ(c.out_len, 1000);
  ASSERT_EQ(c.out_total, 300000);
  for (i = 0; i < c.out_len; i++) {
    ASSERT_EQ(c.out[i], 'x');
  }
  ASSERT_STR_EQ(c.err, "end");
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_own_process_group) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_sleeper", NULL};
  long gc;

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  c.kill_on_output = true;
  s_run(&c, &o);
  ASSERT_EQ(c.pgid_seen, c.pid);
  ASSERT_EQ(c.sid_seen, c.pid);
  ASSERT(c.pgid_seen != (long)getpgid(0));
  ASSERT_EQ(c.status, AL_ECANCELED);
  ASSERT_EQ(c.term_signal, SIGTERM);
  gc = atol(c.out);
  ASSERT(gc > 0);
  wait_gone(&c.loop, c.pid, gc);
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_timeout_kills_group) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_sleeper", NULL};
  long gc;

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  o.timeout_ms = 500; /* room for the helper to print first */
  s_run(&c, &o);
  ASSERT_EQ(c.status, AL_ETIMEDOUT);
  ASSERT_EQ(c.term_signal, SIGTERM);
  gc = atol(c.out);
  ASSERT(gc > 0); /* it printed before the timeout */
  wait_gone(&c.loop, c.pid, gc);
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_kill_term_ignorer_gets_sigkill) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_ignore_term", NULL};

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  o.kill_grace_ms = 50;
  c.kill_on_output = true; /* after "ready": SIGTERM is ignored by then */
  s_run(&c, &o);
  ASSERT_EQ(c.status, AL_ECANCELED);
  ASSERT_EQ(c.term_signal, SIGKILL);
  ASSERT_STR_EQ(c.out, "ready\n");
  wait_gone(&c.loop, c.pid, 0);
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_double_fork_does_not_hang) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {al_test_exe(), "--helper", "spawn_double_fork", NULL};
  long gc;

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  o.timeout_ms = 4000; /* far away: the drain period ends the wait */
  o.drain_ms = 80;
  s_run(&c, &o);
  ASSERT_EQ(c.status, 0);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_EQ(c.term_signal, 0);
  ASSERT(c.drain_killed);
  gc = atol(c.out);
  ASSERT(gc > 0);
  wait_gone(&c.loop, c.pid, gc); /* it ignored SIGTERM: SIGKILL did it */
  s_finish(&c);
  remove_workspace();
  return 0;
}

TEST_IMPL(spawn_refused_never_calls_back) {
  sctx_t c;
  al_spawn_options_t o;
  const char *argv[] = {"/nonexistent/al-no-such-program", NULL};
  const char *argv_ok[] = {"/bin/true", NULL};
  char missing[300];

  make_workspace();
  s_init(&c);
  s_opts(&c, &o, argv);
  ASSERT_EQ(al__spawn_start(&c.loop, &o, &c.sp), UV_ENOENT);
  ASSERT_NULL(c.sp);
  /* A missing cwd is refused too. */
  snprintf(missing, sizeof(missing), "%s/missing", workspace);
  o.argv = argv_ok;
  o.cwd = missing;
  ASSERT(al__spawn_start(&c.loop, &o, &c.sp) < 0);
  o.cwd = NULL;
  ASSERT_EQ(al__spawn_start(&c.loop, &o, &c.sp), AL_EINVAL);
  ASSERT_LOOP_CLOSES(&c.loop);
  ASSERT_EQ(c.done, 0);
  remove_workspace();
  return 0;
}

/* ---- bash through a real executor ---------------------------------------- */

typedef struct {
  uv_loop_t loop;
  al_executor_t ex;
  al_tool_impl_t *bash;
  al_tool_impl_t wrap; /* bash, with a check around start; the tool finds
                        * itself through impl->data, which wrap copies */
  int completed;
  bool is_error;
  char *content;
  bool closed;
  int starts;
  bool abort_on_started;
  char pidfile[400];
  uv_timer_t poll;
  bool polling;
} bctx_t;

static int wrap_start(al_tool_call_t *call) {
  bctx_t *b = call->executor->data;
  int rc;

  b->starts++;
  rc = b->bash->start(call);
  /* Never synchronously: the call is still executing when start returns. */
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(call->state, AL_TOOL_CALL_EXECUTING);
  ASSERT(call->tool_holds);
  return rc;
}

static void wrap_cancel(al_tool_call_t *call) {
  bctx_t *b = call->executor->data;

  b->bash->cancel(call);
}

static const al_tool_impl_t *b_lookup(al_executor_t *ex, const char *name) {
  bctx_t *b = ex->data;

  return strcmp(name, "bash") == 0 ? &b->wrap : NULL;
}

static void b_on_completed(al_executor_t *ex, al_tool_call_t *call) {
  bctx_t *b = ex->data;

  b->completed++;
  b->is_error = call->is_error;
  free(b->content);
  b->content = strndup(call->content, call->content_len);
}

static void on_pid_poll(uv_timer_t *t) {
  bctx_t *b = t->data;

  if (access(b->pidfile, F_OK) == 0) {
    uv_timer_stop(t);
    ASSERT_EQ(al__executor_abort_all(&b->ex, AL_EXECUTOR_ABORT_USER_INTERRUPTED),
              0);
  }
}

static void b_on_started(al_executor_t *ex, al_tool_call_t *call) {
  bctx_t *b = ex->data;

  if (b->abort_on_started) {
    /* Abort once the shell is surely running (it wrote its pid file). */
    ASSERT_EQ(uv_timer_start(&b->poll, on_pid_poll, 0, 2), 0);
  }
}

static void b_init(bctx_t *b, al_bash_options_t *bo) {
  al_executor_options_t eo;

  memset(b, 0, sizeof(*b));
  ASSERT_EQ(uv_loop_init(&b->loop), 0);
  al__bash_options_init(bo);
  ASSERT_EQ(bo->display_max, 40000);
  ASSERT_EQ(bo->timeout_ms, 120000);
  bo->loop = &b->loop;
  bo->workspace = workspace;
  bo->kill_grace_ms = 100;
  bo->drain_ms = 100;
  al__executor_options_init(&eo);
  eo.lookup = b_lookup;
  eo.on_completed = b_on_completed;
  eo.on_started = b_on_started;
  eo.data = b;
  ASSERT_EQ(al__executor_init(&b->loop, &b->ex, &eo), 0);
  ASSERT_EQ(uv_timer_init(&b->loop, &b->poll), 0);
  b->poll.data = b;
}

static void b_make(bctx_t *b, const al_bash_options_t *bo) {
  ASSERT_EQ(al__bash_tool_new(bo, &b->bash), 0);
  ASSERT_STR_EQ(b->bash->name, "bash");
  ASSERT_NULL(b->bash->is_concurrency_safe); /* unsafe */
  b->wrap = *b->bash;
  b->wrap.start = wrap_start;
  b->wrap.cancel = wrap_cancel; /* data stays the bash tool's */
}

/* Runs one bash call with the given JSON input to its on_completed. */
static void b_call(bctx_t *b, const char *input) {
  json_t *in = json_loads(input, 0, NULL);
  int before = b->completed;

  ASSERT_NOT_NULL(in);
  ASSERT_EQ(al__executor_reset(&b->ex), 0);
  ASSERT_EQ(al__executor_add(&b->ex, "id1", "bash", in), 0);
  json_decref(in);
  while (b->completed == before) {
    uv_run(&b->loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(b->completed, before + 1);
}

static void b_on_close(al_executor_t *ex) {
  bctx_t *b = ex->data;

  b->closed = true;
}

static void b_finish(bctx_t *b) {
  al__executor_close(&b->ex, b_on_close);
  uv_close((uv_handle_t *)&b->poll, NULL);
  ASSERT_LOOP_CLOSES(&b->loop);
  ASSERT(b->closed);
  al__bash_tool_free(b->bash);
  free(b->content);
}

/* One command with default options; checks content and is_error. */
static void bash_expect(const char *input, const char *content,
                        bool is_error) {
  bctx_t b;
  al_bash_options_t bo;

  b_init(&b, &bo);
  b_make(&b, &bo);
  b_call(&b, input);
  ASSERT_STR_EQ(b.content, content);
  ASSERT_EQ(b.is_error, is_error);
  b_finish(&b);
}

TEST_IMPL(bash_echo) {
  make_workspace();
  bash_expect("{\"command\": \"echo hello\"}", "hello\n", false);
  bash_expect("{\"command\": \"true\"}", "(no output)", false);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_exit_code_and_stderr) {
  make_workspace();
  bash_expect("{\"command\": \"echo out; echo err >&2; exit 3\"}",
              "out\n[stderr]\nerr\nexit code 3", true);
  bash_expect("{\"command\": \"printf x; printf y >&2\"}",
              "x\n[stderr]\ny", false);
  bash_expect("{\"command\": \"exit 1\"}", "exit code 1", true);
  bash_expect("{\"command\": \"kill -9 $$\"}", "killed by signal 9", true);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_env_allowlist) {
  bctx_t b;
  al_bash_options_t bo;
  const char *extra[] = {"AL_DECLARED=declared", NULL};
  const char *bad[] = {"NOEQUALS", NULL};
  al_tool_impl_t *impl = NULL;

  make_workspace();
  ASSERT_EQ(setenv("ANTHROPIC_API_KEY", "sk-ant-secret", 1), 0);
  ASSERT_EQ(setenv("AL_DECLARED", "host-value", 1), 0);
  b_init(&b, &bo);
  bo.env = extra;
  b_make(&b, &bo);
  b_call(&b, "{\"command\": \"echo key=${ANTHROPIC_API_KEY:-unset} "
             "decl=$AL_DECLARED; test -n \\\"$PATH\\\" && echo path=set; "
             "env | grep -c SECRET || true\"}");
  ASSERT_STR_EQ(b.content, "key=unset decl=declared\npath=set\n0\n");
  ASSERT(!b.is_error);
  b_finish(&b);
  bo.env = bad;
  ASSERT_EQ(al__bash_tool_new(&bo, &impl), AL_EINVAL);
  ASSERT_NULL(impl);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_stdin_devnull_and_cwd) {
  char real[4096];
  char want[4200];

  make_workspace();
  ASSERT_NOT_NULL(realpath(workspace, real));
  snprintf(want, sizeof(want), "%s\n", real);
  /* cat returns at once: stdin is /dev/null, not the test's terminal. */
  bash_expect("{\"command\": \"cat; pwd -P\"}", want, false);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_truncation_notice) {
  bctx_t b;
  al_bash_options_t bo;
  char *want;

  make_workspace();
  /* Defaults: 50,000 characters shown as 40,000. */
  want = malloc(40000 + 100);
  ASSERT_NOT_NULL(want);
  memset(want, 'a', 40000);
  strcpy(want + 40000,
         "\n[OUTPUT TRUNCATED: showing 40000 of 50000 characters from bash]");
  bash_expect("{\"command\": \"head -c 50000 /dev/zero | tr '\\\\0' a\"}",
              want, false);
  free(want);
  /* Exactly at the limit: no notice. */
  b_init(&b, &bo);
  bo.display_max = 10;
  b_make(&b, &bo);
  b_call(&b, "{\"command\": \"printf 0123456789\"}");
  ASSERT_STR_EQ(b.content, "0123456789");
  /* Characters are code points: 12 two-byte characters, 10 shown; the exit
   * code stays visible after the notice. */
  b_call(&b, "{\"command\": \"printf 'éééééééééééé'; exit 2\"}");
  ASSERT_STR_EQ(b.content, "éééééééééé\n[OUTPUT TRUNCATED: showing 10 of 12 "
                           "characters from bash]\nexit code 2");
  ASSERT(b.is_error);
  b_finish(&b);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_output_cap_counts_discarded) {
  bctx_t b;
  al_bash_options_t bo;
  char want[200];

  make_workspace();
  b_init(&b, &bo);
  bo.output_max = 50; /* bytes kept per stream */
  bo.display_max = 20;
  b_make(&b, &bo);
  b_call(&b, "{\"command\": \"head -c 100000 /dev/zero | tr '\\\\0' b\"}");
  memset(want, 'b', 20);
  strcpy(want + 20,
         "\n[OUTPUT TRUNCATED: showing 20 of 100000 characters from bash]");
  ASSERT_STR_EQ(b.content, want);
  ASSERT(!b.is_error);
  b_finish(&b);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_invalid_utf8_sanitized) {
  make_workspace();
  bash_expect("{\"command\": \"printf '\\\\377ok\\\\300'\"}",
              "\xEF\xBF\xBDok\xEF\xBF\xBD\n"
              "[2 invalid UTF-8 sequence(s) replaced with U+FFFD]", false);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_timeout_kills_group) {
  bctx_t b;
  al_bash_options_t bo;
  long pid;
  const char *nl;

  make_workspace();
  b_init(&b, &bo);
  b_make(&b, &bo);
  /* The shell ignores SIGTERM and has a child: SIGKILL after the grace
   * period ends both. */
  b_call(&b, "{\"command\": \"trap '' TERM; echo $$; sleep 30 & wait; "
             "while :; do :; done\", \"timeout\": 0.2}");
  ASSERT(b.is_error);
  ASSERT_EQ(strncmp(b.content, "Error: command timed out after 0.2 s\n", 37),
            0);
  nl = strchr(b.content, '\n');
  ASSERT_NOT_NULL(nl);
  pid = atol(nl + 1);
  ASSERT(pid > 0);
  wait_gone(&b.loop, pid, 0);
  b_finish(&b);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_cancel_kills_group_drops_result) {
  bctx_t b;
  al_bash_options_t bo;
  char input[600];
  FILE *f;
  long pid = 0;
  al_tool_call_t *call;

  make_workspace();
  b_init(&b, &bo);
  b_make(&b, &bo);
  snprintf(b.pidfile, sizeof(b.pidfile), "%s/pid", workspace);
  b.abort_on_started = true;
  snprintf(input, sizeof(input),
           "{\"command\": \"echo $$ > pid.tmp && mv pid.tmp pid && "
           "sleep 30; echo late\"}");
  b_call(&b, input);
  ASSERT_EQ(b.starts, 1);
  ASSERT(b.is_error);
  ASSERT_STR_EQ(b.content,
                al__executor_abort_text(AL_EXECUTOR_ABORT_USER_INTERRUPTED));
  f = fopen(b.pidfile, "r");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fscanf(f, "%ld", &pid), 1);
  fclose(f);
  ASSERT(pid > 0);
  wait_gone(&b.loop, pid, 0);
  /* The tool's late result changed nothing. */
  uv_run(&b.loop, UV_RUN_NOWAIT);
  ASSERT_EQ(b.completed, 1);
  call = al__executor_results(&b.ex, NULL);
  ASSERT_NOT_NULL(call);
  ASSERT_EQ(call->abort_reason, AL_EXECUTOR_ABORT_USER_INTERRUPTED);
  ASSERT_STR_EQ(call->content,
                al__executor_abort_text(AL_EXECUTOR_ABORT_USER_INTERRUPTED));
  b_finish(&b);
  ASSERT_EQ(b.completed, 1);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_blocklist_rules) {
  static const char *const blocked[] = {
      "rm -rf /",
      "rm -rf /*",
      "rm -fr /",
      "rm -r -f /",
      "rm -Rf //",
      "/bin/rm -rf /",
      "rm --recursive --force /",
      "rm -rf ~",
      "rm -rf ~/",
      "rm -rf $HOME",
      "rm -rf /etc",
      "rm -rf --no-preserve-root /",
      "echo hi; rm -rf /",
      "true && rm -rf / || true",
      "(rm -rf /)",
      "sh -c 'rm -rf /'",
      "bash -c \"sudo ls\"",
      "eval 'rm -rf /'",
      "sudo ls",
      "FOO=1 sudo -u root ls",
      "env sudo ls",
      "ls | sudo tee /etc/x",
      "$(sudo id)",
      "su -",
      "shutdown -h now",
      "reboot",
      "/sbin/poweroff",
      "halt",
      "systemctl reboot",
      "mkfs /dev/sda1",
      "mkfs.ext4 /dev/sda1",
      "dd if=/dev/zero of=/dev/sda bs=1M",
      "dd of=/dev/nvme0n1 if=x",
      "chmod 777 /etc/passwd",
      "chmod -R 777 .",
      "chmod a+rwx f",
      ":(){ :|:& };:",
      ":(){ :|: & }; :",
      "bomb(){ bomb|bomb& };bomb",
      NULL};
  static const char *const allowed[] = {
      "rm -rf ./build",
      "rm -rf build/",
      "rm -f /tmp/x",
      "rm /tmp/x",
      "rm -rf /tmp/al_test/dir",
      "echo 'sudo reboot'",
      "git commit -m \"fix; sudo docs\"",
      "echo rm -rf /",
      "grep -r shutdown .",
      "dd if=/dev/zero of=./disk.img bs=1 count=1",
      "dd if=/dev/zero of=/dev/null count=1",
      "chmod 755 script.sh",
      "chmod 0644 f",
      "ls /",
      "f(){ echo hi; }; f",
      "echo ${HOME}",
      "pseudo_sudo --help",
      NULL};
  size_t i;

  for (i = 0; blocked[i] != NULL; i++) {
    if (al__bash_blocked(blocked[i]) == NULL) {
      AL_TEST_FAIL("not blocked: %s", blocked[i]);
    }
  }
  for (i = 0; allowed[i] != NULL; i++) {
    if (al__bash_blocked(allowed[i]) != NULL) {
      AL_TEST_FAIL("blocked: %s (%s)", allowed[i],
                   al__bash_blocked(allowed[i]));
    }
  }
  ASSERT_NOT_NULL(strstr(al__bash_blocked("sudo ls"), "sudo"));
  ASSERT_NOT_NULL(strstr(al__bash_blocked(":(){ :|:& };:"), "fork bomb"));
  ASSERT_NOT_NULL(strstr(al__bash_blocked("rm -rf /"), "rm -rf"));
  ASSERT_NOT_NULL(strstr(al__bash_blocked("mkfs.ext4 x"), "mkfs"));
  ASSERT_NOT_NULL(strstr(al__bash_blocked("dd of=/dev/sda"), "dd"));
  ASSERT_NOT_NULL(strstr(al__bash_blocked("chmod 777 x"), "chmod 777"));
  ASSERT_NOT_NULL(strstr(al__bash_blocked("reboot"), "reboot"));
  return 0;
}

TEST_IMPL(bash_blocklist_refused_without_spawn) {
  bctx_t b;
  al_bash_options_t bo;
  char marker[400];

  make_workspace();
  snprintf(marker, sizeof(marker), "%s/marker", workspace);
  b_init(&b, &bo);
  b_make(&b, &bo);
  /* The first part would create the marker if anything ran. */
  b_call(&b, "{\"command\": \"touch marker; sudo rm -rf /\"}");
  ASSERT(b.is_error);
  ASSERT_STR_EQ(b.content,
                "Error: command blocked by the bash safety blocklist: "
                "privilege escalation (sudo, su, doas) is not allowed");
  b_call(&b, "{\"command\": \"touch marker; :(){ :|:& };:\"}");
  ASSERT(b.is_error);
  ASSERT_STR_EQ(b.content,
                "Error: command blocked by the bash safety blocklist: "
                "fork bombs are not allowed");
  b_call(&b, "{\"command\": \"touch marker && rm -rf /\"}");
  ASSERT(b.is_error);
  ASSERT_NOT_NULL(strstr(b.content, "rm -rf"));
  ASSERT(access(marker, F_OK) != 0);
  b_finish(&b);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_bad_input) {
  make_workspace();
  bash_expect("{}", "Error: bash requires a non-empty string \"command\"",
              true);
  bash_expect("{\"command\": 5}",
              "Error: bash requires a non-empty string \"command\"", true);
  bash_expect("{\"command\": \"echo x\", \"timeout\": -1}",
              "Error: \"timeout\" must be a positive number of seconds",
              true);
  bash_expect("{\"command\": \"echo x\", \"timeout\": \"5\"}",
              "Error: \"timeout\" must be a positive number of seconds",
              true);
  bash_expect("{\"command\": \"echo x\", \"timeout\": 5}", "x\n", false);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_never_completes_inside_start) {
  bctx_t b;
  al_bash_options_t bo;

  make_workspace();
  b_init(&b, &bo);
  b_make(&b, &bo);
  /* wrap_start asserts the call is still executing after start, for a
   * spawn, a blocked command and bad input alike. */
  b_call(&b, "{\"command\": \"echo fast\"}");
  ASSERT_STR_EQ(b.content, "fast\n");
  b_call(&b, "{\"command\": \"reboot\"}");
  ASSERT(b.is_error);
  b_call(&b, "{}");
  ASSERT(b.is_error);
  ASSERT_EQ(b.starts, 3);
  b_finish(&b);
  /* A shell that does not exist: an error result, not a refused start. */
  b_init(&b, &bo);
  bo.shell = "/nonexistent/sh";
  b_make(&b, &bo);
  b_call(&b, "{\"command\": \"echo x\"}");
  ASSERT(b.is_error);
  ASSERT_STR_EQ(b.content, "Error: could not start /nonexistent/sh: "
                           "no such file or directory");
  b_finish(&b);
  remove_workspace();
  return 0;
}

TEST_IMPL(bash_background_job_killed_at_end) {
  bctx_t b;
  al_bash_options_t bo;
  long pid;

  make_workspace();
  b_init(&b, &bo);
  b_make(&b, &bo);
  /* The job closed its pipes, so the result does not wait for it; it must
   * not outlive the command either. */
  b_call(&b, "{\"command\": \"sleep 30 >/dev/null 2>&1 & echo $!\"}");
  ASSERT(!b.is_error);
  pid = atol(b.content);
  ASSERT(pid > 0);
  wait_gone(&b.loop, pid, 0);
  b_finish(&b);
  remove_workspace();
  return 0;
}
