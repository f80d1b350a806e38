/* TLS client sessions over memory buffers (the only file that sees mbedtls).
 *
 * A session never touches a socket: mbedtls' BIO callbacks read from an
 * input buffer the connection fills with received ciphertext and append to
 * an output buffer the connection drains with uv_write. An empty input is
 * MBEDTLS_ERR_SSL_WANT_READ, so the handshake and reads simply resume when
 * more bytes are fed (the pattern of libevent's bufferevent_mbedtls and
 * curl's mbedtls filter). mbedtls error codes are translated here into
 * AL_ETLS / AL_ECERT; the mbedtls text is kept as a detail string.
 *
 * The configuration (CA chain, CTR-DRBG seeded once, ssl_config) is built
 * in libuv's threadpool because loading a CA bundle is file I/O; once
 * built it is only used from the loop thread. TLS 1.2 is the floor (2.28
 * has no TLS 1.3), verification is required, ALPN offers http/1.1.
 *
 * Host names: mbedtls_ssl_set_hostname() sets SNI and the name checked
 * against dNSName SANs (or the CN without SANs). mbedtls 2.28 does not
 * match iPAddress SANs (subject_alt_names lists only dNSName/otherName), so
 * for an IP literal we send no SNI (RFC 6066 forbids literals there) and a
 * verify callback checks the leaf's iPAddress SAN entries itself; a
 * certificate without a matching one fails as a name mismatch. */
#include <arpa/inet.h>

#include <mbedtls/asn1.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "transport/transport_int.h"

/* A TLS record is at most ~16 KiB plus overhead; a peer that makes us hold
 * more than this undecrypted is misbehaving. */
#define TLS_IN_MAX (4u * 1024 * 1024)
/* Output holds what we encrypt ourselves (the request) until it is handed
 * to uv_write; the bound only guards against runaway growth. */
#define TLS_OUT_MAX (512u * 1024 * 1024)

struct al__transport_tls_config_s {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_x509_crt ca;
  mbedtls_ssl_config conf;
};

struct al__transport_tls_s {
  al__transport_tls_config_t *cfg;
  mbedtls_ssl_context ssl;
  al_buf_t in;
  size_t in_off;
  al_buf_t out;
  bool is_ip;
  unsigned char ip[16];
  size_t ip_len;
  char detail[256];
};

/* Static storage: mbedtls keeps the pointer. */
static const char *alpn_list[] = {"http/1.1", NULL};

