/* One Redis connection on a uv loop: hiredis async + its libuv adapter.
 *
 * Owns at most one redisAsyncContext at a time (ac, NULL while down) and a
 * reconnect timer. hiredis frees a context itself after a failed connect or
 * a disconnect, and runs every pending command's callback with a NULL reply
 * first; each command carries a small request so that those callbacks, and
 * any after close, are swallowed here instead of reaching the caller. The
 * adapter closes its own poll handle; r is freed in the timer's close
 * callback, the last handle it owns. */
#include "fleet/fleet.h"

#include <arpa/inet.h>
#include <assert.h>

#include <hiredis/adapters/libuv.h>
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
  bool closing;
  unsigned reconnects;
  al_fleet_redis_state_cb on_state;
  al_fleet_redis_close_cb close_cb;
  void *data;
};

typedef struct {
  al_fleet_redis_t *r;
  al_fleet_reply_cb cb;
  void *data;
} request_t;

static void schedule_reconnect(al_fleet_redis_t *r);
static void on_timer(uv_timer_t *t);

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

static void on_connect(const redisAsyncContext *ac, int status) {
  al_fleet_redis_t *r = ac->data;

  if (r == NULL || r->closing) {
    return;
  }
  if (status != REDIS_OK) {
    /* hiredis frees ac after this returns. */
    r->ac = NULL;
    schedule_reconnect(r);
    return;
  }
  /* hiredis still uses ac after this returns, so the embedder (who may
   * close r in on_state) hears of it from the timer, on a later pass. */
  r->backoff_ms = r->backoff_min_ms;
  r->up_pending = true;
  uv_timer_start(&r->timer, on_timer, 0, 0);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  al_fleet_redis_t *r = ac->data;

  if (r == NULL || r->closing) {
    return;
  }
  r->ac = NULL;
  r->up_pending = false;
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
  if (ac == NULL || ac->err != 0 || redisLibuvAttach(ac, r->loop) != REDIS_OK) {
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
  }
  al_free(req);
}

int al_fleet_redis_command(al_fleet_redis_t *r, al_fleet_reply_cb cb,
                           void *data, int argc, const char **argv,
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
  req->data = data;
  if (redisAsyncCommandArgv(r->ac, on_reply, req, argc, argv, argvlen) !=
      REDIS_OK) {
    al_free(req);
    return UV_ENOTCONN;
  }
  return 0;
}

static void on_timer_close(uv_handle_t *h) {
  al_fleet_redis_t *r = AL_CONTAINER_OF(h, al_fleet_redis_t, timer);

  if (r->close_cb != NULL) {
    r->close_cb(r);
  }
  al_free(r->unix_path);
  al_free(r->host);
  al_free(r);
}

void al_fleet_redis_close(al_fleet_redis_t *r, al_fleet_redis_close_cb cb) {
  redisAsyncContext *ac = r->ac;

  assert(!r->closing);
  r->closing = true;
  r->close_cb = cb;
  r->ac = NULL;
  if (ac != NULL) {
    /* Pending callbacks run with NULL replies (now, or when hiredis leaves
     * the callback it is in) and see closing; the adapter closes its poll
     * handle before the timer's close below completes. */
    redisAsyncFree(ac);
  }
  uv_close((uv_handle_t *)&r->timer, on_timer_close);
}
