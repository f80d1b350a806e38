/* MCP server configuration (mcp.h: al__mcp_config_parse) and tool names.
 * The JSON shape is a project's .mcp.json plus our own keys; the
 * config.yaml loader hands its `mcp_servers:` section over as the same
 * JSON. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mcp/mcp.h"
#include "tools/clitool.h"
#include "transport/transport.h"

void al__mcp_server_config_free(al_mcp_server_config_t *s) {
  size_t i;

  al_free(s->name);
  for (i = 0; s->argv != NULL && s->argv[i] != NULL; i++) {
    al_free(s->argv[i]);
  }
  al_free(s->argv);
  for (i = 0; s->env != NULL && s->env[i] != NULL; i++) {
    al_free(s->env[i]);
  }
  al_free(s->env);
  al_free(s->cwd);
  al_free(s->url);
  for (i = 0; s->headers != NULL && s->headers[i] != NULL; i++) {
    al_free(s->headers[i]);
  }
  al_free(s->headers);
  json_decref(s->tool_overrides);
  json_decref(s->always_load);
  memset(s, 0, sizeof(*s));
}

void al__mcp_config_free(al_mcp_config_t *c) {
  size_t i;

  for (i = 0; i < c->n; i++) {
    al__mcp_server_config_free(&c->servers[i]);
  }
  al_free(c->servers);
  c->servers = NULL;
  c->n = 0;
}

/* "${VAR}" -> the variable's value (unset: empty); anything else copied. */
static int expand_vars(const char *s, al_buf_t *out) {
  const char *p = s;

  while (*p != '\0') {
    const char *end;

    if (p[0] == '$' && p[1] == '{' && (end = strchr(p + 2, '}')) != NULL) {
      char name[256];
      size_t n = (size_t)(end - (p + 2));
      const char *v;

      if (n > 0 && n < sizeof(name)) {
        memcpy(name, p + 2, n);
        name[n] = '\0';
        v = getenv(name);
        if (v != NULL && al_buf_append_str(out, v) != 0) {
          return AL_ENOMEM;
        }
        p = end + 1;
        continue;
      }
    }
    if (al_buf_append(out, p, 1) != 0) {
      return AL_ENOMEM;
    }
    p++;
  }
  if (out->data == NULL && al_buf_append(out, "", 0) != 0) {
    return AL_ENOMEM;
  }
  return 0;
}

static bool get_ms(const json_t *o, const char *key, uint64_t *out,
                   const char *server, al_buf_t *err) {
  const json_t *v = json_object_get(o, key);

  if (v == NULL) {
    return true;
  }
  if (!json_is_integer(v) || json_integer_value(v) <= 0) {
    al_buf_printf(err, "mcpServers.%s.%s: must be a positive integer (ms)",
                  server, key);
    return false;
  }
  *out = (uint64_t)json_integer_value(v);
  return true;
}

static bool get_bool(const json_t *o, const char *key, bool *out,
                     const char *server, al_buf_t *err) {
  const json_t *v = json_object_get(o, key);

  if (v == NULL) {
    return true;
  }
  if (!json_is_boolean(v)) {
    al_buf_printf(err, "mcpServers.%s.%s: must be true or false", server, key);
    return false;
  }
  *out = json_is_true(v);
  return true;
}

static bool name_ok(const char *name) {
  size_t i;

  if (name[0] == '\0' || strlen(name) > 48) {
    return false;
  }
  for (i = 0; name[i] != '\0'; i++) {
    if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-') {
      return false;
    }
  }
  return true;
}

static const char *const known_keys[] = {
    "command", "args", "env", "cwd", "sandbox", "network",
    "startup_timeout_ms", "timeout_ms", "max_timeout_ms", "disabled",
    "tools", "type", "always_load", "url", "headers", NULL};

