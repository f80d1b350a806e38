/* Transport inputs found by fuzz_http_response, kept as tests. */
#include "agentloop/agentloop.h"
#include "test.h"
#include "transport/transport.h"
#include "unit/transport/trec.h"
#include "unit/transport/tsrv.h"

static void h_101(tsrv_conn_t *c) {
  tsrv_writes(c, "HTTP/1.1 101 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                 "Content-Length: 2\r\n\r\nok");
}

/* A 101 to a request without Upgrade: an error, and on_response (which
 * promises a final status >= 200) is not called with it. */
TEST_IMPL(transport_unsolicited_101_is_error) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  al_http_client_t *c;
  rec_t r;
  char url[128];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_101;
  tsrv_start(&srv, &loop, &so);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", srv.port);
  ASSERT_EQ(rec_get(c, &r, url), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_EHTTP);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_HTTP_PARSE);
  ASSERT_EQ(r.nresp, 0);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
