/* Issue 22, the daemon: a real agentloopd under an open-file limit of
 * 1024 (soft and hard, so raising the soft limit gains nothing) serves
 * 500 sessions: each request gets an answer or the typed AL_RPC_FD_LIMIT,
 * never an internal error, and sessions keep working (idle ones are
 * unloaded and load again on resume). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/internal.h"
#include "dtest.h"
#include "session/session.h"
#include "smallfs.h"

static int child_exit = -1;

static void on_child(uv_process_t *p, int64_t status, int sig) {
  (void)sig;
  child_exit = (int)status;
  uv_close((uv_handle_t *)p, NULL);
}

static bool child_gone(void *data) {
  (void)data;
  return child_exit >= 0;
}

/* agentloopd --foreground with the test's socket and state dir, a config
 * home under the root, and the mock as its model; stderr to err_path. */
static void spawn_daemon(dt_t *t, uv_process_t *p, const char *err_path,
                         const char *extra_env) {
  static char envs[7][300];
  static char *env[8];
  char exe[600];
  char *args[10];
  int n, fd;
  uv_process_options_t po;
  uv_stdio_container_t io[3];

  snprintf(envs[0], sizeof(envs[0]), "AGENTLOOP_BASE_URL=%s", t->url);
  snprintf(envs[1], sizeof(envs[1]), "ANTHROPIC_API_KEY=test-key");
  snprintf(envs[2], sizeof(envs[2]), "AGENTLOOP_MODEL=mock-model");
  snprintf(envs[3], sizeof(envs[3]), "PATH=/usr/bin:/bin");
  snprintf(envs[4], sizeof(envs[4]), "XDG_CONFIG_HOME=%s/cfg", t->root);
  snprintf(envs[5], sizeof(envs[5]), "HOME=%s", t->root);
  snprintf(envs[6], sizeof(envs[6]), "%s",
           extra_env != NULL ? extra_env : "AGENTLOOP_LOG=info");
  for (n = 0; n < 7; n++) {
    env[n] = envs[n];
  }
  env[7] = NULL;
  n = 0;
  snprintf(exe, sizeof(exe), "%s/agentloopd", AL_BINARY_DIR);
  args[n++] = exe;
  args[n++] = "--foreground";
  args[n++] = "--socket";
  args[n++] = t->sock;
  args[n++] = "--state-dir";
  args[n++] = t->state;
  args[n++] = "--log-level";
  args[n++] = "info";
  args[n] = NULL;
  fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT(fd >= 0);
  memset(&po, 0, sizeof(po));
  io[0].flags = UV_IGNORE;
  io[1].flags = UV_IGNORE;
  io[2].flags = UV_INHERIT_FD;
  io[2].data.fd = fd;
  po.file = exe;
  po.args = args;
  po.env = env;
  po.exit_cb = on_child;
  po.stdio = io;
  po.stdio_count = 3;
  child_exit = -1;
  ASSERT_EQ(uv_spawn(&t->loop, p, &po), 0);
  close(fd);
}

/* The run from index `from` on: its bash call succeeded and it ended
 * with final (an error or interrupted fails the test, never hangs it). */
static void assert_bash_ran(dt_client_t *c, size_t from) {
  size_t i = from;
  bool bash_ok = false;

  for (;;) {
    for (; i < json_array_size(c->msgs); i++) {
      const char *type = dt_ev_type(c, i);
      const json_t *ev = json_object_get(json_array_get(c->msgs, i), "params");

      if (strcmp(type, "tool_use_completed") == 0) {
        if (json_is_true(json_object_get(ev, "is_error"))) {
          AL_TEST_FAIL("bash failed: %s",
                       json_string_value(json_object_get(ev, "content")));
        }
        bash_ok = true;
      } else if (strcmp(type, "error") == 0 ||
                 strcmp(type, "interrupted") == 0) {
        AL_TEST_FAIL("the run ended with %s: %s", type,
                     json_string_value(json_object_get(ev, "message")));
      } else if (strcmp(type, "final") == 0) {
        ASSERT(bash_ok);
        return;
      }
    }
    ASSERT(!c->eof);
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

/* A turn on session sid (subscribed for it, unsubscribed after, so the
 * session is idle again): the mock asks for bash, then answers. */
static void use_session(dt_client_t *c, int *id, const char *sid) {
  char p[200];
  size_t from;
  json_t *r;

  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(c, (*id)++, "session/subscribe", p);
  ASSERT_EQ(dt_err(r), 0);
  from = json_array_size(c->msgs);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  r = dt_call(c, (*id)++, "turn/send", p);
  ASSERT_EQ(dt_err(r), 0);
  assert_bash_ran(c, from);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(c, (*id)++, "session/unsubscribe", p);
  ASSERT_EQ(dt_err(r), 0);
}

/* An error is the typed one, naming the limit. */
static void assert_fd_limit(const json_t *r) {
  const json_t *e = json_object_get(r, "error");
  const char *msg = json_string_value(json_object_get(e, "message"));

  ASSERT_EQ(dt_err(r), AL_RPC_FD_LIMIT);
  ASSERT_NOT_NULL(msg);
  ASSERT_NOT_NULL(strstr(msg, "open-file limit"));
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_object_get(e, "data"), "limit")),
      "open_files");
}

