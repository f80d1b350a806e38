/* libFuzzer target: the configuration loader (src/config). The input is
 * YAML, loaded once as a user file and once as a project file (whose
 * restrictions take other paths). Loading must never crash or leak, every
 * error line must carry "f.yaml:LINE:COL: ", and what loaded must render
 * (al_config_to_json, al_config_show). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static const char *no_env(const char *name) {
  (void)name;
  return NULL;
}

static void check_errors(const al_config_t *cfg) {
  const char *p = cfg->errors.data;

  if (cfg->n_errors > 0 && p == NULL) {
    abort();
  }
  while (p != NULL && *p != '\0') {
    const char *e = strchr(p, '\n');

    if (strncmp(p, "f.yaml:", 7) != 0 || e == NULL) {
      abort();
    }
    p = e + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_cfg_layer_t layers[] = {AL_CFG_USER, AL_CFG_PROJECT};
  size_t i;

  for (i = 0; i < 2; i++) {
    al_config_t cfg;
    al_buf_t out;
    json_t *j;

    al_config_init(&cfg);
    (void)al_config_load_string(&cfg, layers[i], "f.yaml",
                                (const char *)data, size);
    check_errors(&cfg);
    j = al_config_to_json(&cfg, true, no_env);
    json_decref(j);
    al_buf_init(&out, 1 << 24);
    (void)al_config_show(&cfg, true, no_env, &out);
    al_buf_free(&out);
    al_config_free(&cfg);
  }
  return 0;
}
