/* tools.d loader: YAML (libyaml's document API, so every node carries its
 * line and column) -> al_cli_def_t. See clitool.h for the format's rules.
 *
 * One tool is checked completely before it is added: the first problem
 * rejects that tool with one error line, and the loader moves on to the
 * next tool of the file. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "common/yamlnode.h"

#include "sandbox/sandbox.h"
#include "tools/clitool.h"

#define MAX_FILE_BYTES (1024 * 1024)
#define MAX_TIMEOUT_S 3600.0
#define MAX_OUTPUT_BYTES ((uint64_t)64 << 20)

typedef struct ctx_s {
  al_cli_set_t *set;
  yaml_document_t *doc;
  const char *file;
  bool project;
  /* The first error of the current tool. */
  bool failed;
} ctx_t;

void al__cli_set_init(al_cli_set_t *set) {
  memset(set, 0, sizeof(*set));
  al_buf_init(&set->errors, AL_CLI_MAX_ERRORS_BYTES);
}

void al__cli_set_error(al_cli_set_t *set, const char *file, int line, int col,
                       const char *fmt, ...) {
  char msg[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* A full buffer drops further lines; the count stays right. */
  (void)al_buf_printf(&set->errors, "%s:%d:%d: %s\n", file, line, col, msg);
  set->n_errors++;
}

static void strv_free(char **v) {
  size_t i;

  for (i = 0; v != NULL && v[i] != NULL; i++) {
    al_free(v[i]);
  }
  al_free(v);
}

static void def_free(al_cli_def_t *d) {
  size_t i;

  if (d == NULL) {
    return;
  }
  al_free(d->name);
  al_free(d->description);
  al_free(d->file);
  al_free(d->cmd);
  strv_free(d->args);
  for (i = 0; i < d->n_opt; i++) {
    al_free(d->opt[i].param);
    strv_free(d->opt[i].args);
  }
  al_free(d->opt);
  for (i = 0; i < d->n_params; i++) {
    al_cli_param_t *p = &d->params[i];

    al_free(p->name);
    al_free(p->description);
    al_free(p->pattern);
    strv_free(p->enum_vals);
    if (p->has_re) {
      regfree(&p->re);
    }
  }
  al_free(d->params);
  strv_free(d->env);
  al_free(d);
}

void al__cli_set_free(al_cli_set_t *set) {
  size_t i;

  for (i = 0; i < set->n; i++) {
    def_free(set->defs[i]);
  }
  al_free(set->defs);
  al_buf_free(&set->errors);
  memset(set, 0, sizeof(*set));
}

/* ---- node helpers ---------------------------------------------------------- */

static void err(ctx_t *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void err(ctx_t *c, const yaml_node_t *n, const char *fmt, ...) {
  char msg[900];
  va_list ap;

  if (c->failed) {
    return;
  }
  c->failed = true;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  al__cli_set_error(c->set, c->file, n != NULL ? (int)n->start_mark.line + 1 : 1,
                    n != NULL ? (int)n->start_mark.column + 1 : 1, "%s", msg);
}

static yaml_node_t *node(ctx_t *c, int id) {
  return yaml_document_get_node(c->doc, id);
}

/* A key that appeared earlier in the same mapping: YAML says keys are
 * unique, and a second value would silently replace (or leak) the first. */
static bool dup_key(ctx_t *c, yaml_node_t *m, yaml_node_pair_t *pr) {
  yaml_node_t *k = node(c, pr->key);
  yaml_node_pair_t *q;

  if (!al_yaml_is_scalar(k)) {
    return false;
  }
  for (q = m->data.mapping.pairs.start; q < pr; q++) {
    yaml_node_t *qk = node(c, q->key);

    if (al_yaml_is_scalar(qk) && strcmp(al_yaml_scalar(qk), al_yaml_scalar(k)) == 0) {
      err(c, k, "duplicate key '%s'", al_yaml_scalar(k));
      return true;
    }
  }
  return false;
}

static bool get_string(ctx_t *c, yaml_node_t *n, const char *key, char **out) {
  const char *why = al_yaml_string_problem(n);

  if (why != NULL) {
    err(c, n, "'%s' %s", key, why);
    return false;
  }
  *out = al_strdup(al_yaml_scalar(n));
  if (*out == NULL) {
    err(c, n, "out of memory");
    return false;
  }
  return true;
}

static bool get_bool(ctx_t *c, yaml_node_t *n, const char *key, bool *out) {
  int v = al_yaml_bool(n);

  if (v < 0 && al_yaml_is_scalar(n) && al_yaml_plain(n)) {
    err(c, n, "'%s' must be true or false, not '%s'", key, al_yaml_scalar(n));
    return false;
  }
  if (v < 0) {
    err(c, n, "'%s' must be true or false", key);
    return false;
  }
  *out = v == 1;
  return true;
}

static bool get_number(ctx_t *c, yaml_node_t *n, const char *key,
                       double *out) {
  char *end;
  double v;

  if (!al_yaml_is_scalar(n) || !al_yaml_plain(n) || al_yaml_scalar(n)[0] == '\0') {
    err(c, n, "'%s' must be a number", key);
    return false;
  }
  errno = 0;
  v = strtod(al_yaml_scalar(n), &end);
  if (*end != '\0' || errno != 0 || !isfinite(v)) {
    err(c, n, "'%s' must be a number, not '%s'", key, al_yaml_scalar(n));
    return false;
  }
  *out = v;
  return true;
}

static bool get_count(ctx_t *c, yaml_node_t *n, const char *key,
                      int64_t *out) {
  double v;

  if (!get_number(c, n, key, &v)) {
    return false;
  }
  if (v < 0 || v != floor(v) || v > 1e15) {
    err(c, n, "'%s' must be a non-negative integer", key);
    return false;
  }
  *out = (int64_t)v;
  return true;
}

static bool name_ok(const char *s, size_t max) {
  size_t i;

  if (s[0] == '\0' || strlen(s) > max) {
    return false;
  }
  for (i = 0; s[i] != '\0'; i++) {
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') {
      return false;
    }
  }
  return true;
}

static bool get_strv(ctx_t *c, yaml_node_t *n, const char *key, char ***out) {
  yaml_node_item_t *it;
  size_t cnt;
  size_t i = 0;
  char **v;

  if (n == NULL || n->type != YAML_SEQUENCE_NODE) {
    err(c, n, "'%s' must be a list of strings", key);
    return false;
  }
  cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  v = al_calloc(cnt + 1, sizeof(*v));
  if (v == NULL) {
    err(c, n, "out of memory");
    return false;
  }
  for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
       it++) {
    yaml_node_t *e = node(c, *it);

    if (!al_yaml_is_scalar(e)) {
      err(c, e, "every element of '%s' must be a string", key);
      strv_free(v);
      return false;
    }
    if (!get_string(c, e, key, &v[i])) {
      strv_free(v);
      return false;
    }
    i++;
  }
  *out = v;
  return true;
}

