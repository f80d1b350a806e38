/* No trace in the workspace (issue 15, point 8): `agentloop run` SIGKILLed
 * while a bash tool runs in bwrap mode leaves the workspace exactly as it
 * was (the read-only placeholders bwrap needs as mount points for
 * protected paths that do not exist, .git here, are
 * removed by the janitor once the runner is gone), and nothing runs on. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uv.h>

#include "common/common.h"
#include "mockllm/mockllm.h"
#include "test.h"
#include "tools/spawn.h"
#include "unit/sandbox/sbx.h"

/* Stops once the command has been seen on two polls in a row: a single
 * sighting can be a process on its way out (seen once in CI, gone by the
 * next look). */
static int poll_seen;

static void on_poll(uv_timer_t *t) {
  const char *mark = t->data;

  poll_seen = sbx_process_with(mark) ? poll_seen + 1 : 0;
  if (poll_seen >= 2) {
    uv_stop(t->loop);
  }
}

TEST_IMPL(sandbox_sigkill_mid_tool_leaves_tree) {
  char base[] = "/var/tmp/al_notrace_XXXXXX";
  char ws[128], home[128], p[256], url[64], mark[64], yaml[1024];
  char env_home[160], env_xdg[200];
  char bin[4096];
  char *before, *after;
  al_mockllm_options_t mo;
  al_mockllm_t *mock = NULL;
  uv_loop_t loop;
  uv_timer_t poll_t;
  posix_spawn_file_actions_t fa;
  pid_t child;
  int fds[SBX_MAX_TREE];
  size_t n;
  char err[256] = "";
  char *argv[16];
  char *envp[6];
  FILE *f;

  ASSERT_NOT_NULL(mkdtemp(base));
  snprintf(ws, sizeof(ws), "%s/ws", base);
  snprintf(home, sizeof(home), "%s/home", base);
  ASSERT_EQ(mkdir(ws, 0755), 0);
  ASSERT_EQ(mkdir(home, 0755), 0);
  snprintf(p, sizeof(p), "%s/src", ws);
  ASSERT_EQ(mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/src/main.c", ws);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs("int main(void) { return 0; }\n", f);
  fclose(f);
  before = al_test_tree_listing(ws);

  snprintf(mark, sizeof(mark), "ALNOTRACE%d", (int)getpid());
  snprintf(yaml, sizeof(yaml),
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - tool_use: {id: t1, name: bash, input: {command: \"M=%.9s; "
           "exec bash -c \\\"exec -a ${M}%s sleep 1000\\\"\"}}\n"
           "  - reply: {content: [{text: done}]}\n",
           mark, mark + 9);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.err = err;
  mo.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&loop, &mo, &mock), 0);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(mock));

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  snprintf(env_home, sizeof(env_home), "HOME=%s", home);
  snprintf(env_xdg, sizeof(env_xdg), "XDG_RUNTIME_DIR=%s", home);
  envp[0] = "PATH=/usr/bin:/bin";
  envp[1] = "ANTHROPIC_API_KEY=k";
  envp[2] = env_home;
  envp[3] = env_xdg;
  envp[4] = NULL;
  argv[0] = bin;
  argv[1] = "run";
  argv[2] = "--cwd";
  argv[3] = ws;
  argv[4] = "--base-url";
  argv[5] = url;
  argv[6] = "--sandbox";
  argv[7] = "required";
  argv[8] = "-p";
  argv[9] = "go";
  argv[10] = NULL;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  ASSERT_EQ(posix_spawn(&child, bin, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);

  /* Serve it until its tool runs (the mark is put together by the shell,
   * so only the command's own process carries it, after every mount). */
  ASSERT_EQ(uv_timer_init(&loop, &poll_t), 0);
  poll_t.data = mark;
  poll_seen = 0;
  ASSERT_EQ(uv_timer_start(&poll_t, on_poll, 5, 5), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT(sbx_process_with(mark));
  /* The crash path is the one under test: a placeholder is there now
   * (.git: the workspace has none; tools.d/ and .agentloop/ get none). */
  snprintf(p, sizeof(p), "%s/.git", ws);
  if (access(p, F_OK) != 0) {
    AL_TEST_FAIL("no placeholder while the tool runs:\n%s", al_test_tree_listing(ws));
  }

  n = sbx_tree_pidfds(child, fds, SBX_MAX_TREE);
  ASSERT_GE(n, 4); /* the runner, the janitor, bwrap, ..., the command */
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, NULL, 0), child);
  /* Everything it started ends, the janitor last (after its clean-up). */
  ASSERT(sbx_all_exit(fds, n));
  ASSERT(!sbx_process_with(mark));
  after = al_test_tree_listing(ws);
  if (strcmp(before, after) != 0) {
    AL_TEST_FAIL("the workspace changed:\nbefore:\n%s\nafter:\n%s", before,
                 after);
  }
  al_free(before);
  al_free(after);

  uv_close((uv_handle_t *)&poll_t, NULL);
  al_mockllm_close(mock, NULL);
  ASSERT_LOOP_CLOSES(&loop);
  snprintf(p, sizeof(p), "rm -rf '%s'", base);
  ASSERT_EQ(system(p), 0);
  return 0;
}

