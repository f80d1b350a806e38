/* Helpers of the server-driven bench scenarios (bench_util.c). */
#ifndef AL_BENCH_UTIL_H
#define AL_BENCH_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

/* An agentloop-mockllm child process. */
typedef struct {
  pid_t pid;
  int port;
  int cpu;  /* pinned core or -1 */
  bool tls;
  char exe[PATH_MAX + 32];
  char scn[64]; /* scenario temp file */
  char pf[80];  /* port file */
} bu_srv_t;

/* Writes yaml to a temp file, spawns the agentloop-mockllm next to this
 * binary (stdout to /dev/null), pins it to cpu (-1: no pinning), waits for
 * its port file. certs != NULL: a TLS listener with certs/server.{crt,key}.
 * 0 or -1 (a message on stderr). */
int bu_srv_start(bu_srv_t *s, const char *yaml, int cpu, const char *certs);
/* The same, with every request recorded to `record` (--record: NDJSON
 * lines with the track and arrival_ns, written by the time bu_srv_stop
 * returns); record NULL: none. */
int bu_srv_start_rec(bu_srv_t *s, const char *yaml, int cpu, const char *certs,
                     const char *record);
/* CPU time of the server so far, in seconds (/proc/PID/schedstat). */
double bu_srv_cpu_s(const bu_srv_t *s);
/* SIGTERM, wait, remove the temp files. */
void bu_srv_stop(bu_srv_t *s);

/* The test PKI directory: `given`, else ../tests/certs next to this
 * binary, ./tests/certs, ../tests/certs. */
int bu_find_certs(const char *given, char *out, size_t len);
/* The directory of this executable (its build directory). 0 or -1. */
int bu_exe_dir(char *out, size_t len);

/* sched_setaffinity(pid, {cpu}); cpu < 0: nothing. */
int bu_pin(pid_t pid, int cpu);
/* This process's user + system CPU seconds (getrusage). */
double bu_cpu_s(void);
/* This process's resident set in KB (/proc/self/statm). */
long bu_rss_kb(void);
/* This process's peak resident set in KB (getrusage ru_maxrss). */
long bu_max_rss_kb(void);

typedef struct {
  uint64_t *v;
  size_t n;
  size_t cap;
} bu_samples_t;
int bu_samples_push(bu_samples_t *s, uint64_t v);
void bu_samples_free(bu_samples_t *s);

typedef struct {
  double p50, p90, p99, p999, max; /* microseconds */
  size_t n;
} bu_pct_t;
/* Exact (nearest-rank) percentiles of raw ns samples; sorts v. */
bu_pct_t bu_percentiles(uint64_t *v, size_t n);
void bu_pct_row(const char *label, const bu_pct_t *p);
void bu_pct_json(const bu_pct_t *p);

/* The raw-socket floor: a minimal libuv TCP client that sends the same
 * Anthropic streaming request and scans the bytes for lines with memchr,
 * timestamping (uv_hrtime) each read; every `event: content_block_delta`
 * with a preceding `id: <ns>` line gives one sample (read time - id). */
typedef struct {
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_write_t wreq;
  bu_samples_t *samples; /* may be NULL (throughput); may change mid-run */
  char req[512];
  size_t reqlen;
  char carry[256];
  size_t carry_len;
  uint64_t pending;
  uint64_t events;
  uint64_t bytes;
  uint64_t t0, t_end;
  double cpu0, cpu_end;
  bool saw_stop;
  bool done;
  bool closed;
  int err;
} bu_floor_t;

int bu_floor_start(bu_floor_t *f, uv_loop_t *loop, int port,
                   bu_samples_t *samples);
/* Ends a reader early (closes its socket); no-op once done. */
void bu_floor_stop(bu_floor_t *f);

#endif
