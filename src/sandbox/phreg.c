/* Placeholders shared between agentloop processes: see phreg.h. */
#include "sandbox/phreg.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NS 256

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s) {
  char *d = s;

  while (*s != '\0') {
    if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' &&
        s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
      *d++ = (char)(((s[1] - '0') << 6) | ((s[2] - '0') << 3) | (s[3] - '0'));
      s += 4;
    } else {
      *d++ = *s++;
    }
  }
  *d = '\0';
}

/* Does /proc/<pid>/mountinfo name `path` as a mount point? */
static bool ns_has_mount(const char *pid, const char *path) {
  char p[300];
  char *line = NULL;
  size_t cap = 0;
  bool hit = false;
  FILE *f;

  snprintf(p, sizeof(p), "/proc/%s/mountinfo", pid);
  f = fopen(p, "re");
  if (f == NULL) {
    return false; /* gone meanwhile */
  }
  while (!hit && getline(&line, &cap, f) > 0) {
    /* id parent major:minor root MOUNT-POINT ... */
    char *field = line;
    int i;

    for (i = 0; i < 4 && field != NULL; i++) {
      field = strchr(field, ' ');
      field = field != NULL ? field + 1 : NULL;
    }
    if (field != NULL) {
      char *end = strchr(field, ' ');

      if (end != NULL) {
        *end = '\0';
        unescape(field);
        hit = strcmp(field, path) == 0;
      }
    }
  }
  free(line);
  fclose(f);
  return hit;
}

bool al_phreg_is_bwrap(const char *pid) {
  char p[300];
  char comm[32];
  ssize_t k;
  int fd;

  snprintf(p, sizeof(p), "/proc/%s/comm", pid);
  fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false; /* gone meanwhile */
  }
  k = read(fd, comm, sizeof(comm));
  close(fd);
  return k == 6 && memcmp(comm, "bwrap\n", 6) == 0;
}

bool al_phreg_mounted_elsewhere(const char *path) {
  struct stat self, st;
  ino_t seen[MAX_NS];
  size_t n_seen = 0;
  struct dirent *e;
  bool hit = false;
  DIR *d;

  if (stat("/proc/self/ns/mnt", &self) != 0) {
    return false;
  }
  d = opendir("/proc");
  if (d == NULL) {
    return false;
  }
  /* Every bwrap sandbox has a process named bwrap in its mount
   * namespace (its init, or the process before exec), for as long as the
   * sandbox exists: those are the namespaces a placeholder is mounted in. */
  while (!hit && (e = readdir(d)) != NULL) {
    char p[300];
    size_t i;

    if (!isdigit((unsigned char)e->d_name[0]) ||
        !al_phreg_is_bwrap(e->d_name)) {
      continue;
    }
    snprintf(p, sizeof(p), "/proc/%s/ns/mnt", e->d_name);
    if (stat(p, &st) != 0 || st.st_ino == self.st_ino) {
      continue;
    }
    for (i = 0; i < n_seen && seen[i] != st.st_ino; i++) {
    }
    if (i < n_seen) {
      continue;
    }
    if (n_seen < MAX_NS) {
      seen[n_seen++] = st.st_ino;
    }
    hit = ns_has_mount(e->d_name, path);
  }
  closedir(d);
  return hit;
}

/* The entry's file: a hash of the path names it; its content is the path
 * (a hash that collides is seen by the content and treated as unknown). */
static void entry_name(const char *dir, const char *path, char *out,
                       size_t len) {
  uint64_t h = 1469598103934665603ULL;
  const unsigned char *s;

  for (s = (const unsigned char *)path; *s != '\0'; s++) {
    h = (h ^ *s) * 1099511628211ULL;
  }
  snprintf(out, len, "%s/%016llx", dir, (unsigned long long)h);
}

static int mkdirs(const char *dir) {
  char buf[PATH_MAX];
  char *s;

  if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf)) {
    return ENAMETOOLONG;
  }
  for (s = buf + 1; *s != '\0'; s++) {
    if (*s == '/') {
      *s = '\0';
      if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
        return errno;
      }
      *s = '/';
    }
  }
  if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
    return errno;
  }
  return 0;
}

/* An entry's text: the path on its first line, then one line per noter
 * ("PID ID"). Whole lines only; "" when unreadable. */
static void entry_text(int fd, char *out, size_t len) {
  ssize_t k;
  size_t n = 0;

  while (n + 1 < len && (k = pread(fd, out + n, len - 1 - n, (off_t)n)) > 0) {
    n += (size_t)k;
  }
  while (n > 0 && out[n - 1] != '\n') {
    n--; /* a torn last line */
  }
  out[n] = '\0';
}

