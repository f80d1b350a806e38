/* Issue 14's provider cases through agentloopd over its socket: the
 * Responses API, a DeepSeek-style reasoning round-trip, Anthropic
 * pause_turn with server tools and citations. Each session then outlives a
 * daemon restart: session/resume rebuilds the history from the transcript
 * and the next request must still pass the mock's validator (reasoning
 * items and reasoning_content echoed, server-tool blocks kept), and a
 * subscriber replaying from seq 0 gets the citation and provider_notice
 * events again. */
#include "dtest.h"
#include "session/session.h"

static bool exited(void *data) { return ((dt_t *)data)->exited; }

/* The recorded capture `name` as a `raw:` response dripped in random
 * slices (docs/mockllm.md), appended to b. */
static void append_raw(al_buf_t *b, const char *name, const char *from,
                       const char *to, unsigned seed) {
  char path[256];
  char *body;
  const char *p;

  snprintf(path, sizeof(path), "compat/%s.sse", name);
  body = al_test_read_file(al_test_data_path(path), NULL);
  ASSERT_NOT_NULL(body);
  al_buf_append_str(b, "  - raw: |+\n");
  p = body;
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);

    if (n > 0) {
      const char *hit;

      al_buf_append_str(b, "      ");
      /* One substitution per line at most: the second round's call id. */
      if (from != NULL && (hit = memmem(p, n, from, strlen(from))) != NULL) {
        al_buf_append(b, p, (size_t)(hit - p));
        al_buf_append_str(b, to);
        al_buf_append(b, hit + strlen(from),
                      n - (size_t)(hit - p) - strlen(from));
      } else {
        al_buf_append(b, p, n);
      }
    }
    al_buf_append_str(b, "\n");
    p += n + (nl != NULL ? 1 : 0);
  }
  al_buf_printf(b, "    fault:\n      drip: {bytes: 17, seed: %u}\n", seed);
  free(body);
}

static const json_t *ev(const dt_client_t *c, size_t i) {
  return json_object_get(json_array_get(c->msgs, i), "params");
}

static const char *ev_str(const dt_client_t *c, size_t i, const char *k) {
  const char *v = json_string_value(json_object_get(ev(c, i), k));

  return v != NULL ? v : "";
}

/* turn/send and the index of the run's end event (final or error) after
 * the messages already there. */
static size_t send_turn(dt_client_t *c, int id, const char *sid,
                        const char *input) {
  char p[512];
  size_t from = json_array_size(c->msgs);
  json_t *r;

  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"%s\"}", sid, input);
  r = dt_call(c, id, "turn/send", p);
  if (dt_err(r) != 0) {
    AL_TEST_FAIL("turn/send: %s", json_dumps(r, 0));
  }
  for (;;) {
    size_t i;

    for (i = from; i < json_array_size(c->msgs); i++) {
      const char *t = dt_ev_type(c, i);

      if (strcmp(t, "final") == 0 || strcmp(t, "error") == 0) {
        return i;
      }
    }
    ASSERT(!c->eof);
    uv_run(&c->t->loop, UV_RUN_ONCE);
  }
}

/* First index >= from of an event of `type` already received, or -1. */
static long find_ev(const dt_client_t *c, const char *type, size_t from) {
  size_t i;

  for (i = from; i < json_array_size(c->msgs); i++) {
    if (strcmp(dt_ev_type(c, i), type) == 0) {
      return (long)i;
    }
  }
  return -1;
}

/* Creates a session with `params` (cwd added), subscribes c. */
static void open_session(dt_t *t, dt_client_t *c, const char *params,
                         char *sid, size_t len) {
  char p[1024];

  dt_connect(t, c);
  dt_init_client(c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"%s%s}", t->work,
           params[0] != '\0' ? "," : "", params);
  dt_create(c, p, sid, len);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(c, 3, "session/subscribe", p);
}

