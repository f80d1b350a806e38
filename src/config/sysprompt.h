/* The system prompt of a session (docs/config.md "System prompt"), built
 * once when the session starts, in this order (later parts come later in
 * the prompt, so they win where they disagree):
 *
 *   1. our base prompt: the environment (working directory, platform,
 *      date, sandbox mode) and how to use the tools;
 *   2. the user's own instructions: AGENTS.md, then CLAUDE.md, in the
 *      config directory ($XDG_CONFIG_HOME/agentloop);
 *   3. the project's: AGENTS.md, then CLAUDE.md (read for compatibility),
 *      in every directory from the repository root (the nearest parent
 *      with a .git) down to the workspace; without a repository, the
 *      workspace's alone;
 *   4. the configured system_prompt.file, then system_prompt.append;
 *   5. --system FILE / --system-text TEXT.
 *
 * Instruction files (2, 3, 4) share a size cap; a file that does not fit
 * is cut, and the prompt and the notices say so. Blocking file reads:
 * call it before the loop runs. */
#ifndef AL_CONFIG_SYSPROMPT_H
#define AL_CONFIG_SYSPROMPT_H

#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "common/common.h"
#include "config/config.h"

#define AL_SYSPROMPT_DEFAULT_CAP (64 * 1024)

typedef struct {
  const char *workspace;   /* absolute; required */
  const char *sandbox;     /* how the sandbox stands, in words; NULL: unknown */
  const char *config_dir;  /* NULL: al_config_dir() */
  const al_config_t *cfg;  /* system_prompt.{file,append}; may be NULL */
  const char *extra;       /* --system / --system-text; may be NULL */
  size_t cap;              /* instruction bytes; 0: the default */
  time_t now;              /* 0: time(NULL) */
} al_sysprompt_options_t;

/* The prompt into out (NUL-terminated). sources (may be NULL) gets a new
 * array of {"path", "bytes", "cut"} for every file read; notices one line
 * each for what was cut. 0 or AL_ENOMEM. */
int al_sysprompt_build(const al_sysprompt_options_t *o, al_buf_t *out,
                       json_t **sources, al_buf_t *notices);

/* Just the part a fresh child agent inherits (docs/subagents.md): the
 * environment block of part 1 and the instruction files of parts 2 and 3
 * (AGENTS.md, CLAUDE.md), under the same cap; not the base prompt's
 * guidance, nor system_prompt.file/append or --system. The task tool ends
 * a child's system prompt with it (al_agent_opts_input_t.task_preamble).
 * Blocking reads, as al_sysprompt_build. 0 or AL_ENOMEM. */
int al_sysprompt_preamble(const al_sysprompt_options_t *o, al_buf_t *out,
                          al_buf_t *notices);

#endif