/* ---- templates ---------------------------------------------------------------- */

al_cli_param_t *al__cli_param(const al_cli_def_t *d, const char *name,
                              size_t len, size_t *idx) {
  size_t i;

  for (i = 0; i < d->n_params; i++) {
    if (strlen(d->params[i].name) == len &&
        memcmp(d->params[i].name, name, len) == 0) {
      if (idx != NULL) {
        *idx = i;
      }
      return &d->params[i];
    }
  }
  return NULL;
}

int al__cli_placeholder(const char *p, const char **start, const char **end,
                        const char **name, size_t *len) {
  const char *s = strstr(p, "{{");
  const char *e;
  const char *a;
  const char *b;

  if (s == NULL) {
    return 0;
  }
  e = strstr(s + 2, "}}");
  if (e == NULL) {
    return -1;
  }
  a = s + 2;
  b = e;
  while (a < b && *a == ' ') {
    a++;
  }
  while (b > a && b[-1] == ' ') {
    b--;
  }
  *start = s;
  *end = e + 2;
  *name = a;
  *len = (size_t)(b - a);
  return 1;
}

static al_cli_param_t *find_param(al_cli_def_t *d, const char *name,
                                  size_t len) {
  return al__cli_param(d, name, len, NULL);
}

/* Checks every "{{name}}" of a template: closed, names a parameter, and
 * (in args) a required one. `owner`: the optional parameter whose
 * optional_args this is, or NULL for args. */
