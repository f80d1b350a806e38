/* What the daemon's upper layers share (daemon.h for the whole picture):
 *
 *   daemon.c    process set-up: directories, locks, the transcript scan,
 *               bind/listen, signals, idle exit and shutdown;
 *   methods.c   the RPC methods and the dispatch of request lines;
 *   sessions.c  sessions: agents, transcripts, the replay ring,
 *               subscriptions and their lag bounds, session/resume's load;
 *   clients.c   client I/O with backpressure (clients.h), which calls up
 *               only through callbacks.
 *
 * Everything here runs on the loop thread except load_work (threadpool). */
#ifndef AL_DAEMON_INTERNAL_H
#define AL_DAEMON_INTERNAL_H

#include <jansson.h>

#include "agentloop/client.h"
#include "common/common.h"
#include "daemon/clients.h"
#include "config/agent_opts.h"
#include "daemon/daemon.h"
#include "events/events.h"
#include "rpc/rpc.h"
#include "session/session.h"

#define TX_MAX_QUEUE (256u * 1024 * 1024)
#define TITLE_MAX 80

typedef struct session_s session_t;
typedef al_dclient_t client_t;

/* A client watching a session: in both the session's and the client's
 * lists. */
typedef struct {
  al_list_t snode;
  al_list_t cnode;
  session_t *s;
  client_t *c;
  /* Replay: the ring is sent from `next` as the client's queue drains
   * (write completions pump it); live events reach it through the ring
   * until it has caught up. */
  bool catching;
  bool started;
  uint64_t next;
} sub_t;

typedef struct {
  uint64_t seq;
  al_blob_t *line;
} ring_entry_t;

/* A session/create or session/resume waiting for the transcript. */
typedef struct {
  al_list_t node;
  client_t *c; /* NULL once the client went away */
  json_t *id;
  json_t *params;
  /* A request that needs the session loaded (turn/send, subscribe) and
   * runs once it is; NULL: a resume, answered with the session. */
  void (*then)(session_t *s, client_t *c, const json_t *id,
               const json_t *params);
} pending_resume_t;

struct session_s {
  al_list_t node;
  al_daemon_t *d;
  char id[64];
  al_tx_header_t h; /* settings, as the transcript header keeps them */
  /* The API key the client sent (session/create, resume, configure):
   * memory only, never in the transcript. NULL: the daemon's own. */
  char *api_key;
  /* The MCP servers and hooks the creating client's configuration names
   * (session/create mcp_config, hooks_config; JSON text, NULL: none), so
   * a config.yaml edited after the daemon started applies to new
   * sessions. Memory only, like the key: a session loaded after a restart
   * gets the daemon's, read from the same file at its start. own_config:
   * the client sent them (else the daemon's apply). */
  char *mcp_config;
  char *hooks_config;
  bool own_config;
  uint64_t next_run; /* the number the agent gives its next run */
  char *title;
  bool named; /* title set by session/rename (a title record) */
  uint64_t updated_ms;
  uint64_t last_active; /* loop ms of the last event or unsubscribe */
  /* Loaded state. */
  bool loaded;
  bool loading;
  /* Not in the startup scan: named by a session/resume (a transcript a
   * headless `agentloop run` wrote since); dropped if its load fails. */
  bool discovered;
  bool closing;
  /* Unloading to give its descriptors back (al__session_unload): the
   * agent and the writer are closing; it stays known, and a
   * session/resume loads it again once they are closed. */
  bool unloading;
  al_agent_t *agent;
  al_tx_t *tx;
  al_tx_deltas_t deltas; /* what a reply's deltas leave in tx */
  al_tx_kids_t *kids;    /* the sub-agents' transcripts (issue 23) */
  uint32_t children;     /* its own children started and not completed */
  bool kids_closing;     /* kids' writers closing: not freed before */
  json_t *child_links;   /* its children's "child" records (resume) */
  /* Recent events, oldest first: a circular array (seqs increase, so a
   * seq is found by binary search). */
  ring_entry_t *ring;
  size_t ring_cap;
  size_t ring_head;
  size_t ring_n;
  size_t ring_bytes;
  uint64_t next_seq;
  al_list_t subs; /* sub_t by snode */
  bool running;
  uint64_t run;
  al_event_usage_t totals;
  uint64_t runs;
  al_list_t resumes; /* pending_resume_t */
  uv_work_t work;
  al_tx_loaded_t loaded_tx;
  json_t *recovered;
  bool agent_closed;
  bool tx_closed;
  /* Durability (issue 15): a run's last event (final, error, interrupted)
   * and anything after it wait in `held` until the transcript is synced;
   * if it cannot be, watchers get session/persist_error first. */
  al_list_t held;   /* held_event_t */
  bool holding;     /* a flush for a held last event is in flight */
  int persist_err;  /* the writer's current failure, 0 when writing */
};

