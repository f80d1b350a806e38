/* Built-in file tools: read_file, write_file, list_directory, done
 * (SPEC §8). See tools.h for the contract and the decisions.
 *
 * One job per call: start() validates the input on the loop thread and
 * queues one uv_work_t; the work callback does every blocking step
 * (resolve, policy, open, read/write) on the threadpool and builds the
 * final content; the after-work callback, on the loop, reports it with
 * al__executor_call_complete() and frees the job. Cancel sets an atomic
 * flag the worker polls between chunks and tries uv_cancel(); either way
 * the after-work callback still completes the call once (the executor
 * drops that late result). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/utf8.h"
#include "tools/tooljob.h"
#include "tools/tools.h"

/* Test seam: runs on the threadpool between the policy check of a path
 * and its open (read_file, write_file), so a test can swap a path
 * component in that window deterministically. NULL in production. */
void (*al__fstools_test_between)(const char *real) = NULL;

#define CHUNK (64 * 1024)
#define LIST_HARD_MAX 100000 /* names read from one directory at most */

typedef enum {
  KIND_READ = 0,
  KIND_WRITE,
  KIND_EDIT,
  KIND_LIST,
  KIND_DONE
} kind_t;

typedef struct fstool_s {
  al_tool_impl_t impl;
  kind_t kind;
  al_fstool_conf_t c;
} fstool_t;

typedef struct job_s {
  al_tooljob_t j; /* first: the shared lifecycle and output */
  const fstool_t *tool;
  /* Arguments, copied on the loop thread. */
  char *path;
  char *content;
  size_t content_len;
  char *old; /* edit_file: old_string (content is new_string) */
  size_t old_len;
  bool replace_all;
  long offset; /* 1-based */
  long limit;  /* 0: to the end */
  /* Result (the rest is in j). */
  bool numbered;       /* read_file with offset/limit: "%6d\t" per line */
  bool inexact;        /* read_file stopped counting (scan or time bound) */
  uint64_t file_size;
} job_t;

void al__fstools_options_init(al_fstools_options_t *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->output_max = AL_FSTOOLS_DEFAULT_OUTPUT_MAX;
  opts->display_max = AL_FSTOOLS_DEFAULT_DISPLAY_MAX;
  opts->list_max = AL_FSTOOLS_DEFAULT_LIST_MAX;
  opts->scan_max = AL_FSTOOLS_DEFAULT_SCAN_MAX;
  opts->time_limit_ms = AL_FSTOOLS_DEFAULT_TIME_LIMIT_MS;
}

/* ---- helpers (any thread) ------------------------------------------------ */

static bool is_cancelled(job_t *job) { return al__tooljob_cancelled(&job->j); }

static void fail(job_t *job, const char *fmt, const char *arg) {
  job->j.is_error = true;
  al_buf_reset(&job->j.raw);
  job->j.extra_chars = 0;
  al_buf_printf(&job->j.raw, fmt, arg);
}

static void fail_buf(job_t *job, al_buf_t *msg) {
  job->j.is_error = true;
  al_buf_reset(&job->j.raw);
  job->j.extra_chars = 0;
  al_buf_printf(&job->j.raw, "%s: %s", job->tool->impl.name,
                msg->data != NULL ? msg->data : "error");
}

static void fail_errno(job_t *job, const char *what, int code) {
  job->j.is_error = true;
  al_buf_reset(&job->j.raw);
  job->j.extra_chars = 0;
  al_buf_printf(&job->j.raw, "%s: %s '%s': %s", job->tool->impl.name, what,
                job->path, uv_strerror(code));
}

/* raw -> out: sanitized UTF-8, capped at display_max characters. */
/* A refused or failed al__pathpolicy_open: policy refusals carry their
 * reason, other errors read like any failed open. */
static void fail_open(job_t *job, int code, al_buf_t *why) {
  if (code == UV_EACCES && why->len > 0) {
    fail_buf(job, why);
  } else {
    fail_errno(job, "cannot open", code);
  }
}

