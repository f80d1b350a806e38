/* The `context:` section of the configuration (docs/context.md,
 * docs/config.md): kept as JSON with positions by the loader, checked and
 * applied here to the agent's options. Every problem names FILE:LINE:COL. */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "config/context.h"

static int bad(const al_config_t *cfg, const char *key, char *why,
               size_t why_len, const char *what) {
  char path[96];
  const char *pos;

  snprintf(path, sizeof(path), "context.%s", key);
  pos = al_config_section_pos(cfg, path);
  snprintf(why, why_len, "%s: context.%s %s", pos != NULL ? pos : "config",
           key, what);
  return AL_ECONFIG;
}

int al__config_context_apply(const al_config_t *cfg, al_agent_options_t *o,
                             char *why, size_t why_len) {
  const json_t *sec = al_config_section(cfg, "context");
  const char *k;
  const json_t *v;

  if (sec == NULL) {
    return 0;
  }
  if (!json_is_object(sec)) {
    return bad(cfg, "", why, why_len, "must be a mapping");
  }
  json_object_foreach((json_t *)sec, k, v) {
    if (strcmp(k, "window") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 1024 ||
          json_integer_value(v) > 1000000000) {
        return bad(cfg, k, why, why_len, "must be a number of tokens, "
                   "1024..1000000000");
      }
      if (o->context_window == 0) { /* --context-window wins */
        o->context_window = (int64_t)json_integer_value(v);
      }
    } else if (strcmp(k, "micro_min_tokens") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < -1) {
        return bad(cfg, k, why, why_len,
                   "must be a number of tokens (-1: never)");
      }
      if (o->micro_min_tokens == 0) {
        o->micro_min_tokens = (int64_t)json_integer_value(v);
      }
    } else if (strcmp(k, "max_messages") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 0 ||
          json_integer_value(v) > 1000000) {
        return bad(cfg, k, why, why_len, "must be a count (0: no limit)");
      }
      if (o->max_messages == 0) {
        o->max_messages = (uint32_t)json_integer_value(v);
      }
    } else if (strcmp(k, "auto_compact") == 0 ||
               strcmp(k, "prompt_cache") == 0) {
      if (!json_is_boolean(v)) {
        return bad(cfg, k, why, why_len, "must be true or false");
      }
      if (json_is_false(v)) {
        if (k[0] == 'a') {
          o->no_auto_compact = true;
        } else {
          o->no_prompt_cache = true;
        }
      }
    } else {
      return bad(cfg, k, why, why_len,
                 "is not a setting (window, micro_min_tokens, max_messages, "
                 "auto_compact, prompt_cache)");
    }
  }
  return 0;
}
