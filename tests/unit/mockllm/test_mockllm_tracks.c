/* Scenario tracks (docs/mockllm.md, "Tracks"): one server scripts a parent
 * and its sub-agents. A request goes to the first track whose match holds
 * (the first user message's text, the system prompt's), each track plays
 * its own responses with its own cursor and on_exhausted, and requests no
 * track takes play the top-level responses. Routing must not depend on
 * arrival order, on the content's shape or on the protocol. */
#include <unistd.h>

#include "unit/mockllm/mtest.h"

/* An Anthropic body whose first user message is `first` (raw JSON content:
 * a quoted string or a list of blocks); with `later`, an assistant turn and
 * a second user message follow (a later turn of the same conversation). */
static char *ant_body(const char *first, const char *later) {
  char buf[2048];

  if (later == NULL) {
    snprintf(buf, sizeof(buf),
             "{\"model\":\"m\",\"max_tokens\":100,\"stream\":true,"
             "\"messages\":[{\"role\":\"user\",\"content\":%s}]}",
             first);
  } else {
    snprintf(buf, sizeof(buf),
             "{\"model\":\"m\",\"max_tokens\":100,\"stream\":true,"
             "\"messages\":[{\"role\":\"user\",\"content\":%s},"
             "{\"role\":\"assistant\",\"content\":\"ok\"},"
             "{\"role\":\"user\",\"content\":\"%s\"}]}",
             first, later);
  }
  return mt_anthropic(buf);
}

/* The client is done: stop the loop so the server's records can be read
 * before it closes. */
static void stop_on_close(mt_client_t *c) {
  uv_stop(c->loop);
}

static const char routing_yaml[] =
    "responses:\n"
    "  - reply: {content: [{text: top-1}]}\n"
    "  - reply: {content: [{text: top-2}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: CHILD-A}\n"
    "    responses:\n"
    "      - reply: {content: [{text: a-1}]}\n"
    "      - reply: {content: [{text: a-2}]}\n"
    "  - match: {first_user_contains: CHILD-B}\n"
    "    responses:\n"
    "      - reply: {content: [{text: b-1}]}\n"
    "      - reply: {content: [{text: b-2}]}\n"
    "  - match: {first_user_contains: CHILD-C}\n"
    "    responses:\n"
    "      - reply: {content: [{text: c-1}]}\n"
    "      - reply: {content: [{text: c-2}]}\n";

static void expect_text(const mt_client_t *c, size_t i, const char *text) {
  char want[64];

  snprintf(want, sizeof(want), "\"text\":\"%s\"", text);
  if (c->status[i] != 200 || c->body[i].data == NULL ||
      strstr(c->body[i].data, want) == NULL) {
    AL_TEST_FAIL("response %zu: status %d, expected %s in\n%s", i, c->status[i],
                 want, c->body[i].data ? c->body[i].data : "(none)");
  }
}

