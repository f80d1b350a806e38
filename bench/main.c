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
    {"throughput", al_bench_throughput,
     "one stream of N text_delta events flat out through an agent, from a\n"
     "          mockllm process: events/s, MB/s, CPU us/event, vs a raw socket\n"
     "          [--events N (200000)]"},
    {"latency", al_bench_latency,
     "server send stamp -> text_delta callback, events paced 1 ms, exact\n"
     "          percentiles, beside a raw-socket floor reader\n"
     "          [--events N (5000)] [--delay-ms MS (1)]"},
    {"concurrency", al_bench_concurrency,
     "K agents on one loop, one paced stream each: CPU share, latency,\n"
     "          RSS per stream, errors\n"
     "          [--streams K (1000)] [--rate R (20)] [--seconds S (5)]\n"
     "          [--ramp AGENTS_PER_MS (100)] [--own-client]\n"
     "          [--floor: raw-socket readers instead of agents]"},
    {"tls", al_bench_tls,
     "throughput and latency over loopback TLS vs plaintext\n"
     "          [--events N (200000)] [--lat-events N (5000)] [--certs DIR]"},
    {"tools", al_bench_tools,
     "`toolstart` (the sandboxed tool start, 300 calls per mode), `dispatch`\n"
     "          (its options pass through), then the end-to-end turn time\n"
     "          of a multi-tool reply, streaming execution vs SDK-style\n"
     "          [--tools N (4)] [--tool-ms MS (50)] [--segment-deltas N (10)]\n"
     "          [--segment-ms MS (5)] [--e2e-iterations N (5)]\n"
     "          [--toolstart-calls N (toolstart's --calls)]"},
    {"toolstart", al_bench_toolstart,
     "content_block_stop on the wire -> the sandboxed command's first\n"
     "          instruction: bwrap warm pool / cold, degraded, none\n"
     "          [--calls N (300 per mode)] [--calls-per-run N (20)] [--json]"},
    {"decode", al_bench_decode,
     "CPU per event: SSE + decode + aggregate + delivery, vs jansson DOM and "
     "a memchr floor\n"
     "          [--events N] [--reps N] [--chunk BYTES] [--json]"},
    {"decode-cli", al_bench_decode_cli,
     "`agentloop decode` on a capture vs the in-process pipeline, CPU per\n"
     "          event and peak RSS, in one run [--events N (400000)] [--reps N]"},
    {"dispatch", al_bench_dispatch,
     "tool dispatch latency: tool block on the wire -> tool start, spawned\n"
     "          and in-process, vs block delivery and reply end\n"
     "          [--iterations N] [--calls-per-run N] [--tail-deltas N]\n"
     "          [--delta-ms MS] [--json] [--raw]"},
    {"context", al_bench_context,
     "a long session in a small window: tokens saved by micro vs summary\n"
     "          compaction, compaction overhead vs request prep, cached-input\n"
     "          share after micro-compaction [--turns N (70)] [--runs N (3)]\n"
     "          [--window T (20000)] [--micro-min T (3000)] [--json]"},
    {"subagents", al_bench_subagents,
     "N children of the task tool beside N plain agents: spawn -> first\n"
     "          request, CPU per turn, RSS per idle agent, cancel -> quiet\n"
     "          [--children N (100)] [--json]"},
    {"batch", al_bench_batch,
     "N 3-turn tool jobs as `agentloop batch run`, as N `agentloop run`\n"
     "          processes (the reference), as a fleet (redis + 2 agentloopd\n"
     "          --queue): jobs/hour, CPU/job, peak RSS; RSS per in-flight\n"
     "          session; queue overhead per job vs PING\n"
     "          [--jobs N (200)] [--concurrency C (50)] [--repeat R (1)]\n"
     "          [--modes batch,run,fleet[,claude,codex]] [--parts jobs,rss,queue]\n"
     "          [--rss-k K,K (50,200)] [--hold-ms MS (4000)]\n"
     "          [--queue-jobs N (2000)] [--queue-window W (50)]\n"
     "          [--claude PATH] [--codex PATH] [--json FILE] [--keep]\n"
     "          [--record FILE (the mock's requests)]\n"
     "          [--agentloop PATH] [--agentloopd PATH (default: beside this)]\n"
     "          [--timeout S (1800): per mode run]"},
    {"daemon", al_bench_daemon, "agentloopd RSS and text_delta latency reactor -> socket client [--deltas N] [--delta-ms MS] [--sessions N] [--json]"},
};

static void usage(FILE *f) {
  size_t i;

  fputs("usage: agentloop-bench SCENARIO [options]\nscenarios:\n", f);
  fputs("(server-driven scenarios also take --server-cpu N, --client-cpu N"
        " and --json)\n", f);
  for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
    const char *h = scenarios[i].help;
    const char *nl;

    /* Help lines continue under a 10-column indent; the names column is
     * wider, so each continuation is re-indented under the first line. */
    fprintf(f, "  %-11s ", scenarios[i].name);
    while ((nl = strchr(h, '\n')) != NULL) {
      fprintf(f, "%.*s\n%14s", (int)(nl - h), h, "");
      h = nl + 1;
      while (*h == ' ') {
        h++;
      }
    }
    fprintf(f, "%s\n", h);
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
