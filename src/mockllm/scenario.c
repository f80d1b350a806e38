/* Scenario loader: YAML (libyaml document API) -> al_mockllm_scenario_t.
 *
 * The loader is strict: unknown keys, wrong types and out-of-range values are
 * errors reported as "NAME:LINE:COLUMN: reason" (1-based), because a typo in
 * a fault script would otherwise silently test the wrong thing. Once every
 * response is parsed, each one is rendered to bytes (render.c) so that
 * playback never touches YAML or JSON. docs/mockllm.md is the reference for
 * the format; keep the two in step. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <mbedtls/base64.h>
#include <yaml.h>

#include "common/yamlnode.h"
#include "mockllm/mockllm_int.h"

typedef struct {
  const char *name;
  yaml_document_t *doc;
  char *err;
  size_t err_len;
  /* Scenario-level defaults applied to every response. */
  char *model;
  int64_t delay_ms;
  int64_t first_byte_delay_ms;
  al__mock_xfer_t xfer;
} ctx_t;

static int fail(ctx_t *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(ctx_t *c, const yaml_node_t *n, const char *fmt, ...) {
  va_list ap;
  int off;

  if (c->err == NULL || c->err_len == 0) {
    return AL_EPARSE;
  }
  off = snprintf(c->err, c->err_len, "%s:%lu:%lu: ", c->name,
                 n ? (unsigned long)n->start_mark.line + 1 : 1ul,
                 n ? (unsigned long)n->start_mark.column + 1 : 1ul);
  if (off >= 0 && (size_t)off < c->err_len) {
    va_start(ap, fmt);
    vsnprintf(c->err + off, c->err_len - (size_t)off, fmt, ap);
    va_end(ap);
  }
  return AL_EPARSE;
}

static yaml_node_t *node(ctx_t *c, int id) {
  return yaml_document_get_node(c->doc, id);
}

static const char *node_kind(const yaml_node_t *n) {
  switch (n->type) {
    case YAML_SCALAR_NODE:
      return "a scalar";
    case YAML_SEQUENCE_NODE:
      return "a list";
    case YAML_MAPPING_NODE:
      return "a mapping";
    default:
      return "nothing";
  }
}

static const char *scalar(const yaml_node_t *n) {
  return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value
                                     : NULL;
}

static bool key_is(const yaml_node_t *k, const char *s) {
  return k->type == YAML_SCALAR_NODE &&
         strcmp((const char *)k->data.scalar.value, s) == 0;
}

/* libyaml accepts a key given twice in one mapping (YAML forbids it). The
 * parsers below store each key's value as they meet it, so the second one
 * would silently replace the first -- and leak what it had allocated, such
 * as a reply's content or a response's headers. Like a typo, it is an
 * error. Scenario mappings hold a handful of keys, so the scan is cheap. */
static int unique_keys(ctx_t *c, const yaml_node_t *n) {
  yaml_node_pair_t *p;
  yaml_node_pair_t *q;

  for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);

    if (k->type != YAML_SCALAR_NODE) {
      continue;
    }
    for (q = n->data.mapping.pairs.start; q < p; q++) {
      yaml_node_t *k2 = node(c, q->key);

      if (k2->type == YAML_SCALAR_NODE &&
          k2->data.scalar.length == k->data.scalar.length &&
          memcmp(k2->data.scalar.value, k->data.scalar.value,
                 k->data.scalar.length) == 0) {
        return fail(c, k, "duplicate key '%s'", scalar(k));
      }
    }
  }
  return 0;
}

static int want_mapping(ctx_t *c, const yaml_node_t *n, const char *what) {
  if (n->type != YAML_MAPPING_NODE) {
    return fail(c, n, "%s must be a mapping, found %s", what, node_kind(n));
  }
  return unique_keys(c, n);
}

static int get_str(ctx_t *c, const yaml_node_t *n, const char *what,
                   char **out) {
  if (n->type != YAML_SCALAR_NODE) {
    return fail(c, n, "%s must be a string, found %s", what, node_kind(n));
  }
  al_free(*out);
  *out = al_strndup((const char *)n->data.scalar.value, n->data.scalar.length);
  return *out == NULL ? AL_ENOMEM : 0;
}

/* Non-negative decimal integer no larger than max. */
static int get_uint(ctx_t *c, const yaml_node_t *n, const char *what,
                    uint64_t max, int64_t *out) {
  const char *s = scalar(n);
  char *end;
  unsigned long long v;

  if (s == NULL || *s == '\0' || *s < '0' || *s > '9' ||
      n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
    return fail(c, n, "%s must be a non-negative integer", what);
  }
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) {
    return fail(c, n, "%s must be an integer between 0 and %llu", what,
                (unsigned long long)max);
  }
  *out = (int64_t)v;
  return 0;
}

static int get_u32(ctx_t *c, const yaml_node_t *n, const char *what,
                   uint32_t min, uint32_t max, uint32_t *out) {
  int64_t v;
  int err = get_uint(c, n, what, max, &v);

  if (err != 0) {
    return err;
  }
  if (v < (int64_t)min) {
    return fail(c, n, "%s must be at least %u", what, min);
  }
  *out = (uint32_t)v;
  return 0;
}

static int get_bool(ctx_t *c, const yaml_node_t *n, const char *what,
                    bool *out) {
  const char *s = scalar(n);

  if (s != NULL && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
    if (strcmp(s, "true") == 0 || strcmp(s, "yes") == 0 ||
        strcmp(s, "on") == 0) {
      *out = true;
      return 0;
    }
    if (strcmp(s, "false") == 0 || strcmp(s, "no") == 0 ||
        strcmp(s, "off") == 0) {
      *out = false;
      return 0;
    }
  }
  return fail(c, n, "%s must be true or false", what);
}

