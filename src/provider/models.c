/* The models catalogue (agentloop/models.h): YAML through libyaml's
 * document API, so every diagnostic carries FILE:LINE:COL.
 *
 * A catalogue is two layers of entries, the user's overlay first and the
 * shipped file (models.yaml, compiled in as al__models_shipped) second.
 * Every field of an entry has a "set" bit: lookup fills each field from
 * the first matching entry that sets it. A file is accepted whole or not
 * at all: the first problem rejects it with one error line, so a typo in a
 * user's file is never half-applied. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "common/yamlnode.h"

#include "agentloop/models.h"
#include "common/common.h"
#include "provider/models_int.h"

#define MAX_FILE_BYTES (1024 * 1024)
#define MAX_ENTRIES 4096
#define MAX_PATTERN 256

enum {
  F_PROVIDER = 1 << 0,
  F_WINDOW = 1 << 1,
  F_MAX_OUT = 1 << 2,
  F_ECHO = 1 << 3,
  F_RFIELD = 1 << 4,
  F_THINK = 1 << 5,
  F_PRICES = 1 << 6,
  F_IMAGES = 1 << 7,
  F_EOL = 1 << 8,
};

typedef struct entry_s {
  char *match;
  unsigned set; /* F_* bits */
  al_model_info_t v;
} entry_t;

struct al_models_s {
  entry_t *e; /* user entries first, then shipped */
  size_t n;
};

typedef struct ctx_s {
  yaml_document_t *doc;
  const char *file;
  char *error; /* first error, al_malloc'd */
  entry_t *e;
  size_t n;
} ctx_t;

