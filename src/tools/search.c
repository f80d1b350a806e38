/* Built-in read-only search tools: grep and glob (issue 12).
 *
 * Both walk a directory tree on the threadpool (one uv_work_t per call,
 * as fstools.c does) and complete on the loop in the after-work callback.
 * The walk:
 *  - starts at a path the path policy resolved and opened (openat2 beneath
 *    an allowed root), then descends with openat(O_NOFOLLOW) relative to
 *    each directory's descriptor: symlinks are never followed, so the walk
 *    cannot leave the tree it started in;
 *  - skips every entry whose path the policy denies, the .git directory,
 *    and what .gitignore files on the way ignore (each directory's
 *    .gitignore applies below it; the last matching pattern wins, "!"
 *    re-includes, a trailing "/" matches directories only, a pattern with
 *    a "/" is anchored at its .gitignore's directory, "**" spans
 *    directories). .gitignore is honoured whether or not the tree is a git
 *    repository;
 *  - visits entries in bytewise name order, so results are deterministic;
 *  - stops at the file tools' time limit, at max_depth, and (grep) after
 *    512 MiB read in all, saying so at the end of the result; grep reads
 *    each file in 64 KiB pieces (its memory does not grow with the file),
 *    at most its first 64 MiB (said in the result), and searches a line
 *    longer than 1 MiB in its first 1 MiB.
 * grep {pattern, path?, glob?, ignore_case?, output_mode?}: POSIX
 * extended regular expressions, matched per line; files with a NUL byte in
 * their first 8 KiB are binary and skipped (as ripgrep does); output_mode
 * "content" (default) prints "path:line:text" (lines cut at 500 bytes),
 * "files_with_matches" one path per file, "count" "path:N". Paths are
 * relative to the workspace when inside it.
 * glob {pattern, path?}: paths of regular files whose path relative to the search directory matches
 * the pattern ("*" and "?" within one component, "**" across components;
 * a pattern without "/" matches the name at any depth).
 * Results pass through the same display cap and "[OUTPUT TRUNCATED: ...]"
 * notice as every tool; glob lists at most list_max paths, then
 * "[LIST TRUNCATED: showing X of Y entries]". Ripgrep is not used: the
 * built-in walk is the one implementation, with the same results on every
 * machine. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "provider/provider.h"
#include "tools/tooljob.h"
#include "tools/tools.h"

#define S_CHUNK (64 * 1024)
#define MAX_DEPTH 64
#define LINE_SHOWN 500
#define BINARY_PROBE 8192
#define IGNORE_FILE_MAX (1024 * 1024)
#define GREP_SCAN_MAX ((uint64_t)512 * 1024 * 1024)
/* Per file: one huge file cannot use up the whole budget. */
#define FILE_SCAN_MAX ((uint64_t)64 * 1024 * 1024)
/* The longest line kept whole; a longer one is searched in its first
 * LINE_KEPT bytes. */
#define LINE_KEPT ((size_t)1024 * 1024)

typedef enum { S_GREP = 0, S_GLOB } skind_t;
typedef enum { OUT_CONTENT = 0, OUT_FILES, OUT_COUNT } outmode_t;

typedef struct stool_s {
  al_tool_impl_t impl;
  skind_t kind;
  al_fstool_conf_t c;
  char *ws; /* the workspace's real path, for relative output */
} stool_t;

/* One .gitignore pattern. */
typedef struct ign_s {
  char *pat;
  bool negate;
  bool dir_only;
  bool anchored;
} ign_t;

/* The patterns of one directory's .gitignore; base is that directory's
 * path relative to the search root ("" for the root). */
typedef struct ignfile_s {
  char *base;
  ign_t *v;
  size_t n;
} ignfile_t;

