/* libFuzzer target: the OpenAI Responses stream decoder through
 * al_pstream_t (see fuzz_pstream.h): whole against random chunks, strict
 * and lenient; the same events, status and final message, no crash. */
#include "fuzz_pstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fz_pstream_one(&al_provider_openai_responses, data, size);
}
