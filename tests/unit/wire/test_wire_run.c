/* issue 23: `agentloop run` hands the user's agent definitions and the
 * child preamble to the agent (src/client/run.c, agents_cmd.c): a parent
 * scripted to call `task` with an agent defined in
 * $XDG_CONFIG_HOME/agentloop/agents/ gets a child whose request carries
 * the definition's prompt, then the environment and AGENTS.md, and only
 * the tools the definition allows; a file named explore replaces the
 * built-in; a bad file is an error with its FILE:LINE:COL and the run
 * goes on without it. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "test.h"
#include "wire_cli.h"

static const char k_scout[] =
    "---\n"
    "name: scout\n"
    "description: Finds things.\n"
    "tools: [read_file, grep]\n"
    "---\n"
    "SCOUT-PROMPT: look, do not touch.\n";

/* max_turns is not a number: the file is skipped, said at 4:12. */
static const char k_bad[] =
    "---\n"
    "name: broken\n"
    "description: d\n"
    "max_turns: lots\n"
    "---\n";

/* A file named explore replaces the built-in of that name. */
static const char k_explore[] =
    "---\n"
    "name: explore\n"
    "description: My own explorer.\n"
    "tools: [glob]\n"
    "---\n"
    "MY-EXPLORE-PROMPT\n";

