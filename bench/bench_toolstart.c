/* `agentloop-bench toolstart` (also the first table of `tools`): how long
 * after its block ends a sandboxed command really runs.
 *
 * An embedded agentloop-mockllm with send stamps (every SSE event carries
 * `id: <uv_hrtime ns>` taken when its batch is written) scripts replies
 * of: a text block streamed over ~20 ms (a model's time to its tool call;
 * real ones take hundreds of ms), ONE bash tool_use whose command is
 * agentloop-bench-stamp (static; it writes CLOCK_MONOTONIC at its own
 * entry to a file), then a streamed tail. The tool is alternately the
 * bash tool (the command through /bin/sh -c) and a tools.d tool that runs
 * the program by its argv (no shell: what the sandbox itself costs,
 * without the shell's dynamic start, fork and second exec). Per call:
 *
 *   start = stamp written by the command - send stamp of the event that
 *           completed the tool block (its content_block_stop)
 *
 * both CLOCK_MONOTONIC on this machine: transport, decode, dispatch,
 * permission, spawn, bwrap, Landlock, seccomp, the shell and the exec are
 * all inside. Modes, interleaved run by run (a run = a fresh agent, so a
 * fresh session and pool, with PER_RUN calls), in one process:
 *
 *   bwrap warm   the default: bwrap mode with the warm pool
 *   bwrap cold   bwrap mode, AGENTLOOP_WARM=0 (as before the pool)
 *   degraded     bwrap "fails" (/bin/false): agentloop-exec alone
 *   none         --sandbox=none: the floor every mode pays
 *
 * At the end of each warm run (its last tool done, only the pool's idle
 * sandboxes left as our children) the PSS and RSS of every process below
 * us is summed and divided by the number of warm sandboxes: the memory
 * one idle warm sandbox costs. Targets (printed, not enforced): bwrap
 * warm p50 <= 1 ms, p99 <= 3 ms. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "agentloop/agent.h"
#include "bench.h"
#include "common/common.h"
#include "loop/agent_int.h" /* al__agent_call_stamp */
#include "mockllm/mockllm.h"
#include "sandbox/pool.h"

#define TARGET_P50_US 1000.0
#define TARGET_P99_US 3000.0

enum { M_WARM = 0, M_COLD, M_DEGRADED, M_NONE, M_COUNT };
/* The command as the bash tool runs it (/bin/sh -c), and as a tools.d
 * tool runs it (argv, no shell): the first pays the shell's own start
 * (a dynamic exec, then its fork and the stamp's exec), the second only
 * the stamp's exec, so it shows what the sandbox itself costs. */
enum { K_SH = 0, K_ARGV, K_COUNT };

static const char *const mode_names[M_COUNT] = {"bwrap warm", "bwrap cold",
                                                "degraded", "none"};
static const char *const kind_names[K_COUNT] = {"sh -c", "argv"};
static const char *const kind_keys[K_COUNT] = {"sh", "argv"};

typedef struct {
  uint64_t *us100; /* per call: start in 0.1 us units */
  uint64_t *disp100; /* per call: stamp -> tool_use_started, same units */
  size_t n;
  size_t cap;
  double *run_p50; /* per run */
  size_t runs;
  size_t run_first; /* index in us100 of this run's first call */
  size_t errors;
} series_t;

typedef struct {
  double pss_kb_sum; /* per idle warm sandbox, summed over runs */
  double rss_kb_sum;
  double uss_kb_sum; /* private pages only (PSS varies with how many other
                      * processes on the machine share the libraries) */
  double dirty_kb_sum; /* private dirty: what one more sandbox adds (clean
                        * private pages are file pages no other process
                        * maps yet, so USS too falls as the pool grows) */
  size_t mem_samples;
  size_t sandboxes_sum; /* idle sandboxes at each sample */
  uint64_t served; /* warm pool: commands started warm */
  uint64_t misses;
  uint64_t replans; /* the protected paths' mounts planned again */
} modestat_t;

