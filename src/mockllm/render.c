/* Renderers: one scripted response -> pre-rendered SSE event bytes in the
 * Anthropic Messages format and in the OpenAI Chat Completions format (with
 * and without stream_options.include_usage), plus the non-streaming JSON
 * bodies and the error bodies.
 *
 * All JSON goes through jansson (insertion order is preserved, so fields come
 * out in the order the real APIs send them). This runs once per response at
 * load time; playback only copies the bytes. A repeat_text block becomes one
 * event with a repeat count, so a 200,000-delta stream costs one event. */
#include <stdio.h>
#include <stdlib.h>

#include "mockllm/mockllm_int.h"

static int dump_cb(const char *buf, size_t size, void *data) {
  return al_buf_append((al_buf_t *)data, buf, size) == 0 ? 0 : -1;
}

char *al__mockllm_dumps(const json_t *j, size_t *len) {
  al_buf_t b;

  al_buf_init(&b, (size_t)1 << 31);
  if (json_dump_callback(j, dump_cb, &b, JSON_COMPACT | JSON_ENCODE_ANY) != 0 ||
      al_buf_reserve(&b, 0) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  if (len != NULL) {
    *len = b.len;
  }
  return b.data;
}

/* ---- event lists ---------------------------------------------------------- */

static int ev_add(al__mock_events_t *l, char *bytes, size_t len,
                  uint32_t delay, uint32_t flags, uint64_t repeat) {
  if (l->n == l->cap) {
    size_t ncap = l->cap ? l->cap * 2 : 16;
    al__mock_event_t *v = al_realloc(l->v, ncap * sizeof(*v));

    if (v == NULL) {
      al_free(bytes);
      return AL_ENOMEM;
    }
    l->v = v;
    l->cap = ncap;
  }
  l->v[l->n].bytes = bytes;
  l->v[l->n].len = len;
  l->v[l->n].delay_ms = delay;
  l->v[l->n].flags = flags;
  l->v[l->n].repeat = repeat;
  l->n++;
  return 0;
}

static int ev_raw(al__mock_events_t *l, const char *text, uint32_t delay,
                  uint32_t flags) {
  char *b = al_strdup(text);

  if (b == NULL) {
    return AL_ENOMEM;
  }
  return ev_add(l, b, strlen(b), delay, flags, 1);
}

/* Steals obj. name NULL = an unnamed (OpenAI) event. */
static int ev_json(al__mock_events_t *l, const char *name, json_t *obj,
                   uint32_t delay, uint64_t repeat) {
  al_buf_t b;
  char *js;
  size_t jlen;
  int err;

  if (obj == NULL) {
    return AL_ENOMEM;
  }
  js = al__mockllm_dumps(obj, &jlen);
  json_decref(obj);
  if (js == NULL) {
    return AL_EPARSE; /* invalid UTF-8 text, most likely */
  }
  al_buf_init(&b, jlen + 256);
  err = 0;
  if (name != NULL) {
    err = al_buf_printf(&b, "event: %s\n", name);
  }
  if (err == 0) {
    err = al_buf_append_str(&b, "data: ");
  }
  if (err == 0) {
    err = al_buf_append(&b, js, jlen);
  }
  if (err == 0) {
    err = al_buf_append_str(&b, "\n\n");
  }
  al_free(js);
  if (err != 0) {
    al_buf_free(&b);
    return err;
  }
  return ev_add(l, b.data, b.len, delay, 0, repeat);
}

/* ---- splitting ----------------------------------------------------------- */

/* Moves a cut forward to a UTF-8 character boundary: JSON strings must hold
 * whole characters, while any byte position *inside the JSON text* (escapes
 * included) is fair game. */
static size_t boundary(const char *s, size_t len, size_t at) {
  while (at < len && ((unsigned char)s[at] & 0xC0) == 0x80) {
    at++;
  }
  return at;
}

/* Calls fn for each piece: `chunks` near-equal pieces, or pieces of
 * `chunk_size` bytes, or the whole text when both are 0. */
typedef int (*piece_fn)(void *ctx, const char *p, size_t n);

static int split(const char *s, uint32_t chunks, uint32_t chunk_size,
                 piece_fn fn, void *ctx) {
  size_t len = strlen(s);
  size_t pos = 0;
  uint32_t k = 0;
  int err;

  if (len == 0) {
    return fn(ctx, s, 0);
  }
  while (pos < len) {
    size_t end;

    if (chunk_size != 0) {
      end = pos + chunk_size;
    } else if (chunks > 1) {
      k++;
      end = (size_t)((unsigned long long)len * k / chunks);
    } else {
      end = len;
    }
    if (end > len) {
      end = len;
    }
    end = boundary(s, len, end);
    if (end <= pos) {
      continue; /* more chunks than characters: skip empty pieces */
    }
    err = fn(ctx, s + pos, end - pos);
    if (err != 0) {
      return err;
    }
    pos = end;
  }
  return 0;
}

/* ---- shared bits ---------------------------------------------------------- */

const char *al__mockllm_stop_reason(const al__mock_response_t *r) {
  size_t i;

  if (r->stop_reason != NULL) {
    return r->stop_reason;
  }
  for (i = 0; i < r->nblocks; i++) {
    if (r->blocks[i].kind == AL__BLK_TOOL_USE) {
      return "tool_use";
    }
  }
  return "end_turn";
}

static const char *finish_reason(const char *stop) {
  if (strcmp(stop, "tool_use") == 0) {
    return "tool_calls";
  }
  if (strcmp(stop, "max_tokens") == 0 ||
      strcmp(stop, "model_context_window_exceeded") == 0) {
    return "length";
  }
  if (strcmp(stop, "refusal") == 0) {
    return "content_filter";
  }
  return "stop";
}

static int64_t out_tokens(const al__mock_response_t *r) {
  size_t i;
  uint64_t bytes = 0;

  if (r->out_tokens >= 0) {
    return r->out_tokens;
  }
  /* The usual estimate: one token per four bytes of output. */
  for (i = 0; i < r->nblocks; i++) {
    const al__mock_block_t *b = &r->blocks[i];

    if (b->kind == AL__BLK_REPEAT_TEXT) {
      bytes += (uint64_t)strlen(b->text) * b->count;
    } else if (b->kind == AL__BLK_TOOL_USE) {
      bytes += strlen(b->input);
    } else if (b->text != NULL) {
      bytes += strlen(b->text);
    }
  }
  return (int64_t)(bytes / 4 + 1);
}

static int64_t in_tokens(const al__mock_response_t *r) {
  return r->in_tokens >= 0 ? r->in_tokens : 25;
}

static uint32_t blk_delay(const al__mock_response_t *r,
                          const al__mock_block_t *b) {
  return b->delay_ms >= 0 ? (uint32_t)b->delay_ms : r->delay_ms;
}

/* ---- Anthropic ------------------------------------------------------------ */

typedef struct {
  al__mock_events_t *l;
  size_t index;
  const char *delta_type; /* text_delta, thinking_delta, input_json_delta */
  const char *field;      /* text, thinking, partial_json */
  uint32_t delay;
} ant_piece_t;

static int ant_piece(void *ctx, const char *p, size_t n) {
  ant_piece_t *a = ctx;
  json_t *d = json_pack("{s:s, s:s%}", "type", a->delta_type, a->field, p, n);

  if (d == NULL) {
    return AL_EPARSE;
  }
  return ev_json(a->l, "content_block_delta",
                 json_pack("{s:s, s:I, s:o}", "type", "content_block_delta",
                           "index", (json_int_t)a->index, "delta", d),
                 a->delay, 1);
}

static int ant_block_start(al__mock_events_t *l, size_t index, json_t *blk) {
  if (blk == NULL) {
    return AL_EPARSE;
  }
  return ev_json(l, "content_block_start",
                 json_pack("{s:s, s:I, s:o}", "type", "content_block_start",
                           "index", (json_int_t)index, "content_block", blk),
                 0, 1);
}

static int ant_block_stop(al__mock_events_t *l, size_t index) {
  return ev_json(l, "content_block_stop",
                 json_pack("{s:s, s:I}", "type", "content_block_stop", "index",
                           (json_int_t)index),
                 0, 1);
}

static const char ant_ping[] = "event: ping\ndata: {\"type\": \"ping\"}\n\n";

static int render_anthropic(al__mock_response_t *r, al__mock_events_t *l) {
  size_t i;
  size_t index = 0;
  int err;

  err = ev_json(
      l, "message_start",
      json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, "
                "s:{s:I, s:I, s:I, s:I, s:s}}}",
                "type", "message_start", "message", "id", r->id, "type",
                "message", "role", "assistant", "model", r->model, "content",
                "stop_reason", "stop_sequence", "usage", "input_tokens",
                (json_int_t)in_tokens(r), "cache_creation_input_tokens",
                (json_int_t)(r->cache_create > 0 ? r->cache_create : 0),
                "cache_read_input_tokens",
                (json_int_t)(r->cache_read > 0 ? r->cache_read : 0),
                "output_tokens", (json_int_t)1, "service_tier", "standard"),
      0, 1);
  if (err == 0) {
    l->v[l->n - 1].flags |= AL__EV_USAGE;
  }
  for (i = 0; err == 0 && i < r->nblocks; i++) {
    const al__mock_block_t *b = &r->blocks[i];
    ant_piece_t a = {l, index, NULL, NULL, blk_delay(r, b)};

    switch (b->kind) {
      case AL__BLK_PING:
        err = ev_raw(l, ant_ping, blk_delay(r, b), AL__EV_PING);
        continue;
      case AL__BLK_TEXT:
        err = ant_block_start(l, index,
                              json_pack("{s:s, s:s}", "type", "text", "text", ""));
        a.delta_type = "text_delta";
        a.field = "text";
        if (err == 0) {
          err = split(b->text, b->chunks, b->chunk_size, ant_piece, &a);
        }
        break;
      case AL__BLK_REPEAT_TEXT: {
        json_t *d;

        err = ant_block_start(l, index,
                              json_pack("{s:s, s:s}", "type", "text", "text", ""));
        d = json_pack("{s:s, s:s}", "type", "text_delta", "text", b->text);
        if (err == 0 && d == NULL) {
          err = AL_EPARSE;
        }
        if (err == 0) {
          err = ev_json(l, "content_block_delta",
                        json_pack("{s:s, s:I, s:o}", "type",
                                  "content_block_delta", "index",
                                  (json_int_t)index, "delta", d),
                        a.delay, b->count);
        } else {
          json_decref(d);
        }
        break;
      }
      case AL__BLK_THINKING:
        err = ant_block_start(l, index,
                              json_pack("{s:s, s:s, s:s}", "type", "thinking",
                                        "thinking", "", "signature", ""));
        a.delta_type = "thinking_delta";
        a.field = "thinking";
        if (err == 0) {
          err = split(b->text, b->chunks, b->chunk_size, ant_piece, &a);
        }
        if (err == 0) {
          a.delta_type = "signature_delta";
          a.field = "signature";
          err = ant_piece(&a, b->signature, strlen(b->signature));
        }
        break;
      case AL__BLK_REDACTED:
        err = ant_block_start(l, index,
                              json_pack("{s:s, s:s}", "type",
                                        "redacted_thinking", "data", b->text));
        break;
      case AL__BLK_TOOL_USE:
        err = ant_block_start(l, index,
                              json_pack("{s:s, s:s, s:s, s:{}}", "type",
                                        "tool_use", "id", b->id, "name",
                                        b->name, "input"));
        a.delta_type = "input_json_delta";
        a.field = "partial_json";
        /* The API's first input delta is usually empty; keep that. */
        if (err == 0) {
          err = ant_piece(&a, "", 0);
        }
        if (err == 0 && b->input[0] != '\0') {
          err = split(b->input, b->pieces, 0, ant_piece, &a);
        }
        break;
    }
    if (err == 0) {
      err = ant_block_stop(l, index);
    }
    index++;
  }
  if (err == 0) {
    err = ev_json(l, "message_delta",
                  json_pack("{s:s, s:{s:s, s:n}, s:{s:I}}", "type",
                            "message_delta", "delta", "stop_reason",
                            al__mockllm_stop_reason(r), "stop_sequence",
                            "usage", "output_tokens",
                            (json_int_t)out_tokens(r)),
                  0, 1);
  }
  if (err == 0) {
    err = ev_json(l, "message_stop",
                  json_pack("{s:s}", "type", "message_stop"), 0, 1);
  }
  return err;
}