typedef struct sjob_s {
  al_tooljob_t j; /* first: the shared lifecycle and output */
  const stool_t *tool;
  /* Arguments. */
  char *pattern;
  char *path;
  char *glob;
  bool icase;
  outmode_t mode;
  /* Walk state (threadpool). */
  regex_t re;
  bool re_ok;
  char *root_real; /* resolved start directory */
  ignfile_t *ign;
  size_t n_ign;
  uint64_t scanned;
  const char *stopped; /* why the walk stopped early, or NULL */
  size_t n_capped;     /* grep: files searched only in their first part */
  size_t n_found;      /* glob: paths matched; grep: matching lines */
  size_t n_files;      /* grep: files with a match */
} sjob_t;

static bool s_cancelled(sjob_t *job) {
  return al__tooljob_cancelled(&job->j);
}

static void s_fail(sjob_t *job, const char *fmt, const char *arg) {
  job->j.is_error = true;
  al_buf_reset(&job->j.raw);
  job->j.extra_chars = 0;
  al_buf_printf(&job->j.raw, "%s: ", job->tool->impl.name);
  al_buf_printf(&job->j.raw, fmt, arg);
}

/* Appends to the result: kept up to output_max bytes, counted past it. */
static void emit(sjob_t *job, const char *s, size_t n) {
  size_t room = job->j.raw.len < job->tool->c.output_max
                    ? job->tool->c.output_max - job->j.raw.len
                    : 0;
  size_t keep = AL_MIN(room, n);
  size_t i;

  if (keep > 0 && al_buf_append(&job->j.raw, s, keep) != 0) {
    keep = 0;
  }
  for (i = keep; i < n; i++) {
    job->j.extra_chars += ((unsigned char)s[i] & 0xC0) != 0x80;
  }
}

static void emit_str(sjob_t *job, const char *s) { emit(job, s, strlen(s)); }

static bool s_over_time(sjob_t *job) {
  return job->tool->c.time_limit_ms > 0 &&
         uv_hrtime() - job->j.t0 > job->tool->c.time_limit_ms * 1000000ull;
}

/* ---- glob matching --------------------------------------------------------- */

/* Matches path components [p..] against pattern components, "**" taking
 * zero or more components. Both are '/'-separated, without leading '/'. */
static bool match_parts(const char *pat, const char *path) {
  const char *pe = strchr(pat, '/');
  size_t pl = pe != NULL ? (size_t)(pe - pat) : strlen(pat);
  char pc[1024];
  char sc[1024];
  const char *se;
  size_t sl;

  if (pl == 2 && pat[0] == '*' && pat[1] == '*') {
    const char *rest = pe != NULL ? pe + 1 : NULL;
    const char *s = path;

    if (rest == NULL) {
      return true; /* trailing "**": everything below */
    }
    for (;;) {
      if (match_parts(rest, s)) {
        return true;
      }
      s = strchr(s, '/');
      if (s == NULL) {
        return false;
      }
      s++;
    }
  }
  se = strchr(path, '/');
  sl = se != NULL ? (size_t)(se - path) : strlen(path);
  if (pl >= sizeof(pc) || sl >= sizeof(sc)) {
    return false;
  }
  memcpy(pc, pat, pl);
  pc[pl] = '\0';
  memcpy(sc, path, sl);
  sc[sl] = '\0';
  if (fnmatch(pc, sc, 0) != 0) {
    return false;
  }
  if (pe == NULL || se == NULL) {
    return pe == NULL && se == NULL;
  }
  return match_parts(pe + 1, se + 1);
}

/* A user pattern (glob tool, grep's glob filter) against a relative path:
 * without '/', against the name at any depth. */
static bool glob_match(const char *pat, const char *rel) {
  const char *base = strrchr(rel, '/');

  while (pat[0] == '.' && pat[1] == '/') {
    pat += 2;
  }
  if (strchr(pat, '/') == NULL) {
    return fnmatch(pat, base != NULL ? base + 1 : rel, 0) == 0;
  }
  return match_parts(pat[0] == '/' ? pat + 1 : pat, rel);
}

