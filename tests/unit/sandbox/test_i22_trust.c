/* Issue 22, point 8: project trust bound to the content of tools.d/,
 * .agentloop/ and .mcp.json (src/tools/trust.c), and a sandbox that
 * makes no placeholder for those two, so a git workspace sees none while
 * a tool runs; a workspace without .git still gets .git protected. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "test.h"
#include "tools/clitool.h"
#include "unit/sandbox/sbx.h"

static void put(const char *dir, const char *name, const char *text) {
  char p[600];
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", dir, name);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  ASSERT_EQ(fclose(f), 0);
}

/* `agentloop tools ARGS` in dir with its own config home: stdout, or
 * stdout and stderr (err); exit 0 asserted. */
static const char *tools_out(const char *dir, const char *cfg, const char *args,
                             bool err) {
  static char out[65536];
  char cmd[1600];
  size_t n;
  FILE *p;

  snprintf(cmd, sizeof(cmd),
           "cd '%s' && XDG_CONFIG_HOME='%s' '%s/agentloop' tools %s%s", dir,
           cfg, AL_BINARY_DIR, args, err ? " 2>&1" : "");
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  ASSERT_EQ(pclose(p), 0);
  return out;
}

static bool has_tool(json_t *o, const char *name) {
  json_t *t;
  size_t i;

  json_array_foreach(json_object_get(o, "tools"), i, t) {
    if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) {
      return true;
    }
  }
  return false;
}

static bool has_change(json_t *o, const char *change, const char *path) {
  json_t *c;
  size_t i;

  json_array_foreach(
      json_object_get(json_object_get(o, "project_trust"), "changes"), i, c) {
    if (strcmp(json_string_value(json_object_get(c, "change")), change) == 0 &&
        strcmp(json_string_value(json_object_get(c, "path")), path) == 0) {
      return true;
    }
  }
  return false;
}

static const char *trust_state(json_t *o) {
  return json_string_value(
      json_object_get(json_object_get(o, "project_trust"), "state"));
}

/* (a) A trusted project whose tools.d gets a file added and one changed
 * after the trust: neither loads (nor the unchanged one: the set is
 * withheld), `agentloop tools` says why and lists the changes, and
 * `--trust-project` lists them and approves them again. A path-only
 * record from before is "hash unknown": not trusted, files listed. */
