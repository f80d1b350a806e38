/* mockllm test helpers: see mtest.h. */
#include <stdio.h>
#include <stdlib.h>

#include "unit/mockllm/mtest.h"

const char mt_simple_anthropic[] =
    "{\"model\":\"m\",\"max_tokens\":100,\"stream\":true,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
const char mt_simple_openai[] =
    "{\"model\":\"m\",\"stream\":true,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

void mt_client_init(mt_client_t *c) {
  size_t i;

  memset(c, 0, sizeof(*c));
  for (i = 0; i < MT_MAX_RESP; i++) {
    al_buf_init(&c->head[i], 1 << 20);
    al_buf_init(&c->body[i], 256u << 20);
  }
}

void mt_client_add(mt_client_t *c, const char *raw) {
  ASSERT(c->nreqs < MT_MAX_RESP);
  c->reqs[c->nreqs] = strdup(raw);
  ASSERT_NOT_NULL(c->reqs[c->nreqs]);
  c->nreqs++;
}

void mt_client_free(mt_client_t *c) {
  size_t i;

  for (i = 0; i < MT_MAX_RESP; i++) {
    al_buf_free(&c->head[i]);
    al_buf_free(&c->body[i]);
    free(c->reqs[i]);
    c->reqs[i] = NULL;
  }
}

static void close_cb(uv_handle_t *h) {
  mt_client_t *c = h->data;

  if (--c->handles != 0) {
    return;
  }
  if (c->server != NULL) {
    al_mockllm_stats(c->server, &c->stats);
    al_mockllm_close(c->server, NULL);
    c->server = NULL;
  }
  if (c->on_close != NULL) {
    c->on_close(c);
  }
}

static void client_close(mt_client_t *c) {
  if (c->closing) {
    return;
  }
  c->closing = true;
  uv_close((uv_handle_t *)&c->tcp, close_cb);
  uv_close((uv_handle_t *)&c->timer, close_cb);
}

static size_t cur(const mt_client_t *c) {
  return c->ncomplete < MT_MAX_RESP ? c->ncomplete : MT_MAX_RESP - 1;
}

static int on_status(llhttp_t *p) {
  mt_client_t *c = p->data;

  c->status[cur(c)] = p->status_code;
  return 0;
}

static int on_hfield(llhttp_t *p, const char *at, size_t len) {
  mt_client_t *c = p->data;
  al_buf_t *h = &c->head[cur(c)];
  size_t i;

  if (c->hstate == 2) {
    al_buf_append(h, "\n", 1);
  }
  c->hstate = 1;
  for (i = 0; i < len; i++) {
    char ch = at[i];

    if (ch >= 'A' && ch <= 'Z') {
      ch = (char)(ch - 'A' + 'a');
    }
    al_buf_append(h, &ch, 1);
  }
  return 0;
}

static int on_hvalue(llhttp_t *p, const char *at, size_t len) {
  mt_client_t *c = p->data;
  al_buf_t *h = &c->head[cur(c)];

  if (c->hstate == 1) {
    al_buf_append(h, ": ", 2);
  }
  c->hstate = 2;
  al_buf_append(h, at, len);
  return 0;
}

static void timer_cb(uv_timer_t *t) {
  mt_client_t *c = t->data;

  c->timer_fired = true;
  c->body_at_timer = c->body[cur(c)].len;
  client_close(c);
}

static int on_headers_complete(llhttp_t *p) {
  mt_client_t *c = p->data;

  if (c->hstate == 2) {
    al_buf_append(&c->head[cur(c)], "\n", 1);
  }
  c->hstate = 0;
  c->nheaders++;
  if (c->timer_ms > 0 && c->nheaders == 1) {
    uv_timer_start(&c->timer, timer_cb, c->timer_ms, 0);
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  mt_client_t *c = p->data;

  al_buf_append(&c->body[cur(c)], at, len);
  if (c->on_body != NULL && c->on_body(c)) {
    client_close(c);
    return HPE_PAUSED;
  }
  return 0;
}

static void write_next(mt_client_t *c);

static int on_complete(llhttp_t *p) {
  mt_client_t *c = p->data;

  c->ncomplete++;
  if (c->ncomplete >= c->nreqs) {
    client_close(c);
    return HPE_PAUSED;
  }
  if (!c->send_all_at_once) {
    write_next(c);
  }
  return 0;
}

static void write_cb(uv_write_t *req, int status) {
  (void)req;
  (void)status;
}

static void write_next(mt_client_t *c) {
  uv_buf_t b[MT_MAX_RESP];
  unsigned int n = 0;

  if (c->send_all_at_once) {
    for (; c->next_req < c->nreqs; c->next_req++) {
      b[n++] = uv_buf_init(c->reqs[c->next_req],
                           (unsigned int)strlen(c->reqs[c->next_req]));
    }
  } else if (c->next_req < c->nreqs) {
    b[n++] = uv_buf_init(c->reqs[c->next_req],
                         (unsigned int)strlen(c->reqs[c->next_req]));
    c->next_req++;
  }
  if (n > 0) {
    ASSERT_EQ(uv_write(&c->wreq, (uv_stream_t *)&c->tcp, b, n, write_cb), 0);
  }
}

static void alloc_cb(uv_handle_t *h, size_t sz, uv_buf_t *buf) {
  (void)h;
  buf->base = malloc(sz);
  buf->len = sz;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  mt_client_t *c = s->data;

  if (nread > 0 && !c->closing) {
    llhttp_errno_t e;

    c->nreads++;
    c->raw_bytes += (uint64_t)nread;
    if ((size_t)nread > c->max_read) {
      c->max_read = (size_t)nread;
    }
    e = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (e != HPE_OK && e != HPE_PAUSED) {
      c->parse_err = e;
      client_close(c);
    }
  } else if (nread < 0 && !c->closing) {
    c->read_err = (int)nread;
    if (nread == UV_EOF) {
      /* close-delimited bodies end here */
      if (llhttp_finish(&c->parser) == HPE_OK && c->nheaders > c->ncomplete &&
          c->ncomplete < c->nreqs) {
        /* on_complete ran inside llhttp_finish */
      }
    }
    client_close(c);
  }
  free(buf->base);
}

static void connect_cb(uv_connect_t *req, int status) {
  mt_client_t *c = req->data;

  ASSERT_EQ(status, 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb), 0);
  write_next(c);
}

