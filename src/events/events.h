/* Events layer: the LoopEvent bus and the JSON form of every event
 * (SPEC §10, CONVENTIONS §7.6-7.7).
 *
 * The bus delivers events synchronously to in-process subscribers. It is
 * built for re-entrancy (STYLE §3.3.6-7): a subscriber may unsubscribe
 * itself or another, subscribe new ones (they see only later events),
 * publish (queued with copied payloads and delivered after the current
 * walk, in order, so dispatch never recurses) or free the bus (it is
 * freed when the walk unwinds; nothing is delivered after that).
 *
 * Publishing outside a walk copies nothing and allocates nothing: the
 * text_delta hot path stamps the caller's event in place (no clock read
 * when the delta brings its chunk's time) and makes one indirect call per
 * subscriber. Only events published from inside a callback are
 * copied, into one bounded allocation each.
 *
 * seq and ts_ns are stamped by the bus at publish time, from the
 * session's counter and the bus's clock (injectable, so golden logs are
 * stable); a streamed delta may bring its own (al__events_publish). */
#ifndef AL_EVENTS_H
#define AL_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentloop/events.h"
#include "common/common.h"

/* ---- sessions ------------------------------------------------------------ */

#define AL__EVENTS_SESSION_MAX 128

/* The per-session sequence counter. Owned by whoever owns the session (the
 * agent, the daemon's session record) and passed to every publish; the
 * id is copied in so an event never points into freed memory. */
typedef struct {
  char id[AL__EVENTS_SESSION_MAX + 1];
  uint64_t next_seq;
} al__events_session_t;

/* Sets the id and the seq the next event gets (1 for a new session, the
 * transcript's last seq + 1 for a resumed one; 0 is taken to mean 1).
 * AL_EINVAL if id is NULL or longer than AL__EVENTS_SESSION_MAX. */
int al__events_session_set(al__events_session_t *s, const char *id,
                           uint64_t next_seq);

/* ---- bus ----------------------------------------------------------------- */

typedef uint64_t (*al__events_clock_fn)(void *data);

typedef struct {
  /* Bounds of the queue of events published during a walk: at most
   * max_pending events and max_pending_bytes of copied payload. */
  size_t max_pending;
  size_t max_pending_bytes;
  /* Time source for ts_ns; NULL means al_now_ns (uv_hrtime). */
  al__events_clock_fn clock;
  void *clock_data;
} al__events_bus_options_t;

typedef struct al__events_bus_s al__events_bus_t;
typedef struct al__events_sub_s al__events_sub_t;

void al__events_bus_options_init(al__events_bus_options_t *o);
/* opts may be NULL for the defaults. */
int al__events_bus_new(al__events_bus_t **out,
                       const al__events_bus_options_t *opts);
/* Frees the bus, its subscribers and undelivered events. From inside a
 * callback of this bus, the free happens when the walk unwinds and the
 * publish() that started it returns AL_ECLOSING; nothing more is
 * delivered either way. */
void al__events_bus_free(al__events_bus_t *bus);

/* Adds a subscriber (at the end: subscribers are called in the order they
 * subscribed). *out is the handle for unsubscribe; it is freed by
 * unsubscribe or with the bus. */
int al__events_subscribe(al__events_bus_t *bus, al_event_cb cb, void *data,
                         al__events_sub_t **out);
/* After it returns, cb is not called again, even later in the current
 * walk. */
void al__events_unsubscribe(al__events_bus_t *bus, al__events_sub_t *sub);
size_t al__events_subscriber_count(const al__events_bus_t *bus);

/* All zero, never written: `ev = al__events_blank;` starts an event with
 * vector copies, where GCC turns a memset of a struct this size into
 * `rep stos` (slow to start, and its stores do not forward to the loads of
 * the publish that follows: seen in the per-delta profile). Declared
 * const but defined apart, so callers cannot fold it back into memset. */
extern const al_event_t al__events_blank;

/* Publishes ev (type, run, turn and payload; session, seq and ts_ns are
 * stamped by the bus into *ev itself, which is what subscribers get, so ev
 * must stay valid for the whole call: a local, never freed by a
 * subscriber. On return ts_ns is as the caller gave it; session and seq
 * hold the stamps). The exception: a
 * delta event (text, thinking, tool input) with a non-zero ts_ns keeps it
 * (when the chunk carrying it was received: no clock read per delta),
 * raised to the bus's latest stamp if that is later, so ts_ns never
 * decreases. Outside a walk it is delivered now; inside one it is copied
 * and queued (AL_ETOOBIG when the queue is full, AL_ENOMEM; the event then
 * takes no seq). Returns AL_ECLOSING if a subscriber freed the bus
 * meanwhile: the caller must not touch the bus
 * (or, usually, itself) again. Publishing on a bus that is being freed
 * returns AL_ECLOSING too. */
int al__events_publish(al__events_bus_t *bus, al__events_session_t *session,
                       al_event_t *ev);

/* A tap sees every event as it is published (stamped, before delivery or
 * queueing), NULL to remove it: a parent agent forwards its child's events
 * through it (loop/task.c), so a cancel from inside a walk still reaches
 * the parent before the parent's own end. It must not free the bus; it
 * may publish on other buses. */
void al__events_bus_set_tap(al__events_bus_t *bus, al_event_cb cb,
                            void *data);

/* ---- JSON ---------------------------------------------------------------- */

/* The event as a JSON object (fields as in docs/events.md, in that order);
 * NULL when out of memory. Strings are sanitized to valid UTF-8 (U+FFFD
 * for bad bytes); JSON-text fields that do not parse become strings. */
json_t *al__events_to_json(const al_event_t *ev);
/* A content block as compact JSON text, exactly as json_dumps(JSON_COMPACT)
 * writes it, with a fast path for blocks whose members are all strings
 * (text, thinking). al_free'd by the caller; NULL when out of memory. */
char *al__events_dump_block(const json_t *block, size_t *len);

/* Appends the event as one compact NDJSON line (with its '\n') to out.
 * AL_ETOOBIG if it does not fit (out is unchanged), AL_ENOMEM. */
int al__events_encode_line(const al_event_t *ev, al_buf_t *out);

#endif
