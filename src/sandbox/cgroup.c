/* Per-tool cgroups: where they can be made, the helper prefix that puts a
 * tool in one, and their removal. See cgroup.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "sandbox/cgroup.h"

#define NAME_PREFIX "agentloop-"

static int read_text(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n;

  if (fd < 0) {
    return -errno;
  }
  n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) {
    return -errno;
  }
  buf[n] = '\0';
  return 0;
}

static int write_text(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t n;
  int err = 0;

  if (fd < 0) {
    return -errno;
  }
  n = write(fd, s, strlen(s));
  if (n < 0) {
    err = -errno;
  }
  close(fd);
  return err;
}

/* `word` is one of the separated tokens of `list`. */
static bool has_token(const char *list, const char *word, const char *seps) {
  size_t n = strlen(word);
  const char *p = list;

  while ((p = strstr(p, word)) != NULL) {
    bool start = p == list || strchr(seps, p[-1]) != NULL;
    bool end = p[n] == '\0' || strchr(seps, p[n]) != NULL;

    if (start && end) {
      return true;
    }
    p += n;
  }
  return false;
}

/* This process's cgroup path in the v1 hierarchy holding `ctrl`, or in
 * cgroup2 when ctrl is NULL. */
static bool self_cgroup(const char *ctrl, char *path, size_t size) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[1024];
  bool found = false;

  if (f == NULL) {
    return false;
  }
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    char *c1 = strchr(line, ':');
    char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
    char *nl;

    if (c2 == NULL) {
      continue;
    }
    *c2 = '\0';
    if ((nl = strchr(c2 + 1, '\n')) != NULL) {
      *nl = '\0';
    }
    if (ctrl == NULL ? strncmp(line, "0:", 2) == 0 && c1[1] == '\0'
                     : has_token(c1 + 1, ctrl, ",")) {
      snprintf(path, size, "%s", c2 + 1);
      found = true;
    }
  }
  fclose(f);
  return found;
}

/* The mount of the v1 hierarchy with `ctrl` (cgroup2 when NULL): its
 * mount point and the cgroup path it shows as its root. */
static bool find_mount(const char *ctrl, char *mnt, size_t mnt_size,
                       char *root, size_t root_size) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char line[2048];
  bool found = false;

  if (f == NULL) {
    return false;
  }
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    char *sep = strstr(line, " - ");
    char *fields[6];
    char *save = NULL;
    char *t;
    int n = 0;
    char fstype[32], opts[512];

    if (sep == NULL || strchr(line, '\\') != NULL ||
        sscanf(sep + 3, "%31s %*s %511s", fstype, opts) != 2) {
      continue;
    }
    *sep = '\0';
    for (t = strtok_r(line, " ", &save); t != NULL && n < 6;
         t = strtok_r(NULL, " ", &save)) {
      fields[n++] = t;
    }
    if (n < 5) {
      continue;
    }
    if (ctrl == NULL ? strcmp(fstype, "cgroup2") == 0
                     : strcmp(fstype, "cgroup") == 0 &&
                           has_token(opts, ctrl, ",")) {
      snprintf(mnt, mnt_size, "%s", fields[4]);
      snprintf(root, root_size, "%s", fields[3]);
      found = true;
    }
  }
  fclose(f);
  return found;
}

/* Mount point + the part of `path` below the mount's root. */
static bool join_path(const char *mnt, const char *root, const char *path,
                      char *out, size_t size) {
  size_t rl = strlen(root);

  if (strcmp(root, "/") == 0) {
    rl = 0;
  } else if (strncmp(path, root, rl) != 0 ||
             (path[rl] != '\0' && path[rl] != '/')) {
    return false; /* our cgroup is outside what this mount shows */
  }
  return (size_t)snprintf(out, size, "%s%s", mnt,
                          strcmp(path + rl, "/") == 0 ? "" : path + rl) <
         size;
}

/* The control file that says a cgroup in `dir` limits `ctrl`. */
static const char *limit_file(const char *ctrl, bool v2) {
  if (strcmp(ctrl, "pids") == 0) {
    return "pids.max";
  }
  return v2 ? "memory.max" : "memory.limit_in_bytes";
}

/* Makes and removes a cgroup under `base` with the limit file of ctrl
 * written: 0, or -errno of the step that failed (*step names it). */