TEST_IMPL(mockllm_tracks_route_by_first_user) {
  /* Arrival order C, A, parent, B, A, C, B, parent; string and block
   * content; a later user message naming another child does not move a
   * conversation (only the FIRST user message counts). */
  char *reqs[8];
  static const char *want[8] = {"c-1", "a-1", "top-1", "b-1",
                                "a-2", "c-2", "b-2",   "top-2"};
  static const int want_track[8] = {2, 0, -1, 1, 0, 2, 1, -1};
  static const int want_index[8] = {0, 0, 0, 0, 1, 1, 1, 1};
  uv_loop_t loop;
  mt_client_t c;
  al_mockllm_options_t o;
  al_mockllm_t *m;
  char path[256];
  char err[256];
  char *file;
  size_t flen;
  size_t i;

  reqs[0] = ant_body("\"run CHILD-C now\"", NULL);
  reqs[1] = ant_body(
      "[{\"type\":\"text\",\"text\":\"env preamble\"},"
      "{\"type\":\"text\",\"text\":\"task CHILD-A\"}]",
      NULL);
  reqs[2] = ant_body("\"parent: explore the repo\"", NULL);
  reqs[3] = ant_body("[{\"type\":\"text\",\"text\":\"CHILD-B\"}]", NULL);
  reqs[4] = ant_body("\"task CHILD-A\"", "results of CHILD-C");
  reqs[5] = ant_body("\"run CHILD-C now\"", "go on");
  reqs[6] = ant_body("[{\"type\":\"text\",\"text\":\"CHILD-B\"}]", "go on");
  reqs[7] = ant_body("\"parent: explore the repo\"",
                     "CHILD-A CHILD-B CHILD-C answered");
  snprintf(path, sizeof(path), "/tmp/al-mockllm-tracks-%d.ndjson",
           (int)getpid());
  unlink(path);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al_mockllm_options_init(&o);
  o.record = true;
  o.record_path = path;
  o.scenario_yaml = routing_yaml;
  o.err = err;
  o.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&loop, &o, &m), 0);
  mt_client_init(&c);
  for (i = 0; i < 8; i++) {
    mt_client_add(&c, reqs[i]);
  }
  c.on_close = stop_on_close;
  mt_client_start(&c, &loop, al_mockllm_port(m));
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(c.ncomplete, 8);
  for (i = 0; i < 8; i++) {
    const al_mockllm_record_t *r = al_mockllm_record_get(m, i);

    expect_text(&c, i, want[i]);
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->track, want_track[i]);
    ASSERT_EQ(r->response_index, want_index[i]);
  }
  al_mockllm_close(m, NULL);
  ASSERT_LOOP_CLOSES(&loop);

  /* --record lines say the track too. */
  file = al_test_read_file(path, &flen);
  ASSERT_NOT_NULL(file);
  {
    char *p = file;
    char *nl;

    for (i = 0; (nl = strchr(p, '\n')) != NULL; i++, p = nl + 1) {
      json_t *j = json_loadb(p, (size_t)(nl - p), 0, NULL);

      ASSERT_NOT_NULL(j);
      ASSERT(i < 8);
      ASSERT(json_is_integer(json_object_get(j, "track")));
      ASSERT(json_integer_value(json_object_get(j, "arrival_ns")) > 0);
      ASSERT_EQ(json_integer_value(json_object_get(j, "track")), want_track[i]);
      ASSERT_EQ(json_integer_value(json_object_get(j, "response_index")),
                want_index[i]);
      json_decref(j);
    }
    ASSERT_EQ(i, 8);
  }
  free(file);
  unlink(path);
  mt_client_free(&c);
  for (i = 0; i < 8; i++) {
    free(reqs[i]);
  }
  return 0;
}

/* Three children on three connections at once, each two requests: whatever
 * the interleaving, each gets its own script in order. */
static int parallel_closed;
static al_mockllm_t *parallel_server;

static void parallel_on_close(mt_client_t *c) {
  (void)c;
  if (++parallel_closed == 3) {
    al_mockllm_close(parallel_server, NULL);
  }
}

TEST_IMPL(mockllm_tracks_parallel_children) {
  static const char *markers[3] = {"CHILD-A", "CHILD-B", "CHILD-C"};
  static const char *texts[3][2] = {
      {"a-1", "a-2"}, {"b-1", "b-2"}, {"c-1", "c-2"}};
  uv_loop_t loop;
  mt_client_t c[3];
  char *reqs[3][2];
  size_t i;
  size_t k;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  parallel_server = mt_server(&loop, routing_yaml, true);
  for (i = 0; i < 3; i++) {
    char first[64];

    snprintf(first, sizeof(first), "\"explore for %s\"", markers[i]);
    reqs[i][0] = ant_body(first, NULL);
    reqs[i][1] = ant_body(first, "tool results");
    mt_client_init(&c[i]);
    mt_client_add(&c[i], reqs[i][0]);
    mt_client_add(&c[i], reqs[i][1]);
    c[i].on_close = parallel_on_close;
  }
  for (i = 0; i < 3; i++) {
    mt_client_start(&c[3 - 1 - i], &loop, al_mockllm_port(parallel_server));
  }
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(parallel_closed, 3);
  for (i = 0; i < 3; i++) {
    ASSERT_EQ(c[i].ncomplete, 2);
    for (k = 0; k < 2; k++) {
      expect_text(&c[i], k, texts[i][k]);
      free(reqs[i][k]);
    }
    mt_client_free(&c[i]);
  }
  return 0;
}

