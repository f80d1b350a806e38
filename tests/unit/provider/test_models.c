/* The models catalogue: the shipped file, SPEC §9's fallback, the user's
 * overlay (field by field), FILE:LINE:COL errors, the file loader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentloop/models.h"
#include "common/common.h"
#include "provider/models_int.h"
#include "test.h"

static al_models_t *parse_ok(const char *yaml) {
  al_models_t *m = NULL;
  char *error = NULL;
  int rc = al_models_parse(&m, yaml, yaml != NULL ? strlen(yaml) : 0,
                           "u.yaml", &error);

  if (rc != 0) {
    AL_TEST_FAIL("parse: %d %s", rc, error != NULL ? error : "");
  }
  ASSERT_NULL(error);
  return m;
}

TEST_IMPL(models_shipped) {
  al_models_t *m = parse_ok(NULL);
  al_model_info_t i;

  al_models_lookup(m, "claude-sonnet-4-5-20250929", "anthropic", &i);
  ASSERT(i.known);
  ASSERT_STR_EQ(i.provider, "anthropic");
  ASSERT_EQ(i.context_window, 200000);
  ASSERT_EQ(i.max_output_tokens, 64000);
  ASSERT(i.has_prices);
  ASSERT(i.prices.input == 3 && i.prices.output == 15);
  ASSERT(i.prices.cache_read == 0.3 && i.prices.cache_write == 3.75);
  ASSERT(!i.echo_reasoning && !i.think_tags && i.reasoning_field[0] == '\0');

  /* File order: the more specific opus-4-5 entry comes before opus-4*. */
  al_models_lookup(m, "claude-opus-4-5", NULL, &i);
  ASSERT(i.prices.input == 5);
  al_models_lookup(m, "claude-opus-4-1", NULL, &i);
  ASSERT(i.prices.input == 15);
  ASSERT_EQ(i.max_output_tokens, 32000);

  /* Case-insensitive glob. */
  al_models_lookup(m, "GPT-4o-mini", "openai", &i);
  ASSERT(i.known);
  ASSERT_EQ(i.context_window, 128000);
  ASSERT(i.prices.input == 0.15);

  al_models_lookup(m, "deepseek-reasoner", "openai", &i);
  ASSERT(i.echo_reasoning);
  ASSERT_STR_EQ(i.reasoning_field, "reasoning_content");
  ASSERT(!i.think_tags);
  /* A distill: its own entry says no echo and no field, think tags on. */
  al_models_lookup(m, "deepseek-r1:32b", "openai", &i);
  ASSERT(i.think_tags);
  ASSERT(!i.echo_reasoning);
  ASSERT_STR_EQ(i.reasoning_field, "");
  ASSERT_EQ(i.context_window, 131072);
  al_models_free(m);
  return 0;
}

TEST_IMPL(models_fallback) {
  al_models_t *m = parse_ok(NULL);
  al_model_info_t i;

  al_models_lookup(m, "mock-model", "anthropic", &i);
  ASSERT(!i.known);
  ASSERT_EQ(i.context_window, AL_MODELS_FALLBACK_CLAUDE);
  ASSERT_EQ(i.context_window, 200000);
  ASSERT_EQ(i.max_output_tokens, 0);
  ASSERT(!i.has_prices);
  al_models_lookup(m, "llama3.1:8b", "openai", &i);
  ASSERT(!i.known);
  ASSERT_EQ(i.context_window, 8192);
  /* A Claude behind an OpenAI-compatible proxy, unknown version. */
  al_models_lookup(m, "proxy/Claude-next", "openai", &i);
  ASSERT_EQ(i.context_window, 200000);
  /* No catalogue at all, no model name. */
  al_models_lookup(NULL, NULL, NULL, &i);
  ASSERT_EQ(i.context_window, 8192);
  al_models_free(m);
  return 0;
}

