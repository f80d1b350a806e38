/* tools.d CLI tools at run time: the schema the model sees, argument
 * validation, argv building and the tool implementation (one spawn per
 * call, through the sandbox). See clitool.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/clitool.h"
#include "tools/spawn.h"
#include "tools/tools.h"

static const char *type_name(al_cli_type_t t) {
  switch (t) {
  case AL_CLI_STRING: return "string";
  case AL_CLI_INTEGER: return "integer";
  case AL_CLI_NUMBER: return "number";
  case AL_CLI_BOOLEAN: return "boolean";
  }
  return "string";
}

json_t *al__cli_def_schema(const al_cli_def_t *d) {
  json_t *props = json_object();
  json_t *req = json_array();
  json_t *schema;
  size_t i, j;

  if (props == NULL || req == NULL) {
    json_decref(props);
    json_decref(req);
    return NULL;
  }
  for (i = 0; i < d->n_params; i++) {
    const al_cli_param_t *p = &d->params[i];
    json_t *ps = json_pack("{s:s}", "type", type_name(p->type));

    if (ps == NULL) {
      goto nomem;
    }
    if (p->description != NULL) {
      json_object_set_new(ps, "description", json_string(p->description));
    }
    if (p->enum_vals != NULL) {
      json_t *e = json_array();

      for (j = 0; p->enum_vals[j] != NULL; j++) {
        json_array_append_new(e, json_string(p->enum_vals[j]));
      }
      json_object_set_new(ps, "enum", e);
    }
    if (p->pattern != NULL) {
      json_object_set_new(ps, "pattern", json_string(p->pattern));
    }
    if (p->min_len >= 0) {
      json_object_set_new(ps, "minLength", json_integer(p->min_len));
    }
    if (p->max_len >= 0) {
      json_object_set_new(ps, "maxLength", json_integer(p->max_len));
    }
    if (p->has_min) {
      json_object_set_new(ps, "minimum", json_real(p->min));
    }
    if (p->has_max) {
      json_object_set_new(ps, "maximum", json_real(p->max));
    }
    json_object_set_new(props, p->name, ps);
    if (!p->optional) {
      json_array_append_new(req, json_string(p->name));
    }
  }
  schema = json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties",
                     props, "required", req, "additionalProperties", 0);
  return schema;
nomem:
  json_decref(props);
  json_decref(req);
  return NULL;
}

/* ---- validation ------------------------------------------------------------ */

static size_t utf8_chars(const char *s, size_t n) {
  size_t i, c = 0;

  for (i = 0; i < n; i++) {
    c += ((unsigned char)s[i] & 0xC0) != 0x80;
  }
  return c;
}

/* The value's argv text (al_malloc'd) after every rule passed, or NULL
 * with the reason in why. */
