/* The agent's tool execution end to end (SPEC §6-§8, §10): tools starting
 * while the reply streams, the concurrency gate, arrival and completion
 * order, sibling errors, unknown tools and bad input, the in-process tool
 * API, permissions and approvals, the built-in tools, subscriber
 * re-entrancy and the `done` tool.
 *
 * Deterministic (STYLE §3.6): nothing sleeps. The in-process test tool
 * completes from uv timers of a few ms (or from a barrier: its timers start
 * only once N calls are running, so "they overlapped" never depends on
 * how fast a machine is), and the assertions are about event order
 * (indices in f.events), never about durations. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent_fx.h"
#include "test.h"

/* ---- small helpers ---------------------------------------------------------- */

#define jstr fx_jstr

static bool jtrue(const json_t *o, const char *k) {
  return json_is_true(json_object_get(o, k));
}

static long started(const fx_t *f, const char *id) {
  return fx_find(f, "tool_use_started", id, 0);
}

static long completed(const fx_t *f, const char *id) {
  return fx_find(f, "tool_use_completed", id, 0);
}

static const char *completed_content(const fx_t *f, const char *id) {
  return jstr(fx_event(f, completed(f, id)), "content");
}

/* The most calls executing at once, from the event log: started .. its
 * completed (calls completed without a start never ran). */
static int max_overlap(const fx_t *f) {
  size_t i;
  json_t *e;
  int cur = 0, max = 0;

  json_array_foreach(f->events, i, e) {
    if (strcmp(jstr(e, "type"), "tool_use_started") == 0) {
      cur++;
      if (cur > max) {
        max = cur;
      }
    } else if (strcmp(jstr(e, "type"), "tool_use_completed") == 0) {
      long s = started(f, jstr(e, "call_id"));

      if (s >= 0 && s < (long)i) {
        cur--;
      }
    }
  }
  return max;
}

/* The n-th content_block_completed of turn `turn` with block index `index`. */
static long block_completed(const fx_t *f, int turn, int index) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    if (strcmp(jstr(e, "type"), "content_block_completed") == 0 &&
        json_integer_value(json_object_get(e, "turn")) == turn &&
        json_integer_value(json_object_get(e, "index")) == index) {
      return (long)i;
    }
  }
  return -1;
}

/* True if some tool result (tool_use_completed, tool_progress) contains
 * `needle`. */
static bool results_mention(const fx_t *f, const char *needle) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    const char *t = jstr(e, "type");

    if ((strcmp(t, "tool_use_completed") == 0 ||
         strcmp(t, "tool_progress") == 0) &&
        jstr(e, "content") != NULL && strstr(jstr(e, "content"), needle) != NULL) {
      return true;
    }
  }
  return false;
}

/* AL_TEST_DUMP=1: the event log on stderr, one compact line per event. */
static void maybe_dump(const fx_t *f) {
  size_t i;
  json_t *e;

  if (getenv("AL_TEST_DUMP") == NULL) {
    return;
  }
  json_array_foreach(f->events, i, e) {
    char *s = json_dumps(e, JSON_COMPACT);

    fprintf(stderr, "%3zu %.300s\n", i, s);
    free(s);
  }
}

/* ---- the in-process test tool --------------------------------------------------
 *
 * Input: {"ms": N, "out": "...", "err": bool, "progress": ["..", ..]}.
 * ms (default 1) is the delay of the tool's completion timer; 0: run
 * completes the call itself, before it returns; -1: the call never
 * completes on its own (only its cancel ends it). out (default
 * "out-<id>") is the result, err its is_error. progress chunks are posted
 * from inside run. With tt.barrier = N the completion timers of the calls
 * start only once N calls are waiting. */

#define TT_MAX 16

typedef struct tt_s tt_t;

typedef struct {
  uv_timer_t timer;
  al_tool_ctx_t *ctx; /* NULL once completed */
  tt_t *tt;
  int64_t ms;
  bool err;
  bool closing;
  char out[256];
} tcall_t;

struct tt_s {
  uv_loop_t *loop;
  int runs;
  int cancels;
  int completes;
  int late;             /* completions of cancelled calls (dropped) */
  int late_progress_rc; /* al_tool_ctx_progress after the cancel */
  int cancels_before_run; /* cancel callbacks for a call run never saw */
  int progress_refused;   /* al_tool_ctx_progress != 0 inside run */
  bool late_cancelled;  /* al_tool_ctx_cancelled at that point */
  bool cancel_completes; /* the cancel callback completes at once */
  int barrier;
  tcall_t *waiting[TT_MAX];
  int nwaiting;
  char last_input[512];
  char last_id[64];
  char last_name[64];
};

static const char tt_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"ms\":{\"type\":\"integer\"},\"out\":{\"type\":\"string\"},"
    "\"err\":{\"type\":\"boolean\"},\"progress\":{\"type\":\"array\"}}}";

static void tt_init(tt_t *tt, fx_t *f) {
  memset(tt, 0, sizeof(*tt));
  tt->loop = &f->loop;
  tt->late_progress_rc = 1;
}

static void tc_closed(uv_handle_t *h) { free(h->data); }

static void tc_complete(tcall_t *c) {
  tt_t *tt = c->tt;

  if (c->ctx != NULL) {
    if (al_tool_ctx_cancelled(c->ctx)) {
      tt->late++;
      tt->late_cancelled = true;
      tt->late_progress_rc = al_tool_ctx_progress(c->ctx, "late", 4);
    }
    tt->completes++;
    al_tool_ctx_complete(c->ctx, c->err, c->out, strlen(c->out));
    c->ctx = NULL;
  }
  if (!c->closing) {
    c->closing = true;
    uv_close((uv_handle_t *)&c->timer, tc_closed);
  }
}

static void tc_fire(uv_timer_t *t) { tc_complete(t->data); }

static void tt_run(al_tool_ctx_t *ctx, void *data) {
  tt_t *tt = data;
  json_t *in = json_loads(al_tool_ctx_input(ctx), 0, NULL);
  tcall_t *c = calloc(1, sizeof(*c));
  const json_t *v;
  size_t i;
  int rc;

  ASSERT_NOT_NULL(in);
  ASSERT_NOT_NULL(c);
  tt->runs++;
  snprintf(tt->last_input, sizeof(tt->last_input), "%s", al_tool_ctx_input(ctx));
  snprintf(tt->last_id, sizeof(tt->last_id), "%s", al_tool_ctx_id(ctx));
  snprintf(tt->last_name, sizeof(tt->last_name), "%s", al_tool_ctx_name(ctx));
  c->ctx = ctx;
  c->tt = tt;
  v = json_object_get(in, "ms");
  c->ms = v != NULL ? (int64_t)json_integer_value(v) : 1;
  c->err = json_is_true(json_object_get(in, "err"));
  if (jstr(in, "out") != NULL) {
    snprintf(c->out, sizeof(c->out), "%s", jstr(in, "out"));
  } else {
    snprintf(c->out, sizeof(c->out), "out-%s", al_tool_ctx_id(ctx));
  }
  /* The call's state exists before anything can reach the cancel callback
   * (a subscriber of tool_progress may cancel or close). */
  al_tool_ctx_set_data(ctx, c);
  ASSERT_EQ(uv_timer_init(tt->loop, &c->timer), 0);
  c->timer.data = c;
  if (json_is_true(json_object_get(in, "bin"))) {
    /* bytes that are not UTF-8 */
    snprintf(c->out, sizeof(c->out), "bin:\xff\xfe!");
    ASSERT_EQ(al_tool_ctx_progress(ctx, "p\xff", 2), 0);
  }
  json_array_foreach(json_object_get(in, "progress"), i, v) {
    if (c->ctx == NULL) {
      break; /* completed by the cancel callback: ctx is gone */
    }
    rc = al_tool_ctx_progress(ctx, json_string_value(v),
                              strlen(json_string_value(v)));
    if (rc != 0) {
      ASSERT_EQ(rc, AL_ECANCELED);
      tt->progress_refused++;
    }
  }
  json_decref(in);
  if (c->ctx == NULL) {
    return; /* the cancel callback completed it (and closes the timer) */
  }
  if (c->ms < 0) {
    return; /* waits for its cancel */
  }
  if (c->ms == 0) {
    tc_complete(c); /* inside run */
    return;
  }
  if (tt->barrier > 0) {
    ASSERT(tt->nwaiting < TT_MAX);
    tt->waiting[tt->nwaiting++] = c;
    if (tt->nwaiting == tt->barrier) {
      for (i = 0; i < (size_t)tt->nwaiting; i++) {
        uv_timer_start(&tt->waiting[i]->timer, tc_fire,
                       (uint64_t)tt->waiting[i]->ms, 0);
      }
      tt->nwaiting = 0;
      tt->barrier = 0; /* later calls complete on their own timers */
    }
    return;
  }
  uv_timer_start(&c->timer, tc_fire, (uint64_t)c->ms, 0);
}

/* Stops the work: a call whose timer is not running (waiting for a
 * barrier or forever), or any call with cancel_completes, completes now;
 * otherwise the timer completes it later ("late", dropped). */
