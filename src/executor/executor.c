/* Streaming tool executor: queue, concurrency gate, abort reasons.
 *
 * Everything the owner hears comes from pump(), which runs from the `kick`
 * zero timer: API functions only change state, set `dirty` and arm the
 * timer, so no callback ever runs inside them (STYLE §3.3.4). pump() makes
 * passes until one ends clean; each pass reports new calls, pending aborts,
 * delivers completions in completion order, starts what the gate allows
 * and finally reports idle. After every dispatch it checks `closing`, and
 * it never keeps a call pointer across a dispatch that could free it: calls
 * are only freed by reset (refused while any call is unyielded) and by the
 * close callback.
 *
 * A call's memory has two holders: the executor (until reset or close) and
 * the tool (from start() returning 0 until al__executor_call_complete()).
 * The last one to let go frees it, so a cancelled tool may report late. */
#include "executor/executor.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

static const char unknown_fallback[] = "Error: Unknown tool";
static const char nomem_text[] = "Error: out of memory storing the result";

const char *al__executor_abort_text(al_executor_abort_t reason) {
  switch (reason) {
    case AL_EXECUTOR_ABORT_STREAMING_FALLBACK:
      return "Tool execution was aborted: model switched to non-streaming "
             "fallback";
    case AL_EXECUTOR_ABORT_SIBLING_ERROR:
      return "Tool execution was aborted: a sibling tool call failed";
    case AL_EXECUTOR_ABORT_USER_INTERRUPTED:
      return "operation cancelled by user";
    case AL_EXECUTOR_ABORT_NONE:
      break;
  }
  return "";
}

const char *al__executor_abort_name(al_executor_abort_t reason) {
  switch (reason) {
    case AL_EXECUTOR_ABORT_STREAMING_FALLBACK:
      return "streaming_fallback";
    case AL_EXECUTOR_ABORT_SIBLING_ERROR:
      return "sibling_error";
    case AL_EXECUTOR_ABORT_USER_INTERRUPTED:
      return "user_interrupted";
    case AL_EXECUTOR_ABORT_NONE:
      break;
  }
  return "none";
}

int al__executor_parse_concurrency(const char *s) {
  int v = 0;
  size_t i;

  if (s == NULL || s[0] == '\0') {
    return AL_EXECUTOR_DEFAULT_CONCURRENCY;
  }
  for (i = 0; s[i] != '\0'; i++) {
    if (s[i] < '0' || s[i] > '9') {
      return AL_EXECUTOR_DEFAULT_CONCURRENCY;
    }
    v = v * 10 + (s[i] - '0');
    /* Stop before int overflow; anything this large is out of range. */
    if (v > AL_EXECUTOR_MAX_CONCURRENCY) {
      return AL_EXECUTOR_DEFAULT_CONCURRENCY;
    }
  }
  if (v < 1) {
    return AL_EXECUTOR_DEFAULT_CONCURRENCY;
  }
  return v;
}

int al__executor_concurrency_from_env(void) {
  return al__executor_parse_concurrency(
      getenv("AGENTLOOP_MAX_TOOL_CONCURRENCY"));
}

void al__executor_options_init(al_executor_options_t *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->max_concurrency = AL_EXECUTOR_DEFAULT_CONCURRENCY;
}

static uint64_t now_ns(al_executor_t *ex) {
  if (ex->opts.clock != NULL) {
    return ex->opts.clock(ex);
  }
  return al_now_ns();
}

static void on_kick(uv_timer_t *t);

/* Marks work for the pump. Inside the pump the current run picks it up;
 * otherwise the zero timer runs it on a later loop iteration. */
static void kick(al_executor_t *ex) {
  ex->dirty = true;
  if (!ex->in_pump && !ex->closing) {
    uv_timer_start(&ex->kick, on_kick, 0, 0);
  }
}

