/* The agent's private structure, shared by agent.c (the run/turn state
 * machine), agent_tools.c (tool registry, in-process tool contexts) and
 * gate.c (input check, permission policy, approvals). */
#ifndef AL_LOOP_AGENT_PRIV_H
#define AL_LOOP_AGENT_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agent.h"
#include "common/common.h"
#include "events/events.h"
#include "executor/executor.h"
#include "loop/budget.h"
#include "loop/history.h"
#include "loop/retry.h"
#include "provider/provider.h"
#include "transport/transport.h"

struct al_hook_report_s;
struct al_hooks_run_s;

#define AG_TOOL_DEFAULT_TIMEOUT_MS 120000

/* Where the agent is: one enum, written only by set_state() in agent.c,
 * which logs every change (old -> new) at debug level.
 * XX(name, text for the log) */
#define AG_STATE_MAP(XX)                                                   \
  XX(IDLE, "idle")             /* no run */                                \
  XX(STREAMING, "streaming")   /* a model request of the run in flight */  \
  XX(BACKOFF, "backoff")       /* waiting to retry that request */         \
  XX(TOOLS, "tools")           /* reply committed, waiting for results */  \
  XX(SUMMARY, "summary")       /* the max_turns summary request */         \
  XX(COMPACTING, "compacting") /* the summary-compaction request */        \
  XX(ENDING, "ending")         /* cancel is posting the run's last events */ \
  XX(CLOSING, "closing")       /* al_agent_close was called */

typedef enum {
#define AG_STATE_GEN(name, text) AG_##name,
  AG_STATE_MAP(AG_STATE_GEN)
#undef AG_STATE_GEN
} ag_state_t;

const char *al__agent_state_name(ag_state_t st);

/* One registered tool. The executor sees `gate`, whose start checks the
 * input and the permission policy and then hands the call to `inner` (the
 * built-in or in-process implementation). */
typedef struct ag_tool_s {
  al_list_t node;
  al_agent_t *agent;
  al_tool_impl_t gate;
  al_tool_impl_t *inner;
  void (*free_inner)(al_tool_impl_t *impl);
  char *name;
  char *description;
  json_t *schema;
  al_tool_category_t category;
  bool always; /* approved with "always" */
  /* In-process tools. */
  bool inproc;
  al_tool_impl_t inproc_impl;
  al_tool_def_t def; /* run, cancel, data, timeout_ms, concurrency_safe */
  bool spawns;        /* runs a child process (bash, tools.d) */
  const char *source; /* "builtin", "in-process" or a tools.d file */
  /* MCP tools (agent_mcp.c): the server and the server's name for it. A
   * tool the server no longer lists is `removed` at a turn boundary: it
   * stays allocated (a retired call may still point at its gate) but is
   * neither found nor offered. */
  struct al_mcp_server_s *mcp;
  char *mcp_tool;
  bool mcp_safe;
  bool removed;
  al_tool_impl_t mcp_impl;
  /* Tool budget (agent_mcp.c): not in tool_defs (offered through
   * mcp_tool_search); mcp_always: the server's always_load names it. */
  bool mcp_deferred;
  bool mcp_always;
} ag_tool_t;

/* An approval the run waits for. */
typedef struct ag_approval_s {
  al_list_t node;
  char id[96]; /* task: a child's carry its path (al__task_approval_prefix) */
  al_tool_call_t *call;
  ag_tool_t *tool;
} ag_approval_t;

/* An executor for one reply. Replies that are discarded (retry, cancel)
 * keep theirs until its aborted calls have reported, then close it. */
typedef struct ag_exec_s {
  al_executor_t ex;
  al_list_t node;
  al_agent_t *agent;
  bool retiring;
  bool closing;
  /* post_tool_use runs of its calls (agent_hooks.c ag_post_t), and how
   * many have not decided yet. */
  al_list_t posts;
  size_t posts_pending;
} ag_exec_t;

typedef struct ag_post_s ag_post_t;

/* Per tool_use block of the reply being streamed. */
typedef struct ag_block_s {
  char *call_id; /* tool_use blocks */
  bool is_tool;
  bool stopped;
} ag_block_t;

struct al_agent_s {
  void *data;
  uv_loop_t *loop;

