/* MCP client over stdio: see mcp.h for the contract and the state diagram.
 *
 * Ownership: the al_mcp_t owns its servers; each server owns its spawn run
 * (sp, until the wrapper's on_done), its timers, its pending requests and
 * its calls. Every handle is counted in m->live; al__mcp_close finishes
 * when no child is left and live reaches 0.
 *
 * JSON-RPC ids: one counter per server. A pending request remembers what
 * it was for (initialize, tools/list, tools/call); the answer is matched by
 * id. Server->client requests are answered at once. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp.h"
#include "mcp/mcp_http.h"
#include "provider/provider.h"
#include "tools/spawn.h"
#include "tools/tools.h"

typedef enum { RQ_INIT = 0, RQ_LIST, RQ_CALL, RQ_OTHER } rq_kind_t;

typedef struct pending_s {
  al_list_t node;
  int64_t id;
  rq_kind_t kind;
  al_mcp_call_t *call; /* RQ_CALL */
} pending_t;

struct al_mcp_call_s {
  al_list_t node; /* s->calls */
  al_mcp_server_t *server;
  int64_t id;
  char *tool;
  al_mcp_progress_cb on_progress;
  al_mcp_done_cb on_done;
  void *data;
  uv_timer_t timer;
  uint64_t t0_ms;     /* loop time at start */
  bool done;          /* on_done fired or cancelled: nothing more fires */
  bool timer_closing;
  /* Why it ended when not by the server's answer (al__mcp_call_end). */
  const char *end;
  json_t *blocks;     /* the result's content blocks, during on_done */
};

struct al_mcp_server_s {
  al_mcp_t *m;
  al_mcp_server_config_t cfg;
  al_mcp_state_t state;
  al_spawn_t *sp; /* the live child, until its on_done */
  al_mcp_http_t *http; /* or the live HTTP session (cfg.url) */
  bool ever_settled; /* reached ready or failed once */
  int64_t next_id;
  al_list_t pending; /* pending_t */
  al_list_t calls;   /* al_mcp_call_t in flight */
  al_buf_t rx;       /* the stdout line being assembled */
  al_buf_t errring;  /* stderr, the last AL_MCP_STDERR_RING bytes */
  json_t *tools;     /* the applied list */
  json_t *listing;   /* the list being assembled */
  int pages;
  bool relist;       /* list_changed arrived during a listing */
  uint64_t gen;
  char *error;
  char *version;
  uint64_t t_spawn;
  uint64_t ms;
  int pid;
  /* Restarts: times of the last ones (loop ms) within the window. */
  uint64_t restarts[8];
  int n_restarts;
  int attempt;
  uv_timer_t timer; /* startup timeout, restart backoff, shutdown grace */
  bool closing;
};

struct al_mcp_s {
  al_mcp_options_t o;
  char *workspace;
  al_mcp_server_t *servers;
  size_t n;
  uint64_t startup_wait_ms;
  int live; /* handles and children not yet done */
  bool closing;
  bool finished;
  void (*close_cb)(void *data);
  void *close_data;
};


static const char *const accepted_versions[] = {
    "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07",
    NULL};

const char *al__mcp_state_name(al_mcp_state_t st) {
  switch (st) {
  case AL_MCP_STARTING: return "starting";
  case AL_MCP_READY: return "ready";
  case AL_MCP_FAILED: return "failed";
  case AL_MCP_RESTARTING: return "restarting";
  case AL_MCP_CLOSED: return "closed";
  }
  return "failed";
}

void al__mcp_options_init(al_mcp_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->shutdown_grace_ms = AL_MCP_DEFAULT_SHUTDOWN_GRACE_MS;
  o->kill_grace_ms = AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  o->restart_base_ms = AL_MCP_DEFAULT_RESTART_BASE_MS;
  o->max_restarts = AL_MCP_DEFAULT_MAX_RESTARTS;
  o->line_max = AL_MCP_DEFAULT_LINE_MAX;
  o->result_max_chars = AL_MCP_DEFAULT_RESULT_MAX_CHARS;
}

