/* The agent's hooks (docs/hooks.md): configuration, the JSON input, the
 * hook_executed events, and the agent-level hook points: post_tool_use
 * (per call, as soon as its result arrives; the turn's results enter the
 * history in tool_use order once every call and its hooks are done) and
 * stop (before a final answer). pre_tool_use lives in the gate
 * (gate.c), where the permission decision is made.
 *
 * Every hook run is cancelled when the run ends (al_agent_cancel, close),
 * and a cancelled run calls nothing back; the agent's close waits until
 * the hook processes are gone (al__agent_hooks_idle).
 *
 * Layers (STYLE §6.1): owns a->hooks (and the post_tool_use decisions of
 * each executor, ag_exec_t.posts). It never calls a run transition: what
 * the hooks decided goes to the driver through a->hooks.on_outcome
 * (ag_hooks_outcome_t), and the driver (run.c) decides what comes next.
 * Calls down: hooks/, history, core.c. */
#include <string.h>

#include "hooks/hooks.h"
#include "loop/agent_priv.h"

/* At most this many stop-hook continuations in a row (a stop hook that
 * always says "continue" cannot loop forever). */
#define AG_STOP_HOOK_LIMIT 3

static void on_run_freed(void *data) { al__agent_maybe_finish(data); }

int al__agent_hooks_init(al_agent_t *a, const al_agent_options_t *o) {
  al_hooks_options_t ho;
  al_buf_t err;
  int rc;

  if (o->hooks_config == NULL && o->hook == NULL) {
    return 0;
  }
  memset(&ho, 0, sizeof(ho));
  ho.loop = a->loop;
  ho.workspace = a->workspace;
  ho.sandbox = a->reg.sandbox;
  ho.kill_grace_ms = o->kill_grace_ms;
  ho.callback = o->hook;
  ho.callback_data = o->hook_data;
  ho.agent = a;
  ho.on_run_freed = on_run_freed;
  ho.on_run_freed_data = a;
  al_buf_init(&err, 4096);
  rc = al__hooks_new(&ho, o->hooks_config, &a->hooks.set, &err);
  if (rc != 0) {
    al_log(AL_LOG_ERROR, "hooks configuration: %s",
           err.data != NULL ? err.data : "out of memory");
  }
  al_buf_free(&err);
  return rc;
}

void al__agent_hooks_free(al_agent_t *a) {
  al__hooks_free(a->hooks.set);
  a->hooks.set = NULL;
  al_free(a->hooks.stop_text);
  a->hooks.stop_text = NULL;
}

bool al__agent_hooks_idle(const al_agent_t *a) {
  return al__hooks_live(a->hooks.set) == 0;
}

json_t *al__agent_hook_input(al_agent_t *a) {
  return json_pack("{s:s, s:I, s:I, s:s}", "session", a->core.session.id, "run",
                   (json_int_t)a->run.run_id, "turn", (json_int_t)a->run.turn,
                   "cwd", a->workspace);
}

void al__agent_hook_report(al_agent_t *a, const al_hook_report_t *r,
                           const al_tool_call_t *call) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_HOOK_EXECUTED;
  ev.u.hook.hook = ag_slice(r->hook);
  ev.u.hook.event = ag_slice(al__hook_event_name(r->event));
  ev.u.hook.decision = ag_slice(r->rewrote && r->decision != AL_HOOK_DENY
                                    ? "rewrite"
                                    : al__hook_decision_name(r->decision));
  ev.u.hook.outcome = ag_slice(r->outcome);
  ev.u.hook.exit_status = r->exit_status;
  ev.u.hook.ms = r->ms;
  ev.u.hook.reason = ag_slice(r->reason);
  if (call != NULL) {
    ev.u.hook.call_id = ag_slice(call->id);
    ev.u.hook.name = ag_slice(call->name);
  }
  al__agent_post(a, &ev);
}

/* ---- agent-level runs ---------------------------------------------------- */

