/* `agentloop-bench dispatch`: tool dispatch latency (SPEC §15: "from the
 * end of a tool_use block on the wire to the tool's start").
 *
 * One process, one uv loop: an embedded agentloop-mockllm with send
 * timestamps on (every SSE event carries `id: <uv_hrtime ns>` taken when
 * its batch is written) and agents talking to it over loopback. Every
 * scripted tool reply is: a short text block, ONE tool_use block, then a
 * tail text block streamed as TAIL deltas DELTA_MS apart (default 5 x 2
 * ms), so the reply is still streaming when the tool block ends. Calls are
 * made in runs of PER_RUN tool replies and a closing text reply, each run
 * on a fresh agent (a new session: the history stays session-sized).
 * Two series of N calls each:
 *   spawned     the builtin `bash` with {"command":"true"} (not
 *               concurrency-safe, alone in its reply, so it starts as soon
 *               as its block is complete);
 *   in-process  `bench_noop`, registered with al_agent_add_tool,
 *               concurrency-safe, completing inside its run callback.
 *
 * Per call, with stamp = al__agent_call_stamp(call_id) (the send time of
 * the SSE event that completed the block, its content_block_stop):
 *   dispatch         tool_use_started.ts_ns - stamp   (what we measure)
 *   block completed  content_block_completed.ts_ns - stamp: transport +
 *                    SSE + decode + delivery of that block, the floor
 *                    every dispatch pays;
 *   block -> started the agent's own share (executor, permission, tool
 *                    start; for bash, uv_spawn);
 *   reply end        ts_ns of the reply's last stream event (its last
 *                    delta / block / usage event) - stamp: when a runner
 *                    that waits for the whole message, as the official
 *                    SDKs' tool runners do, would start the tool;
 *   tool completed   tool_use_completed.ts_ns - stamp.
 * After both series, N bare uv_spawn calls of the same command with the
 * same stdio and flags, paced like the replies, measure what uv_spawn
 * (fork + wait for exec) costs in this process: the spawned series' floor.
 * Every tool should start before its reply's last stream event; the
 * fraction is printed (below 100%: a warning too). Missing stamps or
 * events fail the run. Both clocks are uv_hrtime (CLOCK_MONOTONIC).
 * Targets (printed, not enforced): spawned p50 <= 1 ms, in-process p50 <=
 * 0.05 ms.
 *
 * --sandbox none|auto|degraded picks the agent's sandbox for the spawned
 * series (default none, the figures above; auto is bwrap where it works;
 * degraded makes bwrap "fail" so agentloop-exec runs alone). The cost of
 * the sandbox is the difference in "tool_use_completed": `true` does
 * nothing, so that is the time until the command has really started and
 * ended, setup of namespaces, mounts, Landlock and seccomp included
 * (tool_use_started is posted once the spawn call returns, before bwrap
 * has done anything). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "agentloop/agent.h"
#include "bench.h"
#include "common/common.h"
#include "loop/agent_int.h" /* al__agent_call_stamp */
#include "mockllm/mockllm.h"

#define TARGET_SPAWNED_US 1000.0
#define TARGET_INPROC_US 50.0
#define WATCHDOG_MS 120000

enum { SERIES_SPAWNED = 0, SERIES_INPROC = 1, SERIES_COUNT = 2 };

static const char *const series_names[SERIES_COUNT] = {"spawned",
                                                       "in_process"};

typedef struct {
  char id[80];
  uint32_t reply;       /* index of its reply in the series, from 1 */
  uint64_t stamp;
  uint64_t block_ts;
  uint64_t started_ts;
  uint64_t completed_ts;
  bool is_error;
} call_t;

typedef struct {
  call_t *calls;
  size_t ncalls;
  uint64_t *reply_end; /* per reply (from 1): ts of its last stream event */
  size_t nreplies;     /* replies begun (turn_started) */
  size_t max_replies;
  size_t planned;      /* tool replies handed to runs so far */
} series_t;

