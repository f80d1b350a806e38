/* The gate every tool call passes (SPEC §6, §8, §16): the input check
 * against the tool's schema, the pre_tool_use hooks (docs/hooks.md), the
 * permission policy, and approvals.
 *
 * The executor is given `gate` for every tool. gate.start runs when the
 * executor lets the call start; it checks the input, runs the matching
 * pre_tool_use hooks (the call waits for them; they may deny, ask, allow
 * or rewrite the input, and fail closed), asks the policy, and either
 * completes the call with an error result, waits for an approval, or
 * hands the call over to the real implementation by pointing call->impl
 * at it and calling its start. From then on the executor's cancel reaches
 * the real tool directly. Security code: kept apart from the registry so a
 * change to what is allowed is reviewed here alone.
 *
 * Layers (STYLE §6.1): owns a->policy; decide() reads the policy and the
 * tool, asks the hook runner (pre_tool_use) and gets a decision back.
 * Calls down: hooks/, permrule.c, the executor's call API, core.c. */
#include <assert.h>
#include <string.h>

#include "hooks/hooks.h"
#include "loop/agent_priv.h"
#include "loop/task.h"
#include "loop/permrule.h"

static const char cancelled_text[] = AL_HISTORY_CANCELLED_TEXT;

/* ---- events -------------------------------------------------------------- */

bool al__agent_post_tool(al_agent_t *a, al_event_type_t type,
                      const al_tool_call_t *call, const char *input) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = type;
  ev.u.tool.call_id = ag_slice(call->id);
  ev.u.tool.name = ag_slice(call->name);
  ev.u.tool.input = ag_slice(input);
  return al__agent_post(a, &ev);
}

char *al__tool_input_text(const json_t *input) {
  char *s = json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY);

  return s;
}

/* ---- hold accounting ---------------------------------------------------- */

static void on_release(al_tool_call_t *call, void *data) {
  al_agent_t *a = data;

  (void)call;
  al__agent_release(a);
  al__agent_maybe_finish(a);
}

static void complete_text(al_tool_call_t *call, bool is_error,
                          const char *text) {
  al__executor_call_complete(call, is_error, text, strlen(text));
}

void al__call_complete_fmt(al_tool_call_t *call, const char *fmt,
                         const char *a1, const char *a2) {
  al_buf_t b;

  al_buf_init(&b, 64 * 1024);
  if (al_buf_printf(&b, fmt, a1, a2 != NULL ? a2 : "") != 0) {
    al_buf_free(&b);
    complete_text(call, true, "Error: out of memory");
    return;
  }
  al__executor_call_complete(call, true, b.data, b.len);
  al_buf_free(&b);
}

/* ---- input check -------------------------------------------------------- */

static bool type_ok(const char *type, const json_t *v) {
  if (strcmp(type, "string") == 0) {
    return json_is_string(v);
  }
  if (strcmp(type, "integer") == 0) {
    return json_is_integer(v) ||
           (json_is_real(v) &&
            json_real_value(v) == (double)(json_int_t)json_real_value(v));
  }
  if (strcmp(type, "number") == 0) {
    return json_is_number(v);
  }
  if (strcmp(type, "boolean") == 0) {
    return json_is_boolean(v);
  }
  if (strcmp(type, "array") == 0) {
    return json_is_array(v);
  }
  if (strcmp(type, "object") == 0) {
    return json_is_object(v);
  }
  if (strcmp(type, "null") == 0) {
    return json_is_null(v);
  }
  return true; /* a type we do not check */
}

/* The checks the model most often gets wrong: not JSON, not an object, a
 * required property missing, a property of the wrong primitive type. The
 * tool itself still validates what it uses. */
static bool check_input(const ag_tool_t *t, const json_t *input,
                        al_buf_t *why) {
  const json_t *props = json_object_get(t->schema, "properties");
  const json_t *req = json_object_get(t->schema, "required");
  const char *key;
  json_t *v;
  size_t i;

  if (!json_is_object(input)) {
    al_buf_printf(why, "the input must be a JSON object");
    return false;
  }
  if (json_object_size(input) == 1 &&
      json_is_string(json_object_get(input, "_raw")) &&
      json_object_get(props, "_raw") == NULL) {
    al_buf_printf(why, "the input is not valid JSON: %.200s",
                  json_string_value(json_object_get(input, "_raw")));
    return false;
  }
  json_array_foreach(req, i, v) {
    if (json_is_string(v) &&
        json_object_get(input, json_string_value(v)) == NULL) {
      al_buf_printf(why, "missing required property '%s'",
                    json_string_value(v));
      return false;
    }
  }
  json_object_foreach((json_t *)input, key, v) {
    const json_t *ps = json_object_get(props, key);
    const json_t *ty = json_object_get(ps, "type");

    if (json_is_string(ty) && !type_ok(json_string_value(ty), v)) {
      al_buf_printf(why, "property '%s' must be of type %s", key,
                    json_string_value(ty));
      return false;
    }
  }
  return true;
}