static void runs_remove(al_agent_t *a, al_hooks_run_t *r) {
  size_t i;

  for (i = 0; i < a->hooks.n_runs; i++) {
    if (a->hooks.runs[i] == r) {
      a->hooks.runs[i] = a->hooks.runs[--a->hooks.n_runs];
      return;
    }
  }
}

void al__agent_hooks_cancel_runs(al_agent_t *a) {
  while (a->hooks.n_runs > 0) {
    al__hooks_cancel(a->hooks.runs[--a->hooks.n_runs]);
  }
  al_free(a->hooks.stop_text);
  a->hooks.stop_text = NULL;
  al_free(a->hooks.prompt_why);
  a->hooks.prompt_why = NULL;
  a->hooks.prompt_pending = 0;
  a->hooks.prompt_denied = false;
}

/* ---- session_start, user_prompt_submit ----------------------------------- */

static void prompt_report(const al_hook_report_t *r, void *data) {
  al__agent_hook_report(data, r, NULL);
}

/* Outcomes go up through the driver's callback; the runner never calls
 * a run transition itself. */
static void report(al_agent_t *a, ag_hooks_outcome_kind_t kind, int code,
                   const char *text) {
  ag_hooks_outcome_t o;

  o.kind = kind;
  o.code = code;
  o.text = text;
  o.len = text != NULL ? strlen(text) : 0;
  a->hooks.on_outcome(a, &o);
}

static void prompt_done(al_hooks_run_t *run, const al_hooks_result_t *res,
                        void *data) {
  al_agent_t *a = data;
  char msg[2400];

  runs_remove(a, run);
  /* Only user_prompt_submit gates (session_start's failures default to no
   * decision; a deny from it is honoured too). */
  if (res->decision == AL_HOOK_DENY && !a->hooks.prompt_denied) {
    a->hooks.prompt_denied = true;
    snprintf(msg, sizeof(msg), "the prompt was blocked by hook '%s'%s%s",
             res->hook != NULL ? res->hook : "?",
             res->reason != NULL ? ": " : "",
             res->reason != NULL ? res->reason : "");
    al_free(a->hooks.prompt_why);
    a->hooks.prompt_why = al_strdup(msg);
  }
  if (res->context != NULL && !a->hooks.prompt_denied) {
    /* Added to the user's message as a text block of its own. */
    char *c = al_malloc(strlen(res->context) + 32);

    if (c != NULL) {
      sprintf(c, "[hook context]\n%s", res->context);
      (void)al__history_append_user_text(&a->history, c);
      al_free(c);
    }
  }
  if (--a->hooks.prompt_pending > 0) {
    return;
  }
  if (a->hooks.prompt_denied) {
    char *why = a->hooks.prompt_why;

    a->hooks.prompt_why = NULL;
    report(a, AG_HOOKS_PROMPT_BLOCKED, UV_EACCES,
           why != NULL ? why : "blocked by a hook");
    al_free(why);
    return;
  }
  report(a, AG_HOOKS_PROMPT_PASSED, 0, NULL);
}

static bool prompt_run(al_agent_t *a, al_hook_event_t ev, const char *prompt) {
  json_t *in;
  al_hooks_run_t *run;

  if (!al__hooks_match(a->hooks.set, ev, NULL, -1) ||
      a->hooks.n_runs >= AL_ARRAY_SIZE(a->hooks.runs)) {
    return false;
  }
  in = al__agent_hook_input(a);
  json_object_set_new(in, "prompt", json_string(prompt));
  if (al__hooks_run(a->hooks.set, ev, NULL, -1, in, prompt_report, prompt_done,
                    a, &run) != 0) {
    json_decref(in);
    return false;
  }
  json_decref(in);
  a->hooks.runs[a->hooks.n_runs++] = run;
  a->hooks.prompt_pending++;
  return true;
}

bool al__agent_prompt_hooks_start(al_agent_t *a, const char *prompt,
                                  bool first) {
  bool any = false;

  if (a->hooks.set == NULL) {
    return false;
  }
  a->hooks.prompt_denied = false;
  a->hooks.prompt_pending = 0;
  if (first) {
    any = prompt_run(a, AL_HOOK_SESSION_START, prompt) || any;
  }
  any = prompt_run(a, AL_HOOK_USER_PROMPT_SUBMIT, prompt) || any;
  return any;
}

