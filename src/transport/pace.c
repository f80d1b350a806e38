/* Shared pacing (pace.h): the gate math, the pacers of a client and their
 * one timer each.
 *
 * Invariants:
 *  - A pacer's queue is FIFO; a waiter is served only from the head, so a
 *    late asker never overtakes an earlier one, even when its gate would
 *    let it through (al__pace_acquire queues behind a non-empty queue).
 *  - The timer is armed exactly when the queue is not empty, for the
 *    head's delay; dispatch pops the head before calling it, so a
 *    callback may cancel other waiters, acquire again or close the client.
 *  - After a cool-down one request goes first (the probe); the others are
 *    let through only when it succeeded (al__pace_done), else the next
 *    one probes again, so a limit that outlasted its retry-after meets one
 *    request, not the whole queue.
 *  - Pacers are freed only in the set's close, after their timers' close
 *    callbacks: a callback never finds its pacer freed under it. */
#include "transport/pace.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "agentloop/alloc.h"
#include "agentloop/errno.h"

struct al_pace_s {
  al_list_t node; /* in the set */
  al_pace_set_t *set;
  char *key; /* base_url '\n' hex hash of the api key */
  al_pace_gate_t gate;
  al_list_t queue;
  size_t queued;
  uv_timer_t timer;
  /* Half-open after a cool-down: the first request after it goes alone
   * (the probe) and the queue waits for its answer. */
  bool cooled;  /* a cool-down was set since the last probe's success */
  bool probing; /* a probe is in flight: nothing else is let through */
};

struct al_pace_set_s {
  uv_loop_t *loop;
  al_list_t paces;
  size_t closing; /* timer closes still pending */
  bool closed;
  void (*close_cb)(void *arg);
  void *close_arg;
};

/* ---- gate -----------------------------------------------------------------
 */

void al__pace_gate_init(al_pace_gate_t *g) {
  memset(g, 0, sizeof(*g));
  g->burst = 1;
}

static int64_t interval_ms(const al_pace_gate_t *g) {
  return g->rpm > 0 ? (60000 + g->rpm - 1) / g->rpm : 0;
}

int64_t al__pace_gate_delay(const al_pace_gate_t *g, int64_t now_ms) {
  int64_t wait = 0;

  if (g->cool_until_ms > now_ms) {
    wait = g->cool_until_ms - now_ms;
  }
  if (g->rpm > 0) {
    /* GCRA: allowed when tat - now <= (burst - 1) * interval. */
    int64_t allow_at = g->tat_ms - (int64_t)(g->burst - 1) * interval_ms(g);

    if (allow_at - now_ms > wait) {
      wait = allow_at - now_ms;
    }
  }
  return wait;
}

void al__pace_gate_take(al_pace_gate_t *g, int64_t now_ms) {
  if (g->rpm > 0) {
    g->tat_ms = AL_MAX(g->tat_ms, now_ms) + interval_ms(g);
  }
}

void al__pace_gate_cool(al_pace_gate_t *g, int64_t until_ms) {
  if (until_ms > g->cool_until_ms) {
    g->cool_until_ms = until_ms;
  }
}

/* ---- pacers ---------------------------------------------------------------
 */

void al__pace_wait_init(al_pace_wait_t *w) {
  memset(w, 0, sizeof(*w));
  al_list_init(&w->node);
}

/* The loop's cached time can be a whole callback old (an agent built
 * after a slow start, a long dispatch): a slot taken at a stale now would
 * let the next request through early, so the clock is read fresh. */
static int64_t now_of(const al_pace_t *p) {
  uv_update_time(p->set->loop);
  return (int64_t)uv_now(p->set->loop);
}

static void arm(al_pace_t *p);

/* Nothing may go while a probe is out; otherwise the gate decides. */
static bool may_go(const al_pace_t *p, int64_t now) {
  return !p->probing && al__pace_gate_delay(&p->gate, now) == 0;
}

/* A request is let through: the slot is taken, and after a cool-down it
 * is the probe. */
static void grant(al_pace_t *p, al_pace_wait_t *w, int64_t now) {
  al__pace_gate_take(&p->gate, now);
  w->pace = p;
  if (p->cooled) {
    p->cooled = false;
    p->probing = true;
    w->probe = true;
  }
}

static void on_timer(uv_timer_t *t) {
  al_pace_t *p = AL_CONTAINER_OF(t, al_pace_t, timer);
  int64_t now;

  /* The clock once per pass (STYLE §3.6); each grant moves tat. */
  now = now_of(p);
  while (!al_list_empty(&p->queue) && !p->set->closed && may_go(p, now)) {
    al_pace_wait_t *w = AL_CONTAINER_OF(p->queue.next, al_pace_wait_t, node);

    al_list_remove(&w->node);
    p->queued--;
    w->queued = false;
    grant(p, w, now);
    w->cb(w); /* may cancel, acquire again or close: the loop re-reads */
  }
  arm(p);
}

static void arm(al_pace_t *p) {
  /* A probe's answer (al__pace_done) re-arms. */
  if (p->set->closed || al_list_empty(&p->queue) || p->probing) {
    uv_timer_stop(&p->timer);
    return;
  }
  uv_timer_start(&p->timer, on_timer,
                 (uint64_t)al__pace_gate_delay(&p->gate, now_of(p)), 0);
}

/* FNV-1a: the key is never kept, only enough of it to tell keys apart. */
static uint64_t key_hash(const char *s) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);

  for (; s != NULL && *s != '\0'; s++) {
    h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
  }
  return h;
}

