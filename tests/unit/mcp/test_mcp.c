/* The MCP client layer (src/mcp) against the scriptable fault server
 * (mcp_server.c, run as a child of this binary): handshake and versions,
 * paginated listing, calls and their results, progress and timeouts,
 * cancel, server->client requests, list_changed, crash/restart/failure,
 * garbage, line caps, and shutdown with no process left behind. The config
 * parser and tool names are checked without a child.
 *
 * Waiting is event-driven: each test runs the loop until a condition
 * holds; a guard timer fails the test if it never does. The only times are
 * injected short timeouts (scaled by AL_TEST_TIMEOUT_MULTIPLIER). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "mcp/mcp.h"
#include "test.h"

typedef struct {
  uv_loop_t loop;
  al_mcp_t *m;
  char ws[64];
  json_t *states; /* ["server:state", ...] */
  int closed;
  /* the last call */
  int done;
  bool is_error;
  char *text;
  int progress;
  bool guard_fired;
} mt_t;

static void on_state(al_mcp_t *m, al_mcp_server_t *s, void *data) {
  mt_t *t = data;
  char b[128];

  (void)m;
  snprintf(b, sizeof(b), "%s:%s", al__mcp_server_name(s),
           al__mcp_state_name(al__mcp_server_state(s)));
  json_array_append_new(t->states, json_string(b));
}

/* servers: the inside of "mcpServers": {...}; %E stands for
 * "command":"EXE","args":["--helper","mcp_server" (the test writes the
 * rest of the args and the closing bracket). */
static char *config(const char *servers, const char *extra) {
  al_buf_t b;
  const char *p;

  al_buf_init(&b, 1 << 20);
  al_buf_printf(&b, "{%s\"mcpServers\":{", extra != NULL ? extra : "");
  for (p = servers; *p != '\0'; p++) {
    if (p[0] == '%' && p[1] == 'E') {
      al_buf_printf(&b,
                    "\"command\":\"%s\",\"args\":[\"--helper\",\"mcp_server\"",
                    al_test_exe());
      p++;
    } else {
      al_buf_append(&b, p, 1);
    }
  }
  al_buf_append_str(&b, "}}");
  return b.data;
}

/* The workspace (our roots/list answer) for the next mt_init when set;
 * else a new temporary directory. */
static const char *mt_next_ws;

static void mt_init(mt_t *t, const char *servers, const char *extra,
                    uint64_t grace_ms) {
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  char *c = config(servers, extra);

  memset(t, 0, sizeof(*t));
  signal(SIGPIPE, SIG_IGN);
  ASSERT_EQ(uv_loop_init(&t->loop), 0);
  if (mt_next_ws != NULL) {
    snprintf(t->ws, sizeof(t->ws), "%s", mt_next_ws);
    mt_next_ws = NULL;
  } else {
    snprintf(t->ws, sizeof(t->ws), "/tmp/al_mcp_XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(t->ws));
  }
  t->states = json_array();
  al_buf_init(&err, 4096);
  if (al__mcp_config_parse(c, strlen(c), &cfg, &err) != 0) {
    AL_TEST_FAIL("config: %s\n%s", err.data, c);
  }
  al_free(c);
  al_buf_free(&err);
  al__mcp_options_init(&o);
  o.loop = &t->loop;
  o.workspace = t->ws;
  o.shutdown_grace_ms = grace_ms;
  o.kill_grace_ms = grace_ms;
  o.restart_base_ms = 10;
  o.on_state = on_state;
  o.data = t;
  ASSERT_EQ(al__mcp_new(&o, &cfg, &t->m), 0);
  al__mcp_start(t->m);
}

static void on_guard(uv_timer_t *h) {
  ((mt_t *)h->data)->guard_fired = true;
}

/* Runs the loop until cond(t) holds (fails after 20 s x multiplier). */
static void run_until(mt_t *t, bool (*cond)(mt_t *t, void *arg), void *arg) {
  uv_timer_t guard;

  uv_timer_init(&t->loop, &guard);
  guard.data = t;
  t->guard_fired = false;
  uv_timer_start(&guard, on_guard,
                 20000 * (uint64_t)al_test_timeout_multiplier(), 0);
  while (!cond(t, arg) && !t->guard_fired) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&guard, NULL);
  uv_run(&t->loop, UV_RUN_NOWAIT);
  if (!cond(t, arg)) {
    char *s = json_dumps(t->states, JSON_COMPACT);

    AL_TEST_FAIL("condition never held; states: %s", s);
  }
}