/* ---- OpenAI ---------------------------------------------------------------- */

typedef struct {
  al__mock_events_t *l;
  const al_mockllm_scenario_t *s;
  const al__mock_response_t *r;
  bool usage; /* include "usage": null on every chunk */
  const char *field;  /* content / reasoning_content */
  size_t tool_index;
  uint32_t delay;
} oai_t;

/* A chunk with one choice; steals delta. finish may be NULL. */
static json_t *oai_chunk(const oai_t *o, json_t *delta, const char *finish) {
  json_t *c;

  if (delta == NULL) {
    return NULL;
  }
  c = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:[{s:i, s:o, s:n, s:o}]}",
                "id", o->r->oai_id, "object", "chat.completion.chunk", "created",
                (json_int_t)o->s->created, "model", o->r->model,
                "service_tier", "default", "system_fingerprint", "fp_mockllm",
                "choices", "index", 0, "delta", delta, "logprobs",
                "finish_reason",
                finish ? json_string(finish) : json_null());
  if (c != NULL && o->usage) {
    json_object_set_new(c, "usage", json_null());
  }
  return c;
}

static int oai_text_piece(void *ctx, const char *p, size_t n) {
  oai_t *o = ctx;
  json_t *d = json_pack("{s:s%}", o->field, p, n);

  if (d == NULL) {
    return AL_EPARSE;
  }
  return ev_json(o->l, NULL, oai_chunk(o, d, NULL), o->delay, 1);
}

