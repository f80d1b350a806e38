/* Configuration layer (SPEC §14, docs/config.md): the YAML files, the
 * environment and the flags, merged into one al_config_t that knows where
 * each value came from.
 *
 * Layers, lowest first: defaults, the user file
 * ($XDG_CONFIG_HOME/agentloop/config.yaml, else ~/.config/...), the
 * project file (<workspace>/.agentloop/config.yaml, read only when the
 * project is trusted: the same decision as the project's tools.d), the
 * environment, the flags. A higher layer replaces a value (lists too);
 * the owners' sections merge key by key.
 *
 * Errors are never silent: an unknown key (with a "did you mean"), a
 * value of the wrong type or out of range, and a project file that sets a
 * secret's source or loosens the sandbox are each one line
 * "FILE:LINE:COL: what is wrong" in cfg->errors.
 *
 * Adding a section (owners: context i11, mcp_servers and hooks i13,
 * limits i15): give its row in the table of config.c a parse function of
 * your own file (al_cfg_section_fn); al__config_err and al__config_pos give
 * FILE:LINE:COL for any node. Until then a section is kept as JSON
 * (al_config_section) with every node's position (al_config_section_pos).
 *
 * Loading reads files with blocking I/O: call it before the loop runs
 * (the CLI), or from uv_queue_work (the daemon). */
#ifndef AL_CONFIG_H
#define AL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <yaml.h>

#include "agentloop/sandbox.h"
#include "common/common.h"

typedef enum {
  AL_CFG_DEFAULT = 0,
  AL_CFG_USER,
  AL_CFG_PROJECT,
  AL_CFG_ENV,
  AL_CFG_FLAG
} al_cfg_layer_t;

/* NULL-terminated list of al_malloc'd strings (NULL: unset). */
typedef char **al_cfg_list_t;

typedef struct al_config_s {
  char *provider;       /* "anthropic" | "openai"; NULL: anthropic */
  char *model;
  char *fallback_model;
  char *base_url;
  char *api_key_env;    /* the NAME of the variable holding the key */
  /* Set by the caller before loading when a --provider flag will follow:
   * the environment's provider-specific base URL variable
   * (ANTHROPIC_BASE_URL / OPENAI_BASE_URL) is then that provider's. */
  const char *provider_hint;
  int64_t max_tokens;   /* 0: unset */
  int64_t max_turns;
  struct {
    int64_t connect_ms, idle_ms, progress_ms, tool_ms, run_ms;
  } timeouts;
  struct {
    al_cfg_list_t allow, deny, ask; /* "tool" or "tool(glob)" */
  } permissions;
  struct {
    char *mode;           /* auto | required | none */
    al_cfg_list_t writable;
    al_cfg_list_t denied;
    int network;          /* -1 unset, 0, 1 */
  } sandbox;
  al_cfg_list_t tools_d;
  struct {               /* sub-agents (docs/subagents.md) */
    int enabled;          /* -1 unset (on), 0, 1 */
    int64_t max_depth;    /* 0: unset (the agent's 2) */
    int64_t token_budget; /* per child; 0: unset (the agent's) */
    int parallel_writers; /* -1 unset (off), 0, 1 */
  } subagents;
  struct {          /* shared pacing (docs/run.md "Shared pacing") */
    int64_t rpm;    /* requests per minute per endpoint and key; 0: none */
    int64_t burst;  /* back to back; 0: 1 */
  } pacing;
  struct {
    char *append; /* text after the assembled prompt */
    char *file;   /* a file whose text is appended */
  } system_prompt;

  /* Owners' sections: {"context": {...}, ...}, and "section.key..." ->
   * "FILE:LINE:COL" for every node kept. */
  json_t *sections;
  json_t *positions;
  /* "key" or "section.key" -> {"layer": "user"|..., "where": "FILE:L:C" |
   * "AGENTLOOP_MODEL" | "--model"}. */
  json_t *origins;

  /* Where the files were looked for, and what happened. */
  char *user_file;
  char *project_file;
  bool user_loaded;
  bool project_loaded;
  bool project_untrusted; /* a project file exists and was not read */
  /* The trust al_config_load was given: the caller's verdict on the
   * project, kept so the rest of a run asks no second time (each answer
   * hashes the project's files, src/tools/trust.c). */
  bool project_trusted;

  al_buf_t errors; /* "FILE:LINE:COL: reason\n" lines */
  size_t n_errors;
} al_config_t;