static void tt_cancel(al_tool_ctx_t *ctx, void *data) {
  tt_t *tt = data;
  tcall_t *c = al_tool_ctx_get_data(ctx);
  int i;

  tt->cancels++;
  ASSERT(al_tool_ctx_cancelled(ctx));
  if (c == NULL) {
    /* run was never entered for this call: nothing to stop. Complete it
     * as the API asks of a cancel. */
    tt->cancels_before_run++;
    al_tool_ctx_complete(ctx, true, "never ran", 9);
    return;
  }
  for (i = 0; i < tt->nwaiting; i++) {
    if (tt->waiting[i] == c) {
      tt->waiting[i] = tt->waiting[--tt->nwaiting];
      break;
    }
  }
  if (tt->cancel_completes || !uv_is_active((uv_handle_t *)&c->timer)) {
    uv_timer_stop(&c->timer);
    tc_complete(c);
  }
}

static void tt_def(al_tool_def_t *d, const char *name, bool safe,
                   al_tool_category_t cat, tt_t *tt) {
  memset(d, 0, sizeof(*d));
  d->name = name;
  d->description = "A test tool.";
  d->input_schema = tt_schema;
  d->category = cat;
  d->concurrency_safe = safe;
  d->run = tt_run;
  d->cancel = tt_cancel;
  d->data = tt;
}

static void tt_add(fx_t *f, const char *name, bool safe,
                   al_tool_category_t cat, tt_t *tt) {
  al_tool_def_t d;

  tt_def(&d, name, safe, cat, tt);
  ASSERT_EQ(al_agent_add_tool(f->agent, &d), 0);
}

/* ---- 1. tools start while the reply streams ------------------------------------ */

TEST_IMPL(agent_exec_tool_starts_while_streaming) {
  fx_t f;
  tt_t tt;
  long s, last, first_delta;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: s1, name: quick, input: {ms: 1}, pieces: 3}\n"
              "        - text: 'still talking while the tool already runs'\n"
              "          chunks: 6\n"
              "          delay_ms: 5\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "quick", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  s = started(&f, "s1");
  last = block_completed(&f, 1, 1);
  first_delta = fx_find(&f, "text_delta", NULL, 0);
  ASSERT(s >= 0 && last >= 0 && first_delta >= 0);
  /* The call starts once its own block is complete ... */
  ASSERT(block_completed(&f, 1, 0) < s);
  /* ... and before the reply's last block is (the text still streams). */
  ASSERT(s < last);
  ASSERT(s < first_delta);
  ASSERT_EQ(tt.runs, 1);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "s1"), "content"), "out-s1");
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 2. parallel safe tools overlap ------------------------------------------- */

TEST_IMPL(agent_exec_parallel_safe_overlap) {
  fx_t f;
  tt_t tt;
  long s1, s2, c1, c2;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: p1, name: par_a, input: {ms: 3}}\n"
              "        - tool_use: {id: p2, name: par_b, input: {ms: 3}}\n"
              "  - reply: {content: [{text: 'both done'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt.barrier = 2; /* neither completes before both run */
  tt_add(&f, "par_a", true, AL_TOOL_READ, &tt);
  tt_add(&f, "par_b", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  s1 = started(&f, "p1");
  s2 = started(&f, "p2");
  c1 = completed(&f, "p1");
  c2 = completed(&f, "p2");
  ASSERT(s1 >= 0 && s2 >= 0 && c1 >= 0 && c2 >= 0);
  ASSERT(s1 < c1 && s1 < c2 && s2 < c1 && s2 < c2);
  ASSERT_EQ(max_overlap(&f), 2);
  ASSERT_EQ(tt.runs, 2);
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 3. unsafe tools are exclusive -------------------------------------------- */

TEST_IMPL(agent_exec_unsafe_exclusive) {
  fx_t f;
  tt_t tt;
  long sa, ca, su, cu, sb, cb, sc;
  long i;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: a1, name: safe_t, input: {ms: 5}}\n"
              "        - tool_use: {id: u1, name: unsafe_t, input: {ms: 5}}\n"
              "        - tool_use: {id: b1, name: safe_t, input: {ms: 2}}\n"
              "        - tool_use: {id: c1, name: safe_t, input: {ms: 1}}\n"
              "  - reply: {content: [{text: 'all done'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  tt_add(&f, "unsafe_t", false, AL_TOOL_WRITE, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  sa = started(&f, "a1");
  ca = completed(&f, "a1");
  su = started(&f, "u1");
  cu = completed(&f, "u1");
  sb = started(&f, "b1");
  cb = completed(&f, "b1");
  sc = started(&f, "c1");
  ASSERT(sa >= 0 && ca > sa && su >= 0 && cu > su && sb >= 0 && cb > sb &&
         sc >= 0);
  ASSERT(su > ca); /* U waits for A */
  ASSERT(sb > cu); /* B waits for U ... */
  ASSERT(sc > cu); /* ... and so does C, behind B */
  for (i = su + 1; i < cu; i++) {
    ASSERT(strcmp(jstr(fx_event(&f, i), "type"), "tool_use_started") != 0);
  }
  ASSERT_EQ(tt.runs, 4);
  /* B and C are safe: they run together after U. */
  ASSERT(sc < cb);
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 4. arrival order and the concurrency limit -------------------------------- */

static const char four_safe[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: q1, name: safe_t, input: {ms: 8}}\n"
    "        - tool_use: {id: q2, name: safe_t, input: {ms: 3}}\n"
    "        - tool_use: {id: q3, name: safe_t, input: {ms: 5}}\n"
    "        - tool_use: {id: q4, name: safe_t, input: {ms: 1}}\n"
    "  - reply: {content: [{text: 'four done'}]}\n";

static void assert_arrival_starts(const fx_t *f) {
  long s1 = started(f, "q1"), s2 = started(f, "q2");
  long s3 = started(f, "q3"), s4 = started(f, "q4");

  ASSERT(s1 >= 0 && s1 < s2 && s2 < s3 && s3 < s4);
}

TEST_IMPL(agent_exec_max_concurrency_option) {
  fx_t f;
  tt_t tt;
  long first_done;

  fx_init(&f, four_safe);
  f.opts.max_tool_concurrency = 2;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 4);
  ASSERT_EQ(max_overlap(&f), 2);
  assert_arrival_starts(&f);
  /* q3 waited for a free slot. */
  first_done = fx_find(&f, "tool_use_completed", NULL, 0);
  ASSERT(started(&f, "q2") < first_done && first_done < started(&f, "q3"));
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* AGENTLOOP_MAX_TOOL_CONCURRENCY applies when the option is 0; a set option
 * wins over it. */
TEST_IMPL(agent_exec_max_concurrency_env) {
  fx_t f;
  tt_t tt;

  ASSERT_EQ(setenv("AGENTLOOP_MAX_TOOL_CONCURRENCY", "1", 1), 0);
  fx_init(&f, four_safe);
  f.opts.max_tool_concurrency = 0;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 4);
  ASSERT_EQ(max_overlap(&f), 1);
  assert_arrival_starts(&f);
  ASSERT(completed(&f, "q1") < started(&f, "q2"));
  ASSERT(completed(&f, "q3") < started(&f, "q4"));
  fx_assert_valid(&f);
  fx_finish(&f);

  /* Not a number: the default (10), so all four run together. */
  ASSERT_EQ(setenv("AGENTLOOP_MAX_TOOL_CONCURRENCY", "two", 1), 0);
  fx_init(&f, four_safe);
  fx_start(&f);
  tt_init(&tt, &f);
  tt.barrier = 4;
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(max_overlap(&f), 4);
  maybe_dump(&f);
  fx_finish(&f);

  /* The option beats the environment. */
  ASSERT_EQ(setenv("AGENTLOOP_MAX_TOOL_CONCURRENCY", "1", 1), 0);
  fx_init(&f, four_safe);
  f.opts.max_tool_concurrency = 3;
  fx_start(&f);
  tt_init(&tt, &f);
  tt.barrier = 3;
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(max_overlap(&f), 3);
  assert_arrival_starts(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 5. completion order vs result order ---------------------------------------- */

TEST_IMPL(agent_exec_completion_order_vs_result_order) {
  fx_t f;
  tt_t tt;
  const json_t *content;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: o1, name: safe_t, input: {ms: 30}}\n"
              "        - tool_use: {id: o2, name: safe_t, input: {ms: 1}}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt.barrier = 2; /* both timers start together: o2 finishes first */
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  /* Events: completion order. */
  ASSERT(completed(&f, "o2") >= 0 && completed(&f, "o2") < completed(&f, "o1"));
  ASSERT(started(&f, "o1") < started(&f, "o2"));
  /* The next request: tool_use order. */
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  content = json_object_get(fx_last_message(&f, 1), "content");
  ASSERT_EQ(json_array_size(content), 2);
  ASSERT_STR_EQ(jstr(json_array_get(content, 0), "tool_use_id"), "o1");
  ASSERT_STR_EQ(jstr(json_array_get(content, 0), "content"), "out-o1");
  ASSERT_STR_EQ(jstr(json_array_get(content, 1), "tool_use_id"), "o2");
  ASSERT_STR_EQ(jstr(json_array_get(content, 1), "content"), "out-o2");
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 6. sibling error ------------------------------------------------------------ */

static const char sibling_text[] =
    "Tool execution was aborted: a sibling tool call failed";

TEST_IMPL(agent_exec_sibling_error) {
  fx_t f;
  tt_t tt;
  const char *ids[] = {"s1", "u2", "s2"};
  long ab;
  size_t i;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: u1, name: unsafe_t, input: {ms: 1, err: true, out: 'U failed'}}\n"
              "        - tool_use: {id: s1, name: safe_t, input: {ms: 1}}\n"
              "        - tool_use: {id: u2, name: unsafe_t, input: {ms: 1}}\n"
              "        - text: 'more calls after a pause'\n"
              "          chunks: 4\n"
              "          delay_ms: 5\n"
              "        - tool_use: {id: s2, name: safe_t, input: {ms: 1}}\n"
              "  - reply: {content: [{text: 'I see the failure.'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  tt_add(&f, "unsafe_t", false, AL_TOOL_WRITE, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 1); /* only u1 ran */
  ASSERT_STR_EQ(completed_content(&f, "u1"), "U failed");
  ASSERT(jtrue(fx_event(&f, completed(&f, "u1")), "is_error"));
  ASSERT_EQ(fx_count(&f, "tool_execution_aborted"), 1);
  ab = fx_find(&f, "tool_execution_aborted", NULL, 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, ab), "reason"), "sibling_error");
  ASSERT(started(&f, "u1") < ab);
  /* The failure comes first, then the notice it caused. */
  ASSERT(completed(&f, "u1") < ab);
  for (i = 0; i < 3; i++) {
    const json_t *c = fx_event(&f, completed(&f, ids[i]));
    const json_t *r;

    ASSERT_NOT_NULL(c);
    ASSERT(completed(&f, ids[i]) > ab);
    ASSERT_EQ(started(&f, ids[i]), -1);
    ASSERT_STR_EQ(jstr(c, "content"), sibling_text);
    ASSERT_STR_EQ(jstr(c, "reason"), "sibling_error");
    ASSERT(jtrue(c, "is_error"));
    r = fx_tool_result(&f, 1, ids[i]);
    ASSERT_NOT_NULL(r);
    ASSERT_STR_EQ(jstr(r, "content"), sibling_text);
    ASSERT(jtrue(r, "is_error"));
  }
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "u1"), "content"), "U failed");
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* A failing safe call aborts nothing. */
TEST_IMPL(agent_exec_safe_error_aborts_nothing) {
  fx_t f;
  tt_t tt;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: e1, name: safe_t, input: {ms: 1, err: true, out: 'read failed'}}\n"
              "        - tool_use: {id: e2, name: unsafe_t, input: {ms: 1}}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  tt_add(&f, "unsafe_t", false, AL_TOOL_WRITE, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 2);
  ASSERT_EQ(fx_count(&f, "tool_execution_aborted"), 0);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "e2"), "content"), "out-e2");
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 7. unknown tools, invalid arguments ---------------------------------------- */

