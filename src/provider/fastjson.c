/* JSON fast path for the hot delta events, plus the jansson-loading
 * helpers the decoders share (the UTF-8 helpers are in common/utf8.c).
 *
 * A jansson DOM per small event costs ~1.7 us, more than the whole budget
 * of the streaming pipeline, so the three hot shapes
 *   {"type":"content_block_delta","index":N,"delta":{"type":"text_delta",
 *    "text":"..."}}   (and thinking_delta/"thinking",
 *                      input_json_delta/"partial_json")
 * are recognised by a small validating scanner that allocates nothing: the
 * text is returned as a slice of the input when it has no escapes, or
 * decoded into a reusable scratch buffer. It accepts whitespace anywhere,
 * any key order and extra keys whose values are scalars. Anything else --
 * nested extra values, escaped keys, duplicate keys, non-integer indexes,
 * trailing bytes -- returns 0 and the caller uses jansson, so the fast path
 * never has to be a general JSON parser (SPEC §1: never hand-roll JSON).
 * Everything the fast path accepts it validates as jansson would (string
 * escapes, control characters, UTF-8 including overlongs and encoded
 * surrogates, number grammar), so both paths give identical results.
 *
 * Lone surrogate escapes: jansson rejects "\ud83d" outright, but a model's
 * text delta may end in the first half of a pair whose second half starts
 * the next delta. Both paths report a high surrogate escape that ends the
 * string (trail_hi) and a low one that starts it (lead_lo) instead of
 * emitting them, and the aggregator pairs them across deltas of the same
 * block; every other lone surrogate becomes U+FFFD. The UTF-8 helpers live
 * in common/utf8.c (the loop and the tools use them too). */
#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/utf8.h"
#include "provider/provider.h"

/* ---- lone-surrogate rewriting before jansson ----------------------------- */

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/* Reads \uXXXX at p; -1 when p does not start a valid \u escape. The
 * backslash is checked too: callers probe for the low half of a surrogate
 * pair right after a high one, where "\ud83d^ude0e" must not pair. */
static long read_u_escape(const char *p, const char *end) {
  long v = 0;
  int i;

  if (end - p < 6 || p[0] != '\\' || p[1] != 'u') {
    return -1;
  }
  for (i = 2; i < 6; i++) {
    int h = hexval((unsigned char)p[i]);
    if (h < 0) {
      return -1;
    }
    v = (v << 4) | h;
  }
  return v;
}

/* Is the string whose opening quote is at q the value of one of the hot
 * text keys ("text", "thinking", "partial_json")? Looks back over
 * `"key" ws : ws`. */
static bool is_hot_value(const char *data, const char *q,
                         const char *only_key) {
  static const char *const all[] = {"text", "thinking", "partial_json"};
  const char *const one[] = {only_key, only_key, only_key};
  const char *const *keys = only_key != NULL ? one : all;
  const char *p = q;
  size_t i;

  while (p > data && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' ||
                      p[-1] == '\r')) {
    p--;
  }
  if (p == data || p[-1] != ':') {
    return false;
  }
  p--;
  while (p > data && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' ||
                      p[-1] == '\r')) {
    p--;
  }
  if (p == data || p[-1] != '"') {
    return false;
  }
  p--; /* at the closing quote of the key */
  for (i = 0; i < AL_ARRAY_SIZE(all); i++) {
    size_t kl = strlen(keys[i]);
    if ((size_t)(p - data) >= kl + 1 && memcmp(p - kl, keys[i], kl) == 0 &&
        p[-(long)kl - 1] == '"') {
      return true;
    }
  }
  return false;
}

/* Returns a rewritten copy (al_malloc) when the input has lone surrogate
 * escapes, else NULL with *needed false. Boundary surrogates of hot text
 * values are removed and reported when lead/trail are non-NULL; all others
 * become \uFFFD. Backslashes only occur inside JSON strings, so walking
 * escapes left to right is string-aware enough. */
/* May boundary marks be used in data? Not when it already holds U+FDD0 or
 * U+FDD1 in any spelling: a mark must never be confused with text. */
static bool marks_usable(const char *data, size_t len) {
  const char *p = data;
  const char *end = data + len;

  if (memmem(data, len, "\xEF\xB7\x90", 3) != NULL ||
      memmem(data, len, "\xEF\xB7\x91", 3) != NULL) {
    return false;
  }
  while ((p = memchr(p, '\\', (size_t)(end - p))) != NULL) {
    long v = read_u_escape(p, end);

    if (v == AL_MARK_HI || v == AL_MARK_LO) {
      return false;
    }
    p += v >= 0 ? 6 : 2;
    if (p >= end) {
      break;
    }
  }
  return true;
}

/* Appends the UTF-8 of a boundary mark: the marker code point, then the
 * surrogate's 10 payload bits as U+F0000 + bits. 7 bytes. */
static int put_mark(al_buf_t *b, uint32_t marker, uint32_t payload) {
  char m[7];

  m[0] = (char)0xEF;
  m[1] = (char)0xB7;
  m[2] = (char)(marker == AL_MARK_HI ? 0x90 : 0x91);
  m[3] = (char)0xF3;
  m[4] = (char)0xB0;
  m[5] = (char)(0x80 | ((payload >> 6) & 0x0F));
  m[6] = (char)(0x80 | (payload & 0x3F));
  return al_buf_append(b, m, sizeof(m));
}

static bool is_mark(const unsigned char *p, unsigned char which) {
  return p[0] == 0xEF && p[1] == 0xB7 && p[2] == which && p[3] == 0xF3 &&
         p[4] == 0xB0 && (p[5] & 0xF0) == 0x80 && (p[6] & 0xC0) == 0x80;
}

static uint32_t mark_payload(const unsigned char *p) {
  return ((uint32_t)(p[5] & 0x0F) << 6) | (uint32_t)(p[6] & 0x3F);
}

void al__marks_strip(const char **s, size_t *n, uint32_t *lead_lo,
                     uint32_t *trail_hi) {
  const unsigned char *p = (const unsigned char *)*s;

  *lead_lo = 0;
  *trail_hi = 0;
  if (*n >= AL_MARK_LEN && is_mark(p, 0x91)) {
    *lead_lo = 0xDC00 + mark_payload(p);
    *s += AL_MARK_LEN;
    *n -= AL_MARK_LEN;
    p += AL_MARK_LEN;
  }
  if (*n >= AL_MARK_LEN && is_mark(p + *n - AL_MARK_LEN, 0x90)) {
    *trail_hi = 0xD800 + mark_payload(p + *n - AL_MARK_LEN);
    *n -= AL_MARK_LEN;
  }
}