typedef struct {
  uv_loop_t loop;
  uv_timer_t next;     /* starts the next run outside the subscriber */
  uv_timer_t watchdog;
  al_mockllm_t *mock;
  al_agent_t *agent;   /* one per run: each run is a fresh session */
  al_agent_options_t ao;
  const char *sandbox; /* --sandbox, for the report */
  size_t n;            /* tool calls per series */
  size_t per_run;      /* tool turns per run */
  uint64_t gap_ms;     /* between reference spawns: a reply's tail */
  int cur;             /* series being run */
  series_t series[SERIES_COUNT];
  uint64_t noop_runs;
  /* Reference after both series: bare uv_spawn of the same command with
   * the same stdio and flags, from this process in its final state. */
  uv_process_t ref_proc;
  uv_pipe_t ref_pipes[2];
  int ref_open;        /* handles of the current reference spawn not closed */
  size_t ref_i;
  uint64_t *ref_ns;
  char *workspace;
  bool closing;
  int failed;
  char why[256];
} bench_t;

typedef struct {
  double p50;
  double p90;
  double p99;
  double max;
  size_t n;
} pct_t;

static void fail(bench_t *b, const char *why) {
  if (!b->failed) {
    b->failed = 1;
    snprintf(b->why, sizeof(b->why), "%s", why);
  }
}

/* ---- the in-process tool ------------------------------------------------- */

static void noop_run(al_tool_ctx_t *ctx, void *data) {
  bench_t *b = data;

  b->noop_runs++;
  al_tool_ctx_complete(ctx, false, "ok", 2);
}

/* ---- the subscriber -------------------------------------------------------
 * It runs synchronously inside the agent's dispatch path, so it only copies
 * a few integers (and one id); the statistics are computed after the loop. */

static call_t *find_call(series_t *s, const char *id, size_t len,
                         size_t cap) {
  size_t i;

  if (len == 0 || len >= sizeof(s->calls[0].id)) {
    return NULL;
  }
  /* One call per turn: the match is almost always the last one. */
  for (i = s->ncalls; i > 0; i--) {
    call_t *c = &s->calls[i - 1];

    if (strlen(c->id) == len && memcmp(c->id, id, len) == 0) {
      return c;
    }
  }
  if (s->ncalls == cap) {
    return NULL;
  }
  memcpy(s->calls[s->ncalls].id, id, len);
  s->calls[s->ncalls].id[len] = '\0';
  return &s->calls[s->ncalls++];
}

/* The "id" of a completed tool_use block's JSON text. */
static bool block_call_id(al_slice_t block, const char **id, size_t *len) {
  static const char key[] = "\"id\":\"";
  const char *p;
  const char *end;

  if (block.ptr == NULL) {
    return false;
  }
  p = memmem(block.ptr, block.len, key, sizeof(key) - 1);
  if (p == NULL) {
    return false;
  }
  p += sizeof(key) - 1;
  end = memchr(p, '"', block.len - (size_t)(p - block.ptr));
  if (end == NULL) {
    return false;
  }
  *id = p;
  *len = (size_t)(end - p);
  return true;
}

static void on_next(uv_timer_t *t);

static void note_stream(series_t *s, const al_event_t *ev) {
  if (s->nreplies >= 1 && s->nreplies <= s->max_replies &&
      ev->ts_ns > s->reply_end[s->nreplies]) {
    s->reply_end[s->nreplies] = ev->ts_ns;
  }
}