static bool has_state(mt_t *t, void *arg) {
  size_t i;
  json_t *v;

  json_array_foreach(t->states, i, v) {
    if (strcmp(json_string_value(v), (const char *)arg) == 0) {
      return true;
    }
  }
  return false;
}

static size_t count_state(mt_t *t, const char *st) {
  size_t i, n = 0;
  json_t *v;

  json_array_foreach(t->states, i, v) {
    n += strcmp(json_string_value(v), st) == 0;
  }
  return n;
}

static bool call_done(mt_t *t, void *arg) {
  (void)arg;
  return t->done > 0;
}

static bool is_closed(mt_t *t, void *arg) {
  (void)arg;
  return t->closed > 0;
}

static void on_progress(al_mcp_call_t *c, const char *text, void *data) {
  mt_t *t = data;

  (void)c;
  (void)text;
  t->progress++;
}

static void on_done(al_mcp_call_t *c, bool is_error, const char *text,
                    size_t len, void *data) {
  mt_t *t = data;

  (void)c;
  ASSERT_EQ(strlen(text), len);
  t->done++;
  t->is_error = is_error;
  free(t->text);
  t->text = strdup(text);
}

static al_mcp_call_t *call(mt_t *t, size_t server, const char *tool,
                           const char *args) {
  json_t *a = json_loads(args, 0, NULL);
  al_mcp_call_t *c = NULL;

  t->done = 0;
  t->progress = 0;
  ASSERT_EQ(al__mcp_call(al__mcp_server(t->m, server), tool, a, on_progress,
                         on_done, t, &c),
            0);
  json_decref(a);
  ASSERT_EQ(t->done, 0); /* never synchronously */
  return c;
}

/* Calls and waits for the result. */
static void call_wait(mt_t *t, size_t server, const char *tool,
                      const char *args) {
  call(t, server, tool, args);
  run_until(t, call_done, NULL);
}

static void on_closed(void *data) { ((mt_t *)data)->closed++; }

static void mt_finish(mt_t *t) {
  al__mcp_close(t->m, on_closed, t);
  run_until(t, is_closed, NULL);
  ASSERT_LOOP_CLOSES(&t->loop);
  rmdir(t->ws);
  json_decref(t->states);
  free(t->text);
}

static bool pid_gone(int pid) {
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* ---- tests ---------------------------------------------------------------------- */

TEST_IMPL(mcp_handshake_list_and_call) {
  mt_t t;
  al_mcp_server_t *s;
  const json_t *tools;

  mt_init(&t, "\"f\":{%E,\"--page\",\"3\"]}", NULL,
          100);
  /* A config whose command is the helper: split argv[0] from the rest. */
  run_until(&t, has_state, "f:ready");
  s = al__mcp_server(t.m, 0);
  ASSERT_STR_EQ(json_string_value(json_array_get(t.states, 0)), "f:starting");
  ASSERT_STR_EQ(al__mcp_server_version(s), "2025-11-25");
  tools = al__mcp_server_tools(s);
  /* 11 fixed tools over pages of 3; badschema dropped. */
  ASSERT_EQ(json_array_size(tools), 11);
  ASSERT_EQ(al__mcp_server_gen(s), 1);
  call_wait(&t, 0, "echo", "{\"text\":\"hello there\"}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "hello there");
  call_wait(&t, 0, "fail", "{}");
  ASSERT(t.is_error);
  ASSERT_STR_EQ(t.text, "it failed on purpose");
  call_wait(&t, 0, "rpcerr", "{}");
  ASSERT(t.is_error);
  ASSERT_STR_EQ(t.text, "Error: MCP error -32602: bad params on purpose");
  call_wait(&t, 0, "image", "{}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "[image image/png, 8 bytes]\ncaption");
  call_wait(&t, 0, "structured", "{\"ok\":true}");
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "{\"value\":42}");
  call_wait(&t, 0, "structured", "{\"ok\":false}");
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "lacks required property 'value'") != NULL);
  call_wait(&t, 0, "roots", "{}");
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, t.ws) != NULL);
  ASSERT(strstr(t.text, "\"uri\":\"file:///tmp/al_mcp_") != NULL);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_pages_500_tools) {
  mt_t t;

  mt_init(&t,
          "\"p\":{%E,\"--tools\",\"500\",\"--page\","
          "\"100\"]}",
          NULL, 100);
  run_until(&t, has_state, "p:ready");
  ASSERT_EQ(json_array_size(al__mcp_server_tools(al__mcp_server(t.m, 0))),
            511);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_version_refused) {
  mt_t t;
  const char *err;

  mt_init(&t,
          "\"v\":{%E,\"--version\",\"1999-01-01\"]}",
          "\"x\":0,", 100);
  run_until(&t, has_state, "v:restarting");
  err = al__mcp_server_error(al__mcp_server(t.m, 0));
  ASSERT_NOT_NULL(err);
  ASSERT(strstr(err, "unsupported protocol version '1999-01-01'") != NULL);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_older_version_accepted) {
  mt_t t;

  mt_init(&t,
          "\"v\":{%E,\"--version\",\"2025-03-26\"]}",
          NULL, 100);
  run_until(&t, has_state, "v:ready");
  ASSERT_STR_EQ(al__mcp_server_version(al__mcp_server(t.m, 0)), "2025-03-26");
  mt_finish(&t);
  return 0;
}

