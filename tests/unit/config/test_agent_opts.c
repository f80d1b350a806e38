/* Configuration -> agent options (src/config/agent_opts.c, STYLE §6.3):
 * the front ends' roads to al_agent_options_t give the same options for
 * the same configuration, and every section lands in them.
 *
 * The roads: `agentloop run` calls al_config_agent_options with its flags
 * (headless); a chat ships the configuration in session/create
 * (al_config_session_params, al__rpc_client_config), the daemon keeps it
 * in the transcript header and maps it back (al__session_agent_options).
 * A setting that one road forgets shows up as a difference here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "config/agent_opts.h"
#include "config/sysprompt.h"
#include "daemon/internal.h"
#include "rpc/rpc.h"
#include "test.h"

static const char *fake_env(const char *name) {
  if (strcmp(name, "OPENAI_API_KEY") == 0) {
    return "sk-test-openai";
  }
  if (strcmp(name, "MY_KEY") == 0) {
    return "sk-my-key";
  }
  return NULL;
}

static void load(al_config_t *cfg, const char *yaml) {
  al_config_init(cfg);
  ASSERT_EQ(al_config_load_string(cfg, AL_CFG_USER, "config.yaml", yaml,
                                  strlen(yaml)),
            0);
  if (cfg->n_errors != 0) {
    AL_TEST_FAIL("config: %s", cfg->errors.data);
  }
}

static void eq_str(const char *what, const char *a, const char *b) {
  if ((a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0)) {
    AL_TEST_FAIL("%s differs: '%s' vs '%s'", what, a ? a : "(null)",
                 b ? b : "(null)");
  }
}

static void eq_list(const char *what, const char *const *a,
                    const char *const *b) {
  size_t i;

  for (i = 0; a != NULL && b != NULL && a[i] != NULL && b[i] != NULL; i++) {
    eq_str(what, a[i], b[i]);
  }
  if ((a != NULL && a[i] != NULL) || (b != NULL && b[i] != NULL) ||
      ((a == NULL) != (b == NULL))) {
    AL_TEST_FAIL("%s: lists differ in length at %zu", what, i);
  }
}

/* JSON text compared as values (key order aside). */
static void eq_json(const char *what, const char *a, const char *b) {
  json_t *ja, *jb;

  if (a == NULL || b == NULL) {
    eq_str(what, a, b);
    return;
  }
  ja = json_loads(a, 0, NULL);
  jb = json_loads(b, 0, NULL);
  ASSERT_NOT_NULL(ja);
  ASSERT_NOT_NULL(jb);
  if (!json_equal(ja, jb)) {
    AL_TEST_FAIL("%s differs:\n%s\n%s", what, a, b);
  }
  json_decref(ja);
  json_decref(jb);
}

/* Every field of al_agent_options_t that comes from the configuration.
 * The rest is each front end's wiring (data, client, permission callback,
 * session id and numbering, commit hook, tool_output_dir, hook, pace_rpm
 * and pace_burst: the process's, like the client; the daemon takes them
 * from its own configuration) or a test
 * seam (sandbox_bwrap/helper/no_landlock, rng_seed, ca_file). Adding an
 * option changes the size below: add it here (or to the wiring list) and
 * to agent_opts.c, for every front end at once. */
