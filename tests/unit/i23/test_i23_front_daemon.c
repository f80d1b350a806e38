/* Issue 23 over agentloopd's socket: a session's sub-agents. Their events
 * reach the watchers with "path" (and the child's session), an approval a
 * child asks is answered with the usual approval/respond, task/list and
 * task/cancel list and stop them, and each child keeps its own transcript,
 * linked from the parent's, whose history holds the child's answer. The
 * mock scripts parent and child in one order (one child at a time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../daemon/dtest.h"
#include "session/session.h"
#include "test.h"

static const char *child_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: k1, name: task, input: {description: look, "
    "prompt: 'CHILD-A'}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: c1, name: read_file, input: {path: a.txt}}\n"
    "  - reply: {content: [{text: 'child done'}]}\n"
    "  - reply: {content: [{text: 'parent done'}]}\n";

static json_t *params_of(const dt_client_t *c, size_t i) {
  return json_object_get(json_array_get(c->msgs, i), "params");
}

static const char *pstr(const dt_client_t *c, size_t i, const char *key) {
  const char *v = json_string_value(json_object_get(params_of(c, i), key));

  return v != NULL ? v : "";
}

/* Starts a session whose read_file asks, runs "go" up to the child's
 * approval; returns the approval_required's index. */
static size_t start_child(dt_t *t, dt_client_t *c, const char *yaml, char *sid,
                          size_t n) {
  char p[1024];
  size_t i;

  dt_init(t, yaml);
  dt_start(t);
  dt_connect(t, c);
  dt_init_client(c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"ask_tools\":[\"read_file\"]}",
           t->work);
  dt_create(c, p, sid, n);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(c, 4, "turn/send", p);
  i = dt_wait_event(c, "approval_required", 0);
  ASSERT_STR_EQ(pstr(c, i, "path"), "t1");
  return i;
}

typedef struct {
  const char *path;
  size_t messages;
} kid_wait_t;

/* The transcript at w->path holds w->messages history messages, none of
 * them added by the load's repair. */
static bool kid_whole(void *data) {
  const kid_wait_t *w = data;
  al_tx_loaded_t l;
  bool ok;

  memset(&l, 0, sizeof(l));
  ok = al__tx_load(w->path, false, 1 << 20, &l) == 0 &&
       l.closed_tool_uses == 0 && al__history_count(&l.history) >= w->messages;
  al__tx_loaded_free(&l);
  return ok;
}

