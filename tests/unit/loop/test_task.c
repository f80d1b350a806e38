/* Sub-agents (issue 23, docs/subagents.md): the `task` tool end to end
 * against agentloop-mockllm. Children talk to the same server as their
 * parent; every scenario here has a request order that does not depend on
 * timing (one child at a time, or parallel children whose replies are the
 * same), so nothing waits on a race. Child events reach the recorder
 * re-posted with "path". */
#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "common/common.h"
#include "test.h"

#define jstr fx_jstr

/* ---- helpers ---------------------------------------------------------------- */

static bool is_type(const json_t *e, const char *type) {
  return strcmp(jstr(e, "type"), type) == 0;
}

/* Index of the n-th event of type whose path is `path` (NULL: the
 * agent's own); -1 when absent. */
static long find_path(const fx_t *f, const char *type, const char *path,
                      size_t n) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    const char *p = jstr(e, "path");

    if (is_type(e, type) &&
        (path == NULL ? p == NULL : (p != NULL && strcmp(p, path) == 0))) {
      if (n-- == 0) {
        return (long)i;
      }
    }
  }
  return -1;
}

static size_t count_path(const fx_t *f, const char *type, const char *path) {
  size_t n = 0;

  while (find_path(f, type, path, n) >= 0) {
    n++;
  }
  return n;
}

/* The result content of the parent's call id (its tool_use_completed). */
static const char *result_of(const fx_t *f, const char *call_id) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    if (is_type(e, "tool_use_completed") && jstr(e, "path") == NULL &&
        strcmp(jstr(e, "call_id"), call_id) == 0) {
      return jstr(e, "content");
    }
  }
  return NULL;
}

/* Every tool_use_started of every level has a tool_use_completed (same
 * call id, same path). */
static void assert_no_orphans(const fx_t *f) {
  size_t i, k;
  json_t *e, *c;

  json_array_foreach(f->events, i, e) {
    bool found = false;

    if (!is_type(e, "tool_use_started")) {
      continue;
    }
    json_array_foreach(f->events, k, c) {
      const char *p1 = jstr(e, "path"), *p2 = jstr(c, "path");

      if (is_type(c, "tool_use_completed") &&
          strcmp(jstr(c, "call_id"), jstr(e, "call_id")) == 0 &&
          ((p1 == NULL && p2 == NULL) ||
           (p1 != NULL && p2 != NULL && strcmp(p1, p2) == 0))) {
        found = true;
      }
    }
    if (!found) {
      AL_TEST_FAIL("tool_use %s (path %s) has no result",
                   jstr(e, "call_id"),
                   jstr(e, "path") != NULL ? jstr(e, "path") : "-");
    }
  }
}

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

/* An in-process tool of the parent's, lent to its children: "probe"
 * answers at once; "hang" only ends with its cancel. */
typedef struct {
  int runs;
  int cancels;
  al_tool_ctx_t *hung;
} probe_t;

static void probe_run(al_tool_ctx_t *ctx, void *data) {
  probe_t *p = data;

  p->runs++;
  if (strcmp(al_tool_ctx_name(ctx), "hang") == 0) {
    p->hung = ctx;
    return;
  }
  al_tool_ctx_complete(ctx, false, "probe-ok", 8);
}

static void probe_cancel(al_tool_ctx_t *ctx, void *data) {
  probe_t *p = data;

  p->cancels++;
  if (p->hung == ctx) {
    p->hung = NULL;
  }
  al_tool_ctx_complete(ctx, true, "cancelled", 9);
}

static void add_probe(fx_t *f, const char *name, al_tool_category_t cat,
                      probe_t *p) {
  al_tool_def_t d;

  memset(&d, 0, sizeof(d));
  d.name = name;
  d.description = "a test tool";
  d.category = cat;
  d.run = probe_run;
  d.cancel = probe_cancel;
  d.data = p;
  ASSERT_EQ(al_agent_add_tool(f->agent, &d), 0);
}

/* ---- parallel explore children ------------------------------------------------ */

/* Three explore children in one reply (mockllm tracks script each by its
 * prompt): all three start before any ends
 * (a read-only agent's task is concurrency-safe), each answer is its
 * call's result, the children see only read-only tools, and the parent's
 * stats include their usage. */
