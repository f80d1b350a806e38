/* The jobs file of `agentloop batch run` (docs/batch.md): one JSON object
 * a line, read by jansson. Every error names FILE:LINE and, once it is
 * known, the job's id; the file stops at its first bad line (a half-read
 * batch would run the wrong set). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "client/batch.h"
#include "common/common.h"
#include "session/session.h"

static int fail(char *err, size_t errlen, const char *name, size_t line,
                const char *id, const char *fmt, ...) {
  char msg[400];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (id != NULL) {
    snprintf(err, errlen, "%s:%zu: job %s: %s", name, line, id, msg);
  } else {
    snprintf(err, errlen, "%s:%zu: %s", name, line, msg);
  }
  return AL_EINVAL;
}

static void job_free(al_batch_job_t *j) {
  size_t i;

  al_free(j->prompt);
  al_free(j->ws_src);
  al_free(j->commit);
  al_free(j->model);
  al_free(j->provider);
  al_free(j->base_url);
  al_free(j->agent);
  for (i = 0; j->tools != NULL && j->tools[i] != NULL; i++) {
    al_free(j->tools[i]);
  }
  al_free(j->tools);
}

void al__batch_say(const char *fmt, ...) {
  va_list ap;

  fputs("agentloop batch: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int al__batch_read_file(const char *path, size_t max, char **out,
                        size_t *len) {
  FILE *f = fopen(path, "rb");
  al_buf_t b;
  char chunk[65536];
  size_t n;
  int rc = 0;

  *out = NULL;
  *len = 0;
  if (f == NULL) {
    return -errno;
  }
  al_buf_init(&b, max);
  while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    rc = al_buf_append(&b, chunk, n);
  }
  if (rc == 0 && ferror(f)) {
    rc = UV_EIO;
  }
  fclose(f);
  if (rc != 0) {
    al_buf_free(&b);
    return rc;
  }
  *out = b.data != NULL ? b.data : al_strdup("");
  *len = b.len;
  return *out != NULL ? 0 : AL_ENOMEM;
}

void al__batch_jobs_free(al_batch_job_t *jobs, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    job_free(&jobs[i]);
  }
  al_free(jobs);
}

/* An optional string field: *out NULL when absent; false when not a
 * non-empty string. */
static bool opt_str(const json_t *o, const char *key, char **out) {
  const json_t *v = json_object_get(o, key);

  *out = NULL;
  if (v == NULL) {
    return true;
  }
  if (!json_is_string(v) || json_string_length(v) == 0) {
    return false;
  }
  *out = al_strdup(json_string_value(v));
  return *out != NULL;
}

static int parse_workspace(const json_t *w, al_batch_job_t *j, char *why,
                           size_t whylen) {
  const char *k;
  const json_t *v;

  if (json_is_string(w) && json_string_length(w) > 0) {
    j->mode = AL_BATCH_WS_INPLACE;
    j->ws_src = al_strdup(json_string_value(w));
    return 0;
  }
  if (!json_is_object(w)) {
    snprintf(why, whylen, "workspace: a directory, {\"copy\": DIR} or "
                          "{\"git\": REPO, \"commit\": REV}");
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)w, k, v) {
    if (strcmp(k, "copy") != 0 && strcmp(k, "git") != 0 &&
        strcmp(k, "commit") != 0) {
      snprintf(why, whylen, "workspace: unknown key '%.64s' (copy, git, "
                            "commit)", k);
      return AL_EINVAL;
    }
    if (!json_is_string(v) || json_string_length(v) == 0) {
      snprintf(why, whylen, "workspace.%s: a non-empty string", k);
      return AL_EINVAL;
    }
  }
  if (json_object_get(w, "copy") != NULL) {
    if (json_object_get(w, "git") != NULL ||
        json_object_get(w, "commit") != NULL) {
      snprintf(why, whylen, "workspace: copy or git, not both");
      return AL_EINVAL;
    }
    j->mode = AL_BATCH_WS_COPY;
    j->ws_src = al_strdup(json_string_value(json_object_get(w, "copy")));
    return 0;
  }
  if (json_object_get(w, "git") == NULL ||
      json_object_get(w, "commit") == NULL) {
    snprintf(why, whylen, "workspace: {\"git\": REPO, \"commit\": REV} "
                          "needs both");
    return AL_EINVAL;
  }
  j->mode = AL_BATCH_WS_GIT;
  j->ws_src = al_strdup(json_string_value(json_object_get(w, "git")));
  j->commit = al_strdup(json_string_value(json_object_get(w, "commit")));
  if (j->commit[0] == '-') {
    snprintf(why, whylen, "workspace.commit: not an option");
    return AL_EINVAL;
  }
  return 0;
}