static int oai_args_piece(void *ctx, const char *p, size_t n) {
  oai_t *o = ctx;
  json_t *d = json_pack("{s:[{s:I, s:{s:s%}}]}", "tool_calls", "index",
                        (json_int_t)o->tool_index, "function", "arguments", p,
                        n);

  if (d == NULL) {
    return AL_EPARSE;
  }
  return ev_json(o->l, NULL, oai_chunk(o, d, NULL), o->delay, 1);
}

static int render_openai(al_mockllm_scenario_t *s, al__mock_response_t *r,
                         al__mock_events_t *l, bool usage) {
  oai_t o = {l, s, r, usage, NULL, 0, 0};
  size_t i;
  int err;

  err = ev_json(l, NULL,
                oai_chunk(&o, json_pack("{s:s, s:s, s:n}", "role", "assistant",
                                        "content", "", "refusal"),
                          NULL),
                0, 1);
  for (i = 0; err == 0 && i < r->nblocks; i++) {
    const al__mock_block_t *b = &r->blocks[i];

    o.delay = blk_delay(r, b);
    switch (b->kind) {
      case AL__BLK_PING:
        /* OpenAI-compatible servers keep alive with SSE comments. */
        err = ev_raw(l, ": ping\n\n", o.delay, AL__EV_PING);
        break;
      case AL__BLK_TEXT:
        o.field = "content";
        err = split(b->text, b->chunks, b->chunk_size, oai_text_piece, &o);
        break;
      case AL__BLK_THINKING:
        o.field = "reasoning_content";
        err = split(b->text, b->chunks, b->chunk_size, oai_text_piece, &o);
        break;
      case AL__BLK_REPEAT_TEXT:
        err = ev_json(l, NULL,
                      oai_chunk(&o, json_pack("{s:s}", "content", b->text),
                                NULL),
                      o.delay, b->count);
        break;
      case AL__BLK_REDACTED:
        break; /* no OpenAI equivalent */
      case AL__BLK_TOOL_USE:
        err = ev_json(
            l, NULL,
            oai_chunk(&o,
                      json_pack("{s:[{s:I, s:s, s:s, s:{s:s, s:s}}]}",
                                "tool_calls", "index",
                                (json_int_t)o.tool_index, "id", b->id, "type",
                                "function", "function", "name", b->name,
                                "arguments", ""),
                      NULL),
            0, 1);
        if (err == 0 && b->input[0] != '\0') {
          err = split(b->input, b->pieces, 0, oai_args_piece, &o);
        }
        o.tool_index++;
        break;
    }
  }
  if (err == 0) {
    err = ev_json(l, NULL,
                  oai_chunk(&o, json_object(),
                            finish_reason(al__mockllm_stop_reason(r))),
                  0, 1);
  }
  if (err == 0 && usage) {
    int64_t in = in_tokens(r);
    int64_t out = out_tokens(r);

    err = ev_json(
        l, NULL,
        json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:[], s:{s:I, s:I, s:I, "
                  "s:{s:I}, s:{s:I}}}",
                  "id", r->oai_id, "object", "chat.completion.chunk", "created",
                  (json_int_t)s->created, "model", r->model, "service_tier",
                  "default", "system_fingerprint", "fp_mockllm", "choices",
                  "usage", "prompt_tokens", (json_int_t)in,
                  "completion_tokens", (json_int_t)out, "total_tokens",
                  (json_int_t)(in + out), "prompt_tokens_details",
                  "cached_tokens",
                  (json_int_t)(r->cache_read > 0 ? r->cache_read : 0),
                  "completion_tokens_details", "reasoning_tokens",
                  (json_int_t)0),
        0, 1);
    if (err == 0) {
      l->v[l->n - 1].flags |= AL__EV_USAGE;
    }
  }
  if (err == 0) {
    err = ev_raw(l, "data: [DONE]\n\n", 0, AL__EV_DONE);
  }
  return err;
}

