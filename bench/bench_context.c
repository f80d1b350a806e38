/* agentloop-bench context: a long session in a small window (issue 11,
 * docs/context.md), against an in-process agentloop-mockllm that counts
 * input tokens from the request size and simulates a prefix prompt cache.
 *
 * Reported, per run, with min/median/max over --runs:
 *  - tokens saved by micro-compaction and by summary compaction (the
 *    budget's projections before/after, summed over the session);
 *  - compaction overhead excluding model time: compaction_started ->
 *    summary request sent, plus summary reply done -> compaction_completed;
 *    the reference is the same local work of an ordinary request
 *    (turn_started -> stream_request_start) in the same run;
 *  - the share of cached input, cache_read / (input + cache_read), over the
 *    5 requests after each micro-compaction; the reference is the share
 *    over all requests of the run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentloop/agentloop.h"
#include "bench.h"
#include "common/common.h"
#include "mockllm/mockllm.h"

typedef struct {
  uv_loop_t loop;
  al_mockllm_t *mock;
  al_agent_t *agent;
  bool done;
  /* figures */
  uint64_t micro_saved, summary_saved;
  uint32_t micros, compactions;
  uint64_t t_cstart, t_creq, t_creply;
  bool in_compaction;
  uint64_t overhead_ns;      /* summed over compactions */
  uint64_t t_turn;
  uint64_t ref_ns;           /* summed local prep of ordinary requests */
  uint32_t ref_n;
  int after_micro;           /* requests left to count after a micro */
  uint64_t am_in, am_cached; /* after micro */
  uint64_t all_in, all_cached;
} cx_t;

static void on_event(const al_event_t *ev, void *data) {
  cx_t *b = data;

  switch (ev->type) {
  case AL_EVENT_TURN_STARTED:
    b->t_turn = ev->ts_ns;
    break;
  case AL_EVENT_STREAM_REQUEST_START:
    if (b->in_compaction && b->t_creq == 0) {
      b->t_creq = ev->ts_ns;
    } else if (!b->in_compaction && b->t_turn != 0) {
      b->ref_ns += ev->ts_ns - b->t_turn;
      b->ref_n++;
      b->t_turn = 0;
    }
    break;
  case AL_EVENT_MICRO_COMPACTION:
    b->micros++;
    b->micro_saved += ev->u.compaction.tokens_saved;
    b->after_micro = 5;
    b->t_turn = 0; /* this request's prep includes the micro pass */
    break;
  case AL_EVENT_COMPACTION_STARTED:
    b->in_compaction = true;
    b->t_cstart = ev->ts_ns;
    b->t_creq = 0;
    b->t_creply = 0;
    break;
  case AL_EVENT_USAGE:
    if (b->in_compaction) {
      b->t_creply = ev->ts_ns;
    }
    b->all_in += ev->u.usage.input_tokens + ev->u.usage.cache_read_input_tokens;
    b->all_cached += ev->u.usage.cache_read_input_tokens;
    if (b->after_micro > 0 && !b->in_compaction) {
      b->after_micro--;
      b->am_in +=
          ev->u.usage.input_tokens + ev->u.usage.cache_read_input_tokens;
      b->am_cached += ev->u.usage.cache_read_input_tokens;
    }
    break;
  case AL_EVENT_COMPACTION_COMPLETED:
    b->compactions++;
    if (ev->u.compaction.tokens_before > ev->u.compaction.tokens_after) {
      b->summary_saved +=
          ev->u.compaction.tokens_before - ev->u.compaction.tokens_after;
    }
    if (b->t_creq != 0 && b->t_creply != 0) {
      b->overhead_ns += (b->t_creq - b->t_cstart) + (ev->ts_ns - b->t_creply);
    }
    b->in_compaction = false;
    b->t_turn = 0;
    break;
  case AL_EVENT_FINAL:
  case AL_EVENT_ERROR:
  case AL_EVENT_INTERRUPTED:
    b->done = true;
    if (ev->type != AL_EVENT_FINAL) {
      fprintf(stderr, "agentloop-bench context: the run ended with %s: %.*s\n",
              al_event_type_name(ev->type), (int)ev->u.error.message.len,
              ev->u.error.message.ptr != NULL ? ev->u.error.message.ptr : "");
    }
    break;
  default:
    break;
  }
}

static char *scenario(int turns) {
  al_buf_t b;
  int k;

  al_buf_init(&b, 1 << 24);
  al_buf_append_str(&b, "usage_from_request: {bytes_per_token: 4, cache: "
                        "true}\nresponses:\n");
  for (k = 1; k <= turns; k++) {
    al_buf_printf(&b,
                  "  - reply:\n      content:\n"
                  "        - text: \"## Goal\\nread the files\\n## Current "
                  "step\\nfile %d of %d, noting what each holds before "
                  "going on to the next one.\"\n"
                  "        - tool_use: {id: t%d, name: read_file, input: "
                  "{path: f%d}}\n",
                  k, turns, k, k % 8);
  }
  al_buf_append_str(&b, "  - reply: {content: [{text: done}]}\n");
  return b.data;
}

static void closed(al_agent_t *a) {
  cx_t *b = al_agent_get_data(a);

  al_mockllm_close(b->mock, NULL);
}

