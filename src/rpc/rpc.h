/* RPC layer: what the daemon and its clients share (docs/protocol.md).
 *
 *  - The socket path and the checks on its directory, so both sides refuse
 *    the same squatted or symlinked directory (RELIABILITY F8, G1, G8).
 *  - NDJSON line framing with a hard line limit: a line past the limit is
 *    reported once and skipped up to its '\n' without being buffered, so a
 *    peer that never sends a newline costs at most `max` bytes (G3).
 *  - Builders and a classifier for JSON-RPC 2.0 shaped messages on
 *    jansson.
 *
 * Pure apart from the path functions (which do blocking stat/mkdir: call
 * them before the loop runs, or accept a few microseconds on local dirs).
 * No uv handles. The API is stable: the front end builds against it. */
#ifndef AL_RPC_H
#define AL_RPC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define AL_RPC_PROTOCOL_VERSION 1
#define AL_RPC_DEFAULT_MAX_LINE (1024 * 1024)
#define AL_RPC_SOCKET_NAME "agentloopd.sock"

/* JSON-RPC error codes (docs/protocol.md "Errors"). */
#define AL_RPC_PARSE_ERROR -32700
#define AL_RPC_INVALID_REQUEST -32600
#define AL_RPC_METHOD_NOT_FOUND -32601
#define AL_RPC_INVALID_PARAMS -32602
#define AL_RPC_INTERNAL_ERROR -32603
#define AL_RPC_OVERLOADED -32001
#define AL_RPC_NOT_INITIALIZED -32002
#define AL_RPC_UNKNOWN_SESSION -32003
#define AL_RPC_RUN_ACTIVE -32004
#define AL_RPC_LINE_TOO_LONG -32005
#define AL_RPC_NOT_SUPPORTED -32006
#define AL_RPC_NO_SUCH_APPROVAL -32007
/* The daemon would pass its open-file limit (RLIMIT_NOFILE): a new or
 * resumed session or a run is refused before any descriptor runs out;
 * data {"limit":"open_files","max","in_use"}. */
#define AL_RPC_FD_LIMIT -32008
/* The state directory cannot be written (a full disk, a read-only or
 * failing filesystem): a session/create whose transcript cannot be made
 * or synced; data {"error": "ENOSPC"|..., "code": text}. */
#define AL_RPC_STORAGE -32009

/* ---- socket path ---------------------------------------------------------- */

/* Fills buf with the socket path: $AGENTLOOP_SOCKET, else
 * $XDG_RUNTIME_DIR/agentloop/agentloopd.sock (when XDG_RUNTIME_DIR is an
 * absolute path to a directory we own), else
 * /tmp/agentloop-$UID/agentloopd.sock. With create_dir, the agentloop
 * directory of the last two is created 0700 if missing. The directory of
 * the path (any of the three) is then checked with al__rpc_dir_check.
 * Errors: AL_ENAMETOOLONG-like UV_ENAMETOOLONG when the path does not fit
 * in buf or in sockaddr_un.sun_path; UV_EPERM when the directory fails the
 * check (the message in why says which rule); UV_E* from mkdir/lstat.
 * why (may be NULL) gets a one-line reason on failure. */
int al__rpc_socket_path(char *buf, size_t len, bool create_dir, char *why,
                        size_t why_len);

/* The same for an explicit socket path (--socket): checks its length and
 * its directory. */
int al__rpc_socket_path_check(const char *path, char *why, size_t why_len);

/* The directory checks: lstat says a directory (not a symlink), owned by
 * our uid, and no group/other bits (mode & 077 == 0). With create, a
 * missing directory is made 0700 first (umask does not loosen it).
 * 0, UV_EPERM (why filled), UV_E* from the syscalls. When the test binary
 * sets al__rpc_test_open_mode, the mode rule is relaxed to allow 0711
 * (RELIABILITY G2: only SO_PEERCRED then stands between another uid and
 * the socket). */
int al__rpc_dir_check(const char *dir, bool create, char *why, size_t why_len);
extern bool al__rpc_test_open_mode;

/* ---- line framing --------------------------------------------------------- */

typedef struct al_rpc_framer_s al_rpc_framer_t;

/* One complete line (without '\n' and a trailing '\r'), or too_long when
 * the line exceeded the limit (line is then NULL; called once per such
 * line, when it is detected, and the rest up to '\n' is skipped). Return
 * false to stop feeding (the caller closed the connection): feed returns
 * at once. */
