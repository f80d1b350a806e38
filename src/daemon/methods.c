/* Daemon RPC methods (docs/protocol.md) and the dispatch of request lines
 * (internal.h). */
#include "daemon/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentloop/version.h"
#include "config/context.h"
#include "hooks/hooks.h"

static char *dup_or_null(const char *s) {
  return s != NULL ? al_strdup(s) : NULL;
}

void al__daemon_reply(client_t *c, const json_t *id, json_t *result) {
  client_daemon(c)->stats.requests++;
  al__dclient_send(c, al_rpc_result_new(id, result));
}

void al__daemon_reply_err(client_t *c, const json_t *id, int code,
                      const char *msg, json_t *data) {
  client_daemon(c)->stats.errors++;
  al__dclient_send(c, al_rpc_error_new(id, code, msg, data));
}
/* ---- methods ---------------------------------------------------------------- */

typedef struct {
  client_t *c;
  const json_t *id;
  json_t *params; /* object or NULL */
} call_t;

/* A string param that, when present, must be a string. */
static bool popt_str(const call_t *k, const char *key, const char **out) {
  json_t *v = json_object_get(k->params, key);

  *out = NULL;
  if (v == NULL || json_is_null(v)) {
    return true;
  }
  if (!json_is_string(v)) {
    char msg[128];

    snprintf(msg, sizeof(msg), "%s must be a string", key);
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, msg, NULL);
    return false;
  }
  *out = json_string_value(v);
  return true;
}

/* The session named by params.session, loaded; replies and returns NULL
 * otherwise. */
static session_t *need_session(const call_t *k, bool loaded) {
  const char *id;
  session_t *s;

  if (!popt_str(k, "session", &id)) {
    return NULL;
  }
  if (id == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, "session is required",
              NULL);
    return NULL;
  }
  s = al__session_find(client_daemon(k->c), id);
  if (s == NULL || s->closing) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_UNKNOWN_SESSION, "unknown session",
              json_pack("{s:s}", "session", id));
    return NULL;
  }
  if (loaded && (!s->loaded || s->unloading)) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_UNKNOWN_SESSION,
              "session not loaded: call session/resume first",
              json_pack("{s:s, s:b}", "session", id, "loaded", 0));
    return NULL;
  }
  return s;
}

static void m_initialize(const call_t *k) {
  client_t *c = k->c;
  json_t *cl = json_object_get(k->params, "client");
  const char *name = json_string_value(json_object_get(cl, "name"));

  if (!c->initialized && name != NULL) {
    char safe[48];
    size_t i;

    /* Printable ASCII only: it is shown to other clients. */
    for (i = 0; name[i] != '\0' && i < sizeof(safe) - 1; i++) {
      safe[i] = (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
    }
    safe[i] = '\0';
    snprintf(c->id, sizeof(c->id), "c%llu (%s)", (unsigned long long)c->n,
             safe);
  }
  c->initialized = true;
  {
    al_daemon_t *d = client_daemon(c);
    json_t *r = json_pack("{s:i, s:{s:s, s:s}, s:I, s:s, s:{s:b, s:b}}",
                          "protocol_version", AL_RPC_PROTOCOL_VERSION,
                          "server", "name", "agentloopd", "version",
                          AL_VERSION_STRING, "pid", (json_int_t)getpid(),
                          "client_id", c->id, "capabilities", "compact", 1,
                          "replay", 1);

    if (r != NULL && d->status != NULL) {
      /* A fleet worker's metrics (docs/fleet.md). */
      json_object_set_new(r, "fleet", d->status(d->status_data));
    }
    al__daemon_reply(c, k->id, r);
  }
}

static bool check_provider(const call_t *k, const char *p) {
  if (p != NULL && strcmp(p, "anthropic") != 0 && strcmp(p, "openai") != 0 &&
      strcmp(p, "openai-responses") != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "provider must be anthropic, openai or openai-responses", NULL);
    return false;
  }
  return true;
}

static bool new_session_id(char *out, size_t len) {
  unsigned char r[8];
  size_t i;

  if (uv_random(NULL, NULL, r, sizeof(r), 0, NULL) != 0) {
    return false;
  }
  snprintf(out, len, "s_");
  for (i = 0; i < sizeof(r); i++) {
    snprintf(out + 2 + 2 * i, len - 2 - 2 * i, "%02x", r[i]);
  }
  return true;
}

/* A malformed base URL is refused here, naming it, not found later as a
 * failed request (issue 15). */
static bool check_base_url(const call_t *k, const char *url) {
  char why[160];
  char msg[600];

  if (url == NULL || al_agent_check_base_url(url, why, sizeof(why)) == 0) {
    return true;
  }
  snprintf(msg, sizeof(msg), "base_url '%.400s': %s", url, why);
  al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, msg, NULL);
  return false;
}

static bool check_limits(const call_t *k) {
  const al_limits_t *ceil = &client_daemon(k->c)->o.limits;
  al_limits_t l;
  const char *name = NULL;
  char why[200];

  memset(&l, 0, sizeof(l));
  if (al_limits_from_json(&l, json_object_get(k->params, "limits"), why,
                          sizeof(why)) != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why, NULL);
    return false;
  }
  /* The daemon's own limits are ceilings (docs/daemon.md). */
  if (al_limits_check_ceiling(ceil, &l, &name, why, sizeof(why)) != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why,
                         json_pack("{s:s}", "limit", name));
    return false;
  }
  return true;
}

