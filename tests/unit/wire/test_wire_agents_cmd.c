/* issue 23: `agentloop agents` (src/client/agents_cmd.c) lists what a
 * session begun here could start: the built-ins unless a file replaces
 * one, then the files, each with its source, tools and model; the
 * loader's notes with FILE:LINE:COL; exit 2 while a file has an error
 * (CONVENTIONS.md 7.5). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "test.h"
#include "wire_cli.h"

TEST_IMPL(wire_agents_command_lists) {
  char root[] = "/tmp/al-wire-agents-XXXXXX";
  char ws[128], xdg[160], path[256];
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", xdg, NULL};
  const char *text[] = {"agents", "--cwd", ws, NULL};
  const char *js[] = {"agents", "--json", "--cwd", ws, NULL};
  json_t *o, *a;
  wire_cli_t c;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s/cfg", root);
  snprintf(ws, sizeof(ws), "%s/ws", root);
  wire_write(root, "cfg/agentloop/agents/x.md",
             "---\nname: scout\ndescription: Finds things.\n"
             "tools: [read_file, grep]\nmodel: m-small\n---\nbody\n");
  wire_write(root, "cfg/agentloop/agents/e.md",
             "---\nname: explore\ndescription: My explorer.\n---\n");
  wire_write(root, "cfg/agentloop/agents/bad.md",
             "---\nname: broken\ndescription: d\nmax_turns: lots\n---\n");
  wire_write(root, "ws/README", "x\n");

  /* Text: one entry each, the error said, exit 2. */
  memset(&c, 0, sizeof(c));
  ASSERT_EQ(uv_loop_init(&c.loop), 0);
  c.loop.data = &c;
  wire_cli_run(&c, text, env);
  ASSERT_EQ(c.exit_status, 2);
  ASSERT_NOT_NULL(strstr(c.obuf, "general  (builtin)\n"));
  ASSERT_NOT_NULL(strstr(c.obuf, "  tools: all of the parent's\n"));
  ASSERT_NOT_NULL(strstr(c.obuf, "scout  ("));
  ASSERT_NOT_NULL(strstr(c.obuf, "  tools: read_file, grep\n  model: m-small"));
  /* The file replaced the built-in: explore once, from the file. */
  ASSERT_NOT_NULL(strstr(c.obuf, "explore  ("));
  ASSERT_NULL(strstr(c.obuf, "explore  (builtin)"));
  ASSERT_NOT_NULL(strstr(c.obuf, "My explorer."));
  ASSERT_NOT_NULL(strstr(c.ebuf, "agentloop agents: error: "));
  ASSERT_NOT_NULL(strstr(c.ebuf, "agents/bad.md:4:12: "));
  ASSERT_NULL(strstr(c.obuf, "broken"));
  wire_cli_finish(&c);

  /* JSON, once the bad file is gone: exit 0, the notes in the object. */
  snprintf(path, sizeof(path), "%s/cfg/agentloop/agents/bad.md", root);
  ASSERT_EQ(unlink(path), 0);
  memset(&c, 0, sizeof(c));
  ASSERT_EQ(uv_loop_init(&c.loop), 0);
  c.loop.data = &c;
  wire_cli_run(&c, js, env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("exit %d: %s", (int)c.exit_status, c.ebuf);
  }
  o = json_loads(c.obuf, 0, NULL);
  ASSERT_NOT_NULL(o);
  a = json_object_get(o, "agents");
  ASSERT_EQ(json_array_size(a), 3);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(a, 0), "name")),
      "explore");
  ASSERT_NOT_NULL(
      strstr(json_string_value(json_object_get(json_array_get(a, 0), "source")),
             "agents/e.md"));
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(a, 1), "name")),
      "general");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(a, 1), "source")),
      "builtin");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(a, 2), "name")),
      "scout");
  ASSERT_EQ(json_array_size(json_object_get(json_array_get(a, 2), "tools")), 2);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(o, "notes"), 0), "level")),
                "info"); /* explore replaced */
  json_decref(o);
  wire_cli_finish(&c);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}
