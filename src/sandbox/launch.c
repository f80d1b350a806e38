/* Pre-joined launchers: see launch.h. One slot per sandbox; every
 * blocking step (the argv, the spawn, the wait for "ready", the cgroup
 * removal) runs on the threadpool, the loop only takes and sends. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/cgroup.h"
#include "sandbox/launch.h"

#define MAX_FAILS_IN_ROW 3

typedef struct al_launch_s {
  uv_loop_t *loop;
  al_sandbox_t *sb;
  al_warm_t w; /* the waiting launcher, when ready */
  int ctl;
  bool ready;
  bool building;
  bool wanted; /* false after idle_ms without a start */
  bool closing;
  bool timer_closed;
  size_t jobs; /* builds and sweeps in flight (each refs the sandbox) */
  size_t fails_in_row;
  uint64_t idle_ms;
  uv_timer_t timer;
  uint64_t served, misses, retired, failed;
} al_launch_t;

typedef struct job_s {
  uv_work_t req;
  al_launch_t *l;
  al_sandbox_t *sb;
  al_warm_t w;
  int ctl;
  int rc;
} job_t;

static void fill(al_launch_t *l);

static void maybe_free(al_launch_t *l) {
  if (l->closing && l->timer_closed && l->jobs == 0) {
    al_free(l);
  }
}

static void job_done(al_launch_t *l, job_t *j) {
  al__sandbox_unref(j->sb);
  al_free(j);
  l->jobs--;
}

static void sweep_work(uv_work_t *req) {
  job_t *j = req->data;

  (void)al__cgroup_sweep(al__sandbox_cgroup(j->sb));
}

static void sweep_done(uv_work_t *req, int status) {
  job_t *j = req->data;
  al_launch_t *l = j->l;

  (void)status;
  job_done(l, j);
  maybe_free(l);
}

static job_t *job_new(al_launch_t *l) {
  job_t *j = al_calloc(1, sizeof(*j));

  if (j != NULL) {
    j->l = l;
    j->sb = l->sb;
    j->ctl = -1;
    j->req.data = j;
    al__sandbox_ref(j->sb);
  }
  return j;
}

/* A killed launcher's cgroup goes on the threadpool (the removal waits
 * for the kernel); without memory for the job, the next sweep (a tool's
 * end, the janitor, the next probe) removes it. */
static void sweep(al_launch_t *l) {
  job_t *j = job_new(l);

  if (j == NULL) {
    return;
  }
  if (uv_queue_work(l->loop, &j->req, sweep_work, sweep_done) != 0) {
    al__sandbox_unref(j->sb);
    al_free(j);
    return;
  }
  l->jobs++;
}

/* The waiting one goes (it dies at once: it only waits on its socket). */
static void retire(al_launch_t *l) {
  if (!l->ready) {
    return;
  }
  l->ready = false;
  al__pool_waiting_kill(&l->w, &l->ctl);
  l->retired++;
  sweep(l);
}

static void build_work(uv_work_t *req) {
  job_t *j = req->data;
  char **argv = NULL;

  j->rc = al__sandbox_launch_argv(j->sb, &argv);
  if (j->rc == 0) {
    j->rc = al__pool_spawn_waiting(argv, &j->w, &j->ctl);
  }
  al__sandbox_argv_free(argv);
}

static void build_done(uv_work_t *req, int status) {
  job_t *j = req->data;
  al_launch_t *l = j->l;

  l->building = false;
  if (status == 0 && j->rc == 0 && !l->closing && l->wanted && !l->ready) {
    l->w = j->w;
    l->ctl = j->ctl;
    l->ready = true;
    l->fails_in_row = 0;
  } else if (status == 0 && j->rc == 0) {
    /* Closing, or idle meanwhile: not needed. */
    al__pool_waiting_kill(&j->w, &j->ctl);
    l->retired++;
    sweep(l);
  } else {
    l->failed++;
    l->fails_in_row++;
    al_log(AL_LOG_WARN, "sandbox: a pre-joined launcher could not be "
                        "started (%s)",
           uv_strerror(status != 0 ? status : j->rc));
  }
  job_done(l, j);
  if (l->closing) {
    maybe_free(l);
    return;
  }
  fill(l);
}