int al__transport_tls_config_new(const char *ca_file, const char *ca_dir,
                                 al__transport_tls_config_t **out, char *err,
                                 size_t err_len) {
  static const char pers[] = "agentloop-transport";
  al__transport_tls_config_t *cfg;
  char ebuf[128];
  int ret;
  int loaded = 0;

  *out = NULL;
  cfg = al_calloc(1, sizeof(*cfg));
  if (cfg == NULL) {
    snprintf(err, err_len, "out of memory");
    return AL_ENOMEM;
  }
  mbedtls_entropy_init(&cfg->entropy);
  mbedtls_ctr_drbg_init(&cfg->drbg);
  mbedtls_x509_crt_init(&cfg->ca);
  mbedtls_ssl_config_init(&cfg->conf);

  ret = mbedtls_ctr_drbg_seed(&cfg->drbg, mbedtls_entropy_func,
                              &cfg->entropy, (const unsigned char *)pers,
                              sizeof(pers) - 1);
  if (ret != 0) {
    mbedtls_strerror(ret, ebuf, sizeof(ebuf));
    snprintf(err, err_len, "seeding the TLS random generator: %s", ebuf);
    goto out_free;
  }
  if (ca_file != NULL && ca_file[0] != '\0') {
    /* A positive result counts certificates that failed to parse; the
     * others were added, as with any real-world bundle. */
    ret = mbedtls_x509_crt_parse_file(&cfg->ca, ca_file);
    if (ret < 0) {
      mbedtls_strerror(ret, ebuf, sizeof(ebuf));
      snprintf(err, err_len, "cannot load CA bundle %s: %s", ca_file, ebuf);
    } else {
      loaded = 1;
    }
  }
  if (ca_dir != NULL && ca_dir[0] != '\0') {
    ret = mbedtls_x509_crt_parse_path(&cfg->ca, ca_dir);
    if (ret >= 0 && cfg->ca.version != 0) {
      loaded = 1;
    } else if (!loaded) {
      mbedtls_strerror(ret, ebuf, sizeof(ebuf));
      snprintf(err, err_len, "cannot load CA directory %s: %s", ca_dir,
               ebuf);
    }
  }
  if (!loaded || cfg->ca.version == 0) {
    /* Fail closed: without trust anchors nothing could be verified. */
    if (loaded || (ca_file == NULL && ca_dir == NULL)) {
      snprintf(err, err_len,
               "no CA certificates loaded (set SSL_CERT_FILE or install "
               "ca-certificates)");
    }
    goto out_free;
  }
  ret = mbedtls_ssl_config_defaults(&cfg->conf, MBEDTLS_SSL_IS_CLIENT,
                                    MBEDTLS_SSL_TRANSPORT_STREAM,
                                    MBEDTLS_SSL_PRESET_DEFAULT);
  if (ret != 0) {
    mbedtls_strerror(ret, ebuf, sizeof(ebuf));
    snprintf(err, err_len, "TLS configuration: %s", ebuf);
    goto out_free;
  }
  mbedtls_ssl_conf_min_version(&cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                               MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_authmode(&cfg->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_ca_chain(&cfg->conf, &cfg->ca, NULL);
  mbedtls_ssl_conf_rng(&cfg->conf, mbedtls_ctr_drbg_random, &cfg->drbg);
  ret = mbedtls_ssl_conf_alpn_protocols(&cfg->conf, alpn_list);
  if (ret != 0) {
    snprintf(err, err_len, "TLS ALPN configuration failed");
    goto out_free;
  }
  *out = cfg;
  return 0;

out_free:
  al__transport_tls_config_free(cfg);
  return AL_ETLS;
}

void al__transport_tls_config_free(al__transport_tls_config_t *cfg) {
  if (cfg == NULL) {
    return;
  }
  mbedtls_ssl_config_free(&cfg->conf);
  mbedtls_x509_crt_free(&cfg->ca);
  mbedtls_ctr_drbg_free(&cfg->drbg);
  mbedtls_entropy_free(&cfg->entropy);
  al_free(cfg);
}

/* ---- memory BIO ---------------------------------------------------------- */

static int bio_send(void *ctx, const unsigned char *buf, size_t len) {
  al__transport_tls_t *t = ctx;

  if (al_buf_append(&t->out, buf, len) != 0) {
    return MBEDTLS_ERR_SSL_ALLOC_FAILED;
  }
  return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len) {
  al__transport_tls_t *t = ctx;
  size_t avail = t->in.len - t->in_off;

  if (avail == 0) {
    return MBEDTLS_ERR_SSL_WANT_READ;
  }
  if (len > avail) {
    len = avail;
  }
  memcpy(buf, t->in.data + t->in_off, len);
  t->in_off += len;
  return (int)len;
}

/* ---- iPAddress SAN check -------------------------------------------------- */

/* Walks the raw v3 extensions (crt->v3_ext starts at the Extensions
 * SEQUENCE) for subjectAltName and looks for an iPAddress ([7]) entry equal
 * to ip. Any parse trouble means "no match". */
static bool san_has_ip(const mbedtls_x509_crt *crt, const unsigned char *ip,
                       size_t ip_len) {
  unsigned char *p = crt->v3_ext.p;
  const unsigned char *end;
  size_t len;

  if (p == NULL || crt->v3_ext.len == 0) {
    return false;
  }
  end = p + crt->v3_ext.len;
  if (mbedtls_asn1_get_tag(&p, end, &len,
                           MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE)) {
    return false;
  }
  end = p + len;
  while (p < end) {
    const unsigned char *ext_end;
    mbedtls_x509_buf oid;
    int crit;

    if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED |
                                                MBEDTLS_ASN1_SEQUENCE)) {
      return false;
    }
    ext_end = p + len;
    if (mbedtls_asn1_get_tag(&p, ext_end, &oid.len, MBEDTLS_ASN1_OID)) {
      return false;
    }
    oid.p = p;
    p += oid.len;
    if (MBEDTLS_OID_CMP(MBEDTLS_OID_SUBJECT_ALT_NAME, &oid) != 0) {
      p = (unsigned char *)ext_end;
      continue;
    }
    (void)mbedtls_asn1_get_bool(&p, ext_end, &crit); /* optional */
    if (mbedtls_asn1_get_tag(&p, ext_end, &len, MBEDTLS_ASN1_OCTET_STRING) ||
        mbedtls_asn1_get_tag(&p, ext_end, &len, MBEDTLS_ASN1_CONSTRUCTED |
                                                    MBEDTLS_ASN1_SEQUENCE)) {
      return false;
    }
    while (p < ext_end) {
      unsigned char tag = *p++;

      if (mbedtls_asn1_get_len(&p, ext_end, &len)) {
        return false;
      }
      if (tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && len == ip_len &&
          memcmp(p, ip, ip_len) == 0) {
        return true;
      }
      p += len;
    }
    return false;
  }
  return false;
}

