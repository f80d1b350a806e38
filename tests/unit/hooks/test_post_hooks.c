/* post_tool_use hooks per call (docs/hooks.md): a call's hooks start as
 * soon as its result arrives, while the turn's other calls still run; each
 * call's replace / context / withhold applies to that call only; a hook
 * that fails or times out withholds only its call's result (on_failure:
 * deny); the in-process callback is asked once per call; a cancel while a
 * post hook runs gives the call the cancelled result, kills the hook, and
 * nothing fires after. Ordering is proven with events, never with sleeps.
 * The model is agentloop-mockllm; hooks are small sh scripts. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "loop/history.h"
#include "test.h"
#include "unit/loop/agent_fx.h"

#define jstr fx_jstr

/* {"hooks":{"post_tool_use":[{name, command: [sh, -c, script], extra}]}} */
static char *post_cfg(const char *name, const char *script,
                      const char *extra) {
  json_t *h = json_pack("{s:s, s:[s,s,s]}", "name", name, "command", "sh",
                        "-c", script);
  json_t *root;
  char *s;

  if (extra != NULL) {
    json_t *e = json_loads(extra, 0, NULL);

    ASSERT_NOT_NULL(e);
    json_object_update(h, e);
    json_decref(e);
  }
  root = json_pack("{s:{s:[o]}}", "hooks", "post_tool_use", h);
  s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return s;
}

static void dump(const fx_t *f) {
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

static bool is_err(const json_t *r) {
  return json_is_true(json_object_get(r, "is_error"));
}

/* ---- per-call timing ---------------------------------------------------------- */

/* "slow" finishes only once the post hook of the "fast" call has decided
 * (or, if hooks waited for the whole turn, at its own timeout: then the
 * order checks below fail). */
static al_tool_ctx_t *slow_ctx;
static bool fast_hooked;

static void fast_run(al_tool_ctx_t *ctx, void *data) {
  (void)data;
  al_tool_ctx_complete(ctx, false, "fast result", 11);
}

static void slow_run(al_tool_ctx_t *ctx, void *data) {
  (void)data;
  if (fast_hooked) {
    al_tool_ctx_complete(ctx, false, "slow result", 11);
    return;
  }
  slow_ctx = ctx;
}

static void slow_cancel(al_tool_ctx_t *ctx, void *data) {
  (void)data;
  if (ctx == slow_ctx) {
    slow_ctx = NULL;
  }
}

static void timing_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)f;
  if (ev->type == AL_EVENT_HOOK_EXECUTED &&
      strcmp(jstr(j, "call_id"), "a") == 0) {
    fast_hooked = true;
    if (slow_ctx != NULL) {
      al_tool_ctx_t *c = slow_ctx;

      slow_ctx = NULL;
      al_tool_ctx_complete(c, false, "slow result", 11);
    }
  }
}

static void add_tool(fx_t *f, const char *name, void (*run)(al_tool_ctx_t *,
                                                            void *),
                     uint64_t timeout_ms) {
  al_tool_def_t def;

  memset(&def, 0, sizeof(def));
  def.name = name;
  def.description = name;
  def.run = run;
  def.cancel = slow_cancel;
  def.category = AL_TOOL_READ;
  def.concurrency_safe = true;
  def.timeout_ms = timeout_ms;
  ASSERT_EQ(al_agent_add_tool(f->agent, &def), 0);
}

TEST_IMPL(post_hooks_run_per_call) {
  fx_t f;
  char *cfg = post_cfg("ctx", "cat >/dev/null; echo "
                              "'{\"additional_context\":\"A checked\"}'",
                       "{\"matcher\":\"fast\"}");
  long hook_a, done_a, done_b, um;
  const json_t *results;

  signal(SIGPIPE, SIG_IGN);
  slow_ctx = NULL;
  fast_hooked = false;
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: b, name: slow, input: {}}\n"
              "        - tool_use: {id: a, name: fast, input: {}}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.hooks_config = cfg;
  f.hook = timing_hook;
  fx_start(&f);
  add_tool(&f, "fast", fast_run, 0);
  add_tool(&f, "slow", slow_run,
           2000 * (uint64_t)al_test_timeout_multiplier());
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  done_a = fx_find(&f, "tool_use_completed", "a", 0);
  hook_a = fx_find(&f, "hook_executed", "a", 0);
  done_b = fx_find(&f, "tool_use_completed", "b", 0);
  um = fx_find(&f, "user_message", NULL, 1);
  /* A's hook ran after A's result and decided while B was still running. */
  ASSERT(done_a >= 0 && hook_a > done_a);
  ASSERT(done_b > hook_a);
  ASSERT(!is_err(fx_event(&f, done_b))); /* B finished, not timed out */
  ASSERT(um > done_b);
  /* Committed in tool_use order (b, a), A with its context. */
  results = json_object_get(fx_event(&f, um), "tool_results");
  ASSERT_STR_EQ(jstr(json_array_get(results, 0), "tool_use_id"), "b");
  ASSERT_STR_EQ(jstr(json_array_get(results, 1), "tool_use_id"), "a");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "a"), "content"),
                "fast result\n\n[hook context]\nA checked");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "b"), "content"), "slow result");
  ASSERT_EQ(fx_count(&f, "hook_executed"), 1);
  fx_assert_valid(&f);
  fx_finish(&f);
  free(cfg);
  return 0;
}