/* ---- .gitignore ------------------------------------------------------------ */

static void ignfile_free(ignfile_t *f) {
  size_t i;

  for (i = 0; i < f->n; i++) {
    al_free(f->v[i].pat);
  }
  al_free(f->v);
  al_free(f->base);
}

/* Reads dirfd's .gitignore (if any) and pushes its patterns. */
static void ign_push(sjob_t *job, int dirfd, const char *base) {
  int fd = openat(dirfd, ".gitignore", O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
                                           O_NONBLOCK);
  struct stat st;
  char *text;
  ssize_t n;
  ignfile_t f;
  char *line;
  char *save = NULL;
  ignfile_t *nv;

  if (fd < 0) {
    return;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > IGNORE_FILE_MAX) {
    close(fd);
    return;
  }
  text = al_malloc((size_t)st.st_size + 1);
  if (text == NULL) {
    close(fd);
    return;
  }
  n = pread(fd, text, (size_t)st.st_size, 0);
  close(fd);
  if (n < 0) {
    al_free(text);
    return;
  }
  text[n] = '\0';
  memset(&f, 0, sizeof(f));
  f.base = al_strdup(base);
  for (line = strtok_r(text, "\n", &save); line != NULL && f.base != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    size_t l = strlen(line);
    ign_t e;
    ign_t *v;

    memset(&e, 0, sizeof(e));
    while (l > 0 && (line[l - 1] == '\r' ||
                     (line[l - 1] == ' ' && (l < 2 || line[l - 2] != '\\')))) {
      line[--l] = '\0';
    }
    if (l == 0 || line[0] == '#') {
      continue;
    }
    if (line[0] == '!') {
      e.negate = true;
      line++;
      l--;
    } else if (line[0] == '\\') {
      line++;
      l--;
    }
    if (l > 0 && line[l - 1] == '/') {
      e.dir_only = true;
      line[--l] = '\0';
    }
    if (l == 0) {
      continue;
    }
    e.anchored = strchr(line, '/') != NULL;
    if (line[0] == '/') {
      line++;
    }
    e.pat = al_strdup(line);
    v = e.pat != NULL ? al_realloc(f.v, (f.n + 1) * sizeof(*v)) : NULL;
    if (v == NULL) {
      al_free(e.pat);
      break;
    }
    f.v = v;
    f.v[f.n++] = e;
  }
  al_free(text);
  nv = f.base != NULL ? al_realloc(job->ign, (job->n_ign + 1) * sizeof(*nv))
                      : NULL;
  if (nv == NULL || f.n == 0) {
    if (nv != NULL) {
      job->ign = nv;
    }
    ignfile_free(&f);
    return;
  }
  job->ign = nv;
  job->ign[job->n_ign++] = f;
}

static void ign_pop_to(sjob_t *job, size_t n) {
  while (job->n_ign > n) {
    ignfile_free(&job->ign[--job->n_ign]);
  }
}

/* Whether rel (relative to the search root) is ignored. */
static bool ignored(const sjob_t *job, const char *rel, bool is_dir) {
  bool ign = false;
  size_t i;
  size_t k;

  for (i = 0; i < job->n_ign; i++) {
    const ignfile_t *f = &job->ign[i];
    size_t bl = strlen(f->base);
    const char *sub = rel;
    const char *name = strrchr(rel, '/');

    if (bl > 0) {
      if (strncmp(rel, f->base, bl) != 0 || rel[bl] != '/') {
        continue;
      }
      sub = rel + bl + 1;
    }
    name = name != NULL ? name + 1 : rel;
    for (k = 0; k < f->n; k++) {
      const ign_t *e = &f->v[k];
      bool m;

      if (e->dir_only && !is_dir) {
        continue;
      }
      m = e->anchored ? match_parts(e->pat, sub)
                      : fnmatch(e->pat, name, 0) == 0;
      if (m) {
        ign = !e->negate;
      }
    }
  }
  return ign;
}

