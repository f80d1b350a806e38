/* Server-driven scenarios of agentloop-bench (SPEC §15): real agent
 * sessions (al_agent_new / al_agent_run / al_agent_subscribe) against an
 * agentloop-mockllm PROCESS on loopback.
 *
 *   throughput   one stream of N text_delta events flat out: events/s,
 *                MB/s, CPU us per event of this process (getrusage), next
 *                to the raw-socket floor reader over the same stream;
 *   latency      events paced at 1 ms with the server's send stamp (SSE
 *                `id: <uv_hrtime ns>`); latency to the subscriber callback
 *                (uv_hrtime at the text_delta callback - the stamp of the
 *                event being delivered, al__agent_last_stamp) from raw
 *                samples, beside the raw-socket floor in the same run;
 *   concurrency  K agents on one loop, each one long paced stream at R
 *                events/s: CPU share of our core, latency, RSS per stream;
 *   tls          throughput and latency over loopback TLS next to the
 *                same over plaintext (two server processes);
 *   tools        the `dispatch` scenario, then the end-to-end time of a
 *                multi-tool turn with streaming execution versus tools
 *                started only at the reply's end (SDK-style runner).
 *
 * Common options: --server-cpu N / --client-cpu N pin the server process /
 * this process (sched_setaffinity); --json prints one JSON object. The
 * server's CPU time (/proc/PID/schedstat) is reported beside ours. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "agentloop/agent.h"
#include "agentloop/agentloop.h"
#include "agentloop/client.h"
#include "bench.h"
#include "bench_util.h"
#include "loop/agent_int.h" /* al__agent_last_stamp */

#define TARGET_CPU_US 0.15
#define TARGET_P50_OVER_US 5.0
#define TARGET_P99_OVER_US 25.0
#define TARGET_CONC_SHARE 0.50
#define TARGET_CONC_P99_US 5000.0
#define TARGET_RSS_KB 16.0

/* The text of every delta: 32 characters make a 147-byte Anthropic
 * text_delta event on the wire, the size of the reference figures (issue
 * 5); bench/peers/compare.sh plays the same scenario to the peers. */
#define BENCH_TEXT "The quick brown fox jumps over t"

typedef struct {
  size_t events;
  unsigned delay_ms;
  int server_cpu;
  int client_cpu;
  bool json;
  const char *certs_arg;
  char certs[PATH_MAX];
  /* concurrency */
  size_t streams;
  unsigned rate;
  double seconds;
  size_t ramp;
  bool own_client;
  bool floor; /* concurrency: raw-socket readers instead of agents */
  /* tools */
  unsigned ntools;
  unsigned tool_ms;
  unsigned seg_deltas;
  unsigned seg_ms;
  unsigned iterations;
  const char *toolstart_calls; /* NULL: toolstart's own default */
  /* throughput, latency: measured rounds after one warm-up of each
   * reader; the floor goes first in even rounds, the agent in odd ones */
  unsigned rounds;
  const char *provider; /* throughput: "openai" for that wire format */
} opts_t;

static void opts_init(opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->server_cpu = -1;
  o->client_cpu = -1;
  o->delay_ms = 1;
  o->streams = 1000;
  o->rate = 20;
  o->seconds = 5;
  o->ramp = 100;
  o->ntools = 4;
  o->tool_ms = 50;
  o->seg_deltas = 10;
  o->seg_ms = 5;
  o->iterations = 5;
}

/* The index of the median of n values (the lower middle for even n). */
static size_t median_index(const double *v, size_t n) {
  size_t i, j;

  for (i = 0; i < n; i++) {
    size_t below = 0, equal = 0;

    for (j = 0; j < n; j++) {
      below += v[j] < v[i];
      equal += v[j] == v[i];
    }
    if (below <= (n - 1) / 2 && below + equal > (n - 1) / 2) {
      return i;
    }
  }
  return 0;
}

/* "name":{"min":..,"median":..,"max":..,"runs":[..]} */
static void spread_json(const char *name, const double *v, size_t n) {
  double lo = v[0], hi = v[0];
  size_t i;

  for (i = 1; i < n; i++) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  printf("\"%s\":{\"min\":%.4f,\"median\":%.4f,\"max\":%.4f,\"runs\":[",
         name, lo, v[median_index(v, n)], hi);
  for (i = 0; i < n; i++) {
    printf("%s%.4f", i ? "," : "", v[i]);
  }
  printf("]}");
}

/* Common + scenario flags. Returns 0, or 2 on a bad flag. Unknown flags are
 * kept in rest (for `tools`, which hands them to `dispatch`). */
static int parse_opts(opts_t *o, int argc, char **argv, char **rest,
                      int *nrest) {
  int i;

  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;

#define NUM(flag, field, conv)            \
  if (strcmp(a, flag) == 0 && v != NULL) { \
    o->field = conv;                       \
    i++;                                   \
    continue;                              \
  }
    NUM("--events", events, strtoull(v, NULL, 10))
    NUM("--delay-ms", delay_ms, (unsigned)strtoul(v, NULL, 10))
    NUM("--server-cpu", server_cpu, atoi(v))
    NUM("--client-cpu", client_cpu, atoi(v))
    NUM("--certs", certs_arg, v)
    NUM("--streams", streams, strtoull(v, NULL, 10))
    NUM("--rate", rate, (unsigned)strtoul(v, NULL, 10))
    NUM("--seconds", seconds, strtod(v, NULL))
    NUM("--ramp", ramp, strtoull(v, NULL, 10))
    NUM("--tools", ntools, (unsigned)strtoul(v, NULL, 10))
    NUM("--tool-ms", tool_ms, (unsigned)strtoul(v, NULL, 10))
    NUM("--segment-deltas", seg_deltas, (unsigned)strtoul(v, NULL, 10))
    NUM("--segment-ms", seg_ms, (unsigned)strtoul(v, NULL, 10))
    NUM("--e2e-iterations", iterations, (unsigned)strtoul(v, NULL, 10))
    NUM("--toolstart-calls", toolstart_calls, v)
    NUM("--rounds", rounds, (unsigned)strtoul(v, NULL, 10))
    NUM("--provider", provider, v)
#undef NUM
    if (strcmp(a, "--json") == 0) {
      o->json = true;
    } else if (strcmp(a, "--own-client") == 0) {
      o->own_client = true;
    } else if (strcmp(a, "--floor") == 0) {
      o->floor = true;
    } else if (rest != NULL) {
      rest[(*nrest)++] = argv[i];
    } else {
      fprintf(stderr, "agentloop-bench %s: unknown option '%s'\n", argv[0],
              a);
      return 2;
    }
  }
  if (o->client_cpu >= 0 && bu_pin(0, o->client_cpu) != 0) {
    fprintf(stderr, "bench: cannot pin to cpu %d: %s\n", o->client_cpu,
            strerror(errno));
  }
  return 0;
}

static void pin_note(const opts_t *o, const bu_srv_t *s) {
  if (o->json) {
    return;
  }
  printf("server: %s pid %d port %d%s, cpu %s; client cpu %s\n", s->exe,
         (int)s->pid, s->port, s->tls ? " (TLS)" : "",
         o->server_cpu >= 0 ? "pinned" : "any",
         o->client_cpu >= 0 ? "pinned" : "any");
}

/* ---- one agent, one stream ------------------------------------------------ */

typedef struct {
  al_agent_t *agent;
  bu_samples_t *samples;
  uint64_t deltas;
  uint64_t text_bytes;
  uint64_t nostamp;
  uint64_t t0, t_end;
  double cpu0, cpu_end;
  bool done;
  int err;
  char why[200];
} one_t;