static void write_file(const dt_t *t, const char *name, const char *text) {
  char path[300];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", t->work, name);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

/* Stops the daemon (it flushes the transcript), starts a new one on the
 * same state directory, connects c2 and resumes sid with `params`. */
static void restart_resume(dt_t *t, dt_client_t *c, dt_client_t *c2,
                           const char *sid, const char *params) {
  char p[1024];
  json_t *r;

  al__daemon_shutdown(t->d);
  dt_run_until(t, exited, t);
  dt_wait_eof(c);
  t->exited = false;
  dt_start(t);
  dt_connect(t, c2);
  dt_init_client(c2);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"%s%s}", sid,
           params[0] != '\0' ? "," : "", params);
  r = dt_call(c2, 5, "session/resume", p);
  if (json_object_get(json_object_get(r, "result"), "recovered") == NULL) {
    AL_TEST_FAIL("resume failed: %s", json_dumps(r, 0));
  }
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(json_object_get(r, "result"), "recovered"),
                "bad_lines")),
            0);
}

/* Subscribes c2 from seq 0 and waits for the whole replay (up to the
 * seq before next_seq); returns the index from which the replay is in c2->msgs. */
typedef struct {
  dt_client_t *c;
  size_t at;
  json_int_t last;
} replay_wait_t;

static bool replay_done(void *data) {
  replay_wait_t *w = data;
  size_t i;

  ASSERT(!w->c->eof);
  for (i = w->at; i < json_array_size(w->c->msgs); i++) {
    if (dt_ev_type(w->c, i)[0] != '\0' &&
        json_integer_value(json_object_get(ev(w->c, i), "seq")) == w->last) {
      return true;
    }
  }
  return false;
}

static size_t replay_all(dt_client_t *c2, const char *sid) {
  char p[256];
  json_t *r;
  replay_wait_t w;

  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"since_seq\":0}", sid);
  w.c = c2;
  w.at = json_array_size(c2->msgs); /* replayed events may come with r */
  r = dt_call(c2, 6, "session/subscribe", p);
  w.last = json_integer_value(
               json_object_get(json_object_get(r, "result"), "next_seq")) -
           1;
  ASSERT_EQ(json_integer_value(
                json_object_get(json_object_get(r, "result"), "replay_from")),
            1);
  dt_run_until(c2->t, replay_done, &w);
  return w.at;
}

static const json_t *req_body(const dt_t *t, size_t i) {
  const al_mockllm_record_t *r = al_mockllm_record_get(t->mock, i);

  ASSERT_NOT_NULL(r);
  return r->body;
}

/* (1) provider openai-responses: a tool round and a final answer through
 * the daemon; the reasoning item (encrypted_content) and the
 * function_call/function_call_output pair go back; the tool starts at its
 * own output_item.done, before the response's usage. After a restart the
 * resumed history is sent again and accepted. */
