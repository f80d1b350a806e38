/* libFuzzer target: the models catalogue loader (agentloop/models.h). Any
 * input must load or fail with one "f.yaml:LINE:COL: " error, never crash
 * or leak; a catalogue that loads must answer a lookup with a window > 0. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentloop/models.h"
#include "common/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_models_t *m = NULL;
  char *error = NULL;
  al_model_info_t info;
  int rc = al_models_parse(&m, (const char *)data, size, "f.yaml", &error);

  if (rc == AL_ECONFIG && (error == NULL || strncmp(error, "f.yaml:", 7))) {
    abort();
  }
  if (rc == 0) {
    al_models_lookup(m, "claude-sonnet-4-5", NULL, &info);
    if (info.context_window <= 0) {
      abort();
    }
    al_models_lookup(m, "mock", "openai", &info);
    if (info.context_window <= 0) {
      abort();
    }
  }
  al_free(error);
  al_models_free(m);
  return 0;
}