/* ---- OpenAI Responses ------------------------------------------------------ */

static char *repeat_str(const char *unit, uint64_t count);

typedef struct {
  al__mock_events_t *l;
  const al__mock_response_t *r;
  json_int_t seq;
  json_int_t out_index;
  const char *type; /* delta event type */
  const char *item_id;
  uint32_t delay;
} rsp_t;

/* One named event; steals obj, numbers it. */
static int rsp_ev(rsp_t *o, const char *type, json_t *obj, uint32_t delay) {
  if (obj == NULL) {
    return AL_ENOMEM;
  }
  json_object_set_new(obj, "type", json_string(type));
  json_object_set_new(obj, "sequence_number", json_integer(o->seq++));
  return ev_json(o->l, type, obj, delay, 1);
}

static int rsp_piece(void *ctx, const char *p, size_t n) {
  rsp_t *o = ctx;

  return rsp_ev(o, o->type,
                json_pack("{s:s,s:I,s:i,s:s%}", "item_id", o->item_id,
                          "output_index", o->out_index, "content_index", 0,
                          "delta", p, n),
                o->delay);
}

static json_t *rsp_response(const al__mock_response_t *r, const char *status,
                            json_t *output, json_t *usage) {
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:b,s:o}", "id", r->oai_id,
                   "object", "response", "created_at", (json_int_t)1750000000,
                   "status", status, "model", r->model, "output",
                   output != NULL ? output : json_array(), "store", 0, "usage",
                   usage != NULL ? usage : json_null());
}

