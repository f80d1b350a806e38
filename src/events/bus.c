/* The LoopEvent bus: names, sessions, subscribers, deferred delivery.
 *
 * Subscribers sit on an intrusive list. A walk never removes nodes: an
 * unsubscribe during a walk marks the node dead, and the sweep after the
 * walk frees it (redis processTimeEvents), so the walk's `next` pointer
 * stays valid whatever the callbacks do. Each accepted event gets a bus-wide
 * publish number; a subscriber remembers the number at which it subscribed
 * and skips events up to it, so one added during a walk sees neither the
 * current event nor those already queued behind it.
 *
 * Events published during a walk are copied (payload slices and session
 * id in one allocation) onto a FIFO and delivered by the outermost
 * publish once the current walk is over, which keeps dispatch flat: a
 * subscriber never runs inside another subscriber. */
#include "events/events.h"

#include <assert.h>

struct al__events_sub_s {
  al_list_t node;
  al_event_cb cb;
  void *data;
  uint64_t since; /* gets only events with a publish number > since */
  bool dead;
};

typedef struct {
  al_list_t node;
  size_t bytes;
  uint64_t pubno;
  al_event_t ev; /* slices point into the bytes after this struct */
} pending_t;

struct al__events_bus_s {
  al_list_t subs;
  al_list_t pending;
  size_t npending;
  size_t pending_bytes;
  size_t nsubs; /* live ones */
  uint64_t pubno; /* events published so far (accepted ones) */
  uint64_t last_ts; /* the latest ts_ns stamped */
  al__events_bus_options_t opts;
  bool walking;
  bool freed; /* al__events_bus_free called during a walk */
  bool swept; /* no node marked dead since the last sweep */
  al_event_cb tap; /* al__events_bus_set_tap */
  void *tap_data;
};

/* ---- names --------------------------------------------------------------- */

static const char *const type_names[] = {
#define AL_EVENT_NAME_GEN(name, str) str,
    AL_EVENT_TYPE_MAP(AL_EVENT_NAME_GEN)
#undef AL_EVENT_NAME_GEN
};

const char *al_event_type_name(al_event_type_t type) {
  if ((unsigned)type >= AL_ARRAY_SIZE(type_names)) {
    return NULL;
  }
  return type_names[type];
}

int al_event_type_from_name(const char *name, size_t len,
                            al_event_type_t *out) {
  size_t i;

  if (name == NULL) {
    return AL_EINVAL;
  }
  for (i = 0; i < AL_ARRAY_SIZE(type_names); i++) {
    if (strlen(type_names[i]) == len && memcmp(type_names[i], name, len) == 0) {
      *out = (al_event_type_t)i;
      return 0;
    }
  }
  return AL_EINVAL;
}

/* ---- sessions ------------------------------------------------------------ */

int al__events_session_set(al__events_session_t *s, const char *id,
                           uint64_t next_seq) {
  size_t n;

  if (id == NULL || (n = strlen(id)) > AL__EVENTS_SESSION_MAX) {
    return AL_EINVAL;
  }
  memcpy(s->id, id, n + 1);
  s->next_seq = next_seq == 0 ? 1 : next_seq;
  return 0;
}

/* ---- bus ----------------------------------------------------------------- */

const al_event_t al__events_blank;

static uint64_t default_clock(void *data) {
  (void)data;
  return al_now_ns();
}

void al__events_bus_options_init(al__events_bus_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->max_pending = 4096;
  o->max_pending_bytes = 16u << 20;
}

int al__events_bus_new(al__events_bus_t **out,
                       const al__events_bus_options_t *opts) {
  al__events_bus_t *bus;

  bus = al_calloc(1, sizeof(*bus));
  if (bus == NULL) {
    return AL_ENOMEM;
  }
  if (opts != NULL) {
    bus->opts = *opts;
  } else {
    al__events_bus_options_init(&bus->opts);
  }
  if (bus->opts.clock == NULL) {
    bus->opts.clock = default_clock;
  }
  al_list_init(&bus->subs);
  al_list_init(&bus->pending);
  bus->swept = true;
  *out = bus;
  return 0;
}

static void drop_pending(al__events_bus_t *bus) {
  while (!al_list_empty(&bus->pending)) {
    pending_t *p = AL_CONTAINER_OF(bus->pending.next, pending_t, node);

    al_list_remove(&p->node);
    al_free(p);
  }
  bus->npending = 0;
  bus->pending_bytes = 0;
}