int al__executor_init(uv_loop_t *loop, al_executor_t *ex,
                      const al_executor_options_t *opts) {
  int rc;

  memset(ex, 0, sizeof(*ex));
  if (opts == NULL || opts->lookup == NULL || opts->max_concurrency < 0 ||
      opts->max_concurrency > AL_EXECUTOR_MAX_CONCURRENCY) {
    return AL_EINVAL;
  }
  ex->opts = *opts;
  if (ex->opts.max_concurrency == 0) {
    ex->opts.max_concurrency = AL_EXECUTOR_DEFAULT_CONCURRENCY;
  }
  ex->data = opts->data;
  ex->loop = loop;
  al_list_init(&ex->calls);
  al_list_init(&ex->done);
  rc = uv_timer_init(loop, &ex->kick);
  if (rc != 0) {
    return rc;
  }
  return 0;
}

/* The single state transition point: keeps the gate counters in step. */
static void set_state(al_tool_call_t *call, al_tool_call_state_t st) {
  al_executor_t *ex = call->executor;

  if (call->state == AL_TOOL_CALL_EXECUTING) {
    ex->n_executing--;
    if (!call->concurrency_safe) {
      ex->n_unsafe_executing--;
    }
  }
  if (st == AL_TOOL_CALL_EXECUTING) {
    ex->n_executing++;
    if (!call->concurrency_safe) {
      ex->n_unsafe_executing++;
    }
  }
  call->state = st;
}

/* Records a result and queues its on_completed. `content` is copied unless
 * `is_static` (the synthetic texts). */
static void finish(al_tool_call_t *call, bool is_error, const char *content,
                   size_t len, bool is_static) {
  al_executor_t *ex = call->executor;
  char *copy;

  call->is_error = is_error;
  if (is_static) {
    call->content = content;
    call->content_len = len;
  } else {
    copy = al_malloc(len + 1);
    if (copy == NULL) {
      /* The history still needs a result for this id. */
      call->is_error = true;
      call->content = nomem_text;
      call->content_len = sizeof(nomem_text) - 1;
    } else {
      if (len > 0) {
        memcpy(copy, content, len);
      }
      copy[len] = '\0';
      call->content = copy;
      call->content_len = len;
      call->content_owned = true;
    }
  }
  call->completed_ns = now_ns(ex);
  set_state(call, AL_TOOL_CALL_COMPLETED);
  al_list_insert_tail(&ex->done, &call->done_node);
  kick(ex);
}

/* Stops a running call through its tool's hook. The flag is set before the
 * hook: a tool that completes from inside cancel() must find its result
 * ignored. */
static void cancel_running(al_tool_call_t *call) {
  call->cancelled = true;
  if (call->impl->cancel != NULL) {
    call->impl->cancel(call);
  }
}

static void finish_aborted(al_tool_call_t *call, al_executor_abort_t why) {
  const char *text = al__executor_abort_text(why);

  call->abort_reason = why;
  finish(call, true, text, strlen(text), true);
}

static void finish_unknown(al_tool_call_t *call) {
  al_buf_t b;

  al_buf_init(&b, SIZE_MAX);
  if (al_buf_printf(&b, "Error: Unknown tool '%s'", call->name) != 0) {
    al_buf_free(&b);
    finish(call, true, unknown_fallback, sizeof(unknown_fallback) - 1, true);
    return;
  }
  finish(call, true, b.data, b.len, false);
  al_buf_free(&b);
}

static void push_abort_event(al_executor_t *ex, al_executor_abort_t why) {
  size_t i;

  for (i = 0; i < ex->n_abort_pending; i++) {
    if (ex->abort_pending[i] == why) {
      return;
    }
  }
  /* Three distinct reasons exist, so the array cannot overflow. */
  assert(ex->n_abort_pending < AL_ARRAY_SIZE(ex->abort_pending));
  ex->abort_pending[ex->n_abort_pending++] = why;
}

/* Every unfinished call completes with the synthetic result; running ones
 * are cancelled first so that their tool knows to drop its work. */