static void finalize(job_t *job) {
  al_buf_t clean;
  size_t total;
  size_t shown;
  size_t cut;
  size_t limit = job->tool->c.display_max;
  int rc;

  al_text_clean_t st;

  memset(&st, 0, sizeof(st));
  if (job->tool->kind == KIND_READ && !job->j.is_error &&
      al__text_looks_binary(job->j.raw.data != NULL ? job->j.raw.data : "",
                            job->j.raw.len, true)) {
    /* Binary contents are not text for the model, the history or a
     * request: name the file instead (issue 15). */
    size_t n = job->j.raw.len + job->j.extra_chars;

    al_buf_reset(&job->j.raw);
    al_buf_printf(&job->j.raw,
                  "%s looks like a binary file (NUL bytes or invalid UTF-8 "
                  "in the %zu bytes read); its contents are not shown. Use "
                  "bash to inspect it (file, xxd, strings).",
                  job->path, n);
    job->j.extra_chars = 0;
    job->inexact = false;
  }
  al_buf_init(&clean, job->j.raw.len * 3 + 16);
  rc = job->j.raw.len == 0
           ? 0
           : al__text_clean_append(&clean, job->j.raw.data, job->j.raw.len, &st);
  if (rc != 0) {
    al_buf_free(&clean);
    job->j.is_error = true;
    al_buf_reset(&job->j.out);
    al_buf_append_str(&job->j.out, "out of memory");
    return;
  }
  cut = al__tool_display_cut(clean.len ? clean.data : "", clean.len,
                             job->j.extra_chars, limit, &shown, &total);
  rc = al_buf_append(&job->j.out, clean.len ? clean.data : "", cut);
  if (rc == 0 && st.nul + st.invalid > 0) {
    if (job->j.out.len > 0 && job->j.out.data[job->j.out.len - 1] != '\n') {
      rc = al_buf_append_str(&job->j.out, "\n");
    }
    rc |= al__text_clean_note(&job->j.out, &st);
  }
  if (rc == 0 && job->inexact) {
    /* The count stopped early: say what is known instead of a total. */
    rc = al_buf_printf(&job->j.out,
                       "\n[OUTPUT TRUNCATED: showing %zu of more than %zu "
                       "characters from %s; the file has %llu bytes: read "
                       "further parts with offset and limit]",
                       shown, total, job->tool->impl.name,
                       (unsigned long long)job->file_size);
  } else if (rc == 0 && shown < total) {
    rc = al_buf_append_str(&job->j.out, "\n");
    if (rc == 0) {
      rc = al__tool_truncation_notice(&job->j.out, shown, total,
                                      job->tool->impl.name);
    }
  }
  al_buf_free(&clean);
  if (rc != 0) {
    job->j.is_error = true;
    al_buf_reset(&job->j.out);
    al_buf_append_str(&job->j.out, "out of memory");
  }
}

/* ---- read_file ----------------------------------------------------------- */

static bool over_time(job_t *job) {
  return job->tool->c.time_limit_ms > 0 &&
         uv_hrtime() - job->j.t0 > job->tool->c.time_limit_ms * 1000000ull;
}

static void fail_time(job_t *job, const char *what) {
  char num[32];

  snprintf(num, sizeof(num), "%.3g", job->tool->c.time_limit_ms / 1000.0);
  job->j.is_error = true;
  al_buf_reset(&job->j.raw);
  job->j.extra_chars = 0;
  al_buf_printf(&job->j.raw, "%s: stopped after %s s ", job->tool->impl.name,
                num);
  al_buf_printf(&job->j.raw, "%s", what);
  al_buf_printf(&job->j.raw, " '%s' (the time limit of file tools)",
                job->path);
}

/* Appends one byte of the selection, with the line number first when the
 * reply is numbered; past output_max it is only counted. */
static int keep_byte(job_t *job, char c, long line, bool at_line_start) {
  if (job->j.raw.len >= job->tool->c.output_max) {
    job->j.extra_chars += ((unsigned char)c & 0xC0) != 0x80;
    return 0;
  }
  if (at_line_start && job->numbered &&
      al_buf_printf(&job->j.raw, "%6ld\t", line) != 0) {
    return AL_ENOMEM;
  }
  return al_buf_append(&job->j.raw, &c, 1);
}

