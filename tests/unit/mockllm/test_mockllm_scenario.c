/* Scenario loading: every shipped scenario parses, malformed YAML and
 * invalid values are reported as NAME:LINE:COLUMN: reason, and the CLI
 * binary starts with --port-file, serves, and exits 0 on SIGTERM. */
#include <signal.h>
#include <unistd.h>

#include "unit/mockllm/mtest.h"

static void expect_error(const char *yaml, const char *want) {
  al_mockllm_scenario_t *s = NULL;
  char err[512];
  int rc;

  rc = al_mockllm_load_scenario_string(yaml, strlen(yaml), "t.yaml", &s, err,
                                       sizeof(err));
  ASSERT_EQ(rc, AL_EPARSE);
  ASSERT_NULL(s);
  if (strncmp(err, want, strlen(want)) != 0) {
    AL_TEST_FAIL("scenario error\n  got:      %s\n  expected: %s...", err,
                 want);
  }
}

TEST_IMPL(mockllm_scenario_errors) {
  /* YAML syntax errors come from libyaml, with its position. */
  expect_error("responses:\n  - reply: {content: [\n", "t.yaml:3:1: ");
  expect_error("responses: [\"a\n", "t.yaml:");
  expect_error("a: b\n c: d\n", "t.yaml:2:3: ");
  /* Structure. */
  expect_error("", "t.yaml:1:1: empty scenario");
  expect_error("- 1\n", "t.yaml:1:1: the scenario must be a mapping");
  expect_error("model: x\n", "t.yaml:1:1: the scenario needs a responses list");
  expect_error("responses: []\n",
               "t.yaml:1:12: responses must be a non-empty list");
  expect_error("respones:\n  - reply: {}\n",
               "t.yaml:1:1: unknown top-level key 'respones'");
  expect_error("responses:\n  - {}\n",
               "t.yaml:2:5: a response needs a reply or a fault");
  expect_error("responses:\n  - reply:\n      content: hello\n",
               "t.yaml:3:16: reply.content must be a list of blocks");
  expect_error("responses:\n  - reply:\n      content:\n        - txt: hi\n",
               "t.yaml:4:11: unknown key 'txt' in a content block");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - {text: a, thinking: b}\n",
               "t.yaml:4:21: a content block has exactly one of");
  /* Values. */
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - {text: a, chunks: 0}\n",
               "t.yaml:4:29: chunks must be at least 1");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - {text: a, chunks: 2, chunk_size: 3}\n",
               "t.yaml:4:11: give either chunks or chunk_size, not both");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - {text: a, delay_ms: -5}\n",
               "t.yaml:4:31: delay_ms must be a non-negative integer");
  expect_error("responses:\n  - fault: {status: 99}\n",
               "t.yaml:2:21: fault.status must be 200..599 (not 204/304)");
  expect_error("responses:\n  - fault: {status: 600}\n",
               "t.yaml:2:21: fault.status must be an integer between 0 and "
               "599");
  expect_error("responses:\n  - fault: {status: 429}\n"
               "    reply: {content: []}\n",
               "t.yaml:2:5: a response with fault.status 429 has no reply");
  expect_error("responses:\n  - fault: {stall_after_headers: maybe}\n",
               "t.yaml:2:34: fault.stall_after_headers must be true or "
               "false");
  expect_error("responses:\n  - reply: {stop_reason: done}\n",
               "t.yaml:2:26: unknown stop_reason 'done'");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - tool_use: {id: x}\n",
               "t.yaml:4:21: tool_use needs a name");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - tool_use: {name: x, input: [1]}\n",
               "t.yaml:4:38: tool_use.input must be a mapping");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - repeat_text: {text: x}\n",
               "t.yaml:4:24: repeat_text needs count and a non-empty text");
  expect_error("on_exhausted: loop\nresponses:\n  - reply: {}\n",
               "t.yaml:1:15: on_exhausted must be repeat_last, error or "
               "cycle");
  expect_error("transfer: gzip\nresponses:\n  - reply: {}\n",
               "t.yaml:1:11: transfer must be chunked or close");
  expect_error("responses:\n  - fault: {drip: {interval_ms: 5}}\n",
               "t.yaml:2:19: drip needs bytes");
  /* A key given twice (libyaml allows it) is an error, not a silent
   * replacement: found by fuzz_scenario, the second headers/content used to
   * leak the first. */
  expect_error("responses:\n  - headers: {}\n    headers: {}",
               "t.yaml:3:5: duplicate key 'headers'");
  expect_error("responses:\n  - reply: {content: [text: a], content: []}\n",
               "t.yaml:2:33: duplicate key 'content'");
  expect_error("responses:\n  - reply:\n      content:\n"
               "        - {text: a, delay_ms: 1, delay_ms: 2}\n",
               "t.yaml:4:34: duplicate key 'delay_ms'");
  return 0;
}