/* ---- post_tool_use ------------------------------------------------------- */

/* One call's post_tool_use run: started as soon as the call's result
 * arrives (other calls may still run, the reply may still stream); its
 * decision is kept here until tools_done commits the turn's results in
 * tool_use order. */
struct ag_post_s {
  al_list_t node; /* box->posts */
  al_agent_t *a;
  ag_exec_t *box;
  al_tool_call_t *call;
  al_hooks_run_t *run; /* NULL once decided */
  char *shown;         /* the text the model gets instead, or NULL */
  bool is_error;       /* with shown */
  char *context;       /* a hook's context for a result with blocks: added
                        * as a text block, so an image stays */
};

static void post_report(const al_hook_report_t *r, void *data) {
  ag_post_t *p = data;

  al__agent_hook_report(p->a, r, p->call);
}

/* What the model sees: deny withholds the result (the reason instead, an
 * error), replace swaps it, context is appended. */
static char *post_shown(const al_tool_call_t *call,
                        const al_hooks_result_t *res, bool *is_error) {
  al_buf_t b;

  *is_error = call->is_error;
  if (res->decision != AL_HOOK_DENY && res->replace == NULL &&
      res->context == NULL) {
    return NULL;
  }
  al_buf_init(&b, (size_t)1 << 30);
  if (res->decision == AL_HOOK_DENY) {
    *is_error = true;
    al_buf_printf(&b, "Error: the result of tool '%s' was withheld by hook "
                      "'%s'%s%s",
                  call->name, res->hook != NULL ? res->hook : "?",
                  res->reason != NULL ? ": " : "",
                  res->reason != NULL ? res->reason : "");
    return b.data != NULL ? b.data : al_strdup("Error: withheld by a hook");
  }
  if (res->replace != NULL) {
    al_buf_append_str(&b, res->replace);
  } else {
    al_buf_append(&b, call->content != NULL ? call->content : "",
                  call->content_len);
  }
  if (res->context != NULL) {
    al_buf_printf(&b, "\n\n[hook context]\n%s", res->context);
  }
  return b.data;
}

static void post_done(al_hooks_run_t *run, const al_hooks_result_t *res,
                      void *data) {
  ag_post_t *p = data;
  ag_exec_t *box = p->box;
  al_agent_t *a = p->a;

  (void)run;
  p->run = NULL;
  if (p->call->blocks != NULL && res->decision != AL_HOOK_DENY &&
      res->replace == NULL && res->context != NULL) {
    p->context = al_strdup(res->context);
    p->is_error = p->call->is_error;
  } else {
    p->shown = post_shown(p->call, res, &p->is_error);
  }
  box->posts_pending--;
  /* The last hook of a turn whose calls are all done: commit. */
  if (box->posts_pending == 0 && a->att.cur == box &&
      a->run.state == AG_TOOLS && !al__executor_has_pending(&box->ex)) {
    report(a, AG_HOOKS_POSTS_DECIDED, 0, NULL);
  }
}

void al__agent_post_hook_call(al_agent_t *a, ag_exec_t *box,
                              al_tool_call_t *call) {
  const ag_tool_t *t;
  int cat;
  json_t *in;
  ag_post_t *p;

  if (a->hooks.set == NULL || box->retiring || box->closing ||
      call->abort_reason != AL_EXECUTOR_ABORT_NONE) {
    return;
  }
  t = al__agent_tool_find(a, call->name);
  cat = t != NULL ? (int)t->category : -1;
  if (!al__hooks_match(a->hooks.set, AL_HOOK_POST_TOOL_USE, call->name, cat)) {
    return;
  }
  p = al_calloc(1, sizeof(*p));
  if (p == NULL) {
    return;
  }
  p->a = a;
  p->box = box;
  p->call = call;
  in = al__agent_hook_input(a);
  json_object_set_new(
      in, "tool",
      json_pack("{s:s, s:s, s:O, s:s%, s:b}", "name", call->name, "call_id",
                call->id, "input", call->input, "result",
                call->content != NULL ? call->content : "", call->content_len,
                "is_error", call->is_error));
  if (al__hooks_run(a->hooks.set, AL_HOOK_POST_TOOL_USE, call->name, cat, in,
                    post_report, post_done, p, &p->run) != 0) {
    al_free(p);
    json_decref(in);
    return;
  }
  json_decref(in);
  al_list_insert_tail(&box->posts, &p->node);
  box->posts_pending++;
}

