/* Hooks (docs/hooks.md) end to end through the agent: pre_tool_use
 * decisions (exit 2, JSON deny, ask, allow, rewrite, invalid rewrite),
 * failing closed on a non-zero exit, a timeout, a crash and bad output
 * (and open when configured so), matchers on names and categories,
 * combining several hooks, post_tool_use replace/context, the stop hook's
 * bounded continuation, the in-process callback, the JSON a hook reads,
 * and configuration errors. Hooks are small sh scripts; the model is
 * agentloop-mockllm. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "test.h"
#include "unit/loop/agent_fx.h"

#define jstr fx_jstr

static const char write_scn[] =
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: w1, name: write_file, input: "
    "{path: a.txt, content: hi}}}]}\n"
    "  - reply: {content: [{text: 'done'}]}\n";

/* {"hooks": {EVENT: [ {name, command: ["sh","-c",SCRIPT], extra...} ]}} */
static char *hook_cfg(const char *event, const char *name, const char *script,
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
  root = json_pack("{s:{s:[o]}}", "hooks", event, h);
  s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return s;
}

static const json_t *hook_event(const fx_t *f, size_t n) {
  long i = fx_find(f, "hook_executed", NULL, n);

  return i >= 0 ? fx_event(f, i) : NULL;
}

static bool exists(const fx_t *f, const char *rel) {
  char p[512];
  struct stat st;

  snprintf(p, sizeof(p), "%s/%s", f->workspace, rel);
  return stat(p, &st) == 0;
}

/* Runs write_scn with one pre_tool_use hook on write_file; returns the
 * tool result the model got (strdup'd) and whether it was an error. */
static char *run_write(const char *script, const char *extra, bool *is_error,
                       bool *created, json_t **hook_ev) {
  fx_t f;
  char *cfg = hook_cfg("pre_tool_use", "guard", script, extra);
  const json_t *r;
  char *out;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, write_scn);
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "write it");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  r = fx_tool_result(&f, 1, "w1");
  ASSERT_NOT_NULL(r);
  out = strdup(jstr(r, "content"));
  *is_error = json_is_true(json_object_get(r, "is_error"));
  *created = exists(&f, "a.txt");
  if (hook_ev != NULL) {
    *hook_ev = json_deep_copy(hook_event(&f, 0));
  }
  fx_finish(&f);
  free(cfg);
  return out;
}

TEST_IMPL(hooks_pre_exit2_denies_with_stderr) {
  bool err, created;
  json_t *ev;
  char *out = run_write("cat >/dev/null; echo 'no writes here' >&2; exit 2",
                        "{\"matcher\":\"write_file\"}", &err, &created, &ev);

  ASSERT(err);
  ASSERT(!created);
  ASSERT_STR_EQ(out, "Error: permission denied for tool 'write_file': denied "
                     "by hook 'guard': no writes here");
  ASSERT_STR_EQ(jstr(ev, "decision"), "deny");
  ASSERT_STR_EQ(jstr(ev, "outcome"), "exit");
  ASSERT_EQ(json_integer_value(json_object_get(ev, "exit_status")), 2);
  ASSERT_STR_EQ(jstr(ev, "event"), "pre_tool_use");
  ASSERT_STR_EQ(jstr(ev, "call_id"), "w1");
  json_decref(ev);
  free(out);
  return 0;
}

TEST_IMPL(hooks_pre_json_deny) {
  bool err, created;
  char *out = run_write(
      "cat >/dev/null; echo '{\"decision\":\"deny\",\"reason\":\"json says no\"}'",
      NULL, &err, &created, NULL);

  ASSERT(err && !created);
  ASSERT(strstr(out, "denied by hook 'guard': json says no") != NULL);
  free(out);
  /* Claude Code's shape is understood too. */
  out = run_write("cat >/dev/null; echo '{\"hookSpecificOutput\":{"
                  "\"permissionDecision\":\"deny\","
                  "\"permissionDecisionReason\":\"cc says no\"}}'",
                  NULL, &err, &created, NULL);
  ASSERT(err && !created);
  ASSERT(strstr(out, "cc says no") != NULL);
  free(out);
  return 0;
}

TEST_IMPL(hooks_pre_allow_runs_tool) {
  bool err, created;
  json_t *ev;
  char *out = run_write("cat >/dev/null; echo '{\"decision\":\"allow\"}'", NULL,
                        &err, &created, &ev);

  ASSERT(!err);
  ASSERT(created);
  ASSERT_STR_EQ(jstr(ev, "decision"), "allow");
  ASSERT_STR_EQ(jstr(ev, "outcome"), "ok");
  json_decref(ev);
  free(out);
  /* Exit 0 with nothing printed: no opinion, the tool runs. */
  out = run_write("cat >/dev/null", NULL, &err, &created, NULL);
  ASSERT(!err && created);
  free(out);
  return 0;
}

