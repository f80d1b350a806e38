/* Sub-agents (docs/subagents.md): the `task` tool and its children.
 *
 * A child is an al_agent_t on its parent's loop. It borrows what the
 * parent owns and outlives it never: the HTTP client (connections), the
 * models catalogue, the sandbox and its warm pool, the parent's tool
 * implementations beyond the built-ins (MCP, tools.d, in-process: the
 * child's registry points at the parent's entries, so calls reach the same
 * server processes). Its own are the history, the executor, its built-in
 * tools (filtered to what the parent has and its definition allows), its
 * hooks (the parent's configuration) and its bus, whose every event is
 * re-posted to the parent's subscribers with a path.
 *
 * Lifecycle (STYLE §3.3): a task record lives until its parent is freed
 * (listed by al_agent_tasks_json); its child is closed as soon as its run
 * ends, and the parent's close waits for every child's close callback
 * (a->pending), so a borrowed service is never freed under a child. A
 * foreground child ends with its tool call: the call's cancel cancels the
 * child, whose `interrupted` ends the task, so every level's tool_use gets
 * its result and nothing of the child fires after. */
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "loop/agent_priv.h"
#include "loop/task.h"

#define TASK_RESULT_MAX ((size_t)64 * 1024)
#define TASK_DESC_BUDGET 2048 /* the listing (docs/subagents.md) */
#define TASK_DEFAULT_DEPTH 2
#define TASK_DEFAULT_BUDGET 400000
/* A child is bounded by its turns and tokens, not by the in-process tool
 * timeout (120 s by default). */
#define TASK_TIMEOUT_MS (24ULL * 3600 * 1000)
#define TASK_DEPTH_TEXT "Agent depth limit reached. Solve the task yourself."

typedef enum { TS_RUNNING = 0, TS_COMPLETED, TS_FAILED, TS_CANCELLED } ts_t;

static const char *const state_names[] = {"running", "completed", "failed",
                                          "cancelled"};

typedef struct {
  char *name;
  char *description;
  char *system;
  char *model;
  char **tools;      /* NULL: all of the parent's */
  char **disallowed; /* may be NULL */
  int mode;          /* -1: the parent's */
  uint32_t max_turns;
  char *source;
  bool read_only;    /* built-in explore: concurrency-safe by definition */
} sdef_t;

typedef struct ag_tasks_s ag_tasks_t;

typedef struct ag_task_s {
  al_list_t node;
  al_agent_t *parent;
  al_agent_t *child;  /* NULL once its close was asked */
  char id[16];
  char *agent;
  char *description;
  char *call_id;
  char *session;
  bool background;
  uint32_t depth;
  ts_t state;
  bool ended;
  bool close_pending; /* its close was asked: the parent's pending holds */
  bool max_turns_hit;
  bool budget_hit;
  al_tool_ctx_t *ctx; /* a foreground call, until it is completed */
  uint64_t tokens;    /* input + output so far, descendants included */
  al_agent_stats_t final_stats;
} ag_task_t;

struct ag_tasks_s {
  /* Definitions: the top agent's own copy; a child borrows its parent's
   * (the parent outlives it). */
  sdef_t *defs;
  size_t n_defs;
  bool own_defs;
  uint32_t max_depth;
  int64_t budget;
  char *preamble;
  char *hooks_config;
  al_hook_cb hook;
  void *hook_data;
  bool parallel_writers;
  al_child_cb on_child;
  void *child_data;
  /* A child's place: its depth, its path from the top ("t1/t3") and the
   * approval id prefix ("t1.t3."). */
  uint32_t depth;
  char *path;
  char *approval_prefix;
  struct ag_task_s *self; /* a child's record in its parent */
  al_list_t list; /* ag_task_t, in start order */
  uint32_t next_id;
  /* Background results waiting for a turn boundary or an idle parent. */
  al_buf_t inbox;
  al_sub_t *self_sub; /* on the agent's own bus, once a background starts */
  /* The children's usage during run stats_run (finished children). */
  uint64_t stats_run;
  uint64_t run_in;
  uint64_t run_out;
  double run_cost;
};

/* The parent whose child al_agent_new is creating (set around the call;
 * the loop is single-threaded, agents on other threads have their own). */
typedef struct {
  al_agent_t *parent;
  ag_task_t *task;
} spawn_t;

static _Thread_local spawn_t *spawning;

/* ---- definitions ---------------------------------------------------------- */

static const char *const explore_tools[] = {
    "read_file", "list_directory", "grep", "glob", "read_tool_output", "done",
    NULL};

static const char explore_system[] =
    "You are an exploration sub-agent. Another agent gave you one question "
    "about this workspace. Use the read-only tools to find the answer, then "
    "reply with it concisely: the facts, file paths and line numbers it "
    "rests on. You cannot change anything. Your final message is all the "
    "other agent sees.";

static const char general_system[] =
    "You are a sub-agent. Another agent gave you one task. Do it with the "
    "tools you have, then reply with the result; your final message is all "
    "the other agent sees, so make it complete and concise.";

/* The built-ins: the one source (the config layer's loader reads files
 * only; `agentloop agents` lists these through al_subagent_builtins). */
static const al_subagent_def_t builtins[2] = {
    {"explore", "Read-only search of the workspace: finds files and code "
                "and answers questions about them (runs in parallel).",
     explore_system, NULL, explore_tools, NULL, -1, 0, "builtin"},
    {"general", "A general agent with this agent's tools, for a "
                "self-contained task.",
     general_system, NULL, NULL, NULL, -1, 0, "builtin"}};

const al_subagent_def_t *al_subagent_builtins(size_t *n) {
  *n = AL_ARRAY_SIZE(builtins);
  return builtins;
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

  *out = NULL;
  if (src == NULL) {
    return 0;
  }
  while (src[n] != NULL) {
    n++;
  }
  *out = al_calloc(n + 1, sizeof(char *));
  if (*out == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    if (((*out)[i] = al_strdup(src[i])) == NULL) {
      return AL_ENOMEM;
    }
  }
  return 0;
}