static ag_post_t *post_find(const ag_exec_t *box, const al_tool_call_t *call) {
  al_list_t *pos;

  al_list_foreach(pos, &box->posts) {
    ag_post_t *p = AL_CONTAINER_OF(pos, ag_post_t, node);

    if (p->call == call) {
      return p;
    }
  }
  return NULL;
}

int al__agent_post_hook_result(const ag_exec_t *box, const al_tool_call_t *call,
                               const char **text, size_t *len,
                               bool *is_error) {
  const ag_post_t *p = post_find(box, call);

  *text = call->content != NULL ? call->content : "";
  *len = call->content_len;
  *is_error = call->is_error;
  if (p == NULL) {
    return 0;
  }
  if (p->run != NULL) {
    return 1;
  }
  if (p->shown != NULL) {
    *text = p->shown;
    *len = strlen(p->shown);
    *is_error = p->is_error;
  }
  return 0;
}

json_t *al__agent_post_content(const ag_exec_t *box,
                               const al_tool_call_t *call, bool *is_error) {
  const ag_post_t *p = post_find(box, call);
  json_t *js;

  *is_error = call->is_error;
  if (p != NULL && p->shown != NULL) {
    *is_error = p->is_error;
    return al__json_string_text(p->shown, strlen(p->shown));
  }
  if (call->blocks == NULL) {
    return al__json_string_text(call->content != NULL ? call->content : "",
                                call->content_len);
  }
  if (p == NULL || p->context == NULL) {
    return json_incref(call->blocks);
  }
  /* Blocks (an MCP image) and a hook's context after them. */
  js = json_deep_copy(call->blocks);
  if (js != NULL &&
      json_array_append_new(
          js, json_pack("{s:s, s:s+}", "type", "text", "text",
                        "[hook context]\n", p->context)) != 0) {
    json_decref(js);
    js = NULL;
  }
  return js;
}

void al__agent_post_hooks_drop(ag_exec_t *box) {
  while (!al_list_empty(&box->posts)) {
    ag_post_t *p = AL_CONTAINER_OF(box->posts.next, ag_post_t, node);

    al_list_remove(&p->node);
    if (p->run != NULL) {
      /* Kills the hook's group; nothing is called back. */
      al__hooks_cancel(p->run);
    }
    al_free(p->shown);
    al_free(p->context);
    al_free(p);
  }
  box->posts_pending = 0;
}

/* ---- stop ---------------------------------------------------------------- */

static void stop_report(const al_hook_report_t *r, void *data) {
  al__agent_hook_report(data, r, NULL);
}

static void stop_done(al_hooks_run_t *run, const al_hooks_result_t *res,
                      void *data) {
  al_agent_t *a = data;
  char *text = a->hooks.stop_text;

  runs_remove(a, run);
  a->hooks.stop_text = NULL;
  if (res->decision == AL_HOOK_DENY && res->reason != NULL &&
      res->reason[0] != '\0') {
    /* "Not done yet": the reason goes to the model as the next user
     * message and the run goes on. */
    a->hooks.stop_blocks++;
    al_free(text);
    if (al__history_append_user_text(&a->history, res->reason) != 0) {
      report(a, AG_HOOKS_FAILED, AL_ENOMEM, "out of memory");
      return;
    }
    report(a, AG_HOOKS_STOP_CONTINUE, 0, NULL);
    return;
  }
  a->hooks.stop_blocks = 0;
  report(a, AG_HOOKS_STOP_FINAL, 0, text != NULL ? text : "");
  al_free(text);
}

