/* Headless sessions: `agentloop run` keeps its conversation in a
 * transcript of the daemon's format (session/session.h), in the daemon's
 * directory ($XDG_STATE_HOME/agentloop/sessions/ID.jsonl), so `run
 * --resume ID`, `run --continue`, `agentloop resume ID` and the daemon's
 * listings all see it.
 *
 * Before the loop runs (blocking I/O is fine there): the session is picked
 * (a new id; --resume ID; --continue: the most recently written transcript
 * whose header names this workspace) and, when resumed, loaded and
 * replayed into a history. After the agent exists: the writer opens
 * (uv_fs, off the loop thread), a new session's header is its first
 * record, the history is handed to the agent, then every LoopEvent and
 * history commit is appended as the daemon appends them. At the end the
 * writer flushes and closes (the loop keeps running until it has). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "client/run_int.h"
#include "client/tui.h"
#include "events/events.h"
#include "session/session.h"

#define HEAD_BYTES (64 * 1024)
#define TX_QUEUE_MAX (256u * 1024 * 1024)
#define REPLAY_KEEP (1u) /* events are not replayed here: keep none */

static bool sessions_dir(char *buf, size_t n) {
  char dir[PATH_MAX];
  int w;

  if (!al__tui_state_dir(dir, sizeof(dir))) {
    return false;
  }
  w = snprintf(buf, n, "%s/sessions", dir);
  return w > 0 && (size_t)w < n;
}

/* The header of the transcript at path (its first HEAD_BYTES). */
static bool read_head(const char *path, al_tx_header_t *h) {
  char *buf = al_malloc(HEAD_BYTES);
  int fd;
  ssize_t n;
  bool ok = false;
  char *first = NULL;

  if (buf == NULL) {
    return false;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    n = read(fd, buf, HEAD_BYTES);
    if (n > 0) {
      ok = al__tx_scan_head(buf, (size_t)n, h, &first);
    }
    close(fd);
  }
  al_free(first);
  al_free(buf);
  return ok;
}

/* --continue: the newest transcript (by modification time) whose header
 * names workspace. */
static bool find_latest(const char *dir, const char *workspace, char *id,
                        size_t idlen) {
  DIR *d = opendir(dir);
  struct dirent *de;
  struct timespec best = {0, 0};
  bool found = false;

  if (d == NULL) {
    return false;
  }
  while ((de = readdir(d)) != NULL) {
    size_t nl = strlen(de->d_name);
    char path[PATH_MAX];
    struct stat st;
    al_tx_header_t h;

    if (nl < 7 || strcmp(de->d_name + nl - 6, ".jsonl") != 0 ||
        nl - 6 >= idlen) {
      continue;
    }
    if (snprintf(path, sizeof(path), "%.3800s/%.255s", dir, de->d_name) >=
        (int)sizeof(path)) {
      continue;
    }
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    if (found && (st.st_mtim.tv_sec < best.tv_sec ||
                  (st.st_mtim.tv_sec == best.tv_sec &&
                   st.st_mtim.tv_nsec <= best.tv_nsec))) {
      continue;
    }
    memset(&h, 0, sizeof(h));
    /* A sub-agent's transcript is not a session to continue. */
    if (read_head(path, &h) && h.cwd != NULL && h.parent == NULL &&
        strcmp(h.cwd, workspace) == 0) {
      memcpy(id, de->d_name, nl - 6);
      id[nl - 6] = '\0';
      best = st.st_mtim;
      found = true;
    }
    al__tx_header_free(&h);
  }
  closedir(d);
  return found;
}

static bool new_id(char *out, size_t len) {
  unsigned char r[8];
  size_t i;

  if (uv_random(NULL, NULL, r, sizeof(r), 0, NULL) != 0 || len < 19) {
    return false;
  }
  snprintf(out, len, "s_");
  for (i = 0; i < sizeof(r); i++) {
    snprintf(out + 2 + 2 * i, len - 2 - 2 * i, "%02x", r[i]);
  }
  return true;
}