TEST_IMPL(daemon_compat_responses) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - thinking: \"Plan: read a.\"\n"
      "          signature: \"unused\"\n"
      "        - tool_use: {id: call_r1, name: read_file, input: {path: "
      "a.txt}}\n"
      "        - text: \"Reading.\"\n"
      "  - reply: {content: [{text: 'It says alpha.'}]}\n"
      "  - reply: {content: [{text: 'Still alpha.'}]}\n";
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cs[] = {&c, &c2};
  char p[512];
  char sid[64];
  size_t end, i;
  long started, usage;
  const json_t *it;
  int reasoning = 0, calls = 0, outputs = 0;

  dt_init(&t, yaml);
  dt_start(&t);
  write_file(&t, "a.txt", "alpha\n");
  snprintf(p, sizeof(p),
           "\"provider\":\"openai-responses\",\"base_url\":\"%s/v1\","
           "\"api_key\":\"k-test\"",
           t.url);
  open_session(&t, &c, p, sid, sizeof(sid));
  end = send_turn(&c, 4, sid, "what does a.txt say?");
  ASSERT_STR_EQ(dt_ev_type(&c, end), "final");
  ASSERT_STR_EQ(ev_str(&c, end, "text"), "It says alpha.");
  ASSERT_STR_EQ(ev_str(&c, (size_t)find_ev(&c, "run_started", 0), "provider"),
                "openai-responses");
  ASSERT_EQ(al_mockllm_record_count(t.mock), 2);
  dt_assert_valid(&t);
  ASSERT_STR_EQ(al_mockllm_record_get(t.mock, 1)->path, "/v1/responses");
  ASSERT(json_is_false(json_object_get(req_body(&t, 1), "store")));
  json_array_foreach(json_object_get(req_body(&t, 1), "input"), i, it) {
    const char *ty = json_string_value(json_object_get(it, "type"));

    reasoning += ty != NULL && strcmp(ty, "reasoning") == 0 &&
                 json_string_value(json_object_get(it, "encrypted_content")) !=
                     NULL;
    calls += ty != NULL && strcmp(ty, "function_call") == 0;
    outputs += ty != NULL && strcmp(ty, "function_call_output") == 0;
  }
  ASSERT_EQ(reasoning, 1);
  ASSERT_EQ(calls, 1);
  ASSERT_EQ(outputs, 1);
  started = find_ev(&c, "tool_use_started", 0);
  usage = find_ev(&c, "usage", 0);
  ASSERT(started >= 0 && usage > started);
  ASSERT_STR_EQ(ev_str(&c, (size_t)started, "call_id"), "call_r1");

  /* A new daemon: the transcript gives back the reasoning item whole. */
  restart_resume(&t, &c, &c2, sid, "\"api_key\":\"k-test\"");
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c2, 6, "session/subscribe", p);
  end = send_turn(&c2, 7, sid, "and now?");
  ASSERT_STR_EQ(dt_ev_type(&c2, end), "final");
  ASSERT_STR_EQ(ev_str(&c2, end, "text"), "Still alpha.");
  ASSERT_EQ(al_mockllm_record_count(t.mock), 3);
  dt_assert_valid(&t);
  ASSERT_STR_EQ(al_mockllm_record_get(t.mock, 2)->path, "/v1/responses");
  {
    json_t *a = json_object_get(req_body(&t, 1), "input");
    json_t *b = json_object_get(req_body(&t, 2), "input");

    /* The earlier input, item for item, then the new user message. */
    ASSERT_GE(json_array_size(b), json_array_size(a) + 2);
    for (i = 0; i < json_array_size(a); i++) {
      if (!json_equal(json_array_get(a, i), json_array_get(b, i))) {
        AL_TEST_FAIL("input item %zu differs after resume:\n  before: %s\n"
                     "  after:  %s",
                     i, json_dumps(json_array_get(a, i), JSON_SORT_KEYS),
                     json_dumps(json_array_get(b, i), JSON_SORT_KEYS));
      }
    }
  }
  dt_finish(&t, cs, 2);
  return 0;
}

/* The assistant messages of request i, in order. */
static const json_t *assistant_k(const dt_t *t, size_t req, size_t k) {
  const json_t *m;
  size_t i;

  json_array_foreach(json_object_get(req_body(t, req), "messages"), i, m) {
    const char *role = json_string_value(json_object_get(m, "role"));

    if (role != NULL && strcmp(role, "assistant") == 0 && k-- == 0) {
      return m;
    }
  }
  return NULL;
}

/* (2) DeepSeek thinking mode (mockllm require_reasoning answers a missing
 * reasoning_content with DeepSeek's 400): the catalogue's echo_reasoning
 * for deepseek-* carries it back on both tool rounds, through the daemon;
 * after a restart the transcript still has it, so the resumed session's
 * next request (holding both tool-call messages) is accepted too. */
