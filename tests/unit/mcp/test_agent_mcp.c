/* MCP servers in the agent (SPEC §16): tools offered as mcp__server__tool
 * and called from a run, the startup wait that never holds the first
 * request for long, late servers joining at the next turn boundary,
 * reported name collisions, and close leaving no process behind. The
 * model is agentloop-mockllm; the server is the fault server
 * (mcp_server.c). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "unit/loop/agent_fx.h"
#include "test.h"

#define jstr fx_jstr

/* The fault server runs in the tool sandbox (the default) in the normal
 * build; an ASan build of it cannot map its shadow memory under the
 * sandbox's address-space limit, so there it runs unconfined. */
#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_KEY ",\"sandbox\":false"
#else
#define SANDBOX_KEY ""
#endif

/* "mcpServers" JSON with one entry per NAME:ARGS pair; ARGS is a
 * comma-separated list of JSON strings (may be empty). extra: more
 * top-level keys ("\"startup_wait_ms\":0,"). */
static char *mcp_cfg(const char *extra, const char *const *servers,
                     const char *server_keys) {
  al_buf_t b;
  size_t i;

  al_buf_init(&b, 1 << 16);
  al_buf_printf(&b, "{%s\"mcpServers\":{", extra != NULL ? extra : "");
  for (i = 0; servers[i] != NULL; i += 2) {
    al_buf_printf(&b,
                  "%s\"%s\":{\"command\":\"%s\",\"args\":[\"--helper\","
                  "\"mcp_server\"%s%s]%s}",
                  i > 0 ? "," : "", servers[i], al_test_exe(),
                  servers[i + 1][0] != '\0' ? "," : "", servers[i + 1],
                  server_keys != NULL ? server_keys : SANDBOX_KEY);
  }
  al_buf_append_str(&b, "}}");
  return b.data;
}

/* AL_TEST_DUMP=1: the event log on stderr. */
static void maybe_dump(const fx_t *f) {
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

TEST_IMPL(agent_mcp_tool_called_from_run) {
  fx_t f;
  const char *servers[] = {"f", "", NULL};
  char *cfg = mcp_cfg(NULL, servers, NULL);
  long ready, changed;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: m1, name: mcp__f__echo, input: {text: 'via mcp'}}\n"
              "        - tool_use: {id: m2, name: mcp__f__fail, input: {}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  /* The server was ready before the first request (default wait 1.5 s). */
  maybe_dump(&f);
  /* The servers start on the loop's next turn: the subscriber sees
   * starting too. */
  ready = find_state(&f, "f", "ready");
  ASSERT(find_state(&f, "f", "starting") >= 0);
  ASSERT(find_state(&f, "f", "starting") < ready);
  changed = fx_find(&f, "mcp_tools_changed", NULL, 0);
  ASSERT(changed > ready);
  ASSERT_EQ(json_integer_value(json_object_get(fx_event(&f, changed), "added")),
            11);
  /* 11 small tools: a few hundred tokens of definitions, not zero. */
  ASSERT_GE(json_integer_value(
                json_object_get(fx_event(&f, changed), "definition_tokens")),
            200);
  ASSERT_LE(json_integer_value(
                json_object_get(fx_event(&f, changed), "definition_tokens")),
            2000);
  ASSERT(changed < fx_find(&f, "turn_started", NULL, 0));
  ASSERT(offers(&f, 0, "mcp__f__echo"));
  ASSERT(offers(&f, 0, "bash"));
  ASSERT(!offers(&f, 0, "mcp__f__badschema"));
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "m1"), "content"), "via mcp");
  ASSERT(!json_is_true(json_object_get(fx_tool_result(&f, 1, "m1"), "is_error")));
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "m2"), "content"),
                "it failed on purpose");
  ASSERT(json_is_true(json_object_get(fx_tool_result(&f, 1, "m2"), "is_error")));
  fx_assert_valid(&f);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* A server that hangs at initialize delays the first request by at most
 * startup_wait_ms; the run goes on without its tools. */
