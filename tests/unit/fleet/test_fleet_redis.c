/* Fleet mode's Redis connection (src/fleet/redis.c) and the test harness
 * (tests/redis_server.c), against a real redis-server on a unix socket. */
#include <hiredis/hiredis.h>

#include "fleet/fleet.h"
#include "redis_server.h"
#include "test.h"

/* The harness: start, answer, clean stop and crash with AOF on. */
TEST_IMPL(i24_redis_harness_aof_restart) {
  al_test_redis_t s;
  const char *set1[] = {"SET", "k1", "v1"};
  const char *set2[] = {"SET", "k2", "v2"};
  const char *get1[] = {"GET", "k1"};
  const char *get2[] = {"GET", "k2"};
  char *t;

  al_test_redis_start(&s, true);
  t = al_test_redis_cmd(&s, 3, set1);
  ASSERT_STR_EQ(t, "OK");
  free(t);
  al_test_redis_stop(&s);
  al_test_redis_restart(&s);
  t = al_test_redis_cmd(&s, 2, get1);
  ASSERT_STR_EQ(t, "v1");
  free(t);
  /* appendfsync always: a write acknowledged before a SIGKILL survives. */
  t = al_test_redis_cmd(&s, 3, set2);
  ASSERT_STR_EQ(t, "OK");
  free(t);
  al_test_redis_kill(&s);
  al_test_redis_restart(&s);
  t = al_test_redis_cmd(&s, 2, get2);
  ASSERT_STR_EQ(t, "v2");
  free(t);
  al_test_redis_cleanup(&s);
  return 0;
}

typedef struct {
  uv_loop_t loop;
  al_test_redis_t srv;
  al_fleet_redis_t *r;
  int ups;
  int downs;
  int replies;
  int errors;
  int closed;
  bool in_api;
  int step;
} ctx_t;

static void on_closed(al_fleet_redis_t *r) {
  ctx_t *c = al_fleet_redis_data(r);

  ASSERT(!c->in_api);
  c->closed++;
}

static void close_conn(ctx_t *c) {
  c->in_api = true;
  al_fleet_redis_close(c->r, on_closed);
  c->in_api = false;
}

static void setup_on(ctx_t *c, al_fleet_redis_state_cb on_state, bool tcp) {
  al_fleet_redis_options_t o;

  memset(c, 0, sizeof(*c));
  if (tcp) {
    al_test_redis_start_tcp(&c->srv);
  } else {
    al_test_redis_start(&c->srv, false);
  }
  ASSERT_EQ(uv_loop_init(&c->loop), 0);
  al_fleet_redis_options_init(&o);
  if (tcp) {
    o.host = "127.0.0.1";
    o.port = c->srv.port;
  } else {
    o.unix_path = c->srv.sock;
  }
  o.backoff_min_ms = 10;
  o.backoff_max_ms = 40;
  o.on_state = on_state;
  o.data = c;
  ASSERT_EQ(al_fleet_redis_new(&c->loop, &o, &c->r), 0);
}

static void cmd(ctx_t *c, al_fleet_reply_cb cb, int argc, const char **argv) {
  int rc;

  c->in_api = true;
  rc = al_fleet_redis_command(c->r, cb, c, argc, argv, NULL);
  c->in_api = false;
  ASSERT_EQ(rc, 0);
}

static void setup(ctx_t *c, al_fleet_redis_state_cb on_state) {
  setup_on(c, on_state, false);
}

/* ---- round trip ---------------------------------------------------------- */

static void rt_reply(al_fleet_redis_t *r, int status, redisReply *reply,
                     void *data) {
  ctx_t *c = data;

  ASSERT(!c->in_api);
  c->replies++;
  switch (c->replies) {
    case 1:
      ASSERT_EQ(status, 0);
      ASSERT_STR_EQ(reply->str, "OK");
      break;
    case 2:
      ASSERT_EQ(status, 0);
      ASSERT_STR_EQ(reply->str, "hello");
      break;
    case 3:
      ASSERT_EQ(status, 0);
      ASSERT_EQ(reply->integer, 1);
      break;
    case 4:
      /* An error reply is a status, with the text kept. */
      ASSERT_EQ(status, AL_EREDIS);
      ASSERT_EQ(reply->type, REDIS_REPLY_ERROR);
      close_conn(c);
      break;
    default:
      ASSERT(0);
  }
}

