/* Tests of the WHATWG event-stream parser (src/sse).
 *
 * The vectors in tests/data/sse (see its README.md) run whole, one byte at a
 * time, at every 2-way split and, when small, at every 3-way split. Every
 * chunk is copied next to a PROT_NONE page and overwritten after the call,
 * so an over-read faults and a pointer kept into the caller's bytes shows
 * up as garbage. A small reference interpreter, written line by line from
 * PROTOCOLS.md §1 with none of the parser's tricks, checks the vectors and
 * random streams a second way. */
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/common.h"
#include "sse/sse.h"
#include "test.h"

/* ---- log ------------------------------------------------------------- */

typedef struct {
  char *buf;
  size_t len;
  size_t cap;
  int events;
  int stop_at; /* on_event returns stop_rc for event number stop_at */
  int stop_rc;
} rec_t;

static void rec_init(rec_t *r) {
  memset(r, 0, sizeof(*r));
  r->stop_at = -1;
}

static void rec_free(rec_t *r) {
  free(r->buf);
  r->buf = NULL;
  r->len = r->cap = 0;
}

static void rec_put(rec_t *r, const char *p, size_t n) {
  if (r->len + n + 1 > r->cap) {
    size_t cap = r->cap ? r->cap : 256;

    while (cap < r->len + n + 1) {
      cap *= 2;
    }
    r->buf = realloc(r->buf, cap);
    ASSERT_NOT_NULL(r->buf);
    r->cap = cap;
  }
  memcpy(r->buf + r->len, p, n);
  r->len += n;
  r->buf[r->len] = '\0';
}

static void rec_str(rec_t *r, const char *s) {
  rec_put(r, s, strlen(s));
}

/* The escaping of tests/data/sse/README.md. */
static void rec_quoted(rec_t *r, const char *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t i;

  rec_put(r, "\"", 1);
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    char e[4];

    if (ch == '"' || ch == '\\') {
      e[0] = '\\';
      e[1] = (char)ch;
      rec_put(r, e, 2);
    } else if (ch == '\n') {
      rec_put(r, "\\n", 2);
    } else if (ch == '\r') {
      rec_put(r, "\\r", 2);
    } else if (ch == '\t') {
      rec_put(r, "\\t", 2);
    } else if (ch < 0x20 || ch >= 0x7f) {
      e[0] = '\\';
      e[1] = 'x';
      e[2] = hex[ch >> 4];
      e[3] = hex[ch & 15];
      rec_put(r, e, 4);
    } else {
      rec_put(r, (const char *)&p[i], 1);
    }
  }
  rec_put(r, "\"", 1);
}

static void log_event(rec_t *r, const char *type, size_t type_len,
                      bool has_type, const char *data, size_t data_len,
                      bool has_data, const char *id, size_t id_len, bool has_id,
                      const char *last, size_t last_len) {
  rec_str(r, "{\"event\":");
  if (has_type) {
    rec_quoted(r, type, type_len);
  } else {
    rec_str(r, "null");
  }
  rec_str(r, ",\"data\":");
  if (has_data) {
    rec_quoted(r, data, data_len);
  } else {
    rec_str(r, "null");
  }
  rec_str(r, ",\"id\":");
  if (has_id) {
    rec_quoted(r, id, id_len);
  } else {
    rec_str(r, "null");
  }
  rec_str(r, ",\"lastEventId\":");
  rec_quoted(r, last, last_len);
  rec_str(r, "}\n");
}

static void log_retry(rec_t *r, uint64_t ms) {
  char tmp[64];

  snprintf(tmp, sizeof(tmp), "{\"retry\":%" PRIu64 "}\n", ms);
  rec_str(r, tmp);
}

static void log_comment(rec_t *r, const char *text, size_t len) {
  rec_str(r, "{\"comment\":");
  rec_quoted(r, text, len);
  rec_str(r, "}\n");
}

/* ---- parser callbacks ---------------------------------------------------- */

static int on_event(void *data, const al_sse_event_t *ev) {
  rec_t *r = data;
  int n;

  /* Structural promises of sse.h, checked on every event. */
  ASSERT_NOT_NULL(ev->type);
  ASSERT_NOT_NULL(ev->data);
  ASSERT_NOT_NULL(ev->id);
  ASSERT_NOT_NULL(ev->last_event_id);
  if (!ev->has_type) {
    ASSERT_MEM_EQ(ev->type, ev->type_len, "message", 7);
  } else {
    ASSERT(ev->type_len > 0);
  }
  if (!ev->has_data) {
    ASSERT_EQ(ev->data_len, 0);
    ASSERT(ev->has_type);
  }
  if (ev->has_id) {
    ASSERT_MEM_EQ(ev->id, ev->id_len, ev->last_event_id, ev->last_event_id_len);
  }
  log_event(r, ev->type, ev->type_len, ev->has_type, ev->data, ev->data_len,
            ev->has_data, ev->id, ev->id_len, ev->has_id, ev->last_event_id,
            ev->last_event_id_len);
  n = r->events++;
  if (n == r->stop_at) {
    return r->stop_rc;
  }
  return 0;
}

static void on_retry(void *data, uint64_t ms) {
  log_retry(data, ms);
}

static void on_comment(void *data, const char *text, size_t len) {
  log_comment(data, text, len);
}

static void settings_default(al_sse_settings_t *s) {
  al_sse_settings_init(s);
  s->on_event = on_event;
  s->on_retry = on_retry;
  s->on_comment = on_comment;
}

/* ---- guard-page feeding -------------------------------------------------- */

/* [PROT_NONE page][n usable pages][PROT_NONE page] */
typedef struct {
  char *map;
  size_t map_len;
  char *lo; /* first usable byte */
  char *hi; /* one past the last usable byte */
} guard_t;

static void guard_init(guard_t *g, size_t size) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  size_t pages = (size + pg - 1) / pg;

  if (pages == 0) {
    pages = 1;
  }
  g->map_len = (pages + 2) * pg;
  g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT(g->map != MAP_FAILED);
  ASSERT_EQ(mprotect(g->map, pg, PROT_NONE), 0);
  ASSERT_EQ(mprotect(g->map + (pages + 1) * pg, pg, PROT_NONE), 0);
  g->lo = g->map + pg;
  g->hi = g->map + (pages + 1) * pg;
}

static void guard_free(guard_t *g) {
  munmap(g->map, g->map_len);
}

/* Feeds bytes from a copy that touches the upper guard page (align 0) or
 * the lower one (align 1), then scribbles over the copy. */