static void spawn_server(al_mcp_server_t *s);
static void on_timer(uv_timer_t *t);
static void feed_stdout(al_mcp_server_t *s, const char *p, size_t n);
static void server_fail(al_mcp_server_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void maybe_finish(al_mcp_t *m);
static void http_drop(al_mcp_server_t *s);
static void on_message(al_mcp_server_t *s, const json_t *msg);

/* ---- state ------------------------------------------------------------------- */

static void set_state(al_mcp_server_t *s, al_mcp_state_t st) {
  al_mcp_t *m = s->m;

  if (s->state == st) {
    return;
  }
  al_log(AL_LOG_DEBUG, "mcp %s: %s -> %s", s->cfg.name,
         al__mcp_state_name(s->state), al__mcp_state_name(st));
  s->state = st;
  if (st == AL_MCP_READY || st == AL_MCP_FAILED) {
    s->ever_settled = true;
  }
  if (m->o.on_state != NULL && !m->closing) {
    m->o.on_state(m, s, m->o.data);
  }
}

/* ---- writing ------------------------------------------------------------------- */

static void send_msg(al_mcp_server_t *s, json_t *msg) {
  char *text;
  char *line;
  size_t n;

  if (s->http != NULL && msg != NULL) {
    json_object_set_new(msg, "jsonrpc", json_string("2.0"));
    al__mcp_http_send(s->http, msg);
    json_decref(msg);
    return;
  }
  if (s->sp == NULL) {
    json_decref(msg);
    return;
  }
  json_object_set_new(msg, "jsonrpc", json_string("2.0"));
  text = json_dumps(msg, JSON_COMPACT);
  json_decref(msg);
  if (text == NULL) {
    return;
  }
  n = strlen(text);
  line = al_realloc(text, n + 2);
  if (line == NULL) {
    al_free(text);
    return;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  /* Queued by the spawn layer while a sandboxed start is still being
   * planned on the threadpool (the initialize request, say). */
  (void)al__spawn_write(s->sp, line, n + 1);
}

static int64_t send_request(al_mcp_server_t *s, const char *method,
                            json_t *params, rq_kind_t kind,
                            al_mcp_call_t *call) {
  pending_t *p = al_calloc(1, sizeof(*p));
  json_t *msg;

  if (p == NULL) {
    json_decref(params);
    return -1;
  }
  p->id = ++s->next_id;
  p->kind = kind;
  p->call = call;
  al_list_insert_tail(&s->pending, &p->node);
  msg = json_pack("{s:I, s:s}", "id", (json_int_t)p->id, "method", method);
  if (params != NULL) {
    json_object_set_new(msg, "params", params);
  }
  send_msg(s, msg);
  return p->id;
}

static void send_notification(al_mcp_server_t *s, const char *method,
                              json_t *params) {
  json_t *msg = json_pack("{s:s}", "method", method);

  if (params != NULL) {
    json_object_set_new(msg, "params", params);
  }
  send_msg(s, msg);
}

static void pending_drop_all(al_mcp_server_t *s) {
  while (!al_list_empty(&s->pending)) {
    pending_t *p = AL_CONTAINER_OF(s->pending.next, pending_t, node);

    al_list_remove(&p->node);
    al_free(p);
  }
}

static pending_t *pending_take(al_mcp_server_t *s, int64_t id) {
  al_list_t *pos;

  al_list_foreach(pos, &s->pending) {
    pending_t *p = AL_CONTAINER_OF(pos, pending_t, node);

    if (p->id == id) {
      al_list_remove(&p->node);
      return p;
    }
  }
  return NULL;
}

/* ---- calls --------------------------------------------------------------------- */

static void call_on_timer_close(uv_handle_t *h) {
  al_mcp_call_t *c = h->data;
  al_mcp_t *m = c->server->m;

  json_decref(c->blocks);
  al_free(c->tool);
  al_free(c);
  m->live--;
  maybe_finish(m);
}

/* Ends the call: removes it from the server's lists and frees it (after
 * its timer closes). No callback here. */
static void call_release(al_mcp_call_t *c) {
  al_mcp_server_t *s = c->server;
  al_list_t *pos;

  c->done = true;
  al_list_foreach(pos, &s->pending) {
    pending_t *p = AL_CONTAINER_OF(pos, pending_t, node);

    if (p->call == c) {
      p->call = NULL; /* its answer, if any, is dropped */
      break;
    }
  }
  al_list_remove(&c->node);
  if (!c->timer_closing) {
    c->timer_closing = true;
    uv_close((uv_handle_t *)&c->timer, call_on_timer_close);
  }
}

static void call_finish(al_mcp_call_t *c, bool is_error, const char *text,
                        size_t len) {
  al_mcp_done_cb cb = c->on_done;
  void *data = c->data;

  if (c->done) {
    return;
  }
  call_release(c);
  cb(c, is_error, text, len, data);
}

static void call_finish_fmt(al_mcp_call_t *c, const char *fmt, const char *a,
                            const char *b) {
  al_buf_t t;

  al_buf_init(&t, 64 * 1024);
  al_buf_printf(&t, fmt, a, b != NULL ? b : "");
  call_finish(c, true, t.data != NULL ? t.data : "Error", t.len);
  al_buf_free(&t);
}

static void on_call_timeout(uv_timer_t *t) {
  al_mcp_call_t *c = t->data;
  al_mcp_server_t *s = c->server;
  char secs[32];
  uint64_t ms = uv_now(s->m->o.loop) - c->t0_ms;

  send_notification(s, "notifications/cancelled",
                    json_pack("{s:I, s:s}", "requestId", (json_int_t)c->id,
                              "reason", "timed out"));
  snprintf(secs, sizeof(secs), "%.3g", (double)ms / 1000.0);
  c->end = "timeout";
  call_finish_fmt(c, "Error: MCP tool '%s' timed out after %s s", c->tool,
                  secs);
}

/* The next timeout: call_timeout_ms from now, never past call_max_ms from
 * the start. */
static void call_arm(al_mcp_call_t *c) {
  al_mcp_server_t *s = c->server;
  uint64_t now = uv_now(s->m->o.loop);
  uint64_t hard = c->t0_ms + s->cfg.call_max_ms;
  uint64_t next = now + s->cfg.call_timeout_ms;

  if (next > hard) {
    next = hard;
  }
  uv_timer_start(&c->timer, on_call_timeout, next > now ? next - now : 0, 0);
}

int al__mcp_call(al_mcp_server_t *s, const char *tool, const json_t *args,
                 al_mcp_progress_cb on_progress, al_mcp_done_cb on_done,
                 void *data, al_mcp_call_t **out) {
  al_mcp_call_t *c;
  json_t *params;

  *out = NULL;
  if (s->state != AL_MCP_READY || s->m->closing) {
    return AL_ESTATE;
  }
  c = al_calloc(1, sizeof(*c));
  if (c == NULL || (c->tool = al_strdup(tool)) == NULL) {
    al_free(c);
    return AL_ENOMEM;
  }
  c->server = s;
  c->on_progress = on_progress;
  c->on_done = on_done;
  c->data = data;
  uv_timer_init(s->m->o.loop, &c->timer);
  c->timer.data = c;
  s->m->live++;
  c->t0_ms = uv_now(s->m->o.loop);
  al_list_insert_tail(&s->calls, &c->node);
  c->id = s->next_id + 1;
  params = json_pack("{s:s, s:O, s:{s:I}}", "name", tool, "arguments",
                     args != NULL ? args : json_object(), "_meta",
                     "progressToken", (json_int_t)c->id);
  if (params == NULL ||
      send_request(s, "tools/call", params, RQ_CALL, c) != c->id) {
    call_release(c);
    return AL_ENOMEM;
  }
  call_arm(c);
  *out = c;
  return 0;
}

const char *al__mcp_call_end(const al_mcp_call_t *c) {
  return c->end;
}

uint64_t al__mcp_call_ms(const al_mcp_call_t *c) {
  return uv_now(c->server->m->o.loop) - c->t0_ms;
}

void al__mcp_call_cancel(al_mcp_call_t *c) {
  if (c->done) {
    return;
  }
  send_notification(c->server, "notifications/cancelled",
                    json_pack("{s:I, s:s}", "requestId", (json_int_t)c->id,
                              "reason", "cancelled by the user"));
  call_release(c);
}

/* Every call in flight gets an error result with the server's error (it
 * died: end "server_failed", or closes: "server_closed"). */
static void calls_fail_all(al_mcp_server_t *s, const char *end) {
  while (!al_list_empty(&s->calls)) {
    al_mcp_call_t *c = AL_CONTAINER_OF(s->calls.next, al_mcp_call_t, node);

    c->end = end;
    call_finish_fmt(c, "Error: %s", s->error != NULL ? s->error
                                                     : "MCP server closed",
                    NULL);
  }
}

/* ---- results ------------------------------------------------------------------- */

static const json_t *tool_output_schema(al_mcp_server_t *s, const char *tool) {
  size_t i;
  json_t *t;

  json_array_foreach(s->tools, i, t) {
    const char *n = json_string_value(json_object_get(t, "name"));

    if (n != NULL && strcmp(n, tool) == 0) {
      return json_object_get(t, "outputSchema");
    }
  }
  return NULL;
}

static void on_call_answer(al_mcp_server_t *s, al_mcp_call_t *c,
                           const json_t *msg) {
  const json_t *err = json_object_get(msg, "error");
  const json_t *res = json_object_get(msg, "result");
  bool is_error = false;
  char *text;
  char code[32];

  if (err != NULL || !json_is_object(res)) {
    const char *em = json_string_value(json_object_get(err, "message"));

    snprintf(code, sizeof(code), "%" PRId64,
             (int64_t)json_integer_value(json_object_get(err, "code")));
    if (err == NULL) {
      call_finish_fmt(c, "Error: MCP tool '%s' gave an answer without a "
                         "result%s", c->tool, "");
      return;
    }
    {
      al_buf_t t;

      al_buf_init(&t, 64 * 1024);
      al_buf_printf(&t, "Error: MCP error %s: %s", code,
                    em != NULL ? em : "(no message)");
      call_finish(c, true, t.data != NULL ? t.data : "Error", t.len);
      al_buf_free(&t);
    }
    return;
  }
  text = al__mcp_result_content(res, tool_output_schema(s, c->tool),
                                s->m->o.result_max_chars, c->tool, &is_error,
                                &c->blocks);
  if (text == NULL) {
    call_finish(c, true, "Error: out of memory", 20);
    return;
  }
  call_finish(c, is_error, text, strlen(text));
  al_free(text);
}

const json_t *al__mcp_call_blocks(const al_mcp_call_t *c) {
  return c->blocks;
}

/* ---- listing ------------------------------------------------------------------- */

static void list_page(al_mcp_server_t *s, const char *cursor) {
  json_t *params = cursor != NULL ? json_pack("{s:s}", "cursor", cursor)
                                  : json_object();

  s->pages++;
  send_request(s, "tools/list", params, RQ_LIST, NULL);
}

static void list_start(al_mcp_server_t *s) {
  json_decref(s->listing);
  s->listing = json_array();
  s->pages = 0;
  s->relist = false;
  list_page(s, NULL);
}

static void on_list_answer(al_mcp_server_t *s, const json_t *msg) {
  const json_t *res = json_object_get(msg, "result");
  const json_t *tools = json_object_get(res, "tools");
  const char *cursor = json_string_value(json_object_get(res, "nextCursor"));
  size_t i;
  json_t *t;

  if (s->listing == NULL) {
    return;
  }
  if (!json_is_array(tools)) {
    server_fail(s, "tools/list answered without a tools array");
    return;
  }
  json_array_foreach(tools, i, t) {
    const json_t *schema = json_object_get(t, "inputSchema");

    if (!json_is_string(json_object_get(t, "name")) ||
        !json_is_object(schema) ||
        json_array_size(s->listing) >= AL_MCP_MAX_TOOLS) {
      al_log(AL_LOG_WARN, "mcp %s: tool %zu dropped (no name, inputSchema "
                          "not an object, or over the tool limit)",
             s->cfg.name, i);
      continue;
    }
    json_array_append(s->listing, t);
  }
  if (cursor != NULL && cursor[0] != '\0' && s->pages < AL_MCP_MAX_PAGES) {
    list_page(s, cursor);
    return;
  }
  json_decref(s->tools);
  s->tools = s->listing;
  s->listing = NULL;
  s->gen++;
  if (s->state == AL_MCP_STARTING) {
    uv_timer_stop(&s->timer);
    s->ms = (uv_now(s->m->o.loop) - s->t_spawn);
    al_free(s->error);
    s->error = NULL;
    set_state(s, AL_MCP_READY);
  }
  if (s->relist && s->state == AL_MCP_READY) {
    list_start(s);
  }
}

static void on_init_answer(al_mcp_server_t *s, const json_t *msg) {
  const json_t *res = json_object_get(msg, "result");
  const char *v = json_string_value(json_object_get(res, "protocolVersion"));
  size_t i;

  if (!json_is_object(res) || v == NULL) {
    const char *em = json_string_value(
        json_object_get(json_object_get(msg, "error"), "message"));

    server_fail(s, "initialize failed: %s",
                em != NULL ? em : "no protocolVersion in the answer");
    return;
  }
  for (i = 0; accepted_versions[i] != NULL; i++) {
    if (strcmp(accepted_versions[i], v) == 0) {
      break;
    }
  }
  if (accepted_versions[i] == NULL) {
    server_fail(s, "unsupported protocol version '%.64s'", v);
    return;
  }
  al_free(s->version);
  s->version = al_strdup(v);
  if (s->http != NULL) {
    al__mcp_http_set_version(s->http, v);
  }
  send_notification(s, "notifications/initialized", NULL);
  list_start(s);
}

/* ---- incoming ------------------------------------------------------------------ */

static void answer(al_mcp_server_t *s, const json_t *id, json_t *result,
                   int code, const char *message) {
  json_t *msg = json_pack("{s:O}", "id", id);

  if (result != NULL) {
    json_object_set_new(msg, "result", result);
  } else {
    json_object_set_new(msg, "error", json_pack("{s:i, s:s}", "code", code,
                                                "message", message));
  }
  send_msg(s, msg);
}

static void on_server_request(al_mcp_server_t *s, const char *method,
                              const json_t *id) {
  if (strcmp(method, "ping") == 0) {
    answer(s, id, json_object(), 0, NULL);
  } else if (strcmp(method, "roots/list") == 0) {
    char uri[4200];

    snprintf(uri, sizeof(uri), "file://%s", s->m->workspace);
    answer(s, id,
           json_pack("{s:[{s:s, s:s}]}", "roots", "uri", uri, "name",
                     "workspace"),
           0, NULL);
  } else {
    answer(s, id, NULL, -32601, "Method not found");
  }
}

static void on_notification(al_mcp_server_t *s, const char *method,
                            const json_t *params) {
  if (strcmp(method, "notifications/tools/list_changed") == 0) {
    if (s->state != AL_MCP_READY && s->state != AL_MCP_STARTING) {
      return;
    }
    /* A change while a listing is in flight (servers add tools right
     * after notifications/initialized): list again once it is done. */
    if (s->listing != NULL) {
      s->relist = true;
    } else if (s->state == AL_MCP_READY) {
      list_start(s);
    }
  } else if (strcmp(method, "notifications/progress") == 0) {
    const json_t *tok = json_object_get(params, "progressToken");
    al_list_t *pos;

    al_list_foreach(pos, &s->calls) {
      al_mcp_call_t *c = AL_CONTAINER_OF(pos, al_mcp_call_t, node);

      if (json_is_integer(tok) && json_integer_value(tok) == c->id) {
        const char *msg = json_string_value(json_object_get(params, "message"));
        double p = json_number_value(json_object_get(params, "progress"));
        const json_t *tot = json_object_get(params, "total");
        char text[512];

        if (json_is_number(tot)) {
          snprintf(text, sizeof(text), "%g/%g%s%.400s", p,
                   json_number_value(tot), msg != NULL ? " " : "",
                   msg != NULL ? msg : "");
        } else {
          snprintf(text, sizeof(text), "%g%s%.400s", p, msg != NULL ? " " : "",
                   msg != NULL ? msg : "");
        }
        call_arm(c);
        if (c->on_progress != NULL) {
          c->on_progress(c, text, c->data);
        }
        break;
      }
    }
  }
  /* notifications/message (logs), cancelled, resources/...: nothing to do */
}

static void on_message(al_mcp_server_t *s, const json_t *msg) {
  const json_t *id = json_object_get(msg, "id");
  const char *method = json_string_value(json_object_get(msg, "method"));
  pending_t *p;

  if (method != NULL) {
    if (id != NULL) {
      on_server_request(s, method, id);
    } else {
      on_notification(s, method, json_object_get(msg, "params"));
    }
    return;
  }
  if (!json_is_integer(id)) {
    return; /* an answer to nothing we sent */
  }
  p = pending_take(s, (int64_t)json_integer_value(id));
  if (p == NULL) {
    return; /* a late answer to a cancelled call */
  }
  switch (p->kind) {
  case RQ_INIT:
    on_init_answer(s, msg);
    break;
  case RQ_LIST:
    on_list_answer(s, msg);
    break;
  case RQ_CALL:
    if (p->call != NULL) {
      on_call_answer(s, p->call, msg);
    }
    break;
  case RQ_OTHER:
    break;
  }
  al_free(p);
}

static void on_line(al_mcp_server_t *s, const char *line, size_t n) {
  json_error_t jerr;
  json_t *msg;

  while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ')) {
    n--;
  }
  if (n == 0) {
    return;
  }
  msg = json_loadb(line, n, 0, &jerr);
  if (!json_is_object(msg)) {
    json_decref(msg);
    /* line is not NUL-terminated (it points into the read buffer). */
    server_fail(s, "wrote something that is not JSON-RPC on stdout: %.*s",
                (int)(n < 80 ? n : 80), line);
    return;
  }
  on_message(s, msg);
  json_decref(msg);
}

static void on_output(al_spawn_t *sp, int stream, const char *p, size_t n) {
  al_mcp_server_t *s = sp->data;

  if (s->sp != sp || s->closing) {
    return; /* an old run's last bytes */
  }
  if (stream == 1) {
    al_buf_t *r = &s->errring;

    if (n >= AL_MCP_STDERR_RING) {
      al_buf_reset(r);
      al_buf_append(r, p + n - AL_MCP_STDERR_RING / 2, AL_MCP_STDERR_RING / 2);
    } else {
      if (r->len + n > AL_MCP_STDERR_RING) {
        al_buf_consume(r, r->len + n - AL_MCP_STDERR_RING);
      }
      al_buf_append(r, p, n);
    }
    return;
  }
  feed_stdout(s, p, n);
}

/* Splits stdout into lines and handles each; stops when the server fails
 * (a failure may also replace the run: s->sp changes). */
static void feed_stdout(al_mcp_server_t *s, const char *p, size_t n) {
  al_spawn_t *sp = s->sp;

  while (n > 0 && s->sp == sp && s->state != AL_MCP_FAILED &&
         s->state != AL_MCP_RESTARTING) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl != NULL ? (size_t)(nl - p) : n;

    if (s->rx.len + take > s->m->o.line_max) {
      server_fail(s, "wrote a line longer than %zu bytes", s->m->o.line_max);
      return;
    }
    if (nl == NULL) {
      al_buf_append(&s->rx, p, take);
      return;
    }
    if (s->rx.len > 0) {
      al_buf_append(&s->rx, p, take);
      on_line(s, s->rx.data, s->rx.len);
      al_buf_reset(&s->rx);
    } else {
      on_line(s, p, take);
    }
    p += take + 1;
    n -= take + 1;
  }
}