  /* Configuration (copied). */
  const al_provider_t *provider;
  char *base_url; /* without a trailing '/' (and without "/v1") */
  bool base_has_v1;
  char *api_key;
  char *model;      /* the model in use (the fallback once switched) */
  char *model_main;
  char *fallback_model;
  int64_t max_tokens;
  uint32_t max_turns;
  int concurrency;
  al_retry_options_t ropts;
  al_retry_rng_t rng;
  char *workspace;
  char **allowed_paths;
  char **denied_paths;
  uint64_t tool_timeout_ms;
  bool bash_network;
  uint64_t kill_grace_ms;
  al_permission_mode_t mode;
  char **allow_tools;
  char **deny_tools;
  al_permission_cb permission;
  void *permission_data;
  int64_t idle_timeout_ms;
  int64_t progress_timeout_ms;
  al_limits_t limits;

  al_http_client_t *client;
  bool own_client; /* made here (else borrowed from the options) */
  al__events_bus_t *bus;
  al__events_session_t session;
  al_history_t history;
  al_list_t tools; /* ag_tool_t */
  json_t *tool_defs; /* [{name, description, input_schema}] */
  al_list_t approvals;
  uint64_t next_approval;
  al_list_t execs; /* ag_exec_t: current one last */

  /* The run. */
  ag_state_t state;
  uint64_t gen; /* bumped whenever a run ends: stale work bails out */
  /* ts_ns of the chunk that last marked progress: the deltas of one chunk
   * share it, and one mark per chunk is all the stall timer needs. */
  uint64_t progress_ts;
  uint64_t run_id;
  uint32_t turn;
  al_retry_state_t retry;
  int64_t cur_max_tokens;
  al_history_t summary_hist;
  al_agent_stats_t stats;
  uint64_t run_t0;
  uint64_t api_t0;
  char *done_text; /* the done tool's message */
  /* pause_turn: continuations of this turn so far, and the text of the
   * paused replies (the final answer is the whole turn's text). */
  uint32_t pauses;
  char *pause_text;

  /* The current attempt. */
  al_http_request_t *req;
  al_pstream_t ps;
  bool ps_ready;
  bool in_feed;
  bool ps_dead; /* free ps once the feed returns */
  bool delivered; /* content reached subscribers this attempt */
  /* The text of the reply streaming now: a cancel keeps it in history
   * (al_agent_cancel), so the next request shows the model what it had
   * said and that it was cut. Reset with each attempt. */
  al_buf_t partial;
  bool partial_cut;
  bool stream_failed;
  al_retry_err_t stream_err;
  char stream_msg[256];
  char stream_type[64];
  char *msg_id;
  ag_block_t *blocks;
  size_t nblocks;
  ag_exec_t *cur; /* executor of the reply being streamed / run */
  json_t *stamps; /* call_id -> SSE send stamp */

  uv_timer_t backoff;
  /* Close: handles still closing and tool work still held. */
  int pending;
  uint64_t holds;
  uint64_t live_ctx;
  bool finishing;
  uv_idle_t finish;
  void (*close_cb)(al_agent_t *a);