/* Fail closed: exit 1, a timeout, a crash and bad output all deny. */
TEST_IMPL(hooks_pre_failures_deny) {
  static const struct {
    const char *script;
    const char *extra;
    const char *outcome;
    const char *why;
  } cases[] = {
      {"cat >/dev/null; exit 1", NULL, "exit", "failed with exit status 1"},
      /* Unconfined, so the signal is ours to see (a sandbox wrapper turns
       * it into exit status 139, which fails closed the same way). */
      {"cat >/dev/null; kill -SEGV $$", "{\"sandbox\":false}", "crash",
       "died on signal 11"},
      {"cat >/dev/null; kill -SEGV $$", NULL, NULL, "hook 'guard'"},
      {"cat >/dev/null; echo 'this is not json'", NULL, "bad_output",
       "not a hook answer"},
      {"cat >/dev/null; echo '{\"decision\":\"maybe\"}'", NULL,
       "bad_output", "not a hook answer"},
  };
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(cases); i++) {
    bool err, created;
    json_t *ev;
    char *out = run_write(cases[i].script, cases[i].extra, &err, &created,
                          &ev);

    if (!err || created || strstr(out, cases[i].why) == NULL) {
      AL_TEST_FAIL("case %zu: %s", i, out);
    }
    if (cases[i].outcome != NULL) {
      ASSERT_STR_EQ(jstr(ev, "outcome"), cases[i].outcome);
    }
    ASSERT_STR_EQ(jstr(ev, "decision"), "deny");
    json_decref(ev);
    free(out);
  }
  return 0;
}

TEST_IMPL(hooks_pre_timeout_denies_and_kills) {
  bool err, created;
  json_t *ev;
  char extra[128];
  uint64_t t0 = uv_hrtime();
  char *out;
  int k = al_test_timeout_multiplier();

  snprintf(extra, sizeof(extra), "{\"timeout_ms\":%d}", 200 * k);
  /* The hook's child keeps the group alive: the whole group is killed. */
  out = run_write("sleep 30 & sleep 30", extra, &err, &created, &ev);
  ASSERT(err && !created);
  ASSERT(strstr(out, "timed out after") != NULL);
  ASSERT_STR_EQ(jstr(ev, "outcome"), "timeout");
  ASSERT((uv_hrtime() - t0) / 1000000 < (uint64_t)(200 * k + 5000));
  json_decref(ev);
  free(out);
  return 0;
}

/* ask: an approval even for a write tool the policy allows; a run that
 * cannot ask (headless) denies. */
static void approve_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  if (ev->type == AL_EVENT_APPROVAL_REQUIRED) {
    ASSERT_EQ(al_agent_approve(f->agent, jstr(j, "request"), AL_APPROVE_ALLOW),
              0);
  }
}

TEST_IMPL(hooks_pre_ask) {
  char *cfg = hook_cfg("pre_tool_use", "asker",
                       "cat >/dev/null; echo '{\"decision\":\"ask\"}'", NULL);
  int mode;

  signal(SIGPIPE, SIG_IGN);
  for (mode = 0; mode < 2; mode++) {
    fx_t f;
    const char *content;

    fx_init(&f, write_scn);
    f.opts.hooks_config = cfg;
    f.opts.permission_mode = mode == 0 ? AL_PERMISSION_MODE_INTERACTIVE
                                       : AL_PERMISSION_MODE_HEADLESS;
    f.hook = approve_hook;
    fx_start(&f);
    fx_run(&f, "write it");
    content = jstr(fx_tool_result(&f, 1, "w1"), "content");
    if (mode == 0) {
      ASSERT_EQ(fx_count(&f, "approval_required"), 1);
      ASSERT(exists(&f, "a.txt"));
    } else {
      ASSERT_EQ(fx_count(&f, "approval_required"), 0);
      ASSERT(!exists(&f, "a.txt"));
      ASSERT(strstr(content, "a hook asks for an approval and this run "
                             "cannot ask") != NULL);
    }
    fx_finish(&f);
  }
  free(cfg);
  return 0;
}

TEST_IMPL(hooks_on_failure_allow_is_opt_in) {
  bool err, created;
  char *out = run_write("cat >/dev/null; exit 1", "{\"on_failure\":\"allow\"}",
                        &err, &created, NULL);

  ASSERT(!err);
  ASSERT(created);
  free(out);
  return 0;
}