static void err(ctx_t *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void err(ctx_t *c, const yaml_node_t *n, const char *fmt, ...) {
  char msg[512];
  char line[1024];
  va_list ap;

  if (c->error != NULL) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(line, sizeof(line), "%s:%d:%d: %s", c->file,
           n != NULL ? (int)n->start_mark.line + 1 : 1,
           n != NULL ? (int)n->start_mark.column + 1 : 1, msg);
  c->error = al_strdup(line);
  if (c->error == NULL) {
    c->error = (char *)""; /* marks "failed" even without memory */
  }
}

static yaml_node_t *node(ctx_t *c, int id) {
  return yaml_document_get_node(c->doc, id);
}

static bool get_string(ctx_t *c, yaml_node_t *n, const char *key, char *out,
                       size_t size) {
  const char *why = al_yaml_string_problem(n);

  if (why != NULL) {
    err(c, n, "'%s' %s", key, why);
    return false;
  }
  if (n->data.scalar.length >= size) {
    err(c, n, "'%s' is longer than %zu bytes", key, size - 1);
    return false;
  }
  memcpy(out, al_yaml_scalar(n), n->data.scalar.length + 1);
  return true;
}

static bool get_bool(ctx_t *c, yaml_node_t *n, const char *key, bool *out) {
  int v = al_yaml_bool(n);

  if (v < 0) {
    err(c, n, "'%s' must be true or false", key);
    return false;
  }
  *out = v == 1;
  return true;
}

/* A plain scalar that is a whole finite number in [min, max]. */
static bool get_number(ctx_t *c, yaml_node_t *n, const char *key, double min,
                       double max, bool integer, double *out) {
  char *end;
  double d;

  if (!al_yaml_is_scalar(n) || !al_yaml_plain(n) || n->data.scalar.length == 0) {
    err(c, n, "'%s' must be a number", key);
    return false;
  }
  errno = 0;
  d = strtod(al_yaml_scalar(n), &end);
  if (*end != '\0' || errno != 0 || !isfinite(d)) {
    err(c, n, "'%s' must be a number, not '%s'", key, al_yaml_scalar(n));
    return false;
  }
  if (d < min || d > max) {
    err(c, n, "'%s' must be between %.0f and %.0f", key, min, max);
    return false;
  }
  if (integer && d != (double)(int64_t)d) {
    err(c, n, "'%s' must be a whole number", key);
    return false;
  }
  *out = d;
  return true;
}

/* Walks a mapping: rejects non-scalar and duplicate keys, calls `field`
 * for each pair. */
static bool each_pair(ctx_t *c, yaml_node_t *m, const char *what,
                      bool (*field)(ctx_t *, entry_t *, const char *,
                                    yaml_node_t *),
                      entry_t *e) {
  yaml_node_pair_t *p;
  yaml_node_pair_t *q;

  if (m == NULL || m->type != YAML_MAPPING_NODE) {
    err(c, m, "%s must be a mapping", what);
    return false;
  }
  for (p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
    yaml_node_t *k = node(c, p->key);

    if (!al_yaml_is_scalar(k)) {
      err(c, k, "keys of %s must be strings", what);
      return false;
    }
    for (q = m->data.mapping.pairs.start; q < p; q++) {
      yaml_node_t *qk = node(c, q->key);

      if (al_yaml_is_scalar(qk) && strcmp(al_yaml_scalar(qk), al_yaml_scalar(k)) == 0) {
        err(c, k, "duplicate key '%s'", al_yaml_scalar(k));
        return false;
      }
    }
    if (!field(c, e, al_yaml_scalar(k), node(c, p->value))) {
      if (c->error == NULL) {
        err(c, k, "unknown key '%s' in %s", al_yaml_scalar(k), what);
      }
      return false;
    }
  }
  return true;
}

static bool price_field(ctx_t *c, entry_t *e, const char *k, yaml_node_t *v) {
  double *slot = strcmp(k, "input") == 0         ? &e->v.prices.input
                 : strcmp(k, "output") == 0      ? &e->v.prices.output
                 : strcmp(k, "cache_read") == 0  ? &e->v.prices.cache_read
                 : strcmp(k, "cache_write") == 0 ? &e->v.prices.cache_write
                                                 : NULL;

  if (slot == NULL) {
    return false;
  }
  return get_number(c, v, k, 0, 1e6, false, slot);
}

static bool entry_field(ctx_t *c, entry_t *e, const char *k, yaml_node_t *v) {
  double d;

  if (strcmp(k, "match") == 0) {
    char buf[MAX_PATTERN];

    if (!get_string(c, v, k, buf, sizeof(buf))) {
      return false;
    }
    if (buf[0] == '\0') {
      err(c, v, "'match' must not be empty");
      return false;
    }
    e->match = al_strdup(buf);
    if (e->match == NULL) {
      err(c, v, "out of memory");
      return false;
    }
    return true;
  }
  if (strcmp(k, "provider") == 0) {
    if (!get_string(c, v, k, e->v.provider, sizeof(e->v.provider))) {
      return false;
    }
    if (strcmp(e->v.provider, "anthropic") != 0 &&
        strcmp(e->v.provider, "openai") != 0) {
      err(c, v, "'provider' must be anthropic or openai, not '%s'",
          e->v.provider);
      return false;
    }
    e->set |= F_PROVIDER;
    return true;
  }
  if (strcmp(k, "context_window") == 0 || strcmp(k, "max_output_tokens") == 0) {
    bool win = k[0] == 'c';

    /* 1024 tokens is below any real model and keeps the budget math away
     * from zero and negative thresholds. */
    if (!get_number(c, v, k, win ? 1024 : 1, 1e9, true, &d)) {
      return false;
    }
    if (win) {
      e->v.context_window = (int64_t)d;
      e->set |= F_WINDOW;
    } else {
      e->v.max_output_tokens = (int64_t)d;
      e->set |= F_MAX_OUT;
    }
    return true;
  }
  if (strcmp(k, "echo_reasoning") == 0) {
    e->set |= F_ECHO;
    return get_bool(c, v, k, &e->v.echo_reasoning);
  }
  if (strcmp(k, "images") == 0) {
    bool yes = true;

    e->set |= F_IMAGES;
    if (!get_bool(c, v, k, &yes)) {
      return false;
    }
    e->v.no_images = !yes;
    return true;
  }
  if (strcmp(k, "think_tags") == 0) {
    e->set |= F_THINK;
    return get_bool(c, v, k, &e->v.think_tags);
  }
  if (strcmp(k, "reasoning_field") == 0) {
    e->set |= F_RFIELD;
    return get_string(c, v, k, e->v.reasoning_field,
                      sizeof(e->v.reasoning_field));
  }
  if (strcmp(k, "end_of_life") == 0) {
    char *eol = e->v.end_of_life;
    int y, mo, dd;
    char tail;

    if (!get_string(c, v, k, eol, sizeof(e->v.end_of_life))) {
      return false;
    }
    if (strlen(eol) != 10 ||
        sscanf(eol, "%4d-%2d-%2d%c", &y, &mo, &dd, &tail) != 3 || mo < 1 ||
        mo > 12 || dd < 1 || dd > 31) {
      err(c, v, "'end_of_life' must be a date YYYY-MM-DD, not '%s'", eol);
      return false;
    }
    e->set |= F_EOL;
    return true;
  }
  if (strcmp(k, "replacement") == 0) {
    /* Goes with end_of_life: taken from the entry that sets that. */
    return get_string(c, v, k, e->v.replacement, sizeof(e->v.replacement));
  }
  if (strcmp(k, "prices") == 0) {
    e->set |= F_PRICES;
    e->v.has_prices = true;
    return each_pair(c, v, "'prices'", price_field, e);
  }
  return false;
}

static bool parse_entry(ctx_t *c, yaml_node_t *n) {
  entry_t *e = &c->e[c->n];

  memset(e, 0, sizeof(*e));
  c->n++; /* counted now so a failure frees e->match */
  if (!each_pair(c, n, "a model entry", entry_field, e)) {
    return false;
  }
  if (e->match == NULL) {
    err(c, n, "a model entry needs 'match' (a glob on the model name)");
    return false;
  }
  return true;
}

static void entries_free(entry_t *e, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    al_free(e[i].match);
  }
  al_free(e);
}

