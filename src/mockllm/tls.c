/* The mockllm TLS listener's sessions (mbedtls 2.28, server side), over
 * memory buffers like the client's (src/transport/tls.c): a session never
 * touches the socket. server.c feeds it the ciphertext it reads and gets
 * plaintext back (plus handshake records to send); before writing a batch
 * of response bytes it has them encrypted into records. The same engine
 * (parser, playback, faults) runs above it; byte counts (reset_after_bytes,
 * drip) are plaintext counts.
 *
 * One configuration per server (certificate chain, key, DRBG); one
 * mbedtls_ssl_context per connection. */
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <stdio.h>
#include <string.h>

#include "mockllm/mockllm_int.h"

struct al__mock_tls_s {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_x509_crt crt;
  mbedtls_pk_context key;
  mbedtls_ssl_config conf;
};

struct al__mock_tls_conn_s {
  mbedtls_ssl_context ssl;
  const char *in;  /* ciphertext being fed */
  size_t in_len;
  al_buf_t *out;   /* where records go */
  bool ready;      /* handshake done */
  bool failed;
};

static void tls_err(char *err, size_t len, const char *what, int ret) {
  char m[160];

  if (err == NULL || len == 0) {
    return;
  }
  mbedtls_strerror(ret, m, sizeof(m));
  snprintf(err, len, "TLS: %s: %s (-0x%04x)", what, m, (unsigned)-ret);
}

void al__mock_tls_free(al__mock_tls_t *t) {
  if (t == NULL) {
    return;
  }
  mbedtls_ssl_config_free(&t->conf);
  mbedtls_pk_free(&t->key);
  mbedtls_x509_crt_free(&t->crt);
  mbedtls_ctr_drbg_free(&t->drbg);
  mbedtls_entropy_free(&t->entropy);
  al_free(t);
}

int al__mock_tls_new(const char *cert, const char *key, al__mock_tls_t **out,
                     char *err, size_t errlen) {
  al__mock_tls_t *t = al_calloc(1, sizeof(*t));
  int ret;

  *out = NULL;
  if (t == NULL) {
    return AL_ENOMEM;
  }
  mbedtls_entropy_init(&t->entropy);
  mbedtls_ctr_drbg_init(&t->drbg);
  mbedtls_x509_crt_init(&t->crt);
  mbedtls_pk_init(&t->key);
  mbedtls_ssl_config_init(&t->conf);
  if ((ret = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func,
                                   &t->entropy,
                                   (const unsigned char *)"al-mockllm",
                                   10)) != 0) {
    tls_err(err, errlen, "seeding the DRBG", ret);
    goto fail;
  }
  if ((ret = mbedtls_x509_crt_parse_file(&t->crt, cert)) != 0) {
    tls_err(err, errlen, cert, ret);
    goto fail;
  }
  if ((ret = mbedtls_pk_parse_keyfile(&t->key, key, NULL)) != 0) {
    tls_err(err, errlen, key, ret);
    goto fail;
  }
  if ((ret = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_SERVER,
                                         MBEDTLS_SSL_TRANSPORT_STREAM,
                                         MBEDTLS_SSL_PRESET_DEFAULT)) != 0 ||
      (ret = mbedtls_ssl_conf_own_cert(&t->conf, &t->crt, &t->key)) != 0) {
    tls_err(err, errlen, "configuration", ret);
    goto fail;
  }
  mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
  mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_NONE);
  *out = t;
  return 0;
fail:
  al__mock_tls_free(t);
  return AL_EINVAL;
}

static int bio_send(void *ctx, const unsigned char *buf, size_t len) {
  al__mock_tls_conn_t *c = ctx;

  if (c->out == NULL) {
    return MBEDTLS_ERR_SSL_WANT_WRITE;
  }
  if (al_buf_append(c->out, buf, len) != 0) {
    return MBEDTLS_ERR_SSL_ALLOC_FAILED;
  }
  return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len) {
  al__mock_tls_conn_t *c = ctx;
  size_t n = AL_MIN(len, c->in_len);

  if (n == 0) {
    return MBEDTLS_ERR_SSL_WANT_READ;
  }
  memcpy(buf, c->in, n);
  c->in += n;
  c->in_len -= n;
  return (int)n;
}

al__mock_tls_conn_t *al__mock_tls_conn_new(al__mock_tls_t *t) {
  al__mock_tls_conn_t *c = al_calloc(1, sizeof(*c));

  if (c == NULL) {
    return NULL;
  }
  mbedtls_ssl_init(&c->ssl);
  if (mbedtls_ssl_setup(&c->ssl, &t->conf) != 0) {
    mbedtls_ssl_free(&c->ssl);
    al_free(c);
    return NULL;
  }
  mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
  return c;
}

void al__mock_tls_conn_free(al__mock_tls_conn_t *c) {
  if (c == NULL) {
    return;
  }
  mbedtls_ssl_free(&c->ssl);
  al_free(c);
}

int al__mock_tls_feed(al__mock_tls_conn_t *c, const char *data, size_t len,
                      al_buf_t *records, al__mock_tls_plain_cb cb, void *arg) {
  unsigned char plain[16384];
  int ret;

  if (c->failed) {
    return AL_ETLS;
  }
  c->in = data;
  c->in_len = len;
  c->out = records;
  if (!c->ready) {
    ret = mbedtls_ssl_handshake(&c->ssl);
    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
      c->out = NULL;
      return 0;
    }
    if (ret != 0) {
      c->failed = true;
      c->out = NULL;
      return AL_ETLS;
    }
    c->ready = true;
  }
  for (;;) {
    ret = mbedtls_ssl_read(&c->ssl, plain, sizeof(plain));
    if (ret > 0) {
      c->out = NULL; /* the callback may encrypt (its own buffer) */
      if (!cb(arg, (const char *)plain, (size_t)ret)) {
        break;
      }
      c->out = records;
      continue;
    }
    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
      break;
    }
    c->out = NULL;
    c->in_len = 0;
    if (ret == 0 || ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
      return AL_EOF;
    }
    c->failed = true;
    return AL_ETLS;
  }
  c->out = NULL;
  c->in_len = 0;
  return 0;
}

int al__mock_tls_encrypt(al__mock_tls_conn_t *c, const char *data, size_t len,
                         al_buf_t *records) {
  size_t off = 0;

  if (!c->ready || c->failed) {
    return AL_ETLS;
  }
  c->out = records;
  while (off < len) {
    int ret = mbedtls_ssl_write(&c->ssl, (const unsigned char *)data + off,
                                len - off);

    if (ret <= 0) {
      c->out = NULL;
      c->failed = true;
      return AL_ETLS;
    }
    off += (size_t)ret;
  }
  c->out = NULL;
  return 0;
}

void al__mock_tls_close_notify(al__mock_tls_conn_t *c, al_buf_t *records) {
  if (!c->ready || c->failed) {
    return;
  }
  c->out = records;
  (void)mbedtls_ssl_close_notify(&c->ssl);
  c->out = NULL;
}