  /* Sandbox and tools.d (agent_tools.c). */
  struct al_sandbox_s *sandbox; /* NULL: no tool spawns a child */
  al_sandbox_info_t sandbox_info;
  bool sandbox_refuse; /* mode none under AUTO: spawning/write tools refused */
  void *cli_set;       /* al_cli_set_t: the tools.d definitions and errors */
  /* The workspace's tools.d when it is a directory (NULL otherwise), and
   * whether it loaded: listed so a skipped untrusted one is visible. */
  char *project_tools_d;
  bool project_trusted;
  /* MCP servers (agent_mcp.c; NULL: none configured). mcp_gens[i]: the
   * tool-list generation of server i that the registry holds. */
  struct al_mcp_s *mcp;
  uint64_t *mcp_gens;
  uint64_t mcp_t0;   /* when the servers started (ns) */
  bool mcp_waiting;  /* the run waits for servers (backoff timer armed) */
  bool mcp_startup_posted; /* mcp_startup_complete is out (once) */
  /* mcp_project: the read of the project's .mcp.json in the pool (NULL
   * when none is under way); the startup wait meanwhile; restart seam. */
  void *mcp_load;
  uint64_t mcp_wait_ms;
  uint64_t mcp_restart_base_ms;
  uint64_t mcp_wait_t0;    /* when the run began waiting (ns) */
  /* Tool budget: tool_budget_pct/max_tools of the config, the names mcp_tool_search
   * asked for (sent from the next turn boundary on), and the search tool
   * once registered (removed while nothing is deferred). */
  uint32_t mcp_budget_pct;
  uint32_t mcp_budget_max_tools;
  json_t *mcp_loaded;
  ag_tool_t *mcp_search;
  /* Calls to mcp__ names not registered (yet): their server is still
   * starting, or the project's .mcp.json is still being read
   * (agent_mcp.c ag_mcp_wait_t); the executor sees one of the two impls
   * (unsafe while the tool's hints are unknown). */
  al_list_t mcp_waits;
  al_tool_impl_t mcp_wait_impl;
  al_tool_impl_t mcp_wait_safe_impl;
  /* Hooks (agent_hooks.c; NULL: none). hook_runs: the agent-level runs
   * in flight (stop, user_prompt_submit; post_tool_use runs belong to
   * their executor, ag_exec_t.posts), cancelled when
   * the run ends; hook_waits: calls held by pre_tool_use hooks (gate.c). */
  struct al_hooks_s *hooks;
  al_list_t hook_waits;
  struct al_hooks_run_s *hook_runs[64];
  size_t n_hook_runs;
  uint32_t stop_blocks; /* consecutive stop-hook continuations this run */
  int prompt_pending;   /* session_start / user_prompt_submit runs left */
  bool prompt_denied;
  char *prompt_why;     /* the blocking hook's reason */
  char *stop_text;      /* the final text held while stop hooks run */
  /* Durable sessions: history commit hook (al_agent_options_t). */
  al_commit_cb on_commit;
  void *commit_data;
  bool has_run; /* al_agent_run was called once (load refuses after) */

  /* Context (SPEC §9): the catalogue (own_models when the options gave
   * none), the window override and what the catalogue says about a->model
   * (refreshed when the model changes). */
  const al_models_t *models;
  al_models_t *own_models;
  int64_t window_override;
  al_model_info_t model_info;
  al_budget_t budget;
  /* Micro-compaction and the tool output cache (agent_context.c). */
  json_t *tool_cache;    /* call id -> original content of a cleared result */
  char **compactable;    /* tool names, NULL-terminated */
  int64_t micro_min_tokens; /* < 0: off */
  char *tool_output_dir; /* NULL: the cache lives in memory only */
  uint64_t stats_micro_saved;
  /* Summary compaction (agent.c, compact.c). */
  bool auto_compact;
  uint32_t max_messages;
  int64_t keep_recent; /* tokens; 0: keep_tokens()'s default */
  bool prompt_cache;
  al_history_t compact_hist;  /* the summary request's history */
  size_t compact_cut;         /* messages[cut..] are kept */
  const char *compact_trigger; /* "auto", "manual", "overflow" (static) */
  char *compact_instructions; /* manual: the user's, or NULL */
  int64_t compact_before;
  int compact_failures;       /* in a row */
  bool compact_in_run;        /* the run continues after it */
  bool compact_requested;     /* manual, during a run: at the next request */
  bool compacted_this_turn;   /* one automatic compaction per turn */
  /* The run's last automatic compaction left this many tokens (-1: none
   * yet): another in the same run only when that was at most 0.6 x the
   * trigger (RESEARCH-WAVE2 C5), so a compaction that barely helped is
   * not repeated turn after turn. */
  int64_t run_compact_after;
  int64_t compact_after; /* tokens after the last compaction */
  bool overflow_retried;      /* one "prompt too long" compaction a request */
  uint64_t stats_compact_saved;
  /* task: sub-agents (task.c alone writes it; NULL until needed). */
  struct ag_tasks_s *tasks;
};

/* The largest saved output read back (read_tool_output). */
#define AL_CONTEXT_MAX_OUTPUT ((size_t)64 << 20)

/* agent_context.c */
int al__agent_context_init(al_agent_t *a, const al_agent_options_t *o);
void al__agent_context_free(al_agent_t *a);
/* Micro-compaction before a request of the main history; posts
 * micro_compaction. True when the caller must stop (as al__agent_post). */
bool al__agent_micro(al_agent_t *a);

