/* The agent: one conversation (session) driven by the agent loop on the
 * host's libuv loop (SPEC §6, §7, §13).
 *
 * An agent owns a history, an HTTP client, its tools and its subscribers.
 * al_agent_run() starts a run: the user text is added, the model's reply is
 * streamed, every complete tool_use block starts in the streaming tool
 * executor while the reply still streams, results go back to the model,
 * and the loop repeats until a reply without tools, the `done` tool, the
 * turn limit, a cancel or an unrecoverable error. Everything the run does
 * is reported as LoopEvents (agentloop/events.h) to the subscribers; a run
 * always ends with exactly one of final, interrupted or error.
 *
 * Conventions (libuv's): every function is called on the loop thread; no
 * callback runs inside the call that caused it, except subscribers, which
 * see the events of al_agent_run / al_agent_cancel synchronously; errors
 * are negative AL_E* codes; the agent closes asynchronously. Nothing here
 * blocks: file tools run in libuv's threadpool, child processes through
 * uv_spawn, DNS through uv_getaddrinfo. Several agents may share a loop. */
#ifndef AGENTLOOP_AGENT_H
#define AGENTLOOP_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agentloop/client.h"
#include "agentloop/events.h"
#include "agentloop/limits.h"
#include "agentloop/models.h"
#include "agentloop/sandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct al_agent_s al_agent_t;
typedef struct al_sub_s al_sub_t;
typedef struct al_tool_ctx_s al_tool_ctx_t;

/* ---- tools --------------------------------------------------------------- */

/* SPEC §6: read is always allowed; write is allowed in interactive and
 * headless runs, in job mode only when listed; admin asks (interactive)
 * or is denied unless listed (headless, job). */
typedef enum {
  AL_TOOL_READ = 0,
  AL_TOOL_WRITE = 1,
  AL_TOOL_ADMIN = 2
} al_tool_category_t;

/* An in-process tool's body. Called on the loop thread when the call
 * starts (tool_use_started has just been posted). It must not block; it
 * finishes the call, now or later, with exactly one al_tool_ctx_complete().
 * data is al_tool_def_t.data. */
typedef void (*al_tool_run_cb)(al_tool_ctx_t *ctx, void *data);
/* The call is cancelled (user cancel, timeout, discarded reply, close):
 * stop the work and still call al_tool_ctx_complete() (its content is
 * dropped). May be NULL: the tool then completes in its own time. */
typedef void (*al_tool_cancel_cb)(al_tool_ctx_t *ctx, void *data);

typedef struct al_tool_def_s {
  const char *name;         /* required: ^[a-zA-Z0-9_-]{1,64}$ */
  const char *description;  /* required */
  /* JSON Schema of the input, as JSON text; NULL: an object with no
   * declared properties. `required` and the primitive `type` of each
   * property are checked before the tool runs (an error result otherwise). */
  const char *input_schema;
  al_tool_category_t category;
  bool concurrency_safe;    /* may run beside other safe calls */
  uint64_t timeout_ms;      /* 0: 120 s. On expiry: cancel + error result */
  al_tool_run_cb run;       /* required */
  al_tool_cancel_cb cancel; /* optional */
  void *data;
} al_tool_def_t;

/* The call's id, tool name and input (compact JSON object text). Valid
 * until al_tool_ctx_complete() returns. */
const char *al_tool_ctx_id(const al_tool_ctx_t *ctx);
const char *al_tool_ctx_name(const al_tool_ctx_t *ctx);
const char *al_tool_ctx_input(const al_tool_ctx_t *ctx);
/* True once the call was cancelled (its result will be dropped). */
bool al_tool_ctx_cancelled(const al_tool_ctx_t *ctx);
/* A user pointer for the tool's own state; NULL at first. */
void al_tool_ctx_set_data(al_tool_ctx_t *ctx, void *data);
void *al_tool_ctx_get_data(const al_tool_ctx_t *ctx);
/* Posts a tool_progress event with this chunk (copied). 0, or
 * AL_ECANCELED after cancel (nothing posted). */
int al_tool_ctx_progress(al_tool_ctx_t *ctx, const char *text, size_t len);
/* Finishes the call once (content copied; len bytes, any bytes, shown to
 * the model as UTF-8 with invalid bytes replaced). ctx is freed inside. */
void al_tool_ctx_complete(al_tool_ctx_t *ctx, bool is_error,
                          const char *content, size_t len);

/* ---- permissions --------------------------------------------------------- */