static void on_event(const al_event_t *ev, void *data) {
  bench_t *b = data;
  series_t *s;
  size_t cap = b->n + 1;
  call_t *c;
  const char *id;
  size_t len;

  if (b->closing || b->cur < 0) {
    return; /* the interrupted of our own close, or before the first run */
  }
  s = &b->series[b->cur];

  switch (ev->type) {
  case AL_EVENT_TURN_STARTED:
    s->nreplies++;
    break;
  case AL_EVENT_TEXT_DELTA:
  case AL_EVENT_THINKING_DELTA:
  case AL_EVENT_TOOL_INPUT_DELTA:
  case AL_EVENT_USAGE:
    note_stream(s, ev);
    break;
  case AL_EVENT_CONTENT_BLOCK_COMPLETED:
    note_stream(s, ev);
    if (ev->u.block.block_type.ptr != NULL &&
        ev->u.block.block_type.len == 8 &&
        memcmp(ev->u.block.block_type.ptr, "tool_use", 8) == 0 &&
        block_call_id(ev->u.block.block, &id, &len) &&
        (c = find_call(s, id, len, cap)) != NULL) {
      c->block_ts = ev->ts_ns;
    }
    break;
  case AL_EVENT_TOOL_USE_STARTED:
    c = find_call(s, ev->u.tool.call_id.ptr, ev->u.tool.call_id.len, cap);
    if (c == NULL) {
      fail(b, "more tool calls than scripted");
      break;
    }
    c->started_ts = ev->ts_ns;
    c->reply = (uint32_t)s->nreplies;
    /* Asked now, while the reply is live: the agent may forget stamps of
     * finished turns. */
    c->stamp = al__agent_call_stamp(b->agent, c->id);
    break;
  case AL_EVENT_TOOL_USE_COMPLETED:
    c = find_call(s, ev->u.tool.call_id.ptr, ev->u.tool.call_id.len, cap);
    if (c != NULL) {
      c->completed_ts = ev->ts_ns;
      c->is_error = ev->u.tool.is_error;
    }
    break;
  case AL_EVENT_FINAL:
    /* The next run starts from a timer: the agent is closed first, and
     * that may not happen inside its own run's last event. */
    uv_timer_start(&b->next, on_next, 0, 0);
    break;
  case AL_EVENT_ERROR: {
    char msg[200];

    snprintf(msg, sizeof(msg), "agent error %d: %.*s", ev->u.error.code,
             (int)(ev->u.error.message.ptr ? ev->u.error.message.len : 0),
             ev->u.error.message.ptr ? ev->u.error.message.ptr : "");
    fail(b, msg);
    uv_timer_start(&b->next, on_next, 0, 0);
    break;
  }
  case AL_EVENT_INTERRUPTED:
    fail(b, "run interrupted");
    uv_timer_start(&b->next, on_next, 0, 0);
    break;
  default:
    break;
  }
}

/* ---- driving the runs ---------------------------------------------------- */

static void on_agent_closed(al_agent_t *agent) {
  bench_t *b = al_agent_get_data(agent);

  b->agent = NULL;
  if (b->closing) {
    al_mockllm_close(b->mock, NULL); /* the server goes last */
    b->mock = NULL;
  } else {
    uv_timer_start(&b->next, on_next, 0, 0);
  }
}

static void shutdown_all(bench_t *b) {
  if (b->closing) {
    return;
  }
  b->closing = true;
  uv_close((uv_handle_t *)&b->next, NULL);
  uv_close((uv_handle_t *)&b->watchdog, NULL);
  if (b->agent != NULL) {
    /* Cancels a run still active (after a failure) and frees the agent on
     * a later iteration; the server is closed after it. */
    al_agent_close(b->agent, on_agent_closed);
  } else {
    al_mockllm_close(b->mock, NULL);
    b->mock = NULL;
  }
}

static void on_watchdog(uv_timer_t *t) {
  bench_t *b = AL_CONTAINER_OF(t, bench_t, watchdog);

  fail(b, "timed out");
  shutdown_all(b);
}

static void ref_spawn_next(bench_t *b);

static void on_ref_timer(uv_timer_t *t) {
  ref_spawn_next(AL_CONTAINER_OF(t, bench_t, next));
}

static void on_ref_closed(uv_handle_t *h) {
  bench_t *b = h->data;

  if (--b->ref_open > 0) {
    return;
  }
  if (b->closing) {
    shutdown_all(b);
    return;
  }
  /* The same idle gap as between the agent's spawns (one reply's tail):
   * on a VM an idle vCPU wakes slowly, and uv_spawn waits for the child's
   * exec, so back-to-back spawns would look faster than they are. */
  uv_timer_start(&b->next, on_ref_timer, b->gap_ms, 0);
}

static void on_ref_exit(uv_process_t *p, int64_t status, int signo) {
  uv_close((uv_handle_t *)p, on_ref_closed);
}

/* One reference spawn at a time, timed around uv_spawn alone; the next
 * starts gap_ms after the child has exited and every handle is closed. */