int al__run_session_prepare(al__run_session_t *rs, const char *resume_id,
                            bool cont, const char *workspace, char *err,
                            size_t errlen) {
  char dir[PATH_MAX];
  int rc;

  memset(rs, 0, sizeof(*rs));
  al__tx_deltas_init(&rs->deltas, AL_TX_REPLY_DELTAS_MAX);
  if (!sessions_dir(dir, sizeof(dir))) {
    snprintf(err, errlen, "no state directory (set HOME or XDG_STATE_HOME)");
    return AL_EINVAL;
  }
  rc = al__tui_mkdirs(dir);
  if (rc != 0) {
    snprintf(err, errlen, "cannot create %s: %s", dir, al_strerror(rc));
    return rc;
  }
  if (resume_id != NULL) {
    if (!al__session_id_valid(resume_id)) {
      snprintf(err, errlen, "--resume: '%s' is not a session id", resume_id);
      return AL_EINVAL;
    }
    snprintf(rs->id, sizeof(rs->id), "%s", resume_id);
  } else if (cont) {
    if (!find_latest(dir, workspace, rs->id, sizeof(rs->id))) {
      snprintf(err, errlen,
               "--continue: no session in %s yet (start one without "
               "--continue)",
               workspace);
      return AL_ENOTFOUND;
    }
  } else if (!new_id(rs->id, sizeof(rs->id))) {
    snprintf(err, errlen, "cannot make a session id");
    return UV_EIO;
  }
  if (snprintf(rs->path, sizeof(rs->path), "%.3900s/%.63s.jsonl", dir,
               rs->id) >= (int)sizeof(rs->path)) {
    snprintf(err, errlen, "the state directory's path is too long");
    return AL_EINVAL;
  }
  if (resume_id == NULL && !cont) {
    return 0;
  }
  {
    /* One writer per transcript: the daemon (or another run) holds its
     * lock while the session is open there. Asked now, before anything is
     * sent; the writer takes the lock itself when it opens. */
    int fd = open(rs->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd >= 0) {
      if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(fd);
        snprintf(err, errlen,
                 "session %s is open in agentloopd or another agentloop run "
                 "(one writer at a time): close it there, or stop the "
                 "daemon, then retry",
                 rs->id);
        return UV_EBUSY;
      }
      close(fd); /* releases the probe's lock */
    }
  }
  rc = al__tx_load(rs->path, true, REPLAY_KEEP, &rs->loaded);
  rs->have_loaded = true;
  if (rc == UV_ENOENT) {
    snprintf(err, errlen, "--resume: no session %s (%s)", rs->id, rs->path);
    return AL_ENOTFOUND;
  }
  if (rc != 0) {
    snprintf(err, errlen, "cannot load %s: %s", rs->path, al_strerror(rc));
    return rc;
  }
  if (!rs->loaded.has_header) {
    snprintf(err, errlen, "%s has no session header", rs->path);
    return AL_EINVAL;
  }
  if (rs->loaded.bad_lines > 0 || rs->loaded.chain_breaks > 0) {
    /* Kept: every record up to the damage and each later one that still
     * chains; said here, as the daemon says it in session/resume. */
    size_t i;
    json_t *sk;

    fprintf(stderr,
            "agentloop: %s: %zu damaged or forged record(s) skipped "
            "(%zu failed the hash chain); the rest of the session is "
            "resumed\n",
            rs->path, rs->loaded.bad_lines, rs->loaded.chain_breaks);
    json_array_foreach(rs->loaded.skipped, i, sk) {
      fprintf(stderr, "agentloop:   line %lld: %s\n",
              (long long)json_integer_value(json_object_get(sk, "line")),
              json_string_value(json_object_get(sk, "reason")) != NULL
                  ? json_string_value(json_object_get(sk, "reason"))
                  : "?");
    }
  }
  rs->resumed = true;
  return 0;
}

