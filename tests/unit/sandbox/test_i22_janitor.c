/* The janitor of a process that is gone before the janitor starts (a short
 * process: its first sandbox made, then exit) must still end: it took
 * getppid() for its owner, which by then was init (or a subreaper), and
 * waited for that process's exit for ever. 69 such janitors were seen left
 * on one machine after a few suite runs. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

TEST_IMPL(janitor_of_a_process_already_gone_ends) {
  char helper[4096], dir[] = "/tmp/al-jan-XXXXXX";
  int pidpipe[2], gate[2], sv[2];
  pid_t a, b = 0;
  int st, pfd, rc;
  struct pollfd p;

  al_test_timeout_s(20); /* the wait below says why it failed first */
  snprintf(helper, sizeof(helper), "%s/agentloop-exec", AL_BINARY_DIR);
  ASSERT_NOT_NULL(mkdtemp(dir));
  /* B, the janitor, is handed to us when A exits, as it would be to init. */
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  ASSERT_EQ(pipe(pidpipe), 0);
  ASSERT_EQ(pipe(gate), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  a = fork();
  ASSERT(a >= 0);
  if (a == 0) {
    char parent[24];

    snprintf(parent, sizeof(parent), "%ld", (long)getpid());
    b = fork();
    if (b == 0) {
      char c;
      char *argv[] = {helper, "--janitor", dir, "--parent", parent, NULL};
      char *envp[] = {NULL};

      /* Start only once A is gone: the gate's write end dies with A. */
      close(gate[1]);
      close(pidpipe[0]);
      close(pidpipe[1]);
      while (read(gate[0], &c, 1) < 0 && errno == EINTR) {
      }
      dup2(sv[1], 0);
      close(sv[0]);
      close(sv[1]);
      execve(helper, argv, envp);
      _exit(127);
    }
    if (write(pidpipe[1], &b, sizeof(b)) != (ssize_t)sizeof(b)) {
      _exit(1);
    }
    _exit(0);
  }
  close(gate[0]);
  close(gate[1]);
  close(pidpipe[1]);
  close(sv[1]);
  ASSERT_EQ(read(pidpipe[0], &b, sizeof(b)), (ssize_t)sizeof(b));
  close(pidpipe[0]);
  ASSERT_EQ(waitpid(a, &st, 0), a);
  /* Nothing to tell it: EOF at once. */
  close(sv[0]);
  pfd = (int)syscall(SYS_pidfd_open, b, 0);
  ASSERT(pfd >= 0);
  p.fd = pfd;
  p.events = POLLIN;
  p.revents = 0;
  do {
    rc = poll(&p, 1, 10000 * al_test_timeout_multiplier());
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    kill(b, SIGKILL);
    waitpid(b, &st, 0);
    rmdir(dir);
    AL_TEST_FAIL("the janitor of an exited process did not end");
  }
  ASSERT_EQ(waitpid(b, &st, 0), b);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  close(pfd);
  rmdir(dir);
  return 0;
}
