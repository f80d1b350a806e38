/* LoopEvents (SPEC §10): what a running agent reports to its subscribers.
 *
 * Every event carries the common fields (type, session, run, turn, seq,
 * ts_ns) and a small per-type payload in a union, selected by `type`.
 * Nothing in here is owned by the subscriber: strings are (ptr, len)
 * slices and the session id a C string, all borrowed for the duration of
 * the callback only (like llhttp's `at, len`), so the hot deltas cost no
 * allocation. Subscribers copy whatever they keep. Slices are not
 * NUL-terminated and may hold arbitrary bytes (tool output); ptr == NULL
 * means "absent". docs/events.md lists the JSON form of every type. */
#ifndef AGENTLOOP_EVENTS_H
#define AGENTLOOP_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XX(name, snake_case name in JSON). The order is the enum order; new
 * types go at the end so numeric values stay stable for embedders. */
#define AL_EVENT_TYPE_MAP(XX)                                   \
  XX(RUN_STARTED, "run_started")                                \
  XX(TURN_STARTED, "turn_started")                              \
  XX(STREAM_REQUEST_START, "stream_request_start")              \
  XX(TEXT_DELTA, "text_delta")                                  \
  XX(THINKING_DELTA, "thinking_delta")                          \
  XX(TOOL_INPUT_DELTA, "tool_input_delta")                      \
  XX(CONTENT_BLOCK_COMPLETED, "content_block_completed")        \
  XX(TOOL_USE_QUEUED, "tool_use_queued")                        \
  XX(TOOL_USE_STARTED, "tool_use_started")                      \
  XX(TOOL_PROGRESS, "tool_progress")                            \
  XX(TOOL_USE_COMPLETED, "tool_use_completed")                  \
  XX(TOOL_EXECUTION_ABORTED, "tool_execution_aborted")          \
  XX(APPROVAL_REQUIRED, "approval_required")                    \
  XX(APPROVAL_RESPONSE, "approval_response")                    \
  XX(USAGE, "usage")                                            \
  XX(RETRY, "retry")                                            \
  XX(API_ERROR, "api_error")                                    \
  XX(STREAM_STALL_DETECTED, "stream_stall_detected")            \
  XX(MODEL_FALLBACK, "model_fallback")                          \
  XX(TOMBSTONE, "tombstone")                                    \
  XX(MICRO_COMPACTION, "micro_compaction")                      \
  XX(COMPACTION_STARTED, "compaction_started")                  \
  XX(COMPACTION_COMPLETED, "compaction_completed")              \
  XX(TURN_COMPLETED, "turn_completed")                          \
  XX(MAX_TURNS_REACHED, "max_turns_reached")                    \
  XX(INTERRUPTED, "interrupted")                                \
  XX(ERROR, "error")                                            \
  XX(FINAL, "final")                                            \
  XX(CONTEXT_WARNING, "context_warning")                        \
  XX(HISTORY_REPAIRED, "history_repaired")                      \
  XX(PROVIDER_NOTICE, "provider_notice")                        \
  XX(CITATION, "citation")                                      \
  XX(MCP_SERVER_STATE, "mcp_server_state")                      \
  XX(MCP_TOOLS_CHANGED, "mcp_tools_changed")                    \
  XX(MCP_WARNING, "mcp_warning")                                \
  XX(HOOK_EXECUTED, "hook_executed")                            \
  XX(USER_MESSAGE, "user_message")                              \
  XX(MCP_TOOL_CALL_BEGIN, "mcp_tool_call_begin")                \
  XX(MCP_TOOL_CALL_END, "mcp_tool_call_end")                    \
  XX(MCP_STARTUP_COMPLETE, "mcp_startup_complete")            \
  XX(SUBAGENT_STARTED, "subagent_started")                      \
  XX(SUBAGENT_COMPLETED, "subagent_completed")

typedef enum {
#define AL_EVENT_GEN(name, str) AL_EVENT_##name,
  AL_EVENT_TYPE_MAP(AL_EVENT_GEN)
#undef AL_EVENT_GEN
  AL_EVENT_TYPE_COUNT
} al_event_type_t;