TEST_IMPL(daemon_compat_deepseek_reasoning) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cs[] = {&c, &c2};
  al_buf_t y;
  char p[512];
  char sid[64];
  size_t end;
  int k;

  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "require_reasoning: reasoning_content\nresponses:\n");
  append_raw(&y, "deepseek_think_tool", NULL, NULL, 11);
  append_raw(&y, "deepseek_think_tool", "call_00_abc", "call_01_def", 12);
  al_buf_append_str(&y, "  - reply: {content: [{text: 'Both read.'}]}\n"
                        "  - reply: {content: [{text: 'Still read.'}]}\n");
  dt_init(&t, y.data);
  dt_start(&t);
  write_file(&t, "a.txt", "alpha\n");
  snprintf(p, sizeof(p),
           "\"provider\":\"openai\",\"model\":\"deepseek-chat\","
           "\"base_url\":\"%s/v1\",\"api_key\":\"k-test\"",
           t.url);
  open_session(&t, &c, p, sid, sizeof(sid));
  end = send_turn(&c, 4, sid, "read a twice");
  if (strcmp(dt_ev_type(&c, end), "final") != 0) {
    AL_TEST_FAIL("the run ended with %s", json_dumps(ev(&c, end), 0));
  }
  ASSERT_STR_EQ(ev_str(&c, end, "text"), "Both read.");
  ASSERT_EQ(al_mockllm_record_count(t.mock), 3);
  dt_assert_valid(&t);
  ASSERT_STR_EQ(json_string_value(json_object_get(assistant_k(&t, 2, 1),
                                                  "reasoning_content")),
                "Need the file.");
  /* The thinking streamed to the client as thinking. */
  ASSERT(find_ev(&c, "thinking_delta", 0) >= 0);

  restart_resume(&t, &c, &c2, sid, "\"api_key\":\"k-test\"");
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c2, 6, "session/subscribe", p);
  end = send_turn(&c2, 7, sid, "once more");
  if (strcmp(dt_ev_type(&c2, end), "final") != 0) {
    AL_TEST_FAIL("the resumed run ended with %s",
                 json_dumps(ev(&c2, end), 0));
  }
  ASSERT_EQ(al_mockllm_record_count(t.mock), 4);
  dt_assert_valid(&t);
  for (k = 0; k < 2; k++) {
    const json_t *m = assistant_k(&t, 3, (size_t)k);

    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(json_object_get(m, "tool_calls"));
    ASSERT_STR_EQ(json_string_value(json_object_get(m, "reasoning_content")),
                  "Need the file.");
  }
  al_buf_free(&y);
  dt_finish(&t, cs, 2);
  return 0;
}

/* OpenRouter: reasoning_details (a signed text entry, an encrypted one)
 * go back exactly as merged on both tool rounds, and again from the
 * transcript after a restart. */
TEST_IMPL(daemon_compat_openrouter_details) {
  static const char want_s[] =
      "[{\"type\":\"reasoning.text\",\"text\":\"I should look it up.\","
      "\"format\":\"anthropic-claude-v1\",\"index\":0,\"signature\":"
      "\"EqQBCkYIBxgCKkBsig==\"},{\"type\":\"reasoning.encrypted\",\"data\":"
      "\"gAAAAABencrypted==\",\"format\":\"anthropic-claude-v1\","
      "\"index\":1}]";
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cs[] = {&c, &c2};
  al_buf_t y;
  char p[512];
  char sid[64];
  size_t end;
  json_t *want = json_loads(want_s, 0, NULL);
  int k;

  ASSERT_NOT_NULL(want);
  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "require_reasoning: reasoning_details\nresponses:\n");
  append_raw(&y, "openrouter_reasoning", NULL, NULL, 51);
  append_raw(&y, "openrouter_reasoning", "\"toolu_01X\"", "\"toolu_02Y\"", 52);
  al_buf_append_str(&y, "  - reply: {content: [{text: 'Both read.'}]}\n"
                        "  - reply: {content: [{text: 'Still read.'}]}\n");
  dt_init(&t, y.data);
  dt_start(&t);
  write_file(&t, "a.txt", "alpha\n");
  snprintf(p, sizeof(p),
           "\"provider\":\"openai\",\"model\":\"anthropic/claude-sonnet-4\","
           "\"base_url\":\"%s/v1\",\"api_key\":\"k-test\"",
           t.url);
  open_session(&t, &c, p, sid, sizeof(sid));
  end = send_turn(&c, 4, sid, "look it up twice");
  if (strcmp(dt_ev_type(&c, end), "final") != 0) {
    AL_TEST_FAIL("the run ended with %s", json_dumps(ev(&c, end), 0));
  }
  ASSERT_EQ(al_mockllm_record_count(t.mock), 3);
  dt_assert_valid(&t);

  restart_resume(&t, &c, &c2, sid, "\"api_key\":\"k-test\"");
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c2, 6, "session/subscribe", p);
  end = send_turn(&c2, 7, sid, "once more");
  if (strcmp(dt_ev_type(&c2, end), "final") != 0) {
    AL_TEST_FAIL("the resumed run ended with %s",
                 json_dumps(ev(&c2, end), 0));
  }
  ASSERT_EQ(al_mockllm_record_count(t.mock), 4);
  dt_assert_valid(&t);
  for (k = 0; k < 2; k++) {
    const json_t *m = assistant_k(&t, 3, (size_t)k);

    ASSERT_NOT_NULL(m);
    if (!json_equal(json_object_get(m, "reasoning_details"), want)) {
      AL_TEST_FAIL("assistant %d after resume: %s", k,
                   json_dumps(json_object_get(m, "reasoning_details"), 0));
    }
  }
  json_decref(want);
  al_buf_free(&y);
  dt_finish(&t, cs, 2);
  return 0;
}

