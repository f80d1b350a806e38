/* agentloop-bench-stamp FILE: writes CLOCK_MONOTONIC (ns) at its own
 * entry to FILE. The tool-start benchmark runs it as the bash tool's
 * command: the time from the tool block's stop on the wire to this
 * program's first instruction is the tool start as a user sees it.
 * Linked statically, so its own start-up is only the kernel's exec. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct timespec ts;
  char buf[32];
  int n;
  int fd;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (argc != 2) {
    return 2;
  }
  n = snprintf(buf, sizeof(buf), "%llu\n",
               (unsigned long long)ts.tv_sec * 1000000000ULL +
                   (unsigned long long)ts.tv_nsec);
  fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, buf, (size_t)n) != n) {
    return 1;
  }
  return close(fd) == 0 ? 0 : 1;
}