static const char path_schema[] =
    "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},"
    "\"required\":[\"path\"]}";

static void add_path_tool(fx_t *f, tt_t *tt) {
  al_tool_def_t d;

  tt_def(&d, "needs_path", true, AL_TOOL_READ, tt);
  d.input_schema = path_schema;
  ASSERT_EQ(al_agent_add_tool(f->agent, &d), 0);
}

static void assert_error_result(const fx_t *f, size_t req, const char *id,
                                const char *needle) {
  const json_t *r = fx_tool_result(f, req, id);
  const json_t *c = fx_event(f, completed(f, id));

  ASSERT_NOT_NULL(r);
  ASSERT_NOT_NULL(c);
  ASSERT(jtrue(r, "is_error"));
  ASSERT(jtrue(c, "is_error"));
  if (strstr(jstr(r, "content"), needle) == NULL) {
    AL_TEST_FAIL("result of %s: '%s' lacks '%s'", id, jstr(r, "content"), needle);
  }
  ASSERT_STR_EQ(jstr(c, "content"), jstr(r, "content"));
}

TEST_IMPL(agent_exec_unknown_tool_and_bad_args) {
  fx_t f;
  tt_t tt;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: k1, name: no_such_tool, input: {a: 1}}\n"
              "        - tool_use: {id: k2, name: needs_path, input: {other: x}}\n"
              "        - tool_use: {id: k3, name: needs_path, input: {path: 5}}\n"
              "        - tool_use: {id: k4, name: needs_path, input: {path: fine}}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  add_path_tool(&f, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "k1"), "content"),
                "Error: Unknown tool 'no_such_tool'");
  assert_error_result(&f, 1, "k1", "Unknown tool 'no_such_tool'");
  assert_error_result(&f, 1, "k2", "missing required property 'path'");
  assert_error_result(&f, 1, "k3", "property 'path' must be of type string");
  ASSERT_EQ(started(&f, "k1"), -1);
  ASSERT_EQ(started(&f, "k2"), -1);
  ASSERT_EQ(started(&f, "k3"), -1);
  /* Only the good call ran. */
  ASSERT_EQ(tt.runs, 1);
  ASSERT_STR_EQ(tt.last_id, "k4");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "k4"), "content"), "out-k4");
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* input_json that is not JSON: an error result that says so; the tool never
 * runs, the loop goes on and the next request is valid. */
TEST_IMPL(agent_exec_bad_json_input) {
  fx_t f;
  tt_t tt;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: j1, name: needs_path, input_json: '{\"path\": \"a\", '}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  add_path_tool(&f, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  assert_error_result(&f, 1, "j1", "not valid JSON");
  ASSERT_EQ(tt.runs, 0);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 8. the in-process tool API -------------------------------------------------- */

TEST_IMPL(agent_exec_inproc_progress_and_input) {
  fx_t f;
  tt_t tt;
  long s, p0, p1, c;
  json_t *got, *want;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: g1, name: prog, input: {ms: 3, out: 'result text', progress: ['chunk one', 'chunk two']}}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "prog", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 1);
  ASSERT_EQ(tt.completes, 1);
  ASSERT_EQ(tt.cancels, 0);
  /* ctx accessors */
  ASSERT_STR_EQ(tt.last_id, "g1");
  ASSERT_STR_EQ(tt.last_name, "prog");
  got = json_loads(tt.last_input, 0, NULL);
  want = json_loads("{\"ms\":3,\"out\":\"result text\","
                    "\"progress\":[\"chunk one\",\"chunk two\"]}", 0, NULL);
  ASSERT(got != NULL && want != NULL && json_equal(got, want));
  ASSERT_NULL(strstr(tt.last_input, "\": ")); /* compact */
  json_decref(got);
  json_decref(want);
  /* progress events, in order, between started and completed */
  ASSERT_EQ(fx_count(&f, "tool_progress"), 2);
  s = started(&f, "g1");
  p0 = fx_find(&f, "tool_progress", "g1", 0);
  p1 = fx_find(&f, "tool_progress", "g1", 1);
  c = completed(&f, "g1");
  ASSERT(s >= 0 && s < p0 && p0 < p1 && p1 < c);
  ASSERT_STR_EQ(jstr(fx_event(&f, p0), "content"), "chunk one");
  ASSERT_STR_EQ(jstr(fx_event(&f, p1), "content"), "chunk two");
  ASSERT_STR_EQ(jstr(fx_event(&f, p0), "name"), "prog");
  /* the asynchronous completion is the result */
  ASSERT_STR_EQ(completed_content(&f, "g1"), "result text");
  ASSERT(!jtrue(fx_event(&f, c), "is_error"));
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "g1"), "content"), "result text");
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* def.timeout_ms expires: the call gets "timed out", the cancel callback
 * runs, and the tool's own completion, later, is dropped. */
TEST_IMPL(agent_exec_inproc_timeout) {
  fx_t f;
  tt_t tt;
  al_tool_def_t d;
  const json_t *r;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: t1, name: slow, input: {ms: 60, out: 'LATE RESULT'}}\n"
              "  - reply: {content: [{text: 'it timed out, said slowly', chunks: 10, delay_ms: 10}]}\n"
              "  - reply: {content: [{text: 'second run'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_def(&d, "slow", true, AL_TOOL_READ, &tt);
  d.timeout_ms = 10;
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), 0);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 1);
  ASSERT_EQ(tt.cancels, 1);
  r = fx_tool_result(&f, 1, "t1");
  ASSERT_NOT_NULL(r);
  ASSERT(jtrue(r, "is_error"));
  ASSERT_NOT_NULL(strstr(jstr(r, "content"), "timed out"));
  ASSERT_NOT_NULL(strstr(completed_content(&f, "t1"), "timed out"));
  /* The late completion comes (the cancel left it to the timer) and is
   * dropped. */
  while (tt.late == 0) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0);
  }
  ASSERT(tt.late_cancelled);
  ASSERT_EQ(tt.late_progress_rc, AL_ECANCELED);
  ASSERT_EQ(fx_count(&f, "tool_use_completed"), 1);
  ASSERT_EQ(fx_count(&f, "tool_progress"), 0);
  ASSERT(!results_mention(&f, "LATE RESULT"));
  /* The agent is fine afterwards. */
  fx_run(&f, "again");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  /* The history keeps the timeout result. */
  ASSERT_NOT_NULL(strstr(jstr(fx_tool_result(&f, 2, "t1"), "content"), "timed out"));
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* Bytes that are not UTF-8, in progress and in the result: sanitized with
 * U+FFFD in the events and in the request. */
