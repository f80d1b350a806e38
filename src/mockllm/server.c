/* The mockllm HTTP server: listener, connections, request parsing (llhttp in
 * request mode), routing, validation, recording and response playback.
 *
 * Each connection owns a uv_tcp_t and a uv_timer_t (embedded; freed in the
 * last close callback) and runs one request at a time: when llhttp reports a
 * complete message the parser is paused, bytes that arrive meanwhile
 * (pipelining) wait in a bounded buffer, and parsing resumes once the
 * response has been written (keep-alive) or the connection closes.
 *
 * Playback is a pump: it fills the connection's output buffer from the
 * response's pre-rendered events (one batch of up to AL__MOCK_BATCH bytes,
 * framed as one HTTP chunk), tries uv_try_write, hands any remainder to
 * uv_write and continues in the write callback, so at most one batch per
 * connection is in memory and nothing is rendered per event. Pacing, drip,
 * pings and first-byte delays all run on the connection's single timer.
 * Faults that cut the connection (reset after N bytes) wait for the bytes
 * before them to be accepted by the kernel, then close with RST. */
#include <fcntl.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "mockllm/mockllm_int.h"

#define AL__MOCK_BATCH (64 * 1024)
#define AL__MOCK_YIELD_BYTES (1024 * 1024)
#define AL__MOCK_MAX_URL 8192
#define AL__MOCK_RBUF 65536
#define AL__MOCK_RECORD_QUEUE (16 * 1024 * 1024)

typedef enum {
  P_READ = 0,  /* reading a request */
  P_FIRST,     /* waiting before the first byte */
  P_EVENTS,    /* streaming events */
  P_END,       /* write the stream terminator */
  P_STALL,     /* headers sent, silence */
  P_PINGS,     /* headers sent, pings forever */
  P_DONE,      /* everything queued; finish when written */
  P_DRAIN      /* FIN sent; discard input until EOF, then close */
} phase_t;

typedef enum {
  T_NONE = 0,
  T_FIRST, /* first_byte_delay_ms elapsed */
  T_DELAY, /* an event's delay_ms elapsed */
  T_DRIP,  /* next drip slice */
  T_PING,  /* next ping of a pings_only stream */
  T_YIELD, /* resume a long synchronous burst */
  T_PARSE, /* parse pipelined requests */
  T_DRAIN  /* give up waiting for the client's EOF */
} why_t;

#define AL__MOCK_DRAIN_MS 2000

typedef struct conn_s {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t wreq;
  uv_shutdown_t sreq;
  al_mockllm_t *srv;
  al_list_t node;
  llhttp_t parser;
  int handles;
  bool closing;
  bool reading;
  bool writing;
  /* request */
  al_buf_t url;
  al_buf_t hdrs; /* name\0value\0... names lower-cased */
  al_buf_t body;
  al_buf_t in;   /* bytes received while a response plays */
  int hstate;    /* 0 none, 1 in field, 2 in value */
  int too_big;   /* 413 / 414 / 431 when a limit was hit */
  /* response */
  phase_t phase;
  why_t why;
  al_mockllm_proto_t proto;
  al__mock_response_t *resp;
  /* usage_from_request: this request's input counts (-1: as scripted). */
  int64_t auto_in;
  int64_t auto_cached;
  const al__mock_events_t *evs;
  size_t ev_i;
  uint64_t rep_i;
  uint64_t content_events; /* events sent, pings excluded */
  bool playing;   /* counted in srv->playing */
  bool stream;
  bool responses; /* POST /v1/responses (proto OPENAI for error shapes) */
  bool chunked;
  bool keep_alive;
  bool delay_done;
  bool error_sent;
  bool reset_now;
  bool in_overflow;    /* pipelined input did not fit: close after this */
  phase_t after_first; /* the phase once first_byte_delay_ms elapsed */
  char reqid[40];
  /* output */
  al_buf_t out;
  size_t out_off;
  size_t hdr_left;  /* header bytes at out_off not yet sent */
  size_t inflight;  /* bytes handed to uv_write */
  int64_t body_sent;
  uint64_t drip_rng; /* drip.seed: the next slice size */
  size_t pump_bytes;
  /* TLS listener only: the session, the records being written (never
   * touched while c->writing) and records made outside the pump (handshake,
   * 100 Continue) waiting to go out in front of the next write. */
  al__mock_tls_conn_t *tls;
  al_buf_t tout;
  al_buf_t hs;
} conn_t;

struct al_mockllm_s {
  uv_loop_t *loop;
  uv_tcp_t listener;
  al_list_t conns;
  al_mockllm_scenario_t *scn;
  al__mock_tls_t *tls; /* NULL: plaintext listener */
  size_t cursor;
  size_t playing;
  bool validate;
  bool require_api_key;
  bool record;
  bool timestamps;
  size_t max_hdr;
  size_t max_body;
  int port;
  void *data;
  uint64_t req_seq;
  al_mockllm_stats_t stats;
  char *last_error;
  al_buf_t prev_body; /* usage_from_request cache: the previous body */
  al_mockllm_record_t *recs;
  size_t nrecs;
  size_t caprecs;
  /* NDJSON record file */
  bool rec_file;
  uv_file fd;
  bool fd_open;
  bool fd_failed;
  bool fs_busy;
  uv_fs_t fs_req;
  al_buf_t fq; /* queued lines */
  al_buf_t fw; /* being written */
  size_t fw_off;
  /* closing */
  bool closing;
  int pending;
  void (*close_cb)(al_mockllm_t *m);
  char rbuf[AL__MOCK_RBUF];
};

static void pump(conn_t *c);
static void conn_close(conn_t *c, bool reset);
static void srv_maybe_done(al_mockllm_t *m);
static void feed_in(conn_t *c);
static void conn_end(conn_t *c);
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- small helpers ---------------------------------------------------------- */

static const char *status_text(int st) {
  switch (st) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 529: return "Site Overloaded";
    default: return "Status";
  }
}

static const char *find_hdr(const conn_t *c, const char *name) {
  const char *p = c->hdrs.data;
  const char *end = p + c->hdrs.len;
  const char *found = NULL;

  while (p != NULL && p < end) {
    const char *val = p + strlen(p) + 1;

    if (val >= end) {
      break;
    }
    if (strcmp(p, name) == 0) {
      found = val; /* last one wins */
    }
    p = val + strlen(val) + 1;
  }
  return found;
}

static json_t *headers_json(const conn_t *c) {
  json_t *o = json_object();
  const char *p = c->hdrs.data;
  const char *end = p + c->hdrs.len;

  while (o != NULL && p != NULL && p < end) {
    const char *val = p + strlen(p) + 1;

    if (val >= end) {
      break;
    }
    json_object_set_new(o, p, json_string(val));
    p = val + strlen(val) + 1;
  }
  return o;
}

/* ---- record file (asynchronous) ---------------------------------------------- */

static void fs_kick(al_mockllm_t *m);

static void fs_write_cb(uv_fs_t *req) {
  al_mockllm_t *m = AL_CONTAINER_OF(req, al_mockllm_t, fs_req);
  ssize_t r = req->result;

  uv_fs_req_cleanup(req);
  m->fs_busy = false;
  if (r < 0) {
    al_log(AL_LOG_WARN, "mockllm: record file write failed: %s",
           uv_strerror((int)r));
    m->fd_failed = true;
    al_buf_reset(&m->fw);
    m->fw_off = 0;
  } else {
    m->fw_off += (size_t)r;
    if (m->fw_off >= m->fw.len) {
      al_buf_reset(&m->fw);
      m->fw_off = 0;
    }
  }
  fs_kick(m);
}

static void fs_close_cb(uv_fs_t *req) {
  al_mockllm_t *m = AL_CONTAINER_OF(req, al_mockllm_t, fs_req);

  uv_fs_req_cleanup(req);
  m->fs_busy = false;
  m->fd_open = false;
  srv_maybe_done(m);
}

