/* Bounded growable buffer. Growth doubles but never beyond max + 1 (the
 * terminator), so a limit is enforced before any allocation happens. */
#include <stdio.h>

#include "common/common.h"

void al_buf_init(al_buf_t *b, size_t max) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->max = max;
}

int al_buf_reserve(al_buf_t *b, size_t extra) {
  size_t need;
  size_t ncap;
  size_t limit;
  char *p;

  if (extra > b->max || b->len > b->max - extra) {
    return AL_ETOOBIG;
  }
  if (b->len + extra == SIZE_MAX) {
    return AL_ETOOBIG; /* no room for the terminator */
  }
  need = b->len + extra + 1;
  if (need <= b->cap) {
    return 0;
  }
  /* Double, but never past the limit: max plus the terminator (max may be
   * SIZE_MAX, where the +1 would wrap). need <= limit holds here, so
   * clamping to the limit always leaves enough room. */
  limit = b->max == SIZE_MAX ? SIZE_MAX : b->max + 1;
  ncap = b->cap ? b->cap : 64;
  while (ncap < need && ncap <= limit / 2) {
    ncap *= 2;
  }
  if (ncap < need || ncap > limit) {
    ncap = limit;
  }
  p = al_realloc(b->data, ncap);
  if (p == NULL) {
    return AL_ENOMEM;
  }
  b->data = p;
  b->cap = ncap;
  return 0;
}

int al_buf_append(al_buf_t *b, const void *p, size_t n) {
  int err = al_buf_reserve(b, n);

  if (err != 0) {
    return err;
  }
  if (n > 0) {
    memcpy(b->data + b->len, p, n);
  }
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int al_buf_append_str(al_buf_t *b, const char *s) {
  return al_buf_append(b, s, strlen(s));
}

int al_buf_printf(al_buf_t *b, const char *fmt, ...) {
  va_list ap;
  int n;
  int err;

  va_start(ap, fmt);
  n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    return AL_EINVAL;
  }
  err = al_buf_reserve(b, (size_t)n);
  if (err != 0) {
    return err;
  }
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

void al_buf_consume(al_buf_t *b, size_t n) {
  if (n >= b->len) {
    al_buf_reset(b);
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = '\0';
}

void al_buf_free(al_buf_t *b) {
  al_free(b->data);
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}
