/* Shared helpers for tests (blocking file reads are fine outside a loop). */
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