/* YAML -> JSON for tool inputs: plain scalars are typed the way YAML 1.2's
 * core schema types them; quoted scalars are always strings. */
static int to_json(ctx_t *c, const yaml_node_t *n, json_t **out) {
  json_t *j = NULL;

  if (n->type == YAML_SCALAR_NODE) {
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;

    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
      char *end;

      if (len == 0 || strcmp(s, "null") == 0 || strcmp(s, "~") == 0) {
        j = json_null();
      } else if (strcmp(s, "true") == 0) {
        j = json_true();
      } else if (strcmp(s, "false") == 0) {
        j = json_false();
      } else {
        long long iv;
        double dv;

        errno = 0;
        iv = strtoll(s, &end, 10);
        if (errno == 0 && *end == '\0' && end != s) {
          j = json_integer(iv);
        } else {
          errno = 0;
          dv = strtod(s, &end);
          if (errno == 0 && *end == '\0' && end != s &&
              strpbrk(s, "0123456789") != NULL && strpbrk(s, "xXnN") == NULL) {
            j = json_real(dv);
          }
        }
      }
    }
    if (j == NULL) {
      j = json_stringn(s, len);
      if (j == NULL) {
        return fail(c, n, "string is not valid UTF-8");
      }
    }
  } else if (n->type == YAML_SEQUENCE_NODE) {
    yaml_node_item_t *it;

    j = json_array();
    for (it = n->data.sequence.items.start;
         j != NULL && it < n->data.sequence.items.top; it++) {
      json_t *v;
      int err = to_json(c, node(c, *it), &v);

      if (err != 0) {
        json_decref(j);
        return err;
      }
      json_array_append_new(j, v);
    }
  } else if (n->type == YAML_MAPPING_NODE) {
    yaml_node_pair_t *p;

    j = json_object();
    for (p = n->data.mapping.pairs.start;
         j != NULL && p < n->data.mapping.pairs.top; p++) {
      yaml_node_t *k = node(c, p->key);
      json_t *v;
      int err;

      if (k->type != YAML_SCALAR_NODE) {
        json_decref(j);
        return fail(c, k, "object keys must be scalars");
      }
      err = to_json(c, node(c, p->value), &v);
      if (err != 0) {
        json_decref(j);
        return err;
      }
      if (json_object_set_new(j, (const char *)k->data.scalar.value, v) !=
          0) {
        json_decref(j);
        return fail(c, k, "object key is not valid UTF-8");
      }
    }
  }
  if (j == NULL) {
    return AL_ENOMEM;
  }
  *out = j;
  return 0;
}

static int parse_text_opts(ctx_t *c, const yaml_node_t *k, const yaml_node_t *v,
                           al__mock_block_t *b, bool *handled) {
  *handled = true;
  if (key_is(k, "chunks")) {
    return get_u32(c, v, "chunks", 1, 100000000, &b->chunks);
  }
  if (key_is(k, "chunk_size")) {
    return get_u32(c, v, "chunk_size", 1, 1u << 30, &b->chunk_size);
  }
  if (key_is(k, "delay_ms")) {
    return get_uint(c, v, "delay_ms", 86400000, &b->delay_ms);
  }
  *handled = false;
  return 0;
}

static int parse_tool_use(ctx_t *c, const yaml_node_t *n, al__mock_block_t *b,
                          size_t ri, size_t bi) {
  yaml_node_pair_t *p;
  bool have_input = false;
  int err = want_mapping(c, n, "tool_use");

  if (err != 0) {
    return err;
  }
  b->pieces = 1;
  for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "id")) {
      err = get_str(c, v, "tool_use.id", &b->id);
    } else if (key_is(k, "name")) {
      err = get_str(c, v, "tool_use.name", &b->name);
    } else if (key_is(k, "input")) {
      json_t *j;

      if (have_input) {
        return fail(c, k, "give either input or input_json, not both");
      }
      have_input = true;
      err = to_json(c, v, &j);
      if (err == 0) {
        if (!json_is_object(j)) {
          json_decref(j);
          return fail(c, v, "tool_use.input must be a mapping");
        }
        b->input = al__mockllm_dumps(j, NULL);
        json_decref(j);
        if (b->input == NULL) {
          return AL_ENOMEM;
        }
      }
    } else if (key_is(k, "input_json")) {
      if (have_input) {
        return fail(c, k, "give either input or input_json, not both");
      }
      have_input = true;
      err = get_str(c, v, "tool_use.input_json", &b->input);
    } else if (key_is(k, "pieces")) {
      err = get_u32(c, v, "tool_use.pieces", 1, 100000000, &b->pieces);
    } else if (key_is(k, "delay_ms")) {
      err = get_uint(c, v, "delay_ms", 86400000, &b->delay_ms);
    } else {
      return fail(c, k, "unknown key '%s' in tool_use (expected id, name, "
                  "input, input_json, pieces, delay_ms)", scalar(k) ? scalar(k) : "?");
    }
    if (err != 0) {
      return err;
    }
  }
  if (b->name == NULL) {
    return fail(c, n, "tool_use needs a name");
  }
  if (b->id == NULL) {
    char id[64];

    snprintf(id, sizeof(id), "toolu_mock_%zu_%zu", ri + 1, bi);
    b->id = al_strdup(id);
  }
  if (b->input == NULL) {
    b->input = al_strdup("{}");
  }
  return b->id == NULL || b->input == NULL ? AL_ENOMEM : 0;
}

