/* Pre-joined launchers (src/sandbox/launch.h): a cold start execs in a
 * launcher already inside its own cgroup (pids.max binds: a fork bomb is
 * stopped), one command per launcher, and no process or cgroup left by a
 * cancel or timeout during the hand-off, by closing the sandbox or by
 * SIGKILL of its owner. bwrap mode without the warm pool (every start
 * cold) and degraded mode, through the sandbox fixture (sbx.h); commands
 * start through the spawn wrapper directly, so the hand-off happens
 * inside al__spawn_start and each result carries its pid. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/cgroup.h"
#include "sandbox/launch.h"
#include "test.h"
#include "tools/spawn.h"
#include "unit/sandbox/sbx.h"

static al_launch_stats_t stats(sbx_t *x) {
  al_launch_stats_t st;

  ASSERT(al__launch_stats(x->sb, &st));
  return st;
}

/* Runs the loop until a launcher waits; its pid. */
static int wait_ready(sbx_t *x) {
  al_launch_stats_t st;

  for (;;) {
    st = stats(x);
    ASSERT_EQ(st.failed, 0);
    if (st.ready) {
      return st.pid;
    }
    uv_run(&x->loop, UV_RUN_ONCE);
  }
}

static bool gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

/* The cgroup a launcher of this process with that pid made in `base`. */
static bool cg_exists(const char *base, int pid) {
  char dir[600];
  struct stat st;

  snprintf(dir, sizeof(dir), "%s/agentloop-%d-%d", base, (int)getpid(), pid);
  return stat(dir, &st) == 0;
}

static void init(sbx_t *x, sbx_mode_t mode) {
  sbx_no_pool = true; /* bwrap: every start cold */
  sbx_init(x, mode);
  sbx_no_pool = false;
  sbx_need_cgroup(x);
}

/* ---- tests ----------------------------------------------------------------- */

/* The launcher is in its cgroup, with pids.max, before any command; the
 * cold start runs in it (same pid) and the fork bomb's 200 forks stop
 * under pids.max 64; the cgroup is gone by the time the result is. */
static void cgroup_case(sbx_mode_t mode) {
  sbx_t x;
  sbx_run_t r;
  char base[256], file[700], text[32];
  int p, forked;
  const char *f;
  FILE *fp;

  init(&x, mode);
  snprintf(base, sizeof(base), "%s", al__sandbox_cgroup(x.sb)->pids);
  p = wait_ready(&x);
  ASSERT(cg_exists(base, p));
  snprintf(file, sizeof(file), "%s/agentloop-%d-%d/pids.max", base,
           (int)getpid(), p);
  fp = fopen(file, "r");
  ASSERT_NOT_NULL(fp);
  ASSERT_NOT_NULL(fgets(text, sizeof(text), fp));
  fclose(fp);
  ASSERT_STR_EQ(text, "64\n");
  sbx_run_start(&x,
            "perl -e 'my @k; for (1..200) { my $p = fork(); last unless "
            "defined $p; if ($p == 0) { sleep 30; exit 0 } push @k, $p } "
            "print \"FORKED=\" . scalar(@k) . \"\\n\"; kill 9, @k; 1 while "
            "wait() > 0'",
            &r, 0);
  sbx_run_wait(&x, &r);
  ASSERT_EQ(r.pid, p); /* the launcher took it */
  ASSERT_EQ(stats(&x).served, 1);
  f = strstr(r.out, "FORKED=");
  ASSERT_NOT_NULL(f);
  forked = atoi(f + 7);
  if (forked >= 64 || forked <= 0) {
    AL_TEST_FAIL("a cold start forked %d processes under pids.max 64 (%s)",
                 forked, r.out);
  }
  ASSERT(!cg_exists(base, p));
  ASSERT_EQ(al__cgroup_count_stale(al__sandbox_cgroup(x.sb)), 0);
  sbx_finish(&x);
}

TEST_IMPL(launch_cold_start_in_its_cgroup) {
  cgroup_case(SBX_BWRAP);
  return 0;
}

TEST_IMPL(launch_cold_start_in_its_cgroup_degraded) {
  cgroup_case(SBX_DEGRADED);
  return 0;
}

/* Each launcher serves one command: the next start takes a new one (a
 * new process, a new cgroup); the one that served is gone with its
 * command. */
TEST_IMPL(launch_one_command_per_launcher) {
  sbx_t x;
  sbx_run_t a, b;
  char base[256];
  int p1, p2;

  init(&x, SBX_BWRAP);
  snprintf(base, sizeof(base), "%s", al__sandbox_cgroup(x.sb)->pids);
  p1 = wait_ready(&x);
  sbx_run_start(&x, "echo a", &a, 0);
  ASSERT(!stats(&x).ready); /* taken, not back */
  sbx_run_wait(&x, &a);
  ASSERT_EQ(a.exit_status, 0);
  ASSERT_EQ(a.pid, p1);
  ASSERT(gone(p1));
  ASSERT(!cg_exists(base, p1)); /* its cgroup went with its command */
  p2 = wait_ready(&x);
  ASSERT_NE(p2, p1);
  ASSERT(cg_exists(base, p2)); /* a new one, joined ahead */
  sbx_run_start(&x, "echo b", &b, 0);
  sbx_run_wait(&x, &b);
  ASSERT_EQ(b.pid, p2);
  ASSERT_NOT_NULL(strstr(b.out, "b"));
  ASSERT_EQ(stats(&x).served, 2);
  sbx_finish(&x);
  return 0;
}

