/* The agent's MCP servers (SPEC §16): their tools in the registry, the
 * startup wait, and state events.
 *
 * Servers start with the agent (al_agent_new) and never hold up a run for
 * longer than the configured startup wait: a run that begins while some
 * are still starting waits at most what is left of startup_wait_ms since
 * they started, then goes on; a late server's tools join at the next turn
 * boundary (start_turn calls al__agent_mcp_sync). A changed tool list is
 * applied there too, so the tool definitions (and the prompt-cache prefix)
 * never change inside a turn.
 *
 * Names: mcp__<server>__<tool> (al__mcp_tool_name). Built-in, in-process
 * and tools.d names are registered first and win; an MCP tool whose name
 * is taken gets a hash suffix and an mcp_warning event, never silently.
 * Two servers offering the same tool name also get a warning (the prefix
 * keeps them apart, but the model sees two similar tools).
 *
 * Categories: readOnlyHint -> read; destructiveHint -> admin (needs an
 * approval or --allow-tool); otherwise write. Concurrency-safe when
 * readOnlyHint and not destructiveHint, or as configured per tool. */
#include <string.h>

#include "loop/agent_priv.h"
#include "mcp/mcp.h"
#include "tools/tools.h"

static const char cancelled_text[] = AL_HISTORY_CANCELLED_TEXT;

/* ---- events ------------------------------------------------------------------ */

static bool post_mcp_tokens(al_agent_t *a, al_event_type_t type,
                            const al_mcp_server_t *s, const char *msg,
                            uint32_t added, uint32_t removed,
                            uint64_t tokens) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = type;
  ev.u.mcp.server = ag_slice(al__mcp_server_name(s));
  ev.u.mcp.state = ag_slice(al__mcp_state_name(al__mcp_server_state(s)));
  ev.u.mcp.error = ag_slice(msg);
  ev.u.mcp.tools = (uint32_t)json_array_size(al__mcp_server_tools(s));
  ev.u.mcp.ms = al__mcp_server_ms(s);
  ev.u.mcp.added = added;
  ev.u.mcp.removed = removed;
  ev.u.mcp.definition_tokens = tokens;
  return al__agent_post(a, &ev);
}

static bool post_mcp(al_agent_t *a, al_event_type_t type,
                     const al_mcp_server_t *s, const char *msg,
                     uint32_t added, uint32_t removed) {
  return post_mcp_tokens(a, type, s, msg, added, removed, 0);
}

/* What the server's registered definitions cost per request: the bytes of
 * their JSON as the provider gets it, at about 4 bytes per token. */
static uint64_t definition_tokens(al_agent_t *a, const al_mcp_server_t *s) {
  al_list_t *pos;
  uint64_t bytes = 0;

  al_list_foreach(pos, &a->tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);
    char *js;

    if (t->mcp != s || t->removed) {
      continue;
    }
    js = json_dumps(t->schema, JSON_COMPACT);
    bytes += strlen(t->name) + strlen(t->description) +
             (js != NULL ? strlen(js) : 0) + 40;
    al_free(js);
  }
  return (bytes + 3) / 4;
}

static void on_state(al_mcp_t *m, al_mcp_server_t *s, void *data) {
  al_agent_t *a = data;
  al_mcp_state_t st = al__mcp_server_state(s);

  (void)m;
  if (post_mcp(a, AL_EVENT_MCP_SERVER_STATE, s,
               st == AL_MCP_FAILED || st == AL_MCP_RESTARTING
                   ? al__mcp_server_error(s)
                   : NULL,
               0, 0)) {
    return;
  }
  if (a->mcp_waiting && al__mcp_settled(a->mcp)) {
    al__agent_mcp_wait_over(a);
  }
}

/* ---- the tool ------------------------------------------------------------------ */

