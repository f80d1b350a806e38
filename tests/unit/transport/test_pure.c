/* Transport pure helpers (no loop): URL parsing, NO_PROXY matching,
 * retry-after parsing, provider error bodies, status classification; and
 * the allocation-failure sweep over a plain-HTTP request. */
#include "agentloop/agentloop.h"
#include "common/common.h"
#include "test.h"
#include "transport/transport.h"
#include "transport/transport_int.h"
#include "unit/transport/trec.h"
#include "unit/transport/tsrv.h"

TEST_IMPL(transport_url_parse) {
  al__transport_url_t u;

  ASSERT_EQ(al__transport_url_parse("https://API.example.com/v1/messages?x=1#f",
                                    false, &u),
            0);
  ASSERT(u.https);
  ASSERT_STR_EQ(u.host, "api.example.com");
  ASSERT_EQ(u.port, 443);
  ASSERT_STR_EQ(u.target, "/v1/messages?x=1");
  ASSERT(!u.host_is_ip);
  al__transport_url_free(&u);

  ASSERT_EQ(al__transport_url_parse("http://[::1]:8080", false, &u), 0);
  ASSERT_STR_EQ(u.host, "::1");
  ASSERT_EQ(u.port, 8080);
  ASSERT_STR_EQ(u.target, "/");
  ASSERT(u.host_is_ip);
  al__transport_url_free(&u);

  ASSERT_EQ(al__transport_url_parse("http://127.0.0.1?q", false, &u), 0);
  ASSERT_STR_EQ(u.target, "/?q");
  ASSERT_EQ(u.port, 80);
  ASSERT(u.host_is_ip);
  al__transport_url_free(&u);

  /* Proxies: bare host:port, credentials, curl's default port 1080. */
  ASSERT_EQ(al__transport_url_parse("u:p@w@proxy.local:3128", true, &u), 0);
  ASSERT_STR_EQ(u.userinfo, "u:p@w");
  ASSERT_STR_EQ(u.host, "proxy.local");
  ASSERT_EQ(u.port, 3128);
  al__transport_url_free(&u);
  ASSERT_EQ(al__transport_url_parse("http://proxy.local", true, &u), 0);
  ASSERT_EQ(u.port, 1080);
  al__transport_url_free(&u);

  ASSERT_EQ(al__transport_url_parse("ftp://x/", false, &u), AL_ENOTSUP);
  ASSERT_EQ(al__transport_url_parse("http://[::1/", false, &u), AL_EINVAL);
  ASSERT_EQ(al__transport_url_parse("http://[zz]/", false, &u), AL_EINVAL);
  ASSERT_EQ(al__transport_url_parse("http://h:0/", false, &u), AL_EINVAL);
  ASSERT_EQ(al__transport_url_parse("http://h:80x/", false, &u), AL_EINVAL);
  ASSERT_EQ(al__transport_url_parse("http://h\r\nX: y/", false, &u),
            AL_EINVAL);
  ASSERT_EQ(al__transport_url_parse("example.com", false, &u), AL_EINVAL);
  return 0;
}

TEST_IMPL(transport_no_proxy) {
  ASSERT(al__transport_no_proxy_match("*", "anything", 443));
  ASSERT(al__transport_no_proxy_match("example.com", "example.com", 443));
  ASSERT(al__transport_no_proxy_match("example.com", "api.example.com", 443));
  ASSERT(al__transport_no_proxy_match(".example.com", "api.example.com", 1));
  ASSERT(al__transport_no_proxy_match(" a.org , example.com", "x.EXAMPLE.com",
                                      1));
  ASSERT(!al__transport_no_proxy_match("example.com", "badexample.com", 443));
  ASSERT(!al__transport_no_proxy_match("example.com", "example.org", 443));
  ASSERT(al__transport_no_proxy_match("example.com:8443", "example.com",
                                      8443));
  ASSERT(!al__transport_no_proxy_match("example.com:8443", "example.com",
                                       443));
  ASSERT(al__transport_no_proxy_match("10.0.0.1,[::1]", "::1", 80));
  ASSERT(!al__transport_no_proxy_match("", "example.com", 443));
  ASSERT(!al__transport_no_proxy_match(NULL, "example.com", 443));

  ASSERT(al__transport_is_loopback("localhost"));
  ASSERT(al__transport_is_loopback("api.localhost"));
  ASSERT(al__transport_is_loopback("127.0.0.1"));
  ASSERT(al__transport_is_loopback("127.1.2.3"));
  ASSERT(al__transport_is_loopback("::1"));
  ASSERT(!al__transport_is_loopback("128.0.0.1"));
  ASSERT(!al__transport_is_loopback("example.com"));
  return 0;
}

