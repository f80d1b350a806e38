/* Daemon client layer: accepted socket connections, their NDJSON input
 * and their bounded output (daemon.h for the whole picture).
 *
 * This layer knows nothing of sessions or methods: it calls up only
 * through al_dclients_cbs_t (a complete line, the output queue drained, a
 * client closing, a handle opened or closed), so no include circle
 * appears. The upper layers may read and keep their own state in the
 * fields marked "owner". */
#ifndef AL_DAEMON_CLIENTS_H
#define AL_DAEMON_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "common/common.h"
#include "rpc/rpc.h"
#include "session/session.h"

#define AL_DCLIENTS_READ_BUF (64 * 1024)

typedef struct al_dclient_s al_dclient_t;
typedef struct al_dclients_s al_dclients_t;

typedef struct {
  /* One complete request line (or too_long: a line past max_line was
   * skipped). The client may be closing on return. */
  void (*on_line)(al_dclient_t *c, const char *line, size_t len,
                  bool too_long);
  /* The client's output queue fell to half of max_queue: replays go on. */
  void (*on_drained)(al_dclient_t *c);
  /* The peer passed its checks and reads start. */
  void (*on_accepted)(al_dclient_t *c);
  /* c is closing (already out of the list): drop every reference to it;
   * nothing may be written to it any more. */
  void (*on_closing)(al_dclient_t *c);
  /* A handle opened (+1) or finished closing (-1): the owner counts what
   * is still open for its exit. */
  void (*on_handle)(void *data, int delta);
  /* false refuses a new peer (shutting down). */
  bool (*admit)(void *data);
} al_dclients_cbs_t;

struct al_dclients_s {
  uv_loop_t *loop;
  size_t max_line;
  size_t max_queue;
  size_t max_clients;
  al_dclients_cbs_t cb;
  void *data;
  al_list_t clients; /* al_dclient_t by node */
  size_t n;
  uint64_t next_id;
  uint64_t refused;
  /* One read buffer for every client: read_cb consumes it at once (the
   * framer copies only an incomplete tail). */
  char rbuf[AL_DCLIENTS_READ_BUF];
  bool rbuf_busy;
};

struct al_dclient_s {
  al_list_t node;
  al_dclients_t *srv;
  uv_pipe_t pipe;
  uv_shutdown_t sreq;
  al_rpc_framer_t framer;
  char id[96]; /* "c<n>" or "c<n> (name)" */
  uint64_t n;
  bool closing;
  /* owner: */
  al_list_t subs;      /* the session layer's subscriptions */
  bool initialized;    /* the RPC layer saw `initialize` */
  bool over;           /* output queue above the soft bound ... */
  uint64_t over_since; /* ... since this uv_now */
};

void al__dclients_init(al_dclients_t *cs, uv_loop_t *loop, size_t max_line,
                       size_t max_queue, size_t max_clients,
                       const al_dclients_cbs_t *cb, void *data);
/* The listening socket's connection callback (server->data = cs). */
void al__dclients_on_connection(uv_stream_t *server, int status);
/* Flush what is queued, then EOF to every client (shutdown). */
void al__dclients_shutdown(al_dclients_t *cs);
/* Closes every client at once. */
void al__dclients_close_all(al_dclients_t *cs);

/* Bytes libuv could not write yet. */
size_t al__dclient_queued(const al_dclient_t *c);
/* Sends msg (consumed) as one line. */
void al__dclient_send(al_dclient_t *c, json_t *msg);
/* Sends an event line (a ref is taken) as a notification: three iovecs,
 * nothing re-encoded. */
void al__dclient_event(al_dclient_t *c, al_blob_t *line);
void al__dclient_close(al_dclient_t *c);

#endif