typedef enum {
  AL_PERMISSION_MODE_INTERACTIVE = 0, /* admin tools ask */
  AL_PERMISSION_MODE_HEADLESS = 1,    /* `agentloop run`: never asks */
  AL_PERMISSION_MODE_JOB = 2          /* cron-like: write needs a listing */
} al_permission_mode_t;

typedef enum {
  AL_PERMISSION_DEFAULT = 0, /* hook: apply the mode and lists */
  AL_PERMISSION_ALLOW = 1,
  AL_PERMISSION_DENY = 2,
  AL_PERMISSION_ASK = 3      /* post approval_required and wait */
} al_permission_t;

/* Called before each tool call starts (after the deny/allow lists, which
 * win). input is the call's compact JSON text. ASK in a non-interactive
 * mode is taken as DENY. */
typedef al_permission_t (*al_permission_cb)(al_agent_t *agent,
                                            const char *tool,
                                            const char *input,
                                            al_tool_category_t category,
                                            void *data);

typedef enum {
  AL_APPROVE_ALLOW = 0,
  AL_APPROVE_DENY = 1,
  AL_APPROVE_ALWAYS = 2 /* allow, and allow this tool for the agent's life */
} al_approval_t;

/* ---- the agent ----------------------------------------------------------- */

/* What a history commit hook is told (al_agent_options_t.on_commit). */
typedef enum {
  AL_COMMIT_USER = 0,        /* the run's user text was added */
  AL_COMMIT_ASSISTANT = 1,   /* a model reply was committed */
  AL_COMMIT_TOOL_RESULTS = 2, /* the results of the reply's tool calls */
  /* Context management (docs/context.md): COMPACTION, the whole history
   * after a summary compaction, {"messages":[...]} (it replaces what came
   * before); MICRO, the results a micro-compaction cleared,
   * {"call_ids":[...]} (replayed with the same placeholders). */
  AL_COMMIT_COMPACTION = 3,
  AL_COMMIT_MICRO = 4
} al_commit_kind_t;

/* Called on the loop thread right after the history changed, before the
 * events that follow from it. message is one message as compact JSON text
 * ({"role","content":[blocks]}, borrowed for the call): USER the user text
 * as its own message (the history may merge it into the previous user
 * message), ASSISTANT the reply as committed (it may be appended to a
 * previous assistant message), TOOL_RESULTS the user message that closed
 * the tool turn (real, cancelled or synthetic results). Replaying the
 * three kinds in order (al_agent_load_history_json takes the result)
 * rebuilds the history. Must not call into the agent. */
typedef void (*al_commit_cb)(al_agent_t *agent, al_commit_kind_t kind,
                             const char *message, size_t len, void *data);

/* Hooks (docs/hooks.md). A decision: none (no opinion), allow, ask (needs
 * an approval), deny. Ordered: the strongest of several hooks wins. */
typedef enum {
  AL_HOOK_NONE = 0,
  AL_HOOK_ALLOW,
  AL_HOOK_ASK,
  AL_HOOK_DENY
} al_hook_decision_t;

/* What an in-process hook answers. reason: shown to the model on deny (or
 * as the stop hook's message). The strings are al_malloc'd by the hook
 * (or NULL) and freed by the agent: updated_input (pre_tool_use: a JSON
 * object replacing the tool's input), context (text added for the model),
 * replace (post_tool_use: the result the model sees instead). */
typedef struct al_hook_reply_s {
  al_hook_decision_t decision;
  char *reason;
  char *updated_input;
  char *context;
  char *replace;
} al_hook_reply_t;

/* An in-process hook: called on the loop thread for every hook event
 * ("session_start", "user_prompt_submit", "pre_tool_use", "post_tool_use",
 * "stop", "pre_compact") with the same JSON input a command hook gets on
 * stdin. reply is zeroed; leaving it so means no opinion. It must return
 * quickly and must not call into the agent. */
typedef void (*al_hook_cb)(al_agent_t *agent, const char *event,
                           const char *input_json, al_hook_reply_t *reply,
                           void *data);

/* Sub-agents (docs/subagents.md). An agent a `task` call may start; the
 * strings are borrowed by al_agent_new, which copies them. */
