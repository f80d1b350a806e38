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
 * Two servers offering the same tool name are no collision: the prefix
 * keeps their names apart, and nothing is said.
 *
 * A call to an mcp__ name that is not registered yet (the model knew the
 * name before the server was ready, or the project's .mcp.json is still
 * being read) waits for the server (ag_mcp_wait_t, bounded by the
 * server's own startup timeout) and is then handed to the registered tool
 * through its gate (permissions and hooks as for any call), or gets an
 * error naming the server and why. A direct call to a deferred tool runs
 * and loads its definition from the next turn on.
 *
 * Categories: readOnlyHint -> read; destructiveHint -> admin (needs an
 * approval or --allow-tool); otherwise write. Concurrency-safe when
 * readOnlyHint and not destructiveHint, or as configured per tool.
 *
 * Layers (STYLE §6.1): owns a->mcp. Registers and removes tools through
 * the registry (al__agent_add_entry, al__reg_def_add/remove); tells the
 * driver "start-up settled" through a->mcp.on_settled and never calls a
 * run transition (the driver's WAIT_MCP state is the wait). Calls down:
 * mcp/, the registry, the gate, core.c. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loop/agent_priv.h"
#include "mcp/mcp.h"
#include "tools/tools.h"

static const char cancelled_text[] = AL_HISTORY_CANCELLED_TEXT;

/* ---- events -------------------------------------------------------------- */

typedef struct {
  uint64_t tokens;          /* all of the server's definitions */
  uint64_t deferred_tokens; /* those left out of the request */
  uint32_t deferred;
  uint32_t tools;
} ag_cost_t;

/* state NULL: the server's own. */
static bool post_mcp_cost(al_agent_t *a, al_event_type_t type,
                          const al_mcp_server_t *s, const char *state,
                          const char *msg, uint32_t added, uint32_t removed,
                          const ag_cost_t *cost) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = type;
  ev.u.mcp.server = ag_slice(al__mcp_server_name(s));
  ev.u.mcp.state = ag_slice(
      state != NULL ? state : al__mcp_state_name(al__mcp_server_state(s)));
  ev.u.mcp.error = ag_slice(msg);
  ev.u.mcp.tools = (uint32_t)json_array_size(al__mcp_server_tools(s));
  ev.u.mcp.ms = al__mcp_server_ms(s);
  ev.u.mcp.added = added;
  ev.u.mcp.removed = removed;
  if (cost != NULL) {
    ev.u.mcp.definition_tokens = cost->tokens;
    ev.u.mcp.deferred = cost->deferred;
    ev.u.mcp.deferred_tokens = cost->deferred_tokens;
  }
  return al__agent_post(a, &ev);
}

static bool post_mcp(al_agent_t *a, al_event_type_t type,
                     const al_mcp_server_t *s, const char *msg,
                     uint32_t added, uint32_t removed) {
  return post_mcp_cost(a, type, s, NULL, msg, added, removed, NULL);
}

/* What one definition costs per request: the bytes of its JSON as the
 * provider gets it, at about 4 bytes per token. */
static uint64_t tool_tokens(const ag_tool_t *t) {
  char *js = json_dumps(t->schema, JSON_COMPACT);
  uint64_t bytes = strlen(t->name) + strlen(t->description) +
                   (js != NULL ? strlen(js) : 0) + 40;

  al_free(js);
  return (bytes + 3) / 4;
}

/* The registered definitions of server s (NULL: of every server). */
static ag_cost_t definition_cost(al_agent_t *a, const al_mcp_server_t *s) {
  al_list_t *pos;
  ag_cost_t c = {0, 0, 0, 0};

  al_list_foreach(pos, &a->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);
    uint64_t n;

    if (t->mcp == NULL || t->removed || (s != NULL && t->mcp != s)) {
      continue;
    }
    n = tool_tokens(t);
    c.tools++;
    c.tokens += n;
    if (t->mcp_deferred) {
      c.deferred++;
      c.deferred_tokens += n;
    }
  }
  return c;
}

static void wait_kick(al_agent_t *a);

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
  wait_kick(a); /* calls waiting for a server look again */
  if (al__mcp_settled(a->mcp.set)) {
    a->mcp.on_settled(a); /* the driver goes on if it waits */
  }
}

/* A ready server's server stream degraded or was given up (mcp_http.c):
 * mcp_server_state with the state `degraded` and the notice as error; the
 * server's own state is still ready (its calls work). */
static void on_notice(al_mcp_t *m, al_mcp_server_t *s, const char *text,
                      void *data) {
  (void)m;
  post_mcp_cost(data, AL_EVENT_MCP_SERVER_STATE, s, "degraded", text, 0, 0,
                NULL);
}

/* ---- the tool ------------------------------------------------------------ */

static int mcp_start(al_tool_call_t *call);

/* One call in flight: the server's call, and whether mcp_tool_call_begin
 * was posted (the end is posted only then, exactly once). */
typedef struct {
  al_mcp_call_t *c;
  bool begun;
} ag_mcp_call_t;