static void destroy(al__events_bus_t *bus) {
  drop_pending(bus);
  while (!al_list_empty(&bus->subs)) {
    al__events_sub_t *s = AL_CONTAINER_OF(bus->subs.next, al__events_sub_t,
                                          node);

    al_list_remove(&s->node);
    al_free(s);
  }
  al_free(bus);
}

void al__events_bus_free(al__events_bus_t *bus) {
  if (bus == NULL) {
    return;
  }
  assert(!bus->freed); /* freeing twice is a bug, as uv_close twice is */
  if (bus->walking) {
    /* The walk below us still holds pointers into the bus; it frees it on
     * the way out. Undelivered events go now: nothing after close. */
    bus->freed = true;
    drop_pending(bus);
    return;
  }
  destroy(bus);
}

int al__events_subscribe(al__events_bus_t *bus, al_event_cb cb, void *data,
                         al__events_sub_t **out) {
  al__events_sub_t *s;

  if (cb == NULL || bus->freed) {
    return bus->freed ? AL_ECLOSING : AL_EINVAL;
  }
  s = al_calloc(1, sizeof(*s));
  if (s == NULL) {
    return AL_ENOMEM;
  }
  s->cb = cb;
  s->data = data;
  s->since = bus->pubno;
  al_list_insert_tail(&bus->subs, &s->node);
  bus->nsubs++;
  *out = s;
  return 0;
}

void al__events_unsubscribe(al__events_bus_t *bus, al__events_sub_t *sub) {
  if (sub == NULL || sub->dead) {
    return;
  }
  sub->dead = true;
  bus->nsubs--;
  if (!bus->walking) {
    al_list_remove(&sub->node);
    al_free(sub);
  } else {
    bus->swept = false;
  }
}

size_t al__events_subscriber_count(const al__events_bus_t *bus) {
  return bus->nsubs;
}

static void sweep(al__events_bus_t *bus) {
  al_list_t *pos = bus->subs.next;

  if (bus->swept) {
    return; /* nothing to free: no walk per publish over the list */
  }
  bus->swept = true;
  while (pos != &bus->subs) {
    al__events_sub_t *s = AL_CONTAINER_OF(pos, al__events_sub_t, node);

    pos = pos->next;
    if (s->dead) {
      al_list_remove(&s->node);
      al_free(s);
    }
  }
}

/* Pointers to the slices the payload of ev uses, so a deferred copy can
 * take all of them without knowing the types. Returns how many. */