/* Parses one file into c->e / c->n. Returns false with c->error set. */
static bool parse_text(ctx_t *c, const char *yaml, size_t len) {
  al_yaml_error_t ye;
  yaml_document_t doc;
  yaml_node_t *root;
  yaml_node_pair_t *p;
  yaml_node_t *list = NULL;
  yaml_node_item_t *it;
  bool ok = false;

  if (al_yaml_load(&doc, yaml, len, &ye) != 0) {
    yaml_node_t fake;

    memset(&fake, 0, sizeof(fake));
    fake.start_mark.line = (size_t)ye.line - 1;
    fake.start_mark.column = (size_t)ye.col - 1;
    err(c, &fake, "YAML: %s", ye.problem);
    return false;
  }
  c->doc = &doc;
  root = yaml_document_get_root_node(&doc);
  if (root == NULL) {
    ok = true; /* an empty file adds nothing */
    goto out;
  }
  if (root->type != YAML_MAPPING_NODE) {
    err(c, root, "the file must be a mapping with a 'models' list");
    goto out;
  }
  for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = node(c, p->key);

    if (!al_yaml_is_scalar(k) || strcmp(al_yaml_scalar(k), "models") != 0) {
      err(c, k, "unknown top-level key '%s' (expected 'models')",
          al_yaml_is_scalar(k) ? al_yaml_scalar(k) : "?");
      goto out;
    }
    if (list != NULL) {
      err(c, k, "duplicate key 'models'");
      goto out;
    }
    list = node(c, p->value);
  }
  if (list == NULL) {
    ok = true;
    goto out;
  }
  if (list->type != YAML_SEQUENCE_NODE) {
    err(c, list, "'models' must be a list of entries");
    goto out;
  }
  {
    size_t cnt = (size_t)(list->data.sequence.items.top -
                          list->data.sequence.items.start);

    if (cnt > MAX_ENTRIES) {
      err(c, list, "more than %d model entries", MAX_ENTRIES);
      goto out;
    }
    c->e = al_calloc(cnt + 1, sizeof(*c->e));
    if (c->e == NULL) {
      err(c, list, "out of memory");
      goto out;
    }
  }
  for (it = list->data.sequence.items.start; it < list->data.sequence.items.top;
       it++) {
    if (!parse_entry(c, node(c, *it))) {
      goto out;
    }
  }
  ok = true;
