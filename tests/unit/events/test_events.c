/* Tests of the events layer: the type table, the bus (seq, clock, order,
 * re-entrancy, deferred delivery, close from a callback, no allocation on
 * the hot path) and the JSON form of every event against a golden log. */
#include <jansson.h>

#include "agentloop/agentloop.h"
#include "common/common.h"
#include "events/events.h"
#include "test.h"

#define S(lit) ((al_slice_t){(lit), sizeof(lit) - 1})

/* ---- helpers ------------------------------------------------------------- */

static uint64_t fake_now;

/* Ticks 1000 ns per reading, so each event's ts_ns says how many clock
 * reads preceded it. */
static uint64_t fake_clock(void *data) {
  (void)data;
  fake_now += 1000;
  return fake_now;
}

static al__events_bus_t *new_bus(size_t max_pending) {
  al__events_bus_options_t o;
  al__events_bus_t *bus;

  al__events_bus_options_init(&o);
  o.clock = fake_clock;
  if (max_pending != 0) {
    o.max_pending = max_pending;
  }
  ASSERT_EQ(al__events_bus_new(&bus, &o), 0);
  return bus;
}

static al_event_t text_event(const char *text) {
  al_event_t ev;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TEXT_DELTA;
  ev.run = 1;
  ev.turn = 1;
  ev.u.delta.text.ptr = text;
  ev.u.delta.text.len = strlen(text);
  return ev;
}

/* A log of deliveries: "<who>:<seq>:<text>" joined with spaces. */
typedef struct {
  char buf[2048];
  size_t len;
  int calls;
} log_t;

static void log_add(log_t *l, const char *who, const al_event_t *ev) {
  int n = snprintf(l->buf + l->len, sizeof(l->buf) - l->len, "%s%s:%" PRIu64
                   ":%.*s", l->len ? " " : "", who, ev->seq,
                   (int)ev->u.delta.text.len, ev->u.delta.text.ptr);

  ASSERT(n > 0 && (size_t)n < sizeof(l->buf) - l->len);
  l->len += (size_t)n;
  l->calls++;
}

/* One subscriber record; its callback logs and then runs an optional
 * action (the re-entrancy cases). */
typedef struct sub_s {
  const char *who;
  log_t *log;
  al__events_bus_t *bus;
  al__events_session_t *session;
  al__events_sub_t *handle;
  void (*action)(struct sub_s *self, const al_event_t *ev);
  struct sub_s *other;
  int fired;
} sub_t;

static void sub_cb(const al_event_t *ev, void *data) {
  sub_t *s = data;

  log_add(s->log, s->who, ev);
  if (s->action != NULL) {
    s->action(s, ev);
  }
}

static void add_sub(sub_t *s, const char *who, log_t *log,
                    al__events_bus_t *bus, al__events_session_t *session) {
  memset(s, 0, sizeof(*s));
  s->who = who;
  s->log = log;
  s->bus = bus;
  s->session = session;
  ASSERT_EQ(al__events_subscribe(bus, sub_cb, s, &s->handle), 0);
}

static int publish_text(al__events_bus_t *bus, al__events_session_t *ses,
                        const char *text) {
  al_event_t ev = text_event(text);

  return al__events_publish(bus, ses, &ev);
}

/* ---- counting allocator -------------------------------------------------- */

/* Counts allocations (n_allocs) and blocks alive (n_live). The runner ends
 * a test with _exit, so LeakSanitizer never looks: the live count is what
 * proves the bus frees everything, with or without ASan. */
static long n_allocs;
static long n_live;

static void *count_malloc(size_t n) {
  void *p = malloc(n);

  n_allocs++;
  n_live += p != NULL;
  return p;
}
static void *count_realloc(void *p, size_t n) {
  void *q = realloc(p, n);

  n_allocs++;
  n_live += p == NULL && q != NULL;
  return q;
}
static void *count_calloc(size_t c, size_t n) {
  void *p = calloc(c, n);

  n_allocs++;
  n_live += p != NULL;
  return p;
}
static void count_free(void *p) {
  n_live -= p != NULL;
  free(p);
}

/* Installs the counting allocator; returns the live count to come back
 * to. */
static long count_start(void) {
  ASSERT_EQ(al_set_allocator(count_malloc, count_realloc, count_calloc,
                             count_free), 0);
  return n_live;
}

/* ---- names --------------------------------------------------------------- */

static const char *const spec_names[] = {
    "run_started", "turn_started", "stream_request_start", "text_delta",
    "thinking_delta", "tool_input_delta", "content_block_completed",
    "tool_use_queued", "tool_use_started", "tool_progress",
    "tool_use_completed", "tool_execution_aborted", "approval_required",
    "approval_response", "usage", "retry", "api_error",
    "stream_stall_detected", "model_fallback", "tombstone",
    "micro_compaction", "compaction_started", "compaction_completed",
    "turn_completed", "max_turns_reached", "interrupted", "error", "final",
    "context_warning", "history_repaired",
    /* SPEC §16 (MCP and hooks) */
    "mcp_server_state", "mcp_tools_changed", "mcp_warning", "hook_executed",
    /* issue 12 */
    "user_message"};

