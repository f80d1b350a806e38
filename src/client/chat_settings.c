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
#include "config/agent_opts.h"
#include "config/agentdefs.h"
#include "rpc/rpc.h"

static const char *env_get(const char *name) {
  const char *v = al_sandbox_getenv(name);

  return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Sub-agents (docs/subagents.md): this shell's agent definitions and the
 * child preamble, read here (the daemon reads no agent file), added to
 * the subagents object al_config_session_params began. */
static int chat_subagents(const al_config_t *cfg, al_sandbox_policy_t pol,
                          json_t *o) {
  al_agentdefs_t *d = NULL;
  al_buf_t pre;
  int rc;

  if (al__cli_agents_load(cfg, NULL, false, false, "agentloop", &d) != 0) {
    return AL_ENOMEM;
  }
  al_buf_init(&pre, AL_SUBAGENTS_PREAMBLE_MAX);
  rc = al__cli_task_preamble(cfg, NULL, pol, &pre);
  if (rc == AL_ETOOBIG) {
    rc = 0; /* over the bound: children start without it */
    pre.len = 0;
  }
  if (rc == 0) {
    rc = al_config_session_agents(o, d, pre.len > 0 ? pre.data : NULL);
  }
  al_buf_free(&pre);
  al_agentdefs_free(d);
  return rc;
}

int al__chat_settings(const char *provider, const char *model,
                      const char *base_url, bool with_prompt,
                      json_t **out) {
  static const char *const keys[] = {"provider", "model", "base_url"};
  static const char *const flags[] = {"--provider", "--model", "--base-url"};
  const char *vals[] = {provider, model, base_url};
  al_config_t cfg;
  char why[700];
  json_t *o;
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
    char ws[PATH_MAX];

    /* Paths resolve from here: the daemon's cwd is not ours. */
    if (getcwd(ws, sizeof(ws)) == NULL) {
      snprintf(ws, sizeof(ws), "/");
    }
    o = al_config_session_params(&cfg, ws, env_get, why, sizeof(why));
    if (o == NULL) {
      fprintf(stderr, "agentloop: %s\n", why[0] != '\0' ? why
                                                        : "out of memory");
      al_config_free(&cfg);
      return why[0] != '\0' ? 2 : 1;
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
    (void)al_config_sandbox_policy(cfg.sandbox.mode, &pol);
    if (al__cli_system_prompt(&cfg, NULL, pol, NULL, &p,
                              "agentloop") == 0 &&
        p.data != NULL) {
      json_object_set_new(o, "system", json_string(p.data));
    }
    al_buf_free(&p);
    if (chat_subagents(&cfg, pol, o) != 0) {
      json_decref(o);
      o = NULL;
    }
  }
  al_config_free(&cfg);
  if (o == NULL) {
    return 1;
  }
  *out = o;
  return 0;
}
