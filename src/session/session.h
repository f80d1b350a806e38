/* Session layer: durable, append-only JSONL transcripts (docs/daemon.md).
 *
 * A transcript is one file per session. Each line is one record:
 *  - {"rec":"session",...}  the header: id, created_ms, cwd, model, ...
 *  - {"rec":"user"|"assistant"|"tool_results"|"compaction"|"micro",
 *    "message":{...}}  history commits from the agent's commit hook, in
 *    order (one table of kinds, al__tx_commit_record, for every writer);
 *    replaying them with the history's own operations rebuilds the
 *    conversation exactly;
 *  - {"rec":"elided",...}  a reply's deltas left out (al__tx_deltas_keep);
 *  - a LoopEvent object (docs/events.md: it has "type" and "seq", no
 *    "rec"), for the subscribers' since_seq replay.
 * A record is written when its '\n' is: a shorter tail is torn and is cut
 * off on load, so the next append starts on a fresh line.
 *
 * Writes never run on the loop thread: al__tx_t queues refcounted blobs
 * and keeps one uv_fs_write (writev of everything queued) in flight, so a
 * crash loses only what was queued or being written. History records ask
 * for an fdatasync after they are written (power loss then loses at most
 * the events since the last commit); events alone are not synced.
 *
 * Loading (al__tx_load) is blocking and meant for uv_queue_work or for
 * before the loop runs. */
#ifndef AL_SESSION_H
#define AL_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agentloop/agent.h"
#include "common/common.h"
#include "loop/history.h"

/* ---- refcounted byte blobs ------------------------------------------------ */

typedef struct al_blob_s {
  uint32_t refs;
  size_t len;
  char data[];
} al_blob_t;

/* A blob of len bytes (uninitialized, one ref); NULL on OOM. */
al_blob_t *al__blob_alloc(size_t len);
/* A blob holding a copy of p (one ref); NULL on OOM. */
al_blob_t *al__blob_new(const char *p, size_t len);
static inline al_blob_t *al__blob_ref(al_blob_t *b) {
  b->refs++;
  return b;
}
void al__blob_unref(al_blob_t *b);

/* ---- writer --------------------------------------------------------------- */

typedef struct al_tx_s al_tx_t;
typedef void (*al_tx_close_cb)(al_tx_t *tx, void *data);

/* Opens (O_APPEND|O_CREAT|O_CLOEXEC, mode 0600) path asynchronously;
 * appends queue until the open completes. max_queue bounds the bytes
 * queued and not written (past it appends fail with AL_ETOOBIG and the
 * writer is degraded). */
int al__tx_open(uv_loop_t *loop, const char *path, size_t max_queue,
                al_tx_t **out);
/* Queues blob (a ref is taken) as one record; it must end with '\n'. With
 * sync, an fdatasync follows the write that carries it. 0, AL_ENOMEM, or
 * the error of a writer that lost records (below).
 *
 * A failed open, write or fdatasync (ENOSPC, EIO, EROFS, ...) is not the
 * end: everything stays queued and the operation is tried again from a
 * timer (1 s, doubling to 30 s) until it succeeds, so records reach the
 * file in order and whole once the disk has room again. Meanwhile
 * al__tx_error() is the failure. Records are lost only when the queue
 * would pass max_queue (AL_ETOOBIG) or the writer is closed while still
 * failing; then the writer stays failed (al__tx_lost) and appends return
 * the error, so the file never has a hole in the middle. */
int al__tx_append(al_tx_t *tx, al_blob_t *blob, bool sync);
/* cb runs once everything appended so far is written and synced (or the
 * writer failed: check al__tx_error), always on a later iteration. One
 * waiter at a time: AL_EBUSY otherwise. */
typedef void (*al_tx_flush_cb)(al_tx_t *tx, void *data);
int al__tx_flush(al_tx_t *tx, al_tx_flush_cb cb, void *data);
/* Told when the writer starts failing (err < 0), writes again (err 0),
 * or lost records (lost true), on the loop thread. */
