/* `agentloop-bench subagents`: what a child of the `task` tool costs
 * (docs/subagents.md), side by side in one run with the same number of
 * plain agents (al_agent_new + al_agent_run of the public API) on the same
 * loop, against one agentloop-mockllm process on loopback.
 *
 * The children come from the task tool as a model would ask for them: a
 * parent agent's replies hold `task` calls (agent explore, concurrency-
 * safe, the executor's limit set to N), and the server's tracks route
 * every request by its first user message: the parent's ("BENCH-PARENT-K"),
 * each child's ("BENCH-K-NNN", its task prompt) and each plain agent's
 * ("BENCH-K-RNNN"). Five kinds of run, each once with N plain agents and
 * once with N children:
 *   spawn   one at a time (a reply with one task call; the next plain agent
 *           once the previous answered), each answered at once: spawn ->
 *           first request on the wire, the figure of the target;
 *   quick   all N at once (one reply of N calls; N agents created in one
 *           go), answered at once: the same latency under that burst, and
 *           CPU per agent (its creation and one turn);
 *   stall   all N at once, each reply's first text delta at once and the
 *           rest in 10 minutes: once every agent has its delta and 100 ms
 *           passed, heap in use and RSS per idle agent (one waiting on its
 *           model); then a cancel;
 *   stream  all N at once, a delta every 20 ms: once every agent has had
 *           one, a cancel;
 *   tools   all N at once (children: agent general, writers allowed in
 *           parallel), each running `bash` `sleep 30`: once every command
 *           has started, a cancel.
 * Spawn -> first request on the wire: from the start (a child: its task
 * call's tool_use_started, the task tool's entry; a plain agent: just
 * before al_agent_new) to the server's arrival stamp of the agent's first
 * request (the record file's arrival_ns; both clocks are CLOCK_MONOTONIC).
 * Cancel -> all quiet: from al_agent_cancel (the parent's; each plain
 * agent's) to the last event any of them posted or (tools) the last of
 * their commands' processes reaped, watched until 100 ms after the run
 * ended (the parent's interrupted; every plain agent's) and the processes
 * were gone (at most 2 s);
 * then events after that end, requests beyond one per agent (the record
 * file), child processes of this one (the server excepted) and children
 * still "running" in al_agent_tasks_json are counted: all 0 is quiet.
 * Targets (printed, not enforced): spawn <= 1 ms p50, <= 64 KiB per idle
 * child, all of N quiet <= 50 ms after the cancel. */
#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agent.h"
#include "bench.h"
#include "bench_util.h"
#include "common/common.h"

#define TARGET_SPAWN_US 1000.0
#define TARGET_IDLE_KIB 64.0
#define TARGET_QUIET_MS 50.0
#define SETTLE_MS 100
#define GRACE_MS 100
#define WATCHDOG_MS 180000
#define MAX_PIDS 4096
#define PROCS_WAIT_NS (2000ULL * 1000 * 1000)

enum { K_SPAWN = 0, K_QUICK, K_STALL, K_STREAM, K_TOOLS, K_COUNT };
static const char kind_letter[K_COUNT] = {'P', 'Q', 'S', 'T', 'X'};
static const char *const kind_names[K_COUNT] = {"spawn", "quick", "stall",
                                                "stream", "tools"};
/* How the cancel runs found the agents (the report's words). */
static const char *const kind_state[K_COUNT] = {"", "", "waiting", "streaming",
                                                "in a tool"};

typedef struct bench_s bench_t;

typedef struct {
  bench_t *b;
  size_t idx;
} ref_ctx_t;

typedef struct {
  int kind;
  bool child;
  bool warm; /* a warm-up (plain agents, not reported) */
  size_t n;
  uint64_t *t0;      /* per agent: the spawn's start */
  uint64_t *arrival; /* per agent: its first request at the server */
  uint8_t *seen_req;
  uint8_t *seen_delta;
  size_t *task_idx; /* children: task number (t1..tN) -> agent index */
  size_t n_req, n_delta, n_done, n_int;
  size_t n_created; /* plain agents created (spawn: one at a time) */
  bool began;
  double cpu0, cpu1;
  long rss0, rss1;
  size_t heap0, heap1;
  bool cancelled, quieted, ended;
  uint64_t t_cancel, t_quiet, last_ev;
  size_t ev_after_quiet;
  size_t requests; /* at the server, from the record file */
  int procs_left;
  int procs_at_cancel;   /* tools: the commands' processes, just before */
  uint64_t t_procs_gone; /* tools: when the last of them was gone */
  int tasks_running;     /* children still "running" at the parent's end */
} step_t;

struct bench_s {
  uv_loop_t loop;
  uv_timer_t next;
  uv_timer_t settle;
  uv_timer_t poll; /* tools: the processes, every ms after the cancel */
  pid_t pids[MAX_PIDS];
  int npids;
  uv_timer_t watchdog;
  bu_srv_t srv;
  char url[64];
  char workspace[64];
  size_t n;
  step_t *steps;
  size_t nsteps;
  size_t cur;
  al_agent_t *parent;
  al_agent_t **refs;
  ref_ctx_t *rctx;
  size_t closing;
  bool parent_closing; /* its close was asked; the callback clears parent */
  bool finished;
  int failed;
  char why[256];
};