static int guard_feed(al_sse_parser_t *p, guard_t *g, const char *bytes,
                      size_t n, int align) {
  char *at = align == 0 ? g->hi - n : g->lo;
  int rc;

  ASSERT(n <= (size_t)(g->hi - g->lo));
  memcpy(at, bytes, n);
  rc = al_sse_feed(p, at, n);
  memset(at, 0xA5, n);
  return rc;
}

/* Feeds in[0..len) cut at cuts[0..ncuts) (ascending, may repeat: an empty
 * chunk), then finishes. Checks stickiness: once a call fails, every later
 * call returns the same value. Returns the final status. */
static int run_cuts(const al_sse_settings_t *s, const char *in, size_t len,
                    const size_t *cuts, size_t ncuts, int align, guard_t *g,
                    rec_t *r) {
  al_sse_parser_t p;
  size_t start = 0;
  size_t i;
  int rc = 0;
  int got;
  al_sse_settings_t st = *s;

  st.data = r;
  al_sse_init(&p, &st);
  for (i = 0; i <= ncuts; i++) {
    size_t stop = i < ncuts ? cuts[i] : len;

    ASSERT(stop >= start && stop <= len);
    got = guard_feed(&p, g, in + start, stop - start, align ^ (int)(i & 1));
    if (rc != 0) {
      ASSERT_EQ(got, rc);
    }
    rc = got;
    start = stop;
  }
  got = al_sse_finish(&p);
  if (rc != 0) {
    ASSERT_EQ(got, rc);
  }
  rc = got;
  /* Buffers never grow past their limits (plus the terminator). */
  ASSERT_LE(p.line.cap, p.settings.max_line + 1);
  ASSERT_LE(p.data.cap, p.settings.max_event + 1);
  al_sse_free(&p);
  return rc;
}

/* ---- reference interpreter ---------------------------------------------- */

/* Straight from PROTOCOLS.md §1: strip one BOM, cut the whole input into
 * lines, interpret each; the trailing unterminated line is dropped (or, with
 * flush_at_eof, interpreted and followed by a blank line). Limits: a line
 * longer than max_line, or a data buffer (without its final LF) longer than
 * max_event, stops with AL_ETOOBIG; an unterminated final line counts as
 * soon as its bytes are there, so it is checked as far as it goes. */
typedef struct {
  const al_sse_settings_t *s;
  rec_t *r;
  char *data; /* WHATWG data buffer, with the LF after every value */
  size_t data_len;
  char *type;
  size_t type_len;
  char *last;
  size_t last_len;
  bool has_id;
  bool seen_data;
} ref_t;

static void ref_set(char **dst, size_t *dlen, const char *p, size_t n) {
  free(*dst);
  *dst = malloc(n + 1);
  ASSERT_NOT_NULL(*dst);
  memcpy(*dst, p, n);
  *dlen = n;
}

static int ref_dispatch(ref_t *x) {
  int rc = 0;
  bool typed = x->type_len > 0;

  if (x->seen_data || (typed && x->s->dispatch_typed_without_data)) {
    size_t dlen = x->seen_data ? x->data_len - 1 : 0;

    log_event(x->r, typed ? x->type : "message", typed ? x->type_len : 7, typed,
              x->data ? x->data : "", dlen, x->seen_data,
              x->last ? x->last : "", x->has_id ? x->last_len : 0, x->has_id,
              x->last ? x->last : "", x->last_len);
    if (x->r->events++ == x->r->stop_at) {
      rc = x->r->stop_rc;
    }
  }
  x->data_len = 0;
  x->type_len = 0;
  x->seen_data = false;
  x->has_id = false;
  return rc;
}

static int ref_line(ref_t *x, const char *line, size_t len) {
  const char *colon;
  const char *name = line;
  const char *val;
  size_t nlen;
  size_t vlen;
  size_t i;

  if (len > x->s->max_line) {
    return AL_ETOOBIG;
  }
  if (len == 0) {
    return ref_dispatch(x);
  }
  if (line[0] == ':') {
    log_comment(x->r, line + 1, len - 1);
    return 0;
  }
  colon = memchr(line, ':', len);
  if (colon == NULL) {
    nlen = len;
    val = line + len;
    vlen = 0;
  } else {
    nlen = (size_t)(colon - line);
    val = colon + 1;
    vlen = len - nlen - 1;
    if (vlen > 0 && val[0] == ' ') {
      val++;
      vlen--;
    }
  }
  if (nlen == 4 && memcmp(name, "data", 4) == 0) {
    x->data = realloc(x->data, x->data_len + vlen + 1);
    ASSERT_NOT_NULL(x->data);
    memcpy(x->data + x->data_len, val, vlen);
    x->data_len += vlen;
    x->data[x->data_len++] = '\n';
    x->seen_data = true;
    if (x->data_len - 1 > x->s->max_event) {
      return AL_ETOOBIG;
    }
  } else if (nlen == 5 && memcmp(name, "event", 5) == 0) {
    ref_set(&x->type, &x->type_len, val, vlen);
  } else if (nlen == 2 && memcmp(name, "id", 2) == 0) {
    if (memchr(val, '\0', vlen) == NULL) {
      ref_set(&x->last, &x->last_len, val, vlen);
      x->has_id = true;
    }
  } else if (nlen == 5 && memcmp(name, "retry", 5) == 0) {
    char digits[64];
    uint64_t ms;

    if (vlen == 0) {
      return 0;
    }
    for (i = 0; i < vlen; i++) {
      if (val[i] < '0' || val[i] > '9') {
        return 0;
      }
    }
    /* Clamped: more than 20 significant digits cannot fit anyway. */
    while (vlen > 1 && val[0] == '0') {
      val++;
      vlen--;
    }
    if (vlen > 20) {
      ms = UINT64_MAX;
    } else {
      memcpy(digits, val, vlen);
      digits[vlen] = '\0';
      ms = strtoull(digits, NULL, 10); /* ULLONG_MAX on overflow */
    }
    log_retry(x->r, ms);
  }
  return 0;
}