TEST_IMPL(events_names_round_trip) {
  al_event_type_t t;
  size_t i;
  int k;

  ASSERT_EQ(AL_ARRAY_SIZE(spec_names), 35);
  ASSERT_EQ(AL_EVENT_TYPE_COUNT, 42);
  /* Every SPEC §10 name is in the table and maps back to itself. */
  for (i = 0; i < AL_ARRAY_SIZE(spec_names); i++) {
    t = AL_EVENT_TYPE_COUNT;
    ASSERT_EQ(al_event_type_from_name(spec_names[i], strlen(spec_names[i]),
                                      &t), 0);
    ASSERT_STR_EQ(al_event_type_name(t), spec_names[i]);
  }
  /* And every enum value has a distinct name. */
  for (k = 0; k < AL_EVENT_TYPE_COUNT; k++) {
    const char *n = al_event_type_name((al_event_type_t)k);

    ASSERT_NOT_NULL(n);
    ASSERT_EQ(al_event_type_from_name(n, strlen(n), &t), 0);
    ASSERT_EQ(t, k);
  }
  ASSERT_STR_EQ(al_event_type_name(AL_EVENT_TEXT_DELTA), "text_delta");
  ASSERT_STR_EQ(al_event_type_name(AL_EVENT_FINAL), "final");
  ASSERT_NULL(al_event_type_name(AL_EVENT_TYPE_COUNT));
  ASSERT_NULL(al_event_type_name((al_event_type_t)-1));
  /* Length-delimited: a prefix or a longer string is not a match. */
  ASSERT_EQ(al_event_type_from_name("text_deltaX", 10, &t), 0);
  ASSERT_EQ(t, AL_EVENT_TEXT_DELTA);
  ASSERT_EQ(al_event_type_from_name("text_delt", 9, &t), AL_EINVAL);
  ASSERT_EQ(al_event_type_from_name("finalx", 6, &t), AL_EINVAL);
  ASSERT_EQ(al_event_type_from_name("", 0, &t), AL_EINVAL);
  ASSERT_EQ(al_event_type_from_name(NULL, 0, &t), AL_EINVAL);
  return 0;
}

/* ---- seq and clock ------------------------------------------------------- */

TEST_IMPL(events_seq_per_session) {
  al__events_bus_t *bus1 = new_bus(0);
  al__events_bus_t *bus2 = new_bus(0);
  al__events_session_t a, b, c;
  char longid[AL__EVENTS_SESSION_MAX + 2];
  log_t log;
  sub_t s1, s2;

  memset(&log, 0, sizeof(log));
  ASSERT_EQ(al__events_session_set(&a, "a", 0), 0);
  ASSERT_EQ(al__events_session_set(&b, "b", 1), 0);
  /* A resumed session continues after its transcript's last seq. */
  ASSERT_EQ(al__events_session_set(&c, "c", 42), 0);
  memset(longid, 'x', sizeof(longid) - 1);
  longid[sizeof(longid) - 1] = '\0';
  ASSERT_EQ(al__events_session_set(&c, longid, 1), AL_EINVAL);
  ASSERT_EQ(al__events_session_set(&c, NULL, 1), AL_EINVAL);
  ASSERT_STR_EQ(c.id, "c");
  add_sub(&s1, "1", &log, bus1, NULL);
  add_sub(&s2, "2", &log, bus2, NULL);

  ASSERT_EQ(publish_text(bus1, &a, "x"), 0);
  ASSERT_EQ(publish_text(bus1, &a, "x"), 0);
  ASSERT_EQ(publish_text(bus1, &b, "y"), 0);
  ASSERT_EQ(publish_text(bus1, &a, "x"), 0);
  ASSERT_EQ(publish_text(bus2, &c, "z"), 0);
  ASSERT_EQ(publish_text(bus1, &b, "y"), 0);
  ASSERT_EQ(publish_text(bus2, &c, "z"), 0);
  ASSERT_STR_EQ(log.buf, "1:1:x 1:2:x 1:1:y 1:3:x 2:42:z 1:2:y 2:43:z");
  /* A bus with no subscriber still numbers events (transcripts replay by
   * seq, so a gap would look like loss). */
  al__events_unsubscribe(bus2, s2.handle);
  ASSERT_EQ(publish_text(bus2, &c, "z"), 0);
  ASSERT_EQ(c.next_seq, 45);
  al__events_bus_free(bus1);
  al__events_bus_free(bus2);
  return 0;
}

static uint64_t seen_ts[4];
static const char *seen_session;

static void ts_cb(const al_event_t *ev, void *data) {
  int *n = data;

  seen_ts[(*n)++] = ev->ts_ns;
  seen_session = ev->session;
}

