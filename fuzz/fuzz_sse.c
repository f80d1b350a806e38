/* libFuzzer target: the SSE parser (src/sse).
 *
 * Input layout: byte 0 holds flags (bit 0 flush_at_eof, bit 1
 * dispatch_typed_without_data, bit 2 small limits), byte 1 the small
 * max_line / max_event, byte 2 seeds the chunk sizes; the rest is the
 * stream. The stream is parsed whole and again in chunks, and the two event
 * logs (events, comments, retries and the final status) must be identical:
 * the parser promises the same output however the input is split, errors
 * included. A mismatch aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "sse/sse.h"

typedef struct {
  al_buf_t log;
} rec_t;

static void put(rec_t *r, const char *p, size_t n) {
  if (al_buf_append(&r->log, p, n) != 0) {
    abort();
  }
}

static void put_field(rec_t *r, const char *tag, const char *p, size_t n) {
  char len[32];

  snprintf(len, sizeof(len), "%s%zu:", tag, n);
  put(r, len, strlen(len));
  put(r, p, n);
  put(r, "\n", 1);
}

static int on_event(void *data, const al_sse_event_t *ev) {
  rec_t *r = data;
  char flags[16];

  snprintf(flags, sizeof(flags), "E%d%d%d\n", ev->has_type, ev->has_data,
           ev->has_id);
  put(r, flags, strlen(flags));
  put_field(r, "t", ev->type, ev->type_len);
  put_field(r, "d", ev->data, ev->data_len);
  put_field(r, "i", ev->id, ev->id_len);
  put_field(r, "l", ev->last_event_id, ev->last_event_id_len);
  return 0;
}

static void on_retry(void *data, uint64_t ms) {
  rec_t *r = data;
  char line[40];

  snprintf(line, sizeof(line), "R%llu\n", (unsigned long long)ms);
  put(r, line, strlen(line));
}

static void on_comment(void *data, const char *text, size_t len) {
  put_field(data, "C", text, len);
}

/* Parses the stream in chunks of at most `maxchunk` bytes (0: whole) whose
 * sizes come from `seed`; returns the first non-zero status or finish's. */
static void run(const al_sse_settings_t *base, const char *p, size_t len,
                unsigned seed, size_t maxchunk, rec_t *r) {
  al_sse_settings_t s = *base;
  al_sse_parser_t parser;
  uint32_t x = seed * 2654435761u + 1;
  size_t off = 0;
  int rc = 0;
  char line[32];

  s.data = r;
  al_sse_init(&parser, &s);
  if (maxchunk == 0) {
    rc = al_sse_feed(&parser, p, len);
  } else {
    while (off < len && rc == 0) {
      size_t n;

      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      n = AL_MIN(1 + x % maxchunk, len - off);
      rc = al_sse_feed(&parser, p + off, n);
      off += n;
    }
  }
  if (rc == 0) {
    rc = al_sse_finish(&parser);
  }
  snprintf(line, sizeof(line), "rc=%d\n", rc);
  put(r, line, strlen(line));
  al_sse_free(&parser);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_sse_settings_t s;
  rec_t whole;
  rec_t chunked;
  const char *p;
  size_t len;
  size_t maxchunk;

  if (size < 3) {
    return 0;
  }
  al_sse_settings_init(&s);
  s.on_event = on_event;
  s.on_retry = on_retry;
  s.on_comment = on_comment;
  s.flush_at_eof = (data[0] & 1) != 0;
  s.dispatch_typed_without_data = (data[0] & 2) != 0;
  if (data[0] & 4) {
    s.max_line = 1 + data[1] % 64;
    s.max_event = 1 + (data[1] >> 2) % 64;
  }
  /* Mostly tiny chunks (every boundary case), sometimes larger ones. */
  maxchunk = (data[0] & 8) ? 1 + (size_t)data[2] : 1 + (size_t)(data[2] % 8);
  p = (const char *)data + 3;
  len = size - 3;

  al_buf_init(&whole.log, SIZE_MAX / 2);
  al_buf_init(&chunked.log, SIZE_MAX / 2);
  run(&s, p, len, 0, 0, &whole);
  run(&s, p, len, data[2], maxchunk, &chunked);
  if (whole.log.len != chunked.log.len ||
      memcmp(whole.log.data, chunked.log.data, whole.log.len) != 0) {
    fprintf(stderr, "whole:\n%.*s\nchunked (max %zu):\n%.*s\n",
            (int)whole.log.len, whole.log.data, maxchunk,
            (int)chunked.log.len, chunked.log.data);
    abort();
  }
  al_buf_free(&whole.log);
  al_buf_free(&chunked.log);
  return 0;
}