static void call_progress(al_mcp_call_t *c, const char *text, void *data) {
  al_tool_call_t *call = data;
  ag_tool_t *t = call->impl->data;
  al_event_t ev;

  (void)c;
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TOOL_PROGRESS;
  ev.u.tool.call_id = ag_slice(call->id);
  ev.u.tool.name = ag_slice(call->name);
  ev.u.tool.content = ag_slice(text);
  al__agent_post(t->agent, &ev);
}

static void call_done(al_mcp_call_t *c, bool is_error, const char *text,
                      size_t len, void *data) {
  al_tool_call_t *call = data;

  (void)c;
  call->tool_data = NULL;
  al__executor_call_complete(call, is_error, text, len);
}

static int mcp_start(al_tool_call_t *call) {
  ag_tool_t *t = call->impl->data;
  al_mcp_call_t *c;
  al_buf_t b;
  int rc;

  rc = al__mcp_call(t->mcp, t->mcp_tool, call->input, call_progress,
                    call_done, call, &c);
  if (rc == 0) {
    call->tool_data = c;
    return 0;
  }
  al_buf_init(&b, 16 * 1024);
  al_buf_printf(&b, "Error: MCP server '%s' is %s",
                al__mcp_server_name(t->mcp),
                al__mcp_state_name(al__mcp_server_state(t->mcp)));
  if (al__mcp_server_error(t->mcp) != NULL) {
    al_buf_printf(&b, ": %s", al__mcp_server_error(t->mcp));
  }
  return al__tool_fail_later(t->agent->loop, call, b.data);
}

static void mcp_cancel(al_tool_call_t *call) {
  al_mcp_call_t *c = call->tool_data;

  if (c == NULL) {
    return;
  }
  /* notifications/cancelled goes out; the result is given now, a late
   * answer is dropped. */
  al__mcp_call_cancel(c);
  call->tool_data = NULL;
  al__executor_call_complete(call, true, cancelled_text,
                             strlen(cancelled_text));
}

static bool mcp_safe(const al_tool_impl_t *impl, const json_t *input) {
  const ag_tool_t *t = impl->data;

  (void)input;
  return t->mcp_safe;
}

/* ---- registry ------------------------------------------------------------------ */

static bool hint(const json_t *tool, const char *key) {
  return json_is_true(json_object_get(json_object_get(tool, "annotations"), key));
}

static void remove_def(al_agent_t *a, const char *name) {
  size_t i;
  json_t *d;

  json_array_foreach(a->tool_defs, i, d) {
    const char *n = json_string_value(json_object_get(d, "name"));

    if (n != NULL && strcmp(n, name) == 0) {
      json_array_remove(a->tool_defs, i);
      return;
    }
  }
}

/* Another ready server that lists a tool named `tool`, or NULL. */
static const char *other_server_with(al_agent_t *a, al_mcp_server_t *s,
                                     const char *tool) {
  size_t i, j;
  json_t *t;

  for (i = 0; i < al__mcp_count(a->mcp); i++) {
    al_mcp_server_t *o = al__mcp_server(a->mcp, i);

    if (o == s || a->mcp_gens[i] == 0) {
      continue;
    }
    json_array_foreach(al__mcp_server_tools(o), j, t) {
      const char *n = json_string_value(json_object_get(t, "name"));

      if (n != NULL && strcmp(n, tool) == 0) {
        return al__mcp_server_name(o);
      }
    }
  }
  return NULL;
}

static bool warn(al_agent_t *a, al_mcp_server_t *s, const char *fmt,
                 const char *x, const char *y, const char *z) {
  char msg[1024];

  snprintf(msg, sizeof(msg), fmt, x, y, z);
  return post_mcp(a, AL_EVENT_MCP_WARNING, s, msg, 0, 0);
}