TEST_IMPL(events_injected_clock) {
  al__events_bus_t *bus;
  al__events_sub_t *h;
  al__events_session_t ses;
  al_event_t ev = text_event("t");
  uint64_t before, after;
  int n = 0;

  fake_now = 5000;
  bus = new_bus(0);
  ASSERT_EQ(al__events_session_set(&ses, "sess-1", 1), 0);
  ASSERT_EQ(al__events_subscribe(bus, ts_cb, &n, &h), 0);
  /* The caller's seq/session are ignored: the bus stamps them (ts_ns as
   * well, unless a delta brings its own: events_delta_own_ts). */
  ev.ts_ns = 0;
  ev.seq = 99;
  ev.session = "other";
  ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0);
  ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0);
  ASSERT_EQ(seen_ts[0], 6000);
  ASSERT_EQ(seen_ts[1], 7000);
  ASSERT_STR_EQ(seen_session, "sess-1");
  al__events_bus_free(bus);

  /* Without an injected clock: CLOCK_MONOTONIC, the uv_hrtime clock. */
  ASSERT_EQ(al__events_bus_new(&bus, NULL), 0);
  ASSERT_EQ(al__events_subscribe(bus, ts_cb, &n, &h), 0);
  before = uv_hrtime();
  ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0);
  after = uv_hrtime();
  ASSERT_EQ(n, 3);
  ASSERT(seen_ts[2] >= before && seen_ts[2] <= after);
  al__events_bus_free(bus);
  return 0;
}

/* A delta's own ts_ns (the time its chunk was received) replaces the clock
 * read, but never takes ts_ns below an earlier stamp; other types ignore
 * a caller's ts_ns. */
TEST_IMPL(events_delta_own_ts) {
  al__events_bus_t *bus;
  al__events_sub_t *h;
  al__events_session_t ses;
  al_event_t ev = text_event("t");
  al_event_t other;
  int n = 0;

  fake_now = 5000;
  bus = new_bus(0);
  ASSERT_EQ(al__events_session_set(&ses, "sess-1", 1), 0);
  ASSERT_EQ(al__events_subscribe(bus, ts_cb, &n, &h), 0);
  ev.ts_ns = 5500;
  ev.seq = 0;
  ev.session = NULL;
  ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0);
  ASSERT_EQ(fake_now, 5000); /* no clock read */
  /* Stamped in place for delivery; ts_ns given back as it was. */
  ASSERT_EQ(ev.ts_ns, 5500);
  ASSERT_EQ(ev.seq, 1);
  ASSERT_STR_EQ(ev.session, "sess-1");
  other = ev;
  other.type = AL_EVENT_TURN_STARTED;
  ASSERT_EQ(al__events_publish(bus, &ses, &other), 0); /* reads 6000 */
  ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0); /* 5500 < 6000 */
  ev.type = AL_EVENT_TOOL_INPUT_DELTA;
  ev.ts_ns = 9000;
  ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0);
  ASSERT_EQ(n, 4);
  ASSERT_EQ(seen_ts[0], 5500);
  ASSERT_EQ(seen_ts[1], 6000);
  ASSERT_EQ(seen_ts[2], 6000);
  ASSERT_EQ(seen_ts[3], 9000);
  al__events_bus_free(bus);
  return 0;
}

/* ---- order and re-entrancy ----------------------------------------------- */

TEST_IMPL(events_subscribers_in_order) {
  long live0 = count_start();
  al__events_bus_t *bus = new_bus(0);
  al__events_session_t ses;
  sub_t a, b, c;
  log_t log;

  memset(&log, 0, sizeof(log));
  ASSERT_EQ(al__events_session_set(&ses, "s", 1), 0);
  add_sub(&a, "a", &log, bus, &ses);
  add_sub(&b, "b", &log, bus, &ses);
  add_sub(&c, "c", &log, bus, &ses);
  ASSERT_EQ(al__events_subscriber_count(bus), 3);
  ASSERT_EQ(publish_text(bus, &ses, "one"), 0);
  ASSERT_EQ(publish_text(bus, &ses, "two"), 0);
  ASSERT_STR_EQ(log.buf,
                "a:1:one b:1:one c:1:one a:2:two b:2:two c:2:two");
  /* Unsubscribing outside a walk takes effect at once. */
  al__events_unsubscribe(bus, b.handle);
  ASSERT_EQ(al__events_subscriber_count(bus), 2);
  log.len = 0;
  ASSERT_EQ(publish_text(bus, &ses, "three"), 0);
  ASSERT_STR_EQ(log.buf, "a:3:three c:3:three");
  al__events_bus_free(bus);
  ASSERT_EQ(n_live, live0);
  return 0;
}

static void unsub_self(sub_t *s, const al_event_t *ev) {
  al__events_unsubscribe(s->bus, s->handle);
}

static void unsub_other(sub_t *s, const al_event_t *ev) {
  if (s->other->handle != NULL) {
    al__events_unsubscribe(s->bus, s->other->handle);
    s->other->handle = NULL;
  }
}

