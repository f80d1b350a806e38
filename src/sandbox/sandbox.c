/* Sandbox probe and argv wrapper: see sandbox.h for the mount plan. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <linux/landlock.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "sandbox/cgroup.h"
#include "sandbox/phreg.h"
#include "sandbox/sandbox.h"

#ifndef AL_EXEC_INSTALL_PATH
#define AL_EXEC_INSTALL_PATH "/usr/local/bin/agentloop-exec"
#endif

#define DEFAULT_BWRAP "/usr/bin/bwrap"

/* Paths inside a writable root that a tool must not change: code and
 * configuration that runs later outside the sandbox (sandbox.h). */
const al_sandbox_protected_t AL_SANDBOX_PROTECTED[] = {
    {"tools.d", false, false},      {".agentloop", false, false},
    {".git/hooks", false, true},    {".git/config", true, true},
    {".bashrc", true, true},        {".profile", true, true},
    {".bash_profile", true, true},  {".zshrc", true, true},
};
const size_t AL_SANDBOX_N_PROTECTED = AL_ARRAY_SIZE(AL_SANDBOX_PROTECTED);

typedef struct strv_s {
  char **v;
  size_t n;
  size_t cap;
} strv_t;

struct al_sandbox_s {
  al_sandbox_info_t info;
  char *bwrap;
  char *helper;
  strv_t roots;
  strv_t hidden;     /* existing absolute paths */
  strv_t protect;    /* absolute paths (may not exist) */
  unsigned char *protect_flags; /* PROTECT_FILE | PROTECT_NO_PLACEHOLDER */
  strv_t placeholders; /* created by bwrap, removed on the last release */
  /* The placeholder registry shared with other agents (phreg.h):
   * $XDG_STATE_HOME/agentloop/placeholders; NULL when unknown. */
  char *phreg;
  char phme[48]; /* this sandbox as a noter: "PID ID" */
  size_t active;
  bool no_owner; /* the test seam test_no_owner */
  uint64_t nproc, nofile, as_bytes, data_bytes, fsize_bytes, cpu_secs;
  /* Degraded mode: a private temporary directory (TMPDIR of every tool,
   * writable to it); removed with its content by al__sandbox_free. */
  char *tmpdir;
  /* The warm pool builds argv lists on the threadpool: the placeholder
   * list and `active` are shared with the loop thread. */
  pthread_mutex_t lock;
  size_t refs; /* the owner's, plus one per warm build in flight */
  void *pool;
  void (*pool_close)(void *pool);
  void *launch; /* the pre-joined launchers (launch.h) */
  void (*launch_close)(void *launch);
  al_cgroup_state_t cg; /* per-tool cgroups (cgroup.h) */
};

static int strv_push(strv_t *s, const char *str) {
  char *d;

  if (s->n + 2 > s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 16;
    char **nv = al_realloc(s->v, nc * sizeof(*nv));

    if (nv == NULL) {
      return AL_ENOMEM;
    }
    s->v = nv;
    s->cap = nc;
  }
  d = al_strdup(str);
  if (d == NULL) {
    return AL_ENOMEM;
  }
  s->v[s->n++] = d;
  s->v[s->n] = NULL;
  return 0;
}

static int strv_pushf(strv_t *s, const char *fmt, unsigned long long v) {
  char buf[64];

  snprintf(buf, sizeof(buf), fmt, v);
  return strv_push(s, buf);
}

static void strv_free(strv_t *s) {
  size_t i;

  for (i = 0; i < s->n; i++) {
    al_free(s->v[i]);
  }
  al_free(s->v);
  memset(s, 0, sizeof(*s));
}

static bool strv_has(const strv_t *s, const char *str) {
  size_t i;

  for (i = 0; i < s->n; i++) {
    if (strcmp(s->v[i], str) == 0) {
      return true;
    }
  }
  return false;
}

void al__sandbox_argv_free(char **argv) {
  size_t i;

  for (i = 0; argv != NULL && argv[i] != NULL; i++) {
    al_free(argv[i]);
  }
  al_free(argv);
}

const char *al_sandbox_mode_name(al_sandbox_mode_t mode) {
  switch (mode) {
  case AL_SANDBOX_MODE_BWRAP: return "bwrap";
  case AL_SANDBOX_MODE_DEGRADED: return "degraded";
  case AL_SANDBOX_MODE_NONE: return "none";
  }
  return "none";
}

void al_sandbox_probe_options_init(al_sandbox_probe_options_t *o) {
  memset(o, 0, sizeof(*o));
}

void al__sandbox_config_init(al_sandbox_config_t *c) {
  memset(c, 0, sizeof(*c));
  c->policy = AL_SANDBOX_AUTO;
}

/* True when `path` is `root` or below it (component-wise). */
static bool path_under(const char *path, const char *root) {
  size_t n = strlen(root);

  if (strcmp(root, "/") == 0) {
    return true;
  }
  return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* ---- the janitor ------------------------------------------------------------ */

/* One per process (agentloop-exec --janitor, its own session): told of
 * every placeholder made and removed, it removes the ones left when we
 * die without doing it (SIGKILL, a crash). */
static int g_janitor = -1;
static pthread_mutex_t g_janitor_lock = PTHREAD_MUTEX_INITIALIZER;

static void janitor_start(const char *helper, const char *phreg) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  char self[24];
  /* Our pid by name: a janitor that starts after we have exited (a short
   * process) must not take its new parent, init, for us. */
  char *const argv[] = {(char *)helper, "--janitor", (char *)phreg,
                        "--parent", self, NULL};
  char *const envp[] = {NULL};
  int sv[2];
  pid_t pid;

  snprintf(self, sizeof(self), "%ld", (long)getpid());

  pthread_mutex_lock(&g_janitor_lock);
  if (g_janitor >= 0 || helper == NULL || helper[0] == '\0' ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    pthread_mutex_unlock(&g_janitor_lock);
    return;
  }
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&pid, helper, &fa, &attr, argv, envp) == 0) {
    g_janitor = sv[0];
  } else {
    close(sv[0]);
  }
  close(sv[1]);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  pthread_mutex_unlock(&g_janitor_lock);
}

/* Several lines in one send (a warm hand-off registers all its
 * placeholders at once: one syscall instead of one each). try: for the
 * loop thread, which never waits for the lock (a clean-up on the
 * threadpool may hold it): -1 when busy, nothing sent. */
static int janitor_note_all(char op, char *const *paths, bool try) {
  char buf[4096];
  size_t n = 0, i;
  ssize_t k;

  if (!try) {
    pthread_mutex_lock(&g_janitor_lock);
  } else if (pthread_mutex_trylock(&g_janitor_lock) != 0) {
    return -1;
  }
  for (i = 0; g_janitor >= 0 && paths[i] != NULL; i++) {
    size_t len = strlen(paths[i]);

    if (len + 2 > sizeof(buf)) {
      continue; /* longer than any path a plan holds */
    }
    if (n + len + 2 > sizeof(buf)) {
      k = send(g_janitor, buf, n, MSG_NOSIGNAL);
      if (k < 0 || (size_t)k != n) {
        close(g_janitor);
        g_janitor = -1;
      }
      n = 0;
    }
    buf[n++] = op;
    memcpy(buf + n, paths[i], len);
    n += len;
    buf[n++] = '\n';
  }
  if (g_janitor >= 0 && n > 0) {
    k = send(g_janitor, buf, n, MSG_NOSIGNAL);
    if (k < 0 || (size_t)k != n) {
      close(g_janitor); /* gone: nothing more to tell it */
      g_janitor = -1;
    }
  }
  pthread_mutex_unlock(&g_janitor_lock);
  return 0;
}

static void janitor_note(char op, const char *path) {
  char line[PATH_MAX + 4];
  int n = snprintf(line, sizeof(line), "%c%s\n", op, path);

  pthread_mutex_lock(&g_janitor_lock);
  if (g_janitor >= 0 && n > 0 && (size_t)n < sizeof(line) &&
      send(g_janitor, line, (size_t)n, MSG_NOSIGNAL) != n) {
    close(g_janitor); /* gone: nothing more to tell it */
    g_janitor = -1;
  }
  pthread_mutex_unlock(&g_janitor_lock);
}

/* ---- tool memory ----------------------------------------------------------- */

