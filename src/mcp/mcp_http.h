/* MCP Streamable HTTP transport (spec 2025-11-25, RESEARCH-WAVE2 §2.1) on
 * our HTTP/TLS client (transport/) and SSE parser (sse/). Internal to
 * src/mcp: mcp.c drives the same server state machine over it as over a
 * child's stdio.
 *
 * Each outgoing JSON-RPC message is one POST to the server's URL with
 * `Accept: application/json, text/event-stream`. The answer is either one
 * JSON body or an event stream whose events carry messages (the answer,
 * progress, server requests). Rules kept here:
 *  - The `Mcp-Session-Id` of the initialize response goes on every later
 *    request; `MCP-Protocol-Version` too once the owner set the version.
 *  - A 404 to a request that carried the session id means the session
 *    expired: the transport re-initializes once by itself (the remembered
 *    initialize request, then notifications/initialized) and re-sends the
 *    request; messages sent meanwhile wait. A second 404 before any answer
 *    came on the new session is a failure.
 *  - An event stream that ends before the answer to its request arrived is
 *    resumed with a GET carrying `Last-Event-ID` when the server gave event
 *    ids (again while each resumed stream makes progress); without ids it
 *    is a failure.
 *  - The server stream (a GET for messages outside requests) is opened
 *    after notifications/initialized and opened again when it ends, with
 *    backoff (al_mcp_stream_backoff_t): a server that answers it with one
 *    event and closes costs a few requests a minute, not a thousand a
 *    second; on_notice says when it degrades and when it is given up.
 *  - Close sends DELETE with the session id (bounded by close_grace_ms)
 *    and then closes the HTTP client.
 * on_fail fires at most once; after it, and after close, nothing fires. */
#ifndef AL_MCP_HTTP_H
#define AL_MCP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "mcp/mcp.h"

typedef struct al_mcp_http_s al_mcp_http_t;

typedef struct al_mcp_http_options_s {
  uv_loop_t *loop;
  const char *url;
  char *const *headers;     /* "Name: value", NULL-terminated; may be NULL */
  size_t body_max;          /* largest JSON body or event */
  uint64_t request_max_ms;  /* whole exchange of one request; 0: none */
  uint64_t close_grace_ms;  /* the DELETE at close */
  /* A message from the server (borrowed). */
  void (*on_message)(void *data, const json_t *msg);
  void (*on_fail)(void *data, const char *why);
  /* The server stream degraded (reopened with backoff) or was given up;
   * the session still works. May be NULL. */
  void (*on_notice)(void *data, const char *text);
  void *data;
  al_mcp_stream_backoff_t backoff; /* zeros: the defaults */
} al_mcp_http_options_t;

int al__mcp_http_new(const al_mcp_http_options_t *o, al_mcp_http_t **out);
/* POSTs msg (borrowed). Never calls back synchronously. */
void al__mcp_http_send(al_mcp_http_t *h, const json_t *msg);
/* The negotiated version, sent as MCP-Protocol-Version from now on. */
void al__mcp_http_set_version(al_mcp_http_t *h, const char *v);
const char *al__mcp_http_session(const al_mcp_http_t *h);
/* Cancels everything, DELETEs the session, closes; cb(data) then (h is
 * freed). Safe from inside on_message/on_fail. */
void al__mcp_http_close(al_mcp_http_t *h, void (*cb)(void *data), void *data);

#endif
