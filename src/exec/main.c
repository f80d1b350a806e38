/* agentloop-exec: the inner half of the tool sandbox (RELIABILITY.md §4).
 *
 *   agentloop-exec [OPTIONS] -- COMMAND [ARGS...]
 *
 * It confines itself, then execs COMMAND (looked up in its PATH). uv_spawn
 * and posix_spawn have no pre-exec hook, so these steps need a program of
 * their own. Order matters: rlimits and capabilities first, Landlock and
 * NO_NEW_PRIVS next, the seccomp filter last (it forbids what the earlier
 * steps use).
 *
 *   --cpu S --as BYTES --data BYTES --fsize BYTES --nofile N --nproc N
 *                       rlimits
 *                       (CORE is always 0)
 *   --write PATH        a Landlock writable root (repeatable); with none,
 *                       Landlock is not used
 *   --landlock-abi N    use at most ABI N (0: skip Landlock)
 *   --require-landlock  fail (exit 125) unless Landlock is enforced
 *   --no-network        seccomp: socket() for inet, inet6, unix, netlink
 *                       and packet fails; Landlock ABI >= 4: TCP
 *                       bind/connect denied
 *   --tmpdir PATH       TMPDIR for the command, and a writable root (the
 *                       degraded mode's private temporary directory)
 *   --supervise         stay as the parent: subreaper, forward TERM/INT,
 *                       and SIGKILL every remaining descendant once COMMAND
 *                       exits (the degraded mode has no PID namespace)
 *   --cgroup DIR ...    (first) join a fresh cgroup with limits, then
 *                       exec the command unconfined (cgroup_join.c); with
 *                       --launch instead of "-- COMMAND", wait for the
 *                       command on stdin as --warm does (no mounts) and
 *                       exec it: a launcher joined ahead of its command
 *   --probe             print "landlock=N seccomp=0|1" and exit 0
 *   --janitor [DIR] [--parent PID]
 *                       (alone) read "+PATH" / "-PATH" lines on stdin:
 *                       the placeholders agentloop has made in a
 *                       workspace and removed again. At EOF, once the
 *                       parent has exited, remove those still there (an
 *                       empty directory or empty file only, and only if
 *                       no other agent's sandbox has it mounted): a
 *                       SIGKILLed agentloop leaves the workspace as its
 *                       tools did. DIR: the placeholder registry shared
 *                       by all agents (src/sandbox/phreg.h); first, what
 *                       agents killed with their janitor left is swept.
 *                       "cDIR" lines name where its tool cgroups are
 *                       made: those of the parent still there go too.
 *   --warm              (instead of "-- COMMAND") confine as above, then
 *                       wait for the command on stdin: a 4-byte
 *                       little-endian length, then NUL-terminated strings:
 *                       the working directory, the environment entries,
 *                       an empty string, the argv. stdin becomes
 *                       the fd passed along the message (SCM_RIGHTS,
 *                       the command's stdin pipe) or /dev/null, then
 *                       chdir and exec. The sandbox set-up
 *                       is paid before the command exists (the warm pool,
 *                       src/sandbox/pool.h); one command per process.
 *
 * Exit codes: COMMAND's, 125 when the helper itself failed (message on
 * stderr, prefixed "agentloop-exec:"), 127 when COMMAND was not found. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <malloc.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/cgroup_join.h"
#include "sandbox/phreg.h"

/* linux-libc-dev 6.1 stops at ABI 2; newer rights are defined here. */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#define LL_NET_BIND_TCP (1ULL << 0)
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)

#define MAX_WRITE 64

/* The newest ruleset layout; the size passed tells the kernel which
 * fields we use. */
struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

typedef struct opts_s {
  rlim_t cpu, as, data, fsize, nofile, nproc;
  const char *write[MAX_WRITE];
  int n_write;
  int abi_cap;
  bool require_landlock;
  bool no_network;
  bool supervise;
  bool probe;
  bool warm;
  const char *tmpdir;
  long owner; /* --owner: the agentloop process whose tool this is */
} opts_t;

static void die(const char *what, int err) {
  fprintf(stderr, "agentloop-exec: %s: %s\n", what, strerror(err));
  exit(125);
}

static int landlock_abi(void) {
  long v = syscall(SYS_landlock_create_ruleset, NULL, 0,
                   LANDLOCK_CREATE_RULESET_VERSION);

  return v < 0 ? 0 : (int)v;
}

static void set_limit(int res, rlim_t v) {
  struct rlimit rl;

  if (v == 0) {
    return;
  }
  rl.rlim_cur = rl.rlim_max = v;
  if (setrlimit(res, &rl) != 0) {
    die("setrlimit", errno);
  }
}

/* Root in degraded mode would keep every capability: drop them all, from
 * the bounding set too, so exec cannot bring them back. */
