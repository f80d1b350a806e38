/* `agentloop run --output-format stream-json`: the line shapes Claude
 * Code's headless users already parse (its `-p --output-format
 * stream-json`), made from our LoopEvents:
 *
 *   {"type":"system","subtype":"init","session_id","cwd","model","tools":[names],
 *    "mcp_servers":[],"permissionMode":"default"}        at run_started
 *   {"type":"assistant","message":{"id","type":"message","role":"assistant",
 *    "model","content":[BLOCK],"stop_reason":null,"stop_sequence":null},
 *    "parent_tool_use_id":null,"session_id"}             per completed block
 *   {"type":"user","message":{"role":"user","content":[{"type":"tool_result",
 *    "tool_use_id","content","is_error"}]},"parent_tool_use_id":null,
 *    "session_id"}                                        per tool-results turn
 *   {"type":"stream_event","event":{...},"parent_tool_use_id":null,
 *    "session_id"}     with --include-partial-messages: message_start,
 *                      content_block_start/_delta/_stop, message_stop
 *   {"type":"result",...}                                 last (run.c)
 *
 * The message id is ours ("msg_<run>_<turn>"): the provider's id is not an
 * event field. Tool results come from tool_use_completed, in the order the
 * user_message that carries them lists them. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "client/run_int.h"
#include "common/common.h"
#include "provider/provider.h"

void al__stream_json_init(al__stream_json_t *sj, FILE *out, bool partial) {
  memset(sj, 0, sizeof(*sj));
  sj->out = out;
  sj->partial = partial;
  sj->results = json_object();
  sj->started = json_object();
}

void al__stream_json_free(al__stream_json_t *sj) {
  json_decref(sj->results);
  json_decref(sj->started);
  al_free(sj->model);
  sj->results = NULL;
  sj->started = NULL;
  sj->model = NULL;
}

static json_t *sl(al_slice_t s) {
  if (s.ptr == NULL) {
    return json_null();
  }
  return al__json_string_utf8(s.ptr, s.len);
}

/* A slice holding JSON text as a value (a string when it is not JSON). */
static json_t *sl_json(al_slice_t s) {
  json_t *v;

  if (s.ptr == NULL) {
    return json_null();
  }
  v = json_loadb(s.ptr, s.len, JSON_DECODE_ANY, NULL);
  return v != NULL ? v : sl(s);
}

static void emit(al__stream_json_t *sj, json_t *o, const al_event_t *ev) {
  char *s;

  if (o == NULL) {
    return;
  }
  json_object_set_new(o, "parent_tool_use_id", json_null());
  json_object_set_new(o, "session_id",
                      ev->session != NULL ? json_string(ev->session)
                                          : json_null());
  s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (s != NULL) {
    fputs(s, sj->out);
    fputc('\n', sj->out);
    fflush(sj->out);
    free(s);
  }
}

static void msg_id(const al_event_t *ev, char *buf, size_t n) {
  snprintf(buf, n, "msg_%llu_%u", (unsigned long long)ev->run, ev->turn);
}

static void stream_event(al__stream_json_t *sj, const al_event_t *ev,
                         json_t *inner) {
  json_t *o;

  if (!sj->partial || inner == NULL) {
    json_decref(inner);
    return;
  }
  o = json_object();
  json_object_set_new(o, "type", json_string("stream_event"));
  json_object_set_new(o, "event", inner);
  emit(sj, o, ev);
}

/* content_block_start before a block's first delta. */
static void block_start(al__stream_json_t *sj, const al_event_t *ev,
                        const char *kind) {
  char key[32];
  json_t *cb;

  if (!sj->partial) {
    return;
  }
  snprintf(key, sizeof(key), "%d", ev->u.delta.index);
  if (json_object_get(sj->started, key) != NULL) {
    return;
  }
  json_object_set_new(sj->started, key, json_true());
  if (strcmp(kind, "text") == 0) {
    cb = json_pack("{s:s, s:s}", "type", "text", "text", "");
  } else if (strcmp(kind, "thinking") == 0) {
    cb = json_pack("{s:s, s:s}", "type", "thinking", "thinking", "");
  } else {
    cb = json_pack("{s:s, s:o, s:{}}", "type", "tool_use", "id",
                   sl(ev->u.delta.call_id), "input");
  }
  stream_event(sj, ev,
               json_pack("{s:s, s:i, s:o}", "type", "content_block_start",
                         "index", ev->u.delta.index, "content_block", cb));
}

static void delta(al__stream_json_t *sj, const al_event_t *ev,
                  const char *kind) {
  json_t *d;

  if (!sj->partial) {
    return;
  }
  block_start(sj, ev, kind);
  if (strcmp(kind, "text") == 0) {
    d = json_pack("{s:s, s:o}", "type", "text_delta", "text",
                  sl(ev->u.delta.text));
  } else if (strcmp(kind, "thinking") == 0) {
    d = json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking",
                  sl(ev->u.delta.text));
  } else {
    d = json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json",
                  sl(ev->u.delta.text));
  }
  stream_event(sj, ev,
               json_pack("{s:s, s:i, s:o}", "type", "content_block_delta",
                         "index", ev->u.delta.index, "delta", d));
}