/* The scripted reply as the Responses API streams it: a reasoning item
 * per thinking block (summary deltas, encrypted_content "enc:<index>"
 * that a later request must send back unchanged), a message item per text
 * block, a function_call item per tool_use, then response.completed. */
static int render_responses(al__mock_response_t *r, al__mock_events_t *l) {
  rsp_t o = {l, r, 0, 0, NULL, NULL, 0};
  json_t *output = json_array();
  size_t i;
  int err;
  char id[64];

  err = rsp_ev(&o, "response.created",
               json_pack("{s:o}", "response",
                         rsp_response(r, "in_progress", NULL, NULL)),
               0);
  for (i = 0; err == 0 && i < r->nblocks; i++) {
    const al__mock_block_t *b = &r->blocks[i];
    json_t *item = NULL;

    o.delay = blk_delay(r, b);
    o.out_index = (json_int_t)json_array_size(output);
    switch (b->kind) {
      case AL__BLK_TEXT:
      case AL__BLK_REPEAT_TEXT: {
        char *t = b->kind == AL__BLK_TEXT ? al_strdup(b->text)
                                          : repeat_str(b->text, b->count);

        snprintf(id, sizeof(id), "msg_%s_%zu", r->oai_id, i);
        o.item_id = id;
        err = rsp_ev(&o, "response.output_item.added",
                     json_pack("{s:I,s:{s:s,s:s,s:s,s:[],s:s}}", "output_index",
                               o.out_index, "item", "id", id, "type",
                               "message", "status", "in_progress", "content",
                               "role", "assistant"),
                     0);
        o.type = "response.output_text.delta";
        if (err == 0 && t != NULL) {
          err = split(t, b->chunks, b->chunk_size, rsp_piece, &o);
        }
        item = json_pack("{s:s,s:s,s:s,s:[{s:s,s:[],s:s}],s:s}", "id", id,
                         "type", "message", "status", "completed", "content",
                         "type", "output_text", "annotations", "text",
                         t != NULL ? t : "", "role", "assistant");
        al_free(t);
        break;
      }
      case AL__BLK_THINKING: {
        char enc[64];

        snprintf(id, sizeof(id), "rs_%s_%zu", r->oai_id, i);
        snprintf(enc, sizeof(enc), "enc:%s:%zu", r->oai_id, i);
        o.item_id = id;
        err = rsp_ev(&o, "response.output_item.added",
                     json_pack("{s:I,s:{s:s,s:s,s:[]}}", "output_index",
                               o.out_index, "item", "id", id, "type",
                               "reasoning", "summary"),
                     0);
        o.type = "response.reasoning_summary_text.delta";
        if (err == 0) {
          err = split(b->text, b->chunks, b->chunk_size, rsp_piece, &o);
        }
        item = json_pack("{s:s,s:s,s:s,s:[{s:s,s:s}]}", "id", id, "type",
                         "reasoning", "encrypted_content", enc, "summary",
                         "type", "summary_text", "text", b->text);
        break;
      }
      case AL__BLK_TOOL_USE:
        snprintf(id, sizeof(id), "fc_%s_%zu", r->oai_id, i);
        o.item_id = id;
        err = rsp_ev(&o, "response.output_item.added",
                     json_pack("{s:I,s:{s:s,s:s,s:s,s:s,s:s,s:s}}",
                               "output_index", o.out_index, "item", "id", id,
                               "type", "function_call", "status",
                               "in_progress", "arguments", "", "call_id",
                               b->id, "name", b->name),
                     0);
        o.type = "response.function_call_arguments.delta";
        if (err == 0 && b->input[0] != '\0') {
          err = split(b->input, b->pieces, 0, rsp_piece, &o);
        }
        item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type",
                         "function_call", "status", "completed", "arguments",
                         b->input, "call_id", b->id, "name", b->name);
        break;
      case AL__BLK_PING:
      case AL__BLK_REDACTED:
        continue; /* no Responses equivalent */
    }
    if (err == 0 && item != NULL) {
      err = rsp_ev(&o, "response.output_item.done",
                   json_pack("{s:I,s:O}", "output_index", o.out_index, "item",
                             item),
                   0);
      json_array_append_new(output, item);
    } else {
      json_decref(item);
    }
  }
  if (err == 0) {
    int64_t in = in_tokens(r);
    int64_t out = out_tokens(r);

    err = rsp_ev(
        &o, "response.completed",
        json_pack("{s:o}", "response",
                  rsp_response(r, "completed", json_incref(output),
                               json_pack("{s:I,s:{s:I},s:I,s:{s:i},s:I}",
                                         "input_tokens", (json_int_t)in,
                                         "input_tokens_details",
                                         "cached_tokens",
                                         (json_int_t)(r->cache_read > 0
                                                          ? r->cache_read
                                                          : 0),
                                         "output_tokens", (json_int_t)out,
                                         "output_tokens_details",
                                         "reasoning_tokens", 0, "total_tokens",
                                         (json_int_t)(in + out)))),
        0);
  }
  json_decref(output);
  return err;
}