TEST_IMPL(models_user_overlay) {
  al_models_t *m = parse_ok(
      "# mine\n"
      "models:\n"
      "  - match: \"claude-sonnet-4*\"\n"
      "    context_window: 1000000\n"
      "  - match: \"mock-*\"\n"
      "    provider: openai\n"
      "    context_window: 32000\n"
      "    max_output_tokens: 4096\n"
      "    echo_reasoning: true\n"
      "    reasoning_field: reasoning\n"
      "    think_tags: true\n"
      "    prices: {input: 1.5, output: 2}\n");
  al_model_info_t i;

  /* The user's window wins; everything else comes from the shipped entry. */
  al_models_lookup(m, "claude-sonnet-4-5", NULL, &i);
  ASSERT_EQ(i.context_window, 1000000);
  ASSERT_EQ(i.max_output_tokens, 64000);
  ASSERT_STR_EQ(i.provider, "anthropic");
  ASSERT(i.has_prices && i.prices.input == 3);

  al_models_lookup(m, "mock-small", "anthropic", &i);
  ASSERT(i.known);
  ASSERT_STR_EQ(i.provider, "openai");
  ASSERT_EQ(i.context_window, 32000);
  ASSERT_EQ(i.max_output_tokens, 4096);
  ASSERT(i.echo_reasoning && i.think_tags);
  ASSERT_STR_EQ(i.reasoning_field, "reasoning");
  ASSERT(i.has_prices && i.prices.input == 1.5 && i.prices.output == 2);
  ASSERT(i.prices.cache_read == 0 && i.prices.cache_write == 0);

  /* Untouched shipped entries still answer. */
  al_models_lookup(m, "gpt-4o", NULL, &i);
  ASSERT_EQ(i.context_window, 128000);
  al_models_free(m);

  /* An empty file and a file with an empty list add nothing. */
  m = parse_ok("");
  al_models_lookup(m, "gpt-4o", NULL, &i);
  ASSERT_EQ(i.context_window, 128000);
  al_models_free(m);
  m = parse_ok("models: []\n");
  al_models_free(m);
  return 0;
}

TEST_IMPL(models_errors) {
  static const struct {
    const char *yaml;
    const char *error;
  } cases[] = {
      {"models:\n  - match: x\n    context_windw: 5\n",
       "u.yaml:3:5: unknown key 'context_windw' in a model entry"},
      {"models:\n  - match: x\n    context_window: -1\n",
       "u.yaml:3:21: 'context_window' must be between 1024 and 1000000000"},
      {"models:\n  - match: x\n    context_window: 12.5k\n",
       "u.yaml:3:21: 'context_window' must be a number, not '12.5k'"},
      {"models:\n  - match: x\n    context_window: \"32000\"\n",
       "u.yaml:3:21: 'context_window' must be a number"},
      {"models:\n  - match: x\n    max_output_tokens: 1.5\n",
       "u.yaml:3:24: 'max_output_tokens' must be a whole number"},
      {"models:\n  - match: x\n    think_tags: yes\n",
       "u.yaml:3:17: 'think_tags' must be true or false"},
      {"models:\n  - context_window: 9000\n",
       "u.yaml:2:5: a model entry needs 'match' (a glob on the model name)"},
      {"models:\n  - match: x\n    provider: gemini\n",
       "u.yaml:3:15: 'provider' must be anthropic or openai, not 'gemini'"},
      {"models:\n  - match: x\n    match: y\n",
       "u.yaml:3:5: duplicate key 'match'"},
      {"models:\n  - match: x\n    prices: {input: 1, outptu: 2}\n",
       "u.yaml:3:24: unknown key 'outptu' in 'prices'"},
      {"models:\n  - match: x\n    prices: {input: -1}\n",
       "u.yaml:3:21: 'input' must be between 0 and 1000000"},
      {"modles:\n  - match: x\n",
       "u.yaml:1:1: unknown top-level key 'modles' (expected 'models')"},
      {"models: {match: x}\n", "u.yaml:1:9: 'models' must be a list of entries"},
      {"- match: x\n",
       "u.yaml:1:1: the file must be a mapping with a 'models' list"},
      {"models:\n  - match: [x]\n", "u.yaml:2:12: 'match' must be a string"},
      {"models:\n  - match: \"\"\n", "u.yaml:2:12: 'match' must not be empty"},
      {"models:\n  - match: x\n    reasoning_field: "
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
       "u.yaml:3:22: 'reasoning_field' is longer than 63 bytes"},
      {"models:\n  - match: x\n  context_window: 3\n",
       "u.yaml:3:3: YAML: did not find expected '-' indicator"},
      {"models:\n  - match: \"x\n", "u.yaml:3:1: YAML: found unexpected end of stream"},
  };
  size_t k;

  for (k = 0; k < AL_ARRAY_SIZE(cases); k++) {
    al_models_t *m = NULL;
    char *error = NULL;
    int rc = al_models_parse(&m, cases[k].yaml, strlen(cases[k].yaml),
                             "u.yaml", &error);

    if (rc != AL_ECONFIG) {
      AL_TEST_FAIL("case %zu: rc %d", k, rc);
    }
    ASSERT_NULL(m);
    ASSERT_STR_EQ(error, cases[k].error);
    al_free(error);
    /* Without an error slot the message is freed inside. */
    ASSERT_EQ(al_models_parse(&m, cases[k].yaml, strlen(cases[k].yaml),
                              "u.yaml", NULL),
              AL_ECONFIG);
  }
  return 0;
}

