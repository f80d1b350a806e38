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

/* The tool names request i offered. */
static bool offers(const fx_t *f, size_t i, const char *name) {
  const json_t *tools = json_object_get(fx_request(f, i)->body, "tools");
  size_t k;
  json_t *t;

  json_array_foreach(tools, k, t) {
    if (strcmp(jstr(t, "name"), name) == 0) {
      return true;
    }
  }
  return false;
}

/* The request whose body contains marker (-1: none). */
static long request_with(const fx_t *f, const char *marker) {
  size_t i;

  for (i = 0; i < fx_requests(f); i++) {
    char *s = json_dumps(fx_request(f, i)->body, JSON_COMPACT);
    bool hit = strstr(s, marker) != NULL;

    free(s);
    if (hit) {
      return (long)i;
    }
  }
  return -1;
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
  r = request_with(&f, "CHILD-Q one");
  ASSERT(r >= 1);
  ASSERT(offers(&f, (size_t)r, "read_file"));
  ASSERT(!offers(&f, (size_t)r, "bash"));
  ASSERT(!offers(&f, (size_t)r, "write_file"));
  ASSERT(!offers(&f, (size_t)r, "task"));
  ASSERT(offers(&f, 0, "task"));
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
  r = request_with(&f, "FORK-CHILD");
  ASSERT(r >= 1);
  ASSERT_EQ(request_with(&f, "PARENT-SECRET-CONTEXT"), 0);
  ASSERT(request_with(&f, "FORK-CHILD") == r);
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
  r = request_with(&f, "Background task t1");
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

static void close_when_child_asks(fx_t *f, const al_event_t *ev,
                                  const json_t *j) {
  closer_t *c = f->user;

  (void)j;
  if (ev->type == AL_EVENT_STREAM_REQUEST_START && ev->path != NULL &&
      f->agent != NULL) {
    al_agent_close(f->agent, on_closed);
    f->agent = NULL;
    c->events_at_close = json_array_size(f->events);
  }
}

/* Closing a parent whose background child streams: the child is cancelled
 * and closed first, the parent's close callback comes, and nothing is
 * posted after the close. */
TEST_IMPL(task_close_with_background_child) {
  fx_t f;
  closer_t c;

  memset(&c, 0, sizeof(c));
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: bg, "
          "prompt: 'BG-CHILD', background: true}}\n"
          "  - first_byte_delay_ms: 3000\n"
          "    reply: {content: [{text: 'slow'}]}\n"
          "  - first_byte_delay_ms: 3000\n"
          "    reply: {content: [{text: 'slow'}]}\n");
  f.hook = close_when_child_asks;
  f.user = &c;
  fx_start(&f);
  ASSERT_EQ(al_agent_run(f.agent, "start it"), 0);
  while (!c.closed) {
    ASSERT(uv_run(&f.loop, UV_RUN_ONCE) != 0 || c.closed);
  }
  maybe_dump(&f);
  ASSERT(c.events_at_close > 0);
  /* The close's own cancel posts the parent's interrupted (queued behind
   * the event being delivered); nothing of the child comes after it. */
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_NULL(jstr(fx_event(&f, (long)json_array_size(f.events) - 1), "path"));
  ASSERT_EQ(count_path(&f, "subagent_started", NULL), 1);
  ASSERT_EQ(count_path(&f, "subagent_completed", NULL), 0);
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
  bool cancelled;
  size_t events_after_cancel;
} cx_t;

static void cancel_at_third_bash(fx_t *f, const al_event_t *ev,
                                 const json_t *j) {
  cx_t *c = f->user;

  (void)j;
  if (ev->type == AL_EVENT_TOOL_USE_STARTED && ev->path != NULL &&
      ev->u.tool.name.len == 4 && memcmp(ev->u.tool.name.ptr, "bash", 4) == 0 &&
      ++c->bash_started == 3 && !c->cancelled) {
    c->cancelled = true;
    ASSERT_EQ(al_agent_cancel(f->agent), 0);
  }
}

typedef struct {
  uv_timer_t t;
  int left;
  int polls;
  bool done;
} poll_t;

static void poll_procs(uv_timer_t *t) {
  poll_t *p = t->data;

  p->polls++;
  if (procs_with("sleep 29.25") == 0 || --p->left == 0) {
    p->done = true;
    uv_timer_stop(t);
  }
}

/* Cancelling the parent while three children run bash: every tool_use of
 * every level has its result, the parent's history has no open call,
 * nothing is posted after the cancel returns, and no child's process is
 * left running. */
TEST_IMPL(task_cancel_three_children) {
  fx_t f;
  cx_t c;
  poll_t p;
  char *hist = NULL;
  uint64_t t0;

  memset(&c, 0, sizeof(c));
  fx_init(&f,
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
          "        - tool_use: {name: bash, input: {command: 'sleep 29.25'}}\n"
          "        - text: 'still streaming'\n"
          "          chunks: 4\n"
          "          delay_ms: 2000\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {name: bash, input: {command: 'sleep 29.25'}}\n"
          "        - text: 'still streaming'\n"
          "          chunks: 4\n"
          "          delay_ms: 2000\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {name: bash, input: {command: 'sleep 29.25'}}\n"
          "        - text: 'still streaming'\n"
          "          chunks: 4\n"
          "          delay_ms: 2000\n");
  f.opts.sandbox = AL_SANDBOX_OFF;
  f.opts.task_parallel_writers = true;
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
  /* The children's processes: gone within a bounded wait (polled). */
  t0 = uv_hrtime();
  memset(&p, 0, sizeof(p));
  p.left = 500; /* 5 s at 10 ms */
  uv_timer_init(&f.loop, &p.t);
  p.t.data = &p;
  uv_timer_start(&p.t, poll_procs, 0, 10);
  while (!p.done) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&p.t, NULL);
  ASSERT_EQ(procs_with("sleep 29.25"), 0);
  fprintf(stderr, "task_cancel_three_children: processes gone %.1f ms after "
                  "the cancel\n",
          (double)(uv_hrtime() - t0) / 1e6);
  ASSERT_EQ(json_array_size(f.events), c.events_after_cancel);
  fx_finish(&f);
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