static int parse_block(ctx_t *c, const yaml_node_t *n, al__mock_block_t *b,
                       size_t ri, size_t bi) {
  yaml_node_pair_t *p;
  const yaml_node_t *kind_key = NULL;
  int err;

  b->delay_ms = -1;
  if (n->type == YAML_SCALAR_NODE && strcmp(scalar(n), "ping") == 0) {
    b->kind = AL__BLK_PING;
    return 0;
  }
  if (n->type != YAML_MAPPING_NODE) {
    return fail(c, n, "a content block must be a mapping (text, thinking, "
                "redacted_thinking, tool_use, repeat_text or ping), found %s",
                node_kind(n));
  }
  err = unique_keys(c, n);
  if (err != 0) {
    return err;
  }
  for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);
    bool is_kind = key_is(k, "text") || key_is(k, "thinking") ||
                   key_is(k, "redacted_thinking") || key_is(k, "tool_use") ||
                   key_is(k, "repeat_text") || key_is(k, "ping");
    bool handled;

    if (is_kind) {
      if (kind_key != NULL) {
        return fail(c, k, "a content block has exactly one of text, thinking, "
                    "redacted_thinking, tool_use, repeat_text, ping");
      }
      kind_key = k;
      if (key_is(k, "text")) {
        b->kind = AL__BLK_TEXT;
        err = get_str(c, v, "text", &b->text);
      } else if (key_is(k, "thinking")) {
        b->kind = AL__BLK_THINKING;
        err = get_str(c, v, "thinking", &b->text);
      } else if (key_is(k, "redacted_thinking")) {
        b->kind = AL__BLK_REDACTED;
        err = get_str(c, v, "redacted_thinking", &b->text);
      } else if (key_is(k, "tool_use")) {
        b->kind = AL__BLK_TOOL_USE;
        err = parse_tool_use(c, v, b, ri, bi);
      } else if (key_is(k, "ping")) {
        bool on;

        b->kind = AL__BLK_PING;
        err = get_bool(c, v, "ping", &on);
        if (err == 0 && !on) {
          return fail(c, v, "ping: false makes no sense; remove the block");
        }
      } else {
        yaml_node_pair_t *q;
        bool have_count = false;

        b->kind = AL__BLK_REPEAT_TEXT;
        err = want_mapping(c, v, "repeat_text");
        for (q = v->data.mapping.pairs.start;
             err == 0 && q < v->data.mapping.pairs.top; q++) {
          yaml_node_t *k2 = node(c, q->key);
          yaml_node_t *v2 = node(c, q->value);

          if (key_is(k2, "count")) {
            int64_t cnt;

            have_count = true;
            err = get_uint(c, v2, "repeat_text.count", 1000000000000ull, &cnt);
            if (err == 0 && cnt < 1) {
              err = fail(c, v2, "repeat_text.count must be at least 1");
            }
            b->count = (uint64_t)cnt;
          } else if (key_is(k2, "text")) {
            err = get_str(c, v2, "repeat_text.text", &b->text);
          } else if (key_is(k2, "delay_ms")) {
            err = get_uint(c, v2, "delay_ms", 86400000, &b->delay_ms);
          } else {
            err = fail(c, k2, "unknown key '%s' in repeat_text (expected "
                       "count, text, delay_ms)", scalar(k2) ? scalar(k2) : "?");
          }
        }
        if (err == 0 && (!have_count || b->text == NULL || b->text[0] == 0)) {
          err = fail(c, v, "repeat_text needs count and a non-empty text");
        }
      }
      if (err != 0) {
        return err;
      }
      continue;
    }
    if (key_is(k, "signature")) {
      err = get_str(c, v, "signature", &b->signature);
      if (err != 0) {
        return err;
      }
      continue;
    }
    err = parse_text_opts(c, k, v, b, &handled);
    if (err != 0) {
      return err;
    }
    if (!handled) {
      return fail(c, k, "unknown key '%s' in a content block",
                  scalar(k) ? scalar(k) : "?");
    }
  }
  if (kind_key == NULL) {
    return fail(c, n, "a content block needs one of text, thinking, "
                "redacted_thinking, tool_use, repeat_text, ping");
  }
  if (b->chunks != 0 && b->chunk_size != 0) {
    return fail(c, n, "give either chunks or chunk_size, not both");
  }
  if ((b->chunks != 0 || b->chunk_size != 0) && b->kind != AL__BLK_TEXT &&
      b->kind != AL__BLK_THINKING) {
    return fail(c, n, "chunks/chunk_size apply to text and thinking blocks");
  }
  if (b->signature != NULL && b->kind != AL__BLK_THINKING) {
    return fail(c, n, "signature belongs to a thinking block");
  }
  if (b->kind == AL__BLK_THINKING && b->signature == NULL) {
    b->signature = al_strdup("mock-signature");
    if (b->signature == NULL) {
      return AL_ENOMEM;
    }
  }
  return 0;
}

