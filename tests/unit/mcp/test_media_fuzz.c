/* fuzz/fuzz_media.c's checks over its seed corpus in the normal build:
 * the target itself, compiled here under another name, so the replay and
 * the fuzzer test the same invariants. */
#include <stdio.h>

#include "test.h"

#define LLVMFuzzerTestOneInput media_fuzz_one
int media_fuzz_one(const uint8_t *data, size_t size);
#include "../../../fuzz/fuzz_media.c"

TEST_IMPL(media_fuzz_seeds_replay) {
  static const char *const seeds[] = {"png", "jpeg", "gif", "webp_vp8x",
                                      "webp_vp8l", "webp_vp8", "pdf",
                                      "huge_png", "text", NULL};
  char path[512];
  unsigned char buf[65536];
  size_t i, n;
  FILE *f;

  for (i = 0; seeds[i] != NULL; i++) {
    snprintf(path, sizeof(path), "%s/fuzz/corpus/fuzz_media/%s",
             AL_SOURCE_DIR, seeds[i]);
    f = fopen(path, "rb");
    ASSERT_NOT_NULL(f);
    n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    ASSERT(n > 0);
    /* aborts on a broken invariant */
    ASSERT_EQ(media_fuzz_one(buf, n), 0);
  }
  return 0;
}
