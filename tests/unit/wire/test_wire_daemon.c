/* issue 23: a chat's agent definitions reach the daemon in session/create
 * (the daemon reads no agent file): read and built on the client's side as
 * chat_settings.c does (al_config_session_params, al_config_agents_load,
 * al_sysprompt_preamble, al_config_session_agents), checked and bounded by
 * the daemon, kept in the session's header, and a child started by `task`
 * in that session runs with the definition's prompt, the preamble sent
 * with it and only the tools the definition allows. Over the real socket
 * (dtest.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "../daemon/dtest.h"
#include "config/agent_opts.h"
#include "config/agentdefs.h"
#include "config/sysprompt.h"
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

static const char *no_env(const char *name) {
  (void)name;
  return NULL;
}

/* Test set-up, before the loop runs: blocking writes are fine. */
static void write_file(const char *dir, const char *rel, const char *text) {
  char path[600];
  char *sl;
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", dir, rel);
  for (sl = path + strlen(dir) + 1; (sl = strchr(sl, '/')) != NULL; sl++) {
    *sl = '\0';
    (void)mkdir(path, 0700);
    *sl = '/';
  }
  (void)mkdir(dir, 0700);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

/* The session's own end, final or error (a child's events are re-posted
 * with a path): returns its index, so a broken wiring fails at once
 * rather than waiting for a final that never comes. */
static size_t wait_top_end(dt_client_t *c) {
  size_t i = 0;

  for (;;) {
    for (; i < json_array_size(c->msgs); i++) {
      const char *type = dt_ev_type(c, i);
      json_t *p = json_object_get(json_array_get(c->msgs, i), "params");

      if ((strcmp(type, "final") == 0 || strcmp(type, "error") == 0) &&
          json_object_get(p, "path") == NULL) {
        return i;
      }
    }
    ASSERT(!c->eof);
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

TEST_IMPL(wire_daemon_session_agent_definition) {
  dt_t t;
  dt_client_t a;
  dt_client_t *cl[] = {&a};
  char p[16384], sid[64], cdir[300], path[400], why[600];
  al_config_t cfg;
  al_agentdefs_options_t ao;
  al_agentdefs_t *defs;
  al_sysprompt_options_t so;
  al_buf_t pre;
  json_t *params;
  char *pj;
  bool found;
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
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"subagents\":{\"max_depth\":99}}",
           t.work);
  ASSERT_EQ(dt_err(dt_call(&a, 4, "session/create", p)), AL_RPC_INVALID_PARAMS);

  /* The chat's road (chat_settings.c): the configuration and the
   * definition files read in the client, the preamble built there. */
  snprintf(cdir, sizeof(cdir), "%s/cfg", t.root);
  write_file(cdir, "config.yaml", "subagents: {token_budget: 99999}\n");
  write_file(cdir, "agents/x.md",
             "---\nname: scout\ndescription: Finds.\n"
             "tools: [read_file, grep]\n---\nSCOUT-PROMPT: look.\n");
  write_file(t.work, "AGENTS.md", "DAEMON-PREAMBLE\n");
  al_config_init(&cfg);
  snprintf(path, sizeof(path), "%s/config.yaml", cdir);
  ASSERT_EQ(al_config_load_file(&cfg, AL_CFG_USER, path, &found), 0);
  ASSERT(found && cfg.n_errors == 0);
  al_agentdefs_options_init(&ao);
  ao.config_dir = cdir;
  ao.home = "";
  ASSERT_EQ(al_config_agents_load(&ao, &defs), 0);
  ASSERT_EQ(defs->n, 1);
  memset(&so, 0, sizeof(so));
  so.workspace = t.work;
  so.config_dir = cdir;
  al_buf_init(&pre, 1 << 20);
  ASSERT_EQ(al_sysprompt_preamble(&so, &pre, NULL), 0);
  params = al_config_session_params(&cfg, t.work, no_env, why, sizeof(why));
  ASSERT_NOT_NULL(params);
  ASSERT_EQ(al_config_session_agents(params, defs, pre.data), 0);
  json_object_set_new(params, "cwd", json_string(t.work));
  pj = json_dumps(params, JSON_COMPACT);
  snprintf(p, sizeof(p), "%s", pj);
  ASSERT(strlen(pj) < sizeof(p) - 1);
  free(pj);
  json_decref(params);
  al_buf_free(&pre);
  al_agentdefs_free(defs);
  al_config_free(&cfg);
  dt_create(&a, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 5, "session/subscribe", p)), 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 6, "turn/send", p)), 0);
  i = wait_top_end(&a);
  ASSERT_STR_EQ(dt_ev_type(&a, i), "final");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(
          json_object_get(json_array_get(a.msgs, i), "params"), "text")),
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
