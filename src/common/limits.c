/* Limits by name (agentloop/limits.h): the one table the run flags, the
 * daemon's session/create and the configuration file all go through. */
#include "agentloop/limits.h"

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/common.h"

#define LIMIT_FIELDS(XX)                  \
  XX(reply_bytes, true)                   \
  XX(tool_input_bytes, true)              \
  XX(header_bytes, true)                  \
  XX(header_count, false)                 \
  XX(total_time_ms, false)                \
  XX(min_rate_bytes, true)                \
  XX(min_rate_window_ms, false)           \
  XX(tool_processes, false)               \
  XX(tool_memory_bytes, true)             \
  XX(file_scan_bytes, true)               \
  XX(file_time_ms, false)

static const struct {
  const char *name;
  size_t off;
  bool size; /* accepts K/M/G */
} fields[] = {
#define XX(n, sz) {#n, offsetof(al_limits_t, n), sz},
    LIMIT_FIELDS(XX)
#undef XX
};

const char *const al_limits_names[] = {
#define XX(n, sz) #n,
    LIMIT_FIELDS(XX)
#undef XX
        NULL};

int al_limits_set(al_limits_t *l, const char *name, const char *value) {
  size_t i;
  char *end;
  long long v;
  int64_t mult = 1;

  for (i = 0; i < AL_ARRAY_SIZE(fields); i++) {
    if (strcmp(fields[i].name, name) == 0) {
      break;
    }
  }
  if (i == AL_ARRAY_SIZE(fields)) {
    return AL_ENOTFOUND;
  }
  if (value == NULL || *value == '\0') {
    return AL_EINVAL;
  }
  if (strcmp(value, "none") == 0) {
    if (strcmp(name, "header_bytes") == 0) {
      return AL_EINVAL; /* the header block is always bounded */
    }
    *(int64_t *)((char *)l + fields[i].off) = -1;
    return 0;
  }
  if (*value < '0' || *value > '9') {
    return AL_EINVAL;
  }
  errno = 0;
  v = strtoll(value, &end, 10);
  if (errno != 0 || end == value) {
    return AL_EINVAL;
  }
  if (fields[i].size && *end != '\0' && end[1] == '\0') {
    switch (*end) {
    case 'k': case 'K': mult = 1024; end++; break;
    case 'm': case 'M': mult = 1024 * 1024; end++; break;
    case 'g': case 'G': mult = 1024 * 1024 * 1024; end++; break;
    default: break;
    }
  }
  if (*end != '\0' || v <= 0 || v > INT64_MAX / mult) {
    return AL_EINVAL;
  }
  *(int64_t *)((char *)l + fields[i].off) = (int64_t)v * mult;
  return 0;
}

const char *al_limits_expect(const char *name) {
  return name != NULL && strcmp(name, "header_bytes") == 0
             ? "a positive integer (K/M/G); this limit cannot be none"
             : "a positive integer (K/M/G for sizes) or none";
}

static int64_t field(const al_limits_t *l, size_t i) {
  return *(const int64_t *)((const char *)l + fields[i].off);
}

int al_limits_check_ceiling(const al_limits_t *ceiling, const al_limits_t *ask,
                            const char **name, char *why, size_t why_len) {
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(fields); i++) {
    int64_t c = field(ceiling, i);
    int64_t v = field(ask, i);

    if (c > 0 && (v < 0 || v > c)) {
      char vs[32];

      if (v < 0) {
        snprintf(vs, sizeof(vs), "none");
      } else {
        snprintf(vs, sizeof(vs), "%lld", (long long)v);
      }
      if (name != NULL) {
        *name = fields[i].name;
      }
      snprintf(why, why_len,
               "limits.%s: %s is above the daemon's ceiling of %lld (a "
               "session may lower a daemon limit, not raise it)",
               fields[i].name, vs, (long long)c);
      return AL_EINVAL;
    }
  }
  return 0;
}

void al_limits_clamp(al_limits_t *l, const al_limits_t *ceiling) {
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(fields); i++) {
    int64_t c = field(ceiling, i);
    int64_t *v = (int64_t *)((char *)l + fields[i].off);

    if (c > 0 && (*v < 0 || *v > c)) {
      *v = c;
    }
  }
}

void al_limits_overlay(al_limits_t *dst, const al_limits_t *src) {
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(fields); i++) {
    int64_t v = *(const int64_t *)((const char *)src + fields[i].off);

    if (v != 0) {
      *(int64_t *)((char *)dst + fields[i].off) = v;
    }
  }
}

int al_limits_set_kv(al_limits_t *l, const char *kv) {
  const char *eq = strchr(kv, '=');
  char name[64];

  if (eq == NULL || (size_t)(eq - kv) >= sizeof(name)) {
    return eq == NULL ? AL_EINVAL : AL_ENOTFOUND;
  }
  memcpy(name, kv, (size_t)(eq - kv));
  name[eq - kv] = '\0';
  return al_limits_set(l, name, eq + 1);
}

int al_limits_from_json(al_limits_t *l, const json_t *obj, char *why,
                        size_t why_len) {
  const char *k;
  json_t *v;
  char num[32];
  const char *text;
  int rc;

  if (obj == NULL || json_is_null(obj)) {
    return 0;
  }
  if (!json_is_object(obj)) {
    snprintf(why, why_len, "limits must be an object");
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)obj, k, v) {
    if (json_is_integer(v)) {
      snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
      text = num;
    } else if (json_is_string(v)) {
      text = json_string_value(v);
    } else {
      text = "";
    }
    rc = al_limits_set(l, k, text);
    if (rc == AL_ENOTFOUND) {
      snprintf(why, why_len, "unknown limit '%s'", k);
      return AL_EINVAL;
    }
    if (rc != 0) {
      snprintf(why, why_len, "limits.%s: %s", k, al_limits_expect(k));
      return AL_EINVAL;
    }
  }
  return 0;
}