static void do_read(job_t *job) {
  al_buf_t err;
  al_path_t rp;
  int fd;
  int rc;
  struct stat st;
  char *chunk = NULL;
  long line = 1;
  long end_line; /* first line not selected; 0: none */
  bool reached = false;
  bool stop = false;
  bool at_start = true;
  char last = '\n';
  bool any = false;
  uint64_t scanned = 0; /* bytes read past what is kept */

  al_buf_init(&err, 4096);
  rc = al__pathpolicy_resolve(&job->tool->c.policy, job->path,
                              AL_PATH_EXISTING, &rp, &err);
  if (rc != 0) {
    fail_buf(job, &err);
    al_buf_free(&err);
    return;
  }
  if (al__fstools_test_between != NULL) {
    al__fstools_test_between(rp.real);
  }
  fd = al__pathpolicy_open(&job->tool->c.policy, rp.real, O_RDONLY | O_NONBLOCK,
                           0, &err);
  al_free(rp.real);
  if (fd < 0) {
    fail_open(job, fd, &err);
    al_buf_free(&err);
    return;
  }
  al_buf_free(&err);
  if (fstat(fd, &st) != 0) {
    fail_errno(job, "cannot stat", -errno);
    goto out_close;
  }
  if (S_ISDIR(st.st_mode)) {
    fail(job, "read_file: '%s' is a directory (use list_directory)",
         job->path);
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    fail(job, "read_file: '%s' is not a regular file", job->path);
    goto out_close;
  }
  job->file_size = (uint64_t)st.st_size;
  chunk = al_malloc(CHUNK);
  if (chunk == NULL) {
    fail(job, "%s", "read_file: out of memory");
    goto out_close;
  }
  end_line = job->limit > 0 ? job->offset + job->limit : 0;
  while (!stop) {
    ssize_t n;
    ssize_t i;

    if (is_cancelled(job)) {
      fail(job, "%s", "read_file: cancelled");
      goto out_close;
    }
    if (job->j.raw.len >= job->tool->c.output_max) {
      /* Past what is kept only a bounded scan counts the rest, so a huge
       * file costs what is shown plus scan_max, not its size. */
      if (scanned >= job->tool->c.scan_max) {
        job->inexact = true;
        break;
      }
    }
    if (over_time(job)) {
      if (!reached) {
        fail_time(job, "before reaching the requested lines of");
        goto out_close;
      }
      job->inexact = true;
      break;
    }
    n = read(fd, chunk, CHUNK);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail_errno(job, "cannot read", -errno);
      goto out_close;
    }
    if (n == 0) {
      break;
    }
    any = true;
    if (job->j.raw.len >= job->tool->c.output_max) {
      scanned += (uint64_t)n;
    }
    for (i = 0; i < n; i++) {
      char c = chunk[i];

      if (line >= job->offset) {
        reached = true;
        if (keep_byte(job, c, line, at_start) != 0) {
          fail(job, "%s", "read_file: out of memory");
          goto out_close;
        }
      }
      last = c;
      at_start = c == '\n';
      if (c == '\n') {
        line++;
        if (end_line != 0 && line >= end_line) {
          stop = true;
          break;
        }
      }
    }
  }
  if (!reached && job->offset > 1) {
    long lines = (!any || last == '\n') ? line - 1 : line;
    char num[64];

    snprintf(num, sizeof(num), "%ld", job->offset);
    job->j.is_error = true;
    al_buf_reset(&job->j.raw);
    al_buf_printf(&job->j.raw,
                  "read_file: 'offset' %s is beyond the end of '%s' (%ld "
                  "lines)",
                  num, job->path, lines);
  }

out_close:
  al_free(chunk);
  close(fd);
}

/* ---- write_file ---------------------------------------------------------- */


static void do_write(job_t *job) {
  al_buf_t err;
  al_path_t rp;
  int fd;
  int rc;
  struct stat st;
  size_t done = 0;

  al_buf_init(&err, 4096);
  rc = al__pathpolicy_resolve(&job->tool->c.policy, job->path, AL_PATH_CREATE,
                              &rp, &err);
  if (rc != 0) {
    fail_buf(job, &err);
    al_buf_free(&err);
    return;
  }
  if (al__fstools_test_between != NULL) {
    al__fstools_test_between(rp.real);
  }
  fd = al__pathpolicy_open(&job->tool->c.policy, rp.real,
                           O_WRONLY | O_CREAT | O_NONBLOCK, 0644, &err);
  al_free(rp.real);
  if (fd < 0) {
    if (fd == UV_ELOOP) {
      fail(job,
           "write_file: '%s' is a symlink; write_file does not follow "
           "symlinks",
           job->path);
    } else if (fd == UV_EISDIR) {
      fail(job, "write_file: '%s' is a directory", job->path);
    } else {
      fail_open(job, fd, &err);
    }
    al_buf_free(&err);
    return;
  }
  al_buf_free(&err);
  if (fstat(fd, &st) != 0) {
    fail_errno(job, "cannot stat", -errno);
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    fail(job, "write_file: '%s' is not a regular file", job->path);
    goto out_close;
  }
  if (st.st_nlink > 1) {
    fail(job,
         "write_file: '%s' has more than one hard link; write_file does "
         "not write through hard links",
         job->path);
    goto out_close;
  }
  if (ftruncate(fd, 0) != 0) {
    fail_errno(job, "cannot truncate", -errno);
    goto out_close;
  }
  while (done < job->content_len) {
    ssize_t n;

    if (is_cancelled(job)) {
      fail(job, "%s", "write_file: cancelled");
      goto out_close;
    }
    n = write(fd, job->content + done,
              AL_MIN(job->content_len - done, (size_t)CHUNK));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      fail_errno(job, "cannot write", -errno);
      goto out_close;
    }
    done += (size_t)n;
  }
  al_buf_printf(&job->j.raw, "Wrote %zu bytes to %s", done, job->path);

