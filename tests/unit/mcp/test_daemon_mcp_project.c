/* agentloopd and a project's .mcp.json (docs/mcp.md "Configuring
 * servers"): a session whose workspace is trusted (the decision recorded
 * by `agentloop tools --trust-project`, under $XDG_CONFIG_HOME) starts the
 * servers of <cwd>/.mcp.json and the model's call reaches them; an
 * untrusted workspace's file is not read (an mcp_warning says so) and a
 * broken one is reported with FILE:LINE:COL. The daemon is al_daemon_t on
 * the test's loop, the model agentloop-mockllm, the server the fault
 * server (mcp_server.c). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "tools/clitool.h"
#include "unit/daemon/dtest.h"

static const char scn[] =
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: m1, name: mcp__p__echo, "
    "input: {text: 'from the project'}}}]}\n"
    "  - reply: {content: [{text: 'finished'}]}\n";

static const json_t *ev_params(const dt_client_t *c, size_t i) {
  return json_object_get(json_array_get(c->msgs, i), "params");
}

static const char *ev_str(const dt_client_t *c, size_t i, const char *k) {
  return json_string_value(json_object_get(ev_params(c, i), k));
}

static size_t find_ev(const dt_client_t *c, const char *type, const char *k,
                      const char *v) {
  size_t i;

  for (i = 0; i < json_array_size(c->msgs); i++) {
    const char *t = dt_ev_type(c, i);

    if (t != NULL && strcmp(t, type) == 0 &&
        (k == NULL || (ev_str(c, i, k) != NULL &&
                       strcmp(ev_str(c, i, k), v) == 0))) {
      return i;
    }
  }
  return (size_t)-1;
}

static void write_file(const char *dir, const char *name, const char *text) {
  char p[512];
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", dir, name);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  ASSERT_EQ(fclose(f), 0);
}

/* The project's .mcp.json names the fault server as "p". */
static void write_project(dt_t *t) {
  char mcp[1024];

  snprintf(mcp, sizeof(mcp),
           "{\"mcpServers\":{\"p\":{\"command\":\"%s\",\"args\":"
           "[\"--helper\",\"mcp_server\"],\"sandbox\":false}}}\n",
           al_test_exe());
  write_file(t->work, ".mcp.json", mcp);
}

/* A private config directory, so the trust decision is the test's own. */
static void private_config(dt_t *t) {
  char cfg[256];

  snprintf(cfg, sizeof(cfg), "%s/cfg", t->root);
  ASSERT_EQ(mkdir(cfg, 0700), 0);
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", cfg, 1), 0);
}

/* Creates a session in t->work, subscribes from the start, sends "go" and
 * waits for the run's end. */
static void run_session(dt_t *t, dt_client_t *c) {
  char sid[64];
  char p[512];

  dt_connect(t, c);
  dt_init_client(c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t->work);
  dt_create(c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"since_seq\":0}", sid);
  dt_call(c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(c, 4, "turn/send", p);
  dt_wait_event(c, "final", 0);
}

TEST_IMPL(daemon_mcp_project_trusted) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  size_t i;

  signal(SIGPIPE, SIG_IGN);
  dt_init(&t, scn);
  private_config(&t);
  write_project(&t);
  ASSERT_EQ(al__tools_trust_project(t.work, NULL), 0);
  /* A long startup wait: a loaded machine cannot make the first turn go
   * without the project's server. */
  t.o.mcp_config = "{\"startup_wait_ms\":60000,\"mcpServers\":{}}";
  t.o.kill_grace_ms = 50;
  dt_start(&t);
  run_session(&t, &c);
  i = find_ev(&c, "tool_use_completed", "call_id", "m1");
  ASSERT(i != (size_t)-1);
  ASSERT_STR_EQ(ev_str(&c, i, "content"), "from the project");
  ASSERT(!json_is_true(json_object_get(ev_params(&c, i), "is_error")));
  ASSERT(find_ev(&c, "mcp_server_state", "state", "ready") != (size_t)-1);
  ASSERT(find_ev(&c, "mcp_tool_call_begin", "server", "p") != (size_t)-1);
  ASSERT_EQ(find_ev(&c, "mcp_warning", "server", ".mcp.json"), (size_t)-1);
  dt_assert_valid(&t);
  dt_finish(&t, cl, 1);
  return 0;
}