/* session/list's `loaded` for sid. */
static bool session_loaded(dt_client_t *c, int *id, const char *sid) {
  json_t *r = dt_call(c, (*id)++, "session/list", NULL);
  const json_t *a = json_object_get(json_object_get(r, "result"), "sessions");
  size_t i;
  json_t *v;

  json_array_foreach(a, i, v) {
    if (strcmp(json_string_value(json_object_get(v, "session")), sid) == 0) {
      return json_is_true(json_object_get(v, "loaded"));
    }
  }
  AL_TEST_FAIL("session %s not listed", sid);
  return false;
}

TEST_IMPL(daemon_500_sessions_at_1024_fds) {
  static const char yaml[] =
      "on_exhausted: cycle\n"
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {name: bash, input: {command: \"echo hi\"}}\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"done\"\n";
  enum { N = 500, USE_EVERY = 50 };
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  uv_process_t proc;
  struct rlimit rl = {1024, 1024};
  char errp[300], p[400];
  static char sids[N][64];
  size_t ok = 0, refused = 0, i;
  int id = 10;
  uint64_t t0;
  json_t *r;

  /* Sessions are created one after another, each header synced, with a
   * bash call in every 50th: about 15 s on a loaded 2-core machine. */
  al_test_timeout_s(120);
  dt_init(&t, yaml);
  snprintf(errp, sizeof(errp), "%s/err.txt", t.root);
  /* The daemon inherits a hard limit of 1024: raising its soft limit to
   * the hard one gains nothing. */
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  spawn_daemon(&t, &proc, errp, NULL);
  dt_connect_ready(&t, &c);
  t0 = uv_hrtime();
  for (i = 0; i < N; i++) {
    snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
    r = dt_call(&c, id++, "session/create", p);
    if (dt_err(r) != 0) {
      assert_fd_limit(r);
      refused++;
      sids[i][0] = '\0';
      continue;
    }
    ok++;
    snprintf(sids[i], sizeof(sids[i]), "%s",
             json_string_value(
                 json_object_get(json_object_get(r, "result"), "session")));
    if (i % USE_EVERY == 0) {
      use_session(&c, &id, sids[i]);
    }
  }
  {
    /* The daemon's descriptors now (a figure for docs/daemon.md). */
    char fdd[64];
    DIR *dir;
    struct dirent *de;
    size_t nfd = 0;

    snprintf(fdd, sizeof(fdd), "/proc/%d/fd", proc.pid);
    dir = opendir(fdd);
    ASSERT_NOT_NULL(dir);
    while ((de = readdir(dir)) != NULL) {
      nfd += de->d_name[0] != '.';
    }
    closedir(dir);
    fprintf(stderr,
            "500 sessions: %zu created, %zu refused, %.1f s, %zu fds in "
            "use\n",
            ok, refused, (double)(uv_hrtime() - t0) / 1e9, nfd);
    ASSERT(nfd < 1024);
  }
  /* Idle sessions give their descriptors back: nearly all fit. */
  ASSERT(ok >= N * 9 / 10);
  /* An early session was unloaded long ago: it loads again and works,
   * and so does the newest. (Not one that ran: the mock's cycle would
   * send the same tool_use id again, which the history refuses.) */
  for (i = 1; i < N; i += N - 2) {
    size_t j = i;

    while (sids[j][0] == '\0') {
      j++;
    }
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\"}", sids[j]);
    r = dt_call(&c, id++, "session/resume", p);
    ASSERT_EQ(dt_err(r), 0);
    use_session(&c, &id, sids[j]);
  }
  /* A turn/send to an unloaded session loads it first; its events are
   * there for a subscriber replaying from the start. */
  {
    size_t from;

    ASSERT(sids[2][0] != '\0');
    ASSERT(!session_loaded(&c, &id, sids[2]));
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\",\"input\":\"go\"}", sids[2]);
    r = dt_call(&c, id++, "turn/send", p);
    ASSERT_EQ(dt_err(r), 0);
    from = json_array_size(c.msgs);
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\",\"since_seq\":0}", sids[2]);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/subscribe", p)), 0);
    assert_bash_ran(&c, from);
  }
  /* So does a subscribe (a chat that created a session and subscribes
   * just after, while others' creates unloaded it). */
  ASSERT(sids[3][0] != '\0');
  ASSERT(!session_loaded(&c, &id, sids[3]));
  snprintf(p, sizeof(p), "{\"session\":\"%.63s\"}", sids[3]);
  ASSERT_EQ(dt_err(dt_call(&c, id++, "session/subscribe", p)), 0);
  ASSERT(session_loaded(&c, &id, sids[3]));
  r = dt_call(&c, id++, "session/list", NULL);
  ASSERT_EQ(json_array_size(
                json_object_get(json_object_get(r, "result"), "sessions")),
            ok);
  r = dt_call(&c, id++, "shutdown", NULL);
  ASSERT_EQ(dt_err(r), 0);
  dt_run_until(&t, child_gone, NULL);
  ASSERT_EQ(child_exit, 0);
  dt_assert_valid(&t);
  dt_finish(&t, cl, 1);
  return 0;
}