static void same_shared(const al_agent_options_t *a,
                        const al_agent_options_t *b) {
  eq_str("provider", a->provider, b->provider);
  eq_str("base_url", a->base_url, b->base_url);
  eq_str("api_key", a->api_key, b->api_key);
  eq_str("model", a->model, b->model);
  eq_str("fallback_model", a->fallback_model, b->fallback_model);
  eq_str("system", a->system, b->system);
  ASSERT_EQ(a->max_tokens, b->max_tokens);
  ASSERT_EQ(a->max_turns, b->max_turns);
  ASSERT_EQ(a->max_tool_concurrency, b->max_tool_concurrency);
  ASSERT_EQ(a->retry_max_attempts, b->retry_max_attempts);
  ASSERT_EQ(a->retry_base_ms, b->retry_base_ms);
  ASSERT_EQ(a->retry_cap_ms, b->retry_cap_ms);
  ASSERT_EQ(a->connect_timeout_ms, b->connect_timeout_ms);
  ASSERT_EQ(a->idle_timeout_ms, b->idle_timeout_ms);
  ASSERT_EQ(a->progress_timeout_ms, b->progress_timeout_ms);
  ASSERT_EQ(memcmp(&a->limits, &b->limits, sizeof(a->limits)), 0);
  eq_str("workspace", a->workspace, b->workspace);
  ASSERT_EQ(a->builtin_tools, b->builtin_tools);
  eq_list("allowed_paths", a->allowed_paths, b->allowed_paths);
  eq_list("denied_paths", a->denied_paths, b->denied_paths);
  ASSERT_EQ(a->tool_timeout_ms, b->tool_timeout_ms);
  ASSERT_EQ(a->kill_grace_ms, b->kill_grace_ms);
  ASSERT_EQ(a->bash_network, b->bash_network);
  eq_list("allow_tools", a->allow_tools, b->allow_tools);
  eq_list("tools_only", a->tools_only, b->tools_only);
  eq_list("tools_never", a->tools_never, b->tools_never);
  /* permission_mode and deny_tools: compared by the caller (headless
   * turns ask rules into denials). */
  ASSERT_EQ(a->sandbox, b->sandbox);
  ASSERT_EQ(a->tools_d, b->tools_d);
  ASSERT_EQ(a->trust_project, b->trust_project);
  eq_list("tools_dirs", a->tools_dirs, b->tools_dirs);
  ASSERT(a->models == b->models);
  ASSERT_EQ(a->context_window, b->context_window);
  ASSERT_EQ(a->micro_min_tokens, b->micro_min_tokens);
  eq_list("compactable_tools", a->compactable_tools, b->compactable_tools);
  ASSERT_EQ(a->no_auto_compact, b->no_auto_compact);
  ASSERT_EQ(a->keep_recent, b->keep_recent);
  ASSERT_EQ(a->no_prompt_cache, b->no_prompt_cache);
  ASSERT_EQ(a->max_messages, b->max_messages);
  eq_json("mcp_config", a->mcp_config, b->mcp_config);
  ASSERT_EQ(a->mcp_restart_base_ms, b->mcp_restart_base_ms);
  eq_json("hooks_config", a->hooks_config, b->hooks_config);
  ASSERT_EQ(a->n_subagents, b->n_subagents);
  ASSERT(a->subagents == b->subagents);
  ASSERT_EQ(a->no_task_tool, b->no_task_tool);
  ASSERT_EQ(a->task_max_depth, b->task_max_depth);
  ASSERT_EQ(a->task_token_budget, b->task_token_budget);
  eq_str("task_preamble", a->task_preamble, b->task_preamble);
  ASSERT_EQ(a->task_parallel_writers, b->task_parallel_writers);
  /* on_child / child_data: per-session wiring (transcripts). */
  /* mcp_project: run reads a trusted project's .mcp.json itself, the
   * daemon's agent does it off the loop: the same servers either way. */
  ASSERT_EQ(a->no_task_tool, b->no_task_tool);
  ASSERT_EQ(a->task_max_depth, b->task_max_depth);
  ASSERT_EQ(a->task_token_budget, b->task_token_budget);
  ASSERT_EQ(a->task_parallel_writers, b->task_parallel_writers);
  ASSERT_EQ(a->n_subagents, b->n_subagents);
  /* Wiring: subagents and task_preamble (each front end loads the
   * definitions and builds the preamble), on_child and child_data (the
   * front end's transcripts). */
}

