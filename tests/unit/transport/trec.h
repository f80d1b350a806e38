/* A recording client for the transport tests: counts every callback,
 * checks their order (response before data, nothing after completion,
 * nothing during an API call) and copies what on_complete reports. */
#ifndef AL_TEST_TREC_H
#define AL_TEST_TREC_H

#include "test.h"
#include "transport/transport.h"

typedef struct rec_s rec_t;

struct rec_s {
  int nresp;
  int ndata;
  int ncomplete;
  int code; /* from on_response */
  char hdr_x[128]; /* x-test header seen in on_response */
  char body[300000];
  size_t body_len;
  /* on_complete */
  int status;
  al_http_error_kind_t kind;
  int http_status;
  char msg[256];
  char detail[256];
  bool has_detail;
  char api_type[128];
  char api_message[256];
  char api_code[64];
  char request_id[128];
  char err_body[4096];
  size_t err_body_len;
  bool body_truncated;
  int64_t retry_after_ms;
  int should_retry;
  /* behaviour */
  int cancel_at_data;     /* cancel inside on_data when ndata reaches it */
  bool cancel_in_response;
  int progress_until;     /* call progress in on_data while ndata <= it */
  void (*then)(rec_t *r); /* from on_complete */
  /* bookkeeping */
  bool in_api;
  al_http_request_t *req;
  void *ctx;
};

void rec_init(rec_t *r);
/* Starts a request with r's callbacks; returns al_http_request_start's
 * result with in_api set around the call. */
int rec_start(al_http_client_t *c, rec_t *r, al_http_request_options_t *o);
/* GET url with short test timeouts. */
int rec_get(al_http_client_t *c, rec_t *r, const char *url);
/* A client with the test CA, no env proxies, short timeouts. */
al_http_client_t *rec_client(uv_loop_t *loop, al_http_client_options_t *o);
void rec_client_close(al_http_client_t *c);

#endif
