/* The `agentloop` command's subcommands. Each returns the process exit
 * code (CONVENTIONS.md 7.5). */
#ifndef AL_CLI_H
#define AL_CLI_H

#include <stdbool.h>

#include <jansson.h>

#include "agentloop/sandbox.h"
#include "common/common.h"

#include "provider/provider.h"

/* agentloop decode --provider sse|anthropic|openai [--events] (decode.c) */
int al_cli_decode(int argc, char **argv);
/* agentloop export ID|NAME --format md|jsonl [--out FILE] (docs/export.md) */
int al_cli_export(int argc, char **argv);
/* The JSON object of one normalized stream event, as `decode --events` and
 * `run --output-format ndjson` print it (docs/decode.md). New reference. */
json_t *al__cli_pevent_json(const al_pevent_t *ev);
/* agentloop run -p PROMPT ... (run.c) */
int al_cli_run(int argc, char **argv);
/* agentloop batch run JOBS.jsonl --out DIR ... (batch.c) */
int al_cli_batch(int argc, char **argv);
/* The providers' own endpoints (NULL: the default one), the only ones
 * that need an API key: local servers, proxies and the mock take requests
 * without one (run.c). */
bool al__cli_public_endpoint(const char *url);
/* agentloop tools [--json] ... (tools_cmd.c) */
int al_cli_tools(int argc, char **argv);
/* `agentloop mcp list|get NAME` (mcp_cmd.c). */
int al_cli_mcp(int argc, char **argv);
/* The MCP configuration of a run in cwd (config.yaml, a trusted .mcp.json,
 * file) as JSON text (*json NULL: no servers); AL_EINVAL with the reason
 * in err. Blocking. */
int al__cli_mcp_load(const char *cwd, const char *file, bool trust,
                     char **json, al_buf_t *err);
/* Starts the servers of json, waits until each is ready or failed (no
 * restarts), closes them, and gives [{name, state, tools, ms, error, pid,
 * protocol, tool_list}]. Runs its own loop: call it outside any loop. */
int al__cli_mcp_states(const char *cwd, const char *json, json_t **out);
/* The same, waiting at most wait_ms (0: until every server settled); a
 * server still starting then is listed with state "starting" and the ms
 * it has been starting. */
int al__cli_mcp_states_wait(const char *cwd, const char *json,
                            uint64_t wait_ms, json_t **out);
/* One server of a listing ({name, state, tools, ms, error?, protocol?})
 * as a line without its newline: "fs: ready, 14 tools, 812 ms, protocol
 * 2025-11-25", "slow: starting (2300 ms so far)" (mcp list, /tools). */
void al__cli_mcp_line(const json_t *server, al_buf_t *out);
/* --sandbox auto|required|none; false for anything else (tools_cmd.c). */
bool al__cli_sandbox_policy(const char *arg, al_sandbox_policy_t *out);

/* agentloop daemon status|stop|restart (daemon_cmd.c) */
int al_cli_daemon(int argc, char **argv);
/* agentloop config show [--origin] (config_cmd.c) */
int al_cli_config(int argc, char **argv);
/* Loads the configuration for a command run in cwd (NULL: the process
 * cwd): the user file, the project file when trusted (or trust), the
 * environment. Prints every error as "who: FILE:LINE:COL: reason" and
 * returns 2; 0 otherwise. cfg is initialized either way: free it. */
struct al_config_s;
int al__cli_config_load(struct al_config_s *cfg, const char *cwd, bool trust,
                        const char *who);
/* The same when a --provider flag (or NULL) will be applied after. */
int al__cli_config_load_for(struct al_config_s *cfg, const char *cwd,
                            bool trust, const char *provider_flag,
                            const char *who);

/* The system prompt of a session started here (prompt_cli.c,
 * config/sysprompt.h): notices about cut files go to stderr as "who: ...".
 * 0 or AL_ENOMEM. */
int al__cli_system_prompt(const struct al_config_s *cfg, const char *cwd,
                          al_sandbox_policy_t policy, const char *extra,
                          al_buf_t *out, const char *who);
/* The text a fresh child agent's prompt ends with (prompt_cli.c,
 * al_sysprompt_preamble): the environment and the instruction files, the
 * same sandbox words. 0 or AL_ENOMEM. */
int al__cli_task_preamble(const struct al_config_s *cfg, const char *cwd,
                          al_sandbox_policy_t policy, al_buf_t *out);

/* The agent definitions of a session started in cwd (agents_cmd.c,
 * config/agentdefs.h): the user's and, when the project is trusted
 * (trust or cfg's verdict), the project's files. Warnings and errors go to
 * stderr as "who: warning: FILE:LINE:COL: ..." (info notes when verbose).
 * Blocking: start-up only. 0 with *out set, or AL_ENOMEM. */
struct al_agentdefs_s;
int al__cli_agents_load(const struct al_config_s *cfg, const char *cwd,
                        bool trust, bool verbose, const char *who,
                        struct al_agentdefs_s **out);
/* agentloop agents [--json] [-C DIR] [--trust-project] (agents_cmd.c) */
int al_cli_agents(int argc, char **argv);

#endif
