/* tools.d CLI tools (SPEC §8, seed 001 §6.3, docs/tools.md).
 *
 * A tools.d directory holds YAML files (*.yaml, *.yml, loaded in name
 * order); each file is either a mapping with a `tools:` sequence or one
 * tool mapping. A tool runs `cmd` with an argv built from `args` and, for
 * each optional parameter that is given, its `optional_args` entry. Every
 * "{{param}}" in a template element is replaced by the value's text, so a
 * value always lands inside exactly one argv element; nothing passes
 * through a shell. An optional parameter given as null, or an optional
 * boolean given as false, counts as not given (a flag's optional_args
 * appear only when it is true).
 *
 * Loading never stops at a bad file: a file that does not parse, or a tool
 * that is invalid, adds one "FILE:LINE:COLUMN: reason" line to the set's
 * errors (line and column 1-based, from libyaml's marks) and the other
 * tools still load. Project-level files (`project`) are code from the
 * repository, so they may not take host variables in `env` (${VAR}).
 *
 * Validation before anything runs (al__cli_build_argv): unknown
 * parameters, missing required ones, type, enum, pattern (POSIX extended
 * regex, searched as JSON Schema does: anchor it with ^...$),
 * minLength/maxLength (in characters), minimum/maximum, NUL bytes, and
 * option injection: a value that starts with '-' and lands at the start
 * of an argv element is refused unless the parameter says
 * `allow_leading_dash: true` or an earlier element of the argv is "--".
 * Errors name the parameter and the rule. */
#ifndef AL_CLITOOL_H
#define AL_CLITOOL_H

#include <limits.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agent.h"
#include "common/common.h"
#include "executor/executor.h"
#include "sandbox/sandbox.h"

#define AL_CLI_MAX_ERRORS_BYTES (256 * 1024)

typedef enum {
  AL_CLI_STRING = 0,
  AL_CLI_INTEGER,
  AL_CLI_NUMBER,
  AL_CLI_BOOLEAN
} al_cli_type_t;

typedef struct al_cli_param_s {
  char *name;
  char *description;
  al_cli_type_t type;
  char **enum_vals; /* NULL-terminated or NULL */
  char *pattern;
  regex_t re;
  bool has_re;
  int64_t min_len; /* -1: unset */
  int64_t max_len;
  bool has_min;
  bool has_max;
  double min;
  double max;
  bool optional;
  bool allow_dash;
} al_cli_param_t;

typedef struct al_cli_optarg_s {
  char *param;
  char **args; /* NULL-terminated */
} al_cli_optarg_t;

typedef struct al_cli_def_s {
  char *name;
  char *description;
  char *file; /* where it was defined */
  int line;
  char *cmd;
  char **args; /* NULL-terminated templates */
  al_cli_optarg_t *opt;
  size_t n_opt;
  al_cli_param_t *params;
  size_t n_params;
  al_tool_category_t category;
  bool concurrency_safe;
  uint64_t timeout_ms;
  size_t max_output;
  char **env; /* NULL-terminated "NAME=value", ${VAR} expanded */
  bool network;
  bool project;
  bool compactable; /* old results may be cleared (docs/context.md) */
} al_cli_def_t;

typedef struct al_cli_set_s {
  al_cli_def_t **defs;
  size_t n;
  al_buf_t errors; /* "FILE:LINE:COL: reason\n" lines */
  size_t n_errors;
} al_cli_set_t;

void al__cli_set_init(al_cli_set_t *set);
void al__cli_set_free(al_cli_set_t *set);
/* Loads every *.yaml / *.yml of dir (a missing dir is not an error).
 * Blocking. Returns AL_ENOMEM only; everything else lands in errors. */
int al__cli_load_dir(al_cli_set_t *set, const char *dir, bool project);
int al__cli_load_file(al_cli_set_t *set, const char *path, bool project);
/* Parses YAML text; `name` is the file name used in messages. */
int al__cli_load_string(al_cli_set_t *set, const char *name,
                        const char *yaml, size_t len, bool project);