TEST_IMPL(mockllm_scenario_files) {
  static const char *const good[] = {
      "scenarios/good_all.yaml",       "scenarios/text.yaml",
      "scenarios/tool_roundtrip.yaml", "scenarios/parallel_tools.yaml",
      "scenarios/retry_then_ok.yaml",  "scenarios/faults_stream.yaml",
      "scenarios/bench_200k.yaml"};
  static const struct {
    const char *file;
    const char *want;
  } bad[] = {
      {"scenarios/bad_syntax.yaml", ":5:1: found unexpected end of stream "
                                    "(while scanning a quoted scalar at "
                                    "line 4)"},
      {"scenarios/bad_unknown_key.yaml", ":7:7: unknown key 'stauts' in fault"},
      {"scenarios/bad_status.yaml", ":2:21: fault.status must be 200..599"},
      {"scenarios/bad_tool_use.yaml", ":5:13: tool_use needs a name"},
      {"scenarios/bad_chunks.yaml", ":5:19: chunks must be at least 1"},
  };
  char path[4096];
  char err[512];
  al_mockllm_scenario_t *s;
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(good); i++) {
    snprintf(path, sizeof(path), "%s", al_test_data_path(good[i]));
    if (al_mockllm_load_scenario_file(path, &s, err, sizeof(err)) != 0) {
      AL_TEST_FAIL("%s: %s", good[i], err);
    }
    ASSERT(al_mockllm_scenario_count(s) >= 1);
    al_mockllm_scenario_free(s);
  }
  snprintf(path, sizeof(path), "%s/examples/scenarios/demo.yaml",
           AL_SOURCE_DIR);
  if (al_mockllm_load_scenario_file(path, &s, err, sizeof(err)) != 0) {
    AL_TEST_FAIL("demo.yaml: %s", err);
  }
  al_mockllm_scenario_free(s);
  for (i = 0; i < AL_ARRAY_SIZE(bad); i++) {
    char want[4200];

    snprintf(path, sizeof(path), "%s", al_test_data_path(bad[i].file));
    ASSERT_EQ(al_mockllm_load_scenario_file(path, &s, err, sizeof(err)),
              AL_EPARSE);
    snprintf(want, sizeof(want), "%s%s", path, bad[i].want);
    if (strncmp(err, want, strlen(want)) != 0) {
      AL_TEST_FAIL("got:      %s\n  expected: %s...", err, want);
    }
  }
  ASSERT_EQ(al_mockllm_load_scenario_file("/nonexistent/x.yaml", &s, err,
                                          sizeof(err)),
            AL_ENOENT);
  ASSERT_NOT_NULL(strstr(err, "/nonexistent/x.yaml"));
  return 0;
}

/* ---- the CLI binary --------------------------------------------------------- */

typedef struct {
  uv_loop_t *loop;
  uv_process_t proc;
  uv_pipe_t out;
  al_buf_t stdout_buf;
  int64_t exit_status;
  int term_signal;
  bool exited;
  bool out_eof;
  bool got_line;
  int port;
  const char *port_file;
  mt_client_t client;
} cli_t;

static void proc_close_cb(uv_handle_t *h) { (void)h; }

static void exit_cb(uv_process_t *p, int64_t status, int sig) {
  cli_t *t = p->data;

  t->exited = true;
  t->exit_status = status;
  t->term_signal = sig;
  uv_close((uv_handle_t *)p, proc_close_cb);
}

/* Request answered and client closed: stop the server. */
static void client_closed(mt_client_t *c) {
  cli_t *t = c->data;

  if (!t->exited) {
    ASSERT_EQ(uv_process_kill(&t->proc, SIGTERM), 0);
  }
}

static void cli_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  (void)h;
  b->base = malloc(sz);
  b->len = sz;
}

