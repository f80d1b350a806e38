/* The workspaces of `agentloop batch run` (docs/batch.md). A copy is made
 * in libuv's pool (never on the loop): into DIR/work/ID.tmp, renamed to
 * DIR/work/ID when whole, so a copy cut short by a crash is made again. A
 * git worktree is made and removed by git itself, spawned with uv_spawn.
 * A workspace that exists already for a resumed session is used as it is,
 * so the resumed session sees its own edits; one without a session to
 * resume is made again (a git worktree add cut short is not whole). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/batch.h"
#include "common/common.h"

/* nftw has no user pointer: each pool thread its own. */
static __thread const char *t_src;
static __thread const char *t_dst;
static __thread int t_err;

static int copy_file(const char *from, const char *to, mode_t mode) {
  char buf[65536];
  int in, out;
  ssize_t n;
  int err = 0;

  in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0) {
    return -errno;
  }
  out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
  if (out < 0) {
    err = -errno;
    close(in);
    return err;
  }
  while ((n = read(in, buf, sizeof(buf))) != 0) {
    ssize_t off = 0;

    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      err = -errno;
      break;
    }
    while (off < n) {
      ssize_t w = write(out, buf + off, (size_t)(n - off));

      if (w < 0 && errno != EINTR) {
        err = -errno;
        break;
      }
      off += w > 0 ? w : 0;
    }
    if (err != 0) {
      break;
    }
  }
  close(in);
  if (close(out) != 0 && err == 0) {
    err = -errno;
  }
  return err;
}

static int copy_one(const char *path, const struct stat *st, int type,
                    struct FTW *ftw) {
  char to[PATH_MAX];
  int rc = 0;

  (void)ftw;
  if (snprintf(to, sizeof(to), "%s%s", t_dst, path + strlen(t_src)) >=
      (int)sizeof(to)) {
    t_err = UV_ENAMETOOLONG;
    return 1;
  }
  switch (type) {
  case FTW_D:
    rc = mkdir(to, (st->st_mode & 07777) | 0700) == 0 ? 0 : -errno;
    break;
  case FTW_F:
    rc = S_ISREG(st->st_mode) ? copy_file(path, to, st->st_mode) : 0;
    break;
  case FTW_SL: {
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof(target) - 1);

    if (n < 0) {
      rc = -errno;
      break;
    }
    target[n] = '\0';
    rc = symlink(target, to) == 0 ? 0 : -errno;
    break;
  }
  default:
    rc = UV_EACCES; /* unreadable directory or dangling entry */
    break;
  }
  if (rc != 0) {
    t_err = rc;
    return 1;
  }
  return 0;
}

static int remove_one(const char *path, const struct stat *st, int type,
                      struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  if (remove(path) != 0 && errno != ENOENT) {
    t_err = -errno;
    return 1;
  }
  return 0;
}

static int rm_tree(const char *path) {
  struct stat st;

  if (lstat(path, &st) != 0) {
    return errno == ENOENT ? 0 : -errno;
  }
  t_err = 0;
  if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && t_err == 0) {
    t_err = -errno;
  }
  return t_err;
}

static void copy_work(uv_work_t *req) {
  al_batch_ws_t *w = req->data;
  char tmp[PATH_MAX + 8];
  struct stat st;

  if (w->removing) {
    w->err = rm_tree(w->path);
    return;
  }
  if (stat(w->path, &st) == 0) {
    if (w->reuse) {
      w->err = 0; /* the resumed session's copy */
      return;
    }
    w->err = rm_tree(w->path);
    if (w->err != 0) {
      snprintf(w->why, sizeof(w->why), "cannot remove %s: %s", w->path,
               al_strerror(w->err));
      return;
    }
  }
  snprintf(tmp, sizeof(tmp), "%s.tmp", w->path);
  w->err = rm_tree(tmp);
  if (w->err != 0) {
    snprintf(w->why, sizeof(w->why), "cannot remove %s: %s", tmp,
             al_strerror(w->err));
    return;
  }
  t_src = w->job->ws_src;
  t_dst = tmp;
  t_err = 0;
  if (nftw(w->job->ws_src, copy_one, 16, FTW_PHYS) != 0) {
    w->err = t_err != 0 ? t_err : -errno;
    snprintf(w->why, sizeof(w->why), "cannot copy %s: %s", w->job->ws_src,
             al_strerror(w->err));
    return;
  }
  if (rename(tmp, w->path) != 0) {
    w->err = -errno;
    snprintf(w->why, sizeof(w->why), "cannot rename %s: %s", tmp,
             al_strerror(w->err));
  }
}

