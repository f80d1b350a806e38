/* Issue 22, defect 10b: the daemon's session/usage carries the dollars,
 * from the same price table `agentloop run` uses (the models catalogue). */
#include "dtest.h"

static const char usage_yaml[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: \"priced\"\n"
    "      usage: {input_tokens: 1000, output_tokens: 2000}\n";

static double cost_of(const json_t *o) {
  const json_t *c = json_object_get(o, "cost_usd");

  ASSERT(json_is_number(c));
  return json_number_value(c);
}

TEST_IMPL(ux_daemon_usage_has_cost) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char sid[64];
  char p[512];
  json_t *r;
  json_t *res;
  double want;

  dt_init(&t, usage_yaml);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  /* claude-sonnet-4-6: $3 in, $15 out per million tokens (catalogue). */
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"model\":\"claude-sonnet-4-6\"}",
           t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 3, "session/subscribe", p)), 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 4, "turn/send", p)), 0);
  dt_wait_event(&c, "final", 0);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c, 5, "session/usage", p);
  ASSERT_EQ(dt_err(r), 0);
  res = json_object_get(r, "result");
  want = (1000.0 * 3 + 2000.0 * 15) / 1e6;
  ASSERT(cost_of(res) > want - 1e-9 && cost_of(res) < want + 1e-9);
  ASSERT(cost_of(json_object_get(res, "session")) > want - 1e-9);
  ASSERT(cost_of(json_object_get(res, "last_run")) < want + 1e-9);
  dt_finish(&t, cl, 1);
  return 0;
}