TEST_IMPL(i23_daemon_child_events_approval_and_transcripts) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char sid[64];
  char child[64];
  char path[512];
  size_t i, st, fin;
  json_t *r, *tasks;
  al_tx_loaded_t l;
  char *hist;

  i = start_child(&t, &c, child_yaml, sid, sizeof(sid));
  /* subagent_started (the session's own event), then the child's. */
  st = dt_wait_event(&c, "subagent_started", 0);
  ASSERT(st < i);
  ASSERT_STR_EQ(pstr(&c, st, "task_id"), "t1");
  ASSERT_STR_EQ(pstr(&c, st, "call_id"), "k1");
  ASSERT_NULL(json_object_get(params_of(&c, st), "path"));
  snprintf(child, sizeof(child), "%s", pstr(&c, st, "child_session"));
  ASSERT(child[0] != '\0' && strcmp(child, sid) != 0);
  ASSERT_STR_EQ(pstr(&c, i, "session"), child);
  ASSERT_STR_EQ(pstr(&c, i, "name"), "read_file");
  /* The parent's stream numbers the child's events: one gap-free seq. */
  ASSERT_EQ(
      json_integer_value(json_object_get(params_of(&c, i), "seq")),
      json_integer_value(json_object_get(params_of(&c, i - 1), "seq")) + 1);

  /* task/list while the child waits. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c, 5, "task/list", p);
  tasks = json_object_get(json_object_get(r, "result"), "tasks");
  ASSERT_EQ(json_array_size(tasks), 1);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(tasks, 0), "id")), "t1");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(tasks, 0), "state")),
      "running");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(tasks, 0), "agent")),
      "general");
  /* Unknown tasks, missing params. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"task\":\"t9\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 6, "task/cancel", p)), AL_RPC_INVALID_PARAMS);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 7, "task/cancel", p)), AL_RPC_INVALID_PARAMS);
  ASSERT_EQ(dt_err(dt_call(&c, 8, "task/list", "{\"session\":\"nope\"}")),
            AL_RPC_UNKNOWN_SESSION);

  /* The child's approval, answered with the child's request id. */
  snprintf(p, sizeof(p),
           "{\"session\":\"%s\",\"request\":\"%s\",\"decision\":\"allow\"}",
           sid, pstr(&c, i, "request"));
  r = dt_call(&c, 9, "approval/respond", p);
  ASSERT_EQ(dt_err(r), 0);
  dt_wait_notification(&c, "approval/resolved", i);
  i = dt_wait_event(&c, "tool_use_completed", i);
  ASSERT_STR_EQ(pstr(&c, i, "path"), "t1");
  /* The child's final does not end the session's run; the parent's
   * does. */
  fin = dt_wait_event(&c, "final", i);
  ASSERT_STR_EQ(pstr(&c, fin, "path"), "t1");
  i = dt_wait_event(&c, "subagent_completed", fin);
  ASSERT_STR_EQ(pstr(&c, i, "outcome"), "completed");
  ASSERT_STR_EQ(pstr(&c, i, "result"), "child done");
  fin = dt_wait_event(&c, "final", i);
  ASSERT_NULL(json_object_get(params_of(&c, fin), "path"));
  ASSERT_STR_EQ(pstr(&c, fin, "text"), "parent done");
  r = dt_call(&c, 10, "task/list", p);
  tasks = json_object_get(json_object_get(r, "result"), "tasks");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(tasks, 0), "state")),
      "completed");
  /* session/resume lists the children as the transcript links them. */
  r = dt_call(&c, 11, "session/resume", p);
  tasks = json_object_get(json_object_get(r, "result"), "children");
  ASSERT_EQ(json_array_size(tasks), 1);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(tasks, 0), "session")),
      child);
  ASSERT_STR_EQ(json_string_value(
                    json_object_get(json_array_get(tasks, 0), "parent_call")),
                "k1");
  dt_assert_valid(&t);

  /* The child's transcript: its own chain, its header naming the parent,
   * its whole conversation (written once its writer closed, at its
   * subagent_completed). */
  {
    char file[64];

    ASSERT(al__tx_child_file_id(child, file));
    snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", t.state, file);
  }
  {
    kid_wait_t w = {path, 4};

    dt_run_until(&t, kid_whole, &w);
  }
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_NOT_NULL(strstr(path, l.chain_id));
  ASSERT_NOT_NULL(l.header.parent);
  ASSERT_STR_EQ(json_string_value(json_object_get(l.header.parent, "session")),
                sid);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(l.header.parent, "parent_call")), "k1");
  hist = json_dumps(al__history_to_json(&l.history), JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(hist, "CHILD-A"));
  ASSERT_NOT_NULL(strstr(hist, "child done"));
  free(hist);
  al__tx_loaded_free(&l);
  /* The parent's: the link, and the child's answer as the task call's
   * result (what a resume shows); its run ended with its own final. */
  snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", t.state, sid);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(json_array_size(l.children), 1);
  ASSERT_STR_EQ(json_string_value(
                    json_object_get(json_array_get(l.children, 0), "session")),
                child);
  ASSERT(!l.run_open);
  ASSERT_EQ(l.closed_tool_uses, 0);
  /* The child's events are in it (since_seq replays them), its deltas
   * not (its text is in its own transcript). */
  {
    size_t k;
    bool tool = false;

    for (k = 0; k < l.nevents; k++) {
      const char *ln = l.events[k].line->data;

      if (strstr(ln, "\"path\":\"t1\"") != NULL) {
        ASSERT_NULL(strstr(ln, "\"type\":\"text_delta\""));
        tool = tool || strstr(ln, "\"type\":\"tool_use_completed\"") != NULL;
      }
    }
    ASSERT(tool);
  }
  hist = json_dumps(al__history_to_json(&l.history), JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(hist, "child done"));
  ASSERT_NOT_NULL(strstr(hist, "parent done"));
  free(hist);
  al__tx_loaded_free(&l);
  dt_finish(&t, cs, 1);
  return 0;
}

static const char *cancel_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: k1, name: task, input: {description: look, "
    "prompt: 'CHILD-A'}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: c1, name: read_file, input: {path: a.txt}}\n"
    "  - expect_request: {contains: 'cancel'}\n"
    "    reply: {content: [{text: 'parent goes on'}]}\n";

/* task/cancel stops the child waiting for its approval: the approval is
 * gone, the child completes "cancelled", the task call gets its result
 * and the session's run goes on to its own final; the child then is no
 * longer cancellable. */
TEST_IMPL(i23_daemon_task_cancel) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char sid[64];
  size_t i;
  json_t *r;

  i = start_child(&t, &c, cancel_yaml, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"task\":\"t1\"}", sid);
  r = dt_call(&c, 5, "task/cancel", p);
  ASSERT_EQ(dt_err(r), 0);
  ASSERT(json_is_object(json_object_get(r, "result")));
  i = dt_wait_event(&c, "subagent_completed", i);
  ASSERT_STR_EQ(pstr(&c, i, "outcome"), "cancelled");
  i = dt_wait_event(&c, "final", i);
  ASSERT_NULL(json_object_get(params_of(&c, i), "path"));
  ASSERT_STR_EQ(pstr(&c, i, "text"), "parent goes on");
  ASSERT_EQ(dt_err(dt_call(&c, 6, "task/cancel", p)), AL_RPC_INVALID_PARAMS);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c, 7, "task/list", p);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(
          json_array_get(json_object_get(json_object_get(r, "result"), "tasks"),
                         0),
          "state")),
      "cancelled");
  dt_assert_valid(&t);
  dt_finish(&t, cs, 1);
  return 0;
}