/* always_load: true | false | [tool names]. */
static int parse_always_load(const char *name, const json_t *v,
                             al_mcp_server_config_t *s, al_buf_t *err) {
  size_t i;
  json_t *e;

  if (v == NULL || json_is_false(v)) {
    return 0;
  }
  if (json_is_array(v)) {
    json_array_foreach(v, i, e) {
      if (!json_is_string(e)) {
        al_buf_printf(err, "mcpServers.%s.always_load[%zu]: must be a tool name",
                      name, i);
        return AL_EINVAL;
      }
    }
  } else if (!json_is_true(v)) {
    al_buf_printf(err,
                  "mcpServers.%s.always_load: must be true, false or a list "
                  "of tool names",
                  name);
    return AL_EINVAL;
  }
  s->always_load = json_incref((json_t *)v);
  return 0;
}

static void timeouts_default(al_mcp_server_config_t *s) {
  s->startup_timeout_ms = AL_MCP_DEFAULT_STARTUP_TIMEOUT_MS;
  s->call_timeout_ms = AL_MCP_DEFAULT_CALL_TIMEOUT_MS;
  s->call_max_ms = AL_MCP_DEFAULT_CALL_MAX_MS;
}

/* {"url": S, "headers"?: {K: S}} plus the timeouts: a Streamable HTTP
 * server. Keys of a child (command, env, sandbox...) make no sense here. */
static int parse_http(const char *name, const json_t *o,
                      al_mcp_server_config_t *s, al_buf_t *err) {
  static const char *const child_only[] = {"command", "args", "env", "cwd",
                                           "sandbox", "network", NULL};
  const json_t *url = json_object_get(o, "url");
  const json_t *hd = json_object_get(o, "headers");
  const char *key;
  json_t *v;
  char why[128];
  size_t i, n = 0;

  for (i = 0; child_only[i] != NULL; i++) {
    if (json_object_get(o, child_only[i]) != NULL) {
      al_buf_printf(err, "mcpServers.%s.%s: not allowed with url (an HTTP "
                         "server is not a child process)",
                    name, child_only[i]);
      return AL_EINVAL;
    }
  }
  if (json_is_string(json_object_get(o, "type")) &&
      strcmp(json_string_value(json_object_get(o, "type")), "sse") == 0) {
    al_buf_printf(err, "mcpServers.%s.type: the old HTTP+SSE transport "
                       "(2024-11-05) is not supported; use a Streamable "
                       "HTTP endpoint (type: http)",
                  name);
    return AL_EINVAL;
  }
  if (!json_is_string(url) ||
      al_http_url_check(json_string_value(url), why, sizeof(why)) != 0) {
    al_buf_printf(err, "mcpServers.%s.url: must be an http(s) URL%s%s", name,
                  json_is_string(url) ? ": " : "",
                  json_is_string(url) ? why : "");
    return AL_EINVAL;
  }
  if (hd != NULL && !json_is_object(hd)) {
    al_buf_printf(err, "mcpServers.%s.headers: must be a map of strings",
                  name);
    return AL_EINVAL;
  }
  timeouts_default(s);
  if (!get_ms(o, "startup_timeout_ms", &s->startup_timeout_ms, name, err) ||
      !get_ms(o, "timeout_ms", &s->call_timeout_ms, name, err) ||
      !get_ms(o, "max_timeout_ms", &s->call_max_ms, name, err)) {
    return AL_EINVAL;
  }
  s->name = al_strdup(name);
  s->url = al_strdup(json_string_value(url));
  s->headers = al_calloc(json_object_size(hd) + 1, sizeof(*s->headers));
  if (s->name == NULL || s->url == NULL || s->headers == NULL) {
    return AL_ENOMEM;
  }
  json_object_foreach((json_t *)hd, key, v) {
    al_buf_t b;
    size_t k;
    bool bad = key[0] == '\0' || !json_is_string(v);

    for (k = 0; key[k] != '\0' && !bad; k++) {
      bad = key[k] <= ' ' || key[k] == ':' || key[k] == 0x7f;
    }
    if (bad) {
      al_buf_printf(err, "mcpServers.%s.headers.%s: must be a string under a "
                         "header name",
                    name, key);
      return AL_EINVAL;
    }
    al_buf_init(&b, 64 * 1024);
    if (al_buf_printf(&b, "%s: ", key) != 0 ||
        expand_vars(json_string_value(v), &b) != 0) {
      al_buf_free(&b);
      return AL_ENOMEM;
    }
    if (strpbrk(b.data, "\r\n") != NULL) {
      al_buf_free(&b);
      al_buf_printf(err, "mcpServers.%s.headers.%s: the value (after ${VAR} "
                         "expansion) has a line break",
                    name, key);
      return AL_EINVAL;
    }
    s->headers[n++] = b.data;
  }
  if (s->tool_overrides == NULL && json_is_object(json_object_get(o, "tools"))) {
    s->tool_overrides = json_incref(json_object_get(o, "tools"));
  }
  return 0;
}

