/* The JSON text of a completed content block, fast (events.h).
 *
 * content_block_completed carries the whole block as JSON text. A text or
 * thinking block holds the reply's entire text, so jansson's dump of it
 * (a per-character escape loop writing into a doubling buffer) cost more
 * than decoding every delta of the stream: 68% of the client's CPU on a
 * 200,000-event reply (perf, bench/README.md). Blocks whose members are
 * all strings (text, thinking, redacted_thinking) are written here in one
 * presized buffer with an 8-bytes-at-a-time scan for the characters JSON
 * must escape; anything else goes to jansson. The output is byte for byte
 * what json_dumps(JSON_COMPACT) writes (checked by a differential test). */
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/common.h"
#include "events/events.h"
#include "provider/provider.h"

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Nonzero when some byte of x is < 0x20, '"' or '\\'. */
static inline uint64_t needs_escape(uint64_t x) {
  uint64_t q = x ^ (ONES * '"');
  uint64_t b = x ^ (ONES * '\\');

  return ((x - ONES * 0x20) | (q - ONES) | (b - ONES)) & ~x & HIGHS;
}

static int put_escaped(al_buf_t *out, const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t i = 0;
  size_t run = 0;
  char esc[6];
  int rc;

  if ((rc = al_buf_append(out, "\"", 1)) != 0) {
    return rc;
  }
  while (i < n) {
#ifdef __SSE2__
    /* Sixteen bytes per step over the long runs that need no escape (a
     * whole reply's text): bytes <= 0x1F, '"' and '\\' are flagged. */
    while (i + 16 <= n) {
      __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
      __m128i ctl = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1F)),
                                   _mm_set1_epi8(0x1F));
      int m = _mm_movemask_epi8(
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                    _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                       ctl));

      if (m != 0) {
        i += (size_t)__builtin_ctz((unsigned)m);
        break;
      }
      i += 16;
    }
    if (i >= n) {
      break;
    }
#endif
    if (i + 8 <= n) {
      uint64_t x;

      memcpy(&x, s + i, 8);
      if (needs_escape(x) == 0) {
        i += 8;
        continue;
      }
    }
    {
      unsigned char c = (unsigned char)s[i];
      size_t el = 2;

      if (c >= 0x20 && c != '"' && c != '\\') {
        i++;
        continue;
      }
      if ((rc = al_buf_append(out, s + run, i - run)) != 0) {
        return rc;
      }
      esc[0] = '\\';
      switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\b': esc[1] = 'b'; break;
      case '\f': esc[1] = 'f'; break;
      case '\n': esc[1] = 'n'; break;
      case '\r': esc[1] = 'r'; break;
      case '\t': esc[1] = 't'; break;
      default:
        memcpy(esc, "\\u00", 4);
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 15];
        el = 6;
      }
      if ((rc = al_buf_append(out, esc, el)) != 0) {
        return rc;
      }
      i++;
      run = i;
    }
  }
  if ((rc = al_buf_append(out, s + run, n - run)) != 0) {
    return rc;
  }
  return al_buf_append(out, "\"", 1);
}

char *al__events_dump_block(const json_t *block, size_t *len) {
  const char *key;
  json_t *v;
  size_t need = 2;
  al_buf_t out;
  bool first = true;
  char *s;

  if (!json_is_object(block)) {
    goto slow;
  }
  json_object_foreach((json_t *)block, key, v) {
    /* Strings are valid UTF-8 by construction (jansson checks what it
     * parses and json_stringn; the aggregator sanitizes what it creates
     * unchecked), so unlike json_dumps this does not re-validate; a NUL
     * inside a string is escaped as jansson does. */
    if (!json_is_string(v)) {
      goto slow;
    }
    need += strlen(key) + json_string_length(v) + 8;
  }
  al_buf_init(&out, SIZE_MAX / 2);
  if (al_buf_reserve(&out, need + need / 8 + 1) != 0) {
    al_buf_free(&out);
    return NULL;
  }
  al_buf_append(&out, "{", 1);
  json_object_foreach((json_t *)block, key, v) {
    if ((!first && al_buf_append(&out, ",", 1) != 0) ||
        put_escaped(&out, key, strlen(key)) != 0 ||
        al_buf_append(&out, ":", 1) != 0 ||
        put_escaped(&out, json_string_value(v), json_string_length(v)) != 0) {
      al_buf_free(&out);
      return NULL;
    }
    first = false;
  }
  if (al_buf_append(&out, "}", 1) != 0 || al_buf_append(&out, "", 1) != 0) {
    al_buf_free(&out);
    return NULL;
  }
  *len = out.len - 1;
  return out.data;
slow:
  s = json_dumps(block, JSON_COMPACT | JSON_ENCODE_ANY);
  if (s == NULL) {
    return NULL;
  }
  /* jansson allocates through our hook (alloc.c): al_free releases it. */
  *len = strlen(s);
  return s;
}
