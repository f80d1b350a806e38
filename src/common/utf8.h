/* UTF-8 helpers shared by the decoders, the events, the tools and the
 * history: validation, WHATWG-style replacement, and the text cleaning
 * that makes any bytes (tool output, file contents) safe for the history,
 * the transcript and a request. */
#ifndef AL_COMMON_UTF8_H
#define AL_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/common.h"

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid
 * (overlong, surrogate, > U+10FFFF, truncated). p[0] >= 0x80. */
static inline size_t al__utf8_seq(const unsigned char *p, const unsigned char *end) {
  unsigned char c = p[0];
  size_t avail = (size_t)(end - p);

  if (c >= 0xC2 && c <= 0xDF) {
    return (avail >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (avail < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) {
      return 0;
    }
    if (c == 0xE0 && p[1] < 0xA0) {
      return 0; /* overlong */
    }
    if (c == 0xED && p[1] >= 0xA0) {
      return 0; /* UTF-8-encoded surrogate */
    }
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (avail < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
        (p[3] & 0xC0) != 0x80) {
      return 0;
    }
    if (c == 0xF0 && p[1] < 0x90) {
      return 0;
    }
    if (c == 0xF4 && p[1] >= 0x90) {
      return 0;
    }
    return 4;
  }
  return 0;
}

/* Appends s to b with invalid UTF-8 sequences replaced by U+FFFD. */
int al__utf8_sanitize_append(al_buf_t *b, const char *s, size_t len);
bool al__utf8_valid(const char *s, size_t len);
/* json_stringn after sanitizing (never NULL unless out of memory). */
json_t *al__json_string_utf8(const char *s, size_t len);
/* Appends the UTF-8 encoding of cp. */
int al__utf8_put(al_buf_t *b, uint32_t cp);

/* Bytes from outside (tool output, a file) as text for the history: like
 * al__utf8_sanitize_append, and NUL bytes become U+FFFD too (jansson, the
 * transcript and the APIs refuse \u0000). Counts what it replaced. */
typedef struct al_text_clean_s {
  size_t nul;     /* NUL bytes replaced */
  size_t invalid; /* U+FFFD written for ill-formed UTF-8 */
} al_text_clean_t;
int al__text_clean_append(al_buf_t *b, const char *s, size_t len,
                          al_text_clean_t *st);
/* True when bytes look binary rather than text, judged on the first 8000:
 * a NUL there when nul_is_binary (git's test, for files), or at least 8
 * and more than 10% of them NUL or ill-formed (command output, where
 * find -print0 is still text). */
bool al__text_looks_binary(const char *s, size_t len, bool nul_is_binary);
/* Appends "[N NUL byte(s) and M invalid UTF-8 sequence(s) replaced with
 * U+FFFD]", naming only what happened. */
int al__text_clean_note(al_buf_t *b, const al_text_clean_t *st);
/* json_stringn of al__text_clean_append's result. */
json_t *al__json_string_text(const char *s, size_t len);
/* Every string in v (values and object keys, at any depth) that holds a
 * NUL is replaced by its copy with U+FFFD for each NUL (json_scrub.c): for
 * what the model sent with \u0000. Returns how many it changed, or
 * AL_ENOMEM. */
int al__json_scrub_nul(json_t *v);

#endif
