/* Shared pacing of model requests: one pacer per (endpoint, API key) on an
 * HTTP client, shared by every agent that uses that client (issue 24).
 *
 * A pacer holds two gates, both in loop milliseconds (uv_now):
 *  - a requests-per-minute cap as GCRA (a token bucket written as one
 *    "theoretical arrival time"): requests are spaced 60000/rpm ms apart,
 *    with `burst` of them allowed back to back;
 *  - a cool-down: no request of the key starts before cool_until, set when
 *    any agent of the key got a 429 (its retry-after) or a 529.
 * After a cool-down the first request goes alone (a probe, half-open like
 * a circuit breaker); the queue follows when it succeeded, else the next
 * request probes after the new cool-down.
 * A request that may not start now waits in the pacer's FIFO queue; one uv
 * timer per pacer (not per request) wakes the head when its gate opens, so
 * sessions are served in the order they asked.
 *
 * Ownership: the client owns its pacers (created on first use, freed when
 * the client closes). Waiters are embedded in their owner (the agent's
 * run); al__pace_cancel unlinks one and nothing fires for it after. An
 * agent that does not share a client has a client of its own, hence
 * pacers of its own: the same code, per agent.
 *
 * Not shared: retry counts, jitter and the decision to give up stay per
 * agent (loop/retry.c); the pacer only says when the next request may
 * start. Requests already in flight when a 429 arrives are not recalled.
 * Pacers are per process: two processes on one key pace separately. */
#ifndef AL_TRANSPORT_PACE_H
#define AL_TRANSPORT_PACE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pure gate math (no clock, no uv) ------------------------------------ */

typedef struct al_pace_gate_s {
  int rpm;               /* 0: no cap */
  int burst;             /* requests allowed back to back (>= 1) */
  int64_t tat_ms;        /* GCRA theoretical arrival time */
  int64_t cool_until_ms; /* no request before this (0: none) */
} al_pace_gate_t;

void al__pace_gate_init(al_pace_gate_t *g);
/* How long a request arriving at now_ms must wait (0: it may start). */
int64_t al__pace_gate_delay(const al_pace_gate_t *g, int64_t now_ms);
/* A request starts at now_ms (after al__pace_gate_delay said 0). */
void al__pace_gate_take(al_pace_gate_t *g, int64_t now_ms);
/* Extends the cool-down to until_ms (never shortens it). */
void al__pace_gate_cool(al_pace_gate_t *g, int64_t until_ms);

/* ---- pacers on a client -------------------------------------------------- */

typedef struct al_pace_s al_pace_t;
typedef struct al_pace_set_s al_pace_set_t;
typedef struct al_pace_wait_s al_pace_wait_t;

typedef void (*al_pace_wait_cb)(al_pace_wait_t *w);

/* Embedded in its owner; zero it (or al__pace_wait_init) before use. */
struct al_pace_wait_s {
  al_list_t node;
  al_pace_t *pace;
  al_pace_wait_cb cb;
  bool queued;
  bool probe; /* let through as the first request after a cool-down */
};

void al__pace_wait_init(al_pace_wait_t *w);

/* The pacer of (base_url, api_key) on client c, created on first use.
 * Borrowed: valid until the client closes. Only a hash of the key is
 * kept. AL_ENOMEM, AL_ECLOSING (the client is closing). */
int al__pace_get(al_http_client_t *c, const char *base_url, const char *api_key,
                 al_pace_t **out);

/* Asks for the cap: the smallest non-zero rpm any user asked for wins
 * (two configurations of one key must not double its rate). burst < 1
 * counts as 1. */
void al__pace_set_rpm(al_pace_t *p, int rpm, int burst);

/* A request wants to start: 0 when it may now (its slot is taken), 1 when
 * it was queued (w->cb fires later, once, on the loop, with the slot
 * taken). Never calls back synchronously. */
int al__pace_acquire(al_pace_t *p, al_pace_wait_t *w, al_pace_wait_cb cb);

/* Unlinks a queued waiter; nothing fires for it after. Safe on a waiter
 * that is not queued. A probe given up counts as limited (below). */
void al__pace_cancel(al_pace_wait_t *w);

/* The answer to a request that was let through: limited when it was a
 * 429/529. Only a probe's answer matters: success lets the queue go,
 * limited keeps it waiting for the next probe after the new cool-down
 * (which the caller sets with al__pace_cool, before or after). */
void al__pace_done(al_pace_wait_t *w, bool limited);

/* No request of this key starts for delay_ms from now (a 429 or 529). */
void al__pace_cool(al_pace_t *p, int64_t delay_ms);

/* Waiting requests (tests, status). */
size_t al__pace_queued(const al_pace_t *p);

/* For transport/http.c: the client's set (NULL until a pacer exists) and
 * its close: true when cb will run on a later iteration (the pacers'
 * timers are closing), false when the set was freed at once. */
int al__pace_set_new(uv_loop_t *loop, al_pace_set_t **out);
bool al__pace_set_close(al_pace_set_t *s, void (*cb)(void *arg), void *arg);
al_pace_set_t **al__http_client_paces(al_http_client_t *c);
uv_loop_t *al__http_client_loop(al_http_client_t *c);
bool al__http_client_closing(const al_http_client_t *c);

#ifdef __cplusplus
}
#endif
#endif
