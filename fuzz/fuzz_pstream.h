/* Shared body of fuzz_anthropic and fuzz_openai: the input is a response
 * body fed through al_pstream_t with the fast JSON path on and off (and
 * strict_indexes on and off). Both runs must produce the same normalized
 * event sequence (type, index, text of every event), the same status, the
 * same final message (json_equal) and, for OpenAI, the same
 * chat.completion. The slow run is fed in chunks whose sizes come from the
 * input, so it also checks that the split does not matter. A mismatch
 * aborts. */
#ifndef AL_FUZZ_PSTREAM_H
#define AL_FUZZ_PSTREAM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "provider/provider.h"

typedef struct {
  al_buf_t log;
  json_t *message;    /* al_pstream_message, new ref or NULL */
  json_t *completion; /* al_pstream_openai_completion or NULL */
  char *completion_err;
} fz_result_t;

static void fz_put(fz_result_t *r, const char *p, size_t n) {
  if (al_buf_append(&r->log, p, n) != 0) {
    abort();
  }
}

static int fz_on_event(void *data, const al_pevent_t *ev) {
  fz_result_t *r = data;
  char head[64];

  snprintf(head, sizeof(head), "%s %d %zu:", al_pevent_name(ev->type),
           ev->index, ev->text != NULL ? ev->len : 0);
  fz_put(r, head, strlen(head));
  if (ev->text != NULL) {
    fz_put(r, ev->text, ev->len);
  }
  fz_put(r, "\n", 1);
  return 0;
}

static void fz_run(const al_provider_t *prov, const uint8_t *data,
                   size_t size, bool fast, bool strict, size_t maxchunk,
                   fz_result_t *r) {
  al_pstream_options_t o;
  al_pstream_t s;
  size_t off = 0;
  uint32_t x = (uint32_t)size * 2654435761u + 7;
  int rc = 0;
  char line[32];
  json_t *m;

  memset(r, 0, sizeof(*r));
  al_buf_init(&r->log, SIZE_MAX / 2);
  al_pstream_options_init(&o);
  o.on_event = fz_on_event;
  o.data = r;
  o.fast_path = fast;
  o.strict_indexes = strict;
  if (al_pstream_init(&s, prov, &o) != 0) {
    abort();
  }
  if (maxchunk == 0) {
    rc = al_pstream_feed(&s, (const char *)data, size);
  } else {
    while (off < size && rc == 0) {
      size_t n;

      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      n = AL_MIN(1 + x % maxchunk, size - off);
      rc = al_pstream_feed(&s, (const char *)data + off, n);
      off += n;
    }
  }
  if (rc == 0) {
    rc = al_pstream_finish(&s);
  }
  snprintf(line, sizeof(line), "rc=%d\n", rc);
  fz_put(r, line, strlen(line));
  m = al_pstream_message(&s);
  r->message = m != NULL ? json_deep_copy(m) : NULL;
  if (prov->kind == AL_PROVIDER_OPENAI) {
    const char *err = NULL;

    r->completion = al_pstream_openai_completion(&s, &err);
    r->completion_err = err != NULL ? strdup(err) : NULL;
  }
  al_pstream_free(&s);
}

static void fz_result_free(fz_result_t *r) {
  al_buf_free(&r->log);
  json_decref(r->message);
  json_decref(r->completion);
  free(r->completion_err);
}

static bool fz_json_same(json_t *a, json_t *b) {
  if (a == NULL || b == NULL) {
    return a == b;
  }
  return json_equal(a, b) != 0;
}

static void fz_dump(const char *what, fz_result_t *r) {
  char *m = r->message != NULL ? json_dumps(r->message, JSON_ENCODE_ANY)
                               : NULL;
  char *c = r->completion != NULL
                ? json_dumps(r->completion, JSON_ENCODE_ANY)
                : NULL;

  fprintf(stderr, "--- %s\n%.*s\nmessage: %s\ncompletion: %s (%s)\n", what,
          (int)r->log.len, r->log.data, m != NULL ? m : "NULL",
          c != NULL ? c : "NULL",
          r->completion_err != NULL ? r->completion_err : "-");
  free(m);
  free(c);
}

static int fz_pstream_one(const al_provider_t *prov, const uint8_t *data,
                          size_t size) {
  unsigned strict;
  unsigned h = 0;
  size_t i;

  /* The chunking of the slow run comes from a hash of the input, so the
   * whole input stays a plain response body (the seeds are real ones). */
  for (i = 0; i < size; i++) {
    h = h * 31 + data[i];
  }
  for (strict = 0; strict < 2; strict++) {
    fz_result_t fast;
    fz_result_t slow;
    size_t maxchunk = (h & 1) ? 0 : 1 + (h >> 1) % 64;

    fz_run(prov, data, size, true, strict != 0, 0, &fast);
    fz_run(prov, data, size, false, strict != 0, maxchunk, &slow);
    if (fast.log.len != slow.log.len ||
        memcmp(fast.log.data, slow.log.data, fast.log.len) != 0 ||
        !fz_json_same(fast.message, slow.message) ||
        !fz_json_same(fast.completion, slow.completion) ||
        (fast.completion_err == NULL) != (slow.completion_err == NULL) ||
        (fast.completion_err != NULL &&
         strcmp(fast.completion_err, slow.completion_err) != 0)) {
      fprintf(stderr, "strict=%u, slow run in chunks of at most %zu\n",
              strict, maxchunk);
      fz_dump("fast path, whole", &fast);
      fz_dump("jansson path, chunked", &slow);
      abort();
    }
    fz_result_free(&fast);
    fz_result_free(&slow);
  }
  return 0;
}

#endif
