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

__attribute__((unused)) static char *cfg1(const char *extra, const char *name, const char *args,
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

__attribute__((unused)) static bool offers(const fx_t *f, size_t req, const char *name) {
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