static bool check_context(const call_t *k) {
  char why[200];

  if (al__context_from_json(json_object_get(k->params, "context"), NULL, why,
                            sizeof(why)) == 0) {
    return true;
  }
  al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why, NULL);
  return false;
}

/* subagents: the client's settings, definitions and preamble, bounded
 * (docs/protocol.md); the daemon reads no agent file itself. */
static bool check_subagents(const call_t *k) {
  char why[600];

  if (al__config_subagents_from_json(json_object_get(k->params, "subagents"),
                                     NULL, why, sizeof(why)) == 0) {
    return true;
  }
  al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why, NULL);
  return false;
}

/* mcp_config and hooks_config: the client's configuration (objects in
 * al_agent_options_t's shapes, or absent: the daemon's own). A bad hook
 * is named here, not found as a failed agent. */
static bool check_client_config(const call_t *k) {
  json_t *mc = json_object_get(k->params, "mcp_config");
  json_t *hc = json_object_get(k->params, "hooks_config");
  char *txt;
  al_buf_t err;
  int rc;

  if ((mc != NULL && !json_is_object(mc)) ||
      (hc != NULL && !json_is_object(hc))) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                         "mcp_config and hooks_config must be objects",
                         NULL);
    return false;
  }
  if (hc == NULL || json_object_size(hc) == 0) {
    return true;
  }
  txt = json_dumps(hc, JSON_COMPACT);
  if (txt == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory",
                         NULL);
    return false;
  }
  al_buf_init(&err, 4096);
  rc = al__hooks_check(txt, &err);
  al_free(txt);
  if (rc != 0) {
    char msg[600];

    snprintf(msg, sizeof(msg), "hooks_config: %s",
             err.data != NULL ? err.data : "out of memory");
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, msg, NULL);
  }
  al_buf_free(&err);
  return rc == 0;
}

/* A configuration object as the agent's JSON text; NULL for none. */
static char *config_text(const json_t *o) {
  return json_is_object(o) && json_object_size(o) > 0
             ? json_dumps(o, JSON_COMPACT)
             : NULL;
}

