/* Daemon client layer (clients.h): accept with the peer check, read into
 * the framer, write with a bounded queue.
 *
 * Invariants:
 *  - A client's output is bounded by the bytes libuv could not write yet
 *    (write_queue_size); the session layer ends subscriptions past its
 *    soft bounds, and this layer cuts off a client whose queue still grows
 *    past 8 x max_queue. The reactor never waits for a client.
 *  - Every handle opened or closed is reported through on_handle, so the
 *    owner can tell when the last one is gone. */
#include "daemon/clients.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

static const char EV_PREFIX[] = AL_RPC_EVENT_PREFIX;
static const char EV_SUFFIX[] = AL_RPC_EVENT_SUFFIX;

typedef struct {
  uv_write_t req;
  al_blob_t *blob;
  char *owned;
} wreq_t;

void al__dclients_init(al_dclients_t *cs, uv_loop_t *loop, size_t max_line,
                       size_t max_queue, size_t max_clients,
                       const al_dclients_cbs_t *cb, void *data) {
  cs->loop = loop;
  cs->max_line = max_line;
  cs->max_queue = max_queue;
  cs->max_clients = max_clients;
  cs->cb = *cb;
  cs->data = data;
  al_list_init(&cs->clients);
  cs->n = 0;
  cs->next_id = 0;
  cs->refused = 0;
  cs->rbuf_busy = false;
}

/* ---- writing to clients ----------------------------------------------------- */

size_t al__dclient_queued(const al_dclient_t *c) {
  return c->pipe.write_queue_size;
}

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = AL_CONTAINER_OF(req, wreq_t, req);
  al_dclient_t *c = req->data;

  al__blob_unref(w->blob);
  al_free(w->owned);
  al_free(w);
  if (status < 0 && status != UV_ECANCELED && !c->closing) {
    al__dclient_close(c);
    return;
  }
  if (!c->closing && al__dclient_queued(c) <= c->srv->max_queue / 2) {
    c->srv->cb.on_drained(c);
  }
}

/* Hard bound: responses and notices are never dropped, but a client whose
 * queue still grows past twice the limit is cut off. */
static bool over_hard(al_dclient_t *c) {
  if (al__dclient_queued(c) > 8 * c->srv->max_queue) {
    al_log(AL_LOG_WARN, "client %s: output queue over %zu bytes, "
                        "disconnecting", c->id, 8 * c->srv->max_queue);
    al__dclient_close(c);
    return true;
  }
  return false;
}

static void client_write_owned(al_dclient_t *c, char *buf, size_t len) {
  wreq_t *w;
  uv_buf_t b;

  if (c->closing || buf == NULL) {
    al_free(buf);
    return;
  }
  w = al_calloc(1, sizeof(*w));
  if (w == NULL) {
    al_free(buf);
    al__dclient_close(c);
    return;
  }
  w->owned = buf;
  w->req.data = c;
  b = uv_buf_init(buf, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write) != 0) {
    al_free(buf);
    al_free(w);
    al__dclient_close(c);
    return;
  }
  over_hard(c);
}

void al__dclient_send(al_dclient_t *c, json_t *msg) {
  size_t len = 0;
  char *s = msg != NULL ? al_rpc_dump_line_alloc(msg, &len) : NULL;

  json_decref(msg);
  if (s == NULL) {
    al_log(AL_LOG_ERROR, "client %s: out of memory building a message",
           c->id);
    al__dclient_close(c);
    return;
  }
  client_write_owned(c, s, len);
}

void al__dclient_event(al_dclient_t *c, al_blob_t *line) {
  wreq_t *w;
  uv_buf_t b[3];

  if (c->closing) {
    return;
  }
  w = al_calloc(1, sizeof(*w));
  if (w == NULL) {
    al__dclient_close(c);
    return;
  }
  w->blob = al__blob_ref(line);
  w->req.data = c;
  b[0] = uv_buf_init((char *)EV_PREFIX, sizeof(EV_PREFIX) - 1);
  b[1] = uv_buf_init(line->data, (unsigned)(line->len - 1));
  b[2] = uv_buf_init((char *)EV_SUFFIX, sizeof(EV_SUFFIX) - 1);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, b, 3, on_write) != 0) {
    al__blob_unref(w->blob);
    al_free(w);
    al__dclient_close(c);
  }
}

/* ---- reading ------------------------------------------------------------------ */

