/* URL parsing and proxy selection for the transport.
 *
 * Only what an HTTP client needs: scheme (http/https), optional userinfo
 * (used for proxy credentials), host (bracketed IPv6 literals), port and
 * the request target. The fragment is dropped. Pure code: no libuv calls
 * besides the address parsers, no I/O. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "transport/transport_int.h"

static bool host_char_ok(char ch) {
  /* Reg-name characters we accept; anything else (space, CR/LF, '/') would
   * let a URL smuggle bytes into the Host header or the CONNECT line. */
  return isalnum((unsigned char)ch) || ch == '-' || ch == '.' || ch == '_' ||
         ch == '~' || ch == '%';
}

int al__transport_url_parse(const char *url, bool allow_bare,
                            al__transport_url_t *out) {
  const char *p;
  const char *auth;
  const char *auth_end;
  const char *at;
  const char *h;
  const char *h_end;
  const char *port_s = NULL;
  size_t i;
  long port;
  bool v6 = false;
  unsigned char tmp[16];

  memset(out, 0, sizeof(*out));
  if (url == NULL) {
    return AL_EINVAL;
  }
  if (strncasecmp(url, "https://", 8) == 0) {
    out->https = true;
    p = url + 8;
  } else if (strncasecmp(url, "http://", 7) == 0) {
    p = url + 7;
  } else if (allow_bare && strstr(url, "://") == NULL) {
    p = url;
  } else {
    return strstr(url, "://") != NULL ? AL_ENOTSUP : AL_EINVAL;
  }
  auth = p;
  auth_end = auth + strcspn(auth, "/?#");
  /* The last '@' splits userinfo from host (passwords may contain '@'). */
  at = NULL;
  for (h = auth; h < auth_end; h++) {
    if (*h == '@') {
      at = h;
    }
  }
  h = at != NULL ? at + 1 : auth;
  if (*h == '[') {
    h_end = memchr(h, ']', (size_t)(auth_end - h));
    if (h_end == NULL) {
      return AL_EINVAL;
    }
    h++;
    v6 = true;
    if (h_end + 1 < auth_end) {
      if (h_end[1] != ':') {
        return AL_EINVAL;
      }
      port_s = h_end + 2;
    }
  } else {
    h_end = memchr(h, ':', (size_t)(auth_end - h));
    if (h_end == NULL) {
      h_end = auth_end;
    } else {
      port_s = h_end + 1;
    }
  }
  if (h_end == h || h_end - h > 253) {
    return AL_EINVAL;
  }
  for (i = 0; i < (size_t)(h_end - h); i++) {
    if (!(v6 ? (isxdigit((unsigned char)h[i]) || h[i] == ':' ||
                h[i] == '.')
             : host_char_ok(h[i]))) {
      return AL_EINVAL;
    }
  }
  if (port_s != NULL) {
    char *endp;

    if (port_s == auth_end || !isdigit((unsigned char)*port_s)) {
      return AL_EINVAL;
    }
    port = strtol(port_s, &endp, 10);
    if (endp != auth_end || port < 1 || port > 65535) {
      return AL_EINVAL;
    }
  } else if (p == url || allow_bare) {
    port = 1080; /* curl's default proxy port */
  } else {
    port = out->https ? 443 : 80;
  }
  out->port = (uint16_t)port;
  out->host = al_strndup(h, (size_t)(h_end - h));
  if (out->host == NULL) {
    goto out_nomem;
  }
  for (i = 0; out->host[i] != '\0'; i++) {
    out->host[i] = (char)tolower((unsigned char)out->host[i]);
  }
  if (v6) {
    if (inet_pton(AF_INET6, out->host, tmp) != 1) {
      al__transport_url_free(out);
      return AL_EINVAL;
    }
    out->host_is_ip = true;
  } else {
    out->host_is_ip = inet_pton(AF_INET, out->host, tmp) == 1;
  }
  if (at != NULL) {
    out->userinfo = al_strndup(auth, (size_t)(at - auth));
    if (out->userinfo == NULL) {
      goto out_nomem;
    }
  }
  {
    const char *t = auth_end;
    size_t tlen = strcspn(t, "#");
    bool need_slash = tlen == 0 || *t != '/';

    for (i = 0; i < tlen; i++) {
      /* Control bytes and spaces in the target would break the request
       * line; callers must percent-encode. */
      if ((unsigned char)t[i] <= 0x20 || t[i] == 0x7f) {
        al__transport_url_free(out);
        return AL_EINVAL;
      }
    }
    out->target = al_malloc(tlen + 2);
    if (out->target == NULL) {
      goto out_nomem;
    }
    if (need_slash) {
      out->target[0] = '/';
    }
    memcpy(out->target + (need_slash ? 1 : 0), t, tlen);
    out->target[tlen + (need_slash ? 1 : 0)] = '\0';
  }
  return 0;

out_nomem:
  al__transport_url_free(out);
  return AL_ENOMEM;
}

void al__transport_url_free(al__transport_url_t *u) {
  al_free(u->host);
  al_free(u->target);
  al_free(u->userinfo);
  memset(u, 0, sizeof(*u));
}

void al__transport_hostport(const char *host, uint16_t port, bool v6,
                            char *buf, size_t len) {
  if (v6) {
    snprintf(buf, len, "[%s]:%u", host, (unsigned)port);
  } else {
    snprintf(buf, len, "%s:%u", host, (unsigned)port);
  }
}