static void rt_state(al_fleet_redis_t *r, bool up, int status) {
  ctx_t *c = al_fleet_redis_data(r);
  const char *set[] = {"SET", "greeting", "hello"};
  const char *get[] = {"GET", "greeting"};
  const char *incr[] = {"INCR", "n"};
  const char *bad[] = {"INCR", "greeting"};

  ASSERT(up);
  c->ups++;
  cmd(c, rt_reply, 3, set);
  cmd(c, rt_reply, 2, get);
  cmd(c, rt_reply, 2, incr);
  cmd(c, rt_reply, 2, bad);
}

TEST_IMPL(i24_redis_round_trip) {
  ctx_t c;
  const char *ping[] = {"PING"};

  setup(&c, rt_state);
  /* Not up yet: refused, not queued. */
  ASSERT_EQ(al_fleet_redis_command(c.r, rt_reply, &c, 1, ping, NULL),
            UV_ENOTCONN);
  ASSERT_LOOP_CLOSES(&c.loop);
  ASSERT_EQ(c.ups, 1);
  ASSERT_EQ(c.replies, 4);
  ASSERT_EQ(c.closed, 1);
  al_test_redis_cleanup(&c.srv);
  return 0;
}

/* The same over TCP on loopback, and a host name refused up front. */
TEST_IMPL(i24_redis_tcp_round_trip) {
  ctx_t c;
  al_fleet_redis_options_t o;
  al_fleet_redis_t *r = NULL;

  setup_on(&c, rt_state, true);
  ASSERT_LOOP_CLOSES(&c.loop);
  ASSERT_EQ(c.ups, 1);
  ASSERT_EQ(c.replies, 4);
  ASSERT_EQ(c.closed, 1);
  al_fleet_redis_options_init(&o);
  o.host = "redis.example";
  o.port = 6379;
  ASSERT_EQ(al_fleet_redis_new(&c.loop, &o, &r), AL_ECONFIG);
  ASSERT_NULL(r);
  al_test_redis_cleanup(&c.srv);
  return 0;
}

TEST_IMPL(i24_fleet_url_parse) {
  al_fleet_url_t u;
  char why[200];

  ASSERT_EQ(
      al_fleet_url_parse("redis://10.0.0.7:6380/evals", &u, why, sizeof(why)),
      0);
  ASSERT_STR_EQ(u.host, "10.0.0.7");
  ASSERT_EQ(u.port, 6380);
  ASSERT_STR_EQ(u.prefix, "evals");
  ASSERT_EQ(al_fleet_url_parse("redis://localhost", &u, why, sizeof(why)), 0);
  ASSERT_STR_EQ(u.host, "127.0.0.1");
  ASSERT_EQ(u.port, 6379);
  ASSERT_STR_EQ(u.prefix, "agentloop");
  ASSERT_EQ(al_fleet_url_parse("redis://[::1]:7000/", &u, why, sizeof(why)), 0);
  ASSERT_STR_EQ(u.host, "::1");
  ASSERT_EQ(u.port, 7000);
  ASSERT_EQ(al_fleet_url_parse("unix:///run/redis.sock?prefix=p1", &u, why,
                               sizeof(why)),
            0);
  ASSERT_STR_EQ(u.unix_path, "/run/redis.sock");
  ASSERT_STR_EQ(u.prefix, "p1");
  ASSERT_EQ(
      al_fleet_url_parse("redis://redis.internal:6379/x", &u, why, sizeof(why)),
      AL_EINVAL);
  ASSERT_NOT_NULL(strstr(why, "blocking"));
  ASSERT_EQ(al_fleet_url_parse("redis://127.0.0.1:0/x", &u, why, sizeof(why)),
            AL_EINVAL);
  ASSERT_EQ(al_fleet_url_parse("redis://127.0.0.1/a:b", &u, why, sizeof(why)),
            AL_EINVAL);
  ASSERT_EQ(al_fleet_url_parse("http://127.0.0.1/", &u, why, sizeof(why)),
            AL_EINVAL);
  ASSERT_EQ(al_fleet_url_parse("unix://rel.sock", &u, why, sizeof(why)),
            AL_EINVAL);
  return 0;
}

