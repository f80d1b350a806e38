/* agentloop-exec --cgroup: put this process in a fresh cgroup, then exec
 * the command (bwrap, or the helper in degraded mode). See
 * src/sandbox/cgroup.h.
 *
 *   agentloop-exec --cgroup DIR [--cgroup DIR] [--owner PID]
 *                  [--pids-max N] [--memory-max BYTES] -- COMMAND [ARGS...]
 *   ... [--memory-max BYTES] --launch
 *
 * --launch: a launcher joined ahead of its command (src/sandbox/launch.h):
 * once inside, it waits on its stdin for the command as --warm does and
 * execs it, so a cold start does not pay the join.
 *
 * In each DIR it makes agentloop-<owner>-<own pid> (owner: the agentloop
 * process that asked, named by it: a parent pid would read 1 once that
 * parent is gone, and no sweep could tell), writes the limits
 * the controllers there take (pids.max; memory.max or
 * memory.limit_in_bytes), and moves itself in: before the exec, so
 * nothing the command starts is ever outside it. A directory removed by a
 * concurrent sweep between mkdir and the move is made again. Nothing else
 * is changed here: the confinement is the inner helper's job.
 *
 * The move is on every cold start's critical path, so it takes the cheap
 * road where there is one (join): in a v1 hierarchy "0" written to
 * "tasks" moves the calling thread alone, which the kernel does without
 * cgroup_threadgroup_rwsem; cgroup.procs (or a pid in "tasks") takes that
 * percpu rwsem for write, whose writer waits for an RCU grace period:
 * 10.6 ms p50 (p90 16.7 ms) measured here per start, against 23 us. This
 * process has a single thread, so moving it moves the whole process, and
 * all the command starts after the exec is inside. cgroup2 moves only
 * whole processes between domain cgroups: cgroup.procs there. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec/cgroup_join.h"

#define MAX_DIRS 4

static int put(const char *dir, const char *file, const char *value) {
  char path[4096];
  int fd;
  ssize_t n;
  int err = 0;

  snprintf(path, sizeof(path), "%s/%s", dir, file);
  fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  n = write(fd, value, strlen(value));
  if (n < 0) {
    err = errno;
  }
  close(fd);
  return err;
}

static bool exists(const char *dir, const char *file) {
  char path[4096];

  snprintf(path, sizeof(path), "%s/%s", dir, file);
  return access(path, F_OK) == 0;
}

static void fail(const char *what, const char *dir, int err) {
  fprintf(stderr, "agentloop-exec: cgroup %s: %s: %s\n", dir, what,
          strerror(err));
  exit(125);
}

/* Moves this (single-threaded) process into dir: see the top. */
static int join(const char *dir, const char *self) {
  int err;

  if (exists(dir, "tasks")) {
    err = put(dir, "tasks", "0");
    if (err == 0 || err == ENOENT) {
      return err;
    }
  }
  return put(dir, "cgroup.procs", self);
}

/* Makes the cgroup and writes its limits: 0, or ENOENT when it vanished
 * meanwhile (made again by the caller). */
static int make_one(const char *dir, const char *pids, const char *mem) {
  int err;

  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fail("mkdir", dir, errno);
  }
  if (pids != NULL && exists(dir, "pids.max") &&
      (err = put(dir, "pids.max", pids)) != 0) {
    if (err == ENOENT) {
      return err;
    }
    fail("pids.max", dir, err);
  }
  if (mem != NULL) {
    const char *f = exists(dir, "memory.max") ? "memory.max"
                    : exists(dir, "memory.limit_in_bytes")
                        ? "memory.limit_in_bytes"
                        : NULL;

    if (f != NULL && (err = put(dir, f, mem)) != 0) {
      if (err == ENOENT) {
        return err;
      }
      fail(f, dir, err);
    }
  }
  return exists(dir, "cgroup.procs") ? 0 : ENOENT;
}

int al_exec_cgroup_main(int argc, char **argv, int (*launch)(long owner)) {
  const char *bases[MAX_DIRS];
  const char *pids = NULL, *mem = NULL;
  long owner = (long)getppid();
  char dirs[MAX_DIRS][768];
  char self[32];
  bool launcher = false;
  int n = 0, i, k, tries;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (strcmp(argv[i], "--launch") == 0 && i + 1 == argc) {
      launcher = true;
      break;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "agentloop-exec: bad option '%s'\n", argv[i]);
      return 125;
    }
    if (strcmp(argv[i], "--cgroup") == 0 && n < MAX_DIRS) {
      bases[n++] = argv[++i];
    } else if (strcmp(argv[i], "--owner") == 0) {
      owner = strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--pids-max") == 0) {
      pids = argv[++i];
    } else if (strcmp(argv[i], "--memory-max") == 0) {
      mem = argv[++i];
    } else {
      fprintf(stderr, "agentloop-exec: bad option '%s' with --cgroup\n",
              argv[i]);
      return 125;
    }
  }
  if (i >= argc && !launcher) {
    fprintf(stderr, "agentloop-exec: no command after --cgroup\n");
    return 125;
  }
  snprintf(self, sizeof(self), "%d\n", (int)getpid());
  for (k = 0; k < n; k++) {
    snprintf(dirs[k], sizeof(dirs[k]), "%s/agentloop-%ld-%d", bases[k],
             owner, (int)getpid());
    for (tries = 0;; tries++) {
      int err = make_one(dirs[k], pids, mem);

      if (err == 0) {
        err = join(dirs[k], self);
      }
      if (err == 0) {
        break;
      }
      if (err != ENOENT || tries >= 8) {
        fail("cgroup.procs", dirs[k], err);
      }
    }
  }
  if (launcher) {
    return launch(owner);
  }
  execvp(argv[i], argv + i);
  fprintf(stderr, "agentloop-exec: %s: %s\n", argv[i], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

void al_exec_cgroup_sweep_owner(const char *base, long owner) {
  char prefix[64];
  char dir[1200];
  struct timespec ms = {0, 1000000};
  size_t pl;
  int tries;

  pl = (size_t)snprintf(prefix, sizeof(prefix), "agentloop-%ld-", owner);
  for (tries = 0; tries < 200; tries++) {
    DIR *d = opendir(base);
    struct dirent *e;
    bool busy = false;

    if (d == NULL) {
      return;
    }
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, prefix, pl) != 0) {
        continue;
      }
      snprintf(dir, sizeof(dir), "%s/%s", base, e->d_name);
      if (rmdir(dir) != 0 && errno == EBUSY) {
        busy = true; /* a tool still on its way out */
      }
    }
    closedir(d);
    if (!busy) {
      return;
    }
    nanosleep(&ms, NULL);
  }
}