TEST_IMPL(agent_exec_inproc_binary_output) {
  fx_t f;
  tt_t tt;
  const char *res;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: x1, name: prog, input: {bin: true}}}]}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "prog", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_STR_EQ(jstr(fx_event(&f, fx_find(&f, "tool_progress", "x1", 0)), "content"),
                "p\xef\xbf\xbd");
  res = jstr(fx_tool_result(&f, 1, "x1"), "content");
  ASSERT_NOT_NULL(res);
  ASSERT(strncmp(res, "bin:\xef\xbf\xbd", 7) == 0);
  ASSERT(res[strlen(res) - 1] == '!');
  ASSERT_STR_EQ(completed_content(&f, "x1"), res);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* A timeout with no cancel callback: the tool completes in its own time,
 * and that completion is dropped. */
TEST_IMPL(agent_exec_inproc_timeout_no_cancel_cb) {
  fx_t f;
  tt_t tt;
  al_tool_def_t d;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: t3, name: slow, input: {ms: 30, out: 'LATE RESULT'}}\n"
              "  - reply: {content: [{text: 'timed out', chunks: 10, delay_ms: 10}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_def(&d, "slow", false, AL_TOOL_WRITE, &tt);
  d.timeout_ms = 5;
  d.cancel = NULL;
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), 0);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  while (tt.late == 0) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0);
  }
  ASSERT_EQ(tt.cancels, 0);
  ASSERT_EQ(tt.late_progress_rc, AL_ECANCELED);
  ASSERT_NOT_NULL(strstr(jstr(fx_tool_result(&f, 1, "t3"), "content"), "timed out"));
  ASSERT_EQ(fx_count(&f, "tool_use_completed"), 1);
  ASSERT(!results_mention(&f, "LATE RESULT"));
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* The same with a cancel callback that completes at once (inside the
 * cancel): still "timed out", the completion is dropped. */
TEST_IMPL(agent_exec_inproc_timeout_cancel_completes) {
  fx_t f;
  tt_t tt;
  al_tool_def_t d;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: t2, name: slow, input: {ms: -1, out: 'LATE RESULT'}}\n"
              "  - reply: {content: [{text: 'it timed out'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt.cancel_completes = true;
  tt_def(&d, "slow", false, AL_TOOL_WRITE, &tt);
  d.timeout_ms = 5;
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), 0);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.cancels, 1);
  ASSERT_EQ(tt.late, 1);
  ASSERT_EQ(tt.late_progress_rc, AL_ECANCELED);
  ASSERT_NOT_NULL(strstr(jstr(fx_tool_result(&f, 1, "t2"), "content"), "timed out"));
  ASSERT(!results_mention(&f, "LATE RESULT"));
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 9. permissions --------------------------------------------------------------- */

#define NO_HOOK ((al_permission_t)-1)

typedef struct {
  al_permission_mode_t mode;
  al_tool_category_t cat;
  const char *const *allow;
  const char *const *deny;
  al_permission_t hook; /* the hook's answer; NO_HOOK: no hook */
  bool expect_run;
  const char *why; /* substring of the denial */
  int hook_calls;  /* expected */
} perm_case_t;

typedef struct {
  int calls;
  al_permission_t answer;
  char tool[64];
  char input[128];
  al_tool_category_t cat;
} perm_hook_t;

static al_permission_t perm_hook(al_agent_t *agent, const char *tool,
                                 const char *input, al_tool_category_t cat,
                                 void *data) {
  perm_hook_t *h = data;

  ASSERT_NOT_NULL(agent);
  h->calls++;
  snprintf(h->tool, sizeof(h->tool), "%s", tool);
  snprintf(h->input, sizeof(h->input), "%s", input);
  h->cat = cat;
  return h->answer;
}

static void perm_case(const perm_case_t *pc, int line) {
  fx_t f;
  tt_t tt;
  perm_hook_t h;
  const json_t *r;

  fprintf(stderr, "permission case at line %d\n", line);
  memset(&h, 0, sizeof(h));
  h.answer = pc->hook;
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: pc1, name: ptool, input: {ms: 1}}}]}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  f.opts.permission_mode = pc->mode;
  f.opts.allow_tools = pc->allow;
  f.opts.deny_tools = pc->deny;
  if (pc->hook != NO_HOOK) {
    f.opts.permission = perm_hook;
    f.opts.permission_data = &h;
  }
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "ptool", false, pc->cat, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "approval_required"), 0);
  fx_assert_valid(&f);
  r = fx_tool_result(&f, 1, "pc1");
  ASSERT_NOT_NULL(r);
  if (pc->expect_run) {
    ASSERT_EQ(tt.runs, 1);
    ASSERT(!jtrue(r, "is_error"));
    ASSERT_STR_EQ(jstr(r, "content"), "out-pc1");
  } else {
    ASSERT_EQ(tt.runs, 0);
    ASSERT_EQ(started(&f, "pc1"), -1);
    ASSERT(jtrue(r, "is_error"));
    if (strncmp(jstr(r, "content"), "Error: permission denied for tool 'ptool'",
                41) != 0 ||
        strstr(jstr(r, "content"), pc->why) == NULL) {
      AL_TEST_FAIL("line %d: denial '%s' lacks '%s'", line, jstr(r, "content"),
                   pc->why);
    }
  }
  ASSERT_EQ(h.calls, pc->hook_calls);
  if (h.calls > 0) {
    ASSERT_STR_EQ(h.tool, "ptool");
    ASSERT_STR_EQ(h.input, "{\"ms\":1}");
    ASSERT_EQ(h.cat, pc->cat);
  }
  maybe_dump(&f);
  fx_finish(&f);
}

static const char *const only_ptool[] = {"ptool", NULL};
static const char *const other_tool[] = {"bash", NULL};

#define HEADLESS AL_PERMISSION_MODE_HEADLESS
#define JOB AL_PERMISSION_MODE_JOB
#define INTERACTIVE AL_PERMISSION_MODE_INTERACTIVE
#define PERM(...)                                  \
  do {                                             \
    perm_case_t pc_ = {__VA_ARGS__};               \
    perm_case(&pc_, __LINE__);                     \
  } while (0)

TEST_IMPL(agent_exec_perm_headless) {
  /* mode, category, allow, deny, hook, runs, why, hook calls */
  PERM(HEADLESS, AL_TOOL_ADMIN, NULL, NULL, NO_HOOK, false,
       "admin tools must be allowed explicitly", 0);
  PERM(HEADLESS, AL_TOOL_ADMIN, other_tool, NULL, NO_HOOK, false,
       "admin tools must be allowed explicitly", 0);
  PERM(HEADLESS, AL_TOOL_ADMIN, only_ptool, NULL, NO_HOOK, true, NULL, 0);
  PERM(HEADLESS, AL_TOOL_WRITE, NULL, NULL, NO_HOOK, true, NULL, 0);
  PERM(HEADLESS, AL_TOOL_READ, NULL, NULL, NO_HOOK, true, NULL, 0);
  return 0;
}

TEST_IMPL(agent_exec_perm_deny_list_wins) {
  PERM(HEADLESS, AL_TOOL_READ, NULL, only_ptool, NO_HOOK, false, "deny list", 0);
  PERM(INTERACTIVE, AL_TOOL_READ, NULL, only_ptool, NO_HOOK, false, "deny list", 0);
  PERM(JOB, AL_TOOL_READ, NULL, only_ptool, NO_HOOK, false, "deny list", 0);
  PERM(HEADLESS, AL_TOOL_ADMIN, only_ptool, only_ptool, NO_HOOK, false,
       "deny list", 0);
  /* The lists come before the hook: it is not even asked. */
  PERM(HEADLESS, AL_TOOL_READ, NULL, only_ptool, AL_PERMISSION_ALLOW, false,
       "deny list", 0);
  PERM(HEADLESS, AL_TOOL_READ, NULL, other_tool, NO_HOOK, true, NULL, 0);
  return 0;
}

TEST_IMPL(agent_exec_perm_job_mode) {
  PERM(JOB, AL_TOOL_WRITE, NULL, NULL, NO_HOOK, false,
       "write tools must be listed", 0);
  PERM(JOB, AL_TOOL_WRITE, other_tool, NULL, NO_HOOK, false,
       "write tools must be listed", 0);
  PERM(JOB, AL_TOOL_WRITE, only_ptool, NULL, NO_HOOK, true, NULL, 0);
  PERM(JOB, AL_TOOL_READ, NULL, NULL, NO_HOOK, true, NULL, 0);
  PERM(JOB, AL_TOOL_ADMIN, NULL, NULL, NO_HOOK, false, "admin tools", 0);
  PERM(JOB, AL_TOOL_ADMIN, only_ptool, NULL, NO_HOOK, true, NULL, 0);
  return 0;
}