static int ref_run(const al_sse_settings_t *s, const char *in, size_t len,
                   rec_t *r) {
  ref_t x;
  size_t i = 0;
  size_t j;
  int rc = 0;

  memset(&x, 0, sizeof(x));
  x.s = s;
  x.r = r;
  if (len >= 3 && memcmp(in, "\xEF\xBB\xBF", 3) == 0) {
    i = 3;
  }
  for (;;) {
    for (j = i; j < len && in[j] != '\r' && in[j] != '\n'; j++) {
    }
    if (j == len) {
      break;
    }
    rc = ref_line(&x, in + i, j - i);
    if (rc != 0) {
      goto out;
    }
    i = j + 1;
    if (in[j] == '\r' && i < len && in[i] == '\n') {
      i++;
    }
  }
  /* The unterminated rest in[i..len). */
  if (len - i > s->max_line) {
    rc = AL_ETOOBIG;
  } else if (s->flush_at_eof) {
    if (len > i) {
      rc = ref_line(&x, in + i, len - i);
    }
    if (rc == 0) {
      rc = ref_dispatch(&x);
    }
  } else if (len - i >= 6 && memcmp(in + i, "data:", 5) == 0) {
    /* The bytes of a data line already count against max_event. */
    size_t v = len - i - 5 - (in[i + 5] == ' ');
    size_t joined = x.seen_data ? x.data_len + v : v;

    if (joined > s->max_event) {
      rc = AL_ETOOBIG;
    }
  }
out:
  free(x.data);
  free(x.type);
  free(x.last);
  return rc;
}

/* ---- checking helpers ---------------------------------------------------- */

static const char *sv_name = ""; /* for failure messages */

static void expect_log(const rec_t *r, const char *want, const char *how) {
  if (strcmp(r->buf ? r->buf : "", want) != 0) {
    AL_TEST_FAIL("vector %s, %s:\n--- got:\n%s--- expected:\n%s", sv_name, how,
                 r->buf ? r->buf : "", want);
  }
}

static uint64_t rng_state;

static uint64_t rng(void) {
  /* xorshift64*: deterministic across platforms. */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

/* Runs in[] under many chunkings and requires the same log and status:
 * whole, byte by byte, every 2-way split, and nrand random chunkings. */
static void expect_all(const al_sse_settings_t *s, const char *in, size_t len,
                       const char *want, int want_rc, int nrand) {
  guard_t g;
  rec_t r;
  size_t *cuts = malloc((len + 1) * sizeof(*cuts));
  size_t i;
  size_t k;
  int a;
  int rc;
  char how[128];

  ASSERT_NOT_NULL(cuts);
  guard_init(&g, len);
  for (a = 0; a < 2; a++) {
    rec_init(&r);
    rc = run_cuts(s, in, len, NULL, 0, a, &g, &r);
    snprintf(how, sizeof(how), "whole, align %d", a);
    expect_log(&r, want, how);
    ASSERT_EQ(rc, want_rc);
    rec_free(&r);

    for (i = 0; i < len; i++) {
      cuts[i] = i + 1;
    }
    rec_init(&r);
    rc = run_cuts(s, in, len, cuts, len > 0 ? len - 1 : 0, a, &g, &r);
    snprintf(how, sizeof(how), "bytewise, align %d", a);
    expect_log(&r, want, how);
    ASSERT_EQ(rc, want_rc);
    rec_free(&r);
  }
  for (k = 0; k <= len; k++) {
    rec_init(&r);
    rc = run_cuts(s, in, len, &k, 1, (int)(k & 1), &g, &r);
    snprintf(how, sizeof(how), "split at %zu", k);
    expect_log(&r, want, how);
    ASSERT_EQ(rc, want_rc);
    rec_free(&r);
  }
  for (k = 0; k < (size_t)nrand; k++) {
    size_t n = 0;
    size_t at = 0;

    while (at < len) {
      at += 1 + (size_t)(rng() % (1 + rng() % 16));
      if (at > len) {
        at = len;
      }
      cuts[n++] = at;
    }
    rec_init(&r);
    rc = run_cuts(s, in, len, cuts, n, (int)(k & 1), &g, &r);
    snprintf(how, sizeof(how), "random chunking %zu", k);
    expect_log(&r, want, how);
    ASSERT_EQ(rc, want_rc);
    rec_free(&r);
  }
  guard_free(&g);
  free(cuts);
}

/* ---- vectors ----------------------------------------------------------- */

typedef struct {
  char name[128];
  char *in;
  size_t len;
  char *want;
} vec_t;

static int vec_cmp(const void *a, const void *b) {
  return strcmp(((const vec_t *)a)->name, ((const vec_t *)b)->name);
}

/* Loads every NAME.sse with its NAME.events, sorted by name. */
static vec_t *vec_load(size_t *count) {
  DIR *d = opendir(al_test_data_path("sse"));
  struct dirent *de;
  vec_t *v = NULL;
  size_t n = 0;
  char rel[300];

  ASSERT_NOT_NULL(d);
  while ((de = readdir(d)) != NULL) {
    size_t l = strlen(de->d_name);

    if (l < 5 || strcmp(de->d_name + l - 4, ".sse") != 0) {
      continue;
    }
    ASSERT(l - 4 < sizeof(v->name));
    v = realloc(v, (n + 1) * sizeof(*v));
    ASSERT_NOT_NULL(v);
    memcpy(v[n].name, de->d_name, l - 4);
    v[n].name[l - 4] = '\0';
    snprintf(rel, sizeof(rel), "sse/%s", de->d_name);
    v[n].in = al_test_read_file(al_test_data_path(rel), &v[n].len);
    ASSERT_NOT_NULL(v[n].in);
    snprintf(rel, sizeof(rel), "sse/%s.events", v[n].name);
    v[n].want = al_test_read_file(al_test_data_path(rel), NULL);
    if (v[n].want == NULL) {
      AL_TEST_FAIL("vector %s has no .events file", v[n].name);
    }
    n++;
  }
  closedir(d);
  /* A vector lost from the folder must not pass silently. */
  ASSERT_GE(n, 39);
  qsort(v, n, sizeof(*v), vec_cmp);
  *count = n;
  return v;
}

static void vec_free(vec_t *v, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    free(v[i].in);
    free(v[i].want);
  }
  free(v);
}

enum { RUN_WHOLE, RUN_BYTEWISE, RUN_SPLIT2, RUN_SPLIT3, RUN_REF };

