/* Path policy of the file tools (SPEC §8): allowed / denied paths checked
 * on the resolved real path. See tools.h for the rules. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <uv.h>

#include "sandbox/sandbox.h"
#include "tools/tools.h"

void al__pathpolicy_init(al_pathpolicy_t *p) { memset(p, 0, sizeof(*p)); }

static void free_list(char **v, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    al_free(v[i]);
  }
  al_free(v);
}

/* The O_PATH root fds, shared by every policy of the process that names
 * the same directory (same device and inode): each file tool of each
 * agent has its own policy, so a daemon with many sessions in one
 * workspace held seven fds per session for one directory (issue 22).
 * An O_PATH fd carries no state but the directory it pins, so two opens
 * of one inode are interchangeable. Any thread (policies are set where
 * the agent is made); a mutex guards the table. An fd missing from the
 * table (its entry could not be allocated) is private and closed alone. */
typedef struct shared_fd_s {
  struct shared_fd_s *next;
  dev_t dev;
  ino_t ino;
  int fd;
  size_t refs;
} shared_fd_t;

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_fd_t *shared_fds;

static int root_fd_open(const char *path) {
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  shared_fd_t *e;

  if (fd < 0 || fstat(fd, &st) != 0) {
    return fd;
  }
  pthread_mutex_lock(&shared_mu);
  for (e = shared_fds; e != NULL; e = e->next) {
    if (e->dev == st.st_dev && e->ino == st.st_ino) {
      e->refs++;
      close(fd);
      fd = e->fd;
      break;
    }
  }
  if (e == NULL && (e = al_malloc(sizeof(*e))) != NULL) {
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    e->fd = fd;
    e->refs = 1;
    e->next = shared_fds;
    shared_fds = e;
  }
  pthread_mutex_unlock(&shared_mu);
  return fd;
}

static void root_fd_close(int fd) {
  shared_fd_t **pp;

  pthread_mutex_lock(&shared_mu);
  for (pp = &shared_fds; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->fd == fd) {
      shared_fd_t *e = *pp;

      if (--e->refs > 0) {
        fd = -1; /* still in use by another policy */
      } else {
        *pp = e->next;
        al_free(e);
      }
      break;
    }
  }
  pthread_mutex_unlock(&shared_mu);
  if (fd >= 0) {
    close(fd);
  }
}

void al__pathpolicy_free(al_pathpolicy_t *p) {
  size_t i;

  for (i = 0; p->root_fds != NULL && i < p->n_allowed; i++) {
    if (p->root_fds[i] >= 0) {
      root_fd_close(p->root_fds[i]);
    }
  }
  al_free(p->root_fds);
  al_free(p->root);
  free_list(p->allowed, p->n_allowed);
  free_list(p->denied, p->n_denied);
  al__pathpolicy_init(p);
}

char *al__path_normalize(const char *abs) {
  size_t n = strlen(abs);
  char *out = al_malloc(n + 2);
  size_t len = 0;
  const char *s = abs;

  if (out == NULL) {
    return NULL;
  }
  while (*s != '\0') {
    const char *e;
    size_t cl;

    while (*s == '/') {
      s++;
    }
    e = s;
    while (*e != '\0' && *e != '/') {
      e++;
    }
    cl = (size_t)(e - s);
    if (cl == 0 || (cl == 1 && s[0] == '.')) {
      /* nothing */
    } else if (cl == 2 && s[0] == '.' && s[1] == '.') {
      while (len > 0 && out[len - 1] != '/') {
        len--;
      }
      if (len > 0) {
        len--; /* the slash */
      }
    } else {
      out[len++] = '/';
      memcpy(out + len, s, cl);
      len += cl;
    }
    s = e;
  }
  if (len == 0) {
    out[len++] = '/';
  }
  out[len] = '\0';
  return out;
}

/* base + "/" + rel (or rel when it is absolute); al_malloc'd. */
static char *join(const char *base, const char *rel) {
  size_t bl = strlen(base);
  size_t rl = strlen(rel);
  char *s;

  if (rel[0] == '/') {
    return al_strdup(rel);
  }
  s = al_malloc(bl + rl + 2);
  if (s != NULL) {
    memcpy(s, base, bl);
    s[bl] = '/';
    memcpy(s + bl + 1, rel, rl + 1);
  }
  return s;
}

/* A rule as configured -> absolute, resolved when it exists. */
static char *rule_path(const char *root, const char *rule) {
  char *abs;
  char *norm;
  char *real;
  const char *home = getenv("HOME");

  if (rule[0] == '~' && (rule[1] == '\0' || rule[1] == '/') &&
      home != NULL && home[0] == '/') {
    abs = join(home, rule[1] == '\0' ? "." : rule + 2);
  } else {
    abs = join(root, rule);
  }
  if (abs == NULL) {
    return NULL;
  }
  norm = al__path_normalize(abs);
  al_free(abs);
  if (norm == NULL) {
    return NULL;
  }
  real = realpath(norm, NULL);
  if (real != NULL) {
    al_free(norm);
    norm = al_strdup(real);
    free(real);
  }
  return norm;
}