TEST_IMPL(mockllm_tracks_exhausted_per_track) {
  /* No top-level responses: a request no track takes is a 500 saying so.
   * Track 0 says error when used up; track 1 inherits the scenario's
   * cycle; neither's use moves the other's cursor. */
  static const char yaml[] =
      "on_exhausted: cycle\n"
      "tracks:\n"
      "  - match: {first_user_contains: CHILD-A}\n"
      "    on_exhausted: error\n"
      "    responses:\n"
      "      - reply: {content: [{text: a-1}]}\n"
      "  - match: {first_user_contains: CHILD-B}\n"
      "    responses:\n"
      "      - reply: {content: [{text: b-1}]}\n"
      "      - reply: {content: [{text: b-2}]}\n";
  uv_loop_t loop;
  mt_client_t c;
  char *a = ant_body("\"CHILD-A\"", NULL);
  char *b = ant_body("\"CHILD-B\"", NULL);
  char *none = ant_body("\"the parent\"", NULL);
  const al_mockllm_record_t *r;
  al_mockllm_t *m;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  mt_client_add(&c, b);
  mt_client_add(&c, a);
  mt_client_add(&c, a);
  mt_client_add(&c, b);
  mt_client_add(&c, none);
  mt_client_add(&c, b);
  m = mt_server(&loop, yaml, true);
  c.on_close = stop_on_close;
  mt_client_start(&c, &loop, al_mockllm_port(m));
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(c.ncomplete, 6);
  r = al_mockllm_record_get(m, 2);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->track, 0);
  ASSERT_EQ(r->response_index, -1);
  r = al_mockllm_record_get(m, 4);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->track, -1);
  ASSERT_EQ(r->status, 500);
  al_mockllm_close(m, NULL);
  ASSERT_LOOP_CLOSES(&loop);
  expect_text(&c, 0, "b-1");
  expect_text(&c, 1, "a-1");
  ASSERT_EQ(c.status[2], 500);
  ASSERT_NOT_NULL(strstr(c.body[2].data, "track 0 exhausted"));
  expect_text(&c, 3, "b-2");
  ASSERT_EQ(c.status[4], 500);
  ASSERT_NOT_NULL(strstr(c.body[4].data, "no track matches"));
  expect_text(&c, 5, "b-1"); /* cycled */
  mt_client_free(&c);
  free(a);
  free(b);
  free(none);
  return 0;
}

