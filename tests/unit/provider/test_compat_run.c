/* The recorded-shape cases of test_compat.c through the agent loop: the
 * same bytes, played by agentloop-mockllm over loopback HTTP in random
 * slices (drip with a seed, several seeds), decoded by `run`'s pipeline.
 * The committed assistant message must hold the same blocks decode
 * gives, with the same notices and citations as LoopEvents, the same
 * normalized stop reason and uncached input tokens; a tool call starts
 * its tool with its own id and input. */
#include <unistd.h>

#include "provider/provider.h"
#include "test.h"
#include "unit/loop/agent_fx.h"
#include "unit/provider/compat.h"

/* The scenario: the recorded body as a raw response dripped in random
 * slices of 1..`slice` bytes, then a plain answer for the next turn. */
static char *raw_yaml(const char *body, unsigned slice, unsigned seed) {
  al_buf_t b;
  const char *p = body;

  al_buf_init(&b, (size_t)1 << 24);
  al_buf_append_str(&b, "responses:\n  - raw: |+\n"); /* keep: the final blank line */
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);

    if (n > 0) {
      al_buf_append_str(&b, "      ");
      al_buf_append(&b, p, n);
    }
    al_buf_append_str(&b, "\n");
    p += n + (nl != NULL ? 1 : 0);
  }
  al_buf_printf(&b,
                "    fault:\n      drip: {bytes: %u, seed: %u}\n"
                "  - reply: {content: [{text: 'All done.'}]}\n",
                slice, seed);
  return b.data;
}

static const json_t *first_assistant(json_t *hist) {
  size_t i;
  json_t *m;

  json_array_foreach(json_object_get(hist, "messages"), i, m) {
    if (strcmp(json_string_value(json_object_get(m, "role")), "assistant") ==
        0) {
      return m;
    }
  }
  return NULL;
}

