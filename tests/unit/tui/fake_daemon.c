/* `al_tests --helper tui_fake_daemon SOCKET LOG`: a scripted stand-in for
 * agentloopd that speaks docs/protocol.md, for the front-end test of
 * approvals and forged prompts (tests/tui/tui_test.sh approval_forged).
 *
 * A turn/send plays: run_started, a text reply that tries to forge an
 * approval prompt (CR, erase-line, a fake "? Allow ..." line, an OSC 52
 * clipboard write), then - 400 ms later, so a key typed meanwhile would
 * arrive before it - a real approval_required. Every approval/respond is
 * appended to LOG ("decision allow") and answered with approval/resolved,
 * the tool's events and a final text naming the decision. The real
 * daemon needs a tool that asks for this; this stand-in lets the front
 * end's side be tested on its own. */
#include <signal.h>
#include <unistd.h>

#include <jansson.h>

#include "common/common.h"
#include "rpc/rpc.h"
#include "test.h"

typedef struct {
  uv_loop_t *loop;
  uv_pipe_t server;
  uv_pipe_t client;
  uv_timer_t timer;
  uv_signal_t sigterm;
  al_rpc_framer_t framer;
  char rbuf[65536];
  int seq;
  const char *log;
  bool have_client;
} fake_t;

typedef struct {
  uv_write_t req;
  char *buf;
} fwrite_t;

static void on_written(uv_write_t *req, int status) {
  fwrite_t *w = AL_CONTAINER_OF(req, fwrite_t, req);

  (void)status;
  al_free(w->buf);
  free(w);
}

static void send_msg(fake_t *f, json_t *msg) {
  fwrite_t *w = calloc(1, sizeof(*w));
  size_t len;
  uv_buf_t b;

  w->buf = al_rpc_dump_line_alloc(msg, &len);
  json_decref(msg);
  b = uv_buf_init(w->buf, (unsigned int)len);
  if (uv_write(&w->req, (uv_stream_t *)&f->client, &b, 1, on_written) != 0) {
    al_free(w->buf);
    free(w);
  }
}

/* An event with the common fields; `fields` (stolen) adds the payload. */
static void event(fake_t *f, const char *type, json_t *fields) {
  int seq = ++f->seq;
  json_t *ev = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i}", "type", type,
                         "session", "s_fake", "run", 1, "turn", 1, "seq",
                         seq, "ts_ns", seq * 1000);

  json_object_update(ev, fields);
  json_decref(fields);
  send_msg(f, al_rpc_notification_new("event", ev));
}

static void on_approval_timer(uv_timer_t *t) {
  fake_t *f = t->data;

  event(f, "approval_required",
        json_pack("{s:s,s:s,s:s,s:{s:s},s:s,s:s}", "request", "req_1",
                  "call_id", "toolu_1", "name", "wipe_cache", "input",
                  "target", "build", "category", "admin", "reason",
                  "admin tool"));
}

static void turn(fake_t *f) {
  event(f, "run_started",
        json_pack("{s:s,s:s,s:s,s:[],s:n}", "model", "fake-model",
                  "provider", "anthropic", "cwd", "/", "tools", "sandbox"));
  event(f, "text_delta",
        json_pack("{s:i,s:s}", "index", 0, "text",
                  "Sure.\r\x1b[2K? Allow bash(rm -rf /)?  [y]es  [n]o  "
                  "[a]lways this session \x1b]52;c;aGk=\x07"));
  event(f, "content_block_completed",
        json_pack("{s:i,s:s,s:{}}", "index", 0, "block_type", "text",
                  "block"));
  event(f, "tool_use_queued",
        json_pack("{s:s,s:s,s:{s:s}}", "call_id", "toolu_1", "name",
                  "wipe_cache", "input", "target", "build"));
  uv_timer_start(&f->timer, on_approval_timer, 400, 0);
}

static void respond(fake_t *f, json_t *params) {
  const char *d = json_string_value(json_object_get(params, "decision"));
  bool allow = d != NULL && strcmp(d, "deny") != 0;
  FILE *log = fopen(f->log, "a");
  char text[64];

  if (log != NULL) {
    fprintf(log, "decision %s\n", d != NULL ? d : "?");
    fclose(log);
  }
  send_msg(f, al_rpc_notification_new(
                  "approval/resolved",
                  json_pack("{s:s,s:s,s:s,s:n,s:s}", "session", "s_fake",
                            "request", "req_1", "decision", d ? d : "?",
                            "reason", "by", "c1")));
  event(f, "approval_response",
        json_pack("{s:s,s:s,s:s,s:n}", "request", "req_1", "call_id",
                  "toolu_1", "decision", d ? d : "?", "reason"));
  if (allow) {
    event(f, "tool_use_started",
          json_pack("{s:s,s:s,s:{s:s}}", "call_id", "toolu_1", "name",
                    "wipe_cache", "input", "target", "build"));
  }
  event(f, "tool_use_completed",
        json_pack("{s:s,s:s,s:b,s:s,s:i}", "call_id", "toolu_1", "name",
                  "wipe_cache", "is_error", !allow, "content",
                  allow ? "wiped build" : "denied by the user",
                  "duration_ms", 5));
  snprintf(text, sizeof(text), "Decision was: %s.", d ? d : "?");
  event(f, "text_delta", json_pack("{s:i,s:s}", "index", 0, "text", text));
  event(f, "final", json_pack("{s:s}", "text", text));
}

