/* The recorded-shape cases shared by the decode and run tests. */
#ifndef AL_TEST_COMPAT_H
#define AL_TEST_COMPAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
  const char *name;   /* tests/data/compat/NAME.sse */
  bool think_tags;    /* decoded as for a catalogue entry with think_tags */
  const char *expected; /* compat_summary() of the final message */
  const char *provider; /* NULL: openai (Chat Completions) */
} compat_case_t;

extern const compat_case_t compat_cases[];
extern const size_t compat_ncases;

size_t compat_find(const char *name);
/* Summary of a normalized message plus the side events (malloc'd). */
char *compat_summary(json_t *msg, const char *side);
void compat_check_pipeline(size_t i);

#endif