static int set_list(char ***out, size_t *n_out, const char *root,
                    const char *const *rules, size_t n) {
  size_t i;

  *out = NULL;
  *n_out = 0;
  if (n == 0) {
    return 0;
  }
  *out = al_calloc(n, sizeof(**out));
  if (*out == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    if (rules[i] == NULL || rules[i][0] == '\0') {
      return AL_EINVAL;
    }
    (*out)[i] = rule_path(root, rules[i]);
    if ((*out)[i] == NULL) {
      return AL_ENOMEM;
    }
    (*n_out)++;
  }
  return 0;
}

int al__pathpolicy_set(al_pathpolicy_t *p, const char *root,
                       const char *const *allowed, size_t n_allowed,
                       const char *const *denied, size_t n_denied) {
  char *real;
  const char *def[1];
  int rc;
  uv_fs_t req;

  al__pathpolicy_free(p);
  if (root == NULL || root[0] != '/') {
    return AL_EINVAL;
  }
  real = realpath(root, NULL);
  if (real == NULL) {
    return errno == ENOMEM ? AL_ENOMEM : AL_EINVAL;
  }
  rc = uv_fs_stat(NULL, &req, real, NULL);
  if (rc != 0 || !S_ISDIR(req.statbuf.st_mode)) {
    uv_fs_req_cleanup(&req);
    free(real);
    return AL_EINVAL;
  }
  uv_fs_req_cleanup(&req);
  p->root = al_strdup(real);
  free(real);
  if (p->root == NULL) {
    return AL_ENOMEM;
  }
  if (allowed == NULL || n_allowed == 0) {
    def[0] = p->root;
    allowed = def;
    n_allowed = 1;
  }
  rc = set_list(&p->allowed, &p->n_allowed, p->root, allowed, n_allowed);
  if (rc == 0) {
    rc = set_list(&p->denied, &p->n_denied, p->root, denied,
                  denied == NULL ? 0 : n_denied);
  }
  if (rc == 0) {
    size_t i;

    p->root_fds = al_calloc(p->n_allowed ? p->n_allowed : 1,
                            sizeof(*p->root_fds));
    if (p->root_fds == NULL) {
      rc = AL_ENOMEM;
    }
    for (i = 0; rc == 0 && i < p->n_allowed; i++) {
      p->root_fds[i] = root_fd_open(p->allowed[i]);
    }
  }
  if (rc != 0) {
    al__pathpolicy_free(p);
  }
  return rc;
}

/* ---- openat2 ------------------------------------------------------------- */

static bool covers(const char *rule, const char *path);

bool al__pathpolicy_is_protected(const al_pathpolicy_t *p, const char *real) {
  char buf[PATH_MAX];
  size_t i, j;

  for (i = 0; i < p->n_allowed; i++) {
    for (j = 0; j < AL_SANDBOX_N_PROTECTED; j++) {
      snprintf(buf, sizeof(buf), "%s/%s",
               strcmp(p->allowed[i], "/") == 0 ? "" : p->allowed[i],
               AL_SANDBOX_PROTECTED[j].rel);
      if (covers(buf, real)) {
        return true;
      }
    }
  }
  return false;
}