static char *check_value(const al_cli_param_t *p, const json_t *v,
                         al_buf_t *why) {
  char num[64];
  size_t i;

  switch (p->type) {
  case AL_CLI_STRING: {
    const char *s;
    size_t len;
    size_t chars;

    if (!json_is_string(v)) {
      al_buf_printf(why, "parameter '%s' must be a string", p->name);
      return NULL;
    }
    s = json_string_value(v);
    len = json_string_length(v);
    if (strlen(s) != len) {
      al_buf_printf(why, "parameter '%s' contains a NUL byte", p->name);
      return NULL;
    }
    chars = utf8_chars(s, len);
    if (p->min_len >= 0 && chars < (size_t)p->min_len) {
      al_buf_printf(why, "parameter '%s' is shorter than minLength %lld",
                    p->name, (long long)p->min_len);
      return NULL;
    }
    if (p->max_len >= 0 && chars > (size_t)p->max_len) {
      al_buf_printf(why, "parameter '%s' is longer than maxLength %lld",
                    p->name, (long long)p->max_len);
      return NULL;
    }
    if (p->enum_vals != NULL) {
      bool found = false;

      for (i = 0; p->enum_vals[i] != NULL && !found; i++) {
        found = strcmp(p->enum_vals[i], s) == 0;
      }
      if (!found) {
        al_buf_printf(why, "parameter '%s' must be one of the enum values "
                           "(",
                      p->name);
        for (i = 0; p->enum_vals[i] != NULL; i++) {
          al_buf_printf(why, "%s%s", i ? ", " : "", p->enum_vals[i]);
        }
        al_buf_append_str(why, ")");
        return NULL;
      }
    }
    if (p->has_re && regexec(&p->re, s, 0, NULL, 0) != 0) {
      al_buf_printf(why, "parameter '%s' does not match pattern %s", p->name,
                    p->pattern);
      return NULL;
    }
    return al_strdup(s);
  }
  case AL_CLI_INTEGER:
  case AL_CLI_NUMBER: {
    double d;

    if (!json_is_number(v)) {
      al_buf_printf(why, "parameter '%s' must be a%s %s", p->name,
                    p->type == AL_CLI_INTEGER ? "n" : "",
                    type_name(p->type));
      return NULL;
    }
    d = json_number_value(v);
    if (p->type == AL_CLI_INTEGER &&
        (d != floor(d) || fabs(d) > 9007199254740992.0)) {
      al_buf_printf(why, "parameter '%s' must be an integer", p->name);
      return NULL;
    }
    if (p->has_min && d < p->min) {
      al_buf_printf(why, "parameter '%s' is below minimum %g", p->name,
                    p->min);
      return NULL;
    }
    if (p->has_max && d > p->max) {
      al_buf_printf(why, "parameter '%s' is above maximum %g", p->name,
                    p->max);
      return NULL;
    }
    if (p->type == AL_CLI_INTEGER) {
      snprintf(num, sizeof(num), "%lld", (long long)d);
    } else if (json_is_integer(v)) {
      snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
    } else {
      snprintf(num, sizeof(num), "%.17g", d);
    }
    return al_strdup(num);
  }
  case AL_CLI_BOOLEAN:
    if (!json_is_boolean(v)) {
      al_buf_printf(why, "parameter '%s' must be a boolean", p->name);
      return NULL;
    }
    return al_strdup(json_is_true(v) ? "true" : "false");
  }
  return NULL;
}

typedef struct vals_s {
  const al_cli_def_t *d;
  char **text; /* per parameter; NULL: not given */
} vals_t;

static const al_cli_param_t *param_of(const al_cli_def_t *d, const char *a,
                                      size_t n, size_t *idx) {
  return al__cli_param(d, a, n, idx);
}

/* Expands one template into out (al_malloc'd). seen_dashdash: "--" came
 * earlier in the argv. */
static int expand(const vals_t *vs, const char *t, bool seen_dashdash,
                  char **out, al_buf_t *why) {
  al_buf_t b;
  const char *p = t;
  bool first = true;

  al_buf_init(&b, (size_t)-1);
  for (;;) {
    const char *s;
    const char *e;
    const char *a;
    size_t len;
    const al_cli_param_t *prm;
    const char *val;
    size_t idx = 0;

    /* The loader checked every template: each placeholder is closed and
     * names a parameter. */
    if (al__cli_placeholder(p, &s, &e, &a, &len) != 1) {
      if (al_buf_append_str(&b, p) != 0) {
        goto nomem;
      }
      break;
    }
    if (al_buf_append(&b, p, (size_t)(s - p)) != 0) {
      goto nomem;
    }
    prm = param_of(vs->d, a, len, &idx);
    val = vs->text[idx];
    /* Option injection: a value at the start of an argument that looks
     * like an option. */
    if (first && s == t && val[0] == '-' && !prm->allow_dash &&
        !seen_dashdash) {
      al_buf_printf(why,
                    "parameter '%s' must not start with '-' (it would be "
                    "read as an option)",
                    prm->name);
      al_buf_free(&b);
      return AL_EINVAL;
    }
    first = false;
    if (al_buf_append_str(&b, val) != 0) {
      goto nomem;
    }
    p = e;
  }
  if (b.data == NULL && al_buf_append(&b, "", 0) != 0) {
    goto nomem;
  }
  if (b.data == NULL) {
    /* An empty template stays an empty argument. */
    *out = al_strdup("");
    return *out != NULL ? 0 : AL_ENOMEM;
  }
  *out = b.data;
  return 0;
nomem:
  al_buf_free(&b);
  return AL_ENOMEM;
}