int al__marks_append(al_buf_t *b, uint32_t *pending_hi, const char *s,
                     size_t n, bool marks) {
  uint32_t lo = 0;
  uint32_t hi = 0;
  int rc = 0;

  if (marks) {
    al__marks_strip(&s, &n, &lo, &hi);
  }
  if (*pending_hi != 0 && lo == 0 && n == 0 && hi == 0) {
    return 0; /* an empty piece: the high half keeps waiting */
  }
  if (*pending_hi != 0 && lo != 0) {
    rc = al__utf8_put(b, 0x10000 + ((*pending_hi - 0xD800) << 10) +
                             (lo - 0xDC00));
  } else if (*pending_hi != 0 || lo != 0) {
    rc = al_buf_append(b, "\xEF\xBF\xBD", 3);
  }
  if (rc == 0 && n > 0) {
    rc = al_buf_append(b, s, n);
  }
  *pending_hi = hi;
  return rc;
}

/* Replaces the marks of one string value by U+FFFD. */
static int unmark_string(json_t *str) {
  const char *s = json_string_value(str);
  size_t n = json_string_length(str);
  uint32_t lo;
  uint32_t hi;
  al_buf_t b;
  int rc = 0;

  if (n < AL_MARK_LEN) {
    return 0;
  }
  al__marks_strip(&s, &n, &lo, &hi);
  if (lo == 0 && hi == 0) {
    return 0;
  }
  al_buf_init(&b, n + 16);
  if ((lo != 0 && al_buf_append(&b, "\xEF\xBF\xBD", 3) != 0) ||
      al_buf_append(&b, s, n) != 0 ||
      (hi != 0 && al_buf_append(&b, "\xEF\xBF\xBD", 3) != 0) ||
      json_string_setn(str, b.data, b.len) != 0) {
    rc = AL_ENOMEM;
  }
  al_buf_free(&b);
  return rc;
}

int al__marks_clear(json_t *v, json_t *const *keep, size_t nkeep) {
  size_t i;
  const char *k;
  json_t *x;
  int rc;

  switch (json_typeof(v)) {
  case JSON_STRING:
    for (i = 0; i < nkeep; i++) {
      if (keep[i] == v) {
        return 0;
      }
    }
    return unmark_string(v);
  case JSON_OBJECT:
    json_object_foreach(v, k, x) {
      if ((rc = al__marks_clear(x, keep, nkeep)) != 0) {
        return rc;
      }
    }
    return 0;
  case JSON_ARRAY:
    json_array_foreach(v, i, x) {
      if ((rc = al__marks_clear(x, keep, nkeep)) != 0) {
        return rc;
      }
    }
    return 0;
  default:
    return 0;
  }
}

static char *rewrite_surrogates(const char *data, size_t len, size_t *outlen,
                                bool *needed, bool *nomem, uint32_t *lead_lo,
                                uint32_t *trail_hi, bool *marked,
                                const char *only_key) {
  const char *p = data;
  const char *end = data + len;
  const char *run = data;
  const char *raw_quote = NULL; /* last unescaped '"' seen */
  int can_mark = marked != NULL ? -1 : 0; /* -1: not decided yet */
  al_buf_t out;

  *needed = false;
  *nomem = false;
  al_buf_init(&out, len + 16);
  while (p < end) {
    const char *bs = memchr(p, '\\', (size_t)(end - p));
    const char *q;
    long v;
    long v2;

    /* Track the last raw quote before this escape (for "opening quote"). */
    for (q = p; q < (bs ? bs : end); q++) {
      if (*q == '"') {
        raw_quote = q;
      }
    }
    if (bs == NULL || bs + 1 >= end) {
      break;
    }
    v = read_u_escape(bs, end);
    if (v < 0xD800 || v > 0xDFFF) {
      p = bs + (v >= 0 ? 6 : 2);
      continue;
    }
    if (v <= 0xDBFF) {
      v2 = read_u_escape(bs + 6, end);
      if (v2 >= 0xDC00 && v2 <= 0xDFFF) {
        p = bs + 12;
        continue;
      }
    }
    /* A lone surrogate. */
    *needed = true;
    if (al_buf_append(&out, run, (size_t)(bs - run)) != 0) {
      goto out_nomem;
    }
    if (can_mark != 0 &&
        ((v <= 0xDBFF && bs + 6 < end && bs[6] == '"') ||
         (v >= 0xDC00 && raw_quote != NULL && raw_quote == bs - 1))) {
      if (can_mark < 0) {
        can_mark = marks_usable(data, len) ? 1 : 0;
      }
      if (can_mark > 0) {
        if (put_mark(&out, v <= 0xDBFF ? AL_MARK_HI : AL_MARK_LO,
                     (uint32_t)v & 0x3FF) != 0) {
          goto out_nomem;
        }
        *marked = true;
        run = p = bs + 6;
        continue;
      }
    }
    if (v <= 0xDBFF && trail_hi != NULL && *trail_hi == 0 && bs + 6 < end &&
        bs[6] == '"') {
      /* Find this string's opening quote: the last raw quote before the
       * escape is it, because we are inside a string. */
      if (raw_quote != NULL && is_hot_value(data, raw_quote, only_key)) {
        *trail_hi = (uint32_t)v;
        run = p = bs + 6;
        continue;
      }
    }
    if (v >= 0xDC00 && lead_lo != NULL && *lead_lo == 0 && raw_quote != NULL &&
        raw_quote == bs - 1 && is_hot_value(data, raw_quote, only_key)) {
      *lead_lo = (uint32_t)v;
      run = p = bs + 6;
      continue;
    }
    if (al_buf_append(&out, "\\uFFFD", 6) != 0) {
      goto out_nomem;
    }
    run = p = bs + 6;
  }
  if (!*needed) {
    al_buf_free(&out);
    return NULL;
  }
  if (al_buf_append(&out, run, (size_t)(end - run)) != 0) {
    goto out_nomem;
  }
  *outlen = out.len;
  return out.data; /* the caller frees with al_free */

out_nomem:
  al_buf_free(&out);
  *nomem = true;
  return NULL;
}

static json_t *load_tracked_valid(const char *data, size_t len,
                                  json_error_t *err, uint32_t *lead_lo,
                                  uint32_t *trail_hi, bool *marked,
                                  const char *only_key);

/* ---- numbers beyond jansson's range ---------------------------------------- */

/* After a JSON_DECODE_INT_AS_REAL load: every real that is integral and
 * fits in int64 becomes an integer again, so ordinary integers stay
 * integers next to the one that did not fit. */
