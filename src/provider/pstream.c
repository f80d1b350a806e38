/* The decoding pipeline (al_pstream_t): SSE parser -> provider decoder ->
 * aggregator -> one subscriber callback.
 *
 * Nothing here knows a wire format: the provider table's decode hooks
 * (al_provider_t.decode_event / decode_finish / decode_free, and the
 * decode_flags that set up the SSE layer) carry everything that differs,
 * so a new format is one file plus one table entry. The aggregator the
 * decoders feed is aggregate.c.
 *
 * Errors are sticky: the first non-zero code is kept in s->error and
 * returned by every later call; an ERROR event is delivered at most once
 * (al__pstream_fail), with its detail kept for al_pstream_error_*(). */
#include <stdio.h>
#include <stdlib.h>

#include "provider/provider.h"

static const char *const pevent_names[] = {
#define AL_PEV_GEN(name, str) str,
    AL_PEVENT_MAP(AL_PEV_GEN)
#undef AL_PEV_GEN
};

const char *al_pevent_name(al_pevent_type_t t) {
  if ((unsigned)t >= AL_PEV_COUNT_) {
    return "unknown";
  }
  return pevent_names[t];
}

void al_pstream_options_init(al_pstream_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->fast_path = true;
  o->strict_indexes = true;
  o->openai_completion = true;
  o->max_event = 8u << 20;
  o->max_block = 64u << 20;
  o->max_reply = 64u << 20;
  o->max_tool_input = 32u << 20;
  o->id_seed = 0;
}

void al_pstream_options_runtime(al_pstream_options_t *o) {
  al_pstream_options_init(o);
  /* The loop reads the normalized message only: the SDK-shaped
   * chat.completion (and its stricter finalization) is for the default
   * output of `agentloop decode`. */
  o->openai_completion = false;
}

/* The SSE parser's callback: the provider's decode hook, with the
 * statistics and the sticky error kept here once for every format. */
static int on_sse_event(void *data, const al_sse_event_t *ev) {
  al_pstream_t *s = data;
  int rc;

  if (s->error != 0) {
    return s->error;
  }
  s->events++;
  if (s->in_finish) {
    s->eof_flushed = true; /* the body ended inside this event */
  }
  rc = s->decode_event(s, ev);
  if (rc != 0 && s->error == 0) {
    s->error = rc;
  }
  return rc;
}

int al_pstream_init(al_pstream_t *s, const al_provider_t *p,
                    const al_pstream_options_t *o) {
  al_sse_settings_t ss;

  memset(s, 0, sizeof(*s));
  if (p == NULL || p->decode_event == NULL) {
    return AL_EINVAL;
  }
  s->provider = p;
  s->decode_event = p->decode_event;
  if (o != NULL) {
    s->opts = *o;
  } else {
    al_pstream_options_init(&s->opts);
  }
  if (p->decode_flags & AL_PDEC_OWN_INDEXES) {
    /* The decoder assigns block indexes itself, and its blocks may
     * interleave by design (OpenAI tool calls keyed by their own index),
     * so the aggregator must accept deltas for any open block. */
    s->opts.strict_indexes = false;
  }
  al_sse_settings_init(&ss);
  ss.on_event = on_sse_event;
  ss.data = s;
  ss.max_event = s->opts.max_event;
  if (ss.max_line < ss.max_event) {
    ss.max_line = ss.max_event;
  }
  if (p->decode_flags & AL_PDEC_SSE_FLUSH_EOF) {
    /* The OpenAI TS SDK flushes an unterminated last event and dispatches
     * event-only blocks (which then fail as empty JSON): PROTOCOLS §3.3. */
    ss.flush_at_eof = true;
    ss.dispatch_typed_without_data = true;
  }
  al_sse_init(&s->sse, &ss);
  al_buf_init(&s->scratch, s->opts.max_event);
  al_buf_init(&s->joinbuf, s->opts.max_event + 16);
  s->open_block = -1;
  s->oai_text_block = -1;
  s->oai_think_block = -1;
  return 0;
}

int al_pstream_sse_event(al_pstream_t *s, const al_sse_event_t *ev) {
  return on_sse_event(s, ev);
}

