/* Configuration loader (config.h).
 *
 * One table (keys[]) describes every key: its type, where its value lives
 * in al_config_t, its bounds, and whether a project file may set it. The
 * YAML files (libyaml's document API, which keeps a line and column for
 * every node), the environment and the flags all go through set_scalar /
 * set_list, so a value is checked the same way whatever its layer, and
 * each records its origin.
 *
 * Decisions recorded here:
 *  - A project file may not set base_url or api_key_env (they decide
 *    where the key goes and which secret is read), may not widen the
 *    sandbox (mode none, or below the user's mode; writable paths;
 *    network), and its tools_d entries must be relative paths inside the
 *    project. Each is an error naming the key, not a silent drop
 *    (RESEARCH-WAVE2 CF4).
 *  - Lists replace the lower layer's list; a flag given twice appends. */
#include "config/config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/yamlnode.h"
#include "tools/clitool.h"
#include "transport/transport_int.h"

#define FILE_MAX (1024 * 1024)

struct al_cfg_ctx_s {
  al_config_t *cfg;
  yaml_document_t *doc;
  const char *file;
  al_cfg_layer_t layer;
};

typedef enum { F_STR, F_INT, F_BOOL, F_LIST, F_MAP, F_SECTION, F_VERSION } ftype_t;

/* What a project file may not do with a key. */
enum {
  P_NO_PROJECT = 1,   /* never */
  P_MODE = 2,         /* sandbox.mode: not looser than what is in force */
  P_NOT_TRUE = 4,     /* a bool that may only be turned off */
  P_REL_PATHS = 8,    /* relative paths inside the project only */
};

typedef bool (*check_fn)(const char *v, char *why, size_t len);

typedef struct field_s {
  const char *name;
  ftype_t type;
  size_t off;
  unsigned flags;
  int64_t min, max;
  check_fn check;
  const struct field_s *sub; /* F_MAP */
  al_cfg_section_fn section; /* F_SECTION */
} field_t;

static const char *const layer_names[] = {"default", "user", "project",
                                          "env", "flag"};

/* ---- value checks ------------------------------------------------------------ */

static bool check_provider(const char *v, char *why, size_t len) {
  if (strcmp(v, "anthropic") == 0 || strcmp(v, "openai") == 0 ||
      strcmp(v, "openai-responses") == 0) {
    return true;
  }
  snprintf(why, len,
           "unknown provider '%s' (anthropic, openai or openai-responses)", v);
  return false;
}

static bool check_nonempty(const char *v, char *why, size_t len) {
  if (v[0] != '\0') {
    return true;
  }
  snprintf(why, len, "must not be empty");
  return false;
}

static bool check_url(const char *v, char *why, size_t len) {
  char reason[160];

  /* The same check as the agent's, with its reason (issue 15). */
  if (al_http_url_check(v, reason, sizeof(reason)) != 0) {
    snprintf(why, len, "base_url must be an http:// or https:// URL, not "
                       "'%s': %s", v, reason);
    return false;
  }
  return true;
}

static bool check_env_name(const char *v, char *why, size_t len) {
  size_t i;

  for (i = 0; v[i] != '\0'; i++) {
    char c = v[i];

    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
          (i > 0 && c >= '0' && c <= '9'))) {
      break;
    }
  }
  if (i > 0 && v[i] == '\0') {
    return true;
  }
  snprintf(why, len, "api_key_env is the NAME of a variable (like "
                     "MY_ANTHROPIC_KEY), not '%.20s%s'", v,
           strlen(v) > 20 ? "..." : "");
  return false;
}

static bool check_mode(const char *v, char *why, size_t len) {
  if (strcmp(v, "auto") == 0 || strcmp(v, "required") == 0 ||
      strcmp(v, "none") == 0) {
    return true;
  }
  snprintf(why, len, "sandbox.mode must be auto, required or none, not "
                     "'%s'", v);
  return false;
}

/* Tool rules: "name" or "name(glob)"; the name is letters, digits, '_',
 * '-', '.', ':' (MCP tools) or '*'. */
static bool check_rule(const char *v, char *why, size_t len) {
  size_t n = strcspn(v, "(");
  size_t i;

  for (i = 0; i < n; i++) {
    char c = v[i];

    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' ||
          c == ':' || c == '*')) {
      break;
    }
  }
  if (n > 0 && i == n &&
      (v[n] == '\0' || (strlen(v) > n + 1 && v[strlen(v) - 1] == ')'))) {
    return true;
  }
  snprintf(why, len, "a rule is TOOL or TOOL(PATTERN), like "
                     "bash(git status*), not '%s'", v);
  return false;
}

/* ---- the table ----------------------------------------------------------------- */

#define OFF(f) offsetof(al_config_t, f)