static void abort_calls(al_executor_t *ex, al_executor_abort_t why) {
  al_list_t *pos;
  al_tool_call_t *call;

  ex->aborted = why;
  push_abort_event(ex, why);
  al_list_foreach(pos, &ex->calls) {
    call = AL_CONTAINER_OF(pos, al_tool_call_t, node);
    if (call->state == AL_TOOL_CALL_EXECUTING) {
      cancel_running(call);
      finish_aborted(call, why);
    } else if (call->state == AL_TOOL_CALL_QUEUED) {
      finish_aborted(call, why);
    }
  }
  kick(ex);
}

int al__executor_abort_all(al_executor_t *ex, al_executor_abort_t reason) {
  if (reason == AL_EXECUTOR_ABORT_NONE) {
    return AL_EINVAL;
  }
  if (ex->closing) {
    return AL_ECLOSING;
  }
  abort_calls(ex, reason);
  return 0;
}

static void call_free(al_tool_call_t *call) {
  json_decref(call->blocks);
  if (call->content_owned) {
    al_free((char *)call->content);
  }
  json_decref(call->input);
  al_free(call->id);
  al_free(call->name);
  al_free(call);
}

int al__executor_add(al_executor_t *ex, const char *id, const char *name,
                     json_t *input) {
  al_tool_call_t *call;
  al_list_t *pos;

  if (id == NULL || name == NULL) {
    return AL_EINVAL;
  }
  if (ex->closing) {
    return AL_ECLOSING;
  }
  al_list_foreach(pos, &ex->calls) {
    if (strcmp(AL_CONTAINER_OF(pos, al_tool_call_t, node)->id, id) == 0) {
      return AL_EEXIST;
    }
  }
  call = al_calloc(1, sizeof(*call));
  if (call == NULL) {
    return AL_ENOMEM;
  }
  call->id = al_strdup(id);
  call->name = al_strdup(name);
  call->input = input != NULL ? json_incref(input) : json_object();
  if (call->id == NULL || call->name == NULL || call->input == NULL) {
    call_free(call);
    return AL_ENOMEM;
  }
  call->executor = ex;
  call->state = AL_TOOL_CALL_QUEUED;
  al_list_init(&call->done_node);
  call->impl = ex->opts.lookup(ex, name);
  if (call->impl != NULL && call->impl->is_concurrency_safe != NULL) {
    call->concurrency_safe =
        call->impl->is_concurrency_safe(call->impl, call->input);
  } else {
    /* Unknown tools never run, so they must not hold up the gate. */
    call->concurrency_safe = call->impl == NULL;
  }
  call->queued_ns = now_ns(ex);
  al_list_insert_tail(&ex->calls, &call->node);
  ex->n_calls++;
  ex->idle_reported = false;
  if (ex->aborted != AL_EXECUTOR_ABORT_NONE) {
    finish_aborted(call, ex->aborted);
  }
  kick(ex);
  return 0;
}

bool al__executor_has_pending(const al_executor_t *ex) {
  al_list_t *pos;

  al_list_foreach(pos, &ex->calls) {
    if (AL_CONTAINER_OF(pos, al_tool_call_t, node)->state !=
        AL_TOOL_CALL_YIELDED) {
      return true;
    }
  }
  return false;
}

al_tool_call_t *al__executor_results(const al_executor_t *ex,
                                     const al_tool_call_t *prev) {
  const al_list_t *next = prev == NULL ? ex->calls.next : prev->node.next;

  if (next == &ex->calls) {
    return NULL;
  }
  return AL_CONTAINER_OF(next, al_tool_call_t, node);
}

/* The executor lets go of every call; ones a tool still holds survive,
 * detached, until the tool's complete. */
static void release_calls(al_executor_t *ex) {
  al_tool_call_t *call;

  while (!al_list_empty(&ex->calls)) {
    call = AL_CONTAINER_OF(ex->calls.next, al_tool_call_t, node);
    al_list_remove(&call->node);
    al_list_remove(&call->done_node);
    call->executor = NULL;
    if (!call->tool_holds) {
      call_free(call);
    }
  }
  ex->n_calls = 0;
}