static void one_event(const al_event_t *ev, void *data) {
  one_t *o = data;

  switch (ev->type) {
  case AL_EVENT_TEXT_DELTA:
    if (o->samples != NULL) {
      uint64_t now = uv_hrtime();
      uint64_t st = al__agent_last_stamp(o->agent);

      if (st != 0) {
        bu_samples_push(o->samples, now - st);
      } else {
        o->nostamp++;
      }
    }
    o->deltas++;
    o->text_bytes += ev->u.delta.text.len;
    break;
  case AL_EVENT_ERROR:
  case AL_EVENT_INTERRUPTED:
  case AL_EVENT_FINAL:
    o->t_end = uv_hrtime();
    o->cpu_end = bu_cpu_s();
    o->done = true;
    if (ev->type == AL_EVENT_ERROR) {
      o->err = ev->u.error.code ? ev->u.error.code : -1;
      snprintf(o->why, sizeof(o->why), "%.*s",
               (int)ev->u.error.message.len, ev->u.error.message.ptr);
    } else if (ev->type == AL_EVENT_INTERRUPTED) {
      o->err = -1;
      snprintf(o->why, sizeof(o->why), "interrupted");
    }
    al_agent_close(o->agent, NULL);
    break;
  default:
    break;
  }
}

static void base_url(char *url, size_t len, const bu_srv_t *s) {
  snprintf(url, len, "%s://%s:%d", s->tls ? "https" : "http",
           s->tls ? "localhost" : "127.0.0.1", s->port);
}