TEST_IMPL(agent_exec_perm_hook) {
  PERM(HEADLESS, AL_TOOL_ADMIN, NULL, NULL, AL_PERMISSION_ALLOW, true, NULL, 1);
  PERM(JOB, AL_TOOL_WRITE, NULL, NULL, AL_PERMISSION_ALLOW, true, NULL, 1);
  PERM(HEADLESS, AL_TOOL_READ, NULL, NULL, AL_PERMISSION_DENY, false,
       "the permission policy refused it", 1);
  PERM(INTERACTIVE, AL_TOOL_ADMIN, NULL, NULL, AL_PERMISSION_DENY, false,
       "the permission policy refused it", 1);
  PERM(HEADLESS, AL_TOOL_READ, NULL, NULL, AL_PERMISSION_ASK, false,
       "cannot ask", 1);
  PERM(JOB, AL_TOOL_ADMIN, NULL, NULL, AL_PERMISSION_ASK, false, "cannot ask", 1);
  /* DEFAULT: the mode decides. */
  PERM(HEADLESS, AL_TOOL_ADMIN, NULL, NULL, AL_PERMISSION_DEFAULT, false,
       "admin tools must be allowed explicitly", 1);
  PERM(HEADLESS, AL_TOOL_WRITE, NULL, NULL, AL_PERMISSION_DEFAULT, true, NULL, 1);
  /* An allow listing wins over the hook, which is not asked. */
  PERM(HEADLESS, AL_TOOL_READ, only_ptool, NULL, AL_PERMISSION_DENY, true, NULL, 0);
  return 0;
}

/* ---- 10. approvals ------------------------------------------------------------------ */

typedef struct {
  uv_timer_t timer;
  fx_t *f;
  al_approval_t decisions[4];
  int asked;
  int answered;
  char req[4][64];
  int rc[4];
  uint64_t delay_ms; /* how long the user takes to answer (default 0) */
} approver_t;

static void approver_fire(uv_timer_t *t) {
  approver_t *ap = t->data;
  int i = ap->answered;

  ASSERT(i < ap->asked);
  if (ap->f->agent == NULL) {
    return; /* closed meanwhile */
  }
  ap->rc[i] = al_agent_approve(ap->f->agent, ap->req[i], ap->decisions[i]);
  ap->answered++;
  if (ap->answered < ap->asked) {
    uv_timer_start(&ap->timer, approver_fire, 0, 0);
  }
}

/* The user answers on a later loop iteration, like a UI would. */
static void approver_on_event(approver_t *ap, const al_event_t *ev,
                              const json_t *j) {
  if (ev->type != AL_EVENT_APPROVAL_REQUIRED) {
    return;
  }
  ASSERT(ap->asked < 4);
  snprintf(ap->req[ap->asked], sizeof(ap->req[0]), "%s", jstr(j, "request"));
  ap->asked++;
  /* The wait counts from now, not from the loop's cached time (which can
   * predate the approval_required stamp by a few ms). */
  uv_update_time(ap->timer.loop);
  uv_timer_start(&ap->timer, approver_fire, ap->delay_ms, 0);
}

static void approver_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  approver_on_event(f->user, ev, j);
}

static void approver_init(approver_t *ap, fx_t *f) {
  memset(ap, 0, sizeof(*ap));
  ap->f = f;
  ASSERT_EQ(uv_timer_init(&f->loop, &ap->timer), 0);
  ap->timer.data = ap;
  f->hook = approver_hook;
  f->user = ap;
}

static const char deploy_twice[] =
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: d1, name: deploy, input: {ms: 1}}}]}\n"
    "  - reply: {content: [{tool_use: {id: d2, name: deploy, input: {ms: 1}}}]}\n"
    "  - reply: {content: [{text: 'deployed'}]}\n"
    "  - reply: {content: [{tool_use: {id: d3, name: deploy, input: {ms: 1}}}]}\n"
    "  - reply: {content: [{text: 'deployed again'}]}\n";

TEST_IMPL(agent_exec_approval_allow_deny) {
  fx_t f;
  tt_t tt;
  approver_t ap;
  const json_t *req, *resp;
  long ir, ip, is;
  json_t *in;

  fx_init(&f, deploy_twice);
  f.opts.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "deploy", false, AL_TOOL_ADMIN, &tt);
  approver_init(&ap, &f);
  ap.decisions[0] = AL_APPROVE_ALLOW;
  ap.decisions[1] = AL_APPROVE_DENY;
  fx_run(&f, "deploy twice");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  /* ALLOW is for this call only: the next one asks again. */
  ASSERT_EQ(fx_count(&f, "approval_required"), 2);
  ASSERT_EQ(ap.asked, 2);
  ASSERT_EQ(ap.answered, 2);
  ASSERT_EQ(ap.rc[0], 0);
  ASSERT_EQ(ap.rc[1], 0);
  /* approval_required's fields */
  ir = fx_find(&f, "approval_required", "d1", 0);
  req = fx_event(&f, ir);
  ASSERT_NOT_NULL(req);
  ASSERT_STR_EQ(jstr(req, "request"), ap.req[0]);
  ASSERT(strlen(ap.req[0]) > 0);
  ASSERT_STR_EQ(jstr(req, "call_id"), "d1");
  ASSERT_STR_EQ(jstr(req, "name"), "deploy");
  ASSERT_STR_EQ(jstr(req, "category"), "admin");
  in = json_object_get(req, "input");
  ASSERT_EQ(json_integer_value(json_object_get(in, "ms")), 1);
  ASSERT(strcmp(ap.req[0], ap.req[1]) != 0);
  /* approval_response, then the tool */
  ip = fx_find(&f, "approval_response", "d1", 0);
  resp = fx_event(&f, ip);
  ASSERT_NOT_NULL(resp);
  ASSERT_STR_EQ(jstr(resp, "request"), ap.req[0]);
  ASSERT_STR_EQ(jstr(resp, "decision"), "allow");
  is = started(&f, "d1");
  ASSERT(ir < ip && ip < is);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "d1"), "content"), "out-d1");
  /* DENY: an error result, the tool never runs. */
  resp = fx_event(&f, fx_find(&f, "approval_response", "d2", 0));
  ASSERT_NOT_NULL(resp);
  ASSERT_STR_EQ(jstr(resp, "request"), ap.req[1]);
  ASSERT_STR_EQ(jstr(resp, "decision"), "deny");
  ASSERT_EQ(started(&f, "d2"), -1);
  ASSERT_EQ(tt.runs, 1);
  assert_error_result(&f, 2, "d2", "the user refused it");
  /* A resolved or unknown request is not found. */
  ASSERT_EQ(al_agent_approve(f.agent, ap.req[0], AL_APPROVE_ALLOW), AL_ENOTFOUND);
  ASSERT_EQ(al_agent_approve(f.agent, "apr_no_such", AL_APPROVE_ALLOW), AL_ENOTFOUND);
  uv_close((uv_handle_t *)&ap.timer, NULL);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* al_agent_approve with an unknown id while a request is pending changes
 * nothing; the real id still works. */
TEST_IMPL(agent_exec_approval_unknown_id_while_pending) {
  fx_t f;
  tt_t tt;
  al_tool_def_t d;
  char req[64];
  long ir;

  fx_init(&f, deploy_twice);
  f.opts.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_def(&d, "deploy", false, AL_TOOL_ADMIN, &tt);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), 0);
  ASSERT_EQ(al_agent_run(f.agent, "deploy"), 0);
  while ((ir = fx_find(&f, "approval_required", "d1", 0)) < 0) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0);
  }
  snprintf(req, sizeof(req), "%s", jstr(fx_event(&f, ir), "request"));
  ASSERT_EQ(al_agent_approve(f.agent, "apr_no_such", AL_APPROVE_ALLOW), AL_ENOTFOUND);
  ASSERT_EQ(al_agent_approve(f.agent, "", AL_APPROVE_DENY), AL_ENOTFOUND);
  ASSERT_EQ(fx_count(&f, "approval_response"), 0);
  ASSERT_EQ(tt.runs, 0);
  ASSERT_EQ(al_agent_approve(f.agent, req, AL_APPROVE_ALWAYS), 0);
  ASSERT_EQ(al_agent_approve(f.agent, req, AL_APPROVE_ALWAYS), AL_ENOTFOUND);
  fx_wait_end(&f, 1);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 2);
  ASSERT_EQ(fx_count(&f, "approval_required"), 1);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

TEST_IMPL(agent_exec_approval_always) {
  fx_t f;
  tt_t tt;
  approver_t ap;

  fx_init(&f, deploy_twice);
  f.opts.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "deploy", false, AL_TOOL_ADMIN, &tt);
  approver_init(&ap, &f);
  ap.decisions[0] = AL_APPROVE_ALWAYS;
  fx_run(&f, "deploy twice");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(ap.asked, 1);
  ASSERT_EQ(ap.rc[0], 0);
  ASSERT_EQ(fx_count(&f, "approval_required"), 1);
  ASSERT_STR_EQ(jstr(fx_event(&f, fx_find(&f, "approval_response", "d1", 0)),
                     "decision"),
                "always");
  /* d2, in the next turn, runs without asking. */
  ASSERT_EQ(fx_find(&f, "approval_required", "d2", 0), -1);
  ASSERT(started(&f, "d2") >= 0);
  ASSERT_EQ(tt.runs, 2);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 2, "d2"), "content"), "out-d2");
  /* ... and in the agent's next run too. */
  fx_run(&f, "again");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "approval_required"), 1);
  ASSERT_EQ(tt.runs, 3);
  fx_assert_valid(&f);
  uv_close((uv_handle_t *)&ap.timer, NULL);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 11. built-in tools through the agent ----------------------------------------- */