/* ---- the walk ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The path shown to the model: relative to the workspace when inside it. */
static void shown_path(const sjob_t *job, const char *rel, al_buf_t *b) {
  const char *ws = job->tool->ws;
  size_t wl = strlen(ws);
  const char *r = job->root_real;

  al_buf_reset(b);
  if (strncmp(r, ws, wl) == 0 && (r[wl] == '/' || r[wl] == '\0')) {
    r += wl;
    while (*r == '/') {
      r++;
    }
    if (*r != '\0') {
      al_buf_printf(b, "%s%s", r, rel[0] != '\0' ? "/" : "");
    }
  } else {
    al_buf_printf(b, "%s%s", r, rel[0] != '\0' ? "/" : "");
  }
  al_buf_append_str(b, rel);
}

/* One line, data[i..e) (data[e] is readable), against the pattern. */
static void grep_line(sjob_t *job, const char *data, size_t i, size_t e,
                      size_t line_no, const al_buf_t *name, size_t *hits) {
  regmatch_t m[1];
  char num[48];

  m[0].rm_so = (regoff_t)i;
  m[0].rm_eo = (regoff_t)e;
  if (regexec(&job->re, data, 1, m, REG_STARTEND) != 0) {
    return;
  }
  (*hits)++;
  job->n_found++;
  if (job->mode == OUT_CONTENT) {
    emit(job, name->data, name->len);
    snprintf(num, sizeof(num), ":%zu:", line_no);
    emit_str(job, num);
    emit(job, data + i, AL_MIN(e - i, (size_t)LINE_SHOWN));
    if (e - i > LINE_SHOWN) {
      emit_str(job, " [...]");
    }
    emit_str(job, "\n");
  }
}

/* Streams the file through a buffer of at most S_CHUNK + LINE_KEPT bytes
 * (memory does not grow with the file), counting what it reads against
 * the search's budget; a file is searched in its first FILE_SCAN_MAX
 * bytes at most, so one huge file cannot starve the others. */