int al__executor_reset(al_executor_t *ex) {
  if (ex->closing) {
    return AL_ECLOSING;
  }
  if (al__executor_has_pending(ex)) {
    return AL_EBUSY;
  }
  release_calls(ex);
  ex->aborted = AL_EXECUTOR_ABORT_NONE;
  ex->n_abort_pending = 0;
  ex->idle_reported = false;
  return 0;
}

void al__executor_call_complete(al_tool_call_t *call, bool is_error,
                                const char *content, size_t len) {
  al__executor_call_complete_blocks(call, is_error, content, len, NULL);
}

void al__executor_call_complete_blocks(al_tool_call_t *call, bool is_error,
                                       const char *content, size_t len,
                                       const json_t *blocks) {
  al_executor_t *ex = call->executor;

  assert(call->tool_holds);
  call->tool_holds = false;
  if (call->on_release != NULL) {
    call->on_release(call, call->release_data);
  }
  if (ex == NULL) {
    /* Reset or closed while the cancelled tool tore down. */
    call_free(call);
    return;
  }
  if (call->cancelled || ex->closing) {
    return;
  }
  assert(call->state == AL_TOOL_CALL_EXECUTING);
  if (json_is_array(blocks) && json_array_size(blocks) > 0) {
    call->blocks = json_incref((json_t *)blocks);
  }
  finish(call, is_error, content, len, false);
  /* An unsafe call runs alone, so only queued calls (and later adds) are
   * its siblings here; they must not run after a failed mutation. */
  if (is_error && !call->concurrency_safe) {
    abort_calls(ex, AL_EXECUTOR_ABORT_SIBLING_ERROR);
  }
}

static void executor_on_close(uv_handle_t *h) {
  al_executor_t *ex = AL_CONTAINER_OF(h, al_executor_t, kick);

  release_calls(ex);
  if (ex->close_cb != NULL) {
    ex->close_cb(ex);
  }
}

void al__executor_close(al_executor_t *ex, al_executor_close_cb cb) {
  al_list_t *pos;
  al_tool_call_t *call;

  assert(!ex->closing);
  ex->closing = true;
  ex->close_cb = cb;
  al_list_foreach(pos, &ex->calls) {
    call = AL_CONTAINER_OF(pos, al_tool_call_t, node);
    if (call->state == AL_TOOL_CALL_EXECUTING) {
      cancel_running(call);
    }
  }
  uv_close((uv_handle_t *)&ex->kick, executor_on_close);
}

static bool can_start(const al_executor_t *ex, bool safe) {
  if (ex->n_executing >= (size_t)ex->opts.max_concurrency) {
    return false;
  }
  if (ex->n_unsafe_executing > 0) {
    return false;
  }
  return safe || ex->n_executing == 0;
}

/* Starts one call. Returns true if on_started must be dispatched. */
static bool start_call(al_executor_t *ex, al_tool_call_t *call) {
  char text[160];
  int rc;
  int n;

  call->started_ns = now_ns(ex);
  set_state(call, AL_TOOL_CALL_EXECUTING);
  call->tool_holds = true;
  rc = call->impl->start(call);
  if (rc == 0) {
    return true;
  }
  /* Refused: the tool keeps no hold, and the call fails like any tool. */
  call->tool_holds = false;
  if (call->state != AL_TOOL_CALL_EXECUTING) {
    return false; /* a misbehaving tool completed and then refused */
  }
  n = snprintf(text, sizeof(text), "Error: tool '%s' failed to start: %s",
               call->name, al_strerror(rc));
  if (n < 0 || (size_t)n >= sizeof(text)) {
    n = (int)strlen(text);
  }
  finish(call, true, text, (size_t)n, false);
  if (!call->concurrency_safe) {
    abort_calls(ex, AL_EXECUTOR_ABORT_SIBLING_ERROR);
  }
  return false;
}

/* Removes `why` from the pending abort notices; false if it was not
 * pending (already delivered). */
static bool take_abort(al_executor_t *ex, al_executor_abort_t why) {
  size_t i, j;

  for (i = 0; i < ex->n_abort_pending; i++) {
    if (ex->abort_pending[i] == why) {
      for (j = i + 1; j < ex->n_abort_pending; j++) {
        ex->abort_pending[j - 1] = ex->abort_pending[j];
      }
      ex->n_abort_pending--;
      return true;
    }
  }
  return false;
}

