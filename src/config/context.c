/* The `context:` section of the configuration (docs/context.md,
 * docs/config.md): kept as JSON with positions by the loader, checked and
 * applied here to the agent's options. Every problem names FILE:LINE:COL.
 * The same checks serve the daemon, which gets the section's effective
 * values from the client at session/create (docs/protocol.md). */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "config/context.h"

static const char k_keys[] = "window, micro_min_tokens, max_messages, "
                             "keep_recent, auto_compact, prompt_cache";

/* NULL when v is a valid value of setting k, else what is wrong. */
static const char *check_key(const char *k, const json_t *v) {
  json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;

  if (strcmp(k, "window") == 0) {
    return json_is_integer(v) && n >= 1024 && n <= 1000000000
               ? NULL
               : "must be a number of tokens, 1024..1000000000";
  }
  if (strcmp(k, "micro_min_tokens") == 0) {
    return json_is_integer(v) && n >= -1
               ? NULL
               : "must be a number of tokens (-1: never)";
  }
  if (strcmp(k, "max_messages") == 0) {
    return json_is_integer(v) && n >= 0 && n <= 1000000
               ? NULL
               : "must be a count (0: no limit)";
  }
  if (strcmp(k, "keep_recent") == 0) {
    return json_is_integer(v) && n >= 1 && n <= 1000000000
               ? NULL
               : "must be a number of tokens, 1..1000000000";
  }
  if (strcmp(k, "auto_compact") == 0 || strcmp(k, "prompt_cache") == 0) {
    return json_is_boolean(v) ? NULL : "must be true or false";
  }
  return "is not a setting";
}

/* Sets what v names unless a flag set it already (non-zero). */
static void apply_key(const char *k, const json_t *v, al_agent_options_t *o) {
  int64_t n = (int64_t)json_integer_value(v);

  if (strcmp(k, "window") == 0 && o->context_window == 0) {
    o->context_window = n;
  } else if (strcmp(k, "micro_min_tokens") == 0 && o->micro_min_tokens == 0) {
    o->micro_min_tokens = n;
  } else if (strcmp(k, "max_messages") == 0 && o->max_messages == 0) {
    o->max_messages = (uint32_t)n;
  } else if (strcmp(k, "keep_recent") == 0 && o->keep_recent == 0) {
    o->keep_recent = n;
  } else if (strcmp(k, "auto_compact") == 0 && json_is_false(v)) {
    o->no_auto_compact = true;
  } else if (strcmp(k, "prompt_cache") == 0 && json_is_false(v)) {
    o->no_prompt_cache = true;
  }
}

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
  char what[160];

  if (sec == NULL) {
    return 0;
  }
  if (!json_is_object(sec)) {
    return bad(cfg, "", why, why_len, "must be a mapping");
  }
  json_object_foreach((json_t *)sec, k, v) {
    const char *e = check_key(k, v);

    if (e != NULL) {
      snprintf(what, sizeof(what), "%s%s%s%s", e,
               strcmp(e, "is not a setting") == 0 ? " (" : "",
               strcmp(e, "is not a setting") == 0 ? k_keys : "",
               strcmp(e, "is not a setting") == 0 ? ")" : "");
      return bad(cfg, k, why, why_len, what);
    }
  }
  json_object_foreach((json_t *)sec, k, v) { apply_key(k, v, o); }
  return 0;
}

int al__context_from_json(const json_t *ctx, al_agent_options_t *o,
                          char *why, size_t why_len) {
  const char *k;
  const json_t *v;

  if (ctx == NULL || json_is_null(ctx)) {
    return 0;
  }
  if (!json_is_object(ctx)) {
    snprintf(why, why_len, "context must be an object of %s", k_keys);
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)ctx, k, v) {
    const char *e = check_key(k, v);

    if (e != NULL) {
      snprintf(why, why_len, "context.%.64s %s (%s)", k, e, k_keys);
      return AL_EINVAL;
    }
  }
  if (o != NULL) {
    json_object_foreach((json_t *)ctx, k, v) { apply_key(k, v, o); }
  }
  return 0;
}

json_t *al__context_to_json(const al_agent_options_t *o) {
  json_t *c = json_object();

  if (c == NULL) {
    return NULL;
  }
  if (o->context_window > 0) {
    json_object_set_new(c, "window", json_integer(o->context_window));
  }
  if (o->micro_min_tokens != 0) {
    json_object_set_new(c, "micro_min_tokens",
                        json_integer(o->micro_min_tokens));
  }
  if (o->max_messages > 0) {
    json_object_set_new(c, "max_messages", json_integer(o->max_messages));
  }
  if (o->keep_recent > 0) {
    json_object_set_new(c, "keep_recent", json_integer(o->keep_recent));
  }
  if (o->no_auto_compact) {
    json_object_set_new(c, "auto_compact", json_false());
  }
  if (o->no_prompt_cache) {
    json_object_set_new(c, "prompt_cache", json_false());
  }
  return c;
}
