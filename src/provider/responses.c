/* OpenAI Responses API (POST /v1/responses): the third wire format --
 * request builder and stream decoder (issue 14, RESEARCH-WAVE2 §6).
 *
 * Decoder. Every SSE event's data is JSON dispatched on its `type`:
 *   response.created                  message_start (id, model)
 *   response.output_item.added        a block start by output_index:
 *                                     message -> text, reasoning ->
 *                                     thinking, function_call -> tool_use
 *                                     {id: call_id, name}; other items
 *                                     (web_search_call, ...) kept as given
 *   response.output_text.delta        text delta
 *   response.reasoning_summary_text.delta,
 *   response.reasoning_text.delta     thinking delta
 *   response.function_call_arguments.delta
 *                                     tool input delta
 *   response.output_text.annotation.added
 *                                     a citation (docs/events.md)
 *   response.output_item.done         block stop: a function call's tool
 *                                     starts here, while the response still
 *                                     streams; a reasoning item is kept
 *                                     whole on its thinking block
 *                                     (`responses_item`, encrypted_content
 *                                     included) to be sent back verbatim
 *   response.completed / .incomplete  message_delta (stop reason, usage
 *                                     normalized) and message_stop
 *   response.failed, error            a typed stream error event
 * Anything else (in_progress, content_part.*, *.done texts) changes
 * nothing. The end of the body without completed/incomplete is a truncated
 * stream, as for the other formats.
 *
 * Request. The normalized (Anthropic-shaped) history becomes input items:
 * user text -> message items, tool_result -> function_call_output,
 * assistant text -> an output message, tool_use -> function_call, and a
 * thinking block that came from here -> its reasoning item unchanged. The
 * request is stateless (store: false, no previous_response_id) with
 * include: ["reasoning.encrypted_content"], so reasoning survives the
 * round-trip without server-side state. */
#include <stdio.h>
#include <stdlib.h>

#include "provider/provider.h"
#include "common/media.h"
#include "provider/provider_int.h"

/* ---- decoder ---------------------------------------------------------------- */

static int fail_decode(al_pstream_t *s, const char *msg) {
  return al__pstream_fail(s, AL_PERR_DECODE, NULL, msg, NULL);
}

#define RSP_MAX_ITEMS 4096

/* The block of output_index, or -1. */
static int block_of(al_pstream_t *s, json_t *ev) {
  json_t *oi = json_object_get(ev, "output_index");
  json_int_t i = json_is_integer(oi) ? json_integer_value(oi) : -1;

  if (i < 0 || (size_t)i >= s->rsp_nblock) {
    return -1;
  }
  return s->rsp_block[i];
}

static int set_block(al_pstream_t *s, json_int_t oi, int block) {
  if (oi < 0 || oi >= RSP_MAX_ITEMS) {
    return fail_decode(s, "output_index out of range");
  }
  if ((size_t)oi >= s->rsp_nblock) {
    size_t n = (size_t)oi + 1;
    int *nb = al_realloc(s->rsp_block, n * sizeof(*nb));
    size_t k;

    if (nb == NULL) {
      return fail_decode(s, "out of memory");
    }
    for (k = s->rsp_nblock; k < n; k++) {
      nb[k] = -1;
    }
    s->rsp_block = nb;
    s->rsp_nblock = n;
  }
  if (s->rsp_block[oi] >= 0) {
    return fail_decode(s, "output_index added twice");
  }
  s->rsp_block[oi] = block;
  return 0;
}

static int on_created(al_pstream_t *s, json_t *ev) {
  json_t *r = json_object_get(ev, "response");
  json_t *id = json_object_get(r, "id");
  json_t *model = json_object_get(r, "model");
  json_t *msg;
  int rc;

  if (s->message != NULL) {
    return fail_decode(s, "response.created twice");
  }
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

static int on_item_added(al_pstream_t *s, json_t *ev) {
  json_t *item = json_object_get(ev, "item");
  json_t *oi = json_object_get(ev, "output_index");
  const char *type = json_string_value(json_object_get(item, "type"));
  json_t *blk;
  int rc;

  if (s->message == NULL) {
    return fail_decode(s, "output item before response.created");
  }
  if (!json_is_object(item) || type == NULL || !json_is_integer(oi)) {
    return fail_decode(s, "output_item.added without an item");
  }
  if (strcmp(type, "message") == 0) {
    blk = json_pack("{s:s,s:s}", "type", "text", "text", "");
  } else if (strcmp(type, "reasoning") == 0) {
    blk = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "",
                    "signature", "");
  } else if (strcmp(type, "function_call") == 0) {
    json_t *cid = json_object_get(item, "call_id");
    json_t *name = json_object_get(item, "name");

    if (!json_is_string(cid) || json_string_length(cid) == 0 ||
        !json_is_string(name)) {
      return fail_decode(s, "function_call without call_id or name");
    }
    s->rsp_calls = true;
    blk = json_pack("{s:s,s:O,s:O,s:{}}", "type", "tool_use", "id", cid,
                    "name", name, "input");
  } else {
    /* Hosted tools (web_search_call, ...): kept as given, no deltas. */
    blk = json_copy(item);
  }
  if (blk == NULL) {
    return fail_decode(s, "out of memory");
  }
  rc = set_block(s, json_integer_value(oi), (int)s->nblocks);
  if (rc == 0) {
    rc = al__agg_block_start(s, (int64_t)s->nblocks, blk);
  }
  json_decref(blk);
  return rc;
}