static void m_session_create(const call_t *k) {
  al_daemon_t *d = client_daemon(k->c);
  int rc;
  const char *cwd, *model, *provider, *base_url, *system, *key, *sandbox;
  char id[40];
  char cwdbuf[4096];
  char why[256];
  session_t *s;
  al_blob_t *b;
  struct stat st;

  if (!popt_str(k, "cwd", &cwd) || !popt_str(k, "model", &model) ||
      !popt_str(k, "provider", &provider) || !popt_str(k, "api_key", &key) ||
      !popt_str(k, "sandbox", &sandbox) ||
      !popt_str(k, "base_url", &base_url) ||
      !popt_str(k, "system", &system) || !check_provider(k, provider) ||
      !check_base_url(k, base_url) || !check_limits(k) ||
      !check_context(k) || !check_subagents(k)) {
    return;
  }
  {
    static const char *const lists[] = {"ask_tools", "allow_tools",
                                        "deny_tools"};
    size_t i, j;
    json_t *v;

    for (j = 0; j < AL_ARRAY_SIZE(lists); j++) {
      json_t *ask = json_object_get(k->params, lists[j]);
      bool ok = json_is_array(ask);
      char msg[96];

      if (ask == NULL || json_is_null(ask)) {
        continue;
      }
      json_array_foreach(ask, i, v) { ok = ok && json_is_string(v); }
      if (!ok) {
        snprintf(msg, sizeof(msg), "%s must be an array of tool names or "
                                   "rules", lists[j]);
        al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, msg, NULL);
        return;
      }
    }
  }
  {
    /* Limits and the sandbox from the client's configuration. */
    json_t *mt = json_object_get(k->params, "max_tokens");
    json_t *mr = json_object_get(k->params, "max_turns");
    json_t *nw = json_object_get(k->params, "network");

    if ((mt != NULL && (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
                        json_integer_value(mt) > INT32_MAX)) ||
        (mr != NULL && (!json_is_integer(mr) || json_integer_value(mr) < 1 ||
                        json_integer_value(mr) > UINT32_MAX))) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                           "max_tokens and max_turns must be positive "
                           "integers", NULL);
      return;
    }
    if (nw != NULL && !json_is_boolean(nw)) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                           "network must be true or false", NULL);
      return;
    }
    {
      json_t *to = json_object_get(k->params, "timeouts");
      const char *tk;
      json_t *tv;
      bool ok = to == NULL || json_is_object(to);

      json_object_foreach(to, tk, tv) {
        ok = ok && json_is_integer(tv) && json_integer_value(tv) > 0 &&
             json_integer_value(tv) <= INT32_MAX &&
             (strcmp(tk, "connect_ms") == 0 || strcmp(tk, "idle_ms") == 0 ||
              strcmp(tk, "progress_ms") == 0 || strcmp(tk, "tool_ms") == 0);
      }
      if (!ok) {
        al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                             "timeouts: an object of connect_ms, idle_ms, "
                             "progress_ms, tool_ms (positive integers)",
                             NULL);
        return;
      }
    }
    {
      /* Absolute paths only: the daemon's cwd means nothing to a client. */
      json_t *ps = json_object_get(k->params, "paths");
      const char *pk;
      json_t *pv;
      bool ok = ps == NULL || json_is_object(ps);

      json_object_foreach(ps, pk, pv) {
        size_t pi;
        json_t *pe;

        ok = ok && json_is_array(pv) &&
             (strcmp(pk, "denied") == 0 || strcmp(pk, "writable") == 0 ||
              strcmp(pk, "tools_dirs") == 0);
        json_array_foreach(pv, pi, pe) {
          ok = ok && json_is_string(pe) && json_string_value(pe)[0] == '/';
        }
      }
      if (!ok) {
        al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                             "paths: an object of denied, writable, "
                             "tools_dirs (arrays of absolute paths)", NULL);
        return;
      }
    }
    if (sandbox != NULL && strcmp(sandbox, "auto") != 0 &&
        strcmp(sandbox, "required") != 0 && strcmp(sandbox, "none") != 0) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                           "sandbox must be auto, required or none", NULL);
      return;
    }
  }
  if (!check_client_config(k)) {
    return;
  }
  if (cwd == NULL) {
    size_t n = sizeof(cwdbuf);

    if (uv_cwd(cwdbuf, &n) != 0) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "no cwd", NULL);
      return;
    }
    cwd = cwdbuf;
  }
  /* A stat of a local directory: the agent checks it too (realpath). */
  if (cwd[0] != '/' || stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "cwd must be an absolute path to a directory", NULL);
    return;
  }
  if (d->nloaded >= d->o.max_sessions) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_OVERLOADED, "too many sessions", NULL);
    return;
  }
  if (!al__daemon_fd_admit(d, NULL, k->c, k->id, d->o.session_fds,
                           "create a session")) {
    return;
  }
  if (!new_session_id(id, sizeof(id)) || (s = al__session_alloc(d, id)) == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  s->h.cwd = al_strdup(cwd);
  s->h.model = dup_or_null(model != NULL ? model : d->o.model);
  s->h.provider = dup_or_null(provider != NULL ? provider : d->o.provider);
  s->h.base_url = dup_or_null(base_url != NULL ? base_url : d->o.base_url);
  s->h.system = dup_or_null(system);
  s->h.fallback_model = dup_or_null(
      json_string_value(json_object_get(k->params, "fallback_model")));
  s->api_key = dup_or_null(key); /* memory only */
  if (json_object_get(k->params, "mcp_config") != NULL ||
      json_object_get(k->params, "hooks_config") != NULL) {
    s->own_config = true;
    s->mcp_config = config_text(json_object_get(k->params, "mcp_config"));
    s->hooks_config =
        config_text(json_object_get(k->params, "hooks_config"));
  }
  s->h.sandbox = dup_or_null(sandbox);
  s->h.max_tokens = json_integer_value(json_object_get(k->params,
                                                       "max_tokens"));
  s->h.max_turns = json_integer_value(json_object_get(k->params,
                                                      "max_turns"));
  s->h.network = json_is_true(json_object_get(k->params, "network"));
  if (json_is_object(json_object_get(k->params, "paths"))) {
    s->h.paths = json_deep_copy(json_object_get(k->params, "paths"));
  }
  if (json_is_object(json_object_get(k->params, "timeouts"))) {
    s->h.timeouts = json_deep_copy(json_object_get(k->params, "timeouts"));
  }
  {
    json_t *ask = json_object_get(k->params, "ask_tools");

    s->h.ask_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
    ask = json_object_get(k->params, "allow_tools");
    s->h.allow_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
    ask = json_object_get(k->params, "deny_tools");
    s->h.deny_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
    ask = json_object_get(k->params, "limits");
    s->h.limits = json_is_object(ask) ? json_deep_copy(ask) : NULL;
    ask = json_object_get(k->params, "context");
    s->h.context = json_is_object(ask) && json_object_size(ask) > 0
                       ? json_deep_copy(ask)
                       : NULL;
    ask = json_object_get(k->params, "subagents");
    s->h.subagents = json_is_object(ask) && json_object_size(ask) > 0
                         ? json_deep_copy(ask)
                         : NULL;
  }
  s->h.created_ms = s->updated_ms = al__wall_ms();
  why[0] = '\0';
  if ((rc = al__session_start(s, 1, 1, why, sizeof(why))) != 0) {
    /* The agent refusing its settings, or the transcript not opening
     * (the state directory: typed, as for a failed header sync). */
    bool agent = strstr(why, "agent") != NULL;

    al__session_free(s);
    al__daemon_reply_err(k->c, k->id,
                         agent ? AL_RPC_INVALID_PARAMS : AL_RPC_STORAGE, why,
                         agent ? NULL
                               : json_pack("{s:s, s:s}", "error",
                                           al_err_name(rc), "code",
                                           al_strerror(rc)));
    return;
  }
  b = al__tx_header_record(s->id, &s->h);
  if (b != NULL) {
    al__session_tx_put_rec(s, b);
    al__blob_unref(b);
  }
  /* Answer once the header is on disk: a session whose id a client holds
   * survives a crash that follows at once. */
  {
    pending_resume_t *p = al_calloc(1, sizeof(*p));

    if (p == NULL || al__tx_flush(s->tx, al__daemon_on_created, s) != 0) {
      al_free(p);
      al__daemon_reply(k->c, k->id, al__session_info(s));
      return;
    }
    p->c = k->c;
    p->id = json_deep_copy(k->id);
    al_list_insert_tail(&s->resumes, &p->node);
    s->loading = true; /* no turn, resume or close until answered */
    client_daemon(k->c)->pending++;
  }
}