bool al__agent_stop_hooks_start(al_agent_t *a, const char *text, size_t len) {
  json_t *in;
  al_hooks_run_t *run;

  if (a->hooks.set == NULL || a->hooks.stop_blocks >= AG_STOP_HOOK_LIMIT ||
      a->hooks.n_runs >= AL_ARRAY_SIZE(a->hooks.runs) ||
      !al__hooks_match(a->hooks.set, AL_HOOK_STOP, NULL, -1)) {
    if (a->hooks.stop_blocks >= AG_STOP_HOOK_LIMIT) {
      al_log(AL_LOG_WARN, "stop hooks continued the run %d times in a row; "
                          "this answer is final",
             AG_STOP_HOOK_LIMIT);
    }
    return false;
  }
  a->hooks.stop_text =
      al_strndup(text != NULL ? text : "", text != NULL ? len : 0);
  in = al__agent_hook_input(a);
  json_object_set_new(
      in, "final_text",
      json_stringn(a->hooks.stop_text, strlen(a->hooks.stop_text)));
  json_object_set_new(in, "stop_hook_active",
                      json_boolean(a->hooks.stop_blocks > 0));
  if (a->hooks.stop_text == NULL ||
      al__hooks_run(a->hooks.set, AL_HOOK_STOP, NULL, -1, in, stop_report,
                    stop_done, a, &run) != 0) {
    json_decref(in);
    al_free(a->hooks.stop_text);
    a->hooks.stop_text = NULL;
    return false;
  }
  json_decref(in);
  a->hooks.runs[a->hooks.n_runs++] = run;
  return true;
}

/* ---- pre_compact --------------------------------------------------------- */

static void precompact_done(al_hooks_run_t *run, const al_hooks_result_t *res,
                            void *data) {
  (void)res;
  runs_remove(data, run);
}

/* task: subagent_start / subagent_stop, observational like pre_compact:
 * fields (the child's ids, outcome and result) join the common input. */
void al__agent_subagent_hooks(al_agent_t *a, bool stop, const json_t *fields) {
  al_hook_event_t evn = stop ? AL_HOOK_SUBAGENT_STOP : AL_HOOK_SUBAGENT_START;
  json_t *in;
  al_hooks_run_t *run;

  if (a->hooks.set == NULL || a->hooks.n_runs >= AL_ARRAY_SIZE(a->hooks.runs) ||
      !al__hooks_match(a->hooks.set, evn, NULL, -1)) {
    return;
  }
  in = al__agent_hook_input(a);
  json_object_update(in, (json_t *)fields);
  if (al__hooks_run(a->hooks.set, evn, NULL, -1, in, stop_report,
                    precompact_done, a, &run) == 0) {
    a->hooks.runs[a->hooks.n_runs++] = run;
  }
  json_decref(in);
}

void al__agent_pre_compact_hooks(al_agent_t *a, const char *trigger,
                                 int64_t tokens_before) {
  json_t *in;
  al_hooks_run_t *run;

  /* Observational: the compaction does not wait for it. */
  if (a->hooks.set == NULL || a->hooks.n_runs >= AL_ARRAY_SIZE(a->hooks.runs) ||
      !al__hooks_match(a->hooks.set, AL_HOOK_PRE_COMPACT, NULL, -1)) {
    return;
  }
  in = al__agent_hook_input(a);
  json_object_set_new(in, "trigger", json_string(trigger));
  json_object_set_new(in, "tokens_before", json_integer(tokens_before));
  if (al__hooks_run(a->hooks.set, AL_HOOK_PRE_COMPACT, NULL, -1, in,
                    stop_report, precompact_done, a, &run) == 0) {
    a->hooks.runs[a->hooks.n_runs++] = run;
  }
  json_decref(in);
}

void al__agent_hooks_new_run(al_agent_t *a) { a->hooks.stop_blocks = 0; }

void al__agent_hooks_driver(al_agent_t *a,
                            void (*on_outcome)(al_agent_t *a,
                                               const ag_hooks_outcome_t *o)) {
  a->hooks.on_outcome = on_outcome;
}
