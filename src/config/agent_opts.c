/* Configuration -> agent options (agent_opts.h): one function per section,
 * each reading the configuration and the front end's input and writing
 * its own fields of the options, in the order of al_config_agent_options.
 * A flag wins over the configuration; the configuration over the agent's
 * defaults. Every string and list the options point to is a copy kept in
 * the store, so nothing here borrows from cfg or in past the call
 * (models, the sub-agent definitions and the callbacks excepted). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/agent_opts.h"
#include "config/agentdefs.h"
#include "config/context.h"
#include "mcp/mcp.h"

/* ---- the store ---------------------------------------------------------- */

void al_agent_opts_input_init(al_agent_opts_input_t *in) {
  memset(in, 0, sizeof(*in));
  in->permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  in->flags.retries = -1;
  in->flags.sandbox = -1;
}

void al_agent_opts_store_init(al_agent_opts_store_t *st) {
  memset(st, 0, sizeof(*st));
}

void al_agent_opts_store_free(al_agent_opts_store_t *st) {
  size_t i;

  for (i = 0; i < st->n; i++) {
    al_free(st->allocs[i]);
  }
  al_free(st->allocs);
  if (st->api_key != NULL) {
    memset(st->api_key, 0, strlen(st->api_key)); /* a secret */
    al_free(st->api_key);
  }
  al_free(st->task_preamble);
  al_agentdefs_free(st->defs);
  al_agent_opts_store_init(st);
}

/* Takes p into the store (freed there even when this fails). */
static void *keep(al_agent_opts_store_t *st, void *p) {
  if (p == NULL) {
    return NULL;
  }
  if (st->n == st->cap) {
    size_t cap = st->cap != 0 ? st->cap * 2 : 16;
    void **a = al_realloc(st->allocs, cap * sizeof(*a));

    if (a == NULL) {
      al_free(p);
      return NULL;
    }
    st->allocs = a;
    st->cap = cap;
  }
  st->allocs[st->n++] = p;
  return p;
}

/* A copy of s in the store; NULL for NULL. *oom set on failure. */
static const char *str(al_agent_opts_store_t *st, const char *s, bool *oom) {
  const char *c;

  if (s == NULL) {
    return NULL;
  }
  c = keep(st, al_strdup(s));
  if (c == NULL) {
    *oom = true;
  }
  return c;
}

/* A list being built in the store: copies of its strings, NULL-terminated. */
typedef struct {
  const char **v;
  size_t n, cap;
} list_t;