/* Exits at start every time: starting, restarting x3 (backoff), failed,
 * with the exit status and the stderr tail. */
TEST_IMPL(mcp_crash_at_start_fails_after_restarts) {
  mt_t t;
  const char *err;

  mt_init(&t, "\"c\":{%E,\"--exit-at-start\",\"7\"]}",
          NULL, 100);
  run_until(&t, has_state, "c:failed");
  ASSERT_EQ(count_state(&t, "c:restarting"), AL_MCP_DEFAULT_MAX_RESTARTS);
  ASSERT_EQ(count_state(&t, "c:starting"), AL_MCP_DEFAULT_MAX_RESTARTS + 1);
  err = al__mcp_server_error(al__mcp_server(t.m, 0));
  ASSERT(strstr(err, "exited with status 7") != NULL);
  ASSERT(strstr(err, "stderr: line one\nfatal: cannot start on purpose") != NULL);
  mt_finish(&t);
  return 0;
}

/* A crash while ready: the call in flight gets the error, the server
 * restarts and works again. */
TEST_IMPL(mcp_crash_while_ready_restarts) {
  mt_t t;

  mt_init(&t, "\"c\":{%E,\"--exit-after\",\"1\"]}",
          NULL, 100);
  run_until(&t, has_state, "c:ready");
  call_wait(&t, 0, "echo", "{\"text\":\"one\"}");
  ASSERT_STR_EQ(t.text, "one");
  run_until(&t, has_state, "c:restarting");
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)),
                "exited with status 3; stderr: ") != NULL);
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)),
                "exiting after 1 calls") != NULL);
  /* Back: a second ready. */
  json_array_clear(t.states);
  run_until(&t, has_state, "c:ready");
  call_wait(&t, 0, "echo", "{\"text\":\"two\"}");
  ASSERT_STR_EQ(t.text, "two");
  mt_finish(&t);
  return 0;
}

/* The call in flight when the server dies gets an error naming the exit. */
TEST_IMPL(mcp_crash_fails_call_in_flight) {
  mt_t t;

  mt_init(&t, "\"c\":{%E,\"--exit-after\",\"1\"]}",
          NULL, 100);
  run_until(&t, has_state, "c:ready");
  /* stall counts as a call: the server exits without answering. */
  call_wait(&t, 0, "stall", "{}");
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "Error: MCP server 'c' exited with status 3") != NULL);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_garbage_fails) {
  mt_t t;

  mt_init(&t, "\"g\":{%E,\"--garbage\"]}", NULL, 100);
  run_until(&t, has_state, "g:restarting");
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)),
                "not JSON-RPC on stdout: this is not json") != NULL);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_hang_at_initialize_times_out) {
  mt_t t;
  char buf[256];

  snprintf(buf, sizeof(buf),
           "\"h\":{%%E,\"--hang-init\"],"
           "\"startup_timeout_ms\":%d}",
           200 * al_test_timeout_multiplier());
  mt_init(&t, buf, NULL, 100);
  ASSERT(!al__mcp_settled(t.m));
  run_until(&t, has_state, "h:restarting");
  ASSERT(strstr(al__mcp_server_error(al__mcp_server(t.m, 0)),
                "did not finish starting within") != NULL);
  mt_finish(&t);
  return 0;
}

