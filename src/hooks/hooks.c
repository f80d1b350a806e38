/* Hooks: see hooks.h for the contract and docs/hooks.md for the protocol.
 *
 * A run owns one slot per matching hook (its spawn run until on_done) and
 * a zero timer that delivers the in-process callback's answer and, when no
 * command hook matched, the result (the run never completes inside
 * al__hooks_run). It frees itself when every slot is done and the timer
 * has closed. */
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hooks/hooks.h"
#include "tools/spawn.h"

static const char *const event_names[AL_HOOK_EVENT_COUNT] = {
    "session_start", "user_prompt_submit", "pre_tool_use",
    "post_tool_use", "stop",               "pre_compact",
    "subagent_start", "subagent_stop"};

const char *al__hook_event_name(al_hook_event_t ev) {
  return (unsigned)ev < AL_HOOK_EVENT_COUNT ? event_names[ev] : "unknown";
}

const char *al__hook_decision_name(al_hook_decision_t d) {
  switch (d) {
  case AL_HOOK_NONE: return "none";
  case AL_HOOK_ALLOW: return "allow";
  case AL_HOOK_ASK: return "ask";
  case AL_HOOK_DENY: return "deny";
  }
  return "none";
}

struct al_hooks_s {
  al_hooks_options_t o;
  char *workspace;
  al_hook_def_t *defs;
  size_t n;
  int live;
};

typedef struct slot_s {
  al_hooks_run_t *run;
  const al_hook_def_t *def; /* NULL: the in-process callback */
  al_spawn_t *sp;
  char *input; /* the JSON line for stdin */
  uint64_t t0;
  bool done;
  bool reported;
  /* The slot's answer. */
  al_hook_decision_t decision;
  char *reason;
  json_t *updated;
  char *context;
  char *replace;
} slot_t;

struct al_hooks_run_s {
  al_hooks_t *h;
  al_hook_event_t ev;
  slot_t *slots;
  size_t n;
  size_t pending; /* slots not done */
  uv_timer_t timer;
  bool timer_fired; /* nothing is delivered before: never synchronously */
  bool timer_closed;
  bool cancelled;
  bool delivered;
  al_hooks_report_cb report;
  al_hooks_done_cb done;
  void *data;
};

/* ---- configuration ------------------------------------------------------------- */

static void def_free(al_hook_def_t *d) {
  size_t i;

  al_free(d->name);
  for (i = 0; d->argv != NULL && d->argv[i] != NULL; i++) {
    al_free(d->argv[i]);
  }
  al_free(d->argv);
  for (i = 0; d->matchers != NULL && d->matchers[i] != NULL; i++) {
    al_free(d->matchers[i]);
  }
  al_free(d->matchers);
}

void al__hooks_free(al_hooks_t *h) {
  size_t i;

  if (h == NULL) {
    return;
  }
  for (i = 0; i < h->n; i++) {
    def_free(&h->defs[i]);
  }
  al_free(h->defs);
  al_free(h->workspace);
  al_free(h);
}

int al__hooks_check(const char *json, al_buf_t *err) {
  al_hooks_options_t ho;
  al_hooks_t *h = NULL;
  int rc;

  memset(&ho, 0, sizeof(ho));
  ho.workspace = "/";
  rc = al__hooks_new(&ho, json, &h, err);
  al__hooks_free(h);
  return rc;
}

static int parse_event(const char *name, al_hook_event_t *out) {
  int i;

  for (i = 0; i < AL_HOOK_EVENT_COUNT; i++) {
    if (strcmp(event_names[i], name) == 0) {
      *out = (al_hook_event_t)i;
      return 0;
    }
  }
  return AL_EINVAL;
}

/* The points whose hooks guard something, and so fail closed by default:
 * a crashed or timed-out pre_tool_use guard does not let the call run, a
 * user_prompt_submit one does not let the prompt through, a post_tool_use
 * one (say, a secret scrubber) does not let the raw result reach the
 * model. */