/* The path an entry file holds, or "" when unreadable or torn. */
static void entry_read(const char *file, char *out, size_t len) {
  char *nl;
  int fd;

  out[0] = '\0';
  fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return;
  }
  entry_text(fd, out, len);
  close(fd);
  nl = strchr(out, '\n');
  if (nl == NULL) {
    out[0] = '\0';
    return;
  }
  *nl = '\0';
}

/* A zombie is gone: an agent SIGKILLed whose parent has not reaped it
 * (a container's init that reaps nothing, a supervisor that waits later)
 * still answers kill(0), and was taken for a live noter by its janitor,
 * the next agent's sweep and every sweep after: its placeholder stayed
 * through a daemon restart and stop. */
static bool pid_alive(long pid) {
  char p[64];
  char buf[512];
  const char *rp;
  ssize_t n;
  int fd;

  if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM)) {
    return false;
  }
  snprintf(p, sizeof(p), "/proc/%ld/stat", pid);
  fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno != ENOENT; /* gone meanwhile; else cannot tell: alive */
  }
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return true;
  }
  buf[n] = '\0';
  /* "pid (comm) S ...": comm may hold spaces and parentheses. */
  rp = strrchr(buf, ')');
  return rp == NULL || rp[1] != ' ' || (rp[2] != 'Z' && rp[2] != 'X');
}

/* Is a live noter other than `me` (NULL: any) on the entry's lines after
 * the first? */
static bool other_noter(const char *text, const char *me) {
  const char *line = strchr(text, '\n');
  size_t m = me != NULL ? strlen(me) : 0;

  while (line != NULL && line[1] != '\0') {
    const char *end = strchr(line + 1, '\n');
    size_t n = end != NULL ? (size_t)(end - line - 1) : strlen(line + 1);

    if ((me == NULL || n != m || strncmp(line + 1, me, n) != 0) &&
        pid_alive(strtol(line + 1, NULL, 10))) {
      return true;
    }
    line = end;
  }
  return false;
}

/* Rewrites the entry without its dead noters' lines; the entry goes when
 * no live noter is left. Unchanged when every noter lives. Under the
 * entry's lock. */
static void entry_prune(const char *file, int fd, const char *text) {
  char out[8192];
  const char *line = strchr(text, '\n');
  size_t n;
  bool any = false;
  bool dead = false;

  n = (size_t)(line - text) + 1;
  memcpy(out, text, n);
  while (line != NULL && line[1] != '\0') {
    const char *end = strchr(line + 1, '\n');
    size_t k = end != NULL ? (size_t)(end - line - 1) : strlen(line + 1);
    if (pid_alive(strtol(line + 1, NULL, 10)) && n + k + 1 < sizeof(out)) {
      memcpy(out + n, line + 1, k + 1);
      n += k + 1;
      any = true;
    } else {
      dead = true;
    }
    line = end;
  }
  if (!dead && any) {
    return;
  }
  /* Shortened in place, never truncated to 0 first: ext4 flushes a file
   * at close after that (auto_da_alloc), a millisecond here. */
  if (!any) {
    (void)unlink(file);
  } else if (pwrite(fd, out, n, 0) == (ssize_t)n) {
    (void)!ftruncate(fd, (off_t)n);
  }
}

/* Opens and locks (exclusively, briefly: readers and writers of one
 * entry are agents' threadpools and janitors) the entry of `path`; the
 * same file as the name still names, or retried. -1 when it cannot. */
