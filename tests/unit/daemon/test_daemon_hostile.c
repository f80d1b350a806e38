/* The daemon against a hostile world (issue 15): malformed base URLs are
 * refused at session/create naming the URL, and a session's limits bound
 * its replies. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dtest.h"

static const char *err_msg(const json_t *r) {
  return json_string_value(
      json_object_get(json_object_get(r, "error"), "message"));
}

TEST_IMPL(daemon_refuses_bad_base_url) {
  static const char *const bad[] = {"http://[::1", "http://127.0.0.1:99999",
                                    "http://a b/", "http://"};
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[512];
  json_t *r;
  size_t i;

  dt_init(&t, NULL);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"base_url\":\"%s\"}", t.work,
             bad[i]);
    r = dt_call(&c, 10 + (int)i, "session/create", p);
    ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
    ASSERT_NOT_NULL(strstr(err_msg(r), bad[i]));
  }
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"limits\":{\"reply_byts\":1}}",
           t.work);
  r = dt_call(&c, 20, "session/create", p);
  ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
  ASSERT_NOT_NULL(strstr(err_msg(r), "unknown limit 'reply_byts'"));
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"limits\":{\"reply_bytes\":0}}",
           t.work);
  r = dt_call(&c, 21, "session/create", p);
  ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
  dt_finish(&t, cs, 1);
  return 0;
}

/* A state directory whose parents do not exist yet ($XDG_STATE_HOME on a
 * fresh account): made, 0700 each, and the daemon serves. */
TEST_IMPL(daemon_creates_missing_state_parents) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char deep[300], mid[300];
  struct stat st;

  dt_init(&t, NULL);
  snprintf(mid, sizeof(mid), "%s/xdg-state", t.root);
  snprintf(deep, sizeof(deep), "%s/xdg-state/agentloop", t.root);
  t.o.state_dir = deep;
  dt_start(&t);
  ASSERT_EQ(stat(mid, &st), 0);
  ASSERT_EQ(st.st_mode & 0777, 0700);
  ASSERT_EQ(stat(deep, &st), 0);
  ASSERT_EQ(st.st_mode & 0777, 0700);
  dt_connect(&t, &c);
  dt_init_client(&c);
  dt_finish(&t, cs, 1);
  return 0;
}

static const char big_reply[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - repeat_text: {count: 20000, text: \"0123456789abcdef\"}\n";

TEST_IMPL(daemon_session_limits) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[512];
  char sid[64];
  size_t i;
  const json_t *ev;

  dt_init(&t, big_reply);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"limits\":{\"reply_bytes\":\"64K\"}}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  i = dt_wait_event(&c, "api_error", 0);
  ev = json_object_get(json_array_get(c.msgs, i), "params");
  ASSERT_STR_EQ(json_string_value(json_object_get(ev, "kind")),
                "reply_too_large");
  dt_wait_event(&c, "error", i);
  dt_finish(&t, cs, 1);
  return 0;
}

/* A server that drips its reply (one byte every few ms keeps the idle
 * timer happy) is cut by the session's minimum rate; the run ends with an
 * error naming it, and the daemon stays responsive. */
TEST_IMPL(daemon_session_slowloris) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[512];
  char sid[64];
  size_t i;
  const json_t *ev;
  json_t *r;
  int m = al_test_timeout_multiplier();

  dt_init(&t, "responses:\n"
              "  - reply: {content: [{text: 'slow and steady'}]}\n"
              "    fault: {drip: {bytes: 1, interval_ms: 4}}\n");
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"limits\":{\"min_rate_bytes\":\"64K\","
           "\"min_rate_window_ms\":%d}}",
           t.work, 100 * m);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  i = dt_wait_event(&c, "api_error", 0);
  ev = json_object_get(json_array_get(c.msgs, i), "params");
  ASSERT_STR_EQ(json_string_value(json_object_get(ev, "kind")), "too_slow");
  ASSERT_NOT_NULL(strstr(json_string_value(json_object_get(ev, "message")),
                         "below the minimum of 65536"));
  r = dt_call(&c, 5, "session/list", NULL);
  ASSERT_EQ(dt_err(r), 0);
  dt_finish(&t, cs, 1);
  return 0;
}
