/* The tool sandbox and the host process's own hygiene (SPEC §8,
 * RELIABILITY.md §4).
 *
 * Every child a tool starts (bash, tools.d CLI tools) runs as
 *   bwrap [namespaces, mounts] -- agentloop-exec [rlimits, Landlock,
 *   seccomp] -- COMMAND
 * ("bwrap" mode). When bubblewrap cannot run here, agentloop-exec alone
 * applies what it can ("degraded" mode: Landlock write roots, seccomp,
 * rlimits, no capabilities, a subreaper that kills stragglers). When
 * neither works the mode is "none".
 *
 * These functions block (they run a probe child, read /proc); call them at
 * start-up, never from a loop callback. */
#ifndef AGENTLOOP_SANDBOX_H
#define AGENTLOOP_SANDBOX_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the user asked for (`--sandbox=auto|required|none`). */
typedef enum {
  AL_SANDBOX_AUTO = 0,     /* the best mode available; headless runs refuse
                            * bash and write tools when that is "none" */
  AL_SANDBOX_REQUIRED = 1, /* bwrap mode or the agent is not created */
  AL_SANDBOX_OFF = 2       /* no sandbox at all (explicit opt-out) */
} al_sandbox_policy_t;

/* What is in force. */
typedef enum {
  AL_SANDBOX_MODE_NONE = 0,
  AL_SANDBOX_MODE_DEGRADED = 1,
  AL_SANDBOX_MODE_BWRAP = 2
} al_sandbox_mode_t;

typedef struct al_sandbox_probe_options_s {
  const char *bwrap;  /* NULL: /usr/bin/bwrap */
  /* The exec helper. NULL: $AGENTLOOP_EXEC, then agentloop-exec next to
   * the running executable, then the installed one. */
  const char *helper;
  bool no_landlock;   /* test seam: act as if Landlock were missing */
  bool no_cgroup;     /* test seam: act as if cgroups could not be made */
} al_sandbox_probe_options_t;

typedef struct al_sandbox_info_s {
  al_sandbox_mode_t mode;
  int landlock_abi;   /* 0: not available */
  bool bwrap_ok;      /* bwrap + helper ran a probe child */
  bool helper_ok;     /* the helper alone ran a probe child */
  bool seccomp_ok;    /* the helper could load its seccomp filter */
  char bwrap[256];
  char helper[1024];
  /* Comma-separated protections that are NOT in force in this mode
   * (empty in bwrap mode on a kernel with Landlock). */
  char missing[512];
  /* Why bwrap or the helper failed, for doctor. */
  char detail[512];
  /* Each tool in its own cgroup (pids.max, memory limit): the pids limit
   * that binds for root too. cgroup_pids / cgroup_memory: where they are
   * made ("" when not); cgroup_detail: why not, or what is missing. */
  bool cgroup_ok;
  char cgroup_pids[256];
  char cgroup_memory[256];
  char cgroup_detail[256];
} al_sandbox_info_t;

void al_sandbox_probe_options_init(al_sandbox_probe_options_t *o);

/* Finds out which mode works here by running the helper (and bwrap around
 * it) once. opts may be NULL. Always fills *out; returns 0. Blocking:
 * a few milliseconds. */
int al_sandbox_probe(const al_sandbox_probe_options_t *opts,
                     al_sandbox_info_t *out);

/* The probe as a JSON object text (al_free it): {"mode", "landlock_abi",
 * "bwrap", "helper", "seccomp", "missing": [...], "detail", "cgroup":
 * {"active", "pids", "memory", "detail"}}. AL_ENOMEM. */
int al_sandbox_info_json(const al_sandbox_info_t *info, char **out);

/* "bwrap", "degraded" or "none". */
const char *al_sandbox_mode_name(al_sandbox_mode_t mode);

/* Hardens the calling (host) process, which holds the API keys:
 * PR_SET_DUMPABLE 0 (its /proc/PID/{environ,mem} are closed to same-uid
 * processes), RLIMIT_CORE 0, FD_CLOEXEC on every inherited fd >= 3, and
 * the values of secret-looking variables (names containing KEY, TOKEN,
 * SECRET, PASSWORD, PASSWD, CREDENTIAL, AUTH or COOKIE) copied to private
 * memory (al_sandbox_getenv) and then overwritten in the environ block
 * itself and unset, since unsetenv() alone leaves the bytes readable in
 * /proc/PID/environ. Call it once, early, before starting threads.
 * Returns 0 or the first failing step's negative code (the other steps
 * still run). */
int al_sandbox_harden_process(void);

/* getenv() that also sees the variables al_sandbox_harden_process()
 * scrubbed (for the API key and tools.d ${VAR} references). */
const char *al_sandbox_getenv(const char *name);

#ifdef __cplusplus
}
#endif
#endif