TEST_IMPL(project_trust_bound_to_content) {
  char dir[] = "/tmp/al_i22trust_XXXXXX";
  char cfg[] = "/tmp/al_i22cfg_XXXXXX";
  char sub[256], p[600], real[4096];
  const char *out;
  json_t *o;
  FILE *f;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_NOT_NULL(mkdtemp(cfg));
  snprintf(sub, sizeof(sub), "%s/tools.d", dir);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  put(sub, "a.yaml", "name: tool_a\ndescription: d\ncmd: echo\n");
  put(sub, "b.yaml", "name: tool_b\ndescription: d\ncmd: echo\n");
  out = tools_out(dir, cfg, "--trust-project", false);
  ASSERT_NOT_NULL(strstr(out, "tool_a"));
  ASSERT_NOT_NULL(strstr(out, "trusted: "));
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT_NOT_NULL(o);
  ASSERT(has_tool(o, "tool_a"));
  ASSERT_STR_EQ(trust_state(o), "trusted");
  json_decref(o);

  /* After the trust: one file added, one modified. */
  put(sub, "c.yaml", "name: tool_c\ndescription: d\ncmd: echo\n");
  put(sub, "b.yaml", "name: tool_b\ndescription: changed\ncmd: echo\n");
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT_NOT_NULL(o);
  ASSERT_STR_EQ(trust_state(o), "changed");
  ASSERT(!has_tool(o, "tool_a"));
  ASSERT(!has_tool(o, "tool_b"));
  ASSERT(!has_tool(o, "tool_c"));
  ASSERT(has_change(o, "added", "tools.d/c.yaml"));
  ASSERT(has_change(o, "modified", "tools.d/b.yaml"));
  ASSERT(!has_change(o, "modified", "tools.d/a.yaml"));
  json_decref(o);
  out = tools_out(dir, cfg, "", false);
  ASSERT_NOT_NULL(strstr(out, "files changed since you trusted"));
  ASSERT_NOT_NULL(strstr(out, "tools.d/c.yaml"));
  ASSERT_NOT_NULL(strstr(out, "--trust-project"));
  /* .agentloop/ and .mcp.json are bound too (hooks, servers). */
  snprintf(p, sizeof(p), "%s/.agentloop", dir);
  ASSERT_EQ(mkdir(p, 0700), 0);
  put(p, "hook.sh", "#!/bin/sh\n");
  put(dir, ".mcp.json", "{\"mcpServers\": {}}\n");
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT(has_change(o, "added", ".agentloop/hook.sh"));
  ASSERT(has_change(o, "added", ".mcp.json"));
  json_decref(o);

  /* Approving lists what it approves, and loads the set. */
  out = tools_out(dir, cfg, "--trust-project", false);
  ASSERT_NOT_NULL(strstr(out, "added    tools.d/c.yaml"));
  ASSERT_NOT_NULL(strstr(out, "modified tools.d/b.yaml"));
  ASSERT_NOT_NULL(strstr(out, "added    .agentloop/hook.sh"));
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT_STR_EQ(trust_state(o), "trusted");
  ASSERT(has_tool(o, "tool_a"));
  ASSERT(has_tool(o, "tool_c"));
  json_decref(o);
  /* A removal counts as a change too. */
  snprintf(p, sizeof(p), "%s/a.yaml", sub);
  ASSERT_EQ(unlink(p), 0);
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT_STR_EQ(trust_state(o), "changed");
  ASSERT(has_change(o, "removed", "tools.d/a.yaml"));
  ASSERT(!has_tool(o, "tool_c"));
  json_decref(o);

  /* A record with the path alone (written before trust had a hash). */
  ASSERT_NOT_NULL(realpath(dir, real));
  snprintf(p, sizeof(p), "%s/agentloop/trusted-projects", cfg);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fprintf(f, "%s\n", real);
  ASSERT_EQ(fclose(f), 0);
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT_STR_EQ(trust_state(o), "unbound");
  ASSERT(!has_tool(o, "tool_c"));
  ASSERT(has_change(o, "added", "tools.d/c.yaml"));
  json_decref(o);
  out = tools_out(dir, cfg, "", false);
  ASSERT_NOT_NULL(strstr(out, "trusted before trust was bound"));
  out = tools_out(dir, cfg, "--trust-project", false);
  o = json_loads(tools_out(dir, cfg, "--json", false), 0, NULL);
  ASSERT_STR_EQ(trust_state(o), "trusted");
  ASSERT(has_tool(o, "tool_c"));
  json_decref(o);
  /* The record holds one line for the project, with its hash. */
  {
    char line[8192];
    int lines = 0;

    f = fopen(p, "r");
    ASSERT_NOT_NULL(f);
    while (fgets(line, sizeof(line), f) != NULL) {
      lines++;
      ASSERT_EQ(strncmp(line, "sha256:", 7), 0);
    }
    fclose(f);
    ASSERT_EQ(lines, 1);
  }
  snprintf(p, sizeof(p), "rm -rf '%s' '%s'", dir, cfg);
  ASSERT_EQ(system(p), 0);
  return 0;
}

/* A tools.d file the model makes while the project is trusted is not
 * trusted by the run's configuration either: `agentloop config` (the
 * path every run reads its configuration through) names it. */
TEST_IMPL(project_trust_run_says_what_changed) {
  char dir[] = "/tmp/al_i22run_XXXXXX";
  char cfg[] = "/tmp/al_i22rcfg_XXXXXX";
  char sub[256], cmd[1600];
  char out[16384];
  size_t n;
  FILE *p;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_NOT_NULL(mkdtemp(cfg));
  snprintf(sub, sizeof(sub), "%s/.agentloop", dir);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  put(sub, "config.yaml", "model: claude-haiku-4-5\n");
  (void)tools_out(dir, cfg, "--trust-project", false);
  put(sub, "config.yaml", "model: claude-opus-4-1\n");
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && XDG_CONFIG_HOME='%s' '%s/agentloop' config show 2>&1",
           dir, cfg, AL_BINARY_DIR);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  (void)pclose(p);
  ASSERT_NOT_NULL(strstr(out, "files changed since you trusted"));
  ASSERT_NOT_NULL(strstr(out, "modified .agentloop/config.yaml"));
  /* The changed file was not read. */
  ASSERT_NULL(strstr(out, "claude-opus-4-1"));
  snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, cfg);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* ---- no placeholder in a git workspace ----------------------------------- */

