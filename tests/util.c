/* Shared helpers for tests (blocking file reads are fine outside a loop). */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "test.h"

char *al_test_read_file(const char *path, size_t *len_out) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t cap = 0;
  size_t len = 0;
  size_t n;

  if (f == NULL) {
    return NULL;
  }
  for (;;) {
    if (cap - len < 4096) {
      char *p;
      cap = cap ? cap * 2 : 8192;
      p = realloc(buf, cap + 1);
      if (p == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = p;
    }
    n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) {
      break;
    }
  }
  fclose(f);
  buf[len] = '\0';
  if (len_out != NULL) {
    *len_out = len;
  }
  return buf;
}

const char *al_test_data_path(const char *rel) {
  static char path[4096];

  snprintf(path, sizeof(path), "%s/%s", AL_TEST_DATA_DIR, rel);
  return path;
}

/* ---- al_test_tree_listing, al_test_child_with ------------------------- */

static al_buf_t g_list;
static size_t g_root_len;

static int list_entry(const char *path, const struct stat *st, int flag,
                      struct FTW *f) {
  (void)flag;
  (void)f;
  al_buf_printf(&g_list, "%s %o %lld\n", path + g_root_len,
                (unsigned)st->st_mode, S_ISREG(st->st_mode)
                                           ? (long long)st->st_size
                                           : 0LL);
  return 0;
}

/* nftw walks an unchanged tree in a stable order. */
char *al_test_tree_listing(const char *root) {
  al_buf_init(&g_list, 1 << 20);
  g_root_len = strlen(root);
  ASSERT_EQ(nftw(root, list_entry, 16, FTW_PHYS), 0);
  return g_list.data != NULL ? g_list.data : al_strdup("");
}

int al_test_child_with(int ppid, const char *needle) {
  char p[300], buf[4096];
  struct dirent *e;
  int found = 0;
  DIR *d = opendir("/proc");

  ASSERT_NOT_NULL(d);
  while (found == 0 && (e = readdir(d)) != NULL) {
    FILE *f;
    size_t n, i;
    long pp = -1;

    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    snprintf(p, sizeof(p), "/proc/%s/stat", e->d_name);
    f = fopen(p, "r");
    if (f == NULL) {
      continue;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* pid (comm) state ppid: comm may hold spaces and parentheses. */
    if (strrchr(buf, ')') == NULL ||
        sscanf(strrchr(buf, ')') + 2, "%*c %ld", &pp) != 1 || pp != ppid) {
      continue;
    }
    snprintf(p, sizeof(p), "/proc/%s/cmdline", e->d_name);
    f = fopen(p, "r");
    if (f == NULL) {
      continue;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i < n; i++) {
      buf[i] = buf[i] == '\0' ? ' ' : buf[i];
    }
    buf[n] = '\0';
    if (strstr(buf, needle) != NULL) {
      found = atoi(e->d_name);
    }
  }
  closedir(d);
  return found;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int al_test_rm_tree(const char *root) {
  struct stat st;

  if (lstat(root, &st) != 0 && errno == ENOENT) {
    return 0;
  }
  return nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