static void drop_bounding(void) {
  int c;

  for (c = 0; c <= 63; c++) {
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) {
      break; /* EPERM: we had no CAP_SETPCAP, so nothing to drop */
    }
  }
  (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

/* The effective, permitted and inheritable sets (the bounding set must go
 * first: drop_bounding). */
static void drop_sets(void) {
  struct __user_cap_header_struct hdr;
  struct __user_cap_data_struct data[2];

  memset(&hdr, 0, sizeof(hdr));
  memset(data, 0, sizeof(data));
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  if (syscall(SYS_capset, &hdr, data) != 0) {
    die("capset", errno);
  }
}

static void drop_caps(void) {
  drop_bounding();
  drop_sets();
}

/* Builds the ruleset: the ABI in use (0: Landlock not used, *rs_out -1)
 * or -errno; *rs_out is the ruleset fd for landlock_restrict. */
static int landlock_prepare(const opts_t *o, int *rs_out) {
  struct ll_ruleset_attr attr;
  struct landlock_path_beneath_attr pb;
  static const char *const devs[] = {"/dev/null", "/dev/zero", "/dev/full",
                                     "/dev/tty", NULL};
  uint64_t fs_write;
  size_t attr_size;
  int abi = landlock_abi();
  int rs;
  int i;

  if (o->abi_cap >= 0 && abi > o->abi_cap) {
    abi = o->abi_cap;
  }
  *rs_out = -1;
  if (abi <= 0 || o->n_write == 0) {
    return 0;
  }
  /* Only writes are handled: reading stays as the outer layer left it. */
  fs_write = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
             LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
             LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
             LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
             LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) {
    fs_write |= LANDLOCK_ACCESS_FS_REFER;
  }
  if (abi >= 3) {
    fs_write |= LANDLOCK_ACCESS_FS_TRUNCATE;
  }
  memset(&attr, 0, sizeof(attr));
  attr.handled_access_fs = fs_write;
  attr_size = sizeof(attr.handled_access_fs);
  if (abi >= 4) {
    attr_size = offsetof(struct ll_ruleset_attr, scoped);
    if (o->no_network) {
      attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
    }
  }
  if (abi >= 6) {
    /* No signals to processes outside this domain (kill -9 -1), no
     * abstract unix sockets outside it. */
    attr_size = sizeof(attr);
    attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
  }
  rs = (int)syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0);
  if (rs < 0) {
    return -errno;
  }
  for (i = 0; i < o->n_write; i++) {
    pb.allowed_access = fs_write;
    pb.parent_fd = open(o->write[i], O_PATH | O_CLOEXEC);
    if (pb.parent_fd < 0) {
      continue; /* a root that does not exist cannot be written anyway */
    }
    if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb,
                0) != 0) {
      close(pb.parent_fd);
      close(rs);
      return -errno;
    }
    close(pb.parent_fd);
  }
  for (i = 0; devs[i] != NULL; i++) {
    pb.allowed_access = LANDLOCK_ACCESS_FS_WRITE_FILE |
                        (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
    pb.parent_fd = open(devs[i], O_PATH | O_CLOEXEC);
    if (pb.parent_fd >= 0) {
      (void)syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH,
                    &pb, 0);
      close(pb.parent_fd);
    }
  }
  *rs_out = rs;
  return abi;
}

static int landlock_restrict(int rs) {
  int rc = 0;

  if (rs < 0) {
    return 0;
  }
  if (syscall(SYS_landlock_restrict_self, rs, 0) != 0) {
    rc = -errno;
  }
  close(rs);
  return rc;
}

static int apply_landlock(const opts_t *o) {
  int rs;
  int abi = landlock_prepare(o, &rs);
  int rc;

  if (abi <= 0) {
    return abi;
  }
  rc = landlock_restrict(rs);
  return rc < 0 ? rc : abi;
}

static scmp_filter_ctx seccomp_build(const opts_t *o) {
  /* Syscalls a tool never needs and an attacker would love. */
  static const int deny[] = {
      SCMP_SYS(ptrace),           SCMP_SYS(process_vm_readv),
      SCMP_SYS(process_vm_writev), SCMP_SYS(bpf),
      SCMP_SYS(perf_event_open),  SCMP_SYS(userfaultfd),
      SCMP_SYS(keyctl),           SCMP_SYS(add_key),
      SCMP_SYS(request_key),      SCMP_SYS(io_uring_setup),
      SCMP_SYS(io_uring_enter),   SCMP_SYS(io_uring_register),
      SCMP_SYS(mount),            SCMP_SYS(umount2),
      SCMP_SYS(pivot_root),       SCMP_SYS(chroot),
      SCMP_SYS(unshare),          SCMP_SYS(setns),
      SCMP_SYS(kexec_load),       SCMP_SYS(kexec_file_load),
      SCMP_SYS(init_module),      SCMP_SYS(finit_module),
      SCMP_SYS(delete_module),    SCMP_SYS(swapon),
      SCMP_SYS(swapoff),          SCMP_SYS(reboot),
      SCMP_SYS(acct),             SCMP_SYS(open_by_handle_at),
      SCMP_SYS(name_to_handle_at), SCMP_SYS(fsopen),
      SCMP_SYS(fsmount),          SCMP_SYS(move_mount),
      SCMP_SYS(open_tree),        SCMP_SYS(fspick),
      SCMP_SYS(kcmp),             SCMP_SYS(pidfd_getfd),
  };
  static const int families[] = {AF_INET, AF_INET6, AF_UNIX, AF_NETLINK,
                                 AF_PACKET};
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  size_t i;
  int rc = 0;

  if (ctx == NULL) {
    return NULL;
  }
  /* A binary tree instead of a list: the kernel runs the filter once per
   * syscall number when it loads it (to cache the ones always allowed),
   * so a shorter path is a faster load as well as a faster syscall. Not
   * fatal where this libseccomp lacks it. */
  (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  for (i = 0; i < sizeof(deny) / sizeof(deny[0]) && rc == 0; i++) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), deny[i], 0);
  }
  /* A tool must not create user namespaces (clone3 hides its flags from
   * the filter, so it reports ENOSYS and libc falls back to clone). */
  if (rc == 0) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  }
  if (rc == 0) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                  CLONE_NEWUSER));
  }
  /* Typing into the controlling terminal. */
  if (rc == 0) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                          SCMP_A1(SCMP_CMP_EQ, TIOCSTI));
  }
  for (i = 0; o->no_network && rc == 0 &&
              i < sizeof(families) / sizeof(families[0]);
       i++) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                          SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i]));
  }
  if (rc != 0) {
    seccomp_release(ctx);
    return NULL;
  }
  return ctx;
}

