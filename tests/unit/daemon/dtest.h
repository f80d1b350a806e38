/* Fixture for daemon tests: one loop with an in-process agentloop-mockllm
 * (recording and validating requests), private runtime/state/workspace
 * directories, an in-process al_daemon_t on the same loop, and socket
 * clients that keep every message they receive as JSON. */
#ifndef AL_TEST_DTEST_H
#define AL_TEST_DTEST_H

#include <jansson.h>

#include "daemon/daemon.h"
#include "mockllm/mockllm.h"
#include "rpc/rpc.h"
#include "test.h"

typedef struct dt_s dt_t;

typedef struct {
  dt_t *t;
  uv_pipe_t pipe;
  uv_connect_t creq;
  al_rpc_framer_t framer;
  json_t *msgs;     /* every message received, in order */
  bool connected;
  int connect_status;
  bool eof;
  bool closed;
  bool reading;
  uint64_t bytes;
  int handles;
} dt_client_t;

struct dt_s {
  uv_loop_t loop;
  al_mockllm_t *mock;
  al_daemon_t *d;
  al_daemon_options_t o;
  char root[64];
  char sock[160];
  char state[160];
  char work[160];
  char url[64];
  bool exited;
};

/* Loop, mock server (YAML; NULL: one short text reply), directories and
 * daemon options (base URL, key, small retry delays). Adjust t->o, then
 * dt_start(). */
void dt_init(dt_t *t, const char *yaml);
void dt_start(dt_t *t);
/* Connects c and runs the loop until connected. */
void dt_connect(dt_t *t, dt_client_t *c);
/* The same, retrying (every few ms) while the connect is refused: a
 * daemon that is starting, or a stale socket it has not replaced yet. */
void dt_connect_retry(dt_t *t, dt_client_t *c);
/* dt_connect_retry + initialize, starting over when the connection is
 * closed before the answer: a daemon killed while spawning a tool leaves
 * its listening socket alive in the child until that child's exec, so a
 * connect can land in a backlog that is about to vanish. */
void dt_connect_ready(dt_t *t, dt_client_t *c);
/* Writes raw bytes (copied). */
void dt_write(dt_client_t *c, const char *p, size_t n);
/* Writes a line (the text plus '\n'). */
void dt_line(dt_client_t *c, const char *line);
/* Sends {"jsonrpc":"2.0","id":id,"method":method,"params":params_json}
 * (params_json may be NULL) and waits for the response with that id. */
json_t *dt_call(dt_client_t *c, int id, const char *method,
                const char *params_json);
/* Runs the loop until a response with this id arrived; returns it
 * (borrowed). */
json_t *dt_wait_id(dt_client_t *c, int id);
/* Runs the loop until c holds at least n messages. */
void dt_wait_count(dt_client_t *c, size_t n);
/* Runs the loop until an event of `type` arrived at index >= from;
 * returns its index. */
size_t dt_wait_event(dt_client_t *c, const char *type, size_t from);
/* Runs the loop until a notification `method` arrived at index >= from. */
size_t dt_wait_notification(dt_client_t *c, const char *method, size_t from);
/* Stops / resumes reading (a slow client). */
void dt_pause(dt_client_t *c);
void dt_resume(dt_client_t *c);
/* Runs the loop (with a 5 ms ticker) until cond(data) holds. */
void dt_run_until(dt_t *t, bool (*cond)(void *), void *data);
/* Runs the loop until the daemon closed c (EOF). */
void dt_wait_eof(dt_client_t *c);
void dt_close(dt_client_t *c);
/* Initializes c (id 1). */
void dt_init_client(dt_client_t *c);
/* session/create with params (id 2), returns the session id (static
 * buffer per call site: copy it). */
const char *dt_create(dt_client_t *c, const char *params_json, char *out,
                      size_t len);
/* The type of message i's event ("" if not an event). */
const char *dt_ev_type(const dt_client_t *c, size_t i);
/* Error code of a response (0 if it is a result). */
int dt_err(const json_t *resp);
/* Shuts the daemon down (if it is up), closes clients that are still
 * open, the mock server, runs the loop dry and checks it closes, removes
 * the directories, frees everything. */
void dt_finish(dt_t *t, dt_client_t **clients, size_t n);
/* Every request the mock received passed its validator. */
void dt_assert_valid(const dt_t *t);
/* Removes a directory tree (tests only). */
void dt_rmtree(const char *path);

#endif
