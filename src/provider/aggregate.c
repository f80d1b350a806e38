/* The content-block aggregator (the pipeline that drives it is pstream.c).
 *
 * Each provider decoder (anthropic.c, openai.c) calls the al__agg_*
 * operations below. They update the normalized message snapshot and deliver
 * one al_pevent_t per change to the subscriber, so aggregation and
 * delivery happen in the same pass as decoding.
 *
 * The snapshot follows the Anthropic SDK accumulator (PROTOCOLS.md §2.5):
 * a block start pushes the block as given, deltas address content[index]
 * and apply only when the block type matches, signature replaces,
 * citations append, message_delta overwrites stop fields and usage. Text,
 * thinking and raw tool-input JSON are appended to one bounded buffer per
 * block (no allocation per delta once the buffer has grown) and written
 * into the block's JSON only when someone looks (block stop, message stop,
 * al_pstream_message()). Tool input is parsed once, at that point: empty
 * => the start block's input ({}), otherwise JSON, or {"_raw": "<text>"}
 * when that fails (whitespace only too).
 *
 * With strict_indexes (the runtime's default) a block start must use the
 * next index while no other block is open, and deltas and stops must name
 * the open block; anything else is a typed decode error, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider/provider.h"

#define MAX_BLOCKS 4096

static const char *const stop_names[] = {
#define AL_STOP_GEN(name, str) str,
    AL_STOP_REASON_MAP(AL_STOP_GEN)
#undef AL_STOP_GEN
};

const char *al_stop_reason_name(al_stop_reason_t r) {
  if ((unsigned)r >= AL_ARRAY_SIZE(stop_names)) {
    return "error";
  }
  return stop_names[r];
}

al_stop_reason_t al__provider_stop_from_anthropic(const char *s) {
  if (s == NULL) {
    return AL_STOP_NONE;
  }
  if (strcmp(s, "end_turn") == 0) {
    return AL_STOP_END_TURN;
  }
  if (strcmp(s, "tool_use") == 0) {
    return AL_STOP_TOOL_USE;
  }
  if (strcmp(s, "max_tokens") == 0 ||
      strcmp(s, "model_context_window_exceeded") == 0) {
    return AL_STOP_MAX_TOKENS;
  }
  if (strcmp(s, "stop_sequence") == 0) {
    return AL_STOP_STOP_SEQUENCE;
  }
  if (strcmp(s, "pause_turn") == 0) {
    return AL_STOP_PAUSE_TURN;
  }
  if (strcmp(s, "refusal") == 0) {
    return AL_STOP_REFUSAL;
  }
  return AL_STOP_ERROR;
}

al_stop_reason_t al__provider_stop_from_openai(const char *s) {
  if (s == NULL) {
    return AL_STOP_NONE;
  }
  if (strcmp(s, "stop") == 0) {
    return AL_STOP_END_TURN;
  }
  if (strcmp(s, "length") == 0) {
    return AL_STOP_MAX_TOKENS;
  }
  if (strcmp(s, "tool_calls") == 0 || strcmp(s, "function_call") == 0) {
    return AL_STOP_TOOL_USE;
  }
  if (strcmp(s, "content_filter") == 0) {
    return AL_STOP_REFUSAL;
  }
  return AL_STOP_ERROR;
}

al_block_type_t al__provider_block_type(const char *type) {
  if (type == NULL) {
    return AL_BLOCK_UNKNOWN;
  }
  if (strcmp(type, "text") == 0) {
    return AL_BLOCK_TEXT;
  }
  if (strcmp(type, "thinking") == 0) {
    return AL_BLOCK_THINKING;
  }
  if (strcmp(type, "redacted_thinking") == 0) {
    return AL_BLOCK_REDACTED_THINKING;
  }
  if (strcmp(type, "tool_use") == 0) {
    return AL_BLOCK_TOOL_USE;
  }
  if (strcmp(type, "server_tool_use") == 0 ||
      strcmp(type, "mcp_tool_use") == 0) {
    return AL_BLOCK_SERVER_TOOL_USE;
  }
  return AL_BLOCK_UNKNOWN;
}

/* ---- aggregator ----------------------------------------------------------- */