int al_pstream_feed(al_pstream_t *s, const char *bytes, size_t len) {
  int rc;

  if (s->error != 0) {
    return s->error;
  }
  s->reply_bytes += len;
  if (s->opts.max_reply > 0 && s->reply_bytes > s->opts.max_reply) {
    char msg[128];

    /* Checked before parsing: memory follows the bound, not the input. */
    snprintf(msg, sizeof(msg), "the reply exceeds the limit of %zu bytes",
             s->opts.max_reply);
    al__pstream_fail(s, AL_PERR_DECODE, "reply_too_large", msg, NULL);
    s->error = AL_ETOOBIG;
    return s->error;
  }
  s->in_feed = true;
  s->feed_ts = 0;
  rc = al_sse_feed(&s->sse, bytes, len);
  s->in_feed = false;
  if (rc != 0 && s->error == 0) {
    if (rc == AL_ETOOBIG || rc == AL_ENOMEM) {
      al__pstream_fail(s, AL_PERR_DECODE, NULL,
                       rc == AL_ETOOBIG ? "event too large" : "out of memory",
                       NULL);
    }
    s->error = rc;
  }
  return s->error;
}

int al_pstream_finish(al_pstream_t *s) {
  int rc;

  if (s->error != 0) {
    return s->error;
  }
  s->in_finish = true;
  rc = al_sse_finish(&s->sse);
  s->in_finish = false;
  if (rc != 0) {
    if (s->error == 0) {
      s->error = rc;
    }
    return s->error;
  }
  if (s->error != 0) {
    return s->error;
  }
  rc = s->provider->decode_finish(s);
  if (rc != 0 && s->error == 0) {
    s->error = rc;
  }
  return rc;
}

json_t *al_pstream_final_json(al_pstream_t *s, int helpers, const char **err) {
  *err = NULL;
  if (s->provider->decode_final == NULL) {
    json_t *m = al_pstream_message(s);

    if (m == NULL) {
      *err = "no final message";
      return NULL;
    }
    return json_incref(m);
  }
  return s->provider->decode_final(s, helpers, err);
}

int al__pstream_emit(al_pstream_t *s, al_pevent_t *ev) {
  if (s->opts.on_event == NULL) {
    return 0;
  }
  if (s->in_feed) {
    /* One clock read per chunk, not per event. */
    if (s->feed_ts == 0) {
      s->feed_ts = al_now_ns();
    }
    ev->ts_ns = s->feed_ts;
  }
  return s->opts.on_event(s->opts.data, ev);
}

int al__pstream_fail(al_pstream_t *s, al_perr_kind_t kind, const char *type,
                     const char *message, json_t *body) {
  al_pevent_t ev;
  int rc;

  if (s->failed) {
    return s->error != 0 ? s->error : AL_EPROTO;
  }
  s->failed = true;
  s->err_kind = kind;
  s->err_message = al_strdup(message != NULL ? message : "");
  s->err_body = body != NULL ? json_incref(body) : NULL;
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_PEV_ERROR;
  ev.index = -1;
  ev.error_kind = kind;
  ev.error_type = type;
  ev.text = s->err_message != NULL ? s->err_message : "";
  ev.len = strlen(ev.text);
  ev.json = body;
  rc = al__pstream_emit(s, &ev);
  (void)rc;
  return kind == AL_PERR_STREAM_EVENT ? AL_EAPI : AL_EPROTO;
}

const char *al_pstream_error_message(const al_pstream_t *s) {
  return s->failed ? s->err_message : NULL;
}

json_t *al_pstream_error_body(const al_pstream_t *s) { return s->err_body; }

al_perr_kind_t al_pstream_error_kind(const al_pstream_t *s) {
  return s->failed ? s->err_kind : (al_perr_kind_t)0;
}

json_t *al_pstream_message(al_pstream_t *s) {
  if (s->message == NULL) {
    return NULL;
  }
  if (al__agg_materialize(s) != 0) {
    return NULL;
  }
  return s->message;
}

void al_pstream_free(al_pstream_t *s) {
  al_sse_free(&s->sse);
  al_buf_free(&s->scratch);
  al_buf_free(&s->joinbuf);
  al__agg_free(s);
  if (s->provider != NULL && s->provider->decode_free != NULL) {
    s->provider->decode_free(s);
  }
  al_free(s->err_message);
  s->err_message = NULL;
  if (s->err_body != NULL) {
    json_decref(s->err_body);
    s->err_body = NULL;
  }
}