static char *dup_or_null(const char *s) {
  return s != NULL ? al_strdup(s) : NULL;
}

static void sdef_free(sdef_t *d) {
  al_free(d->name);
  al_free(d->description);
  al_free(d->system);
  al_free(d->model);
  free_list(d->tools);
  free_list(d->disallowed);
  al_free(d->source);
}

static bool def_name_ok(const char *s) {
  size_t i;

  if (s == NULL || s[0] == '\0' || strlen(s) > 64) {
    return false;
  }
  for (i = 0; s[i] != '\0'; i++) {
    char c = s[i];

    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-')) {
      return false;
    }
  }
  return true;
}

static int sdef_copy(sdef_t *d, const al_subagent_def_t *s) {
  memset(d, 0, sizeof(*d));
  d->mode = s->permission_mode;
  d->max_turns = s->max_turns;
  d->name = al_strdup(s->name);
  d->description = al_strdup(s->description != NULL ? s->description : "");
  d->system = dup_or_null(s->system);
  d->model = dup_or_null(s->model);
  d->source = al_strdup(s->source != NULL ? s->source : "in-process");
  if (d->name == NULL || d->description == NULL || d->source == NULL ||
      (s->system != NULL && d->system == NULL) ||
      (s->model != NULL && d->model == NULL) ||
      dup_list(s->tools, &d->tools) != 0 ||
      dup_list(s->disallowed_tools, &d->disallowed) != 0) {
    return AL_ENOMEM;
  }
  return 0;
}

static const sdef_t *def_find(const ag_tasks_t *ts, const char *name) {
  size_t i;

  for (i = 0; i < ts->n_defs; i++) {
    if (strcmp(ts->defs[i].name, name) == 0) {
      return &ts->defs[i];
    }
  }
  /* Claude Code's names for the built-ins ("Explore", "general-purpose"):
   * definitions are lower-case, so only a miss is retried. */
  if (strcasecmp(name, "general-purpose") == 0) {
    return def_find(ts, "general");
  }
  for (i = 0; i < ts->n_defs; i++) {
    if (strcasecmp(ts->defs[i].name, name) == 0) {
      return &ts->defs[i];
    }
  }
  return NULL;
}

static bool in_list(char *const *l, const char *name) {
  size_t i;

  for (i = 0; l != NULL && l[i] != NULL; i++) {
    if (strcmp(l[i], name) == 0) {
      return true;
    }
  }
  return false;
}

/* The definition lets its agent have `name` (the parent must have it too). */
static bool def_allows(const sdef_t *d, const char *name) {
  return (d->tools == NULL || in_list(d->tools, name)) &&
         !in_list(d->disallowed, name);
}

static int defs_init(ag_tasks_t *ts, const al_agent_options_t *o) {
  size_t i;
  size_t n = o->n_subagents;
  const al_subagent_def_t *builtin = builtins;

  if (n > 0 && o->subagents == NULL) {
    return AL_EINVAL;
  }
  ts->defs = al_calloc(n + 2, sizeof(sdef_t));
  if (ts->defs == NULL) {
    return AL_ENOMEM;
  }
  ts->own_defs = true;
  for (i = 0; i < n; i++) {
    const al_subagent_def_t *s = &o->subagents[i];

    if (!def_name_ok(s->name) || def_find(ts, s->name) != NULL ||
        (s->permission_mode != -1 &&
         (unsigned)s->permission_mode > AL_PERMISSION_MODE_JOB)) {
      return AL_EINVAL;
    }
    if (sdef_copy(&ts->defs[ts->n_defs++], s) != 0) {
      return AL_ENOMEM;
    }
  }
  for (i = 0; i < 2; i++) {
    if (def_find(ts, builtin[i].name) != NULL) {
      continue; /* replaced by a definition of that name */
    }
    if (sdef_copy(&ts->defs[ts->n_defs], &builtin[i]) != 0) {
      ts->n_defs++;
      return AL_ENOMEM;
    }
    ts->defs[ts->n_defs++].read_only = i == 0;
  }
  return 0;
}

/* ---- the record ------------------------------------------------------------- */

static ag_tasks_t *tasks_get(al_agent_t *a) {
  if (a->tasks == NULL) {
    a->tasks = al_calloc(1, sizeof(*a->tasks));
    if (a->tasks != NULL) {
      al_list_init(&a->tasks->list);
      al_buf_init(&a->tasks->inbox, (size_t)16 << 20);
      a->tasks->run_cost = 0;
    }
  }
  return a->tasks;
}

const al_agent_t *al__task_spawning_parent(const al_agent_t *a) {
  (void)a; /* the agent al_agent_new is making now, on this thread */
  return spawning != NULL ? spawning->parent : NULL;
}

const char *al__task_approval_prefix(const al_agent_t *a) {
  return a->tasks != NULL && a->tasks->approval_prefix != NULL
             ? a->tasks->approval_prefix
             : "";
}

void al__task_free(al_agent_t *a) {
  ag_tasks_t *ts = a->tasks;
  size_t i;

  if (ts == NULL) {
    return;
  }
  if (ts->self != NULL && ts->self->close_pending) {
    /* A closed child's last step: its parent may finish now (on a later
     * iteration, so nothing of the parent is freed under this call). */
    al_agent_t *p = ts->self->parent;

    ts->self->close_pending = false;
    al__agent_unref(p);
  }
  while (!al_list_empty(&ts->list)) {
    ag_task_t *t = AL_CONTAINER_OF(ts->list.next, ag_task_t, node);

    al_list_remove(&t->node);
    al_free(t->agent);
    al_free(t->description);
    al_free(t->call_id);
    al_free(t->session);
    al_free(t);
  }
  if (ts->own_defs) {
    for (i = 0; i < ts->n_defs; i++) {
      sdef_free(&ts->defs[i]);
    }
    al_free(ts->defs);
    al_free(ts->preamble);
    al_free(ts->hooks_config);
  }
  al_free(ts->path);
  al_free(ts->approval_prefix);
  al_buf_free(&ts->inbox);
  al_free(ts);
  a->tasks = NULL;
}