static uint64_t read_u64_file(const char *path) {
  char buf[64];
  FILE *f = fopen(path, "re");
  unsigned long long v;

  if (f == NULL) {
    return UINT64_MAX;
  }
  if (fgets(buf, sizeof(buf), f) == NULL ||
      sscanf(buf, "%llu", &v) != 1) { /* "max" too */
    v = ULLONG_MAX;
  }
  fclose(f);
  return (uint64_t)v;
}

/* The lowest limit in `file` of cgroup `path` (under `root`) and its
 * ancestors. */
static uint64_t cgroup_min(const char *root, const char *path,
                           const char *file) {
  char p[PATH_MAX + 128];
  char cur[PATH_MAX];
  uint64_t best = UINT64_MAX;
  char *slash;

  snprintf(cur, sizeof(cur), "%s", path);
  for (;;) {
    uint64_t v;

    snprintf(p, sizeof(p), "%s%s/%s", root, strcmp(cur, "/") == 0 ? "" : cur,
             file);
    v = read_u64_file(p);
    if (v < best) {
      best = v;
    }
    slash = strrchr(cur, '/');
    if (slash == NULL || strcmp(cur, "/") == 0) {
      break;
    }
    if (slash == cur) {
      snprintf(cur, sizeof(cur), "/");
    } else {
      *slash = '\0';
    }
  }
  return best;
}

uint64_t al__sandbox_memory_base(char *from, size_t from_size) {
  char line[PATH_MAX + 64];
  uint64_t total = 0;
  uint64_t cg = UINT64_MAX;
  const char *cg_what = NULL;
  unsigned long long kb;
  FILE *f;

  f = fopen("/proc/meminfo", "re");
  while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
      total = (uint64_t)kb * 1024;
      break;
    }
  }
  if (f != NULL) {
    fclose(f);
  }
  f = fopen("/proc/self/cgroup", "re");
  while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
    char *nl = strchr(line, '\n');
    char *path;
    uint64_t v = UINT64_MAX;
    const char *what = NULL;

    if (nl != NULL) {
      *nl = '\0';
    }
    if (strncmp(line, "0::", 3) == 0) {
      path = line + 3;
      v = cgroup_min("/sys/fs/cgroup", path, "memory.max");
      what = "the cgroup memory.max";
    } else if ((path = strstr(line, ":memory:")) != NULL) {
      path += 8;
      v = cgroup_min("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes");
      what = "the cgroup memory.limit_in_bytes";
    }
    if (v < cg) {
      cg = v;
      cg_what = what;
    }
  }
  if (f != NULL) {
    fclose(f);
  }
  if (cg_what != NULL && cg > 0 && (total == 0 || cg < total)) {
    if (from != NULL) {
      snprintf(from, from_size, "%s (%llu MiB)", cg_what,
               (unsigned long long)(cg >> 20));
    }
    return cg;
  }
  if (total == 0) {
    total = (uint64_t)8 << 30; /* no /proc: a modest machine */
  }
  if (from != NULL) {
    snprintf(from, from_size, "MemTotal (%llu MiB)",
             (unsigned long long)(total >> 20));
  }
  return total;
}

uint64_t al__sandbox_default_data(uint64_t base) {
  uint64_t v = base / 100 * AL_SANDBOX_MEMORY_SHARE_PCT;

  return v < ((uint64_t)64 << 20) ? (uint64_t)64 << 20 : v;
}

/* ---- helper discovery ----------------------------------------------------- */

static bool executable(const char *p) {
  return p != NULL && p[0] == '/' && access(p, X_OK) == 0;
}

const char *al__sandbox_find_helper(const char *explicit_path) {
  static char buf[PATH_MAX + 32];
  char exe[PATH_MAX];
  ssize_t n;
  char *slash;
  const char *env;

  if (explicit_path != NULL) {
    return executable(explicit_path) ? explicit_path : NULL;
  }
  env = getenv("AGENTLOOP_EXEC");
  if (executable(env)) {
    return env;
  }
  n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash != NULL) {
      *slash = '\0';
      /* Next to the program, or one level up (the build tree's tests/
       * and bench binaries). */
      snprintf(buf, sizeof(buf), "%s/agentloop-exec", exe);
      if (executable(buf)) {
        return buf;
      }
      slash = strrchr(exe, '/');
      if (slash != NULL) {
        *slash = '\0';
        snprintf(buf, sizeof(buf), "%s/agentloop-exec", exe);
        if (executable(buf)) {
          return buf;
        }
      }
    }
  }
  return executable(AL_EXEC_INSTALL_PATH) ? AL_EXEC_INSTALL_PATH : NULL;
}

/* ---- probe ---------------------------------------------------------------- */

/* Runs argv with stdout captured (stderr into detail); returns the exit
 * status or -1. Blocking, once per agent. */
