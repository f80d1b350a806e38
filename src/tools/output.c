/* What the model sees of a tool's output: every tool cuts its (already
 * sanitized) UTF-8 text at the same number of characters and names the cut
 * with the same notice (SPEC §8), so the counting and the notice live here
 * once. Characters are code points: bytes that are not continuation bytes. */
#include <stdio.h>

#include "tools/tools.h"

size_t al__tool_display_cut(const char *s, size_t len, size_t extra_chars,
                            size_t limit, size_t *shown, size_t *total) {
  size_t i;
  size_t n = 0;
  size_t cut = len;

  for (i = 0; i < len; i++) {
    if (((unsigned char)s[i] & 0xC0) != 0x80) {
      if (n == limit && cut == len) {
        cut = i;
      }
      n++;
    }
  }
  *total = n + extra_chars;
  *shown = AL_MIN(n, limit);
  return cut;
}

int al__tool_truncation_notice(al_buf_t *b, size_t shown, size_t total,
                               const char *tool) {
  return al_buf_printf(b,
                       "[OUTPUT TRUNCATED: showing %zu of %zu characters "
                       "from %s]",
                       shown, total, tool);
}
