/* The configuration file's limits: section (issue 15): checked key by key
 * with FILE:LINE:COL, merged key by key across layers, and read back by
 * al_limits_from_json the way agentloop run applies it. */
#include <string.h>

#include "agentloop/limits.h"
#include "config/config.h"
#include "test.h"

static void load(al_config_t *cfg, al_cfg_layer_t layer, const char *yaml) {
  ASSERT_EQ(al_config_load_string(cfg, layer, "c.yaml", yaml, strlen(yaml)),
            0);
}

TEST_IMPL(config_limits_section) {
  static const struct {
    const char *yaml;
    const char *want;
  } bad[] = {
      {"limits:\n  reply_byte: 1M\n", "c.yaml:2:3: unknown limit 'reply_byte'"},
      {"limits:\n  reply_bytes: lots\n",
       "c.yaml:2:16: limits.reply_bytes: a positive integer"},
      {"limits:\n  total_time_ms: 0\n",
       "c.yaml:2:18: limits.total_time_ms: a positive integer"},
      {"limits:\n  header_count: [1]\n",
       "c.yaml:2:17: limits.header_count: a number or none"},
  };
  size_t i;
  al_config_t cfg;
  al_limits_t l, flags;
  char why[160];

  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    al_config_init(&cfg);
    load(&cfg, AL_CFG_USER, bad[i].yaml);
    if (cfg.n_errors != 1 ||
        strncmp(cfg.errors.data, bad[i].want, strlen(bad[i].want)) != 0) {
      AL_TEST_FAIL("case %zu: %s", i, cfg.errors.data ? cfg.errors.data : "");
    }
    al_config_free(&cfg);
  }
  al_config_init(&cfg);
  load(&cfg, AL_CFG_USER,
       "limits:\n  reply_bytes: 16M\n  total_time_ms: 600000\n");
  load(&cfg, AL_CFG_PROJECT, "limits:\n  reply_bytes: 8M\n");
  ASSERT_EQ(cfg.n_errors, 0);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al_limits_from_json(&l, al_config_section(&cfg, "limits"), why,
                                sizeof(why)),
            0);
  ASSERT_EQ(l.reply_bytes, 8 << 20);   /* the project's, key by key */
  ASSERT_EQ(l.total_time_ms, 600000);  /* the user's stays */
  /* Flags win. */
  memset(&flags, 0, sizeof(flags));
  ASSERT_EQ(al_limits_set_kv(&flags, "total_time_ms=none"), 0);
  al_limits_overlay(&l, &flags);
  ASSERT_EQ(l.total_time_ms, -1);
  ASSERT_EQ(l.reply_bytes, 8 << 20);
  al_config_free(&cfg);
  return 0;
}