TEST_IMPL(mockllm_tracks_system_and_openai) {
  /* system_contains reads Anthropic's system (string or blocks), OpenAI
   * Chat's system/developer messages and the Responses API's instructions;
   * first_user_contains reads OpenAI content parts and Responses input
   * items. Both conditions of one match must hold. */
  static const char yaml[] =
      "responses:\n"
      "  - reply: {content: [{text: top}]}\n"
      "tracks:\n"
      "  - match: {system_contains: AGENT-EXPLORE, first_user_contains: "
      "CHILD-A}\n"
      "    responses:\n"
      "      - reply: {content: [{text: explore-a}]}\n"
      "  - match: {system_contains: AGENT-EXPLORE}\n"
      "    on_exhausted: cycle\n"
      "    responses:\n"
      "      - reply: {content: [{text: explore}]}\n"
      "  - match: {first_user_contains: CHILD-A}\n"
      "    on_exhausted: cycle\n"
      "    responses:\n"
      "      - reply: {content: [{text: plain-a}]}\n";
  uv_loop_t loop;
  mt_client_t c;
  char *reqs[8];
  size_t i;

  /* 0: OpenAI Chat, system message + user parts: track 0. */
  reqs[0] = mt_openai(
      "{\"model\":\"m\",\"stream\":true,\"messages\":["
      "{\"role\":\"system\",\"content\":\"You are AGENT-EXPLORE.\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
      "\"text\":\"CHILD-A: find x\"}]}]}");
  /* 1: OpenAI Chat, developer message with parts, other user: track 1. */
  reqs[1] = mt_openai(
      "{\"model\":\"m\",\"stream\":true,\"messages\":["
      "{\"role\":\"developer\",\"content\":[{\"type\":\"text\","
      "\"text\":\"AGENT-EXPLORE\"}]},"
      "{\"role\":\"user\",\"content\":\"CHILD-B\"}]}");
  /* 2: OpenAI Chat, no system: track 2. */
  reqs[2] = mt_openai(
      "{\"model\":\"m\",\"stream\":true,\"messages\":["
      "{\"role\":\"user\",\"content\":\"CHILD-A\"}]}");
  /* 3: Anthropic, system blocks: track 1 (the user is not CHILD-A). */
  reqs[3] = mt_anthropic(
      "{\"model\":\"m\",\"max_tokens\":10,\"stream\":true,\"system\":["
      "{\"type\":\"text\",\"text\":\"preamble\"},{\"type\":\"text\","
      "\"text\":\"role AGENT-EXPLORE\"}],\"messages\":[{\"role\":\"user\","
      "\"content\":\"CHILD-C\"}]}");
  /* 4: Anthropic, system string naming the agent only in a later user
   * message: the system holds, so track 1 still. */
  reqs[4] = mt_anthropic(
      "{\"model\":\"m\",\"max_tokens\":10,\"stream\":true,\"system\":"
      "\"AGENT-EXPLORE\",\"messages\":[{\"role\":\"user\","
      "\"content\":\"x\"}]}");
  /* 5: Responses API, instructions + input item parts: track 0. */
  reqs[5] = mt_request(
      "POST", "/v1/responses", "Authorization: Bearer test-key\r\n",
      "{\"model\":\"m\",\"stream\":true,\"instructions\":\"AGENT-EXPLORE\","
      "\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":["
      "{\"type\":\"input_text\",\"text\":\"CHILD-A\"}]}]}");
  /* 6: Responses API, input item with string content, no instructions:
   * track 2. */
  reqs[6] =
      mt_request("POST", "/v1/responses", "Authorization: Bearer test-key\r\n",
                 "{\"model\":\"m\",\"stream\":true,"
                 "\"input\":[{\"role\":\"user\",\"content\":\"do CHILD-A\"}]}");
  /* 7: the system text only in a user message: the top level. */
  reqs[7] = mt_openai(
      "{\"model\":\"m\",\"stream\":true,\"messages\":["
      "{\"role\":\"user\",\"content\":\"AGENT-EXPLORE CHILD-B\"}]}");
  ASSERT_EQ(uv_loop_init(&loop), 0);
  mt_client_init(&c);
  for (i = 0; i < 8; i++) {
    mt_client_add(&c, reqs[i]);
  }
  c.server = mt_server(&loop, yaml, false);
  mt_client_start(&c, &loop, al_mockllm_port(c.server));
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(c.ncomplete, 8);
  {
    static const char *want[8] = {"explore-a", "explore", "plain-a",
                                  "explore",   "explore", "explore-a",
                                  "plain-a",   "top"};

    for (i = 0; i < 8; i++) {
      char needle[64];

      ASSERT_EQ(c.status[i], 200);
      /* OpenAI Chat streams the text as "content", Responses as "delta",
       * Anthropic as "text": the quoted text is in the body either way. */
      snprintf(needle, sizeof(needle), "\"%s\"", want[i]);
      if (strstr(c.body[i].data, needle) == NULL) {
        AL_TEST_FAIL("response %zu: expected %s in\n%s", i, needle,
                     c.body[i].data);
      }
    }
  }
  mt_client_free(&c);
  for (i = 0; i < 8; i++) {
    free(reqs[i]);
  }
  return 0;
}

static void expect_error(const char *yaml, const char *want) {
  al_mockllm_scenario_t *s = NULL;
  char err[512];
  int rc;

  rc = al_mockllm_load_scenario_string(yaml, strlen(yaml), "t.yaml", &s, err,
                                       sizeof(err));
  ASSERT_EQ(rc, AL_EPARSE);
  ASSERT_NULL(s);
  if (strncmp(err, want, strlen(want)) != 0) {
    AL_TEST_FAIL("scenario error\n  got:      %s\n  expected: %s...", err,
                 want);
  }
}

TEST_IMPL(mockllm_tracks_errors) {
  al_mockllm_scenario_t *s = NULL;
  char err[512];
  static const char ok[] =
      "tracks:\n"
      "  - match: {first_user_contains: X}\n"
      "    responses:\n"
      "      - reply: {content: [{text: x}]}\n";

  /* Tracks alone are a whole scenario; the top-level count is 0. */
  ASSERT_EQ(al_mockllm_load_scenario_string(ok, strlen(ok), "t.yaml", &s, err,
                                            sizeof(err)),
            0);
  ASSERT_EQ(al_mockllm_scenario_count(s), 0);
  al_mockllm_scenario_free(s);

  expect_error("model: x\n",
               "t.yaml:1:1: the scenario needs a responses list (or tracks)");
  expect_error("tracks: []\n", "t.yaml:1:9: tracks must be a non-empty list");
  expect_error("tracks: {a: 1}\n",
               "t.yaml:1:9: tracks must be a non-empty list");
  expect_error("tracks:\n  - 3\n", "t.yaml:2:5: a track must be a mapping");
  expect_error(
      "tracks:\n  - match: {first_user_contains: X}\n"
      "    respones: []\n",
      "t.yaml:3:5: unknown key 'respones' in a track (expected "
      "match, responses, on_exhausted)");
  expect_error("tracks:\n  - match: {first_user_contains: X}\n",
               "t.yaml:2:5: a track needs match and responses");
  expect_error("tracks:\n  - responses:\n      - reply: {}\n",
               "t.yaml:2:5: a track needs match and responses");
  expect_error(
      "tracks:\n  - match: {first_user_contains: X}\n"
      "    responses: []\n",
      "t.yaml:3:16: responses must be a non-empty list");
  expect_error("tracks:\n  - match: {}\n    responses:\n      - reply: {}\n",
               "t.yaml:2:12: a track's match needs first_user_contains or "
               "system_contains");
  expect_error(
      "tracks:\n  - match: {first_user: X}\n"
      "    responses:\n      - reply: {}\n",
      "t.yaml:2:13: unknown key 'first_user' in a track's match");
  expect_error(
      "tracks:\n  - match: {system_contains: \"\"}\n"
      "    responses:\n      - reply: {}\n",
      "t.yaml:2:30: system_contains must not be empty");
  expect_error(
      "tracks:\n  - match: {first_user_contains: [a]}\n"
      "    responses:\n      - reply: {}\n",
      "t.yaml:2:34: first_user_contains must be a string");
  expect_error(
      "tracks:\n  - match: first\n"
      "    responses:\n      - reply: {}\n",
      "t.yaml:2:12: a track's match must be a mapping");
  expect_error(
      "tracks:\n  - match: {first_user_contains: X}\n"
      "    on_exhausted: stop\n    responses:\n      - reply: {}\n",
      "t.yaml:3:19: on_exhausted must be repeat_last, error or "
      "cycle");
  /* A track's responses are checked like the top level's. */
  expect_error(
      "tracks:\n  - match: {first_user_contains: X}\n"
      "    responses:\n      - reply: {content: [{txt: a}]}\n",
      "t.yaml:4:28: unknown key 'txt' in a content block");
  return 0;
}
