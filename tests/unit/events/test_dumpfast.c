/* al__events_dump_block against jansson's json_dumps: byte-identical output
 * for every escape class at every offset of the 8-byte scan, random UTF-8,
 * NUL bytes, and the jansson fallback for other shapes. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "events/events.h"
#include "test.h"

static void check(const json_t *block) {
  char *want = json_dumps(block, JSON_COMPACT | JSON_ENCODE_ANY);
  size_t len = 0;
  char *got = al__events_dump_block(block, &len);

  ASSERT_NOT_NULL(want);
  ASSERT_NOT_NULL(got);
  ASSERT_EQ(len, strlen(want));
  ASSERT_MEM_EQ(got, len, want, strlen(want));
  al_free(got);
  al_free(want);
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

TEST_IMPL(events_dump_block_matches_jansson) {
  static const char *const specials[] = {"\"", "\\", "\n", "\r", "\t", "\b",
                                         "\f", "\x01", "\x1f", "\x7f", "/",
                                         "\xc3\xa9", "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80"};
  char buf[64];
  size_t off, k;
  uint64_t seed = 7;
  int i;

  /* Each special character at each position of a 24-byte ASCII string. */
  for (k = 0; k < AL_ARRAY_SIZE(specials); k++) {
    for (off = 0; off < 24; off++) {
      json_t *b;

      memset(buf, 'a', sizeof(buf));
      memcpy(buf + off, specials[k], strlen(specials[k]));
      buf[24 + strlen(specials[k])] = '\0';
      b = json_pack("{s:s, s:s}", "type", "text", "text", buf);
      check(b);
      json_decref(b);
    }
  }
  /* A NUL inside the string (jansson keeps lengths). */
  {
    json_t *b = json_object();

    json_object_set_new(b, "type", json_string("text"));
    json_object_set_new(b, "text", json_stringn("a\0b\"c", 5));
    check(b);
    json_decref(b);
  }
  /* Random strings over an alphabet rich in escapes and multi-byte
   * characters, of every length up to 80; thinking blocks with a
   * signature; keys in insertion order. */
  for (i = 0; i < 3000; i++) {
    char s[400];
    size_t n = 0;
    size_t len = (size_t)(rng_next(&seed) % 80);
    json_t *b;

    while (n < len) {
      uint64_t r = rng_next(&seed) % 20;

      if (r < 12) { /* mostly special characters */
        const char *sp = specials[r % AL_ARRAY_SIZE(specials)];

        memcpy(s + n, sp, strlen(sp));
        n += strlen(sp);
      } else {
        s[n++] = (char)(' ' + rng_next(&seed) % 90);
      }
    }
    s[n] = '\0';
    if (i % 2 == 0) {
      b = json_pack("{s:s, s:s}", "type", "text", "text", s);
    } else {
      b = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", s,
                    "signature", "sig\"1");
    }
    check(b);
    json_decref(b);
  }
  /* Other shapes take jansson's path: same output. */
  {
    json_t *b = json_pack("{s:s, s:s, s:s, s:{s:i, s:[s,b,n]}}", "type",
                          "tool_use", "id", "t1", "name", "x", "input", "n",
                          42, "l", "a", 1);

    check(b);
    json_decref(b);
    b = json_pack("{s:s, s:s, s:[{s:s}]}", "type", "text", "text", "c",
                  "citations", "type", "char_location");
    check(b);
    json_decref(b);
  }
  return 0;
}