static int on_delta(al_pstream_t *s, json_t *ev, al_fj_kind_t kind) {
  json_t *d = json_object_get(ev, "delta");
  int b = block_of(s, ev);

  if (b < 0) {
    return fail_decode(s, "delta for an output item that was not added");
  }
  if (!json_is_string(d)) {
    return fail_decode(s, "delta without text");
  }
  return al__agg_delta(s, b, kind, json_string_value(d), json_string_length(d),
                       0, 0);
}

static int on_item_done(al_pstream_t *s, json_t *ev) {
  json_t *item = json_object_get(ev, "item");
  const char *type = json_string_value(json_object_get(item, "type"));
  int b = block_of(s, ev);
  al__pblock_t *pb;

  if (b < 0) {
    return fail_decode(s, "output_item.done for an item that was not added");
  }
  pb = &s->blocks[b];
  if (pb->stopped) {
    return fail_decode(s, "output_item.done twice");
  }
  if (type != NULL && strcmp(type, "reasoning") == 0) {
    /* Sent back verbatim (encrypted_content, id, summary). */
    json_object_set(pb->block, "responses_item", item);
  } else if (type != NULL && strcmp(type, "function_call") == 0 &&
             !pb->input_delta) {
    /* No argument deltas: the item's arguments are the input. */
    json_t *args = json_object_get(item, "arguments");

    if (json_is_string(args) && json_string_length(args) > 0) {
      int rc = al__agg_delta(s, b, AL_FJ_INPUT, json_string_value(args),
                             json_string_length(args), 0, 0);

      if (rc != 0) {
        return rc;
      }
    }
  } else if (type != NULL && strcmp(type, "message") == 0 &&
             pb->buf.len == 0) {
    /* No text deltas: the text of the finished message. */
    json_t *c;
    size_t i;

    json_array_foreach(json_object_get(item, "content"), i, c) {
      json_t *t = json_object_get(c, "text");

      if (json_is_string(t)) {
        int rc = al__agg_delta(s, b, AL_FJ_TEXT, json_string_value(t),
                               json_string_length(t), 0, 0);

        if (rc != 0) {
          return rc;
        }
      }
    }
  }
  return al__agg_block_stop(s, b);
}

static int on_annotation(al_pstream_t *s, json_t *ev) {
  json_t *a = json_object_get(ev, "annotation");
  json_t *url = json_object_get(a, "url");
  json_t *c;
  int b = block_of(s, ev);
  int rc;

  if (b < 0 || !json_is_string(url)) {
    return 0;
  }
  c = json_pack("{s:s,s:O,s:O,s:n}", "type", "url_citation", "url", url,
                "title",
                json_is_string(json_object_get(a, "title"))
                    ? json_object_get(a, "title")
                    : json_null(),
                "cited_text");
  if (c == NULL) {
    return fail_decode(s, "out of memory");
  }
  if (json_object_get(a, "start_index") != NULL) {
    json_object_set(c, "start_index", json_object_get(a, "start_index"));
    json_object_set(c, "end_index", json_object_get(a, "end_index"));
  }
  rc = al__agg_citation(s, b, c);
  json_decref(c);
  return rc;
}