static int apply_seccomp(const opts_t *o) {
  scmp_filter_ctx ctx = seccomp_build(o);
  int rc;

  if (ctx == NULL) {
    return -EINVAL;
  }
  rc = seccomp_load(ctx);
  seccomp_release(ctx);
  return rc;
}

/* The filter compiled now, loaded later with one prctl (the warm path:
 * libseccomp's compilation is the slow part). 0 or -errno. */
static int seccomp_prepare(const opts_t *o, struct sock_fprog *prog) {
  scmp_filter_ctx ctx = seccomp_build(o);
  int fds[2];
  char *buf = NULL;
  size_t used = 0, cap = 0;
  ssize_t r;
  int rc;

  if (ctx == NULL) {
    return -EINVAL;
  }
  if (pipe2(fds, O_CLOEXEC) != 0) {
    rc = -errno;
    seccomp_release(ctx);
    return rc;
  }
  /* A filter of a few hundred instructions fits the pipe's buffer. */
  rc = seccomp_export_bpf(ctx, fds[1]);
  close(fds[1]);
  seccomp_release(ctx);
  while (rc == 0) {
    if (used == cap) {
      char *nb = realloc(buf, cap ? cap * 2 : 4096);

      if (nb == NULL) {
        rc = -ENOMEM;
        break;
      }
      buf = nb;
      cap = cap ? cap * 2 : 4096;
    }
    r = read(fds[0], buf + used, cap - used);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      rc = r < 0 ? -errno : 0;
      break;
    }
    used += (size_t)r;
  }
  close(fds[0]);
  if (rc != 0 || used == 0 || used % sizeof(struct sock_filter) != 0) {
    free(buf);
    return rc != 0 ? rc : -EINVAL;
  }
  prog->len = (unsigned short)(used / sizeof(struct sock_filter));
  prog->filter = (struct sock_filter *)buf;
  return 0;
}

/* ---- supervise (degraded mode) ------------------------------------------- */

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

/* SIGKILLs every child we have (reparented orphans included) and reaps
 * them; their own children then become ours, so repeat until none. */
static void sweep(void) {
  char path[64];
  int round;

  snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
  for (round = 0; round < 10000; round++) {
    FILE *f = fopen(path, "re");
    long pid;
    int n = 0;

    if (f != NULL) {
      while (fscanf(f, "%ld", &pid) == 1) {
        (void)kill((pid_t)pid, SIGKILL);
        n++;
      }
      fclose(f);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {
      n++;
    }
    if (n == 0) {
      if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD) {
        return;
      }
    }
  }
}

static int supervise(pid_t child) {
  int status = 0;
  pid_t w;

  for (;;) {
    w = waitpid(child, &status, 0);
    if (w == child) {
      break;
    }
    if (w < 0 && errno == EINTR && got_signal != 0) {
      /* Cancelled or timed out: the command and everything it started
       * go now (the sweep below finds the ones that left the group). */
      (void)kill(child, SIGKILL);
      got_signal = 0;
      continue;
    }
    if (w < 0 && errno != EINTR) {
      break;
    }
  }
  sweep();
  if (WIFSIGNALED(status)) {
    return 128 + WTERMSIG(status);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 125;
}

/* ---- warm: the command arrives on stdin ---------------------------------- */

#define WARM_MAX (4u << 20)

static bool read_full(int fd, void *buf, size_t n) {
  char *p = buf;

  while (n > 0) {
    ssize_t r = read(fd, p, n);

    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      return false;
    }
    p += r;
    n -= (size_t)r;
  }
  return true;
}

/* The first bytes of the message, and the fd passed along it (the
 * command's stdin; -1 when none came). */
static bool recv_head(int fd, unsigned char *buf, size_t n, int *in_fd) {
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = {buf, n};
  struct msghdr mh;
  struct cmsghdr *c;
  ssize_t r;

  *in_fd = -1;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof(u.buf);
  do {
    r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && errno == ENOTSOCK) {
    return read_full(fd, buf, n); /* a plain pipe: no fd can come */
  }
  if (r <= 0) {
    return false;
  }
  for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      size_t k, nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

      for (k = 0; k < nfd; k++) {
        int got;

        memcpy(&got, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
        if (*in_fd < 0) {
          *in_fd = got;
        } else {
          close(got); /* only one is expected */
        }
      }
    }
  }
  return read_full(fd, buf + r, n - (size_t)r);
}

/* Fills *cwd, *env, *ops and *argv (pointers into one buffer, never
 * freed: we exec or exit). Exits 125 on a short or malformed message; a
 * parent that closes without a message (the pool retiring us) exits 0
 * quietly. */
