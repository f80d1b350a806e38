/* The conversation history of a run (SPEC §5 history rules, §6 run loop;
 * PROTOCOLS §2.3, §3.1).
 *
 * Pure: no uv handles, no I/O. The history is a jansson array of
 * normalized, Anthropic-shaped messages ({"role","content":[blocks]}) that
 * al_provider_build_request takes as is for both providers (the OpenAI
 * builder converts it). Every operation keeps the array valid for the next
 * request, or refuses and leaves it unchanged; the one state in which it is
 * not sendable is an open tool turn (an assistant message whose tool_use
 * ids are not all answered yet), which only close_turn or cancel_open end.
 *
 * Decisions recorded here:
 *  - The system prompt is kept once, beside the messages (the providers
 *    put it at top level / first), never as a message.
 *  - Stored messages hold only role and content. The provider's message
 *    also carries id, model, stop_reason and usage; the Messages API
 *    rejects unknown message fields, and the builder sends the history
 *    unchanged, so those stay with the loop's events. Content blocks are
 *    copied verbatim, in order (each block object is new, its members are
 *    shared by reference: the text of a long reply is not duplicated, and
 *    the values are never modified in place): thinking with its signature,
 *    redacted_thinking, tool_use id/name/input, server tool blocks and
 *    unknown blocks exactly as given.
 *  - An assistant message with empty content (cancel or error before any
 *    block) is not committed: the API allows empty content only for a final
 *    assistant prefill, and the next user text would make it invalid.
 *    Consecutive assistant replies (pause_turn, a max_tokens continuation)
 *    have their blocks appended to the previous assistant message, as the
 *    API itself combines consecutive same-role turns; roles then strictly
 *    alternate, which OpenAI-compatible servers want too.
 *  - User text that follows tool results merges into that user message,
 *    after the tool_result blocks (the API requires them first).
 *  - A partial or retried reply is never handed to the history: the loop
 *    commits only at message_stop, the partial lives in its al_pstream_t
 *    and is dropped with it, so there is nothing to undo here. Results
 *    for tools of such a reply are refused (their ids are unknown), which
 *    makes a late result from an aborted tool harmless.
 *  - Cancellation mid-stream therefore leaves the history ending with the
 *    user message; the next run's text merges into it.
 *  - tool_result blocks are written in tool_use order (the API accepts any
 *    order, but the order is what the model asked in and what the OpenAI
 *    conversion turns into one tool message per call). */
#ifndef AL_LOOP_HISTORY_H
#define AL_LOOP_HISTORY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/common.h"

#define AL_HISTORY_CANCELLED_TEXT "operation cancelled by user"
/* The user-side note after a reply the user interrupted mid-stream. */
#define AL_HISTORY_INTERRUPTED_TEXT "[the user interrupted this reply]"

typedef struct al_history_s {
  char *system;      /* owned, or NULL */
  json_t *messages;  /* array of {"role","content":[...]}; NULL until used */
  /* The open tool turn: the tool_use ids of the last assistant message in
   * order (strings), and the results received so far by id. Both NULL
   * when no turn is open. */
  json_t *open_ids;
  json_t *results;   /* object: id -> tool_result block */
} al_history_t;

/* In place, cannot fail; makes al__history_free safe. */
void al__history_init(al_history_t *h);
void al__history_free(al_history_t *h);

/* Replaces the system prompt (NULL clears). AL_ENOMEM. */
int al__history_set_system(al_history_t *h, const char *system);
const char *al__history_system(const al_history_t *h);

/* Appends user text: into the last message if it is a user message (after
 * its tool_result blocks), else as a new user message. AL_EINVAL for empty
 * or NULL text, AL_EBUSY while a tool turn is open (the text would sit
 * where the results must go), AL_ENOMEM. */
int al__history_append_user_text(al_history_t *h, const char *text);

/* Commits the assistant message as received (borrowed; its blocks are
 * copied, their member values shared). Opens a tool turn when it has tool_use blocks. Empty
 * content commits nothing and returns 0. AL_EINVAL: not an assistant
 * message, content not an array, a tool_use block without string id/name
 * or object input, or an id already used in this history; AL_ESTATE: no
 * user message before it; AL_EBUSY: a tool turn is open; AL_ENOMEM. */
int al__history_commit_assistant(al_history_t *h, const json_t *message);

/* Records the result of one open tool_use, in any order. content is a
 * string or an array of content blocks (borrowed, deep-copied).
 * AL_ENOTFOUND: no open tool_use with this id (unknown, or no turn open);
 * AL_EEXIST: this id has a result already; AL_EINVAL: bad content;
 * AL_ENOMEM. */
int al__history_add_tool_result(al_history_t *h, const char *tool_use_id,
                                const json_t *content, bool is_error);
/* The same with a text content. */
int al__history_add_tool_result_text(al_history_t *h, const char *tool_use_id,
                                     const char *text, bool is_error);

/* True while an assistant message's tool_use ids are open. */
bool al__history_turn_open(const al_history_t *h);
/* Open tool_use ids that have no result yet (0 when no turn is open). */
size_t al__history_pending(const al_history_t *h);
/* The i-th open tool_use id in tool_use order, or NULL. */
const char *al__history_open_id(const al_history_t *h, size_t i);

/* Appends ONE user message with every result, in tool_use order, and ends
 * the turn. AL_EBUSY if some id has no result yet (nothing changes);
 * AL_ESTATE if no turn is open; AL_ENOMEM. */
int al__history_close_turn(al_history_t *h);

/* Gives every open id without a result an is_error result with `text`
 * (NULL: AL_HISTORY_CANCELLED_TEXT) and closes the turn. No open turn: 0,
 * nothing changes. AL_ENOMEM (the turn stays open, results kept). */
int al__history_cancel_open(al_history_t *h, const char *text);

/* Deep copy (messages, system, open turn) into dst, which is initialized
 * here; for the max_turns summary call. dst is freed by the caller. On
 * AL_ENOMEM dst is left initialized and empty. */
int al__history_copy(const al_history_t *src, al_history_t *dst);

/* Number of messages. */
size_t al__history_count(const al_history_t *h);

/* Borrowed view for al_provider_build_request: valid until the next
 * mutating call. NULL while the history has no message (the builders take
 * NULL as an empty list). */
const json_t *al__history_to_json(const al_history_t *h);

/* Checks that the history can be sent: at least one message; roles user
 * or assistant, strictly alternating, user first; non-empty content; the
 * block shapes the API checks (text, tool_use, tool_result, thinking,
 * redacted_thinking); unique tool_use ids; after an assistant message with
 * tool_use ids, a user message beginning with exactly one tool_result per
 * id, in tool_use order, other content after them; no tool_result
 * anywhere else; no open turn. Stricter than the API in alternation and
 * order (the history never produces otherwise). Returns 0, or AL_EINVAL
 * with a reason in why (why may be NULL). */
int al__history_validate(const al_history_t *h, char *why, size_t why_len);
/* The block shapes of one message's content alone (a transcript loader
 * checks a record before committing it). 0 or AL_EINVAL with why. */
int al__history_check_blocks(const json_t *content, bool assistant,
                             char *why, size_t why_len);
/* The same check on a bare messages array (tests, loaded transcripts). */
int al__history_validate_json(const json_t *messages, char *why,
                              size_t why_len);

#endif