/* `agentloop tools --json` run in dir (static buffer). */
static const char *tools_json(const char *dir) {
  static char out[8192];
  char cmd[1200];
  size_t n;
  FILE *p;

  snprintf(cmd, sizeof(cmd),
           "cd '%s' && XDG_CONFIG_HOME='%s/cfg' '%s/agentloop' tools --json",
           dir, dir, AL_BINARY_DIR);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  ASSERT_EQ(pclose(p), 0);
  ASSERT_NOT_NULL(strstr(out, "\"sandbox\""));
  return out;
}

static void put_file(const char *dir, const char *name, const char *text) {
  char p[1400];
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", dir, name);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

/* A tools.d without tool files (an empty one is what a running tool's
 * placeholder looks like; a README or .gitkeep is no tool either) holds
 * no tools: `agentloop tools` has nothing to say about it. One with a
 * .yaml file in an untrusted project is reported. */
TEST_IMPL(tools_cmd_quiet_on_empty_tools_d) {
  char dir[] = "/var/tmp/al_emptytd_XXXXXX";
  char td[600];
  char cmd[700];
  const char *out;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(td, sizeof(td), "%s/tools.d", dir);
  ASSERT_EQ(mkdir(td, 0755), 0);
  out = tools_json(dir);
  if (strstr(out, "project_tools_d") != NULL) {
    AL_TEST_FAIL("an empty tools.d was reported: %s", out);
  }
  put_file(td, "README.md", "tools go here\n");
  put_file(td, ".gitkeep", "");
  out = tools_json(dir);
  if (strstr(out, "project_tools_d") != NULL) {
    AL_TEST_FAIL("a tools.d without tool files was reported: %s", out);
  }
  put_file(td, "hello.yaml", "name: hello\ndescription: hi\n"
                             "command: [echo, hi]\n");
  out = tools_json(dir);
  ASSERT_NOT_NULL(strstr(out, "project_tools_d"));
  ASSERT_NOT_NULL(strstr(out, "\"trusted\":false"));
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* Two sandboxed children of one agent, the second started (cold) while
 * the first's placeholder .git stands in a workspace without one: the
 * second must take it for what it is (a placeholder of ours, not the
 * user's .git) and make nothing inside it, so that when both end the
 * workspace is as before (QA: an empty .git was left behind when three
 * sandboxed MCP servers started together). */
static int sib_done;

static void sib_on_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  (void)sp;
  (void)res;
  sib_done++;
}

static bool file_there(const char *dir, const char *name) {
  char p[1024];
  struct stat st;

  snprintf(p, sizeof(p), "%s/%s", dir, name);
  return stat(p, &st) == 0;
}

TEST_IMPL(sandbox_sibling_placeholders_leave_nothing) {
  static const char *const a_argv[] = {
      "sh", "-c",
      "touch a.started; while [ ! -e a.go ]; do sleep 0.01; done", NULL};
  static const char *const b_argv[] = {"true", NULL};
  sbx_t x;
  al_spawn_options_t o;
  al_spawn_t *a = NULL;
  al_spawn_t *b = NULL;
  char p[400];
  char *before;
  char *after;
  struct stat st;
  FILE *f;

  sbx_no_pool = true;
  sbx_init(&x, SBX_BWRAP);
  sbx_no_pool = false;
  {
    /* The harness's workspace has a .git (and the other protected
     * paths) of its own: this case needs one without. */
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "rm -rf %s/.git %s/.agentloop %s/tools.d",
             x.ws, x.ws, x.ws);
    ASSERT_EQ(system(cmd), 0);
  }
  before = al_test_tree_listing(x.ws);
  sib_done = 0;
  al__spawn_options_init(&o);
  o.cwd = x.ws;
  o.sandbox = x.sb;
  o.on_done = sib_on_done;
  o.argv = a_argv;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &a), 0);
  while (!file_there(x.ws, "a.started")) {
    uv_run(&x.loop, UV_RUN_NOWAIT);
    usleep(2000); /* the child's progress, not a timing assumption */
  }
  /* The case under test: a placeholder .git of the first child. */
  snprintf(p, sizeof(p), "%s/.git", x.ws);
  ASSERT_EQ(stat(p, &st), 0);
  ASSERT(S_ISDIR(st.st_mode));
  ASSERT(!file_there(p, "hooks"));
  o.argv = b_argv;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &b), 0);
  while (sib_done < 1) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  /* Nothing was made inside the first one's placeholder. */
  ASSERT(!file_there(p, "hooks"));
  ASSERT(!file_there(p, "config"));
  snprintf(p, sizeof(p), "%s/a.go", x.ws);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  while (sib_done < 2) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(unlink(p), 0);
  snprintf(p, sizeof(p), "%s/a.started", x.ws);
  ASSERT_EQ(unlink(p), 0);
  after = al_test_tree_listing(x.ws);
  ASSERT_STR_EQ(after, before);
  al_free(before);
  al_free(after);
  sbx_finish(&x);
  return 0;
}

