/* Per-tool cgroups (issue 15; src/sandbox/cgroup.h): where this process
 * may make cgroups, every sandboxed tool runs in its own, with pids.max
 * (binds for root, whom the kernel exempts from RLIMIT_NPROC) and a memory
 * limit over all of its processes and its tmpfs pages; each is removed
 * once its tool has ended. Where cgroups cannot be made, the probe says
 * so and tools run as before. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"
#include "test.h"
#include "unit/sandbox/sbx.h"

/* A tool forks 200 sleepers without ever retrying (perl's fork returns
 * undef at EAGAIN): under pids.max 64 (the sandbox's nproc) most fail,
 * root or not. Without the cgroup, as root, all 200 succeed. */
static void pids_case(sbx_mode_t mode) {
  sbx_t x;
  int forked = -1;
  const char *p;

  sbx_init(&x, mode);
  sbx_need_cgroup(&x);
  sbx_call(&x, "bash",
           "{\"command\": \"perl -e 'my @k; for (1..200) { my $p = fork(); "
           "last unless defined $p; if ($p == 0) { sleep 30; exit 0 } push "
           "@k, $p } print \\\"FORKED=\\\" . scalar(@k) . \\\"\\\\n\\\"; "
           "kill 9, @k; 1 while wait() > 0'\"}");
  p = strstr(x.content, "FORKED=");
  ASSERT_NOT_NULL(p);
  forked = atoi(p + 7);
  if (forked >= 64) {
    AL_TEST_FAIL("a tool started %d processes under pids.max 64 (%s)",
                 forked, x.content);
  }
  ASSERT(forked > 0); /* the limit is not "nothing runs" */
  /* The tool's cgroup is gone by the time its result is delivered. */
  ASSERT_EQ(al__cgroup_count_stale(al__sandbox_cgroup(x.sb)), 0);
  sbx_finish(&x);
}

TEST_IMPL(sandbox_cgroup_pids_limit) {
  pids_case(SBX_BWRAP);
  return 0;
}

TEST_IMPL(sandbox_cgroup_pids_limit_degraded) {
  pids_case(SBX_DEGRADED);
  return 0;
}

/* A cold bwrap start (no warm sandbox: the helper joins at the command's
 * start, not ahead of it) is bound the same way. */
TEST_IMPL(sandbox_cgroup_pids_limit_cold) {
  sbx_no_pool = true;
  pids_case(SBX_BWRAP);
  sbx_no_pool = false;
  return 0;
}

/* Shared anonymous memory is not counted by RLIMIT_DATA (nor is a tmpfs
 * file): only the memory cgroup bounds it. 300 MiB under a 128 MiB
 * limit is refused (the OOM killer ends the writer); 48 MiB is fine. */
static void memory_case(sbx_mode_t mode) {
  static const char *const touch =
      "{\"command\": \"python3 -c 'import mmap; n = %d << 20; m = "
      "mmap.mmap(-1, n); [m.__setitem__(i, 1) for i in range(0, n, 4096)]; "
      "print(\\\"TOUCHED\\\")'\"}";
  char cmd[512];
  sbx_t x;

  /* A sandbox, two Python starts and an OOM kill: under 1 s idle, over
   * 5 s on a loaded 2-core machine (issue 22). */
  al_test_timeout_s(20);
  sbx_data_bytes = (uint64_t)128 << 20;
  sbx_init(&x, mode);
  sbx_data_bytes = 0;
  sbx_need_cgroup(&x);
  if (al__sandbox_info(x.sb)->cgroup_memory[0] == '\0') {
    AL_TEST_FAIL("pids cgroup without a memory one: %s",
                 al__sandbox_info(x.sb)->cgroup_detail);
  }
  snprintf(cmd, sizeof(cmd), touch, 48);
  sbx_call(&x, "bash", cmd);
  ASSERT_NOT_NULL(strstr(x.content, "TOUCHED"));
  snprintf(cmd, sizeof(cmd), touch, 300);
  sbx_call(&x, "bash", cmd);
  if (strstr(x.content, "TOUCHED") != NULL) {
    AL_TEST_FAIL("a tool touched 300 MiB of shared memory under a 128 MiB "
                 "limit: %s", x.content);
  }
  ASSERT(x.is_error);
  ASSERT_EQ(al__cgroup_count_stale(al__sandbox_cgroup(x.sb)), 0);
  sbx_finish(&x);
}

