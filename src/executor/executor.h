/* Streaming tool executor (SPEC §7, seed 002 §StreamingToolExecutor).
 *
 * The executor owns the tool calls of one assistant message. The loop adds
 * each complete tool_use block while the reply is still streaming; the
 * executor decides when each call may start, drives the tool through the
 * al_tool_impl_t vtable and reports back through the on_* callbacks.
 *
 * Invariants:
 *  - A call moves queued -> executing -> completed -> yielded; "yielded"
 *    means its on_completed has been delivered. Aborted and unknown calls
 *    skip "executing".
 *  - The gate: concurrency-safe calls run together up to max_concurrency;
 *    an unsafe call starts only when nothing executes, and nothing starts
 *    while it runs. The queue is served in arrival order: the first queued
 *    call that cannot start blocks every call behind it.
 *  - Every accepted call gets exactly one on_completed (real or synthetic
 *    result), in completion order; al__executor_results() walks the calls
 *    in arrival order for the history.
 *  - No callback ever runs inside an executor function: all of them are
 *    delivered from one deferred pump (a zero timer). Any callback may call
 *    add, abort_all, reset or close; the pump checks its state after every
 *    dispatch. Nothing fires once close has been called.
 *  - A cancelled tool keeps its call alive until it calls
 *    al__executor_call_complete(); that late result is dropped. */
#ifndef AL_EXECUTOR_H
#define AL_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "common/common.h"

#define AL_EXECUTOR_DEFAULT_CONCURRENCY 10
#define AL_EXECUTOR_MAX_CONCURRENCY 1000

typedef struct al_executor_s al_executor_t;
typedef struct al_tool_call_s al_tool_call_t;
typedef struct al_tool_impl_s al_tool_impl_t;

typedef enum {
  AL_TOOL_CALL_QUEUED = 0,
  AL_TOOL_CALL_EXECUTING,
  AL_TOOL_CALL_COMPLETED,
  AL_TOOL_CALL_YIELDED
} al_tool_call_state_t;

/* Why calls were aborted. Each reason has a fixed synthetic result text
 * (al__executor_abort_text). */
typedef enum {
  AL_EXECUTOR_ABORT_NONE = 0,
  /* The reply is being retried without streaming; its tool_use blocks are
   * void. */
  AL_EXECUTOR_ABORT_STREAMING_FALLBACK,
  /* An unsafe call failed (error result or refused start): calls queued
   * behind it, and calls added later in the same message, do not run.
   * There are never running siblings to cancel, since an unsafe call runs
   * alone. A failing safe call aborts nothing: safe calls are independent
   * reads, and their siblings' results stay useful to the model. */
  AL_EXECUTOR_ABORT_SIBLING_ERROR,
  /* agent_cancel. */
  AL_EXECUTOR_ABORT_USER_INTERRUPTED
} al_executor_abort_t;

/* The interface the tools layer implements (bash, read_file, CLI tools,
 * in-process tools). The executor never copies it; it must outlive every
 * call that uses it. */
struct al_tool_impl_s {
  const char *name;
  /* Per call: may decide from the input (borrowed). NULL means unsafe.
   * Called once, inside al__executor_add(); must not re-enter. */
  bool (*is_concurrency_safe)(const al_tool_impl_t *impl,
                              const json_t *input);
  /* Begins the work asynchronously. 0: accepted; the tool must then call
   * al__executor_call_complete() exactly once, even after cancel (that
   * releases its hold on `call`). Negative AL_E*: refused; the tool must not
   * touch `call` again and the call completes with an error result. */
  int (*start)(al_tool_call_t *call);
  /* Stop the work (kill a child, close a request). The real result will be
   * ignored; the tool still calls al__executor_call_complete() when its own
   * teardown has ended (it may do so from inside cancel). May be NULL. */
  void (*cancel)(al_tool_call_t *call);
  /* Owned by the tool implementation. */
  void *data;
};