int al__mockllm_render(al_mockllm_scenario_t *s, al__mock_response_t *r,
                       size_t index) {
  int err;

  (void)index;
  if (r->status != 0 && r->status != 200) {
    return 0; /* an HTTP error: nothing streams */
  }
  if (r->raw != NULL) {
    size_t k;

    for (k = 0, err = 0; k < AL__R_COUNT && err == 0; k++) {
      char *b = al_malloc(r->raw_len + 1);

      if (b == NULL) {
        return AL_ENOMEM;
      }
      memcpy(b, r->raw, r->raw_len);
      b[r->raw_len] = '\0';
      err = ev_add(&r->ev[k], b, r->raw_len, 0, 0, 1);
    }
    return err;
  }
  err = render_anthropic(r, &r->ev[AL__R_ANTHROPIC]);
  if (err == 0) {
    err = render_openai(s, r, &r->ev[AL__R_OPENAI], false);
  }
  if (err == 0) {
    err = render_openai(s, r, &r->ev[AL__R_OPENAI_USAGE], true);
  }
  if (err == 0) {
    err = render_responses(r, &r->ev[AL__R_RESPONSES]);
  }
  return err;
}

/* ---- non-streaming bodies ---------------------------------------------------- */

static char *repeat_str(const char *unit, uint64_t count) {
  size_t ul = strlen(unit);
  al_buf_t b;
  uint64_t i;

  al_buf_init(&b, (size_t)1 << 31);
  for (i = 0; i < count; i++) {
    if (al_buf_append(&b, unit, ul) != 0) {
      al_buf_free(&b);
      return NULL;
    }
  }
  if (b.data == NULL) {
    return al_strdup("");
  }
  return b.data;
}

static json_t *parse_input(const char *text) {
  json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);

  if (j == NULL) {
    /* A raw input_json that is not JSON: shape it the way the agent loop
     * keeps invalid tool input (SPEC §5). */
    j = json_pack("{s:s}", "_raw", text);
  }
  return j;
}

static json_t *body_anthropic(const al__mock_response_t *r) {
  json_t *content = json_array();
  size_t i;

  for (i = 0; content != NULL && i < r->nblocks; i++) {
    const al__mock_block_t *b = &r->blocks[i];
    json_t *blk = NULL;

    switch (b->kind) {
      case AL__BLK_PING:
        continue;
      case AL__BLK_TEXT:
        blk = json_pack("{s:s, s:s}", "type", "text", "text", b->text);
        break;
      case AL__BLK_REPEAT_TEXT: {
        char *t = repeat_str(b->text, b->count);

        blk = t ? json_pack("{s:s, s:s}", "type", "text", "text", t) : NULL;
        al_free(t);
        break;
      }
      case AL__BLK_THINKING:
        blk = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking",
                        b->text, "signature", b->signature);
        break;
      case AL__BLK_REDACTED:
        blk = json_pack("{s:s, s:s}", "type", "redacted_thinking", "data",
                        b->text);
        break;
      case AL__BLK_TOOL_USE:
        blk = json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", b->id,
                        "name", b->name, "input", parse_input(b->input));
        break;
    }
    if (blk == NULL || json_array_append_new(content, blk) != 0) {
      json_decref(content);
      return NULL;
    }
  }
  if (content == NULL) {
    return NULL;
  }
  return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:n, s:{s:I, s:I, s:I, "
                   "s:I, s:s}}",
                   "id", r->id, "type", "message", "role", "assistant",
                   "model", r->model, "content", content, "stop_reason",
                   al__mockllm_stop_reason(r), "stop_sequence", "usage",
                   "input_tokens", (json_int_t)in_tokens(r),
                   "cache_creation_input_tokens",
                   (json_int_t)(r->cache_create > 0 ? r->cache_create : 0),
                   "cache_read_input_tokens",
                   (json_int_t)(r->cache_read > 0 ? r->cache_read : 0),
                   "output_tokens", (json_int_t)out_tokens(r), "service_tier",
                   "standard");
}