out:
  yaml_document_delete(&doc);
  c->doc = NULL;
  return ok;
}

static void set_error(char **error, char *msg) {
  if (error != NULL) {
    *error = msg;
  } else {
    al_free(msg);
  }
}

int al_models_parse(al_models_t **out, const char *yaml, size_t len,
                    const char *name, char **error) {
  ctx_t user;
  ctx_t ship;
  al_models_t *m;

  *out = NULL;
  if (error != NULL) {
    *error = NULL;
  }
  memset(&user, 0, sizeof(user));
  memset(&ship, 0, sizeof(ship));
  user.file = name != NULL ? name : "models.yaml";
  ship.file = "<shipped models.yaml>";
  if ((yaml != NULL && !parse_text(&user, yaml, len)) ||
      !parse_text(&ship, al__models_shipped, al__models_shipped_len)) {
    ctx_t *bad = user.error != NULL ? &user : &ship;
    /* An empty message is the static out-of-memory marker (never freed). */
    bool oom = bad->error[0] == '\0';

    if (!oom) {
      set_error(error, bad->error);
    }
    entries_free(user.e, user.n);
    entries_free(ship.e, ship.n);
    return oom ? AL_ENOMEM : AL_ECONFIG;
  }
  m = al_calloc(1, sizeof(*m));
  if (m == NULL || (m->e = al_calloc(user.n + ship.n + 1, sizeof(*m->e))) ==
                       NULL) {
    al_free(m);
    entries_free(user.e, user.n);
    entries_free(ship.e, ship.n);
    return AL_ENOMEM;
  }
  if (user.n > 0) {
    memcpy(m->e, user.e, user.n * sizeof(*m->e));
  }
  if (ship.n > 0) {
    memcpy(m->e + user.n, ship.e, ship.n * sizeof(*m->e));
  }
  m->n = user.n + ship.n;
  al_free(user.e);
  al_free(ship.e);
  *out = m;
  return 0;
}

const char *al__models_user_path(char *buf, size_t size) {
  const char *x = getenv("XDG_CONFIG_HOME");
  const char *home = getenv("HOME");

  if (x != NULL && x[0] == '/') {
    snprintf(buf, size, "%s/agentloop/models.yaml", x);
  } else if (home != NULL && home[0] == '/') {
    snprintf(buf, size, "%s/.config/agentloop/models.yaml", home);
  } else {
    return NULL;
  }
  return buf;
}

/* Reads a whole regular file of at most MAX_FILE_BYTES (blocking: the
 * caller is at start-up or off the loop). */
static int read_file(const char *path, char **data, size_t *len,
                     char **error) {
  struct stat st;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  char msg[1200];

  if (fd < 0) {
    return -errno;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > MAX_FILE_BYTES) {
    close(fd);
    snprintf(msg, sizeof(msg), "%s:1:1: not a regular file of at most %d bytes",
             path, MAX_FILE_BYTES);
    set_error(error, al_strdup(msg));
    return AL_ECONFIG;
  }
  *data = al_malloc((size_t)st.st_size + 1);
  if (*data == NULL) {
    close(fd);
    return AL_ENOMEM;
  }
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, *data + got, (size_t)st.st_size - got);

    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      int e = r < 0 ? -errno : AL_EOF;

      close(fd);
      al_free(*data);
      *data = NULL;
      return e;
    }
    got += (size_t)r;
  }
  close(fd);
  (*data)[got] = '\0';
  *len = got;
  return 0;
}

