/* Where bwrap cannot make its user namespace, the probe's detail names
 * the real cause and what would enable it, not bwrap's guess ("the kernel
 * does not allow non-privileged user namespaces", which it prints in a
 * chroot too). Two such places made here without touching a machine-wide
 * setting: a child user namespace whose user.max_user_namespaces is 0, and
 * a chroot (a plain directory in a private tmpfs, the host's directories
 * bound into it, in a private mount namespace). Both need root. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "test.h"

#define HELPER AL_BINARY_DIR "/agentloop-exec"

static void put(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);

  ASSERT(fd >= 0);
  ASSERT_EQ(write(fd, s, strlen(s)), (ssize_t)strlen(s));
  close(fd);
}

/* In the child: the probe must come out degraded with `want` in its
 * detail and without bwrap's misleading text. Exits 0 or 1. */
static void probe_expect(const char *want) {
  al_sandbox_probe_options_t po;
  al_sandbox_info_t info;

  al_sandbox_probe_options_init(&po);
  po.helper = HELPER;
  ASSERT_EQ(al_sandbox_probe(&po, &info), 0);
  if (info.mode != AL_SANDBOX_MODE_DEGRADED ||
      strstr(info.detail, want) == NULL ||
      strstr(info.detail, "kernel does not allow") != NULL) {
    fprintf(stderr, "mode %s, detail: %s (wanted '%s')\n",
            al_sandbox_mode_name(info.mode), info.detail, want);
    exit(1);
  }
  printf("detail: %s\n", info.detail);
  exit(0);
}

static void wait_ok(pid_t pid) {
  int st;

  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    AL_TEST_FAIL("the child failed (status 0x%x)", st);
  }
}

/* Root, on a host where user namespaces work (elsewhere the cause found is
 * the host's own, and sandbox_probe_* report it). */
static void need_root(void) {
  char why[400];

  if (geteuid() != 0) {
    fprintf(stderr, "not run: making a place without user namespaces needs "
                    "root\n");
    exit(AL_TEST_SKIP_CODE);
  }
  if (al__sandbox_userns_cause(why, sizeof(why)) != 0) {
    if (al_test_ci()) {
      AL_TEST_FAIL("CI=true, but user namespaces do not work here: %s", why);
    }
    fprintf(stderr, "not run: user namespaces already fail here: %s\n", why);
    exit(AL_TEST_SKIP_CODE);
  }
}

TEST_IMPL(sandbox_probe_names_max_user_namespaces) {
  int p[2];
  pid_t pid;
  char c;
  char path[64];

  need_root();
  ASSERT_EQ(pipe(p), 0);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    close(p[1]);
    if (unshare(CLONE_NEWUSER) != 0) {
      _exit(3);
    }
    if (read(p[0], &c, 1) != 1) {
      _exit(4);
    }
    /* Per user namespace: the host's limit does not change. */
    put("/proc/sys/user/max_user_namespaces", "0");
    probe_expect("user.max_user_namespaces=0");
  }
  close(p[0]);
  /* The child unshares before it reads: wait for its namespace. */
  for (;;) {
    char a[64], b[64];
    ssize_t n1, n2;

    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
    n1 = readlink(path, a, sizeof(a));
    n2 = readlink("/proc/self/ns/user", b, sizeof(b));
    ASSERT(n1 > 0 && n2 > 0);
    if (n1 != n2 || memcmp(a, b, (size_t)n1) != 0) {
      break;
    }
    sched_yield();
  }
  /* Every uid maps to itself, so root stays root inside. */
  snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
  put(path, "0 0 4294967295\n");
  snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
  put(path, "0 0 4294967295\n");
  ASSERT_EQ(write(p[1], "x", 1), 1);
  close(p[1]);
  wait_ok(pid);
  return 0;
}

TEST_IMPL(sandbox_probe_names_chroot) {
  pid_t pid;
  char top[] = "/tmp/al-chroot-XXXXXX";

  need_root();
  ASSERT_NOT_NULL(mkdtemp(top));
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    char root[64];
    char p[512];
    char t[512];
    DIR *d;
    struct dirent *e;

    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
      _exit(3);
    }
    ASSERT_EQ(mount("tmpfs", top, "tmpfs", 0, "mode=0755"), 0);
    snprintf(root, sizeof(root), "%s/root", top);
    ASSERT_EQ(mkdir(root, 0755), 0);
    /* The host's top-level directories, bound in (symlinks copied). */
    d = opendir("/");
    ASSERT_NOT_NULL(d);
    while ((e = readdir(d)) != NULL) {
      struct stat st;
      ssize_t n;

      if (e->d_name[0] == '.' || strcmp(e->d_name, "tmp") == 0) {
        continue;
      }
      snprintf(p, sizeof(p), "/%s", e->d_name);
      snprintf(t, sizeof(t), "%s/%s", root, e->d_name);
      if (lstat(p, &st) != 0) {
        continue;
      }
      if (S_ISLNK(st.st_mode)) {
        char l[512];

        n = readlink(p, l, sizeof(l) - 1);
        ASSERT(n > 0);
        l[n] = '\0';
        ASSERT_EQ(symlink(l, t), 0);
      } else if (S_ISDIR(st.st_mode)) {
        ASSERT_EQ(mkdir(t, 0755), 0);
        ASSERT_EQ(mount(p, t, NULL, MS_BIND | MS_REC, NULL), 0);
      }
    }
    closedir(d);
    snprintf(t, sizeof(t), "%s/tmp", root);
    ASSERT_EQ(mkdir(t, 01777), 0);
    if (strncmp(HELPER, "/tmp/", 5) == 0) {
      /* A checkout under /tmp: its helper, bound where it is. */
      char *slash;

      snprintf(t, sizeof(t), "%s%s", root, HELPER);
      for (slash = strchr(t + strlen(root) + 1, '/'); slash != NULL;
           slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        (void)mkdir(t, 0755);
        *slash = '/';
      }
      ASSERT_EQ(close(open(t, O_WRONLY | O_CREAT | O_CLOEXEC, 0755)), 0);
      ASSERT_EQ(mount(HELPER, t, NULL, MS_BIND, NULL), 0);
    }
    ASSERT_EQ(chroot(root), 0);
    ASSERT_EQ(chdir("/"), 0);
    probe_expect("chroot");
  }
  wait_ok(pid);
  ASSERT_EQ(rmdir(top), 0); /* the tmpfs lived in the child's namespace */
  return 0;
}