TEST_IMPL(events_unsubscribe_during_walk) {
  long live0 = count_start();
  al__events_bus_t *bus = new_bus(0);
  al__events_session_t ses;
  sub_t a, b, c, d;
  log_t log;

  memset(&log, 0, sizeof(log));
  ASSERT_EQ(al__events_session_set(&ses, "s", 1), 0);
  add_sub(&a, "a", &log, bus, &ses);
  add_sub(&b, "b", &log, bus, &ses);
  add_sub(&c, "c", &log, bus, &ses);
  add_sub(&d, "d", &log, bus, &ses);
  /* b leaves inside its own callback; c removes d (later in the walk, so
   * d must not get even the current event) and then a (already called). */
  b.action = unsub_self;
  c.action = unsub_other;
  c.other = &d;
  ASSERT_EQ(publish_text(bus, &ses, "1"), 0);
  ASSERT_STR_EQ(log.buf, "a:1:1 b:1:1 c:1:1");
  ASSERT_EQ(al__events_subscriber_count(bus), 2);
  c.other = &a;
  ASSERT_EQ(publish_text(bus, &ses, "2"), 0);
  ASSERT_STR_EQ(log.buf, "a:1:1 b:1:1 c:1:1 a:2:2 c:2:2");
  ASSERT_EQ(publish_text(bus, &ses, "3"), 0);
  ASSERT_STR_EQ(log.buf, "a:1:1 b:1:1 c:1:1 a:2:2 c:2:2 c:3:3");
  ASSERT_EQ(al__events_subscriber_count(bus), 1);
  /* The last one leaves itself too: the bus is empty and still works. */
  c.action = unsub_self;
  ASSERT_EQ(publish_text(bus, &ses, "4"), 0);
  ASSERT_EQ(al__events_subscriber_count(bus), 0);
  ASSERT_EQ(publish_text(bus, &ses, "5"), 0);
  ASSERT_EQ(log.calls, 7);
  al__events_bus_free(bus);
  ASSERT_EQ(n_live, live0);
  return 0;
}

static char scratch[16];
static sub_t late;
static log_t *late_log;

/* On event 1: publish two more from a buffer it then overwrites (the queue
 * must have copied), and subscribe a newcomer. */
static void publish_more(sub_t *s, const al_event_t *ev) {
  if (ev->seq != 1) {
    return;
  }
  strcpy(scratch, "two");
  ASSERT_EQ(publish_text(s->bus, s->session, scratch), 0);
  strcpy(scratch, "three");
  ASSERT_EQ(publish_text(s->bus, s->session, scratch), 0);
  strcpy(scratch, "XXXXX");
  add_sub(&late, "n", late_log, s->bus, s->session);
  ASSERT_EQ(publish_text(s->bus, s->session, "four"), 0);
}

TEST_IMPL(events_publish_during_walk_deferred) {
  long live0 = count_start();
  al__events_bus_t *bus = new_bus(0);
  al__events_session_t ses;
  sub_t a, b;
  log_t log;

  memset(&log, 0, sizeof(log));
  late_log = &log;
  ASSERT_EQ(al__events_session_set(&ses, "s", 1), 0);
  add_sub(&a, "a", &log, bus, &ses);
  add_sub(&b, "b", &log, bus, &ses);
  a.action = publish_more;
  ASSERT_EQ(publish_text(bus, &ses, "one"), 0);
  /* No recursion: b sees event 1 before anyone sees 2; the queued events
   * follow in publish order, with their seq taken at publish time. The
   * newcomer subscribed after 2 and 3 were published: it gets 4 only. */
  ASSERT_STR_EQ(log.buf, "a:1:one b:1:one a:2:two b:2:two a:3:three "
                         "b:3:three a:4:four b:4:four n:4:four");
  ASSERT_EQ(ses.next_seq, 5);
  ASSERT_EQ(al__events_subscriber_count(bus), 3);
  al__events_bus_free(bus);
  ASSERT_EQ(n_live, live0);
  return 0;
}

/* The pending queue is bounded; a refused event takes no seq. */
static void flood(sub_t *s, const al_event_t *ev) {
  if (ev->seq != 1) {
    return;
  }
  ASSERT_EQ(publish_text(s->bus, s->session, "q1"), 0);
  ASSERT_EQ(publish_text(s->bus, s->session, "q2"), 0);
  ASSERT_EQ(publish_text(s->bus, s->session, "q3"), AL_ETOOBIG);
}

TEST_IMPL(events_pending_queue_bounded) {
  long live0 = count_start();
  al__events_bus_t *bus = new_bus(2);
  al__events_session_t ses;
  log_t log;
  sub_t a;

  memset(&log, 0, sizeof(log));
  ASSERT_EQ(al__events_session_set(&ses, "s", 1), 0);
  add_sub(&a, "a", &log, bus, &ses);
  a.action = flood;
  ASSERT_EQ(publish_text(bus, &ses, "p"), 0);
  ASSERT_STR_EQ(log.buf, "a:1:p a:2:q1 a:3:q2");
  ASSERT_EQ(ses.next_seq, 4);
  /* Once drained, the queue accepts again. */
  ASSERT_EQ(publish_text(bus, &ses, "r"), 0);
  ASSERT_STR_EQ(log.buf, "a:1:p a:2:q1 a:3:q2 a:4:r");
  al__events_bus_free(bus);
  ASSERT_EQ(n_live, live0);
  return 0;
}

