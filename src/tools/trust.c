/* Project trust, bound to the content of the files that can run code or
 * change the policy (issue 22, point 8).
 *
 * What a project can bring: tools.d/ (tool files naming commands, and the
 * scripts they run), .agentloop/ (config.yaml: hooks, MCP servers, model,
 * permissions; and whatever scripts its hooks run), .mcp.json (server
 * commands) and .claude/agents/ (agent definitions: prompts and tool
 * lists, src/config/agentdefs.c). The manifest lists every file below
 * tools.d/, .agentloop/ and .claude/agents/ and .mcp.json itself, in name
 * order, one "SHA256 PATH" line each (a symlink hashed by its target's
 * text, anything else that is not a regular file by its type); the
 * project's hash is the SHA-256 of that text. Directories count only through their files, so an empty tools.d/
 * changes nothing.
 *
 * `agentloop tools --trust-project` records "sha256:HASH REALPATH" in
 * <config dir>/trusted-projects and the manifest itself in
 * <config dir>/trusted-projects.d/<SHA-256 of REALPATH>, so a later check
 * can say which files were added, removed or modified. The project is
 * trusted only while its hash is the recorded one: a file added or
 * changed since (by a git pull, or by a tool during a run: tools.d/ and
 * .agentloop/ get no placeholder in the sandbox any more) withholds the
 * whole set until the user approves it again. The whole set, not the
 * files that did not change: they refer to each other (a hook runs a
 * script beside it), and a part of a set is not what the user approved.
 * A line with the path alone (written before trust was bound to content)
 * is "trusted, hash unknown": not trusted, and the check lists the files
 * to approve.
 *
 * Everything here is blocking file I/O: start-up work of the CLI, or the
 * agent's creation, as the tools.d loader is. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "tools/clitool.h"

/* Bounds on what is hashed: a project over them is not trusted (said so,
 * rather than hash for long: a daemon creates its agents, and with them
 * checks trust, on its loop, as it reads tools.d). */
#define TRUST_MAX_FILES AL_TRUST_MAX_FILES
#define TRUST_MAX_DEPTH AL_TRUST_MAX_DEPTH
#define TRUST_MAX_BYTES ((uint64_t)AL_TRUST_MAX_MIB << 20)
#define TRUST_MANIFEST_MAX ((size_t)TRUST_MAX_FILES * (PATH_MAX + 80))
#define TRUST_RECORDS_MAX ((size_t)16 << 20)

/* .claude/agents last: a project without it keeps the hash it had. */
static const char *const k_bound[] = {"tools.d", ".agentloop", ".mcp.json",
                                      ".claude/agents", NULL};

typedef struct walk_s {
  al_buf_t *m;
  const char *ws;
  size_t files;
  uint64_t bytes;
  int err; /* 0, or a negative errno-style code */
} walk_t;

static void hexify(const unsigned char *d, size_t n, char *out) {
  static const char k_hex[] = "0123456789abcdef";
  size_t i;

  for (i = 0; i < n; i++) {
    out[2 * i] = k_hex[d[i] >> 4];
    out[2 * i + 1] = k_hex[d[i] & 15];
  }
  out[2 * n] = '\0';
}

static void sha_hex(const void *p, size_t n, char out[65]) {
  unsigned char d[32];

  mbedtls_sha256_ret(p, n, d, 0);
  hexify(d, sizeof(d), out);
}

static int hash_fd(walk_t *w, int fd, char out[65]) {
  mbedtls_sha256_context c;
  unsigned char d[32];
  char buf[65536];
  ssize_t r;
  int rc = 0;

  mbedtls_sha256_init(&c);
  mbedtls_sha256_starts_ret(&c, 0);
  for (;;) {
    r = read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      rc = -errno;
      break;
    }
    if (r == 0) {
      break;
    }
    w->bytes += (uint64_t)r;
    if (w->bytes > TRUST_MAX_BYTES) {
      rc = AL_ETOOBIG;
      break;
    }
    mbedtls_sha256_update_ret(&c, (const unsigned char *)buf, (size_t)r);
  }
  mbedtls_sha256_finish_ret(&c, d);
  mbedtls_sha256_free(&c);
  hexify(d, sizeof(d), out);
  return rc;
}