/* (3) + (4) Anthropic pause_turn with server-tool blocks, through the
 * daemon: the paused reply goes back and the model continues the same
 * turn; the provider_notice and the citation reach the socket client,
 * and after a restart a subscriber replaying from seq 0 gets both again
 * with the same content; the next request still holds the server-tool
 * blocks. */
TEST_IMPL(daemon_compat_pause_turn_citations) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cs[] = {&c, &c2};
  al_buf_t y;
  char sid[64];
  size_t end, at;
  long notice, cit, r_notice, r_cit;
  char *s;

  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "responses:\n");
  append_raw(&y, "anthropic_pause_turn", NULL, NULL, 21);
  append_raw(&y, "anthropic_after_pause", NULL, NULL, 22);
  al_buf_append_str(&y, "  - reply: {content: [{text: 'Still sunny.'}]}\n");
  dt_init(&t, y.data);
  dt_start(&t);
  open_session(&t, &c, "", sid, sizeof(sid));
  end = send_turn(&c, 4, sid, "weather in paris?");
  ASSERT_STR_EQ(dt_ev_type(&c, end), "final");
  ASSERT_STR_EQ(ev_str(&c, end, "text"), "Let me search. It is sunny.");
  ASSERT_EQ(al_mockllm_record_count(t.mock), 2);
  dt_assert_valid(&t);
  notice = find_ev(&c, "provider_notice", 0);
  ASSERT(notice >= 0);
  ASSERT_STR_EQ(ev_str(&c, (size_t)notice, "kind"), "pause_turn");
  ASSERT_EQ(find_ev(&c, "provider_notice", (size_t)notice + 1), -1);
  cit = find_ev(&c, "citation", 0);
  ASSERT(cit >= 0);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(ev(&c, (size_t)cit), "citation"), "url")),
                "https://w.example/paris");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(ev(&c, (size_t)cit), "citation"),
                    "cited_text")),
                "Sunny all week");
  /* One turn, continued. */
  {
    long ts = find_ev(&c, "turn_started", 0);

    ASSERT(ts >= 0);
    ASSERT_EQ(find_ev(&c, "turn_started", (size_t)ts + 1), -1);
  }

  restart_resume(&t, &c, &c2, sid, "");
  at = replay_all(&c2, sid);
  r_notice = find_ev(&c2, "provider_notice", at);
  r_cit = find_ev(&c2, "citation", at);
  ASSERT(r_notice >= 0);
  ASSERT(r_cit >= 0);
  ASSERT(json_equal(ev(&c2, (size_t)r_notice), ev(&c, (size_t)notice)));
  ASSERT(json_equal(ev(&c2, (size_t)r_cit), ev(&c, (size_t)cit)));

  end = send_turn(&c2, 7, sid, "and tomorrow?");
  ASSERT_STR_EQ(dt_ev_type(&c2, end), "final");
  ASSERT_STR_EQ(ev_str(&c2, end, "text"), "Still sunny.");
  ASSERT_EQ(al_mockllm_record_count(t.mock), 3);
  dt_assert_valid(&t);
  s = json_dumps(req_body(&t, 2), 0);
  ASSERT_NOT_NULL(strstr(s, "\"server_tool_use\""));
  ASSERT_NOT_NULL(strstr(s, "\"web_search_tool_result\""));
  ASSERT_NOT_NULL(strstr(s, "\"srvtoolu_01\""));
  free(s);
  al_buf_free(&y);
  dt_finish(&t, cs, 2);
  return 0;
}

/* (4) OpenAI-compatible citations (Perplexity) and the stop_inferred
 * notice (a vLLM-style stream without finish_reason) reach the socket
 * client and are replayed after a restart. */
