/* Where the front end keeps its state (CONVENTIONS.md 7.4) and where it
 * finds the daemon to start. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "client/tui.h"

bool al__tui_state_dir(char *buf, size_t n) {
  const char *xdg = getenv("XDG_STATE_HOME");
  const char *home = getenv("HOME");
  int w;

  if (xdg != NULL && xdg[0] == '/') {
    w = snprintf(buf, n, "%s/agentloop", xdg);
  } else if (home != NULL && home[0] != '\0') {
    w = snprintf(buf, n, "%s/.local/state/agentloop", home);
  } else {
    return false;
  }
  return w > 0 && (size_t)w < n;
}

bool al__tui_history_path(char *buf, size_t n) {
  char dir[PATH_MAX];
  int w;

  if (!al__tui_state_dir(dir, sizeof(dir))) {
    return false;
  }
  w = snprintf(buf, n, "%s/history", dir);
  return w > 0 && (size_t)w < n;
}

int al__tui_mkdirs(const char *path) {
  char tmp[PATH_MAX];
  size_t len = strlen(path);
  size_t i;

  if (len == 0 || len >= sizeof(tmp)) {
    return AL_EINVAL;
  }
  memcpy(tmp, path, len + 1);
  for (i = 1; i <= len; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];

      tmp[i] = '\0';
      if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
        return -errno;
      }
      tmp[i] = c;
    }
  }
  return 0;
}

static bool executable(const char *path) {
  struct stat st;

  return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
         access(path, X_OK) == 0;
}

bool al__tui_find_daemon(char *buf, size_t n) {
  char exe[PATH_MAX];
  size_t len = sizeof(exe);
  const char *path;
  char *slash;

  /* Next to this binary first: a build tree or an install prefix runs its
   * own daemon, not whatever PATH has. */
  if (uv_exepath(exe, &len) == 0 && (slash = strrchr(exe, '/')) != NULL) {
    *slash = '\0';
    if ((size_t)snprintf(buf, n, "%s/agentloopd", exe) < n &&
        executable(buf)) {
      return true;
    }
  }
  path = getenv("PATH");
  while (path != NULL && *path != '\0') {
    size_t seg = strcspn(path, ":");

    if (seg > 0 &&
        (size_t)snprintf(buf, n, "%.*s/agentloopd", (int)seg, path) < n &&
        executable(buf)) {
      return true;
    }
    path += seg;
    if (*path == ':') {
      path++;
    }
  }
  return false;
}
