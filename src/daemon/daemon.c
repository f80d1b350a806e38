/* agentloopd core (daemon.h): listener, clients, sessions.
 *
 * Invariants:
 *  - Every LoopEvent is encoded once into a refcounted blob (the line with
 *    its '\n'); the transcript, the replay ring and every subscriber's
 *    socket write share it. A notification is three iovecs: a fixed
 *    prefix, the event, a fixed suffix; nothing is re-encoded per client.
 *  - A client's output is bounded by the bytes libuv could not write yet
 *    (write_queue_size). Past max_queue a subscription is ended with a
 *    `lagged` notice carrying the seq to resume from; past twice that the
 *    client is disconnected. The reactor never waits for a client.
 *  - Runs belong to sessions, not clients: a client that goes away only
 *    loses its subscriptions.
 *  - Handles close asynchronously; the daemon counts what is still open
 *    (d->pending) and calls on_exit when the count reaches zero. */
#include "daemon/daemon.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agentloop/client.h"
#include "agentloop/version.h"
#include "common/common.h"
#include "events/events.h"
#include "rpc/rpc.h"
#include "sandbox/sandbox.h"
#include "session/session.h"

#define DEFAULT_MAX_QUEUE (2u * 1024 * 1024)
#define DEFAULT_SOFT_MS 10000
#define DEFAULT_REPLAY (16u * 1024 * 1024)
#define DEFAULT_REPLAY_IDLE_MS (10u * 60 * 1000)
#define TX_MAX_QUEUE (256u * 1024 * 1024)
#define READ_BUF (64 * 1024)
#define TITLE_MAX 80
#define SHUTDOWN_GRACE_MS 2000

typedef struct session_s session_t;
typedef struct client_s client_t;

/* A client watching a session: in both the session's and the client's
 * lists. */
typedef struct {
  al_list_t snode;
  al_list_t cnode;
  session_t *s;
  client_t *c;
  /* Replay: the ring is sent from `next` as the client's queue drains
   * (write completions pump it); live events reach it through the ring
   * until it has caught up. */
  bool catching;
  bool started;
  uint64_t next;
} sub_t;

typedef struct {
  uint64_t seq;
  al_blob_t *line;
} ring_entry_t;

/* A session/resume waiting for the transcript load. */
typedef struct {
  al_list_t node;
  client_t *c; /* NULL once the client went away */
  json_t *id;
  json_t *params;
} pending_resume_t;

struct session_s {
  al_list_t node;
  al_daemon_t *d;
  char id[64];
  char *cwd;
  char *model;
  char *provider;
  char *base_url;
  char *system;
  char *title;
  json_t *ask_tools; /* names whose calls wait for approval, or NULL */
  json_t *limits;    /* agentloop/limits.h by name, or NULL */
  uint64_t created_ms;
  uint64_t updated_ms;
  uint64_t last_active; /* loop ms of the last event or unsubscribe */
  /* Loaded state. */
  bool loaded;
  bool loading;
  bool closing;
  al_agent_t *agent;
  al_tx_t *tx;
  /* Recent events, oldest first: a circular array (seqs increase, so a
   * seq is found by binary search). */
  ring_entry_t *ring;
  size_t ring_cap;
  size_t ring_head;
  size_t ring_n;
  size_t ring_bytes;
  uint64_t next_seq;
  al_list_t subs; /* sub_t by snode */
  bool running;
  uint64_t run;
  al_event_usage_t totals;
  uint64_t runs;
  al_list_t resumes; /* pending_resume_t */
  uv_work_t work;
  al_tx_loaded_t loaded_tx;
  json_t *recovered;
  bool agent_closed;
  bool tx_closed;
};

struct client_s {
  al_list_t node;
  al_daemon_t *d;
  uv_pipe_t pipe;
  uv_shutdown_t sreq;
  al_rpc_framer_t framer;
  al_list_t subs; /* sub_t by cnode */
  char id[96];
  bool initialized;
  bool closing;
  bool over;           /* output queue above the soft bound ... */
  uint64_t over_since; /* ... since this uv_now */
  uint64_t n;
};

typedef struct {
  uv_write_t req;
  al_blob_t *blob;
  char *owned;
} wreq_t;

struct al_daemon_s {
  uv_loop_t *loop;
  al_daemon_options_t o;
  char *socket_path;
  char *state_dir;
  char *sessions_dir;
  int state_lock;
  int socket_lock;
  uv_pipe_t server;
  uv_signal_t sigterm;
  uv_signal_t sigint;
  uv_timer_t idle;
  uv_timer_t grace;
  uv_timer_t sweep; /* drops idle sessions' replay rings */
  al_client_t *http;
  al_list_t sessions;
  al_list_t clients;
  size_t nclients;
  size_t nloaded;
  size_t nknown;
  uint64_t next_client;
  bool shutting_down;
  bool exiting;
  int final;   /* last handles closing */
  int pending; /* handles and objects still closing */
  char rbuf[READ_BUF];
  bool rbuf_busy;
  al_daemon_stats_t stats;
};

static const char EV_PREFIX[] = AL_RPC_EVENT_PREFIX;
static const char EV_SUFFIX[] = AL_RPC_EVENT_SUFFIX;

static void client_close(client_t *c);
static void session_unsubscribe_all(session_t *s, const char *reason);
static void maybe_exit(al_daemon_t *d);
static void idle_check(al_daemon_t *d);
static void sub_pump(sub_t *sub);
static void on_created(al_tx_t *tx, void *data);

static uint64_t wall_ms(void) {
  uv_timeval64_t tv;

  if (uv_gettimeofday(&tv) != 0) {
    return 0;
  }
  return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

static char *dup_or_null(const char *s) {
  return s != NULL ? al_strdup(s) : NULL;
}

static void set_str(char **dst, const char *s) {
  char *n = dup_or_null(s);

  if (s != NULL && n == NULL) {
    return; /* OOM: keep the old value */
  }
  al_free(*dst);
  *dst = n;
}

/* The session title: the first user input cut at TITLE_MAX bytes on a
 * character boundary (al_malloc'd, NULL on OOM). */
static char *make_title(const char *t) {
  size_t tl = strlen(t);

  if (tl > TITLE_MAX) {
    tl = TITLE_MAX;
    while (tl > 0 && ((unsigned char)t[tl] & 0xC0) == 0x80) {
      tl--;
    }
  }
  return al_strndup(t, tl);
}

/* ---- writing to clients ----------------------------------------------------- */

static size_t queued(const client_t *c) {
  return c->pipe.write_queue_size;
}

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = AL_CONTAINER_OF(req, wreq_t, req);
  client_t *c = req->data;

  al__blob_unref(w->blob);
  al_free(w->owned);
  al_free(w);
  if (status < 0 && status != UV_ECANCELED && !c->closing) {
    client_close(c);
    return;
  }
  if (!c->closing && queued(c) <= c->d->o.max_queue / 2) {
    al_list_t *pos, *next;

    for (pos = c->subs.next; pos != &c->subs && !c->closing; pos = next) {
      next = pos->next;
      sub_pump(AL_CONTAINER_OF(pos, sub_t, cnode));
      /* A failed write closes c and frees every sub of it, next too. */
    }
  }
}

/* Hard bound: responses and notices are never dropped, but a client whose
 * queue still grows past twice the limit is cut off. */
static bool over_hard(client_t *c) {
  if (queued(c) > 8 * c->d->o.max_queue) {
    al_log(AL_LOG_WARN, "client %s: output queue over %zu bytes, "
                        "disconnecting", c->id, 8 * c->d->o.max_queue);
    client_close(c);
    return true;
  }
  return false;
}

static void client_write_owned(client_t *c, char *buf, size_t len) {
  wreq_t *w;
  uv_buf_t b;

  if (c->closing || buf == NULL) {
    al_free(buf);
    return;
  }
  w = al_calloc(1, sizeof(*w));
  if (w == NULL) {
    al_free(buf);
    client_close(c);
    return;
  }
  w->owned = buf;
  w->req.data = c;
  b = uv_buf_init(buf, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write) != 0) {
    al_free(buf);
    al_free(w);
    client_close(c);
    return;
  }
  over_hard(c);
}

/* Sends msg (consumed). */
static void client_send(client_t *c, json_t *msg) {
  size_t len = 0;
  char *s = msg != NULL ? al_rpc_dump_line_alloc(msg, &len) : NULL;

  json_decref(msg);
  if (s == NULL) {
    al_log(AL_LOG_ERROR, "client %s: out of memory building a message",
           c->id);
    client_close(c);
    return;
  }
  client_write_owned(c, s, len);
}

static void client_event(client_t *c, al_blob_t *line) {
  wreq_t *w;
  uv_buf_t b[3];

  if (c->closing) {
    return;
  }
  w = al_calloc(1, sizeof(*w));
  if (w == NULL) {
    client_close(c);
    return;
  }
  w->blob = al__blob_ref(line);
  w->req.data = c;
  b[0] = uv_buf_init((char *)EV_PREFIX, sizeof(EV_PREFIX) - 1);
  b[1] = uv_buf_init(line->data, (unsigned)(line->len - 1));
  b[2] = uv_buf_init((char *)EV_SUFFIX, sizeof(EV_SUFFIX) - 1);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, b, 3, on_write) != 0) {
    al__blob_unref(w->blob);
    al_free(w);
    client_close(c);
  }
}

static void reply(client_t *c, const json_t *id, json_t *result) {
  c->d->stats.requests++;
  client_send(c, al_rpc_result_new(id, result));
}

static void reply_err(client_t *c, const json_t *id, int code,
                      const char *msg, json_t *data) {
  c->d->stats.errors++;
  client_send(c, al_rpc_error_new(id, code, msg, data));
}

/* ---- subscriptions ---------------------------------------------------------- */

static void sub_free(sub_t *sub) {
  sub->s->last_active = uv_now(sub->s->d->loop);
  al_list_remove(&sub->snode);
  al_list_remove(&sub->cnode);
  al_free(sub);
}

static sub_t *sub_find(session_t *s, client_t *c) {
  al_list_t *pos;

  al_list_foreach(pos, &c->subs) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, cnode);

    if (sub->s == s) {
      return sub;
    }
  }
  return NULL;
}