static void user_results(al__stream_json_t *sj, const al_event_t *ev) {
  json_t *list = sl_json(ev->u.user_message.tool_results);
  json_t *content = json_array();
  json_t *r;
  size_t i;

  json_array_foreach(list, i, r) {
    const char *id = json_string_value(json_object_get(r, "tool_use_id"));
    json_t *got = id != NULL ? json_object_get(sj->results, id) : NULL;

    json_array_append_new(
        content,
        json_pack("{s:s, s:s?, s:O?, s:b}", "type", "tool_result",
                  "tool_use_id", id, "content",
                  got != NULL ? json_object_get(got, "content") : NULL,
                  "is_error", json_is_true(json_object_get(r, "is_error"))));
  }
  json_decref(list);
  json_object_clear(sj->results);
  emit(sj,
       json_pack("{s:s, s:{s:s, s:o}}", "type", "user", "message", "role",
                 "user", "content", content),
       ev);
}

void al__stream_json_event(al__stream_json_t *sj, const al_event_t *ev) {
  char id[64];

  switch (ev->type) {
  case AL_EVENT_RUN_STARTED:
    al_free(sj->model);
    if (sj->init_sent) {
      /* One init line per session (several runs with stream-json input). */
      sj->model = al_strndup(ev->u.run_started.model.ptr != NULL
                                 ? ev->u.run_started.model.ptr
                                 : "",
                             ev->u.run_started.model.len);
      break;
    }
    sj->init_sent = true;
    sj->model = al_strndup(ev->u.run_started.model.ptr != NULL
                               ? ev->u.run_started.model.ptr
                               : "",
                           ev->u.run_started.model.len);
    emit(sj,
         json_pack("{s:s, s:s, s:o, s:o, s:o, s:[], s:s}", "type", "system",
                   "subtype", "init", "cwd", sl(ev->u.run_started.cwd),
                   "model", sl(ev->u.run_started.model), "tools",
                   sl_json(ev->u.run_started.tools), "mcp_servers",
                   "permissionMode", "default"),
         ev);
    break;
  case AL_EVENT_STREAM_REQUEST_START:
    json_object_clear(sj->started);
    msg_id(ev, id, sizeof(id));
    stream_event(sj, ev,
                 json_pack("{s:s, s:{s:s, s:s, s:s, s:o, s:[]}}", "type",
                           "message_start", "message", "id", id, "type",
                           "message", "role", "assistant", "model",
                           sl(ev->u.stream_request.model), "content"));
    break;
  case AL_EVENT_TEXT_DELTA:
    delta(sj, ev, "text");
    break;
  case AL_EVENT_THINKING_DELTA:
    delta(sj, ev, "thinking");
    break;
  case AL_EVENT_TOOL_INPUT_DELTA:
    delta(sj, ev, "tool_use");
    break;
  case AL_EVENT_CONTENT_BLOCK_COMPLETED:
    stream_event(sj, ev,
                 json_pack("{s:s, s:i}", "type", "content_block_stop",
                           "index", ev->u.block.index));
    msg_id(ev, id, sizeof(id));
    emit(sj,
         json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[o], s:n, s:n}}", "type",
                   "assistant", "message", "id", id, "type", "message",
                   "role", "assistant", "model",
                   sj->model != NULL ? sj->model : "", "content",
                   sl_json(ev->u.block.block), "stop_reason",
                   "stop_sequence"),
         ev);
    break;
  case AL_EVENT_TURN_COMPLETED:
    stream_event(sj, ev, json_pack("{s:s}", "type", "message_stop"));
    break;
  case AL_EVENT_TOOL_USE_COMPLETED: {
    char key[256];

    snprintf(key, sizeof(key), "%.*s", (int)ev->u.tool.call_id.len,
             ev->u.tool.call_id.ptr != NULL ? ev->u.tool.call_id.ptr : "");
    json_object_set_new(sj->results, key,
                        json_pack("{s:o}", "content", sl(ev->u.tool.content)));
    break;
  }
  case AL_EVENT_USER_MESSAGE:
    if (ev->u.user_message.text.len == 0) {
      user_results(sj, ev);
    }
    break;
  default:
    break;
  }
}

/* ---- --input-format stream-json: user messages read from stdin ------------ */

#define LINE_MAX_INPUT (32u << 20)

static void lr_deliver(uv_timer_t *t) {
  al__line_reader_t *lr = t->data;
  char *nl;

  if (lr->closed) {
    return;
  }
  nl = lr->acc.len > 0 ? memchr(lr->acc.data, '\n', lr->acc.len) : NULL;
  if (nl != NULL) {
    size_t n = (size_t)(nl - lr->acc.data);
    char *line = al_strndup(lr->acc.data, n);

    al_buf_consume(&lr->acc, n + 1);
    lr->on_line(lr, line != NULL ? line : "", line != NULL ? n : 0);
    al_free(line);
    return;
  }
  if (lr->eof && lr->acc.len > 0) {
    /* The last line, without its newline. */
    char *line = al_strndup(lr->acc.data, lr->acc.len);
    size_t n = lr->acc.len;

    al_buf_reset(&lr->acc);
    lr->on_line(lr, line != NULL ? line : "", line != NULL ? n : 0);
    al_free(line);
    return;
  }
  lr->on_end(lr, lr->err);
}