/* One tool_use block. Fields are read-only for everyone but the executor,
 * except tool_data, which belongs to the tool implementation. */
struct al_tool_call_s {
  al_executor_t *executor; /* NULL once the executor let go of the call */
  char *id;
  char *name;
  json_t *input; /* a reference held by the call (never NULL) */
  const al_tool_impl_t *impl; /* NULL: unknown tool */
  bool concurrency_safe;
  al_tool_call_state_t state;
  /* Result, valid from COMPLETED on: NUL-terminated content. */
  bool is_error;
  const char *content;
  size_t content_len;
  /* Or NULL: the result as content blocks (text, image, document) for the
   * history, from al__executor_call_complete_blocks; `content` is then
   * its text view (events, hooks). A reference held by the call. */
  json_t *blocks;
  /* Set when the result is a synthetic abort result. */
  al_executor_abort_t abort_reason;
  /* From the executor's clock; 0 when the call never got there. */
  uint64_t queued_ns;
  uint64_t started_ns;
  uint64_t completed_ns;
  void *tool_data;
  /* Called whenever a tool's hold on the call ends (its single
   * al__executor_call_complete), even after reset or close; the owner uses
   * it to know when no tool work is left before freeing the tools. Set by
   * the owner (usually from inside impl->start); may stay NULL. */
  void (*on_release)(al_tool_call_t *call, void *data);
  void *release_data;

  /* private */
  al_list_t node;      /* ex->calls, arrival order */
  al_list_t done_node; /* ex->done, completion order, until yielded */
  bool queued_reported;
  bool tool_holds; /* start() returned 0 and complete has not come yet */
  bool cancelled;
  bool content_owned;
};

typedef void (*al_executor_call_cb)(al_executor_t *ex, al_tool_call_t *call);
typedef void (*al_executor_abort_cb)(al_executor_t *ex,
                                     al_executor_abort_t reason);
typedef void (*al_executor_idle_cb)(al_executor_t *ex);
typedef void (*al_executor_close_cb)(al_executor_t *ex);
/* name -> implementation, or NULL for an unknown tool. Called inside
 * al__executor_add(); must not re-enter the executor. */
typedef const al_tool_impl_t *(*al_executor_lookup_cb)(al_executor_t *ex,
                                                      const char *name);
/* Monotonic nanoseconds; tests inject a fake one. */
typedef uint64_t (*al_executor_clock_cb)(al_executor_t *ex);

typedef struct al_executor_options_s {
  /* 1..AL_EXECUTOR_MAX_CONCURRENCY; 0 means the default (10). */
  int max_concurrency;
  al_executor_lookup_cb lookup; /* required */
  al_executor_clock_cb clock;   /* NULL: al_now_ns() */
  /* Callbacks, all optional, all from the loop, never inside a call into
   * the executor. `call` stays valid until reset or close. */
  al_executor_call_cb on_queued;    /* arrival order, before on_started */
  al_executor_call_cb on_started;   /* right after impl->start returned 0 */
  al_executor_call_cb on_completed; /* completion order, exactly once */
  /* Once per abort_all() (or sibling failure), right before the first
   * synthetic on_completed it causes (after results that came before it,
   * such as the failing call's own); a reason already pending is
   * coalesced. */
  al_executor_abort_cb on_aborted;
  /* Every call added so far has had its on_completed; fires again after
   * further adds complete. */
  al_executor_idle_cb on_idle;
  void *data; /* copied to ex->data */
} al_executor_options_t;

struct al_executor_s {
  void *data; /* the owner's */

  /* private */
  uv_loop_t *loop;
  uv_timer_t kick; /* zero timer: runs the pump on a later iteration */
  al_executor_options_t opts;
  al_list_t calls;
  al_list_t done;
  size_t n_calls;
  size_t n_executing;
  size_t n_unsafe_executing;
  al_executor_abort_t aborted; /* sticky: later adds complete at once */
  al_executor_abort_t abort_pending[3];
  size_t n_abort_pending;
  bool dirty;
  bool in_pump;
  bool idle_reported;
  bool closing;
  al_executor_close_cb close_cb;
};

