/* The warm pool: see pool.h. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/pool.h"

typedef struct entry_s {
  struct entry_s *next;
  al_warm_t w;
  int ctl; /* our end of its stdin */
  uint64_t gen; /* the pool's generation it was built in */
} entry_t;

typedef struct al_pool_s al_pool_t;

typedef struct build_s {
  uv_work_t req;
  al_pool_t *pool;
  al_sandbox_t *sb; /* referenced for the build */
  bool network;
  int ino;      /* the pool's inotify fd (open while builds run) */
  uint64_t gen; /* the pool's generation when it was queued */
  entry_t *e;
  int rc;
} build_t;

struct al_pool_s {
  uv_loop_t *loop;
  al_sandbox_t *sb; /* NULL once the sandbox closed the pool */
  size_t cap;
  uint64_t idle_ms;
  entry_t *idle[2];
  size_t n_idle[2];
  size_t building[2];
  size_t target[2];
  size_t fails_in_row;
  uv_timer_t timer;
  /* What the plans read from the file system is watched, so a hand-off
   * checks it without a file-system call: each build (and each protected
   * plan) first watches every existing ancestor directory of every path
   * the plan reads, then reads them; any change there after that (a path
   * component created, removed, renamed) queues an event at once. One
   * under a hidden path or a writable root bumps `gen`, which retires
   * the warm sandboxes built before it; one under a protected path bumps
   * `pgen`, which makes the protected paths' mounts be planned again on
   * the threadpool (the warm sandboxes do not depend on them: their
   * helper mounts them when its command arrives). */
  int ino;
  uv_poll_t ino_poll;
  uint64_t gen;
  uint64_t pgen;
  char **names[2]; /* path components: [0] hidden and roots, [1] protected */
  size_t n_names[2];
  bool names_failed;
  /* The protected paths' mounts (al__sandbox_protect_plan) made in
   * generation plan_gen, and the placeholders they make. */
  char **plan_ops;
  char **plan_need;
  uint64_t plan_gen;
  bool replanning; /* a plan job on the threadpool */
  /* Which directory each watch is on (added by the threadpool; the loop
   * only ever try-locks it), so an event names a full path. */
  pthread_mutex_t wd_lock;
  struct wd_s {
    int wd;
    char *dir;
  } *wds;
  size_t n_wds;
  bool closing;
  bool timer_closed;
  bool poll_closed;
  uint64_t served, misses, retired, failed, replans;
};

#define MAX_FAILS_IN_ROW 3
#define READY_TIMEOUT_MS 30000

/* ---- one warm sandbox ------------------------------------------------------ */

static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

/* SIGKILL to its group and reap it (it dies at once: it was only waiting
 * on its stdin). */
void al__pool_waiting_kill(al_warm_t *w, int *ctl) {
  siginfo_t si;

  if (w->pid > 0) {
    (void)kill(-(pid_t)w->pid, SIGKILL);
    while (waitid(P_PIDFD, (id_t)w->pidfd, &si, WEXITED) != 0 &&
           errno == EINTR) {
    }
    w->pid = 0;
  }
  close_fd(ctl);
  close_fd(&w->out);
  close_fd(&w->err);
  close_fd(&w->pidfd);
}

static void entry_destroy(entry_t *e) {
  al__pool_waiting_kill(&e->w, &e->ctl);
  al_free(e);
}

bool al__pool_waiting_alive(const al_warm_t *w) {
  siginfo_t si;

  memset(&si, 0, sizeof(si));
  if (waitid(P_PIDFD, (id_t)w->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) !=
      0) {
    return false;
  }
  return si.si_pid == 0;
}

static bool entry_alive(const entry_t *e) {
  return al__pool_waiting_alive(&e->w);
}

/* Threadpool: watches every existing directory above `path` (the events
 * name the component that changed). Failing to watch one that exists
 * fails the build: its plan could go stale unseen. */
typedef struct arm_s {
  al_pool_t *pool;
  int ino;
  int rc;
} arm_t;

static void note_wd(al_pool_t *p, int wd, const char *dir);