/* Watched sessions are not idle and stay loaded: creating more meets the
 * limit as the typed error (never -32603, never a broken session), a
 * watched session still runs bash there, and once one is unwatched the
 * next create finds room again. */
TEST_IMPL(daemon_fd_limit_typed_refusal) {
  static const char yaml[] =
      "on_exhausted: cycle\n"
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {name: bash, input: {command: \"echo hi\"}}\n"
      "  - reply:\n"
      "      content:\n"
      "        - text: \"done\"\n";
  enum { N = 500 };
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  uv_process_t proc;
  struct rlimit rl = {1024, 1024};
  char errp[300], p[400];
  static char sids[N][64];
  size_t ok = 0, i;
  int id = 10;
  json_t *r = NULL;

  al_test_timeout_s(120);
  dt_init(&t, yaml);
  snprintf(errp, sizeof(errp), "%s/err.txt", t.root);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  /* No warm pools: every session here stays loaded, and each pool holds
   * an inotify instance (128 per user), which tests beside this one need
   * too; the descriptors are what this test is about. */
  spawn_daemon(&t, &proc, errp, "AGENTLOOP_WARM=0");
  dt_connect_ready(&t, &c);
  for (i = 0; i < N; i++) {
    snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
    r = dt_call(&c, id++, "session/create", p);
    if (dt_err(r) != 0) {
      break;
    }
    snprintf(sids[ok], sizeof(sids[ok]), "%s",
             json_string_value(
                 json_object_get(json_object_get(r, "result"), "session")));
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\"}", sids[ok]);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/subscribe", p)), 0);
    ok++;
  }
  ASSERT(i < N);
  assert_fd_limit(r);
  ASSERT(ok >= 50);
  /* At the limit, a watched session's bash call still works: the
   * reserve is there for it. */
  {
    size_t from = json_array_size(c.msgs);

    snprintf(p, sizeof(p), "{\"session\":\"%.63s\",\"input\":\"go\"}",
             sids[ok - 1]);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "turn/send", p)), 0);
    assert_bash_ran(&c, from);
  }
  /* Two left alone become idle: the next create unloads one. */
  for (i = 0; i < 2; i++) {
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\"}", sids[i]);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/unsubscribe", p)), 0);
  }
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  r = dt_call(&c, id++, "session/create", p);
  if (dt_err(r) != 0) {
    /* The unload this request started is still closing (a warm sandbox
     * is killed and reaped): once session/list says it is done, the
     * create fits. */
    assert_fd_limit(r);
    while (session_loaded(&c, &id, sids[0])) {
      uv_run(&t.loop, UV_RUN_NOWAIT);
    }
    snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
    r = dt_call(&c, id++, "session/create", p);
  }
  ASSERT_EQ(dt_err(r), 0);
  r = dt_call(&c, id++, "shutdown", NULL);
  ASSERT_EQ(dt_err(r), 0);
  dt_run_until(&t, child_gone, NULL);
  ASSERT_EQ(child_exit, 0);
  dt_finish(&t, cl, 1);
  return 0;
}