/* agent.c */
/* Posts ev with the run's numbers. Returns true when the caller must stop:
 * a subscriber ended the run (gen changed) or closed the agent. */
bool al__agent_post(al_agent_t *a, al_event_t *ev);
void al__agent_maybe_finish(al_agent_t *a);
/* agent_limits.c: the agent's limits onto one attempt's options. */
void al__agent_limits_request(const al_limits_t *l,
                              al_http_request_options_t *ro);
void al__agent_limits_pstream(const al_limits_t *l, al_pstream_options_t *so);

/* agent_tools.c */
/* Sandbox probe and tools.d loading (before al__agent_tools_init). */
int al__agent_sandbox_init(al_agent_t *a, const al_agent_options_t *o);
int al__agent_tools_init(al_agent_t *a);
/* Registers the loaded tools.d tools (after the built-ins). */
int al__agent_cli_tools_init(al_agent_t *a);
void al__agent_tools_free(al_agent_t *a);
const al_tool_impl_t *al__agent_lookup(al_executor_t *ex, const char *name);

/* gate.c */
/* Points t->gate at the gate (input check, policy, approvals). */
void al__gate_bind(ag_tool_t *t);
/* Cancels every waiting approval's call (used by cancel). */
void al__agent_approvals_drop(al_agent_t *a);
const char *al__tool_category_name(al_tool_category_t c);
/* The tool definitions sent to the model: every tool but the denied ones
 * (a new reference). */
json_t *al__agent_offered_tools(al_agent_t *a);
/* Posts a tool event for call with input as text. Same return as
 * al__agent_post. */
bool al__agent_post_tool(al_agent_t *a, al_event_type_t type,
                         const al_tool_call_t *call, const char *input);
/* The input as compact JSON (al_free), NULL when out of memory. */
char *al__tool_input_text(const json_t *input);
/* Completes call with an error result printf'd from fmt (two %s). */
/* al_tool_ctx_complete with content blocks for the history (an image
 * read back); content is their text view. */
void al__tool_ctx_complete_blocks(al_tool_ctx_t *ctx, bool is_error,
                                  const char *content, size_t len,
                                  const json_t *blocks);
void al__call_complete_fmt(al_tool_call_t *call, const char *fmt,
                           const char *a1, const char *a2);
int al__agent_add_tool_impl(al_agent_t *a, al_tool_impl_t *inner,
                            void (*free_inner)(al_tool_impl_t *),
                            const char *description, const char *schema,
                            al_tool_category_t category);

/* agent_tools.c: registry entries (also used by agent_mcp.c). */
int al__agent_add_entry(al_agent_t *a, const char *name, al_tool_impl_t *inner,
                        void (*free_inner)(al_tool_impl_t *),
                        const char *description, const char *schema,
                        al_tool_category_t category, ag_tool_t **out);
ag_tool_t *al__agent_tool_find(al_agent_t *a, const char *name);
/* al_agent_add_tool without the idle check (agent_mcp.c's search tool,
 * registered at a turn boundary). */
int al__agent_add_inproc(al_agent_t *a, const al_tool_def_t *def,
                         ag_tool_t **out);

/* agent_hooks.c */
int al__agent_hooks_init(al_agent_t *a, const al_agent_options_t *o);
void al__agent_hooks_free(al_agent_t *a);
bool al__agent_hooks_idle(const al_agent_t *a);
/* The JSON input every hook gets: session, run, turn, cwd (new ref). */
json_t *al__agent_hook_input(al_agent_t *a);
/* Posts hook_executed for one hook (call may be NULL). */
void al__agent_hook_report(al_agent_t *a, const struct al_hook_report_s *r,
                           const al_tool_call_t *call);
/* Cancels the agent-level hook runs (the run ended). */
void al__agent_hooks_cancel_runs(al_agent_t *a);
/* A call's result arrived (exec_on_completed): starts the post_tool_use
 * hooks that match it. When the last of a turn's hooks decides and the
 * turn's calls are all done, it calls al__agent_tools_done. */
void al__agent_post_hook_call(al_agent_t *a, struct ag_exec_s *box,
                              al_tool_call_t *call);
/* The result the model gets for call (its hooks' deny/replace/context
 * applied; borrowed until the box closes). 1 while its hooks still run
 * (the outputs then are the call's own), else 0. */
