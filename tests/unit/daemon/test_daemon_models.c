/* agentloopd reads the user's models catalogue before its loop runs: a
 * mistake stops the start with FILE:LINE:COL; a good file reaches the
 * sessions' agents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "dtest.h"
#include "test.h"

TEST_IMPL(daemon_models_catalogue) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char cfg[300];
  char path[340];
  char why[512];
  char sid[64];
  char p[256];
  al_daemon_t *d = NULL;
  json_t *r;
  size_t u;
  FILE *f;

  dt_init(&t, "usage_from_request: {bytes_per_token: 4}\n"
              "responses:\n  - reply: {content: [{text: hi}]}\n");
  snprintf(cfg, sizeof(cfg), "%s/xdg", t.root);
  ASSERT_EQ(mkdir(cfg, 0700), 0);
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", cfg, 1), 0);
  snprintf(path, sizeof(path), "%s/agentloop", cfg);
  ASSERT_EQ(mkdir(path, 0700), 0);
  snprintf(path, sizeof(path), "%s/agentloop/models.yaml", cfg);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("models:\n  - match: mock-*\n    context_window: huge\n", f);
  fclose(f);
  ASSERT_EQ(al__daemon_new(&t.loop, &t.o, &d, why, sizeof(why)), AL_ECONFIG);
  ASSERT_NULL(d);
  ASSERT_NOT_NULL(strstr(why, path));
  ASSERT_NOT_NULL(strstr(why, ":3:21: 'context_window' must be a number"));

  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("models:\n  - match: mock-*\n    context_window: 54321\n", f);
  fclose(f);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  dt_create(&c, NULL, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c, 3, "session/subscribe", p);
  ASSERT_NOT_NULL(json_object_get(r, "result"));
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hello\"}", sid);
  r = dt_call(&c, 4, "turn/send", p);
  ASSERT_NOT_NULL(json_object_get(r, "result"));
  u = dt_wait_event(&c, "usage", 0);
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(json_array_get(c.msgs, u), "params"),
                "context_window")),
            54321);
  dt_finish(&t, cl, 1);
  return 0;
}