TEST_IMPL(agent_mcp_hanging_server_does_not_block) {
  fx_t f;
  const char *servers[] = {"h", "\"--hang-init\"", NULL};
  char *cfg = mcp_cfg("\"startup_wait_ms\":150,", servers, NULL);
  long rs, ts;
  uint64_t waited_ms;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hello'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  rs = fx_find(&f, "run_started", NULL, 0);
  ts = fx_find(&f, "turn_started", NULL, 0);
  waited_ms = (uint64_t)(json_integer_value(json_object_get(fx_event(&f, ts), "ts_ns")) -
                         json_integer_value(json_object_get(fx_event(&f, rs), "ts_ns"))) /
              1000000;
  /* It waited (the server was still starting) but not past the wait. */
  ASSERT(waited_ms <= 150 + 250 * (uint64_t)al_test_timeout_multiplier());
  ASSERT_EQ(find_state(&f, "h", "ready"), -1);
  ASSERT(!offers(&f, 0, "mcp__h__echo"));
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* ---- a late server joins at the next turn boundary ------------------------------- */

static al_tool_ctx_t *waiting_ctx;
static bool server_ready;

static void waiter_run(al_tool_ctx_t *ctx, void *data) {
  (void)data;
  if (server_ready) {
    al_tool_ctx_complete(ctx, false, "ready already", 13);
    return;
  }
  waiting_ctx = ctx;
}

static void late_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)f;
  if (ev->type == AL_EVENT_MCP_SERVER_STATE &&
      strcmp(jstr(j, "state"), "ready") == 0) {
    server_ready = true;
    if (waiting_ctx != NULL) {
      al_tool_ctx_complete(waiting_ctx, false, "server ready", 12);
      waiting_ctx = NULL;
    }
  }
}

TEST_IMPL(agent_mcp_late_server_joins_next_turn) {
  fx_t f;
  const char *servers[] = {"f", "", NULL};
  char *cfg = mcp_cfg("\"startup_wait_ms\":0,", servers, NULL);
  al_tool_def_t def;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: w1, name: waiter, input: {}}}]}\n"
              "  - reply: {content: [{tool_use: {id: m1, name: mcp__f__echo, input: {text: late}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.mcp_config = cfg;
  f.hook = late_hook;
  fx_start(&f);
  memset(&def, 0, sizeof(def));
  def.name = "waiter";
  def.description = "waits until the MCP server is ready";
  def.run = waiter_run;
  def.category = AL_TOOL_READ;
  ASSERT_EQ(al_agent_add_tool(f.agent, &def), 0);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  /* Turn 1 went out at once, without the server's tools; turn 2 has them. */
  ASSERT(!offers(&f, 0, "mcp__f__echo"));
  ASSERT(offers(&f, 1, "mcp__f__echo"));
  ASSERT(offers(&f, 2, "mcp__f__echo"));
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 2, "m1"), "content"), "late");
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* Two servers offering `echo`, and one offering two tools of the same
 * name: every tool gets a distinct name; the real clash (two tools that
 * would share mcp__b__echo) is reported, the same tool name on two servers
 * (mcp__a__echo, mcp__b__echo: no clash) is not. */
TEST_IMPL(agent_mcp_collisions_reported) {
  fx_t f;
  const char *servers[] = {"a", "", "b", "\"--dup\",\"echo\"", NULL};
  char *cfg = mcp_cfg(NULL, servers, NULL);
  size_t i, hashed = 0;
  json_t *t;
  bool also = false, taken = false;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hi'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT(offers(&f, 0, "mcp__a__echo"));
  ASSERT(offers(&f, 0, "mcp__b__echo"));
  json_array_foreach(json_object_get(fx_request(&f, 0)->body, "tools"), i, t) {
    hashed += strncmp(jstr(t, "name"), "mcp__b__echo_", 13) == 0;
  }
  ASSERT_EQ(hashed, 1);
  json_array_foreach(f.events, i, t) {
    if (strcmp(jstr(t, "type"), "mcp_warning") == 0) {
      also = also || strstr(jstr(t, "message"), "is also offered by server") != NULL;
      taken = taken || strstr(jstr(t, "message"), "which is taken") != NULL;
    }
  }
  ASSERT(!also);
  ASSERT(taken);
  fx_assert_valid(&f);
  fx_finish(&f);
  al_free(cfg);
  return 0;
}

/* Closing the agent ends a server that ignores end of input and SIGTERM. */
TEST_IMPL(agent_mcp_close_leaves_no_process) {
  fx_t f;
  char pf[128];
  char args[256];
  const char *servers[] = {"k", args, NULL};
  char *cfg;
  char *pid_text;
  size_t n;
  int pid;

  signal(SIGPIPE, SIG_IGN);
  snprintf(pf, sizeof(pf), "/tmp/al_agent_mcp_pid_%d", (int)getpid());
  snprintf(args, sizeof(args),
           "\"--ignore-eof\",\"--ignore-term\",\"--pidfile\",\"%s\"", pf);
  cfg = mcp_cfg(NULL, servers, ",\"sandbox\":false");
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hi'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT(find_state(&f, "k", "ready") >= 0);
  pid_text = al_test_read_file(pf, &n);
  ASSERT_NOT_NULL(pid_text);
  pid = atoi(pid_text);
  free(pid_text);
  ASSERT(pid > 0 && kill(pid, 0) == 0);
  fx_finish(&f); /* closes the agent and runs the loop dry */
  ASSERT(kill(pid, 0) != 0 && errno == ESRCH);
  unlink(pf);
  al_free(cfg);
  return 0;
}