typedef struct al_subagent_def_s {
  const char *name;         /* [a-z0-9_-], 1..64 */
  const char *description;  /* one line for the task tool's description */
  const char *system;       /* the agent's prompt; NULL: none */
  const char *model;        /* NULL: the parent's model */
  /* Allowlist, NULL-terminated; NULL: all of the parent's tools. */
  const char *const *tools;
  const char *const *disallowed_tools; /* NULL-terminated; may be NULL */
  /* -1: the parent's; else an al_permission_mode_t, never looser than the
   * parent's (a looser one is taken as the parent's). */
  int permission_mode;
  uint32_t max_turns;       /* 0: the parent's max_turns */
  const char *source;       /* "builtin" or the file it came from */
} al_subagent_def_t;

/* The built-in agents (explore, general) every agent has unless a
 * definition of that name replaces them: static, *n set. For listings. */
const al_subagent_def_t *al_subagent_builtins(size_t *n);

/* What al_agent_options_t.on_child is told about a new child. */
typedef struct al_child_info_s {
  const char *task_id;        /* "t1", unique in its parent */
  const char *session_id;     /* the child's */
  const char *parent_session;
  const char *parent_call;    /* the task tool_use id */
  const char *agent;          /* the definition's name */
  bool background;
  uint32_t depth;             /* 1: a child of a top-level agent */
} al_child_info_t;

/* Called when a child is created, before its run starts; it may set
 * *commit / *commit_data (the child's history commit hook, e.g. its own
 * transcript; NULL: none). Must not call into the agents. */
typedef void (*al_child_cb)(al_agent_t *parent, const al_child_info_t *info,
                            al_commit_cb *commit, void **commit_data,
                            void *data);