static int verify_ip(void *ctx, mbedtls_x509_crt *crt, int depth,
                     uint32_t *flags) {
  al__transport_tls_t *t = ctx;

  if (depth == 0 && !san_has_ip(crt, t->ip, t->ip_len)) {
    *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
  }
  return 0;
}

/* ---- sessions ------------------------------------------------------------ */

int al__transport_tls_new(al__transport_tls_config_t *cfg, const char *host,
                          bool host_is_ip, al__transport_tls_t **out) {
  al__transport_tls_t *t;
  int ret;

  *out = NULL;
  t = al_calloc(1, sizeof(*t));
  if (t == NULL) {
    return AL_ENOMEM;
  }
  t->cfg = cfg;
  al_buf_init(&t->in, TLS_IN_MAX);
  al_buf_init(&t->out, TLS_OUT_MAX);
  mbedtls_ssl_init(&t->ssl);
  ret = mbedtls_ssl_setup(&t->ssl, &cfg->conf);
  if (ret != 0) {
    goto out_fail;
  }
  if (host_is_ip) {
    t->is_ip = true;
    if (inet_pton(AF_INET, host, t->ip) == 1) {
      t->ip_len = 4;
    } else if (inet_pton(AF_INET6, host, t->ip) == 1) {
      t->ip_len = 16;
    } else {
      al__transport_tls_free(t);
      return AL_EINVAL;
    }
    mbedtls_ssl_set_verify(&t->ssl, verify_ip, t);
  } else {
    ret = mbedtls_ssl_set_hostname(&t->ssl, host);
    if (ret != 0) {
      goto out_fail;
    }
  }
  mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
  *out = t;
  return 0;

out_fail:
  al__transport_tls_free(t);
  return ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? AL_ENOMEM : AL_ETLS;
}

void al__transport_tls_free(al__transport_tls_t *t) {
  if (t == NULL) {
    return;
  }
  mbedtls_ssl_free(&t->ssl);
  al_buf_free(&t->in);
  al_buf_free(&t->out);
  al_free(t);
}

int al__transport_tls_feed(al__transport_tls_t *t, const char *p, size_t n) {
  if (t->in_off > 0) {
    al_buf_consume(&t->in, t->in_off);
    t->in_off = 0;
  }
  return al_buf_append(&t->in, p, n);
}

/* The verify flags as the words a user acts on (issue 15): which CA is
 * missing, which name, which date. */