static int parse_server(const char *name, const json_t *o,
                        al_mcp_server_config_t *s, bool *skip, al_buf_t *err) {
  const json_t *cmd = json_object_get(o, "command");
  const json_t *args = json_object_get(o, "args");
  const json_t *env = json_object_get(o, "env");
  const json_t *cwd = json_object_get(o, "cwd");
  const json_t *tools = json_object_get(o, "tools");
  const char *key;
  json_t *v;
  size_t i, n;
  bool disabled = false;

  *skip = false;
  if (!json_is_object(o)) {
    al_buf_printf(err, "mcpServers.%s: must be an object", name);
    return AL_EINVAL;
  }
  if (!name_ok(name)) {
    al_buf_printf(err,
                  "mcpServers.%s: a server name is 1-48 characters of "
                  "[A-Za-z0-9_-]",
                  name);
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)o, key, v) {
    bool known = false;

    for (i = 0; known_keys[i] != NULL; i++) {
      known = known || strcmp(known_keys[i], key) == 0;
    }
    if (!known) {
      al_buf_printf(err, "mcpServers.%s: unknown key '%s'", name, key);
      return AL_EINVAL;
    }
  }
  if (!get_bool(o, "disabled", &disabled, name, err)) {
    return AL_EINVAL;
  }
  if (disabled) {
    *skip = true;
    return 0;
  }
  if (json_object_get(o, "url") != NULL) {
    int rc = parse_http(name, o, s, err);

    return rc != 0 ? rc
                   : parse_always_load(name, json_object_get(o, "always_load"),
                                       s, err);
  }
  if (!json_is_string(cmd) || json_string_length(cmd) == 0) {
    al_buf_printf(err, "mcpServers.%s.command: must be a non-empty string",
                  name);
    return AL_EINVAL;
  }
  if (args != NULL && !json_is_array(args)) {
    al_buf_printf(err, "mcpServers.%s.args: must be a list of strings", name);
    return AL_EINVAL;
  }
  s->sandbox = true;
  s->startup_timeout_ms = AL_MCP_DEFAULT_STARTUP_TIMEOUT_MS;
  s->call_timeout_ms = AL_MCP_DEFAULT_CALL_TIMEOUT_MS;
  s->call_max_ms = AL_MCP_DEFAULT_CALL_MAX_MS;
  if (!get_bool(o, "sandbox", &s->sandbox, name, err) ||
      !get_bool(o, "network", &s->network, name, err) ||
      !get_ms(o, "startup_timeout_ms", &s->startup_timeout_ms, name, err) ||
      !get_ms(o, "timeout_ms", &s->call_timeout_ms, name, err) ||
      !get_ms(o, "max_timeout_ms", &s->call_max_ms, name, err)) {
    return AL_EINVAL;
  }
  n = json_array_size(args);
  s->name = al_strdup(name);
  s->argv = al_calloc(n + 2, sizeof(*s->argv));
  if (s->name == NULL || s->argv == NULL ||
      (s->argv[0] = al_strdup(json_string_value(cmd))) == NULL) {
    return AL_ENOMEM;
  }
  json_array_foreach(args, i, v) {
    if (!json_is_string(v)) {
      al_buf_printf(err, "mcpServers.%s.args[%zu]: must be a string", name, i);
      return AL_EINVAL;
    }
    if ((s->argv[i + 1] = al_strdup(json_string_value(v))) == NULL) {
      return AL_ENOMEM;
    }
  }
  if (env != NULL && !json_is_object(env)) {
    al_buf_printf(err, "mcpServers.%s.env: must be a map of strings", name);
    return AL_EINVAL;
  }
  s->env = al_calloc(json_object_size(env) + 1, sizeof(*s->env));
  if (s->env == NULL) {
    return AL_ENOMEM;
  }
  n = 0;
  json_object_foreach((json_t *)env, key, v) {
    al_buf_t b;

    if (!json_is_string(v) || key[0] == '\0' || strchr(key, '=') != NULL) {
      al_buf_printf(err, "mcpServers.%s.env.%s: must be a string", name, key);
      return AL_EINVAL;
    }
    al_buf_init(&b, 1 << 20);
    if (al_buf_printf(&b, "%s=", key) != 0 ||
        expand_vars(json_string_value(v), &b) != 0) {
      al_buf_free(&b);
      return AL_ENOMEM;
    }
    s->env[n++] = b.data; /* the buffer's memory is al_malloc'd */
  }
  if (cwd != NULL) {
    if (!json_is_string(cwd)) {
      al_buf_printf(err, "mcpServers.%s.cwd: must be a string", name);
      return AL_EINVAL;
    }
    if ((s->cwd = al_strdup(json_string_value(cwd))) == NULL) {
      return AL_ENOMEM;
    }
  }
  if (tools != NULL) {
    json_object_foreach((json_t *)tools, key, v) {
      const json_t *cs = json_object_get(v, "concurrency_safe");

      if (!json_is_object(v) || (cs != NULL && !json_is_boolean(cs))) {
        al_buf_printf(err,
                      "mcpServers.%s.tools.%s: must be {concurrency_safe: "
                      "true|false}",
                      name, key);
        return AL_EINVAL;
      }
    }
    if (!json_is_object(tools)) {
      al_buf_printf(err, "mcpServers.%s.tools: must be a map", name);
      return AL_EINVAL;
    }
    s->tool_overrides = json_incref((json_t *)tools);
  }
  return parse_always_load(name, json_object_get(o, "always_load"), s, err);
}