/* ---- events ----------------------------------------------------------------- */

static void post_subagent(ag_task_t *t, al_event_type_t type,
                          const char *outcome, const char *result,
                          size_t len) {
  al_event_t ev;
  json_t *hooks_json;

  memset(&ev, 0, sizeof(ev));
  ev.type = type;
  ev.u.subagent.task_id = ag_slice(t->id);
  ev.u.subagent.call_id = ag_slice(t->call_id);
  ev.u.subagent.child_session = ag_slice(t->session);
  ev.u.subagent.agent = ag_slice(t->agent);
  ev.u.subagent.description = ag_slice(t->description);
  ev.u.subagent.background = t->background;
  ev.u.subagent.depth = t->depth;
  if (type == AL_EVENT_SUBAGENT_COMPLETED) {
    ev.u.subagent.outcome = ag_slice(outcome);
    ev.u.subagent.result.ptr = result != NULL ? result : "";
    ev.u.subagent.result.len = result != NULL ? len : 0;
    ev.u.subagent.input_tokens = t->final_stats.input_tokens;
    ev.u.subagent.output_tokens = t->final_stats.output_tokens;
    ev.u.subagent.cost_usd = t->final_stats.cost_usd;
  }
  if (al__agent_post(t->parent, &ev)) {
    return;
  }
  hooks_json = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:i}", "task_id",
                         t->id, "agent", t->agent, "description",
                         t->description, "child_session", t->session,
                         "parent_call", t->call_id, "background",
                         t->background, "depth", (int)t->depth);
  if (hooks_json != NULL && type == AL_EVENT_SUBAGENT_COMPLETED) {
    json_object_set_new(hooks_json, "outcome", json_string(outcome));
    json_object_set_new(hooks_json, "result",
                        json_stringn(result != NULL ? result : "",
                                     result != NULL ? len : 0));
  }
  if (hooks_json != NULL) {
    al__agent_subagent_hooks(t->parent, type == AL_EVENT_SUBAGENT_COMPLETED,
                             hooks_json);
  }
  json_decref(hooks_json);
}

/* A child's event to the parent's subscribers: path prefixed with the
 * task id, the child's session/run/turn kept, seq from the parent's
 * stream so it stays one gap-free sequence. */
static void repost(ag_task_t *t, const al_event_t *ev) {
  al_agent_t *p = t->parent;
  char path[256];
  al_event_t copy = *ev;

  if (ag_closing(p)) {
    return;
  }
  if (ev->path != NULL) {
    snprintf(path, sizeof(path), "%s/%s", t->id, ev->path);
  } else {
    snprintf(path, sizeof(path), "%s", t->id);
  }
  copy.path = path;
  copy.ts_ns = 0;
  al__events_publish(p->core.bus, &p->core.session, &copy);
}

/* ---- ending a task ------------------------------------------------------------ */

static void child_close(ag_task_t *t) {
  al_agent_t *c = t->child;

  if (c == NULL) {
    return;
  }
  t->child = NULL;
  al__events_bus_set_tap(c->core.bus, NULL, NULL);
  al__agent_ref(t->parent);
  t->close_pending = true;
  al_agent_close(c, NULL); /* al__task_free of the child lets go */
}

static void stats_add(ag_tasks_t *ts, uint64_t run, const al_agent_stats_t *s) {
  if (ts->stats_run != run) {
    ts->stats_run = run;
    ts->run_in = ts->run_out = 0;
    ts->run_cost = 0;
  }
  ts->run_in += s->input_tokens;
  ts->run_out += s->output_tokens;
  if (s->cost_usd < 0 || ts->run_cost < 0) {
    ts->run_cost = -1;
  } else {
    ts->run_cost += s->cost_usd;
  }
}

static void self_sub_event(const al_event_t *ev, void *data);

/* Hands a background child's result to its parent: now, as a new run, when
 * the parent is idle; else at its next turn boundary (or run end). A
 * cancelled one only waits for a turn boundary. */
static void deliver(ag_task_t *t, const char *outcome, const char *text,
                    size_t len) {
  al_agent_t *p = t->parent;
  ag_tasks_t *ts = p->tasks;
  char head[512];

  if (ag_closing(p)) {
    return;
  }
  snprintf(head, sizeof(head),
           "%s[Background task %s (%s: %s) %s. Its result:]\n",
           ts->inbox.len > 0 ? "\n\n" : "", t->id, t->agent, t->description,
           outcome);
  if (al_buf_append(&ts->inbox, head, strlen(head)) != 0 ||
      al_buf_append(&ts->inbox, text, len) != 0) {
    al_log(AL_LOG_ERROR, "task %s: its result does not fit the inbox",
           t->id);
    return;
  }
  if (strcmp(outcome, "cancelled") == 0) {
    return; /* someone stopped it: told at a later turn, starts nothing */
  }
  if (p->run.state == AG_IDLE) {
    char *msg = al_strdup(ts->inbox.data);

    al_buf_reset(&ts->inbox);
    if (msg != NULL && al_agent_run(p, msg) != 0) {
      /* Kept for the next run's first turn boundary. */
      al_buf_append(&ts->inbox, msg, strlen(msg));
    }
    al_free(msg);
    return;
  }
  if (ts->self_sub == NULL) {
    al_agent_subscribe(p, self_sub_event, p, &ts->self_sub);
  }
}

/* The parent's own run ended with results still queued (no turn boundary
 * came): they start the next run. */
static void self_sub_event(const al_event_t *ev, void *data) {
  al_agent_t *a = data;
  ag_tasks_t *ts = a->tasks;
  char *msg;

  if (ev->path != NULL || ts->inbox.len == 0 ||
      (ev->type != AL_EVENT_FINAL && ev->type != AL_EVENT_ERROR) ||
      a->run.state != AG_IDLE) {
    return;
  }
  msg = al_strdup(ts->inbox.data);
  al_buf_reset(&ts->inbox);
  if (msg != NULL && al_agent_run(a, msg) != 0) {
    al_buf_append(&ts->inbox, msg, strlen(msg));
  }
  al_free(msg);
}

