/* `agentloop run` end to end: the real binary, spawned with uv_spawn,
 * streams from an in-process agentloop-mockllm on the test's own loop over
 * loopback HTTP. Checks what it prints, its exit code and reason, and the
 * request the server received (which the server validates like the API). */
#include <jansson.h>

#include "mockllm/mockllm.h"
#include "test.h"

typedef struct {
  uv_loop_t loop;
  al_mockllm_t *mock;
  uv_process_t proc;
  uv_pipe_t out;
  uv_pipe_t err;
  char obuf[65536];
  size_t olen;
  char ebuf[16384];
  size_t elen;
  int64_t exit_status;
  int term_signal;
  int exits;
  int eofs;
} cli_t;

/* The run is over once the process exited and both pipes reached EOF. */
static void maybe_done(cli_t *c) {
  if (c->exits == 1 && c->eofs == 2) {
    uv_stop(&c->loop);
  }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  cli_t *c = h->loop->data;
  bool is_out = h == (uv_handle_t *)&c->out;
  char *base = is_out ? c->obuf + c->olen : c->ebuf + c->elen;
  size_t room = is_out ? sizeof(c->obuf) - c->olen - 1
                       : sizeof(c->ebuf) - c->elen - 1;

  (void)hint;
  *buf = uv_buf_init(base, (unsigned int)room);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  cli_t *c = s->loop->data;

  (void)buf;
  if (n > 0) {
    if (s == (uv_stream_t *)&c->out) {
      c->olen += (size_t)n;
      c->obuf[c->olen] = '\0';
    } else {
      c->elen += (size_t)n;
      c->ebuf[c->elen] = '\0';
    }
  } else if (n < 0) {
    uv_close((uv_handle_t *)s, NULL);
    c->eofs++;
    maybe_done(c);
  }
}

static void on_mock_closed(al_mockllm_t *m) {
  (void)m;
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  cli_t *c = p->loop->data;

  c->exit_status = status;
  c->term_signal = sig;
  c->exits++;
  uv_close((uv_handle_t *)p, NULL);
  maybe_done(c);
}

/* Stops the server (after the test read its records) and checks that the
 * loop closes cleanly. */
static void finish(cli_t *c) {
  al_mockllm_close(c->mock, on_mock_closed);
  ASSERT_LOOP_CLOSES(&c->loop);
}

static void start_mock(cli_t *c, const char *yaml) {
  al_mockllm_options_t mo;
  char err[256];

  memset(c, 0, sizeof(*c));
  ASSERT_EQ(uv_loop_init(&c->loop), 0);
  c->loop.data = c;
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&c->loop, &mo, &c->mock), 0);
}

/* Spawns `agentloop ARGS...` (NULL-terminated, after the binary name) with
 * {PORT} in any argument replaced by the mock's port, and runs the loop
 * until the process has exited and its output is read. */
static void run_cli(cli_t *c, const char *const *args, char **env) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char *argv[32];
  char bin[4096];
  char ports[16];
  char expanded[32][512];
  size_t i;

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  snprintf(ports, sizeof(ports), "%d", al_mockllm_port(c->mock));
  argv[0] = bin;
  for (i = 0; args[i] != NULL && i < 30; i++) {
    const char *p = strstr(args[i], "{PORT}");
    if (p != NULL) {
      snprintf(expanded[i], sizeof(expanded[i]), "%.*s%s%s",
               (int)(p - args[i]), args[i], ports, p + 6);
      argv[i + 1] = expanded[i];
    } else {
      argv[i + 1] = (char *)args[i];
    }
  }
  argv[i + 1] = NULL;

  ASSERT_EQ(uv_pipe_init(&c->loop, &c->out, 0), 0);
  ASSERT_EQ(uv_pipe_init(&c->loop, &c->err, 0), 0);
  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&c->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&c->err;
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  ASSERT_EQ(uv_spawn(&c->loop, &c->proc, &po), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->out, on_alloc, on_read), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->err, on_alloc, on_read), 0);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  ASSERT_EQ(c->exits, 1);
}

/* A minimal environment: no API keys or base URLs from the host leak in. */
static char *clean_env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", NULL};

static const char *text_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - thinking: \"pondering\"\n"
    "          signature: sig\n"
    "        - text: \"Hello from the mock, \\u00e9t\\u00e9 \\U0001F600 done.\"\n"
    "          chunk_size: 3\n"
    "      usage: {input_tokens: 5, output_tokens: 9}\n";