/* session/create's answer, once the header is durable (or failed). */
void al__daemon_on_created(al_tx_t *tx, void *data) {
  session_t *s = data;
  al_daemon_t *d = s->d;
  int err = al__tx_error(tx);

  s->loading = false;
  while (!al_list_empty(&s->resumes)) {
    pending_resume_t *p =
        AL_CONTAINER_OF(s->resumes.next, pending_resume_t, node);

    al_list_remove(&p->node);
    if (p->c != NULL && !p->c->closing) {
      if (err == 0) {
        al__daemon_reply(p->c, p->id, al__session_info(s));
      } else {
        char msg[160];

        /* Typed (issue 22): a full state disk is the user's to fix, not
         * an internal error. */
        snprintf(msg, sizeof(msg), "cannot write the transcript: %s",
                 al_strerror(err));
        al__daemon_reply_err(p->c, p->id, AL_RPC_STORAGE, msg,
                             json_pack("{s:s, s:s}", "error",
                                       al_err_name(err), "code",
                                       al_strerror(err)));
      }
    }
    json_decref(p->id);
    al_free(p);
  }
  d->pending--;
  if (err != 0 && !s->closing) {
    al__session_close(s);
    return;
  }
  if (s->closing) {
    al__session_maybe_free(s);
  }
  al__daemon_maybe_exit(d);
}

static void m_session_list(const call_t *k) {
  al_daemon_t *d = client_daemon(k->c);
  json_t *arr = json_array();
  al_list_t *pos;

  /* Newest activity first: the list is short; insertion sort on output. */
  al_list_foreach(pos, &d->sessions) {
    session_t *s = AL_CONTAINER_OF(pos, session_t, node);
    json_t *o;
    size_t i;
    size_t w = 0;
    al_list_t *p2;

    if (s->closing) {
      continue;
    }
    al_list_foreach(p2, &s->subs) { w++; }
    o = json_pack("{s:s, s:s?, s:s?, s:s, s:I, s:I, s:s?, s:b, s:b, s:I}",
                  "session", s->id, "cwd", s->h.cwd, "model", s->h.model,
                  "provider", s->h.provider != NULL ? s->h.provider : "anthropic",
                  "created_ms", (json_int_t)s->h.created_ms, "updated_ms",
                  (json_int_t)s->updated_ms, "title", s->title, "loaded",
                  s->loaded, "running", s->running, "watchers",
                  (json_int_t)w);
    if (o != NULL) {
      json_object_set_new(o, "named", json_boolean(s->named));
    }
    if (o == NULL) {
      continue;
    }
    if (s->h.parent != NULL) {
      /* A sub-agent's transcript: clients may list it under its parent. */
      json_object_set(o, "parent", s->h.parent);
    }
    for (i = 0; i < json_array_size(arr); i++) {
      json_t *x = json_array_get(arr, i);

      if (json_integer_value(json_object_get(x, "updated_ms")) <
          (json_int_t)s->updated_ms) {
        break;
      }
    }
    json_array_insert_new(arr, i, o);
  }
  al__daemon_reply(k->c, k->id, json_pack("{s:o}", "sessions", arr));
}

void al__daemon_subscribe(session_t *s, client_t *c, const json_t *id,
                          const json_t *params) {
  call_t kk = {c, id, (json_t *)params};
  const call_t *k = &kk;
  json_t *since = json_object_get(k->params, "since_seq");
  sub_t *sub;
  uint64_t from = 0;
  bool replay = false;
  json_t *first = json_null();

  if (since != NULL && !json_is_null(since)) {
    if (!json_is_integer(since) || json_integer_value(since) < 0) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                "since_seq must be a non-negative integer", NULL);
      return;
    }
    replay = true;
    from = (uint64_t)json_integer_value(since);
  }
  sub = al__sub_find(s, k->c);
  if (sub != NULL) {
    al__sub_free(sub);
  }
  sub = al_calloc(1, sizeof(*sub));
  if (sub == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  sub->s = s;
  sub->c = k->c;
  if (replay) {
    size_t idx = al__ring_find(s, from + 1);

    if (idx < s->ring_n) {
      json_decref(first);
      first = json_integer((json_int_t)al__ring_at(s, idx)->seq);
      sub->catching = true;
      sub->next = al__ring_at(s, idx)->seq;
    }
  }
  al__daemon_reply(k->c, k->id,
        json_pack("{s:s, s:I, s:o}", "session", s->id, "next_seq",
                  (json_int_t)s->next_seq, "replay_from", first));
  if (k->c->closing) {
    al_free(sub);
    return;
  }
  al_list_insert_tail(&s->subs, &sub->snode);
  al_list_insert_tail(&k->c->subs, &sub->cnode);
  al__sub_pump(sub);
}

static void queue_load(const call_t *k, session_t *s,
                       void (*then)(session_t *, client_t *, const json_t *,
                                    const json_t *));

/* A session the daemon unloaded (idle) loads again first (issue 22). */
static void m_session_subscribe(const call_t *k) {
  session_t *s = need_session(k, false);

  if (s == NULL) {
    return;
  }
  if (!s->loaded || s->unloading) {
    queue_load(k, s, al__daemon_subscribe);
    return;
  }
  al__daemon_subscribe(s, k->c, k->id, k->params);
}

