/* MCP client (SPEC §16, RESEARCH-WAVE2 §2): stdio servers on the libuv
 * loop, and Streamable HTTP servers (mcp_http.h) through the same state
 * machine, protocol 2025-11-25 (older versions the TypeScript SDK accepts
 * are accepted too).
 *
 * One al_mcp_t owns the servers of one agent. Each server is a child
 * process started through the spawn wrapper (tools/spawn.h: own process
 * group, explicit env only, inside the tool sandbox unless its
 * configuration says `sandbox: false`), speaking newline-delimited
 * JSON-RPC on stdin/stdout; stderr is kept in a 64 KB ring for error
 * messages. Nothing here blocks: every server starts at once, and the
 * owner reads states and tool lists when it wants them (the agent at turn
 * boundaries).
 *
 * Server states (al_mcp_state_t), changed only by set_state in mcp.c,
 * each change reported through on_state:
 *
 *   starting --initialize+tools/list--> ready --exit/garbage--> restarting
 *      |                                                          |
 *      +--timeout/exit/garbage/bad version--> restarting ---------+
 *                                    (backoff 1, 2, 4 s; at most
 *                                     max_restarts in 5 min) --> failed
 *   any --al__mcp_close--> closed
 *
 * Decisions recorded here:
 *  - A stdout line that is not a JSON object, or longer than line_max
 *    (16 MiB), fails the server: a server that speaks garbage cannot be
 *    trusted with the rest of its stream.
 *  - tools/list_changed re-lists at once, but the new list only becomes
 *    the server's `tools` (and bumps `gen`); the agent picks it up at its
 *    next turn boundary, so no tool vanishes mid-reply.
 *  - A call's timeout resets on each progress notification, never beyond
 *    call_max_ms from its start. Cancel sends notifications/cancelled and
 *    completes the call at once; a late answer is dropped.
 *  - Shutdown: stdin closed, shutdown_grace_ms, then SIGTERM to the group,
 *    kill_grace_ms, then SIGKILL (the spawn wrapper's escalation). */
#ifndef AL_MCP_H
#define AL_MCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "common/common.h"
#include "sandbox/sandbox.h"

#define AL_MCP_PROTOCOL_VERSION "2025-11-25"
#define AL_MCP_DEFAULT_STARTUP_WAIT_MS 1500
#define AL_MCP_DEFAULT_STARTUP_TIMEOUT_MS 30000
#define AL_MCP_DEFAULT_CALL_TIMEOUT_MS 60000
#define AL_MCP_DEFAULT_CALL_MAX_MS 600000
#define AL_MCP_DEFAULT_SHUTDOWN_GRACE_MS 2000
#define AL_MCP_DEFAULT_RESTART_BASE_MS 1000
#define AL_MCP_DEFAULT_MAX_RESTARTS 3
#define AL_MCP_DEFAULT_LINE_MAX (16u << 20)
#define AL_MCP_DEFAULT_RESULT_MAX_CHARS 100000 /* about 25,000 tokens */
#define AL_MCP_STDERR_RING (64 * 1024)
#define AL_MCP_STDERR_LINES 20
#define AL_MCP_MAX_PAGES 100
#define AL_MCP_MAX_TOOLS 10000

typedef enum {
  AL_MCP_STARTING = 0,
  AL_MCP_READY,
  AL_MCP_FAILED,
  AL_MCP_RESTARTING,
  AL_MCP_CLOSED
} al_mcp_state_t;

const char *al__mcp_state_name(al_mcp_state_t st);

/* How a Streamable HTTP server's server stream (its GET) is opened again
 * after it ends (mcp_http.c). The n-th reopen in a row of a stream that
 * lived less than healthy_ms waits base_ms * 2^(n-1), at most max_ms, and
 * at least the stream's SSE `retry:`, jittered to half..all of that; at
 * most per_window reopens in any window_ms; after degrade_after short
 * streams in a row a notice, after give_up short streams in a row the
 * stream is left closed (another notice). Zeros: the defaults below;
 * jitter_seed 0: seeded from the clock. */
typedef struct al_mcp_stream_backoff_s {
  uint64_t base_ms;
  uint64_t max_ms;
  uint64_t healthy_ms;
  uint64_t window_ms;
  uint32_t per_window;
  uint32_t degrade_after;
  uint32_t give_up;
  uint64_t jitter_seed;
} al_mcp_stream_backoff_t;