/* A 2 MB one-line result passes the line reader and is capped for the
 * model with the truncation notice. */
TEST_IMPL(mcp_big_result_capped) {
  mt_t t;

  mt_init(&t, "\"b\":{%E]}", NULL, 100);
  run_until(&t, has_state, "b:ready");
  call_wait(&t, 0, "big", "{\"bytes\":2000000}");
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, "[OUTPUT TRUNCATED: showing 100000 of 2000000 "
                        "characters from big]") != NULL);
  ASSERT(strlen(t.text) < 100200);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_line_cap_fails_server) {
  mt_t t;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  char *c = config("\"b\":{%E]}", NULL);

  memset(&t, 0, sizeof(t));
  signal(SIGPIPE, SIG_IGN);
  ASSERT_EQ(uv_loop_init(&t.loop), 0);
  snprintf(t.ws, sizeof(t.ws), "/tmp/al_mcp_XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(t.ws));
  t.states = json_array();
  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(c, strlen(c), &cfg, &err), 0);
  al_free(c);
  al__mcp_options_init(&o);
  o.loop = &t.loop;
  o.workspace = t.ws;
  o.shutdown_grace_ms = o.kill_grace_ms = 100;
  o.line_max = 100000; /* the test seam: a small cap */
  o.max_restarts = 0;
  o.on_state = on_state;
  o.data = &t;
  ASSERT_EQ(al__mcp_new(&o, &cfg, &t.m), 0);
  al__mcp_start(t.m);
  run_until(&t, has_state, "b:ready");
  call_wait(&t, 0, "big", "{\"bytes\":200000}");
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "wrote a line longer than 100000 bytes") != NULL);
  ASSERT(has_state(&t, "b:failed"));
  mt_finish(&t);
  return 0;
}

/* Progress resets the timeout: 6 ticks 60 ms apart outlive a 150 ms
 * timeout; without progress (stall) the same timeout fires. */
TEST_IMPL(mcp_progress_resets_timeout) {
  mt_t t;
  char buf[256];
  int k = al_test_timeout_multiplier();

  snprintf(buf, sizeof(buf),
           "\"p\":{%%E],\"timeout_ms\":%d,\"max_timeout_ms\":%d}",
           300 * k, 60000 * k);
  mt_init(&t, buf, NULL, 100);
  run_until(&t, has_state, "p:ready");
  snprintf(buf, sizeof(buf), "{\"n\":6,\"ms\":%d}", 100 * k);
  call_wait(&t, 0, "ticks", buf);
  ASSERT(!t.is_error);
  ASSERT_STR_EQ(t.text, "ticked 6");
  ASSERT_EQ(t.progress, 6);
  call_wait(&t, 0, "stall", "{}");
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "Error: MCP tool 'stall' timed out after") != NULL);
  /* The server still works after a timed-out call. */
  call_wait(&t, 0, "echo", "{\"text\":\"after\"}");
  ASSERT_STR_EQ(t.text, "after");
  mt_finish(&t);
  return 0;
}

/* The hard cap ends a call that keeps reporting progress. */
TEST_IMPL(mcp_progress_hard_cap) {
  mt_t t;
  char buf[256];
  int k = al_test_timeout_multiplier();

  snprintf(buf, sizeof(buf),
           "\"p\":{%%E],\"timeout_ms\":%d,\"max_timeout_ms\":%d}",
           400 * k, 500 * k);
  mt_init(&t, buf, NULL, 100);
  run_until(&t, has_state, "p:ready");
  snprintf(buf, sizeof(buf), "{\"n\":20,\"ms\":%d}", 100 * k);
  call_wait(&t, 0, "ticks", buf);
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "timed out") != NULL);
  ASSERT(t.progress >= 2);
  mt_finish(&t);
  return 0;
}

/* Cancel: no callback afterwards, the server keeps working. */
TEST_IMPL(mcp_cancel_then_next_call) {
  mt_t t;
  al_mcp_call_t *c;

  mt_init(&t, "\"s\":{%E]}", NULL, 100);
  run_until(&t, has_state, "s:ready");
  c = call(&t, 0, "stall", "{}");
  uv_run(&t.loop, UV_RUN_NOWAIT);
  al__mcp_call_cancel(c);
  call_wait(&t, 0, "echo", "{\"text\":\"still here\"}");
  ASSERT_EQ(t.done, 1);
  ASSERT_STR_EQ(t.text, "still here");
  /* The server was told: the stall call (id 3, after initialize and
   * tools/list) was cancelled. */
  call_wait(&t, 0, "cancelled", "{}");
  ASSERT_STR_EQ(t.text, "3,");
  mt_finish(&t);
  return 0;
}