int al__pace_set_new(uv_loop_t *loop, al_pace_set_t **out) {
  al_pace_set_t *s = al_calloc(1, sizeof(*s));

  if (s == NULL) {
    return AL_ENOMEM;
  }
  s->loop = loop;
  al_list_init(&s->paces);
  *out = s;
  return 0;
}

int al__pace_get(al_http_client_t *c, const char *base_url, const char *api_key,
                 al_pace_t **out) {
  al_pace_set_t **sp = al__http_client_paces(c);
  al_pace_t *p;
  al_list_t *it;
  char *key;
  size_t n;
  int rc;

  *out = NULL;
  if (al__http_client_closing(c)) {
    return AL_ECLOSING;
  }
  if (*sp == NULL &&
      (rc = al__pace_set_new(al__http_client_loop(c), sp)) != 0) {
    return rc;
  }
  n = strlen(base_url != NULL ? base_url : "") + 18;
  key = al_malloc(n);
  if (key == NULL) {
    return AL_ENOMEM;
  }
  snprintf(key, n, "%s\n%016llx", base_url != NULL ? base_url : "",
           (unsigned long long)key_hash(api_key));
  al_list_foreach(it, &(*sp)->paces) {
    p = AL_CONTAINER_OF(it, al_pace_t, node);
    if (strcmp(p->key, key) == 0) {
      al_free(key);
      *out = p;
      return 0;
    }
  }
  p = al_calloc(1, sizeof(*p));
  if (p == NULL) {
    al_free(key);
    return AL_ENOMEM;
  }
  p->set = *sp;
  p->key = key;
  al__pace_gate_init(&p->gate);
  al_list_init(&p->queue);
  /* Stopped while nobody waits, so an idle pacer keeps no loop alive. */
  uv_timer_init((*sp)->loop, &p->timer);
  al_list_insert_tail(&(*sp)->paces, &p->node);
  *out = p;
  return 0;
}

void al__pace_set_rpm(al_pace_t *p, int rpm, int burst) {
  if (rpm <= 0) {
    return;
  }
  if (p->gate.rpm == 0 || rpm < p->gate.rpm) {
    p->gate.rpm = rpm;
  }
  p->gate.burst = AL_MAX(p->gate.burst, AL_MAX(burst, 1));
}

int al__pace_acquire(al_pace_t *p, al_pace_wait_t *w, al_pace_wait_cb cb) {
  int64_t now = now_of(p);

  al__pace_cancel(w);
  if (al_list_empty(&p->queue) && may_go(p, now)) {
    grant(p, w, now);
    return 0;
  }
  w->pace = p;
  w->cb = cb;
  w->queued = true;
  al_list_insert_tail(&p->queue, &w->node);
  p->queued++;
  arm(p);
  return 1;
}

void al__pace_cancel(al_pace_wait_t *w) {
  al_pace_t *p = w->pace;

  if (w->probe) {
    /* A probe given up without an answer: the next request probes. */
    al__pace_done(w, true);
  }
  if (!w->queued) {
    return;
  }
  al_list_remove(&w->node);
  w->queued = false;
  p->queued--;
  if (al_list_empty(&p->queue)) {
    uv_timer_stop(&p->timer);
  }
}

void al__pace_done(al_pace_wait_t *w, bool limited) {
  al_pace_t *p = w->pace;

  if (!w->probe) {
    return;
  }
  w->probe = false;
  p->probing = false;
  /* Limited (or no answer): the next request probes again, after the
   * cool-down its 429 set. Success: the queue goes, as the gate allows.
   * Either way dispatch happens in the timer, never inside this call. */
  p->cooled = p->cooled || limited;
  arm(p);
}

void al__pace_cool(al_pace_t *p, int64_t delay_ms) {
  p->cooled = true;
  al__pace_gate_cool(&p->gate, now_of(p) + AL_MAX(delay_ms, 0));
  if (!al_list_empty(&p->queue)) {
    arm(p);
  }
}

size_t al__pace_queued(const al_pace_t *p) {
  return p->queued;
}

static void on_pace_closed(uv_handle_t *h) {
  al_pace_t *p = AL_CONTAINER_OF((uv_timer_t *)h, al_pace_t, timer);
  al_pace_set_t *s = p->set;

  al_free(p->key);
  al_free(p);
  if (--s->closing == 0) {
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;

    al_free(s);
    cb(arg);
  }
}

bool al__pace_set_close(al_pace_set_t *s, void (*cb)(void *arg), void *arg) {
  assert(!s->closed);
  s->closed = true;
  s->close_cb = cb;
  s->close_arg = arg;
  while (!al_list_empty(&s->paces)) {
    al_pace_t *p = AL_CONTAINER_OF(s->paces.next, al_pace_t, node);

    al_list_remove(&p->node);
    /* Waiters still queued belong to agents that were not closed first
     * (a misuse the client's header forbids): they are dropped silently,
     * as a cancel would. */
    while (!al_list_empty(&p->queue)) {
      al__pace_cancel(AL_CONTAINER_OF(p->queue.next, al_pace_wait_t, node));
    }
    s->closing++;
    uv_close((uv_handle_t *)&p->timer, on_pace_closed);
  }
  if (s->closing == 0) {
    al_free(s); /* no pacer was ever made (an allocation failed) */
    return false;
  }
  return true;
}