/* A borrowed byte range; ptr == NULL means the field is absent (null in
 * JSON), ptr != NULL with len == 0 is the empty string. */
typedef struct {
  const char *ptr;
  size_t len;
} al_slice_t;

/* run_started: our `system/init`. tools is JSON text (an array of tool
 * names or definitions); sandbox is the mode name. */
typedef struct {
  al_slice_t model;
  al_slice_t provider;
  al_slice_t cwd;
  al_slice_t tools;
  al_slice_t sandbox;
} al_event_run_started_t;

/* stream_request_start: one HTTP request to the model (attempt 1..n). */
typedef struct {
  al_slice_t model;
  uint32_t attempt;
} al_event_stream_request_t;

/* text_delta, thinking_delta, tool_input_delta: one streamed piece of
 * content block `index`. tool_input_delta also names the call and its
 * text is partial JSON (not valid on its own). */
typedef struct {
  int32_t index;
  al_slice_t text;
  al_slice_t call_id;
} al_event_delta_t;

/* content_block_completed: block is the completed block as JSON text. */
typedef struct {
  int32_t index;
  al_slice_t block_type;
  al_slice_t block;
} al_event_block_t;

/* All tool_* events. input is JSON text; content is the result (queued,
 * started: absent) or an output chunk (tool_progress), arbitrary bytes;
 * reason says why a tool was aborted ("streaming_fallback", ...). */
typedef struct {
  al_slice_t call_id;
  al_slice_t name;
  al_slice_t input;
  al_slice_t content;
  al_slice_t reason;
  bool is_error;
  uint64_t duration_ms;
} al_event_tool_t;

/* approval_required / approval_response. decision is allow, deny or
 * always (response only); category is the tool's category (required). */
typedef struct {
  al_slice_t request;
  al_slice_t call_id;
  al_slice_t name;
  al_slice_t input;
  al_slice_t category;
  al_slice_t decision;
  al_slice_t reason;
} al_event_approval_t;

/* usage: token counts of one model response (Anthropic names; for
 * OpenAI-compatible servers input_tokens is the uncached part of the
 * prompt and cache_read_input_tokens the cached part). context_tokens is
 * the size of the request that produced the response (input + cache read
 * + cache creation), context_window the model's window and context_pct
 * the whole percent used; context_estimated when the response reported
 * no input counts and context_tokens is agentloop's estimate.
 * context_warning (the first time a request reaches 80% of the window in
 * the session) carries the same context_* fields. */
typedef struct {
  uint64_t input_tokens;
  uint64_t output_tokens;
  uint64_t cache_read_input_tokens;
  uint64_t cache_creation_input_tokens;
  uint64_t reasoning_tokens; /* a part of output_tokens, where reported */
  uint64_t context_tokens;
  uint64_t context_window;
  uint32_t context_pct;
  bool context_estimated;
} al_event_usage_t;

/* retry: attempt `attempt` of `max` starts after delay_ms. kind is the
 * error class that caused it ("overloaded", "rate_limited", "server",
 * "network", "stall"); status the HTTP status or 0. */
typedef struct {
  uint32_t attempt;
  uint32_t max;
  uint64_t delay_ms;
  int status;
  al_slice_t kind;
  al_slice_t message;
} al_event_retry_t;

/* api_error: kind is the provider's error type ("overloaded_error"). */
typedef struct {
  int status;
  al_slice_t kind;
  al_slice_t message;
} al_event_api_error_t;

/* stream_stall_detected: no content for idle_ms. */
typedef struct {
  uint64_t idle_ms;
  bool content_delivered;
} al_event_stall_t;

/* model_fallback. */
typedef struct {
  al_slice_t from;
  al_slice_t to;
  al_slice_t reason;
} al_event_fallback_t;

/* tombstone: drop the partial assistant message message_id (absent when
 * the provider never gave it one: then the whole turn's message). */
typedef struct {
  al_slice_t message_id;
  al_slice_t reason;
} al_event_tombstone_t;