TEST_IMPL(transport_retry_after) {
  /* Sun, 06 Nov 1994 08:49:37 GMT == 784111777 */
  const int64_t now = 784111777 - 30;

  ASSERT_EQ(al_http_parse_retry_after(NULL, NULL, now), -1);
  ASSERT_EQ(al_http_parse_retry_after(NULL, "7", now), 7000);
  ASSERT_EQ(al_http_parse_retry_after(NULL, " 0 ", now), 0);
  ASSERT_EQ(al_http_parse_retry_after(NULL, "1.5", now), 1500);
  ASSERT_EQ(al_http_parse_retry_after("250", "7", now), 250);
  ASSERT_EQ(al_http_parse_retry_after("12.7", NULL, now), 12);
  ASSERT_EQ(al_http_parse_retry_after("junk", "3", now), 3000);
  ASSERT_EQ(al_http_parse_retry_after(NULL, "-1", now), -1);
  ASSERT_EQ(al_http_parse_retry_after(NULL, "soon", now), -1);
  ASSERT_EQ(al_http_parse_retry_after(NULL, "Sun, 06 Nov 1994 08:49:37 GMT",
                                      now),
            30000);
  /* A date in the past means "now". */
  ASSERT_EQ(al_http_parse_retry_after(NULL, "Sun, 06 Nov 1994 08:49:37 GMT",
                                      now + 100),
            0);
  ASSERT_EQ(al_http_parse_retry_after(NULL, "Sun, 06 Foo 1994 08:49:37 GMT",
                                      now),
            -1);
  return 0;
}

TEST_IMPL(transport_error_body_parse) {
  char *t, *m, *c;
  static const char ant[] = "{\"type\":\"error\",\"error\":{\"type\":"
                            "\"overloaded_error\",\"message\":\"Overloaded\"}}";
  static const char oai[] = "{\"error\":{\"message\":\"Bad key\",\"type\":"
                            "\"invalid_request_error\",\"param\":null,"
                            "\"code\":401}}";

  al__transport_parse_error_body(ant, sizeof(ant) - 1, &t, &m, &c);
  ASSERT_STR_EQ(t, "overloaded_error");
  ASSERT_STR_EQ(m, "Overloaded");
  ASSERT_NULL(c);
  al_free(t);
  al_free(m);
  al__transport_parse_error_body(oai, sizeof(oai) - 1, &t, &m, &c);
  ASSERT_STR_EQ(t, "invalid_request_error");
  ASSERT_STR_EQ(m, "Bad key");
  ASSERT_STR_EQ(c, "401");
  al_free(t);
  al_free(m);
  al_free(c);
  al__transport_parse_error_body("<html>502</html>", 16, &t, &m, &c);
  ASSERT(t == NULL && m == NULL && c == NULL);
  al__transport_parse_error_body("{\"error\":\"plain\"}", 17, &t, &m, &c);
  ASSERT_NULL(t);
  ASSERT_STR_EQ(m, "plain");
  al_free(m);
  al__transport_parse_error_body(NULL, 0, &t, &m, &c);
  ASSERT(t == NULL && m == NULL && c == NULL);
  return 0;
}

TEST_IMPL(transport_status_kinds) {
  ASSERT_EQ(al_http_status_kind(400), AL_HTTP_ERR_INVALID_REQUEST);
  ASSERT_EQ(al_http_status_kind(401), AL_HTTP_ERR_AUTHENTICATION);
  ASSERT_EQ(al_http_status_kind(403), AL_HTTP_ERR_PERMISSION);
  ASSERT_EQ(al_http_status_kind(404), AL_HTTP_ERR_NOT_FOUND);
  ASSERT_EQ(al_http_status_kind(408), AL_HTTP_ERR_TIMEOUT);
  ASSERT_EQ(al_http_status_kind(409), AL_HTTP_ERR_INVALID_REQUEST);
  ASSERT_EQ(al_http_status_kind(413), AL_HTTP_ERR_INVALID_REQUEST);
  ASSERT_EQ(al_http_status_kind(422), AL_HTTP_ERR_INVALID_REQUEST);
  ASSERT_EQ(al_http_status_kind(429), AL_HTTP_ERR_RATE_LIMIT);
  ASSERT_EQ(al_http_status_kind(500), AL_HTTP_ERR_API_ERROR);
  ASSERT_EQ(al_http_status_kind(503), AL_HTTP_ERR_API_ERROR);
  ASSERT_EQ(al_http_status_kind(504), AL_HTTP_ERR_TIMEOUT);
  ASSERT_EQ(al_http_status_kind(529), AL_HTTP_ERR_OVERLOADED);
  ASSERT_STR_EQ(al_http_error_kind_name(AL_HTTP_ERR_INVALID_REQUEST),
                "invalid_request");
  ASSERT_STR_EQ(al_http_error_kind_name(AL_HTTP_ERR_STALL_PROGRESS),
                "stall_progress");
  ASSERT_STR_EQ(al_http_error_kind_name(AL_HTTP_ERR_CANCELLED), "cancelled");
  ASSERT_STR_EQ(al_http_error_kind_name((al_http_error_kind_t)999),
                "unknown");
  return 0;
}

