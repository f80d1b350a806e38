/* Anthropic Messages: request builder and stream decoder (SPEC §5,
 * PROTOCOLS.md §2).
 *
 * The decoder follows the official TypeScript SDK's SSE layer: events
 * without an `event:` name are skipped, `ping` is skipped (and reported as
 * a PING event, which is not content progress), `event: error` fails the
 * stream with the event's data as the error body, events with empty data
 * are skipped, everything else must be JSON and is dispatched on its
 * `type` field (not on the SSE name). content_block_delta events whose
 * SSE name says so try the allocation-free fast path first (fastjson.c).
 *
 * The request builder sends the normalized history unchanged (it is
 * Anthropic-shaped already): assistant turns go back verbatim, thinking
 * blocks with their signatures. The system prompt lives in the options,
 * so it is sent once, at top level. */
#include <stdio.h>

#include "provider/provider.h"
#include "provider/provider_int.h"

/* ---- decoder ----------------------------------------------------------------- */

/* Index of a block event. Lenient mode copies the SDK: only a non-negative
 * integer addresses a block (anything else reads a block but writes
 * nowhere visible), so those events are ignored (-1). */
static int64_t get_index(json_t *root) {
  json_t *v = json_object_get(root, "index");

  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    return json_integer_value(v);
  }
  return -1;
}

static int emit_raw(al_pstream_t *s, const al_sse_event_t *ev, json_t *root) {
  al_pevent_t pe;

  memset(&pe, 0, sizeof(pe));
  pe.type = AL_PEV_RAW;
  pe.index = -1;
  pe.text = ev->type;
  pe.len = ev->type_len;
  pe.json = root;
  return al__pstream_emit(s, &pe);
}

static int decode_delta(al_pstream_t *s, const al_sse_event_t *ev,
                        json_t *root, uint32_t lead, uint32_t trail) {
  json_t *delta = json_object_get(root, "delta");
  json_t *t = json_object_get(delta, "type");
  const char *dt = json_is_string(t) ? json_string_value(t) : "";
  int64_t index = get_index(root);
  al_fj_kind_t kind = AL_FJ_NONE;
  const char *field = NULL;
  json_t *v;

  if (strcmp(dt, "text_delta") == 0) {
    kind = AL_FJ_TEXT;
    field = "text";
  } else if (strcmp(dt, "thinking_delta") == 0) {
    kind = AL_FJ_THINKING;
    field = "thinking";
  } else if (strcmp(dt, "input_json_delta") == 0) {
    kind = AL_FJ_INPUT;
    field = "partial_json";
  } else if (strcmp(dt, "signature_delta") == 0) {
    return al__agg_signature(s, index, json_object_get(delta, "signature"));
  } else if (strcmp(dt, "citations_delta") == 0) {
    return al__agg_citation(s, index, json_object_get(delta, "citation"));
  } else {
    /* Unknown delta types are ignored by the SDK; still visible here. */
    return emit_raw(s, ev, root);
  }
  v = json_object_get(delta, field);
  if (!json_is_string(v)) {
    return emit_raw(s, ev, root);
  }
  return al__agg_delta(s, index, kind, json_string_value(v),
                       json_string_length(v), lead, trail);
}

/* Are the boundary surrogate halves load2 reported (and removed) ones the
 * aggregator joins? Those of a text/thinking/input_json delta's string,
 * and a trailing high half of a text/thinking content_block_start's
 * text, which the first delta may complete. Anything else (a half in a
 * nested "text" of another block, a leading low half of a start block)
 * must become U+FFFD instead. */
static bool boundary_halves_used(json_t *root, const char *type,
                                 uint32_t lead) {
  json_t *t;
  const char *ts;

  if (strcmp(type, "content_block_delta") == 0) {
    t = json_object_get(json_object_get(root, "delta"), "type");
    ts = json_is_string(t) ? json_string_value(t) : "";
    return strcmp(ts, "text_delta") == 0 || strcmp(ts, "thinking_delta") == 0 ||
           strcmp(ts, "input_json_delta") == 0;
  }
  if (strcmp(type, "content_block_start") == 0 && lead == 0) {
    t = json_object_get(json_object_get(root, "content_block"), "type");
    ts = json_is_string(t) ? json_string_value(t) : "";
    return strcmp(ts, "text") == 0 || strcmp(ts, "thinking") == 0;
  }
  return false;
}