static const char k_full[] =
    "provider: openai\n"
    "model: gpt-test\n"
    "fallback_model: gpt-small\n"
    "base_url: http://127.0.0.1:9/v1\n"
    "max_tokens: 777\n"
    "max_turns: 9\n"
    "timeouts:\n"
    "  connect_ms: 1111\n"
    "  idle_ms: 2222\n"
    "  progress_ms: 3333\n"
    "  tool_ms: 4444\n"
    "permissions:\n"
    "  allow: [bash(git *)]\n"
    "  deny: [write_file]\n"
    "  ask: [bash(rm *)]\n"
    "sandbox:\n"
    "  mode: none\n"
    "  network: true\n"
    "  writable: [/tmp/al-opts-w]\n"
    "  denied: [/tmp/al-opts-d]\n"
    "tools_d: [/tmp/al-opts-t]\n"
    "limits:\n"
    "  reply_bytes: 123456\n"
    "context:\n"
    "  window: 50000\n"
    "  keep_recent: 3000\n"
    "  auto_compact: false\n"
    "mcp_servers:\n"
    "  m:\n"
    "    command: /bin/true\n"
    "hooks:\n"
    "  pre_tool_use:\n"
    "    - name: h\n"
    "      command: [/bin/true]\n"
    "subagents:\n"
    "  enabled: false\n"
    "  max_depth: 3\n"
    "  token_budget: 12345\n"
    "  parallel_writers: true\n";

TEST_IMPL(agent_opts_front_ends_agree) {
  char ws[] = "/tmp/al_opts_XXXXXX";
  al_config_t cfg;
  al_agent_opts_input_t in;
  al_agent_opts_store_t run_st, d_st;
  al_agent_options_t run_o, d_o;
  al_daemon_options_t dopts;
  al_tx_header_t h;
  json_t *params, *rec;
  char why[1024];
  const char *sys = "SYSTEM PROMPT";
  char *mcp, *hooks;

  /* The tripwire: a new option must be placed in same_shared() or named
   * as wiring, and mapped in agent_opts.c for every front end; then the
   * size here is updated (LP64's). */
  if (sizeof(void *) == 8) {
    ASSERT_EQ(sizeof(al_agent_options_t), 616);
  }
  ASSERT_NOT_NULL(mkdtemp(ws));
  load(&cfg, k_full);

  /* agentloop run, no flags. */
  al_agent_opts_input_init(&in);
  in.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  in.workspace = ws;
  in.system = sys;
  in.getenv_fn = fake_env;
  al_agent_opts_store_init(&run_st);
  ASSERT_EQ(
      al_config_agent_options(&cfg, &in, &run_o, &run_st, why, sizeof(why)), 0);

  /* chat -> session/create -> the header -> the daemon. */
  params = al_config_session_params(&cfg, ws, fake_env, why, sizeof(why));
  ASSERT_NOT_NULL(params);
  ASSERT_EQ(al__rpc_client_config(&cfg, params, why, sizeof(why)), 0);
  rec = json_deep_copy(params);
  json_object_set_new(rec, "rec", json_string("session"));
  json_object_set_new(rec, "cwd", json_string(ws));
  json_object_set_new(rec, "system", json_string(sys));
  memset(&h, 0, sizeof(h));
  ASSERT(al__tx_header_parse(rec, &h));
  al__daemon_options_init(&dopts);
  al_agent_opts_store_init(&d_st);
  /* session/create keeps the two objects as text (methods.c). */
  mcp = json_dumps(json_object_get(params, "mcp_config"), JSON_COMPACT);
  hooks = json_dumps(json_object_get(params, "hooks_config"), JSON_COMPACT);
  ASSERT_EQ(al__session_agent_options(
                &dopts, NULL, &h,
                json_string_value(json_object_get(params, "api_key")), true,
                mcp, hooks, &d_o, &d_st, why, sizeof(why)),
            0);

  same_shared(&run_o, &d_o);
  ASSERT_EQ(run_o.permission_mode, AL_PERMISSION_MODE_HEADLESS);
  ASSERT_EQ(d_o.permission_mode, AL_PERMISSION_MODE_INTERACTIVE);
  /* Headless: the ask rule denies; the daemon asks its watchers. */
  eq_str("deny[0]", run_o.deny_tools[0], "write_file");
  eq_str("deny[1]", run_o.deny_tools[1], "bash(rm *)");
  ASSERT(run_o.deny_tools[2] == NULL);
  eq_str("d deny[0]", d_o.deny_tools[0], "write_file");
  ASSERT(d_o.deny_tools[1] == NULL);
  eq_str("ask", d_st.ask[0], "bash(rm *)");
  /* And the values are the configuration's, not two equal defaults. */
  eq_str("fallback", run_o.fallback_model, "gpt-small");
  eq_str("key", run_o.api_key, "sk-test-openai");
  ASSERT_EQ(run_o.sandbox, AL_SANDBOX_OFF);
  ASSERT_NOT_NULL(run_o.mcp_config);
  ASSERT_NOT_NULL(run_o.hooks_config);
  ASSERT(run_o.no_task_tool && run_o.task_parallel_writers);
  ASSERT_EQ(run_o.task_max_depth, 3);
  ASSERT_EQ(run_o.task_token_budget, 12345);

  al_agent_opts_store_free(&run_st);
  al_agent_opts_store_free(&d_st);
  al__tx_header_free(&h);
  al_free(mcp);
  al_free(hooks);
  json_decref(rec);
  json_decref(params);
  al_config_free(&cfg);
  ASSERT_EQ(rmdir(ws), 0);
  return 0;
}