static void fs_kick(al_mockllm_t *m) {
  uv_buf_t b;
  int err;

  if (m->fs_busy) {
    return;
  }
  if (m->fd_open && !m->fd_failed && m->fw.len == 0 && m->fq.len > 0) {
    al_buf_t t = m->fw;

    m->fw = m->fq;
    m->fq = t;
    al_buf_reset(&m->fq);
    m->fw_off = 0;
  }
  if (m->fd_open && !m->fd_failed && m->fw_off < m->fw.len) {
    b = uv_buf_init(m->fw.data + m->fw_off,
                    (unsigned int)(m->fw.len - m->fw_off));
    err = uv_fs_write(m->loop, &m->fs_req, m->fd, &b, 1, -1, fs_write_cb);
    if (err == 0) {
      m->fs_busy = true;
      return;
    }
    m->fd_failed = true;
  }
  if (m->closing) {
    if (m->fd_open) {
      if (uv_fs_close(m->loop, &m->fs_req, m->fd, fs_close_cb) == 0) {
        m->fs_busy = true;
        return;
      }
      m->fd_open = false;
    }
    srv_maybe_done(m);
  }
}

static void fs_open_cb(uv_fs_t *req) {
  al_mockllm_t *m = AL_CONTAINER_OF(req, al_mockllm_t, fs_req);

  m->fs_busy = false;
  if (req->result < 0) {
    al_log(AL_LOG_WARN, "mockllm: cannot open record file %s: %s",
           req->path ? req->path : "?", uv_strerror((int)req->result));
    m->fd_failed = true;
  } else {
    m->fd = (uv_file)req->result;
    m->fd_open = true;
  }
  uv_fs_req_cleanup(req);
  fs_kick(m);
}

/* ---- recording ----------------------------------------------------------------- */

static void record_free(al_mockllm_record_t *r) {
  al_free(r->method);
  al_free(r->path);
  json_decref(r->headers);
  json_decref(r->body);
  al_free(r->error);
}

static void record(conn_t *c, const char *method, const char *path,
                   json_t *headers, json_t *body, bool valid, int status,
                   const char *error, int index, int track) {
  al_mockllm_t *m = c->srv;

  if (m->rec_file && !m->fd_failed) {
    json_t *j = json_pack("{s:s, s:s, s:O, s:O, s:s, s:b, s:i, s:o, s:i, s:i, "
                          "s:I}",
                          "method", method, "path", path, "headers", headers,
                          "body", body ? body : json_null(), "protocol",
                          c->proto == AL_MOCKLLM_PROTO_ANTHROPIC ? "anthropic"
                          : c->proto == AL_MOCKLLM_PROTO_OPENAI  ? "openai"
                                                                 : "none",
                          "valid", valid, "status", status, "error",
                          error ? json_string(error) : json_null(),
                          "response_index", index, "track", track,
                          "arrival_ns", (json_int_t)uv_hrtime());
    char *line = j ? al__mockllm_dumps(j, NULL) : NULL;

    if (line == NULL || al_buf_append_str(&m->fq, line) != 0 ||
        al_buf_append(&m->fq, "\n", 1) != 0) {
      al_log(AL_LOG_WARN, "mockllm: record queue full, dropping a request");
    }
    al_free(line);
    json_decref(j);
    fs_kick(m);
  }
  if (!m->record) {
    return;
  }
  if (m->nrecs == m->caprecs) {
    size_t ncap = m->caprecs ? m->caprecs * 2 : 16;
    al_mockllm_record_t *v = al_realloc(m->recs, ncap * sizeof(*v));

    if (v == NULL) {
      return;
    }
    m->recs = v;
    m->caprecs = ncap;
  }
  {
    al_mockllm_record_t *r = &m->recs[m->nrecs];

    memset(r, 0, sizeof(*r));
    r->method = al_strdup(method);
    r->path = al_strdup(path);
    r->headers = json_incref(headers);
    r->body = json_incref(body);
    r->proto = c->proto;
    r->valid = valid;
    r->status = status;
    r->error = error ? al_strdup(error) : NULL;
    r->response_index = index;
    r->track = track;
    r->arrival_ns = uv_hrtime();
    m->nrecs++;
  }
}

/* ---- output ---------------------------------------------------------------------- */

static bool limits_apply(const conn_t *c) {
  return c->resp != NULL &&
         (c->resp->drip_bytes > 0 || c->resp->reset_after_bytes >= 0);
}

static void start_timer(conn_t *c, why_t why, uint64_t ms);

static void write_cb(uv_write_t *req, int status);

/* Bookkeeping after n bytes left the buffer. Returns false when the
 * connection is going away or the pump must wait for a timer. */
static bool sent(conn_t *c, size_t n) {
  size_t h = AL_MIN(n, c->hdr_left);

  c->hdr_left -= h;
  c->body_sent += (int64_t)(n - h);
  c->out_off += n;
  c->srv->stats.bytes_sent += n;
  c->pump_bytes += n;
  if (c->out_off >= c->out.len) {
    al_buf_reset(&c->out);
    c->out_off = 0;
  }
  if (c->reset_now) {
    conn_close(c, true);
    return false;
  }
  if (c->resp != NULL && c->resp->drip_bytes > 0 && n > h) {
    start_timer(c, T_DRIP, c->resp->drip_interval_ms);
    return false;
  }
  return true;
}

/* TLS: writes the pending records (c->hs first, then c->tout), which carry
 * `plain` plaintext bytes of c->out. The plaintext is accounted (sent())
 * only once all its records left, so drip and reset_after_bytes keep
 * counting plaintext. Returns like send_out. */
static bool tls_write(conn_t *c, size_t plain) {
  uv_buf_t b[2];
  size_t total = c->hs.len + c->tout.len;
  size_t off;
  int r;

  if (total == 0) {
    return sent(c, plain);
  }
  b[0] = uv_buf_init(c->hs.data, (unsigned int)c->hs.len);
  b[1] = uv_buf_init(c->tout.data, (unsigned int)c->tout.len);
  r = c->hs.len == 0 ? uv_try_write((uv_stream_t *)&c->tcp, b + 1, 1)
      : c->tout.len == 0 ? uv_try_write((uv_stream_t *)&c->tcp, b, 1)
                         : uv_try_write((uv_stream_t *)&c->tcp, b, 2);
  if (r == (int)total) {
    al_buf_reset(&c->hs);
    al_buf_reset(&c->tout);
    return sent(c, plain);
  }
  if (r < 0 && r != UV_EAGAIN) {
    conn_close(c, false);
    return false;
  }
  /* Queue the rest as one buffer, c->tout (hs + tout), which nothing else
   * touches until write_cb. */
  off = r > 0 ? (size_t)r : 0;
  if (c->hs.len > 0) {
    al_buf_t t;

    if (al_buf_append(&c->hs, c->tout.data, c->tout.len) != 0) {
      conn_close(c, false);
      return false;
    }
    t = c->tout;
    c->tout = c->hs;
    c->hs = t;
    al_buf_reset(&c->hs);
  }
  b[0] = uv_buf_init(c->tout.data + off, (unsigned int)(c->tout.len - off));
  r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, b, 1, write_cb);
  if (r != 0) {
    conn_close(c, false);
    return false;
  }
  c->writing = true;
  c->inflight = plain;
  return false;
}

/* Sends what is buffered. Returns true if all of it went out synchronously
 * and the pump may continue. */