/* The child's run ended: the result goes to the call (foreground) or the
 * inbox (background), and the child is closed. */
static void task_end(ag_task_t *t, const char *outcome, bool is_error,
                     const char *text, size_t len) {
  al_agent_t *p = t->parent;
  al_tool_ctx_t *ctx = t->ctx;
  size_t n = len;

  if (t->ended) {
    return;
  }
  t->ended = true;
  t->state = strcmp(outcome, "cancelled") == 0 ? TS_CANCELLED
             : is_error                         ? TS_FAILED
                                                : TS_COMPLETED;
  if (t->child != NULL) {
    al_agent_stats(t->child, &t->final_stats);
  }
  stats_add(p->tasks, p->run.run_id, &t->final_stats);
  if (n > TASK_RESULT_MAX) {
    n = TASK_RESULT_MAX;
    while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) {
      n--; /* not inside a UTF-8 sequence */
    }
  }
  post_subagent(t, AL_EVENT_SUBAGENT_COMPLETED, outcome, text, n);
  t->ctx = NULL;
  if (ctx != NULL) {
    al_tool_ctx_complete(ctx, is_error, text, n);
  } else if (t->background) {
    deliver(t, outcome, text, n);
  }
  child_close(t);
}

static void on_child_event(const al_event_t *ev, void *data) {
  ag_task_t *t = data;
  ag_tasks_t *ts = t->parent->tasks;
  char msg[512];

  if (t->ended) {
    return;
  }
  repost(t, ev);
  if (ev->type == AL_EVENT_USAGE) {
    t->tokens += ev->u.usage.input_tokens + ev->u.usage.output_tokens;
    if (!t->budget_hit && ts->budget > 0 &&
        t->tokens > (uint64_t)ts->budget && t->child != NULL) {
      t->budget_hit = true;
      al_agent_cancel(t->child); /* its interrupted ends the task */
    }
    return;
  }
  if (ev->path != NULL) {
    return; /* a grandchild's: its own task reports its end */
  }
  switch (ev->type) {
  case AL_EVENT_MAX_TURNS_REACHED:
    t->max_turns_hit = true;
    break;
  case AL_EVENT_FINAL:
    task_end(t, t->max_turns_hit ? "max_turns" : "completed", false,
             ev->u.final.text.ptr, ev->u.final.text.len);
    break;
  case AL_EVENT_ERROR:
    snprintf(msg, sizeof(msg), "Error: the sub-agent failed: %.*s",
             (int)(ev->u.error.message.len > 400 ? 400
                                                 : ev->u.error.message.len),
             ev->u.error.message.ptr != NULL ? ev->u.error.message.ptr : "");
    task_end(t, "failed", true, msg, strlen(msg));
    break;
  case AL_EVENT_INTERRUPTED:
    if (t->budget_hit) {
      snprintf(msg, sizeof(msg),
               "Error: the sub-agent used more than its token budget (%" PRId64
               " tokens) and was stopped.",
               ts->budget);
      task_end(t, "budget", true, msg, strlen(msg));
    } else {
      task_end(t, "cancelled", true, AL_HISTORY_CANCELLED_TEXT,
               strlen(AL_HISTORY_CANCELLED_TEXT));
    }
    break;
  default:
    break;
  }
}

/* Cancels a running child; its `interrupted` ends the task. */
static void task_cancel(ag_task_t *t) {
  if (t->ended) {
    return;
  }
  if (t->child == NULL || al_agent_cancel(t->child) != 0) {
    task_end(t, "cancelled", true, AL_HISTORY_CANCELLED_TEXT,
             strlen(AL_HISTORY_CANCELLED_TEXT));
  }
}

/* ---- starting a child -------------------------------------------------------- */

static al_permission_t child_permission(al_agent_t *child, const char *tool,
                                        const char *input,
                                        al_tool_category_t category,
                                        void *data) {
  al_agent_t *p = data; /* the parent outlives its child */

  (void)child;
  return p->policy.permission(p, tool, input, category,
                              p->policy.permission_data);
}

/* Child tools = the parent's ∩ the definition's list − its disallowed: the
 * child's own built-ins are dropped unless the parent has them too, and
 * the parent's other tools (MCP, tools.d, in-process) are lent. */
static int child_tools(al_agent_t *p, al_agent_t *c, const sdef_t *d) {
  al_list_t *pos;

  al_list_foreach(pos, &c->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);

    if (!t->removed &&
        (al__agent_tool_find(p, t->name) == NULL || !def_allows(d, t->name))) {
      al__agent_tool_retire(c, t);
    }
  }
  al_list_foreach(pos, &p->reg.tools) {
    ag_tool_t *pt = AL_CONTAINER_OF(pos, ag_tool_t, node);
    int rc;

    if (pt->removed || pt->inner == NULL || !def_allows(d, pt->name) ||
        al__agent_tool_find(c, pt->name) != NULL ||
        strcmp(pt->source != NULL ? pt->source : "", "builtin") == 0) {
      continue;
    }
    if ((rc = al__agent_lend_tool(c, pt)) != 0) {
      return rc;
    }
  }
  return 0;
}

/* The parent's history for a fork: committed messages, without the
 * tool_use blocks of a reply whose results are not in yet (this very call
 * among them), which the copy could never answer. */
static char *fork_history(al_agent_t *p) {
  char *text = NULL;
  json_t *h;
  json_t *msgs;
  json_t *last;
  size_t n;

  if (al_agent_history_json(p, &text) != 0) {
    return NULL;
  }
  h = json_loads(text, 0, NULL);
  al_free(text);
  msgs = json_object_get(h, "messages");
  n = json_array_size(msgs);
  last = n > 0 ? json_array_get(msgs, n - 1) : NULL;
  if (last != NULL &&
      strcmp(json_string_value(json_object_get(last, "role")) != NULL
                 ? json_string_value(json_object_get(last, "role"))
                 : "",
             "assistant") == 0) {
    json_t *content = json_object_get(last, "content");
    size_t i = 0;

    while (json_is_array(content) && i < json_array_size(content)) {
      const char *ty = json_string_value(
          json_object_get(json_array_get(content, i), "type"));

      if (ty != NULL && strcmp(ty, "tool_use") == 0) {
        json_array_remove(content, i);
      } else {
        i++;
      }
    }
    if (!json_is_array(content) || json_array_size(content) == 0) {
      json_array_remove(msgs, n - 1);
    }
  }
  text = h != NULL ? json_dumps(h, JSON_COMPACT) : NULL;
  json_decref(h);
  return text;
}