/* The client fell behind: end its subscription with a lagged notice. */
static void sub_lag(sub_t *sub, uint64_t resume_seq) {
  client_t *c = sub->c;
  session_t *s = sub->s;

  c->d->stats.lagged++;
  al_log(AL_LOG_INFO, "client %s lagged on %s at seq %llu", c->id, s->id,
         (unsigned long long)resume_seq);
  sub_free(sub);
  client_send(c, al_rpc_notification_new(
                     "lagged", json_pack("{s:s, s:i, s:I}", "session", s->id,
                                         "dropped", 1, "resume_seq",
                                         (json_int_t)resume_seq)));
}

/* Sends one event to one subscriber; false when the subscription ended.
 * Redis-style limits: past the soft bound (max_queue) for soft_ms, or
 * past the hard bound (4 x max_queue) at once, the client has lagged. A
 * short burst (a fast model stream read in one loop pass) is not lag. */
static bool sub_send(sub_t *sub, al_blob_t *line, uint64_t seq) {
  client_t *c = sub->c;
  al_daemon_t *d = c->d;
  size_t q = queued(c);
  bool lag = false;

  if (q > 4 * d->o.max_queue) {
    lag = true;
  } else if (q > d->o.max_queue) {
    uint64_t now = uv_now(d->loop);

    if (d->o.soft_ms == 0) {
      lag = true;
    } else if (!c->over) {
      c->over = true;
      c->over_since = now;
    } else if (now - c->over_since >= d->o.soft_ms) {
      lag = true;
    }
  } else {
    c->over = false;
  }
  if (lag) {
    sub_lag(sub, seq);
    return false;
  }
  client_event(sub->c, line);
  return true;
}

/* ---- sessions: events and commits ------------------------------------------- */

static ring_entry_t *ring_at(session_t *s, size_t i) {
  return &s->ring[(s->ring_head + i) % s->ring_cap];
}

static void ring_drop_oldest(session_t *s) {
  ring_entry_t *e = ring_at(s, 0);

  s->ring_bytes -= e->line->len;
  al__blob_unref(e->line);
  e->line = NULL;
  s->ring_head = (s->ring_head + 1) % s->ring_cap;
  s->ring_n--;
}

static void ring_push(session_t *s, uint64_t seq, al_blob_t *line) {
  if (s->ring_n == s->ring_cap) {
    size_t ncap = s->ring_cap != 0 ? s->ring_cap * 2 : 256;
    ring_entry_t *nr = al_malloc(ncap * sizeof(*nr));
    size_t i;

    if (nr == NULL) {
      if (s->ring_n == 0) {
        return;
      }
      ring_drop_oldest(s); /* OOM: keep going with a shorter memory */
    } else {
      for (i = 0; i < s->ring_n; i++) {
        nr[i] = *ring_at(s, i);
      }
      al_free(s->ring);
      s->ring = nr;
      s->ring_cap = ncap;
      s->ring_head = 0;
    }
  }
  s->ring[(s->ring_head + s->ring_n) % s->ring_cap].seq = seq;
  s->ring[(s->ring_head + s->ring_n) % s->ring_cap].line = al__blob_ref(line);
  s->ring_n++;
  s->ring_bytes += line->len;
  while (s->ring_bytes > s->d->o.replay_bytes && s->ring_n > 1) {
    ring_drop_oldest(s);
  }
}

/* Index of the first entry with seq >= seq (ring_n if none). */
static size_t ring_find(session_t *s, uint64_t seq) {
  size_t lo = 0, hi = s->ring_n;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;

    if (ring_at(s, mid)->seq < seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static void ring_free(session_t *s) {
  while (s->ring_n > 0) {
    ring_drop_oldest(s);
  }
  al_free(s->ring);
  s->ring = NULL;
  s->ring_cap = 0;
  s->ring_bytes = 0;
}

/* Drops the replay rings of loaded sessions that have had no run, no
 * watcher and no event for replay_idle_ms. Nothing refers into a ring
 * without a subscriber, so freeing it is safe; the session keeps its seq
 * numbering and its ring grows again with its next event. */
static void on_sweep(uv_timer_t *t) {
  al_daemon_t *d = t->data;
  uint64_t now = uv_now(d->loop);
  al_list_t *pos;

  al_list_foreach(pos, &d->sessions) {
    session_t *s = AL_CONTAINER_OF(pos, session_t, node);

    if (s->ring_n > 0 && !s->running && !s->closing &&
        al_list_empty(&s->subs) &&
        now - s->last_active >= d->o.replay_idle_ms) {
      ring_free(s);
      d->stats.rings_dropped++;
    }
  }
}

/* Sends ring entries to a catching-up subscriber while its queue is
 * below the bound; it is live once it reaches the newest event. */
static void sub_pump(sub_t *sub) {
  session_t *s = sub->s;
  client_t *c = sub->c;
  size_t i;

  if (!sub->catching) {
    return;
  }
  if (s->ring_n > 0 && sub->next < ring_at(s, 0)->seq && sub->next > 0 &&
      sub->next < s->next_seq && sub->started) {
    /* What it still needs was evicted while it caught up. */
    sub_lag(sub, sub->next);
    return;
  }
  i = ring_find(s, sub->next);
  while (i < s->ring_n && queued(c) <= c->d->o.max_queue && !c->closing) {
    ring_entry_t *e = ring_at(s, i);

    client_event(c, e->line);
    sub->next = e->seq + 1;
    sub->started = true;
    i++;
  }
  if (i >= s->ring_n) {
    sub->catching = false;
  }
}

static void tx_put(session_t *s, al_blob_t *b, bool sync) {
  if (s->tx != NULL) {
    al__tx_append(s->tx, b, sync);
  }
}

static void on_agent_event(const al_event_t *ev, void *data) {
  session_t *s = data;
  json_t *j = al__events_to_json(ev);
  size_t n = j != NULL ? json_dumpb(j, NULL, 0, JSON_COMPACT) : 0;
  al_blob_t *line = n > 0 ? al__blob_alloc(n + 1) : NULL;
  al_list_t *pos;
  al_list_t *next;

  switch (ev->type) {
  case AL_EVENT_RUN_STARTED:
    s->running = true;
    s->run = ev->run;
    s->runs++;
    break;
  case AL_EVENT_FINAL:
  case AL_EVENT_ERROR:
  case AL_EVENT_INTERRUPTED:
    s->running = false;
    break;
  case AL_EVENT_USAGE:
    s->totals.input_tokens += ev->u.usage.input_tokens;
    s->totals.output_tokens += ev->u.usage.output_tokens;
    s->totals.cache_read_input_tokens += ev->u.usage.cache_read_input_tokens;
    s->totals.cache_creation_input_tokens +=
        ev->u.usage.cache_creation_input_tokens;
    break;
  default:
    break;
  }
  s->next_seq = ev->seq + 1;
  s->updated_ms = wall_ms();
  s->last_active = uv_now(s->d->loop);
  if (line == NULL || json_dumpb(j, line->data, n, JSON_COMPACT) != n) {
    al_log(AL_LOG_ERROR, "session %s: cannot encode event seq %llu", s->id,
           (unsigned long long)ev->seq);
    json_decref(j);
    al__blob_unref(line);
    return;
  }
  json_decref(j);
  line->data[n] = '\n';
  ring_push(s, ev->seq, line);
  for (pos = s->subs.next; pos != &s->subs; pos = next) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, snode);

    next = pos->next;
    if (sub->catching) {
      sub_pump(sub); /* the event is in the ring */
    } else {
      sub_send(sub, line, ev->seq);
    }
  }
  /* The transcript append after the sockets: handing work to the
   * threadpool wakes a thread, which the watchers need not wait for. */
  tx_put(s, line, false);
  al__blob_unref(line);
  if (!s->running) {
    idle_check(s->d);
  }
}

static void on_commit(al_agent_t *agent, al_commit_kind_t kind,
                      const char *message, size_t len, void *data) {
  session_t *s = data;
  static const char *const kinds[] = {"user", "assistant", "tool_results"};
  al_blob_t *b = al__tx_commit_record(kinds[kind], message, len);

  if (b == NULL) {
    al_log(AL_LOG_ERROR, "session %s: cannot record a history commit", s->id);
    return;
  }
  /* History commits are the durable part: fdatasync after them. */
  tx_put(s, b, true);
  al__blob_unref(b);
  if (kind == AL_COMMIT_USER && s->title == NULL) {
    json_t *m = json_loadb(message, len, 0, NULL);
    const char *t = json_string_value(json_object_get(
        json_array_get(json_object_get(m, "content"), 0), "text"));

    if (t != NULL) {
      s->title = make_title(t);
    }
    json_decref(m);
  }
}

/* ---- sessions: lifecycle ------------------------------------------------------ */

static session_t *session_find(al_daemon_t *d, const char *id) {
  al_list_t *pos;

  if (id == NULL) {
    return NULL;
  }
  al_list_foreach(pos, &d->sessions) {
    session_t *s = AL_CONTAINER_OF(pos, session_t, node);

    if (strcmp(s->id, id) == 0) {
      return s;
    }
  }
  return NULL;
}

static session_t *session_alloc(al_daemon_t *d, const char *id) {
  session_t *s = al_calloc(1, sizeof(*s));

  if (s == NULL) {
    return NULL;
  }
  s->d = d;
  snprintf(s->id, sizeof(s->id), "%s", id);
  al_list_init(&s->subs);
  al_list_init(&s->resumes);
  s->next_seq = 1;
  al_list_insert_tail(&d->sessions, &s->node);
  d->nknown++;
  return s;
}

static void session_free(session_t *s) {
  al_daemon_t *d = s->d;

  al_list_remove(&s->node);
  d->nknown--;
  ring_free(s);
  json_decref(s->recovered);
  json_decref(s->ask_tools);
  json_decref(s->limits);
  al_free(s->cwd);
  al_free(s->model);
  al_free(s->provider);
  al_free(s->base_url);
  al_free(s->system);
  al_free(s->title);
  al_free(s);
}