static void list_add(al_agent_opts_store_t *st, list_t *l, const char *s,
                     bool *oom) {
  if (s == NULL || *oom) {
    return;
  }
  if (l->n + 1 >= l->cap) {
    size_t cap = l->cap != 0 ? l->cap * 2 : 8;
    const char **v = al_realloc(l->v, cap * sizeof(*v));

    if (v == NULL) {
      *oom = true;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  if ((l->v[l->n] = str(st, s, oom)) != NULL) {
    l->v[++l->n] = NULL;
  }
}

static void list_add_all(al_agent_opts_store_t *st, list_t *l,
                         const char *const *a, bool *oom) {
  size_t i;

  for (i = 0; a != NULL && a[i] != NULL; i++) {
    list_add(st, l, a[i], oom);
  }
}

/* A configured path list resolved (al_config_path) from ws. */
static void list_add_paths(const al_config_t *cfg, const char *key,
                           char *const *a, const char *ws,
                           al_agent_opts_store_t *st, list_t *l, bool *oom) {
  size_t i;

  for (i = 0; a != NULL && a[i] != NULL && !*oom; i++) {
    char *r = al_config_path(cfg, key, a[i], ws);

    if (r == NULL) {
      *oom = true;
      return;
    }
    list_add(st, l, r, oom);
    al_free(r);
  }
}

/* The list into the store (NULL when empty: the agent's default). */
static const char *const *list_done(al_agent_opts_store_t *st, list_t *l,
                                    bool *oom) {
  if (*oom || l->n == 0) {
    al_free(l->v);
    return NULL;
  }
  if (keep(st, l->v) == NULL) {
    *oom = true;
    return NULL;
  }
  return l->v;
}

/* ---- the sections ------------------------------------------------------- */

typedef struct {
  const al_config_t *cfg;
  const al_agent_opts_input_t *in;
  al_agent_options_t *o;
  al_agent_opts_store_t *st;
  const char *ws; /* where relative paths resolve from */
  char *err;
  size_t errlen;
  bool oom;
} cx_t;

bool al_config_sandbox_policy(const char *mode, al_sandbox_policy_t *out) {
  if (mode == NULL || strcmp(mode, "auto") == 0) {
    *out = AL_SANDBOX_AUTO;
  } else if (strcmp(mode, "required") == 0) {
    *out = AL_SANDBOX_REQUIRED;
  } else if (strcmp(mode, "none") == 0) {
    *out = AL_SANDBOX_OFF;
  } else {
    return false;
  }
  return true;
}

/* provider, model, fallback_model, base_url and the key. */
static int apply_endpoint(cx_t *x) {
  const char *key = x->in->api_key;

  x->o->provider = str(x->st, al_config_provider(x->cfg), &x->oom);
  x->o->model = str(x->st, x->cfg->model, &x->oom);
  x->o->fallback_model = str(x->st, x->cfg->fallback_model, &x->oom);
  x->o->base_url = str(x->st, x->cfg->base_url, &x->oom);
  if (key == NULL) {
    key = al_config_api_key(x->cfg, x->in->getenv_fn, NULL);
  }
  if (key != NULL && (x->st->api_key = al_strdup(key)) == NULL) {
    x->oom = true;
  }
  x->o->api_key = x->st->api_key;
  return 0;
}

/* max_tokens, max_turns, the retry policy and the shared pacing. */
static int apply_counts(cx_t *x) {
  const al_agent_opts_input_t *in = x->in;

  x->o->max_tokens =
      in->flags.max_tokens > 0 ? in->flags.max_tokens : x->cfg->max_tokens;
  x->o->max_turns = in->flags.max_turns > 0 ? in->flags.max_turns
                                            : (uint32_t)x->cfg->max_turns;
  if (in->flags.retries >= 0) {
    x->o->retry_max_attempts = in->flags.retries + 1;
  }
  x->o->retry_base_ms = in->retry_base_ms;
  x->o->retry_cap_ms = in->retry_cap_ms;
  x->o->pace_rpm = (int)x->cfg->pacing.rpm;
  x->o->pace_burst = (int)x->cfg->pacing.burst;
  return 0;
}

/* timeouts: (run_ms is the front end's own: a cancel, not an option). */
static int apply_timeouts(cx_t *x) {
  x->o->connect_timeout_ms = x->cfg->timeouts.connect_ms;
  x->o->idle_timeout_ms = x->in->flags.idle_timeout_ms > 0
                              ? x->in->flags.idle_timeout_ms
                              : x->cfg->timeouts.idle_ms;
  x->o->progress_timeout_ms = x->cfg->timeouts.progress_ms;
  x->o->tool_timeout_ms = (uint64_t)x->cfg->timeouts.tool_ms;
  x->o->kill_grace_ms = x->in->kill_grace_ms;
  return 0;
}

/* limits: the daemon's defaults, the section, the flags, the ceiling. */
static int apply_limits(cx_t *x) {
  char why[160];

  if (x->in->base_limits != NULL) {
    x->o->limits = *x->in->base_limits;
  }
  /* Checked when the file loaded (or at session/create): a value that
   * does not parse stays at the default rather than failing here. */
  (void)al_limits_from_json(&x->o->limits, al_config_section(x->cfg, "limits"),
                            why, sizeof(why));
  if (x->in->flags.limits != NULL) {
    al_limits_overlay(&x->o->limits, x->in->flags.limits);
  }
  if (x->in->ceiling != NULL) {
    al_limits_clamp(&x->o->limits, x->in->ceiling);
  }
  return 0;
}

/* The builtin tools, tools.d and its directories, trust. */
static int apply_tools(cx_t *x) {
  list_t l = {0};

  x->o->workspace = str(x->st, x->in->workspace, &x->oom);
  x->o->builtin_tools = true;
  x->o->tools_d = true;
  x->o->trust_project = x->in->trust_project || x->cfg->project_trusted;
  list_add_all(x->st, &l, x->in->flags.tools_dirs, &x->oom);
  list_add_paths(x->cfg, "tools_d", x->cfg->tools_d, x->ws, x->st, &l, &x->oom);
  x->o->tools_dirs = list_done(x->st, &l, &x->oom);
  x->o->models = x->in->models;
  return 0;
}

/* sandbox: mode, network, denied paths, writable roots beside the
 * workspace. */
static int apply_sandbox(cx_t *x) {
  list_t denied = {0}, writable = {0};
  al_sandbox_policy_t pol = AL_SANDBOX_AUTO;

  if (x->in->flags.sandbox >= 0) {
    pol = (al_sandbox_policy_t)x->in->flags.sandbox;
  } else {
    /* Checked at load; an unknown word (a hand-edited header) is AUTO. */
    (void)al_config_sandbox_policy(x->cfg->sandbox.mode, &pol);
  }
  x->o->sandbox = pol;
  x->o->bash_network = x->cfg->sandbox.network == 1;
  list_add_paths(x->cfg, "sandbox.denied", x->cfg->sandbox.denied, x->ws, x->st,
                 &denied, &x->oom);
  x->o->denied_paths = list_done(x->st, &denied, &x->oom);
  if (x->cfg->sandbox.writable != NULL) {
    list_add(x->st, &writable, x->ws, &x->oom);
    list_add_paths(x->cfg, "sandbox.writable", x->cfg->sandbox.writable, x->ws,
                   x->st, &writable, &x->oom);
  }
  x->o->allowed_paths = list_done(x->st, &writable, &x->oom);
  return 0;
}

/* permissions: the flags' rules first, then the configured ones; ask
 * rules deny when nobody can be asked. */
static int apply_permissions(cx_t *x) {
  list_t allow = {0}, deny = {0}, ask = {0};
  const al_config_t *cfg = x->cfg;
  bool headless = x->in->permission_mode != AL_PERMISSION_MODE_INTERACTIVE;

  x->o->permission_mode = x->in->permission_mode;
  list_add_all(x->st, &allow, x->in->flags.allow_tools, &x->oom);
  list_add_all(x->st, &allow, (const char *const *)cfg->permissions.allow,
               &x->oom);
  list_add_all(x->st, &deny, x->in->flags.deny_tools, &x->oom);
  list_add_all(x->st, &deny, (const char *const *)cfg->permissions.deny,
               &x->oom);
  list_add_all(x->st, headless ? &deny : &ask,
               (const char *const *)cfg->permissions.ask, &x->oom);
  x->o->allow_tools = list_done(x->st, &allow, &x->oom);
  x->o->deny_tools = list_done(x->st, &deny, &x->oom);
  x->st->ask = (const char **)list_done(x->st, &ask, &x->oom);
  return 0;
}

/* context: the flags, then the section under them (context.c). */
static int apply_context(cx_t *x) {
  al_agent_options_t *o = x->o;
  char why[600];

  o->context_window = x->in->flags.context_window;
  o->keep_recent = x->in->flags.keep_recent;
  o->micro_min_tokens = x->in->flags.micro_min_tokens;
  o->max_messages = x->in->flags.max_messages;
  o->no_auto_compact = x->in->flags.no_auto_compact;
  o->no_prompt_cache = x->in->flags.no_prompt_cache;
  if (al__config_context_apply(x->cfg, o, why, sizeof(why)) != 0 &&
      !x->in->lenient) {
    snprintf(x->err, x->errlen, "%s", why);
    return AL_ECONFIG;
  }
  return 0;
}

/* mcp_servers: and hooks: (with --mcp-config / --hooks-config and a
 * trusted project's .mcp.json), or the text the front end was given. */
static int apply_mcp_hooks(cx_t *x) {
  const al_agent_opts_input_t *in = x->in;
  char *mcp = NULL, *hooks = NULL;
  al_buf_t err;
  int rc = 0;

  x->o->mcp_project = in->mcp_project;
  if (in->mcp_text_given) {
    x->o->mcp_config = str(x->st, in->mcp_config, &x->oom);
    x->o->hooks_config = str(x->st, in->hooks_config, &x->oom);
    return 0;
  }
  al_buf_init(&err, 16 * 1024);
  rc = al__mcp_config_load2(
      in->flags.mcp_file, al_config_section(x->cfg, "mcp_servers"),
      in->mcp_project ? NULL : x->ws,
      in->trust_project || x->cfg->project_trusted, &mcp, &err);
  if (rc != 0) {
    snprintf(x->err, x->errlen, "MCP configuration: %s",
             err.data != NULL ? err.data : "out of memory");
  } else if ((rc = al__hooks_config_load(in->flags.hooks_file,
                                         al_config_section(x->cfg, "hooks"),
                                         &hooks, &err)) != 0) {
    snprintf(x->err, x->errlen, "hooks configuration: %s",
             err.data != NULL ? err.data : "out of memory");
  }
  al_buf_free(&err);
  x->o->mcp_config = keep(x->st, mcp);
  x->o->hooks_config = keep(x->st, hooks);
  if ((mcp != NULL && x->o->mcp_config == NULL) ||
      (hooks != NULL && x->o->hooks_config == NULL)) {
    x->oom = true;
  }
  return rc;
}

/* The system prompt, assembled by the front end (system_prompt: is read
 * there, by al_sysprompt_build, with the workspace and sandbox words). */
static int apply_system(cx_t *x) {
  x->o->system = str(x->st, x->in->system, &x->oom);
  return 0;
}

/* Sub-agents (docs/subagents.md): the subagents: section, the
 * definitions (borrowed: al_agent_new copies them) and the preamble a
 * fresh child's prompt ends with. */
static int apply_subagents(cx_t *x) {
  x->o->no_task_tool = x->cfg->subagents.enabled == 0;
  x->o->task_max_depth = (uint32_t)x->cfg->subagents.max_depth;
  x->o->task_token_budget = x->cfg->subagents.token_budget;
  x->o->task_parallel_writers = x->cfg->subagents.parallel_writers == 1;
  if (x->in->task_preamble != NULL &&
      (x->st->task_preamble = al_strdup(x->in->task_preamble)) == NULL) {
    x->oom = true;
  }
  x->o->subagents = x->in->subagents;
  x->o->n_subagents = x->in->n_subagents;
  x->o->task_preamble = x->st->task_preamble;
  return 0;
}

/* The main agent from a definition (in->main_agent): what a child of it
 * would get from its definition (src/loop/task.c spawn), for the agent
 * itself. */
static int apply_main_agent(cx_t *x) {
  const al_subagent_def_t *d = x->in->main_agent;
  list_t only, never;

  if (d == NULL) {
    return 0;
  }
  if (d->system != NULL) {
    size_t n = strlen(d->system) + 2 +
               (x->in->task_preamble != NULL ? strlen(x->in->task_preamble)
                                             : 0) + 1;
    char *s = keep(x->st, al_malloc(n));

    if (s == NULL) {
      x->oom = true;
      return 0;
    }
    snprintf(s, n, "%s%s%s", d->system,
             x->in->task_preamble != NULL ? "\n\n" : "",
             x->in->task_preamble != NULL ? x->in->task_preamble : "");
    x->o->system = s;
  }
  if (d->model != NULL && !x->in->model_flag) {
    x->o->model = str(x->st, d->model, &x->oom);
  }
  if (d->max_turns > 0 && x->in->flags.max_turns == 0) {
    x->o->max_turns = d->max_turns;
  }
  if (d->permission_mode > (int)x->o->permission_mode) {
    x->o->permission_mode = (al_permission_mode_t)d->permission_mode;
  }
  memset(&only, 0, sizeof(only));
  memset(&never, 0, sizeof(never));
  if (d->tools != NULL) {
    static const char *const none[] = {NULL};

    list_add_all(x->st, &only, d->tools, &x->oom);
    x->o->tools_only = list_done(x->st, &only, &x->oom);
    if (x->o->tools_only == NULL) {
      x->o->tools_only = none; /* an empty allowlist: no tools at all */
    }
  }
  list_add_all(x->st, &never, d->disallowed_tools, &x->oom);
  x->o->tools_never = list_done(x->st, &never, &x->oom);
  return 0;
}

int al_config_agent_options(const al_config_t *cfg,
                            const al_agent_opts_input_t *in,
                            al_agent_options_t *o, al_agent_opts_store_t *st,
                            char *err, size_t errlen) {
  static int (*const sections[])(cx_t *) = {
      apply_endpoint,  apply_counts,  apply_timeouts,    apply_limits,
      apply_tools,     apply_sandbox, apply_permissions, apply_context,
      apply_mcp_hooks, apply_system,  apply_subagents,   apply_main_agent};
  char here[PATH_MAX];
  cx_t x;
  size_t i;
  int rc = 0;

  al_agent_options_init(o);
  memset(&x, 0, sizeof(x));
  x.cfg = cfg;
  x.in = in;
  x.o = o;
  x.st = st;
  x.err = err;
  x.errlen = errlen;
  x.ws = in->workspace != NULL                ? in->workspace
         : getcwd(here, sizeof(here)) != NULL ? here
                                              : ".";
  err[0] = '\0';
  for (i = 0; i < AL_ARRAY_SIZE(sections) && rc == 0 && !x.oom; i++) {
    rc = sections[i](&x);
  }
  if (rc == 0 && x.oom) {
    snprintf(err, errlen, "out of memory");
    rc = AL_ENOMEM;
  }
  return rc;
}

/* ---- the client's configuration, for the daemon ------------------------- */

static json_t *list_json(char *const *l) {
  json_t *a = json_array();
  size_t i;

  for (i = 0; a != NULL && l != NULL && l[i] != NULL; i++) {
    json_array_append_new(a, json_string(l[i]));
  }
  return a;
}

/* Resolved here: the daemon's cwd is not ours. */
static json_t *paths_json(const al_config_t *cfg, const char *ws) {
  static const char *const pk[] = {"denied", "writable", "tools_dirs"};
  static const char *const ck[] = {"sandbox.denied", "sandbox.writable",
                                   "tools_d"};
  char **const pl[] = {cfg->sandbox.denied, cfg->sandbox.writable,
                       cfg->tools_d};
  json_t *ps = json_object();
  size_t i, j;

  for (i = 0; ps != NULL && i < AL_ARRAY_SIZE(pk); i++) {
    json_t *a;

    if (pl[i] == NULL) {
      continue;
    }
    a = json_array();
    for (j = 0; a != NULL && pl[i][j] != NULL; j++) {
      char *r = al_config_path(cfg, ck[i], pl[i][j], ws);

      /* A relative path from the environment or a flag: from ws. */
      if (r != NULL && r[0] != '/') {
        char *abs = al_malloc(strlen(ws) + strlen(r) + 2);

        if (abs != NULL) {
          sprintf(abs, "%s/%s", ws, r);
        }
        al_free(r);
        r = abs;
      }
      if (r != NULL) {
        json_array_append_new(a, json_string(r));
        al_free(r);
      }
    }
    json_object_set_new(ps, pk[i], a);
  }
  return ps;
}

json_t *al_config_session_params(const al_config_t *cfg, const char *ws,
                                 al_cfg_getenv_fn getenv_fn, char *err,
                                 size_t errlen) {
  static const char *const tn[] = {"connect_ms", "idle_ms", "progress_ms",
                                   "tool_ms"};
  static const char *const rn[] = {"allow_tools", "deny_tools", "ask_tools"};
  const int64_t tv[] = {cfg->timeouts.connect_ms, cfg->timeouts.idle_ms,
                        cfg->timeouts.progress_ms, cfg->timeouts.tool_ms};
  char **const rl[] = {cfg->permissions.allow, cfg->permissions.deny,
                       cfg->permissions.ask};
  al_agent_options_t co;
  json_t *o, *ctx, *to, *ps;
  const json_t *ls;
  size_t i;

  err[0] = '\0';
  /* The context: section, checked here so its FILE:LINE:COL reaches the
   * user; the daemon gets the values. */
  memset(&co, 0, sizeof(co));
  if (al__config_context_apply(cfg, &co, err, errlen) != 0) {
    return NULL;
  }
  o = json_pack("{s:s, s:s?, s:s?, s:s?, s:s?}", "provider",
                al_config_provider(cfg), "model", cfg->model, "base_url",
                cfg->base_url, "fallback_model", cfg->fallback_model, "api_key",
                al_config_api_key(cfg, getenv_fn, NULL));
  if (o == NULL) {
    return NULL;
  }
  ctx = al__context_to_json(&co);
  if (ctx != NULL && json_object_size(ctx) > 0) {
    json_object_set(o, "context", ctx);
  }
  json_decref(ctx);
  if (cfg->sandbox.mode != NULL) {
    json_object_set_new(o, "sandbox", json_string(cfg->sandbox.mode));
  }
  if (cfg->sandbox.network == 1) {
    json_object_set_new(o, "network", json_true());
  }
  ls = al_config_section(cfg, "limits");
  if (json_is_object(ls) && json_object_size(ls) > 0) {
    json_object_set_new(o, "limits", json_deep_copy(ls));
  }
  to = json_object();
  for (i = 0; to != NULL && i < AL_ARRAY_SIZE(tn); i++) {
    if (tv[i] > 0) {
      json_object_set_new(to, tn[i], json_integer(tv[i]));
    }
  }
  if (json_object_size(to) > 0) {
    json_object_set_new(o, "timeouts", to);
  } else {
    json_decref(to);
  }
  ps = paths_json(cfg, ws);
  if (json_object_size(ps) > 0) {
    json_object_set_new(o, "paths", ps);
  } else {
    json_decref(ps);
  }
  if (cfg->max_tokens > 0) {
    json_object_set_new(o, "max_tokens", json_integer(cfg->max_tokens));
  }
  if (cfg->max_turns > 0) {
    json_object_set_new(o, "max_turns", json_integer(cfg->max_turns));
  }
  for (i = 0; i < AL_ARRAY_SIZE(rn); i++) {
    if (rl[i] != NULL) {
      json_object_set_new(o, rn[i], list_json(rl[i]));
    }
  }
  {
    /* subagents: only what is set (the chat adds its agents and the
     * preamble to the same object). */
    json_t *sa = json_object();

    if (sa != NULL && cfg->subagents.enabled >= 0) {
      json_object_set_new(sa, "enabled",
                          json_boolean(cfg->subagents.enabled == 1));
    }
    if (sa != NULL && cfg->subagents.max_depth > 0) {
      json_object_set_new(sa, "max_depth",
                          json_integer(cfg->subagents.max_depth));
    }
    if (sa != NULL && cfg->subagents.token_budget > 0) {
      json_object_set_new(sa, "token_budget",
                          json_integer(cfg->subagents.token_budget));
    }
    if (sa != NULL && cfg->subagents.parallel_writers >= 0) {
      json_object_set_new(sa, "parallel_writers",
                          json_boolean(cfg->subagents.parallel_writers == 1));
    }
    if (json_object_size(sa) > 0) {
      json_object_set_new(o, "subagents", sa);
    } else {
      json_decref(sa);
    }
  }
  return o;
}

int al_config_session_agents(json_t *params, const al_agentdefs_t *d,
                             const char *preamble) {
  json_t *sa = json_object_get(params, "subagents");
  json_t *defs;

  if (sa == NULL) {
    if ((sa = json_object()) == NULL ||
        json_object_set_new(params, "subagents", sa) != 0) {
      return AL_ENOMEM;
    }
  }
  if (preamble != NULL && preamble[0] != '\0' &&
      strlen(preamble) <= AL_SUBAGENTS_PREAMBLE_MAX &&
      json_object_set_new(sa, "preamble", json_string(preamble)) != 0) {
    return AL_ENOMEM;
  }
  if (d != NULL && d->n > 0) {
    defs = al_agentdefs_to_json(d);
    if (defs == NULL || json_object_set_new(sa, "agents", defs) != 0) {
      return AL_ENOMEM;
    }
  }
  if (json_object_size(sa) == 0) {
    json_object_del(params, "subagents");
  }
  return 0;
}

/* Bounds as config.c's table has them. */
static bool sub_int(const json_t *v, int64_t lo, int64_t hi) {
  return json_is_integer(v) && json_integer_value(v) >= lo &&
         json_integer_value(v) <= hi;
}

int al__config_subagents_from_json(const json_t *sub, al_config_t *cfg,
                                   char *why, size_t why_len) {
  static const char *const keys[] = {"enabled",      "max_depth",
                                     "token_budget", "parallel_writers",
                                     "preamble",     "agents"};
  const char *k;
  const json_t *v;
  al_agentdefs_t *d;
  size_t i;
  int rc;

  if (sub == NULL || json_is_null(sub)) {
    return 0;
  }
  if (!json_is_object(sub)) {
    snprintf(why, why_len, "subagents must be an object");
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)sub, k, v) {
    for (i = 0; i < AL_ARRAY_SIZE(keys) && strcmp(k, keys[i]) != 0; i++) {
    }
    if (i == AL_ARRAY_SIZE(keys)) {
      snprintf(why, why_len,
               "subagents.%.64s is not a setting (enabled, max_depth, "
               "token_budget, parallel_writers, preamble, agents)",
               k);
      return AL_EINVAL;
    }
    if (((i == 0 || i == 3) && !json_is_boolean(v)) ||
        (i == 1 && !sub_int(v, 1, 16)) ||
        (i == 2 && !sub_int(v, 1000, INT64_C(1000000000000))) ||
        (i == 4 && (!json_is_string(v) ||
                    json_string_length(v) > AL_SUBAGENTS_PREAMBLE_MAX))) {
      snprintf(why, why_len, "subagents.%s must be %s", k,
               i == 1   ? "an integer from 1 to 16"
               : i == 2 ? "an integer from 1000 to 1000000000000"
               : i == 4 ? "a string of at most 1 MiB"
                        : "true or false");
      return AL_EINVAL;
    }
  }
  if ((rc = al_agentdefs_from_json(json_object_get(sub, "agents"), &d, why,
                                   why_len)) != 0) {
    if (rc == AL_EINVAL) {
      char inner[512];

      snprintf(inner, sizeof(inner), "%s", why);
      snprintf(why, why_len, "subagents.%s", inner);
    }
    return rc;
  }
  al_agentdefs_free(d);
  if (cfg != NULL) {
    v = json_object_get(sub, "enabled");
    cfg->subagents.enabled = v == NULL ? -1 : json_is_true(v) ? 1 : 0;
    cfg->subagents.max_depth =
        (int64_t)json_integer_value(json_object_get(sub, "max_depth"));
    cfg->subagents.token_budget =
        (int64_t)json_integer_value(json_object_get(sub, "token_budget"));
    v = json_object_get(sub, "parallel_writers");
    cfg->subagents.parallel_writers = v == NULL ? -1 : json_is_true(v) ? 1 : 0;
  }
  return 0;
}