static void arm_path(void *arg, const char *path, bool is_protected) {
  arm_t *a = arg;
  char dir[PATH_MAX];
  size_t i, n = strlen(path);
  const uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                        IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

  (void)is_protected;
  if (a->rc != 0 || n >= sizeof(dir) || path[0] != '/') {
    return;
  }
  int wd;

  if ((wd = inotify_add_watch(a->ino, "/", mask)) < 0) {
    a->rc = -errno;
    return;
  }
  note_wd(a->pool, wd, "");
  /* Each directory above the path itself (which shows in its parent's
   * events), from the top. */
  for (i = 1; i < n; i++) {
    if (path[i] != '/') {
      continue;
    }
    memcpy(dir, path, i);
    dir[i] = '\0';
    if ((wd = inotify_add_watch(a->ino, dir, mask)) < 0) {
      if (errno != ENOENT && errno != ENOTDIR) {
        a->rc = -errno; /* ENOSPC (out of watches), EACCES */
      }
      return; /* missing: its creation shows in the parent's events */
    }
    note_wd(a->pool, wd, dir);
  }
}

int al__pool_spawn_waiting(char *const *argv, al_warm_t *w, int *ctl) {
  char *const envp[] = {NULL};
  int c[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, all;
  pid_t pid;
  int rc;

  w->pid = 0;
  w->pidfd = w->out = w->err = *ctl = -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c) != 0 ||
      pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    rc = -errno;
    goto fail;
  }
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  sigemptyset(&none);
  sigfillset(&all);
  /* As spawn.c's fast path: own session and group, clean signal state. */
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawn_file_actions_adddup2(&fa, c[1], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addchdir_np(&fa, "/");
  rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    rc = -rc;
    goto fail;
  }
  w->pid = (int)pid;
  w->pidfd = (int)pidfd_open(pid, 0);
  if (w->pidfd < 0) {
    rc = -errno;
    (void)kill(-pid, SIGKILL);
    (void)waitpid(pid, NULL, 0);
    w->pid = 0;
    goto fail;
  }
  close_fd(&c[1]);
  close_fd(&out[1]);
  close_fd(&err[1]);
  *ctl = c[0];
  w->out = out[0];
  w->err = err[0];
  /* Wait (on this pool thread, never the loop) for the helper's "ready":
   * bwrap's mounts (or the launcher's cgroup) are then in place, so the
   * hand-off pays none of it. */
  {
    struct pollfd pfd = {*ctl, POLLIN, 0};
    char ch = 0;
    int pr;

    do {
      pr = poll(&pfd, 1, READY_TIMEOUT_MS);
    } while (pr < 0 && errno == EINTR);
    if (pr != 1 || recv(*ctl, &ch, 1, 0) != 1 || ch != 'R') {
      al__pool_waiting_kill(w, ctl); /* it failed: its stderr says why */
      return AL_ECANCELED;
    }
  }
  return 0;
fail:
  close_fd(&c[0]);
  close_fd(&c[1]);
  close_fd(&out[0]);
  close_fd(&out[1]);
  close_fd(&err[0]);
  close_fd(&err[1]);
  return rc;
}

/* Threadpool: the argv (lstat/realpath of the plan), the spawn. */
static void build_work(uv_work_t *req) {
  build_t *b = req->data;
  char **argv = NULL;
  entry_t *e;
  int rc;

  b->rc = AL_ENOMEM;
  e = al_calloc(1, sizeof(*e));
  if (e == NULL) {
    return;
  }
  e->ctl = e->w.out = e->w.err = e->w.pidfd = -1;
  {
    arm_t arm = {b->pool, b->ino, 0};

    al__sandbox_each_path(b->sb, arm_path, &arm);
    if (arm.rc != 0) {
      al_free(e);
      b->rc = arm.rc;
      return;
    }
  }
  rc = al__sandbox_wrap_warm(b->sb, b->network, &argv);
  if (rc == 0) {
    rc = al__pool_spawn_waiting(argv, &e->w, &e->ctl);
    al__sandbox_argv_free(argv);
  }
  if (rc != 0) {
    al_free(e);
    b->rc = rc;
    return;
  }
  b->e = e;
  b->rc = 0;
}

/* ---- the pool -------------------------------------------------------------- */

static void retire_idle(al_pool_t *p);
static void fill(al_pool_t *p);

static bool relevant_name(const al_pool_t *p, int which, const char *name) {
  size_t i;

  if (p->names_failed) {
    return true; /* a name could not be recorded: every event counts */
  }
  for (i = 0; i < p->n_names[which]; i++) {
    if (strcmp(p->names[which][i], name) == 0) {
      return true;
    }
  }
  return false;
}