/* ---- permissions --------------------------------------------------------- */

json_t *al__agent_offered_tools(al_agent_t *a) {
  json_t *out;
  json_t *def;
  size_t i;
  size_t k;

  if (a->policy.deny_tools == NULL || a->policy.deny_tools[0] == NULL) {
    return json_incref(a->reg.tool_defs);
  }
  /* A tool a rule denies whole (no argument pattern) is not offered: the
   * model does not plan around a tool whose every call would fail (a call
   * to it anyway is still denied). bash(rm *) leaves bash offered. */
  out = json_array();
  json_array_foreach(a->reg.tool_defs, i, def) {
    const char *name = json_string_value(json_object_get(def, "name"));
    bool whole = false;

    for (k = 0; a->policy.deny_tools[k] != NULL && !whole; k++) {
      whole = strchr(a->policy.deny_tools[k], '(') == NULL &&
              al__perm_rule_match(a->policy.deny_tools[k], name, NULL, false);
    }
    if (!whole) {
      json_array_append(out, def);
    }
  }
  return out;
}

const char *al__tool_category_name(al_tool_category_t c) {
  switch (c) {
  case AL_TOOL_READ: return "read";
  case AL_TOOL_WRITE: return "write";
  case AL_TOOL_ADMIN: return "admin";
  }
  return "admin";
}

static al_permission_t decide(al_agent_t *a, ag_tool_t *t,
                              const al_tool_call_t *call, const char **why) {
  al_permission_t p;
  char *input;

  /* Rules may carry argument patterns: bash(git status*) (permrule.h). */
  if (al__perm_rules_match(a->policy.deny_tools, t->name, call->input, false)) {
    *why = "it is on the deny list";
    return AL_PERMISSION_DENY;
  }
  if (a->reg.sandbox_refuse && !t->inproc &&
      (t->spawns || t->category != AL_TOOL_READ)) {
    /* No sandbox works here and nobody opted out of it. */
    if (a->policy.mode == AL_PERMISSION_MODE_INTERACTIVE && !t->always) {
      return AL_PERMISSION_ASK;
    }
    if (a->policy.mode != AL_PERMISSION_MODE_INTERACTIVE) {
      *why = "no sandbox works on this machine (see `agentloop doctor`); "
             "run with --sandbox=none to allow it unconfined";
      return AL_PERMISSION_DENY;
    }
  }
  if (t->always ||
      al__perm_rules_match(a->policy.allow_tools, t->name, call->input, true)) {
    return AL_PERMISSION_ALLOW;
  }
  if (a->policy.permission != NULL) {
    /* Only the hook needs the input as text. */
    input = al__tool_input_text(call->input);
    p = a->policy.permission(a, t->name, input != NULL ? input : "{}",
                             t->category, a->policy.permission_data);
    al_free(input);
    if (p == AL_PERMISSION_ASK &&
        a->policy.mode != AL_PERMISSION_MODE_INTERACTIVE) {
      *why = "it needs an approval and this run cannot ask";
      return AL_PERMISSION_DENY;
    }
    if (p == AL_PERMISSION_DENY) {
      *why = "the permission policy refused it";
      return p;
    }
    if (p == AL_PERMISSION_ALLOW || p == AL_PERMISSION_ASK) {
      return p;
    }
  }
  switch (t->category) {
  case AL_TOOL_READ:
    return AL_PERMISSION_ALLOW;
  case AL_TOOL_WRITE:
    if (a->policy.mode == AL_PERMISSION_MODE_JOB) {
      *why = "write tools must be listed in a job's allowed tools";
      return AL_PERMISSION_DENY;
    }
    return AL_PERMISSION_ALLOW;
  case AL_TOOL_ADMIN:
    if (a->policy.mode == AL_PERMISSION_MODE_INTERACTIVE) {
      return AL_PERMISSION_ASK;
    }
    *why = "admin tools must be allowed explicitly (--allow-tool)";
    return AL_PERMISSION_DENY;
  }
  *why = "unknown category";
  return AL_PERMISSION_DENY;
}

