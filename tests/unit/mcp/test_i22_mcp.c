/* MCP defects of issue 22 (tests/list/i22_mcp.h):
 *  - no API key reaches a stdio server's environment, sandboxed or not;
 *  - a call to a server still starting waits for it (or says why it could
 *    not start), never "Unknown tool"; a direct call to a deferred tool
 *    loads it; an unknown MCP name points at mcp_tool_search;
 *  - a project's .mcp.json startup_wait_ms is honoured;
 *  - two servers offering the same tool name are not a collision.
 * The model is agentloop-mockllm; the servers are the fault server
 * (mcp_server.c), whose start-up is held by a gate file the test creates
 * when it has seen what it wants to see (no timing). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "mcp/mcp.h"
#include "unit/loop/agent_fx.h"
#include "test.h"

#define jstr fx_jstr

/* See test_agent_mcp.c: an ASan build of the fault server cannot run
 * under the sandbox's address-space limit. */
#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_KEY ",\"sandbox\":false"
#else
#define SANDBOX_KEY ""
#endif

/* One fault-server entry "NAME":{...} (args: comma-separated JSON
 * strings, may be empty; keys: more keys of the entry, may be NULL). */
static void server_entry(al_buf_t *b, const char *name, const char *args,
                         const char *keys) {
  al_buf_printf(b,
                "\"%s\":{\"command\":\"%s\",\"args\":[\"--helper\","
                "\"mcp_server\"%s%s]%s}",
                name, al_test_exe(), args[0] != '\0' ? "," : "", args,
                keys != NULL ? keys : SANDBOX_KEY);
}

static char *cfg1(const char *extra, const char *name, const char *args,
                  const char *keys) {
  al_buf_t b;

  al_buf_init(&b, 1 << 16);
  al_buf_printf(&b, "{%s\"mcpServers\":{", extra != NULL ? extra : "");
  server_entry(&b, name, args, keys);
  al_buf_append_str(&b, "}}");
  return b.data;
}

static void dump(const fx_t *f) {
  size_t i;
  json_t *e;

  if (getenv("AL_TEST_DUMP") == NULL) {
    return;
  }
  json_array_foreach(f->events, i, e) {
    char *s = json_dumps(e, JSON_COMPACT);

    fprintf(stderr, "%3zu %.300s\n", i, s);
    free(s);
  }
}

static bool offers(const fx_t *f, size_t req, const char *name) {
  const json_t *tools = json_object_get(fx_request(f, req)->body, "tools");
  size_t i;
  json_t *t;

  json_array_foreach(tools, i, t) {
    if (strcmp(jstr(t, "name"), name) == 0) {
      return true;
    }
  }
  return false;
}

/* ---- 14: no key in a server's environment ----------------------------------------- */

static const char *const secret_vars[][2] = {
    {"ANTHROPIC_API_KEY", "sk-ant-i22-secret-anthropic"},
    {"OPENAI_API_KEY", "sk-i22-secret-openai"},
    {"ANTHROPIC_AUTH_TOKEN", "i22-secret-auth-token"},
    {"AL_T_I22_LLM_KEY", "i22-secret-api-key-env"}, /* an api_key_env */
    /* What the process hardening scrubs too (sandbox/harden.c marks). */
    {"GITHUB_TOKEN", "i22-secret-github"},
    {"AWS_SECRET_ACCESS_KEY", "i22-secret-aws"},
    {"AL_T_I22_DB_PASSWORD", "i22-secret-password"},
    {NULL, NULL}};

/* The servers' `env` tool output: their whole environment. Two servers,
 * one in the sandbox (the default; unconfined in an ASan build) and one
 * with sandbox: false, both started with every key variable set here. */