static int try_make(const char *base, const char *ctrl, bool v2,
                    const char **step) {
  char dir[700], file[800];
  int rc;

  snprintf(dir, sizeof(dir), "%s/" NAME_PREFIX "%d-probe", base,
           (int)getpid());
  *step = "mkdir";
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    return -errno;
  }
  snprintf(file, sizeof(file), "%s/%s", dir, limit_file(ctrl, v2));
  *step = limit_file(ctrl, v2);
  rc = write_text(file, "max");
  if (rc != 0 && !v2) {
    rc = write_text(file, "-1"); /* v1 memory: "no limit" */
  }
  (void)rmdir(dir);
  return rc;
}

/* The directory where tool cgroups with `ctrl` are made: cgroup2 when it
 * offers ctrl to our subtree (enabling it there only when we are at the
 * root of what we see: elsewhere our own processes forbid it), else v1. */
static bool locate(const char *ctrl, char *out, size_t size, char *why,
                   size_t why_size) {
  char mnt[256], root[256], path[512], base[256], file[700], text[512];
  const char *step = "";
  int rc;

  if (find_mount(NULL, mnt, sizeof(mnt), root, sizeof(root)) &&
      self_cgroup(NULL, path, sizeof(path)) &&
      join_path(mnt, root, path, base, sizeof(base))) {
    snprintf(file, sizeof(file), "%s/cgroup.subtree_control", base);
    if (read_text(file, text, sizeof(text)) == 0 &&
        !has_token(text, ctrl, " \n") && strcmp(path, "/") == 0) {
      char plus[32];

      snprintf(plus, sizeof(plus), "+%s", ctrl);
      (void)write_text(file, plus);
      (void)read_text(file, text, sizeof(text));
    }
    if (read_text(file, text, sizeof(text)) == 0 &&
        has_token(text, ctrl, " \n")) {
      rc = try_make(base, ctrl, true, &step);
      if (rc == 0) {
        snprintf(out, size, "%s", base);
        return true;
      }
      snprintf(why, why_size, "%s: %s in %.150s: %s", ctrl, step, base,
               strerror(-rc));
    }
  }
  if (find_mount(ctrl, mnt, sizeof(mnt), root, sizeof(root)) &&
      self_cgroup(ctrl, path, sizeof(path)) &&
      join_path(mnt, root, path, base, sizeof(base))) {
    rc = try_make(base, ctrl, false, &step);
    if (rc == 0) {
      snprintf(out, size, "%s", base);
      return true;
    }
    snprintf(why, why_size, "%s: %s in %.150s: %s", ctrl, step, base,
             strerror(-rc));
    return false;
  }
  if (why[0] == '\0') {
    snprintf(why, why_size, "%s: no cgroup2 subtree with it and no v1 "
             "hierarchy", ctrl);
  }
  return false;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_probed;
static al_cgroup_state_t g_state;

void al__cgroup_probe(bool off, al_cgroup_state_t *out) {
  char why_p[256] = "", why_m[256] = "";

  memset(out, 0, sizeof(*out));
  if (off) {
    snprintf(out->detail, sizeof(out->detail), "turned off");
    return;
  }
  pthread_mutex_lock(&g_lock);
  if (!g_probed) {
    al_cgroup_state_t *s = &g_state;

    g_probed = true;
    if (locate("pids", s->pids, sizeof(s->pids), why_p, sizeof(why_p))) {
      s->active = true;
      if (!locate("memory", s->memory, sizeof(s->memory), why_m,
                  sizeof(why_m))) {
        snprintf(s->detail, sizeof(s->detail), "no memory limit (%.200s)",
                 why_m);
      }
      (void)al__cgroup_sweep(s); /* owners that died */
    } else {
      snprintf(s->detail, sizeof(s->detail), "%.250s", why_p);
    }
  }
  *out = g_state;
  pthread_mutex_unlock(&g_lock);
}

int al__cgroup_prefix(const al_cgroup_state_t *st, const char *helper,
                      uint64_t pids_max, uint64_t mem_max, char ***out) {
  char *v[14];
  char num[3][32];
  size_t n = 0, i;
  char **r;

  *out = NULL;
  if (st == NULL || !st->active || helper == NULL || helper[0] == '\0') {
    return 0;
  }
  v[n++] = (char *)helper;
  v[n++] = "--cgroup";
  v[n++] = (char *)st->pids;
  if (st->memory[0] != '\0' && strcmp(st->memory, st->pids) != 0) {
    v[n++] = "--cgroup";
    v[n++] = (char *)st->memory;
  }
  snprintf(num[2], sizeof(num[2]), "%d", (int)getpid());
  v[n++] = "--owner";
  v[n++] = num[2];
  if (pids_max > 0 && pids_max != UINT64_MAX) {
    snprintf(num[0], sizeof(num[0]), "%llu", (unsigned long long)pids_max);
    v[n++] = "--pids-max";
    v[n++] = num[0];
  }
  if (st->memory[0] != '\0' && mem_max > 0 && mem_max != UINT64_MAX) {
    snprintf(num[1], sizeof(num[1]), "%llu", (unsigned long long)mem_max);
    v[n++] = "--memory-max";
    v[n++] = num[1];
  }
  v[n++] = "--";
  r = al_calloc(n + 1, sizeof(*r));
  if (r == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    if ((r[i] = al_strdup(v[i])) == NULL) {
      while (i-- > 0) {
        al_free(r[i]);
      }
      al_free(r);
      return AL_ENOMEM;
    }
  }
  *out = r;
  return 0;
}

static bool pid_alive(int pid) {
  return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* SIGKILLs what is left in `dir`, then removes it; a few short retries
 * while the killed processes exit. */
static bool remove_cgroup(const char *dir, bool kill_rest) {
  struct timespec ms = {0, 1000000};
  char file[1200], text[4096];
  int tries;

  for (tries = 0; tries < 200; tries++) {
    if (rmdir(dir) == 0 || errno == ENOENT) {
      return true;
    }
    if (errno != EBUSY || !kill_rest) {
      return false;
    }
    snprintf(file, sizeof(file), "%s/cgroup.procs", dir);
    if (read_text(file, text, sizeof(text)) == 0) {
      char *p = text;

      while (*p != '\0') {
        char *end;
        long pid = strtol(p, &end, 10);

        if (end == p) {
          break;
        }
        if (pid > 0) {
          (void)kill((pid_t)pid, SIGKILL);
        }
        p = end;
        while (*p == '\n') {
          p++;
        }
      }
    }
    nanosleep(&ms, NULL);
  }
  return false;
}

static int sweep_dir(const char *base, int *own) {
  DIR *d = opendir(base);
  struct dirent *e;
  int me = (int)getpid();
  int removed = 0;

  if (d == NULL) {
    return 0;
  }
  while ((e = readdir(d)) != NULL) {
    int owner = 0, helper = 0;
    char dir[1024];
    char tail;

    if (strncmp(e->d_name, NAME_PREFIX, sizeof(NAME_PREFIX) - 1) != 0 ||
        sscanf(e->d_name + sizeof(NAME_PREFIX) - 1, "%d-%d%c", &owner,
               &helper, &tail) != 2) {
      continue;
    }
    snprintf(dir, sizeof(dir), "%s/%s", base, e->d_name);
    if (own != NULL) {
      *own += owner == me && !pid_alive(helper);
      continue;
    }
    if (owner == me) {
      /* Ours: gone once its helper (then bwrap) has exited. */
      if (!pid_alive(helper) && remove_cgroup(dir, true)) {
        removed++;
      }
    } else if (!pid_alive(owner) && remove_cgroup(dir, false)) {
      /* A dead owner's (its tools die with it, --die-with-parent); one
       * that is not empty may belong to a process we cannot see (another
       * PID namespace): left alone. */
      removed++;
    }
  }
  closedir(d);
  return removed;
}

int al__cgroup_sweep(const al_cgroup_state_t *st) {
  int n = 0;

  if (st == NULL || !st->active) {
    return 0;
  }
  n += sweep_dir(st->pids, NULL);
  if (st->memory[0] != '\0' && strcmp(st->memory, st->pids) != 0) {
    n += sweep_dir(st->memory, NULL);
  }
  return n;
}

int al__cgroup_count_stale(const al_cgroup_state_t *st) {
  int n = 0;

  if (st == NULL || !st->active) {
    return 0;
  }
  (void)sweep_dir(st->pids, &n);
  if (st->memory[0] != '\0' && strcmp(st->memory, st->pids) != 0) {
    (void)sweep_dir(st->memory, &n);
  }
  return n;
}