static void vectors_run(int mode) {
  al_sse_settings_t s;
  size_t n;
  vec_t *v = vec_load(&n);
  size_t i;
  size_t j;
  size_t k;
  size_t cuts[2];
  size_t *all;
  guard_t g;
  rec_t r;
  int a;
  char how[128];

  settings_default(&s);
  for (i = 0; i < n; i++) {
    sv_name = v[i].name;
    guard_init(&g, v[i].len);
    switch (mode) {
      case RUN_WHOLE:
        for (a = 0; a < 2; a++) {
          rec_init(&r);
          ASSERT_EQ(run_cuts(&s, v[i].in, v[i].len, NULL, 0, a, &g, &r), 0);
          snprintf(how, sizeof(how), "whole, align %d", a);
          expect_log(&r, v[i].want, how);
          rec_free(&r);
        }
        break;
      case RUN_BYTEWISE:
        all = malloc((v[i].len + 1) * sizeof(*all));
        ASSERT_NOT_NULL(all);
        for (j = 0; j < v[i].len; j++) {
          all[j] = j + 1;
        }
        for (a = 0; a < 2; a++) {
          rec_init(&r);
          ASSERT_EQ(run_cuts(&s, v[i].in, v[i].len, all,
                             v[i].len > 0 ? v[i].len - 1 : 0, a, &g, &r),
                    0);
          snprintf(how, sizeof(how), "bytewise, align %d", a);
          expect_log(&r, v[i].want, how);
          rec_free(&r);
        }
        free(all);
        break;
      case RUN_SPLIT2:
        /* The alignment alternates with j, so each chunk meets a guard
         * page at both ends across neighbouring splits. */
        for (j = 0; j <= v[i].len; j++) {
          a = (int)(j & 1);
          rec_init(&r);
          ASSERT_EQ(run_cuts(&s, v[i].in, v[i].len, &j, 1, a, &g, &r), 0);
          snprintf(how, sizeof(how), "split at %zu, align %d", j, a);
          expect_log(&r, v[i].want, how);
          rec_free(&r);
        }
        break;
      case RUN_SPLIT3:
        if (v[i].len > 160) {
          break;
        }
        for (j = 0; j <= v[i].len; j++) {
          for (k = j; k <= v[i].len; k++) {
            cuts[0] = j;
            cuts[1] = k;
            rec_init(&r);
            ASSERT_EQ(run_cuts(&s, v[i].in, v[i].len, cuts, 2, 0, &g, &r), 0);
            snprintf(how, sizeof(how), "split at %zu and %zu", j, k);
            expect_log(&r, v[i].want, how);
            rec_free(&r);
          }
        }
        break;
      case RUN_REF:
        rec_init(&r);
        ASSERT_EQ(ref_run(&s, v[i].in, v[i].len, &r), 0);
        expect_log(&r, v[i].want, "reference interpreter");
        rec_free(&r);
        break;
    }
    guard_free(&g);
  }
  vec_free(v, n);
}

TEST_IMPL(sse_vectors_whole) {
  vectors_run(RUN_WHOLE);
  return 0;
}

TEST_IMPL(sse_vectors_bytewise) {
  vectors_run(RUN_BYTEWISE);
  return 0;
}

TEST_IMPL(sse_vectors_split2) {
  /* Every vector at every 2-way split: 3.2 s on a loaded 2-core machine
   * (issue 22). */
  al_test_timeout_s(30);
  vectors_run(RUN_SPLIT2);
  return 0;
}

TEST_IMPL(sse_vectors_split3) {
  vectors_run(RUN_SPLIT3);
  return 0;
}

/* ---- limits ------------------------------------------------------------ */

/* Feeds a string literal (which may contain NUL bytes). */
#define FEED(p, lit) al_sse_feed((p), (lit), sizeof(lit) - 1)

#define EV(data) \
  "{\"event\":null,\"data\":\"" data "\",\"id\":null,\"lastEventId\":\"\"}\n"

TEST_IMPL(sse_max_line) {
  al_sse_settings_t s;
  static const char at_limit[] = "data: 0123456789\n\n"; /* 16 bytes */
  static const char over[] =
      "data: 0123456789\n\ndata: 01234567890\n\n"
      "data: after\n\n";
  static const char over_comment[] =
      "data: a\n\n:0123456789abcdef\n"
      "data: b\n\n";
  static const char over_unknown[] = "data: a\n\nxxxxxxxxxxxxxxxxx\n\n";
  static const char over_eof[] = "data: a\n\ndata: 0123456789a";
  static const char over_cr[] = "data: a\r\rid: 0123456789abcd\r\r";
  static const char id_at_limit[] = "id: 0123456789ab\r\rdata: x\r\r";

  settings_default(&s);
  s.max_line = 16;
  sv_name = "max_line";
  rng_state = 0x9E3779B97F4A7C15ULL;
  expect_all(&s, at_limit, sizeof(at_limit) - 1, EV("0123456789"), 0, 50);
  expect_all(&s, over, sizeof(over) - 1, EV("0123456789"), AL_ETOOBIG, 50);
  expect_all(&s, over_comment, sizeof(over_comment) - 1, EV("a"), AL_ETOOBIG,
             50);
  expect_all(&s, over_unknown, sizeof(over_unknown) - 1, EV("a"), AL_ETOOBIG,
             50);
  /* An unterminated line that is too long fails too, not only at EOF. */
  expect_all(&s, over_eof, sizeof(over_eof) - 1, EV("a"), AL_ETOOBIG, 50);
  expect_all(&s, over_cr, sizeof(over_cr) - 1, EV("a"), AL_ETOOBIG, 50);
  expect_all(&s, id_at_limit, sizeof(id_at_limit) - 1,
             "{\"event\":null,\"data\":\"x\",\"id\":null,"
             "\"lastEventId\":\"0123456789ab\"}\n",
             0, 50);
  /* A tiny limit: the 6-byte look-ahead for "data:" must respect it. */
  s.max_line = 3;
  expect_all(&s, "id\n\ndata\n", 9, "", AL_ETOOBIG, 20);
  expect_all(&s, "id\n\nda", 6, "", 0, 20);
  return 0;
}

TEST_IMPL(sse_max_event) {
  al_sse_settings_t s;
  static const char fits[] = "data: 0123456789\n\ndata: 01234\ndata: 0123\n\n";
  static const char over_one[] = "data: a\n\ndata: 0123456789X\n\n";
  static const char over_join[] = "data: a\n\ndata: 01234\ndata: 01234\n\n";
  static const char over_empty[] = "data: a\n\ndata: 0123456789\ndata\n\n";
  static const char over_eof[] = "data: a\n\ndata: 0123\ndata: 0123456";

  settings_default(&s);
  s.max_event = 10;
  sv_name = "max_event";
  rng_state = 12345;
  expect_all(&s, fits, sizeof(fits) - 1, EV("0123456789") EV("01234\\n0123"), 0,
             50);
  expect_all(&s, over_one, sizeof(over_one) - 1, EV("a"), AL_ETOOBIG, 50);
  expect_all(&s, over_join, sizeof(over_join) - 1, EV("a"), AL_ETOOBIG, 50);
  /* The LF before an empty value counts. */
  expect_all(&s, over_empty, sizeof(over_empty) - 1, EV("a"), AL_ETOOBIG, 50);
  /* Data of an unterminated line counts once it has arrived. */
  expect_all(&s, over_eof, sizeof(over_eof) - 1, EV("a"), AL_ETOOBIG, 50);
  return 0;
}