TEST_IMPL(cli_run_streams_anthropic) {
  cli_t c;
  const char *args[] = {"run", "--provider", "anthropic", "--base-url",
                        "http://127.0.0.1:{PORT}", "--api-key", "k",
                        "--model", "m-test", "-p", "hello", NULL};
  const al_mockllm_record_t *rec;

  start_mock(&c, text_yaml);
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.obuf, "Hello from the mock, \xc3\xa9t\xc3\xa9 "
                        "\xf0\x9f\x98\x80 done.\n");
  /* Thinking goes to stderr, never into the answer. */
  ASSERT_NOT_NULL(strstr(c.ebuf, "pondering"));

  ASSERT_EQ(al_mockllm_record_count(c.mock), 1);
  rec = al_mockllm_record_get(c.mock, 0);
  ASSERT_STR_EQ(rec->path, "/v1/messages");
  ASSERT(rec->valid);
  ASSERT_STR_EQ(json_string_value(json_object_get(rec->body, "model")),
                "m-test");
  ASSERT(json_is_true(json_object_get(rec->body, "stream")));
  ASSERT_STR_EQ(json_string_value(json_object_get(rec->headers, "x-api-key")),
                "k");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(rec->headers, "anthropic-version")),
      "2023-06-01");
  finish(&c);
  return 0;
}

TEST_IMPL(cli_run_streams_openai) {
  cli_t c;
  const char *args[] = {"run", "--provider", "openai", "--base-url",
                        "http://127.0.0.1:{PORT}/v1", "--api-key", "k",
                        "-p", "hello", NULL};
  const al_mockllm_record_t *rec;
  json_t *msgs;

  start_mock(&c, text_yaml);
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.obuf, "Hello from the mock, \xc3\xa9t\xc3\xa9 "
                        "\xf0\x9f\x98\x80 done.\n");
  rec = al_mockllm_record_get(c.mock, 0);
  ASSERT_NOT_NULL(rec);
  /* A base URL ending in /v1 is not doubled. */
  ASSERT_STR_EQ(rec->path, "/v1/chat/completions");
  ASSERT(rec->valid);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(rec->headers, "authorization")),
      "Bearer k");
  msgs = json_object_get(rec->body, "messages");
  ASSERT_EQ(json_array_size(msgs), 1);
  ASSERT_STR_EQ(
      json_string_value(json_object_get(json_array_get(msgs, 0), "content")),
      "hello");
  finish(&c);
  return 0;
}

TEST_IMPL(cli_run_http_error_exit_1) {
  cli_t c;
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--api-key", "k", "-p", "hi", NULL};

  start_mock(&c, "responses:\n  - fault: {status: 429, retry_after: 3}\n");
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 1);
  ASSERT_EQ(c.olen, 0);
  ASSERT_NOT_NULL(strstr(c.ebuf, "agentloop run: HTTP 429 rate_limit"));
  finish(&c);
  return 0;
}

TEST_IMPL(cli_run_stream_error_event_exit_1) {
  cli_t c;
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--api-key", "k", "-p", "hi", NULL};

  start_mock(&c,
             "responses:\n"
             "  - fault: {error_event_after: 4}\n"
             "    reply: {content: [{text: \"partial answer\", "
             "chunk_size: 4}]}\n");
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 1);
  /* What arrived before the error was shown as it streamed. */
  ASSERT(c.olen > 0);
  ASSERT_NOT_NULL(strstr(c.ebuf, "stream error event"));
  ASSERT_NOT_NULL(strstr(c.ebuf, "verloaded"));
  finish(&c);
  return 0;
}

TEST_IMPL(cli_run_reset_mid_stream_exit_1) {
  cli_t c;
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--api-key", "k", "-p", "hi", NULL};

  start_mock(&c,
             "responses:\n"
             "  - fault: {reset_after_bytes: 300}\n"
             "    reply: {content: [{text: \"a long enough answer to cut\", "
             "chunk_size: 2}]}\n");
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 1);
  ASSERT_NOT_NULL(strstr(c.ebuf, "agentloop run: "));
  finish(&c);
  return 0;
}