int al__agent_post_hook_result(const struct ag_exec_s *box,
                               const al_tool_call_t *call, const char **text,
                               size_t *len, bool *is_error);
/* What the history gets for a decided call (new ref, NULL on OOM): its
 * content blocks (an MCP image) or text, with its hooks' decision applied
 * (a deny or replace is text; added context follows the blocks as a text
 * block). */
json_t *al__agent_post_content(const struct ag_exec_s *box,
                               const al_tool_call_t *call, bool *is_error);
/* The box's calls are void or done: kills the hooks still running (nothing
 * is called back) and forgets every decision. */
void al__agent_post_hooks_drop(struct ag_exec_s *box);
/* A final reply: stop hooks may continue the run. true when they run (the
 * agent continues in al__agent_stop_hooks_done). */
bool al__agent_stop_hooks_start(al_agent_t *a, const char *text, size_t len);

/* Before the first turn of a run: session_start (first run only) and
 * user_prompt_submit hooks. true when they run (they call
 * al__agent_begin_turns, or end the run when the prompt is blocked). */
bool al__agent_prompt_hooks_start(al_agent_t *a, const char *prompt,
                                  bool first);

/* Before a compaction: the pre_compact hooks, observational (the
 * compaction does not wait; their hook_executed events report them). */
void al__agent_pre_compact_hooks(al_agent_t *a, const char *trigger,
                                 int64_t tokens_before);
/* task: subagent_start / subagent_stop hooks (observational); fields are
 * added to the input. */
void al__agent_subagent_hooks(al_agent_t *a, bool stop, const json_t *fields);

/* agent.c, for agent_hooks.c */
/* The MCP startup wait, then the first turn. */
void al__agent_begin_turns(al_agent_t *a);
void al__agent_end_final(al_agent_t *a, const char *text, size_t len);
void al__agent_end_error(al_agent_t *a, int code, const char *message);
void al__agent_continue(al_agent_t *a); /* start the next turn */
void al__agent_tools_done(al_agent_t *a);

/* agent_mcp.c */
/* Checks o->mcp_config (AL_EINVAL with the reason logged). */
int al__agent_mcp_check(const al_agent_options_t *o);
/* Starts the servers of o->mcp_config (nothing blocks). Out of memory
 * leaves the agent without MCP servers (logged). */
void al__agent_mcp_init(al_agent_t *a, const al_agent_options_t *o);
/* [{name, state, tools, ms, error, pid, protocol}] of the servers. */
json_t *al__agent_mcp_json(const al_agent_t *a);
/* At a turn boundary: registers the tools of servers that became ready
 * and applies changed lists. true when the run ended meanwhile (a
 * subscriber cancelled it). */
bool al__agent_mcp_sync(al_agent_t *a);
/* The executor's lookup found no tool named `name`: an MCP name whose
 * server is still starting (or may be: the project's .mcp.json is being
 * read) gets an implementation that waits for it, then hands the call to
 * the registered tool, or completes it with an error naming the server
 * and why (never "Unknown tool" for a server that is starting). NULL
 * otherwise. */
const al_tool_impl_t *al__agent_mcp_lookup(al_agent_t *a, const char *name);
/* Whether the run should wait for servers still starting, and how long
 * (ms). */
bool al__agent_mcp_should_wait(al_agent_t *a, uint64_t *ms);
/* Closes the servers; a->pending covers it. */
void al__agent_mcp_close(al_agent_t *a);
/* Called by agent.c when the startup wait ends (all settled or timeout). */
void al__agent_mcp_wait_over(al_agent_t *a);
/* The start-up wait of the first run ended: posts mcp_startup_complete
 * (once per agent). true when the run ended meanwhile. */
bool al__agent_mcp_startup_post(al_agent_t *a);
/* gate.c, after tool_use_started: posts mcp_tool_call_begin when call is
 * an MCP call whose request went out. true when the run ended. */
bool al__agent_mcp_began(al_tool_call_t *call);
/* al_agent_close was called: nothing of the agent may fire any more. */
static inline bool ag_closing(const al_agent_t *a) {
  return a->state == AG_CLOSING;
}

static inline al_slice_t ag_slice(const char *s) {
  al_slice_t sl;

  sl.ptr = s;
  sl.len = s != NULL ? strlen(s) : 0;
  return sl;
}

#endif
