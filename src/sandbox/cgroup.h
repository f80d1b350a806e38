/* Per-tool cgroups (issue 15): a pids limit that binds for root too (the
 * kernel exempts uid 0 from RLIMIT_NPROC, also inside bwrap's user
 * namespace, which maps to it) and a memory limit that covers every
 * process of a tool and its tmpfs pages.
 *
 * When this process may create cgroups (root, or a delegated cgroup2
 * subtree it owns), every sandboxed tool runs as
 *   agentloop-exec --cgroup DIR [--cgroup DIR] --owner PID --pids-max N
 *                  --memory-max B -- bwrap ... (or the degraded helper)
 * The helper makes DIR/agentloop-<owner pid>-<its pid>, writes the limits,
 * moves itself in and only then execs: nothing the tool starts can be
 * outside it. cgroup2 is used for a controller it offers to our subtree,
 * else the v1 hierarchy of that controller. Once the tool has ended, the
 * sweep (threadpool) removes the cgroups of helpers that are gone, and
 * those left by owners that died (SIGKILL). */
#ifndef AL_SANDBOX_CGROUP_H
#define AL_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct al_cgroup_state_s {
  bool active;        /* tools run in their own cgroup */
  char pids[256];     /* parent directory for the pids controller, or "" */
  char memory[256];   /* ... for the memory controller, or "" */
  char detail[256];   /* why not (or what is missing) */
} al_cgroup_state_t;

/* Finds where cgroups can be made, by making and removing one (blocking:
 * start-up, or the threadpool). Cached per process; `off` (the probe's
 * no_cgroup test seam) skips it and reports inactive. Also removes the
 * cgroups left by owners that have died. */
void al__cgroup_probe(bool off, al_cgroup_state_t *out);

/* The argv prefix for one tool (NULL-terminated, strings al_malloc'd;
 * al__sandbox_argv_free): helper --cgroup ... --. *out is NULL when the
 * state is not active. pids_max 0: no pids limit; mem_max 0 or UINT64_MAX:
 * no memory limit. AL_ENOMEM. */
int al__cgroup_prefix(const al_cgroup_state_t *st, const char *helper,
                      uint64_t pids_max, uint64_t mem_max, char ***out);

/* Removes this process's tool cgroups whose helper has exited (killing
 * anything still in one), and those of dead owners. Blocking, short: the
 * threadpool. Returns how many were removed. */
int al__cgroup_sweep(const al_cgroup_state_t *st);

/* How many cgroups of this process outlive their helper now (tests). */
int al__cgroup_count_stale(const al_cgroup_state_t *st);
/* This sandbox's cgroup state (inactive for NULL). */
struct al_sandbox_s;
const al_cgroup_state_t *al__sandbox_cgroup(const struct al_sandbox_s *sb);

#endif
