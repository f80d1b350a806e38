/* Tool memory relative to the machine (issue 15, point 5): RLIMIT_DATA is
 * a share of physical memory or of this process's cgroup limit, and a
 * bash tool cannot write to more memory than its limit, in bwrap and in
 * degraded mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox.h"
#include "test.h"
#include "unit/sandbox/sbx.h"

static uint64_t meminfo_total(void) {
  FILE *f = fopen("/proc/meminfo", "re");
  char line[256];
  unsigned long long kb = 0;

  ASSERT_NOT_NULL(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
      break;
    }
  }
  fclose(f);
  ASSERT(kb > 0);
  return (uint64_t)kb * 1024;
}

static void share_case(sbx_mode_t mode) {
  char from[128];
  uint64_t base = al__sandbox_memory_base(from, sizeof(from));
  uint64_t want;
  char expect[64];
  sbx_t x;

  /* Never above the machine; the cgroup only lowers it. */
  ASSERT(base > 0);
  ASSERT_LE(base, meminfo_total());
  ASSERT(strstr(from, "MemTotal") != NULL || strstr(from, "cgroup") != NULL);
  ASSERT_EQ(al__sandbox_default_data((uint64_t)24 << 30),
            ((uint64_t)24 << 30) / 100 * AL_SANDBOX_MEMORY_SHARE_PCT);
  ASSERT_EQ(al__sandbox_default_data(1), (uint64_t)64 << 20);
  want = al__sandbox_default_data(base);
  ASSERT(want < meminfo_total());
  /* What a tool gets when nothing is configured. */
  sbx_data_bytes = 0;
  sbx_init(&x, mode);
  sbx_call(&x, "bash", "{\"command\": \"ulimit -d\"}");
  snprintf(expect, sizeof(expect), "%llu\n",
           (unsigned long long)(want / 1024));
  ASSERT_STR_EQ(x.content, expect);
  sbx_finish(&x);
}

TEST_IMPL(sandbox_tool_memory_share_of_machine) {
  share_case(SBX_BWRAP);
  return 0;
}

TEST_IMPL(sandbox_tool_memory_share_degraded) {
  share_case(SBX_DEGRADED);
  return 0;
}

static void touch_case(sbx_mode_t mode) {
  sbx_t x;

  sbx_data_bytes = (uint64_t)128 << 20;
  sbx_init(&x, mode);
  sbx_data_bytes = 0;
  /* Within the limit: fine (the limit is not simply "nothing works"). */
  sbx_call(&x, "bash",
           "{\"command\": \"perl -e '$x = \\\"a\\\" x (32 * 1024 * 1024); "
           "print \\\"SMALL-OK\\\"'\"}");
  ASSERT_NOT_NULL(strstr(x.content, "SMALL-OK"));
  /* Past it: refused, whatever the address-space limit says. */
  sbx_call(&x, "bash",
           "{\"command\": \"perl -e '$x = \\\"a\\\" x (200 * 1024 * 1024); "
           "print \\\"BIG-ALLOCATED\\\"'\"}");
  if (strstr(x.content, "BIG-ALLOCATED") != NULL) {
    AL_TEST_FAIL("a tool wrote 200 MiB under a 128 MiB limit: %s",
                 x.content);
  }
  ASSERT(x.is_error);
  sbx_finish(&x);
}

TEST_IMPL(sandbox_tool_cannot_touch_past_limit) {
  touch_case(SBX_BWRAP);
  return 0;
}

TEST_IMPL(sandbox_tool_cannot_touch_past_limit_degraded) {
  touch_case(SBX_DEGRADED);
  return 0;
}
