/* Context management (SPEC §9, docs/context.md): the model's window and
 * limits from the models catalogue, through the agent. */
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "loop/agent_int.h"
#include "test.h"

#define jstr fx_jstr

/* The agent asks the catalogue about its model: the shipped one by
 * default, the embedder's when given, --context-window over both, and the
 * fallback model's entry once the run switched to it. */
TEST_IMPL(context_model_info) {
  fx_t f;
  al_model_info_t i;
  al_models_t *m = NULL;
  const char *yaml = "models:\n"
                     "  - match: mock-model\n"
                     "    context_window: 32000\n"
                     "    max_output_tokens: 2048\n"
                     "  - match: mock-fallback\n"
                     "    context_window: 64000\n";

  /* Shipped catalogue, unknown model, anthropic: SPEC §9's fallback. */
  fx_init(&f, NULL);
  fx_start(&f);
  al_agent_model_info(f.agent, &i);
  ASSERT(!i.known);
  ASSERT_EQ(i.context_window, 200000);
  fx_finish(&f);

  fx_init(&f, NULL);
  f.opts.model = "claude-haiku-4-5";
  fx_start(&f);
  al_agent_model_info(f.agent, &i);
  ASSERT(i.known);
  ASSERT_EQ(i.max_output_tokens, 64000);
  ASSERT(i.prices.output == 5);
  fx_finish(&f);

  /* The embedder's catalogue, then the override. */
  ASSERT_EQ(al_models_parse(&m, yaml, strlen(yaml), "t.yaml", NULL), 0);
  fx_init(&f, "responses:\n"
              "  - fault: {status: 529}\n"
              "  - fault: {status: 529}\n"
              "  - fault: {status: 529}\n"
              "  - reply: {content: [{text: 'from the fallback'}]}\n");
  f.opts.models = m;
  f.opts.fallback_model = "mock-fallback";
  f.opts.retry_max_attempts = 10;
  fx_start(&f);
  al_agent_model_info(f.agent, &i);
  ASSERT_EQ(i.context_window, 32000);
  ASSERT_EQ(i.max_output_tokens, 2048);
  fx_run(&f, "hi");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(fx_find(&f, "model_fallback", NULL, 0) >= 0);
  al_agent_model_info(f.agent, &i);
  ASSERT_EQ(i.context_window, 64000);
  ASSERT_EQ(i.max_output_tokens, 0);
  fx_finish(&f);

  fx_init(&f, NULL);
  f.opts.models = m;
  f.opts.context_window = 5000;
  fx_start(&f);
  al_agent_model_info(f.agent, &i);
  ASSERT_EQ(i.context_window, 5000);
  ASSERT_EQ(i.max_output_tokens, 2048);
  fx_finish(&f);
  al_models_free(m);
  return 0;
}

/* ---- budget ------------------------------------------------------------------ */

static const json_t *nth_usage(const fx_t *f, size_t n) {
  long i = fx_find(f, "usage", NULL, n);

  ASSERT(i >= 0);
  return fx_event(f, i);
}

static int64_t jint(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);

  ASSERT(json_is_integer(v));
  return (int64_t)json_integer_value(v);
}

/* usage events: context = input + cache read + cache creation, against
 * the window; the warning comes once, after the usage that crossed 80%. */