static bool send_out(conn_t *c) {
  size_t n = c->out.len - c->out_off;
  uv_buf_t b;
  int r;

  if (c->hdr_left > 0) {
    if (limits_apply(c)) {
      n = AL_MIN(n, c->hdr_left); /* headers are never dripped or cut */
    }
  } else if (c->resp != NULL) {
    if (c->resp->drip_bytes > 0 && c->resp->drip_seed != 0) {
      /* Random slice sizes (xorshift64*), the same for the same seed. */
      c->drip_rng ^= c->drip_rng >> 12;
      c->drip_rng ^= c->drip_rng << 25;
      c->drip_rng ^= c->drip_rng >> 27;
      n = AL_MIN(n, 1 + (size_t)((c->drip_rng * 0x2545F4914F6CDD1DULL) >>
                                 33) % c->resp->drip_bytes);
    } else if (c->resp->drip_bytes > 0) {
      n = AL_MIN(n, c->resp->drip_bytes);
    }
    if (c->resp->reset_after_bytes >= 0) {
      int64_t rem = c->resp->reset_after_bytes - c->body_sent;

      if (rem <= 0) {
        n = 0;
        c->reset_now = true;
      } else if ((int64_t)n >= rem) {
        n = (size_t)rem;
        c->reset_now = true;
      }
    }
  }
  if (n == 0) {
    return sent(c, 0);
  }
  if (c->tls != NULL) {
    if (al__mock_tls_encrypt(c->tls, c->out.data + c->out_off, n,
                             &c->tout) != 0) {
      conn_close(c, false);
      return false;
    }
    return tls_write(c, n);
  }
  b = uv_buf_init(c->out.data + c->out_off, (unsigned int)n);
  r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (r == (int)n) {
    return sent(c, n);
  }
  if (r < 0 && r != UV_EAGAIN) {
    conn_close(c, false);
    return false;
  }
  if (r > 0) {
    /* Partial: account what went, queue the rest. */
    size_t done = (size_t)r;
    bool keep_reset = c->reset_now;

    c->reset_now = false;
    (void)sent(c, done); /* cannot close or time: reset/drip handled below */
    c->reset_now = keep_reset;
    if (c->why == T_DRIP) {
      uv_timer_stop(&c->timer);
      c->why = T_NONE;
    }
    n -= done;
    b = uv_buf_init(c->out.data + c->out_off, (unsigned int)n);
  }
  r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
  if (r != 0) {
    conn_close(c, false);
    return false;
  }
  c->writing = true;
  c->inflight = n;
  return false;
}

static void write_cb(uv_write_t *req, int status) {
  conn_t *c = AL_CONTAINER_OF(req, conn_t, wreq);

  c->writing = false;
  if (c->closing) {
    return;
  }
  if (status < 0) {
    conn_close(c, false);
    return;
  }
  if (c->tls != NULL) {
    al_buf_reset(&c->tout);
  }
  c->pump_bytes = 0;
  if (sent(c, c->inflight)) {
    pump(c);
  }
  if (c->tls != NULL && !c->closing && !c->writing && c->hs.len > 0) {
    /* Records made while this write was out (handshake, 100 Continue)
     * that no response write carried. */
    (void)tls_write(c, 0);
  }
}

static void timer_cb(uv_timer_t *t) {
  conn_t *c = AL_CONTAINER_OF(t, conn_t, timer);
  why_t why = c->why;

  c->why = T_NONE;
  c->pump_bytes = 0;
  switch (why) {
    case T_FIRST:
      c->phase = c->after_first;
      break;
    case T_PARSE:
      feed_in(c);
      return;
    case T_DRAIN:
      conn_close(c, false);
      return;
    case T_DELAY:
      c->delay_done = true;
      break;
    case T_PING: {
      const char *ping = c->proto == AL_MOCKLLM_PROTO_OPENAI
                             ? ": ping\n\n"
                             : "event: ping\ndata: {\"type\": \"ping\"}\n\n";
      size_t plen = strlen(ping);

      if (c->chunked) {
        al_buf_printf(&c->out, "%zx\r\n", plen);
      }
      al_buf_append(&c->out, ping, plen);
      if (c->chunked) {
        al_buf_append(&c->out, "\r\n", 2);
      }
      c->srv->stats.events_sent++;
      break;
    }
    default:
      break;
  }
  pump(c);
}

static void start_timer(conn_t *c, why_t why, uint64_t ms) {
  c->why = why;
  uv_timer_start(&c->timer, timer_cb, ms, 0);
}

/* Status line and headers into out (counted as header bytes). */
static int put_head(conn_t *c, int status, const char *ctype,
                    int64_t content_length, const al__mock_response_t *r) {
  al_buf_t *o = &c->out;
  size_t before = o->len;
  int err;

  err = al_buf_printf(o, "HTTP/1.1 %d %s\r\ncontent-type: %s\r\n", status,
                      status_text(status), ctype);
  if (err == 0 && c->proto != AL_MOCKLLM_PROTO_NONE) {
    err = al_buf_printf(o, "%s: %s\r\n",
                        c->proto == AL_MOCKLLM_PROTO_OPENAI ? "x-request-id"
                                                            : "request-id",
                        c->reqid);
  }
  if (err == 0 && content_length >= 0) {
    err = al_buf_printf(o, "content-length: %lld\r\n",
                        (long long)content_length);
  } else if (err == 0 && c->chunked) {
    err = al_buf_append_str(o, "cache-control: no-cache\r\n"
                               "transfer-encoding: chunked\r\n");
  } else if (err == 0) {
    err = al_buf_append_str(o, "cache-control: no-cache\r\n");
  }
  if (err == 0 && r != NULL && r->retry_after >= 0) {
    err = al_buf_printf(o, "retry-after: %lld\r\n", (long long)r->retry_after);
  }
  if (err == 0 && r != NULL && r->headers != NULL) {
    const char *k;
    json_t *v;

    json_object_foreach(r->headers, k, v) {
      if (err == 0) {
        err = al_buf_printf(o, "%s: %s\r\n", k, json_string_value(v));
      }
    }
  }
  if (err == 0) {
    err = al_buf_printf(o, "connection: %s\r\n\r\n",
                        c->keep_alive ? "keep-alive" : "close");
  }
  c->hdr_left += o->len - before;
  return err;
}

/* A complete non-streaming answer: head + body, then done. */
static void respond_simple(conn_t *c, int status, const char *ctype,
                           const char *body, size_t len,
                           const al__mock_response_t *r) {
  int err = put_head(c, status, ctype, (int64_t)len, r);

  if (err == 0) {
    err = al_buf_append(&c->out, body, len);
  }
  if (err != 0) {
    conn_close(c, false);
    return;
  }
  c->phase = P_DONE;
  pump(c);
}

static void respond_error(conn_t *c, int status, const char *type,
                          const char *message, const char *param,
                          const char *code, const al__mock_response_t *r) {
  al_mockllm_proto_t shape =
      c->proto == AL_MOCKLLM_PROTO_OPENAI ? AL_MOCKLLM_PROTO_OPENAI
                                          : AL_MOCKLLM_PROTO_ANTHROPIC;
  char *body = al__mockllm_error_body(shape, type, message, param, code,
                                      c->reqid);

  if (body == NULL) {
    conn_close(c, false);
    return;
  }
  respond_simple(c, status, "application/json", body, strlen(body), r);
  al_free(body);
}

/* ---- playback ---------------------------------------------------------------------- */

static int append_error_event(conn_t *c) {
  const al__mock_response_t *r = c->resp;
  const char *type = r->error_event_type ? r->error_event_type
                                         : "overloaded_error";
  const char *msg = r->error_message ? r->error_message : "Overloaded";
  json_t *j;
  char *s;
  int err;

  if (c->proto == AL_MOCKLLM_PROTO_OPENAI) {
    j = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type",
                  type, "param", "code");
  } else {
    j = json_pack("{s:s, s:{s:s, s:s}, s:s}", "type", "error", "error", "type",
                  type, "message", msg, "request_id", c->reqid);
  }
  s = j ? al__mockllm_dumps(j, NULL) : NULL;
  json_decref(j);
  if (s == NULL) {
    return AL_ENOMEM;
  }
  err = al_buf_printf(&c->out, "%sdata: %s\n\n",
                      c->proto == AL_MOCKLLM_PROTO_OPENAI ? ""
                                                          : "event: error\n",
                      s);
  al_free(s);
  c->error_sent = true;
  c->srv->stats.events_sent++;
  return err;
}

/* DeepSeek's thinking mode: every assistant message that called tools
 * must carry its reasoning back, or the request is refused with this
 * 400 (api-docs.deepseek.com/guides/thinking_mode). */