static bool on_line(al_rpc_framer_t *fr, const char *line, size_t len,
                    bool too_long, void *data) {
  fake_t *f = data;
  al_rpc_msg_t m;
  json_t *bad = NULL;
  char why[128];
  json_t *result = NULL;

  (void)fr;
  if (too_long || al_rpc_parse(line, len, &m, &bad, why, sizeof(why)) != 0) {
    json_decref(bad);
    return true;
  }
  if (strcmp(m.method, "initialize") == 0) {
    result = json_pack("{s:i,s:{s:s,s:s},s:i,s:s}", "protocol_version", 1,
                       "server", "name", "fake", "version", "0", "pid",
                       (int)getpid(), "client_id", "c1");
  } else if (strcmp(m.method, "session/create") == 0) {
    result = json_pack("{s:s,s:s,s:s,s:s,s:i}", "session", "s_fake", "cwd",
                       "/", "model", "fake-model", "provider", "anthropic",
                       "next_seq", f->seq + 1);
  } else if (strcmp(m.method, "session/subscribe") == 0) {
    result = json_pack("{s:s,s:i,s:n}", "session", "s_fake", "next_seq",
                       f->seq + 1, "replay_from");
  } else if (strcmp(m.method, "turn/send") == 0) {
    turn(f);
    result = json_pack("{s:i}", "run", 1);
  } else if (strcmp(m.method, "approval/respond") == 0) {
    respond(f, m.params);
    result = json_pack("{s:b}", "resolved", 1);
  } else if (strcmp(m.method, "turn/cancel") == 0) {
    result = json_pack("{s:b}", "cancelled", 0);
  }
  if (result != NULL) {
    send_msg(f, al_rpc_result_new(m.id, result));
  } else {
    send_msg(f, al_rpc_error_new(m.id, AL_RPC_METHOD_NOT_FOUND,
                                 "not in this fake", NULL));
  }
  al_rpc_msg_free(&m);
  return true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  fake_t *f = h->data;

  (void)hint;
  *buf = uv_buf_init(f->rbuf, sizeof(f->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  fake_t *f = s->data;

  if (n > 0) {
    al_rpc_framer_feed(&f->framer, buf->base, (size_t)n, on_line, f);
  } else if (n < 0) {
    /* The front end left: serve the next one. */
    uv_close((uv_handle_t *)&f->client, NULL);
    f->have_client = false;
  }
}

static void on_connection(uv_stream_t *server, int status) {
  fake_t *f = server->data;

  if (status != 0 || f->have_client) {
    return;
  }
  uv_pipe_init(f->loop, &f->client, 0);
  f->client.data = f;
  if (uv_accept(server, (uv_stream_t *)&f->client) == 0) {
    f->have_client = true;
    uv_read_start((uv_stream_t *)&f->client, on_alloc, on_read);
  }
}

static void on_sigterm(uv_signal_t *s, int signum) {
  (void)signum;
  uv_stop(s->loop);
}

HELPER_IMPL(tui_fake_daemon) {
  fake_t f;
  uv_loop_t loop;
  const char *path;

  if (argc < 2) {
    fprintf(stderr, "usage: tui_fake_daemon SOCKET LOG\n");
    return 2;
  }
  path = argv[argc - 2];
  memset(&f, 0, sizeof(f));
  f.log = argv[argc - 1];
  uv_loop_init(&loop);
  f.loop = &loop;
  al_rpc_framer_init(&f.framer, 1u << 20);
  uv_pipe_init(&loop, &f.server, 0);
  uv_timer_init(&loop, &f.timer);
  uv_signal_init(&loop, &f.sigterm);
  f.server.data = f.timer.data = &f;
  signal(SIGPIPE, SIG_IGN);
  uv_signal_start(&f.sigterm, on_sigterm, SIGTERM);
  unlink(path);
  if (uv_pipe_bind(&f.server, path) != 0 ||
      uv_listen((uv_stream_t *)&f.server, 8, on_connection) != 0) {
    fprintf(stderr, "tui_fake_daemon: cannot listen on %s\n", path);
    return 1;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  unlink(path);
  /* Killed: no tidy shutdown needed for a test stand-in. */
  _exit(0);
}