/* ---- each section lands ------------------------------------------------- */

typedef struct {
  const char *name;
  const char *yaml;
  void (*flags)(al_agent_opts_input_t *in); /* may be NULL */
  void (*check)(const al_agent_options_t *o, const al_agent_opts_store_t *st);
} row_t;

static void c_endpoint(const al_agent_options_t *o,
                       const al_agent_opts_store_t *st) {
  (void)st;
  eq_str("provider", o->provider, "openai");
  eq_str("model", o->model, "m1");
  eq_str("fallback", o->fallback_model, "m0");
  eq_str("base_url", o->base_url, "http://127.0.0.1:9");
  eq_str("key", o->api_key, "sk-my-key");
}

static void c_counts(const al_agent_options_t *o,
                     const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->max_tokens, 100);
  ASSERT_EQ(o->max_turns, 5);
}

static void f_counts(al_agent_opts_input_t *in) {
  in->flags.max_turns = 7; /* over the config's 5 */
  in->flags.retries = 2;
}

static void c_counts_flags(const al_agent_options_t *o,
                           const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->max_tokens, 100);
  ASSERT_EQ(o->max_turns, 7);
  ASSERT_EQ(o->retry_max_attempts, 3);
}

static void c_timeouts(const al_agent_options_t *o,
                       const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->connect_timeout_ms, 11);
  ASSERT_EQ(o->idle_timeout_ms, 22);
  ASSERT_EQ(o->progress_timeout_ms, 33);
  ASSERT_EQ(o->tool_timeout_ms, 44);
}

static al_limits_t g_flag_limits;

static void f_limits(al_agent_opts_input_t *in) {
  memset(&g_flag_limits, 0, sizeof(g_flag_limits));
  ASSERT_EQ(al_limits_set_kv(&g_flag_limits, "header_count=50"), 0);
  in->flags.limits = &g_flag_limits;
}

static void c_limits(const al_agent_options_t *o,
                     const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->limits.reply_bytes, 4096);
  ASSERT_EQ(o->limits.header_count, 50);
}

static void c_sandbox(const al_agent_options_t *o,
                      const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->sandbox, AL_SANDBOX_REQUIRED);
  ASSERT(o->bash_network);
  eq_str("ws first", o->allowed_paths[0], "/tmp/al-ws");
  eq_str("writable", o->allowed_paths[1], "/tmp/al-w");
  ASSERT(o->allowed_paths[2] == NULL);
  eq_str("denied", o->denied_paths[0], "/tmp/al-d");
}