out_close:
  if (close(fd) != 0 && !job->j.is_error) {
    fail_errno(job, "cannot close", -errno);
  }
}

/* ---- edit_file ----------------------------------------------------------- */

/* Reads the whole of fd (at most max bytes) into b. 0, AL_ETOOBIG, or a
 * negative errno; cancel and the time limit are checked per chunk. */
static int read_all(job_t *job, int fd, al_buf_t *b, size_t max) {
  for (;;) {
    ssize_t n;

    if (is_cancelled(job)) {
      return AL_ECANCELED;
    }
    if (over_time(job)) {
      return UV_ETIMEDOUT;
    }
    if (b->len >= max) {
      return AL_ETOOBIG;
    }
    if (al_buf_reserve(b, AL_MIN((size_t)CHUNK, max - b->len)) != 0) {
      return AL_ENOMEM;
    }
    n = read(fd, b->data + b->len, AL_MIN((size_t)CHUNK, max - b->len));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      return -errno;
    }
    if (n == 0) {
      return 0;
    }
    b->len += (size_t)n;
  }
}

/* Non-overlapping occurrences of needle in hay. */
static size_t count_matches(const char *hay, size_t hlen, const char *needle,
                            size_t nlen) {
  size_t n = 0;
  const char *p = hay;
  const char *end = hay + hlen;

  while ((size_t)(end - p) >= nlen) {
    const char *m = memmem(p, (size_t)(end - p), needle, nlen);

    if (m == NULL) {
      break;
    }
    n++;
    p = m + nlen;
  }
  return n;
}

static size_t count_lines(const char *s, size_t len) {
  size_t n = 0;
  size_t i;

  for (i = 0; i < len; i++) {
    n += s[i] == '\n';
  }
  return n + (len > 0 && s[len - 1] != '\n');
}

/* Start of line k (0-based) of s; len when there are fewer lines. */
static size_t line_start(const char *s, size_t len, size_t k) {
  size_t i = 0;

  while (k > 0 && i < len) {
    const char *nl = memchr(s + i, '\n', len - i);

    if (nl == NULL) {
      return len;
    }
    i = (size_t)(nl - s) + 1;
    k--;
  }
  return i;
}

/* Appends lines [from, to) of s, each after `mark`. */
static void diff_lines(al_buf_t *d, char mark, const char *s, size_t len,
                       size_t from, size_t to, size_t *budget) {
  size_t i = line_start(s, len, from);
  size_t k;

  for (k = from; k < to && i < len; k++) {
    const char *nl = memchr(s + i, '\n', len - i);
    size_t e = nl != NULL ? (size_t)(nl - s) : len;

    if (*budget == 0) {
      al_buf_printf(d, "... (%zu more lines)\n", to - k);
      return;
    }
    (*budget)--;
    al_buf_append(d, &mark, 1);
    al_buf_append(d, s + i, e - i);
    al_buf_append_str(d, "\n");
    if (nl == NULL) {
      al_buf_append_str(d, "\\ No newline at end of file\n");
    }
    i = e + 1;
  }
}

/* One unified-diff hunk covering everything between the common leading
 * and trailing lines of a and b, with 3 lines of context, at most 200
 * lines shown: a summary for the model and the user, not a patch. */