static int spawn(al_agent_t *p, ag_task_t *t, const sdef_t *d, bool fork,
                 const char *prompt, al_commit_cb commit, void *commit_data) {
  ag_tasks_t *ts = p->tasks;
  al_agent_options_t o;
  spawn_t sp;
  al_agent_t *c = NULL;
  al_buf_t sys;
  char *hist = NULL;
  int rc;

  /* Every option is decided here: taken from the parent (below), or not a
   * child's to have: ca_file, connect_timeout_ms (the client is lent),
   * rng_seed (clock), sandbox_* (the sandbox is lent), tools_d,
   * trust_project, tools_dirs, mcp_* (the parent's tools are lent),
   * first_seq, first_run (a new session), subagents, task_*, on_child
   * (the tree's, task.c), builtin_tools (always, then filtered),
   * tools_only / tools_never (the parent's filtered tools are retired, so
   * child_tools neither lends them nor keeps the child's own); pace_*
 * are the parent's (the pacer is the client's). Test
   * task_child_options_tripwire fails when an option is added. */
  al_agent_options_init(&o);
  o.provider = p->provider->name;
  o.base_url = p->base_url;
  o.api_key = p->api_key;
  o.model = fork ? p->model : d->model != NULL ? d->model : p->model_main;
  o.fallback_model = p->fallback_model;
  o.max_tokens = p->max_tokens;
  o.max_turns = d->max_turns > 0 ? d->max_turns : p->max_turns;
  o.max_tool_concurrency = p->concurrency;
  o.retry_max_attempts = p->ropts.max_attempts;
  o.retry_base_ms = p->ropts.base_ms;
  o.retry_cap_ms = p->ropts.cap_ms;
  o.idle_timeout_ms = p->idle_timeout_ms;
  o.progress_timeout_ms = p->progress_timeout_ms;
  o.limits = p->limits;
  o.client = (al_client_t *)p->client;
  /* The same client and key: the child waits in its parent's pacer. */
  o.pace_rpm = p->run.pace_rpm;
  o.pace_burst = p->run.pace_burst;
  o.workspace = p->workspace;
  o.builtin_tools = true;
  o.allowed_paths = (const char *const *)p->allowed_paths;
  o.denied_paths = (const char *const *)p->denied_paths;
  o.tool_timeout_ms = p->tool_timeout_ms;
  o.kill_grace_ms = p->kill_grace_ms;
  o.bash_network = p->bash_network;
  /* Never looser: the stricter of the parent's and the definition's. */
  o.permission_mode = p->policy.mode;
  if (d->mode > (int)p->policy.mode) {
    o.permission_mode = (al_permission_mode_t)d->mode;
  }
  o.allow_tools = (const char *const *)p->policy.allow_tools;
  o.deny_tools = (const char *const *)p->policy.deny_tools;
  if (p->policy.permission != NULL) {
    o.permission = child_permission;
    o.permission_data = p;
  }
  o.session_id = t->session;
  o.data = p->data; /* the embedder's, for its callbacks given the child */
  o.sandbox = AL_SANDBOX_OFF; /* the parent's is borrowed */
  o.on_commit = commit;
  o.commit_data = commit_data;
  o.models = p->models;
  o.context_window = p->window_override;
  o.tool_output_dir = p->ctx.tool_output_dir;
  o.no_auto_compact = !p->compact.auto_compact;
  o.keep_recent = p->compact.keep_recent;
  o.max_messages = p->compact.max_messages;
  o.micro_min_tokens = p->ctx.micro_min_tokens;
  o.compactable_tools = (const char *const *)p->ctx.compactable;
  o.no_prompt_cache = !p->prompt_cache;
  o.hooks_config = ts->hooks_config;
  o.hook = ts->hook;
  o.hook_data = ts->hook_data;
  o.admit = p->core.admit;
  o.admit_data = p->core.admit_data;
  al_buf_init(&sys, (size_t)1 << 20);
  if (!fork) {
    if (d->system != NULL) {
      al_buf_append(&sys, d->system, strlen(d->system));
    }
    if (ts->preamble != NULL) {
      if (sys.len > 0) {
        al_buf_append(&sys, "\n\n", 2);
      }
      al_buf_append(&sys, ts->preamble, strlen(ts->preamble));
    }
    o.system = sys.len > 0 ? sys.data : NULL;
  }
  sp.parent = p;
  sp.task = t;
  spawning = &sp;
  rc = al_agent_new(p->loop, &o, &c);
  spawning = NULL;
  al_buf_free(&sys);
  if (rc != 0) {
    return rc;
  }
  t->child = c;
  if ((rc = child_tools(p, c, d)) != 0) {
    goto fail;
  }
  if (fork) {
    if ((hist = fork_history(p)) == NULL) {
      rc = AL_ENOMEM;
      goto fail;
    }
    rc = al_agent_load_history_json(c, hist, strlen(hist));
    al_free(hist);
    if (rc != 0) {
      goto fail;
    }
  }
  /* Forwarded as published (a tap, not a subscriber): a cancel from
   * inside a walk still reports the child's end before the parent's. */
  al__events_bus_set_tap(c->core.bus, on_child_event, t);
  return 0;
fail:
  child_close(t);
  return rc;
}

static void fail_call(al_tool_ctx_t *ctx, const char *fmt, const char *arg) {
  char msg[1024];

  snprintf(msg, sizeof(msg), fmt, arg != NULL ? arg : "");
  al_tool_ctx_complete(ctx, true, msg, strlen(msg));
}

