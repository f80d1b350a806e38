/* One Redis connection on a uv loop: hiredis async on a uv_poll_t.
 *
 * Owns at most one redisAsyncContext at a time (ac, NULL while down) and a
 * reconnect timer. hiredis frees a context itself after a failed connect or
 * a disconnect, and runs every pending command's callback with a NULL reply
 * first; each command carries a small request so that those callbacks, and
 * any after close, are swallowed here instead of reaching the caller.
 *
 * The event hooks are ours, shaped like hiredis' adapters/libuv.h, because
 * the one Debian ships (0.14) drops a poll error: libuv stops the handle and
 * reports UV_EBADF when the peer resets, the adapter returns, and the
 * connection hangs with no event and no disconnect (seen when redis-server
 * is killed while a command is being written). Here an error is handed to
 * hiredis' read or write handler, which sees the failure and disconnects.
 * Each context has its own poll (closing while the next one connects); r is
 * freed when its timer and every poll are closed. */
#include "fleet/fleet.h"

#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

struct al_fleet_redis_s {
  uv_loop_t *loop;
  redisAsyncContext *ac;
  uv_timer_t timer; /* reconnect back-off */
  char *unix_path;
  char *host;
  int port;
  uint64_t backoff_min_ms;
  uint64_t backoff_max_ms;
  uint64_t backoff_ms; /* next delay */
  bool up;
  bool up_pending; /* connected; on_state(up) waits for the timer */
  bool ping_wait;  /* connected, the server loading: PING again later */
  bool closing;
  unsigned reconnects;
  char last_error[128]; /* why the last connect failed */
  unsigned handles;     /* the timer and the polls not yet closed */
  al_fleet_redis_state_cb on_state;
  al_fleet_redis_close_cb close_cb;
  void *data;
};

typedef struct {
  al_fleet_redis_t *r;
  al_fleet_reply_cb cb;
  al_fleet_release_cb release; /* the data of a command dropped by close */
  void *data;
} request_t;

static void schedule_reconnect(al_fleet_redis_t *r);
static void on_timer(uv_timer_t *t);
static void handle_closed(al_fleet_redis_t *r);

/* ---- hiredis event hooks ------------------------------------------------ */

typedef struct {
  uv_poll_t poll;
  redisAsyncContext *ac; /* NULL once hiredis cleaned up */
  al_fleet_redis_t *r;
  int events;
} ev_t;

static void ev_poll(uv_poll_t *h, int status, int events) {
  ev_t *ev = AL_CONTAINER_OF(h, ev_t, poll);

  /* An error (libuv has stopped the handle): let hiredis find it out on
   * the operations it waits for. */
  if (status != 0) {
    events = ev->events;
  }
  if (ev->ac != NULL && (events & UV_READABLE)) {
    redisAsyncHandleRead(ev->ac);
  }
  if (ev->ac != NULL && (events & UV_WRITABLE)) {
    redisAsyncHandleWrite(ev->ac);
  }
}

static void ev_update(ev_t *ev, int add, int del) {
  ev->events = (ev->events | add) & ~del;
  if (ev->events != 0) {
    uv_poll_start(&ev->poll, ev->events, ev_poll);
  } else {
    uv_poll_stop(&ev->poll);
  }
}

static void ev_add_read(void *p) {
  ev_update(p, UV_READABLE, 0);
}

static void ev_del_read(void *p) {
  ev_update(p, 0, UV_READABLE);
}

static void ev_add_write(void *p) {
  ev_update(p, UV_WRITABLE, 0);
}

static void ev_del_write(void *p) {
  ev_update(p, 0, UV_WRITABLE);
}

static void ev_closed(uv_handle_t *h) {
  ev_t *ev = AL_CONTAINER_OF((uv_poll_t *)h, ev_t, poll);
  al_fleet_redis_t *r = ev->r;

  al_free(ev);
  handle_closed(r);
}

static void ev_cleanup(void *p) {
  ev_t *ev = p;

  if (ev->ac == NULL) {
    return; /* hiredis may clean up twice (disconnect, then free) */
  }
  ev->ac = NULL;
  uv_close((uv_handle_t *)&ev->poll, ev_closed);
}

static int ev_attach(al_fleet_redis_t *r, redisAsyncContext *ac) {
  ev_t *ev = al_calloc(1, sizeof(*ev));

  if (ev == NULL) {
    return UV_ENOMEM;
  }
  if (uv_poll_init(r->loop, &ev->poll, ac->c.fd) != 0) {
    al_free(ev);
    return UV_EBADF;
  }
  ev->ac = ac;
  ev->r = r;
  r->handles++;
  ac->ev.data = ev;
  ac->ev.addRead = ev_add_read;
  ac->ev.delRead = ev_del_read;
  ac->ev.addWrite = ev_add_write;
  ac->ev.delWrite = ev_del_write;
  ac->ev.cleanup = ev_cleanup;
  return 0;
}

void al_fleet_redis_options_init(al_fleet_redis_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->backoff_min_ms = 100;
  o->backoff_max_ms = 5000;
}