static void grep_file(sjob_t *job, int fd, const char *rel) {
  al_buf_t data;
  al_buf_t name;
  struct stat st;
  size_t line_no = 1;
  size_t hits = 0;
  uint64_t file_read = 0;
  bool probed = false;
  bool eof = false;
  bool skipping = false; /* inside the unkept rest of an over-long line */
  char num[48];

  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return;
  }
  al_buf_init(&data, S_CHUNK + LINE_KEPT + 1);
  al_buf_init(&name, 8192);
  shown_path(job, rel, &name);
  for (;;) {
    size_t start = 0;
    size_t want;
    ssize_t n;

    /* After the end (a read of 0) or a cap, only a cap has more to say. */
    if ((job->mode == OUT_FILES && hits > 0) ||
        (eof && file_read < FILE_SCAN_MAX && job->scanned < GREP_SCAN_MAX) ||
        s_cancelled(job) || s_over_time(job)) {
      break;
    }
    if (job->scanned >= GREP_SCAN_MAX || file_read >= FILE_SCAN_MAX) {
      if ((uint64_t)st.st_size > file_read) {
        /* More was there: say so (the whole search, or this file). */
        if (job->scanned >= GREP_SCAN_MAX) {
          job->stopped = "the search read its limit of 512 MiB";
        } else {
          job->n_capped++;
        }
      }
      break;
    }
    want = AL_MIN((uint64_t)S_CHUNK,
                  AL_MIN(GREP_SCAN_MAX - job->scanned,
                         FILE_SCAN_MAX - file_read));
    if (al_buf_reserve(&data, want + 1) != 0) {
      break;
    }
    n = read(fd, data.data + data.len, want);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      break;
    }
    data.len += (size_t)n;
    file_read += (uint64_t)n;
    job->scanned += (uint64_t)n;
    /* The end of what is read of this file: its last line is whole. */
    eof = n == 0 || file_read >= FILE_SCAN_MAX ||
          job->scanned >= GREP_SCAN_MAX;
    if (!probed && (data.len >= BINARY_PROBE || eof)) {
      probed = true;
      if (memchr(data.data, '\0', AL_MIN(data.len, (size_t)BINARY_PROBE)) !=
          NULL) {
        break; /* binary */
      }
    }
    if (!probed) {
      continue;
    }
    /* NUL-terminated: REG_STARTEND bounds the match, but some regexec
     * implementations (and sanitizer interceptors) still read to a NUL. */
    data.data[data.len] = '\0';
    while (start < data.len) {
      const char *nl = memchr(data.data + start, '\n', data.len - start);
      size_t e;

      if (nl == NULL && !eof) {
        break; /* an unfinished line: kept for the next read */
      }
      e = nl != NULL ? (size_t)(nl - data.data) : data.len;
      if (!skipping) {
        char c = data.data[e];

        data.data[e] = '\0';
        grep_line(job, data.data, start, e, line_no, &name, &hits);
        data.data[e] = c;
      }
      skipping = false;
      line_no++;
      start = e + 1;
      if (job->mode == OUT_FILES && hits > 0) {
        break;
      }
    }
    start = AL_MIN(start, data.len);
    /* Keep the unfinished line for the next read; past LINE_KEPT bytes it
     * is searched as it is and the rest of it is skipped. */
    memmove(data.data, data.data + start, data.len - start);
    data.len -= start;
    if (data.len >= LINE_KEPT) {
      if (!skipping) {
        data.data[data.len] = '\0';
        grep_line(job, data.data, 0, data.len, line_no, &name, &hits);
      }
      skipping = true;
      data.len = 0;
    }
  }
  if (hits > 0) {
    job->n_files++;
    if (job->mode == OUT_FILES) {
      emit(job, name.data, name.len);
      emit_str(job, "\n");
    } else if (job->mode == OUT_COUNT) {
      emit(job, name.data, name.len);
      snprintf(num, sizeof(num), ":%zu\n", hits);
      emit_str(job, num);
    }
  }
  al_buf_free(&name);
  al_buf_free(&data);
}