static bool gating(al_hook_event_t ev) {
  return ev == AL_HOOK_PRE_TOOL_USE || ev == AL_HOOK_USER_PROMPT_SUBMIT ||
         ev == AL_HOOK_POST_TOOL_USE;
}

static int parse_def(const char *evname, size_t idx, const json_t *o,
                     al_hook_event_t ev, al_hook_def_t *d, al_buf_t *err) {
  const json_t *cmd = json_object_get(o, "command");
  const json_t *m = json_object_get(o, "matcher");
  const json_t *cat = json_object_get(o, "category");
  const json_t *to = json_object_get(o, "timeout_ms");
  const json_t *of = json_object_get(o, "on_failure");
  const json_t *sb = json_object_get(o, "sandbox");
  const json_t *nm = json_object_get(o, "name");
  static const char *const keys[] = {"command", "matcher", "category",
                                     "timeout_ms", "on_failure", "sandbox",
                                     "name", NULL};
  const char *key;
  json_t *v;
  size_t i;
  char buf[64];

  json_object_foreach((json_t *)o, key, v) {
    bool known = false;

    for (i = 0; keys[i] != NULL; i++) {
      known = known || strcmp(keys[i], key) == 0;
    }
    if (!known) {
      al_buf_printf(err, "hooks.%s[%zu]: unknown key '%s'", evname, idx, key);
      return AL_EINVAL;
    }
  }
  d->event = ev;
  d->category = -1;
  d->timeout_ms = AL_HOOKS_DEFAULT_TIMEOUT_MS;
  d->on_failure = gating(ev) ? AL_HOOK_DENY : AL_HOOK_NONE;
  d->sandbox = true;
  if (!json_is_array(cmd) || json_array_size(cmd) == 0) {
    al_buf_printf(err,
                  "hooks.%s[%zu].command: must be a list (argv, not a shell "
                  "string)",
                  evname, idx);
    return AL_EINVAL;
  }
  d->argv = al_calloc(json_array_size(cmd) + 1, sizeof(*d->argv));
  if (d->argv == NULL) {
    return AL_ENOMEM;
  }
  json_array_foreach(cmd, i, v) {
    if (!json_is_string(v) ||
        (d->argv[i] = al_strdup(json_string_value(v))) == NULL) {
      al_buf_printf(err, "hooks.%s[%zu].command[%zu]: must be a string",
                    evname, idx, i);
      return AL_EINVAL;
    }
  }
  if (nm != NULL && !json_is_string(nm)) {
    al_buf_printf(err, "hooks.%s[%zu].name: must be a string", evname, idx);
    return AL_EINVAL;
  }
  snprintf(buf, sizeof(buf), "%s#%zu", evname, idx);
  d->name = al_strdup(nm != NULL ? json_string_value(nm) : buf);
  if (m != NULL) {
    char *copy;
    char *tok;
    char *save = NULL;
    size_t n = 1;
    const char *p;

    if (!json_is_string(m)) {
      al_buf_printf(err, "hooks.%s[%zu].matcher: must be a string like "
                         "\"bash|write_*\"", evname, idx);
      return AL_EINVAL;
    }
    for (p = json_string_value(m); *p != '\0'; p++) {
      n += *p == '|';
    }
    d->matchers = al_calloc(n + 1, sizeof(*d->matchers));
    copy = al_strdup(json_string_value(m));
    if (d->matchers == NULL || copy == NULL) {
      al_free(copy);
      return AL_ENOMEM;
    }
    n = 0;
    for (tok = strtok_r(copy, "|", &save); tok != NULL;
         tok = strtok_r(NULL, "|", &save)) {
      d->matchers[n++] = al_strdup(tok);
    }
    al_free(copy);
  }
  if (cat != NULL) {
    const char *c = json_string_value(cat);

    if (c != NULL && strcmp(c, "read") == 0) {
      d->category = AL_TOOL_READ;
    } else if (c != NULL && strcmp(c, "write") == 0) {
      d->category = AL_TOOL_WRITE;
    } else if (c != NULL && strcmp(c, "admin") == 0) {
      d->category = AL_TOOL_ADMIN;
    } else {
      al_buf_printf(err, "hooks.%s[%zu].category: read, write or admin",
                    evname, idx);
      return AL_EINVAL;
    }
  }
  if (to != NULL) {
    if (!json_is_integer(to) || json_integer_value(to) <= 0) {
      al_buf_printf(err, "hooks.%s[%zu].timeout_ms: a positive integer",
                    evname, idx);
      return AL_EINVAL;
    }
    d->timeout_ms = (uint64_t)json_integer_value(to);
  }
  if (of != NULL) {
    const char *f = json_string_value(of);

    if (f != NULL && strcmp(f, "deny") == 0) {
      d->on_failure = AL_HOOK_DENY;
    } else if (f != NULL && strcmp(f, "allow") == 0) {
      d->on_failure = AL_HOOK_NONE;
    } else {
      al_buf_printf(err, "hooks.%s[%zu].on_failure: deny or allow", evname,
                    idx);
      return AL_EINVAL;
    }
  }
  if (sb != NULL) {
    if (!json_is_boolean(sb)) {
      al_buf_printf(err, "hooks.%s[%zu].sandbox: true or false", evname, idx);
      return AL_EINVAL;
    }
    d->sandbox = json_is_true(sb);
  }
  return d->name != NULL ? 0 : AL_ENOMEM;
}

