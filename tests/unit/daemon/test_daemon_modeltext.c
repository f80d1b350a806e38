/* Model text with NUL through the daemon (issue 15): a reply whose text
 * and tool-call input carry \u0000 ends `final`, with U+FFFD in the events
 * and the history; after a restart the session reloads clean and the next
 * request passes the mock's validator with no NUL in it. */
#include <stdlib.h>
#include <string.h>

#include "dtest.h"
#include "../loop/nulfx.h"

static void assert_clean(const json_t *body) {
  char *dump = json_dumps(body, JSON_COMPACT);

  ASSERT_NOT_NULL(dump);
  if (strstr(dump, "\\u0000") != NULL) {
    AL_TEST_FAIL("a NUL reached the request: %.2000s", dump);
  }
  ASSERT_NOT_NULL(strstr(dump, "before\xEF\xBF\xBD" "after"));
  ASSERT_NOT_NULL(strstr(dump, "no\xEF\xBF\xBDsuch"));
  free(dump);
}

TEST_IMPL(daemon_model_text_nul_resumes) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cl[] = {&c, &c2};
  char p[512];
  char sid[64];
  json_t *r;

  dt_init(&t, nul_scenario);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"look\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  dt_wait_event(&c, "final", 0);
  dt_assert_valid(&t);
  ASSERT_EQ(al_mockllm_record_count(t.mock), 2);
  assert_clean(al_mockllm_record_get(t.mock, 1)->body);

  al__daemon_shutdown(t.d);
  while (!t.exited) {
    uv_run(&t.loop, UV_RUN_ONCE);
  }
  t.exited = false;
  dt_start(&t);
  dt_connect(&t, &c2);
  dt_init_client(&c2);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c2, 6, "session/resume", p);
  ASSERT_EQ(dt_err(r), 0);
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(json_object_get(r, "result"), "recovered"),
                "bad_lines")),
            0);
  dt_call(&c2, 7, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"again\"}", sid);
  dt_call(&c2, 8, "turn/send", p);
  dt_wait_event(&c2, "final", 0);
  dt_assert_valid(&t);
  assert_clean(al_mockllm_record_get(
                   t.mock, al_mockllm_record_count(t.mock) - 1)
                   ->body);
  dt_finish(&t, cl, 2);
  return 0;
}

/* Invalid UTF-8 bytes in the stream: U+FFFD in the history; the next
 * request is valid. */
TEST_IMPL(daemon_model_text_invalid_utf8) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char p[512];
  char sid[64];
  char *dump;

  dt_init(&t, bad_utf8_scenario());
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"look\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  dt_wait_event(&c, "final", 0);
  dt_assert_valid(&t);
  ASSERT_EQ(al_mockllm_record_count(t.mock), 2);
  dump = json_dumps(al_mockllm_record_get(t.mock, 1)->body, JSON_COMPACT);
  ASSERT_NOT_NULL(dump);
  ASSERT_NOT_NULL(strstr(dump, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes"));
  ASSERT_NOT_NULL(strstr(dump, "x\xEF\xBF\xBDy"));
  free(dump);
  dt_finish(&t, cl, 1);
  return 0;
}