/* ---- two agents on one workspace ---------------------------------------- */

static void put_marker(const char *dir, const char *name) {
  put_file(dir, name, "");
}

static void drop_marker(const char *dir, const char *name) {
  char p[1024];

  snprintf(p, sizeof(p), "%s/%s", dir, name);
  ASSERT_EQ(unlink(p), 0);
}

/* Runs x's loop (serving the mock) until `name` exists in dir. */
static void serve_until_file(sbx_t *x, const char *dir, const char *name) {
  while (!file_there(dir, name)) {
    uv_run(&x->loop, UV_RUN_NOWAIT);
    usleep(2000); /* the children's progress, not a timing assumption */
  }
}

/* Runs x's loop (serving the mock) until child exits; its status. */
static int serve_until_exit(sbx_t *x, pid_t child) {
  int st = 0;

  while (waitpid(child, &st, WNOHANG) == 0) {
    uv_run(&x->loop, UV_RUN_NOWAIT);
    usleep(2000);
  }
  return st;
}

/* `agentloop run` in x's workspace whose one bash call is `command`, with
 * its own home but the fixture's state directory (where the placeholder
 * registry every agent of the user shares lives). */
static pid_t start_run(sbx_t *x, const char *url, const char *home,
                       char **envbuf) {
  char bin[4096];
  char *argv[12];
  char *envp[8];
  pid_t child;
  posix_spawn_file_actions_t fa;

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  envbuf[0] = al_strdup("PATH=/usr/bin:/bin");
  envbuf[1] = al_strdup("ANTHROPIC_API_KEY=k");
  envbuf[2] = al_malloc(600);
  snprintf(envbuf[2], 600, "HOME=%s", home);
  envbuf[3] = al_malloc(600);
  snprintf(envbuf[3], 600, "XDG_RUNTIME_DIR=%s", home);
  envbuf[4] = al_malloc(600);
  snprintf(envbuf[4], 600, "XDG_STATE_HOME=%s/.local/state", x->home);
  memcpy(envp, envbuf, 5 * sizeof(*envp));
  envp[5] = NULL;
  argv[0] = bin;
  argv[1] = "run";
  argv[2] = "--cwd";
  argv[3] = x->ws;
  argv[4] = "--base-url";
  argv[5] = (char *)url;
  argv[6] = "--sandbox";
  argv[7] = "required";
  argv[8] = "-p";
  argv[9] = "go";
  argv[10] = NULL;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  ASSERT_EQ(posix_spawn(&child, bin, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);
  return child;
}

static void free_env(char **envbuf) {
  size_t i;

  for (i = 0; i < 5; i++) {
    al_free(envbuf[i]);
  }
}

static al_mockllm_t *start_mock(sbx_t *x, const char *command, char *url,
                                size_t url_len) {
  char yaml[2048];
  char err[256] = "";
  al_mockllm_options_t mo;
  al_mockllm_t *mock = NULL;

  snprintf(yaml, sizeof(yaml),
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - tool_use: {id: t1, name: bash, input: {command: \"%s\"}}\n"
           "  - reply: {content: [{text: done}]}\n",
           command);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.err = err;
  mo.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&x->loop, &mo, &mock), 0);
  snprintf(url, url_len, "http://127.0.0.1:%d", al_mockllm_port(mock));
  return mock;
}

static void no_protected_paths(sbx_t *x) {
  char cmd[1024];

  /* The fixture's workspace has a .git (and the other protected paths)
   * of its own: these cases need one without. */
  snprintf(cmd, sizeof(cmd), "rm -rf %s/.git %s/.agentloop %s/tools.d",
           x->ws, x->ws, x->ws);
  ASSERT_EQ(system(cmd), 0);
}

/* After A and B: B's command could not write a protected path once A
 * had ended, and without the markers the workspace is as before. */
static void no_breach_same_tree(sbx_t *x, char *before) {
  char *after;

  if (file_there(x->ws, "breach")) {
    AL_TEST_FAIL("B's command wrote a protected path once A had ended:\n%s",
                 al_test_tree_listing(x->ws));
  }
  drop_marker(x->ws, "a.go");
  drop_marker(x->ws, "a.started");
  drop_marker(x->ws, "b.go");
  drop_marker(x->ws, "b.started");
  after = al_test_tree_listing(x->ws);
  if (strcmp(before, after) != 0) {
    AL_TEST_FAIL("the workspace changed:\nbefore:\n%s\nafter:\n%s", before,
                 after);
  }
  al_free(before);
  al_free(after);
}

/* Agent A (this process) and agent B (`agentloop run`, another process)
 * in one workspace without .git: A's sandboxed command makes the
 * placeholder .git; B's starts while it stands; A's ends first. A must not
 * remove the placeholder B's sandbox has mounted (that would unmount it
 * there, and B's tool could then create .git/hooks), and B, taking it for
 * an agent's placeholder, removes it when it ends: the workspace is as
 * before. */
TEST_IMPL(sandbox_two_agents_share_placeholders) {
  static const char *const a_argv[] = {
      "sh", "-c",
      "touch a.started; while [ ! -e a.go ]; do sleep 0.01; done", NULL};
  sbx_t x;
  al_spawn_options_t o;
  al_spawn_t *a = NULL;
  al_mockllm_t *mock;
  char url[64], homeb[400];
  char *envbuf[5];
  char *before;
  pid_t b;
  int st;

  sbx_no_pool = true;
  sbx_init(&x, SBX_BWRAP);
  sbx_no_pool = false;
  no_protected_paths(&x);
  snprintf(homeb, sizeof(homeb), "%s/homeb", x.base);
  ASSERT_EQ(mkdir(homeb, 0700), 0);
  before = al_test_tree_listing(x.ws);

  sib_done = 0;
  al__spawn_options_init(&o);
  o.cwd = x.ws;
  o.sandbox = x.sb;
  o.on_done = sib_on_done;
  o.argv = a_argv;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &a), 0);
  serve_until_file(&x, x.ws, "a.started");
  ASSERT(file_there(x.ws, ".git")); /* A's placeholder */

  mock = start_mock(&x,
                    "touch b.started; while [ ! -e b.go ]; do sleep 0.01; "
                    "done; mkdir -p .git/hooks && touch .git/hooks/pre-commit "
                    "&& touch breach; mkdir tools.d/x && touch breach; true",
                    url, sizeof(url));
  b = start_run(&x, url, homeb, envbuf);
  serve_until_file(&x, x.ws, "b.started");

  put_marker(x.ws, "a.go");
  while (sib_done < 1) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  /* A has ended and cleaned up: B still runs, so its mount stays. */
  ASSERT(file_there(x.ws, ".git"));
  put_marker(x.ws, "b.go");
  st = serve_until_exit(&x, b);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  no_breach_same_tree(&x, before);
  free_env(envbuf);
  al_mockllm_close(mock, NULL);
  sbx_finish(&x);
  return 0;
}