/* ---- close from inside a callback ---------------------------------------- */

typedef struct {
  al__events_bus_t *bus;
  al__events_session_t session;
  sub_t a, b, c;
  log_t log;
} owner_t;

static void close_owner(sub_t *s, const al_event_t *ev) {
  owner_t *o = AL_CONTAINER_OF(s, owner_t, a);

  if (ev->seq != 2) {
    return;
  }
  /* Queue more first: they must be dropped, not delivered nor leaked. */
  ASSERT_EQ(publish_text(o->bus, &o->session, "queued"), 0);
  al__events_unsubscribe(o->bus, o->c.handle);
  al__events_bus_free(o->bus);
  /* A publish on a bus being freed is refused. */
  ASSERT_EQ(publish_text(o->bus, &o->session, "late"), AL_ECLOSING);
  s->fired++;
}

TEST_IMPL(events_close_inside_callback) {
  owner_t *o;
  log_t *log;
  long live0;
  int rc;

  live0 = count_start();
  o = al_calloc(1, sizeof(*o));
  ASSERT_NOT_NULL(o);
  o->bus = new_bus(0);
  ASSERT_EQ(al__events_session_set(&o->session, "s", 1), 0);
  add_sub(&o->a, "a", &o->log, o->bus, &o->session);
  add_sub(&o->b, "b", &o->log, o->bus, &o->session);
  add_sub(&o->c, "c", &o->log, o->bus, &o->session);
  o->a.action = close_owner;
  ASSERT_EQ(publish_text(o->bus, &o->session, "1"), 0);
  rc = publish_text(o->bus, &o->session, "2");
  /* The publish that started the walk learns the bus is gone. */
  ASSERT_EQ(rc, AL_ECLOSING);
  ASSERT_EQ(o->a.fired, 1);
  log = &o->log;
  ASSERT_STR_EQ(log->buf, "a:1:1 b:1:1 c:1:1 a:2:2");
  /* The bus, its subscribers and the queued event are all freed. */
  al_free(o);
  ASSERT_EQ(n_live, live0);
  return 0;
}

/* ---- no allocation on the hot path --------------------------------------- */

static void count_cb(const al_event_t *ev, void *data) {
  size_t *bytes = data;

  *bytes += ev->u.delta.text.len;
}

TEST_IMPL(events_no_alloc_per_text_delta) {
  al__events_bus_t *bus;
  al__events_session_t ses;
  al__events_sub_t *h;
  al_event_t ev = text_event("hello");
  size_t bytes = 0;
  long before;
  int i;

  ASSERT_EQ(al_set_allocator(count_malloc, count_realloc, count_calloc,
                             count_free), 0);
  /* The default clock (uv_hrtime) is part of the measured path. */
  before = n_allocs;
  ASSERT_EQ(al__events_bus_new(&bus, NULL), 0);
  ASSERT_EQ(al__events_subscribe(bus, count_cb, &bytes, &h), 0);
  ASSERT(n_allocs > before); /* the hook is really in place */
  ASSERT_EQ(al__events_session_set(&ses, "s", 1), 0);
  before = n_allocs;
  for (i = 0; i < 100000; i++) {
    ASSERT_EQ(al__events_publish(bus, &ses, &ev), 0);
  }
  ASSERT_EQ(n_allocs, before);
  ASSERT_EQ(bytes, 500000);
  ASSERT_EQ(ses.next_seq, 100001);
  al__events_bus_free(bus);
  ASSERT_EQ(n_live, 0);
  return 0;
}

/* ---- JSON ---------------------------------------------------------------- */

