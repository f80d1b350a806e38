/* Daemon sessions (internal.h): each a transcript header's settings, an
 * agent, a transcript writer, a ring of recent encoded events for since_seq
 * replay, and its subscribers.
 *
 * Invariants:
 *  - Every LoopEvent is encoded once into a refcounted blob (the line with
 *    its '\n'); the transcript, the replay ring and every subscriber's
 *    socket write share it. A notification is three iovecs: a fixed
 *    prefix, the event, a fixed suffix; nothing is re-encoded per client.
 *  - Past max_queue a subscription is ended with a `lagged` notice
 *    carrying the seq to resume from (the client layer cuts off what still
 *    grows).
 *  - Runs belong to sessions, not clients: a client that goes away only
 *    loses its subscriptions. */
#include "daemon/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/agentdefs.h"
#include "loop/permrule.h"
#include "sandbox/sandbox.h"

static char *dup_or_null(const char *s) {
  return s != NULL ? al_strdup(s) : NULL;
}

uint64_t al__wall_ms(void) {
  uv_timeval64_t tv;

  if (uv_gettimeofday(&tv) != 0) {
    return 0;
  }
  return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

void al__set_str(char **dst, const char *s) {
  char *n = dup_or_null(s);

  if (s != NULL && n == NULL) {
    return; /* OOM: keep the old value */
  }
  al_free(*dst);
  *dst = n;
}

/* The session title: the first user input cut at TITLE_MAX bytes on a
 * character boundary (al_malloc'd, NULL on OOM). */
char *al__make_title(const char *t) {
  size_t tl = strlen(t);

  if (tl > TITLE_MAX) {
    tl = TITLE_MAX;
    while (tl > 0 && ((unsigned char)t[tl] & 0xC0) == 0x80) {
      tl--;
    }
  }
  return al_strndup(t, tl);
}
/* ---- subscriptions ---------------------------------------------------------- */

void al__sub_free(sub_t *sub) {
  sub->s->last_active = uv_now(sub->s->d->loop);
  al_list_remove(&sub->snode);
  al_list_remove(&sub->cnode);
  al_free(sub);
}

sub_t *al__sub_find(session_t *s, client_t *c) {
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

  client_daemon(c)->stats.lagged++;
  al_log(AL_LOG_INFO, "client %s lagged on %s at seq %llu", c->id, s->id,
         (unsigned long long)resume_seq);
  al__sub_free(sub);
  al__dclient_send(c, al_rpc_notification_new(
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
  al_daemon_t *d = client_daemon(c);
  size_t q = al__dclient_queued(c);
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
  al__dclient_event(sub->c, line);
  return true;
}

/* ---- sessions: events and commits ------------------------------------------- */

ring_entry_t *al__ring_at(session_t *s, size_t i) {
  return &s->ring[(s->ring_head + i) % s->ring_cap];
}

static void ring_drop_oldest(session_t *s) {
  ring_entry_t *e = al__ring_at(s, 0);

  s->ring_bytes -= e->line->len;
  al__blob_unref(e->line);
  e->line = NULL;
  s->ring_head = (s->ring_head + 1) % s->ring_cap;
  s->ring_n--;
}

void al__ring_push(session_t *s, uint64_t seq, al_blob_t *line) {
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
        nr[i] = *al__ring_at(s, i);
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
size_t al__ring_find(session_t *s, uint64_t seq) {
  size_t lo = 0, hi = s->ring_n;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;

    if (al__ring_at(s, mid)->seq < seq) {
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
void al__ring_sweep(uv_timer_t *t) {
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
void al__sub_pump(sub_t *sub) {
  session_t *s = sub->s;
  client_t *c = sub->c;
  size_t i;

  if (!sub->catching) {
    return;
  }
  if (s->ring_n > 0 && sub->next < al__ring_at(s, 0)->seq && sub->next > 0 &&
      sub->next < s->next_seq && sub->started) {
    /* What it still needs was evicted while it caught up. */
    sub_lag(sub, sub->next);
    return;
  }
  i = al__ring_find(s, sub->next);
  while (i < s->ring_n && al__dclient_queued(c) <= client_daemon(c)->o.max_queue && !c->closing) {
    ring_entry_t *e = al__ring_at(s, i);

    al__dclient_event(c, e->line);
    sub->next = e->seq + 1;
    sub->started = true;
    i++;
  }
  if (i >= s->ring_n) {
    sub->catching = false;
  }
}

void al__session_tx_put(session_t *s, al_blob_t *b, bool sync) {
  if (s->tx != NULL) {
    al__tx_append(s->tx, b, sync);
  }
}

/* A "rec" record (header, history): hash-chained and synced. */
void al__session_tx_put_rec(session_t *s, al_blob_t *b) {
  if (s->tx != NULL) {
    al__tx_append_chained(s->tx, b, true);
  }
}

/* ---- durability: what a client is told is final is on disk --------------- */

typedef struct {
  al_list_t node;
  uint64_t seq;
  al_blob_t *line;
  bool last; /* final */
} held_event_t;

static void deliver(session_t *s, uint64_t seq, al_blob_t *line) {
  al_list_t *pos;
  al_list_t *next;

  al__ring_push(s, seq, line);
  for (pos = s->subs.next; pos != &s->subs; pos = next) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, snode);

    next = pos->next;
    if (sub->catching) {
      al__sub_pump(sub); /* the event is in the ring */
    } else {
      sub_send(sub, line, seq);
    }
  }
}

/* session/persist_error / session/persist_ok to every watcher. */
static void persist_notify(session_t *s, int err, bool lost) {
  al_list_t *pos;
  char msg[300];

  if (err == 0) {
    snprintf(msg, sizeof(msg), "the transcript is written again; every "
                               "turn so far is on disk");
  } else if (lost) {
    snprintf(msg, sizeof(msg),
             "transcript records were lost (%s): a restart will not have "
             "this session's later turns; the session goes on in memory",
             al_strerror(err));
  } else {
    snprintf(msg, sizeof(msg),
             "the transcript cannot be written (%s): the session goes on "
             "in memory and the write is retried; until it succeeds a "
             "restart would lose the turns since",
             al_strerror(err));
  }
  al_list_foreach(pos, &s->subs) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, snode);

    al__dclient_send(
        sub->c,
        al_rpc_notification_new(
            err == 0 ? "session/persist_ok" : "session/persist_error",
            err == 0 ? json_pack("{s:s, s:s}", "session", s->id, "message",
                                 msg)
                     : json_pack("{s:s, s:s, s:s, s:b, s:I, s:s}", "session",
                                 s->id, "error", al_err_name(err), "code",
                                 al_strerror(err), "lost", lost,
                                 "pending_bytes",
                                 (json_int_t)(s->tx != NULL
                                                  ? al__tx_pending(s->tx)
                                                  : 0),
                                 "message", msg)));
  }
}

static void on_tx_state(al_tx_t *tx, int err, bool lost, void *data) {
  session_t *s = data;

  (void)tx;
  al_log(err == 0 ? AL_LOG_INFO : AL_LOG_ERROR, "session %s: %s%s", s->id,
         err == 0 ? "transcript written again" : "transcript failing: ",
         err == 0 ? "" : al_strerror(err));
  s->persist_err = err;
  persist_notify(s, err, lost);
}

static void on_last_flushed(al_tx_t *tx, void *data);

static bool hold_flush(session_t *s) {
  if (s->tx == NULL || al__tx_flush(s->tx, on_last_flushed, s) != 0) {
    return false;
  }
  s->holding = true;
  return true;
}

/* Releases held events up to the next last event whose flush is needed;
 * a later last event starts its own flush. */
static void release_held(session_t *s, bool first_is_flushed) {
  bool flushed = first_is_flushed;

  while (!al_list_empty(&s->held)) {
    held_event_t *h = AL_CONTAINER_OF(s->held.next, held_event_t, node);

    if (h->last && !flushed) {
      if (hold_flush(s)) {
        return;
      }
    }
    if (h->last) {
      flushed = false;
    }
    al_list_remove(&h->node);
    deliver(s, h->seq, h->line);
    al__blob_unref(h->line);
    al_free(h);
  }
}

static void on_last_flushed(al_tx_t *tx, void *data) {
  session_t *s = data;
  int err = al__tx_error(tx);

  s->holding = false;
  if (err != 0) {
    /* The run's history is not durable: say so before its last event. */
    persist_notify(s, err, al__tx_lost(tx));
  }
  release_held(s, true);
}

static void held_free(session_t *s) {
  while (!al_list_empty(&s->held)) {
    held_event_t *h = AL_CONTAINER_OF(s->held.next, held_event_t, node);

    al_list_remove(&h->node);
    al__blob_unref(h->line);
    al_free(h);
  }
}

void al__session_on_event(const al_event_t *ev, void *data) {
  session_t *s = data;
  json_t *j;
  size_t n;
  al_blob_t *line;
  bool last;
  /* A sub-agent's re-posted event (ev->path; the child's session, run
   * and turn, this stream's seq) goes to the watchers and into the
   * transcript (so since_seq replays it; the loader does not take it for
   * this session's run), except its deltas: its text is in its own
   * transcript's commits (on_child). It changes no state here but the
   * usage (the session's includes its children's). */
  bool child = ev->path != NULL;

  j = al__events_to_json(ev);
  n = j != NULL ? json_dumpb(j, NULL, 0, JSON_COMPACT) : 0;
  line = n > 0 ? al__blob_alloc(n + 1) : NULL;

  /* A background child may run on while the session is idle: the
   * session is not unloaded under it (an unload closes the agent, which
   * cancels its children). */
  if (ev->path == NULL && ev->type == AL_EVENT_SUBAGENT_STARTED) {
    s->children++;
  } else if (ev->path == NULL && ev->type == AL_EVENT_SUBAGENT_COMPLETED &&
             s->children > 0) {
    s->children--;
  }
  al__tx_kids_event(s->kids, ev);
  switch (child && ev->type != AL_EVENT_USAGE ? AL_EVENT_TYPE_COUNT
                                              : ev->type) {
  case AL_EVENT_RUN_STARTED:
    s->running = true;
    s->run = ev->run;
    s->next_run = ev->run + 1;
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
  s->updated_ms = al__wall_ms();
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
  {
    /* A reply's deltas past their bound stay out of the transcript (a
     * reply rejected at its limit leaves a bounded trace); they are
     * still delivered live below. */
    al_blob_t *note = NULL;

    if (child) {
      if (!al__tx_is_delta(ev->type)) {
        al__session_tx_put(s, line, false);
      }
    } else if (al__tx_deltas_keep(&s->deltas, ev, line->len, &note)) {
      if (note != NULL && s->tx != NULL) {
        al__tx_append_chained(s->tx, note, false);
      }
      al__session_tx_put(s, line, false);
    }
    al__blob_unref(note);
  }
  /* Only `final` says "done": error and interrupted keep their place
   * before turn/cancel's answer (al_agent_cancel's contract). */
  last = !child && ev->type == AL_EVENT_FINAL;
  if (s->holding || (last && hold_flush(s))) {
    /* The run's last event waits for its history to be synced (a few
     * ms); events after it keep their order behind it. */
    held_event_t *h = al_malloc(sizeof(*h));

    if (h != NULL) {
      h->seq = ev->seq;
      h->line = line; /* the ref moves */
      h->last = last;
      al_list_insert_tail(&s->held, &h->node);
      line = NULL;
    }
  }
  if (line != NULL) {
    deliver(s, ev->seq, line);
    al__blob_unref(line);
  }
  if (!s->running) {
    al__daemon_idle_check(s->d);
  }
}

static void on_commit(al_agent_t *agent, al_commit_kind_t kind,
                      const char *message, size_t len, void *data) {
  session_t *s = data;
  al_blob_t *b = al__tx_commit_record(kind, message, len);

  if (b == NULL) {
    al_log(AL_LOG_ERROR, "session %s: cannot record a history commit", s->id);
    return;
  }
  /* History commits are the durable part: fdatasync after them. */
  al__session_tx_put_rec(s, b);
  al__blob_unref(b);
  if (kind == AL_COMMIT_USER && s->title == NULL) {
    json_t *m = json_loadb(message, len, 0, NULL);
    const char *t = json_string_value(json_object_get(
        json_array_get(json_object_get(m, "content"), 0), "text"));

    if (t != NULL) {
      s->title = al__make_title(t);
    }
    json_decref(m);
  }
}

/* ---- sessions: lifecycle ------------------------------------------------------ */

session_t *al__session_find(al_daemon_t *d, const char *id) {
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

session_t *al__session_alloc(al_daemon_t *d, const char *id) {
  session_t *s = al_calloc(1, sizeof(*s));

  if (s == NULL) {
    return NULL;
  }
  s->d = d;
  snprintf(s->id, sizeof(s->id), "%s", id);
  al_list_init(&s->subs);
  al_list_init(&s->held);
  al_list_init(&s->resumes);
  s->next_seq = 1;
  al__tx_deltas_init(&s->deltas, AL_TX_REPLY_DELTAS_MAX);
  al_list_insert_tail(&d->sessions, &s->node);
  d->nknown++;
  return s;
}

void al__session_free(session_t *s) {
  al_daemon_t *d = s->d;

  al_list_remove(&s->node);
  d->nknown--;
  held_free(s);
  ring_free(s);
  json_decref(s->recovered);
  json_decref(s->child_links);
  al__tx_header_free(&s->h);
  if (s->api_key != NULL) {
    memset(s->api_key, 0, strlen(s->api_key));
    al_free(s->api_key);
  }
  al_free(s->mcp_config);
  al_free(s->hooks_config);
  al_free(s->title);
  al_free(s);
}

char *al__transcript_path(al_daemon_t *d, const char *id) {
  al_buf_t b;

  al_buf_init(&b, 8192);
  if (al_buf_printf(&b, "%s/%s.jsonl", d->sessions_dir, id) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  return b.data;
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
  json_t *in = NULL;
  bool ask = false;

  json_array_foreach(s->h.ask_tools, i, v) {
    const char *rule = json_string_value(v);

    if (rule == NULL) {
      continue;
    }
    if (strchr(rule, '(') != NULL && in == NULL) {
      in = json_loads(input, 0, NULL); /* only a pattern needs it */
    }
    if (al__perm_rule_match(rule, tool, in, false)) {
      ask = true;
      break;
    }
  }
  json_decref(in);
  return ask ? AL_PERMISSION_ASK : AL_PERMISSION_DEFAULT;
}

/* A JSON array of strings into a configuration list (copies). */
static int cfg_list(const json_t *a, al_cfg_list_t *out) {
  size_t i, n = 0;
  json_t *v;

  if (!json_is_array(a) || json_array_size(a) == 0) {
    return 0;
  }
  *out = al_calloc(json_array_size(a) + 1, sizeof(**out));
  if (*out == NULL) {
    return AL_ENOMEM;
  }
  json_array_foreach(a, i, v) {
    if (json_is_string(v) &&
        ((*out)[n++] = al_strdup(json_string_value(v))) == NULL) {
      return AL_ENOMEM;
    }
  }
  return 0;
}

static int cfg_str(const char *s, char **out) {
  return s == NULL || (*out = al_strdup(s)) != NULL ? 0 : AL_ENOMEM;
}

/* A session's settings (its header: what the client's configuration said
 * at session/create) as the configuration they came from, so the daemon
 * maps them with al_config_agent_options as `agentloop run` does. A
 * header that never reached the disk has no settings: the daemon's
 * defaults apply. Paths are absolute already. */
static int header_config(const al_daemon_options_t *dopts,
                         const al_tx_header_t *h, al_config_t *cfg) {
  json_t *to = h->timeouts;
  char why[600];
  int rc = 0;

  rc |= cfg_str(h->provider != NULL ? h->provider : dopts->provider,
                &cfg->provider);
  rc |= cfg_str(h->model != NULL ? h->model : dopts->model, &cfg->model);
  rc |= cfg_str(h->base_url != NULL ? h->base_url : dopts->base_url,
                &cfg->base_url);
  rc |= cfg_str(h->fallback_model, &cfg->fallback_model);
  rc |= cfg_str(h->sandbox, &cfg->sandbox.mode);
  cfg->max_tokens = h->max_tokens;
  cfg->max_turns = h->max_turns;
  cfg->sandbox.network = h->network ? 1 : -1;
  cfg->timeouts.connect_ms =
      json_integer_value(json_object_get(to, "connect_ms"));
  cfg->timeouts.idle_ms = json_integer_value(json_object_get(to, "idle_ms"));
  cfg->timeouts.progress_ms =
      json_integer_value(json_object_get(to, "progress_ms"));
  cfg->timeouts.tool_ms = json_integer_value(json_object_get(to, "tool_ms"));
  rc |= cfg_list(h->allow_tools, &cfg->permissions.allow);
  rc |= cfg_list(h->deny_tools, &cfg->permissions.deny);
  rc |= cfg_list(h->ask_tools, &cfg->permissions.ask);
  rc |= cfg_list(json_object_get(h->paths, "denied"), &cfg->sandbox.denied);
  rc |= cfg_list(json_object_get(h->paths, "writable"),
                 &cfg->sandbox.writable);
  rc |= cfg_list(json_object_get(h->paths, "tools_dirs"), &cfg->tools_d);
  if (h->limits != NULL) {
    rc |= json_object_set(cfg->sections, "limits", h->limits);
  }
  if (h->context != NULL) {
    rc |= json_object_set(cfg->sections, "context", h->context);
  }
  /* Checked at session/create; a hand-edited header: the defaults. */
  if (al__config_subagents_from_json(h->subagents, cfg, why,
                                     sizeof(why)) != 0) {
    memset(&cfg->subagents, 0, sizeof(cfg->subagents));
    cfg->subagents.enabled = -1;
    cfg->subagents.parallel_writers = -1;
  }
  return rc != 0 ? AL_ENOMEM : 0;
}

/* The daemon's environment is not the session's: a key comes from the
 * client or from the daemon's own settings, never a variable read here. */
static const char *no_env(const char *name) {
  (void)name;
  return NULL;
}

int al__session_agent_options(const al_daemon_options_t *dopts,
                              const al_models_t *models,
                              const al_tx_header_t *h, const char *api_key,
                              bool own_config, const char *mcp_config,
                              const char *hooks_config, al_agent_options_t *o,
                              al_agent_opts_store_t *st, char *why,
                              size_t why_len) {
  al_config_t cfg;
  al_agent_opts_input_t in;
  int rc;

  al_config_init(&cfg);
  rc = header_config(dopts, h, &cfg);
  al_agent_opts_input_init(&in);
  /* Watchers answer approvals (ask rules: on_permission). */
  in.permission_mode = AL_PERMISSION_MODE_INTERACTIVE;
  in.workspace = h->cwd;
  in.system = h->system;
  in.api_key = api_key != NULL ? api_key
               : cfg.provider != NULL &&
                       strcmp(cfg.provider, "anthropic") != 0
                   ? dopts->openai_key
                   : dopts->anthropic_key;
  in.getenv_fn = no_env;
  in.models = models;
  in.base_limits = &dopts->limits; /* the daemon's, then the session's */
  in.ceiling = &dopts->limits;     /* made under higher ceilings: today's */
  in.retry_base_ms = dopts->retry_base_ms;
  in.retry_cap_ms = dopts->retry_cap_ms;
  in.kill_grace_ms = dopts->kill_grace_ms;
  /* The client's configuration when it sent one (issue 22: the daemon's
   * was read when it started, perhaps before the user's last edit). */
  in.mcp_text_given = true;
  in.mcp_config = own_config ? mcp_config : dopts->mcp_config;
  in.hooks_config = own_config ? hooks_config : dopts->hooks_config;
  /* A trusted project's .mcp.json too, read off the loop by the agent. */
  in.mcp_project = true;
  /* Checked at session/create; a hand-edited header falls back to the
   * defaults for what it cannot parse. */
  in.lenient = true;
  /* The client's agent definitions and child preamble, as the header
   * keeps them (no agent file is read here); one the header cannot give
   * leaves the built-ins. */
  if (rc == 0 && h->subagents != NULL) {
    char no[600];

    if (al_agentdefs_from_json(json_object_get(h->subagents, "agents"),
                               &st->defs, no, sizeof(no)) == AL_ENOMEM) {
      rc = AL_ENOMEM;
    }
    if (st->defs != NULL) {
      in.subagents = st->defs->defs;
      in.n_subagents = st->defs->n;
    }
    in.task_preamble =
        json_string_value(json_object_get(h->subagents, "preamble"));
  }
  if (rc == 0) {
    rc = al_config_agent_options(&cfg, &in, o, st, why, why_len);
  } else {
    snprintf(why, why_len, "out of memory");
  }
  al_config_free(&cfg);
  return rc;
}

/* al_child_cb: each sub-agent of the session (children of children too)
 * gets its own transcript in the sessions directory, linked from its
 * parent's. */
static void on_child(al_agent_t *parent, const al_child_info_t *info,
                     al_commit_cb *commit, void **commit_data, void *data) {
  session_t *s = data;
  al_tx_child_t c = {info->task_id,     info->session_id, info->parent_session,
                     info->parent_call, info->agent,      info->background,
                     info->depth};
  al_blob_t *link = NULL;
  int rc;

  (void)parent;
  *commit = NULL;
  *commit_data = NULL;
  if (s->kids == NULL) {
    return;
  }
  rc = al__tx_kids_open(s->kids, &c, &s->h, commit_data, &link);
  if (rc != 0) {
    al_log(AL_LOG_ERROR, "session %s: sub-agent %s keeps no transcript: %s",
           s->id, c.task_id != NULL ? c.task_id : "?", al_strerror(rc));
  }
  if (*commit_data != NULL) {
    *commit = al__tx_kid_commit;
  }
  if (link != NULL) {
    json_t *o = json_loadb(link->data, link->len, 0, NULL);

    al__session_tx_put_rec(s, link);
    al__blob_unref(link);
    /* As a load lists it (session/resume's children). */
    if (o != NULL && (s->child_links != NULL ||
                      (s->child_links = json_array()) != NULL)) {
      json_object_del(o, "rec");
      json_array_append(s->child_links, o);
    }
    json_decref(o);
  }
}

/* The session's agent from its settings, subscribed. */
static int agent_create(session_t *s, uint64_t first_seq, uint64_t first_run,
                        al_agent_t **out, char *why, size_t why_len) {
  al_daemon_t *d = s->d;
  al_agent_options_t ao;
  al_agent_opts_store_t st;
  int rc;

  al_agent_opts_store_init(&st);
  rc = al__session_agent_options(&d->o, d->models, &s->h, s->api_key,
                                 s->own_config, s->mcp_config,
                                 s->hooks_config, &ao, &st, why, why_len);
  if (rc != 0) {
    al_agent_opts_store_free(&st);
    return rc;
  }
  /* The session's wiring: the shared client, approvals, numbering, the
   * transcript. */
  ao.client = d->http;
  ao.pace_rpm = d->o.pace_rpm; /* the process's, like the client */
  ao.pace_burst = d->o.pace_burst;
  ao.permission = on_permission;
  ao.permission_data = s;
  ao.session_id = s->id;
  ao.first_seq = first_seq;
  ao.first_run = first_run;
  ao.on_commit = on_commit;
  ao.commit_data = s;
  ao.on_child = on_child;
  ao.child_data = s;
  ao.data = s;
  /* Cleared tool outputs live next to the transcript (docs/context.md),
   * so read_tool_output works after a resume. */
  {
    al_buf_t od;

    al_buf_init(&od, 8192);
    if (al_buf_printf(&od, "%s/%s.tool-output", d->sessions_dir, s->id) == 0) {
      ao.tool_output_dir = od.data;
    }
    rc = al_agent_new(d->loop, &ao, out); /* the options are copied */
    al_buf_free(&od);
  }
  al_agent_opts_store_free(&st);
  if (rc != 0) {
    snprintf(why, why_len, "cannot create the agent: %s (bad provider, "
                           "base_url or cwd?)", al_strerror(rc));
    return rc;
  }
  rc = al_agent_subscribe(*out, al__session_on_event, s, NULL);
  if (rc != 0) {
    snprintf(why, why_len, "cannot create the agent: %s", al_strerror(rc));
    al_agent_close(*out, NULL);
    *out = NULL;
  }
  return rc;
}

/* Creates the session's agent and transcript writer from its settings.
 * first_seq continues a resumed transcript's numbering. */
int al__session_start(session_t *s, uint64_t first_seq,
                         uint64_t first_run, char *why, size_t why_len) {
  al_daemon_t *d = s->d;
  char *path;
  int rc;

  rc = agent_create(s, first_seq, first_run, &s->agent, why, why_len);
  if (rc != 0) {
    return rc;
  }
  s->next_run = first_run > 0 ? first_run : 1;
  path = al__transcript_path(d, s->id);
  rc = path != NULL ? al__tx_open(d->loop, path, TX_MAX_QUEUE, &s->tx)
                    : AL_ENOMEM;
  al_free(path);
  if (rc == 0) {
    al__tx_set_state_cb(s->tx, on_tx_state, s);
    /* A new session's chain binds its id (a resume continues the loaded
     * chain instead). */
    al__tx_set_chain(s->tx, "", s->id);
    s->kids = al__tx_kids_new(d->loop, d->sessions_dir, TX_MAX_QUEUE);
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

json_t *al__session_info(const session_t *s) {
  const char *prov = s->h.provider != NULL ? s->h.provider : "anthropic";

  return json_pack("{s:s, s:s?, s:s?, s:s, s:s?, s:I, s:I}", "session",
                   s->id, "cwd", s->h.cwd, "model", s->h.model, "provider",
                   prov, "base_url", s->h.base_url, "created_ms",
                   (json_int_t)s->h.created_ms, "next_seq",
                   (json_int_t)s->next_seq);
}

/* ---- session shutdown --------------------------------------------------------- */

void al__session_maybe_free(session_t *s) {
  if (s->closing && s->agent_closed && s->tx_closed && !s->loading &&
      !s->kids_closing) {
    al_daemon_t *d = s->d;

    if (s->loaded) {
      d->nloaded--;
    }
    al__session_free(s);
    d->pending--;
    al__daemon_maybe_exit(d);
  }
}

static void on_session_tx_closed(al_tx_t *tx, void *data) {
  session_t *s = data;

  s->tx = NULL;
  s->tx_closed = true;
  al__session_maybe_free(s);
}

/* The children's transcripts, once the agent (and so every child) is
 * closed: they flush and close on their own (the set frees itself). */
static void on_kids_closed(void *data) {
  session_t *s = data;

  s->kids_closing = false;
  al__session_maybe_free(s);
}

static void session_close_kids(session_t *s) {
  if (s->kids != NULL) {
    /* A closing session (and so the daemon's exit) waits for them. */
    s->kids_closing = true;
    al__tx_kids_close(s->kids, on_kids_closed, s);
    s->kids = NULL;
  }
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
  session_close_kids(s);
  session_close_tx(s);
  al__session_maybe_free(s);
}

bool al__session_is_idle(const session_t *s) {
  /* Not while its writer fails or has records queued: an unload closes
   * the writer, and a close while writes fail loses what is queued. */
  return s->loaded && !s->loading && !s->closing && !s->unloading &&
         !s->running && !s->holding && s->agent != NULL &&
         s->children == 0 &&
         !al_agent_running(s->agent) && al_list_empty(&s->subs) &&
         al_list_empty(&s->resumes) && al_list_empty(&s->held) &&
         s->tx != NULL && al__tx_error(s->tx) == 0 &&
         al__tx_pending(s->tx) == 0;
}

/* Answers the resumes waiting on s with an error (no load will). */
static void resumes_fail(session_t *s, int code, const char *msg) {
  while (!al_list_empty(&s->resumes)) {
    pending_resume_t *p =
        AL_CONTAINER_OF(s->resumes.next, pending_resume_t, node);

    al_list_remove(&p->node);
    if (p->c != NULL && !p->c->closing) {
      al__daemon_reply_err(p->c, p->id, code, msg, NULL);
    }
    json_decref(p->id);
    json_decref(p->params);
    al_free(p);
  }
}

/* The end of an unload: the session is known, not loaded; a resume that
 * came meanwhile starts its load now, a shutdown frees it. */
static void unload_done(session_t *s) {
  al_daemon_t *d = s->d;

  s->unloading = false;
  s->loaded = false;
  d->nloaded--;
  d->nunloading--;
  d->stats.unloaded++;
  if (s->closing) {
    resumes_fail(s, AL_RPC_OVERLOADED, "the daemon is shutting down");
    al__session_maybe_free(s);
    return;
  }
  s->agent_closed = false;
  s->tx_closed = false;
  if (!al_list_empty(&s->resumes) && !s->loading) {
    if (uv_queue_work(d->loop, &s->work, al__session_load_work,
                      al__session_load_done) == 0) {
      s->loading = true;
      d->pending++;
    } else {
      resumes_fail(s, AL_RPC_INTERNAL_ERROR, "cannot queue the load");
    }
  }
  al__daemon_maybe_exit(d);
}

static void on_unload_tx_closed(al_tx_t *tx, void *data) {
  session_t *s = data;

  (void)tx;
  s->tx = NULL;
  s->tx_closed = true;
  unload_done(s);
}

static void on_unload_agent_closed(al_agent_t *agent) {
  session_t *s = al_agent_get_data(agent);

  s->agent = NULL;
  s->agent_closed = true;
  session_close_kids(s);
  if (s->tx != NULL) {
    al__tx_close(s->tx, on_unload_tx_closed, s);
  } else {
    s->tx_closed = true;
    unload_done(s);
  }
}

void al__session_unload(session_t *s) {
  if (!al__session_is_idle(s)) {
    return;
  }
  s->unloading = true;
  s->d->nunloading++;
  /* The load rebuilds it from the transcript. */
  ring_free(s);
  json_decref(s->recovered);
  s->recovered = NULL;
  json_decref(s->child_links);
  s->child_links = NULL;
  al_agent_close(s->agent, on_unload_agent_closed);
}

void al__session_close(session_t *s) {
  if (s->closing) {
    return;
  }
  s->closing = true;
  s->d->pending++;
  if (s->unloading) {
    /* Its agent and writer are closing already: unload_done frees it. */
    al__session_unsubscribe_all(s, "shutdown");
    return;
  }
  /* Cancel first: the run's interrupted event reaches the watchers and
   * the transcript before they are told the session closed. */
  if (s->agent != NULL && al_agent_running(s->agent)) {
    al_agent_cancel(s->agent);
  }
  if (!al_list_empty(&s->held)) {
    /* Closing: the watchers are leaving; what they were to see goes out
     * now, after a failure notice when the writer is failing (the close
     * flushes what it can and logs what it could not). */
    if (s->tx != NULL && al__tx_error(s->tx) != 0) {
      persist_notify(s, al__tx_error(s->tx), al__tx_lost(s->tx));
    }
    release_held(s, true);
  }
  al__session_unsubscribe_all(s, "shutdown");
  if (s->agent != NULL) {
    al_agent_close(s->agent, on_session_agent_closed);
  } else {
    s->agent_closed = true;
    session_close_tx(s);
  }
  al__session_maybe_free(s);
}

void al__session_unsubscribe_all(session_t *s, const char *reason) {
  while (!al_list_empty(&s->subs)) {
    sub_t *sub = AL_CONTAINER_OF(s->subs.next, sub_t, snode);
    client_t *c = sub->c;

    al__sub_free(sub);
    al__dclient_send(c, al_rpc_notification_new(
                       "session/closed", json_pack("{s:s, s:s}", "session",
                                                   s->id, "reason", reason)));
  }
}
void al__session_load_work(uv_work_t *w) {
  session_t *s = AL_CONTAINER_OF(w, session_t, work);
  char *path = al__transcript_path(s->d, s->id);

  if (path == NULL) {
    memset(&s->loaded_tx, 0, sizeof(s->loaded_tx));
    al__history_init(&s->loaded_tx.history);
    s->loaded_tx.err = AL_ENOMEM;
    return;
  }
  al__tx_load(path, true, s->d->o.replay_bytes, &s->loaded_tx);
  al_free(path);
}

/* A resuming client's settings fill in what the session lacks (a header
 * that never reached the disk, a key lost with a restart) and replace
 * what it has only when the client asks ("configure": true): a chat
 * resumed from another shell must not re-point the session, and the chat
 * already attached to it, at that shell's model and URL (issue 22). */
static void resume_apply_params(session_t *s, json_t *params) {
  bool force = json_is_true(json_object_get(params, "configure"));
  const char *v;

  if ((v = json_string_value(json_object_get(params, "model"))) != NULL &&
      (force || s->h.model == NULL)) {
    al__set_str(&s->h.model, v);
  }
  if ((v = json_string_value(json_object_get(params, "provider"))) != NULL &&
      (force || s->h.provider == NULL) &&
      (strcmp(v, "anthropic") == 0 || strcmp(v, "openai") == 0 ||
       strcmp(v, "openai-responses") == 0)) {
    al__set_str(&s->h.provider, v);
  }
  if ((v = json_string_value(json_object_get(params, "base_url"))) != NULL &&
      (force || s->h.base_url == NULL)) {
    al__set_str(&s->h.base_url, v);
  }
  if ((v = json_string_value(json_object_get(params, "fallback_model"))) !=
          NULL &&
      (force || s->h.fallback_model == NULL)) {
    al__set_str(&s->h.fallback_model, v);
  }
  if ((v = json_string_value(json_object_get(params, "system"))) != NULL &&
      (force || s->h.system == NULL)) {
    al__set_str(&s->h.system, v);
  }
  if ((v = json_string_value(json_object_get(params, "api_key"))) != NULL &&
      (force || s->api_key == NULL)) {
    al__set_str(&s->api_key, v);
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
    al__session_on_event(&ev, s);
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
  al__session_on_event(&ev, s);
}

void al__session_load_done(uv_work_t *w, int status) {
  session_t *s = AL_CONTAINER_OF(w, session_t, work);
  al_daemon_t *d = s->d;
  al_tx_loaded_t *l = &s->loaded_tx;
  char why[256] = "";
  int rc = status != 0 ? status : l->err;
  pending_resume_t *first = NULL;
  size_t i;
  size_t nsynth = 0;

  s->loading = false;
  if (l->has_header) {
    /* The newest header: it may have reached the file after the startup
     * scan read it, or changed since (session/configure). */
    json_t *ask = s->h.ask_tools != NULL ? json_incref(s->h.ask_tools) : NULL;

    al__tx_header_free(&s->h);
    s->h = l->header;
    memset(&l->header, 0, sizeof(l->header));
    if (ask != NULL) {
      json_decref(s->h.ask_tools);
      s->h.ask_tools = ask;
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
    rc = al__session_start(s, l->last_seq + 1 + nsynth, l->last_run + 1, why,
                       sizeof(why));
    if (rc == 0 && s->tx != NULL) {
      /* New records follow the last good one, in the file's format. */
      al__tx_set_chain(s->tx, l->chain, l->chain_id);
    }
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
      al__ring_push(s, l->events[i].seq, l->events[i].line);
    }
    s->last_active = uv_now(s->d->loop);
    s->next_seq = l->last_seq + 1;
    if (nsynth > 0) {
      synth_run_end(s, l);
    }
    if (l->synthetic != NULL) {
      al_blob_t *b = al__tx_synthetic_record(l->synthetic);

      if (b != NULL) {
        al__session_tx_put_rec(s, b);
        al__blob_unref(b);
      }
      al_log(AL_LOG_WARN, "session %s: closed %zu interrupted tool call(s) "
                          "with synthetic results", s->id,
             l->closed_tool_uses);
    }
    if (l->title != NULL) {
      /* A session/rename's title wins over the first input's. */
      char *t = al_strdup(l->title);

      if (t != NULL) {
        al_free(s->title);
        s->title = t;
        s->named = true;
      }
    } else if (s->title == NULL && l->first_user_text != NULL) {
      s->title = al__make_title(l->first_user_text);
    }
    json_decref(s->child_links);
    s->child_links = l->children != NULL ? json_incref(l->children) : NULL;
    json_decref(s->recovered);
    s->recovered = json_pack(
        "{s:b, s:I, s:I, s:I, s:O?}", "torn_tail", l->torn_tail, "bad_lines",
        (json_int_t)l->bad_lines, "closed_tool_uses",
        (json_int_t)l->closed_tool_uses, "chain_breaks",
        (json_int_t)l->chain_breaks, "skipped", l->skipped);
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
      if (rc == 0 && s->loaded && p->then != NULL) {
        p->then(s, p->c, p->id, p->params);
      } else if (rc == 0 && s->loaded) {
        al__daemon_resume_reply(s, p->c, p->id);
      } else if (s->discovered && rc == UV_ENOENT) {
        al__daemon_reply_err(p->c, p->id, AL_RPC_UNKNOWN_SESSION,
                             "unknown session",
                             json_pack("{s:s}", "session", s->id));
      } else {
        al__daemon_reply_err(p->c, p->id, AL_RPC_INTERNAL_ERROR, why, NULL);
      }
    }
    json_decref(p->id);
    json_decref(p->params);
    al_free(p);
  }
  d->pending--;
  if (s->closing) {
    al__session_maybe_free(s);
  } else if (s->discovered && !s->loaded && al_list_empty(&s->subs)) {
    al__session_free(s); /* no such transcript (or unreadable) */
  }
  al__daemon_maybe_exit(d);
}

/* ---- the client layer's callbacks ------------------------------------------- */

void al__sessions_client_drained(client_t *c) {
  al_list_t *pos, *next;

  for (pos = c->subs.next; pos != &c->subs && !c->closing; pos = next) {
    next = pos->next;
    al__sub_pump(AL_CONTAINER_OF(pos, sub_t, cnode));
    /* A failed write closes c and frees every sub of it, next too. */
  }
}

void al__sessions_client_closing(client_t *c) {
  al_daemon_t *d = client_daemon(c);
  al_list_t *pos;

  while (!al_list_empty(&c->subs)) {
    al__sub_free(AL_CONTAINER_OF(c->subs.next, sub_t, cnode));
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
}

/* ---- settings from the client ------------------------------------------------ */

static bool differs(const char *a, const char *b) {
  return (a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0);
}

/* session/configured to every watcher but `by`: the settings the next
 * run uses, and who changed them. */
static void configured_notify(session_t *s, client_t *by) {
  al_list_t *pos;

  al_list_foreach(pos, &s->subs) {
    sub_t *sub = AL_CONTAINER_OF(pos, sub_t, snode);

    if (sub->c == by) {
      continue;
    }
    al__dclient_send(
        sub->c,
        al_rpc_notification_new(
            "session/configured",
            json_pack("{s:s, s:s?, s:s, s:s?, s:s?}", "session", s->id,
                      "model", s->h.model, "provider",
                      s->h.provider != NULL ? s->h.provider : "anthropic",
                      "base_url", s->h.base_url, "by",
                      by != NULL ? by->id : NULL)));
  }
}

int al__session_reconfigure(session_t *s, const json_t *params,
                            client_t *by, bool *changed, char *why,
                            size_t why_len) {
  static const char *const keys[] = {"model", "provider", "base_url",
                                     "api_key"};
  char **fields[] = {&s->h.model, &s->h.provider, &s->h.base_url,
                     &s->api_key};
  char *old[4];
  const char *v;
  char *hist = NULL;
  al_agent_t *agent = NULL;
  al_blob_t *b;
  size_t i;
  int rc;

  *changed = false;
  for (i = 0; i < 4; i++) {
    v = json_string_value(json_object_get(params, keys[i]));
    if (v != NULL && differs(v, *fields[i])) {
      *changed = true;
    }
  }
  if (!*changed) {
    return 0;
  }
  if (!s->loaded || s->agent == NULL || al_agent_running(s->agent)) {
    snprintf(why, why_len, "a run is active: settings change between runs");
    return AL_EBUSY;
  }
  if (al_agent_history_json(s->agent, &hist) != 0) {
    snprintf(why, why_len, "out of memory");
    return AL_ENOMEM;
  }
  for (i = 0; i < 4; i++) {
    old[i] = *fields[i];
    v = json_string_value(json_object_get(params, keys[i]));
    *fields[i] = v != NULL ? al_strdup(v) : (old[i] != NULL ? al_strdup(old[i])
                                                          : NULL);
  }
  rc = agent_create(s, s->next_seq, s->next_run, &agent, why, why_len);
  if (rc == 0) {
    rc = al_agent_load_history_json(agent, hist, strlen(hist));
    if (rc != 0) {
      snprintf(why, why_len, "cannot carry the history over: %s",
               al_strerror(rc));
      al_agent_close(agent, NULL);
    }
  }
  al_free(hist);
  for (i = 0; i < 4; i++) {
    char **keep = &old[i]; /* what is no longer in use */

    if (rc != 0) {
      char *t = *fields[i];

      *fields[i] = old[i];
      old[i] = t;
    }
    if (i == 3 && *keep != NULL) {
      memset(*keep, 0, strlen(*keep)); /* a key */
    }
    al_free(*keep);
    *keep = NULL;
  }
  if (rc != 0) {
    return rc;
  }
  /* The old agent is idle: it closes without a word to the watchers. */
  al_agent_close(s->agent, NULL);
  s->agent = agent;
  b = al__tx_header_record(s->id, &s->h);
  if (b != NULL) {
    al__session_tx_put_rec(s, b); /* in the hash chain like every rec */
    al__blob_unref(b);
  }
  configured_notify(s, by);
  return 0;
}