bool al__transport_is_loopback(const char *host) {
  unsigned char a[16];
  size_t n = strlen(host);

  if (strcasecmp(host, "localhost") == 0 ||
      (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0)) {
    return true;
  }
  if (inet_pton(AF_INET, host, a) == 1) {
    return a[0] == 127;
  }
  if (inet_pton(AF_INET6, host, a) == 1) {
    static const unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 1};
    return memcmp(a, one, 16) == 0;
  }
  return false;
}

bool al__transport_no_proxy_match(const char *no_proxy, const char *host,
                                  uint16_t port) {
  const char *p = no_proxy;
  size_t hlen = strlen(host);

  if (no_proxy == NULL) {
    return false;
  }
  while (*p != '\0') {
    const char *e;
    const char *colon;
    const char *name_end;
    size_t len;

    while (*p == ',' || *p == ' ' || *p == '\t') {
      p++;
    }
    e = p + strcspn(p, ",");
    name_end = e;
    while (name_end > p && (name_end[-1] == ' ' || name_end[-1] == '\t')) {
      name_end--;
    }
    if (name_end - p == 1 && *p == '*') {
      return true;
    }
    if (*p == '.') {
      p++;
    }
    /* "host:port" (no brackets: IPv6 entries are matched without ports). */
    colon = memchr(p, ':', (size_t)(name_end - p));
    if (colon != NULL && memchr(colon + 1, ':', (size_t)(name_end - colon -
                                                         1)) == NULL) {
      if ((uint16_t)atoi(colon + 1) != port) {
        p = *e ? e + 1 : e;
        continue;
      }
    } else {
      colon = NULL;
    }
    len = (size_t)((colon != NULL ? colon : name_end) - p);
    if (p[0] == '[' && len > 2 && p[len - 1] == ']') {
      p++;
      len -= 2;
    }
    if (len > 0 && len <= hlen &&
        strncasecmp(host + hlen - len, p, len) == 0 &&
        (len == hlen || host[hlen - len - 1] == '.')) {
      return true;
    }
    p = *e ? e + 1 : e;
  }
  return false;
}

/* Why a base URL cannot be used, in words, for the error that names it
 * (exit 2 in run, invalid params in the daemon). */
int al_http_url_check(const char *url, char *why, size_t len) {
  al__transport_url_t u;
  const char *p, *host, *end;
  size_t i;
  int rc;

  if (url == NULL || *url == '\0') {
    snprintf(why, len, "empty URL");
    return AL_EINVAL;
  }
  for (i = 0; url[i] != '\0'; i++) {
    if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f) {
      snprintf(why, len, "%s at offset %zu (percent-encode it)",
               url[i] == ' ' ? "a space" : "a control character", i);
      return AL_EINVAL;
    }
  }
  if (strncasecmp(url, "https://", 8) == 0) {
    p = url + 8;
  } else if (strncasecmp(url, "http://", 7) == 0) {
    p = url + 7;
  } else {
    snprintf(why, len, "the scheme must be http:// or https://");
    return AL_EINVAL;
  }
  rc = al__transport_url_parse(url, false, &u);
  if (rc == 0) {
    al__transport_url_free(&u);
    if (strchr(url, '?') != NULL || strchr(url, '#') != NULL) {
      snprintf(why, len, "a base URL has no query or fragment");
      return AL_EINVAL;
    }
    end = p + strcspn(p, "/?#");
    if (memchr(p, '@', (size_t)(end - p)) != NULL) {
      /* Never sent, so never silently dropped either. */
      snprintf(why, len, "a user name or password in the URL is not used "
                         "(the API key comes from the environment)");
      return AL_EINVAL;
    }
    return 0;
  }
  if (rc == AL_ENOMEM) {
    snprintf(why, len, "out of memory");
    return rc;
  }
  end = p + strcspn(p, "/?#");
  host = p;
  for (i = 0; p + i < end; i++) {
    if (p[i] == '@') {
      host = p + i + 1;
    }
  }
  if (host == end || *host == ':') {
    snprintf(why, len, "no host");
  } else if (*host == '[' && memchr(host, ']', (size_t)(end - host)) == NULL) {
    snprintf(why, len, "an IPv6 address needs its closing ']'");
  } else if (*host == '[') {
    const char *rb = memchr(host, ']', (size_t)(end - host));
    char addr[INET6_ADDRSTRLEN + 8];
    struct in6_addr a6;
    size_t an = (size_t)(rb - host - 1);

    if (an >= sizeof(addr) ||
        (memcpy(addr, host + 1, an), addr[an] = '\0',
         inet_pton(AF_INET6, addr, &a6) != 1)) {
      snprintf(why, len, "not a valid IPv6 address");
    } else if (rb + 1 < end && rb[1] == ':') {
      snprintf(why, len, "the port must be a number 1..65535");
    } else if (rb + 1 < end) {
      snprintf(why, len, "unexpected text after the IPv6 address");
    } else {
      snprintf(why, len, "not a valid IPv6 address");
    }
  } else if (memchr(host, ':', (size_t)(end - host)) != NULL) {
    snprintf(why, len, "the port must be a number 1..65535");
  } else {
    snprintf(why, len, "the host has characters a host name cannot have");
  }
  return AL_EINVAL;
}