static void replan(al_pool_t *p);

/* Any thread. A watch we cannot name is harmless: its events then count
 * by name alone. */
static void note_wd(al_pool_t *p, int wd, const char *dir) {
  struct wd_s *nv;
  size_t i;

  pthread_mutex_lock(&p->wd_lock);
  for (i = 0; i < p->n_wds && p->wds[i].wd != wd; i++) {
  }
  if (i < p->n_wds) {
    if (strcmp(p->wds[i].dir, dir) != 0) {
      char *d = al_strdup(dir); /* the same inode under another name */

      if (d != NULL) {
        al_free(p->wds[i].dir);
        p->wds[i].dir = d;
      }
    }
  } else if ((nv = al_realloc(p->wds, (p->n_wds + 1) * sizeof(*nv))) !=
             NULL) {
    p->wds = nv;
    nv[p->n_wds].wd = wd;
    nv[p->n_wds].dir = al_strdup(dir);
    if (nv[p->n_wds].dir != NULL) {
      p->n_wds++;
    }
  }
  pthread_mutex_unlock(&p->wd_lock);
}

/* True only when sure: the event is about a placeholder of ours (made
 * or removed by our own sandboxes: the plan already says "placeholder"
 * there). Loop thread; never waits (busy locks answer false). */
static bool own_placeholder(al_pool_t *p, const struct inotify_event *ev) {
  char path[PATH_MAX];
  bool own = false;
  size_t i;

  if (pthread_mutex_trylock(&p->wd_lock) != 0) {
    return false;
  }
  for (i = 0; i < p->n_wds; i++) {
    if (p->wds[i].wd == ev->wd) {
      int n = snprintf(path, sizeof(path), "%s/%s", p->wds[i].dir, ev->name);

      own = n > 0 && (size_t)n < sizeof(path) &&
            al__sandbox_placeholder_try(p->sb, path) == 1;
      break;
    }
  }
  pthread_mutex_unlock(&p->wd_lock);
  return own;
}

/* Which placeholder of the current plan the event names (its index in
 * plan_need), -1 when none or not sure (busy lock, no current plan).
 * Loop thread; never waits. */
static int need_index(al_pool_t *p, const struct inotify_event *ev) {
  char path[PATH_MAX];
  int hit = -1;
  size_t i;

  if (p->plan_need == NULL || p->plan_gen != p->pgen ||
      pthread_mutex_trylock(&p->wd_lock) != 0) {
    return -1;
  }
  for (i = 0; i < p->n_wds; i++) {
    if (p->wds[i].wd == ev->wd) {
      int n = snprintf(path, sizeof(path), "%s/%s", p->wds[i].dir, ev->name);

      if (n > 0 && (size_t)n < sizeof(path)) {
        size_t k;

        for (k = 0; p->plan_need[k] != NULL && k < 64 && hit < 0; k++) {
          if (strcmp(p->plan_need[k], path) == 0) {
            hit = (int)k;
          }
        }
      }
      break;
    }
  }
  pthread_mutex_unlock(&p->wd_lock);
  return hit;
}

/* True only when sure: the watched directory itself went, and it is a
 * placeholder of the current plan (watched as the directory above a
 * protected path while one of our commands had made it; its removal
 * after the command leaves it missing, as planned), with no hidden path
 * or writable root below it. Loop thread; never waits. */
static bool placeholder_gone(al_pool_t *p, const struct inotify_event *ev) {
  bool hit = false;
  size_t i, k;

  if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) == 0 ||
      (ev->mask & IN_Q_OVERFLOW) != 0 || p->plan_need == NULL ||
      p->plan_gen != p->pgen || pthread_mutex_trylock(&p->wd_lock) != 0) {
    return false;
  }
  for (i = 0; i < p->n_wds; i++) {
    if (p->wds[i].wd == ev->wd) {
      const char *dir = p->wds[i].dir;
      const char *base = strrchr(dir, '/');

      for (k = 0; p->plan_need[k] != NULL && !hit; k++) {
        hit = strcmp(p->plan_need[k], dir) == 0;
      }
      hit = hit && base != NULL && !relevant_name(p, 0, base + 1);
      break;
    }
  }
  pthread_mutex_unlock(&p->wd_lock);
  return hit;
}

