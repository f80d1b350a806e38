/* The context budget (SPEC §9, docs/context.md §Budget).
 *
 * Pure: no uv handles, no I/O. The agent keeps one al_budget_t. Every
 * request it sends is estimated (al__budget_sent); the reply's usage, when
 * it carries input counts, gives the request's real size
 * (al__budget_observed), which calibrates later estimates of the same
 * model: ratio = reported / estimated, an average weighted toward the
 * newest reply. The projected size of the next request is anchored on the
 * last reported size, plus the calibrated estimate of what changed since.
 *
 * Context tokens of a request = input + cache read + cache creation:
 * Anthropic reports the three apart, and the OpenAI decoder reports
 * uncached input (prompt_tokens minus cached_tokens) with the cached part
 * as cache read, so the sum is the prompt either way.
 *
 * A reply whose server ran tools itself (Anthropic's web search and
 * fetch, code execution: usage.server_tool_use, or such blocks in the
 * reply) reports the inputs of the model calls the server made, search
 * results included: hundreds of thousands of tokens for a request of a
 * few hundred. It says nothing about the size of what we sent, so it
 * neither calibrates nor anchors (issue 22: a two-word prompt was refused
 * as 9742% of the window). And no one reply moves the ratio far: each
 * observation is clamped to [AL_BUDGET_RATIO_MIN, AL_BUDGET_RATIO_MAX]. */
#ifndef AL_LOOP_BUDGET_H
#define AL_LOOP_BUDGET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* SPEC §9: warn at 80%, refuse above 95% after compaction; compact when
 * the projected request exceeds window - max(13,000, max_tokens). */
#define AL_BUDGET_WARN_PCT 80
#define AL_BUDGET_REFUSE_PCT 95
#define AL_BUDGET_RESERVE 13000
/* Calibration: weight of the newest observation. */
#define AL_BUDGET_EWMA_NEW 0.5
/* The band an observed reported/estimated ratio is clamped to: tokenizers
 * differ from 4 characters a token by well under 4x either way. */
#define AL_BUDGET_RATIO_MIN 0.25
#define AL_BUDGET_RATIO_MAX 4.0

typedef struct al_budget_s {
  int64_t window;
  json_t *ratios;    /* model -> observed reported/estimated (real) */
  int64_t last_raw;  /* raw estimate of the last request sent */
  int64_t last_ctx;  /* its reported context tokens; 0: none reported */
  int64_t anchor_raw; /* raw estimate of the request last_ctx belongs to */
  bool warned;       /* context_warning posted (once per session) */
} al_budget_t;

void al__budget_init(al_budget_t *b);
void al__budget_free(al_budget_t *b);

/* SPEC §9's estimate before calibration: 1 token per 4 characters plus 16
 * characters per message, over the request body as sent. */
int64_t al__budget_raw(size_t body_len, size_t n_messages);

/* The same for a body of body_len bytes that carries `messages` (the
 * history it was built from): each image counts by its pixel size
 * (al__media_image_tokens), not by its base64 (docs/context.md). */
int64_t al__budget_raw_msgs(size_t body_len, const json_t *messages);

/* The calibration ratio of `model` (1.0 before any observation). */
double al__budget_ratio(const al_budget_t *b, const char *model);

/* A request of `raw` estimated tokens was sent. */
void al__budget_sent(al_budget_t *b, int64_t raw);

/* The reply to the last request reported usage: context tokens =
 * input + cache_read + cache_creation. Returns that sum (0 when the usage
 * has none of them; nothing is learnt then). server_tools: the reply holds
 * blocks of tools the server ran; then, as when the usage counts any
 * server_tool_use, the sum does not describe the request: 0 is returned
 * (the caller shows its estimate) and nothing is learnt. */
int64_t al__budget_observed(al_budget_t *b, const char *model,
                            const json_t *usage, bool server_tools);

/* The usage counts a tool the server ran (server_tool_use: {N > 0}). */
bool al__budget_has_server_tools(const json_t *usage);

/* Projected context tokens of a request of `raw` estimated tokens. */
int64_t al__budget_project(const al_budget_t *b, const char *model,
                           int64_t raw);

/* Tokens a request may reach before summary compaction: window -
 * max(13,000, max_tokens), the reserve capped at half the window so a
 * small window still leaves room. */
int64_t al__budget_compact_at(const al_budget_t *b, int64_t max_tokens);

/* Whole percent of the window (floor). */
uint32_t al__budget_pct(const al_budget_t *b, int64_t tokens);

#endif