TEST_IMPL(daemon_compat_openai_citations_notice) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cs[] = {&c, &c2};
  al_buf_t y;
  char p[512];
  char sid[64];
  size_t end, at, i;
  int live_cites = 0, replay_cites = 0;
  long notice, r_notice;

  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "responses:\n");
  append_raw(&y, "perplexity_citations", NULL, NULL, 31);
  append_raw(&y, "vllm_no_finish", NULL, NULL, 32);
  dt_init(&t, y.data);
  dt_start(&t);
  snprintf(p, sizeof(p),
           "\"provider\":\"openai\",\"base_url\":\"%s/v1\","
           "\"api_key\":\"k-test\"",
           t.url);
  open_session(&t, &c, p, sid, sizeof(sid));
  end = send_turn(&c, 4, sid, "sources?");
  ASSERT_STR_EQ(dt_ev_type(&c, end), "final");
  for (i = 0; i < json_array_size(c.msgs); i++) {
    if (strcmp(dt_ev_type(&c, i), "citation") == 0) {
      ASSERT_NOT_NULL(json_string_value(json_object_get(
          json_object_get(ev(&c, i), "citation"), "url")));
      live_cites++;
    }
  }
  ASSERT_GE(live_cites, 1);
  end = send_turn(&c, 5, sid, "and?");
  ASSERT_STR_EQ(dt_ev_type(&c, end), "final");
  notice = find_ev(&c, "provider_notice", 0);
  ASSERT(notice >= 0);
  ASSERT_STR_EQ(ev_str(&c, (size_t)notice, "kind"), "stop_inferred");
  dt_assert_valid(&t);

  restart_resume(&t, &c, &c2, sid, "\"api_key\":\"k-test\"");
  at = replay_all(&c2, sid);
  for (i = at; i < json_array_size(c2.msgs); i++) {
    replay_cites += strcmp(dt_ev_type(&c2, i), "citation") == 0;
  }
  ASSERT_EQ(replay_cites, live_cites);
  r_notice = find_ev(&c2, "provider_notice", at);
  ASSERT(r_notice >= 0);
  ASSERT(json_equal(ev(&c2, (size_t)r_notice), ev(&c, (size_t)notice)));
  al_buf_free(&y);
  dt_finish(&t, cs, 2);
  return 0;
}

/* (5) Mistral's content parts over the socket: thinking parts arrive as
 * thinking_delta, text parts as text_delta, the final text is the text
 * parts only; after a restart the replay holds the same thinking. */
TEST_IMPL(daemon_compat_content_parts) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cs[] = {&c, &c2};
  al_buf_t y, think, think2;
  char p[512];
  char sid[64];
  size_t end, at, i;

  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "responses:\n");
  append_raw(&y, "mistral_parts", NULL, NULL, 41);
  dt_init(&t, y.data);
  dt_start(&t);
  snprintf(p, sizeof(p),
           "\"provider\":\"openai\",\"model\":\"magistral-medium-2506\","
           "\"base_url\":\"%s/v1\",\"api_key\":\"k-test\"",
           t.url);
  open_session(&t, &c, p, sid, sizeof(sid));
  end = send_turn(&c, 4, sid, "two plus two?");
  ASSERT_STR_EQ(dt_ev_type(&c, end), "final");
  ASSERT_STR_EQ(ev_str(&c, end, "text"), "The answer is 4.");
  al_buf_init(&think, 1 << 16);
  al_buf_append(&think, "", 0);
  for (i = 0; i < json_array_size(c.msgs); i++) {
    if (strcmp(dt_ev_type(&c, i), "thinking_delta") == 0) {
      al_buf_append_str(&think, ev_str(&c, i, "text"));
    }
  }
  ASSERT_STR_EQ(think.data, "Two plus two is four.");
  dt_assert_valid(&t);

  restart_resume(&t, &c, &c2, sid, "\"api_key\":\"k-test\"");
  at = replay_all(&c2, sid);
  al_buf_init(&think2, 1 << 16);
  al_buf_append(&think2, "", 0);
  for (i = at; i < json_array_size(c2.msgs); i++) {
    if (strcmp(dt_ev_type(&c2, i), "thinking_delta") == 0) {
      al_buf_append_str(&think2, ev_str(&c2, i, "text"));
    }
  }
  ASSERT_STR_EQ(think2.data, think.data);
  al_buf_free(&think);
  al_buf_free(&think2);
  al_buf_free(&y);
  dt_finish(&t, cs, 2);
  return 0;
}