static void reals_to_ints(json_t *v) {
  const char *k;
  json_t *x;
  size_t i;

  if (json_is_object(v)) {
    json_object_foreach(v, k, x) {
      if (json_is_real(x)) {
        double d = json_real_value(x);

        if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
            d == (double)(int64_t)d) {
          json_object_set_new(v, k, json_integer((json_int_t)d));
        }
      } else {
        reals_to_ints(x);
      }
    }
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, x) {
      if (json_is_real(x)) {
        double d = json_real_value(x);

        if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
            d == (double)(int64_t)d) {
          json_array_set_new(v, i, json_integer((json_int_t)d));
        }
      } else {
        reals_to_ints(x);
      }
    }
  }
}

static bool num_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' ||
         c == 'e' || c == 'E';
}

/* json_loadb, but valid JSON with numbers jansson cannot hold still loads
 * (the SDKs use JavaScript numbers): an integer beyond int64 ("too big
 * integer") loads as a real (reals_to_ints keeps the others integers),
 * and a number beyond the double range ("real number overflow", which
 * JavaScript makes +-Infinity and JSON.stringify prints as null) becomes
 * null. Only this rare failure path costs a copy and reloads. */
static json_t *loadb(const char *data, size_t len, json_error_t *err) {
  size_t flags = JSON_DECODE_ANY | JSON_ALLOW_NUL;
  json_t *j = json_loadb(data, len, flags, err);
  char *copy;
  int tries;

  if (j != NULL || (strstr(err->text, "too big") == NULL &&
                    strstr(err->text, "real number overflow") == NULL)) {
    return j;
  }
  if ((copy = al_malloc(len + 1)) == NULL) {
    return NULL;
  }
  memcpy(copy, data, len);
  for (tries = 0; tries < 4096 && j == NULL; tries++) {
    if (strstr(err->text, "too big") != NULL &&
        (flags & JSON_DECODE_INT_AS_REAL) == 0) {
      flags |= JSON_DECODE_INT_AS_REAL;
    } else if (strstr(err->text, "real number overflow") != NULL &&
               err->position >= 0 && (size_t)err->position <= len) {
      size_t b = (size_t)err->position;
      size_t e = b;

      while (b > 0 && num_char(copy[b - 1])) {
        b--;
      }
      while (e < len && num_char(copy[e])) {
        e++;
      }
      if (e - b < 4) {
        break;
      }
      memcpy(copy + b, "null", 4);
      memset(copy + b + 4, ' ', e - b - 4);
    } else {
      break;
    }
    j = json_loadb(copy, len, flags, err);
  }
  al_free(copy);
  if (j != NULL && (flags & JSON_DECODE_INT_AS_REAL) != 0) {
    reals_to_ints(j);
  }
  return j;
}

/* The SDKs decode the byte stream with a replacing UTF-8 decoder before
 * JSON.parse, so invalid bytes become U+FFFD instead of failing the event;
 * jansson refuses them, hence the sanitized copy. */
static json_t *load_tracked(const char *data, size_t len, json_error_t *err,
                            uint32_t *lead_lo, uint32_t *trail_hi,
                            bool *marked, const char *only_key) {
  al_buf_t b;
  json_t *j;

  if (al__utf8_valid(data, len)) {
    return load_tracked_valid(data, len, err, lead_lo, trail_hi, marked,
                              only_key);
  }
  al_buf_init(&b, len * 3 + 16);
  if (al__utf8_sanitize_append(&b, data, len) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  j = load_tracked_valid(b.data, b.len, err, lead_lo, trail_hi, marked,
                         only_key);
  al_buf_free(&b);
  return j;
}

static json_t *load_tracked_valid(const char *data, size_t len,
                                  json_error_t *err, uint32_t *lead_lo,
                                  uint32_t *trail_hi, bool *marked,
                                  const char *only_key) {
  json_t *j;
  bool needed;
  bool nomem;
  char *copy;
  size_t clen = 0;
  json_error_t e2;

  if (lead_lo != NULL) {
    *lead_lo = 0;
  }
  if (trail_hi != NULL) {
    *trail_hi = 0;
  }
  if (marked != NULL) {
    *marked = false;
  }
  /* A surrogate escape is the only thing the rewrite changes; without a
   * "\u" in the data there is nothing to rewrite. */
  if (memmem(data, len, "\\u", 2) != NULL) {
    copy = rewrite_surrogates(data, len, &clen, &needed, &nomem, lead_lo,
                              trail_hi, marked, only_key);
    if (copy != NULL) {
      j = loadb(copy, clen, err != NULL ? err : &e2);
      al_free(copy);
      return j;
    }
    if (nomem) {
      return NULL;
    }
  }
  return loadb(data, len, err != NULL ? err : &e2);
}

json_t *al__provider_json_load(const char *data, size_t len,
                               json_error_t *err) {
  return load_tracked(data, len, err, NULL, NULL, NULL, NULL);
}

json_t *al__provider_json_load_marked(const char *data, size_t len,
                                      json_error_t *err, bool *marked) {
  return load_tracked(data, len, err, NULL, NULL, marked, NULL);
}

json_t *al__provider_json_load2(const char *data, size_t len,
                                json_error_t *err, uint32_t *lead_lo,
                                uint32_t *trail_hi) {
  return load_tracked(data, len, err, lead_lo, trail_hi, NULL, NULL);
}

json_t *al__provider_json_load2_key(const char *data, size_t len,
                                    json_error_t *err, uint32_t *lead_lo,
                                    uint32_t *trail_hi, const char *key) {
  return load_tracked(data, len, err, lead_lo, trail_hi, NULL, key);
}

/* ---- the fast path --------------------------------------------------------- */

/* Byte classes for the string scanner: 0 plain, 1 '"', 2 '\\', 3 control
 * (invalid in a JSON string), 4 a UTF-8 lead/continuation byte. */
static const unsigned char str_class[256] = {
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* 0x00 */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* 0x10 */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x30 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x40 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, /* 0x50 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x60 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x70 */
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, /* 0x80 */
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
};

typedef struct {
  const char *s; /* contents between the quotes */
  size_t len;
  bool escaped;  /* contains at least one backslash */
} raw_str_t;

static inline const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
    p++;
  }
  return p;
}

/* p at the opening quote. Validates the string as jansson would (lone
 * surrogate escapes aside, which both paths treat alike) and returns the
 * position after the closing quote, or NULL. */
#ifdef __SSE2__
/* Bit i set: byte u[i] is '"', '\\', < 0x20 or >= 0x80 (a signed compare
 * with 0x20 flags both of the last). */
static inline unsigned flagged16(const unsigned char *u) {
  __m128i v = _mm_loadu_si128((const __m128i *)(const void *)u);

  return (unsigned)_mm_movemask_epi8(
      _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                   _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))));
}
#endif

