/* OpenAI-compatible Chat Completions: request builder and stream decoder
 * (SPEC §5, PROTOCOLS.md §3).
 *
 * Two products from one pass over the chunks:
 *  1. the normalized events and Anthropic-shaped message the agent loop
 *     uses (choice 0 only): reasoning_content becomes a thinking block,
 *     content a text block, each tool call (keyed by its index, never by
 *     arrival order or id) a tool_use block whose arguments are parsed
 *     once at the end; finish_reason maps to a normalized stop reason and
 *     the usage chunk to Anthropic usage names;
 *  2. optionally, the final chat.completion exactly as the OpenAI TS SDK's
 *     ChatCompletionStream accumulates and finalizes it (PROTOCOLS §3.3),
 *     for `agentloop decode --provider openai`. Object key order follows
 *     the SDK's spreads, so the printed JSON matches JSON.stringify of the
 *     SDK's object.
 *
 * SSE layer (OpenAI TS SDK): stop at the first data exactly "[DONE]";
 * any other data must be JSON (an event-only block has data "" and fails);
 * {"error": ...} data or `event: error` fails the stream; an unterminated
 * last event is flushed at EOF (AL_PDEC_SSE_FLUSH_EOF, pstream.c).
 * Content and arguments are appended into bounded buffers, so a delta
 * costs no allocation once they have grown. */
#include <stdio.h>
#include <stdlib.h>

#include "common/media.h"
#include "provider/provider.h"
#include "provider/provider_int.h"

#define OAI_MAX_CHOICES 128
#define OAI_MAX_TOOLS 128

typedef struct oai_tool_s {
  bool present;
  json_t *obj;       /* tool call snapshot: rest keys, id, type, function */
  json_t *fn;        /* {name, arguments} placeholder inside obj, or NULL */
  json_t *custom;    /* {name, input} placeholder inside obj, or NULL */
  al_buf_t input;    /* custom tool input appended */
  uint32_t input_hi;
  al_buf_t args;
  uint32_t args_hi;  /* high surrogate waiting for the next piece, or 0 */
  int block;         /* normalized block index (choice 0), or -1 */
} oai_tool_t;

struct al__oai_choice_s {
  bool present;
  json_t *obj;      /* {finish_reason, index, message, logprobs, ...} */
  json_t *message;  /* borrowed from obj */
  al_buf_t content;
  al_buf_t refusal;
  bool has_content;
  bool has_refusal;
  uint32_t content_hi; /* high surrogates waiting for the next piece */
  uint32_t refusal_hi;
  /* message.audio: id/expires_at replaced, data/transcript appended. */
  json_t *audio;      /* placeholder inside message, or NULL */
  al_buf_t audio_data;
  al_buf_t audio_tr;
  uint32_t audio_data_hi;
  uint32_t audio_tr_hi;
  bool has_audio_data;
  bool has_audio_tr;
  bool audio_done;    /* the last delta carried only audio.expires_at */
  oai_tool_t *tools;
  size_t ntools;
};

/* ---- helpers --------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  size_t i;

  for (i = 0; i < n; i++) {
    h ^= c[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* A tool call id for a call the server sent without one. The SDK uses a
 * random UUID; ours is derived from the completion id, the choice and the
 * call index (and the seed), so decoding the same bytes twice gives the
 * same output. */
static void synth_call_id(al_pstream_t *s, size_t choice, size_t tool,
                          char out[48]) {
  json_t *id = s->oai_snapshot ? json_object_get(s->oai_snapshot, "id") : NULL;
  uint64_t h = 0xcbf29ce484222325ULL ^ s->opts.id_seed;
  uint64_t h2;

  if (json_is_string(id)) {
    h = fnv1a(h, json_string_value(id), json_string_length(id));
  }
  h = fnv1a(h, &choice, sizeof(choice));
  h = fnv1a(h, &tool, sizeof(tool));
  h2 = fnv1a(h ^ 0x5bd1e995ULL, "agentloop", 9);
  snprintf(out, 48, "call_%08x-%04x-4%03x-a%03x-%012llx",
           (unsigned)(h >> 32), (unsigned)((h >> 16) & 0xFFFF),
           (unsigned)(h & 0xFFF), (unsigned)((h2 >> 52) & 0xFFF),
           (unsigned long long)(h2 & 0xFFFFFFFFFFFFULL));
}

static bool truthy_str(json_t *v) {
  return json_is_string(v) && json_string_length(v) > 0;
}

/* == null in JavaScript: absent (undefined) or null. */
static bool js_null(json_t *v) { return v == NULL || json_is_null(v); }

/* JavaScript truthiness of a JSON value (absent = undefined). */
static bool js_truthy(json_t *v) {
  switch (v != NULL ? json_typeof(v) : JSON_NULL) {
  case JSON_STRING:
    return json_string_length(v) > 0;
  case JSON_INTEGER:
    return json_integer_value(v) != 0;
  case JSON_REAL:
    return json_real_value(v) != 0;
  case JSON_TRUE:
  case JSON_OBJECT:
  case JSON_ARRAY:
    return true;
  default:
    return false;
  }
}

/* Object.assign(dst, src) minus the listed keys. */
static void assign_except(json_t *dst, json_t *src, const char *const *skip,
                          size_t nskip) {
  const char *k;
  json_t *v;

  json_object_foreach(src, k, v) {
    size_t i;
    bool skipped = false;

    for (i = 0; i < nskip; i++) {
      if (strcmp(k, skip[i]) == 0) {
        skipped = true;
        break;
      }
    }
    if (!skipped) {
      json_object_set(dst, k, v);
    }
  }
}

static int fail_decode(al_pstream_t *s, const char *msg) {
  return al__pstream_fail(s, AL_PERR_DECODE, NULL, msg, NULL);
}

/* ---- normalized events (choice 0) -------------------------------------- */

static int start_normalized(al_pstream_t *s, json_t *chunk) {
  json_t *msg;
  json_t *id = json_object_get(chunk, "id");
  json_t *model = json_object_get(chunk, "model");
  int rc;

  msg = json_pack("{s:O?,s:s,s:s,s:O?,s:[],s:n,s:n,s:{s:i,s:i}}", "id",
                  json_is_string(id) ? id : NULL, "type", "message", "role",
                  "assistant", "model", json_is_string(model) ? model : NULL,
                  "content", "stop_reason", "stop_sequence", "usage",
                  "input_tokens", 0, "output_tokens", 0);
  if (msg == NULL) {
    return fail_decode(s, "out of memory");
  }
  rc = al__agg_message_start(s, msg);
  json_decref(msg);
  return rc;
}

static int close_block(al_pstream_t *s, int *slot) {
  int idx = *slot;

  if (idx < 0) {
    return 0;
  }
  *slot = -1;
  return al__agg_block_stop(s, idx);
}

static int open_simple_block(al_pstream_t *s, int *slot, int *other,
                             const char *type) {
  json_t *blk;
  int rc;

  if (*slot >= 0) {
    return 0;
  }
  if ((rc = close_block(s, other)) != 0) {
    return rc;
  }
  if (strcmp(type, "text") == 0) {
    blk = json_pack("{s:s,s:s}", "type", "text", "text", "");
  } else {
    blk = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "",
                    "signature", "");
  }
  rc = al__agg_block_start(s, (int64_t)s->nblocks, blk);
  json_decref(blk);
  if (rc == 0) {
    *slot = (int)(s->nblocks - 1);
  }
  return rc;
}

/* One piece of text or thinking for the normalized message: opens the
 * block it belongs to (closing the other kind) and appends. marked: the
 * piece comes from a string loaded with boundary marks. */
static int norm_piece(al_pstream_t *s, al_fj_kind_t kind, const char *p,
                      size_t n, bool marked) {
  int rc;
  int *slot = kind == AL_FJ_TEXT ? &s->oai_text_block : &s->oai_think_block;
  int *other = kind == AL_FJ_TEXT ? &s->oai_think_block : &s->oai_text_block;
  uint32_t lead = 0;
  uint32_t trail = 0;

  if (n == 0) {
    return 0;
  }
  if ((rc = open_simple_block(s, slot, other,
                              kind == AL_FJ_TEXT ? "text" : "thinking")) != 0) {
    return rc;
  }
  if (marked) {
    al__marks_strip(&p, &n, &lead, &trail);
  }
  return al__agg_delta(s, *slot, kind, p, n, lead, trail);
}

static int norm_text(al_pstream_t *s, al_fj_kind_t kind, json_t *v) {
  if (!truthy_str(v)) {
    return 0;
  }
  return norm_piece(s, kind, json_string_value(v), json_string_length(v),
                    s->oai_marked);
}

/* Content with think tags (models catalogue think_tags): the parts inside
 * <think>...</think> are thinking. A tag may be split across chunks, so
 * the bytes matched so far are kept as a count (they are the tag's own
 * bytes) and given back as text when the match fails. */
static int norm_think_tags(al_pstream_t *s, const char *p, size_t n,
                           bool marked) {
  static const char open_tag[] = "<think>";
  static const char close_tag[] = "</think>";
  size_t i = 0;
  size_t run = 0; /* start of the pending run of plain bytes */
  int rc;

  while (i < n) {
    const char *tag = s->oai_in_think ? close_tag : open_tag;
    size_t tlen = s->oai_in_think ? sizeof(close_tag) - 1
                                  : sizeof(open_tag) - 1;
    al_fj_kind_t kind = s->oai_in_think ? AL_FJ_THINKING : AL_FJ_TEXT;

    if (p[i] == tag[s->oai_tag_match]) {
      if (s->oai_tag_match == 0 && i > run &&
          (rc = norm_piece(s, kind, p + run, i - run, marked)) != 0) {
        return rc;
      }
      if (s->oai_tag_match == 0) {
        run = i;
      }
      i++;
      if (++s->oai_tag_match == tlen) {
        s->oai_in_think = !s->oai_in_think;
        s->oai_tag_match = 0;
        run = i;
      }
      continue;
    }
    if (s->oai_tag_match > 0) {
      /* Not the tag after all: its matched bytes are plain content. When
       * the match began in this piece they are still in p[run..i). */
      size_t m = s->oai_tag_match;

      s->oai_tag_match = 0;
      if (run + m != i) {
        if ((rc = norm_piece(s, kind, tag, m, false)) != 0) {
          return rc;
        }
        run = i;
      }
      continue; /* p[i] is tried again against the tag's first byte */
    }
    i++;
  }
  if (s->oai_tag_match > 0) {
    /* The piece ends inside a possible tag: hold those bytes back. */
    size_t held = AL_MIN((size_t)s->oai_tag_match, n - run);

    n -= held;
  }
  if (n > run) {
    return norm_piece(s, s->oai_in_think ? AL_FJ_THINKING : AL_FJ_TEXT,
                      p + run, n - run, marked);
  }
  return 0;
}

