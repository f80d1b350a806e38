/* The agent's private structure and the calls between its modules
 * (STYLE §6.1): agent.c (public API), run.c (the driver), attempt.c,
 * compact_run.c, gate.c, hookpoints.c, mcp_attach.c, context.c,
 * registry.c and inproc.c, core.c. Each module's state is one sub-struct
 * of struct al_agent_s, written by its own file only; calls go down, and
 * a module talks up only through core.c or a callback the driver
 * installed (ag_outcome_t, ag_hooks_outcome_t, the MCP settled call). */
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
#include "transport/pace.h"
#include "transport/transport.h"

struct al_hook_report_s;
struct al_hooks_run_s;

#define AG_TOOL_DEFAULT_TIMEOUT_MS 120000

/* Where the agent is: one enum, written only by set_state() in run.c,
 * which logs every change (old -> new) at debug level.
 * XX(name, text for the log) */
#define AG_STATE_MAP(XX)                                                   \
  XX(IDLE, "idle")             /* no run */                                \
  XX(HOOKS, "hooks")           /* prompt or stop hooks decide */           \
  XX(WAIT_MCP, "wait_mcp")     /* MCP servers still starting */            \
  XX(STREAMING, "streaming")   /* a model request of the run in flight */  \
  XX(BACKOFF, "backoff")       /* waiting to retry that request */         \
  XX(PACED, "paced")           /* a request waits for the shared pacer */  \
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
  /* MCP tools (mcp_attach.c): the server and the server's name for it. A
   * tool the server no longer lists is `removed` at a turn boundary: it
   * stays allocated (a retired call may still point at its gate) but is
   * neither found nor offered. */
  struct al_mcp_server_s *mcp;
  char *mcp_tool;
  bool mcp_safe;
  bool removed;
  al_tool_impl_t mcp_impl;
  /* Tool budget (mcp_attach.c): not in tool_defs (offered through
   * mcp_tool_search); mcp_always: the server's always_load names it. */
  bool mcp_deferred;
  bool mcp_always;
} ag_tool_t;