int al__run_session_prepare_at(al__run_session_t *rs, const char *dir,
                               const char *id, char *err, size_t errlen) {
  int rc;

  memset(rs, 0, sizeof(*rs));
  al__tx_deltas_init(&rs->deltas, AL_TX_REPLY_DELTAS_MAX);
  if (!al__session_id_valid(id)) {
    snprintf(err, errlen, "'%s' is not a session id", id);
    return AL_EINVAL;
  }
  snprintf(rs->id, sizeof(rs->id), "%s", id);
  if (snprintf(rs->path, sizeof(rs->path), "%.3900s/%.63s.jsonl", dir,
               rs->id) >= (int)sizeof(rs->path)) {
    snprintf(err, errlen, "the sessions directory's path is too long");
    return AL_EINVAL;
  }
  rc = al__tx_load(rs->path, true, REPLAY_KEEP, &rs->loaded);
  rs->have_loaded = true;
  if (rc == UV_ENOENT) {
    al__tx_loaded_free(&rs->loaded);
    rs->have_loaded = false;
    return 0; /* a new session */
  }
  if (rc != 0) {
    snprintf(err, errlen, "cannot load %s: %s", rs->path, al_strerror(rc));
    return rc;
  }
  if (!rs->loaded.has_header) {
    /* Killed before its header was written: nothing to resume. */
    al__tx_loaded_free(&rs->loaded);
    rs->have_loaded = false;
    if (unlink(rs->path) != 0) {
      snprintf(err, errlen, "%s has no header and cannot be removed: %s",
               rs->path, strerror(errno));
      return AL_EINVAL;
    }
    return 0;
  }
  rs->resumed = true;
  return 0;
}

const char *al__run_session_model(const al__run_session_t *rs) {
  return rs->resumed ? rs->loaded.header.model : NULL;
}

const char *al__run_session_system(const al__run_session_t *rs) {
  return rs->resumed ? rs->loaded.header.system : NULL;
}

/* al_child_cb: each sub-agent (children of children too) gets its own
 * transcript. */
static void on_child(al_agent_t *parent, const al_child_info_t *info,
                     al_commit_cb *commit, void **commit_data, void *data) {
  al_tx_child_t c = {info->task_id,     info->session_id, info->parent_session,
                     info->parent_call, info->agent,      info->background,
                     info->depth};

  (void)parent;
  al__run_session_child(data, &c, commit_data);
  *commit = *commit_data != NULL ? al__tx_kid_commit : NULL;
}

void al__run_session_options(al__run_session_t *rs, al_agent_options_t *o) {
  o->session_id = rs->id;
  o->on_commit = al__run_session_commit;
  o->commit_data = rs;
  o->on_child = on_child;
  o->child_data = rs;
  if (rs->resumed) {
    /* The numbering goes on where the transcript stopped. */
    o->first_seq = rs->loaded.last_seq + 1;
    o->first_run = rs->loaded.last_run + 1;
  }
}

/* rec: a "rec" record (header, history), hash-chained as the daemon's
 * are (issue 15), so a session that moves between run and the daemon
 * keeps one chain and a forged record is found by either; events are
 * not chained. */
static void put(al__run_session_t *rs, al_blob_t *b, bool sync, bool rec) {
  int rc;

  if (rs->tx == NULL || b == NULL) {
    return;
  }
  if (rs->fenced || (rs->admit != NULL && !rs->admit(rs->admit_data))) {
    rs->fenced = true; /* not ours to write any more: nothing, not lost */
    return;
  }
  rc = rec ? al__tx_append_chained(rs->tx, b, sync)
           : al__tx_append(rs->tx, b, sync);
  if (rc != 0 && al__tx_lost(rs->tx)) {
    /* Refused by a writer that already lost records: not saved either. */
    rs->loss.records++;
    rs->loss.synced += sync ? 1 : 0;
    rs->loss.bytes += b->len;
  }
  if (rc != 0 && rs->err == 0) {
    rs->err = rc;
    fprintf(stderr, "agentloop: the session transcript %s cannot be "
                    "written: %s\n", rs->path, al_strerror(rc));
  }
}

/* The writer's failures as they happen: one stderr line when writes start
 * failing and when they go through again; a loss is kept for the end. */
static void on_tx_state(al_tx_t *tx, int err, bool lost, void *data) {
  al__run_session_t *rs = data;

  if (lost) {
    al_tx_loss_t l;

    al__tx_loss(tx, &l);
    rs->loss.records += l.records;
    rs->loss.synced += l.synced;
    rs->loss.bytes += l.bytes;
    rs->loss.unsynced = rs->loss.unsynced || l.unsynced;
    rs->loss.err = l.err != 0 ? l.err : err;
    return;
  }
  if (err != 0 && rs->failing == 0) {
    fprintf(stderr, "agentloop: the session transcript %s cannot be written "
                    "(%s: %s); kept in memory, retrying\n", rs->path,
            al_err_name(err), al_strerror(err));
  } else if (err == 0 && rs->failing != 0) {
    fprintf(stderr, "agentloop: the session transcript %s is written "
                    "again\n", rs->path);
  }
  rs->failing = err;
}