static char *transcript_path(al_daemon_t *d, const char *id) {
  al_buf_t b;

  al_buf_init(&b, 8192);
  if (al_buf_printf(&b, "%s/%s.jsonl", d->sessions_dir, id) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  return b.data;
}

static bool valid_session_id(const char *id) {
  size_t i;
  size_t n = strlen(id);

  if (n == 0 || n > 63) {
    return false;
  }
  for (i = 0; i < n; i++) {
    char ch = id[i];

    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '_' || ch == '-')) {
      return false;
    }
  }
  return true;
}

/* Tools listed in ask_tools wait for a watcher's approval (beside the
 * admin category, which always asks in interactive mode). */
static al_permission_t on_permission(al_agent_t *agent, const char *tool,
                                     const char *input,
                                     al_tool_category_t category,
                                     void *data) {
  session_t *s = data;
  size_t i;
  json_t *v;

  json_array_foreach(s->ask_tools, i, v) {
    if (json_is_string(v) && strcmp(json_string_value(v), tool) == 0) {
      return AL_PERMISSION_ASK;
    }
  }
  return AL_PERMISSION_DEFAULT;
}

/* Creates the session's agent (and transcript writer) from its settings.
 * first_seq continues a resumed transcript's numbering. */
static int session_start(session_t *s, uint64_t first_seq,
                         uint64_t first_run, char *why, size_t why_len) {
  al_daemon_t *d = s->d;
  al_agent_options_t ao;
  char *path;
  int rc;

  al_agent_options_init(&ao);
  /* A transcript whose header never reached the disk (killed right after
   * create) has no settings: the daemon's defaults apply. */
  ao.provider = s->provider != NULL ? s->provider : d->o.provider;
  ao.model = s->model != NULL ? s->model : d->o.model;
  ao.base_url = s->base_url != NULL ? s->base_url : d->o.base_url;
  ao.system = s->system;
  ao.api_key = ao.provider != NULL && strcmp(ao.provider, "openai") == 0
                   ? d->o.openai_key
                   : d->o.anthropic_key;
  ao.client = d->http;
  ao.workspace = s->cwd;
  ao.builtin_tools = true;
  /* tools.d: the user's drop-ins, and the project's only once it is
   * trusted (`agentloop tools --trust-project` records that); tools run
   * in the best sandbox available (AUTO). */
  ao.tools_d = true;
  ao.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  ao.permission = on_permission;
  ao.permission_data = s;
  ao.session_id = s->id;
  ao.first_seq = first_seq;
  ao.first_run = first_run;
  ao.on_commit = on_commit;
  ao.commit_data = s;
  ao.retry_base_ms = d->o.retry_base_ms;
  ao.retry_cap_ms = d->o.retry_cap_ms;
  ao.kill_grace_ms = d->o.kill_grace_ms;
  ao.data = s;
  (void)al_limits_from_json(&ao.limits, s->limits, why, why_len);
  rc = al_agent_new(d->loop, &ao, &s->agent);
  if (rc != 0) {
    snprintf(why, why_len, "cannot create the agent: %s (bad provider, "
                           "base_url or cwd?)", al_strerror(rc));
    return rc;
  }
  rc = al_agent_subscribe(s->agent, on_agent_event, s, NULL);
  if (rc == 0) {
    path = transcript_path(d, s->id);
    rc = path != NULL ? al__tx_open(d->loop, path, TX_MAX_QUEUE, &s->tx)
                      : AL_ENOMEM;
    al_free(path);
  }
  if (rc != 0) {
    snprintf(why, why_len, "cannot open the transcript: %s",
             al_strerror(rc));
    s->agent_closed = false;
    al_agent_close(s->agent, NULL);
    s->agent = NULL;
    return rc;
  }
  s->next_seq = first_seq > 0 ? first_seq : 1;
  s->loaded = true;
  s->last_active = uv_now(d->loop); /* a fresh load is not idle yet */
  d->nloaded++;
  return 0;
}

static json_t *session_header(const session_t *s) {
  return json_pack(
      "{s:s, s:i, s:s, s:I, s:s?, s:s?, s:s?, s:s?, s:s?, s:O?, s:O?}",
      "rec", "session", "v", 1, "session", s->id, "created_ms",
      (json_int_t)s->created_ms, "cwd", s->cwd, "model", s->model,
      "provider", s->provider, "base_url", s->base_url, "system", s->system,
      "ask_tools", s->ask_tools, "limits", s->limits);
}

static json_t *session_info(const session_t *s) {
  const char *prov = s->provider != NULL ? s->provider : "anthropic";

  return json_pack("{s:s, s:s?, s:s?, s:s, s:I, s:I}", "session", s->id,
                   "cwd", s->cwd, "model", s->model, "provider", prov,
                   "created_ms", (json_int_t)s->created_ms, "next_seq",
                   (json_int_t)s->next_seq);
}

/* ---- session shutdown --------------------------------------------------------- */

static void session_maybe_free(session_t *s) {
  if (s->closing && s->agent_closed && s->tx_closed && !s->loading) {
    al_daemon_t *d = s->d;

    if (s->loaded) {
      d->nloaded--;
    }
    session_free(s);
    d->pending--;
    maybe_exit(d);
  }
}

static void on_session_tx_closed(al_tx_t *tx, void *data) {
  session_t *s = data;

  s->tx = NULL;
  s->tx_closed = true;
  session_maybe_free(s);
}

/* Flushes, syncs and closes the transcript (after the agent's last
 * events are queued). */
static void session_close_tx(session_t *s) {
  if (s->tx != NULL) {
    al__tx_close(s->tx, on_session_tx_closed, s);
  } else {
    s->tx_closed = true;
  }
}

static void on_session_agent_closed(al_agent_t *agent) {
  session_t *s = al_agent_get_data(agent);

  s->agent = NULL;
  s->agent_closed = true;
  session_close_tx(s);
  session_maybe_free(s);
}

static void session_close(session_t *s) {
  if (s->closing) {
    return;
  }
  s->closing = true;
  s->d->pending++;
  /* Cancel first: the run's interrupted event reaches the watchers and
   * the transcript before they are told the session closed. */
  if (s->agent != NULL && al_agent_running(s->agent)) {
    al_agent_cancel(s->agent);
  }
  session_unsubscribe_all(s, "shutdown");
  if (s->agent != NULL) {
    al_agent_close(s->agent, on_session_agent_closed);
  } else {
    s->agent_closed = true;
    session_close_tx(s);
  }
  session_maybe_free(s);
}

static void session_unsubscribe_all(session_t *s, const char *reason) {
  while (!al_list_empty(&s->subs)) {
    sub_t *sub = AL_CONTAINER_OF(s->subs.next, sub_t, snode);
    client_t *c = sub->c;

    sub_free(sub);
    client_send(c, al_rpc_notification_new(
                       "session/closed", json_pack("{s:s, s:s}", "session",
                                                   s->id, "reason", reason)));
  }
}

/* ---- methods ---------------------------------------------------------------- */

typedef struct {
  client_t *c;
  const json_t *id;
  json_t *params; /* object or NULL */
} call_t;

/* A string param that, when present, must be a string. */
static bool popt_str(const call_t *k, const char *key, const char **out) {
  json_t *v = json_object_get(k->params, key);

  *out = NULL;
  if (v == NULL || json_is_null(v)) {
    return true;
  }
  if (!json_is_string(v)) {
    char msg[128];

    snprintf(msg, sizeof(msg), "%s must be a string", key);
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, msg, NULL);
    return false;
  }
  *out = json_string_value(v);
  return true;
}

/* The session named by params.session, loaded; replies and returns NULL
 * otherwise. */
static session_t *need_session(const call_t *k, bool loaded) {
  const char *id;
  session_t *s;

  if (!popt_str(k, "session", &id)) {
    return NULL;
  }
  if (id == NULL) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, "session is required",
              NULL);
    return NULL;
  }
  s = session_find(k->c->d, id);
  if (s == NULL || s->closing) {
    reply_err(k->c, k->id, AL_RPC_UNKNOWN_SESSION, "unknown session",
              json_pack("{s:s}", "session", id));
    return NULL;
  }
  if (loaded && !s->loaded) {
    reply_err(k->c, k->id, AL_RPC_UNKNOWN_SESSION,
              "session not loaded: call session/resume first",
              json_pack("{s:s, s:b}", "session", id, "loaded", 0));
    return NULL;
  }
  return s;
}

static void m_initialize(const call_t *k) {
  client_t *c = k->c;
  json_t *cl = json_object_get(k->params, "client");
  const char *name = json_string_value(json_object_get(cl, "name"));

  if (!c->initialized && name != NULL) {
    char safe[48];
    size_t i;

    /* Printable ASCII only: it is shown to other clients. */
    for (i = 0; name[i] != '\0' && i < sizeof(safe) - 1; i++) {
      safe[i] = (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
    }
    safe[i] = '\0';
    snprintf(c->id, sizeof(c->id), "c%llu (%s)", (unsigned long long)c->n,
             safe);
  }
  c->initialized = true;
  reply(c, k->id,
        json_pack("{s:i, s:{s:s, s:s}, s:I, s:s, s:{s:b, s:b}}",
                  "protocol_version", AL_RPC_PROTOCOL_VERSION, "server",
                  "name", "agentloopd", "version", AL_VERSION_STRING,
                  "pid", (json_int_t)getpid(), "client_id", c->id,
                  "capabilities", "compact", 0, "replay", 1));
}

static bool check_provider(const call_t *k, const char *p) {
  if (p != NULL && strcmp(p, "anthropic") != 0 && strcmp(p, "openai") != 0) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "provider must be anthropic or openai", NULL);
    return false;
  }
  return true;
}

static bool new_session_id(char *out, size_t len) {
  unsigned char r[8];
  size_t i;

  if (uv_random(NULL, NULL, r, sizeof(r), 0, NULL) != 0) {
    return false;
  }
  snprintf(out, len, "s_");
  for (i = 0; i < sizeof(r); i++) {
    snprintf(out + 2 + 2 * i, len - 2 - 2 * i, "%02x", r[i]);
  }
  return true;
}