static void unified_diff(al_buf_t *d, const char *path, const char *a,
                         size_t alen, const char *b, size_t blen) {
  size_t la = count_lines(a, alen);
  size_t lb = count_lines(b, blen);
  size_t pre = 0;
  size_t suf = 0;
  size_t ia = 0;
  size_t ib = 0;
  size_t ctx0;
  size_t ea;
  size_t eb;
  size_t budget = 200;

  /* Common leading lines (compared as whole lines, newline included). */
  while (pre < la && pre < lb) {
    const char *na = memchr(a + ia, '\n', alen - ia);
    const char *nb = memchr(b + ib, '\n', blen - ib);
    size_t ea1 = na != NULL ? (size_t)(na - a) + 1 : alen;
    size_t eb1 = nb != NULL ? (size_t)(nb - b) + 1 : blen;

    if (ea1 - ia != eb1 - ib || memcmp(a + ia, b + ib, ea1 - ia) != 0) {
      break;
    }
    ia = ea1;
    ib = eb1;
    pre++;
  }
  /* Common trailing lines, not overlapping the prefix. */
  ea = alen;
  eb = blen;
  while (suf < la - pre && suf < lb - pre) {
    size_t sa = ea;
    size_t sb = eb;

    /* Step back over one line (ending at ea / eb). */
    if (sa > 0 && a[sa - 1] == '\n') {
      sa--;
    }
    while (sa > 0 && a[sa - 1] != '\n') {
      sa--;
    }
    if (sb > 0 && b[sb - 1] == '\n') {
      sb--;
    }
    while (sb > 0 && b[sb - 1] != '\n') {
      sb--;
    }
    if (ea - sa != eb - sb || memcmp(a + sa, b + sb, ea - sa) != 0) {
      break;
    }
    ea = sa;
    eb = sb;
    suf++;
  }
  ctx0 = pre > 3 ? pre - 3 : 0;
  {
    size_t tail = AL_MIN(suf, (size_t)3);
    size_t na = la - pre - suf;
    size_t nb = lb - pre - suf;
    size_t hunk_a = (pre - ctx0) + na + tail;
    size_t hunk_b = (pre - ctx0) + nb + tail;

    al_buf_printf(d, "--- a/%s\n+++ b/%s\n", path, path);
    al_buf_printf(d, "@@ -%zu,%zu +%zu,%zu @@\n",
                  hunk_a ? ctx0 + 1 : ctx0, hunk_a, hunk_b ? ctx0 + 1 : ctx0,
                  hunk_b);
    diff_lines(d, ' ', a, alen, ctx0, pre, &budget);
    diff_lines(d, '-', a, alen, pre, pre + na, &budget);
    diff_lines(d, '+', b, blen, pre, pre + nb, &budget);
    diff_lines(d, ' ', b, blen, pre + nb, pre + nb + tail, &budget);
  }
}

static void do_edit(job_t *job) {
  al_buf_t err;
  al_buf_t old;
  al_buf_t neu;
  al_path_t rp;
  struct stat st;
  size_t matches;
  size_t done = 0;
  int fd;
  int rc;

  al_buf_init(&old, job->tool->c.edit_max + 1);
  al_buf_init(&neu, SIZE_MAX / 4);
  al_buf_init(&err, 4096);
  rc = al__pathpolicy_resolve(&job->tool->c.policy, job->path, AL_PATH_CREATE,
                              &rp, &err);
  if (rc != 0) {
    fail_buf(job, &err);
    goto out_free;
  }
  /* O_CREAT only to make a new file: an existing one is opened as is, so
   * the read, the match and the write all use this one descriptor. */
  fd = al__pathpolicy_open(&job->tool->c.policy, rp.real,
                           O_RDWR | O_NONBLOCK |
                               (job->old_len == 0 ? O_CREAT : 0),
                           0644, &err);
  al_free(rp.real);
  if (fd < 0) {
    if (fd == UV_ENOENT) {
      fail(job,
           "edit_file: '%s' does not exist (an empty old_string creates a "
           "new file)",
           job->path);
    } else if (fd == UV_ELOOP) {
      fail(job,
           "edit_file: '%s' is a symlink; edit_file does not follow "
           "symlinks",
           job->path);
    } else if (fd == UV_EISDIR) {
      fail(job, "edit_file: '%s' is a directory", job->path);
    } else {
      fail_open(job, fd, &err);
    }
    goto out_free;
  }
  if (fstat(fd, &st) != 0) {
    fail_errno(job, "cannot stat", -errno);
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    fail(job, "edit_file: '%s' is not a regular file", job->path);
    goto out_close;
  }
  if (st.st_nlink > 1) {
    fail(job,
         "edit_file: '%s' has more than one hard link; edit_file does "
         "not write through hard links",
         job->path);
    goto out_close;
  }
  rc = read_all(job, fd, &old, job->tool->c.edit_max);
  if (rc == AL_ETOOBIG) {
    char num[32];

    snprintf(num, sizeof(num), "%zu", job->tool->c.edit_max);
    fail(job, "edit_file: '%s' is larger than %s bytes", job->path);
    al_buf_printf(&job->j.raw, " (edit_max: %s); use write_file", num);
    goto out_close;
  }
  if (rc == UV_ETIMEDOUT) {
    fail_time(job, "reading");
    goto out_close;
  }
  if (rc != 0) {
    fail_errno(job, "cannot read", rc);
    goto out_close;
  }
  if (job->old_len == 0) {
    if (old.len > 0) {
      fail(job,
           "edit_file: '%s' already exists and is not empty: old_string "
           "must name the text to replace",
           job->path);
      goto out_close;
    }
    matches = 1;
    rc = al_buf_append(&neu, job->content, job->content_len);
  } else {
    const char *p = old.data != NULL ? old.data : "";
    const char *end = p + old.len;

    matches = count_matches(p, old.len, job->old, job->old_len);
    if (matches == 0) {
      size_t k = 0;

      fail(job,
           "edit_file: old_string was not found in '%s' (it must match the "
           "file's text exactly, whitespace included)",
           job->path);
      /* A slice read with offset/limit shows "%6d\t" before each line: a
       * copied prefix is the usual cause. */
      while (k < job->old_len && job->old[k] == ' ') {
        k++;
      }
      if (k < job->old_len && job->old[k] >= '0' && job->old[k] <= '9') {
        while (k < job->old_len && job->old[k] >= '0' && job->old[k] <= '9') {
          k++;
        }
        if (k < job->old_len && job->old[k] == '\t') {
          al_buf_append_str(&job->j.raw,
                            "; leave out the line numbers and tab that "
                            "read_file shows before each line");
        }
      }
      goto out_close;
    }
    if (matches > 1 && !job->replace_all) {
      char num[32];

      snprintf(num, sizeof(num), "%zu", matches);
      fail(job, "edit_file: old_string matches %s times", num);
      al_buf_printf(&job->j.raw,
                    " in '%s'; add surrounding lines to make it unique, or "
                    "set replace_all to replace every one",
                    job->path);
      goto out_close;
    }
    rc = 0;
    while (rc == 0 && p < end) {
      const char *m = (size_t)(end - p) >= job->old_len
                          ? memmem(p, (size_t)(end - p), job->old,
                                   job->old_len)
                          : NULL;

      if (m == NULL) {
        rc = al_buf_append(&neu, p, (size_t)(end - p));
        break;
      }
      rc = al_buf_append(&neu, p, (size_t)(m - p));
      if (rc == 0) {
        rc = al_buf_append(&neu, job->content, job->content_len);
      }
      p = m + job->old_len;
    }
  }
  if (rc != 0) {
    fail(job, "%s", "edit_file: out of memory");
    goto out_close;
  }
  if (is_cancelled(job)) {
    fail(job, "%s", "edit_file: cancelled");
    goto out_close;
  }
  /* Rewritten in place through the same descriptor (the inode, its mode
   * and its other names stay; hard links were refused above). */
  if (ftruncate(fd, 0) != 0) {
    fail_errno(job, "cannot truncate", -errno);
    goto out_close;
  }
  while (done < neu.len) {
    ssize_t n = pwrite(fd, neu.data + done,
                       AL_MIN(neu.len - done, (size_t)CHUNK), (off_t)done);

    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      fail_errno(job, "cannot write", -errno);
      goto out_close;
    }
    done += (size_t)n;
  }
  if (job->old_len == 0) {
    al_buf_printf(&job->j.raw, "Created %s", job->path);
  } else {
    al_buf_printf(&job->j.raw, "Edited %s", job->path);
  }
  al_buf_printf(&job->j.raw, ": %zu replacement%s\n", matches,
                matches == 1 ? "" : "s");
  unified_diff(&job->j.raw, job->path, old.data != NULL ? old.data : "",
               old.len, neu.data != NULL ? neu.data : "", neu.len);
  if (job->j.raw.len > 0 && job->j.raw.data[job->j.raw.len - 1] == '\n') {
    job->j.raw.data[--job->j.raw.len] = '\0';
  }