TEST_IMPL(agent_exec_builtin_bash_echo) {
  fx_t f;
  const json_t *r;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: b1, name: bash, input: {command: 'echo hi'}}}]}\n"
              "  - reply: {content: [{text: 'it said hi'}]}\n");
  fx_start(&f);
  fx_run(&f, "say hi");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  r = fx_tool_result(&f, 1, "b1");
  ASSERT_NOT_NULL(r);
  ASSERT(!jtrue(r, "is_error"));
  ASSERT_NOT_NULL(strstr(jstr(r, "content"), "hi"));
  ASSERT(started(&f, "b1") >= 0 && completed(&f, "b1") > started(&f, "b1"));
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

TEST_IMPL(agent_exec_builtin_read_outside_workspace) {
  fx_t f;
  const json_t *r;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: read_file, input: {path: /etc/passwd}}}]}\n"
              "  - reply: {content: [{text: 'not allowed'}]}\n");
  fx_start(&f);
  fx_run(&f, "read the password file");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  r = fx_tool_result(&f, 1, "r1");
  ASSERT_NOT_NULL(r);
  ASSERT(jtrue(r, "is_error"));
  ASSERT_NULL(strstr(jstr(r, "content"), "root:"));
  ASSERT_NOT_NULL(strstr(jstr(r, "content"), "outside the allowed paths"));
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

TEST_IMPL(agent_exec_builtin_write_then_read) {
  fx_t f;
  const json_t *r;
  char path[512];
  char *disk;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: w1, name: write_file, input: {path: sub/n.txt, content: 'hello from write_file'}}}]}\n"
              "  - reply: {content: [{tool_use: {id: w2, name: read_file, input: {path: sub/n.txt}}}]}\n"
              "  - reply: {content: [{text: 'read it back'}]}\n");
  fx_start(&f);
  fx_run(&f, "write and read");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 3);
  fx_assert_valid(&f);
  r = fx_tool_result(&f, 1, "w1");
  ASSERT_NOT_NULL(r);
  ASSERT(!jtrue(r, "is_error"));
  r = fx_tool_result(&f, 2, "w2");
  ASSERT_NOT_NULL(r);
  ASSERT(!jtrue(r, "is_error"));
  ASSERT_NOT_NULL(strstr(jstr(r, "content"), "hello from write_file"));
  snprintf(path, sizeof(path), "%s/sub/n.txt", f.workspace);
  disk = al_test_read_file(path, NULL);
  ASSERT_NOT_NULL(disk);
  ASSERT_STR_EQ(disk, "hello from write_file");
  free(disk);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- 12. subscriber re-entrancy ---------------------------------------------------- */

typedef struct {
  fx_t *f;
  al_sub_t *sub;
  int seen;
  int stop_after; /* unsubscribe itself at this many events (0: never) */
  uint64_t seqs[512];
} sub_t;

static void sub_cb(const al_event_t *ev, void *data) {
  sub_t *s = data;

  ASSERT(s->seen < 512);
  s->seqs[s->seen++] = ev->seq;
  if (s->stop_after > 0 && s->seen == s->stop_after) {
    al_agent_unsubscribe(s->f->agent, s->sub);
  }
}

TEST_IMPL(agent_exec_sub_unsubscribe_self) {
  fx_t f;
  tt_t tt;
  sub_t quitter, watcher;
  size_t i;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - text: 'calling'\n"
              "          chunks: 3\n"
              "        - tool_use: {id: x1, name: safe_t, input: {ms: 1}}\n"
              "  - reply: {content: [{text: 'finished', chunks: 2}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  memset(&quitter, 0, sizeof(quitter));
  memset(&watcher, 0, sizeof(watcher));
  quitter.f = &f;
  quitter.stop_after = 4; /* inside the first text_delta */
  watcher.f = &f;
  ASSERT_EQ(al_agent_subscribe(f.agent, sub_cb, &quitter, &quitter.sub), 0);
  ASSERT_EQ(al_agent_subscribe(f.agent, sub_cb, &watcher, &watcher.sub), 0);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(quitter.seen, 4);
  /* The subscriber after it saw everything, the same events in order, the
   * one during which the other left included. */
  ASSERT_EQ(watcher.seen, (int)json_array_size(f.events));
  for (i = 0; i < json_array_size(f.events); i++) {
    ASSERT_EQ(watcher.seqs[i],
              json_integer_value(json_object_get(json_array_get(f.events, i), "seq")));
    if (i < 4) {
      ASSERT_EQ(quitter.seqs[i], watcher.seqs[i]);
    }
  }
  /* The next run: still not called. */
  fx_run(&f, "again");
  ASSERT_EQ(quitter.seen, 4);
  ASSERT_EQ(watcher.seen, (int)json_array_size(f.events));
  al_agent_unsubscribe(f.agent, watcher.sub);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

typedef struct {
  bool closed;
  size_t events_at_close;
  const char *last_at_close;
  int close_calls;
  tt_t *tt;
  int cancels_at_close;
} closer_t;

static closer_t *the_closer;

static void closer_on_closed(al_agent_t *a) {
  fx_t *f = al_agent_get_data(a);

  the_closer->closed = true;
  the_closer->close_calls++;
  the_closer->events_at_close = json_array_size(f->events);
  the_closer->last_at_close = fx_last_type(f);
  if (the_closer->tt != NULL) {
    the_closer->cancels_at_close = the_closer->tt->cancels;
  }
}

static void close_on_delta(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)j;
  if (ev->type == AL_EVENT_TEXT_DELTA && f->agent != NULL) {
    al_agent_t *a = f->agent;

    f->agent = NULL; /* fx_finish must not close it again */
    al_agent_close(a, closer_on_closed);
  }
}

static void close_in_text_delta(const char *yaml, tt_t *tt, bool with_tool) {
  fx_t f;
  closer_t cl;
  size_t n;

  memset(&cl, 0, sizeof(cl));
  the_closer = &cl;
  fx_init(&f, yaml);
  f.hook = close_on_delta;
  fx_start(&f);
  if (with_tool) {
    tt_init(tt, &f);
    tt_add(&f, "waiter", true, AL_TOOL_READ, tt);
    cl.tt = tt;
  }
  ASSERT_EQ(al_agent_run(f.agent, "go"), 0);
  while (!cl.closed) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0 || cl.closed);
  }
  ASSERT_EQ(cl.close_calls, 1);
  ASSERT_EQ(fx_count(&f, "text_delta"), 1);
  ASSERT_EQ(fx_count(&f, "interrupted"), 1);
  ASSERT_EQ(fx_count(&f, "final"), 0);
  ASSERT_EQ(fx_count(&f, "error"), 0);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_STR_EQ(cl.last_at_close, "interrupted");
  n = json_array_size(f.events);
  ASSERT_EQ(cl.events_at_close, n);
  ASSERT_EQ(f.ends, 1);
  if (with_tool) {
    /* The running tool was cancelled before the close finished. */
    ASSERT(started(&f, "w1") >= 0);
    ASSERT_EQ(cl.cancels_at_close, 1);
    ASSERT_EQ(tt->late, 1); /* its completion (inside cancel) was dropped */
  }
  maybe_dump(&f);
  fx_finish(&f); /* the loop closes with nothing left */
  ASSERT_EQ(cl.close_calls, 1);
  the_closer = NULL;
}

TEST_IMPL(agent_exec_sub_close_in_text_delta) {
  close_in_text_delta("responses:\n"
                      "  - reply: {content: [{text: 'a streamed answer', chunks: 6, delay_ms: 2}]}\n",
                      NULL, false);
  return 0;
}

/* The same while an in-process tool runs (started while the text
 * streams): the close cancels it and still closes cleanly. */
TEST_IMPL(agent_exec_sub_close_in_text_delta_tool_running) {
  tt_t tt;

  close_in_text_delta("responses:\n"
                      "  - reply:\n"
                      "      content:\n"
                      "        - tool_use: {id: w1, name: waiter, input: {ms: -1}}\n"
                      "        - text: 'talking while it waits'\n"
                      "          chunks: 6\n"
                      "          delay_ms: 2\n",
                      &tt, true);
  return 0;
}

/* ---- 13. the done tool -------------------------------------------------------------- */

TEST_IMPL(agent_exec_done_tool_ends_run) {
  fx_t f;
  const json_t *fin;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - text: 'Wrapping up.'\n"
              "        - tool_use: {id: dn1, name: done, input: {message: 'All finished: 3 files fixed.'}}\n"
              "  - reply: {content: [{text: 'this reply must not be requested'}]}\n");
  fx_start(&f);
  fx_run(&f, "fix it");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fin = fx_event(&f, fx_find(&f, "final", NULL, 0));
  ASSERT_STR_EQ(jstr(fin, "text"), "All finished: 3 files fixed.");
  ASSERT_EQ(fx_requests(&f), 1);
  ASSERT_EQ(fx_count(&f, "stream_request_start"), 1);
  ASSERT_EQ(fx_count(&f, "turn_started"), 1);
  ASSERT(completed(&f, "dn1") >= 0 && completed(&f, "dn1") < fx_find(&f, "final", NULL, 0));
  ASSERT(!jtrue(fx_event(&f, completed(&f, "dn1")), "is_error"));
  ASSERT(!al_agent_running(f.agent));
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- more edges ------------------------------------------------------------------ */

