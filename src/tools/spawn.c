/* Child-process spawn wrapper: see spawn.h for the contract.
 *
 * One al_spawn_t owns seven handles (process, three pipes, three timers);
 * it frees itself in the last close callback, after on_done. The stdin
 * pipe may close earlier (al__spawn_close_stdin); pending_closes counts
 * it then, and only a finished run frees. The join flags
 * (exited, eof[0], eof[1]) are the only way to `finished`; the timers only
 * push the child towards them (signals) or force the pipe side (drain). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/launch.h"
#include "sandbox/pool.h"
#include "tools/spawn.h"

enum { T_TIMEOUT = 0, T_KILL = 1, T_DRAIN = 2 };

const char *const AL_SPAWN_ENV_ALLOWLIST[] = {
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR", "TZ",
    NULL};

void al__spawn_options_init(al_spawn_options_t *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->output_max = AL_SPAWN_DEFAULT_OUTPUT_MAX;
  opts->timeout_ms = AL_SPAWN_DEFAULT_TIMEOUT_MS;
  opts->kill_grace_ms = AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  opts->drain_ms = AL_SPAWN_DEFAULT_DRAIN_MS;
}

/* ---- environment --------------------------------------------------------- */

void al__spawn_env_free(char **env) {
  size_t i;

  if (env == NULL) {
    return;
  }
  for (i = 0; env[i] != NULL; i++) {
    al_free(env[i]);
  }
  al_free(env);
}

/* True if some extra entry defines `name`. */
static bool extra_defines(const char *const *extra, const char *name) {
  size_t n = strlen(name);
  size_t i;

  for (i = 0; extra != NULL && extra[i] != NULL; i++) {
    if (strncmp(extra[i], name, n) == 0 && extra[i][n] == '=') {
      return true;
    }
  }
  return false;
}

int al__spawn_env_build(const char *const *extra, char ***out) {
  size_t n_extra = 0;
  size_t n = 0;
  size_t i;
  char **env;
  const char *v;
  size_t kl;
  size_t vl;

  *out = NULL;
  for (i = 0; extra != NULL && extra[i] != NULL; i++) {
    const char *eq = strchr(extra[i], '=');

    if (eq == NULL || eq == extra[i]) {
      return AL_EINVAL;
    }
    n_extra++;
  }
  env = al_calloc(AL_ARRAY_SIZE(AL_SPAWN_ENV_ALLOWLIST) + n_extra,
                  sizeof(*env));
  if (env == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; AL_SPAWN_ENV_ALLOWLIST[i] != NULL; i++) {
    const char *k = AL_SPAWN_ENV_ALLOWLIST[i];

    v = getenv(k);
    if (v == NULL || extra_defines(extra, k)) {
      continue;
    }
    kl = strlen(k);
    vl = strlen(v);
    env[n] = al_malloc(kl + vl + 2);
    if (env[n] == NULL) {
      al__spawn_env_free(env);
      return AL_ENOMEM;
    }
    memcpy(env[n], k, kl);
    env[n][kl] = '=';
    memcpy(env[n] + kl + 1, v, vl + 1);
    n++;
  }
  for (i = 0; i < n_extra; i++) {
    env[n] = al_strdup(extra[i]);
    if (env[n] == NULL) {
      al__spawn_env_free(env);
      return AL_ENOMEM;
    }
    n++;
  }
  *out = env;
  return 0;
}

/* ---- lifecycle ----------------------------------------------------------- */

static void kill_group(al_spawn_t *sp, int sig) {
  if (sp->pid > 0) {
    /* ESRCH: the group is already gone. */
    (void)kill(-sp->pid, sig);
  }
}

/* The last freed run, kept for the next start. A run is over 1 KB: glibc
 * serves such a request only after merging every free small chunk
 * (malloc_consolidate), and after a turn of JSON work there are
 * thousands: 0.1-0.2 ms measured between a tool block's stop and its
 * command's hand-off. Reusing one skips that; the merge happens at some
 * later large allocation, off the critical path. */
static _Thread_local al_spawn_t *g_spare;

static al_spawn_t *run_alloc(void) {
  al_spawn_t *sp = g_spare;

  if (sp == NULL) {
    return al_calloc(1, sizeof(*sp));
  }
  g_spare = NULL;
  memset(sp, 0, sizeof(*sp));
  return sp;
}