/* micro_compaction, compaction_started, compaction_completed
 * (docs/context.md). trigger: auto, manual or overflow (micro: auto).
 * Token counts are the budget's projections of the next request.
 * micro_compaction: cleared results, their call ids (JSON array text) and
 * the tokens saved. compaction_completed: messages and tool results
 * dropped, the summary's size, and fallback when the summary call failed
 * and a deterministic trim took its place. */
typedef struct {
  al_slice_t trigger;
  uint64_t tokens_before;
  uint64_t tokens_after;
  uint32_t cleared;
  al_slice_t call_ids;
  uint64_t tokens_saved;
  uint32_t dropped_messages;
  uint32_t dropped_tool_results;
  uint64_t summary_tokens;
  bool fallback;
} al_event_compaction_t;

/* history_repaired: the validity gate repaired the history before a
 * request (docs/context.md). repairs is JSON text: an array of
 * {"rule","message"[,"id"]}; count its length. */
typedef struct {
  al_slice_t repairs;
  uint32_t count;
} al_event_repaired_t;

/* turn_completed. */
typedef struct {
  al_slice_t stop_reason;
  uint32_t tool_calls;
} al_event_turn_completed_t;

/* max_turns_reached. */
typedef struct {
  uint32_t max_turns;
} al_event_max_turns_t;

/* interrupted. */
typedef struct {
  al_slice_t reason;
} al_event_interrupted_t;

/* error: code is an AL_E* value. */
typedef struct {
  int code;
  al_slice_t message;
} al_event_error_t;

/* final: the run's answer. */
typedef struct {
  al_slice_t text;
} al_event_final_t;

/* provider_notice: something the runtime decided about a provider's reply
 * on its behalf. kind: "stop_inferred" (no finish_reason, a clean end),
 * "pause_turn" (the turn is continued). */
typedef struct {
  al_slice_t kind;
  al_slice_t message;
} al_event_notice_t;

/* citation: a source for the text of block `index`, the same shape from
 * every provider (docs/events.md): JSON text of {"type","url","title",
 * "cited_text",...}. */
typedef struct {
  int index;
  al_slice_t citation;
} al_event_citation_t;
/* mcp_server_state: server went to state (starting, ready, failed,
 * restarting, closed) with `tools` tools, ms from spawn to ready/failure,
 * error (failed/restarting: exit status and stderr tail).
 * mcp_tools_changed: a new list of server's tools took effect at a turn
 * boundary (added/removed counts; definition_tokens: what all the
 * server's tool definitions cost in a request, estimated at 4 bytes of
 * their JSON per token), or the tool budget changed which of them are
 * sent: `deferred` of them (deferred_tokens of the cost) are left out of
 * the request, behind mcp_tool_search.
 * mcp_warning: error is the message (a tool-name collision, a dropped
 * tool). */
typedef struct {
  al_slice_t server;
  al_slice_t state;
  al_slice_t error;
  uint32_t tools;
  uint32_t added;
  uint32_t removed;
  uint64_t definition_tokens;
  uint64_t ms;
  uint32_t deferred;
  uint64_t deferred_tokens;
} al_event_mcp_t;

/* hook_executed: one hook ran for `event` (pre_tool_use, ...) and decided
 * `decision` (allow, deny, ask, rewrite, context, continue, none) in ms;
 * outcome: ok, exit (non-zero exit), timeout, crash, bad_output; reason is
 * the hook's text. call_id/name for tool events. */
typedef struct {
  al_slice_t hook;
  al_slice_t event;
  al_slice_t decision;
  al_slice_t outcome;
  al_slice_t reason;
  al_slice_t call_id;
  al_slice_t name;
  int exit_status;
  uint64_t ms;
} al_event_hook_t;

/* user_message: the user's side of the conversation, posted when it enters
 * the history: the prompt a run starts with (text), and the tool results
 * the next turn sends back (tool_results: a JSON array of {tool_use_id,
 * is_error, chars}, "[]" when none; text is then empty). */
typedef struct {
  al_slice_t text;
  al_slice_t tool_results;
} al_event_user_message_t;

