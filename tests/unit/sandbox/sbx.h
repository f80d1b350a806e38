/* Sandbox test fixture: a host that holds secrets, a workspace with traps
 * around it, and tools (bash, file tools, tools.d CLI tools) run through a
 * real executor inside the sandbox under test.
 *
 * Layout, all under one /var/tmp/al_sbx_XXXXXX directory (not /tmp: bwrap
 * mode gives tools a private /tmp, which would make every outside write
 * fail for the wrong reason):
 *   ws/        the workspace (writable root); ws/secret is a denied path
 *   out/       outside the roots; out/canary holds "original\n" (0644)
 *   home/      $HOME: .ssh/id_rsa, .config/agentloop/config.yaml and
 *              .local/state/agentloop/s.jsonl hold file canaries
 *   run/       $XDG_RUNTIME_DIR: run/agentloop/agentloopd.sock listens
 * The host environment holds three secret canaries plus dangerous
 * variables (BASH_ENV, ...); al_sandbox_harden_process() runs as the
 * daemon would. A TCP listener on 127.0.0.1 and the unix socket count
 * every connection a tool manages to make. */
#ifndef AL_TEST_SBX_H
#define AL_TEST_SBX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "executor/executor.h"
#include "sandbox/sandbox.h"
#include "tools/clitool.h"
#include "tools/spawn.h"
#include "tools/tools.h"

#define SBX_CANARY1 "sk-ant-CANARY-ALPHA-7f3a9e"
#define SBX_CANARY2 "sk-CANARY-BRAVO-91c2d4"
#define SBX_CANARY3 "ghp_CANARY-CHARLIE-55d0b1"
#define SBX_FILE_CANARY "FILE-CANARY-DELTA-2b8c"
#define SBX_DENIED_CANARY "DENIED-CANARY-ECHO-6e1f"

typedef enum {
  SBX_BWRAP = 0,   /* the real thing */
  SBX_DEGRADED = 1 /* bwrap "fails": the helper alone */
} sbx_mode_t;

typedef struct sbx_s {
  uv_loop_t loop;
  al_executor_t ex;
  bool closed;
  char base[200];
  char ws[240];
  char out[240];
  char home[240];
  char run[240];
  char sock[320];
  int tcp_fd;
  int tcp_port;
  int unix_fd;
  al_sandbox_t *sb;
  al_pathpolicy_t pol;
  al_tool_impl_t *bash;
  al_tool_impl_t *read_file;
  al_tool_impl_t *write_file;
  al_tool_impl_t *list_dir;
  al_cli_set_t cli;
  al_tool_impl_t **cli_tools;
  /* The last call. */
  int completed;
  bool is_error;
  char *content;
} sbx_t;

/* The warm pool's idle time for the next sbx_init (0: the default). */
extern uint64_t sbx_pool_idle_ms;
/* RLIMIT_DATA of the tools for the next sbx_init (0: the default share of
 * the machine). */
extern uint64_t sbx_data_bytes;
/* The next sbx_init acts as if cgroups could not be made here. */
extern bool sbx_no_cgroup;
/* bwrap mode without the warm pool: every start plans its sandbox cold. */
extern bool sbx_no_pool;
/* The next sbx_init's helpers get no --owner (al_sandbox_config_t's
 * test_no_owner): only --die-with-parent ties a tool to its agentloop. */
extern bool sbx_no_owner;

/* Builds everything; the sandbox mode must come out as asked (a failing
 * probe fails the test: nothing is skipped). */
void sbx_init(sbx_t *x, sbx_mode_t mode);
/* Runs one call of tool `name` with the JSON input to its completion;
 * x->content / x->is_error hold the result. */
void sbx_call(sbx_t *x, const char *name, const char *input);
/* bwrap mode: runs the loop until a warm sandbox that matches the
 * workspace as it is now is ready. */
void sbx_wait_warm(sbx_t *x);
#define SBX_MAX_TREE 256
/* `root` and every process below it now: a pidfd for each (readable once
 * it has exited, whoever its parent); returns how many. */
size_t sbx_tree_pidfds(int root, int *fds, size_t max);
/* True when every one exits within the (scaled) limit; closes them. */
bool sbx_all_exit(int *fds, size_t n);
/* ${WS} ${OUT} ${HOME} ${PID} ${PORT} ${SOCK} ${MARK} expanded (static
 * buffer, overwritten by the next call). */
const char *sbx_expand(const sbx_t *x, const char *s, const char *mark);
/* Connections accepted on the TCP listener and the unix socket since
 * init. */
int sbx_connections(sbx_t *x);
/* True when some live process has `mark` in its command line. */
bool sbx_process_with(const char *mark);
/* Polls (5 ms loop timer, at most ~3 s x the timeout multiplier) until
 * no process has `mark`. */
bool sbx_wait_no_process(sbx_t *x, const char *mark);
void sbx_finish(sbx_t *x);
/* A command (`/bin/sh -c cmd`) started through the spawn wrapper
 * directly, so each result carries its pid; timeout_ms 0: the default.
 * A warm sandbox or a launcher, when ready, takes it inside
 * sbx_run_start (no threadpool hop). */
typedef struct sbx_run_s {
  bool done;
  int status;
  int pid;
  int64_t exit_status;
  char out[8192];
} sbx_run_t;
al_spawn_t *sbx_run_start(sbx_t *x, const char *cmd, sbx_run_t *w,
                          uint64_t timeout_ms);
void sbx_run_wait(sbx_t *x, sbx_run_t *w);
/* Returns when tools get a cgroup here; else, outside CI, finishes x and
 * exits the test as not run (the reason printed); under CI=true, fails. */
void sbx_need_cgroup(sbx_t *x);

#endif
