/* Issue 23: how `agentloop run -v` and the chat show sub-agents: each
 * child's tool lines and approvals nested under it (indented by its
 * depth, prefixed with its agent's name and task path), its start and
 * outcome; its text stays out of the parent's reply. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
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
  ASSERT_NOT_NULL(strstr(out,
                         "]   explore t1: ● grep {\"pattern\":\"sse\"} "
                         "started\n"));
  ASSERT_NOT_NULL(strstr(out, "]     general t1/t3: ● started: deeper\n"));
  ASSERT_NOT_NULL(strstr(out, "]     general t1/t3: ✓ read_file 3 ms\n"));
  ASSERT_NOT_NULL(strstr(out,
                         "]     general t1/t3: approval required: bash "
                         "{\"command\":\"make\"}\n"));
  ASSERT_NOT_NULL(strstr(out,
                         "]   explore t1: ✓ completed, 1200 in / 80 out "
                         "tokens: in src/sse\n"));
  ASSERT_NOT_NULL(strstr(out, "] ● ls {} started\n"));
  ASSERT_NULL(strstr(out, "CHILD TEXT"));
  ASSERT_NULL(strstr(out, "final"));
  free(out);
  return 0;
}

/* The chat's view of the same: nested lines on stderr, the child's final
 * not the end of the run, its text not in the answer. */
TEST_IMPL(i23_chat_view_nested_tool_lines) {
  static const char *const evs[] = {
      "{\"type\":\"subagent_started\",\"task_id\":\"t1\",\"agent\":\"explore\","
      "\"description\":\"find the parser\",\"background\":false}",
      "{\"type\":\"tool_use_started\",\"path\":\"t1\",\"call_id\":\"c1\","
      "\"name\":\"grep\",\"input\":{\"pattern\":\"sse\"}}",
      "{\"type\":\"text_delta\",\"path\":\"t1\",\"index\":0,"
      "\"text\":\"CHILD TEXT\"}",
      "{\"type\":\"tool_use_completed\",\"path\":\"t1\",\"call_id\":\"c1\","
      "\"name\":\"grep\",\"is_error\":false,\"content\":\"CHILD OUTPUT\","
      "\"duration_ms\":3}",
      "{\"type\":\"subagent_started\",\"path\":\"t1\",\"task_id\":\"t3\","
      "\"agent\":\"general\",\"description\":\"deeper\"}",
      "{\"type\":\"tool_use_completed\",\"path\":\"t1/t3\",\"call_id\":\"c9\","
      "\"name\":\"read_file\",\"is_error\":true,\"content\":\"nope\","
      "\"duration_ms\":1}",
      "{\"type\":\"final\",\"path\":\"t1\",\"text\":\"child done\"}",
      "{\"type\":\"subagent_completed\",\"task_id\":\"t1\",\"agent\":"
      "\"explore\",\"outcome\":\"completed\",\"usage\":{\"input_tokens\":1200,"
      "\"output_tokens\":80}}",
      NULL};
  al__tui_view_t v;
  char *out = NULL, *err = NULL;
  size_t ol = 0, el = 0;
  FILE *fo = open_memstream(&out, &ol);
  FILE *fe = open_memstream(&err, &el);
  size_t i;
  char name[64];

  setlocale(LC_ALL, "C.UTF-8");
  al__tui_view_init(&v, fo, fe, false, false, 100, 24);
  for (i = 0; evs[i] != NULL; i++) {
    json_t *ev = json_loads(evs[i], 0, NULL);

    ASSERT_NOT_NULL(ev);
    ASSERT(!al__tui_view_event(&v, ev, i)); /* nothing ends the run */
    json_decref(ev);
  }
  al__tui_view_kid_name(&v, "t1/t3", name, sizeof(name));
  ASSERT_STR_EQ(name, "general t1/t3");
  al__tui_view_kid_name(&v, "t7", name, sizeof(name));
  ASSERT_STR_EQ(name, "t7");
  al__tui_view_free(&v);
  fclose(fo);
  fclose(fe);
  ASSERT_NOT_NULL(strstr(err, "  explore t1 › started: find the parser\n"));
  ASSERT_NOT_NULL(strstr(err, "  ● explore t1 › grep(sse)\n"));
  ASSERT_NOT_NULL(strstr(err, "  ✓ explore t1 › grep(sse)  "));
  ASSERT_NOT_NULL(strstr(err, "    general t1/t3 › started: deeper\n"));
  ASSERT_NOT_NULL(strstr(err, "    ✗ general t1/t3 › read_file()  "));
  ASSERT_NOT_NULL(strstr(err,
                         "  explore t1 › ✓ completed · 1.2k in · 80 "
                         "out\n"));
  ASSERT_NULL(strstr(err, "CHILD OUTPUT")); /* the child's, not shown */
  ASSERT_NULL(strstr(err, "CHILD TEXT"));
  ASSERT(out == NULL || strstr(out, "CHILD TEXT") == NULL);
  free(out);
  free(err);
  return 0;
}

TEST_IMPL(i23_chat_slash_tasks) {
  al_slash_cmd_t c;

  al__slash_parse("/tasks", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_TASKS);
  ASSERT_STR_EQ(c.arg, "");
  al__slash_parse("/tasks cancel t2", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_TASKS);
  ASSERT_STR_EQ(c.arg, "cancel t2");
  al__slash_parse("/tasks cancel", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_BAD_ARGS);
  al__slash_parse("/tasks kill t2", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_BAD_ARGS);
  al__slash_parse("/tasks cancel t2 t3", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_BAD_ARGS);
  ASSERT_NOT_NULL(strstr(al__slash_help(), "/tasks cancel ID"));
  return 0;
}
