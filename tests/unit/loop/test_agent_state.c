/* The agent's one state enum (STYLE.md §5 item 1): every change goes
 * through set_state, which logs old -> new at debug level. The trace of a
 * run that calls a tool, reaches max_turns (summary) and, in a second run,
 * is cancelled, is exactly the expected sequence. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_fx.h"
#include "common/common.h"
#include "test.h"

static int g_cancel_rc = 1;

/* Cancels the second run as soon as its request started. */
static void cancel_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)j;
  if (ev->type == AL_EVENT_STREAM_REQUEST_START && ev->run == 2) {
    g_cancel_rc = al_agent_cancel(f->agent);
  }
}

TEST_IMPL(agent_state_trace) {
  fx_t f;
  char path[] = "/tmp/al-state-XXXXXX";
  int fd = mkstemp(path);
  int saved = dup(STDERR_FILENO);
  char *log;
  size_t len;
  const char *want[] = {
      /* run 1: tool turn, then max_turns -> summary -> final */
      "idle -> streaming", "streaming -> tools", "tools -> streaming",
      "streaming -> tools", "tools -> summary", "summary -> idle",
      /* run 2: cancelled while streaming */
      "idle -> streaming", "streaming -> idle", "idle -> ending",
      "ending -> idle",
      /* close */
      "idle -> closing"};
  const char *p;
  size_t i;

  ASSERT(fd >= 0);
  fflush(stderr);
  ASSERT(dup2(fd, STDERR_FILENO) >= 0);
  al_log_set_level(AL_LOG_DEBUG);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: k1, name: list_directory, input: {}}}]}\n"
              "  - reply: {content: [{tool_use: {id: k2, name: list_directory, input: {}}}]}\n"
              "  - reply: {content: [{text: 'Summary.'}]}\n"
              "  - delay_ms: 200\n"
              "    reply: {content: [{text: 'never seen', chunks: 3}]}\n");
  f.opts.max_turns = 2;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  f.hook = cancel_hook;
  fx_run(&f, "again");
  ASSERT_EQ(g_cancel_rc, 0);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  fx_finish(&f);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);

  log = al_test_read_file(path, &len);
  unlink(path);
  ASSERT_NOT_NULL(log);
  /* Only the state lines, in order, and nothing else in between. */
  p = log;
  for (i = 0; i < AL_ARRAY_SIZE(want); i++) {
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
  return 0;
}