TEST_IMPL(hooks_pre_rewrite_seen_by_tool) {
  bool err, created;
  json_t *ev;
  char *out = run_write(
      "cat >/dev/null; echo '{\"decision\":\"allow\",\"updated_input\":"
      "{\"path\":\"a.txt\",\"content\":\"rewritten\"}}'",
      NULL, &err, &created, &ev);

  ASSERT(!err && created);
  ASSERT_STR_EQ(jstr(ev, "decision"), "rewrite");
  json_decref(ev);
  free(out);
  return 0;
}

TEST_IMPL(hooks_pre_rewrite_content_checked) {
  fx_t f;
  char *cfg = hook_cfg("pre_tool_use", "rw",
                       "cat >/dev/null; echo '{\"updated_input\":{\"path\":"
                       "\"b.txt\",\"content\":\"rewritten\"}}'",
                       NULL);
  char p[512];
  size_t n;
  char *content;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, write_scn);
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "write it");
  ASSERT(!exists(&f, "a.txt"));
  snprintf(p, sizeof(p), "%s/b.txt", f.workspace);
  content = al_test_read_file(p, &n);
  ASSERT_NOT_NULL(content);
  ASSERT_STR_EQ(content, "rewritten");
  free(content);
  fx_finish(&f);
  free(cfg);
  return 0;
}

TEST_IMPL(hooks_pre_invalid_rewrite_denies) {
  bool err, created;
  char *out = run_write(
      "cat >/dev/null; echo '{\"updated_input\":{\"path\":5}}'", NULL, &err,
      &created, NULL);

  ASSERT(err && !created);
  ASSERT(strstr(out, "rewrote its input into something invalid") != NULL);
  free(out);
  return 0;
}

/* allow + deny -> deny; both ran (two hook_executed). */
TEST_IMPL(hooks_pre_combined_deny_wins) {
  fx_t f;
  const char *cfg =
      "{\"hooks\":{\"pre_tool_use\":["
      "{\"name\":\"yes\",\"command\":[\"sh\",\"-c\",\"cat >/dev/null; echo "
      "'{\\\"decision\\\":\\\"allow\\\"}'\"]},"
      "{\"name\":\"no\",\"command\":[\"sh\",\"-c\",\"cat >/dev/null; exit 2\"]}"
      "]}}";

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, write_scn);
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "write it");
  ASSERT(!exists(&f, "a.txt"));
  ASSERT(strstr(jstr(fx_tool_result(&f, 1, "w1"), "content"),
                "denied by hook 'no'") != NULL);
  ASSERT_EQ(fx_count(&f, "hook_executed"), 2);
  fx_finish(&f);
  return 0;
}

/* A category matcher covers every write tool: bash and write_file alike,
 * not read_file. */
TEST_IMPL(hooks_category_matcher_covers_bash) {
  fx_t f;
  char *cfg = hook_cfg("pre_tool_use", "writes", "cat >/dev/null; exit 2",
                       "{\"category\":\"write\"}");

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: b1, name: bash, input: "
              "{command: 'echo hi > c.txt'}}}]}\n"
              "  - reply: {content: [{tool_use: {id: w1, name: write_file, "
              "input: {path: a.txt, content: hi}}}]}\n"
              "  - reply: {content: [{tool_use: {id: r1, name: list_directory, "
              "input: {}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.hooks_config = cfg;
  f.opts.sandbox = AL_SANDBOX_OFF;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT(json_is_true(json_object_get(fx_tool_result(&f, 1, "b1"), "is_error")));
  ASSERT(json_is_true(json_object_get(fx_tool_result(&f, 2, "w1"), "is_error")));
  ASSERT(!json_is_true(json_object_get(fx_tool_result(&f, 3, "r1"), "is_error")));
  ASSERT(!exists(&f, "c.txt") && !exists(&f, "a.txt"));
  ASSERT_EQ(fx_count(&f, "hook_executed"), 2);
  fx_finish(&f);
  free(cfg);
  return 0;
}

/* The JSON on stdin: event, session, cwd, tool{name, call_id, input,
 * category}. */