TEST_IMPL(sandbox_cgroup_memory_limit) {
  memory_case(SBX_BWRAP);
  return 0;
}

TEST_IMPL(sandbox_cgroup_memory_limit_degraded) {
  memory_case(SBX_DEGRADED);
  return 0;
}

/* Cgroups unavailable (the probe's seam): the probe says so (degraded
 * mode then lacks a process limit), the JSON carries it, and tools run as
 * they did, in no cgroup of ours. */
TEST_IMPL(sandbox_cgroup_unavailable_reported) {
  const al_sandbox_info_t *info;
  char *json = NULL;
  sbx_t x;

  sbx_no_cgroup = true;
  sbx_init(&x, SBX_DEGRADED);
  sbx_no_cgroup = false;
  info = al__sandbox_info(x.sb);
  ASSERT(!info->cgroup_ok);
  ASSERT(info->cgroup_detail[0] != '\0');
  ASSERT(!al__sandbox_cgroup(x.sb)->active);
  ASSERT_NOT_NULL(strstr(info->missing, "nproc-limit"));
  ASSERT_EQ(al_sandbox_info_json(info, &json), 0);
  ASSERT_NOT_NULL(strstr(json, "\"cgroup\":{\"active\":false"));
  al_free(json);
  sbx_call(&x, "bash", "{\"command\": \"cat /proc/self/cgroup\"}");
  ASSERT(!x.is_error);
  ASSERT_NULL(strstr(x.content, "agentloop-"));
  sbx_finish(&x);
  return 0;
}

/* And where they are available, the JSON says where. */
TEST_IMPL(sandbox_cgroup_reported) {
  const al_sandbox_info_t *info;
  char *json = NULL;
  sbx_t x;

  sbx_init(&x, SBX_DEGRADED);
  sbx_need_cgroup(&x);
  info = al__sandbox_info(x.sb);
  /* pids.max stands in for the nproc limit degraded mode lacks */
  ASSERT_NULL(strstr(info->missing, "nproc-limit"));
  ASSERT_EQ(al_sandbox_info_json(info, &json), 0);
  ASSERT_NOT_NULL(strstr(json, "\"cgroup\":{\"active\":true"));
  ASSERT_NOT_NULL(strstr(json, info->cgroup_pids));
  al_free(json);
  /* (no cgroup namespace in degraded mode: the tool sees its path) */
  sbx_call(&x, "bash", "{\"command\": \"cat /proc/self/cgroup\"}");
  ASSERT_NOT_NULL(strstr(x.content, "pids:/agentloop-"));
  sbx_finish(&x);
  return 0;
}

/* The sweep: a cgroup left by an agentloop that died (SIGKILL: its tools
 * die with it) is removed when empty; one of ours whose helper has exited
 * is removed even with a straggler inside (killed first); one whose
 * helper still runs stays. */
TEST_IMPL(sandbox_cgroup_sweep) {
  al_cgroup_state_t st;
  char dead_dir[512], own_dir[512], live_dir[512], procs[600], pidtxt[32];
  pid_t dead, straggler;
  FILE *f;
  int status;

  al__cgroup_probe(false, &st);
  if (!st.active) {
    if (al_test_ci()) {
      AL_TEST_FAIL("CI=true: tool cgroups are not available: %s", st.detail);
    }
    fprintf(stderr, "not run: tool cgroups cannot be made here: %s\n",
            st.detail);
    return AL_TEST_SKIP_CODE;
  }
  /* A pid that is surely gone: a child that exited and was reaped. */
  dead = fork();
  ASSERT(dead >= 0);
  if (dead == 0) {
    _exit(0);
  }
  ASSERT_EQ(waitpid(dead, &status, 0), dead);
  snprintf(dead_dir, sizeof(dead_dir), "%s/agentloop-%d-1", st.pids,
           (int)dead);
  ASSERT_EQ(mkdir(dead_dir, 0755), 0);
  /* Ours, its "helper" the dead pid, a sleeper inside. */
  snprintf(own_dir, sizeof(own_dir), "%s/agentloop-%d-%d", st.pids,
           (int)getpid(), (int)dead);
  ASSERT_EQ(mkdir(own_dir, 0755), 0);
  straggler = fork();
  ASSERT(straggler >= 0);
  if (straggler == 0) {
    execl("/bin/sleep", "sleep", "1000", (char *)NULL);
    _exit(127);
  }
  snprintf(procs, sizeof(procs), "%s/cgroup.procs", own_dir);
  snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)straggler);
  f = fopen(procs, "w");
  ASSERT_NOT_NULL(f);
  ASSERT(fputs(pidtxt, f) >= 0);
  ASSERT_EQ(fclose(f), 0);
  /* Ours, its helper alive (this process stands in for it). */
  snprintf(live_dir, sizeof(live_dir), "%s/agentloop-%d-%d", st.pids,
           (int)getpid(), (int)getpid());
  ASSERT_EQ(mkdir(live_dir, 0755), 0);

  ASSERT_EQ(al__cgroup_count_stale(&st), 1); /* own_dir */
  /* dead_dir may already be gone: any agentloop's sweep (another test
   * running beside this one) removes the cgroups of a dead owner. */
  ASSERT(al__cgroup_sweep(&st) >= 1);
  ASSERT_NE(access(dead_dir, F_OK), 0);
  ASSERT_NE(access(own_dir, F_OK), 0);
  ASSERT_EQ(access(live_dir, F_OK), 0);
  ASSERT_EQ(waitpid(straggler, &status, 0), straggler);
  ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_EQ(rmdir(live_dir), 0);
  return 0;
}