static void run_case(const char *name, unsigned seed) {
  const compat_case_t *c = &compat_cases[compat_find(name)];
  char path[256];
  char *body;
  char *yaml;
  char *h;
  json_t *hist;
  json_t *msg;
  al_buf_t side;
  fx_t f;
  size_t i;
  char *got;
  const char *exp_stop;
  const char *exp_in;
  long tc;

  snprintf(path, sizeof(path), "compat/%s.sse", name);
  body = al_test_read_file(al_test_data_path(path), NULL);
  ASSERT_NOT_NULL(body);
  yaml = raw_yaml(body, 1 + seed % 40, seed);
  fx_init_proto(&f, yaml, c->provider != NULL ? c->provider : "openai");
  if (c->think_tags) {
    f.opts.model = "qwq-32b"; /* the catalogue says: think tags */
  }
  fx_start(&f);
  fx_write(&f, "a.txt", "alpha\n");
  fx_write(&f, "b.txt", "beta\n");
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  al_buf_init(&side, 1 << 20);
  al_buf_append(&side, "", 0);
  for (i = 0; i < json_array_size(f.events); i++) {
    const json_t *e = fx_event(&f, (long)i);
    const char *t = fx_jstr(e, "type");

    if (strcmp(t, "provider_notice") == 0) {
      al_buf_printf(&side, "notice:%s;", fx_jstr(e, "kind"));
    } else if (strcmp(t, "citation") == 0 &&
               json_integer_value(json_object_get(e, "turn")) == 1) {
      const json_t *ci = json_object_get(e, "citation");

      al_buf_printf(&side, "cite:%d:%s:%s;",
                    (int)json_integer_value(json_object_get(e, "index")),
                    fx_jstr(ci, "url") ? fx_jstr(ci, "url") : "-",
                    fx_jstr(ci, "title") ? fx_jstr(ci, "title") : "-");
    }
  }
  ASSERT_EQ(al_agent_history_json(f.agent, &h), 0);
  hist = json_loads(h, 0, NULL);
  al_free(h);
  ASSERT_NOT_NULL(hist);
  msg = json_deep_copy(first_assistant(hist));
  ASSERT_NOT_NULL(msg);
  /* Blocks and side events as decode gives them; stop and usage from the
   * turn's events. */
  json_object_set_new(msg, "stop_reason", json_null());
  json_object_set_new(msg, "usage", json_null());
  got = compat_summary(msg, side.data);
  {
    const char *sp = strstr(c->expected, " stop=");
    const char *gp = strstr(got, " stop=");
    const char *sside = strchr(strstr(c->expected, "usage="), ' ');

    ASSERT(sp != NULL && gp != NULL && sside != NULL);
    if ((size_t)(gp - got) != (size_t)(sp - c->expected) ||
        memcmp(got, c->expected, (size_t)(sp - c->expected)) != 0 ||
        strcmp(strchr(strstr(got, "usage="), ' '), sside) != 0) {
      AL_TEST_FAIL("%s (run, seed %u):\n  got:      %s\n  expected: %s", name,
                   seed, got, c->expected);
    }
  }
  exp_stop = strstr(c->expected, " stop=") + 6;
  tc = fx_find(&f, "turn_completed", NULL, 0);
  ASSERT(tc >= 0);
  ASSERT_EQ(strncmp(fx_jstr(fx_event(&f, tc), "stop_reason"), exp_stop,
                    strlen(fx_jstr(fx_event(&f, tc), "stop_reason"))),
            0);
  exp_in = strstr(c->expected, "\"input_tokens\":");
  if (exp_in != NULL) {
    long u = fx_find(&f, "usage", NULL, 0);

    ASSERT(u >= 0);
    ASSERT_EQ(json_integer_value(json_object_get(fx_event(&f, u),
                                                 "input_tokens")),
              strtoll(exp_in + 15, NULL, 10));
  }
  /* Every tool_use block started its tool with its id. */
  {
    size_t k;
    json_t *blk;

    json_array_foreach(json_object_get(msg, "content"), k, blk) {
      const char *id = fx_jstr(blk, "id");

      if (strcmp(fx_jstr(blk, "type"), "tool_use") == 0) {
        long st = fx_find(&f, "tool_use_started", id, 0);
        long done = fx_find(&f, "tool_use_completed", id, 0);

        ASSERT(st >= 0);
        ASSERT(done >= 0);
        ASSERT_EQ(json_is_true(json_object_get(fx_event(&f, done),
                                               "is_error")),
                  0);
      }
    }
  }
  free(got);
  json_decref(msg);
  json_decref(hist);
  al_buf_free(&side);
  fx_finish(&f);
  free(yaml);
  free(body);
}

#define COMPAT_RUN_TEST(n)                 \
  TEST_IMPL(compat_run_##n) {              \
    unsigned seed;                         \
    for (seed = 1; seed <= 5; seed++) {    \
      run_case(#n, seed * 7919u);          \
    }                                      \
    return 0;                              \
  }

COMPAT_RUN_TEST(mistral_parts)
COMPAT_RUN_TEST(mistral_tools_noindex)
COMPAT_RUN_TEST(azure_empty_first)
COMPAT_RUN_TEST(openrouter_reasoning)
COMPAT_RUN_TEST(vllm_no_finish)
COMPAT_RUN_TEST(perplexity_citations)
COMPAT_RUN_TEST(openrouter_annotations)
COMPAT_RUN_TEST(deepseek_think_tool)
COMPAT_RUN_TEST(think_tags)
COMPAT_RUN_TEST(responses_tool)
COMPAT_RUN_TEST(responses_text)

/* Replaces every `from` in s by `to` (malloc'd). */
static char *replace_all(const char *s, const char *from, const char *to) {
  al_buf_t b;
  const char *p;

  al_buf_init(&b, (size_t)1 << 24);
  while ((p = strstr(s, from)) != NULL) {
    al_buf_append(&b, s, (size_t)(p - s));
    al_buf_append_str(&b, to);
    s = p + strlen(from);
  }
  al_buf_append_str(&b, s);
  return b.data;
}

static void append_raw(al_buf_t *b, const char *body) {
  const char *p = body;

  al_buf_append_str(b, "  - raw: |+\n");
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);

    if (n > 0) {
      al_buf_append_str(b, "      ");
      al_buf_append(b, p, n);
    }
    al_buf_append_str(b, "\n");
    p += n + (nl != NULL ? 1 : 0);
  }
  al_buf_append_str(b, "    fault:\n      drip: {bytes: 13, seed: 4242}\n");
}

