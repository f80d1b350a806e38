/* The configuration loader (src/config, docs/config.md): the precedence
 * matrix over the four layers, the origin of every value, each error with
 * its FILE:LINE:COL, the project file's restrictions and trust, masked
 * secrets; and the permission rules with argument patterns
 * (src/loop/permrule.c). */
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "config/config.h"
#include "loop/permrule.h"
#include "test.h"

/* A fake environment: NAME=VALUE pairs. */
static const char *const *fake_env;

static const char *env_fn(const char *name) {
  size_t n = strlen(name);
  size_t i;

  for (i = 0; fake_env != NULL && fake_env[i] != NULL; i++) {
    if (strncmp(fake_env[i], name, n) == 0 && fake_env[i][n] == '=') {
      return fake_env[i] + n + 1;
    }
  }
  return NULL;
}

static void load(al_config_t *cfg, al_cfg_layer_t layer, const char *name,
                 const char *yaml) {
  ASSERT_EQ(al_config_load_string(cfg, layer, name, yaml, strlen(yaml)), 0);
}

static const char *origin(const al_config_t *cfg, const char *key,
                          const char *field) {
  return json_string_value(
      json_object_get(json_object_get(cfg->origins, key), field));
}

/* Every subset of the four layers for a scalar (model), a list
 * (permissions.allow, replaced whole) and an owner's section (context,
 * merged key by key): the highest layer present wins and is the origin. */
TEST_IMPL(config_precedence_matrix) {
  unsigned mask;

  for (mask = 0; mask < 16; mask++) {
    al_config_t cfg;
    char why[256];
    const char *want_model = NULL;
    const char *want_layer = "default";
    const char *want_allow = NULL;
    static const char *const env[] = {"AGENTLOOP_MODEL=m-env", NULL};

    al_config_init(&cfg);
    if (mask & 1) {
      load(&cfg, AL_CFG_USER, "user.yaml",
           "model: m-user\npermissions:\n  allow: [u1, u2]\n"
           "context: {window: 1000, keep_recent: 2}\n");
      want_model = "m-user";
      want_layer = "user";
      want_allow = "u1";
    }
    if (mask & 2) {
      load(&cfg, AL_CFG_PROJECT, "proj.yaml",
           "model: m-proj\npermissions: {allow: [p1]}\n"
           "context: {window: 2000}\n");
      want_model = "m-proj";
      want_layer = "project";
      want_allow = "p1";
    }
    fake_env = (mask & 4) ? env : NULL;
    al_config_apply_env(&cfg, env_fn);
    if (mask & 4) {
      want_model = "m-env";
      want_layer = "env";
    }
    if (mask & 8) {
      ASSERT_EQ(al_config_set_flag(&cfg, "model", "m-flag", "--model", why,
                                   sizeof(why)),
                0);
      ASSERT_EQ(al_config_set_flag(&cfg, "permissions.allow", "f1",
                                   "--allow", why, sizeof(why)),
                0);
      ASSERT_EQ(al_config_set_flag(&cfg, "permissions.allow", "f2",
                                   "--allow", why, sizeof(why)),
                0);
      want_model = "m-flag";
      want_layer = "flag";
      want_allow = "f1";
    }
    ASSERT_EQ(cfg.n_errors, 0);
    if (want_model == NULL) {
      ASSERT_NULL(cfg.model);
      ASSERT_NULL(json_object_get(cfg.origins, "model"));
    } else {
      ASSERT_STR_EQ(cfg.model, want_model);
      ASSERT_STR_EQ(origin(&cfg, "model", "layer"), want_layer);
    }
    if (want_allow == NULL) {
      ASSERT_NULL(cfg.permissions.allow);
    } else {
      ASSERT_STR_EQ(cfg.permissions.allow[0], want_allow);
      /* Lists replace: nothing of a lower layer's list is left. */
      if (mask & 8) {
        ASSERT_STR_EQ(cfg.permissions.allow[1], "f2");
        ASSERT_NULL(cfg.permissions.allow[2]);
      } else if (mask & 2) {
        ASSERT_NULL(cfg.permissions.allow[1]);
      } else {
        ASSERT_STR_EQ(cfg.permissions.allow[1], "u2");
      }
    }
    if (mask & 3) {
      const json_t *ctx = al_config_section(&cfg, "context");

      ASSERT_EQ(json_integer_value(json_object_get(ctx, "window")),
                (mask & 2) ? 2000 : 1000);
      /* Sections merge: the user's keep_recent survives the project. */
      if (mask & 1) {
        ASSERT_EQ(json_integer_value(json_object_get(ctx, "keep_recent")), 2);
      } else {
        ASSERT_NULL(json_object_get(ctx, "keep_recent"));
      }
    } else {
      ASSERT_NULL(al_config_section(&cfg, "context"));
    }
    al_config_free(&cfg);
  }
  fake_env = NULL;
  return 0;
}