int al__hooks_new(const al_hooks_options_t *o, const char *json,
                  al_hooks_t **out, al_buf_t *err) {
  al_hooks_t *h;
  json_t *root = NULL;
  const json_t *hooks;
  json_error_t jerr;
  const char *evname;
  json_t *list;
  size_t total = 0;
  int rc = 0;

  *out = NULL;
  if (json != NULL) {
    root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
      al_buf_printf(err, "%d:%d: %s", jerr.line, jerr.column,
                    root == NULL ? jerr.text : "hooks: not a JSON object");
      json_decref(root);
      return AL_EINVAL;
    }
  }
  hooks = json_object_get(root, "hooks");
  if (hooks != NULL && !json_is_object(hooks)) {
    al_buf_printf(err, "hooks: must be a map of event names");
    json_decref(root);
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)hooks, evname, list) {
    total += json_array_size(list);
  }
  h = al_calloc(1, sizeof(*h));
  if (h == NULL || (h->defs = al_calloc(total + 1, sizeof(*h->defs))) == NULL ||
      (h->workspace = al_strdup(o->workspace)) == NULL) {
    al__hooks_free(h);
    json_decref(root);
    return AL_ENOMEM;
  }
  h->o = *o;
  json_object_foreach((json_t *)hooks, evname, list) {
    al_hook_event_t ev;
    size_t i;
    json_t *d;

    if (parse_event(evname, &ev) != 0) {
      al_buf_printf(err,
                    "hooks.%s: unknown event (session_start, "
                    "user_prompt_submit, pre_tool_use, post_tool_use, stop, "
                    "pre_compact, subagent_start, subagent_stop)",
                    evname);
      rc = AL_EINVAL;
      break;
    }
    if (!json_is_array(list)) {
      al_buf_printf(err, "hooks.%s: must be a list of hooks", evname);
      rc = AL_EINVAL;
      break;
    }
    json_array_foreach(list, i, d) {
      if (!json_is_object(d)) {
        al_buf_printf(err, "hooks.%s[%zu]: must be an object", evname, i);
        rc = AL_EINVAL;
        break;
      }
      rc = parse_def(evname, i, d, ev, &h->defs[h->n], err);
      h->n++;
      if (rc != 0) {
        break;
      }
    }
    if (rc != 0) {
      break;
    }
  }
  json_decref(root);
  if (rc != 0) {
    al__hooks_free(h);
    return rc;
  }
  *out = h;
  return 0;
}

