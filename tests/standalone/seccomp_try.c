/* In the sandbox: tries one refused call and prints "NAME errno=N" (0
 * when it went through). A program of its own, built without sanitizers:
 * an ASan build (al_tests itself) cannot start under the sandbox's
 * address-space limit (its shadow memory is a reservation of terabytes),
 * so the seccomp tests would not run in CI's sanitizer stage. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int e = 0;

  if (argc < 2) {
    return 2;
  }
  if (strcmp(argv[1], "tiocsti") == 0) {
    char c = 'x';

    /* On /dev/null the kernel would say ENOTTY: the filter runs first
     * and says EPERM. */
    e = ioctl(0, TIOCSTI, &c) == 0 ? 0 : errno;
  } else if (strcmp(argv[1], "newuser") == 0) {
    long pid = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD),
                       NULL, NULL, NULL, NULL);

    if (pid == 0) {
      _exit(0);
    }
    if (pid > 0) {
      (void)waitpid((pid_t)pid, NULL, 0);
    }
    e = pid >= 0 ? 0 : errno;
  } else {
    return 2;
  }
  printf("%s errno=%d\n", argv[1], e);
  return 0;
}

