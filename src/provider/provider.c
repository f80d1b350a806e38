/* Provider vtable helpers shared by anthropic.c and openai.c: options
 * defaults, request/error lifetimes, header building, and the typed
 * classification of HTTP error bodies (SPEC §3: authentication,
 * permission, not_found, invalid_request, rate_limit, overloaded (529),
 * api_error (5xx), timeout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider/provider.h"
#include "provider/provider_int.h"

void al_provider_options_init(al_provider_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->max_tokens = 4096;
  o->cache_control = true;
  o->stream = true;
  o->auth = AL_AUTH_X_API_KEY;
  o->anthropic_version = "2023-06-01";
  o->path_prefix = "/v1";
}

void al_provider_request_free(al_provider_request_t *r) {
  size_t i;

  for (i = 0; i < r->nheaders; i++) {
    al_free(r->headers[i].name);
    al_free(r->headers[i].value);
  }
  al_free(r->headers);
  al_free(r->path);
  al_free(r->body);
  memset(r, 0, sizeof(*r));
}

void al_provider_error_free(al_provider_error_t *e) {
  al_free(e->type);
  al_free(e->message);
  if (e->body != NULL) {
    json_decref(e->body);
  }
  memset(e, 0, sizeof(*e));
}

const char *al_provider_default_base_url(const al_provider_t *p) {
  return p->kind != AL_PROVIDER_ANTHROPIC ? "https://api.openai.com/v1"
                                          : "https://api.anthropic.com";
}

const al_provider_t *al_provider_by_name(const char *name) {
  if (name == NULL) {
    return NULL;
  }
  if (strcmp(name, "anthropic") == 0) {
    return &al_provider_anthropic;
  }
  if (strcmp(name, "openai") == 0) {
    return &al_provider_openai;
  }
  if (strcmp(name, "openai-responses") == 0) {
    return &al_provider_openai_responses;
  }
  return NULL;
}

int al_provider_build_request(const al_provider_t *p, const json_t *history,
                              const al_provider_options_t *o,
                              al_provider_request_t *out) {
  memset(out, 0, sizeof(*out));
  if (p == NULL || o == NULL) {
    return AL_EINVAL;
  }
  return p->build_request(history, o, out);
}

int al_provider_http_error(const al_provider_t *p, int status,
                           const char *body, size_t len,
                           al_provider_error_t *out) {
  return p->http_error(status, body, len, out);
}

int al__provider_add_header(al_provider_request_t *r, const char *name,
                            const char *value) {
  al_provider_header_t *h;

  h = al_realloc(r->headers, (r->nheaders + 1) * sizeof(*h));
  if (h == NULL) {
    return AL_ENOMEM;
  }
  r->headers = h;
  h[r->nheaders].name = al_strdup(name);
  h[r->nheaders].value = al_strdup(value);
  if (h[r->nheaders].name == NULL || h[r->nheaders].value == NULL) {
    al_free(h[r->nheaders].name);
    al_free(h[r->nheaders].value);
    return AL_ENOMEM;
  }
  r->nheaders++;
  return 0;
}

int al__provider_finish_request(al_provider_request_t *r, const char *prefix,
                                const char *suffix, json_t *body) {
  size_t n;

  r->method = "POST";
  n = strlen(prefix) + strlen(suffix) + 1;
  r->path = al_malloc(n);
  if (r->path == NULL) {
    return AL_ENOMEM;
  }
  snprintf(r->path, n, "%s%s", prefix, suffix);
  r->body = json_dumps(body, JSON_COMPACT);
  if (r->body == NULL) {
    return AL_ENOMEM;
  }
  r->body_len = strlen(r->body);
  return 0;
}

static const char *const class_names[] = {
    "unknown",    "invalid_request", "authentication", "permission",
    "not_found",  "rate_limit",      "overloaded",     "api_error",
    "timeout",    "request_too_large"};

const char *al_perr_class_name(al_perr_class_t c) {
  if ((unsigned)c >= AL_ARRAY_SIZE(class_names)) {
    return "unknown";
  }
  return class_names[c];
}

al_perr_class_t al__provider_class_from_type(const char *type) {
  static const struct {
    const char *type;
    al_perr_class_t cls;
  } map[] = {
      {"invalid_request_error", AL_PCLASS_INVALID_REQUEST},
      {"authentication_error", AL_PCLASS_AUTHENTICATION},
      {"billing_error", AL_PCLASS_PERMISSION},
      {"permission_error", AL_PCLASS_PERMISSION},
      {"not_found_error", AL_PCLASS_NOT_FOUND},
      {"request_too_large", AL_PCLASS_TOO_LARGE},
      {"rate_limit_error", AL_PCLASS_RATE_LIMIT},
      {"overloaded_error", AL_PCLASS_OVERLOADED},
      {"api_error", AL_PCLASS_API_ERROR},
      {"timeout_error", AL_PCLASS_TIMEOUT},
      {"server_error", AL_PCLASS_API_ERROR},
      {"insufficient_quota", AL_PCLASS_RATE_LIMIT},
  };
  size_t i;

  if (type == NULL) {
    return AL_PCLASS_UNKNOWN;
  }
  for (i = 0; i < AL_ARRAY_SIZE(map); i++) {
    if (strcmp(type, map[i].type) == 0) {
      return map[i].cls;
    }
  }
  return AL_PCLASS_UNKNOWN;
}

al_perr_class_t al__provider_class_from_status(int status) {
  switch (status) {
  case 400:
  case 422:
    return AL_PCLASS_INVALID_REQUEST;
  case 401:
    return AL_PCLASS_AUTHENTICATION;
  case 402:
  case 403:
    return AL_PCLASS_PERMISSION;
  case 404:
    return AL_PCLASS_NOT_FOUND;
  case 408:
  case 504:
    return AL_PCLASS_TIMEOUT;
  case 413:
    return AL_PCLASS_TOO_LARGE;
  case 429:
    return AL_PCLASS_RATE_LIMIT;
  case 529:
    return AL_PCLASS_OVERLOADED;
  default:
    return status >= 500 ? AL_PCLASS_API_ERROR : AL_PCLASS_UNKNOWN;
  }
}

/* Shared by both providers: both put {"error":{"type","message"}} in the
 * body (Anthropic adds "type":"error" and request_id at the top). */