/* ---- matching -------------------------------------------------------------------- */

static bool def_matches(const al_hook_def_t *d, al_hook_event_t ev,
                        const char *tool, int category) {
  size_t i;
  bool name_ok;

  if (d->event != ev) {
    return false;
  }
  if (tool == NULL) {
    return true;
  }
  name_ok = d->matchers == NULL;
  for (i = 0; !name_ok && d->matchers[i] != NULL; i++) {
    name_ok = fnmatch(d->matchers[i], tool, 0) == 0;
  }
  return name_ok && (d->category < 0 || d->category == category);
}

bool al__hooks_match(const al_hooks_t *h, al_hook_event_t ev,
                     const char *tool, int category) {
  size_t i;

  if (h == NULL) {
    return false;
  }
  if (h->o.callback != NULL) {
    return true;
  }
  for (i = 0; i < h->n; i++) {
    if (def_matches(&h->defs[i], ev, tool, category)) {
      return true;
    }
  }
  return false;
}

int al__hooks_live(const al_hooks_t *h) { return h != NULL ? h->live : 0; }

/* ---- answers ----------------------------------------------------------------------- */

static al_hook_decision_t parse_decision(const char *s) {
  if (s == NULL) {
    return AL_HOOK_NONE;
  }
  if (strcmp(s, "deny") == 0 || strcmp(s, "block") == 0) {
    return AL_HOOK_DENY;
  }
  if (strcmp(s, "ask") == 0) {
    return AL_HOOK_ASK;
  }
  if (strcmp(s, "allow") == 0 || strcmp(s, "approve") == 0) {
    return AL_HOOK_ALLOW;
  }
  return (al_hook_decision_t)-1;
}

static char *dup_trim(const char *s, size_t n, size_t max) {
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) {
    n--;
  }
  return al_strndup(s, n < max ? n : max);
}

/* Reads a hook's JSON answer into the slot. false: not a valid answer. Our
 * keys first; Claude Code's hookSpecificOutput is understood too. */
static bool read_answer(slot_t *s, const char *out, size_t len) {
  json_t *j;
  const json_t *hso;
  const json_t *v;
  const char *dec;
  al_hook_decision_t d;
  size_t i;

  for (i = 0; i < len && (out[i] == ' ' || out[i] == '\n' || out[i] == '\r' ||
                          out[i] == '\t');
       i++) {
  }
  if (i == len) {
    s->decision = AL_HOOK_NONE; /* exit 0, nothing to say */
    return true;
  }
  j = json_loadb(out, len, 0, NULL);
  if (!json_is_object(j)) {
    json_decref(j);
    return false;
  }
  hso = json_object_get(j, "hookSpecificOutput");
  dec = json_string_value(json_object_get(j, "decision"));
  if (dec == NULL) {
    dec = json_string_value(json_object_get(hso, "permissionDecision"));
  }
  d = parse_decision(dec);
  if ((int)d < 0) {
    json_decref(j);
    return false;
  }
  s->decision = d;
  v = json_object_get(j, "reason");
  if (v == NULL) {
    v = json_object_get(hso, "permissionDecisionReason");
  }
  if (json_is_string(v)) {
    s->reason = dup_trim(json_string_value(v), json_string_length(v), 2048);
  }
  v = json_object_get(j, "updated_input");
  if (v == NULL) {
    v = json_object_get(hso, "updatedInput");
  }
  if (v != NULL) {
    if (!json_is_object(v)) {
      json_decref(j);
      return false;
    }
    s->updated = json_incref((json_t *)v);
  }
  v = json_object_get(j, "additional_context");
  if (v == NULL) {
    v = json_object_get(hso, "additionalContext");
  }
  if (json_is_string(v)) {
    s->context = dup_trim(json_string_value(v), json_string_length(v),
                          AL_HOOKS_CONTEXT_MAX);
  }
  v = json_object_get(j, "replace_result");
  if (json_is_string(v)) {
    s->replace = al_strdup(json_string_value(v));
  }
  json_decref(j);
  return true;
}

