/* Tests that need bwrap mode (the real sandbox) ask al_test_need_bwrap()
 * first. Where bwrap cannot make its user namespace (a chroot, a container,
 * a kernel setting), such a test exits with AL_TEST_SKIP_CODE, which ctest
 * reports as not run, after one line saying why; everything else runs.
 * With CI=true a missing bwrap mode is a failure instead: CI must run the
 * whole suite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox.h"
#include "test.h"

static int cached = -1; /* -1 unknown, 0 no, 1 yes */
static char cached_why[600];

bool al_test_bwrap_available(char *why, size_t len) {
  if (cached < 0) {
    al_sandbox_probe_options_t po;
    al_sandbox_info_t info;

    al_sandbox_probe_options_init(&po);
    po.helper = AL_BINARY_DIR "/agentloop-exec";
    if (al_sandbox_probe(&po, &info) != 0) {
      snprintf(cached_why, sizeof(cached_why), "the sandbox probe failed");
      cached = 0;
    } else {
      cached = info.mode == AL_SANDBOX_MODE_BWRAP;
      snprintf(cached_why, sizeof(cached_why), "%s", info.detail);
    }
  }
  if (why != NULL && len > 0) {
    snprintf(why, len, "%s", cached_why);
  }
  return cached == 1;
}

bool al_test_ci(void) {
  const char *ci = getenv("CI");

  return ci != NULL && strcmp(ci, "true") == 0;
}

void al_test_need_bwrap(void) {
  char why[600];

  if (al_test_bwrap_available(why, sizeof(why))) {
    return;
  }
  if (al_test_ci()) {
    AL_TEST_FAIL("CI=true requires bwrap mode, which cannot run here: %s",
                 why);
  }
  fprintf(stderr, "not run: needs bwrap mode, which cannot run here: %s\n",
          why);
  fflush(stdout);
  fflush(stderr);
  exit(AL_TEST_SKIP_CODE);
}