static void visit_file(sjob_t *job, int dirfd, const char *nm,
                       const char *rel) {
  if (job->tool->kind == S_GLOB) {
    if (glob_match(job->pattern, rel)) {
      al_buf_t name;

      job->n_found++;
      if (job->n_found <= job->tool->c.list_max) {
        al_buf_init(&name, 8192);
        shown_path(job, rel, &name);
        emit(job, name.data, name.len);
        emit_str(job, "\n");
        al_buf_free(&name);
      }
    }
    return;
  }
  if (job->glob != NULL && !glob_match(job->glob, rel)) {
    return;
  }
  {
    int fd = openat(dirfd, nm,
                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

    if (fd >= 0) {
      grep_file(job, fd, rel);
      close(fd);
    }
  }
}

/* Walks the directory open at dfd (taken: closed here); rel is its path
 * relative to the search root ("" for the root). */
static void walk(sjob_t *job, int dfd, const char *rel, int depth) {
  DIR *d;
  struct dirent *de;
  char **names = NULL;
  size_t n = 0;
  size_t cap = 0;
  size_t i;
  size_t ign_mark = job->n_ign;
  al_buf_t sub;
  al_buf_t abs;

  ign_push(job, dfd, rel);
  d = fdopendir(dfd);
  if (d == NULL) {
    close(dfd);
    ign_pop_to(job, ign_mark);
    return;
  }
  while ((de = readdir(d)) != NULL) {
    char **nv;

    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
        strcmp(de->d_name, ".git") == 0) {
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      nv = al_realloc(names, cap * sizeof(*nv));
      if (nv == NULL) {
        break;
      }
      names = nv;
    }
    names[n] = al_strdup(de->d_name);
    if (names[n] == NULL) {
      break;
    }
    n++;
  }
  if (n > 1) {
    qsort(names, n, sizeof(*names), cmp_str);
  }
  al_buf_init(&sub, 8192);
  al_buf_init(&abs, 8192);
  for (i = 0; i < n && job->stopped == NULL; i++) {
    struct stat st;

    if (s_cancelled(job)) {
      job->stopped = "cancelled";
      break;
    }
    if (s_over_time(job)) {
      job->stopped = "the time limit of file tools";
      break;
    }
    if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    al_buf_reset(&sub);
    if (rel[0] != '\0' && al_buf_printf(&sub, "%s/", rel) != 0) {
      continue;
    }
    if (al_buf_append_str(&sub, names[i]) != 0) {
      continue;
    }
    /* Denied paths are not searched, nor named. */
    al_buf_reset(&abs);
    if (al_buf_printf(&abs, "%s/%s", job->root_real, sub.data) != 0 ||
        al__pathpolicy_check(&job->tool->c.policy, abs.data, NULL) != 0) {
      continue;
    }
    if (ignored(job, sub.data, S_ISDIR(st.st_mode))) {
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      int cfd;

      if (depth >= MAX_DEPTH) {
        continue;
      }
      cfd = openat(dirfd(d), names[i],
                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd >= 0) {
        walk(job, cfd, sub.data, depth + 1);
      }
    } else if (S_ISREG(st.st_mode)) {
      visit_file(job, dirfd(d), names[i], sub.data);
    }
  }
  al_buf_free(&sub);
  al_buf_free(&abs);
  for (i = 0; i < n; i++) {
    al_free(names[i]);
  }
  al_free(names);
  closedir(d);
  ign_pop_to(job, ign_mark);
}

static void do_search(sjob_t *job) {
  al_buf_t err;
  al_path_t rp;
  int fd;
  int rc;

  al_buf_init(&err, 4096);
  rc = al__pathpolicy_resolve(&job->tool->c.policy,
                              job->path != NULL ? job->path : ".",
                              AL_PATH_EXISTING, &rp, &err);
  if (rc != 0) {
    s_fail(job, "%s", err.data != NULL ? err.data : "cannot resolve");
    al_buf_free(&err);
    return;
  }
  fd = al__pathpolicy_open(&job->tool->c.policy, rp.real,
                           O_RDONLY | O_DIRECTORY, 0, &err);
  if (fd == UV_ENOTDIR && job->tool->kind == S_GREP) {
    /* grep on one file. */
    fd = al__pathpolicy_open(&job->tool->c.policy, rp.real,
                             O_RDONLY | O_NONBLOCK, 0, &err);
    if (fd >= 0) {
      char *slash = strrchr(rp.real, '/');

      *slash = '\0';
      job->root_real = rp.real;
      grep_file(job, fd, slash + 1);
      close(fd);
      al_buf_free(&err);
      return;
    }
  }
  if (fd < 0) {
    if (fd == UV_ENOTDIR) {
      s_fail(job, "'%s' is not a directory", job->path);
    } else {
      s_fail(job, "%s",
             err.len > 0 ? err.data : uv_strerror(fd));
    }
    al_free(rp.real);
    al_buf_free(&err);
    return;
  }
  al_buf_free(&err);
  job->root_real = rp.real;
  walk(job, fd, "", 0);
  ign_pop_to(job, 0);
}

/* ---- job plumbing ------------------------------------------------------------ */