/* The one case the janitor cannot cover: it is SIGKILLed together with
 * its agent (the OOM killer taking both) while a tool runs, so the
 * placeholders stay. The next agent of the user sweeps them (its janitor
 * does, before anything else): the workspace is as before. */
TEST_IMPL(sandbox_double_sigkill_swept_by_next_agent) {
  sbx_t x;
  al_mockllm_t *mock;
  char url[64], homeb[400];
  char *envbuf[5];
  char *before, *after;
  int fds[SBX_MAX_TREE];
  size_t n;
  pid_t b, jan;

  sbx_no_pool = true;
  sbx_init(&x, SBX_BWRAP);
  sbx_no_pool = false;
  no_protected_paths(&x);
  snprintf(homeb, sizeof(homeb), "%s/homeb", x.base);
  ASSERT_EQ(mkdir(homeb, 0700), 0);
  before = al_test_tree_listing(x.ws);

  mock = start_mock(&x,
                    "touch b.started; while [ ! -e b.go ]; do sleep 0.01; "
                    "done",
                    url, sizeof(url));
  b = start_run(&x, url, homeb, envbuf);
  serve_until_file(&x, x.ws, "b.started");
  ASSERT(file_there(x.ws, ".git"));
  jan = al_test_child_with(b, "--janitor");
  ASSERT(jan > 0);
  n = sbx_tree_pidfds(b, fds, SBX_MAX_TREE);
  /* The janitor first, so it never sees its agent go. */
  ASSERT_EQ(kill(jan, SIGKILL), 0);
  ASSERT_EQ(kill(b, SIGKILL), 0);
  ASSERT_EQ(waitpid(b, NULL, 0), b);
  ASSERT(sbx_all_exit(fds, n));
  /* Left behind: what this test is about. */
  ASSERT(file_there(x.ws, ".git"));
  al_mockllm_close(mock, NULL);
  free_env(envbuf);
  drop_marker(x.ws, "b.started");

  /* The next agent: a run whose reply has no tool call. */
  {
    char yaml[] = "responses:\n  - reply: {content: [{text: hi}]}\n";
    char err[256] = "";
    al_mockllm_options_t mo;
    int st;

    al_mockllm_options_init(&mo);
    mo.scenario_yaml = yaml;
    mo.err = err;
    mo.err_len = sizeof(err);
    ASSERT_EQ(al_mockllm_new(&x.loop, &mo, &mock), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(mock));
    b = start_run(&x, url, homeb, envbuf);
    /* Its janitor starts with its sandbox, before the request. */
    while ((jan = al_test_child_with(b, "--janitor")) == 0) {
      ASSERT_EQ(waitpid(b, &st, WNOHANG), 0);
      uv_run(&x.loop, UV_RUN_NOWAIT);
      usleep(2000);
    }
    fds[0] = (int)syscall(SYS_pidfd_open, jan, 0);
    ASSERT(fds[0] >= 0);
    st = serve_until_exit(&x, b);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    /* Its janitor (which swept first thing) has ended too. */
    ASSERT(sbx_all_exit(fds, 1));
    al_mockllm_close(mock, NULL);
    free_env(envbuf);
  }
  after = al_test_tree_listing(x.ws);
  if (strcmp(before, after) != 0) {
    AL_TEST_FAIL("the workspace changed:\nbefore:\n%s\nafter:\n%s", before,
                 after);
  }
  al_free(before);
  al_free(after);
  sbx_finish(&x);
  return 0;
}

