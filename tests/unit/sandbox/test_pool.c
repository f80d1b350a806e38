/* The warm sandbox pool (src/sandbox/pool.h): one command per warm
 * sandbox, retirement on a plan change, on close and after idle time,
 * growth with concurrent tools, and no process left by a cancel or
 * timeout during the hand-off or by SIGKILL of the parent. Runs in bwrap
 * mode through the sandbox fixture (sbx.h); commands are started with
 * the spawn wrapper directly so each result carries its pid. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/pool.h"
#include "test.h"
#include "tools/spawn.h"
#include "loop/agent_int.h"
#include "unit/loop/agent_fx.h"
#include "unit/sandbox/sbx.h"

static al_pool_stats_t stats(sbx_t *x) {
  al_pool_stats_t st;

  ASSERT(al__pool_stats(x->sb, &st));
  return st;
}

static bool gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

static bool exists(const char *p) {
  struct stat st;

  return lstat(p, &st) == 0;
}

/* ---- tests ----------------------------------------------------------------- */

/* Each command gets a sandbox of its own: the one that was waiting, never
 * one that ran something before (other PID and mount namespaces). */
TEST_IMPL(pool_one_command_per_sandbox) {
  sbx_t x;
  sbx_run_t a, b;
  int p1, p2;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  p1 = stats(&x).idle_pids[0];
  sbx_run_start(&x, "readlink /proc/self/ns/pid /proc/self/ns/mnt", &a, 0);
  sbx_run_wait(&x, &a);
  ASSERT_EQ(a.exit_status, 0);
  ASSERT_EQ(a.pid, p1); /* it ran in the warm one */
  ASSERT(gone(p1));
  ASSERT_NOT_NULL(strstr(a.out, "pid:["));
  sbx_wait_warm(&x);
  p2 = stats(&x).idle_pids[0];
  ASSERT_NE(p2, p1);
  sbx_run_start(&x, "readlink /proc/self/ns/pid /proc/self/ns/mnt", &b, 0);
  sbx_run_wait(&x, &b);
  ASSERT_EQ(b.pid, p2);
  ASSERT(strcmp(a.out, b.out) != 0);
  ASSERT_EQ(stats(&x).served, 2);
  sbx_finish(&x);
  return 0;
}

/* A hidden path replaced after the warm sandbox was built (its tmpfs sits
 * on the old directory): the hand-off retires it and the command starts
 * in a sandbox that hides the new one. */
TEST_IMPL(pool_plan_change_retires_warm) {
  sbx_t x;
  sbx_run_t r;
  char a[512], b[512];
  int p1;
  uint64_t retired;
  FILE *f;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  p1 = stats(&x).idle_pids[0];
  retired = stats(&x).retired;
  snprintf(a, sizeof(a), "%s/.ssh", x.home);
  snprintf(b, sizeof(b), "%s/.ssh.old", x.home);
  ASSERT_EQ(rename(a, b), 0);
  ASSERT_EQ(mkdir(a, 0700), 0);
  snprintf(b, sizeof(b), "%s/.ssh/id_rsa", x.home);
  f = fopen(b, "w");
  ASSERT_NOT_NULL(f);
  fputs(SBX_FILE_CANARY "\n", f);
  fclose(f);
  sbx_run_start(&x, "cat \"$HOME/.ssh/id_rsa\"; echo end", &r, 0);
  sbx_run_wait(&x, &r);
  ASSERT_NOT_NULL(strstr(r.out, "end"));
  if (strstr(r.out, SBX_FILE_CANARY) != NULL) {
    AL_TEST_FAIL("the new ~/.ssh was readable: %s", r.out);
  }
  ASSERT_NE(r.pid, p1);
  ASSERT(gone(p1));
  ASSERT_GE(stats(&x).retired, retired + 1);
  sbx_finish(&x);
  return 0;
}

/* A protected path that appears after the warm sandbox was built (the
 * plan then said "placeholder"): the command sees the real directory,
 * read-only, both on the start right after and on the next warm one. The
 * hand-off itself reads no path: the change arrives as an event. */
