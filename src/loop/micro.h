/* Micro-compaction: see micro.c. Pure (no uv handles, no I/O). */
#ifndef AL_LOOP_MICRO_H
#define AL_LOOP_MICRO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Defaults (issue 11, seed 002). */
#define AL_MICRO_KEEP 3
#define AL_MICRO_MIN_TOKENS 20000
/* What the images and PDFs of a history may carry into one request:
 * Anthropic's Messages API takes 32 MB per request and 100 images; 20 MiB
 * of base64 leaves room for the rest of a long conversation. */
#define AL_MICRO_MEDIA_MAX_B64 ((size_t)20 * 1024 * 1024)
#define AL_MICRO_MEDIA_MAX 100
/* The built-in tool that reads a cleared output back. */
#define AL_MICRO_TOOL "read_tool_output"
/* Every placeholder starts with this (how a cleared result is known). */
#define AL_MICRO_PREFIX "[agentloop cleared this tool output"

typedef struct {
  const char *const *compactable; /* tool names, NULL-terminated */
  size_t keep;                    /* most recent results never cleared */
  int64_t min_tokens;             /* clear only when saving this much */
  double ratio;                   /* calibration (budget.h); 1.0: raw */
} al_micro_options_t;

/* Clears old results of compactable tools in msgs (the history's array,
 * changed in place, copy on write per message). Each cleared result's
 * original content goes to originals (object: call id -> content) and its
 * id to cleared (array); both may be NULL. Returns the estimated tokens
 * saved, 0 when nothing was cleared. */
int64_t al__micro_compact(json_t *msgs, const al_micro_options_t *o,
                          json_t *originals, json_t *cleared);

/* Clears the results of these call ids (a JSON array of strings) exactly
 * as al__micro_compact did: the replay of a recorded micro-compaction.
 * Returns how many were cleared. */
size_t al__micro_clear_ids(json_t *msgs, const json_t *ids);

/* The placeholder text for one result (snprintf's return). */
int al__micro_placeholder(char *buf, size_t size, const char *tool,
                          const char *id, size_t bytes);

/* Whether a tool_result block holds a placeholder. */
bool al__micro_is_cleared(const json_t *result);

#endif
