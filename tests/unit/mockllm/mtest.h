/* Test helpers for the mockllm tests: a small raw uv_tcp HTTP client (llhttp
 * in response mode; it does not use the project's transport on purpose), a
 * server fixture, and a minimal SSE splitter for the server's own output.
 *
 * The client sends its requests one after another on one connection (the
 * next when the previous response completed), keeps every response's
 * status, headers and de-chunked body, and closes when all are answered, on
 * EOF/error, when on_body says stop, or when its optional timer fires. When
 * it closes it also closes the server it was given, so uv_run returns. */
#ifndef AL_MTEST_H
#define AL_MTEST_H

#include <llhttp.h>

#include "common/common.h"
#include "mockllm/mockllm.h"
#include "test.h"

#define MT_MAX_RESP 8

typedef struct mt_client_s mt_client_t;

struct mt_client_s {
  uv_loop_t *loop;
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_write_t wreq;
  uv_timer_t timer;
  llhttp_t parser;
  llhttp_settings_t settings;
  /* input */
  char *reqs[MT_MAX_RESP]; /* owned (malloc'd) */
  size_t nreqs;
  bool send_all_at_once;   /* pipelining: one write with every request */
  uint64_t timer_ms;       /* > 0: close this long after the first headers */
  bool (*on_body)(mt_client_t *c); /* true = close now */
  al_mockllm_t *server;    /* closed when the client is done */
  void (*on_close)(mt_client_t *c); /* after both handles closed */
  void *data;
  /* output */
  size_t next_req;
  size_t nheaders;  /* responses whose headers arrived */
  size_t ncomplete; /* responses complete */
  int status[MT_MAX_RESP];
  al_buf_t head[MT_MAX_RESP]; /* "name: value\n", names lower-cased */
  al_buf_t body[MT_MAX_RESP];
  size_t nreads;
  size_t max_read;
  uint64_t raw_bytes;
  int read_err;      /* 0, UV_EOF, UV_ECONNRESET, ... */
  int parse_err;
  bool timer_fired;
  size_t body_at_timer;
  int handles;
  int hstate;
  bool closing;
  al_mockllm_stats_t stats; /* the server's, taken before closing it */
};

void mt_client_init(mt_client_t *c);
/* Adds a request (copied). */
void mt_client_add(mt_client_t *c, const char *raw);
void mt_client_start(mt_client_t *c, uv_loop_t *loop, int port);
/* Frees the buffers (after the loop ran). */
void mt_client_free(mt_client_t *c);
/* The value of a response header, or NULL (static buffer). */
const char *mt_header(const mt_client_t *c, size_t i, const char *name);

/* A request with content-length. extra_headers: "Name: v\r\n..." or NULL. */
char *mt_request(const char *method, const char *path,
                 const char *extra_headers, const char *body);
/* Anthropic / OpenAI POSTs with valid auth headers. */
char *mt_anthropic(const char *body);
char *mt_openai(const char *body);
extern const char mt_simple_anthropic[]; /* a minimal valid streaming body */
extern const char mt_simple_openai[];

/* Starts a server on port 0 with the YAML scenario (NULL = default). */
al_mockllm_t *mt_server(uv_loop_t *loop, const char *yaml, bool record);

/* Runs one client with one request against a fresh server on a private
 * loop; the result is left in *c (call mt_client_free). */
void mt_run_one(const char *yaml, const char *request, mt_client_t *c);

/* SSE events of a body produced by the server. */
typedef struct {
  char name[64];  /* "" when the event has no event: line */
  char *data;     /* malloc'd */
  bool has_id;
  uint64_t id;
  bool comment;   /* a ": ..." line only */
} mt_event_t;

/* Splits body into at most max events; returns the count. */
size_t mt_sse(const char *body, size_t len, mt_event_t *ev, size_t max);
void mt_sse_free(mt_event_t *ev, size_t n);

#endif