struct al_daemon_s {
  uv_loop_t *loop;
  al_daemon_options_t o;
  /* A fleet worker's metrics for initialize (al__daemon_set_status). */
  json_t *(*status)(void *data);
  void *status_data;
  al_models_t *models; /* the models catalogue, with the user's overlay */
  char *socket_path;
  char *state_dir;
  char *sessions_dir;
  int state_lock;
  int socket_lock;
  uv_pipe_t server;
  uv_signal_t sigterm;
  uv_signal_t sigint;
  uv_timer_t idle;
  uv_timer_t grace;
  uv_timer_t sweep; /* drops idle sessions' replay rings */
  al_client_t *http;
  al_dclients_t clients;
  al_list_t sessions;
  size_t nloaded;
  size_t nknown;
  /* Descriptors (issue 22): the RLIMIT_NOFILE soft limit the daemon
   * plans for, and the sessions unloading to stay under it. */
  size_t fd_limit;
  size_t nunloading;
  bool shutting_down;
  bool exiting;
  int final;   /* last handles closing */
  int pending; /* handles and objects still closing */
  al_daemon_stats_t stats;
};

static inline al_daemon_t *client_daemon(const client_t *c) {
  return c->srv->data;
}

/* daemon.c */
void al__daemon_maybe_exit(al_daemon_t *d);
void al__daemon_idle_check(al_daemon_t *d);
/* Whether `need` more descriptors fit under the limit with the daemon's
 * reserve left (clients, transcript loads, a tool start) and, when not,
 * replies the typed error AL_RPC_FD_LIMIT to (c, id) naming the limit.
 * Either way it unloads idle sessions when room runs short, so a later
 * request finds it; never `keep` (the session the request is for: a run
 * about to start on it, NULL for a create). */
bool al__daemon_fd_admit(al_daemon_t *d, const session_t *keep, client_t *c,
                         const json_t *id, size_t need, const char *what);

/* sessions.c */
uint64_t al__wall_ms(void);
void al__set_str(char **dst, const char *s);
char *al__make_title(const char *t);
void al__sub_free(sub_t *sub);
sub_t *al__sub_find(session_t *s, client_t *c);
void al__sub_pump(sub_t *sub);
size_t al__ring_find(session_t *s, uint64_t seq);
ring_entry_t *al__ring_at(session_t *s, size_t i);
void al__ring_push(session_t *s, uint64_t seq, al_blob_t *line);
void al__ring_sweep(uv_timer_t *t);
void al__session_tx_put(session_t *s, al_blob_t *b, bool sync);
void al__session_tx_put_rec(session_t *s, al_blob_t *b);
void al__session_on_event(const al_event_t *ev, void *data);
session_t *al__session_find(al_daemon_t *d, const char *id);
session_t *al__session_alloc(al_daemon_t *d, const char *id);
void al__session_free(session_t *s);
char *al__transcript_path(al_daemon_t *d, const char *id);
int al__session_start(session_t *s, uint64_t first_seq, uint64_t first_run,
                      char *why, size_t why_len);
/* The options of a session's agent from its settings (the header, the
 * client's key and MCP/hooks text) over the daemon's own, through
 * al_config_agent_options: everything but the session's wiring (client,
 * permission callback, id, numbering, commit hook, tool_output_dir). st
 * owns what o points to. 0, AL_ENOMEM, or the mapping's error in why. */
int al__session_agent_options(const al_daemon_options_t *dopts,
                              const al_models_t *models,
                              const al_tx_header_t *h, const char *api_key,
                              bool own_config, const char *mcp_config,
                              const char *hooks_config, al_agent_options_t *o,
                              al_agent_opts_store_t *st, char *why,
                              size_t why_len);
/* Applies the settings params carries (model, provider, base_url,
 * api_key; strings or absent) to a loaded, idle session: a new agent with
 * the same history and numbering replaces its agent, and a new header
 * record keeps the settings for a later load. *changed says whether
 * anything differed; when it did, every watcher but `by` (the client that
 * asked; may be NULL) gets session/configured. AL_EBUSY during a run; AL_EINVAL (why) when the
 * agent refuses them (the old one stays). */
int al__session_reconfigure(session_t *s, const json_t *params,
                            client_t *by, bool *changed, char *why,
                            size_t why_len);
json_t *al__session_info(const session_t *s);
void al__session_maybe_free(session_t *s);
/* Whether s is loaded with nothing going on: no run, watcher, pending
 * request, held event or load; such a session may be unloaded. */
bool al__session_is_idle(const session_t *s);
/* Closes an idle session's agent and writer and keeps it known, not
 * loaded (its transcript has everything). */
void al__session_unload(session_t *s);
void al__session_close(session_t *s);
void al__session_unsubscribe_all(session_t *s, const char *reason);
void al__session_load_work(uv_work_t *w);
void al__session_load_done(uv_work_t *w, int status);
/* The client layer's callbacks that reach sessions. */
void al__sessions_client_drained(client_t *c);
void al__sessions_client_closing(client_t *c);

/* methods.c */
void al__daemon_reply(client_t *c, const json_t *id, json_t *result);
void al__daemon_reply_err(client_t *c, const json_t *id, int code,
                          const char *msg, json_t *data);
void al__daemon_resume_reply(session_t *s, client_t *c, const json_t *id);
/* turn/send and session/subscribe on a loaded session (also after a
 * load they waited for). */
void al__daemon_turn_send(session_t *s, client_t *c, const json_t *id,
                          const json_t *params);
void al__daemon_subscribe(session_t *s, client_t *c, const json_t *id,
                          const json_t *params);
void al__daemon_on_line(client_t *c, const char *line, size_t len,
                        bool too_long);
void al__daemon_on_created(al_tx_t *tx, void *data);

#endif
