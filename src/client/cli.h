/* The `agentloop` command's subcommands. Each returns the process exit
 * code (CONVENTIONS.md 7.5). */
#ifndef AL_CLI_H
#define AL_CLI_H

/* agentloop decode --provider sse|anthropic|openai [--events] (decode.c) */
int al_cli_decode(int argc, char **argv);
/* agentloop run -p PROMPT ... (run.c) */
int al_cli_run(int argc, char **argv);

#endif