/* Runs one agent through one reply of the server's scenario. */
static int run_one(const opts_t *op, const bu_srv_t *s, bu_samples_t *samples,
                   one_t *o) {
  uv_loop_t loop;
  al_agent_options_t ao;
  char url[128];
  char ca[PATH_MAX + 16];
  int rc;

  memset(o, 0, sizeof(*o));
  o->samples = samples;
  uv_loop_init(&loop);
  base_url(url, sizeof(url), s);
  al_agent_options_init(&ao);
  ao.base_url = url;
  ao.api_key = "k";
  ao.model = "m";
  ao.max_turns = 1;
  ao.provider = op->provider;
  if (s->tls) {
    snprintf(ca, sizeof(ca), "%s/ca.crt", op->certs);
    ao.ca_file = ca;
  }
  rc = al_agent_new(&loop, &ao, &o->agent);
  if (rc == 0) {
    rc = al_agent_subscribe(o->agent, one_event, o, NULL);
  }
  if (rc == 0) {
    o->t0 = uv_hrtime();
    o->cpu0 = bu_cpu_s();
    rc = al_agent_run(o->agent, "go");
  }
  if (rc != 0) {
    fprintf(stderr, "bench: agent: %d\n", rc);
    if (o->agent != NULL) {
      al_agent_close(o->agent, NULL);
    }
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (rc == 0 && !o->done) {
    rc = -1;
  }
  if (rc == 0 && o->err != 0) {
    fprintf(stderr, "bench: run failed: %s\n", o->why);
    rc = -1;
  }
  return rc;
}

static int run_floor(const bu_srv_t *s, bu_samples_t *samples, bu_floor_t *f) {
  uv_loop_t loop;

  uv_loop_init(&loop);
  bu_floor_start(f, &loop, s->port, samples);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (f->err != 0) {
    fprintf(stderr, "bench: floor reader: %s\n", uv_strerror(f->err));
    return -1;
  }
  return 0;
}

static char *stream_yaml(size_t events, unsigned delay_ms, bool stamps) {
  char *y = malloc(512);

  snprintf(y, 512,
           "timestamps: %s\non_exhausted: repeat_last\nresponses:\n"
           "  - delay_ms: %u\n    reply:\n      content:\n"
           "        - repeat_text: {count: %zu, text: \"" BENCH_TEXT "\"}\n",
           stamps ? "true" : "false", delay_ms, events);
  return y;
}

/* ---- throughput ------------------------------------------------------------ */

typedef struct {
  double wall_s, cpu_s, srv_cpu_s;
  uint64_t events, bytes;
} tp_t;

/* One run of the bare-socket floor reader into fl: 0, or -1 when it
 * failed or saw a different number of events than were sent. */
static int floor_once(const opts_t *op, const bu_srv_t *s, tp_t *fl) {
  bu_floor_t *f = calloc(1, sizeof(*f));
  double sc = bu_srv_cpu_s(s);

  if (f == NULL || run_floor(s, NULL, f) != 0) {
    free(f);
    return -1;
  }
  fl->srv_cpu_s = bu_srv_cpu_s(s) - sc;
  fl->wall_s = (double)(f->t_end - f->t0) / 1e9;
  fl->cpu_s = f->cpu_end - f->cpu0;
  fl->events = f->events;
  fl->bytes = f->bytes;
  free(f);
  if (fl->events != op->events) {
    fprintf(stderr, "bench: the floor reader saw %llu of %zu events\n",
            (unsigned long long)fl->events, op->events);
    return -1;
  }
  return 0;
}

static int throughput_pair(const opts_t *op, const bu_srv_t *s, tp_t *fl,
                           tp_t *ag, bool with_floor) {
  one_t o;
  double sc;

  memset(fl, 0, sizeof(*fl));
  memset(ag, 0, sizeof(*ag));
  if (with_floor && floor_once(op, s, fl) != 0) {
    return -1;
  }
  sc = bu_srv_cpu_s(s);
  if (run_one(op, s, NULL, &o) != 0) {
    return -1;
  }
  ag->srv_cpu_s = bu_srv_cpu_s(s) - sc;
  ag->wall_s = (double)(o.t_end - o.t0) / 1e9;
  ag->cpu_s = o.cpu_end - o.cpu0;
  ag->events = o.deltas;
  ag->bytes = fl->bytes; /* the same response on the wire */
  if (o.deltas != op->events) {
    fprintf(stderr, "bench: agent saw %llu of %zu deltas\n",
            (unsigned long long)o.deltas, op->events);
    return -1;
  }
  return 0;
}

static void tp_row(const char *label, const tp_t *t) {
  double ev = t->events ? (double)t->events : 1;

  printf("  %-30s %10.0f %8.1f %9.3f %9.3f %10.3f\n", label,
         (double)t->events / t->wall_s,
         t->bytes ? (double)t->bytes / t->wall_s / 1e6 : 0.0,
         t->cpu_s * 1e6 / ev, t->srv_cpu_s * 1e6 / ev, t->wall_s);
}

static void tp_json(const char *name, const tp_t *t) {
  double ev = t->events ? (double)t->events : 1;

  printf("\"%s\":{\"events\":%llu,\"bytes\":%llu,\"wall_s\":%.4f,"
         "\"events_per_s\":%.0f,\"mb_per_s\":%.2f,\"cpu_us_per_event\":%.4f,"
         "\"server_cpu_us_per_event\":%.4f}",
         name, (unsigned long long)t->events, (unsigned long long)t->bytes,
         t->wall_s, (double)t->events / t->wall_s,
         (double)t->bytes / t->wall_s / 1e6, t->cpu_s * 1e6 / ev,
         t->srv_cpu_s * 1e6 / ev);
}

static const char *met(bool ok) { return ok ? "met" : "NOT met"; }

#define MAX_ROUNDS 20

/* One reader run of the throughput scenario: the floor (fl) or the agent
 * (ag), the other NULL. */
static int tp_once(const opts_t *op, const bu_srv_t *s, tp_t *fl, tp_t *ag) {
  tp_t x;

  if (fl != NULL) {
    /* The floor alone (throughput_pair always runs an agent after it). */
    memset(fl, 0, sizeof(*fl));
    return floor_once(op, s, fl);
  }
  return throughput_pair(op, s, &x, ag, false);
}

int al_bench_throughput(int argc, char **argv) {
  opts_t op;
  bu_srv_t s;
  tp_t fl[MAX_ROUNDS], ag[MAX_ROUNDS], w;
  double cf[MAX_ROUNDS], ca[MAX_ROUNDS];
  bool openai;
  char *y;
  int rc = 0;
  unsigned r, n;
  size_t mf = 0, ma;
  double cpu_ev;

  opts_init(&op);
  op.events = 200000;
  op.rounds = 5;
  if (parse_opts(&op, argc, argv, NULL, NULL) != 0) {
    return 2;
  }
  n = op.rounds < 1 ? 1 : op.rounds > MAX_ROUNDS ? MAX_ROUNDS : op.rounds;
  /* The floor reader speaks the Anthropic format only: an OpenAI run is
   * the agent alone, the figure an OpenAI-format peer is divided by. */
  openai = op.provider != NULL && strcmp(op.provider, "openai") == 0;
  y = stream_yaml(op.events, 0, false);
  rc = bu_srv_start(&s, y, op.server_cpu, NULL);
  free(y);
  if (rc != 0) {
    return 1;
  }
  pin_note(&op, &s);
  /* Warm-up (not counted): each reader once. */
  rc = (openai ? 0 : tp_once(&op, &s, &w, NULL)) | tp_once(&op, &s, NULL, &w);
  for (r = 0; rc == 0 && r < n; r++) {
    if (openai) {
      rc = tp_once(&op, &s, NULL, &ag[r]);
    } else if (r % 2 == 0) {
      rc = tp_once(&op, &s, &fl[r], NULL) | tp_once(&op, &s, NULL, &ag[r]);
    } else {
      rc = tp_once(&op, &s, NULL, &ag[r]) | tp_once(&op, &s, &fl[r], NULL);
    }
    if (rc == 0) {
      ag[r].bytes = openai ? 0 : fl[r].bytes;
      ca[r] = ag[r].cpu_s * 1e6 / (double)ag[r].events;
      cf[r] = openai ? 0 : fl[r].cpu_s * 1e6 / (double)fl[r].events;
    }
  }
  bu_srv_stop(&s);
  if (rc != 0) {
    return 1;
  }
  ma = median_index(ca, n);
  if (!openai) {
    mf = median_index(cf, n);
  }
  cpu_ev = ca[ma];
  if (op.json) {
    printf("{\"scenario\":\"throughput\",\"provider\":\"%s\","
           "\"events\":%zu,\"rounds\":%u,",
           openai ? "openai" : "anthropic", op.events, n);
    if (!openai) {
      printf("\"bytes_per_event\":%.1f,",
             (double)fl[mf].bytes / (double)op.events);
      tp_json("floor", &fl[mf]);
      putchar(',');
      spread_json("floor_cpu_us_per_event", cf, n);
      putchar(',');
    }
    tp_json("agent", &ag[ma]);
    putchar(',');
    spread_json("agent_cpu_us_per_event", ca, n);
    printf(",\"max_rss_kb\":%ld,\"target_cpu_us_per_event\":%.2f,"
           "\"target_met\":%s}\n",
           bu_max_rss_kb(), TARGET_CPU_US,
           cpu_ev <= TARGET_CPU_US ? "true" : "false");
    return 0;
  }
  printf("throughput (%s): one stream of %zu text_delta events flat out; "
         "after one warm-up run of each reader, %u rounds (the floor first "
         "in even rounds, the agent in odd ones); the median round shown\n",
         openai ? "openai" : "anthropic", op.events, n);
  printf("  %-30s %10s %8s %9s %9s %10s\n", "reader", "events/s", "MB/s",
         "cpu us/ev", "srv us/ev", "wall s");
  if (!openai) {
    tp_row("raw socket floor (memchr)", &fl[mf]);
  }
  tp_row("agent (subscriber)", &ag[ma]);
  printf("  agent cpu us/event per round:");
  for (r = 0; r < n; r++) {
    printf(" %.3f", ca[r]);
  }
  if (!openai) {
    printf("; floor:");
    for (r = 0; r < n; r++) {
      printf(" %.3f", cf[r]);
    }
  }
  printf("\ntarget CPU per text event <= %.2f us (end to end through the "
         "agent, median round): %s (%.3f us)\n",
         TARGET_CPU_US, met(cpu_ev <= TARGET_CPU_US), cpu_ev);
  return 0;
}

/* ---- latency ---------------------------------------------------------------- */

typedef struct {
  bu_pct_t floor, agent;
  double cpu_floor, cpu_agent, srv_floor, srv_agent;
  uint64_t nostamp;
} lat_t;

static int latency_pair(const opts_t *op, const bu_srv_t *s, lat_t *r,
                        bool with_floor) {
  bu_samples_t fs = {0};
  bu_samples_t as = {0};
  bu_floor_t *f;
  one_t o;
  double sc;

  memset(r, 0, sizeof(*r));
  if (with_floor) {
    f = calloc(1, sizeof(*f));
    sc = bu_srv_cpu_s(s);
    if (run_floor(s, &fs, f) != 0) {
      free(f);
      return -1;
    }
    r->srv_floor = bu_srv_cpu_s(s) - sc;
    r->cpu_floor = f->cpu_end - f->cpu0;
    free(f);
    r->floor = bu_percentiles(fs.v, fs.n);
  }
  sc = bu_srv_cpu_s(s);
  if (run_one(op, s, &as, &o) != 0) {
    bu_samples_free(&fs);
    bu_samples_free(&as);
    return -1;
  }
  r->srv_agent = bu_srv_cpu_s(s) - sc;
  r->cpu_agent = o.cpu_end - o.cpu0;
  r->nostamp = o.nostamp;
  r->agent = bu_percentiles(as.v, as.n);
  bu_samples_free(&fs);
  bu_samples_free(&as);
  /* Every event must have given one sample to each reader. */
  if (r->agent.n != op->events || (with_floor && r->floor.n != op->events)) {
    fprintf(stderr, "bench: %zu agent / %zu floor samples for %zu events\n",
            r->agent.n, r->floor.n, op->events);
    return -1;
  }
  return 0;
}

static void lat_table_head(void) {
  printf("  %-34s %9s %9s %9s %9s %9s %9s\n", "us", "p50", "p90", "p99",
         "p99.9", "max", "n");
}

/* One reader's run of the latency scenario (the floor or the agent): its
 * samples go to smp, its CPU seconds to *cpu. */
static int lat_once(const opts_t *op, const bu_srv_t *s, bool floor,
                    bu_samples_t *smp, double *cpu, uint64_t *nostamp) {
  if (floor) {
    bu_floor_t *f = calloc(1, sizeof(*f));

    if (f == NULL || run_floor(s, smp, f) != 0) {
      free(f);
      return -1;
    }
    *cpu = f->cpu_end - f->cpu0;
    free(f);
  } else {
    one_t o;

    if (run_one(op, s, smp, &o) != 0) {
      return -1;
    }
    *cpu = o.cpu_end - o.cpu0;
    *nostamp += o.nostamp;
  }
  if (smp->n != op->events) {
    fprintf(stderr, "bench: %zu %s samples for %zu events\n", smp->n,
            floor ? "floor" : "agent", op->events);
    return -1;
  }
  return 0;
}

/* Percentiles of a copy (bu_percentiles sorts). */
static bu_pct_t pct_of(const bu_samples_t *smp) {
  uint64_t *v = malloc((smp->n ? smp->n : 1) * sizeof(*v));
  bu_pct_t p;

  memcpy(v, smp->v, smp->n * sizeof(*v));
  p = bu_percentiles(v, smp->n);
  free(v);
  return p;
}

static void pool(bu_samples_t *all, const bu_samples_t *one) {
  size_t i;

  for (i = 0; i < one->n; i++) {
    bu_samples_push(all, one->v[i]);
  }
}

int al_bench_latency(int argc, char **argv) {
  opts_t op;
  bu_srv_t s;
  bu_samples_t fall = {0}, aall = {0};
  bu_pct_t fp, ap;
  double d50[MAX_ROUNDS], d99[MAX_ROUNDS];
  double cpu_f = 0, cpu_a = 0, c;
  uint64_t nostamp = 0, ns_warm = 0;
  char *y;
  int rc = 0;
  unsigned r, n;
  double t50, t99;

  opts_init(&op);
  op.events = 5000;
  op.rounds = 2;
  if (parse_opts(&op, argc, argv, NULL, NULL) != 0) {
    return 2;
  }
  n = op.rounds < 1 ? 1 : op.rounds > MAX_ROUNDS ? MAX_ROUNDS : op.rounds;
  y = stream_yaml(op.events, op.delay_ms, true);
  rc = bu_srv_start(&s, y, op.server_cpu, NULL);
  free(y);
  if (rc != 0) {
    return 1;
  }
  pin_note(&op, &s);
  /* Warm-up (not counted): each reader once. */
  {
    bu_samples_t w1 = {0}, w2 = {0};

    rc = lat_once(&op, &s, true, &w1, &c, &ns_warm) |
         lat_once(&op, &s, false, &w2, &c, &ns_warm);
    bu_samples_free(&w1);
    bu_samples_free(&w2);
  }
  for (r = 0; rc == 0 && r < n; r++) {
    bu_samples_t fs = {0}, as = {0};
    double cf = 0, ca = 0;
    bu_pct_t f1, a1;

    if (r % 2 == 0) {
      rc = lat_once(&op, &s, true, &fs, &cf, &nostamp) |
           lat_once(&op, &s, false, &as, &ca, &nostamp);
    } else {
      rc = lat_once(&op, &s, false, &as, &ca, &nostamp) |
           lat_once(&op, &s, true, &fs, &cf, &nostamp);
    }
    if (rc == 0) {
      f1 = pct_of(&fs);
      a1 = pct_of(&as);
      d50[r] = a1.p50 - f1.p50;
      d99[r] = a1.p99 - f1.p99;
      cpu_f += cf;
      cpu_a += ca;
      pool(&fall, &fs);
      pool(&aall, &as);
    }
    bu_samples_free(&fs);
    bu_samples_free(&as);
  }
  bu_srv_stop(&s);
  if (rc != 0) {
    bu_samples_free(&fall);
    bu_samples_free(&aall);
    return 1;
  }
  fp = bu_percentiles(fall.v, fall.n);
  ap = bu_percentiles(aall.v, aall.n);
  bu_samples_free(&fall);
  bu_samples_free(&aall);
  t50 = ap.p50 - fp.p50;
  t99 = ap.p99 - fp.p99;
  cpu_f = cpu_f * 1e6 / ((double)op.events * n);
  cpu_a = cpu_a * 1e6 / ((double)op.events * n);
  if (op.json) {
    printf("{\"scenario\":\"latency\",\"events\":%zu,\"delay_ms\":%u,"
           "\"rounds\":%u,\"floor\":",
           op.events, op.delay_ms, n);
    bu_pct_json(&fp);
    printf(",\"agent\":");
    bu_pct_json(&ap);
    printf(",\"over_floor_p50_us\":%.2f,\"over_floor_p99_us\":%.2f,", t50,
           t99);
    spread_json("over_floor_p50_per_round", d50, n);
    putchar(',');
    spread_json("over_floor_p99_per_round", d99, n);
    printf(",\"cpu_us_per_event\":{\"floor\":%.3f,\"agent\":%.3f},"
           "\"unstamped\":%llu}\n",
           cpu_f, cpu_a, (unsigned long long)nostamp);
    return 0;
  }
  printf("latency: %zu text_delta events paced %u ms apart, server send "
         "stamp -> reader; after one warm-up run of each reader, %u rounds "
         "(the floor first in even rounds), samples pooled\n",
         op.events, op.delay_ms, n);
  lat_table_head();
  bu_pct_row("raw socket floor (read)", &fp);
  bu_pct_row("agent (text_delta callback)", &ap);
  printf("  over the floor, pooled: p50 %+.1f us, p99 %+.1f us; per round "
         "p50:",
         t50, t99);
  for (r = 0; r < n; r++) {
    printf(" %+.1f", d50[r]);
  }
  printf(", p99:");
  for (r = 0; r < n; r++) {
    printf(" %+.1f", d99[r]);
  }
  printf("\n  CPU us/event: floor %.2f, agent %.2f\n", cpu_f, cpu_a);
  if (nostamp) {
    printf("  warning: %llu deltas without a stamp\n",
           (unsigned long long)nostamp);
  }
  printf("target p50 over floor <= +%.0f us: %s (pooled %+.1f us)\n",
         TARGET_P50_OVER_US, met(t50 <= TARGET_P50_OVER_US), t50);
  printf("target p99 over floor <= +%.0f us: %s (pooled %+.1f us; see the "
         "rounds: a spread wider than the target leaves it unresolved)\n",
         TARGET_P99_OVER_US, met(t99 <= TARGET_P99_OVER_US), t99);
  return 0;
}

/* ---- tls ------------------------------------------------------------------- */

int al_bench_tls(int argc, char **argv) {
  opts_t op;
  bu_srv_t plain_tp, tls_tp, plain_lat, tls_lat;
  tp_t fl, fl_unused, ptp, ttp;
  lat_t plat, tlat;
  size_t lat_events;
  char *y;
  int rc = 0;

  opts_init(&op);
  op.events = 200000;
  lat_events = 0;
  {
    /* --lat-events N: the paced stream's length (default 5000). */
    int i;

    for (i = 1; i + 1 < argc; i++) {
      if (strcmp(argv[i], "--lat-events") == 0) {
        lat_events = strtoull(argv[i + 1], NULL, 10);
        memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 2) * sizeof(*argv));
        argc -= 2;
        break;
      }
    }
  }
  if (parse_opts(&op, argc, argv, NULL, NULL) != 0) {
    return 2;
  }
  if (lat_events == 0) {
    lat_events = 5000;
  }
  if (bu_find_certs(op.certs_arg, op.certs, sizeof(op.certs)) != 0) {
    fprintf(stderr, "bench tls: tests/certs not found (use --certs DIR)\n");
    return 1;
  }
  y = stream_yaml(op.events, 0, false);
  if (bu_srv_start(&plain_tp, y, op.server_cpu, NULL) != 0) {
    free(y);
    return 1;
  }
  if (bu_srv_start(&tls_tp, y, op.server_cpu, op.certs) != 0) {
    free(y);
    bu_srv_stop(&plain_tp);
    return 1;
  }
  free(y);
  pin_note(&op, &tls_tp);
  if (throughput_pair(&op, &plain_tp, &fl, &ptp, true) != 0 ||
      throughput_pair(&op, &tls_tp, &fl_unused, &ttp, false) != 0) {
    rc = 1;
  }
  /* MB/s of the plaintext SSE in both rows (the same response). */
  ptp.bytes = fl.bytes;
  ttp.bytes = fl.bytes;
  bu_srv_stop(&plain_tp);
  bu_srv_stop(&tls_tp);
  if (rc != 0) {
    return rc;
  }
  {
    size_t ev = op.events;

    op.events = lat_events;
    y = stream_yaml(op.events, op.delay_ms, true);
    if (bu_srv_start(&plain_lat, y, op.server_cpu, NULL) != 0) {
      free(y);
      return 1;
    }
    if (bu_srv_start(&tls_lat, y, op.server_cpu, op.certs) != 0) {
      free(y);
      bu_srv_stop(&plain_lat);
      return 1;
    }
    free(y);
    if (latency_pair(&op, &plain_lat, &plat, true) != 0 ||
        latency_pair(&op, &tls_lat, &tlat, false) != 0) {
      rc = 1;
    }
    bu_srv_stop(&plain_lat);
    bu_srv_stop(&tls_lat);
    op.events = ev;
    if (rc != 0) {
      return rc;
    }
  }
  if (op.json) {
    printf("{\"scenario\":\"tls\",\"events\":%zu,\"lat_events\":%zu,"
           "\"throughput\":{",
           op.events, lat_events);
    tp_json("plain_agent", &ptp);
    putchar(',');
    tp_json("tls_agent", &ttp);
    printf("},\"latency\":{\"plain_floor\":");
    bu_pct_json(&plat.floor);
    printf(",\"plain_agent\":");
    bu_pct_json(&plat.agent);
    printf(",\"tls_agent\":");
    bu_pct_json(&tlat.agent);
    printf(",\"tls_over_plain_p50_us\":%.2f,\"tls_over_plain_p99_us\":%.2f}}"
           "\n",
           tlat.agent.p50 - plat.agent.p50, tlat.agent.p99 - plat.agent.p99);
    return 0;
  }
  printf("tls: loopback TLS (mbedtls both sides, test CA) vs plaintext, "
         "same scenario\n");
  printf("throughput: %zu text_delta events flat out\n", op.events);
  printf("  %-30s %10s %8s %9s %9s %10s\n", "reader", "events/s", "MB/s",
         "cpu us/ev", "srv us/ev", "wall s");
  tp_row("agent, plaintext", &ptp);
  tp_row("agent, TLS", &ttp);
  printf("latency: %zu events paced %u ms apart\n", lat_events, op.delay_ms);
  lat_table_head();
  bu_pct_row("raw socket floor, plaintext", &plat.floor);
  bu_pct_row("agent, plaintext", &plat.agent);
  bu_pct_row("agent, TLS", &tlat.agent);
  printf("  TLS over plaintext: p50 %+.1f us, p99 %+.1f us; CPU us/event "
         "(throughput) %.3f vs %.3f\n",
         tlat.agent.p50 - plat.agent.p50, tlat.agent.p99 - plat.agent.p99,
         ttp.cpu_s * 1e6 / (double)ttp.events,
         ptp.cpu_s * 1e6 / (double)ptp.events);
  return 0;
}