static void fill(al_launch_t *l) {
  job_t *j;

  if (l->closing || !l->wanted || l->ready || l->building ||
      l->fails_in_row >= MAX_FAILS_IN_ROW) {
    return; /* failing here: starts put the helper in front, as before */
  }
  j = job_new(l);
  if (j == NULL) {
    return;
  }
  if (uv_queue_work(l->loop, &j->req, build_work, build_done) != 0) {
    al__sandbox_unref(j->sb);
    al_free(j);
    return;
  }
  l->jobs++;
  l->building = true;
}

static void on_idle(uv_timer_t *t) {
  al_launch_t *l = t->data;

  /* No start for idle_ms: the process and its cgroup go; the next start
   * puts the helper in front and brings the launcher back. */
  l->wanted = false;
  retire(l);
}

static void on_timer_close(uv_handle_t *h) {
  al_launch_t *l = h->data;

  l->timer_closed = true;
  maybe_free(l);
}

static void launch_close(void *arg) {
  al_launch_t *l = arg;

  l->closing = true;
  retire(l);
  /* A build in flight kills what it made in build_done. */
  uv_close((uv_handle_t *)&l->timer, on_timer_close);
}

int al__launch_start(uv_loop_t *loop, al_sandbox_t *sb, uint64_t idle_ms) {
  const char *env = getenv("AGENTLOOP_LAUNCH");
  al_launch_t *l;

  if (sb == NULL || al__sandbox_mode(sb) == AL_SANDBOX_MODE_NONE ||
      !al__sandbox_cgroup(sb)->active || al__sandbox_launch(sb) != NULL ||
      (env != NULL && strcmp(env, "0") == 0)) {
    return 0;
  }
  l = al_calloc(1, sizeof(*l));
  if (l == NULL) {
    return AL_ENOMEM;
  }
  l->loop = loop;
  l->sb = sb;
  l->ctl = -1;
  l->w.pidfd = l->w.out = l->w.err = -1;
  l->wanted = true;
  l->idle_ms = idle_ms ? idle_ms : AL_POOL_DEFAULT_IDLE_MS;
  uv_timer_init(loop, &l->timer);
  l->timer.data = l;
  /* The idle timer must not keep a loop alive on its own. */
  uv_unref((uv_handle_t *)&l->timer);
  uv_timer_start(&l->timer, on_idle, l->idle_ms, 0);
  al__sandbox_set_launch(sb, l, launch_close);
  fill(l);
  return 0;
}

int al__launch_handoff(al_sandbox_t *sb, const char *cwd, char *const *env,
                       const char *const *argv, int in_fd, al_warm_t *w) {
  static char *const no_ops[] = {NULL};
  al_launch_t *l = al__sandbox_launch(sb);
  int rc;

  if (l == NULL || l->closing) {
    return AL_ENOENT;
  }
  uv_timer_start(&l->timer, on_idle, l->idle_ms, 0);
  l->wanted = true;
  if (l->ready && !al__pool_waiting_alive(&l->w)) {
    retire(l); /* died while waiting (OOM killer, ...) */
  }
  if (!l->ready) {
    l->misses++;
    fill(l);
    return AL_ENOENT;
  }
  rc = al__pool_send(&l->ctl, cwd, env, no_ops, argv, in_fd);
  if (rc != 0) {
    retire(l);
    fill(l);
    return rc;
  }
  /* It is the command's now; the socket is closed, so it can take no
   * other. */
  *w = l->w;
  l->ready = false;
  l->w.pid = 0;
  l->w.pidfd = l->w.out = l->w.err = -1;
  l->served++;
  fill(l);
  return 0;
}

bool al__launch_stats(const al_sandbox_t *sb, al_launch_stats_t *st) {
  const al_launch_t *l = al__sandbox_launch(sb);

  memset(st, 0, sizeof(*st));
  if (l == NULL) {
    return false;
  }
  st->ready = l->ready;
  st->pid = l->ready ? l->w.pid : 0;
  st->building = l->building;
  st->served = l->served;
  st->misses = l->misses;
  st->retired = l->retired;
  st->failed = l->failed;
  return true;
}