static void warm_receive(char **cwd, char ***env, char ***ops, char ***argv) {
  unsigned char hdr[4];
  uint32_t len;
  char *buf, *p, *end;
  size_t n_str = 0, i = 0, k, m;
  char **strs;
  int devnull;
  int in_fd;

  /* Confined and waiting: tell the pool (which then knows the mounts are
   * in place). A plain pipe on stdin cannot carry it back; that is fine. */
  devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) {
    die("/dev/null", errno);
  }
  (void)!write(0, "R", 1);
  if (!recv_head(0, hdr, sizeof(hdr), &in_fd)) {
    exit(0);
  }
  len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
        (uint32_t)hdr[3] << 24;
  if (len == 0 || len > WARM_MAX) {
    fprintf(stderr, "agentloop-exec: bad warm message length %u\n", len);
    exit(125);
  }
  buf = malloc(len);
  if (buf == NULL || !read_full(0, buf, len) || buf[len - 1] != '\0') {
    fprintf(stderr, "agentloop-exec: short warm message\n");
    exit(125);
  }
  end = buf + len;
  for (p = buf; p < end; p += strlen(p) + 1) {
    n_str++;
  }
  strs = calloc(n_str + 2, sizeof(*strs));
  if (strs == NULL) {
    die("calloc", ENOMEM);
  }
  for (p = buf; p < end; p += strlen(p) + 1) {
    strs[i++] = p;
  }
  /* cwd, env..., "", ops..., "", argv...: each empty separator becomes
   * the NULL that ends the list before it. */
  *cwd = strs[0];
  for (k = 1; k < n_str && strs[k][0] != '\0'; k++) {
  }
  for (m = k + 1; m < n_str && strs[m][0] != '\0'; m++) {
  }
  if (m + 1 >= n_str) {
    fprintf(stderr, "agentloop-exec: warm message without a command\n");
    exit(125);
  }
  strs[k] = NULL;
  strs[m] = NULL;
  *env = strs + 1;
  *ops = strs + k + 1;
  *argv = strs + m + 1;
  strs[n_str] = NULL;
  /* The command's stdin: the pipe passed along, else /dev/null. */
  if (dup2(in_fd >= 0 ? in_fd : devnull, 0) != 0) {
    die("stdin", errno);
  }
  close(devnull);
  if (in_fd >= 0) {
    close(in_fd);
  }
}

/* The mount flags a read-only remount of a bind of `path` must keep (the
 * kernel refuses to clear the locked ones of a mount from outside). */
static unsigned long kept_flags(const char *path) {
  struct statvfs v;
  unsigned long f = 0;

  if (statvfs(path, &v) != 0) {
    return 0;
  }
  if (v.f_flag & ST_NOSUID) {
    f |= MS_NOSUID;
  }
  if (v.f_flag & ST_NODEV) {
    f |= MS_NODEV;
  }
  if (v.f_flag & ST_NOEXEC) {
    f |= MS_NOEXEC;
  }
  if (v.f_flag & ST_NOATIME) {
    f |= MS_NOATIME;
  }
  if (v.f_flag & ST_NODIRATIME) {
    f |= MS_NODIRATIME;
  }
  if (v.f_flag & ST_RELATIME) {
    f |= MS_RELATIME;
  }
  return f;
}

static void mount_fail(const char *what, const char *path) {
  fprintf(stderr, "agentloop-exec: %s %s: %s\n", what, path,
          strerror(errno));
  exit(125);
}

/* The protected paths' mounts, as bwrap would do them (the same option
 * words: src/sandbox/sandbox.c push_protect): "--ro-bind SRC DST" (DST
 * made first, a directory or an empty file like SRC, if missing),
 * "--tmpfs DST" (made if missing), "--remount-ro DST", "--" (none). */
static void apply_ops(char **ops) {
  size_t i;

  for (i = 0; ops[i] != NULL; i++) {
    const char *op = ops[i];

    if (strcmp(op, "--") == 0) {
      continue;
    }
    if (strcmp(op, "--ro-bind") == 0 && ops[i + 1] != NULL &&
        ops[i + 2] != NULL) {
      const char *src = ops[i + 1];
      const char *dst = ops[i + 2];
      struct stat st, dt;

      i += 2;
      if (stat(src, &st) != 0) {
        mount_fail("stat", src);
      }
      if (lstat(dst, &dt) != 0) {
        if (S_ISDIR(st.st_mode)) {
          if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
            mount_fail("mkdir", dst);
          }
        } else {
          int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                 O_CLOEXEC, 0644);

          if (fd < 0 && errno != EEXIST) {
            mount_fail("create", dst);
          }
          if (fd >= 0) {
            close(fd);
          }
        }
      }
      if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0) {
        mount_fail("bind", dst);
      }
      if (mount(NULL, dst, NULL,
                MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(dst),
                NULL) != 0) {
        mount_fail("remount", dst);
      }
    } else if (strcmp(op, "--tmpfs") == 0 && ops[i + 1] != NULL) {
      const char *dst = ops[++i];
      unsigned long f = MS_NOSUID | MS_NODEV;

      /* "--tmpfs D --remount-ro D": one read-only mount. */
      if (ops[i + 1] != NULL && ops[i + 2] != NULL &&
          strcmp(ops[i + 1], "--remount-ro") == 0 &&
          strcmp(ops[i + 2], dst) == 0) {
        f |= MS_RDONLY;
        i += 2;
      }
      if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
        mount_fail("mkdir", dst);
      }
      if (mount("tmpfs", dst, "tmpfs", f, "mode=0755") != 0) {
        mount_fail("tmpfs", dst);
      }
    } else if (strcmp(op, "--remount-ro") == 0 && ops[i + 1] != NULL) {
      const char *dst = ops[++i];

      if (mount(NULL, dst, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID |
                                     MS_NODEV, NULL) != 0) {
        mount_fail("remount", dst);
      }
    } else {
      fprintf(stderr, "agentloop-exec: bad mount operation '%s'\n", op);
      exit(125);
    }
  }
}