/* ---- concurrency ------------------------------------------------------------- */

typedef struct conc_s conc_t;

typedef struct {
  conc_t *c;
  al_agent_t *agent;
  bool seen;
  bool ended;
} cstream_t;

struct conc_s {
  uv_loop_t loop;
  uv_timer_t tick;
  const opts_t *op;
  const bu_srv_t *srv;
  al_client_t *client;
  cstream_t *s;
  bu_floor_t *fl;   /* --floor: the raw readers */
  bu_samples_t fsamples;
  uint64_t fl_ev0;  /* their event count at the window's start */
  size_t k;
  size_t started;
  size_t seen;
  size_t ended;
  size_t closed;
  size_t errors;
  size_t early_end;
  char first_err[200];
  int phase; /* 0 ramp, 1 warm, 2 window, 3 closing */
  uint64_t phase_t;
  uint64_t t_all_open;
  uint64_t ramp_t0;
  uint64_t *lat;
  size_t nlat;
  size_t caplat;
  size_t dropped;
  uint64_t win_events;
  /* window readings */
  uint64_t w0, w1;
  double cpu0, cpu1, scpu0, scpu1;
  long rss_base, rss_open;
  char url[128];
};

static void conc_closed(al_agent_t *a) {
  cstream_t *s = al_agent_get_data(a);
  conc_t *c = s->c;

  c->closed++;
  if (c->closed == c->started && c->phase == 3 && c->client != NULL) {
    al_client_close(c->client, NULL);
    c->client = NULL;
  }
}