TEST_IMPL(context_usage_and_warning) {
  fx_t f;
  const json_t *u;
  long w;

  fx_init(&f, "responses:\n"
              "  - reply:\n"
              "      usage: {input_tokens: 1000, cache_read_input_tokens: 500,\n"
              "              cache_creation_input_tokens: 200, output_tokens: 5}\n"
              "      content: [{tool_use: {id: t1, name: list_directory, input: {path: .}}}]\n"
              "  - reply:\n"
              "      usage: {input_tokens: 100, cache_read_input_tokens: 8100,\n"
              "              cache_creation_input_tokens: 0, output_tokens: 5}\n"
              "      content: [{tool_use: {id: t2, name: list_directory, input: {path: .}}}]\n"
              "  - reply:\n"
              "      usage: {input_tokens: 9000, output_tokens: 5}\n"
              "      content: [{text: done}]\n");
  f.opts.context_window = 10000;
  fx_start(&f);
  fx_run(&f, "hi");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  u = nth_usage(&f, 0);
  ASSERT_EQ(jint(u, "context_tokens"), 1700);
  ASSERT_EQ(jint(u, "context_window"), 10000);
  ASSERT_EQ(jint(u, "context_pct"), 17);
  ASSERT(json_is_false(json_object_get(u, "context_estimated")));
  u = nth_usage(&f, 1);
  ASSERT_EQ(jint(u, "context_tokens"), 8200);
  ASSERT_EQ(jint(u, "context_pct"), 82);
  /* One warning, right after the second usage; none after the third. */
  ASSERT_EQ(fx_count(&f, "context_warning"), 1);
  w = fx_find(&f, "context_warning", NULL, 0);
  ASSERT_EQ(w, fx_find(&f, "usage", NULL, 1) + 1);
  ASSERT_EQ(jint(fx_event(&f, w), "context_tokens"), 8200);
  ASSERT_EQ(jint(fx_event(&f, w), "context_pct"), 82);
  ASSERT_EQ(jint(nth_usage(&f, 2), "context_pct"), 90);

  /* Once per session: a second run over 80% does not warn again. */
  fx_run(&f, "again");
  ASSERT_EQ(fx_count(&f, "context_warning"), 1);
  fx_finish(&f);
  return 0;
}

/* Records the projection of request n (0-based) when it starts: the
 * history is then exactly that request's, and no usage of it arrived. */
static int64_t g_projected[8];

static void project_hook(fx_t *f, const al_event_t *ev, const json_t *j) {
  size_t n = fx_count(f, "stream_request_start");

  (void)j;
  if (ev->type == AL_EVENT_STREAM_REQUEST_START && n >= 1 && n <= 8) {
    g_projected[n - 1] = al__agent_projected(f->agent);
  }
}

/* Without usage counts the estimate is SPEC §9's (4 characters a token,
 * 16 per message); with them, later estimates of the same model are
 * calibrated: after 3 replies, the projection of each request is within
 * 10% of what the server then reports, the last one too, which is mostly
 * a new 12 KB result. The mock counts 3 bytes a token, so the uncalibrated
 * estimate is off by about a quarter. */
TEST_IMPL(context_estimate_calibrated) {
  fx_t f;
  int64_t reported;
  size_t k;

  fx_init(&f, "usage_from_request: {bytes_per_token: 3}\n"
              "responses:\n"
              "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: a.txt}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: b.txt}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: a.txt}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: c.txt}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  fx_start(&f);
  fx_write(&f, "a.txt", "alpha alpha alpha alpha alpha alpha alpha alpha\n");
  fx_write(&f, "b.txt", "beta beta beta beta beta beta beta beta beta beta "
                        "beta beta beta beta beta beta beta beta beta beta\n");
  {
    /* A big last result: request 5 is mostly new text, which only the
     * calibration ratio (not the anchor) can size right. */
    char big[12001];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    fx_write(&f, "c.txt", big);
  }
  f.hook = project_hook;
  fx_run(&f, "read them");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "usage"), 5);
  /* Request 1: nothing observed yet, the raw estimate is off by > 15%. */
  reported = jint(nth_usage(&f, 0), "context_tokens");
  ASSERT(g_projected[0] > 0);
  ASSERT(llabs(g_projected[0] - reported) * 100 > 15 * reported);
  for (k = 3; k < 5; k++) {
    reported = jint(nth_usage(&f, k), "context_tokens");
    if (llabs(g_projected[k] - reported) * 10 > reported) {
      AL_TEST_FAIL("request %zu: projected %lld, reported %lld", k,
                   (long long)g_projected[k], (long long)reported);
    }
  }
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* OpenAI-compatible: the usage chunk's prompt_tokens is the context; an
 * unknown model gets SPEC §9's 8,192 window. */