TEST_IMPL(pool_protected_path_appearing_after_build) {
  sbx_t x;
  sbx_run_t r;
  char d[512], f[600], y[600];
  const char *cmd = "cat .agentloop/x; echo bad > .agentloop/y; echo end";
  uint64_t served;
  int round, p1;
  FILE *fp;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  snprintf(d, sizeof(d), "%s/.agentloop", x.ws);
  snprintf(f, sizeof(f), "%s/x", d);
  snprintf(y, sizeof(y), "%s/y", d);
  ASSERT(!exists(d));
  ASSERT_EQ(mkdir(d, 0755), 0);
  fp = fopen(f, "w");
  ASSERT_NOT_NULL(fp);
  fputs(SBX_FILE_CANARY "\n", fp);
  fclose(fp);
  for (round = 0; round < 2; round++) {
    served = stats(&x).served;
    p1 = stats(&x).idle_pids[0];
    sbx_run_start(&x, cmd, &r, 0);
    sbx_run_wait(&x, &r);
    ASSERT_NOT_NULL(strstr(r.out, "end"));
    if (strstr(r.out, SBX_FILE_CANARY) == NULL) {
      AL_TEST_FAIL("round %d: the new .agentloop was covered: %s", round,
                   r.out);
    }
    ASSERT(!exists(y));
    ASSERT(exists(f)); /* not a placeholder of ours: left as it was */
    if (round == 1) {
      /* The plan made again after the change serves warm starts. */
      ASSERT_EQ(stats(&x).served, served + 1);
      ASSERT_EQ(r.pid, p1);
    }
    sbx_wait_warm(&x);
  }
  sbx_finish(&x);
  return 0;
}

/* Files a tool (or the user) writes in the workspace are no reason to
 * retire anything: only the components the plans read count. */
TEST_IMPL(pool_unrelated_write_keeps_warm) {
  sbx_t x;
  sbx_run_t r;
  char p[512];
  uint64_t retired;
  int p1;
  FILE *fp;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  p1 = stats(&x).idle_pids[0];
  retired = stats(&x).retired;
  snprintf(p, sizeof(p), "%s/notes.txt", x.ws);
  fp = fopen(p, "w");
  ASSERT_NOT_NULL(fp);
  fclose(fp);
  snprintf(p, sizeof(p), "%s/src", x.ws);
  ASSERT_EQ(mkdir(p, 0755), 0);
  al__pool_prune(x.sb); /* reads the events */
  sbx_run_start(&x, "echo ok", &r, 0);
  sbx_run_wait(&x, &r);
  ASSERT_NOT_NULL(strstr(r.out, "ok"));
  ASSERT_EQ(r.pid, p1);
  ASSERT_EQ(stats(&x).retired, retired);
  sbx_finish(&x);
  return 0;
}

/* The placeholders our own sandboxes make and remove are no change to
 * the plan (it says "placeholder" there already): a tool running beside
 * another that just made them still starts warm, without a new plan. */
TEST_IMPL(pool_own_placeholders_keep_plan) {
  sbx_t x;
  sbx_run_t a, b;
  al_spawn_t *sp;
  char p[512];
  uint64_t replans;
  int p2;

  sbx_init(&x, SBX_BWRAP);
  /* Without .git: the one placeholder left in a workspace (tools.d/ and
   * .agentloop/ get none). */
  snprintf(p, sizeof(p), "rm -rf '%s/.git'", x.ws);
  ASSERT_EQ(system(p), 0);
  sbx_wait_warm(&x);
  replans = stats(&x).replans;
  snprintf(p, sizeof(p), "%s/.git", x.ws);
  ASSERT(!exists(p));
  sp = sbx_run_start(&x, "exec sleep 1000", &a, 0);
  while (!exists(p)) { /* its helper makes the placeholder */
    uv_run(&x.loop, UV_RUN_NOWAIT);
  }
  sbx_wait_warm(&x);
  ASSERT_EQ(stats(&x).replans, replans);
  p2 = stats(&x).idle_pids[0];
  sbx_run_start(&x, "echo ok", &b, 0);
  sbx_run_wait(&x, &b);
  ASSERT_NOT_NULL(strstr(b.out, "ok"));
  ASSERT_EQ(b.pid, p2);
  al__spawn_kill(sp);
  sbx_run_wait(&x, &a);
  ASSERT(!exists(p));
  sbx_finish(&x);
  return 0;
}