static int run_capture(char *const *argv, char *out, size_t outsz,
                       char *err, size_t errsz) {
  int po[2], pe[2];
  posix_spawn_file_actions_t fa;
  pid_t pid;
  int status = 0;
  size_t used;
  ssize_t r;
  char *const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};

  out[0] = err[0] = '\0';
  if (pipe2(po, O_CLOEXEC) != 0) {
    return -1;
  }
  if (pipe2(pe, O_CLOEXEC) != 0) {
    close(po[0]);
    close(po[1]);
    return -1;
  }
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  if (posix_spawn(&pid, argv[0], &fa, NULL, argv, envp) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    close(po[0]);
    close(po[1]);
    close(pe[0]);
    close(pe[1]);
    return -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  close(po[1]);
  close(pe[1]);
  used = 0;
  while (used + 1 < outsz &&
         (r = read(po[0], out + used, outsz - 1 - used)) != 0) {
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      break;
    }
    used += (size_t)r;
  }
  out[used] = '\0';
  used = 0;
  while (used + 1 < errsz &&
         (r = read(pe[0], err + used, errsz - 1 - used)) != 0) {
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      break;
    }
    used += (size_t)r;
  }
  err[used] = '\0';
  while (used > 0 && (err[used - 1] == '\n' || err[used - 1] == ' ')) {
    err[--used] = '\0';
  }
  close(po[0]);
  close(pe[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void add_missing(al_sandbox_info_t *info, const char *what) {
  size_t n = strlen(info->missing);

  snprintf(info->missing + n, sizeof(info->missing) - n, "%s%s",
           n > 0 ? "," : "", what);
}

static void detail(al_sandbox_info_t *info, const char *fmt, const char *a,
                   const char *b) {
  size_t n = strlen(info->detail);

  snprintf(info->detail + n, sizeof(info->detail) - n, fmt, n > 0 ? "; " : "",
           a, b);
}

/* The namespace flags every bwrap run uses (the probe runs the same).
 * No --new-session: bwrap's processes and the tool stay in the process
 * group the spawn wrapper made, so its kill(-pid) reaches all of them
 * directly instead of relying on --die-with-parent, whose parent-death
 * signal a kill during bwrap's own setup can miss. (The group already has
 * no controlling terminal, and seccomp refuses TIOCSTI.) The user
 * namespace maps the caller's uid to itself, so files the tool creates
 * belong to the user. */
static int push_bwrap_base(strv_t *a, const char *bwrap, bool network) {
  static const char *const base[] = {
      "--die-with-parent", "--unshare-user",   "--unshare-pid",
      "--unshare-ipc",     "--unshare-uts",    "--unshare-cgroup-try",
      "--cap-drop",        "ALL",              "--ro-bind",
      "/",                 "/",                "--dev",
      "/dev",              "--proc",           "/proc",
      "--tmpfs",           "/tmp",             NULL};
  size_t i;
  int rc = strv_push(a, bwrap);

  for (i = 0; base[i] != NULL && rc == 0; i++) {
    rc = strv_push(a, base[i]);
  }
  if (rc == 0 && !network) {
    rc = strv_push(a, "--unshare-net");
  }
  return rc;
}

static int parse_probe(const char *out, int *abi, bool *seccomp) {
  int a = 0, s = 0;

  if (sscanf(out, "landlock=%d seccomp=%d", &a, &s) != 2) {
    return -1;
  }
  *abi = a;
  *seccomp = s == 1;
  return 0;
}

/* Per-tool cgroups (cgroup.h): the pids limit for root, whom
 * RLIMIT_NPROC does not bind; in degraded mode the only process limit. */
static void probe_cgroup(const al_sandbox_probe_options_t *opts,
                         al_sandbox_info_t *out) {
  al_cgroup_state_t cg;

  if (out->mode == AL_SANDBOX_MODE_NONE) {
    return;
  }
  al__cgroup_probe(opts->no_cgroup, &cg);
  out->cgroup_ok = cg.active;
  snprintf(out->cgroup_pids, sizeof(out->cgroup_pids), "%s", cg.pids);
  snprintf(out->cgroup_memory, sizeof(out->cgroup_memory), "%s", cg.memory);
  snprintf(out->cgroup_detail, sizeof(out->cgroup_detail), "%s", cg.detail);
  if (cg.active) {
    if (out->mode == AL_SANDBOX_MODE_DEGRADED) {
      /* pids.max stands in for the nproc limit degraded mode cannot set */
      char *p = strstr(out->missing, ",nproc-limit");

      if (p != NULL) {
        memmove(p, p + 12, strlen(p + 12) + 1);
      }
    }
  } else if (out->mode == AL_SANDBOX_MODE_BWRAP && geteuid() == 0) {
    add_missing(out, "nproc-limit"); /* RLIMIT_NPROC spares uid 0 */
  }
}

int al_sandbox_probe(const al_sandbox_probe_options_t *opts,
                     al_sandbox_info_t *out) {
  al_sandbox_probe_options_t def;
  const char *helper;
  const char *bwrap;
  char so[256], se[256];
  int rc;
  strv_t a;

  if (opts == NULL) {
    al_sandbox_probe_options_init(&def);
    opts = &def;
  }
  memset(out, 0, sizeof(*out));
  bwrap = opts->bwrap != NULL ? opts->bwrap : DEFAULT_BWRAP;
  snprintf(out->bwrap, sizeof(out->bwrap), "%s", bwrap);
  helper = al__sandbox_find_helper(opts->helper);
  if (helper == NULL) {
    detail(out, "%sagentloop-exec not found%s%s", "", "");
    out->mode = AL_SANDBOX_MODE_NONE;
    add_missing(out, "all");
    return 0;
  }
  snprintf(out->helper, sizeof(out->helper), "%s", helper);

  /* bwrap around the helper first: when that works, the helper works
   * (one child process instead of two at every start). */
  memset(&a, 0, sizeof(a));
  if (access(bwrap, X_OK) != 0) {
    detail(out, "%s%s: not installed (apt-get install bubblewrap)%s", bwrap,
           "");
  } else if (push_bwrap_base(&a, bwrap, false) == 0 &&
             strv_push(&a, "--ro-bind") == 0 && strv_push(&a, helper) == 0 &&
             strv_push(&a, helper) == 0 && strv_push(&a, "--") == 0 &&
             strv_push(&a, helper) == 0 &&
             (!opts->no_landlock || (strv_push(&a, "--landlock-abi") == 0 &&
                                     strv_push(&a, "0") == 0)) &&
             strv_push(&a, "--probe") == 0) {
    rc = run_capture(a.v, so, sizeof(so), se, sizeof(se));
    if (rc == 0 &&
        parse_probe(so, &out->landlock_abi, &out->seccomp_ok) == 0 &&
        out->seccomp_ok) {
      out->bwrap_ok = true;
      out->helper_ok = true;
    } else {
      char cause[400];

      /* bwrap's own text blames the kernel setting even in a chroot. */
      if ((strstr(se, "namespace") != NULL || strstr(se, "uid map") != NULL) &&
          (al__sandbox_userns_cause(cause, sizeof(cause)) > 0 ||
           al__sandbox_userns_restricted(cause, sizeof(cause)) > 0)) {
        detail(out, "%sbwrap cannot make a user namespace: %s%s", cause, "");
      } else {
        detail(out, "%sbwrap failed: %s%s", se[0] ? se : "no output", "");
      }
    }
  }
  strv_free(&a);

  /* The helper alone. */
  if (!out->helper_ok) {
    char *argv[5] = {(char *)helper, "--probe", NULL, NULL, NULL};

    if (opts->no_landlock) {
      argv[1] = "--landlock-abi";
      argv[2] = "0";
      argv[3] = "--probe";
    }
    rc = run_capture(argv, so, sizeof(so), se, sizeof(se));
    if (rc == 0 &&
        parse_probe(so, &out->landlock_abi, &out->seccomp_ok) == 0) {
      out->helper_ok = true;
    } else {
      detail(out, "%sagentloop-exec --probe failed: %s%s", se, "");
    }
  }

  if (out->bwrap_ok && out->helper_ok) {
    out->mode = AL_SANDBOX_MODE_BWRAP;
    if (out->landlock_abi == 0) {
      add_missing(out, "landlock");
    } else {
      if (out->landlock_abi < 3) {
        add_missing(out, "landlock-truncate");
      }
      if (out->landlock_abi < 4) {
        add_missing(out, "landlock-tcp");
      }
    }
  } else if (out->helper_ok && out->seccomp_ok && out->landlock_abi > 0) {
    out->mode = AL_SANDBOX_MODE_DEGRADED;
    add_missing(out, "mount-namespace,protected-subpaths,hidden-paths,"
                     "pid-namespace,network-namespace");
    if (out->landlock_abi < 4) {
      add_missing(out, "tcp-deny");
    }
    if (out->landlock_abi < 6) {
      add_missing(out, "signal-scope");
    }
    add_missing(out, "nproc-limit");
  } else {
    out->mode = AL_SANDBOX_MODE_NONE;
    add_missing(out, "all");
  }
  probe_cgroup(opts, out);
  return 0;
}

int al_sandbox_info_json(const al_sandbox_info_t *info, char **out) {
  json_t *o;
  json_t *miss;
  char *s;
  const char *p;

  *out = NULL;
  miss = json_array();
  for (p = info->missing; miss != NULL && *p != '\0';) {
    const char *c = strchr(p, ',');
    size_t n = c != NULL ? (size_t)(c - p) : strlen(p);

    json_array_append_new(miss, json_stringn(p, n));
    p += n + (c != NULL ? 1 : 0);
  }
  o = json_pack("{s:s, s:i, s:s, s:b, s:s, s:b, s:b, s:o, s:s, "
                "s:{s:b, s:s?, s:s?, s:s}}",
                "mode", al_sandbox_mode_name(info->mode), "landlock_abi",
                info->landlock_abi, "bwrap", info->bwrap, "bwrap_ok",
                info->bwrap_ok, "helper", info->helper, "helper_ok",
                info->helper_ok, "seccomp", info->seccomp_ok, "missing",
                miss != NULL ? miss : json_array(), "detail", info->detail,
                "cgroup", "active", info->cgroup_ok, "pids",
                info->cgroup_pids[0] != '\0' ? info->cgroup_pids : NULL,
                "memory",
                info->cgroup_memory[0] != '\0' ? info->cgroup_memory : NULL,
                "detail", info->cgroup_detail);
  if (o == NULL) {
    return AL_ENOMEM;
  }
  s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (s == NULL) {
    return AL_ENOMEM;
  }
  *out = s; /* jansson allocates through al_malloc */
  return 0;
}

/* ---- the plan ------------------------------------------------------------- */

static bool under_any_root(const al_sandbox_t *sb, const char *p);

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP) {
    (void)rmdir(path);
  } else {
    (void)unlink(path);
  }
  return 0;
}

void al__sandbox_set_pool(al_sandbox_t *sb, void *pool,
                          void (*close_fn)(void *pool)) {
  sb->pool = pool;
  sb->pool_close = close_fn;
}

void *al__sandbox_pool(const al_sandbox_t *sb) {
  return sb != NULL ? sb->pool : NULL;
}

void al__sandbox_set_launch(al_sandbox_t *sb, void *launch,
                            void (*close_fn)(void *launch)) {
  sb->launch = launch;
  sb->launch_close = close_fn;
}

void *al__sandbox_launch(const al_sandbox_t *sb) {
  return sb != NULL ? sb->launch : NULL;
}

/* Atomic, not under the lock: the loop takes references (a build, a
 * clean-up, a plan queued) and must never wait for a clean-up that holds
 * the lock on the threadpool. */
void al__sandbox_ref(al_sandbox_t *sb) {
  __atomic_add_fetch(&sb->refs, 1, __ATOMIC_RELAXED);
}

static void sandbox_destroy(al_sandbox_t *sb);