static void finish(sjob_t *job) {
  al_buf_t clean;
  size_t total;
  size_t shown;
  size_t cut;
  int rc = 0;

  if (!job->j.is_error) {
    if (job->j.raw.len > 0 && job->j.raw.data[job->j.raw.len - 1] == '\n') {
      job->j.raw.data[--job->j.raw.len] = '\0';
    }
    if (job->n_found == 0 && job->j.raw.len == 0) {
      al_buf_append_str(&job->j.raw, job->tool->kind == S_GREP
                                       ? "No matches found"
                                       : "No files found");
    }
  }
  al_buf_init(&clean, job->j.raw.len * 3 + 16);
  if (job->j.raw.len > 0) {
    rc = al__utf8_sanitize_append(&clean, job->j.raw.data, job->j.raw.len);
  }
  cut = al__tool_display_cut(clean.len ? clean.data : "", clean.len,
                             job->j.extra_chars, job->tool->c.display_max,
                             &shown, &total);
  rc |= al_buf_append(&job->j.out, clean.len ? clean.data : "", cut);
  if (shown < total) {
    rc |= al_buf_append_str(&job->j.out, "\n");
    rc |= al__tool_truncation_notice(&job->j.out, shown, total,
                                     job->tool->impl.name);
  }
  if (!job->j.is_error && job->tool->kind == S_GLOB &&
      job->n_found > job->tool->c.list_max) {
    rc |= al_buf_printf(&job->j.out,
                        "\n[LIST TRUNCATED: showing %zu of %zu entries]",
                        job->tool->c.list_max, job->n_found);
  }
  if (!job->j.is_error && job->n_capped > 0) {
    rc |= al_buf_printf(&job->j.out,
                        "\n[SEARCH: %zu file(s) larger than %llu MiB searched "
                        "in their first %llu MiB only]",
                        job->n_capped,
                        (unsigned long long)(FILE_SCAN_MAX >> 20),
                        (unsigned long long)(FILE_SCAN_MAX >> 20));
  }
  if (!job->j.is_error && job->stopped != NULL) {
    rc |= al_buf_printf(&job->j.out, "\n[SEARCH STOPPED EARLY: %s]",
                        job->stopped);
  }
  al_buf_free(&clean);
  if (rc != 0) {
    job->j.is_error = true;
    al_buf_reset(&job->j.out);
    al_buf_append_str(&job->j.out, "out of memory");
  }
}

static void sjob_work(uv_work_t *req) {
  sjob_t *job = AL_CONTAINER_OF(req, sjob_t, j.req);

  job->j.t0 = uv_hrtime();
  if (!job->j.preset && !s_cancelled(job)) {
    do_search(job);
    if (s_cancelled(job)) {
      s_fail(job, "%s", "cancelled");
    }
  }
  finish(job);
}

static void sjob_free(al_tooljob_t *j) {
  sjob_t *job = AL_CONTAINER_OF(j, sjob_t, j);

  if (job->re_ok) {
    regfree(&job->re);
  }
  al__tooljob_release(j);
  al_free(job->pattern);
  al_free(job->path);
  al_free(job->glob);
  al_free(job->root_real);
  al_free(job->ign);
  al_free(job);
}

static void s_preset(sjob_t *job, const char *fmt, const char *param) {
  al__tooljob_preset(&job->j, fmt, param);
}

static bool s_get_string(sjob_t *job, const json_t *in, const char *key,
                         bool required, char **out) {
  const json_t *v = json_object_get(in, key);

  *out = NULL;
  if (v == NULL || json_is_null(v)) {
    if (required) {
      s_preset(job, "'%s' is required (a string)", key);
      return false;
    }
    return true;
  }
  if (!json_is_string(v) ||
      strlen(json_string_value(v)) != json_string_length(v)) {
    s_preset(job, "'%s' must be a string without NUL characters", key);
    return false;
  }
  if (required && json_string_length(v) == 0) {
    s_preset(job, "'%s' must not be empty", key);
    return false;
  }
  *out = al_strdup(json_string_value(v));
  if (*out == NULL) {
    s_preset(job, "%s", "out of memory");
    return false;
  }
  return true;
}