/* One event of every type, in enum order, as in docs/events.md. */
static void golden_events(al_event_t *evs) {
  al_event_t *e;
  int k;

  memset(evs, 0, sizeof(*evs) * AL_EVENT_TYPE_COUNT);
  for (k = 0; k < AL_EVENT_TYPE_COUNT; k++) {
    evs[k].type = (al_event_type_t)k;
    evs[k].run = 1;
    evs[k].turn = k == 0 ? 0 : 1;
  }
  e = &evs[AL_EVENT_RUN_STARTED];
  e->u.run_started.model = S("claude-sonnet-4-5");
  e->u.run_started.provider = S("anthropic");
  e->u.run_started.cwd = S("/home/u/proj");
  e->u.run_started.tools = S("[\"read_file\", \"bash\"]");
  e->u.run_started.sandbox = S("workspace-write");
  e = &evs[AL_EVENT_STREAM_REQUEST_START];
  e->u.stream_request.model = S("claude-sonnet-4-5");
  e->u.stream_request.attempt = 1;
  e = &evs[AL_EVENT_TEXT_DELTA];
  e->u.delta.index = 1;
  e->u.delta.text = S("Hello \"world\"\n");
  e = &evs[AL_EVENT_THINKING_DELTA];
  e->u.delta.index = 0;
  e->u.delta.text = S("Let me look.");
  e = &evs[AL_EVENT_TOOL_INPUT_DELTA];
  e->u.delta.index = 2;
  e->u.delta.call_id = S("toolu_01");
  e->u.delta.text = S("{\"path\":\"a");
  e = &evs[AL_EVENT_CONTENT_BLOCK_COMPLETED];
  e->u.block.index = 2;
  e->u.block.block_type = S("tool_use");
  e->u.block.block = S("{\"type\":\"tool_use\",\"id\":\"toolu_01\","
                       "\"name\":\"read_file\",\"input\":{\"path\":"
                       "\"a.txt\"}}");
  for (k = AL_EVENT_TOOL_USE_QUEUED; k <= AL_EVENT_TOOL_USE_COMPLETED; k++) {
    evs[k].u.tool.call_id = S("toolu_01");
    evs[k].u.tool.name = S("read_file");
    evs[k].u.tool.input = S("{\"path\": \"a.txt\"}");
  }
  evs[AL_EVENT_TOOL_PROGRESS].u.tool.content = S("line 1\n");
  e = &evs[AL_EVENT_TOOL_USE_COMPLETED];
  e->u.tool.content = S("hello\n");
  e->u.tool.is_error = false;
  e->u.tool.duration_ms = 12;
  e = &evs[AL_EVENT_TOOL_EXECUTION_ABORTED];
  e->u.tool.call_id = S("toolu_02");
  e->u.tool.name = S("bash");
  e->u.tool.reason = S("streaming_fallback");
  e = &evs[AL_EVENT_APPROVAL_REQUIRED];
  e->u.approval.request = S("req_1");
  e->u.approval.call_id = S("toolu_03");
  e->u.approval.name = S("bash");
  e->u.approval.input = S("{\"command\":\"rm -rf build\"}");
  e->u.approval.category = S("admin");
  e->u.approval.reason = S("admin tool");
  e = &evs[AL_EVENT_APPROVAL_RESPONSE];
  e->u.approval.request = S("req_1");
  e->u.approval.call_id = S("toolu_03");
  e->u.approval.decision = S("allow");
  e = &evs[AL_EVENT_USAGE];
  e->u.usage.input_tokens = 1200;
  e->u.usage.output_tokens = 85;
  e->u.usage.context_tokens = 2200;
  e->u.usage.context_window = 200000;
  e->u.usage.context_pct = 1;
  e->u.usage.cache_read_input_tokens = 1000;
  e->u.usage.reasoning_tokens = 40;
  e = &evs[AL_EVENT_RETRY];
  e->u.retry.attempt = 2;
  e->u.retry.max = 4;
  e->u.retry.delay_ms = 1500;
  e->u.retry.kind = S("overloaded");
  e->u.retry.status = 529;
  e->u.retry.message = S("Overloaded");
  e = &evs[AL_EVENT_API_ERROR];
  e->u.api_error.kind = S("overloaded_error");
  e->u.api_error.status = 529;
  e->u.api_error.message = S("Overloaded");
  e = &evs[AL_EVENT_STREAM_STALL_DETECTED];
  e->u.stall.idle_ms = 30000;
  e = &evs[AL_EVENT_MODEL_FALLBACK];
  e->u.fallback.from = S("claude-opus-4-1");
  e->u.fallback.to = S("claude-sonnet-4-5");
  e->u.fallback.reason = S("overloaded");
  e = &evs[AL_EVENT_TOMBSTONE];
  e->u.tombstone.message_id = S("msg_01");
  e->u.tombstone.reason = S("retry");
  e = &evs[AL_EVENT_MICRO_COMPACTION];
  e->u.compaction.cleared = 3;
  e->u.compaction.call_ids = S("[\"toolu_01\",\"toolu_02\",\"toolu_03\"]");
  e->u.compaction.tokens_saved = 30000;
  e->u.compaction.tokens_before = 90000;
  e->u.compaction.tokens_after = 60000;
  e = &evs[AL_EVENT_COMPACTION_STARTED];
  e->u.compaction.trigger = S("auto");
  e->u.compaction.tokens_before = 150000;
  e = &evs[AL_EVENT_COMPACTION_COMPLETED];
  e->u.compaction.trigger = S("auto");
  e->u.compaction.tokens_before = 150000;
  e->u.compaction.tokens_after = 20000;
  e->u.compaction.dropped_messages = 40;
  e->u.compaction.dropped_tool_results = 18;
  e->u.compaction.summary_tokens = 900;
  e = &evs[AL_EVENT_TURN_COMPLETED];
  e->u.turn_completed.stop_reason = S("tool_use");
  e->u.turn_completed.tool_calls = 1;
  evs[AL_EVENT_MAX_TURNS_REACHED].u.max_turns.max_turns = 20;
  evs[AL_EVENT_INTERRUPTED].u.interrupted.reason = S("user");
  e = &evs[AL_EVENT_ERROR];
  e->u.error.code = AL_ESTALL;
  e->u.error.message = S("stream stalled");
  evs[AL_EVENT_FINAL].u.final.text = S("Done.");
  e = &evs[AL_EVENT_CONTEXT_WARNING];
  e->u.usage.context_tokens = 161000;
  e->u.usage.context_window = 200000;
  e->u.usage.context_pct = 80;
  e = &evs[AL_EVENT_HISTORY_REPAIRED];
  e->u.repaired.count = 1;
  e->u.repaired.repairs =
      S("[{\"rule\":\"tool_use_without_result\",\"message\":4,\"id\":\"toolu_01\"}]");
  e = &evs[AL_EVENT_PROVIDER_NOTICE];
  e->u.notice.kind = S("stop_inferred");
  e->u.notice.message = S("the stream ended without a finish_reason: taken "
                          "as stop");
  e = &evs[AL_EVENT_CITATION];
  e->u.citation.index = 0;
  e->u.citation.citation =
      S("{\"type\":\"url_citation\",\"url\":\"https://example.com/a\","
        "\"title\":\"A\",\"cited_text\":null}");
  e = &evs[AL_EVENT_MCP_SERVER_STATE];
  e->u.mcp.server = S("fs");
  e->u.mcp.state = S("failed");
  e->u.mcp.tools = 0;
  e->u.mcp.ms = 30000;
  e->u.mcp.error = S("MCP server 'fs' exited with status 1; stderr: boom");
  e = &evs[AL_EVENT_MCP_TOOLS_CHANGED];
  e->u.mcp.server = S("fs");
  e->u.mcp.tools = 14;
  e->u.mcp.added = 14;
  e->u.mcp.removed = 0;
  e->u.mcp.definition_tokens = 2412;
  e = &evs[AL_EVENT_MCP_WARNING];
  e->u.mcp.server = S("b");
  e->u.mcp.error = S("tool 'search' is also offered by server 'a'");
  e = &evs[AL_EVENT_HOOK_EXECUTED];
  e->u.hook.hook = S("guard");
  e->u.hook.event = S("pre_tool_use");
  e->u.hook.decision = S("deny");
  e->u.hook.outcome = S("exit");
  e->u.hook.exit_status = 2;
  e->u.hook.ms = 12;
  e->u.hook.reason = S("no writes to /etc");
  e->u.hook.call_id = S("toolu_1");
  e->u.hook.name = S("bash");
  e = &evs[AL_EVENT_USER_MESSAGE];
  e->u.user_message.text = S("");
  e->u.user_message.tool_results =
      S("[{\"tool_use_id\":\"toolu_01\",\"is_error\":false,\"chars\":12}]");
  e = &evs[AL_EVENT_MCP_TOOL_CALL_BEGIN];
  e->u.mcp_call.server = S("everything");
  e->u.mcp_call.tool = S("echo");
  e->u.mcp_call.name = S("mcp__everything__echo");
  e->u.mcp_call.call_id = S("toolu_04");
  e = &evs[AL_EVENT_MCP_TOOL_CALL_END];
  e->u.mcp_call.server = S("everything");
  e->u.mcp_call.tool = S("echo");
  e->u.mcp_call.name = S("mcp__everything__echo");
  e->u.mcp_call.call_id = S("toolu_04");
  e->u.mcp_call.is_error = true;
  e->u.mcp_call.duration_ms = 60000;
  e->u.mcp_call.end = S("timeout");
  e = &evs[AL_EVENT_MCP_STARTUP_COMPLETE];
  e->u.mcp_startup.ready =
      S("[{\"server\":\"everything\",\"tools\":13,\"ms\":420}]");
  e->u.mcp_startup.failed =
      S("[{\"server\":\"fs\",\"error\":\"MCP server 'fs' exited with "
        "status 1\"}]");
  e->u.mcp_startup.pending = S("[\"slow\"]");
  e->u.mcp_startup.waited_ms = 1500;
  for (k = AL_EVENT_SUBAGENT_STARTED; k <= AL_EVENT_SUBAGENT_COMPLETED; k++) {
    e = &evs[k];
    e->u.subagent.task_id = S("t1");
    e->u.subagent.call_id = S("toolu_05");
    e->u.subagent.child_session = S("s_c1");
    e->u.subagent.agent = S("explore");
    e->u.subagent.description = S("find the parser");
    e->u.subagent.depth = 1;
  }
  e = &evs[AL_EVENT_SUBAGENT_COMPLETED];
  e->u.subagent.outcome = S("completed");
  e->u.subagent.input_tokens = 1200;
  e->u.subagent.output_tokens = 80;
  e->u.subagent.cost_usd = 0.25;
  e->u.subagent.result = S("The parser is in src/sse/sse.c.");
}