void al__sandbox_unref(al_sandbox_t *sb) {
  size_t left = __atomic_sub_fetch(&sb->refs, 1, __ATOMIC_ACQ_REL);

  if (left == 0) {
    sandbox_destroy(sb);
  }
}

void al__sandbox_free(al_sandbox_t *sb) {
  if (sb == NULL) {
    return;
  }
  if (sb->pool != NULL) {
    /* Kills and reaps the idle warm sandboxes (releasing them); a build
     * still on the threadpool holds its own reference. */
    void *pool = sb->pool;

    sb->pool = NULL;
    sb->pool_close(pool);
  }
  if (sb->launch != NULL) {
    void *launch = sb->launch;

    sb->launch = NULL;
    sb->launch_close(launch);
  }
  al__sandbox_unref(sb);
}

static void sandbox_destroy(al_sandbox_t *sb) {
  if (sb->tmpdir != NULL) {
    /* What the tools left there; FTW_PHYS: links are removed, never
     * followed. */
    (void)nftw(sb->tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    al_free(sb->tmpdir);
  }
  al_free(sb->bwrap);
  al_free(sb->helper);
  strv_free(&sb->roots);
  strv_free(&sb->hidden);
  strv_free(&sb->protect);
  strv_free(&sb->placeholders);
  al_free(sb->phreg);
  al_free(sb->protect_flags);
  pthread_mutex_destroy(&sb->lock);
  al_free(sb);
}

const al_sandbox_info_t *al__sandbox_info(const al_sandbox_t *sb) {
  return &sb->info;
}

al_sandbox_mode_t al__sandbox_mode(const al_sandbox_t *sb) {
  return sb != NULL ? sb->info.mode : AL_SANDBOX_MODE_NONE;
}

/* $VAR, or $HOME/fallback. Static buffer. */
static const char *xdg(const char *var, const char *fallback) {
  static char buf[PATH_MAX];
  const char *v = getenv(var);
  const char *home = getenv("HOME");

  if (v != NULL && v[0] == '/') {
    return v;
  }
  if (home == NULL || home[0] != '/') {
    return NULL;
  }
  snprintf(buf, sizeof(buf), "%s/%s", home, fallback);
  return buf;
}

static int add_hidden(al_sandbox_t *sb, const char *path) {
  char real[PATH_MAX];
  struct stat st;

  if (path == NULL || realpath(path, real) == NULL ||
      lstat(real, &st) != 0 || strv_has(&sb->hidden, real)) {
    return 0; /* nothing there to hide */
  }
  /* A hidden path that is itself a root, or holds one, would hide the
   * workspace: the user asked for it to be writable, so it wins. */
  {
    size_t i;

    for (i = 0; i < sb->roots.n; i++) {
      if (path_under(sb->roots.v[i], real)) {
        return 0;
      }
    }
  }
  return strv_push(&sb->hidden, real);
}

#define PROTECT_FILE 1u
#define PROTECT_NO_PLACEHOLDER 2u

static int add_protected(al_sandbox_t *sb, const char *path,
                         unsigned flags) {
  unsigned char *nf;

  if (strv_has(&sb->protect, path)) {
    return 0;
  }
  nf = al_realloc(sb->protect_flags, (sb->protect.n + 1) * sizeof(*nf));
  if (nf == NULL) {
    return AL_ENOMEM;
  }
  sb->protect_flags = nf;
  nf[sb->protect.n] = (unsigned char)flags;
  return strv_push(&sb->protect, path);
}

static int build_plan(al_sandbox_t *sb, const al_sandbox_config_t *cfg) {
  static const char *const home_secrets[] = {
      ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".docker",
      ".kube", ".netrc", ".git-credentials", ".npmrc", ".pypirc", NULL};
  const char *home = getenv("HOME");
  char buf[PATH_MAX];
  const char *p;
  size_t i, j;
  int rc = 0;

  for (i = 0; i < cfg->n_write_roots && rc == 0; i++) {
    char real[PATH_MAX];
    struct stat st;

    if (realpath(cfg->write_roots[i], real) == NULL ||
        stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
      if (i == 0) {
        return AL_EINVAL;
      }
      continue; /* an allowed path that does not exist: nothing to bind */
    }
    if (!strv_has(&sb->roots, real)) {
      rc = strv_push(&sb->roots, real);
    }
  }
  if (rc == 0 && sb->roots.n == 0) {
    if (getcwd(buf, sizeof(buf)) == NULL) {
      return AL_EINVAL;
    }
    rc = strv_push(&sb->roots, buf);
  }
  /* agentloop's own state, config and socket directories, then the
   * usual secrets, then the user's denied paths. */
  if (rc == 0) {
    p = getenv("XDG_RUNTIME_DIR");
    if (p == NULL) {
      snprintf(buf, sizeof(buf), "/run/user/%u", (unsigned)getuid());
      p = buf;
    }
    rc = add_hidden(sb, p);
  }
  if (rc == 0 && (p = xdg("XDG_STATE_HOME", ".local/state")) != NULL) {
    static atomic_uint next_id;

    snprintf(buf, sizeof(buf), "%s/agentloop/placeholders", p);
    sb->phreg = al_strdup(buf);
    snprintf(sb->phme, sizeof(sb->phme), "%ld %u", (long)getpid(),
             atomic_fetch_add(&next_id, 1) + 1);
    snprintf(buf, sizeof(buf), "%s/agentloop", p);
    rc = sb->phreg == NULL ? AL_ENOMEM : add_hidden(sb, buf);
  }
  if (rc == 0 && (p = xdg("XDG_CONFIG_HOME", ".config")) != NULL) {
    snprintf(buf, sizeof(buf), "%s/agentloop", p);
    rc = add_hidden(sb, buf);
    /* Inside a root (HOME as the workspace) it must also not be
     * created. */
    for (i = 0; rc == 0 && i < sb->roots.n; i++) {
      if (path_under(buf, sb->roots.v[i])) {
        rc = add_protected(sb, buf, 0);
      }
    }
  }
  for (i = 0; rc == 0 && home != NULL && home[0] == '/' &&
              home_secrets[i] != NULL;
       i++) {
    snprintf(buf, sizeof(buf), "%s/%s", home, home_secrets[i]);
    rc = add_hidden(sb, buf);
  }
  for (i = 0; rc == 0 && i < cfg->n_hidden; i++) {
    rc = add_hidden(sb, cfg->hidden[i]);
  }
  for (i = 0; rc == 0 && i < sb->roots.n; i++) {
    for (j = 0; rc == 0 && j < AL_SANDBOX_N_PROTECTED; j++) {
      /* Shell rc files matter where a shell reads them: the home. */
      if (AL_SANDBOX_PROTECTED[j].is_file &&
          AL_SANDBOX_PROTECTED[j].rel[0] == '.' &&
          strncmp(AL_SANDBOX_PROTECTED[j].rel, ".git/", 5) != 0 &&
          (home == NULL || strcmp(sb->roots.v[i], home) != 0)) {
        continue;
      }
      snprintf(buf, sizeof(buf), "%s/%s",
               strcmp(sb->roots.v[i], "/") == 0 ? "" : sb->roots.v[i],
               AL_SANDBOX_PROTECTED[j].rel);
      rc = add_protected(
          sb, buf,
          (AL_SANDBOX_PROTECTED[j].is_file ? PROTECT_FILE : 0u) |
              (AL_SANDBOX_PROTECTED[j].placeholder ? 0u
                                                   : PROTECT_NO_PLACEHOLDER));
    }
  }
  return rc;
}

/* Probes are a few milliseconds (two child processes) and their answer
 * does not change while we run: every agent after the first with the same
 * seams reuses it. */
#define PROBE_CACHE 8

static struct {
  char bwrap[256];
  char helper[1024];
  bool no_landlock;
  bool no_cgroup;
  al_sandbox_info_t info;
} g_probe_cache[PROBE_CACHE];
static size_t g_probe_n;
static pthread_mutex_t g_probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* Copies the cached answer for these options into *out (when not NULL);
 * false when there is none. */
static bool probe_lookup(const al_sandbox_probe_options_t *o,
                         al_sandbox_info_t *out) {
  const char *bw = o->bwrap != NULL ? o->bwrap : "";
  const char *he = o->helper != NULL ? o->helper : "";
  bool found = false;
  size_t i;

  pthread_mutex_lock(&g_probe_lock);
  for (i = 0; i < g_probe_n && !found; i++) {
    if (strcmp(g_probe_cache[i].bwrap, bw) == 0 &&
        strcmp(g_probe_cache[i].helper, he) == 0 &&
        g_probe_cache[i].no_landlock == o->no_landlock &&
        g_probe_cache[i].no_cgroup == o->no_cgroup) {
      if (out != NULL) {
        *out = g_probe_cache[i].info;
      }
      found = true;
    }
  }
  pthread_mutex_unlock(&g_probe_lock);
  return found;
}

bool al__sandbox_probe_cached(const al_sandbox_probe_options_t *opts) {
  return probe_lookup(opts, NULL);
}

static void probe_cached(const al_sandbox_probe_options_t *o,
                         al_sandbox_info_t *out) {
  const char *bw = o->bwrap != NULL ? o->bwrap : "";
  const char *he = o->helper != NULL ? o->helper : "";

  if (probe_lookup(o, out)) {
    return;
  }
  al_sandbox_probe(o, out);
  if (strlen(bw) >= sizeof(g_probe_cache[0].bwrap) ||
      strlen(he) >= sizeof(g_probe_cache[0].helper)) {
    return;
  }
  pthread_mutex_lock(&g_probe_lock);
  if (g_probe_n < PROBE_CACHE) {
    snprintf(g_probe_cache[g_probe_n].bwrap, sizeof(g_probe_cache[0].bwrap),
             "%s", bw);
    snprintf(g_probe_cache[g_probe_n].helper,
             sizeof(g_probe_cache[0].helper), "%s", he);
    g_probe_cache[g_probe_n].no_landlock = o->no_landlock;
    g_probe_cache[g_probe_n].no_cgroup = o->no_cgroup;
    g_probe_cache[g_probe_n].info = *out;
    g_probe_n++;
  }
  pthread_mutex_unlock(&g_probe_lock);
}

void al__sandbox_warm(const al_sandbox_probe_options_t *opts) {
  al_sandbox_info_t info;

  probe_cached(opts, &info);
}

int al__sandbox_new(const al_sandbox_config_t *cfg, al_sandbox_t **out,
                    al_sandbox_info_t *info_out) {
  al_sandbox_t *sb;
  int rc;

  *out = NULL;
  sb = al_calloc(1, sizeof(*sb));
  if (sb == NULL) {
    return AL_ENOMEM;
  }
  pthread_mutex_init(&sb->lock, NULL);
  sb->refs = 1;
  sb->nproc = cfg->nproc ? cfg->nproc : AL_SANDBOX_DEFAULT_NPROC;
  sb->nofile = cfg->nofile ? cfg->nofile : AL_SANDBOX_DEFAULT_NOFILE;
  sb->as_bytes = cfg->as_bytes ? cfg->as_bytes : AL_SANDBOX_DEFAULT_AS;
  sb->fsize_bytes = cfg->fsize_bytes ? cfg->fsize_bytes
                                     : AL_SANDBOX_DEFAULT_FSIZE;
  sb->cpu_secs = cfg->cpu_secs;
  sb->data_bytes = cfg->data_bytes;
  sb->no_owner = cfg->test_no_owner;
  if (sb->data_bytes == 0) {
    char from[128];
    uint64_t base = al__sandbox_memory_base(from, sizeof(from));

    sb->data_bytes = al__sandbox_default_data(base);
    al_log(AL_LOG_DEBUG, "sandbox: tool memory (RLIMIT_DATA) %llu MiB: %d%% "
           "of %s", (unsigned long long)(sb->data_bytes >> 20),
           AL_SANDBOX_MEMORY_SHARE_PCT, from);
  }
  if (cfg->policy == AL_SANDBOX_OFF) {
    sb->info.mode = AL_SANDBOX_MODE_NONE;
    snprintf(sb->info.missing, sizeof(sb->info.missing), "all");
    snprintf(sb->info.detail, sizeof(sb->info.detail),
             "disabled (--sandbox=none)");
  } else {
    probe_cached(&cfg->probe, &sb->info);
  }
  if (info_out != NULL) {
    *info_out = sb->info;
  }
  if (cfg->policy == AL_SANDBOX_REQUIRED &&
      sb->info.mode != AL_SANDBOX_MODE_BWRAP) {
    al__sandbox_free(sb);
    return AL_ENOTSUP;
  }
  if (sb->info.cgroup_ok) {
    sb->cg.active = true;
    snprintf(sb->cg.pids, sizeof(sb->cg.pids), "%s", sb->info.cgroup_pids);
    snprintf(sb->cg.memory, sizeof(sb->cg.memory), "%s",
             sb->info.cgroup_memory);
  }
  sb->bwrap = al_strdup(sb->info.bwrap[0] ? sb->info.bwrap : DEFAULT_BWRAP);
  sb->helper = al_strdup(sb->info.helper);
  if (sb->bwrap == NULL || sb->helper == NULL) {
    al__sandbox_free(sb);
    return AL_ENOMEM;
  }
  rc = build_plan(sb, cfg);
  if (rc == 0 && sb->info.mode != AL_SANDBOX_MODE_NONE) {
    (void)al__sandbox_owner_lock(sb->helper); /* once per process */
  }
  if (rc == 0 && sb->info.mode == AL_SANDBOX_MODE_BWRAP) {
    janitor_start(sb->helper, sb->phreg); /* once per process */
    if (sb->cg.active) {
      /* What our tools' cgroups leave at our exit (unused warm
       * sandboxes, a SIGKILL) goes with the janitor. */
      janitor_note('c', sb->cg.pids);
      if (sb->cg.memory[0] != '\0' && strcmp(sb->cg.memory, sb->cg.pids)) {
        janitor_note('c', sb->cg.memory);
      }
    }
  }
  if (rc == 0 && sb->helper[0] != '\0') {
    /* A helper a tool could overwrite (agentloop run from its own build
     * tree inside the workspace) would hand the next tool an unconfined
     * start: in bwrap mode it is mounted read-only; in degraded mode it
     * runs outside any sandbox, so that mode is off. */
    char real[PATH_MAX];

    if (realpath(sb->helper, real) != NULL && under_any_root(sb, real)) {
      /* (bwrap mode: al__sandbox_wrap binds it read-only, last.) */
      if (sb->info.mode == AL_SANDBOX_MODE_DEGRADED) {
        sb->info.mode = AL_SANDBOX_MODE_NONE;
        snprintf(sb->info.missing, sizeof(sb->info.missing), "all");
        snprintf(sb->info.detail, sizeof(sb->info.detail),
                 "%.300s lies inside a writable root: a tool could replace "
                 "it",
                 real);
        if (info_out != NULL) {
          *info_out = sb->info;
        }
      }
    }
  }
  if (rc == 0 && sb->info.mode == AL_SANDBOX_MODE_DEGRADED) {
    /* No private /tmp without a mount namespace, and Landlock keeps the
     * shared one read-only: compilers and friends get their own. */
    char t[PATH_MAX];
    const char *base = getenv("TMPDIR");

    snprintf(t, sizeof(t), "%s/agentloop-tmp-XXXXXX",
             base != NULL && base[0] == '/' ? base : "/tmp");
    if (mkdtemp(t) != NULL) {
      sb->tmpdir = al_strdup(t);
      rc = sb->tmpdir != NULL ? 0 : AL_ENOMEM;
    }
  }
  if (rc != 0) {
    al__sandbox_free(sb);
    return rc;
  }
  *out = sb;
  return 0;
}

/* ---- wrapping ------------------------------------------------------------- */

static bool under_any_root(const al_sandbox_t *sb, const char *p) {
  size_t i;

  for (i = 0; i < sb->roots.n; i++) {
    if (path_under(p, sb->roots.v[i])) {
      return true;
    }
  }
  return false;
}

static int push_hide(strv_t *a, const char *p) {
  struct stat st;
  int rc;

  if (lstat(p, &st) != 0) {
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    if ((rc = strv_push(a, "--tmpfs")) != 0) {
      return rc;
    }
    return strv_push(a, p);
  }
  if ((rc = strv_push(a, "--ro-bind")) != 0 ||
      (rc = strv_push(a, "/dev/null")) != 0) {
    return rc;
  }
  return strv_push(a, p);
}

/* The highest placeholder of ours on p's path (p itself or an ancestor)
 * into out: a sibling sandbox's mount point, which exists on disk but is
 * not the user's. Caller holds sb->lock. */
static bool own_placeholder_on(const al_sandbox_t *sb, const char *p,
                               char *out, size_t len) {
  size_t i;
  size_t best = 0;

  for (i = 0; i < sb->placeholders.n; i++) {
    const char *ph = sb->placeholders.v[i];

    if (path_under(p, ph) && (best == 0 || strlen(ph) < best)) {
      best = strlen(ph);
      snprintf(out, len, "%s", ph);
    }
  }
  return best > 0;
}

/* The highest existing placeholder of another agent (or of another
 * sandbox of ours) on p's path, from the shared registry (phreg.h): an
 * empty directory that is not the user's. Caller holds sb->lock. */
static bool agent_placeholder_on(const al_sandbox_t *sb, const char *p,
                                 char *out, size_t len) {
  char buf[PATH_MAX];
  const char *root = NULL;
  struct stat st;
  size_t i;
  char *s;

  for (i = 0; i < sb->roots.n; i++) {
    if (path_under(p, sb->roots.v[i]) &&
        (root == NULL || strlen(sb->roots.v[i]) > strlen(root))) {
      root = sb->roots.v[i];
    }
  }
  if (sb->phreg == NULL || root == NULL || strcmp(root, p) == 0 ||
      snprintf(buf, sizeof(buf), "%s", p) >= (int)sizeof(buf)) {
    return false;
  }
  /* From the component below the root down to p itself. */
  s = buf + (strcmp(root, "/") == 0 ? 0 : strlen(root));
  for (;;) {
    char *next = strchr(s + 1, '/');

    if (next != NULL) {
      *next = '\0';
    }
    if (lstat(buf, &st) != 0) {
      return false; /* missing: a placeholder of our own goes here */
    }
    /* A placeholder is empty on disk (its content is a mount inside
     * the sandbox); one with something in it is the user's now. */
    if (al_phreg_empty(buf, &st) && al_phreg_known(sb->phreg, buf)) {
      snprintf(out, len, "%s", buf);
      return true;
    }
    if (next == NULL) {
      return false;
    }
    *next = '/';
    s = next;
  }
}

/* A protected path: read-only if it exists, else a read-only placeholder
 * at its first missing component below the root (none with
 * PROTECT_NO_PLACEHOLDER). Caller holds sb->lock. */
static int push_protect(al_sandbox_t *sb, strv_t *a, const char *p,
                        unsigned flags, strv_t *need) {
  bool is_file = (flags & PROTECT_FILE) != 0;
  char buf[PATH_MAX];
  struct stat st;
  char *slash;
  int rc;

  if (own_placeholder_on(sb, p, buf, sizeof(buf)) ||
      agent_placeholder_on(sb, p, buf, sizeof(buf))) {
    /* Covered by the same placeholder (.git for .git/hooks too): made
     * as for a missing path, and nothing is made inside it, which a
     * sibling could not remove and would leave behind (QA: an empty .git
     * left in the workspace after three sandboxed servers started). */
    if (strcmp(buf, p) != 0) {
      is_file = false;
    }
    goto placeholder;
  }
  if (lstat(p, &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      /* A symlink cannot be a mount point; its target is outside our
       * concern only if outside the roots, and bwrap would follow it.
       * Cover the link itself. */
      if ((rc = strv_push(a, "--ro-bind")) != 0 ||
          (rc = strv_push(a, "/dev/null")) != 0) {
        return rc;
      }
      return strv_push(a, p);
    }
    if ((rc = strv_push(a, "--ro-bind")) != 0 ||
        (rc = strv_push(a, p)) != 0) {
      return rc;
    }
    return strv_push(a, p);
  }
  if ((flags & PROTECT_NO_PLACEHOLDER) != 0) {
    /* Bound by project trust instead: what a tool makes here is not
     * trusted next time (al__tools_project_trust). */
    return 0;
  }
  /* Walk up to the highest missing ancestor. */
  snprintf(buf, sizeof(buf), "%s", p);
  for (;;) {
    slash = strrchr(buf, '/');
    if (slash == NULL || slash == buf) {
      break;
    }
    *slash = '\0';
    if (lstat(buf, &st) == 0) {
      *slash = '/';
      break;
    }
    is_file = false; /* an ancestor is a directory */
  }
placeholder:
  if (!under_any_root(sb, buf)) {
    return 0;
  }
  if (strv_has(a, buf)) {
    return 0; /* .git/hooks and .git/config share the placeholder .git */
  }
  if (need != NULL) {
    /* A plan made ahead (any thread): the caller registers these when
     * the plan is used (al__sandbox_protect_claim). The shared registry
     * hears of them now, before the helper makes them. */
    if ((rc = strv_push(need, buf)) != 0) {
      return rc;
    }
    (void)al_phreg_note(sb->phreg, buf, sb->phme);
  } else if (!strv_has(&sb->placeholders, buf)) {
    if ((rc = strv_push(&sb->placeholders, buf)) != 0) {
      return rc;
    }
    /* Before bwrap (or the warm helper) makes it. */
    janitor_note('+', buf);
    (void)al_phreg_note(sb->phreg, buf, sb->phme);
  }
  if (is_file) {
    if ((rc = strv_push(a, "--ro-bind")) != 0 ||
        (rc = strv_push(a, "/dev/null")) != 0) {
      return rc;
    }
    return strv_push(a, buf);
  }
  if ((rc = strv_push(a, "--tmpfs")) != 0 || (rc = strv_push(a, buf)) != 0 ||
      (rc = strv_push(a, "--remount-ro")) != 0) {
    return rc;
  }
  return strv_push(a, buf);
}

/* ---- the owner's lock -------------------------------------------------------- */

/* A read lock on byte getpid() of the helper binary, held for this
 * process's life: agentloop-exec --owner looks for it before it starts a
 * command, so a tool whose agentloop died while bwrap set up never runs
 * (src/exec/main.c, owner_gone). -1 until taken; 0 when it cannot be. */
static atomic_int g_owner_lock = -1;
/* The pid whose byte is locked: --owner names it (a process forked after
 * the lock was taken passes its parent's until it makes a sandbox of its
 * own, which takes a lock for its own pid). */
static atomic_long g_owner_pid;
static pthread_mutex_t g_owner_mu = PTHREAD_MUTEX_INITIALIZER;

int al__sandbox_owner_lock(const char *helper) {
  struct flock fl;
  int fd, ok;

  pthread_mutex_lock(&g_owner_mu);
  if (g_owner_lock > 0 && g_owner_pid != (long)getpid()) {
    /* A forked child: the inherited descriptor is its parent's lock,
     * which it would keep alive past its parent. */
    close(g_owner_lock);
    g_owner_lock = -1;
  }
  if (g_owner_lock < 0 && helper != NULL && helper[0] != '\0') {
    g_owner_lock = 0;
    fd = open(helper, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      memset(&fl, 0, sizeof(fl));
      fl.l_type = F_RDLCK;
      fl.l_whence = SEEK_SET;
      fl.l_start = (off_t)getpid();
      fl.l_len = 1;
      if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
        g_owner_pid = (long)getpid();
        g_owner_lock = fd; /* kept open: the lock lasts as long */
      } else {
        close(fd);
      }
    }
  }
  ok = g_owner_lock > 0;
  pthread_mutex_unlock(&g_owner_mu);
  return ok ? 0 : AL_ENOTSUP;
}