static void m_session_unsubscribe(const call_t *k) {
  session_t *s = need_session(k, false);
  sub_t *sub;

  if (s == NULL) {
    return;
  }
  sub = al__sub_find(s, k->c);
  if (sub != NULL) {
    al__sub_free(sub);
  }
  al__daemon_reply(k->c, k->id, json_pack("{s:b}", "unsubscribed", sub != NULL));
}

void al__daemon_turn_send(session_t *s, client_t *c, const json_t *id,
                          const json_t *params) {
  call_t kk = {c, id, (json_t *)params};
  const call_t *k = &kk;
  json_t *input = json_object_get(k->params, "input");
  int rc;

  if (!json_is_string(input) || json_string_length(input) == 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "input must be a non-empty string", NULL);
    return;
  }
  if (strlen(json_string_value(input)) != json_string_length(input)) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "input must not contain NUL", NULL);
    return;
  }
  if (al_agent_running(s->agent)) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_RUN_ACTIVE, "a run is active",
              json_pack("{s:I}", "run", (json_int_t)s->run));
    return;
  }
  /* A run's tools need descriptors of their own (pipes, a pidfd): the
   * reserve must be there, as it is for a new session. */
  if (!al__daemon_fd_admit(s->d, s, k->c, k->id, 0, "start a run")) {
    return;
  }
  rc = al_agent_run(s->agent, json_string_value(input));
  if (rc == AL_EBUSY) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_RUN_ACTIVE, "a run is active",
              json_pack("{s:I}", "run", (json_int_t)s->run));
    return;
  }
  if (rc != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, al_strerror(rc), NULL);
    return;
  }
  if (k->c->closing) {
    return;
  }
  al__daemon_reply(k->c, k->id, json_pack("{s:I}", "run", (json_int_t)s->run));
  al__daemon_idle_check(s->d);
}

/* A session the daemon unloaded (idle, for descriptors) loads again
 * first: its clients need not know (issue 22). */
static void m_turn_send(const call_t *k) {
  session_t *s = need_session(k, false);

  if (s == NULL) {
    return;
  }
  if (!s->loaded || s->unloading) {
    queue_load(k, s, al__daemon_turn_send);
    return;
  }
  al__daemon_turn_send(s, k->c, k->id, k->params);
}

static void m_turn_cancel(const call_t *k) {
  session_t *s = need_session(k, true);
  json_t *run = json_object_get(k->params, "run");
  bool ok = false;

  if (s == NULL) {
    return;
  }
  if (run != NULL && !json_is_null(run) && !json_is_integer(run)) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, "run must be an integer",
              NULL);
    return;
  }
  if (al_agent_running(s->agent) &&
      (run == NULL || json_is_null(run) ||
       (uint64_t)json_integer_value(run) == s->run)) {
    ok = al_agent_cancel(s->agent) == 0;
  }
  if (!k->c->closing) {
    al__daemon_reply(k->c, k->id, json_pack("{s:b}", "cancelled", ok));
  }
}

static void m_approval_respond(const call_t *k) {
  session_t *s = need_session(k, true);
  const char *req, *dec, *reason;
  al_approval_t a;
  al_list_t *pos, *next;
  int rc;

  if (s == NULL || !popt_str(k, "request", &req) ||
      !popt_str(k, "decision", &dec) || !popt_str(k, "reason", &reason)) {
    return;
  }
  if (req == NULL || dec == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "request and decision are required", NULL);
    return;
  }
  if (strcmp(dec, "allow") == 0) {
    a = AL_APPROVE_ALLOW;
  } else if (strcmp(dec, "deny") == 0) {
    a = AL_APPROVE_DENY;
  } else if (strcmp(dec, "always") == 0) {
    a = AL_APPROVE_ALWAYS;
  } else {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "decision must be allow, deny or always", NULL);
    return;
  }
  rc = al_agent_approve(s->agent, req, a);
  if (rc == AL_ENOTFOUND) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_NO_SUCH_APPROVAL,
              "no such pending approval (already resolved, or the run "
              "ended)",
              json_pack("{s:s}", "request", req));
    return;
  }
  if (rc != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, al_strerror(rc), NULL);
    return;
  }
  /* Every watcher learns who resolved it. */
  for (pos = s->subs.next; pos != &s->subs; pos = next) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, snode);

    next = pos->next;
    al__dclient_send(sub->c,
                al_rpc_notification_new(
                    "approval/resolved",
                    json_pack("{s:s, s:s, s:s, s:s?, s:s}", "session", s->id,
                              "request", req, "decision", dec, "reason",
                              reason, "by", k->c->id)));
  }
  if (!k->c->closing) {
    al__daemon_reply(k->c, k->id, json_pack("{s:b}", "resolved", 1));
  }
}

/* Compaction (docs/context.md): at once on an idle session, before the
 * next request during a run; compaction_started / compaction_completed
 * follow as events. */
static void m_session_compact(const call_t *k) {
  session_t *s = need_session(k, true);
  const char *instructions = NULL;
  bool deferred;
  int rc;

  if (s == NULL || !popt_str(k, "instructions", &instructions)) {
    return;
  }
  deferred = al_agent_running(s->agent);
  rc = al_agent_compact(s->agent, instructions);
  if (rc == AL_EBUSY) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_RUN_ACTIVE,
                         "a compaction is already running", NULL);
    return;
  }
  if (rc != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, al_strerror(rc),
                         NULL);
    return;
  }
  if (!k->c->closing) {
    al__daemon_reply(k->c, k->id,
                     json_pack("{s:b, s:b}", "compacting", 1, "deferred",
                               deferred));
  }
}

