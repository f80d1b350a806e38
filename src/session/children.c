/* Sub-agents' transcripts (issue 23, session/session.h): each child of a
 * session writes its own hash-chained transcript beside its parent's, and
 * the parent's chain gets a "child" record linking it. One set per parent
 * session's front end (`agentloop run`, the daemon), closed with it.
 *
 * A child's writer closes when the child ends (al__tx_kids_end, on its
 * subagent_completed: a long session must not keep a descriptor per
 * child it ever ran) or with the set; its entry stays until the set is
 * freed, so a stray late commit finds a closed writer, never freed
 * memory. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "session/session.h"

typedef struct kid_s {
  struct kid_s *next;
  al_tx_kids_t *set;
  al_tx_t *tx;   /* NULL once closed: later commits are dropped */
  bool ending;   /* its flush and close are under way */
  char id[64];   /* the child's session id (its events' session) */
  char file[64]; /* its transcript's id (al__tx_child_file_id) */
} kid_t;

struct al_tx_kids_s {
  uv_loop_t *loop;
  char dir[PATH_MAX];
  size_t max_queue;
  kid_t *kids;
  size_t count;
  size_t open; /* writers not yet closed */
  int err;     /* the first append error of any child */
  bool closing;
  void (*close_cb)(void *data);
  void *close_data;
  uv_timer_t defer; /* a close with nothing open still answers later */
  bool (*gate)(void *data); /* al__tx_kids_set_gate */
  void *gate_data;
  uint64_t gate_window_ms;
};

bool al__tx_child_file_id(const char *session_id, char out[64]) {
  size_t i;

  if (session_id == NULL || strlen(session_id) >= 64) {
    return false;
  }
  for (i = 0; session_id[i] != '\0'; i++) {
    out[i] = session_id[i] == '.' ? '-' : session_id[i];
  }
  out[i] = '\0';
  return al__session_id_valid(out);
}

al_blob_t *al__tx_child_record(const al_tx_child_t *c) {
  json_t *rec;
  al_blob_t *b;
  char file[64];

  if (c->task_id == NULL || !al__tx_child_file_id(c->session_id, file)) {
    return NULL;
  }
  rec = json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s?, s:s?, s:b, s:i}", "rec",
                  "child", "task", c->task_id, "session", c->session_id,
                  "transcript", file, "parent_call", c->parent_call, "agent",
                  c->agent, "parent_session", c->parent_session, "background",
                  c->background, "depth", (int)c->depth);
  b = rec != NULL ? al__tx_record(rec) : NULL;
  json_decref(rec);
  return b;
}

al_tx_kids_t *al__tx_kids_new(uv_loop_t *loop, const char *dir,
                              size_t max_queue) {
  al_tx_kids_t *k = al_calloc(1, sizeof(*k));

  if (k == NULL) {
    return NULL;
  }
  if (snprintf(k->dir, sizeof(k->dir), "%s", dir) >= (int)sizeof(k->dir) ||
      uv_timer_init(loop, &k->defer) != 0) {
    al_free(k);
    return NULL;
  }
  k->loop = loop;
  k->max_queue = max_queue;
  k->defer.data = k;
  return k;
}

void al__tx_kids_set_gate(al_tx_kids_t *k, bool (*gate)(void *data), void *data,
                          uint64_t window_ms) {
  k->gate = gate;
  k->gate_data = data;
  k->gate_window_ms = window_ms;
}

static void kid_put(kid_t *kid, al_blob_t *b) {
  int rc;

  if (b == NULL || kid->tx == NULL || kid->ending) {
    return;
  }
  if (kid->set->gate != NULL && !kid->set->gate(kid->set->gate_data)) {
    return; /* fenced: the session is another owner's now */
  }
  rc = al__tx_append_chained(kid->tx, b, true);
  if (rc != 0 && kid->set->err == 0) {
    kid->set->err = rc;
    al_log(AL_LOG_ERROR, "child transcript %s: %s", kid->id, al_strerror(rc));
  }
}