/* ---- handing a call to its tool ----------------------------------------- */

/* Points the call at the real tool and starts it. in_gate: called from
 * gate.start (a refusal is returned to the executor), else from an
 * approval (a refusal becomes an error result). */
static int start_inner(al_tool_call_t *call, ag_tool_t *t, bool in_gate) {
  al_agent_t *a = t->agent;
  char *input;
  int rc;

  call->impl = t->inner;
  if (!in_gate) {
    /* The tool starts now: the wait for the user's answer is not part of
     * its duration (tool_use_completed.duration_ms). */
    call->started_ns = al_now_ns();
  }
  rc = t->inner->start(call);
  if (rc != 0) {
    if (in_gate) {
      call->impl = &t->gate;
      al__agent_release(a); /* the executor takes no hold on a refused start */
      call->on_release = NULL;
      return rc;
    }
    al__call_complete_fmt(call, "Error: tool '%s' failed to start: %s", t->name,
                 al_strerror(rc));
    return 0;
  }
  if (!t->inproc) {
    /* The work has begun (process spawned, file job queued). */
    input = al__tool_input_text(call->input);
    if (!al__agent_post_tool(a, AL_EVENT_TOOL_USE_STARTED, call, input)) {
      al__agent_mcp_began(call);
    }
    al_free(input);
  }
  return 0;
}

static ag_approval_t *approval_find_call(al_agent_t *a,
                                         const al_tool_call_t *call) {
  al_list_t *pos;

  al_list_foreach(pos, &a->policy.approvals) {
    ag_approval_t *r = AL_CONTAINER_OF(pos, ag_approval_t, node);

    if (r->call == call) {
      return r;
    }
  }
  return NULL;
}

static ag_approval_t *approval_find(al_agent_t *a, const char *id) {
  al_list_t *pos;

  al_list_foreach(pos, &a->policy.approvals) {
    ag_approval_t *r = AL_CONTAINER_OF(pos, ag_approval_t, node);

    if (strcmp(r->id, id) == 0) {
      return r;
    }
  }
  return NULL;
}

static bool gate_safe(const al_tool_impl_t *impl, const json_t *input) {
  const ag_tool_t *t = impl->data;

  return t->inner->is_concurrency_safe != NULL &&
         t->inner->is_concurrency_safe(t->inner, input);
}

/* The policy part of the gate, after the input check and the
 * pre_tool_use hooks (hook: their combined decision). A hook's allow
 * stands in for an approval; its ask asks even where the policy would
 * allow; the deny list and the sandbox refusal still win over an allow.
 * in_gate: called from gate.start (see start_inner). */
static int gate_decide(al_tool_call_t *call, ag_tool_t *t,
                       al_hook_decision_t hook, bool in_gate) {
  al_agent_t *a = t->agent;
  ag_approval_t *rec;
  al_event_t ev;
  const char *reason = NULL;
  char *input;
  al_permission_t p;

  p = decide(a, t, call, &reason);
  if (p == AL_PERMISSION_ASK && hook == AL_HOOK_ALLOW) {
    p = AL_PERMISSION_ALLOW;
  } else if (p == AL_PERMISSION_ALLOW && hook == AL_HOOK_ASK) {
    if (a->policy.mode == AL_PERMISSION_MODE_INTERACTIVE) {
      p = AL_PERMISSION_ASK;
    } else {
      p = AL_PERMISSION_DENY;
      reason = "a hook asks for an approval and this run cannot ask";
    }
  }
  if (p == AL_PERMISSION_DENY) {
    al__call_complete_fmt(call, "Error: permission denied for tool '%s': %s",
                          t->name, reason);
    return 0;
  }
  if (p == AL_PERMISSION_ALLOW) {
    return start_inner(call, t, in_gate);
  }
  rec = al_calloc(1, sizeof(*rec));
  if (rec == NULL) {
    complete_text(call, true, "Error: out of memory");
    return 0;
  }
  input = al__tool_input_text(call->input);
  /* A child's request ids carry its path: unique across the tree. */
  snprintf(rec->id, sizeof(rec->id), "apr_%s%llu",
           al__task_approval_prefix(a),
           (unsigned long long)++a->policy.next_approval);
  rec->call = call;
  rec->tool = t;
  al_list_insert_tail(&a->policy.approvals, &rec->node);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_APPROVAL_REQUIRED;
  ev.u.approval.request = ag_slice(rec->id);
  ev.u.approval.call_id = ag_slice(call->id);
  ev.u.approval.name = ag_slice(t->name);
  ev.u.approval.input = ag_slice(input);
  ev.u.approval.category = ag_slice(al__tool_category_name(t->category));
  al__agent_post(a, &ev);
  al_free(input);
  return 0;
}