static void handoff_kill_case(bool timeout) {
  sbx_t x;
  sbx_run_t r;
  al_spawn_t *sp;
  char mark[64];
  char cmd[256];
  char p[512];

  snprintf(mark, sizeof(mark), "ALPOOLKILL%d", (int)getpid());
  snprintf(cmd, sizeof(cmd),
           "(setsid bash -c 'exec -a %s sleep 1000' &); bash -c 'exec -a %s "
           "sleep 1000'",
           mark, mark);
  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  sp = sbx_run_start(&x, cmd, &r, timeout ? 1 : 0);
  if (!timeout) {
    al__spawn_kill(sp); /* before the helper has even read its command */
  }
  sbx_run_wait(&x, &r);
  ASSERT_EQ(r.status, timeout ? AL_ETIMEDOUT : AL_ECANCELED);
  ASSERT_EQ(stats(&x).served, 1);
  ASSERT(sbx_wait_no_process(&x, mark));
  ASSERT(gone(r.pid));
  /* Its placeholders went with it. */
  snprintf(p, sizeof(p), "%s/tools.d", x.ws);
  ASSERT(!exists(p));
  snprintf(p, sizeof(p), "%s/.agentloop", x.ws);
  ASSERT(!exists(p));
  sbx_finish(&x);
}

TEST_IMPL(pool_cancel_during_handoff_leaves_nothing) {
  handoff_kill_case(false);
  return 0;
}

TEST_IMPL(pool_timeout_during_handoff_leaves_nothing) {
  handoff_kill_case(true);
  return 0;
}

/* Freeing the sandbox (agent, session or daemon close) kills every warm
 * one and everything below it. */
TEST_IMPL(pool_closed_with_its_sandbox) {
  sbx_t x;
  al_pool_stats_t st;
  int fds[SBX_MAX_TREE];
  size_t n = 0, i;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  st = stats(&x);
  ASSERT_GE(st.idle, 1);
  for (i = 0; i < st.idle; i++) {
    n += sbx_tree_pidfds(st.idle_pids[i], fds + n, SBX_MAX_TREE - n);
  }
  ASSERT_GE(n, 3); /* bwrap, its init, the helper */
  sbx_finish(&x);
  ASSERT(sbx_all_exit(fds, n));
  return 0;
}

static void on_tick(uv_timer_t *t) { (void)t; }

/* No start for the idle time: the warm ones go, the targets drop to 0. */
TEST_IMPL(pool_idle_time_retires_warm) {
  sbx_t x;
  uv_timer_t tick;
  al_pool_stats_t st;
  int fds[SBX_MAX_TREE];
  size_t n;

  sbx_pool_idle_ms = 30 * (uint64_t)al_test_timeout_multiplier();
  sbx_init(&x, SBX_BWRAP);
  sbx_pool_idle_ms = 0;
  /* Ready, not necessarily planned (the plan has nothing to do with idle
   * time, and waiting for it could outlast the short idle time). */
  do {
    uv_run(&x.loop, UV_RUN_ONCE);
    st = stats(&x);
    ASSERT_EQ(st.failed, 0);
  } while (st.idle_k[0] == 0);
  n = sbx_tree_pidfds(st.idle_pids[0], fds, SBX_MAX_TREE);
  ASSERT_GE(n, 3);
  /* The pool's timer does not hold a loop open by itself: something
   * else (here a tick) must, as the agent's handles do. */
  ASSERT_EQ(uv_timer_init(&x.loop, &tick), 0);
  ASSERT_EQ(uv_timer_start(&tick, on_tick, 5, 5), 0);
  do {
    uv_run(&x.loop, UV_RUN_ONCE);
    st = stats(&x);
  } while (st.idle + st.building > 0);
  uv_close((uv_handle_t *)&tick, NULL);
  ASSERT_EQ(st.target[0], 0);
  ASSERT_GE(st.retired, 1);
  ASSERT(sbx_all_exit(fds, n));
  sbx_finish(&x);
  return 0;
}

/* Three tools at once find one warm sandbox: the pool grows to three (and
 * not past its cap), and the next three start warm. */
TEST_IMPL(pool_grows_with_concurrent_tools) {
  sbx_t x;
  sbx_run_t r[3];
  sbx_run_t many[6];
  al_pool_stats_t st;
  int i;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  for (i = 0; i < 3; i++) {
    sbx_run_start(&x, "echo ok", &r[i], 0);
  }
  st = stats(&x);
  ASSERT_EQ(st.served, 1);
  ASSERT_EQ(st.misses, 2);
  ASSERT_EQ(st.target[0], 3);
  for (i = 0; i < 3; i++) {
    sbx_run_wait(&x, &r[i]);
    ASSERT_NOT_NULL(strstr(r[i].out, "ok"));
  }
  do {
    uv_run(&x.loop, UV_RUN_ONCE);
    st = stats(&x);
    ASSERT_EQ(st.failed, 0);
  } while (st.idle_k[0] < 3 || !st.planned);
  for (i = 0; i < 3; i++) {
    sbx_run_start(&x, "echo ok", &r[i], 0);
  }
  ASSERT_EQ(stats(&x).served, 4);
  for (i = 0; i < 3; i++) {
    sbx_run_wait(&x, &r[i]);
  }
  /* Never above the cap (4 here), however many start at once. */
  sbx_wait_warm(&x);
  for (i = 0; i < 6; i++) {
    sbx_run_start(&x, "echo ok", &many[i], 0);
  }
  for (i = 0; i < 6; i++) {
    sbx_run_wait(&x, &many[i]);
  }
  ASSERT_EQ(stats(&x).target[0], 4);
  sbx_finish(&x);
  return 0;
}