typedef struct {
  uv_loop_t loop;
  uv_timer_t next;
  al_mockllm_t *mock;
  al_agent_t *agent;
  al_agent_options_t ao;
  char url[64];
  char workspace[64];
  char stampfile[128];
  char toolsdir[96];
  char toolfile[128];
  size_t per_run;
  size_t runs; /* per mode */
  size_t run_i; /* overall run index */
  int mode;
  int kind; /* of the call in flight */
  size_t call_in_run;
  uint64_t block_stamp;
  uint64_t started_ts;
  series_t s[M_COUNT][K_COUNT];
  modestat_t ms[M_COUNT];
  int settle_ticks;
  bool failed;
  char why[256];
} tb_t;

static void fail(tb_t *b, const char *why) {
  if (!b->failed) {
    b->failed = true;
    snprintf(b->why, sizeof(b->why), "%s", why);
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* Nearest rank, in us. */
static double pct(const uint64_t *sorted, size_t n, double p) {
  size_t k;

  if (n == 0) {
    return 0;
  }
  k = (size_t)(p / 100.0 * (double)n + 0.999999);
  if (k == 0) {
    k = 1;
  }
  if (k > n) {
    k = n;
  }
  return (double)sorted[k - 1] / 10.0;
}

/* Sums PSS, RSS and USS (kB) of the processes below us that belong to a
 * warm sandbox (a child of ours named bwrap, and everything below it: its
 * init and agentloop-exec); returns how many such children there are. The
 * janitor (agentloop-exec --janitor, also our child) is not counted. */
static size_t below_us(double *pss, double *rss, double *uss,
                       double *dirty) {
  int pids[1024], top[1024];
  bool sandbox[1024];
  size_t n = 0, i, k, direct = 0;
  bool grew = true;

  *pss = *rss = *uss = *dirty = 0;
  pids[n] = (int)getpid();
  top[n] = -1;
  sandbox[n++] = false;
  while (grew && n < 1024) {
    DIR *d = opendir("/proc");
    struct dirent *de;

    grew = false;
    while (d != NULL && (de = readdir(d)) != NULL && n < 1024) {
      int pid = atoi(de->d_name), pp = -1;
      char path[64], buf[512], comm[64] = "";
      FILE *f;
      bool known = false;

      if (pid <= 0) {
        continue;
      }
      for (k = 0; k < n; k++) {
        known = known || pids[k] == pid;
      }
      if (known) {
        continue;
      }
      snprintf(path, sizeof(path), "/proc/%d/stat", pid);
      if ((f = fopen(path, "re")) == NULL) {
        continue;
      }
      if (fgets(buf, sizeof(buf), f) != NULL && strrchr(buf, ')') != NULL) {
        char *open = strchr(buf, '(');
        char *close = strrchr(buf, ')');

        (void)sscanf(close + 1, " %*c %d", &pp);
        if (open != NULL && close > open &&
            (size_t)(close - open - 1) < sizeof(comm)) {
          memcpy(comm, open + 1, (size_t)(close - open - 1));
          comm[close - open - 1] = '\0';
        }
      }
      fclose(f);
      for (k = 0; k < n; k++) {
        if (pids[k] == pp) {
          pids[n] = pid;
          if (k == 0) {
            top[n] = (int)n;
            sandbox[n] = strcmp(comm, "bwrap") == 0;
            direct += sandbox[n];
          } else {
            top[n] = top[k];
            sandbox[n] = sandbox[k];
          }
          n++;
          grew = true;
          break;
        }
      }
    }
    if (d != NULL) {
      closedir(d);
    }
  }
  for (i = 1; i < n; i++) {
    char path[64], line[256];
    FILE *f;
    double v;

    if (!sandbox[i]) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pids[i]);
    if ((f = fopen(path, "re")) == NULL) {
      continue;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
      if (sscanf(line, "Pss: %lf", &v) == 1) {
        *pss += v;
      } else if (sscanf(line, "Rss: %lf", &v) == 1) {
        *rss += v;
      } else if (sscanf(line, "Private_Clean: %lf", &v) == 1) {
        *uss += v;
      } else if (sscanf(line, "Private_Dirty: %lf", &v) == 1) {
        *uss += v;
        *dirty += v;
      }
    }
    fclose(f);
  }
  return direct;
}

static void on_next(uv_timer_t *t);
static void on_settled(uv_timer_t *t);

static uint64_t read_stamp(const char *path) {
  FILE *f = fopen(path, "re");
  unsigned long long v = 0;

  if (f == NULL) {
    return 0;
  }
  if (fscanf(f, "%llu", &v) != 1) {
    v = 0;
  }
  fclose(f);
  unlink(path);
  return (uint64_t)v;
}

static void on_event(const al_event_t *ev, void *data) {
  tb_t *b = data;
  series_t *s = &b->s[b->mode][b->kind];
  modestat_t *ms = &b->ms[b->mode];
  char id[80];

  switch (ev->type) {
  case AL_EVENT_TOOL_USE_STARTED:
    b->kind = ev->u.tool.name.len == 4 &&
                      memcmp(ev->u.tool.name.ptr, "bash", 4) == 0
                  ? K_SH
                  : K_ARGV;
    snprintf(id, sizeof(id), "%.*s", (int)ev->u.tool.call_id.len,
             ev->u.tool.call_id.ptr);
    b->block_stamp = al__agent_call_stamp(b->agent, id);
    b->started_ts = ev->ts_ns;
    if (b->block_stamp == 0) {
      fail(b, "no send stamp for a tool block");
    }
    break;
  case AL_EVENT_TOOL_USE_COMPLETED: {
    uint64_t at = read_stamp(b->stampfile);

    if (ev->u.tool.is_error || at == 0 || at < b->block_stamp) {
      s->errors++;
      break;
    }
    if (s->n < s->cap) {
      s->disp100[s->n] = (b->started_ts - b->block_stamp) / 100;
      s->us100[s->n++] = (at - b->block_stamp) / 100;
    }
    break;
  }
  case AL_EVENT_FINAL:
    if (b->mode == M_WARM) {
      al_pool_stats_t st;

      if (al__pool_stats(al__agent_sandbox(b->agent), &st)) {
        ms->served += st.served;
        ms->misses += st.misses;
        ms->replans += st.replans;
      }
      b->settle_ticks = 0;
      uv_timer_start(&b->next, on_settled, 5, 0);
      break;
    }
    uv_timer_start(&b->next, on_next, 0, 0);
    break;
  case AL_EVENT_ERROR:
  case AL_EVENT_INTERRUPTED:
    fail(b, "the run ended in an error");
    uv_timer_start(&b->next, on_next, 0, 0);
    break;
  default:
    break;
  }
}

/* The memory of the idle warm sandboxes, once the pool is at rest: the
 * replacement of the last call's sandbox is still being built when the
 * run ends (bwrap mid-set-up, the helper compiling its filter), and a
 * sample then counted a half-made sandbox as an idle one (the 1.3-2.2 MB
 * "per idle sandbox" of earlier runs under load were such samples). */
static void on_settled(uv_timer_t *t) {
  tb_t *b = AL_CONTAINER_OF(t, tb_t, next);
  modestat_t *ms = &b->ms[M_WARM];
  al_pool_stats_t st;
  double pss, rss, uss, dirty;
  size_t warm;

  if (!al__pool_stats(al__agent_sandbox(b->agent), &st)) {
    uv_timer_start(&b->next, on_next, 0, 0);
    return;
  }
  if (st.building > 0 && ++b->settle_ticks < 400) {
    uv_timer_start(&b->next, on_settled, 5, 0);
    return;
  }
  warm = below_us(&pss, &rss, &uss, &dirty);
  if (st.building == 0 && warm > 0 && warm == st.idle) {
    ms->pss_kb_sum += pss / (double)warm;
    ms->rss_kb_sum += rss / (double)warm;
    ms->uss_kb_sum += uss / (double)warm;
    ms->dirty_kb_sum += dirty / (double)warm;
    ms->sandboxes_sum += warm;
    ms->mem_samples++;
  }
  uv_timer_start(&b->next, on_next, 0, 0);
}

static void on_closed(al_agent_t *a) {
  tb_t *b = al_agent_get_data(a);

  b->agent = NULL;
  uv_timer_start(&b->next, on_next, 0, 0);
}

static void end_run(tb_t *b) {
  int kind;

  for (kind = 0; kind < K_COUNT; kind++) {
    series_t *s = &b->s[b->mode][kind];
    size_t k = s->n - s->run_first;

    if (k > 0) {
      uint64_t *tmp = malloc(k * sizeof(*tmp));

      memcpy(tmp, s->us100 + s->run_first, k * sizeof(*tmp));
      qsort(tmp, k, sizeof(*tmp), cmp_u64);
      s->run_p50[s->runs++] = pct(tmp, k, 50);
      free(tmp);
    }
  }
}

static void on_next(uv_timer_t *t) {
  tb_t *b = AL_CONTAINER_OF(t, tb_t, next);
  int i;

  if (b->agent != NULL) {
    end_run(b);
    al_agent_close(b->agent, on_closed);
    return;
  }
  if (b->failed || b->run_i == b->runs * M_COUNT) {
    uv_close((uv_handle_t *)&b->next, NULL);
    al_mockllm_close(b->mock, NULL);
    return;
  }
  b->mode = (int)(b->run_i % M_COUNT);
  b->run_i++;
  b->ao.sandbox = b->mode == M_NONE ? AL_SANDBOX_OFF : AL_SANDBOX_AUTO;
  b->ao.sandbox_bwrap = b->mode == M_DEGRADED ? "/bin/false" : NULL;
  /* Read when the agent builds its sandbox (al__pool_start). */
  setenv("AGENTLOOP_WARM", b->mode == M_WARM ? "1" : "0", 1);
  for (i = 0; i < K_COUNT; i++) {
    b->s[b->mode][i].run_first = b->s[b->mode][i].n;
  }
  if (al_agent_new(&b->loop, &b->ao, &b->agent) != 0 ||
      al_agent_subscribe(b->agent, on_event, b, NULL) != 0 ||
      al_agent_run(b->agent, "Stamp, again and again.") != 0) {
    fail(b, "could not start a run");
    if (b->agent == NULL) {
      uv_timer_start(&b->next, on_next, 0, 0);
    } else {
      al_agent_close(b->agent, on_closed);
    }
  }
}

static char *scenario(const tb_t *b, const char *stamp) {
  al_buf_t y;
  size_t r, i;

  al_buf_init(&y, (size_t)1 << 28);
  al_buf_append_str(&y, "timestamps: true\non_exhausted: error\nresponses:\n");
  for (r = 0; r < b->runs * M_COUNT; r++) {
    for (i = 0; i < b->per_run; i++) {
      al_buf_printf(&y,
                    "  - reply:\n"
                    "      content:\n"
                    "        - text: \"Let me run the stamp program now.\"\n"
                    "          chunks: 5\n"
                    "          delay_ms: 4\n"
                    "        - tool_use: {name: %s, input: {%s%s%s%s%s}, "
                    "delay_ms: 1}\n"
                    "        - text: \"The reply goes on while it runs.\"\n"
                    "          chunks: 5\n"
                    "          delay_ms: 2\n",
                    /* Alternately: the bash tool, the tools.d one. */
                    i % 2 == 0 ? "bash" : "stamp",
                    i % 2 == 0 ? "command: \"" : "",
                    i % 2 == 0 ? stamp : "", i % 2 == 0 ? " " : "",
                    i % 2 == 0 ? b->stampfile : "",
                    i % 2 == 0 ? "\"" : "");
    }
    al_buf_append_str(&y, "  - reply: {content: [{text: \"Done.\"}]}\n");
  }
  return y.data;
}

/* The tools.d tool that runs the stamp program by argv (no shell), in a
 * directory of its own outside the workspace (the workspace's tools.d is
 * a protected path: it must stay absent, as in the bash case). */
static int write_tool(tb_t *b, const char *stamp) {
  FILE *f;

  snprintf(b->toolsdir, sizeof(b->toolsdir),
           "/var/tmp/agentloop-bench-toolsd-XXXXXX");
  if (mkdtemp(b->toolsdir) == NULL) {
    return -1;
  }
  snprintf(b->toolfile, sizeof(b->toolfile), "%s/stamp.yaml", b->toolsdir);
  f = fopen(b->toolfile, "we");
  if (f == NULL) {
    return -1;
  }
  fprintf(f,
          "tools:\n"
          "  - name: stamp\n"
          "    description: Writes the time at its start.\n"
          "    category: read\n"
          "    cmd: \"%s\"\n"
          "    args: [\"%s\"]\n",
          stamp, b->stampfile);
  return fclose(f) == 0 ? 0 : -1;
}

static void stamp_path(char *out, size_t n) {
  char exe[1024];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  char *slash;

  out[0] = '\0';
  if (k <= 0) {
    return;
  }
  exe[k] = '\0';
  slash = strrchr(exe, '/');
  if (slash != NULL) {
    *slash = '\0';
    snprintf(out, n, "%s/agentloop-bench-stamp", exe);
  }
}

typedef struct {
  double p50, p99, mn, mx, rmin, rmed, rmax, d50;
} figs_t;

static figs_t figures(series_t *s) {
  figs_t f;

  qsort(s->us100, s->n, sizeof(uint64_t), cmp_u64);
  qsort(s->disp100, s->n, sizeof(uint64_t), cmp_u64);
  qsort(s->run_p50, s->runs, sizeof(double), cmp_dbl);
  f.d50 = pct(s->disp100, s->n, 50);
  f.p50 = pct(s->us100, s->n, 50);
  f.p99 = pct(s->us100, s->n, 99);
  f.mn = s->n ? (double)s->us100[0] / 10.0 : 0;
  f.mx = s->n ? (double)s->us100[s->n - 1] / 10.0 : 0;
  f.rmin = s->runs ? s->run_p50[0] : 0;
  f.rmed = s->runs ? s->run_p50[s->runs / 2] : 0;
  f.rmax = s->runs ? s->run_p50[s->runs - 1] : 0;
  return f;
}

static double avg(double sum, size_t n) { return n ? sum / (double)n : 0; }

static void report(tb_t *b, bool json) {
  figs_t f[M_COUNT][K_COUNT];
  const modestat_t *w = &b->ms[M_WARM];
  int m, k;

  for (m = 0; m < M_COUNT; m++) {
    for (k = 0; k < K_COUNT; k++) {
      f[m][k] = figures(&b->s[m][k]);
    }
  }
  if (json) {
    printf("{\"scenario\":\"toolstart\",\"calls_per_run\":%zu,\"runs\":%zu,"
           "\"modes\":{",
           b->per_run, b->runs);
    for (m = 0; m < M_COUNT; m++) {
      printf("%s\"%s\":{", m ? "," : "", mode_names[m]);
      for (k = 0; k < K_COUNT; k++) {
        const figs_t *x = &f[m][k];

        printf("%s\"%s\":{\"calls\":%zu,\"errors\":%zu,\"p50_us\":%.1f,"
               "\"p99_us\":%.1f,\"min_us\":%.1f,\"max_us\":%.1f,"
               "\"run_p50_us\":{\"min\":%.1f,\"median\":%.1f,\"max\":%.1f},"
               "\"dispatch_p50_us\":%.1f}",
               k ? "," : "", kind_keys[k], b->s[m][k].n, b->s[m][k].errors,
               x->p50, x->p99, x->mn, x->mx, x->rmin, x->rmed, x->rmax,
               x->d50);
      }
      printf("}");
    }
    printf("},\"warm_served\":%llu,\"warm_misses\":%llu,"
           "\"warm_plans\":%llu,"
           "\"warm_sandbox_kb\":{\"pss\":%.0f,\"rss\":%.0f,\"uss\":%.0f,"
           "\"private_dirty\":%.0f}}\n",
           (unsigned long long)w->served, (unsigned long long)w->misses,
           (unsigned long long)w->replans,
           avg(w->pss_kb_sum, w->mem_samples),
           avg(w->rss_kb_sum, w->mem_samples),
           avg(w->uss_kb_sum, w->mem_samples),
           avg(w->dirty_kb_sum, w->mem_samples));
    return;
  }
  printf("tool start: content_block_stop sent -> the command's first "
         "instruction (agentloop-bench-stamp),\n"
         "%zu runs x %zu calls per mode (alternately the bash tool's "
         "/bin/sh -c and a tools.d tool's argv),\n"
         "modes interleaved run by run; times in us\n",
         b->runs, b->per_run);
  printf("  %-11s %-6s %6s %9s %9s %9s %9s   %-25s %s\n", "mode", "via",
         "calls", "p50", "p99", "min", "max", "per-run p50 min/med/max",
         "dispatch p50");
  for (k = K_COUNT - 1; k >= 0; k--) {
    for (m = 0; m < M_COUNT; m++) {
      const figs_t *x = &f[m][k];

      printf("  %-11s %-6s %6zu %9.1f %9.1f %9.1f %9.1f   %7.1f %7.1f %7.1f"
             "   %9.1f%s\n",
             mode_names[m], kind_names[k], b->s[m][k].n, x->p50, x->p99,
             x->mn, x->mx, x->rmin, x->rmed, x->rmax, x->d50,
             b->s[m][k].errors ? "  (errors!)" : "");
    }
  }
  printf("  (dispatch: stamp -> tool_use_started, when the spawn call has "
         "returned)\n");
  for (k = K_COUNT - 1; k >= 0; k--) {
    printf("  %-6s bwrap warm vs cold: p50 %.2fx faster; warm - none: p50 "
           "%+.1f us, p99 %+.1f us\n",
           kind_names[k],
           f[M_WARM][k].p50 > 0 ? f[M_COLD][k].p50 / f[M_WARM][k].p50 : 0,
           f[M_WARM][k].p50 - f[M_NONE][k].p50,
           f[M_WARM][k].p99 - f[M_NONE][k].p99);
  }
  printf("  bwrap warm: %llu calls started in a warm sandbox, %llu found none "
         "ready (started cold), %llu protected-path plans made\n",
         (unsigned long long)w->served, (unsigned long long)w->misses,
         (unsigned long long)w->replans);
  if (w->mem_samples) {
    printf("  one idle warm sandbox (bwrap, its init, agentloop-exec): "
           "private dirty %.0f kB, USS %.0f kB, PSS %.0f kB, RSS %.0f kB\n"
           "    (%.1f idle sandboxes per sample; USS and PSS fall as more "
           "processes share the same pages)\n",
           avg(w->dirty_kb_sum, w->mem_samples),
           avg(w->uss_kb_sum, w->mem_samples),
           avg(w->pss_kb_sum, w->mem_samples),
           avg(w->rss_kb_sum, w->mem_samples),
           avg((double)w->sandboxes_sum, w->mem_samples));
  }
  for (k = K_COUNT - 1; k >= 0; k--) {
    printf("  target bwrap warm (%s): p50 <= %.0f us (%s), p99 <= %.0f us "
           "(%s)\n",
           kind_names[k], TARGET_P50_US,
           f[M_WARM][k].p50 <= TARGET_P50_US ? "met" : "MISSED",
           TARGET_P99_US,
           f[M_WARM][k].p99 <= TARGET_P99_US ? "met" : "MISSED");
  }
}

int al_bench_toolstart(int argc, char **argv) {
  static const char *const allow[] = {"bash", "stamp", NULL};
  const char *dirs[] = {NULL, NULL};
  size_t calls = 300;
  size_t per_run = 20;
  bool json = false;
  char stamp[1100];
  char err[256] = "";
  al_mockllm_options_t mo;
  tb_t *b;
  char *yaml;
  int m, i, code = 0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--calls-per-run") == 0 && i + 1 < argc) {
      per_run = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      fprintf(stderr, "usage: agentloop-bench toolstart [--calls N (300 per "
                      "mode)] [--calls-per-run N (20)] [--json]\n");
      return 2;
    }
  }
  if (calls == 0 || calls > 100000 || per_run == 0 || per_run > calls) {
    fprintf(stderr, "agentloop-bench toolstart: bad arguments\n");
    return 2;
  }
  stamp_path(stamp, sizeof(stamp));
  if (access(stamp, X_OK) != 0) {
    fprintf(stderr, "agentloop-bench toolstart: %s not found\n", stamp);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  b = calloc(1, sizeof(*b));
  b->per_run = per_run;
  b->runs = (calls + per_run - 1) / per_run;
  /* Not under /tmp: bwrap mode gives tools a private one. */
  snprintf(b->workspace, sizeof(b->workspace),
           "/var/tmp/agentloop-bench-toolstart-XXXXXX");
  if (mkdtemp(b->workspace) == NULL) {
    perror("agentloop-bench toolstart: mkdtemp");
    free(b);
    return 1;
  }
  snprintf(b->stampfile, sizeof(b->stampfile), "%s/stamp", b->workspace);
  if (write_tool(b, stamp) != 0) {
    perror("agentloop-bench toolstart: tools.d");
    if (b->toolfile[0] != '\0') {
      unlink(b->toolfile);
    }
    rmdir(b->toolsdir);
    rmdir(b->workspace);
    free(b);
    return 1;
  }
  dirs[0] = b->toolsdir;
  for (m = 0; m < M_COUNT * K_COUNT; m++) {
    series_t *s = &b->s[m / K_COUNT][m % K_COUNT];

    s->cap = b->runs * per_run;
    s->us100 = calloc(s->cap, sizeof(uint64_t));
    s->disp100 = calloc(s->cap, sizeof(uint64_t));
    s->run_p50 = calloc(b->runs, sizeof(double));
  }
  uv_loop_init(&b->loop);
  uv_timer_init(&b->loop, &b->next);
  yaml = scenario(b, stamp);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.timestamps = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  if (al_mockllm_new(&b->loop, &mo, &b->mock) != 0) {
    fprintf(stderr, "agentloop-bench toolstart: mockllm: %s\n", err);
    uv_close((uv_handle_t *)&b->next, NULL);
    code = 1;
  } else {
    snprintf(b->url, sizeof(b->url), "http://127.0.0.1:%d",
             al_mockllm_port(b->mock));
    al_agent_options_init(&b->ao);
    b->ao.base_url = b->url;
    b->ao.api_key = "bench";
    b->ao.workspace = b->workspace;
    b->ao.builtin_tools = true;
    b->ao.max_turns = (uint32_t)per_run + 5;
    b->ao.permission_mode = AL_PERMISSION_MODE_HEADLESS;
    b->ao.allow_tools = allow;
    b->ao.tools_dirs = dirs;
    b->ao.rng_seed = 1;
    b->ao.data = b;
    uv_timer_start(&b->next, on_next, 0, 0);
  }
  al_free(yaml);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&b->loop) != 0) {
    fprintf(stderr, "agentloop-bench toolstart: handles left on the loop\n");
    code = 1;
  }
  unsetenv("AGENTLOOP_WARM");
  rmdir(b->workspace);
  unlink(b->toolfile);
  rmdir(b->toolsdir);
  if (code == 0 && b->failed) {
    fprintf(stderr, "agentloop-bench toolstart: %s\n", b->why);
    code = 1;
  }
  if (code == 0) {
    report(b, json);
  }
  for (m = 0; m < M_COUNT * K_COUNT; m++) {
    series_t *s = &b->s[m / K_COUNT][m % K_COUNT];

    free(s->us100);
    free(s->disp100);
    free(s->run_p50);
  }
  free(b);
  return code;
}