/* ---- the client's configuration (defect 9) ------------------------------ */

/* The first request must carry the hook's context; the model then calls
 * the configured server's tool. */
static const char cfg_scn[] =
    "responses:\n"
    "  - expect_request: {contains: \"HOOK-CTX-42\"}\n"
    "    reply: {content: [{tool_use: {id: m1, name: mcp__cfg__echo, "
    "input: {text: 'from config.yaml'}}}]}\n"
    "  - reply: {content: [{text: 'finished'}]}\n";

static bool wait_ready_ev(dt_client_t *c, size_t *at) {
  for (; *at < json_array_size(c->msgs); (*at)++) {
    const json_t *ev = json_object_get(json_array_get(c->msgs, *at), "params");

    if (strcmp(dt_ev_type(c, *at), "mcp_server_state") == 0 &&
        strcmp(json_string_value(json_object_get(ev, "state")), "ready") == 0) {
      return true;
    }
  }
  return false;
}

/* A config.yaml written after the daemon started (which read no hooks and
 * no servers): the client's session/create carries its mcp_servers: and
 * hooks: (al__rpc_client_config, as the chat sends them), and the new
 * session runs that hook and reaches that server. */
TEST_IMPL(daemon_new_session_uses_current_config) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char dir[300], text[1200], why[600], p[200], sid[64];
  al_config_t cfg;
  json_t *params, *r;
  char *pj;
  size_t at = 0, i;
  FILE *f;

  signal(SIGPIPE, SIG_IGN);
  dt_init(&t, cfg_scn);
  snprintf(dir, sizeof(dir), "%s/cfg", t.root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", dir, 1), 0);
  t.o.kill_grace_ms = 50;
  dt_start(&t); /* no config.yaml yet: no hooks, no servers */
  snprintf(dir, sizeof(dir), "%s/cfg/agentloop", t.root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  snprintf(text, sizeof(text),
           "mcp_servers:\n"
           "  cfg:\n"
           "    command: %s\n"
           "    args: [--helper, mcp_server]\n"
           "    sandbox: false\n"
           "hooks:\n"
           "  user_prompt_submit:\n"
           "    - name: ctx\n"
           "      command: [sh, -c, 'echo "
           "\"{\\\"additional_context\\\":\\\"HOOK-CTX-42\\\"}\"']\n"
           "      sandbox: false\n",
           al_test_exe());
  snprintf(dir, sizeof(dir), "%s/cfg/agentloop/config.yaml", t.root);
  f = fopen(dir, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  ASSERT_EQ(fclose(f), 0);

  al_config_init(&cfg);
  ASSERT_EQ(al_config_load(&cfg, NULL, false, NULL), 0);
  params = json_pack("{s:s}", "cwd", t.work);
  if (al__rpc_client_config(&cfg, params, why, sizeof(why)) != 0) {
    AL_TEST_FAIL("client config: %s", why);
  }
  al_config_free(&cfg);
  ASSERT(json_object_size(json_object_get(params, "hooks_config")) > 0);
  ASSERT(json_object_size(json_object_get(params, "mcp_config")) > 0);
  pj = json_dumps(params, JSON_COMPACT);
  json_decref(params);

  dt_connect(&t, &c);
  dt_init_client(&c);
  r = dt_call(&c, 2, "session/create", pj);
  free(pj);
  ASSERT_EQ(dt_err(r), 0);
  snprintf(sid, sizeof(sid), "%s",
           json_string_value(
               json_object_get(json_object_get(r, "result"), "session")));
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"since_seq\":0}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 3, "session/subscribe", p)), 0);
  /* The server is up before the turn: no start-up wait decides it. */
  while (!wait_ready_ev(&c, &at)) {
    ASSERT(!c.eof);
    uv_run(&t.loop, UV_RUN_ONCE);
  }
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 4, "turn/send", p)), 0);
  i = dt_wait_event(&c, "tool_use_completed", at);
  {
    const json_t *ev = json_object_get(json_array_get(c.msgs, i), "params");

    ASSERT(!json_is_true(json_object_get(ev, "is_error")));
    ASSERT_STR_EQ(json_string_value(json_object_get(ev, "content")),
                  "from config.yaml");
  }
  dt_wait_event(&c, "final", i);
  dt_assert_valid(&t); /* the hook's context was in the request */

  /* A bad hook is named at create, not found as a broken agent. */
  snprintf(text, sizeof(text),
           "{\"cwd\":\"%s\",\"hooks_config\":{\"hooks\":{\"nope\":[]}}}",
           t.work);
  r = dt_call(&c, 5, "session/create", text);
  ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
  ASSERT_NOT_NULL(strstr(json_string_value(json_object_get(
                             json_object_get(r, "error"), "message")),
                         "hooks_config"));
  dt_finish(&t, cl, 1);
  return 0;
}