static int on_end(al_pstream_t *s, json_t *ev, bool complete) {
  json_t *r = json_object_get(ev, "response");
  json_t *nu = al__provider_usage_from_openai(json_object_get(r, "usage"));
  const char *stop = "end_turn";
  json_t *data;
  size_t i;
  int rc;

  if (s->message == NULL) {
    json_decref(nu);
    return fail_decode(s, "response ended before response.created");
  }
  for (i = 0; i < s->nblocks; i++) {
    if (!s->blocks[i].stopped && (rc = al__agg_block_stop(s, (int64_t)i)) != 0) {
      json_decref(nu);
      return rc;
    }
  }
  if (!complete) {
    const char *why = json_string_value(
        json_object_get(json_object_get(r, "incomplete_details"), "reason"));

    stop = why != NULL && strcmp(why, "content_filter") == 0 ? "refusal"
                                                              : "max_tokens";
  } else if (s->rsp_calls) {
    stop = "tool_use";
  }
  if (nu == NULL) {
    nu = json_pack("{s:i}", "output_tokens", 0);
  }
  if (json_object_get(nu, "reasoning_tokens") != NULL) {
    json_object_set(json_object_get(s->message, "usage"), "reasoning_tokens",
                    json_object_get(nu, "reasoning_tokens"));
  }
  data = json_pack("{s:{s:s,s:n},s:o}", "delta", "stop_reason", stop,
                   "stop_sequence", "usage", nu);
  if (data == NULL) {
    return fail_decode(s, "out of memory");
  }
  rc = al__agg_message_delta(s, data);
  json_decref(data);
  if (rc == 0) {
    json_decref(s->rsp_final);
    s->rsp_final = json_is_object(r) ? json_incref(r) : NULL;
    rc = al__agg_message_stop(s);
  }
  return rc;
}

static int on_error(al_pstream_t *s, json_t *ev, json_t *err) {
  json_t *code = json_object_get(err, "code");
  json_t *msg = json_object_get(err, "message");

  if (!json_is_string(code)) {
    code = json_object_get(err, "type");
  }
  return al__pstream_fail(s, AL_PERR_STREAM_EVENT,
                          json_is_string(code) ? json_string_value(code) : NULL,
                          json_is_string(msg) ? json_string_value(msg)
                                              : "error event",
                          ev);
}

static int rsp_dispatch(al_pstream_t *s, json_t *ev, const char *t) {
  if (strcmp(t, "response.output_text.delta") == 0) {
    return on_delta(s, ev, AL_FJ_TEXT);
  }
  if (strcmp(t, "response.function_call_arguments.delta") == 0) {
    return on_delta(s, ev, AL_FJ_INPUT);
  }
  if (strcmp(t, "response.reasoning_summary_text.delta") == 0 ||
      strcmp(t, "response.reasoning_text.delta") == 0) {
    return on_delta(s, ev, AL_FJ_THINKING);
  }
  if (strcmp(t, "response.output_item.added") == 0) {
    return on_item_added(s, ev);
  }
  if (strcmp(t, "response.output_item.done") == 0) {
    return on_item_done(s, ev);
  }
  if (strcmp(t, "response.created") == 0) {
    return on_created(s, ev);
  }
  if (strcmp(t, "response.completed") == 0) {
    return on_end(s, ev, true);
  }
  if (strcmp(t, "response.incomplete") == 0) {
    return on_end(s, ev, false);
  }
  if (strcmp(t, "response.output_text.annotation.added") == 0) {
    return on_annotation(s, ev);
  }
  if (strcmp(t, "response.failed") == 0) {
    json_t *err = json_object_get(json_object_get(ev, "response"), "error");

    return on_error(s, ev, json_is_object(err) ? err : ev);
  }
  if (strcmp(t, "error") == 0) {
    return on_error(s, ev, json_is_object(json_object_get(ev, "error"))
                               ? json_object_get(ev, "error")
                               : ev);
  }
  return 0; /* in_progress, content_part.*, the *.done texts: nothing new */
}

/* The hot events, text/argument/reasoning deltas ({"type":..,"item_id":
 * ..,"output_index":N,"content_index":N,"delta":"..",
 * "sequence_number":N,"logprobs":[]}), without a DOM: only scalars, a
 * known item, no surrogate half at an end of the delta; everything else
 * (and every doubt) is the DOM path's. 1 taken, 0 declined, or the
 * aggregator's error. fuzz_responses compares both paths. */