/* Two tool rounds with a server that refuses like DeepSeek's thinking
 * mode when an assistant message with tool_calls lacks its reasoning
 * (mockllm require_reasoning). `model` picks the catalogue entry. */
static void two_rounds(fx_t *f, const char *name, const char *field,
                       const char *model) {
  al_buf_t y;
  size_t len;
  char path[256];
  char *body;
  char *body2;
  char *tmp;

  snprintf(path, sizeof(path), "compat/%s.sse", name);
  body = al_test_read_file(al_test_data_path(path), &len);
  ASSERT_NOT_NULL(body);
  tmp = replace_all(body, "a.txt", "b.txt");
  body2 = replace_all(tmp, "\"id\":\"call_00_abc\"", "\"id\":\"call_01_def\"");
  free(tmp);
  tmp = body2;
  body2 = replace_all(tmp, "\"id\":\"toolu_01X\"", "\"id\":\"toolu_02Y\"");
  free(tmp);
  al_buf_init(&y, (size_t)1 << 24);
  al_buf_printf(&y, "require_reasoning: %s\nresponses:\n", field);
  append_raw(&y, body);
  append_raw(&y, body2);
  al_buf_append_str(&y, "  - reply: {content: [{text: 'Both read.'}]}\n");
  fx_init_proto(f, y.data, "openai");
  f->opts.model = model;
  fx_start(f);
  fx_write(f, "a.txt", "alpha\n");
  fx_write(f, "b.txt", "beta\n");
  fx_run(f, "read a then b");
  al_buf_free(&y);
  free(body);
  free(body2);
}

/* The assistant message (with tool_calls) of request `req`, index k. */
static const json_t *sent_assistant(fx_t *f, size_t req, size_t k) {
  const json_t *msgs =
      json_object_get(fx_request(f, req)->body, "messages");
  size_t i;
  const json_t *m;

  json_array_foreach(msgs, i, m) {
    if (strcmp(fx_jstr(m, "role"), "assistant") == 0 && k-- == 0) {
      return m;
    }
  }
  return NULL;
}

/* DeepSeek thinking mode: the catalogue's echo_reasoning puts each
 * assistant message's reasoning back in reasoning_content, so both tool
 * rounds are accepted; a model without the rule gets the very 400. */
TEST_IMPL(compat_roundtrip_deepseek) {
  fx_t f;
  const json_t *m;

  two_rounds(&f, "deepseek_think_tool", "reasoning_content", "deepseek-chat");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 3);
  fx_assert_valid(&f);
  m = sent_assistant(&f, 1, 0);
  ASSERT_NOT_NULL(m);
  ASSERT_STR_EQ(fx_jstr(m, "reasoning_content"), "Need the file.");
  m = sent_assistant(&f, 2, 1);
  ASSERT_NOT_NULL(m);
  ASSERT_STR_EQ(fx_jstr(m, "reasoning_content"), "Need the file.");
  fx_finish(&f);

  /* The control: the same server refuses a client that drops it. */
  two_rounds(&f, "deepseek_think_tool", "reasoning_content", "plain-model");
  ASSERT_STR_EQ(fx_last_type(&f), "error");
  ASSERT(fx_find(&f, "api_error", NULL, 0) >= 0);
  ASSERT_NOT_NULL(strstr(fx_jstr(fx_event(&f, fx_find(&f, "api_error", NULL, 0)),
                                 "message"),
                         "reasoning_content"));
  fx_finish(&f);
  return 0;
}