/* The hot key whose string the decoder uses for this event (NULL: none). */
static const char *used_hot_key(json_t *root, const char *type) {
  const char *ts;

  if (strcmp(type, "content_block_delta") == 0) {
    ts = json_string_value(
        json_object_get(json_object_get(root, "delta"), "type"));
    return ts == NULL                           ? NULL
           : strcmp(ts, "text_delta") == 0       ? "text"
           : strcmp(ts, "thinking_delta") == 0   ? "thinking"
           : strcmp(ts, "input_json_delta") == 0 ? "partial_json"
                                                 : NULL;
  }
  ts = json_string_value(
      json_object_get(json_object_get(root, "content_block"), "type"));
  return ts != NULL && (strcmp(ts, "text") == 0 || strcmp(ts, "thinking") == 0)
             ? ts
             : NULL;
}

/* String members named `key` (NULL: any hot key) anywhere in j: the load
 * reports the halves of the first hot string it meets, whichever it is. */
static size_t count_hot(const json_t *j, const char *key) {
  const char *k;
  json_t *v;
  size_t i, n = 0;

  if (json_is_object(j)) {
    json_object_foreach((json_t *)j, k, v) {
      if (json_is_string(v) &&
          (key != NULL ? strcmp(k, key) == 0
                       : strcmp(k, "text") == 0 ||
                             strcmp(k, "thinking") == 0 ||
                             strcmp(k, "partial_json") == 0)) {
        n++;
      }
      n += count_hot(v, key);
    }
  } else if (json_is_array(j)) {
    json_array_foreach(j, i, v) { n += count_hot(v, key); }
  }
  return n;
}

static int fail_json(al_pstream_t *s, const al_sse_event_t *ev,
                     const json_error_t *jerr) {
  char msg[256];

  snprintf(msg, sizeof(msg), "invalid JSON in %.*s event: %s",
           (int)AL_MIN(ev->type_len, 64), ev->type, jerr->text);
  return al__pstream_fail(s, AL_PERR_DECODE, NULL, msg, NULL);
}

/* Every event but a delta taken by the fast path (anthropic_decode_event);
 * fast_declined: a content_block_delta with data the fast path declined,
 * which goes straight to the JSON load. Apart, so the delta path does not
 * pay this function's frame. */