int al__run_session_attach(al__run_session_t *rs, uv_loop_t *loop,
                           al_agent_t *agent, const al_tx_header_t *h,
                           char *err, size_t errlen) {
  int rc;

  rc = al__tx_open(loop, rs->path, TX_QUEUE_MAX, &rs->tx);
  if (rc != 0) {
    snprintf(err, errlen, "cannot open %s: %s", rs->path, al_strerror(rc));
    return rc;
  }
  al__tx_set_state_cb(rs->tx, on_tx_state, rs);
  if (rs->no_lock) {
    al__tx_set_no_lock(rs->tx);
  }
  if (rs->admit != NULL) {
    al__tx_set_gate(rs->tx, rs->admit, rs->admit_data, rs->admit_window_ms);
  }
  {
    char dir[PATH_MAX];
    char *slash;

    snprintf(dir, sizeof(dir), "%s", rs->path);
    slash = strrchr(dir, '/');
    if (slash != NULL) {
      *slash = '\0';
    }
    rs->kids = al__tx_kids_new(loop, dir, TX_QUEUE_MAX);
    if (rs->kids != NULL && rs->admit != NULL) {
      al__tx_kids_set_gate(rs->kids, rs->admit, rs->admit_data,
                           rs->admit_window_ms);
    }
    rs->cwd = h != NULL && h->cwd != NULL
                  ? al_strdup(h->cwd)
                  : (rs->resumed && rs->loaded.header.cwd != NULL
                         ? al_strdup(rs->loaded.header.cwd)
                         : NULL);
  }
  /* A new session's chain binds its id; a resumed one goes on after its
   * last good record, in the file's format. */
  if (rs->resumed) {
    al__tx_set_chain(rs->tx, rs->loaded.chain, rs->loaded.chain_id);
  } else {
    al__tx_set_chain(rs->tx, "", rs->id);
  }
  if (!rs->resumed) {
    al_blob_t *b = al__tx_header_record(rs->id, h);

    put(rs, b, true, true);
    if (b != NULL) {
      al__blob_unref(b);
    }
    return 0;
  }
  {
    const json_t *msgs = al__history_to_json(&rs->loaded.history);
    json_t *hist = json_pack("{s:O}", "messages",
                             msgs != NULL ? (json_t *)msgs : json_array());
    char *txt = hist != NULL ? json_dumps(hist, JSON_COMPACT) : NULL;

    json_decref(hist);
    rc = txt != NULL ? al_agent_load_history_json(agent, txt, strlen(txt))
                     : AL_ENOMEM;
    free(txt);
    if (rc != 0) {
      snprintf(err, errlen, "the history of %s is not valid: %s", rs->path,
               al_strerror(rc));
      return rc;
    }
  }
  if (rs->loaded.synthetic != NULL) {
    /* A tool turn the last process left open was closed on load: the
     * transcript records the results that closed it. */
    al_blob_t *b = al__tx_synthetic_record(rs->loaded.synthetic);

    put(rs, b, true, true);
    if (b != NULL) {
      al__blob_unref(b);
    }
  }
  return 0;
}

void al__run_session_event(al__run_session_t *rs, const al_event_t *ev) {
  al_buf_t line;
  al_blob_t *b;

  al__tx_kids_event(rs->kids, ev);
  if (rs->tx == NULL || (ev->path != NULL && al__tx_is_delta(ev->type))) {
    /* A sub-agent's deltas: its text is in its own transcript's commits,
     * and they must not count against this session's reply bound. */
    return;
  }
  al_buf_init(&line, 64u * 1024 * 1024);
  if (al__events_encode_line(ev, &line) == 0) {
    al_blob_t *note = NULL;

    /* A reply's deltas past their bound stay out (a reply rejected at
     * its limit leaves a bounded trace): the daemon's rule. */
    if (ev->path != NULL) {
      b = al__blob_new(line.data, line.len);
      put(rs, b, false, false);
      if (b != NULL) {
        al__blob_unref(b);
      }
    } else if (al__tx_deltas_keep(&rs->deltas, ev, line.len, &note)) {
      put(rs, note, false, true);
      b = al__blob_new(line.data, line.len);
      put(rs, b, false, false);
      if (b != NULL) {
        al__blob_unref(b);
      }
    }
    al__blob_unref(note);
  }
  al_buf_free(&line);
}