static int norm_content_string(al_pstream_t *s, json_t *v) {
  if (!truthy_str(v)) {
    return 0;
  }
  if (s->opts.think_tags) {
    return norm_think_tags(s, json_string_value(v), json_string_length(v),
                           s->oai_marked);
  }
  return norm_text(s, AL_FJ_TEXT, v);
}

/* Text of a thinking part: a string, or an array of {type:"text",text}
 * (Mistral's Magistral). */
static int norm_thinking_value(al_pstream_t *s, json_t *v) {
  size_t i;
  json_t *e;
  int rc;

  if (json_is_string(v)) {
    return norm_text(s, AL_FJ_THINKING, v);
  }
  json_array_foreach(v, i, e) {
    json_t *t = json_object_get(e, "text");

    if (json_is_string(e)) {
      t = e;
    }
    if ((rc = norm_text(s, AL_FJ_THINKING, t)) != 0) {
      return rc;
    }
  }
  return 0;
}

/* content as an array of typed parts: text parts are the answer, thinking
 * parts reasoning; other parts (images, references) carry no text. */
static int norm_content_parts(al_pstream_t *s, json_t *parts) {
  size_t i;
  json_t *part;
  int rc = 0;

  json_array_foreach(parts, i, part) {
    json_t *t = json_object_get(part, "type");
    const char *ty = json_is_string(t) ? json_string_value(t) : "";

    if (json_is_string(part)) {
      rc = norm_content_string(s, part);
    } else if (strcmp(ty, "text") == 0) {
      rc = norm_content_string(s, json_object_get(part, "text"));
    } else if (strcmp(ty, "thinking") == 0 || strcmp(ty, "reasoning") == 0) {
      json_t *v = json_object_get(part, "thinking");

      rc = norm_thinking_value(s, v != NULL ? v : json_object_get(part, "text"));
    }
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

/* The text block a citation belongs to: the open one, else the last
 * text block, else a new (empty) one. */
static int citation_block(al_pstream_t *s) {
  size_t i;
  int rc;

  if (s->oai_text_block >= 0) {
    return s->oai_text_block;
  }
  for (i = s->nblocks; i-- > 0;) {
    if (s->blocks[i].type == AL_BLOCK_TEXT) {
      return (int)i;
    }
  }
  if ((rc = open_simple_block(s, &s->oai_text_block, &s->oai_think_block,
                              "text")) != 0) {
    return rc;
  }
  return s->oai_text_block;
}

/* One citation in the shape every provider's citations share
 * (docs/events.md "citation"): type, url, title, cited_text, then the
 * provider's other fields as given. Steals nothing. */
static int emit_citation(al_pstream_t *s, const char *url, json_t *title,
                         json_t *cited, json_t *rest) {
  json_t *c = json_object();
  int idx;
  int rc;

  json_object_set_new(c, "type", json_string("url_citation"));
  json_object_set_new(c, "url", json_string(url));
  json_object_set(c, "title", json_is_string(title) ? title : json_null());
  json_object_set(c, "cited_text", json_is_string(cited) ? cited : json_null());
  if (json_is_object(rest)) {
    const char *k;
    json_t *v;

    json_object_foreach(rest, k, v) {
      if (json_object_get(c, k) == NULL && strcmp(k, "content") != 0) {
        json_object_set(c, k, v);
      }
    }
  }
  idx = citation_block(s);
  if (idx < 0) {
    json_decref(c);
    return idx;
  }
  rc = al__agg_citation(s, idx, c);
  json_decref(c);
  return rc;
}

/* OpenAI / OpenRouter message annotations: {"type":"url_citation",
 * "url_citation":{url,title,content,start_index,end_index}}. */
static int norm_annotations(al_pstream_t *s, json_t *anns) {
  size_t i;
  json_t *a;
  int rc;

  json_array_foreach(anns, i, a) {
    json_t *uc = json_object_get(a, "url_citation");
    json_t *url = json_object_get(uc, "url");

    if (!json_is_string(url)) {
      continue;
    }
    if ((rc = emit_citation(s, json_string_value(url),
                            json_object_get(uc, "title"),
                            json_object_get(uc, "content"), uc)) != 0) {
      return rc;
    }
  }
  return 0;
}

/* Perplexity: the chunk's top-level `citations` (URLs, numbered [1]..)
 * with titles from `search_results`, repeated on every chunk: each is
 * delivered once. */
static int norm_perplexity(al_pstream_t *s, json_t *chunk) {
  json_t *cites = json_object_get(chunk, "citations");
  json_t *results = json_object_get(chunk, "search_results");
  size_t i;
  int rc;

  if (!json_is_array(cites) || s->message == NULL) {
    return 0;
  }
  for (i = s->oai_ncited; i < json_array_size(cites); i++) {
    json_t *u = json_array_get(cites, i);
    json_t *title = NULL;
    json_t *rest;
    json_t *r;
    size_t k;

    if (!json_is_string(u)) {
      continue;
    }
    json_array_foreach(results, k, r) {
      if (json_equal(json_object_get(r, "url"), u)) {
        title = json_object_get(r, "title");
        break;
      }
    }
    rest = json_pack("{s:I}", "number", (json_int_t)(i + 1));
    rc = emit_citation(s, json_string_value(u), title, NULL, rest);
    json_decref(rest);
    if (rc != 0) {
      return rc;
    }
  }
  s->oai_ncited = json_array_size(cites);
  return 0;
}

/* OpenRouter reasoning_details: kept whole on the thinking block (signed
 * and encrypted entries must go back unchanged), merged by their `index`
 * as they stream: text/summary/data pieces are appended, other keys
 * (signature, format, id) take the latest value. Returns the thinking
 * text carried, for the delta (reasoning.text text / reasoning.summary). */
static int norm_reasoning_details(al_pstream_t *s, json_t *rd,
                                  bool emit_text) {
  size_t i;
  json_t *e;
  json_t *arr;
  int rc;

  if (!json_is_array(rd) || json_array_size(rd) == 0) {
    return 0;
  }
  if ((rc = open_simple_block(s, &s->oai_think_block, &s->oai_text_block,
                              "thinking")) != 0) {
    return rc;
  }
  arr = json_object_get(s->blocks[s->oai_think_block].block,
                        "reasoning_details");
  if (!json_is_array(arr)) {
    arr = json_array();
    json_object_set_new(s->blocks[s->oai_think_block].block,
                        "reasoning_details", arr);
  }
  json_array_foreach(rd, i, e) {
    json_t *idx = json_object_get(e, "index");
    json_t *type = json_object_get(e, "type");
    json_t *cur = NULL;
    json_t *c;
    size_t k;
    const char *key;
    json_t *val;

    if (!json_is_object(e)) {
      continue;
    }
    json_array_foreach(arr, k, c) {
      if (json_equal(json_object_get(c, "index"), idx) &&
          json_equal(json_object_get(c, "type"), type) && idx != NULL) {
        cur = c;
        break;
      }
    }
    if (cur == NULL) {
      json_array_append_new(arr, json_deep_copy(e));
    } else {
      json_object_foreach(e, key, val) {
        json_t *old = json_object_get(cur, key);

        if ((strcmp(key, "text") == 0 || strcmp(key, "summary") == 0 ||
             strcmp(key, "data") == 0) &&
            json_is_string(val) && json_is_string(old)) {
          al_buf_t b;

          al_buf_init(&b, s->opts.max_block);
          if (al_buf_append(&b, json_string_value(old),
                            json_string_length(old)) != 0 ||
              al_buf_append(&b, json_string_value(val),
                            json_string_length(val)) != 0) {
            al_buf_free(&b);
            return fail_decode(s, "reasoning details too large");
          }
          json_object_set_new(cur, key, json_stringn_nocheck(b.data, b.len));
          al_buf_free(&b);
        } else if (!json_is_null(val)) {
          json_object_set(cur, key, val);
        }
      }
    }
    if (emit_text) {
      json_t *t = json_object_get(e, "text");

      if (!json_is_string(t)) {
        t = json_object_get(e, "summary");
      }
      if ((rc = norm_text(s, AL_FJ_THINKING, t)) != 0) {
        return rc;
      }
    }
  }
  return 0;
}

static int norm_tool(al_pstream_t *s, al__oai_choice_t *c, size_t k,
                     json_t *tc) {
  oai_tool_t *t = &c->tools[k];
  json_t *fn = json_object_get(tc, "function");
  json_t *id = json_object_get(tc, "id");
  json_t *name = json_object_get(fn, "name");
  json_t *args = json_object_get(fn, "arguments");

  if (fn == NULL && json_is_object(json_object_get(tc, "custom"))) {
    /* A custom tool: its free-form input is the tool input text (parsed
     * once at the end like arguments; not JSON => {"_raw": ...}). */
    fn = json_object_get(tc, "custom");
    name = json_object_get(fn, "name");
    args = json_object_get(fn, "input");
  }
  json_t *blk;
  al__pblock_t *b;
  int rc;

  if (t->block < 0) {
    char gen[48];

    if ((rc = close_block(s, &s->oai_text_block)) != 0 ||
        (rc = close_block(s, &s->oai_think_block)) != 0) {
      return rc;
    }
    if (!truthy_str(id)) {
      synth_call_id(s, 0, k, gen);
    }
    blk = json_object();
    json_object_set_new(blk, "type", json_string("tool_use"));
    json_object_set_new(blk, "id", truthy_str(id) ? json_incref(id)
                                                  : json_string(gen));
    json_object_set_new(blk, "name", truthy_str(name) ? json_incref(name)
                                                      : json_string(""));
    json_object_set_new(blk, "input", json_object());
    rc = al__agg_block_start(s, (int64_t)s->nblocks, blk);
    json_decref(blk);
    if (rc != 0) {
      return rc;
    }
    t->block = (int)(s->nblocks - 1);
  } else {
    b = &s->blocks[t->block];
    if (truthy_str(id)) {
      json_object_set(b->block, "id", id);
    }
    if (truthy_str(name)) {
      json_object_set(b->block, "name", name);
    }
  }
  if (truthy_str(args)) {
    const char *p = json_string_value(args);
    size_t n = json_string_length(args);
    uint32_t lead = 0;
    uint32_t trail = 0;

    if (s->oai_marked) {
      al__marks_strip(&p, &n, &lead, &trail);
    }
    return al__agg_delta(s, t->block, AL_FJ_INPUT, p, n, lead, trail);
  }
  return 0;
}

static int norm_finish(al_pstream_t *s, const char *finish) {
  al__oai_choice_t *c = s->oai_nchoices > 0 ? &s->oai_choices[0] : NULL;
  json_t *data;
  size_t k;
  int rc;

  if (s->oai_tag_match > 0) {
    /* The content ended inside what looked like a think tag: it was
     * text. */
    const char *tag = s->oai_in_think ? "</think>" : "<think>";
    size_t m = s->oai_tag_match;

    s->oai_tag_match = 0;
    if ((rc = norm_piece(s, s->oai_in_think ? AL_FJ_THINKING : AL_FJ_TEXT,
                         tag, m, false)) != 0) {
      return rc;
    }
  }

  if ((rc = close_block(s, &s->oai_text_block)) != 0 ||
      (rc = close_block(s, &s->oai_think_block)) != 0) {
    return rc;
  }
  for (k = 0; c != NULL && k < c->ntools; k++) {
    if (c->tools[k].present && c->tools[k].block >= 0 &&
        !s->blocks[c->tools[k].block].stopped) {
      if ((rc = al__agg_block_stop(s, c->tools[k].block)) != 0) {
        return rc;
      }
    }
  }
  data = json_pack("{s:{s:s,s:n},s:{}}", "delta", "stop_reason",
                   al_stop_reason_name(al__provider_stop_from_openai(finish)),
                   "stop_sequence", "usage");
  if (data == NULL) {
    return fail_decode(s, "out of memory");
  }
  /* Keep the usage counted so far (message_delta overwrites output_tokens). */
  json_object_set(json_object_get(data, "usage"), "output_tokens",
                  json_object_get(json_object_get(s->message, "usage"),
                                  "output_tokens"));
  rc = al__agg_message_delta(s, data);
  json_decref(data);
  return rc;
}

static int64_t int_at(json_t *o, const char *k, bool *has) {
  json_t *v = json_object_get(o, k);

  if (json_is_integer(v)) {
    *has = true;
    return json_integer_value(v) > 0 ? json_integer_value(v) : 0;
  }
  return 0;
}

/* OpenAI-style usage (Chat Completions or Responses names) in our
 * normalized, Anthropic-style names (docs/providers.md, "Usage"):
 *   input_tokens                 uncached input only: the OpenAI prompt
 *                                count includes cached tokens (read and,
 *                                at OpenRouter, written), so they are
 *                                taken out (clamped at 0);
 *   cache_read_input_tokens      prompt_tokens_details.cached_tokens /
 *                                input_tokens_details.cached_tokens, or
 *                                DeepSeek's prompt_cache_hit_tokens;
 *   cache_creation_input_tokens  prompt_tokens_details.cache_write_tokens
 *                                (OpenRouter, for models that bill it);
 *   output_tokens                completion/output tokens (reasoning
 *                                included, as billed);
 *   reasoning_tokens             completion_tokens_details.reasoning_tokens
 *                                / output_tokens_details.reasoning_tokens
 *                                (a part of output_tokens). */
json_t *al__provider_usage_from_openai(json_t *u) {
  json_t *nu;
  json_t *pd;
  json_t *cd;
  bool has_in = false;
  bool has_out = false;
  bool has_cr = false;
  bool has_cw = false;
  bool has_rs = false;
  int64_t in;
  int64_t out;
  int64_t cr;
  int64_t cw;
  int64_t rs;

  if (!json_is_object(u)) {
    return NULL;
  }
  pd = json_object_get(u, "prompt_tokens_details");
  if (!json_is_object(pd)) {
    pd = json_object_get(u, "input_tokens_details");
  }
  cd = json_object_get(u, "completion_tokens_details");
  if (!json_is_object(cd)) {
    cd = json_object_get(u, "output_tokens_details");
  }
  in = int_at(u, "prompt_tokens", &has_in);
  if (!has_in) {
    in = int_at(u, "input_tokens", &has_in);
  }
  out = int_at(u, "completion_tokens", &has_out);
  if (!has_out) {
    out = int_at(u, "output_tokens", &has_out);
  }
  cr = int_at(pd, "cached_tokens", &has_cr);
  if (!has_cr) {
    cr = int_at(u, "prompt_cache_hit_tokens", &has_cr);
  }
  cw = int_at(pd, "cache_write_tokens", &has_cw);
  rs = int_at(cd, "reasoning_tokens", &has_rs);
  nu = json_object();
  if (has_in) {
    json_object_set_new(nu, "input_tokens",
                        json_integer(in > cr + cw ? in - cr - cw : 0));
  }
  json_object_set_new(nu, "output_tokens", json_integer(out));
  if (has_cr) {
    json_object_set_new(nu, "cache_read_input_tokens", json_integer(cr));
  }
  if (has_cw) {
    json_object_set_new(nu, "cache_creation_input_tokens", json_integer(cw));
  }
  if (has_rs) {
    json_object_set_new(nu, "reasoning_tokens", json_integer(rs));
  }
  return nu;
}

static int norm_usage(al_pstream_t *s, json_t *u) {
  json_t *data;
  json_t *nu;
  json_t *v;
  int rc;

  if (!json_is_object(u) || s->message == NULL) {
    return 0;
  }
  nu = al__provider_usage_from_openai(u);
  if (nu == NULL) {
    return fail_decode(s, "out of memory");
  }
  v = json_object_get(nu, "reasoning_tokens");
  if (v != NULL) {
    /* Not one of the Anthropic usage keys message_delta merges: set on
     * the message itself. */
    json_t *mu = json_object_get(s->message, "usage");

    if (json_is_object(mu)) {
      json_object_set(mu, "reasoning_tokens", v);
    }
  }
  v = json_object_get(s->message, "stop_reason");
  data = json_pack("{s:{s:O,s:n},s:o}", "delta", "stop_reason",
                   v != NULL ? v : json_null(), "stop_sequence", "usage", nu);
  if (data == NULL) {
    return fail_decode(s, "out of memory");
  }
  rc = al__agg_message_delta(s, data);
  json_decref(data);
  return rc;
}

/* ---- SDK-shaped accumulation -------------------------------------------- */

static al__oai_choice_t *get_choice(al_pstream_t *s, size_t index) {
  if (index >= s->oai_nchoices) {
    size_t n = index + 1;
    al__oai_choice_t *nc = al_realloc(s->oai_choices, n * sizeof(*nc));

    if (nc == NULL) {
      return NULL;
    }
    memset(nc + s->oai_nchoices, 0, (n - s->oai_nchoices) * sizeof(*nc));
    s->oai_choices = nc;
    s->oai_nchoices = n;
  }
  return &s->oai_choices[index];
}

static oai_tool_t *get_tool(al__oai_choice_t *c, size_t k, size_t max_block) {
  if (k >= c->ntools) {
    size_t n = k + 1;
    size_t i;
    oai_tool_t *nt = al_realloc(c->tools, n * sizeof(*nt));

    if (nt == NULL) {
      return NULL;
    }
    memset(nt + c->ntools, 0, (n - c->ntools) * sizeof(*nt));
    for (i = c->ntools; i < n; i++) {
      nt[i].block = -1;
      al_buf_init(&nt[i].args, max_block);
      al_buf_init(&nt[i].input, max_block);
    }
    c->tools = nt;
    c->ntools = n;
  }
  return &c->tools[k];
}

static int merge_logprobs(al__oai_choice_t *c, json_t *lp) {
  json_t *cur = json_object_get(c->obj, "logprobs");
  static const char *const arrays[] = {"content", "refusal"};
  size_t i;

  if (!json_is_object(cur)) {
    json_object_set_new(c->obj, "logprobs", json_copy(lp));
    return 0;
  }
  assign_except(cur, lp, arrays, 2);
  for (i = 0; i < 2; i++) {
    json_t *add = json_object_get(lp, arrays[i]);
    json_t *arr;

    if (!json_is_array(add) || json_array_size(add) == 0) {
      continue;
    }
    arr = json_object_get(cur, arrays[i]);
    if (!json_is_array(arr)) {
      json_object_set_new(cur, arrays[i], json_array());
      arr = json_object_get(cur, arrays[i]);
    }
    json_array_extend(arr, add);
  }
  return 0;
}

static int apply_tool_call(al_pstream_t *s, al__oai_choice_t *c, size_t ci,
                           json_t *tc) {
  static const char *const skip[] = {"index", "id", "type", "function",
                                     "custom"};
  json_t *jidx = json_object_get(tc, "index");
  json_t *id = json_object_get(tc, "id");
  json_t *type = json_object_get(tc, "type");
  json_t *fn = json_object_get(tc, "function");
  json_t *custom = json_object_get(tc, "custom");
  json_t *v;
  oai_tool_t *t;
  json_int_t k;

  if (jidx == NULL || json_is_null(jidx)) {
    /* No index (Mistral and others): the call with this id, a new call
     * for a new id, or the latest call for a piece without an id. */
    size_t j;

    k = (json_int_t)c->ntools;
    for (j = 0; j < c->ntools; j++) {
      if (c->tools[j].present && truthy_str(id) &&
          json_equal(json_object_get(c->tools[j].obj, "id"), id)) {
        k = (json_int_t)j;
        break;
      }
    }
    if (!truthy_str(id) && c->ntools > 0) {
      k = (json_int_t)c->ntools - 1;
    }
    if (k >= OAI_MAX_TOOLS) {
      return fail_decode(s, "too many tool calls");
    }
  } else if (!json_is_integer(jidx) || json_integer_value(jidx) < 0 ||
             json_integer_value(jidx) >= OAI_MAX_TOOLS) {
    return fail_decode(s, "tool call without a valid index");
  } else {
    k = json_integer_value(jidx);
  }
  if ((t = get_tool(c, (size_t)k, s->opts.max_block)) == NULL) {
    return fail_decode(s, "out of memory");
  }
  if (!t->present) {
    t->present = true;
    t->obj = json_object();
  }
  assign_except(t->obj, tc, skip, AL_ARRAY_SIZE(skip));
  if (truthy_str(id)) {
    json_object_set(t->obj, "id", id);
  }
  if (json_is_string(type) ? json_string_length(type) > 0
                           : (type != NULL && json_is_true(type))) {
    json_object_set(t->obj, "type", type);
  }
  if (js_truthy(custom)) {
    /* Custom tools: {name: name ?? "", input: ""} on first sight, name
     * replaced when non-empty, input appended. */
    if (t->custom == NULL) {
      v = json_object_get(custom, "name");
      t->custom = json_object();
      json_object_set_new(t->custom, "name", v != NULL && !json_is_null(v)
                                                 ? json_incref(v)
                                                 : json_string(""));
      json_object_set_new(t->custom, "input", json_string(""));
      json_object_set_new(t->obj, "custom", t->custom);
    }
    v = json_object_get(custom, "name");
    if (js_truthy(v)) {
      json_object_set(t->custom, "name", v);
    }
    v = json_object_get(custom, "input");
    if (truthy_str(v) &&
        al__marks_append(&t->input, &t->input_hi, json_string_value(v),
                         json_string_length(v), s->oai_marked) != 0) {
      return fail_decode(s, "custom tool input too large");
    }
  }
  if (fn != NULL && !json_is_null(fn) && !json_is_false(fn)) {
    if (t->fn == NULL) {
      v = json_object_get(fn, "name");
      t->fn = json_object();
      json_object_set_new(t->fn, "name", json_is_string(v) ? json_incref(v)
                                                           : json_string(""));
      json_object_set_new(t->fn, "arguments", json_string(""));
      json_object_set_new(t->obj, "function", t->fn);
    }
    v = json_object_get(fn, "name");
    if (truthy_str(v)) {
      json_object_set(t->fn, "name", v);
    }
    v = json_object_get(fn, "arguments");
    if (truthy_str(v) &&
        al__marks_append(&t->args, &t->args_hi, json_string_value(v),
                         json_string_length(v), s->oai_marked) != 0) {
      return fail_decode(s, "tool call arguments too large");
    }
  }
  if (ci == 0 && s->message != NULL) {
    return norm_tool(s, c, (size_t)k, tc);
  }
  return 0;
}

static int apply_audio(al_pstream_t *s, al__oai_choice_t *c, json_t *a) {
  json_t *v;

  if (c->audio == NULL) {
    c->audio = json_object();
    json_object_set_new(c->message, "audio", c->audio);
  }
  if (!js_null(v = json_object_get(a, "id"))) {
    json_object_set(c->audio, "id", v);
  }
  if (!js_null(v = json_object_get(a, "data"))) {
    if (!c->has_audio_data) {
      json_object_set_new(c->audio, "data", json_string(""));
      c->has_audio_data = true;
    }
    if (json_is_string(v) &&
        al__marks_append(&c->audio_data, &c->audio_data_hi,
                         json_string_value(v), json_string_length(v),
                         s->oai_marked) != 0) {
      return fail_decode(s, "audio data too large");
    }
  }
  if (!js_null(v = json_object_get(a, "transcript"))) {
    if (!c->has_audio_tr) {
      json_object_set_new(c->audio, "transcript", json_string(""));
      c->has_audio_tr = true;
    }
    if (json_is_string(v) &&
        al__marks_append(&c->audio_tr, &c->audio_tr_hi, json_string_value(v),
                         json_string_length(v), s->oai_marked) != 0) {
      return fail_decode(s, "audio transcript too large");
    }
  }
  if (!js_null(v = json_object_get(a, "expires_at"))) {
    json_object_set(c->audio, "expires_at", v);
  }
  return 0;
}

static int apply_choice(al_pstream_t *s, json_t *ch) {
  static const char *const choice_skip[] = {"delta", "finish_reason", "index",
                                            "logprobs", "message"};
  static const char *const delta_skip[] = {"content", "refusal",
                                           "function_call", "role",
                                           "tool_calls", "audio"};
  json_t *jidx = json_object_get(ch, "index");
  json_t *delta = json_object_get(ch, "delta");
  json_t *finish = json_object_get(ch, "finish_reason");
  json_t *lp = json_object_get(ch, "logprobs");
  json_t *v;
  al__oai_choice_t *c;
  size_t ci;
  int rc;

  if (!json_is_object(ch) || !json_is_integer(jidx) ||
      json_integer_value(jidx) < 0 ||
      json_integer_value(jidx) >= OAI_MAX_CHOICES) {
    return fail_decode(s, "choice without a valid index");
  }
  ci = (size_t)json_integer_value(jidx);
  if ((c = get_choice(s, ci)) == NULL) {
    return fail_decode(s, "out of memory");
  }
  if (!c->present) {
    /* { finish_reason, index, message: {}, logprobs, ...other } */
    c->present = true;
    c->obj = json_object();
    if (finish != NULL) {
      json_object_set(c->obj, "finish_reason", finish);
    }
    json_object_set(c->obj, "index", jidx);
    c->message = json_object();
    json_object_set_new(c->obj, "message", c->message);
    json_object_set_new(c->obj, "logprobs",
                        json_is_object(lp) ? json_deep_copy(lp)
                        : lp != NULL      ? json_incref(lp)
                                          : json_null());
    assign_except(c->obj, ch, choice_skip, AL_ARRAY_SIZE(choice_skip));
    al_buf_init(&c->content, s->opts.max_block);
    al_buf_init(&c->refusal, s->opts.max_block);
    al_buf_init(&c->audio_data, s->opts.max_block);
    al_buf_init(&c->audio_tr, s->opts.max_block);
  }
  if (json_is_object(lp)) {
    /* The SDK merges even on the chunk that created the choice, whose
     * logprobs object is the same one: its arrays end up doubled. */
    merge_logprobs(c, lp);
  }
  if (finish != NULL && json_is_string(finish) &&
      json_string_length(finish) > 0) {
    json_object_set(c->obj, "finish_reason", finish);
  }
  assign_except(c->obj, ch, choice_skip, AL_ARRAY_SIZE(choice_skip));
  if (!json_is_object(delta)) {
    return 0; /* "Shouldn't happen; just in case." */
  }
  assign_except(c->message, delta, delta_skip, AL_ARRAY_SIZE(delta_skip));
  {
    /* The SDK's audio-done marker: a delta with nothing but
     * audio.expires_at lets a complete audio choice finish with "stop". */
    json_t *a = json_object_get(delta, "audio");
    size_t i;
    size_t nrest = json_object_size(delta);

    for (i = 0; i < AL_ARRAY_SIZE(delta_skip); i++) {
      if (json_object_get(delta, delta_skip[i]) != NULL) {
        nrest--;
      }
    }
    c->audio_done = false;
    if (!js_null(json_object_get(a, "expires_at")) &&
        js_null(json_object_get(a, "id")) &&
        js_null(json_object_get(a, "data")) &&
        js_null(json_object_get(a, "transcript")) && nrest == 0) {
      c->audio_done = true;
      for (i = 0; i < AL_ARRAY_SIZE(delta_skip) - 1; i++) {
        if (!js_null(json_object_get(delta, delta_skip[i]))) {
          c->audio_done = false;
        }
      }
    }
  }
  v = json_object_get(delta, "refusal");
  if (truthy_str(v)) {
    if (!c->has_refusal && json_object_get(c->message, "refusal") == NULL) {
      json_object_set_new(c->message, "refusal", json_string(""));
    }
    c->has_refusal = true;
    if (al__marks_append(&c->refusal, &c->refusal_hi, json_string_value(v),
                         json_string_length(v), s->oai_marked) != 0) {
      return fail_decode(s, "refusal too large");
    }
  }
  v = json_object_get(delta, "role");
  if (truthy_str(v)) {
    json_object_set(c->message, "role", v);
  }
  v = json_object_get(delta, "audio");
  if (js_truthy(v) && (rc = apply_audio(s, c, v)) != 0) {
    return rc;
  }
  v = json_object_get(delta, "function_call");
  if (json_is_object(v)) {
    json_t *cur = json_object_get(c->message, "function_call");

    if (!json_is_object(cur)) {
      json_object_set_new(c->message, "function_call", json_copy(v));
    } else {
      json_t *n = json_object_get(v, "name");
      json_t *a = json_object_get(v, "arguments");

      if (truthy_str(n)) {
        json_object_set(cur, "name", n);
      }
      if (truthy_str(a)) {
        json_t *old = json_object_get(cur, "arguments");
        al_buf_t tmp;

        al_buf_init(&tmp, s->opts.max_block);
        if (json_is_string(old)) {
          al_buf_append(&tmp, json_string_value(old), json_string_length(old));
        }
        al_buf_append(&tmp, json_string_value(a), json_string_length(a));
        json_object_set_new(cur, "arguments",
                            json_stringn(tmp.data ? tmp.data : "", tmp.len));
        al_buf_free(&tmp);
      }
    }
  }
  v = json_object_get(delta, "content");
  /* The SDK appends any non-null content, "" included (content "" stays
   * ""); refusal above only when truthy (refusal "" stays null). */
  if (json_is_string(v)) {
    if (!c->has_content) {
      json_object_set_new(c->message, "content", json_string(""));
      c->has_content = true;
    }
    if (al__marks_append(&c->content, &c->content_hi, json_string_value(v),
                         json_string_length(v), s->oai_marked) != 0) {
      return fail_decode(s, "content too large");
    }
  }
  if (ci == 0 && s->message != NULL) {
    /* reasoning first: it precedes the answer in every server we know.
     * One field carries the text (servers that send several, like
     * OpenRouter's reasoning + reasoning_details, repeat it). */
    json_t *rtext = json_object_get(delta, "reasoning_content");

    if (!truthy_str(rtext)) {
      rtext = json_object_get(delta, "reasoning");
    }
    if ((rc = norm_text(s, AL_FJ_THINKING, rtext)) != 0 ||
        (rc = norm_reasoning_details(
             s, json_object_get(delta, "reasoning_details"),
             !truthy_str(rtext))) != 0) {
      return rc;
    }
    if (json_is_array(v)) {
      rc = norm_content_parts(s, v);
    } else {
      rc = norm_content_string(s, v);
    }
    if (rc == 0) {
      rc = norm_annotations(s, json_object_get(delta, "annotations"));
    }
    if (rc != 0) {
      return rc;
    }
  }
  v = json_object_get(delta, "tool_calls");
  if (json_is_array(v)) {
    size_t i;

    if (json_object_get(c->message, "tool_calls") == NULL) {
      json_object_set_new(c->message, "tool_calls", json_array());
    }
    for (i = 0; i < json_array_size(v); i++) {
      if ((rc = apply_tool_call(s, c, ci, json_array_get(v, i))) != 0) {
        return rc;
      }
    }
  }
  if (ci == 0 && s->message != NULL && json_is_string(finish) &&
      json_string_length(finish) > 0) {
    al_free(s->oai_finish_reason);
    s->oai_finish_reason = al_strdup(json_string_value(finish));
    return norm_finish(s, json_string_value(finish));
  }
  return 0;
}

static int apply_chunk(al_pstream_t *s, json_t *chunk) {
  static const char *const top_skip[] = {"choices", "obfuscation"};
  json_t *choices = json_object_get(chunk, "choices");
  size_t i;
  int rc;

  if (!json_is_object(chunk) || !json_is_array(choices)) {
    return fail_decode(s, "chunk without a choices array");
  }
  if (s->oai_snapshot == NULL) {
    s->oai_snapshot = json_object();
    assign_except(s->oai_snapshot, chunk, top_skip, AL_ARRAY_SIZE(top_skip));
  } else if (js_truthy(json_object_get(chunk, "id"))) {
    /* SDK: a later chunk's top-level fields are taken only when its id is
     * truthy (a usage chunk without id, or with id "", changes nothing). */
    assign_except(s->oai_snapshot, chunk, top_skip, AL_ARRAY_SIZE(top_skip));
  }
  if (s->message == NULL && json_array_size(choices) > 0 &&
      (rc = start_normalized(s, chunk)) != 0) {
    /* Started at the first chunk with a choice: Azure's first chunk has
     * none (prompt_filter_results, empty id and model). */
    return rc;
  }
  for (i = 0; i < json_array_size(choices); i++) {
    if ((rc = apply_choice(s, json_array_get(choices, i))) != 0) {
      return rc;
    }
  }
  if ((rc = norm_perplexity(s, chunk)) != 0) {
    return rc;
  }
  {
    json_t *u = json_object_get(chunk, "usage");

    if (!json_is_object(u)) {
      /* Groq puts it under x_groq. */
      u = json_object_get(json_object_get(chunk, "x_groq"), "usage");
    }
    return norm_usage(s, u);
  }
}

/* A chunk loaded with boundary marks: the strings that are appended
 * (content, refusal, tool arguments) keep theirs for the appenders to
 * join across chunks; every other string gets U+FFFD. */
static int keep_marks(al_pstream_t *s, json_t *root) {
  json_t **keep = NULL;
  size_t nkeep = 0;
  size_t cap = 0;
  size_t i;
  size_t k;
  json_t *ch;
  int rc;

#define KEEP(v)                                                        \
  do {                                                                 \
    json_t *v_ = (v);                                                  \
    if (json_is_string(v_)) {                                          \
      if (nkeep == cap) {                                              \
        json_t **nk = al_realloc(keep, (cap = cap * 2 + 8) * sizeof(*nk)); \
        if (nk == NULL) {                                              \
          al_free(keep);                                               \
          return AL_ENOMEM;                                            \
        }                                                              \
        keep = nk;                                                     \
      }                                                                \
      keep[nkeep++] = v_;                                              \
    }                                                                  \
  } while (0)

  (void)s;
  json_array_foreach(json_object_get(root, "choices"), i, ch) {
    json_t *delta = json_object_get(ch, "delta");
    json_t *tc;

    KEEP(json_object_get(delta, "content"));
    KEEP(json_object_get(delta, "refusal"));
    json_array_foreach(json_object_get(delta, "tool_calls"), k, tc) {
      KEEP(json_object_get(json_object_get(tc, "function"), "arguments"));
      KEEP(json_object_get(json_object_get(tc, "custom"), "input"));
    }
    KEEP(json_object_get(json_object_get(delta, "audio"), "data"));
    KEEP(json_object_get(json_object_get(delta, "audio"), "transcript"));
  }
#undef KEEP
  rc = al__marks_clear(root, keep, nkeep);
  al_free(keep);
  return rc;
}

/* ---- the fast path for the hot chunk ----------------------------------------- */

/* Whether storing member m where `cur` is would leave it as it is: the
 * same scalar (strings compared only when unescaped). */
static bool member_same(const json_t *cur, const al_fj_member_t *m) {
  int64_t v;

  if (cur == NULL) {
    return false;
  }
  switch (m->type) {
  case 'z':
    return json_is_null(cur);
  case 't':
    return json_is_true(cur);
  case 'f':
    return json_is_false(cur);
  case 's':
    return !m->escaped && json_is_string(cur) &&
           json_string_length(cur) == m->vlen &&
           memcmp(json_string_value(cur), m->val, m->vlen) == 0;
  default:
    return al__fj_member_int(m, &v) && json_is_integer(cur) &&
           json_integer_value(cur) == v;
  }
}

static bool member_is(const al_fj_member_t *m, const char *key) {
  return m->klen == strlen(key) && memcmp(m->key, key, m->klen) == 0;
}

/* null, or an empty string: what truthy_str and js_truthy call false for
 * the keys below. */
static bool member_empty(const al_fj_member_t *m) {
  return m->type == 'z' || (m->type == 's' && m->vlen == 0);
}

/* The steady state of a streamed answer: a chunk that only appends
 * content to choice 0, which already has content. Taken without a DOM
 * when applying the chunk through apply_chunk would change nothing else:
 * every other member it would assign (top level when the id is truthy,
 * the choice, the delta) already holds the same value, and no member
 * that triggers work (finish_reason, logprobs, refusal, tool calls,
 * audio, reasoning, usage, error) carries anything. 1 taken, 0 declined
 * (the caller loads the DOM), or a decode error. fuzz_openai runs every
 * input with this path on and off and requires the same result. */
static int oai_fast(al_pstream_t *s, const al_sse_event_t *ev) {
  al_fj_oai_t f;
  al__oai_choice_t *c;
  const al_fj_member_t *id;
  size_t i;
  int rc;

  if (s->message == NULL || s->oai_snapshot == NULL ||
      s->oai_nchoices == 0 || !s->oai_choices[0].present ||
      !s->oai_choices[0].has_content) {
    return 0;
  }
  if (al__fj_parse_oai_chunk(ev->data, ev->data_len, &s->scratch, &f) != 1) {
    return 0; /* including a string too large for scratch: jansson's call */
  }
  if (f.index != 0) {
    return 0;
  }
  c = &s->oai_choices[0];
  id = al__fj_member(f.top, f.ntop, "id");
  if (id != NULL && !member_empty(id) && id->type != 's') {
    return 0; /* a truthy id of another type: not worth the cases */
  }
  for (i = 0; i < f.ntop; i++) {
    const al_fj_member_t *m = &f.top[i];

    if ((member_is(m, "usage") || member_is(m, "x_groq")) &&
        m->type != 'z') {
      return 0;
    }
    if (member_is(m, "error") && m->type != 'z' && m->type != 'f') {
      return 0;
    }
    if (id != NULL && !member_empty(id) && !member_is(m, "obfuscation") &&
        !member_same(json_object_getn(s->oai_snapshot, m->key, m->klen), m)) {
      return 0;
    }
  }
  for (i = 0; i < f.nchoice; i++) {
    const al_fj_member_t *m = &f.choice[i];

    if (member_is(m, "finish_reason") || member_is(m, "logprobs")) {
      if (m->type != 'z') {
        return 0;
      }
    } else if (!member_is(m, "index") &&
               !member_same(json_object_getn(c->obj, m->key, m->klen), m)) {
      return 0;
    }
  }
  for (i = 0; i < f.ndelta; i++) {
    const al_fj_member_t *m = &f.delta[i];

    if (member_is(m, "content")) {
      continue;
    }
    if (member_is(m, "role")) {
      if (!member_empty(m) &&
          !member_same(json_object_get(c->message, "role"), m)) {
        return 0;
      }
    } else if (member_is(m, "refusal") || member_is(m, "function_call") ||
               member_is(m, "tool_calls") || member_is(m, "audio")) {
      if (m->type != 'z') {
        return 0;
      }
    } else if (((member_is(m, "reasoning_content") ||
                 member_is(m, "reasoning")) &&
                !member_empty(m)) ||
               !member_same(json_object_getn(c->message, m->key, m->klen),
                            m)) {
      return 0;
    }
  }
  /* What apply_choice does for this chunk, and nothing else. */
  s->oai_marked = false;
  c->audio_done = false;
  if (al__marks_append(&c->content, &c->content_hi, f.content.text,
                       f.content.len, false) != 0) {
    return fail_decode(s, "content too large");
  }
  rc = 0;
  if (f.content.len > 0) {
    rc = s->opts.think_tags
             ? norm_think_tags(s, f.content.text, f.content.len, false)
             : norm_piece(s, AL_FJ_TEXT, f.content.text, f.content.len,
                          false);
  }
  s->fast_hits++;
  return rc != 0 ? rc : 1;
}

static int openai_decode_event(al_pstream_t *s, const al_sse_event_t *ev) {
  json_t *root;
  json_t *err;
  json_error_t jerr;
  int rc;

  if (s->failed) {
    return s->error != 0 ? s->error : AL_EPROTO;
  }
  if (s->oai_done) {
    return 0; /* everything after [DONE] is ignored */
  }
  /* Exactly "[DONE]" ends the stream (the Python SDK uses startswith;
   * "[DONE] x" is then bad JSON here). */
  if (al__provider_eq(ev->data, ev->data_len, "[DONE]")) {
    s->oai_done = true;
    return 0;
  }
  if (s->opts.fast_path &&
      !(ev->has_type && al__provider_eq(ev->type, ev->type_len, "error"))) {
    rc = oai_fast(s, ev);
    if (rc != 0) {
      return rc == 1 ? 0 : rc;
    }
  }
  root = al__provider_json_load_marked(ev->data, ev->data_len, &jerr,
                                       &s->oai_marked);
  if (root != NULL && s->oai_marked && keep_marks(s, root) != 0) {
    json_decref(root);
    return fail_decode(s, "out of memory");
  }
  if (root == NULL) {
    char msg[200];

    json_error_t pj;
    /* Boundary marks depend on where the chunks were cut: name the fault
     * as jansson finds it in the event as it came, so every cut of a
     * stream reports the same error (fuzz_openai found two texts). */
    json_t *plain = al__provider_json_load(ev->data, ev->data_len, &pj);

    if (plain == NULL) {
      jerr = pj;
    }
    json_decref(plain);
    snprintf(msg, sizeof(msg), "malformed server-sent event JSON: %s",
             jerr.text);
    return fail_decode(s, msg);
  }
  err = json_object_get(root, "error");
  if ((err != NULL && !json_is_null(err) && !json_is_false(err)) ||
      (ev->has_type && al__provider_eq(ev->type, ev->type_len, "error"))) {
    json_t *et = json_object_get(err, "type");
    json_t *em = json_object_get(err, "message");

    if (!json_is_string(et)) {
      et = json_object_get(err, "code");
    }
    rc = al__pstream_fail(s, AL_PERR_STREAM_EVENT,
                          json_is_string(et) ? json_string_value(et) : NULL,
                          json_is_string(em) ? json_string_value(em)
                                             : "error event",
                          root);
    json_decref(root);
    return rc;
  }
  s->slow_hits++;
  rc = apply_chunk(s, root);
  json_decref(root);
  return rc;
}

/* ---- finalize -------------------------------------------------------------- */

/* The accumulated text; a high surrogate still waiting at the end can
 * never be joined any more: U+FFFD. */
static json_t *buf_string(al_buf_t *b, uint32_t pending_hi) {
  json_t *j;

  if (pending_hi == 0) {
    return al__json_string_utf8(b->data != NULL ? b->data : "", b->len);
  }
  if (al_buf_append(b, "\xEF\xBF\xBD", 3) != 0) {
    return NULL;
  }
  j = al__json_string_utf8(b->data, b->len);
  b->len -= 3;
  b->data[b->len] = '\0';
  return j;
}

static json_t *final_function(oai_tool_t *t) {
  return json_pack("{s:O,s:o}", "name", json_object_get(t->fn, "name"),
                   "arguments", buf_string(&t->args, t->args_hi));
}

static json_t *final_custom(oai_tool_t *t) {
  return json_pack("{s:O,s:o}", "name", json_object_get(t->custom, "name"),
                   "input", buf_string(&t->input, t->input_hi));
}

static json_t *final_tool_calls(al_pstream_t *s, al__oai_choice_t *c,
                                size_t ci, const char **errmsg,
                                char *errbuf, size_t errlen) {
  static const char *const skip[] = {"function", "type", "id"};
  static const char *const cskip[] = {"custom", "type", "id"};
  json_t *arr = json_array();
  size_t k;

  for (k = 0; k < c->ntools; k++) {
    oai_tool_t *t = &c->tools[k];
    json_t *tc;
    json_t *id;
    json_t *type;
    json_t *name;
    bool is_custom;
    char gen[48];

    if (!t->present) {
      /* A hole in the SDK's sparse array: a chat.completion with a null
       * tool call is not valid output, so this is a decode error. */
      snprintf(errbuf, errlen,
               "missing choices[%zu].tool_calls[%zu] (tool call indexes "
               "have a gap)",
               ci, k);
      *errmsg = errbuf;
      json_decref(arr);
      return NULL;
    }
    id = json_object_get(t->obj, "id");
    type = json_object_get(t->obj, "type");
    if (type == NULL) {
      snprintf(errbuf, errlen, "missing choices[%zu].tool_calls[%zu].type",
               ci, k);
      *errmsg = errbuf;
      json_decref(arr);
      return NULL;
    }
    is_custom = json_is_string(type) &&
                strcmp(json_string_value(type), "custom") == 0;
    name = is_custom ? json_object_get(t->custom, "name")
                     : json_object_get(t->fn, "name");
    if (name == NULL || json_is_null(name)) {
      snprintf(errbuf, errlen, "missing choices[%zu].tool_calls[%zu].%s.name",
               ci, k, is_custom ? "custom" : "function");
      *errmsg = errbuf;
      json_decref(arr);
      return NULL;
    }
    tc = json_object();
    /* {...rest, id, type, custom|function}: the other of custom/function
     * stays in rest, with its accumulated text. */
    assign_except(tc, t->obj, is_custom ? cskip : skip, 3);
    if (t->custom != NULL && !is_custom) {
      json_object_set_new(tc, "custom", final_custom(t));
    }
    if (t->fn != NULL && is_custom) {
      json_object_set_new(tc, "function", final_function(t));
    }
    if (id != NULL) {
      json_object_set(tc, "id", id);
    } else {
      synth_call_id(s, ci, k, gen);
      json_object_set_new(tc, "id", json_string(gen));
    }
    json_object_set(tc, "type", type);
    if (is_custom) {
      json_object_set_new(tc, "custom", final_custom(t));
    } else {
      json_object_set_new(tc, "function", final_function(t));
    }
    json_array_append_new(arr, tc);
  }
  return arr;
}


static json_t *final_choice(al_pstream_t *s, al__oai_choice_t *c, size_t ci,
                            const char **errmsg, char *errbuf, size_t errlen) {
  static const char *const choice_skip[] = {"message", "finish_reason",
                                            "index", "logprobs"};
  static const char *const msg_skip[] = {"content", "function_call",
                                         "tool_calls", "audio"};
  json_t *finish = json_object_get(c->obj, "finish_reason");
  json_t *role = json_object_get(c->message, "role");
  json_t *fc = json_object_get(c->message, "function_call");
  json_t *tcs = json_object_get(c->message, "tool_calls");
  json_t *content;
  json_t *refusal;
  json_t *out;
  json_t *msg;

  json_t *audio = NULL;
  json_t *stop_str = NULL;

  if (js_null(finish) && c->audio_done && c->audio != NULL &&
      !js_null(json_object_get(c->audio, "id")) && c->has_audio_data &&
      c->has_audio_tr && !js_null(json_object_get(c->audio, "expires_at"))) {
    /* finish_reason ?? (audio done and complete ? "stop" : null) */
    finish = stop_str = json_string("stop");
  }
  if (!json_is_string(finish) || json_string_length(finish) == 0) {
    snprintf(errbuf, errlen, "missing finish_reason for choice %zu", ci);
    *errmsg = errbuf;
    json_decref(stop_str);
    return NULL;
  }
  if (!truthy_str(role)) {
    snprintf(errbuf, errlen, "missing role for choice %zu", ci);
    *errmsg = errbuf;
    json_decref(stop_str);
    return NULL;
  }
  content = c->has_content ? buf_string(&c->content, c->content_hi)
            : json_object_get(c->message, "content") != NULL
                ? json_incref(json_object_get(c->message, "content"))
                : json_null();
  refusal = c->has_refusal ? buf_string(&c->refusal, c->refusal_hi)
            : (json_object_get(c->message, "refusal") != NULL &&
               !json_is_null(json_object_get(c->message, "refusal")))
                ? json_incref(json_object_get(c->message, "refusal"))
                : json_null();
  if (c->audio != NULL) {
    audio = json_copy(c->audio);
    if (c->has_audio_data) {
      json_object_set_new(audio, "data",
                          buf_string(&c->audio_data, c->audio_data_hi));
    }
    if (c->has_audio_tr) {
      json_object_set_new(audio, "transcript",
                          buf_string(&c->audio_tr, c->audio_tr_hi));
    }
  }
  out = json_object();
  assign_except(out, c->obj, choice_skip, AL_ARRAY_SIZE(choice_skip));
  msg = json_object();
  if (json_is_object(fc)) {
    json_t *args = json_object_get(fc, "arguments");
    json_t *name = json_object_get(fc, "name");

    if (args == NULL || json_is_null(args)) {
      snprintf(errbuf, errlen, "missing function_call.arguments for choice %zu",
               ci);
      goto out_err;
    }
    if (!truthy_str(name)) {
      snprintf(errbuf, errlen, "missing function_call.name for choice %zu", ci);
      goto out_err;
    }
    if (audio != NULL) {
      json_object_set(msg, "audio", audio);
    }
    json_object_set(msg, "content", content);
    json_object_set_new(msg, "function_call",
                        json_pack("{s:O,s:O}", "arguments", args, "name",
                                  name));
    json_object_set(msg, "role", role);
    json_object_set(msg, "refusal", refusal);
    json_object_set(out, "message", msg);
    json_object_set(out, "finish_reason", finish);
    json_object_set(out, "index", json_object_get(c->obj, "index"));
    json_object_set(out, "logprobs", json_object_get(c->obj, "logprobs"));
  } else if (tcs != NULL) {
    json_t *arr = final_tool_calls(s, c, ci, errmsg, errbuf, errlen);

    if (arr == NULL) {
      json_decref(audio);
      json_decref(stop_str);
      json_decref(msg);
      json_decref(out);
      json_decref(content);
      json_decref(refusal);
      return NULL;
    }
    assign_except(msg, c->message, msg_skip, AL_ARRAY_SIZE(msg_skip));
    if (audio != NULL) {
      json_object_set(msg, "audio", audio);
    }
    json_object_set(msg, "role", role);
    json_object_set(msg, "content", content);
    json_object_set(msg, "refusal", refusal);
    json_object_set_new(msg, "tool_calls", arr);
    json_object_set(out, "index", json_object_get(c->obj, "index"));
    json_object_set(out, "finish_reason", finish);
    json_object_set(out, "logprobs", json_object_get(c->obj, "logprobs"));
    json_object_set(out, "message", msg);
  } else {
    assign_except(msg, c->message, msg_skip, AL_ARRAY_SIZE(msg_skip));
    if (audio != NULL) {
      json_object_set(msg, "audio", audio);
    }
    json_object_set(msg, "content", content);
    json_object_set(msg, "role", role);
    json_object_set(msg, "refusal", refusal);
    json_object_set(out, "message", msg);
    json_object_set(out, "finish_reason", finish);
    json_object_set(out, "index", json_object_get(c->obj, "index"));
    json_object_set(out, "logprobs", json_object_get(c->obj, "logprobs"));
  }
  /* maybeParseChatCompletion without response_format: parsed: null. */
  json_object_set_new(msg, "parsed", json_null());
  json_decref(audio);
  json_decref(stop_str);
  json_decref(msg);
  json_decref(content);
  json_decref(refusal);
  return out;

out_err:
  *errmsg = errbuf;
  json_decref(audio);
  json_decref(stop_str);
  json_decref(msg);
  json_decref(out);
  json_decref(content);
  json_decref(refusal);
  return NULL;
}

json_t *al_pstream_openai_completion(al_pstream_t *s, const char **err) {
  static const char *const top_skip[] = {"id", "choices", "created", "model",
                                         "system_fingerprint"};
  static char errbuf[256];
  json_t *snap = s->oai_snapshot;
  json_t *out;
  json_t *choices;
  json_t *v;
  size_t i;

  *err = NULL;
  if (snap == NULL) {
    *err = "request ended without sending any chunks";
    return NULL;
  }
  choices = json_array();
  for (i = 0; i < s->oai_nchoices; i++) {
    json_t *ch;

    if (!s->oai_choices[i].present) {
      /* A hole in the SDK's sparse array (choice indexes 0 and 2 only):
       * not a valid chat.completion, so a decode error. */
      snprintf(errbuf, sizeof(errbuf),
               "missing choice %zu (choice indexes have a gap)", i);
      *err = errbuf;
      json_decref(choices);
      return NULL;
    }
    ch = final_choice(s, &s->oai_choices[i], i, err, errbuf, sizeof(errbuf));
    if (ch == NULL) {
      json_decref(choices);
      return NULL;
    }
    json_array_append_new(choices, ch);
  }
  out = json_object();
  assign_except(out, snap, top_skip, AL_ARRAY_SIZE(top_skip));
  if ((v = json_object_get(snap, "id")) != NULL) {
    json_object_set(out, "id", v);
  }
  json_object_set_new(out, "choices", choices);
  if ((v = json_object_get(snap, "created")) != NULL) {
    json_object_set(out, "created", v);
  }
  if ((v = json_object_get(snap, "model")) != NULL) {
    json_object_set(out, "model", v);
  }
  json_object_set_new(out, "object", json_string("chat.completion"));
  v = json_object_get(snap, "system_fingerprint");
  if (truthy_str(v) || (v != NULL && !json_is_string(v) && !json_is_null(v) &&
                        !json_is_false(v) &&
                        !(json_is_integer(v) && json_integer_value(v) == 0))) {
    json_object_set(out, "system_fingerprint", v);
  }
  return out;
}

/* Every tool call of choice 0 has arguments that are empty or JSON. */
static bool tool_args_complete(al__oai_choice_t *c) {
  size_t k;

  for (k = 0; k < c->ntools; k++) {
    oai_tool_t *t = &c->tools[k];
    json_t *v;

    if (!t->present || t->args.len == 0) {
      continue;
    }
    v = al__provider_json_load(t->args.data, t->args.len, NULL);
    if (v == NULL) {
      return false;
    }
    json_decref(v);
  }
  return true;
}

static int emit_notice(al_pstream_t *s, const char *kind, const char *msg) {
  al_pevent_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_PEV_NOTICE;
  ev.index = -1;
  ev.error_type = kind;
  ev.text = msg;
  ev.len = strlen(msg);
  return al__pstream_emit(s, &ev);
}

static int openai_decode_finish(al_pstream_t *s) {
  al__oai_choice_t *c;
  int rc;

  if (s->failed) {
    return s->error != 0 ? s->error : AL_EPROTO;
  }
  if (s->oai_snapshot == NULL) {
    al__pstream_fail(s, AL_PERR_DECODE, NULL,
                     "request ended without sending any chunks", NULL);
    return AL_ETRUNCATED;
  }
  c = s->oai_nchoices > 0 ? &s->oai_choices[0] : NULL;
  if (s->opts.openai_completion) {
    const char *err;
    json_t *done = al_pstream_openai_completion(s, &err);

    if (done == NULL) {
      al__pstream_fail(s, AL_PERR_DECODE, NULL, err, NULL);
      return AL_ETRUNCATED;
    }
    json_decref(done);
  } else if (s->message == NULL || c == NULL || !c->present) {
    al__pstream_fail(s, AL_PERR_DECODE, NULL,
                     "the stream ended without any choice", NULL);
    return AL_ETRUNCATED;
  } else if (!truthy_str(json_object_get(c->obj, "finish_reason"))) {
    /* No finish_reason (some vLLM-style hosts never send one). A body
     * that ended cleanly -- [DONE], or its last event complete -- with
     * every tool call's arguments whole is a finished message: the stop
     * reason is inferred, and said. Anything else was cut off. */
    bool calls = c->ntools > 0;

    if (!(s->oai_done || !s->eof_flushed) || !tool_args_complete(c)) {
      al__pstream_fail(s, AL_PERR_DECODE, NULL,
                       "missing finish_reason for choice 0", NULL);
      return AL_ETRUNCATED;
    }
    if ((rc = emit_notice(s, "stop_inferred",
                          calls ? "the stream ended without a finish_reason: "
                                  "taken as tool_calls"
                                : "the stream ended without a finish_reason: "
                                  "taken as stop")) != 0) {
      return rc;
    }
    al_free(s->oai_finish_reason);
    s->oai_finish_reason = al_strdup(calls ? "tool_calls" : "stop");
    if ((rc = norm_finish(s, s->oai_finish_reason)) != 0) {
      return rc;
    }
  }
  if (s->message == NULL) {
    return 0;
  }
  if (s->oai_finish_reason == NULL) {
    /* Choice 0 never came although others finished: still end blocks. */
    if ((rc = norm_finish(s, NULL)) != 0) {
      return rc;
    }
  }
  if (!s->message_stopped) {
    return al__agg_message_stop(s);
  }
  return 0;
}

static void openai_decode_free(al_pstream_t *s) {
  size_t i;
  size_t k;

  for (i = 0; i < s->oai_nchoices; i++) {
    al__oai_choice_t *c = &s->oai_choices[i];

    if (c->present) {
      json_decref(c->obj);
      al_buf_free(&c->content);
      al_buf_free(&c->refusal);
      al_buf_free(&c->audio_data);
      al_buf_free(&c->audio_tr);
    }
    for (k = 0; k < c->ntools; k++) {
      if (c->tools[k].obj != NULL) {
        json_decref(c->tools[k].obj);
      }
      al_buf_free(&c->tools[k].args);
      al_buf_free(&c->tools[k].input);
    }
    al_free(c->tools);
  }
  al_free(s->oai_choices);
  s->oai_choices = NULL;
  s->oai_nchoices = 0;
  if (s->oai_snapshot != NULL) {
    json_decref(s->oai_snapshot);
    s->oai_snapshot = NULL;
  }
  al_free(s->oai_finish_reason);
  s->oai_finish_reason = NULL;
}

/* ---- request builder ---------------------------------------------------- */

/* Text of a content value: a string, or the text blocks of an array joined
 * with "\n". */
static json_t *text_of(json_t *content) {
  al_buf_t b;
  size_t i;
  json_t *out;
  bool first = true;

  if (json_is_string(content)) {
    return json_incref(content);
  }
  al_buf_init(&b, (size_t)1 << 30);
  for (i = 0; i < json_array_size(content); i++) {
    json_t *blk = json_array_get(content, i);
    json_t *t = json_object_get(blk, "type");
    json_t *txt = json_object_get(blk, "text");

    if (json_is_string(t) && strcmp(json_string_value(t), "text") == 0 &&
        json_is_string(txt)) {
      if (!first) {
        al_buf_append(&b, "\n", 1);
      }
      al_buf_append(&b, json_string_value(txt), json_string_length(txt));
      first = false;
    }
  }
  out = first ? NULL : json_stringn(b.data ? b.data : "", b.len);
  al_buf_free(&b);
  return out;
}

/* The reasoning of an assistant message for the echo: the thinking text
 * joined, and the reasoning_details entries kept from OpenRouter. */
static void add_reasoning(json_t *out, json_t *content,
                          const al_provider_options_t *o) {
  al_buf_t b;
  json_t *details = NULL;
  bool any = false;
  size_t i;

  al_buf_init(&b, (size_t)1 << 30);
  for (i = 0; i < json_array_size(content); i++) {
    json_t *blk = json_array_get(content, i);
    json_t *t = json_object_get(blk, "type");
    json_t *th = json_object_get(blk, "thinking");
    json_t *rd = json_object_get(blk, "reasoning_details");

    if (!json_is_string(t) || strcmp(json_string_value(t), "thinking") != 0) {
      continue;
    }
    if (json_is_string(th)) {
      al_buf_append(&b, json_string_value(th), json_string_length(th));
      any = true;
    }
    if (json_is_array(rd)) {
      if (details == NULL) {
        details = json_array();
      }
      json_array_extend(details, rd);
    }
  }
  if (o->echo_reasoning && any) {
    const char *field = o->reasoning_field != NULL && o->reasoning_field[0]
                            ? o->reasoning_field
                            : "reasoning_content";

    json_object_set_new(out, field, json_stringn(b.data ? b.data : "", b.len));
  }
  if (details != NULL) {
    json_object_set_new(out, "reasoning_details", details);
  }
  al_buf_free(&b);
}

static int convert_message(json_t *messages, json_t *m,
                           const al_provider_options_t *o) {
  json_t *role = json_object_get(m, "role");
  json_t *content = json_object_get(m, "content");
  const char *r = json_is_string(role) ? json_string_value(role) : "user";
  size_t i;

  if (json_is_string(content)) {
    return json_array_append_new(messages,
                                 json_pack("{s:s,s:O}", "role", r, "content",
                                           content));
  }
  if (strcmp(r, "assistant") == 0) {
    json_t *calls = json_array();
    json_t *text = text_of(content);
    json_t *out;

    for (i = 0; i < json_array_size(content); i++) {
      json_t *blk = json_array_get(content, i);
      json_t *t = json_object_get(blk, "type");
      char *args;

      if (!json_is_string(t) || strcmp(json_string_value(t), "tool_use") != 0) {
        continue;
      }
      args = json_object_get(blk, "input") != NULL
                 ? json_dumps(json_object_get(blk, "input"),
                              JSON_COMPACT | JSON_ENCODE_ANY)
                 : NULL;
      json_array_append_new(
          calls, json_pack("{s:O?,s:s,s:{s:O?,s:s}}", "id",
                           json_object_get(blk, "id"), "type", "function",
                           "function", "name", json_object_get(blk, "name"),
                           "arguments", args != NULL ? args : "{}"));
      free(args);
    }
    /* null content is valid only beside tool_calls; an assistant message
     * of thinking or server-tool blocks alone becomes "". */
    if (text == NULL && json_array_size(calls) == 0) {
      text = json_string("");
    }
    out = json_pack("{s:s,s:o}", "role", "assistant", "content",
                    text != NULL ? text : json_null());
    if (json_array_size(calls) > 0) {
      json_object_set(out, "tool_calls", calls);
    }
    add_reasoning(out, content, o);
    json_decref(calls);
    return json_array_append_new(messages, out);
  }
  /* user: one role:"tool" message per tool_result, then the other text.
   * Tool messages are text only: their images and PDFs follow in the user
   * message after them (media_oai.c). */
  {
    json_t *media = json_array();
    json_t *text;

    for (i = 0; i < json_array_size(content); i++) {
      json_t *blk = json_array_get(content, i);
      json_t *t = json_object_get(blk, "type");
      json_t *c = json_object_get(blk, "content");
      json_t *res;

      if (!json_is_string(t) ||
          strcmp(json_string_value(t), "tool_result") != 0) {
        continue;
      }
      if (json_is_array(c) && al__media_has_blocks(c) && o->no_media) {
        res = al__oai_tool_text(c, "not sent, this model takes no images");
      } else if (json_is_array(c) && al__media_has_blocks(c) &&
                 media != NULL) {
        res = al__oai_tool_text(c, "in the user message after the tool "
                                   "results");
        al__oai_chat_media_parts(
            c, json_string_value(json_object_get(blk, "tool_use_id")), media);
      } else {
        res = text_of(c);
      }
      json_array_append_new(
          messages,
          json_pack("{s:s,s:O?,s:o}", "role", "tool", "tool_call_id",
                    json_object_get(blk, "tool_use_id"), "content",
                    res != NULL ? res : json_string("")));
    }
    text = text_of(content);
    if (json_array_size(media) > 0) {
      if (text != NULL) {
        json_array_append_new(media, json_pack("{s:s,s:o}", "type", "text",
                                               "text", text));
      }
      json_array_append_new(messages, json_pack("{s:s,s:O}", "role", r,
                                                "content", media));
    } else if (text != NULL) {
      json_array_append_new(messages, json_pack("{s:s,s:o}", "role", r,
                                                "content", text));
    }
    json_decref(media);
  }
  return 0;
}

static json_t *convert_tool_choice(json_t *tc) {
  json_t *t = json_object_get(tc, "type");
  const char *ty = json_is_string(t) ? json_string_value(t) : NULL;

  if (json_is_string(tc)) {
    return json_incref(tc);
  }
  if (ty == NULL) {
    return NULL;
  }
  if (strcmp(ty, "auto") == 0 || strcmp(ty, "none") == 0) {
    return json_string(ty);
  }
  if (strcmp(ty, "any") == 0) {
    return json_string("required");
  }
  if (strcmp(ty, "tool") == 0) {
    return json_pack("{s:s,s:{s:O?}}", "type", "function", "function", "name",
                     json_object_get(tc, "name"));
  }
  return NULL;
}

static int openai_build(const json_t *history, const al_provider_options_t *o,
                        al_provider_request_t *out) {
  json_t *body;
  json_t *messages;
  size_t i;
  int err = AL_ENOMEM;

  memset(out, 0, sizeof(*out));
  if (o->model == NULL || (history != NULL && !json_is_array(history))) {
    return AL_EINVAL;
  }
  body = json_object();
  messages = json_array();
  if (body == NULL || messages == NULL) {
    json_decref(body);
    json_decref(messages);
    return AL_ENOMEM;
  }
  json_object_set_new(body, "model", json_string(o->model));
  if (o->system != NULL) {
    json_array_append_new(messages,
                          json_pack("{s:s,s:o}", "role", "system", "content",
                                    al__json_string_utf8(o->system,
                                                         strlen(o->system))));
  }
  for (i = 0; i < json_array_size(history); i++) {
    convert_message(messages, json_array_get(history, i), o);
  }
  json_object_set_new(body, "messages", messages);
  /* max_tokens, not max_completion_tokens: the compatible servers
   * (llama.cpp, vLLM, Ollama) all read it. extra_body can override. */
  json_object_set_new(body, "max_tokens", json_integer(o->max_tokens));
  if (json_is_array(o->tools) && json_array_size(o->tools) > 0) {
    json_t *tools = json_array();

    for (i = 0; i < json_array_size(o->tools); i++) {
      json_t *t = json_array_get(o->tools, i);
      json_t *fn = json_pack("{s:O?}", "name", json_object_get(t, "name"));

      if (json_object_get(t, "description") != NULL) {
        json_object_set(fn, "description", json_object_get(t, "description"));
      }
      if (json_object_get(t, "input_schema") != NULL) {
        json_object_set(fn, "parameters", json_object_get(t, "input_schema"));
      } else {
        json_object_set_new(fn, "parameters",
                            json_pack("{s:s}", "type", "object"));
      }
      json_array_append_new(tools, json_pack("{s:s,s:o}", "type", "function",
                                             "function", fn));
    }
    json_object_set_new(body, "tools", tools);
  }
  if (o->tool_choice != NULL) {
    json_t *tc = convert_tool_choice(o->tool_choice);

    if (tc != NULL) {
      json_object_set_new(body, "tool_choice", tc);
    }
  }
  if (o->has_temperature) {
    json_object_set_new(body, "temperature", json_real(o->temperature));
  }
  if (o->stream) {
    json_object_set_new(body, "stream", json_true());
    json_object_set_new(body, "stream_options",
                        json_pack("{s:b}", "include_usage", 1));
  }
  if (json_is_object(o->extra_body)) {
    json_object_update(body, o->extra_body);
  }
  if ((err = al__provider_finish_openai(out, o, "/chat/completions",
                                        body)) != 0) {
    goto out_free_request;
  }
  json_decref(body);
  return 0;

out_free_request:
  al_provider_request_free(out);
  json_decref(body);
  return err;
}

/* `agentloop decode`: the chat.completion as the SDK finalizes it; the
 * SDK's `parsed` helper field unless helpers == 0. */
static json_t *openai_decode_final(al_pstream_t *s, int helpers,
                                   const char **err) {
  json_t *out = al_pstream_openai_completion(s, err);
  json_t *ch;
  size_t i;

  if (out != NULL && helpers == 0) {
    json_array_foreach(json_object_get(out, "choices"), i, ch) {
      json_object_del(json_object_get(ch, "message"), "parsed");
    }
  }
  return out;
}

const al_provider_t al_provider_openai = {
    .kind = AL_PROVIDER_OPENAI,
    .name = "openai",
    .build_request = openai_build,
    .http_error = al__provider_http_error,
    .decode_flags = AL_PDEC_OWN_INDEXES | AL_PDEC_SSE_FLUSH_EOF,
    .decode_event = openai_decode_event,
    .decode_finish = openai_decode_finish,
    .decode_free = openai_decode_free,
    .decode_final = openai_decode_final,
};