static int parse_usage(ctx_t *c, const yaml_node_t *n, al__mock_response_t *r) {
  yaml_node_pair_t *p;
  int err = want_mapping(c, n, "usage");

  for (p = n->data.mapping.pairs.start; err == 0 && p < n->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);
    uint64_t max = 1000000000000ull;

    if (key_is(k, "input_tokens")) {
      err = get_uint(c, v, "usage.input_tokens", max, &r->in_tokens);
    } else if (key_is(k, "output_tokens")) {
      err = get_uint(c, v, "usage.output_tokens", max, &r->out_tokens);
    } else if (key_is(k, "cache_creation_input_tokens")) {
      err = get_uint(c, v, "usage.cache_creation_input_tokens", max,
                     &r->cache_create);
    } else if (key_is(k, "cache_read_input_tokens")) {
      err = get_uint(c, v, "usage.cache_read_input_tokens", max,
                     &r->cache_read);
    } else {
      err = fail(c, k, "unknown key '%s' in usage (expected input_tokens, "
                 "output_tokens, cache_creation_input_tokens, "
                 "cache_read_input_tokens)", scalar(k) ? scalar(k) : "?");
    }
  }
  return err;
}

static const char *const stop_reasons[] = {
    "end_turn", "max_tokens", "stop_sequence", "tool_use",
    "pause_turn", "refusal", "model_context_window_exceeded", NULL};

static int parse_reply(ctx_t *c, const yaml_node_t *n, al__mock_response_t *r,
                       size_t ri) {
  yaml_node_pair_t *p;
  int err = want_mapping(c, n, "reply");

  for (p = n->data.mapping.pairs.start; err == 0 && p < n->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "content")) {
      size_t cnt, i;

      if (v->type != YAML_SEQUENCE_NODE) {
        return fail(c, v, "reply.content must be a list of blocks, found %s",
                    node_kind(v));
      }
      cnt = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
      r->blocks = al_calloc(cnt ? cnt : 1, sizeof(*r->blocks));
      if (r->blocks == NULL) {
        return AL_ENOMEM;
      }
      for (i = 0; i < cnt; i++) {
        r->nblocks = i + 1;
        err = parse_block(c, node(c, v->data.sequence.items.start[i]),
                          &r->blocks[i], ri, i);
        if (err != 0) {
          return err;
        }
      }
    } else if (key_is(k, "model")) {
      err = get_str(c, v, "reply.model", &r->model);
    } else if (key_is(k, "id")) {
      err = get_str(c, v, "reply.id", &r->id);
    } else if (key_is(k, "stop_reason")) {
      size_t i;

      err = get_str(c, v, "reply.stop_reason", &r->stop_reason);
      for (i = 0; err == 0 && stop_reasons[i] != NULL; i++) {
        if (strcmp(stop_reasons[i], r->stop_reason) == 0) {
          break;
        }
      }
      if (err == 0 && stop_reasons[i] == NULL) {
        err = fail(c, v, "unknown stop_reason '%s' (expected end_turn, "
                   "max_tokens, stop_sequence, tool_use, pause_turn, refusal, "
                   "model_context_window_exceeded)", r->stop_reason);
      }
    } else if (key_is(k, "usage")) {
      err = parse_usage(c, v, r);
    } else {
      err = fail(c, k, "unknown key '%s' in reply (expected content, model, "
                 "id, stop_reason, usage)", scalar(k) ? scalar(k) : "?");
    }
  }
  return err;
}

static int parse_fault(ctx_t *c, const yaml_node_t *n, al__mock_response_t *r) {
  yaml_node_pair_t *p;
  int err = want_mapping(c, n, "fault");
  int modes = 0;

  for (p = n->data.mapping.pairs.start; err == 0 && p < n->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "status")) {
      int64_t st;

      err = get_uint(c, v, "fault.status", 599, &st);
      if (err == 0 && (st < 200 || st == 204 || st == 304)) {
        err = fail(c, v, "fault.status must be 200..599 (not 204/304)");
      }
      r->status = (int)st;
      modes += st != 200;
    } else if (key_is(k, "retry_after")) {
      err = get_uint(c, v, "fault.retry_after", 86400, &r->retry_after);
    } else if (key_is(k, "error_type")) {
      err = get_str(c, v, "fault.error_type", &r->error_type);
    } else if (key_is(k, "error_message")) {
      err = get_str(c, v, "fault.error_message", &r->error_message);
    } else if (key_is(k, "error_code")) {
      err = get_str(c, v, "fault.error_code", &r->error_code);
    } else if (key_is(k, "error_event_after")) {
      err = get_uint(c, v, "fault.error_event_after", 1000000000000ull,
                     &r->error_event_after);
      modes++;
    } else if (key_is(k, "error_event_type")) {
      err = get_str(c, v, "fault.error_event_type", &r->error_event_type);
    } else if (key_is(k, "reset_after_bytes")) {
      err = get_uint(c, v, "fault.reset_after_bytes", 1000000000000ull,
                     &r->reset_after_bytes);
      modes++;
    } else if (key_is(k, "stall_after_headers")) {
      err = get_bool(c, v, "fault.stall_after_headers", &r->stall_after_headers);
      modes += r->stall_after_headers;
    } else if (key_is(k, "pings_only")) {
      err = get_bool(c, v, "fault.pings_only", &r->pings_only);
      modes += r->pings_only;
    } else if (key_is(k, "ping_interval_ms")) {
      err = get_u32(c, v, "fault.ping_interval_ms", 1, 86400000,
                    &r->ping_interval_ms);
    } else if (key_is(k, "drip")) {
      yaml_node_pair_t *q;

      err = want_mapping(c, v, "fault.drip");
      for (q = v->data.mapping.pairs.start;
           err == 0 && q < v->data.mapping.pairs.top; q++) {
        yaml_node_t *k2 = node(c, q->key);
        yaml_node_t *v2 = node(c, q->value);

        if (key_is(k2, "bytes")) {
          err = get_u32(c, v2, "drip.bytes", 1, 1u << 20, &r->drip_bytes);
        } else if (key_is(k2, "interval_ms")) {
          err = get_u32(c, v2, "drip.interval_ms", 0, 86400000,
                        &r->drip_interval_ms);
        } else if (key_is(k2, "seed")) {
          int64_t seed = 0;

          err = get_uint(c, v2, "drip.seed", 1000000000000ull, &seed);
          r->drip_seed = (uint64_t)seed;
        } else {
          err = fail(c, k2, "unknown key '%s' in drip (expected bytes, "
                     "interval_ms, seed)", scalar(k2) ? scalar(k2) : "?");
        }
      }
      if (err == 0 && r->drip_bytes == 0) {
        err = fail(c, v, "drip needs bytes");
      }
    } else {
      err = fail(c, k, "unknown key '%s' in fault (expected status, "
                 "retry_after, error_type, error_message, error_code, "
                 "error_event_after, error_event_type, reset_after_bytes, "
                 "stall_after_headers, pings_only, ping_interval_ms, drip)",
                 scalar(k) ? scalar(k) : "?");
    }
  }
  if (err == 0 && modes > 1 && r->status != 0 && r->status != 200) {
    err = fail(c, n, "fault.status cannot be combined with stream faults");
  }
  if (err == 0 && r->stall_after_headers && r->pings_only) {
    err = fail(c, n, "choose stall_after_headers or pings_only, not both");
  }
  return err;
}

