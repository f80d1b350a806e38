/* The agent loop: the run/turn state machine (SPEC §6, seeds 000, 002, 003).
 *
 * A run is a chain of attempts. Each attempt is one HTTP request whose body
 * goes through the decoding pipeline (al_pstream_t); every pipeline event
 * becomes LoopEvents, and every completed tool_use block goes straight to
 * the reply's executor, so tools start while the reply still streams. What
 * happens at the end of an attempt is decided in a few functions, which are
 * the only writers of a->run.state (through set_state):
 *
 *   attempt_start -> (stream) -> reply_done     -> final | tools | continue
 *                              \-> attempt_failed -> backoff -> attempt_start
 *                                                 \-> error
 *   tools_done -> start_turn (-> max_turns summary) | final (done tool)
 *   al_agent_cancel, from any state -> interrupted
 *
 * States (agent_priv.h, AG_STATE_MAP), each change logged at debug level:
 *   idle -> streaming <-> backoff, streaming -> tools -> streaming,
 *   tools -> summary (max_turns) -> idle, any run state -> idle (the end),
 *   cancel: -> idle -> ending (its last events) -> idle,
 *   al_agent_close: -> closing (final; handles and tools wind down).
 *
 * Re-entrancy: subscribers run synchronously and may cancel the run or
 * close the agent from inside any event. Every post goes through
 * al__agent_post(), which says whether the caller must stop (the run's
 * generation changed, or the agent is closing); the callers return at once
 * then and touch nothing of the old run.
 *
 * Decisions recorded here:
 *  - A reply is acted on when its request completes (the end of the body),
 *    not at message_stop, so that an error after message_stop cannot be
 *    mistaken for success and the connection goes back to the pool clean.
 *    A transport error after message_stop does not void the reply.
 *  - A failed or discarded reply is never committed: its partial content
 *    lives in the pipeline only. If content reached subscribers, `tombstone`
 *    tells them to drop it; its executor is aborted (streaming_fallback) and
 *    keeps reporting until its calls have their synthetic results.
 *  - max_tokens with an unfinished tool_use: the reply is discarded like a
 *    retry and the same request is sent again with max_tokens doubled (at
 *    most 3 times), so the history never holds a half tool call.
 *  - The max_turns summary request keeps the tool definitions and sends
 *    tool_choice none: the Messages API rejects a history with tool_use
 *    blocks when no tools are defined.
 *  - Cancel is synchronous: the request is closed, executors are closed
 *    (their tools get the cancel hook), the events that report the aborted
 *    calls and `interrupted` are posted, and nothing of the run fires after
 *    it returns. Tool processes die in the background; al_agent_close waits
 *    for them before freeing the tools. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loop/agent_int.h"
#include "loop/agent_priv.h"
#include "loop/compact.h"
#include "loop/validity.h"

#define AG_MAX_TOKENS_CEILING 128000
/* How much of an interrupted reply's text is kept in history. */
#define AG_PARTIAL_MAX (1024u * 1024u)

static void keep_partial(al_agent_t *a);

const char *al__agent_state_name(ag_state_t st) {
  switch (st) {
#define AG_STATE_NAME(name, text) \
  case AG_##name:                 \
    return text;
    AG_STATE_MAP(AG_STATE_NAME)
#undef AG_STATE_NAME
  }
  return "?";
}

/* The one writer of a->run.state (curl's mstate): every change is traced. */
static void set_state(al_agent_t *a, ag_state_t st) {
  if (a->run.state != st) {
    al_log(AL_LOG_DEBUG, "agent %s: state %s -> %s", a->core.session.id,
           al__agent_state_name(a->run.state), al__agent_state_name(st));
  }
  a->run.state = st;
}

static int attempt_start(al_agent_t *a);
static void on_mcp_wait(uv_timer_t *t);
void al__agent_attempt_failed(al_agent_t *a, const al_retry_err_t *err,
                              int status, const char *message);
static void start_turn(al_agent_t *a);
static void tools_done(al_agent_t *a);
static void end_error(al_agent_t *a, int code, const char *message);
static int compact_check(al_agent_t *a, int64_t projected);
static void compact_start(al_agent_t *a, const char *trigger);
static void compact_finish(al_agent_t *a, const char *summary, size_t len);
static bool is_overflow(const char *message);
static bool trim_messages(al_agent_t *a);
static void on_backoff(uv_timer_t *t);

/* ---- small helpers ---------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s != NULL ? al_strdup(s) : NULL; }

/* a->model_info for a->model, with the window override applied. */
static void model_info_refresh(al_agent_t *a) {
  al_models_lookup(a->models, a->model, a->provider->name, &a->model_info);
  if (a->window_override > 0) {
    a->model_info.context_window = a->window_override;
  }
  a->budget.window = a->model_info.context_window;
}

static void free_list(char **l) {
  size_t i;

  for (i = 0; l != NULL && l[i] != NULL; i++) {
    al_free(l[i]);
  }
  al_free(l);
}

static int dup_list(const char *const *src, char ***out) {
  size_t n = 0;
  size_t i;
  char **l;

  *out = NULL;
  if (src == NULL) {
    return 0;
  }
  while (src[n] != NULL) {
    n++;
  }
  l = al_calloc(n + 1, sizeof(*l));
  if (l == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    l[i] = al_strdup(src[i]);
    if (l[i] == NULL) {
      free_list(l);
      return AL_ENOMEM;
    }
  }
  *out = l;
  return 0;
}

static uint64_t ms_since(uint64_t t0) {
  uint64_t now = al_now_ns();

  return now > t0 ? (now - t0) / 1000000 : 0;
}

bool al__agent_post(al_agent_t *a, al_event_t *ev) {
  uint64_t gen = a->run.gen;

  if (ag_closing(a)) {
    return true;
  }
  ev->run = a->run.run_id;
  ev->turn = a->run.turn;
  al__events_publish(a->core.bus, &a->core.session, ev);
  return a->run.gen != gen || ag_closing(a);
}

/* ---- executors ----------------------------------------------------------------- */

static void exec_on_close(al_executor_t *ex) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  al_agent_t *a = box->agent;

  al_free(box);
  a->core.pending--;
  al__agent_maybe_finish(a);
}

static void exec_close(ag_exec_t *box) {
  al_agent_t *a = box->agent;

  if (box->closing) {
    return;
  }
  box->closing = true;
  al_list_remove(&box->node);
  if (a->att.cur == box) {
    a->att.cur = NULL;
  }
  al__agent_post_hooks_drop(box);
  al__executor_close(&box->ex, exec_on_close);
}

static void exec_on_queued(al_executor_t *ex, al_tool_call_t *call) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  al_event_t ev;
  char *input = json_dumps(call->input, JSON_COMPACT | JSON_ENCODE_ANY);

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TOOL_USE_QUEUED;
  ev.u.tool.call_id = ag_slice(call->id);
  ev.u.tool.name = ag_slice(call->name);
  ev.u.tool.input = ag_slice(input);
  al__agent_post(box->agent, &ev);
  al_free(input);
}

static void exec_on_completed(al_executor_t *ex, al_tool_call_t *call) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TOOL_USE_COMPLETED;
  ev.u.tool.call_id = ag_slice(call->id);
  ev.u.tool.name = ag_slice(call->name);
  ev.u.tool.content.ptr = call->content;
  ev.u.tool.content.len = call->content_len;
  ev.u.tool.is_error = call->is_error;
  if (call->abort_reason != AL_EXECUTOR_ABORT_NONE) {
    ev.u.tool.reason = ag_slice(al__executor_abort_name(call->abort_reason));
  }
  if (call->started_ns != 0 && call->completed_ns > call->started_ns) {
    ev.u.tool.duration_ms = (call->completed_ns - call->started_ns) / 1000000;
  }
  if (al__agent_post(box->agent, &ev)) {
    return;
  }
  /* post_tool_use hooks judge this result now, not at the end of the
   * turn (agent_hooks.c). */
  al__agent_post_hook_call(box->agent, box, call);
}

static void exec_on_aborted(al_executor_t *ex, al_executor_abort_t why) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TOOL_EXECUTION_ABORTED;
  ev.u.tool.reason = ag_slice(al__executor_abort_name(why));
  al__agent_post(box->agent, &ev);
}

static void exec_on_idle(al_executor_t *ex) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  al_agent_t *a = box->agent;

  if (box->retiring) {
    exec_close(box);
  } else if (a->att.cur == box && a->run.state == AG_TOOLS) {
    tools_done(a);
  }
}

static int exec_new(al_agent_t *a) {
  al_executor_options_t eo;
  ag_exec_t *box = al_calloc(1, sizeof(*box));
  int rc;

  if (box == NULL) {
    return AL_ENOMEM;
  }
  box->agent = a;
  al_list_init(&box->posts);
  al__executor_options_init(&eo);
  eo.max_concurrency = a->concurrency;
  eo.lookup = al__agent_lookup;
  eo.on_queued = exec_on_queued;
  eo.on_completed = exec_on_completed;
  eo.on_aborted = exec_on_aborted;
  eo.on_idle = exec_on_idle;
  rc = al__executor_init(a->loop, &box->ex, &eo);
  if (rc != 0) {
    al_free(box);
    return rc;
  }
  al_list_insert_tail(&a->att.execs, &box->node);
  a->core.pending++;
  a->att.cur = box;
  return 0;
}

/* The reply's calls are void: abort them (their synthetic results are
 * still reported) and close the executor once they have been. */
static void exec_retire(al_agent_t *a, ag_exec_t *box) {
  if (box == NULL) {
    return;
  }
  if (a->att.cur == box) {
    a->att.cur = NULL;
  }
  if (box->ex.n_calls == 0 || !al__executor_has_pending(&box->ex)) {
    exec_close(box);
    return;
  }
  box->retiring = true;
  al__agent_post_hooks_drop(box); /* the results they judge are void */
  al__executor_abort_all(&box->ex, AL_EXECUTOR_ABORT_STREAMING_FALLBACK);
}

static void exec_close_all(al_agent_t *a) {
  while (!al_list_empty(&a->att.execs)) {
    exec_close(AL_CONTAINER_OF(a->att.execs.next, ag_exec_t, node));
  }
}

/* ---- the attempt ----------------------------------------------------------------- */

static void blocks_free(al_agent_t *a) {
  size_t i;

  for (i = 0; i < a->att.nblocks; i++) {
    al_free(a->att.blocks[i].call_id);
  }
  al_free(a->att.blocks);
  a->att.blocks = NULL;
  a->att.nblocks = 0;
}

static void ps_release(al_agent_t *a) {
  if (!a->att.ps_ready) {
    return;
  }
  if (a->att.in_feed) {
    a->att.ps_dead = true; /* freed when the feed returns */
    return;
  }
  al_pstream_free(&a->att.ps);
  a->att.ps_ready = false;
  a->att.ps_dead = false;
}

/* Ends the attempt's request and pipeline (not its executor). */
static void attempt_clear(al_agent_t *a) {
  if (a->att.req != NULL) {
    al_http_request_cancel(a->att.req);
    a->att.req = NULL;
    a->run.stats.duration_api_ms += ms_since(a->att.api_t0);
  }
  ps_release(a);
  blocks_free(a);
  al_free(a->att.msg_id);
  a->att.msg_id = NULL;
  a->att.delivered = false;
  a->att.stream_failed = false;
  al_buf_reset(&a->att.partial);
  a->att.partial_cut = false;
}