static json_t *usage_json(const al_event_usage_t *u) {
  return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens",
                   (json_int_t)u->input_tokens, "output_tokens",
                   (json_int_t)u->output_tokens, "cache_read_input_tokens",
                   (json_int_t)u->cache_read_input_tokens,
                   "cache_creation_input_tokens",
                   (json_int_t)u->cache_creation_input_tokens);
}

static void m_session_usage(const call_t *k) {
  session_t *s = need_session(k, true);
  al_agent_stats_t st;
  json_t *tot;
  json_t *last;

  if (s == NULL) {
    return;
  }
  al_agent_stats(s->agent, &st);
  tot = usage_json(&s->totals);
  json_object_set_new(tot, "runs", json_integer((json_int_t)s->runs));
  last = json_pack("{s:I, s:I, s:I, s:I, s:i, s:i, s:I, s:I}", "input_tokens",
                   (json_int_t)st.input_tokens, "output_tokens",
                   (json_int_t)st.output_tokens, "cache_read_input_tokens",
                   (json_int_t)st.cache_read_input_tokens,
                   "cache_creation_input_tokens",
                   (json_int_t)st.cache_creation_input_tokens, "turns",
                   (int)st.turns, "requests", (int)st.requests,
                   "duration_ms", (json_int_t)st.duration_ms,
                   "duration_api_ms", (json_int_t)st.duration_api_ms);
  {
    /* Dollars from the catalogue's list prices, the same computation as
     * `agentloop run` (al_model_cost_usd): null when the model has none.
     * The session's cost is at the current model's prices. */
    al_model_info_t mi;
    double ses, run;

    al_agent_model_info(s->agent, &mi);
    ses = al_model_cost_usd(&mi, s->totals.input_tokens,
                            s->totals.output_tokens,
                            s->totals.cache_read_input_tokens,
                            s->totals.cache_creation_input_tokens);
    run = al_model_cost_usd(&mi, st.input_tokens, st.output_tokens,
                            st.cache_read_input_tokens,
                            st.cache_creation_input_tokens);
    json_object_set_new(tot, "cost_usd", ses >= 0 ? json_real(ses)
                                                  : json_null());
    json_object_set_new(last, "cost_usd", run >= 0 ? json_real(run)
                                                   : json_null());
    al__daemon_reply(k->c, k->id,
                     json_pack("{s:o, s:o, s:o}", "session", tot, "last_run",
                               last, "cost_usd",
                               ses >= 0 ? json_real(ses) : json_null()));
  }
}

static void m_tools_list(const call_t *k) {
  al_daemon_t *d = client_daemon(k->c);
  session_t *s = NULL;
  al_agent_t *tmp = NULL;
  al_agent_t *a;
  char *txt = NULL;
  json_t *tools;

  if (json_object_get(k->params, "session") != NULL) {
    if ((s = need_session(k, true)) == NULL) {
      return;
    }
    a = s->agent;
  } else {
    al_agent_options_t ao;
    char cwd[4096];
    size_t n = sizeof(cwd);

    /* A throwaway agent with the defaults: it never runs, so it holds no
     * active handle and closes on the next iteration. */
    al_agent_options_init(&ao);
    ao.provider = d->o.provider;
    ao.base_url = d->o.base_url;
    ao.model = d->o.model;
    ao.client = d->http;
    ao.builtin_tools = true;
    ao.tools_d = true;
    ao.workspace = uv_cwd(cwd, &n) == 0 ? cwd : "/";
    if (al_agent_new(d->loop, &ao, &tmp) != 0) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR,
                "cannot list tools: bad default provider or base URL", NULL);
      return;
    }
    a = tmp;
  }
  if (al_agent_tools_json(a, &txt) != 0) {
    txt = NULL;
  }
  tools = txt != NULL ? json_loads(txt, 0, NULL) : NULL;
  al_free(txt);
  if (tmp != NULL) {
    al_agent_close(tmp, NULL);
  }
  if (tools == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  /* The agent's own listing: tools, tools.d load errors (file:line:col)
   * and the sandbox mode, passed through unchanged. */
  if (!json_is_object(tools)) {
    json_decref(tools);
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "bad tool listing", NULL);
    return;
  }
  al__daemon_reply(k->c, k->id, tools);
}

static void m_shutdown(const call_t *k) {
  al__daemon_reply(k->c, k->id, json_pack("{s:b}", "ok", 1));
  al__daemon_shutdown(client_daemon(k->c));
}

/* ---- session/resume (transcript load in the threadpool) ----------------------- */

void al__daemon_resume_reply(session_t *s, client_t *c, const json_t *id) {
  json_t *info = al__session_info(s);
  const json_t *m = NULL;
  char *h = NULL;

  if (al_agent_history_json(s->agent, &h) == 0) {
    json_t *hj = json_loads(h, 0, NULL);

    m = json_object_get(hj, "messages");
    json_object_set_new(info, "messages",
                        json_integer((json_int_t)json_array_size(m)));
    json_decref(hj);
    al_free(h);
  }
  json_object_set(info, "recovered",
                  s->recovered != NULL ? s->recovered : json_null());
  json_object_set_new(info, "children",
                      s->child_links != NULL ? json_incref(s->child_links)
                                             : json_array());
  al__daemon_reply(c, id, info);
}
/* Queues k (a session/resume when then is NULL, else a request that
 * `then` runs on the loaded session) on s's load: started now, or when
 * s's load or unload in flight ends; answered by al__session_load_done.
 * Replies itself when it cannot. */