static bool post_call(ag_tool_t *t, al_event_type_t type,
                      const al_tool_call_t *call, bool is_error,
                      const char *end, uint64_t ms) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = type;
  ev.u.mcp_call.server = ag_slice(al__mcp_server_name(t->mcp));
  ev.u.mcp_call.tool = ag_slice(t->mcp_tool);
  ev.u.mcp_call.name = ag_slice(call->name);
  ev.u.mcp_call.call_id = ag_slice(call->id);
  ev.u.mcp_call.end = ag_slice(end);
  ev.u.mcp_call.is_error = is_error;
  ev.u.mcp_call.duration_ms = ms;
  return al__agent_post(t->agent, &ev);
}

bool al__agent_mcp_began(al_tool_call_t *call) {
  ag_tool_t *t;
  ag_mcp_call_t *mc = call->tool_data;

  if (call->impl == NULL || call->impl->start != mcp_start ||
      mc == NULL || mc->begun) {
    return false; /* not sent (the server was not ready), or cancelled */
  }
  t = call->impl->data;
  mc->begun = true;
  return post_call(t, AL_EVENT_MCP_TOOL_CALL_BEGIN, call, false, NULL, 0);
}

/* The end event, once, before the result goes to the executor. */
static void call_end(al_tool_call_t *call, ag_mcp_call_t *mc, bool is_error,
                     const char *end) {
  ag_tool_t *t = call->impl->data;

  call->tool_data = NULL;
  if (mc->begun) {
    post_call(t, AL_EVENT_MCP_TOOL_CALL_END, call, is_error, end,
              al__mcp_call_ms(mc->c));
  }
  al_free(mc);
}

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

  call_end(call, call->tool_data, is_error, al__mcp_call_end(c));
  al__executor_call_complete_blocks(call, is_error, text, len,
                                    al__mcp_call_blocks(c));
}

static int mcp_start(al_tool_call_t *call) {
  ag_tool_t *t = call->impl->data;
  ag_mcp_call_t *mc = al_calloc(1, sizeof(*mc));
  al_buf_t b;
  int rc;

  if (mc == NULL) {
    return AL_ENOMEM;
  }
  if (t->mcp_deferred && t->agent->mcp.loaded != NULL) {
    /* Named directly without its definition: it runs, and is sent from
     * the next turn boundary on, as if mcp_tool_search had found it. */
    json_object_set_new(t->agent->mcp.loaded, t->name, json_true());
  }
  rc = al__mcp_call(t->mcp, t->mcp_tool, call->input, call_progress,
                    call_done, call, &mc->c);
  if (rc == 0) {
    /* mcp_tool_call_begin follows tool_use_started (gate.c calls
     * al__agent_mcp_began), so a cancel from a subscriber of that event
     * finds a call with no begin and posts no end. */
    call->tool_data = mc;
    return 0;
  }
  al_free(mc);
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
  ag_mcp_call_t *mc = call->tool_data;
  uint64_t ms;

  if (mc == NULL) {
    return;
  }
  /* notifications/cancelled goes out; the result is given now, a late
   * answer is dropped. */
  ms = al__mcp_call_ms(mc->c);
  al__mcp_call_cancel(mc->c);
  call->tool_data = NULL;
  if (mc->begun) {
    post_call(call->impl->data, AL_EVENT_MCP_TOOL_CALL_END, call, true,
              "cancelled", ms);
  }
  al_free(mc);
  al__executor_call_complete(call, true, cancelled_text,
                             strlen(cancelled_text));
}

static bool mcp_safe(const al_tool_impl_t *impl, const json_t *input) {
  const ag_tool_t *t = impl->data;

  (void)input;
  return t->mcp_safe;
}

/* ---- registry ------------------------------------------------------------ */

static bool hint(const json_t *tool, const char *key) {
  return json_is_true(
      json_object_get(json_object_get(tool, "annotations"), key));
}


static bool warn(al_agent_t *a, al_mcp_server_t *s, const char *fmt,
                 const char *x, const char *y, const char *z) {
  char msg[1024];

  snprintf(msg, sizeof(msg), fmt, x, y, z);
  return post_mcp(a, AL_EVENT_MCP_WARNING, s, msg, 0, 0);
}

/* Whether a server's tool runs beside others: as configured per tool,
 * else read-only and not destructive by its hints. */
static bool tool_safe(const al_mcp_server_config_t *cfg, const json_t *tool) {
  const json_t *cs = json_object_get(
      json_object_get(cfg->tool_overrides,
                      json_string_value(json_object_get(tool, "name"))),
      "concurrency_safe");

  return json_is_boolean(cs) ? json_is_true(cs)
                             : hint(tool, "readOnlyHint") &&
                                   !hint(tool, "destructiveHint");
}