static bool reasoning_echoed(const json_t *body, const char *field,
                             al_mockllm_verdict_t *v) {
  const json_t *msgs = json_object_get(body, "messages");
  size_t i;

  for (i = 0; i < json_array_size(msgs); i++) {
    const json_t *msg = json_array_get(msgs, i);
    const json_t *r = json_object_get(msg, field);
    const char *role = json_string_value(json_object_get(msg, "role"));

    if (role == NULL || strcmp(role, "assistant") != 0 ||
        json_array_size(json_object_get(msg, "tool_calls")) == 0) {
      continue;
    }
    if ((json_is_string(r) && json_string_length(r) > 0) ||
        (json_is_array(r) && json_array_size(r) > 0)) {
      continue;
    }
    memset(v, 0, sizeof(*v));
    v->status = 400;
    snprintf(v->type, sizeof(v->type), "invalid_request_error");
    if (strcmp(field, "reasoning_content") == 0) {
      snprintf(v->message, sizeof(v->message),
               "The `reasoning_content` in the thinking mode must be passed "
               "back to the API.");
    } else {
      snprintf(v->message, sizeof(v->message),
               "messages[%zu]: missing `%s` on an assistant message with "
               "tool_calls",
               i, field);
    }
    return false;
  }
  return true;
}

typedef enum { PROD_MORE, PROD_WAIT, PROD_END } prod_t;

/* Fills out with one chunk of events. */
static prod_t produce(conn_t *c) {
  const al__mock_events_t *l = c->evs;
  const al__mock_response_t *r = c->resp;
  size_t start;
  size_t hdr_room = c->chunked ? 10 : 0;
  bool any = false;
  uint64_t ts = 0;
  bool with_ts = c->srv->timestamps;

  start = c->out.len;
  if (al_buf_reserve(&c->out, hdr_room + 256) != 0) {
    conn_close(c, false);
    return PROD_WAIT;
  }
  c->out.len += hdr_room; /* room for the chunk-size line, filled below */
  if (with_ts) {
    ts = uv_hrtime();
  }
  while (c->ev_i < l->n && !c->error_sent) {
    const al__mock_event_t *ev = &l->v[c->ev_i];
    int err = 0;

    if (r->error_event_after >= 0 && !(ev->flags & AL__EV_PING) &&
        c->content_events >= (uint64_t)r->error_event_after) {
      if (append_error_event(c) != 0) {
        conn_close(c, false);
        return PROD_WAIT;
      }
      any = true;
      break;
    }
    if (ev->delay_ms > 0 && !c->delay_done) {
      if (any) {
        break; /* send what we have, then wait */
      }
      c->out.len = start;
      start_timer(c, T_DELAY, ev->delay_ms);
      return PROD_WAIT;
    }
    c->delay_done = false;
    if (with_ts && ev->bytes[0] != ':') {
      err = al_buf_printf(&c->out, "id: %llu\n", (unsigned long long)ts);
    }
    if (err == 0 && (ev->flags & AL__EV_USAGE) && c->auto_in >= 0) {
      err = al__mockllm_usage_rewrite(ev, c->proto, c->auto_in,
                                      c->auto_cached, &c->out);
    } else if (err == 0) {
      err = al_buf_append(&c->out, ev->bytes, ev->len);
    }
    if (err != 0) {
      conn_close(c, false);
      return PROD_WAIT;
    }
    any = true;
    c->srv->stats.events_sent++;
    if (!(ev->flags & AL__EV_PING)) {
      c->content_events++;
    }
    if (++c->rep_i >= ev->repeat) {
      c->rep_i = 0;
      c->ev_i++;
    }
    if (c->out.len - start >= AL__MOCK_BATCH) {
      break;
    }
  }
  if (!any && c->ev_i >= l->n && r->error_event_after >= 0 && !c->error_sent) {
    /* N was past the end: the error still comes, after the last event. */
    if (append_error_event(c) != 0) {
      conn_close(c, false);
      return PROD_WAIT;
    }
    any = true;
  }
  if (!any) {
    c->out.len = start;
    return PROD_END;
  }
  if (c->chunked) {
    char h[16];
    size_t payload = c->out.len - start - hdr_room;
    int hl = snprintf(h, sizeof(h), "%zx\r\n", payload);

    /* The chunk line goes right before the payload; the unused part of the
     * reserved room is skipped by starting the send after it. The buffer
     * is empty before a batch, so the gap is at its head. */
    memcpy(c->out.data + start + hdr_room - (size_t)hl, h, (size_t)hl);
    if (start == 0 && c->out_off == 0) {
      c->out_off = hdr_room - (size_t)hl;
    } else {
      size_t gap = hdr_room - (size_t)hl;

      memmove(c->out.data + start, c->out.data + start + gap,
              c->out.len - start - gap);
      c->out.len -= gap;
    }
    if (al_buf_append(&c->out, "\r\n", 2) != 0) {
      conn_close(c, false);
      return PROD_WAIT;
    }
  }
  if (c->error_sent) {
    c->ev_i = l->n;
  }
  return PROD_MORE;
}

static void finish_response(conn_t *c) {
  al_mockllm_t *m = c->srv;

  if (c->playing) {
    c->playing = false;
    m->playing--;
  }
  if (!c->keep_alive || c->in_overflow) {
    conn_end(c);
    return;
  }
  c->phase = P_READ;
  c->resp = NULL;
  c->evs = NULL;
  c->proto = AL_MOCKLLM_PROTO_NONE;
  c->hdr_left = 0;
  c->body_sent = 0;
  if (c->out.cap > 4 * AL__MOCK_BATCH) {
    al_buf_free(&c->out); /* give back a burst's memory */
  }
  llhttp_resume(&c->parser);
  if (!c->reading &&
      uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) == 0) {
    c->reading = true;
  }
  if (c->in.len > 0) {
    /* Pipelined requests: parse them on the next turn, not from inside
     * this call chain (bounded stack however many are queued). */
    start_timer(c, T_PARSE, 0);
  }
}

static void pump(conn_t *c) {
  while (!c->closing && !c->writing && c->why == T_NONE) {
    if (c->out_off < c->out.len) {
      if (c->pump_bytes >= AL__MOCK_YIELD_BYTES) {
        /* Let other connections run. */
        start_timer(c, T_YIELD, 0);
        return;
      }
      if (!send_out(c)) {
        return;
      }
      continue;
    }
    switch (c->phase) {
      case P_EVENTS:
        switch (produce(c)) {
          case PROD_MORE:
            continue;
          case PROD_WAIT:
            return;
          case PROD_END:
            c->phase = P_END;
            continue;
        }
        return;
      case P_END:
        c->phase = P_DONE;
        if (c->chunked && c->stream) {
          if (al_buf_append_str(&c->out, "0\r\n\r\n") != 0) {
            conn_close(c, false);
            return;
          }
        }
        continue;
      case P_DONE:
        finish_response(c);
        return;
      case P_PINGS:
        /* One ping right after the headers, then one per interval. */
        start_timer(c, T_PING, c->content_events++ == 0
                                   ? 0
                                   : c->resp->ping_interval_ms);
        return;
      case P_STALL:
      case P_READ:
      case P_FIRST:
      case P_DRAIN:
      default:
        return;
    }
  }
}