/* One pass; returns false if the executor closed during a dispatch. */
static bool pump_pass(al_executor_t *ex) {
  al_list_t *pos;
  al_tool_call_t *call;
  al_executor_abort_t why;

  /* 1. on_queued, arrival order. pos cannot be freed by the callback: an
   * unyielded call makes reset refuse. */
  al_list_foreach(pos, &ex->calls) {
    call = AL_CONTAINER_OF(pos, al_tool_call_t, node);
    if (call->queued_reported) {
      continue;
    }
    call->queued_reported = true;
    if (ex->opts.on_queued != NULL) {
      ex->opts.on_queued(ex, call);
      if (ex->closing) {
        return false;
      }
    }
  }

  /* 2. Completions, in the order the results arrived; before the gate, so
   * that a call's on_completed precedes the on_started it makes room for.
   * An abort's on_aborted comes right before the first synthetic result it
   * explains, so a failing unsafe call's own result precedes the
   * sibling_error notice it caused. */
  while (!al_list_empty(&ex->done)) {
    call = AL_CONTAINER_OF(ex->done.next, al_tool_call_t, done_node);
    if (call->abort_reason != AL_EXECUTOR_ABORT_NONE &&
        take_abort(ex, call->abort_reason) && ex->opts.on_aborted != NULL) {
      ex->opts.on_aborted(ex, call->abort_reason);
      if (ex->closing) {
        return false;
      }
      continue; /* the list may have changed */
    }
    al_list_remove(&call->done_node);
    set_state(call, AL_TOOL_CALL_YIELDED);
    if (ex->opts.on_completed != NULL) {
      ex->opts.on_completed(ex, call);
      if (ex->closing) {
        return false;
      }
    }
  }

  /* 3. Aborts that explain no result (nothing was unfinished). */
  while (ex->n_abort_pending > 0) {
    why = ex->abort_pending[0];
    take_abort(ex, why);
    if (ex->opts.on_aborted != NULL) {
      ex->opts.on_aborted(ex, why);
      if (ex->closing) {
        return false;
      }
    }
  }

  /* 4. The gate, in arrival order: the first call that cannot start blocks
   * the rest. Unknown tools never run, so they complete here without
   * waiting for the gate and without blocking it. */
  al_list_foreach(pos, &ex->calls) {
    call = AL_CONTAINER_OF(pos, al_tool_call_t, node);
    if (!call->queued_reported) {
      break; /* added by a callback of this walk: next pass */
    }
    if (call->state != AL_TOOL_CALL_QUEUED) {
      continue;
    }
    if (call->impl == NULL) {
      finish_unknown(call);
      continue;
    }
    if (!can_start(ex, call->concurrency_safe)) {
      break;
    }
    if (start_call(ex, call) && ex->opts.on_started != NULL) {
      ex->opts.on_started(ex, call);
      if (ex->closing) {
        return false;
      }
    }
  }

  /* 5. Idle, once per batch of adds, only when nothing else is owed. */
  if (!ex->dirty && !ex->idle_reported && ex->n_calls > 0 &&
      !al__executor_has_pending(ex)) {
    ex->idle_reported = true;
    if (ex->opts.on_idle != NULL) {
      ex->opts.on_idle(ex);
      if (ex->closing) {
        return false;
      }
    }
  }
  return true;
}

static void pump(al_executor_t *ex) {
  ex->in_pump = true;
  while (ex->dirty && !ex->closing) {
    ex->dirty = false;
    if (!pump_pass(ex)) {
      break;
    }
  }
  ex->in_pump = false;
}

void al__executor_flush(al_executor_t *ex) {
  if (ex->in_pump || ex->closing || !ex->dirty) {
    return;
  }
  pump(ex);
}

static void on_kick(uv_timer_t *t) {
  pump(AL_CONTAINER_OF(t, al_executor_t, kick));
}