static int parse_expect(ctx_t *c, const yaml_node_t *n,
                        al__mock_response_t *r);

static int parse_headers(ctx_t *c, const yaml_node_t *n, al__mock_response_t *r) {
  yaml_node_pair_t *p;
  int err = want_mapping(c, n, "headers");

  if (err != 0) {
    return err;
  }
  r->headers = json_object();
  if (r->headers == NULL) {
    return AL_ENOMEM;
  }
  for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);
    const char *ks = scalar(k);
    const char *vs = scalar(v);

    if (ks == NULL || vs == NULL || strpbrk(ks, "\r\n: ") != NULL ||
        strpbrk(vs, "\r\n") != NULL || *ks == '\0') {
      return fail(c, k, "headers must map header names to single-line values");
    }
    json_object_set_new(r->headers, ks, json_string(vs));
  }
  return 0;
}

static int parse_xfer(ctx_t *c, const yaml_node_t *v, al__mock_xfer_t *out) {
  const char *s = scalar(v);

  if (s != NULL && strcmp(s, "chunked") == 0) {
    *out = AL__XFER_CHUNKED;
  } else if (s != NULL && strcmp(s, "close") == 0) {
    *out = AL__XFER_CLOSE;
  } else {
    return fail(c, v, "transfer must be chunked or close");
  }
  return 0;
}

static int parse_raw_base64(ctx_t *c, const yaml_node_t *v,
                            al__mock_response_t *r) {
  size_t olen = 0;
  const unsigned char *src = (const unsigned char *)scalar(v);

  if (src == NULL) {
    return fail(c, v, "raw_base64 must be a string (the response body)");
  }
  /* mbedtls sizes the output first (BUFFER_TOO_SMALL with olen set). */
  (void)mbedtls_base64_decode(NULL, 0, &olen, src, v->data.scalar.length);
  r->raw = al_malloc(olen + 1);
  if (r->raw == NULL) {
    return AL_ENOMEM;
  }
  if (mbedtls_base64_decode((unsigned char *)r->raw, olen + 1, &r->raw_len,
                            src, v->data.scalar.length) != 0) {
    al_free(r->raw);
    r->raw = NULL;
    return fail(c, v, "raw_base64 is not valid base64");
  }
  r->raw[r->raw_len] = '\0';
  return 0;
}