/* Registers one tool of server s. Returns true when the run ended. */
static bool add_tool(al_agent_t *a, al_mcp_server_t *s, const json_t *tool,
                     uint32_t *added) {
  const al_mcp_server_config_t *cfg = al__mcp_server_config(s);
  const char *tname = json_string_value(json_object_get(tool, "name"));
  const char *desc = json_string_value(json_object_get(tool, "description"));
  bool ro = hint(tool, "readOnlyHint");
  bool destructive = hint(tool, "destructiveHint");
  al_tool_category_t cat = ro && !destructive ? AL_TOOL_READ
                           : destructive      ? AL_TOOL_ADMIN
                                              : AL_TOOL_WRITE;
  char name[65];
  char *schema;
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
  /* The same tool name on another server is no collision: the server's
   * prefix keeps the names apart. */
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
  t->mcp_always = json_is_true(cfg->always_load);
  {
    size_t k;
    json_t *e;

    json_array_foreach(cfg->always_load, k, e) {
      t->mcp_always = t->mcp_always || strcmp(json_string_value(e), tname) == 0;
    }
  }
  t->mcp_tool = al_strdup(tname);
  t->mcp_safe = tool_safe(cfg, tool);
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

  al_list_foreach(pos, &a->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);

    if (t->mcp == s && !t->removed) {
      t->removed = true;
      if (!t->mcp_deferred) {
        al__reg_def_remove(a, t->name);
      }
      n++;
    }
  }
  return n;
}

/* ---- tool budget --------------------------------------------------------- */

static const char search_desc[] =
    "Find MCP tools that are not loaded yet. Some tools of the connected MCP "
    "servers are left out of your tool list to save context. Give keywords "
    "or an exact tool name; the matching tools' names and descriptions come "
    "back, and those tools become available to call from your next turn.";
static const char search_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"query\":{\"type\":\"string\",\"description\":\"Keywords or a tool "
    "name.\"},"
    "\"max_results\":{\"type\":\"number\",\"description\":\"At most this "
    "many tools (default 5, at most 20).\"}},\"required\":[\"query\"]}";

typedef struct {
  ag_tool_t *t;
  int score;
} ag_hit_t;

static bool has_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle), i;

  for (i = 0; n > 0 && hay[i] != '\0'; i++) {
    if (strncasecmp(hay + i, needle, n) == 0) {
      return true;
    }
  }
  return false;
}

/* Per word: an exact name 100, in the name 3, in the description 1. */
static int score(const ag_tool_t *t, json_t *words) {
  size_t i;
  json_t *w;
  int sc = 0;

  json_array_foreach(words, i, w) {
    const char *q = json_string_value(w);

    if (strcasecmp(q, t->name) == 0 || strcasecmp(q, t->mcp_tool) == 0) {
      sc += 100;
    } else if (has_ci(t->name, q)) {
      sc += 3;
    } else if (has_ci(t->description, q)) {
      sc += 1;
    }
  }
  return sc;
}

static int hit_cmp(const void *x, const void *y) {
  const ag_hit_t *a = x, *b = y;

  if (a->score != b->score) {
    return b->score - a->score;
  }
  return strcmp(a->t->name, b->t->name);
}

static json_t *split_words(const char *q) {
  json_t *words = json_array();
  char buf[128];
  size_t n = 0;

  for (;; q++) {
    bool sep = *q == '\0' || *q == ' ' || *q == ',' || *q == '\t' ||
               *q == '\n';

    if (!sep && n + 1 < sizeof(buf)) {
      buf[n++] = *q;
    } else if (sep && n > 0) {
      buf[n] = '\0';
      json_array_append_new(words, json_string(buf));
      n = 0;
    }
    if (*q == '\0') {
      return words;
    }
  }
}

/* mcp_tool_search: the best matches among the deferred tools; they are
 * sent from the next turn boundary on (al__agent_mcp_sync). */
static void search_run(al_tool_ctx_t *ctx, void *data) {
  al_agent_t *a = data;
  json_t *in = json_loads(al_tool_ctx_input(ctx), 0, NULL);
  const char *q = json_string_value(json_object_get(in, "query"));
  json_t *max = json_object_get(in, "max_results");
  size_t limit = 5, n = 0, total = 0, i;
  ag_hit_t *hits = NULL;
  json_t *words;
  al_list_t *pos;
  al_buf_t b;

  if (json_is_number(max) && json_number_value(max) >= 1) {
    limit = json_number_value(max) > 20 ? 20 : (size_t)json_number_value(max);
  }
  words = split_words(q != NULL ? q : "");
  al_list_foreach(pos, &a->reg.tools) {
    total++;
  }
  hits = al_calloc(total + 1, sizeof(*hits));
  total = 0;
  al_list_foreach(pos, &a->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);
    int sc;

    if (t->mcp == NULL || t->removed || !t->mcp_deferred) {
      continue;
    }
    total++;
    sc = score(t, words);
    if (sc > 0 && hits != NULL) {
      hits[n].t = t;
      hits[n++].score = sc;
    }
  }
  al_buf_init(&b, 1 << 20);
  if (n > 0) {
    qsort(hits, n, sizeof(*hits), hit_cmp);
    n = AL_MIN(n, limit);
    al_buf_printf(&b,
                  "%zu of %zu deferred MCP tools match. They are loaded for "
                  "your next turn; call them then.\n",
                  n, total);
  } else {
    al_buf_printf(&b,
                  "No deferred MCP tool matches '%s' (%zu are deferred). Try "
                  "other keywords.",
                  q != NULL ? q : "", total);
  }
  for (i = 0; i < n; i++) {
    const char *d = hits[i].t->description;

    al_buf_printf(&b, "- %s: %.*s%s\n", hits[i].t->name, 300, d,
                  strlen(d) > 300 ? "..." : "");
    json_object_set_new(a->mcp.loaded, hits[i].t->name, json_true());
  }
  al_tool_ctx_complete(ctx, q == NULL, q == NULL ? "Error: query is required"
                                                 : b.data,
                       q == NULL ? 24 : b.len);
  al_buf_free(&b);
  al_free(hits);
  json_decref(words);
  json_decref(in);
}