static bool listing_has(const char *listing, const char *name) {
  char needle[64];

  /* al_test_tree_listing: "/NAME MODE SIZE" per line. */
  snprintf(needle, sizeof(needle), "\n/%s ", name);
  return strstr(listing, needle) != NULL ||
         strncmp(listing, needle + 1, strlen(needle + 1)) == 0;
}

static void on_tick(uv_timer_t *t) {
  uv_stop(t->loop);
}

/* Runs the loop until path exists (a 5 ms timer wakes it). */
static void wait_for(sbx_t *x, const char *path) {
  uv_timer_t t;

  uv_timer_init(&x->loop, &t);
  uv_timer_start(&t, on_tick, 5, 5);
  while (access(path, F_OK) != 0) {
    uv_run(&x->loop, UV_RUN_DEFAULT);
  }
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&x->loop, UV_RUN_NOWAIT);
}

/* Lists the workspace from inside a bash call and from outside while the
 * call runs; returns the inside listing in w->out. */
static char *list_during_call(sbx_t *x, sbx_run_t *w) {
  char fifo[400], started[400];
  char *outside;
  int fd;

  snprintf(fifo, sizeof(fifo), "%s/fifo", x->ws);
  snprintf(started, sizeof(started), "%s/started", x->ws);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  (void)sbx_run_start(x, "ls -A; : > started; cat fifo", w, 0);
  wait_for(x, started);
  outside = al_test_tree_listing(x->ws);
  /* Blocks until the command's cat opens it (right after `started`). */
  fd = open(fifo, O_WRONLY);
  ASSERT(fd >= 0);
  close(fd);
  sbx_run_wait(x, w);
  ASSERT_EQ(w->exit_status, 0);
  unlink(fifo);
  unlink(started);
  return outside;
}

/* (b) In a git workspace without tools.d/ or .agentloop/, a sandboxed
 * call sees no placeholder, and neither does the user's tree during the
 * call. */
TEST_IMPL(sandbox_no_placeholder_in_git_workspace) {
  sbx_t x;
  sbx_run_t w;
  char *outside;
  int pass;

  sbx_init(&x, SBX_BWRAP);
  /* A warm sandbox, then whatever the next start finds. */
  for (pass = 0; pass < 2; pass++) {
    if (pass == 0) {
      sbx_wait_warm(&x);
    }
    outside = list_during_call(&x, &w);
    if (strstr(w.out, "tools.d") != NULL ||
        strstr(w.out, ".agentloop") != NULL) {
      AL_TEST_FAIL("a placeholder inside the sandbox (pass %d):\n%s", pass,
                   w.out);
    }
    ASSERT_NOT_NULL(strstr(w.out, ".git"));
    if (listing_has(outside, "tools.d") || listing_has(outside, ".agentloop")) {
      AL_TEST_FAIL(
          "a placeholder in the workspace during the call "
          "(pass %d):\n%s",
          pass, outside);
    }
    al_free(outside);
  }
  sbx_finish(&x);
  return 0;
}

/* (c) A workspace without .git still gets .git protected: a tool sees an
 * empty read-only .git and cannot make hooks in it; nothing stays. */
TEST_IMPL(sandbox_no_git_still_protected) {
  sbx_t x;
  sbx_run_t w;
  char p[400];

  sbx_init(&x, SBX_BWRAP);
  snprintf(p, sizeof(p), "rm -rf '%s/.git'", x.ws);
  ASSERT_EQ(system(p), 0);
  (void)sbx_run_start(&x,
                      "ls -A; mkdir -p .git/hooks && "
                      "echo id > .git/hooks/pre-commit; echo rc=$?",
                      &w, 0);
  sbx_run_wait(&x, &w);
  ASSERT_NOT_NULL(strstr(w.out, ".git"));
  ASSERT_NULL(strstr(w.out, "rc=0"));
  snprintf(p, sizeof(p), "%s/.git/hooks/pre-commit", x.ws);
  ASSERT(access(p, F_OK) != 0);
  /* The placeholder went with the call (its result comes after). */
  snprintf(p, sizeof(p), "%s/.git", x.ws);
  ASSERT(access(p, F_OK) != 0);
  sbx_finish(&x);
  return 0;
}