/* ---- life cycle ----------------------------------------------------------------- */

/* The last AL_MCP_STDERR_LINES lines of stderr. */
static void stderr_tail(al_mcp_server_t *s, al_buf_t *out) {
  const char *d = s->errring.data;
  size_t n = s->errring.len;
  size_t i = n;
  int lines = 0;

  if (d == NULL || n == 0) {
    return;
  }
  while (i > 0 && (d[i - 1] == '\n' || d[i - 1] == '\r')) {
    i--;
    n = i;
  }
  while (i > 0) {
    if (d[i - 1] == '\n' && ++lines >= AL_MCP_STDERR_LINES) {
      break;
    }
    i--;
  }
  al_buf_append_str(out, "; stderr: ");
  al__utf8_sanitize_append(out, d + i, n - i);
}


/* Whether another restart is allowed: fewer than max_restarts in the last
 * 5 minutes. */
static bool restart_allowed(al_mcp_server_t *s) {
  uint64_t now = uv_now(s->m->o.loop);
  int i, kept = 0;

  for (i = 0; i < s->n_restarts; i++) {
    if (now - s->restarts[i] < 300000) {
      s->restarts[kept++] = s->restarts[i];
    }
  }
  s->n_restarts = kept;
  return !s->m->closing && s->n_restarts < s->m->o.max_restarts &&
         s->n_restarts < (int)AL_ARRAY_SIZE(s->restarts);
}