static int parse_response(ctx_t *c, const yaml_node_t *n,
                          al__mock_response_t *r, size_t ri) {
  yaml_node_pair_t *p;
  int64_t delay = c->delay_ms;
  int64_t fbd = c->first_byte_delay_ms;
  bool have_reply = false;
  bool have_fault = false;
  int err;

  r->line = (int)n->start_mark.line + 1;
  r->retry_after = -1;
  r->error_event_after = -1;
  r->reset_after_bytes = -1;
  r->in_tokens = -1;
  r->out_tokens = -1;
  r->ping_interval_ms = 1000;
  r->xfer = c->xfer;
  err = want_mapping(c, n, "a response");
  for (p = n->data.mapping.pairs.start; err == 0 && p < n->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "reply")) {
      have_reply = true;
      err = parse_reply(c, v, r, ri);
    } else if (key_is(k, "fault")) {
      have_fault = true;
      err = parse_fault(c, v, r);
    } else if (key_is(k, "delay_ms")) {
      err = get_uint(c, v, "delay_ms", 86400000, &delay);
    } else if (key_is(k, "first_byte_delay_ms")) {
      err = get_uint(c, v, "first_byte_delay_ms", 86400000, &fbd);
    } else if (key_is(k, "transfer")) {
      err = parse_xfer(c, v, &r->xfer);
    } else if (key_is(k, "headers")) {
      err = parse_headers(c, v, r);
    } else if (key_is(k, "expect_request")) {
      err = parse_expect(c, v, r);
    } else if (key_is(k, "raw_base64")) {
      /* The same, as base64: bytes YAML cannot carry (invalid UTF-8). */
      err = parse_raw_base64(c, v, r);
      have_reply = err == 0;
    } else if (key_is(k, "raw")) {
      /* A recorded body, played as is (PROTOCOLS: real servers' quirks). */
      if (scalar(v) == NULL) {
        err = fail(c, v, "raw must be a string (the response body)");
      } else {
        r->raw_len = v->data.scalar.length;
        r->raw = al_malloc(r->raw_len + 1);
        if (r->raw == NULL) {
          err = AL_ENOMEM;
        } else {
          memcpy(r->raw, scalar(v), r->raw_len);
          r->raw[r->raw_len] = '\0';
          have_reply = true;
        }
      }
    } else {
      err = fail(c, k, "unknown key '%s' in a response (expected reply, "
                 "raw, raw_base64, fault, delay_ms, first_byte_delay_ms, "
                 "transfer, headers, expect_request)",
                 scalar(k) ? scalar(k) : "?");
    }
  }
  if (err != 0) {
    return err;
  }
  if (!have_reply && !have_fault) {
    return fail(c, n, "a response needs a reply or a fault");
  }
  if (have_reply && r->status != 0 && r->status != 200) {
    return fail(c, n, "a response with fault.status %d has no reply; remove "
                "one of them", r->status);
  }
  r->delay_ms = (uint32_t)delay;
  r->first_byte_delay_ms = (uint32_t)fbd;
  if (r->model == NULL && c->model != NULL) {
    r->model = al_strdup(c->model);
  }
  if (r->model == NULL) {
    r->model = al_strdup("mockllm");
  }
  if (r->id == NULL) {
    char id[48];

    snprintf(id, sizeof(id), "msg_mock_%04zu", ri + 1);
    r->id = al_strdup(id);
    snprintf(id, sizeof(id), "chatcmpl-mock_%04zu", ri + 1);
    r->oai_id = al_strdup(id);
  } else {
    r->oai_id = al_strdup(r->id);
  }
  return r->model == NULL || r->id == NULL || r->oai_id == NULL ? AL_ENOMEM
                                                                : 0;
}

/* expect_request: {contains: "...", not_contains: "..."} */
static int parse_expect(ctx_t *c, const yaml_node_t *n,
                        al__mock_response_t *r) {
  int err = want_mapping(c, n, "expect_request");
  yaml_node_pair_t *p;

  for (p = n->data.mapping.pairs.start;
       err == 0 && p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "contains")) {
      err = get_str(c, v, "expect_request.contains", &r->expect_contains);
    } else if (key_is(k, "not_contains")) {
      err = get_str(c, v, "expect_request.not_contains",
                    &r->expect_not_contains);
    } else {
      err = fail(c, k, "unknown key '%s' in expect_request (expected "
                 "contains, not_contains)", scalar(k) ? scalar(k) : "?");
    }
  }
  return err;
}

/* usage_from_request: {bytes_per_token: N, cache: bool} */
static int parse_usage_from_request(ctx_t *c, const yaml_node_t *n,
                                    al_mockllm_scenario_t *s) {
  int err = want_mapping(c, n, "usage_from_request");
  yaml_node_pair_t *p;

  s->usage_bytes_per_token = 4;
  for (p = n->data.mapping.pairs.start;
       err == 0 && p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "bytes_per_token")) {
      err = get_uint(c, v, "usage_from_request.bytes_per_token", 1 << 20,
                     &s->usage_bytes_per_token);
      if (err == 0 && s->usage_bytes_per_token == 0) {
        err = fail(c, v, "usage_from_request.bytes_per_token must be > 0");
      }
    } else if (key_is(k, "cache")) {
      err = get_bool(c, v, "usage_from_request.cache", &s->usage_cache);
    } else {
      err = fail(c, k, "unknown key '%s' in usage_from_request (expected "
                 "bytes_per_token, cache)", scalar(k) ? scalar(k) : "?");
    }
  }
  return err;
}

static int parse_exhausted(ctx_t *c, const yaml_node_t *v,
                           al__mock_exhausted_t *out) {
  const char *m = scalar(v);

  if (m != NULL && strcmp(m, "repeat_last") == 0) {
    *out = AL__EXH_REPEAT_LAST;
  } else if (m != NULL && strcmp(m, "error") == 0) {
    *out = AL__EXH_ERROR;
  } else if (m != NULL && strcmp(m, "cycle") == 0) {
    *out = AL__EXH_CYCLE;
  } else {
    return fail(c, v, "on_exhausted must be repeat_last, error or cycle");
  }
  return 0;
}

static int want_responses(ctx_t *c, const yaml_node_t *n, size_t *count) {
  if (n->type != YAML_SEQUENCE_NODE ||
      n->data.sequence.items.top == n->data.sequence.items.start) {
    return fail(c, n, "responses must be a non-empty list");
  }
  *count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  return 0;
}

/* A track's match: {first_user_contains: TEXT, system_contains: TEXT}, at
 * least one of them; every one given must hold. An empty TEXT would match
 * every request, which is what the top-level responses are for. */
static int parse_match(ctx_t *c, const yaml_node_t *n, al__mock_track_t *t) {
  yaml_node_pair_t *p;
  int err = want_mapping(c, n, "a track's match");

  for (p = n->data.mapping.pairs.start;
       err == 0 && p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);
    char **dst = key_is(k, "first_user_contains") ? &t->first_user
                 : key_is(k, "system_contains")   ? &t->system
                                                  : NULL;

    if (dst == NULL) {
      return fail(c, k, "unknown key '%s' in a track's match (expected "
                  "first_user_contains, system_contains)",
                  scalar(k) ? scalar(k) : "?");
    }
    err = get_str(c, v, scalar(k), dst);
    if (err == 0 && **dst == '\0') {
      err = fail(c, v, "%s must not be empty", scalar(k));
    }
  }
  if (err == 0 && t->first_user == NULL && t->system == NULL) {
    err = fail(c, n, "a track's match needs first_user_contains or "
               "system_contains");
  }
  return err;
}

