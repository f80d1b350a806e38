/* The run driver (STYLE §6.1, SPEC §6): the only writer of a->run.state
 * (set_state) and the only place that decides what comes next. It owns
 * a->run (turn, run id, retry state, stats, pauses). It calls down: the
 * attempt (attempt.c, one model request), compaction (compact_run.c), the
 * hook runner (hookpoints.c), MCP (mcp_attach.c), context (context.c),
 * the kernel (core.c) and the children (task.c). They report back through
 * the outcome callbacks installed here (al__attempt_driver,
 * al__agent_hooks_driver, al__agent_mcp_driver) or the return values of
 * the calls.
 *
 * A run is a chain of attempts; an attempt ends with one outcome value:
 *
 *   run_start -> [prompt hooks] -> [MCP wait] -> start_turn -> send
 *   send -> (stream) -> outcome:
 *     final      -> [stop hooks] -> end_final (or continue: start_turn)
 *     tools      -> TOOLS -> tools_done -> start_turn | end_final (done)
 *     pause      -> send (same turn, at most 5)
 *     max_tokens -> send (max_tokens doubled) | end_error
 *     failed     -> BACKOFF -> send | compaction -> send | end_error
 *   start_turn: late MCP servers join, background children's results are
 *     added (task.c holds them until here); past max_turns -> SUMMARY ->
 *     send -> end_final (the summary)
 *   send with the context past its trigger -> compaction -> send again
 *   send held by the shared pacer (rpm cap, a 429/529 cool-down of the
 *     endpoint and key) -> PACED -> the state it was sent from -> send
 *   al_agent_cancel, from any run state -> ENDING -> interrupted -> IDLE
 *
 * States (agent_priv.h, AG_STATE_MAP), each change logged at debug level:
 *
 *                  +------------> HOOKS ---------------+
 *                  | prompt hooks,       passed,       |
 *                  | stop hooks          continue      v
 *   IDLE ------> STREAMING <--------------------------------> WAIT_MCP
 *    ^  al_agent_run  | ^ ^ ^   first turn, servers starting; settled
 *    |                | | | +--> BACKOFF    failed: retry timer, resend
 *    |                | | |      PACED      any send held by the pacer
 *    |                | | +----> COMPACTING context past its trigger,
 *    |                v |        (summary)  overflow, manual; then resend
 *    |              TOOLS -----> SUMMARY    max_turns: one summary request
 *    |
 *    +-- final or error, from any run state (HOOKS: blocked or stop final;
 *        COMPACTING -> IDLE: a manual compaction of an idle agent);
 *        al_agent_cancel: any run state -> ENDING (its last events) -> IDLE;
 *        al_agent_close: -> CLOSING (final; handles and tools wind down).
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
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/agent_int.h"
#include "loop/agent_priv.h"
#include "loop/task.h"

#define AG_MAX_TOKENS_CEILING 128000

static int send_request(al_agent_t *a);
static int send_now(al_agent_t *a);
static void start_turn(al_agent_t *a);
static void tools_done(al_agent_t *a);
static void end_error(al_agent_t *a, int code, const char *message);
static void compaction(al_agent_t *a, const char *trigger);
static void compaction_end(al_agent_t *a, const char *summary, size_t len);
static void on_outcome(al_agent_t *a, ag_outcome_t *o);
static void on_backoff(uv_timer_t *t);
static void on_mcp_wait(uv_timer_t *t);
static void begin_turns(al_agent_t *a);
static bool hooks_started(al_agent_t *a, bool started);

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
/* pause_turn continuations per turn. */
#define AG_MAX_PAUSES 5u

/* ---- ends of a run ------------------------------------------------------- */

