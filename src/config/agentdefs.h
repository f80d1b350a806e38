/* Agent definitions (issue 23, docs/subagents.md "Agent definitions"):
 * the agents a `task` call may start, read from Markdown files with YAML
 * front matter (Claude Code's format) and handed to the agent in its
 * options (al_agent_options_t.subagents; src/loop may not include this
 * layer).
 *
 * Where, lowest precedence first (a later definition of a name replaces
 * an earlier one, said as an info note):
 *   the built-ins `explore` and `general` (the loop's own,
 *   al_subagent_builtins: they are not in a load's set; a file of that
 *   name is, and replaces the built-in in the agent),
 *   ~/.claude/agents/NAME.md              (Claude Code's user agents),
 *   <config dir>/agents/NAME.md            ($XDG_CONFIG_HOME/agentloop/...),
 *   <workspace>/.claude/agents/NAME.md     (trusted project only),
 *   <workspace>/.agentloop/agents/NAME.md  (trusted project only).
 * Within one scope (user, project) our own directory wins over Claude
 * Code's, so a file written for agentloop beats one written for Claude.
 * An untrusted project's agents are not read (a warning says so).
 *
 * Bounded: at most AL_AGENTDEFS_MAX_FILES files in all, each at most
 * AL_AGENTDEFS_MAX_FILE_BYTES; YAML through al_yaml_load. A file with an
 * error is skipped (a note FILE:LINE:COL says why), the others load; the
 * loader itself fails only for want of memory.
 *
 * Loading is blocking file I/O: al_config_agents_load before the loop
 * runs (the CLI's start-up, as config.yaml is read), or
 * al_config_agents_load_start, which reads in libuv's pool. */
#ifndef AL_CONFIG_AGENTDEFS_H
#define AL_CONFIG_AGENTDEFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agent.h"
#include "common/common.h"

/* al_subagent_def_t: include/agentloop/agent.h. */

#define AL_AGENTDEFS_MAX_FILES 256
#define AL_AGENTDEFS_MAX_FILE_BYTES ((size_t)256 * 1024)
#define AL_AGENTDEFS_MAX_TURNS 100000

typedef enum {
  AL_AGENTDEFS_INFO = 0,    /* a name normalized, a definition replaced */
  AL_AGENTDEFS_WARNING = 1, /* ignored key or tool, untrusted project */
  AL_AGENTDEFS_ERROR = 2    /* the file was skipped */
} al_agentdefs_level_t;

/* "FILE:LINE:COL: message" (or "DIR: message" for a directory). */
typedef struct al_agentdefs_note_s {
  al_agentdefs_level_t level;
  char *text;
} al_agentdefs_note_t;

/* What a load produced; owns every string it points to. defs: the files'
 * definitions only, those named explore then general (replacing the
 * built-ins) first, then the others by name: a deterministic order. */
typedef struct al_agentdefs_s {
  al_subagent_def_t *defs;
  size_t n;
  al_agentdefs_note_t *notes; /* in the order they were found */
  size_t n_notes;
  size_t n_errors; /* notes of level ERROR: files skipped */
  size_t n_files;  /* .md files read */
} al_agentdefs_t;

typedef struct al_agentdefs_options_s {
  const char *config_dir; /* NULL: al_config_dir(); "": none */
  const char *home;       /* for ~/.claude; NULL: $HOME; "": none */
  const char *workspace;  /* the project; NULL: none */
  bool project_trusted;   /* the caller's verdict (al_config_t's) */
  bool no_claude;         /* do not read .claude/agents (either) */
} al_agentdefs_options_t;

void al_agentdefs_options_init(al_agentdefs_options_t *o);

/* Reads every location (blocking). *out is the caller's to free with
 * al_agentdefs_free. 0, or AL_ENOMEM (nothing in *out). */
int al_config_agents_load(const al_agentdefs_options_t *o,
                          al_agentdefs_t **out);

/* The same in libuv's pool. cb runs once on the loop's thread with status
 * 0 and the result (the callback's to free), or a negative code and NULL.
 * The options' strings are copied here (and the environment read here,
 * on the caller's thread). AL_ENOMEM or uv_queue_work's error: refused,
 * cb never runs. */
typedef struct al_agentdefs_req_s al_agentdefs_req_t;
typedef void (*al_agentdefs_load_cb)(al_agentdefs_req_t *req, int status,
                                     al_agentdefs_t *defs, void *data);
int al_config_agents_load_start(uv_loop_t *loop,
                                const al_agentdefs_options_t *o,
                                al_agentdefs_load_cb cb, void *data,
                                al_agentdefs_req_t **out);
/* Before cb has run: after it returns cb never runs; the request frees
 * itself when the pool is done with it (the loop must run until then). */
void al_config_agents_load_cancel(al_agentdefs_req_t *req);

/* Parses one file's text into d as if read from path (tests, a fuzz
 * target, definitions that travel inline); a definition of a name d has
 * replaces it. AL_ENOMEM only: a bad file is a note, and d unchanged. */
int al_agentdefs_add_text(al_agentdefs_t *d, const char *path, const char *text,
                          size_t len);

/* An empty set (what a load starts from). */
int al_agentdefs_new(al_agentdefs_t **out);
void al_agentdefs_free(al_agentdefs_t *d);

/* The definition named name, or NULL. */
const al_subagent_def_t *al_agentdefs_find(const al_agentdefs_t *d,
                                           const char *name);

/* The notes as text, one "level: FILE:LINE:COL: message" line each, into
 * out (its bound applies: AL_ETOOBIG past it). */
int al_agentdefs_notes_text(const al_agentdefs_t *d, al_buf_t *out);

/* Definitions that travel: a chat sends its set in session/create, the
 * daemon keeps it in the session's transcript header (docs/protocol.md)
 * and never reads agent files itself. The JSON is an array of
 * {name, description, system?, model?, tools?, disallowed_tools?,
 *  permission_mode?: "interactive"|"headless"|"job", max_turns?, source?}.
 * Bounded: at most AL_AGENTDEFS_MAX_FILES entries and
 * AL_AGENTDEFS_WIRE_BYTES of text in all. */
#define AL_AGENTDEFS_WIRE_BYTES ((size_t)1024 * 1024)
/* New array, NULL on OOM. */
json_t *al_agentdefs_to_json(const al_agentdefs_t *d);
/* Checks and copies a (NULL or JSON null: an empty set) into *out (the
 * caller's to free). AL_EINVAL with what is wrong in why ("agents[2].name
 * ..."); AL_ENOMEM. */
int al_agentdefs_from_json(const json_t *a, al_agentdefs_t **out, char *why,
                           size_t why_len);

/* Claude Code's tool names and ours, one table (the task tool and the
 * Claude Code compatibility layer use it too). ours NULL: no equivalent
 * here, the tool is dropped with a warning. */
typedef struct al_claude_tool_s {
  const char *claude;
  const char *ours;
} al_claude_tool_t;
extern const al_claude_tool_t al_claude_tools[];
/* The row of a Claude Code tool name (exact case), or NULL: not one. */
const al_claude_tool_t *al_claude_tool_find(const char *claude);

#endif