TEST_IMPL(task_three_parallel_explore) {
  fx_t f;
  al_agent_stats_t st;
  long first_done;
  size_t i;
  uint64_t child_in = 0, all_in = 0;
  json_t *e;
  long r;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q one', agent: explore}}\n"
          "        - tool_use: {id: k2, name: task, input: {description: b, "
          "prompt: 'CHILD-Q two', agent: explore}}\n"
          "        - tool_use: {id: k3, name: task, input: {description: c, "
          "prompt: 'CHILD-Q three', agent: explore}}\n"
          "  - expect_request: {contains: 'answer-three'}\n"
          "    reply: {content: [{text: 'all done'}]}\n"
          "tracks:\n"
          "  - match: {first_user_contains: 'CHILD-Q one'}\n"
          "    responses: [{reply: {content: [{text: 'answer-one'}]}}]\n"
          "  - match: {first_user_contains: 'CHILD-Q two'}\n"
          "    responses: [{reply: {content: [{text: 'answer-two'}]}}]\n"
          "  - match: {first_user_contains: 'CHILD-Q three'}\n"
          "    responses: [{reply: {content: [{text: 'answer-three'}]}}]\n");
  f.opts.model = "claude-opus-4-5"; /* priced: $5 / $25 per million */
  fx_start(&f);
  fx_run(&f, "explore three things");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(jstr(fx_event(&f, find_path(&f, "final", NULL, 0)), "text"),
                "all done");
  ASSERT_EQ(count_path(&f, "subagent_started", NULL), 3);
  ASSERT_EQ(count_path(&f, "subagent_completed", NULL), 3);
  first_done = find_path(&f, "subagent_completed", NULL, 0);
  /* Parallel: the third started before the first ended. */
  ASSERT(find_path(&f, "subagent_started", NULL, 2) < first_done);
  /* Each child's answer is its own call's result. */
  ASSERT_STR_EQ(result_of(&f, "k1"), "answer-one");
  ASSERT_STR_EQ(result_of(&f, "k2"), "answer-two");
  ASSERT_STR_EQ(result_of(&f, "k3"), "answer-three");
  ASSERT_STR_EQ(jstr(fx_event(&f, first_done), "outcome"), "completed");
  /* Children's events are re-posted with their path. */
  ASSERT(find_path(&f, "final", "t1", 0) >= 0);
  ASSERT(find_path(&f, "final", "t3", 0) >= 0);
  /* A child's request: its prompt, read-only tools, no task. */
  r = fx_request_with(&f, "CHILD-Q one");
  ASSERT(r >= 1);
  ASSERT(fx_offers(&f, (size_t)r, "read_file"));
  ASSERT(!fx_offers(&f, (size_t)r, "bash"));
  ASSERT(!fx_offers(&f, (size_t)r, "write_file"));
  ASSERT(!fx_offers(&f, (size_t)r, "task"));
  ASSERT(fx_offers(&f, 0, "task"));
  fx_assert_valid(&f);
  /* Stats: the parent's include its children's usage. */
  json_array_foreach(f.events, i, e) {
    if (is_type(e, "usage")) {
      uint64_t n = (uint64_t)json_integer_value(json_object_get(e, "input_tokens"));

      all_in += n;
      if (jstr(e, "path") != NULL) {
        child_in += n;
      }
    }
  }
  al_agent_stats(f.agent, &st);
  ASSERT(child_in > 0);
  ASSERT_EQ(st.children_input_tokens, child_in);
  ASSERT_EQ(st.input_tokens, all_in);
  /* The cost covers the children too, at the model's prices. */
  ASSERT(st.cost_usd > 0);
  ASSERT(st.cost_usd - ((double)all_in * 5 + (double)st.output_tokens * 25) /
                           1e6 <
         1e-9);
  ASSERT(((double)all_in * 5 + (double)st.output_tokens * 25) / 1e6 -
             st.cost_usd <
         1e-9);
  ASSERT(json_is_real(json_object_get(
      json_object_get(fx_event(&f, first_done), "usage"), "cost_usd")));
  fx_finish(&f);
  return 0;
}

/* ---- inheritance -------------------------------------------------------------- */

/* An explore child asks for bash, which its agent does not allow: an error
 * result in the child, never a run; the parent's own bash is untouched. */
TEST_IMPL(task_child_denied_tool) {
  fx_t f;
  long c;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q', agent: explore}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: cb1, name: bash, input: {command: "
          "'echo SHOULD-NOT-RUN'}}\n"
          "  - reply: {content: [{text: 'child gave up'}]}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n");
  f.opts.sandbox = AL_SANDBOX_OFF;
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  c = find_path(&f, "tool_use_completed", "t1", 0);
  ASSERT(c >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "call_id"), "cb1");
  ASSERT(json_is_true(json_object_get(fx_event(&f, c), "is_error")));
  ASSERT_NULL(strstr(jstr(fx_event(&f, c), "content"), "SHOULD-NOT-RUN"));
  ASSERT_EQ(count_path(&f, "tool_use_started", "t1"), 0);
  ASSERT_STR_EQ(result_of(&f, "k1"), "child gave up");
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* task_max_depth 1: the child's own task call gets the depth error. */
TEST_IMPL(task_depth_limit) {
  fx_t f;
  long c;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q'}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: g1, name: task, input: {description: b, "
          "prompt: 'GRANDCHILD-Q'}}\n"
          "  - expect_request: {contains: 'Agent depth limit reached'}\n"
          "    reply: {content: [{text: 'did it myself'}]}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n");
  f.opts.task_max_depth = 1;
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  c = find_path(&f, "tool_use_completed", "t1", 0);
  ASSERT(c >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "call_id"), "g1");
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "content"),
                "Agent depth limit reached. Solve the task yourself.");
  ASSERT_EQ(count_path(&f, "subagent_started", "t1"), 0);
  ASSERT_EQ(count_path(&f, "subagent_started", NULL), 1);
  ASSERT_STR_EQ(result_of(&f, "k1"), "did it myself");
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- approvals from a child ----------------------------------------------------- */

typedef struct {
  int asked_probe;
  int approved;
} perm_t;

static al_permission_t parent_perm(al_agent_t *agent, const char *tool,
                                   const char *input,
                                   al_tool_category_t category, void *data) {
  perm_t *p = data;

  (void)agent;
  (void)input;
  (void)category;
  if (strcmp(tool, "probe") == 0) {
    p->asked_probe++;
    return AL_PERMISSION_ASK;
  }
  return AL_PERMISSION_DEFAULT;
}

static void approve_child(fx_t *f, const al_event_t *ev, const json_t *j) {
  perm_t *p = f->user;

  (void)j;
  if (ev->type == AL_EVENT_APPROVAL_REQUIRED && ev->path != NULL &&
      strcmp(ev->path, "t1") == 0) {
    char req[128];

    snprintf(req, sizeof(req), "%.*s", (int)ev->u.approval.request.len,
             ev->u.approval.request.ptr);
    /* Answered on the parent, which the child's path routes. */
    ASSERT_EQ(al_agent_approve(f->agent, req, AL_APPROVE_ALLOW), 0);
    p->approved++;
  }
}

/* A child's call that needs approval: the parent's permission callback is
 * asked, approval_required reaches the parent's subscribers with path t1
 * and an id of the child's, and al_agent_approve on the parent answers. */
