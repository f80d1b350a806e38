/* libFuzzer target: the hand-written delta parser (al__fj_parse_delta)
 * against the jansson reference (al__fj_parse_delta_jansson). The input is
 * one SSE data payload. The fast path may decline (0) anything; when it
 * accepts (1), jansson must accept too with the same kind, index, text and
 * boundary surrogates. Any disagreement aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "provider/provider.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_buf_t fscratch;
  al_buf_t jscratch;
  al_fj_delta_t f;
  al_fj_delta_t j;
  const char *p = (const char *)data;
  int frc;
  int jrc;

  al_buf_init(&fscratch, 1 << 20);
  al_buf_init(&jscratch, 1 << 20);
  memset(&f, 0, sizeof(f));
  memset(&j, 0, sizeof(j));
  frc = al__fj_parse_delta(p, size, &fscratch, &f);
  jrc = al__fj_parse_delta_jansson(p, size, &jscratch, &j);
  if (frc < 0 || jrc < 0) {
    /* Only AL_ETOOBIG / AL_ENOMEM are allowed, and the input is smaller
     * than the scratch limit. */
    fprintf(stderr, "error: fast rc=%d jansson rc=%d\n", frc, jrc);
    abort();
  }
  if (frc == 1 &&
      (jrc != 1 || f.kind != j.kind || f.index != j.index ||
       f.len != j.len || (f.len > 0 && memcmp(f.text, j.text, f.len) != 0) ||
       f.lead_lo != j.lead_lo || f.trail_hi != j.trail_hi)) {
    fprintf(stderr,
            "fast:    rc=%d kind=%d index=%lld len=%zu lead=%x trail=%x "
            "'%.*s'\n",
            frc, f.kind, (long long)f.index, f.len, f.lead_lo, f.trail_hi,
            (int)f.len, f.text != NULL ? f.text : "");
    fprintf(stderr,
            "jansson: rc=%d kind=%d index=%lld len=%zu lead=%x trail=%x "
            "'%.*s'\n",
            jrc, j.kind, (long long)j.index, j.len, j.lead_lo, j.trail_hi,
            (int)j.len, j.text != NULL ? j.text : "");
    abort();
  }
  al_buf_free(&fscratch);
  al_buf_free(&jscratch);
  return 0;
}
