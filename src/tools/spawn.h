/* Child-process spawn wrapper (SPEC §8 "Safety, for every child process",
 * STYLE.md 3.3 item 9): runs an argv as a child, never through a shell
 * (the bash tool passes {"/bin/sh", "-c", COMMAND} itself).
 *
 * Every child gets:
 *  - cwd = the given directory (the workspace);
 *  - a minimal environment: the allowlisted host variables that are set
 *    (AL_SPAWN_ENV_ALLOWLIST) plus the caller's declared "NAME=value"
 *    entries, which override an allowlisted variable of the same name.
 *    Nothing else of the host environment (API keys) reaches it;
 *  - its own session and process group (UV_PROCESS_DETACHED: setsid), so
 *    kill(-pid, ...) reaches everything it forked;
 *  - stdin from /dev/null, or a pipe the owner writes (stdin_pipe: MCP
 *    servers speak JSON-RPC on it); stdout and stderr through pipes, each
 *    kept up to output_max bytes; the rest is read and discarded but
 *    counted.
 *
 * Lifecycle (one al_spawn_t per run, owned by the wrapper):
 *  - The result is final when exit_cb has run AND both pipes reached EOF
 *    (3-way join). A grandchild that keeps a pipe open cannot hang it: once
 *    the child has exited, drain_ms later the group is SIGKILLed and the
 *    pipes are closed (result.drain_killed).
 *  - Timeout (timeout_ms) and al__spawn_kill() send SIGTERM to the group,
 *    then SIGKILL after kill_grace_ms if the join has not happened, or as
 *    soon as the child itself has exited (a TERM does not reach a PID
 *    namespace's init, and the command is over).
 *  - When the result is final, whatever is left of the group is SIGKILLed
 *    (background jobs do not outlive their command), every handle is
 *    closed, and on_done runs exactly once from the last close callback,
 *    never inside a call into the wrapper. The al_spawn_t is freed right
 *    after on_done returns. */
#ifndef AL_SPAWN_H
#define AL_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/common.h"
#include "sandbox/sandbox.h"

#define AL_SPAWN_DEFAULT_OUTPUT_MAX (200 * 1024)
#define AL_SPAWN_DEFAULT_TIMEOUT_MS 120000
#define AL_SPAWN_DEFAULT_KILL_GRACE_MS 2000
#define AL_SPAWN_DEFAULT_DRAIN_MS 500

/* The host variables a child may inherit, NULL-terminated. */
extern const char *const AL_SPAWN_ENV_ALLOWLIST[];

typedef struct al_spawn_s al_spawn_t;

typedef struct al_spawn_result_s {
  /* 0: the child ran to its end (any exit code or signal);
   * AL_ETIMEDOUT: killed by the timeout; AL_ECANCELED: al__spawn_kill(). */
  int status;
  int pid;
  int64_t exit_status; /* meaningful when term_signal == 0 */
  int term_signal;     /* the signal that ended the child, or 0 */
  /* The kept bytes (NUL-terminated, not sanitized) and the total seen. */
  const char *out;
  size_t out_len;
  size_t out_total;
  const char *err;
  size_t err_len;
  size_t err_total;
  /* The pipes were still open drain_ms after the exit; the group was
   * killed and the pipes closed. */
  bool drain_killed;
  /* async_start only: the child never started, for this reason (the error
   * al__spawn_start returns when it starts synchronously); status is the
   * same error then. program is the argv[0] the caller gave. */
  int start_error;
  const char *program;
} al_spawn_result_t;

/* The result and its buffers are valid only inside the callback; sp is
 * freed when it returns. */
typedef void (*al_spawn_done_cb)(al_spawn_t *sp, const al_spawn_result_t *res);

/* Data as it arrives (stream 0: stdout, 1: stderr), before the cap; the
 * bytes are valid only inside the callback. It may call al__spawn_kill(). */
typedef void (*al_spawn_output_cb)(al_spawn_t *sp, int stream, const char *p,
                                   size_t n);

typedef struct al_spawn_options_s {
  const char *const *argv; /* required, NULL-terminated; argv[0] is run via
                            * PATH lookup of the child environment */
  const char *cwd;         /* required */
  /* Extra "NAME=value" entries, NULL-terminated; may be NULL. */
  const char *const *env;
  size_t output_max;      /* per stream; 0: default 200 KB */
  uint64_t timeout_ms;    /* 0: default 120 s */
  uint64_t kill_grace_ms; /* TERM -> KILL; 0: default 2 s */
  uint64_t drain_ms;      /* exit -> forced pipe close; 0: default 500 ms */
  al_spawn_done_cb on_done;     /* required */
  al_spawn_output_cb on_output; /* optional (progress, tests) */
  void *data;                   /* copied to sp->data */
  /* Confinement (sandbox/sandbox.h): the argv runs inside it, cwd as its
   * working directory. NULL: not confined. Borrowed; it must outlive the
   * run (the run releases its placeholders when it is freed). */
  al_sandbox_t *sandbox;
  bool network; /* the tool declared it needs the network */
  /* stdin is a pipe (al__spawn_stdin) instead of /dev/null. */
  bool stdin_pipe;
  /* Written to the child's stdin once it exists (copied; implies
   * stdin_pipe), then stdin is closed: what a caller that starts
   * asynchronously cannot write itself, the child not existing yet when
   * al__spawn_start returns. */
  const char *stdin_text;
  size_t stdin_len;
  /* No timeout: a long-lived child (an MCP server) ends by al__spawn_kill
   * or on its own. timeout_ms is ignored. */
  bool no_timeout;
  /* A cold start in bwrap mode plans bwrap's argv (lstat/realpath of the
   * protected and hidden paths, the placeholder lock) on the threadpool
   * and spawns from the loop when that is done: al__spawn_start returns
   * before the child exists. A kill or the timeout before then means it
   * never starts (on_done: AL_ECANCELED / AL_ETIMEDOUT, pid 0); a failure
   * to start arrives as on_done with start_error set instead of a return
   * code. Warm starts and other modes are unchanged. */
  bool async_start;
} al_spawn_options_t;