TEST_IMPL(task_child_approval_on_parent) {
  fx_t f;
  perm_t pm;
  probe_t pr;
  long a;

  memset(&pm, 0, sizeof(pm));
  memset(&pr, 0, sizeof(pr));
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q'}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: p1, name: probe, input: {}}\n"
          "  - expect_request: {contains: 'probe-ok'}\n"
          "    reply: {content: [{text: 'child probed'}]}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n");
  f.opts.permission = parent_perm;
  f.opts.permission_data = &pm;
  f.hook = approve_child;
  f.user = &pm;
  fx_start(&f);
  add_probe(&f, "probe", AL_TOOL_READ, &pr);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(pm.asked_probe, 1);
  ASSERT_EQ(pm.approved, 1);
  ASSERT_EQ(pr.runs, 1);
  a = find_path(&f, "approval_required", "t1", 0);
  ASSERT(a >= 0);
  ASSERT(strncmp(jstr(fx_event(&f, a), "request"), "apr_t1.", 7) == 0);
  ASSERT(find_path(&f, "approval_response", "t1", 0) > a);
  ASSERT_STR_EQ(result_of(&f, "k1"), "child probed");
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- fork --------------------------------------------------------------------- */

/* The parent's reply is committed (its usage comes after that): the hung
 * call ends, and the fork queued behind it starts with the reply, its
 * tool_use blocks still unanswered, in the parent's history. */
static void release_on_usage(fx_t *f, const al_event_t *ev, const json_t *j) {
  probe_t *p = f->user;

  (void)j;
  if (ev->type == AL_EVENT_USAGE && ev->path == NULL && p->hung != NULL) {
    al_tool_ctx_t *ctx = p->hung;

    p->hung = NULL;
    al_tool_ctx_complete(ctx, false, "released", 8);
  }
}

/* fork: the child starts from the parent's conversation (its request holds
 * the parent's prompt and passes the validator: the committed reply's
 * pending tool_use blocks, this very call's among them, are not left
 * unanswered in the copy); naming another agent is refused. */
TEST_IMPL(task_fork) {
  fx_t f;
  probe_t pr;
  long r;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k0, name: task, input: {description: x, "
          "prompt: 'FORK-BAD', fork: true, agent: explore}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - text: 'let me fork'\n"
          "        - tool_use: {id: w1, name: hang, input: {}}\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'FORK-CHILD', fork: true}}\n"
          "  - expect_request: {contains: 'PARENT-SECRET-CONTEXT'}\n"
          "    reply: {content: [{text: 'forked ok'}]}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n");
  memset(&pr, 0, sizeof(pr));
  f.hook = release_on_usage;
  f.user = &pr;
  fx_start(&f);
  add_probe(&f, "hang", AL_TOOL_READ, &pr);
  fx_run(&f, "PARENT-SECRET-CONTEXT: the answer is 42");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_NOT_NULL(strstr(result_of(&f, "k0"), "cannot run agent 'explore'"));
  ASSERT_STR_EQ(result_of(&f, "k1"), "forked ok");
  r = fx_request_with(&f, "FORK-CHILD");
  ASSERT(r >= 1);
  ASSERT_EQ(fx_request_with(&f, "PARENT-SECRET-CONTEXT"), 0);
  ASSERT(fx_request_with(&f, "FORK-CHILD") == r);
  {
    char *body = json_dumps(fx_request(&f, (size_t)r)->body, JSON_COMPACT);

    ASSERT_NOT_NULL(strstr(body, "PARENT-SECRET-CONTEXT"));
    ASSERT_NOT_NULL(strstr(body, "let me fork"));
    ASSERT_NULL(strstr(body, "\"k1\""));
    ASSERT_NULL(strstr(body, "\"w1\""));
    free(body);
  }
  ASSERT_EQ(count_path(&f, "subagent_started", NULL), 1);
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- budget ------------------------------------------------------------------- */

/* task_token_budget: a child past it is cancelled (its tools too) and the
 * call's result says why; outcome "budget". */
TEST_IMPL(task_token_budget) {
  fx_t f;
  probe_t pr;
  long c;

  memset(&pr, 0, sizeof(pr));
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q'}}\n"
          "  - reply:\n"
          "      usage: {input_tokens: 500, output_tokens: 20}\n"
          "      content:\n"
          "        - tool_use: {id: h1, name: hang, input: {}}\n"
          "  - expect_request: {contains: 'token budget'}\n"
          "    reply: {content: [{text: 'parent done'}]}\n");
  f.opts.task_token_budget = 100;
  fx_start(&f);
  add_probe(&f, "hang", AL_TOOL_READ, &pr);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(pr.cancels, 1);
  ASSERT_NOT_NULL(strstr(result_of(&f, "k1"), "token budget (100 tokens)"));
  c = find_path(&f, "subagent_completed", NULL, 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "outcome"), "budget");
  assert_no_orphans(&f);
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- background ----------------------------------------------------------------- */

/* A background child: the call returns its id at once; the parent's run
 * ends; the child's result then starts a run of the parent (a queued
 * input) whose request carries it. */
TEST_IMPL(task_background_after_turn) {
  fx_t f;
  char *list = NULL;
  long r;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: bg, "
          "prompt: 'BG-CHILD', background: true}}\n"
          "  - reply: {content: [{text: 'same-text'}]}\n"
          "  - reply: {content: [{text: 'same-text'}]}\n"
          "  - expect_request: {contains: 'Background task t1'}\n"
          "    reply: {content: [{text: 'saw the background result'}]}\n");
  fx_start(&f);
  fx_run(&f, "start it");
  ASSERT_NOT_NULL(strstr(result_of(&f, "k1"), "\"task_id\":\"t1\""));
  fx_wait_end(&f, 2);
  maybe_dump(&f);
  ASSERT_STR_EQ(jstr(fx_event(&f, find_path(&f, "final", NULL, 1)), "text"),
                "saw the background result");
  r = fx_request_with(&f, "Background task t1");
  ASSERT(r >= 2);
  {
    char *body = json_dumps(fx_request(&f, (size_t)r)->body, JSON_COMPACT);

    ASSERT_NOT_NULL(strstr(body, "same-text"));
    free(body);
  }
  ASSERT_EQ(al_agent_tasks_json(f.agent, &list), 0);
  ASSERT_NOT_NULL(strstr(list, "\"state\":\"completed\""));
  ASSERT_NOT_NULL(strstr(list, "\"background\":true"));
  al_free(list);
  ASSERT_EQ(al_agent_task_cancel(f.agent, "t1"), AL_ENOENT);
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- close and cancel ------------------------------------------------------------ */

