/* Daemon test fixture (dtest.h). */
#include "dtest.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  remove(p);
  return 0;
}

void dt_rmtree(const char *path) {
  nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void on_exit_cb(al_daemon_t *d, void *data) {
  dt_t *t = data;

  (void)d;
  t->exited = true;
  t->d = NULL;
}

void dt_init(dt_t *t, const char *yaml) {
  al_mockllm_options_t mo;
  char err[512];

  memset(t, 0, sizeof(*t));
  ASSERT_EQ(uv_loop_init(&t->loop), 0);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  err[0] = '\0';
  if (al_mockllm_new(&t->loop, &mo, &t->mock) != 0) {
    AL_TEST_FAIL("mockllm: %s", err);
  }
  snprintf(t->url, sizeof(t->url), "http://127.0.0.1:%d",
           al_mockllm_port(t->mock));
  snprintf(t->root, sizeof(t->root), "/tmp/al-d-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(t->root));
  snprintf(t->sock, sizeof(t->sock), "%s/run/agentloopd.sock", t->root);
  snprintf(t->state, sizeof(t->state), "%s/state", t->root);
  snprintf(t->work, sizeof(t->work), "%s/work", t->root);
  {
    char run[200];

    snprintf(run, sizeof(run), "%s/run", t->root);
    ASSERT_EQ(mkdir(run, 0700), 0);
  }
  ASSERT_EQ(mkdir(t->work, 0700), 0);
  al__daemon_options_init(&t->o);
  t->o.socket_path = t->sock;
  t->o.state_dir = t->state;
  t->o.base_url = t->url;
  t->o.model = "mock-model";
  t->o.anthropic_key = "test-key";
  t->o.retry_base_ms = 1;
  t->o.retry_cap_ms = 5;
  t->o.kill_grace_ms = 100;
  t->o.handle_signals = false;
  t->o.on_exit = on_exit_cb;
  t->o.data = t;
}

void dt_start(dt_t *t) {
  char why[512];
  int rc = al__daemon_new(&t->loop, &t->o, &t->d, why, sizeof(why));

  if (rc != 0) {
    AL_TEST_FAIL("daemon: %s (%s)", why, uv_strerror(rc));
  }
}

static bool on_line(al_rpc_framer_t *f, const char *line, size_t len,
                    bool too_long, void *data) {
  dt_client_t *c = data;
  json_t *j;

  ASSERT(!too_long);
  j = json_loadb(line, len, 0, NULL);
  if (j == NULL) {
    AL_TEST_FAIL("daemon sent a line that is not JSON: %.*s", (int)len, line);
  }
  json_array_append_new(c->msgs, j);
  return true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)h;
  buf->base = malloc(hint);
  buf->len = hint;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  dt_client_t *c = s->data;

  if (n > 0) {
    c->bytes += (uint64_t)n;
    ASSERT_EQ(al_rpc_framer_feed(&c->framer, buf->base, (size_t)n, on_line,
                                 c),
              0);
  } else if (n < 0) {
    c->eof = true;
    uv_read_stop(s);
    c->reading = false;
  }
  free(buf->base);
}

static void on_connect(uv_connect_t *req, int status) {
  dt_client_t *c = req->data;

  c->connected = true;
  c->connect_status = status;
  if (status == 0) {
    ASSERT_EQ(uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read), 0);
    c->reading = true;
  }
}

void dt_connect(dt_t *t, dt_client_t *c) {
  memset(c, 0, sizeof(*c));
  c->t = t;
  c->msgs = json_array();
  al_rpc_framer_init(&c->framer, 64 * 1024 * 1024);
  ASSERT_EQ(uv_pipe_init(&t->loop, &c->pipe, 0), 0);
  c->pipe.data = c;
  c->creq.data = c;
  uv_pipe_connect(&c->creq, &c->pipe, t->sock, on_connect);
  while (!c->connected) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(c->connect_status, 0);
}

static void on_retry_closed(uv_handle_t *h) {
  dt_client_t *c = h->data;

  c->closed = true;
}

/* A 5 ms ticker keeps UV_RUN_ONCE from blocking on an idle loop. */
static void on_retry_tick(uv_timer_t *tm) { (void)tm; }

static bool tm_done;

static void on_tm_closed(uv_handle_t *h) { *(bool *)h->data = true; }

