/* A Redis connection is up only once the server has loaded its data:
 * connected while it still answers LOADING (a restart replaying its AOF),
 * al_fleet_redis_t waits and asks again, so the first command of an
 * embedder told "up" is answered, not refused (seen: `batch results
 * --follow` exited 1 on a LOADING error after a restart, in
 * fleet_redis_aof_restart_loses_no_job). */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "fleet/fleet.h"
#include "redis_server.h"
#include "test.h"

#define LD_KEYS 30

typedef struct {
  uv_loop_t loop;
  al_test_redis_t srv;
  al_fleet_redis_t *r;
  int ups;
  bool got;
  int status;
  char value[64];
} ld_t;

static void ld_state(al_fleet_redis_t *r, bool up, int status) {
  ld_t *t = al_fleet_redis_data(r);

  (void)status;
  t->ups += up;
}

static void ld_reply(al_fleet_redis_t *r, int status, redisReply *reply,
                     void *data) {
  ld_t *t = data;

  (void)r;
  t->got = true;
  t->status = status;
  if (reply != NULL && reply->str != NULL) {
    snprintf(t->value, sizeof(t->value), "%s", reply->str);
  }
}

static void ld_closed(al_fleet_redis_t *r) {
  (void)r;
}

/* Polls the server (the test's own connections) until its AOF rewrite is
 * over, so the next start loads an RDB base, key by key. */
static void ld_wait_rewrite(ld_t *t) {
  const char *info[] = {"INFO", "persistence"};
  int tries;

  for (tries = 0; tries < 100000; tries++) {
    char *v = al_test_redis_cmd(&t->srv, 2, info);
    bool done = v != NULL && strstr(v, "aof_rewrite_in_progress:0") != NULL &&
                strstr(v, "aof_rewrite_scheduled:0") != NULL &&
                strstr(v, "aof_rewrites:0") == NULL;

    free(v);
    if (done) {
      return;
    }
  }
  AL_TEST_FAIL("the AOF rewrite did not finish");
}

TEST_IMPL(i24_redis_up_only_once_loaded) {
  ld_t t;
  al_fleet_redis_options_t o;
  const char *get[] = {"GET", "k7"};
  const char *rewrite[] = {"BGREWRITEAOF"};
  char *v;
  int i;

  memset(&t, 0, sizeof(t));
  al_test_timeout_s(60);
  al_test_redis_start(&t.srv, true);
  for (i = 0; i < LD_KEYS; i++) {
    char k[16], val[2048];
    size_t l;
    const char *set[] = {"SET", k, val};

    /* Over a KiB each: the server serves events between keys. */
    snprintf(k, sizeof(k), "k%d", i);
    snprintf(val, sizeof(val), "v%d", i);
    l = strlen(val);
    memset(val + l, 'x', 1500);
    val[l + 1500] = '\0';
    v = al_test_redis_cmd(&t.srv, 3, set);
    ASSERT_STR_EQ(v, "OK");
    free(v);
  }
  free(al_test_redis_cmd(&t.srv, 1, rewrite));
  ld_wait_rewrite(&t);
  ASSERT_EQ(uv_loop_init(&t.loop), 0);
  al_fleet_redis_options_init(&o);
  o.unix_path = t.srv.sock;
  o.backoff_min_ms = 5;
  o.backoff_max_ms = 20;
  o.on_state = ld_state;
  o.data = &t;
  ASSERT_EQ(al_fleet_redis_new(&t.loop, &o, &t.r), 0);
  while (t.ups < 1) {
    ASSERT(uv_run(&t.loop, UV_RUN_ONCE) != 0);
  }
  /* A crash, and a restart whose load takes LD_KEYS x 50 ms. */
  al_test_redis_kill(&t.srv);
  t.srv.load_delay_us = 50000;
  al_test_redis_restart_loading(&t.srv);
  /* Up again: the first command is answered. */
  while (t.ups < 2) {
    ASSERT(uv_run(&t.loop, UV_RUN_ONCE) != 0);
  }
  ASSERT_EQ(al_fleet_redis_command(t.r, ld_reply, &t, 2, get, NULL), 0);
  while (!t.got) {
    ASSERT(uv_run(&t.loop, UV_RUN_ONCE) != 0);
  }
  if (t.status != 0) {
    AL_TEST_FAIL("the first command after up: status %d (%s)", t.status,
                 t.value);
  }
  ASSERT_EQ(strncmp(t.value, "v7x", 3), 0);
  al_fleet_redis_close(t.r, ld_closed);
  ASSERT_LOOP_CLOSES(&t.loop);
  al_test_redis_cleanup(&t.srv);
  return 0;
}
