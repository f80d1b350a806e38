/* A shared HTTP client: connection pool and TLS configuration for agents.
 *
 * Every agent needs an HTTP client. By default each creates its own, which
 * costs a CA bundle parse (in the threadpool) and its memory per agent, and
 * keeps separate keep-alive pools. A program with many agents on one loop
 * (a daemon, a benchmark) creates one al_client_t and passes it in
 * al_agent_options_t.client: the agents then share the parsed CA chain and
 * the idle connections. The client must outlive the agents that use it:
 * close it after their close callbacks have run. */
#ifndef AGENTLOOP_CLIENT_H
#define AGENTLOOP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct al_http_client_s al_client_t;

typedef struct al_client_options_s {
  /* CA bundle file and directory; NULL: $SSL_CERT_FILE (else the system
   * bundle) and $SSL_CERT_DIR. Certificate verification is always on. */
  const char *ca_file;
  const char *ca_dir;
  /* Proxies from https_proxy, http_proxy, ALL_PROXY, no_proxy (default
   * true). */
  bool proxy_from_env;
  int64_t connect_timeout_ms; /* 0: 10 s */
  /* Idle keep-alive connections kept per origin (0: 4; -1: none). */
  int pool_max_idle_per_origin;
} al_client_options_t;

void al_client_options_init(al_client_options_t *o);

/* Creates a client on `loop`; no file I/O happens here (the CA bundle is
 * loaded in the threadpool on first TLS use). AL_ENOMEM, AL_EINVAL. */
int al_client_new(uv_loop_t *loop, const al_client_options_t *o,
                  al_client_t **out);

/* Closes the pool; cb (may be NULL) runs on a later iteration and the
 * client is freed. Requests still running end with AL_ECANCELED, so close
 * the agents first. */
void al_client_close(al_client_t *c, void (*cb)(al_client_t *c));

#ifdef __cplusplus
}
#endif
#endif