static void f_sandbox_off(al_agent_opts_input_t *in) {
  in->flags.sandbox = AL_SANDBOX_OFF;
}

static void c_sandbox_flag(const al_agent_options_t *o,
                           const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->sandbox, AL_SANDBOX_OFF);
}

static const char *const k_flag_allow[] = {"grep", NULL};
static const char *const k_flag_dirs[] = {"/tmp/al-flagdir", NULL};

static void f_perm(al_agent_opts_input_t *in) {
  in->permission_mode = AL_PERMISSION_MODE_HEADLESS;
  in->flags.allow_tools = k_flag_allow;
  in->flags.tools_dirs = k_flag_dirs;
}

static void c_perm(const al_agent_options_t *o,
                   const al_agent_opts_store_t *st) {
  ASSERT_EQ(o->permission_mode, AL_PERMISSION_MODE_HEADLESS);
  eq_list("allow", o->allow_tools,
          (const char *const[]){"grep", "read_file", NULL});
  eq_list("deny", o->deny_tools,
          (const char *const[]){"bash", "write_file", NULL});
  ASSERT(st->ask == NULL);
  eq_list("tools_dirs", o->tools_dirs,
          (const char *const[]){"/tmp/al-flagdir", "/tmp/al-t", NULL});
  ASSERT(o->tools_d && o->builtin_tools);
}

static void c_perm_interactive(const al_agent_options_t *o,
                               const al_agent_opts_store_t *st) {
  ASSERT_EQ(o->permission_mode, AL_PERMISSION_MODE_INTERACTIVE);
  eq_list("deny", o->deny_tools, (const char *const[]){"bash", NULL});
  eq_list("ask", st->ask, (const char *const[]){"write_file", NULL});
}

static void f_context(al_agent_opts_input_t *in) {
  in->flags.keep_recent = 999; /* the flag wins */
}

static void c_context(const al_agent_options_t *o,
                      const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->context_window, 40000);
  ASSERT_EQ(o->keep_recent, 999);
  ASSERT_EQ(o->max_messages, 12);
  ASSERT(o->no_prompt_cache);
  ASSERT(!o->no_auto_compact);
}

static void c_mcp_hooks(const al_agent_options_t *o,
                        const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_NOT_NULL(o->mcp_config);
  ASSERT_NOT_NULL(strstr(o->mcp_config, "\"srv\""));
  ASSERT_NOT_NULL(o->hooks_config);
  ASSERT_NOT_NULL(strstr(o->hooks_config, "\"stop\""));
}

static void f_given(al_agent_opts_input_t *in) {
  in->mcp_text_given = true; /* the daemon: the client's text as is */
  in->mcp_config = "{\"mcpServers\":{}}";
  in->mcp_project = true;
  in->task_preamble = "PREAMBLE";
}

static void c_given(const al_agent_options_t *o,
                    const al_agent_opts_store_t *st) {
  eq_str("mcp", o->mcp_config, "{\"mcpServers\":{}}");
  ASSERT(o->hooks_config == NULL);
  ASSERT(o->mcp_project);
  eq_str("preamble", st->task_preamble, "PREAMBLE");
}

static void c_subagents(const al_agent_options_t *o,
                        const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT(o->no_task_tool);
  ASSERT_EQ(o->task_max_depth, 3);
  ASSERT_EQ(o->task_token_budget, 50000);
  ASSERT(o->task_parallel_writers);
}

static void c_subagents_unset(const al_agent_options_t *o,
                              const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT(!o->no_task_tool); /* on unless the section says no */
  ASSERT_EQ(o->task_max_depth, 0);
  ASSERT_EQ(o->task_token_budget, 0);
  ASSERT(!o->task_parallel_writers);
}

/* A main agent from a definition (a batch job's "agent"). */
static const char *const k_def_tools[] = {"read_file", "grep", NULL};
static const char *const k_def_never[] = {"grep", NULL};
static const al_subagent_def_t k_main_def = {
    "reviewer", "reviews", "REVIEWER PROMPT", "m-def", k_def_tools,
    k_def_never, AL_PERMISSION_MODE_JOB, 9, "test"};