TEST_IMPL(sse_etoobig_sticky) {
  al_sse_settings_t s;
  al_sse_parser_t p;
  rec_t r;
  char big[200];

  memset(big, 'x', sizeof(big));
  settings_default(&s);
  s.max_line = 64;
  rec_init(&r);
  s.data = &r;
  al_sse_init(&p, &s);
  ASSERT_EQ(FEED(&p, "data: a\n\n"), 0);
  ASSERT_EQ(r.events, 1);
  ASSERT_EQ(FEED(&p, "data: "), 0);
  ASSERT_EQ(al_sse_feed(&p, big, sizeof(big)), AL_ETOOBIG);
  ASSERT_EQ(p.error, AL_ETOOBIG);
  /* Valid input afterwards changes nothing. */
  ASSERT_EQ(FEED(&p, "\n\ndata: b\n\n"), AL_ETOOBIG);
  ASSERT_EQ(FEED(&p, ""), AL_ETOOBIG);
  ASSERT_EQ(al_sse_finish(&p), AL_ETOOBIG);
  ASSERT_EQ(r.events, 1);
  ASSERT_LE(p.line.cap, 65);
  ASSERT_LE(p.data.cap, s.max_event + 1);
  /* reset clears the error. */
  al_sse_reset(&p);
  ASSERT_EQ(FEED(&p, "data: c\n\n"), 0);
  ASSERT_EQ(r.events, 2);
  ASSERT_STR_EQ(r.buf, EV("a") EV("c"));
  /* An over-long line inside one chunk, never buffered. */
  ASSERT_EQ(al_sse_feed(&p, big, sizeof(big)), AL_ETOOBIG);
  ASSERT_EQ(al_sse_finish(&p), AL_ETOOBIG);
  al_sse_free(&p);
  rec_free(&r);
  return 0;
}

/* ---- deviation flags ---------------------------------------------------- */

TEST_IMPL(sse_flush_at_eof) {
  al_sse_settings_t s;
  static const char *inputs[] = {
      "data: a\n\ndata: b",
      "data: a\n\ndata: b\n",
      "data: a\n\ndata: b\r",
      "data: a\n\ndata: b\r\n",
      "data: a\n\ndata: x\ndata",
      "data: a\n\nevent: t\ndata: b",
      "data: a\n\nevent: t\n",
      "data: a\n\n",
      "data: a\n\nid: 5\ndata: b\nid: 6",
      "data: a\n\ndata: hello world, long enough to stream",
      "data: a\n\ndata:",
      "data: a\n\ndata: b\n\n\xEF\xBB",
  };
  static const char *flushed[] = {
      EV("a") EV("b"),
      EV("a") EV("b"),
      EV("a") EV("b"),
      EV("a") EV("b"),
      EV("a") EV("x\\n"),
      EV("a") "{\"event\":\"t\",\"data\":\"b\",\"id\":null,"
              "\"lastEventId\":\"\"}\n",
      EV("a"),
      EV("a"),
      EV("a") "{\"event\":null,\"data\":\"b\",\"id\":\"6\","
              "\"lastEventId\":\"6\"}\n",
      EV("a") EV("hello world, long enough to stream"),
      EV("a") EV(""),
      EV("a") EV("b"),
  };
  size_t i;

  settings_default(&s);
  rng_state = 777;
  sv_name = "flush_at_eof";
  for (i = 0; i < AL_ARRAY_SIZE(inputs); i++) {
    rec_t r;

    /* Off (WHATWG): the unterminated block is dropped. */
    s.flush_at_eof = false;
    expect_all(&s, inputs[i], strlen(inputs[i]),
               i == 11 ? EV("a") EV("b") : EV("a"), 0, 20);
    s.flush_at_eof = true;
    expect_all(&s, inputs[i], strlen(inputs[i]), flushed[i], 0, 20);
    /* The reference agrees. */
    rec_init(&r);
    ASSERT_EQ(ref_run(&s, inputs[i], strlen(inputs[i]), &r), 0);
    ASSERT_STR_EQ(r.buf ? r.buf : "", flushed[i]);
    rec_free(&r);
  }
  return 0;
}

TEST_IMPL(sse_dispatch_typed_without_data) {
  al_sse_settings_t s;
  static const char in[] =
      "event: ping\n\nevent:\n\nid: 1\n\nretry: 5\n\n"
      "event: a\ndata: x\n\nevent: b\r\n\r\n"
      ":c\n\ndata: y\n\nevent: z\n";
  static const char strict[] =
      "{\"retry\":5}\n"
      "{\"event\":\"a\",\"data\":\"x\",\"id\":null,\"lastEventId\":\"1\"}\n"
      "{\"comment\":\"c\"}\n"
      "{\"event\":null,\"data\":\"y\",\"id\":null,\"lastEventId\":\"1\"}\n";
  static const char typed[] =
      "{\"event\":\"ping\",\"data\":null,\"id\":null,\"lastEventId\":\"\"}\n"
      "{\"retry\":5}\n"
      "{\"event\":\"a\",\"data\":\"x\",\"id\":null,\"lastEventId\":\"1\"}\n"
      "{\"event\":\"b\",\"data\":null,\"id\":null,\"lastEventId\":\"1\"}\n"
      "{\"comment\":\"c\"}\n"
      "{\"event\":null,\"data\":\"y\",\"id\":null,\"lastEventId\":\"1\"}\n";
  static const char typed_flushed[] =
      "{\"event\":\"ping\",\"data\":null,\"id\":null,\"lastEventId\":\"\"}\n"
      "{\"retry\":5}\n"
      "{\"event\":\"a\",\"data\":\"x\",\"id\":null,\"lastEventId\":\"1\"}\n"
      "{\"event\":\"b\",\"data\":null,\"id\":null,\"lastEventId\":\"1\"}\n"
      "{\"comment\":\"c\"}\n"
      "{\"event\":null,\"data\":\"y\",\"id\":null,\"lastEventId\":\"1\"}\n"
      "{\"event\":\"z\",\"data\":null,\"id\":null,\"lastEventId\":\"1\"}\n";

  settings_default(&s);
  rng_state = 4242;
  sv_name = "dispatch_typed_without_data";
  expect_all(&s, in, sizeof(in) - 1, strict, 0, 30);
  s.dispatch_typed_without_data = true;
  expect_all(&s, in, sizeof(in) - 1, typed, 0, 30);
  /* Both flags: the block flushed at EOF follows the blank-line rules. */
  s.flush_at_eof = true;
  expect_all(&s, in, sizeof(in) - 1, typed_flushed, 0, 30);
  return 0;
}

