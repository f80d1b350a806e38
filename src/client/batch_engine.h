/* The job engine (docs/batch.md, docs/fleet.md): one job's life, the same
 * in `agentloop batch run` (batch.c, jobs from a file, results to
 * DIR/results.jsonl) and in the fleet worker (src/fleet/worker.c, jobs
 * from Redis, results to Redis). A driver starts jobs, stores their
 * results and may gate every model request and transcript append.
 *
 * A job: its configuration, options, prompts and session (loaded when
 * SESSIONS/ID.jsonl exists: resumed) prepared in libuv's pool ->
 * workspace (batch_ws.c) -> agent run -> the terminal event -> the agent
 * closes -> the transcript flushes (fdatasync) and closes -> on_result
 * (only then: the result never runs ahead of a durable transcript) -> the
 * driver stores it and says so (al__bjob_stored) -> the workspace is
 * removed unless kept -> on_end. A session whose last run had answered
 * gives that answer without a model request (recovered). A job stopped
 * without a result (cancelled, fenced, its transcript not saved) skips
 * on_result and goes to on_end. */
#ifndef AL_CLIENT_BATCH_ENGINE_H
#define AL_CLIENT_BATCH_ENGINE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "client/batch.h"
#include "client/run_int.h"
#include "common/common.h"
#include "config/agent_opts.h"
#include "config/config.h"

typedef enum {
  AL_BJOB_PREPARING,
  AL_BJOB_WORKSPACE,
  AL_BJOB_RUNNING,
  AL_BJOB_CLOSING, /* agent and transcript closing */
  AL_BJOB_STORING, /* the driver stores the result */
  AL_BJOB_CLEANUP,
  AL_BJOB_DONE
} al_bjob_state_t;

typedef struct al_bengine_s al_bengine_t;
typedef struct al_bjob_s al_bjob_t;

typedef struct {
  /* Prepared (j->sess.resumed says whether it resumes); may be NULL. */
  void (*on_started)(al_bjob_t *j);
  /* The result is ready and the transcript durable: store it
   * (al__bjob_result_json), then al__bjob_stored. */
  void (*on_result)(al_bjob_t *j);
  /* Over: nothing more fires for j, freed when this returns. */
  void (*on_end)(al_bjob_t *j);
  /* Asked before every model request and transcript append (NULL: all
   * go). false stops the job as fenced: nothing more is written. */
  bool (*admit)(al_bjob_t *j);
} al_bengine_driver_t;

struct al_bengine_s {
  uv_loop_t *loop;
  al_client_t *client;
  al_models_t *models;
  struct al_agentdefs_s *agents;
  char sessions_dir[PATH_MAX];
  const char *work_dir; /* copies and worktrees go in WORK/work/ID */
  const char *who;      /* stderr prefix: "agentloop batch" */
  bool keep_ws;
  bool stopping; /* al__bengine_stop: every job ends without a result */
  const al_bengine_driver_t *drv;
  /* How long the driver's admit holds once it said yes (fleet mode: the
   * lease margin it keeps); a transcript write issued under it and not
   * made within that is not made (al__tx_set_gate). 0: unbounded. */
  uint64_t admit_window_ms;
  void *data;         /* the driver's */
  al_bjob_t *running; /* started, not yet done */
  size_t active;
};

struct al_bjob_s {
  al_bengine_t *e;
  void *data;                    /* the driver's */
  struct al_bjob_s *prev, *next; /* e->running */
  al_batch_job_t *spec;
  al_bjob_state_t state;
  al_config_t cfg;
  al_agent_opts_store_t store;
  al_agent_options_t o;
  al_buf_t sysprompt;
  al_buf_t preamble; /* what a fresh sub-agent's prompt ends with */
  al__run_session_t sess;
  al_tx_header_t hdr;
  char ws_real[PATH_MAX];
  al_batch_ws_t ws;
  al_agent_t *agent;
  al_sub_t *sub;
  bool recovered; /* answered before the crash: result from the transcript */
  bool max_turns;
  bool no_result; /* stopped: no result (a rerun or another owner resumes) */
  bool fenced;    /* the driver's gate said no: nothing more written */
  bool storage;   /* its transcript could not be written (why says) */
  const char *outcome;
  char error_kind[48];
  char *text;
  al_agent_stats_t stats;
  uint64_t t0_ms;
  /* limits.timeout_s, else the configuration's timeouts.run: the job is
   * cancelled and ends with outcome "timeout". */
  uv_timer_t timer;
  bool timer_open;
  bool timer_closing; /* its close callback frees j when free_pending */
  bool free_pending;
  bool timed_out;
  uint64_t timeout_ms;
  uv_work_t prep;
  bool prepared;
  bool opts_init; /* store and cfg to free */
  bool opts_freed;
  bool ws_made; /* a copy or worktree to remove */
  char why[PATH_MAX + 1024];
};

/* Starts a job (spec borrowed until on_end); NULL when out of memory. */
al_bjob_t *al__bjob_start(al_bengine_t *e, al_batch_job_t *spec, void *data);
/* Ends a job without a result (a signal, a drain's hand-back); with
 * fenced, as the gate would: nothing more is written. */
void al__bjob_stop(al_bjob_t *j, bool fenced);
/* Every job stops without a result; jobs prepared later too. */
void al__bengine_stop(al_bengine_t *e);
/* The result as a JSON object (id, outcome, text, turns, usage, cost_usd,
 * duration_ms, error_kind, session, recovered). */
json_t *al__bjob_result_json(const al_bjob_t *j);
/* The driver stored the result (status 0) or could not: the workspace
 * is removed (when stored and not kept), then on_end. */
void al__bjob_stored(al_bjob_t *j, int status);
uint64_t al__bengine_now_ms(void);
/* A job's main agent by name: a definition of the user's, else a
 * built-in; NULL when there is none. */
const al_subagent_def_t *al__bengine_job_agent(
    const struct al_agentdefs_s *agents, const char *name);

#endif