/* run completes the call before it returns (the API allows "now"): a safe
 * one, an unsafe one, and an unsafe one that fails (its siblings behind it
 * are aborted as for an asynchronous failure). */
TEST_IMPL(agent_exec_inproc_sync_complete) {
  fx_t f;
  tt_t tt;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: y1, name: safe_t, input: {ms: 0}}\n"
              "        - tool_use: {id: y2, name: unsafe_t, input: {ms: 0}}\n"
              "        - tool_use: {id: y3, name: unsafe_t, input: {ms: 0, err: true, out: 'sync failure'}}\n"
              "        - tool_use: {id: y4, name: safe_t, input: {ms: 0}}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  tt_add(&f, "unsafe_t", false, AL_TOOL_WRITE, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(tt.runs, 3);
  ASSERT(started(&f, "y1") < completed(&f, "y1"));
  ASSERT(completed(&f, "y1") < started(&f, "y2"));
  ASSERT(completed(&f, "y2") < started(&f, "y3"));
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "y1"), "content"), "out-y1");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "y2"), "content"), "out-y2");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "y3"), "content"), "sync failure");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "y4"), "content"), sibling_text);
  ASSERT_EQ(started(&f, "y4"), -1);
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* A subscriber cancels inside tool_use_started of an in-process call: run
 * is not entered, and the tool's cancel callback is not called for a call
 * the tool never saw (there is nothing of it to stop). The loop closes
 * clean. */
static void cancel_on_started(fx_t *f, const al_event_t *ev, const json_t *j) {
  int *rc = f->user;

  (void)j;
  if (ev->type == AL_EVENT_TOOL_USE_STARTED && *rc == 1) {
    *rc = al_agent_cancel(f->agent);
  }
}

TEST_IMPL(agent_exec_cancel_inside_inproc_started) {
  fx_t f;
  tt_t tt;
  int rc = 1;
  long done;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: v1, name: safe_t, input: {ms: 1}}}]}\n"
              "  - reply: {content: [{text: 'next run'}]}\n");
  f.hook = cancel_on_started;
  f.user = &rc;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "go");
  ASSERT_EQ(rc, 0);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_EQ(tt.runs, 0);
  done = completed(&f, "v1");
  ASSERT(done > started(&f, "v1"));
  ASSERT_STR_EQ(jstr(fx_event(&f, done), "content"), "operation cancelled by user");
  ASSERT_EQ(tt.cancels_before_run, 0);
  ASSERT_EQ(tt.cancels, 0);
  fx_run(&f, "again");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* Unknown tools never wait for the gate nor block it: one behind a running
 * unsafe call completes before that call does. */
TEST_IMPL(agent_exec_unknown_tool_does_not_wait) {
  fx_t f;
  tt_t tt;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: n1, name: unsafe_t, input: {ms: 20}}\n"
              "        - tool_use: {id: n2, name: ghost, input: {}}\n"
              "  - reply: {content: [{text: 'ok'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "unsafe_t", false, AL_TOOL_WRITE, &tt);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(completed(&f, "n2") >= 0 && completed(&f, "n2") < completed(&f, "n1"));
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "n2"), "content"),
                "Error: Unknown tool 'ghost'");
  ASSERT_EQ(fx_count(&f, "tool_execution_aborted"), 0); /* no sibling abort */
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "n1"), "content"), "out-n1");
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* An interactive hook that says ASK for a write tool: approval_required
 * names the category "write"; the approval runs it. */
TEST_IMPL(agent_exec_approval_hook_ask_write) {
  fx_t f;
  tt_t tt;
  approver_t ap;
  perm_hook_t h;

  memset(&h, 0, sizeof(h));
  h.answer = AL_PERMISSION_ASK;
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: h1, name: edit, input: {ms: 1}}}]}\n"
              "  - reply: {content: [{text: 'edited'}]}\n");
  f.opts.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  f.opts.permission = perm_hook;
  f.opts.permission_data = &h;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "edit", false, AL_TOOL_WRITE, &tt);
  approver_init(&ap, &f);
  ap.decisions[0] = AL_APPROVE_ALLOW;
  fx_run(&f, "edit");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(h.calls, 1);
  ASSERT_STR_EQ(jstr(fx_event(&f, fx_find(&f, "approval_required", "h1", 0)),
                     "category"),
                "write");
  ASSERT_EQ(tt.runs, 1);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "h1"), "content"), "out-h1");
  fx_assert_valid(&f);
  uv_close((uv_handle_t *)&ap.timer, NULL);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* Registration errors. */
TEST_IMPL(agent_exec_add_tool_errors) {
  fx_t f;
  tt_t tt;
  al_tool_def_t d;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{text: 'streamed slowly', chunks: 3, delay_ms: 2}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_def(&d, "t_ok", true, AL_TOOL_READ, &tt);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), 0);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EEXIST);
  tt_def(&d, "bash", true, AL_TOOL_READ, &tt);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EEXIST); /* a built-in */
  tt_def(&d, "bad name", true, AL_TOOL_READ, &tt);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EINVAL);
  tt_def(&d, "", true, AL_TOOL_READ, &tt);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EINVAL);
  tt_def(&d, "t_schema", true, AL_TOOL_READ, &tt);
  d.input_schema = "[1,2]";
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EINVAL);
  d.input_schema = "{not json";
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EINVAL);
  tt_def(&d, "t_norun", true, AL_TOOL_READ, &tt);
  d.run = NULL;
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EINVAL);
  tt_def(&d, "t_nodesc", true, AL_TOOL_READ, &tt);
  d.description = NULL;
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EINVAL);
  /* During a run: busy. */
  ASSERT_EQ(al_agent_run(f.agent, "hi"), 0);
  tt_def(&d, "t_late", true, AL_TOOL_READ, &tt);
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), AL_EBUSY);
  fx_wait_end(&f, 1);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(al_agent_add_tool(f.agent, &d), 0);
  /* The registered tools are offered to the model; failed ones are not. */
  {
    char *tools = json_dumps(json_object_get(fx_request(&f, 0)->body, "tools"), 0);

    ASSERT_NOT_NULL(strstr(tools, "\"t_ok\""));
    ASSERT_NULL(strstr(tools, "\"t_schema\""));
    ASSERT_NULL(strstr(tools, "\"t_norun\""));
    ASSERT_NULL(strstr(tools, "\"t_nodesc\""));
    ASSERT_NULL(strstr(tools, "\"t_late\"")); /* added after request 0 */
    free(tools);
  }
  fx_finish(&f);
  return 0;
}

/* done with a missing message is an error result, not an end: the loop
 * asks the model again. done beside another call still ends the run after
 * both completed, without a further request. */
TEST_IMPL(agent_exec_done_tool_edges) {
  fx_t f;
  tt_t tt;

  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: dz1, name: done, input: {}}}]}\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: dz2, name: safe_t, input: {ms: 5}}\n"
              "        - tool_use: {id: dz3, name: done, input: {message: 'Really done.'}}\n"
              "  - reply: {content: [{text: 'must not be requested'}]}\n");
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "safe_t", true, AL_TOOL_READ, &tt);
  fx_run(&f, "finish");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(jstr(fx_event(&f, fx_find(&f, "final", NULL, 0)), "text"),
                "Really done.");
  ASSERT_EQ(fx_requests(&f), 2);
  ASSERT(jtrue(fx_tool_result(&f, 1, "dz1"), "is_error"));
  ASSERT(completed(&f, "dz2") < fx_find(&f, "final", NULL, 0));
  ASSERT_EQ(tt.runs, 1);
  fx_assert_valid(&f);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* ---- close / cancel from inside every event type ------------------------------------ */

/* One run that produces most event types: a retried request, text, an
 * in-process tool with progress, an admin tool that asks (answered ALLOW on
 * a later iteration), an unknown tool, an unsafe tool that fails and a safe
 * call behind it (sibling abort), then a text reply. */
static const char matrix_yaml[] =
    "responses:\n"
    "  - fault: {status: 529}\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: 'Let me look.'\n"
    "          chunks: 2\n"
    "        - tool_use: {id: m1, name: prog, input: {ms: 2, progress: ['p1', 'p2']}, pieces: 2}\n"
    "        - tool_use: {id: m2, name: deploy, input: {ms: 1}}\n"
    "        - tool_use: {id: m3, name: ghost, input: {}}\n"
    "        - tool_use: {id: m4, name: unsafe_t, input: {ms: 1, err: true}}\n"
    "        - tool_use: {id: m5, name: safe_t, input: {ms: 1}}\n"
    "  - reply: {content: [{text: 'Done.', chunks: 2}]}\n";