static void flush_early(al_spawn_t *sp, bool started);

static void run_free(al_spawn_t *sp) {
  al_free(sp->feed); /* never written: the child never started */
  sp->feed = NULL;
  flush_early(sp, false);
#if defined(__SANITIZE_ADDRESS__)
  /* Under ASan every run is freed, so a use after on_done is caught
   * instead of landing in the next run. */
  al_free(sp);
#else
  if (g_spare == NULL) {
    g_spare = sp;
  } else {
    al_free(sp);
  }
#endif
}

static void finish_free(al_spawn_t *sp) {
  al_spawn_result_t res;
  int i;

  if (!sp->refused) {
    memset(&res, 0, sizeof(res));
    res.status = sp->status;
    res.pid = sp->pid;
    res.exit_status = sp->exit_status;
    res.term_signal = sp->term_signal;
    res.out = sp->bufs[0].data != NULL ? sp->bufs[0].data : "";
    res.out_len = sp->bufs[0].len;
    res.out_total = sp->totals[0];
    res.err = sp->bufs[1].data != NULL ? sp->bufs[1].data : "";
    res.err_len = sp->bufs[1].len;
    res.err_total = sp->totals[1];
    res.drain_killed = sp->drain_killed;
    res.start_error = sp->start_error;
    res.program = sp->program;
    sp->on_done(sp, &res);
  }
  for (i = 0; i < 2; i++) {
    al_buf_free(&sp->bufs[i]);
  }
  if (sp->pidfd >= 0) {
    close(sp->pidfd);
  }
  run_free(sp);
}

static void cleanup_work(uv_work_t *req) {
  al_spawn_t *sp = req->data;

  al__sandbox_cleanup(sp->sandbox);
}

/* The lock was busy on the loop: the whole release, here. */
static void release_work(uv_work_t *req) {
  al_spawn_t *sp = req->data;

  al__sandbox_release(sp->sandbox);
}

static void cleanup_done(uv_work_t *req, int status) {
  al_spawn_t *sp = req->data;

  (void)status;
  al__sandbox_unref(sp->sandbox);
  finish_free(sp);
}

static void on_close(uv_handle_t *h) {
  al_spawn_t *sp = h->data;
  int r;

  if (--sp->pending_closes > 0 || !sp->finished) {
    return; /* more to come, or only the early stdin close */
  }
  r = al__sandbox_release_try(sp->sandbox);
  if (r != 0) {
    /* The last sandboxed child of this plan is gone: its placeholders
     * are removed on the threadpool, and the result is delivered after
     * that, so whoever reads it sees the workspace as the tool left it.
     * A busy lock (another run's clean-up) is waited for there too. */
    sp->cleanup.data = sp;
    if (uv_queue_work(sp->loop, &sp->cleanup,
                      r < 0 ? release_work : cleanup_work,
                      cleanup_done) == 0) {
      return; /* cleanup_done drops the run's reference */
    }
    if (r < 0) {
      al__sandbox_release(sp->sandbox);
    } else {
      al__sandbox_cleanup(sp->sandbox);
    }
  }
  if (sp->sandbox != NULL) {
    al__sandbox_unref(sp->sandbox);
  }
  finish_free(sp);
}

static void close_all(al_spawn_t *sp) {
  int i;

  sp->pending_closes += 5;
  if (!uv_is_closing((uv_handle_t *)&sp->in)) {
    sp->pending_closes++;
    sp->has_in = false;
    uv_close((uv_handle_t *)&sp->in, on_close);
  }
  /* No process handle when it never started (async plan cancelled). */
  if (sp->fast || sp->proc_init) {
    sp->pending_closes++;
    uv_close(sp->fast ? (uv_handle_t *)&sp->pidpoll
                      : (uv_handle_t *)&sp->proc,
             on_close);
  }
  for (i = 0; i < 2; i++) {
    uv_close((uv_handle_t *)&sp->pipes[i], on_close);
  }
  for (i = 0; i < 3; i++) {
    uv_close((uv_handle_t *)&sp->timers[i], on_close);
  }
}