static size_t payload_slices(al_event_t *ev, al_slice_t **sl) {
  size_t n = 0;

#define SL(field) sl[n++] = &ev->u.field
  switch (ev->type) {
  case AL_EVENT_RUN_STARTED:
    SL(run_started.model);
    SL(run_started.provider);
    SL(run_started.cwd);
    SL(run_started.tools);
    SL(run_started.sandbox);
    break;
  case AL_EVENT_STREAM_REQUEST_START:
    SL(stream_request.model);
    break;
  case AL_EVENT_TEXT_DELTA:
  case AL_EVENT_THINKING_DELTA:
  case AL_EVENT_TOOL_INPUT_DELTA:
    SL(delta.text);
    SL(delta.call_id);
    break;
  case AL_EVENT_CONTENT_BLOCK_COMPLETED:
    SL(block.block_type);
    SL(block.block);
    break;
  case AL_EVENT_TOOL_USE_QUEUED:
  case AL_EVENT_TOOL_USE_STARTED:
  case AL_EVENT_TOOL_PROGRESS:
  case AL_EVENT_TOOL_USE_COMPLETED:
  case AL_EVENT_TOOL_EXECUTION_ABORTED:
    SL(tool.call_id);
    SL(tool.name);
    SL(tool.input);
    SL(tool.content);
    SL(tool.reason);
    break;
  case AL_EVENT_APPROVAL_REQUIRED:
  case AL_EVENT_APPROVAL_RESPONSE:
    SL(approval.request);
    SL(approval.call_id);
    SL(approval.name);
    SL(approval.input);
    SL(approval.category);
    SL(approval.decision);
    SL(approval.reason);
    break;
  case AL_EVENT_RETRY:
    SL(retry.kind);
    SL(retry.message);
    break;
  case AL_EVENT_API_ERROR:
    SL(api_error.kind);
    SL(api_error.message);
    break;
  case AL_EVENT_MODEL_FALLBACK:
    SL(fallback.from);
    SL(fallback.to);
    SL(fallback.reason);
    break;
  case AL_EVENT_TOMBSTONE:
    SL(tombstone.message_id);
    SL(tombstone.reason);
    break;
  case AL_EVENT_MICRO_COMPACTION:
  case AL_EVENT_COMPACTION_STARTED:
  case AL_EVENT_COMPACTION_COMPLETED:
    SL(compaction.trigger);
    SL(compaction.call_ids);
    break;
  case AL_EVENT_TURN_COMPLETED:
    SL(turn_completed.stop_reason);
    break;
  case AL_EVENT_HISTORY_REPAIRED:
    SL(repaired.repairs);
    break;
  case AL_EVENT_INTERRUPTED:
    SL(interrupted.reason);
    break;
  case AL_EVENT_MCP_SERVER_STATE:
  case AL_EVENT_MCP_TOOLS_CHANGED:
  case AL_EVENT_MCP_WARNING:
    SL(mcp.server);
    SL(mcp.state);
    SL(mcp.error);
    break;
  case AL_EVENT_MCP_TOOL_CALL_BEGIN:
  case AL_EVENT_MCP_TOOL_CALL_END:
    SL(mcp_call.server);
    SL(mcp_call.tool);
    SL(mcp_call.name);
    SL(mcp_call.call_id);
    SL(mcp_call.end);
    break;
  case AL_EVENT_MCP_STARTUP_COMPLETE:
    SL(mcp_startup.ready);
    SL(mcp_startup.failed);
    SL(mcp_startup.pending);
    break;
  case AL_EVENT_HOOK_EXECUTED:
    SL(hook.hook);
    SL(hook.event);
    SL(hook.decision);
    SL(hook.outcome);
    SL(hook.reason);
    SL(hook.call_id);
    SL(hook.name);
    break;
  case AL_EVENT_ERROR:
    SL(error.message);
    break;
  case AL_EVENT_FINAL:
    SL(final.text);
    break;
  case AL_EVENT_USER_MESSAGE:
    SL(user_message.text);
    SL(user_message.tool_results);
    break;
  case AL_EVENT_PROVIDER_NOTICE:
    SL(notice.kind);
    SL(notice.message);
    break;
  case AL_EVENT_CITATION:
    SL(citation.citation);
    break;
  case AL_EVENT_SUBAGENT_STARTED:
  case AL_EVENT_SUBAGENT_COMPLETED:
    SL(subagent.task_id);
    SL(subagent.call_id);
    SL(subagent.child_session);
    SL(subagent.agent);
    SL(subagent.description);
    SL(subagent.outcome);
    SL(subagent.result);
    break;
  default:
    break;
  }
#undef SL
  return n;
}

#define MAX_SLICES 8

/* Copies ev (already stamped) onto the pending queue. */
static int enqueue(al__events_bus_t *bus, const al_event_t *ev,
                   uint64_t pubno) {
  al_slice_t *sl[MAX_SLICES];
  al_event_t tmp = *ev;
  size_t n, i, bytes, idlen, pathlen;
  pending_t *p;
  char *w;

  if (bus->npending >= bus->opts.max_pending) {
    return AL_ETOOBIG;
  }
  n = payload_slices(&tmp, sl);
  idlen = strlen(ev->session) + 1;
  pathlen = ev->path != NULL ? strlen(ev->path) + 1 : 0;
  bytes = idlen + pathlen;
  if (bytes > bus->opts.max_pending_bytes) {
    return AL_ETOOBIG;
  }
  for (i = 0; i < n; i++) {
    if (sl[i]->ptr == NULL) {
      continue;
    }
    if (sl[i]->len > bus->opts.max_pending_bytes - bytes) {
      return AL_ETOOBIG;
    }
    bytes += sl[i]->len;
  }
  if (bytes > bus->opts.max_pending_bytes - bus->pending_bytes ||
      bus->pending_bytes > bus->opts.max_pending_bytes) {
    return AL_ETOOBIG;
  }
  p = al_malloc(sizeof(*p) + bytes);
  if (p == NULL) {
    return AL_ENOMEM;
  }
  w = (char *)(p + 1);
  memcpy(w, ev->session, idlen);
  tmp.session = w;
  w += idlen;
  if (ev->path != NULL) {
    memcpy(w, ev->path, pathlen);
    tmp.path = w;
    w += pathlen;
  }
  for (i = 0; i < n; i++) {
    if (sl[i]->ptr == NULL) {
      continue;
    }
    /* memcpy with len 0 is fine but ptr must stay non-NULL ("empty"). */
    memcpy(w, sl[i]->ptr, sl[i]->len);
    sl[i]->ptr = w;
    w += sl[i]->len;
  }
  p->ev = tmp;
  p->bytes = bytes;
  p->pubno = pubno;
  al_list_insert_tail(&bus->pending, &p->node);
  bus->npending++;
  bus->pending_bytes += bytes;
  return 0;
}