/* OpenRouter: reasoning_details (a signed text entry and an encrypted
 * one) go back exactly as merged, whatever the model's catalogue says. */
TEST_IMPL(compat_roundtrip_openrouter) {
  fx_t f;
  const json_t *m;
  json_t *want;

  two_rounds(&f, "openrouter_reasoning", "reasoning_details",
             "anthropic/claude-sonnet-4");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 3);
  m = sent_assistant(&f, 1, 0);
  ASSERT_NOT_NULL(m);
  want = json_loads(
      "[{\"type\":\"reasoning.text\",\"text\":\"I should look it up.\","
      "\"format\":\"anthropic-claude-v1\",\"index\":0,\"signature\":"
      "\"EqQBCkYIBxgCKkBsig==\"},{\"type\":\"reasoning.encrypted\",\"data\":"
      "\"gAAAAABencrypted==\",\"format\":\"anthropic-claude-v1\","
      "\"index\":1}]",
      0, NULL);
  ASSERT_NOT_NULL(want);
  ASSERT(json_equal(json_object_get(m, "reasoning_details"), want));
  ASSERT_NULL(json_object_get(m, "reasoning_content"));
  json_decref(want);
  fx_finish(&f);
  return 0;
}

/* Anthropic pause_turn with server-tool blocks: the paused reply goes
 * back as it came (server_tool_use and its result included) and the model
 * continues the same turn; a provider_notice says so; the final answer is
 * the whole turn's text; the citation arrives as a citation event. A
 * server that pauses forever is continued AG_MAX_PAUSES times, then the
 * run ends with what it has. */
TEST_IMPL(compat_run_pause_turn) {
  al_buf_t y;
  char *p1 = al_test_read_file(al_test_data_path("compat/anthropic_pause_turn.sse"), NULL);
  char *p2 = al_test_read_file(al_test_data_path("compat/anthropic_after_pause.sse"), NULL);
  const json_t *last;
  const json_t *content;
  long cit;
  fx_t f;
  int i;

  ASSERT_NOT_NULL(p1);
  ASSERT_NOT_NULL(p2);
  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "responses:\n");
  append_raw(&y, p1);
  append_raw(&y, p2);
  fx_init(&f, y.data);
  fx_start(&f);
  fx_run(&f, "weather in paris?");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(fx_jstr(fx_event(&f, fx_find(&f, "final", NULL, 0)), "text"),
                "Let me search. It is sunny.");
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "turn_started"), 1);
  ASSERT(fx_find(&f, "provider_notice", NULL, 0) >= 0);
  ASSERT_STR_EQ(fx_jstr(fx_event(&f, fx_find(&f, "provider_notice", NULL, 0)),
                        "kind"),
                "pause_turn");
  last = fx_last_message(&f, 1);
  ASSERT_STR_EQ(fx_jstr(last, "role"), "assistant");
  content = json_object_get(last, "content");
  ASSERT_EQ(json_array_size(content), 3);
  ASSERT_STR_EQ(fx_jstr(json_array_get(content, 1), "type"), "server_tool_use");
  ASSERT_STR_EQ(fx_jstr(json_array_get(content, 2), "type"),
                "web_search_tool_result");
  cit = fx_find(&f, "citation", NULL, 0);
  ASSERT(cit >= 0);
  ASSERT_STR_EQ(fx_jstr(json_object_get(fx_event(&f, cit), "citation"), "url"),
                "https://w.example/paris");
  fx_finish(&f);
  al_buf_free(&y);

  /* Paused forever: bounded. */
  al_buf_init(&y, (size_t)1 << 24);
  al_buf_append_str(&y, "responses:\n");
  for (i = 0; i < 8; i++) {
    char *pi = replace_all(p1, "srvtoolu_01", i == 0 ? "srvtoolu_01"
                                              : i == 1 ? "srvtoolu_02"
                                              : i == 2 ? "srvtoolu_03"
                                              : i == 3 ? "srvtoolu_04"
                                              : i == 4 ? "srvtoolu_05"
                                              : i == 5 ? "srvtoolu_06"
                                              : i == 6 ? "srvtoolu_07"
                                                       : "srvtoolu_08");
    append_raw(&y, pi);
    free(pi);
  }
  fx_init(&f, y.data);
  fx_start(&f);
  fx_run(&f, "weather in paris?");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_requests(&f), 6);
  ASSERT_EQ(fx_count(&f, "provider_notice"), 5);
  fx_finish(&f);
  al_buf_free(&y);
  free(p1);
  free(p2);
  return 0;
}