struct al_spawn_s {
  void *data; /* the owner's */

  /* private */
  uv_loop_t *loop;
  uv_process_t proc;    /* the uv_spawn path */
  uv_poll_t pidpoll;    /* the posix_spawn path: readable when it exits */
  int pidfd;
  bool fast;            /* started by posix_spawn (see spawn.c) */
  uv_pipe_t pipes[2];   /* stdout, stderr */
  uv_pipe_t in;         /* stdin when stdin_pipe (always initialized) */
  bool has_in;          /* in is open and connected to the child */
  uv_timer_t timers[3]; /* timeout, kill escalation, drain */
  al_buf_t bufs[2];
  size_t totals[2];
  size_t output_max;
  uint64_t timeout_ms;
  uint64_t kill_grace_ms;
  uint64_t drain_ms;
  al_spawn_done_cb on_done;
  al_spawn_output_cb on_output;
  int pid;
  int64_t exit_status;
  int term_signal;
  int status;
  int pending_closes;
  bool exited;
  bool eof[2];
  bool killing;
  bool drain_killed;
  bool finished;
  bool refused; /* uv_spawn failed: free silently after the closes */
  bool proc_init; /* uv_spawn was called (proc must be closed) */
  /* Released, and its reference dropped, when the run is freed: a run
   * keeps its sandbox alive until its placeholders are handled, even if
   * the owner frees it first (the close of a session with a run ending). */
  al_sandbox_t *sandbox;
  uv_work_t cleanup;     /* its placeholders removed off the loop */
  /* async_start: the plan on the threadpool and what it needs. */
  uv_work_t plan;
  bool planning;
  bool plan_network;
  bool plan_stdin;
  /* The working directory is one (read with the plan): only then may a
   * launcher take the start, whose failing chdir would be an exit 125,
   * not the start error a cold start reports. */
  bool plan_cwd_ok;
  int plan_rc;
  int start_error;
  al_sandbox_t *plan_sb;
  char **plan_argv;
  char **plan_wrapped;
  char **plan_env;
  char *plan_cwd;
  char program[256];
  int warm_in; /* a warm start's stdin pipe, until `in` owns it */
  char *feed;   /* stdin_text's copy, until written */
  size_t feed_len;
  uv_write_t feed_req;
  struct al_spawn_early_s *early; /* al__spawn_write before the child */
};

/* Defaults: the AL_SPAWN_DEFAULT_* values, everything else NULL. */
void al__spawn_options_init(al_spawn_options_t *opts);

/* Starts the child. On success *out is the run (borrowed by the caller
 * until on_done) and on_done will fire exactly once. On failure nothing
 * fires and the error is returned: AL_EINVAL (missing argv/cwd/on_done, an
 * env entry without "=" or with an empty name), AL_ENOMEM, or the
 * uv_spawn error (UV_ENOENT for a missing program or cwd, ...). opts and
 * everything it points to are borrowed for the duration of the call. */
int al__spawn_start(uv_loop_t *loop, const al_spawn_options_t *opts,
                    al_spawn_t **out);

/* Kills the run's process group (SIGTERM, then SIGKILL after the grace
 * period). on_done still fires, with status AL_ECANCELED. Idempotent; a
 * no-op once the result is final. sp must not be used after its on_done
 * (it is freed then), so call this only before on_done. */
void al__spawn_kill(al_spawn_t *sp);

/* The child's stdin (stdin_pipe), for uv_write; NULL when there is none
 * or it was closed. Writes pending at close are cancelled (UV_ECANCELED). */
uv_stream_t *al__spawn_stdin(al_spawn_t *sp);
/* Writes len bytes of buf (taken: freed once written, or at once on
 * failure) to the child's stdin; before the child exists (an
 * asynchronous start) they wait and go first once it does. 0, or
 * UV_EPIPE when stdin is not open. */
int al__spawn_write(al_spawn_t *sp, char *buf, size_t len);
/* Closes the child's stdin (end of input). Idempotent. */
void al__spawn_close_stdin(al_spawn_t *sp);

/* Builds the child environment: NULL-terminated array of al_malloc'd
 * "NAME=value" strings (free with al__spawn_env_free). AL_EINVAL for a bad
 * extra entry, AL_ENOMEM. */
int al__spawn_env_build(const char *const *extra, char ***out);
void al__spawn_env_free(char **env);

#endif
