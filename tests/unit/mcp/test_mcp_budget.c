/* The MCP tool budget (docs/mcp.md "Tool budget"): over tool_budget_pct
 * of the window the definitions leave the request behind mcp_tool_search,
 * a search loads its matches at the next turn boundary, always_load tools
 * are always sent, and under the budget nothing is deferred. The model is
 * agentloop-mockllm; the server is the fault server (mcp_server.c) with
 * 500 extra tools of about 50 tokens each against a 32,000-token window. */
#include <signal.h>
#include <string.h>

#include "common/common.h"
#include "mcp/mcp.h"
#include "unit/loop/agent_fx.h"
#include "test.h"

#define jstr fx_jstr

#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_KEY ",\"sandbox\":false"
#else
#define SANDBOX_KEY ""
#endif

/* One fault server "p" with `args`; top: more top-level keys; keys: more
 * server keys (",\"always_load\":[...]"). */
static char *budget_cfg(const char *top, const char *args, const char *keys) {
  al_buf_t b;

  al_buf_init(&b, 1 << 16);
  al_buf_printf(&b,
                "{%s\"mcpServers\":{\"p\":{\"command\":\"%s\",\"args\":["
                "\"--helper\",\"mcp_server\"%s%s]%s%s}}}",
                top, al_test_exe(), args[0] != '\0' ? "," : "", args,
                SANDBOX_KEY, keys);
  return b.data;
}

static size_t offered(const fx_t *f, size_t req, const char *prefix) {
  const json_t *tools = json_object_get(fx_request(f, req)->body, "tools");
  size_t i, n = 0;
  json_t *t;

  json_array_foreach(tools, i, t) {
    n += strncmp(jstr(t, "name"), prefix, strlen(prefix)) == 0 &&
         (prefix[strlen(prefix) - 1] == '_' ||
          strlen(jstr(t, "name")) == strlen(prefix));
  }
  return n;
}

static const json_t *changed_event(const fx_t *f, size_t n) {
  long i = fx_find(f, "mcp_tools_changed", NULL, n);

  return i >= 0 ? fx_event(f, (size_t)i) : NULL;
}

static json_int_t ival(const json_t *e, const char *key) {
  return json_integer_value(json_object_get(e, key));
}

#define MANY "\"--tools\",\"500\",\"--page\",\"100\""

TEST_IMPL(agent_mcp_budget_defers_and_loads) {
  fx_t f;
  char *cfg = budget_cfg("\"startup_wait_ms\":5000,", MANY, "");
  const json_t *e;
  const char *found, *none;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: s1, name: mcp_tool_search, input: {query: 'echo'}}\n"
              "        - tool_use: {id: s2, name: mcp_tool_search, input: {query: 'zzzz'}}\n"
              "  - reply: {content: [{tool_use: {id: m1, name: mcp__p__echo, input: {text: loaded}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  f.opts.context_window = 32000;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 3);
  /* Turn 1: the search tool, none of the 511 definitions. */
  ASSERT_EQ(offered(&f, 0, "mcp_tool_search"), 1);
  ASSERT_EQ(offered(&f, 0, "mcp__p__"), 0);
  ASSERT_EQ(offered(&f, 0, "bash"), 1);
  e = changed_event(&f, 0);
  ASSERT_NOT_NULL(e);
  ASSERT_EQ(ival(e, "added"), 511);
  ASSERT_EQ(ival(e, "deferred"), 511);
  ASSERT(ival(e, "definition_tokens") > 3200);
  ASSERT_EQ(ival(e, "deferred_tokens"), ival(e, "definition_tokens"));
  /* The search found echo (and only it); an unmatched query says so. */
  found = jstr(fx_tool_result(&f, 1, "s1"), "content");
  ASSERT(strstr(found, "- mcp__p__echo: Echo the text back") != NULL);
  ASSERT(strstr(found, "1 of 511 deferred MCP tools match") != NULL);
  none = jstr(fx_tool_result(&f, 1, "s2"), "content");
  ASSERT(strstr(none, "No deferred MCP tool matches 'zzzz'") != NULL);
  /* Loaded at the next boundary: turn 2 carries echo and nothing else of
   * the server; the tools_changed event reports one fewer deferred. */
  ASSERT_EQ(offered(&f, 1, "mcp__p__echo"), 1);
  ASSERT_EQ(offered(&f, 1, "mcp__p__"), 1);
  ASSERT_EQ(offered(&f, 1, "mcp_tool_search"), 1);
  e = changed_event(&f, 1);
  ASSERT_NOT_NULL(e);
  ASSERT_EQ(ival(e, "added"), 0);
  ASSERT_EQ(ival(e, "deferred"), 510);
  ASSERT(ival(e, "deferred_tokens") < ival(e, "definition_tokens"));
  /* The loaded tool is called and answers. */
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 2, "m1"), "content"), "loaded");
  ASSERT(!json_is_true(json_object_get(fx_tool_result(&f, 2, "m1"), "is_error")));
  /* The prefix stays stable: turn 2's tool list begins with turn 1's. */
  ASSERT_EQ(json_array_size(json_object_get(fx_request(&f, 1)->body, "tools")),
            json_array_size(json_object_get(fx_request(&f, 0)->body, "tools")) + 1);
  fx_assert_valid(&f);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