/* Reads the queued events (non-blocking; no file-system call): a change
 * to a path component a plan depends on bumps the generation and
 * retires the warm sandboxes made before it (their replacements are
 * built by the caller's fill). Files a tool writes elsewhere in a
 * watched directory (the workspace) are read and dropped. */
static void drain(al_pool_t *p) {
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  bool changed = false, pchanged = false;
  /* Placeholders of the plan that appeared (not as ours) and are not
   * gone again yet: the plan assumed them missing. One that is removed
   * later in the queue is missing again, as planned: our own clean-up
   * after each command, which otherwise made the plan again (2-3 plans
   * per call in the tool-start bench; a start during one goes cold). */
  uint64_t appeared = 0;
  ssize_t n;

  if (p->ino < 0) {
    return;
  }
  while ((n = read(p->ino, buf, sizeof(buf))) > 0) {
    size_t off = 0;

    while (off + sizeof(struct inotify_event) <= (size_t)n) {
      const struct inotify_event *ev = (const void *)(buf + off);

      /* Self events, a lost queue or a watch gone count as a change. */
      if ((ev->mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF |
                       IN_MOVE_SELF)) != 0 ||
          ev->len == 0) {
        if (!placeholder_gone(p, ev)) {
          changed = pchanged = true;
        }
      } else {
        int k = relevant_name(p, 1, ev->name) ? need_index(p, ev) : -1;

        changed = changed || relevant_name(p, 0, ev->name);
        if (k >= 0 && (ev->mask & (IN_DELETE | IN_MOVED_FROM)) != 0) {
          appeared &= ~((uint64_t)1 << k);
        } else if (k >= 0 && !own_placeholder(p, ev)) {
          appeared |= (uint64_t)1 << k;
        } else if (k < 0) {
          pchanged = pchanged || (relevant_name(p, 1, ev->name) &&
                                  !own_placeholder(p, ev));
        }
      }
      off += sizeof(struct inotify_event) + ev->len;
    }
  }
  if (changed) {
    p->gen++;
    retire_idle(p);
  }
  if (pchanged || appeared != 0) {
    p->pgen++;
    replan(p);
  }
}

static void on_ino(uv_poll_t *h, int status, int events) {
  al_pool_t *p = h->data;
  uint64_t gen = p->gen;

  (void)status;
  (void)events;
  drain(p);
  if (p->gen != gen) {
    fill(p);
  }
}

/* The components of every path the plans read ("home", ".ssh", ".git",
 * "hooks", the workspace's own name, ...). Loop thread, strings only. */
static void add_names(void *arg, const char *path, bool is_protected) {
  al_pool_t *p = arg;
  const char *c = path;
  int w = is_protected ? 1 : 0;

  while (*c != '\0') {
    const char *end;
    char *name;
    char **nv;

    while (*c == '/') {
      c++;
    }
    end = strchr(c, '/');
    if (end == NULL) {
      end = c + strlen(c);
    }
    if (end > c) {
      name = al_strndup(c, (size_t)(end - c));
      if (name == NULL) {
        p->names_failed = true;
      } else if (relevant_name(p, w, name)) {
        al_free(name);
      } else if ((nv = al_realloc(p->names[w], (p->n_names[w] + 1) *
                                                    sizeof(*nv))) == NULL) {
        al_free(name);
        p->names_failed = true;
      } else {
        p->names[w] = nv;
        p->names[w][p->n_names[w]++] = name;
      }
    }
    c = end;
  }
}

static void pool_maybe_free(al_pool_t *p) {
  size_t i;
  int w;

  if (p->closing && p->timer_closed && p->poll_closed && !p->replanning &&
      p->building[0] + p->building[1] == 0) {
    /* Only now: a build still running adds watches on this fd. */
    close_fd(&p->ino);
    for (w = 0; w < 2; w++) {
      for (i = 0; i < p->n_names[w]; i++) {
        al_free(p->names[w][i]);
      }
      al_free(p->names[w]);
    }
    al__sandbox_argv_free(p->plan_ops);
    al__sandbox_argv_free(p->plan_need);
    for (i = 0; i < p->n_wds; i++) {
      al_free(p->wds[i].dir);
    }
    al_free(p->wds);
    pthread_mutex_destroy(&p->wd_lock);
    al_free(p);
  }
}

static void on_idle(uv_timer_t *t);

