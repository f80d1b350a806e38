/* libFuzzer target: the two small parsers of issue 15, the limit setting
 * ("NAME=VALUE", as --limit and the config's limits: give it) and the
 * base-URL check. Each must answer (never crash) and, when it refuses,
 * say why in a NUL-terminated reason; an accepted limit is positive or
 * -1 (none). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentloop/limits.h"
#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  al_limits_t l;
  char why[160];
  size_t i;
  int rc;

  if (s == NULL) {
    return 0;
  }
  memcpy(s, data, size);
  s[size] = '\0';
  memset(&l, 0, sizeof(l));
  rc = al_limits_set_kv(&l, s);
  if (rc == 0) {
    const int64_t *f = (const int64_t *)&l;

    for (i = 0; i < sizeof(l) / sizeof(*f); i++) {
      if (f[i] < -1) {
        abort();
      }
    }
  }
  memset(why, 'x', sizeof(why));
  rc = al_http_url_check(s, why, sizeof(why));
  if (rc != 0 && memchr(why, '\0', sizeof(why)) == NULL) {
    abort();
  }
  free(s);
  return 0;
}