/* `agentloop doctor` says whether tools get their cgroup. */
TEST_IMPL(doctor_reports_tool_cgroup) {
  al_sandbox_info_t si;
  char cmd[1200], out[16384];
  char home[] = "/var/tmp/al_doctor_XXXXXX";
  size_t n;
  FILE *p;

  (void)al_sandbox_probe(NULL, &si);
  /* doctor starts the daemon it checks: a home and runtime directory of
   * this test's own, and the daemon stopped after, so nothing is left
   * running on the user's socket. */
  ASSERT_NOT_NULL(mkdtemp(home));
  snprintf(cmd, sizeof(cmd),
           "cd /tmp && HOME='%s' XDG_RUNTIME_DIR='%s' "
           "XDG_CONFIG_HOME=/nonexistent NO_COLOR=1 "
           "'%s/agentloop' doctor 2>&1",
           home, home, AL_BINARY_DIR);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  (void)pclose(p); /* doctor's status depends on the rest of the checks */
  snprintf(cmd, sizeof(cmd),
           "HOME='%s' XDG_RUNTIME_DIR='%s' XDG_CONFIG_HOME=/nonexistent "
           "'%s/agentloop' daemon stop >/dev/null 2>&1; rm -rf '%s'",
           home, home, AL_BINARY_DIR, home);
  (void)system(cmd);
  if (si.mode == AL_SANDBOX_MODE_NONE) {
    return 0; /* no sandbox: no tool runs, no cgroup line */
  }
  ASSERT_NOT_NULL(strstr(out, "tool cgroup"));
  if (si.cgroup_ok) {
    ASSERT_NOT_NULL(strstr(out, "each tool in its own cgroup: pids.max under"));
    ASSERT_NOT_NULL(strstr(out, si.cgroup_pids));
  } else {
    ASSERT_NOT_NULL(strstr(out, "not available ("));
  }
  return 0;
}

/* agentloop-exec --cgroup itself: the command runs inside the new cgroup
 * with its limit; a cgroup that cannot be made fails the start (exit 125,
 * naming it) instead of running the command without its limits. */
TEST_IMPL(exec_cgroup_join) {
  al_cgroup_state_t st;
  char cmd[1200], out[4096], want[128];
  size_t n;
  FILE *p;
  int rc;

  snprintf(cmd, sizeof(cmd),
           "'%s/agentloop-exec' --cgroup /nonexistent/dir --pids-max 5 -- "
           "/bin/echo RAN 2>&1",
           AL_BINARY_DIR);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  rc = pclose(p);
  ASSERT(WIFEXITED(rc) && WEXITSTATUS(rc) == 125);
  ASSERT_NULL(strstr(out, "RAN"));
  ASSERT_NOT_NULL(strstr(out, "agentloop-exec: cgroup /nonexistent/dir/"
                              "agentloop-"));
  ASSERT_NOT_NULL(strstr(out, ": mkdir: "));

  al__cgroup_probe(false, &st);
  if (!st.active) {
    if (al_test_ci()) {
      AL_TEST_FAIL("CI=true: tool cgroups are not available: %s", st.detail);
    }
    fprintf(stderr, "not run (the rest): no tool cgroups here: %s\n",
            st.detail);
    return AL_TEST_SKIP_CODE;
  }
  snprintf(cmd, sizeof(cmd),
           "'%s/agentloop-exec' --cgroup '%s' --owner %d --pids-max 7 -- "
           "/bin/sh -c 'cat /proc/self/cgroup; "
           "d=$(grep -o \"agentloop-[0-9]*-[0-9]*\" /proc/self/cgroup | "
           "head -n 1); cat \"%s/$d/pids.max\"' 2>&1",
           AL_BINARY_DIR, st.pids, (int)getpid(), st.pids);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  rc = pclose(p);
  ASSERT_EQ(rc, 0);
  snprintf(want, sizeof(want), "/agentloop-%d-", (int)getpid());
  ASSERT_NOT_NULL(strstr(out, want));
  ASSERT_NOT_NULL(strstr(out, "\n7\n"));
  /* Its helper is gone: swept. */
  ASSERT(al__cgroup_count_stale(&st) >= 1);
  (void)al__cgroup_sweep(&st);
  ASSERT_EQ(al__cgroup_count_stale(&st), 0);
  return 0;
}