static int push_helper(const al_sandbox_t *sb, strv_t *a, bool network,
                       bool supervise, bool warm) {
  size_t i;
  int rc = strv_push(a, sb->helper);

  if (rc == 0 && g_owner_lock > 0 && !sb->no_owner &&
      (rc = strv_push(a, "--owner")) == 0) {
    rc = strv_pushf(a, "%llu", (unsigned long long)g_owner_pid);
  }

  if (rc == 0 && sb->nproc > 0 && sb->nproc != UINT64_MAX && !supervise) {
    /* bwrap mode has its own user namespace, where the process count
     * starts from zero; in degraded mode the count is the user's whole
     * session, so no limit is set there. */
    if ((rc = strv_push(a, "--nproc")) == 0) {
      rc = strv_pushf(a, "%llu", (unsigned long long)sb->nproc);
    }
  }
  if (rc == 0 && (rc = strv_push(a, "--nofile")) == 0) {
    rc = strv_pushf(a, "%llu", (unsigned long long)sb->nofile);
  }
  if (rc == 0 && sb->as_bytes != UINT64_MAX &&
      (rc = strv_push(a, "--as")) == 0) {
    rc = strv_pushf(a, "%llu", (unsigned long long)sb->as_bytes);
  }
  if (rc == 0 && sb->data_bytes != UINT64_MAX &&
      (rc = strv_push(a, "--data")) == 0) {
    rc = strv_pushf(a, "%llu", (unsigned long long)sb->data_bytes);
  }
  if (rc == 0 && (rc = strv_push(a, "--fsize")) == 0) {
    rc = strv_pushf(a, "%llu", (unsigned long long)sb->fsize_bytes);
  }
  if (rc == 0 && sb->cpu_secs > 0 && (rc = strv_push(a, "--cpu")) == 0) {
    rc = strv_pushf(a, "%llu", (unsigned long long)sb->cpu_secs);
  }
  if (rc == 0 && sb->info.landlock_abi > 0) {
    for (i = 0; i < sb->roots.n && rc == 0; i++) {
      if ((rc = strv_push(a, "--write")) == 0) {
        rc = strv_push(a, sb->roots.v[i]);
      }
    }
    if (rc == 0 && !supervise && (rc = strv_push(a, "--write")) == 0) {
      rc = strv_push(a, "/tmp"); /* a private tmpfs in bwrap mode */
    }
    if (rc == 0 && (rc = strv_push(a, "--landlock-abi")) == 0) {
      rc = strv_pushf(a, "%llu", (unsigned long long)sb->info.landlock_abi);
    }
  }
  if (rc == 0 && supervise && sb->tmpdir != NULL &&
      (rc = strv_push(a, "--tmpdir")) == 0) {
    rc = strv_push(a, sb->tmpdir);
  }
  if (rc == 0 && supervise) {
    rc = strv_push(a, "--supervise");
    if (rc == 0) {
      rc = strv_push(a, "--require-landlock");
    }
  }
  if (rc == 0 && !network) {
    rc = strv_push(a, "--no-network");
  }
  if (rc == 0) {
    /* Warm: the command comes later, on its stdin (see pool.h). */
    rc = strv_push(a, warm ? "--warm" : "--");
  }
  return rc;
}