static int push(char ***v, size_t *n, char *s) {
  char **nv = al_realloc(*v, (*n + 2) * sizeof(*nv));

  if (nv == NULL) {
    al_free(s);
    return AL_ENOMEM;
  }
  *v = nv;
  nv[(*n)++] = s;
  nv[*n] = NULL;
  return 0;
}

int al__cli_build_argv(const al_cli_def_t *d, const json_t *input,
                       char ***argv_out, al_buf_t *why) {
  vals_t vs;
  const char *key;
  json_t *v;
  char **argv = NULL;
  size_t n = 0;
  size_t i, j;
  bool dd = false;
  int rc = 0;

  *argv_out = NULL;
  if (!json_is_object(input)) {
    al_buf_printf(why, "the input must be a JSON object");
    return AL_EINVAL;
  }
  vs.d = d;
  vs.text = al_calloc(d->n_params + 1, sizeof(*vs.text));
  if (vs.text == NULL) {
    return AL_ENOMEM;
  }
  json_object_foreach((json_t *)input, key, v) {
    size_t idx = 0;

    if (param_of(d, key, strlen(key), &idx) == NULL) {
      al_buf_printf(why, "unknown parameter '%s'", key);
      rc = AL_EINVAL;
      goto out;
    }
    if (d->params[idx].optional &&
        (json_is_null(v) ||
         (d->params[idx].type == AL_CLI_BOOLEAN && json_is_false(v)))) {
      /* null means "not given"; an optional flag that is false too */
      continue;
    }
    vs.text[idx] = check_value(&d->params[idx], v, why);
    if (vs.text[idx] == NULL) {
      rc = why->len > 0 ? AL_EINVAL : AL_ENOMEM;
      goto out;
    }
  }
  for (i = 0; i < d->n_params; i++) {
    if (!d->params[i].optional && vs.text[i] == NULL) {
      al_buf_printf(why, "missing required parameter '%s'",
                    d->params[i].name);
      rc = AL_EINVAL;
      goto out;
    }
  }
  rc = push(&argv, &n, al_strdup(d->cmd));
  if (rc == 0 && argv[0] == NULL) {
    rc = AL_ENOMEM;
  }
  for (i = 0; rc == 0 && d->args[i] != NULL; i++) {
    char *s = NULL;

    rc = expand(&vs, d->args[i], dd, &s, why);
    if (rc == 0) {
      dd = dd || strcmp(s, "--") == 0;
      rc = push(&argv, &n, s);
    }
  }
  for (j = 0; rc == 0 && j < d->n_opt; j++) {
    size_t idx = 0;

    param_of(d, d->opt[j].param, strlen(d->opt[j].param), &idx);
    if (vs.text[idx] == NULL) {
      continue;
    }
    for (i = 0; rc == 0 && d->opt[j].args[i] != NULL; i++) {
      char *s = NULL;

      rc = expand(&vs, d->opt[j].args[i], dd, &s, why);
      if (rc == 0) {
        dd = dd || strcmp(s, "--") == 0;
        rc = push(&argv, &n, s);
      }
    }
  }
out:
  for (i = 0; i < d->n_params; i++) {
    al_free(vs.text[i]);
  }
  al_free(vs.text);
  if (rc != 0) {
    al__sandbox_argv_free(argv);
    return rc;
  }
  *argv_out = argv;
  return 0;
}

/* ---- the tool --------------------------------------------------------------- */

typedef struct clitool_s {
  al_tool_impl_t impl;
  const al_cli_def_t *def;
  uv_loop_t *loop;
  char *workspace;
  al_sandbox_t *sandbox;
  size_t display_max;
  uint64_t kill_grace_ms;
  uint64_t drain_ms;
} clitool_t;

typedef struct crun_s {
  clitool_t *tool;
  al_tool_call_t *call;
  al_spawn_t *sp;
} crun_t;

void al__clitool_options_init(al_clitool_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->display_max = 40000;
  o->kill_grace_ms = AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  o->drain_ms = AL_SPAWN_DEFAULT_DRAIN_MS;
}