/* "HASH PATH\n", with '\\' and a newline in the path escaped so one line
 * is one file. */
static void add_line(walk_t *w, const char *hash, const char *rel) {
  const char *p;

  if (al_buf_printf(w->m, "%s ", hash) != 0) {
    w->err = AL_ENOMEM;
    return;
  }
  for (p = rel; *p != '\0' && w->err == 0; p++) {
    if ((*p == '\\' && al_buf_append_str(w->m, "\\\\") != 0) ||
        (*p == '\n' && al_buf_append_str(w->m, "\\n") != 0) ||
        (*p != '\\' && *p != '\n' && al_buf_append(w->m, p, 1) != 0)) {
      w->err = AL_ENOMEM;
    }
  }
  if (w->err == 0 && al_buf_append_str(w->m, "\n") != 0) {
    w->err = AL_ENOMEM;
  }
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void walk(walk_t *w, const char *rel, int depth) {
  char full[PATH_MAX];
  char hash[65];
  struct stat st;

  if (w->err != 0) {
    return;
  }
  if (snprintf(full, sizeof(full), "%s/%s", w->ws, rel) >= (int)sizeof(full)) {
    w->err = AL_ETOOBIG;
    return;
  }
  if (lstat(full, &st) != 0) {
    if (errno != ENOENT) {
      w->err = -errno;
    }
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    DIR *d;
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, i;

    if (depth >= TRUST_MAX_DEPTH) {
      w->err = AL_ETOOBIG;
      return;
    }
    if ((d = opendir(full)) == NULL) {
      w->err = -errno;
      return;
    }
    while ((de = readdir(d)) != NULL) {
      char **nv;

      if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
        continue;
      }
      if (n >= TRUST_MAX_FILES) {
        w->err = AL_ETOOBIG;
        break;
      }
      nv = al_realloc(names, (n + 1) * sizeof(*nv));
      if (nv == NULL || (nv[n] = al_strdup(de->d_name)) == NULL) {
        names = nv != NULL ? nv : names;
        w->err = AL_ENOMEM;
        break;
      }
      names = nv;
      n++;
    }
    closedir(d);
    if (n > 1) {
      qsort(names, n, sizeof(*names), cmp_name);
    }
    for (i = 0; i < n; i++) {
      char sub[PATH_MAX];

      if (w->err == 0) {
        if (snprintf(sub, sizeof(sub), "%s/%s", rel, names[i]) >=
            (int)sizeof(sub)) {
          w->err = AL_ETOOBIG;
        } else {
          walk(w, sub, depth + 1);
        }
      }
      al_free(names[i]);
    }
    al_free(names);
    return;
  }
  if (++w->files > TRUST_MAX_FILES) {
    w->err = AL_ETOOBIG;
    return;
  }
  if (S_ISREG(st.st_mode)) {
    int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
      w->err = -errno;
      return;
    }
    w->err = hash_fd(w, fd, hash);
    close(fd);
  } else if (S_ISLNK(st.st_mode)) {
    char t[PATH_MAX + 8] = "symlink:";
    ssize_t n = readlink(full, t + 8, PATH_MAX - 1);

    if (n < 0) {
      w->err = -errno;
      return;
    }
    sha_hex(t, 8 + (size_t)n, hash);
  } else {
    char t[32];

    snprintf(t, sizeof(t), "special:%o", (unsigned)(st.st_mode & S_IFMT));
    sha_hex(t, strlen(t), hash);
  }
  if (w->err == 0) {
    add_line(w, hash, rel);
  }
}

/* The project's hash: versioned, so a later change of the manifest's
 * shape cannot match an old hash by accident. */
