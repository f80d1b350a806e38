/* What a chat session takes from the shell it was started in (docs/
 * protocol.md "The daemon follows the client"): the configuration files
 * seen from this directory, this shell's environment and the chat's flags
 * give the provider, model, base URL and the key's value; the system
 * prompt is assembled here too. They travel in session/create and
 * session/resume over the peer-checked socket, so a daemon started from
 * another shell serves this one with this one's settings. Start-up work:
 * blocking reads before the chat's loop runs. */
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include "agentloop/sandbox.h"
#include "client/chat.h"
#include "client/cli.h"
#include "config/config.h"
#include "config/context.h"
#include "rpc/rpc.h"

static const char *env_get(const char *name) {
  const char *v = al_sandbox_getenv(name);

  return v != NULL && v[0] != '\0' ? v : NULL;
}

int al__chat_settings(const char *provider, const char *model,
                      const char *base_url, bool with_prompt,
                      json_t **out) {
  static const char *const keys[] = {"provider", "model", "base_url"};
  static const char *const flags[] = {"--provider", "--model", "--base-url"};
  const char *vals[] = {provider, model, base_url};
  al_config_t cfg;
  char why[700];
  const char *key;
  json_t *o;
  json_t *ctx = NULL;
  size_t i;
  int code = al__cli_config_load_for(&cfg, NULL, false, provider,
                                     "agentloop");

  *out = NULL;
  for (i = 0; code == 0 && i < AL_ARRAY_SIZE(keys); i++) {
    if (vals[i] != NULL && al_config_set_flag(&cfg, keys[i], vals[i],
                                              flags[i], why,
                                              sizeof(why)) != 0) {
      fprintf(stderr, "agentloop: %s\n", why);
      code = 2;
    }
  }
  if (code != 0) {
    al_config_free(&cfg);
    return code;
  }
  {
    /* The context: section, checked here so its FILE:LINE:COL reaches
     * the user; the daemon gets the values (docs/protocol.md). */
    al_agent_options_t co;

    memset(&co, 0, sizeof(co));
    if (al__config_context_apply(&cfg, &co, why, sizeof(why)) != 0) {
      fprintf(stderr, "agentloop: %s\n", why);
      al_config_free(&cfg);
      return 2;
    }
    ctx = al__context_to_json(&co);
  }
  key = al_config_api_key(&cfg, env_get, NULL);
  o = json_pack("{s:s, s:s?, s:s?, s:s?}", "provider",
                al_config_provider(&cfg), "model", cfg.model, "base_url",
                cfg.base_url, "api_key", key);
  if (o != NULL && ctx != NULL && json_object_size(ctx) > 0) {
    json_object_set(o, "context", ctx);
  }
  json_decref(ctx);
  if (o != NULL && cfg.sandbox.mode != NULL) {
    json_object_set_new(o, "sandbox", json_string(cfg.sandbox.mode));
  }
  if (o != NULL && cfg.sandbox.network == 1) {
    json_object_set_new(o, "network", json_true());
  }
  if (o != NULL) {
    /* limits: in the shape session/create takes (checked at load). */
    const json_t *ls = al_config_section(&cfg, "limits");

    if (json_is_object(ls) && json_object_size(ls) > 0) {
      json_object_set_new(o, "limits", json_deep_copy(ls));
    }
  }
  if (o != NULL) {
    json_t *to = json_object();
    static const char *const tn[] = {"connect_ms", "idle_ms", "progress_ms",
                                     "tool_ms"};
    const int64_t tv[] = {cfg.timeouts.connect_ms, cfg.timeouts.idle_ms,
                          cfg.timeouts.progress_ms, cfg.timeouts.tool_ms};

    for (i = 0; i < AL_ARRAY_SIZE(tn); i++) {
      if (tv[i] > 0) {
        json_object_set_new(to, tn[i], json_integer(tv[i]));
      }
    }
    if (json_object_size(to) > 0) {
      json_object_set_new(o, "timeouts", to);
    } else {
      json_decref(to);
    }
  }
  if (o != NULL) {
    /* Paths, resolved here (the daemon's cwd is not ours). */
    static const char *const pk[] = {"denied", "writable", "tools_dirs"};
    static const char *const ck[] = {"sandbox.denied", "sandbox.writable",
                                     "tools_d"};
    char **const pl[] = {cfg.sandbox.denied, cfg.sandbox.writable,
                         cfg.tools_d};
    char ws[PATH_MAX];
    json_t *ps = json_object();

    if (getcwd(ws, sizeof(ws)) == NULL) {
      snprintf(ws, sizeof(ws), "/");
    }
    for (i = 0; i < AL_ARRAY_SIZE(pk); i++) {
      json_t *a;
      size_t j;

      if (pl[i] == NULL) {
        continue;
      }
      a = json_array();
      for (j = 0; pl[i][j] != NULL; j++) {
        char *r = al_config_path(&cfg, ck[i], pl[i][j], ws);

        /* A relative path from the environment or a flag: from here. */
        if (r != NULL && r[0] != '/') {
          char *abs = al_malloc(strlen(ws) + strlen(r) + 2);

          if (abs != NULL) {
            sprintf(abs, "%s/%s", ws, r);
          }
          al_free(r);
          r = abs;
        }
        if (r != NULL) {
          json_array_append_new(a, json_string(r));
          al_free(r);
        }
      }
      json_object_set_new(ps, pk[i], a);
    }
    if (json_object_size(ps) > 0) {
      json_object_set_new(o, "paths", ps);
    } else {
      json_decref(ps);
    }
  }
  if (o != NULL && cfg.max_tokens > 0) {
    json_object_set_new(o, "max_tokens", json_integer(cfg.max_tokens));
  }
  if (o != NULL && cfg.max_turns > 0) {
    json_object_set_new(o, "max_turns", json_integer(cfg.max_turns));
  }
  if (o != NULL) {
    /* The permission rules, for the daemon's gate (docs/config.md). */
    static const char *const names[] = {"allow_tools", "deny_tools",
                                        "ask_tools"};
    char **const lists[] = {cfg.permissions.allow, cfg.permissions.deny,
                            cfg.permissions.ask};

    for (i = 0; i < AL_ARRAY_SIZE(names); i++) {
      json_t *a;
      size_t j;

      if (lists[i] == NULL) {
        continue;
      }
      a = json_array();
      for (j = 0; lists[i][j] != NULL; j++) {
        json_array_append_new(a, json_string(lists[i][j]));
      }
      json_object_set_new(o, names[i], a);
    }
  }
  if (o != NULL && al__rpc_client_config(&cfg, o, why, sizeof(why)) != 0) {
    /* mcp_servers: and hooks: as the file says now (issue 22). */
    fprintf(stderr, "agentloop: %s\n", why);
    json_decref(o);
    al_config_free(&cfg);
    return 2;
  }
  if (o != NULL && with_prompt) {
    al_buf_t p;

    al_buf_init(&p, 64u << 20);
    al_sandbox_policy_t pol = AL_SANDBOX_AUTO;

    /* The sandbox the session will ask the daemon for. */
    if (cfg.sandbox.mode != NULL) {
      (void)al__cli_sandbox_policy(cfg.sandbox.mode, &pol);
    }
    if (al__cli_system_prompt(&cfg, NULL, pol, NULL, &p,
                              "agentloop") == 0 &&
        p.data != NULL) {
      json_object_set_new(o, "system", json_string(p.data));
    }
    al_buf_free(&p);
  }
  al_config_free(&cfg);
  if (o == NULL) {
    return 1;
  }
  *out = o;
  return 0;
}