static int one_run(int turns, int64_t window, int64_t micro_min,
                   const char *ws, cx_t *b) {
  al_mockllm_options_t mo;
  al_agent_options_t ao;
  char err[256];
  char url[64];
  char *yaml = scenario(turns);
  int rc;

  memset(b, 0, sizeof(*b));
  uv_loop_init(&b->loop);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.err = err;
  mo.err_len = sizeof(err);
  rc = al_mockllm_new(&b->loop, &mo, &b->mock);
  al_free(yaml);
  if (rc != 0) {
    fprintf(stderr, "agentloop-bench context: mockllm: %s\n", err);
    return 1;
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(b->mock));
  al_agent_options_init(&ao);
  ao.base_url = url;
  ao.api_key = "bench";
  ao.workspace = ws;
  ao.builtin_tools = true;
  ao.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  ao.sandbox = AL_SANDBOX_OFF;
  ao.max_turns = (uint32_t)turns + 10;
  ao.context_window = window;
  ao.micro_min_tokens = micro_min;
  ao.rng_seed = 1;
  ao.data = b;
  if ((rc = al_agent_new(&b->loop, &ao, &b->agent)) != 0 ||
      (rc = al_agent_subscribe(b->agent, on_event, b, NULL)) != 0 ||
      (rc = al_agent_run(b->agent, "GOAL-ZEBRA-42: read every file")) != 0) {
    fprintf(stderr, "agentloop-bench context: agent: %s\n", al_strerror(rc));
    return 1;
  }
  while (!b->done && uv_run(&b->loop, UV_RUN_ONCE) != 0) {
  }
  al_agent_close(b->agent, closed);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  uv_loop_close(&b->loop);
  return b->done ? 0 : 1;
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, c = *(const double *)y;

  return a < c ? -1 : a > c;
}

static void spread(const char *name, double *v, int n, const char *unit,
                   bool json, bool last) {
  qsort(v, (size_t)n, sizeof(*v), cmp_d);
  if (json) {
    printf("\"%s\":{\"min\":%.4g,\"median\":%.4g,\"max\":%.4g}%s", name, v[0],
           v[n / 2], v[n - 1], last ? "" : ",");
  } else {
    printf("  %-34s %10.4g %s  (min %.4g, max %.4g)\n", name, v[n / 2], unit,
           v[0], v[n - 1]);
  }
}

int al_bench_context(int argc, char **argv) {
  int turns = 70;
  int runs = 3;
  int64_t window = 20000;
  int64_t micro_min = 3000;
  bool json = false;
  char ws[] = "/tmp/al-bench-context-XXXXXX";
  double v[8][16];
  int i, k;
  const char *names[] = {"tokens_saved_micro", "tokens_saved_summary",
                         "compaction_overhead_ms", "request_prep_ms",
                         "overhead_vs_request_prep", "cached_share_after_micro",
                         "cached_share_all", "compactions"};
  const char *units[] = {"tokens", "tokens", "ms", "ms", "x", "", "", ""};

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--turns") == 0 && i + 1 < argc) {
      turns = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc) {
      window = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--micro-min") == 0 && i + 1 < argc) {
      micro_min = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      fprintf(stderr, "agentloop-bench context: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (turns < 10 || runs < 1 || runs > 16) {
    fprintf(stderr, "agentloop-bench context: --turns >= 10, --runs 1..16\n");
    return 2;
  }
  if (mkdtemp(ws) == NULL) {
    return 1;
  }
  {
    char path[128];
    char big[8193];

    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (k = 0; k < 8; k++) {
      FILE *f;

      snprintf(path, sizeof(path), "%s/f%d", ws, k);
      f = fopen(path, "w");
      if (f == NULL) {
        return 1;
      }
      fputs(big, f);
      fclose(f);
    }
  }
  for (k = 0; k < runs; k++) {
    cx_t b;

    if (one_run(turns, window, micro_min, ws, &b) != 0) {
      return 1;
    }
    v[0][k] = (double)b.micro_saved;
    v[1][k] = (double)b.summary_saved;
    v[2][k] = b.compactions ? (double)b.overhead_ns / b.compactions / 1e6 : 0;
    v[3][k] = b.ref_n ? (double)b.ref_ns / b.ref_n / 1e6 : 0;
    v[4][k] = v[3][k] > 0 ? v[2][k] / v[3][k] : 0;
    v[5][k] = b.am_in ? (double)b.am_cached / (double)b.am_in : 0;
    v[6][k] = b.all_in ? (double)b.all_cached / (double)b.all_in : 0;
    v[7][k] = (double)b.compactions;
  }
  if (json) {
    printf("{\"scenario\":\"context\",\"turns\":%d,\"window\":%lld,", turns,
           (long long)window);
  } else {
    printf("context: %d turns of 8 KB reads, window %lld, micro minimum "
           "%lld, %d runs (median, min, max)\n",
           turns, (long long)window, (long long)micro_min, runs);
  }
  for (i = 0; i < 8; i++) {
    spread(names[i], v[i], runs, units[i], json, i == 7);
  }
  if (json) {
    printf("}\n");
  }
  for (k = 0; k < 8; k++) {
    char path[128];

    snprintf(path, sizeof(path), "%s/f%d", ws, k);
    unlink(path);
  }
  rmdir(ws);
  return 0;
}
