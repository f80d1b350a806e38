/* The host process's own hygiene (RELIABILITY.md §4 "Always"): see
 * al_sandbox_harden_process() in agentloop/sandbox.h.
 *
 * Why each step:
 *  - PR_SET_DUMPABLE 0: /proc/PID/environ, mem and ptrace then need
 *    CAP_SYS_PTRACE, so a same-uid process (a tool outside a PID
 *    namespace) cannot read the keys.
 *  - The environ block: /proc/PID/environ shows the bytes of the initial
 *    environment area whatever unsetenv() did to the environ array, so the
 *    secret values are overwritten where they lie, after a private copy.
 *  - FD_CLOEXEC on inherited fds: no tool gets an fd we were started with
 *    (our own fds are opened with O_CLOEXEC / libuv's defaults). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

extern char **environ;

/* name=value copies of the scrubbed variables; process-wide, written once
 * by al_sandbox_harden_process() before any thread starts. */
static char **g_secrets;
static size_t g_n_secrets;

static bool secret_name(const char *name, size_t n) {
  static const char *const marks[] = {"KEY",        "TOKEN", "SECRET",
                                      "PASSWORD",   "PASSWD", "CREDENTIAL",
                                      "AUTH",       "COOKIE", NULL};
  char up[256];
  size_t i;

  if (n == 0 || n >= sizeof(up)) {
    return n > 0;
  }
  for (i = 0; i < n; i++) {
    up[i] = (char)toupper((unsigned char)name[i]);
  }
  up[n] = '\0';
  for (i = 0; marks[i] != NULL; i++) {
    if (strstr(up, marks[i]) != NULL) {
      return true;
    }
  }
  return false;
}

const char *al_sandbox_getenv(const char *name) {
  size_t n = strlen(name);
  size_t i;

  for (i = 0; i < g_n_secrets; i++) {
    if (strncmp(g_secrets[i], name, n) == 0 && g_secrets[i][n] == '=') {
      return g_secrets[i] + n + 1;
    }
  }
  return getenv(name);
}

static int scrub_environ(void) {
  size_t i;
  size_t count = 0;
  char **copy;

  for (i = 0; environ != NULL && environ[i] != NULL; i++) {
    count++;
  }
  copy = al_calloc(count + g_n_secrets + 1, sizeof(*copy));
  if (copy == NULL) {
    return AL_ENOMEM;
  }
  if (g_secrets != NULL) {
    memcpy(copy, g_secrets, g_n_secrets * sizeof(*copy));
  }
  for (i = 0; environ != NULL && environ[i] != NULL;) {
    char *e = environ[i];
    char *eq = strchr(e, '=');
    char name[256];
    size_t nl;

    if (eq == NULL || !secret_name(e, (size_t)(eq - e)) ||
        (size_t)(eq - e) >= sizeof(name)) {
      i++;
      continue;
    }
    copy[g_n_secrets] = al_strdup(e);
    if (copy[g_n_secrets] == NULL) {
      al_free(g_secrets); /* its strings moved to copy */
      g_secrets = copy;
      return AL_ENOMEM;
    }
    g_n_secrets++;
    nl = (size_t)(eq - e);
    memcpy(name, e, nl);
    name[nl] = '\0';
    /* Overwrite the value in place (it may live in the initial stack
     * block that /proc/PID/environ shows), then drop the entry. */
    memset(eq + 1, 'x', strlen(eq + 1));
    unsetenv(name);
    /* unsetenv shifted the array: look at index i again. */
  }
  /* A second call (a process making a second sandbox config) keeps the
   * strings of the first, now in copy; the old array goes. */
  al_free(g_secrets);
  g_secrets = copy;
  return 0;
}

static int cloexec_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *de;
  int self;
  int rc = 0;

  if (d == NULL) {
    return -errno;
  }
  self = dirfd(d);
  while ((de = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(de->d_name, &end, 10);
    int fl;

    if (*end != '\0' || fd < 3 || fd == self) {
      continue;
    }
    fl = fcntl((int)fd, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC) &&
        fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC) != 0 && rc == 0) {
      rc = -errno;
    }
  }
  closedir(d);
  return rc;
}

int al_sandbox_harden_process(void) {
  struct rlimit core = {0, 0};
  int rc = 0;
  int r;

  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    rc = -errno;
  }
  if (setrlimit(RLIMIT_CORE, &core) != 0 && rc == 0) {
    rc = -errno;
  }
  /* A tool's reader that goes away must not kill us. */
  signal(SIGPIPE, SIG_IGN);
  r = scrub_environ();
  if (r != 0 && rc == 0) {
    rc = r;
  }
  r = cloexec_fds();
  if (r != 0 && rc == 0) {
    rc = r;
  }
  return rc;
}