/* First pass over `tracks`: its shape, and how many responses it holds (the
 * flat response array is sized before any response is parsed). */
static int count_tracks(ctx_t *c, const yaml_node_t *n, size_t *ntracks,
                        size_t *nresp) {
  yaml_node_item_t *it;

  if (n->type != YAML_SEQUENCE_NODE ||
      n->data.sequence.items.top == n->data.sequence.items.start) {
    return fail(c, n, "tracks must be a non-empty list");
  }
  *ntracks = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
       it++) {
    yaml_node_t *t = node(c, *it);
    yaml_node_t *resp = NULL;
    bool have_match = false;
    yaml_node_pair_t *p;
    size_t cnt = 0;
    int err = want_mapping(c, t, "a track");

    for (p = t->data.mapping.pairs.start;
         err == 0 && p < t->data.mapping.pairs.top; p++) {
      yaml_node_t *k = node(c, p->key);

      if (key_is(k, "responses")) {
        resp = node(c, p->value);
      } else if (key_is(k, "match")) {
        have_match = true;
      } else if (!key_is(k, "on_exhausted")) {
        err = fail(c, k, "unknown key '%s' in a track (expected match, "
                   "responses, on_exhausted)", scalar(k) ? scalar(k) : "?");
      }
    }
    if (err == 0 && (!have_match || resp == NULL)) {
      err = fail(c, t, "a track needs match and responses");
    }
    if (err == 0) {
      err = want_responses(c, resp, &cnt);
    }
    if (err != 0) {
      return err;
    }
    *nresp += cnt;
  }
  return 0;
}

/* Second pass: one track's match, on_exhausted (default: the scenario's) and
 * responses, parsed into s->responses from index *next on. */
static int parse_track(ctx_t *c, const yaml_node_t *n,
                       al_mockllm_scenario_t *s, al__mock_track_t *t,
                       size_t *next) {
  yaml_node_pair_t *p;
  size_t i;
  int err = 0;

  t->line = (int)n->start_mark.line + 1;
  t->on_exhausted = s->on_exhausted;
  t->first = *next;
  for (p = n->data.mapping.pairs.start;
       err == 0 && p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "match")) {
      err = parse_match(c, v, t);
    } else if (key_is(k, "on_exhausted")) {
      err = parse_exhausted(c, v, &t->on_exhausted);
    } else {
      /* responses (count_tracks refused every other key) */
      t->n = (size_t)(v->data.sequence.items.top -
                      v->data.sequence.items.start);
      for (i = 0; err == 0 && i < t->n; i++) {
        err = parse_response(c, node(c, v->data.sequence.items.start[i]),
                             &s->responses[t->first + i], t->first + i);
      }
    }
  }
  *next += t->n;
  return err;
}

static int parse_root(ctx_t *c, al_mockllm_scenario_t *s) {
  yaml_node_t *root = yaml_document_get_root_node(c->doc);
  yaml_node_t *resp = NULL;
  yaml_node_t *tracks = NULL;
  yaml_node_pair_t *p;
  size_t ntracks = 0;
  size_t next;
  size_t i;
  int err;

  if (root == NULL) {
    return fail(c, NULL, "empty scenario (expected a mapping with responses)");
  }
  err = want_mapping(c, root, "the scenario");
  /* Defaults first, so their order in the file does not matter. */
  for (p = root->data.mapping.pairs.start;
       err == 0 && p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);
    yaml_node_t *v = node(c, p->value);

    if (key_is(k, "responses")) {
      resp = v;
    } else if (key_is(k, "tracks")) {
      tracks = v;
    } else if (key_is(k, "model")) {
      err = get_str(c, v, "model", &c->model);
    } else if (key_is(k, "delay_ms")) {
      err = get_uint(c, v, "delay_ms", 86400000, &c->delay_ms);
    } else if (key_is(k, "first_byte_delay_ms")) {
      err = get_uint(c, v, "first_byte_delay_ms", 86400000,
                     &c->first_byte_delay_ms);
    } else if (key_is(k, "transfer")) {
      err = parse_xfer(c, v, &c->xfer);
    } else if (key_is(k, "timestamps")) {
      err = get_bool(c, v, "timestamps", &s->timestamps);
    } else if (key_is(k, "usage_from_request")) {
      err = parse_usage_from_request(c, v, s);
    } else if (key_is(k, "on_exhausted")) {
      err = parse_exhausted(c, v, &s->on_exhausted);
    } else if (key_is(k, "require_reasoning")) {
      /* Refuse like DeepSeek's thinking mode: an assistant message with
       * tool_calls must carry its reasoning in this field. */
      err = get_str(c, v, "require_reasoning", &s->require_reasoning);
    } else {
      err = fail(c, k, "unknown top-level key '%s' (expected responses, "
                 "tracks, model, delay_ms, first_byte_delay_ms, transfer, timestamps, "
                 "on_exhausted, usage_from_request, require_reasoning)", scalar(k) ? scalar(k) : "?");
    }
  }
  if (err != 0) {
    return err;
  }
  /* With tracks, the top-level responses are optional: a request no track
   * takes then gets the exhausted answer. */
  if (resp == NULL && tracks == NULL) {
    return fail(c, root, "the scenario needs a responses list (or tracks)");
  }
  if (resp != NULL) {
    err = want_responses(c, resp, &s->n);
  }
  next = s->n;
  if (err == 0 && tracks != NULL) {
    err = count_tracks(c, tracks, &ntracks, &next);
  }
  if (err != 0) {
    s->n = 0;
    return err;
  }
  s->responses = al_calloc(next, sizeof(*s->responses));
  s->tracks = ntracks > 0 ? al_calloc(ntracks, sizeof(*s->tracks)) : NULL;
  if (s->responses == NULL || (ntracks > 0 && s->tracks == NULL)) {
    s->n = 0;
    return AL_ENOMEM;
  }
  s->n_all = next;
  s->ntracks = ntracks;
  for (i = 0; i < s->n; i++) {
    err = parse_response(c, node(c, resp->data.sequence.items.start[i]),
                         &s->responses[i], i);
    if (err != 0) {
      return err;
    }
  }
  next = s->n;
  for (i = 0; i < ntracks; i++) {
    err = parse_track(c, node(c, tracks->data.sequence.items.start[i]), s,
                      &s->tracks[i], &next);
    if (err != 0) {
      return err;
    }
  }
  for (i = 0; i < s->n_all; i++) {
    err = al__mockllm_render(s, &s->responses[i], i);
    if (err != 0) {
      if (err == AL_EPARSE) {
        /* The renderer refuses input that jansson cannot encode. */
        if (c->err != NULL && c->err_len > 0) {
          snprintf(c->err, c->err_len, "%s:%d:1: response %zu: text is not "
                   "valid UTF-8", c->name, s->responses[i].line, i + 1);
        }
      }
      return err;
    }
  }
  return 0;
}