int al__provider_http_error(int status, const char *body, size_t len,
                            al_provider_error_t *out) {
  json_t *root;
  json_t *err;
  json_t *v;
  char msg[128];

  memset(out, 0, sizeof(*out));
  out->status = status;
  out->retryable = status == 408 || status == 409 || status == 429 ||
                   status >= 500;
  root = len > 0 ? al__provider_json_load(body, len, NULL) : NULL;
  if (root == NULL) {
    out->body = al__json_string_utf8(body != NULL ? body : "", len);
  } else {
    out->body = root;
  }
  err = json_is_object(root) ? json_object_get(root, "error") : NULL;
  if (json_is_object(err)) {
    v = json_object_get(err, "type");
    if (json_is_string(v)) {
      out->type = al_strdup(json_string_value(v));
    }
    v = json_object_get(err, "message");
    if (json_is_string(v)) {
      out->message = al_strdup(json_string_value(v));
    }
  } else if (json_is_string(err)) {
    out->message = al_strdup(json_string_value(err));
  }
  out->cls = al__provider_class_from_type(out->type);
  if (out->cls == AL_PCLASS_UNKNOWN || status == 529 ||
      (status >= 500 && out->cls == AL_PCLASS_INVALID_REQUEST)) {
    al_perr_class_t by_status = al__provider_class_from_status(status);
    if (by_status != AL_PCLASS_UNKNOWN) {
      out->cls = by_status;
    }
  }
  if (out->message == NULL) {
    snprintf(msg, sizeof(msg), "HTTP %d", status);
    out->message = al_strdup(msg);
  }
  if (out->body == NULL || out->message == NULL) {
    return AL_ENOMEM;
  }
  return 0;
}

int al__provider_finish_openai(al_provider_request_t *r,
                               const al_provider_options_t *o,
                               const char *suffix, json_t *body) {
  al_buf_t b;
  int err;

  if ((err = al__provider_finish_request(r, o->path_prefix, suffix, body)) !=
          0 ||
      (err = al__provider_add_header(r, "content-type",
                                     "application/json")) != 0 ||
      (err = al__provider_add_header(r, "accept",
                                     o->stream ? "text/event-stream"
                                               : "application/json")) != 0 ||
      o->api_key == NULL) {
    return err;
  }
  al_buf_init(&b, strlen(o->api_key) + 16);
  err = al_buf_printf(&b, "Bearer %s", o->api_key);
  if (err == 0) {
    err = al__provider_add_header(r, "authorization", b.data);
  }
  al_buf_free(&b);
  return err;
}