out_close:
  if (close(fd) != 0 && !job->j.is_error) {
    fail_errno(job, "cannot close", -errno);
  }
out_free:
  al_buf_free(&err);
  al_buf_free(&old);
  al_buf_free(&neu);
}

/* ---- list_directory ------------------------------------------------------ */

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void do_list(job_t *job) {
  al_buf_t err;
  al_path_t rp;
  int rc;
  DIR *d;
  struct dirent *de;
  char **names = NULL;
  size_t n = 0;
  size_t cap = 0;
  size_t total = 0;
  size_t i;

  al_buf_init(&err, 4096);
  rc = al__pathpolicy_resolve(&job->tool->c.policy, job->path,
                              AL_PATH_EXISTING, &rp, &err);
  if (rc != 0) {
    fail_buf(job, &err);
    al_buf_free(&err);
    return;
  }
  rc = al__pathpolicy_open(&job->tool->c.policy, rp.real,
                           O_RDONLY | O_DIRECTORY, 0, &err);
  al_free(rp.real);
  if (rc == UV_ENOTDIR) {
    fail(job, "list_directory: '%s' is not a directory", job->path);
    al_buf_free(&err);
    return;
  }
  if (rc < 0) {
    fail_open(job, rc, &err);
    al_buf_free(&err);
    return;
  }
  al_buf_free(&err);
  d = fdopendir(rc);
  if (d == NULL) {
    rc = -errno;
    fail_errno(job, "cannot open", rc);
    return;
  }
  while ((de = readdir(d)) != NULL) {
    const char *nm = de->d_name;
    const char *mark = "";
    size_t nl;
    char *e;

    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) {
      continue;
    }
    total++;
    if (over_time(job)) {
      fail_time(job, "listing");
      goto out_free;
    }
    if (n >= LIST_HARD_MAX || is_cancelled(job)) {
      continue;
    }
    if (de->d_type == DT_DIR) {
      mark = "/";
    } else if (de->d_type == DT_LNK) {
      mark = "@";
    } else if (de->d_type == DT_UNKNOWN) {
      struct stat st;

      if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        mark = S_ISDIR(st.st_mode) ? "/" : S_ISLNK(st.st_mode) ? "@" : "";
      }
    }
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      char **nv = al_realloc(names, nc * sizeof(*nv));

      if (nv == NULL) {
        fail(job, "%s", "list_directory: out of memory");
        goto out_free;
      }
      names = nv;
      cap = nc;
    }
    nl = strlen(nm);
    e = al_malloc(nl + 2);
    if (e == NULL) {
      fail(job, "%s", "list_directory: out of memory");
      goto out_free;
    }
    memcpy(e, nm, nl);
    memcpy(e + nl, mark, strlen(mark) + 1);
    names[n++] = e;
  }
  if (is_cancelled(job)) {
    fail(job, "%s", "list_directory: cancelled");
    goto out_free;
  }
  if (n > 1) {
    qsort(names, n, sizeof(*names), cmp_names);
  }
  for (i = 0; i < n && i < job->tool->c.list_max; i++) {
    if (al_buf_append_str(&job->j.raw, names[i]) != 0 ||
        al_buf_append(&job->j.raw, "\n", 1) != 0) {
      fail(job, "%s", "list_directory: out of memory");
      goto out_free;
    }
  }
  if (total == 0) {
    al_buf_append_str(&job->j.raw, "(empty directory)");
  } else if (i < total) {
    al_buf_printf(&job->j.raw, "[LIST TRUNCATED: showing %zu of %zu entries]",
                  i, total);
  } else if (job->j.raw.len > 0) {
    job->j.raw.data[--job->j.raw.len] = '\0'; /* the last newline */
  }