static int parse_limits(const json_t *l, al_batch_job_t *j, char *why,
                        size_t whylen) {
  const char *k;
  const json_t *v;

  if (!json_is_object(l)) {
    snprintf(why, whylen, "limits: an object");
    return AL_EINVAL;
  }
  json_object_foreach((json_t *)l, k, v) {
    char val[64];

    if (strcmp(k, "timeout_s") == 0) {
      /* The whole job, as run --timeout: seconds, fractions allowed. */
      double t = json_is_number(v) ? json_number_value(v) : -1;

      if (!(t > 0 && t <= 30 * 86400.0)) {
        snprintf(why, whylen, "limits.timeout_s: seconds, more than 0");
        return AL_EINVAL;
      }
      j->timeout_ms = (uint64_t)(t * 1000.0 + 0.5);
      if (j->timeout_ms == 0) {
        j->timeout_ms = 1;
      }
      continue;
    }
    if (json_is_integer(v)) {
      snprintf(val, sizeof(val), "%lld", (long long)json_integer_value(v));
    } else if (json_is_string(v)) {
      snprintf(val, sizeof(val), "%.60s", json_string_value(v));
    } else {
      snprintf(why, whylen, "limits.%.64s: a number or a string", k);
      return AL_EINVAL;
    }
    if (strcmp(k, "max_turns") == 0 || strcmp(k, "max_tokens") == 0) {
      json_int_t n = json_is_integer(v) ? json_integer_value(v) : -1;

      if (n <= 0 || n > 1000000000) {
        snprintf(why, whylen, "limits.%s: a positive integer", k);
        return AL_EINVAL;
      }
      if (k[4] == 't' && k[5] == 'u') {
        j->max_turns = (uint32_t)n;
      } else {
        j->max_tokens = (int64_t)n;
      }
      continue;
    }
    if (al_limits_set(&j->limits, k, val) != 0) {
      snprintf(why, whylen, "limits.%.64s: %s", k,
               al_limits_expect(k) != NULL ? al_limits_expect(k)
                                           : "no such limit");
      return AL_EINVAL;
    }
  }
  return 0;
}

static int parse_tools(const json_t *t, al_batch_job_t *j, char *why,
                       size_t whylen) {
  size_t i, n = json_array_size(t);
  const json_t *v;

  if (!json_is_array(t) || n > 64) {
    snprintf(why, whylen, "tools: an array of at most 64 tool rules");
    return AL_EINVAL;
  }
  j->tools = al_calloc(n + 1, sizeof(*j->tools));
  if (j->tools == NULL) {
    return AL_ENOMEM;
  }
  json_array_foreach(t, i, v) {
    if (!json_is_string(v) || json_string_length(v) == 0) {
      snprintf(why, whylen, "tools[%zu]: a tool name or rule", i);
      return AL_EINVAL;
    }
    j->tools[i] = al_strdup(json_string_value(v));
  }
  return 0;
}

static const char *const k_keys[] = {"id",       "prompt",   "workspace",
                                     "model",    "provider", "base_url",
                                     "limits",   "agent",    "tools",
                                     NULL};