static void maybe_finish(al_spawn_t *sp) {
  if (sp->finished || !sp->exited || !sp->eof[0] || !sp->eof[1]) {
    return;
  }
  sp->finished = true;
  /* Whatever the command left running in its group (background jobs,
   * a grandchild that closed its pipes) ends with it. */
  kill_group(sp, SIGKILL);
  close_all(sp);
}

static void on_kill_timer(uv_timer_t *t) {
  al_spawn_t *sp = t->data;

  kill_group(sp, SIGKILL);
}

/* TERM now, KILL after the grace period unless the join completes first
 * (maybe_finish then closes the timer). */
static void start_kill(al_spawn_t *sp) {
  if (sp->killing || sp->finished) {
    return;
  }
  sp->killing = true;
  kill_group(sp, SIGTERM);
  uv_timer_start(&sp->timers[T_KILL], on_kill_timer, sp->kill_grace_ms, 0);
}

static void on_timeout(uv_timer_t *t) {
  al_spawn_t *sp = t->data;

  if (sp->status == 0) {
    sp->status = AL_ETIMEDOUT;
  }
  start_kill(sp);
}

static void on_drain(uv_timer_t *t) {
  al_spawn_t *sp = t->data;
  int i;

  sp->drain_killed = true;
  kill_group(sp, SIGKILL);
  for (i = 0; i < 2; i++) {
    if (!sp->eof[i]) {
      uv_read_stop((uv_stream_t *)&sp->pipes[i]);
      sp->eof[i] = true;
    }
  }
  maybe_finish(sp);
}

static void child_exited(al_spawn_t *sp, int64_t exit_status,
                         int term_signal) {
  sp->exited = true;
  sp->exit_status = exit_status;
  sp->term_signal = term_signal;
  uv_timer_stop(&sp->timers[T_TIMEOUT]);
  if (sp->killing) {
    /* Being stopped and its leader is gone: the rest of the group ends
     * now, not after the drain or the grace. A TERM may not have reached
     * it all: a PID namespace's init (bwrap's inner half, mid-start)
     * ignores it, and held the pipes until the drain's KILL. */
    kill_group(sp, SIGKILL);
  }
  if (!sp->eof[0] || !sp->eof[1]) {
    uv_timer_start(&sp->timers[T_DRAIN], on_drain, sp->drain_ms, 0);
  }
  maybe_finish(sp);
}

static void on_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal) {
  child_exited(p->data, exit_status, term_signal);
}

/* The pidfd is readable once the child has exited: reap it. */
static void on_pidfd(uv_poll_t *h, int status, int events) {
  al_spawn_t *sp = h->data;
  siginfo_t si;

  (void)status;
  (void)events;
  memset(&si, 0, sizeof(si));
  if (waitid(P_PIDFD, (id_t)sp->pidfd, &si, WEXITED | WNOHANG) != 0) {
    if (errno == EINTR || errno == EAGAIN) {
      return;
    }
    si.si_pid = sp->pid; /* ECHILD: reaped elsewhere; report a kill */
    si.si_code = CLD_KILLED;
    si.si_status = SIGKILL;
  }
  if (si.si_pid == 0) {
    return; /* spurious wakeup: still running */
  }
  uv_poll_stop(h);
  if (si.si_code == CLD_EXITED) {
    child_exited(sp, si.si_status, 0);
  } else {
    child_exited(sp, 0, si.si_status);
  }
}

/* One buffer per thread serves every pipe of every run on its loop: each
 * read is consumed (copied or counted) before the next allocation. Not a
 * field of the run, which stays small (see run_alloc). */
static _Thread_local char g_readbuf[65536];

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  buf->base = g_readbuf;
  buf->len = sizeof(g_readbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  al_spawn_t *sp = s->data;
  int i = (s == (uv_stream_t *)&sp->pipes[0]) ? 0 : 1;
  size_t room;

  if (nread > 0) {
    sp->totals[i] += (size_t)nread;
    room = sp->output_max - sp->bufs[i].len;
    if (room > 0) {
      /* On ENOMEM the bytes are only counted. */
      (void)al_buf_append(&sp->bufs[i], buf->base,
                          AL_MIN(room, (size_t)nread));
    }
    if (sp->on_output != NULL) {
      sp->on_output(sp, i, buf->base, (size_t)nread);
    }
    return;
  }
  if (nread < 0) {
    /* EOF or a read error: either way this side is done. */
    uv_read_stop(s);
    sp->eof[i] = true;
    maybe_finish(sp);
  }
}