static const char *scan_string(const char *p, const char *end, raw_str_t *out) {
  const unsigned char *u = (const unsigned char *)p + 1;
  const unsigned char *e = (const unsigned char *)end;

  out->s = p + 1;
  out->escaped = false;
  for (;;) {
    unsigned char c;

#ifdef __SSE2__
    /* Sixteen bytes at a time (SSE2 is baseline on x86-64): a signed
     * compare with 0x20 flags both the control bytes and every byte >=
     * 0x80; the first flagged byte goes to the byte loop. A text delta's
     * string is 30-40 bytes: two or three steps instead of five. */
    while (e - u >= 16) {
      unsigned m = flagged16(u);

      if (m != 0) {
        u += __builtin_ctz(m);
        goto flagged;
      }
      u += 16;
    }
    if (e - u > 4 && e - (const unsigned char *)out->s >= 16) {
      /* The last 5-15 bytes: one load ending at e, the bytes before u
       * (already scanned, inside the string) shifted out. Fewer go to the
       * byte loop: a delta's string is followed by just `"}}`. */
      unsigned m = flagged16(e - 16) >> (16 - (e - u));

      u = m != 0 ? u + __builtin_ctz(m) : e;
    }
  flagged:
#else
    /* Eight bytes at a time while none is '"', '\\', < 0x20 or >= 0x80
     * (the classic has-zero-byte tests); the byte loop finds which. */
    while (e - u >= 8) {
      uint64_t v;
      uint64_t m;

      memcpy(&v, u, 8);
      m = (((v ^ 0x2222222222222222ULL) - 0x0101010101010101ULL) &
           ~(v ^ 0x2222222222222222ULL)) |
          (((v ^ 0x5C5C5C5C5C5C5C5CULL) - 0x0101010101010101ULL) &
           ~(v ^ 0x5C5C5C5C5C5C5C5CULL)) |
          ((v - 0x2020202020202020ULL) & ~v) | v;
      if ((m & 0x8080808080808080ULL) != 0) {
        break;
      }
      u += 8;
    }
#endif
    while (u < e && str_class[*u] == 0) {
      u++;
    }
    if (u >= e) {
      return NULL;
    }
    c = *u;
    switch (str_class[c]) {
    case 1:
      out->len = (size_t)((const char *)u - out->s);
      return (const char *)u + 1;
    case 2:
      out->escaped = true;
      if (u + 1 >= e) {
        return NULL;
      }
      switch (u[1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        u += 2;
        break;
      case 'u':
        if (read_u_escape((const char *)u, end) < 0) {
          return NULL;
        }
        u += 6;
        break;
      default:
        return NULL;
      }
      break;
    case 3:
      return NULL;
    default: {
      size_t n = al__utf8_seq(u, e);
      if (n == 0) {
        return NULL;
      }
      u += n;
    }
    }
  }
}

/* decode_string's case with escapes (into scratch). */
static int decode_escaped(const raw_str_t *rs, al_buf_t *scratch,
                          al_fj_delta_t *out) {
  const char *p = rs->s;
  const char *end = rs->s + rs->len;
  int err;

  out->lead_lo = 0;
  out->trail_hi = 0;
  al_buf_reset(scratch);
  /* Reserve the raw length up front: decoding never grows a string except
   * for U+FFFD replacing a 6-byte escape (3 bytes), so this is enough and
   * the appends below cannot fail half way on the common path. */
  if ((err = al_buf_reserve(scratch, rs->len)) != 0) {
    return err;
  }
  while (p < end) {
    const char *bs = memchr(p, '\\', (size_t)(end - p));
    char c;

    if (bs == NULL) {
      bs = end;
    }
    if (bs > p && (err = al_buf_append(scratch, p, (size_t)(bs - p))) != 0) {
      return err;
    }
    if (bs == end) {
      break;
    }
    switch (bs[1]) {
    case 'b':
      c = '\b';
      break;
    case 'f':
      c = '\f';
      break;
    case 'n':
      c = '\n';
      break;
    case 'r':
      c = '\r';
      break;
    case 't':
      c = '\t';
      break;
    case 'u': {
      long v = read_u_escape(bs, end);
      uint32_t cp = (uint32_t)v;

      p = bs + 6;
      if (v >= 0xD800 && v <= 0xDBFF) {
        long v2 = read_u_escape(p, end);
        if (v2 >= 0xDC00 && v2 <= 0xDFFF) {
          cp = 0x10000 + (((uint32_t)v - 0xD800) << 10) + ((uint32_t)v2 - 0xDC00);
          p += 6;
        } else if (p == end) {
          out->trail_hi = (uint32_t)v;
          continue;
        } else {
          cp = 0xFFFD;
        }
      } else if (v >= 0xDC00 && v <= 0xDFFF) {
        if (bs == rs->s) {
          out->lead_lo = (uint32_t)v;
          continue;
        }
        cp = 0xFFFD;
      }
      if ((err = al__utf8_put(scratch, cp)) != 0) {
        return err;
      }
      continue;
    }
    default: /* '"', '\\', '/' */
      c = bs[1];
      break;
    }
    if ((err = al_buf_append(scratch, &c, 1)) != 0) {
      return err;
    }
    p = bs + 2;
  }
  out->text = scratch->data != NULL ? scratch->data : "";
  out->len = scratch->len;
  return 0;
}

/* Decodes a validated raw string into UTF-8. Returns 0 or an error. The
 * common case (no escape: the bytes as they are) is inline. */
static inline int decode_string(const raw_str_t *rs, al_buf_t *scratch,
                                al_fj_delta_t *out) {
  if (rs->escaped) {
    return decode_escaped(rs, scratch, out);
  }
  out->lead_lo = 0;
  out->trail_hi = 0;
  out->text = rs->s;
  out->len = rs->len;
  return 0;
}

/* Skips a scalar value (string, number, literal). NULL when the value is
 * not a scalar we accept or is invalid. */
static const char *skip_scalar(const char *p, const char *end) {
  raw_str_t rs;

  if (p >= end) {
    return NULL;
  }
  switch (*p) {
  case '"':
    return scan_string(p, end, &rs);
  case 't':
    return (end - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : NULL;
  case 'f':
    return (end - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : NULL;
  case 'n':
    return (end - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : NULL;
  default:
    break;
  }
  /* JSON number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
  if (*p == '-') {
    p++;
  }
  if (p >= end) {
    return NULL;
  }
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    while (p < end && *p >= '0' && *p <= '9') {
      p++;
    }
  } else {
    return NULL;
  }
  if (p < end && *p == '.') {
    p++;
    if (p >= end || *p < '0' || *p > '9') {
      return NULL;
    }
    while (p < end && *p >= '0' && *p <= '9') {
      p++;
    }
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) {
      p++;
    }
    if (p >= end || *p < '0' || *p > '9') {
      return NULL;
    }
    while (p < end && *p >= '0' && *p <= '9') {
      p++;
    }
  }
  return p;
}

/* Reads a key: p at '"'. Only plain keys (no escapes) are accepted. */
static const char *read_key(const char *p, const char *end, raw_str_t *key) {
  p = scan_string(p, end, key);
  if (p == NULL || key->escaped) {
    return NULL;
  }
  p = skip_ws(p, end);
  if (p >= end || *p != ':') {
    return NULL;
  }
  return skip_ws(p + 1, end);
}

#define KEY_IS(k, lit) \
  ((k).len == sizeof(lit) - 1 && memcmp((k).s, lit, sizeof(lit) - 1) == 0)

/* Parses the delta object; p at '{'. */
static const char *parse_delta_obj(const char *p, const char *end,
                                   al_fj_kind_t *kind, raw_str_t *field) {
  raw_str_t key;
  raw_str_t type;
  raw_str_t vals[3]; /* text, thinking, partial_json */
  bool have_type = false;
  bool have[3] = {false, false, false};
  int which;

  p = skip_ws(p + 1, end);
  if (p < end && *p == '}') {
    return NULL; /* no type: let jansson decide */
  }
  for (;;) {
    if (p >= end || *p != '"') {
      return NULL;
    }
    if ((p = read_key(p, end, &key)) == NULL || p >= end) {
      return NULL;
    }
    which = -1;
    if (KEY_IS(key, "type")) {
      if (have_type || *p != '"') {
        return NULL;
      }
      if ((p = scan_string(p, end, &type)) == NULL || type.escaped) {
        return NULL;
      }
      have_type = true;
    } else if (KEY_IS(key, "text")) {
      which = 0;
    } else if (KEY_IS(key, "thinking")) {
      which = 1;
    } else if (KEY_IS(key, "partial_json")) {
      which = 2;
    } else if ((p = skip_scalar(p, end)) == NULL) {
      return NULL;
    }
    if (which >= 0) {
      if (have[which] || *p != '"') {
        return NULL;
      }
      if ((p = scan_string(p, end, &vals[which])) == NULL) {
        return NULL;
      }
      have[which] = true;
    }
    p = skip_ws(p, end);
    if (p >= end) {
      return NULL;
    }
    if (*p == '}') {
      break;
    }
    if (*p != ',') {
      return NULL;
    }
    p = skip_ws(p + 1, end);
  }
  if (!have_type) {
    return NULL;
  }
  if (KEY_IS(type, "text_delta")) {
    *kind = AL_FJ_TEXT;
    which = 0;
  } else if (KEY_IS(type, "thinking_delta")) {
    *kind = AL_FJ_THINKING;
    which = 1;
  } else if (KEY_IS(type, "input_json_delta")) {
    *kind = AL_FJ_INPUT;
    which = 2;
  } else {
    return NULL;
  }
  if (!have[which]) {
    return NULL;
  }
  *field = vals[which];
  return p + 1;
}

/* The exact bytes the API sends (no whitespace, this key order) are
 * matched with memcmp first: a strict subset of what the general scanner
 * below accepts, with the same result, at a fraction of the cost. 0 means
 * "not canonical": the general scanner decides. */
static const char canon_head[] = "{\"type\":\"content_block_delta\",\"index\":";
#define CANON_TEXT ",\"delta\":{\"type\":\"text_delta\",\"text\":\""
#define CANON_THINKING ",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\""
#define CANON_INPUT                                                            \
  ",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\""

static int parse_canonical(const char *p, const char *end, al_buf_t *scratch,
                           al_fj_delta_t *out) {
  int64_t index = 0;
  const char *q = p;
  raw_str_t field;
  al_fj_kind_t kind;
  size_t n;
  int err;

  if (q < end && *q == '0') {
    q++;
  } else {
    while (q < end && *q >= '0' && *q <= '9' && q - p < 9) {
      index = index * 10 + (*q - '0');
      q++;
    }
  }
  if (q == p || q >= end || *q != ',') {
    return 0;
  }
  /* Literal sizes, so each memcmp is a few inline loads. */
#define TAIL_IS(lit)                                                           \
  ((size_t)(end - q) > sizeof(lit) - 1 && memcmp(q, lit, sizeof(lit) - 1) == 0)
  if (TAIL_IS(CANON_TEXT)) {
    kind = AL_FJ_TEXT;
    n = sizeof(CANON_TEXT) - 1;
  } else if (TAIL_IS(CANON_THINKING)) {
    kind = AL_FJ_THINKING;
    n = sizeof(CANON_THINKING) - 1;
  } else if (TAIL_IS(CANON_INPUT)) {
    kind = AL_FJ_INPUT;
    n = sizeof(CANON_INPUT) - 1;
  } else {
    return 0;
  }
#undef TAIL_IS
  /* The tail ends with the string's opening quote. */
  q = scan_string(q + n - 1, end, &field);
  if (q == NULL || end - q != 2 || q[0] != '}' || q[1] != '}') {
    return 0;
  }
  out->kind = kind;
  out->index = index;
  if ((err = decode_string(&field, scratch, out)) != 0) {
    return err;
  }
  return 1;
}

int al__fj_parse_delta(const char *data, size_t len, al_buf_t *scratch,
                       al_fj_delta_t *out) {
  const char *p = data;
  const char *end = data + len;
  raw_str_t key;
  raw_str_t sv;
  raw_str_t field = {NULL, 0, false};
  al_fj_kind_t kind = AL_FJ_NONE;
  bool have_type = false;
  bool have_index = false;
  bool have_delta = false;
  int64_t index = 0;
  int err;

  if ((size_t)(end - p) > sizeof(canon_head) &&
      memcmp(p, canon_head, sizeof(canon_head) - 1) == 0) {
    int rc = parse_canonical(p + sizeof(canon_head) - 1, end, scratch, out);
    if (rc != 0) {
      return rc;
    }
  }
  p = skip_ws(p, end);
  if (p >= end || *p != '{') {
    return 0;
  }
  p = skip_ws(p + 1, end);
  for (;;) {
    if (p >= end || *p != '"') {
      return 0;
    }
    if ((p = read_key(p, end, &key)) == NULL || p >= end) {
      return 0;
    }
    if (KEY_IS(key, "type")) {
      if (have_type || *p != '"') {
        return 0;
      }
      if ((p = scan_string(p, end, &sv)) == NULL || sv.escaped ||
          !KEY_IS(sv, "content_block_delta")) {
        return 0;
      }
      have_type = true;
    } else if (KEY_IS(key, "index")) {
      const char *q = p;

      if (have_index || *p < '0' || *p > '9') {
        return 0;
      }
      if (*p == '0') {
        q = p + 1;
      } else {
        while (q < end && *q >= '0' && *q <= '9' && q - p < 10) {
          index = index * 10 + (*q - '0');
          q++;
        }
      }
      /* Fractions, exponents and long numbers are jansson's business. */
      if (q < end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' ||
                      *q == 'E')) {
        return 0;
      }
      if (index > INT32_MAX) {
        return 0;
      }
      p = q;
      have_index = true;
    } else if (KEY_IS(key, "delta")) {
      if (have_delta || *p != '{') {
        return 0;
      }
      if ((p = parse_delta_obj(p, end, &kind, &field)) == NULL) {
        return 0;
      }
      have_delta = true;
    } else if ((p = skip_scalar(p, end)) == NULL) {
      return 0;
    }
    p = skip_ws(p, end);
    if (p >= end) {
      return 0;
    }
    if (*p == '}') {
      break;
    }
    if (*p != ',') {
      return 0;
    }
    p = skip_ws(p + 1, end);
  }
  if (skip_ws(p + 1, end) != end || !have_type || !have_index || !have_delta) {
    return 0;
  }
  out->kind = kind;
  out->index = index;
  if ((err = decode_string(&field, scratch, out)) != 0) {
    return err;
  }
  return 1;
}

/* ---- the OpenAI chunk fast path ------------------------------------------- */

/* An OpenAI-style stream is one chunk per token,
 *   {"id":..,"object":"chat.completion.chunk","created":N,"model":..,
 *    "choices":[{"index":0,"delta":{"content":"..."},"finish_reason":null,
 *    ...}], ...}
 * and a jansson DOM of it costs several microseconds. The scanner below
 * accepts exactly this shape -- one nested path (choices, one element,
 * its delta), every other value a scalar, no duplicate or escaped keys --
 * and hands the caller the scalars as raw slices, so the decoder can check
 * that applying the chunk would change nothing but the content (openai.c
 * decides that; anything else goes to jansson). */

typedef struct {
  al_fj_member_t *m;
  size_t max;
  size_t n;
} members_t;

/* Records a scalar member; p at its value. NULL when it is not a scalar,
 * the object has too many members, or the key repeats. */
static const char *put_member(members_t *ms, const raw_str_t *key,
                              const char *p, const char *end) {
  al_fj_member_t *m;
  raw_str_t rs;
  size_t i;

  for (i = 0; i < ms->n; i++) {
    if (ms->m[i].klen == key->len &&
        memcmp(ms->m[i].key, key->s, key->len) == 0) {
      return NULL; /* jansson keeps the last: not ours to decide */
    }
  }
  if (ms->n == ms->max || p >= end) {
    return NULL;
  }
  m = &ms->m[ms->n];
  m->key = key->s;
  m->klen = key->len;
  m->escaped = false;
  if (*p == '[') {
    /* An empty array (Responses deltas carry "logprobs":[]): a value the
     * callers only accept where they ignore it. */
    const char *q = skip_ws(p + 1, end);

    if (q >= end || *q != ']') {
      return NULL;
    }
    m->type = 'a';
    m->val = p;
    m->vlen = (size_t)(q + 1 - p);
    ms->n++;
    return q + 1;
  }
  if (*p == '"') {
    const char *q = scan_string(p, end, &rs);

    if (q == NULL) {
      return NULL;
    }
    m->type = 's';
    m->val = rs.s;
    m->vlen = rs.len;
    m->escaped = rs.escaped;
    ms->n++;
    return q;
  }
  m->val = p;
  if ((p = skip_scalar(p, end)) == NULL) {
    return NULL;
  }
  m->vlen = (size_t)(p - m->val);
  m->type = *m->val == 't' ? 't' : *m->val == 'f' ? 'f' : *m->val == 'n' ? 'z' : 'n';
  ms->n++;
  return p;
}

/* An object of scalars, except the one key `nested` (may be NULL) whose
 * value `inner` parses; p at '{'. *seen: `nested` was there. */
static const char *scan_object(const char *p, const char *end, members_t *ms,
                               const char *nested, bool *seen,
                               const char *(*inner)(const char *p,
                                                    const char *end,
                                                    al_fj_oai_t *out),
                               al_fj_oai_t *out) {
  raw_str_t key;

  *seen = false;
  p = skip_ws(p + 1, end);
  if (p < end && *p == '}') {
    return p + 1;
  }
  for (;;) {
    if (p >= end || *p != '"' || (p = read_key(p, end, &key)) == NULL) {
      return NULL;
    }
    if (nested != NULL && key.len == strlen(nested) &&
        memcmp(key.s, nested, key.len) == 0) {
      if (*seen || (p = inner(p, end, out)) == NULL) {
        return NULL;
      }
      *seen = true;
    } else if ((p = put_member(ms, &key, p, end)) == NULL) {
      return NULL;
    }
    p = skip_ws(p, end);
    if (p >= end) {
      return NULL;
    }
    if (*p == '}') {
      return p + 1;
    }
    if (*p != ',') {
      return NULL;
    }
    p = skip_ws(p + 1, end);
  }
}

static const char *oai_delta(const char *p, const char *end,
                             al_fj_oai_t *out) {
  members_t ms = {out->delta, AL_FJ_MAX_MEMBERS, 0};
  bool seen;

  if (p >= end || *p != '{') {
    return NULL;
  }
  p = scan_object(p, end, &ms, NULL, &seen, NULL, out);
  out->ndelta = ms.n;
  return p;
}

static const char *oai_choices(const char *p, const char *end,
                               al_fj_oai_t *out) {
  members_t ms = {out->choice, AL_FJ_MAX_MEMBERS, 0};
  bool seen;

  if (p >= end || *p != '[') {
    return NULL;
  }
  p = skip_ws(p + 1, end);
  if (p >= end || *p != '{') {
    return NULL;
  }
  p = scan_object(p, end, &ms, "delta", &seen, oai_delta, out);
  if (p == NULL || !seen) {
    return NULL;
  }
  out->nchoice = ms.n;
  p = skip_ws(p, end);
  return p < end && *p == ']' ? p + 1 : NULL; /* exactly one choice */
}

const al_fj_member_t *al__fj_member(const al_fj_member_t *m, size_t n,
                                    const char *key) {
  size_t klen = strlen(key);
  size_t i;

  for (i = 0; i < n; i++) {
    if (m[i].klen == klen && memcmp(m[i].key, key, klen) == 0) {
      return &m[i];
    }
  }
  return NULL;
}

bool al__fj_member_int(const al_fj_member_t *m, int64_t *v) {
  const char *p = m->val;
  const char *e = m->val + m->vlen;
  bool neg = false;
  int64_t x = 0;

  if (m->type != 'n') {
    return false;
  }
  if (p < e && *p == '-') {
    neg = true;
    p++;
  }
  /* Up to 18 digits always fit; longer ones, fractions and exponents are
   * left to jansson (which may load them as reals). */
  if (p == e || e - p > 18) {
    return false;
  }
  for (; p < e; p++) {
    if (*p < '0' || *p > '9') {
      return false;
    }
    x = x * 10 + (*p - '0');
  }
  *v = neg ? -x : x;
  return true;
}

int al__fj_parse_flat(const char *data, size_t len, al_fj_member_t *m,
                      size_t max, size_t *n) {
  const char *p = data;
  const char *end = data + len;
  members_t ms = {m, max, 0};
  bool seen;

  *n = 0;
  p = skip_ws(p, end);
  if (p >= end || *p != '{') {
    return 0;
  }
  p = scan_object(p, end, &ms, NULL, &seen, NULL, NULL);
  if (p == NULL || skip_ws(p, end) != end) {
    return 0;
  }
  *n = ms.n;
  return 1;
}

int al__fj_member_string(const al_fj_member_t *m, al_buf_t *scratch,
                         al_fj_delta_t *out) {
  raw_str_t rs;

  if (m->type != 's') {
    return 0;
  }
  rs.s = m->val;
  rs.len = m->vlen;
  rs.escaped = m->escaped;
  return decode_string(&rs, scratch, out) != 0 ? -1 : 1;
}

int al__fj_parse_oai_chunk(const char *data, size_t len, al_buf_t *scratch,
                           al_fj_oai_t *out) {
  const char *p = data;
  const char *end = data + len;
  members_t ms = {out->top, AL_FJ_MAX_MEMBERS, 0};
  const al_fj_member_t *c;
  const al_fj_member_t *idx;
  raw_str_t rs;
  bool seen;
  int err;

  out->ntop = out->nchoice = out->ndelta = 0;
  p = skip_ws(p, end);
  if (p >= end || *p != '{') {
    return 0;
  }
  p = scan_object(p, end, &ms, "choices", &seen, oai_choices, out);
  if (p == NULL || !seen || skip_ws(p, end) != end) {
    return 0;
  }
  out->ntop = ms.n;
  idx = al__fj_member(out->choice, out->nchoice, "index");
  c = al__fj_member(out->delta, out->ndelta, "content");
  if (idx == NULL || !al__fj_member_int(idx, &out->index) || c == NULL ||
      c->type != 's') {
    return 0;
  }
  rs.s = c->val;
  rs.len = c->vlen;
  rs.escaped = c->escaped;
  if ((err = decode_string(&rs, scratch, &out->content)) != 0) {
    return err;
  }
  /* A surrogate half at an end is joined across chunks by the jansson
   * path's boundary marks: not here. */
  if (out->content.lead_lo != 0 || out->content.trail_hi != 0) {
    return 0;
  }
  out->content.kind = AL_FJ_TEXT;
  return 1;
}

/* Extracts the hot delta from a DOM (shared by the jansson path of the
 * decoder and the reference parser). */
int al__fj_from_dom(json_t *root, al_buf_t *scratch, al_fj_delta_t *out) {
  json_t *t;
  json_t *d;
  json_t *f;
  const char *dt;
  const char *fname;
  al_fj_kind_t kind;
  json_int_t idx;

  if (!json_is_object(root)) {
    return 0;
  }
  t = json_object_get(root, "type");
  if (!json_is_string(t) || strcmp(json_string_value(t), "content_block_delta") != 0 ||
      json_string_length(t) != strlen("content_block_delta")) {
    return 0;
  }
  t = json_object_get(root, "index");
  if (!json_is_integer(t)) {
    return 0;
  }
  idx = json_integer_value(t);
  if (idx < 0 || idx > INT32_MAX) {
    return 0;
  }
  d = json_object_get(root, "delta");
  if (!json_is_object(d)) {
    return 0;
  }
  t = json_object_get(d, "type");
  if (!json_is_string(t)) {
    return 0;
  }
  dt = json_string_value(t);
  if (strcmp(dt, "text_delta") == 0) {
    kind = AL_FJ_TEXT;
    fname = "text";
  } else if (strcmp(dt, "thinking_delta") == 0) {
    kind = AL_FJ_THINKING;
    fname = "thinking";
  } else if (strcmp(dt, "input_json_delta") == 0) {
    kind = AL_FJ_INPUT;
    fname = "partial_json";
  } else {
    return 0;
  }
  if (json_string_length(t) != strlen(dt)) {
    return 0; /* an embedded NUL in the type */
  }
  f = json_object_get(d, fname);
  if (!json_is_string(f)) {
    return 0;
  }
  al_buf_reset(scratch);
  if (al_buf_append(scratch, json_string_value(f), json_string_length(f)) != 0) {
    return AL_ENOMEM;
  }
  out->kind = kind;
  out->index = idx;
  out->text = scratch->data != NULL ? scratch->data : "";
  out->len = scratch->len;
  return 1;
}

int al__fj_parse_delta_jansson(const char *data, size_t len,
                               al_buf_t *scratch, al_fj_delta_t *out) {
  uint32_t lead = 0;
  uint32_t trail = 0;
  json_t *root = al__provider_json_load2(data, len, NULL, &lead, &trail);
  int rc;

  if (root == NULL) {
    return 0;
  }
  rc = al__fj_from_dom(root, scratch, out);
  json_decref(root);
  if (rc == 1) {
    out->lead_lo = lead;
    out->trail_hi = trail;
  }
  return rc;
}

/* ---- output spelling of numbers (agentloop decode) ------------------------ */

/* d > 0, finite: JavaScript's Number.prototype.toString (ECMA-262
 * Number::toString): the shortest digits that round-trip, in fixed
 * notation for exponents -7 < n <= 21, else d.ddde+-x. */
static int js_number(al_buf_t *b, double d) {
  char tmp[40];
  char digits[24];
  size_t k = 0;
  int p;
  int e10;
  int n;
  char *q;

  for (p = 1; p <= 17; p++) {
    snprintf(tmp, sizeof(tmp), "%.*e", p - 1, d);
    if (strtod(tmp, NULL) == d) {
      break;
    }
  }
  for (q = tmp; *q != 'e' && *q != '\0'; q++) {
    if (*q >= '0' && *q <= '9' && k < sizeof(digits) - 1) {
      digits[k++] = *q;
    }
  }
  if (*q != 'e') {
    return al_buf_append_str(b, tmp);
  }
  e10 = atoi(q + 1);
  while (k > 1 && digits[k - 1] == '0') {
    k--;
  }
  digits[k] = '\0';
  n = e10 + 1;
  if ((int)k <= n && n <= 21) {
    int i;
    int rc = al_buf_append(b, digits, k);

    for (i = 0; rc == 0 && i < n - (int)k; i++) {
      rc = al_buf_append(b, "0", 1);
    }
    return rc;
  }
  if (0 < n && n <= 21) {
    return al_buf_printf(b, "%.*s.%s", n, digits, digits + n);
  }
  if (-6 < n && n <= 0) {
    int i;
    int rc = al_buf_append(b, "0.", 2);

    for (i = 0; rc == 0 && i < -n; i++) {
      rc = al_buf_append(b, "0", 1);
    }
    return rc == 0 ? al_buf_append(b, digits, k) : rc;
  }
  if (k == 1) {
    return al_buf_printf(b, "%se%c%d", digits, n - 1 < 0 ? '-' : '+',
                         abs(n - 1));
  }
  return al_buf_printf(b, "%c.%se%c%d", digits[0], digits + 1,
                       n - 1 < 0 ? '-' : '+', abs(n - 1));
}

char *al__json_dumps_js(const json_t *j) {
  char *raw = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY |
                                JSON_REAL_PRECISION(17));
  const char *p;
  const char *run;
  al_buf_t b;

  if (raw == NULL) {
    return NULL;
  }
  /* Reals are the only tokens with '.', 'e' or 'E' outside strings. */
  al_buf_init(&b, strlen(raw) * 2 + 64);
  run = p = raw;
  while (*p != '\0') {
    if (*p == '"') {
      for (p++; *p != '\0' && *p != '"'; p++) {
        if (*p == '\\' && p[1] != '\0') {
          p++;
        }
      }
      if (*p == '"') {
        p++;
      }
    } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
      const char *s = p;
      bool real = false;

      while (num_char(*p)) {
        real = real || *p == '.' || *p == 'e' || *p == 'E';
        p++;
      }
      if (real) {
        double d = strtod(s, NULL);

        if (al_buf_append(&b, run, (size_t)(s - run)) != 0 ||
            (d < 0 && al_buf_append(&b, "-", 1) != 0) ||
            (d == 0 ? al_buf_append(&b, "0", 1)
                    : js_number(&b, d < 0 ? -d : d)) != 0) {
          goto out_nomem;
        }
        run = p;
      }
    } else {
      p++;
    }
  }
  if (run == raw) {
    al_buf_free(&b);
    return raw; /* no reals: jansson's text as is */
  }
  if (al_buf_append(&b, run, strlen(run)) != 0) {
    goto out_nomem;
  }
  al_free(raw);
  return b.data;

out_nomem:
  al_free(raw);
  al_buf_free(&b);
  return NULL;
}

/* ---- streaming writer for `agentloop decode` ------------------------------ */

typedef struct {
  FILE *f;
  al_buf_t b;
  int err;
} jw_t;

#define JW_FLUSH_AT ((size_t)64 << 10)

static void jw_flush(jw_t *w) {
  if (w->b.len > 0 && fwrite(w->b.data, 1, w->b.len, w->f) != w->b.len) {
    w->err = -EIO;
  }
  al_buf_reset(&w->b);
}

static void jw_put(jw_t *w, const char *s, size_t n) {
  if (w->b.len + n > JW_FLUSH_AT) {
    jw_flush(w);
  }
  if (n >= JW_FLUSH_AT) {
    if (fwrite(s, 1, n, w->f) != n) {
      w->err = -EIO;
    }
    return;
  }
  if (al_buf_append(&w->b, s, n) != 0) {
    w->err = AL_ENOMEM;
  }
}

/* jansson's escaping: '"', '\\' and controls (short forms where JSON has
 * them, else \u00XX); everything else, U+2028/9 included, as is. */
static void jw_string(jw_t *w, const char *s, size_t n) {
  size_t run = 0;
  size_t i;

  jw_put(w, "\"", 1);
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    const char *e = NULL;

    if (c >= 0x20 && c != '"' && c != '\\') {
      continue;
    }
    switch (c) {
    case '"':
      e = "\\\"";
      break;
    case '\\':
      e = "\\\\";
      break;
    case '\b':
      e = "\\b";
      break;
    case '\f':
      e = "\\f";
      break;
    case '\n':
      e = "\\n";
      break;
    case '\r':
      e = "\\r";
      break;
    case '\t':
      e = "\\t";
      break;
    default:
      snprintf(esc, sizeof(esc), "\\u%04X", c);
      e = esc;
      break;
    }
    jw_put(w, s + run, i - run);
    jw_put(w, e, strlen(e));
    run = i + 1;
  }
  jw_put(w, s + run, n - run);
  jw_put(w, "\"", 1);
}

static void jw_value(jw_t *w, const json_t *j) {
  char num[64];
  size_t i;

  switch (json_typeof(j)) {
  case JSON_OBJECT: {
    const char *k;
    json_t *v;
    bool first = true;

    jw_put(w, "{", 1);
    json_object_foreach((json_t *)j, k, v) {
      if (!first) {
        jw_put(w, ",", 1);
      }
      first = false;
      jw_string(w, k, strlen(k));
      jw_put(w, ":", 1);
      jw_value(w, v);
    }
    jw_put(w, "}", 1);
    break;
  }
  case JSON_ARRAY:
    jw_put(w, "[", 1);
    for (i = 0; i < json_array_size(j); i++) {
      if (i > 0) {
        jw_put(w, ",", 1);
      }
      jw_value(w, json_array_get(j, i));
    }
    jw_put(w, "]", 1);
    break;
  case JSON_STRING:
    jw_string(w, json_string_value(j), json_string_length(j));
    break;
  case JSON_INTEGER:
    snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(j));
    jw_put(w, num, strlen(num));
    break;
  case JSON_REAL: {
    double d = json_real_value(j);
    al_buf_t b;

    al_buf_init(&b, 64);
    if ((d < 0 && al_buf_append(&b, "-", 1) != 0) ||
        (d == 0 ? al_buf_append(&b, "0", 1) : js_number(&b, d < 0 ? -d : d)) !=
            0) {
      w->err = AL_ENOMEM;
    } else {
      jw_put(w, b.data, b.len);
    }
    al_buf_free(&b);
    break;
  }
  case JSON_TRUE:
    jw_put(w, "true", 4);
    break;
  case JSON_FALSE:
    jw_put(w, "false", 5);
    break;
  default:
    jw_put(w, "null", 4);
    break;
  }
}

int al__json_write_js(FILE *f, const json_t *j) {
  jw_t w;

  w.f = f;
  w.err = 0;
  al_buf_init(&w.b, JW_FLUSH_AT + 16);
  jw_value(&w, j);
  jw_put(&w, "\n", 1);
  jw_flush(&w);
  al_buf_free(&w.b);
  return w.err;
}