/* ---- decisions per call ---------------------------------------------------------- */

static const char two_lists[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: r1, name: list_directory, input: {path: '.'}}\n"
    "        - tool_use: {id: r2, name: list_directory, input: {path: '.'}}\n"
    "  - reply: {content: [{text: 'done'}]}\n";

/* The hook tells the calls apart by call_id in its input. */
TEST_IMPL(post_hooks_replace_and_context_per_call) {
  fx_t f;
  char *cfg = post_cfg(
      "per",
      "if grep -q '\"r1\"'; then echo '{\"replace_result\":\"R1 replaced\"}';"
      " else echo '{\"additional_context\":\"ctx for r2\"}'; fi",
      NULL);
  const char *c2;
  const char *suffix = "\n\n[hook context]\nctx for r2";

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, two_lists);
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "hook_executed"), 2);
  ASSERT(fx_find(&f, "hook_executed", "r1", 0) >= 0);
  ASSERT(fx_find(&f, "hook_executed", "r2", 0) >= 0);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "r1"), "content"), "R1 replaced");
  c2 = jstr(fx_tool_result(&f, 1, "r2"), "content");
  ASSERT(strlen(c2) > strlen(suffix));
  ASSERT_STR_EQ(c2 + strlen(c2) - strlen(suffix), suffix);
  ASSERT_NULL(strstr(c2, "R1 replaced"));
  fx_assert_valid(&f);
  fx_finish(&f);
  free(cfg);
  return 0;
}

/* on_failure: deny: a hook that fails (exit 1) or times out withholds that
 * call's result only; the other call's passes. */
static void fail_closed(const char *script, const char *extra,
                        const char *outcome) {
  fx_t f;
  char *cfg = post_cfg("scrub", script, extra);
  const json_t *r1, *r2, *h1;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, two_lists);
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  dump(&f);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  r1 = fx_tool_result(&f, 1, "r1");
  r2 = fx_tool_result(&f, 1, "r2");
  ASSERT(is_err(r1));
  ASSERT_NOT_NULL(strstr(jstr(r1, "content"),
                         "the result of tool 'list_directory' was withheld by "
                         "hook 'scrub'"));
  ASSERT(!is_err(r2));
  ASSERT_NULL(strstr(jstr(r2, "content"), "withheld"));
  h1 = fx_event(&f, fx_find(&f, "hook_executed", "r1", 0));
  ASSERT_STR_EQ(jstr(h1, "outcome"), outcome);
  ASSERT_STR_EQ(jstr(h1, "decision"), "deny");
  ASSERT_STR_EQ(jstr(fx_event(&f, fx_find(&f, "hook_executed", "r2", 0)),
                     "decision"),
                "none");
  fx_finish(&f);
  free(cfg);
}

TEST_IMPL(post_hooks_fail_closed_per_call) {
  fail_closed("if grep -q '\"r1\"'; then exit 1; fi; exit 0",
              "{\"on_failure\":\"deny\"}", "exit");
  /* The shell is killed at the timeout (its sleep with it: the group). */
  fail_closed("if grep -q '\"r1\"'; then exec sleep 30; fi; exit 0",
              "{\"on_failure\":\"deny\",\"timeout_ms\":300}", "timeout");
  /* The default, as for pre_tool_use: a guard that fails blocks. */
  fail_closed("if grep -q '\"r1\"'; then exit 1; fi; exit 0", "{}", "exit");
  fail_closed("if grep -q '\"r1\"'; then exec sleep 30; fi; exit 0",
              "{\"timeout_ms\":300}", "timeout");
  return 0;
}