static ag_block_t *block_at(al_agent_t *a, int index) {
  ag_block_t *nb;
  size_t n;

  if (index < 0 || index > 100000) {
    return NULL;
  }
  if ((size_t)index >= a->att.nblocks) {
    n = (size_t)index + 1;
    nb = al_realloc(a->att.blocks, n * sizeof(*nb));
    if (nb == NULL) {
      return NULL;
    }
    memset(nb + a->att.nblocks, 0, (n - a->att.nblocks) * sizeof(*nb));
    a->att.blocks = nb;
    a->att.nblocks = n;
  }
  return &a->att.blocks[index];
}

static uint64_t sse_stamp(const al_agent_t *a) {
  const al_buf_t *id = &a->att.ps.sse.last_id;
  uint64_t v = 0;
  size_t i;

  if (id->len == 0 || id->len > 19) {
    return 0;
  }
  for (i = 0; i < id->len; i++) {
    if (id->data[i] < '0' || id->data[i] > '9') {
      return 0;
    }
    v = v * 10 + (uint64_t)(id->data[i] - '0');
  }
  return v;
}

static void stream_error(al_agent_t *a, const al_pevent_t *ev) {
  a->att.stream_failed = true;
  al__retry_classify_perr(ev->error_kind, ev->error_type, &a->att.stream_err);
  snprintf(a->att.stream_msg, sizeof(a->att.stream_msg), "%.*s",
           (int)AL_MIN(ev->len, 250), ev->text != NULL ? ev->text : "");
  snprintf(a->att.stream_type, sizeof(a->att.stream_type), "%s",
           ev->error_type != NULL ? ev->error_type
           : ev->error_kind == AL_PERR_DECODE ? "decode_error"
                                              : "api_error");
}

static int on_block_stop(al_agent_t *a, const al_pevent_t *ev) {
  ag_block_t *b = block_at(a, ev->index);
  al_event_t le;
  size_t text_len = 0;
  char *text = al__events_dump_block(ev->json, &text_len);
  const json_t *id, *name;
  bool stop;
  uint64_t stamp;

  memset(&le, 0, sizeof(le));
  le.type = AL_EVENT_CONTENT_BLOCK_COMPLETED;
  le.u.block.index = ev->index;
  le.u.block.block_type = ag_slice(ev->block_type_name);
  le.u.block.block.ptr = text;
  le.u.block.block.len = text_len;
  a->att.delivered = true;
  stop = al__agent_post(a, &le);
  al_free(text);
  if (stop) {
    return 1;
  }
  if (b != NULL) {
    b->stopped = true;
  }
  if (ev->block_type != AL_BLOCK_TOOL_USE || a->run.state == AG_SUMMARY ||
      a->run.state == AG_COMPACTING || a->att.cur == NULL) {
    return 0;
  }
  id = json_object_get(ev->json, "id");
  name = json_object_get(ev->json, "name");
  if (!json_is_string(id) || !json_is_string(name)) {
    return 0; /* the commit refuses such a block; the run ends there */
  }
  stamp = sse_stamp(a);
  if (stamp != 0) {
    json_object_set_new(a->att.stamps, json_string_value(id),
                        json_integer((json_int_t)stamp));
  }
  /* Here the tool is handed over while the reply streams on, and started
   * within this read rather than on the next loop iteration. */
  if (al__executor_add(&a->att.cur->ex, json_string_value(id),
                       json_string_value(name),
                       json_object_get(ev->json, "input")) == 0) {
    uint64_t gen = a->run.gen;

    al__executor_flush(&a->att.cur->ex);
    if (gen != a->run.gen || ag_closing(a)) {
      return 1;
    }
  }
  return 0;
}

/* A citation from any provider, as one shape (al__provider_citation). */
static int post_citation(al_agent_t *a, const al_pevent_t *ev) {
  al_event_t le = al__events_blank;
  char *text = ev->json != NULL
                   ? json_dumps(ev->json, JSON_COMPACT | JSON_ENCODE_ANY)
                   : NULL;
  bool closed;

  if (text == NULL) {
    return 0;
  }
  le.type = AL_EVENT_CITATION;
  le.u.citation.index = ev->index;
  le.u.citation.citation.ptr = text;
  le.u.citation.citation.len = strlen(text);
  closed = al__agent_post(a, &le);
  al_free(text); /* jansson allocates through al_malloc */
  return closed ? 1 : 0;
}

static int on_pevent(void *data, const al_pevent_t *ev) {
  al_agent_t *a = data;
  al_event_t le;
  ag_block_t *b;
  const json_t *id;

  if (ev->progress && a->att.req != NULL &&
      (ev->ts_ns == 0 || ev->ts_ns != a->att.progress_ts)) {
    a->att.progress_ts = ev->ts_ns;
    al_http_request_progress(a->att.req);
  }
  le = al__events_blank; /* not memset: see events.h */
  switch (ev->type) {
  case AL_PEV_MESSAGE_START:
    al_free(a->att.msg_id);
    a->att.msg_id = dup_or_null(ev->id);
    return 0;
  case AL_PEV_BLOCK_START:
    b = block_at(a, ev->index);
    if (b != NULL && ev->block_type == AL_BLOCK_TOOL_USE) {
      b->is_tool = true;
      id = json_object_get(ev->json, "id");
      al_free(b->call_id);
      b->call_id = json_is_string(id) ? al_strdup(json_string_value(id)) : NULL;
    }
    return 0;
  case AL_PEV_TEXT_DELTA:
  case AL_PEV_THINKING_DELTA:
  case AL_PEV_TOOL_INPUT_DELTA:
    le.type = ev->type == AL_PEV_TEXT_DELTA       ? AL_EVENT_TEXT_DELTA
              : ev->type == AL_PEV_THINKING_DELTA ? AL_EVENT_THINKING_DELTA
                                                  : AL_EVENT_TOOL_INPUT_DELTA;
    le.u.delta.index = ev->index;
    le.u.delta.text.ptr = ev->text != NULL ? ev->text : "";
    le.u.delta.text.len = ev->len;
    le.ts_ns = ev->ts_ns; /* its chunk's arrival: no clock read per delta */
    if (ev->type == AL_PEV_TOOL_INPUT_DELTA && ev->index >= 0 &&
        (size_t)ev->index < a->att.nblocks) {
      le.u.delta.call_id = ag_slice(a->att.blocks[ev->index].call_id);
    }
    a->att.delivered = true;
    if (ev->type == AL_PEV_TEXT_DELTA && a->run.state == AG_STREAMING &&
        ev->len > 0) {
      /* Kept up to its bound, and only as a prefix of the reply. */
      if (!a->att.partial_cut &&
          al_buf_append(&a->att.partial, ev->text, ev->len) != 0) {
        a->att.partial_cut = true;
      }
    }
    return al__agent_post(a, &le) ? 1 : 0;
  case AL_PEV_BLOCK_STOP:
    return on_block_stop(a, ev);
  case AL_PEV_ERROR:
    stream_error(a, ev);
    return 0;
  case AL_PEV_NOTICE:
    le.type = AL_EVENT_PROVIDER_NOTICE;
    le.u.notice.kind = ag_slice(ev->error_type);
    le.u.notice.message.ptr = ev->text;
    le.u.notice.message.len = ev->len;
    return al__agent_post(a, &le) ? 1 : 0;
  case AL_PEV_CITATION:
    return post_citation(a, ev);
  default:
    return 0;
  }
}

/* Records why the attempt's stream failed (the first decoder-reported
 * error is kept unless `override`). */
static void stream_fail(al_agent_t *a, bool override, al_retry_class_t cls,
                        bool retryable, const char *reason, const char *type,
                        const char *msg) {
  if (a->att.stream_failed && !override) {
    return;
  }
  a->att.stream_failed = true;
  a->att.stream_err.cls = cls;
  a->att.stream_err.retryable = retryable;
  a->att.stream_err.retry_after_ms = -1;
  a->att.stream_err.reason = reason;
  snprintf(a->att.stream_type, sizeof(a->att.stream_type), "%s", type);
  if (msg != NULL) {
    snprintf(a->att.stream_msg, sizeof(a->att.stream_msg), "%s", msg);
  }
}

/* The stream failed (error event, undecodable, ended early): report it
 * and let the retry policy decide. */
static void stream_failed(al_agent_t *a) {
  al_retry_err_t e = a->att.stream_err;
  char msg[sizeof(a->att.stream_msg)];
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_API_ERROR;
  ev.u.api_error.kind = ag_slice(a->att.stream_type);
  ev.u.api_error.message = ag_slice(a->att.stream_msg);
  if (al__agent_post(a, &ev)) {
    return;
  }
  memcpy(msg, a->att.stream_msg, sizeof(msg));
  al__agent_attempt_failed(a, &e, 0, msg);
}

static void on_data(al_http_request_t *r, const char *p, size_t n) {
  al_agent_t *a = al_http_request_get_data(r);
  uint64_t gen = a->run.gen;
  int rc;

  a->att.in_feed = true;
  rc = al_pstream_feed(&a->att.ps, p, n);
  a->att.in_feed = false;
  if (a->att.ps_dead) {
    a->att.ps_ready = true;
    ps_release(a);
    return;
  }
  if (gen != a->run.gen || ag_closing(a) || rc == 0) {
    return;
  }
  /* The stream carried an error event, or cannot be decoded: the request
   * is over; the failure is handled as for a failed request. */
  al_http_request_cancel(r);
  a->att.req = NULL;
  a->run.stats.duration_api_ms += ms_since(a->att.api_t0);
  stream_fail(a, false, AL_RETRY_CLASS_DECODE, false, "decode",
              "decode_error", al_strerror(rc));
  stream_failed(a);
}

static void reply_done(al_agent_t *a);
/* pause_turn continuations per turn. */
#define AG_MAX_PAUSES 5u