static int entry_lock(const char *file, bool create) {
  int tries;

  for (tries = 0; tries < 8; tries++) {
    struct stat a, b;
    int fd = open(file,
                  (create ? O_RDWR | O_CREAT : O_RDWR) | O_CLOEXEC | O_NOFOLLOW,
                  0600);

    if (fd < 0) {
      return -1;
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    /* Unlinked by its last noter meanwhile: take the new one. */
    if (fstat(fd, &a) == 0 && stat(file, &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev) {
      return fd;
    }
    close(fd);
  }
  return -1;
}

int al_phreg_note(const char *dir, const char *path, const char *me) {
  char file[PATH_MAX];
  char text[8192];
  char line[64];
  size_t n = strlen(path);
  int rc, fd;

  if (dir == NULL || dir[0] == '\0' || me == NULL) {
    return EINVAL;
  }
  if (n + 2 > PATH_MAX) {
    return ENAMETOOLONG;
  }
  if ((rc = mkdirs(dir)) != 0) {
    return rc;
  }
  entry_name(dir, path, file, sizeof(file));
  if ((fd = entry_lock(file, true)) < 0) {
    return errno != 0 ? errno : EIO;
  }
  entry_text(fd, text, sizeof(text));
  if (text[0] == '\0' || strncmp(text, path, n) != 0 || text[n] != '\n') {
    /* New (or a colliding path's: the newer one has it; written over,
     * then cut, for the reason in entry_prune). */
    if (pwrite(fd, path, n, 0) != (ssize_t)n ||
        pwrite(fd, "\n", 1, (off_t)n) != 1 ||
        ftruncate(fd, (off_t)n + 1) != 0) {
      rc = errno != 0 ? errno : EIO;
    }
    text[0] = '\0';
  }
  snprintf(line, sizeof(line), "\n%s\n", me);
  if (rc == 0 && strstr(text, line) == NULL) {
    struct stat st;

    if (fstat(fd, &st) != 0 ||
        pwrite(fd, line + 1, strlen(line + 1), st.st_size) !=
            (ssize_t)strlen(line + 1)) {
      rc = errno != 0 ? errno : EIO;
    }
  }
  close(fd);
  return rc;
}

bool al_phreg_known(const char *dir, const char *path) {
  char file[PATH_MAX];
  char got[PATH_MAX + 2];

  if (dir == NULL || dir[0] == '\0') {
    return false;
  }
  entry_name(dir, path, file, sizeof(file));
  entry_read(file, got, sizeof(got));
  return strcmp(got, path) == 0;
}

static bool dir_empty(const char *path) {
  struct dirent *e;
  bool empty = true;
  DIR *d = opendir(path);

  if (d == NULL) {
    return false;
  }
  while (empty && (e = readdir(d)) != NULL) {
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  }
  closedir(d);
  return empty;
}

bool al_phreg_empty(const char *path, const struct stat *st) {
  /* A directory with subdirectories (a link count over 2, where the file
   * system counts them) holds something without a look inside. */
  return (S_ISDIR(st->st_mode) && st->st_nlink <= 2 && dir_empty(path)) ||
         (S_ISREG(st->st_mode) && st->st_size == 0);
}

bool al_phreg_release(const char *dir, const char *path, const char *me) {
  char file[PATH_MAX];
  char text[8192];
  struct stat st;
  int fd = -1;

  text[0] = '\0';
  if (dir != NULL && dir[0] != '\0') {
    entry_name(dir, path, file, sizeof(file));
    fd = entry_lock(file, false);
    if (fd >= 0) {
      size_t n = strlen(path);

      entry_text(fd, text, sizeof(text));
      if (strncmp(text, path, n) != 0 || text[n] != '\n') {
        close(fd); /* another path's (a hash collision) */
        fd = -1;
        text[0] = '\0';
      }
    }
  }
  if (me == NULL && fd >= 0 && other_noter(text, NULL)) {
    /* The janitor or a sweep, and a live agent noted it: that agent may
     * be making it right now (bwrap's mkdir comes before its mount, so
     * the mount tables cannot tell yet), and removes it itself. */
    close(fd);
    return false;
  }
  if (lstat(path, &st) == 0 && al_phreg_empty(path, &st)) {
    /* Only when another agent (or another sandbox of ours) has noted it
     * are the mount tables read: alone, nobody else can have it mounted,
     * and the common case costs nothing. */
    if ((me == NULL || fd < 0 || other_noter(text, me)) &&
        al_phreg_mounted_elsewhere(path)) {
      if (fd >= 0) {
        close(fd);
      }
      return false; /* its last user removes it */
    }
    /* Only if still empty (rmdir) or still a file; anything a user put
     * there meanwhile stays. */
    (void)(S_ISDIR(st.st_mode) ? rmdir(path) : unlink(path));
  }
  /* A noter stays one for its life (its plans made ahead name the same
   * placeholders again): only the janitor and the sweep (me NULL) take
   * the lines of agents that are gone, and the entry with the last. */
  if (fd >= 0) {
    if (me == NULL) {
      entry_prune(file, fd, text);
    }
    close(fd);
  }
  return true;
}

void al_phreg_sweep(const char *dir) {
  struct dirent *e;
  DIR *d;

  if (dir == NULL || dir[0] == '\0' || (d = opendir(dir)) == NULL) {
    return;
  }
  while ((e = readdir(d)) != NULL) {
    char file[PATH_MAX];
    char path[PATH_MAX + 2];

    if (e->d_name[0] == '.' || snprintf(file, sizeof(file), "%s/%s", dir,
                                        e->d_name) >= (int)sizeof(file)) {
      continue;
    }
    entry_read(file, path, sizeof(path));
    if (path[0] == '/') {
      (void)al_phreg_release(dir, path, NULL);
    }
  }
  closedir(d);
}
