/* Issue 22, point 8: after a SIGKILL of agentloopd in a workspace two
 * chat sessions used, the placeholder stayed through a restart and a
 * `daemon stop`. A daemon nobody reaps (its parent a container's init
 * that reaps nothing, or a supervisor that waits later) is a zombie, and
 * the registry took a zombie noter for a live agent: its janitor, the
 * restarted daemon's janitor and the final sweep all left the
 * placeholder "to that agent". Here the test process is the daemon's
 * parent and does not reap it until the end. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit/daemon/dtest.h"

static pid_t start_daemon(dt_t *t, char **env) {
  char exe[600];
  char *args[] = {exe,      "--foreground", "--socket", t->sock, "--state-dir",
                  t->state, "--log-level",  "warn",     NULL};
  posix_spawn_file_actions_t fa;
  pid_t pid;

  snprintf(exe, sizeof(exe), "%s/agentloopd", AL_BINARY_DIR);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  ASSERT_EQ(posix_spawn(&pid, exe, &fa, NULL, args, env), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

static bool path_there(void *data) {
  struct stat st;

  return lstat((const char *)data, &st) == 0;
}

/* The janitor ends once its clean-up is done (bounded, scaled). */
static void wait_janitor(int jan) {
  struct pollfd pf;

  pf.fd = (int)syscall(SYS_pidfd_open, jan, 0);
  pf.events = POLLIN;
  ASSERT(pf.fd >= 0);
  ASSERT_EQ(poll(&pf, 1, 3000 * al_test_timeout_multiplier()), 1);
  close(pf.fd);
}

static void create_as(dt_client_t *c, int id, const char *params, char *out,
                      size_t len) {
  json_t *r = dt_call(c, id, "session/create", params);
  const char *s = json_string_value(
      json_object_get(json_object_get(r, "result"), "session"));

  ASSERT_NOT_NULL(s);
  snprintf(out, len, "%s", s);
}

TEST_IMPL(daemon_sigkill_two_sessions_restart_sweeps) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cl[] = {&c, &c2};
  char p[512], sa[64], sb[64], sc[64], home[200], git[300];
  char envs[5][256];
  char *env[6];
  char *before, *after;
  pid_t d1, d2;
  int jan, i;

  al_test_need_bwrap();
  dt_init(&t,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: toolu_a1, name: bash, input: "
          "{command: \"touch a.started; sleep 30\"}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: toolu_b1, name: bash, input: "
          "{command: \"touch b.started; sleep 30\"}}\n");
  snprintf(envs[0], 256, "AGENTLOOP_BASE_URL=%s", t.url);
  snprintf(envs[1], 256, "ANTHROPIC_API_KEY=test-key");
  snprintf(envs[2], 256, "AGENTLOOP_MODEL=mock-model");
  snprintf(envs[3], 256, "PATH=/usr/bin:/bin");
  snprintf(home, sizeof(home), "%s/home", t.root);
  ASSERT_EQ(mkdir(home, 0700), 0);
  snprintf(envs[4], 256, "HOME=%s", home);
  for (i = 0; i < 5; i++) {
    env[i] = envs[i];
  }
  env[5] = NULL;
  /* A workspace without .git: the placeholder sessions make there. */
  snprintf(git, sizeof(git), "%s/.git", t.work);
  before = al_test_tree_listing(t.work);

  d1 = start_daemon(&t, env);
  dt_connect_retry(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sa, sizeof(sa));
  create_as(&c, 3, p, sb, sizeof(sb)); /* dt_create's id is taken */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sa);
  dt_call(&c, 10, "turn/send", p);
  snprintf(p, sizeof(p), "%s/a.started", t.work);
  dt_run_until(&t, path_there, p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sb);
  dt_call(&c, 11, "turn/send", p);
  snprintf(p, sizeof(p), "%s/b.started", t.work);
  dt_run_until(&t, path_there, p);
  ASSERT(path_there(git)); /* the crash path under test */
  jan = al_test_child_with(d1, "--janitor");
  ASSERT(jan > 0);
  ASSERT_EQ(kill(d1, SIGKILL), 0);
  dt_wait_eof(&c);
  /* d1 is not reaped: a zombie, like a daemon whose parent reaps
   * nothing. Its janitor has done what it does. */
  wait_janitor(jan);

  /* The restart, a session, and `daemon stop`. */
  d2 = start_daemon(&t, env);
  dt_connect_retry(&t, &c2);
  dt_init_client(&c2);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c2, p, sc, sizeof(sc));
  jan = al_test_child_with(d2, "--janitor");
  dt_call(&c2, 20, "shutdown", NULL);
  dt_wait_eof(&c2);
  if (jan > 0) {
    wait_janitor(jan);
  }
  ASSERT_EQ(waitpid(d2, NULL, 0), d2);
  /* The restarted daemon's janitor may have been started after the
   * look above, and sweeps as it ends: its progress, bounded (2 s,
   * scaled), while d1 is still a zombie (reaping it would hide the
   * bug). */
  {
    uint64_t end = uv_hrtime() +
                   (uint64_t)2000000000 * al_test_timeout_multiplier();

    while (path_there(git) && uv_hrtime() < end) {
      usleep(5000);
    }
  }
  ASSERT_EQ(waitpid(d1, NULL, 0), d1);
  snprintf(p, sizeof(p), "%s/a.started", t.work);
  ASSERT_EQ(unlink(p), 0);
  snprintf(p, sizeof(p), "%s/b.started", t.work);
  ASSERT_EQ(unlink(p), 0);
  after = al_test_tree_listing(t.work);
  if (strcmp(before, after) != 0) {
    AL_TEST_FAIL(
        "the workspace changed through the SIGKILL, a restart "
        "and a stop:\nbefore:\n%s\nafter:\n%s",
        before, after);
  }
  al_free(before);
  al_free(after);
  dt_finish(&t, cl, 2);
  return 0;
}
