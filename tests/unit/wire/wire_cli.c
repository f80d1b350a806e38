/* The harness of wire_cli.h. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "wire_cli.h"

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  wire_cli_t *c = h->loop->data;
  bool out = h == (uv_handle_t *)&c->out;

  (void)hint;
  *buf = out ? uv_buf_init(c->obuf + c->olen,
                           (unsigned)(sizeof(c->obuf) - c->olen - 1))
             : uv_buf_init(c->ebuf + c->elen,
                           (unsigned)(sizeof(c->ebuf) - c->elen - 1));
}

static void maybe_done(wire_cli_t *c) {
  if (c->exits == 1 && c->eofs == 2) {
    uv_stop(&c->loop);
  }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  wire_cli_t *c = s->loop->data;

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

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  wire_cli_t *c = p->loop->data;

  (void)sig;
  c->exit_status = status;
  c->exits++;
  uv_close((uv_handle_t *)p, NULL);
  maybe_done(c);
}

void wire_cli_start(wire_cli_t *c, const char *yaml) {
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
  if (al_mockllm_new(&c->loop, &mo, &c->mock) != 0) {
    AL_TEST_FAIL("mockllm: %s", err);
  }
}

void wire_cli_run(wire_cli_t *c, const char *const *args, char **env) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char *argv[32];
  char bin[4096], port[16];
  char expanded[30][512];
  size_t i;

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  snprintf(port, sizeof(port), "%d",
           c->mock != NULL ? al_mockllm_port(c->mock) : 0);
  argv[0] = bin;
  for (i = 0; args[i] != NULL && i < 30; i++) {
    const char *p = strstr(args[i], "{PORT}");

    if (p != NULL) {
      snprintf(expanded[i], sizeof(expanded[i]), "%.*s%s%s", (int)(p - args[i]),
               args[i], port, p + 6);
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
  po.cwd = c->cwd;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  ASSERT_EQ(uv_spawn(&c->loop, &c->proc, &po), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->out, on_alloc, on_read), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->err, on_alloc, on_read), 0);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  ASSERT_EQ(c->exits, 1);
}

static void on_mock_closed(al_mockllm_t *m) {
  (void)m;
}

void wire_cli_finish(wire_cli_t *c) {
  if (c->mock != NULL) {
    al_mockllm_close(c->mock, on_mock_closed);
  }
  ASSERT_LOOP_CLOSES(&c->loop);
}

void wire_write(const char *root, const char *rel, const char *text) {
  char path[4096];
  char *s;
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (s = path + strlen(root) + 1; (s = strchr(s, '/')) != NULL; s++) {
    *s = '\0';
    (void)mkdir(path, 0700);
    *s = '/';
  }
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}