static void conc_event(const al_event_t *ev, void *data) {
  cstream_t *s = data;
  conc_t *c = s->c;

  switch (ev->type) {
  case AL_EVENT_TEXT_DELTA:
    if (!s->seen) {
      s->seen = true;
      c->seen++;
    }
    if (c->phase == 2) {
      uint64_t now = uv_hrtime();
      uint64_t st = al__agent_last_stamp(s->agent);

      c->win_events++;
      if (st != 0 && c->nlat < c->caplat) {
        c->lat[c->nlat++] = now - st;
      } else {
        c->dropped++;
      }
    }
    break;
  case AL_EVENT_ERROR:
    if (c->errors++ == 0) {
      snprintf(c->first_err, sizeof(c->first_err), "%.*s",
               (int)ev->u.error.message.len, ev->u.error.message.ptr);
    }
    /* fallthrough */
  case AL_EVENT_FINAL:
  case AL_EVENT_INTERRUPTED:
    if (!s->ended) {
      s->ended = true;
      c->ended++;
      if (c->phase < 3 && ev->type == AL_EVENT_FINAL) {
        c->early_end++;
      }
    }
    break;
  default:
    break;
  }
}

static uint64_t floor_events(const conc_t *c) {
  uint64_t n = 0;
  size_t i;

  for (i = 0; i < c->started; i++) {
    n += c->fl[i].events;
  }
  return n;
}

static void conc_stop(conc_t *c) {
  size_t i;

  c->phase = 3;
  uv_timer_stop(&c->tick);
  uv_close((uv_handle_t *)&c->tick, NULL);
  if (c->fl != NULL) {
    for (i = 0; i < c->started; i++) {
      c->fl[i].samples = NULL;
      if (c->fl[i].done && c->fl[i].err != 0 && c->errors++ == 0) {
        snprintf(c->first_err, sizeof(c->first_err), "floor reader: %s",
                 uv_strerror(c->fl[i].err));
      }
      bu_floor_stop(&c->fl[i]);
    }
    return;
  }
  for (i = 0; i < c->started; i++) {
    cstream_t *s = &c->s[i];

    if (al_agent_running(s->agent)) {
      al_agent_cancel(s->agent);
    }
    al_agent_close(s->agent, conc_closed);
  }
  if (c->started == 0 && c->client != NULL) {
    al_client_close(c->client, NULL);
    c->client = NULL;
  }
}