#define AL_MCP_STREAM_BASE_MS 1000
#define AL_MCP_STREAM_MAX_MS 60000
#define AL_MCP_STREAM_HEALTHY_MS 30000
#define AL_MCP_STREAM_WINDOW_MS 60000
#define AL_MCP_STREAM_PER_WINDOW 10
#define AL_MCP_STREAM_DEGRADE_AFTER 3
#define AL_MCP_STREAM_GIVE_UP 30

/* One server's configuration (parsed by al__mcp_config_parse). */
typedef struct al_mcp_server_config_s {
  char *name;
  char **argv; /* command + args, NULL-terminated */
  char **env;  /* "NAME=value", NULL-terminated (${VAR} already expanded) */
  char *cwd;   /* NULL: the workspace */
  /* Streamable HTTP instead of a child: the endpoint, and extra request
   * headers "Name: value" (NULL-terminated, ${VAR} expanded). argv is
   * NULL then. */
  char *url;
  char **headers;
  bool sandbox; /* run inside the tool sandbox (default true) */
  bool network; /* the sandbox lets it reach the network (default false) */
  uint64_t startup_timeout_ms;
  uint64_t call_timeout_ms;
  uint64_t call_max_ms;
  /* {"tool": {"concurrency_safe": bool}} overrides; may be NULL. */
  json_t *tool_overrides;
  /* always_load: true (every tool) or [tool names]: never deferred by the
   * tool budget (loop/mcp_attach.c); may be NULL. */
  json_t *always_load;
} al_mcp_server_config_t;

typedef struct al_mcp_config_s {
  al_mcp_server_config_t *servers;
  size_t n;
  uint64_t startup_wait_ms;
  /* Share of the context window (percent) the MCP tool definitions may
   * take before they are deferred behind mcp_tool_search; 0: never. */
  uint32_t tool_budget_pct;
  /* ... or when there are more than this many MCP tools; 0: no count
   * limit. */
  uint32_t tool_budget_max_tools;
} al_mcp_config_t;

#define AL_MCP_DEFAULT_TOOL_BUDGET_PCT 10
#define AL_MCP_DEFAULT_TOOL_BUDGET_MAX_TOOLS 40

/* Parses the JSON configuration:
 *   {"startup_wait_ms"?: N, "tool_budget_pct"?: 0..100,
 *    "tool_budget_max_tools"?: N,
 *    "mcpServers" | "mcp_servers": {NAME: {"command": S, "args"?: [S],
 *       "env"?: {K: S}, "cwd"?: S, "sandbox"?: B, "network"?: B,
 *       "startup_timeout_ms"?: N, "timeout_ms"?: N, "max_timeout_ms"?: N,
 *       "disabled"?: B, "tools"?: {TOOL: {"concurrency_safe": B}},
 *       "always_load"?: B | [TOOL]}}}
 * the shape of a project's .mcp.json plus our keys. "${VAR}" in env values
 * expands from the environment (unset: empty). A server with "url" is a
 * Streamable HTTP server instead ({"url": S, "headers"?: {K: S}} and the
 * timeouts; ${VAR} expanded in header values; type "sse" refused).
 * Errors: AL_EINVAL with the reason in err ("mcpServers.NAME.command:
 * must be a string"). */
int al__mcp_config_parse(const char *json, size_t len, al_mcp_config_t *out,
                         al_buf_t *err);
void al__mcp_config_free(al_mcp_config_t *c);
/* The configuration of a run or daemon, as JSON text for
 * al_agent_options_t.mcp_config: the servers of `file` (a JSON file in the
 * shape above; may be NULL) and, when trusted, of <workspace>/.mcp.json;
 * the file's entry wins on a name both use. *out NULL when there are no
 * servers. Blocking (start-up only). AL_EINVAL with "FILE:LINE:COL: ..."
 * or the parser's reason in err. */
int al__mcp_config_load(const char *file, const char *workspace, bool trusted,
                        char **out, al_buf_t *err);
/* The same with config.yaml's `mcp_servers:` section (a map of servers,
 * may be NULL) between the project's .mcp.json and the file. */
int al__mcp_config_load2(const char *file, const json_t *section,
                         const char *workspace, bool trusted, char **out,
                         al_buf_t *err);