void dt_connect_retry(dt_t *t, dt_client_t *c) {
  uv_timer_t tm;

  uv_timer_init(&t->loop, &tm);
  uv_timer_start(&tm, on_retry_tick, 5, 5);
  for (;;) {
    memset(c, 0, sizeof(*c));
    c->t = t;
    ASSERT_EQ(uv_pipe_init(&t->loop, &c->pipe, 0), 0);
    c->pipe.data = c;
    c->creq.data = c;
    uv_pipe_connect(&c->creq, &c->pipe, t->sock, on_connect);
    while (!c->connected) {
      uv_run(&t->loop, UV_RUN_ONCE);
    }
    if (c->connect_status == 0) {
      break;
    }
    uv_close((uv_handle_t *)&c->pipe, on_retry_closed);
    while (!c->closed) {
      uv_run(&t->loop, UV_RUN_ONCE);
    }
    uv_run(&t->loop, UV_RUN_ONCE); /* one tick of the timer */
  }
  c->closed = false;
  c->msgs = json_array();
  al_rpc_framer_init(&c->framer, 64 * 1024 * 1024);
  tm.data = &tm_done;
  tm_done = false;
  uv_close((uv_handle_t *)&tm, on_tm_closed);
  while (!tm_done) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
}

void dt_run_until(dt_t *t, bool (*cond)(void *), void *data) {
  uv_timer_t tm;

  uv_timer_init(&t->loop, &tm);
  uv_timer_start(&tm, on_retry_tick, 5, 5);
  while (!cond(data)) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
  tm.data = &tm_done;
  tm_done = false;
  uv_close((uv_handle_t *)&tm, on_tm_closed);
  while (!tm_done) {
    uv_run(&t->loop, UV_RUN_ONCE);
  }
}

typedef struct {
  uv_write_t req;
  char *buf;
} wr_t;

static void on_write(uv_write_t *req, int status) {
  wr_t *w = (wr_t *)req;

  (void)status;
  free(w->buf);
  free(w);
}

void dt_write(dt_client_t *c, const char *p, size_t n) {
  wr_t *w = malloc(sizeof(*w));
  uv_buf_t b;

  w->buf = malloc(n + 1);
  memcpy(w->buf, p, n);
  b = uv_buf_init(w->buf, (unsigned)n);
  ASSERT_EQ(uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write), 0);
}

void dt_line(dt_client_t *c, const char *line) {
  size_t n = strlen(line);
  char *b = malloc(n + 1);

  memcpy(b, line, n);
  b[n] = '\n';
  dt_write(c, b, n + 1);
  free(b);
}