static void build_done(uv_work_t *req, int status) {
  build_t *b = req->data;
  al_pool_t *p = b->pool;
  int k = b->network ? 1 : 0;

  p->building[k]--;
  if (!p->closing) {
    drain(p); /* what changed while it was built */
  }
  if (b->rc == 0 && status == 0 && b->gen != p->gen) {
    /* A path its plan read changed meanwhile: made again by fill. */
    entry_destroy(b->e);
    p->retired++;
  } else if (b->rc == 0 && status == 0 && !p->closing &&
             p->n_idle[k] < p->target[k]) {
    b->e->gen = b->gen;
    b->e->next = p->idle[k];
    p->idle[k] = b->e;
    p->n_idle[k]++;
    p->fails_in_row = 0;
    /* Idle time counts from the pool's last activity: now, not the
     * loop's time cached before a poll that may have waited for this
     * build longer than the idle time (then it was retired at once). */
    uv_update_time(p->loop);
    uv_timer_start(&p->timer, on_idle, p->idle_ms, 0);
  } else if (b->rc == 0 && status == 0) {
    /* Closing, or the target dropped while it was built (idle). */
    entry_destroy(b->e);
    p->retired++;
  } else {
    if (b->e != NULL) {
      entry_destroy(b->e);
    }
    p->failed++;
    p->fails_in_row++;
    al_log(AL_LOG_WARN, "sandbox: a warm sandbox could not be built (%s)",
           uv_strerror(b->rc != 0 ? b->rc : status));
  }
  al__sandbox_unref(b->sb);
  al_free(b);
  if (p->closing) {
    pool_maybe_free(p);
    return;
  }
  fill(p);
}

/* ---- the protected paths' plan ------------------------------------------ */

typedef struct plan_job_s {
  uv_work_t req;
  al_pool_t *pool;
  al_sandbox_t *sb; /* referenced for the job */
  int ino;
  uint64_t gen;
  char **ops, **need;
  int rc;
} plan_job_t;

static void plan_work(uv_work_t *req) {
  plan_job_t *j = req->data;
  arm_t arm = {j->pool, j->ino, 0};

  /* Watches first, then the lstat calls: a change after them shows. */
  al__sandbox_each_path(j->sb, arm_path, &arm);
  j->rc = arm.rc != 0 ? arm.rc
                      : al__sandbox_protect_plan(j->sb, &j->ops, &j->need);
}

static void plan_done(uv_work_t *req, int status) {
  plan_job_t *j = req->data;
  al_pool_t *p = j->pool;

  p->replanning = false;
  al__sandbox_unref(j->sb);
  if (p->closing || status != 0 || j->rc != 0) {
    if (!p->closing && (status != 0 || j->rc != 0)) {
      al_log(AL_LOG_WARN,
             "sandbox: the protected paths could not be planned (%s)",
             uv_strerror(status != 0 ? status : j->rc));
    }
    al__sandbox_argv_free(j->ops);
    al__sandbox_argv_free(j->need);
    al_free(j);
    pool_maybe_free(p); /* no new plan: warm hand-offs stop, cold works */
    return;
  }
  al__sandbox_argv_free(p->plan_ops);
  al__sandbox_argv_free(p->plan_need);
  p->plan_ops = j->ops;
  p->plan_need = j->need;
  p->plan_gen = j->gen;
  al_free(j);
  drain(p);
  if (p->plan_gen != p->pgen) {
    replan(p); /* something changed while it was made */
  }
}

static void replan(al_pool_t *p) {
  plan_job_t *j;

  if (p->replanning || p->closing) {
    return; /* plan_done's drain sees what changed meanwhile */
  }
  j = al_calloc(1, sizeof(*j));
  if (j == NULL) {
    return;
  }
  j->pool = p;
  j->sb = p->sb;
  j->ino = p->ino;
  j->gen = p->pgen;
  j->req.data = j;
  p->replans++;
  al__sandbox_ref(p->sb);
  if (uv_queue_work(p->loop, &j->req, plan_work, plan_done) != 0) {
    al__sandbox_unref(p->sb);
    al_free(j);
    return;
  }
  p->replanning = true;
}

static void fill_one(al_pool_t *p, int k) {
  build_t *b = al_calloc(1, sizeof(*b));

  if (b == NULL) {
    return;
  }
  b->pool = p;
  b->sb = p->sb;
  b->network = k == 1;
  b->ino = p->ino;
  b->gen = p->gen;
  b->req.data = b;
  al__sandbox_ref(p->sb);
  if (uv_queue_work(p->loop, &b->req, build_work, build_done) != 0) {
    al__sandbox_unref(p->sb);
    al_free(b);
    return;
  }
  p->building[k]++;
}