typedef struct al_agent_options_s {
  /* Model endpoint. provider: "anthropic" (default) or "openai". base_url
   * NULL: the provider's public endpoint. api_key may be NULL (mock
   * servers, proxies that add it). */
  const char *provider;
  const char *base_url;
  const char *api_key;
  const char *model;          /* NULL: the provider's default model */
  const char *fallback_model; /* after repeated overloads; NULL: none */
  const char *system;         /* system prompt; NULL: none */
  int64_t max_tokens;         /* per reply; 0: 4096 */
  uint32_t max_turns;         /* model replies per run; 0: 20 */
  int max_tool_concurrency;   /* 0: $AGENTLOOP_MAX_TOOL_CONCURRENCY or 10 */
  /* Retries (SPEC §6): tries per request incl. the first (0: 4), backoff
   * base and cap (0: 1000 / 32000 ms). */
  int retry_max_attempts;
  int64_t retry_base_ms;
  int64_t retry_cap_ms;
  /* Shared pacing: a cap on requests per minute for this endpoint and key
   * (0: none), with pace_burst of them allowed back to back (0: 1). The
   * cap and the cool-down after a 429 or 529 are shared by every agent
   * on the same client (docs/run.md "Shared pacing"). */
  int pace_rpm;
  int pace_burst;
  uint64_t rng_seed;          /* jitter seed; 0: from the clock */
  /* Transport timeouts; 0 keeps the defaults (10 s, 30 s, 120 s). */
  int64_t connect_timeout_ms;
  int64_t idle_timeout_ms;
  int64_t progress_timeout_ms;
  /* Bounds on a reply and its exchange (agentloop/limits.h); zeroes take
   * the defaults. */
  al_limits_t limits;
  const char *ca_file;        /* NULL: system bundle / $SSL_CERT_FILE */
  /* A shared client (agentloop/client.h), borrowed: it must outlive the
   * agent. NULL: the agent makes its own from ca_file and
   * connect_timeout_ms (ignored when a client is given). */
  al_client_t *client;
  /* Tools. workspace is the cwd of every tool (NULL: the process cwd).
   * builtin_tools adds bash, read_file, write_file, list_directory, done. */
  const char *workspace;
  bool builtin_tools;
  const char *const *allowed_paths; /* NULL-terminated; NULL: workspace */
  const char *const *denied_paths;  /* NULL-terminated; may be NULL */
  uint64_t tool_timeout_ms;   /* bash default timeout; 0: 120 s */
  uint64_t kill_grace_ms;     /* SIGTERM -> SIGKILL; 0: 2 s */
  /* bash commands keep the host's network inside the sandbox (config
   * sandbox.network); default false: no network, loopback included. */
  bool bash_network;
  /* Permissions. allow_tools / deny_tools: NULL-terminated name lists;
   * deny wins. */
  al_permission_mode_t permission_mode;
  const char *const *allow_tools;
  const char *const *deny_tools;
  /* The agent's tools (a main agent from a definition, as a child gets
   * from its own): only those named in tools_only (NULL-terminated; NULL:
   * every tool), never those in tools_never (may be NULL). Unlike
   * deny_tools, a tool left out is not offered to the model at all. It
   * holds for every source (built-ins, tools.d, MCP servers listed later,
   * in-process tools added later) and so for the agent's children. */
  const char *const *tools_only;
  const char *const *tools_never;
  al_permission_cb permission;
  void *permission_data;
  /* Session id for events (NULL: generated, "s_" + 16 hex digits). */
  const char *session_id;
  void *data; /* the embedder's; al_agent_get_data */
  /* Sandbox for bash and tools.d CLI tools (agentloop/sandbox.h). AUTO:
   * the best mode that works here; when that is "none", a non-interactive
   * run refuses bash and write/admin tools (interactive: asks). REQUIRED:
   * al_agent_new fails with AL_ENOTSUP unless bwrap mode works. OFF: no
   * sandbox. sandbox_bwrap / sandbox_helper: NULL finds them (test
   * seams); sandbox_no_landlock: act as if Landlock were missing. */
  al_sandbox_policy_t sandbox;
  const char *sandbox_bwrap;
  const char *sandbox_helper;
  bool sandbox_no_landlock;
  /* tools.d CLI tools (docs/tools.md): tools_d loads
   * $XDG_CONFIG_HOME/agentloop/tools.d and, when the project is trusted
   * (trust_project, or a decision recorded by `agentloop tools
   * --trust-project`), <workspace>/tools.d. tools_dirs: more directories,
   * trusted like user-level ones, NULL-terminated. Files that fail to load
   * are listed by al_agent_tools_json(). */
  bool tools_d;
  bool trust_project;
  const char *const *tools_dirs;
  /* Durable sessions (agentloopd). first_seq: the seq of the agent's first
   * event (a resumed session continues its transcript's numbering); 0: 1.
   * on_commit: history commit hook, may be NULL. */
  uint64_t first_seq;
  al_commit_cb on_commit;
  void *commit_data;
  /* The number of the agent's first run (a resumed session continues its
   * numbering); 0: 1. */
  uint64_t first_run;
  /* Context (SPEC §9, docs/context.md). models: the models catalogue
   * (agentloop/models.h), borrowed, it must outlive the agent; NULL: the
   * shipped catalogue. context_window: tokens, overrides the catalogue;
   * 0: the catalogue's (or SPEC §9's fallback). */
  const al_models_t *models;
  int64_t context_window;
  /* Micro-compaction (docs/context.md): before each request, results of
   * compactable tools older than the 3 most recent are replaced by a
   * placeholder when that saves at least micro_min_tokens (0: 20,000;
   * negative: never). compactable_tools: NULL-terminated names (NULL:
   * read_file, list_directory, bash, read_tool_output). tool_output_dir:
   * where cleared outputs are saved for read_tool_output (created; NULL:
   * kept in memory only). */
  int64_t micro_min_tokens;
  const char *const *compactable_tools;
  const char *tool_output_dir;
  /* Summary compaction (docs/context.md): automatic when the projected
   * next request exceeds window - max(13,000, max_tokens), unless
   * no_auto_compact. A "prompt is too long" answer always triggers one. */
  bool no_auto_compact;
  /* The kept tail of a summary compaction, in tokens: the most recent
   * messages that fit stay verbatim (0: min(20,000, window / 4)). */
  int64_t keep_recent;
  /* Anthropic prompt caching (docs/context.md): cache_control breakpoints
   * on the system prompt, the tool definitions and the moving end of the
   * conversation (4 at most); no_prompt_cache turns them off. */
  bool no_prompt_cache;
  /* Seed 004's message-count trim: before each request, when the history
   * holds more than max_messages messages (0: no limit; at least 3), the
   * oldest are dropped at a safe cut, the first user message kept, with a
   * notice (compaction events, trigger "max_messages"). */
  uint32_t max_messages;
  /* MCP servers (docs/mcp.md): JSON text in the .mcp.json shape,
   * {"mcpServers": {NAME: {command, args, env, ...}}, "startup_wait_ms"}.
   * They start in al_agent_new and run until al_agent_close; a bad
   * configuration fails al_agent_new with AL_EINVAL. NULL: none.
   * mcp_restart_base_ms: first restart backoff (0: 1000; a test seam). */
  const char *mcp_config;
  uint64_t mcp_restart_base_ms;
  /* Hooks (docs/hooks.md): command hooks as JSON text,
   * {"hooks": {EVENT: [{name, command: [argv], matcher, category,
   * timeout_ms, on_failure, sandbox}]}}; a bad configuration fails
   * al_agent_new with AL_EINVAL. hook: an in-process hook for every event
   * (may be NULL). */
  const char *hooks_config;
  al_hook_cb hook;
  void *hook_data;
  /* Also the servers of <workspace>/.mcp.json when the project is trusted
   * (trust_project, or a decision recorded by `agentloop tools
   * --trust-project`); mcp_config's win on a name both use. The trust file
   * and the project's file are read in libuv's pool, never on the loop; a
   * run's startup wait covers the read. An untrusted project's file is not
   * read (an mcp_warning with server ".mcp.json" says so), nor a broken one
   * (the warning has the error; the configured servers still start).
   * agentloopd sets it for every session. */
  bool mcp_project;
  /* Sub-agents (docs/subagents.md). subagents: the definitions a `task`
   * call may name (copied); the built-ins explore and general are always
   * there unless a definition of that name replaces them. builtin_tools
   * adds `task` unless no_task_tool. task_max_depth: a child at this depth
   * gets an error result from task (0: 2). task_token_budget: input +
   * output tokens per child, its own children's included (0: 400000);
   * past it the child is cancelled. task_preamble: what a fresh child's
   * system prompt ends with (the environment and AGENTS.md; the
   * configuration layer builds it). task_parallel_writers: children that
   * may write run beside other calls (default: alone). on_child: see
   * al_child_cb (children of children are reported too, with their own
   * parent). */
  const al_subagent_def_t *subagents;
  size_t n_subagents;
  bool no_task_tool;
  uint32_t task_max_depth;
  int64_t task_token_budget;
  const char *task_preamble;
  bool task_parallel_writers;
  al_child_cb on_child;
  void *child_data;
  /* A gate before every model request of a run, retries and paced ones
   * included, asked when the request would go out (fleet mode's fence,
   * docs/fleet.md: no request without time left on the job's lease).
   * false: nothing is sent and the run ends with error AL_EFENCED. NULL:
   * every request goes. */
  bool (*admit)(al_agent_t *agent, void *data);
  void *admit_data;
} al_agent_options_t;

