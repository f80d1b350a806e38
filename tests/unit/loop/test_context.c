/* Context management (SPEC §9, docs/context.md): the model's window and
 * limits from the models catalogue, through the agent. */
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
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