static void on_next(uv_timer_t *t);
static void on_settle(uv_timer_t *t);

/* Records the first failure; the sequence timer then closes everything. */
static void fail(bench_t *b, const char *fmt, const char *arg) {
  if (!b->failed) {
    b->failed = 1;
    snprintf(b->why, sizeof(b->why), fmt, arg != NULL ? arg : "");
  }
  if (!b->finished) {
    uv_timer_start(&b->next, on_next, 0, 0);
  }
}

/* The stall runs' baseline: freed memory goes back to the system first, so
 * the RSS growth is not hidden by the heap's free lists. */
static size_t heap_in_use(void);

static void baseline(step_t *st) {
  if (st->kind == K_STALL) {
    malloc_trim(0);
  }
  st->rss0 = bu_rss_kb();
  st->heap0 = heap_in_use();
}

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();

  return mi.uordblks + mi.hblkhd;
}

/* Processes whose parent is this one, the server excepted (/proc; read
 * once per run, after it ended). */
static int child_processes(pid_t server, pid_t *pids, int max) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  int n = 0;

  if (d == NULL) {
    return -1;
  }
  while ((de = readdir(d)) != NULL) {
    char path[300];
    char buf[512];
    FILE *f;
    char *rp;
    int ppid = 0;
    long pid = strtol(de->d_name, &rp, 10);

    if (*rp != '\0' || pid <= 0 || pid == server) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    if (fgets(buf, sizeof(buf), f) != NULL &&
        (rp = strrchr(buf, ')')) != NULL &&
        sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == (int)getpid()) {
      if (n < max) {
        pids[n] = (pid_t)pid;
      }
      n++;
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

/* ---- the scenario ---------------------------------------------------------
 */

static char *build_scenario(size_t n) {
  size_t cap = 4096 + n * K_COUNT * 200;
  char *y = malloc(cap);
  size_t len = 0;
  int k;
  size_t i;

#define ADD(...) len += (size_t)snprintf(y + len, cap - len, __VA_ARGS__)
  ADD("tracks:\n");
  for (k = 0; k < K_COUNT; k++) {
    ADD("  - match: {first_user_contains: BENCH-PARENT-%c}\n"
        "    responses:\n",
        kind_letter[k]);
    /* spawn: one task call per reply, so each child starts alone; the
     * others: every call in one reply. */
    for (i = 0; i < n; i++) {
      if (i == 0 || k == K_SPAWN) {
        ADD("      - reply:\n"
            "          content:\n");
      }
      ADD("            - tool_use: {id: toolu_%c_%03zu, name: task, input: "
          "{description: child %zu, prompt: \"BENCH-%c-%03zu: look\", "
          "agent: %s}}\n",
          kind_letter[k], i, i, kind_letter[k], i,
          k == K_TOOLS ? "general" : "explore");
    }
    ADD("      - reply: {content: [{text: all done}]}\n");
  }
  ADD("  - match: {first_user_contains: BENCH-P-}\n"
      "    on_exhausted: repeat_last\n"
      "    responses:\n"
      "      - reply: {content: [{text: found it}]}\n");
  ADD("  - match: {first_user_contains: BENCH-Q-}\n"
      "    on_exhausted: repeat_last\n"
      "    responses:\n"
      "      - reply: {content: [{text: found it}]}\n"
      "  - match: {first_user_contains: BENCH-S-}\n"
      "    on_exhausted: repeat_last\n"
      "    responses:\n"
      "      - reply:\n"
      "          content:\n"
      "            - text: w\n"
      "            - {text: x, delay_ms: 600000}\n"
      "  - match: {first_user_contains: BENCH-T-}\n"
      "    on_exhausted: repeat_last\n"
      "    responses:\n"
      "      - reply:\n"
      "          content:\n"
      "            - repeat_text: {count: 100000, text: \"tok \", "
      "delay_ms: 20}\n"
      "  - match: {first_user_contains: BENCH-X-}\n"
      "    on_exhausted: repeat_last\n"
      "    responses:\n"
      "      - reply:\n"
      "          content:\n"
      "            - tool_use: {name: bash, input: {command: \"sleep 30\"}}\n");
#undef ADD
  return y;
}

/* ---- the runs ---------------------------------------------------------------
 */

static void base_options(bench_t *b, al_agent_options_t *o) {
  al_agent_options_init(o);
  o->base_url = b->url;
  o->api_key = "bench";
  o->workspace = b->workspace;
  o->builtin_tools = true;
  o->permission_mode = AL_PERMISSION_MODE_HEADLESS;
  o->sandbox = AL_SANDBOX_OFF;
  o->max_turns = (uint32_t)b->n + 5; /* the spawn parent's turns */
  o->max_tool_concurrency = (int)b->n;
  /* tools: general children (they may write) run side by side too. */
  o->task_parallel_writers = true;
  o->rng_seed = 1;
}

static void schedule_next(bench_t *b) {
  if (!b->finished) {
    uv_timer_start(&b->next, on_next, 0, 0);
  }
}

static void on_ref_closed(al_agent_t *a) {
  ref_ctx_t *rc = al_agent_get_data(a);
  bench_t *b = rc->b;

  if (--b->closing == 0) {
    b->cur++;
    schedule_next(b);
  }
}

static void on_parent_closed(al_agent_t *a) {
  bench_t *b = al_agent_get_data(a);

  b->parent = NULL;
  b->parent_closing = false;
  b->cur++;
  schedule_next(b);
}

static void end_step(bench_t *b) {
  step_t *st = &b->steps[b->cur];
  size_t i;

  if (st->ended) {
    return;
  }
  st->ended = true;
  uv_timer_stop(&b->poll);
  if (st->child) {
    b->parent_closing = true;
    al_agent_close(b->parent, on_parent_closed);
    return;
  }
  b->closing = st->n;
  for (i = 0; i < st->n; i++) {
    al_agent_close(b->refs[i], on_ref_closed);
    b->refs[i] = NULL;
  }
}

/* Processes still running (not zombies) in the process groups of the
 * commands found at the cancel: a tool's command leads its own group
 * (UV_PROCESS_DETACHED), so what it started is counted too. A killed
 * grandchild is reparented to pid 1 and may stay a zombie there (a
 * container's init may not reap): dead, so not counted. /proc is read
 * once, after the run. */
static int groups_running(const bench_t *b) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  int n = 0;

  if (d == NULL) {
    return -1;
  }
  while ((de = readdir(d)) != NULL) {
    char path[300];
    char buf[512];
    FILE *f;
    char *rp;
    char state = 0;
    int ppid = 0;
    int pgrp = 0;
    int i;

    if (strtol(de->d_name, &rp, 10) <= 0 || *rp != '\0') {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    if (fgets(buf, sizeof(buf), f) != NULL &&
        (rp = strrchr(buf, ')')) != NULL &&
        sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 &&
        state != 'Z') {
      for (i = 0; i < b->npids; i++) {
        n += pgrp == (int)b->pids[i];
      }
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

/* tools: no event says a killed command's process is gone (its call is
 * answered at the cancel), so the commands found at the cancel are probed
 * every ms with kill(pid, 0) until libuv has reaped every one. */
static void on_poll(uv_timer_t *t) {
  bench_t *b = t->data;
  step_t *st = &b->steps[b->cur];
  int i;

  for (i = 0; i < b->npids; i++) {
    if (kill(b->pids[i], 0) == 0) {
      return;
    }
  }
  st->t_procs_gone = uv_hrtime();
  uv_timer_stop(t);
}

static void do_cancel(bench_t *b) {
  step_t *st = &b->steps[b->cur];
  size_t i;

  if (st->kind == K_TOOLS) {
    st->procs_at_cancel = child_processes(b->srv.pid, b->pids, MAX_PIDS);
    b->npids = st->procs_at_cancel < MAX_PIDS ? st->procs_at_cancel : MAX_PIDS;
    uv_timer_start(&b->poll, on_poll, 1, 1);
  }
  st->cancelled = true;
  st->t_cancel = uv_hrtime();
  if (st->child) {
    al_agent_cancel(b->parent);
    return;
  }
  for (i = 0; i < st->n; i++) {
    al_agent_cancel(b->refs[i]);
  }
}

/* The run ended after its cancel: watch GRACE_MS for anything more. */
static void on_quiet(bench_t *b) {
  step_t *st = &b->steps[b->cur];

  st->quieted = true;
  st->t_quiet = uv_hrtime();
  if (st->child) {
    char *js = NULL;

    if (al_agent_tasks_json(b->parent, &js) == 0 && js != NULL) {
      const char *p = js;

      while ((p = strstr(p, "\"state\":\"running\"")) != NULL) {
        st->tasks_running++;
        p++;
      }
      al_free(js);
    }
  }
  uv_timer_start(&b->settle, on_settle, GRACE_MS, 0);
}

static void on_settle(uv_timer_t *t) {
  bench_t *b = t->data;
  step_t *st = &b->steps[b->cur];

  if (st->quieted) {
    if (st->kind == K_TOOLS && st->t_procs_gone == 0 &&
        uv_hrtime() - st->t_quiet < PROCS_WAIT_NS) {
      /* The run ended, its commands' processes are not all reaped yet:
       * wait for them (bounded) so quiet has an end to measure. */
      uv_timer_start(&b->settle, on_settle, 10, 0);
      return;
    }
    st->procs_left = child_processes(b->srv.pid, NULL, 0);
    if (st->kind == K_TOOLS) {
      st->procs_left += groups_running(b);
    }
    end_step(b);
    return;
  }
  /* stall: every agent is waiting on its reply, and has settled. */
  st->rss1 = bu_rss_kb();
  st->heap1 = heap_in_use();
  do_cancel(b);
}

/* What every agent's events count for, whoever posted them. */
static void note(bench_t *b, step_t *st, size_t idx, const al_event_t *ev) {
  if (st->cancelled) {
    if (ev->ts_ns > st->last_ev) {
      st->last_ev = ev->ts_ns;
    }
    if (st->quieted) {
      st->ev_after_quiet++;
    }
  }
  if (idx >= st->n) {
    return;
  }
  if (ev->type == AL_EVENT_STREAM_REQUEST_START && !st->seen_req[idx]) {
    st->seen_req[idx] = 1;
    st->n_req++;
  } else if (((ev->type == AL_EVENT_TEXT_DELTA &&
               (st->kind == K_STALL || st->kind == K_STREAM)) ||
              (ev->type == AL_EVENT_TOOL_USE_STARTED && st->kind == K_TOOLS)) &&
             !st->seen_delta[idx]) {
    /* Its request was served: the reply has begun (tools: the agent's
     * command is running). */
    st->seen_delta[idx] = 1;
    if (++st->n_delta < st->n) {
      return;
    }
    if (st->kind == K_STALL) {
      uv_timer_start(&b->settle, on_settle, SETTLE_MS, 0);
    } else {
      /* Not inside the subscriber: the cancel walks these agents. */
      schedule_next(b);
    }
  }
}

static void on_ref_event(const al_event_t *ev, void *data) {
  ref_ctx_t *rc = data;
  bench_t *b = rc->b;
  step_t *st = &b->steps[b->cur];

  note(b, st, rc->idx, ev);
  switch (ev->type) {
    case AL_EVENT_FINAL:
      if (st->kind == K_QUICK && ++st->n_done == st->n) {
        st->cpu1 = bu_cpu_s();
        schedule_next(b);
      } else if (st->kind == K_SPAWN) {
        st->n_done++;
        schedule_next(b); /* the next agent, or the end */
      }
      break;
    case AL_EVENT_INTERRUPTED:
      if (st->cancelled && ++st->n_int == st->n) {
        on_quiet(b);
      }
      break;
    case AL_EVENT_ERROR:
      if (!st->cancelled) {
        fail(b, "a plain agent failed: %s", "error event");
      }
      break;
    default:
      break;
  }
}

static size_t call_index(al_slice_t id) {
  const char *p = id.ptr != NULL ? memrchr(id.ptr, '_', id.len) : NULL;

  return p == NULL ? SIZE_MAX : (size_t)strtoul(p + 1, NULL, 10);
}

static void on_parent_event(const al_event_t *ev, void *data) {
  bench_t *b = data;
  step_t *st = &b->steps[b->cur];
  size_t idx = SIZE_MAX;

  if (ev->path != NULL) {
    /* A child's event: "tK" (depth 1). */
    unsigned long k = strtoul(ev->path + 1, NULL, 10);

    if (k >= 1 && k <= st->n) {
      idx = st->task_idx[k - 1];
    }
    note(b, st, idx, ev);
    return;
  }
  note(b, st, SIZE_MAX, ev);
  switch (ev->type) {
    case AL_EVENT_TOOL_USE_STARTED:
      idx = call_index(ev->u.tool.call_id);
      if (idx < st->n) {
        if (!st->began) {
          st->began = true;
          st->cpu0 = bu_cpu_s();
          baseline(st);
        }
        st->t0[idx] = ev->ts_ns;
      }
      break;
    case AL_EVENT_SUBAGENT_STARTED: {
      unsigned long k = strtoul(ev->u.subagent.task_id.ptr + 1, NULL, 10);

      idx = call_index(ev->u.subagent.call_id);
      if (k >= 1 && k <= st->n && idx < st->n) {
        st->task_idx[k - 1] = idx;
      }
      break;
    }
    case AL_EVENT_SUBAGENT_COMPLETED:
      if (st->kind == K_QUICK && ++st->n_done == st->n) {
        st->cpu1 = bu_cpu_s();
      }
      break;
    case AL_EVENT_FINAL:
      if (st->kind == K_QUICK || st->kind == K_SPAWN) {
        schedule_next(b);
      }
      break;
    case AL_EVENT_INTERRUPTED:
      if (st->cancelled) {
        on_quiet(b);
      }
      break;
    case AL_EVENT_ERROR:
      if (!st->cancelled) {
        fail(b, "the parent failed: %s", "error event");
      }
      break;
    default:
      break;
  }
}

static int start_ref(bench_t *b, step_t *st) {
  al_agent_options_t o;
  char prompt[64];
  size_t i = st->n_created++;
  int rc;

  base_options(b, &o);
  o.no_task_tool = true;
  b->rctx[i].b = b;
  b->rctx[i].idx = i;
  o.data = &b->rctx[i];
  snprintf(prompt, sizeof(prompt), "BENCH-%c-%c%03zu: look",
           kind_letter[st->kind], st->warm ? 'W' : 'R', i);
  st->t0[i] = uv_hrtime();
  rc = al_agent_new(&b->loop, &o, &b->refs[i]);
  if (rc == 0) {
    rc = al_agent_subscribe(b->refs[i], on_ref_event, &b->rctx[i], NULL);
  }
  if (rc == 0) {
    rc = al_agent_run(b->refs[i], prompt);
  }
  if (rc != 0) {
    fail(b, "a plain agent: %s", al_strerror(rc));
  }
  return rc;
}

static void start_step(bench_t *b) {
  step_t *st = &b->steps[b->cur];
  al_agent_options_t o;
  char prompt[64];
  size_t i;
  int rc;

  base_options(b, &o);
  if (st->child) {
    o.data = b;
    rc = al_agent_new(&b->loop, &o, &b->parent);
    if (rc == 0) {
      rc = al_agent_subscribe(b->parent, on_parent_event, b, NULL);
    }
    snprintf(prompt, sizeof(prompt), "BENCH-PARENT-%c: start the children",
             kind_letter[st->kind]);
    if (rc == 0) {
      rc = al_agent_run(b->parent, prompt);
    }
    if (rc != 0) {
      fail(b, "the parent: %s", al_strerror(rc));
    }
    return;
  }
  /* Plain agents: what an embedder does to run N agents at once (spawn:
   * one after the other's answer). */
  st->began = true;
  st->cpu0 = bu_cpu_s();
  baseline(st);
  for (i = 0; i < (st->kind == K_SPAWN ? 1 : st->n); i++) {
    if (start_ref(b, st) != 0) {
      return;
    }
  }
}

/* The end, or a failure: closes every agent still open and the timers. */
static void finish(bench_t *b) {
  size_t i;

  if (b->finished) {
    return;
  }
  b->finished = true;
  if (b->parent != NULL && !b->parent_closing) {
    al_agent_close(b->parent, NULL);
    b->parent = NULL;
  }
  for (i = 0; i < b->n; i++) {
    if (b->refs[i] != NULL) {
      al_agent_close(b->refs[i], NULL);
      b->refs[i] = NULL;
    }
  }
  uv_close((uv_handle_t *)&b->next, NULL);
  uv_close((uv_handle_t *)&b->settle, NULL);
  uv_close((uv_handle_t *)&b->poll, NULL);
  uv_close((uv_handle_t *)&b->watchdog, NULL);
}

/* One timer drives the sequence: after a step's start, the quick runs'
 * ends, the stream runs' cancels and each step's close. */
static void on_next(uv_timer_t *t) {
  bench_t *b = t->data;
  step_t *st;

  if (b->failed || b->cur >= b->nsteps) {
    finish(b);
    return;
  }
  st = &b->steps[b->cur];
  if (!st->began && !st->child) {
    start_step(b);
  } else if (!st->child && st->kind == K_SPAWN && !st->ended) {
    if (st->n_done < st->n) {
      (void)start_ref(b, st);
    } else {
      end_step(b);
    }
  } else if (st->child && b->parent == NULL && !st->ended) {
    start_step(b);
  } else if ((st->kind == K_QUICK || st->kind == K_SPAWN) && !st->ended) {
    end_step(b);
  } else if ((st->kind == K_STREAM || st->kind == K_TOOLS) && !st->cancelled) {
    do_cancel(b);
  }
}

static void on_watchdog(uv_timer_t *t) {
  bench_t *b = t->data;

  fail(b, "the run did not finish in time%s", NULL);
  finish(b);
}

/* ---- the record file ----------------------------------------------------- */

/* The text of a request's first user message (a string or the first text
 * part), or NULL. */
static const char *first_user(json_t *body) {
  json_t *m = json_array_get(json_object_get(body, "messages"), 0);
  json_t *c = json_object_get(m, "content");

  if (json_is_string(c)) {
    return json_string_value(c);
  }
  return json_string_value(json_object_get(json_array_get(c, 0), "text"));
}

static int read_records(bench_t *b, const char *path) {
  FILE *f = fopen(path, "r");
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;

  if (f == NULL) {
    return -1;
  }
  while ((len = getline(&line, &cap, f)) > 0) {
    json_t *j = json_loadb(line, (size_t)len, 0, NULL);
    json_t *body = json_object_get(j, "body");
    const char *text = first_user(body);
    uint64_t at =
        (uint64_t)json_integer_value(json_object_get(j, "arrival_ns"));
    size_t s;

    for (s = 0; text != NULL && s < b->nsteps; s++) {
      step_t *st = &b->steps[s];
      char pre[32];
      char parent[32];
      size_t plen;

      if (st->warm) {
        continue;
      }
      snprintf(pre, sizeof(pre), "BENCH-%c-%s", kind_letter[st->kind],
               st->child ? "" : "R");
      snprintf(parent, sizeof(parent), "BENCH-PARENT-%c",
               kind_letter[st->kind]);
      plen = strlen(pre);
      if (strncmp(text, pre, plen) == 0 && text[plen] >= '0' &&
          text[plen] <= '9') {
        size_t idx = strtoul(text + plen, NULL, 10);

        if (idx < st->n && st->arrival[idx] == 0 &&
            json_array_size(json_object_get(body, "messages")) == 1) {
          st->arrival[idx] = at;
        }
      } else if (!(st->child && strncmp(text, parent, strlen(parent)) == 0)) {
        continue;
      }
      st->requests++;
    }
    json_decref(j);
  }
  free(line);
  fclose(f);
  return 0;
}

/* ---- the report -----------------------------------------------------------
 */

typedef struct {
  bu_pct_t spawn; /* one at a time */
  bu_pct_t burst; /* N at once */
  double cpu_us;
  double rss_kib, heap_kib;
  double quiet_ms[K_COUNT];
  size_t ev_after[K_COUNT];
  long req_extra[K_COUNT]; /* requests beyond one per agent (and parent) */
  int procs[K_COUNT], running[K_COUNT];
  int procs_at_cancel;                /* tools */
  double tools_ev_ms, tools_procs_ms; /* tools: the two parts of quiet */
  size_t missing;
} side_t;

static bu_pct_t spawn_pct(const step_t *st, size_t *missing) {
  bu_samples_t sm = {0};
  bu_pct_t p;
  size_t i;

  for (i = 0; i < st->n; i++) {
    if (st->arrival[i] != 0 && st->t0[i] != 0 && st->arrival[i] > st->t0[i]) {
      bu_samples_push(&sm, st->arrival[i] - st->t0[i]);
    } else {
      (*missing)++;
    }
  }
  p = bu_percentiles(sm.v, sm.n);
  bu_samples_free(&sm);
  return p;
}

static void summarize(bench_t *b, bool child, side_t *out) {
  size_t s;

  memset(out, 0, sizeof(*out));
  for (s = 0; s < b->nsteps; s++) {
    step_t *st = &b->steps[s];

    if (st->warm || st->child != child) {
      continue;
    }
    if (st->kind == K_SPAWN) {
      out->spawn = spawn_pct(st, &out->missing);
    } else if (st->kind == K_QUICK) {
      out->burst = spawn_pct(st, &out->missing);
      out->cpu_us = (st->cpu1 - st->cpu0) * 1e6 / (double)st->n;
    } else {
      uint64_t last = st->last_ev;

      if (st->kind == K_STALL) {
        out->rss_kib = (double)(st->rss1 - st->rss0) / (double)st->n;
        out->heap_kib =
            ((double)st->heap1 - (double)st->heap0) / 1024.0 / (double)st->n;
      }
      if (st->kind == K_TOOLS) {
        /* Quiet includes the processes; none gone yet counts as never. */
        out->procs_at_cancel = st->procs_at_cancel;
        out->tools_ev_ms = st->last_ev > st->t_cancel
                               ? (double)(st->last_ev - st->t_cancel) / 1e6
                               : 0.0;
        out->tools_procs_ms =
            st->t_procs_gone > st->t_cancel
                ? (double)(st->t_procs_gone - st->t_cancel) / 1e6
                : 0.0;
        last = st->t_procs_gone > last ? st->t_procs_gone : last;
        if (st->t_procs_gone == 0 && st->procs_at_cancel > 0) {
          last = UINT64_MAX;
        }
      }
      out->quiet_ms[st->kind] = last == UINT64_MAX ? 1e9
                                : last > st->t_cancel
                                    ? (double)(last - st->t_cancel) / 1e6
                                    : 0.0;
      out->ev_after[st->kind] = st->ev_after_quiet;
      out->req_extra[st->kind] =
          (long)st->requests - (long)st->n - (st->child ? 1 : 0);
      out->procs[st->kind] = st->procs_left;
      out->running[st->kind] = st->tasks_running;
    }
  }
}

static const char *verdict(bool ok) {
  return ok ? "met" : "missed";
}

static double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

static bool quiet_ok(const side_t *s, int k) {
  return s->ev_after[k] == 0 && s->req_extra[k] == 0 && s->procs[k] == 0 &&
         s->running[k] == 0;
}

static void report(bench_t *b, const side_t *ref, const side_t *ch,
                   bool as_json) {
  int k;

  if (as_json) {
    const side_t *sides[2] = {ref, ch};
    static const char *const names[2] = {"plain", "child"};
    int i;

    printf("{\"scenario\":\"subagents\",\"agents\":%zu", b->n);
    for (i = 0; i < 2; i++) {
      const side_t *s = sides[i];

      printf(",\"%s\":{\"spawn_to_first_request\":", names[i]);
      bu_pct_json(&s->spawn);
      printf(",\"all_at_once_to_first_request\":");
      bu_pct_json(&s->burst);
      printf(
          ",\"cpu_us_per_agent_turn\":%.1f,\"rss_kib_per_idle\":%.1f,"
          "\"heap_kib_per_idle\":%.1f,\"processes_at_tools_cancel\":%d",
          s->cpu_us, s->rss_kib, s->heap_kib, s->procs_at_cancel);
      for (k = K_STALL; k < K_COUNT; k++) {
        printf(
            ",\"cancel_%s\":{\"quiet_ms\":%.2f,\"events_after\":%zu,"
            "\"extra_requests\":%ld,\"processes\":%d,\"running\":%d}",
            kind_names[k], s->quiet_ms[k], s->ev_after[k], s->req_extra[k],
            s->procs[k], s->running[k]);
      }
      printf("}");
    }
    printf(
        ",\"targets\":{\"spawn_p50_us\":%.0f,\"idle_kib\":%.0f,"
        "\"quiet_ms\":%.0f}}\n",
        TARGET_SPAWN_US, TARGET_IDLE_KIB, TARGET_QUIET_MS);
    return;
  }
  printf(
      "subagents: %zu children of the task tool (agent explore) beside "
      "%zu plain agents (al_agent_new + al_agent_run) on one loop, one "
      "agentloop-mockllm process\n\n",
      b->n, b->n);
  printf("  %-46s %12s %12s %8s\n", "", "plain agent", "child", "ch/plain");
  printf("  %-46s %12.1f %12.1f %7.2fx\n",
         "spawn -> first request at server, p50 us", ref->spawn.p50,
         ch->spawn.p50, ratio(ch->spawn.p50, ref->spawn.p50));
  printf("  %-46s %12.1f %12.1f %7.2fx\n", "  p99 us (one at a time)",
         ref->spawn.p99, ch->spawn.p99, ratio(ch->spawn.p99, ref->spawn.p99));
  printf("  %-46s %12.1f %12.1f %7.2fx\n", "  all at once, p50 us",
         ref->burst.p50, ch->burst.p50, ratio(ch->burst.p50, ref->burst.p50));
  printf("  %-46s %12.1f %12.1f %7.2fx\n", "  all at once, p99 us",
         ref->burst.p99, ch->burst.p99, ratio(ch->burst.p99, ref->burst.p99));
  printf("  %-46s %12.1f %12.1f %7.2fx\n",
         "CPU per agent, creation + one turn, us", ref->cpu_us, ch->cpu_us,
         ratio(ch->cpu_us, ref->cpu_us));
  printf("  %-46s %12.1f %12.1f %7.2fx\n", "heap in use per idle agent, KiB",
         ref->heap_kib, ch->heap_kib, ratio(ch->heap_kib, ref->heap_kib));
  printf("  %-46s %12.1f %12.1f %7.2fx\n", "RSS growth per idle agent, KiB",
         ref->rss_kib, ch->rss_kib, ratio(ch->rss_kib, ref->rss_kib));
  for (k = K_STALL; k < K_COUNT; k++) {
    char label[80];

    snprintf(label, sizeof(label), "cancel of %zu %s -> all quiet, ms", b->n,
             kind_state[k]);
    printf("  %-46s %12.2f %12.2f %7.2fx\n", label, ref->quiet_ms[k],
           ch->quiet_ms[k], ratio(ch->quiet_ms[k], ref->quiet_ms[k]));
    if (k == K_TOOLS) {
      printf("  %-46s %12d %12d\n", "  processes at the cancel",
             ref->procs_at_cancel, ch->procs_at_cancel);
      printf("  %-46s %12.2f %12.2f\n", "  last event, ms", ref->tools_ev_ms,
             ch->tools_ev_ms);
      printf("  %-46s %12.2f %12.2f\n", "  last process reaped, ms",
             ref->tools_procs_ms, ch->tools_procs_ms);
    }
    printf("  %-46s %12s %12s\n", "  then: events, extra requests, processes",
           quiet_ok(ref, k) ? "none" : "SOME",
           quiet_ok(ch, k) ? "none" : "SOME");
  }
  printf(
      "\n(idle: each agent's reply begun, its next delta 10 minutes away; "
      "heap: mallinfo2's bytes in use; RSS: its growth from a baseline "
      "taken after malloc_trim)\n");
  printf("target spawn p50 <= %.0f us: %s (%.1f us; plain agent %.1f us)\n",
         TARGET_SPAWN_US, verdict(ch->spawn.p50 <= TARGET_SPAWN_US),
         ch->spawn.p50, ref->spawn.p50);
  printf(
      "target <= %.0f KiB per idle child: %s (heap %.1f KiB, RSS %.1f "
      "KiB)\n",
      TARGET_IDLE_KIB,
      verdict(ch->heap_kib <= TARGET_IDLE_KIB &&
              ch->rss_kib <= TARGET_IDLE_KIB),
      ch->heap_kib, ch->rss_kib);
  for (k = K_STALL; k < K_COUNT; k++) {
    printf(
        "target all of %zu %s children quiet <= %.0f ms after the cancel: "
        "%s (%.2f ms; after it %zu events, %ld extra requests, %d "
        "processes, %d tasks running)\n",
        b->n, kind_state[k], TARGET_QUIET_MS,
        verdict(quiet_ok(ch, k) && ch->quiet_ms[k] <= TARGET_QUIET_MS),
        ch->quiet_ms[k], ch->ev_after[k], ch->req_extra[k], ch->procs[k],
        ch->running[k]);
  }
}

/* ---- entry point --------------------------------------------------------- */

static void step_init(step_t *st, int kind, bool child, bool warm, size_t n) {
  memset(st, 0, sizeof(*st));
  st->kind = kind;
  st->child = child;
  st->warm = warm;
  st->n = n;
  st->t0 = calloc(n, sizeof(*st->t0));
  st->arrival = calloc(n, sizeof(*st->arrival));
  st->seen_req = calloc(n, 1);
  st->seen_delta = calloc(n, 1);
  st->task_idx = calloc(n, sizeof(*st->task_idx));
}

static void step_free(step_t *st) {
  free(st->t0);
  free(st->arrival);
  free(st->seen_req);
  free(st->seen_delta);
  free(st->task_idx);
}

int al_bench_subagents(int argc, char **argv) {
  size_t n = 100;
  bool as_json = false;
  bench_t *b;
  char rec[64] = "/tmp/agentloop-bench-sub-XXXXXX";
  char *yaml;
  side_t ref;
  side_t ch;
  size_t i;
  int k;
  int fd;
  int code = 0;

  for (i = 1; i < (size_t)argc; i++) {
    if (strcmp(argv[i], "--children") == 0 && i + 1 < (size_t)argc) {
      n = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else {
      fprintf(stderr,
              "usage: agentloop-bench subagents [--children N] "
              "[--json]\n");
      return 2;
    }
  }
  if (n == 0 || n > 999) {
    fprintf(stderr, "agentloop-bench subagents: --children 1..999\n");
    return 2;
  }
  b = calloc(1, sizeof(*b));
  b->n = n;
  snprintf(b->workspace, sizeof(b->workspace),
           "/tmp/agentloop-bench-subagents-XXXXXX");
  fd = mkstemp(rec);
  if (mkdtemp(b->workspace) == NULL || fd < 0) {
    perror("agentloop-bench subagents");
    free(b);
    return 1;
  }
  close(fd);
  yaml = build_scenario(n);
  if (bu_srv_start_rec(&b->srv, yaml, -1, NULL, rec) != 0) {
    free(yaml);
    rmdir(b->workspace);
    unlink(rec);
    free(b);
    return 1;
  }
  free(yaml);
  snprintf(b->url, sizeof(b->url), "http://127.0.0.1:%d", b->srv.port);
  b->refs = calloc(n, sizeof(*b->refs));
  b->rctx = calloc(n, sizeof(*b->rctx));
  b->nsteps = 1 + 2 * K_COUNT;
  b->steps = calloc(b->nsteps, sizeof(*b->steps));
  step_init(&b->steps[0], K_QUICK, false, true, n < 10 ? n : 10);
  for (k = 0; k < K_COUNT; k++) {
    step_init(&b->steps[1 + 2 * k], k, false, false, n);
    step_init(&b->steps[2 + 2 * k], k, true, false, n);
  }
  uv_loop_init(&b->loop);
  uv_timer_init(&b->loop, &b->next);
  uv_timer_init(&b->loop, &b->settle);
  uv_timer_init(&b->loop, &b->poll);
  uv_timer_init(&b->loop, &b->watchdog);
  b->next.data = b;
  b->settle.data = b;
  b->poll.data = b;
  b->watchdog.data = b;
  /* The timers' callbacks are set once; uv_timer_start takes them anew. */
  uv_timer_start(&b->watchdog, on_watchdog, WATCHDOG_MS, 0);
  uv_timer_start(&b->next, on_next, 0, 0);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&b->loop) != 0) {
    fprintf(stderr, "agentloop-bench subagents: handles left on the loop\n");
    code = 1;
  }
  bu_srv_stop(&b->srv);
  rmdir(b->workspace);
  if (b->failed) {
    fprintf(stderr, "agentloop-bench subagents: %s\n", b->why);
    code = 1;
  }
  if (code == 0 && read_records(b, rec) != 0) {
    fprintf(stderr, "agentloop-bench subagents: cannot read %s\n", rec);
    code = 1;
  }
  unlink(rec);
  if (code == 0) {
    summarize(b, false, &ref);
    summarize(b, true, &ch);
    report(b, &ref, &ch, as_json);
    if (ref.missing + ch.missing > 0) {
      fprintf(stderr,
              "agentloop-bench subagents: %zu spawn samples "
              "missing\n",
              ref.missing + ch.missing);
      code = 1;
    }
  }
  for (i = 0; i < b->nsteps; i++) {
    step_free(&b->steps[i]);
  }
  free(b->steps);
  free(b->refs);
  free(b->rctx);
  free(b);
  return code;
}