typedef void (*al_tx_state_cb)(al_tx_t *tx, int err, bool lost, void *data);
void al__tx_set_state_cb(al_tx_t *tx, al_tx_state_cb cb, void *data);
bool al__tx_lost(const al_tx_t *tx);
/* Test seams, set only by test binaries (nothing reads them from the
 * environment): a hook that makes the next write of a transcript fail
 * with the error it returns (0: write), one that makes an fdatasync report
 * the error it returns (the EIO a small filesystem cannot produce), and
 * the retry delays in ms. */
extern int (*al__tx_write_fault)(const char *path);
extern int (*al__tx_sync_fault)(const char *path);
extern uint64_t al__tx_retry_min_ms;
extern uint64_t al__tx_retry_max_ms;
/* Queued + in-flight bytes. */
size_t al__tx_pending(const al_tx_t *tx);
/* The current write/fsync/open failure (0 once writes go through again),
 * or the error that lost records (sticky). */
int al__tx_error(const al_tx_t *tx);
/* What records the loss dropped (all zero while al__tx_lost is false):
 * records and bytes, synced = of them, those appended with sync (history
 * commits and the header), unsynced = the last fdatasync had failed, so
 * records written before may not be durable either; err: why. */
typedef struct {
  size_t records;
  size_t synced;
  size_t bytes;
  bool unsynced;
  int err;
} al_tx_loss_t;
void al__tx_loss(const al_tx_t *tx, al_tx_loss_t *out);
/* A failing writer waiting for its retry timer tries now (the owner is
 * about to give up: one last attempt). */
void al__tx_retry_now(al_tx_t *tx);
/* Writes what is queued, syncs, closes the fd; cb runs on a later
 * iteration (never inside the call). Call once. */
void al__tx_close(al_tx_t *tx, al_tx_close_cb cb, void *data);

/* ---- records ---------------------------------------------------------------- */

/* The hash chain (issue 15): al__tx_append_chained appends a record line
 * ("{...}\n") with ,"h":"<sha256 hex>" added before its closing brace.
 * Format 2 (header "v":2, issue 22): the hash covers the session id, the
 * previous chained record's hash and the record as given, so a record
 * copied from another session never verifies here, whatever it follows.
 * Format 1 (older files, header "v":1) had no id in the hash; such a file
 * keeps its format when it is continued, and still loads. The loader
 * checks the chain, so an edited, forged or spliced record is found and
 * skipped. Events are not chained (they rebuild nothing). */
#define AL_TX_HASH_HEX 64
#define AL_TX_FORMAT 2
int al__tx_append_chained(al_tx_t *tx, al_blob_t *rec, bool sync);
/* The chained line of rec after prev ("" first) in session id's chain
 * (format 2; "" or NULL: format 1); h gets its hash. NULL on OOM or when
 * rec is not "{...}\n". */
al_blob_t *al__tx_chain_record(const char *id, const char *prev,
                               const al_blob_t *rec,
                               char h[AL_TX_HASH_HEX + 1]);
/* Where the next chained record goes: after hash ("" for a new file), in
 * session id's chain (a new session: its id; a loaded transcript:
 * al_tx_loaded_t.chain and .chain_id, "" for a format-1 file). */
void al__tx_set_chain(al_tx_t *tx, const char *hash, const char *id);
/* Before the open completes (right after al__tx_open): no flock. For a
 * writer fenced otherwise (fleet mode: an epoch and a lease, docs/fleet.md),
 * whose previous owner may be a stopped process that still holds the lock
 * but will never write again. */
void al__tx_set_no_lock(al_tx_t *tx);
/* Asked before every write is issued (not only when a record is queued):
 * false drops the queue unwritten, and every record queued later.
 * window_ms > 0: a yes holds that long (fleet mode: the lease margin the
 * gate keeps). The threadpool checks it right before the write(2): a write
 * that reaches the disk later than that after its yes (the process was
 * stopped, or the pool was busy) is not made; the gate is asked again. */
void al__tx_set_gate(al_tx_t *tx, bool (*gate)(void *data), void *data,
                     uint64_t window_ms);

/* A session id: 1 to 63 of [A-Za-z0-9_-] (it names the transcript file,
 * so nothing else may reach a path). */
bool al__session_id_valid(const char *id);