static __attribute__((noinline)) int event_general(al_pstream_t *s,
                                                   const al_sse_event_t *ev,
                                                   bool fast_declined) {
  json_t *root;
  json_t *t;
  json_error_t jerr;
  const char *type;
  uint32_t lead = 0;
  uint32_t trail = 0;
  int rc;

  if (fast_declined) {
    goto slow;
  }
  if (!ev->has_type) {
    return 0; /* SDK-faithful: unnamed events are skipped */
  }
  if (al__provider_eq(ev->type, ev->type_len, "ping")) {
    al_pevent_t pe;

    memset(&pe, 0, sizeof(pe));
    pe.type = AL_PEV_PING;
    pe.index = -1;
    return al__pstream_emit(s, &pe);
  }
  if (al__provider_eq(ev->type, ev->type_len, "error")) {
    json_t *body = al__provider_json_load(ev->data, ev->data_len, NULL);
    json_t *err;
    json_t *et;
    json_t *em;

    if (body == NULL) {
      body = al__json_string_utf8(ev->data, ev->data_len);
    }
    err = json_object_get(body, "error");
    et = json_object_get(err, "type");
    em = json_object_get(err, "message");
    rc = al__pstream_fail(s, AL_PERR_STREAM_EVENT,
                          json_is_string(et) ? json_string_value(et) : NULL,
                          json_is_string(em) ? json_string_value(em)
                                             : "error event",
                          body);
    json_decref(body);
    return rc;
  }
  if (ev->data_len == 0) {
    return 0;
  }
slow:
  s->slow_hits++;
  root = al__provider_json_load2(ev->data, ev->data_len, &jerr, &lead, &trail);
  if (root == NULL) {
    return fail_json(s, ev, &jerr);
  }
  t = json_object_get(root, "type");
  type = json_is_string(t) ? json_string_value(t) : "";
  if (s->message_stopped && strcmp(type, "message_start") != 0) {
    /* The SDK's final message is the snapshot at message_stop: later
     * events (valid JSON) change nothing. A second message_start is still
     * an order error, and error events / bad JSON still fail. */
    json_decref(root);
    return 0;
  }
  if ((lead != 0 || trail != 0) && !boundary_halves_used(root, type, lead)) {
    /* The halves were taken out of a string nobody will join them to:
     * load again with every lone surrogate as U+FFFD. */
    json_decref(root);
    lead = trail = 0;
    root = al__provider_json_load(ev->data, ev->data_len, &jerr);
    if (root == NULL) {
      return fail_json(s, ev, &jerr);
    }
    t = json_object_get(root, "type");
    type = json_is_string(t) ? json_string_value(t) : "";
  } else if ((lead != 0 || trail != 0) && count_hot(root, NULL) > 1) {
    /* More than one hot string: the halves may be another one's (an
     * extra "text" beside partial_json). Load again tracking the used
     * key alone, as the fast path reads it; plainly if it is not unique. */
    const char *key = used_hot_key(root, type);
    bool one = key != NULL && count_hot(root, key) == 1;
    char kbuf[16];

    snprintf(kbuf, sizeof(kbuf), "%s", one ? key : "");
    json_decref(root);
    lead = trail = 0;
    root = one ? al__provider_json_load2_key(ev->data, ev->data_len, &jerr,
                                             &lead, &trail, kbuf)
               : al__provider_json_load(ev->data, ev->data_len, &jerr);
    t = root != NULL ? json_object_get(root, "type") : NULL;
    type = json_is_string(t) ? json_string_value(t) : "";
    if (root != NULL && (lead != 0 || trail != 0) &&
        !boundary_halves_used(root, type, lead)) {
      json_decref(root); /* its own halves, but not ones it joins */
      lead = trail = 0;
      root = al__provider_json_load(ev->data, ev->data_len, &jerr);
    }
    if (root == NULL) {
      return fail_json(s, ev, &jerr);
    }
    t = json_object_get(root, "type");
    type = json_is_string(t) ? json_string_value(t) : "";
  }
  if (strcmp(type, "content_block_delta") == 0) {
    rc = decode_delta(s, ev, root, lead, trail);
  } else if (strcmp(type, "content_block_start") == 0) {
    int64_t index = get_index(root);
    size_t before = s->nblocks;

    if (index < 0 && !s->opts.strict_indexes) {
      index = (int64_t)s->nblocks; /* the SDK pushes regardless */
    }
    rc = al__agg_block_start(s, index, json_object_get(root, "content_block"));
    if (rc == 0 && trail != 0 && s->nblocks == before + 1) {
      /* The start text ends in a high surrogate: it waits for the low
       * half at the start of the first delta, as between deltas. */
      s->blocks[before].pending_hi = trail;
    }
  } else if (strcmp(type, "content_block_stop") == 0) {
    rc = al__agg_block_stop(s, get_index(root));
  } else if (strcmp(type, "message_start") == 0) {
    rc = al__agg_message_start(s, json_object_get(root, "message"));
  } else if (strcmp(type, "message_delta") == 0) {
    rc = al__agg_message_delta(s, root);
  } else if (strcmp(type, "message_stop") == 0) {
    rc = al__agg_message_stop(s);
  } else {
    rc = emit_raw(s, ev, root);
  }
  json_decref(root);
  return rc;
}

