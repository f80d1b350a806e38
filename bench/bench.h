/* agentloop-bench scenarios. Each scenario is one entry of the table in
 * main.c: it gets the arguments after its name and returns the exit code. */
#ifndef AL_BENCH_H
#define AL_BENCH_H

/* Server-driven scenarios (bench_stream.c): a separate agentloop-mockllm
 * process, real agent sessions. */
int al_bench_throughput(int argc, char **argv);
int al_bench_latency(int argc, char **argv);
int al_bench_concurrency(int argc, char **argv);
int al_bench_tls(int argc, char **argv);
int al_bench_tools(int argc, char **argv);
int al_bench_toolstart(int argc, char **argv);

/* agentloop-bench decode [--events N] [--reps N] [--chunk BYTES] [--json] */
int al_bench_decode(int argc, char **argv);
int al_bench_decode_cli(int argc, char **argv);

/* agentloop-bench dispatch [--iterations N] [--calls-per-run N]
 *                          [--tail-deltas N] [--delta-ms MS] [--json]
 *                          [--raw] */
int al_bench_dispatch(int argc, char **argv);

/* agentloop-bench daemon [--deltas N] [--delta-ms MS] [--sessions N]
 *                        [--json] (bench_daemon.c) */
int al_bench_daemon(int argc, char **argv);

/* agentloop-bench context [--turns N] [--runs N] [--window T]
 *                         [--micro-min T] [--json] (bench_context.c) */
int al_bench_context(int argc, char **argv);

/* agentloop-bench subagents [--children N] [--json] (bench_subagents.c) */
int al_bench_subagents(int argc, char **argv);

/* agentloop-bench batch [--jobs N] [--concurrency C] [--repeat R]
 *   [--modes batch,run,fleet,claude,codex] [--parts jobs,rss,queue]
 *   [--json FILE] ... (bench_batch.c) */
int al_bench_batch(int argc, char **argv);

#endif