/* Backoff restart_base_ms, doubling per attempt. */
static void restart_arm(al_mcp_server_t *s) {
  al_mcp_t *m = s->m;
  int shift = s->attempt > 6 ? 6 : s->attempt;

  s->restarts[s->n_restarts++] = uv_now(m->o.loop);
  s->attempt++;
  uv_timer_start(&s->timer, on_timer, m->o.restart_base_ms << shift, 0);
}

static void server_close_timer(al_mcp_server_t *s);

static void on_spawn_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  al_mcp_server_t *s = sp->data;
  al_mcp_t *m = s->m;

  if (s->sp == sp) {
    s->sp = NULL;
    if (res->pid > 0) {
      s->pid = res->pid; /* known only now after an asynchronous start */
    }
    if (s->closing) {
      server_close_timer(s);
    } else if (s->state == AL_MCP_STARTING || s->state == AL_MCP_READY) {
      /* It ended on its own, or (an asynchronous start) never began. */
      if (res->start_error != 0) {
        server_fail(s, "could not start '%s': %s", s->cfg.argv[0],
                    uv_strerror(res->start_error));
      } else if (res->term_signal != 0) {
        server_fail(s, "exited on signal %d", res->term_signal);
      } else {
        server_fail(s, "exited with status %" PRId64, res->exit_status);
      }
    } else if (s->state == AL_MCP_RESTARTING) {
      /* It was killed for a failure: the backoff starts now. */
      restart_arm(s);
    }
  }
  m->live--;
  maybe_finish(m);
}