static json_t *body_openai(const al_mockllm_scenario_t *s,
                           const al__mock_response_t *r) {
  al_buf_t text;
  al_buf_t reasoning;
  json_t *calls = json_array();
  json_t *msg;
  size_t i;
  int err = 0;
  int64_t in = in_tokens(r);
  int64_t out = out_tokens(r);

  al_buf_init(&text, (size_t)1 << 31);
  al_buf_init(&reasoning, (size_t)1 << 31);
  for (i = 0; calls != NULL && err == 0 && i < r->nblocks; i++) {
    const al__mock_block_t *b = &r->blocks[i];
    uint64_t k;

    switch (b->kind) {
      case AL__BLK_TEXT:
        err = al_buf_append_str(&text, b->text);
        break;
      case AL__BLK_REPEAT_TEXT:
        for (k = 0; err == 0 && k < b->count; k++) {
          err = al_buf_append_str(&text, b->text);
        }
        break;
      case AL__BLK_THINKING:
        err = al_buf_append_str(&reasoning, b->text);
        break;
      case AL__BLK_TOOL_USE:
        if (json_array_append_new(
                calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", b->id,
                                 "type", "function", "function", "name",
                                 b->name, "arguments", b->input)) != 0) {
          err = AL_ENOMEM;
        }
        break;
      default:
        break;
    }
  }
  msg = calls == NULL || err != 0
            ? NULL
            : json_pack("{s:s, s:o}", "role", "assistant", "content",
                        text.len > 0 || json_array_size(calls) == 0
                            ? json_stringn(text.data ? text.data : "", text.len)
                            : json_null());
  if (msg != NULL && reasoning.len > 0) {
    json_object_set_new(msg, "reasoning_content",
                        json_stringn(reasoning.data, reasoning.len));
  }
  if (msg != NULL && json_array_size(calls) > 0) {
    json_object_set(msg, "tool_calls", calls);
  }
  if (msg != NULL) {
    json_object_set_new(msg, "refusal", json_null());
  }
  json_decref(calls);
  al_buf_free(&text);
  al_buf_free(&reasoning);
  if (msg == NULL) {
    return NULL;
  }
  return json_pack(
      "{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:s}], s:{s:I, s:I, s:I}, "
      "s:s, s:s}",
      "id", r->oai_id, "object", "chat.completion", "created",
      (json_int_t)s->created, "model", r->model, "choices", "index", 0,
      "message", msg, "logprobs", "finish_reason",
      finish_reason(al__mockllm_stop_reason(r)), "usage", "prompt_tokens",
      (json_int_t)in, "completion_tokens", (json_int_t)out, "total_tokens",
      (json_int_t)(in + out), "service_tier", "default", "system_fingerprint",
      "fp_mockllm");
}

int al__mockllm_render_body(al_mockllm_scenario_t *s, al__mock_response_t *r,
                            al_mockllm_proto_t proto) {
  int slot = proto == AL_MOCKLLM_PROTO_OPENAI ? 1 : 0;
  json_t *j;

  if (r->body[slot] != NULL) {
    return 0;
  }
  j = slot ? body_openai(s, r) : body_anthropic(r);
  if (j == NULL) {
    return AL_ENOMEM;
  }
  r->body[slot] = al__mockllm_dumps(j, &r->body_len[slot]);
  json_decref(j);
  return r->body[slot] == NULL ? AL_ENOMEM : 0;
}

/* ---- errors ----------------------------------------------------------------- */

