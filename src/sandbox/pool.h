/* The warm pool: sandboxes built before their command exists (issue 17).
 *
 * Starting a tool in bwrap mode costs bwrap's namespace and mount set-up
 * (several milliseconds) before the command's first instruction. The pool
 * pays that in advance: per sandbox (one per agent, so per session and
 * policy) and per network flag, it keeps a few processes
 *
 *   bwrap <every mount of the plan> -- agentloop-exec <limits> --warm
 *
 * with rlimits, capabilities, NO_NEW_PRIVS, Landlock and seccomp already
 * applied, blocked reading their stdin (a socket). A tool start sends the
 * working directory, the environment (allowlist + declared env) and the
 * argv; the helper chdirs and execs. What is left on the critical path is
 * one send(), one wake-up and the exec.
 *
 * Rules:
 *  - one command per warm sandbox: a process leaves the pool when it is
 *    handed a command and never comes back; a new one is built at once
 *    on the threadpool (the argv with its lstat/realpath calls, the
 *    socket and pipes, posix_spawn), never on the loop's critical path;
 *  - size by use: one per flag at first; a start that finds none (tools
 *    running side by side) raises that flag's target by one, never above
 *    the cap (the agent's tool concurrency, at most AL_POOL_MAX);
 *  - retired (SIGKILL to its process group, reaped) when the sandbox is
 *    freed (agent, session or daemon close), when a hidden path or a
 *    writable root (or a directory above one) is created, removed or
 *    renamed (inotify on those directories, set on the threadpool before
 *    the plan reads them), and after idle_ms without a start (the targets
 *    drop to zero until the next start); bwrap's --die-with-parent ends
 *    them with their parent;
 *  - the protected paths' mounts are planned on the threadpool too, and
 *    planned again when an event says one of their components changed;
 *    a hand-off makes no file-system call: it reads the queued events
 *    (non-blocking) and uses the plan if still current, else starts cold;
 *  - bwrap mode only: degraded and none start cold as before. */
#ifndef AL_SANDBOX_POOL_H
#define AL_SANDBOX_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "sandbox/sandbox.h"

#define AL_POOL_MAX 4
#define AL_POOL_DEFAULT_IDLE_MS (5 * 60 * 1000)

/* A warm sandbox handed to its command: the caller owns every fd. */
typedef struct al_warm_s {
  int pid; /* its process group too (it was started with setsid) */
  int pidfd;
  int out; /* read ends of its stdout and stderr */
  int err;
} al_warm_t;

typedef struct al_pool_stats_s {
  size_t idle;     /* ready, both flags */
  size_t idle_k[2]; /* ready, per network flag */
  size_t building; /* on the threadpool */
  size_t target[2];
  uint64_t served;  /* commands started warm */
  uint64_t misses;  /* starts that found none ready */
  uint64_t retired; /* killed unused (policy change, idle, close) */
  uint64_t failed;  /* builds that failed */
  bool planned;     /* the protected paths' mounts are planned, current */
  uint64_t replans; /* times they were (re)planned */
  int idle_pids[2 * AL_POOL_MAX];
} al_pool_stats_t;

/* Attaches a pool to a bwrap-mode sandbox and starts building (no-op in
 * other modes, when one is attached already, or when AGENTLOOP_WARM=0).
 * cap 0: AL_POOL_MAX; idle_ms 0: the default. Loop thread. */
int al__pool_start(uv_loop_t *loop, al_sandbox_t *sb, size_t cap,
                   uint64_t idle_ms);

/* Takes a warm sandbox for this network flag and sends it the command,
 * with in_fd (the read end of the command's stdin pipe; -1: /dev/null)
 * passed along (SCM_RIGHTS: the caller still owns and closes its copy).
 * 0: *w is running it (its wrapped-child count is released by the caller
 * with al__sandbox_release once it is gone). AL_ENOENT: none ready or the
 * plan changed (start it cold; the pool adapts); other errors: the send
 * failed (the warm one was retired; start cold). Loop thread. */
int al__pool_handoff(al_sandbox_t *sb, bool network, const char *cwd,
                     char *const *env, const char *const *argv, int in_fd,
                     al_warm_t *w);

/* Retires the warm sandboxes whose plan no longer matches the file
 * system (or that died) and starts their replacements. Loop thread. */
void al__pool_prune(al_sandbox_t *sb);

/* False when no pool is attached. */
bool al__pool_stats(const al_sandbox_t *sb, al_pool_stats_t *st);

/* The process side of a warm sandbox, shared with the pre-joined
 * launchers (launch.h): a process waiting on its stdin (a socket, *ctl
 * ours) for one command.
 * al__pool_spawn_waiting starts argv (own session, stdout and stderr
 * pipes in *w) and waits for its "R" (blocking: the threadpool); 0, or
 * the error with nothing left running. al__pool_send sends the command
 * (message format: src/exec/main.c --warm; ops NULL-terminated, maybe
 * empty; in_fd passed along when >= 0) and closes *ctl, so no second
 * command can reach it; AL_ENOMEM, AL_EPIPE (it is then still ours to
 * kill). al__pool_waiting_kill SIGKILLs its group, reaps it and closes
 * every fd; al__pool_waiting_alive does not wait. */
int al__pool_spawn_waiting(char *const *argv, al_warm_t *w, int *ctl);
int al__pool_send(int *ctl, const char *cwd, char *const *env,
                  char *const *ops, const char *const *argv, int in_fd);
void al__pool_waiting_kill(al_warm_t *w, int *ctl);
bool al__pool_waiting_alive(const al_warm_t *w);

#endif