static void queue_load(const call_t *k, session_t *s,
                       void (*then)(session_t *, client_t *, const json_t *,
                                    const json_t *)) {
  al_daemon_t *d = client_daemon(k->c);
  pending_resume_t *p;

  if (!s->loading && !s->unloading) {
    if (d->nloaded >= d->o.max_sessions) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_OVERLOADED,
                           "too many sessions", NULL);
      return;
    }
    if (!al__daemon_fd_admit(d, NULL, k->c, k->id, d->o.session_fds,
                             "load the session")) {
      if (s->discovered && !s->loaded && al_list_empty(&s->resumes)) {
        al__session_free(s);
      }
      return;
    }
  }
  p = al_calloc(1, sizeof(*p));
  if (p == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR,
                         "out of memory", NULL);
    return;
  }
  p->c = k->c;
  p->id = json_deep_copy(k->id);
  p->params = k->params != NULL ? json_incref(k->params) : NULL;
  p->then = then;
  al_list_insert_tail(&s->resumes, &p->node);
  if (s->loading || s->unloading) {
    return;
  }
  if (uv_queue_work(d->loop, &s->work, al__session_load_work,
                    al__session_load_done) != 0) {
    al_list_remove(&p->node);
    json_decref(p->id);
    json_decref(p->params);
    al_free(p);
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR,
                         "cannot queue the load", NULL);
    return;
  }
  s->loading = true;
  d->pending++;
}

static void m_session_resume(const call_t *k) {
  al_daemon_t *d = client_daemon(k->c);
  session_t *s;
  const char *v;
  const char *id = NULL;

  /* A transcript written after the startup scan (a headless run's) is
   * found by its id: the load (on the threadpool) tells whether it
   * exists; a failed load drops the entry again. */
  if (popt_str(k, "session", &id) && id != NULL &&
      al__session_id_valid(id) && al__session_find(d, id) == NULL) {
    s = al__session_alloc(d, id);
    if (s != NULL) {
      s->discovered = true;
      s->updated_ms = 0;
    }
  }
  s = need_session(k, false);
  if (s == NULL) {
    return;
  }
  if (!popt_str(k, "model", &v) || !popt_str(k, "base_url", &v) ||
      !check_base_url(k, v) || !popt_str(k, "system", &v) ||
      !popt_str(k, "api_key", &v) ||
      !popt_str(k, "provider", &v) || !check_provider(k, v)) {
    return;
  }
  if (s->unloading) {
    queue_load(k, s, NULL); /* after the unload (unload_done) */
    return;
  }
  if (s->loaded) {
    /* In memory already: it keeps its settings (another shell resuming
     * it must not re-point the chat attached to it, issue 22) unless the
     * client asks ("configure": true); then, as session/configure, when
     * no run is active (during a run they wait for session/configure),
     * and the other watchers are told. */
    bool changed = false;
    char why[256];

    if (json_is_true(json_object_get(k->params, "configure")) &&
        al__session_reconfigure(s, k->params, k->c, &changed, why,
                                sizeof(why)) != 0 &&
        changed && !al_agent_running(s->agent)) {
      al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why, NULL);
      return;
    }
    al__daemon_resume_reply(s, k->c, k->id);
    return;
  }
  queue_load(k, s, NULL);
}

/* session/configure: the client's settings for the next run (/model). */
static void m_session_configure(const call_t *k) {
  session_t *s = need_session(k, true);
  const char *v;
  bool changed;
  char why[256];
  int rc;

  if (s == NULL || !popt_str(k, "model", &v) ||
      !popt_str(k, "base_url", &v) || !check_base_url(k, v) ||
      !popt_str(k, "api_key", &v) || !popt_str(k, "provider", &v) ||
      !check_provider(k, v)) {
    return;
  }
  rc = al__session_reconfigure(s, k->params, k->c, &changed, why,
                               sizeof(why));
  if (rc == AL_EBUSY) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_RUN_ACTIVE, why,
                         json_pack("{s:I}", "run", (json_int_t)s->run));
    return;
  }
  if (rc != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why, NULL);
    return;
  }
  {
    json_t *info = al__session_info(s);

    json_object_set_new(info, "changed", json_boolean(changed));
    al__daemon_reply(k->c, k->id, info);
  }
}

/* session/rename: a title record continues the transcript's chain (the
 * header is never edited); session/list shows it from then on. */
static void m_session_rename(const call_t *k) {
  session_t *s = need_session(k, true);
  const char *title = NULL;
  const char *why;
  al_blob_t *b;
  char *dup;

  if (s == NULL || !popt_str(k, "title", &title)) {
    return;
  }
  if ((why = al__tx_title_check(title)) != NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why,
                         json_pack("{s:i}", "max_bytes", AL_TX_TITLE_MAX));
    return;
  }
  b = al__tx_title_record(title);
  dup = al_strdup(title);
  if (b == NULL || dup == NULL) {
    if (b != NULL) {
      al__blob_unref(b);
    }
    al_free(dup);
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory",
                         NULL);
    return;
  }
  al__session_tx_put_rec(s, b);
  al__blob_unref(b);
  al_free(s->title);
  s->title = dup;
  s->named = true;
  al__daemon_reply(k->c, k->id, json_pack("{s:s, s:s}", "session", s->id,
                                          "title", s->title));
}