void al_agent_options_init(al_agent_options_t *o);

/* Checks a base URL the way al_agent_new does (scheme http/https, a host,
 * a port 1..65535, no space or control byte, no query). 0, or AL_EINVAL
 * with the reason in why (e.g. "no host"). NULL (the public endpoint) is
 * fine. */
int al_agent_check_base_url(const char *url, char *why, size_t why_len);

/* Creates an agent on `loop`. Options are copied. Errors: AL_EINVAL (bad
 * provider, base URL, workspace that is not a directory), AL_ENOMEM. The
 * only blocking work is resolving the workspace and path lists (realpath),
 * done here, before any run. */
int al_agent_new(uv_loop_t *loop, const al_agent_options_t *opts,
                 al_agent_t **out);

void *al_agent_get_data(const al_agent_t *agent);

/* Compacts the history now (SPEC §9, docs/context.md): an LLM summary
 * replaces the older messages, keeping the first user message verbatim
 * and the most recent exchanges. instructions (may be NULL, copied) are
 * added to the summary request. On an idle agent it starts at once; during
 * a run it happens before the run's next request, once the current turn's
 * results are committed. Reported by compaction_started and
 * compaction_completed (or error). Errors: AL_ECLOSING, AL_ENOMEM. */
int al_agent_compact(al_agent_t *agent, const char *instructions);

/* What the models catalogue says about the model in use (the fallback
 * model once switched), with the context_window option applied. */
void al_agent_model_info(const al_agent_t *agent, al_model_info_t *out);
/* The session id (NUL-terminated, owned by the agent). */
const char *al_agent_session(const al_agent_t *agent);

/* Registers an in-process tool before or between runs (AL_EBUSY during a
 * run). The definition is copied. AL_EEXIST: a tool of that name exists;
 * AL_EINVAL: bad name, missing run/description, schema not a JSON object. */
int al_agent_add_tool(al_agent_t *agent, const al_tool_def_t *def);

/* Subscribers, called in subscription order with every event (see
 * events.h). A callback may unsubscribe, subscribe, cancel, or close the
 * agent. *out may be NULL when the caller never unsubscribes. */
int al_agent_subscribe(al_agent_t *agent, al_event_cb cb, void *data,
                       al_sub_t **out);