/* Starts playing scripted response `r` (index idx). */
static void play(conn_t *c, al__mock_response_t *r, int idx, bool stream,
                 bool include_usage) {
  al_mockllm_t *m = c->srv;
  int err = 0;

  (void)idx;
  c->resp = r;
  c->stream = stream;
  c->ev_i = 0;
  c->rep_i = 0;
  c->content_events = 0;
  c->delay_done = false;
  c->error_sent = false;
  c->reset_now = false;
  c->body_sent = 0;
  c->drip_rng = r->drip_seed;
  m->stats.responses_played++;
  if (r->status != 0 && r->status != 200) {
    const char *type = r->error_type ? r->error_type
                                     : al__mockllm_error_type(r->status,
                                                              c->proto);
    const char *msg = r->error_message ? r->error_message
                                       : al__mockllm_error_message(r->status);
    const char *code = r->error_code;

    if (code == NULL && c->proto == AL_MOCKLLM_PROTO_OPENAI &&
        r->status == 429) {
      code = "rate_limit_exceeded";
    }
    if (r->first_byte_delay_ms > 0) {
      /* Render now, release the bytes after the delay. */
      char *body = al__mockllm_error_body(c->proto, type, msg, NULL, code,
                                          c->reqid);

      if (body == NULL || put_head(c, r->status, "application/json",
                                   (int64_t)strlen(body), r) != 0 ||
          al_buf_append_str(&c->out, body) != 0) {
        al_free(body);
        conn_close(c, false);
        return;
      }
      al_free(body);
      /* Hold the bytes back: the pump does not send while the timer runs. */
      c->phase = P_FIRST;
      c->after_first = P_DONE;
      start_timer(c, T_FIRST, r->first_byte_delay_ms);
      return;
    }
    respond_error(c, r->status, type, msg, NULL, code, r);
    return;
  }
  c->playing = true;
  m->playing++;
  c->chunked = r->xfer != AL__XFER_CLOSE;
  if (!c->chunked) {
    c->keep_alive = false;
  }
  if (!stream) {
    /* Non-streaming: the same script as one JSON body. Stream-only faults
     * map to what a client of a non-streaming call would see. */
    if (r->error_event_after >= 0) {
      respond_error(c, 529, c->proto == AL_MOCKLLM_PROTO_OPENAI
                                ? "overloaded_error"
                                : "overloaded_error",
                    r->error_message ? r->error_message : "Overloaded", NULL,
                    NULL, r);
      return;
    }
    err = al__mockllm_render_body(m->scn, r, c->proto);
    if (err == 0) {
      size_t slot = c->proto == AL_MOCKLLM_PROTO_OPENAI ? 1 : 0;

      err = put_head(c, 200, "application/json", (int64_t)r->body_len[slot],
                     r);
      if (err == 0 && !r->stall_after_headers && !r->pings_only) {
        err = al_buf_append(&c->out, r->body[slot], r->body_len[slot]);
      }
    }
    if (err != 0) {
      conn_close(c, false);
      return;
    }
    c->stream = false;
    c->phase = (r->stall_after_headers || r->pings_only) ? P_STALL : P_DONE;
  } else {
    c->evs = &r->ev[c->responses ? AL__R_RESPONSES
                    : c->proto == AL_MOCKLLM_PROTO_OPENAI
                        ? (include_usage ? AL__R_OPENAI_USAGE : AL__R_OPENAI)
                        : AL__R_ANTHROPIC];
    err = put_head(c, 200, "text/event-stream; charset=utf-8", -1, r);
    if (err != 0) {
      conn_close(c, false);
      return;
    }
    c->phase = r->stall_after_headers ? P_STALL
               : r->pings_only        ? P_PINGS
                                      : P_EVENTS;
  }
  if (r->first_byte_delay_ms > 0) {
    /* Everything, headers included, waits for the delay. */
    c->after_first = c->phase;
    c->phase = P_FIRST;
    start_timer(c, T_FIRST, r->first_byte_delay_ms);
    return;
  }
  pump(c);
}

/* ---- request dispatch ------------------------------------------------------------- */

static void set_last_error(al_mockllm_t *m, const char *msg) {
  al_free(m->last_error);
  m->last_error = msg ? al_strdup(msg) : NULL;
}

/* usage_from_request: the input counts follow the request's size; with
 * the cache on, the bytes it shares with the previous request's start
 * count as read from the cache (a prompt cache keyed on the prefix). */
static void usage_from_request(conn_t *c) {
  al_mockllm_t *m = c->srv;
  int64_t bpt = m->scn->usage_bytes_per_token;
  size_t same = 0;

  c->auto_in = c->auto_cached = -1;
  if (bpt <= 0) {
    return;
  }
  if (m->scn->usage_cache) {
    while (same < c->body.len && same < m->prev_body.len &&
           c->body.data[same] == m->prev_body.data[same]) {
      same++;
    }
    al_buf_reset(&m->prev_body);
    if (al_buf_append(&m->prev_body, c->body.data, c->body.len) != 0) {
      al_buf_reset(&m->prev_body);
    }
  }
  c->auto_cached = (int64_t)same / bpt;
  c->auto_in = (int64_t)(c->body.len - same) / bpt;
}

/* The next response of a list of n played with this cursor (an index in
 * the list), or -1 when it is exhausted and on_exhausted says error (or the
 * list is empty). */
static int next_response(size_t *cursor, size_t n, al__mock_exhausted_t exh) {
  if (*cursor < n) {
    return (int)(*cursor)++;
  }
  if (n == 0 || exh == AL__EXH_ERROR) {
    return -1;
  }
  if (exh == AL__EXH_CYCLE) {
    return (int)((*cursor)++ % n);
  }
  (*cursor)++;
  return (int)n - 1;
}