static bool gen_is_2(mt_t *t, void *arg) {
  (void)arg;
  return al__mcp_server_gen(al__mcp_server(t->m, 0)) == 2;
}

TEST_IMPL(mcp_list_changed_relists) {
  mt_t t;
  const json_t *tools;

  mt_init(&t, "\"l\":{%E]}", NULL, 100);
  run_until(&t, has_state, "l:ready");
  ASSERT_EQ(json_array_size(al__mcp_server_tools(al__mcp_server(t.m, 0))), 11);
  call_wait(&t, 0, "change", "{}");
  run_until(&t, gen_is_2, NULL);
  tools = al__mcp_server_tools(al__mcp_server(t.m, 0));
  ASSERT_EQ(json_array_size(tools), 12);
  ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 11),
                                                  "name")),
                "added");
  mt_finish(&t);
  return 0;
}

static bool pidfile_pid(const char *path, int *pid) {
  size_t n;
  char *s = al_test_read_file(path, &n);

  *pid = s != NULL ? atoi(s) : 0;
  free(s);
  return *pid > 0;
}

/* A server that ignores end of input and SIGTERM: close escalates to
 * SIGKILL within the grace periods, and no process is left. */
TEST_IMPL(mcp_shutdown_kills_stubborn_server) {
  mt_t t;
  char buf[512];
  char pf[128];
  int pid = 0;
  uint64_t t0;

  snprintf(pf, sizeof(pf), "/tmp/al_mcp_pid_%d", (int)getpid());
  snprintf(buf, sizeof(buf),
           "\"k\":{%%E,\"--ignore-eof\","
           "\"--ignore-term\",\"--pidfile\",\"%s\"]}",
           pf);
  mt_init(&t, buf, NULL, 50);
  run_until(&t, has_state, "k:ready");
  ASSERT(pidfile_pid(pf, &pid));
  ASSERT_EQ(pid, al__mcp_server_pid(al__mcp_server(t.m, 0)));
  ASSERT(!pid_gone(pid));
  uv_update_time(&t.loop); /* the graces count from now, not a stale now */
  t0 = uv_hrtime();
  al__mcp_close(t.m, on_closed, &t);
  run_until(&t, is_closed, NULL);
  /* stdin grace 50 ms + TERM grace 50 ms, then KILL. libuv's clock has
   * whole milliseconds, so each grace may end up to 1 ms early on the
   * high-resolution clock; a close that skipped them takes ~0 ms. */
  ASSERT((uv_hrtime() - t0) / 1000000 >= 98);
  ASSERT(pid_gone(pid));
  ASSERT_LOOP_CLOSES(&t.loop);
  unlink(pf);
  rmdir(t.ws);
  json_decref(t.states);
  return 0;
}

/* A polite server exits on end of input, before any signal. */
TEST_IMPL(mcp_shutdown_eof_first) {
  mt_t t;
  uint64_t t0;
  int pid;

  mt_init(&t, "\"e\":{%E]}", NULL, 5000);
  run_until(&t, has_state, "e:ready");
  pid = al__mcp_server_pid(al__mcp_server(t.m, 0));
  t0 = uv_hrtime();
  al__mcp_close(t.m, on_closed, &t);
  run_until(&t, is_closed, NULL);
  /* Well before the 5 s grace: it left on EOF. */
  ASSERT((uv_hrtime() - t0) / 1000000 < 4000);
  ASSERT(pid_gone(pid));
  ASSERT_LOOP_CLOSES(&t.loop);
  rmdir(t.ws);
  json_decref(t.states);
  return 0;
}

/* Close with a call in flight: the call gets its error at once. */
TEST_IMPL(mcp_close_with_call_in_flight) {
  mt_t t;

  mt_init(&t, "\"s\":{%E]}", NULL, 50);
  run_until(&t, has_state, "s:ready");
  call(&t, 0, "stall", "{}");
  al__mcp_close(t.m, on_closed, &t);
  ASSERT_EQ(t.done, 1);
  ASSERT(t.is_error);
  ASSERT(strstr(t.text, "shutting down") != NULL);
  run_until(&t, is_closed, NULL);
  ASSERT_LOOP_CLOSES(&t.loop);
  rmdir(t.ws);
  json_decref(t.states);
  free(t.text);
  return 0;
}