static void copy_done(uv_work_t *req, int status) {
  al_batch_ws_t *w = req->data;

  if (status != 0 && w->err == 0) {
    w->err = status;
  }
  if (w->err != 0 && w->why[0] == '\0') {
    snprintf(w->why, sizeof(w->why), "%s %s: %s",
             w->removing ? "cannot remove" : "cannot make", w->path,
             al_strerror(w->err));
  }
  w->cb(w, w->err, w->why);
}

static void on_git_closed(uv_handle_t *h) {
  al_batch_ws_t *w = h->data;

  w->cb(w, w->err, w->why);
}

static void on_git_exit(uv_process_t *p, int64_t status, int sig) {
  al_batch_ws_t *w = p->data;

  if (status != 0 || sig != 0) {
    w->err = UV_EIO;
    snprintf(w->why, sizeof(w->why), "git worktree %s %s%s%s failed "
             "(exit %lld, signal %d)", w->removing ? "remove" : "add",
             w->path, w->removing ? "" : " at ",
             w->removing ? "" : w->job->commit, (long long)status, sig);
  }
  uv_close((uv_handle_t *)p, on_git_closed);
}

static void run_git(al_batch_ws_t *w) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char *add[] = {"git", "-C", w->job->ws_src, "worktree", "add", "--detach",
                 "--force", "--quiet", w->path, w->job->commit, NULL};
  char *rm[] = {"git", "-C", w->job->ws_src, "worktree", "remove",
                "--force", w->path, NULL};
  int rc;

  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_IGNORE;
  stdio[2].flags = UV_IGNORE;
  po.file = "git";
  po.args = w->removing ? rm : add;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_git_exit;
  w->proc.data = w;
  rc = uv_spawn(w->loop, &w->proc, &po);
  if (rc != 0) {
    /* uv_spawn failed: the handle is initialized and must be closed. */
    w->err = rc;
    snprintf(w->why, sizeof(w->why), "cannot run git: %s", al_strerror(rc));
    uv_close((uv_handle_t *)&w->proc, on_git_closed);
  }
}

/* A workspace that needs nothing (in place, or nothing to remove): its
 * callback still on a later iteration, from the pool's done queue. */
static void nothing_work(uv_work_t *req) {
  (void)req;
}

static void stat_work(uv_work_t *req) {
  al_batch_ws_t *w = req->data;
  struct stat st;

  if (stat(w->path, &st) != 0) {
    w->err = 0;
    return;
  }
  if (w->reuse && S_ISDIR(st.st_mode)) {
    w->err = 1;
    return;
  }
  /* Left by a run killed before the session began: made again (add
   * --force takes over its registration in the repository). */
  w->err = rm_tree(w->path);
  if (w->err != 0) {
    snprintf(w->why, sizeof(w->why), "cannot remove %s: %s", w->path,
             al_strerror(w->err));
  }
}

static void stat_done(uv_work_t *req, int status) {
  al_batch_ws_t *w = req->data;

  (void)status;
  if (w->err == 1) {
    w->err = 0;
    w->cb(w, 0, NULL); /* the resumed session's worktree */
    return;
  }
  if (w->err != 0) {
    w->cb(w, w->err, w->why);
    return;
  }
  run_git(w);
}

void al__batch_ws_prepare(al_batch_ws_t *w, uv_loop_t *loop,
                          al_batch_job_t *job, const char *out_dir,
                          bool reuse, al_batch_ws_cb cb, void *data) {
  memset(w, 0, sizeof(*w));
  w->loop = loop;
  w->reuse = reuse;
  w->job = job;
  w->cb = cb;
  w->data = data;
  w->work.data = w;
  if (job->mode == AL_BATCH_WS_INPLACE) {
    snprintf(w->path, sizeof(w->path), "%s", job->ws_src);
    uv_queue_work(loop, &w->work, nothing_work, copy_done);
    return;
  }
  snprintf(w->path, sizeof(w->path), "%.3000s/work/%s", out_dir, job->id);
  if (job->mode == AL_BATCH_WS_COPY) {
    uv_queue_work(loop, &w->work, copy_work, copy_done);
  } else {
    uv_queue_work(loop, &w->work, stat_work, stat_done);
  }
}

void al__batch_ws_remove(al_batch_ws_t *w, al_batch_ws_cb cb) {
  w->cb = cb;
  w->err = 0;
  w->why[0] = '\0';
  w->removing = true;
  if (w->job->mode == AL_BATCH_WS_GIT) {
    run_git(w);
  } else if (w->job->mode == AL_BATCH_WS_COPY) {
    uv_queue_work(w->loop, &w->work, copy_work, copy_done);
  } else {
    uv_queue_work(w->loop, &w->work, nothing_work, copy_done);
  }
}