static void manifest_hash(const char *m, size_t n, char out[65]) {
  static const char k_v[] = "agentloop-trust-1\n";
  mbedtls_sha256_context c;
  unsigned char d[32];

  mbedtls_sha256_init(&c);
  mbedtls_sha256_starts_ret(&c, 0);
  mbedtls_sha256_update_ret(&c, (const unsigned char *)k_v, sizeof(k_v) - 1);
  mbedtls_sha256_update_ret(&c, (const unsigned char *)m, n);
  mbedtls_sha256_finish_ret(&c, d);
  mbedtls_sha256_free(&c);
  hexify(d, sizeof(d), out);
}

int al__tools_project_manifest(const char *workspace, al_buf_t *out,
                               char hash[65]) {
  walk_t w;
  size_t i;

  memset(&w, 0, sizeof(w));
  al_buf_init(out, TRUST_MANIFEST_MAX);
  w.m = out;
  w.ws = workspace;
  if (al_buf_append_str(out, "") != 0) {
    return AL_ENOMEM;
  }
  for (i = 0; k_bound[i] != NULL && w.err == 0; i++) {
    walk(&w, k_bound[i], 0);
  }
  if (w.err != 0) {
    al_buf_free(out);
    return w.err;
  }
  manifest_hash(out->data, out->len, hash);
  return 0;
}

/* ---- the records ------------------------------------------------------- */

static int read_all(const char *path, size_t max, al_buf_t *out) {
  char buf[8192];
  ssize_t r;
  int fd = open(path, O_RDONLY | O_CLOEXEC);

  al_buf_init(out, max);
  if (fd < 0) {
    return -errno;
  }
  if (al_buf_append_str(out, "") != 0) {
    close(fd);
    return AL_ENOMEM;
  }
  while ((r = read(fd, buf, sizeof(buf))) != 0) {
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0 || al_buf_append(out, buf, (size_t)r) != 0) {
      int e = r < 0 ? -errno : AL_ETOOBIG;

      close(fd);
      al_buf_free(out);
      return e;
    }
  }
  close(fd);
  return 0;
}

/* The record of `real` in the trusted-projects text: 1 with its hash in
 * hash (empty for a path-only line), 0 when there is none. */
static int find_record(const char *text, const char *real, char hash[65]) {
  const char *p = text;
  size_t rl = strlen(real);

  while (p != NULL && *p != '\0') {
    const char *e = strchr(p, '\n');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

    if (n == rl && memcmp(p, real, rl) == 0) {
      hash[0] = '\0';
      return 1;
    }
    if (n == 7 + 64 + 1 + rl && memcmp(p, "sha256:", 7) == 0 && p[71] == ' ' &&
        memcmp(p + 72, real, rl) == 0) {
      memcpy(hash, p + 7, 64);
      hash[64] = '\0';
      return 1;
    }
    p = e != NULL ? e + 1 : NULL;
  }
  return 0;
}

static void manifest_path(const char *dir, const char *real, char *out,
                          size_t len) {
  char h[65];

  sha_hex(real, strlen(real), h);
  snprintf(out, len, "%s/trusted-projects.d/%s", dir, h);
}

/* The line of `path` in a manifest ("HASH PATH"), or NULL. */
static const char *manifest_find(const char *m, const char *path, size_t plen) {
  const char *p = m;

  while (p != NULL && *p != '\0') {
    const char *e = strchr(p, '\n');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

    if (n == 65 + plen && memcmp(p + 65, path, plen) == 0) {
      return p;
    }
    p = e != NULL ? e + 1 : NULL;
  }
  return NULL;
}

/* "added P", "removed P", "modified P" lines: from `old` (NULL: nothing
 * approved) to `now`. */
