/* The validity gate: see validity.c. Pure (no uv handles, no I/O). */
#ifndef AL_LOOP_VALIDITY_H
#define AL_LOOP_VALIDITY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "provider/provider.h"
#include "provider/validate.h"

/* Checks a request body (len bytes of JSON) with provider p's validator.
 * True when it would be accepted; otherwise false with v filled (v->rule
 * names the rule). */
bool al__validity_check(const al_provider_t *p, const char *body, size_t len,
                        al_validate_verdict_t *v);

/* Repairs the unambiguous violations of a messages array (normalized
 * history) in place. Each repair appends {"rule","message"[,"id"]} to
 * `done` (may be NULL). Returns the number of repairs. */
size_t al__validity_repair(json_t *msgs, json_t *done);

#endif