static bool check_template(ctx_t *c, al_cli_def_t *d, yaml_node_t *n,
                           const char *t, const char *owner) {
  const char *p = t;
  const char *s;
  const char *e;
  const char *a;
  size_t len;
  int rc;

  while ((rc = al__cli_placeholder(p, &s, &e, &a, &len)) == 1) {
    al_cli_param_t *prm = find_param(d, a, len);

    if (prm == NULL) {
      err(c, n, "template '%s' names an undeclared parameter '%.*s'", t,
          (int)len, a);
      return false;
    }
    if (owner == NULL && prm->optional) {
      err(c, n,
          "optional parameter '%s' is used in args; put it in "
          "optional_args",
          prm->name);
      return false;
    }
    if (owner != NULL && prm->optional && strcmp(prm->name, owner) != 0) {
      err(c, n,
          "optional_args of '%s' uses another optional parameter '%s'",
          owner, prm->name);
      return false;
    }
    p = e;
  }
  if (rc < 0) {
    err(c, n, "template '%s' has '{{' without '}}'", t);
    return false;
  }
  return true;
}

/* ---- env -------------------------------------------------------------------- */

static bool env_name_ok(const char *s) {
  static const char *const refused[] = {"BASH_ENV", "ENV", "PROMPT_COMMAND",
                                        "SHELLOPTS", "BASHOPTS", "IFS",
                                        NULL};
  size_t i;

  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) {
    return false;
  }
  for (i = 0; s[i] != '\0'; i++) {
    if (!isalnum((unsigned char)s[i]) && s[i] != '_') {
      return false;
    }
  }
  if (strncmp(s, "LD_", 3) == 0) {
    return false;
  }
  for (i = 0; refused[i] != NULL; i++) {
    if (strcmp(s, refused[i]) == 0) {
      return false;
    }
  }
  return true;
}

/* "NAME=value" with each ${VAR} replaced by the host's value (empty when
 * unset). */
static char *expand_env(ctx_t *c, yaml_node_t *vn, const char *name,
                        const char *v) {
  al_buf_t b;
  const char *p = v;

  al_buf_init(&b, 64 * 1024);
  if (al_buf_printf(&b, "%s=", name) != 0) {
    goto nomem;
  }
  while (*p != '\0') {
    const char *s = strstr(p, "${");
    const char *e;
    char var[256];
    const char *val;

    if (s == NULL) {
      if (al_buf_append_str(&b, p) != 0) {
        goto nomem;
      }
      break;
    }
    if (al_buf_append(&b, p, (size_t)(s - p)) != 0) {
      goto nomem;
    }
    e = strchr(s + 2, '}');
    if (e == NULL || e == s + 2 || (size_t)(e - s - 2) >= sizeof(var)) {
      err(c, vn, "env %s: malformed ${...} reference", name);
      al_buf_free(&b);
      return NULL;
    }
    memcpy(var, s + 2, (size_t)(e - s - 2));
    var[e - s - 2] = '\0';
    if (c->project) {
      err(c, vn,
          "env %s: project tools cannot take host variables (${%s}); "
          "declare the tool in the user-level tools.d",
          name, var);
      al_buf_free(&b);
      return NULL;
    }
    val = al_sandbox_getenv(var);
    if (val != NULL && al_buf_append_str(&b, val) != 0) {
      goto nomem;
    }
    p = e + 1;
  }
  if (b.data == NULL) {
    goto nomem;
  }
  return b.data;
nomem:
  al_buf_free(&b);
  err(c, vn, "out of memory");
  return NULL;
}

/* ---- one parameter ------------------------------------------------------------ */