static const char *const matrix_types[] = {
    "run_started", "turn_started", "stream_request_start", "api_error",
    "retry", "text_delta", "content_block_completed", "tool_input_delta",
    "tool_use_queued", "tool_use_started", "tool_progress",
    "approval_required", "approval_response", "tool_use_completed",
    "tool_execution_aborted", "usage", "turn_completed", "final", NULL};

typedef struct {
  approver_t ap;
  const char *type;
  int nth;    /* act at this occurrence (0-based) of type */
  int seen;
  bool close; /* else cancel */
  bool acted;
  int rc;
} matrix_t;

static void matrix_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  matrix_t *m = f->user;

  approver_on_event(&m->ap, ev, j);
  if (m->acted || strcmp(al_event_type_name(ev->type), m->type) != 0 ||
      m->seen++ != m->nth) {
    return;
  }
  m->acted = true;
  if (m->close) {
    al_agent_t *a = f->agent;

    f->agent = NULL;
    al_agent_close(a, closer_on_closed);
  } else {
    m->rc = al_agent_cancel(f->agent);
  }
}

static void matrix_setup(fx_t *f, matrix_t *m, tt_t *tt, const char *type,
                         bool close) {
  int i;

  fx_init(f, matrix_yaml);
  /* No built-in tools: the matrix calls none, and each of its ~50 runs
   * would start and close a sandbox with its warm helpers (four fifths of
   * the test's time on a loaded machine: 2.7 s against 0.5 s). */
  f->opts.builtin_tools = false;
  f->opts.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  fx_start(f);
  tt_init(tt, f);
  tt_add(f, "prog", true, AL_TOOL_READ, tt);
  tt_add(f, "deploy", false, AL_TOOL_ADMIN, tt);
  tt_add(f, "unsafe_t", false, AL_TOOL_WRITE, tt);
  tt_add(f, "safe_t", true, AL_TOOL_READ, tt);
  approver_init(&m->ap, f);
  for (i = 0; i < 4; i++) {
    m->ap.decisions[i] = AL_APPROVE_ALLOW;
  }
  f->hook = matrix_hook;
  f->user = m;
  m->type = type;
  m->close = close;
  m->rc = 1;
}

/* How many events of each matrix type a full run has (at most 6 are
 * tried per type). */
static void matrix_counts(int *counts) {
  fx_t f;
  tt_t tt;
  matrix_t m;
  size_t i;

  memset(&m, 0, sizeof(m));
  matrix_setup(&f, &m, &tt, "none", false);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  for (i = 0; matrix_types[i] != NULL; i++) {
    counts[i] = fx_count(&f, matrix_types[i]) < 6 ? (int)fx_count(&f, matrix_types[i]) : 6;
  }
  uv_close((uv_handle_t *)&m.ap.timer, NULL);
  fx_finish(&f);
}

/* The reference run: every listed type occurs. */
TEST_IMPL(agent_exec_matrix_reference) {
  fx_t f;
  tt_t tt;
  matrix_t m;
  size_t i;

  memset(&m, 0, sizeof(m));
  matrix_setup(&f, &m, &tt, "none", false);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  for (i = 0; matrix_types[i] != NULL; i++) {
    if (fx_count(&f, matrix_types[i]) == 0) {
      AL_TEST_FAIL("the reference run has no %s", matrix_types[i]);
    }
  }
  ASSERT_EQ(tt.progress_refused, 0);
  fx_assert_valid(&f);
  uv_close((uv_handle_t *)&m.ap.timer, NULL);
  maybe_dump(&f);
  fx_finish(&f);
  return 0;
}

/* al_agent_close from inside the first event of each type: the close
 * callback runs once, the run's last event is `interrupted` (or the
 * `final` it closed in), nothing comes after it, every in-process call the
 * tool saw was completed, and the loop closes with nothing left. */
TEST_IMPL(agent_exec_matrix_close_in_every_event) {
  int counts[32];
  size_t i;
  int n;

  matrix_counts(counts);
  for (i = 0; matrix_types[i] != NULL; i++) for (n = 0; n < counts[i]; n++) {
    fx_t f;
    tt_t tt;
    matrix_t m;
    closer_t cl;
    bool at_final = strcmp(matrix_types[i], "final") == 0;

    fprintf(stderr, "close inside %s #%d\n", matrix_types[i], n);
    memset(&m, 0, sizeof(m));
    memset(&cl, 0, sizeof(cl));
    the_closer = &cl;
    matrix_setup(&f, &m, &tt, matrix_types[i], true);
    m.nth = n;
    cl.tt = &tt;
    ASSERT_EQ(al_agent_run(f.agent, "go"), 0);
    while (!cl.closed) {
      ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0 || cl.closed);
    }
    ASSERT(m.acted);
    ASSERT_EQ(cl.close_calls, 1);
    ASSERT_EQ(f.ends, 1);
    ASSERT_STR_EQ(fx_last_type(&f), at_final ? "final" : "interrupted");
    ASSERT_STR_EQ(cl.last_at_close, fx_last_type(&f));
    ASSERT_EQ(cl.events_at_close, json_array_size(f.events));
    uv_close((uv_handle_t *)&m.ap.timer, NULL);
    maybe_dump(&f);
    fx_finish(&f);
    ASSERT_EQ(tt.completes, tt.runs); /* nothing the tool saw was left */
    ASSERT_EQ(cl.close_calls, 1);
    the_closer = NULL;
  }
  return 0;
}

/* al_agent_cancel from inside the first event of each type: `interrupted`
 * ends the run (a cancel inside `final` is too late: AL_ESTATE), nothing of
 * the run comes after it, and the next run works with a valid history. */
TEST_IMPL(agent_exec_matrix_cancel_in_every_event) {
  int counts[32];
  size_t i, k;
  int n;

  matrix_counts(counts);
  for (i = 0; matrix_types[i] != NULL; i++) for (n = 0; n < counts[i]; n++) {
    fx_t f;
    tt_t tt;
    matrix_t m;
    bool at_final = strcmp(matrix_types[i], "final") == 0;
    long end1;

    fprintf(stderr, "cancel inside %s #%d\n", matrix_types[i], n);
    memset(&m, 0, sizeof(m));
    matrix_setup(&f, &m, &tt, matrix_types[i], false);
    m.nth = n;
    fx_run(&f, "go");
    ASSERT(m.acted);
    if (at_final) {
      ASSERT_EQ(m.rc, AL_ESTATE);
      ASSERT_STR_EQ(fx_last_type(&f), "final");
    } else {
      ASSERT_EQ(m.rc, 0);
      ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
    }
    end1 = (long)json_array_size(f.events) - 1;
    ASSERT(!al_agent_running(f.agent));
    /* The next run, on the same history. */
    fx_run(&f, "continue");
    ASSERT_STR_EQ(fx_last_type(&f), "final");
    fx_assert_valid(&f);
    for (k = (size_t)end1 + 1; k < json_array_size(f.events); k++) {
      ASSERT_EQ(json_integer_value(json_object_get(json_array_get(f.events, k), "run")), 2);
    }
    ASSERT_EQ(fx_count(&f, "interrupted"), at_final ? 0 : 1);
    uv_close((uv_handle_t *)&m.ap.timer, NULL);
    maybe_dump(&f);
    fx_finish(&f);
    ASSERT_EQ(tt.completes, tt.runs);
  }
  return 0;
}

/* The time the user takes to answer an approval is not the tool's
 * duration (issue 12): the answer comes 300 ms after the question, the
 * tool itself takes 1 ms. */
TEST_IMPL(agent_exec_approval_wait_not_in_duration) {
  fx_t f;
  tt_t tt;
  approver_t ap;
  const json_t *done;
  const json_t *asked;
  const json_t *answered;
  json_int_t waited_ms;

  fx_init(&f, deploy_twice);
  f.opts.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  fx_start(&f);
  tt_init(&tt, &f);
  tt_add(&f, "deploy", false, AL_TOOL_ADMIN, &tt);
  approver_init(&ap, &f);
  ap.delay_ms = 300;
  ap.decisions[0] = AL_APPROVE_ALLOW;
  ap.decisions[1] = AL_APPROVE_ALLOW;
  fx_run(&f, "deploy twice");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  asked = fx_event(&f, fx_find(&f, "approval_required", "d1", 0));
  answered = fx_event(&f, fx_find(&f, "approval_response", "d1", 0));
  done = fx_event(&f, fx_find(&f, "tool_use_completed", "d1", 0));
  ASSERT_NOT_NULL(asked);
  ASSERT_NOT_NULL(answered);
  ASSERT_NOT_NULL(done);
  waited_ms = (json_integer_value(json_object_get(answered, "ts_ns")) -
               json_integer_value(json_object_get(asked, "ts_ns"))) /
              1000000;
  /* libuv's clock has whole milliseconds: a 300 ms timer can fire 299.x
   * ms after the stamp, which the division above truncates. */
  ASSERT(waited_ms >= 299);
  /* Counted from the answer: far less than the wait. */
  ASSERT(json_integer_value(json_object_get(done, "duration_ms")) <
         waited_ms);
  uv_close((uv_handle_t *)&ap.timer, NULL);
  fx_finish(&f);
  return 0;
}
