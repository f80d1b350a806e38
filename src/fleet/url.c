/* Queue URLs (fleet.h): pure, no loop. A host must be an address because
 * hiredis would resolve a name with a blocking getaddrinfo on the loop. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#include "fleet/fleet.h"

static int fail(char *why, size_t len, const char *msg) {
  snprintf(why, len, "%s", msg);
  return AL_EINVAL;
}

static bool prefix_ok(const char *p) {
  if (*p == '\0') {
    return false;
  }
  for (; *p != '\0'; p++) {
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' || *p == '-')) {
      return false;
    }
  }
  return true;
}

static int set_prefix(al_fleet_url_t *u, const char *p, char *why, size_t len) {
  if (strlen(p) >= sizeof(u->prefix) || !prefix_ok(p)) {
    return fail(why, len, "the prefix must be 1-127 of [A-Za-z0-9_.-]");
  }
  snprintf(u->prefix, sizeof(u->prefix), "%s", p);
  return 0;
}

static int parse_unix(const char *rest, al_fleet_url_t *u, char *why,
                      size_t len) {
  const char *q = strchr(rest, '?');
  size_t n = q ? (size_t)(q - rest) : strlen(rest);

  if (n == 0 || rest[0] != '/') {
    return fail(why, len, "unix:// needs an absolute socket path");
  }
  if (n >= sizeof(u->unix_path)) {
    return fail(why, len, "the socket path is too long");
  }
  memcpy(u->unix_path, rest, n);
  u->unix_path[n] = '\0';
  if (q != NULL) {
    if (strncmp(q, "?prefix=", 8) != 0) {
      return fail(why, len, "unix:// takes only ?prefix=");
    }
    return set_prefix(u, q + 8, why, len);
  }
  return 0;
}

int al_fleet_url_parse(const char *url, al_fleet_url_t *u, char *why,
                       size_t len) {
  const char *p;
  const char *host_end;
  const char *slash;
  size_t hn;
  unsigned char addr[16];

  memset(u, 0, sizeof(*u));
  snprintf(u->prefix, sizeof(u->prefix), "agentloop");
  u->port = 6379;
  if (strncmp(url, "unix://", 7) == 0) {
    return parse_unix(url + 7, u, why, len);
  }
  if (strncmp(url, "redis://", 8) != 0) {
    return fail(why, len,
                "a queue URL is redis://HOST[:PORT][/PREFIX] or "
                "unix://PATH[?prefix=PREFIX]");
  }
  p = url + 8;
  slash = strchr(p, '/');
  if (*p == '[') {
    host_end = strchr(p, ']');
    if (host_end == NULL || (slash != NULL && host_end > slash)) {
      return fail(why, len, "an IPv6 address needs its closing ]");
    }
    hn = (size_t)(host_end - p - 1);
    if (hn == 0 || hn >= sizeof(u->host)) {
      return fail(why, len, "bad IPv6 address");
    }
    memcpy(u->host, p + 1, hn);
    p = host_end + 1;
  } else {
    host_end = p + strcspn(p, ":/");
    hn = (size_t)(host_end - p);
    if (hn == 0 || hn >= sizeof(u->host)) {
      return fail(why, len, "the URL has no host");
    }
    memcpy(u->host, p, hn);
    p = host_end;
  }
  if (strcmp(u->host, "localhost") == 0) {
    snprintf(u->host, sizeof(u->host), "127.0.0.1");
  }
  if (inet_pton(AF_INET, u->host, addr) != 1 &&
      inet_pton(AF_INET6, u->host, addr) != 1) {
    return fail(why, len,
                "the host must be an IP address or localhost (a name would "
                "be resolved with a blocking lookup)");
  }
  if (*p == ':') {
    char *end;
    long port = strtol(p + 1, &end, 10);

    if (end == p + 1 || port <= 0 || port > 65535 ||
        (*end != '\0' && *end != '/')) {
      return fail(why, len, "the port must be 1-65535");
    }
    u->port = (int)port;
    p = end;
  }
  if (*p == '/' && p[1] != '\0') {
    return set_prefix(u, p + 1, why, len);
  }
  if (*p != '\0' && strcmp(p, "/") != 0) {
    return fail(why, len, "unexpected text after the host");
  }
  return 0;
}