static bool load_param(ctx_t *c, al_cli_param_t *p, yaml_node_t *kn,
                       yaml_node_t *vn) {
  yaml_node_pair_t *pr;
  bool has_type = false;

  p->min_len = p->max_len = -1;
  if (!get_string(c, kn, "parameter name", &p->name)) {
    return false;
  }
  if (!name_ok(p->name, 64)) {
    err(c, kn, "bad parameter name '%s' (letters, digits, _ and -)",
        p->name);
    return false;
  }
  if (vn->type != YAML_MAPPING_NODE) {
    err(c, vn, "parameter '%s' must be a mapping", p->name);
    return false;
  }
  for (pr = vn->data.mapping.pairs.start; pr < vn->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = node(c, pr->key);
    yaml_node_t *v = node(c, pr->value);
    const char *key;
    double num;

    if (!al_yaml_is_scalar(k)) {
      err(c, k, "parameter keys must be strings");
      return false;
    }
    if (dup_key(c, vn, pr)) {
      return false;
    }
    key = al_yaml_scalar(k);
    if (strcmp(key, "type") == 0) {
      const char *t = al_yaml_is_scalar(v) ? al_yaml_scalar(v) : "";

      has_type = true;
      if (strcmp(t, "string") == 0) {
        p->type = AL_CLI_STRING;
      } else if (strcmp(t, "integer") == 0) {
        p->type = AL_CLI_INTEGER;
      } else if (strcmp(t, "number") == 0) {
        p->type = AL_CLI_NUMBER;
      } else if (strcmp(t, "boolean") == 0) {
        p->type = AL_CLI_BOOLEAN;
      } else {
        err(c, v,
            "parameter '%s': type must be string, integer, number or "
            "boolean",
            p->name);
        return false;
      }
    } else if (strcmp(key, "description") == 0) {
      if (!get_string(c, v, "description", &p->description)) {
        return false;
      }
    } else if (strcmp(key, "enum") == 0) {
      if (!get_strv(c, v, "enum", &p->enum_vals)) {
        return false;
      }
      if (p->enum_vals[0] == NULL) {
        err(c, v, "parameter '%s': enum is empty", p->name);
        return false;
      }
    } else if (strcmp(key, "pattern") == 0) {
      int rc;

      if (!get_string(c, v, "pattern", &p->pattern)) {
        return false;
      }
      rc = regcomp(&p->re, p->pattern, REG_EXTENDED | REG_NOSUB);
      if (rc != 0) {
        char msg[256];

        regerror(rc, &p->re, msg, sizeof(msg));
        err(c, v, "parameter '%s': bad pattern: %s", p->name, msg);
        return false;
      }
      p->has_re = true;
    } else if (strcmp(key, "minLength") == 0) {
      if (!get_count(c, v, "minLength", &p->min_len)) {
        return false;
      }
    } else if (strcmp(key, "maxLength") == 0) {
      if (!get_count(c, v, "maxLength", &p->max_len)) {
        return false;
      }
    } else if (strcmp(key, "minimum") == 0) {
      if (!get_number(c, v, "minimum", &num)) {
        return false;
      }
      p->has_min = true;
      p->min = num;
    } else if (strcmp(key, "maximum") == 0) {
      if (!get_number(c, v, "maximum", &num)) {
        return false;
      }
      p->has_max = true;
      p->max = num;
    } else if (strcmp(key, "optional") == 0) {
      if (!get_bool(c, v, "optional", &p->optional)) {
        return false;
      }
    } else if (strcmp(key, "allow_leading_dash") == 0) {
      if (!get_bool(c, v, "allow_leading_dash", &p->allow_dash)) {
        return false;
      }
    } else {
      err(c, k, "parameter '%s': unknown key '%s'", p->name, key);
      return false;
    }
  }
  if (!has_type) {
    err(c, vn, "parameter '%s' has no type", p->name);
    return false;
  }
  if (p->type != AL_CLI_STRING &&
      (p->enum_vals != NULL || p->has_re || p->min_len >= 0 ||
       p->max_len >= 0)) {
    err(c, vn,
        "parameter '%s': enum, pattern, minLength and maxLength apply to "
        "strings only",
        p->name);
    return false;
  }
  if ((p->type == AL_CLI_STRING || p->type == AL_CLI_BOOLEAN) &&
      (p->has_min || p->has_max)) {
    err(c, vn, "parameter '%s': minimum and maximum apply to numbers only",
        p->name);
    return false;
  }
  if (p->min_len >= 0 && p->max_len >= 0 && p->min_len > p->max_len) {
    err(c, vn, "parameter '%s': minLength > maxLength", p->name);
    return false;
  }
  if (p->has_min && p->has_max && p->min > p->max) {
    err(c, vn, "parameter '%s': minimum > maximum", p->name);
    return false;
  }
  return true;
}