/* chdir and exec of a command received on stdin; returns only on failure
 * (the exit code). */
static int exec_command(char **cmd);

static int exec_in(const char *cwd, char **cmd) {
  if (chdir(cwd) != 0) {
    fprintf(stderr, "agentloop-exec: %s: %s\n", cwd, strerror(errno));
    return 125;
  }
  return exec_command(cmd);
}

/* The warm path (see the header): everything that does not depend on the
 * command is done before it arrives; after it, only the protected paths'
 * mounts, the capability drop and two syscalls that cannot come earlier
 * (Landlock and seccomp would forbid the mounts). */
static int run_warm(const opts_t *o) {
  extern char **environ;
  struct sock_fprog prog;
  char *cwd;
  char **env, **ops, **cmd;
  int rs = -1;
  int ll;

  ll = landlock_prepare(o, &rs);
  if (ll < 0) {
    die("landlock", -ll);
  }
  if (o->require_landlock && ll == 0) {
    fprintf(stderr, "agentloop-exec: Landlock is not available\n");
    return 125;
  }
  if (seccomp_prepare(o, &prog) != 0) {
    fprintf(stderr, "agentloop-exec: cannot build the seccomp filter\n");
    return 125;
  }
  /* Neither limits the mounts still to come (they need CAP_SYS_ADMIN in
   * the effective set, which stays until drop_sets). */
  drop_bounding();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    die("PR_SET_NO_NEW_PRIVS", errno);
  }
  /* libseccomp's compilation left most of the heap free: give it back
   * while the sandbox idles (its private memory) and before the exec
   * has to tear it down. */
  (void)malloc_trim(0);
  warm_receive(&cwd, &env, &ops, &cmd);
  apply_ops(ops);
  drop_sets();
  ll = landlock_restrict(rs);
  if (ll < 0) {
    die("landlock", -ll);
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    fprintf(stderr, "agentloop-exec: cannot load the seccomp filter\n");
    return 125;
  }
  environ = env; /* execvp searches the command's PATH, as cold */
  if (o->tmpdir != NULL && setenv("TMPDIR", o->tmpdir, 1) != 0) {
    die("setenv", errno);
  }
  return exec_in(cwd, cmd);
}

/* ---- launch: a cgroup joined ahead of the command -------------------------- */

/* Inside its cgroup already (cgroup_join.c): waits for the command (the
 * wrapped one: bwrap, or the helper in degraded mode) and execs it, with
 * no confinement of its own (what it execs confines). Dies with the
 * agentloop that started it. */
static int run_launch(long owner) {
  extern char **environ;
  char *cwd;
  char **env, **ops, **cmd;

  /* The owner's end of the socket closing ends the wait (warm_receive
   * exits at EOF); PDEATHSIG also ends it while it joins or reads, and an
   * owner gone before it was set shows in the parent check. It stays set
   * into what is exec'd (bwrap and the degraded helper set it again). */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 ||
      (long)getppid() != owner) {
    return 125;
  }
  warm_receive(&cwd, &env, &ops, &cmd);
  if (ops[0] != NULL) {
    fprintf(stderr, "agentloop-exec: a launcher mounts nothing\n");
    return 125;
  }
  environ = env;
  return exec_in(cwd, cmd);
}

/* ---- the command --------------------------------------------------------- */

/* A `/bin/sh -c CMD` (the bash tool) whose CMD is one simple command of
 * plain words (letters, digits and _./:,@%+=- only: nothing dash would
 * expand, quote, redirect or treat as syntax) that names no builtin or
 * keyword: exec'd here directly, as bash does with `bash -c`, which
 * saves the shell's start and its fork (~0.9 ms of a tool start, the
 * toolstart bench). dash is what decides the rest (/bin/sh must be
 * dash, else this does nothing), so its environment (PWD) and its
 * messages for a command it cannot run are reproduced; a command killed
 * by a signal is reported as killed rather than as dash's 128+N. */
static const char *const SH_BUILTINS[] = {
    ".", ":", "alias", "bg", "break", "case", "cd", "chdir", "command",
    "continue", "do", "done", "elif", "else", "esac", "eval", "echo", "exec",
    "exit", "export", "false", "fc", "fg", "fi", "for", "getopts", "hash",
    "if", "in", "jobs", "kill", "local", "printf", "pwd", "read", "readonly",
    "return", "set", "shift", "test", "then", "times", "trap", "true", "type",
    "ulimit", "umask", "unalias", "unset", "until", "wait", "while", NULL};

static bool sh_is_dash(const char *sh) {
  char real[PATH_MAX];
  const char *base;

  if (realpath(sh, real) == NULL) {
    return false;
  }
  base = strrchr(real, '/');
  return strcmp(base != NULL ? base + 1 : real, "dash") == 0;
}

