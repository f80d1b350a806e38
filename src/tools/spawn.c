/* Child-process spawn wrapper: see spawn.h for the contract.
 *
 * One al_spawn_t owns six handles (process, two pipes, three timers); it
 * frees itself in the last close callback, after on_done. The join flags
 * (exited, eof[0], eof[1]) are the only way to `finished`; the timers only
 * push the child towards them (signals) or force the pipe side (drain). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>

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

static void on_close(uv_handle_t *h) {
  al_spawn_t *sp = h->data;
  al_spawn_result_t res;
  int i;

  if (--sp->pending_closes > 0) {
    return;
  }
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
    sp->on_done(sp, &res);
  }
  for (i = 0; i < 2; i++) {
    al_buf_free(&sp->bufs[i]);
  }
  al_free(sp);
}

static void close_all(al_spawn_t *sp) {
  int i;

  sp->pending_closes = 6;
  uv_close((uv_handle_t *)&sp->proc, on_close);
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

static void on_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal) {
  al_spawn_t *sp = p->data;

  sp->exited = true;
  sp->exit_status = exit_status;
  sp->term_signal = term_signal;
  uv_timer_stop(&sp->timers[T_TIMEOUT]);
  if (!sp->eof[0] || !sp->eof[1]) {
    uv_timer_start(&sp->timers[T_DRAIN], on_drain, sp->drain_ms, 0);
  }
  maybe_finish(sp);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  al_spawn_t *sp = h->data;

  /* One buffer serves both pipes: each read is consumed before the next
   * allocation. */
  buf->base = sp->readbuf;
  buf->len = sizeof(sp->readbuf);
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

int al__spawn_start(uv_loop_t *loop, const al_spawn_options_t *opts,
                    al_spawn_t **out) {
  al_spawn_t *sp;
  char **env = NULL;
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
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
  sp = al_calloc(1, sizeof(*sp));
  if (sp == NULL) {
    al__spawn_env_free(env);
    return AL_ENOMEM;
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
  for (i = 0; i < 2; i++) {
    /* +1: the NUL terminator counts against an al_buf's max. */
    al_buf_init(&sp->bufs[i], sp->output_max + 1);
    uv_pipe_init(loop, &sp->pipes[i], 0);
    sp->pipes[i].data = sp;
  }
  for (i = 0; i < 3; i++) {
    uv_timer_init(loop, &sp->timers[i]);
    sp->timers[i].data = sp;
  }
  sp->proc.data = sp;

  memset(&po, 0, sizeof(po));
  memset(stdio, 0, sizeof(stdio));
  stdio[0].flags = UV_IGNORE; /* libuv opens /dev/null for it */
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&sp->pipes[0];
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&sp->pipes[1];
  po.exit_cb = on_exit_cb;
  po.file = opts->argv[0];
  po.args = (char **)opts->argv;
  po.env = env;
  po.cwd = opts->cwd;
  po.flags = UV_PROCESS_DETACHED;
  po.stdio_count = 3;
  po.stdio = stdio;

  rc = uv_spawn(loop, &sp->proc, &po);
  al__spawn_env_free(env);
  if (rc != 0) {
    /* The handles were initialized: close them, free without a callback. */
    sp->refused = true;
    sp->finished = true;
    close_all(sp);
    return rc;
  }
  sp->pid = sp->proc.pid;
  for (i = 0; i < 2; i++) {
    rc = uv_read_start((uv_stream_t *)&sp->pipes[i], on_alloc, on_read);
    if (rc != 0) {
      sp->eof[i] = true; /* nothing will come; the join does not wait */
    }
  }
  uv_timer_start(&sp->timers[T_TIMEOUT], on_timeout, sp->timeout_ms, 0);
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