/* Registers mcp_tool_search, or offers it again. false: its name is taken
 * (a tools.d or in-process tool): nothing can be deferred. */
static bool search_on(al_agent_t *a) {
  al_tool_def_t def;

  if (a->mcp.search != NULL && !a->mcp.search->removed) {
    return true;
  }
  if (a->mcp.search != NULL) {
    if (al__agent_tool_find(a, a->mcp.search->name) != NULL ||
        al__reg_def_add(a, a->mcp.search) != 0) {
      return false;
    }
    a->mcp.search->removed = false;
    return true;
  }
  memset(&def, 0, sizeof(def));
  def.name = "mcp_tool_search";
  def.description = search_desc;
  def.input_schema = search_schema;
  def.category = AL_TOOL_READ;
  def.concurrency_safe = true;
  def.run = search_run;
  def.data = a;
  if (al__agent_add_inproc(a, &def, &a->mcp.search) != 0) {
    a->mcp.search = NULL;
    return false;
  }
  a->mcp.search->source = "mcp";
  return true;
}

static void search_off(al_agent_t *a) {
  if (a->mcp.search != NULL && !a->mcp.search->removed) {
    a->mcp.search->removed = true;
    al__reg_def_remove(a, a->mcp.search->name);
  }
}

/* At a turn boundary: when every MCP definition together costs more than
 * mcp_budget_pct of the window, or there are more than
 * mcp_budget_max_tools MCP tools, the tools neither always_load nor asked
 * for through mcp_tool_search leave the request; otherwise all are sent.
 * Sets changed[i] for each server whose sent set changed. */
static bool apply_budget(al_agent_t *a, bool *changed) {
  ag_cost_t all = definition_cost(a, NULL);
  uint64_t budget =
      (uint64_t)AL_MAX(a->budget.window, 0) * a->mcp.budget_pct / 100;
  bool over = (a->mcp.budget_pct > 0 && all.tokens > budget) ||
              (a->mcp.budget_max_tools > 0 &&
               all.tools > a->mcp.budget_max_tools);
  al_list_t *pos;
  size_t i;
  bool listed = false;

  for (i = 0; i < al__mcp_count(a->mcp.set); i++) {
    listed = listed || changed[i];
  }
  if (over && !search_on(a)) {
    over = false;
    /* Once per list change, not at every boundary. */
    if (listed &&
        warn(a, al__mcp_server(a->mcp.set, 0),
             "the MCP tool definitions exceed the tool budget, but the name "
             "'%s' is taken; all tools are sent%s%s",
             "mcp_tool_search", "", "")) {
      return true;
    }
  }
  al_list_foreach(pos, &a->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);
    bool defer;

    if (t->mcp == NULL || t->removed) {
      continue;
    }
    defer = over && !t->mcp_always &&
            json_object_get(a->mcp.loaded, t->name) == NULL;
    if (defer == t->mcp_deferred) {
      continue;
    }
    if (defer) {
      al__reg_def_remove(a, t->name);
    } else if (al__reg_def_add(a, t) != 0) {
      continue; /* out of memory: stays deferred */
    }
    t->mcp_deferred = defer;
    for (i = 0; i < al__mcp_count(a->mcp.set); i++) {
      changed[i] = changed[i] || al__mcp_server(a->mcp.set, i) == t->mcp;
    }
  }
  if (definition_cost(a, NULL).deferred == 0) {
    search_off(a);
  }
  return false;
}

/* Registers the new lists of server `only` (SIZE_MAX: of every server),
 * then applies the budget. true when the run ended meanwhile. */
static bool sync_servers(al_agent_t *a, size_t only) {
  size_t i, j, n;
  uint32_t *counts;
  bool *changed;
  bool stop = false;

  if (a->mcp.set == NULL) {
    return false;
  }
  n = al__mcp_count(a->mcp.set);
  counts = al_calloc(2 * n + 1, sizeof(*counts));
  changed = al_calloc(n + 1, sizeof(*changed));
  if (counts == NULL || changed == NULL) {
    al_free(counts);
    al_free(changed);
    return false; /* out of memory: the lists apply at the next boundary */
  }
  for (i = 0; i < n && !stop; i++) {
    al_mcp_server_t *s = al__mcp_server(a->mcp.set, i);
    uint64_t gen = al__mcp_server_gen(s);
    bool usable = al__mcp_server_state(s) == AL_MCP_READY;
    json_t *tool;

    if (!usable || gen == a->mcp.gens[i] || (only != SIZE_MAX && i != only)) {
      continue; /* a failed server keeps its tools: calls say why */
    }
    counts[2 * i + 1] = remove_tools(a, s);
    a->mcp.gens[i] = gen;
    changed[i] = true;
    json_array_foreach(al__mcp_server_tools(s), j, tool) {
      if (add_tool(a, s, tool, &counts[2 * i])) {
        stop = true;
        break;
      }
    }
  }
  if (!stop) {
    stop = apply_budget(a, changed);
  }
  for (i = 0; i < n && !stop; i++) {
    al_mcp_server_t *s = al__mcp_server(a->mcp.set, i);
    ag_cost_t c;

    if (!changed[i]) {
      continue;
    }
    c = definition_cost(a, s);
    stop = post_mcp_cost(a, AL_EVENT_MCP_TOOLS_CHANGED, s, NULL, NULL,
                         counts[2 * i], counts[2 * i + 1], &c);
  }
  al_free(counts);
  al_free(changed);
  return stop;
}