/* Two sandboxes of one process on one workspace (two agentloopd sessions
 * in one project): the same rule as between processes. A's placeholder
 * .git stands when B's command starts; A ends first and must leave it to
 * B, whose command then still cannot write .git/hooks; B removes it. */
TEST_IMPL(sandbox_two_sessions_share_placeholders) {
  static const char *const a_argv[] = {
      "sh", "-c",
      "touch a.started; while [ ! -e a.go ]; do sleep 0.01; done", NULL};
  static const char *const b_argv[] = {
      "sh", "-c",
      "touch b.started; while [ ! -e b.go ]; do sleep 0.01; done; "
      "mkdir -p .git/hooks && touch .git/hooks/pre-commit && touch breach; "
      "true",
      NULL};
  const char *roots[1];
  al_sandbox_config_t cfg;
  al_sandbox_info_t info;
  al_sandbox_t *sb2 = NULL;
  sbx_t x;
  al_spawn_options_t o;
  al_spawn_t *a = NULL;
  al_spawn_t *b = NULL;
  char *before;

  sbx_no_pool = true;
  sbx_init(&x, SBX_BWRAP);
  sbx_no_pool = false;
  no_protected_paths(&x);
  al__sandbox_config_init(&cfg);
  cfg.policy = AL_SANDBOX_REQUIRED;
  cfg.probe.helper = AL_BINARY_DIR "/agentloop-exec";
  roots[0] = x.ws;
  cfg.write_roots = roots;
  cfg.n_write_roots = 1;
  ASSERT_EQ(al__sandbox_new(&cfg, &sb2, &info), 0);
  before = al_test_tree_listing(x.ws);

  sib_done = 0;
  al__spawn_options_init(&o);
  o.cwd = x.ws;
  o.on_done = sib_on_done;
  o.sandbox = x.sb;
  o.argv = a_argv;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &a), 0);
  serve_until_file(&x, x.ws, "a.started");
  ASSERT(file_there(x.ws, ".git"));
  o.sandbox = sb2;
  o.argv = b_argv;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &b), 0);
  serve_until_file(&x, x.ws, "b.started");
  put_marker(x.ws, "a.go");
  while (sib_done < 1) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  ASSERT(file_there(x.ws, ".git")); /* B's mount stays */
  put_marker(x.ws, "b.go");
  while (sib_done < 2) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  no_breach_same_tree(&x, before);
  al__sandbox_free(sb2);
  sbx_finish(&x);
  return 0;
}

