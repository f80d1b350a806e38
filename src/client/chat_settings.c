/* What a chat session takes from the shell it was started in (docs/
 * protocol.md "The daemon follows the client"): the configuration files
 * seen from this directory, this shell's environment and the chat's flags
 * give the provider, model, base URL and the key's value; the system
 * prompt is assembled here too. They travel in session/create and
 * session/resume over the peer-checked socket, so a daemon started from
 * another shell serves this one with this one's settings. Start-up work:
 * blocking reads before the chat's loop runs. */
#include <stdio.h>
#include <string.h>

#include "agentloop/sandbox.h"
#include "client/chat.h"
#include "client/cli.h"
#include "config/config.h"

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
  size_t i;
  int code = al__cli_config_load(&cfg, NULL, false, "agentloop");

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
  key = al_config_api_key(&cfg, env_get, NULL);
  o = json_pack("{s:s, s:s?, s:s?, s:s?}", "provider",
                al_config_provider(&cfg), "model", cfg.model, "base_url",
                cfg.base_url, "api_key", key);
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
  if (o != NULL && with_prompt) {
    al_buf_t p;

    al_buf_init(&p, 64u << 20);
    /* The daemon's sessions run in its AUTO sandbox: describe that. */
    if (al__cli_system_prompt(&cfg, NULL, AL_SANDBOX_AUTO, NULL, &p,
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