TEST_IMPL(hooks_input_json) {
  fx_t f;
  char *cfg = hook_cfg("pre_tool_use", "spy", "cat > hook_input.json", NULL);
  char p[512];
  size_t n;
  char *text;
  json_t *j;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: list_directory, "
              "input: {path: '.'}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  snprintf(p, sizeof(p), "%s/hook_input.json", f.workspace);
  text = al_test_read_file(p, &n);
  ASSERT_NOT_NULL(text);
  j = json_loads(text, 0, NULL);
  ASSERT_NOT_NULL(j);
  ASSERT_STR_EQ(jstr(j, "event"), "pre_tool_use");
  ASSERT_STR_EQ(jstr(j, "session"), al_agent_session(f.agent));
  ASSERT(jstr(j, "cwd") != NULL);
  ASSERT_STR_EQ(jstr(json_object_get(j, "tool"), "name"), "list_directory");
  ASSERT_STR_EQ(jstr(json_object_get(j, "tool"), "call_id"), "r1");
  ASSERT_STR_EQ(jstr(json_object_get(j, "tool"), "category"), "read");
  ASSERT_STR_EQ(jstr(json_object_get(json_object_get(j, "tool"), "input"),
                     "path"),
                ".");
  json_decref(j);
  free(text);
  fx_finish(&f);
  free(cfg);
  return 0;
}

TEST_IMPL(hooks_post_replace_and_context) {
  fx_t f;
  const char *cfg =
      "{\"hooks\":{\"post_tool_use\":["
      "{\"name\":\"red\",\"matcher\":\"list_*\",\"command\":[\"sh\",\"-c\","
      "\"cat >/dev/null; echo '{\\\"replace_result\\\":\\\"REDACTED\\\","
      "\\\"additional_context\\\":\\\"checked by red\\\"}'\"]}]}}";
  const char *content;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: list_directory, "
              "input: {}}}]}\n"
              "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  content = jstr(fx_tool_result(&f, 1, "r1"), "content");
  ASSERT_STR_EQ(content, "REDACTED\n\n[hook context]\nchecked by red");
  ASSERT_EQ(fx_count(&f, "hook_executed"), 1);
  fx_finish(&f);
  return 0;
}

/* The stop hook sends the model back to work with its reason, at most 3
 * times in a row; the 4th answer is final. */
TEST_IMPL(hooks_stop_continue_bounded) {
  fx_t f;
  char *cfg = hook_cfg("stop", "more",
                       "cat >/dev/null; echo '{\"decision\":\"block\","
                       "\"reason\":\"not done: run the tests\"}'",
                       NULL);
  const json_t *m;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{text: 'one'}]}\n"
              "  - reply: {content: [{text: 'two'}]}\n"
              "  - reply: {content: [{text: 'three'}]}\n"
              "  - reply: {content: [{text: 'four'}]}\n"
              "  - reply: {content: [{text: 'five'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(jstr(fx_event(&f, fx_find(&f, "final", NULL, 0)), "text"),
                "four");
  ASSERT_EQ(fx_requests(&f), 4);
  ASSERT_EQ(fx_count(&f, "hook_executed"), 3);
  m = fx_last_message(&f, 1);
  ASSERT_STR_EQ(jstr(m, "role"), "user");
  {
    char *text = json_dumps(m, 0);

    ASSERT(strstr(text, "not done: run the tests") != NULL);
    free(text);
  }
  fx_finish(&f);
  free(cfg);
  return 0;
}

/* ---- in-process hook --------------------------------------------------------------- */

static int cb_calls;
static char cb_events[256];

static void c_hook(al_agent_t *agent, const char *event, const char *input,
                   al_hook_reply_t *reply, void *data) {
  json_t *j = json_loads(input, 0, NULL);

  (void)agent;
  (void)data;
  cb_calls++;
  strncat(cb_events, event, sizeof(cb_events) - strlen(cb_events) - 2);
  strcat(cb_events, ",");
  ASSERT_STR_EQ(jstr(j, "event"), event);
  if (strcmp(event, "pre_tool_use") == 0 &&
      strcmp(jstr(json_object_get(j, "tool"), "name"), "write_file") == 0) {
    reply->decision = AL_HOOK_DENY;
    reply->reason = al_strdup("the C hook says no");
  }
  json_decref(j);
}

TEST_IMPL(hooks_c_callback) {
  fx_t f;

  signal(SIGPIPE, SIG_IGN);
  cb_calls = 0;
  cb_events[0] = '\0';
  fx_init(&f, write_scn);
  f.opts.hook = c_hook;
  fx_start(&f);
  fx_run(&f, "write it");
  ASSERT(!exists(&f, "a.txt"));
  ASSERT(strstr(jstr(fx_tool_result(&f, 1, "w1"), "content"),
                "denied by hook 'callback': the C hook says no") != NULL);
  ASSERT_STR_EQ(cb_events, "session_start,user_prompt_submit,pre_tool_use,"
                           "post_tool_use,stop,");
  ASSERT_EQ(fx_count(&f, "hook_executed"), 5);
  fx_finish(&f);
  return 0;
}