/* ---- the run ----------------------------------------------------------------------- */

static void run_free(al_hooks_run_t *r) {
  size_t i;

  for (i = 0; i < r->n; i++) {
    slot_t *s = &r->slots[i];

    al_free(s->input);
    al_free(s->reason);
    al_free(s->context);
    al_free(s->replace);
    json_decref(s->updated);
  }
  al_free(r->slots);
  r->h->live--;
  if (r->h->o.on_run_freed != NULL) {
    r->h->o.on_run_freed(r->h->o.on_run_freed_data);
  }
  al_free(r);
}

static void maybe_free(al_hooks_run_t *r) {
  if (r->pending == 0 && r->timer_closed &&
      (r->delivered || r->cancelled)) {
    run_free(r);
  }
}

/* Combines the slots and calls done (once, when all have ended). */
static void deliver(al_hooks_run_t *r) {
  al_hooks_result_t res;
  al_buf_t ctx;
  size_t i;

  if (r->delivered || r->cancelled || r->pending > 0 || !r->timer_fired) {
    return;
  }
  r->delivered = true;
  memset(&res, 0, sizeof(res));
  al_buf_init(&ctx, AL_HOOKS_CONTEXT_MAX + 1);
  for (i = 0; i < r->n; i++) {
    slot_t *s = &r->slots[i];
    const char *name = s->def != NULL ? s->def->name : "callback";

    res.ran++;
    if (s->decision > res.decision) {
      res.decision = s->decision;
      res.reason = s->reason;
      res.hook = name;
    }
    if (s->updated != NULL) {
      if (res.updated_input != NULL &&
          !json_equal((json_t *)res.updated_input, s->updated)) {
        res.decision = AL_HOOK_DENY;
        res.reason = "two hooks rewrote the input differently";
        res.hook = name;
      }
      res.updated_input = s->updated;
    }
    if (s->context != NULL) {
      /* Past the cap the rest is dropped: ETOOBIG leaves ctx as it was. */
      if (ctx.len > 0) {
        (void)al_buf_append(&ctx, "\n", 1);
      }
      (void)al_buf_append_str(&ctx, s->context);
    }
    if (s->replace != NULL && res.replace == NULL) {
      res.replace = s->replace;
    }
  }
  if (res.decision == AL_HOOK_DENY) {
    res.updated_input = NULL;
  }
  res.context = ctx.len > 0 ? ctx.data : NULL;
  r->done(r, &res, r->data);
  al_buf_free(&ctx);
  /* The caller frees the run (maybe_free) once it is done with it. */
}

static void report(al_hooks_run_t *r, slot_t *s, const char *outcome,
                   int exit_status) {
  al_hook_report_t rep;

  if (r->cancelled || r->report == NULL || s->reported) {
    return;
  }
  s->reported = true;
  memset(&rep, 0, sizeof(rep));
  rep.hook = s->def != NULL ? s->def->name : "callback";
  rep.event = r->ev;
  rep.decision = s->decision;
  rep.outcome = outcome;
  rep.exit_status = exit_status;
  rep.ms = (uv_hrtime() - s->t0) / 1000000;
  rep.reason = s->reason;
  rep.rewrote = s->updated != NULL;
  r->report(&rep, r->data);
}

/* A failed hook: its on_failure decision, with why. */
static void slot_failed(slot_t *s, const char *fmt, const char *a, int n) {
  char why[2300];

  snprintf(why, sizeof(why), fmt, a, n);
  al_free(s->reason);
  s->reason = al_strdup(why);
  json_decref(s->updated);
  s->updated = NULL;
  s->decision = s->def->on_failure;
}