/* One event to every subscriber that existed before it. Stops as soon as
 * the bus is freed from a callback. */
static void deliver(al__events_bus_t *bus, const al_event_t *ev,
                    uint64_t pubno) {
  al_list_t *pos;

  al_list_foreach(pos, &bus->subs) {
    al__events_sub_t *s = AL_CONTAINER_OF(pos, al__events_sub_t, node);

    if (s->dead || s->since >= pubno) {
      continue;
    }
    s->cb(ev, s->data);
    if (bus->freed) {
      return;
    }
  }
}


void al__events_bus_set_tap(al__events_bus_t *bus, al_event_cb cb,
                            void *data) {
  bus->tap = cb;
  bus->tap_data = data;
}

int al__events_publish(al__events_bus_t *bus, al__events_session_t *session,
                       al_event_t *ev) {
  uint64_t given_ts = ev->ts_ns;
  int rc;

  if (bus->freed) {
    return AL_ECLOSING;
  }
  /* Stamped in place and delivered from the caller's struct: a copy here
   * read back the stores the caller had just made in pieces, which do not
   * forward to wider loads (a stall per event in the profile). For the
   * same reason only ts_ns, which decides the next publish of this struct,
   * is put back; seq and session are always overwritten. */
  /* A re-posted child event (path set) keeps the child's session id; its
   * seq is this stream's. */
  if (ev->path == NULL || ev->session == NULL) {
    ev->session = session->id;
  }
  ev->seq = session->next_seq;
  /* A delta's own time (when the chunk carrying it was received) saves a
   * clock read per streamed delta; it may predate an event stamped since,
   * so it is clamped to keep ts_ns monotonic on the bus. */
  if (given_ts != 0 && (ev->type == AL_EVENT_TEXT_DELTA ||
                        ev->type == AL_EVENT_THINKING_DELTA ||
                        ev->type == AL_EVENT_TOOL_INPUT_DELTA)) {
    ev->ts_ns = given_ts > bus->last_ts ? given_ts : bus->last_ts;
  } else {
    ev->ts_ns = bus->opts.clock(bus->opts.clock_data);
  }
  bus->last_ts = ev->ts_ns;
  if (bus->tap != NULL) {
    /* At publish time, not delivery: what a tap forwards keeps the order
     * in which things happened, even when this bus is mid-walk. */
    bus->tap(ev, bus->tap_data);
    if (bus->freed) {
      ev->ts_ns = given_ts;
      return AL_ECLOSING;
    }
  }
  if (bus->walking) {
    if ((rc = enqueue(bus, ev, bus->pubno + 1)) == 0) {
      session->next_seq++;
      bus->pubno++;
    }
    ev->ts_ns = given_ts;
    return rc;
  }
  session->next_seq++;
  bus->pubno++;
  if (bus->nsubs == 0) {
    ev->ts_ns = given_ts;
    return 0;
  }

  /* The session must not be touched from here on: a callback may free
   * its owner. */
  bus->walking = true;
  deliver(bus, ev, bus->pubno);
  while (!bus->freed && !al_list_empty(&bus->pending)) {
    pending_t *p = AL_CONTAINER_OF(bus->pending.next, pending_t, node);

    al_list_remove(&p->node);
    bus->npending--;
    bus->pending_bytes -= p->bytes;
    deliver(bus, &p->ev, p->pubno);
    al_free(p);
  }
  bus->walking = false;
  ev->ts_ns = given_ts;
  if (bus->freed) {
    destroy(bus);
    return AL_ECLOSING;
  }
  sweep(bus);
  return 0;
}