/* A session's servers (the daemon): base (JSON text as al__mcp_config_load2
 * made it; may be NULL) and, when the project is trusted (trust, or a
 * decision recorded by `agentloop tools --trust-project`), the servers of
 * <workspace>/.mcp.json; base wins on a name both use. *out NULL when
 * there are none; *skipped when the workspace has a .mcp.json that was not
 * read because the project is not trusted. Blocking: run it off the loop
 * (the agent does, in libuv's pool). AL_EINVAL with "FILE:LINE:COL: ..." or
 * the parser's reason in err. */
int al__mcp_config_project(const char *base, const char *workspace,
                           bool trust, char **out, bool *skipped,
                           al_buf_t *err);
/* True when workspace has a .mcp.json that trusted == false leaves unread
 * (for the note `agentloop run` and `mcp list` print). Blocking (a stat). */
bool al__mcp_project_skipped(const char *workspace, bool trusted);
/* Hooks: config.yaml's `hooks:` section (may be NULL) and the hooks of
 * `file` ({"hooks": {...}}; may be NULL), lists of one event joined, as
 * JSON text for al_agent_options_t.hooks_config (*out NULL: none). The
 * hooks themselves are checked by al_agent_new. */
int al__hooks_config_load(const char *file, const json_t *section,
                          char **out, al_buf_t *err);
void al__mcp_server_config_free(al_mcp_server_config_t *s);

/* A whole small file (at most 4 MiB) as text (al_free), for start-up
 * configuration such as --hooks-config; NULL with the reason in err.
 * Blocking. */
char *al__read_text_file(const char *path, al_buf_t *err);

typedef struct al_mcp_s al_mcp_t;
typedef struct al_mcp_server_s al_mcp_server_t;
typedef struct al_mcp_call_s al_mcp_call_t;

typedef void (*al_mcp_state_cb)(al_mcp_t *m, al_mcp_server_t *s, void *data);
/* Something about a ready server the user should know without a state
 * change (its HTTP server stream degraded or was given up). */
typedef void (*al_mcp_notice_cb)(al_mcp_t *m, al_mcp_server_t *s,
                                 const char *text, void *data);

typedef struct al_mcp_options_s {
  uv_loop_t *loop;       /* required */
  const char *workspace; /* required: cwd default, the roots/list answer */
  al_sandbox_t *sandbox; /* borrowed; NULL: servers run unconfined */
  uint64_t shutdown_grace_ms;
  uint64_t kill_grace_ms;
  uint64_t restart_base_ms;
  int max_restarts;
  size_t line_max;
  size_t result_max_chars;
  al_mcp_state_cb on_state; /* may be NULL */
  al_mcp_notice_cb on_notice; /* may be NULL */
  void *data;
  al_mcp_stream_backoff_t stream_backoff; /* HTTP servers; zeros: defaults */
} al_mcp_options_t;

void al__mcp_options_init(al_mcp_options_t *o);

/* Takes the servers of cfg (cfg is left empty). Starts nothing. */
int al__mcp_new(const al_mcp_options_t *o, al_mcp_config_t *cfg,
                al_mcp_t **out);
/* Spawns every server on the loop's next turn (each reports starting,
 * then ready or failed). */
void al__mcp_start(al_mcp_t *m);
/* True when every server has been ready or failed at least once (false
 * for one not started yet). */
bool al__mcp_settled(const al_mcp_t *m);
uint64_t al__mcp_startup_wait_ms(const al_mcp_t *m);
size_t al__mcp_count(const al_mcp_t *m);
al_mcp_server_t *al__mcp_server(al_mcp_t *m, size_t i);
/* Closes every server (stdin, grace, TERM, KILL). cb runs once every
 * child has been reaped and every handle closed; m is freed after it. */
void al__mcp_close(al_mcp_t *m, void (*cb)(void *data), void *data);

/* Server accessors. */
const char *al__mcp_server_name(const al_mcp_server_t *s);
al_mcp_state_t al__mcp_server_state(const al_mcp_server_t *s);
/* The tool list last listed in full (an array of the server's tool
 * objects; borrowed), and its generation (bumped with each new list). */
