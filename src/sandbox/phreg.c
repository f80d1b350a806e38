/* Placeholders shared between agentloop processes: see phreg.h. */
#include "sandbox/phreg.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    char comm[32];
    ssize_t k;
    size_t i;
    int fd;

    if (!isdigit((unsigned char)e->d_name[0])) {
      continue;
    }
    snprintf(p, sizeof(p), "/proc/%s/comm", e->d_name);
    fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      continue;
    }
    k = read(fd, comm, sizeof(comm) - 1);
    close(fd);
    if (k <= 0) {
      continue;
    }
    comm[k] = '\0';
    if (strcmp(comm, "bwrap\n") != 0) {
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

/* The path an entry file holds, or "" when unreadable or torn. */
static void entry_read(const char *file, char *out, size_t len) {
  ssize_t k;
  int fd;

  out[0] = '\0';
  fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return;
  }
  k = read(fd, out, len - 1);
  close(fd);
  if (k <= 1 || out[k - 1] != '\n') {
    out[0] = '\0';
    return;
  }
  out[k - 1] = '\0';
}

int al_phreg_note(const char *dir, const char *path) {
  char file[PATH_MAX];
  size_t n = strlen(path);
  int rc, fd;

  if (dir == NULL || dir[0] == '\0') {
    return EINVAL;
  }
  if ((rc = mkdirs(dir)) != 0) {
    return rc;
  }
  entry_name(dir, path, file, sizeof(file));
  fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
            0600);
  if (fd < 0) {
    return errno;
  }
  rc = 0;
  /* One write of path + newline: a concurrent noter writes the same. */
  {
    char buf[PATH_MAX + 1];

    if (n + 1 > sizeof(buf)) {
      close(fd);
      return ENAMETOOLONG;
    }
    memcpy(buf, path, n);
    buf[n] = '\n';
    if (write(fd, buf, n + 1) != (ssize_t)(n + 1)) {
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

static void forget(const char *dir, const char *path) {
  char file[PATH_MAX];
  char got[PATH_MAX + 2];

  if (dir == NULL || dir[0] == '\0') {
    return;
  }
  entry_name(dir, path, file, sizeof(file));
  entry_read(file, got, sizeof(got));
  if (strcmp(got, path) == 0) {
    (void)unlink(file);
  }
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

bool al_phreg_release(const char *dir, const char *path) {
  struct stat st;

  if (lstat(path, &st) == 0) {
    bool dir_ph = S_ISDIR(st.st_mode) && dir_empty(path);
    bool file_ph = S_ISREG(st.st_mode) && st.st_size == 0;

    if (dir_ph || file_ph) {
      if (al_phreg_mounted_elsewhere(path)) {
        return false; /* its last user removes it */
      }
      /* Only if still empty (rmdir) or still a file; anything a user put
       * there meanwhile stays. */
      (void)(dir_ph ? rmdir(path) : unlink(path));
    }
  }
  forget(dir, path);
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

    if (e->d_name[0] == '.' ||
        snprintf(file, sizeof(file), "%s/%s", dir, e->d_name) >=
            (int)sizeof(file)) {
      continue;
    }
    entry_read(file, path, sizeof(path));
    if (path[0] == '/') {
      (void)al_phreg_release(dir, path);
    }
  }
  closedir(d);
}