#define FORTY_ONE "\"--tools\",\"30\""

/* Under the budget (11 tools), with both limits off (511 tools), or with
 * the count limit off (41 tools, under the share of the window), every
 * definition is sent and there is no search tool. */
TEST_IMPL(agent_mcp_budget_under_sends_all) {
  static const int sent[] = {11, 511, 41};
  int k;

  signal(SIGPIPE, SIG_IGN);
  for (k = 0; k < 3; k++) {
    fx_t f;
    char *cfg = k == 0   ? budget_cfg("\"startup_wait_ms\":5000,", "", "")
                : k == 1 ? budget_cfg("\"startup_wait_ms\":5000,"
                                      "\"tool_budget_pct\":0,"
                                      "\"tool_budget_max_tools\":0,",
                                      MANY, "")
                         : budget_cfg("\"startup_wait_ms\":5000,"
                                      "\"tool_budget_max_tools\":0,",
                                      FORTY_ONE, "");
    const json_t *e;

    fx_init(&f, "responses:\n  - reply: {content: [{text: 'hi'}]}\n");
    f.opts.mcp_config = cfg;
    f.opts.context_window = 32000;
    fx_start(&f);
    fx_run(&f, "go");
    ASSERT_STR_EQ(fx_last_type(&f), "final");
    ASSERT_EQ(offered(&f, 0, "mcp__p__"), (size_t)sent[k]);
    ASSERT_EQ(offered(&f, 0, "mcp_tool_search"), 0);
    e = changed_event(&f, 0);
    ASSERT_NOT_NULL(e);
    ASSERT_EQ(ival(e, "deferred"), 0);
    ASSERT_EQ(ival(e, "deferred_tokens"), 0);
    ASSERT(ival(e, "definition_tokens") > 0);
    fx_finish(&f);
    al_free(cfg);
  }
  return 0;
}

/* More than tool_budget_max_tools (default 40) tools are deferred even
 * when they cost less than the share of the window. */
TEST_IMPL(agent_mcp_budget_tool_count) {
  fx_t f;
  char *cfg = budget_cfg("\"startup_wait_ms\":5000,", FORTY_ONE, "");
  const json_t *e;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hi'}]}\n");
  f.opts.mcp_config = cfg;
  f.opts.context_window = 32000;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(offered(&f, 0, "mcp__p__"), 0);
  ASSERT_EQ(offered(&f, 0, "mcp_tool_search"), 1);
  e = changed_event(&f, 0);
  ASSERT_EQ(ival(e, "deferred"), 41);
  ASSERT(ival(e, "definition_tokens") < 3200);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* always_load tools are sent over the budget, from the first turn on. */
TEST_IMPL(agent_mcp_budget_always_load) {
  fx_t f;
  char *cfg = budget_cfg("\"startup_wait_ms\":5000,", MANY,
                         ",\"always_load\":[\"echo\",\"t7\"]");
  const json_t *e;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: m1, name: mcp__p__echo, input: {text: always}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  f.opts.context_window = 32000;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(offered(&f, 0, "mcp_tool_search"), 1);
  ASSERT_EQ(offered(&f, 0, "mcp__p__echo"), 1);
  ASSERT_EQ(offered(&f, 0, "mcp__p__t7"), 1);
  ASSERT_EQ(offered(&f, 0, "mcp__p__"), 2);
  ASSERT_EQ(offered(&f, 1, "mcp__p__"), 2);
  e = changed_event(&f, 0);
  ASSERT_EQ(ival(e, "deferred"), 509);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "m1"), "content"), "always");
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* tool_budget_pct and always_load: defaults, bounds, types, and the
 * config.yaml section's tool_budget_pct. */
