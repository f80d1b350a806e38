/* How `agentloop run`'s text view and the chat show the MCP start-up and
 * call events: a start-up that left servers out and a call its server
 * never answered are shown; a clean start-up, a begin, an answered or
 * cancelled call are not (tool_use_* lines cover those). */
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

TEST_IMPL(mcp_view_run_text) {
  al_event_t ev[5];
  char *out;

  memset(ev, 0, sizeof(ev));
  ev[0].type = AL_EVENT_MCP_STARTUP_COMPLETE;
  ev[0].u.mcp_startup.ready = SL("[{\"server\":\"a\",\"tools\":3,\"ms\":5}]");
  ev[0].u.mcp_startup.failed = SL("[]");
  ev[0].u.mcp_startup.pending = SL("[]");
  ev[1].type = AL_EVENT_MCP_TOOL_CALL_BEGIN;
  ev[1].u.mcp_call.server = SL("a");
  ev[1].u.mcp_call.tool = SL("echo");
  ev[2] = ev[1];
  ev[2].type = AL_EVENT_MCP_TOOL_CALL_END;
  ev[3] = ev[2];
  ev[3].u.mcp_call.end = SL("cancelled");
  out = view_of(ev, 4);
  ASSERT_STR_EQ(out, ""); /* all routine */
  free(out);

  ev[0].u.mcp_startup.failed =
      SL("[{\"server\":\"x\",\"error\":\"exited with status 7\"}]");
  ev[0].u.mcp_startup.pending = SL("[\"slow\"]");
  ev[0].u.mcp_startup.waited_ms = 1500;
  ev[4] = ev[2];
  ev[4].u.mcp_call.end = SL("timeout");
  ev[4].u.mcp_call.duration_ms = 60000;
  ev[4].ts_ns = 0;
  ev[1] = ev[4];
  out = view_of(ev, 2);
  ASSERT_NOT_NULL(strstr(out, "mcp start-up after 1500 ms: failed "
                              "[{\"server\":\"x\",\"error\":\"exited with "
                              "status 7\"}], still starting [\"slow\"]\n"));
  ASSERT_NOT_NULL(strstr(out, "mcp a: echo timeout after 60000 ms\n"));
  free(out);
  return 0;
}

static char *tui_of(const char *const *lines) {
  al__tui_view_t v;
  char *out = NULL, *err = NULL;
  size_t ol = 0, el = 0;
  FILE *fo = open_memstream(&out, &ol);
  FILE *fe = open_memstream(&err, &el);
  size_t i;

  al__tui_view_init(&v, fo, fe, false, false, 80, 24);
  for (i = 0; lines[i] != NULL; i++) {
    json_t *ev = json_loads(lines[i], 0, NULL);

    ASSERT_NOT_NULL(ev);
    al__tui_view_event(&v, ev, i);
    json_decref(ev);
  }
  al__tui_view_free(&v);
  fclose(fo);
  fclose(fe);
  free(out);
  return err;
}

TEST_IMPL(mcp_view_chat) {
  const char *clean[] = {
      "{\"type\":\"mcp_startup_complete\",\"ready\":[{\"server\":\"a\","
      "\"tools\":3,\"ms\":5}],\"failed\":[],\"pending\":[],\"waited_ms\":5}",
      NULL};
  const char *bad[] = {
      "{\"type\":\"mcp_startup_complete\",\"ready\":[],\"failed\":[{\"server\":"
      "\"x\",\"error\":\"exited with status 7\"}],\"pending\":[\"slow\"],"
      "\"waited_ms\":1500}",
      NULL};
  char *err;

  setlocale(LC_ALL, "C.UTF-8");
  err = tui_of(clean);
  ASSERT_STR_EQ(err != NULL ? err : "", "");
  free(err);
  err = tui_of(bad);
  ASSERT_STR_EQ(err, "MCP server x failed: exited with status 7\n"
                     "MCP server slow is still starting; its tools join "
                     "when it is ready\n");
  free(err);
  return 0;
}