/* The words of cmd[2] (a copy, split) when the rule above holds, and
 * AGENTLOOP_SH_DIRECT=0 (tests compare the two ways) does not say no. */
static char **sh_simple_words(char *const *cmd) {
  static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789_./:,@%+=- \t";
  const char *off = getenv("AGENTLOOP_SH_DIRECT");
  char **w;
  char *copy, *p;
  size_t n = 0;
  size_t i;

  if (cmd[0] == NULL || strcmp(cmd[0], "/bin/sh") != 0 || cmd[1] == NULL ||
      strcmp(cmd[1], "-c") != 0 || cmd[2] == NULL || cmd[3] != NULL ||
      cmd[2][strspn(cmd[2], ok)] != '\0' ||
      (off != NULL && strcmp(off, "0") == 0) || !sh_is_dash(cmd[0])) {
    return NULL;
  }
  copy = strdup(cmd[2]);
  w = calloc(strlen(cmd[2]) / 2 + 2, sizeof(*w));
  if (copy == NULL || w == NULL) {
    free(copy);
    free(w);
    return NULL;
  }
  for (p = strtok(copy, " \t"); p != NULL; p = strtok(NULL, " \t")) {
    w[n++] = p;
  }
  for (i = 0; n > 0 && SH_BUILTINS[i] != NULL; i++) {
    if (strcmp(w[0], SH_BUILTINS[i]) == 0) {
      n = 0;
    }
  }
  if (n == 0 || strchr(w[0], '=') != NULL) {
    free(copy); /* nothing, a builtin or keyword, an assignment: dash's */
    free(w);
    return NULL;
  }
  return w; /* the words point into the copy: both live until the exec */
}

/* What dash exports: PWD, kept when it names the working directory. */
static void sh_pwd(void) {
  const char *pwd = getenv("PWD");
  char buf[PATH_MAX];
  struct stat a, b;

  if (pwd != NULL && pwd[0] == '/' && stat(pwd, &a) == 0 &&
      stat(".", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    return;
  }
  if (getcwd(buf, sizeof(buf)) != NULL) {
    (void)setenv("PWD", buf, 1);
  }
}

/* Execs the command; returns only on failure, with its exit code. */
static int exec_command(char **cmd) {
  char **w = sh_simple_words(cmd);
  int e;

  if (w != NULL) {
    sh_pwd();
    execvp(w[0], w);
    e = errno;
    /* dash's words and statuses: 127 for a name not found on PATH
     * whatever the cause, 126 for a path it cannot run. */
    fprintf(stderr, "%s: 1: %s: %s\n", cmd[0], w[0],
            e == ENOENT || e == ENOTDIR ? "not found" : strerror(e));
    return strchr(w[0], '/') == NULL || e == ENOENT || e == ENOTDIR ? 127
                                                                     : 126;
  }
  execvp(cmd[0], cmd);
  e = errno;
  fprintf(stderr, "agentloop-exec: %s: %s\n", cmd[0], strerror(e));
  return e == ENOENT ? 127 : 126;
}

/* ---- janitor --------------------------------------------------------------- */

typedef struct jpath_s {
  struct jpath_s *next;
  long count;
  bool cgroup; /* a cgroup parent directory, not a placeholder */
  char path[];
} jpath_t;

/* A placeholder of our dead parent may still be mounted for a moment by
 * one of its sandboxes on its way out (the kernel tears the namespace
 * down as its last process exits): a few short waits for that, then it
 * belongs to another agent's sandbox, whose agent removes it. */
static void janitor_release(const char *dir, const char *path) {
  int i;

  for (i = 0; i < 50 && !al_phreg_release(dir, path, NULL); i++) {
    struct timespec ts = {0, 20 * 1000 * 1000};

    nanosleep(&ts, NULL);
  }
}

static bool owner_gone(long owner);

/* A bwrap whose command line starts our helper for `owner`: its
 * sandbox. */
static bool sandbox_of(const char *pid, const char *owner) {
  char p[300];
  char buf[16384];
  ssize_t n;
  size_t at;
  int fd;

  if (!al_phreg_is_bwrap(pid)) {
    return false;
  }
  snprintf(p, sizeof(p), "/proc/%s/cmdline", pid);
  fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return false;
  }
  buf[n] = '\0';
  for (at = 0; at < (size_t)n; at += strlen(buf + at) + 1) {
    if (strcmp(buf + at, "--owner") == 0 &&
        at + 8 < (size_t)n && strcmp(buf + at + 8, owner) == 0) {
      return true;
    }
  }
  return false;
}

/* bwrap's parent-death signals leave a gap: a sandbox whose agentloop
 * died while bwrap was still setting up can be left waiting for ever for
 * its outer half (seen after SIGKILLs of agentloopd), or its init can miss
 * the signal and run the command on. Its command line names its owner
 * (--owner): once that owner is gone, each one left is killed (its init:
 * the whole namespace goes). */
static void kill_orphans(long owner) {
  char own[32];
  int round;
  bool found = true;

  snprintf(own, sizeof(own), "%ld", owner);
  /* Again after a kill, until none is left (one dying meanwhile). A new
   * agentloop that got the same pid holds the lock again: its sandboxes
   * name the same owner and are not ours to end. */
  for (round = 0; round < 10 && found && owner_gone(owner); round++) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    struct dirent *e;
    DIR *d = opendir("/proc");

    if (d == NULL) {
      return;
    }
    found = false;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
          sandbox_of(e->d_name, own)) {
        found = kill((pid_t)atol(e->d_name), SIGKILL) == 0 || found;
      }
    }
    closedir(d);
    if (found) {
      nanosleep(&ts, NULL);
    }
  }
}

