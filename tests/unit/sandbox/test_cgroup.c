/* Per-tool cgroups (issue 15; src/sandbox/cgroup.h): where this process
 * may make cgroups, every sandboxed tool runs in its own, with pids.max
 * (binds for root, whom the kernel exempts from RLIMIT_NPROC) and a memory
 * limit over all of its processes and its tmpfs pages; each is removed
 * once its tool has ended. Where cgroups cannot be made, the probe says
 * so and tools run as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"
#include "test.h"
#include "unit/sandbox/sbx.h"

/* The tests below need cgroups: outside CI they do not run where the
 * probe finds none (the reason is printed), under CI=true they fail. */
static void need_cgroup(sbx_t *x) {
  const al_sandbox_info_t *info = al__sandbox_info(x->sb);

  if (info->cgroup_ok) {
    return;
  }
  if (al_test_ci()) {
    AL_TEST_FAIL("CI=true: tool cgroups are not available: %s",
                 info->cgroup_detail);
  }
  fprintf(stderr, "not run: tool cgroups cannot be made here: %s\n",
          info->cgroup_detail);
  sbx_finish(x);
  exit(AL_TEST_SKIP_CODE);
}

/* A tool forks 200 sleepers without ever retrying (perl's fork returns
 * undef at EAGAIN): under pids.max 64 (the sandbox's nproc) most fail,
 * root or not. Without the cgroup, as root, all 200 succeed. */
static void pids_case(sbx_mode_t mode) {
  sbx_t x;
  int forked = -1;
  const char *p;

  sbx_init(&x, mode);
  need_cgroup(&x);
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

  sbx_data_bytes = (uint64_t)128 << 20;
  sbx_init(&x, mode);
  sbx_data_bytes = 0;
  need_cgroup(&x);
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
  need_cgroup(&x);
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
