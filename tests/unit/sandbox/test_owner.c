/* agentloop-exec --owner PID starts nothing once that agentloop is gone
 * (src/exec/main.c, owner_gone): bwrap's --die-with-parent leaves a
 * window at set-up in which the sandbox's init misses its parent-death
 * signal, and the command then ran on after a SIGKILL of agentloopd with
 * nobody to stop it. The lock it looks for is taken by
 * al__sandbox_owner_lock. */
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

#include "common/common.h"
#include "sandbox/sandbox.h"
#include "test.h"

/* agentloop-exec --owner owner -- touch file; its exit status. */
static int run_touch(long owner, const char *file, char *err, size_t len) {
  char exe[4096], own[32], errf[300];
  char *argv[] = {exe, "--owner", own, "--", "touch", (char *)file, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  posix_spawn_file_actions_t fa;
  pid_t pid;
  int st;
  FILE *f;
  size_t n;

  snprintf(exe, sizeof(exe), "%s/agentloop-exec", AL_BINARY_DIR);
  snprintf(own, sizeof(own), "%ld", owner);
  snprintf(errf, sizeof(errf), "%s.err", file);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  ASSERT_EQ(posix_spawn(&pid, exe, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  f = fopen(errf, "r");
  ASSERT_NOT_NULL(f);
  n = fread(err, 1, len - 1, f);
  err[n] = '\0';
  fclose(f);
  ASSERT_EQ(unlink(errf), 0);
  ASSERT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

TEST_IMPL(exec_owner_gone_starts_nothing) {
  char dir[] = "/var/tmp/al_owner_XXXXXX";
  char file[200], helper[4096], err[512];
  struct stat st;
  pid_t dead;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(file, sizeof(file), "%s/ran", dir);
  /* An agentloop that has exited: a child of ours, reaped. */
  dead = fork();
  ASSERT(dead >= 0);
  if (dead == 0) {
    _exit(0);
  }
  ASSERT_EQ(waitpid(dead, NULL, 0), dead);
  ASSERT_EQ(run_touch(dead, file, err, sizeof(err)), 125);
  ASSERT(stat(file, &st) != 0);
  ASSERT_NOT_NULL(strstr(err, "is gone"));
  /* This process, once it holds the lock (as every agentloop process
   * that makes a sandbox does): the command runs. */
  snprintf(helper, sizeof(helper), "%s/agentloop-exec", AL_BINARY_DIR);
  ASSERT_EQ(al__sandbox_owner_lock(helper), 0);
  ASSERT_EQ(run_touch(getpid(), file, err, sizeof(err)), 0);
  ASSERT_EQ(stat(file, &st), 0);
  ASSERT_EQ(unlink(file), 0);
  /* Another live process that holds no lock is no owner either. */
  ASSERT_EQ(run_touch(getppid(), file, err, sizeof(err)), 125);
  ASSERT(stat(file, &st) != 0);
  ASSERT_EQ(rmdir(dir), 0);
  return 0;
}

/* The case the check cannot see: the owner dies after the command has
 * started but before bwrap's init has armed its parent-death signal. Here
 * bwrap runs without --die-with-parent at all, so only the watcher can end
 * the sandbox: the owner (a child of ours holding its lock) is killed
 * while the command runs, and the sandbox must end at once. */
TEST_IMPL(exec_owner_watcher_ends_sandbox) {
  char dir[] = "/var/tmp/al_ownerw_XXXXXX";
  char helper[4096], own[32], cmd[400], started[300];
  struct stat st;
  struct pollfd pf;
  pid_t owner, bw;
  int go[2];
  int status;
  posix_spawn_file_actions_t fa;

  al_test_need_bwrap();
  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(helper, sizeof(helper), "%s/agentloop-exec", AL_BINARY_DIR);
  snprintf(started, sizeof(started), "%s/started", dir);
  ASSERT_EQ(pipe(go), 0);
  owner = fork();
  ASSERT(owner >= 0);
  if (owner == 0) {
    struct flock fl;
    int fd = open(helper, O_RDONLY | O_CLOEXEC);

    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)getpid();
    fl.l_len = 1;
    if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0) {
      _exit(1);
    }
    close(go[0]);
    (void)!write(go[1], "k", 1); /* locked */
    pause();
    _exit(0);
  }
  close(go[1]);
  {
    char c;

    ASSERT_EQ(read(go[0], &c, 1), 1);
    close(go[0]);
  }
  snprintf(own, sizeof(own), "%ld", (long)owner);
  snprintf(cmd, sizeof(cmd), "touch '%s'; exec sleep 30", started);
  {
    char *argv[] = {"/usr/bin/bwrap", "--unshare-user", "--unshare-pid",
                    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                    "--bind", dir, dir, "--", helper, "--owner", own, "--",
                    "/bin/sh", "-c", cmd, NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    ASSERT_EQ(posix_spawn(&bw, argv[0], &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  while (stat(started, &st) != 0) {
    ASSERT_EQ(waitpid(bw, &status, WNOHANG), 0);
    usleep(2000); /* the sandbox's progress, not a timing assumption */
  }
  ASSERT_EQ(kill(owner, SIGKILL), 0);
  ASSERT_EQ(waitpid(owner, NULL, 0), owner);
  pf.fd = (int)syscall(SYS_pidfd_open, bw, 0);
  pf.events = POLLIN;
  ASSERT(pf.fd >= 0);
  if (poll(&pf, 1, 3000 * al_test_timeout_multiplier()) != 1) {
    kill(bw, SIGKILL);
    waitpid(bw, NULL, 0);
    AL_TEST_FAIL("the sandbox ran on after its owner was gone");
  }
  close(pf.fd);
  ASSERT_EQ(waitpid(bw, &status, 0), bw);
  ASSERT_EQ(unlink(started), 0);
  ASSERT_EQ(rmdir(dir), 0);
  return 0;
}

/* A process forked after the lock was taken (an embedder that forks its
 * workers) takes a lock for its own pid when it makes a sandbox, and its
 * parent's stays. */
TEST_IMPL(exec_owner_lock_after_fork) {
  char dir[] = "/var/tmp/al_ownerf_XXXXXX";
  char file[200], helper[4096], err[512];
  pid_t child;
  int st;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(file, sizeof(file), "%s/ran", dir);
  snprintf(helper, sizeof(helper), "%s/agentloop-exec", AL_BINARY_DIR);
  ASSERT_EQ(al__sandbox_owner_lock(helper), 0);
  child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    char f2[220];

    snprintf(f2, sizeof(f2), "%s.child", file);
    if (al__sandbox_owner_lock(helper) != 0 ||
        run_touch(getpid(), f2, err, sizeof(err)) != 0) {
      _exit(1);
    }
    _exit(0);
  }
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* The child is gone, and so is its lock; ours stands. */
  ASSERT_EQ(run_touch(child, file, err, sizeof(err)), 125);
  ASSERT_EQ(run_touch(getpid(), file, err, sizeof(err)), 0);
  ASSERT_EQ(unlink(file), 0);
  snprintf(file, sizeof(file), "%s/ran.child", dir);
  ASSERT_EQ(unlink(file), 0);
  ASSERT_EQ(rmdir(dir), 0);
  return 0;
}