/* The fast path. uv_spawn (libuv 1.44) forks, which copies the parent's
 * page tables: about 1.5 ms per spawn in a process of a few MB on our test
 * VMs, growing with its size. glibc's posix_spawn uses
 * clone(CLONE_VM | CLONE_VFORK) and costs a fraction of that, and a pidfd
 * watched with uv_poll tells us when the child exits. Returns 1 when this
 * path cannot be used here (old kernel without pidfd, or a child PATH that
 * differs from ours: posix_spawnp searches the parent's PATH, uv_spawn
 * the child's), 0 when the child runs, or a negative error; on anything
 * but 0 the caller uses uv_spawn, which then reports the failure. */
static int fast_spawn(al_spawn_t *sp, const char *const *argv,
                      const char *cwd, char **env, bool stdin_pipe) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, all;
  const char *host_path = getenv("PATH");
  const char *child_path = NULL;
  int fds[2][2] = {{-1, -1}, {-1, -1}};
  int fin[2] = {-1, -1};
  pid_t pid;
  int probe;
  int rc;
  int i;

  for (i = 0; env[i] != NULL; i++) {
    if (strncmp(env[i], "PATH=", 5) == 0) {
      child_path = env[i] + 5;
    }
  }
  if (strchr(argv[0], '/') == NULL &&
      (host_path == NULL || child_path == NULL ||
       strcmp(host_path, child_path) != 0)) {
    return 1;
  }
  probe = (int)pidfd_open(getpid(), 0);
  if (probe < 0) {
    return 1;
  }
  close(probe);
  for (i = 0; i < 2; i++) {
    if (pipe2(fds[i], O_CLOEXEC) != 0) {
      rc = -errno;
      goto fail_pipes;
    }
  }
  if (stdin_pipe && pipe2(fin, O_CLOEXEC) != 0) {
    rc = -errno;
    goto fail_pipes;
  }
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  sigemptyset(&none);
  sigfillset(&all);
  /* A new session (so kill(-pid) reaches its group), an empty signal mask
   * and default dispositions (the parent may ignore SIGPIPE), as uv_spawn
   * does for UV_PROCESS_DETACHED. */
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  if (stdin_pipe) {
    posix_spawn_file_actions_adddup2(&fa, fin[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&fa, fds[0][1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1][1], 2);
  posix_spawn_file_actions_addchdir_np(&fa, cwd);
  rc = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[0][1]);
  close(fds[1][1]);
  fds[0][1] = fds[1][1] = -1;
  if (fin[0] >= 0) {
    close(fin[0]);
    fin[0] = -1;
  }
  if (rc != 0) {
    rc = -rc;
    goto fail_pipes;
  }
  sp->pid = (int)pid;
  sp->pidfd = (int)pidfd_open(pid, 0);
  if (sp->pidfd < 0) {
    /* Cannot watch it: do not leave it running. */
    (void)kill(-(pid_t)pid, SIGKILL);
    (void)waitpid(pid, NULL, 0);
    rc = -errno;
    sp->pid = 0;
    goto fail_pipes;
  }
  sp->fast = true;
  uv_poll_init(sp->loop, &sp->pidpoll, sp->pidfd);
  sp->pidpoll.data = sp;
  uv_poll_start(&sp->pidpoll, UV_READABLE, on_pidfd);
  for (i = 0; i < 2; i++) {
    if (uv_pipe_open(&sp->pipes[i], fds[i][0]) != 0) {
      close(fds[i][0]);
      sp->eof[i] = true;
    }
  }
  if (fin[1] >= 0) {
    if (uv_pipe_open(&sp->in, fin[1]) == 0) {
      sp->has_in = true;
    } else {
      close(fin[1]);
    }
  }
  return 0;
fail_pipes:
  if (fin[0] >= 0) {
    close(fin[0]);
  }
  if (fin[1] >= 0) {
    close(fin[1]);
  }
  for (i = 0; i < 2; i++) {
    if (fds[i][0] >= 0) {
      close(fds[i][0]);
    }
    if (fds[i][1] >= 0) {
      close(fds[i][1]);
    }
  }
  return rc;
}

