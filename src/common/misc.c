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

void al_log_init(void) {
  const char *v = getenv("AGENTLOOP_LOG");

  if (v == NULL) {
    return;
  }
  if (strcmp(v, "error") == 0) {
    al__log_level = AL_LOG_ERROR;
  } else if (strcmp(v, "warn") == 0) {
    al__log_level = AL_LOG_WARN;
  } else if (strcmp(v, "info") == 0) {
    al__log_level = AL_LOG_INFO;
  } else if (strcmp(v, "debug") == 0) {
    al__log_level = AL_LOG_DEBUG;
  }
}

void al_log_set_level(al_log_level_t level) { al__log_level = level; }
al_log_level_t al_log_get_level(void) { return al__log_level; }

void al_log(al_log_level_t level, const char *fmt, ...) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  va_list ap;

  if (level > al__log_level) {
    return;
  }
  fprintf(stderr, "agentloop: %s: ", names[level]);
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
