/* The public face of the HTTP client (agentloop/client.h): a shared pool
 * and TLS configuration for agents. al_client_t is al_http_client_t. */
#include "agentloop/client.h"

#include <string.h>

#include "transport/transport.h"

void al_client_options_init(al_client_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->proxy_from_env = true;
}

int al_client_new(uv_loop_t *loop, const al_client_options_t *o,
                  al_client_t **out) {
  al_http_client_options_t co;

  al_http_client_options_init(&co);
  if (o != NULL) {
    co.ca_file = o->ca_file;
    co.ca_dir = o->ca_dir;
    co.proxy_from_env = o->proxy_from_env;
    if (o->connect_timeout_ms > 0) {
      co.connect_timeout_ms = o->connect_timeout_ms;
    }
    if (o->pool_max_idle_per_origin > 0) {
      co.pool_max_idle_per_origin = (size_t)o->pool_max_idle_per_origin;
    } else if (o->pool_max_idle_per_origin < 0) {
      co.pool_max_idle_per_origin = 0;
    }
  }
  return al_http_client_new(loop, &co, out);
}

void al_client_close(al_client_t *c, void (*cb)(al_client_t *c)) {
  al_http_client_close(c, cb);
}
