/* The front end's connection to agentloopd (conn.c): connect or start the
 * daemon, initialize, requests with result callbacks, notifications. */
#ifndef AL_CLIENT_CONN_H
#define AL_CLIENT_CONN_H

#include <limits.h>
#include <stdbool.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "common/common.h"
#include "rpc/rpc.h"

/* Exit code when the daemon cannot be reached (CONVENTIONS 7.5). */
#define AL_EXIT_UNAVAILABLE 69

typedef struct al__conn_s al__conn_t;

/* The connection is usable (status 0) or could not be made (status < 0,
 * c->why says why). Called once. */
typedef void (*al__conn_ready_cb)(al__conn_t *c, int status);
/* A response: exactly one of result and error is non-NULL (borrowed). */
typedef void (*al__conn_result_cb)(al__conn_t *c, json_t *result,
                                   json_t *error, void *data);
/* A notification (borrowed method and params). */
typedef void (*al__conn_notify_cb)(al__conn_t *c, const char *method,
                                   json_t *params);
/* The daemon closed the connection or it broke (status: the read error). */
typedef void (*al__conn_lost_cb)(al__conn_t *c, int status);
typedef void (*al__conn_close_cb)(al__conn_t *c);

struct al__conn_s {
  uv_loop_t *loop;
  uv_pipe_t pipe;
  uv_timer_t timer;
  uv_connect_t connect_req;
  bool pipe_open;
  bool pipe_closing;
  bool closing;
  int open_handles;
  bool start_daemon;
  bool spawned;
  int daemon_pid;       /* the daemon we started, 0 when none */
  char daemon_exe[PATH_MAX];
  uint64_t deadline;
  int last_error;
  char path[128];       /* the socket */
  char why[512];        /* the reason of a failure */
  al_rpc_framer_t framer;
  al_list_t pending;
  json_int_t next_id;
  json_t *init_result;  /* initialize's result once ready */
  char rbuf[65536];
  al__conn_ready_cb ready_cb;
  al__conn_notify_cb notify_cb;
  al__conn_lost_cb lost_cb;
  al__conn_close_cb close_cb;
  void *data;           /* the owner's */
};

/* Starts connecting (and, with start_daemon, starting agentloopd when
 * nobody listens). ready_cb runs once, later. Returns an error (and no
 * callback runs; the conn must still be closed) when the socket path is
 * unusable. notify_cb, lost_cb and data may be set before or after. */
int al__conn_open(al__conn_t *c, uv_loop_t *loop, bool start_daemon,
                  al__conn_ready_cb ready_cb);
/* Sends a request; params_new is stolen (NULL: {}). cb (may be NULL) runs
 * with the response, never after al__conn_close. */
int al__conn_call(al__conn_t *c, const char *method, json_t *params_new,
                  al__conn_result_cb cb, void *data);
/* Spawns agentloopd detached for c->path (used by al__conn_open). */
int al__conn_spawn_daemon(al__conn_t *c);
/* Closes; cb runs once every handle is closed. Only once. */
void al__conn_close(al__conn_t *c, al__conn_close_cb cb);

#endif
