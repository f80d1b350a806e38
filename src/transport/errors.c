/* Error classification for HTTP responses (PROTOCOLS §2.6, §3.4).
 *
 * Pure functions: the status → kind table, retry-after parsing (time is a
 * parameter so tests are deterministic), header lookup, and the provider
 * JSON error body (Anthropic {"type":"error","error":{type,message}} or
 * OpenAI {"error":{message,type,code}}) parsed with jansson. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "transport/transport_int.h"

const char *al_http_error_kind_name(al_http_error_kind_t k) {
  switch (k) {
#define AL_HTTP_KIND_NAME(u, s) \
  case AL_HTTP_ERR_##u:         \
    return s;
    AL_HTTP_ERROR_KIND_MAP(AL_HTTP_KIND_NAME)
#undef AL_HTTP_KIND_NAME
  default:
    return "unknown";
  }
}

al_http_error_kind_t al_http_status_kind(int s) {
  switch (s) {
  case 401:
    return AL_HTTP_ERR_AUTHENTICATION;
  case 403:
    return AL_HTTP_ERR_PERMISSION;
  case 404:
    return AL_HTTP_ERR_NOT_FOUND;
  case 408:
  case 504:
    return AL_HTTP_ERR_TIMEOUT;
  case 429:
    return AL_HTTP_ERR_RATE_LIMIT;
  case 529:
    return AL_HTTP_ERR_OVERLOADED;
  default:
    break;
  }
  if (s >= 400 && s < 500) {
    return AL_HTTP_ERR_INVALID_REQUEST; /* 400 409 413 422 and the rest */
  }
  return AL_HTTP_ERR_API_ERROR; /* 5xx and unexpected 1xx/3xx */
}

const al_http_header_t *al_http_headers_get(const al_http_headers_t *h,
                                            const char *name) {
  size_t n = strlen(name);
  size_t i;

  if (h == NULL) {
    return NULL;
  }
  for (i = 0; i < h->n; i++) {
    if (h->v[i].name_len == n && strncasecmp(h->v[i].name, name, n) == 0) {
      return &h->v[i];
    }
  }
  return NULL;
}

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t') {
    p++;
  }
  return p;
}

/* IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the form RFC 9110 says
 * senders use. Parsed by hand: strptime's %a/%b follow the locale. */
static int64_t parse_http_date(const char *s) {
  static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  char mon[4];
  int d, y, hh, mm, ss;
  int n = 0;
  const char *m;
  struct tm tm;

  s = skip_ws(s);
  if (strlen(s) < 29 || s[3] != ',') {
    return -1;
  }
  if (sscanf(s + 4, " %2d %3s %4d %2d:%2d:%2d GMT%n", &d, mon, &y, &hh, &mm,
             &ss, &n) != 6 ||
      n == 0) {
    return -1;
  }
  m = strstr(months, mon);
  if (m == NULL || strlen(mon) != 3 || (m - months) % 3 != 0) {
    return -1;
  }
  memset(&tm, 0, sizeof(tm));
  tm.tm_mday = d;
  tm.tm_mon = (int)((m - months) / 3);
  tm.tm_year = y - 1900;
  tm.tm_hour = hh;
  tm.tm_min = mm;
  tm.tm_sec = ss;
  return (int64_t)timegm(&tm);
}

int64_t al_http_parse_retry_after(const char *retry_after_ms,
                                  const char *retry_after, int64_t now) {
  /* The SDKs accept a delay only if 0 < delay <= 2^31-1 ms; we return any
   * non-negative value and let the retry policy apply its own bounds. */
  if (retry_after_ms != NULL) {
    char *end;
    double v;

    errno = 0;
    v = strtod(skip_ws(retry_after_ms), &end);
    if (errno == 0 && end != retry_after_ms && *skip_ws(end) == '\0' &&
        v >= 0 && v < 9e15) {
      return (int64_t)v;
    }
  }
  if (retry_after != NULL) {
    const char *p = skip_ws(retry_after);
    char *end;

    if (isdigit((unsigned char)*p)) {
      double v;

      errno = 0;
      v = strtod(p, &end);
      if (errno == 0 && *skip_ws(end) == '\0' && v >= 0 && v < 9e12) {
        return (int64_t)(v * 1000.0);
      }
      return -1;
    } else {
      int64_t t = parse_http_date(p);

      if (t < 0) {
        return -1;
      }
      return t > now ? (t - now) * 1000 : 0;
    }
  }
  return -1;
}

static char *dup_json_text(json_t *v) {
  char buf[32];

  if (json_is_string(v)) {
    return al_strndup(json_string_value(v), json_string_length(v));
  }
  if (json_is_integer(v)) {
    snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return al_strdup(buf);
  }
  return NULL;
}

void al__transport_parse_error_body(const char *body, size_t len, char **type,
                                    char **message, char **code) {
  json_t *root;
  json_t *err;
  json_error_t jerr;

  *type = *message = *code = NULL;
  if (body == NULL || len == 0) {
    return;
  }
  root = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
  if (root == NULL) {
    return;
  }
  err = json_object_get(root, "error");
  if (json_is_object(err)) {
    /* Both shapes keep the details under "error". */
    *type = dup_json_text(json_object_get(err, "type"));
    *message = dup_json_text(json_object_get(err, "message"));
    *code = dup_json_text(json_object_get(err, "code"));
  } else if (json_is_string(err)) {
    /* Some OpenAI-compatible servers answer {"error":"text"}. */
    *message = dup_json_text(err);
  }
  json_decref(root);
}
