/* libFuzzer target: the agentloop-mockllm scenario YAML loader. Any input
 * must load or fail cleanly (AL_EPARSE / AL_ENOMEM with a NUL-terminated
 * reason), and never crash or leak (LeakSanitizer checks every run). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mockllm/mockllm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_mockllm_scenario_t *s = NULL;
  char err[256];
  int rc;

  memset(err, 'x', sizeof(err));
  rc = al_mockllm_load_scenario_string((const char *)data, size, "<fuzz>", &s,
                                       err, sizeof(err));
  if (rc == 0) {
    if (s == NULL) {
      abort();
    }
    (void)al_mockllm_scenario_count(s);
    al_mockllm_scenario_free(s);
  } else if (memchr(err, '\0', sizeof(err)) == NULL) {
    abort();
  }
  return 0;
}