static const char *rec_str(const dt_t *t, size_t i, const char *where,
                           const char *key) {
  const al_mockllm_record_t *r = al_mockllm_record_get(t->mock, i);

  ASSERT_NOT_NULL(r);
  return json_string_value(
      json_object_get(strcmp(where, "body") == 0 ? r->body : r->headers, key));
}

static size_t count_method(const dt_client_t *c, const char *method) {
  size_t i, n = 0;

  for (i = 0; i < json_array_size(c->msgs); i++) {
    const char *m = json_string_value(
        json_object_get(json_array_get(c->msgs, i), "method"));

    n += m != NULL && strcmp(m, method) == 0;
  }
  return n;
}

/* A second client resuming a session another one is attached to (another
 * shell: another model, URL and key) changes nothing unless it asks
 * ("configure": true, the chat's --model); when it asks, the attached
 * client is told (session/configured, naming who). */
TEST_IMPL(daemon_resume_keeps_session_settings) {
  static const char scn[] =
      "responses:\n"
      "  - reply: {content: [{text: one}]}\n"
      "  - reply: {content: [{text: two}]}\n";
  dt_t t;
  dt_client_t a, b;
  dt_client_t *cl[] = {&a, &b};
  char p[600], sid[64];
  json_t *r;
  const json_t *res;
  size_t at, n;

  dt_init(&t, scn);
  dt_start(&t);
  dt_connect(&t, &a);
  dt_init_client(&a);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"model\":\"m-first\",\"base_url\":\"%s\","
           "\"api_key\":\"key-first-shell\"}",
           t.work, t.url);
  dt_create(&a, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 3, "session/subscribe", p)), 0);

  /* Another shell resumes it with its own settings, as the chat does. */
  dt_connect(&t, &b);
  dt_init_client(&b);
  snprintf(p, sizeof(p),
           "{\"session\":\"%s\",\"model\":\"m-second\",\"base_url\":"
           "\"http://127.0.0.1:9\",\"api_key\":\"key-second-shell\"}",
           sid);
  r = dt_call(&b, 2, "session/resume", p);
  ASSERT_EQ(dt_err(r), 0);
  res = json_object_get(r, "result");
  ASSERT_STR_EQ(json_string_value(json_object_get(res, "model")), "m-first");
  ASSERT_STR_EQ(json_string_value(json_object_get(res, "base_url")), t.url);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 4, "turn/send", p)), 0);
  at = dt_wait_event(&a, "final", 0);
  ASSERT_STR_EQ(rec_str(&t, 0, "body", "model"), "m-first");
  ASSERT_STR_EQ(rec_str(&t, 0, "headers", "x-api-key"), "key-first-shell");
  ASSERT_EQ(count_method(&a, "session/configured"), 0);

  /* It asks: the session changes, and the first client is told. */
  snprintf(p, sizeof(p),
           "{\"session\":\"%s\",\"model\":\"m-second\",\"configure\":true}",
           sid);
  r = dt_call(&b, 3, "session/resume", p);
  ASSERT_EQ(dt_err(r), 0);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_object_get(r, "result"), "model")),
      "m-second");
  n = dt_wait_notification(&a, "session/configured", at);
  res = json_object_get(json_array_get(a.msgs, n), "params");
  ASSERT_STR_EQ(json_string_value(json_object_get(res, "session")), sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(res, "model")), "m-second");
  ASSERT_NOT_NULL(json_string_value(json_object_get(res, "by")));
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"again\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&a, 5, "turn/send", p)), 0);
  dt_wait_event(&a, "final", at + 1);
  ASSERT_STR_EQ(rec_str(&t, 1, "body", "model"), "m-second");
  /* The one who asked got its answer, not the notice. */
  ASSERT_EQ(count_method(&b, "session/configured"), 0);
  dt_assert_valid(&t);
  dt_finish(&t, cl, 2);
  return 0;
}

/* ---- a restart after SIGKILL on a full state disk (defect 13) ----------- */