static void encode_cb(const al_event_t *ev, void *data) {
  ASSERT_EQ(al__events_encode_line(ev, data), 0);
}

/* Checks one NDJSON line (without its '\n'): parses, has the common
 * fields with the right types, and names a known type. */
static void check_line(const char *line, size_t len, uint64_t want_seq) {
  json_error_t jerr;
  json_t *j = json_loadb(line, len, 0, &jerr);
  al_event_type_t t;
  const char *type;

  if (j == NULL) {
    AL_TEST_FAIL("line does not parse: %s: %.*s", jerr.text, (int)len, line);
  }
  ASSERT(memchr(line, '\n', len) == NULL);
  type = json_string_value(json_object_get(j, "type"));
  ASSERT_NOT_NULL(type);
  ASSERT_EQ(al_event_type_from_name(type, strlen(type), &t), 0);
  ASSERT(json_is_string(json_object_get(j, "session")));
  ASSERT(json_is_integer(json_object_get(j, "run")));
  ASSERT(json_is_integer(json_object_get(j, "turn")));
  ASSERT(json_is_integer(json_object_get(j, "ts_ns")));
  ASSERT_EQ(json_integer_value(json_object_get(j, "seq")), want_seq);
  /* The common fields come first, in this order. */
  ASSERT(len > 9 && memcmp(line, "{\"type\":\"", 9) == 0);
  ASSERT_NOT_NULL(strstr(line, "\",\"session\":"));
  json_decref(j);
}