int al__mcp_config_parse(const char *json, size_t len, al_mcp_config_t *out,
                         al_buf_t *err) {
  json_error_t jerr;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  const json_t *servers;
  const json_t *wait;
  const char *name;
  json_t *v;
  int rc = 0;

  memset(out, 0, sizeof(*out));
  out->startup_wait_ms = AL_MCP_DEFAULT_STARTUP_WAIT_MS;
  if (!json_is_object(root)) {
    if (root == NULL) {
      al_buf_printf(err, "%d:%d: %s", jerr.line, jerr.column, jerr.text);
    } else {
      al_buf_printf(err, "the MCP configuration must be a JSON object");
    }
    json_decref(root);
    return AL_EINVAL;
  }
  wait = json_object_get(root, "startup_wait_ms");
  if (wait != NULL) {
    if (!json_is_integer(wait) || json_integer_value(wait) < 0) {
      al_buf_printf(err, "startup_wait_ms: must be an integer >= 0");
      json_decref(root);
      return AL_EINVAL;
    }
    out->startup_wait_ms = (uint64_t)json_integer_value(wait);
  }
  out->tool_budget_pct = AL_MCP_DEFAULT_TOOL_BUDGET_PCT;
  wait = json_object_get(root, "tool_budget_pct");
  if (wait != NULL) {
    if (!json_is_integer(wait) || json_integer_value(wait) < 0 ||
        json_integer_value(wait) > 100) {
      al_buf_printf(err, "tool_budget_pct: must be an integer from 0 to 100");
      json_decref(root);
      return AL_EINVAL;
    }
    out->tool_budget_pct = (uint32_t)json_integer_value(wait);
  }
  out->tool_budget_max_tools = AL_MCP_DEFAULT_TOOL_BUDGET_MAX_TOOLS;
  wait = json_object_get(root, "tool_budget_max_tools");
  if (wait != NULL) {
    if (!json_is_integer(wait) || json_integer_value(wait) < 0 ||
        json_integer_value(wait) > AL_MCP_MAX_TOOLS) {
      al_buf_printf(err, "tool_budget_max_tools: must be an integer from 0 "
                         "to %d", AL_MCP_MAX_TOOLS);
      json_decref(root);
      return AL_EINVAL;
    }
    out->tool_budget_max_tools = (uint32_t)json_integer_value(wait);
  }
  servers = json_object_get(root, "mcpServers");
  if (servers == NULL) {
    servers = json_object_get(root, "mcp_servers");
  }
  if (servers != NULL && !json_is_object(servers)) {
    al_buf_printf(err, "mcpServers: must be a map of server names");
    json_decref(root);
    return AL_EINVAL;
  }
  out->servers = al_calloc(json_object_size(servers) + 1,
                           sizeof(*out->servers));
  if (out->servers == NULL) {
    json_decref(root);
    return AL_ENOMEM;
  }
  json_object_foreach((json_t *)servers, name, v) {
    bool skip = false;

    rc = parse_server(name, v, &out->servers[out->n], &skip, err);
    if (rc != 0 || skip) {
      al__mcp_server_config_free(&out->servers[out->n]);
      if (rc != 0) {
        break;
      }
      continue;
    }
    out->n++;
  }
  json_decref(root);
  if (rc != 0) {
    al__mcp_config_free(out);
  }
  return rc;
}