static void run_end_common(al_agent_t *a) {
  al__attempt_clear(a);
  uv_timer_stop(&a->run.backoff);
  al__pace_cancel(&a->run.pace_wait);
  al__agent_hooks_cancel_runs(a);
  al__attempt_close_execs(a);
  /* A summary request held by the pacer still owns its history. */
  if (a->run.state == AG_SUMMARY ||
      (a->run.state == AG_PACED && a->run.pace_from == AG_SUMMARY)) {
    al__history_free(&a->run.summary_hist);
    al__history_init(&a->run.summary_hist);
  }
  al__compact_run_ended(a);
  a->run.overflow_retried = false;
  al_free(a->run.done_text);
  a->run.done_text = NULL;
  a->run.stats.duration_ms = ag_ms_since(a->run.run_t0);
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

/* At a turn boundary: what background children finished with since the
 * last one joins the history as a user message (task.c holds it until
 * then). true when the run ended. */
static bool deliver_background(al_agent_t *a) {
  char *text = al__task_take_inbox(a);
  al_event_t ev;
  bool stop;

  if (text == NULL) {
    return false;
  }
  if (al__history_append_user_text(&a->history, text) != 0) {
    al_free(text);
    return false;
  }
  if (a->core.on_commit != NULL) {
    json_t *um = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text",
                           "text", text);

    al__agent_commit(a, AL_COMMIT_USER, um);
    json_decref(um);
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_USER_MESSAGE;
  ev.u.user_message.text = ag_slice(text);
  ev.u.user_message.tool_results = ag_slice("[]");
  stop = al__agent_post(a, &ev);
  al_free(text);
  return stop;
}

/* A new request of the run (the retry budget starts again); a request
 * that cannot be sent ends the run. */
static void start_request(al_agent_t *a) {
  int rc;

  al__retry_request_start(&a->run.retry);
  rc = send_request(a);
  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

static void end_error(al_agent_t *a, int code, const char *message) {
  al_event_t ev;
  char msg[512];

  snprintf(msg, sizeof(msg), "%s", message);
  if (al__history_turn_open(&a->history)) {
    al__history_cancel_open(&a->history,
                            "Error: the run failed before this tool call "
                            "finished");
    al__agent_commit_results(a);
  }
  run_end_common(a);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_ERROR;
  ev.u.error.code = code;
  ev.u.error.message = ag_slice(msg);
  al__agent_post(a, &ev);
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

/* The start-up wait is over (all settled, or its time is up): the first
 * turn. */
static void mcp_wait_over(al_agent_t *a) {
  if (a->run.state != AG_WAIT_MCP) {
    return;
  }
  set_state(a, AG_STREAMING);
  uv_timer_stop(&a->run.backoff);
  if (al__agent_mcp_startup_post(a)) {
    return;
  }
  start_turn(a);
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

/* The longest shared cool-down a 429/529 without retry-after sets. */
#define AG_PACE_GUESS_MAX_MS 1000

/* A 429 or 529 that will be retried: every agent of this endpoint and key
 * waits before its next request, instead of each finding the limit with a
 * request of its own. The server's retry-after is a fact about the key and
 * is shared whole. Without one, this agent's delay is only its own guess
 * (exponential, jittered; a test or a user may set it to minutes): shared
 * up to 1 s, enough that the others do not pile onto the server at once,
 * while each agent's own full-jitter backoff spreads its retry. */
static void share_cool_down(al_agent_t *a, const al_retry_err_t *err,
                            const al_retry_decision_t *d) {
  if (a->run.pace == NULL || !d->retry || d->fallback ||
      (err->cls != AL_RETRY_CLASS_RATE_LIMIT &&
       err->cls != AL_RETRY_CLASS_OVERLOADED)) {
    return;
  }
  al__pace_cool(a->run.pace, err->retry_after_ms > 0
                                 ? d->delay_ms
                                 : AL_MIN(d->delay_ms, AG_PACE_GUESS_MAX_MS));
}

/* The request failed: retry it, fall back, compact, or end the run. */
static void failed(al_agent_t *a, const al_retry_err_t *err, int status,
                   const char *message) {
  al_retry_decision_t d;
  al_event_t ev;
  char *from;
  int64_t now_ms = (int64_t)(al_now_ns() / 1000000);

  if (a->run.state == AG_SUMMARY) {
    summary_failed(a);
    return;
  }
  if (a->run.state == AG_COMPACTING) {
    /* A request too long for the summarizer is not retried; transient
     * errors are, then the deterministic trim takes over. */
    al__retry_decide(&a->run.retry, &a->ropts, err, &a->run.rng, now_ms, &d);
    if (!d.retry || al__compact_is_overflow(message)) {
      compaction_end(a, NULL, 0);
      return;
    }
    share_cool_down(a, err, &d);
    if (post_retry(a, d.attempt, d.max_attempts, d.delay_ms, status,
                   al__retry_class_name(err->cls), message)) {
      return;
    }
    uv_timer_start(&a->run.backoff, on_backoff, (uint64_t)d.delay_ms, 0);
    return;
  }
  if (al__compact_is_overflow(message) && !a->run.overflow_retried) {
    /* "prompt is too long": compact once, then the same request again. */
    a->run.overflow_retried = true;
    compaction(a, "overflow");
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
    al__run_model_refresh(a);
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
  share_cool_down(a, err, &d);
  if (post_retry(a, d.attempt, d.max_attempts, d.delay_ms, status,
                 al__retry_class_name(err->cls), message)) {
    return;
  }
  set_state(a, AG_BACKOFF);
  uv_timer_start(&a->run.backoff, on_backoff, (uint64_t)d.delay_ms, 0);
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
  start_request(a);
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

/* Every tool of the committed reply has its result. */
static void tools_done(al_agent_t *a) {
  char *done = NULL;
  uint32_t n = 0;
  al_event_t ev;

  /* Each call's post_tool_use hooks started when its result came; the
   * last one to decide reports AG_HOOKS_POSTS_DECIDED (hookpoints.c). */
  if (!al__attempt_take_results(a, &n, &done)) {
    return;
  }
  if (done != NULL && a->run.done_text == NULL) {
    a->run.done_text = done;
  } else {
    al_free(done);
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
    if (send_request(a) != 0) {
      summary_failed(a);
    }
    return;
  }
  /* A turn boundary: late MCP servers join, changed tool lists apply. */
  if (al__agent_mcp_sync(a)) {
    return;
  }
  /* Background children's results join the history here. */
  if (deliver_background(a)) {
    return;
  }
  a->run.turn++;
  al__compact_turn_started(a);
  ev.type = AL_EVENT_TURN_STARTED;
  if (al__agent_post(a, &ev)) {
    return;
  }
  start_request(a);
}

/* After the compaction: the run goes on, or the agent is idle again. */
static void compact_resume(al_agent_t *a) {
  if (!a->compact.in_run) {
    al__attempt_clear(a); /* the summary request's pipeline */
    set_state(a, AG_IDLE);
    return;
  }
  set_state(a, AG_STREAMING);
  al__compact_resumed(a);
  start_request(a);
}

int al__run_start(al_agent_t *a, const char *text) {
  bool first;
  al_event_t ev;
  char *tools;
  size_t i;
  json_t *names;
  int rc;

  rc = al__history_append_user_text(&a->history, text);
  if (rc != 0) {
    return rc;
  }
  first = !a->run.has_run;
  a->run.has_run = true;
  if (a->core.on_commit != NULL) {
    json_t *um = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text",
                           "text", text);

    al__agent_commit(a, AL_COMMIT_USER, um);
    json_decref(um);
  }
  memset(&a->run.stats, 0, sizeof(a->run.stats));
  a->run.run_t0 = al_now_ns();
  a->run.run_id++;
  a->run.turn = 0;
  a->run.pauses = 0;
  al_free(a->run.pause_text);
  a->run.pause_text = NULL;
  al__agent_hooks_new_run(a);
  a->run.cur_max_tokens = a->max_tokens;
  al__retry_state_init(&a->run.retry);
  al__attempt_new_run(a);
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
  ev.u.run_started.sandbox =
      ag_slice(al_sandbox_mode_name(a->reg.sandbox_info.mode));
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
  /* session_start / user_prompt_submit hooks first (hookpoints.c); they
   * report AG_HOOKS_PROMPT_PASSED when done. */
  if (hooks_started(a, al__agent_prompt_hooks_start(a, text, first))) {
    return 0;
  }
  begin_turns(a);
  return 0;
}

/* The MCP start-up wait, then the first turn. */
static void begin_turns(al_agent_t *a) {
  uint64_t wait_ms;

  if (al__agent_mcp_should_wait(a, &wait_ms)) {
    /* MCP servers still starting: wait for them, but never longer than
     * what is left of the startup wait (the first token must not wait
     * for a slow server). The backoff timer is idle before a turn. */
    al__agent_mcp_wait_begin(a);
    set_state(a, AG_WAIT_MCP);
    uv_timer_start(&a->run.backoff, on_mcp_wait, wait_ms, 0);
    return;
  }
  if (al__agent_mcp_startup_post(a)) {
    return;
  }
  start_turn(a);
}

void al__run_cancel(al_agent_t *a) {
  al_event_t ev;
  json_t *open;
  json_t *item;
  ag_state_t old = a->run.state;
  size_t i;

  /* The calls that have no reported result yet: they are reported as
   * cancelled below. */
  open = al__attempt_open_calls(a, old == AG_TOOLS);
  if (al__history_turn_open(&a->history)) {
    al__history_cancel_open(&a->history, NULL);
    al__agent_commit_results(a);
  }
  if (old == AG_STREAMING && a->att.partial.len > 0) {
    al__attempt_keep_partial(a);
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
      uint64_t t0 =
          (uint64_t)json_integer_value(json_object_get(item, "started"));

      ev.u.tool.duration_ms = t0 != 0 ? ag_ms_since(t0) : 0;
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
}

/* ---- hooks and MCP report here ------------------------------------------- */

/* started: hooks began (prompt or stop); the run waits for them in HOOKS
 * unless a synchronous in-process hook already ended it. */
static bool hooks_started(al_agent_t *a, bool started) {
  if (started && al_agent_running(a)) {
    set_state(a, AG_HOOKS);
  }
  return started;
}

static void on_hooks(al_agent_t *a, const ag_hooks_outcome_t *o) {
  switch (o->kind) {
  case AG_HOOKS_PROMPT_PASSED:
    set_state(a, AG_STREAMING);
    begin_turns(a);
    return;
  case AG_HOOKS_PROMPT_BLOCKED:
  case AG_HOOKS_FAILED:
    end_error(a, o->code, o->text);
    return;
  case AG_HOOKS_POSTS_DECIDED:
    tools_done(a);
    return;
  case AG_HOOKS_STOP_CONTINUE:
    set_state(a, AG_STREAMING);
    start_turn(a);
    return;
  case AG_HOOKS_STOP_FINAL:
    end_final(a, o->text, o->len);
    return;
  }
}

static void on_mcp_settled(al_agent_t *a) { mcp_wait_over(a); }

/* ---- the attempt's outcome ----------------------------------------------- */

static void on_backoff(uv_timer_t *t) {
  al_agent_t *a = AL_CONTAINER_OF(t, al_agent_t, run.backoff);
  int rc = send_request(a);

  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

static void on_mcp_wait(uv_timer_t *t) {
  mcp_wait_over(AL_CONTAINER_OF(t, al_agent_t, run.backoff));
}

/* The pacer let a waiting request go (its slot is taken): back to the
 * state it was sent from, and send. */
static void on_paced(al_pace_wait_t *w) {
  al_agent_t *a = AL_CONTAINER_OF(w, al_agent_t, run.pace_wait);
  int rc;

  set_state(a, a->run.pace_from);
  rc = send_now(a);
  if (rc != 0) {
    end_error(a, rc, "could not send the request to the model");
  }
}

/* Every request of a run passes the shared pacer (transport/pace.h) of
 * its endpoint and key first: when the rpm cap or a cool-down holds it,
 * the run waits in PACED (cancel and close unlink the wait) and on_paced
 * sends it. The pacer hangs off the client, so agents sharing a client
 * share it; an agent with its own client paces alone. */
static int send_request(al_agent_t *a) {
  int rc;

  if (a->run.pace == NULL) {
    rc = al__pace_get(a->client, a->base_url, a->api_key, &a->run.pace);
    if (rc != 0) {
      return rc;
    }
    al__pace_set_rpm(a->run.pace, a->run.pace_rpm, a->run.pace_burst);
  }
  if (al__pace_acquire(a->run.pace, &a->run.pace_wait, on_paced) == 1) {
    a->run.pace_from = a->run.state;
    set_state(a, AG_PACED);
    return 0;
  }
  return send_now(a);
}

/* One request of the run: the history the state says (summary,
 * compaction or the main one), micro-compaction and trimming first, then
 * the compaction check on the built request. 0 when sent or when the run
 * went elsewhere (compaction, its end); an error when nothing was sent. */
static int send_now(al_agent_t *a) {
  al_provider_request_t preq;
  al_history_t *h = a->run.state == AG_SUMMARY      ? &a->run.summary_hist
                    : a->run.state == AG_COMPACTING ? &a->compact.hist
                                                    : &a->history;
  const char *trigger = NULL;
  char why[1200];
  int rc;

  if (a->core.admit != NULL && !a->core.admit(a, a->core.admit_data)) {
    return AL_EFENCED; /* the embedder's gate: nothing goes out */
  }
  al__attempt_clear(a);
  if (h == &a->history && (al__agent_micro(a) || al__compact_trim(a))) {
    return 0; /* a subscriber ended the run or closed the agent */
  }
  rc = al__attempt_prepare(a, h, &preq, why, sizeof(why));
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
    rc = al__compact_check(a, al__attempt_project(a, h, &preq), &trigger,
                           why, sizeof(why));
    if (rc != AG_COMPACT_NONE) {
      al_provider_request_free(&preq);
      if (rc == AG_COMPACT_START) {
        compaction(a, trigger);
      } else {
        end_error(a, AL_ECONTEXT, why);
      }
      return 0; /* compacting, or the run ended */
    }
  }
  rc = al__attempt_send(a, h, &preq, al__retry_rng_next(&a->run.rng));
  if (rc != 0) {
    return rc;
  }
  a->run.stats.requests++;
  if (a->run.state != AG_SUMMARY && a->run.state != AG_COMPACTING) {
    set_state(a, AG_STREAMING);
  }
  al__attempt_announce(a);
  return 0;
}

/* The reply hit max_tokens inside a tool call (discarded): again with
 * max_tokens doubled, at most max_continuations times. */
static void max_tokens_again(al_agent_t *a) {
  if (!al__retry_continuation_take(&a->run.retry, &a->ropts)) {
    end_error(a, AL_EAPI,
              "the reply hit max_tokens inside a tool call (after 3 "
              "continuations)");
    return;
  }
  if (post_retry(a, a->run.retry.continuations, a->ropts.max_continuations, 0,
                 0, "max_tokens",
                 "the reply hit max_tokens inside a tool call")) {
    return;
  }
  a->run.cur_max_tokens =
      AL_MIN(a->run.cur_max_tokens * 2, AG_MAX_TOKENS_CEILING);
  if (a->run.cur_max_tokens < a->max_tokens) {
    a->run.cur_max_tokens = a->max_tokens;
  }
  start_request(a);
}

static void on_outcome(al_agent_t *a, ag_outcome_t *o) {
  al_event_t ev;

  /* The request's answer, for the pacer's probe after a cool-down. */
  al__pace_done(&a->run.pace_wait,
                o->kind == AG_OUT_FAILED && o->code == 0 &&
                    (o->err.cls == AL_RETRY_CLASS_RATE_LIMIT ||
                     o->err.cls == AL_RETRY_CLASS_OVERLOADED));
  if (o->kind == AG_OUT_FAILED) {
    if (o->code != 0) {
      end_error(a, o->code, o->message);
    } else {
      failed(a, &o->err, o->status, o->message);
    }
    return;
  }
  if (a->run.state == AG_COMPACTING) {
    if (o->single != NULL) {
      compaction_end(a, json_string_value(o->single),
                     json_string_length(o->single));
    } else {
      compaction_end(a, o->text.data, o->text.len);
    }
    json_decref(o->single);
    al_buf_free(&o->text);
    return;
  }
  a->run.overflow_retried = false;
  if (a->run.state == AG_SUMMARY) {
    if (o->text.len == 0 && json_string_length(o->single) == 0) {
      json_decref(o->single);
      al_buf_free(&o->text);
      summary_failed(a);
      return;
    }
    end_final_text(a, &o->text, o->single);
    return;
  }
  if (o->kind == AG_OUT_MAX_TOKENS) {
    max_tokens_again(a);
    return;
  }
  a->run.stats.turns++;
  al__retry_on_success(&a->run.retry);
  al__retry_continuation_reset(&a->run.retry);
  a->run.cur_max_tokens = a->max_tokens;
  if (o->kind == AG_OUT_PAUSE && a->run.pauses < AG_MAX_PAUSES) {
    continue_paused(a, &o->text, o->single);
    return;
  }
  if (a->run.pause_text != NULL) {
    prepend_pause_text(a, &o->text, &o->single);
  }
  if (o->kind == AG_OUT_TOOLS) {
    json_decref(o->single);
    al_buf_free(&o->text);
    set_state(a, AG_TOOLS);
    if (!al__attempt_calls_pending(a)) {
      tools_done(a);
    }
    return;
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TURN_COMPLETED;
  ev.u.turn_completed.stop_reason = ag_slice(al_stop_reason_name(o->stop));
  if (al__agent_post(a, &ev)) {
    json_decref(o->single);
    al_buf_free(&o->text);
    return;
  }
  /* Stop hooks may send the model back to work (hookpoints.c). */
  if (hooks_started(
          a, al__agent_stop_hooks_start(
                 a, o->single != NULL ? json_string_value(o->single)
                                      : o->text.data,
                 o->single != NULL ? json_string_length(o->single)
                                   : o->text.len))) {
    json_decref(o->single);
    al_buf_free(&o->text);
    return;
  }
  end_final_text(a, &o->text, o->single);
}

/* The current reply's executor went idle while its results are awaited. */
static void on_settled(al_agent_t *a) { tools_done(a); }

/* ---- compaction as a sub-run --------------------------------------------- */

static void compaction(al_agent_t *a, const char *trigger) {
  int rc;

  switch (al__compact_begin(a, trigger)) {
  case AG_COMPACT_STOPPED:
    return;
  case AG_COMPACT_FINISH:
    compaction_end(a, "", 0); /* nothing older than the kept part */
    return;
  case AG_COMPACT_FAILED:
    compaction_end(a, NULL, 0);
    return;
  default:
    break;
  }
  set_state(a, AG_COMPACTING);
  al__retry_request_start(&a->run.retry);
  rc = send_request(a);
  if (rc != 0 && a->run.state == AG_COMPACTING) {
    compaction_end(a, NULL, 0);
  }
}

static void compaction_end(al_agent_t *a, const char *summary, size_t len) {
  al_event_t ev;
  char msg[300];

  switch (al__compact_end(a, summary, len, msg, sizeof(msg))) {
  case AG_COMPACT_STOPPED:
    return;
  case AG_COMPACT_GIVE_UP:
    end_error(a, AL_ECOMPACT, msg);
    return;
  case AG_COMPACT_TOO_BIG:
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
  default:
    compact_resume(a);
  }
}

void al__run_compact(al_agent_t *a, const char *trigger) {
  compaction(a, trigger);
}

/* ---- the module ---------------------------------------------------------- */

void al__run_init(al_agent_t *a, const al_agent_options_t *o, uint64_t seed) {
  al__history_init(&a->run.summary_hist);
  a->run.cur_max_tokens = a->max_tokens;
  al__retry_rng_seed(&a->run.rng, seed);
  al__retry_state_init(&a->run.retry);
  al__pace_wait_init(&a->run.pace_wait);
  a->run.pace_rpm = o->pace_rpm;
  a->run.pace_burst = o->pace_burst;
  a->run.run_id = o->first_run > 0 ? o->first_run - 1 : 0;
  al__attempt_driver(a, on_outcome, on_settled);
  al__agent_hooks_driver(a, on_hooks);
  al__agent_mcp_driver(a, on_mcp_settled);
}

void al__run_free(al_agent_t *a) {
  al__history_free(&a->run.summary_hist);
  al_free(a->run.done_text);
  al_free(a->run.pause_text);
}

void al__run_model_refresh(al_agent_t *a) {
  al_models_lookup(a->models, a->model, a->provider->name, &a->model_info);
  if (a->window_override > 0) {
    a->model_info.context_window = a->window_override;
  }
  a->budget.window = a->model_info.context_window;
}

void al__run_close(al_agent_t *a) {
  al__pace_cancel(&a->run.pace_wait); /* nothing fires once closing */
  set_state(a, AG_CLOSING);
}

void al__run_handles_init(al_agent_t *a) {
  uv_timer_init(a->loop, &a->run.backoff);
  al__agent_ref(a); /* its close */
}

static void on_backoff_close(uv_handle_t *h) {
  al_agent_t *a = AL_CONTAINER_OF((uv_timer_t *)h, al_agent_t, run.backoff);

  al__agent_unref(a);
}

void al__run_close_handles(al_agent_t *a) {
  uv_close((uv_handle_t *)&a->run.backoff, on_backoff_close);
}