bool al__sandbox_cmd_in_tmp(const al_sandbox_t *sb,
                            const char *const *argv) {
  return sb != NULL && argv != NULL && argv[0] != NULL &&
         path_under(argv[0], "/tmp") && strcmp(argv[0], "/tmp") != 0 &&
         !under_any_root(sb, argv[0]);
}

static int cgroup_prefix(const al_sandbox_t *sb, char ***pre) {
  *pre = NULL;
  if (al__sandbox_mode(sb) == AL_SANDBOX_MODE_NONE || !sb->cg.active) {
    return 0;
  }
  return al__cgroup_prefix(&sb->cg, sb->helper, sb->nproc, sb->data_bytes,
                           pre);
}

/* joined: without the cgroup helper in front (a pre-joined launcher
 * runs it, or al__sandbox_cgroup_wrap adds the helper later). */
static int wrap_impl(al_sandbox_t *sb, const char *cwd, bool network,
                     const char *const *argv, bool warm, bool joined,
                     char ***out) {
  strv_t a;
  size_t i;
  int rc = 0;
  al_sandbox_mode_t mode = al__sandbox_mode(sb);

  *out = NULL;
  memset(&a, 0, sizeof(a));
  if (!joined) {
    /* First the helper that moves itself into the tool's cgroup and
     * then execs what follows (cgroup.h), where tools get one. */
    char **pre = NULL;

    rc = cgroup_prefix(sb, &pre);
    for (i = 0; rc == 0 && pre != NULL && pre[i] != NULL; i++) {
      rc = strv_push(&a, pre[i]);
    }
    al__sandbox_argv_free(pre);
  }
  if (rc == 0 && mode == AL_SANDBOX_MODE_BWRAP) {
    rc = push_bwrap_base(&a, sb->bwrap, network);
    for (i = 0; rc == 0 && i < sb->hidden.n; i++) {
      if (!under_any_root(sb, sb->hidden.v[i])) {
        rc = push_hide(&a, sb->hidden.v[i]);
      }
    }
    for (i = 0; rc == 0 && i < sb->roots.n; i++) {
      if ((rc = strv_push(&a, "--bind")) == 0 &&
          (rc = strv_push(&a, sb->roots.v[i])) == 0) {
        rc = strv_push(&a, sb->roots.v[i]);
      }
    }
    for (i = 0; rc == 0 && i < sb->hidden.n; i++) {
      if (under_any_root(sb, sb->hidden.v[i])) {
        rc = push_hide(&a, sb->hidden.v[i]);
      }
    }
    if (rc == 0 && !warm && al__sandbox_cmd_in_tmp(sb, argv) &&
        (rc = strv_push(&a, "--ro-bind")) == 0 &&
        (rc = strv_push(&a, argv[0])) == 0) {
      /* A program under /tmp (a server or tool built there, a checkout
       * there): the private /tmp would hide it; it alone, read-only. */
      rc = strv_push(&a, argv[0]);
    }
    if (warm) {
      /* The protected paths are mounted by the helper itself when its
       * command arrives (al__sandbox_protect_plan): as they are then, and
       * with placeholders that last only as long as that command. It
       * keeps these two capabilities (in the sandbox's user namespace)
       * until then and drops them, bounding set included, before exec. */
      static const char *const caps[] = {"--cap-add", "CAP_SYS_ADMIN",
                                         "--cap-add", "CAP_SETPCAP", NULL};

      for (i = 0; rc == 0 && caps[i] != NULL; i++) {
        rc = strv_push(&a, caps[i]);
      }
    } else {
      pthread_mutex_lock(&sb->lock);
      for (i = 0; rc == 0 && i < sb->protect.n; i++) {
        rc = push_protect(sb, &a, sb->protect.v[i], sb->protect_flags[i],
                          NULL);
      }
      pthread_mutex_unlock(&sb->lock);
    }
    /* Last, so neither the private /tmp, a hidden path nor a writable
     * root covers it: the helper, read-only. */
    if (rc == 0 && (rc = strv_push(&a, "--ro-bind")) == 0 &&
        (rc = strv_push(&a, sb->helper)) == 0) {
      rc = strv_push(&a, sb->helper);
    }
    if (rc == 0 && cwd != NULL && (rc = strv_push(&a, "--chdir")) == 0) {
      rc = strv_push(&a, cwd);
    }
    if (rc == 0) {
      rc = strv_push(&a, "--");
    }
    if (rc == 0) {
      rc = push_helper(sb, &a, network, false, warm);
    }
  } else if (rc == 0 && mode == AL_SANDBOX_MODE_DEGRADED) {
    rc = push_helper(sb, &a, network, true, warm);
  } else if (rc == 0 && warm) {
    rc = AL_EINVAL; /* nothing to warm without a sandbox */
  }
  for (i = 0; rc == 0 && argv != NULL && argv[i] != NULL; i++) {
    rc = strv_push(&a, argv[i]);
  }
  if (rc == 0 && a.v == NULL) {
    rc = AL_EINVAL;
  }
  if (rc != 0) {
    strv_free(&a);
    return rc;
  }
  if (sb != NULL && !warm) {
    pthread_mutex_lock(&sb->lock);
    sb->active++;
    pthread_mutex_unlock(&sb->lock);
  }
  *out = a.v;
  return 0;
}