static void fill(al_pool_t *p) {
  int k;

  if (p->closing || p->fails_in_row >= MAX_FAILS_IN_ROW) {
    return; /* bwrap keeps failing here: the cold path reports why */
  }
  for (k = 0; k < 2; k++) {
    while (p->n_idle[k] + p->building[k] < p->target[k]) {
      size_t before = p->building[k];

      fill_one(p, k);
      if (p->building[k] == before) {
        return;
      }
    }
  }
}

static void retire_idle(al_pool_t *p) {
  int k;

  for (k = 0; k < 2; k++) {
    while (p->idle[k] != NULL) {
      entry_t *e = p->idle[k];

      p->idle[k] = e->next;
      p->n_idle[k]--;
      entry_destroy(e);
      p->retired++;
    }
  }
}

static void on_idle(uv_timer_t *t) {
  al_pool_t *p = t->data;

  if (p->building[0] + p->building[1] > 0) {
    /* Idle time counts once one is ready (build_done starts it again):
     * a build slower than the idle time (a loaded machine) is not thrown
     * away as it lands. */
    return;
  }
  /* Nobody started a tool for idle_ms: give the memory back; the next
   * start is cold and the pool grows again from there. */
  retire_idle(p);
  p->target[0] = p->target[1] = 0;
}

static void on_timer_close(uv_handle_t *h) {
  al_pool_t *p = h->data;

  p->timer_closed = true;
  pool_maybe_free(p);
}

static void on_poll_close(uv_handle_t *h) {
  al_pool_t *p = h->data;

  p->poll_closed = true;
  pool_maybe_free(p);
}

static void pool_close(void *arg) {
  al_pool_t *p = arg;

  retire_idle(p);
  p->closing = true;
  /* Builds in flight hold a reference on the sandbox; build_done
   * destroys what they made. */
  uv_close((uv_handle_t *)&p->timer, on_timer_close);
  uv_close((uv_handle_t *)&p->ino_poll, on_poll_close);
}

int al__pool_start(uv_loop_t *loop, al_sandbox_t *sb, size_t cap,
                   uint64_t idle_ms) {
  const char *env = getenv("AGENTLOOP_WARM");
  al_pool_t *p;

  if (sb == NULL || al__sandbox_mode(sb) != AL_SANDBOX_MODE_BWRAP ||
      al__sandbox_pool(sb) != NULL ||
      (env != NULL && strcmp(env, "0") == 0)) {
    return 0;
  }
  p = al_calloc(1, sizeof(*p));
  if (p == NULL) {
    return AL_ENOMEM;
  }
  p->loop = loop;
  p->sb = sb;
  p->cap = cap == 0 || cap > AL_POOL_MAX ? AL_POOL_MAX : cap;
  p->idle_ms = idle_ms ? idle_ms : AL_POOL_DEFAULT_IDLE_MS;
  p->target[0] = 1;
  pthread_mutex_init(&p->wd_lock, NULL);
  p->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (p->ino < 0) {
    /* No watches, no way to trust a plan made ahead: every start cold. */
    al_log(AL_LOG_WARN, "sandbox: no warm pool (inotify: %s)",
           strerror(errno));
    pthread_mutex_destroy(&p->wd_lock);
    al_free(p);
    return 0;
  }
  if (uv_poll_init(loop, &p->ino_poll, p->ino) != 0) {
    close(p->ino);
    pthread_mutex_destroy(&p->wd_lock);
    al_free(p);
    return 0;
  }
  p->ino_poll.data = p;
  uv_unref((uv_handle_t *)&p->ino_poll);
  uv_poll_start(&p->ino_poll, UV_READABLE, on_ino);
  al__sandbox_each_path(sb, add_names, p);
  p->pgen = 1; /* no plan yet (plan_gen 0) */
  uv_timer_init(loop, &p->timer);
  p->timer.data = p;
  /* The idle timer must not keep a loop alive on its own. */
  uv_unref((uv_handle_t *)&p->timer);
  uv_timer_start(&p->timer, on_idle, p->idle_ms, 0);
  al__sandbox_set_pool(sb, p, pool_close);
  replan(p);
  fill(p);
  return 0;
}