const json_t *al__mcp_server_tools(const al_mcp_server_t *s);
uint64_t al__mcp_server_gen(const al_mcp_server_t *s);
const al_mcp_server_config_t *al__mcp_server_config(const al_mcp_server_t *s);
/* The last error ("exited with status 3; stderr: ..."), or NULL. */
const char *al__mcp_server_error(const al_mcp_server_t *s);
/* ms from the spawn to ready (or failure) of the last start. */
uint64_t al__mcp_server_ms(const al_mcp_server_t *s);
const char *al__mcp_server_version(const al_mcp_server_t *s);
int al__mcp_server_pid(const al_mcp_server_t *s);
/* JSON {name, state, tools, ms, error, pid, protocol} for tools --json and
 * doctor (ms: of a server still starting, how long so far). New
 * reference. */
json_t *al__mcp_server_json(const al_mcp_server_t *s);

/* ---- calls ------------------------------------------------------------------ */

typedef void (*al_mcp_progress_cb)(al_mcp_call_t *c, const char *text,
                                   void *data);
/* The call's result as the model sees it (text, capped, UTF-8). Fires
 * exactly once unless the call was cancelled; c is freed after it. */
typedef void (*al_mcp_done_cb)(al_mcp_call_t *c, bool is_error,
                               const char *text, size_t len, void *data);

/* tools/call of `tool` with `args` (an object; borrowed). Never completes
 * synchronously. AL_ESTATE when the server is not ready, AL_ENOMEM. */
int al__mcp_call(al_mcp_server_t *s, const char *tool, const json_t *args,
                 al_mcp_progress_cb on_progress, al_mcp_done_cb on_done,
                 void *data, al_mcp_call_t **out);
/* Sends notifications/cancelled; neither callback fires afterwards. */
void al__mcp_call_cancel(al_mcp_call_t *c);
/* Inside on_done: why the call ended when the server did not answer it:
 * "timeout", "server_failed" (the server died or spoke garbage),
 * "server_closed" (shutdown); NULL for an answer (result or JSON-RPC
 * error). */
const char *al__mcp_call_end(const al_mcp_call_t *c);
/* ms since the request was sent (valid until on_done returns, or until
 * al__mcp_call_cancel). */
uint64_t al__mcp_call_ms(const al_mcp_call_t *c);

/* The content blocks of the result being delivered (see
 * al__mcp_result_content), valid inside on_done only; NULL when the
 * result is text alone. */
const json_t *al__mcp_call_blocks(const al_mcp_call_t *c);

/* Media one result may carry to the model (mcp_content.c): at most 20
 * images/PDFs and 8 MiB of base64 in all, each image within the 5 MB
 * base64 limit of the Anthropic API (AL_MEDIA_IMAGE_MAX_B64). */
#define AL_MCP_RESULT_MAX_MEDIA 20
#define AL_MCP_RESULT_MAX_MEDIA_B64 ((size_t)8 * 1024 * 1024)

/* A tools/call result in both views (mcp_content.c): returns the text
 * (as al__mcp_format_result) and, when blocks is not NULL and the result
 * carries images or PDFs the model can take, *blocks gets a new array of
 * Anthropic-shaped content blocks (text, image, document) in order, their
 * text capped like the text view; else *blocks is NULL. */
char *al__mcp_result_content(const json_t *result, const json_t *output_schema,
                             size_t max_chars, const char *tool,
                             bool *is_error, json_t **blocks);

/* Formats a tools/call result (the `result` object) as the model's text:
 * text parts joined by newlines, images/audio/resources summarised,
 * structuredContent used when content is empty and checked against
 * output_schema (top-level type and required keys; a mismatch is an
 * error). Capped at max_chars with the SPEC §8 notice. Returns an
 * al_malloc'd string; *is_error from isError or the schema check. */
char *al__mcp_format_result(const json_t *result, const json_t *output_schema,
                            size_t max_chars, const char *tool,
                            bool *is_error);

/* Fuzzing seam: feeds bytes as the stdout of server 0 of a manager that
 * was never started (the first call acts as if initialize, id 1, had been
 * sent; nothing is spawned or written). */
void al__mcp_fuzz_feed(al_mcp_t *m, const char *p, size_t n);

/* mcp__<server>__<tool> in [A-Za-z0-9_-], at most 64 characters; when cut
 * or changed, a 6-hex hash of the original pair is appended so different
 * tools keep different names. out must hold 65 bytes. */
void al__mcp_tool_name(const char *server, const char *tool, char out[65]);

#endif