static int run_janitor(const char *phreg, long parent) {
  jpath_t *list = NULL, *j;
  char line[8192];
  long owner = parent > 0 ? parent : (long)getppid();
  int ppfd;
  FILE *in;

  /* Its own session already (the spawner): no terminal signal reaches it,
   * and the ones a shell may send its group go elsewhere. */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  if (chdir("/") != 0) {
    return 125;
  }
  /* The pidfd is our parent's only while we are still its child: once we
   * have been handed to init (or a subreaper), it has exited already and
   * its pid may be another process's; waiting on that (init's, here) kept
   * janitors of short processes for ever. */
  ppfd = (int)syscall(SYS_pidfd_open, (pid_t)owner, 0);
  if (ppfd >= 0 && (long)getppid() != owner) {
    close(ppfd);
    ppfd = -1;
  }
  /* Before anything of our parent's is made: its placeholders are not in
   * the registry yet. */
  al_phreg_sweep(phreg);
  in = fdopen(0, "r");
  if (in == NULL) {
    return 125;
  }
  while (fgets(line, sizeof(line), in) != NULL) {
    size_t n = strlen(line);
    char op = line[0];

    if (n < 3 || line[n - 1] != '\n' ||
        (op != '+' && op != '-' && op != 'c')) {
      continue;
    }
    /* "cDIR": a directory where our parent's tool cgroups are made
     * (cgroup_join.c); those left at its exit go too. */
    line[n - 1] = '\0';
    for (j = list; j != NULL && strcmp(j->path, line + 1) != 0; j = j->next) {
    }
    if (j == NULL) {
      j = calloc(1, sizeof(*j) + n);
      if (j == NULL) {
        continue;
      }
      memcpy(j->path, line + 1, n - 1);
      j->next = list;
      list = j;
    }
    j->count += op == '+' || op == 'c' ? 1 : -1;
    j->cgroup = j->cgroup || op == 'c';
  }
  /* EOF: our parent is exiting. Its sandboxes die with it
   * (--die-with-parent); wait until it is gone entirely, then end those
   * that did not (bwrap still setting up when it died). */
  if (ppfd >= 0) {
    struct pollfd p = {ppfd, POLLIN, 0};

    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
  }
  kill_orphans(owner);
  for (j = list; j != NULL; j = j->next) {
    if (j->cgroup) {
      al_exec_cgroup_sweep_owner(j->path, owner);
      continue;
    }
    if (j->count > 0) {
      janitor_release(phreg, j->path);
    }
  }
  /* Our parent's lines (and any other dead agent's) off the registry,
   * and the placeholders only dead agents noted: also those a plan of
   * our parent's noted while a sweep left them to it (a live noter). */
  al_phreg_sweep(phreg);
  return 0;
}

/* ---- the owner ------------------------------------------------------------- */

/* The agentloop that started this tool holds a read lock on byte `owner`
 * of this very binary (al__sandbox_owner_lock) for as long as it lives;
 * the binary is the same file inside the sandbox. Gone: no lock. This
 * closes the window bwrap leaves with --die-with-parent: when agentloop
 * dies while bwrap is still setting up, the sandbox's init can miss its
 * parent-death signal and the command would run on with nobody to stop it
 * (seen after a SIGKILL of agentloopd about 1 run in 4). */
static bool owner_gone(long owner) {
  struct flock fl;
  bool gone;
  int fd;

  if (owner <= 0) {
    return false;
  }
  fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false; /* cannot tell: the parent-death signals remain */
  }
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = (off_t)owner;
  fl.l_len = 1;
  gone = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
  close(fd);
  return gone;
}

/* bwrap mode only: a process that waits for the owner's lock to go and
 * then kills everything in this PID namespace. The check above misses one
 * case: bwrap's init sets its parent-death signal only after it has
 * forked us, so an agentloop that dies in between (after our check) leaves
 * the sandbox running with nobody to stop it. Forked before the command
 * is exec'd (for a warm sandbox, before it waits for one); it holds no fd
 * of ours, no capability, and ends with us (its own parent-death signal)
 * or with the namespace. */
static void watch_owner(long owner) {
  pid_t w;

  /* The first child of a PID namespace's init: only there does kill(-1)
   * mean this sandbox and nothing else. */
  if (owner <= 0 || getpid() != 2 || getppid() != 1) {
    return;
  }
  w = fork();
  if (w != 0) {
    return; /* the command goes on (a failed fork: the check alone) */
  }
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != 2) {
    _exit(0);
  }
  (void)syscall(SYS_close_range, 0U, ~0U, 0U);
  drop_caps();
  (void)prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  /* Looked at a few times a second: waiting for the lock itself would
   * take a write lock, which needs the binary open for writing. */
  while (!owner_gone(owner)) {
    struct timespec ts = {0, 200 * 1000 * 1000};

    nanosleep(&ts, NULL);
  }
  (void)kill(-1, SIGKILL);
  _exit(0);
}

static void check_owner(long owner) {
  if (owner_gone(owner)) {
    fprintf(stderr,
            "agentloop-exec: agentloop (pid %ld) is gone: the command is not "
            "started\n",
            owner);
    exit(125);
  }
}

/* ---- main ---------------------------------------------------------------- */