static void on_complete(al_http_request_t *r, int status,
                        const al_http_error_t *err) {
  al_agent_t *a = al_http_request_get_data(r);
  uint64_t gen = a->run.gen;
  al_retry_err_t e;
  al_event_t ev;
  char msg[512];
  int rc;

  a->att.req = NULL;
  a->run.stats.duration_api_ms += ms_since(a->att.api_t0);
  if (status == 0 || a->att.ps.message_stopped) {
    if (status == 0 && !a->att.stream_failed && !a->att.ps.message_stopped) {
      a->att.in_feed = true;
      rc = al_pstream_finish(&a->att.ps);
      a->att.in_feed = false;
      if (a->att.ps_dead) {
        ps_release(a);
        return;
      }
      if (gen != a->run.gen || ag_closing(a)) {
        return;
      }
      if (rc == AL_ETRUNCATED) {
        /* The body ended early: the connection died, not the model. */
        stream_fail(a, true, AL_RETRY_CLASS_NETWORK, true,
                    "stream ended before message_stop", "truncated",
                    al_strerror(rc));
      }
    }
    if (a->att.ps.message_stopped && !a->att.stream_failed) {
      reply_done(a);
      return;
    }
    stream_fail(a, false, AL_RETRY_CLASS_NETWORK, true, "no message_stop",
                "truncated", "the reply ended without message_stop");
    stream_failed(a);
    return;
  }

  al__retry_classify_http(err, &e);
  snprintf(msg, sizeof(msg), "%s",
           err->api_message != NULL ? err->api_message : err->message);
  if (err->kind == AL_HTTP_ERR_STALL_IDLE ||
      err->kind == AL_HTTP_ERR_STALL_PROGRESS) {
    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_STREAM_STALL_DETECTED;
    ev.u.stall.idle_ms = (uint64_t)(err->kind == AL_HTTP_ERR_STALL_IDLE
                                        ? a->idle_timeout_ms
                                        : a->progress_timeout_ms);
    ev.u.stall.content_delivered = a->att.delivered;
    if (al__agent_post(a, &ev)) {
      return;
    }
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_API_ERROR;
  ev.u.api_error.status = err->http_status;
  ev.u.api_error.kind = ag_slice(err->api_type != NULL
                                     ? err->api_type
                                     : al_http_error_kind_name(err->kind));
  ev.u.api_error.message = ag_slice(msg);
  if (al__agent_post(a, &ev)) {
    return;
  }
  al__agent_attempt_failed(a, &e, err->http_status, msg);
}

/* The request for history h as it would be sent now (preq zeroed first;
 * al_provider_request_free it). */
static int build_request(al_agent_t *a, const al_history_t *h,
                         al_provider_request_t *preq) {
  al_provider_options_t po;
  json_t *tool_choice = NULL;
  json_t *offered = al__agent_offered_tools(a);
  int rc;

  al_provider_options_init(&po);
  po.cache_control = a->prompt_cache;
  po.model = a->model;
  po.max_tokens = a->run.cur_max_tokens;
  po.system = al__history_system(h);
  po.api_key = a->api_key;
  /* Round-trips the model needs (models catalogue): its reasoning back. */
  po.echo_reasoning = a->model_info.echo_reasoning;
  po.no_media = a->model_info.no_images;
  po.reasoning_field = a->model_info.reasoning_field;
  if (json_array_size(offered) > 0) {
    po.tools = offered;
    if (a->run.state == AG_SUMMARY || a->run.state == AG_COMPACTING) {
      tool_choice = json_pack("{s:s}", "type", "none");
      po.tool_choice = tool_choice;
    }
  }
  if (a->base_has_v1) {
    po.path_prefix = "";
  }
  memset(preq, 0, sizeof(*preq));
  rc = al_provider_build_request(a->provider, al__history_to_json(h), &po,
                                 preq);
  json_decref(tool_choice);
  json_decref(offered);
  return rc;
}

static int64_t request_raw(const al_history_t *h,
                           const al_provider_request_t *preq) {
  return al__budget_raw_msgs(preq->body_len, al__history_to_json(h));
}

int64_t al__agent_projected(al_agent_t *a) {
  al_provider_request_t preq;
  int64_t p;

  if (build_request(a, &a->history, &preq) != 0) {
    return -1;
  }
  p = al__budget_project(&a->budget, a->model, request_raw(&a->history, &preq));
  al_provider_request_free(&preq);
  return p;
}

/* The validity gate before a send (validity.c): the body is checked with
 * the provider's validator; on a violation the history is repaired where
 * that is unambiguous (history_repaired) and the body rebuilt, else the
 * request is refused with AL_EHISTORY naming the rule (why). Returns 0
 * with preq ready to send, 1 when a subscriber stopped the run, or an
 * error (preq freed). */
static int gate(al_agent_t *a, al_history_t *h, al_provider_request_t *preq,
                char *why, size_t why_len) {
  al_validate_verdict_t v;
  json_t *done;
  char *text;
  al_event_t ev;
  size_t n;
  int rc;

  if (al__validity_check(a->provider, preq->body, preq->body_len, &v)) {
    return 0;
  }
  al_provider_request_free(preq);
  done = json_array();
  n = al__validity_repair(h->messages, done);
  if (n == 0 || (rc = build_request(a, h, preq)) != 0 ||
      !al__validity_check(a->provider, preq->body, preq->body_len, &v)) {
    if (n > 0) {
      al_provider_request_free(preq);
    }
    json_decref(done);
    snprintf(why, why_len, "the request history breaks the rule %s: %s",
             v.rule, v.message);
    return AL_EHISTORY;
  }
  text = json_dumps(done, JSON_COMPACT);
  json_decref(done);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_HISTORY_REPAIRED;
  ev.u.repaired.count = (uint32_t)n;
  ev.u.repaired.repairs = ag_slice(text);
  rc = al__agent_post(a, &ev) ? 1 : 0;
  al_free(text);
  if (rc != 0) {
    al_provider_request_free(preq);
  }
  return rc;
}

static int attempt_start(al_agent_t *a) {
  al_provider_request_t preq;
  al_pstream_options_t so;
  al_http_request_options_t ro;
  al_http_header_t *hdrs = NULL;
  al_history_t *h = a->run.state == AG_SUMMARY      ? &a->run.summary_hist
                    : a->run.state == AG_COMPACTING ? &a->compact.hist
                                                : &a->history;
  int64_t projected;
  char why[1200];
  al_event_t ev;
  al_buf_t url;
  size_t i;
  int rc;

  attempt_clear(a);
  if (h == &a->history && (al__agent_micro(a) || trim_messages(a))) {
    return 0; /* a subscriber ended the run or closed the agent */
  }
  rc = build_request(a, h, &preq);
  if (rc == 0) {
    rc = gate(a, h, &preq, why, sizeof(why));
  }
  if (rc == 1) {
    return 0; /* a subscriber ended the run or closed the agent */
  }
  if (rc == AL_EHISTORY) {
    end_error(a, rc, why);
    return 0;
  }
  if (rc != 0) {
    return rc;
  }
  if (h == &a->history) {
    projected = al__budget_project(&a->budget, a->model,
                                   request_raw(h, &preq));
    rc = compact_check(a, projected);
    if (rc != 0) {
      al_provider_request_free(&preq);
      return 0; /* compacting, or the run ended */
    }
  }
  al__budget_sent(&a->budget, request_raw(h, &preq));
  al_buf_init(&url, 16 * 1024);
  if (al_buf_printf(&url, "%s%s", a->base_url, preq.path) != 0) {
    al_provider_request_free(&preq);
    al_buf_free(&url);
    return AL_ENOMEM;
  }
  hdrs = al_calloc(preq.nheaders + 1, sizeof(*hdrs));
  if (hdrs == NULL) {
    al_provider_request_free(&preq);
    al_buf_free(&url);
    return AL_ENOMEM;
  }
  for (i = 0; i < preq.nheaders; i++) {
    hdrs[i].name = preq.headers[i].name;
    hdrs[i].name_len = strlen(preq.headers[i].name);
    hdrs[i].value = preq.headers[i].value;
    hdrs[i].value_len = strlen(preq.headers[i].value);
  }

  al_pstream_options_runtime(&so);
  so.on_event = on_pevent;
  so.data = a;
  so.think_tags = a->model_info.think_tags;
  so.id_seed = al__retry_rng_next(&a->run.rng);
  al__agent_limits_pstream(&a->limits, &so);
  rc = al_pstream_init(&a->att.ps, a->provider, &so);
  if (rc == 0) {
    a->att.ps_ready = true;
    if (a->run.state != AG_SUMMARY && a->run.state != AG_COMPACTING) {
      rc = exec_new(a);
    }
  }
  if (rc == 0) {
    al_http_request_options_init(&ro);
    ro.method = preq.method;
    ro.url = url.data;
    ro.headers = hdrs;
    ro.n_headers = preq.nheaders;
    ro.body = preq.body;
    ro.body_len = preq.body_len;
    /* Per request: a shared client's defaults are not this agent's. */
    ro.idle_timeout_ms = a->idle_timeout_ms;
    ro.progress_timeout_ms = a->progress_timeout_ms;
    al__agent_limits_request(&a->limits, &ro);
    ro.expect_event_stream = true;
    ro.on_data = on_data;
    ro.on_complete = on_complete;
    ro.data = a;
    rc = al_http_request_start(a->client, &ro, &a->att.req);
  }
  al_free(hdrs);
  al_provider_request_free(&preq);
  al_buf_free(&url);
  if (rc != 0) {
    a->att.req = NULL;
    return rc;
  }
  a->att.api_t0 = al_now_ns();
  a->run.stats.requests++;
  if (a->run.state != AG_SUMMARY && a->run.state != AG_COMPACTING) {
    set_state(a, AG_STREAMING);
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_STREAM_REQUEST_START;
  ev.u.stream_request.model = ag_slice(a->model);
  ev.u.stream_request.attempt = (uint32_t)a->run.retry.attempt;
  al__agent_post(a, &ev);
  return 0;
}

/* ---- ends of a run ---------------------------------------------------------------- */

static void run_end_common(al_agent_t *a) {
  attempt_clear(a);
  uv_timer_stop(&a->run.backoff);
  a->mcp.waiting = false;
  al__agent_hooks_cancel_runs(a);
  exec_close_all(a);
  if (a->run.state == AG_SUMMARY) {
    al__history_free(&a->run.summary_hist);
    al__history_init(&a->run.summary_hist);
  }
  al__history_free(&a->compact.hist);
  al__history_init(&a->compact.hist);
  /* compact_requested stays: a compaction asked for during a run that
   * then ended runs before the next run's first request. */
  a->compact.this_turn = false;
  a->compact.run_after = -1;
  a->compact.overflow_retried = false;
  al_free(a->run.done_text);
  a->run.done_text = NULL;
  a->run.stats.duration_ms = ms_since(a->run.run_t0);
  set_state(a, AG_IDLE);
  a->run.gen++;
}

static void end_final(al_agent_t *a, const char *text, size_t len) {
  al_event_t ev;

  run_end_common(a);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_FINAL;
  ev.u.final.text.ptr = text != NULL ? text : "";
  ev.u.final.text.len = text != NULL ? len : 0;
  al__agent_post(a, &ev);
}

/* History commit hook (al_agent_options_t.on_commit). */
static void commit_notify(al_agent_t *a, al_commit_kind_t kind,
                          const json_t *msg) {
  json_t *m;
  char *txt;

  if (a->core.on_commit == NULL || msg == NULL) {
    return;
  }
  m = json_pack("{s:s, s:O}", "role",
                kind == AL_COMMIT_ASSISTANT ? "assistant" : "user", "content",
                json_object_get(msg, "content"));
  txt = m != NULL ? json_dumps(m, JSON_COMPACT) : NULL;
  json_decref(m);
  if (txt != NULL) {
    a->core.on_commit(a, kind, txt, strlen(txt), a->core.commit_data);
    al_free(txt);
  }
}

/* After the open tool turn was closed (results, cancel or error): the user
 * message that closed it is the history's last. */
static void commit_notify_results(al_agent_t *a) {
  const json_t *m = al__history_to_json(&a->history);

  if (m != NULL && json_array_size(m) > 0) {
    commit_notify(a, AL_COMMIT_TOOL_RESULTS,
                  json_array_get(m, json_array_size(m) - 1));
  }
}

/* user_message for the tool results the last history message carries
 * (a summary: the results themselves are in tool_use_completed). True
 * when the agent went away in a callback. */
static bool post_tool_results(al_agent_t *a) {
  const json_t *h = al__history_to_json(&a->history);
  const json_t *m =
      h != NULL ? json_array_get(h, json_array_size(h) - 1) : NULL;
  json_t *sum = json_array();
  const json_t *blk;
  size_t i;
  char *txt;
  al_event_t ev;
  bool gone;

  json_array_foreach(json_object_get(m, "content"), i, blk) {
    const json_t *c = json_object_get(blk, "content");
    size_t chars = json_is_string(c) ? json_string_length(c) : 0;

    if (json_is_array(c)) {
      const json_t *part;
      size_t k;

      json_array_foreach(c, k, part) {
        const json_t *t = json_object_get(part, "text");

        chars += json_is_string(t) ? json_string_length(t) : 0;
      }
    }
    json_array_append_new(
        sum, json_pack("{s:O?, s:b, s:I}", "tool_use_id",
                       json_object_get(blk, "tool_use_id"), "is_error",
                       json_is_true(json_object_get(blk, "is_error")),
                       "chars", (json_int_t)chars));
  }
  txt = sum != NULL ? json_dumps(sum, JSON_COMPACT) : NULL;
  json_decref(sum);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_USER_MESSAGE;
  ev.u.user_message.text = ag_slice("");
  ev.u.user_message.tool_results = ag_slice(txt != NULL ? txt : "[]");
  gone = al__agent_post(a, &ev);
  al_free(txt);
  return gone;
}

static void end_error(al_agent_t *a, int code, const char *message) {
  al_event_t ev;
  char msg[512];

  snprintf(msg, sizeof(msg), "%s", message);
  if (al__history_turn_open(&a->history)) {
    al__history_cancel_open(&a->history,
                            "Error: the run failed before this tool call "
                            "finished");
    commit_notify_results(a);
  }
  run_end_common(a);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_ERROR;
  ev.u.error.code = code;
  ev.u.error.message = ag_slice(msg);
  al__agent_post(a, &ev);
}

/* The text of the reply's text blocks, joined by newlines. One text block
 * (the usual case) is not copied: *single gets a reference to its string,
 * which may be megabytes; otherwise the blocks are joined into out. */
static void join_text(const json_t *msg, al_buf_t *out, json_t **single) {
  const json_t *content = json_object_get(msg, "content");
  const json_t *blk;
  json_t *only = NULL;
  size_t i, n = 0;
  bool first = true;

  *single = NULL;
  json_array_foreach(content, i, blk) {
    const json_t *ty = json_object_get(blk, "type");
    json_t *tx = json_object_get(blk, "text");

    if (json_is_string(ty) && strcmp(json_string_value(ty), "text") == 0 &&
        json_is_string(tx)) {
      only = tx;
      n++;
    }
  }
  if (n == 1) {
    *single = json_incref(only);
    return;
  }
  json_array_foreach(content, i, blk) {
    const json_t *ty = json_object_get(blk, "type");
    const json_t *tx = json_object_get(blk, "text");

    if (json_is_string(ty) && strcmp(json_string_value(ty), "text") == 0 &&
        json_is_string(tx)) {
      if (!first) {
        al_buf_append(out, "\n", 1);
      }
      al_buf_append(out, json_string_value(tx), json_string_length(tx));
      first = false;
    }
  }
}

/* Posts final with the reply's text and releases it. */
static void end_final_text(al_agent_t *a, al_buf_t *buf, json_t *single) {
  if (single != NULL) {
    end_final(a, json_string_value(single), json_string_length(single));
  } else {
    end_final(a, buf->data, buf->len);
  }
  json_decref(single);
  al_buf_free(buf);
}

static void summary_failed(al_agent_t *a) {
  end_final(a, AL_AGENT_SUMMARY_FALLBACK, strlen(AL_AGENT_SUMMARY_FALLBACK));
}

/* ---- failures and retries ------------------------------------------------------------- */

static void on_mcp_wait(uv_timer_t *t) {
  al__agent_mcp_wait_over(AL_CONTAINER_OF(t, al_agent_t, run.backoff));
}

void al__agent_mcp_wait_over(al_agent_t *a) {
  if (!a->mcp.waiting) {
    return;
  }
  a->mcp.waiting = false;
  uv_timer_stop(&a->run.backoff);
  if (al__agent_mcp_startup_post(a)) {
    return;
  }
  start_turn(a);
}

static void on_backoff(uv_timer_t *t) {
  al_agent_t *a = AL_CONTAINER_OF(t, al_agent_t, run.backoff);
  int rc = attempt_start(a);

  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

static bool post_retry(al_agent_t *a, int attempt, int max, int64_t delay,
                       int status, const char *kind, const char *message) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_RETRY;
  ev.u.retry.attempt = (uint32_t)attempt;
  ev.u.retry.max = (uint32_t)max;
  ev.u.retry.delay_ms = (uint64_t)(delay > 0 ? delay : 0);
  ev.u.retry.status = status;
  ev.u.retry.kind = ag_slice(kind);
  ev.u.retry.message = ag_slice(message);
  return al__agent_post(a, &ev);
}

/* The reply is void: drop its content for subscribers and abort its
 * tools. Returns true when the caller must stop. */
static bool discard_reply(al_agent_t *a, const char *reason) {
  bool delivered = a->att.delivered;
  char *msg_id = a->att.msg_id;
  al_event_t ev;
  bool stop = false;

  a->att.msg_id = NULL;
  attempt_clear(a);
  exec_retire(a, a->att.cur);
  if (delivered) {
    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_TOMBSTONE;
    ev.u.tombstone.message_id = ag_slice(msg_id);
    ev.u.tombstone.reason = ag_slice(reason);
    stop = al__agent_post(a, &ev);
  }
  al_free(msg_id);
  return stop;
}

void al__agent_attempt_failed(al_agent_t *a, const al_retry_err_t *err,
                              int status, const char *message) {
  al_retry_decision_t d;
  al_event_t ev;
  char *from;
  int64_t now_ms = (int64_t)(al_now_ns() / 1000000);

  if (discard_reply(a, al__retry_class_name(err->cls))) {
    return;
  }
  if (a->run.state == AG_SUMMARY) {
    summary_failed(a);
    return;
  }
  if (a->run.state == AG_COMPACTING) {
    /* A request too long for the summarizer is not retried; transient
     * errors are, then the deterministic trim takes over. */
    al__retry_decide(&a->run.retry, &a->ropts, err, &a->run.rng, now_ms, &d);
    if (!d.retry || is_overflow(message)) {
      compact_finish(a, NULL, 0);
      return;
    }
    if (post_retry(a, d.attempt, d.max_attempts, d.delay_ms, status,
                   al__retry_class_name(err->cls), message)) {
      return;
    }
    uv_timer_start(&a->run.backoff, on_backoff, (uint64_t)d.delay_ms, 0);
    return;
  }
  if (is_overflow(message) && !a->compact.overflow_retried) {
    /* "prompt is too long": compact once, then the same request again. */
    a->compact.overflow_retried = true;
    compact_start(a, "overflow");
    return;
  }
  al__retry_decide(&a->run.retry, &a->ropts, err, &a->run.rng, now_ms, &d);
  if (!d.retry) {
    char text[700];
    char why[160];

    if (d.retry_after_ms > 0) {
      snprintf(why, sizeof(why),
               "retry-after of %lld s is longer than the allowed maximum "
               "of %lld s",
               (long long)((d.retry_after_ms + 999) / 1000),
               (long long)(d.retry_after_max_ms / 1000));
    } else {
      snprintf(why, sizeof(why), "%s", d.reason != NULL ? d.reason : "");
    }
    snprintf(text, sizeof(text), "%s (%s%s%s)", message,
             al__retry_class_name(err->cls), why[0] != '\0' ? ", " : "",
             why);
    end_error(a, AL_EAPI, text);
    return;
  }
  if (d.fallback && a->fallback_model != NULL) {
    from = a->model;
    a->model = al_strdup(a->fallback_model);
    if (a->model == NULL) {
      a->model = from;
      end_error(a, AL_ENOMEM, "out of memory");
      return;
    }
    model_info_refresh(a);
    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_MODEL_FALLBACK;
    ev.u.fallback.from = ag_slice(from);
    ev.u.fallback.to = ag_slice(a->model);
    ev.u.fallback.reason = ag_slice("overloaded");
    if (al__agent_post(a, &ev)) {
      al_free(from);
      return;
    }
    al_free(from);
  }
  if (post_retry(a, d.attempt, d.max_attempts, d.delay_ms, status,
                 al__retry_class_name(err->cls), message)) {
    return;
  }
  set_state(a, AG_BACKOFF);
  uv_timer_start(&a->run.backoff, on_backoff, (uint64_t)d.delay_ms, 0);
}

/* ---- a reply that ended well ---------------------------------------------------------------- */

/* Blocks of a tool the server ran (Anthropic's server_tool_use and
 * *_tool_result, the Responses API's hosted *_call items, kept as given;
 * its function calls are tool_use blocks): the reply's usage then counts
 * the server's own model calls (budget.h). */
static bool has_server_blocks(const json_t *msg) {
  const json_t *c = json_object_get(msg, "content");
  const json_t *b;
  size_t i;

  json_array_foreach(c, i, b) {
    const char *t = json_string_value(json_object_get(b, "type"));
    size_t n = t != NULL ? strlen(t) : 0;

    if (t != NULL && (strcmp(t, "server_tool_use") == 0 ||
                      (n > 12 && strcmp(t + n - 12, "_tool_result") == 0) ||
                      (n > 5 && strcmp(t + n - 5, "_call") == 0))) {
      return true;
    }
  }
  return false;
}

static bool post_usage(al_agent_t *a, const json_t *msg) {
  const json_t *usage = json_object_get(msg, "usage");
  al_event_t ev;
  int64_t ctx;

  if (!json_is_object(usage)) {
    return false;
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_USAGE;
#define AG_U(f)                                                        \
  ev.u.usage.f = (uint64_t)json_integer_value(json_object_get(usage, #f)); \
  a->run.stats.f += ev.u.usage.f;
  AG_U(input_tokens)
  AG_U(output_tokens)
  AG_U(cache_read_input_tokens)
  AG_U(cache_creation_input_tokens)
  AG_U(reasoning_tokens)
#undef AG_U
  ctx = al__budget_observed(&a->budget, a->model, usage,
                            has_server_blocks(msg));
  if (ctx <= 0) {
    ctx = al__budget_project(&a->budget, a->model, a->budget.last_raw);
    ev.u.usage.context_estimated = true;
  }
  ev.u.usage.context_tokens = (uint64_t)ctx;
  ev.u.usage.context_window = (uint64_t)a->budget.window;
  ev.u.usage.context_pct = al__budget_pct(&a->budget, ctx);
  if (al__agent_post(a, &ev)) {
    return true;
  }
  if (ev.u.usage.context_pct < AL_BUDGET_WARN_PCT || a->budget.warned) {
    return false;
  }
  /* Once per session: the chat shows it, and an embedder can compact. */
  a->budget.warned = true;
  ev.type = AL_EVENT_CONTEXT_WARNING;
  return al__agent_post(a, &ev);
}

/* pause_turn (Anthropic server tools pausing a long turn): the reply is
 * in the history as it came; sending the conversation back as it stands
 * lets the model continue the same turn (its next reply extends this
 * assistant message). Bounded by AG_MAX_PAUSES per turn, said with a
 * provider_notice. */
static void continue_paused(al_agent_t *a, al_buf_t *text, json_t *single) {
  const char *t = single != NULL ? json_string_value(single) : text->data;
  size_t n = single != NULL ? json_string_length(single) : text->len;
  size_t old = a->run.pause_text != NULL ? strlen(a->run.pause_text) : 0;
  char *joined = al_realloc(a->run.pause_text, old + n + 1);
  al_event_t ev = al__events_blank;
  char msg[96];
  int rc;

  if (joined != NULL) {
    if (n > 0) {
      memcpy(joined + old, t, n);
    }
    joined[old + n] = '\0';
    a->run.pause_text = joined;
  }
  json_decref(single);
  al_buf_free(text);
  a->run.pauses++;
  snprintf(msg, sizeof(msg),
           "the provider paused the turn: continuing (%u of %u)",
           (unsigned)a->run.pauses, (unsigned)AG_MAX_PAUSES);
  ev.type = AL_EVENT_PROVIDER_NOTICE;
  ev.u.notice.kind = ag_slice("pause_turn");
  ev.u.notice.message = ag_slice(msg);
  if (al__agent_post(a, &ev)) {
    return;
  }
  al__retry_request_start(&a->run.retry);
  rc = attempt_start(a);
  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

/* The turn's answer after pauses: the paused replies' text first. */
static void prepend_pause_text(al_agent_t *a, al_buf_t *text,
                               json_t **single) {
  al_buf_t all;

  al_buf_init(&all, SIZE_MAX / 2);
  al_buf_append_str(&all, a->run.pause_text);
  if (*single != NULL) {
    al_buf_append(&all, json_string_value(*single),
                  json_string_length(*single));
    json_decref(*single);
    *single = NULL;
  } else {
    al_buf_append(&all, text->data != NULL ? text->data : "", text->len);
  }
  al_buf_free(text);
  *text = all;
  al_free(a->run.pause_text);
  a->run.pause_text = NULL;
  a->run.pauses = 0;
}

static void reply_done(al_agent_t *a) {
  json_t *msg = al_pstream_message(&a->att.ps);
  const json_t *sr = json_object_get(msg, "stop_reason");
  al_stop_reason_t stop =
      al__provider_stop_from_anthropic(json_string_value(sr));
  bool incomplete = false;
  al_event_t ev;
  al_buf_t text;
  json_t *single = NULL;
  size_t i;
  int rc;

  al_buf_init(&text, SIZE_MAX / 2);
  join_text(msg, &text, &single);
  if (a->run.state == AG_COMPACTING) {
    if (post_usage(a, msg)) {
      json_decref(single);
      al_buf_free(&text);
      return;
    }
    if (single != NULL) {
      compact_finish(a, json_string_value(single), json_string_length(single));
    } else {
      compact_finish(a, text.data, text.len);
    }
    json_decref(single);
    al_buf_free(&text);
    return;
  }
  a->compact.overflow_retried = false;
  if (a->run.state == AG_SUMMARY) {
    if (post_usage(a, msg)) {
      json_decref(single);
      al_buf_free(&text);
      return;
    }
    if (text.len == 0 && json_string_length(single) == 0) {
      json_decref(single);
      al_buf_free(&text);
      summary_failed(a);
      return;
    }
    end_final_text(a, &text, single);
    return;
  }
  for (i = 0; i < a->att.nblocks; i++) {
    if (a->att.blocks[i].is_tool && !a->att.blocks[i].stopped) {
      incomplete = true;
    }
  }
  if (incomplete || (stop == AL_STOP_MAX_TOKENS &&
                     a->att.nblocks > 0 && a->att.blocks[a->att.nblocks - 1].is_tool)) {
    json_decref(single);
    al_buf_free(&text);
    if (post_usage(a, msg)) {
      return;
    }
    if (stop == AL_STOP_MAX_TOKENS &&
        al__retry_continuation_take(&a->run.retry, &a->ropts)) {
      if (discard_reply(a, "max_tokens")) {
        return;
      }
      if (post_retry(a, a->run.retry.continuations, a->ropts.max_continuations, 0,
                     0, "max_tokens",
                     "the reply hit max_tokens inside a tool call")) {
        return;
      }
      a->run.cur_max_tokens = AL_MIN(a->run.cur_max_tokens * 2, AG_MAX_TOKENS_CEILING);
      if (a->run.cur_max_tokens < a->max_tokens) {
        a->run.cur_max_tokens = a->max_tokens;
      }
      al__retry_request_start(&a->run.retry);
      rc = attempt_start(a);
      if (rc != 0) {
        end_error(a, rc, "could not send the request to the model");
      }
      return;
    }
    if (discard_reply(a, stop == AL_STOP_MAX_TOKENS ? "max_tokens" : "error")) {
      return;
    }
    end_error(a, AL_EAPI,
              stop == AL_STOP_MAX_TOKENS
                  ? "the reply hit max_tokens inside a tool call (after 3 "
                    "continuations)"
                  : "the reply ended with an incomplete tool call");
    return;
  }
  rc = al__history_commit_assistant(&a->history, msg);
  if (rc != 0) {
    json_decref(single);
    al_buf_free(&text);
    discard_reply(a, "invalid");
    end_error(a, rc, "the model's reply cannot be recorded (invalid tool_use "
                     "block or duplicate id)");
    return;
  }
  commit_notify(a, AL_COMMIT_ASSISTANT, msg);
  /* usage comes once the reply is in the history: from here on a cancel
   * answers its tool calls. */
  if (post_usage(a, msg)) {
    json_decref(single);
    al_buf_free(&text);
    return;
  }
  a->run.stats.turns++;
  al__retry_on_success(&a->run.retry);
  al__retry_continuation_reset(&a->run.retry);
  a->run.cur_max_tokens = a->max_tokens;
  attempt_clear(a);
  if (!al__history_turn_open(&a->history) && stop == AL_STOP_PAUSE_TURN &&
      a->run.pauses < AG_MAX_PAUSES) {
    continue_paused(a, &text, single);
    return;
  }
  if (a->run.pause_text != NULL) {
    prepend_pause_text(a, &text, &single);
  }
  if (!al__history_turn_open(&a->history)) {
    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_TURN_COMPLETED;
    ev.u.turn_completed.stop_reason = ag_slice(al_stop_reason_name(stop));
    if (al__agent_post(a, &ev)) {
      json_decref(single);
      al_buf_free(&text);
      return;
    }
    /* Stop hooks may send the model back to work (agent_hooks.c). */
    if (al__agent_stop_hooks_start(
            a, single != NULL ? json_string_value(single) : text.data,
            single != NULL ? json_string_length(single) : text.len)) {
      json_decref(single);
      al_buf_free(&text);
      return;
    }
    end_final_text(a, &text, single);
    return;
  }
  json_decref(single);
  al_buf_free(&text);
  set_state(a, AG_TOOLS);
  if (a->att.cur == NULL || !al__executor_has_pending(&a->att.cur->ex)) {
    tools_done(a);
  }
}

/* Every tool of the committed reply has its result. */
static void tools_done(al_agent_t *a) {
  ag_exec_t *box = a->att.cur;
  al_tool_call_t *call = NULL;
  uint32_t n = 0;
  al_event_t ev;
  json_t *js;

  /* Each call's post_tool_use hooks started when its result came; the
   * last one to decide calls back here (agent_hooks.c). */
  if (box != NULL && box->posts_pending > 0) {
    return;
  }
  while (box != NULL && (call = al__executor_results(&box->ex, call)) != NULL) {
    bool is_error;

    js = al__agent_post_content(box, call, &is_error);
    if (js != NULL) {
      al__history_add_tool_result(&a->history, call->id, js, is_error);
      json_decref(js);
    }
    n++;
    if (!call->is_error && strcmp(call->name, "done") == 0 &&
        a->run.done_text == NULL) {
      a->run.done_text = al_malloc(call->content_len + 1);
      if (a->run.done_text != NULL) {
        memcpy(a->run.done_text, call->content, call->content_len);
        a->run.done_text[call->content_len] = '\0';
      }
    }
  }
  if (al__history_pending(&a->history) > 0) {
    al__history_cancel_open(&a->history,
                            "Error: the tool call could not be run");
  } else {
    al__history_close_turn(&a->history);
  }
  commit_notify_results(a);
  if (box != NULL) {
    exec_close(box);
  }
  if (post_tool_results(a)) {
    return;
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TURN_COMPLETED;
  ev.u.turn_completed.stop_reason = ag_slice("tool_use");
  ev.u.turn_completed.tool_calls = n;
  if (al__agent_post(a, &ev)) {
    return;
  }
  if (a->run.done_text != NULL) {
    char *t = a->run.done_text;

    a->run.done_text = NULL;
    end_final(a, t, strlen(t));
    al_free(t);
    return;
  }
  start_turn(a);
}

static void start_turn(al_agent_t *a) {
  al_event_t ev;
  int rc;

  memset(&ev, 0, sizeof(ev));
  if (a->run.turn >= a->max_turns) {
    ev.type = AL_EVENT_MAX_TURNS_REACHED;
    ev.u.max_turns.max_turns = a->max_turns;
    if (al__agent_post(a, &ev)) {
      return;
    }
    if (al__history_copy(&a->history, &a->run.summary_hist) != 0 ||
        al__history_append_user_text(&a->run.summary_hist,
                                     AL_AGENT_SUMMARY_PROMPT) != 0) {
      summary_failed(a);
      return;
    }
    set_state(a, AG_SUMMARY);
    al__retry_request_start(&a->run.retry);
    if (attempt_start(a) != 0) {
      summary_failed(a);
    }
    return;
  }
  /* A turn boundary: late MCP servers join, changed tool lists apply. */
  if (al__agent_mcp_sync(a)) {
    return;
  }
  a->run.turn++;
  a->compact.this_turn = false;
  ev.type = AL_EVENT_TURN_STARTED;
  if (al__agent_post(a, &ev)) {
    return;
  }
  al__retry_request_start(&a->run.retry);
  rc = attempt_start(a);
  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

/* ---- summary compaction ----------------------------------------------------------------- */

/* "prompt is too long" (Anthropic), context_length_exceeded / "maximum
 * context length" (OpenAI-compatible servers). */
static bool is_overflow(const char *message) {
  return message != NULL &&
         (strstr(message, "prompt is too long") != NULL ||
          strstr(message, "context_length_exceeded") != NULL ||
          strstr(message, "maximum context length") != NULL ||
          strstr(message, "context window") != NULL);
}

static int64_t keep_tokens(const al_agent_t *a) {
  if (a->compact.keep_recent > 0) {
    return a->compact.keep_recent;
  }
  return AL_MIN((int64_t)AL_COMPACT_KEEP_TOKENS, a->budget.window / 4);
}

/* Before a request of the run (its turn's results are committed, nothing
 * streams, no tool runs): a requested or needed compaction starts here.
 * Returns 1 when the request must not be sent now. */
static int compact_check(al_agent_t *a, int64_t projected) {
  int64_t at = al__budget_compact_at(&a->budget, a->run.cur_max_tokens);
  char msg[300];
  bool again;

  if (a->compact.requested) {
    a->compact.requested = false;
    compact_start(a, "manual");
    return 1;
  }
  if (projected <= at) {
    return 0;
  }
  /* A second automatic compaction in a run only after an effective
   * first one (tokens after <= 0.6 x the trigger). */
  again = a->compact.run_after < 0 || a->compact.run_after * 10 <= at * 6;
  if (a->compact.auto_compact && !a->compact.this_turn && again) {
    compact_start(a, "auto");
    return 1;
  }
  if ((a->compact.this_turn || !again) &&
      al__budget_pct(&a->budget, projected) > AL_BUDGET_REFUSE_PCT) {
    snprintf(msg, sizeof(msg),
             "context_limit_exceeded: the next request needs about %lld "
             "tokens (%u%% of the %lld-token window) even after compaction",
             (long long)projected, al__budget_pct(&a->budget, projected),
             (long long)a->budget.window);
    end_error(a, AL_ECONTEXT, msg);
    return 1;
  }
  return 0;
}

static int64_t project_history(al_agent_t *a) {
  al_provider_request_t preq;
  int64_t p;

  if (build_request(a, &a->history, &preq) != 0) {
    return 0;
  }
  p = al__budget_project(&a->budget, a->model, request_raw(&a->history, &preq));
  al_provider_request_free(&preq);
  return p;
}

/* max_messages (seed 004): the oldest messages go at a safe cut, without
 * a model call; reported like a compaction (trigger "max_messages") and
 * recorded the same way. True when the caller must stop. */
static bool trim_messages(al_agent_t *a) {
  json_t *msgs = a->history.messages;
  size_t cut;
  char notice[160];
  json_t *next;
  al_event_t ev;
  uint32_t dropped;
  uint32_t results;
  int64_t before;

  if (a->compact.max_messages == 0 || json_array_size(msgs) <= a->compact.max_messages ||
      (cut = al__compact_cut_count(msgs, a->compact.max_messages)) == 0) {
    return false;
  }
  before = project_history(a);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_STARTED;
  ev.u.compaction.trigger = ag_slice("max_messages");
  ev.u.compaction.tokens_before = (uint64_t)before;
  if (al__agent_post(a, &ev)) {
    return true;
  }
  snprintf(notice, sizeof(notice),
           "(The oldest messages were dropped to keep at most %u messages.)",
           a->compact.max_messages);
  next = al__compact_assemble(msgs, cut, notice, strlen(notice));
  if (next == NULL) {
    return false;
  }
  al__compact_counts(msgs, cut, &dropped, &results);
  json_decref(a->history.messages);
  a->history.messages = next;
  if (a->core.on_commit != NULL) {
    json_t *rec = json_pack("{s:O}", "messages", next);
    char *txt = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;

    if (txt != NULL) {
      a->core.on_commit(a, AL_COMMIT_COMPACTION, txt, strlen(txt), a->core.commit_data);
    }
    al_free(txt);
    json_decref(rec);
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_COMPLETED;
  ev.u.compaction.trigger = ag_slice("max_messages");
  ev.u.compaction.tokens_before = (uint64_t)before;
  ev.u.compaction.tokens_after = (uint64_t)project_history(a);
  ev.u.compaction.dropped_messages = dropped;
  ev.u.compaction.dropped_tool_results = results;
  return al__agent_post(a, &ev);
}

/* After the compaction: the run goes on, or the agent is idle again. */
static void compact_resume(al_agent_t *a) {
  int rc;

  if (!a->compact.in_run) {
    attempt_clear(a); /* the summary request's pipeline */
    set_state(a, AG_IDLE);
    return;
  }
  set_state(a, AG_STREAMING);
  a->compact.this_turn = true;
  if (strcmp(a->compact.trigger, "auto") == 0) {
    a->compact.run_after = a->compact.after;
  }
  al__retry_request_start(&a->run.retry);
  rc = attempt_start(a);
  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

static void compact_start(al_agent_t *a, const char *trigger) {
  const json_t *msgs = a->history.messages;
  double ratio = al__budget_ratio(&a->budget, a->model);
  al_event_t ev;
  json_t *req;
  size_t dropped;
  int rc;

  a->compact.in_run = al_agent_running(a);
  a->compact.trigger = trigger;
  a->compact.before = project_history(a);
  a->compact.cut = json_is_array(msgs) ? al__compact_cut(msgs, keep_tokens(a),
                                                         ratio)
                                       : 0;
  al__agent_pre_compact_hooks(a, trigger, (int64_t)a->compact.before);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_STARTED;
  ev.u.compaction.trigger = ag_slice(trigger);
  ev.u.compaction.tokens_before = (uint64_t)a->compact.before;
  if (al__agent_post(a, &ev)) {
    return;
  }
  if (a->compact.cut == 0) {
    compact_finish(a, "", 0); /* nothing older than the kept part */
    return;
  }
  req = al__compact_request(msgs,
                            a->budget.window * AL_COMPACT_REQUEST_PCT / 100,
                            ratio, a->compact.instructions, &dropped);
  al__history_free(&a->compact.hist);
  al__history_init(&a->compact.hist);
  if (req == NULL ||
      al__history_set_system(&a->compact.hist,
                             al__history_system(&a->history)) != 0) {
    json_decref(req);
    compact_finish(a, NULL, 0);
    return;
  }
  a->compact.hist.messages = req;
  set_state(a, AG_COMPACTING);
  al__retry_request_start(&a->run.retry);
  rc = attempt_start(a);
  if (rc != 0 && a->run.state == AG_COMPACTING) {
    compact_finish(a, NULL, 0);
  }
}

/* The summary arrived (summary != NULL, maybe empty when there was
 * nothing to drop) or the summary call failed (NULL): the new history,
 * the events, then the run goes on. */
static void compact_finish(al_agent_t *a, const char *summary, size_t len) {
  json_t *msgs = a->history.messages;
  size_t cut = a->compact.cut;
  char *fallback = NULL;
  json_t *next = NULL;
  al_event_t ev;
  uint32_t dropped = 0;
  uint32_t results = 0;
  int64_t after;
  char msg[300];
  bool failed = summary == NULL || (cut != 0 && len == 0);

  al__history_free(&a->compact.hist);
  al__history_init(&a->compact.hist);
  al_free(a->compact.instructions);
  a->compact.instructions = NULL;
  if (cut != 0) {
    if (failed) {
      fallback = al__compact_fallback_summary(msgs, cut);
      summary = fallback != NULL ? fallback : "";
      len = strlen(summary);
    }
    next = al__compact_assemble(msgs, cut, summary, len);
    if (next != NULL) {
      al__compact_counts(msgs, cut, &dropped, &results);
      json_decref(a->history.messages);
      a->history.messages = next;
      if (a->core.on_commit != NULL) {
        /* Durable: the transcript keeps the originals and this record;
         * a resumed session starts from it. */
        json_t *rec = json_pack("{s:O}", "messages", next);
        char *txt = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;

        if (txt != NULL) {
          a->core.on_commit(a, AL_COMMIT_COMPACTION, txt, strlen(txt),
                       a->core.commit_data);
        }
        al_free(txt);
        json_decref(rec);
      }
    }
  }
  a->compact.failures = failed && cut != 0 ? a->compact.failures + 1 : 0;
  after = project_history(a);
  a->compact.after = after;
  if (a->compact.before > after) {
    a->compact.saved += (uint64_t)(a->compact.before - after);
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_COMPLETED;
  ev.u.compaction.trigger = ag_slice(a->compact.trigger);
  ev.u.compaction.tokens_before = (uint64_t)a->compact.before;
  ev.u.compaction.tokens_after = (uint64_t)after;
  ev.u.compaction.dropped_messages = dropped;
  ev.u.compaction.dropped_tool_results = results;
  ev.u.compaction.summary_tokens = (uint64_t)(len + 3) / 4;
  ev.u.compaction.fallback = failed && cut != 0;
  al_free(fallback);
  if (al__agent_post(a, &ev)) {
    return;
  }
  if (a->compact.failures >= AL_COMPACT_MAX_FAILURES) {
    a->compact.failures = 0;
    end_error(a, AL_ECOMPACT,
              "compaction_failed: the summary request failed 3 times in a "
              "row (a deterministic trim was used each time)");
    return;
  }
  if (al__budget_pct(&a->budget, after) > AL_BUDGET_REFUSE_PCT) {
    snprintf(msg, sizeof(msg),
             "context_limit_exceeded: about %lld tokens (%u%% of the "
             "%lld-token window) remain after compaction",
             (long long)after, al__budget_pct(&a->budget, after),
             (long long)a->budget.window);
    if (a->compact.in_run) {
      end_error(a, AL_ECONTEXT, msg);
    } else {
      set_state(a, AG_IDLE);
      memset(&ev, 0, sizeof(ev));
      ev.type = AL_EVENT_ERROR;
      ev.u.error.code = AL_ECONTEXT;
      ev.u.error.message = ag_slice(msg);
      al__agent_post(a, &ev);
    }
    return;
  }
  compact_resume(a);
}

/* ---- public API ---------------------------------------------------------------------- */

void al_agent_options_init(al_agent_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
}

static void agent_free_fields(al_agent_t *a) {
  al_free(a->base_url);
  al_free(a->api_key);
  al_free(a->model);
  al_free(a->model_main);
  al_free(a->fallback_model);
  al_free(a->workspace);
  free_list(a->allowed_paths);
  free_list(a->denied_paths);
  free_list(a->policy.allow_tools);
  free_list(a->policy.deny_tools);
  al__history_free(&a->history);
  al__history_free(&a->run.summary_hist);
  al__history_free(&a->compact.hist);
  al_free(a->compact.instructions);
  json_decref(a->reg.tool_defs);
  json_decref(a->att.stamps);
  al_free(a->run.done_text);
  al_free(a->run.pause_text);
  al_free(a->att.msg_id);
  al_buf_free(&a->att.partial);
  blocks_free(a);
  al_models_free(a->own_models);
  al__agent_context_free(a);
  al__budget_free(&a->budget);
  if (a->core.bus != NULL) {
    al__events_bus_free(a->core.bus);
  }
}

int al_agent_check_base_url(const char *url, char *why, size_t why_len) {
  char tmp[8];

  if (why == NULL || why_len == 0) {
    why = tmp;
    why_len = sizeof(tmp);
  }
  why[0] = '\0';
  return url == NULL ? 0 : al_http_url_check(url, why, why_len);
}

static int set_base_url(al_agent_t *a, const char *url) {
  char why[160];
  size_t n;

  if (url == NULL) {
    url = al_provider_default_base_url(a->provider);
  }
  if (al_agent_check_base_url(url, why, sizeof(why)) != 0) {
    return AL_EINVAL;
  }
  a->base_url = al_strdup(url);
  if (a->base_url == NULL) {
    return AL_ENOMEM;
  }
  n = strlen(a->base_url);
  while (n > 0 && a->base_url[n - 1] == '/') {
    a->base_url[--n] = '\0';
  }
  /* OpenAI-compatible base URLs conventionally end in /v1. */
  a->base_has_v1 = n >= 3 && strcmp(a->base_url + n - 3, "/v1") == 0;
  return 0;
}

int al_agent_new(uv_loop_t *loop, const al_agent_options_t *o,
                 al_agent_t **out) {
  al_agent_t *a;
  al_http_client_options_t co;
  char cwd[4096];
  struct stat st;
  uint64_t seed;
  int rc;

  *out = NULL;
  if (loop == NULL || o == NULL) {
    return AL_EINVAL;
  }
  a = al_calloc(1, sizeof(*a));
  if (a == NULL) {
    return AL_ENOMEM;
  }
  a->loop = loop;
  a->data = o->data;
  al_list_init(&a->reg.tools);
  al_list_init(&a->policy.approvals);
  al_list_init(&a->att.execs);
  al_list_init(&a->policy.hook_waits);
  al_buf_init(&a->att.partial, AG_PARTIAL_MAX);
  al__history_init(&a->history);
  al__history_init(&a->run.summary_hist);
  al__history_init(&a->compact.hist);
  al__budget_init(&a->budget);
  a->compact.auto_compact = !o->no_auto_compact;
  a->compact.max_messages = o->max_messages;
  a->compact.keep_recent = o->keep_recent > 0 ? o->keep_recent : 0;
  a->prompt_cache = !o->no_prompt_cache;
  rc = AL_EINVAL;
  a->provider = al_provider_by_name(o->provider != NULL ? o->provider
                                                        : "anthropic");
  if (a->provider == NULL || (unsigned)o->permission_mode > AL_PERMISSION_MODE_JOB) {
    goto fail;
  }
  if ((rc = set_base_url(a, o->base_url)) != 0) {
    goto fail;
  }
  rc = AL_ENOMEM;
  a->api_key = dup_or_null(o->api_key);
  a->model_main = al_strdup(
      o->model != NULL ? o->model
      : a->provider->kind != AL_PROVIDER_ANTHROPIC ? "gpt-4o-mini"
                                                   : "claude-sonnet-5-5");
  a->model = dup_or_null(a->model_main);
  a->fallback_model = dup_or_null(o->fallback_model);
  if ((o->api_key != NULL && a->api_key == NULL) || a->model == NULL ||
      (o->fallback_model != NULL && a->fallback_model == NULL)) {
    goto fail;
  }
  if (o->context_window < 0) {
    rc = AL_EINVAL;
    goto fail;
  }
  a->models = o->models;
  if (a->models == NULL) {
    /* The shipped catalogue: compiled in, parsed here (no I/O). */
    if ((rc = al_models_parse(&a->own_models, NULL, 0, NULL, NULL)) != 0) {
      goto fail;
    }
    a->models = a->own_models;
    rc = AL_ENOMEM;
  }
  a->window_override = o->context_window;
  model_info_refresh(a);
  a->max_tokens = o->max_tokens > 0 ? o->max_tokens : 4096;
  a->run.cur_max_tokens = a->max_tokens;
  a->max_turns = o->max_turns > 0 ? o->max_turns : 20;
  a->concurrency = o->max_tool_concurrency > 0
                       ? o->max_tool_concurrency
                       : al__executor_concurrency_from_env();
  if (a->concurrency > AL_EXECUTOR_MAX_CONCURRENCY) {
    a->concurrency = AL_EXECUTOR_MAX_CONCURRENCY;
  }
  al__retry_options_init(&a->ropts);
  if (o->retry_max_attempts > 0) {
    a->ropts.max_attempts = o->retry_max_attempts;
  }
  if (o->retry_base_ms > 0) {
    a->ropts.base_ms = o->retry_base_ms;
  }
  if (o->retry_cap_ms > 0) {
    a->ropts.cap_ms = o->retry_cap_ms;
  }
  a->ropts.has_fallback_model = a->fallback_model != NULL;
  seed = o->rng_seed != 0 ? o->rng_seed : al_now_ns() ^ (uint64_t)(uintptr_t)a;
  al__retry_rng_seed(&a->run.rng, seed);
  al__retry_state_init(&a->run.retry);
  a->tool_timeout_ms = o->tool_timeout_ms;
  a->bash_network = o->bash_network;
  a->kill_grace_ms = o->kill_grace_ms;
  a->policy.mode = o->permission_mode;
  a->policy.permission = o->permission;
  a->policy.permission_data = o->permission_data;
  if (dup_list(o->allow_tools, &a->policy.allow_tools) != 0 ||
      dup_list(o->deny_tools, &a->policy.deny_tools) != 0 ||
      dup_list(o->allowed_paths, &a->allowed_paths) != 0 ||
      dup_list(o->denied_paths, &a->denied_paths) != 0) {
    goto fail;
  }
  if (o->workspace != NULL) {
    /* Relative ("ws", "./ws", ".") is taken against the process's cwd
     * now, once: the tools, the sandbox and the path policy need the
     * absolute real path. */
    char *real = realpath(o->workspace, NULL);

    if (real == NULL) {
      rc = AL_EINVAL;
      goto fail;
    }
    a->workspace = al_strdup(real);
    free(real);
  } else if (getcwd(cwd, sizeof(cwd)) != NULL) {
    a->workspace = al_strdup(cwd);
  } else {
    rc = AL_EINVAL;
    goto fail;
  }
  if (a->workspace == NULL) {
    goto fail;
  }
  if (stat(a->workspace, &st) != 0 || !S_ISDIR(st.st_mode)) {
    rc = AL_EINVAL;
    goto fail;
  }
  if (al__history_set_system(&a->history, o->system) != 0) {
    goto fail;
  }
  a->reg.tool_defs = json_array();
  a->att.stamps = json_object();
  if (a->reg.tool_defs == NULL || a->att.stamps == NULL) {
    goto fail;
  }
  if (o->session_id != NULL) {
    if (al__events_session_set(&a->core.session, o->session_id, o->first_seq) !=
        0) {
      rc = AL_EINVAL;
      goto fail;
    }
  } else {
    al_retry_rng_t r;
    char id[40];

    al__retry_rng_seed(&r, seed * 0x9E3779B97F4A7C15ULL + 1);
    snprintf(id, sizeof(id), "s_%016" PRIx64, al__retry_rng_next(&r));
    al__events_session_set(&a->core.session, id, o->first_seq);
  }
  a->core.on_commit = o->on_commit;
  a->core.commit_data = o->commit_data;
  a->run.run_id = o->first_run > 0 ? o->first_run - 1 : 0;
  if ((rc = al__events_bus_new(&a->core.bus, NULL)) != 0) {
    goto fail;
  }
  a->limits = o->limits; /* the tools read theirs (file_*) */
  if ((rc = al__agent_sandbox_init(a, o)) != 0 ||
      (o->builtin_tools && (rc = al__agent_tools_init(a)) != 0) ||
      (rc = al__agent_cli_tools_init(a)) != 0 ||
      (rc = al__agent_context_init(a, o)) != 0 ||
      (rc = al__agent_mcp_check(o)) != 0 ||
      (rc = al__agent_hooks_init(a, o)) != 0) {
    goto fail;
  }
  al_http_client_options_init(&co);
  co.ca_file = o->ca_file;
  if (o->connect_timeout_ms > 0) {
    co.connect_timeout_ms = o->connect_timeout_ms;
  }
  if (o->idle_timeout_ms > 0) {
    co.idle_timeout_ms = o->idle_timeout_ms;
  }
  if (o->progress_timeout_ms > 0) {
    co.progress_timeout_ms = o->progress_timeout_ms;
  }
  a->idle_timeout_ms = co.idle_timeout_ms;
  a->progress_timeout_ms = co.progress_timeout_ms;
  if (o->client != NULL) {
    a->client = o->client;
  } else if ((rc = al_http_client_new(loop, &co, &a->client)) != 0) {
    goto fail;
  } else {
    a->own_client = true;
  }
  uv_timer_init(loop, &a->run.backoff);
  uv_idle_init(loop, &a->core.finish);
  a->core.pending = 2; /* the backoff timer and the client */
  /* Last: from here on nothing fails, and the servers start at once. */
  al__agent_mcp_init(a, o);
  *out = a;
  return 0;
fail:
  al__agent_tools_free(a);
  agent_free_fields(a);
  al_free(a);
  return rc;
}

void *al_agent_get_data(const al_agent_t *a) { return a->data; }

void al_agent_model_info(const al_agent_t *a, al_model_info_t *out) {
  *out = a->model_info;
}
const char *al_agent_session(const al_agent_t *a) { return a->core.session.id; }
bool al_agent_running(const al_agent_t *a) {
  return a->run.state != AG_IDLE && a->run.state != AG_ENDING &&
         a->run.state != AG_CLOSING;
}

int al_agent_compact(al_agent_t *a, const char *instructions) {
  char *copy = NULL;

  if (ag_closing(a)) {
    return AL_ECLOSING;
  }
  if (a->run.state == AG_COMPACTING || a->run.state == AG_ENDING) {
    return AL_EBUSY;
  }
  if (instructions != NULL && (copy = al_strdup(instructions)) == NULL) {
    return AL_ENOMEM;
  }
  al_free(a->compact.instructions);
  a->compact.instructions = copy;
  if (al_agent_running(a)) {
    a->compact.requested = true; /* before the run's next request */
    return 0;
  }
  compact_start(a, "manual");
  return 0;
}

int al_agent_subscribe(al_agent_t *a, al_event_cb cb, void *data,
                       al_sub_t **out) {
  al__events_sub_t *sub = NULL;
  int rc;

  if (ag_closing(a)) {
    return AL_ECLOSING;
  }
  rc = al__events_subscribe(a->core.bus, cb, data, &sub);
  if (out != NULL) {
    *out = (al_sub_t *)sub;
  }
  return rc;
}

void al_agent_unsubscribe(al_agent_t *a, al_sub_t *sub) {
  if (sub != NULL) {
    al__events_unsubscribe(a->core.bus, (al__events_sub_t *)sub);
  }
}

int al_agent_run(al_agent_t *a, const char *text) {
  bool first;
  al_event_t ev;
  char *tools;
  size_t i;
  json_t *names;
  int rc;

  if (ag_closing(a)) {
    return AL_ECLOSING;
  }
  if (a->run.state != AG_IDLE) {
    return AL_EBUSY; /* ENDING too: a new run waits until interrupted */
  }
  if (text == NULL || text[0] == '\0') {
    return AL_EINVAL;
  }
  rc = al__history_append_user_text(&a->history, text);
  if (rc != 0) {
    return rc;
  }
  first = !a->run.has_run;
  a->run.has_run = true;
  if (a->core.on_commit != NULL) {
    json_t *um = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text",
                           "text", text);

    commit_notify(a, AL_COMMIT_USER, um);
    json_decref(um);
  }
  memset(&a->run.stats, 0, sizeof(a->run.stats));
  a->run.run_t0 = al_now_ns();
  a->run.run_id++;
  a->run.turn = 0;
  a->run.pauses = 0;
  al_free(a->run.pause_text);
  a->run.pause_text = NULL;
  a->hooks.stop_blocks = 0;
  a->run.cur_max_tokens = a->max_tokens;
  al__retry_state_init(&a->run.retry);
  json_object_clear(a->att.stamps);
  set_state(a, AG_STREAMING);
  names = json_array();
  {
    json_t *offered = al__agent_offered_tools(a);

    for (i = 0; i < json_array_size(offered); i++) {
      json_array_append(names, json_object_get(json_array_get(offered, i),
                                               "name"));
    }
    json_decref(offered);
  }
  tools = json_dumps(names, JSON_COMPACT);
  json_decref(names);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_RUN_STARTED;
  ev.u.run_started.model = ag_slice(a->model);
  ev.u.run_started.provider = ag_slice(a->provider->name);
  ev.u.run_started.cwd = ag_slice(a->workspace);
  ev.u.run_started.tools = ag_slice(tools);
  ev.u.run_started.sandbox = ag_slice(al_sandbox_mode_name(a->reg.sandbox_info.mode));
  if (al__agent_post(a, &ev)) {
    al_free(tools);
    return 0;
  }
  al_free(tools);
  /* The user's side, after run_started so a watcher sees it in its run
   * (the text as typed, before any prompt hook). */
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_USER_MESSAGE;
  ev.u.user_message.text = ag_slice(text);
  ev.u.user_message.tool_results = ag_slice("[]");
  if (al__agent_post(a, &ev)) {
    return 0;
  }
  /* session_start / user_prompt_submit hooks first (agent_hooks.c); they
   * call al__agent_begin_turns when done. */
  if (al__agent_prompt_hooks_start(a, text, first)) {
    return 0;
  }
  al__agent_begin_turns(a);
  return 0;
}

void al__agent_begin_turns(al_agent_t *a) {
  uint64_t wait_ms;

  if (al__agent_mcp_should_wait(a, &wait_ms)) {
    /* MCP servers still starting: wait for them, but never longer than
     * what is left of the startup wait (the first token must not wait
     * for a slow server). The backoff timer is idle before a turn. */
    a->mcp.waiting = true;
    a->mcp.wait_t0 = al_now_ns();
    uv_timer_start(&a->run.backoff, on_mcp_wait, wait_ms, 0);
    return;
  }
  if (al__agent_mcp_startup_post(a)) {
    return;
  }
  start_turn(a);
}

int al_agent_cancel(al_agent_t *a) {
  ag_exec_t *box;
  al_tool_call_t *call = NULL;
  al_event_t ev;
  json_t *open;
  json_t *item;
  ag_state_t old = a->run.state;
  size_t i;

  if (!al_agent_running(a)) {
    return AL_ESTATE;
  }
  /* The calls that have no reported result yet: they are reported as
   * cancelled below. Copied, since closing the executors frees them. */
  open = json_array();
  al_list_t *pos;
  al_list_foreach(pos, &a->att.execs) {
    box = AL_CONTAINER_OF(pos, ag_exec_t, node);
    call = NULL;
    while ((call = al__executor_results(&box->ex, call)) != NULL) {
      const char *shown;
      size_t shown_len;
      bool is_error;

      /* A result still held by its post_tool_use hooks is not given to
       * the model: the call gets the cancelled result (the hooks are
       * killed with the executor). */
      if (call->state == AL_TOOL_CALL_YIELDED &&
          al__agent_post_hook_result(box, call, &shown, &shown_len,
                                     &is_error) == 0) {
        if (old == AG_TOOLS && box == a->att.cur) {
          json_t *js = al__agent_post_content(box, call, &is_error);

          if (js != NULL) {
            al__history_add_tool_result(&a->history, call->id, js, is_error);
            json_decref(js);
          }
        }
        continue;
      }
      json_array_append_new(
          open, json_pack("{s:s, s:s, s:I}", "id", call->id, "name",
                          call->name, "started",
                          (json_int_t)call->started_ns));
    }
  }
  if (al__history_turn_open(&a->history)) {
    al__history_cancel_open(&a->history, NULL);
    commit_notify_results(a);
  }
  if (old == AG_STREAMING && a->att.partial.len > 0) {
    keep_partial(a);
  }
  run_end_common(a); /* closes the request and every executor */
  set_state(a, AG_ENDING); /* a new run waits until interrupted is out */
  if (json_array_size(open) > 0) {
    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_TOOL_EXECUTION_ABORTED;
    ev.u.tool.reason = ag_slice("user_interrupted");
    al__agent_post(a, &ev);
  }
  json_array_foreach(open, i, item) {
    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_TOOL_USE_COMPLETED;
    ev.u.tool.call_id =
        ag_slice(json_string_value(json_object_get(item, "id")));
    ev.u.tool.name = ag_slice(json_string_value(json_object_get(item, "name")));
    ev.u.tool.content = ag_slice(AL_HISTORY_CANCELLED_TEXT);
    ev.u.tool.is_error = true;
    ev.u.tool.reason = ag_slice("user_interrupted");
    {
      uint64_t t0 = (uint64_t)json_integer_value(json_object_get(item, "started"));

      ev.u.tool.duration_ms = t0 != 0 ? ms_since(t0) : 0;
    }
    al__agent_post(a, &ev);
  }
  json_decref(open);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_INTERRUPTED;
  ev.u.interrupted.reason = ag_slice("user");
  if (a->run.state == AG_ENDING) { /* not when a subscriber closed the agent */
    set_state(a, AG_IDLE);
  }
  al__agent_post(a, &ev);
  return 0;
}

/* An interrupted reply's text stays in history, followed by a user-side
 * note, so the next request shows the model what it had said and that the
 * user cut it (dropping it made the model repeat itself or contradict what
 * the user had read). The transcript gets both through on_commit. */
static void keep_partial(al_agent_t *a) {
  json_t *msg;
  json_t *note;
  size_t i;

  /* The API refuses a text block of only white space. */
  for (i = 0; i < a->att.partial.len; i++) {
    char ch = a->att.partial.data[i];

    if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') {
      break;
    }
  }
  if (i == a->att.partial.len) {
    return;
  }
  msg = json_pack("{s:s, s:[{s:s, s:s%}]}", "role", "assistant", "content",
                  "type", "text", "text", a->att.partial.data, a->att.partial.len);
  if (msg == NULL || al__history_commit_assistant(&a->history, msg) != 0) {
    json_decref(msg); /* not UTF-8 or out of memory: dropped as before */
    return;
  }
  commit_notify(a, AL_COMMIT_ASSISTANT, msg);
  json_decref(msg);
  if (al__history_append_user_text(&a->history,
                                   AL_HISTORY_INTERRUPTED_TEXT) == 0) {
    note = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text",
                     AL_HISTORY_INTERRUPTED_TEXT);
    commit_notify(a, AL_COMMIT_USER, note);
    json_decref(note);
  }
}

void al_agent_stats(const al_agent_t *a, al_agent_stats_t *out) {
  *out = a->run.stats;
  if (al_agent_running(a)) {
    out->duration_ms = ms_since(a->run.run_t0);
  }
}

int al_agent_history_json(const al_agent_t *a, char **out) {
  json_t *o;
  const json_t *m = al__history_to_json(&a->history);
  const char *sys = al__history_system(&a->history);

  o = json_pack("{s:o, s:o}", "system",
                sys != NULL ? json_string(sys) : json_null(), "messages",
                m != NULL ? json_deep_copy(m) : json_array());
  if (o == NULL) {
    return AL_ENOMEM;
  }
  *out = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return *out != NULL ? 0 : AL_ENOMEM;
}

int al_agent_load_history_json(al_agent_t *a, const char *json, size_t len) {
  json_t *o;
  json_t *msgs;
  json_t *sys;
  json_t *copy;
  int rc = AL_EINVAL;

  if (ag_closing(a)) {
    return AL_ECLOSING;
  }
  if (a->run.state != AG_IDLE || a->run.has_run) {
    return AL_EBUSY;
  }
  o = json_loadb(json, len, 0, NULL);
  msgs = json_object_get(o, "messages");
  sys = json_object_get(o, "system");
  if (!json_is_array(msgs) || (sys != NULL && !json_is_string(sys) &&
                               !json_is_null(sys))) {
    goto out;
  }
  if (json_array_size(msgs) > 0 &&
      al__history_validate_json(msgs, NULL, 0) != 0) {
    goto out;
  }
  copy = json_deep_copy(msgs);
  if (copy == NULL) {
    rc = AL_ENOMEM;
    goto out;
  }
  if (sys != NULL &&
      al__history_set_system(&a->history, json_string_value(sys)) != 0) {
    json_decref(copy);
    rc = AL_ENOMEM;
    goto out;
  }
  /* The validator accepted it, so it is a closed history: no open turn. */
  json_decref(a->history.messages);
  a->history.messages = json_array_size(copy) > 0 ? copy : NULL;
  if (a->history.messages == NULL) {
    json_decref(copy);
  }
  rc = 0;
out:
  json_decref(o);
  return rc;
}

uint64_t al__agent_call_stamp(const al_agent_t *a, const char *call_id) {
  return (uint64_t)json_integer_value(json_object_get(a->att.stamps, call_id));
}

uint64_t al__agent_tool_holds(const al_agent_t *a) { return a->core.holds; }

json_t *al__agent_messages(al_agent_t *a) { return a->history.messages; }

uint64_t al__agent_last_stamp(const al_agent_t *a) { return sse_stamp(a); }

/* ---- close ---------------------------------------------------------------------------- */

static void on_finish_close(uv_handle_t *h) {
  al_agent_t *a = AL_CONTAINER_OF((uv_idle_t *)h, al_agent_t, core.finish);
  void (*cb)(al_agent_t *) = a->core.close_cb;

  al__agent_tools_free(a);
  agent_free_fields(a);
  if (cb != NULL) {
    cb(a);
  }
  al_free(a);
}

void al__agent_maybe_finish(al_agent_t *a) {
  if (!ag_closing(a) || a->core.finishing || a->core.pending > 0 || a->core.holds > 0 ||
      a->reg.live_ctx > 0 || !al__agent_hooks_idle(a)) {
    return;
  }
  a->core.finishing = true;
  uv_close((uv_handle_t *)&a->core.finish, on_finish_close);
}

static void on_backoff_close(uv_handle_t *h) {
  al_agent_t *a = AL_CONTAINER_OF((uv_timer_t *)h, al_agent_t, run.backoff);

  a->core.pending--;
  al__agent_maybe_finish(a);
}

static void on_client_close(al_http_client_t *c) {
  al_agent_t *a = al_http_client_get_data(c);

  a->core.pending--;
  al__agent_maybe_finish(a);
}

void al_agent_close(al_agent_t *a, void (*cb)(al_agent_t *agent)) {
  if (a->run.state == AG_CLOSING) {
    return;
  }
  if (al_agent_running(a)) {
    al_agent_cancel(a);
  }
  if (a->run.state == AG_CLOSING) {
    return; /* a subscriber closed it from inside the cancel */
  }
  set_state(a, AG_CLOSING);
  a->core.close_cb = cb;
  exec_close_all(a);
  al__agent_hooks_cancel_runs(a); /* hooks begun outside a run too */
  al__agent_mcp_close(a);
  uv_close((uv_handle_t *)&a->run.backoff, on_backoff_close);
  if (a->own_client) {
    al_http_client_set_data(a->client, a);
    al_http_client_close(a->client, on_client_close);
  } else {
    a->core.pending--; /* a shared client stays open */
  }
  a->client = NULL;
}

/* ---- for agent_hooks.c ------------------------------------------------------------- */

void al__agent_end_final(al_agent_t *a, const char *text, size_t len) {
  end_final(a, text, len);
}

void al__agent_end_error(al_agent_t *a, int code, const char *message) {
  end_error(a, code, message);
}

void al__agent_continue(al_agent_t *a) { start_turn(a); }

void al__agent_tools_done(al_agent_t *a) { tools_done(a); }