TEST_IMPL(models_load_file) {
  char dir[] = "/tmp/al-models-XXXXXX";
  char path[512];
  char sub[256];
  al_models_t *m = NULL;
  al_model_info_t i;
  char *error = NULL;
  FILE *f;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", dir, 1), 0);

  /* No user file: the shipped catalogue alone. */
  ASSERT_EQ(al_models_load(&m, NULL, &error), 0);
  ASSERT_NULL(error);
  al_models_lookup(m, "mock-x", "openai", &i);
  ASSERT_EQ(i.context_window, 8192);
  al_models_free(m);

  /* $XDG_CONFIG_HOME/agentloop/models.yaml is read when present. */
  snprintf(sub, sizeof(sub), "%s/agentloop", dir);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  snprintf(path, sizeof(path), "%s/models.yaml", sub);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("models:\n  - match: mock-*\n    context_window: 32000\n", f);
  fclose(f);
  ASSERT_EQ(al_models_load(&m, NULL, &error), 0);
  al_models_lookup(m, "mock-x", "openai", &i);
  ASSERT_EQ(i.context_window, 32000);
  al_models_free(m);
  /* "" skips it. */
  ASSERT_EQ(al_models_load(&m, "", &error), 0);
  al_models_lookup(m, "mock-x", "openai", &i);
  ASSERT_EQ(i.context_window, 8192);
  al_models_free(m);

  /* A bad file names itself with line and column. */
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("models:\n  - match: mock-*\n    context_window: lots\n", f);
  fclose(f);
  ASSERT_EQ(al_models_load(&m, NULL, &error), AL_ECONFIG);
  ASSERT_NULL(m);
  ASSERT_NOT_NULL(error);
  ASSERT(strncmp(error, path, strlen(path)) == 0);
  ASSERT_STR_EQ(error + strlen(path),
                ":3:21: 'context_window' must be a number, not 'lots'");
  al_free(error);

  /* An explicit path must exist; a directory is not a catalogue. */
  snprintf(sub, sizeof(sub), "%s/missing.yaml", dir);
  ASSERT_EQ(al_models_load(&m, sub, &error), AL_ENOENT);
  ASSERT_NULL(error);
  ASSERT_EQ(al_models_load(&m, dir, &error), AL_ECONFIG);
  ASSERT_NOT_NULL(error);
  al_free(error);

  unlink(path);
  snprintf(sub, sizeof(sub), "%s/agentloop", dir);
  rmdir(sub);
  rmdir(dir);
  return 0;
}