TEST_IMPL(mcp_budget_config) {
  static const char *const bad[] = {
      "{\"tool_budget_pct\":101}", "{\"tool_budget_pct\":-1}",
      "{\"tool_budget_pct\":\"10\"}", "{\"tool_budget_max_tools\":-1}",
      "{\"mcpServers\":{\"a\":{\"command\":\"x\",\"always_load\":\"yes\"}}}",
      "{\"mcpServers\":{\"a\":{\"command\":\"x\",\"always_load\":[1]}}}",
      NULL};
  al_mcp_config_t c;
  al_buf_t err;
  json_t *section;
  char *out = NULL;
  size_t i;
  const char *ok = "{\"mcpServers\":{\"a\":{\"command\":\"x\","
                   "\"always_load\":[\"echo\"]},\"b\":{\"command\":\"y\","
                   "\"always_load\":true}}}";

  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(ok, strlen(ok), &c, &err), 0);
  ASSERT_EQ(c.tool_budget_pct, AL_MCP_DEFAULT_TOOL_BUDGET_PCT);
  ASSERT_EQ(c.tool_budget_max_tools, AL_MCP_DEFAULT_TOOL_BUDGET_MAX_TOOLS);
  ASSERT_EQ(c.n, 2);
  ASSERT(json_is_array(c.servers[0].always_load));
  ASSERT(json_is_true(c.servers[1].always_load));
  al__mcp_config_free(&c);
  for (i = 0; bad[i] != NULL; i++) {
    al_buf_reset(&err);
    ASSERT_EQ(al__mcp_config_parse(bad[i], strlen(bad[i]), &c, &err), AL_EINVAL);
    ASSERT(strstr(err.data, i < 4 ? "tool_budget_" : "always_load") != NULL);
  }
  section = json_pack("{s:i, s:i, s:{s:s}}", "tool_budget_pct", 25,
                      "tool_budget_max_tools", 7, "a", "command", "x");
  ASSERT_EQ(al__mcp_config_load2(NULL, section, NULL, false, &out, &err), 0);
  ASSERT_NOT_NULL(out);
  ASSERT_EQ(al__mcp_config_parse(out, strlen(out), &c, &err), 0);
  ASSERT_EQ(c.tool_budget_pct, 25);
  ASSERT_EQ(c.tool_budget_max_tools, 7);
  ASSERT_EQ(c.n, 1);
  al__mcp_config_free(&c);
  al_free(out);
  json_decref(section);
  al_buf_free(&err);
  return 0;
}

static void noop_run(al_tool_ctx_t *ctx, void *data) {
  (void)data;
  al_tool_ctx_complete(ctx, false, "mine", 4);
}

/* An embedder's tool already named mcp_tool_search: nothing is deferred
 * (the model could not reach the deferred tools), and a warning says so. */
TEST_IMPL(agent_mcp_budget_search_name_taken) {
  fx_t f;
  char *cfg = budget_cfg("\"startup_wait_ms\":5000,", MANY, "");
  al_tool_def_t def;
  long w;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hi'}]}\n");
  f.opts.mcp_config = cfg;
  f.opts.context_window = 32000;
  fx_start(&f);
  memset(&def, 0, sizeof(def));
  def.name = "mcp_tool_search";
  def.description = "the embedder's own";
  def.run = noop_run;
  def.category = AL_TOOL_READ;
  ASSERT_EQ(al_agent_add_tool(f.agent, &def), 0);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(offered(&f, 0, "mcp__p__"), 511);
  ASSERT_EQ(offered(&f, 0, "mcp_tool_search"), 1);
  ASSERT_EQ(ival(changed_event(&f, 0), "deferred"), 0);
  w = fx_find(&f, "mcp_warning", NULL, 0);
  ASSERT(w >= 0);
  ASSERT(strstr(jstr(fx_event(&f, (size_t)w), "message"),
                "'mcp_tool_search' is taken") != NULL);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}