static void server_fail(al_mcp_server_t *s, const char *fmt, ...) {
  al_buf_t b;
  va_list ap;
  char tmp[1024];

  if (s->state == AL_MCP_FAILED || s->state == AL_MCP_RESTARTING ||
      s->closing) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  al_buf_init(&b, 16 * 1024);
  al_buf_printf(&b, "MCP server '%s' %s", s->cfg.name, tmp);
  stderr_tail(s, &b);
  al_free(s->error);
  s->error = b.data;
  s->ms = uv_now(s->m->o.loop) - s->t_spawn;
  uv_timer_stop(&s->timer);
  pending_drop_all(s);
  json_decref(s->listing);
  s->listing = NULL;
  al_buf_free(&s->rx);
  calls_fail_all(s, "server_failed");
  if (s->sp != NULL) {
    al__spawn_close_stdin(s->sp);
    al__spawn_kill(s->sp);
  }
  http_drop(s);
  if (!restart_allowed(s)) {
    set_state(s, AL_MCP_FAILED);
    return;
  }
  set_state(s, AL_MCP_RESTARTING);
  if (s->sp == NULL) {
    restart_arm(s); /* else once the child is reaped (on_spawn_done) */
  }
}

static void on_timer(uv_timer_t *t) {
  al_mcp_server_t *s = t->data;

  if (s->closing) {
    /* Shutdown grace over: SIGTERM, then SIGKILL (spawn wrapper). */
    if (s->sp != NULL) {
      al__spawn_kill(s->sp);
    }
    return;
  }
  if (s->state == AL_MCP_STARTING) {
    server_fail(s, "did not finish starting within %" PRIu64 " ms",
                s->cfg.startup_timeout_ms);
    return;
  }
  if ((s->state == AL_MCP_RESTARTING || s->state == AL_MCP_CLOSED) &&
      s->sp == NULL) {
    spawn_server(s); /* a restart, or the first start (al__mcp_start) */
  }
}