/* Where each value came from: FILE:LINE:COL of its value for files, the
 * variable for the environment, the flag's spelling for flags. */
TEST_IMPL(config_origins) {
  al_config_t cfg;
  char why[256];
  static const char *const env[] = {"AGENTLOOP_BASE_URL=http://127.0.0.1:9",
                                    "SECRET_KEY=sk-ant-0123456789abcdef",
                                    NULL};
  json_t *j;
  char *s;
  al_buf_t out;

  al_config_init(&cfg);
  load(&cfg, AL_CFG_USER, "/u/config.yaml",
       "provider: openai\n"
       "api_key_env: SECRET_KEY\n"
       "timeouts:\n"
       "  idle_ms: 5000\n"
       "context:\n"
       "  window: 100\n");
  fake_env = env;
  al_config_apply_env(&cfg, env_fn);
  ASSERT_EQ(al_config_set_flag(&cfg, "max_turns", "7", "--max-turns", why,
                               sizeof(why)),
            0);
  ASSERT_EQ(cfg.n_errors, 0);
  ASSERT_STR_EQ(origin(&cfg, "provider", "where"), "/u/config.yaml:1:11");
  ASSERT_STR_EQ(origin(&cfg, "timeouts.idle_ms", "where"),
                "/u/config.yaml:4:12");
  ASSERT_STR_EQ(origin(&cfg, "base_url", "layer"), "env");
  ASSERT_STR_EQ(origin(&cfg, "base_url", "where"), "AGENTLOOP_BASE_URL");
  ASSERT_STR_EQ(origin(&cfg, "max_turns", "where"), "--max-turns");
  ASSERT_EQ(cfg.max_turns, 7);
  ASSERT_EQ(cfg.timeouts.idle_ms, 5000);
  /* Section nodes keep their positions for their owners. */
  ASSERT_STR_EQ(al_config_section_pos(&cfg, "context.window"),
                "/u/config.yaml:6:11");

  /* The key is read from the named variable, and never shown whole. */
  {
    const char *var = NULL;

    ASSERT_STR_EQ(al_config_api_key(&cfg, env_fn, &var),
                  "sk-ant-0123456789abcdef");
    ASSERT_STR_EQ(var, "SECRET_KEY");
  }
  j = al_config_to_json(&cfg, true, env_fn);
  s = json_dumps(j, JSON_COMPACT);
  ASSERT_NOT_NULL(s);
  ASSERT_NULL(strstr(s, "0123456789abcdef"));
  ASSERT_NOT_NULL(strstr(s, "\"api_key\":\"sk-a...cdef"));
  ASSERT_NOT_NULL(strstr(s, "\"where\":\"SECRET_KEY\""));
  free(s);
  json_decref(j);
  al_buf_init(&out, 1 << 20);
  ASSERT_EQ(al_config_show(&cfg, true, env_fn, &out), 0);
  ASSERT_NOT_NULL(strstr(out.data, "provider: openai    (user "
                                   "/u/config.yaml:1:11)\n"));
  ASSERT_NOT_NULL(strstr(out.data, "max_turns: 7    (flag --max-turns)\n"));
  ASSERT_NOT_NULL(strstr(out.data, "timeouts.idle_ms: 5000    (user"));
  ASSERT_NULL(strstr(out.data, "0123456789abcdef"));
  al_buf_free(&out);
  al_config_free(&cfg);

  /* The provider's own base URL variable follows the provider in force,
   * a --provider flag to come included (provider_hint). */
  {
    static const char *const env2[] = {"OPENAI_BASE_URL=http://127.0.0.1:7",
                                       "ANTHROPIC_BASE_URL=http://127.0.0.1:8",
                                       NULL};

    fake_env = env2;
    al_config_init(&cfg);
    al_config_apply_env(&cfg, env_fn);
    ASSERT_STR_EQ(cfg.base_url, "http://127.0.0.1:8");
    al_config_free(&cfg);
    al_config_init(&cfg);
    cfg.provider_hint = "openai";
    al_config_apply_env(&cfg, env_fn);
    ASSERT_STR_EQ(cfg.base_url, "http://127.0.0.1:7");
    ASSERT_STR_EQ(origin(&cfg, "base_url", "where"), "OPENAI_BASE_URL");
    al_config_free(&cfg);
  }
  fake_env = NULL;
  return 0;
}