typedef bool (*al_rpc_line_cb)(al_rpc_framer_t *f, const char *line,
                               size_t len, bool too_long, void *data);

struct al_rpc_framer_s {
  al_buf_t buf;
  size_t max;
  bool skipping; /* inside an over-long line, dropping to its '\n' */
};

/* In place; max is the longest accepted line (without '\n'). */
void al_rpc_framer_init(al_rpc_framer_t *f, size_t max);
void al_rpc_framer_free(al_rpc_framer_t *f);
/* Feeds bytes; cb runs for every line completed by them. Returns 0,
 * AL_ECANCELED when cb returned false, AL_ENOMEM. */
int al_rpc_framer_feed(al_rpc_framer_t *f, const char *p, size_t n,
                       al_rpc_line_cb cb, void *data);
/* Bytes of an incomplete line held. */
size_t al_rpc_framer_pending(const al_rpc_framer_t *f);

/* ---- messages ------------------------------------------------------------- */

typedef enum {
  AL_RPC_MSG_REQUEST = 1,      /* method + id */
  AL_RPC_MSG_NOTIFICATION = 2, /* method, no id */
  AL_RPC_MSG_RESPONSE = 3      /* id + result or error */
} al_rpc_msg_kind_t;

typedef struct {
  al_rpc_msg_kind_t kind;
  json_t *root;         /* owned: the whole message */
  json_t *id;           /* borrowed from root (string or integer), NULL
                         * for a notification, JSON null for an error
                         * response to a request whose id was unreadable */
  const char *method;   /* borrowed from root, or NULL */
  json_t *params;       /* borrowed: object, or NULL when absent */
  json_t *result;       /* borrowed (responses) */
  json_t *error;        /* borrowed (responses): {code, message, data?} */
} al_rpc_msg_t;

/* Parses and classifies one line. On success fills msg (al_rpc_msg_free
 * it) and returns 0. On a bad line returns the JSON-RPC error code
 * (AL_RPC_PARSE_ERROR or AL_RPC_INVALID_REQUEST), fills why, and sets
 * *bad_id (new reference, NULL when none could be read) so the caller can
 * answer with it. Params that are present must be an object (arrays are
 * not used by this protocol). */
int al_rpc_parse(const char *line, size_t len, al_rpc_msg_t *msg,
                 json_t **bad_id, char *why, size_t why_len);
void al_rpc_msg_free(al_rpc_msg_t *msg);

/* Builders. Each returns a new object or NULL (out of memory). Arguments
 * with _new steal the reference (even on failure); id is borrowed (NULL
 * means JSON null). */
json_t *al_rpc_request_new(json_t *id, const char *method, json_t *params_new);
json_t *al_rpc_notification_new(const char *method, json_t *params_new);
json_t *al_rpc_result_new(const json_t *id, json_t *result_new);
json_t *al_rpc_error_new(const json_t *id, int code, const char *message,
                         json_t *data_new);

/* Appends msg as one compact line with its '\n'. 0, AL_ETOOBIG, AL_ENOMEM.
 * Strings are escaped by jansson, so the line never holds a raw '\n'. */
int al_rpc_dump_line(const json_t *msg, al_buf_t *out);
/* The same, returned as one al_malloc'd buffer (al_free it); NULL on OOM. */
char *al_rpc_dump_line_alloc(const json_t *msg, size_t *len);

/* The fixed parts of an `event` notification around an already encoded
 * LoopEvent (events/json.c): PREFIX + event JSON + SUFFIX is exactly
 * what al_rpc_dump_line writes for {"jsonrpc":"2.0","method":"event",
 * "params":<event>}, without re-encoding the event per client. */
#define AL_RPC_EVENT_PREFIX "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":"
#define AL_RPC_EVENT_SUFFIX "}\n"

/* Adds the client configuration cfg's MCP servers and hooks to
 * session/create params as mcp_config and hooks_config (objects in
 * al_agent_options_t's shapes, {} for none), so a session uses the file
 * as it is now, not as the daemon read it at its start. AL_EINVAL (a bad
 * section: FILE:LINE:COL in why), AL_ENOMEM. Blocking: start-up work. */
struct al_config_s;
int al__rpc_client_config(const struct al_config_s *cfg, json_t *params,
                          char *why, size_t why_len);

#endif
