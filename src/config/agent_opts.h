/* Configuration -> agent options: the one mapping every front end uses
 * (STYLE §6.3). `agentloop run`, the daemon's sessions (fed by a chat's
 * session/create) and, later, batch, fleet and child agents all build
 * their al_agent_options_t here from an al_config_t plus an explicit input
 * of what differs between them (flags over the configuration, the
 * daemon's own defaults and ceilings, headless or interactive). A front
 * end then sets only its wiring: data, client, permission callback,
 * session id and numbering, commit hook, tool_output_dir.
 *
 * The store owns every string and array the options point to, so the
 * configuration and the input may be freed once the agent is created (it
 * copies what it keeps) or kept: either way, one al_agent_opts_store_free.
 *
 * Blocking: the MCP and hooks files named by the configuration, a flag or
 * a trusted project are read here (the CLI, before its loop runs). The
 * daemon passes the text it was given (mcp_text_given) and reads
 * nothing. */
#ifndef AL_CONFIG_AGENT_OPTS_H
#define AL_CONFIG_AGENT_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "agentloop/agent.h"
#include "config/config.h"

/* Defined by include/agentloop/agent.h once sub-agents land (the task
 * work of issue 23); only pointed to here. */
struct al_subagent_def_s;

typedef struct al_agent_opts_input_s {
  /* HEADLESS: the configured `ask` rules deny (nobody can be asked).
   * INTERACTIVE: they are kept apart (store->ask) for the front end's
   * permission callback. */
  al_permission_mode_t permission_mode;
  /* The tools' working directory (NULL: the process cwd); relative
   * configured paths resolve from it. */
  const char *workspace;
  /* The assembled system prompt (al_sysprompt_build: base, instruction
   * files, system_prompt.file/append, --system); NULL: none. */
  const char *system;
  /* A key given outright (--api-key, the client's, the daemon's by
   * provider); NULL: the configured variable's value (getenv_fn). */
  const char *api_key;
  al_cfg_getenv_fn getenv_fn; /* NULL: getenv(3) */
  bool trust_project;         /* --trust-project (cfg's verdict counts) */
  /* The models catalogue (borrowed; must outlive the agent). */
  const al_models_t *models;

  /* Flags over the configuration: zero / NULL / -1 leave its value. */
  struct {
    int64_t max_tokens;
    uint32_t max_turns;
    int64_t idle_timeout_ms;
    int retries; /* -1: the default; else tries - 1 */
    int sandbox; /* -1: sandbox.mode; else al_sandbox_policy_t */
    const char *const *allow_tools; /* NULL-terminated, before the config's */
    const char *const *deny_tools;
    const char *const *tools_dirs; /* before the config's tools_d */
    const al_limits_t *limits;     /* over the config's limits: */
    const char *mcp_file;          /* --mcp-config */
    const char *hooks_file;        /* --hooks-config */
    /* Context flags (docs/context.md), over the context: section. */
    int64_t context_window;
    int64_t keep_recent;
    int64_t micro_min_tokens;
    uint32_t max_messages;
    bool no_auto_compact;
    bool no_prompt_cache;
  } flags;

  /* The daemon's own settings (agentloopd). */
  const al_limits_t *base_limits; /* under the session's; NULL: defaults */
  const al_limits_t *ceiling;     /* a session's limits are clamped to it */
  int64_t retry_base_ms;          /* test seams; 0: the agent's */
  int64_t retry_cap_ms;
  uint64_t kill_grace_ms;
  /* MCP servers and hooks as JSON text already resolved (the client's,
   * else the daemon's own): when set, mcp_config / hooks_config are taken
   * as they are and the configuration's sections are not read. */
  bool mcp_text_given;
  const char *mcp_config;
  const char *hooks_config;
  /* The agent reads a trusted project's .mcp.json itself (off the loop);
   * false: it is read here, when the project is trusted. */
  bool mcp_project;
  /* A section that fails its check is left at the defaults instead of
   * failing (a transcript header edited by hand). */
  bool lenient;

  /* Sub-agents (docs/subagents.md): the definitions al_config_agents_load
   * gave (borrowed) and the text a fresh child's system prompt ends with
   * (al_sysprompt_preamble). Wired by apply_subagents in agent_opts.c. */
  const struct al_subagent_def_s *subagents;
  size_t n_subagents;
  const char *task_preamble;
  /* The main agent from a definition (a batch job's "agent"; borrowed):
   * its prompt (followed by task_preamble, as a child's) instead of
   * system, its model unless model_flag (a model given over the
   * configuration: a flag, a job field), its max_turns unless
   * flags.max_turns, its tools (tools_only / tools_never) and its
   * permission mode when stricter. NULL: none. */
  const struct al_subagent_def_s *main_agent;
  bool model_flag;
} al_agent_opts_input_t;