bool al__agent_mcp_sync(al_agent_t *a) { return sync_servers(a, SIZE_MAX); }

/* ---- calls to tools not registered yet ----------------------------------- */

/* One call to an mcp__ name whose tool is not registered: it looks at the
 * servers from a zero timer (never inside the executor's start, never
 * inside mcp.c's state change), again at each state change, until its
 * server is ready (handed to the tool's gate) or failed (an error). The
 * agent's `pending` covers the timer until its close callback. */
typedef struct ag_mcp_wait_s {
  al_list_t node; /* a->mcp.waits */
  uv_timer_t timer;
  al_agent_t *agent;
  al_tool_call_t *call;
} ag_mcp_wait_t;

/* The server a name mcp__<server>__<tool> belongs to (the longest server
 * name that fits: "a__b" and "a" may both), or NULL. */
static al_mcp_server_t *server_of(al_agent_t *a, const char *name,
                                  size_t *idx) {
  al_mcp_server_t *best = NULL;
  size_t i, best_len = 0;

  if (a->mcp.set == NULL || strncmp(name, "mcp__", 5) != 0) {
    return NULL;
  }
  for (i = 0; i < al__mcp_count(a->mcp.set); i++) {
    al_mcp_server_t *s = al__mcp_server(a->mcp.set, i);
    const char *sn = al__mcp_server_name(s);
    size_t n = strlen(sn);

    if (strncmp(name + 5, sn, n) == 0 && strncmp(name + 5 + n, "__", 2) == 0 &&
        n > best_len) {
      best = s;
      best_len = n;
      *idx = i;
    }
  }
  return best;
}

/* The server's own entry for the model's name of one of its tools. */
static const json_t *server_tool(al_mcp_server_t *s, const char *name) {
  size_t i;
  json_t *t;

  json_array_foreach(al__mcp_server_tools(s), i, t) {
    const char *tn = json_string_value(json_object_get(t, "name"));
    char n[65];

    if (tn != NULL) {
      al__mcp_tool_name(al__mcp_server_name(s), tn, n);
      if (strcmp(n, name) == 0) {
        return t;
      }
    }
  }
  return NULL;
}

static void wait_on_close(uv_handle_t *h) {
  ag_mcp_wait_t *w = h->data;
  al_agent_t *a = w->agent;

  al_free(w);
  al__agent_unref(a);
}

/* The call is no longer ours to complete from here (handed over, or about
 * to be completed by the caller). */
static void wait_end(ag_mcp_wait_t *w) {
  w->call->tool_data = NULL;
  al_list_remove(&w->node);
  uv_close((uv_handle_t *)&w->timer, wait_on_close);
}

static void wait_fail(ag_mcp_wait_t *w, al_buf_t *b) {
  al_tool_call_t *call = w->call;

  wait_end(w);
  al__executor_call_complete(call, true,
                             b->data != NULL ? b->data : "Error: out of memory",
                             b->data != NULL ? b->len : 20);
  al_buf_free(b);
}

static void wait_look(uv_timer_t *timer) {
  ag_mcp_wait_t *w = timer->data;
  al_agent_t *a = w->agent;
  al_tool_call_t *call = w->call;
  al_mcp_server_t *s;
  const char *err;
  size_t i = 0;
  al_buf_t b;
  ag_tool_t *t;
  int rc;

  if (ag_closing(a) || a->mcp.load != NULL) {
    return; /* the close cancels it; load_done looks again */
  }
  s = server_of(a, call->name, &i);
  al_buf_init(&b, 64 * 1024);
  if (s == NULL) {
    al_buf_printf(&b, "Error: Unknown tool '%s': no MCP server of that name "
                      "is configured",
                  call->name);
    if (a->mcp.search != NULL && !a->mcp.search->removed) {
      al_buf_printf(&b, "; MCP tools left out of your tool list are found "
                        "with mcp_tool_search");
    }
    wait_fail(w, &b);
    return;
  }
  switch (al__mcp_server_state(s)) {
  case AL_MCP_STARTING:
  case AL_MCP_CLOSED: /* not spawned yet: it starts on this loop turn */
    al_buf_free(&b);
    return; /* on_state looks again; its startup timeout bounds this */
  case AL_MCP_FAILED:
  case AL_MCP_RESTARTING:
    err = al__mcp_server_error(s);
    al_buf_printf(&b, "Error: MCP server '%s' did not start, so its tool "
                      "'%s' cannot run%s%s",
                  al__mcp_server_name(s), call->name, err != NULL ? ": " : "",
                  err != NULL ? err : "");
    wait_fail(w, &b);
    return;
  case AL_MCP_READY:
    break;
  }
  if (al__mcp_server_gen(s) != a->mcp.gens[i]) {
    /* Ready since the last turn boundary: its tools join now (the next
     * request would have them anyway). */
    if (sync_servers(a, i) || call->tool_data != w) {
      al_buf_free(&b);
      return; /* the run ended; the call was cancelled */
    }
  }
  t = al__agent_tool_find(a, call->name);
  if (t == NULL || t->mcp != s) {
    al_buf_printf(&b, "Error: MCP server '%s' has no tool named '%s'",
                  al__mcp_server_name(s), call->name);
    if (a->mcp.search != NULL && !a->mcp.search->removed) {
      al_buf_printf(&b, "; MCP tools left out of your tool list are found "
                        "with mcp_tool_search");
    }
    wait_fail(w, &b);
    return;
  }
  al_buf_free(&b);
  wait_end(w);
  /* Through the gate, as if the executor had found the tool. */
  call->impl = &t->gate;
  rc = t->gate.start(call);
  if (rc != 0) {
    al__call_complete_fmt(call, "Error: tool '%s' failed to start: %s",
                          t->name, al_strerror(rc));
  }
}

