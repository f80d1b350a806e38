/* Transport tests over TLS against the in-process mbedtls server with the
 * test CA (tests/certs): happy path by name and by IP literal, keep-alive
 * reuse and the dead-connection retry over TLS, unknown CA, wrong host, a
 * missing CA bundle, and HTTPS through the in-process CONNECT proxy. */
#include "agentloop/agentloop.h"
#include "common/common.h"
#include "test.h"
#include "transport/transport.h"
#include "unit/transport/trec.h"
#include "unit/transport/tsrv.h"

static char url_buf[256];

static const char *surl(const tsrv_t *s, const char *host, const char *path) {
  snprintf(url_buf, sizeof(url_buf), "https://%s:%d%s", host, s->port, path);
  return url_buf;
}

static void h_tls(tsrv_conn_t *c) {
  if (strcmp(c->url, "/die-on-second") == 0 && c->nreq == 2) {
    tsrv_abort(c);
    return;
  }
  if (strcmp(c->url, "/chunked") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                   "X-Test: tls\r\n\r\n4\r\nsecu\r\n3\r\nred\r\n0\r\n\r\n");
    return;
  }
  if (strcmp(c->url, "/close") == 0) {
    tsrv_writes(c, "HTTP/1.1 200 OK\r\nX-Test: tls\r\n\r\nuntil-close");
    tsrv_end(c); /* close_notify, then FIN */
    return;
  }
  tsrv_writes(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX-Test: tls\r\n"
                 "\r\nsecured");
}

static void start_tls_server(tsrv_t *srv, uv_loop_t *loop, const char *name) {
  tsrv_opts_t so = {0};
  char crt[64], key[64];

  snprintf(crt, sizeof(crt), "%s.crt", name);
  snprintf(key, sizeof(key), "%s.key", name);
  so.cert = crt;
  so.key = key;
  so.on_request = h_tls;
  tsrv_start(srv, loop, &so);
}

TEST_IMPL(transport_https_ok) {
  uv_loop_t loop;
  tsrv_t srv;
  al_http_client_t *c;
  rec_t r;
  al_http_client_stats_t st;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  start_tls_server(&srv, &loop, "server");
  c = rec_client(&loop, NULL);

  /* By name: SNI + dNSName check; the CA loads in the threadpool first. */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, 0);
  ASSERT_STR_EQ(r.hdr_x, "tls");
  ASSERT_MEM_EQ(r.body, r.body_len, "secured", 7);

  /* Reused over TLS (same origin, pooled connection). */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/chunked")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "secured", 7);
  ASSERT_EQ(srv.accepts, 1);

  /* Close-delimited over TLS: close_notify ends the body. */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/close")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "until-close", 11);

  /* By IP literal: no SNI, iPAddress SAN checked by our verify hook. */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "127.0.0.1", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "secured", 7);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.connects, 2); /* localhost, then 127.0.0.1 (another origin) */
  ASSERT_EQ(st.reuses, 2);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

typedef struct {
  al_http_client_t *c;
  tsrv_t *srv;
  rec_t *next;
} chain_t;

static void start_second(rec_t *prev) {
  chain_t *ch = prev->ctx;

  ASSERT_EQ(rec_get(ch->c, ch->next,
                    surl(ch->srv, "localhost", "/die-on-second")),
            0);
}

