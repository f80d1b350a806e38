/* The front end's connection to agentloopd (docs/protocol.md): connect to
 * the socket, start the daemon when nobody listens, `initialize`, then
 * requests matched to their responses by id and notifications handed to
 * the owner.
 *
 * Starting the daemon: agentloopd (next to this binary, else on PATH) is
 * spawned detached - its own session and process group, stdio to its log
 * file - and not waited for: it outlives us. Then a timer retries the
 * connect every 25 ms until the deadline (2 s, AGENTLOOP_START_TIMEOUT_MS
 * overrides it for slow sanitizer builds); nothing sleeps. Each attempt
 * uses a fresh uv_pipe_t: a pipe whose connect failed must be closed
 * before it is used again.
 *
 * Lifetime: al__conn_close() closes the pipe and the timer; the owner's
 * close callback runs after both close callbacks. Pending requests get no
 * callback after close (their data is the owner's, which is going away). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/conn.h"
#include "client/tui.h"

#define RETRY_MS 25
#define DEFAULT_START_MS 2000

typedef struct pending_s {
  al_list_t link;
  json_int_t id;
  al__conn_result_cb cb;
  void *data;
} pending_t;

typedef struct {
  uv_write_t req;
  char *buf;
} write_req_t;

static void start_attempt(al__conn_t *c);
static void on_retry(uv_timer_t *t);
static void retry_attempt(al__conn_t *c, int status);

static void fail(al__conn_t *c, int status, const char *fmt, const char *arg) {
  if (c->ready_cb == NULL) {
    return;
  }
  snprintf(c->why, sizeof(c->why), fmt, arg);
  al__conn_ready_cb cb = c->ready_cb;
  c->ready_cb = NULL;
  cb(c, status);
}

static void on_close_part(uv_handle_t *h) {
  al__conn_t *c = h->data;

  if (h == (uv_handle_t *)&c->pipe) {
    c->pipe_closing = false;
  }
  if (c->closing && --c->open_handles == 0 && c->close_cb != NULL) {
    c->close_cb(c);
  }
}

static void free_pending(al__conn_t *c) {
  while (!al_list_empty(&c->pending)) {
    al_list_t *l = c->pending.next;

    al_list_remove(l);
    al_free(AL_CONTAINER_OF(l, pending_t, link));
  }
}

static void pipe_close(al__conn_t *c) {
  if (c->pipe_open) {
    c->pipe_open = false;
    c->pipe_closing = true;
    uv_close((uv_handle_t *)&c->pipe, on_close_part);
  }
}

void al__conn_close(al__conn_t *c, al__conn_close_cb cb) {
  assert(!c->closing);
  c->closing = true;
  c->close_cb = cb;
  c->ready_cb = NULL;
  free_pending(c);
  al_rpc_framer_free(&c->framer);
  json_decref(c->init_result);
  c->init_result = NULL;
  pipe_close(c);
  /* The timer, plus a pipe close still in flight. */
  c->open_handles = 1 + (c->pipe_closing ? 1 : 0);
  uv_close((uv_handle_t *)&c->timer, on_close_part);
}

/* ---- incoming ------------------------------------------------------------ */

static void handle_response(al__conn_t *c, al_rpc_msg_t *m) {
  al_list_t *l;
  json_int_t id = json_integer_value(m->id);

  al_list_foreach(l, &c->pending) {
    pending_t *p = AL_CONTAINER_OF(l, pending_t, link);

    if (p->id == id) {
      al__conn_result_cb cb = p->cb;
      void *data = p->data;

      al_list_remove(l);
      al_free(p);
      if (cb != NULL) {
        cb(c, m->result, m->error, data);
      }
      return;
    }
  }
}