/* ---- callbacks ---------------------------------------------------------- */

TEST_IMPL(sse_callback_stop) {
  al_sse_settings_t s;
  static const char in[] = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
  size_t k;

  settings_default(&s);
  sv_name = "callback_stop";
  /* Stop at the second event, at every split: the value comes back from
   * whichever call dispatched it, and stays. */
  for (k = 0; k <= sizeof(in) - 1; k++) {
    al_sse_parser_t p;
    rec_t r;
    int rc1;
    int rc2;

    rec_init(&r);
    r.stop_at = 1;
    r.stop_rc = 42;
    s.data = &r;
    al_sse_init(&p, &s);
    rc1 = al_sse_feed(&p, in, k);
    rc2 = al_sse_feed(&p, in + k, sizeof(in) - 1 - k);
    if (k <= 17) { /* the blank line of event 2 is byte 17 */
      ASSERT_EQ(rc1, 0);
    } else {
      ASSERT_EQ(rc1, 42);
    }
    ASSERT_EQ(rc2, 42);
    ASSERT_EQ(r.events, 2);
    ASSERT_STR_EQ(r.buf, EV("1") EV("2"));
    ASSERT_EQ(al_sse_finish(&p), 42);
    ASSERT_EQ(FEED(&p, "data: 4\n\n"), 42);
    ASSERT_EQ(r.events, 2);
    /* reset clears it. */
    al_sse_reset(&p);
    r.stop_at = -1;
    ASSERT_EQ(FEED(&p, "data: 5\n\n"), 0);
    ASSERT_EQ(r.events, 3);
    al_sse_free(&p);
    rec_free(&r);
  }
  /* A stop from the event flushed at EOF comes back from finish. */
  {
    al_sse_parser_t p;
    rec_t r;

    rec_init(&r);
    r.stop_at = 0;
    r.stop_rc = -1;
    s.data = &r;
    s.flush_at_eof = true;
    al_sse_init(&p, &s);
    ASSERT_EQ(FEED(&p, "data: x"), 0);
    ASSERT_EQ(al_sse_finish(&p), -1);
    ASSERT_EQ(al_sse_finish(&p), -1);
    ASSERT_EQ(r.events, 1);
    al_sse_free(&p);
    rec_free(&r);
  }
  return 0;
}

typedef struct {
  int count;
  char text[8][32];
  size_t len[8];
} comments_t;

static void collect_comment(void *data, const char *text, size_t len) {
  comments_t *c = data;

  ASSERT(c->count < 8 && len < 32);
  memcpy(c->text[c->count], text, len);
  c->len[c->count] = len;
  c->count++;
}

static int count_event(void *data, const al_sse_event_t *ev) {
  (void)ev;
  ((comments_t *)data)->count += 100;
  return 0;
}

TEST_IMPL(sse_on_comment) {
  al_sse_settings_t s;
  al_sse_parser_t p;
  comments_t c;
  static const char in[] =
      ":ping\r\n: keep-alive\r:\n:a\0b\n:: x\r\n"
      "data: y\n:after-data\n\n";
  size_t k;

  /* Every split gives the same comments, in order, NUL included. */
  for (k = 0; k <= sizeof(in) - 1; k++) {
    memset(&c, 0, sizeof(c));
    al_sse_settings_init(&s);
    s.on_event = count_event;
    s.on_comment = collect_comment;
    s.data = &c;
    al_sse_init(&p, &s);
    ASSERT_EQ(al_sse_feed(&p, in, k), 0);
    ASSERT_EQ(al_sse_feed(&p, in + k, sizeof(in) - 1 - k), 0);
    ASSERT_EQ(al_sse_finish(&p), 0);
    ASSERT_EQ(c.count, 106);
    ASSERT_MEM_EQ(c.text[0], c.len[0], "ping", 4);
    ASSERT_MEM_EQ(c.text[1], c.len[1], " keep-alive", 11);
    ASSERT_EQ(c.len[2], 0);
    ASSERT_MEM_EQ(c.text[3], c.len[3], "a\0b", 3);
    ASSERT_MEM_EQ(c.text[4], c.len[4], ": x", 3);
    ASSERT_MEM_EQ(c.text[5], c.len[5], "after-data", 10);
    al_sse_free(&p);
  }
  /* Without on_comment (and on_retry) comments are simply skipped. */
  memset(&c, 0, sizeof(c));
  al_sse_settings_init(&s);
  s.on_event = count_event;
  s.data = &c;
  al_sse_init(&p, &s);
  ASSERT_EQ(al_sse_feed(&p, in, sizeof(in) - 1), 0);
  ASSERT_EQ(FEED(&p, "retry: 10\n"), 0);
  ASSERT(p.has_retry);
  ASSERT_EQ(p.retry_ms, 10);
  ASSERT_EQ(c.count, 100);
  al_sse_free(&p);
  return 0;
}

TEST_IMPL(sse_reset) {
  al_sse_settings_t s;
  al_sse_parser_t p;
  rec_t r;

  settings_default(&s);
  rec_init(&r);
  s.data = &r;
  s.max_line = 100;
  al_sse_init(&p, &s);
  /* Leave every kind of state behind: BOM done, last id, retry, a pending
   * type, data, a partial data line and a pending CR. */
  ASSERT_EQ(FEED(&p, "\xEF\xBB\xBFid: 5\nretry: 9\n\nevent: t\n"), 0);
  ASSERT_EQ(FEED(&p, "data: 1\ndata: partial"), 0);
  ASSERT(p.line_is_data);
  al_sse_reset(&p);
  ASSERT_EQ(p.bom_state, 0);
  ASSERT(!p.skip_lf && !p.has_id && !p.has_data && !p.has_retry);
  ASSERT(!p.line_is_data);
  ASSERT_EQ(p.retry_ms, 0);
  ASSERT_EQ(p.line.len + p.data.len + p.type.len + p.last_id.len, 0);
  ASSERT_EQ(p.settings.max_line, 100);
  ASSERT(p.settings.on_event == on_event);
  /* A BOM is expected (and skipped) again; nothing of the old stream
   * leaks: no type, no data, no last id. */
  ASSERT_EQ(FEED(&p, "\xEF\xBB"), 0);
  ASSERT_EQ(FEED(&p,
                 "\xBF"
                 "data: x\n\n"),
            0);
  ASSERT_STR_EQ(r.buf, "{\"retry\":9}\n" EV("x"));
  /* A pending CR is forgotten: after reset an LF is a line end. */
  ASSERT_EQ(FEED(&p, "data: y\r"), 0);
  ASSERT(p.skip_lf);
  al_sse_reset(&p);
  ASSERT(!p.skip_lf);
  ASSERT_EQ(FEED(&p, "\ndata: z\n\n"), 0);
  ASSERT_EQ(al_sse_finish(&p), 0);
  ASSERT_STR_EQ(r.buf, "{\"retry\":9}\n" EV("x") EV("z"));
  /* finish then reset: a second stream on the same parser. */
  al_sse_reset(&p);
  ASSERT_EQ(FEED(&p,
                 "\xEF\xBB\xBF"
                 "data: w\n\n"),
            0);
  ASSERT_STR_EQ(r.buf, "{\"retry\":9}\n" EV("x") EV("z") EV("w"));
  al_sse_free(&p);
  /* free leaves a usable, empty parser; free twice is harmless. */
  al_sse_free(&p);
  rec_free(&r);
  return 0;
}