/* task/list: the session's sub-agents (al_agent_tasks_json). A session
 * not loaded has none (closing the agent ended its children). */
static void m_task_list(const call_t *k) {
  session_t *s = need_session(k, false);
  char *txt = NULL;
  json_t *tasks;
  int rc;

  if (s == NULL) {
    return;
  }
  if (!s->loaded || s->unloading || s->agent == NULL) {
    al__daemon_reply(k->c, k->id, json_pack("{s:[]}", "tasks"));
    return;
  }
  rc = al_agent_tasks_json(s->agent, &txt);
  tasks = rc == 0 && txt != NULL ? json_loads(txt, 0, NULL) : NULL;
  al_free(txt);
  if (!json_is_array(tasks)) {
    json_decref(tasks);
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR,
                         rc != 0 ? al_strerror(rc) : "out of memory", NULL);
    return;
  }
  al__daemon_reply(k->c, k->id, json_pack("{s:o}", "tasks", tasks));
}

/* task/cancel: one running sub-agent (and its own children and tools);
 * its task call's result, or its delivered result, says cancelled. */
static void m_task_cancel(const call_t *k) {
  session_t *s = need_session(k, false);
  const char *task;
  int rc = AL_ENOENT;

  if (s == NULL || !popt_str(k, "task", &task)) {
    return;
  }
  if (task == NULL) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                         "task is required", NULL);
    return;
  }
  if (s->loaded && !s->unloading && s->agent != NULL) {
    rc = al_agent_task_cancel(s->agent, task);
  }
  if (rc == AL_ENOENT || rc == AL_ENOTFOUND) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                         "unknown task (no such sub-agent running)",
                         json_pack("{s:s, s:s}", "session", s->id, "task",
                                   task));
    return;
  }
  if (rc != 0) {
    al__daemon_reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, al_strerror(rc),
                         NULL);
    return;
  }
  al__daemon_reply(k->c, k->id, json_object());
}

typedef struct {
  const char *name;
  void (*fn)(const call_t *k);
} method_t;

static const method_t methods[] = {
    {"initialize", m_initialize},
    {"session/create", m_session_create},
    {"session/list", m_session_list},
    {"session/resume", m_session_resume},
    {"session/configure", m_session_configure},
    {"session/rename", m_session_rename},
    {"session/subscribe", m_session_subscribe},
    {"session/unsubscribe", m_session_unsubscribe},
    {"turn/send", m_turn_send},
    {"turn/cancel", m_turn_cancel},
    {"approval/respond", m_approval_respond},
    {"session/compact", m_session_compact},
    {"session/usage", m_session_usage},
    {"tools/list", m_tools_list},
    {"task/list", m_task_list},
    {"task/cancel", m_task_cancel},
    {"shutdown", m_shutdown},
};

/* ---- clients ------------------------------------------------------------------ */

void al__daemon_on_line(client_t *c, const char *line, size_t len,
                        bool too_long) {
  al_rpc_msg_t msg;
  json_t *bad_id = NULL;
  char why[200];
  size_t i;
  int rc;
  call_t k;

  if (too_long) {
    al__daemon_reply_err(c, NULL, AL_RPC_LINE_TOO_LONG, "line too long",
              json_pack("{s:I}", "limit", (json_int_t)client_daemon(c)->o.max_line));
    return;
  }
  for (i = 0; i < len; i++) {
    if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
      break;
    }
  }
  if (i == len) {
    return; /* blank line */
  }
  rc = al_rpc_parse(line, len, &msg, &bad_id, why, sizeof(why));
  if (rc != 0) {
    al__daemon_reply_err(c, bad_id, rc, why, NULL);
    json_decref(bad_id);
    return;
  }
  if (msg.kind != AL_RPC_MSG_REQUEST) {
    al__daemon_reply_err(c, msg.id, AL_RPC_INVALID_REQUEST,
              msg.kind == AL_RPC_MSG_RESPONSE
                  ? "invalid request: the daemon sends no requests"
                  : "invalid request: id is required",
              NULL);
    al_rpc_msg_free(&msg);
    return;
  }
  k.c = c;
  k.id = msg.id;
  k.params = msg.params;
  for (i = 0; i < AL_ARRAY_SIZE(methods); i++) {
    if (strcmp(methods[i].name, msg.method) == 0) {
      break;
    }
  }
  if (i == AL_ARRAY_SIZE(methods)) {
    al__daemon_reply_err(c, msg.id, AL_RPC_METHOD_NOT_FOUND, "method not found",
              json_pack("{s:s}", "method", msg.method));
  } else if (!c->initialized && methods[i].fn != m_initialize) {
    al__daemon_reply_err(c, msg.id, AL_RPC_NOT_INITIALIZED,
              "not initialized: send initialize first", NULL);
  } else if (client_daemon(c)->shutting_down && methods[i].fn != m_initialize) {
    al__daemon_reply_err(c, msg.id, AL_RPC_OVERLOADED, "the daemon is shutting down",
              NULL);
  } else {
    methods[i].fn(&k);
  }
  al_rpc_msg_free(&msg);
}