TEST_IMPL(events_golden_json) {
  al_event_t evs[AL_EVENT_TYPE_COUNT];
  al__events_bus_t *bus;
  al__events_session_t ses;
  al__events_sub_t *h;
  al_buf_t out;
  char *golden;
  size_t glen, off = 0;
  const char *p;
  uint64_t seq = 0;
  int k;

  fake_now = 0;
  golden_events(evs);
  al_buf_init(&out, 1 << 20);
  bus = new_bus(0);
  ASSERT_EQ(al__events_session_set(&ses, "s1", 1), 0);
  ASSERT_EQ(al__events_subscribe(bus, encode_cb, &out, &h), 0);
  for (k = 0; k < AL_EVENT_TYPE_COUNT; k++) {
    ASSERT_EQ(al__events_publish(bus, &ses, &evs[k]), 0);
  }
  al__events_bus_free(bus);

  golden = al_test_read_file(al_test_data_path("events/golden.ndjson"),
                             &glen);
  ASSERT_NOT_NULL(golden);
  /* Line by line, so a failure names the event. */
  for (p = out.data; off < out.len; p = out.data + off) {
    const char *nl = memchr(p, '\n', out.len - off);
    const char *gnl;
    size_t gi = (size_t)(p - out.data);

    ASSERT_NOT_NULL(nl);
    ASSERT(gi < glen);
    gnl = memchr(golden + gi, '\n', glen - gi);
    ASSERT_NOT_NULL(gnl);
    ASSERT_MEM_EQ(p, nl - p, golden + gi, gnl - (golden + gi));
    check_line(p, (size_t)(nl - p), ++seq);
    off = (size_t)(nl - out.data) + 1;
  }
  ASSERT_EQ(seq, AL_EVENT_TYPE_COUNT);
  ASSERT_MEM_EQ(out.data, out.len, golden, glen);
  free(golden);
  al_buf_free(&out);
  return 0;
}

TEST_IMPL(events_utf8_sanitized) {
  al_event_t ev;
  al_buf_t out;
  json_t *j;
  const char *content;

  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TOOL_USE_COMPLETED;
  ev.session = "s";
  ev.seq = 1;
  ev.u.tool.call_id = S("toolu_9");
  ev.u.tool.name = S("bash");
  /* A stray continuation byte, a truncated sequence, a NUL-free tail. */
  ev.u.tool.content = S("ok\x80 \xe2\x82 end");
  ev.u.tool.is_error = true;
  al_buf_init(&out, 4096);
  ASSERT_EQ(al__events_encode_line(&ev, &out), 0);
  ASSERT(out.len > 0 && out.data[out.len - 1] == '\n');
  j = json_loadb(out.data, out.len - 1, 0, NULL);
  ASSERT_NOT_NULL(j);
  content = json_string_value(json_object_get(j, "content"));
  ASSERT_NOT_NULL(content);
  ASSERT_NOT_NULL(strstr(content, "\xEF\xBF\xBD"));
  ASSERT(strncmp(content, "ok\xEF\xBF\xBD ", 6) == 0);
  ASSERT_NOT_NULL(strstr(content, " end"));
  ASSERT(json_is_true(json_object_get(j, "is_error")));
  json_decref(j);

  /* JSON text that is not JSON (or not UTF-8) is kept as a string. */
  al_buf_reset(&out);
  ev.type = AL_EVENT_TOOL_USE_STARTED;
  ev.u.tool.input = S("{\"path\":\"\xff\"");
  ASSERT_EQ(al__events_encode_line(&ev, &out), 0);
  j = json_loadb(out.data, out.len - 1, 0, NULL);
  ASSERT_NOT_NULL(j);
  ASSERT_STR_EQ(json_string_value(json_object_get(j, "input")),
                "{\"path\":\"\xEF\xBF\xBD\"");
  json_decref(j);

  /* A line that does not fit is refused whole. */
  al_buf_free(&out);
  al_buf_init(&out, 16);
  ASSERT_EQ(al_buf_append(&out, "x", 1), 0);
  ASSERT_EQ(al__events_encode_line(&ev, &out), AL_ETOOBIG);
  ASSERT_EQ(out.len, 1);
  ev.type = AL_EVENT_TYPE_COUNT;
  ASSERT_NULL(al__events_to_json(&ev));
  al_buf_free(&out);
  return 0;
}
