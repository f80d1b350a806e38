/* Agent API for durable sessions: the history commit hook, starting an
 * agent from a saved history, and first_seq. */
#include "agent_fx.h"
#include "session/session.h"
#include "test.h"

static const char roundtrip_yaml[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: \"Let me look \xc3\xa9.\"\n"
    "        - tool_use: {id: toolu_r1, name: list_directory, input: {path: "
    "\".\"}}\n"
    "        - tool_use: {id: toolu_r2, name: read_file, input: {path: "
    "\"a.txt\"}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: \"Seen.\"\n";

typedef struct {
  al_buf_t recs;
  char kinds[16];
  size_t n;
} commits_t;

static void on_commit(al_agent_t *a, al_commit_kind_t kind, const char *msg,
                      size_t len, void *data) {
  commits_t *c = data;
  al_blob_t *b = al__tx_commit_record(kind, msg, len);

  (void)a;
  ASSERT_NOT_NULL(b);
  ASSERT_EQ(al_buf_append(&c->recs, b->data, b->len), 0);
  al__blob_unref(b);
  if (c->n < sizeof(c->kinds) - 1) {
    c->kinds[c->n++] = "uat"[kind];
  }
}

/* Messages of the agent's history as JSON (new reference). */
static json_t *agent_messages(al_agent_t *a) {
  char *s = NULL;
  json_t *o;
  json_t *m;

  ASSERT_EQ(al_agent_history_json(a, &s), 0);
  o = json_loads(s, 0, NULL);
  al_free(s);
  m = json_incref(json_object_get(o, "messages"));
  json_decref(o);
  return m;
}

TEST_IMPL(agent_commit_hook_rebuilds_history) {
  fx_t f;
  commits_t c;
  al_tx_loaded_t l;
  json_t *want;

  memset(&c, 0, sizeof(c));
  al_buf_init(&c.recs, 1 << 20);
  fx_init(&f, roundtrip_yaml);
  fx_write(&f, "a.txt", "hello");
  f.opts.on_commit = on_commit;
  f.opts.commit_data = &c;
  fx_start(&f);
  fx_run(&f, "look at the files");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(c.kinds, "uata");
  /* A second run: the user text after a final answer. */
  fx_run(&f, "thanks");
  ASSERT_STR_EQ(c.kinds, "uataua");
  ASSERT_EQ(al__tx_load_buf(c.recs.data, c.recs.len, 1024, &l, NULL), 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(l.closed_tool_uses, 0);
  want = agent_messages(f.agent);
  ASSERT(json_equal(want, (json_t *)al__history_to_json(&l.history)));
  ASSERT_STR_EQ(l.first_user_text, "look at the files");
  json_decref(want);
  al__tx_loaded_free(&l);
  fx_assert_valid(&f);
  fx_finish(&f);
  al_buf_free(&c.recs);
  return 0;
}

/* A cancel mid-tool records the cancelled results; the rebuilt history
 * is closed and valid. */
static void cancel_on_start(fx_t *f, const al_event_t *ev, const json_t *j) {
  (void)j;
  if (ev->type == AL_EVENT_TOOL_USE_STARTED) {
    al_agent_cancel(f->agent);
  }
}

TEST_IMPL(agent_commit_hook_cancel_mid_tool) {
  fx_t f;
  commits_t c;
  al_tx_loaded_t l;
  json_t *want;
  char why[256];

  memset(&c, 0, sizeof(c));
  al_buf_init(&c.recs, 1 << 20);
  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      content:\n"
              "        - tool_use: {id: toolu_c1, name: bash, input: "
              "{command: \"sleep 5\"}}\n"
              "        - text: \"after\"\n"
              "          delay_ms: 20\n");
  f.opts.on_commit = on_commit;
  f.opts.commit_data = &c;
  f.hook = cancel_on_start;
  fx_start(&f);
  fx_run(&f, "sleep");
  ASSERT_STR_EQ(fx_last_type(&f), "interrupted");
  ASSERT_EQ(al__tx_load_buf(c.recs.data, c.recs.len, 1024, &l, NULL), 0);
  want = agent_messages(f.agent);
  ASSERT(json_equal(want, (json_t *)al__history_to_json(&l.history)));
  if (al__history_count(&l.history) > 0) {
    ASSERT_EQ(al__history_validate(&l.history, why, sizeof(why)), 0);
  }
  json_decref(want);
  al__tx_loaded_free(&l);
  fx_finish(&f);
  al_buf_free(&c.recs);
  return 0;
}

/* A new agent takes the saved history and continues: the next request
 * holds it and passes the validator; events start at first_seq. */
TEST_IMPL(agent_load_history_resumes) {
  fx_t f, g;
  char *hist = NULL;
  long i;

  fx_init(&f, roundtrip_yaml);
  fx_write(&f, "a.txt", "hello");
  fx_start(&f);
  fx_run(&f, "look at the files");
  ASSERT_EQ(al_agent_history_json(f.agent, &hist), 0);
  fx_finish(&f);

  fx_init(&g, "responses:\n  - reply:\n      content:\n        - text: "
              "\"resumed\"\n");
  g.opts.first_seq = 100;
  g.opts.first_run = 7;
  g.opts.session_id = "s_resumed";
  fx_start(&g);
  ASSERT_EQ(al_agent_load_history_json(g.agent, hist, strlen(hist)), 0);
  fx_run(&g, "and then?");
  ASSERT_STR_EQ(fx_last_type(&g), "final");
  i = fx_find(&g, "run_started", NULL, 0);
  ASSERT_EQ(json_integer_value(json_object_get(fx_event(&g, i), "seq")), 100);
  ASSERT_EQ(json_integer_value(json_object_get(fx_event(&g, i), "run")), 7);
  ASSERT_EQ(fx_requests(&g), 1);
  fx_assert_valid(&g);
  /* user, assistant(tools), results, assistant, user */
  ASSERT_EQ(json_array_size(json_object_get(fx_request(&g, 0)->body,
                                            "messages")),
            5);
  /* Loading once it has run is refused. */
  ASSERT_EQ(al_agent_load_history_json(g.agent, hist, strlen(hist)),
            AL_EBUSY);
  al_free(hist);
  fx_finish(&g);
  return 0;
}

TEST_IMPL(agent_load_history_refusals) {
  fx_t f;
  static const char *const bad[] = {
      "",
      "not json",
      "[]",
      "{\"messages\":{}}",
      "{\"system\":5,\"messages\":[]}",
      /* starts with assistant */
      "{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
      "\"text\":\"x\"}]}]}",
      /* an open tool_use */
      "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
      "\"text\":\"x\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":"
      "\"tool_use\",\"id\":\"t1\",\"name\":\"bash\",\"input\":{}}]}]}",
  };
  size_t i;

  fx_init(&f, NULL);
  fx_start(&f);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (al_agent_load_history_json(f.agent, bad[i], strlen(bad[i])) !=
        AL_EINVAL) {
      AL_TEST_FAIL("accepted: %s", bad[i]);
    }
  }
  ASSERT_EQ(al_agent_load_history_json(f.agent, "{\"messages\":[]}", 15), 0);
  ASSERT_EQ(al_agent_load_history_json(
                f.agent,
                "{\"system\":\"sys\",\"messages\":[{\"role\":\"user\","
                "\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}",
                strlen("{\"system\":\"sys\",\"messages\":[{\"role\":\"user\","
                       "\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}")),
            0);
  fx_run(&f, "y");
  fx_assert_valid(&f);
  /* The loaded user text and the new one merged into one message. */
  ASSERT_EQ(json_array_size(json_object_get(fx_request(&f, 0)->body,
                                            "messages")),
            1);
  {
    char *sys = json_dumps(json_object_get(fx_request(&f, 0)->body, "system"),
                           JSON_ENCODE_ANY);

    ASSERT_NOT_NULL(strstr(sys, "\"sys\""));
    free(sys);
  }
  fx_finish(&f);
  return 0;
}