static int parse_job(const json_t *o, al_batch_job_t *j, const char **id,
                     char *why, size_t whylen) {
  const char *k;
  const json_t *v;
  const char *s;
  size_t i;

  *id = NULL;
  if (!json_is_object(o)) {
    snprintf(why, whylen, "not a JSON object");
    return AL_EINVAL;
  }
  s = json_string_value(json_object_get(o, "id"));
  if (s == NULL) {
    snprintf(why, whylen, "no \"id\" (a string)");
    return AL_EINVAL;
  }
  if (!al__session_id_valid(s)) {
    snprintf(why, whylen, "id '%.80s': 1 to 63 of A-Z a-z 0-9 _ -", s);
    return AL_EINVAL;
  }
  snprintf(j->id, sizeof(j->id), "%s", s);
  *id = j->id;
  json_object_foreach((json_t *)o, k, v) {
    for (i = 0; k_keys[i] != NULL && strcmp(k_keys[i], k) != 0; i++) {
    }
    if (k_keys[i] == NULL) {
      snprintf(why, whylen, "unknown field '%.64s'", k);
      return AL_EINVAL;
    }
  }
  s = json_string_value(json_object_get(o, "prompt"));
  if (s == NULL || *s == '\0') {
    snprintf(why, whylen, "no \"prompt\" (a non-empty string)");
    return AL_EINVAL;
  }
  j->prompt = al_strdup(s);
  if (json_object_get(o, "workspace") == NULL) {
    snprintf(why, whylen, "no \"workspace\"");
    return AL_EINVAL;
  }
  if (parse_workspace(json_object_get(o, "workspace"), j, why, whylen) !=
      0) {
    return AL_EINVAL;
  }
  if (!opt_str(o, "model", &j->model) ||
      !opt_str(o, "provider", &j->provider) ||
      !opt_str(o, "base_url", &j->base_url)) {
    snprintf(why, whylen, "model, provider and base_url: non-empty strings");
    return AL_EINVAL;
  }
  if (!opt_str(o, "agent", &j->agent)) {
    snprintf(why, whylen, "agent: the name of an agent definition");
    return AL_EINVAL;
  }
  if (json_object_get(o, "limits") != NULL &&
      parse_limits(json_object_get(o, "limits"), j, why, whylen) != 0) {
    return AL_EINVAL;
  }
  if (json_object_get(o, "tools") != NULL &&
      parse_tools(json_object_get(o, "tools"), j, why, whylen) != 0) {
    return AL_EINVAL;
  }
  return 0;
}

int al__batch_jobs_parse(const char *name, const char *text, size_t len,
                         al_batch_job_t **jobs, size_t *n, char *err,
                         size_t errlen) {
  al_batch_job_t *v = NULL;
  size_t nv = 0, cap = 0, line = 0;
  const char *p = text, *end = text + len;
  json_t *seen = json_object();
  int rc = 0;

  *jobs = NULL;
  *n = 0;
  if (seen == NULL) {
    return AL_ENOMEM;
  }
  while (p < end && rc == 0) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t ll = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
    json_error_t je;
    json_t *o;
    const char *id = NULL;
    char why[300];

    line++;
    if (ll > AL_BATCH_LINE_MAX) {
      rc = fail(err, errlen, name, line, NULL,
                "line longer than %zu bytes", AL_BATCH_LINE_MAX);
      break;
    }
    if (strspn(p, " \t\r") >= ll) {
      p += ll + 1;
      continue;
    }
    if (nv == AL_BATCH_JOBS_MAX) {
      rc = fail(err, errlen, name, line, NULL, "more than %zu jobs",
                AL_BATCH_JOBS_MAX);
      break;
    }
    o = json_loadb(p, ll, JSON_REJECT_DUPLICATES, &je);
    if (o == NULL) {
      rc = fail(err, errlen, name, line, NULL, "not JSON: %s", je.text);
      break;
    }
    if (nv == cap) {
      size_t nc = cap != 0 ? cap * 2 : 16;
      al_batch_job_t *g = al_realloc(v, nc * sizeof(*v));

      if (g == NULL) {
        json_decref(o);
        rc = AL_ENOMEM;
        snprintf(err, errlen, "out of memory");
        break;
      }
      v = g;
      cap = nc;
    }
    memset(&v[nv], 0, sizeof(v[nv]));
    v[nv].line = line;
    nv++;
    if (parse_job(o, &v[nv - 1], &id, why, sizeof(why)) != 0) {
      rc = fail(err, errlen, name, line, id, "%s", why);
    } else if (json_object_get(seen, id) != NULL) {
      rc = fail(err, errlen, name, line, id, "the id of line %lld again",
                (long long)json_integer_value(json_object_get(seen, id)));
    } else {
      json_object_set_new(seen, id, json_integer((json_int_t)line));
    }
    json_decref(o);
    p += ll + 1;
  }
  json_decref(seen);
  if (rc == 0 && nv == 0) {
    rc = fail(err, errlen, name, line > 0 ? line : 1, NULL, "no jobs");
  }
  if (rc != 0) {
    al__batch_jobs_free(v, nv);
    return rc;
  }
  *jobs = v;
  *n = nv;
  return 0;
}