/* A record line (compact JSON + '\n') as a blob; NULL on OOM. */
al_blob_t *al__tx_record(const json_t *rec);
/* The record kind of a history commit ("user", "assistant",
 * "tool_results", "compaction", "micro"); NULL when kind is none of
 * al_commit_kind_t's. The one table: every writer of transcripts uses
 * it through al__tx_commit_record. */
const char *al__tx_commit_kind_name(al_commit_kind_t kind);
/* {"rec":<kind's name>,"message":<message text>}. NULL when kind is
 * unknown, message is not JSON, or on OOM. */
al_blob_t *al__tx_commit_record(al_commit_kind_t kind, const char *message,
                                size_t len);
/* The tool_results record of the message that closed an open tool turn
 * on load (al_tx_loaded_t.synthetic); NULL on OOM. */
al_blob_t *al__tx_synthetic_record(const json_t *synthetic);

/* ---- what a reply's streamed deltas leave behind ---------------------------- */

/* A reply's deltas (text_delta, thinking_delta, tool_input_delta events)
 * go to the transcript up to max bytes of event lines per attempt (from
 * its stream_request_start); the rest are not written (they are still
 * published live). A reply is bounded (limits.reply_bytes, 64 MiB), but
 * one rejected at its bound would otherwise leave all of it as deltas;
 * an accepted reply is whole in its content_block_completed events and
 * its assistant record anyway. When deltas were left out, the next other
 * event (the api_error of a rejected reply, or the reply's end) is
 * preceded by one {"rec":"elided",...} record saying what was left out
 * and which event ended the span. Shared by agentloopd and agentloop run. */
#define AL_TX_REPLY_DELTAS_MAX ((size_t)1 << 20)
typedef struct {
  size_t max;          /* bytes of delta lines written per attempt */
  size_t kept;         /* of the current attempt */
  uint64_t elided;     /* delta events left out since the last record */
  uint64_t elided_bytes;
  uint64_t first_seq;  /* of the first left out */
  uint64_t last_seq;
  uint64_t run;
  uint32_t turn;
} al_tx_deltas_t;

void al__tx_deltas_init(al_tx_deltas_t *d, size_t max);
/* A reply's delta event (text, thinking, tool input): a sub-agent's are
 * left out of its parent's transcript (they are in the child's commits). */
bool al__tx_is_delta(al_event_type_t type);
/* For one event whose encoded line is line_len bytes: true when the line
 * is to be written. *note (NULL unless set) is an "elided" record to
 * write, chained, before the event's line; the caller unrefs it. */
bool al__tx_deltas_keep(al_tx_deltas_t *d, const al_event_t *ev,
                        size_t line_len, al_blob_t **note);

/* ---- the header ------------------------------------------------------------ */

/* A session's settings, as its first record keeps them. This file alone
 * knows the record's fields; strings are al_malloc'd (NULL: unset). */
typedef struct {
  char *cwd;
  char *model;
  char *provider;
  char *base_url;
  char *fallback_model; /* after repeated overloads (config fallback_model) */
  char *system;
  json_t *ask_tools; /* array of tool rules (docs/config.md), or NULL */
  json_t *allow_tools; /* the same, run without asking */
  json_t *deny_tools;  /* the same, refused */
  char *sandbox;       /* "auto" | "required" | "none"; NULL: auto */
  int64_t max_tokens;  /* 0: the agent's default */
  int64_t max_turns;
  bool network;        /* bash keeps the network (config sandbox.network) */
  json_t *timeouts;    /* {connect_ms, idle_ms, progress_ms, tool_ms}, or NULL */
  json_t *paths;       /* {denied, writable, tools_dirs}: absolute paths */
  json_t *limits;    /* agentloop/limits.h by name (object), or NULL */
  json_t *context;   /* the context: settings (docs/context.md), or NULL */
  json_t *parent;    /* a child's transcript (issue 23): {session, task,
                      * parent_call, agent, depth, background} of the
                      * session whose task call started it; NULL: a
                      * top-level session */
  /* Sub-agents (docs/subagents.md): the client's subagents: settings, its
   * agent definitions and the child preamble, as session/create gave
   * them (al__config_subagents_from_json), or NULL. */
  json_t *subagents;
  uint64_t created_ms;
} al_tx_header_t;