static void ref_spawn_next(bench_t *b) {
  static char *const args[] = {"/bin/sh", "-c", "true", NULL};
  static char *const env[] = {"PATH=/usr/bin:/bin", NULL};
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  uint64_t t0;
  int i;
  int rc;

  if (b->closing || b->failed || b->ref_i == b->n) {
    shutdown_all(b);
    return;
  }
  memset(&po, 0, sizeof(po));
  memset(stdio, 0, sizeof(stdio));
  for (i = 0; i < 2; i++) {
    uv_pipe_init(&b->loop, &b->ref_pipes[i], 0);
    b->ref_pipes[i].data = b;
    stdio[i + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[i + 1].data.stream = (uv_stream_t *)&b->ref_pipes[i];
  }
  stdio[0].flags = UV_IGNORE;
  po.exit_cb = on_ref_exit;
  po.file = args[0];
  po.args = (char **)args;
  po.env = (char **)env;
  po.cwd = b->workspace;
  po.flags = UV_PROCESS_DETACHED;
  po.stdio_count = 3;
  po.stdio = stdio;
  b->ref_proc.data = b;
  t0 = uv_hrtime();
  rc = uv_spawn(&b->loop, &b->ref_proc, &po);
  b->ref_ns[b->ref_i++] = uv_hrtime() - t0;
  b->ref_open = 3;
  for (i = 0; i < 2; i++) {
    uv_close((uv_handle_t *)&b->ref_pipes[i], on_ref_closed);
  }
  if (rc != 0) {
    /* Initialized even when refused: closed like the pipes. */
    fail(b, "reference uv_spawn failed");
    uv_close((uv_handle_t *)&b->ref_proc, on_ref_closed);
  }
}

/* A fresh agent (a new session) with the in-process tool, running one
 * prompt; the mockllm's next responses are this run's script. */
static int start_run(bench_t *b) {
  al_tool_def_t td;
  int rc;

  rc = al_agent_new(&b->loop, &b->ao, &b->agent);
  if (rc != 0) {
    b->agent = NULL;
    return rc;
  }
  memset(&td, 0, sizeof(td));
  td.name = "bench_noop";
  td.description = "Does nothing and returns ok.";
  td.category = AL_TOOL_READ;
  td.concurrency_safe = true;
  td.run = noop_run;
  td.data = b;
  if ((rc = al_agent_add_tool(b->agent, &td)) != 0 ||
      (rc = al_agent_subscribe(b->agent, on_event, b, NULL)) != 0) {
    return rc;
  }
  return al_agent_run(b->agent, b->cur == SERIES_SPAWNED
                                    ? "Run `true` with bash, again and again."
                                    : "Call bench_noop, again and again.");
}

static void on_next(uv_timer_t *t) {
  bench_t *b = AL_CONTAINER_OF(t, bench_t, next);
  size_t k;
  int rc;

  if (b->closing) {
    return;
  }
  if (b->failed) {
    shutdown_all(b);
    return;
  }
  if (b->agent != NULL) {
    /* The run has ended: close its agent, continue in on_agent_closed. */
    al_agent_close(b->agent, on_agent_closed);
    return;
  }
  if (b->cur < 0) {
    b->cur = SERIES_SPAWNED;
  }
  if (b->series[b->cur].planned == b->n) {
    if (b->cur + 1 == SERIES_COUNT) {
      ref_spawn_next(b);
      return;
    }
    b->cur++;
  }
  k = AL_MIN(b->per_run, b->n - b->series[b->cur].planned);
  b->series[b->cur].planned += k;
  rc = start_run(b);
  if (rc != 0) {
    char msg[128];

    snprintf(msg, sizeof(msg), "starting a run: %s", al_strerror(rc));
    fail(b, msg);
    shutdown_all(b);
  }
}

/* N tool replies for bash, N for bench_noop, in runs of per_run tool
 * replies each closed by a text reply. Each tool reply keeps streaming
 * `tail` deltas `delta_ms` apart after its tool block; the block's input
 * piece waits 1 ms so that the batch that carries its content_block_stop is
 * its own (not the response headers'). */
static char *build_scenario(size_t n, size_t per_run, unsigned tail,
                            unsigned delta_ms) {
  al_buf_t y;
  int s;
  size_t i;

  al_buf_init(&y, (size_t)1 << 28);
  al_buf_append_str(&y, "timestamps: true\non_exhausted: error\nresponses:\n");
  for (s = 0; s < SERIES_COUNT; s++) {
    for (i = 0; i < n; i++) {
      al_buf_printf(
          &y,
          "  - reply:\n"
          "      content:\n"
          "        - text: \"Step %zu.\"\n"
          "        - tool_use: {name: %s, input: %s, delay_ms: 1}\n"
          "        - text: \"The reply keeps streaming while the tool runs, "
          "one delta after another, as a model would.\"\n"
          "          chunks: %u\n"
          "          delay_ms: %u\n",
          i + 1, s == SERIES_SPAWNED ? "bash" : "bench_noop",
          s == SERIES_SPAWNED ? "{command: \"true\"}" : "{}", tail, delta_ms);
      if ((i + 1) % per_run == 0 || i + 1 == n) {
        al_buf_append_str(&y, "  - reply: {content: [{text: \"Done.\"}]}\n");
      }
    }
  }
  return y.data;
}

/* ---- statistics ---------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

/* Nearest-rank percentiles in microseconds. */
static pct_t percentiles(uint64_t *v, size_t n) {
  pct_t p = {0, 0, 0, 0, n};
  double q[3] = {0.50, 0.90, 0.99};
  double *out[3] = {&p.p50, &p.p90, &p.p99};
  int i;

  if (n == 0) {
    return p;
  }
  qsort(v, n, sizeof(*v), cmp_u64);
  for (i = 0; i < 3; i++) {
    size_t rank = (size_t)(q[i] * (double)n + 0.999999);

    *out[i] = (double)v[rank > 0 ? rank - 1 : 0] / 1e3;
  }
  p.max = (double)v[n - 1] / 1e3;
  return p;
}

enum { M_DISPATCH, M_BLOCK, M_AGENT, M_REPLY_END, M_COMPLETED, M_COUNT };

static const char *const metric_names[M_COUNT] = {
    "dispatch", "block_completed", "block_to_started", "reply_end",
    "tool_completed"};
static const char *const metric_labels[M_COUNT] = {
    "stamp -> tool_use_started (dispatch)",
    "stamp -> content_block_completed",
    "content_block_completed -> started",
    "stamp -> reply end (SDK-style start)",
    "stamp -> tool_use_completed"};

typedef struct {
  pct_t m[M_COUNT];
  size_t calls;
  size_t stamped;
  size_t before_end;    /* started before the reply's last stream event */
  size_t done_before_end; /* completed before it, too */
  size_t errors;
} summary_t;

/* Fills s from the series; returns false when a call lacks an event. */
static bool summarize(bench_t *b, int si, summary_t *sum, bool raw,
                      char *why, size_t why_len) {
  series_t *s = &b->series[si];
  uint64_t *v[M_COUNT];
  size_t k[M_COUNT] = {0};
  size_t i;
  int m;
  bool ok = true;

  memset(sum, 0, sizeof(*sum));
  sum->calls = s->ncalls;
  for (m = 0; m < M_COUNT; m++) {
    v[m] = malloc((s->ncalls + 1) * sizeof(uint64_t));
  }
  for (i = 0; i < s->ncalls; i++) {
    call_t *c = &s->calls[i];
    uint64_t end = c->reply <= s->max_replies ? s->reply_end[c->reply] : 0;

    if (c->stamp == 0 || c->started_ts == 0 || c->block_ts == 0 ||
        c->started_ts < c->stamp ||
        c->completed_ts == 0 || end == 0 || c->stamp > c->block_ts) {
      if (ok) {
        snprintf(why, why_len,
                 "%s call %s: stamp %llu block %llu started %llu "
                 "completed %llu reply end %llu",
                 series_names[si], c->id, (unsigned long long)c->stamp,
                 (unsigned long long)c->block_ts,
                 (unsigned long long)c->started_ts,
                 (unsigned long long)c->completed_ts,
                 (unsigned long long)end);
      }
      ok = false;
      continue;
    }
    if (raw) {
      fprintf(stderr, "%s %zu %s reply %u block %.1f started %.1f "
                      "completed %.1f reply_end %.1f\n",
              series_names[si], i, c->id, c->reply,
              (double)(c->block_ts - c->stamp) / 1e3,
              (double)(c->started_ts - c->stamp) / 1e3,
              (double)(c->completed_ts - c->stamp) / 1e3,
              (double)(end - c->stamp) / 1e3);
    }
    sum->stamped++;
    sum->errors += c->is_error;
    sum->before_end += c->started_ts < end;
    sum->done_before_end += c->completed_ts < end;
    v[M_DISPATCH][k[M_DISPATCH]++] = c->started_ts - c->stamp;
    v[M_BLOCK][k[M_BLOCK]++] = c->block_ts - c->stamp;
    v[M_AGENT][k[M_AGENT]++] =
        c->started_ts > c->block_ts ? c->started_ts - c->block_ts : 0;
    v[M_REPLY_END][k[M_REPLY_END]++] = end - c->stamp;
    v[M_COMPLETED][k[M_COMPLETED]++] = c->completed_ts - c->stamp;
  }
  for (m = 0; m < M_COUNT; m++) {
    sum->m[m] = percentiles(v[m], k[m]);
    free(v[m]);
  }
  if (ok && s->ncalls != b->n) {
    snprintf(why, why_len, "%s: %zu tool calls seen, %zu scripted",
             series_names[si], s->ncalls, b->n);
    ok = false;
  }
  return ok;
}

static void print_pct_json(const pct_t *p) {
  printf("{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}", p->p50,
         p->p90, p->p99, p->max);
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* fork() copies the page tables, so uv_spawn's cost grows with this. */
static long max_rss_kb(void) {
  struct rusage ru;

  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

static void report(const bench_t *b, const summary_t *sum, const pct_t *ref,
                   unsigned tail, unsigned delta_ms, bool as_json) {
  static const char *const labels[SERIES_COUNT] = {
      "spawned: builtin bash {\"command\":\"true\"}",
      "in-process: bench_noop (concurrency-safe, completes at once)"};
  double target[SERIES_COUNT] = {TARGET_SPAWNED_US, TARGET_INPROC_US};
  int s;
  int m;

  if (as_json) {
    printf("{\"scenario\":\"dispatch\",\"iterations\":%zu,"
           "\"calls_per_run\":%zu,\"tail_deltas\":%u,\"tail_delta_ms\":%u,"
           "\"sandbox\":\"%s\",\"max_rss_kb\":%ld,\"series\":{",
           b->n, b->per_run, tail, delta_ms, b->sandbox, max_rss_kb());
    for (s = 0; s < SERIES_COUNT; s++) {
      printf("%s\"%s\":{\"calls\":%zu,\"tool_errors\":%zu,"
             "\"started_before_reply_end\":%zu,"
             "\"completed_before_reply_end\":%zu,\"us\":{",
             s ? "," : "", series_names[s], sum[s].calls, sum[s].errors,
             sum[s].before_end, sum[s].done_before_end);
      for (m = 0; m < M_COUNT; m++) {
        printf("%s\"%s\":", m ? "," : "", metric_names[m]);
        print_pct_json(&sum[s].m[m]);
      }
      printf("},\"p50_ratio_to_block_completed\":%.2f,"
             "\"p50_target_us\":%.0f,\"target_met\":%s}",
             ratio(sum[s].m[M_DISPATCH].p50, sum[s].m[M_BLOCK].p50),
             target[s],
             sum[s].m[M_DISPATCH].p50 <= target[s] ? "true" : "false");
    }
    printf("},\"uv_spawn_reference_us\":");
    print_pct_json(ref);
    printf("}\n");
    return;
  }
  printf("dispatch: %zu calls per series in runs of %zu (a fresh agent per "
         "run), one tool per reply,\neach reply streams %u more deltas %u ms "
         "apart after its tool block; mockllm and agent on one loop\n",
         b->n, b->per_run, tail, delta_ms);
  printf("stamp = server send time of the tool block's content_block_stop; "
         "times in us; max RSS %ld KB; sandbox %s\n", max_rss_kb(),
         b->sandbox);
  for (s = 0; s < SERIES_COUNT; s++) {
    printf("\n%s\n", labels[s]);
    printf("  %-38s %9s %9s %9s %9s\n", "", "p50", "p90", "p99", "max");
    for (m = 0; m < M_COUNT; m++) {
      const pct_t *p = &sum[s].m[m];

      printf("  %-38s %9.1f %9.1f %9.1f %9.1f\n", metric_labels[m], p->p50,
             p->p90, p->p99, p->max);
    }
    printf("  started before the reply's last event: %zu/%zu (%.0f%%); "
           "completed before it: %zu/%zu\n",
           sum[s].before_end, sum[s].calls,
           sum[s].calls ? 100.0 * (double)sum[s].before_end /
                              (double)sum[s].calls
                        : 0.0,
           sum[s].done_before_end, sum[s].calls);
    printf("  p50 dispatch / block completed: %.2fx; SDK-style start is "
           "%.1fx later than dispatch\n",
           ratio(sum[s].m[M_DISPATCH].p50, sum[s].m[M_BLOCK].p50),
           ratio(sum[s].m[M_REPLY_END].p50, sum[s].m[M_DISPATCH].p50));
    if (s == SERIES_SPAWNED) {
      printf("  reference: bare uv_spawn, same command, process, pacing "
             "%9.1f %9.1f %9.1f %9.1f\n",
             ref->p50, ref->p90, ref->p99, ref->max);
    }
    if (sum[s].errors > 0) {
      printf("  tool results with is_error: %zu\n", sum[s].errors);
    }
  }
  printf("\ntarget spawned p50 <= %.0f us: %s (%.1f us)\n", TARGET_SPAWNED_US,
         sum[0].m[M_DISPATCH].p50 <= TARGET_SPAWNED_US ? "met" : "NOT met",
         sum[0].m[M_DISPATCH].p50);
  printf("target in-process p50 <= %.0f us: %s (%.1f us)\n", TARGET_INPROC_US,
         sum[1].m[M_DISPATCH].p50 <= TARGET_INPROC_US ? "met" : "NOT met",
         sum[1].m[M_DISPATCH].p50);
}

/* ---- entry point --------------------------------------------------------- */

int al_bench_dispatch(int argc, char **argv) {
  static const char *const allow[] = {"bash", "bench_noop", NULL};
  size_t n = 200;
  size_t per_run = 10;
  unsigned tail = 5;
  unsigned delta_ms = 2;
  bool as_json = false;
  bool raw = false;
  const char *sandbox = "none";
  bench_t *b;
  al_mockllm_options_t mo;
  al_agent_options_t *ao;
  summary_t sum[SERIES_COUNT];
  char err[256] = "";
  static char url[64]; /* b->ao points here */
  char workspace[] = "/tmp/agentloop-bench-dispatch-XXXXXX";
  char *yaml;
  int rc;
  int s;
  int i;
  int code = 0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      n = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--calls-per-run") == 0 && i + 1 < argc) {
      per_run = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--tail-deltas") == 0 && i + 1 < argc) {
      tail = (unsigned)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--delta-ms") == 0 && i + 1 < argc) {
      delta_ms = (unsigned)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else if (strcmp(argv[i], "--raw") == 0) {
      raw = true;
    } else if (strcmp(argv[i], "--sandbox") == 0 && i + 1 < argc &&
               (strcmp(argv[i + 1], "none") == 0 ||
                strcmp(argv[i + 1], "auto") == 0 ||
                strcmp(argv[i + 1], "degraded") == 0)) {
      sandbox = argv[++i];
    } else {
      fprintf(stderr, "usage: agentloop-bench dispatch [--iterations N] "
                      "[--calls-per-run N] [--tail-deltas N] [--delta-ms MS] "
                      "[--json] [--raw] [--sandbox none|auto|degraded]\n");
      return 2;
    }
  }
  if (n == 0 || n > 100000 || per_run == 0 || per_run > 10000 ||
      tail == 0 || tail > 1000 || delta_ms == 0 ||
      delta_ms > 10000) {
    fprintf(stderr, "agentloop-bench dispatch: bad arguments\n");
    return 2;
  }
  /* A client hanging up mid-stream must not kill the embedded server. */
  signal(SIGPIPE, SIG_IGN);
  /* The workspace exists before the loop runs (al_agent_new resolves it). */
  if (mkdtemp(workspace) == NULL) {
    perror("agentloop-bench dispatch: mkdtemp");
    return 1;
  }

  b = calloc(1, sizeof(*b));
  b->n = n;
  b->per_run = per_run;
  b->gap_ms = (uint64_t)tail * delta_ms;
  b->cur = -1;
  b->workspace = workspace;
  b->sandbox = sandbox;
  b->ref_ns = calloc(n, sizeof(uint64_t));
  for (s = 0; s < SERIES_COUNT; s++) {
    b->series[s].calls = calloc(n + 1, sizeof(call_t));
    /* Tool replies plus one closing reply per run. */
    b->series[s].max_replies = n + (n + per_run - 1) / per_run;
    b->series[s].reply_end =
        calloc(b->series[s].max_replies + 1, sizeof(uint64_t));
  }
  uv_loop_init(&b->loop);
  uv_timer_init(&b->loop, &b->next);
  uv_timer_init(&b->loop, &b->watchdog);

  yaml = build_scenario(n, per_run, tail, delta_ms);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.timestamps = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  rc = al_mockllm_new(&b->loop, &mo, &b->mock);
  al_free(yaml);
  if (rc != 0) {
    fprintf(stderr, "agentloop-bench dispatch: mockllm: %s\n", err);
    code = 1;
    goto out_close_loop;
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(b->mock));

  /* Every run gets a fresh agent with these options (start_run). */
  ao = &b->ao;
  al_agent_options_init(ao);
  ao->base_url = url;
  ao->api_key = "bench";
  ao->workspace = workspace;
  ao->builtin_tools = true;
  ao->max_turns = (uint32_t)per_run + 5; /* it ends at the text reply */
  ao->permission_mode = AL_PERMISSION_MODE_HEADLESS;
  ao->allow_tools = allow;
  ao->rng_seed = 1;
  ao->data = b;
  ao->sandbox = strcmp(sandbox, "none") == 0 ? AL_SANDBOX_OFF : AL_SANDBOX_AUTO;
  if (strcmp(sandbox, "degraded") == 0) {
    ao->sandbox_bwrap = "/bin/false";
  }
  /* Generous: a fixed minute and more, plus each reply's paced tail. */
  uv_timer_start(&b->watchdog, on_watchdog,
                 WATCHDOG_MS + 2 * n * ((uint64_t)tail * delta_ms + 100), 0);
  uv_timer_start(&b->next, on_next, 0, 0);

out_close_loop:
  if (code != 0) {
    uv_close((uv_handle_t *)&b->next, NULL);
    uv_close((uv_handle_t *)&b->watchdog, NULL);
  }
  uv_run(&b->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&b->loop) != 0) {
    fprintf(stderr, "agentloop-bench dispatch: handles left on the loop\n");
    code = 1;
  }
  rmdir(workspace);
  if (code == 0 && b->failed) {
    fprintf(stderr, "agentloop-bench dispatch: %s\n", b->why);
    code = 1;
  }
  if (code == 0 && b->noop_runs != n) {
    fprintf(stderr, "agentloop-bench dispatch: bench_noop ran %llu times, "
                    "expected %zu\n", (unsigned long long)b->noop_runs, n);
    code = 1;
  }
  if (code == 0) {
    for (s = 0; s < SERIES_COUNT; s++) {
      if (!summarize(b, s, &sum[s], raw, err, sizeof(err))) {
        fprintf(stderr, "agentloop-bench dispatch: %s\n", err);
        code = 1;
      }
    }
  }
  if (code == 0) {
    pct_t ref = percentiles(b->ref_ns, b->ref_i);

    report(b, sum, &ref, tail, delta_ms, as_json);
    for (s = 0; s < SERIES_COUNT; s++) {
      if (sum[s].before_end != sum[s].calls) {
        /* Reported, not fatal: those calls measured a dispatch after the
         * stream, which a longer tail (--delta-ms) avoids. */
        fprintf(stderr, "agentloop-bench dispatch: warning: %s: %zu of %zu "
                        "tools started after their reply's last event\n",
                series_names[s], sum[s].calls - sum[s].before_end,
                sum[s].calls);
      }
    }
  }
  for (s = 0; s < SERIES_COUNT; s++) {
    free(b->series[s].calls);
    free(b->series[s].reply_end);
  }
  free(b->ref_ns);
  free(b);
  return code;
}
