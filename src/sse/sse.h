/* WHATWG event-stream parser (SPEC §4, PROTOCOLS.md §1).
 *
 * Pure C: no libuv, no allocation per byte. Bytes are fed in arbitrary
 * chunks; events are dispatched through a callback with (ptr, len) slices
 * that are valid only during the callback. The output is identical however
 * the input is split. A line or an event payload larger than the configured
 * maximum is an AL_ETOOBIG error, never a larger allocation. */
#ifndef AL_SSE_H
#define AL_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

typedef struct al_sse_event_s {
  /* The event type: the `event` field, or "message" when it was absent or
   * empty. has_type says whether a non-empty `event` field was given. */
  const char *type;
  size_t type_len;
  bool has_type;
  /* The data buffer with its one trailing LF removed. has_data is false
   * only for blocks dispatched by dispatch_typed_without_data. */
  const char *data;
  size_t data_len;
  bool has_data;
  /* The `id` field as given in this event's own block (the last valid one
   * if several), or has_id false when the block had none (a value with a
   * NUL is ignored, as WHATWG says). */
  const char *id;
  size_t id_len;
  bool has_id;
  /* The WHATWG last event ID at dispatch: sticky across events, "" until
   * an `id` field sets it. */
  const char *last_event_id;
  size_t last_event_id_len;
} al_sse_event_t;

/* Return 0 to continue; any other value stops parsing and is returned by
 * al_sse_feed()/al_sse_finish(). The callback may not call feed again. */
typedef int (*al_sse_event_cb)(void *data, const al_sse_event_t *ev);
/* retry_ms is clamped to UINT64_MAX when the digits overflow
 * (al_sse_retry_digits() has the exact value). */
typedef void (*al_sse_retry_cb)(void *data, uint64_t retry_ms);
typedef void (*al_sse_comment_cb)(void *data, const char *text, size_t len);

typedef struct al_sse_settings_s {
  al_sse_event_cb on_event;     /* required */
  al_sse_retry_cb on_retry;     /* optional: a valid `retry` field */
  al_sse_comment_cb on_comment; /* optional: text after the ':' */
  void *data;                   /* passed to every callback */
  size_t max_line;  /* longest line kept across chunks (default 1 MiB) */
  size_t max_event; /* largest data buffer of one event (default 8 MiB) */
  /* Deviations some providers' SDKs make, both off by default (WHATWG):
   * flush_at_eof: al_sse_finish() completes a pending unterminated line and
   *   dispatches a pending block that has data, as if a blank line ended it
   *   (the OpenAI TS SDK's SSEDecoder.flush()).
   * dispatch_typed_without_data: a block with a non-empty `event` field but
   *   no `data` field is dispatched with has_data false and empty data
   *   (the OpenAI TS SDK dispatches it and then fails on the empty JSON). */
  bool flush_at_eof;
  bool dispatch_typed_without_data;
} al_sse_settings_t;

typedef struct al_sse_parser_s {
  al_sse_settings_t settings;
  al_buf_t line;     /* a line split across chunks */
  al_buf_t data;     /* data buffer of the event being built */
  al_buf_t type;     /* event-type buffer */
  al_buf_t id;       /* this block's id */
  al_buf_t last_id;  /* sticky last event ID */
  unsigned bom_state; /* bytes of a leading BOM matched so far; 3 = done */
  bool skip_lf;       /* previous chunk ended in CR */
  bool has_id;
  bool has_data;      /* at least one data field in this block */
  int error;          /* sticky error after a failure */
  uint64_t retry_ms;
  bool has_retry;
  /* Added after the first draft (internal): a `data` line cut by a chunk
   * end streams its value straight into `data`, so each data byte is
   * copied once; line_len counts that line's bytes against max_line. */
  bool line_is_data;
  size_t line_len;
  /* Added later: the last valid retry value's exact digits (see
   * al_sse_retry_digits). */
  al_buf_t retry_digits;
} al_sse_parser_t;

/* Fills defaults: limits above, callbacks NULL. A limit left at 0 also
 * means the default. */
void al_sse_settings_init(al_sse_settings_t *s);
/* In place; cannot fail (buffers allocate lazily). */
void al_sse_init(al_sse_parser_t *p, const al_sse_settings_t *s);
/* Parses len bytes. Returns 0, AL_ETOOBIG / AL_ENOMEM (sticky: later calls
 * return it again), or the callback's non-zero value (sticky as well: the
 * rest of that chunk was not parsed; al_sse_reset() clears it). Bytes are
 * not UTF-8 decoded: invalid sequences reach the callbacks unchanged. */
int al_sse_feed(al_sse_parser_t *p, const char *bytes, size_t len);
/* End of stream: a pending CR completes its line; an event not terminated
 * by a blank line is discarded (WHATWG). Returns 0 or a sticky error, or
 * with flush_at_eof the on_event value of the flushed event. Pending state
 * is dropped; call al_sse_reset() before parsing another stream. */
int al_sse_finish(al_sse_parser_t *p);
/* The last valid `retry` value exactly as the stream gave it, for values
 * beyond uint64_t (on_retry and retry_ms clamp to UINT64_MAX): its digits
 * with leading zeros stripped ("0" when all were zeros), not
 * NUL-terminated when empty; NULL (len 0) when no valid retry was seen.
 * Valid until the next feed/reset. */
const char *al_sse_retry_digits(const al_sse_parser_t *p, size_t *len);
/* Back to the initial state (BOM expected again), keeping settings. */
void al_sse_reset(al_sse_parser_t *p);
void al_sse_free(al_sse_parser_t *p);

#endif
