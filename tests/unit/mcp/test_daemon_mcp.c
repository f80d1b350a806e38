/* agentloopd with MCP servers and hooks (daemon options mcp_config,
 * hooks_config): a session's agent starts the server, the model's call
 * reaches it, a pre_tool_use hook blocks write_file, and shutting the
 * daemon down leaves no server process, even one that ignores end of
 * input and SIGTERM. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "unit/daemon/dtest.h"

static const char *ev_field(const dt_client_t *c, size_t i, const char *k) {
  return json_string_value(json_object_get(
      json_object_get(json_array_get(c->msgs, i), "params"), k));
}

/* The tool_use_completed event for call_id, or (size_t)-1. */
static size_t completed(const dt_client_t *c, const char *id) {
  size_t i;

  for (i = 0; i < json_array_size(c->msgs); i++) {
    const char *t = dt_ev_type(c, i);

    if (t != NULL && strcmp(t, "tool_use_completed") == 0 &&
        strcmp(ev_field(c, i, "call_id"), id) == 0) {
      return i;
    }
  }
  return (size_t)-1;
}

TEST_IMPL(daemon_mcp_and_hooks) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char sid[64];
  char p[512];
  char pf[128];
  char mcp[1024];
  size_t i, n;
  char *pid_text;
  int pid;

  signal(SIGPIPE, SIG_IGN);
  snprintf(pf, sizeof(pf), "/tmp/al_dmcp_pid_%d", (int)getpid());
  snprintf(mcp, sizeof(mcp),
           "{\"mcpServers\":{\"f\":{\"command\":\"%s\",\"args\":[\"--helper\","
           "\"mcp_server\",\"--ignore-eof\",\"--ignore-term\",\"--pidfile\","
           "\"%s\"],\"sandbox\":false}}}",
           al_test_exe(), pf);
  dt_init(&t, "responses:\n"
              "  - reply: {content: [{tool_use: {id: m1, name: mcp__f__echo, "
              "input: {text: 'via the daemon'}}}, {tool_use: {id: w1, name: "
              "write_file, input: {path: x.txt, content: x}}}]}\n"
              "  - reply: {content: [{text: 'finished'}]}\n");
  t.o.mcp_config = mcp;
  t.o.hooks_config =
      "{\"hooks\":{\"pre_tool_use\":[{\"name\":\"nowrite\",\"matcher\":"
      "\"write_file\",\"sandbox\":false,\"command\":[\"sh\",\"-c\",\"cat "
      ">/dev/null; echo read-only >&2; exit 2\"]}]}}";
  t.o.kill_grace_ms = 50;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  dt_wait_event(&c, "final", 0);
  i = completed(&c, "m1");
  ASSERT(i != (size_t)-1);
  ASSERT_STR_EQ(ev_field(&c, i, "content"), "via the daemon");
  i = completed(&c, "w1");
  ASSERT(i != (size_t)-1);
  ASSERT(strstr(ev_field(&c, i, "content"), "denied by hook 'nowrite': "
                                            "read-only") != NULL);
  ASSERT(dt_wait_event(&c, "hook_executed", 0) != (size_t)-1);
  pid_text = al_test_read_file(pf, &n);
  ASSERT_NOT_NULL(pid_text);
  pid = atoi(pid_text);
  free(pid_text);
  ASSERT(pid > 0 && kill(pid, 0) == 0);
  dt_finish(&t, cl, 1);
  ASSERT(kill(pid, 0) != 0 && errno == ESRCH);
  unlink(pf);
  return 0;
}
