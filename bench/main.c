/* agentloop-bench: a small scenario table. `agentloop-bench NAME ARGS...`
 * runs one scenario; later issues add entries (server-driven sessions,
 * latency percentiles) next to `decode`. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} scenario_t;

static const scenario_t scenarios[] = {
    {"decode", al_bench_decode,
     "CPU per event: SSE + decode + aggregate + delivery, vs jansson DOM and "
     "a memchr floor\n"
     "          [--events N] [--reps N] [--chunk BYTES] [--json]"},
    {"dispatch", al_bench_dispatch,
     "tool dispatch latency: tool block on the wire -> tool start, spawned\n"
     "          and in-process, vs block delivery and reply end\n"
     "          [--iterations N] [--calls-per-run N] [--tail-deltas N]\n"
     "          [--delta-ms MS] [--json] [--raw]"},
    {"daemon", al_bench_daemon, "agentloopd RSS and text_delta latency reactor -> socket client [--deltas N] [--delta-ms MS] [--sessions N] [--json]"},
};

static void usage(FILE *f) {
  size_t i;

  fputs("usage: agentloop-bench SCENARIO [options]\nscenarios:\n", f);
  for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
    fprintf(f, "  %-8s %s\n", scenarios[i].name, scenarios[i].help);
  }
}

int main(int argc, char **argv) {
  size_t i;

  if (argc < 2 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "--help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
    if (strcmp(argv[1], scenarios[i].name) == 0) {
      return scenarios[i].run(argc - 1, argv + 1);
    }
  }
  fprintf(stderr, "agentloop-bench: unknown scenario '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