static rlim_t num(const char *s) {
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') {
    fprintf(stderr, "agentloop-exec: bad number '%s'\n", s);
    exit(125);
  }
  return (rlim_t)v;
}

int main(int argc, char **argv) {
  opts_t o;
  int i;
  int ll;
  struct sigaction sa;
  pid_t child;

  memset(&o, 0, sizeof(o));
  o.abi_cap = -1;
  if (argc > 1 && strcmp(argv[1], "--cgroup") == 0) {
    return al_exec_cgroup_main(argc, argv, run_launch);
  }
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;

    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "--janitor") == 0) {
      /* --janitor DIR [--parent PID] */
      long parent = 0;

      if (i + 3 < argc && strcmp(argv[i + 2], "--parent") == 0) {
        parent = strtol(argv[i + 3], NULL, 10);
      }
      return run_janitor(v, parent);
    }
    if (strcmp(a, "--probe") == 0) {
      o.probe = true;
    } else if (strcmp(a, "--no-network") == 0) {
      o.no_network = true;
    } else if (strcmp(a, "--supervise") == 0) {
      o.supervise = true;
    } else if (strcmp(a, "--warm") == 0) {
      o.warm = true;
    } else if (strcmp(a, "--require-landlock") == 0) {
      o.require_landlock = true;
    } else if (v == NULL) {
      fprintf(stderr, "agentloop-exec: bad option '%s'\n", a);
      return 125;
    } else if (strcmp(a, "--write") == 0 && o.n_write < MAX_WRITE) {
      o.write[o.n_write++] = argv[++i];
    } else if (strcmp(a, "--tmpdir") == 0 && o.n_write < MAX_WRITE) {
      o.write[o.n_write++] = argv[++i];
      o.tmpdir = argv[i];
      if (setenv("TMPDIR", argv[i], 1) != 0) {
        die("setenv", errno);
      }
    } else if (strcmp(a, "--landlock-abi") == 0) {
      o.abi_cap = (int)num(argv[++i]);
    } else if (strcmp(a, "--cpu") == 0) {
      o.cpu = num(argv[++i]);
    } else if (strcmp(a, "--as") == 0) {
      o.as = num(argv[++i]);
    } else if (strcmp(a, "--data") == 0) {
      o.data = num(argv[++i]);
    } else if (strcmp(a, "--fsize") == 0) {
      o.fsize = num(argv[++i]);
    } else if (strcmp(a, "--nofile") == 0) {
      o.nofile = num(argv[++i]);
    } else if (strcmp(a, "--nproc") == 0) {
      o.nproc = num(argv[++i]);
    } else if (strcmp(a, "--owner") == 0) {
      o.owner = (long)num(argv[++i]);
    } else {
      fprintf(stderr, "agentloop-exec: bad option '%s'\n", a);
      return 125;
    }
  }
  if (o.probe) {
    int abi = landlock_abi();
    int sc;

    if (o.abi_cap >= 0 && abi > o.abi_cap) {
      abi = o.abi_cap;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
      die("PR_SET_NO_NEW_PRIVS", errno);
    }
    sc = apply_seccomp(&o);
    printf("landlock=%d seccomp=%d\n", abi, sc == 0 ? 1 : 0);
    return 0;
  }
  if (!o.supervise) {
    /* bwrap mode: the owner may have died while bwrap set up, before
     * its init armed the parent-death signal (it does so only after
     * forking us): the check tells now, the watcher later. Degraded mode
     * checks below, once its own parent-death signal is set. */
    check_owner(o.owner);
    watch_owner(o.owner);
  }
  if (i >= argc && !o.warm) {
    fprintf(stderr, "agentloop-exec: no command (usage: agentloop-exec "
                    "[options] -- command [args...])\n");
    return 125;
  }
  {
    struct rlimit core = {0, 0};

    (void)setrlimit(RLIMIT_CORE, &core);
  }
  set_limit(RLIMIT_CPU, o.cpu);
  set_limit(RLIMIT_AS, o.as);
  set_limit(RLIMIT_DATA, o.data);
  set_limit(RLIMIT_FSIZE, o.fsize);
  set_limit(RLIMIT_NOFILE, o.nofile);
  set_limit(RLIMIT_NPROC, o.nproc);
  if (o.warm) {
    if (o.supervise) {
      fprintf(stderr, "agentloop-exec: --warm is for bwrap mode\n");
      return 125;
    }
    return run_warm(&o);
  }
  drop_caps();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    die("PR_SET_NO_NEW_PRIVS", errno);
  }
  ll = apply_landlock(&o);
  if (ll < 0) {
    die("landlock", -ll);
  }
  if (o.require_landlock && ll == 0) {
    fprintf(stderr, "agentloop-exec: Landlock is not available\n");
    return 125;
  }
  if (o.supervise) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
      die("PR_SET_CHILD_SUBREAPER", errno);
    }
    /* The daemon's death ends us, and the sweep below ends the rest;
     * a death before this point shows in the owner's lock. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    check_owner(o.owner);
  }
  if (apply_seccomp(&o) != 0) {
    fprintf(stderr, "agentloop-exec: cannot load the seccomp filter\n");
    return 125;
  }
  if (o.supervise) {
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    child = fork();
    if (child < 0) {
      die("fork", errno);
    }
    if (child > 0) {
      return supervise(child);
    }
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
  }
  return exec_command(argv + i);
}