/* mcp_tool_call_begin: the tools/call request of call_id went to server
 * (tool: the server's own name for it; name: ours, mcp__server__tool).
 * mcp_tool_call_end: exactly once per begin, when its result is known:
 * is_error, duration_ms since the request, and end when the server did
 * not answer it: "cancelled", "timeout", "server_failed",
 * "server_closed" (absent for an answer). */
typedef struct {
  al_slice_t server;
  al_slice_t tool;
  al_slice_t name;
  al_slice_t call_id;
  al_slice_t end;
  bool is_error;
  uint64_t duration_ms;
} al_event_mcp_call_t;

/* mcp_startup_complete: the start-up wait of the session's first run
 * ended (every server ready or failed, or the wait was given up).
 * ready: JSON text [{"server","tools","ms"}]; failed: [{"server","error"}];
 * pending: ["server", ...] still starting (their tools join at a later
 * turn boundary); waited_ms: how long the run waited for them. */
typedef struct {
  al_slice_t ready;
  al_slice_t failed;
  al_slice_t pending;
  uint64_t waited_ms;
} al_event_mcp_startup_t;

/* subagent_started / subagent_completed (docs/subagents.md): a `task`
 * call started child task_id (ids "t1", "t2", ... per agent) for the
 * parent's call_id; child_session is the child's session id, depth its
 * depth (1: a child of the top agent). completed only: outcome
 * (completed, failed, cancelled, max_turns, budget), the child's usage
 * (its own children's included) and cost in USD (-1: unknown), and result,
 * the text handed back (bounded). */
typedef struct {
  al_slice_t task_id;
  al_slice_t call_id;
  al_slice_t child_session;
  al_slice_t agent;
  al_slice_t description;
  al_slice_t outcome;
  al_slice_t result;
  bool background;
  uint32_t depth;
  uint64_t input_tokens;
  uint64_t output_tokens;
  double cost_usd;
} al_event_subagent_t;

typedef struct al_event_s {
  al_event_type_t type;
  uint32_t turn;
  uint64_t run;
  uint64_t seq;   /* monotonic per session, from 1 */
  uint64_t ts_ns; /* CLOCK_MONOTONIC ns, the uv_hrtime clock */
  const char *session;
  /* An event of a child agent re-posted to its parent's subscribers: the
   * chain of task ids from this agent down ("t1", "t1/t3"); session,
   * run, turn and seq are then the child's. NULL: the agent's own. */
  const char *path;
  union {
    al_event_run_started_t run_started;
    al_event_stream_request_t stream_request;
    al_event_delta_t delta;
    al_event_block_t block;
    al_event_tool_t tool;
    al_event_approval_t approval;
    al_event_usage_t usage;
    al_event_retry_t retry;
    al_event_api_error_t api_error;
    al_event_stall_t stall;
    al_event_fallback_t fallback;
    al_event_tombstone_t tombstone;
    al_event_compaction_t compaction;
    al_event_repaired_t repaired;
    al_event_turn_completed_t turn_completed;
    al_event_max_turns_t max_turns;
    al_event_interrupted_t interrupted;
    al_event_error_t error;
    al_event_final_t final;
    al_event_notice_t notice;
    al_event_citation_t citation;
    al_event_mcp_t mcp;
    al_event_hook_t hook;
    al_event_user_message_t user_message;
    al_event_mcp_call_t mcp_call;
    al_event_mcp_startup_t mcp_startup;
    al_event_subagent_t subagent;
  } u;
} al_event_t;

/* An in-process subscriber. Called synchronously on the loop thread; it
 * must return quickly (SPEC §10). It may unsubscribe itself or others,
 * publish (delivered after the current event), or close the publisher. */
typedef void (*al_event_cb)(const al_event_t *ev, void *data);

/* "text_delta" for AL_EVENT_TEXT_DELTA; NULL when out of range. */
const char *al_event_type_name(al_event_type_t type);
/* Name (len bytes, need not be NUL-terminated) -> type. 0, or AL_EINVAL
 * for an unknown name. */
int al_event_type_from_name(const char *name, size_t len,
                            al_event_type_t *out);

#ifdef __cplusplus
}
#endif
#endif
