/* Summary compaction, the pure part (compact.c; docs/context.md §Summary
 * compaction): where to cut, the bounded summary request, the new
 * history, and the deterministic trim used when the summary call fails.
 * No uv handles, no I/O: the agent (compact_run.c) runs the request. */
#ifndef AL_LOOP_COMPACT_H
#define AL_LOOP_COMPACT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Recent messages kept verbatim after a compaction: up to this many
 * tokens (and at most a quarter of the window). */
#define AL_COMPACT_KEEP_TOKENS 20000
/* The summary request is trimmed to this share of the window. */
#define AL_COMPACT_REQUEST_PCT 80
/* Consecutive failed compactions that end the run. */
#define AL_COMPACT_MAX_FAILURES 3

#define AL_COMPACT_PROMPT                                                     \
  "Write a handoff summary of this conversation so far: you will continue " \
  "the work from it alone, so keep every fact you still need. Do not call " \
  "any tools. Use exactly these sections:\n"                                 \
  "## Goal\nThe task, in the user's terms.\n"                                \
  "## User constraints\nEvery instruction or preference the user gave, "     \
  "quoted word for word.\n"                                                  \
  "## Done\nWhat is finished, with results.\n"                               \
  "## Current step\nWhat was in progress at the end.\n"                      \
  "## Failed attempts\nWhat was tried and did not work, and why, so it is " \
  "not tried again.\n"                                                       \
  "## Files touched\nPaths read or changed, one per line.\n"                 \
  "## Next step\nThe very next action."

/* The head of the summary message in the new history. */
#define AL_COMPACT_HEAD                                                     \
  "[agentloop compacted this conversation: %zu earlier messages were "      \
  "replaced by the summary below. The first message above is the user's " \
  "original request, verbatim.]\n\n"

/* Estimated tokens of messages[from..] (the budget's raw rule, times
 * ratio). */
int64_t al__compact_tokens(const json_t *msgs, size_t from, double ratio);

/* A safe cut: the index c of an assistant message (c >= 2) such that
 * messages[c..] are kept verbatim and everything in messages[1..c) is
 * summarized. A tool_use and its results always stay together, since the
 * results follow their assistant message. Picks the smallest c whose
 * tail fits keep_tokens (the most kept), else the last assistant message
 * that leaves something to drop. Returns 0 when nothing can be dropped. */
size_t al__compact_cut(const json_t *msgs, int64_t keep_tokens, double ratio);

/* The cut for a message-count limit: the smallest assistant index c >= 2
 * with 1 + (n - c) <= max_messages, or 0 when none. */
size_t al__compact_cut_count(const json_t *msgs, size_t max_messages);

/* The summary request's messages: msgs (borrowed) bounded to max_tokens
 * by dropping the oldest whole exchanges after the first message (with a
 * notice in it), then the prompt (plus the caller's instructions, may be
 * NULL) as the last user text. New array, or NULL (no memory). *dropped
 * gets the messages left out. */
json_t *al__compact_request(const json_t *msgs, int64_t max_tokens,
                            double ratio, const char *instructions,
                            size_t *dropped);

/* The history after compaction: the first user message's text verbatim
 * plus one summary block (AL_COMPACT_HEAD + summary), the latest real
 * user request verbatim when it was among the dropped messages, then
 * msgs[cut..]. New array, or NULL. */
json_t *al__compact_assemble(const json_t *msgs, size_t cut,
                             const char *summary, size_t summary_len);

/* The summary used when the summary call failed (deterministic, from the
 * dropped messages alone): the fixed sections with what can be known
 * without a model (the user's requests, the tools called, the paths they
 * named) and a notice. al_malloc'd text, or NULL. */
char *al__compact_fallback_summary(const json_t *msgs, size_t cut);

/* Messages and tool results in msgs[1..cut). */
void al__compact_counts(const json_t *msgs, size_t cut, uint32_t *messages,
                        uint32_t *tool_results);

#endif