static void dispatch(conn_t *c) {
  al_mockllm_t *m = c->srv;
  const char *method = llhttp_method_name((llhttp_method_t)c->parser.method);
  char path[AL__MOCK_MAX_URL + 1];
  char *q;
  json_t *headers = NULL;
  json_t *body = NULL;
  json_error_t jerr;
  al_mockllm_verdict_t v;
  bool valid = true;
  al__mock_response_t *r;
  int idx;
  int track;
  size_t base = 0;
  const char *sel;
  bool had_body;

  m->stats.requests++;
  m->req_seq++;
  snprintf(c->reqid, sizeof(c->reqid), "req_mock%016llx",
           (unsigned long long)m->req_seq);
  c->keep_alive = llhttp_should_keep_alive(&c->parser) != 0;
  c->hdr_left = 0;
  c->resp = NULL;
  snprintf(path, sizeof(path), "%s", c->url.data ? c->url.data : "/");
  q = strchr(path, '?');
  if (q != NULL) {
    *q = '\0';
  }
  c->proto = AL_MOCKLLM_PROTO_NONE;
  c->responses = false;
  if (strcmp(path, "/v1/messages") == 0) {
    c->proto = AL_MOCKLLM_PROTO_ANTHROPIC;
  } else if (strcmp(path, "/v1/chat/completions") == 0) {
    c->proto = AL_MOCKLLM_PROTO_OPENAI;
  } else if (strcmp(path, "/v1/responses") == 0) {
    c->proto = AL_MOCKLLM_PROTO_OPENAI;
    c->responses = true;
  }
  c->phase = P_DONE; /* until a response starts */

  if (strcmp(path, "/health") == 0 &&
      (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)) {
    respond_simple(c, 200, "text/plain", "ok",
                   strcmp(method, "HEAD") == 0 ? 0 : 2, NULL);
    return;
  }
  if (c->proto == AL_MOCKLLM_PROTO_NONE || strcmp(method, "POST") != 0) {
    char msg[AL__MOCK_MAX_URL + 64];

    if (strncmp(path, "/v1/chat", 8) == 0 ||
        strncmp(path, "/v1/completions", 15) == 0 ||
        strncmp(path, "/v1/responses", 13) == 0) {
      c->proto = AL_MOCKLLM_PROTO_OPENAI;
      snprintf(msg, sizeof(msg), "Invalid URL (%s %s)", method, path);
      c->proto = AL_MOCKLLM_PROTO_OPENAI;
      respond_error(c, 404, "invalid_request_error", msg, NULL, NULL, NULL);
    } else {
      snprintf(msg, sizeof(msg), "Not Found: %s %s", method, path);
      c->proto = AL_MOCKLLM_PROTO_NONE;
      respond_error(c, 404, "not_found_error", msg, NULL, NULL, NULL);
    }
    return;
  }

  headers = headers_json(c);
  had_body = c->body.len > 0;
  usage_from_request(c);
  if (had_body) {
    /* As the API does, \u0000 in a string is accepted (valid JSON). */
    body = json_loadb(c->body.data, c->body.len, JSON_ALLOW_NUL, &jerr);
  }
  /* Routed before validation so a refused request is recorded with the
   * track it was meant for. */
  track = al__mockllm_track_pick(m->scn, body);
  if (c->body.cap > 4 * AL__MOCK_BATCH) {
    al_buf_free(&c->body); /* a big request's memory is not kept idle */
  }
  if (body == NULL) {
    memset(&v, 0, sizeof(v));
    v.status = 400;
    snprintf(v.type, sizeof(v.type), "invalid_request_error");
    if (c->proto == AL_MOCKLLM_PROTO_OPENAI) {
      snprintf(v.message, sizeof(v.message),
               "We could not parse the JSON body of your request. (HINT: "
               "This likely means you aren't using your HTTP library "
               "correctly. The OpenAI API expects a JSON payload, but what "
               "was sent was not valid JSON.)");
    } else {
      snprintf(v.message, sizeof(v.message),
               "There was an error parsing the body of your request: %s",
               had_body ? jerr.text : "empty body");
    }
    valid = false;
  } else if (m->validate) {
    valid = c->responses ? al_mockllm_validate_responses(body, headers, &v)
            : c->proto == AL_MOCKLLM_PROTO_OPENAI
                ? al_mockllm_validate_openai_ex(body, headers,
                                                m->require_api_key, &v)
                : al_mockllm_validate_anthropic_ex(body, headers,
                                                   m->require_api_key, &v);
  }
  if (valid && c->proto == AL_MOCKLLM_PROTO_OPENAI && !c->responses &&
      m->scn->require_reasoning != NULL) {
    valid = reasoning_echoed(body, m->scn->require_reasoning, &v);
  }
  if (!valid) {
    m->stats.validation_failures++;
    set_last_error(m, v.message);
    record(c, method, path, headers, body, false, v.status, v.message, -1,
           track);
    respond_error(c, v.status, v.type, v.message, v.param, NULL, NULL);
    json_decref(headers);
    json_decref(body);
    return;
  }

  /* Pick the scripted response: the header names a top-level one, else
   * the next of the request's track (or of the top level). idx counts
   * within that list; base is where the list starts in responses. */
  sel = find_hdr(c, "x-mockllm-response");
  if (sel != NULL) {
    long want = strtol(sel, NULL, 10);

    track = -1;
    idx = want >= 0 && (size_t)want < m->scn->n ? (int)want : -1;
  } else if (track >= 0) {
    al__mock_track_t *t = &m->scn->tracks[track];

    base = t->first;
    idx = next_response(&t->cursor, t->n, t->on_exhausted);
  } else {
    idx = next_response(&m->cursor, m->scn->n, m->scn->on_exhausted);
  }
  if (idx < 0) {
    char msg[160];

    if (track >= 0) {
      snprintf(msg, sizeof(msg),
               "mockllm: track %d exhausted (%zu responses played)", track,
               m->scn->tracks[track].n);
    } else if (m->scn->n == 0) {
      snprintf(msg, sizeof(msg), "mockllm: no track matches this request "
               "and the scenario has no top-level responses");
    } else {
      snprintf(msg, sizeof(msg),
               "mockllm: scenario exhausted (%zu responses played)",
               m->scn->n);
    }
    record(c, method, path, headers, body, true, 500, NULL, -1, track);
    respond_error(c, 500, c->proto == AL_MOCKLLM_PROTO_OPENAI ? "server_error"
                                                              : "api_error",
                  msg, NULL, NULL, NULL);
    json_decref(headers);
    json_decref(body);
    return;
  }
  r = &m->scn->responses[base + (size_t)idx];
  if (r->expect_contains != NULL || r->expect_not_contains != NULL) {
    char *text = al__mockllm_dumps(body, NULL);
    char msg[600];

    msg[0] = '\0';
    if (text != NULL && r->expect_contains != NULL &&
        strstr(text, r->expect_contains) == NULL) {
      snprintf(msg, sizeof(msg),
               "mockllm: expect_request: the request body does not contain "
               "'%.200s' (%s response %d, line %d)", r->expect_contains,
               track >= 0 ? "its track's" : "top-level", idx, r->line);
    } else if (text != NULL && r->expect_not_contains != NULL &&
               strstr(text, r->expect_not_contains) != NULL) {
      snprintf(msg, sizeof(msg),
               "mockllm: expect_request: the request body contains "
               "'%.200s' (%s response %d, line %d)",
               r->expect_not_contains,
               track >= 0 ? "its track's" : "top-level", idx, r->line);
    }
    al_free(text);
    if (msg[0] != '\0') {
      m->stats.validation_failures++;
      set_last_error(m, msg);
      record(c, method, path, headers, body, false, 400, msg, idx, track);
      respond_error(c, 400, "invalid_request_error", msg, NULL, NULL, NULL);
      json_decref(headers);
      json_decref(body);
      return;
    }
  }
  record(c, method, path, headers, body, true,
         r->status != 0 ? r->status : 200, NULL, idx, track);
  {
    bool stream = json_is_true(json_object_get(body, "stream"));
    bool usage = json_is_true(json_object_get(
        json_object_get(body, "stream_options"), "include_usage"));

    json_decref(headers);
    json_decref(body);
    play(c, r, idx, stream, usage);
  }
}

/* ---- llhttp callbacks ---------------------------------------------------------------- */

static int on_message_begin(llhttp_t *p) {
  conn_t *c = p->data;

  al_buf_reset(&c->url);
  al_buf_reset(&c->hdrs);
  al_buf_reset(&c->body);
  c->hstate = 0;
  c->too_big = 0;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;

  if (al_buf_append(&c->url, at, len) != 0) {
    c->too_big = 414;
    return -1;
  }
  return 0;
}

static int hdr_add(conn_t *c, const char *at, size_t len, bool lower) {
  size_t i;

  if (al_buf_reserve(&c->hdrs, len + 1) != 0) {
    c->too_big = 431;
    return -1;
  }
  for (i = 0; i < len; i++) {
    char ch = at[i];

    if (lower && ch >= 'A' && ch <= 'Z') {
      ch = (char)(ch - 'A' + 'a');
    }
    c->hdrs.data[c->hdrs.len++] = ch;
  }
  c->hdrs.data[c->hdrs.len] = '\0';
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;

  if (c->hstate == 2 && hdr_add(c, "", 1, false) != 0) {
    return -1;
  }
  c->hstate = 1;
  return hdr_add(c, at, len, true);
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;

  if (c->hstate == 1 && hdr_add(c, "", 1, false) != 0) {
    return -1;
  }
  c->hstate = 2;
  return hdr_add(c, at, len, false);
}

static int on_headers_complete(llhttp_t *p) {
  conn_t *c = p->data;
  const char *expect;

  if (c->hstate == 1 && hdr_add(c, "", 1, false) != 0) {
    return -1;
  }
  if (c->hstate != 0 && hdr_add(c, "", 1, false) != 0) {
    return -1;
  }
  c->hstate = 0;
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > c->body.max) {
    c->too_big = 413;
    return -1;
  }
  expect = find_hdr(c, "expect");
  if (expect != NULL && strcasecmp(expect, "100-continue") == 0) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    uv_buf_t b = uv_buf_init((char *)cont, sizeof(cont) - 1);

    /* Nothing else is being written while a request is read. With TLS
     * the record goes out after this read's plaintext is handled. */
    if (c->tls != NULL) {
      (void)al__mock_tls_encrypt(c->tls, cont, sizeof(cont) - 1, &c->hs);
    } else {
      (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    }
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;

  if (al_buf_append(&c->body, at, len) != 0) {
    c->too_big = 413;
    return -1;
  }
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  (void)p;
  return HPE_PAUSED; /* one request at a time */
}

static const llhttp_settings_t *settings(void) {
  static llhttp_settings_t s;
  static bool init;

  if (!init) {
    llhttp_settings_init(&s);
    s.on_message_begin = on_message_begin;
    s.on_url = on_url;
    s.on_header_field = on_header_field;
    s.on_header_value = on_header_value;
    s.on_headers_complete = on_headers_complete;
    s.on_body = on_body;
    s.on_message_complete = on_message_complete;
    init = true;
  }
  return &s;
}

/* An unparseable or oversized request: answer and close. */
static void bad_request(conn_t *c) {
  int st = c->too_big ? c->too_big : 400;
  const char *msg;

  c->keep_alive = false;
  c->proto = AL_MOCKLLM_PROTO_NONE;
  c->phase = P_DONE;
  if (c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
  }
  switch (st) {
    case 413:
      msg = "Request exceeds the maximum allowed number of bytes.";
      break;
    case 414:
      msg = "Request URI too long.";
      break;
    case 431:
      msg = "Request header fields too large.";
      break;
    default:
      msg = llhttp_get_error_reason(&c->parser) ? llhttp_get_error_reason(
                                                      &c->parser)
                                                : "Malformed HTTP request";
      break;
  }
  snprintf(c->reqid, sizeof(c->reqid), "req_mockerror");
  respond_error(c, st, st == 413 ? "request_too_large"
                                 : "invalid_request_error",
                msg, NULL, NULL, NULL);
}