static int anthropic_decode_event(al_pstream_t *s, const al_sse_event_t *ev) {
  al_fj_delta_t d;
  int rc;

  if (s->failed) {
    return s->error != 0 ? s->error : AL_EPROTO;
  }
  /* Nearly every event: tried before the other names (which cannot match
   * it), with the same outcome as on the general path. */
  if (!s->opts.fast_path || ev->data_len == 0 ||
      !al__provider_eq(ev->type, ev->type_len, "content_block_delta")) {
    return event_general(s, ev, false);
  }
  rc = al__fj_parse_delta(ev->data, ev->data_len, &s->scratch, &d);
  if (rc == 1) {
    s->fast_hits++;
    if (s->message_stopped) {
      return 0; /* the message is final at message_stop */
    }
    return al__agg_delta(s, d.index, d.kind, d.text, d.len, d.lead_lo,
                         d.trail_hi);
  }
  if (rc < 0) {
    return al__pstream_fail(s, AL_PERR_DECODE, NULL, "event too large", NULL);
  }
  return event_general(s, ev, true);
}

/* End of body: the SDK's rules (no message_start, or no message_stop, is
 * a truncated stream). */
static int anthropic_decode_finish(al_pstream_t *s) {
  if (s->message == NULL) {
    al__pstream_fail(s, AL_PERR_DECODE, NULL,
                     "request ended without sending any chunks", NULL);
    return AL_ETRUNCATED;
  }
  if (!s->message_stopped) {
    al__pstream_fail(s, AL_PERR_DECODE, NULL,
                     "stream ended without producing a Message with "
                     "role=assistant",
                     NULL);
    return AL_ETRUNCATED;
  }
  return al__agg_materialize(s);
}

/* The SDK's final Message; parsed_output is an SDK helper, not part of
 * the API's Message, so only with helpers == 1. */
static json_t *anthropic_decode_final(al_pstream_t *s, int helpers,
                                      const char **err) {
  json_t *m = al_pstream_message(s);
  json_t *out;

  *err = NULL;
  if (m == NULL) {
    *err = "no final message";
    return NULL;
  }
  if (helpers != 1) {
    return json_incref(m);
  }
  out = json_deep_copy(m);
  if (out != NULL) {
    json_object_set_new(out, "parsed_output", json_null());
  }
  return out;
}

/* ---- request builder ---------------------------------------------------- */

static json_t *ephemeral(void) {
  return json_pack("{s:s}", "type", "ephemeral");
}

/* Blocks that may carry cache_control (thinking blocks may not). */
static bool cacheable(const json_t *blk) {
  const char *t = json_string_value(json_object_get(blk, "type"));

  return t != NULL && (strcmp(t, "text") == 0 || strcmp(t, "tool_result") == 0 ||
                       strcmp(t, "tool_use") == 0 || strcmp(t, "image") == 0 ||
                       strcmp(t, "document") == 0);
}

/* The moving breakpoints: the last cacheable block of the last message
 * (the prefix the next request will share) and of the last user message
 * before it (where the previous request's end breakpoint was, so this
 * request reads what that one wrote). At most `room` of them, counting
 * any the history already has. */
static void mark_moving_end(json_t *messages, int room) {
  size_t n = json_array_size(messages);
  size_t i, k;
  int marked = 0;
  const json_t *m;
  const json_t *blk;

  json_array_foreach(messages, i, m) {
    json_array_foreach(json_object_get(m, "content"), k, blk) {
      if (json_object_get(blk, "cache_control") != NULL) {
        room--;
      }
    }
  }
  for (i = n; i-- > 0 && marked < 2 && room > 0;) {
    json_t *c = json_object_get(json_array_get(messages, i), "content");
    const char *role =
        json_string_value(json_object_get(json_array_get(messages, i), "role"));

    if (marked == 1 && (role == NULL || strcmp(role, "user") != 0)) {
      continue;
    }
    for (k = json_array_size(c); k-- > 0;) {
      json_t *b = json_array_get(c, k);

      if (cacheable(b)) {
        json_object_set_new(b, "cache_control", ephemeral());
        marked++;
        room--;
        break;
      }
    }
  }
}

