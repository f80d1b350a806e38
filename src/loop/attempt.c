/* One model request (STYLE §6.1): build it, send it, feed its body
 * through the decoding pipeline (al_pstream_t), post every pipeline event
 * as LoopEvents, hand each completed tool_use block to the reply's
 * executor at once (tools start while the reply still streams), and end
 * with ONE outcome value for the driver (ag_outcome_t: final | tools |
 * pause | max_tokens | failed) through a->att.on_outcome. Owns a->att and
 * the executors of replies (ag_exec_t). Calls down only: the provider,
 * the transport, the executor, history, budget, the hook runner's
 * post_tool_use judging, and core.c; it never changes the run's state.
 *
 * The per-delta path (on_data -> on_pevent) allocates nothing and reads
 * the run's generation once per chunk. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/agent_int.h"
#include "loop/agent_priv.h"
#include "loop/validity.h"

static char *dup_or_null(const char *s) {
  return s != NULL ? al_strdup(s) : NULL;
}

static void reply_done(al_agent_t *a);
static void attempt_failed(al_agent_t *a, const al_retry_err_t *err,
                           int status, const char *message);
/* How much of an interrupted reply's text is kept in history. */
#define AG_PARTIAL_MAX (1024u * 1024u)

/* ---- executors ----------------------------------------------------------- */

static void exec_on_close(al_executor_t *ex) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  al_agent_t *a = box->agent;

  al_free(box);
  al__agent_unref(a);
}

void al__attempt_exec_close(ag_exec_t *box) {
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
   * turn (hookpoints.c). */
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
    al__attempt_exec_close(box);
  } else if (a->att.cur == box && a->run.state == AG_TOOLS) {
    a->att.on_settled(a);
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
  al__agent_ref(a);
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
    al__attempt_exec_close(box);
    return;
  }
  box->retiring = true;
  al__agent_post_hooks_drop(box); /* the results they judge are void */
  al__executor_abort_all(&box->ex, AL_EXECUTOR_ABORT_STREAMING_FALLBACK);
}

void al__attempt_close_execs(al_agent_t *a) {
  while (!al_list_empty(&a->att.execs)) {
    al__attempt_exec_close(AL_CONTAINER_OF(a->att.execs.next, ag_exec_t, node));
  }
}

/* ---- the attempt --------------------------------------------------------- */

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