/* The input's agent and background flag. Claude Code's Agent tool names
 * them subagent_type and run_in_background; a model used to that tool
 * gets what it asked for, not the default agent. */
static const char *input_agent(const json_t *in) {
  const char *name = json_string_value(json_object_get(in, "agent"));

  return name != NULL ? name
                      : json_string_value(json_object_get(in, "subagent_type"));
}

static bool input_background(const json_t *in) {
  return json_is_true(json_object_get(in, "background")) ||
         json_is_true(json_object_get(in, "run_in_background"));
}

static void task_tool_run(al_tool_ctx_t *ctx, void *data) {
  al_agent_t *p = data;
  ag_tasks_t *ts = p->tasks;
  const char *input = al_tool_ctx_input(ctx);
  json_t *in = json_loads(input, 0, NULL);
  const char *desc = json_string_value(json_object_get(in, "description"));
  const char *prompt = json_string_value(json_object_get(in, "prompt"));
  const char *name = input_agent(in);
  bool background = input_background(in);
  bool fork = json_is_true(json_object_get(in, "fork"));
  const sdef_t *d;
  ag_task_t *t;
  al_child_info_t info;
  al_commit_cb commit = NULL;
  void *commit_data = NULL;
  char session[AL__EVENTS_SESSION_MAX + 1];
  int rc;

  if (ts->depth >= ts->max_depth) {
    fail_call(ctx, "%s", TASK_DEPTH_TEXT);
    goto out;
  }
  if (desc == NULL || prompt == NULL || prompt[0] == '\0') {
    fail_call(ctx, "Error: task needs a description and a prompt%s", NULL);
    goto out;
  }
  if (fork && name != NULL) {
    fail_call(ctx,
              "Error: a fork continues this agent's own conversation with its "
              "model; it cannot run agent '%s' (leave agent out, or fork: "
              "false)",
              name);
    goto out;
  }
  d = def_find(ts, name != NULL ? name : "general");
  if (d == NULL) {
    fail_call(ctx, "Error: no agent named '%s' (see the task tool's list)",
              name);
    goto out;
  }
  t = al_calloc(1, sizeof(*t));
  if (t == NULL) {
    fail_call(ctx, "Error: out of memory%s", NULL);
    goto out;
  }
  t->parent = p;
  t->background = background;
  t->depth = ts->depth + 1;
  snprintf(t->id, sizeof(t->id), "t%" PRIu32, ++ts->next_id);
  /* Bounded: a deep chain keeps the end of its parent id. */
  snprintf(session, sizeof(session), "%.100s.%s",
           p->core.session.id + (strlen(p->core.session.id) > 100
                                ? strlen(p->core.session.id) - 100
                                : 0),
           t->id);
  t->agent = al_strdup(d->name);
  t->description = al_strdup(desc);
  t->call_id = al_strdup(al_tool_ctx_id(ctx));
  t->session = al_strdup(session);
  al_list_insert_tail(&ts->list, &t->node);
  if (t->agent == NULL || t->description == NULL || t->call_id == NULL ||
      t->session == NULL) {
    t->ended = true;
    t->state = TS_FAILED;
    fail_call(ctx, "Error: out of memory%s", NULL);
    goto out;
  }
  if (ts->on_child != NULL) {
    info.task_id = t->id;
    info.session_id = t->session;
    info.parent_session = p->core.session.id;
    info.parent_call = t->call_id;
    info.agent = t->agent;
    info.background = background;
    info.depth = t->depth;
    ts->on_child(p, &info, &commit, &commit_data, ts->child_data);
  }
  if ((rc = spawn(p, t, d, fork, prompt, commit, commit_data)) != 0) {
    t->ended = true;
    t->state = TS_FAILED;
    fail_call(ctx, "Error: the sub-agent could not start: %s",
              al_strerror(rc));
    goto out;
  }
  if (background) {
    char res[128];

    snprintf(res, sizeof(res), "{\"task_id\":\"%s\",\"status\":\"started\"}",
             t->id);
    al_tool_ctx_complete(ctx, false, res, strlen(res));
  } else {
    t->ctx = ctx;
    al_tool_ctx_set_data(ctx, t);
  }
  post_subagent(t, AL_EVENT_SUBAGENT_STARTED, NULL, NULL, 0);
  if (t->child == NULL || t->ended) {
    goto out; /* a subscriber cancelled or closed meanwhile */
  }
  if ((rc = al_agent_run(t->child, prompt)) != 0) {
    char msg[160];

    snprintf(msg, sizeof(msg), "Error: the sub-agent could not start: %s",
             al_strerror(rc));
    task_end(t, "failed", true, msg, strlen(msg));
  }
out:
  json_decref(in);
}

static void task_tool_cancel(al_tool_ctx_t *ctx, void *data) {
  ag_task_t *t = al_tool_ctx_get_data(ctx);

  (void)data;
  if (t == NULL) {
    return;
  }
  task_cancel(t); /* completes ctx through task_end */
}

/* Concurrency (executor): a read-only agent's child runs beside other safe
 * calls; one that may write runs alone unless task_parallel_writers. */
static bool task_safe(const al_tool_impl_t *impl, const json_t *input) {
  ag_tool_t *tt = AL_CONTAINER_OF(impl, ag_tool_t, inproc_impl);
  al_agent_t *p = tt->agent;
  ag_tasks_t *ts = p->tasks;
  const char *name = input_agent(input);
  const sdef_t *d;
  size_t i;

  if (ts->parallel_writers || input_background(input)) {
    return true;
  }
  if (json_is_true(json_object_get(input, "fork"))) {
    return false;
  }
  d = def_find(ts, name != NULL ? name : "general");
  if (d == NULL) {
    return true; /* an error result at once */
  }
  if (d->tools == NULL) {
    return false;
  }
  for (i = 0; d->tools[i] != NULL; i++) {
    ag_tool_t *t;

    /* done only ends the child's own run; a tool the child will not
     * have does not count. */
    if (strcmp(d->tools[i], "done") == 0 || !def_allows(d, d->tools[i]) ||
        (t = al__agent_tool_find(p, d->tools[i])) == NULL) {
      continue;
    }
    if (t->category != AL_TOOL_READ || t->inner == NULL ||
        t->inner->is_concurrency_safe == NULL) {
      return false;
    }
  }
  return true;
}

