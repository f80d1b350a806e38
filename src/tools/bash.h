/* The `bash` built-in tool (SPEC §8, seed 001 §6): runs
 * `/bin/sh -c COMMAND` in the workspace through the spawn wrapper
 * (tools/spawn.h), so it gets the allowlisted environment, its own process
 * group, stdin from /dev/null, capped output and the timeout.
 *
 * Input: {"command": string, "timeout": number?}; timeout is in seconds
 * (fractions allowed), capped at max_timeout_ms; absent: timeout_ms.
 * Concurrency-unsafe (is_concurrency_safe is NULL).
 *
 * Result content (always valid UTF-8, invalid bytes become U+FFFD):
 *   [Error: command timed out after N s\n]     on timeout
 *   STDOUT
 *   [\n]"[stderr]\n"STDERR                     when stderr is not empty
 *   [\n[OUTPUT TRUNCATED: showing X of Y characters from bash]]
 *   [\n]"exit code N" | "killed by signal N"   when not a clean exit 0
 * STDOUT+stderr part is cut at display_max characters (Unicode code
 * points); Y counts every character the command wrote, the bytes past the
 * spawn wrapper's output_max counting one each. Empty output with exit 0
 * is "(no output)". is_error: non-zero exit, killed by a signal, timed out.
 *
 * The blocklist (al__bash_blocked) is defense in depth, checked before
 * anything is spawned; a blocked command is an error result naming the
 * rule. Bad input and a failed spawn are error results too. start() never
 * completes synchronously: those results come from a zero timer. */
#ifndef AL_BASH_H
#define AL_BASH_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "executor/executor.h"
#include "sandbox/sandbox.h"

#define AL_BASH_DEFAULT_DISPLAY_MAX 40000
#define AL_BASH_DEFAULT_MAX_TIMEOUT_MS 600000

typedef struct al_bash_options_s {
  uv_loop_t *loop;       /* required */
  const char *workspace; /* required: the child's cwd */
  const char *shell;     /* default "/bin/sh" */
  /* Extra "NAME=value" entries for the child, NULL-terminated; copied. */
  const char *const *env;
  size_t output_max;      /* per stream, bytes kept; default 200 KB */
  size_t display_max;     /* characters the model sees; default 40,000 */
  uint64_t timeout_ms;    /* default 120 s */
  uint64_t max_timeout_ms; /* cap on the input's timeout; default 600 s */
  uint64_t kill_grace_ms; /* default 2 s */
  uint64_t drain_ms;      /* default 500 ms */
  /* Confinement of every command (borrowed; must outlive the tool).
   * NULL: unconfined. */
  al_sandbox_t *sandbox;
  /* Commands get the network (sandbox.network: true in the user's
   * configuration); default off: a private network namespace. */
  bool network;
} al_bash_options_t;

/* Defaults (AL_SPAWN_DEFAULT_* and the above); loop, workspace NULL. */
void al__bash_options_init(al_bash_options_t *opts);

/* Fills *out with a new bash tool (name "bash"). Options are copied.
 * AL_EINVAL: no loop or workspace, or a bad env entry; AL_ENOMEM. */
int al__bash_tool_new(const al_bash_options_t *opts, al_tool_impl_t **out);
/* Only once no call of the tool is in flight. NULL is fine. */
void al__bash_tool_free(al_tool_impl_t *impl);

/* NULL when the command passes the blocklist, else a static description
 * of the rule it hit. Looks at every simple command (split on ; & | && ||
 * newlines, parentheses, braces, backquotes and $( outside quotes), past
 * assignments and wrappers (env, command, exec, nohup, time, nice, xargs),
 * and into `sh -c`/`bash -c`/eval arguments. */
const char *al__bash_blocked(const char *command);

#endif