typedef enum { PARSE_MORE, PARSE_COMPLETE, PARSE_ERROR } parse_t;

/* Feeds data to the parser; *used gets the bytes consumed. The caller
 * stashes the rest before dispatching, so that a response which finishes
 * synchronously never sees the bytes of the request it answers. */
static parse_t parse(conn_t *c, const char *data, size_t len, size_t *used) {
  llhttp_errno_t e = llhttp_execute(&c->parser, data, len);

  *used = len;
  if (e == HPE_OK) {
    return PARSE_MORE;
  }
  if (e == HPE_PAUSED) {
    *used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
    return PARSE_COMPLETE;
  }
  return PARSE_ERROR;
}

/* Parses what waits in c->in (pipelined bytes). */
static void feed_in(conn_t *c) {
  size_t used;
  parse_t st;

  if (c->closing || c->phase != P_READ || c->in.len == 0) {
    return;
  }
  st = parse(c, c->in.data, c->in.len, &used);
  al_buf_consume(&c->in, AL_MIN(used, c->in.len));
  if (st == PARSE_COMPLETE) {
    dispatch(c);
  } else if (st == PARSE_ERROR) {
    bad_request(c);
  }
}

/* ---- connections ---------------------------------------------------------------------- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;

  (void)suggested;
  /* One shared buffer: reads are consumed (copied or parsed) at once. */
  *buf = uv_buf_init(c->srv->rbuf, sizeof(c->srv->rbuf));
}

/* Request bytes (plaintext, decrypted when TLS): parsed now when no
 * response is playing, else kept for later (pipelining). Returns false
 * once the connection is closing. */
static bool on_plain(void *arg, const char *data, size_t len) {
  conn_t *c = arg;
  size_t used;
  parse_t st;

  if (c->closing || c->phase == P_DRAIN) {
    return !c->closing;
  }
  if (c->phase != P_READ || c->in.len > 0) {
    if (al_buf_append(&c->in, data, len) != 0) {
      /* Too much pipelined input: the bytes cannot be kept, so this
       * connection ends after the current response. */
      uv_read_stop((uv_stream_t *)&c->tcp);
      c->reading = false;
      c->in_overflow = true;
      return false;
    }
    if (c->phase == P_READ && c->why == T_NONE) {
      feed_in(c);
    }
    return !c->closing;
  }
  st = parse(c, data, len, &used);
  if (st == PARSE_COMPLETE) {
    if (used < len && al_buf_append(&c->in, data + used, len - used) != 0) {
      uv_read_stop((uv_stream_t *)&c->tcp);
      c->reading = false;
      c->in_overflow = true;
    }
    dispatch(c);
  } else if (st == PARSE_ERROR) {
    bad_request(c);
  }
  return !c->closing;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;

  if (c->closing) {
    return;
  }
  if (nread < 0) {
    /* EOF or error: the client is gone (a half-close mid-stream ends the
     * stream too; real servers do the same). */
    conn_close(c, false);
    return;
  }
  if (nread == 0 || c->phase == P_DRAIN) {
    return;
  }
  if (c->tls == NULL) {
    (void)on_plain(c, buf->base, (size_t)nread);
    return;
  }
  if (al__mock_tls_feed(c->tls, buf->base, (size_t)nread, &c->hs, on_plain,
                        c) != 0) {
    /* A failed handshake's alert, if any, is lost with the connection. */
    conn_close(c, false);
    return;
  }
  if (!c->closing && !c->writing && c->hs.len > 0) {
    (void)tls_write(c, 0); /* handshake records */
  }
}

static void conn_free(conn_t *c) {
  al_mockllm_t *m = c->srv;

  al_list_remove(&c->node);
  if (c->playing) {
    m->playing--;
  }
  m->stats.connections_active--;
  al_buf_free(&c->url);
  al_buf_free(&c->hdrs);
  al_buf_free(&c->body);
  al_buf_free(&c->in);
  al_buf_free(&c->out);
  al_buf_free(&c->tout);
  al_buf_free(&c->hs);
  al__mock_tls_conn_free(c->tls);
  al_free(c);
  if (m->closing) {
    srv_maybe_done(m);
  }
}

static void conn_close_cb(uv_handle_t *h) {
  conn_t *c = h->data;

  if (--c->handles == 0) {
    conn_free(c);
  }
}

static void shutdown_cb(uv_shutdown_t *req, int status) {
  conn_t *c = req->data;

  if (status < 0 && !c->closing) {
    conn_close(c, false);
  }
}

static void conn_close(conn_t *c, bool reset) {
  if (c->closing) {
    return;
  }
  c->closing = true;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, conn_close_cb);
  if (reset) {
    if (uv_tcp_close_reset(&c->tcp, conn_close_cb) != 0) {
      uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
    }
  } else {
    uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
  }
}

/* Graceful end (lingering close): FIN after everything written, then
 * discard input until the client's EOF, so that closing with unread bytes
 * (a refused 413 body) does not turn into an RST that could destroy the
 * answer before the client read it. Bounded by a timer. */
static void conn_end(conn_t *c) {
  if (c->closing) {
    return;
  }
  c->phase = P_DRAIN;
  if (c->tls != NULL && !c->writing) {
    /* The session ends before the TCP stream does; the write is queued
     * ahead of the shutdown. */
    al__mock_tls_close_notify(c->tls, &c->hs);
    (void)tls_write(c, 0);
    if (c->closing) {
      return;
    }
  }
  c->sreq.data = c;
  if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, shutdown_cb) != 0) {
    conn_close(c, false);
    return;
  }
  if (!c->reading &&
      uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) == 0) {
    c->reading = true;
  }
  start_timer(c, T_DRAIN, AL__MOCK_DRAIN_MS);
}

static void on_connection(uv_stream_t *server, int status) {
  al_mockllm_t *m = AL_CONTAINER_OF(server, al_mockllm_t, listener);
  conn_t *c;

  if (status < 0 || m->closing) {
    return;
  }
  c = al_calloc(1, sizeof(*c));
  if (c == NULL) {
    return;
  }
  c->srv = m;
  uv_tcp_init(m->loop, &c->tcp);
  uv_timer_init(m->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->handles = 2;
  al_list_insert_tail(&m->conns, &c->node);
  m->stats.connections_active++;
  al_buf_init(&c->url, AL__MOCK_MAX_URL);
  al_buf_init(&c->hdrs, m->max_hdr);
  al_buf_init(&c->body, m->max_body);
  al_buf_init(&c->in, m->max_hdr + AL__MOCK_RBUF);
  al_buf_init(&c->out, (size_t)1 << 30);
  al_buf_init(&c->tout, (size_t)1 << 30);
  al_buf_init(&c->hs, (size_t)1 << 30);
  if (m->tls != NULL && (c->tls = al__mock_tls_conn_new(m->tls)) == NULL) {
    conn_close(c, false);
    return;
  }
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c, false);
    return;
  }
  m->stats.connections_accepted++;
  uv_tcp_nodelay(&c->tcp, 1);
  llhttp_init(&c->parser, HTTP_REQUEST, settings());
  c->parser.data = c;
  if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) != 0) {
    conn_close(c, false);
    return;
  }
  c->reading = true;
}

/* ---- server lifetime -------------------------------------------------------------------- */

void al_mockllm_options_init(al_mockllm_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->host = "127.0.0.1";
  o->validate = true;
  o->max_header_bytes = AL__MOCK_MAX_HEADER_BYTES;
  o->max_body_bytes = AL__MOCK_MAX_BODY_BYTES;
}

static bool is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    static const unsigned char lo[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 1};
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;

    return memcmp(&a->sin6_addr, lo, 16) == 0;
  }
  return false;
}