/* The env is explicit: only the allowlist plus the server's env, with
 * ${VAR} expanded; an API key in our environment does not reach it. */
TEST_IMPL(mcp_config_parse) {
  al_mcp_config_t c;
  al_buf_t err;
  const char *ok =
      "{\"startup_wait_ms\":250,\"mcpServers\":{\"a\":{\"command\":\"x\","
      "\"args\":[\"1\",\"2\"],\"env\":{\"K\":\"v-${AL_MCP_TEST_VAR}-z\"},"
      "\"tools\":{\"t\":{\"concurrency_safe\":true}}},"
      "\"off\":{\"command\":\"y\",\"disabled\":true}}}";
  static const struct {
    const char *json;
    const char *err;
  } bad[] = {
      {"{\"mcpServers\":{\"a\":{}}}", "mcpServers.a.command: must be a non-empty string"},
      {"{\"mcpServers\":{\"a\":{\"command\":\"x\",\"url\":\"http://h\"}}}",
       "not allowed with url"},
      {"{\"mcpServers\":{\"a\":{\"command\":\"x\",\"bogus\":1}}}",
       "mcpServers.a: unknown key 'bogus'"},
      {"{\"mcpServers\":{\"a b\":{\"command\":\"x\"}}}", "a server name is"},
      {"{\"mcpServers\":{\"a\":{\"command\":\"x\",\"args\":[1]}}}",
       "mcpServers.a.args[0]: must be a string"},
      {"{\"mcpServers\":{\"a\":{\"command\":\"x\",\"timeout_ms\":-1}}}",
       "mcpServers.a.timeout_ms: must be a positive integer"},
      {"{\"mcpServers\":[]}", "mcpServers: must be a map"},
      {"{\"mcpServers\":", "1:"},
  };
  size_t i;

  setenv("AL_MCP_TEST_VAR", "VAL", 1);
  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(ok, strlen(ok), &c, &err), 0);
  ASSERT_EQ(c.n, 1);
  ASSERT_EQ(c.startup_wait_ms, 250);
  ASSERT_STR_EQ(c.servers[0].name, "a");
  ASSERT_STR_EQ(c.servers[0].argv[0], "x");
  ASSERT_STR_EQ(c.servers[0].argv[2], "2");
  ASSERT_NULL(c.servers[0].argv[3]);
  ASSERT_STR_EQ(c.servers[0].env[0], "K=v-VAL-z");
  ASSERT(c.servers[0].sandbox);
  ASSERT_EQ(c.servers[0].call_timeout_ms, AL_MCP_DEFAULT_CALL_TIMEOUT_MS);
  al__mcp_config_free(&c);
  for (i = 0; i < AL_ARRAY_SIZE(bad); i++) {
    al_buf_reset(&err);
    ASSERT_EQ(al__mcp_config_parse(bad[i].json, strlen(bad[i].json), &c, &err),
              AL_EINVAL);
    if (err.data == NULL || strstr(err.data, bad[i].err) == NULL) {
      AL_TEST_FAIL("case %zu: got '%s', want '%s'", i,
                   err.data != NULL ? err.data : "", bad[i].err);
    }
  }
  al_buf_free(&err);
  return 0;
}

TEST_IMPL(mcp_tool_names) {
  char n[65];
  char m[65];

  al__mcp_tool_name("fs", "read_file", n);
  ASSERT_STR_EQ(n, "mcp__fs__read_file");
  /* Not allowed characters: replaced, and a hash keeps it distinct. */
  al__mcp_tool_name("fs", "read.file", n);
  al__mcp_tool_name("fs", "read/file", m);
  ASSERT(strncmp(n, "mcp__fs__read_file_", 19) == 0);
  ASSERT_EQ(strlen(n), 25);
  ASSERT(strcmp(n, m) != 0);
  /* Too long: cut to 64 with the hash, deterministic. */
  al__mcp_tool_name("server", "a_very_long_tool_name_that_goes_on_and_on_and_on_forever_more", n);
  ASSERT_EQ(strlen(n), 64);
  al__mcp_tool_name("server", "a_very_long_tool_name_that_goes_on_and_on_and_on_forever_more", m);
  ASSERT_STR_EQ(n, m);
  al__mcp_tool_name("server", "a_very_long_tool_name_that_goes_on_and_on_and_on_forever_mors", m);
  ASSERT(strcmp(n, m) != 0);
  return 0;
}