int al__sandbox_wrap(al_sandbox_t *sb, const char *cwd, bool network,
                     const char *const *argv, char ***out) {
  return wrap_impl(sb, cwd, network, argv, false, false, out);
}

int al__sandbox_wrap_joined(al_sandbox_t *sb, const char *cwd, bool network,
                            const char *const *argv, char ***out) {
  return wrap_impl(sb, cwd, network, argv, false, true, out);
}

int al__sandbox_wrap_warm(al_sandbox_t *sb, bool network, char ***out) {
  return wrap_impl(sb, NULL, network, NULL, true, false, out);
}

int al__sandbox_cgroup_wrap(const al_sandbox_t *sb, char ***argv) {
  char **pre, **v;
  size_t np = 0, na = 0, i;
  int rc = cgroup_prefix(sb, &pre);

  if (rc != 0 || pre == NULL) {
    return rc;
  }
  while (pre[np] != NULL) {
    np++;
  }
  while ((*argv)[na] != NULL) {
    na++;
  }
  v = al_calloc(np + na + 1, sizeof(*v));
  if (v == NULL) {
    al__sandbox_argv_free(pre);
    return AL_ENOMEM;
  }
  /* The strings move: neither list is copied. */
  for (i = 0; i < np; i++) {
    v[i] = pre[i];
  }
  for (i = 0; i < na; i++) {
    v[np + i] = (*argv)[i];
  }
  al_free(pre);
  al_free(*argv);
  *argv = v;
  return 0;
}