/* ---- names ------------------------------------------------------------------- */

static uint32_t fnv1a(const char *a, const char *b) {
  uint32_t h = 2166136261u;
  const char *p;

  for (p = a; *p != '\0'; p++) {
    h = (h ^ (uint8_t)*p) * 16777619u;
  }
  h = (h ^ 0xff) * 16777619u; /* separator: ("ab","c") != ("a","bc") */
  for (p = b; *p != '\0'; p++) {
    h = (h ^ (uint8_t)*p) * 16777619u;
  }
  return h;
}

void al__mcp_tool_name(const char *server, const char *tool, char out[65]) {
  char full[512];
  size_t n = 0;
  bool changed = false;
  const char *p;

  n = (size_t)snprintf(full, sizeof(full), "mcp__%s__", server);
  for (p = tool; *p != '\0' && n < sizeof(full) - 1; p++) {
    char c = *p;

    if (!isalnum((unsigned char)c) && c != '_' && c != '-') {
      c = '_';
      changed = true;
    }
    full[n++] = c;
  }
  if (*p != '\0') {
    changed = true;
  }
  full[n] = '\0';
  if (!changed && n <= 64) {
    memcpy(out, full, n + 1);
    return;
  }
  /* Cut to leave room for "_" + 6 hex digits. */
  if (n > 57) {
    n = 57;
  }
  snprintf(out, 65, "%.*s_%06x", (int)n, full,
           (unsigned)(fnv1a(server, tool) & 0xffffffu));
}

/* ---- loading (start-up only: blocking file reads) ------------------------------- */

static json_t *load_file(const char *path, bool must_exist, al_buf_t *err,
                         int *rc) {
  FILE *f = fopen(path, "rb");
  al_buf_t b;
  char chunk[8192];
  size_t n;
  json_error_t jerr;
  json_t *j;

  *rc = 0;
  if (f == NULL) {
    if (!must_exist) {
      return NULL;
    }
    al_buf_printf(err, "%s: cannot read it", path);
    *rc = AL_EINVAL;
    return NULL;
  }
  al_buf_init(&b, 4 << 20);
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    if (al_buf_append(&b, chunk, n) != 0) {
      fclose(f);
      al_buf_free(&b);
      al_buf_printf(err, "%s: larger than 4 MiB", path);
      *rc = AL_EINVAL;
      return NULL;
    }
  }
  fclose(f);
  j = json_loadb(b.data != NULL ? b.data : "", b.len, JSON_REJECT_DUPLICATES,
                 &jerr);
  al_buf_free(&b);
  if (j == NULL) {
    al_buf_printf(err, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                  jerr.text);
    *rc = AL_EINVAL;
  }
  return j;
}