static int conc_start_one(conc_t *c) {
  cstream_t *s = &c->s[c->started];
  al_agent_options_t ao;
  int rc;

  if (c->fl != NULL) {
    rc = bu_floor_start(&c->fl[c->started], &c->loop, c->srv->port, NULL);
    c->started++;
    return rc;
  }
  al_agent_options_init(&ao);
  ao.base_url = c->url;
  ao.api_key = "k";
  ao.model = "m";
  ao.max_turns = 1;
  ao.client = c->client;
  ao.data = s;
  s->c = c;
  rc = al_agent_new(&c->loop, &ao, &s->agent);
  if (rc != 0) {
    return rc;
  }
  c->started++;
  if ((rc = al_agent_subscribe(s->agent, conc_event, s, NULL)) != 0 ||
      (rc = al_agent_run(s->agent, "go")) != 0) {
    return rc;
  }
  return 0;
}

static void conc_tick(uv_timer_t *t) {
  conc_t *c = t->data;
  uint64_t now = uv_hrtime();
  size_t i;

  switch (c->phase) {
  case 0:
    for (i = 0; i < c->op->ramp && c->started < c->k; i++) {
      int rc = conc_start_one(c);

      if (rc != 0) {
        fprintf(stderr, "bench: stream %zu: %s\n", c->started,
                al_strerror(rc));
        c->errors++;
        conc_stop(c);
        return;
      }
    }
    if (c->fl != NULL) {
      c->seen = 0;
      for (i = 0; i < c->started; i++) {
        c->seen += c->fl[i].events > 0 || c->fl[i].done;
      }
    }
    if (c->seen + c->ended >= c->k) {
      c->t_all_open = now;
      c->phase = 1;
      c->phase_t = now;
    } else if (now - c->phase_t > 60ull * 1000000000ull) {
      fprintf(stderr, "bench: only %zu of %zu streams delivered within 60 s\n",
              c->seen, c->k);
      c->errors++;
      conc_stop(c);
    }
    break;
  case 1:
    if (now - c->phase_t >= 1000000000ull) { /* 1 s to settle */
      c->phase = 2;
      c->phase_t = now;
      c->w0 = now;
      c->cpu0 = bu_cpu_s();
      c->scpu0 = bu_srv_cpu_s(c->srv);
      c->rss_open = bu_rss_kb();
      if (c->fl != NULL) {
        c->fl_ev0 = floor_events(c);
        for (i = 0; i < c->started; i++) {
          c->fl[i].samples = &c->fsamples;
        }
      }
    }
    break;
  case 2:
    if ((double)(now - c->phase_t) >= c->op->seconds * 1e9) {
      c->w1 = now;
      c->cpu1 = bu_cpu_s();
      c->scpu1 = bu_srv_cpu_s(c->srv);
      if (c->fl != NULL) {
        c->win_events = floor_events(c) - c->fl_ev0;
      }
      conc_stop(c);
    }
    break;
  default:
    break;
  }
}

static void raise_nofile(size_t *k, bool json, char *note, size_t nlen) {
  struct rlimit rl;
  size_t margin = 64;

  note[0] = '\0';
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    return;
  }
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (*k + margin > (size_t)rl.rlim_cur) {
    size_t nk = (size_t)rl.rlim_cur > margin ? (size_t)rl.rlim_cur - margin : 1;

    snprintf(note, nlen,
             "RLIMIT_NOFILE binds: hard limit %llu, %zu streams reduced to "
             "%zu",
             (unsigned long long)rl.rlim_cur, *k, nk);
    if (!json) {
      fprintf(stderr, "bench: %s\n", note);
    }
    *k = nk;
  } else {
    snprintf(note, nlen, "RLIMIT_NOFILE raised to the hard limit %llu",
             (unsigned long long)rl.rlim_cur);
  }
}

