/* The sandbox layer's library side (RELIABILITY.md §4): the probe, the
 * wrapper that turns a tool's argv into "bwrap ... -- agentloop-exec ...
 * -- argv", and the host process's hygiene (public part in
 * agentloop/sandbox.h).
 *
 * An al_sandbox_t is made once per agent (blocking: it probes and resolves
 * paths) and is then read-only except for the placeholder bookkeeping
 * (al__sandbox_wrap / al__sandbox_release), which runs on the loop thread.
 *
 * Mount plan in bwrap mode, in this order (later mounts cover earlier):
 *   --ro-bind / /, --dev /dev, --proc /proc (new PID namespace), --tmpfs
 *   /tmp; tmpfs (directories) or /dev/null (files) over the hidden paths
 *   outside the writable roots; --bind each writable root; the hidden paths
 *   inside the roots; --ro-bind each protected path that exists, and for
 *   one that does not exist yet a read-only placeholder at its first
 *   missing component (an empty tmpfs directory, or /dev/null for a file),
 *   so the tool cannot create it. bwrap makes the placeholder's mount point
 *   on disk; al__sandbox_release removes it (if still empty) once no
 *   sandboxed child is running. Last, the helper itself, read-only (a tool
 *   that replaced it would start the next tool without the inner layer;
 *   degraded mode, where it runs outside any sandbox, is turned off when
 *   it lies inside a writable root). */
#ifndef AL_SANDBOX_INT_H
#define AL_SANDBOX_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentloop/sandbox.h"
#include "common/common.h"

#define AL_SANDBOX_DEFAULT_NPROC 512
#define AL_SANDBOX_DEFAULT_NOFILE 1024
#define AL_SANDBOX_DEFAULT_AS ((uint64_t)32 << 30)
#define AL_SANDBOX_DEFAULT_FSIZE ((uint64_t)1 << 30)
/* RLIMIT_DATA (the memory a process can write to: heap, private writable
 * mappings; PROT_NONE reservations such as a JIT's cage do not count) is
 * this share of the machine's memory by default: physical memory, or the
 * cgroup limit of this process when that is lower. */
#define AL_SANDBOX_MEMORY_SHARE_PCT 50

typedef struct al_sandbox_s al_sandbox_t;

/* Paths, relative to each writable root, that a tool may not change (code
 * or configuration that runs later, outside the sandbox): read-only when
 * they exist. A missing one with `placeholder` is covered by a read-only
 * placeholder, so a tool cannot create it either; tools.d/ and
 * .agentloop/ have none: project trust is bound to their content
 * (clitool.h, al__tools_project_trust), so what a tool creates there is
 * not trusted, and the user's tree gets no empty directory. */
typedef struct al_sandbox_protected_s {
  const char *rel;
  bool is_file;
  bool placeholder;
} al_sandbox_protected_t;
extern const al_sandbox_protected_t AL_SANDBOX_PROTECTED[];
extern const size_t AL_SANDBOX_N_PROTECTED;

typedef struct al_sandbox_config_s {
  al_sandbox_policy_t policy;
  al_sandbox_probe_options_t probe; /* seams: bwrap, helper, no_landlock */
  /* Writable roots (the first is the workspace); existing directories.
   * NULL/0: the process cwd. */
  const char *const *write_roots;
  size_t n_write_roots;
  /* Hidden on top of the built-in list (denied_paths). */
  const char *const *hidden;
  size_t n_hidden;
  /* rlimits for the tool (0: the AL_SANDBOX_DEFAULT_* value; cpu 0: none;
   * as_bytes UINT64_MAX: none, for sanitizer-built tools). nproc is also
   * the pids.max of the tool's cgroup (UINT64_MAX: neither). */
  uint64_t nproc;
  uint64_t nofile;
  uint64_t as_bytes;
  /* RLIMIT_DATA per process, and the memory limit of the tool's cgroup
   * (all its processes); 0: AL_SANDBOX_MEMORY_SHARE_PCT of
   * al__sandbox_memory_base(); UINT64_MAX: none. */
  uint64_t data_bytes;
  uint64_t fsize_bytes;
  uint64_t cpu_secs;
  /* Test seam (set only by tests/, never from the environment): no
   * `--owner` for the helper, so neither its owner check and watcher nor
   * the janitor's kill of a dead owner's sandboxes apply, and a tool
   * outlives its agentloop only if bwrap's --die-with-parent fails. */
  bool test_no_owner;
} al_sandbox_config_t;

