/* Recording client for the transport tests (trec.h). */
#include "unit/transport/trec.h"

#include "unit/transport/tsrv.h"

void rec_init(rec_t *r) {
  memset(r, 0, sizeof(*r));
  r->status = 1; /* "not completed" */
  r->retry_after_ms = -2;
  r->should_retry = -2;
}

static void copy(char *dst, size_t cap, const char *s) {
  snprintf(dst, cap, "%s", s != NULL ? s : "");
}

static void on_response(al_http_request_t *req, int code,
                        const al_http_headers_t *h) {
  rec_t *r = al_http_request_get_data(req);
  const al_http_header_t *x = al_http_headers_get(h, "X-Test");

  ASSERT(!r->in_api);
  ASSERT_EQ(r->ncomplete, 0);
  ASSERT_EQ(r->nresp, 0);
  ASSERT_EQ(r->ndata, 0);
  ASSERT(req == r->req);
  r->nresp++;
  r->code = code;
  if (x != NULL) {
    ASSERT_EQ(strlen(x->value), x->value_len);
    copy(r->hdr_x, sizeof(r->hdr_x), x->value);
  }
  if (r->cancel_in_response) {
    r->in_api = true;
    al_http_request_cancel(req);
    r->in_api = false;
  }
}

static void on_data(al_http_request_t *req, const char *p, size_t n) {
  rec_t *r = al_http_request_get_data(req);

  ASSERT(!r->in_api);
  ASSERT_EQ(r->ncomplete, 0);
  ASSERT_EQ(r->nresp, 1);
  ASSERT(n > 0);
  r->ndata++;
  ASSERT(r->body_len + n <= sizeof(r->body));
  memcpy(r->body + r->body_len, p, n);
  r->body_len += n;
  if (r->ndata <= r->progress_until) {
    al_http_request_progress(req);
  }
  if (r->cancel_at_data > 0 && r->ndata == r->cancel_at_data) {
    r->in_api = true;
    al_http_request_cancel(req);
    r->in_api = false;
  }
}

static void on_complete(al_http_request_t *req, int status,
                        const al_http_error_t *e) {
  rec_t *r = al_http_request_get_data(req);

  ASSERT(!r->in_api);
  ASSERT_EQ(r->ncomplete, 0);
  r->ncomplete++;
  r->status = status;
  if (status == 0) {
    ASSERT_NULL(e);
  } else {
    ASSERT_NOT_NULL(e);
    ASSERT_EQ(e->code, status);
    ASSERT_NOT_NULL(e->message);
    r->kind = e->kind;
    r->http_status = e->http_status;
    copy(r->msg, sizeof(r->msg), e->message);
    r->has_detail = e->detail != NULL;
    copy(r->detail, sizeof(r->detail), e->detail);
    copy(r->api_type, sizeof(r->api_type), e->api_type);
    copy(r->api_message, sizeof(r->api_message), e->api_message);
    copy(r->api_code, sizeof(r->api_code), e->api_code);
    copy(r->request_id, sizeof(r->request_id), e->request_id);
    r->err_body_len = e->body_len < sizeof(r->err_body) - 1 ? e->body_len : sizeof(r->err_body) - 1;
    if (e->body != NULL) {
      memcpy(r->err_body, e->body, r->err_body_len);
    }
    r->body_truncated = e->body_truncated;
    r->retry_after_ms = e->retry_after_ms;
    r->should_retry = e->should_retry;
  }
  /* Cancel after completion has started is a harmless no-op. */
  r->in_api = true;
  al_http_request_cancel(req);
  r->in_api = false;
  if (r->then != NULL) {
    r->then(r);
  }
}

int rec_start(al_http_client_t *c, rec_t *r, al_http_request_options_t *o) {
  int err;

  o->on_response = on_response;
  o->on_data = on_data;
  o->on_complete = on_complete;
  o->data = r;
  r->in_api = true;
  err = al_http_request_start(c, o, &r->req);
  r->in_api = false;
  return err;
}

int rec_get(al_http_client_t *c, rec_t *r, const char *url) {
  al_http_request_options_t o;

  al_http_request_options_init(&o);
  o.url = url;
  return rec_start(c, r, &o);
}

al_http_client_t *rec_client(uv_loop_t *loop, al_http_client_options_t *o) {
  al_http_client_options_t d;
  al_http_client_t *c = NULL;

  if (o == NULL) {
    al_http_client_options_init(&d);
    o = &d;
  }
  if (o->ca_file == NULL) {
    o->ca_file = tsrv_cert_path("ca.crt");
  }
  o->proxy_from_env = false;
  ASSERT_EQ(al_http_client_new(loop, o, &c), 0);
  ASSERT_NOT_NULL(c);
  return c;
}

static int closed_count;

static void closed_cb(al_http_client_t *c) {
  (void)c;
  closed_count++;
}

void rec_client_close(al_http_client_t *c) {
  int before = closed_count;

  al_http_client_close(c, closed_cb);
  /* The close callback never runs inside the call. */
  ASSERT_EQ(closed_count, before);
}