void al__attempt_clear(al_agent_t *a) {
  if (a->att.req != NULL) {
    al_http_request_cancel(a->att.req);
    a->att.req = NULL;
    a->att.usage.duration_api_ms += ag_ms_since(a->att.api_t0);
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
  attempt_failed(a, &e, 0, msg);
}

static void on_data(al_http_request_t *r, const char *p, size_t n) {
  al_agent_t *a = al_http_request_get_data(r);
  uint64_t gen = a->run.gen;
  int rc;

  /* A 2xx body is streaming: the server took the request. If it was the
   * pacer's probe after a cool-down, the queue need not wait for the
   * whole reply (a no-op otherwise). */
  al__pace_done(&a->run.pace_wait, false);
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
  a->att.usage.duration_api_ms += ag_ms_since(a->att.api_t0);
  stream_fail(a, false, AL_RETRY_CLASS_DECODE, false, "decode",
              "decode_error", al_strerror(rc));
  stream_failed(a);
}

static void on_complete(al_http_request_t *r, int status,
                        const al_http_error_t *err) {
  al_agent_t *a = al_http_request_get_data(r);
  uint64_t gen = a->run.gen;
  al_retry_err_t e;
  al_event_t ev;
  char msg[512];
  int rc;

  a->att.req = NULL;
  a->att.usage.duration_api_ms += ag_ms_since(a->att.api_t0);
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
  attempt_failed(a, &e, err->http_status, msg);
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

int al__attempt_prepare(al_agent_t *a, al_history_t *h,
                        al_provider_request_t *preq, char *why,
                        size_t why_len) {
  int rc = build_request(a, h, preq);

  if (rc == 0) {
    rc = gate(a, h, preq, why, why_len);
  }
  return rc;
}

int64_t al__attempt_project(al_agent_t *a, const al_history_t *h,
                            const al_provider_request_t *preq) {
  return al__budget_project(&a->budget, a->model, request_raw(h, preq));
}

int al__attempt_send(al_agent_t *a, const al_history_t *h,
                     al_provider_request_t *preq, uint64_t id_seed) {
  al_pstream_options_t so;
  al_http_request_options_t ro;
  al_http_header_t *hdrs = NULL;
  al_buf_t url;
  size_t i;
  int rc;

  al__budget_sent(&a->budget, request_raw(h, preq));
  al_buf_init(&url, 16 * 1024);
  if (al_buf_printf(&url, "%s%s", a->base_url, preq->path) != 0) {
    al_provider_request_free(preq);
    al_buf_free(&url);
    return AL_ENOMEM;
  }
  hdrs = al_calloc(preq->nheaders + 1, sizeof(*hdrs));
  if (hdrs == NULL) {
    al_provider_request_free(preq);
    al_buf_free(&url);
    return AL_ENOMEM;
  }
  for (i = 0; i < preq->nheaders; i++) {
    hdrs[i].name = preq->headers[i].name;
    hdrs[i].name_len = strlen(preq->headers[i].name);
    hdrs[i].value = preq->headers[i].value;
    hdrs[i].value_len = strlen(preq->headers[i].value);
  }

  al_pstream_options_runtime(&so);
  so.on_event = on_pevent;
  so.data = a;
  so.think_tags = a->model_info.think_tags;
  so.id_seed = id_seed;
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
    ro.method = preq->method;
    ro.url = url.data;
    ro.headers = hdrs;
    ro.n_headers = preq->nheaders;
    ro.body = preq->body;
    ro.body_len = preq->body_len;
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
  al_provider_request_free(preq);
  al_buf_free(&url);
  if (rc != 0) {
    a->att.req = NULL;
    return rc;
  }
  a->att.api_t0 = al_now_ns();
  return 0;
}

void al__attempt_announce(al_agent_t *a) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_STREAM_REQUEST_START;
  ev.u.stream_request.model = ag_slice(a->model);
  ev.u.stream_request.attempt = (uint32_t)a->run.retry.attempt;
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

/* The reply is void: drop its content for subscribers and abort its
 * tools. Returns true when the caller must stop. */
static bool discard_reply(al_agent_t *a, const char *reason) {
  bool delivered = a->att.delivered;
  char *msg_id = a->att.msg_id;
  al_event_t ev;
  bool stop = false;

  a->att.msg_id = NULL;
  al__attempt_clear(a);
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

/* ---- a reply that ended well --------------------------------------------- */

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
  a->att.usage.f += ev.u.usage.f;
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

/* The outcome's text, taken from buf / single (released by the driver). */
static void outcome_text(ag_outcome_t *o, al_buf_t *text, json_t *single) {
  o->text = *text;
  o->single = single;
}

static void outcome(al_agent_t *a, ag_outcome_t *o) {
  a->att.on_outcome(a, o);
}

/* The reply ended with message_stop and the body: what it is, for the
 * driver. The summary and compaction replies are text alone. */
static void reply_done(al_agent_t *a) {
  json_t *msg = al_pstream_message(&a->att.ps);
  const json_t *sr = json_object_get(msg, "stop_reason");
  al_stop_reason_t stop =
      al__provider_stop_from_anthropic(json_string_value(sr));
  bool incomplete = false;
  ag_outcome_t o;
  al_buf_t text;
  json_t *single = NULL;
  size_t i;
  int rc;

  memset(&o, 0, sizeof(o));
  o.stop = stop;
  al_buf_init(&text, SIZE_MAX / 2);
  join_text(msg, &text, &single);
  if (a->run.state == AG_COMPACTING || a->run.state == AG_SUMMARY) {
    if (post_usage(a, msg)) {
      json_decref(single);
      al_buf_free(&text);
      return;
    }
    o.kind = AG_OUT_FINAL;
    outcome_text(&o, &text, single);
    outcome(a, &o);
    return;
  }
  for (i = 0; i < a->att.nblocks; i++) {
    if (a->att.blocks[i].is_tool && !a->att.blocks[i].stopped) {
      incomplete = true;
    }
  }
  if (incomplete || (stop == AL_STOP_MAX_TOKENS && a->att.nblocks > 0 &&
                     a->att.blocks[a->att.nblocks - 1].is_tool)) {
    json_decref(single);
    al_buf_free(&text);
    if (post_usage(a, msg)) {
      return;
    }
    if (stop == AL_STOP_MAX_TOKENS) {
      if (discard_reply(a, "max_tokens")) {
        return;
      }
      o.kind = AG_OUT_MAX_TOKENS;
      outcome(a, &o);
      return;
    }
    if (discard_reply(a, "error")) {
      return;
    }
    o.kind = AG_OUT_FAILED;
    o.code = AL_EAPI;
    o.message = "the reply ended with an incomplete tool call";
    outcome(a, &o);
    return;
  }
  rc = al__history_commit_assistant(&a->history, msg);
  if (rc != 0) {
    json_decref(single);
    al_buf_free(&text);
    discard_reply(a, "invalid");
    o.kind = AG_OUT_FAILED;
    o.code = rc;
    o.message = "the model's reply cannot be recorded (invalid tool_use "
                "block or duplicate id)";
    outcome(a, &o);
    return;
  }
  al__agent_commit(a, AL_COMMIT_ASSISTANT, msg);
  /* usage comes once the reply is in the history: from here on a cancel
   * answers its tool calls. */
  if (post_usage(a, msg)) {
    json_decref(single);
    al_buf_free(&text);
    return;
  }
  al__attempt_clear(a);
  o.kind = al__history_turn_open(&a->history) ? AG_OUT_TOOLS
           : stop == AL_STOP_PAUSE_TURN         ? AG_OUT_PAUSE
                                                : AG_OUT_FINAL;
  outcome_text(&o, &text, single);
  outcome(a, &o);
}

/* The request failed, or its stream did: the reply is void; the retry
 * policy is the driver's. */
static void attempt_failed(al_agent_t *a, const al_retry_err_t *err,
                           int status, const char *message) {
  ag_outcome_t o;

  if (discard_reply(a, al__retry_class_name(err->cls))) {
    return;
  }
  memset(&o, 0, sizeof(o));
  o.kind = AG_OUT_FAILED;
  o.err = *err;
  o.status = status;
  o.message = message;
  outcome(a, &o);
}

/* An interrupted reply's text stays in history, followed by a user-side
 * note, so the next request shows the model what it had said and that the
 * user cut it (dropping it made the model repeat itself or contradict what
 * the user had read). The transcript gets both through on_commit. */
void al__attempt_keep_partial(al_agent_t *a) {
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
                  "type", "text", "text", a->att.partial.data,
                  a->att.partial.len);
  if (msg == NULL || al__history_commit_assistant(&a->history, msg) != 0) {
    json_decref(msg); /* not UTF-8 or out of memory: dropped as before */
    return;
  }
  al__agent_commit(a, AL_COMMIT_ASSISTANT, msg);
  json_decref(msg);
  if (al__history_append_user_text(&a->history,
                                   AL_HISTORY_INTERRUPTED_TEXT) == 0) {
    note = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text",
                     AL_HISTORY_INTERRUPTED_TEXT);
    al__agent_commit(a, AL_COMMIT_USER, note);
    json_decref(note);
  }
}

uint64_t al__agent_call_stamp(const al_agent_t *a, const char *call_id) {
  return (uint64_t)json_integer_value(json_object_get(a->att.stamps, call_id));
}

void al__attempt_driver(al_agent_t *a,
                        void (*on_outcome)(al_agent_t *a, ag_outcome_t *o),
                        void (*on_settled)(al_agent_t *a)) {
  a->att.on_outcome = on_outcome;
  a->att.on_settled = on_settled;
}

void al__attempt_new_run(al_agent_t *a) {
  json_object_clear(a->att.stamps);
  memset(&a->att.usage, 0, sizeof(a->att.usage));
}

void al__attempt_init(al_agent_t *a) {
  al_list_init(&a->att.execs);
  al_buf_init(&a->att.partial, AG_PARTIAL_MAX);
  a->att.stamps = json_object();
}

void al__attempt_free(al_agent_t *a) {
  json_decref(a->att.stamps);
  al_free(a->att.msg_id);
  al_buf_free(&a->att.partial);
  blocks_free(a);
}

bool al__attempt_calls_pending(const al_agent_t *a) {
  return a->att.cur != NULL && al__executor_has_pending(&a->att.cur->ex);
}

/* The current reply's results into the history, in tool_use order, with
 * their hooks' decisions applied; the turn closed (an unanswered call gets
 * an error result) and recorded; the executor closed. false while a
 * post_tool_use hook still decides. *n: the calls; *done: the first
 * successful done call's message (al_free it), or NULL. */
bool al__attempt_take_results(al_agent_t *a, uint32_t *n, char **done) {
  ag_exec_t *box = a->att.cur;
  al_tool_call_t *call = NULL;
  json_t *js;

  if (box != NULL && box->posts_pending > 0) {
    return false;
  }
  while (box != NULL && (call = al__executor_results(&box->ex, call)) != NULL) {
    bool is_error;

    js = al__agent_post_content(box, call, &is_error);
    if (js != NULL) {
      al__history_add_tool_result(&a->history, call->id, js, is_error);
      json_decref(js);
    }
    (*n)++;
    if (!call->is_error && strcmp(call->name, "done") == 0 && *done == NULL) {
      *done = al_malloc(call->content_len + 1);
      if (*done != NULL) {
        memcpy(*done, call->content, call->content_len);
        (*done)[call->content_len] = '\0';
      }
    }
  }
  if (al__history_pending(&a->history) > 0) {
    al__history_cancel_open(&a->history,
                            "Error: the tool call could not be run");
  } else {
    al__history_close_turn(&a->history);
  }
  al__agent_commit_results(a);
  if (box != NULL) {
    al__attempt_exec_close(box);
  }
  return true;
}

/* The cancel: the calls of every executor that have no reported result
 * yet, copied ([{id, name, started}]: closing the executors frees them).
 * A result already decided but not committed enters the history when
 * tools_turn (the run waited for the current reply's results). */
json_t *al__attempt_open_calls(al_agent_t *a, bool tools_turn) {
  al_tool_call_t *call;
  ag_exec_t *box;
  al_list_t *pos;
  json_t *open;

  open = json_array();
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
        if (tools_turn && box == a->att.cur) {
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
  return open;
}

uint64_t al__agent_last_stamp(const al_agent_t *a) { return sse_stamp(a); }
