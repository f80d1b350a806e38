/* libFuzzer target: the tools.d loader and the argument template expander
 * (RELIABILITY.md §3 `tool_yaml`, `arg_template`). The input is YAML, then
 * optionally a NUL byte and a JSON object: every tool that loads is given
 * that object as its input. Loading must never crash or leak, every error
 * line must carry FILE:LINE:COL, and an argv that is built must have cmd
 * first and no NULL before its end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sandbox/sandbox.h"
#include "tools/clitool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  const char *nul = memchr(data, '\0', size);
  size_t ylen = nul != NULL ? (size_t)(nul - text) : size;
  json_t *input = NULL;
  al_cli_set_t set;
  size_t i;

  al__cli_set_init(&set);
  (void)al__cli_load_string(&set, "f.yaml", text, ylen, false);
  if (set.n_errors > 0 &&
      (set.errors.data == NULL || strncmp(set.errors.data, "f.yaml:", 7))) {
    abort();
  }
  if (nul != NULL) {
    input = json_loadb(nul + 1, size - ylen - 1, JSON_ALLOW_NUL, NULL);
  }
  for (i = 0; input != NULL && i < set.n; i++) {
    al_buf_t why;
    char **argv = NULL;
    json_t *schema = al__cli_def_schema(set.defs[i]);

    json_decref(schema);
    al_buf_init(&why, 4096);
    if (al__cli_build_argv(set.defs[i], input, &argv, &why) == 0) {
      if (argv == NULL || argv[0] == NULL ||
          strcmp(argv[0], set.defs[i]->cmd) != 0) {
        abort();
      }
      al__sandbox_argv_free(argv);
    }
    al_buf_free(&why);
  }
  json_decref(input);
  al__cli_set_free(&set);
  return 0;
}