/* ---- allocation failures ---------------------------------------------------- */

/* Counts live allocations so the sweep can prove nothing leaks, and fails
 * allocation number fail_at (1-based, counted from arming). */
static long live;
static long seen;
static long fail_at;

static void *t_malloc(size_t n) {
  void *p;

  if (fail_at > 0 && ++seen == fail_at) {
    return NULL;
  }
  p = malloc(n);
  if (p != NULL) {
    live++;
  }
  return p;
}

static void *t_realloc(void *p, size_t n) {
  void *q;

  if (fail_at > 0 && ++seen == fail_at) {
    return NULL;
  }
  q = realloc(p, n);
  if (q != NULL && p == NULL) {
    live++;
  }
  return q;
}

static void *t_calloc(size_t c, size_t n) {
  void *p;

  if (fail_at > 0 && ++seen == fail_at) {
    return NULL;
  }
  p = calloc(c, n);
  if (p != NULL) {
    live++;
  }
  return p;
}

static void t_free(void *p) {
  if (p != NULL) {
    live--;
  }
  free(p);
}

static void h_ok(tsrv_conn_t *c) {
  static const char a[] = "{\"type\":\"error\",\"error\":{\"type\":\"x\",\"mess";
  static const char b[] = "age\":\"hello\"}}";

  tsrv_writef(c,
              "HTTP/1.1 429 Slow\r\nRetry-After: 1\r\n"
              "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n%zx\r\n%s\r\n"
              "0\r\n\r\n",
              sizeof(a) - 1, a, sizeof(b) - 1, b);
}

TEST_IMPL(transport_alloc_failure_sweep) {
  uv_loop_t loop;
  tsrv_t srv;
  tsrv_opts_t so = {0};
  char url[128];
  long k;
  long baseline;
  int completed_ok = 0;

  ASSERT_EQ(al_set_allocator(t_malloc, t_realloc, t_calloc, t_free), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  so.on_request = h_ok;
  tsrv_start(&srv, &loop, &so);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/", srv.port);

  /* k = 0 is the warm-up run with no failure (it also sizes libuv's
   * watcher array, whose growth aborts on OOM inside libuv). */
  for (k = 0; k < 400; k++) {
    al_http_client_t *c = NULL;
    al_http_client_options_t o;
    rec_t *r = malloc(sizeof(*r));
    int err;

    ASSERT_NOT_NULL(r);
    uv_run(&loop, UV_RUN_NOWAIT);
    baseline = live;
    seen = 0;
    fail_at = k;
    rec_init(r);
    al_http_client_options_init(&o);
    o.proxy_from_env = false;
    err = al_http_client_new(&loop, &o, &c);
    if (err == 0) {
      err = rec_get(c, r, url);
      uv_run(&loop, UV_RUN_DEFAULT);
      if (err == 0) {
        ASSERT_EQ(r->ncomplete, 1);
        if (r->status == AL_EAPI) {
          /* With every allocation served, the error was parsed. */
          ASSERT_EQ(r->kind, AL_HTTP_ERR_RATE_LIMIT);
          ASSERT_EQ(r->retry_after_ms, 1000);
          completed_ok++;
        } else {
          ASSERT(r->status < 0);
        }
      } else {
        ASSERT_EQ(err, AL_ENOMEM);
        ASSERT_EQ(r->ncomplete, 0);
      }
      al_http_client_close(c, NULL);
    } else {
      ASSERT_EQ(err, AL_ENOMEM);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_run(&loop, UV_RUN_NOWAIT); /* the server sees the close */
    fail_at = 0;
    ASSERT_EQ(live, baseline); /* nothing leaked on any path */
    free(r);
    if (k > 0 && seen < k) {
      break; /* the whole request needed fewer allocations: done */
    }
  }
  fprintf(stderr, "alloc sweep: %ld failure points, %d full runs\n", k,
          completed_ok);
  ASSERT(k > 5 && k < 400);
  ASSERT_GE(completed_ok, 2);
  tsrv_close(&srv);
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