/* ---- redis killed and restarted ------------------------------------------ */

static void rc_after(al_fleet_redis_t *r, int status, redisReply *reply,
                     void *data) {
  ctx_t *c = data;

  ASSERT_EQ(status, 0);
  ASSERT_STR_EQ(reply->str, "PONG");
  c->replies++;
  close_conn(c);
}

static void rc_inflight(al_fleet_redis_t *r, int status, redisReply *reply,
                        void *data) {
  ctx_t *c = data;

  /* In flight when the server died: failed, not lost silently. */
  ASSERT_EQ(status, UV_ECONNRESET);
  ASSERT_NULL(reply);
  c->errors++;
}

static void rc_state(al_fleet_redis_t *r, bool up, int status) {
  ctx_t *c = al_fleet_redis_data(r);
  const char *blpop[] = {"BLPOP", "never", "0"};
  const char *ping[] = {"PING"};

  if (up) {
    c->ups++;
    if (c->ups == 1) {
      cmd(c, rc_inflight, 3, blpop);
      al_test_redis_kill(&c->srv);
    } else {
      ASSERT(al_fleet_redis_reconnects(r) >= 1);
      cmd(c, rc_after, 1, ping);
    }
    return;
  }
  c->downs++;
  ASSERT_EQ(status, UV_ECONNRESET);
  ASSERT_EQ(c->errors, 1);
  /* Down: refused until it is back (the worker pauses its intake). */
  ASSERT_EQ(al_fleet_redis_command(r, rc_after, c, 1, ping, NULL), UV_ENOTCONN);
  ASSERT(!al_fleet_redis_is_up(r));
  /* Back after the first retries have failed on a missing socket. */
  al_test_redis_restart(&c->srv);
}

TEST_IMPL(i24_redis_reconnects_after_restart) {
  ctx_t c;

  setup(&c, rc_state);
  ASSERT_LOOP_CLOSES(&c.loop);
  ASSERT_EQ(c.ups, 2);
  ASSERT_EQ(c.downs, 1);
  ASSERT_EQ(c.errors, 1);
  ASSERT_EQ(c.replies, 1);
  ASSERT_EQ(c.closed, 1);
  al_test_redis_cleanup(&c.srv);
  return 0;
}

/* ---- close mid-command -----------------------------------------------------
 */

static void never(al_fleet_redis_t *r, int status, redisReply *reply,
                  void *data) {
  AL_TEST_FAIL("a reply after close (status %d)", status);
}

static void cm_first(al_fleet_redis_t *r, int status, redisReply *reply,
                     void *data) {
  ctx_t *c = data;

  ASSERT_EQ(status, 0);
  c->replies++;
  /* From inside a reply, with more pending behind it. */
  close_conn(c);
  ASSERT_EQ(c->closed, 0);
}

static void cm_state(al_fleet_redis_t *r, bool up, int status) {
  ctx_t *c = al_fleet_redis_data(r);
  const char *ping[] = {"PING"};
  const char *blpop[] = {"BLPOP", "never", "0"};

  ASSERT(up);
  c->ups++;
  if (c->step == 0) {
    /* Closed with a command that never answers in flight. */
    cmd(c, never, 3, blpop);
    cmd(c, never, 1, ping);
    close_conn(c);
    ASSERT_EQ(c->closed, 0);
  } else {
    cmd(c, cm_first, 1, ping);
    cmd(c, never, 1, ping);
    cmd(c, never, 3, blpop);
  }
}

TEST_IMPL(i24_redis_close_mid_command_fires_nothing) {
  ctx_t c;
  int step;

  for (step = 0; step < 2; step++) {
    setup(&c, cm_state);
    c.step = step;
    ASSERT_LOOP_CLOSES(&c.loop);
    ASSERT_EQ(c.ups, 1);
    ASSERT_EQ(c.closed, 1);
    ASSERT_EQ(c.replies, step);
    al_test_redis_cleanup(&c.srv);
  }
  return 0;
}