static void wait_kick(al_agent_t *a) {
  al_list_t *pos;

  al_list_foreach(pos, &a->mcp.waits) {
    ag_mcp_wait_t *w = AL_CONTAINER_OF(pos, ag_mcp_wait_t, node);

    uv_timer_start(&w->timer, wait_look, 0, 0);
  }
}

static int wait_start(al_tool_call_t *call) {
  al_agent_t *a = call->impl->data;
  ag_mcp_wait_t *w = al_calloc(1, sizeof(*w));

  if (w == NULL) {
    return AL_ENOMEM;
  }
  w->agent = a;
  w->call = call;
  uv_timer_init(a->loop, &w->timer);
  w->timer.data = w;
  al__agent_ref(a);
  al_list_insert_tail(&a->mcp.waits, &w->node);
  call->tool_data = w;
  uv_timer_start(&w->timer, wait_look, 0, 0);
  return 0;
}

static void wait_cancel(al_tool_call_t *call) {
  ag_mcp_wait_t *w = call->tool_data;

  if (w == NULL) {
    return;
  }
  wait_end(w);
  al__executor_call_complete(call, true, cancelled_text,
                             strlen(cancelled_text));
}

static bool wait_safe(const al_tool_impl_t *impl, const json_t *input) {
  const al_agent_t *a = impl->data;

  (void)input;
  return impl == &a->mcp.wait_safe_impl;
}

const al_tool_impl_t *al__agent_mcp_lookup(al_agent_t *a, const char *name) {
  al_mcp_server_t *s;
  const json_t *tool;
  size_t i = 0;

  if (ag_closing(a) || strncmp(name, "mcp__", 5) != 0 ||
      (a->mcp.set == NULL && a->mcp.load == NULL)) {
    return NULL;
  }
  if (a->mcp.load != NULL) {
    return &a->mcp.wait_impl;
  }
  s = server_of(a, name, &i);
  if (s == NULL) {
    /* No such server: unknown, unless tools are deferred (the error then
     * points at mcp_tool_search). */
    return a->mcp.search != NULL && !a->mcp.search->removed
               ? &a->mcp.wait_safe_impl
               : NULL;
  }
  if (al__mcp_server_state(s) != AL_MCP_READY) {
    return &a->mcp.wait_impl; /* its hints are not known yet */
  }
  /* Ready but not registered yet: concurrency-safe as its tool will be
   * (add_tool's rule); no such tool completes at once, safe too. */
  tool = server_tool(s, name);
  if (tool == NULL) {
    return &a->mcp.wait_safe_impl;
  }
  return tool_safe(al__mcp_server_config(s), tool) ? &a->mcp.wait_safe_impl
                                                  : &a->mcp.wait_impl;
}

/* ---- life cycle ---------------------------------------------------------- */

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

/* Starts the servers of text (checked JSON configuration). */
static void mcp_start_text(al_agent_t *a, const char *text) {
  al_mcp_config_t cfg;
  al_mcp_options_t mo;
  al_buf_t err;
  int rc;

  al_buf_init(&err, 4096);
  rc = al__mcp_config_parse(text, strlen(text), &cfg, &err);
  al_buf_free(&err);
  if (rc != 0) {
    return; /* checked before: only out of memory */
  }
  if (cfg.n == 0) {
    al__mcp_config_free(&cfg);
    return;
  }
  a->mcp.gens = al_calloc(cfg.n, sizeof(*a->mcp.gens));
  a->mcp.loaded = json_object();
  a->mcp.budget_pct = cfg.tool_budget_pct;
  a->mcp.budget_max_tools = cfg.tool_budget_max_tools;
  if (a->mcp.gens == NULL || a->mcp.loaded == NULL) {
    json_decref(a->mcp.loaded);
    a->mcp.loaded = NULL;
    al__mcp_config_free(&cfg);
    al_log(AL_LOG_ERROR, "MCP: out of memory; no server started");
    return;
  }
  al__mcp_options_init(&mo);
  mo.loop = a->loop;
  mo.workspace = a->workspace;
  mo.sandbox = a->reg.sandbox;
  if (a->kill_grace_ms > 0) {
    mo.kill_grace_ms = a->kill_grace_ms;
    mo.shutdown_grace_ms = a->kill_grace_ms;
  }
  if (a->mcp.restart_base_ms > 0) {
    mo.restart_base_ms = a->mcp.restart_base_ms;
  }
  mo.on_state = on_state;
  mo.on_notice = on_notice;
  mo.data = a;
  rc = al__mcp_new(&mo, &cfg, &a->mcp.set);
  al__mcp_config_free(&cfg);
  if (rc != 0) {
    json_decref(a->mcp.loaded);
    a->mcp.loaded = NULL;
    al_log(AL_LOG_ERROR, "MCP: %s; no server started", al_strerror(rc));
    return;
  }
  if (a->mcp.t0 == 0) {
    a->mcp.t0 = al_now_ns();
  }
  al__mcp_start(a->mcp.set);
}