/* The header record of session id; NULL on OOM. */
al_blob_t *al__tx_header_record(const char *id, const al_tx_header_t *h);
/* Fills h from a parsed record when it is a header; false otherwise. The
 * fields of h are replaced (al__tx_header_free'd first). */
bool al__tx_header_parse(const json_t *rec, al_tx_header_t *h);
void al__tx_header_free(al_tx_header_t *h);
/* Reads the header and the first user text from the first n bytes of a
 * transcript (whole lines only), for listings that must not load the
 * whole file. true when a header was found. */
bool al__tx_scan_head(const char *p, size_t n, al_tx_header_t *h,
                      char **first_user_text);

/* ---- titles (issue 25) ------------------------------------------------------ */

/* A session's title is a chained {"rec":"title","title":...} record (the
 * last one wins; the header is never edited). */
#define AL_TX_TITLE_MAX 200
/* NULL when title is usable (1 to AL_TX_TITLE_MAX bytes of UTF-8 without
 * control characters, C0, DEL or C1); otherwise why not. */
const char *al__tx_title_check(const char *title);
/* The title record; NULL when the title is unusable or on OOM. */
al_blob_t *al__tx_title_record(const char *title);
/* The last usable title record among the whole lines of p[0..n), for
 * listings that read only parts of a file (al_malloc'd; NULL: none). It
 * does not check the chain: al__tx_load does. */
char *al__tx_scan_title(const char *p, size_t n);

/* ---- sub-agents (issue 23) ------------------------------------------------ */

/* A child agent (a `task` call's sub-agent) has a transcript of its own,
 * ID.jsonl beside its parent's, with its own hash chain; its header's
 * "parent" names the parent. The parent's transcript links it with a
 * chained {"rec":"child",...} record (nothing to replay: the child's
 * answer is the task call's tool result in the parent's history). */
typedef struct {
  const char *task_id;
  const char *session_id;  /* the child's */
  const char *parent_session;
  const char *parent_call; /* the task tool_use's id */
  const char *agent;
  bool background;
  uint32_t depth;
} al_tx_child_t;

/* A child's session id ("PARENT.t1", docs/subagents.md) as a transcript
 * id (the '.' of the path as '-': "PARENT-t1"); false when that is no
 * valid session id (too long). */
bool al__tx_child_file_id(const char *session_id, char out[64]);
/* The parent's "child" record (task, session, transcript: the child's
 * transcript id, parent_call, agent, parent_session, background, depth);
 * NULL on OOM or a missing or unusable id. */
al_blob_t *al__tx_child_record(const al_tx_child_t *c);

/* The child transcripts of one session's front end: each child's writer
 * opened on demand, each closed when the set closes (with the parent
 * session). */
typedef struct al_tx_kids_s al_tx_kids_t;

/* dir: the sessions directory (copied); max_queue per child writer. */
al_tx_kids_t *al__tx_kids_new(uv_loop_t *loop, const char *dir,
                              size_t max_queue);
/* Opens the child's transcript (asynchronously) and queues its header:
 * cwd from h (may be NULL), "parent" from c, created_ms now. *commit_data
 * is for al__tx_kid_commit (the child's al_commit_cb); *link the
 * parent's "child" record, for the caller to append to the parent's
 * chain (unref it), or NULL when the parent is a child of this set (a
 * grandchild's link goes into its own parent's transcript). 0, AL_EINVAL (an id that cannot name a file),
 * AL_ENOMEM, or the open's error. */
int al__tx_kids_open(al_tx_kids_t *k, const al_tx_child_t *c,
                     const al_tx_header_t *h, void **commit_data,
                     al_blob_t **link);
/* The child's commit hook (an al_commit_cb): its history records, chained
 * in its own transcript and synced as the parent's are. */
void al__tx_kid_commit(al_agent_t *agent, al_commit_kind_t kind,
                       const char *message, size_t len, void *data);
/* Child session_id ended (its subagent_completed): its writer flushes
 * and closes; a commit after that is dropped. Unknown ids are ignored. */