/* Starts the process of a run whose handles are initialized: the warm
 * sandbox already running (w->pid > 0), else posix_spawn, else uv_spawn.
 * 0 or the error (nothing runs then; the handles stay to be closed). */
static int start_child(al_spawn_t *sp, char *const *args, const char *cwd,
                       char **env, bool stdin_pipe, al_warm_t *w) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  int rc;
  int i;

  memset(&po, 0, sizeof(po));
  memset(stdio, 0, sizeof(stdio));
  if (stdin_pipe) {
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&sp->in;
  } else {
    stdio[0].flags = UV_IGNORE; /* libuv opens /dev/null for it */
  }
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&sp->pipes[0];
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&sp->pipes[1];
  po.exit_cb = on_exit_cb;
  po.file = args[0];
  po.args = (char **)args;
  po.env = env;
  po.cwd = cwd;
  po.flags = UV_PROCESS_DETACHED;
  po.stdio_count = 3;
  po.stdio = stdio;

  if (w != NULL && w->pid > 0) {
    /* Already running, waiting for nothing but the exec. */
    rc = 0;
    sp->pid = w->pid;
    sp->pidfd = w->pidfd;
    sp->fast = true;
    uv_poll_init(sp->loop, &sp->pidpoll, sp->pidfd);
    sp->pidpoll.data = sp;
    uv_poll_start(&sp->pidpoll, UV_READABLE, on_pidfd);
    if (uv_pipe_open(&sp->pipes[0], w->out) != 0) {
      close(w->out);
      sp->eof[0] = true;
    }
    if (uv_pipe_open(&sp->pipes[1], w->err) != 0) {
      close(w->err);
      sp->eof[1] = true;
    }
    if (sp->warm_in >= 0) {
      if (uv_pipe_open(&sp->in, sp->warm_in) == 0) {
        sp->has_in = true;
      } else {
        close(sp->warm_in); /* the command reads EOF */
      }
      sp->warm_in = -1;
    }
  } else {
    rc = fast_spawn(sp, (const char *const *)args, cwd, env, stdin_pipe);
  }
  if (rc != 0) {
    /* Not possible here, or it failed: uv_spawn reports the failure the
     * usual way (and initializes the handle close_all closes). */
    sp->proc_init = true;
    rc = uv_spawn(sp->loop, &sp->proc, &po);
    if (rc == 0) {
      sp->pid = sp->proc.pid;
      sp->has_in = stdin_pipe;
    }
  }
  if (rc != 0) {
    return rc;
  }
  for (i = 0; i < 2; i++) {
    if (sp->eof[i]) {
      continue;
    }
    if (uv_read_start((uv_stream_t *)&sp->pipes[i], on_alloc, on_read) != 0) {
      sp->eof[i] = true; /* nothing will come; the join does not wait */
    }
  }
  return 0;
}

typedef struct al_spawn_early_s {
  struct al_spawn_early_s *next;
  uv_write_t req;
  char *buf;
  size_t len;
} early_t;

static void on_early_written(uv_write_t *req, int status) {
  early_t *e = req->data;

  (void)status; /* a child that left shows as its exit */
  al_free(e->buf);
  al_free(e);
}

static int write_now(al_spawn_t *sp, early_t *e) {
  uv_buf_t b = uv_buf_init(e->buf, (unsigned)e->len);

  e->req.data = e;
  if (!sp->has_in || uv_write(&e->req, (uv_stream_t *)&sp->in, &b, 1,
                              on_early_written) != 0) {
    al_free(e->buf);
    al_free(e);
    return UV_EPIPE;
  }
  return 0;
}

int al__spawn_write(al_spawn_t *sp, char *buf, size_t len) {
  early_t *e = al_calloc(1, sizeof(*e));
  early_t **tail;

  if (e == NULL) {
    al_free(buf);
    return AL_ENOMEM;
  }
  e->buf = buf;
  e->len = len;
  if (sp->planning) {
    for (tail = &sp->early; *tail != NULL; tail = &(*tail)->next) {
    }
    *tail = e;
    return 0;
  }
  return write_now(sp, e);
}

/* What was written before the child existed, in order (or dropped when
 * it never started). */
