/* Why bwrap cannot make its user namespace here, in words that name the
 * real cause and what would enable it (bwrap's own message blames the
 * kernel setting even in a chroot, where the kernel allows user namespaces
 * and refuses them only to a chrooted process).
 *
 * Blocking (one fork): called from the probe, which runs before a loop
 * does. The child only tries unshare(CLONE_NEWUSER) and reports errno. */

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

/* The errno of unshare(CLONE_NEWUSER) in a child, 0 when it worked, -1
 * when the child could not be run. */
static int try_userns(void) {
  pid_t pid;
  int st;

  pid = fork();
  if (pid < 0) {
    return -1;
  }
  if (pid == 0) {
    _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : (errno & 0x7f));
  }
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) {
      return -1;
    }
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* First line of a /proc file as a long, or -1 when it does not exist. */
static long read_long(const char *path) {
  FILE *f = fopen(path, "re");
  long v = -1;

  if (f != NULL) {
    if (fscanf(f, "%ld", &v) != 1) {
      v = -1;
    }
    fclose(f);
  }
  return v;
}

/* True when this process's root is not the root of its mount namespace:
 * / is not a mount point of our own mount table (a plain chroot
 * directory), or, where PID 1 shares our mount namespace and is readable,
 * its root is another directory. */
static bool in_chroot(void) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char line[4096];
  bool root_mounted = false;
  struct stat a, b;
  char n1[64], n2[64];
  ssize_t l1, l2;

  if (f == NULL) {
    /* No /proc at all: a bare chroot is the usual reason. */
    return true;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    char mnt[1024];

    /* id parent major:minor root mountpoint ... */
    if (sscanf(line, "%*s %*s %*s %*s %1023s", mnt) == 1 &&
        strcmp(mnt, "/") == 0) {
      root_mounted = true;
      break;
    }
  }
  fclose(f);
  if (!root_mounted) {
    return true;
  }
  l1 = readlink("/proc/1/ns/mnt", n1, sizeof(n1));
  l2 = readlink("/proc/self/ns/mnt", n2, sizeof(n2));
  if (l1 > 0 && l1 == l2 && memcmp(n1, n2, (size_t)l1) == 0 &&
      stat("/proc/1/root/", &a) == 0 && stat("/", &b) == 0) {
    return a.st_dev != b.st_dev || a.st_ino != b.st_ino;
  }
  return false;
}

static bool seccomp_filtered(void) {
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  int mode = 0;

  if (f == NULL) {
    return false;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "Seccomp: %d", &mode) == 1) {
      break;
    }
  }
  fclose(f);
  return mode == 2;
}

int al__sandbox_userns_cause(char *buf, size_t len) {
  int e = try_userns();

  buf[0] = '\0';
  if (e == 0) {
    return 0;
  }
  if (e < 0) {
    snprintf(buf, len, "could not test user namespaces (fork failed)");
    return -1;
  }
  if (e == ENOSPC) {
    snprintf(buf, len,
             "user namespaces are disabled by the kernel setting "
             "user.max_user_namespaces=0 (in this user namespace); enable "
             "with: sysctl -w user.max_user_namespaces=15000");
  } else if (e == EPERM && in_chroot()) {
    snprintf(buf, len,
             "this process runs in a chroot, where the kernel refuses new "
             "user namespaces (the kernel setting is not the cause); run "
             "outside the chroot, e.g. in a container with its own mount "
             "namespace");
  } else if (e == EPERM && geteuid() != 0 &&
             read_long("/proc/sys/kernel/unprivileged_userns_clone") == 0) {
    snprintf(buf, len,
             "unprivileged user namespaces are disabled by the kernel "
             "setting kernel.unprivileged_userns_clone=0; enable with: "
             "sysctl -w kernel.unprivileged_userns_clone=1");
  } else if (e == EPERM && seccomp_filtered()) {
    snprintf(buf, len,
             "a seccomp filter on this process (a container runtime's "
             "profile) refuses unshare(CLONE_NEWUSER); allow it in the "
             "container's seccomp profile");
  } else if (e == EPERM && geteuid() == 0) {
    /* root is refused only in a chroot or by a security module. */
    snprintf(buf, len,
             "the kernel refuses root a user namespace here: a chroot (one "
             "whose root is itself a mount point) or a security module; run "
             "outside the chroot, or allow user namespaces in the policy");
  } else {
    snprintf(buf, len, "unshare(CLONE_NEWUSER) failed: %s", strerror(e));
  }
  return 1;
}

/* Ubuntu's AppArmor restriction lets the namespace be made and takes the
 * capabilities away inside it, so unshare succeeds and bwrap fails later:
 * named from the setting when it is on. */
int al__sandbox_userns_restricted(char *buf, size_t len) {
  if (read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") ==
          1 &&
      geteuid() != 0) {
    snprintf(buf, len,
             "AppArmor restricts unprivileged user namespaces "
             "(kernel.apparmor_restrict_unprivileged_userns=1); enable with "
             "an AppArmor profile that allows userns for bwrap, or sysctl -w "
             "kernel.apparmor_restrict_unprivileged_userns=0");
    return 1;
  }
  buf[0] = '\0';
  return 0;
}