/* A malformed base URL is refused here, naming it, not found later as a
 * failed request. */
static bool check_base_url(const call_t *k, const char *url) {
  char why[160];
  char msg[600];

  if (url == NULL || al_agent_check_base_url(url, why, sizeof(why)) == 0) {
    return true;
  }
  snprintf(msg, sizeof(msg), "base_url '%.400s': %s", url, why);
  reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, msg, NULL);
  return false;
}

static bool check_limits(const call_t *k) {
  al_limits_t l;
  char why[160];

  memset(&l, 0, sizeof(l));
  if (al_limits_from_json(&l, json_object_get(k->params, "limits"), why,
                          sizeof(why)) == 0) {
    return true;
  }
  reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, why, NULL);
  return false;
}

static void m_session_create(const call_t *k) {
  al_daemon_t *d = k->c->d;
  const char *cwd, *model, *provider, *base_url, *system;
  char id[40];
  char cwdbuf[4096];
  char why[256];
  session_t *s;
  json_t *hdr;
  al_blob_t *b;
  struct stat st;

  if (!popt_str(k, "cwd", &cwd) || !popt_str(k, "model", &model) ||
      !popt_str(k, "provider", &provider) ||
      !popt_str(k, "base_url", &base_url) ||
      !popt_str(k, "system", &system) || !check_provider(k, provider) ||
      !check_base_url(k, base_url) || !check_limits(k)) {
    return;
  }
  {
    json_t *ask = json_object_get(k->params, "ask_tools");
    size_t i;
    json_t *v;

    if (ask != NULL && !json_is_null(ask)) {
      bool ok = json_is_array(ask);

      json_array_foreach(ask, i, v) { ok = ok && json_is_string(v); }
      if (!ok) {
        reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                  "ask_tools must be an array of tool names", NULL);
        return;
      }
    }
  }
  if (cwd == NULL) {
    size_t n = sizeof(cwdbuf);

    if (uv_cwd(cwdbuf, &n) != 0) {
      reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "no cwd", NULL);
      return;
    }
    cwd = cwdbuf;
  }
  /* A stat of a local directory: the agent checks it too (realpath). */
  if (cwd[0] != '/' || stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "cwd must be an absolute path to a directory", NULL);
    return;
  }
  if (d->nloaded >= d->o.max_sessions) {
    reply_err(k->c, k->id, AL_RPC_OVERLOADED, "too many sessions", NULL);
    return;
  }
  if (!new_session_id(id, sizeof(id)) || (s = session_alloc(d, id)) == NULL) {
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  s->cwd = al_strdup(cwd);
  s->model = dup_or_null(model != NULL ? model : d->o.model);
  s->provider = dup_or_null(provider != NULL ? provider : d->o.provider);
  s->base_url = dup_or_null(base_url != NULL ? base_url : d->o.base_url);
  s->system = dup_or_null(system);
  {
    json_t *ask = json_object_get(k->params, "ask_tools");

    s->ask_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
  }
  if (json_is_object(json_object_get(k->params, "limits"))) {
    s->limits = json_deep_copy(json_object_get(k->params, "limits"));
  }
  s->created_ms = s->updated_ms = wall_ms();
  why[0] = '\0';
  if (session_start(s, 1, 1, why, sizeof(why)) != 0) {
    int code = strstr(why, "agent") != NULL ? AL_RPC_INVALID_PARAMS
                                           : AL_RPC_INTERNAL_ERROR;

    session_free(s);
    reply_err(k->c, k->id, code, why, NULL);
    return;
  }
  hdr = session_header(s);
  b = hdr != NULL ? al__tx_record(hdr) : NULL;
  json_decref(hdr);
  if (b != NULL) {
    tx_put(s, b, true);
    al__blob_unref(b);
  }
  /* Answer once the header is on disk: a session whose id a client holds
   * survives a crash that follows at once. */
  {
    pending_resume_t *p = al_calloc(1, sizeof(*p));

    if (p == NULL || al__tx_flush(s->tx, on_created, s) != 0) {
      al_free(p);
      reply(k->c, k->id, session_info(s));
      return;
    }
    p->c = k->c;
    p->id = json_deep_copy(k->id);
    al_list_insert_tail(&s->resumes, &p->node);
    s->loading = true; /* no turn, resume or close until answered */
    k->c->d->pending++;
  }
}

/* session/create's answer, once the header is durable (or failed). */
static void on_created(al_tx_t *tx, void *data) {
  session_t *s = data;
  al_daemon_t *d = s->d;
  int err = al__tx_error(tx);

  s->loading = false;
  while (!al_list_empty(&s->resumes)) {
    pending_resume_t *p =
        AL_CONTAINER_OF(s->resumes.next, pending_resume_t, node);

    al_list_remove(&p->node);
    if (p->c != NULL && !p->c->closing) {
      if (err == 0) {
        reply(p->c, p->id, session_info(s));
      } else {
        char msg[160];

        snprintf(msg, sizeof(msg), "cannot write the transcript: %s",
                 al_strerror(err));
        reply_err(p->c, p->id, AL_RPC_INTERNAL_ERROR, msg, NULL);
      }
    }
    json_decref(p->id);
    al_free(p);
  }
  d->pending--;
  if (err != 0 && !s->closing) {
    session_close(s);
    return;
  }
  if (s->closing) {
    session_maybe_free(s);
  }
  maybe_exit(d);
}

static void m_session_list(const call_t *k) {
  al_daemon_t *d = k->c->d;
  json_t *arr = json_array();
  al_list_t *pos;

  /* Newest activity first: the list is short; insertion sort on output. */
  al_list_foreach(pos, &d->sessions) {
    session_t *s = AL_CONTAINER_OF(pos, session_t, node);
    json_t *o;
    size_t i;
    size_t w = 0;
    al_list_t *p2;

    if (s->closing) {
      continue;
    }
    al_list_foreach(p2, &s->subs) { w++; }
    o = json_pack("{s:s, s:s?, s:s?, s:s, s:I, s:I, s:s?, s:b, s:b, s:I}",
                  "session", s->id, "cwd", s->cwd, "model", s->model,
                  "provider", s->provider != NULL ? s->provider : "anthropic",
                  "created_ms", (json_int_t)s->created_ms, "updated_ms",
                  (json_int_t)s->updated_ms, "title", s->title, "loaded",
                  s->loaded, "running", s->running, "watchers",
                  (json_int_t)w);
    if (o == NULL) {
      continue;
    }
    for (i = 0; i < json_array_size(arr); i++) {
      json_t *x = json_array_get(arr, i);

      if (json_integer_value(json_object_get(x, "updated_ms")) <
          (json_int_t)s->updated_ms) {
        break;
      }
    }
    json_array_insert_new(arr, i, o);
  }
  reply(k->c, k->id, json_pack("{s:o}", "sessions", arr));
}

static void m_session_subscribe(const call_t *k) {
  session_t *s = need_session(k, true);
  json_t *since = json_object_get(k->params, "since_seq");
  sub_t *sub;
  uint64_t from = 0;
  bool replay = false;
  json_t *first = json_null();

  if (s == NULL) {
    return;
  }
  if (since != NULL && !json_is_null(since)) {
    if (!json_is_integer(since) || json_integer_value(since) < 0) {
      reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
                "since_seq must be a non-negative integer", NULL);
      return;
    }
    replay = true;
    from = (uint64_t)json_integer_value(since);
  }
  sub = sub_find(s, k->c);
  if (sub != NULL) {
    sub_free(sub);
  }
  sub = al_calloc(1, sizeof(*sub));
  if (sub == NULL) {
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  sub->s = s;
  sub->c = k->c;
  if (replay) {
    size_t idx = ring_find(s, from + 1);

    if (idx < s->ring_n) {
      json_decref(first);
      first = json_integer((json_int_t)ring_at(s, idx)->seq);
      sub->catching = true;
      sub->next = ring_at(s, idx)->seq;
    }
  }
  reply(k->c, k->id,
        json_pack("{s:s, s:I, s:o}", "session", s->id, "next_seq",
                  (json_int_t)s->next_seq, "replay_from", first));
  if (k->c->closing) {
    al_free(sub);
    return;
  }
  al_list_insert_tail(&s->subs, &sub->snode);
  al_list_insert_tail(&k->c->subs, &sub->cnode);
  sub_pump(sub);
}

static void m_session_unsubscribe(const call_t *k) {
  session_t *s = need_session(k, false);
  sub_t *sub;

  if (s == NULL) {
    return;
  }
  sub = sub_find(s, k->c);
  if (sub != NULL) {
    sub_free(sub);
  }
  reply(k->c, k->id, json_pack("{s:b}", "unsubscribed", sub != NULL));
}

static void m_turn_send(const call_t *k) {
  session_t *s = need_session(k, true);
  json_t *input = json_object_get(k->params, "input");
  int rc;

  if (s == NULL) {
    return;
  }
  if (!json_is_string(input) || json_string_length(input) == 0) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "input must be a non-empty string", NULL);
    return;
  }
  if (strlen(json_string_value(input)) != json_string_length(input)) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "input must not contain NUL", NULL);
    return;
  }
  if (al_agent_running(s->agent)) {
    reply_err(k->c, k->id, AL_RPC_RUN_ACTIVE, "a run is active",
              json_pack("{s:I}", "run", (json_int_t)s->run));
    return;
  }
  rc = al_agent_run(s->agent, json_string_value(input));
  if (rc == AL_EBUSY) {
    reply_err(k->c, k->id, AL_RPC_RUN_ACTIVE, "a run is active",
              json_pack("{s:I}", "run", (json_int_t)s->run));
    return;
  }
  if (rc != 0) {
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, al_strerror(rc), NULL);
    return;
  }
  if (k->c->closing) {
    return;
  }
  reply(k->c, k->id, json_pack("{s:I}", "run", (json_int_t)s->run));
  idle_check(s->d);
}