void al_mockllm_scenario_free(al_mockllm_scenario_t *s) {
  size_t i;

  if (s == NULL) {
    return;
  }
  for (i = 0; i < s->n_all; i++) {
    al__mockllm_response_free(&s->responses[i]);
  }
  for (i = 0; i < s->ntracks; i++) {
    al_free(s->tracks[i].first_user);
    al_free(s->tracks[i].system);
  }
  al_free(s->tracks);
  al_free(s->responses);
  al_free(s->name);
  al_free(s->require_reasoning);
  al_free(s);
}

size_t al_mockllm_scenario_count(const al_mockllm_scenario_t *s) {
  return s == NULL ? 0 : s->n;
}

int al_mockllm_load_scenario_string(const char *yaml, size_t len,
                                    const char *name,
                                    al_mockllm_scenario_t **out, char *err,
                                    size_t err_len) {
  al_yaml_error_t ye;
  yaml_document_t doc;
  al_mockllm_scenario_t *s;
  ctx_t c;
  int rc;

  *out = NULL;
  if (err != NULL && err_len > 0) {
    err[0] = '\0';
  }
  memset(&c, 0, sizeof(c));
  c.name = name != NULL ? name : "<scenario>";
  c.err = err;
  c.err_len = err_len;
  c.xfer = AL__XFER_CHUNKED;
  rc = al_yaml_load(&doc, yaml, len, &ye);
  if (rc != 0) {
    if (err != NULL && err_len > 0) {
      if (ye.context[0] != '\0') {
        snprintf(err, err_len, "%s:%d:%d: %s (%s at line %d)", c.name,
                 ye.line, ye.col, ye.problem, ye.context, ye.context_line);
      } else {
        snprintf(err, err_len, "%s:%d:%d: %s", c.name, ye.line, ye.col,
                 ye.problem);
      }
    }
    return rc;
  }
  c.doc = &doc;
  s = al_calloc(1, sizeof(*s));
  if (s == NULL) {
    rc = AL_ENOMEM;
  } else {
    s->name = al_strdup(c.name);
    s->created = (int64_t)time(NULL);
    rc = s->name == NULL ? AL_ENOMEM : parse_root(&c, s);
  }
  al_free(c.model);
  yaml_document_delete(&doc);
  if (rc != 0) {
    if (rc == AL_ENOMEM && err != NULL && err_len > 0) {
      snprintf(err, err_len, "%s: out of memory", c.name);
    }
    al_mockllm_scenario_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int al_mockllm_load_scenario_file(const char *path, al_mockllm_scenario_t **out,
                                  char *err, size_t err_len) {
  FILE *f;
  al_buf_t b;
  char tmp[8192];
  size_t n;
  int rc;

  *out = NULL;
  /* Blocking by design: documented to run before the loop does. */
  f = fopen(path, "rb");
  if (f == NULL) {
    rc = -errno;
    if (err != NULL && err_len > 0) {
      snprintf(err, err_len, "%s: %s", path, strerror(errno));
    }
    return rc;
  }
  al_buf_init(&b, 64u * 1024 * 1024);
  rc = 0;
  while (rc == 0 && (n = fread(tmp, 1, sizeof(tmp), f)) > 0) {
    rc = al_buf_append(&b, tmp, n);
  }
  if (rc == 0 && ferror(f)) {
    rc = AL_EPARSE;
  }
  fclose(f);
  if (rc != 0) {
    if (err != NULL && err_len > 0) {
      snprintf(err, err_len, "%s: cannot read: %s", path, al_strerror(rc));
    }
    al_buf_free(&b);
    return rc;
  }
  rc = al_mockllm_load_scenario_string(b.data != NULL ? b.data : "", b.len,
                                       path, out, err, err_len);
  al_buf_free(&b);
  return rc;
}