/* A sandbox whose agentloop died while bwrap was still setting up can be
 * left waiting for ever (the inner half of bwrap on its outer half, seen
 * after SIGKILLs of agentloopd). The janitor ends, once its agentloop is
 * gone, every bwrap whose command line names that agentloop as the owner.
 * Here a stand-in: a bwrap held on --block-fd whose helper names the run
 * as its owner. */
TEST_IMPL(janitor_kills_orphaned_sandbox) {
  char helper[4096], own[32];
  char url[64], homeb[400];
  char *envbuf[5];
  int fds[SBX_MAX_TREE];
  int hold[2];
  size_t n;
  sbx_t x;
  al_mockllm_t *mock;
  struct pollfd pf;
  posix_spawn_file_actions_t fa;
  pid_t b, orphan;
  int st;

  sbx_no_pool = true;
  sbx_init(&x, SBX_BWRAP);
  sbx_no_pool = false;
  snprintf(homeb, sizeof(homeb), "%s/homeb", x.base);
  ASSERT_EQ(mkdir(homeb, 0700), 0);
  mock = start_mock(&x, "touch b.started; sleep 1000", url, sizeof(url));
  b = start_run(&x, url, homeb, envbuf);
  serve_until_file(&x, x.ws, "b.started");
  n = sbx_tree_pidfds(b, fds, SBX_MAX_TREE);

  snprintf(helper, sizeof(helper), "%s/agentloop-exec", AL_BINARY_DIR);
  snprintf(own, sizeof(own), "%ld", (long)b);
  ASSERT_EQ(pipe(hold), 0);
  {
    char *argv[] = {"/usr/bin/bwrap", "--ro-bind", "/", "/", "--block-fd",
                    "3", "--", helper, "--owner", own, "--", "true", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, hold[0], 3);
    ASSERT_EQ(posix_spawn(&orphan, argv[0], &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  close(hold[0]);
  ASSERT_EQ(waitpid(orphan, &st, WNOHANG), 0); /* held */

  ASSERT_EQ(kill(b, SIGKILL), 0);
  ASSERT_EQ(waitpid(b, NULL, 0), b);
  ASSERT(sbx_all_exit(fds, n)); /* the janitor too, after its work */
  pf.fd = (int)syscall(SYS_pidfd_open, orphan, 0);
  pf.events = POLLIN;
  ASSERT(pf.fd >= 0);
  if (poll(&pf, 1, 2000 * al_test_timeout_multiplier()) != 1) {
    kill(orphan, SIGKILL);
    waitpid(orphan, NULL, 0);
    AL_TEST_FAIL("the janitor left its agentloop's sandbox running");
  }
  close(pf.fd);
  ASSERT_EQ(waitpid(orphan, &st, 0), orphan);
  ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  close(hold[1]);
  free_env(envbuf);
  al_mockllm_close(mock, NULL);
  sbx_finish(&x);
  return 0;
}

/* A program under /tmp (an MCP server or tools.d command built there, or
 * a checkout there) runs sandboxed although bwrap mode gives every tool a
 * private /tmp: it alone is bound in, read-only, and it starts cold (a
 * warm sandbox was built without it). */
static char tmp_out[256];
static int tmp_done;

static void tmp_on_output(al_spawn_t *sp, int stream, const char *data,
                          size_t len) {
  size_t n = strlen(tmp_out);

  (void)sp;
  (void)stream;
  if (n + len < sizeof(tmp_out)) {
    memcpy(tmp_out + n, data, len);
    tmp_out[n + len] = '\0';
  }
}

static void tmp_on_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  (void)sp;
  tmp_done = res->exit_status == 0 && res->term_signal == 0 ? 1 : 2;
}

TEST_IMPL(sandbox_runs_program_under_tmp) {
  char dir[] = "/tmp/al_tmpprog_XXXXXX";
  char mark[] = "/tmp/al_tmpmark_XXXXXX";
  char prog[300], cmd[400];
  const char *argv[2];
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_NOT_NULL(mkdtemp(mark));
  snprintf(prog, sizeof(prog), "%s/prog", dir);
  put_file(dir, "prog", "#!/bin/sh\necho from-tmp; ls /tmp\n");
  ASSERT_EQ(chmod(prog, 0755), 0);
  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  argv[0] = prog;
  argv[1] = NULL;
  al__spawn_options_init(&o);
  o.cwd = x.ws;
  o.sandbox = x.sb;
  o.argv = argv;
  o.on_done = tmp_on_done;
  o.on_output = tmp_on_output;
  tmp_out[0] = '\0';
  tmp_done = 0;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  while (tmp_done == 0) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  if (tmp_done != 1 || strstr(tmp_out, "from-tmp\n") == NULL) {
    AL_TEST_FAIL("the program under /tmp did not run: %s", tmp_out);
  }
  /* Still a private /tmp: what else is in the real one is not there. */
  if (strstr(tmp_out, mark + 5) != NULL) {
    AL_TEST_FAIL("the real /tmp showed through: %s", tmp_out);
  }
  ASSERT_EQ(rmdir(mark), 0);
  sbx_finish(&x);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}