TEST_IMPL(context_usage_openai) {
  fx_t f;
  const json_t *u;

  fx_init_proto(&f, "usage_from_request: {bytes_per_token: 4}\n"
                    "responses:\n"
                    "  - reply: {content: [{text: done}]}\n",
                "openai");
  fx_start(&f);
  fx_run(&f, "hi");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  u = nth_usage(&f, 0);
  ASSERT(jint(u, "context_tokens") > 20);
  ASSERT_EQ(jint(u, "context_tokens"),
            jint(u, "input_tokens") + jint(u, "cache_read_input_tokens"));
  ASSERT_EQ(jint(u, "context_window"), 8192);
  ASSERT(json_is_false(json_object_get(u, "context_estimated")));
  fx_finish(&f);
  return 0;
}

/* The mock's simulated prompt cache (usage_from_request.cache): the bytes
 * a request shares with the start of the previous one count as cache
 * read; the context stays the whole request. */
TEST_IMPL(context_mock_cache_prefix) {
  fx_t f;
  const json_t *u0;
  const json_t *u1;

  fx_init(&f, "usage_from_request: {bytes_per_token: 4, cache: true}\n"
              "responses:\n"
              "  - reply: {content: [{text: one}]}\n"
              "  - reply: {content: [{text: two}]}\n");
  fx_start(&f);
  fx_run(&f, "first question");
  fx_run(&f, "second question");
  u0 = nth_usage(&f, 0);
  u1 = nth_usage(&f, 1);
  ASSERT_EQ(jint(u0, "cache_read_input_tokens"), 0);
  ASSERT(jint(u1, "cache_read_input_tokens") > 10);
  ASSERT(jint(u1, "input_tokens") > 0);
  ASSERT(jint(u1, "context_tokens") > jint(u0, "context_tokens"));
  ASSERT_EQ(jint(u1, "context_tokens"),
            jint(u1, "input_tokens") + jint(u1, "cache_read_input_tokens"));
  fx_finish(&f);
  return 0;
}

/* ---- prompt caching -------------------------------------------------------- */

static size_t count_marks(const json_t *j) {
  size_t n = 0;
  const char *k;
  const json_t *v;
  size_t i;

  if (json_is_object(j)) {
    json_object_foreach((json_t *)j, k, v) {
      n += strcmp(k, "cache_control") == 0 ? 1 : count_marks(v);
    }
  } else if (json_is_array(j)) {
    json_array_foreach(j, i, v) {
      n += count_marks(v);
    }
  }
  return n;
}

/* Anthropic: breakpoints on the system prompt, the last tool and the
 * moving end (the last message and the user message before it), never
 * more than 4; the mock's prompt cache then reports cache reads, which
 * the usage events carry. Off: no breakpoint at all. */
TEST_IMPL(context_prompt_cache) {
  fx_t f;
  const json_t *body;
  const json_t *msgs;
  size_t i;

  fx_init(&f, "usage_from_request: {bytes_per_token: 4, cache: true}\n"
              "responses:\n"
              "  - reply: {content: [{tool_use: {id: t1, name: list_directory, input: {path: .}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t2, name: list_directory, input: {path: .}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.system = "You are a test.";
  fx_start(&f);
  fx_run(&f, "list twice");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  for (i = 0; i < fx_requests(&f); i++) {
    ASSERT_LE(count_marks(fx_request(&f, i)->body), 4);
  }
  body = fx_request(&f, 2)->body;
  ASSERT_EQ(count_marks(body), 4);
  ASSERT_EQ(count_marks(json_object_get(body, "system")), 1);
  ASSERT_EQ(count_marks(json_object_get(body, "tools")), 1);
  msgs = json_object_get(body, "messages");
  /* The end: the last message's last block, and the previous user turn. */
  ASSERT_EQ(count_marks(json_array_get(msgs, json_array_size(msgs) - 1)), 1);
  ASSERT_EQ(count_marks(json_array_get(msgs, json_array_size(msgs) - 3)), 1);
  ASSERT(jint(nth_usage(&f, 2), "cache_read_input_tokens") > 0);
  fx_finish(&f);

  fx_init(&f, "responses:\n  - reply: {content: [{text: done}]}\n");
  f.opts.system = "You are a test.";
  f.opts.no_prompt_cache = true;
  fx_start(&f);
  fx_run(&f, "hi");
  ASSERT_EQ(count_marks(fx_request(&f, 0)->body), 0);
  fx_finish(&f);
  return 0;
}