static bool rc_exited(void *data) {
  (void)data;
  return child_exit >= 0;
}

/* The first connection to a restarted daemon whose state disk is full
 * and whose predecessor was SIGKILLed mid-tool: every request on it gets
 * an answer (initialize, the list, a resume of each session the kill cut
 * short), and a new session that cannot be written gets the typed
 * -32009 naming ENOSPC, never -32603 or silence. A real 256 KiB tmpfs in
 * a private mount namespace (root or a user namespace; else not run). */
TEST_IMPL(daemon_sigkill_full_disk_restart_answers) {
  static const char yaml[] =
      "responses:\n" /* the last repeats: every run calls the tool */
      "  - reply:\n"
      "      content:\n"
      "        - text: \"some text for the transcript\"\n"
      "        - tool_use: {name: bash, input: {command: \"sleep 30\"}}\n";
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cl[] = {&c, &c2};
  uv_process_t proc, proc2;
  char errp[300], p[400], why[300];
  static char sids[3][64];
  const json_t *list;
  json_t *r, *v;
  size_t i;
  int id = 10;

  al_test_timeout_s(60);
  dt_init(&t, yaml);
  ASSERT_EQ(mkdir(t.state, 0700), 0);
  if (!al_test_smallfs(t.state, "256k", why, sizeof(why))) {
    if (al_test_ci()) {
      AL_TEST_FAIL("CI=true: no small filesystem: %s", why);
    }
    fprintf(stderr, "not run: no small filesystem here: %s\n", why);
    dt_finish(&t, NULL, 0);
    return AL_TEST_SKIP_CODE;
  }
  snprintf(errp, sizeof(errp), "%s/err.txt", t.root);
  spawn_daemon(&t, &proc, errp, NULL);
  dt_connect_ready(&t, &c);
  /* Three sessions, each with a tool running when the kill comes. */
  for (i = 0; i < 3; i++) {
    size_t from;

    snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
    r = dt_call(&c, id++, "session/create", p);
    ASSERT_EQ(dt_err(r), 0);
    snprintf(sids[i], sizeof(sids[i]), "%s",
             json_string_value(
                 json_object_get(json_object_get(r, "result"), "session")));
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\"}", sids[i]);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/subscribe", p)), 0);
    from = json_array_size(c.msgs);
    snprintf(p, sizeof(p), "{\"session\":\"%.63s\",\"input\":\"go\"}", sids[i]);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "turn/send", p)), 0);
    dt_wait_event(&c, "tool_use_started", from);
  }
  al_test_smallfs_fill(t.state);
  ASSERT_EQ(uv_process_kill(&proc, SIGKILL), 0);
  dt_run_until(&t, rc_exited, NULL);
  dt_wait_eof(&c);

  spawn_daemon(&t, &proc2, errp, NULL);
  /* A connection closed before its answer is retried, as the client
   * does (client_retries_connection_dropped_before_answer): the killed
   * daemon's listening socket may live on in a child it was spawning
   * (seen here in 2 runs of about 50: the first connection dropped
   * unanswered, the new daemon not yet listening). */
  dt_connect_ready(&t, &c2);
  r = dt_call(&c2, id++, "session/list", NULL);
  ASSERT_EQ(dt_err(r), 0);
  list = json_object_get(json_object_get(r, "result"), "sessions");
  ASSERT_EQ(json_array_size(list), 3);
  json_array_foreach(list, i, v) {
    snprintf(p, sizeof(p), "{\"session\":\"%s\"}",
             json_string_value(json_object_get(v, "session")));
    r = dt_call(&c2, id++, "session/resume", p);
    ASSERT_EQ(dt_err(r), 0);
  }
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  r = dt_call(&c2, id++, "session/create", p);
  ASSERT_EQ(dt_err(r), AL_RPC_STORAGE);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(
          json_object_get(json_object_get(r, "error"), "data"), "error")),
      "ENOSPC");
  r = dt_call(&c2, id++, "shutdown", NULL);
  ASSERT_EQ(dt_err(r), 0);
  dt_run_until(&t, rc_exited, NULL);
  dt_finish(&t, cl, 2);
  return 0;
}

/* The client's side of it: a socket whose listener takes the first
 * connection and closes it unanswered (the leftover of a daemon killed
 * while it spawned a tool: its listening socket lives on in that child
 * until the child's exec) is a failed attempt, not a lost daemon. The
 * real `agentloop doctor` (which starts the daemon it checks) meets such
 * a listener first, retries, starts agentloopd and gets its answer. */
