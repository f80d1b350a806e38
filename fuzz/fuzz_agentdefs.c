/* libFuzzer target: an agent definition file (src/config/agentdefs.c).
 * The input is a whole file, front matter and body, parsed into an
 * empty set twice (the second replaces the first). Parsing must never
 * crash or leak; every note must name "a.md" or its place; every
 * definition must keep the contract (a name of a-z 0-9 _ -, 1..64, a
 * description, valid UTF-8 in the prompt).
 * fuzz-args: -max_len=8192 -dict=yaml.dict */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "config/agentdefs.h"

static void check(const al_agentdefs_t *d) {
  size_t i, k;

  for (i = 0; i < d->n_notes; i++) {
    if (strncmp(d->notes[i].text, "a.md:", 5) != 0) {
      abort();
    }
  }
  for (i = 0; i < d->n; i++) {
    const al_subagent_def_t *s = &d->defs[i];
    size_t n = strlen(s->name);

    if (n == 0 || n > 64 ||
        strspn(s->name,
               "abcdefghijklmnopqrstuvwxyz"
               "0123456789_-") != n ||
        s->description == NULL || s->source == NULL ||
        (s->system != NULL && !al__utf8_valid(s->system, strlen(s->system)))) {
      abort();
    }
    for (k = 0; s->tools != NULL && s->tools[k] != NULL; k++) {
      if (s->tools[k][0] == '\0') {
        abort();
      }
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_agentdefs_t *d;

  if (al_agentdefs_new(&d) != 0) {
    return 0;
  }
  (void)al_agentdefs_add_text(d, "a.md", (const char *)data, size);
  (void)al_agentdefs_add_text(d, "a.md", (const char *)data, size);
  check(d);
  al_agentdefs_free(d);
  return 0;
}
