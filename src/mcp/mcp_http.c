/* MCP Streamable HTTP transport: see mcp_http.h for the rules.
 *
 * Ownership: the transport owns its HTTP client and one post_t per request
 * in flight (POST, resume GET, DELETE). A post is freed when its request
 * completes or is cancelled; while one of its callbacks runs (busy) a close
 * only marks it dead and the callback frees it on the way out, since the
 * owner may close the transport from inside on_message.
 *
 * The server stream (is_listen) is opened again when it ends, through
 * listen_ended -> listen_delay -> listen_timer: never at once after a
 * short-lived stream, so a server that sends one event and closes cannot
 * make us spin (570-1,125 GETs a second were measured before the
 * backoff). The transport owns two handle-owning things, the HTTP client
 * and the listen timer; it is freed in the last of their close callbacks. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/common.h"
#include "mcp/mcp_http.h"
#include "sse/sse.h"
#include "transport/transport.h"

#define MAX_HEADERS 64
#define MAX_RESUMES 100
#define MAX_PER_WINDOW 64 /* reopen times kept for the window bound */

typedef struct post_s {
  al_list_t node;
  al_mcp_http_t *h;
  al_http_request_t *r;
  char *body; /* the message (NULL for DELETE) */
  size_t len;
  json_int_t rid; /* the request id this exchange answers */
  bool has_rid;
  bool answered;
  bool internal; /* the re-initialize: its answer is ours */
  bool initialized; /* notifications/initialized (a re-init sends its own) */
  bool is_init;     /* initialize: its response may assign the session */
  bool is_get;   /* a resume */
  bool is_listen; /* the GET stream for messages outside requests */
  bool is_delete;
  bool sse;
  bool busy;
  bool dead;
  uint64_t gen; /* session generation it was sent with */
  bool had_session;
  int status;
  int events;  /* events this stream delivered */
  int resumes; /* resumes so far in this exchange */
  al_sse_parser_t parser;
  al_buf_t json;
  char *last_id;
} post_t;

typedef struct queued_s {
  al_list_t node;
  char *body;
  size_t len;
} queued_t;

struct al_mcp_http_s {
  al_mcp_http_options_t o;
  char *url;
  al_http_header_t user[MAX_HEADERS];
  size_t n_user;
  char **user_mem;
  al_http_client_t *client;
  al_list_t posts;
  al_list_t queue; /* waiting for a re-initialize */
  char *session;
  uint64_t gen;
  char *version;
  char *init_body;
  size_t init_len;
  bool reiniting;
  bool listening; /* the GET stream is open, or its reopen is scheduled */
  /* The server stream's reopens (listen_delay). */
  uv_timer_t listen_timer;
  char *listen_last_id;   /* resume point of the scheduled reopen */
  uint64_t listen_t0;     /* when the current stream was opened */
  uint32_t listen_short;  /* short-lived streams in a row */
  uint64_t opens[MAX_PER_WINDOW]; /* ring of open times, oldest at head */
  uint32_t n_opens;
  uint32_t opens_head;
  bool listen_degraded;   /* the notice for this run of short streams */
  bool listen_gave_up;
  uint64_t retry_ms;      /* the stream's SSE retry: (sticky, as in
                             EventSource); 0: none */
  uint64_t rng;
  int closes_left; /* client and timer, once closing */
  bool reinit_used; /* no answer on the new session yet */
  bool failed;
  bool closing;
  void (*close_cb)(void *data);
  void *close_data;
};

