/* Issue 23: how `agentloop run -v` and the chat show sub-agents: each
 * child's tool lines and approvals nested under it (indented by its
 * depth, prefixed with its agent's name and task path), its start and
 * outcome; its text stays out of the parent's reply. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/run_int.h"
#include "client/tui.h"
#include "test.h"

#define SL(s) ((al_slice_t){(s), sizeof(s) - 1})

static char *view_of(const al_event_t *evs, size_t n) {
  al__cli_view_t v;
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  size_t i;

  ASSERT_NOT_NULL(f);
  al__cli_view_init(&v, f, false);
  for (i = 0; i < n; i++) {
    al__cli_view_event(&v, &evs[i]);
  }
  al__cli_view_flush(&v);
  fclose(f);
  return out;
}

TEST_IMPL(i23_run_view_nested_tool_lines) {
  al_event_t ev[9];
  char *out;

  memset(ev, 0, sizeof(ev));
  ev[0].type = AL_EVENT_SUBAGENT_STARTED;
  ev[0].u.subagent.task_id = SL("t1");
  ev[0].u.subagent.agent = SL("explore");
  ev[0].u.subagent.description = SL("find the parser");
  ev[1].type = AL_EVENT_TOOL_USE_STARTED;
  ev[1].path = "t1";
  ev[1].u.tool.name = SL("grep");
  ev[1].u.tool.input = SL("{\"pattern\":\"sse\"}");
  ev[2].type = AL_EVENT_TEXT_DELTA; /* the child's text: not shown */
  ev[2].path = "t1";
  ev[2].u.delta.text = SL("CHILD TEXT");
  ev[3] = ev[0]; /* t1 starts its own child t3 */
  ev[3].path = "t1";
  ev[3].u.subagent.task_id = SL("t3");
  ev[3].u.subagent.agent = SL("general");
  ev[3].u.subagent.description = SL("deeper");
  ev[4].type = AL_EVENT_TOOL_USE_COMPLETED;
  ev[4].path = "t1/t3";
  ev[4].u.tool.name = SL("read_file");
  ev[4].u.tool.duration_ms = 3;
  ev[5].type = AL_EVENT_APPROVAL_REQUIRED;
  ev[5].path = "t1/t3";
  ev[5].u.approval.name = SL("bash");
  ev[5].u.approval.input = SL("{\"command\":\"make\"}");
  ev[6].type = AL_EVENT_FINAL; /* the child's final: the child's line only */
  ev[6].path = "t1";
  ev[7] = ev[0];
  ev[7].type = AL_EVENT_SUBAGENT_COMPLETED;
  ev[7].u.subagent.outcome = SL("completed");
  ev[7].u.subagent.input_tokens = 1200;
  ev[7].u.subagent.output_tokens = 80;
  ev[7].u.subagent.result = SL("in src/sse");
  ev[8].type = AL_EVENT_TOOL_USE_STARTED; /* the parent's own */
  ev[8].u.tool.name = SL("ls");
  ev[8].u.tool.input = SL("{}");
  out = view_of(ev, 9);
  ASSERT_NOT_NULL(strstr(out, "]   explore t1: ● started: find the parser\n"));
  ASSERT_NOT_NULL(strstr(out, "]   explore t1: ● grep {\"pattern\":\"sse\"} "
                              "started\n"));
  ASSERT_NOT_NULL(strstr(out, "]     general t1/t3: ● started: deeper\n"));
  ASSERT_NOT_NULL(strstr(out, "]     general t1/t3: ✓ read_file 3 ms\n"));
  ASSERT_NOT_NULL(strstr(out, "]     general t1/t3: approval required: bash "
                              "{\"command\":\"make\"}\n"));
  ASSERT_NOT_NULL(strstr(out, "]   explore t1: ✓ completed, 1200 in / 80 out "
                              "tokens: in src/sse\n"));
  ASSERT_NOT_NULL(strstr(out, "] ● ls {} started\n"));
  ASSERT_NULL(strstr(out, "CHILD TEXT"));
  ASSERT_NULL(strstr(out, "final"));
  free(out);
  return 0;
}