static void on_hook_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  slot_t *s = sp->data;
  al_hooks_run_t *r = s->run;
  const char *outcome = "ok";
  int code = res->term_signal != 0 ? -res->term_signal : (int)res->exit_status;

  s->sp = NULL;
  s->done = true;
  r->pending--;
  if (!r->cancelled) {
    if (res->start_error != 0) {
      /* An asynchronous start that failed (its sandbox could not be
       * planned, the program is missing). */
      outcome = "crash";
      char fmt[300];

      snprintf(fmt, sizeof(fmt), "hook '%%s' could not start: %s%%.0d",
               uv_strerror(res->start_error));
      slot_failed(s, fmt, s->def->name, 0);
    } else if (res->status == AL_ETIMEDOUT) {
      outcome = "timeout";
      slot_failed(s, "hook '%s' timed out after %d ms", s->def->name,
                  (int)s->def->timeout_ms);
    } else if (res->term_signal != 0) {
      outcome = "crash";
      slot_failed(s, "hook '%s' died on signal %d", s->def->name,
                  res->term_signal);
    } else if (res->exit_status == 2) {
      outcome = "exit";
      s->decision = AL_HOOK_DENY;
      al_free(s->reason);
      s->reason = res->err_len > 0
                      ? dup_trim(res->err, res->err_len, 2048)
                      : al_strdup("denied by a hook (exit status 2)");
    } else if (res->exit_status != 0) {
      outcome = "exit";
      slot_failed(s, "hook '%s' failed with exit status %d", s->def->name,
                  (int)res->exit_status);
    } else if (res->out_total > res->out_len ||
               !read_answer(s, res->out, res->out_len)) {
      outcome = "bad_output";
      slot_failed(s, "hook '%s' printed something that is not a hook "
                     "answer (a JSON object)%.0d",
                  s->def->name, 0);
    }
    report(r, s, outcome, code);
  }
  deliver(r);
  maybe_free(r);
}

static void on_timer_close(uv_handle_t *h) {
  al_hooks_run_t *r = h->data;

  r->timer_closed = true;
  maybe_free(r);
}

static void on_timer(uv_timer_t *t) {
  al_hooks_run_t *r = t->data;

  size_t i;

  r->timer_fired = true;
  uv_close((uv_handle_t *)t, on_timer_close);
  if (r->cancelled) {
    return;
  }
  /* The slots decided at start (the callback, hooks that could not
   * start) are reported now; ended children were reported already. */
  for (i = 0; i < r->n; i++) {
    slot_t *s = &r->slots[i];

    if (s->done && s->sp == NULL && !s->reported) {
      report(r, s, s->def == NULL ? "callback" : "crash", 0);
    }
  }
  deliver(r);
}

static void run_callback(al_hooks_t *h, al_hooks_run_t *r, slot_t *s,
                         const char *input) {
  al_hook_reply_t reply;

  memset(&reply, 0, sizeof(reply));
  h->o.callback(h->o.agent, al__hook_event_name(r->ev), input, &reply,
                h->o.callback_data);
  s->decision = (unsigned)reply.decision <= AL_HOOK_DENY ? reply.decision
                                                         : AL_HOOK_DENY;
  s->reason = reply.reason;
  s->context = reply.context;
  s->replace = reply.replace;
  if (reply.updated_input != NULL) {
    s->updated = json_loads(reply.updated_input, 0, NULL);
    if (!json_is_object(s->updated)) {
      json_decref(s->updated);
      s->updated = NULL;
      s->decision = AL_HOOK_DENY;
      al_free(s->reason);
      s->reason = al_strdup("the in-process hook's updated_input is not a "
                            "JSON object");
    }
    al_free(reply.updated_input);
  }
}