/* ---- a project's .mcp.json, read off the loop (mcp_project) -------------- */

typedef struct {
  uv_work_t req;
  al_agent_t *a;
  char *base;
  char *workspace;
  bool trust;
  char *out;
  bool skipped;
  int rc;
  al_buf_t err;
} ag_mcp_load_t;

static void load_work(uv_work_t *req) {
  ag_mcp_load_t *l = AL_CONTAINER_OF(req, ag_mcp_load_t, req);

  l->rc = al__mcp_config_project(l->base, l->workspace, l->trust, &l->out,
                                 &l->skipped, &l->err);
}

/* A note about the project's file (mcp_warning, server ".mcp.json"). */
static void project_note(al_agent_t *a, const char *msg) {
  al_event_t ev;

  al_log(AL_LOG_WARN, "MCP: %s", msg);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_MCP_WARNING;
  ev.u.mcp.server = ag_slice(".mcp.json");
  ev.u.mcp.error = ag_slice(msg);
  al__agent_post(a, &ev);
}

static void load_done(uv_work_t *req, int status) {
  ag_mcp_load_t *l = AL_CONTAINER_OF(req, ag_mcp_load_t, req);
  al_agent_t *a = l->a;
  char msg[2048];

  a->mcp.load = NULL;
  al__agent_unref_quiet(a); /* al__agent_maybe_finish below */
  if (!ag_closing(a)) {
    if (status != 0 || l->rc != 0) {
      /* A broken .mcp.json: said, and the configured servers start. */
      snprintf(msg, sizeof(msg), "the project's servers are not started: %s",
               status != 0 ? al_strerror(status)
               : l->err.data != NULL ? l->err.data
                                     : al_strerror(l->rc));
      project_note(a, msg);
      if (l->base != NULL) {
        mcp_start_text(a, l->base);
      }
    } else {
      if (l->skipped) {
        snprintf(msg, sizeof(msg),
                 "%s/.mcp.json is not read: the project is not trusted "
                 "(`agentloop tools --trust-project` in it trusts it)",
                 l->workspace);
        project_note(a, msg);
      }
      if (l->out != NULL && !ag_closing(a)) {
        mcp_start_text(a, l->out);
      }
    }
    /* A run waiting for the servers goes on when there is nothing to wait
     * for (no servers, or all settled already). */
    if (!ag_closing(a) &&
        (a->mcp.set == NULL || al__mcp_settled(a->mcp.set))) {
      a->mcp.on_settled(a);
    }
    if (!ag_closing(a)) {
      wait_kick(a); /* calls made while the file was read */
    }
  }
  al_free(l->base);
  al_free(l->workspace);
  al_free(l->out);
  al_buf_free(&l->err);
  al_free(l);
  al__agent_maybe_finish(a);
}

void al__agent_mcp_init(al_agent_t *a, const al_agent_options_t *o) {
  ag_mcp_load_t *l;

  a->mcp.restart_base_ms = o->mcp_restart_base_ms;
  a->mcp.wait_ms = AL_MCP_DEFAULT_STARTUP_WAIT_MS;
  al_list_init(&a->mcp.waits);
  a->mcp.wait_impl.name = "mcp_wait";
  a->mcp.wait_impl.start = wait_start;
  a->mcp.wait_impl.cancel = wait_cancel;
  a->mcp.wait_impl.is_concurrency_safe = wait_safe;
  a->mcp.wait_impl.data = a;
  a->mcp.wait_safe_impl = a->mcp.wait_impl;
  if (o->mcp_config != NULL) {
    al_mcp_config_t cfg;
    al_buf_t err;

    al_buf_init(&err, 4096);
    if (al__mcp_config_parse(o->mcp_config, strlen(o->mcp_config), &cfg,
                             &err) == 0) {
      a->mcp.wait_ms = cfg.startup_wait_ms;
      al__mcp_config_free(&cfg);
    }
    al_buf_free(&err);
  }
  if (!o->mcp_project) {
    if (o->mcp_config != NULL) {
      mcp_start_text(a, o->mcp_config);
    }
    return;
  }
  /* The trust decision and the project's file are file reads: in the
   * pool, so a daemon's loop never waits on a disk. */
  l = al_calloc(1, sizeof(*l));
  if (l == NULL) {
    al_log(AL_LOG_ERROR, "MCP: out of memory; no server started");
    return;
  }
  l->a = a;
  /* The sandbox's set-up (before this) may have decided it already. */
  l->trust = o->trust_project || a->reg.project_trusted;
  l->base = o->mcp_config != NULL ? al_strdup(o->mcp_config) : NULL;
  l->workspace = al_strdup(a->workspace);
  al_buf_init(&l->err, 4096);
  if ((o->mcp_config != NULL && l->base == NULL) || l->workspace == NULL ||
      uv_queue_work(a->loop, &l->req, load_work, load_done) != 0) {
    al_free(l->base);
    al_free(l->workspace);
    al_free(l);
    al_log(AL_LOG_ERROR, "MCP: cannot read the project's .mcp.json");
    if (o->mcp_config != NULL) {
      mcp_start_text(a, o->mcp_config);
    }
    return;
  }
  a->mcp.load = l;
  a->mcp.t0 = al_now_ns();
  al__agent_ref(a);
}