typedef struct {
  bool closed;
  size_t events_at_close;
} closer_t;

static void on_closed(al_agent_t *a) {
  closer_t *c = al_agent_get_data(a) != NULL
                    ? ((fx_t *)al_agent_get_data(a))->user
                    : NULL;

  if (c != NULL) {
    c->closed = true;
  }
}

static void close_when_child_runs(fx_t *f, const al_event_t *ev,
                                  const json_t *j) {
  closer_t *c = f->user;

  (void)j;
  if (ev->type == AL_EVENT_TOOL_USE_STARTED && ev->path != NULL &&
      f->agent != NULL) {
    al_agent_close(f->agent, on_closed);
    f->agent = NULL;
    c->events_at_close = json_array_size(f->events);
  }
}

static int procs_with(const char *marker);

/* Closing a parent whose background child runs bash (after the parent's
 * run ended): the child is cancelled and closed with it, its process is
 * gone by the parent's close callback, and nothing of the child is posted
 * after the close. */
TEST_IMPL(task_close_with_background_child) {
  fx_t f;
  closer_t c;
  size_t i;

  memset(&c, 0, sizeof(c));
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: bg, "
          "prompt: 'BG-CHILD', background: true}}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n"
          "tracks:\n"
          "  - match: {first_user_contains: 'BG-CHILD'}\n"
          "    responses:\n"
          "      - first_byte_delay_ms: 50\n"
          "        reply:\n"
          "          content:\n"
          "            - tool_use: {id: b1, name: bash, input: {command: "
          "'sleep 29.75'}}\n");
  f.opts.sandbox = AL_SANDBOX_OFF;
  f.hook = close_when_child_runs;
  f.user = &c;
  fx_start(&f);
  ASSERT_EQ(al_agent_run(f.agent, "start it"), 0);
  while (!c.closed) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0 || c.closed);
  }
  maybe_dump(&f);
  ASSERT(c.events_at_close > 0);
  /* Nothing of the child comes after the event that closed it (the
   * parent's own interrupted may, if its run had not ended yet). */
  for (i = c.events_at_close; i < json_array_size(f.events); i++) {
    ASSERT_NULL(jstr(fx_event(&f, (long)i), "path"));
  }
  ASSERT_EQ(count_path(&f, "subagent_started", NULL), 1);
  ASSERT_EQ(count_path(&f, "subagent_completed", NULL), 0);
  /* A closed agent waited for its children's killed process groups. */
  ASSERT_EQ(procs_with("sleep 29.75"), 0);
  fx_finish(&f);
  return 0;
}

/* Processes whose command line holds marker (host /proc). */
static int procs_with(const char *marker) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  int n = 0;

  ASSERT_NOT_NULL(d);
  while ((de = readdir(d)) != NULL) {
    char path[300], buf[512];
    FILE *fp;
    size_t len, i;

    if (!isdigit((unsigned char)de->d_name[0])) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
    if ((fp = fopen(path, "r")) == NULL) {
      continue;
    }
    len = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    for (i = 0; i < len; i++) {
      if (buf[i] == '\0') {
        buf[i] = ' ';
      }
    }
    buf[len] = '\0';
    if (strstr(buf, marker) != NULL) {
      n++;
    }
  }
  closedir(d);
  return n;
}

typedef struct {
  int bash_started;
  int usages;
  bool committed; /* cancel once the replies are in the children's histories */
  bool cancelled;
  size_t events_after_cancel;
} cx_t;

static void cancel_at_third_bash(fx_t *f, const al_event_t *ev,
                                 const json_t *j) {
  cx_t *c = f->user;

  (void)j;
  if (ev->type == AL_EVENT_TOOL_USE_STARTED && ev->path != NULL &&
      ev->u.tool.name.len == 4 && memcmp(ev->u.tool.name.ptr, "bash", 4) == 0) {
    c->bash_started++;
  }
  if (ev->type == AL_EVENT_USAGE && ev->path != NULL) {
    c->usages++; /* a child's reply is in its history */
  }
  if (!c->cancelled && c->bash_started == 3 &&
      (!c->committed || c->usages == 3)) {
    c->cancelled = true;
    ASSERT_EQ(al_agent_cancel(f->agent), 0);
  }
}

typedef struct {
  uv_timer_t t;
  const char *what; /* the command line looked for */
  int left;
  int polls;
  bool done;
} poll_t;

static void poll_procs(uv_timer_t *t) {
  poll_t *p = t->data;

  p->polls++;
  if (procs_with(p->what) == 0 || --p->left == 0) {
    p->done = true;
    uv_timer_stop(t);
  }
}

/* Every child's history commits (on_child), to check that none leaves a
 * tool_use without its result. */
static void hist_commit(al_agent_t *agent, al_commit_kind_t kind,
                        const char *message, size_t len, void *data) {
  json_t *m = json_loadb(message, len, 0, NULL);

  (void)agent;
  ASSERT_NOT_NULL(m);
  json_array_append_new(data, json_pack("{s:i, s:o}", "kind", (int)kind,
                                        "message", m));
}

static void hist_child(al_agent_t *parent, const al_child_info_t *info,
                       al_commit_cb *commit, void **commit_data, void *data) {
  (void)parent;
  (void)info;
  *commit = hist_commit;
  *commit_data = data;
}