static void m_turn_cancel(const call_t *k) {
  session_t *s = need_session(k, true);
  json_t *run = json_object_get(k->params, "run");
  bool ok = false;

  if (s == NULL) {
    return;
  }
  if (run != NULL && !json_is_null(run) && !json_is_integer(run)) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS, "run must be an integer",
              NULL);
    return;
  }
  if (al_agent_running(s->agent) &&
      (run == NULL || json_is_null(run) ||
       (uint64_t)json_integer_value(run) == s->run)) {
    ok = al_agent_cancel(s->agent) == 0;
  }
  if (!k->c->closing) {
    reply(k->c, k->id, json_pack("{s:b}", "cancelled", ok));
  }
}

static void m_approval_respond(const call_t *k) {
  session_t *s = need_session(k, true);
  const char *req, *dec, *reason;
  al_approval_t a;
  al_list_t *pos, *next;
  int rc;

  if (s == NULL || !popt_str(k, "request", &req) ||
      !popt_str(k, "decision", &dec) || !popt_str(k, "reason", &reason)) {
    return;
  }
  if (req == NULL || dec == NULL) {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "request and decision are required", NULL);
    return;
  }
  if (strcmp(dec, "allow") == 0) {
    a = AL_APPROVE_ALLOW;
  } else if (strcmp(dec, "deny") == 0) {
    a = AL_APPROVE_DENY;
  } else if (strcmp(dec, "always") == 0) {
    a = AL_APPROVE_ALWAYS;
  } else {
    reply_err(k->c, k->id, AL_RPC_INVALID_PARAMS,
              "decision must be allow, deny or always", NULL);
    return;
  }
  rc = al_agent_approve(s->agent, req, a);
  if (rc == AL_ENOTFOUND) {
    reply_err(k->c, k->id, AL_RPC_NO_SUCH_APPROVAL,
              "no such pending approval (already resolved, or the run "
              "ended)",
              json_pack("{s:s}", "request", req));
    return;
  }
  if (rc != 0) {
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, al_strerror(rc), NULL);
    return;
  }
  /* Every watcher learns who resolved it. */
  for (pos = s->subs.next; pos != &s->subs; pos = next) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, snode);

    next = pos->next;
    client_send(sub->c,
                al_rpc_notification_new(
                    "approval/resolved",
                    json_pack("{s:s, s:s, s:s, s:s?, s:s}", "session", s->id,
                              "request", req, "decision", dec, "reason",
                              reason, "by", k->c->id)));
  }
  if (!k->c->closing) {
    reply(k->c, k->id, json_pack("{s:b}", "resolved", 1));
  }
}

static void m_session_compact(const call_t *k) {
  if (need_session(k, false) == NULL) {
    return;
  }
  reply_err(k->c, k->id, AL_RPC_NOT_SUPPORTED,
            "not yet supported: context management is not in the agent yet",
            NULL);
}

static json_t *usage_json(const al_event_usage_t *u) {
  return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens",
                   (json_int_t)u->input_tokens, "output_tokens",
                   (json_int_t)u->output_tokens, "cache_read_input_tokens",
                   (json_int_t)u->cache_read_input_tokens,
                   "cache_creation_input_tokens",
                   (json_int_t)u->cache_creation_input_tokens);
}

static void m_session_usage(const call_t *k) {
  session_t *s = need_session(k, true);
  al_agent_stats_t st;
  json_t *tot;
  json_t *last;

  if (s == NULL) {
    return;
  }
  al_agent_stats(s->agent, &st);
  tot = usage_json(&s->totals);
  json_object_set_new(tot, "runs", json_integer((json_int_t)s->runs));
  last = json_pack("{s:I, s:I, s:I, s:I, s:i, s:i, s:I, s:I}", "input_tokens",
                   (json_int_t)st.input_tokens, "output_tokens",
                   (json_int_t)st.output_tokens, "cache_read_input_tokens",
                   (json_int_t)st.cache_read_input_tokens,
                   "cache_creation_input_tokens",
                   (json_int_t)st.cache_creation_input_tokens, "turns",
                   (int)st.turns, "requests", (int)st.requests,
                   "duration_ms", (json_int_t)st.duration_ms,
                   "duration_api_ms", (json_int_t)st.duration_api_ms);
  reply(k->c, k->id,
        json_pack("{s:o, s:o, s:n}", "session", tot, "last_run", last,
                  "cost_usd"));
}

static void m_tools_list(const call_t *k) {
  al_daemon_t *d = k->c->d;
  session_t *s = NULL;
  al_agent_t *tmp = NULL;
  al_agent_t *a;
  char *txt = NULL;
  json_t *tools;

  if (json_object_get(k->params, "session") != NULL) {
    if ((s = need_session(k, true)) == NULL) {
      return;
    }
    a = s->agent;
  } else {
    al_agent_options_t ao;
    char cwd[4096];
    size_t n = sizeof(cwd);

    /* A throwaway agent with the defaults: it never runs, so it holds no
     * active handle and closes on the next iteration. */
    al_agent_options_init(&ao);
    ao.provider = d->o.provider;
    ao.base_url = d->o.base_url;
    ao.model = d->o.model;
    ao.client = d->http;
    ao.builtin_tools = true;
    ao.tools_d = true;
    ao.workspace = uv_cwd(cwd, &n) == 0 ? cwd : "/";
    if (al_agent_new(d->loop, &ao, &tmp) != 0) {
      reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR,
                "cannot list tools: bad default provider or base URL", NULL);
      return;
    }
    a = tmp;
  }
  if (al_agent_tools_json(a, &txt) != 0) {
    txt = NULL;
  }
  tools = txt != NULL ? json_loads(txt, 0, NULL) : NULL;
  al_free(txt);
  if (tmp != NULL) {
    al_agent_close(tmp, NULL);
  }
  if (tools == NULL) {
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  /* The agent's own listing: tools, tools.d load errors (file:line:col)
   * and the sandbox mode, passed through unchanged. */
  if (!json_is_object(tools)) {
    json_decref(tools);
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "bad tool listing", NULL);
    return;
  }
  reply(k->c, k->id, tools);
}

static void m_shutdown(const call_t *k) {
  reply(k->c, k->id, json_pack("{s:b}", "ok", 1));
  al__daemon_shutdown(k->c->d);
}

/* ---- session/resume (transcript load in the threadpool) ----------------------- */

static void resume_reply(session_t *s, client_t *c, const json_t *id) {
  json_t *info = session_info(s);
  const json_t *m = NULL;
  char *h = NULL;

  if (al_agent_history_json(s->agent, &h) == 0) {
    json_t *hj = json_loads(h, 0, NULL);

    m = json_object_get(hj, "messages");
    json_object_set_new(info, "messages",
                        json_integer((json_int_t)json_array_size(m)));
    json_decref(hj);
    al_free(h);
  }
  json_object_set(info, "recovered",
                  s->recovered != NULL ? s->recovered : json_null());
  reply(c, id, info);
}

static void load_work(uv_work_t *w) {
  session_t *s = AL_CONTAINER_OF(w, session_t, work);
  char *path = transcript_path(s->d, s->id);

  if (path == NULL) {
    memset(&s->loaded_tx, 0, sizeof(s->loaded_tx));
    al__history_init(&s->loaded_tx.history);
    s->loaded_tx.err = AL_ENOMEM;
    return;
  }
  al__tx_load(path, true, s->d->o.replay_bytes, &s->loaded_tx);
  al_free(path);
}

static void resume_apply_params(session_t *s, json_t *params) {
  const char *v;

  if ((v = json_string_value(json_object_get(params, "model"))) != NULL) {
    set_str(&s->model, v);
  }
  if ((v = json_string_value(json_object_get(params, "provider"))) != NULL &&
      (strcmp(v, "anthropic") == 0 || strcmp(v, "openai") == 0)) {
    set_str(&s->provider, v);
  }
  if ((v = json_string_value(json_object_get(params, "base_url"))) != NULL) {
    set_str(&s->base_url, v);
  }
  if ((v = json_string_value(json_object_get(params, "system"))) != NULL) {
    set_str(&s->system, v);
  }
}

/* The end of a run that a crash cut short, as LoopEvents with the seqs
 * reserved for them: tool_use_completed (an error with the synthetic
 * text) for every call closed on load, then interrupted. Replaying
 * clients then see the run end as it would have on a cancel. */