/* ---- one tool ------------------------------------------------------------------ */

static yaml_node_t *map_get(ctx_t *c, yaml_node_t *m, const char *key) {
  yaml_node_pair_t *pr;

  for (pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = node(c, pr->key);

    if (al_yaml_is_scalar(k) && strcmp(al_yaml_scalar(k), key) == 0) {
      return node(c, pr->value);
    }
  }
  return NULL;
}

static bool has_def(const al_cli_set_t *set, const char *name) {
  size_t i;

  for (i = 0; i < set->n; i++) {
    if (strcmp(set->defs[i]->name, name) == 0) {
      return true;
    }
  }
  return false;
}

static const char *const k_tool_keys[] = {
    "name",    "description", "category", "cmd",   "args",
    "optional_args", "parameters", "concurrency_safe", "timeout",
    "max_output", "env", "network", "compactable", NULL};

static bool load_tool_fields(ctx_t *c, al_cli_def_t *d, yaml_node_t *m) {
  yaml_node_pair_t *pr;
  yaml_node_t *v;
  size_t i;

  for (pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = node(c, pr->key);
    bool known = false;

    if (!al_yaml_is_scalar(k)) {
      err(c, k, "tool keys must be strings");
      return false;
    }
    if (dup_key(c, m, pr)) {
      return false;
    }
    for (i = 0; k_tool_keys[i] != NULL; i++) {
      known = known || strcmp(al_yaml_scalar(k), k_tool_keys[i]) == 0;
    }
    if (!known) {
      err(c, k, "unknown key '%s'", al_yaml_scalar(k));
      return false;
    }
  }
  v = map_get(c, m, "name");
  if (v == NULL) {
    err(c, m, "a tool needs a 'name'");
    return false;
  }
  if (!get_string(c, v, "name", &d->name)) {
    return false;
  }
  if (!name_ok(d->name, 64)) {
    err(c, v, "bad tool name '%s' (1-64 letters, digits, _ and -)", d->name);
    return false;
  }
  if (has_def(c->set, d->name)) {
    err(c, v, "tool '%s' is already defined", d->name);
    return false;
  }
  v = map_get(c, m, "description");
  if (v == NULL) {
    err(c, m, "tool '%s' needs a 'description'", d->name);
    return false;
  }
  if (!get_string(c, v, "description", &d->description)) {
    return false;
  }
  v = map_get(c, m, "cmd");
  if (v == NULL) {
    err(c, m, "tool '%s' needs a 'cmd'", d->name);
    return false;
  }
  if (!get_string(c, v, "cmd", &d->cmd)) {
    return false;
  }
  if (d->cmd[0] == '\0' || strstr(d->cmd, "{{") != NULL ||
      (strchr(d->cmd, '/') != NULL && d->cmd[0] != '/')) {
    err(c, v,
        "tool '%s': cmd must be a program name (found in PATH) or an "
        "absolute path, without templates",
        d->name);
    return false;
  }
  d->category = AL_TOOL_WRITE;
  if ((v = map_get(c, m, "category")) != NULL) {
    const char *s = al_yaml_is_scalar(v) ? al_yaml_scalar(v) : "";

    if (strcmp(s, "read") == 0) {
      d->category = AL_TOOL_READ;
    } else if (strcmp(s, "write") == 0) {
      d->category = AL_TOOL_WRITE;
    } else if (strcmp(s, "admin") == 0) {
      d->category = AL_TOOL_ADMIN;
    } else {
      err(c, v, "tool '%s': category must be read, write or admin",
          d->name);
      return false;
    }
  }
  if ((v = map_get(c, m, "concurrency_safe")) != NULL &&
      !get_bool(c, v, "concurrency_safe", &d->concurrency_safe)) {
    return false;
  }
  if ((v = map_get(c, m, "network")) != NULL &&
      !get_bool(c, v, "network", &d->network)) {
    return false;
  }
  if ((v = map_get(c, m, "compactable")) != NULL &&
      !get_bool(c, v, "compactable", &d->compactable)) {
    return false;
  }
  d->timeout_ms = 120000;
  if ((v = map_get(c, m, "timeout")) != NULL) {
    double s;

    if (!get_number(c, v, "timeout", &s)) {
      return false;
    }
    if (!(s > 0) || s > MAX_TIMEOUT_S) {
      err(c, v, "tool '%s': timeout must be in (0, 3600] seconds", d->name);
      return false;
    }
    d->timeout_ms = (uint64_t)(s * 1000.0);
    if (d->timeout_ms == 0) {
      d->timeout_ms = 1;
    }
  }
  d->max_output = 200 * 1024;
  if ((v = map_get(c, m, "max_output")) != NULL) {
    int64_t n;

    if (!get_count(c, v, "max_output", &n)) {
      return false;
    }
    if (n == 0 || (uint64_t)n > MAX_OUTPUT_BYTES) {
      err(c, v, "tool '%s': max_output must be 1..67108864 bytes", d->name);
      return false;
    }
    d->max_output = (size_t)n;
  }
  /* Parameters before the templates that use them. */
  if ((v = map_get(c, m, "parameters")) != NULL) {
    size_t cnt;

    if (v->type != YAML_MAPPING_NODE) {
      err(c, v, "tool '%s': parameters must be a mapping", d->name);
      return false;
    }
    cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    d->params = al_calloc(cnt ? cnt : 1, sizeof(*d->params));
    if (d->params == NULL) {
      err(c, v, "out of memory");
      return false;
    }
    for (pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top;
         pr++) {
      yaml_node_t *pk = node(c, pr->key);

      if (al_yaml_is_scalar(pk) && find_param(d, al_yaml_scalar(pk), strlen(al_yaml_scalar(pk)))) {
        err(c, pk, "parameter '%s' is declared twice", al_yaml_scalar(pk));
        return false;
      }
      if (!load_param(c, &d->params[d->n_params++], pk,
                      node(c, pr->value))) {
        return false;
      }
    }
  }
  if ((v = map_get(c, m, "args")) != NULL) {
    yaml_node_item_t *it;

    if (!get_strv(c, v, "args", &d->args)) {
      return false;
    }
    for (it = v->data.sequence.items.start, i = 0;
         it < v->data.sequence.items.top; it++, i++) {
      if (!check_template(c, d, node(c, *it), d->args[i], NULL)) {
        return false;
      }
    }
  } else {
    d->args = al_calloc(1, sizeof(*d->args));
    if (d->args == NULL) {
      err(c, m, "out of memory");
      return false;
    }
  }
  if ((v = map_get(c, m, "optional_args")) != NULL) {
    size_t cnt;

    if (v->type != YAML_MAPPING_NODE) {
      err(c, v, "tool '%s': optional_args must be a mapping", d->name);
      return false;
    }
    cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    d->opt = al_calloc(cnt ? cnt : 1, sizeof(*d->opt));
    if (d->opt == NULL) {
      err(c, v, "out of memory");
      return false;
    }
    for (pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top;
         pr++) {
      yaml_node_t *ok = node(c, pr->key);
      yaml_node_t *ov = node(c, pr->value);
      al_cli_optarg_t *o = &d->opt[d->n_opt];
      al_cli_param_t *prm;
      yaml_node_item_t *it;

      if (dup_key(c, v, pr)) {
        return false;
      }
      if (!get_string(c, ok, "optional_args key", &o->param)) {
        return false;
      }
      d->n_opt++;
      prm = find_param(d, o->param, strlen(o->param));
      if (prm == NULL || !prm->optional) {
        err(c, ok,
            "optional_args '%s' must name an optional parameter (optional: "
            "true)",
            o->param);
        return false;
      }
      if (!get_strv(c, ov, "optional_args", &o->args)) {
        return false;
      }
      for (it = ov->data.sequence.items.start, i = 0;
           it < ov->data.sequence.items.top; it++, i++) {
        if (!check_template(c, d, node(c, *it), o->args[i], o->param)) {
          return false;
        }
      }
    }
  }
  /* Every optional parameter needs somewhere to go. */
  for (i = 0; i < d->n_params; i++) {
    size_t j;
    bool used = false;

    if (!d->params[i].optional) {
      continue;
    }
    for (j = 0; j < d->n_opt; j++) {
      used = used || strcmp(d->opt[j].param, d->params[i].name) == 0;
    }
    if (!used) {
      err(c, m,
          "tool '%s': optional parameter '%s' has no optional_args entry",
          d->name, d->params[i].name);
      return false;
    }
  }
  if ((v = map_get(c, m, "env")) != NULL) {
    size_t cnt;
    size_t n = 0;

    if (v->type != YAML_MAPPING_NODE) {
      err(c, v, "tool '%s': env must be a mapping", d->name);
      return false;
    }
    cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    d->env = al_calloc(cnt + 1, sizeof(*d->env));
    if (d->env == NULL) {
      err(c, v, "out of memory");
      return false;
    }
    for (pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top;
         pr++) {
      yaml_node_t *ek = node(c, pr->key);
      yaml_node_t *ev = node(c, pr->value);

      if (dup_key(c, v, pr)) {
        return false;
      }
      if (!al_yaml_is_scalar(ek) || !env_name_ok(al_yaml_scalar(ek))) {
        err(c, ek,
            "tool '%s': env name '%s' is not allowed (a shell variable name, "
            "not LD_*, BASH_ENV, ENV, PROMPT_COMMAND, IFS)",
            d->name, al_yaml_is_scalar(ek) ? al_yaml_scalar(ek) : "?");
        return false;
      }
      if (!al_yaml_is_scalar(ev)) {
        err(c, ev, "tool '%s': env %s must be a string", d->name,
            al_yaml_scalar(ek));
        return false;
      }
      d->env[n] = expand_env(c, ev, al_yaml_scalar(ek), al_yaml_scalar(ev));
      if (d->env[n] == NULL) {
        return false;
      }
      n++;
    }
  }
  return true;
}