/* explore, general, then the others in the order given. */
static const sdef_t *listed(const ag_tasks_t *ts, size_t k) {
  static const char *const first[] = {"explore", "general"};
  size_t i, n = 0;

  for (i = 0; i < 2; i++) {
    const sdef_t *d = def_find(ts, first[i]);

    if (d != NULL && n++ == k) {
      return d;
    }
  }
  for (i = 0; i < ts->n_defs; i++) {
    const char *nm = ts->defs[i].name;

    if (strcmp(nm, "explore") != 0 && strcmp(nm, "general") != 0 &&
        n++ == k) {
      return &ts->defs[i];
    }
  }
  return NULL;
}

static char *tool_description(const ag_tasks_t *ts) {
  al_buf_t b;
  size_t i, start;
  char *out;

  al_buf_init(&b, (size_t)1 << 20);
  al_buf_append_str(
      &b,
      "Start a sub-agent for a self-contained task: it works in its own "
      "context with the tools its agent allows, and its final answer is "
      "this tool's result. Give a short description and a complete prompt "
      "(it does not see this conversation unless fork is true). Several "
      "read-only tasks in one reply run in parallel. background: true "
      "returns a task id at once; the result arrives later as a message. "
      "fork: true starts from a copy of this conversation. Agents:");
  start = b.len;
  for (i = 0; listed(ts, i) != NULL; i++) {
    const sdef_t *d = listed(ts, i);
    size_t mark = b.len;

    al_buf_printf(&b, "\n- %s: %s", d->name, d->description);
    if (b.len - start > TASK_DESC_BUDGET) {
      size_t more = 0;
      size_t head = strlen(d->name) + 5; /* "\n- " NAME ": " */
      size_t room = start + TASK_DESC_BUDGET - mark;

      /* Its description cut to what is left (at a character, with an
       * ellipsis, 48 bytes at least); else this and the rest are named
       * only. */
      if (room >= head + 48 + 3) {
        size_t n = room - head - 3;

        while (n > 0 && ((unsigned char)d->description[n] & 0xC0) == 0x80) {
          n--;
        }
        b.len = mark;
        al_buf_printf(&b, "\n- %s: %.*s\u2026", d->name, (int)n,
                      d->description);
        i++;
        mark = b.len;
        if (listed(ts, i) == NULL) {
          break;
        }
      }
      b.len = mark;
      while (listed(ts, i + more) != NULL) {
        more++;
      }
      al_buf_printf(&b, "\n\u2026 and %zu more:", more);
      for (more = 0;
           listed(ts, i) != NULL && b.len - start < 2 * TASK_DESC_BUDGET;
           i++, more++) {
        al_buf_printf(&b, "%s %s", more > 0 ? "," : "", listed(ts, i)->name);
      }
      break;
    }
  }
  out = b.data != NULL ? al_strdup(b.data) : NULL;
  al_buf_free(&b);
  return out;
}

static const char task_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"description\":{\"type\":\"string\",\"description\":\"3-5 words: what "
    "the sub-agent does\"},"
    "\"prompt\":{\"type\":\"string\",\"description\":\"the whole task\"},"
    "\"agent\":{\"type\":\"string\",\"description\":\"the agent to run "
    "(default general)\"},"
    "\"background\":{\"type\":\"boolean\"},"
    "\"fork\":{\"type\":\"boolean\"}},"
    "\"required\":[\"description\",\"prompt\"]}";

int al__task_init(al_agent_t *a, const al_agent_options_t *o) {
  ag_tasks_t *ts = tasks_get(a);
  al_tool_def_t def;
  ag_tool_t *t;
  char *desc;
  int rc;

  if (ts == NULL) {
    return AL_ENOMEM;
  }
  if (spawning != NULL) {
    ag_tasks_t *pt = spawning->parent->tasks;
    ag_task_t *me = spawning->task;
    size_t n;

    ts->defs = pt->defs;
    ts->n_defs = pt->n_defs;
    ts->max_depth = pt->max_depth;
    ts->budget = pt->budget;
    ts->preamble = pt->preamble;
    ts->hooks_config = pt->hooks_config;
    ts->hook = pt->hook;
    ts->hook_data = pt->hook_data;
    ts->parallel_writers = pt->parallel_writers;
    ts->on_child = pt->on_child;
    ts->child_data = pt->child_data;
    ts->depth = pt->depth + 1;
    ts->self = me;
    n = (pt->path != NULL ? strlen(pt->path) + 1 : 0) + strlen(me->id) + 1;
    ts->path = al_malloc(n);
    ts->approval_prefix = al_malloc(n + 1);
    if (ts->path == NULL || ts->approval_prefix == NULL) {
      return AL_ENOMEM;
    }
    snprintf(ts->path, n, "%s%s%s", pt->path != NULL ? pt->path : "",
             pt->path != NULL ? "/" : "", me->id);
    snprintf(ts->approval_prefix, n + 1, "%s%s.",
             pt->approval_prefix != NULL ? pt->approval_prefix : "", me->id);
  } else {
    if ((rc = defs_init(ts, o)) != 0) {
      return rc;
    }
    ts->max_depth = o->task_max_depth > 0 ? o->task_max_depth
                                          : TASK_DEFAULT_DEPTH;
    ts->budget = o->task_token_budget > 0 ? o->task_token_budget
                                          : TASK_DEFAULT_BUDGET;
    ts->preamble = dup_or_null(o->task_preamble);
    ts->hooks_config = dup_or_null(o->hooks_config);
    if ((o->task_preamble != NULL && ts->preamble == NULL) ||
        (o->hooks_config != NULL && ts->hooks_config == NULL)) {
      return AL_ENOMEM;
    }
    ts->hook = o->hook;
    ts->hook_data = o->hook_data;
    ts->parallel_writers = o->task_parallel_writers;
    ts->on_child = o->on_child;
    ts->child_data = o->child_data;
  }
  if (!o->builtin_tools || o->no_task_tool) {
    return 0;
  }
  if ((desc = tool_description(ts)) == NULL) {
    return AL_ENOMEM;
  }
  memset(&def, 0, sizeof(def));
  def.name = "task";
  def.description = desc;
  def.input_schema = task_schema;
  /* The child's own calls pass its own gate (never looser than this
   * agent's), so starting one is a read. */
  def.category = AL_TOOL_READ;
  def.timeout_ms = TASK_TIMEOUT_MS;
  def.run = task_tool_run;
  def.cancel = task_tool_cancel;
  def.data = a;
  rc = al__agent_add_inproc(a, &def, &t);
  al_free(desc);
  if (rc != 0) {
    return rc;
  }
  t->source = "builtin";
  t->inproc_impl.is_concurrency_safe = task_safe;
  return 0;
}