static void flush_early(al_spawn_t *sp, bool started) {
  while (sp->early != NULL) {
    early_t *e = sp->early;

    sp->early = e->next;
    e->next = NULL;
    if (started) {
      (void)write_now(sp, e);
    } else {
      al_free(e->buf);
      al_free(e);
    }
  }
}

static void on_fed(uv_write_t *req, int status) {
  al_spawn_t *sp = req->data;

  (void)status; /* a child that left early reads nothing: its business */
  al_free(sp->feed);
  sp->feed = NULL;
  al__spawn_close_stdin(sp);
}

/* stdin_text, now that the child exists (any start path). */
static void feed_stdin(al_spawn_t *sp) {
  uv_buf_t b;

  if (sp->feed == NULL) {
    return;
  }
  b = uv_buf_init(sp->feed, (unsigned)sp->feed_len);
  sp->feed_req.data = sp;
  if (!sp->has_in ||
      uv_write(&sp->feed_req, (uv_stream_t *)&sp->in, &b, 1, on_fed) != 0) {
    al_free(sp->feed);
    sp->feed = NULL;
    al__spawn_close_stdin(sp);
  }
}

/* A run that ends without its process ever starting (cancelled, timed
 * out or failed while its sandbox was planned): on_done still fires, from
 * the last close callback. */
static void finish_unstarted(al_spawn_t *sp) {
  sp->exited = true;
  sp->eof[0] = sp->eof[1] = true;
  uv_timer_stop(&sp->timers[T_TIMEOUT]);
  maybe_finish(sp);
}

static int cold_start(al_spawn_t *sp, char ***wrapped, const char *cwd,
                      char **env, bool stdin_pipe, bool launch);

static void plan_work(uv_work_t *req) {
  al_spawn_t *sp = req->data;
  struct stat st;

  /* The lstat/realpath calls of bwrap's argv, and the wait for the lock a
   * clean-up may hold: here, not on the loop. */
  sp->plan_rc = al__sandbox_wrap_joined(
      sp->plan_sb, sp->plan_cwd, sp->plan_network,
      (const char *const *)sp->plan_argv, &sp->plan_wrapped);
  sp->plan_cwd_ok = stat(sp->plan_cwd, &st) == 0 && S_ISDIR(st.st_mode);
}

static void plan_free(al_spawn_t *sp) {
  al__sandbox_argv_free(sp->plan_argv);
  al__sandbox_argv_free(sp->plan_wrapped);
  al__spawn_env_free(sp->plan_env);
  al_free(sp->plan_cwd);
  sp->plan_argv = sp->plan_wrapped = sp->plan_env = NULL;
  sp->plan_cwd = NULL;
}

static void plan_done(uv_work_t *req, int status) {
  al_spawn_t *sp = req->data;
  int rc;

  sp->planning = false;
  if (status == 0 && sp->plan_rc == 0) {
    /* Counted: released (and unreferenced) when the run is freed. */
    sp->sandbox = sp->plan_sb;
    al__sandbox_ref(sp->sandbox);
  }
  al__sandbox_unref(sp->plan_sb);
  if (sp->killing || sp->status != 0) {
    /* Cancelled or timed out before it existed: it never starts. */
    plan_free(sp);
    finish_unstarted(sp);
    return;
  }
  rc = status != 0 ? status : sp->plan_rc;
  if (rc == 0) {
    rc = cold_start(sp, &sp->plan_wrapped, sp->plan_cwd, sp->plan_env,
                    sp->plan_stdin, sp->plan_cwd_ok);
  }
  plan_free(sp);
  if (rc == 0) {
    feed_stdin(sp);
  }
  flush_early(sp, rc == 0);
  if (rc != 0) {
    sp->start_error = rc;
    sp->status = rc;
    finish_unstarted(sp);
  }
}

/* A hand-off to a waiting process (a warm sandbox, a launcher) passes
 * the command's stdin along when one is asked for: handoff_pipe makes
 * it (false: cannot, start the usual way, which reports it), handoff_end
 * closes the end that went along and keeps the write end as the run's
 * `in` when the hand-off (rc) succeeded. */
static bool handoff_pipe(bool want, int fin[2]) {
  fin[0] = fin[1] = -1;
  return !want || pipe2(fin, O_CLOEXEC) == 0;
}