static void load_tool(ctx_t *c, yaml_node_t *m) {
  al_cli_def_t *d;
  al_cli_def_t **nv;

  c->failed = false;
  if (m == NULL || m->type != YAML_MAPPING_NODE) {
    err(c, m, "a tool must be a mapping");
    return;
  }
  d = al_calloc(1, sizeof(*d));
  if (d == NULL) {
    err(c, m, "out of memory");
    return;
  }
  d->project = c->project;
  d->line = (int)m->start_mark.line + 1;
  d->file = al_strdup(c->file);
  if (d->file == NULL || !load_tool_fields(c, d, m)) {
    if (d->file == NULL) {
      err(c, m, "out of memory");
    }
    def_free(d);
    return;
  }
  nv = al_realloc(c->set->defs, (c->set->n + 1) * sizeof(*nv));
  if (nv == NULL) {
    err(c, m, "out of memory");
    def_free(d);
    return;
  }
  c->set->defs = nv;
  nv[c->set->n++] = d;
}

int al__cli_load_string(al_cli_set_t *set, const char *name,
                        const char *yaml, size_t len, bool project) {
  al_yaml_error_t ye;
  yaml_document_t doc;
  yaml_node_t *root;
  ctx_t c;

  memset(&c, 0, sizeof(c));
  c.set = set;
  c.file = name;
  c.project = project;
  c.doc = &doc;
  if (al_yaml_load(&doc, yaml, len, &ye) != 0) {
    if (ye.nomem) {
      return AL_ENOMEM;
    }
    al__cli_set_error(set, name, ye.line, ye.col, "YAML: %s%s%s", ye.problem,
                      ye.context[0] != '\0' ? " " : "", ye.context);
    return 0;
  }
  root = yaml_document_get_root_node(&doc);
  if (root == NULL) {
    al__cli_set_error(set, name, 1, 1, "empty file (expected 'tools:')");
  } else if (root->type == YAML_MAPPING_NODE &&
             map_get(&c, root, "tools") != NULL) {
    yaml_node_t *tl = map_get(&c, root, "tools");
    yaml_node_pair_t *pr;

    for (pr = root->data.mapping.pairs.start;
         pr < root->data.mapping.pairs.top; pr++) {
      yaml_node_t *k = node(&c, pr->key);

      if (!al_yaml_is_scalar(k) || strcmp(al_yaml_scalar(k), "tools") != 0) {
        c.failed = false;
        err(&c, k, "unknown top-level key '%s' (expected 'tools:')",
            al_yaml_is_scalar(k) ? al_yaml_scalar(k) : "?");
      }
    }
    if (tl->type != YAML_SEQUENCE_NODE) {
      c.failed = false;
      err(&c, tl, "'tools' must be a list of tools");
    } else {
      yaml_node_item_t *it;

      for (it = tl->data.sequence.items.start;
           it < tl->data.sequence.items.top; it++) {
        load_tool(&c, node(&c, *it));
      }
    }
  } else if (root->type == YAML_MAPPING_NODE) {
    load_tool(&c, root);
  } else {
    c.failed = false;
    err(&c, root, "expected a mapping with 'tools:' or one tool");
  }
  yaml_document_delete(&doc);
  return 0;
}