static void unclaim_work(uv_work_t *req) { al__sandbox_cleanup(req->data); }

/* The lock was busy on the loop: the whole release runs here instead. */
static void release_work(uv_work_t *req) { al__sandbox_release(req->data); }

static void unclaim_done(uv_work_t *req, int status) {
  (void)status;
  al__sandbox_unref(req->data);
  al_free(req);
}

/* Undoes al__sandbox_protect_claim: the count goes down at once; the
 * placeholders (when it was the last) are removed on the threadpool. */
static void unclaim(al_pool_t *p) {
  uv_work_t *req;
  int r = al__sandbox_release_try(p->sb);

  if (r == 0) {
    return;
  }
  req = al_calloc(1, sizeof(*req));
  al__sandbox_ref(p->sb);
  if (req != NULL) {
    req->data = p->sb;
    if (uv_queue_work(p->loop, req, r < 0 ? release_work : unclaim_work,
                      unclaim_done) == 0) {
      return;
    }
    al_free(req);
  }
  /* Out of memory: left for the next release (or the janitor); a count
   * not taken back keeps the placeholders until the sandbox is freed. */
  al__sandbox_unref(p->sb);
}

/* The message agentloop-exec --warm reads: see src/exec/main.c. */
static char *encode(const char *cwd, char *const *env, char *const *ops,
                    const char *const *argv, size_t *len) {
  size_t n = 4 + strlen(cwd) + 1 + 1 + 1;
  size_t i;
  char *buf, *p;

  for (i = 0; env != NULL && env[i] != NULL; i++) {
    n += strlen(env[i]) + 1;
  }
  for (i = 0; ops[i] != NULL; i++) {
    n += strlen(ops[i]) + 1;
  }
  for (i = 0; argv[i] != NULL; i++) {
    n += strlen(argv[i]) + 1;
  }
  if (n - 4 > UINT32_MAX) {
    return NULL;
  }
  buf = al_malloc(n);
  if (buf == NULL) {
    return NULL;
  }
  buf[0] = (char)((n - 4) & 0xff);
  buf[1] = (char)(((n - 4) >> 8) & 0xff);
  buf[2] = (char)(((n - 4) >> 16) & 0xff);
  buf[3] = (char)(((n - 4) >> 24) & 0xff);
  p = buf + 4;
  p = stpcpy(p, cwd) + 1;
  for (i = 0; env != NULL && env[i] != NULL; i++) {
    p = stpcpy(p, env[i]) + 1;
  }
  *p++ = '\0';
  for (i = 0; ops[i] != NULL; i++) {
    p = stpcpy(p, ops[i]) + 1;
  }
  *p++ = '\0';
  for (i = 0; argv[i] != NULL; i++) {
    p = stpcpy(p, argv[i]) + 1;
  }
  *len = n;
  return buf;
}