TEST_IMPL(mcp_stdio_server_env_has_no_keys) {
  fx_t f;
  al_buf_t b;
  const char *ids[] = {"e1", "e2"};
  size_t i, k;

  signal(SIGPIPE, SIG_IGN);
  for (i = 0; secret_vars[i][0] != NULL; i++) {
    setenv(secret_vars[i][0], secret_vars[i][1], 1);
  }
  setenv("AL_T_I22_PLAIN", "visible-when-declared", 1);
  al_buf_init(&b, 1 << 16);
  al_buf_append_str(&b, "{\"mcpServers\":{");
  server_entry(&b, "s", "\"--env-tool\"",
               SANDBOX_KEY ",\"env\":{\"DECLARED\":\"${AL_T_I22_PLAIN}\"}");
  al_buf_append_str(&b, ",");
  server_entry(&b, "u", "\"--env-tool\"",
               ",\"sandbox\":false,\"env\":{\"DECLARED\":"
               "\"${AL_T_I22_PLAIN}\"}");
  al_buf_append_str(&b, "}}");
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: e1, name: mcp__s__env, input: {}}\n"
              "        - tool_use: {id: e2, name: mcp__u__env, input: {}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = b.data;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  for (k = 0; k < 2; k++) {
    const json_t *r = fx_tool_result(&f, 1, ids[k]);
    const char *env = jstr(r, "content");

    ASSERT_NOT_NULL(env);
    ASSERT(!json_is_true(json_object_get(r, "is_error")));
    /* The environment is real: the allowlist and the declared entry. */
    ASSERT(strstr(env, "PATH=") != NULL);
    ASSERT(strstr(env, "DECLARED=visible-when-declared") != NULL);
    for (i = 0; secret_vars[i][0] != NULL; i++) {
      char name[64];

      snprintf(name, sizeof(name), "%s=", secret_vars[i][0]);
      if (strstr(env, name) != NULL || strstr(env, secret_vars[i][1]) != NULL) {
        AL_TEST_FAIL("server %s got %s:\n%s", ids[k], secret_vars[i][0], env);
      }
    }
  }
  fx_finish(&f);
  for (i = 0; secret_vars[i][0] != NULL; i++) {
    unsetenv(secret_vars[i][0]);
  }
  unsetenv("AL_T_I22_PLAIN");
  al_buf_free(&b);
  return 0;
}

/* ---- 7: calls to a server that is still starting ------------------------------------ */

static long find_state(const fx_t *f, const char *server, const char *state) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    if (strcmp(jstr(e, "type"), "mcp_server_state") == 0 &&
        strcmp(jstr(e, "server"), server) == 0 &&
        strcmp(jstr(e, "state"), state) == 0) {
      return (long)i;
    }
  }
  return -1;
}

/* The gate opens (the server may answer initialize) only once the call
 * to its tool is queued: the call cannot find the server ready. */
static void open_gate_on_queued(fx_t *f, const al_event_t *ev,
                                const json_t *j) {
  if (ev->type == AL_EVENT_TOOL_USE_QUEUED &&
      strcmp(jstr(j, "call_id"), "m1") == 0) {
    fx_write(f, "gate", "open");
  }
}

/* The run does not wait for the server (startup_wait_ms 0); the model
 * calls its tool anyway (it knew the name): the call waits for the server
 * and gets the tool's answer, and the next request offers the tools. */
TEST_IMPL(agent_mcp_call_waits_for_starting_server) {
  fx_t f;
  char *cfg = cfg1("\"startup_wait_ms\":0,", "slow",
                   "\"--init-gate\",\"gate\"", NULL);
  const json_t *r;
  long ready, started;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__slow__echo, input: "
              "{text: 'waited for it'}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  f.hook = open_gate_on_queued;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(!offers(&f, 0, "mcp__slow__echo"));
  r = fx_tool_result(&f, 1, "m1");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(jstr(r, "content"), "waited for it");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  /* Queued before the server was ready, started after. */
  ready = find_state(&f, "slow", "ready");
  started = fx_find(&f, "tool_use_started", "m1", 0);
  ASSERT(fx_find(&f, "tool_use_queued", "m1", 0) < ready);
  ASSERT(ready < started);
  ASSERT(fx_find(&f, "mcp_tool_call_begin", "m1", 0) > started);
  ASSERT(offers(&f, 1, "mcp__slow__echo"));
  fx_assert_valid(&f);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* The same for a server of the project's .mcp.json (the daemon's
 * sessions: the file is read in the pool while the run goes on, and the
 * call may come before the server exists). */