static void post_start(al_mcp_http_t *h, post_t *p);
static void on_client_closed(al_http_client_t *c);
static void fail(al_mcp_http_t *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void listen_ended(al_mcp_http_t *h, post_t *p, int status, int http,
                         const al_http_error_t *err);

static bool dead(const al_mcp_http_t *h) { return h->failed || h->closing; }

static void notice(al_mcp_http_t *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void notice(al_mcp_http_t *h, const char *fmt, ...) {
  char text[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  al_log(AL_LOG_WARN, "mcp http: %s", text);
  if (h->o.on_notice != NULL && !dead(h)) {
    h->o.on_notice(h->o.data, text);
  }
}

static void post_free(post_t *p) {
  al_sse_free(&p->parser);
  al_buf_free(&p->json);
  al_free(p->body);
  al_free(p->last_id);
  al_free(p);
}

/* Detaches p (it is not in posts any more); frees it unless a callback of
 * it is running. */
static void post_drop(post_t *p) {
  al_list_remove(&p->node);
  al_list_init(&p->node);
  p->dead = true;
  if (!p->busy) {
    post_free(p);
  }
}

static void fail(al_mcp_http_t *h, const char *fmt, ...) {
  char why[1024];
  va_list ap;

  if (dead(h)) {
    return;
  }
  h->failed = true;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  h->o.on_fail(h->o.data, why);
}

/* ---- incoming messages ------------------------------------------------------ */

static bool answers(const json_t *msg, const post_t *p) {
  const json_t *id = json_object_get(msg, "id");

  return p->has_rid && json_object_get(msg, "method") == NULL &&
         json_is_integer(id) && json_integer_value(id) == p->rid;
}

static void reinit_done(al_mcp_http_t *h);

/* One message (object) of p's exchange. */
static void deliver_one(post_t *p, const json_t *msg) {
  al_mcp_http_t *h = p->h;

  if (answers(msg, p)) {
    p->answered = true;
    if (p->gen == h->gen && !p->internal) {
      h->reinit_used = false; /* the new session works */
    }
    if (p->internal) {
      if (!json_is_object(json_object_get(msg, "result"))) {
        fail(h, "re-initializing the expired session failed");
        return;
      }
      reinit_done(h);
      return;
    }
  }
  h->o.on_message(h->o.data, msg);
}

static void deliver(post_t *p, const char *text, size_t n) {
  al_mcp_http_t *h = p->h;
  json_error_t jerr;
  json_t *v = json_loadb(text, n, 0, &jerr);
  size_t i;

  if (json_is_object(v)) {
    deliver_one(p, v);
  } else if (json_is_array(v)) {
    for (i = 0; i < json_array_size(v) && !dead(h) && !p->dead; i++) {
      if (json_is_object(json_array_get(v, i))) {
        deliver_one(p, json_array_get(v, i));
      }
    }
  } else {
    fail(h, "sent something that is not JSON-RPC: %.*s",
         (int)(n < 80 ? n : 80), text);
  }
  json_decref(v);
}

/* A retry: field of the server stream: the least wait before reopening it
 * (kept for later streams, as an EventSource keeps it). */
static void on_retry(void *data, uint64_t retry_ms) {
  post_t *p = data;

  if (p->is_listen) {
    p->h->retry_ms = retry_ms;
  }
}

static int on_event(void *data, const al_sse_event_t *ev) {
  post_t *p = data;

  if (ev->has_id) {
    al_free(p->last_id);
    p->last_id = al_strndup(ev->id, ev->id_len);
  }
  p->events++;
  /* An event with an id and no data primes the stream for a resume. */
  if (ev->data_len > 0) {
    deliver(p, ev->data, ev->data_len);
  }
  return dead(p->h) || p->dead ? 1 : 0;
}

/* ---- requests ----------------------------------------------------------------- */

static const char *header_value(const al_http_headers_t *hd, const char *name,
                                size_t *len) {
  const al_http_header_t *v = al_http_headers_get(hd, name);

  *len = v != NULL ? v->value_len : 0;
  return v != NULL ? v->value : NULL;
}

static bool session_ok(const char *s, size_t n) {
  size_t i;

  if (n == 0 || n > 1024) {
    return false;
  }
  for (i = 0; i < n; i++) {
    if (s[i] < 0x21 || s[i] > 0x7e) {
      return false;
    }
  }
  return true;
}

static void on_response(al_http_request_t *r, int status,
                        const al_http_headers_t *hd) {
  post_t *p = al_http_request_get_data(r);
  al_mcp_http_t *h = p->h;
  size_t n;
  const char *ct = header_value(hd, "content-type", &n);
  const char *sid;

  p->status = status;
  if (status < 200 || status >= 300 || p->is_delete) {
    return;
  }
  p->sse = ct != NULL && n >= 17 && strncasecmp(ct, "text/event-stream", 17) == 0;
  sid = header_value(hd, "mcp-session-id", &n);
  if (sid != NULL && p->is_init && h->session == NULL) {
    /* Only an initialize response assigns one. */
    if (!session_ok(sid, n)) {
      fail(h, "sent an invalid Mcp-Session-Id");
      return;
    }
    h->session = al_strndup(sid, n);
    h->gen++;
  }
}

static void on_data(al_http_request_t *r, const char *d, size_t n) {
  post_t *p = al_http_request_get_data(r);
  al_mcp_http_t *h = p->h;
  int rc;

  if (dead(h) || p->dead) {
    return;
  }
  p->busy = true;
  if (p->sse) {
    rc = al_sse_feed(&p->parser, d, n);
    if (rc == AL_ETOOBIG) {
      fail(h, "sent an event larger than %zu bytes", h->o.body_max);
    }
  } else if (al_buf_append(&p->json, d, n) != 0) {
    fail(h, "sent a body larger than %zu bytes", h->o.body_max);
  }
  p->busy = false;
  if (p->dead) {
    post_free(p); /* closed from inside; the request was cancelled */
  } else if (dead(h)) {
    al_http_request_cancel(p->r);
    post_drop(p);
  }
}

static void queue_body(al_mcp_http_t *h, char *body, size_t len, bool head) {
  queued_t *q = al_calloc(1, sizeof(*q));

  if (q == NULL) {
    al_free(body);
    fail(h, "out of memory");
    return;
  }
  q->body = body;
  q->len = len;
  if (head) {
    al_list_insert_head(&h->queue, &q->node);
  } else {
    al_list_insert_tail(&h->queue, &q->node);
  }
}

static post_t *post_new(al_mcp_http_t *h, char *body, size_t len) {
  post_t *p = al_calloc(1, sizeof(*p));
  al_sse_settings_t ss;
  json_error_t jerr;
  json_t *v;

  if (p == NULL) {
    al_free(body);
    return NULL;
  }
  p->h = h;
  p->body = body;
  p->len = len;
  al_list_init(&p->node);
  al_sse_settings_init(&ss);
  ss.on_event = on_event;
  ss.on_retry = on_retry;
  ss.data = p;
  ss.max_event = h->o.body_max;
  ss.max_line = h->o.body_max;
  al_sse_init(&p->parser, &ss);
  al_buf_init(&p->json, h->o.body_max);
  if (body != NULL && (v = json_loadb(body, len, 0, &jerr)) != NULL) {
    const json_t *id = json_object_get(v, "id");
    const char *method = json_string_value(json_object_get(v, "method"));

    p->initialized =
        method != NULL && strcmp(method, "notifications/initialized") == 0;
    p->is_init = method != NULL && strcmp(method, "initialize") == 0;

    if (json_is_string(json_object_get(v, "method")) && json_is_integer(id)) {
      p->has_rid = true;
      p->rid = json_integer_value(id);
    }
    json_decref(v);
  }
  return p;
}

/* The session expired under p: re-initialize once, then re-send. */
static void expired(al_mcp_http_t *h, post_t *p) {
  post_t *init;
  char *copy;

  if (p->internal || (h->reinit_used && p->gen == h->gen)) {
    fail(h, "answered 404 again right after re-initializing its session");
    return;
  }
  if (h->reiniting) {
    /* Sent with the expired session: waits for the new one (a re-init
     * sends its own notifications/initialized). */
    if (!p->initialized) {
      queue_body(h, p->body, p->len, true);
      p->body = NULL;
    }
    return;
  }
  if (p->gen != h->gen) {
    /* Sent with an older session; a new one is up already. */
    post_t *again;

    if (p->initialized) {
      return;
    }
    again = post_new(h, p->body, p->len);
    p->body = NULL;
    if (again == NULL) {
      fail(h, "out of memory");
      return;
    }
    post_start(h, again);
    return;
  }
  if (!p->initialized) {
    queue_body(h, p->body, p->len, true);
    p->body = NULL;
  }
  h->reiniting = true;
  h->reinit_used = true;
  al_free(h->session);
  h->session = NULL;
  copy = al_strndup(h->init_body, h->init_len);
  init = copy != NULL ? post_new(h, copy, h->init_len) : NULL;
  if (init == NULL) {
    fail(h, "out of memory");
    return;
  }
  init->internal = true;
  al_log(AL_LOG_INFO, "mcp http: session expired (404); re-initializing");
  post_start(h, init);
}

static void reinit_done(al_mcp_http_t *h) {
  json_t *n = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
                        "notifications/initialized");

  h->reiniting = false;
  al__mcp_http_send(h, n);
  json_decref(n);
  while (!al_list_empty(&h->queue) && !dead(h)) {
    queued_t *q = AL_CONTAINER_OF(h->queue.next, queued_t, node);
    post_t *p;

    al_list_remove(&q->node);
    p = post_new(h, q->body, q->len);
    al_free(q);
    if (p == NULL) {
      fail(h, "out of memory");
      return;
    }
    post_start(h, p);
  }
}

static void resume(al_mcp_http_t *h, post_t *p) {
  post_t *g;
  char *copy = p->body != NULL ? al_strndup(p->body, p->len) : NULL;

  g = post_new(h, copy, copy != NULL ? p->len : 0);
  if (g == NULL || (g->last_id = al_strdup(p->last_id)) == NULL) {
    if (g != NULL) {
      post_free(g);
    }
    fail(h, "out of memory");
    return;
  }
  g->is_get = true;
  g->resumes = p->resumes + 1;
  g->has_rid = p->has_rid;
  g->rid = p->rid;
  al_log(AL_LOG_INFO, "mcp http: event stream broke; resuming after id %s",
         p->last_id);
  post_start(h, g);
}

/* Opens the GET stream for server messages outside requests (list
 * changes, requests), resuming after last_id when given. */
static void listen_open(al_mcp_http_t *h, const char *last_id) {
  post_t *p = post_new(h, NULL, 0);

  if (p == NULL || (last_id != NULL && (p->last_id = al_strdup(last_id)) == NULL)) {
    if (p != NULL) {
      post_free(p);
    }
    return; /* optional: the requests' own streams still work */
  }
  p->is_listen = true;
  h->listening = true;
  h->listen_t0 = uv_now(h->o.loop);
  if (h->n_opens == MAX_PER_WINDOW ||
      (h->n_opens > 0 && h->n_opens >= h->o.backoff.per_window)) {
    h->opens_head = (h->opens_head + 1) % MAX_PER_WINDOW; /* drop oldest */
    h->n_opens--;
  }
  h->opens[(h->opens_head + h->n_opens) % MAX_PER_WINDOW] = h->listen_t0;
  h->n_opens++;
  post_start(h, p);
}

/* splitmix64 (the jitter needs no more). */
static uint64_t rng_next(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The server stream ended after `lived` ms: how long to wait before
 * opening it again, or false to leave it closed (given up). Counts short
 * streams, says when it degrades and when it gives up (on_notice). */
static bool listen_delay(al_mcp_http_t *h, uint64_t now, uint64_t lived,
                         uint64_t *delay) {
  const al_mcp_stream_backoff_t *b = &h->o.backoff;
  uint64_t d = 0;

  if (lived >= b->healthy_ms) {
    /* It stayed open: a proxy or the server cut a working stream. */
    h->listen_short = 0;
    h->listen_degraded = false;
  } else {
    uint32_t n = ++h->listen_short;
    uint32_t shift = n - 1 < 30 ? n - 1 : 30;

    if (n >= b->give_up) {
      h->listen_gave_up = true;
      notice(h,
             "the server stream ended %u times in a row within %llu ms of "
             "opening; it is not opened again (tool list changes the "
             "server announces on it are no longer seen)",
             n, (unsigned long long)b->healthy_ms);
      return false;
    }
    d = b->base_ms << shift;
    if (d > b->max_ms || (b->base_ms << shift) >> shift != b->base_ms) {
      d = b->max_ms;
    }
    /* Half to all of it: servers restarted together do not come back to
     * a stampede. */
    d = d / 2 + (d > 1 ? rng_next(&h->rng) % (d - d / 2 + 1) : d % 2);
  }
  if (h->retry_ms > d) {
    d = h->retry_ms; /* the server's own pace, not jittered below it */
  }
  /* At most per_window opens in any window_ms. */
  if (h->n_opens >= b->per_window) {
    uint64_t oldest = h->opens[h->opens_head];

    if (now - oldest < b->window_ms && oldest + b->window_ms - now > d) {
      d = oldest + b->window_ms - now;
    }
  }
  if (h->listen_short >= b->degrade_after && !h->listen_degraded) {
    h->listen_degraded = true;
    notice(h,
           "the server stream ended %u times in a row within %llu ms of "
           "opening; it is reopened with backoff (next in %llu ms)",
           h->listen_short, (unsigned long long)b->healthy_ms,
           (unsigned long long)d);
  }
  *delay = d;
  return true;
}

static void on_listen_timer(uv_timer_t *t) {
  al_mcp_http_t *h = AL_CONTAINER_OF(t, al_mcp_http_t, listen_timer);
  char *last = h->listen_last_id;

  h->listen_last_id = NULL;
  h->listening = false;
  if (!dead(h)) {
    listen_open(h, last);
  }
  al_free(last);
}

/* The GET stream ended: 405 means the server offers none; otherwise it is
 * opened again (after its last event id) if it delivered anything, so a
 * server that closes it at once cannot make us spin. */
static void listen_ended(al_mcp_http_t *h, post_t *p, int status, int http,
                         const al_http_error_t *err) {
  h->listening = false;
  if (http == 405 || (status != 0 && http >= 300)) {
    al_log(AL_LOG_DEBUG, "mcp http: no server stream (HTTP %d)", http);
    return;
  }
  if (p->sse && status == 0) {
    al_sse_finish(&p->parser);
  } else if (!p->sse && status == 0 && p->json.len > 0) {
    deliver(p, p->json.data, p->json.len);
  }
  /* Also after the whole-exchange timeout of a quiet stream. */
  if (!dead(h) && !p->dead &&
      (p->events > 0 || (err != NULL && err->kind == AL_HTTP_ERR_TIMEOUT))) {
    uint64_t now = uv_now(h->o.loop);
    uint64_t delay;

    if (!listen_delay(h, now, now - h->listen_t0, &delay) || dead(h)) {
      return;
    }
    al_free(h->listen_last_id);
    h->listen_last_id = p->last_id != NULL ? al_strdup(p->last_id) : NULL;
    h->listening = true; /* scheduled: a re-initialize opens no second */
    uv_timer_start(&h->listen_timer, on_listen_timer, delay, 0);
  }
}

static void on_complete(al_http_request_t *r, int status,
                        const al_http_error_t *err) {
  post_t *p = al_http_request_get_data(r);
  al_mcp_http_t *h = p->h;
  int http = err != NULL ? err->http_status : p->status;

  p->r = NULL;
  p->busy = true;
  if (p->is_delete) {
    p->busy = false;
    post_drop(p);
    if (h->closing) {
      al_http_client_close(h->client, on_client_closed);
    }
    return;
  }
  if (dead(h) || p->dead) {
    goto out;
  }
  if (p->is_listen) {
    listen_ended(h, p, status, http, err);
    goto out;
  }
  if (status != 0 && http == 404 && p->had_session && !p->is_get) {
    expired(h, p);
    goto out;
  }
  if (status != 0 && http != 0 && (http < 200 || http >= 300)) {
    char body[201];
    size_t i, n = err->body != NULL ? err->body_len : 0;

    /* The start of the body names the reason ("Unsupported protocol
     * version"); printable ASCII only, it ends up in events. */
    n = n < sizeof(body) - 1 ? n : sizeof(body) - 1;
    for (i = 0; i < n; i++) {
      char ch = err->body[i];

      body[i] = ch >= 0x20 && ch < 0x7f ? ch : ' ';
    }
    body[n] = '\0';
    fail(h, "answered HTTP %d%s%s%s%s", http, err->message[0] ? ": " : "",
         err->message, n > 0 ? "; body: " : "", body);
    goto out;
  }
  if (!p->sse && status == 0) {
    if (p->json.len > 0) {
      deliver(p, p->json.data, p->json.len);
    } else if (p->has_rid) {
      fail(h, "answered request %lld with an empty body", (long long)p->rid);
    }
    goto out;
  }
  if (p->sse && status == 0) {
    al_sse_finish(&p->parser);
  }
  if (dead(h) || p->dead || !p->has_rid || p->answered) {
    goto out;
  }
  /* The stream broke before the answer. */
  if (p->last_id != NULL && p->last_id[0] != '\0' &&
      p->resumes < MAX_RESUMES && (p->events > 0 || p->resumes == 0)) {
    resume(h, p);
  } else if (status != 0) {
    fail(h, "connection failed: %s", err->message);
  } else {
    fail(h, "ended the event stream of request %lld without an answer%s",
         (long long)p->rid,
         p->last_id != NULL ? "" : " (no event ids to resume from)");
  }
out:
  p->busy = false;
  post_drop(p);
}

static void post_start(al_mcp_http_t *h, post_t *p) {
  al_http_header_t hd[MAX_HEADERS + 6];
  al_http_request_options_t ro;
  size_t n = 0;
  int rc;

#define HDR(nm, val)                                                       \
  do {                                                                     \
    hd[n].name = (nm);                                                     \
    hd[n].name_len = strlen(nm);                                           \
    hd[n].value = (val);                                                   \
    hd[n].value_len = strlen(val);                                         \
    n++;                                                                   \
  } while (0)
  memcpy(hd, h->user, h->n_user * sizeof(hd[0]));
  n = h->n_user;
  al_http_request_options_init(&ro);
  ro.url = h->url;
  if (p->is_delete) {
    ro.method = "DELETE";
  } else if (p->is_get || p->is_listen) {
    ro.method = "GET";
    HDR("Accept", "text/event-stream");
    if (p->last_id != NULL) {
      HDR("Last-Event-ID", p->last_id);
    }
  } else {
    ro.method = "POST";
    HDR("Content-Type", "application/json");
    HDR("Accept", "application/json, text/event-stream");
    ro.body = p->body;
    ro.body_len = p->len;
  }
  p->gen = h->gen;
  p->had_session = h->session != NULL && !p->internal;
  if (p->had_session) {
    HDR("Mcp-Session-Id", h->session);
  }
  if (h->version != NULL && !p->internal) {
    HDR("MCP-Protocol-Version", h->version);
  }
#undef HDR
  ro.headers = hd;
  ro.n_headers = n;
  /* Streams may sit quiet during a long tool call: the call timeout of
   * mcp.c bounds them, not the byte stall timers. */
  ro.idle_timeout_ms = 0;
  ro.progress_timeout_ms = 0;
  ro.min_rate_bytes = 0;
  ro.total_timeout_ms =
      p->is_delete ? (int64_t)h->o.close_grace_ms : (int64_t)h->o.request_max_ms;
  ro.on_response = on_response;
  ro.on_data = on_data;
  ro.on_complete = on_complete;
  ro.data = p;
  al_list_insert_tail(&h->posts, &p->node);
  rc = al_http_request_start(h->client, &ro, &p->r);
  if (rc != 0) {
    post_drop(p);
    fail(h, "could not send a request: %s", al_strerror(rc));
  }
}

/* ---- API ---------------------------------------------------------------------- */

void al__mcp_http_send(al_mcp_http_t *h, const json_t *msg) {
  char *text;
  post_t *p;
  size_t n;
  bool initialized;

  if (dead(h)) {
    return;
  }
  text = json_dumps(msg, JSON_COMPACT);
  if (text == NULL) {
    fail(h, "out of memory");
    return;
  }
  n = strlen(text);
  if (h->reiniting) {
    queue_body(h, text, n, false);
    return;
  }
  if (strcmp(json_string_value(json_object_get(msg, "method")) != NULL
                 ? json_string_value(json_object_get(msg, "method"))
                 : "",
             "initialize") == 0) {
    /* Kept for a re-initialize; a new session starts with it. */
    al_free(h->init_body);
    h->init_body = al_strndup(text, n);
    h->init_len = n;
    al_free(h->session);
    h->session = NULL;
  }
  p = post_new(h, text, n);
  if (p == NULL) {
    fail(h, "out of memory");
    return;
  }
  initialized = p->initialized;
  post_start(h, p);
  if (initialized && !h->listening && !h->listen_gave_up && !dead(h)) {
    listen_open(h, NULL);
  }
}

void al__mcp_http_set_version(al_mcp_http_t *h, const char *v) {
  al_free(h->version);
  h->version = al_strdup(v);
}

const char *al__mcp_http_session(const al_mcp_http_t *h) { return h->session; }

static void free_all(al_mcp_http_t *h) {
  size_t i;

  while (!al_list_empty(&h->queue)) {
    queued_t *q = AL_CONTAINER_OF(h->queue.next, queued_t, node);

    al_list_remove(&q->node);
    al_free(q->body);
    al_free(q);
  }
  for (i = 0; h->user_mem != NULL && h->user_mem[i] != NULL; i++) {
    al_free(h->user_mem[i]);
  }
  al_free(h->user_mem);
  al_free(h->url);
  al_free(h->session);
  al_free(h->version);
  al_free(h->init_body);
  al_free(h->listen_last_id);
  al_free(h);
}

/* The last of the client's and the timer's close callbacks frees. */
static void close_step(al_mcp_http_t *h) {
  void (*cb)(void *) = h->close_cb;
  void *data = h->close_data;

  if (--h->closes_left > 0) {
    return;
  }
  free_all(h);
  if (cb != NULL) {
    cb(data);
  }
}

static void on_client_closed(al_http_client_t *c) {
  close_step(al_http_client_get_data(c));
}

static void on_timer_closed(uv_handle_t *t) {
  close_step(AL_CONTAINER_OF((uv_timer_t *)t, al_mcp_http_t, listen_timer));
}

static void backoff_defaults(al_mcp_stream_backoff_t *b) {
  b->base_ms = b->base_ms > 0 ? b->base_ms : AL_MCP_STREAM_BASE_MS;
  b->max_ms = b->max_ms > 0 ? b->max_ms : AL_MCP_STREAM_MAX_MS;
  b->healthy_ms = b->healthy_ms > 0 ? b->healthy_ms : AL_MCP_STREAM_HEALTHY_MS;
  b->window_ms = b->window_ms > 0 ? b->window_ms : AL_MCP_STREAM_WINDOW_MS;
  b->per_window = b->per_window > 0 ? b->per_window : AL_MCP_STREAM_PER_WINDOW;
  if (b->per_window > MAX_PER_WINDOW) {
    b->per_window = MAX_PER_WINDOW;
  }
  b->degrade_after =
      b->degrade_after > 0 ? b->degrade_after : AL_MCP_STREAM_DEGRADE_AFTER;
  b->give_up = b->give_up > 0 ? b->give_up : AL_MCP_STREAM_GIVE_UP;
}

int al__mcp_http_new(const al_mcp_http_options_t *o, al_mcp_http_t **out) {
  al_mcp_http_t *h = al_calloc(1, sizeof(*h));
  al_http_client_options_t co;
  size_t i, n = 0;
  int rc;

  *out = NULL;
  if (h == NULL) {
    return AL_ENOMEM;
  }
  h->o = *o;
  backoff_defaults(&h->o.backoff);
  h->rng = o->backoff.jitter_seed != 0 ? o->backoff.jitter_seed : uv_hrtime();
  if (h->o.body_max == 0) {
    h->o.body_max = 16u << 20;
  }
  al_list_init(&h->posts);
  al_list_init(&h->queue);
  for (i = 0; o->headers != NULL && o->headers[i] != NULL; i++) {
    n++;
  }
  h->url = al_strdup(o->url);
  h->user_mem = al_calloc(n + 1, sizeof(*h->user_mem));
  if (h->url == NULL || h->user_mem == NULL || n > MAX_HEADERS) {
    free_all(h);
    return n > MAX_HEADERS ? AL_EINVAL : AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    char *colon;

    if ((h->user_mem[i] = al_strdup(o->headers[i])) == NULL) {
      free_all(h);
      return AL_ENOMEM;
    }
    colon = strchr(h->user_mem[i], ':');
    if (colon == NULL) {
      free_all(h);
      return AL_EINVAL;
    }
    *colon = '\0';
    h->user[i].name = h->user_mem[i];
    h->user[i].name_len = strlen(h->user_mem[i]);
    colon++;
    while (*colon == ' ') {
      colon++;
    }
    h->user[i].value = colon;
    h->user[i].value_len = strlen(colon);
  }
  h->n_user = n;
  al_http_client_options_init(&co);
  co.max_error_body_bytes = 4096;
  rc = al_http_client_new(o->loop, &co, &h->client);
  if (rc != 0) {
    free_all(h);
    return rc;
  }
  al_http_client_set_data(h->client, h);
  uv_timer_init(o->loop, &h->listen_timer);
  *out = h;
  return 0;
}

void al__mcp_http_close(al_mcp_http_t *h, void (*cb)(void *data), void *data) {
  post_t *d;

  if (h->closing) {
    return;
  }
  h->closing = true;
  h->close_cb = cb;
  h->close_data = data;
  h->closes_left = 2;
  uv_close((uv_handle_t *)&h->listen_timer, on_timer_closed);
  while (!al_list_empty(&h->posts)) {
    post_t *p = AL_CONTAINER_OF(h->posts.next, post_t, node);

    if (p->r != NULL) {
      al_http_request_cancel(p->r);
      p->r = NULL;
    }
    post_drop(p);
  }
  /* End the session on the server; the client closes when that is done
   * (or refused, or timed out). */
  if (h->session != NULL && (d = post_new(h, NULL, 0)) != NULL) {
    d->is_delete = true;
    post_start(h, d);
    if (!al_list_empty(&h->posts)) {
      return;
    }
  }
  al_http_client_close(h->client, on_client_closed);
}