/* Each tool_use id of the commits has a tool_result; returns how many. */
static size_t assert_commits_closed(const json_t *commits) {
  size_t i, k, uses = 0;
  json_t *c, *b;
  json_t *results = json_object();

  json_array_foreach(commits, i, c) {
    json_array_foreach(json_object_get(json_object_get(c, "message"),
                                       "content"),
                       k, b) {
      if (jstr(b, "type") != NULL &&
          strcmp(jstr(b, "type"), "tool_result") == 0) {
        json_object_set_new(results, jstr(b, "tool_use_id"), json_true());
      }
    }
  }
  json_array_foreach(commits, i, c) {
    json_array_foreach(json_object_get(json_object_get(c, "message"),
                                       "content"),
                       k, b) {
      if (jstr(b, "type") != NULL && strcmp(jstr(b, "type"), "tool_use") == 0) {
        uses++;
        if (json_object_get(results, jstr(b, "id")) == NULL) {
          AL_TEST_FAIL("child history: tool_use %s has no result",
                       jstr(b, "id"));
        }
      }
    }
  }
  json_decref(results);
  return uses;
}

/* Cancelling the parent while three children run bash (committed: their
 * replies are in their histories; else they still stream): every tool_use of
 * every level has its result, the parent's history has no open call,
 * nothing is posted after the cancel returns, and no child's process is
 * left running. */
static void cancel_three(bool committed) {
  fx_t f;
  cx_t c;
  poll_t p;
  char *hist = NULL;
  uint64_t t0;
  json_t *commits;
  char yaml[2048];
  /* Each variant its own command line: ctest runs the two side by side,
   * and the process count is machine-wide. */
  const char *cmd = committed ? "sleep 29.25" : "sleep 29.5";
  const char *tail = committed ? ""
                               : "        - text: 'still streaming'\n"
                                 "          chunks: 4\n"
                                 "          delay_ms: 2000\n";

  /* Three children, their bash calls and a poll of up to 5 s: sized for
   * a loaded 2-core machine. */
  al_test_timeout_s(20);
  memset(&c, 0, sizeof(c));
  c.committed = committed;
  snprintf(yaml, sizeof(yaml),
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q'}}\n"
          "        - tool_use: {id: k2, name: task, input: {description: b, "
          "prompt: 'CHILD-Q'}}\n"
          "        - tool_use: {id: k3, name: task, input: {description: c, "
          "prompt: 'CHILD-Q'}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {name: bash, input: {command: '%s'}}\n"
          "%s"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {name: bash, input: {command: '%s'}}\n"
          "%s"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {name: bash, input: {command: '%s'}}\n"
          "%s",
          cmd, tail, cmd, tail, cmd, tail);
  fx_init(&f, yaml);
  f.opts.sandbox = AL_SANDBOX_OFF;
  f.opts.task_parallel_writers = true;
  f.opts.on_child = hist_child;
  f.opts.child_data = commits = json_array();
  f.hook = cancel_at_third_bash;
  f.user = &c;
  fx_start(&f);
  fx_run(&f, "three at once");
  maybe_dump(&f);
  ASSERT(c.cancelled);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_NULL(jstr(fx_event(&f, (long)json_array_size(f.events) - 1), "path"));
  /* What the cancel posts (queued behind the event being delivered) ends
   * with the parent's interrupted; the count must not move after it. */
  c.events_after_cancel = json_array_size(f.events);
  ASSERT_EQ(count_path(&f, "interrupted", "t1"), 1);
  ASSERT_EQ(count_path(&f, "interrupted", "t3"), 1);
  ASSERT_EQ(count_path(&f, "subagent_completed", NULL), 3);
  ASSERT_STR_EQ(jstr(fx_event(&f, find_path(&f, "subagent_completed", NULL, 0)),
                     "outcome"),
                "cancelled");
  assert_no_orphans(&f);
  ASSERT_EQ(al_agent_history_json(f.agent, &hist), 0);
  ASSERT_NOT_NULL(strstr(hist, "operation cancelled by user"));
  al_free(hist);
  /* The children's own histories (their commits): no tool_use left
   * unanswered (cut mid-stream, their replies keep only the text; once
   * committed, each bash call has its cancelled result), and each has its
   * prompt. */
  ASSERT_EQ(assert_commits_closed(commits), committed ? 3 : 0);
  {
    size_t i, users = 0;
    json_t *cm;

    json_array_foreach(commits, i, cm) {
      users += json_integer_value(json_object_get(cm, "kind")) ==
               AL_COMMIT_USER;
    }
    ASSERT_GE(users, 3);
  }
  /* The children's processes: gone within a bounded wait (polled). */
  t0 = uv_hrtime();
  memset(&p, 0, sizeof(p));
  p.left = 5000; /* 5 s at 1 ms */
  p.what = cmd;
  uv_timer_init(&f.loop, &p.t);
  p.t.data = &p;
  uv_timer_start(&p.t, poll_procs, 0, 1);
  while (!p.done) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&p.t, NULL);
  ASSERT_EQ(procs_with(cmd), 0);
  fprintf(stderr, "task_cancel_three_children%s: processes gone %.1f ms "
                  "after the cancel\n",
          committed ? "_committed" : "", (double)(uv_hrtime() - t0) / 1e6);
  ASSERT_EQ(json_array_size(f.events), c.events_after_cancel);
  fx_finish(&f);
  json_decref(commits);
}

TEST_IMPL(task_cancel_three_children) {
  cancel_three(false);
  return 0;
}

TEST_IMPL(task_cancel_three_children_committed) {
  cancel_three(true);
  return 0;
}

/* ---- hooks -------------------------------------------------------------------- */

typedef struct {
  int start;
  int stop;
  int child_pre_tool;
  char stop_outcome[32];
} hk_t;