static void set_state(al_fleet_redis_t *r, bool up, int status) {
  if (r->up == up) {
    return;
  }
  r->up = up;
  if (r->on_state != NULL && !r->closing) {
    r->on_state(r, up, status);
  }
}

static void send_ready_ping(al_fleet_redis_t *r);

/* The server is ready when it answers PING: one restarted with an AOF (or
 * a replica syncing) accepts connections and answers LOADING to
 * everything until its data is in, and an embedder told "up" would see
 * its first commands fail. So up waits for a PONG, asked again after the
 * back-off while the server refuses. */
static void on_ready_ping(redisAsyncContext *ac, void *reply_, void *priv) {
  al_fleet_redis_t *r = priv;
  redisReply *reply = reply_;

  (void)ac;
  if (r->closing || reply == NULL) {
    return; /* closed, or dropped: on_disconnect reconnects */
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    snprintf(r->last_error, sizeof(r->last_error), "%s", reply->str);
    r->ping_wait = true;
    uv_timer_start(&r->timer, on_timer, r->backoff_ms, 0);
    r->backoff_ms = AL_MIN(r->backoff_ms * 2, r->backoff_max_ms);
    return;
  }
  /* hiredis still uses ac after this returns: the embedder hears of it
   * from the timer, on a later pass. */
  r->backoff_ms = r->backoff_min_ms;
  r->up_pending = true;
  uv_timer_start(&r->timer, on_timer, 0, 0);
}

static void send_ready_ping(al_fleet_redis_t *r) {
  if (redisAsyncCommand(r->ac, on_ready_ping, r, "PING") != REDIS_OK) {
    /* The context is going away: on_disconnect reconnects. */
    snprintf(r->last_error, sizeof(r->last_error), "cannot send PING");
  }
}

static void on_connect(const redisAsyncContext *ac, int status) {
  al_fleet_redis_t *r = ac->data;

  if (r == NULL || r->closing) {
    return;
  }
  if (status != REDIS_OK) {
    snprintf(r->last_error, sizeof(r->last_error), "%s", ac->errstr);
    /* hiredis frees ac after this returns. */
    r->ac = NULL;
    schedule_reconnect(r);
    return;
  }
  send_ready_ping(r);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  al_fleet_redis_t *r = ac->data;

  if (r == NULL || r->closing) {
    return;
  }
  r->ac = NULL;
  r->up_pending = false;
  r->ping_wait = false;
  schedule_reconnect(r);
  set_state(r, false, UV_ECONNRESET);
}

/* Starts one connect; a failure that hiredis reports at once is retried
 * like one reported later. */
static void connect_now(al_fleet_redis_t *r) {
  redisAsyncContext *ac;

  if (r->unix_path != NULL) {
    ac = redisAsyncConnectUnix(r->unix_path);
  } else {
    ac = redisAsyncConnect(r->host, r->port);
  }
  if (ac == NULL || ac->err != 0 || ev_attach(r, ac) != 0) {
    snprintf(r->last_error, sizeof(r->last_error), "%s",
             ac != NULL && ac->err != 0 ? ac->errstr : "cannot connect");
    if (ac != NULL) {
      redisAsyncFree(ac);
    }
    schedule_reconnect(r);
    return;
  }
  ac->data = r;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  r->ac = ac;
}

static void on_timer(uv_timer_t *t) {
  al_fleet_redis_t *r = AL_CONTAINER_OF(t, al_fleet_redis_t, timer);

  if (r->closing) {
    return;
  }
  if (r->up_pending) {
    r->up_pending = false;
    set_state(r, true, 0);
    return;
  }
  if (r->ping_wait) {
    r->ping_wait = false;
    if (r->ac != NULL) {
      send_ready_ping(r);
    }
    return;
  }
  r->reconnects++;
  connect_now(r);
}

static void schedule_reconnect(al_fleet_redis_t *r) {
  uint64_t delay = r->backoff_ms;

  r->backoff_ms = AL_MIN(r->backoff_ms * 2, r->backoff_max_ms);
  uv_timer_start(&r->timer, on_timer, delay, 0);
}

int al_fleet_redis_new(uv_loop_t *loop, const al_fleet_redis_options_t *o,
                       al_fleet_redis_t **out) {
  al_fleet_redis_t *r;
  struct in6_addr a6;

  *out = NULL;
  if (o->unix_path == NULL) {
    if (o->host == NULL || o->port <= 0 || o->port > 65535) {
      return AL_EINVAL;
    }
    if (inet_pton(AF_INET, o->host, &a6) != 1 &&
        inet_pton(AF_INET6, o->host, &a6) != 1) {
      return AL_ECONFIG;
    }
  }
  r = al_calloc(1, sizeof(*r));
  if (r == NULL) {
    return UV_ENOMEM;
  }
  r->loop = loop;
  r->unix_path = o->unix_path ? al_strdup(o->unix_path) : NULL;
  r->host = o->host ? al_strdup(o->host) : NULL;
  if ((o->unix_path && !r->unix_path) || (o->host && !r->host)) {
    al_free(r->unix_path);
    al_free(r->host);
    al_free(r);
    return UV_ENOMEM;
  }
  r->port = o->port;
  r->backoff_min_ms = o->backoff_min_ms ? o->backoff_min_ms : 1;
  r->backoff_max_ms = AL_MAX(o->backoff_max_ms, r->backoff_min_ms);
  r->backoff_ms = r->backoff_min_ms;
  r->on_state = o->on_state;
  r->data = o->data;
  uv_timer_init(loop, &r->timer);
  r->handles = 1;
  connect_now(r);
  *out = r;
  return 0;
}