static void verify_reasons(uint32_t flags, char *out, size_t len) {
  static const struct {
    uint32_t flag;
    const char *text;
  } reasons[] = {
      {MBEDTLS_X509_BADCERT_NOT_TRUSTED,
       "unknown CA (the chain does not lead to a trusted CA; a self-signed "
       "or private-CA certificate needs SSL_CERT_FILE)"},
      {MBEDTLS_X509_BADCERT_CN_MISMATCH,
       "name mismatch (the certificate is not for this host)"},
      {MBEDTLS_X509_BADCERT_EXPIRED, "expired"},
      {MBEDTLS_X509_BADCERT_FUTURE, "not valid yet"},
      {MBEDTLS_X509_BADCERT_REVOKED, "revoked"},
      {MBEDTLS_X509_BADCERT_BAD_MD, "signed with a weak hash (e.g. SHA-1)"},
      {MBEDTLS_X509_BADCERT_BAD_KEY, "key too weak"},
      {MBEDTLS_X509_BADCERT_BAD_PK, "unsupported key type"},
      {MBEDTLS_X509_BADCERT_KEY_USAGE, "not usable for TLS (key usage)"},
      {MBEDTLS_X509_BADCERT_EXT_KEY_USAGE,
       "not usable for TLS servers (extended key usage)"},
      {MBEDTLS_X509_BADCERT_MISSING, "no certificate sent"},
      {MBEDTLS_X509_BADCERT_SKIP_VERIFY, "verification skipped"},
      {MBEDTLS_X509_BADCRL_EXPIRED, "CRL expired"},
  };
  size_t i, o = 0;

  out[0] = '\0';
  for (i = 0; i < AL_ARRAY_SIZE(reasons); i++) {
    if ((flags & reasons[i].flag) != 0 && o < len) {
      int n = snprintf(out + o, len - o, "%s%s", o > 0 ? "; " : "",
                       reasons[i].text);
      o += n > 0 ? (size_t)n : 0;
    }
  }
  if (out[0] == '\0') {
    snprintf(out, len, "verification failed (flags 0x%x)", (unsigned)flags);
  }
}

/* Translates an mbedtls result into our code and keeps its text. */
static int tls_error(al__transport_tls_t *t, int ret) {
  char ebuf[160];

  if (ret == MBEDTLS_ERR_SSL_ALLOC_FAILED) {
    snprintf(t->detail, sizeof(t->detail), "TLS: out of memory");
    return AL_ENOMEM;
  }
  if (ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
    uint32_t flags = mbedtls_ssl_get_verify_result(&t->ssl);
    char vbuf[240];

    verify_reasons(flags, vbuf, sizeof(vbuf));
    snprintf(t->detail, sizeof(t->detail), "%s", vbuf);
    return AL_ECERT;
  }
  mbedtls_strerror(ret, ebuf, sizeof(ebuf));
  snprintf(t->detail, sizeof(t->detail), "%s (-0x%04x)", ebuf,
           (unsigned)-ret);
  return AL_ETLS;
}

int al__transport_tls_handshake(al__transport_tls_t *t) {
  int ret = mbedtls_ssl_handshake(&t->ssl);

  if (ret == 0) {
    return 0;
  }
  if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
    return 1;
  }
  return tls_error(t, ret);
}

int al__transport_tls_write(al__transport_tls_t *t, const char *p, size_t n) {
  size_t off = 0;

  while (off < n) {
    int ret = mbedtls_ssl_write(&t->ssl, (const unsigned char *)p + off,
                                n - off);

    if (ret > 0) {
      off += (size_t)ret;
    } else if (ret == MBEDTLS_ERR_SSL_WANT_READ ||
               ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
      /* The output BIO never blocks, so this means mbedtls wants input
       * first (a write before the handshake finished): a caller bug, and
       * looping would spin forever. */
      snprintf(t->detail, sizeof(t->detail), "TLS write before handshake");
      return AL_ESTATE;
    } else {
      return tls_error(t, ret);
    }
  }
  return 0;
}

ssize_t al__transport_tls_read(al__transport_tls_t *t, char *buf, size_t n) {
  int ret = mbedtls_ssl_read(&t->ssl, (unsigned char *)buf, n);

  if (ret > 0) {
    return ret;
  }
  if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
    return 0;
  }
  if (ret == 0 || ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
    return AL_EOF;
  }
  return tls_error(t, ret);
}

int al__transport_tls_take_out(al__transport_tls_t *t, char **buf,
                               size_t *len) {
  char *p;

  *buf = NULL;
  *len = 0;
  if (t->out.len == 0) {
    return 0;
  }
  /* Hand the buffer itself over; the next send starts a fresh one. */
  p = t->out.data;
  *len = t->out.len;
  t->out.data = NULL;
  t->out.len = 0;
  t->out.cap = 0;
  *buf = p;
  return 0;
}

const char *al__transport_tls_detail(const al__transport_tls_t *t) {
  return t->detail[0] != '\0' ? t->detail : NULL;
}

const char *al__transport_tls_alpn(const al__transport_tls_t *t) {
  return mbedtls_ssl_get_alpn_protocol(&t->ssl);
}