out_free:
  for (i = 0; i < n; i++) {
    al_free(names[i]);
  }
  al_free(names);
  closedir(d);
}

/* ---- job plumbing -------------------------------------------------------- */

static void job_work(uv_work_t *req) {
  job_t *job = AL_CONTAINER_OF(req, job_t, j.req);

  job->j.t0 = uv_hrtime();
  if (!job->j.preset && !is_cancelled(job)) {
    switch (job->tool->kind) {
    case KIND_READ:
      do_read(job);
      break;
    case KIND_WRITE:
      do_write(job);
      break;
    case KIND_EDIT:
      do_edit(job);
      break;
    case KIND_LIST:
      do_list(job);
      break;
    case KIND_DONE:
      break;
    }
  }
  finalize(job);
}

static void job_free(al_tooljob_t *j) {
  job_t *job = AL_CONTAINER_OF(j, job_t, j);

  al__tooljob_release(j);
  al_free(job->path);
  al_free(job->content);
  al_free(job->old);
  al_free(job);
}

/* Argument errors, named after the parameter. */
static void preset(job_t *job, const char *fmt, const char *param) {
  al__tooljob_preset(&job->j, fmt, param);
}

/* A string parameter; false (and a preset error) when it is not one. */
static bool get_string(job_t *job, const json_t *in, const char *key,
                       bool required, char **out, size_t *len_out) {
  const json_t *v = json_object_get(in, key);
  size_t len;

  *out = NULL;
  if (v == NULL || json_is_null(v)) {
    if (required) {
      preset(job, "'%s' is required (a string)", key);
      return false;
    }
    return true;
  }
  if (!json_is_string(v)) {
    preset(job, "'%s' must be a string", key);
    return false;
  }
  len = json_string_length(v);
  if (len_out == NULL && strlen(json_string_value(v)) != len) {
    preset(job, "'%s' must not contain NUL characters", key);
    return false;
  }
  *out = al_malloc(len + 1);
  if (*out == NULL) {
    preset(job, "%s", "out of memory");
    return false;
  }
  memcpy(*out, json_string_value(v), len + 1);
  if (len_out != NULL) {
    *len_out = len;
  }
  return true;
}

static bool get_count(job_t *job, const json_t *in, const char *key,
                      long *out) {
  const json_t *v = json_object_get(in, key);

  if (v == NULL || json_is_null(v)) {
    return true;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 ||
      json_integer_value(v) > (json_int_t)1 << 40) {
    preset(job, "'%s' must be a positive integer", key);
    return false;
  }
  *out = (long)json_integer_value(v);
  return true;
}

