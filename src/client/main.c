/* The `agentloop` command: dispatches to its subcommands (CONVENTIONS.md
 * 7.1). Each subcommand parses its own flags and returns the exit code. */
#include <stdio.h>
#include <string.h>

#include "agentloop/agentloop.h"
#include "client/chat.h"
#include "client/cli.h"
#include "common/common.h"

static void usage(FILE *f) {
  fputs("usage: agentloop [command] [options]\n"
        "\n"
        "commands:\n"
        "  (none)            the interactive chat (agentloopd is started\n"
        "                    if it is not running)\n"
        "  resume [ID|NAME]  the chat in an earlier session (default: latest;\n"
        "                    NAME: a title given by /rename)\n"
        "  export ID|NAME --format md|jsonl [--out FILE]\n"
        "                    a session's transcript, secrets redacted\n"
        "  sessions [--json] [--here]\n"
        "                    the daemon's sessions, newest first, with their\n"
        "                    directory (--here: only this directory's)\n"
        "  doctor            check CA bundle, keys, proxy, socket, daemon\n"
        "  daemon status|stop|restart\n"
        "                    the background agentloopd\n"
        "  config show [--origin]\n"
        "                    the effective configuration and where each\n"
        "                    value came from (see config --help)\n"
        "  run -p PROMPT     one headless agent run with tools (see run --help)\n"
        "  batch run JOBS.jsonl --out DIR [--concurrency N]\n"
        "                    every job of the file in this process, results\n"
        "                    in DIR/results.jsonl (see batch --help)\n"
        "  decode --provider sse|anthropic|openai|openai-responses [--events]\n"
        "                    decode a captured response body read from stdin\n"
        "  tools [--json]    the tools a run offers, tools.d load errors and\n"
        "                    the sandbox mode (see tools --help)\n"
        "  agents [--json]   the agents a task call can start: built-ins and\n"
        "                    definition files, with their problems\n"
        "  mcp list | get NAME\n"
        "                    start the configured MCP servers and show each\n"
        "                    one's state, tools and last error (docs/mcp.md)\n"
        "\n"
        "  -h, --help        this text\n"
        "  --version         versions of agentloop and its libraries\n",
        f);
}

int main(int argc, char **argv) {
  al_log_init();
  if (argc < 2 ||
      (argv[1][0] == '-' && strcmp(argv[1], "--version") != 0 &&
       strcmp(argv[1], "-V") != 0 && strcmp(argv[1], "-h") != 0 &&
       strcmp(argv[1], "--help") != 0)) {
    /* No command (flags only, like --no-color): the chat. */
    return al_cli_chat(argc, argv);
  }
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
    puts(al_version_full());
    return 0;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "run") == 0) {
    return al_cli_run(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "batch") == 0) {
    return al_cli_batch(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "tools") == 0) {
    return al_cli_tools(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "agents") == 0) {
    return al_cli_agents(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "mcp") == 0) {
    return al_cli_mcp(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "export") == 0) {
    return al_cli_export(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "decode") == 0) {
    return al_cli_decode(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "resume") == 0) {
    return al_cli_resume(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "sessions") == 0) {
    return al_cli_sessions(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "daemon") == 0) {
    return al_cli_daemon(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "config") == 0) {
    return al_cli_config(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "doctor") == 0) {
    return al_cli_doctor(argc - 1, argv + 1);
  }
  fprintf(stderr, "agentloop: unknown command '%s' (try --help)\n", argv[1]);
  return 2;
}
