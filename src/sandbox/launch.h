/* Pre-joined launchers: a cold start that does not pay the cgroup join.
 *
 * A cold start (no warm sandbox ready: the first call, a policy change,
 * more tools side by side than the pool holds; every start in degraded
 * mode) runs `agentloop-exec --cgroup ... -- bwrap ...` (cgroup.h): the
 * helper makes the tool's cgroup, moves itself in and execs, all on the
 * start's critical path, plus one more exec. Per sandbox this keeps one
 *
 *   agentloop-exec --cgroup DIR... --owner PID --pids-max N ... --launch
 *
 * already inside its fresh cgroup, blocked on its stdin (a socket) for
 * what to exec: bwrap's argv (the helper's in degraded mode), its
 * environment and working directory, and the command's stdin fd. The
 * hand-off is the warm pool's (al__pool_send); what it sends is the cold
 * start's own argv without the helper in front (al__sandbox_wrap_joined).
 *
 * Rules:
 *  - policy-independent: the cgroup's limits are the sandbox's (nproc,
 *    data_bytes), the same for both network flags and every mount plan,
 *    which travel with the command;
 *  - one command per launcher: our end of its socket is closed as the
 *    command is sent; a new one is built at once on the threadpool; at
 *    most one per sandbox (a second start side by side puts the helper in
 *    front as before: al__sandbox_cgroup_wrap);
 *  - killed (SIGKILL to its group, reaped) when the sandbox is freed and
 *    after idle_ms without a start (none is built again until the next
 *    start); its cgroup is then removed on the threadpool. It dies with
 *    agentloop (PDEATHSIG); that agentloop's janitor or the next probe
 *    removes the cgroup;
 *  - only where tools get a cgroup (bwrap and degraded modes);
 *    AGENTLOOP_LAUNCH=0 turns it off (for reference measurements). */
#ifndef AL_SANDBOX_LAUNCH_H
#define AL_SANDBOX_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "sandbox/pool.h"
#include "sandbox/sandbox.h"

typedef struct al_launch_stats_s {
  bool ready;    /* a launcher waits */
  int pid;       /* its pid (0: none) */
  bool building; /* one is being started on the threadpool */
  uint64_t served;  /* cold starts it took */
  uint64_t misses;  /* cold starts that found none ready */
  uint64_t retired; /* killed unused (idle, close, died) */
  uint64_t failed;  /* launchers that could not be started */
} al_launch_stats_t;

/* Attaches the launcher to a sandbox and starts building it (no-op when
 * tools get no cgroup, when one is attached, or when AGENTLOOP_LAUNCH=0).
 * idle_ms 0: AL_POOL_DEFAULT_IDLE_MS. Loop thread. AL_ENOMEM. */
int al__launch_start(uv_loop_t *loop, al_sandbox_t *sb, uint64_t idle_ms);

/* Hands argv (al__sandbox_wrap_joined's) with env and cwd to the ready
 * launcher, in_fd (the command's stdin; -1: /dev/null) passed along (the
 * caller still closes its copy). 0: *w runs it (the caller owns every
 * fd). AL_ENOENT: none ready (put the helper in front and start as
 * before); other errors: the send failed (that launcher was killed).
 * Loop thread: no file-system call; the only wait is the reaping of a
 * launcher killed here (one that died or refused the send: it goes at
 * once, as the pool's do). */
int al__launch_handoff(al_sandbox_t *sb, const char *cwd, char *const *env,
                       const char *const *argv, int in_fd, al_warm_t *w);

/* False when none is attached. */
bool al__launch_stats(const al_sandbox_t *sb, al_launch_stats_t *st);

#endif