/* ---- pre_tool_use hooks -------------------------------------------------- */

/* A call held while its pre_tool_use hooks run. */
typedef struct ag_hookwait_s {
  al_list_t node;
  al_tool_call_t *call;
  ag_tool_t *tool;
  al_hooks_run_t *run;
} ag_hookwait_t;

static ag_hookwait_t *hookwait_find(al_agent_t *a, const al_tool_call_t *call) {
  al_list_t *pos;

  al_list_foreach(pos, &a->policy.hook_waits) {
    ag_hookwait_t *w = AL_CONTAINER_OF(pos, ag_hookwait_t, node);

    if (w->call == call) {
      return w;
    }
  }
  return NULL;
}

static void pre_report(const al_hook_report_t *r, void *data) {
  ag_hookwait_t *w = data;

  al__agent_hook_report(w->tool->agent, r, w->call);
}

static void pre_done(al_hooks_run_t *run, const al_hooks_result_t *res,
                     void *data) {
  ag_hookwait_t *w = data;
  al_tool_call_t *call = w->call;
  ag_tool_t *t = w->tool;
  al_buf_t why;

  (void)run;
  al_list_remove(&w->node);
  al_free(w);
  if (res->decision == AL_HOOK_DENY) {
    al_buf_init(&why, 4096);
    al_buf_printf(&why, "denied by hook '%s'%s%s",
                  res->hook != NULL ? res->hook : "?",
                  res->reason != NULL ? ": " : "",
                  res->reason != NULL ? res->reason : "");
    al__call_complete_fmt(call, "Error: permission denied for tool '%s': %s",
                          t->name, why.data != NULL ? why.data : "by a hook");
    al_buf_free(&why);
    return;
  }
  if (res->updated_input != NULL) {
    /* The rewrite must pass the same check as the model's input. */
    al_buf_init(&why, 4096);
    if (!check_input(t, res->updated_input, &why)) {
      al__call_complete_fmt(call,
                            "Error: permission denied for tool '%s': a hook "
                            "rewrote its input into something invalid (%s)",
                            t->name, why.data != NULL ? why.data : "");
      al_buf_free(&why);
      return;
    }
    al_buf_free(&why);
    json_decref(call->input);
    call->input = json_deep_copy(res->updated_input);
  }
  gate_decide(call, t, res->decision, false);
}

static int gate_start(al_tool_call_t *call) {
  ag_tool_t *t = call->impl->data;
  al_agent_t *a = t->agent;
  ag_hookwait_t *w;
  al_buf_t why;
  json_t *in;

  call->on_release = on_release;
  call->release_data = a;
  al__agent_hold(a);
  al_buf_init(&why, 4096);
  if (!check_input(t, call->input, &why)) {
    al__call_complete_fmt(call, "Error: invalid arguments for tool '%s': %s",
                          t->name,
                          why.data != NULL ? why.data : "out of memory");
    al_buf_free(&why);
    return 0;
  }
  al_buf_free(&why);
  if (!al__hooks_match(a->hooks.set, AL_HOOK_PRE_TOOL_USE, t->name,
                       (int)t->category)) {
    return gate_decide(call, t, AL_HOOK_NONE, true);
  }
  w = al_calloc(1, sizeof(*w));
  in = al__agent_hook_input(a);
  if (w == NULL || in == NULL) {
    al_free(w);
    json_decref(in);
    complete_text(call, true, "Error: out of memory");
    return 0;
  }
  json_object_set_new(
      in, "tool",
      json_pack("{s:s, s:s, s:O, s:s, s:b}", "name", t->name, "call_id",
                call->id, "input", call->input, "category",
                al__tool_category_name(t->category), "concurrency_safe",
                call->concurrency_safe));
  w->call = call;
  w->tool = t;
  al_list_insert_tail(&a->policy.hook_waits, &w->node);
  if (al__hooks_run(a->hooks.set, AL_HOOK_PRE_TOOL_USE, t->name,
                    (int)t->category, in, pre_report, pre_done, w,
                    &w->run) != 0) {
    al_list_remove(&w->node);
    al_free(w);
    json_decref(in);
    /* Fail closed: no hook, no call. */
    complete_text(call, true, "Error: the pre_tool_use hooks could not run");
    return 0;
  }
  json_decref(in);
  return 0;
}