static void s_parse_args(sjob_t *job, const json_t *in) {
  const json_t *v;

  if (!json_is_object(in)) {
    s_preset(job, "%s", "the arguments must be a JSON object");
    return;
  }
  if (!s_get_string(job, in, "pattern", true, &job->pattern) ||
      !s_get_string(job, in, "path", false, &job->path)) {
    return;
  }
  if (job->tool->kind == S_GLOB) {
    return;
  }
  if (!s_get_string(job, in, "glob", false, &job->glob)) {
    return;
  }
  v = json_object_get(in, "ignore_case");
  if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
    s_preset(job, "'%s' must be a boolean", "ignore_case");
    return;
  }
  job->icase = json_is_true(v);
  v = json_object_get(in, "output_mode");
  if (v != NULL && !json_is_null(v)) {
    const char *m = json_is_string(v) ? json_string_value(v) : "";

    if (strcmp(m, "content") == 0) {
      job->mode = OUT_CONTENT;
    } else if (strcmp(m, "files_with_matches") == 0) {
      job->mode = OUT_FILES;
    } else if (strcmp(m, "count") == 0) {
      job->mode = OUT_COUNT;
    } else {
      s_preset(job,
               "'%s' must be \"content\", \"files_with_matches\" or "
               "\"count\"",
               "output_mode");
      return;
    }
  }
  {
    int rc = regcomp(&job->re, job->pattern,
                     REG_EXTENDED | REG_NEWLINE | (job->icase ? REG_ICASE : 0));
    char msg[256];

    if (rc != 0) {
      regerror(rc, &job->re, msg, sizeof(msg));
      s_preset(job, "'pattern' is not a valid regular expression: %s", msg);
      return;
    }
    job->re_ok = true;
  }
}

static int stool_start(al_tool_call_t *call) {
  const stool_t *tool = AL_CONTAINER_OF(call->impl, stool_t, impl);
  sjob_t *job = al_calloc(1, sizeof(*job));
  int rc;

  if (job == NULL) {
    return AL_ENOMEM;
  }
  job->tool = tool;
  al__tooljob_init(&job->j, call, tool->impl.name,
                   tool->c.output_max + 16 * 1024, sjob_free);
  s_parse_args(job, call->input);
  rc = al__tooljob_queue(&job->j, tool->c.loop, sjob_work);
  if (rc != 0) {
    sjob_free(&job->j);
  }
  return rc;
}

static bool s_safe(const al_tool_impl_t *impl, const json_t *input) {
  return true;
}

static int stool_new(skind_t kind, const char *name,
                     const al_fstools_options_t *opts, al_tool_impl_t **out) {
  stool_t *t;
  int rc;

  *out = NULL;
  t = al_calloc(1, sizeof(*t));
  if (t == NULL) {
    return AL_ENOMEM;
  }
  t->kind = kind;
  rc = al__fstool_conf_init(&t->c, opts);
  if (rc != 0) {
    al__fstool_conf_free(&t->c);
    al_free(t);
    return rc;
  }
  t->ws = al_strdup(t->c.policy.root);
  if (t->ws == NULL) {
    al__fstool_conf_free(&t->c);
    al_free(t);
    return AL_ENOMEM;
  }
  t->impl.name = name;
  t->impl.is_concurrency_safe = s_safe;
  t->impl.start = stool_start;
  t->impl.cancel = al__tooljob_cancel;
  *out = &t->impl;
  return 0;
}

int al__grep_tool_new(const al_fstools_options_t *opts, al_tool_impl_t **out) {
  return stool_new(S_GREP, "grep", opts, out);
}

int al__glob_tool_new(const al_fstools_options_t *opts, al_tool_impl_t **out) {
  return stool_new(S_GLOB, "glob", opts, out);
}

void al__search_tool_free(al_tool_impl_t *impl) {
  stool_t *t;

  if (impl == NULL) {
    return;
  }
  t = AL_CONTAINER_OF(impl, stool_t, impl);
  al__fstool_conf_free(&t->c);
  al_free(t->ws);
  al_free(t);
}