int al_models_load(al_models_t **out, const char *path, char **error) {
  char def[4200];
  char *text = NULL;
  size_t len = 0;
  bool optional = path == NULL;
  int rc;

  *out = NULL;
  if (error != NULL) {
    *error = NULL;
  }
  if (path == NULL) {
    path = al__models_user_path(def, sizeof(def));
  }
  if (path != NULL && path[0] != '\0') {
    rc = read_file(path, &text, &len, error);
    if (optional && (rc == UV_ENOENT || rc == UV_ENOTDIR || rc == UV_EACCES)) {
      /* No user file (or one this process may not read: a daemon under
       * another uid): the shipped catalogue alone. */
      if (rc == UV_EACCES) {
        al_log(AL_LOG_WARN, "%s: %s; using the shipped models catalogue",
               path, al_strerror(rc));
      }
      path = NULL;
    } else if (rc != 0) {
      return rc;
    }
  }
  rc = al_models_parse(out, text, len, path, error);
  al_free(text);
  return rc;
}

void al_models_free(al_models_t *m) {
  if (m == NULL) {
    return;
  }
  entries_free(m->e, m->n);
  al_free(m);
}

void al_models_lookup(const al_models_t *m, const char *model,
                      const char *provider, al_model_info_t *out) {
  unsigned have = 0;
  size_t i;
  bool claude;

  memset(out, 0, sizeof(*out));
  for (i = 0; m != NULL && model != NULL && i < m->n; i++) {
    const entry_t *e = &m->e[i];
    unsigned take;

    if (fnmatch(e->match, model, FNM_CASEFOLD) != 0) {
      continue;
    }
    out->known = true;
    take = e->set & ~have;
    if (take & F_PROVIDER) {
      memcpy(out->provider, e->v.provider, sizeof(out->provider));
    }
    if (take & F_WINDOW) {
      out->context_window = e->v.context_window;
    }
    if (take & F_MAX_OUT) {
      out->max_output_tokens = e->v.max_output_tokens;
    }
    if (take & F_ECHO) {
      out->echo_reasoning = e->v.echo_reasoning;
    }
    if (take & F_RFIELD) {
      memcpy(out->reasoning_field, e->v.reasoning_field,
             sizeof(out->reasoning_field));
    }
    if (take & F_THINK) {
      out->think_tags = e->v.think_tags;
    }
    if (take & F_IMAGES) {
      out->no_images = e->v.no_images;
    }
    if (take & F_EOL) {
      memcpy(out->end_of_life, e->v.end_of_life, sizeof(out->end_of_life));
      memcpy(out->replacement, e->v.replacement, sizeof(out->replacement));
    }
    if (take & F_PRICES) {
      out->has_prices = true;
      out->prices.input = e->v.prices.input;
      out->prices.output = e->v.prices.output;
      out->prices.cache_read = e->v.prices.cache_read;
      out->prices.cache_write = e->v.prices.cache_write;
    }
    have |= e->set;
  }
  if (out->context_window <= 0) {
    /* SPEC §9's fallback. */
    claude = (provider != NULL && strcmp(provider, "anthropic") == 0) ||
             (model != NULL && strcasestr(model, "claude") != NULL);
    out->context_window = claude ? AL_MODELS_FALLBACK_CLAUDE
                                 : AL_MODELS_FALLBACK_OTHER;
  }
}

double al_model_cost_usd(const al_model_info_t *mi, uint64_t input_tokens,
                         uint64_t output_tokens, uint64_t cache_read_tokens,
                         uint64_t cache_write_tokens) {
  if (mi == NULL || !mi->has_prices) {
    return -1;
  }
  return ((double)input_tokens * mi->prices.input +
          (double)output_tokens * mi->prices.output +
          (double)cache_read_tokens * mi->prices.cache_read +
          (double)cache_write_tokens * mi->prices.cache_write) /
         1e6;
}

bool al_model_deprecation(const al_model_info_t *mi, const char *model,
                          char *buf, size_t n) {
  if (mi == NULL || mi->end_of_life[0] == '\0') {
    return false;
  }
  snprintf(buf, n,
           "model %s is deprecated: its end of life is %s%s%s (set another "
           "with --model, AGENTLOOP_MODEL or 'model:' in config.yaml)",
           model != NULL ? model : "?", mi->end_of_life,
           mi->replacement[0] != '\0' ? "; use " : "", mi->replacement);
  return true;
}