TEST_IMPL(daemon_mcp_project_untrusted) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  size_t i;

  signal(SIGPIPE, SIG_IGN);
  dt_init(&t, scn);
  private_config(&t);
  write_project(&t); /* no trust decision recorded */
  t.o.kill_grace_ms = 50;
  dt_start(&t);
  run_session(&t, &c);
  i = find_ev(&c, "tool_use_completed", "call_id", "m1");
  ASSERT(i != (size_t)-1);
  ASSERT(json_is_true(json_object_get(ev_params(&c, i), "is_error")));
  ASSERT_NULL(strstr(ev_str(&c, i, "content"), "from the project"));
  ASSERT_EQ(find_ev(&c, "mcp_server_state", NULL, NULL), (size_t)-1);
  i = find_ev(&c, "mcp_warning", "server", ".mcp.json");
  ASSERT(i != (size_t)-1);
  ASSERT_NOT_NULL(strstr(ev_str(&c, i, "message"), "not trusted"));
  dt_finish(&t, cl, 1);
  return 0;
}

/* A trusted project's broken file: the error names the place; the
 * daemon's own servers (here none) are unaffected and the run goes on. */
TEST_IMPL(daemon_mcp_project_broken_file) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  size_t i;

  signal(SIGPIPE, SIG_IGN);
  dt_init(&t, scn);
  private_config(&t);
  write_file(t.work, ".mcp.json", "{\"mcpServers\": {\"p\": {\"command\": }}}\n");
  ASSERT_EQ(al__tools_trust_project(t.work, NULL), 0);
  t.o.kill_grace_ms = 50;
  dt_start(&t);
  run_session(&t, &c);
  i = find_ev(&c, "mcp_warning", "server", ".mcp.json");
  ASSERT(i != (size_t)-1);
  ASSERT_NOT_NULL(strstr(ev_str(&c, i, "message"), "/.mcp.json:1:"));
  i = find_ev(&c, "tool_use_completed", "call_id", "m1");
  ASSERT(i != (size_t)-1);
  ASSERT(json_is_true(json_object_get(ev_params(&c, i), "is_error")));
  dt_finish(&t, cl, 1);
  return 0;
}

/* The trust file and .mcp.json are read off the daemon's loop: with a
 * FIFO that has no writer as the project's .mcp.json, a read on the loop
 * would hang it before session/create is answered. The answer comes; then
 * the test writes the file through the FIFO, and the first run (waiting
 * for the read) gets the project's server. */
TEST_IMPL(daemon_mcp_project_read_off_loop) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char sid[64];
  char p[512];
  char fifo[256];
  char mcp[1024];
  FILE *f;
  size_t i;

  signal(SIGPIPE, SIG_IGN);
  dt_init(&t, scn);
  private_config(&t);
  snprintf(fifo, sizeof(fifo), "%s/.mcp.json", t.work);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  ASSERT_EQ(al__tools_trust_project(t.work, NULL), 0);
  /* No servers of its own; a long wait, so a loaded machine cannot make
   * the run give up on the project's server. */
  t.o.mcp_config = "{\"startup_wait_ms\":60000,\"mcpServers\":{}}";
  t.o.kill_grace_ms = 50;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid)); /* answered: the loop is free */
  snprintf(mcp, sizeof(mcp),
           "{\"mcpServers\":{\"p\":{\"command\":\"%s\",\"args\":"
           "[\"--helper\",\"mcp_server\"],\"sandbox\":false}}}\n",
           al_test_exe());
  f = fopen(fifo, "w"); /* meets the pool thread's open */
  ASSERT_NOT_NULL(f);
  fputs(mcp, f);
  ASSERT_EQ(fclose(f), 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"since_seq\":0}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  dt_wait_event(&c, "final", 0);
  i = find_ev(&c, "tool_use_completed", "call_id", "m1");
  ASSERT(i != (size_t)-1);
  ASSERT_STR_EQ(ev_str(&c, i, "content"), "from the project");
  dt_finish(&t, cl, 1);
  return 0;
}
