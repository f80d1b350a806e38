/* The run driver's states for what a run waits on besides the model
 * (STYLE §6.1): prompt hooks and stop hooks (HOOKS) and MCP servers still
 * starting (WAIT_MCP) are states of the one enum, so set_state's debug
 * trace shows them; before, the run sat in `streaming` with a flag. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_fx.h"
#include "common/common.h"
#include "test.h"

/* The fault server in the sandbox, as test_agent_mcp.c runs it (an ASan
 * build of it runs unconfined). */
#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_KEY ",\"sandbox\":false"
#else
#define SANDBOX_KEY ""
#endif

typedef struct {
  int fd;
  int saved;
  char path[32];
} trace_t;

/* set_state's debug lines go to a file from here on. */
static void trace_start(trace_t *t) {
  snprintf(t->path, sizeof(t->path), "/tmp/al-state-XXXXXX");
  t->fd = mkstemp(t->path);
  ASSERT(t->fd >= 0);
  t->saved = dup(STDERR_FILENO);
  fflush(stderr);
  ASSERT(dup2(t->fd, STDERR_FILENO) >= 0);
  al_log_set_level(AL_LOG_DEBUG);
}

/* The state lines, in order, are exactly want[0..n). */
static void trace_check(trace_t *t, const char *const *want, size_t n) {
  const char *p;
  char *log;
  size_t len;
  size_t i;

  fflush(stderr);
  al_log_set_level(AL_LOG_WARN);
  dup2(t->saved, STDERR_FILENO);
  close(t->saved);
  close(t->fd);
  log = al_test_read_file(t->path, &len);
  unlink(t->path);
  ASSERT_NOT_NULL(log);
  p = log;
  for (i = 0; i < n; i++) {
    char line[128];
    const char *hit = strstr(p, ": state ");

    snprintf(line, sizeof(line), ": state %s\n", want[i]);
    if (hit == NULL || strncmp(hit, line, strlen(line)) != 0) {
      AL_TEST_FAIL("state change %zu: want '%s', log from here:\n%s", i,
                   want[i], hit != NULL ? hit : "(end)");
    }
    p = hit + strlen(line);
  }
  ASSERT_NULL(strstr(p, ": state "));
  free(log);
}

/* A prompt hook and a stop hook, both with no opinion: the run waits for
 * each in HOOKS. */
TEST_IMPL(agent_state_trace_hooks) {
  fx_t f;
  trace_t t;
  const char *want[] = {"idle -> streaming", "streaming -> hooks",
                        "hooks -> streaming", /* user_prompt_submit passed */
                        "streaming -> hooks", /* stop hooks on the reply */
                        "hooks -> idle",      /* no opinion: final */
                        "idle -> closing"};

  signal(SIGPIPE, SIG_IGN);
  trace_start(&t);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hello'}]}\n");
  f.opts.hooks_config =
      "{\"hooks\":{\"user_prompt_submit\":[{\"name\":\"p\",\"command\":"
      "[\"sh\",\"-c\",\"cat >/dev/null\"]}],\"stop\":[{\"name\":\"s\","
      "\"command\":[\"sh\",\"-c\",\"cat >/dev/null\"]}]}}";
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "hook_executed"), 2);
  fx_finish(&f);
  trace_check(&t, want, AL_ARRAY_SIZE(want));
  return 0;
}

/* A server still starting when the run begins (the run starts before the
 * loop turns once, so it cannot be ready): the first turn waits in
 * WAIT_MCP until it is (the wait's bound is far away). */
TEST_IMPL(agent_state_trace_mcp_wait) {
  fx_t f;
  trace_t t;
  char mcp[1024];
  const char *want[] = {"idle -> streaming", "streaming -> wait_mcp",
                        "wait_mcp -> streaming", /* ready: the request */
                        "streaming -> idle", "idle -> closing"};

  signal(SIGPIPE, SIG_IGN);
  snprintf(mcp, sizeof(mcp),
           "{\"startup_wait_ms\":60000,\"mcpServers\":{\"f\":{\"command\":"
           "\"%s\",\"args\":[\"--helper\",\"mcp_server\"]%s}}}",
           al_test_exe(), SANDBOX_KEY);
  trace_start(&t);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hello'}]}\n");
  f.opts.mcp_config = mcp;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(fx_find(&f, "mcp_startup_complete", NULL, 0) <
         fx_find(&f, "turn_started", NULL, 0));
  fx_finish(&f);
  trace_check(&t, want, AL_ARRAY_SIZE(want));
  return 0;
}