TEST_IMPL(sse_bom_split) {
  al_sse_settings_t s;
  al_sse_parser_t p;
  rec_t r;

  settings_default(&s);
  rec_init(&r);
  s.data = &r;
  al_sse_init(&p, &s);
  ASSERT_EQ(FEED(&p, "\xEF"), 0);
  ASSERT_EQ(FEED(&p, ""), 0);
  ASSERT_EQ(FEED(&p, "\xBB"), 0);
  ASSERT_EQ(FEED(&p, "\xBF"), 0);
  ASSERT_EQ(FEED(&p,
                 "data: 1\n\n\xEF\xBB\xBF"
                 "data: 2\n\n"),
            0);
  ASSERT_EQ(al_sse_finish(&p), 0);
  ASSERT_STR_EQ(r.buf, EV("1"));
  /* Two BOM bytes, then not the third: they are text of the first line. */
  al_sse_reset(&p);
  rec_free(&r);
  rec_init(&r);
  ASSERT_EQ(FEED(&p, "\xEF\xBB"), 0);
  ASSERT_EQ(FEED(&p, "data: 1\n\ndata: 2\n\n"), 0);
  ASSERT_STR_EQ(r.buf, EV("2"));
  /* ... also when the mismatching byte ends the line. */
  al_sse_reset(&p);
  rec_free(&r);
  rec_init(&r);
  ASSERT_EQ(FEED(&p, "\xEF"), 0);
  ASSERT_EQ(FEED(&p, "\n\ndata: 3\n\n"), 0);
  ASSERT_STR_EQ(r.buf, EV("3"));
  al_sse_free(&p);
  rec_free(&r);
  return 0;
}

/* ---- randomized differential test -------------------------------------- */

typedef struct {
  const char *const *tok;
  const size_t *len;
  size_t n;
} toks_t;

static size_t random_stream(const toks_t *t, char *out, size_t cap) {
  size_t n = 0;
  size_t count = (size_t)(rng() % 60);
  size_t i;

  for (i = 0; i < count; i++) {
    size_t k = (size_t)(rng() % t->n);

    if (n + t->len[k] > cap) {
      break;
    }
    memcpy(out + n, t->tok[k], t->len[k]);
    n += t->len[k];
  }
  return n;
}

/* Random streams of t's tokens against the reference interpreter, whole,
 * bytewise and at random cuts, in every settings variant. The reference
 * is itself checked against the golden vectors first: on its own that
 * check tests only this file's interpreter (it was once a ctest case that
 * no change to the parser could fail); here it keeps a wrong oracle from
 * weakening the differential. */
static void differential(const toks_t *t, uint64_t seed) {
  al_sse_settings_t s;
  char in[512];
  size_t cuts[512];
  guard_t g;
  int iter;
  int variant;

  vectors_run(RUN_REF);
  rng_state = seed;
  guard_init(&g, sizeof(in));
  sv_name = "random";
  for (iter = 0; iter < 3000; iter++) {
    size_t len = random_stream(t, in, sizeof(in));

    for (variant = 0; variant < 4; variant++) {
      rec_t want;
      rec_t got;
      int want_rc;
      int rc;
      int j;

      settings_default(&s);
      s.flush_at_eof = (variant & 1) != 0;
      s.dispatch_typed_without_data = (variant & 2) != 0;
      /* Small limits in a quarter of the runs, to exercise AL_ETOOBIG. */
      if (rng() % 4 == 0) {
        s.max_line = 1 + (size_t)(rng() % 12);
        s.max_event = 1 + (size_t)(rng() % 12);
      }
      rec_init(&want);
      want_rc = ref_run(&s, in, len, &want);
      for (j = 0; j < 6; j++) {
        size_t n = 0;
        size_t at = 0;

        if (j == 1) {
          for (at = 1; at < len; at++) {
            cuts[n++] = at;
          }
        } else if (j > 1) {
          while (at < len) {
            at += (size_t)(rng() % 9);
            if (at > len) {
              at = len;
            }
            cuts[n++] = at;
          }
        }
        rec_init(&got);
        rc = run_cuts(&s, in, len, cuts, n, j & 1, &g, &got);
        if (rc != want_rc ||
            strcmp(got.buf ? got.buf : "", want.buf ? want.buf : "") != 0) {
          size_t i;

          fprintf(stderr, "stream (%zu bytes):", len);
          for (i = 0; i < len; i++) {
            fprintf(stderr, " %02x", (unsigned char)in[i]);
          }
          fprintf(stderr,
                  "\nvariant %d, max_line %zu, max_event %zu, "
                  "chunking %d, rc %d want %d\n",
                  variant, s.max_line, s.max_event, j, rc, want_rc);
          AL_TEST_FAIL("--- got:\n%s--- reference:\n%s", got.buf ? got.buf : "",
                       want.buf ? want.buf : "");
        }
        rec_free(&got);
      }
      rec_free(&want);
    }
  }
  guard_free(&g);
}

TEST_IMPL(sse_random_differential) {
  static const char *const tok[] = {"data", "event", "id",           "retry",
                                    ":",    " ",     "\r",           "\n",
                                    "x",    "\0",    "\xEF\xBB\xBF", "\xEF",
                                    "7",    "data:", "\n\n",         "\r\n",
                                    "  ",   "\t",    "data: x\n",    "0"};
  static const size_t tok_len[] = {4, 5, 2, 5, 1, 1, 1, 1, 1, 1,
                                   3, 1, 1, 5, 2, 2, 2, 1, 8, 1};
  toks_t t = {tok, tok_len, AL_ARRAY_SIZE(tok)};

  differential(&t, 0x5EED5EED5EEDULL);
  return 0;
}

