/* UTF-8 helpers (common/utf8.h), moved here from provider/fastjson.c so
 * the loop and the tools no longer reach into provider/ for them. */
#include "common/utf8.h"

#include <string.h>

int al__utf8_put(al_buf_t *b, uint32_t cp) {
  char tmp[4];
  size_t n;

  if (cp < 0x80) {
    tmp[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    tmp[0] = (char)(0xC0 | (cp >> 6));
    tmp[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    tmp[0] = (char)(0xE0 | (cp >> 12));
    tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    tmp[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    tmp[0] = (char)(0xF0 | (cp >> 18));
    tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    tmp[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return al_buf_append(b, tmp, n);
}

bool al__utf8_valid(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  const unsigned char *end = p + len;

  while (p < end) {
    if (*p < 0x80) {
      p++;
    } else {
      size_t n = al__utf8_seq(p, end);
      if (n == 0) {
        return false;
      }
      p += n;
    }
  }
  return true;
}

/* WHATWG "UTF-8 decode" with replacement: one U+FFFD per maximal subpart
 * of an ill-formed sequence (Encoding standard), as TextDecoder does. */
static int sanitize(al_buf_t *b, const char *s, size_t len, size_t *nrep) {
  const unsigned char *p = (const unsigned char *)s;
  const unsigned char *end = p + len;
  const unsigned char *run = p;
  int err;

  while (p < end) {
    unsigned char c = *p;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    const unsigned char *q;
    int need;
    int i;

    if (c < 0x80) {
      p++;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
      need = 0;
    }
    q = p + 1;
    for (i = 0; i < need; i++) {
      if (q >= end || *q < lo || *q > hi) {
        break;
      }
      lo = 0x80;
      hi = 0xBF;
      q++;
    }
    if (need > 0 && i == need) {
      p = q;
      continue;
    }
    if ((err = al_buf_append(b, run, (size_t)(p - run))) != 0 ||
        (err = al_buf_append(b, "\xEF\xBF\xBD", 3)) != 0) {
      return err;
    }
    (*nrep)++;
    p = q; /* the byte that broke the sequence is looked at again */
    run = p;
  }
  return al_buf_append(b, run, (size_t)(p - run));
}

int al__utf8_sanitize_append(al_buf_t *b, const char *s, size_t len) {
  size_t n = 0;

  return sanitize(b, s, len, &n);
}

json_t *al__json_string_utf8(const char *s, size_t len) {
  al_buf_t b;
  json_t *j;

  if (al__utf8_valid(s, len)) {
    return json_stringn(s, len);
  }
  al_buf_init(&b, (len * 3) + 16);
  if (al__utf8_sanitize_append(&b, s, len) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  j = json_stringn(b.data, b.len);
  al_buf_free(&b);
  return j;
}


/* ---- text from outside ------------------------------------------------------ */

int al__text_clean_append(al_buf_t *b, const char *s, size_t len,
                          al_text_clean_t *st) {
  const char *p = s;
  const char *end = s + len;
  size_t nrep = 0, nnul = 0;
  int err;

  while (p < end) {
    const char *nul = memchr(p, '\0', (size_t)(end - p));
    const char *stop = nul != NULL ? nul : end;

    if ((err = sanitize(b, p, (size_t)(stop - p), &nrep)) != 0) {
      return err;
    }
    if (nul == NULL) {
      break;
    }
    if ((err = al_buf_append(b, "\xEF\xBF\xBD", 3)) != 0) {
      return err;
    }
    nnul++;
    p = nul + 1;
  }
  if (st != NULL) {
    st->nul += nnul;
    st->invalid += nrep;
  }
  return 0;
}

bool al__text_looks_binary(const char *s, size_t len, bool nul_is_binary) {
  al_text_clean_t st;
  al_buf_t b;
  size_t probe = AL_MIN(len, (size_t)8000);
  size_t bad;

  if (nul_is_binary && memchr(s, '\0', probe) != NULL) {
    return true;
  }
  if (memchr(s, '\0', probe) == NULL && al__utf8_valid(s, probe)) {
    return false;
  }
  memset(&st, 0, sizeof(st));
  al_buf_init(&b, probe * 3 + 16);
  if (al__text_clean_append(&b, s, probe, &st) != 0) {
    al_buf_free(&b);
    return true;
  }
  al_buf_free(&b);
  /* A few stray bytes in text (a Latin-1 name, find -print0) stay text;
   * the probe's cut may also split one character. */
  bad = st.invalid + st.nul;
  return bad >= 8 && bad * 10 > probe;
}

int al__text_clean_note(al_buf_t *b, const al_text_clean_t *st) {
  if (st->nul > 0 && st->invalid > 0) {
    return al_buf_printf(b,
                         "[%zu NUL byte(s) and %zu invalid UTF-8 "
                         "sequence(s) replaced with U+FFFD]",
                         st->nul, st->invalid);
  }
  if (st->nul > 0) {
    return al_buf_printf(b, "[%zu NUL byte(s) replaced with U+FFFD]",
                         st->nul);
  }
  return al_buf_printf(b,
                       "[%zu invalid UTF-8 sequence(s) replaced with "
                       "U+FFFD]",
                       st->invalid);
}

json_t *al__json_string_text(const char *s, size_t len) {
  al_buf_t b;
  json_t *j;

  if (memchr(s, '\0', len) == NULL && al__utf8_valid(s, len)) {
    return json_stringn(s, len);
  }
  al_buf_init(&b, (len * 3) + 16);
  if (al__text_clean_append(&b, s, len, NULL) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  j = json_stringn(b.data, b.len);
  al_buf_free(&b);
  return j;
}