static void synth_run_end(session_t *s, const al_tx_loaded_t *l) {
  al_event_t ev;
  size_t i;
  json_t *c;
  uint64_t seq = l->last_seq + 1;

  json_array_foreach(l->closed_calls, i, c) {
    const char *id = json_string_value(json_object_get(c, "id"));
    const char *name = json_string_value(json_object_get(c, "name"));

    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_TOOL_USE_COMPLETED;
    ev.session = s->id;
    ev.run = l->last_run;
    ev.turn = l->last_turn;
    ev.seq = seq++;
    ev.ts_ns = uv_hrtime();
    ev.u.tool.call_id.ptr = id;
    ev.u.tool.call_id.len = id != NULL ? strlen(id) : 0;
    ev.u.tool.name.ptr = name;
    ev.u.tool.name.len = name != NULL ? strlen(name) : 0;
    ev.u.tool.content.ptr = AL_TX_SYNTHETIC_TEXT;
    ev.u.tool.content.len = strlen(AL_TX_SYNTHETIC_TEXT);
    ev.u.tool.reason.ptr = "daemon_restart";
    ev.u.tool.reason.len = strlen("daemon_restart");
    ev.u.tool.is_error = true;
    on_agent_event(&ev, s);
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_INTERRUPTED;
  ev.session = s->id;
  ev.run = l->last_run;
  ev.turn = l->last_turn;
  ev.seq = seq;
  ev.ts_ns = uv_hrtime();
  ev.u.interrupted.reason.ptr = "daemon_restart";
  ev.u.interrupted.reason.len = strlen("daemon_restart");
  on_agent_event(&ev, s);
}

static void load_done(uv_work_t *w, int status) {
  session_t *s = AL_CONTAINER_OF(w, session_t, work);
  al_daemon_t *d = s->d;
  al_tx_loaded_t *l = &s->loaded_tx;
  char why[256] = "";
  int rc = status != 0 ? status : l->err;
  pending_resume_t *first = NULL;
  size_t i;
  size_t nsynth = 0;

  s->loading = false;
  if (l->header != NULL && s->cwd == NULL) {
    /* The header reached the file after the startup scan read it. */
    const json_t *h = l->header;

    set_str(&s->cwd, json_string_value(json_object_get(h, "cwd")));
    set_str(&s->model, json_string_value(json_object_get(h, "model")));
    set_str(&s->provider, json_string_value(json_object_get(h, "provider")));
    set_str(&s->base_url, json_string_value(json_object_get(h, "base_url")));
    set_str(&s->system, json_string_value(json_object_get(h, "system")));
    if (s->ask_tools == NULL &&
        json_is_array(json_object_get(h, "ask_tools"))) {
      s->ask_tools = json_deep_copy(json_object_get(h, "ask_tools"));
    }
    if (s->limits == NULL && json_is_object(json_object_get(h, "limits"))) {
      s->limits = json_deep_copy(json_object_get(h, "limits"));
    }
  }
  if (!al_list_empty(&s->resumes)) {
    first = AL_CONTAINER_OF(s->resumes.next, pending_resume_t, node);
    if (first->params != NULL) {
      resume_apply_params(s, first->params);
    }
  }
  if (rc == 0 && !s->closing) {
    if (l->bad_lines > 0) {
      al_log(AL_LOG_WARN, "session %s: %zu bad transcript line(s) skipped "
                          "(first: %s)", s->id, l->bad_lines, l->why);
    }
    /* A run the crash cut short gets its end as events too (below): the
     * agent's numbering starts after them. */
    nsynth = l->run_open && l->last_run > 0
                 ? json_array_size(l->closed_calls) + 1
                 : 0;
    rc = session_start(s, l->last_seq + 1 + nsynth, l->last_run + 1, why,
                       sizeof(why));
  }
  if (rc == 0 && !s->closing) {
    /* The system prompt comes from the session settings (options). */
    const json_t *msgs = al__history_to_json(&l->history);
    json_t *hist = msgs != NULL
                       ? json_pack("{s:O}", "messages", (json_t *)msgs)
                       : json_pack("{s:[]}", "messages");
    char *txt = hist != NULL ? json_dumps(hist, JSON_COMPACT) : NULL;

    json_decref(hist);
    rc = txt != NULL ? al_agent_load_history_json(s->agent, txt, strlen(txt))
                     : AL_ENOMEM;
    al_free(txt);
    if (rc != 0) {
      snprintf(why, sizeof(why), "the transcript's history is not valid: %s",
               al_strerror(rc));
    }
  }
  if (rc == 0 && !s->closing) {
    for (i = 0; i < l->nevents; i++) {
      ring_push(s, l->events[i].seq, l->events[i].line);
    }
    s->last_active = uv_now(s->d->loop);
    s->next_seq = l->last_seq + 1;
    if (nsynth > 0) {
      synth_run_end(s, l);
    }
    if (l->synthetic != NULL) {
      json_t *rec = json_pack("{s:s, s:O}", "rec", "tool_results", "message",
                              l->synthetic);
      al_blob_t *b = rec != NULL ? al__tx_record(rec) : NULL;

      json_decref(rec);
      if (b != NULL) {
        tx_put(s, b, true);
        al__blob_unref(b);
      }
      al_log(AL_LOG_WARN, "session %s: closed %zu interrupted tool call(s) "
                          "with synthetic results", s->id,
             l->closed_tool_uses);
    }
    if (s->title == NULL && l->first_user_text != NULL) {
      s->title = make_title(l->first_user_text);
    }
    json_decref(s->recovered);
    s->recovered = json_pack("{s:b, s:I, s:I}", "torn_tail", l->torn_tail,
                             "bad_lines", (json_int_t)l->bad_lines,
                             "closed_tool_uses",
                             (json_int_t)l->closed_tool_uses);
  } else if (s->closing) {
    snprintf(why, sizeof(why), "the daemon is shutting down");
    rc = AL_ECLOSING;
  } else if (rc != 0 && why[0] == '\0') {
    snprintf(why, sizeof(why), "cannot load the transcript: %s",
             al_strerror(rc));
  }
  al__tx_loaded_free(l);
  while (!al_list_empty(&s->resumes)) {
    pending_resume_t *p =
        AL_CONTAINER_OF(s->resumes.next, pending_resume_t, node);

    al_list_remove(&p->node);
    if (p->c != NULL && !p->c->closing) {
      if (rc == 0 && s->loaded) {
        resume_reply(s, p->c, p->id);
      } else {
        reply_err(p->c, p->id, AL_RPC_INTERNAL_ERROR, why, NULL);
      }
    }
    json_decref(p->id);
    json_decref(p->params);
    al_free(p);
  }
  d->pending--;
  if (s->closing) {
    session_maybe_free(s);
  }
  maybe_exit(d);
}

static void m_session_resume(const call_t *k) {
  session_t *s = need_session(k, false);
  pending_resume_t *p;
  const char *v;

  if (s == NULL) {
    return;
  }
  if (!popt_str(k, "model", &v) || !popt_str(k, "base_url", &v) ||
      !check_base_url(k, v) || !popt_str(k, "system", &v) ||
      !popt_str(k, "provider", &v) || !check_provider(k, v)) {
    return;
  }
  if (s->loaded) {
    /* In memory already: its agent keeps its settings (the params apply
     * only when a session is loaded from its transcript). */
    resume_reply(s, k->c, k->id);
    return;
  }
  if (k->c->d->nloaded >= k->c->d->o.max_sessions) {
    reply_err(k->c, k->id, AL_RPC_OVERLOADED, "too many sessions", NULL);
    return;
  }
  p = al_calloc(1, sizeof(*p));
  if (p == NULL) {
    reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "out of memory", NULL);
    return;
  }
  p->c = k->c;
  p->id = json_deep_copy(k->id);
  p->params = k->params != NULL ? json_incref(k->params) : NULL;
  al_list_insert_tail(&s->resumes, &p->node);
  if (!s->loading) {
    if (uv_queue_work(k->c->d->loop, &s->work, load_work, load_done) != 0) {
      al_list_remove(&p->node);
      json_decref(p->id);
      json_decref(p->params);
      al_free(p);
      reply_err(k->c, k->id, AL_RPC_INTERNAL_ERROR, "cannot queue the load",
                NULL);
      return;
    }
    s->loading = true;
    k->c->d->pending++;
  }
}

typedef struct {
  const char *name;
  void (*fn)(const call_t *k);
} method_t;

static const method_t methods[] = {
    {"initialize", m_initialize},
    {"session/create", m_session_create},
    {"session/list", m_session_list},
    {"session/resume", m_session_resume},
    {"session/subscribe", m_session_subscribe},
    {"session/unsubscribe", m_session_unsubscribe},
    {"turn/send", m_turn_send},
    {"turn/cancel", m_turn_cancel},
    {"approval/respond", m_approval_respond},
    {"session/compact", m_session_compact},
    {"session/usage", m_session_usage},
    {"tools/list", m_tools_list},
    {"shutdown", m_shutdown},
};

/* ---- clients ------------------------------------------------------------------ */

static bool on_line(al_rpc_framer_t *f, const char *line, size_t len,
                    bool too_long, void *data) {
  client_t *c = data;
  al_rpc_msg_t msg;
  json_t *bad_id = NULL;
  char why[200];
  size_t i;
  int rc;
  call_t k;

  if (too_long) {
    reply_err(c, NULL, AL_RPC_LINE_TOO_LONG, "line too long",
              json_pack("{s:I}", "limit", (json_int_t)c->d->o.max_line));
    return !c->closing;
  }
  for (i = 0; i < len; i++) {
    if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
      break;
    }
  }
  if (i == len) {
    return true; /* blank line */
  }
  rc = al_rpc_parse(line, len, &msg, &bad_id, why, sizeof(why));
  if (rc != 0) {
    reply_err(c, bad_id, rc, why, NULL);
    json_decref(bad_id);
    return !c->closing;
  }
  if (msg.kind != AL_RPC_MSG_REQUEST) {
    reply_err(c, msg.id, AL_RPC_INVALID_REQUEST,
              msg.kind == AL_RPC_MSG_RESPONSE
                  ? "invalid request: the daemon sends no requests"
                  : "invalid request: id is required",
              NULL);
    al_rpc_msg_free(&msg);
    return !c->closing;
  }
  k.c = c;
  k.id = msg.id;
  k.params = msg.params;
  for (i = 0; i < AL_ARRAY_SIZE(methods); i++) {
    if (strcmp(methods[i].name, msg.method) == 0) {
      break;
    }
  }
  if (i == AL_ARRAY_SIZE(methods)) {
    reply_err(c, msg.id, AL_RPC_METHOD_NOT_FOUND, "method not found",
              json_pack("{s:s}", "method", msg.method));
  } else if (!c->initialized && methods[i].fn != m_initialize) {
    reply_err(c, msg.id, AL_RPC_NOT_INITIALIZED,
              "not initialized: send initialize first", NULL);
  } else if (c->d->shutting_down && methods[i].fn != m_initialize) {
    reply_err(c, msg.id, AL_RPC_OVERLOADED, "the daemon is shutting down",
              NULL);
  } else {
    methods[i].fn(&k);
  }
  al_rpc_msg_free(&msg);
  return !c->closing;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  client_t *c = h->data;
  al_daemon_t *d = c->d;

  /* One read buffer for every client: read_cb consumes it at once (the
   * framer copies only an incomplete tail). */
  if (d->rbuf_busy) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  d->rbuf_busy = true;
  buf->base = d->rbuf;
  buf->len = sizeof(d->rbuf);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  client_t *c = st->data;
  al_daemon_t *d = c->d;

  if (buf->base == d->rbuf) {
    d->rbuf_busy = false;
  }
  if (n < 0) {
    client_close(c);
    return;
  }
  if (n > 0 && al_rpc_framer_feed(&c->framer, buf->base, (size_t)n, on_line,
                                  c) == AL_ENOMEM) {
    client_close(c);
  }
}

static void on_client_closed(uv_handle_t *h) {
  client_t *c = h->data;
  al_daemon_t *d = c->d;

  al_rpc_framer_free(&c->framer);
  al_free(c);
  d->pending--;
  maybe_exit(d);
}

