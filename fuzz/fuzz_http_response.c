/* libFuzzer target: the HTTP/1.1 response side of the transport (llhttp
 * with our limits: header bytes, error body bytes), RELIABILITY.md §3
 * `http_response`. The input is what a server answers: a loopback TCP
 * server on the same loop reads the request, writes the input (split in
 * two writes at a point its first byte chooses) and closes. The request
 * must complete exactly once, on_response at most once and before any
 * data, the body bytes delivered no more than the server sent, and the
 * loop must close with nothing left (no leak, no late callback). Small
 * limits (1 KiB of headers, 512 bytes of error body) so inputs reach them.
 * The client is one per input (no pooling across inputs). The listening
 * socket is made once and lent to each input's loop (uv_tcp_open of a
 * dup): a new listener per input used a new port per input, and the
 * server side's TIME_WAIT sockets (it closes first) used up the ephemeral
 * range within a minute at ~700 inputs/s, failing this and every other
 * loopback test on the machine.
 * fuzz-args: -max_len=4096 -dict=http.dict */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "transport/transport.h"

typedef struct {
  uv_loop_t loop;
  uv_tcp_t server;
  uv_tcp_t peer;
  uv_write_t w[2];
  bool peer_open;
  const uint8_t *data;
  size_t size;
  size_t cut;
  bool answered;
  int completes;
  int responses;
  size_t body;
  bool data_before_response;
} fx_t;

static void on_closed(uv_handle_t *h) { (void)h; }

static void on_written(uv_write_t *w, int status) {
  fx_t *f = w->data;

  (void)status;
  if (w == &f->w[1] && f->peer_open) {
    f->peer_open = false;
    uv_close((uv_handle_t *)&f->peer, on_closed);
  }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  static char buf[4096];

  (void)h;
  (void)hint;
  b->base = buf;
  b->len = sizeof(buf);
}

/* Answers once the request's head has arrived (a blank line). */
static void on_peer_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  fx_t *f = s->data;
  uv_buf_t parts[2];

  if (n < 0) {
    if (f->peer_open) {
      f->peer_open = false;
      uv_close((uv_handle_t *)&f->peer, on_closed);
    }
    return;
  }
  if (f->answered || n == 0 || memmem(b->base, (size_t)n, "\r\n\r\n", 4) == NULL) {
    return;
  }
  f->answered = true;
  parts[0] = uv_buf_init((char *)f->data, (unsigned)f->cut);
  parts[1] = uv_buf_init((char *)f->data + f->cut, (unsigned)(f->size - f->cut));
  f->w[0].data = f->w[1].data = f;
  uv_write(&f->w[0], s, &parts[0], 1, on_written);
  uv_write(&f->w[1], s, &parts[1], 1, on_written);
}

static void on_conn(uv_stream_t *srv, int status) {
  fx_t *f = srv->data;

  if (status != 0 || f->peer_open) {
    return;
  }
  uv_tcp_init(&f->loop, &f->peer);
  f->peer.data = f;
  f->peer_open = true;
  if (uv_accept(srv, (uv_stream_t *)&f->peer) == 0) {
    uv_read_start((uv_stream_t *)&f->peer, on_alloc, on_peer_read);
  }
}

static void on_response(al_http_request_t *r, int code,
                        const al_http_headers_t *h) {
  fx_t *f = al_http_request_get_data(r);

  (void)h;
  if (code < 200 || f->responses != 0 || f->completes != 0) {
    abort();
  }
  f->responses++;
}

static void on_data(al_http_request_t *r, const char *p, size_t n) {
  fx_t *f = al_http_request_get_data(r);

  (void)p;
  if (f->responses == 0) {
    f->data_before_response = true;
  }
  f->body += n;
}

static void on_complete(al_http_request_t *r, int status,
                        const al_http_error_t *err) {
  fx_t *f = al_http_request_get_data(r);

  if ((status == 0) != (err == NULL)) {
    abort();
  }
  f->completes++;
  uv_close((uv_handle_t *)&f->server, on_closed);
}

static void on_client_closed(al_http_client_t *c) { (void)c; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fx_t f;
  static int listen_fd = -1;
  struct sockaddr_in sa;
  int len = sizeof(sa);
  char url[64];
  al_http_client_options_t co;
  al_http_client_t *c = NULL;
  al_http_request_options_t ro;
  al_http_request_t *r = NULL;

  if (size < 1) {
    return 0;
  }
  memset(&f, 0, sizeof(f));
  f.data = data + 1;
  f.size = size - 1;
  f.cut = f.size == 0 ? 0 : data[0] % (f.size + 1);
  uv_loop_init(&f.loop);
  if (listen_fd < 0) {
    int one = 1;

    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uv_ip4_addr("127.0.0.1", 0, &sa);
    if (listen_fd < 0 ||
        setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(listen_fd, 16) != 0 ||
        getsockname(listen_fd, (struct sockaddr *)&sa, (socklen_t *)&len) !=
            0) {
      abort();
    }
  }
  uv_tcp_init(&f.loop, &f.server);
  f.server.data = &f;
  if (uv_tcp_open(&f.server, dup(listen_fd)) != 0 ||
      uv_listen((uv_stream_t *)&f.server, 16, on_conn) != 0 ||
      uv_tcp_getsockname(&f.server, (struct sockaddr *)&sa, &len) != 0) {
    abort();
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/messages",
           ntohs(sa.sin_port));
  al_http_client_options_init(&co);
  co.proxy_from_env = false;
  co.pool_max_idle_per_origin = 0;
  co.max_header_bytes = 1024;
  co.max_error_body_bytes = 512;
  co.idle_timeout_ms = 2000; /* a response that never ends */
  if (al_http_client_new(&f.loop, &co, &c) != 0) {
    abort();
  }
  al_http_request_options_init(&ro);
  ro.method = "POST";
  ro.url = url;
  ro.body = "{}";
  ro.body_len = 2;
  ro.on_response = on_response;
  ro.on_data = on_data;
  ro.on_complete = on_complete;
  ro.data = &f;
  if (al_http_request_start(c, &ro, &r) != 0) {
    abort();
  }
  while (f.completes == 0) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  al_http_client_close(c, on_client_closed);
  if (f.peer_open) {
    f.peer_open = false;
    uv_close((uv_handle_t *)&f.peer, on_closed);
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&f.loop) != 0 || f.completes != 1 ||
      f.data_before_response || f.body > f.size) {
    abort();
  }
  return 0;
}