int al__tx_kids_open(al_tx_kids_t *k, const al_tx_child_t *c,
                     const al_tx_header_t *h, void **commit_data,
                     al_blob_t **link) {
  char path[PATH_MAX];
  char file[64];
  al_tx_header_t hd;
  al_blob_t *b;
  kid_t *kid;
  struct timespec now;
  int rc;

  *commit_data = NULL;
  *link = NULL;
  if (k->closing || c->task_id == NULL ||
      !al__tx_child_file_id(c->session_id, file)) {
    return AL_EINVAL;
  }
  if (snprintf(path, sizeof(path), "%s/%s.jsonl", k->dir, file) >=
      (int)sizeof(path)) {
    return AL_EINVAL;
  }
  kid = al_calloc(1, sizeof(*kid));
  if (kid == NULL) {
    return AL_ENOMEM;
  }
  kid->set = k;
  snprintf(kid->id, sizeof(kid->id), "%s", c->session_id);
  snprintf(kid->file, sizeof(kid->file), "%s", file);
  rc = al__tx_open(k->loop, path, k->max_queue, &kid->tx);
  if (rc != 0) {
    al_free(kid);
    return rc;
  }
  al__tx_set_chain(kid->tx, "", kid->file);
  if (k->gate != NULL) {
    al__tx_set_gate(kid->tx, k->gate, k->gate_data, k->gate_window_ms);
    al__tx_set_no_lock(kid->tx);
  }
  kid->next = k->kids;
  k->kids = kid;
  k->count++;
  k->open++;

  memset(&hd, 0, sizeof(hd));
  hd.cwd = h != NULL ? h->cwd : NULL;
  /* The child's own start (listings sort by it), not its parent's. */
  clock_gettime(CLOCK_REALTIME, &now);
  hd.created_ms =
      (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
  hd.parent = json_pack("{s:s?, s:s, s:s?, s:s?, s:i, s:b}", "session",
                        c->parent_session, "task", c->task_id, "parent_call",
                        c->parent_call, "agent", c->agent, "depth",
                        (int)c->depth, "background", c->background);
  b = hd.parent != NULL ? al__tx_header_record(kid->file, &hd) : NULL;
  json_decref(hd.parent);
  if (b == NULL) {
    return AL_ENOMEM; /* the writer stays in the set and closes with it */
  }
  kid_put(kid, b);
  al__blob_unref(b);
  *link = al__tx_child_record(c);
  *commit_data = kid;
  if (*link == NULL) {
    return AL_ENOMEM;
  }
  /* A child's child is linked from its own parent's transcript. */
  for (kid = k->kids; kid != NULL; kid = kid->next) {
    if (c->parent_session != NULL && strcmp(kid->id, c->parent_session) == 0) {
      kid_put(kid, *link);
      al__blob_unref(*link);
      *link = NULL;
      break;
    }
  }
  return 0;
}

void al__tx_kid_commit(al_agent_t *agent, al_commit_kind_t kind,
                       const char *message, size_t len, void *data) {
  kid_t *kid = data;
  al_blob_t *b = al__tx_commit_record(kind, message, len);

  (void)agent;
  if (b == NULL) {
    if (kid->set->err == 0) {
      kid->set->err = AL_ENOMEM;
    }
    al_log(AL_LOG_ERROR,
           "child transcript %s: a history commit cannot be "
           "recorded",
           kid->id);
    return;
  }
  kid_put(kid, b);
  al__blob_unref(b);
}

size_t al__tx_kids_count(const al_tx_kids_t *k) {
  return k != NULL ? k->count : 0;
}

size_t al__tx_kids_pending(const al_tx_kids_t *k) {
  size_t n = 0;
  const kid_t *kid;

  for (kid = k != NULL ? k->kids : NULL; kid != NULL; kid = kid->next) {
    n += kid->tx != NULL ? al__tx_pending(kid->tx) : 0;
  }
  return n;
}

int al__tx_kids_error(const al_tx_kids_t *k) {
  const kid_t *kid;

  if (k == NULL) {
    return 0;
  }
  if (k->err != 0) {
    return k->err;
  }
  for (kid = k->kids; kid != NULL; kid = kid->next) {
    if (kid->tx != NULL && al__tx_error(kid->tx) != 0) {
      return al__tx_error(kid->tx);
    }
  }
  return 0;
}

static void on_defer_closed(uv_handle_t *h) {
  al_tx_kids_t *k = h->data;
  void (*cb)(void *) = k->close_cb;
  void *data = k->close_data;
  kid_t *kid;

  while ((kid = k->kids) != NULL) {
    k->kids = kid->next;
    al_free(kid);
  }
  al_free(k);
  if (cb != NULL) {
    cb(data);
  }
}

static void kids_maybe_done(al_tx_kids_t *k) {
  if (k->closing && k->open == 0) {
    uv_close((uv_handle_t *)&k->defer, on_defer_closed);
  }
}

static void on_kid_closed(al_tx_t *tx, void *data) {
  kid_t *kid = data;

  (void)tx;
  kid->tx = NULL;
  kid->set->open--;
  kids_maybe_done(kid->set);
}

static void on_kid_flushed(al_tx_t *tx, void *data) {
  al__tx_close(tx, on_kid_closed, data);
}

void al__tx_kids_end(al_tx_kids_t *k, const char *session_id) {
  kid_t *kid;

  for (kid = k != NULL ? k->kids : NULL; kid != NULL; kid = kid->next) {
    if (kid->tx != NULL && !kid->ending && strcmp(kid->id, session_id) == 0) {
      kid->ending = true;
      if (al__tx_flush(kid->tx, on_kid_flushed, kid) != 0) {
        al__tx_close(kid->tx, on_kid_closed, kid);
      }
      return;
    }
  }
}

void al__tx_kids_event(al_tx_kids_t *k, const al_event_t *ev) {
  char id[64];

  if (k == NULL || ev->type != AL_EVENT_SUBAGENT_COMPLETED) {
    return;
  }
  snprintf(id, sizeof(id), "%.*s", (int)ev->u.subagent.child_session.len,
           ev->u.subagent.child_session.ptr != NULL
               ? ev->u.subagent.child_session.ptr
               : "");
  al__tx_kids_end(k, id);
}

void al__tx_kids_close(al_tx_kids_t *k, void (*cb)(void *data), void *data) {
  kid_t *kid;

  if (k == NULL) {
    return;
  }
  k->closing = true;
  k->close_cb = cb;
  k->close_data = data;
  for (kid = k->kids; kid != NULL; kid = kid->next) {
    if (kid->tx != NULL && !kid->ending) {
      kid->ending = true;
      if (al__tx_flush(kid->tx, on_kid_flushed, kid) != 0) {
        al__tx_close(kid->tx, on_kid_closed, kid);
      }
    }
  }
  kids_maybe_done(k); /* uv_close answers on a later iteration */
}