static int diff(const char *old, const char *now, al_buf_t *out) {
  const char *p;
  int rc = 0;

  for (p = now; rc == 0 && p != NULL && *p != '\0';) {
    const char *e = strchr(p, '\n');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
    const char *o =
        old != NULL && n > 65 ? manifest_find(old, p + 65, n - 65) : NULL;

    if (n > 65 && (o == NULL || memcmp(o, p, 64) != 0)) {
      rc = al_buf_printf(out, "%s %.*s\n", o == NULL ? "added" : "modified",
                         (int)(n - 65), p + 65);
    }
    p = e != NULL ? e + 1 : NULL;
  }
  for (p = old; rc == 0 && p != NULL && *p != '\0';) {
    const char *e = strchr(p, '\n');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

    if (n > 65 && manifest_find(now, p + 65, n - 65) == NULL) {
      rc = al_buf_printf(out, "removed %.*s\n", (int)(n - 65), p + 65);
    }
    p = e != NULL ? e + 1 : NULL;
  }
  return rc;
}

void al__project_trust_free(al_project_trust_t *t) {
  al_buf_free(&t->manifest);
  al_buf_free(&t->changes);
}

int al__tools_project_trust(const char *workspace, al_project_trust_t *t) {
  char dir[4096];
  char path[4400];
  al_buf_t rec;
  al_buf_t old;
  int rc;

  memset(t, 0, sizeof(*t));
  al_buf_init(&t->manifest, 0);
  al_buf_init(&t->changes, TRUST_MANIFEST_MAX);
  t->state = AL_TRUST_NONE;
  if (realpath(workspace, t->real) == NULL) {
    return -errno;
  }
  /* The record first: a project never trusted (the common case) costs no
   * hashing. */
  if (al__tools_config_dir(dir, sizeof(dir)) == NULL) {
    return 0;
  }
  snprintf(path, sizeof(path), "%s/trusted-projects", dir);
  if (read_all(path, TRUST_RECORDS_MAX, &rec) != 0) {
    return 0;
  }
  if (find_record(rec.data, t->real, t->recorded) == 0) {
    al_buf_free(&rec);
    return 0;
  }
  al_buf_free(&rec);
  if ((rc = al__tools_project_manifest(t->real, &t->manifest, t->hash)) != 0) {
    t->state = AL_TRUST_UNREADABLE;
    return rc;
  }
  if (t->recorded[0] == '\0') {
    t->state = AL_TRUST_UNBOUND;
    return diff(NULL, t->manifest.data, &t->changes);
  }
  if (strcmp(t->recorded, t->hash) == 0) {
    t->state = AL_TRUST_TRUSTED;
    return 0;
  }
  t->state = AL_TRUST_CHANGED;
  manifest_path(dir, t->real, path, sizeof(path));
  if (read_all(path, TRUST_MANIFEST_MAX, &old) == 0) {
    char h[65];

    /* Said as a difference only when the stored manifest is the one the
     * record approved; else every file is new to us. */
    manifest_hash(old.data, old.len, h);
    rc = diff(strcmp(h, t->recorded) == 0 ? old.data : NULL, t->manifest.data,
              &t->changes);
    al_buf_free(&old);
    return rc;
  }
  return diff(NULL, t->manifest.data, &t->changes);
}

bool al__tools_project_trusted(const char *workspace) {
  al_project_trust_t t;
  bool ok;

  (void)al__tools_project_trust(workspace, &t);
  ok = t.state == AL_TRUST_TRUSTED;
  al__project_trust_free(&t);
  return ok;
}

static int mkdir_p(char *dir) {
  char *slash;

  for (slash = strchr(dir + 1, '/'); slash != NULL;
       slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    (void)mkdir(dir, 0700);
    *slash = '/';
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    return -errno;
  }
  return 0;
}

/* Writes text to path through a temporary file and a rename, so a reader
 * sees the old file or the new one. */
