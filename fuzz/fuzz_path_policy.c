/* libFuzzer target: the file tools' path policy (RELIABILITY.md §3
 * `path_policy`), differential against a reference built from realpath(3)
 * and plain prefix checks on a synthetic tree:
 *
 *   T/ws/            the allowed root (file, sub/inner, secret/key)
 *   T/ws/secret/     a denied path inside it
 *   T/ws/link -> T/out/canary, T/ws/dl -> ../out, T/ws/in -> sub,
 *   T/ws/loop -> loop, T/ws/sl -> secret   (symlinks)
 *   T/out/canary     outside
 *
 * The input is a path as a model would give it (relative to ws or
 * absolute), one byte first choosing read (existing) or write (create).
 * Whatever the policy accepts must be: absolute and normalized, inside ws,
 * outside ws/secret, and for reads exactly realpath's answer, and opening
 * it must land on that same file. Whatever the reference accepts for a read
 * the policy accepts too. Any disagreement aborts.
 * fuzz-args: -max_len=256 -dict=path.dict */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/tools.h"

static char top[64];
static char ws[128];
static char secret[160];
static al_pathpolicy_t pol;

static void mk(const char *rel, int dir, const char *link) {
  char p[256];

  snprintf(p, sizeof(p), "%s/%s", top, rel);
  if (link != NULL) {
    if (symlink(link, p) != 0) {
      abort();
    }
  } else if (dir) {
    if (mkdir(p, 0755) != 0) {
      abort();
    }
  } else {
    FILE *f = fopen(p, "w");

    if (f == NULL) {
      abort();
    }
    fputs("x\n", f);
    fclose(f);
  }
}

static void cleanup(void) {
  char cmd[128];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
  if (system(cmd) != 0) {
    /* nothing more to do */
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char out[200];
  const char *denied[1];
  char *r;

  (void)argc;
  (void)argv;
  snprintf(top, sizeof(top), "/tmp/al-fuzz-pp-XXXXXX");
  if (mkdtemp(top) == NULL) {
    abort();
  }
  r = realpath(top, NULL);
  snprintf(top, sizeof(top), "%s", r);
  free(r);
  atexit(cleanup);
  mk("ws", 1, NULL);
  mk("out", 1, NULL);
  mk("out/canary", 0, NULL);
  mk("ws/file", 0, NULL);
  mk("ws/sub", 1, NULL);
  mk("ws/sub/inner", 0, NULL);
  mk("ws/secret", 1, NULL);
  mk("ws/secret/key", 0, NULL);
  snprintf(out, sizeof(out), "%s/out/canary", top);
  mk("ws/link", 0, out);
  mk("ws/dl", 0, "../out");
  mk("ws/in", 0, "sub");
  mk("ws/loop", 0, "loop");
  mk("ws/sl", 0, "secret");
  snprintf(ws, sizeof(ws), "%s/ws", top);
  snprintf(secret, sizeof(secret), "%s/ws/secret", top);
  denied[0] = secret;
  al__pathpolicy_init(&pol);
  if (al__pathpolicy_set(&pol, ws, NULL, 0, denied, 1) != 0) {
    abort();
  }
  return 0;
}

static int under(const char *rule, const char *p) {
  size_t n = strlen(rule);

  return strncmp(rule, p, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static int normalized(const char *p) {
  size_t n = strlen(p);

  return p[0] == '/' && strstr(p, "//") == NULL &&
         strstr(p, "/./") == NULL && strstr(p, "/../") == NULL &&
         !(n >= 2 && strcmp(p + n - 2, "/.") == 0) &&
         !(n >= 3 && strcmp(p + n - 3, "/..") == 0) &&
         (n == 1 || p[n - 1] != '/');
}

static void fail(const char *what, const char *path, const char *real) {
  fprintf(stderr, "path_policy: %s: path '%s' -> '%s'\n", what, path,
          real != NULL ? real : "(refused)");
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[300];
  char abs[700];
  al_path_mode_t mode;
  al_path_t rp;
  al_buf_t err;
  char *ref;
  int rc;

  if (size < 2 || size > 256 || memchr(data + 1, '\0', size - 1) != NULL) {
    return 0;
  }
  mode = (data[0] & 1) ? AL_PATH_CREATE : AL_PATH_EXISTING;
  memcpy(path, data + 1, size - 1);
  path[size - 1] = '\0';
  snprintf(abs, sizeof(abs), "%s%s%s", path[0] == '/' ? "" : ws,
           path[0] == '/' ? "" : "/", path);
  al_buf_init(&err, 4096);
  rc = al__pathpolicy_resolve(&pol, path, mode, &rp, &err);
  ref = mode == AL_PATH_EXISTING ? realpath(abs, NULL) : NULL;
  if (rc == 0) {
    if (rp.real == NULL || !normalized(rp.real)) {
      fail("not absolute and normalized", path, rp.real);
    }
    if (!under(ws, rp.real) || under(secret, rp.real)) {
      fail("accepted outside the root or inside the denied path", path,
           rp.real);
    }
    if (mode == AL_PATH_EXISTING) {
      int fd;

      if (ref == NULL || strcmp(ref, rp.real) != 0) {
        fail("differs from realpath", path, rp.real);
      }
      fd = al__pathpolicy_open(&pol, rp.real, O_RDONLY | O_NONBLOCK, 0, &err);
      if (fd >= 0) {
        char lp[64];
        char got[PATH_MAX];
        ssize_t n;

        snprintf(lp, sizeof(lp), "/proc/self/fd/%d", fd);
        n = readlink(lp, got, sizeof(got) - 1);
        close(fd);
        if (n <= 0) {
          abort();
        }
        got[n] = '\0';
        if (strcmp(got, rp.real) != 0) {
          fail("opened another file", path, got);
        }
      } else if (fd == UV_EACCES) {
        fail("accepted by resolve, refused by open", path, rp.real);
      }
    }
    al_free(rp.real);
  } else if (mode == AL_PATH_EXISTING && ref != NULL && under(ws, ref) &&
             !under(secret, ref) && rc == UV_EACCES) {
    fail("refused a path the reference allows", path, ref);
  }
  free(ref);
  al_buf_free(&err);
  return 0;
}