TEST_IMPL(client_retries_connection_dropped_before_answer) {
  char home[] = "/var/tmp/al_i22c_XXXXXX";
  char dir[200], sock[300], cmd[1400], out[16384];
  struct sockaddr_un sa;
  int lfd, cfd, status;
  pid_t orphan;
  size_t n;
  FILE *p;

  ASSERT_NOT_NULL(mkdtemp(home));
  snprintf(dir, sizeof(dir), "%s/agentloop", home);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  snprintf(sock, sizeof(sock), "%s/agentloopd.sock", dir);
  lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT(lfd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  ASSERT(strlen(sock) < sizeof(sa.sun_path));
  memcpy(sa.sun_path, sock, strlen(sock) + 1);
  ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ASSERT_EQ(listen(lfd, 8), 0);
  orphan = fork();
  ASSERT(orphan >= 0);
  if (orphan == 0) {
    /* The leftover: one connection taken and dropped, then gone (its
     * exec), the socket file left behind as a SIGKILL leaves it. */
    cfd = accept(lfd, NULL, NULL);
    if (cfd >= 0) {
      close(cfd);
    }
    _exit(0);
  }
  close(lfd);
  snprintf(cmd, sizeof(cmd),
           "cd /tmp && HOME='%s' XDG_RUNTIME_DIR='%s' XDG_STATE_HOME='%s' "
           "XDG_CONFIG_HOME=/nonexistent NO_COLOR=1 "
           "AGENTLOOP_START_TIMEOUT_MS=%d '%s/agentloop' doctor 2>&1",
           home, home, home, 20000 * al_test_timeout_multiplier(),
           AL_BINARY_DIR);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  (void)pclose(p);
  ASSERT_EQ(waitpid(orphan, &status, 0), orphan);
  snprintf(cmd, sizeof(cmd),
           "HOME='%s' XDG_RUNTIME_DIR='%s' XDG_STATE_HOME='%s' "
           "XDG_CONFIG_HOME=/nonexistent '%s/agentloop' daemon stop "
           ">/dev/null 2>&1; rm -rf '%s'",
           home, home, home, AL_BINARY_DIR, home);
  (void)system(cmd);
  if (strstr(out, ") started at ") == NULL) {
    AL_TEST_FAIL("doctor did not reach a daemon:\n%s", out);
  }
  return 0;
}

/* An idle session whose transcript writer is failing (a full disk: its
 * records wait in memory for the retry) is never unloaded: closing the
 * writer then would lose them. Once the writer has caught up it may go. */
static char fail_path[300];

static int fail_one(const char *path) {
  return strcmp(path, fail_path) == 0 ? UV_ENOSPC : 0;
}

static bool loaded_in_list(dt_client_t *c, int *id, const char *sid) {
  return session_loaded(c, id, sid);
}

TEST_IMPL(daemon_unload_keeps_failing_writer) {
  static const char yaml[] =
      "responses:\n"
      "  - reply: {content: [{text: one}]}\n";
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char p[400], a[64];
  int id = 10;
  size_t i;

  dt_init(&t, yaml);
  t.o.max_idle_sessions = 1;
  al__tx_retry_min_ms = 5;
  al__tx_retry_max_ms = 20;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, a, sizeof(a));
  snprintf(fail_path, sizeof(fail_path), "%s/sessions/%s.jsonl", t.state, a);
  al__tx_write_fault = fail_one;
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", a);
  ASSERT_EQ(dt_err(dt_call(&c, id++, "session/subscribe", p)), 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", a);
  ASSERT_EQ(dt_err(dt_call(&c, id++, "turn/send", p)), 0);
  dt_wait_notification(&c, "session/persist_error", 0);
  dt_wait_event(&c, "final", 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", a);
  ASSERT_EQ(dt_err(dt_call(&c, id++, "session/unsubscribe", p)), 0);
  /* Three more idle sessions, one allowed: A stays, its writer failing. */
  for (i = 0; i < 3; i++) {
    snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/create", p)), 0);
  }
  ASSERT(loaded_in_list(&c, &id, a));
  /* The disk has room again: once A's writer caught up, the next create
   * unloads it (the least recently active) and nothing was lost. */
  al__tx_write_fault = NULL;
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  for (;;) {
    ASSERT_EQ(dt_err(dt_call(&c, id++, "session/create", p)), 0);
    if (!loaded_in_list(&c, &id, a)) {
      break;
    }
    uv_run(&t.loop, UV_RUN_ONCE); /* the retry timer */
  }
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", a);
  {
    json_t *r = dt_call(&c, id++, "session/resume", p);

    ASSERT_EQ(json_integer_value(
                  json_object_get(json_object_get(r, "result"), "messages")),
              2);
  }
  dt_finish(&t, cl, 1);
  return 0;
}

/* A run started on a session nobody watches (a turn/send without
 * subscribe) is never unloaded by the room its admission makes: with one
 * idle session allowed and two idle, the other one goes. Admission took
 * the least recently active, which may be the very session about to run,
 * and the run then started on an agent that was closing. Admission is
 * driven directly: which sessions are idle at a turn/send depends on when
 * their writers flush. */
TEST_IMPL(daemon_run_keeps_its_own_session_loaded) {
  static const char yaml[] =
      "responses:\n"
      "  - reply: {content: [{text: one}]}\n";
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char p[400], a[64], b[64];
  session_t *sa, *sb;

  dt_init(&t, yaml);
  t.o.max_idle_sessions = 1;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, a, sizeof(a));
  {
    json_t *r = dt_call(&c, 3, "session/create", p);

    snprintf(b, sizeof(b), "%s",
             json_string_value(json_object_get(json_object_get(r, "result"),
                                               "session")));
  }
  ASSERT(strcmp(a, b) != 0);
  sa = al__session_find(t.d, a);
  sb = al__session_find(t.d, b);
  /* Both idle (their headers written); A the least recently active. */
  while (!al__session_is_idle(sa) || !al__session_is_idle(sb)) {
    uv_run(&t.loop, UV_RUN_ONCE);
  }
  ASSERT(sa->last_active <= sb->last_active);
  /* What turn/send on A asks before it starts the run. */
  ASSERT(al__daemon_fd_admit(t.d, sa, NULL, NULL, 0, "start a run"));
  ASSERT(!sa->unloading);
  ASSERT(sb->unloading);
  dt_finish(&t, cl, 1);
  return 0;
}

/* A daemon that turns a connection away says why (-32001, id null); the
 * client reports that reason instead of retrying into it. */
TEST_IMPL(client_says_why_turned_away) {
  static const char refusal[] =
      "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,"
      "\"message\":\"too many clients\"}}\n";
  char home[] = "/var/tmp/al_i22w_XXXXXX";
  char dir[200], sock[300], cmd[1400], out[16384];
  struct sockaddr_un sa;
  int lfd, cfd, status;
  pid_t srv;
  size_t n;
  FILE *p;

  ASSERT_NOT_NULL(mkdtemp(home));
  snprintf(dir, sizeof(dir), "%s/agentloop", home);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  snprintf(sock, sizeof(sock), "%s/agentloopd.sock", dir);
  lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT(lfd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  ASSERT(strlen(sock) < sizeof(sa.sun_path));
  memcpy(sa.sun_path, sock, strlen(sock) + 1);
  ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ASSERT_EQ(listen(lfd, 8), 0);
  srv = fork();
  ASSERT(srv >= 0);
  if (srv == 0) {
    cfd = accept(lfd, NULL, NULL);
    if (cfd >= 0) {
      if (write(cfd, refusal, sizeof(refusal) - 1) < 0) {
        _exit(1);
      }
      close(cfd);
    }
    _exit(0);
  }
  close(lfd);
  snprintf(cmd, sizeof(cmd),
           "cd /tmp && HOME='%s' XDG_RUNTIME_DIR='%s' XDG_STATE_HOME='%s' "
           "XDG_CONFIG_HOME=/nonexistent NO_COLOR=1 '%s/agentloop' doctor "
           "2>&1",
           home, home, home, AL_BINARY_DIR);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  (void)pclose(p);
  ASSERT_EQ(waitpid(srv, &status, 0), srv);
  snprintf(cmd, sizeof(cmd),
           "HOME='%s' XDG_RUNTIME_DIR='%s' XDG_STATE_HOME='%s' "
           "XDG_CONFIG_HOME=/nonexistent '%s/agentloop' daemon stop "
           ">/dev/null 2>&1; rm -rf '%s'",
           home, home, home, AL_BINARY_DIR, home);
  (void)system(cmd);
  if (strstr(out, "agentloopd refused the connection: too many clients") ==
      NULL) {
    AL_TEST_FAIL("doctor did not say why:\n%s", out);
  }
  return 0;
}