static void start_client(cli_t *t) {
  char *file;
  char *req;

  /* The port file exists before the line is printed. */
  file = al_test_read_file(t->port_file, NULL);
  ASSERT_NOT_NULL(file);
  t->port = atoi(file);
  free(file);
  ASSERT(t->port > 0);
  mt_client_init(&t->client);
  req = mt_anthropic(mt_simple_anthropic);
  mt_client_add(&t->client, req);
  free(req);
  t->client.data = t;
  t->client.on_close = client_closed;
  mt_client_start(&t->client, t->loop, t->port);
}

static void out_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  cli_t *t = s->data;

  if (n > 0) {
    al_buf_append(&t->stdout_buf, b->base, (size_t)n);
    if (!t->got_line && memchr(t->stdout_buf.data, '\n', t->stdout_buf.len)) {
      t->got_line = true;
      start_client(t);
    }
  } else if (n < 0) {
    t->out_eof = true;
    uv_close((uv_handle_t *)s, proc_close_cb);
  }
  free(b->base);
}

TEST_IMPL(mockllm_cli_port_file_sigterm) {
  uv_loop_t loop;
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  cli_t t;
  char exe[4096];
  char scen[4096];
  char pf[256];
  char *args[12];

  snprintf(exe, sizeof(exe), "%s/agentloop-mockllm", AL_BINARY_DIR);
  snprintf(scen, sizeof(scen), "%s", al_test_data_path("scenarios/text.yaml"));
  snprintf(pf, sizeof(pf), "/tmp/al-mockllm-port-%d", (int)getpid());
  unlink(pf);
  memset(&t, 0, sizeof(t));
  t.loop = &loop;
  t.port_file = pf;
  al_buf_init(&t.stdout_buf, 65536);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(uv_pipe_init(&loop, &t.out, 0), 0);
  t.out.data = &t;
  args[0] = exe;
  args[1] = "--listen";
  args[2] = "127.0.0.1:0";
  args[3] = "--scenario";
  args[4] = scen;
  args[5] = "--port-file";
  args[6] = pf;
  args[7] = "--quiet";
  args[8] = NULL;
  memset(&po, 0, sizeof(po));
  po.file = exe;
  po.args = args;
  po.exit_cb = exit_cb;
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&t.out;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  po.stdio = stdio;
  po.stdio_count = 3;
  t.proc.data = &t;
  ASSERT_EQ(uv_spawn(&loop, &t.proc, &po), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&t.out, cli_alloc, out_read), 0);
  ASSERT_LOOP_CLOSES(&loop);

  ASSERT(t.exited);
  ASSERT_EQ(t.term_signal, 0);
  ASSERT_EQ(t.exit_status, 0);
  {
    char want[64];

    snprintf(want, sizeof(want), "listening on http://127.0.0.1:%d\n", t.port);
    ASSERT_STR_EQ(t.stdout_buf.data, want);
  }
  ASSERT_EQ(t.client.status[0], 200);
  ASSERT_NOT_NULL(strstr(t.client.body[0].data, "\"text\":\"The a\""));
  mt_client_free(&t.client);
  al_buf_free(&t.stdout_buf);
  unlink(pf);
  return 0;
}

TEST_IMPL(mockllm_cli_bad_scenario_exit_2) {
  uv_loop_t loop;
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  cli_t t;
  char exe[4096];
  char scen[4096];
  char *args[8];

  snprintf(exe, sizeof(exe), "%s/agentloop-mockllm", AL_BINARY_DIR);
  snprintf(scen, sizeof(scen), "%s",
           al_test_data_path("scenarios/bad_status.yaml"));
  memset(&t, 0, sizeof(t));
  al_buf_init(&t.stdout_buf, 65536);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(uv_pipe_init(&loop, &t.out, 0), 0);
  t.out.data = &t;
  t.got_line = true; /* no client */
  args[0] = exe;
  args[1] = "--scenario";
  args[2] = scen;
  args[3] = NULL;
  memset(&po, 0, sizeof(po));
  po.file = exe;
  po.args = args;
  po.exit_cb = exit_cb;
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_IGNORE;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&t.out;
  po.stdio = stdio;
  po.stdio_count = 3;
  t.proc.data = &t;
  ASSERT_EQ(uv_spawn(&loop, &t.proc, &po), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&t.out, cli_alloc, out_read), 0);
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(t.exit_status, 2);
  ASSERT_NOT_NULL(strstr(t.stdout_buf.data, "bad_status.yaml:2:21: fault.status must be"));
  al_buf_free(&t.stdout_buf);
  return 0;
}