static void on_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  crun_t *r = sp->data;
  al_tool_call_t *call = r->call;
  const clitool_t *t = r->tool;

  al_free(r);
  al__tool_complete_spawn(call, res, t->def->name, t->display_max,
                          t->def->timeout_ms);
}

/* An error result from a zero timer (never inside start). Takes msg. */
static int refuse(crun_t *r, char *msg) {
  uv_loop_t *loop = r->tool->loop;
  al_tool_call_t *call = r->call;

  al_free(r);
  return al__tool_fail_later(loop, call, msg);
}

static int cli_start(al_tool_call_t *call) {
  clitool_t *tool = call->impl->data;
  crun_t *r = al_calloc(1, sizeof(*r));
  al_spawn_options_t so;
  al_buf_t why;
  char **argv = NULL;
  int rc;

  if (r == NULL) {
    return AL_ENOMEM;
  }
  r->tool = tool;
  r->call = call;
  call->tool_data = r;
  al_buf_init(&why, 64 * 1024);
  rc = al__cli_build_argv(tool->def, call->input, &argv, &why);
  if (rc != 0) {
    al_buf_t m;

    al_buf_init(&m, (size_t)-1);
    al_buf_printf(&m, "Error: invalid arguments for tool '%s': %s",
                  tool->def->name,
                  why.data != NULL ? why.data : "out of memory");
    al_buf_free(&why);
    return refuse(r, m.data);
  }
  al_buf_free(&why);
  al__spawn_options_init(&so);
  so.argv = (const char *const *)argv;
  so.cwd = tool->workspace;
  so.env = (const char *const *)tool->def->env;
  so.output_max = tool->def->max_output;
  so.timeout_ms = tool->def->timeout_ms;
  so.kill_grace_ms = tool->kill_grace_ms;
  so.drain_ms = tool->drain_ms;
  so.on_done = on_done;
  so.data = r;
  so.sandbox = tool->sandbox;
  so.async_start = true; /* bwrap cold: planned off the loop */
  so.network = tool->def->network;
  rc = al__spawn_start(tool->loop, &so, &r->sp);
  al__sandbox_argv_free(argv);
  if (rc != 0) {
    al_buf_t m;

    al_buf_init(&m, (size_t)-1);
    al_buf_printf(&m, "Error: could not start %s: %s", tool->def->cmd,
                  al_strerror(rc));
    return refuse(r, m.data);
  }
  return 0;
}

static void cli_cancel(al_tool_call_t *call) {
  crun_t *r = call->tool_data;

  if (r != NULL && r->sp != NULL) {
    al__spawn_kill(r->sp);
  }
}

static bool cli_safe(const al_tool_impl_t *impl, const json_t *input) {
  (void)input;
  return ((const clitool_t *)impl->data)->def->concurrency_safe;
}

int al__clitool_new(const al_clitool_options_t *o, const al_cli_def_t *def,
                    al_tool_impl_t **out) {
  clitool_t *t;

  *out = NULL;
  if (o == NULL || o->loop == NULL || o->workspace == NULL || def == NULL) {
    return AL_EINVAL;
  }
  t = al_calloc(1, sizeof(*t));
  if (t == NULL) {
    return AL_ENOMEM;
  }
  t->workspace = al_strdup(o->workspace);
  if (t->workspace == NULL) {
    al_free(t);
    return AL_ENOMEM;
  }
  t->def = def;
  t->loop = o->loop;
  t->sandbox = o->sandbox;
  t->display_max = o->display_max ? o->display_max : 40000;
  t->kill_grace_ms = o->kill_grace_ms ? o->kill_grace_ms
                                      : AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  t->drain_ms = o->drain_ms ? o->drain_ms : AL_SPAWN_DEFAULT_DRAIN_MS;
  t->impl.name = def->name;
  t->impl.is_concurrency_safe = cli_safe;
  t->impl.start = cli_start;
  t->impl.cancel = cli_cancel;
  t->impl.data = t;
  *out = &t->impl;
  return 0;
}

void al__clitool_free(al_tool_impl_t *impl) {
  clitool_t *t;

  if (impl == NULL) {
    return;
  }
  t = impl->data;
  al_free(t->workspace);
  al_free(t);
}