static void f_main_agent(al_agent_opts_input_t *in) {
  in->system = "ASSEMBLED";
  in->task_preamble = "PREAMBLE";
  in->main_agent = &k_main_def;
}

static void c_main_agent(const al_agent_options_t *o,
                         const al_agent_opts_store_t *st) {
  (void)st;
  eq_str("system", o->system, "REVIEWER PROMPT\n\nPREAMBLE");
  eq_str("model", o->model, "m-def");
  ASSERT_EQ(o->max_turns, 9);
  eq_list("only", o->tools_only, k_def_tools);
  eq_list("never", o->tools_never, k_def_never);
  ASSERT_EQ(o->permission_mode, AL_PERMISSION_MODE_JOB);
}

/* A model and max_turns given over the configuration win over the
 * definition's, as a flag wins over the configuration. */
static void f_main_agent_flags(al_agent_opts_input_t *in) {
  f_main_agent(in);
  in->model_flag = true;
  in->flags.max_turns = 3;
}

static void c_main_agent_flags(const al_agent_options_t *o,
                               const al_agent_opts_store_t *st) {
  (void)st;
  eq_str("model", o->model, "m1");
  ASSERT_EQ(o->max_turns, 3);
  eq_list("only", o->tools_only, k_def_tools);
}

static al_limits_t g_ceiling;

static void f_ceiling(al_agent_opts_input_t *in) {
  memset(&g_ceiling, 0, sizeof(g_ceiling));
  ASSERT_EQ(al_limits_set_kv(&g_ceiling, "reply_bytes=1000"), 0);
  in->ceiling = &g_ceiling;
  in->base_limits = &g_ceiling;
}

static void c_ceiling(const al_agent_options_t *o,
                      const al_agent_opts_store_t *st) {
  (void)st;
  ASSERT_EQ(o->limits.reply_bytes, 1000); /* 4096 asked, clamped */
}

TEST_IMPL(agent_opts_sections_land) {
  static const row_t rows[] = {
      {"endpoint",
       "provider: openai\nmodel: m1\nfallback_model: m0\n"
       "base_url: http://127.0.0.1:9\napi_key_env: MY_KEY\n",
       NULL, c_endpoint},
      {"counts", "max_tokens: 100\nmax_turns: 5\n", NULL, c_counts},
      {"counts+flags", "max_tokens: 100\nmax_turns: 5\n", f_counts,
       c_counts_flags},
      {"timeouts",
       "timeouts: {connect_ms: 11, idle_ms: 22, progress_ms: 33, "
       "tool_ms: 44}\n",
       NULL, c_timeouts},
      {"limits", "limits: {reply_bytes: 4096}\n", f_limits, c_limits},
      {"limits ceiling", "limits: {reply_bytes: 4096}\n", f_ceiling, c_ceiling},
      {"sandbox",
       "sandbox: {mode: required, network: true, writable: [/tmp/al-w], "
       "denied: [/tmp/al-d]}\n",
       NULL, c_sandbox},
      {"sandbox flag", "sandbox: {mode: required}\n", f_sandbox_off,
       c_sandbox_flag},
      {"permissions headless",
       "permissions: {allow: [read_file], deny: [bash], ask: [write_file]}\n"
       "tools_d: [/tmp/al-t]\n",
       f_perm, c_perm},
      {"permissions interactive",
       "permissions: {deny: [bash], ask: [write_file]}\n", NULL,
       c_perm_interactive},
      {"context",
       "context: {window: 40000, keep_recent: 5, max_messages: 12, "
       "prompt_cache: false}\n",
       f_context, c_context},
      {"mcp and hooks",
       "mcp_servers:\n  srv:\n    command: /bin/true\n"
       "hooks:\n  stop:\n    - name: s\n      command: [/bin/true]\n",
       NULL, c_mcp_hooks},
      {"given text", "mcp_servers:\n  srv:\n    command: /bin/true\n", f_given,
       c_given},
      {"subagents",
       "subagents: {enabled: false, max_depth: 3, token_budget: 50000, "
       "parallel_writers: true}\n",
       NULL, c_subagents},
      {"subagents unset", "subagents: {enabled: true}\n", NULL,
       c_subagents_unset},
      {"main agent", "model: m1\nmax_turns: 5\n", f_main_agent,
       c_main_agent},
      {"main agent under flags", "model: m1\nmax_turns: 5\n",
       f_main_agent_flags, c_main_agent_flags},
  };
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(rows); i++) {
    al_config_t cfg;
    al_agent_opts_input_t in;
    al_agent_opts_store_t st;
    al_agent_options_t o;
    char why[1024];

    fprintf(stderr, "row: %s\n", rows[i].name);
    load(&cfg, rows[i].yaml);
    al_agent_opts_input_init(&in);
    in.workspace = "/tmp/al-ws";
    in.getenv_fn = fake_env;
    if (rows[i].flags != NULL) {
      rows[i].flags(&in);
    }
    al_agent_opts_store_init(&st);
    if (al_config_agent_options(&cfg, &in, &o, &st, why, sizeof(why)) != 0) {
      AL_TEST_FAIL("%s: %s", rows[i].name, why);
    }
    rows[i].check(&o, &st);
    al_agent_opts_store_free(&st);
    al_config_free(&cfg);
  }
  return 0;
}