/* The Responses API end to end against agentloop-mockllm speaking it
 * (scripted replies rendered as Responses events): the reasoning item
 * goes back unchanged (encrypted_content) with store: false, the
 * function_call and its function_call_output pair by call_id (the
 * server's validator checks both), the tool starts at its own
 * output_item.done -- before the response completed -- and the run
 * ends with the second reply's text. */
TEST_IMPL(compat_responses_roundtrip) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - thinking: \"Plan: read a.\"\n"
      "          signature: \"unused\"\n"
      "        - tool_use: {id: call_r1, name: read_file, input: {path: a.txt}}\n"
      "        - text: \"Reading.\"\n"
      "  - reply: {content: [{text: 'It says alpha.'}]}\n";
  const json_t *input;
  const json_t *it;
  const json_t *body;
  bool reasoning = false;
  bool call = false;
  bool output = false;
  long started;
  long usage;
  size_t i;
  fx_t f;

  fx_init_proto(&f, yaml, "openai-responses");
  fx_start(&f);
  fx_write(&f, "a.txt", "alpha\n");
  fx_run(&f, "what does a.txt say?");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(fx_jstr(fx_event(&f, fx_find(&f, "final", NULL, 0)), "text"),
                "It says alpha.");
  ASSERT_EQ(fx_requests(&f), 2);
  fx_assert_valid(&f);
  ASSERT_STR_EQ(fx_request(&f, 1)->path, "/v1/responses");
  body = fx_request(&f, 1)->body;
  ASSERT(json_is_false(json_object_get(body, "store")));
  input = json_object_get(body, "input");
  json_array_foreach(input, i, it) {
    const char *t = fx_jstr(it, "type");

    if (strcmp(t, "reasoning") == 0) {
      reasoning = true;
      ASSERT_STR_EQ(fx_jstr(it, "encrypted_content"), "enc:chatcmpl-mock_0001:0");
      ASSERT_STR_EQ(fx_jstr(it, "id"), "rs_chatcmpl-mock_0001_0");
    } else if (strcmp(t, "function_call") == 0) {
      call = true;
      ASSERT_STR_EQ(fx_jstr(it, "call_id"), "call_r1");
      ASSERT(!output && reasoning);
    } else if (strcmp(t, "function_call_output") == 0) {
      output = true;
      ASSERT_STR_EQ(fx_jstr(it, "call_id"), "call_r1");
      ASSERT_NOT_NULL(strstr(fx_jstr(it, "output"), "alpha"));
    }
  }
  ASSERT(reasoning && call && output);
  /* Started while the reply still streamed: before its text block and
   * before the response's usage. */
  started = fx_find(&f, "tool_use_started", "call_r1", 0);
  usage = fx_find(&f, "usage", NULL, 0);
  ASSERT(started >= 0 && usage > started);
  ASSERT(fx_find(&f, "content_block_completed", NULL, 2) > started);
  fx_finish(&f);
  return 0;
}