static void send_initialize(al_mcp_server_t *s) {
  json_t *params = json_pack(
      "{s:s, s:{s:{s:b}}, s:{s:s, s:s}}", "protocolVersion",
      AL_MCP_PROTOCOL_VERSION, "capabilities", "roots", "listChanged", 0,
      "clientInfo", "name", "agentloop", "version", "0.1");

  send_request(s, "initialize", params, RQ_INIT, NULL);
}

/* ---- Streamable HTTP ---------------------------------------------------------- */

static void on_http_message(void *data, const json_t *msg) {
  al_mcp_server_t *s = data;

  if (s->closing || s->state == AL_MCP_FAILED ||
      s->state == AL_MCP_RESTARTING) {
    return;
  }
  on_message(s, msg);
}

static void on_http_fail(void *data, const char *why) {
  server_fail((al_mcp_server_t *)data, "%s", why);
}

static void on_http_notice(void *data, const char *text) {
  al_mcp_server_t *s = data;
  al_mcp_t *m = s->m;

  if (m->o.on_notice != NULL && !m->closing && !s->closing) {
    m->o.on_notice(m, s, text, m->o.data);
  }
}

static void on_http_closed(void *data) {
  al_mcp_t *m = data;

  m->live--;
  maybe_finish(m);
}

/* Ends the server's HTTP session (DELETE, then the client closes; counted
 * in live until then). */
static void http_drop(al_mcp_server_t *s) {
  al_mcp_http_t *h = s->http;

  if (h != NULL) {
    s->http = NULL;
    al__mcp_http_close(h, on_http_closed, s->m);
  }
}