static void errf(const al_mockllm_options_t *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void errf(const al_mockllm_options_t *o, const char *fmt, ...) {
  va_list ap;

  if (o->err == NULL || o->err_len == 0) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(o->err, o->err_len, fmt, ap);
  va_end(ap);
}

static void early_close_cb(uv_handle_t *h) {
  al_mockllm_t *m = h->data;

  al__mock_tls_free(m->tls);
  al_mockllm_scenario_free(m->scn);
  al_free(m);
}

int al_mockllm_new(uv_loop_t *loop, const al_mockllm_options_t *o,
                   al_mockllm_t **out) {
  al_mockllm_t *m;
  struct sockaddr_storage ss;
  struct sockaddr_storage bound;
  int namelen = sizeof(bound);
  const char *host = o->host ? o->host : "127.0.0.1";
  al_mockllm_scenario_t *scn = NULL;
  al__mock_tls_t *tls = NULL;
  int given = (o->scenario != NULL) + (o->scenario_yaml != NULL) +
              (o->scenario_path != NULL);
  int err;

  *out = NULL;
  if (o->err != NULL && o->err_len > 0) {
    o->err[0] = '\0';
  }
  if (given > 1) {
    errf(o, "give one of scenario, scenario_yaml, scenario_path");
    return AL_EINVAL;
  }
  if (uv_ip4_addr(host, o->port, (struct sockaddr_in *)&ss) != 0 &&
      uv_ip6_addr(host, o->port, (struct sockaddr_in6 *)&ss) != 0) {
    errf(o, "%s: not an IP address", host);
    return AL_EINVAL;
  }
  if (o->port < 0 || o->port > 65535) {
    errf(o, "port %d out of range", o->port);
    return AL_EINVAL;
  }
  if (!o->allow_remote && !is_loopback((struct sockaddr *)&ss)) {
    errf(o, "%s is not a loopback address (allow_remote to override)", host);
    return AL_EINVAL;
  }
  if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
    errf(o, "TLS needs both tls_cert and tls_key");
    return AL_EINVAL;
  }
  if (o->tls_cert != NULL) {
    err = al__mock_tls_new(o->tls_cert, o->tls_key, &tls, o->err, o->err_len);
    if (err != 0) {
      return err;
    }
  }
  if (o->scenario_yaml != NULL) {
    err = al_mockllm_load_scenario_string(o->scenario_yaml,
                                          strlen(o->scenario_yaml),
                                          "<scenario>", &scn, o->err,
                                          o->err_len);
  } else if (o->scenario_path != NULL) {
    err = al_mockllm_load_scenario_file(o->scenario_path, &scn, o->err,
                                        o->err_len);
  } else if (o->scenario == NULL) {
    err = al__mockllm_default_scenario(&scn);
  } else {
    err = 0;
  }
  if (err != 0) {
    al__mock_tls_free(tls);
    return err;
  }
  m = al_calloc(1, sizeof(*m));
  if (m == NULL) {
    if (scn != NULL) {
      al_mockllm_scenario_free(scn);
    }
    al__mock_tls_free(tls);
    return AL_ENOMEM;
  }
  m->loop = loop;
  m->tls = tls;
  al_list_init(&m->conns);
  m->scn = scn;
  m->validate = o->validate;
  m->require_api_key = o->require_api_key;
  m->record = o->record;
  m->max_hdr = o->max_header_bytes ? o->max_header_bytes
                                   : AL__MOCK_MAX_HEADER_BYTES;
  m->max_body = o->max_body_bytes ? o->max_body_bytes
                                  : AL__MOCK_MAX_BODY_BYTES;
  al_buf_init(&m->prev_body, AL__MOCK_MAX_BODY_BYTES);
  al_buf_init(&m->fq, AL__MOCK_RECORD_QUEUE);
  al_buf_init(&m->fw, AL__MOCK_RECORD_QUEUE);
  m->fd = -1;
  uv_tcp_init(loop, &m->listener);
  m->listener.data = m;
  err = uv_tcp_bind(&m->listener, (struct sockaddr *)&ss, 0);
  if (err == 0) {
    err = uv_listen((uv_stream_t *)&m->listener, 1024, on_connection);
  }
  if (err == 0) {
    err = uv_tcp_getsockname(&m->listener, (struct sockaddr *)&bound,
                             &namelen);
  }
  if (err != 0) {
    errf(o, "cannot listen on %s:%d: %s", host, o->port, uv_strerror(err));
    /* The caller keeps a scenario it passed in. */
    if (o->scenario != NULL) {
      m->scn = NULL;
    }
    uv_close((uv_handle_t *)&m->listener, early_close_cb);
    return err;
  }
  m->port = ntohs(bound.ss_family == AF_INET6
                      ? ((struct sockaddr_in6 *)&bound)->sin6_port
                      : ((struct sockaddr_in *)&bound)->sin_port);
  if (o->scenario != NULL) {
    m->scn = o->scenario;
  }
  m->timestamps = o->timestamps || m->scn->timestamps;
  if (o->record_path != NULL) {
    m->rec_file = true;
    err = uv_fs_open(loop, &m->fs_req, o->record_path,
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644,
                     fs_open_cb);
    if (err == 0) {
      m->fs_busy = true;
    } else {
      al_log(AL_LOG_WARN, "mockllm: cannot open %s: %s", o->record_path,
             uv_strerror(err));
      m->fd_failed = true;
    }
  }
  *out = m;
  return 0;
}

int al_mockllm_port(const al_mockllm_t *m) { return m->port; }

static void srv_free(al_mockllm_t *m) {
  al_mockllm_record_clear(m);
  al_free(m->recs);
  al_free(m->last_error);
  al_buf_free(&m->fq);
  al_buf_free(&m->prev_body);
  al_buf_free(&m->fw);
  al__mock_tls_free(m->tls);
  al_mockllm_scenario_free(m->scn);
  al_free(m);
}

static void srv_maybe_done(al_mockllm_t *m) {
  void (*cb)(al_mockllm_t *);

  if (!m->closing || m->pending > 0 || !al_list_empty(&m->conns) ||
      m->fs_busy || m->fd_open) {
    return;
  }
  cb = m->close_cb;
  if (cb != NULL) {
    cb(m);
  }
  srv_free(m);
}

static void listener_close_cb(uv_handle_t *h) {
  al_mockllm_t *m = h->data;

  m->pending--;
  srv_maybe_done(m);
}

void al_mockllm_close(al_mockllm_t *m, void (*cb)(al_mockllm_t *m)) {
  al_list_t *pos;
  al_list_t *next;

  if (m->closing) {
    return;
  }
  m->closing = true;
  m->close_cb = cb;
  m->pending = 1;
  uv_close((uv_handle_t *)&m->listener, listener_close_cb);
  for (pos = m->conns.next; pos != &m->conns; pos = next) {
    conn_t *c = AL_CONTAINER_OF(pos, conn_t, node);

    next = pos->next;
    conn_close(c, false);
  }
  fs_kick(m);
}

int al_mockllm_set_scenario(al_mockllm_t *m, al_mockllm_scenario_t *s) {
  if (m->playing > 0) {
    return AL_EBUSY;
  }
  al_mockllm_scenario_free(m->scn);
  m->scn = s;
  al_mockllm_rewind(m);
  return 0;
}

void al_mockllm_rewind(al_mockllm_t *m) {
  size_t i;

  m->cursor = 0;
  for (i = 0; i < m->scn->ntracks; i++) {
    m->scn->tracks[i].cursor = 0;
  }
}

void al_mockllm_set_data(al_mockllm_t *m, void *data) { m->data = data; }
void *al_mockllm_get_data(const al_mockllm_t *m) { return m->data; }

void al_mockllm_stats(const al_mockllm_t *m, al_mockllm_stats_t *out) {
  *out = m->stats;
}

size_t al_mockllm_record_count(const al_mockllm_t *m) { return m->nrecs; }

const al_mockllm_record_t *al_mockllm_record_get(const al_mockllm_t *m,
                                                 size_t i) {
  return i < m->nrecs ? &m->recs[i] : NULL;
}

void al_mockllm_record_clear(al_mockllm_t *m) {
  size_t i;

  for (i = 0; i < m->nrecs; i++) {
    record_free(&m->recs[i]);
  }
  m->nrecs = 0;
}

const char *al_mockllm_last_error(const al_mockllm_t *m) {
  return m->last_error;
}