/* An approval the run waits for. */
typedef struct ag_approval_s {
  al_list_t node;
  char id[96]; /* a child's carries its path (al__task_approval_prefix) */
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
  /* post_tool_use runs of its calls (hookpoints.c ag_post_t), and how
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

/* How one model request ended (attempt.c -> the driver, run.c). The
 * attempt has done its own part first: a failed or void reply is
 * discarded (tombstone, executor retired); a good one is committed to the
 * history and its usage posted. */
typedef enum {
  AG_OUT_FINAL,      /* no tool call open: text is the answer */
  AG_OUT_TOOLS,      /* tool calls committed; their results are awaited */
  AG_OUT_PAUSE,      /* pause_turn: the provider paused the turn */
  AG_OUT_MAX_TOKENS, /* cut inside a tool call by max_tokens (discarded) */
  AG_OUT_FAILED /* code != 0: the run's error; else err for the retry policy */
} ag_outcome_kind_t;

typedef struct ag_outcome_s {
  ag_outcome_kind_t kind;
  al_stop_reason_t stop;
  /* FINAL, PAUSE (and the summary or compaction reply): the reply's text,
   * one string (single, a reference) or joined; the driver releases it. */
  al_buf_t text;
  json_t *single;
  /* FAILED */
  int code;
  al_retry_err_t err;
  int status;
  const char *message;
} ag_outcome_t;

/* What the hook runner reports to the driver (a->hooks.on_outcome). */
typedef enum {
  AG_HOOKS_PROMPT_PASSED,  /* prompt hooks done: the turns may begin */
  AG_HOOKS_PROMPT_BLOCKED, /* a prompt hook denied: text says why */
  AG_HOOKS_POSTS_DECIDED,  /* the turn's post_tool_use hooks all decided */
  AG_HOOKS_STOP_CONTINUE,  /* a stop hook sent the model back to work */
  AG_HOOKS_STOP_FINAL,     /* stop hooks done: text is the final answer */
  AG_HOOKS_FAILED          /* code, text: the run cannot go on */
} ag_hooks_outcome_kind_t;

typedef struct ag_hooks_outcome_s {
  ag_hooks_outcome_kind_t kind;
  int code;
  const char *text;
  size_t len;
} ag_hooks_outcome_t;

/* The agent's state, one sub-struct per module (STYLE §6.1). A sub-struct
 * is written only by the file named in its comment; other files read it,
 * or ask that file through a function. The top-level fields are the
 * configuration, copied by al_agent_new and read everywhere, and the
 * conversation the driver and compaction share. */

/* core.c: the kernel every module may call (post, hold/release for close). */
typedef struct ag_core_s {
  al__events_bus_t *bus;
  al__events_session_t session;
  /* Close: handles still closing and tool work still held. */
  int pending;
  uint64_t holds;
  bool finishing;
  uv_idle_t finish;
  void (*close_cb)(al_agent_t *a);
  void (*on_free)(al_agent_t *a); /* agent.c: frees every module's state */
  /* Durable sessions: history commit hook (al_agent_options_t). */
  al_commit_cb on_commit;
  void *commit_data;
  /* The embedder's request gate (al_agent_options_t.admit). */
  bool (*admit)(al_agent_t *agent, void *data);
  void *admit_data;
} ag_core_t;

/* run.c: the run driver. */
typedef struct ag_run_s {
  ag_state_t state;
  uint64_t gen; /* bumped whenever a run ends: stale work bails out */
  uint64_t run_id;
  uint32_t turn;
  al_retry_state_t retry;
  al_retry_rng_t rng;
  int64_t cur_max_tokens;
  al_history_t summary_hist;
  al_agent_stats_t stats; /* turns, requests, duration_ms */
  uint64_t run_t0;
  char *done_text; /* the done tool's message */
  /* pause_turn: continuations of this turn so far, and the text of the
   * paused replies (the final answer is the whole turn's text). */
  uint32_t pauses;
  char *pause_text;
  uv_timer_t backoff; /* retry backoff, and the MCP start-up wait */
  /* Shared pacing (transport/pace.h): the pacer of this endpoint and key
   * on the agent's client (looked up at the first request), the wait
   * while PACED and the state the request was sent from. */
  al_pace_t *pace;
  al_pace_wait_t pace_wait;
  ag_state_t pace_from;
  int pace_rpm;
  int pace_burst;
  bool has_run; /* al_agent_run was called once (load refuses after) */
  bool overflow_retried; /* one "prompt too long" compaction a request */
} ag_run_t;

/* attempt.c: the model request in flight and the executors of replies. */
typedef struct ag_att_s {
  al_http_request_t *req;
  al_pstream_t ps;
  bool ps_ready;
  bool in_feed;
  bool ps_dead; /* free ps once the feed returns */
  bool delivered; /* content reached subscribers this attempt */
  /* ts_ns of the chunk that last marked progress: the deltas of one chunk
   * share it, and one mark per chunk is all the stall timer needs. */
  uint64_t progress_ts;
  uint64_t api_t0;
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
  /* This run's tokens and time with a request in flight (al_agent_stats;
   * the other fields are the driver's, a->run.stats). */
  al_agent_stats_t usage;
  al_list_t execs; /* ag_exec_t: current one last */
  /* Installed by the driver: how an attempt ended, and the current
   * reply's executor going idle (every call has its result). */
  void (*on_outcome)(al_agent_t *a, ag_outcome_t *o);
  void (*on_settled)(al_agent_t *a);
} ag_att_t;

/* gate.c: permission policy, approvals, calls held by pre_tool_use hooks. */
typedef struct ag_policy_s {
  al_permission_mode_t mode;
  char **allow_tools;
  char **deny_tools;
  al_permission_cb permission;
  void *permission_data;
  al_list_t approvals;
  uint64_t next_approval;
  al_list_t hook_waits; /* calls held by pre_tool_use hooks */
} ag_policy_t;

/* hookpoints.c (NULL set: no hooks). runs: the agent-level runs in flight
 * (stop, user_prompt_submit; post_tool_use runs belong to their executor,
 * ag_exec_t.posts), cancelled when the run ends. */
typedef struct ag_hooks_s {
  struct al_hooks_s *set;
  struct al_hooks_run_s *runs[64];
  size_t n_runs;
  uint32_t stop_blocks; /* consecutive stop-hook continuations this run */
  int prompt_pending;   /* session_start / user_prompt_submit runs left */
  bool prompt_denied;
  char *prompt_why;     /* the blocking hook's reason */
  char *stop_text;      /* the final text held while stop hooks run */
  /* Installed by the driver (al__agent_hooks_driver). */
  void (*on_outcome)(al_agent_t *a, const ag_hooks_outcome_t *o);
} ag_hooks_t;

/* mcp_attach.c: MCP servers (NULL set: none configured). gens[i]: the
 * tool-list generation of server i that the registry holds. */
typedef struct ag_mcp_s {
  struct al_mcp_s *set;
  uint64_t *gens;
  uint64_t t0;   /* when the servers started (ns) */
  bool startup_posted; /* mcp_startup_complete is out (once) */
  /* load: the read of the project's .mcp.json in the pool (NULL when none
   * is under way); the startup wait meanwhile; restart seam. */
  void *load;
  uint64_t wait_ms;
  uint64_t restart_base_ms;
  uint64_t wait_t0;    /* when the run began waiting (ns) */
  /* Tool budget: tool_budget_pct/max_tools of the config, the names
   * mcp_tool_search asked for (sent from the next turn boundary on), and
   * the search tool once registered (removed while nothing is deferred). */
  uint32_t budget_pct;
  uint32_t budget_max_tools;
  json_t *loaded;
  ag_tool_t *search;
  /* Calls to mcp__ names not registered (yet): their server is still
   * starting, or the project's .mcp.json is still being read
   * (ag_mcp_wait_t); the executor sees one of the two impls (unsafe while
   * the tool's hints are unknown). */
  al_list_t waits;
  al_tool_impl_t wait_impl;
  al_tool_impl_t wait_safe_impl;
  /* Installed by the driver (al__agent_mcp_driver): the servers settled
   * (all ready or failed) or the project's file was read. */
  void (*on_settled)(al_agent_t *a);
} ag_mcp_t;

/* context.c: micro-compaction and the tool output cache. */
typedef struct ag_ctx_s {
  json_t *tool_cache;    /* call id -> original content of a cleared result */
  char **compactable;    /* tool names, NULL-terminated */
  int64_t micro_min_tokens; /* < 0: off */
  char *tool_output_dir; /* NULL: the cache lives in memory only */
  uint64_t micro_saved;
} ag_ctx_t;

/* compact_run.c: summary compaction as a sub-run of the driver. */
typedef struct ag_compact_s {
  bool auto_compact;
  uint32_t max_messages;
  int64_t keep_recent; /* tokens; 0: keep_tokens()'s default */
  al_history_t hist;  /* the summary request's history */
  size_t cut;         /* messages[cut..] are kept */
  const char *trigger; /* "auto", "manual", "overflow" (static) */
  char *instructions; /* manual: the user's, or NULL */
  int64_t before;
  int failures;       /* in a row */
  bool in_run;        /* the run continues after it */
  bool requested;     /* manual, during a run: at the next request */
  bool this_turn;     /* one automatic compaction per turn */
  /* The run's last automatic compaction left this many tokens (-1: none
   * yet): another in the same run only when that was at most 0.6 x the
   * trigger (RESEARCH-WAVE2 C5), so a compaction that barely helped is
   * not repeated turn after turn. */
  int64_t run_after;
  int64_t after; /* tokens after the last compaction */
  uint64_t saved;
} ag_compact_t;

/* registry.c (inproc.c: live_ctx): the tools, the sandbox and tools.d. */
typedef struct ag_reg_s {
  al_list_t tools; /* ag_tool_t */
  json_t *tool_defs; /* [{name, description, input_schema}] */
  struct al_sandbox_s *sandbox; /* NULL: no tool spawns a child */
  al_sandbox_info_t sandbox_info;
  /* Mode none under AUTO: the gate refuses spawning and writing tools. */
  bool sandbox_refuse;
  bool sandbox_borrowed; /* a child's: its parent's, never freed here */
  void *cli_set;       /* al_cli_set_t: the tools.d definitions and errors */
  /* The workspace's tools.d when it is a directory (NULL otherwise), and
   * whether it loaded: listed so a skipped untrusted one is visible. */
  char *project_tools_d;
  bool project_trusted;
  uint64_t live_ctx; /* in-process tool contexts not yet completed */
  char **only;  /* al_agent_options_t.tools_only (NULL: every tool) */
  char **never; /* .tools_never */
} ag_reg_t;

struct al_agent_s {
  void *data;
  uv_loop_t *loop;

  /* Configuration (copied by al_agent_new; model and model_info change
   * when the run switches to the fallback model). */
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
  char *workspace;
  char **allowed_paths;
  char **denied_paths;
  uint64_t tool_timeout_ms;
  bool bash_network;
  uint64_t kill_grace_ms;
  int64_t idle_timeout_ms;
  int64_t progress_timeout_ms;
  al_limits_t limits;
  bool prompt_cache;
  al_http_client_t *client;
  bool own_client; /* made here (else borrowed from the options) */
  /* Context (SPEC §9): the catalogue (own_models when the options gave
   * none), the window override and what the catalogue says about a->model
   * (refreshed when the model changes). */
  const al_models_t *models;
  al_models_t *own_models;
  int64_t window_override;
  al_model_info_t model_info;

  /* The conversation: the driver, the attempt and compaction append to it
   * through history.h; budget is its token count. */
  al_history_t history;
  al_budget_t budget;

  ag_core_t core;
  ag_run_t run;
  ag_att_t att;
  ag_policy_t policy;
  ag_hooks_t hooks;
  ag_mcp_t mcp;
  ag_ctx_t ctx;
  ag_compact_t compact;
  ag_reg_t reg;
  /* Sub-agents (task.c alone writes it; NULL until needed). */
  struct ag_tasks_s *tasks;
};

/* The largest saved output read back (read_tool_output). */
#define AL_CONTEXT_MAX_OUTPUT ((size_t)64 << 20)

/* context.c */
int al__agent_context_init(al_agent_t *a, const al_agent_options_t *o);
void al__agent_context_free(al_agent_t *a);
/* Micro-compaction before a request of the main history; posts
 * micro_compaction. True when the caller must stop (as al__agent_post). */
bool al__agent_micro(al_agent_t *a);

/* core.c */
void al__core_init(al_agent_t *a, const al_agent_options_t *o,
                   void (*on_free)(al_agent_t *a));
/* The session id (o->session_id, else drawn from seed) and the bus. */
int al__core_open(al_agent_t *a, const al_agent_options_t *o, uint64_t seed);
/* Last in al_agent_new (nothing fails after): the finish handle. */
void al__core_handles_init(al_agent_t *a);
void al__core_free(al_agent_t *a);
/* Posts ev with the run's numbers. Returns true when the caller must stop:
 * a subscriber ended the run (gen changed) or closed the agent. */
bool al__agent_post(al_agent_t *a, al_event_t *ev);
/* History records to the commit hook: a message, the message that closed
 * the open tool turn (the history's last), a record {key: value} (a
 * compaction's new messages, the results micro-compaction cleared). */
void al__agent_commit(al_agent_t *a, al_commit_kind_t kind, const json_t *msg);
void al__agent_commit_results(al_agent_t *a);
void al__agent_commit_record(al_agent_t *a, al_commit_kind_t kind,
                             const char *key, json_t *value);
/* Close accounting: ref/unref for anything that calls back later (a
 * handle closing, pool work); hold/release for a tool call's work. A
 * closed agent is freed when all are back (al__agent_maybe_finish;
 * _quiet leaves that call to the caller). */
void al__agent_ref(al_agent_t *a);
void al__agent_unref(al_agent_t *a);
void al__agent_unref_quiet(al_agent_t *a);
void al__agent_hold(al_agent_t *a);
void al__agent_release(al_agent_t *a);
void al__agent_maybe_finish(al_agent_t *a);
/* A copy of a NULL-terminated list (NULL for NULL), and its free. */
int al__agent_strv_dup(const char *const *src, char ***out);
/* The tools_only / tools_never lists (registry.c). */
int al__reg_filter_copy(al_agent_t *a, const al_agent_options_t *o);
void al__agent_strv_free(char **l);
/* al_agent_close's callback, run after the agent is freed. */
void al__agent_closing(al_agent_t *a, void (*cb)(al_agent_t *agent));

/* run.c: the driver */
void al__run_init(al_agent_t *a, const al_agent_options_t *o, uint64_t seed);
void al__run_free(al_agent_t *a);
/* a->model_info for a->model, with the window override applied. */
void al__run_model_refresh(al_agent_t *a);
/* al_agent_run after its checks (idle, a text): appends it, starts. */
int al__run_start(al_agent_t *a, const char *text);
/* al_agent_cancel of a running agent. */
void al__run_cancel(al_agent_t *a);
/* A compaction (al_agent_compact while idle). */
void al__run_compact(al_agent_t *a, const char *trigger);
/* al_agent_close: the state goes to closing (no run); then its handles
 * close (al__run_handles_init made them, last in al_agent_new). */
void al__run_close(al_agent_t *a);
void al__run_handles_init(al_agent_t *a);
void al__run_close_handles(al_agent_t *a);

/* attempt.c: one model request */
void al__attempt_init(al_agent_t *a);
void al__attempt_free(al_agent_t *a);
/* The driver's callbacks (run.c installs them). */
void al__attempt_driver(al_agent_t *a,
                        void (*on_outcome)(al_agent_t *a, ag_outcome_t *o),
                        void (*on_settled)(al_agent_t *a));
/* A run starts: the previous run's SSE stamps go. */
void al__attempt_new_run(al_agent_t *a);
/* Ends the attempt's request and pipeline (not its executor). */
void al__attempt_clear(al_agent_t *a);
/* The request for history h (built, through the validity gate): 0 ready
 * in preq, 1 when a subscriber stopped the run, AL_EHISTORY with why, or
 * an error. */
int al__attempt_prepare(al_agent_t *a, al_history_t *h,
                        al_provider_request_t *preq, char *why,
                        size_t why_len);
/* Tokens the prepared request projects to (the budget's estimate). */
int64_t al__attempt_project(al_agent_t *a, const al_history_t *h,
                            const al_provider_request_t *preq);
/* Sends the prepared request (preq freed): the pipeline and, for the main
 * history, the reply's executor; id_seed seeds the pipeline's ids. The
 * outcome comes through on_outcome. */
int al__attempt_send(al_agent_t *a, const al_history_t *h,
                     al_provider_request_t *preq, uint64_t id_seed);
/* stream_request_start for the request just sent. */
void al__attempt_announce(al_agent_t *a);
/* Executors: close one, close all, and the cancel's partial reply. */
void al__attempt_exec_close(ag_exec_t *box);
void al__attempt_close_execs(al_agent_t *a);
void al__attempt_keep_partial(al_agent_t *a);
/* The current reply has calls still running (or queued). */
bool al__attempt_calls_pending(const al_agent_t *a);
/* The current reply's results into the history (hooks applied), the turn
 * closed and recorded, the executor closed; false while post_tool_use
 * hooks still decide. *n: the calls; *done: the done tool's message
 * (al_free it) or NULL. */
bool al__attempt_take_results(al_agent_t *a, uint32_t *n, char **done);
/* The cancel's calls without a reported result ([{id, name, started}], a
 * new reference); decided results of the current reply enter the history
 * when tools_turn. */
json_t *al__attempt_open_calls(al_agent_t *a, bool tools_turn);

/* compact_run.c: summary compaction and trimming */
void al__compact_init(al_agent_t *a, const al_agent_options_t *o);
void al__compact_free(al_agent_t *a);
/* "prompt is too long" and its OpenAI-compatible spellings. */
bool al__compact_is_overflow(const char *message);
/* max_messages: drops the oldest messages. True when the caller must stop. */
bool al__compact_trim(al_agent_t *a);
/* Before a request of the run: AG_COMPACT_NONE (send it), _START with
 * *trigger, or _REFUSE with msg (the context is full even after one). */
enum { AG_COMPACT_NONE, AG_COMPACT_START, AG_COMPACT_REFUSE };
int al__compact_check(al_agent_t *a, int64_t projected, const char **trigger,
                      char *msg, size_t msg_len);
/* Starts a compaction: AG_COMPACT_STOPPED (a subscriber ended the run),
 * _SEND (a->compact.hist is the summary request: the driver sends it),
 * or _FINISH (nothing to summarize) / _FAILED (no request could be built):
 * the driver calls al__compact_end with "" / NULL. */
enum {
  AG_COMPACT_STOPPED,
  AG_COMPACT_SEND,
  AG_COMPACT_FINISH,
  AG_COMPACT_FAILED
};
int al__compact_begin(al_agent_t *a, const char *trigger);
/* The summary arrived (NULL: the request failed): the new history and the
 * events. AG_COMPACT_STOPPED, _RESUME, or _GIVE_UP (AL_ECOMPACT) or
 * _TOO_BIG (AL_ECONTEXT) with msg. */
enum { AG_COMPACT_RESUME = 10, AG_COMPACT_GIVE_UP, AG_COMPACT_TOO_BIG };
int al__compact_end(al_agent_t *a, const char *summary, size_t len, char *msg,
                    size_t msg_len);
/* The driver's milestones: a turn started, the run resumed after a
 * compaction, the run ended. */
void al__compact_turn_started(al_agent_t *a);
void al__compact_resumed(al_agent_t *a);
void al__compact_run_ended(al_agent_t *a);
/* al_agent_compact: instructions taken; during a run it waits for the
 * run's next request. */
void al__compact_manual(al_agent_t *a, char *instructions, bool running);

/* agent_limits.c: the agent's limits onto one attempt's options. */
void al__agent_limits_request(const al_limits_t *l,
                              al_http_request_options_t *ro);
void al__agent_limits_pstream(const al_limits_t *l, al_pstream_options_t *so);

/* registry.c */
/* Sandbox probe and tools.d loading (before al__agent_tools_init). */
int al__agent_sandbox_init(al_agent_t *a, const al_agent_options_t *o);
int al__agent_tools_init(al_agent_t *a);
void al__reg_init(al_agent_t *a); /* tool_defs NULL: out of memory */
/* A tool's definition out of / into the list offered to the model. */
void al__reg_def_remove(al_agent_t *a, const char *name);
int al__reg_def_add(al_agent_t *a, const ag_tool_t *t);
/* Registers the loaded tools.d tools (after the built-ins). */
int al__agent_cli_tools_init(al_agent_t *a);
void al__agent_tools_free(al_agent_t *a);
const al_tool_impl_t *al__agent_lookup(al_executor_t *ex, const char *name);

/* gate.c */
void al__policy_init(al_agent_t *a, const al_agent_options_t *o);
int al__policy_copy(al_agent_t *a, const al_agent_options_t *o);
void al__policy_free(al_agent_t *a);
/* The approvals' records (their calls are gone with the tools). */
void al__policy_approvals_free(al_agent_t *a);
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

/* registry.c: registry entries (also used by mcp_attach.c). */
int al__agent_add_entry(al_agent_t *a, const char *name, al_tool_impl_t *inner,
                        void (*free_inner)(al_tool_impl_t *),
                        const char *description, const char *schema,
                        al_tool_category_t category, ag_tool_t **out);
ag_tool_t *al__agent_tool_find(al_agent_t *a, const char *name);
/* inproc.c: al_agent_add_tool without the idle check (mcp_attach.c's search
 * tool, registered at a turn boundary). */
int al__agent_add_inproc(al_agent_t *a, const al_tool_def_t *def,
                         ag_tool_t **out);

/* hookpoints.c */
int al__agent_hooks_init(al_agent_t *a, const al_agent_options_t *o);
void al__agent_hooks_free(al_agent_t *a);
void al__agent_hooks_new_run(al_agent_t *a); /* a run starts */
void al__agent_hooks_driver(al_agent_t *a,
                            void (*on_outcome)(al_agent_t *a,
                                               const ag_hooks_outcome_t *o));
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
 * turn's calls are all done, it reports AG_HOOKS_POSTS_DECIDED. */
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
/* A final reply: stop hooks may continue the run. true when they run
 * (they report AG_HOOKS_STOP_CONTINUE, _STOP_FINAL or _FAILED). */
bool al__agent_stop_hooks_start(al_agent_t *a, const char *text, size_t len);

/* Before the first turn of a run: session_start (first run only) and
 * user_prompt_submit hooks. true when they run (they report
 * AG_HOOKS_PROMPT_PASSED or _BLOCKED). */
bool al__agent_prompt_hooks_start(al_agent_t *a, const char *prompt,
                                  bool first);

/* Before a compaction: the pre_compact hooks, observational (the
 * compaction does not wait; their hook_executed events report them). */
void al__agent_pre_compact_hooks(al_agent_t *a, const char *trigger,
                                 int64_t tokens_before);
/* registry.c, for task.c: a child's registry. retire: the tool is neither
 * offered nor found any more (its entry stays, as for a removed MCP
 * tool). lend: the parent's tool pt (MCP, tools.d, in-process) as the
 * child's own entry calling the same implementation or server. */
void al__agent_tool_retire(al_agent_t *a, ag_tool_t *t);
int al__agent_lend_tool(al_agent_t *c, const ag_tool_t *pt);

/* subagent_start / subagent_stop hooks (observational, task.c); fields
 * are added to the input. */
void al__agent_subagent_hooks(al_agent_t *a, bool stop, const json_t *fields);


/* mcp_attach.c */
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
/* The registry's generations of the servers' lists (with the tools). */
void al__agent_mcp_free(al_agent_t *a);
/* Closes the servers; a->core.pending covers it. */
void al__agent_mcp_close(al_agent_t *a);
/* The driver's callback for "start-up settled" (mcp_attach.c calls it
 * whenever that may have become true; the driver checks its state). */
void al__agent_mcp_driver(al_agent_t *a, void (*on_settled)(al_agent_t *a));
/* The run begins waiting for the servers (the wait's start, for
 * mcp_startup_complete). */
void al__agent_mcp_wait_begin(al_agent_t *a);
/* The start-up wait of the first run ended: posts mcp_startup_complete
 * (once per agent). true when the run ended meanwhile. */
bool al__agent_mcp_startup_post(al_agent_t *a);
/* gate.c, after tool_use_started: posts mcp_tool_call_begin when call is
 * an MCP call whose request went out. true when the run ended. */
bool al__agent_mcp_began(al_tool_call_t *call);
/* al_agent_close was called: nothing of the agent may fire any more. */
static inline bool ag_closing(const al_agent_t *a) {
  return a->run.state == AG_CLOSING;
}

static inline uint64_t ag_ms_since(uint64_t t0) {
  uint64_t now = al_now_ns();

  return now > t0 ? (now - t0) / 1000000 : 0;
}

static inline al_slice_t ag_slice(const char *s) {
  al_slice_t sl;

  sl.ptr = s;
  sl.len = s != NULL ? strlen(s) : 0;
  return sl;
}

#endif