/* SIGKILL of the process that owns the pool (agentloop, agentloopd) while
 * warm sandboxes wait and a warm-started command runs: nothing of either
 * survives it (bwrap --die-with-parent, the PID namespace). */
TEST_IMPL(pool_parent_sigkill_leaves_no_process) {
  int pfd[2];
  pid_t child;
  char buf[600];
  char mark[64];
  int fds[SBX_MAX_TREE];
  size_t n;
  ssize_t got = 0;
  struct pollfd pl;
  char cmd[1400];

  snprintf(mark, sizeof(mark), "ALPOOLSIGKILL%d", (int)getpid());
  ASSERT_EQ(pipe(pfd), 0);
  child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    sbx_t x;
    sbx_run_t r;
    char c[256];
    char line[600];

    close(pfd[0]);
    sbx_init(&x, SBX_BWRAP);
    sbx_wait_warm(&x);
    snprintf(c, sizeof(c), "bash -c 'exec -a %s sleep 1000'", mark);
    sbx_run_start(&x, c, &r, 0);
    while (!sbx_process_with(mark)) {
      uv_run(&x.loop, UV_RUN_NOWAIT);
    }
    sbx_wait_warm(&x); /* and a warm one waiting beside it */
    snprintf(line, sizeof(line), "%s\n", x.base);
    (void)!write(pfd[1], line, strlen(line));
    for (;;) {
      pause();
    }
  }
  close(pfd[1]);
  pl.fd = pfd[0];
  pl.events = POLLIN;
  while (got == 0 || buf[got - 1] != '\n') {
    ssize_t k;

    ASSERT_EQ(poll(&pl, 1, 30000 * al_test_timeout_multiplier()), 1);
    k = read(pfd[0], buf + got, sizeof(buf) - 1 - (size_t)got);
    ASSERT(k > 0);
    got += k;
  }
  buf[got - 1] = '\0';
  close(pfd[0]);
  n = sbx_tree_pidfds(child, fds, SBX_MAX_TREE);
  /* the child; bwrap, its init and the helper or command: twice */
  ASSERT_GE(n, 7);
  ASSERT(sbx_process_with(mark));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, NULL, 0), child);
  ASSERT(sbx_all_exit(fds, n));
  ASSERT(!sbx_process_with(mark));
  snprintf(cmd, sizeof(cmd), "chmod -R u+rwX '%s' 2>/dev/null; rm -rf '%s'",
           buf, buf);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* Through an agent: its first tool run, the pool refilled, then the agent
 * (a session) closes: every warm sandbox and its processes go with it. */
TEST_IMPL(pool_agent_close_retires_warm) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {id: b1, name: bash, input: {command: 'echo hi'}}\n"
      "  - reply: {content: [{text: 'done'}]}\n";
  fx_t f;
  al_pool_stats_t st;
  int fds[SBX_MAX_TREE];
  size_t n = 0, i;

  fx_init(&f, yaml);
  f.opts.sandbox = AL_SANDBOX_REQUIRED;
  fx_start(&f);
  ASSERT(al__pool_stats(al__agent_sandbox(f.agent), &st));
  fx_run(&f, "go");
  ASSERT_EQ(fx_count(&f, "tool_use_completed"), 1);
  for (;;) {
    ASSERT(al__pool_stats(al__agent_sandbox(f.agent), &st));
    ASSERT_EQ(st.failed, 0);
    if (st.idle_k[0] > 0 && st.building == 0) {
      break;
    }
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(st.served + st.misses, 1);
  for (i = 0; i < st.idle; i++) {
    n += sbx_tree_pidfds(st.idle_pids[i], fds + n, SBX_MAX_TREE - n);
  }
  ASSERT_GE(n, 3);
  fx_finish(&f);
  ASSERT(sbx_all_exit(fds, n));
  return 0;
}