/* Reached only while the call waits for an approval (afterwards call->impl
 * is the real tool). */
static void gate_cancel(al_tool_call_t *call) {
  ag_tool_t *t = call->impl->data;
  ag_approval_t *rec = approval_find_call(t->agent, call);
  ag_hookwait_t *w = hookwait_find(t->agent, call);

  if (w != NULL) {
    /* Its hooks are killed; nothing of them fires afterwards. */
    al_list_remove(&w->node);
    al__hooks_cancel(w->run);
    al_free(w);
    complete_text(call, true, cancelled_text);
    return;
  }
  if (rec != NULL) {
    al_list_remove(&rec->node);
    al_free(rec);
    complete_text(call, true, cancelled_text);
  }
}

void al__agent_approvals_drop(al_agent_t *a) {
  /* The executor's cancel reaches gate_cancel for each; nothing to do
   * beyond what close does. Kept for symmetry with the daemon, which may
   * drop approvals of a vanished client. */
  (void)a;
}

int al_agent_approve(al_agent_t *a, const char *request,
                     al_approval_t decision) {
  ag_approval_t *rec;
  al_tool_call_t *call;
  ag_tool_t *t;
  al_event_t ev;
  static const char *const names[] = {"allow", "deny", "always"};

  if (request == NULL || (unsigned)decision > AL_APPROVE_ALWAYS) {
    return AL_EINVAL;
  }
  rec = approval_find(a, request);
  if (rec == NULL) {
    return al__task_approve(a, request, decision); /* a child's, or none */
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_APPROVAL_RESPONSE;
  ev.u.approval.request = ag_slice(rec->id);
  ev.u.approval.call_id = ag_slice(rec->call->id);
  ev.u.approval.name = ag_slice(rec->tool->name);
  ev.u.approval.category =
      ag_slice(al__tool_category_name(rec->tool->category));
  ev.u.approval.decision = ag_slice(names[decision]);
  if (al__agent_post(a, &ev)) {
    return 0; /* the run ended meanwhile; the call was cancelled */
  }
  rec = approval_find(a, request);
  if (rec == NULL) {
    return 0;
  }
  call = rec->call;
  t = rec->tool;
  al_list_remove(&rec->node);
  al_free(rec);
  if (decision == AL_APPROVE_DENY) {
    al__call_complete_fmt(call, "Error: permission denied for tool '%s': %s",
                          t->name, "the user refused it");
    return 0;
  }
  if (decision == AL_APPROVE_ALWAYS) {
    t->always = true;
  }
  start_inner(call, t, false);
  return 0;
}

void al__gate_bind(ag_tool_t *t) {
  t->gate.name = t->name;
  t->gate.is_concurrency_safe = gate_safe;
  t->gate.start = gate_start;
  t->gate.cancel = gate_cancel;
  t->gate.data = t;
}

/* ---- the module --------------------------------------------------------- */

void al__policy_init(al_agent_t *a, const al_agent_options_t *o) {
  al_list_init(&a->policy.approvals);
  al_list_init(&a->policy.hook_waits);
  a->policy.mode = o->permission_mode;
  a->policy.permission = o->permission;
  a->policy.permission_data = o->permission_data;
}

int al__policy_copy(al_agent_t *a, const al_agent_options_t *o) {
  if (al__agent_strv_dup(o->allow_tools, &a->policy.allow_tools) != 0 ||
      al__agent_strv_dup(o->deny_tools, &a->policy.deny_tools) != 0) {
    return AL_ENOMEM;
  }
  return 0;
}

void al__policy_approvals_free(al_agent_t *a) {
  while (!al_list_empty(&a->policy.approvals)) {
    ag_approval_t *r =
        AL_CONTAINER_OF(a->policy.approvals.next, ag_approval_t, node);

    al_list_remove(&r->node);
    al_free(r);
  }
}

void al__policy_free(al_agent_t *a) {
  al__agent_strv_free(a->policy.allow_tools);
  al__agent_strv_free(a->policy.deny_tools);
}