static int rsp_fast(al_pstream_t *s, const al_sse_event_t *ev) {
  static const struct {
    const char *type;
    al_fj_kind_t kind;
  } hot[] = {{"response.output_text.delta", AL_FJ_TEXT},
             {"response.function_call_arguments.delta", AL_FJ_INPUT},
             {"response.reasoning_summary_text.delta", AL_FJ_THINKING},
             {"response.reasoning_text.delta", AL_FJ_THINKING}};
  al_fj_member_t m[AL_FJ_MAX_MEMBERS];
  const al_fj_member_t *t;
  const al_fj_member_t *oi;
  al_fj_delta_t d;
  al_fj_kind_t kind = AL_FJ_NONE;
  int64_t idx;
  size_t n;
  size_t i;
  int b;
  int rc;

  if (s->message == NULL || s->message_stopped ||
      al__fj_parse_flat(ev->data, ev->data_len, m, AL_ARRAY_SIZE(m), &n) != 1) {
    return 0;
  }
  t = al__fj_member(m, n, "type");
  if (t == NULL || t->type != 's' || t->escaped) {
    return 0;
  }
  for (i = 0; i < AL_ARRAY_SIZE(hot); i++) {
    if (t->vlen == strlen(hot[i].type) &&
        memcmp(t->val, hot[i].type, t->vlen) == 0) {
      kind = hot[i].kind;
    }
  }
  oi = al__fj_member(m, n, "output_index");
  if (kind == AL_FJ_NONE || oi == NULL || !al__fj_member_int(oi, &idx) ||
      idx < 0 || (uint64_t)idx >= s->rsp_nblock ||
      (b = s->rsp_block[idx]) < 0) {
    return 0;
  }
  t = al__fj_member(m, n, "delta");
  if (t == NULL || al__fj_member_string(t, &s->scratch, &d) != 1 ||
      d.lead_lo != 0 || d.trail_hi != 0) {
    return 0;
  }
  s->fast_hits++;
  rc = al__agg_delta(s, b, kind, d.text, d.len, 0, 0);
  return rc != 0 ? rc : 1;
}

static int rsp_decode_event(al_pstream_t *s, const al_sse_event_t *ev) {
  json_t *root;
  json_error_t jerr;
  const char *t;
  int rc;

  if (s->failed) {
    return s->error != 0 ? s->error : AL_EPROTO;
  }
  if (ev->data_len == 0 || al__provider_eq(ev->data, ev->data_len, "[DONE]")) {
    return 0;
  }
  if (s->opts.fast_path && (rc = rsp_fast(s, ev)) != 0) {
    return rc == 1 ? 0 : rc;
  }
  root = al__provider_json_load(ev->data, ev->data_len, &jerr);
  if (root == NULL) {
    char msg[200];

    snprintf(msg, sizeof(msg), "malformed server-sent event JSON: %s",
             jerr.text);
    return fail_decode(s, msg);
  }
  t = json_string_value(json_object_get(root, "type"));
  if (t == NULL && ev->has_type) {
    /* Some proxies name the event only in the SSE field. */
    json_object_set_new(root, "type", json_stringn(ev->type, ev->type_len));
    t = json_string_value(json_object_get(root, "type"));
  }
  s->slow_hits++;
  if (t == NULL) {
    rc = fail_decode(s, "event without a type");
  } else if (s->message_stopped) {
    rc = 0; /* the response is final at completed/incomplete */
  } else {
    rc = rsp_dispatch(s, root, t);
  }
  json_decref(root);
  return rc;
}

static int rsp_decode_finish(al_pstream_t *s) {
  if (s->message == NULL) {
    al__pstream_fail(s, AL_PERR_DECODE, NULL,
                     "request ended without sending any events", NULL);
    return AL_ETRUNCATED;
  }
  if (!s->message_stopped) {
    al__pstream_fail(s, AL_PERR_DECODE, NULL,
                     "stream ended without response.completed", NULL);
    return AL_ETRUNCATED;
  }
  return al__agg_materialize(s);
}

static void rsp_decode_free(al_pstream_t *s) {
  al_free(s->rsp_block);
  s->rsp_block = NULL;
  s->rsp_nblock = 0;
  json_decref(s->rsp_final);
  s->rsp_final = NULL;
}

/* `agentloop decode`: the final Response as the server completed it (the
 * SDK's finalResponse()). With the SDK's helpers (unless helpers == 0),
 * as its parser adds them: `parsed: null` on every output_text part,
 * `parsed_arguments: null` on every function_call, then `output_text`
 * (the output_text parts joined) and `output_parsed: null`. */