json_t *dt_wait_id(dt_client_t *c, int id) {
  size_t i = 0;

  for (;;) {
    for (; i < json_array_size(c->msgs); i++) {
      json_t *m = json_array_get(c->msgs, i);
      json_t *mid = json_object_get(m, "id");

      if (json_is_integer(mid) && json_integer_value(mid) == id &&
          json_object_get(m, "method") == NULL) {
        return m;
      }
    }
    if (c->eof) {
      char *last = json_dumps(json_array_get(c->msgs,
                                             json_array_size(c->msgs) - 1),
                              0);

      AL_TEST_FAIL("EOF while waiting for the response to id %d (%zu "
                   "messages, last: %s)",
                   id, json_array_size(c->msgs), last ? last : "none");
    }
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

json_t *dt_call(dt_client_t *c, int id, const char *method,
                const char *params_json) {
  char *line;
  size_t n = strlen(method) + (params_json ? strlen(params_json) : 0) + 128;

  line = malloc(n);
  if (params_json != NULL) {
    snprintf(line, n,
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\",\"params\":%s}",
             id, method, params_json);
  } else {
    snprintf(line, n, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\"}", id,
             method);
  }
  dt_line(c, line);
  free(line);
  return dt_wait_id(c, id);
}

void dt_wait_count(dt_client_t *c, size_t n) {
  while (json_array_size(c->msgs) < n) {
    ASSERT(!c->eof);
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

const char *dt_ev_type(const dt_client_t *c, size_t i) {
  json_t *m = json_array_get(c->msgs, i);
  const char *meth = json_string_value(json_object_get(m, "method"));

  if (meth == NULL || strcmp(meth, "event") != 0) {
    return "";
  }
  return json_string_value(
      json_object_get(json_object_get(m, "params"), "type"));
}

size_t dt_wait_event(dt_client_t *c, const char *type, size_t from) {
  size_t i = from;

  for (;;) {
    for (; i < json_array_size(c->msgs); i++) {
      if (strcmp(dt_ev_type(c, i), type) == 0) {
        return i;
      }
    }
    ASSERT(!c->eof);
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

size_t dt_wait_notification(dt_client_t *c, const char *method, size_t from) {
  size_t i = from;

  for (;;) {
    for (; i < json_array_size(c->msgs); i++) {
      const char *m = json_string_value(
          json_object_get(json_array_get(c->msgs, i), "method"));

      if (m != NULL && strcmp(m, method) == 0) {
        return i;
      }
    }
    ASSERT(!c->eof);
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

void dt_pause(dt_client_t *c) {
  if (c->reading) {
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = false;
  }
}

void dt_resume(dt_client_t *c) {
  if (!c->reading && !c->eof) {
    ASSERT_EQ(uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read), 0);
    c->reading = true;
  }
}

void dt_wait_eof(dt_client_t *c) {
  while (!c->eof) {
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

static void on_closed(uv_handle_t *h) {
  dt_client_t *c = h->data;

  c->closed = true;
}

void dt_close(dt_client_t *c) {
  if (c->t == NULL || c->closed || uv_is_closing((uv_handle_t *)&c->pipe)) {
    return;
  }
  uv_close((uv_handle_t *)&c->pipe, on_closed);
}

void dt_init_client(dt_client_t *c) {
  json_t *r = dt_call(c, 1, "initialize",
                      "{\"client\":{\"name\":\"dtest\"},\"protocol_version\":1}");

  ASSERT_NOT_NULL(json_object_get(r, "result"));
}

const char *dt_create(dt_client_t *c, const char *params_json, char *out,
                      size_t len) {
  json_t *r = dt_call(c, 2, "session/create",
                      params_json != NULL ? params_json : "{}");
  const char *id =
      json_string_value(json_object_get(json_object_get(r, "result"),
                                        "session"));

  if (id == NULL) {
    char *s = json_dumps(r, 0);

    AL_TEST_FAIL("session/create failed: %s", s);
  }
  snprintf(out, len, "%s", id);
  return out;
}

int dt_err(const json_t *resp) {
  json_t *e = json_object_get(resp, "error");

  return e != NULL ? (int)json_integer_value(json_object_get(e, "code")) : 0;
}

static void on_mock_closed(al_mockllm_t *m) { (void)m; }

void dt_finish(dt_t *t, dt_client_t **clients, size_t n) {
  size_t i;

  if (t->d != NULL) {
    al__daemon_shutdown(t->d);
    while (!t->exited) {
      uv_run(&t->loop, UV_RUN_ONCE);
    }
  }
  for (i = 0; i < n; i++) {
    dt_close(clients[i]);
  }
  al_mockllm_close(t->mock, on_mock_closed);
  ASSERT_LOOP_CLOSES(&t->loop);
  for (i = 0; i < n; i++) {
    json_decref(clients[i]->msgs);
    al_rpc_framer_free(&clients[i]->framer);
  }
  dt_rmtree(t->root);
}

void dt_assert_valid(const dt_t *t) {
  size_t i;

  for (i = 0; i < al_mockllm_record_count(t->mock); i++) {
    const al_mockllm_record_t *r = al_mockllm_record_get(t->mock, i);

    if (!r->valid) {
      AL_TEST_FAIL("request %zu invalid: %s", i, r->error ? r->error : "?");
    }
  }
}

void dt_connect_ready(dt_t *t, dt_client_t *c) {
  for (;;) {
    bool answered = false;
    size_t i;

    dt_connect_retry(t, c);
    dt_line(c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
               "\"params\":{\"client\":{\"name\":\"dtest\"}}}");
    while (!answered && !c->eof) {
      for (i = 0; i < json_array_size(c->msgs); i++) {
        answered = answered ||
                   json_integer_value(json_object_get(
                       json_array_get(c->msgs, i), "id")) == 1;
      }
      if (!answered) {
        uv_run(&t->loop, UV_RUN_ONCE);
      }
    }
    if (answered) {
      return;
    }
    dt_close(c);
    while (!c->closed) {
      uv_run(&t->loop, UV_RUN_ONCE);
    }
    json_decref(c->msgs);
    al_rpc_framer_free(&c->framer);
  }
}