/* ---- real servers from the npm registry (tests/mcp, pinned) ------------------------ */

#define NODE_MODULES AL_SOURCE_DIR "/tests/mcp/node_modules/@modelcontextprotocol"

static void need_node_modules(void) {
  struct stat st;

  if (stat(NODE_MODULES "/server-everything/dist/index.js", &st) != 0) {
    AL_TEST_FAIL("the MCP test servers are not installed: run scripts/test.sh "
                 "(npm ci in tests/mcp)");
  }
}

static bool lists_tool(mt_t *t, void *name) {
  const json_t *tools = al__mcp_server_tools(al__mcp_server(t->m, 0));
  size_t i;
  json_t *v;

  json_array_foreach(tools, i, v) {
    if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0) {
      return true;
    }
  }
  return false;
}

TEST_IMPL(mcp_real_server_everything) {
  mt_t t;
  char buf[1024];
  int pid;

  need_node_modules();
  snprintf(buf, sizeof(buf),
           "\"everything\":{\"command\":\"node\",\"args\":[\"%s\",\"stdio\"],"
           "\"sandbox\":false}",
           NODE_MODULES "/server-everything/dist/index.js");
  mt_init(&t, buf, NULL, 2000);
  run_until(&t, has_state, "everything:ready");
  /* get-roots-list appears once the server has seen our roots capability
   * (a list_changed right after initialized, re-listed). */
  run_until(&t, lists_tool, "get-roots-list");
  ASSERT_GE(json_array_size(al__mcp_server_tools(al__mcp_server(t.m, 0))), 14);
  call_wait(&t, 0, "echo", "{\"message\":\"hi from agentloop\"}");
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, "hi from agentloop") != NULL);
  call_wait(&t, 0, "get-sum", "{\"a\":2,\"b\":40}");
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, "42") != NULL);
  call_wait(&t, 0, "get-roots-list", "{}");
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, t.ws) != NULL);
  call_wait(&t, 0, "get-structured-content", "{\"location\":\"New York\"}");
  ASSERT(!t.is_error);
  /* Unknown tool: the server's error as an error result. */
  call_wait(&t, 0, "no-such-tool", "{}");
  ASSERT(t.is_error);
  pid = al__mcp_server_pid(al__mcp_server(t.m, 0));
  al__mcp_close(t.m, on_closed, &t);
  run_until(&t, is_closed, NULL);
  ASSERT(pid_gone(pid));
  ASSERT_LOOP_CLOSES(&t.loop);
  rmdir(t.ws);
  json_decref(t.states);
  free(t.text);
  return 0;
}

/* Progress from a real server: 4 notifications become 4 progress
 * callbacks (tool_progress in the agent). */
TEST_IMPL(mcp_real_server_everything_progress) {
  mt_t t;
  char buf[1024];

  need_node_modules();
  snprintf(buf, sizeof(buf),
           "\"everything\":{\"command\":\"node\",\"args\":[\"%s\",\"stdio\"],"
           "\"sandbox\":false}",
           NODE_MODULES "/server-everything/dist/index.js");
  mt_init(&t, buf, NULL, 2000);
  run_until(&t, has_state, "everything:ready");
  call_wait(&t, 0, "trigger-long-running-operation",
            "{\"duration\":1,\"steps\":4}");
  ASSERT(!t.is_error);
  ASSERT_GE(t.progress, 4);
  mt_finish(&t);
  return 0;
}