TEST_IMPL(transport_https_reused_conn_retry) {
  uv_loop_t loop;
  tsrv_t srv;
  al_http_client_t *c;
  rec_t r1, r2;
  chain_t ch;
  al_http_client_stats_t st;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  start_tls_server(&srv, &loop, "server");
  c = rec_client(&loop, NULL);
  rec_init(&r1);
  rec_init(&r2);
  ch.c = c;
  ch.srv = &srv;
  ch.next = &r2;
  r1.ctx = &ch;
  r1.then = start_second;
  ASSERT_EQ(rec_get(c, &r1, surl(&srv, "localhost", "/die-on-second")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.status, 0);
  ASSERT_EQ(r2.ncomplete, 1);
  ASSERT_EQ(r2.status, 0);
  ASSERT_MEM_EQ(r2.body, r2.body_len, "secured", 7);
  ASSERT_EQ(srv.accepts, 2);
  al_http_client_stats(c, &st);
  ASSERT_EQ(st.retries, 1);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

static void expect_cert_failure(const char *server_cert, const char *host,
                                const char *why) {
  uv_loop_t loop;
  tsrv_t srv;
  al_http_client_t *c;
  rec_t r;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  start_tls_server(&srv, &loop, server_cert);
  c = rec_client(&loop, NULL);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, host, "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_ECERT);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_TLS);
  ASSERT_EQ(r.nresp, 0);
  ASSERT(r.has_detail); /* mbedtls' reason, as text only */
  /* The message says it was verification, and why (issue 15). */
  if (strstr(r.msg, "certificate verification failed") == NULL ||
      strstr(r.msg, why) == NULL) {
    AL_TEST_FAIL("want '%s' in: %s", why, r.msg);
  }
  ASSERT_EQ(srv.requests, 0); /* nothing was sent over the bad channel */
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
}

TEST_IMPL(transport_https_unknown_ca) {
  expect_cert_failure("unknown", "localhost", "unknown CA");
  expect_cert_failure("unknown", "127.0.0.1", "unknown CA");
  return 0;
}

TEST_IMPL(transport_https_wrong_host) {
  /* Signed by the trusted CA, but for wrong.example.com. */
  expect_cert_failure("wronghost", "localhost", "name mismatch");
  expect_cert_failure("wronghost", "127.0.0.1", "name mismatch");
  return 0;
}

TEST_IMPL(transport_https_expired) {
  /* Signed by the trusted CA for localhost, valid only in 2020. */
  expect_cert_failure("expired", "localhost", "expired");
  return 0;
}

TEST_IMPL(transport_https_ca_missing) {
  uv_loop_t loop;
  tsrv_t srv;
  al_http_client_t *c;
  al_http_client_options_t o;
  rec_t r1, r2;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  start_tls_server(&srv, &loop, "server");
  al_http_client_options_init(&o);
  o.ca_file = "/nonexistent/ca.pem";
  c = rec_client(&loop, &o);
  rec_init(&r1);
  rec_init(&r2);
  /* Both queue behind the CA load and both fail closed. */
  ASSERT_EQ(rec_get(c, &r1, surl(&srv, "localhost", "/")), 0);
  ASSERT_EQ(rec_get(c, &r2, surl(&srv, "localhost", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r1.ncomplete, 1);
  ASSERT_EQ(r1.status, AL_ETLS);
  ASSERT_EQ(r1.kind, AL_HTTP_ERR_TLS);
  ASSERT_NOT_NULL(strstr(r1.msg, "/nonexistent/ca.pem"));
  ASSERT_EQ(r2.status, AL_ETLS);
  ASSERT_EQ(srv.accepts, 0);
  rec_client_close(c);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}

TEST_IMPL(transport_proxy_tunnel) {
  uv_loop_t loop;
  tsrv_t srv;
  tproxy_t px;
  al_http_client_t *c;
  al_http_client_options_t o;
  rec_t r;
  char proxy_url[128];
  char expect[64];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  start_tls_server(&srv, &loop, "server");
  tproxy_start(&px, &loop);
  snprintf(proxy_url, sizeof(proxy_url), "http://user:p%%40ss@127.0.0.1:%d",
           px.port);

  /* 1. HTTPS through the proxy (loopback bypass overridden for the test). */
  al_http_client_options_init(&o);
  o.https_proxy = proxy_url;
  o.proxy_loopback = true;
  c = rec_client(&loop, &o);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, 0);
  ASSERT_MEM_EQ(r.body, r.body_len, "secured", 7);
  ASSERT_EQ(px.connects, 1);
  snprintf(expect, sizeof(expect), "localhost:%d", srv.port);
  ASSERT_STR_EQ(px.last_target, expect);
  /* user:p@ss, percent-decoded, in Basic form. */
  ASSERT_NOT_NULL(strstr(px.last_head, "Proxy-Authorization: Basic "
                                       "dXNlcjpwQHNz\r\n"));
  /* The tunnelled connection is pooled under the proxy origin. */
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(px.connects, 1);
  ASSERT_EQ(srv.accepts, 1);
  rec_client_close(c);
  uv_run(&loop, UV_RUN_DEFAULT);

  /* 2. NO_PROXY matching the host: straight to the server. */
  o.no_proxy = "example.com, .localhost,localhost";
  c = rec_client(&loop, &o);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(px.connects, 1);
  ASSERT_EQ(srv.accepts, 2);
  rec_client_close(c);
  uv_run(&loop, UV_RUN_DEFAULT);

  /* 3. Without the override, loopback is never proxied. */
  o.no_proxy = NULL;
  o.proxy_loopback = false;
  c = rec_client(&loop, &o);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "127.0.0.1", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(px.connects, 1);
  ASSERT_EQ(srv.accepts, 3);
  rec_client_close(c);
  uv_run(&loop, UV_RUN_DEFAULT);

  /* 4. A proxy that refuses the tunnel: AL_EPROXY, kind proxy. */
  px.refuse_status = 403;
  o.proxy_loopback = true;
  c = rec_client(&loop, &o);
  rec_init(&r);
  ASSERT_EQ(rec_get(c, &r, surl(&srv, "localhost", "/")), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(r.ncomplete, 1);
  ASSERT_EQ(r.status, AL_EPROXY);
  ASSERT_EQ(r.kind, AL_HTTP_ERR_PROXY);
  ASSERT_NOT_NULL(strstr(r.msg, "403"));
  ASSERT_EQ(px.connects, 2);
  ASSERT_EQ(srv.accepts, 3);
  rec_client_close(c);
  tsrv_close(&srv);
  tproxy_close(&px);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