/* Runs agentloop-exec --cgroup BASE --owner 4242 --pids-max 7 -- /bin/true
 * and returns its pid, after making its cgroup directory beforehand as a
 * plain directory with empty stand-ins for the files it writes (`tasks`
 * only when with_tasks): the helper takes an existing directory as
 * made, so the files show what it wrote, on any machine. */
static pid_t run_fake_join(const char *base, bool with_tasks, char *dir,
                           size_t size) {
  static const char *const files[] = {"pids.max", "cgroup.procs", "tasks"};
  char helper[1100], path[1200];
  int go[2];
  pid_t pid;
  size_t i;
  int status;
  char c = 0;

  snprintf(helper, sizeof(helper), "%s/agentloop-exec", AL_BINARY_DIR);
  ASSERT_EQ(pipe(go), 0);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    close(go[1]);
    if (read(go[0], &c, 1) != 1) {
      _exit(99);
    }
    execl(helper, helper, "--cgroup", base, "--owner", "4242", "--pids-max",
          "7", "--", "/bin/true", (char *)NULL);
    _exit(98);
  }
  close(go[0]);
  snprintf(dir, size, "%s/agentloop-4242-%d", base, (int)pid);
  ASSERT_EQ(mkdir(dir, 0755), 0);
  for (i = 0; i < (with_tasks ? 3u : 2u); i++) {
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    ASSERT_EQ(fclose(f), 0);
  }
  ASSERT_EQ(write(go[1], "g", 1), 1);
  close(go[1]);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return pid;
}

static void read_small(const char *dir, const char *file, char *buf,
                       size_t size) {
  char path[1200];
  FILE *f;
  size_t n;

  snprintf(path, sizeof(path), "%s/%s", dir, file);
  f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static void remove_fake(const char *dir) {
  static const char *const files[] = {"pids.max", "cgroup.procs", "tasks"};
  char path[1200];
  size_t i;

  for (i = 0; i < 3; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    (void)unlink(path);
  }
  ASSERT_EQ(rmdir(dir), 0);
}

/* How the helper moves itself in. A v1 hierarchy (it has `tasks`): "0"
 * there, which moves the calling thread without the kernel's threadgroup
 * rwsem (cgroup.procs waits for an RCU grace period under it: ~10 ms per
 * cold start here); cgroup.procs stays untouched. cgroup2 (no `tasks`):
 * its own pid in cgroup.procs. */
TEST_IMPL(exec_cgroup_join_thread) {
  char base[] = "/var/tmp/al-cgjoin-XXXXXX";
  char dir[600], text[64], want[32];
  pid_t pid;

  ASSERT_NOT_NULL(mkdtemp(base));
  pid = run_fake_join(base, true, dir, sizeof(dir));
  read_small(dir, "tasks", text, sizeof(text));
  ASSERT_STR_EQ(text, "0");
  read_small(dir, "cgroup.procs", text, sizeof(text));
  ASSERT_STR_EQ(text, "");
  read_small(dir, "pids.max", text, sizeof(text));
  ASSERT_STR_EQ(text, "7");
  remove_fake(dir);

  pid = run_fake_join(base, false, dir, sizeof(dir));
  snprintf(want, sizeof(want), "%d\n", (int)pid);
  read_small(dir, "cgroup.procs", text, sizeof(text));
  ASSERT_STR_EQ(text, want);
  remove_fake(dir);
  ASSERT_EQ(rmdir(base), 0);
  return 0;
}