static bool on_line(al_rpc_framer_t *f, const char *line, size_t len,
                    bool too_long, void *data) {
  al__conn_t *c = data;
  al_rpc_msg_t m;
  json_t *bad_id = NULL;
  char why[128];

  (void)f;
  if (too_long) {
    /* The daemon's lines are bounded by its own limits; skip it. */
    return !c->closing;
  }
  if (al_rpc_parse(line, len, &m, &bad_id, why, sizeof(why)) != 0) {
    json_decref(bad_id);
    return !c->closing;
  }
  if (m.kind == AL_RPC_MSG_RESPONSE && json_is_null(m.id) &&
      c->ready_cb != NULL && c->init_result == NULL) {
    /* Turned away at accept (too many clients, shutting down): say why
     * rather than retry into the same answer. */
    const char *msg = json_string_value(json_object_get(m.error, "message"));

    uv_timer_stop(&c->timer);
    fail(c, AL_EPROTO, "agentloopd refused the connection: %s",
         msg != NULL ? msg : "no reason given");
  } else if (m.kind == AL_RPC_MSG_RESPONSE) {
    handle_response(c, &m);
  } else if (m.kind == AL_RPC_MSG_NOTIFICATION && c->notify_cb != NULL) {
    c->notify_cb(c, m.method, m.params);
  }
  al_rpc_msg_free(&m);
  return !c->closing;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  al__conn_t *c = h->data;

  (void)hint;
  *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  al__conn_t *c = s->data;

  if (n > 0) {
    al_rpc_framer_feed(&c->framer, buf->base, (size_t)n, on_line, c);
    return;
  }
  if (n < 0 && !c->closing && c->ready_cb != NULL && c->init_result == NULL) {
    /* Closed before initialize was answered: no daemon answers there. A
     * daemon killed while it spawned a tool leaves its listening socket
     * open in that child until the child's exec (issue 22: after a
     * SIGKILL, the restarted daemon's first client landed in that
     * backlog and was dropped, 2 runs of 3), so it is a failed attempt,
     * retried like a refused connect until the start deadline. */
    uv_read_stop(s);
    retry_attempt(c, (int)n);
    return;
  }
  if (n < 0 && !c->closing) {
    uv_read_stop(s);
    if (c->lost_cb != NULL) {
      c->lost_cb(c, (int)n);
    }
  }
}

/* ---- outgoing ------------------------------------------------------------ */

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = AL_CONTAINER_OF(req, write_req_t, req);

  (void)status; /* a broken connection shows up as a read error */
  al_free(w->buf);
  al_free(w);
}

int al__conn_call(al__conn_t *c, const char *method, json_t *params_new,
                  al__conn_result_cb cb, void *data) {
  json_t *id;
  json_t *msg;
  write_req_t *w;
  pending_t *p;
  size_t len;
  uv_buf_t b;
  int rc;

  if (c->closing || !c->pipe_open) {
    json_decref(params_new);
    return AL_ECLOSING;
  }
  id = json_integer(++c->next_id);
  msg = al_rpc_request_new(id, method,
                           params_new != NULL ? params_new : json_object());
  json_decref(id);
  if (msg == NULL) {
    return AL_ENOMEM;
  }
  w = al_calloc(1, sizeof(*w));
  p = al_calloc(1, sizeof(*p));
  if (w == NULL || p == NULL ||
      (w->buf = al_rpc_dump_line_alloc(msg, &len)) == NULL) {
    al_free(w);
    al_free(p);
    json_decref(msg);
    return AL_ENOMEM;
  }
  json_decref(msg);
  p->id = c->next_id;
  p->cb = cb;
  p->data = data;
  b = uv_buf_init(w->buf, (unsigned int)len);
  rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write);
  if (rc != 0) {
    al_free(w->buf);
    al_free(w);
    al_free(p);
    return rc;
  }
  al_list_insert_tail(&c->pending, &p->link);
  return 0;
}

/* ---- connecting ---------------------------------------------------------- */

static void on_initialized(al__conn_t *c, json_t *result, json_t *error,
                           void *data) {
  al__conn_ready_cb cb = c->ready_cb;

  (void)data;
  if (error != NULL || !json_is_object(result)) {
    fail(c, AL_EPROTO, "the daemon refused initialize: %s",
         json_string_value(json_object_get(error, "message"))
             ? json_string_value(json_object_get(error, "message"))
             : "bad result");
    return;
  }
  c->init_result = json_incref(result);
  c->ready_cb = NULL;
  if (cb != NULL) {
    cb(c, 0);
  }
}

/* A failed attempt (status): start the daemon if this client may and has
 * not yet, then try again in RETRY_MS, or fail at the deadline. */
static void retry_attempt(al__conn_t *c, int status) {
  c->last_error = status;
  /* This pipe is spent: closed now, re-initialized by the next attempt
   * once its close callback ran. */
  pipe_close(c);
  free_pending(c); /* an initialize sent on it */
  al_rpc_framer_free(&c->framer);
  al_rpc_framer_init(&c->framer, 64u << 20);
  if (!c->start_daemon) {
    fail(c, status, "%s", uv_strerror(status));
    return;
  }
  if (!c->spawned) {
    c->spawned = true;
    if (al__conn_spawn_daemon(c) != 0) {
      return; /* fail() was called */
    }
  }
  if (uv_now(c->loop) >= c->deadline) {
    fail(c, status, "%s", uv_strerror(status));
    return;
  }
  uv_timer_start(&c->timer, on_retry, RETRY_MS, 0);
}