/* user_prompt_submit exit 2: the run ends with an error before any
 * request; session_start adds context on the first run only. */
TEST_IMPL(hooks_prompt_blocked) {
  fx_t f;
  char *cfg = hook_cfg("user_prompt_submit", "secrets",
                       "grep -q password && { echo 'no secrets in prompts' >&2; "
                       "exit 2; }; exit 0",
                       NULL);
  const json_t *e;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'ok'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "my password is hunter2");
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  e = fx_event(&f, fx_find(&f, "error", NULL, 0));
  ASSERT(strstr(jstr(e, "message"), "the prompt was blocked by hook "
                                    "'secrets': no secrets in prompts") != NULL);
  ASSERT_EQ(fx_requests(&f), 0);
  fx_run(&f, "an innocent prompt");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 1);
  fx_finish(&f);
  free(cfg);
  return 0;
}

TEST_IMPL(hooks_session_start_context) {
  fx_t f;
  char *cfg = hook_cfg("session_start", "ctx",
                       "cat >/dev/null; echo '{\"additional_context\":"
                       "\"the repo uses tabs\"}'",
                       NULL);
  char *m0;
  char *m1;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'a'}]}\n"
              "  - reply: {content: [{text: 'b'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "first");
  fx_run(&f, "second");
  ASSERT_EQ(fx_requests(&f), 2);
  m0 = json_dumps(fx_last_message(&f, 0), 0);
  m1 = json_dumps(fx_last_message(&f, 1), 0);
  ASSERT(strstr(m0, "the repo uses tabs") != NULL);
  ASSERT(strstr(m1, "the repo uses tabs") == NULL);
  ASSERT_EQ(fx_count(&f, "hook_executed"), 1);
  free(m0);
  free(m1);
  fx_finish(&f);
  free(cfg);
  return 0;
}

/* pre_compact: observational, told the trigger; the compaction goes on. */
TEST_IMPL(hooks_pre_compact) {
  fx_t f;
  char *cfg = hook_cfg("pre_compact", "note", "cat > compact_input.json", NULL);
  char p[512];
  size_t n;
  char *text;
  json_t *j;

  signal(SIGPIPE, SIG_IGN);
  fx_init(&f, "responses:\n  - reply: {content: [{text: 'hi'}]}\n");
  f.opts.hooks_config = cfg;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_EQ(al_agent_compact(f.agent, NULL), 0);
  while (fx_count(&f, "hook_executed") == 0) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  ASSERT_STR_EQ(jstr(hook_event(&f, 0), "event"), "pre_compact");
  ASSERT(fx_count(&f, "compaction_started") == 1);
  snprintf(p, sizeof(p), "%s/compact_input.json", f.workspace);
  text = al_test_read_file(p, &n);
  ASSERT_NOT_NULL(text);
  j = json_loads(text, 0, NULL);
  ASSERT_STR_EQ(jstr(j, "event"), "pre_compact");
  ASSERT_STR_EQ(jstr(j, "trigger"), "manual");
  json_decref(j);
  free(text);
  fx_finish(&f);
  free(cfg);
  return 0;
}

TEST_IMPL(hooks_config_errors) {
  static const char *const bad[] = {
      "{\"hooks\":{\"pre_tool\":[]}}",
      "{\"hooks\":{\"pre_tool_use\":[{\"command\":\"rm -rf /\"}]}}",
      "{\"hooks\":{\"pre_tool_use\":[{\"command\":[\"x\"],\"category\":\"x\"}]}}",
      "{\"hooks\":{\"pre_tool_use\":[{\"command\":[\"x\"],\"on_failure\":\"maybe\"}]}}",
      "{\"hooks\":{\"pre_tool_use\":[{\"command\":[\"x\"],\"bogus\":1}]}}",
      "{\"hooks\":",
  };
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(bad); i++) {
    fx_t f;
    al_agent_t *a = NULL;

    fx_init(&f, NULL);
    f.opts.hooks_config = bad[i];
    if (al_agent_new(&f.loop, &f.opts, &a) != AL_EINVAL) {
      AL_TEST_FAIL("case %zu accepted", i);
    }
    ASSERT_NULL(a);
    f.opts.hooks_config = NULL;
    fx_start(&f);
    fx_finish(&f);
  }
  return 0;
}
