/* issue 23: a chat's agent definitions reach the daemon in session/create
 * (the daemon reads no agent file): checked and bounded there, kept in
 * the session's header, and a child started by `task` in that session
 * runs with the definition's prompt, the preamble sent with it and only
 * the tools the definition allows. Over the real socket (dtest.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../daemon/dtest.h"
#include "session/session.h"

static const char k_scenario[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: k1, name: task, input: {description: look, "
    "prompt: 'CHILD-Q go', agent: scout}}\n"
    "  - expect_request: {contains: 'child-answer'}\n"
    "    reply: {content: [{text: 'parent done'}]}\n"
    "tracks:\n"
    "  - match: {system_contains: 'SCOUT-PROMPT'}\n"
    "    responses: [{reply: {content: [{text: 'child-answer'}]}}]\n";

static bool has_tool(const json_t *body, const char *name) {
  const json_t *t;
  size_t i;

  json_array_foreach(json_object_get(body, "tools"), i, t) {
    const char *n = json_string_value(json_object_get(t, "name"));

    if (n != NULL && strcmp(n, name) == 0) {
      return true;
    }
  }
  return false;
}

/* The session's own final (a child's is re-posted with a path). */
static size_t wait_top_final(dt_client_t *c) {
  size_t i = 0;

  for (;;) {
    json_t *p;

    i = dt_wait_event(c, "final", i);
    p = json_object_get(json_array_get(c->msgs, i), "params");
    if (json_object_get(p, "path") == NULL) {
      return i;
    }
    i++;
  }
}

TEST_IMPL(wire_daemon_session_agent_definition) {
  dt_t t;
  dt_client_t a;
  dt_client_t *cl[] = {&a};
  char p[2048], sid[64];
  const al_mockllm_record_t *r, *child = NULL;
  json_t *resp;
  size_t i;
  char *sys;

  dt_init(&t, k_scenario);
  dt_start(&t);
  dt_connect(&t, &a);
  dt_init_client(&a);

  /* Refused, with what is wrong: a bad name, a bad setting. */
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"subagents\":{\"agents\":[{\"name\":"
           "\"Bad Name\",\"description\":\"d\"}]}}",
           t.work);
  resp = dt_call(&a, 3, "session/create", p);
  ASSERT_EQ(dt_err(resp), AL_RPC_INVALID_PARAMS);
  ASSERT_NOT_NULL(strstr(json_string_value(json_object_get(
                             json_object_get(resp, "error"), "message")),
                         "subagents.agents[0]: name"));
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"subagents\":{\"max_depth\":99}}", t.work);
  ASSERT_EQ(dt_err(dt_call(&a, 4, "session/create", p)),
            AL_RPC_INVALID_PARAMS);

  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"subagents\":{\"preamble\":\"DAEMON-PREAMBLE\","
           "\"agents\":[{\"name\":\"scout\",\"description\":\"Finds.\","
           "\"system\":\"SCOUT-PROMPT: look.\",\"tools\":[\"read_file\","
           "\"grep\"],\"source\":\"/home/u/.config/agentloop/agents/x.md\"}"
           "]}}",
           t.work);
  dt_create(&a, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 5, "session/subscribe", p)), 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 6, "turn/send", p)), 0);
  i = wait_top_final(&a);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(json_array_get(a.msgs, i), "params"),
                    "text")),
                "parent done");

  ASSERT_EQ(al_mockllm_record_count(t.mock), 3);
  for (i = 0; i < 3; i++) {
    r = al_mockllm_record_get(t.mock, i);
    if (r->track == 0) {
      child = r;
    }
  }
  ASSERT_NOT_NULL(child);
  sys = json_dumps(json_object_get(child->body, "system"), JSON_COMPACT);
  ASSERT_NOT_NULL(sys);
  ASSERT_NOT_NULL(strstr(sys, "SCOUT-PROMPT"));
  ASSERT_NOT_NULL(strstr(strstr(sys, "SCOUT-PROMPT"), "DAEMON-PREAMBLE"));
  free(sys);
  ASSERT(has_tool(child->body, "read_file"));
  ASSERT(has_tool(child->body, "grep"));
  ASSERT(!has_tool(child->body, "bash"));
  ASSERT(!has_tool(child->body, "write_file"));
  ASSERT(!has_tool(child->body, "task"));
  dt_assert_valid(&t);
  dt_finish(&t, cl, 1);
  return 0;
}

/* The header keeps the subagents object, so a resumed session (its agent
 * made again from the header) has the same agents. */
TEST_IMPL(wire_header_keeps_subagents) {
  al_tx_header_t h, back;
  al_blob_t *b;
  json_t *rec;
  const char *line;

  memset(&h, 0, sizeof(h));
  memset(&back, 0, sizeof(back));
  h.cwd = (char *)"/tmp";
  h.subagents = json_pack("{s:s, s:[{s:s, s:s}]}", "preamble", "P", "agents",
                          "name", "scout", "description", "d");
  b = al__tx_header_record("s1", &h);
  ASSERT_NOT_NULL(b);
  line = b->data;
  rec = json_loadb(line, b->len, JSON_DISABLE_EOF_CHECK, NULL);
  ASSERT_NOT_NULL(rec);
  ASSERT(al__tx_header_parse(rec, &back));
  ASSERT(json_equal(back.subagents, h.subagents));
  json_decref(rec);
  al__blob_unref(b);
  al__tx_header_free(&back);
  json_decref(h.subagents);
  return 0;
}