/* The message, with the command's stdin (when given) passed along it. */
static ssize_t send_command(int ctl, const char *msg, size_t len, int in_fd) {
  struct iovec iov = {(void *)msg, len};
  struct msghdr mh;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;

  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (in_fd >= 0) {
    struct cmsghdr *c;

    memset(&u, 0, sizeof(u));
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof(u.buf);
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &in_fd, sizeof(int));
  }
  return sendmsg(ctl, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int al__pool_send(int *ctl, const char *cwd, char *const *env,
                  char *const *ops, const char *const *argv, int in_fd) {
  char *msg;
  size_t len;
  ssize_t sent;

  msg = encode(cwd, env, ops, argv, &len);
  if (msg == NULL) {
    return AL_ENOMEM;
  }
  sent = send_command(*ctl, msg, len, in_fd);
  al_free(msg);
  if (sent < 0 || (size_t)sent != len) {
    return AL_EPIPE;
  }
  /* Its only command: the helper closes its side as it reads it; ours
   * goes now, so a second message can never reach it. */
  close_fd(ctl);
  return 0;
}

int al__pool_handoff(al_sandbox_t *sb, bool network, const char *cwd,
                     char *const *env, const char *const *argv, int in_fd,
                     al_warm_t *w) {
  al_pool_t *p = al__sandbox_pool(sb);
  int k = network ? 1 : 0;
  entry_t *e;
  uint64_t gen;
  int rc;

  if (p == NULL || p->closing || al__sandbox_cmd_in_tmp(sb, argv)) {
    return AL_ENOENT; /* cold (a program under /tmp: see sandbox.h) */
  }
  uv_timer_start(&p->timer, on_idle, p->idle_ms, 0);
  gen = p->gen;
  drain(p);
  if (p->gen != gen) {
    /* A path the plans read changed: the warm ones went, and so does
     * this start (cold); not a miss of the pool's size. */
    fill(p);
    return AL_ENOENT;
  }
  for (;;) {
    e = p->idle[k];
    if (e == NULL) {
      /* Tools side by side (or the first with the network): one more. */
      p->misses++;
      if (p->target[k] < p->cap) {
        p->target[k]++;
      }
      fill(p);
      return AL_ENOENT;
    }
    p->idle[k] = e->next;
    p->n_idle[k]--;
    if (entry_alive(e)) {
      break;
    }
    entry_destroy(e); /* died while waiting (OOM killer, ...) */
    p->retired++;
  }
  if (e->gen != p->gen || p->plan_gen != p->pgen) {
    /* The protected paths' plan is being made again (a path changed):
     * this one starts cold; the warm one waits for the next. */
    e->next = p->idle[k];
    p->idle[k] = e;
    p->n_idle[k]++;
    return AL_ENOENT;
  }
  /* Counted as a wrapped child, released by the caller when the command
   * is gone; its placeholders are removed as for a cold start. */
  if ((rc = al__sandbox_protect_claim(sb, p->plan_need)) != 0) {
    if (rc == AL_EBUSY) {
      /* A clean-up holds the lock (threadpool): start cold, which waits
       * for it there, never on the loop; this one waits for the next. */
      e->next = p->idle[k];
      p->idle[k] = e;
      p->n_idle[k]++;
      return AL_ENOENT;
    }
    entry_destroy(e);
    p->retired++;
    fill(p);
    return AL_ENOMEM;
  }
  /* What changed up to now is in the queue (the kernel put it there as
   * it happened; reading it is no file-system call), including a
   * placeholder removed by a clean-up that ran until the claim. */
  drain(p);
  if (e->gen != p->gen || p->plan_gen != p->pgen) {
    unclaim(p);
    if (e->gen != p->gen) {
      entry_destroy(e);
      p->retired++;
      fill(p);
    } else {
      e->next = p->idle[k];
      p->idle[k] = e;
      p->n_idle[k]++;
    }
    return AL_ENOENT;
  }
  rc = al__pool_send(&e->ctl, cwd, env, p->plan_ops, argv, in_fd);
  if (rc != 0) {
    /* Too big for the socket buffer (or it died): cold start instead. */
    entry_destroy(e);
    unclaim(p);
    p->retired++;
    fill(p);
    return rc;
  }
  *w = e->w;
  al_free(e);
  p->served++;
  fill(p);
  return 0;
}

bool al__pool_stats(const al_sandbox_t *sb, al_pool_stats_t *st) {
  al_pool_t *p = al__sandbox_pool(sb);
  size_t n = 0;
  int k;

  memset(st, 0, sizeof(*st));
  if (p == NULL) {
    return false;
  }
  for (k = 0; k < 2; k++) {
    const entry_t *e;

    st->idle += p->n_idle[k];
    st->idle_k[k] = p->n_idle[k];
    st->building += p->building[k];
    st->target[k] = p->target[k];
    for (e = p->idle[k]; e != NULL && n < AL_ARRAY_SIZE(st->idle_pids);
         e = e->next) {
      st->idle_pids[n++] = e->w.pid;
    }
  }
  st->planned = p->plan_ops != NULL && p->plan_gen == p->pgen;
  st->replans = p->replans;
  st->served = p->served;
  st->misses = p->misses;
  st->retired = p->retired;
  st->failed = p->failed;
  return true;
}

void al__pool_prune(al_sandbox_t *sb) {
  al_pool_t *p = al__sandbox_pool(sb);
  int k;

  if (p == NULL || p->closing) {
    return;
  }
  drain(p);
  for (k = 0; k < 2; k++) {
    entry_t **pp = &p->idle[k];

    while (*pp != NULL) {
      entry_t *e = *pp;

      if (e->gen != p->gen || !entry_alive(e)) {
        *pp = e->next;
        p->n_idle[k]--;
        entry_destroy(e);
        p->retired++;
      } else {
        pp = &e->next;
      }
    }
  }
  fill(p);
}