static bool on_line(al_rpc_framer_t *f, const char *line, size_t len,
                    bool too_long, void *data) {
  al_dclient_t *c = data;

  (void)f;
  c->srv->cb.on_line(c, line, len, too_long);
  return !c->closing;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  al_dclient_t *c = h->data;
  al_dclients_t *cs = c->srv;

  (void)hint;
  if (cs->rbuf_busy) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  cs->rbuf_busy = true;
  buf->base = cs->rbuf;
  buf->len = sizeof(cs->rbuf);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  al_dclient_t *c = st->data;
  al_dclients_t *cs = c->srv;

  if (buf->base == cs->rbuf) {
    cs->rbuf_busy = false;
  }
  if (n < 0) {
    al__dclient_close(c);
    return;
  }
  if (n > 0 && al_rpc_framer_feed(&c->framer, buf->base, (size_t)n, on_line,
                                  c) == AL_ENOMEM) {
    al__dclient_close(c);
  }
}

/* ---- lifecycle ---------------------------------------------------------------- */

static void on_client_closed(uv_handle_t *h) {
  al_dclient_t *c = h->data;
  al_dclients_t *cs = c->srv;

  al_rpc_framer_free(&c->framer);
  al_free(c);
  cs->cb.on_handle(cs->data, -1);
}

void al__dclient_close(al_dclient_t *c) {
  al_dclients_t *cs = c->srv;

  if (c->closing) {
    return;
  }
  c->closing = true;
  al_list_remove(&c->node);
  cs->n--;
  cs->cb.on_closing(c);
  uv_close((uv_handle_t *)&c->pipe, on_client_closed);
}

static void on_client_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  al__dclient_close(req->data);
}

static bool peer_ok(uv_pipe_t *p) {
  uv_os_fd_t fd;
  struct ucred cr;
  socklen_t len = sizeof(cr);

  if (uv_fileno((uv_handle_t *)p, &fd) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
    return false;
  }
  return cr.uid == geteuid();
}

static void on_refused_closed(uv_handle_t *h) {
  al_dclient_t *c = h->data;
  al_dclients_t *cs = c->srv;

  al_free(c);
  cs->cb.on_handle(cs->data, -1);
}

void al__dclients_on_connection(uv_stream_t *server, int status) {
  al_dclients_t *cs = server->data;
  al_dclient_t *c;

  if (status < 0) {
    al_log(AL_LOG_WARN, "accept: %s", uv_strerror(status));
    return;
  }
  c = al_calloc(1, sizeof(*c));
  if (c == NULL) {
    return;
  }
  if (uv_pipe_init(cs->loop, &c->pipe, 0) != 0) {
    al_free(c);
    return;
  }
  c->srv = cs;
  c->pipe.data = c;
  cs->cb.on_handle(cs->data, +1);
  if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0 || !peer_ok(&c->pipe)) {
    /* Another uid (or no credentials): closed before a byte is read or
     * written (RELIABILITY G2). */
    cs->refused++;
    al_log(AL_LOG_INFO, "connection refused: not our uid");
    c->closing = true;
    uv_close((uv_handle_t *)&c->pipe, on_refused_closed);
    return;
  }
  if (!cs->cb.admit(cs->data) || cs->n >= cs->max_clients) {
    /* Our own user's client, turned away: it is told why (issue 22:
     * every connection gets an answer or a typed error), in one line
     * the socket takes at once (a fresh socket's buffer holds it; if
     * not, it gets the bare close as before). */
    const char *why = cs->n >= cs->max_clients ? "too many clients"
                                               : "the daemon is shutting down";
    json_t *e = al_rpc_error_new(json_null(), AL_RPC_OVERLOADED, why, NULL);
    size_t n = 0;
    char *line = e != NULL ? al_rpc_dump_line_alloc(e, &n) : NULL;

    json_decref(e);
    cs->refused++;
    al_log(AL_LOG_INFO, "connection refused: %s", why);
    if (line != NULL) {
      uv_buf_t b = uv_buf_init(line, (unsigned int)n);

      (void)uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
      al_free(line);
    }
    c->closing = true;
    uv_close((uv_handle_t *)&c->pipe, on_refused_closed);
    return;
  }
  c->n = ++cs->next_id;
  snprintf(c->id, sizeof(c->id), "c%llu", (unsigned long long)c->n);
  al_list_init(&c->subs);
  al_rpc_framer_init(&c->framer, cs->max_line);
  al_list_insert_tail(&cs->clients, &c->node);
  cs->n++;
  al_log(AL_LOG_DEBUG, "client %s accepted", c->id);
  cs->cb.on_accepted(c);
  if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) != 0) {
    al__dclient_close(c);
  }
}

void al__dclients_shutdown(al_dclients_t *cs) {
  al_list_t *pos, *next;

  for (pos = cs->clients.next; pos != &cs->clients; pos = next) {
    al_dclient_t *c = AL_CONTAINER_OF(pos, al_dclient_t, node);

    next = pos->next;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->pipe, on_client_shutdown) !=
        0) {
      al__dclient_close(c);
    }
  }
}

void al__dclients_close_all(al_dclients_t *cs) {
  while (!al_list_empty(&cs->clients)) {
    al__dclient_close(AL_CONTAINER_OF(cs->clients.next, al_dclient_t, node));
  }
}