/* Mostly whole `id:`/`event:`/`data:` blocks, the shape al_sse_feed
 * dispatches on its fast path, with what must make it step aside or be
 * handled as the general path does: a CR, a second data line, fields in
 * another order, an id with a NUL, a comment, a cut, an empty type or
 * value, limits. */
TEST_IMPL(sse_random_differential_blocks) {
  static const char *const tok[] = {
      "event: t\n", "event:\n",  "event:  u\n", "data: {\"a\":1}\n",
      "data:x\n",   "data:\n",   "data: \n",    "\n",
      "\n",         "\n",        "data: v\n\n", "event: t\ndata: w\n\n",
      "\r",         "\r\n",      "id: 1\n",     ": c\n",
      "event: ",    "data: ",    "x",          "\0",
      "id: ",       "id:7\n"};
  static const size_t tok_len[] = {9, 7, 10, 14, 7, 6, 7, 1, 1, 1, 9,
                                   18, 1, 2, 6, 4, 7, 6, 1, 1, 4, 5};
  toks_t t = {tok, tok_len, AL_ARRAY_SIZE(tok)};

  /* A long random differential run: 0.4 s of CPU, 2.5 s on a loaded 2-core
   * machine (issue 22). */
  al_test_timeout_s(30);
  differential(&t, 0xB10C5B10C5ULL);
  return 0;
}

/* ---- allocation failures ------------------------------------------------ */

/* Fails allocation number fail_at (1-based) through the al_ hook. */
static int alloc_count;
static int alloc_fail_at;

static void *fail_malloc(size_t n) {
  return ++alloc_count == alloc_fail_at ? NULL : malloc(n);
}

static void *fail_realloc(void *p, size_t n) {
  return ++alloc_count == alloc_fail_at ? NULL : realloc(p, n);
}

static void *fail_calloc(size_t c, size_t n) {
  return ++alloc_count == alloc_fail_at ? NULL : calloc(c, n);
}

TEST_IMPL(sse_alloc_failure) {
  static const char *const names[] = {"anthropic-stream", "id-sticky",
                                      "long-event", "bom-partial"};
  al_sse_settings_t s;
  size_t i;

  ASSERT_EQ(al_set_allocator(fail_malloc, fail_realloc, fail_calloc, free), 0);
  settings_default(&s);
  for (i = 0; i < AL_ARRAY_SIZE(names); i++) {
    char rel[128];
    size_t len;
    char *in;
    char *want;
    size_t *cuts;
    size_t j;
    guard_t g;
    bool passed = false;

    sv_name = names[i];
    snprintf(rel, sizeof(rel), "sse/%s.sse", names[i]);
    in = al_test_read_file(al_test_data_path(rel), &len);
    snprintf(rel, sizeof(rel), "sse/%s.events", names[i]);
    want = al_test_read_file(al_test_data_path(rel), NULL);
    ASSERT(in != NULL && want != NULL);
    /* Small chunks, so lines are buffered and blocks outlive chunks. */
    cuts = malloc((len / 7 + 1) * sizeof(*cuts));
    ASSERT_NOT_NULL(cuts);
    for (j = 0; (j + 1) * 7 < len; j++) {
      cuts[j] = (j + 1) * 7;
    }
    guard_init(&g, len);
    for (alloc_fail_at = 1; !passed; alloc_fail_at++) {
      rec_t r;
      int rc;

      ASSERT(alloc_fail_at < 1000);
      alloc_count = 0;
      rec_init(&r);
      rc = run_cuts(&s, in, len, cuts, j, 0, &g, &r);
      if (alloc_count < alloc_fail_at) {
        /* Nothing failed: the full, correct log. */
        ASSERT_EQ(rc, 0);
        expect_log(&r, want, "no allocation failed");
        passed = true;
      } else {
        /* The failure surfaces as AL_ENOMEM (sticky, run_cuts checks), and
         * what came before it is a prefix of the golden log. */
        ASSERT_EQ(rc, AL_ENOMEM);
        ASSERT(r.len <= strlen(want));
        ASSERT(r.len == 0 || memcmp(r.buf, want, r.len) == 0);
      }
      rec_free(&r);
    }
    /* The loop did inject failures (line, data, type, id buffers). */
    ASSERT_GE(alloc_fail_at, 4);
    guard_free(&g);
    free(cuts);
    free(in);
    free(want);
  }
  return 0;
}

/* retry: the exact digits of the last valid value, beyond uint64_t too
 * (retry_ms clamps); leading zeros stripped, "0" for all zeros; an invalid
 * value keeps the previous one; split across chunks gives the same. */
TEST_IMPL(sse_retry_digits) {
  static const struct {
    const char *in;
    const char *digits; /* NULL: no valid retry */
    uint64_t ms;
  } cases[] = {
      {"retry: 10\n", "10", 10},
      {"retry: 0007\n", "7", 7},
      {"retry: 0000\n", "0", 0},
      {"retry: 9223372036854775808\n", "9223372036854775808",
       9223372036854775808ULL},
      {"retry: 18446744073709551615\n", "18446744073709551615", UINT64_MAX},
      {"retry: 100000000000000000000000000\n", "100000000000000000000000000",
       UINT64_MAX},
      {"retry: 00018446744073709551616\nretry: 1x\nretry:\n",
       "18446744073709551616", UINT64_MAX},
      {"retry: x\n", NULL, 0},
  };
  al_sse_settings_t s;
  al_sse_parser_t p;
  size_t i;
  size_t cut;
  int c = 0;

  for (i = 0; i < AL_ARRAY_SIZE(cases); i++) {
    size_t n = strlen(cases[i].in);

    for (cut = 0; cut <= n; cut++) {
      const char *d;
      size_t dlen;

      al_sse_settings_init(&s);
      s.on_event = count_event;
      s.data = &c;
      al_sse_init(&p, &s);
      ASSERT_EQ(al_sse_feed(&p, cases[i].in, cut), 0);
      ASSERT_EQ(al_sse_feed(&p, cases[i].in + cut, n - cut), 0);
      ASSERT_EQ(al_sse_finish(&p), 0);
      d = al_sse_retry_digits(&p, &dlen);
      if (cases[i].digits == NULL) {
        ASSERT(!p.has_retry);
        ASSERT(d == NULL);
      } else {
        ASSERT(p.has_retry);
        ASSERT_EQ(p.retry_ms, cases[i].ms);
        ASSERT_MEM_EQ(d, dlen, cases[i].digits, strlen(cases[i].digits));
      }
      al_sse_reset(&p);
      ASSERT(al_sse_retry_digits(&p, &dlen) == NULL);
      al_sse_free(&p);
    }
  }
  return 0;
}