static const char k_scenario[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: k1, name: task, input: {description: look, "
    "prompt: 'CHILD-Q go', agent: scout}}\n"
    "        - tool_use: {id: k2, name: task, input: {description: find, "
    "prompt: 'CHILD-Q find', agent: explore}}\n"
    "  - expect_request: {contains: 'explore-answer'}\n"
    "    reply: {content: [{text: 'parent done'}]}\n"
    "tracks:\n"
    "  - match: {system_contains: 'SCOUT-PROMPT'}\n"
    "    responses: [{reply: {content: [{text: 'child-answer'}]}}]\n"
    "  - match: {system_contains: 'MY-EXPLORE-PROMPT'}\n"
    "    responses: [{reply: {content: [{text: 'explore-answer'}]}}]\n";

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

static const char *system_text(const json_t *body, char *buf, size_t n) {
  const json_t *s = json_object_get(body, "system");
  const json_t *b;
  size_t i;

  if (json_is_string(s)) {
    return json_string_value(s);
  }
  buf[0] = '\0';
  json_array_foreach(s, i, b) {
    const char *t = json_string_value(json_object_get(b, "text"));

    if (t != NULL) {
      strncat(buf, t, n - strlen(buf) - 1);
    }
  }
  return buf;
}

TEST_IMPL(wire_run_user_agent_definition) {
  char root[] = "/tmp/al-wire-run-XXXXXX";
  char ws[128], xdg[160];
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", "ANTHROPIC_API_KEY=k", xdg,
                 NULL};
  const char *args[] = {"run",   "--base-url", "http://127.0.0.1:{PORT}",
                        "--cwd", ws,           "-p",
                        "go",    NULL};
  const al_mockllm_record_t *r, *child = NULL;
  char sbuf[65536];
  const char *sys, *p;
  wire_cli_t c;
  size_t i;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s/cfg", root);
  snprintf(ws, sizeof(ws), "%s/ws", root);
  wire_write(root, "cfg/agentloop/agents/x.md", k_scout);
  wire_write(root, "cfg/agentloop/agents/bad.md", k_bad);
  wire_write(root, "cfg/agentloop/agents/explore.md", k_explore);
  wire_write(root, "ws/AGENTS.md", "WIRE-AGENTS-MD: be brief.\n");

  wire_cli_start(&c, k_scenario);
  wire_cli_run(&c, args, env);
  if (c.exit_status != 0 || strstr(c.obuf, "parent done") == NULL) {
    AL_TEST_FAIL("exit %d\nstdout: %s\nstderr: %s", (int)c.exit_status, c.obuf,
                 c.ebuf);
  }
  /* The loader's error, where it is, on stderr; the run went on. */
  ASSERT_NOT_NULL(strstr(c.ebuf, "agentloop: error: "));
  ASSERT_NOT_NULL(strstr(c.ebuf, "agents/bad.md:4:12: "));

  ASSERT_EQ(al_mockllm_record_count(c.mock), 4);
  for (i = 0; i < 4; i++) {
    r = al_mockllm_record_get(c.mock, i);
    if (r->track == 0) {
      child = r;
    } else if (r->track == 1) {
      /* The file's explore, not the built-in: its prompt, its tools. */
      ASSERT(has_tool(r->body, "glob"));
      ASSERT(!has_tool(r->body, "read_file"));
    } else {
      /* The parent is offered the task tool, not the definition's
       * prompt. */
      ASSERT(has_tool(r->body, "task"));
      ASSERT_NULL(
          strstr(system_text(r->body, sbuf, sizeof(sbuf)), "SCOUT-PROMPT"));
    }
  }
  ASSERT_NOT_NULL(child);
  /* The definition's prompt, then the preamble: environment, AGENTS.md. */
  sys = system_text(child->body, sbuf, sizeof(sbuf));
  p = strstr(sys, "SCOUT-PROMPT");
  ASSERT_NOT_NULL(p);
  ASSERT_NOT_NULL(strstr(p, "Working directory: "));
  ASSERT_NOT_NULL(strstr(p, "WIRE-AGENTS-MD"));
  /* Only what the definition allows. */
  ASSERT(has_tool(child->body, "read_file"));
  ASSERT(has_tool(child->body, "grep"));
  ASSERT(!has_tool(child->body, "bash"));
  ASSERT(!has_tool(child->body, "write_file"));
  ASSERT(!has_tool(child->body, "task"));
  wire_cli_finish(&c);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}

/* A background sub-agent still working when the agent answers: `run` does
 * not exit under it (that would cancel it and lose its result). The
 * answer is printed, the child's result starts the agent's next run, and
 * that run's answer follows; the exit is clean. */
TEST_IMPL(run_waits_for_background_subagent) {
  char root[] = "/tmp/al-wire-bg-XXXXXX";
  char ws[128], xdg[160], state[160];
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", "ANTHROPIC_API_KEY=k", xdg,
                 state, NULL};
  const char *args[] = {"run",   "--base-url", "http://127.0.0.1:{PORT}",
                        "--cwd", ws,           "-p",
                        "go",    NULL};
  wire_cli_t c;
  const char *first, *second;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s/cfg", root);
  snprintf(state, sizeof(state), "XDG_STATE_HOME=%s/state", root);
  snprintf(ws, sizeof(ws), "%s/ws", root);
  wire_write(root, "ws/README", "x\n");
  /* The child answers only after the parent's answer went out: its reply
   * waits for the parent's second request (expect_request orders them
   * without a clock). */
  wire_cli_start(
      &c,
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {id: k1, name: task, input: {description: job, "
      "prompt: 'CHILD-BG do it', background: true}}\n"
      "  - reply: {content: [{text: 'FIRST-ANSWER started it'}]}\n"
      "  - expect_request: {contains: 'BG-RESULT'}\n"
      "    reply: {content: [{text: 'SECOND-ANSWER it reported'}]}\n"
      "tracks:\n"
      "  - match: {first_user_contains: CHILD-BG}\n"
      "    responses:\n"
      "      - reply: {content: [{tool_use: {id: c1, name: bash, input: "
      "{command: 'sleep 0.3'}}}]}\n"
      "      - reply: {content: [{text: 'BG-RESULT all good'}]}\n");
  wire_cli_run(&c, args, env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("exit %d\nstdout: %s\nstderr: %s", (int)c.exit_status, c.obuf,
                 c.ebuf);
  }
  first = strstr(c.obuf, "FIRST-ANSWER");
  second = strstr(c.obuf, "SECOND-ANSWER");
  if (first == NULL || second == NULL || second < first) {
    AL_TEST_FAIL("stdout: %s\nstderr: %s", c.obuf, c.ebuf);
  }
  ASSERT_EQ(al_mockllm_record_count(c.mock), 5);
  wire_cli_finish(&c);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}