TEST_IMPL(cli_run_usage_errors_exit_2) {
  cli_t c;
  const char *no_key[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                          "-p", "hi", NULL};

  start_mock(&c, text_yaml);
  run_cli(&c, no_key, clean_env);
  ASSERT_EQ(c.exit_status, 2);
  ASSERT_NOT_NULL(strstr(c.ebuf, "ANTHROPIC_API_KEY"));
  /* Nothing was sent without a key. */
  ASSERT_EQ(al_mockllm_record_count(c.mock), 0);
  finish(&c);

  {
    const char *bad_provider[] = {"run", "--provider", "nope", "-p", "x",
                                  NULL};
    start_mock(&c, text_yaml);
    run_cli(&c, bad_provider, clean_env);
    ASSERT_EQ(c.exit_status, 2);
    ASSERT_NOT_NULL(strstr(c.ebuf, "unknown provider"));
    finish(&c);
  }
  return 0;
}

TEST_IMPL(cli_version_lists_libraries) {
  cli_t c;
  const char *args[] = {"--version", NULL};

  start_mock(&c, text_yaml);
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_NOT_NULL(strstr(c.obuf, "agentloop "));
  ASSERT_NOT_NULL(strstr(c.obuf, "libuv 1.44"));
  ASSERT_NOT_NULL(strstr(c.obuf, "mbedtls 2.28"));
  ASSERT_NOT_NULL(strstr(c.obuf, "jansson 2.14"));
  ASSERT_NOT_NULL(strstr(c.obuf, "llhttp 8.1.0"));
  finish(&c);
  return 0;
}

/* Sends SIGINT once the server has the request (checked from a short
 * repeating timer: the server offers no per-request hook). */
static uv_timer_t sigint_timer;

static void on_sigint_timer(uv_timer_t *t) {
  cli_t *c = t->loop->data;
  al_mockllm_stats_t st;

  al_mockllm_stats(c->mock, &st);
  if (st.requests >= 1 && c->exits == 0) {
    ASSERT_EQ(uv_process_kill(&c->proc, SIGINT), 0);
    uv_close((uv_handle_t *)t, NULL);
  }
}

TEST_IMPL(cli_run_sigint_cancels_exit_130) {
  cli_t c;
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--api-key", "k", "-p", "hi", NULL};

  start_mock(&c, "responses:\n  - fault: {stall_after_headers: true}\n");
  ASSERT_EQ(uv_timer_init(&c.loop, &sigint_timer), 0);
  ASSERT_EQ(uv_timer_start(&sigint_timer, on_sigint_timer, 5, 5), 0);
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 130);
  ASSERT_NOT_NULL(strstr(c.ebuf, "agentloop run: interrupted"));
  finish(&c);
  return 0;
}

/* --output-format ndjson: one normalized event per line, in the shape of
 * `agentloop decode --events`, ending with message_stop. */
TEST_IMPL(cli_run_ndjson_events) {
  cli_t c;
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--api-key", "k", "--output-format", "ndjson",
                        "-p", "hi", NULL};
  char text[256] = "";
  char *line;
  char *save = NULL;
  json_t *first = NULL;
  json_t *last = NULL;
  json_t *o;
  int lines = 0;

  start_mock(&c, text_yaml);
  run_cli(&c, args, clean_env);
  ASSERT_EQ(c.exit_status, 0);
  for (line = strtok_r(c.obuf, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    o = json_loads(line, 0, NULL);
    ASSERT_NOT_NULL(o);
    lines++;
    if (strcmp(json_string_value(json_object_get(o, "type")),
               "text_delta") == 0) {
      ASSERT(json_is_integer(json_object_get(o, "index")));
      strncat(text, json_string_value(json_object_get(o, "text")),
              sizeof(text) - strlen(text) - 1);
    }
    if (first == NULL) {
      first = o;
    } else {
      json_decref(last);
      last = o;
    }
  }
  ASSERT_GE(lines, 4);
  ASSERT_STR_EQ(json_string_value(json_object_get(first, "type")),
                "message_start");
  ASSERT_STR_EQ(json_string_value(json_object_get(last, "type")),
                "message_stop");
  ASSERT_STR_EQ(json_string_value(json_object_get(last, "stop_reason")),
                "end_turn");
  ASSERT_EQ(json_array_size(json_object_get(
                json_object_get(last, "message"), "content")),
            2);
  ASSERT_STR_EQ(text, "Hello from the mock, \xc3\xa9t\xc3\xa9 "
                      "\xf0\x9f\x98\x80 done.");
  json_decref(first);
  json_decref(last);
  finish(&c);
  return 0;
}