/* ---- the agent's calls in ---------------------------------------------------------- */

void al__task_close_all(al_agent_t *a) {
  al_list_t *pos;

  if (a->tasks == NULL) {
    return;
  }
  if (a->tasks->self_sub != NULL) {
    al_agent_unsubscribe(a, a->tasks->self_sub);
    a->tasks->self_sub = NULL;
  }
  al_list_foreach(pos, &a->tasks->list) {
    ag_task_t *t = AL_CONTAINER_OF(pos, ag_task_t, node);

    if (t->child == NULL) {
      continue;
    }
    if (!t->ended) {
      t->ended = true; /* nothing is posted on a closing parent */
      t->state = TS_CANCELLED;
      al_agent_stats(t->child, &t->final_stats);
    }
    child_close(t); /* cancels its run, its tools and its children */
  }
}

char *al__task_take_inbox(al_agent_t *a) {
  ag_tasks_t *ts = a->tasks;
  char *text;

  if (ts == NULL || ts->inbox.len == 0) {
    return NULL;
  }
  text = al_strdup(ts->inbox.data);
  if (text != NULL) {
    al_buf_reset(&ts->inbox);
  }
  return text; /* NULL on OOM: kept for the next boundary */
}

int al__task_approve(al_agent_t *a, const char *request,
                     al_approval_t decision) {
  al_list_t *pos;

  if (a->tasks == NULL) {
    return AL_ENOTFOUND;
  }
  al_list_foreach(pos, &a->tasks->list) {
    ag_task_t *t = AL_CONTAINER_OF(pos, ag_task_t, node);
    int rc;

    if (t->child == NULL || t->ended) {
      continue;
    }
    if ((rc = al_agent_approve(t->child, request, decision)) != AL_ENOTFOUND) {
      return rc;
    }
  }
  return AL_ENOTFOUND;
}

void al__task_stats(const al_agent_t *a, al_agent_stats_t *out) {
  const ag_tasks_t *ts = a->tasks;
  uint64_t in = 0;
  uint64_t o = 0;
  double cost = 0;
  double own;
  al_list_t *pos;

  own = al_model_cost_usd(&a->model_info, out->input_tokens,
                          out->output_tokens, out->cache_read_input_tokens,
                          out->cache_creation_input_tokens);
  if (ts != NULL) {
    if (ts->stats_run == a->run.run_id) {
      in = ts->run_in;
      o = ts->run_out;
      cost = ts->run_cost;
    }
    al_list_foreach(pos, &ts->list) {
      const ag_task_t *t = AL_CONTAINER_OF(pos, ag_task_t, node);
      al_agent_stats_t cs;

      if (t->ended || t->child == NULL) {
        continue;
      }
      al_agent_stats(t->child, &cs);
      in += cs.input_tokens;
      o += cs.output_tokens;
      cost = cost < 0 || cs.cost_usd < 0 ? -1 : cost + cs.cost_usd;
    }
  }
  out->children_input_tokens = in;
  out->children_output_tokens = o;
  out->input_tokens += in;
  out->output_tokens += o;
  out->cost_usd = own < 0 || cost < 0 ? -1 : own + cost;
}

/* ---- public ------------------------------------------------------------------ */

int al_agent_tasks_json(const al_agent_t *a, char **out) {
  json_t *arr = json_array();
  al_list_t *pos;

  *out = NULL;
  if (arr == NULL) {
    return AL_ENOMEM;
  }
  if (a->tasks != NULL) {
    al_list_foreach(pos, &a->tasks->list) {
      const ag_task_t *t = AL_CONTAINER_OF(pos, ag_task_t, node);
      al_agent_stats_t s = t->final_stats;

      if (!t->ended && t->child != NULL) {
        al_agent_stats(t->child, &s);
      }
      if (json_array_append_new(
              arr,
              json_pack("{s:s, s:s, s:s, s:b, s:s, s:s, s:s, s:i, "
                        "s:{s:I, s:I}}",
                        "id", t->id, "agent", t->agent, "description",
                        t->description, "background", t->background, "state",
                        state_names[t->state], "session", t->session,
                        "parent_call", t->call_id, "depth", (int)t->depth,
                        "usage", "input_tokens", (json_int_t)s.input_tokens,
                        "output_tokens", (json_int_t)s.output_tokens)) != 0) {
        json_decref(arr);
        return AL_ENOMEM;
      }
    }
  }
  *out = json_dumps(arr, JSON_COMPACT);
  json_decref(arr);
  return *out != NULL ? 0 : AL_ENOMEM;
}

int al_agent_task_cancel(al_agent_t *a, const char *task_id) {
  al_list_t *pos;

  if (a->tasks == NULL || task_id == NULL) {
    return AL_ENOENT;
  }
  al_list_foreach(pos, &a->tasks->list) {
    ag_task_t *t = AL_CONTAINER_OF(pos, ag_task_t, node);

    if (strcmp(t->id, task_id) == 0) {
      if (t->ended) {
        return AL_ENOENT;
      }
      task_cancel(t);
      return 0;
    }
  }
  return AL_ENOENT;
}