void mt_client_start(mt_client_t *c, uv_loop_t *loop, int port) {
  struct sockaddr_in addr;

  c->loop = loop;
  ASSERT_EQ(uv_ip4_addr("127.0.0.1", port, &addr), 0);
  ASSERT_EQ(uv_tcp_init(loop, &c->tcp), 0);
  ASSERT_EQ(uv_timer_init(loop, &c->timer), 0);
  c->tcp.data = c;
  c->timer.data = c;
  c->creq.data = c;
  c->handles = 2;
  llhttp_settings_init(&c->settings);
  c->settings.on_status_complete = on_status;
  c->settings.on_header_field = on_hfield;
  c->settings.on_header_value = on_hvalue;
  c->settings.on_headers_complete = on_headers_complete;
  c->settings.on_body = on_body;
  c->settings.on_message_complete = on_complete;
  llhttp_init(&c->parser, HTTP_RESPONSE, &c->settings);
  c->parser.data = c;
  ASSERT_EQ(uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&addr,
                           connect_cb),
            0);
}

const char *mt_header(const mt_client_t *c, size_t i, const char *name) {
  static char val[1024];
  const char *p = c->head[i].data;
  size_t nl = strlen(name);

  while (p != NULL && *p != '\0') {
    const char *eol = strchr(p, '\n');

    if (eol == NULL) {
      break;
    }
    if (strncmp(p, name, nl) == 0 && p[nl] == ':' && p[nl + 1] == ' ') {
      snprintf(val, sizeof(val), "%.*s", (int)(eol - p - nl - 2), p + nl + 2);
      return val;
    }
    p = eol + 1;
  }
  return NULL;
}

char *mt_request(const char *method, const char *path,
                 const char *extra_headers, const char *body) {
  size_t blen = body ? strlen(body) : 0;
  size_t cap = 512 + strlen(path) + (extra_headers ? strlen(extra_headers) : 0) +
               blen;
  char *r = malloc(cap);

  ASSERT_NOT_NULL(r);
  snprintf(r, cap,
           "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%zu\r\n\r\n%s", method,
           path, extra_headers ? extra_headers : "",
           body ? "Content-Type: application/json\r\nContent-Length: "
                : "Content-Length: ",
           blen, body ? body : "");
  return r;
}

char *mt_anthropic(const char *body) {
  return mt_request("POST", "/v1/messages",
                    "x-api-key: test-key\r\nanthropic-version: 2023-06-01\r\n",
                    body);
}

char *mt_openai(const char *body) {
  return mt_request("POST", "/v1/chat/completions",
                    "Authorization: Bearer test-key\r\n", body);
}

al_mockllm_t *mt_server(uv_loop_t *loop, const char *yaml, bool record) {
  al_mockllm_options_t o;
  al_mockllm_t *m = NULL;
  char err[512];

  al_mockllm_options_init(&o);
  o.scenario_yaml = yaml;
  o.record = record;
  o.err = err;
  o.err_len = sizeof(err);
  if (al_mockllm_new(loop, &o, &m) != 0) {
    AL_TEST_FAIL("al_mockllm_new: %s", err);
  }
  ASSERT(al_mockllm_port(m) > 0);
  return m;
}

void mt_run_one(const char *yaml, const char *request, mt_client_t *c) {
  uv_loop_t loop;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(c);
  mt_client_add(c, request);
  c->server = mt_server(&loop, yaml, false);
  mt_client_start(c, &loop, al_mockllm_port(c->server));
  ASSERT_LOOP_CLOSES(&loop);
}

size_t mt_sse(const char *body, size_t len, mt_event_t *ev, size_t max) {
  size_t n = 0;
  size_t pos = 0;

  while (pos < len && n < max) {
    const char *end = memmem(body + pos, len - pos, "\n\n", 2);
    size_t elen;
    const char *p;
    mt_event_t *e = &ev[n];

    if (end == NULL) {
      break;
    }
    elen = (size_t)(end - (body + pos));
    memset(e, 0, sizeof(*e));
    p = body + pos;
    while (p < body + pos + elen) {
      const char *eol = memchr(p, '\n', (size_t)(body + pos + elen - p));
      size_t ll;

      if (eol == NULL) {
        eol = body + pos + elen;
      }
      ll = (size_t)(eol - p);
      if (ll >= 7 && strncmp(p, "event: ", 7) == 0) {
        snprintf(e->name, sizeof(e->name), "%.*s", (int)(ll - 7), p + 7);
      } else if (ll >= 6 && strncmp(p, "data: ", 6) == 0) {
        e->data = strndup(p + 6, ll - 6);
      } else if (ll >= 4 && strncmp(p, "id: ", 4) == 0) {
        e->has_id = true;
        e->id = strtoull(p + 4, NULL, 10);
      } else if (ll >= 1 && p[0] == ':') {
        e->comment = true;
      }
      p = eol + 1;
    }
    n++;
    pos += elen + 2;
  }
  return n;
}

void mt_sse_free(mt_event_t *ev, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    free(ev[i].data);
  }
}