static int beneath(int dirfd, const char *rel, int flags, int mode) {
  struct open_how how;
  long fd;

  memset(&how, 0, sizeof(how));
  how.flags = (uint64_t)(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? (uint64_t)mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  do {
    fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
  } while (fd < 0 && errno == EAGAIN);
  return fd < 0 ? -errno : (int)fd;
}

int al__pathpolicy_open(const al_pathpolicy_t *p, const char *real,
                        int flags, int mode, al_buf_t *err) {
  size_t best = (size_t)-1;
  size_t best_len = 0;
  const char *rel;
  char linkp[64];
  char got[PATH_MAX];
  ssize_t n;
  size_t i;
  int fd;
  bool writing;

  for (i = 0; i < p->n_allowed; i++) {
    size_t l = strlen(p->allowed[i]);

    if (p->root_fds[i] >= 0 && covers(p->allowed[i], real) &&
        (best == (size_t)-1 || l > best_len)) {
      best = i;
      best_len = l;
    }
  }
  if (best == (size_t)-1) {
    al_buf_printf(err, "'%s' is outside the allowed paths", real);
    return UV_EACCES;
  }
  /* Any open for writing (edit_file opens O_RDWR without O_CREAT) gets
   * the writer's rules: protected paths refused, last component never
   * followed. */
  writing = (flags & O_CREAT) || (flags & O_ACCMODE) != O_RDONLY;
  if (writing && al__pathpolicy_is_protected(p, real)) {
    al_buf_printf(err,
                  "'%s' is a protected path (tools.d, .agentloop, "
                  ".git/hooks, .git/config and shell rc files cannot be "
                  "written by tools)",
                  real);
    return UV_EACCES;
  }
  rel = real + best_len;
  while (*rel == '/') {
    rel++;
  }
  if (*rel == '\0') {
    rel = ".";
  }
  if (flags & O_CREAT) {
    /* Parents first, each made under a beneath-resolved directory. */
    char tmp[PATH_MAX];
    char *s;

    snprintf(tmp, sizeof(tmp), "%s", rel);
    for (s = strchr(tmp, '/'); s != NULL; s = strchr(s + 1, '/')) {
      char *name;
      int dfd;

      *s = '\0';
      name = strrchr(tmp, '/');
      if (name == NULL) {
        dfd = dup(p->root_fds[best]);
        dfd = dfd < 0 ? -errno : dfd;
        name = tmp;
      } else {
        *name = '\0';
        dfd = beneath(p->root_fds[best], tmp, O_PATH | O_DIRECTORY, 0);
        *name = '/';
        name++;
      }
      if (dfd < 0) {
        al_buf_printf(err, "cannot create the directories of '%s': %s",
                      real, strerror(-dfd));
        return dfd == -EXDEV ? UV_EACCES : dfd;
      }
      if (mkdirat(dfd, name, 0755) != 0 && errno != EEXIST) {
        int e = errno;

        close(dfd);
        al_buf_printf(err, "cannot create the directories of '%s': %s",
                      real, strerror(e));
        return -e;
      }
      close(dfd);
      *s = '/';
    }
  }
  if (writing) {
    flags |= O_NOFOLLOW;
  }
  fd = beneath(p->root_fds[best], rel, flags, mode);
  if (fd < 0) {
    if (fd == -EXDEV || fd == -ELOOP) {
      al_buf_printf(err,
                    "'%s' resolves outside its allowed root (a symlink or "
                    "'..' that leaves it)",
                    real);
      return fd == -ELOOP && writing ? UV_ELOOP : UV_EACCES;
    }
    al_buf_printf(err, "cannot open '%s': %s", real, strerror(-fd));
    return fd;
  }
  /* What was opened, really: denied paths win even when a swap inside the
   * root led here. */
  snprintf(linkp, sizeof(linkp), "/proc/self/fd/%d", fd);
  n = readlink(linkp, got, sizeof(got) - 1);
  if (n > 0) {
    got[n] = '\0';
    if (al__pathpolicy_check(p, got, err) != 0) {
      close(fd);
      return UV_EACCES;
    }
  }
  return fd;
}

static bool covers(const char *rule, const char *path) {
  size_t n = strlen(rule);

  if (n == 1 && rule[0] == '/') {
    return true;
  }
  return strncmp(rule, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int al__pathpolicy_check(const al_pathpolicy_t *p, const char *real,
                         al_buf_t *why) {
  size_t i;

  for (i = 0; i < p->n_denied; i++) {
    if (covers(p->denied[i], real)) {
      if (why != NULL) {
        al_buf_printf(why,
                      "permission denied: '%s' is inside denied path '%s' "
                      "(denied_paths wins over allowed_paths)",
                      real, p->denied[i]);
      }
      return UV_EACCES;
    }
  }
  for (i = 0; i < p->n_allowed; i++) {
    if (covers(p->allowed[i], real)) {
      return 0;
    }
  }
  if (why != NULL) {
    al_buf_printf(why,
                  "permission denied: '%s' is outside the allowed paths (",
                  real);
    for (i = 0; i < p->n_allowed; i++) {
      al_buf_printf(why, "%s'%s'", i ? ", " : "", p->allowed[i]);
    }
    al_buf_append_str(why, ")");
  }
  return UV_EACCES;
}

static int errno_code(int e) { return e > 0 ? -e : UV_EIO; }

/* Says how a path that resolved elsewhere got there. */
static void explain(al_buf_t *err, const char *given, const char *lexical,
                    const char *real) {
  if (strcmp(lexical, real) != 0) {
    al_buf_printf(err, " ('%s' resolves to '%s' through a symlink)", given,
                  real);
  } else if (strstr(given, "..") != NULL) {
    al_buf_printf(err, " ('%s' escapes through '..')", given);
  }
}

int al__pathpolicy_resolve(const al_pathpolicy_t *p, const char *path,
                           al_path_mode_t mode, al_path_t *out,
                           al_buf_t *err) {
  char *abs = NULL;
  char *lex = NULL;
  char *dir = NULL;
  char *real = NULL;
  char *cand = NULL;
  const char *base;
  size_t plen;
  int rc;

  out->real = NULL;
  out->has_missing = false;
  out->missing_from = 0;
  plen = path == NULL ? 0 : strlen(path);
  if (plen == 0) {
    al_buf_append_str(err, "'path' must not be empty");
    return UV_EINVAL;
  }
  abs = join(p->root, path);
  lex = abs == NULL ? NULL : al__path_normalize(abs);
  if (lex == NULL) {
    rc = AL_ENOMEM;
    goto out_free;
  }
  if (mode == AL_PATH_EXISTING) {
    real = realpath(abs, NULL);
    if (real != NULL) {
      rc = al__pathpolicy_check(p, real, err);
      if (rc == 0) {
        out->real = al_strdup(real);
        rc = out->real == NULL ? AL_ENOMEM : 0;
      } else {
        explain(err, path, lex, real);
      }
      goto out_free;
    }
    if (errno != ENOENT && errno != ENOTDIR) {
      rc = errno_code(errno);
      al_buf_printf(err, "cannot resolve '%s': %s", path, uv_strerror(rc));
      goto out_free;
    }
    /* Does not exist: say so only if the place is allowed at all. */
  } else if (path[plen - 1] == '/' || strcmp(lex, "/") == 0) {
    al_buf_printf(err, "'%s' names a directory, not a file", path);
    rc = UV_EINVAL;
    goto out_free;
  } else {
    base = strrchr(abs, '/') + 1;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
      al_buf_printf(err, "'%s' names a directory, not a file", path);
      rc = UV_EINVAL;
      goto out_free;
    }
  }

  /* The nearest existing ancestor, resolved, plus the missing rest. */
  {
    size_t dl;
    size_t cut;
    size_t rl;
    size_t tail_len;
    const char *tail;

    dir = al_strdup(abs);
    if (dir == NULL) {
      rc = AL_ENOMEM;
      goto out_free;
    }
    dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') {
      dir[--dl] = '\0';
    }
    cut = (size_t)(strrchr(dir, '/') - dir); /* parent of the final name */
    for (;;) {
      char save = dir[cut];

      dir[cut] = '\0';
      real = realpath(cut == 0 ? "/" : dir, NULL);
      dir[cut] = save;
      if (real != NULL) {
        break;
      }
      if (errno != ENOENT) {
        rc = errno_code(errno);
        al_buf_printf(err, "cannot resolve '%s': %s", path, uv_strerror(rc));
        goto out_free;
      }
      while (cut > 0 && dir[cut - 1] != '/') {
        cut--;
      }
      while (cut > 0 && dir[cut - 1] == '/') {
        cut--;
      }
    }
    tail = dir + cut; /* "/missing/.../name" */
    tail_len = strlen(tail);
    if (strstr(tail, "/../") != NULL || strstr(tail, "/./") != NULL ||
        (tail_len >= 3 && strcmp(tail + tail_len - 3, "/..") == 0)) {
      if (mode == AL_PATH_EXISTING) {
        al_buf_printf(err, "not found: '%s'", path);
        rc = UV_ENOENT;
      } else {
        al_buf_printf(err,
                      "'%s' has '.' or '..' after a directory that does "
                      "not exist",
                      path);
        rc = UV_EINVAL;
      }
      goto out_free;
    }
    rl = strcmp(real, "/") == 0 ? 0 : strlen(real);
    cand = al_malloc(rl + tail_len + 1);
    if (cand == NULL) {
      rc = AL_ENOMEM;
      goto out_free;
    }
    memcpy(cand, real, rl);
    memcpy(cand + rl, tail, tail_len + 1);
    /* Collapse "//" runs in the tail. */
    {
      char *norm = al__path_normalize(cand);

      if (norm == NULL) {
        rc = AL_ENOMEM;
        goto out_free;
      }
      al_free(cand);
      cand = norm;
    }
    rc = al__pathpolicy_check(p, cand, err);
    if (rc != 0) {
      explain(err, path, lex, cand);
      goto out_free;
    }
    if (mode == AL_PATH_EXISTING) {
      al_buf_printf(err, "not found: '%s'", path);
      rc = UV_ENOENT;
      goto out_free;
    }
    /* Where the missing directories begin, if any. */
    {
      const char *last = strrchr(cand, '/');

      if ((size_t)(last - cand) > rl) {
        out->has_missing = true;
        out->missing_from = rl;
      }
    }
    out->real = cand;
    cand = NULL;
    rc = 0;
  }

out_free:
  if (rc == AL_ENOMEM) {
    al_buf_reset(err);
    al_buf_append_str(err, "out of memory");
  }
  free(real);
  al_free(cand);
  al_free(dir);
  al_free(lex);
  al_free(abs);
  return rc;
}
