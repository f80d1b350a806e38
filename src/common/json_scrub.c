/* Model output made safe for the history (issue 15): strings the model
 * sent with \u0000 (jansson keeps them with JSON_ALLOW_NUL, which the
 * provider decoders need so nothing is dropped) get U+FFFD in place of
 * each NUL, as tool output does (utf8.h), so every consumer that takes a
 * C string (events, the run's result, tools, the next request) sees the
 * whole text. */
#include <string.h>

#include "common/utf8.h"

/* A copy of s with NUL as U+FFFD; NULL on OOM. */
static json_t *clean_string(const char *s, size_t len) {
  return al__json_string_text(s, len);
}

static bool has_nul(const char *s, size_t len) {
  return len > 0 && memchr(s, '\0', len) != NULL;
}

static int scrub(json_t *v, size_t depth) {
  size_t i;
  int n = 0;

  if (depth > 4096) {
    return 0; /* the parsers stop far below this */
  }
  if (json_is_array(v)) {
    for (i = 0; i < json_array_size(v); i++) {
      json_t *e = json_array_get(v, i);

      if (json_is_string(e) &&
          has_nul(json_string_value(e), json_string_length(e))) {
        json_t *c = clean_string(json_string_value(e), json_string_length(e));

        if (c == NULL || json_array_set_new(v, i, c) != 0) {
          return AL_ENOMEM;
        }
        n++;
      } else if (json_is_object(e) || json_is_array(e)) {
        int r = scrub(e, depth + 1);

        if (r < 0) {
          return r;
        }
        n += r;
      }
    }
  } else if (json_is_object(v)) {
    const char *key;
    size_t klen;
    json_t *e;
    void *tmp;
    bool bad_key = false;

    json_object_keylen_foreach_safe(v, tmp, key, klen, e) {
      if (has_nul(key, klen)) {
        bad_key = true;
      }
      if (json_is_string(e) &&
          has_nul(json_string_value(e), json_string_length(e))) {
        json_t *c = clean_string(json_string_value(e), json_string_length(e));

        if (c == NULL || json_object_setn_new(v, key, klen, c) != 0) {
          return AL_ENOMEM;
        }
        n++;
      } else if (json_is_object(e) || json_is_array(e)) {
        int r = scrub(e, depth + 1);

        if (r < 0) {
          return r;
        }
        n += r;
      }
    }
    if (bad_key) {
      /* Keys with NUL: moved to their cleaned name (a later duplicate
       * wins, as a JSON parser's would). */
      json_t *copy = json_object();

      if (copy == NULL) {
        return AL_ENOMEM;
      }
      json_object_keylen_foreach(v, key, klen, e) {
        al_buf_t b;
        int rc;

        al_buf_init(&b, klen * 3 + 4);
        rc = al__text_clean_append(&b, key, klen, NULL);
        if (rc == 0) {
          rc = json_object_setn(copy, b.data != NULL ? b.data : "", b.len,
                                e);
        }
        al_buf_free(&b);
        if (rc != 0) {
          json_decref(copy);
          return AL_ENOMEM;
        }
        n += has_nul(key, klen);
      }
      json_object_clear(v);
      if (json_object_update(v, copy) != 0) {
        json_decref(copy);
        return AL_ENOMEM;
      }
      json_decref(copy);
    }
  }
  return n;
}

int al__json_scrub_nul(json_t *v) {
  return v != NULL ? scrub(v, 0) : 0;
}