static const char *sleep_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: k1, name: task, input: {description: wait, "
    "prompt: 'CHILD-S'}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: c1, name: bash, input: {command: 'sleep 30'}}\n";

/* turn/cancel while the child's tool runs: every tool_use of both levels
 * has its result in its own transcript (nothing for a load to repair),
 * both transcripts valid, the parent's run ended. */
TEST_IMPL(i23_daemon_cancel_leaves_no_orphan_in_any_transcript) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char sid[64];
  char child[64];
  char file[64];
  char path[512];
  size_t i;
  al_tx_loaded_t l;
  kid_wait_t w;

  dt_init(&t, sleep_yaml);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  i = dt_wait_event(&c, "subagent_started", 0);
  snprintf(child, sizeof(child), "%s", pstr(&c, i, "child_session"));
  for (;;) {
    i = dt_wait_event(&c, "tool_use_started", i + 1);
    if (strcmp(pstr(&c, i, "path"), "t1") == 0) {
      break;
    }
  }
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 5, "turn/cancel", p);
  i = dt_wait_event(&c, "subagent_completed", i);
  ASSERT_STR_EQ(pstr(&c, i, "outcome"), "cancelled");
  for (;;) {
    i = dt_wait_event(&c, "interrupted", i + 1);
    if (json_object_get(params_of(&c, i), "path") == NULL) {
      break;
    }
  }
  /* The child's transcript: its bash call answered (user, assistant with
   * the call, its results). */
  ASSERT(al__tx_child_file_id(child, file));
  snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", t.state, file);
  w.path = path;
  w.messages = 3;
  dt_run_until(&t, kid_whole, &w);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(l.closed_tool_uses, 0);
  ASSERT_EQ(al__history_validate(&l.history, NULL, 0), 0);
  al__tx_loaded_free(&l);
  /* The parent's: its task call answered, its run ended (interrupted is
   * not held for the sync, as final is: wait for the records). */
  snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", t.state, sid);
  dt_run_until(&t, kid_whole, &w);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(l.closed_tool_uses, 0);
  ASSERT(!l.run_open);
  al__tx_loaded_free(&l);
  dt_finish(&t, cs, 1);
  return 0;
}

static bool listed_loaded(dt_client_t *c, int *id, const char *sid) {
  json_t *r = dt_call(c, (*id)++, "session/list", NULL);
  const json_t *a = json_object_get(json_object_get(r, "result"), "sessions");
  size_t i;
  json_t *v;

  json_array_foreach(a, i, v) {
    if (strcmp(json_string_value(json_object_get(v, "session")), sid) == 0) {
      return json_is_true(json_object_get(v, "loaded"));
    }
  }
  AL_TEST_FAIL("session %s not listed", sid);
  return false;
}

static const char *bg_yaml =
    "tracks:\n"
    "  - match: {first_user_contains: 'CHILD-BG'}\n"
    "    responses:\n"
    "      - first_byte_delay_ms: 600000\n"
    "        reply: {content: [{text: 'never'}]}\n"
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: k1, name: task, input: {description: bg, "
    "prompt: 'CHILD-BG', background: true}}\n"
    "  - reply: {content: [{text: 'started it'}]}\n";

/* A session whose run is over but whose background child still works is
 * not idle: with one idle session allowed, creating others unloads them,
 * not it (an unload closes its agent, which would cancel the child). */
TEST_IMPL(i23_daemon_background_child_keeps_session_loaded) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char a[64];
  int id = 10;
  size_t i;

  dt_init(&t, bg_yaml);
  t.o.max_idle_sessions = 1;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, a, sizeof(a));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", a);
  dt_call(&c, id++, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", a);
  dt_call(&c, id++, "turn/send", p);
  i = dt_wait_event(&c, "subagent_started", 0);
  dt_wait_event(&c, "final", i);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", a);
  ASSERT_EQ(dt_err(dt_call(&c, id++, "session/unsubscribe", p)), 0);
  for (i = 0; i < 3; i++) {
    snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/create", p)), 0);
  }
  ASSERT(listed_loaded(&c, &id, a));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", a);
  {
    json_t *r = dt_call(&c, id++, "task/list", p);
    json_t *tk = json_array_get(
        json_object_get(json_object_get(r, "result"), "tasks"), 0);

    ASSERT_STR_EQ(json_string_value(json_object_get(tk, "state")), "running");
  }
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"task\":\"t1\"}", a);
  ASSERT_EQ(dt_err(dt_call(&c, id++, "task/cancel", p)), 0);
  dt_finish(&t, cs, 1);
  return 0;
}