static void record_hook(al_agent_t *agent, const char *event,
                        const char *input_json, al_hook_reply_t *reply,
                        void *data) {
  hk_t *h = data;
  json_t *in = json_loads(input_json, 0, NULL);

  (void)agent;
  (void)reply;
  ASSERT_NOT_NULL(in);
  if (strcmp(event, "subagent_start") == 0) {
    h->start++;
    ASSERT_STR_EQ(jstr(in, "task_id"), "t1");
    ASSERT_STR_EQ(jstr(in, "agent"), "explore");
  } else if (strcmp(event, "subagent_stop") == 0) {
    h->stop++;
    snprintf(h->stop_outcome, sizeof(h->stop_outcome), "%s",
             jstr(in, "outcome"));
  } else if (strcmp(event, "pre_tool_use") == 0 &&
             strcmp(jstr(in, "session"), "s_test.t1") == 0) {
    h->child_pre_tool++; /* the child's own call, under the same hooks */
  }
  json_decref(in);
}

/* The parent's hooks run for its children's tool calls, and the
 * subagent_start / subagent_stop points fire around a child. */
TEST_IMPL(task_hooks_subagent_points) {
  fx_t f;
  hk_t h;

  memset(&h, 0, sizeof(h));
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q', agent: explore}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: r1, name: list_directory, input: {path: "
          "'.'}}\n"
          "  - reply: {content: [{text: 'listed'}]}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n");
  f.opts.hook = record_hook;
  f.opts.hook_data = &h;
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(h.start, 1);
  ASSERT_EQ(h.stop, 1);
  ASSERT_STR_EQ(h.stop_outcome, "completed");
  ASSERT_EQ(h.child_pre_tool, 1);
  ASSERT_STR_EQ(result_of(&f, "k1"), "listed");
  fx_finish(&f);
  return 0;
}

/* al_agent_task_cancel on a background child that runs a tool after its
 * parent's run ended: the child and its tool are cancelled at once, the
 * listing says so, and the cancelled result starts no run of the parent. */
TEST_IMPL(task_cancel_background_by_id) {
  fx_t f;
  probe_t pr;
  char *list = NULL;
  long c;

  memset(&pr, 0, sizeof(pr));
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: bg, "
          "prompt: 'BG-HANG', background: true}}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n"
          "tracks:\n"
          "  - match: {first_user_contains: 'BG-HANG'}\n"
          "    responses:\n"
          "      - reply:\n"
          "          content:\n"
          "            - tool_use: {id: h1, name: hang, input: {}}\n");
  fx_start(&f);
  add_probe(&f, "hang", AL_TOOL_READ, &pr);
  fx_run(&f, "start it");
  while (pr.hung == NULL) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0 || pr.hung != NULL);
  }
  ASSERT_EQ(al_agent_tasks_json(f.agent, &list), 0);
  ASSERT_NOT_NULL(strstr(list, "\"state\":\"running\""));
  al_free(list);
  ASSERT_EQ(al_agent_task_cancel(f.agent, "t1"), 0);
  ASSERT_EQ(pr.cancels, 1);
  ASSERT_EQ(al_agent_task_cancel(f.agent, "t1"), AL_ENOENT);
  ASSERT_EQ(al_agent_task_cancel(f.agent, "t9"), AL_ENOENT);
  ASSERT_EQ(al_agent_tasks_json(f.agent, &list), 0);
  ASSERT_NOT_NULL(strstr(list, "\"state\":\"cancelled\""));
  al_free(list);
  c = find_path(&f, "subagent_completed", NULL, 0);
  ASSERT(c >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "outcome"), "cancelled");
  ASSERT(!al_agent_running(f.agent));
  ASSERT_EQ(count_path(&f, "run_started", NULL), 1);
  assert_no_orphans(&f);
  fx_finish(&f);
  return 0;
}

/* ---- MCP through a child --------------------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#define TASK_MCP_SANDBOX ",\"sandbox\":false"
#else
#define TASK_MCP_SANDBOX ""
#endif

/* A child calls its parent's MCP tool: the same server process answers
 * (one server started in all), and the call's events are the child's
 * (re-posted with its path). */
TEST_IMPL(task_child_uses_parent_mcp_server) {
  fx_t f;
  char cfg[1024];
  long b;

  signal(SIGPIPE, SIG_IGN);
  snprintf(cfg, sizeof(cfg),
           "{\"mcpServers\":{\"f\":{\"command\":\"%s\",\"args\":[\"--helper\","
           "\"mcp_server\"]%s}}}",
           al_test_exe(), TASK_MCP_SANDBOX);
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q'}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: m1, name: mcp__f__echo, input: {text: "
          "'via the parent server'}}\n"
          "  - expect_request: {contains: 'via the parent server'}\n"
          "    reply: {content: [{text: 'child echoed'}]}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n");
  f.opts.mcp_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(result_of(&f, "k1"), "child echoed");
  b = find_path(&f, "mcp_tool_call_begin", "t1", 0);
  ASSERT(b >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, b), "call_id"), "m1");
  ASSERT(find_path(&f, "mcp_tool_call_end", "t1", 0) > b);
  ASSERT_EQ(count_path(&f, "mcp_tool_call_begin", NULL), 0);
  ASSERT_EQ(count_path(&f, "mcp_server_state", NULL), 2); /* starting, ready */
  ASSERT_EQ(count_path(&f, "mcp_server_state", "t1"), 0);
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- on_child and nesting ------------------------------------------------------- */

typedef struct {
  int children;
  char info[512];
  al_buf_t commits; /* the children's commit records, one per line */
} oc_t;

static void child_commit(al_agent_t *agent, al_commit_kind_t kind,
                         const char *message, size_t len, void *data) {
  oc_t *o = data;

  al_buf_printf(&o->commits, "%s %d %.*s\n", al_agent_session(agent),
                (int)kind, (int)len, message);
}