static void client_close(client_t *c) {
  al_daemon_t *d = c->d;
  al_list_t *pos;

  if (c->closing) {
    return;
  }
  c->closing = true;
  while (!al_list_empty(&c->subs)) {
    sub_free(AL_CONTAINER_OF(c->subs.next, sub_t, cnode));
  }
  /* Resumes still loading answer nobody. */
  al_list_foreach(pos, &d->sessions) {
    session_t *s = AL_CONTAINER_OF(pos, session_t, node);
    al_list_t *p2;

    al_list_foreach(p2, &s->resumes) {
      pending_resume_t *p = AL_CONTAINER_OF(p2, pending_resume_t, node);

      if (p->c == c) {
        p->c = NULL;
      }
    }
  }
  al_list_remove(&c->node);
  d->nclients--;
  uv_close((uv_handle_t *)&c->pipe, on_client_closed);
  idle_check(d);
}

static void on_client_shutdown(uv_shutdown_t *req, int status) {
  client_t *c = req->data;

  client_close(c);
}

static bool peer_ok(uv_pipe_t *p) {
  uv_os_fd_t fd;
  struct ucred cr;
  socklen_t len = sizeof(cr);

  if (uv_fileno((uv_handle_t *)p, &fd) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
    return false;
  }
  return cr.uid == geteuid();
}

static void on_refused_closed(uv_handle_t *h) {
  client_t *c = h->data;
  al_daemon_t *d = c->d;

  al_free(c);
  d->pending--;
  maybe_exit(d);
}

static void on_connection(uv_stream_t *server, int status) {
  al_daemon_t *d = server->data;
  client_t *c;

  if (status < 0) {
    al_log(AL_LOG_WARN, "accept: %s", uv_strerror(status));
    return;
  }
  c = al_calloc(1, sizeof(*c));
  if (c == NULL) {
    return;
  }
  if (uv_pipe_init(d->loop, &c->pipe, 0) != 0) {
    al_free(c);
    return;
  }
  c->d = d;
  c->pipe.data = c;
  d->pending++;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0 || !peer_ok(&c->pipe) ||
      d->shutting_down || d->nclients >= d->o.max_clients) {
    /* Another uid (or no credentials): closed before a byte is read or
     * written (RELIABILITY G2). */
    d->stats.refused_peers++;
    c->closing = true;
    uv_close((uv_handle_t *)&c->pipe, on_refused_closed);
    return;
  }
  c->n = ++d->next_client;
  snprintf(c->id, sizeof(c->id), "c%llu", (unsigned long long)c->n);
  al_list_init(&c->subs);
  al_rpc_framer_init(&c->framer, d->o.max_line);
  al_list_insert_tail(&d->clients, &c->node);
  d->nclients++;
  uv_timer_stop(&d->idle);
  if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) != 0) {
    client_close(c);
  }
}

/* ---- idle exit, shutdown -------------------------------------------------------- */

static void on_idle_timer(uv_timer_t *t) {
  al_daemon_t *d = t->data;

  if (d->nclients == 0) {
    al_list_t *pos;

    al_list_foreach(pos, &d->sessions) {
      session_t *s = AL_CONTAINER_OF(pos, session_t, node);

      if (s->running) {
        return;
      }
    }
    al_log(AL_LOG_INFO, "idle for %llu ms: exiting",
           (unsigned long long)d->o.idle_exit_ms);
    al__daemon_shutdown(d);
  }
}

static void idle_check(al_daemon_t *d) {
  al_list_t *pos;

  if (d->o.idle_exit_ms == 0 || d->shutting_down) {
    return;
  }
  if (d->nclients > 0) {
    uv_timer_stop(&d->idle);
    return;
  }
  al_list_foreach(pos, &d->sessions) {
    if (AL_CONTAINER_OF(pos, session_t, node)->running) {
      uv_timer_stop(&d->idle);
      return;
    }
  }
  uv_timer_start(&d->idle, on_idle_timer, d->o.idle_exit_ms, 0);
}

static void daemon_free(al_daemon_t *d) {
  if (d->state_lock >= 0) {
    close(d->state_lock);
  }
  if (d->socket_lock >= 0) {
    close(d->socket_lock);
  }
  al_free(d->socket_path);
  al_free(d->state_dir);
  al_free(d->sessions_dir);
  al_free(d);
}

static void on_final_closed(uv_handle_t *h) {
  al_daemon_t *d = h->data;

  if (--d->final == 0) {
    void (*cb)(al_daemon_t *, void *) = d->o.on_exit;
    void *data = d->o.data;

    if (cb != NULL) {
      cb(d, data);
    }
    daemon_free(d);
  }
}

static void maybe_exit(al_daemon_t *d) {
  if (!d->shutting_down || d->pending != 0 || d->exiting) {
    return;
  }
  /* Every session (agent) and client is gone: the shared HTTP client
   * (its handles close on their own; the loop drains them) and our last
   * handles. */
  d->exiting = true;
  if (d->http != NULL) {
    al_client_close(d->http, NULL);
    d->http = NULL;
  }
  d->final = 5;
  uv_close((uv_handle_t *)&d->sweep, on_final_closed);
  uv_close((uv_handle_t *)&d->sigterm, on_final_closed);
  uv_close((uv_handle_t *)&d->sigint, on_final_closed);
  uv_close((uv_handle_t *)&d->idle, on_final_closed);
  uv_close((uv_handle_t *)&d->grace, on_final_closed);
}

static void on_grace(uv_timer_t *t) {
  al_daemon_t *d = t->data;

  /* Clients that do not read their last lines are cut off. */
  while (!al_list_empty(&d->clients)) {
    client_close(AL_CONTAINER_OF(d->clients.next, client_t, node));
  }
}

static void on_server_closed(uv_handle_t *h) {
  al_daemon_t *d = h->data;

  d->pending--;
  maybe_exit(d);
}

void al__daemon_shutdown(al_daemon_t *d) {
  al_list_t *pos, *next;

  if (d->shutting_down) {
    return;
  }
  d->shutting_down = true;
  al_log(AL_LOG_INFO, "shutting down");
  uv_timer_stop(&d->idle);
  uv_timer_stop(&d->sweep);
  uv_signal_stop(&d->sigterm);
  uv_signal_stop(&d->sigint);
  d->pending++;
  uv_close((uv_handle_t *)&d->server, on_server_closed);
  unlink(d->socket_path);
  /* Sessions: cancel runs (interrupted reaches watchers and transcripts),
   * say session/closed, close agents, flush transcripts. */
  for (pos = d->sessions.next; pos != &d->sessions; pos = next) {
    next = pos->next;
    session_close(AL_CONTAINER_OF(pos, session_t, node));
  }
  /* Clients: flush what is queued, then EOF. */
  for (pos = d->clients.next; pos != &d->clients; pos = next) {
    client_t *c = AL_CONTAINER_OF(pos, client_t, node);

    next = pos->next;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->pipe, on_client_shutdown) !=
        0) {
      client_close(c);
    }
  }
  uv_timer_start(&d->grace, on_grace, SHUTDOWN_GRACE_MS, 0);
  uv_unref((uv_handle_t *)&d->grace);
  maybe_exit(d);
}

static void on_signal(uv_signal_t *h, int signum) {
  al_log(AL_LOG_INFO, "signal %d", signum);
  al__daemon_shutdown(h->data);
}

/* ---- setup -------------------------------------------------------------------- */

void al__daemon_options_init(al_daemon_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->handle_signals = true;
}

/* Reads the header (and the first user text) of every transcript, so
 * session/list knows them without loading them. Blocking: before the
 * loop runs. Only the first 64 KiB of each file are read. */
static void scan_sessions(al_daemon_t *d) {
  DIR *dir = opendir(d->sessions_dir);
  struct dirent *de;
  char *buf = al_malloc(64 * 1024 + 1);

  if (dir == NULL || buf == NULL) {
    if (dir != NULL) {
      closedir(dir);
    }
    al_free(buf);
    return;
  }
  while ((de = readdir(dir)) != NULL) {
    size_t nl = strlen(de->d_name);
    char id[64];
    char *path;
    int fd;
    ssize_t n;
    session_t *s;
    struct stat st;

    if (nl <= 6 || nl - 6 >= sizeof(id) ||
        strcmp(de->d_name + nl - 6, ".jsonl") != 0) {
      continue;
    }
    memcpy(id, de->d_name, nl - 6);
    id[nl - 6] = '\0';
    if (!valid_session_id(id) || session_find(d, id) != NULL ||
        (path = transcript_path(d, id)) == NULL) {
      continue;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    al_free(path);
    if (fd < 0) {
      continue;
    }
    n = read(fd, buf, 64 * 1024);
    if (fstat(fd, &st) != 0) {
      st.st_mtime = 0;
    }
    close(fd);
    if (n < 0 || (s = session_alloc(d, id)) == NULL) {
      continue;
    }
    buf[n] = '\0';
    s->updated_ms = (uint64_t)st.st_mtime * 1000;
    {
      char *line = buf;

      while (line < buf + n) {
        char *e = memchr(line, '\n', (size_t)(buf + n - line));
        json_t *o;
        const char *rec;

        if (e == NULL) {
          break;
        }
        o = json_loadb(line, (size_t)(e - line), 0, NULL);
        rec = json_string_value(json_object_get(o, "rec"));
        if (rec != NULL && strcmp(rec, "session") == 0 && s->cwd == NULL) {
          set_str(&s->cwd, json_string_value(json_object_get(o, "cwd")));
          set_str(&s->model, json_string_value(json_object_get(o, "model")));
          set_str(&s->provider,
                  json_string_value(json_object_get(o, "provider")));
          set_str(&s->base_url,
                  json_string_value(json_object_get(o, "base_url")));
          set_str(&s->system,
                  json_string_value(json_object_get(o, "system")));
          s->created_ms =
              (uint64_t)json_integer_value(json_object_get(o, "created_ms"));
          if (json_is_array(json_object_get(o, "ask_tools"))) {
            s->ask_tools = json_deep_copy(json_object_get(o, "ask_tools"));
          }
          if (json_is_object(json_object_get(o, "limits"))) {
            s->limits = json_deep_copy(json_object_get(o, "limits"));
          }
        } else if (rec != NULL && strcmp(rec, "user") == 0 &&
                   s->title == NULL) {
          const char *t = json_string_value(json_object_get(
              json_array_get(
                  json_object_get(json_object_get(o, "message"), "content"),
                  0),
              "text"));

          if (t != NULL) {
            s->title = make_title(t);
          }
        }
        json_decref(o);
        if (s->cwd != NULL && s->title != NULL) {
          break;
        }
        line = e + 1;
      }
    }
  }
  closedir(dir);
  al_free(buf);
}

static int take_lock(const char *path, int *out, char *why, size_t why_len) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

  if (fd < 0) {
    int e = -errno;

    snprintf(why, why_len, "cannot open lock %s: %s", path, strerror(-e));
    return e;
  }
  /* A daemon killed while spawning a tool leaves a child between fork and
   * exec that still shares the lock for a moment: retry for up to 0.5 s
   * before calling it another daemon. Startup only, before the loop. */
  for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
    struct timespec ts = {0, 25 * 1000 * 1000};

    if (errno != EWOULDBLOCK || tries == 20) {
      close(fd);
      snprintf(why, why_len, "another agentloopd holds %s", path);
      return UV_EBUSY;
    }
    nanosleep(&ts, NULL);
  }
  *out = fd;
  return 0;
}