int al_bench_concurrency(int argc, char **argv) {
  opts_t op;
  bu_srv_t srv;
  conc_t *c;
  char *y;
  char note[160];
  size_t count;
  unsigned delay;
  al_client_options_t co;
  bu_pct_t p;
  double wall, share, sshare, rss_per, us_ev, full, delivered;
  double expect;
  int rc;

  opts_init(&op);
  if (parse_opts(&op, argc, argv, NULL, NULL) != 0) {
    return 2;
  }
  if (op.streams == 0 || op.rate == 0 || op.rate > 1000) {
    fprintf(stderr, "bench concurrency: --streams >= 1, 1 <= --rate <= "
            "1000\n");
    return 2;
  }
  raise_nofile(&op.streams, op.json, note, sizeof(note));
  delay = 1000 / op.rate;
  /* Long enough for the ramp, the settle second and the window; the
   * streams are cancelled when the window ends. */
  count = (size_t)((double)op.rate * (op.seconds + 120));
  y = malloc(512);
  snprintf(y, 512,
           "timestamps: true\non_exhausted: repeat_last\nresponses:\n"
           "  - delay_ms: %u\n    reply:\n      content:\n"
           "        - repeat_text: {count: %zu, text: \"" BENCH_TEXT "\"}\n",
           delay, count);
  rc = bu_srv_start(&srv, y, op.server_cpu, NULL);
  free(y);
  if (rc != 0) {
    return 1;
  }
  pin_note(&op, &srv);
  c = calloc(1, sizeof(*c));
  c->op = &op;
  c->srv = &srv;
  c->k = op.streams;
  c->s = calloc(c->k, sizeof(*c->s));
  if (op.floor) {
    c->fl = calloc(c->k, sizeof(*c->fl));
    memset(c->fl, 0, c->k * sizeof(*c->fl));
  }
  expect = (double)c->k * op.rate * op.seconds;
  c->caplat = (size_t)(expect * 1.5) + 1024;
  c->lat = malloc(c->caplat * sizeof(*c->lat));
  /* Touch what the bench itself holds before the baseline. */
  memset(c->lat, 0, c->caplat * sizeof(*c->lat));
  memset(c->s, 0, c->k * sizeof(*c->s));
  base_url(c->url, sizeof(c->url), &srv);
  uv_loop_init(&c->loop);
  uv_timer_init(&c->loop, &c->tick);
  c->tick.data = c;
  c->rss_base = bu_rss_kb();
  if (!op.own_client && !op.floor) {
    al_client_options_init(&co);
    co.proxy_from_env = false;
    rc = al_client_new(&c->loop, &co, &c->client);
    if (rc != 0) {
      fprintf(stderr, "bench: al_client_new: %s\n", al_strerror(rc));
      return 1;
    }
  }
  c->phase_t = uv_hrtime();
  c->ramp_t0 = c->phase_t;
  uv_timer_start(&c->tick, conc_tick, 0, 1);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  uv_loop_close(&c->loop);
  bu_srv_stop(&srv);

  if (c->w1 == 0) {
    fprintf(stderr, "bench concurrency: no measurement window (%zu errors; "
            "%s)\n", c->errors, c->first_err);
    return 1;
  }
  wall = (double)(c->w1 - c->w0) / 1e9;
  share = (c->cpu1 - c->cpu0) / wall;
  sshare = (c->scpu1 - c->scpu0) / wall;
  rss_per = (double)(c->rss_open - c->rss_base) / (double)c->k;
  if (c->fl != NULL) {
    p = bu_percentiles(c->fsamples.v, c->fsamples.n);
  } else {
    p = bu_percentiles(c->lat, c->nlat);
  }
  us_ev = (c->cpu1 - c->cpu0) * 1e6 /
          (double)(c->win_events ? c->win_events : 1);
  /* When the pair (server + client on this machine) delivered less than
   * K x R, the share the client would need at the full rate. */
  full = us_ev * (double)c->k * op.rate / 1e6;
  delivered = (double)c->win_events / ((double)c->k * op.rate * wall);
  if (op.json) {
    printf("{\"scenario\":\"concurrency\",\"reader\":\"%s\",\"streams\":%zu,"
           "\"rate\":%u,\"window_s\":%.3f,\"events\":%llu,"
           "\"expected_events\":%.0f,\"delivered_fraction\":%.4f,"
           "\"client_cpu_share\":%.4f,\"server_cpu_share\":%.4f,"
           "\"cpu_us_per_event\":%.3f,\"client_share_at_full_rate\":%.4f,"
           "\"latency\":",
           op.floor ? "floor" : "agent", c->k, op.rate, wall,
           (unsigned long long)c->win_events, (double)c->k * op.rate * wall,
           delivered, share, sshare, us_ev, full);
    bu_pct_json(&p);
    printf(",\"rss_base_kb\":%ld,\"rss_open_kb\":%ld,\"rss_per_stream_kb\":%.2f,"
           "\"shared_client\":%s,\"errors\":%zu,\"ended_early\":%zu,"
           "\"ramp_s\":%.3f,\"nofile\":\"%s\",\"target_cpu_met\":%s,"
           "\"target_p99_met\":%s,\"target_rss_met\":%s}\n",
           c->rss_base, c->rss_open, rss_per, op.own_client ? "false" : "true",
           c->errors, c->early_end,
           (double)(c->t_all_open - c->ramp_t0) / 1e9,
           note, share <= TARGET_CONC_SHARE ? "true" : "false",
           p.p99 <= TARGET_CONC_P99_US ? "true" : "false",
           rss_per <= TARGET_RSS_KB ? "true" : "false");
  } else {
    printf("concurrency: %zu %s on one loop, one paced stream each at %u "
           "events/s; window %.2f s\n",
           c->k,
           op.floor ? "raw-socket floor readers"
           : op.own_client ? "agents (own client each)"
                           : "agents (one shared al_client_t)",
           op.rate, wall);
    printf("  %s; all streams delivering after %.2f s (ramp %zu agents/ms)\n",
           note, (double)(c->t_all_open - c->ramp_t0) / 1e9, op.ramp);
    printf("  events in window: %llu (expected %.0f); errors %zu; streams "
           "ended early %zu%s%s\n",
           (unsigned long long)c->win_events, (double)c->k * op.rate * wall,
           c->errors, c->early_end, c->errors ? "; first: " : "",
           c->first_err);
    printf("  client CPU: %.1f%% of a core (%.2f us/event); server CPU: "
           "%.1f%% of a core\n",
           share * 100, us_ev, sshare * 100);
    if (delivered < 0.95) {
      printf("  only %.0f%% of K x R was delivered: the server and client "
             "together did not sustain the rate on this machine; at the full "
             "rate the client would need %.1f%% of a core\n",
             delivered * 100, full * 100);
    }
    printf("  RSS: %ld KB before, %ld KB with %zu streams open: %.2f KB per "
           "stream\n",
           c->rss_base, c->rss_open, c->k, rss_per);
    lat_table_head();
    bu_pct_row(op.floor ? "stamp -> read (floor)" : "stamp -> text_delta callback",
               &p);
    printf("target (at 10,000 streams x 20/s) CPU <= %.0f%% of a core: %s "
           "(%.1f%% at %zu streams)\n",
           TARGET_CONC_SHARE * 100, met(share <= TARGET_CONC_SHARE),
           share * 100, c->k);
    printf("target p99 <= %.0f ms: %s (%.2f ms)\n", TARGET_CONC_P99_US / 1e3,
           met(p.p99 <= TARGET_CONC_P99_US), p.p99 / 1e3);
    printf("target RSS per open plaintext stream <= %.0f KB: %s (%.2f KB)\n",
           TARGET_RSS_KB, met(rss_per <= TARGET_RSS_KB), rss_per);
  }
  rc = c->errors || c->early_end || c->win_events == 0 || p.n == 0 ? 1 : 0;
  bu_samples_free(&c->fsamples);
  free(c->fl);
  free(c->lat);
  free(c->s);
  free(c);
  return rc;
}

/* ---- tools: end-to-end turn time, streaming vs after the reply ------------- */

typedef struct e2e_s e2e_t;

typedef struct {
  e2e_t *e;
  al_tool_ctx_t *ctx;
  uv_timer_t timer;
  bool deferred;
} sleeper_t;

struct e2e_s {
  uv_loop_t loop;
  al_agent_t *agent;
  unsigned tool_ms;
  bool after_end;     /* SDK-style: start tools once the reply's usage is seen */
  bool reply_ended;   /* usage of the current reply seen */
  sleeper_t *pending[64];
  size_t npending;
  size_t started_mid;
  size_t calls;
  uint64_t t0, t_end, t_first_usage;
  int err;
  char why[200];
};

static void sleeper_closed(uv_handle_t *h) { free(h->data); }

static void sleeper_done(uv_timer_t *t) {
  sleeper_t *s = t->data;

  al_tool_ctx_complete(s->ctx, false, "slept", 5);
  uv_close((uv_handle_t *)&s->timer, sleeper_closed);
}

static void sleeper_go(sleeper_t *s) {
  uv_timer_start(&s->timer, sleeper_done, s->e->tool_ms, 0);
}

static void sleeper_run(al_tool_ctx_t *ctx, void *data) {
  e2e_t *e = data;
  sleeper_t *s = calloc(1, sizeof(*s));

  s->e = e;
  s->ctx = ctx;
  uv_timer_init(&e->loop, &s->timer);
  s->timer.data = s;
  e->calls++;
  if (e->after_end && !e->reply_ended && e->npending < 64) {
    e->pending[e->npending++] = s;
    return;
  }
  if (!e->reply_ended) {
    e->started_mid++;
  }
  sleeper_go(s);
}

static void e2e_event(const al_event_t *ev, void *data) {
  e2e_t *e = data;
  size_t i;

  switch (ev->type) {
  case AL_EVENT_TURN_STARTED:
    e->reply_ended = false;
    break;
  case AL_EVENT_USAGE:
    e->reply_ended = true;
    if (e->t_first_usage == 0) {
      e->t_first_usage = uv_hrtime();
    }
    for (i = 0; i < e->npending; i++) {
      sleeper_go(e->pending[i]);
    }
    e->npending = 0;
    break;
  case AL_EVENT_ERROR:
  case AL_EVENT_INTERRUPTED:
  case AL_EVENT_FINAL:
    e->t_end = uv_hrtime();
    if (ev->type != AL_EVENT_FINAL) {
      e->err = -1;
      snprintf(e->why, sizeof(e->why), "%s %.*s",
               al_event_type_name(ev->type),
               ev->type == AL_EVENT_ERROR ? (int)ev->u.error.message.len : 0,
               ev->type == AL_EVENT_ERROR ? ev->u.error.message.ptr : "");
    }
    al_agent_close(e->agent, NULL);
    break;
  default:
    break;
  }
}