static void lr_read(al__line_reader_t *lr);

static void lr_on_read(uv_fs_t *req) {
  al__line_reader_t *lr = req->data;
  ssize_t n = req->result;

  uv_fs_req_cleanup(req);
  lr->reading = false;
  if (lr->closed) {
    return;
  }
  if (n > 0) {
    if (al_buf_append(&lr->acc, lr->chunk, (size_t)n) != 0) {
      lr->err = AL_ETOOBIG;
      lr->eof = true;
      al_buf_reset(&lr->acc);
    } else if (memchr(lr->chunk, '\n', (size_t)n) == NULL) {
      lr_read(lr);
      return;
    }
  } else {
    lr->eof = true;
    lr->err = n < 0 ? (int)n : 0;
  }
  uv_timer_start(&lr->defer, lr_deliver, 0, 0);
}

static void lr_read(al__line_reader_t *lr) {
  uv_buf_t b = uv_buf_init(lr->chunk, sizeof(lr->chunk));

  lr->reading = true;
  lr->req.data = lr;
  /* On the threadpool (any kind of stdin: pipe, file, terminal), and only
   * when the next message is wanted. */
  if (uv_fs_read(lr->loop, &lr->req, STDIN_FILENO, &b, 1, -1, lr_on_read) !=
      0) {
    lr->reading = false;
    lr->eof = true;
    lr->err = UV_EIO;
    uv_timer_start(&lr->defer, lr_deliver, 0, 0);
  }
}

void al__line_reader_init(al__line_reader_t *lr, uv_loop_t *loop) {
  memset(lr, 0, sizeof(*lr));
  lr->loop = loop;
  al_buf_init(&lr->acc, LINE_MAX_INPUT);
  uv_timer_init(loop, &lr->defer);
  lr->defer.data = lr;
}

void al__line_reader_next(al__line_reader_t *lr) {
  if (lr->closed || lr->reading) {
    return;
  }
  if ((lr->acc.len > 0 && memchr(lr->acc.data, '\n', lr->acc.len) != NULL) ||
      lr->eof) {
    uv_timer_start(&lr->defer, lr_deliver, 0, 0);
    return;
  }
  lr_read(lr);
}

void al__line_reader_close(al__line_reader_t *lr) {
  if (lr->closed) {
    return;
  }
  lr->closed = true;
  if (lr->reading) {
    uv_cancel((uv_req_t *)&lr->req);
  }
  uv_close((uv_handle_t *)&lr->defer, NULL);
  al_buf_free(&lr->acc);
}

int al__stream_json_user_text(const char *line, size_t len, al_buf_t *text,
                              char *why, size_t whylen) {
  json_error_t jerr;
  json_t *o = json_loadb(line, len, 0, &jerr);
  json_t *m;
  json_t *c;
  int rc = 0;

  if (!json_is_object(o)) {
    snprintf(why, whylen, "not a JSON object (%s)", jerr.text);
    json_decref(o);
    return AL_EINVAL;
  }
  if (json_string_value(json_object_get(o, "type")) == NULL ||
      strcmp(json_string_value(json_object_get(o, "type")), "user") != 0) {
    snprintf(why, whylen, "\"type\" must be \"user\"");
    json_decref(o);
    return AL_EINVAL;
  }
  m = json_object_get(o, "message");
  c = json_object_get(m, "content");
  if (json_is_string(c)) {
    rc = al_buf_append(text, json_string_value(c), json_string_length(c));
  } else if (json_is_array(c)) {
    json_t *b;
    size_t i;

    json_array_foreach(c, i, b) {
      json_t *t = json_object_get(b, "text");

      if (!json_is_string(t) ||
          strcmp(json_string_value(json_object_get(b, "type")), "text") != 0) {
        snprintf(why, whylen, "message.content[%zu]: only text blocks are "
                              "supported", i);
        json_decref(o);
        return AL_EINVAL;
      }
      if (text->len > 0) {
        rc |= al_buf_append_str(text, "\n");
      }
      rc |= al_buf_append(text, json_string_value(t), json_string_length(t));
    }
  } else {
    snprintf(why, whylen, "message.content must be a string or an array of "
                          "text blocks");
    json_decref(o);
    return AL_EINVAL;
  }
  json_decref(o);
  if (rc != 0) {
    snprintf(why, whylen, "the message is too large");
    return AL_ETOOBIG;
  }
  if (text->len == 0) {
    snprintf(why, whylen, "the message is empty");
    return AL_EINVAL;
  }
  return 0;
}