static void on_child(al_agent_t *parent, const al_child_info_t *info,
                     al_commit_cb *commit, void **commit_data, void *data) {
  oc_t *o = data;

  if (o->children++ == 0) {
    snprintf(o->info, sizeof(o->info), "%s %s %s %s %s %d %u",
             info->task_id, info->session_id, info->parent_session,
             info->parent_call, info->agent, (int)info->background,
             info->depth);
    ASSERT_STR_EQ(al_agent_session(parent), "s_test");
  }
  *commit = child_commit;
  *commit_data = o;
}

/* A grandchild (default depth 2): its events reach the top with path
 * "t1/t1", its own task call gets the depth error; on_child gives each
 * child its own commit hook (its transcript), told who its parent is. */
TEST_IMPL(task_grandchild_and_on_child) {
  fx_t f;
  oc_t o;
  long g;

  memset(&o, 0, sizeof(o));
  al_buf_init(&o.commits, 1 << 20);
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q', agent: general}}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n"
          "tracks:\n"
          "  - match: {first_user_contains: 'GRAND-Q'}\n"
          "    responses:\n"
          "      - reply:\n"
          "          content:\n"
          "            - tool_use: {id: d1, name: task, input: {description: "
          "x, prompt: 'TOO-DEEP'}}\n"
          "      - reply: {content: [{text: 'grand answer'}]}\n"
          "  - match: {first_user_contains: 'CHILD-Q'}\n"
          "    responses:\n"
          "      - reply:\n"
          "          content:\n"
          "            - tool_use: {id: c1, name: task, input: {description: "
          "b, prompt: 'GRAND-Q'}}\n"
          "      - expect_request: {contains: 'grand answer'}\n"
          "        reply: {content: [{text: 'child answer'}]}\n");
  f.opts.on_child = on_child;
  f.opts.child_data = &o;
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(result_of(&f, "k1"), "child answer");
  ASSERT_EQ(o.children, 2);
  ASSERT_STR_EQ(o.info, "t1 s_test.t1 s_test k1 general 0 1");
  /* The grandchild's events carry the whole path. */
  g = find_path(&f, "subagent_started", "t1", 0);
  ASSERT(g >= 0);
  ASSERT_EQ(json_integer_value(json_object_get(fx_event(&f, g), "depth")), 2);
  ASSERT(find_path(&f, "final", "t1/t1", 0) > g);
  g = find_path(&f, "tool_use_completed", "t1/t1", 0);
  ASSERT(g >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, g), "content"),
                "Agent depth limit reached. Solve the task yourself.");
  ASSERT_STR_EQ(jstr(fx_event(&f, find_path(&f, "final", "t1/t1", 0)),
                     "session"),
                "s_test.t1.t1");
  /* Each child's own transcript: its prompt and its answer. */
  ASSERT_NOT_NULL(strstr(o.commits.data, "s_test.t1 0 "));
  ASSERT_NOT_NULL(strstr(o.commits.data, "GRAND-Q"));
  ASSERT_NOT_NULL(strstr(o.commits.data, "s_test.t1.t1 1 "));
  ASSERT_NOT_NULL(strstr(o.commits.data, "grand answer"));
  assert_no_orphans(&f);
  fx_assert_valid(&f);
  fx_finish(&f);
  al_buf_free(&o.commits);
  return 0;
}

/* A definition from the options: its system prompt followed by the
 * preamble, its allowlist (a name the parent lacks is not given), its
 * max_turns (the child's summary is the result, outcome max_turns), and a
 * permission mode looser than the parent's taken as the parent's. */
TEST_IMPL(task_custom_agent_max_turns) {
  fx_t f;
  static const char *const tools[] = {"list_directory", "no_such_tool", "adm",
                                      NULL};
  al_subagent_def_t def;
  probe_t pr;
  long r, c;

  memset(&def, 0, sizeof(def));
  def.name = "one-turn";
  def.description = "lists once";
  def.system = "CUSTOM-SYSTEM-PROMPT";
  def.tools = tools;
  def.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  def.max_turns = 1;
  def.source = "test";
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q', agent: one-turn}}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n"
          "tracks:\n"
          "  - match: {system_contains: 'CUSTOM-SYSTEM-PROMPT'}\n"
          "    responses:\n"
          "      - reply:\n"
          "          content:\n"
          "            - tool_use: {id: l1, name: list_directory, input: "
          "{path: '.'}}\n"
          "            - tool_use: {id: a1, name: adm, input: {}}\n"
          "      - expect_request: {contains: 'maximum number of turns'}\n"
          "        reply: {content: [{text: 'summary of the child'}]}\n");
  f.opts.subagents = &def;
  f.opts.n_subagents = 1;
  f.opts.task_preamble = "PREAMBLE-X";
  f.opts.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  memset(&pr, 0, sizeof(pr));
  fx_start(&f);
  add_probe(&f, "adm", AL_TOOL_ADMIN, &pr);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(result_of(&f, "k1"), "summary of the child");
  c = find_path(&f, "subagent_completed", NULL, 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "outcome"), "max_turns");
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "agent"), "one-turn");
  r = fx_request_with(&f, "CHILD-Q");
  ASSERT(r >= 1);
  {
    char *sys = json_dumps(json_object_get(fx_request(&f, (size_t)r)->body,
                                           "system"),
                           JSON_ENCODE_ANY);

    ASSERT_NOT_NULL(strstr(sys, "CUSTOM-SYSTEM-PROMPT\\n\\nPREAMBLE-X"));
    free(sys);
  }
  ASSERT(fx_offers(&f, (size_t)r, "list_directory"));
  ASSERT(!fx_offers(&f, (size_t)r, "read_file"));
  ASSERT(!fx_offers(&f, (size_t)r, "no_such_tool"));
  /* Headless like its parent, not the definition's interactive: the admin
   * tool is refused, never asked. */
  ASSERT_EQ(pr.runs, 0);
  ASSERT_EQ(count_path(&f, "approval_required", "t1"), 0);
  c = fx_find(&f, "tool_use_completed", "a1", 0);
  ASSERT(c >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "path"), "t1");
  ASSERT(json_is_true(json_object_get(fx_event(&f, c), "is_error")));
  /* The parent's task listing names it. */
  {
    char *tools0 = json_dumps(json_object_get(fx_request(&f, 0)->body,
                                              "tools"),
                              0);

    ASSERT_NOT_NULL(strstr(tools0, "- one-turn: lists once"));
    ASSERT_NOT_NULL(strstr(tools0, "- explore: "));
    free(tools0);
  }
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* The task tool's description lists explore, general, then the
 * definitions, within its budget: past it the rest are named only. */