/* Cancelled right after the hand-off (before the launcher has read its
 * command), or timed out: the command, what it started in and out of its
 * process group, and its cgroup are all gone. */
static void kill_case(sbx_mode_t mode, bool timeout) {
  sbx_t x;
  sbx_run_t r;
  al_spawn_t *sp;
  char mark[64], cmd[256], base[256];
  int p;

  snprintf(mark, sizeof(mark), "ALLAUNCHKILL%d", (int)getpid());
  snprintf(cmd, sizeof(cmd),
           "(setsid bash -c 'exec -a %s sleep 1000' &); bash -c 'exec -a %s "
           "sleep 1000'",
           mark, mark);
  init(&x, mode);
  snprintf(base, sizeof(base), "%s", al__sandbox_cgroup(x.sb)->pids);
  p = wait_ready(&x);
  sp = sbx_run_start(&x, cmd, &r, timeout ? 1 : 0);
  ASSERT_EQ(stats(&x).served, 1);
  if (!timeout) {
    al__spawn_kill(sp);
  }
  sbx_run_wait(&x, &r);
  ASSERT_EQ(r.status, timeout ? AL_ETIMEDOUT : AL_ECANCELED);
  ASSERT_EQ(r.pid, p);
  ASSERT(sbx_wait_no_process(&x, mark));
  ASSERT(gone(p));
  ASSERT(!cg_exists(base, p));
  ASSERT_EQ(al__cgroup_count_stale(al__sandbox_cgroup(x.sb)), 0);
  sbx_finish(&x);
}

TEST_IMPL(launch_cancel_during_handoff_leaves_nothing) {
  kill_case(SBX_BWRAP, false);
  return 0;
}

TEST_IMPL(launch_timeout_during_handoff_leaves_nothing) {
  kill_case(SBX_DEGRADED, true);
  return 0;
}

/* Freeing the sandbox (agent, session or daemon close) kills the waiting
 * launcher and removes its cgroup before the loop runs dry. */
TEST_IMPL(launch_closed_with_its_sandbox) {
  sbx_t x;
  char base[256];
  int fd;
  int p;

  init(&x, SBX_DEGRADED);
  snprintf(base, sizeof(base), "%s", al__sandbox_cgroup(x.sb)->pids);
  p = wait_ready(&x);
  ASSERT_EQ(sbx_tree_pidfds(p, &fd, 1), 1);
  ASSERT(cg_exists(base, p));
  sbx_finish(&x);
  ASSERT(sbx_all_exit(&fd, 1));
  ASSERT(!cg_exists(base, p));
  return 0;
}

/* SIGKILL of the owner (agentloop, agentloopd) while a launcher waits:
 * the launcher dies with it (PDEATHSIG), leaving its cgroup empty for the
 * sweep of dead owners' cgroups. */
TEST_IMPL(launch_owner_sigkill_leaves_no_process) {
  al_cgroup_state_t st;
  int pfd[2];
  pid_t child;
  int p = 0, fd, status;
  char dir[600], cmd[600];
  struct msg_s {
    int pid;
    char base[200];
  } m;
  struct stat sb;

  ASSERT_EQ(pipe(pfd), 0);
  child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    sbx_t x;

    close(pfd[0]);
    init(&x, SBX_DEGRADED);
    memset(&m, 0, sizeof(m));
    m.pid = wait_ready(&x);
    snprintf(m.base, sizeof(m.base), "%s", x.base);
    (void)!write(pfd[1], &m, sizeof(m));
    for (;;) {
      pause();
    }
  }
  close(pfd[1]);
  if (read(pfd[0], &m, sizeof(m)) != (ssize_t)sizeof(m)) {
    /* The child skipped (no cgroups here) or failed: say which. */
    ASSERT_EQ(waitpid(child, &status, 0), child);
    close(pfd[0]);
    if (WIFEXITED(status) && WEXITSTATUS(status) == AL_TEST_SKIP_CODE) {
      return AL_TEST_SKIP_CODE;
    }
    AL_TEST_FAIL("the owner failed before its launcher was ready");
  }
  close(pfd[0]);
  p = m.pid;
  ASSERT_EQ(sbx_tree_pidfds(p, &fd, 1), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT(sbx_all_exit(&fd, 1));
  /* The probe (and any later sweep) removes a dead owner's cgroups only
   * when empty. */
  al__cgroup_probe(false, &st);
  ASSERT(st.active);
  (void)al__cgroup_sweep(&st);
  snprintf(dir, sizeof(dir), "%s/agentloop-%d-%d", st.pids, (int)child, p);
  ASSERT_NE(stat(dir, &sb), 0);
  /* The fixture's directories of the owner that could not finish. */
  snprintf(cmd, sizeof(cmd), "chmod -R u+rwX '%s' 2>/dev/null; rm -rf '%s'",
           m.base, m.base);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}