/* Registers one tool of server s. Returns true when the run ended. */
static bool add_tool(al_agent_t *a, al_mcp_server_t *s, const json_t *tool,
                     uint32_t *added) {
  const al_mcp_server_config_t *cfg = al__mcp_server_config(s);
  const char *tname = json_string_value(json_object_get(tool, "name"));
  const char *desc = json_string_value(json_object_get(tool, "description"));
  const json_t *ov = json_object_get(cfg->tool_overrides, tname);
  const json_t *cs = json_object_get(ov, "concurrency_safe");
  bool ro = hint(tool, "readOnlyHint");
  bool destructive = hint(tool, "destructiveHint");
  al_tool_category_t cat = ro && !destructive ? AL_TOOL_READ
                           : destructive      ? AL_TOOL_ADMIN
                                              : AL_TOOL_WRITE;
  char name[65];
  char *schema;
  const char *other;
  ag_tool_t *t = NULL;
  int rc;

  al__mcp_tool_name(al__mcp_server_name(s), tname, name);
  if (al__agent_tool_find(a, name) != NULL) {
    char alt[128];
    char hashed[65];

    /* Taken (by a built-in, a tools.d tool or a sanitised twin): a
     * deterministic distinct name, reported. */
    snprintf(alt, sizeof(alt), "%s\x01", tname);
    al__mcp_tool_name(al__mcp_server_name(s), alt, hashed);
    if (warn(a, s, "tool '%s' would be named '%s', which is taken; it is "
                   "offered as '%s'",
             tname, name, hashed)) {
      return true;
    }
    memcpy(name, hashed, sizeof(name));
    if (al__agent_tool_find(a, name) != NULL) {
      return warn(a, s, "tool '%s' dropped: no free name for it%s%s", tname,
                  "", "");
    }
  }
  other = other_server_with(a, s, tname);
  if (other != NULL &&
      warn(a, s, "tool '%s' is also offered by server '%s'; the model sees "
                 "both, as '%s'",
           tname, other, name)) {
    return true;
  }
  schema = json_dumps(json_object_get(tool, "inputSchema"), JSON_COMPACT);
  if (schema == NULL) {
    return false;
  }
  rc = al__agent_add_entry(a, name, NULL, NULL,
                           desc != NULL ? desc : tname, schema, cat, &t);
  al_free(schema);
  if (rc != 0) {
    return warn(a, s, "tool '%s' dropped: %s%s", tname, al_strerror(rc), "");
  }
  t->mcp = s;
  t->mcp_tool = al_strdup(tname);
  t->mcp_safe = json_is_boolean(cs) ? json_is_true(cs) : ro && !destructive;
  t->source = "mcp";
  t->mcp_impl.name = t->name;
  t->mcp_impl.is_concurrency_safe = mcp_safe;
  t->mcp_impl.start = mcp_start;
  t->mcp_impl.cancel = mcp_cancel;
  t->mcp_impl.data = t;
  t->inner = &t->mcp_impl;
  (*added)++;
  return false;
}

/* Removes every registered tool of s; returns how many. */
static uint32_t remove_tools(al_agent_t *a, al_mcp_server_t *s) {
  al_list_t *pos;
  uint32_t n = 0;

  al_list_foreach(pos, &a->tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);

    if (t->mcp == s && !t->removed) {
      t->removed = true;
      remove_def(a, t->name);
      n++;
    }
  }
  return n;
}

bool al__agent_mcp_sync(al_agent_t *a) {
  size_t i, j;

  if (a->mcp == NULL) {
    return false;
  }
  for (i = 0; i < al__mcp_count(a->mcp); i++) {
    al_mcp_server_t *s = al__mcp_server(a->mcp, i);
    uint64_t gen = al__mcp_server_gen(s);
    bool usable = al__mcp_server_state(s) == AL_MCP_READY;
    uint32_t added = 0, removed;
    json_t *tool;

    if (!usable || gen == a->mcp_gens[i]) {
      continue; /* a failed server keeps its tools: calls say why */
    }
    removed = remove_tools(a, s);
    a->mcp_gens[i] = gen;
    json_array_foreach(al__mcp_server_tools(s), j, tool) {
      if (add_tool(a, s, tool, &added)) {
        return true;
      }
    }
    if (post_mcp_tokens(a, AL_EVENT_MCP_TOOLS_CHANGED, s, NULL, added,
                        removed, definition_tokens(a, s))) {
      return true;
    }
  }
  return false;
}