TEST_IMPL(task_listing_within_budget) {
  fx_t f;
  al_subagent_def_t defs[40];
  char names[40][16];
  char desc[200];
  char *tools = NULL;
  json_t *j, *t;
  const char *text = NULL;
  size_t i;

  memset(defs, 0, sizeof(defs));
  memset(desc, 'd', sizeof(desc) - 1);
  desc[sizeof(desc) - 1] = '\0';
  for (i = 0; i < 40; i++) {
    snprintf(names[i], sizeof(names[i]), "agent-%02zu", i);
    defs[i].name = names[i];
    defs[i].description = desc;
    defs[i].permission_mode = -1;
  }
  fx_init(&f, NULL);
  f.opts.subagents = defs;
  f.opts.n_subagents = 40;
  fx_start(&f);
  ASSERT_EQ(al_agent_tools_json(f.agent, &tools), 0);
  j = json_loads(tools, 0, NULL);
  json_array_foreach(json_object_get(j, "tools"), i, t) {
    if (strcmp(jstr(t, "name"), "task") == 0) {
      text = jstr(t, "description");
    }
  }
  ASSERT_NOT_NULL(text);
  ASSERT(strstr(text, "\n- explore: ") < strstr(text, "\n- general: "));
  ASSERT(strstr(text, "\n- general: ") < strstr(text, "\n- agent-00: "));
  ASSERT_NOT_NULL(strstr(text, "\xe2\x80\xa6 and "));
  ASSERT_NOT_NULL(strstr(text, "agent-39"));
  ASSERT_NULL(strstr(text, "- agent-39:"));
  ASSERT_LE(strlen(strstr(text, "Agents:")), 2 * 2048 + 64);
  json_decref(j);
  al_free(tools);
  fx_finish(&f);
  return 0;
}

/* A model used to Claude Code's Agent tool names the agent subagent_type
 * (with its names for the built-ins) and the background flag
 * run_in_background: it gets the agent it asked for. */
TEST_IMPL(task_claude_code_input_names) {
  fx_t f;
  long s;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-E', subagent_type: Explore}}\n"
          "        - tool_use: {id: k2, name: task, input: {description: b, "
          "prompt: 'CHILD-G', subagent_type: general-purpose, "
          "run_in_background: true}}\n"
          "  - reply: {content: [{text: 'parent done'}]}\n"
          "tracks:\n"
          "  - match: {first_user_contains: CHILD-E}\n"
          "    responses: [{reply: {content: [{text: 'explored'}]}}]\n"
          "  - match: {first_user_contains: CHILD-G}\n"
          "    responses: [{reply: {content: [{text: 'general done'}]}}]\n");
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  s = fx_find(&f, "subagent_started", "k1", 0);
  ASSERT(s >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, s), "agent"), "explore");
  ASSERT_STR_EQ(result_of(&f, "k1"), "explored");
  s = fx_find(&f, "subagent_started", "k2", 0);
  ASSERT(s >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, s), "agent"), "general");
  ASSERT(json_is_true(json_object_get(fx_event(&f, s), "background")));
  ASSERT_NOT_NULL(strstr(result_of(&f, "k2"), "\"task_id\""));
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* A child takes its parent's context settings, not the defaults: with the
 * parent's max_messages, a child's long conversation is trimmed too (a
 * compaction with the child's path), and no child request holds more. */
TEST_IMPL(task_child_inherits_context_settings) {
  fx_t f;
  size_t i;
  al_buf_t y;
  int k;
  long c;

  al_buf_init(&y, 1 << 16);
  al_buf_append_str(&y,
                    "responses:\n"
                    "  - reply:\n"
                    "      content:\n"
                    "        - tool_use: {id: k1, name: task, input: "
                    "{description: a, prompt: 'CHILD-M'}}\n"
                    "  - reply: {content: [{text: 'parent done'}]}\n"
                    "tracks:\n"
                    "  - match: {first_user_contains: CHILD-M}\n"
                    "    responses:\n");
  for (k = 1; k <= 6; k++) {
    al_buf_printf(&y, "      - reply: {content: [{tool_use: {id: c%d, name: "
                      "list_directory, input: {path: .}}}]}\n", k);
  }
  al_buf_append_str(&y, "      - reply: {content: [{text: 'child done'}]}\n");
  fx_init(&f, y.data);
  al_buf_free(&y);
  f.opts.max_messages = 5;
  f.opts.micro_min_tokens = -1;
  fx_start(&f);
  fx_run(&f, "go");
  maybe_dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(result_of(&f, "k1"), "child done");
  c = find_path(&f, "compaction_completed", "t1", 0);
  ASSERT(c >= 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, c), "trigger"), "max_messages");
  for (i = 0; i < fx_requests(&f); i++) {
    ASSERT_LE(json_array_size(json_object_get(fx_request(&f, i)->body,
                                              "messages")),
              5);
  }
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* spawn() in src/loop/task.c decides, option by option, what a child takes
 * from its parent. A new option changes the size below: decide there
 * whether a child inherits it (and list it in the comment above the
 * mapping), then update the number (LP64's). */
TEST_IMPL(task_child_options_tripwire) {
  if (sizeof(void *) == 8) {
    ASSERT_EQ(sizeof(al_agent_options_t), 616);
  }
  return 0;
}