int al__hooks_run(al_hooks_t *h, al_hook_event_t ev, const char *tool,
                  int category, json_t *input, al_hooks_report_cb rep,
                  al_hooks_done_cb done, void *data, al_hooks_run_t **out) {
  al_hooks_run_t *r;
  char *text;
  size_t i, n = 0;
  char envv[64];
  const char *env[2];

  *out = NULL;
  json_object_set_new(input, "event", json_string(al__hook_event_name(ev)));
  text = json_dumps(input, JSON_COMPACT);
  r = al_calloc(1, sizeof(*r));
  if (text == NULL || r == NULL ||
      (r->slots = al_calloc(h->n + 1, sizeof(*r->slots))) == NULL) {
    al_free(text);
    al_free(r);
    return AL_ENOMEM;
  }
  r->h = h;
  r->ev = ev;
  r->report = rep;
  r->done = done;
  r->data = data;
  h->live++;
  uv_timer_init(h->o.loop, &r->timer);
  r->timer.data = r;
  if (h->o.callback != NULL) {
    slot_t *s = &r->slots[n++];

    s->run = r;
    s->t0 = uv_hrtime();
    s->done = true;
    run_callback(h, r, s, text);
  }
  snprintf(envv, sizeof(envv), "AGENTLOOP_HOOK_EVENT=%s",
           al__hook_event_name(ev));
  env[0] = envv;
  env[1] = NULL;
  for (i = 0; i < h->n; i++) {
    const al_hook_def_t *d = &h->defs[i];
    slot_t *s;
    al_spawn_options_t so;
    int rc;

    if (!def_matches(d, ev, tool, category)) {
      continue;
    }
    s = &r->slots[n++];
    s->run = r;
    s->def = d;
    s->t0 = uv_hrtime();
    al__spawn_options_init(&so);
    so.argv = (const char *const *)d->argv;
    so.cwd = h->workspace;
    so.env = env;
    so.output_max = AL_HOOKS_OUTPUT_MAX;
    so.timeout_ms = d->timeout_ms;
    if (h->o.kill_grace_ms > 0) {
      so.kill_grace_ms = h->o.kill_grace_ms;
    }
    /* The JSON line goes in once the hook exists (a cold sandboxed start
     * plans bwrap's arguments on the threadpool first), then EOF. */
    s->input = al_malloc(strlen(text) + 2);
    if (s->input == NULL) {
      s->done = true;
      s->reason = al_strdup("out of memory");
      s->decision = d->on_failure;
      continue;
    }
    memcpy(s->input, text, strlen(text));
    s->input[strlen(text)] = '\n';
    s->input[strlen(text) + 1] = '\0';
    so.stdin_text = s->input;
    so.stdin_len = strlen(s->input);
    so.async_start = true;
    so.on_done = on_hook_done;
    so.data = s;
    so.sandbox = d->sandbox ? h->o.sandbox : NULL;
    rc = al__spawn_start(h->o.loop, &so, &s->sp);
    if (rc != 0) {
      char why[512];

      s->done = true;
      s->sp = NULL;
      snprintf(why, sizeof(why), "hook '%s' could not start: %s", d->name,
               uv_strerror(rc));
      s->reason = al_strdup(why);
      s->decision = d->on_failure;
      continue;
    }
    r->pending++;
  }
  r->n = n;
  al_free(text);
  /* Reports for hooks that could not start, and delivery when no child
   * runs, happen from the timer: never inside this call. */
  uv_timer_start(&r->timer, on_timer, 0, 0);
  *out = r;
  return 0;
}

void al__hooks_cancel(al_hooks_run_t *r) {
  size_t i;

  if (r->cancelled || r->delivered) {
    return;
  }
  r->cancelled = true;
  for (i = 0; i < r->n; i++) {
    if (r->slots[i].sp != NULL) {
      al__spawn_kill(r->slots[i].sp);
    }
  }
  if (!uv_is_closing((uv_handle_t *)&r->timer)) {
    uv_close((uv_handle_t *)&r->timer, on_timer_close);
  }
  maybe_free(r);
}
