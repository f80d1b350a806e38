/* libFuzzer target: the Anthropic stream decoder through al_pstream_t, fast
 * JSON path against the jansson path (see fuzz_pstream.h). */
#include "fuzz_pstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fz_pstream_one(&al_provider_anthropic, data, size);
}