void al__sandbox_config_init(al_sandbox_config_t *c);

/* Runs the probe for these options now, unless it ran already, so the
 * agents created later (al__sandbox_new with the same options) find it
 * cached. Blocking (it spawns the probe children): for start-up, before
 * a loop runs. */
void al__sandbox_warm(const al_sandbox_probe_options_t *opts);
/* Whether the probe for these options has run in this process (tests). */
bool al__sandbox_probe_cached(const al_sandbox_probe_options_t *opts);

/* Probes (unless the policy is OFF; the answer is cached per process and
 * set of seams) and records the plan. AL_EINVAL for a
 * root that is not an existing directory; AL_ENOTSUP when the policy is
 * REQUIRED and bwrap mode does not work here (the info says why:
 * al__sandbox_info of a NULL sandbox is not available, so *info_out, when
 * not NULL, is filled in either case); AL_ENOMEM. Blocking. */
int al__sandbox_new(const al_sandbox_config_t *cfg, al_sandbox_t **out,
                    al_sandbox_info_t *info_out);
/* Only when no wrapped child is running. NULL is fine. */
void al__sandbox_free(al_sandbox_t *sb);

const al_sandbox_info_t *al__sandbox_info(const al_sandbox_t *sb);
/* True when the helper this sandbox runs lies inside one of its writable
 * roots (the file tools must then refuse to write it). */
bool al__sandbox_helper_in_roots(const al_sandbox_t *sb, char *real,
                                 size_t size);
al_sandbox_mode_t al__sandbox_mode(const al_sandbox_t *sb);

/* The argv that runs `argv` confined with cwd as its working directory:
 * NULL-terminated, every string al_malloc'd (al__sandbox_argv_free). In
 * mode NONE it is a copy of argv. network: the tool declared it needs the
 * network. Each successful call must be paired with one
 * al__sandbox_release() once that child is gone. Any thread (a cold
 * start in bwrap mode calls it on the threadpool: a few lstat() calls on
 * the protected paths, and it waits for the lock). AL_ENOMEM. */
int al__sandbox_wrap(al_sandbox_t *sb, const char *cwd, bool network,
                     const char *const *argv, char ***out);
void al__sandbox_release(al_sandbox_t *sb);
/* al__sandbox_wrap without the cgroup helper in front (counted the
 * same): for a pre-joined launcher (launch.h) to exec. When none is
 * ready, al__sandbox_cgroup_wrap puts the helper in front (string work
 * only, no file-system call: the loop may call it; *argv is replaced,
 * unchanged when tools get no cgroup). AL_ENOMEM. */
int al__sandbox_wrap_joined(al_sandbox_t *sb, const char *cwd, bool network,
                            const char *const *argv, char ***out);
int al__sandbox_cgroup_wrap(const al_sandbox_t *sb, char ***argv);
/* A launcher's argv: the cgroup helper with "--launch" in place of the
 * command (al__sandbox_argv_free). AL_EINVAL when tools get no cgroup or
 * run unsandboxed; AL_ENOMEM. Any thread. */
int al__sandbox_launch_argv(const al_sandbox_t *sb, char ***out);
/* al__sandbox_release in two halves, so the file-system work can run on
 * the threadpool: the first (loop thread) drops the count and says
 * whether placeholders now wait for removal; the second (any thread,
 * hold a reference) removes them unless a new child started meanwhile. */
bool al__sandbox_release_deferred(al_sandbox_t *sb);
/* The first half for the loop thread, which never waits on the lock (a
 * clean-up may hold it on the threadpool while it removes placeholders):
 * 1 released and placeholders wait for removal, 0 released, -1 the lock
 * was busy and nothing was done (call al__sandbox_release on the
 * threadpool instead). */
int al__sandbox_release_try(al_sandbox_t *sb);
/* Tests: takes (true) or drops the lock as a clean-up on the threadpool
 * would hold it. */
void al__sandbox_test_hold(al_sandbox_t *sb, bool hold);
/* Tests: the same for the janitor's lock (held while it is told of
 * placeholders made or removed). */
void al__sandbox_test_hold_janitor(bool hold);
void al__sandbox_cleanup(al_sandbox_t *sb);