static int anthropic_build(const json_t *history,
                           const al_provider_options_t *o,
                           al_provider_request_t *out) {
  json_t *body;
  json_t *messages;
  int err = AL_ENOMEM;
  char num[32];

  memset(out, 0, sizeof(*out));
  if (o->model == NULL || (history != NULL && !json_is_array(history))) {
    return AL_EINVAL;
  }
  body = json_object();
  if (body == NULL) {
    return AL_ENOMEM;
  }
  json_object_set_new(body, "model", json_string(o->model));
  json_object_set_new(body, "max_tokens", json_integer(o->max_tokens));
  if (o->system != NULL) {
    if (o->cache_control) {
      json_t *blk = json_pack("{s:s,s:o,s:o}", "type", "text", "text",
                              al__json_string_utf8(o->system,
                                                   strlen(o->system)),
                              "cache_control", ephemeral());
      json_object_set_new(body, "system", json_pack("[o]", blk));
    } else {
      json_object_set_new(body, "system",
                          al__json_string_utf8(o->system, strlen(o->system)));
    }
  }
  messages = history != NULL ? json_deep_copy(history) : json_array();
  if (o->cache_control) {
    /* system + tools take 2 of the API's 4 breakpoints; the other 2 move
     * with the conversation (docs/context.md §Prompt caching). */
    mark_moving_end(messages, 4 - (o->system != NULL ? 1 : 0) -
                                  (json_array_size(o->tools) > 0 ? 1 : 0));
  }
  json_object_set_new(body, "messages", messages);
  if (json_is_array(o->tools) && json_array_size(o->tools) > 0) {
    json_t *tools = json_deep_copy(o->tools);
    json_t *last = json_array_get(tools, json_array_size(tools) - 1);

    if (o->cache_control && json_is_object(last) &&
        json_object_get(last, "cache_control") == NULL) {
      json_object_set_new(last, "cache_control", ephemeral());
    }
    json_object_set_new(body, "tools", tools);
  }
  if (o->tool_choice != NULL) {
    json_object_set(body, "tool_choice", o->tool_choice);
  }
  if (o->thinking != NULL) {
    json_object_set(body, "thinking", o->thinking);
  }
  if (o->has_temperature) {
    json_object_set_new(body, "temperature", json_real(o->temperature));
  }
  if (o->stream) {
    json_object_set_new(body, "stream", json_true());
  }
  if (json_is_object(o->extra_body)) {
    json_object_update(body, o->extra_body);
  }
  if (json_object_get(body, "model") == NULL ||
      json_object_get(body, "messages") == NULL) {
    goto out_free_body;
  }
  if ((err = al__provider_finish_request(out, o->path_prefix, "/messages",
                                         body)) != 0 ||
      (err = al__provider_add_header(out, "content-type",
                                     "application/json")) != 0 ||
      (err = al__provider_add_header(out, "accept",
                                     o->stream ? "text/event-stream"
                                               : "application/json")) != 0 ||
      (err = al__provider_add_header(out, "anthropic-version",
                                     o->anthropic_version)) != 0) {
    goto out_free_request;
  }
  if (o->anthropic_beta != NULL &&
      (err = al__provider_add_header(out, "anthropic-beta",
                                     o->anthropic_beta)) != 0) {
    goto out_free_request;
  }
  if (o->api_key != NULL) {
    if (o->auth == AL_AUTH_BEARER) {
      al_buf_t b;

      al_buf_init(&b, strlen(o->api_key) + 16);
      err = al_buf_printf(&b, "Bearer %s", o->api_key);
      if (err == 0) {
        err = al__provider_add_header(out, "authorization", b.data);
      }
      al_buf_free(&b);
    } else {
      err = al__provider_add_header(out, "x-api-key", o->api_key);
    }
    if (err != 0) {
      goto out_free_request;
    }
  }
  (void)num;
  json_decref(body);
  return 0;

out_free_request:
  al_provider_request_free(out);
out_free_body:
  json_decref(body);
  return err;
}

const al_provider_t al_provider_anthropic = {
    .kind = AL_PROVIDER_ANTHROPIC,
    .name = "anthropic",
    .build_request = anthropic_build,
    .http_error = al__provider_http_error,
    .decode_flags = 0,
    .decode_event = anthropic_decode_event,
    .decode_finish = anthropic_decode_finish,
    .decode_free = NULL,
    .decode_final = anthropic_decode_final,
};