int al__cli_load_file(al_cli_set_t *set, const char *path, bool project) {
  FILE *f = fopen(path, "rbe");
  char *buf;
  size_t n;
  int rc;

  if (f == NULL) {
    al__cli_set_error(set, path, 1, 1, "cannot open: %s", strerror(errno));
    return 0;
  }
  buf = al_malloc(MAX_FILE_BYTES + 1);
  if (buf == NULL) {
    fclose(f);
    return AL_ENOMEM;
  }
  n = fread(buf, 1, MAX_FILE_BYTES + 1, f);
  fclose(f);
  if (n > MAX_FILE_BYTES) {
    al__cli_set_error(set, path, 1, 1, "file larger than 1 MiB");
    al_free(buf);
    return 0;
  }
  rc = al__cli_load_string(set, path, buf, n, project);
  al_free(buf);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int al__cli_load_dir(al_cli_set_t *set, const char *dir, bool project) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char **names = NULL;
  size_t n = 0;
  size_t i;
  int rc = 0;

  if (d == NULL) {
    if (errno != ENOENT) {
      al__cli_set_error(set, dir, 1, 1, "cannot open directory: %s",
                        strerror(errno));
    }
    return 0;
  }
  while ((de = readdir(d)) != NULL && n < 10000) {
    size_t l = strlen(de->d_name);
    char **nv;

    if (de->d_name[0] == '.' ||
        !((l > 5 && strcmp(de->d_name + l - 5, ".yaml") == 0) ||
          (l > 4 && strcmp(de->d_name + l - 4, ".yml") == 0))) {
      continue;
    }
    nv = al_realloc(names, (n + 1) * sizeof(*nv));
    if (nv == NULL) {
      rc = AL_ENOMEM;
      break;
    }
    names = nv;
    names[n] = al_malloc(strlen(dir) + l + 2);
    if (names[n] == NULL) {
      rc = AL_ENOMEM;
      break;
    }
    sprintf(names[n], "%s/%s", dir, de->d_name);
    n++;
  }
  closedir(d);
  if (n > 1) {
    qsort(names, n, sizeof(*names), cmp_str);
  }
  for (i = 0; i < n; i++) {
    if (rc == 0) {
      rc = al__cli_load_file(set, names[i], project);
    }
    al_free(names[i]);
  }
  al_free(names);
  return rc;
}

/* ---- trust ------------------------------------------------------------------- */

const char *al__tools_config_dir(char *buf, size_t size) {
  const char *x = getenv("XDG_CONFIG_HOME");
  const char *home = getenv("HOME");

  if (x != NULL && x[0] == '/') {
    snprintf(buf, size, "%s/agentloop", x);
  } else if (home != NULL && home[0] == '/') {
    snprintf(buf, size, "%s/.config/agentloop", home);
  } else {
    return NULL;
  }
  return buf;
}

/* Project trust: src/tools/trust.c. */