static void handoff_end(al_spawn_t *sp, int fin[2], int rc) {
  if (fin[0] >= 0) {
    close(fin[0]); /* the helper has its own copy now (or none: failed) */
  }
  if (rc == 0) {
    sp->warm_in = fin[1];
  } else if (fin[1] >= 0) {
    close(fin[1]);
  }
}

/* The warm hand-off. 0: *w runs the command. */
static int warm_start(al_spawn_t *sp, const al_spawn_options_t *opts,
                      char **env, al_warm_t *w) {
  int fin[2];
  int rc;

  if (!handoff_pipe(opts->stdin_pipe, fin)) {
    return AL_ENOENT;
  }
  rc = al__pool_handoff(opts->sandbox, opts->network, opts->cwd, env,
                        opts->argv, fin[0], w);
  handoff_end(sp, fin, rc);
  return rc;
}

/* A cold start's argv, planned without the cgroup helper in front: a
 * pre-joined launcher execs it when one is ready and `launch` allows,
 * so the start does not pay the cgroup join (launch.h); else the helper
 * goes in front and it starts as before. */
static int cold_start(al_spawn_t *sp, char ***wrapped, const char *cwd,
                      char **env, bool stdin_pipe, bool launch) {
  al_warm_t w = {0, -1, -1, -1};
  int fin[2];
  int rc;

  if (launch && handoff_pipe(stdin_pipe, fin)) {
    rc = al__launch_handoff(sp->sandbox, cwd, env,
                            (const char *const *)*wrapped, fin[0], &w);
    handoff_end(sp, fin, rc);
    if (rc == 0) {
      return start_child(sp, *wrapped, cwd, env, stdin_pipe, &w);
    }
  }
  rc = al__sandbox_cgroup_wrap(sp->sandbox, wrapped);
  if (rc != 0) {
    return rc;
  }
  return start_child(sp, *wrapped, cwd, env, stdin_pipe, NULL);
}

static char **strv_dup(const char *const *v) {
  size_t n = 0, i;
  char **d;

  while (v[n] != NULL) {
    n++;
  }
  d = al_calloc(n + 1, sizeof(*d));
  for (i = 0; d != NULL && i < n; i++) {
    if ((d[i] = al_strdup(v[i])) == NULL) {
      al__sandbox_argv_free(d);
      return NULL;
    }
  }
  return d;
}