void al_agent_unsubscribe(al_agent_t *agent, al_sub_t *sub);

/* Starts a run with the user's text. run_started is posted before it
 * returns, and the first turn_started too unless session_start /
 * user_prompt_submit hooks run or MCP servers are still starting (then it
 * comes once they are done, at most startup_wait_ms later for servers). AL_EBUSY while a run is
 * active, AL_EINVAL for empty text, AL_ECLOSING after close. */
int al_agent_run(al_agent_t *agent, const char *text);
bool al_agent_running(const al_agent_t *agent);

/* Cancels the active run at whatever point it is: the request is closed,
 * tools are cancelled (process groups: SIGTERM, SIGKILL after the grace
 * period), every open tool_use gets "operation cancelled by user", and
 * `interrupted` is posted before this returns. Nothing of that run fires
 * afterwards. 0, or AL_ESTATE when no run is active. */
int al_agent_cancel(al_agent_t *agent);

/* Answers approval_required `request` (its `request` field). AL_ENOTFOUND:
 * no such pending approval (already resolved, or cancelled). */
int al_agent_approve(al_agent_t *agent, const char *request,
                     al_approval_t decision);

/* Totals of the last (or current) run. */
typedef struct al_agent_stats_s {
  uint32_t turns;            /* model replies committed */
  uint32_t requests;         /* HTTP requests made, retries included */
  uint64_t duration_ms;      /* run start -> end (or now) */
  uint64_t duration_api_ms;  /* time with a model request in flight */
  uint64_t input_tokens;
  uint64_t output_tokens;
  uint64_t cache_read_input_tokens;
  uint64_t cache_creation_input_tokens;
  uint64_t reasoning_tokens; /* a part of output_tokens */
  /* The children's share of the counts above (sub-agents' usage is
   * included in the parent's), and the cost in USD of the whole at each
   * agent's model prices (-1: some price unknown). */
  uint64_t children_input_tokens;
  uint64_t children_output_tokens;
  double cost_usd;
} al_agent_stats_t;
void al_agent_stats(const al_agent_t *agent, al_agent_stats_t *out);

/* The history as JSON text (al_free it): {"system":…, "messages":[…]} in
 * the normalized Anthropic shape. AL_ENOMEM. */
int al_agent_history_json(const al_agent_t *agent, char **out);

/* Replaces the history of an idle agent that has not run yet with a saved
 * one: json is {"system"?: string|null, "messages": [...]} (the form of
 * al_agent_history_json; len bytes). The messages must pass the history
 * validator (roles alternate from user, every tool_use answered in the
 * next message, no open tool turn); an empty array is allowed. A present
 * "system" replaces the options' system prompt. AL_EBUSY: the agent has
 * run or is running; AL_EINVAL: not that shape or not a valid history;
 * AL_ENOMEM. */
int al_agent_load_history_json(al_agent_t *agent, const char *json,
                               size_t len);

/* The agent's tools and tools.d load errors as JSON text (al_free it):
 * {"sandbox": {al_sandbox_info_json}, "tools": [{"name", "description",
 * "category", "source", "input_schema"}], "errors": ["FILE:LINE:COL:
 * reason", ...]}. source is "builtin", "in-process" or the tools.d file.
 * AL_ENOMEM. */
int al_agent_tools_json(const al_agent_t *agent, char **out);

/* The agent's children (sub-agents started by `task`, foreground and
 * background, running or finished) as JSON text (al_free it):
 * [{"id":"t1","agent":"explore","description":..,"background":bool,
 *   "state":"running|completed|failed|cancelled","session":..,
 *   "parent_call":..,"depth":1,"usage":{"input_tokens":..,
 *   "output_tokens":..}}]. AL_ENOMEM. */
int al_agent_tasks_json(const al_agent_t *agent, char **out);

/* Cancels child task_id (its run and tools; its tool call, or for a
 * background child its delivered result, says cancelled). AL_ENOENT: no
 * such child running. */
int al_agent_task_cancel(al_agent_t *agent, const char *task_id);

/* Cancels any run (posting interrupted), then closes: the request, the
 * tools (waiting for killed process groups), the HTTP client. cb (may be
 * NULL) runs on a later iteration; the agent is freed after it returns.
 * Call once; safe from inside a subscriber. */
void al_agent_close(al_agent_t *agent, void (*cb)(al_agent_t *agent));

#ifdef __cplusplus
}
#endif
#endif