/* ---- the in-process callback ------------------------------------------------------- */

static char cb_seen[256];

static void c_post(al_agent_t *agent, const char *event, const char *input,
                   al_hook_reply_t *reply, void *data) {
  json_t *j = json_loads(input, 0, NULL);
  const char *id = jstr(json_object_get(j, "tool"), "call_id");

  (void)agent;
  (void)data;
  if (strcmp(event, "post_tool_use") == 0) {
    strncat(cb_seen, id, sizeof(cb_seen) - strlen(cb_seen) - 2);
    strcat(cb_seen, ",");
    if (strcmp(id, "r2") == 0) {
      reply->replace = al_strdup("replaced by C");
    }
  }
  json_decref(j);
}

TEST_IMPL(post_hooks_c_callback_per_call) {
  fx_t f;

  signal(SIGPIPE, SIG_IGN);
  cb_seen[0] = '\0';
  fx_init(&f, two_lists);
  f.opts.hook = c_post;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  /* Once per call, in completion order (both are quick reads). */
  ASSERT(strcmp(cb_seen, "r1,r2,") == 0 || strcmp(cb_seen, "r2,r1,") == 0);
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "r2"), "content"), "replaced by C");
  ASSERT_NULL(strstr(jstr(fx_tool_result(&f, 1, "r1"), "content"),
                     "replaced by C"));
  fx_finish(&f);
  return 0;
}

/* ---- cancel while a post hook runs ------------------------------------------------- */

/* The hook writes its pid (renamed into place, so it is whole) and then
 * waits; the test cancels when the file appears (an inotify event). */
static uv_fs_event_t watch;
static bool cancelled;

static void on_watch(uv_fs_event_t *h, const char *name, int events, int st) {
  fx_t *f = h->data;

  (void)events;
  if (st == 0 && name != NULL && strcmp(name, "hookpid") == 0 && !cancelled) {
    cancelled = true;
    uv_fs_event_stop(h);
    ASSERT_EQ(al_agent_cancel(f->agent), 0);
  }
}

TEST_IMPL(post_hooks_cancel_kills_hook) {
  fx_t f;
  char *cfg = post_cfg("waits",
                       "cat >/dev/null; echo $$ > hookpid.tmp; "
                       "mv hookpid.tmp hookpid; exec sleep 30",
                       "{\"sandbox\":false,\"timeout_ms\":60000}");
  char p[512];
  char *pid_text;
  size_t n, i;
  long intr, second;
  int pid;
  json_t *e;

  signal(SIGPIPE, SIG_IGN);
  cancelled = false;
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: list_directory, input: {path: '.'}}}]}\n"
              "  - reply: {content: [{text: 'after'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  ASSERT_EQ(uv_fs_event_init(&f.loop, &watch), 0);
  watch.data = &f;
  ASSERT_EQ(uv_fs_event_start(&watch, on_watch, f.workspace, 0), 0);
  fx_run(&f, "go");
  dump(&f);
  ASSERT(cancelled);
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_EQ(fx_count(&f, "hook_executed"), 0);
  /* The held result was reported again as cancelled, before interrupted. */
  intr = fx_find(&f, "interrupted", NULL, 0);
  second = fx_find(&f, "tool_use_completed", "r1", 1);
  ASSERT(second >= 0 && second < intr);
  ASSERT_STR_EQ(jstr(fx_event(&f, second), "reason"), "user_interrupted");
  snprintf(p, sizeof(p), "%s/hookpid", f.workspace);
  pid_text = al_test_read_file(p, &n);
  ASSERT_NOT_NULL(pid_text);
  pid = atoi(pid_text);
  free(pid_text);
  ASSERT(pid > 0);
  /* The next run sends the cancelled result, not the listing. */
  fx_run(&f, "next");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "r1"), "content"),
                AL_HISTORY_CANCELLED_TEXT);
  /* Nothing of the first run came after its interrupted. */
  json_array_foreach(f.events, i, e) {
    if ((long)i > intr && (long)i < fx_find(&f, "run_started", NULL, 1)) {
      AL_TEST_FAIL("event after interrupted: %s", jstr(e, "type"));
    }
  }
  uv_close((uv_handle_t *)&watch, NULL);
  fx_finish(&f); /* waits until the hook's process is reaped */
  ASSERT(kill(pid, 0) != 0 && errno == ESRCH);
  free(cfg);
  return 0;
}