void al__agg_free(al_pstream_t *s) {
  size_t i;

  for (i = 0; i < s->nblocks; i++) {
    al_buf_free(&s->blocks[i].buf);
    json_decref(s->blocks[i].block);
    if (s->blocks[i].base != NULL) {
      json_decref(s->blocks[i].base);
    }
  }
  al_free(s->blocks);
  s->blocks = NULL;
  s->nblocks = 0;
  s->cap_blocks = 0;
  if (s->message != NULL) {
    json_decref(s->message);
    s->message = NULL;
  }
}

static int fail_decode(al_pstream_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail_decode(al_pstream_t *s, const char *fmt, ...) {
  char msg[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return al__pstream_fail(s, AL_PERR_DECODE, NULL, msg, NULL);
}

/* Pushes a block (the snapshot's content array already holds it). */
static int push_block(al_pstream_t *s, json_t *block) {
  al__pblock_t *b;
  json_t *t;
  const char *key = NULL;

  if (s->nblocks == s->cap_blocks) {
    size_t ncap = s->cap_blocks ? s->cap_blocks * 2 : 2; /* most replies have 1-3 blocks */
    al__pblock_t *nb;

    if (s->nblocks >= MAX_BLOCKS) {
      return AL_ETOOBIG;
    }
    nb = al_realloc(s->blocks, ncap * sizeof(*nb));
    if (nb == NULL) {
      return AL_ENOMEM;
    }
    s->blocks = nb;
    s->cap_blocks = ncap;
  }
  b = &s->blocks[s->nblocks];
  memset(b, 0, sizeof(*b));
  t = json_object_get(block, "type");
  b->type = al__provider_block_type(json_is_string(t) ? json_string_value(t)
                                                      : NULL);
  b->block = json_incref(block);
  b->type_name = json_is_string(t) ? json_string_value(t) : NULL;
  al_buf_init(&b->buf, s->opts.max_block);
  if (b->type == AL_BLOCK_TEXT) {
    key = "text";
  } else if (b->type == AL_BLOCK_THINKING) {
    key = "thinking";
  }
  if (key != NULL) {
    t = json_object_get(block, key);
    if (json_is_string(t) && json_string_length(t) > 0) {
      b->base = json_incref(t);
    }
  }
  s->nblocks++;
  return 0;
}

int al__agg_message_start(al_pstream_t *s, json_t *message) {
  al_pevent_t ev;
  json_t *content;
  json_t *v;
  size_t i;
  int err;

  if (s->message != NULL) {
    return fail_decode(s, "Unexpected event order, got message_start before "
                          "receiving \"message_stop\"");
  }
  if (!json_is_object(message)) {
    return fail_decode(s, "message_start without a message object");
  }
  s->message = json_incref(message);
  content = json_object_get(message, "content");
  if (!json_is_array(content)) {
    json_object_set_new(message, "content", json_array());
    content = json_object_get(message, "content");
  }
  for (i = 0; i < json_array_size(content); i++) {
    if ((err = push_block(s, json_array_get(content, i))) != 0) {
      return fail_decode(s, "too many content blocks");
    }
    s->blocks[s->nblocks - 1].stopped = true;
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_PEV_MESSAGE_START;
  ev.index = -1;
  ev.json = message;
  v = json_object_get(message, "id");
  ev.id = json_is_string(v) ? json_string_value(v) : NULL;
  v = json_object_get(message, "model");
  ev.model = json_is_string(v) ? json_string_value(v) : NULL;
  v = json_object_get(message, "usage");
  ev.usage = json_is_object(v) ? v : NULL;
  return al__pstream_emit(s, &ev);
}

static void fill_block_event(al_pevent_t *ev, al_pevent_type_t type,
                             const al__pblock_t *b, int index) {
  memset(ev, 0, sizeof(*ev));
  ev->type = type;
  ev->index = index;
  ev->block_type = b->type;
  ev->block_type_name = b->type_name;
}

/* NUL the model sent (\u0000) becomes U+FFFD in text and tool calls
 * (al__json_scrub_nul), never in thinking, whose bytes its signature
 * covers. */
static int scrub_block(json_t *block) {
  al_block_type_t t =
      al__provider_block_type(json_string_value(json_object_get(block, "type")));

  if (t != AL_BLOCK_TEXT && t != AL_BLOCK_TOOL_USE &&
      t != AL_BLOCK_SERVER_TOOL_USE) {
    return 0;
  }
  return al__json_scrub_nul(block);
}

int al__agg_block_start(al_pstream_t *s, int64_t index, json_t *block) {
  al_pevent_t ev;
  json_t *copy;
  int err;

  if (s->message == NULL) {
    return 0; /* before message_start: ignored (PROTOCOLS §2.5) */
  }
  if (s->opts.strict_indexes && index < 0) {
    return fail_decode(s, "content_block_start without a non-negative "
                          "integer index");
  }
  if (s->opts.strict_indexes &&
      (index != (int64_t)s->nblocks || s->open_block >= 0)) {
    return fail_decode(s,
                       "content_block_start index %lld out of order (expected "
                       "%zu%s)",
                       (long long)index, s->nblocks,
                       s->open_block >= 0 ? ", a block is still open" : "");
  }
  /* The SDK pushes a shallow copy ({...content_block}); a non-object
   * spreads to {}. */
  copy = json_is_object(block) ? json_copy(block) : json_object();
  if (copy == NULL || scrub_block(copy) < 0) {
    json_decref(copy);
    return fail_decode(s, "out of memory");
  }
  if (json_array_append(json_object_get(s->message, "content"), copy) != 0 ||
      (err = push_block(s, copy)) != 0) {
    json_decref(copy);
    return fail_decode(s, "too many content blocks");
  }
  json_decref(copy);
  s->open_block = (int)(s->nblocks - 1);
  fill_block_event(&ev, AL_PEV_BLOCK_START, &s->blocks[s->nblocks - 1],
                   (int)(s->nblocks - 1));
  ev.progress = true;
  ev.json = copy;
  return al__pstream_emit(s, &ev);
}

/* Resolves an index for a delta/stop. Returns the block, NULL to ignore
 * the event, and sets *rc on a strict-mode error. */
static al__pblock_t *resolve(al_pstream_t *s, int64_t index, const char *what,
                             int *rc) {
  *rc = 0;
  if (s->message == NULL) {
    return NULL;
  }
  if (s->opts.strict_indexes) {
    if (s->open_block < 0 || index != s->open_block) {
      *rc = fail_decode(s, "%s for block %lld which is not open", what,
                        (long long)index);
      return NULL;
    }
  }
  if (index < 0 || index >= (int64_t)s->nblocks) {
    return NULL;
  }
  return &s->blocks[index];
}

static bool kind_matches(al_fj_kind_t kind, al_block_type_t t) {
  switch (kind) {
  case AL_FJ_TEXT:
    return t == AL_BLOCK_TEXT;
  case AL_FJ_THINKING:
    return t == AL_BLOCK_THINKING;
  case AL_FJ_INPUT:
    return t == AL_BLOCK_TOOL_USE || t == AL_BLOCK_SERVER_TOOL_USE;
  default:
    return false;
  }
}

static int delta_append(al_pstream_t *s, al__pblock_t *b, int index,
                        al_fj_kind_t kind, const char *text, size_t len);

static int emit_delta(al_pstream_t *s, al__pblock_t *b, int index,
                      al_fj_kind_t kind, const char *text, size_t len) {
  /* The stream's own struct, zeroed once: GCC zeroes a local this size
   * with `rep stos`, whose start-up cost showed in the per-delta profile.
   * Only the fields set here differ between deltas. */
  al_pevent_t *ev = &s->delta_ev;

  ev->type = kind == AL_FJ_TEXT       ? AL_PEV_TEXT_DELTA
             : kind == AL_FJ_THINKING ? AL_PEV_THINKING_DELTA
                                      : AL_PEV_TOOL_INPUT_DELTA;
  ev->progress = true;
  ev->index = index;
  ev->block_type = b->type;
  ev->block_type_name = b->type_name;
  ev->text = text;
  ev->len = len;
  return al__pstream_emit(s, ev);
}

int al__agg_delta(al_pstream_t *s, int64_t index, al_fj_kind_t kind,
                  const char *text, size_t len, uint32_t lead_lo,
                  uint32_t trail_hi) {
  al__pblock_t *b;
  int rc;

  /* The open block, as resolve() finds it, without the call. */
  if (s->message != NULL && index >= 0 && index < (int64_t)s->nblocks &&
      (!s->opts.strict_indexes || index == s->open_block)) {
    b = &s->blocks[index];
  } else if ((b = resolve(s, index, "content_block_delta", &rc)) == NULL) {
    return rc;
  }
  if (!kind_matches(kind, b->type)) {
    return 0; /* the SDK ignores a delta of the wrong type */
  }
  b->input_delta = b->input_delta || kind == AL_FJ_INPUT;
  if (kind == AL_FJ_INPUT) {
    s->tool_input_bytes += len;
    if (s->opts.max_tool_input > 0 &&
        s->tool_input_bytes > s->opts.max_tool_input) {
      char msg[128];

      snprintf(msg, sizeof(msg),
               "tool input in the reply exceeds the limit of %zu bytes",
               s->opts.max_tool_input);
      return al__pstream_fail(s, AL_PERR_DECODE, "tool_input_too_large", msg,
                              NULL);
    }
  }
  if (b->pending_hi != 0 && lead_lo == 0 && len == 0 && trail_hi == 0) {
    /* An empty delta: the pending high half keeps waiting. */
    return emit_delta(s, b, (int)index, kind, "", 0);
  }
  if (b->pending_hi != 0 || lead_lo != 0) {
    /* Surrogate halves split across deltas: join them, or replace what
     * cannot be joined, so the text stays valid UTF-8. */
    al_buf_reset(&s->joinbuf);
    if (b->pending_hi != 0 && lead_lo != 0) {
      rc = al__utf8_put(&s->joinbuf, 0x10000 +
                                         ((b->pending_hi - 0xD800) << 10) +
                                         (lead_lo - 0xDC00));
    } else {
      rc = al_buf_append(&s->joinbuf, "\xEF\xBF\xBD", 3);
    }
    if (rc == 0) {
      rc = al_buf_append(&s->joinbuf, text, len);
    }
    if (rc != 0) {
      return fail_decode(s, "block too large");
    }
    text = s->joinbuf.data;
    len = s->joinbuf.len;
  }
  b->pending_hi = trail_hi;
  if (kind == AL_FJ_TEXT && len > 0 && memchr(text, '\0', len) != NULL) {
    /* \u0000 in model text: U+FFFD, in the event and the block alike
     * (the tool input's NUL are replaced once it is parsed). */
    al_buf_t clean;

    al_buf_init(&clean, len * 3 + 4);
    rc = al__text_clean_append(&clean, text, len, NULL);
    if (rc == 0) {
      rc = delta_append(s, b, (int)index, kind, clean.data, clean.len);
    }
    al_buf_free(&clean);
    return rc;
  }
  return delta_append(s, b, (int)index, kind, text, len);
}

/* Adds one delta's text to its block and emits it. */
static int delta_append(al_pstream_t *s, al__pblock_t *b, int index,
                        al_fj_kind_t kind, const char *text, size_t len) {
  if (len > 0 && len < b->buf.cap - b->buf.len) {
    /* Room for it and the terminator (cap never exceeds max + 1). */
    memcpy(b->buf.data + b->buf.len, text, len);
    b->buf.len += len;
    b->buf.data[b->buf.len] = '\0';
  } else if (len > 0) {
    if (al_buf_append(&b->buf, text, len) != 0) {
      return fail_decode(s, "content block %lld too large", (long long)index);
    }
  }
  b->dirty = true;
  return emit_delta(s, b, index, kind, text, len);
}

int al__agg_signature(al_pstream_t *s, int64_t index, json_t *sig) {
  al__pblock_t *b;
  al_pevent_t ev;
  int rc;

  b = resolve(s, index, "content_block_delta", &rc);
  if (b == NULL) {
    return rc;
  }
  if (b->type != AL_BLOCK_THINKING) {
    return 0;
  }
  if (sig != NULL) {
    json_object_set(b->block, "signature", sig);
  } else {
    json_object_del(b->block, "signature");
  }
  fill_block_event(&ev, AL_PEV_SIGNATURE, b, (int)index);
  ev.progress = true;
  ev.text = json_is_string(sig) ? json_string_value(sig) : "";
  ev.len = json_is_string(sig) ? json_string_length(sig) : 0;
  ev.json = sig;
  return al__pstream_emit(s, &ev);
}

int al__agg_citation(al_pstream_t *s, int64_t index, json_t *citation) {
  al__pblock_t *b;
  al_pevent_t ev;
  json_t *arr;
  int rc;

  b = resolve(s, index, "content_block_delta", &rc);
  if (b == NULL) {
    return rc;
  }
  if (b->type != AL_BLOCK_TEXT) {
    return 0;
  }
  arr = json_object_get(b->block, "citations");
  if (!json_is_array(arr)) {
    /* citations ?? []: null or absent starts a new array. */
    json_object_set_new(b->block, "citations", json_array());
    arr = json_object_get(b->block, "citations");
  }
  json_array_append(arr, citation != NULL ? citation : json_null());
  fill_block_event(&ev, AL_PEV_CITATION, b, (int)index);
  ev.progress = true;
  ev.json = citation;
  return al__pstream_emit(s, &ev);
}

/* Writes the accumulated buffer of one block into its JSON. */
static int materialize_block(al__pblock_t *b) {
  json_t *v;

  if (!b->dirty) {
    return 0;
  }
  b->dirty = false;
  if (b->type == AL_BLOCK_TEXT || b->type == AL_BLOCK_THINKING) {
    const char *key = b->type == AL_BLOCK_TEXT ? "text" : "thinking";

    if (b->base != NULL) {
      al_buf_t tmp;

      al_buf_init(&tmp, json_string_length(b->base) + b->buf.len + 1);
      if (al_buf_append(&tmp, json_string_value(b->base),
                        json_string_length(b->base)) != 0 ||
          al_buf_append(&tmp, b->buf.data, b->buf.len) != 0) {
        al_buf_free(&tmp);
        return AL_ENOMEM;
      }
      v = json_stringn_nocheck(tmp.data, tmp.len);
      al_buf_free(&tmp);
    } else {
      /* Everything in buf came out of a validated JSON string (fast path
       * or jansson) or is a joined surrogate pair / U+FFFD, so it is valid
       * UTF-8: skip jansson's second validation pass over the whole text. */
      v = json_stringn_nocheck(b->buf.data != NULL ? b->buf.data : "",
                               b->buf.len);
    }
    if (v == NULL) {
      return AL_ENOMEM;
    }
    return json_object_set_new(b->block, key, v) == 0 ? 0 : AL_ENOMEM;
  }
  if (b->type == AL_BLOCK_TOOL_USE || b->type == AL_BLOCK_SERVER_TOOL_USE) {
    if (!b->input_delta) {
      /* No input delta: the start block's input stands ({} as sent). */
      if (json_object_get(b->block, "input") == NULL) {
        json_object_set_new(b->block, "input", json_object());
      }
      return 0;
    }
    /* Once input deltas arrived, the SDK rebuilds the block with `input`
     * as its last key (after e.g. `caller`): delete and add it again. */
    json_object_del(b->block, "input");
    if (b->buf.len == 0) {
      /* Only empty pieces: {} (the SDK's input for an empty buffer). */
      return json_object_set_new(b->block, "input", json_object()) == 0
                 ? 0
                 : AL_ENOMEM;
    }
    /* Not empty: parse; anything that is not JSON -- whitespace only,
     * invalid or cut-off text (fine-grained streaming, max_tokens) --
     * keeps the raw text, and the tool still runs (SPEC §5). */
    v = al__provider_json_load(b->buf.data, b->buf.len, NULL);
    if (v == NULL) {
      v = json_object();
      if (v != NULL) {
        json_object_set_new(v, "_raw",
                            al__json_string_utf8(b->buf.data, b->buf.len));
      }
    }
    if (v != NULL && al__json_scrub_nul(v) < 0) {
      json_decref(v);
      v = NULL;
    }
    if (v == NULL) {
      return AL_ENOMEM;
    }
    return json_object_set_new(b->block, "input", v) == 0 ? 0 : AL_ENOMEM;
  }
  return 0;
}

int al__agg_materialize(al_pstream_t *s) {
  size_t i;
  int err;

  for (i = 0; i < s->nblocks; i++) {
    al__pblock_t *b = &s->blocks[i];

    if (b->pending_hi != 0) {
      /* An unpaired high surrogate at the end: U+FFFD. */
      b->pending_hi = 0;
      if (al_buf_append(&b->buf, "\xEF\xBF\xBD", 3) != 0) {
        return AL_ETOOBIG;
      }
      b->dirty = true;
    }
    if ((err = materialize_block(b)) != 0) {
      return err;
    }
  }
  return 0;
}

int al__agg_block_stop(al_pstream_t *s, int64_t index) {
  al__pblock_t *b;
  al_pevent_t ev;
  int rc;

  b = resolve(s, index, "content_block_stop", &rc);
  if (b == NULL) {
    return rc;
  }
  if (b->pending_hi != 0) {
    b->pending_hi = 0;
    if (al_buf_append(&b->buf, "\xEF\xBF\xBD", 3) != 0) {
      return fail_decode(s, "content block %lld too large", (long long)index);
    }
    b->dirty = true;
    if ((rc = emit_delta(s, b, (int)index,
                         b->type == AL_BLOCK_TEXT       ? AL_FJ_TEXT
                         : b->type == AL_BLOCK_THINKING ? AL_FJ_THINKING
                                                        : AL_FJ_INPUT,
                         "\xEF\xBF\xBD", 3)) != 0) {
      return rc;
    }
  }
  if (materialize_block(b) != 0) {
    return fail_decode(s, "out of memory");
  }
  b->stopped = true;
  if (s->open_block == index) {
    s->open_block = -1;
  }
  fill_block_event(&ev, AL_PEV_BLOCK_STOP, b, (int)index);
  ev.progress = true;
  ev.json = b->block;
  return al__pstream_emit(s, &ev);
}

/* SDK rule: the key takes the event's value, and disappears when the
 * event has none. */
static void set_or_del(json_t *obj, const char *key, json_t *v) {
  if (v != NULL) {
    json_object_set(obj, key, v);
  } else {
    json_object_del(obj, key);
  }
}

int al__agg_message_delta(al_pstream_t *s, json_t *data) {
  static const char *const if_non_null[] = {
      "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
      "server_tool_use", "output_tokens_details"};
  al_pevent_t ev;
  json_t *delta;
  json_t *usage;
  json_t *musage;
  json_t *v;
  size_t i;

  if (s->message == NULL) {
    return 0;
  }
  delta = json_object_get(data, "delta");
  usage = json_object_get(data, "usage");
  if (!json_is_object(delta)) {
    return fail_decode(s, "message_delta without delta");
  }
  if (!json_is_object(usage)) {
    return fail_decode(s, "message_delta without usage");
  }
  set_or_del(s->message, "stop_reason", json_object_get(delta, "stop_reason"));
  set_or_del(s->message, "stop_sequence",
             json_object_get(delta, "stop_sequence"));
  set_or_del(s->message, "stop_details", json_object_get(delta, "stop_details"));
  v = json_object_get(delta, "container");
  if (v != NULL && !json_is_null(v)) {
    json_object_set(s->message, "container", v);
  }
  musage = json_object_get(s->message, "usage");
  if (!json_is_object(musage)) {
    json_object_set_new(s->message, "usage", json_object());
    musage = json_object_get(s->message, "usage");
  }
  set_or_del(musage, "output_tokens", json_object_get(usage, "output_tokens"));
  for (i = 0; i < AL_ARRAY_SIZE(if_non_null); i++) {
    v = json_object_get(usage, if_non_null[i]);
    if (v != NULL && !json_is_null(v)) {
      json_object_set(musage, if_non_null[i], v);
    }
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_PEV_MESSAGE_DELTA;
  ev.index = -1;
  ev.json = delta;
  ev.usage = musage;
  v = json_object_get(s->message, "stop_reason");
  ev.stop_reason_raw = json_is_string(v) ? json_string_value(v) : NULL;
  /* The snapshot is Anthropic-shaped for both providers (openai.c writes
   * normalized stop reasons into it). */
  ev.stop_reason = al__provider_stop_from_anthropic(ev.stop_reason_raw);
  return al__pstream_emit(s, &ev);
}

int al__agg_message_stop(al_pstream_t *s) {
  al_pevent_t ev;
  json_t *v;

  if (s->message == NULL) {
    return 0;
  }
  if (al__agg_materialize(s) != 0) {
    return fail_decode(s, "out of memory");
  }
  s->message_stopped = true;
  s->open_block = -1;
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_PEV_MESSAGE_STOP;
  ev.index = -1;
  ev.json = s->message;
  v = json_object_get(s->message, "usage");
  ev.usage = json_is_object(v) ? v : NULL;
  v = json_object_get(s->message, "stop_reason");
  ev.stop_reason_raw = json_is_string(v) ? json_string_value(v) : NULL;
  ev.stop_reason = al__provider_stop_from_anthropic(ev.stop_reason_raw);
  v = json_object_get(s->message, "id");
  ev.id = json_is_string(v) ? json_string_value(v) : NULL;
  v = json_object_get(s->message, "model");
  ev.model = json_is_string(v) ? json_string_value(v) : NULL;
  return al__pstream_emit(s, &ev);
}