static const json_t *servers_of(const json_t *j) {
  const json_t *s = json_object_get(j, "mcpServers");

  return s != NULL ? s : json_object_get(j, "mcp_servers");
}

int al__mcp_config_load(const char *file, const char *workspace, bool trusted,
                        char **out, al_buf_t *err) {
  return al__mcp_config_load2(file, NULL, workspace, trusted, out, err);
}

/* user (the file's, or the daemon's), section (config.yaml's
 * mcp_servers:) and proj (the project's .mcp.json), each may be NULL,
 * merged: user over section over proj on a name two use; settings from
 * user and section. Checked; *out NULL when there are no servers. */
static int merge(const json_t *user, const json_t *section,
                 const json_t *proj, char **out, al_buf_t *err) {
  json_t *merged;
  json_t *servers;
  al_mcp_config_t check;
  const char *key;
  json_t *v;
  char *text;
  int rc;

  merged = json_object();
  servers = json_object();
  json_object_set_new(merged, "mcpServers", servers);
  /* startup_wait_ms: the project's .mcp.json (where the docs show it),
   * then config.yaml's section, then the user's file, each over the one
   * before. */
  if (json_object_get(proj, "startup_wait_ms") != NULL) {
    json_object_set(merged, "startup_wait_ms",
                    json_object_get(proj, "startup_wait_ms"));
  }
  if (json_is_integer(json_object_get(user, "startup_wait_ms"))) {
    json_object_set(merged, "startup_wait_ms",
                    json_object_get(user, "startup_wait_ms"));
  }
  json_object_foreach((json_t *)servers_of(proj), key, v) {
    json_object_set(servers, key, v);
  }
  /* config.yaml's mcp_servers: over the project's .mcp.json; its
   * tool_budget_* and startup_wait_ms keys are settings, not servers (the
   * file's win). */
  json_object_foreach((json_t *)section, key, v) {
    bool setting = strncmp(key, "tool_budget_", 12) == 0 ||
                   strcmp(key, "startup_wait_ms") == 0;

    if (setting && strcmp(key, "startup_wait_ms") == 0 &&
        json_object_get(user, "startup_wait_ms") != NULL) {
      continue;
    }
    json_object_set(setting ? merged : servers, key, v);
  }
  json_object_foreach((json_t *)user, key, v) {
    if (strncmp(key, "tool_budget_", 12) == 0) {
      json_object_set(merged, key, v);
    }
  }
  /* The user's file wins on a name both use. */
  json_object_foreach((json_t *)servers_of(user), key, v) {
    json_object_set(servers, key, v);
  }
  if (json_object_size(servers) == 0) {
    json_decref(merged);
    return 0;
  }
  text = json_dumps(merged, JSON_COMPACT);
  json_decref(merged);
  if (text == NULL) {
    return AL_ENOMEM;
  }
  rc = al__mcp_config_parse(text, strlen(text), &check, err);
  if (rc != 0) {
    al_free(text);
    return rc;
  }
  al__mcp_config_free(&check);
  *out = text;
  return 0;
}

/* <workspace>/.mcp.json when trusted (NULL when absent); *skipped when
 * it exists but the project is not trusted. */