/* Appends "FILE:LINE:COL: reason" to the set's errors. */
void al__cli_set_error(al_cli_set_t *set, const char *file, int line,
                       int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Finds the next "{{name}}" in a template from p on: 1 with *start at its
 * "{{", *end just past its "}}" and the name (spaces trimmed) in
 * [*name, *name + *len); 0 when there is none; -1 for a "{{" without
 * "}}". */
int al__cli_placeholder(const char *p, const char **start, const char **end,
                        const char **name, size_t *len);
/* The parameter called [name, name + len), or NULL; *idx gets its index
 * (idx may be NULL). */
al_cli_param_t *al__cli_param(const al_cli_def_t *d, const char *name,
                              size_t len, size_t *idx);

/* $XDG_CONFIG_HOME/agentloop (or ~/.config/agentloop) into buf; NULL when
 * neither is set. */
const char *al__tools_config_dir(char *buf, size_t size);

/* Project trust, bound to the content of tools.d/, .agentloop/,
 * .claude/agents/ and .mcp.json (src/tools/trust.c). All blocking. */
typedef enum {
  AL_TRUST_NONE = 0,   /* no record for this workspace */
  AL_TRUST_TRUSTED,    /* recorded, and the files are the approved ones */
  AL_TRUST_CHANGED,    /* recorded, and files were added/removed/modified */
  AL_TRUST_UNBOUND,    /* a path-only record (before trust had a hash) */
  AL_TRUST_UNREADABLE  /* the files could not be read or are over bounds */
} al_trust_state_t;

typedef struct al_project_trust_s {
  al_trust_state_t state;
  char real[PATH_MAX];  /* the workspace's real path */
  char hash[65];        /* the project's hash now */
  char recorded[65];    /* the recorded one ("" for a path-only record) */
  al_buf_t manifest;    /* "SHA256 PATH" lines, the files now */
  /* "added P", "removed P", "modified P" lines: what is not approved
   * (CHANGED, UNBOUND), or what al__tools_trust_project approved. */
  al_buf_t changes;
} al_project_trust_t;

/* The manifest of the files that matter and its hash (64 hex digits).
 * 0, AL_ENOMEM, AL_ETOOBIG (over the bounds) or a negative errno. */
int al__tools_project_manifest(const char *workspace, al_buf_t *out,
                               char hash[65]);
/* The trust state of workspace into *t (free with
 * al__project_trust_free, whatever it returns). 0 or an error (the state
 * is then NONE or UNREADABLE: not trusted). */
/* The bounds on what trust hashes (src/tools/trust.c), and their words
 * for the messages that name them. */
#define AL_TRUST_MAX_FILES 4096
#define AL_TRUST_MAX_MIB 32
#define AL_TRUST_MAX_DEPTH 16
#define AL_TRUST_XSTR_(x) #x
#define AL_TRUST_XSTR(x) AL_TRUST_XSTR_(x)
#define AL_TRUST_LIMITS_TEXT                                      \
  AL_TRUST_XSTR(AL_TRUST_MAX_FILES) " files, " AL_TRUST_XSTR(     \
      AL_TRUST_MAX_MIB) " MiB or " AL_TRUST_XSTR(AL_TRUST_MAX_DEPTH) \
      " levels"
int al__tools_project_trust(const char *workspace, al_project_trust_t *t);
void al__project_trust_free(al_project_trust_t *t);
/* True only when state is TRUSTED. */
bool al__tools_project_trusted(const char *workspace);
/* Records the workspace's files as approved (the config directory and
 * trusted-projects.d/ created 0700), replacing an older record; *t says
 * what changed (t->changes) against what was approved before (t may be
 * NULL; else free it whatever this returns). 0 or a negative errno-style
 * code. */
int al__tools_trust_project(const char *workspace, al_project_trust_t *t);
/* "trusted", "untrusted", "changed", "unbound", "unreadable". */
const char *al__trust_state_name(al_trust_state_t s);

/* The JSON Schema of the tool's input (new reference, NULL on ENOMEM). */
json_t *al__cli_def_schema(const al_cli_def_t *d);

/* Validates `input` and builds the argv (cmd first, NULL-terminated, every
 * string al_malloc'd; free with al__sandbox_argv_free). 0, AL_EINVAL with
 * the reason (naming the parameter and the rule) in why, or AL_ENOMEM. */
int al__cli_build_argv(const al_cli_def_t *d, const json_t *input,
                       char ***argv, al_buf_t *why);

/* ---- the tool ------------------------------------------------------------- */

typedef struct al_clitool_options_s {
  uv_loop_t *loop;       /* required */
  const char *workspace; /* required: cwd */
  al_sandbox_t *sandbox; /* borrowed; NULL: unconfined */
  size_t display_max;    /* default 40,000 characters */
  uint64_t kill_grace_ms;
  uint64_t drain_ms;
} al_clitool_options_t;

void al__clitool_options_init(al_clitool_options_t *o);
/* A tool implementation for def (borrowed: it must outlive the tool).
 * AL_EINVAL, AL_ENOMEM. */
int al__clitool_new(const al_clitool_options_t *o, const al_cli_def_t *def,
                    al_tool_impl_t **out);
void al__clitool_free(al_tool_impl_t *impl);

#endif