const char *al__mockllm_error_type(int status, al_mockllm_proto_t proto) {
  if (proto == AL_MOCKLLM_PROTO_OPENAI) {
    switch (status) {
      case 400:
      case 404:
      case 413:
        return "invalid_request_error";
      case 401:
        return "invalid_request_error";
      case 403:
        return "permission_error";
      case 429:
        return "requests";
      case 529:
        return "overloaded_error";
      default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
  }
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 504:
      return "timeout_error";
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

const char *al__mockllm_error_message(int status) {
  switch (status) {
    case 400:
      return "Invalid request";
    case 401:
      return "invalid x-api-key";
    case 402:
      return "Your credit balance is too low";
    case 403:
      return "Your API key does not have permission to use the specified "
             "resource.";
    case 404:
      return "Not found";
    case 409:
      return "Conflict";
    case 413:
      return "Request exceeds the maximum allowed number of bytes.";
    case 429:
      return "This request would exceed the rate limit for your "
             "organization. Please try again later.";
    case 504:
      return "Gateway timeout";
    case 529:
      return "Overloaded";
    default:
      return status >= 500 ? "Internal server error" : "Request failed";
  }
}

char *al__mockllm_error_body(al_mockllm_proto_t proto, const char *type,
                             const char *message, const char *param,
                             const char *code, const char *request_id) {
  json_t *j;
  char *s;

  if (proto == AL_MOCKLLM_PROTO_OPENAI) {
    j = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", message,
                  "type", type, "param",
                  param && *param ? json_string(param) : json_null(), "code",
                  code && *code ? json_string(code) : json_null());
  } else {
    j = json_pack("{s:s, s:{s:s, s:s}, s:s}", "type", "error", "error", "type",
                  type, "message", message, "request_id", request_id);
  }
  if (j == NULL) {
    return NULL;
  }
  s = al__mockllm_dumps(j, NULL);
  json_decref(j);
  return s;
}

/* ---- lifetime ----------------------------------------------------------------- */

void al__mockllm_response_free(al__mock_response_t *r) {
  size_t i, k;

  al_free(r->expect_contains);
  al_free(r->expect_not_contains);
  for (i = 0; i < r->nblocks; i++) {
    al__mock_block_t *b = &r->blocks[i];

    al_free(b->text);
    al_free(b->signature);
    al_free(b->id);
    al_free(b->name);
    al_free(b->input);
  }
  al_free(r->blocks);
  al_free(r->model);
  al_free(r->id);
  al_free(r->oai_id);
  al_free(r->stop_reason);
  al_free(r->error_type);
  al_free(r->error_message);
  al_free(r->error_code);
  al_free(r->error_event_type);
  al_free(r->raw);
  json_decref(r->headers);
  for (k = 0; k < AL__R_COUNT; k++) {
    for (i = 0; i < r->ev[k].n; i++) {
      al_free(r->ev[k].v[i].bytes);
    }
    al_free(r->ev[k].v);
  }
  al_free(r->body[0]);
  al_free(r->body[1]);
}

int al__mockllm_default_scenario(al_mockllm_scenario_t **out) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"Hello from agentloop-mockllm.\"\n";

  return al_mockllm_load_scenario_string(yaml, sizeof(yaml) - 1, "<default>",
                                         out, NULL, 0);
}

int al__mockllm_usage_rewrite(const al__mock_event_t *ev,
                              al_mockllm_proto_t proto, int64_t in,
                              int64_t cached, al_buf_t *out) {
  const char *data = memmem(ev->bytes, ev->len, "data: ", 6);
  json_t *j;
  json_t *u;
  char *js;
  size_t jlen;
  int err;

  if (data == NULL) {
    return AL_EINVAL;
  }
  data += 6;
  j = json_loadb(data, ev->len - (size_t)(data - ev->bytes), JSON_DISABLE_EOF_CHECK,
                 NULL);
  if (proto == AL_MOCKLLM_PROTO_OPENAI) {
    u = json_object_get(j, "usage");
    json_object_set_new(u, "prompt_tokens", json_integer(in + cached));
    json_object_set_new(u, "total_tokens",
                        json_integer(in + cached +
                                     json_integer_value(json_object_get(
                                         u, "completion_tokens"))));
    json_object_set_new(json_object_get(u, "prompt_tokens_details"),
                        "cached_tokens", json_integer(cached));
  } else {
    u = json_object_get(json_object_get(j, "message"), "usage");
    json_object_set_new(u, "input_tokens", json_integer(in));
    json_object_set_new(u, "cache_read_input_tokens", json_integer(cached));
  }
  js = u != NULL ? al__mockllm_dumps(j, &jlen) : NULL;
  json_decref(j);
  if (js == NULL) {
    return AL_ENOMEM;
  }
  err = al_buf_append(out, ev->bytes, (size_t)(data - ev->bytes));
  if (err == 0) {
    err = al_buf_append(out, js, jlen);
  }
  if (err == 0) {
    err = al_buf_append_str(out, "\n\n");
  }
  al_free(js);
  return err;
}