static void connect_server(al_mcp_server_t *s) {
  al_mcp_t *m = s->m;
  al_mcp_http_options_t ho;
  int rc;

  memset(&ho, 0, sizeof(ho));
  ho.loop = m->o.loop;
  ho.url = s->cfg.url;
  ho.headers = s->cfg.headers;
  ho.body_max = m->o.line_max;
  ho.request_max_ms = s->cfg.call_max_ms + s->cfg.startup_timeout_ms;
  ho.close_grace_ms = m->o.shutdown_grace_ms;
  ho.on_message = on_http_message;
  ho.on_fail = on_http_fail;
  ho.on_notice = on_http_notice;
  ho.backoff = m->o.stream_backoff;
  ho.data = s;
  s->next_id = 0;
  s->t_spawn = uv_now(m->o.loop);
  set_state(s, AL_MCP_STARTING);
  rc = al__mcp_http_new(&ho, &s->http);
  if (rc != 0) {
    server_fail(s, "could not set up HTTP to %s: %s", s->cfg.url,
                al_strerror(rc));
    return;
  }
  m->live++;
  uv_timer_start(&s->timer, on_timer, s->cfg.startup_timeout_ms, 0);
  send_initialize(s);
}

static void spawn_server(al_mcp_server_t *s) {
  al_mcp_t *m = s->m;
  al_spawn_options_t so;
  al_spawn_t *sp;
  int rc;

  if (s->cfg.url != NULL) {
    connect_server(s);
    return;
  }
  al__spawn_options_init(&so);
  so.argv = (const char *const *)s->cfg.argv;
  so.cwd = s->cfg.cwd != NULL ? s->cfg.cwd : m->workspace;
  so.env = (const char *const *)s->cfg.env;
  so.output_max = 1; /* we read through on_output */
  so.no_timeout = true;
  so.stdin_pipe = true;
  so.kill_grace_ms = m->o.kill_grace_ms;
  so.on_done = on_spawn_done;
  so.on_output = on_output;
  so.data = s;
  so.sandbox = s->cfg.sandbox ? m->o.sandbox : NULL;
  so.network = s->cfg.network;
  /* A cold sandboxed start plans bwrap's arguments on the threadpool:
   * the pid is known once it exists (al__mcp_server_pid). */
  so.async_start = true;
  al_buf_reset(&s->errring);
  al_buf_free(&s->rx);
  s->next_id = 0;
  s->t_spawn = uv_now(m->o.loop);
  set_state(s, AL_MCP_STARTING);
  rc = al__spawn_start(m->o.loop, &so, &sp);
  if (rc != 0) {
    server_fail(s, "could not start '%s': %s", s->cfg.argv[0],
                uv_strerror(rc));
    return;
  }
  m->live++;
  s->sp = sp;
  s->pid = sp->pid;
  uv_timer_start(&s->timer, on_timer, s->cfg.startup_timeout_ms, 0);
  send_initialize(s);
}

int al__mcp_new(const al_mcp_options_t *o, al_mcp_config_t *cfg,
                al_mcp_t **out) {
  al_mcp_t *m;
  size_t i;

  *out = NULL;
  if (o->loop == NULL || o->workspace == NULL) {
    return AL_EINVAL;
  }
  m = al_calloc(1, sizeof(*m));
  if (m == NULL) {
    return AL_ENOMEM;
  }
  m->o = *o;
  m->workspace = al_strdup(o->workspace);
  m->servers = al_calloc(cfg->n + 1, sizeof(*m->servers));
  if (m->workspace == NULL || m->servers == NULL) {
    al_free(m->workspace);
    al_free(m->servers);
    al_free(m);
    return AL_ENOMEM;
  }
  if (m->o.line_max == 0) {
    m->o.line_max = AL_MCP_DEFAULT_LINE_MAX;
  }
  if (m->o.result_max_chars == 0) {
    m->o.result_max_chars = AL_MCP_DEFAULT_RESULT_MAX_CHARS;
  }
  m->n = cfg->n;
  m->startup_wait_ms = cfg->startup_wait_ms;
  for (i = 0; i < cfg->n; i++) {
    al_mcp_server_t *s = &m->servers[i];

    s->m = m;
    s->cfg = cfg->servers[i];
    s->state = AL_MCP_CLOSED;
    al_list_init(&s->pending);
    al_list_init(&s->calls);
    al_buf_init(&s->rx, m->o.line_max + 1);
    al_buf_init(&s->errring, AL_MCP_STDERR_RING + 1);
    s->tools = json_array();
    uv_timer_init(o->loop, &s->timer);
    s->timer.data = s;
    m->live++;
  }
  al_free(cfg->servers);
  cfg->servers = NULL;
  cfg->n = 0;
  *out = m;
  return 0;
}

void al__mcp_start(al_mcp_t *m) {
  size_t i;

  /* From the loop's next turn: the owner subscribes to states after
   * creating us and should see `starting` too. */
  for (i = 0; i < m->n; i++) {
    uv_timer_start(&m->servers[i].timer, on_timer, 0, 0);
  }
}

bool al__mcp_settled(const al_mcp_t *m) {
  size_t i;

  for (i = 0; i < m->n; i++) {
    if (!m->servers[i].ever_settled && !m->closing) {
      return false; /* not started yet, or still starting */
    }
  }
  return true;
}