/* Everything the options point to: every string and list copied here is
 * one entry of allocs, freed by al_agent_opts_store_free. */
typedef struct al_agent_opts_store_s {
  void **allocs;
  size_t n, cap;
  char *api_key; /* wiped before it is freed */
  /* INTERACTIVE: the configured ask rules (NULL-terminated; NULL: none),
   * for the front end's permission callback. */
  const char **ask;
  char *task_preamble;
  /* Definitions a front end parsed for these options (the daemon's, from
   * the session header: al_agentdefs_from_json); freed with the store. */
  struct al_agentdefs_s *defs;
} al_agent_opts_store_t;

void al_agent_opts_input_init(al_agent_opts_input_t *in);
void al_agent_opts_store_init(al_agent_opts_store_t *st);
void al_agent_opts_store_free(al_agent_opts_store_t *st);

/* Fills o (al_agent_options_init'd here) from cfg and in: provider and
 * endpoint, counts and retries, timeouts, limits, tools and tools.d,
 * sandbox, permissions, context, MCP servers and hooks, system prompt,
 * sub-agents. st (al_agent_opts_store_init'd) owns what o points to; free
 * it after al_agent_new (or when giving up). 0; AL_ECONFIG / AL_EINVAL
 * with "what: why" in err (a bad section, an MCP or hooks file); AL_ENOMEM. */
int al_config_agent_options(const al_config_t *cfg,
                            const al_agent_opts_input_t *in,
                            al_agent_options_t *o, al_agent_opts_store_t *st,
                            char *err, size_t errlen);

/* "auto" | "required" | "none" (NULL: auto); false for anything else. */
bool al_config_sandbox_policy(const char *mode, al_sandbox_policy_t *out);

/* The configuration a client ships to the daemon in session/create and
 * session/resume (docs/protocol.md): provider, model, base_url,
 * fallback_model, api_key, sandbox, network, limits, timeouts, paths
 * (resolved from ws, absolute), max_tokens, max_turns, allow/deny/ask
 * rules, context; the daemon reads it back into an al_config_t and calls
 * al_config_agent_options. mcp_servers: and hooks: travel as text
 * (al__rpc_client_config). New object, or NULL on OOM / a bad context:
 * section (the reason in err). */
json_t *al_config_session_params(const al_config_t *cfg, const char *ws,
                                 al_cfg_getenv_fn getenv_fn, char *err,
                                 size_t errlen);

/* What a chat adds to session/create's params (al_config_session_params
 * began the subagents object with the settings): its agent definitions
 * (d may be NULL or empty) and the child preamble (NULL or "": none; one
 * over AL_SUBAGENTS_PREAMBLE_MAX is left out, children then start without
 * it). 0 or AL_ENOMEM. */
struct al_agentdefs_s;
int al_config_session_agents(json_t *params, const struct al_agentdefs_s *d,
                             const char *preamble);

/* The subagents: object of session/create and the transcript header
 * (docs/protocol.md): {enabled?, max_depth?, token_budget?,
 * parallel_writers?} as config.yaml has them, plus the chat's
 * preamble? (text, at most AL_SUBAGENTS_PREAMBLE_MAX bytes) and agents?
 * (al_agentdefs_from_json). Checked here, with the same bounds as the
 * file's; cfg (may be NULL: only check) gets the four settings. 0, or
 * AL_EINVAL with "subagents.KEY ..." in why. */
#define AL_SUBAGENTS_PREAMBLE_MAX ((size_t)1024 * 1024)
int al__config_subagents_from_json(const json_t *sub, al_config_t *cfg,
                                   char *why, size_t why_len);

#endif
