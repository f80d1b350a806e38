/* `agentloop run` internals shared by run.c (flags, the agent, output
 * formats, exit codes) and run_view.c (the demo view: a readable live log
 * of the LoopEvents on stderr). */
#ifndef AL_CLIENT_RUN_INT_H
#define AL_CLIENT_RUN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "agentloop/events.h"

/* The demo view. One line per notable event, each stamped with the
 * milliseconds since run_started; streamed text and thinking are shown as
 * they arrive, interleaved with the tool lines.
 *
 * "Reply still streaming": a reply's stream is open from its
 * stream_request_start until its `usage` event, which the loop posts once
 * per response when the provider reports the final counts (message_delta /
 * the last chunk), i.e. after the last content block of that response. A
 * tool_use_started seen inside that window started while the model was
 * still writing the reply, and its line says so. A retry, a tombstone or
 * the end of the turn also close the window. */
typedef struct al__cli_view_s {
  FILE *f;
  bool color;
  bool started;        /* run_started seen: t0 is valid */
  uint64_t t0_ns;
  uint32_t turn;
  bool streaming;      /* a reply's stream is open (see above) */
  uint32_t tools_in_reply;
  uint32_t tools_early;  /* started while the reply was streaming */
  /* An open text or thinking line (no newline written yet). */
  int open_block;      /* -1: none */
  bool open_thinking;
  bool at_line_start;  /* inside the open block: the last byte was \n */
  /* Sub-agents seen (subagent_started): path -> agent name, for the
   * prefix of their nested lines; the oldest entry is reused past the
   * table's size (a line then shows the task id alone). */
  struct {
    char path[48];
    char agent[40];
  } kids[32];
  uint32_t nkids;
} al__cli_view_t;

void al__cli_view_init(al__cli_view_t *v, FILE *f, bool color);
/* Writes what `ev` shows (often nothing) and flushes. */
void al__cli_view_event(al__cli_view_t *v, const al_event_t *ev);
/* Ends an open text line (before the caller writes to the same stream). */
void al__cli_view_flush(al__cli_view_t *v);

/* ---- --output-format stream-json (run_stream.c) ---------------------------- */

#include <jansson.h>
#include <uv.h>

#include "common/common.h"

typedef struct al__stream_json_s {
  FILE *out;
  bool partial;     /* --include-partial-messages: stream_event lines */
  bool init_sent;   /* the system init line is out */
  char *model;      /* of the run, for assistant lines */
  json_t *results;  /* call_id -> {content}: results of the open turn */
  json_t *started;  /* block index -> true: content_block_start sent */
} al__stream_json_t;

void al__stream_json_init(al__stream_json_t *sj, FILE *out, bool partial);
/* Writes the lines (if any) that ev makes. */
void al__stream_json_event(al__stream_json_t *sj, const al_event_t *ev);
void al__stream_json_free(al__stream_json_t *sj);

/* --input-format stream-json: stdin read one line at a time, on the
 * threadpool, only when the next message is wanted. next() delivers
 * exactly one on_line (a line without its '\n') or on_end (EOF, or an
 * error code) on a later iteration. */
typedef struct al__line_reader_s al__line_reader_t;
struct al__line_reader_s {
  uv_loop_t *loop;
  uv_fs_t req;
  uv_timer_t defer;
  char chunk[65536];
  al_buf_t acc;
  bool eof;
  bool reading;
  bool closed;
  int err;
  void (*on_line)(al__line_reader_t *lr, const char *line, size_t len);
  void (*on_end)(al__line_reader_t *lr, int err);
  void *data;
};
void al__line_reader_init(al__line_reader_t *lr, uv_loop_t *loop);
void al__line_reader_next(al__line_reader_t *lr);
void al__line_reader_close(al__line_reader_t *lr);
/* A stdin line {"type":"user","message":{"content": "..." | [{"type":
 * "text","text":...}]}} -> its text appended to text. 0, or AL_EINVAL /
 * AL_ETOOBIG with the reason in why. */
int al__stream_json_user_text(const char *line, size_t len, al_buf_t *text,
                              char *why, size_t whylen);

