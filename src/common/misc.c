/* Clock, log and version queries. */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>
#include <llhttp.h>
#include <mbedtls/version.h>
#include <uv.h>
#include <yaml.h>

#include "agentloop/version.h"
#include "common/common.h"

uint64_t al_now_ns(void) { return uv_hrtime(); }

static al_log_level_t al__log_level = AL_LOG_WARN;

/* Indexed by al_log_level_t. */
static const char *const level_names[] = {"error", "warn", "info", "debug"};

bool al_log_level_parse(const char *name, al_log_level_t *out) {
  size_t i;

  for (i = 0; name != NULL && i < sizeof(level_names) / sizeof(*level_names);
       i++) {
    if (strcmp(name, level_names[i]) == 0) {
      *out = (al_log_level_t)i;
      return true;
    }
  }
  return false;
}

void al_log_init(void) {
  al_log_level_t level;

  if (al_log_level_parse(getenv("AGENTLOOP_LOG"), &level)) {
    al__log_level = level;
  }
}

void al_log_set_level(al_log_level_t level) { al__log_level = level; }
al_log_level_t al_log_get_level(void) { return al__log_level; }

void al_log(al_log_level_t level, const char *fmt, ...) {
  va_list ap;

  if (level > al__log_level) {
    return;
  }
  fprintf(stderr, "agentloop: %s: ", level_names[level]);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

unsigned int al_version(void) { return AL_VERSION_HEX; }
const char *al_version_string(void) { return AL_VERSION_STRING; }

const char *al_version_full(void) {
  static char text[256];
  char mbed[32];

  if (text[0] == '\0') {
    mbedtls_version_get_string(mbed);
    snprintf(text, sizeof(text),
             "agentloop %s (libuv %s, mbedtls %s, jansson %s, libyaml %s, "
             "llhttp %d.%d.%d)",
             AL_VERSION_STRING, uv_version_string(), mbed, jansson_version_str(),
             yaml_get_version_string(), LLHTTP_VERSION_MAJOR,
             LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
  }
  return text;
}