static json_t *rsp_decode_final(al_pstream_t *s, int helpers,
                                const char **err) {
  json_t *out;
  json_t *item;
  al_buf_t b;
  size_t i;

  *err = NULL;
  if (s->rsp_final == NULL) {
    *err = "no final response";
    return NULL;
  }
  out = json_deep_copy(s->rsp_final);
  if (out == NULL || helpers == 0) {
    return out;
  }
  al_buf_init(&b, (size_t)1 << 30);
  json_array_foreach(json_object_get(out, "output"), i, item) {
    const char *t = json_string_value(json_object_get(item, "type"));
    json_t *c;
    size_t k;

    if (t != NULL && strcmp(t, "function_call") == 0) {
      json_object_set_new(item, "parsed_arguments", json_null());
    }
    if (t == NULL || strcmp(t, "message") != 0) {
      continue;
    }
    json_array_foreach(json_object_get(item, "content"), k, c) {
      json_t *txt = json_object_get(c, "text");
      const char *ct = json_string_value(json_object_get(c, "type"));

      if (ct == NULL || strcmp(ct, "output_text") != 0) {
        continue;
      }
      json_object_set_new(c, "parsed", json_null());
      if (json_is_string(txt)) {
        al_buf_append(&b, json_string_value(txt), json_string_length(txt));
      }
    }
  }
  json_object_set_new(out, "output_text",
                      json_stringn(b.data != NULL ? b.data : "", b.len));
  json_object_set_new(out, "output_parsed", json_null());
  al_buf_free(&b);
  return out;
}

/* ---- request builder ---------------------------------------------------------- */

static json_t *text_of(json_t *content) {
  al_buf_t b;
  size_t i;
  json_t *out;
  bool any = false;

  if (json_is_string(content)) {
    return json_incref(content);
  }
  al_buf_init(&b, (size_t)1 << 30);
  for (i = 0; i < json_array_size(content); i++) {
    json_t *blk = json_array_get(content, i);
    json_t *txt = json_object_get(blk, "text");

    if (json_is_string(txt) &&
        strcmp(json_string_value(json_object_get(blk, "type")), "text") == 0) {
      if (any) {
        al_buf_append(&b, "\n", 1);
      }
      al_buf_append(&b, json_string_value(txt), json_string_length(txt));
      any = true;
    }
  }
  out = any ? json_stringn(b.data ? b.data : "", b.len) : NULL;
  al_buf_free(&b);
  return out;
}

static void add_assistant(json_t *input, json_t *content) {
  size_t i;
  json_t *blk;

  json_array_foreach(content, i, blk) {
    const char *t = json_string_value(json_object_get(blk, "type"));
    json_t *item = NULL;

    if (t == NULL) {
      continue;
    }
    if (strcmp(t, "text") == 0 &&
        json_string_length(json_object_get(blk, "text")) > 0) {
      item = json_pack("{s:s,s:s,s:[{s:s,s:O,s:[]}]}", "type", "message",
                       "role", "assistant", "content", "type", "output_text",
                       "text", json_object_get(blk, "text"), "annotations");
    } else if (strcmp(t, "tool_use") == 0) {
      char *args = json_dumps(json_object_get(blk, "input"),
                              JSON_COMPACT | JSON_ENCODE_ANY);

      item = json_pack("{s:s,s:O,s:O,s:s}", "type", "function_call",
                       "call_id", json_object_get(blk, "id"), "name",
                       json_object_get(blk, "name"), "arguments",
                       args != NULL ? args : "{}");
      al_free(args); /* jansson allocates through al_malloc */
    } else if (strcmp(t, "thinking") == 0 &&
               json_is_object(json_object_get(blk, "responses_item"))) {
      /* The reasoning item exactly as it came (encrypted_content). */
      item = json_incref(json_object_get(blk, "responses_item"));
    }
    if (item != NULL) {
      json_array_append_new(input, item);
    }
  }
}

static void add_user(json_t *input, json_t *content, bool no_media) {
  size_t i;
  json_t *blk;
  json_t *text;

  json_array_foreach(content, i, blk) {
    const char *t = json_string_value(json_object_get(blk, "type"));

    if (t != NULL && strcmp(t, "tool_result") == 0) {
      json_t *c = json_object_get(blk, "content");
      /* With images or PDFs: output as an input_text/input_image/
       * input_file array (media_oai.c). */
      json_t *res = !json_is_array(c) || !al__media_has_blocks(c)
                        ? text_of(c)
                    : no_media
                        ? al__oai_tool_text(c, "not sent, this model takes "
                                               "no images")
                        : al__oai_responses_output(c);

      json_array_append_new(
          input, json_pack("{s:s,s:O?,s:o}", "type", "function_call_output",
                           "call_id", json_object_get(blk, "tool_use_id"),
                           "output", res != NULL ? res : json_string("")));
    }
  }
  text = text_of(content);
  if (text != NULL) {
    json_array_append_new(input, json_pack("{s:s,s:s,s:o}", "type", "message",
                                           "role", "user", "content", text));
  }
}