static void parse_args(job_t *job, const json_t *in) {
  if (!json_is_object(in)) {
    preset(job, "%s", "the arguments must be a JSON object");
    return;
  }
  switch (job->tool->kind) {
  case KIND_READ:
    if (get_string(job, in, "path", true, &job->path, NULL) &&
        get_count(job, in, "offset", &job->offset)) {
      get_count(job, in, "limit", &job->limit);
    }
    job->numbered = json_object_get(in, "offset") != NULL ||
                    json_object_get(in, "limit") != NULL;
    break;
  case KIND_WRITE:
    if (get_string(job, in, "path", true, &job->path, NULL)) {
      get_string(job, in, "content", true, &job->content, &job->content_len);
    }
    break;
  case KIND_EDIT:
    if (get_string(job, in, "path", true, &job->path, NULL) &&
        get_string(job, in, "old_string", true, &job->old, &job->old_len) &&
        get_string(job, in, "new_string", true, &job->content,
                   &job->content_len)) {
      const json_t *ra = json_object_get(in, "replace_all");

      if (ra != NULL && !json_is_null(ra) && !json_is_boolean(ra)) {
        preset(job, "'%s' must be a boolean", "replace_all");
      } else if (json_is_true(ra)) {
        job->replace_all = true;
      }
      if (!job->j.preset && job->old_len == job->content_len &&
          memcmp(job->old, job->content, job->old_len) == 0) {
        preset(job, "%s", "old_string and new_string are the same");
      }
    }
    break;
  case KIND_LIST:
    if (get_string(job, in, "path", false, &job->path, NULL) &&
        job->path == NULL) {
      job->path = al_strdup(".");
      if (job->path == NULL) {
        preset(job, "%s", "out of memory");
      }
    }
    break;
  case KIND_DONE:
    if (get_string(job, in, "message", true, &job->content,
                   &job->content_len) &&
        al_buf_append(&job->j.raw, job->content, job->content_len) != 0) {
      preset(job, "%s", "out of memory");
    }
    break;
  }
}

static int fstool_start(al_tool_call_t *call) {
  const fstool_t *tool = AL_CONTAINER_OF(call->impl, fstool_t, impl);
  job_t *job = al_calloc(1, sizeof(*job));
  size_t raw_max;
  int rc;

  if (job == NULL) {
    return AL_ENOMEM;
  }
  job->tool = tool;
  job->offset = 1;
  /* The kept output, plus room for error texts naming long paths. */
  raw_max = tool->c.output_max + 16 * 1024;
  if (tool->kind == KIND_DONE || tool->kind == KIND_LIST) {
    raw_max = SIZE_MAX / 4;
  }
  al__tooljob_init(&job->j, call, tool->impl.name, raw_max, job_free);
  parse_args(job, call->input);
  rc = al__tooljob_queue(&job->j, tool->c.loop, job_work);
  if (rc != 0) {
    job_free(&job->j);
  }
  return rc;
}

static bool safe_yes(const al_tool_impl_t *impl, const json_t *input) {
  return true;
}

static int fstool_new(kind_t kind, const char *name,
                      const al_fstools_options_t *opts,
                      al_tool_impl_t **out) {
  fstool_t *t;
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
  t->impl.name = name;
  t->impl.is_concurrency_safe =
      (kind == KIND_READ || kind == KIND_LIST) ? safe_yes : NULL;
  t->impl.start = fstool_start;
  t->impl.cancel = al__tooljob_cancel;
  t->impl.data = NULL;
  *out = &t->impl;
  return 0;
}

int al__read_file_new(const al_fstools_options_t *opts, al_tool_impl_t **out) {
  return fstool_new(KIND_READ, "read_file", opts, out);
}

int al__write_file_new(const al_fstools_options_t *opts,
                       al_tool_impl_t **out) {
  return fstool_new(KIND_WRITE, "write_file", opts, out);
}

int al__edit_file_new(const al_fstools_options_t *opts,
                      al_tool_impl_t **out) {
  return fstool_new(KIND_EDIT, "edit_file", opts, out);
}

int al__list_directory_new(const al_fstools_options_t *opts,
                           al_tool_impl_t **out) {
  return fstool_new(KIND_LIST, "list_directory", opts, out);
}

int al__done_tool_new(const al_fstools_options_t *opts, al_tool_impl_t **out) {
  return fstool_new(KIND_DONE, "done", opts, out);
}

void al__fstool_free(al_tool_impl_t *impl) {
  fstool_t *t;

  if (impl == NULL) {
    return;
  }
  t = AL_CONTAINER_OF(impl, fstool_t, impl);
  al__fstool_conf_free(&t->c);
  al_free(t);
}