/* ---- life cycle ----------------------------------------------------------------- */

int al__agent_mcp_check(const al_agent_options_t *o) {
  al_mcp_config_t cfg;
  al_buf_t err;
  int rc;

  if (o->mcp_config == NULL) {
    return 0;
  }
  al_buf_init(&err, 4096);
  rc = al__mcp_config_parse(o->mcp_config, strlen(o->mcp_config), &cfg, &err);
  if (rc != 0) {
    al_log(AL_LOG_ERROR, "MCP configuration: %s",
           err.data != NULL ? err.data : "out of memory");
  } else {
    al__mcp_config_free(&cfg);
  }
  al_buf_free(&err);
  return rc;
}

void al__agent_mcp_init(al_agent_t *a, const al_agent_options_t *o) {
  al_mcp_config_t cfg;
  al_mcp_options_t mo;
  al_buf_t err;
  int rc;

  if (o->mcp_config == NULL) {
    return;
  }
  al_buf_init(&err, 4096);
  rc = al__mcp_config_parse(o->mcp_config, strlen(o->mcp_config), &cfg, &err);
  al_buf_free(&err);
  if (rc != 0) {
    return; /* al__agent_mcp_check passed: only out of memory */
  }
  if (cfg.n == 0) {
    al__mcp_config_free(&cfg);
    return;
  }
  a->mcp_gens = al_calloc(cfg.n, sizeof(*a->mcp_gens));
  if (a->mcp_gens == NULL) {
    al__mcp_config_free(&cfg);
    al_log(AL_LOG_ERROR, "MCP: out of memory; no server started");
    return;
  }
  al__mcp_options_init(&mo);
  mo.loop = a->loop;
  mo.workspace = a->workspace;
  mo.sandbox = a->sandbox;
  if (o->kill_grace_ms > 0) {
    mo.kill_grace_ms = o->kill_grace_ms;
    mo.shutdown_grace_ms = o->kill_grace_ms;
  }
  if (o->mcp_restart_base_ms > 0) {
    mo.restart_base_ms = o->mcp_restart_base_ms;
  }
  mo.on_state = on_state;
  mo.data = a;
  rc = al__mcp_new(&mo, &cfg, &a->mcp);
  al__mcp_config_free(&cfg);
  if (rc != 0) {
    al_log(AL_LOG_ERROR, "MCP: %s; no server started", al_strerror(rc));
    return;
  }
  a->mcp_t0 = al_now_ns();
  al__mcp_start(a->mcp);
}

bool al__agent_mcp_should_wait(al_agent_t *a, uint64_t *ms) {
  uint64_t wait, spent;

  if (a->mcp == NULL || al__mcp_settled(a->mcp)) {
    return false;
  }
  wait = al__mcp_startup_wait_ms(a->mcp);
  spent = (al_now_ns() - a->mcp_t0) / 1000000;
  if (spent >= wait) {
    return false;
  }
  *ms = wait - spent;
  return true;
}

static void on_mcp_closed(void *data) {
  al_agent_t *a = data;

  a->mcp = NULL;
  a->pending--;
  al__agent_maybe_finish(a);
}

void al__agent_mcp_close(al_agent_t *a) {
  if (a->mcp == NULL) {
    return;
  }
  a->pending++;
  al__mcp_close(a->mcp, on_mcp_closed, a);
}

json_t *al__agent_mcp_json(const al_agent_t *a) {
  json_t *arr = json_array();
  size_t i;

  for (i = 0; a->mcp != NULL && i < al__mcp_count(a->mcp); i++) {
    json_array_append_new(arr, al__mcp_server_json(al__mcp_server(a->mcp, i)));
  }
  return arr;
}