void al_config_init(al_config_t *cfg);
void al_config_free(al_config_t *cfg);

/* ---- loading -------------------------------------------------------------- */

/* Reads YAML text as the layer (USER or PROJECT); name is used in
 * messages. AL_ENOMEM only: everything else lands in cfg->errors. */
int al_config_load_string(al_config_t *cfg, al_cfg_layer_t layer,
                          const char *name, const char *yaml, size_t len);
/* The same for a file; a missing file is not an error (false in *found). */
int al_config_load_file(al_config_t *cfg, al_cfg_layer_t layer,
                        const char *path, bool *found);

typedef const char *(*al_cfg_getenv_fn)(const char *name);

/* The whole set-up: user file, project file when trusted (trust: the
 * caller's decision, e.g. --trust-project or al__tools_project_trusted),
 * then the environment (getenv NULL: getenv(3)). workspace NULL: no
 * project file. Blocking. */
int al_config_load(al_config_t *cfg, const char *workspace, bool trusted,
                   al_cfg_getenv_fn getenv_fn);
/* Applies the environment layer alone. */
void al_config_apply_env(al_config_t *cfg, al_cfg_getenv_fn getenv_fn);

/* A flag: key is a top-level or dotted key ("model", "timeouts.idle_ms"),
 * flag its spelling for `config show --origin` ("--model"). Checked like a
 * file value: AL_EINVAL with the reason in why. */
int al_config_set_flag(al_config_t *cfg, const char *key, const char *value,
                       const char *flag, char *why, size_t why_len);

/* $XDG_CONFIG_HOME/agentloop (else ~/.config/agentloop) into buf; NULL
 * when neither is set. */
const char *al_config_dir(char *buf, size_t size);

/* ---- reading -------------------------------------------------------------- */

/* The API key's value: $api_key_env when set, else ANTHROPIC_API_KEY /
 * OPENAI_API_KEY by provider. *var gets the variable's name. */
const char *al_config_api_key(const al_config_t *cfg,
                              al_cfg_getenv_fn getenv_fn, const char **var);
/* The effective provider ("anthropic" when unset). */
const char *al_config_provider(const al_config_t *cfg);
/* A path value of key resolved (al_malloc'd, NULL on OOM): "~/" is $HOME;
 * a relative path is relative to the project for a project value, to the
 * config directory for a user value, else left as it is. */
char *al_config_path(const al_config_t *cfg, const char *key,
                     const char *path, const char *workspace);
/* An owner's section (borrowed), or NULL. */
const json_t *al_config_section(const al_config_t *cfg, const char *name);
/* "FILE:LINE:COL" of a kept section node by dotted path, or NULL. */
const char *al_config_section_pos(const al_config_t *cfg, const char *path);
/* {"key": value, ...} of everything set (secrets masked), with
 * "origins" when with_origin. New reference. */
json_t *al_config_to_json(const al_config_t *cfg, bool with_origin,
                          al_cfg_getenv_fn getenv_fn);
/* Human-readable: one "key: value   (origin)" line each, into out. */
int al_config_show(const al_config_t *cfg, bool with_origin,
                   al_cfg_getenv_fn getenv_fn, al_buf_t *out);

/* ---- for section parsers -------------------------------------------------- */

typedef struct al_cfg_ctx_s al_cfg_ctx_t;
typedef int (*al_cfg_section_fn)(al_cfg_ctx_t *cx, const char *name,
                                 yaml_node_t *node);

/* Appends "FILE:LINE:COL: msg" for node (NULL: 1:1). */
void al__config_err(al_cfg_ctx_t *cx, const yaml_node_t *node,
                    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "FILE:LINE:COL" of node into buf. */
const char *al__config_pos(const al_cfg_ctx_t *cx, const yaml_node_t *node,
                           char *buf, size_t len);
yaml_node_t *al__config_node(al_cfg_ctx_t *cx, int id);
al_config_t *al__config_cfg(al_cfg_ctx_t *cx);
al_cfg_layer_t al__config_layer(const al_cfg_ctx_t *cx);
/* limits_section.c: `limits:` checked key by key, then kept. */
int al__config_limits_section(al_cfg_ctx_t *cx, const char *name,
                              yaml_node_t *node);
/* The default section parser: a mapping kept as JSON with positions. */
int al__config_section_keep(al_cfg_ctx_t *cx, const char *name,
                            yaml_node_t *node);

#endif