bool al__agent_mcp_should_wait(al_agent_t *a, uint64_t *ms) {
  uint64_t wait, spent;

  if (a->mcp.load != NULL) {
    wait = a->mcp.wait_ms; /* the project's file is still being read */
  } else if (a->mcp.set == NULL || al__mcp_settled(a->mcp.set)) {
    return false;
  } else {
    wait = al__mcp_startup_wait_ms(a->mcp.set);
  }
  spent = (al_now_ns() - a->mcp.t0) / 1000000;
  if (spent >= wait) {
    return false;
  }
  *ms = wait - spent;
  return true;
}

bool al__agent_mcp_startup_post(al_agent_t *a) {
  json_t *ready, *failed, *pending;
  char *r = NULL, *f = NULL, *p = NULL;
  al_event_t ev;
  size_t i;
  bool stop;

  if (a->mcp.set == NULL || a->mcp.startup_posted) {
    return false;
  }
  a->mcp.startup_posted = true;
  ready = json_array();
  failed = json_array();
  pending = json_array();
  for (i = 0; i < al__mcp_count(a->mcp.set); i++) {
    al_mcp_server_t *s = al__mcp_server(a->mcp.set, i);
    const char *name = al__mcp_server_name(s);
    const char *err = al__mcp_server_error(s);

    switch (al__mcp_server_state(s)) {
    case AL_MCP_READY:
      json_array_append_new(
          ready, json_pack("{s:s, s:I, s:I}", "server", name, "tools",
                           (json_int_t)json_array_size(al__mcp_server_tools(s)),
                           "ms", (json_int_t)al__mcp_server_ms(s)));
      break;
    case AL_MCP_FAILED:
    case AL_MCP_RESTARTING:
      /* Restarting after a failed start: failed for this wait (its tools
       * join at a turn boundary if a restart succeeds). */
      json_array_append_new(failed,
                            json_pack("{s:s, s:s}", "server", name, "error",
                                      err != NULL ? err : "failed"));
      break;
    case AL_MCP_STARTING:
      json_array_append_new(pending, json_string(name));
      break;
    case AL_MCP_CLOSED:
      break;
    }
  }
  if (ready != NULL && failed != NULL && pending != NULL) {
    r = json_dumps(ready, JSON_COMPACT);
    f = json_dumps(failed, JSON_COMPACT);
    p = json_dumps(pending, JSON_COMPACT);
  }
  json_decref(ready);
  json_decref(failed);
  json_decref(pending);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_MCP_STARTUP_COMPLETE;
  ev.u.mcp_startup.ready = ag_slice(r != NULL ? r : "[]");
  ev.u.mcp_startup.failed = ag_slice(f != NULL ? f : "[]");
  ev.u.mcp_startup.pending = ag_slice(p != NULL ? p : "[]");
  ev.u.mcp_startup.waited_ms =
      a->mcp.wait_t0 != 0 ? (al_now_ns() - a->mcp.wait_t0) / 1000000 : 0;
  stop = al__agent_post(a, &ev);
  al_free(r);
  al_free(f);
  al_free(p);
  return stop;
}

static void on_mcp_closed(void *data) {
  al_agent_t *a = data;

  a->mcp.set = NULL;
  json_decref(a->mcp.loaded);
  a->mcp.loaded = NULL;
  al__agent_unref(a);
}

void al__agent_mcp_close(al_agent_t *a) {
  if (a->mcp.set == NULL) {
    return;
  }
  al__agent_ref(a);
  al__mcp_close(a->mcp.set, on_mcp_closed, a);
}

json_t *al__agent_mcp_json(const al_agent_t *a) {
  json_t *arr = json_array();
  size_t i;

  for (i = 0; a->mcp.set != NULL && i < al__mcp_count(a->mcp.set); i++) {
    json_array_append_new(arr,
                          al__mcp_server_json(al__mcp_server(a->mcp.set, i)));
  }
  return arr;
}

void al__agent_mcp_free(al_agent_t *a) {
  al_free(a->mcp.gens);
  a->mcp.gens = NULL;
}

void al__agent_mcp_driver(al_agent_t *a, void (*on_settled)(al_agent_t *a)) {
  a->mcp.on_settled = on_settled;
}

void al__agent_mcp_wait_begin(al_agent_t *a) { a->mcp.wait_t0 = al_now_ns(); }