int al__sandbox_launch_argv(const al_sandbox_t *sb, char ***out) {
  char **pre;
  size_t n = 0;
  int rc = cgroup_prefix(sb, &pre);

  *out = NULL;
  if (rc != 0) {
    return rc;
  }
  if (pre == NULL) {
    return AL_EINVAL;
  }
  while (pre[n] != NULL) {
    n++;
  }
  /* "... --" ends the prefix: the launcher waits instead of a command. */
  al_free(pre[n - 1]);
  pre[n - 1] = al_strdup("--launch");
  if (pre[n - 1] == NULL) {
    al__sandbox_argv_free(pre);
    return AL_ENOMEM;
  }
  *out = pre;
  return 0;
}

int al__sandbox_protect_plan(al_sandbox_t *sb, char ***ops, char ***need) {
  strv_t a, n;
  size_t i;
  int rc = 0;

  *ops = *need = NULL;
  memset(&a, 0, sizeof(a));
  memset(&n, 0, sizeof(n));
  /* On the threadpool: the lock (for the placeholders of sibling
   * sandboxes) may be waited for here. */
  pthread_mutex_lock(&sb->lock);
  for (i = 0; rc == 0 && i < sb->protect.n; i++) {
    rc = push_protect(sb, &a, sb->protect.v[i], sb->protect_flags[i], &n);
  }
  pthread_mutex_unlock(&sb->lock);
  if (rc == 0 && a.v == NULL) {
    rc = strv_push(&a, "--"); /* nothing to protect: a non-empty list */
  }
  if (rc == 0 && n.v == NULL) {
    n.v = al_calloc(1, sizeof(*n.v)); /* an empty list, not NULL */
    rc = n.v == NULL ? AL_ENOMEM : 0;
  }
  if (rc != 0) {
    strv_free(&a);
    strv_free(&n);
    return rc;
  }
  *ops = a.v;
  *need = n.v;
  return 0;
}

int al__sandbox_protect_claim(al_sandbox_t *sb, char *const *need) {
  char *fresh[AL_ARRAY_SIZE(AL_SANDBOX_PROTECTED) + 1];
  size_t i, n = 0;
  int rc = 0;

  /* The loop never waits here: a clean-up holding the lock on the
   * threadpool (removing placeholders) makes this start cold instead. */
  if (pthread_mutex_trylock(&sb->lock) != 0) {
    return AL_EBUSY;
  }
  for (i = 0; need[i] != NULL; i++) {
    if (!strv_has(&sb->placeholders, need[i])) {
      if (n + 1 >= AL_ARRAY_SIZE(fresh)) {
        pthread_mutex_unlock(&sb->lock);
        return AL_EBUSY; /* more than the list can need: start cold */
      }
      fresh[n++] = need[i];
    }
  }
  fresh[n] = NULL;
  /* The janitor hears of them before the helper makes them; its lock,
   * too, is only tried (a clean-up may be telling it of removals). */
  if (n > 0 && janitor_note_all('+', fresh, true) != 0) {
    pthread_mutex_unlock(&sb->lock);
    return AL_EBUSY;
  }
  for (i = 0; rc == 0 && i < n; i++) {
    rc = strv_push(&sb->placeholders, fresh[i]);
  }
  if (rc == 0) {
    sb->active++;
  }
  pthread_mutex_unlock(&sb->lock);
  return rc;
}

int al__sandbox_placeholder_try(al_sandbox_t *sb, const char *path) {
  bool has;

  if (pthread_mutex_trylock(&sb->lock) != 0) {
    return -1;
  }
  has = strv_has(&sb->placeholders, path);
  pthread_mutex_unlock(&sb->lock);
  return has ? 1 : 0;
}

void al__sandbox_each_path(const al_sandbox_t *sb,
                           void (*fn)(void *arg, const char *path,
                                      bool is_protected),
                           void *arg) {
  const strv_t *lists[3];
  size_t l, i;

  lists[0] = &sb->hidden;
  lists[1] = &sb->protect;
  lists[2] = &sb->roots;
  for (l = 0; l < 3; l++) {
    for (i = 0; i < lists[l]->n; i++) {
      fn(arg, lists[l]->v[i], l == 1);
    }
  }
}

bool al__sandbox_helper_in_roots(const al_sandbox_t *sb, char *real,
                                 size_t size) {
  char buf[PATH_MAX];

  if (sb == NULL || sb->helper == NULL || sb->helper[0] == '\0' ||
      realpath(sb->helper, buf) == NULL || !under_any_root(sb, buf)) {
    return false;
  }
  snprintf(real, size, "%s", buf);
  return true;
}

void al__sandbox_test_hold_janitor(bool hold) {
  if (hold) {
    pthread_mutex_lock(&g_janitor_lock);
  } else {
    pthread_mutex_unlock(&g_janitor_lock);
  }
}

void al__sandbox_test_hold(al_sandbox_t *sb, bool hold) {
  if (hold) {
    pthread_mutex_lock(&sb->lock);
  } else {
    pthread_mutex_unlock(&sb->lock);
  }
}

int al__sandbox_release_try(al_sandbox_t *sb) {
  int need;

  if (sb == NULL) {
    return 0;
  }
  if (pthread_mutex_trylock(&sb->lock) != 0) {
    return -1;
  }
  if (sb->active == 0) {
    pthread_mutex_unlock(&sb->lock);
    return 0;
  }
  need = --sb->active == 0 && sb->placeholders.n > 0;
  pthread_mutex_unlock(&sb->lock);
  /* The tool's cgroup goes too (al__sandbox_cleanup, off the loop),
   * before its result is delivered. */
  return need || sb->cg.active;
}

bool al__sandbox_release_deferred(al_sandbox_t *sb) {
  bool need;

  if (sb == NULL) {
    return false;
  }
  pthread_mutex_lock(&sb->lock);
  if (sb->active == 0) {
    pthread_mutex_unlock(&sb->lock);
    return false;
  }
  need = --sb->active == 0 && sb->placeholders.n > 0;
  pthread_mutex_unlock(&sb->lock);
  /* The tool's cgroup goes too (al__sandbox_cleanup, off the loop). */
  return need || sb->cg.active;
}

const al_cgroup_state_t *al__sandbox_cgroup(const al_sandbox_t *sb) {
  static const al_cgroup_state_t off;

  return sb != NULL ? &sb->cg : &off;
}

void al__sandbox_cleanup(al_sandbox_t *sb) {
  size_t i;

  (void)al__cgroup_sweep(&sb->cg);
  pthread_mutex_lock(&sb->lock);
  if (sb->active > 0) {
    /* A new child started meanwhile: its plan may use them. The last
     * one to end removes them. */
    pthread_mutex_unlock(&sb->lock);
    return;
  }
  /* No sandbox is running: the placeholders made as mount points go
   * (rmdir/unlink of an empty one only; anything else was made by
   * someone outside and stays). Under the lock, so no plan is built
   * from a placeholder about to vanish. */
  for (i = 0; i < sb->placeholders.n; i++) {
    const char *p = sb->placeholders.v[i];

    /* Not while another agent's sandbox has it mounted: removing it
     * would unmount it there; that agent removes it when it ends. */
    (void)al_phreg_release(sb->phreg, p, sb->phme);
  }
  if (sb->placeholders.v != NULL) {
    (void)janitor_note_all('-', sb->placeholders.v, false);
  }
  strv_free(&sb->placeholders);
  pthread_mutex_unlock(&sb->lock);
}

void al__sandbox_release(al_sandbox_t *sb) {
  if (al__sandbox_release_deferred(sb)) {
    al__sandbox_cleanup(sb);
  }
}