static int rsp_build(const json_t *history, const al_provider_options_t *o,
                     al_provider_request_t *out) {
  json_t *body;
  json_t *input;
  size_t i;
  int err;

  memset(out, 0, sizeof(*out));
  if (o->model == NULL || (history != NULL && !json_is_array(history))) {
    return AL_EINVAL;
  }
  body = json_object();
  input = json_array();
  if (body == NULL || input == NULL) {
    json_decref(body);
    json_decref(input);
    return AL_ENOMEM;
  }
  json_object_set_new(body, "model", json_string(o->model));
  if (o->system != NULL) {
    json_object_set_new(body, "instructions",
                        al__json_string_utf8(o->system, strlen(o->system)));
  }
  for (i = 0; i < json_array_size(history); i++) {
    json_t *m = json_array_get(history, i);
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *content = json_object_get(m, "content");

    if (role != NULL && strcmp(role, "assistant") == 0) {
      if (json_is_string(content)) {
        json_t *arr = json_pack("[{s:s,s:O}]", "type", "text", "text", content);

        add_assistant(input, arr);
        json_decref(arr);
      } else {
        add_assistant(input, content);
      }
    } else {
      add_user(input, content, o->no_media);
    }
  }
  json_object_set_new(body, "input", input);
  json_object_set_new(body, "max_output_tokens", json_integer(o->max_tokens));
  if (json_is_array(o->tools) && json_array_size(o->tools) > 0) {
    json_t *tools = json_array();

    for (i = 0; i < json_array_size(o->tools); i++) {
      json_t *t = json_array_get(o->tools, i);
      json_t *fn = json_pack("{s:s,s:O?}", "type", "function", "name",
                             json_object_get(t, "name"));

      if (json_object_get(t, "description") != NULL) {
        json_object_set(fn, "description", json_object_get(t, "description"));
      }
      json_object_set_new(fn, "parameters",
                          json_object_get(t, "input_schema") != NULL
                              ? json_incref(json_object_get(t, "input_schema"))
                              : json_pack("{s:s}", "type", "object"));
      json_object_set_new(fn, "strict", json_false());
      json_array_append_new(tools, fn);
    }
    json_object_set_new(body, "tools", tools);
  }
  if (o->tool_choice != NULL) {
    const char *ty =
        json_string_value(json_object_get(o->tool_choice, "type"));

    if (ty != NULL && (strcmp(ty, "auto") == 0 || strcmp(ty, "none") == 0)) {
      json_object_set_new(body, "tool_choice", json_string(ty));
    } else if (ty != NULL && strcmp(ty, "any") == 0) {
      json_object_set_new(body, "tool_choice", json_string("required"));
    } else if (ty != NULL && strcmp(ty, "tool") == 0) {
      json_object_set_new(body, "tool_choice",
                          json_pack("{s:s,s:O?}", "type", "function", "name",
                                    json_object_get(o->tool_choice, "name")));
    }
  }
  if (o->has_temperature) {
    json_object_set_new(body, "temperature", json_real(o->temperature));
  }
  /* Stateless: nothing is stored server-side; reasoning travels back as
   * its encrypted content. */
  json_object_set_new(body, "store", json_false());
  json_object_set_new(body, "include",
                      json_pack("[s]", "reasoning.encrypted_content"));
  json_object_set_new(body, "stream", o->stream ? json_true() : json_false());
  if (json_is_object(o->extra_body)) {
    json_object_update(body, o->extra_body);
  }
  if ((err = al__provider_finish_openai(out, o, "/responses", body)) != 0) {
    goto out_free;
  }
  json_decref(body);
  return 0;

out_free:
  al_provider_request_free(out);
  json_decref(body);
  return err;
}

const al_provider_t al_provider_openai_responses = {
    .kind = AL_PROVIDER_OPENAI_RESPONSES,
    .name = "openai-responses",
    .build_request = rsp_build,
    .http_error = al__provider_http_error,
    .decode_flags = AL_PDEC_OWN_INDEXES,
    .decode_event = rsp_decode_event,
    .decode_finish = rsp_decode_finish,
    .decode_free = rsp_decode_free,
    .decode_final = rsp_decode_final,
};