static json_t *load_project(const char *workspace, bool trusted,
                            bool *skipped, al_buf_t *err, int *rc) {
  char path[4200];

  *rc = 0;
  if (skipped != NULL) {
    *skipped = false;
  }
  if (workspace == NULL) {
    return NULL;
  }
  if (!trusted) {
    /* Only a trusted project's servers: its .mcp.json names commands. */
    if (skipped != NULL) {
      *skipped = al__mcp_project_skipped(workspace, false);
    }
    return NULL;
  }
  snprintf(path, sizeof(path), "%s/.mcp.json", workspace);
  return load_file(path, false, err, rc);
}

bool al__mcp_project_skipped(const char *workspace, bool trusted) {
  char path[4200];
  struct stat st;

  if (workspace == NULL || trusted) {
    return false;
  }
  snprintf(path, sizeof(path), "%s/.mcp.json", workspace);
  return stat(path, &st) == 0;
}

int al__mcp_config_load2(const char *file, const json_t *section,
                         const char *workspace, bool trusted, char **out,
                         al_buf_t *err) {
  json_t *user = NULL;
  json_t *proj;
  int rc = 0;

  *out = NULL;
  if (file != NULL) {
    user = load_file(file, true, err, &rc);
    if (rc != 0) {
      return rc;
    }
  }
  proj = load_project(workspace, trusted, NULL, err, &rc);
  if (rc == 0) {
    rc = merge(user, section, proj, out, err);
  }
  json_decref(user);
  json_decref(proj);
  return rc;
}

int al__mcp_config_project(const char *base, const char *workspace,
                           bool trust, char **out, bool *skipped,
                           al_buf_t *err) {
  json_t *user = NULL;
  json_t *proj;
  json_error_t jerr;
  int rc;

  *out = NULL;
  if (base != NULL && (user = json_loads(base, 0, &jerr)) == NULL) {
    al_buf_printf(err, "the configured servers: %s", jerr.text);
    return AL_EINVAL;
  }
  proj = load_project(workspace,
                      trust || (workspace != NULL &&
                                al__tools_project_trusted(workspace)),
                      skipped, err, &rc);
  if (rc == 0) {
    rc = merge(user, NULL, proj, out, err);
  }
  json_decref(user);
  json_decref(proj);
  return rc;
}

char *al__read_text_file(const char *path, al_buf_t *err) {
  FILE *f = fopen(path, "rb");
  al_buf_t b;
  char chunk[8192];
  size_t n;

  if (f == NULL) {
    al_buf_printf(err, "%s: cannot read it", path);
    return NULL;
  }
  al_buf_init(&b, 4 << 20);
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    if (al_buf_append(&b, chunk, n) != 0) {
      fclose(f);
      al_buf_free(&b);
      al_buf_printf(err, "%s: larger than 4 MiB", path);
      return NULL;
    }
  }
  fclose(f);
  if (b.data == NULL) {
    return al_strdup("");
  }
  return b.data;
}

int al__hooks_config_load(const char *file, const json_t *section,
                          char **out, al_buf_t *err) {
  json_t *merged = json_object();
  json_t *hooks = json_object();
  json_t *fromfile = NULL;
  const char *key;
  json_t *v;
  int rc = 0;

  *out = NULL;
  json_object_set_new(merged, "hooks", hooks);
  if (file != NULL) {
    fromfile = load_file(file, true, err, &rc);
    if (rc != 0) {
      json_decref(merged);
      return rc;
    }
  }
  /* Lists of the same event add up: the config's hooks, then the file's. */
  json_object_foreach((json_t *)section, key, v) {
    json_object_set(hooks, key, v);
  }
  json_object_foreach(json_object_get(fromfile, "hooks"), key, v) {
    json_t *have = json_object_get(hooks, key);

    if (json_is_array(have) && json_is_array(v)) {
      json_t *both = json_copy(have);

      json_array_extend(both, v);
      json_object_set_new(hooks, key, both);
    } else {
      json_object_set(hooks, key, v);
    }
  }
  json_decref(fromfile);
  if (json_object_size(hooks) > 0) {
    *out = json_dumps(merged, JSON_COMPACT);
    if (*out == NULL) {
      rc = AL_ENOMEM;
    }
  }
  json_decref(merged);
  return rc;
}