static int write_atomic(const char *path, const char *a, size_t an,
                        const char *b, size_t bn) {
  char tmp[4600];
  int fd;
  int rc = 0;

  snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return -errno;
  }
  if ((an > 0 && write(fd, a, an) != (ssize_t)an) ||
      (bn > 0 && write(fd, b, bn) != (ssize_t)bn) || fsync(fd) != 0) {
    rc = errno != 0 ? -errno : -EIO;
  }
  if (close(fd) != 0 && rc == 0) {
    rc = -errno;
  }
  if (rc == 0 && rename(tmp, path) != 0) {
    rc = -errno;
  }
  if (rc != 0) {
    unlink(tmp);
  }
  return rc;
}

static int trust_project(const char *workspace, al_project_trust_t *t);

int al__tools_trust_project(const char *workspace, al_project_trust_t *t) {
  al_project_trust_t own;
  int rc;

  if (t != NULL) {
    return trust_project(workspace, t);
  }
  rc = trust_project(workspace, &own);
  al__project_trust_free(&own);
  return rc;
}

static int trust_project(const char *workspace, al_project_trust_t *t) {
  char dir[4096];
  char path[4400];
  al_buf_t rec;
  al_buf_t out;
  const char *p;
  int rc;

  if ((rc = al__tools_project_trust(workspace, t)) != 0) {
    return rc;
  }
  if (t->state == AL_TRUST_TRUSTED) {
    return 0;
  }
  if (t->state == AL_TRUST_NONE) {
    /* No record: nothing was hashed yet, and every file is new. */
    if ((rc = al__tools_project_manifest(t->real, &t->manifest, t->hash)) !=
        0) {
      t->state = AL_TRUST_UNREADABLE;
      return rc;
    }
    if ((rc = diff(NULL, t->manifest.data, &t->changes)) != 0) {
      return rc;
    }
  }
  if (al__tools_config_dir(dir, sizeof(dir)) == NULL) {
    return -ENOENT;
  }
  if ((rc = mkdir_p(dir)) != 0) {
    return rc;
  }
  /* The manifest first: a record is never left naming one that is not
   * there (a reader then lists every file as new, which is still true to
   * what was approved). */
  snprintf(path, sizeof(path), "%s/trusted-projects.d", dir);
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    return -errno;
  }
  manifest_path(dir, t->real, path, sizeof(path));
  if ((rc = write_atomic(path, t->manifest.data, t->manifest.len, NULL, 0)) !=
      0) {
    return rc;
  }
  /* The other projects' lines kept, this one's replaced. */
  snprintf(path, sizeof(path), "%s/trusted-projects", dir);
  al_buf_init(&out, TRUST_RECORDS_MAX);
  if (read_all(path, TRUST_RECORDS_MAX, &rec) == 0) {
    for (p = rec.data; rc == 0 && p != NULL && *p != '\0';) {
      const char *e = strchr(p, '\n');
      size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
      char h[65];
      char line[PATH_MAX + 80];

      snprintf(line, sizeof(line), "%.*s", (int)n, p);
      if (n > 0 && find_record(line, t->real, h) == 0) {
        rc = al_buf_printf(&out, "%s\n", line);
      }
      p = e != NULL ? e + 1 : NULL;
    }
    al_buf_free(&rec);
  }
  if (rc == 0) {
    rc = al_buf_printf(&out, "sha256:%s %s\n", t->hash, t->real);
  }
  if (rc == 0) {
    rc = write_atomic(path, out.data, out.len, NULL, 0);
  }
  al_buf_free(&out);
  if (rc == 0) {
    t->state = AL_TRUST_TRUSTED;
    memcpy(t->recorded, t->hash, sizeof(t->recorded));
  }
  return rc;
}

const char *al__trust_state_name(al_trust_state_t s) {
  switch (s) {
    case AL_TRUST_NONE:
      return "untrusted";
    case AL_TRUST_TRUSTED:
      return "trusted";
    case AL_TRUST_CHANGED:
      return "changed";
    case AL_TRUST_UNBOUND:
      return "unbound";
    case AL_TRUST_UNREADABLE:
      return "unreadable";
  }
  return "untrusted";
}
