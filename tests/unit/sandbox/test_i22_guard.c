/* Issue 22, point 14: sandbox rules that no test guarded. Each test goes
 * red when its rule is broken on purpose:
 *  - seccomp refuses ioctl(TIOCSTI) (typing into the terminal) and
 *    clone(CLONE_NEWUSER) with EPERM, in bwrap and in degraded mode;
 *  - bwrap's --die-with-parent on its own ends a tool whose agentloop is
 *    SIGKILLed (the helper's owner check and watcher, and the janitor's
 *    kill by owner, turned off through the test seam test_no_owner). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <uv.h>

#include "test.h"
#include "unit/sandbox/sbx.h"

static void try_in(sbx_mode_t mode, const char *what) {
  sbx_t x;
  sbx_run_t w;
  char cmd[4400], want[64];

  char prog[4200];
  char *bytes;
  size_t len;
  FILE *f;

  sbx_no_pool = true; /* the same filter warm or cold; cold is simpler */
  sbx_init(&x, mode);
  /* Run from the workspace: a build under /tmp is hidden by the sandbox's
   * private /tmp (a checkout there, as CI's may be). */
  bytes = al_test_read_file(AL_SECCOMP_TRY, &len);
  ASSERT_NOT_NULL(bytes);
  snprintf(prog, sizeof(prog), "%s/seccomp_try", x.ws);
  f = fopen(prog, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(bytes, 1, len, f), len);
  ASSERT_EQ(fclose(f), 0);
  free(bytes);
  ASSERT_EQ(chmod(prog, 0755), 0);
  snprintf(cmd, sizeof(cmd), "'%s' %s", prog, what);
  (void)sbx_run_start(&x, cmd, &w, 0);
  sbx_run_wait(&x, &w);
  snprintf(want, sizeof(want), "%s errno=%d\n", what, EPERM);
  if (strstr(w.out, want) == NULL) {
    AL_TEST_FAIL("[%s] wanted '%s', got: %s",
                 mode == SBX_BWRAP ? "bwrap" : "degraded", want, w.out);
  }
  sbx_finish(&x);
}

TEST_IMPL(seccomp_refuses_tiocsti) {
  try_in(SBX_DEGRADED, "tiocsti");
  try_in(SBX_BWRAP, "tiocsti");
  return 0;
}

TEST_IMPL(seccomp_refuses_clone_newuser) {
  try_in(SBX_DEGRADED, "newuser");
  try_in(SBX_BWRAP, "newuser");
  return 0;
}

/* ---- --die-with-parent alone ----------------------------------------------
 */

/* Pids of live processes whose command line holds mark. */
static int pids_with(const char *mark, pid_t *out, int max) {
  char p[300], buf[4096];
  struct dirent *e;
  int n = 0;
  DIR *d = opendir("/proc");

  ASSERT_NOT_NULL(d);
  while ((e = readdir(d)) != NULL && n < max) {
    size_t len, i;
    FILE *f;

    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    snprintf(p, sizeof(p), "/proc/%s/cmdline", e->d_name);
    if ((f = fopen(p, "r")) == NULL) {
      continue;
    }
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i < len; i++) {
      buf[i] = buf[i] == '\0' ? ' ' : buf[i];
    }
    buf[len] = '\0';
    if (strstr(buf, mark) != NULL) {
      out[n++] = (pid_t)atoi(e->d_name);
    }
  }
  closedir(d);
  return n;
}

static void on_tick(uv_timer_t *t) {
  uv_stop(t->loop);
}

TEST_IMPL(sandbox_die_with_parent_alone) {
  char mark[64], base[300], started[400];
  int ready[2];
  pid_t agent;
  pid_t left[16];
  int n = 0;
  uint64_t deadline;

  al_test_need_bwrap();
  snprintf(mark, sizeof(mark), "ALDWP%d", (int)getpid());
  ASSERT_EQ(pipe(ready), 0);
  agent = fork();
  ASSERT(agent >= 0);
  if (agent == 0) {
    /* The agent: a sandbox whose helpers name no owner, a cold start
     * without a launcher (no tool cgroup), so bwrap is our child and
     * nothing but its --die-with-parent ties the tool to us. */
    sbx_t x;
    sbx_run_t w;
    uv_timer_t t;
    char cmd[200];

    close(ready[0]);
    sbx_no_pool = true;
    sbx_no_cgroup = true;
    sbx_no_owner = true;
    sbx_init(&x, SBX_BWRAP);
    snprintf(started, sizeof(started), "%s/started", x.ws);
    snprintf(cmd, sizeof(cmd), ": > started; sleep 1000; echo %s", mark);
    (void)sbx_run_start(&x, cmd, &w, 0);
    uv_timer_init(&x.loop, &t);
    uv_timer_start(&t, on_tick, 5, 5);
    while (access(started, F_OK) != 0 && !w.done) {
      uv_run(&x.loop, UV_RUN_DEFAULT);
    }
    (void)!write(ready[1], x.base, strlen(x.base) + 1);
    for (;;) {
      pause();
    }
  }
  close(ready[1]);
  memset(base, 0, sizeof(base));
  ASSERT(read(ready[0], base, sizeof(base) - 1) > 0);
  close(ready[0]);
  ASSERT(base[0] == '/');
  ASSERT(pids_with(mark, left, 16) > 0);
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_EQ(waitpid(agent, NULL, 0), agent);
  /* The sandbox's progress, not a timing assumption: bwrap's init gets
   * its parent-death signal at once; 2 s (scaled) is far past it, and
   * leaves the test time to say so within its own limit. */
  deadline = uv_hrtime() + (uint64_t)2000000000 * al_test_timeout_multiplier();
  while ((n = pids_with(mark, left, 16)) > 0 && uv_hrtime() < deadline) {
    usleep(5000);
  }
  if (n > 0) {
    int i;

    for (i = 0; i < n; i++) {
      kill(left[i], SIGKILL);
    }
  }
  {
    char cmd[400];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    (void)!system(cmd);
  }
  if (n > 0) {
    AL_TEST_FAIL(
        "the tool ran on after its agentloop was SIGKILLed (%d "
        "processes): --die-with-parent did not end it",
        n);
  }
  return 0;
}