/* Each kind of mistake, one line "FILE:LINE:COL: reason" naming it. */
TEST_IMPL(config_errors_file_line_col) {
  static const struct {
    al_cfg_layer_t layer;
    const char *yaml;
    const char *want; /* the whole first line starts with this */
  } cases[] = {
      {AL_CFG_USER, "modle: x\n",
       "c.yaml:1:1: unknown key 'modle' (did you mean 'model'?)"},
      {AL_CFG_USER, "model: a\ntimeouts:\n  idel_ms: 5\n",
       "c.yaml:3:3: unknown key 'timeouts.idel_ms' (did you mean "
       "'timeouts.idle_ms'?)"},
      {AL_CFG_USER, "zzzzzz: 1\n", "c.yaml:1:1: unknown key 'zzzzzz'"},
      {AL_CFG_USER, "max_tokens: lots\n",
       "c.yaml:1:13: max_tokens must be an integer from 1 to"},
      {AL_CFG_USER, "max_tokens: 0\n",
       "c.yaml:1:13: max_tokens must be an integer from 1 to"},
      {AL_CFG_USER, "max_turns: \"5\"\n",
       "c.yaml:1:12: max_turns must be a number, not a quoted string"},
      {AL_CFG_USER, "provider: gemini\n",
       "c.yaml:1:11: unknown provider 'gemini' (anthropic, openai or openai-responses)"},
      {AL_CFG_USER, "base_url: ftp://x\n",
       "c.yaml:1:11: base_url must be an http:// or https:// URL"},
      {AL_CFG_USER, "api_key_env: sk-ant-abc\n",
       "c.yaml:1:14: api_key_env is the NAME of a variable"},
      {AL_CFG_USER, "sandbox:\n  network: maybe\n",
       "c.yaml:2:12: sandbox.network must be true or false"},
      {AL_CFG_USER, "sandbox:\n  mode: off\n",
       "c.yaml:2:9: sandbox.mode must be auto, required or none"},
      {AL_CFG_USER, "permissions:\n  allow: bash\n",
       "c.yaml:2:10: permissions.allow must be a list"},
      {AL_CFG_USER, "permissions:\n  deny: [\"bash(rm\"]\n",
       "c.yaml:2:10: a rule is TOOL or TOOL(PATTERN)"},
      {AL_CFG_USER, "model: [a, b]\n",
       "c.yaml:1:8: model must be a single value, not a list"},
      {AL_CFG_USER, "timeouts: 5\n",
       "c.yaml:1:11: timeouts must be a mapping of keys"},
      {AL_CFG_USER, "context: [1]\n",
       "c.yaml:1:10: context must be a mapping of keys"},
      {AL_CFG_USER, "version: 2\n", "c.yaml:1:10: version must be 1"},
      {AL_CFG_USER, "- a\n- b\n",
       "c.yaml:1:1: expected a mapping of keys"},
      {AL_CFG_USER, "model: x\n  bad: [\n", "c.yaml:2:6: YAML: "},
      /* A value quoted back stays on its line, control bytes replaced
       * (found by fuzz_config). */
      {AL_CFG_USER, "provider: \"a\\nb\\e[31m\"\n",
       "c.yaml:1:11: unknown provider 'a?b?[31m' (anthropic, openai or openai-responses)"},
      /* A project file: no secrets' sources, no wider sandbox. */
      {AL_CFG_PROJECT, "base_url: http://evil.example\n",
       "c.yaml:1:11: base_url cannot be set in a project file"},
      {AL_CFG_PROJECT, "api_key_env: AWS_SECRET_ACCESS_KEY\n",
       "c.yaml:1:14: api_key_env cannot be set in a project file"},
      {AL_CFG_PROJECT, "sandbox: {mode: none}\n",
       "c.yaml:1:17: a project file cannot loosen sandbox.mode"},
      {AL_CFG_PROJECT, "sandbox:\n  writable: [/]\n",
       "c.yaml:2:13: sandbox.writable cannot be set in a project file"},
      {AL_CFG_PROJECT, "sandbox:\n  network: true\n",
       "c.yaml:2:12: a project file cannot turn sandbox.network on"},
      {AL_CFG_PROJECT, "tools_d: [/usr/local/evil]\n",
       "c.yaml:1:11: tools_d in a project file must be a relative path"},
      {AL_CFG_PROJECT, "tools_d: [../../x]\n",
       "c.yaml:1:11: tools_d in a project file must be a relative path"},
  };
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    al_config_t cfg;

    al_config_init(&cfg);
    load(&cfg, cases[i].layer, "c.yaml", cases[i].yaml);
    if (cfg.n_errors != 1 || cfg.errors.data == NULL ||
        strncmp(cfg.errors.data, cases[i].want, strlen(cases[i].want)) !=
            0) {
      AL_TEST_FAIL("case %zu: %zu error(s):\n%s\nwanted: %s", i,
                   cfg.n_errors, cfg.errors.data ? cfg.errors.data : "",
                   cases[i].want);
    }
    al_config_free(&cfg);
  }
  /* The same values are fine in the user's own file, and tightening is
   * fine in a project's. */
  {
    al_config_t cfg;

    al_config_init(&cfg);
    load(&cfg, AL_CFG_USER, "u.yaml",
         "base_url: http://127.0.0.1:8080\napi_key_env: MY_KEY\n"
         "sandbox: {mode: required, writable: [/tmp/x], network: true}\n");
    load(&cfg, AL_CFG_PROJECT, "p.yaml",
         "sandbox: {mode: required, denied: [secrets], network: false}\n"
         "tools_d: [tools/agent.d]\n");
    ASSERT_EQ(cfg.n_errors, 0);
    ASSERT_EQ(cfg.sandbox.network, 0);
    ASSERT_STR_EQ(cfg.tools_d[0], "tools/agent.d");
    /* Below the user's "required" is looser, even "auto". */
    load(&cfg, AL_CFG_PROJECT, "p.yaml", "sandbox: {mode: auto}\n");
    ASSERT_EQ(cfg.n_errors, 1);
    ASSERT_STR_EQ(cfg.sandbox.mode, "required");
    al_config_free(&cfg);
  }
  /* Environment and flag values are checked the same way. */
  {
    al_config_t cfg;
    char why[256];
    static const char *const env[] = {"AGENTLOOP_PROVIDER=nope", NULL};

    al_config_init(&cfg);
    fake_env = env;
    al_config_apply_env(&cfg, env_fn);
    ASSERT_EQ(cfg.n_errors, 1);
    ASSERT(strncmp(cfg.errors.data, "AGENTLOOP_PROVIDER: unknown provider",
                   36) == 0);
    ASSERT_EQ(al_config_set_flag(&cfg, "base_url", "nope://", "--base-url",
                                 why, sizeof(why)),
              AL_EINVAL);
    ASSERT(strncmp(why, "--base-url: base_url must be", 28) == 0);
    ASSERT_EQ(al_config_set_flag(&cfg, "nosuch", "1", "--x", why,
                                 sizeof(why)),
              AL_EINVAL);
    al_config_free(&cfg);
    fake_env = NULL;
  }
  return 0;
}