void al__run_session_child(al__run_session_t *rs, const al_tx_child_t *c,
                           void **commit_data) {
  al_tx_header_t h;
  al_blob_t *link = NULL;
  int rc;

  *commit_data = NULL;
  if (rs->kids == NULL || rs->closing) {
    return;
  }
  memset(&h, 0, sizeof(h));
  h.cwd = rs->cwd;
  rc = al__tx_kids_open(rs->kids, c, &h, commit_data, &link);
  if (rc != 0) {
    fprintf(stderr, "agentloop: sub-agent %s (%s) keeps no transcript: "
                    "%s\n", c->task_id != NULL ? c->task_id : "?",
            c->session_id != NULL ? c->session_id : "?", al_strerror(rc));
    *commit_data = NULL;
  }
  /* Linked from the parent's chain, synced as a history commit: a
   * resumed session lists its children. */
  put(rs, link, true, true);
  if (link != NULL) {
    al__blob_unref(link);
  }
}

void al__run_session_commit(al_agent_t *agent, al_commit_kind_t kind,
                            const char *message, size_t len, void *data) {
  al__run_session_t *rs = data;
  al_blob_t *b = al__tx_commit_record(kind, message, len);

  (void)agent;
  if (b == NULL && rs->tx != NULL && rs->err == 0) {
    /* Never silently: a commit that cannot be recorded makes the
     * transcript incomplete. */
    rs->err = al__tx_commit_kind_name(kind) == NULL ? AL_EINVAL : AL_ENOMEM;
    fprintf(stderr, "agentloop: a history commit cannot be recorded in "
                    "%s: %s\n", rs->path, al_strerror(rs->err));
  }
  put(rs, b, true, true);
  if (b != NULL) {
    al__blob_unref(b);
  }
}

static void on_tx_closed(al_tx_t *tx, void *data) {
  al__run_session_t *rs = data;

  (void)tx;
  rs->tx = NULL;
  if (rs->on_closed != NULL) {
    rs->on_closed(rs, rs->closed_data);
  }
}

/* Retried until the end of the run, then once more: a writer still
 * failing at the end (waiting for its timer, or its failed request just
 * back) makes one last attempt; whatever that leaves unwritten the close
 * drops, and the state callback counts it (rs->loss). */
static void on_tx_flushed(al_tx_t *tx, void *data) {
  al__run_session_t *rs = data;

  if (al__tx_error(tx) != 0 && !al__tx_lost(tx) && !rs->last_try) {
    rs->last_try = true;
    al__tx_retry_now(tx);
    if (al__tx_flush(tx, on_tx_flushed, rs) == 0) {
      return;
    }
  }
  al__tx_close(tx, on_tx_closed, rs);
}

void al__run_session_agent_closed(al__run_session_t *rs) {
  if (rs->kids != NULL) {
    al__tx_kids_close(rs->kids, NULL, NULL); /* frees itself when done */
    rs->kids = NULL;
  }
}

void al__run_session_close(al__run_session_t *rs) {
  if (rs->tx != NULL && !rs->closing) {
    rs->closing = true;
    if (al__tx_flush(rs->tx, on_tx_flushed, rs) != 0) {
      al__tx_close(rs->tx, on_tx_closed, rs);
    }
  }
}

bool al__run_session_loss_text(const al__run_session_t *rs, char *buf,
                               size_t len) {
  const al_tx_loss_t *l = &rs->loss;

  if (l->err == 0) {
    return false;
  }
  snprintf(buf, len,
           "the session transcript %s is incomplete: %zu record%s (%zu "
           "bytes; %zu of them history commits or the header) not saved%s: "
           "%s (%s)",
           rs->path, l->records, l->records == 1 ? "" : "s", l->bytes,
           l->synced,
           l->unsynced ? ", and the last fdatasync failed, so records "
                         "written before it may not be durable"
                       : "",
           al_err_name(l->err), al_strerror(l->err));
  return true;
}

void al__run_session_free(al__run_session_t *rs) {
  al_free(rs->cwd);
  rs->cwd = NULL;
  if (rs->have_loaded) {
    al__tx_loaded_free(&rs->loaded);
    rs->have_loaded = false;
  }
}
