/* issue 23: the subagents: section of config.yaml (docs/config.md,
 * docs/subagents.md): checked with FILE:LINE:COL like every section,
 * layered like the others, mapped by apply_subagents (the options' rows
 * are in test_agent_opts.c). */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "test.h"

static void load(al_config_t *cfg, al_cfg_layer_t layer, const char *yaml) {
  ASSERT_EQ(al_config_load_string(cfg, layer, "c.yaml", yaml, strlen(yaml)), 0);
}

TEST_IMPL(wire_config_subagents_section) {
  static const struct {
    const char *yaml;
    const char *want;
  } cases[] = {
      {"subagents:\n  enabled: maybe\n",
       "c.yaml:2:12: subagents.enabled must be true or false"},
      {"subagents:\n  max_depth: 0\n",
       "c.yaml:2:14: subagents.max_depth must be an integer from 1 to 16"},
      {"subagents:\n  max_depth: 99\n",
       "c.yaml:2:14: subagents.max_depth must be an integer from 1 to 16"},
      {"subagents:\n  token_budget: 10\n",
       "c.yaml:2:17: subagents.token_budget must be an integer from 1000"},
      {"subagents:\n  parallel_writer: true\n",
       "c.yaml:2:3: unknown key 'subagents.parallel_writer' (did you mean "
       "'subagents.parallel_writers'?)"},
      {"subagents: 3\n", "c.yaml:1:12: subagents must be a mapping of keys"},
  };
  al_config_t cfg;
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(cases); i++) {
    al_config_init(&cfg);
    load(&cfg, AL_CFG_USER, cases[i].yaml);
    if (cfg.n_errors != 1 || cfg.errors.data == NULL ||
        strncmp(cfg.errors.data, cases[i].want, strlen(cases[i].want)) != 0) {
      AL_TEST_FAIL("case %zu: %zu error(s):\n%s\nwanted: %s", i, cfg.n_errors,
                   cfg.errors.data ? cfg.errors.data : "", cases[i].want);
    }
    al_config_free(&cfg);
  }
  /* Unset: -1 / 0 (the agent's defaults); a project's file over the
   * user's, key by key. */
  al_config_init(&cfg);
  ASSERT_EQ(cfg.subagents.enabled, -1);
  ASSERT_EQ(cfg.subagents.parallel_writers, -1);
  load(&cfg, AL_CFG_USER,
       "subagents: {max_depth: 3, token_budget: 20000, parallel_writers: "
       "true}\n");
  load(&cfg, AL_CFG_PROJECT, "subagents: {enabled: false, max_depth: 1}\n");
  ASSERT_EQ(cfg.n_errors, 0);
  ASSERT_EQ(cfg.subagents.enabled, 0);
  ASSERT_EQ(cfg.subagents.max_depth, 1);
  ASSERT_EQ(cfg.subagents.token_budget, 20000);
  ASSERT_EQ(cfg.subagents.parallel_writers, 1);
  al_config_free(&cfg);
  return 0;
}