bool al_fleet_redis_is_up(const al_fleet_redis_t *r) {
  return r->up && !r->closing;
}

void *al_fleet_redis_data(const al_fleet_redis_t *r) {
  return r->data;
}

unsigned al_fleet_redis_reconnects(const al_fleet_redis_t *r) {
  return r->reconnects;
}

const char *al_fleet_redis_last_error(const al_fleet_redis_t *r) {
  return r->last_error;
}

static void on_reply(redisAsyncContext *ac, void *reply_, void *priv) {
  request_t *req = priv;
  al_fleet_redis_t *r = req->r;
  redisReply *reply = reply_;
  int status = 0;

  (void)ac;
  if (!r->closing) {
    if (reply == NULL) {
      status = UV_ECONNRESET;
    } else if (reply->type == REDIS_REPLY_ERROR) {
      status = AL_EREDIS;
    }
    req->cb(r, status, reply, req->data);
  } else if (req->release != NULL) {
    req->release(req->data); /* swallowed by close: its data is freed */
  }
  al_free(req);
}

int al_fleet_redis_command(al_fleet_redis_t *r, al_fleet_reply_cb cb,
                           void *data, int argc, const char **argv,
                           const size_t *argvlen) {
  return al_fleet_redis_command_rel(r, cb, NULL, data, argc, argv, argvlen);
}

int al_fleet_redis_command_rel(al_fleet_redis_t *r, al_fleet_reply_cb cb,
                               al_fleet_release_cb release, void *data,
                               int argc, const char **argv,
                               const size_t *argvlen) {
  request_t *req;

  if (r->closing) {
    return AL_ECLOSING;
  }
  if (!r->up || r->up_pending || r->ac == NULL) {
    return UV_ENOTCONN;
  }
  req = al_malloc(sizeof(*req));
  if (req == NULL) {
    return UV_ENOMEM;
  }
  req->r = r;
  req->cb = cb;
  req->release = release;
  req->data = data;
  if (redisAsyncCommandArgv(r->ac, on_reply, req, argc, argv, argvlen) !=
      REDIS_OK) {
    al_free(req);
    return UV_ENOTCONN;
  }
  return 0;
}

static void handle_closed(al_fleet_redis_t *r) {
  if (--r->handles > 0 || !r->closing) {
    return;
  }
  if (r->close_cb != NULL) {
    r->close_cb(r);
  }
  al_free(r->unix_path);
  al_free(r->host);
  al_free(r);
}

static void on_timer_close(uv_handle_t *h) {
  handle_closed(AL_CONTAINER_OF(h, al_fleet_redis_t, timer));
}

void al_fleet_redis_close(al_fleet_redis_t *r, al_fleet_redis_close_cb cb) {
  redisAsyncContext *ac = r->ac;

  assert(!r->closing);
  r->closing = true;
  r->close_cb = cb;
  r->ac = NULL;
  if (ac != NULL) {
    /* Pending callbacks run with NULL replies (now, or when hiredis leaves
     * the callback it is in) and see closing; its poll is closed then. */
    redisAsyncFree(ac);
  }
  uv_close((uv_handle_t *)&r->timer, on_timer_close);
}

/* ---- replies ---------------------------------------------------------------- */

bool al__fleet_is_str(const redisReply *r) {
  return r != NULL &&
         (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

int al__fleet_stream_entries(const redisReply *reply,
                             const redisReply **entries) {
  const redisReply *list;

  *entries = NULL;
  if (reply->type == REDIS_REPLY_NIL) {
    return 0;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
      reply->element[0]->type != REDIS_REPLY_ARRAY ||
      reply->element[0]->elements != 2 ||
      reply->element[0]->element[1]->type != REDIS_REPLY_ARRAY) {
    return AL_EPROTO;
  }
  list = reply->element[0]->element[1];
  *entries = list->elements > 0 ? list : NULL;
  return 0;
}

const char *al__fleet_entry(const redisReply *e, const char *name,
                            const char **value) {
  const redisReply *f;
  size_t j;

  if (value != NULL) {
    *value = NULL;
  }
  if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
      !al__fleet_is_str(e->element[0]) ||
      e->element[1]->type != REDIS_REPLY_ARRAY) {
    return NULL;
  }
  f = e->element[1];
  for (j = 0; name != NULL && j + 1 < f->elements; j += 2) {
    if (al__fleet_is_str(f->element[j]) &&
        al__fleet_is_str(f->element[j + 1]) &&
        strcmp(f->element[j]->str, name) == 0) {
      *value = f->element[j + 1]->str;
      break;
    }
  }
  return e->element[0]->str;
}