int al__spawn_start(uv_loop_t *loop, const al_spawn_options_t *opts,
                    al_spawn_t **out) {
  al_spawn_options_t with_pipe;
  al_spawn_t *sp;
  char **env = NULL;
  char **wrapped = NULL;
  al_warm_t warm = {0, -1, -1, -1};
  bool async = false;
  int rc;
  int i;

  *out = NULL;
  if (loop == NULL || opts == NULL || opts->argv == NULL ||
      opts->argv[0] == NULL || opts->cwd == NULL || opts->on_done == NULL) {
    return AL_EINVAL;
  }
  rc = al__spawn_env_build(opts->env, &env);
  if (rc != 0) {
    return rc;
  }
  sp = run_alloc();
  if (sp == NULL) {
    al__spawn_env_free(env);
    return AL_ENOMEM;
  }
  sp->pidfd = -1;
  sp->warm_in = -1;
  if (opts->stdin_text != NULL) {
    sp->feed = al_malloc(opts->stdin_len > 0 ? opts->stdin_len : 1);
    if (sp->feed == NULL) {
      al__spawn_env_free(env);
      run_free(sp);
      return AL_ENOMEM;
    }
    memcpy(sp->feed, opts->stdin_text, opts->stdin_len);
    sp->feed_len = opts->stdin_len;
    if (!opts->stdin_pipe) {
      /* The pipe it needs: the rest of the start reads opts. */
      with_pipe = *opts;
      with_pipe.stdin_pipe = true;
      opts = &with_pipe;
    }
  }
  if (opts->sandbox != NULL && warm_start(sp, opts, env, &warm) == 0) {
    sp->sandbox = opts->sandbox; /* the warm one was counted when built */
    al__sandbox_ref(sp->sandbox);
  } else if (opts->sandbox != NULL && opts->async_start &&
             al__sandbox_mode(opts->sandbox) == AL_SANDBOX_MODE_BWRAP) {
    warm.pid = 0;
    async = true;
    sp->plan_argv = strv_dup(opts->argv);
    sp->plan_cwd = al_strdup(opts->cwd);
    if (sp->plan_argv == NULL || sp->plan_cwd == NULL) {
      plan_free(sp);
      al__spawn_env_free(env);
      run_free(sp);
      return AL_ENOMEM;
    }
    sp->plan_env = env;
    env = NULL;
    sp->plan_sb = opts->sandbox;
    sp->plan_network = opts->network;
    sp->plan_stdin = opts->stdin_pipe;
  } else if (opts->sandbox != NULL) {
    warm.pid = 0;
    rc = al__sandbox_wrap_joined(opts->sandbox, opts->cwd, opts->network,
                                 opts->argv, &wrapped);
    if (rc != 0) {
      al__spawn_env_free(env);
      run_free(sp);
      return rc;
    }
    sp->sandbox = opts->sandbox;
    al__sandbox_ref(sp->sandbox);
  }
  sp->loop = loop;
  sp->data = opts->data;
  sp->on_done = opts->on_done;
  sp->on_output = opts->on_output;
  sp->output_max = opts->output_max ? opts->output_max
                                    : AL_SPAWN_DEFAULT_OUTPUT_MAX;
  sp->timeout_ms = opts->timeout_ms ? opts->timeout_ms
                                    : AL_SPAWN_DEFAULT_TIMEOUT_MS;
  sp->kill_grace_ms = opts->kill_grace_ms ? opts->kill_grace_ms
                                          : AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  sp->drain_ms = opts->drain_ms ? opts->drain_ms : AL_SPAWN_DEFAULT_DRAIN_MS;
  snprintf(sp->program, sizeof(sp->program), "%s", opts->argv[0]);
  for (i = 0; i < 2; i++) {
    /* +1: the NUL terminator counts against an al_buf's max. */
    al_buf_init(&sp->bufs[i], sp->output_max + 1);
    uv_pipe_init(loop, &sp->pipes[i], 0);
    sp->pipes[i].data = sp;
  }
  uv_pipe_init(loop, &sp->in, 0);
  sp->in.data = sp;
  for (i = 0; i < 3; i++) {
    uv_timer_init(loop, &sp->timers[i]);
    sp->timers[i].data = sp;
  }
  sp->proc.data = sp;

  if (async) {
    sp->plan.data = sp;
    al__sandbox_ref(sp->plan_sb);
    rc = uv_queue_work(loop, &sp->plan, plan_work, plan_done);
    if (rc != 0) {
      al__sandbox_unref(sp->plan_sb);
      plan_free(sp);
      sp->refused = true;
      sp->finished = true;
      close_all(sp);
      return rc;
    }
    sp->planning = true;
  } else {
    rc = wrapped != NULL
             ? cold_start(sp, &wrapped, opts->cwd, env, opts->stdin_pipe,
                          true)
             : start_child(sp, (char **)opts->argv, opts->cwd, env,
                           opts->stdin_pipe, &warm);
    al__spawn_env_free(env);
    al__sandbox_argv_free(wrapped);
    if (rc != 0) {
      /* The handles were initialized: close them, free without a
       * callback. */
      sp->refused = true;
      sp->finished = true;
      close_all(sp);
      return rc;
    }
    feed_stdin(sp);
  }
  if (!opts->no_timeout) {
    uv_timer_start(&sp->timers[T_TIMEOUT], on_timeout, sp->timeout_ms, 0);
  }
  *out = sp;
  return 0;
}

void al__spawn_kill(al_spawn_t *sp) {
  if (sp->finished) {
    return;
  }
  if (sp->status == 0) {
    sp->status = AL_ECANCELED;
  }
  start_kill(sp);
}

uv_stream_t *al__spawn_stdin(al_spawn_t *sp) {
  return sp->has_in ? (uv_stream_t *)&sp->in : NULL;
}

void al__spawn_close_stdin(al_spawn_t *sp) {
  if (!sp->has_in || uv_is_closing((uv_handle_t *)&sp->in)) {
    return;
  }
  sp->has_in = false;
  sp->pending_closes++;
  uv_close((uv_handle_t *)&sp->in, on_close);
}