/* A bad context: section fails with its position, unless lenient (a
 * hand-edited transcript header in the daemon). */
TEST_IMPL(agent_opts_bad_section) {
  al_config_t cfg;
  al_agent_opts_input_t in;
  al_agent_opts_store_t st;
  al_agent_options_t o;
  char why[1024];

  al_config_init(&cfg);
  ASSERT_EQ(json_object_set_new(cfg.sections, "context",
                                json_pack("{s:i}", "window", 5)),
            0);
  al_agent_opts_input_init(&in);
  al_agent_opts_store_init(&st);
  ASSERT_EQ(al_config_agent_options(&cfg, &in, &o, &st, why, sizeof(why)),
            AL_ECONFIG);
  ASSERT_NOT_NULL(strstr(why, "context.window"));
  al_agent_opts_store_free(&st);
  in.lenient = true;
  ASSERT_EQ(al_config_agent_options(&cfg, &in, &o, &st, why, sizeof(why)), 0);
  ASSERT_EQ(o.context_window, 0);
  al_agent_opts_store_free(&st);
  al_config_free(&cfg);
  return 0;
}

/* What a child agent inherits: the environment and the instruction
 * files, not the parent's guidance nor its configured additions. */
TEST_IMPL(sysprompt_preamble_for_children) {
  char ws[] = "/tmp/al_pre_XXXXXX";
  char path[128];
  al_sysprompt_options_t so;
  al_config_t cfg;
  al_buf_t pre, full;
  FILE *f;

  ASSERT_NOT_NULL(mkdtemp(ws));
  snprintf(path, sizeof(path), "%s/AGENTS.md", ws);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("PROJECT-RULE-17\n", f);
  ASSERT_EQ(fclose(f), 0);
  load(&cfg, "system_prompt:\n  append: PARENT-ONLY\n");
  memset(&so, 0, sizeof(so));
  so.workspace = ws;
  so.sandbox = "bwrap";
  so.config_dir = "/nonexistent";
  so.cfg = &cfg;
  so.extra = "EXTRA-ONLY";
  so.now = 86400;
  al_buf_init(&pre, 1 << 20);
  al_buf_init(&full, 1 << 20);
  ASSERT_EQ(al_sysprompt_preamble(&so, &pre, NULL), 0);
  ASSERT_EQ(al_sysprompt_build(&so, &full, NULL, NULL), 0);
  ASSERT(strncmp(pre.data, "Environment:\n- Working directory: ", 34) == 0);
  ASSERT_NOT_NULL(strstr(pre.data, ws));
  ASSERT_NOT_NULL(strstr(pre.data, "- Sandbox: bwrap\n"));
  ASSERT_NOT_NULL(strstr(pre.data, "PROJECT-RULE-17"));
  ASSERT(strstr(pre.data, "How to work") == NULL);
  ASSERT(strstr(pre.data, "PARENT-ONLY") == NULL);
  ASSERT(strstr(pre.data, "EXTRA-ONLY") == NULL);
  /* The parent's prompt holds the same environment block and files. */
  ASSERT_NOT_NULL(strstr(full.data, "You are agentloop"));
  ASSERT_NOT_NULL(strstr(full.data, "How to work"));
  ASSERT_NOT_NULL(strstr(full.data, "PROJECT-RULE-17"));
  ASSERT_NOT_NULL(strstr(full.data, "PARENT-ONLY"));
  {
    size_t envlen =
        (size_t)(strstr(pre.data, "- Sandbox: bwrap\n") - pre.data) + 17;

    ASSERT_NOT_NULL(strstr(full.data, "Environment:"));
    ASSERT_EQ(memcmp(strstr(full.data, "Environment:"), pre.data, envlen), 0);
  }
  al_buf_free(&pre);
  al_buf_free(&full);
  al_config_free(&cfg);
  ASSERT_EQ(unlink(path), 0);
  ASSERT_EQ(rmdir(ws), 0);
  return 0;
}