void al__tx_kids_end(al_tx_kids_t *k, const char *session_id);
/* A session event: a child's subagent_completed (its last commit is in)
 * ends that child's transcript. Others are ignored; k may be NULL. */
void al__tx_kids_event(al_tx_kids_t *k, const al_event_t *ev);
/* Children opened; bytes queued and not written over all of them; the
 * first write error of any (0: none). */
/* The gate of the session's writer (al__tx_set_gate, with its window) for
 * every child's: asked before each append and write; children's files not
 * flocked. */
void al__tx_kids_set_gate(al_tx_kids_t *k, bool (*gate)(void *data), void *data,
                          uint64_t window_ms);
size_t al__tx_kids_count(const al_tx_kids_t *k);
size_t al__tx_kids_pending(const al_tx_kids_t *k);
int al__tx_kids_error(const al_tx_kids_t *k);
/* Flushes and closes every child writer, then frees the set; cb (may be
 * NULL) runs on a later iteration once all are closed. Call once; no
 * commit may reach the set's children after it. */
void al__tx_kids_close(al_tx_kids_t *k, void (*cb)(void *data), void *data);

/* ---- loading ---------------------------------------------------------------- */

typedef struct {
  uint64_t seq;
  al_blob_t *line; /* the event line with its '\n' */
} al_tx_event_t;

typedef struct {
  al_tx_header_t header;  /* the session record's settings ... */
  bool has_header;        /* ... if there was one */
  al_history_t history;   /* replayed; an open tool turn is closed */
  json_t *synthetic;      /* the tool_results message that closed it, or
                           * NULL: the caller appends it as a record */
  char *first_user_text;  /* al_malloc'd, or NULL */
  char *title;            /* the last title record's, al_malloc'd, or NULL */
  al_tx_event_t *events;  /* the newest events that fit max_event_bytes */
  size_t nevents;
  uint64_t last_seq;      /* highest event seq seen */
  uint64_t last_run;      /* highest run number seen in events */
  uint32_t last_turn;     /* its last turn */
  bool run_open;          /* last_run has no final/error/interrupted */
  json_t *closed_calls;   /* [{id,name}] of the tool calls closed on
                           * load, or NULL */
  json_t *children;       /* [{task, session, parent_call, agent, depth,
                           * background}] of the "child" records: the
                           * sub-agents this session started, or NULL */
  size_t records;         /* good records */
  size_t bad_lines;       /* skipped mid-file lines */
  bool torn_tail;         /* a partial last line was cut off */
  size_t closed_tool_uses;
  int err;                /* 0, or the open/read error */
  char why[256];          /* first bad line's reason (for the log) */
  json_t *skipped;        /* [{line, reason}] of skipped lines (first 64),
                           * or NULL */
  size_t chain_breaks;    /* records that failed the hash chain */
  char chain[AL_TX_HASH_HEX + 1]; /* the last good chained hash, or "" */
  char chain_id[64];      /* the id its chain binds ("": format 1) */
} al_tx_loaded_t;

#define AL_TX_SYNTHETIC_TEXT \
  "interrupted: the daemon stopped before this tool finished"

/* Reads the transcript at path and replays it (blocking). A torn tail is
 * truncated from the file when truncate is set, so the next append starts
 * on a new line. Keeps the newest events up to max_event_bytes. Fills
 * out (al__tx_loaded_free it) and returns out->err. */
int al__tx_load(const char *path, bool truncate, size_t max_event_bytes,
                al_tx_loaded_t *out);
/* The same on a buffer (tests, fuzzing): no file, nothing truncated. */
int al__tx_load_buf(const char *p, size_t n, size_t max_event_bytes,
                    al_tx_loaded_t *out, size_t *good_len);
void al__tx_loaded_free(al_tx_loaded_t *l);
/* The loader's safety net, run after the last record: a replayed history
 * that is not sendable (and has no open turn) is cut back to its longest
 * valid prefix, each message cut counted in bad_lines (reason "history
 * cut back ...", at line lineno). Returns the messages cut. */
size_t al__tx_keep_valid_prefix(al_tx_loaded_t *l, size_t lineno);

#endif
