/* Rules of the sandbox layers that the escape suite could not see break
 * (issue 16): each test here fails when its rule is removed, and none
 * depends on timing.
 *  - bwrap's network namespace: the other layers (seccomp, Landlock TCP)
 *    block the escape attempts on their own, so the namespace is checked
 *    directly: another namespace than the host's, holding only lo.
 *  - agentloop-exec's seccomp socket filter, alone (Landlock off): every
 *    family it names fails with its EACCES, which no other layer returns.
 *  - the file tools' RESOLVE_BENEATH: a seam swaps a path component for a
 *    symlink between the policy check and the open; nothing may be
 *    created or read outside the root. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "tools/tools.h"
#include "unit/sandbox/sbx.h"

TEST_IMPL(sandbox_bwrap_private_network) {
  sbx_t x;
  char host_ns[64];
  ssize_t n;
  char *p;
  char *line;
  int ifaces = 0;

  n = readlink("/proc/self/ns/net", host_ns, sizeof(host_ns) - 1);
  ASSERT(n > 0);
  host_ns[n] = '\0';
  sbx_init(&x, SBX_BWRAP);
  sbx_call(&x, "bash",
           "{\"command\": \"readlink /proc/self/ns/net; cat /proc/net/dev\"}");
  ASSERT(!x.is_error);
  p = x.content;
  line = strsep(&p, "\n");
  ASSERT_NOT_NULL(line);
  if (strncmp(line, "net:[", 5) != 0 || strcmp(line, host_ns) == 0) {
    AL_TEST_FAIL("the tool shares the host's network namespace (%s, host "
                 "%s)",
                 line, host_ns);
  }
  /* /proc/net/dev: two header lines, then one line per interface. */
  ASSERT_NOT_NULL(strsep(&p, "\n"));
  ASSERT_NOT_NULL(strsep(&p, "\n"));
  while ((line = strsep(&p, "\n")) != NULL) {
    char name[64];

    if (line[0] == '\0') {
      continue;
    }
    ASSERT_EQ(sscanf(line, " %63[^:]:", name), 1);
    if (strcmp(name, "lo") != 0) {
      AL_TEST_FAIL("interface %s visible inside the sandbox", name);
    }
    ifaces++;
  }
  ASSERT_EQ(ifaces, 1);
  sbx_finish(&x);
  return 0;
}

/* Runs agentloop-exec [--no-network] with Landlock off around a perl that
 * opens one socket of each family the filter names; returns its output
 * ("family:errno" or "family:ok" each). */
static char *socket_families(bool no_network) {
  static const char script[] =
      "for my $f (1, 2, 10, 16, 17) { my $t = ($f == 16 || $f == 17) ? 3 : "
      "1; if (socket(my $s, $f, $t, 0)) { print \"$f:ok \" } else { print "
      "\"$f:\", $! + 0, \" \" } }";
  char cmd[2048];
  char *out = malloc(512);
  FILE *f;
  size_t n;

  ASSERT_NOT_NULL(out);
  snprintf(cmd, sizeof(cmd),
           "'%s/agentloop-exec' %s --landlock-abi 0 -- perl -e '%s'",
           AL_BINARY_DIR, no_network ? "--no-network" : "", script);
  f = popen(cmd, "r");
  ASSERT_NOT_NULL(f);
  n = fread(out, 1, 511, f);
  out[n] = '\0';
  ASSERT_EQ(pclose(f), 0);
  return out;
}

TEST_IMPL(exec_seccomp_refuses_socket_families) {
  char *out;
  char want[64];

  /* unix=1, inet=2, inet6=10, netlink=16, packet=17; EACCES=13 is the
   * filter's own answer. */
  snprintf(want, sizeof(want), "1:%d 2:%d 10:%d 16:%d 17:%d ", EACCES, EACCES,
           EACCES, EACCES, EACCES);
  out = socket_families(true);
  ASSERT_STR_EQ(out, want);
  free(out);
  /* Without the option the same sockets open: the test can tell. */
  out = socket_families(false);
  ASSERT(strncmp(out, "1:ok 2:ok 10:ok ", 16) == 0);
  free(out);
  return 0;
}

/* ---- RESOLVE_BENEATH ------------------------------------------------------ */

static sbx_t *swap_x;
static int swaps;

/* ws/sub (a real directory at check time) becomes a symlink to out/. */
static void swap_sub_for_link(const char *real) {
  char sub[512];
  char moved[512];

  (void)real;
  snprintf(sub, sizeof(sub), "%s/sub", swap_x->ws);
  snprintf(moved, sizeof(moved), "%s/sub.moved", swap_x->ws);
  ASSERT_EQ(rename(sub, moved), 0);
  ASSERT_EQ(symlink(swap_x->out, sub), 0);
  swaps++;
}

static void make_sub(sbx_t *x) {
  char p[512];
  char cmd[1200];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s/sub' '%s/sub.moved'", x->ws, x->ws);
  ASSERT_EQ(system(cmd), 0);
  snprintf(p, sizeof(p), "%s/sub", x->ws);
  ASSERT_EQ(mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/sub/canary", x->ws);
  {
    FILE *f = fopen(p, "w");

    ASSERT_NOT_NULL(f);
    fputs("inside\n", f);
    fclose(f);
  }
}

TEST_IMPL(fstools_swap_between_check_and_open) {
  sbx_t x;
  char p[512];
  struct stat st;

  sbx_init(&x, SBX_DEGRADED); /* the file tools run in-process anyway */
  swap_x = &x;
  al__fstools_test_between = swap_sub_for_link;

  /* write_file: the file would be created in out/. */
  make_sub(&x);
  sbx_call(&x, "write_file", "{\"path\": \"sub/pwned\", \"content\": \"x\"}");
  ASSERT_EQ(swaps, 1);
  ASSERT(x.is_error);
  snprintf(p, sizeof(p), "%s/pwned", x.out);
  if (stat(p, &st) == 0) {
    AL_TEST_FAIL("write_file created %s through the swapped symlink", p);
  }

  /* read_file: out/canary ("original") instead of ws/sub/canary. */
  make_sub(&x);
  sbx_call(&x, "read_file", "{\"path\": \"sub/canary\"}");
  ASSERT_EQ(swaps, 2);
  ASSERT(x.is_error);
  ASSERT_NULL(strstr(x.content, "original"));

  al__fstools_test_between = NULL;
  snprintf(p, sizeof(p), "rm -rf '%s/sub' '%s/sub.moved'", x.ws, x.ws);
  ASSERT_EQ(system(p), 0);
  sbx_finish(&x);
  return 0;
}