/* The warm pool (pool.h) builds on the threadpool: these are safe from
 * any thread. The argv of a sandbox waiting for its command on stdin
 * ("--warm"): bwrap and the helper with every mount but the protected
 * paths', every limit, no --chdir, no command. AL_EINVAL in modes other
 * than bwrap and degraded. */
int al__sandbox_wrap_warm(al_sandbox_t *sb, bool network, char ***out);
/* The mounts for the protected paths, as bwrap options ("--ro-bind SRC
 * DST", "--tmpfs DST", "--remount-ro DST"; a lone "--" when there is
 * nothing), for a warm sandbox's helper to apply when its command
 * arrives: planned when it is built, used at its hand-off. */
/* The same mounts planned ahead, from any thread (a few lstat calls, no
 * lock, nothing registered): *need lists the placeholders they would make
 * (NULL-terminated, maybe empty). Valid only while none of the paths
 * al__sandbox_each_path names changes (the pool watches them). AL_ENOMEM. */
int al__sandbox_protect_plan(al_sandbox_t *sb, char ***ops, char ***need);
/* Uses such a plan (loop thread, no file-system call, never waits):
 * registers its placeholders for removal and counts one wrapped child, as
 * a cold al__sandbox_wrap does (al__sandbox_release once it is gone).
 * AL_ENOMEM; AL_EBUSY when the lock is held (a clean-up is running). */
int al__sandbox_protect_claim(al_sandbox_t *sb, char *const *need);
/* Whether `path` is a registered placeholder: 1 or 0, -1 when the lock
 * is busy (never waits: for the loop thread). */
int al__sandbox_placeholder_try(al_sandbox_t *sb, const char *path);
/* Every path the mount plan reads from the file system (hidden,
 * protected, writable roots): fixed when the sandbox is made, so any
 * thread may call it. */
void al__sandbox_each_path(const al_sandbox_t *sb,
                           void (*fn)(void *arg, const char *path,
                                      bool is_protected),
                           void *arg);
/* One reference per warm build in flight keeps the plan alive after
 * al__sandbox_free; the last unref frees it. */
void al__sandbox_ref(al_sandbox_t *sb);
void al__sandbox_unref(al_sandbox_t *sb);
/* The warm pool attached to this sandbox (al__sandbox_free calls
 * close_fn on it first). */
void al__sandbox_set_pool(al_sandbox_t *sb, void *pool,
                          void (*close_fn)(void *pool));
void *al__sandbox_pool(const al_sandbox_t *sb);
/* The same for the pre-joined launchers (launch.h), closed after it. */
void al__sandbox_set_launch(al_sandbox_t *sb, void *launch,
                            void (*close_fn)(void *launch));
void *al__sandbox_launch(const al_sandbox_t *sb);
void al__sandbox_argv_free(char **argv);
/* Takes (once per process) the lock agentloop-exec --owner looks for:
 * byte getpid() of the helper, read-locked for this process's life. 0, or
 * AL_ENOTSUP when the file system takes no such lock (then no --owner is
 * passed and the parent-death signals alone stop orphaned tools). */
int al__sandbox_owner_lock(const char *helper);
/* True when argv[0] is a program under /tmp outside the writable roots:
 * bwrap mode's private /tmp hides it, so a cold start binds it read-only
 * and no warm sandbox (built without it) can run it. */
bool al__sandbox_cmd_in_tmp(const al_sandbox_t *sb,
                            const char *const *argv);

/* The memory a tool's share is taken from: MemTotal, or the lowest
 * memory limit of this process's cgroup and its ancestors (v2
 * memory.max, v1 memory.limit_in_bytes) when lower. `from` (when not
 * NULL) names the source. Blocking (reads /proc and /sys). */
uint64_t al__sandbox_memory_base(char *from, size_t from_size);
/* The default RLIMIT_DATA for that base (the share, at least 64 MiB). */
uint64_t al__sandbox_default_data(uint64_t base);

/* The helper path the probe would use (static buffer); NULL if none. */
const char *al__sandbox_find_helper(const char *explicit_path);

/* Why user namespaces cannot be made here (userns.c): 0 and "" when they
 * can, 1 with the cause and what would enable it in `buf`, -1 when it could
 * not be tested. Blocking (forks once). */
int al__sandbox_userns_cause(char *buf, size_t len);
/* 1 with the text when Ubuntu's AppArmor userns restriction is on. */
int al__sandbox_userns_restricted(char *buf, size_t len);

#endif