TEST_IMPL(agent_mcp_call_waits_for_project_server) {
  fx_t f;
  char *proj = cfg1("", "proj", "\"--init-gate\",\"gate\"", NULL);
  const json_t *r;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__proj__echo, input: "
              "{text: 'project server'}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  fx_write(&f, ".mcp.json", proj);
  f.opts.mcp_config = "{\"startup_wait_ms\":0,\"mcpServers\":{}}";
  f.opts.mcp_project = true;
  f.opts.trust_project = true;
  f.hook = open_gate_on_queued;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  r = fx_tool_result(&f, 1, "m1");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(jstr(r, "content"), "project server");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  ASSERT(fx_find(&f, "tool_use_queued", "m1", 0) <
         find_state(&f, "proj", "ready"));
  fx_finish(&f);
  al_free(proj);
  return 0;
}

/* A server that never finishes starting: the call waits for its startup
 * timeout and then says which server did not start and why. */
TEST_IMPL(agent_mcp_call_to_server_that_fails_to_start) {
  fx_t f;
  char keys[128];
  char *cfg;
  const json_t *r;
  const char *text;

  signal(SIGPIPE, SIG_IGN);
  snprintf(keys, sizeof(keys), "%s,\"startup_timeout_ms\":%d", SANDBOX_KEY,
           200 * al_test_timeout_multiplier());
  cfg = cfg1("\"startup_wait_ms\":0,", "hung", "\"--hang-init\"", keys);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__hung__echo, input: "
              "{text: x}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  r = fx_tool_result(&f, 1, "m1");
  ASSERT_NOT_NULL(r);
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  text = jstr(r, "content");
  if (strstr(text, "Unknown tool") != NULL ||
      strstr(text, "MCP server 'hung' did not start") == NULL ||
      strstr(text, "did not finish starting within") == NULL) {
    AL_TEST_FAIL("result: %s", text);
  }
  ASSERT(find_state(&f, "hung", "restarting") <
         fx_find(&f, "tool_use_completed", "m1", 0));
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* Over the tool budget (1 tool): a deferred tool named directly runs and
 * is sent from the next turn on; a name the server does not have, and one
 * of no server, get an error pointing at mcp_tool_search. */
TEST_IMPL(agent_mcp_direct_call_loads_deferred_tool) {
  fx_t f;
  char *cfg = cfg1("\"startup_wait_ms\":5000,\"tool_budget_max_tools\":1,",
                   "f", "", NULL);
  const json_t *r;
  const char *text;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: d1, name: mcp__f__echo, input: "
              "{text: direct}}\n"
              "        - tool_use: {id: d2, name: mcp__f__nosuch, input: {}}\n"
              "        - tool_use: {id: d3, name: mcp__nobody__echo, input: "
              "{}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(offers(&f, 0, "mcp_tool_search"));
  ASSERT(!offers(&f, 0, "mcp__f__echo"));
  r = fx_tool_result(&f, 1, "d1");
  ASSERT_STR_EQ(jstr(r, "content"), "direct");
  ASSERT(offers(&f, 1, "mcp__f__echo"));
  r = fx_tool_result(&f, 1, "d2");
  text = jstr(r, "content");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  if (strstr(text, "MCP server 'f' has no tool named 'mcp__f__nosuch'") ==
          NULL ||
      strstr(text, "mcp_tool_search") == NULL) {
    AL_TEST_FAIL("d2: %s", text);
  }
  r = fx_tool_result(&f, 1, "d3");
  text = jstr(r, "content");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT(strstr(text, "mcp_tool_search") != NULL);
  fx_assert_valid(&f);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

static uv_timer_t cancel_timer;

static void cancel_now(uv_timer_t *t) {
  fx_t *f = t->data;

  ASSERT_EQ(al_agent_cancel(f->agent), 0);
  uv_close((uv_handle_t *)t, NULL);
}

/* The call is queued; it starts (and waits) in the same pass of the
 * executor, so the zero timer cancels a waiting call. */
static void cancel_after_queued(fx_t *f, const al_event_t *ev,
                                const json_t *j) {
  if (ev->type == AL_EVENT_TOOL_USE_QUEUED &&
      strcmp(jstr(j, "call_id"), "m1") == 0) {
    uv_timer_init(&f->loop, &cancel_timer);
    cancel_timer.data = f;
    uv_timer_start(&cancel_timer, cancel_now, 0, 0);
  }
}

/* A cancel while the call waits for its server (which never starts: its
 * gate is never opened): the call completes as cancelled, the run is
 * interrupted, and nothing of the wait is left on the loop. */
TEST_IMPL(agent_mcp_cancel_while_waiting_for_server) {
  fx_t f;
  char *cfg = cfg1("\"startup_wait_ms\":0,", "slow",
                   "\"--init-gate\",\"never\"", NULL);
  long done;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__slow__echo, input: "
              "{text: x}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  f.hook = cancel_after_queued;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  done = fx_find(&f, "tool_use_completed", "m1", 0);
  ASSERT(done >= 0);
  ASSERT(done < fx_find(&f, "interrupted", NULL, 0));
  ASSERT_EQ(fx_find(&f, "tool_use_started", "m1", 0), -1);
  ASSERT_EQ(find_state(&f, "slow", "ready"), -1);
  fx_finish(&f); /* the loop closes: no timer of the wait is left */
  al_free(cfg);
  return 0;
}

/* ---- 7: startup_wait_ms of a project's .mcp.json ------------------------------------ */

static uint64_t wait_of(const char *text) {
  al_mcp_config_t c;
  al_buf_t err;
  uint64_t ms;

  ASSERT_NOT_NULL(text);
  al_buf_init(&err, 4096);
  if (al__mcp_config_parse(text, strlen(text), &c, &err) != 0) {
    AL_TEST_FAIL("%s: %s", text, err.data);
  }
  ms = c.startup_wait_ms;
  al__mcp_config_free(&c);
  al_buf_free(&err);
  return ms;
}

/* docs/mcp.md shows startup_wait_ms in a project's .mcp.json: `run` (load2)
 * and the daemon (config_project) honour it; config.yaml's mcp_servers:
 * may set it too; the user's --mcp-config file wins over both. */
TEST_IMPL(mcp_project_startup_wait_honoured) {
  char ws[] = "/tmp/al-i22-ws-XXXXXX";
  char path[256];
  const char *proj = "{\"startup_wait_ms\":4321,\"mcpServers\":{\"p\":"
                     "{\"command\":\"x\"}}}";
  const char *user = "{\"startup_wait_ms\":100,\"mcpServers\":{}}";
  json_t *section;
  al_buf_t err;
  char *out = NULL;
  FILE *f;

  ASSERT_NOT_NULL(mkdtemp(ws));
  snprintf(path, sizeof(path), "%s/.mcp.json", ws);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(proj, f);
  fclose(f);
  al_buf_init(&err, 4096);
  /* agentloop run: the project's file, trusted. */
  ASSERT_EQ(al__mcp_config_load2(NULL, NULL, ws, true, &out, &err), 0);
  ASSERT_EQ(wait_of(out), 4321);
  al_free(out);
  /* The daemon's session: base without one, then the project's. */
  ASSERT_EQ(al__mcp_config_project("{\"mcpServers\":{\"d\":{\"command\":"
                                   "\"y\"}}}",
                                   ws, true, &out, NULL, &err),
            0);
  ASSERT_EQ(wait_of(out), 4321);
  al_free(out);
  /* The user's value wins. */
  ASSERT_EQ(al__mcp_config_project(user, ws, true, &out, NULL, &err), 0);
  ASSERT_EQ(wait_of(out), 100);
  al_free(out);
  /* config.yaml's section: a setting, not a server named
   * startup_wait_ms; over the project's. */
  section = json_pack("{s:i, s:{s:s}}", "startup_wait_ms", 777, "a",
                      "command", "x");
  ASSERT_EQ(al__mcp_config_load2(NULL, section, ws, true, &out, &err), 0);
  ASSERT_EQ(wait_of(out), 777);
  al_free(out);
  json_decref(section);
  al_buf_free(&err);
  unlink(path);
  rmdir(ws);
  return 0;
}

/* ---- 7: listings show servers that are starting ----------------------------------- */

/* Runs `agentloop ARGS` with an empty configuration home; its stdout in
 * out, its exit status returned. */
static int run_agentloop(const char *home, const char *args, char *out,
                         size_t cap) {
  char cmd[4096];
  FILE *p;
  size_t n = 0, got;
  int st;

  snprintf(cmd, sizeof(cmd),
           "env -i PATH=/usr/bin:/bin HOME=%s XDG_CONFIG_HOME=%s/xdg "
           "%s/agentloop %s 2>/dev/null",
           home, home, AL_BINARY_DIR, args);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  while (n + 1 < cap && (got = fread(out + n, 1, cap - 1 - n, p)) > 0) {
    n += got;
  }
  out[n] = '\0';
  st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `agentloop mcp list --wait MS` lists a server still starting as such
 * (text and JSON, exit status 1), beside a ready one. The agent's own
 * listing (al_agent_tools_json, the daemon's tools/list that the chat's
 * /tools shows) has it too, with how long it has been starting. */
TEST_IMPL(mcp_listings_show_starting_server) {
  char ws[] = "/tmp/al-i22-list-XXXXXX";
  char path[256], args[1024], out[16384];
  al_buf_t b;
  FILE *f;
  fx_t fx;
  char *cfg, *tools;
  json_t *j, *s;

  /* Each listing waits its whole --wait (the gated server never settles):
   * long enough for the other to be ready on a loaded machine. */
  al_test_timeout_s(15);
  ASSERT_NOT_NULL(mkdtemp(ws));
  al_buf_init(&b, 1 << 16);
  al_buf_append_str(&b, "{\"mcpServers\":{");
  server_entry(&b, "ok", "", ",\"sandbox\":false");
  al_buf_append_str(&b, ",");
  server_entry(&b, "slow", "\"--init-gate\",\"never\"", ",\"sandbox\":false");
  al_buf_append_str(&b, "}}");
  snprintf(path, sizeof(path), "%s/servers.json", ws);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(b.data, f);
  fclose(f);
  snprintf(args, sizeof(args), "mcp list --wait %d --cwd %s --mcp-config %s",
           1500 * al_test_timeout_multiplier(), ws, path);
  ASSERT_EQ(run_agentloop(ws, args, out, sizeof(out)), 1);
  if (strstr(out, "slow: starting (") == NULL ||
      strstr(out, "ok: ready, 11 tools") == NULL) {
    AL_TEST_FAIL("mcp list:\n%s", out);
  }
  snprintf(args, sizeof(args),
           "mcp list --json --wait %d --cwd %s --mcp-config %s",
           1500 * al_test_timeout_multiplier(), ws, path);
  ASSERT_EQ(run_agentloop(ws, args, out, sizeof(out)), 1);
  j = json_loads(out, 0, NULL);
  ASSERT_NOT_NULL(j);
  s = json_array_get(json_object_get(j, "servers"), 1);
  ASSERT_STR_EQ(jstr(s, "name"), "slow");
  ASSERT_STR_EQ(jstr(s, "state"), "starting");
  json_decref(j);
  unlink(path);
  rmdir(ws);

  /* The agent's listing while the server is held at start-up. */
  cfg = cfg1("\"startup_wait_ms\":0,", "slow", "\"--init-gate\",\"never\"",
             NULL);
  fx_init(&fx, NULL);
  fx.opts.mcp_config = cfg;
  fx_start(&fx);
  while (find_state(&fx, "slow", "starting") < 0) {
    uv_run(&fx.loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(al_agent_tools_json(fx.agent, &tools), 0);
  j = json_loads(tools, 0, NULL);
  al_free(tools);
  s = json_array_get(json_object_get(j, "mcp_servers"), 0);
  ASSERT_STR_EQ(jstr(s, "name"), "slow");
  ASSERT_STR_EQ(jstr(s, "state"), "starting");
  ASSERT(json_is_integer(json_object_get(s, "ms")));
  json_decref(j);
  fx_finish(&fx);
  al_free(cfg);
  al_buf_free(&b);
  return 0;
}
