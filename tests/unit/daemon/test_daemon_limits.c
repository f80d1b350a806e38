/* Daemon-wide limits (issue 15): a real agentloopd takes `limits:` from its
 * configuration file and --limit from its command line; they are every
 * session's defaults, and ceilings a session/create may lower but not
 * raise (a raise is a JSON-RPC error naming the limit). A bad limit in its
 * file stops it with exit 2 and FILE:LINE:COL. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtest.h"

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

/* $XDG_CONFIG_HOME/agentloop/config.yaml under the test's root. */
static void write_config(const dt_t *t, const char *text) {
  char p[300];
  FILE *f;

  snprintf(p, sizeof(p), "%s/cfg", t->root);
  (void)mkdir(p, 0700);
  snprintf(p, sizeof(p), "%s/cfg/agentloop", t->root);
  (void)mkdir(p, 0700);
  snprintf(p, sizeof(p), "%s/cfg/agentloop/config.yaml", t->root);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

/* agentloopd --foreground with the test's socket, state and config, and
 * extra arguments; its stderr goes to `err_path`. */
static void spawn(dt_t *t, uv_process_t *p, const char *extra1,
                  const char *extra2, const char *err_path) {
  static char envs[6][300];
  static char *env[7];
  char exe[600];
  char *args[12];
  int n = 0, fd;
  uv_process_options_t po;
  uv_stdio_container_t io[3];

  snprintf(envs[0], sizeof(envs[0]), "AGENTLOOP_BASE_URL=%s", t->url);
  snprintf(envs[1], sizeof(envs[1]), "ANTHROPIC_API_KEY=test-key");
  snprintf(envs[2], sizeof(envs[2]), "AGENTLOOP_MODEL=mock-model");
  snprintf(envs[3], sizeof(envs[3]), "PATH=/usr/bin:/bin");
  snprintf(envs[4], sizeof(envs[4]), "XDG_CONFIG_HOME=%s/cfg", t->root);
  snprintf(envs[5], sizeof(envs[5]), "HOME=%s", t->root);
  for (n = 0; n < 6; n++) {
    env[n] = envs[n];
  }
  env[6] = NULL;
  n = 0;
  snprintf(exe, sizeof(exe), "%s/agentloopd", AL_BINARY_DIR);
  args[n++] = exe;
  args[n++] = "--foreground";
  args[n++] = "--socket";
  args[n++] = t->sock;
  args[n++] = "--state-dir";
  args[n++] = t->state;
  if (extra1 != NULL) {
    args[n++] = (char *)extra1;
    args[n++] = (char *)extra2;
  }
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

static json_t *create(dt_client_t *c, int id, const dt_t *t,
                      const char *limits) {
  char p[600];

  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"limits\":%s}", t->work, limits);
  return dt_call(c, id, "session/create", p);
}

/* The raise is refused, naming the limit; the daemon stays usable. */
static void assert_raise_refused(dt_client_t *c, int id, const dt_t *t,
                                 const char *limits, const char *name) {
  json_t *r = create(c, id, t, limits);
  json_t *e = json_object_get(r, "error");
  const char *msg = json_string_value(json_object_get(e, "message"));

  ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
  ASSERT_NOT_NULL(msg);
  ASSERT_NOT_NULL(strstr(msg, name));
  ASSERT_NOT_NULL(strstr(msg, "ceiling"));
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(e, "data"), "limit")),
                name);
}

TEST_IMPL(daemon_limits_defaults_and_ceilings) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  uv_process_t proc;
  char errp[300], p[300], sid[64];
  json_t *r;
  size_t i;
  const json_t *ev;
  /* 8 KiB of text: past the daemon's 4K reply_bytes. */
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - repeat_text: {count: 512, text: \"0123456789abcdef\"}\n";

  dt_init(&t, yaml);
  write_config(&t, "limits:\n  reply_bytes: 4K\n  header_count: 100\n");
  snprintf(errp, sizeof(errp), "%s/err.txt", t.root);
  spawn(&t, &proc, "--limit", "total_time_ms=600000", errp);
  dt_connect_ready(&t, &c);

  /* Raises: above the file's ceiling, above the flag's, "none". */
  assert_raise_refused(&c, 10, &t, "{\"reply_bytes\":\"1M\"}", "reply_bytes");
  assert_raise_refused(&c, 11, &t, "{\"total_time_ms\":600001}",
                       "total_time_ms");
  assert_raise_refused(&c, 12, &t, "{\"header_count\":\"none\"}",
                       "header_count");
  /* Lowering is fine, and so is a limit the daemon does not set. */
  r = create(&c, 13, &t, "{\"header_count\":50,\"reply_bytes\":\"2K\","
                         "\"min_rate_bytes\":64}");
  ASSERT_EQ(dt_err(r), 0);

  /* The default: a session that says nothing gets the daemon's 4K. */
  r = create(&c, 14, &t, "{}");
  ASSERT_EQ(dt_err(r), 0);
  snprintf(sid, sizeof(sid), "%s",
           json_string_value(json_object_get(json_object_get(r, "result"),
                                             "session")));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 15, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", sid);
  dt_call(&c, 16, "turn/send", p);
  i = dt_wait_event(&c, "api_error", 0);
  ev = json_object_get(json_array_get(c.msgs, i), "params");
  ASSERT_STR_EQ(json_string_value(json_object_get(ev, "kind")),
                "reply_too_large");
  ASSERT_NOT_NULL(strstr(json_string_value(json_object_get(ev, "message")),
                         "limit of 4096 bytes"));
  r = dt_call(&c, 17, "shutdown", NULL);
  ASSERT_EQ(dt_err(r), 0);
  dt_run_until(&t, child_gone, NULL);
  ASSERT_EQ(child_exit, 0);
  dt_finish(&t, cl, 1);
  return 0;
}

/* A limit in the daemon's file that does not parse: exit 2, FILE:LINE:COL
 * on stderr, nothing listening. So is a bad --limit. */
TEST_IMPL(daemon_limits_bad_config_exit_2) {
  dt_t t;
  uv_process_t proc;
  char errp[300];
  char *text;

  dt_init(&t, NULL);
  snprintf(errp, sizeof(errp), "%s/err.txt", t.root);
  write_config(&t, "limits:\n  reply_bytes: lots\n");
  spawn(&t, &proc, NULL, NULL, errp);
  dt_run_until(&t, child_gone, NULL);
  ASSERT_EQ(child_exit, 2);
  text = al_test_read_file(errp, NULL);
  ASSERT_NOT_NULL(text);
  ASSERT_NOT_NULL(strstr(text, "config.yaml:2:16: limits.reply_bytes"));
  free(text);

  write_config(&t, "limits:\n  reply_bytes: 4K\n");
  spawn(&t, &proc, "--limit", "reply_byts=4K", errp);
  dt_run_until(&t, child_gone, NULL);
  ASSERT_EQ(child_exit, 2);
  text = al_test_read_file(errp, NULL);
  ASSERT_NOT_NULL(strstr(text, "bad --limit reply_byts=4K"));
  free(text);
  dt_finish(&t, NULL, 0);
  return 0;
}