static void on_connect(uv_connect_t *req, int status) {
  al__conn_t *c = req->data;
  json_t *params;

  if (c->closing) {
    return;
  }
  if (status == 0) {
    uv_timer_stop(&c->timer);
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    params = json_pack("{s:{s:s,s:s},s:i}", "client", "name", "agentloop",
                       "version", al_version_string(), "protocol_version",
                       AL_RPC_PROTOCOL_VERSION);
    if (al__conn_call(c, "initialize", params, on_initialized, NULL) != 0) {
      fail(c, AL_EPROTO, "%s", "cannot send initialize");
    }
    return;
  }
  retry_attempt(c, status);
}

static void on_retry(uv_timer_t *t) {
  al__conn_t *c = t->data;

  if (c->pipe_closing) {
    uv_timer_start(&c->timer, on_retry, 1, 0);
    return;
  }
  start_attempt(c);
}

static void start_attempt(al__conn_t *c) {
  if (c->closing) {
    return;
  }
  uv_pipe_init(c->loop, &c->pipe, 0);
  c->pipe.data = c;
  c->pipe_open = true;
  c->connect_req.data = c;
  uv_pipe_connect(&c->connect_req, &c->pipe, c->path, on_connect);
}

static void log_path(char *buf, size_t n) {
  char dir[PATH_MAX];

  buf[0] = '\0';
  if (al__tui_state_dir(dir, sizeof(dir)) && al__tui_mkdirs(dir) == 0) {
    if (snprintf(buf, n, "%s/agentloopd.log", dir) >= (int)n) {
      buf[0] = '\0';
    }
  }
}

static void free_handle(uv_handle_t *h) { al_free(h); }

int al__conn_spawn_daemon(al__conn_t *c) {
  char exe[PATH_MAX];
  char logp[PATH_MAX];
  char *args[5];
  uv_process_options_t o;
  uv_stdio_container_t stdio[3];
  uv_process_t *proc;
  int logfd = -1;
  int rc;

  if (!al__tui_find_daemon(exe, sizeof(exe))) {
    fail(c, AL_ENOTFOUND, "%s",
         "agentloopd was not found next to agentloop or on PATH");
    return AL_ENOTFOUND;
  }
  log_path(logp, sizeof(logp));
  if (logp[0] != '\0') {
    logfd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  }
  /* We detach it ourselves (setsid via UV_PROCESS_DETACHED): the daemon
   * need not fork again, and its stderr goes to the log file. */
  args[0] = exe;
  args[1] = "--foreground";
  args[2] = "--socket";
  args[3] = c->path;
  args[4] = NULL;
  memset(&o, 0, sizeof(o));
  memset(stdio, 0, sizeof(stdio));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = logfd >= 0 ? UV_INHERIT_FD : UV_IGNORE;
  stdio[1].data.fd = logfd;
  stdio[2].flags = logfd >= 0 ? UV_INHERIT_FD : UV_IGNORE;
  stdio[2].data.fd = logfd;
  o.file = exe;
  o.args = args;
  o.stdio = stdio;
  o.stdio_count = 3;
  o.flags = UV_PROCESS_DETACHED;
  proc = al_calloc(1, sizeof(*proc));
  if (proc == NULL) {
    fail(c, AL_ENOMEM, "%s", "out of memory");
    return AL_ENOMEM;
  }
  rc = uv_spawn(c->loop, proc, &o);
  if (logfd >= 0) {
    close(logfd);
  }
  if (rc != 0) {
    al_free(proc);
    char msg[sizeof(c->why)];

    if (snprintf(msg, sizeof(msg), "cannot start %s: %s", exe,
                 uv_strerror(rc)) < 0) {
      msg[0] = '\0';
    }
    fail(c, rc, "%s", msg);
    return rc;
  }
  snprintf(c->daemon_exe, sizeof(c->daemon_exe), "%s", exe);
  c->daemon_pid = proc->pid;
  /* The daemon outlives us: forget the handle without waiting. */
  uv_unref((uv_handle_t *)proc);
  uv_close((uv_handle_t *)proc, free_handle);
  return 0;
}

int al__conn_open(al__conn_t *c, uv_loop_t *loop, bool start_daemon,
                  al__conn_ready_cb ready_cb) {
  const char *t = getenv("AGENTLOOP_START_TIMEOUT_MS");
  uint64_t start_ms = DEFAULT_START_MS;
  int rc;

  memset(c->why, 0, sizeof(c->why));
  c->loop = loop;
  c->start_daemon = start_daemon;
  c->ready_cb = ready_cb;
  al_list_init(&c->pending);
  al_rpc_framer_init(&c->framer, 64u << 20);
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  if (t != NULL && atoi(t) > 0) {
    start_ms = (uint64_t)atoi(t);
  }
  c->deadline = uv_now(loop) + start_ms;
  rc = al__rpc_socket_path(c->path, sizeof(c->path), true, c->why,
                           sizeof(c->why));
  if (rc != 0) {
    return rc;
  }
  start_attempt(c);
  return 0;
}