/* ---- headless sessions (run_session.c) ------------------------------------ */

#include <limits.h>

#include "agentloop/agent.h"
#include "session/session.h"

typedef struct al__run_session_s {
  char id[64];
  char path[PATH_MAX];
  al_tx_t *tx;
  al_tx_loaded_t loaded; /* a resumed session's transcript */
  bool have_loaded;
  bool resumed;
  bool closing;
  int err; /* the first write error (reported once) */
  /* Durability (issue 15): the writer's current failure (0: none or
   * recovered), and at the end what was not saved (loss.err != 0), with
   * the appends the lost writer refused added in. */
  int failing;
  bool last_try; /* the end's one last attempt is made */
  al_tx_loss_t loss;
  al_tx_deltas_t deltas; /* what a reply's deltas leave in tx */
  al_tx_kids_t *kids;    /* the sub-agents' transcripts (issue 23) */
  char *cwd;             /* for the children's headers */
  /* Called once the writer has flushed and closed (batch: the result is
   * written after the transcript is durable); NULL: nobody waits. */
  void (*on_closed)(struct al__run_session_s *rs, void *data);
  void *closed_data;
  /* A gate before every append (fleet mode's fence, docs/fleet.md):
   * false drops the record and every later one (fenced: another owner may
   * write this file now). NULL: every record goes. */
  bool (*admit)(void *data);
  void *admit_data;
  /* How long admit's yes holds (al__tx_set_gate); 0: unbounded. */
  uint64_t admit_window_ms;
  bool fenced;
  /* With admit: the transcript is not flocked (the fence is the one-writer
   * rule; a stopped former owner may still hold the lock). */
  bool no_lock;
} al__run_session_t;

/* Before the loop: a new session, or (resume_id / cont) an existing one,
 * loaded. 0, or an error with a one-line reason in err. */
int al__run_session_prepare(al__run_session_t *rs, const char *resume_id,
                            bool cont, const char *workspace, char *err,
                            size_t errlen);
/* Before the loop (blocking): the session ID kept in DIR/ID.jsonl
 * (`agentloop batch`): loaded and resumed when the file exists with a
 * header, else new (a file without one is removed). 0, or an error with a
 * one-line reason in err. */
int al__run_session_prepare_at(al__run_session_t *rs, const char *dir,
                               const char *id, char *err, size_t errlen);
/* A resumed session's model and system prompt (NULL: none / new). */
const char *al__run_session_model(const al__run_session_t *rs);
const char *al__run_session_system(const al__run_session_t *rs);
/* Session id, numbering and commit hook into the agent's options. */
void al__run_session_options(al__run_session_t *rs, al_agent_options_t *o);
/* After al_agent_new: opens the writer, writes a new session's header
 * (h), gives a resumed one's history to the agent. */
int al__run_session_attach(al__run_session_t *rs, uv_loop_t *loop,
                           al_agent_t *agent, const al_tx_header_t *h,
                           char *err, size_t errlen);
void al__run_session_event(al__run_session_t *rs, const al_event_t *ev);
/* A sub-agent starts: its own transcript beside the session's, linked by
 * a "child" record in the session's chain. *commit_data is for
 * al__tx_kid_commit (NULL: the child keeps no transcript, said on
 * stderr). */
void al__run_session_child(al__run_session_t *rs, const al_tx_child_t *c,
                           void **commit_data);
void al__run_session_commit(al_agent_t *agent, al_commit_kind_t kind,
                            const char *message, size_t len, void *data);
/* Flushes and closes the writer (asynchronously: run the loop): a writer
 * still failing tries once more first; what then cannot be written is
 * rs->loss. */
void al__run_session_close(al__run_session_t *rs);
/* The agent is closed (no child commits any more): the children's
 * transcripts flush and close (asynchronously). */
void al__run_session_agent_closed(al__run_session_t *rs);
void al__run_session_free(al__run_session_t *rs);
/* One line saying what of the transcript was not saved and why (false:
 * everything was). */
bool al__run_session_loss_text(const al__run_session_t *rs, char *buf,
                               size_t len);

#endif