/* State directories: created 0700; an existing one of ours that is wider
 * is tightened (transcripts hold the conversation, RELIABILITY F7). Unlike
 * the socket directory it may be a symlink (dotfile setups). */
static int mkdir_private(const char *dir, char *why, size_t why_len) {
  struct stat st;

  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int e = -errno;

    snprintf(why, why_len, "cannot create %s: %s", dir, strerror(-e));
    return e;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(why, why_len, "%s is not a directory", dir);
    return UV_ENOTDIR;
  }
  if (st.st_uid != geteuid()) {
    snprintf(why, why_len, "%s is owned by another user; refusing it", dir);
    return UV_EPERM;
  }
  if ((st.st_mode & 077) != 0 && chmod(dir, 0700) != 0) {
    int e = -errno;

    snprintf(why, why_len, "cannot make %s private: %s", dir, strerror(-e));
    return e;
  }
  return 0;
}

static char *join(const char *a, const char *b) {
  al_buf_t buf;

  al_buf_init(&buf, 8192);
  if (al_buf_printf(&buf, "%s/%s", a, b) != 0) {
    al_buf_free(&buf);
    return NULL;
  }
  return buf.data;
}

static void on_failed_server_closed(uv_handle_t *h) {
  daemon_free(h->data);
}

int al__daemon_new(uv_loop_t *loop, const al_daemon_options_t *o,
                   al_daemon_t **out, char *why, size_t why_len) {
  al_daemon_t *d;
  al_client_options_t co;
  char *lockp = NULL;
  mode_t old;
  int rc;

  *out = NULL;
  why[0] = '\0';
  d = al_calloc(1, sizeof(*d));
  if (d == NULL) {
    return AL_ENOMEM;
  }
  d->loop = loop;
  d->o = *o;
  d->state_lock = d->socket_lock = -1;
  /* libuv writes to sockets with write(2): a client that vanished would
   * kill the process with SIGPIPE (RELIABILITY G7). The daemon core is
   * only ever the daemon (agentloopd, or its tests). */
  signal(SIGPIPE, SIG_IGN);
  if (d->o.max_line == 0) {
    d->o.max_line = AL_RPC_DEFAULT_MAX_LINE;
  }
  if (d->o.max_queue == 0) {
    d->o.max_queue = DEFAULT_MAX_QUEUE;
  }
  if (d->o.soft_ms == UINT64_MAX) {
    d->o.soft_ms = 0;
  } else if (d->o.soft_ms == 0) {
    d->o.soft_ms = DEFAULT_SOFT_MS;
  }
  if (d->o.replay_bytes == 0) {
    d->o.replay_bytes = DEFAULT_REPLAY;
  }
  if (d->o.replay_idle_ms == 0) {
    d->o.replay_idle_ms = DEFAULT_REPLAY_IDLE_MS;
  }
  if (d->o.max_sessions == 0) {
    d->o.max_sessions = 1024;
  }
  if (d->o.max_clients == 0) {
    d->o.max_clients = 1024;
  }
  al_list_init(&d->sessions);
  al_list_init(&d->clients);
  d->socket_path = al_strdup(o->socket_path);
  d->state_dir = al_strdup(o->state_dir);
  d->sessions_dir = join(o->state_dir, "sessions");
  if (d->socket_path == NULL || d->state_dir == NULL ||
      d->sessions_dir == NULL) {
    rc = AL_ENOMEM;
    goto fail;
  }
  /* State: dir 0700, one daemon per state dir (RELIABILITY F5). */
  if ((rc = mkdir_private(d->state_dir, why, why_len)) != 0 ||
      (rc = mkdir_private(d->sessions_dir, why, why_len)) != 0) {
    goto fail;
  }
  lockp = join(d->state_dir, "agentloopd.lock");
  if (lockp == NULL ||
      (rc = take_lock(lockp, &d->state_lock, why, why_len)) != 0) {
    rc = lockp == NULL ? AL_ENOMEM : rc;
    goto fail;
  }
  al_free(lockp);
  lockp = NULL;
  /* Socket: one daemon per path (G9); with the lock held, a leftover file
   * is a stale socket of a dead daemon and is replaced. */
  if ((rc = al__rpc_socket_path_check(d->socket_path, why, why_len)) != 0) {
    goto fail;
  }
  {
    al_buf_t lb;

    al_buf_init(&lb, 8192);
    if (al_buf_printf(&lb, "%s.lock", d->socket_path) != 0) {
      rc = AL_ENOMEM;
      goto fail;
    }
    rc = take_lock(lb.data, &d->socket_lock, why, why_len);
    al_buf_free(&lb);
    if (rc != 0) {
      goto fail;
    }
  }
  scan_sessions(d);
  {
    /* Sessions' agents use the default probe options: probe now, before
     * the loop runs, not inside the first session/create on the loop. */
    al_sandbox_probe_options_t po;

    al_sandbox_probe_options_init(&po);
    al__sandbox_warm(&po);
  }
  al_client_options_init(&co);
  co.ca_file = o->ca_file;
  if ((rc = al_client_new(loop, &co, &d->http)) != 0) {
    snprintf(why, why_len, "cannot create the HTTP client: %s",
             al_strerror(rc));
    goto fail;
  }
  uv_pipe_init(loop, &d->server, 0);
  d->server.data = d;
  /* Bound under a temporary name and renamed into place once listening,
   * so a client never finds a socket that refuses connections. 0600 from
   * creation: no window in which the socket is wider. */
  {
    char tmp[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int tn = snprintf(tmp, sizeof(tmp), "%s.%d", d->socket_path,
                      (int)getpid());
    const char *bindp =
        tn > 0 && (size_t)tn < sizeof(tmp) ? tmp : d->socket_path;

    unlink(bindp);
    if (bindp == d->socket_path) {
      unlink(d->socket_path);
    }
    old = umask(0177);
    rc = uv_pipe_bind(&d->server, bindp);
    umask(old);
    if (rc == 0 && o->open_socket) {
      chmod(bindp, 0666);
    }
    if (rc == 0) {
      rc = uv_listen((uv_stream_t *)&d->server, 128, on_connection);
    }
    if (rc == 0 && bindp != d->socket_path &&
        rename(bindp, d->socket_path) != 0) {
      rc = -errno;
    }
    if (rc != 0 && bindp != d->socket_path) {
      unlink(bindp);
    }
  }
  if (rc != 0) {
    snprintf(why, why_len, "cannot listen on %s: %s", d->socket_path,
             uv_strerror(rc));
    al_client_close(d->http, NULL);
    d->http = NULL;
    while (!al_list_empty(&d->sessions)) {
      session_free(AL_CONTAINER_OF(d->sessions.next, session_t, node));
    }
    /* d holds the server handle: freed in its close callback (the caller
     * runs the loop to drain it, as it must before uv_loop_close). */
    uv_close((uv_handle_t *)&d->server, on_failed_server_closed);
    return rc;
  }
  uv_signal_init(loop, &d->sigterm);
  uv_signal_init(loop, &d->sigint);
  d->sigterm.data = d->sigint.data = d;
  if (o->handle_signals) {
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_signal, SIGINT);
  }
  uv_unref((uv_handle_t *)&d->sigterm);
  uv_unref((uv_handle_t *)&d->sigint);
  uv_timer_init(loop, &d->idle);
  uv_timer_init(loop, &d->grace);
  uv_timer_init(loop, &d->sweep);
  d->idle.data = d->grace.data = d->sweep.data = d;
  if (d->o.replay_idle_ms != UINT64_MAX) {
    /* Checked at half the idle time: a ring lives at most 1.5 x it. */
    uint64_t every = d->o.replay_idle_ms / 2 > 0 ? d->o.replay_idle_ms / 2 : 1;

    uv_timer_start(&d->sweep, on_sweep, every, every);
    uv_unref((uv_handle_t *)&d->sweep);
  }
  idle_check(d);
  *out = d;
  return 0;

fail:
  al_free(lockp);
  while (!al_list_empty(&d->sessions)) {
    session_free(AL_CONTAINER_OF(d->sessions.next, session_t, node));
  }
  daemon_free(d);
  return rc;
}

void al__daemon_stats(const al_daemon_t *d, al_daemon_stats_t *out) {
  const al_list_t *pos;

  *out = d->stats;
  out->replay_bytes = 0;
  al_list_foreach(pos, &d->sessions) {
    out->replay_bytes +=
        AL_CONTAINER_OF(pos, const session_t, node)->ring_bytes;
  }
  out->clients = d->nclients;
  out->sessions_loaded = d->nloaded;
  out->sessions_known = d->nknown;
}

al_agent_t *al__daemon_agent(al_daemon_t *d, const char *session) {
  session_t *s = session_find(d, session);

  return s != NULL ? s->agent : NULL;
}