static int e2e_once(const bu_srv_t *srv, unsigned tool_ms, bool after_end,
                    e2e_t *e) {
  al_agent_options_t ao;
  al_tool_def_t td;
  char url[128];
  int rc;

  memset(e, 0, sizeof(*e));
  e->tool_ms = tool_ms;
  e->after_end = after_end;
  uv_loop_init(&e->loop);
  base_url(url, sizeof(url), srv);
  al_agent_options_init(&ao);
  ao.base_url = url;
  ao.api_key = "k";
  ao.model = "m";
  ao.max_turns = 4;
  memset(&td, 0, sizeof(td));
  td.name = "bench_sleep";
  td.description = "sleeps a fixed time";
  td.concurrency_safe = true;
  td.run = sleeper_run;
  td.data = e;
  rc = al_agent_new(&e->loop, &ao, &e->agent);
  if (rc == 0) {
    rc = al_agent_add_tool(e->agent, &td);
  }
  if (rc == 0) {
    rc = al_agent_subscribe(e->agent, e2e_event, e, NULL);
  }
  if (rc == 0) {
    e->t0 = uv_hrtime();
    rc = al_agent_run(e->agent, "go");
  }
  if (rc != 0 && e->agent != NULL) {
    al_agent_close(e->agent, NULL);
  }
  uv_run(&e->loop, UV_RUN_DEFAULT);
  uv_loop_close(&e->loop);
  if (rc == 0 && (e->err != 0 || e->t_end == 0)) {
    fprintf(stderr, "bench tools: run failed: %s\n", e->why);
    rc = -1;
  }
  return rc;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a;
  double y = *(const double *)b;

  return x < y ? -1 : x > y;
}

int al_bench_tools(int argc, char **argv) {
  opts_t op;
  char **rest = calloc((size_t)argc + 2, sizeof(*rest));
  int nrest = 1;
  bu_srv_t srv;
  char *y;
  size_t cap = 8192;
  size_t len = 0;
  unsigned t;
  unsigned i;
  double *ms[2];
  size_t mid[2] = {0, 0};
  size_t calls[2] = {0, 0};
  double med[2];
  double stream_ms = 0;
  int rc;

  opts_init(&op);
  rest[0] = "dispatch";
  if (parse_opts(&op, argc, argv, rest, &nrest) != 0) {
    free(rest);
    return 2;
  }
  if (op.ntools == 0 || op.ntools > 10) {
    fprintf(stderr, "bench tools: 1 <= --tools <= 10\n");
    free(rest);
    return 2;
  }
  /* The headline: the sandboxed tool start (bench_toolstart.c). */
  {
    char *ts_argv[5];
    int ts_argc = 0;

    ts_argv[ts_argc++] = "toolstart";
    if (op.json) {
      ts_argv[ts_argc++] = "--json";
    }
    if (op.toolstart_calls != NULL) {
      /* A smoke run's bound: 300 calls per mode took a third of the test
       * suite's time on a loaded machine. */
      ts_argv[ts_argc++] = "--calls";
      ts_argv[ts_argc++] = (char *)op.toolstart_calls;
    }
    ts_argv[ts_argc] = NULL;
    if (op.json) {
      printf("{\"scenario\":\"tools\",\"toolstart\":");
      fflush(stdout);
    }
    rc = al_bench_toolstart(ts_argc, ts_argv);
    fflush(stdout);
    if (rc != 0) {
      free(rest);
      return rc;
    }
    if (!op.json) {
      putchar('\n');
    }
  }
  if (op.json) {
    rest[nrest++] = "--json";
    printf(",\"dispatch\":");
    fflush(stdout);
  }
  rc = al_bench_dispatch(nrest, rest);
  free(rest);
  fflush(stdout);
  if (rc != 0) {
    return rc;
  }
  if (!op.json) {
    putchar('\n');
  }
  /* Reply 1: per tool, a text segment of seg_deltas deltas seg_ms apart,
   * then a tool_use block; a closing text segment. Reply 2: the answer. */
  y = malloc(cap);
  len += (size_t)snprintf(y + len, cap - len,
                          "on_exhausted: cycle\nresponses:\n  - reply:\n"
                          "      content:\n");
  for (t = 0; t < op.ntools; t++) {
    len += (size_t)snprintf(
        y + len, cap - len,
        "        - {repeat_text: {count: %u, text: \"working \"}, delay_ms: "
        "%u}\n"
        "        - tool_use: {id: toolu_b%u, name: bench_sleep, input: {n: "
        "%u}}\n",
        op.seg_deltas, op.seg_ms, t, t);
  }
  len += (size_t)snprintf(y + len, cap - len,
                          "        - {repeat_text: {count: %u, text: \"and "
                          "\"}, delay_ms: %u}\n"
                          "  - reply:\n      content:\n        - text: "
                          "\"done\"\n",
                          op.seg_deltas, op.seg_ms);
  rc = bu_srv_start(&srv, y, op.server_cpu, NULL);
  free(y);
  if (rc != 0) {
    return 1;
  }
  ms[0] = calloc(op.iterations, sizeof(double));
  ms[1] = calloc(op.iterations, sizeof(double));
  for (i = 0; i < op.iterations && rc == 0; i++) {
    int v;

    for (v = 0; v < 2 && rc == 0; v++) {
      e2e_t e;

      rc = e2e_once(&srv, op.tool_ms, v == 1, &e);
      if (rc == 0) {
        ms[v][i] = (double)(e.t_end - e.t0) / 1e6;
        mid[v] += e.started_mid;
        calls[v] += e.calls;
        if (v == 0 && i == 0) {
          stream_ms = (double)(e.t_first_usage - e.t0) / 1e6;
        }
      }
    }
  }
  bu_srv_stop(&srv);
  if (rc != 0) {
    free(ms[0]);
    free(ms[1]);
    return 1;
  }
  qsort(ms[0], op.iterations, sizeof(double), cmp_dbl);
  qsort(ms[1], op.iterations, sizeof(double), cmp_dbl);
  med[0] = ms[0][op.iterations / 2];
  med[1] = ms[1][op.iterations / 2];
  if (op.json) {
    printf(",\"e2e\":{\"tools\":%u,\"tool_ms\":%u,\"segment_deltas\":%u,"
           "\"segment_ms\":%u,\"iterations\":%u,\"reply_stream_ms\":%.2f,"
           "\"streaming_ms\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f},"
           "\"after_reply_ms\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f},"
           "\"ratio\":%.3f,\"started_mid_stream\":%zu,\"calls\":%zu}}\n",
           op.ntools, op.tool_ms, op.seg_deltas, op.seg_ms, op.iterations,
           stream_ms, med[0], ms[0][0], ms[0][op.iterations - 1], med[1],
           ms[1][0], ms[1][op.iterations - 1], med[1] / med[0], mid[0],
           calls[0]);
  } else {
    printf("tools e2e: one turn = a reply with %u bench_sleep calls (%u ms "
           "each, uv timer, concurrency-safe),\n"
           "each after a text segment of %u deltas %u ms apart, then a "
           "closing segment; then the answer reply.\n"
           "run start -> final, ms, %u iterations each (reply stream ~%.1f "
           "ms to its usage event)\n",
           op.ntools, op.tool_ms, op.seg_deltas, op.seg_ms, op.iterations,
           stream_ms);
    printf("  %-44s %9s %9s %9s\n", "variant", "median", "min", "max");
    printf("  %-44s %9.2f %9.2f %9.2f\n",
           "streaming execution (tools start mid-reply)", med[0], ms[0][0],
           ms[0][op.iterations - 1]);
    printf("  %-44s %9.2f %9.2f %9.2f\n",
           "SDK-style (tools start after the reply's usage)", med[1],
           ms[1][0], ms[1][op.iterations - 1]);
    printf("  SDK-style / streaming: %.2fx; tools started mid-stream: %zu of "
           "%zu\n",
           med[1] / med[0], mid[0], calls[0]);
  }
  free(ms[0]);
  free(ms[1]);
  return 0;
}
