/* A real small filesystem for a test: see smallfs.h. */
#include "smallfs.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "test.h"

static bool g_private; /* this process has its own mount namespace */

static bool write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  bool ok;

  if (fd < 0) {
    return false;
  }
  ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

static bool enter_private(char *why, size_t why_len) {
  uid_t uid = geteuid();
  gid_t gid = getegid();
  char map[64];

  if (g_private) {
    return true;
  }
  if (uid == 0) {
    if (unshare(CLONE_NEWNS) != 0) {
      snprintf(why, why_len, "unshare(CLONE_NEWNS) as root: %s",
               strerror(errno));
      return false;
    }
  } else {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      snprintf(why, why_len, "not root, and no user namespace for a "
               "private mount: %s", strerror(errno));
      return false;
    }
    snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
    (void)write_file("/proc/self/setgroups", "deny");
    if (!write_file("/proc/self/uid_map", map)) {
      snprintf(why, why_len, "uid_map: %s", strerror(errno));
      return false;
    }
    snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
    if (!write_file("/proc/self/gid_map", map)) {
      snprintf(why, why_len, "gid_map: %s", strerror(errno));
      return false;
    }
  }
  /* Nothing mounted here propagates to the rest of the machine. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    snprintf(why, why_len, "making / private: %s", strerror(errno));
    return false;
  }
  g_private = true;
  return true;
}

bool al_test_smallfs(const char *dir, const char *size, char *why,
                     size_t why_len) {
  char opts[64];

  if (!enter_private(why, why_len)) {
    return false;
  }
  snprintf(opts, sizeof(opts), "size=%s,mode=0700", size);
  if (mount("al-smallfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
    snprintf(why, why_len, "mount tmpfs on %s: %s", dir, strerror(errno));
    return false;
  }
  return true;
}

bool al_test_smallfs_readonly(const char *dir, char *why, size_t why_len) {
  if (mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
            NULL) != 0) {
    snprintf(why, why_len, "remount %s read-only: %s", dir, strerror(errno));
    return false;
  }
  return true;
}

void al_test_smallfs_fill(const char *dir) {
  char path[512];
  char block[4096];
  int fd;

  snprintf(path, sizeof(path), "%s/fill", dir);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT(fd >= 0);
  memset(block, 'x', sizeof(block));
  for (;;) {
    ssize_t n = write(fd, block, sizeof(block));

    if (n < 0) {
      ASSERT_EQ(errno, ENOSPC);
      break;
    }
    if (n < (ssize_t)sizeof(block)) {
      continue; /* the last partial block: the next write says ENOSPC */
    }
  }
  close(fd);
}