static const field_t timeouts_keys[] = {
    {"connect_ms", F_INT, OFF(timeouts.connect_ms), 0, 1, INT32_MAX, NULL,
     NULL, NULL},
    {"idle_ms", F_INT, OFF(timeouts.idle_ms), 0, 1, INT32_MAX, NULL, NULL,
     NULL},
    {"progress_ms", F_INT, OFF(timeouts.progress_ms), 0, 1, INT32_MAX, NULL,
     NULL, NULL},
    {"tool_ms", F_INT, OFF(timeouts.tool_ms), 0, 1, INT32_MAX, NULL, NULL,
     NULL},
    {"run_ms", F_INT, OFF(timeouts.run_ms), 0, 1, INT64_MAX / 1000000, NULL,
     NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

static const field_t permissions_keys[] = {
    {"allow", F_LIST, OFF(permissions.allow), 0, 0, 0, check_rule, NULL,
     NULL},
    {"deny", F_LIST, OFF(permissions.deny), 0, 0, 0, check_rule, NULL, NULL},
    {"ask", F_LIST, OFF(permissions.ask), 0, 0, 0, check_rule, NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

static const field_t sandbox_keys[] = {
    {"mode", F_STR, OFF(sandbox.mode), P_MODE, 0, 0, check_mode, NULL, NULL},
    {"writable", F_LIST, OFF(sandbox.writable), P_NO_PROJECT, 0, 0,
     check_nonempty, NULL, NULL},
    {"denied", F_LIST, OFF(sandbox.denied), 0, 0, 0, check_nonempty, NULL,
     NULL},
    {"network", F_BOOL, OFF(sandbox.network), P_NOT_TRUE, 0, 1, NULL, NULL,
     NULL},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

static const field_t system_prompt_keys[] = {
    {"append", F_STR, OFF(system_prompt.append), 0, 0, 0, NULL, NULL, NULL},
    {"file", F_STR, OFF(system_prompt.file), P_REL_PATHS, 0, 0,
     check_nonempty, NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

/* Sub-agents (docs/subagents.md): mapped by apply_subagents. */
static const field_t subagents_keys[] = {
    {"enabled", F_BOOL, OFF(subagents.enabled), 0, 0, 1, NULL, NULL, NULL},
    {"max_depth", F_INT, OFF(subagents.max_depth), 0, 1, 16, NULL, NULL,
     NULL},
    {"token_budget", F_INT, OFF(subagents.token_budget), 0, 1000,
     INT64_C(1000000000000), NULL, NULL, NULL},
    {"parallel_writers", F_BOOL, OFF(subagents.parallel_writers), 0, 0, 1,
     NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

/* Shared pacing (docs/run.md): mapped by apply_counts. */
static const field_t pacing_keys[] = {
    {"rpm", F_INT, OFF(pacing.rpm), 0, 1, 1000000, NULL, NULL, NULL},
    {"burst", F_INT, OFF(pacing.burst), 0, 1, 1000000, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

/* Top level. The owners' sections: replace al__config_section_keep with
 * your parse function (config.h). */
static const field_t keys[] = {
    {"version", F_VERSION, 0, 0, 1, 1, NULL, NULL, NULL},
    {"provider", F_STR, OFF(provider), 0, 0, 0, check_provider, NULL, NULL},
    {"model", F_STR, OFF(model), 0, 0, 0, check_nonempty, NULL, NULL},
    {"fallback_model", F_STR, OFF(fallback_model), 0, 0, 0, check_nonempty,
     NULL, NULL},
    {"base_url", F_STR, OFF(base_url), P_NO_PROJECT, 0, 0, check_url, NULL,
     NULL},
    {"api_key_env", F_STR, OFF(api_key_env), P_NO_PROJECT, 0, 0,
     check_env_name, NULL, NULL},
    {"max_tokens", F_INT, OFF(max_tokens), 0, 1, INT32_MAX, NULL, NULL,
     NULL},
    {"max_turns", F_INT, OFF(max_turns), 0, 1, UINT32_MAX, NULL, NULL, NULL},
    {"timeouts", F_MAP, 0, 0, 0, 0, NULL, timeouts_keys, NULL},
    {"permissions", F_MAP, 0, 0, 0, 0, NULL, permissions_keys, NULL},
    {"sandbox", F_MAP, 0, 0, 0, 0, NULL, sandbox_keys, NULL},
    {"tools_d", F_LIST, OFF(tools_d), P_REL_PATHS, 0, 0, check_nonempty,
     NULL, NULL},
    {"system_prompt", F_MAP, 0, 0, 0, 0, NULL, system_prompt_keys, NULL},
    {"subagents", F_MAP, 0, 0, 0, 0, NULL, subagents_keys, NULL},
    {"pacing", F_MAP, 0, 0, 0, 0, NULL, pacing_keys, NULL},
    {"context", F_SECTION, 0, 0, 0, 0, NULL, NULL, al__config_section_keep},
    {"mcp_servers", F_SECTION, 0, 0, 0, 0, NULL, NULL,
     al__config_section_keep},
    {"hooks", F_SECTION, 0, 0, 0, 0, NULL, NULL, al__config_section_keep},
    {"limits", F_SECTION, 0, 0, 0, 0, NULL, NULL, al__config_limits_section},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

/* ---- basics ------------------------------------------------------------------ */

void al_config_init(al_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->sandbox.network = -1;
  cfg->subagents.enabled = -1;
  cfg->subagents.parallel_writers = -1;
  cfg->sections = json_object();
  cfg->positions = json_object();
  cfg->origins = json_object();
  al_buf_init(&cfg->errors, 64 * 1024);
}

static void list_free(al_cfg_list_t l) {
  size_t i;

  for (i = 0; l != NULL && l[i] != NULL; i++) {
    al_free(l[i]);
  }
  al_free(l);
}

static void free_fields(al_config_t *cfg, const field_t *t) {
  for (; t->name != NULL; t++) {
    if (t->type == F_STR) {
      al_free(*(char **)((char *)cfg + t->off));
    } else if (t->type == F_LIST) {
      list_free(*(al_cfg_list_t *)((char *)cfg + t->off));
    } else if (t->type == F_MAP) {
      free_fields(cfg, t->sub);
    }
  }
}

void al_config_free(al_config_t *cfg) {
  free_fields(cfg, keys);
  json_decref(cfg->sections);
  json_decref(cfg->positions);
  json_decref(cfg->origins);
  al_free(cfg->user_file);
  al_free(cfg->project_file);
  al_buf_free(&cfg->errors);
  memset(cfg, 0, sizeof(*cfg));
}

static void add_error(al_config_t *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_error(al_config_t *cfg, const char *fmt, ...) {
  va_list ap;
  char msg[1024];

  char *c;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* One line per error, and nothing a terminal would act on: a value
   * quoted back may hold a newline or an escape sequence. */
  for (c = msg; *c != '\0'; c++) {
    if ((unsigned char)*c < 0x20 || *c == 0x7f) {
      *c = '?';
    }
  }
  (void)al_buf_printf(&cfg->errors, "%s\n", msg);
  cfg->n_errors++;
}

const char *al__config_pos(const al_cfg_ctx_t *cx, const yaml_node_t *node,
                           char *buf, size_t len) {
  snprintf(buf, len, "%s:%d:%d", cx->file,
           node != NULL ? (int)node->start_mark.line + 1 : 1,
           node != NULL ? (int)node->start_mark.column + 1 : 1);
  return buf;
}

void al__config_err(al_cfg_ctx_t *cx, const yaml_node_t *node,
                    const char *fmt, ...) {
  va_list ap;
  char msg[900];
  char pos[512];

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  add_error(cx->cfg, "%s: %s", al__config_pos(cx, node, pos, sizeof(pos)),
            msg);
}

yaml_node_t *al__config_node(al_cfg_ctx_t *cx, int id) {
  return yaml_document_get_node(cx->doc, id);
}

al_config_t *al__config_cfg(al_cfg_ctx_t *cx) {
  return cx->cfg;
}

al_cfg_layer_t al__config_layer(const al_cfg_ctx_t *cx) {
  return cx->layer;
}

static void set_origin(al_config_t *cfg, const char *path,
                       al_cfg_layer_t layer, const char *where) {
  json_object_set_new(cfg->origins, path,
                      json_pack("{s:s, s:s}", "layer", layer_names[layer],
                                "where", where));
}

static al_cfg_layer_t origin_layer(const al_config_t *cfg, const char *path) {
  const char *l = json_string_value(
      json_object_get(json_object_get(cfg->origins, path), "layer"));
  size_t i;

  for (i = 0; l != NULL && i < AL_ARRAY_SIZE(layer_names); i++) {
    if (strcmp(l, layer_names[i]) == 0) {
      return (al_cfg_layer_t)i;
    }
  }
  return AL_CFG_DEFAULT;
}

/* Levenshtein distance, capped: for "did you mean". */
static size_t distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  size_t row[64];
  size_t i, j;

  if (la >= 63 || lb >= 63) {
    return 99;
  }
  for (j = 0; j <= lb; j++) {
    row[j] = j;
  }
  for (i = 1; i <= la; i++) {
    size_t prev = row[0];

    row[0] = i;
    for (j = 1; j <= lb; j++) {
      size_t cur = row[j];
      size_t best = prev + (a[i - 1] != b[j - 1]);

      if (row[j] + 1 < best) {
        best = row[j] + 1;
      }
      if (row[j - 1] + 1 < best) {
        best = row[j - 1] + 1;
      }
      row[j] = best;
      prev = cur;
    }
  }
  return row[lb];
}

static const char *suggest(const field_t *t, const char *name) {
  const char *best = NULL;
  size_t bd = 3;

  for (; t->name != NULL; t++) {
    size_t d = distance(t->name, name);

    if (d < bd) {
      bd = d;
      best = t->name;
    }
  }
  return best;
}

/* ---- setting values ---------------------------------------------------------- */

static bool parse_int(const char *s, int64_t *out) {
  char *end;
  long long v;

  errno = 0;
  v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') {
    return false;
  }
  *out = v;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  if (strcmp(s, "true") == 0 || strcmp(s, "yes") == 0 ||
      strcmp(s, "on") == 0) {
    *out = true;
    return true;
  }
  if (strcmp(s, "false") == 0 || strcmp(s, "no") == 0 ||
      strcmp(s, "off") == 0) {
    *out = false;
    return true;
  }
  return false;
}

static int mode_rank(const char *m) {
  if (m == NULL || strcmp(m, "auto") == 0) {
    return 1;
  }
  return strcmp(m, "required") == 0 ? 2 : 0;
}

/* A project path: relative, no "..", no "~". */
static bool project_path_ok(const char *v) {
  const char *p = v;

  if (v[0] == '/' || v[0] == '~') {
    return false;
  }
  while (*p != '\0') {
    size_t n = strcspn(p, "/");

    if (n == 2 && p[0] == '.' && p[1] == '.') {
      return false;
    }
    p += n;
    while (*p == '/') {
      p++;
    }
  }
  return true;
}

/* Checks and stores one scalar value. why gets the reason on failure. */
static bool set_scalar(al_config_t *cfg, const field_t *f, const char *path,
                       const char *v, al_cfg_layer_t layer,
                       const char *where, char *why, size_t len) {
  char *base = (char *)cfg;

  if (layer == AL_CFG_PROJECT) {
    if (f->flags & P_NO_PROJECT) {
      snprintf(why, len, "%s cannot be set in a project file (it decides "
                         "where requests and keys go, or widens the "
                         "sandbox); set it in your user config", path);
      return false;
    }
    if ((f->flags & P_REL_PATHS) && !project_path_ok(v)) {
      snprintf(why, len, "%s in a project file must be a relative path "
                         "inside the project, not '%s'", path, v);
      return false;
    }
  }
  switch (f->type) {
  case F_STR:
    if (f->check != NULL && !f->check(v, why, len)) {
      return false;
    }
    if (layer == AL_CFG_PROJECT && (f->flags & P_MODE) &&
        mode_rank(v) < mode_rank(*(char **)(base + f->off))) {
      snprintf(why, len, "a project file cannot loosen sandbox.mode (to "
                         "'%s')", v);
      return false;
    }
    {
      char *n = al_strdup(v);

      if (n == NULL) {
        snprintf(why, len, "out of memory");
        return false;
      }
      al_free(*(char **)(base + f->off));
      *(char **)(base + f->off) = n;
    }
    break;
  case F_INT:
  case F_VERSION: {
    int64_t x;

    if (!parse_int(v, &x) || x < f->min || x > f->max) {
      if (f->type == F_VERSION) {
        snprintf(why, len, "version must be 1, not '%s'", v);
      } else {
        snprintf(why, len, "%s must be an integer from %lld to %lld, not "
                           "'%s'", path, (long long)f->min,
                 (long long)f->max, v);
      }
      return false;
    }
    if (f->type == F_INT) {
      *(int64_t *)(base + f->off) = x;
    }
    break;
  }
  case F_BOOL: {
    bool b;

    if (!parse_bool(v, &b)) {
      snprintf(why, len, "%s must be true or false, not '%s'", path, v);
      return false;
    }
    if (layer == AL_CFG_PROJECT && (f->flags & P_NOT_TRUE) && b) {
      snprintf(why, len, "a project file cannot turn %s on (it widens the "
                         "sandbox)", path);
      return false;
    }
    *(int *)(base + f->off) = b ? 1 : 0;
    break;
  }
  default:
    snprintf(why, len, "%s is not a single value", path);
    return false;
  }
  set_origin(cfg, path, layer, where);
  return true;
}

/* Appends to (or, first in this layer, replaces) a list. */
static bool list_add(al_config_t *cfg, const field_t *f, const char *path,
                     const char *v, bool replace, al_cfg_layer_t layer,
                     const char *where, char *why, size_t len) {
  al_cfg_list_t *lp = (al_cfg_list_t *)((char *)cfg + f->off);
  size_t n = 0;
  al_cfg_list_t nl;

  if (layer == AL_CFG_PROJECT && (f->flags & P_NO_PROJECT)) {
    snprintf(why, len, "%s cannot be set in a project file (it widens the "
                       "sandbox); set it in your user config", path);
    return false;
  }
  if (v != NULL) {
    if (layer == AL_CFG_PROJECT && (f->flags & P_REL_PATHS) &&
        !project_path_ok(v)) {
      snprintf(why, len, "%s in a project file must be a relative path "
                         "inside the project, not '%s'", path, v);
      return false;
    }
    if (f->check != NULL && !f->check(v, why, len)) {
      return false;
    }
  }
  if (replace) {
    list_free(*lp);
    *lp = NULL;
  }
  while (*lp != NULL && (*lp)[n] != NULL) {
    n++;
  }
  nl = al_realloc(*lp, (n + 2) * sizeof(*nl));
  if (nl == NULL) {
    snprintf(why, len, "out of memory");
    return false;
  }
  *lp = nl;
  nl[n] = NULL;
  if (v != NULL) {
    nl[n] = al_strdup(v);
    nl[n + 1] = NULL;
  }
  set_origin(cfg, path, layer, where);
  return true;
}

/* ---- YAML ---------------------------------------------------------------------- */

static const char *scalar(const yaml_node_t *n) {
  return n != NULL && n->type == YAML_SCALAR_NODE
             ? (const char *)n->data.scalar.value
             : NULL;
}

static void load_map(al_cfg_ctx_t *cx, yaml_node_t *map, const field_t *t,
                     const char *prefix);

static void load_value(al_cfg_ctx_t *cx, const field_t *f, const char *path,
                       yaml_node_t *v) {
  char why[600];
  char where[512];

  al__config_pos(cx, v, where, sizeof(where));
  switch (f->type) {
  case F_MAP:
    if (v->type != YAML_MAPPING_NODE) {
      al__config_err(cx, v, "%s must be a mapping of keys", path);
      return;
    }
    load_map(cx, v, f->sub, path);
    return;
  case F_SECTION:
    if (v->type != YAML_MAPPING_NODE) {
      al__config_err(cx, v, "%s must be a mapping of keys", path);
      return;
    }
    (void)f->section(cx, f->name, v);
    return;
  case F_LIST: {
    yaml_node_item_t *it;

    if (v->type == YAML_SCALAR_NODE) {
      al__config_err(cx, v, "%s must be a list (- item per line, or "
                            "[a, b])", path);
      return;
    }
    if (v->type != YAML_SEQUENCE_NODE) {
      al__config_err(cx, v, "%s must be a list", path);
      return;
    }
    if (!list_add(cx->cfg, f, path, NULL, true, cx->layer, where, why,
                  sizeof(why))) {
      al__config_err(cx, v, "%s", why);
      return;
    }
    for (it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
      yaml_node_t *e = al__config_node(cx, *it);
      const char *s = scalar(e);

      if (s == NULL) {
        al__config_err(cx, e, "%s: each item must be a string", path);
        continue;
      }
      if (!list_add(cx->cfg, f, path, s, false, cx->layer, where, why,
                    sizeof(why))) {
        al__config_err(cx, e, "%s", why);
      }
    }
    return;
  }
  default: {
    const char *s = scalar(v);

    if (s == NULL) {
      al__config_err(cx, v, "%s must be a single value, not a %s", path,
                     v->type == YAML_MAPPING_NODE ? "mapping" : "list");
      return;
    }
    if ((f->type == F_INT || f->type == F_BOOL || f->type == F_VERSION) &&
        v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
      al__config_err(cx, v, "%s must be %s, not a quoted string", path,
                     f->type == F_BOOL ? "true or false" : "a number");
      return;
    }
    if (!set_scalar(cx->cfg, f, path, s, cx->layer, where, why,
                    sizeof(why))) {
      al__config_err(cx, v, "%s", why);
    }
  }
  }
}

static void load_map(al_cfg_ctx_t *cx, yaml_node_t *map, const field_t *t,
                     const char *prefix) {
  yaml_node_pair_t *p;

  for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = al__config_node(cx, p->key);
    yaml_node_t *v = al__config_node(cx, p->value);
    const char *name = scalar(k);
    const field_t *f;
    char path[256];

    if (name == NULL || v == NULL) {
      al__config_err(cx, k, "keys must be plain names");
      continue;
    }
    snprintf(path, sizeof(path), "%s%s%s", prefix != NULL ? prefix : "",
             prefix != NULL ? "." : "", name);
    for (f = t; f->name != NULL && strcmp(f->name, name) != 0; f++) {
    }
    if (f->name == NULL) {
      const char *s = suggest(t, name);

      if (s != NULL) {
        al__config_err(cx, k, "unknown key '%s' (did you mean '%s%s%s'?)",
                       path, prefix != NULL ? prefix : "",
                       prefix != NULL ? "." : "", s);
      } else {
        al__config_err(cx, k, "unknown key '%s'", path);
      }
      continue;
    }
    load_value(cx, f, path, v);
  }
}

/* A node as JSON: plain scalars that read as integers or booleans become
 * those; positions go to cfg->positions by dotted path. */
static json_t *node_json(al_cfg_ctx_t *cx, yaml_node_t *n, const char *path,
                         int depth) {
  char pos[512];

  json_object_set_new(cx->cfg->positions, path,
                      json_string(al__config_pos(cx, n, pos, sizeof(pos))));
  if (depth > 32) {
    al__config_err(cx, n, "%s: nested too deeply", path);
    return json_null();
  }
  if (n->type == YAML_SCALAR_NODE) {
    const char *s = scalar(n);
    int64_t i;
    bool b;

    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
      if (parse_int(s, &i)) {
        return json_integer(i);
      }
      if (parse_bool(s, &b)) {
        return json_boolean(b);
      }
      if (strcmp(s, "null") == 0 || strcmp(s, "~") == 0 || s[0] == '\0') {
        return json_null();
      }
    }
    return json_string(s);
  }
  if (n->type == YAML_SEQUENCE_NODE) {
    json_t *a = json_array();
    yaml_node_item_t *it;
    size_t idx = 0;

    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++, idx++) {
      char sub[512];
      yaml_node_t *e = al__config_node(cx, *it);

      snprintf(sub, sizeof(sub), "%s.%zu", path, idx);
      json_array_append_new(a, e != NULL ? node_json(cx, e, sub, depth + 1)
                                         : json_null());
    }
    return a;
  }
  if (n->type == YAML_MAPPING_NODE) {
    json_t *o = json_object();
    yaml_node_pair_t *p;

    for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
         p++) {
      yaml_node_t *k = al__config_node(cx, p->key);
      yaml_node_t *v = al__config_node(cx, p->value);
      char sub[512];

      if (scalar(k) == NULL || v == NULL) {
        al__config_err(cx, k, "%s: keys must be plain names", path);
        continue;
      }
      snprintf(sub, sizeof(sub), "%s.%s", path, scalar(k));
      json_object_set_new(o, scalar(k), node_json(cx, v, sub, depth + 1));
    }
    return o;
  }
  return json_null();
}

int al__config_section_keep(al_cfg_ctx_t *cx, const char *name,
                            yaml_node_t *node) {
  json_t *j = node_json(cx, node, name, 0);
  json_t *have = json_object_get(cx->cfg->sections, name);
  char where[512];

  if (j == NULL) {
    return AL_ENOMEM;
  }
  /* A higher layer's keys replace the lower one's, key by key. */
  if (json_is_object(have) && json_is_object(j)) {
    json_object_update(have, j);
    json_decref(j);
  } else {
    json_object_set_new(cx->cfg->sections, name, j);
  }
  set_origin(cx->cfg, name, cx->layer,
             al__config_pos(cx, node, where, sizeof(where)));
  return 0;
}

int al_config_load_string(al_config_t *cfg, al_cfg_layer_t layer,
                          const char *name, const char *yaml, size_t len) {
  yaml_document_t doc;
  yaml_node_t *root;
  al_yaml_error_t ye;
  al_cfg_ctx_t cx;

  cx.cfg = cfg;
  cx.doc = &doc;
  cx.file = name;
  cx.layer = layer;
  if (al_yaml_load(&doc, yaml, len, &ye) != 0) {
    if (ye.nomem) {
      return AL_ENOMEM;
    }
    add_error(cfg, "%s:%d:%d: YAML: %s%s%s", name, ye.line, ye.col,
              ye.problem, ye.context[0] != '\0' ? " " : "", ye.context);
    return 0;
  }
  root = yaml_document_get_root_node(&doc);
  if (root == NULL) {
    /* An empty file is an empty configuration. */
  } else if (root->type != YAML_MAPPING_NODE) {
    al__config_err(&cx, root, "expected a mapping of keys (like "
                              "'model: NAME') at the top level");
  } else {
    load_map(&cx, root, keys, NULL);
  }
  yaml_document_delete(&doc);
  return 0;
}

int al_config_load_file(al_config_t *cfg, al_cfg_layer_t layer,
                        const char *path, bool *found) {
  FILE *f = fopen(path, "re");
  al_buf_t b;
  char chunk[8192];
  size_t n;
  int rc;

  *found = false;
  if (f == NULL) {
    if (errno != ENOENT && errno != ENOTDIR) {
      add_error(cfg, "%s:1:1: cannot read: %s", path, strerror(errno));
    }
    return 0;
  }
  *found = true;
  al_buf_init(&b, FILE_MAX);
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    if (al_buf_append(&b, chunk, n) != 0) {
      fclose(f);
      al_buf_free(&b);
      add_error(cfg, "%s:1:1: larger than %d bytes", path, FILE_MAX);
      return 0;
    }
  }
  if (ferror(f)) {
    add_error(cfg, "%s:1:1: cannot read: %s", path, strerror(errno));
    fclose(f);
    al_buf_free(&b);
    return 0;
  }
  fclose(f);
  rc = al_config_load_string(cfg, layer, path, b.data != NULL ? b.data : "",
                             b.len);
  al_buf_free(&b);
  return rc;
}

/* ---- environment and flags --------------------------------------------------- */

static const field_t *find_key(const char *key, const char **leaf) {
  const field_t *t = keys;
  const char *dot = strchr(key, '.');

  for (; t->name != NULL; t++) {
    size_t n = dot != NULL ? (size_t)(dot - key) : strlen(key);

    if (strlen(t->name) == n && strncmp(t->name, key, n) == 0) {
      if (dot == NULL) {
        *leaf = key;
        return t->type == F_MAP ? NULL : t;
      }
      if (t->type != F_MAP) {
        return NULL;
      }
      for (t = t->sub; t->name != NULL; t++) {
        if (strcmp(t->name, dot + 1) == 0) {
          *leaf = dot + 1;
          return t;
        }
      }
      return NULL;
    }
  }
  return NULL;
}

static int set_layer(al_config_t *cfg, const char *key, const char *value,
                     al_cfg_layer_t layer, const char *where, char *why,
                     size_t len) {
  const char *leaf;
  const field_t *f = find_key(key, &leaf);

  if (f == NULL || f->type == F_SECTION || f->type == F_VERSION) {
    snprintf(why, len, "unknown key '%s'", key);
    return AL_EINVAL;
  }
  if (f->type == F_LIST) {
    bool replace = origin_layer(cfg, key) != layer;

    return list_add(cfg, f, key, value, replace, layer, where, why, len)
               ? 0
               : AL_EINVAL;
  }
  return set_scalar(cfg, f, key, value, layer, where, why, len) ? 0
                                                                 : AL_EINVAL;
}

int al_config_set_flag(al_config_t *cfg, const char *key, const char *value,
                       const char *flag, char *why, size_t why_len) {
  char msg[600];
  int rc = set_layer(cfg, key, value, AL_CFG_FLAG, flag, msg, sizeof(msg));

  if (rc != 0) {
    snprintf(why, why_len, "%s: %s", flag, msg);
  }
  return rc;
}

static const char *std_getenv(const char *name) {
  return getenv(name);
}

static const struct {
  const char *var;
  const char *key;
} env_keys[] = {
    {"AGENTLOOP_PROVIDER", "provider"},
    {"AGENTLOOP_MODEL", "model"},
    {"AGENTLOOP_FALLBACK_MODEL", "fallback_model"},
    {"AGENTLOOP_BASE_URL", "base_url"},
    {"AGENTLOOP_SANDBOX", "sandbox.mode"},
};

void al_config_apply_env(al_config_t *cfg, al_cfg_getenv_fn ge) {
  size_t i;
  char why[600];

  if (ge == NULL) {
    ge = std_getenv;
  }
  for (i = 0; i < AL_ARRAY_SIZE(env_keys); i++) {
    const char *v = ge(env_keys[i].var);

    if (v != NULL && v[0] != '\0' &&
        set_layer(cfg, env_keys[i].key, v, AL_CFG_ENV, env_keys[i].var, why,
                  sizeof(why)) != 0) {
      add_error(cfg, "%s: %s", env_keys[i].var, why);
    }
  }
  /* The provider's own variable, as its SDKs read it, when no
   * AGENTLOOP_BASE_URL was given. */
  if (origin_layer(cfg, "base_url") != AL_CFG_ENV) {
    const char *prov = cfg->provider_hint != NULL ? cfg->provider_hint
                                                  : al_config_provider(cfg);
    const char *var = strcmp(prov, "anthropic") != 0
                          ? "OPENAI_BASE_URL"
                          : "ANTHROPIC_BASE_URL";
    const char *v = ge(var);

    if (v != NULL && v[0] != '\0' &&
        set_layer(cfg, "base_url", v, AL_CFG_ENV, var, why, sizeof(why)) !=
            0) {
      add_error(cfg, "%s: %s", var, why);
    }
  }
}

const char *al_config_dir(char *buf, size_t size) {
  return al__tools_config_dir(buf, size); /* one rule for both */
}

int al_config_load(al_config_t *cfg, const char *workspace, bool trusted,
                   al_cfg_getenv_fn ge) {
  char dir[4096];
  al_buf_t p;
  int rc = 0;

  cfg->project_trusted = trusted;
  if (al_config_dir(dir, sizeof(dir)) != NULL) {
    al_buf_init(&p, 8192);
    if (al_buf_printf(&p, "%s/config.yaml", dir) != 0) {
      al_buf_free(&p);
      return AL_ENOMEM;
    }
    cfg->user_file = p.data;
    rc = al_config_load_file(cfg, AL_CFG_USER, cfg->user_file,
                             &cfg->user_loaded);
  }
  if (rc == 0 && workspace != NULL) {
    struct stat st;

    al_buf_init(&p, 8192);
    if (al_buf_printf(&p, "%s/.agentloop/config.yaml", workspace) != 0) {
      al_buf_free(&p);
      return AL_ENOMEM;
    }
    cfg->project_file = p.data;
    if (!trusted) {
      cfg->project_untrusted = stat(cfg->project_file, &st) == 0;
    } else {
      rc = al_config_load_file(cfg, AL_CFG_PROJECT, cfg->project_file,
                               &cfg->project_loaded);
    }
  }
  if (rc == 0) {
    al_config_apply_env(cfg, ge);
  }
  return rc;
}

/* ---- reading -------------------------------------------------------------- */

const char *al_config_provider(const al_config_t *cfg) {
  return cfg->provider != NULL ? cfg->provider : "anthropic";
}

const char *al_config_api_key(const al_config_t *cfg, al_cfg_getenv_fn ge,
                              const char **var) {
  const char *name = cfg->api_key_env;

  if (ge == NULL) {
    ge = std_getenv;
  }
  if (name == NULL) {
    name = strcmp(al_config_provider(cfg), "anthropic") != 0
               ? "OPENAI_API_KEY"
               : "ANTHROPIC_API_KEY";
  }
  if (var != NULL) {
    *var = name;
  }
  return ge(name);
}

char *al_config_path(const al_config_t *cfg, const char *key,
                     const char *path, const char *workspace) {
  al_cfg_layer_t layer = origin_layer(cfg, key);
  const char *home = getenv("HOME");
  char dir[4096];
  al_buf_t b;

  al_buf_init(&b, 3 * 4096);
  if (path[0] == '~' && path[1] == '/' && home != NULL) {
    (void)al_buf_printf(&b, "%s/%s", home, path + 2);
  } else if (path[0] == '/') {
    (void)al_buf_append_str(&b, path);
  } else if (layer == AL_CFG_PROJECT && workspace != NULL) {
    (void)al_buf_printf(&b, "%s/%s", workspace, path);
  } else if (layer == AL_CFG_USER &&
             al_config_dir(dir, sizeof(dir)) != NULL) {
    (void)al_buf_printf(&b, "%s/%s", dir, path);
  } else {
    (void)al_buf_append_str(&b, path);
  }
  return b.data;
}

const json_t *al_config_section(const al_config_t *cfg, const char *name) {
  return json_object_get(cfg->sections, name);
}

const char *al_config_section_pos(const al_config_t *cfg, const char *path) {
  return json_string_value(json_object_get(cfg->positions, path));
}

static json_t *list_json(al_cfg_list_t l) {
  json_t *a = json_array();
  size_t i;

  for (i = 0; l != NULL && l[i] != NULL; i++) {
    json_array_append_new(a, json_string(l[i]));
  }
  return a;
}

static void fields_json(const al_config_t *cfg, const field_t *t,
                        const char *prefix, json_t *out) {
  const char *base = (const char *)cfg;

  for (; t->name != NULL; t++) {
    char path[256];
    json_t *v = NULL;

    snprintf(path, sizeof(path), "%s%s%s", prefix != NULL ? prefix : "",
             prefix != NULL ? "." : "", t->name);
    switch (t->type) {
    case F_STR: {
      const char *s = *(char *const *)(base + t->off);

      v = s != NULL ? json_string(s) : NULL;
      break;
    }
    case F_INT: {
      int64_t x = *(const int64_t *)(base + t->off);

      v = x != 0 ? json_integer(x) : NULL;
      break;
    }
    case F_BOOL: {
      int x = *(const int *)(base + t->off);

      v = x >= 0 ? json_boolean(x) : NULL;
      break;
    }
    case F_LIST:
      v = *(al_cfg_list_t const *)(base + t->off) != NULL
              ? list_json(*(al_cfg_list_t const *)(base + t->off))
              : NULL;
      break;
    case F_MAP:
      fields_json(cfg, t->sub, path, out);
      break;
    case F_SECTION: {
      json_t *s = json_object_get(cfg->sections, t->name);

      v = s != NULL ? json_deep_copy(s) : NULL;
      break;
    }
    default:
      break;
    }
    if (v != NULL) {
      json_object_set_new(out, path, v);
    }
  }
}

/* "sk-ant-…wxyz": enough to tell two keys apart, not enough to use one. */
static json_t *masked(const char *key) {
  size_t n = strlen(key);
  char buf[64];

  if (n < 12) {
    return json_string("****");
  }
  snprintf(buf, sizeof(buf), "%.4s...%s (%zu chars)", key, key + n - 4, n);
  return json_string(buf);
}

json_t *al_config_to_json(const al_config_t *cfg, bool with_origin,
                          al_cfg_getenv_fn ge) {
  json_t *vals = json_object();
  json_t *out;
  const char *var;
  const char *key = al_config_api_key(cfg, ge, &var);

  fields_json(cfg, keys, NULL, vals);
  if (json_object_get(vals, "provider") == NULL) {
    json_object_set_new(vals, "provider", json_string("anthropic"));
  }
  json_object_set_new(vals, "api_key",
                      key != NULL && key[0] != '\0' ? masked(key)
                                                    : json_null());
  out = json_pack("{s:o, s:s?, s:b, s:s?, s:b, s:b}", "values", vals,
                  "user_file", cfg->user_file, "user_loaded",
                  cfg->user_loaded, "project_file", cfg->project_file,
                  "project_loaded", cfg->project_loaded,
                  "project_untrusted", cfg->project_untrusted);
  if (out != NULL && with_origin) {
    json_t *o = json_deep_copy(cfg->origins);

    if (json_object_get(o, "provider") == NULL) {
      json_object_set_new(o, "provider",
                          json_pack("{s:s, s:s}", "layer", "default",
                                    "where", "default"));
    }
    json_object_set_new(o, "api_key",
                        json_pack("{s:s, s:s}", "layer", "env", "where",
                                  var));
    json_object_set_new(out, "origins", o);
  }
  return out;
}

int al_config_show(const al_config_t *cfg, bool with_origin,
                   al_cfg_getenv_fn ge, al_buf_t *out) {
  json_t *j = al_config_to_json(cfg, true, ge);
  json_t *vals = json_object_get(j, "values");
  json_t *origins = json_object_get(j, "origins");
  const char *k;
  json_t *v;
  int rc = 0;

  if (j == NULL) {
    return AL_ENOMEM;
  }
  json_object_foreach(vals, k, v) {
    char *txt = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    const char *s = json_is_string(v) ? json_string_value(v) : txt;
    json_t *o = json_object_get(origins, k);

    rc |= al_buf_printf(out, "%s: %s", k, s != NULL ? s : "?");
    if (with_origin && o != NULL) {
      const char *layer = json_string_value(json_object_get(o, "layer"));
      const char *where = json_string_value(json_object_get(o, "where"));

      if (strcmp(layer, "default") == 0) {
        rc |= al_buf_printf(out, "    (default)");
      } else {
        rc |= al_buf_printf(out, "    (%s %s)", layer, where);
      }
    }
    rc |= al_buf_append_str(out, "\n");
    al_free(txt);
  }
  json_decref(j);
  return rc != 0 ? AL_ENOMEM : 0;
}