uint64_t al__mcp_startup_wait_ms(const al_mcp_t *m) { return m->startup_wait_ms; }
size_t al__mcp_count(const al_mcp_t *m) { return m->n; }
al_mcp_server_t *al__mcp_server(al_mcp_t *m, size_t i) {
  return i < m->n ? &m->servers[i] : NULL;
}
const char *al__mcp_server_name(const al_mcp_server_t *s) { return s->cfg.name; }
al_mcp_state_t al__mcp_server_state(const al_mcp_server_t *s) { return s->state; }
const json_t *al__mcp_server_tools(const al_mcp_server_t *s) { return s->tools; }
uint64_t al__mcp_server_gen(const al_mcp_server_t *s) { return s->gen; }
const al_mcp_server_config_t *al__mcp_server_config(const al_mcp_server_t *s) {
  return &s->cfg;
}
const char *al__mcp_server_error(const al_mcp_server_t *s) { return s->error; }
uint64_t al__mcp_server_ms(const al_mcp_server_t *s) { return s->ms; }
const char *al__mcp_server_version(const al_mcp_server_t *s) { return s->version; }
int al__mcp_server_pid(const al_mcp_server_t *s) {
  return s->sp != NULL && s->sp->pid > 0 ? s->sp->pid : s->pid;
}

json_t *al__mcp_server_json(const al_mcp_server_t *s) {
  /* A server still starting: how long so far (listings show it). */
  uint64_t ms = s->state == AL_MCP_STARTING && !s->m->closing
                    ? uv_now(s->m->o.loop) - s->t_spawn
                    : s->ms;
  json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:i}", "name", s->cfg.name,
                        "state", al__mcp_state_name(s->state), "tools",
                        (json_int_t)json_array_size(s->tools), "ms",
                        (json_int_t)ms, "pid", al__mcp_server_pid(s));

  if (o != NULL) {
    json_object_set_new(o, "error",
                        s->error != NULL ? json_string(s->error) : json_null());
    json_object_set_new(o, "protocol", s->version != NULL
                                           ? json_string(s->version)
                                           : json_null());
  }
  return o;
}

/* ---- close ----------------------------------------------------------------------- */

static void on_server_timer_close(uv_handle_t *h) {
  al_mcp_server_t *s = h->data;

  s->m->live--;
  maybe_finish(s->m);
}

static void server_close_timer(al_mcp_server_t *s) {
  if (!uv_is_closing((uv_handle_t *)&s->timer)) {
    uv_close((uv_handle_t *)&s->timer, on_server_timer_close);
  }
}

static void maybe_finish(al_mcp_t *m) {
  size_t i;
  void (*cb)(void *) = m->close_cb;
  void *data = m->close_data;

  if (!m->closing || m->finished || m->live > 0) {
    return;
  }
  m->finished = true;
  for (i = 0; i < m->n; i++) {
    al_mcp_server_t *s = &m->servers[i];

    json_decref(s->tools);
    json_decref(s->listing);
    al_buf_free(&s->rx);
    al_buf_free(&s->errring);
    al_free(s->error);
    al_free(s->version);
    pending_drop_all(s);
    al__mcp_server_config_free(&s->cfg);
  }
  al_free(m->servers);
  al_free(m->workspace);
  al_free(m);
  if (cb != NULL) {
    cb(data);
  }
}

void al__mcp_close(al_mcp_t *m, void (*cb)(void *data), void *data) {
  size_t i;

  if (m->closing) {
    return;
  }
  m->closing = true;
  m->close_cb = cb;
  m->close_data = data;
  for (i = 0; i < m->n; i++) {
    al_mcp_server_t *s = &m->servers[i];

    if (s->error == NULL) {
      s->error = al_strdup("MCP server is shutting down");
    }
    calls_fail_all(s, "server_closed");
    s->closing = true;
    s->state = AL_MCP_CLOSED;
    uv_timer_stop(&s->timer);
    http_drop(s);
    if (s->sp != NULL) {
      /* End of input first (servers exit on EOF); the grace timer then
       * escalates. */
      al__spawn_close_stdin(s->sp);
      uv_timer_start(&s->timer, on_timer, m->o.shutdown_grace_ms, 0);
    }
  }
  /* A server's timer closes once its child is gone (on_spawn_done), so it
   * can escalate until then. */
  for (i = 0; i < m->n; i++) {
    if (m->servers[i].sp == NULL) {
      server_close_timer(&m->servers[i]);
    }
  }
  maybe_finish(m);
}

/* ---- fuzzing seam ---------------------------------------------------------------- */

void al__mcp_fuzz_feed(al_mcp_t *m, const char *p, size_t n) {
  al_mcp_server_t *s = &m->servers[0];

  if (s->state == AL_MCP_CLOSED && !s->closing) {
    /* As if spawned and initialize (id 1) sent; nothing is written. */
    s->state = AL_MCP_STARTING;
    if (send_request(s, "initialize", json_object(), RQ_INIT, NULL) < 0) {
      return;
    }
  }
  feed_stdout(s, p, n);
}
