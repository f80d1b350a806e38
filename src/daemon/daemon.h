/* Daemon layer: agentloopd's core, on the caller's loop (docs/daemon.md,
 * docs/protocol.md).
 *
 * One al_daemon_t owns the listening Unix socket, the clients, the
 * sessions (each an agent, a transcript writer, a ring of recent encoded
 * events for since_seq replay, and its subscribers) and one HTTP client
 * shared by every agent. Everything runs on the loop thread; transcript
 * writes and loads go through libuv's threadpool.
 *
 * al__daemon_new does the blocking setup (state and socket directories,
 * locks, the scan of existing transcripts' headers, bind/listen) and is
 * meant to be called before uv_run. Shutdown (SIGTERM, SIGINT, the
 * `shutdown` method, --idle-exit, or al__daemon_shutdown) cancels runs,
 * flushes transcripts, says session/closed to subscribers, removes the
 * socket, and calls on_exit once every handle is closed; the daemon is
 * freed after on_exit returns. main.c is a thin CLI around this so tests
 * can run the daemon in-process or in a helper child. internal.h says
 * which file holds which job (set-up, methods, sessions, client I/O). */
#ifndef AL_DAEMON_H
#define AL_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agent.h"

typedef struct al_daemon_s al_daemon_t;

/* What one loaded session may hold at its peak. Measured (issue 22,
 * /proc/PID/fd of a real agentloopd, a bash call in each session): 15-17
 * with its warm sandbox alive, seven of them the file tools' O_PATH fds
 * of the one workspace (shared now: 5-10); a warm sandbox or launcher is
 * a pidfd, stdout and stderr pipes and a control socket; then the
 * transcript. A tool start adds a few while it runs. */
#define AL_DAEMON_SESSION_FDS 24
/* Kept free beyond the sessions' share: clients, a transcript load, the
 * HTTP client's connections, the log. */
#define AL_DAEMON_FD_RESERVE 64
#define AL_DAEMON_MAX_IDLE 32

typedef struct {
  const char *socket_path; /* required: already resolved and checked */
  const char *state_dir;   /* required: .../agentloop (sessions/ inside) */
  /* Defaults for sessions; session/create params override. NULL: the
   * agent's defaults. A client's session/create may bring its own key
   * (kept in memory only). */
  const char *provider;
  const char *model;
  const char *base_url;
  const char *anthropic_key;
  const char *openai_key;
  const char *ca_file;
  size_t max_line;         /* 0: AL_RPC_DEFAULT_MAX_LINE */
  /* Per-client output bounds (bytes libuv could not write yet): past
   * max_queue for soft_ms, or past 4 x max_queue, a subscription lags;
   * past 8 x max_queue (responses only) the client is dropped.
   * 0: 2 MiB / 10 s; soft_ms UINT64_MAX: lag at once past max_queue. */
  size_t max_queue;
  uint64_t soft_ms;
  size_t replay_bytes;     /* per-session event ring; 0: 16 MiB */
  /* A loaded session with no run and no watcher for this long drops its
   * ring (a later subscribe sees the gap and redraws from the history),
   * so a long-lived daemon's memory follows its active sessions, not all
   * it ever loaded. 0: 10 min; UINT64_MAX: never. */
  uint64_t replay_idle_ms;
  size_t max_sessions;     /* loaded sessions; 0: 1024 */
  /* Descriptors (issue 22): the open-file limit planned for (0: the
   * process's RLIMIT_NOFILE soft limit at al__daemon_new), and what one
   * loaded session may hold at its peak (0: AL_DAEMON_SESSION_FDS). A
   * session/create or load that would not fit under the limit with the
   * daemon's reserve left unloads idle sessions or is refused with
   * AL_RPC_FD_LIMIT, before any descriptor runs out. */
  size_t fd_limit;
  size_t session_fds;
  /* Loaded sessions with nothing going on (no run, watcher or request)
   * kept beyond this many are unloaded, least recently active first,
   * when a session is created, loaded or run: each holds descriptors, an
   * inotify instance (its warm pool; 128 per user by default) and
   * memory. 0: AL_DAEMON_MAX_IDLE; SIZE_MAX: no bound. */
  size_t max_idle_sessions;
  size_t max_clients;      /* 0: 1024 */
  uint64_t idle_exit_ms;   /* 0: never */
  bool handle_signals;     /* SIGTERM/SIGINT start a shutdown */
  bool open_socket;        /* tests only: socket 0666 (G2) */
  /* Agent tuning for tests (0: the agent's defaults). */
  int64_t retry_base_ms;
  int64_t retry_cap_ms;
  uint64_t kill_grace_ms;
  /* MCP servers every session's agent starts (al_agent_options_t
   * mcp_config; JSON text, borrowed). NULL: none. */
  const char *mcp_config;
  /* Hooks of every session's agent (al_agent_options_t.hooks_config). */
  const char *hooks_config;
  /* The daemon's limits (agentloop/limits.h; its config file's `limits:`
   * and --limit): the defaults of every session, and ceilings that a
   * session/create may lower but not raise. Zero fields: the agent's
   * default, no ceiling. */
  al_limits_t limits;
  /* Shared pacing (its config file's `pacing:`): every session's agent
   * uses the daemon's one client, so the cap and the cool-downs of an
   * endpoint and key hold across sessions. 0: no cap. */
  int pace_rpm;
  int pace_burst;
  void (*on_exit)(al_daemon_t *d, void *data);
  void *data;
} al_daemon_options_t;

void al__daemon_options_init(al_daemon_options_t *o);

/* Sets everything up and starts listening. 0, or an error with a one-line
 * reason in why: UV_EBUSY (another daemon holds the state dir or the
 * socket), UV_EPERM (a directory failed its checks), UV_E* (bind, mkdir). */
int al__daemon_new(uv_loop_t *loop, const al_daemon_options_t *o,
                   al_daemon_t **out, char *why, size_t why_len);

/* Starts the graceful shutdown (idempotent). */
void al__daemon_shutdown(al_daemon_t *d);

/* Counters for tests and measurements. */
typedef struct {
  size_t clients;
  size_t sessions_loaded;
  size_t sessions_known;
  uint64_t lagged;
  uint64_t refused_peers;
  uint64_t requests;
  uint64_t errors;
  size_t replay_bytes;   /* all sessions' rings */
  uint64_t rings_dropped; /* by the idle sweep */
  uint64_t unloaded;      /* idle sessions unloaded for descriptors */
  uint64_t fd_refused;    /* requests refused with AL_RPC_FD_LIMIT */
  size_t fd_limit;
} al_daemon_stats_t;
void al__daemon_stats(const al_daemon_t *d, al_daemon_stats_t *out);
/* What the initialize reply carries as "fleet" (a fleet worker's
 * metrics, shown by `agentloop daemon status`); fn returns a new object. */
void al__daemon_set_status(al_daemon_t *d, json_t *(*fn)(void *data),
                           void *data);

/* The session's agent (tests), or NULL. */
al_agent_t *al__daemon_agent(al_daemon_t *d, const char *session);

#endif