TEST_IMPL(mcp_real_server_filesystem) {
  mt_t t;
  char buf[64];
  char args[1024];
  FILE *f;

  need_node_modules();
  memset(&t, 0, sizeof(t));
  /* The workspace exists before the server starts: it is its root. */
  snprintf(buf, sizeof(buf), "/tmp/al_mcp_fs_%d", (int)getpid());
  mkdir(buf, 0700);
  snprintf(args, sizeof(args), "%s/a.txt", buf);
  f = fopen(args, "w");
  ASSERT_NOT_NULL(f);
  fputs("hello from a file\n", f);
  fclose(f);
  snprintf(args, sizeof(args),
           "\"fs\":{\"command\":\"node\",\"args\":[\"%s\",\"%s\"],"
           "\"sandbox\":false}",
           NODE_MODULES "/server-filesystem/dist/index.js", buf);
  /* The server replaces its directories with our roots/list answer when
   * that arrives, at a time of its choosing: make both the same. */
  mt_next_ws = buf;
  mt_init(&t, args, NULL, 2000);
  run_until(&t, has_state, "fs:ready");
  ASSERT(lists_tool(&t, "read_text_file"));
  snprintf(args, sizeof(args), "{\"path\":\"%s/a.txt\"}", buf);
  call_wait(&t, 0, "read_text_file", args);
  ASSERT(!t.is_error);
  ASSERT(strstr(t.text, "hello from a file") != NULL);
  /* Outside its root: the server refuses, an error result. */
  call_wait(&t, 0, "read_text_file", "{\"path\":\"/etc/passwd\"}");
  ASSERT(t.is_error);
  mt_finish(&t);
  snprintf(args, sizeof(args), "%s/a.txt", buf);
  unlink(args);
  rmdir(buf);
  return 0;
}

/* The fuzz target's seam (fuzz/fuzz_mcp.c) over its seed corpus, in the
 * normal build: the handshake seeds reach ready, the call seed completes
 * the call (progress, a roots/list and an unknown request, list_changed
 * on the way), the bad version fails the server, and close always
 * finishes. want_done counts successful results. */
static void fz_done(al_mcp_call_t *c, bool is_error, const char *text,
                    size_t len, void *data) {
  (void)c;
  ASSERT_EQ(strlen(text), len);
  if (is_error) {
    /* No answer before close: the call gets the shutdown error. */
    ASSERT(strstr(text, "shutting down") != NULL);
    return;
  }
  ASSERT(strstr(text, "hi\n[image image/png, 4 bytes of base64 not shown: "
                      "not a PNG, JPEG, GIF or WebP image]\n"
                      "[resource file:///a]\nbody") != NULL);
  *(int *)data += 1;
}

static void fz_closed(void *data) { *(int *)data = 1; }

static void fz_one(const char *file, al_mcp_state_t want, int want_done) {
  static const char cfg_text[] =
      "{\"mcpServers\":{\"f\":{\"command\":\"/nonexistent\"}}}";
  char path[512];
  size_t size, first;
  char *p;
  const char *cut;
  uv_loop_t loop;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  al_mcp_t *m;
  al_mcp_call_t *c;
  int done = 0, closed = 0;

  snprintf(path, sizeof(path), "%s/fuzz/corpus/fuzz_mcp/%s", AL_SOURCE_DIR,
           file);
  p = al_test_read_file(path, &size);
  ASSERT_NOT_NULL(p);
  cut = memchr(p, 0xff, size);
  first = cut != NULL ? (size_t)(cut - p) : size;
  uv_loop_init(&loop);
  al_buf_init(&err, 4096);
  ASSERT_EQ(al__mcp_config_parse(cfg_text, strlen(cfg_text), &cfg, &err), 0);
  al__mcp_options_init(&o);
  o.loop = &loop;
  o.workspace = "/tmp";
  ASSERT_EQ(al__mcp_new(&o, &cfg, &m), 0);
  al__mcp_fuzz_feed(m, p, first);
  if (al__mcp_server_state(al__mcp_server(m, 0)) == AL_MCP_READY) {
    json_t *args = json_object();

    ASSERT_EQ(al__mcp_call(al__mcp_server(m, 0), "echo", args, NULL, fz_done,
                           &done, &c),
              0);
    json_decref(args);
  }
  if (cut != NULL) {
    al__mcp_fuzz_feed(m, cut + 1, size - first - 1);
  }
  ASSERT_EQ(al__mcp_server_state(al__mcp_server(m, 0)), want);
  ASSERT_EQ(done, want_done);
  al__mcp_close(m, fz_closed, &closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(closed, 1);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  free(p);
}

TEST_IMPL(mcp_fuzz_seeds_replay) {
  signal(SIGPIPE, SIG_IGN);
  fz_one("handshake.ndjson", AL_MCP_READY, 0);
  fz_one("call.ndjson", AL_MCP_READY, 1);
  fz_one("bad_version.ndjson", AL_MCP_RESTARTING, 0);
  /* Found by fuzz_mcp: a garbage line at the end of a read, not
   * NUL-terminated, was printed past its end (ASan builds catch it). */
  fz_one("garbage_unterminated.ndjson", AL_MCP_RESTARTING, 0);
  return 0;
}