/* ---- allocation failures ------------------------------------------------- */

/* Fails allocation number t_fail_at (1-based); t_live counts what is held. */
static int t_count, t_fail_at;
static long t_live;

static void *t_malloc(size_t n) {
  void *p = ++t_count == t_fail_at ? NULL : malloc(n);

  t_live += p != NULL;
  return p;
}

static void *t_realloc(void *p, size_t n) {
  void *q = ++t_count == t_fail_at ? NULL : realloc(p, n);

  t_live += q != NULL && p == NULL;
  return q;
}

static void *t_calloc(size_t c, size_t n) {
  void *p = ++t_count == t_fail_at ? NULL : calloc(c, n);

  t_live += p != NULL;
  return p;
}

static void t_free(void *p) {
  t_live -= p != NULL;
  free(p);
}

/* Failing allocation k for k = 1, 2, ... until the mapping passes: every
 * failure is AL_ENOMEM or a refusal naming it, nothing leaks, and the
 * store frees what the half-built options hold. */
TEST_IMPL(agent_opts_allocation_failures) {
  al_config_t cfg;
  int k, rc = -1;

  load(&cfg, k_full);
  ASSERT_EQ(al_set_allocator(t_malloc, t_realloc, t_calloc, t_free), 0);
  for (k = 1; rc != 0 && k < 100000; k++) {
    al_agent_opts_input_t in;
    al_agent_opts_store_t st;
    al_agent_options_t o;
    char why[1024];
    long before = t_live;

    al_agent_opts_input_init(&in);
    in.permission_mode = AL_PERMISSION_MODE_HEADLESS;
    in.workspace = "/tmp";
    in.system = "S";
    in.getenv_fn = fake_env;
    al_agent_opts_store_init(&st);
    t_count = 0;
    t_fail_at = k;
    rc = al_config_agent_options(&cfg, &in, &o, &st, why, sizeof(why));
    t_fail_at = 0;
    if (rc != 0 && rc != AL_ENOMEM && strstr(why, "memory") == NULL) {
      AL_TEST_FAIL("allocation %d: %s: %s", k, al_err_name(rc), why);
    }
    al_agent_opts_store_free(&st);
    if (t_live != before) {
      AL_TEST_FAIL("allocation %d failed: %ld blocks leaked", k,
                   t_live - before);
    }
  }
  ASSERT_EQ(rc, 0);
  ASSERT(k > 10);
  al_config_free(&cfg);
  return 0;
}
