/* The agent's public API (include/agentloop/agent.h, STYLE §6.1):
 * al_agent_new copies the options and calls one init per module (core,
 * registry, policy, attempt, compaction, run, context, hooks, MCP);
 * the entry points check their arguments and the agent's state, then hand
 * over to the module that owns the work: the run driver (run.c) for run,
 * cancel and compaction, core.c for subscribers and close accounting.
 * Owns the configuration fields at the top of struct al_agent_s. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loop/agent_int.h"
#include "loop/agent_priv.h"
#include "loop/task.h"

/* ---- small helpers ------------------------------------------------------ */

static char *dup_or_null(const char *s) {
  return s != NULL ? al_strdup(s) : NULL;
}

/* ---- public API ---------------------------------------------------------- */

void al_agent_options_init(al_agent_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
}

/* Every module's state (core.c calls it when the closed agent is done,
 * al_agent_new when it fails). */
static void agent_free(al_agent_t *a) {
  al__agent_tools_free(a);
  al_free(a->base_url);
  al_free(a->api_key);
  al_free(a->model);
  al_free(a->model_main);
  al_free(a->fallback_model);
  al_free(a->workspace);
  al__agent_strv_free(a->allowed_paths);
  al__agent_strv_free(a->denied_paths);
  al__policy_free(a);
  al__history_free(&a->history);
  al__run_free(a);
  al__compact_free(a);
  al__attempt_free(a);
  al_models_free(a->own_models);
  al__agent_context_free(a);
  al__budget_free(&a->budget);
  al__task_free(a);
  al__core_free(a);
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

/* The provider, endpoint, key, models and limits of the options. */
static int model_copy(al_agent_t *a, const al_agent_options_t *o) {
  int rc;

  a->prompt_cache = !o->no_prompt_cache;
  a->provider = al_provider_by_name(o->provider != NULL ? o->provider
                                                        : "anthropic");
  if (a->provider == NULL ||
      (unsigned)o->permission_mode > AL_PERMISSION_MODE_JOB) {
    return AL_EINVAL;
  }
  if ((rc = set_base_url(a, o->base_url)) != 0) {
    return rc;
  }
  a->api_key = dup_or_null(o->api_key);
  a->model_main = al_strdup(
      o->model != NULL ? o->model
      : a->provider->kind != AL_PROVIDER_ANTHROPIC ? "gpt-4o-mini"
                                                   : "claude-sonnet-5-5");
  a->model = dup_or_null(a->model_main);
  a->fallback_model = dup_or_null(o->fallback_model);
  if ((o->api_key != NULL && a->api_key == NULL) || a->model == NULL ||
      (o->fallback_model != NULL && a->fallback_model == NULL)) {
    return AL_ENOMEM;
  }
  if (o->context_window < 0) {
    return AL_EINVAL;
  }
  a->models = o->models;
  if (a->models == NULL) {
    /* The shipped catalogue: compiled in, parsed here (no I/O). */
    if ((rc = al_models_parse(&a->own_models, NULL, 0, NULL, NULL)) != 0) {
      return rc;
    }
    a->models = a->own_models;
  }
  a->window_override = o->context_window;
  al__run_model_refresh(a);
  a->max_tokens = o->max_tokens > 0 ? o->max_tokens : 4096;
  a->max_turns = o->max_turns > 0 ? o->max_turns : 20;
  a->concurrency = o->max_tool_concurrency > 0
                       ? o->max_tool_concurrency
                       : al__executor_concurrency_from_env();
  if (a->concurrency > AL_EXECUTOR_MAX_CONCURRENCY) {
    a->concurrency = AL_EXECUTOR_MAX_CONCURRENCY;
  }
  return 0;
}

static void retry_copy(al_agent_t *a, const al_agent_options_t *o) {
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
}

/* The workspace as an absolute real path of a directory. */
static int workspace_copy(al_agent_t *a, const al_agent_options_t *o) {
  char cwd[4096];
  struct stat st;

  if (o->workspace != NULL) {
    /* Relative ("ws", "./ws", ".") is taken against the process's cwd
     * now, once: the tools, the sandbox and the path policy need the
     * absolute real path. */
    char *real = realpath(o->workspace, NULL);

    if (real == NULL) {
      return AL_EINVAL;
    }
    a->workspace = al_strdup(real);
    free(real);
  } else if (getcwd(cwd, sizeof(cwd)) != NULL) {
    a->workspace = al_strdup(cwd);
  } else {
    return AL_EINVAL;
  }
  if (a->workspace == NULL) {
    return AL_ENOMEM;
  }
  if (stat(a->workspace, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return AL_EINVAL;
  }
  return 0;
}

/* The HTTP client: the options' shared one, or one of our own. */
static int client_open(al_agent_t *a, const al_agent_options_t *o) {
  al_http_client_options_t co;
  int rc;

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
    return 0;
  }
  if ((rc = al_http_client_new(a->loop, &co, &a->client)) != 0) {
    return rc;
  }
  a->own_client = true;
  return 0;
}

int al_agent_new(uv_loop_t *loop, const al_agent_options_t *o,
                 al_agent_t **out) {
  al_agent_t *a;
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
  al__history_init(&a->history);
  al__budget_init(&a->budget);
  /* One init per module: in place, cannot fail, makes the frees safe. */
  al__core_init(a, o, agent_free);
  al__reg_init(a);
  al__policy_init(a, o);
  al__attempt_init(a);
  al__compact_init(a, o);
  if ((rc = model_copy(a, o)) != 0) {
    goto fail;
  }
  retry_copy(a, o);
  rc = AL_ENOMEM;
  seed = o->rng_seed != 0 ? o->rng_seed : al_now_ns() ^ (uint64_t)(uintptr_t)a;
  al__run_init(a, o, seed);
  a->tool_timeout_ms = o->tool_timeout_ms;
  a->bash_network = o->bash_network;
  a->kill_grace_ms = o->kill_grace_ms;
  if (al__policy_copy(a, o) != 0 || al__reg_filter_copy(a, o) != 0 ||
      al__agent_strv_dup(o->allowed_paths, &a->allowed_paths) != 0 ||
      al__agent_strv_dup(o->denied_paths, &a->denied_paths) != 0) {
    goto fail;
  }
  if ((rc = workspace_copy(a, o)) != 0) {
    goto fail;
  }
  rc = AL_ENOMEM;
  if (al__history_set_system(&a->history, o->system) != 0) {
    goto fail;
  }
  if (a->reg.tool_defs == NULL || a->att.stamps == NULL) {
    goto fail;
  }
  if ((rc = al__core_open(a, o, seed)) != 0) {
    goto fail;
  }
  a->limits = o->limits; /* the tools read theirs (file_*) */
  if ((rc = al__agent_sandbox_init(a, o)) != 0 ||
      (o->builtin_tools && (rc = al__agent_tools_init(a)) != 0) ||
      (rc = al__agent_cli_tools_init(a)) != 0 ||
      (rc = al__agent_context_init(a, o)) != 0 ||
      (rc = al__agent_mcp_check(o)) != 0 ||
      (rc = al__agent_hooks_init(a, o)) != 0 ||
      (rc = al__task_init(a, o)) != 0) {
    goto fail;
  }
  if ((rc = client_open(a, o)) != 0) {
    goto fail;
  }
  al__run_handles_init(a);
  al__core_handles_init(a);
  al__agent_ref(a); /* the client */
  /* Last: from here on nothing fails, and the servers start at once. */
  al__agent_mcp_init(a, o);
  *out = a;
  return 0;
fail:
  agent_free(a);
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

int al_agent_run(al_agent_t *a, const char *text) {
  if (ag_closing(a)) {
    return AL_ECLOSING;
  }
  if (a->run.state != AG_IDLE) {
    return AL_EBUSY; /* ENDING too: a new run waits until interrupted */
  }
  if (text == NULL || text[0] == '\0') {
    return AL_EINVAL;
  }
  return al__run_start(a, text);
}

int al_agent_cancel(al_agent_t *a) {
  if (!al_agent_running(a)) {
    return AL_ESTATE;
  }
  al__run_cancel(a);
  return 0;
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
  al__compact_manual(a, copy, al_agent_running(a));
  if (!al_agent_running(a)) {
    al__run_compact(a, "manual");
  }
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


void al_agent_stats(const al_agent_t *a, al_agent_stats_t *out) {
  /* The driver counts turns, requests and time; the attempts the rest. */
  *out = a->att.usage;
  out->turns = a->run.stats.turns;
  out->requests = a->run.stats.requests;
  out->duration_ms = a->run.stats.duration_ms;
  if (al_agent_running(a)) {
    out->duration_ms = ag_ms_since(a->run.run_t0);
  }
  al__task_stats(a, out); /* the children's usage, and the cost */
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

json_t *al__agent_messages(al_agent_t *a) { return a->history.messages; }

/* ---- close --------------------------------------------------------------- */

static void on_client_close(al_http_client_t *c) {
  al_agent_t *a = al_http_client_get_data(c);

  al__agent_unref(a);
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
  al__run_close(a);
  al__agent_closing(a, cb);
  al__task_close_all(a); /* children close first: they borrow */
  al__attempt_close_execs(a);
  al__agent_hooks_cancel_runs(a); /* hooks begun outside a run too */
  al__agent_mcp_close(a);
  al__run_close_handles(a);
  if (a->own_client) {
    al_http_client_set_data(a->client, a);
    al_http_client_close(a->client, on_client_close);
  } else {
    al__agent_unref_quiet(a); /* a shared client stays open */
  }
  a->client = NULL;
}
