/* The parts of a client's configuration that a session takes from the
 * client rather than from the daemon's start (docs/protocol.md, "The
 * daemon follows the client"): config.yaml's mcp_servers: and hooks:, as
 * session/create's mcp_config and hooks_config. A daemon reads the file
 * once, when it starts; a chat reads it when it starts, so a server or a
 * hook added since works in the next chat without a daemon restart
 * (issue 22). Blocking (the project's trust file): start-up work, before
 * the client's loop runs. */
#include "rpc/rpc.h"

#include <stdio.h>

#include "config/config.h"
#include "mcp/mcp.h"

/* JSON text (may be NULL: none) as an object for the params. */
static int put(json_t *params, const char *key, const char *txt, char *why,
               size_t why_len) {
  json_t *v = txt != NULL ? json_loads(txt, 0, NULL) : json_object();

  if (!json_is_object(v)) {
    json_decref(v);
    snprintf(why, why_len, "%s: out of memory", key);
    return AL_ENOMEM;
  }
  return json_object_set_new(params, key, v) == 0 ? 0 : AL_ENOMEM;
}

int al__rpc_client_config(const struct al_config_s *cfg, json_t *params,
                          char *why, size_t why_len) {
  char *mcp = NULL;
  char *hooks = NULL;
  al_buf_t err;
  int rc;

  al_buf_init(&err, 16 * 1024);
  /* No workspace: the daemon's agent reads a trusted project's .mcp.json
   * itself (al_agent_options_t.mcp_project). */
  rc = al__mcp_config_load2(NULL, al_config_section(cfg, "mcp_servers"), NULL,
                            false, &mcp, &err);
  if (rc != 0) {
    snprintf(why, why_len, "MCP configuration: %s",
             err.data != NULL ? err.data : "out of memory");
  } else if ((rc = al__hooks_config_load(NULL, al_config_section(cfg, "hooks"),
                                         &hooks, &err)) != 0) {
    snprintf(why, why_len, "hooks configuration: %s",
             err.data != NULL ? err.data : "out of memory");
  }
  /* Both always, {} for none: a server or hook removed from the file is
   * gone too, whatever the daemon read at its start. */
  if (rc == 0) {
    rc = put(params, "mcp_config", mcp, why, why_len);
  }
  if (rc == 0) {
    rc = put(params, "hooks_config", hooks, why, why_len);
  }
  al_free(mcp);
  al_free(hooks);
  al_buf_free(&err);
  return rc;
}
