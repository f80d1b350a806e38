/* Helpers shared between the files of the transport layer (STYLE §3.1):
 * URL parsing and proxy selection (url.c), the TLS interface over memory
 * buffers (tls.c, the only file that includes mbedtls), and error
 * classification helpers (errors.c).
 *
 * The TLS interface is deliberately byte-oriented and knows nothing of
 * libuv: ciphertext received from the socket is fed in with
 * al__transport_tls_feed(), ciphertext to send is taken out with
 * al__transport_tls_take_out(); plaintext goes through _write/_read. No
 * mbedtls type or error code crosses this header. */
#ifndef AL_TRANSPORT_INT_H
#define AL_TRANSPORT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/common.h"
#include "transport/transport.h"

/* ---- URLs ---------------------------------------------------------------- */

typedef struct al__transport_url_s {
  bool https;
  char *host; /* without brackets for IPv6 literals; lowercase */
  uint16_t port;
  char *target; /* path + query, at least "/" */
  char *userinfo; /* "user:pass" (proxies) or NULL */
  bool host_is_ip; /* an IPv4 or IPv6 literal */
} al__transport_url_t;

/* Parses an http:// or https:// URL (scheme-less "host:port" is accepted
 * when allow_bare, as proxies are often given). AL_EINVAL or AL_ENOMEM. */
int al__transport_url_parse(const char *url, bool allow_bare,
                            al__transport_url_t *out);
void al__transport_url_free(al__transport_url_t *u);

/* "host:port" with brackets around IPv6 literals, into buf. */
void al__transport_hostport(const char *host, uint16_t port, bool v6,
                            char *buf, size_t len);

/* True when `host` is localhost, 127.0.0.0/8 or ::1. */
bool al__transport_is_loopback(const char *host);
/* NO_PROXY matching: "*" matches all; each comma-separated entry matches
 * the host itself or any subdomain (a leading dot is optional); an entry
 * may carry ":port", which must then match too. */
bool al__transport_no_proxy_match(const char *no_proxy, const char *host,
                                  uint16_t port);

/* ---- TLS ----------------------------------------------------------------- */

typedef struct al__transport_tls_config_s al__transport_tls_config_t;
typedef struct al__transport_tls_s al__transport_tls_t;

/* Blocking (runs in the threadpool): seeds CTR-DRBG and loads the CA
 * bundle from ca_file (required) and ca_dir (optional). On failure returns
 * AL_ETLS/AL_ENOMEM and writes a human message into err. */
int al__transport_tls_config_new(const char *ca_file, const char *ca_dir,
                                 al__transport_tls_config_t **out, char *err,
                                 size_t err_len);
void al__transport_tls_config_free(al__transport_tls_config_t *cfg);

/* A client session for `host` (SNI + name check; IP literals are checked
 * against iPAddress SANs and get no SNI). AL_ENOMEM or AL_ETLS. */
int al__transport_tls_new(al__transport_tls_config_t *cfg, const char *host,
                          bool host_is_ip, al__transport_tls_t **out);
void al__transport_tls_free(al__transport_tls_t *t);

/* Appends received ciphertext (bounded; AL_ETOOBIG if the peer floods). */
int al__transport_tls_feed(al__transport_tls_t *t, const char *p, size_t n);
/* Advances the handshake: 0 done, 1 needs more input (send pending output
 * first), or AL_ETLS / AL_ECERT (see _detail). */
int al__transport_tls_handshake(al__transport_tls_t *t);
/* Encrypts all of p into the pending output. 0 or negative error. */
int al__transport_tls_write(al__transport_tls_t *t, const char *p, size_t n);
/* Decrypts into buf: > 0 bytes, 0 needs more input, AL_EOF on
 * close_notify, or a negative error. */
ssize_t al__transport_tls_read(al__transport_tls_t *t, char *buf, size_t n);
/* Moves the pending ciphertext out: *buf (al_malloc'd, caller frees) and
 * *len; *buf NULL when nothing is pending. AL_ENOMEM. */
int al__transport_tls_take_out(al__transport_tls_t *t, char **buf,
                               size_t *len);
/* Human text of the last error (mbedtls_strerror / verify info). */
const char *al__transport_tls_detail(const al__transport_tls_t *t);
/* The ALPN protocol the server chose, or NULL. */
const char *al__transport_tls_alpn(const al__transport_tls_t *t);

/* ---- errors -------------------------------------------------------------- */

/* Parses an Anthropic or OpenAI JSON error body; fills *type, *message,
 * *code with al_malloc'd strings (NULL when absent). Never fails loudly:
 * a body that is not JSON leaves all three NULL. */
void al__transport_parse_error_body(const char *body, size_t len, char **type,
                                    char **message, char **code);

#endif