static char root[256];

static int rm_cb(const char *p, const struct stat *s, int f, struct FTW *w) {
  (void)s;
  (void)f;
  (void)w;
  return remove(p);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", dir, name);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

/* The files on disk: the user file under $XDG_CONFIG_HOME, the project
 * file only when trusted (and noted when it is not). */
TEST_IMPL(config_files_and_trust) {
  char xdg[300], cfgdir[320], ws[300], pdir[320];
  al_config_t cfg;

  snprintf(root, sizeof(root), "/tmp/al_cfg_XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(xdg, sizeof(xdg), "%s/xdg", root);
  snprintf(cfgdir, sizeof(cfgdir), "%s/agentloop", xdg);
  snprintf(ws, sizeof(ws), "%s/ws", root);
  snprintf(pdir, sizeof(pdir), "%s/.agentloop", ws);
  ASSERT_EQ(mkdir(xdg, 0700), 0);
  ASSERT_EQ(mkdir(cfgdir, 0700), 0);
  ASSERT_EQ(mkdir(ws, 0700), 0);
  ASSERT_EQ(mkdir(pdir, 0700), 0);
  write_file(cfgdir, "config.yaml", "model: from-user\nmax_turns: 3\n");
  write_file(pdir, "config.yaml", "model: from-project\n");
  setenv("XDG_CONFIG_HOME", xdg, 1);

  al_config_init(&cfg);
  ASSERT_EQ(al_config_load(&cfg, ws, false, env_fn), 0);
  ASSERT_EQ(cfg.n_errors, 0);
  ASSERT(cfg.user_loaded);
  ASSERT(!cfg.project_loaded);
  ASSERT(cfg.project_untrusted);
  ASSERT_STR_EQ(cfg.model, "from-user");
  ASSERT(strstr(origin(&cfg, "model", "where"), "/xdg/agentloop/"
                                                "config.yaml:1:8") != NULL);
  al_config_free(&cfg);

  al_config_init(&cfg);
  ASSERT_EQ(al_config_load(&cfg, ws, true, env_fn), 0);
  ASSERT(cfg.project_loaded);
  ASSERT_STR_EQ(cfg.model, "from-project");
  ASSERT_EQ(cfg.max_turns, 3);
  ASSERT(strstr(origin(&cfg, "model", "where"),
                "/ws/.agentloop/config.yaml:1:8") != NULL);
  al_config_free(&cfg);

  /* A bad file names itself. */
  write_file(cfgdir, "config.yaml", "model: ok\nmax_turns: many\n");
  al_config_init(&cfg);
  ASSERT_EQ(al_config_load(&cfg, NULL, false, env_fn), 0);
  ASSERT_EQ(cfg.n_errors, 1);
  ASSERT(strstr(cfg.errors.data, "/xdg/agentloop/config.yaml:2:12: "
                                 "max_turns must be") != NULL);
  al_config_free(&cfg);
  nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

/* TOOL and TOOL(PATTERN) rules; a shell operator never rides along an
 * allowed prefix, and a deny pattern finds its command inside a chain. */
TEST_IMPL(config_permission_rules) {
  json_t *git = json_pack("{s:s}", "command", "git status --short");
  json_t *chain = json_pack("{s:s}", "command", "git status; rm -rf /");
  json_t *rm = json_pack("{s:s}", "command", "ls && rm -rf build");
  json_t *subst = json_pack("{s:s}", "command", "git status $(curl x)");
  json_t *wf = json_pack("{s:s, s:s}", "path", "docs/a.md", "content", "x");
  json_t *other = json_pack("{s:i}", "n", 3);
  char *rules[] = {"read_file", "bash(git status*)", NULL};

  ASSERT(al__perm_rule_match("bash", "bash", chain, true));
  ASSERT(!al__perm_rule_match("bash", "bash_x", git, true));
  ASSERT(al__perm_rule_match("bash(git status*)", "bash", git, true));
  ASSERT(!al__perm_rule_match("bash(git status*)", "bash", chain, true));
  ASSERT(!al__perm_rule_match("bash(git status*)", "bash", subst, true));
  ASSERT(!al__perm_rule_match("bash(git log*)", "bash", git, true));
  ASSERT(al__perm_rule_match("bash(rm *)", "bash", rm, false));
  ASSERT(al__perm_rule_match("bash(rm *)", "bash", chain, false));
  ASSERT(!al__perm_rule_match("bash(rm *)", "bash", git, false));
  ASSERT(al__perm_rule_match("write_file(docs/*)", "write_file", wf, true));
  ASSERT(!al__perm_rule_match("write_file(src/*)", "write_file", wf, true));
  ASSERT(al__perm_rule_match("mcp__gh__*", "mcp__gh__issues", NULL, true));
  ASSERT(al__perm_rule_match("calc(*\"n\":3*)", "calc", other, true));
  ASSERT(al__perm_rules_match(rules, "read_file", wf, true));
  ASSERT(al__perm_rules_match(rules, "bash", git, true));
  ASSERT(!al__perm_rules_match(rules, "bash", chain, true));
  ASSERT(!al__perm_rules_match(NULL, "bash", git, true));
  json_decref(git);
  json_decref(chain);
  json_decref(rm);
  json_decref(subst);
  json_decref(wf);
  json_decref(other);
  return 0;
}