/* Defaults: max_concurrency 10, everything else NULL. */
void al__executor_options_init(al_executor_options_t *opts);

/* Initializes `ex` in place (the caller owns its memory) on `loop`.
 * opts is copied. AL_EINVAL: no lookup, or max_concurrency out of range.
 * On success the executor must be closed with al__executor_close(). */
int al__executor_init(uv_loop_t *loop, al_executor_t *ex,
                      const al_executor_options_t *opts);

/* Queues one tool_use block. id and name are copied; input (NULL: an empty
 * object) gets a new reference. Never calls back: on_queued and the rest
 * come later. If the executor was aborted, the call completes with that
 * abort's synthetic result without running.
 * Errors: AL_EINVAL (NULL id/name), AL_EEXIST (id already added),
 * AL_ECLOSING, AL_ENOMEM. */
int al__executor_add(al_executor_t *ex, const char *id, const char *name,
                     json_t *input);

/* Aborts the message: queued calls never run, executing calls get their
 * tool's cancel hook; all of them complete with the reason's synthetic
 * result (is_error). The reason is sticky for calls added later, until
 * al__executor_reset(). Callbacks come later (on_aborted before the
 * synthetic results).
 * Errors: AL_EINVAL (reason NONE), AL_ECLOSING. */
int al__executor_abort_all(al_executor_t *ex, al_executor_abort_t reason);

/* True while some call has not had its on_completed yet. */
bool al__executor_has_pending(const al_executor_t *ex);

/* Arrival-order walk: the call after `prev` (NULL: the first), or NULL. */
al_tool_call_t *al__executor_results(const al_executor_t *ex,
                                     const al_tool_call_t *prev);

/* Forgets every call and the sticky abort, for the next message.
 * AL_EBUSY while has_pending; AL_ECLOSING once closed. */
int al__executor_reset(al_executor_t *ex);

/* Runs the pending callbacks (and starts what the gate allows) now instead
 * of on the next loop iteration. For the owner, right after an add, so a
 * tool starts within the read that completed its block. A no-op from
 * inside an executor callback or once closing. */
void al__executor_flush(al_executor_t *ex);

/* Closes once (asserts otherwise): executing tools get their cancel hook,
 * no further callback fires, and cb (may be NULL) runs on a later loop
 * iteration; the memory of `ex` may be freed from then on. */
void al__executor_close(al_executor_t *ex, al_executor_close_cb cb);

/* Called by a tool exactly once per accepted start(). content (len bytes,
 * borrowed) is copied. Ignored, apart from releasing the call, when the call
 * was cancelled or the executor let go of it. May be called from any
 * context, even inside start() or cancel(). When an unsafe call fails, the
 * executor aborts its message with AL_EXECUTOR_ABORT_SIBLING_ERROR. */
void al__executor_call_complete(al_tool_call_t *call, bool is_error,
                                const char *content, size_t len);

/* The same with the result as content blocks too (an array, borrowed: a
 * reference is taken; NULL or empty: text only). `content` is the text
 * view events and hooks show; the history gets the blocks. */
void al__executor_call_complete_blocks(al_tool_call_t *call, bool is_error,
                                       const char *content, size_t len,
                                       const json_t *blocks);

/* The synthetic result text of a reason ("" for NONE); static storage. */
const char *al__executor_abort_text(al_executor_abort_t reason);
/* "streaming_fallback", "sibling_error", "user_interrupted", "none". */
const char *al__executor_abort_name(al_executor_abort_t reason);

/* Strict parse of a concurrency setting: decimal digits only, 1..1000;
 * anything else (NULL, empty, sign, spaces, overflow) gives the default. */
int al__executor_parse_concurrency(const char *s);
/* The same on getenv("AGENTLOOP_MAX_TOOL_CONCURRENCY"). */
int al__executor_concurrency_from_env(void);

#endif
