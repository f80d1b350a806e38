/* Transcript writer and loader (session.h).
 *
 * Writer: a FIFO of blobs; at most one uv_fs request (open, write or
 * fdatasync, then close) is in flight, so records reach the file in the
 * order they were appended and a partial write is simply resumed. The
 * loop thread only queues; the threadpool does the syscalls.
 *
 * Loader: splits on '\n' only (U+2028 and friends are JSON-escaped or
 * plain bytes inside strings, never separators), parses each line with
 * jansson, skips bad lines with a count, and replays history records
 * through the history's own operations so merging rules are the same as
 * when the agent ran. */
#include "common/media.h"
#include "loop/micro.h"
#include "session/session.h"

#include <errno.h>
#include <sys/file.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "provider/provider.h"

/* ---- blobs ------------------------------------------------------------------ */

al_blob_t *al__blob_alloc(size_t len) {
  al_blob_t *b = al_malloc(sizeof(*b) + len + 1);

  if (b != NULL) {
    b->refs = 1;
    b->len = len;
    b->data[len] = '\0';
  }
  return b;
}

al_blob_t *al__blob_new(const char *p, size_t len) {
  al_blob_t *b = al__blob_alloc(len);

  if (b != NULL) {
    memcpy(b->data, p, len);
  }
  return b;
}

void al__blob_unref(al_blob_t *b) {
  if (b != NULL && --b->refs == 0) {
    al_free(b);
  }
}

/* ---- writer ----------------------------------------------------------------- */

#define TX_MAX_IOV 64

typedef struct {
  al_list_t node;
  al_blob_t *blob;
  bool sync;
} tx_entry_t;

struct al_tx_s {
  uv_loop_t *loop;
  uv_fs_t req;
  bool busy;        /* req in flight */
  uv_file fd;       /* -1 until open */
  al_list_t queue;  /* tx_entry_t, oldest first */
  size_t head_off;  /* bytes of the first entry already written */
  size_t queued;    /* bytes in the queue not yet written */
  size_t max_queue;
  size_t inflight_entries;
  bool sync_due;    /* a written entry asked for fdatasync */
  int err;
  bool closing;
  bool closed_fd;
  bool no_lock; /* al__tx_set_no_lock: the caller fences writers */
  bool (*gate)(void *data); /* al__tx_set_gate */
  void *gate_data;
  /* A windowed gate: its writes go through the threadpool as work that
   * checks the window first (uv_fs_write could not), in req's place. */
  uint64_t gate_window_ns;
  uv_work_t work;
  uint64_t write_by_ns; /* this write is not made from then on */
  unsigned work_n;      /* iov entries */
  ssize_t work_res;     /* bytes written, a negative errno, or AL_EFENCED */
  al_tx_close_cb close_cb;
  void *close_data;
  al_tx_flush_cb flush_cb;
  void *flush_data;
  bool flush_synced; /* the waiter's data is synced */
  uv_buf_t iov[TX_MAX_IOV];
  /* Failing writes (issue 15): the queue is kept and the operation tried
   * again from a timer, with backoff, until it succeeds; err holds the
   * current failure meanwhile. lost is sticky: records were dropped. */
  char *path;          /* for a retried open */
  uv_timer_t retry;
  bool retry_init;
  bool waiting;        /* the retry timer is armed */
  uint64_t retry_ms;
  bool lost;
  bool failed_sync;    /* the failure was an fdatasync: sync again */
  al_tx_loss_t loss;   /* what the loss dropped (al__tx_loss) */
  int inject_err;      /* test seam: this op's result (0: the real one) */
  bool inject_sync;    /* ... and it stood in for an fdatasync */
  al_tx_state_cb on_state;
  void *state_data;
  char chain[AL_TX_HASH_HEX + 1]; /* the last chained record's hash */
  char chain_id[64];              /* the session its chain binds ("": 1) */
};

/* Test seam (session.h): when set, a write about to be issued fails with
 * the error it returns instead (no LD_PRELOAD needed). The programs link
 * the same static library as al_tests, so the pointers are in them too,
 * NULL for ever: only test code assigns them, nothing reads them from
 * the environment or a file (shipped_binaries_have_no_test_seam_names
 * checks that no AL_TEST_ name is in a shipped program). */
int (*al__tx_write_fault)(const char *path) = NULL;
int (*al__tx_sync_fault)(const char *path) = NULL;
uint64_t al__tx_retry_min_ms = 1000;
uint64_t al__tx_retry_max_ms = 30000;

static void tx_kick(al_tx_t *tx);
static void tx_close_deferred(uv_fs_t *req);
static void tx_on_fs(uv_fs_t *req);

/* Every fdatasync goes through here: the sync seam (session.h) makes a
 * real one report the error it returns (a tmpfs cannot fail one). */
static int tx_fdatasync(al_tx_t *tx) {
  int fault = al__tx_sync_fault != NULL ? al__tx_sync_fault(tx->path) : 0;
  int rc = uv_fs_fdatasync(tx->loop, &tx->req, tx->fd, tx_on_fs);

  if (rc == 0 && fault != 0) {
    tx->inject_err = fault;
    tx->inject_sync = true;
  }
  return rc;
}

static void entry_free(tx_entry_t *e) {
  al__blob_unref(e->blob);
  al_free(e);
}

static void tx_retry_cb(uv_timer_t *t);

static void tx_notify(al_tx_t *tx) {
  if (tx->on_state != NULL) {
    tx->on_state(tx, tx->err, tx->lost, tx->state_data);
  }
}

/* A write, open or sync failed: keep everything queued and try again
 * later (the disk may get space back); the owner is told. */
static void tx_fail(al_tx_t *tx, int err) {
  bool first = tx->err == 0;

  tx->err = err;
  if (first) {
    al_log(AL_LOG_ERROR, "transcript %s: write failed: %s; %zu bytes kept "
                         "in memory, retrying", tx->path != NULL ? tx->path
                                                                 : "?",
           uv_strerror(err), tx->queued);
    tx->retry_ms = al__tx_retry_min_ms;
    tx_notify(tx);
  } else {
    tx->retry_ms = AL_MIN(tx->retry_ms * 2, al__tx_retry_max_ms);
  }
  if (tx->lost || tx->closing) {
    return;
  }
  if (!tx->retry_init) {
    if (uv_timer_init(tx->loop, &tx->retry) != 0) {
      return;
    }
    tx->retry_init = true;
  }
  tx->waiting = true;
  uv_timer_start(&tx->retry, tx_retry_cb, tx->retry_ms, 0);
}

/* Records are gone for good (the queue bound, or a close while failing):
 * sticky, and said once. */
static void tx_lose(al_tx_t *tx, int err, const char *why) {
  if (tx->lost) {
    return;
  }
  al_log(AL_LOG_ERROR, "transcript %s: %zu bytes not written (%s): a "
                       "restart will not see them",
         tx->path != NULL ? tx->path : "?", tx->queued, why);
  tx->lost = true;
  if (tx->err == 0) {
    tx->err = err;
  }
  {
    /* What is about to be dropped (every caller drops the queue next). */
    al_list_t *pos;

    al_list_foreach(pos, &tx->queue) {
      tx->loss.records++;
      if (AL_CONTAINER_OF(pos, tx_entry_t, node)->sync) {
        tx->loss.synced++;
      }
    }
    tx->loss.bytes = tx->queued;
    tx->loss.unsynced = tx->failed_sync;
    tx->loss.err = tx->err;
  }
  tx_notify(tx);
}

/* A write or sync went through after failures. */
static void tx_recovered(al_tx_t *tx) {
  if (tx->err != 0 && !tx->lost) {
    al_log(AL_LOG_INFO, "transcript %s: writing again",
           tx->path != NULL ? tx->path : "?");
    tx->err = 0;
    tx->retry_ms = 0;
    tx_notify(tx);
  }
}

static void tx_drop_queue(al_tx_t *tx) {
  while (!al_list_empty(&tx->queue)) {
    tx_entry_t *e = AL_CONTAINER_OF(tx->queue.next, tx_entry_t, node);

    al_list_remove(&e->node);
    entry_free(e);
  }
  tx->queued = 0;
  tx->head_off = 0;
}

static void tx_on_done(al_tx_t *tx, uv_fs_type type, ssize_t res);

static void tx_on_fs(uv_fs_t *req) {
  al_tx_t *tx = AL_CONTAINER_OF(req, al_tx_t, req);
  uv_fs_type type = req->fs_type;
  ssize_t res = req->result;

  uv_fs_req_cleanup(req);
  tx->busy = false;
  if (tx->inject_err != 0) {
    /* The seam stood in for a write or an fdatasync: report its error as
     * that operation's. */
    type = tx->inject_sync ? UV_FS_FDATASYNC : UV_FS_WRITE;
    res = tx->inject_err;
    tx->inject_err = 0;
    tx->inject_sync = false;
  }
  tx_on_done(tx, type, res);
}

/* The windowed write, on a threadpool thread: the window is checked here,
 * right before the write(2), not when the write was issued (a process
 * stopped in between, or a busy pool, would land it late: fleet F3). */
static void tx_work_write(uv_work_t *w) {
  al_tx_t *tx = AL_CONTAINER_OF(w, al_tx_t, work);
  ssize_t r;

  if (uv_hrtime() >= tx->write_by_ns) {
    tx->work_res = AL_EFENCED;
    return;
  }
  do {
    r = writev(tx->fd, (const struct iovec *)tx->iov, (int)tx->work_n);
  } while (r < 0 && errno == EINTR);
  tx->work_res = r < 0 ? -errno : r;
}

static void tx_after_write(uv_work_t *w, int status) {
  al_tx_t *tx = AL_CONTAINER_OF(w, al_tx_t, work);

  tx->busy = false;
  if (status == 0 && tx->work_res == AL_EFENCED) {
    /* Not made: the gate is asked again (now past the lease it says no and
     * the queue is dropped; renewed meanwhile, it is written now). */
    tx_kick(tx);
    return;
  }
  tx_on_done(tx, UV_FS_WRITE, status != 0 ? status : tx->work_res);
}

static void tx_on_done(al_tx_t *tx, uv_fs_type type, ssize_t res) {
  switch (type) {
  case UV_FS_OPEN:
    if (res < 0) {
      if (tx->closing) {
        tx_lose(tx, (int)res, "the transcript cannot be opened");
        tx_drop_queue(tx);
        tx->closed_fd = true;
      } else {
        tx_fail(tx, (int)res);
      }
    } else {
      tx->fd = (uv_file)res;
      /* One writer per transcript, across processes (agentloopd and
       * headless `agentloop run --resume`): an exclusive advisory lock
       * for as long as the writer is open. Non-blocking: a holder makes
       * this writer fail (degraded), it never waits. */
      if (!tx->no_lock && flock(tx->fd, LOCK_EX | LOCK_NB) != 0) {
        tx_fail(tx, errno == EWOULDBLOCK ? UV_EBUSY : -errno);
        tx_drop_queue(tx);
      } else {
        tx_recovered(tx);
      }
    }
    break;
  case UV_FS_WRITE:
    if (res < 0) {
      tx_fail(tx, (int)res);
      break;
    }
    if (res > 0) {
      tx_recovered(tx);
    }
    /* Drop what was written; a partial write leaves head_off inside the
     * first unwritten entry and the next writev resumes there. */
    {
      size_t left = (size_t)res;

      while (!al_list_empty(&tx->queue)) {
        tx_entry_t *e = AL_CONTAINER_OF(tx->queue.next, tx_entry_t, node);
        size_t rest = e->blob->len - tx->head_off;

        if (left < rest) {
          tx->head_off += left;
          tx->queued -= left;
          break;
        }
        left -= rest;
        tx->queued -= rest;
        tx->head_off = 0;
        if (e->sync) {
          tx->sync_due = true;
        }
        al_list_remove(&e->node);
        entry_free(e);
      }
    }
    break;
  case UV_FS_FDATASYNC:
    if (res < 0) {
      /* A failed fsync is never taken as success (RELIABILITY F4); it is
       * tried again like a write. */
      tx->failed_sync = true;
      tx_fail(tx, (int)res);
    } else {
      tx->failed_sync = false;
      if (al_list_empty(&tx->queue)) {
        tx_recovered(tx);
      }
    }
    break;
  case UV_FS_CLOSE:
    tx->closed_fd = true;
    tx->fd = -1;
    break;
  default:
    break;
  }
  tx_kick(tx);
}

static void tx_retry_cb(uv_timer_t *t) {
  al_tx_t *tx = AL_CONTAINER_OF(t, al_tx_t, retry);

  tx->waiting = false;
  tx_kick(tx);
}

static void tx_free(al_tx_t *tx) {
  al_tx_close_cb cb = tx->close_cb;
  void *data = tx->close_data;

  tx_drop_queue(tx);
  al_free(tx->path);
  al_free(tx);
  if (cb != NULL) {
    cb(tx, data);
  }
}

static void tx_retry_closed(uv_handle_t *h) {
  tx_free(AL_CONTAINER_OF(h, al_tx_t, retry));
}

static void tx_kick(al_tx_t *tx) {
  int rc;

  if (tx->busy) {
    return;
  }
  if (tx->closing && tx->err != 0) {
    /* Nobody will wait for the disk any longer: what could not be
     * written is lost, and said so. */
    if (tx->waiting) {
      uv_timer_stop(&tx->retry);
      tx->waiting = false;
    }
    if (!al_list_empty(&tx->queue) || tx->failed_sync) {
      /* A failed fdatasync is a loss too: what it covered may not be on
       * the disk (RELIABILITY F4). */
      tx_lose(tx, tx->err, "closed while writes were failing");
      tx_drop_queue(tx);
    }
    tx->sync_due = false;
    tx->failed_sync = false;
  }
  if (tx->fd < 0 && !tx->closed_fd && !tx->waiting && !tx->closing &&
      tx->path != NULL && tx->err != 0) {
    /* The open failed: try it again. */
    rc = uv_fs_open(tx->loop, &tx->req, tx->path,
                    O_WRONLY | O_APPEND | O_CREAT, 0600, tx_on_fs);
    if (rc == 0) {
      tx->busy = true;
      return;
    }
    tx_fail(tx, rc);
  }
  if (tx->gate != NULL && !al_list_empty(&tx->queue)) {
    /* Taken before the gate is asked: the window runs from its yes. */
    tx->write_by_ns = uv_hrtime() + tx->gate_window_ns;
  }
  if (tx->gate != NULL && !al_list_empty(&tx->queue) &&
      !tx->gate(tx->gate_data)) {
    /* Fenced (fleet mode): the file is another owner's now. What was
     * queued while ours is dropped, not written late (a process stopped
     * past its lease wakes with appends queued). */
    tx_drop_queue(tx);
  }
  if (tx->fd >= 0 && !tx->waiting && !al_list_empty(&tx->queue)) {
    al_list_t *pos;
    unsigned n = 0;
    size_t off = tx->head_off;
    int fault = al__tx_write_fault != NULL ? al__tx_write_fault(tx->path) : 0;

    if (fault != 0) {
      /* The seam: a threadpool round trip that reports fault. */
      rc = uv_fs_stat(tx->loop, &tx->req, "/", tx_on_fs);
      if (rc == 0) {
        tx->inject_err = fault;
        tx->busy = true;
        return;
      }
    }
    al_list_foreach(pos, &tx->queue) {
      tx_entry_t *e = AL_CONTAINER_OF(pos, tx_entry_t, node);

      if (n == TX_MAX_IOV) {
        break;
      }
      tx->iov[n] = uv_buf_init(e->blob->data + off,
                               (unsigned)(e->blob->len - off));
      off = 0;
      n++;
    }
    if (tx->gate != NULL && tx->gate_window_ns > 0) {
      tx->work_n = n;
      rc = uv_queue_work(tx->loop, &tx->work, tx_work_write, tx_after_write);
    } else {
      rc = uv_fs_write(tx->loop, &tx->req, tx->fd, tx->iov, n, -1, tx_on_fs);
    }
    if (rc == 0) {
      tx->busy = true;
      return;
    }
    tx_fail(tx, rc);
  }
  if (tx->fd >= 0 && !tx->waiting && al_list_empty(&tx->queue) &&
      (tx->sync_due || tx->failed_sync)) {
    tx->sync_due = false;
    if (tx_fdatasync(tx) == 0) {
      tx->flush_synced = tx->flush_cb != NULL;
      tx->busy = true;
      return;
    }
  }
  if (tx->flush_cb != NULL &&
      (tx->err != 0 || tx->closed_fd ||
       (al_list_empty(&tx->queue) && tx->flush_synced))) {
    al_tx_flush_cb cb = tx->flush_cb;

    tx->flush_cb = NULL;
    tx->flush_synced = false;
    cb(tx, tx->flush_data);
    /* cb may have called al__tx_close, which never frees inside the
     * call: go on with the queue or the close. */
    tx_kick(tx);
    return;
  }
  if (tx->flush_cb != NULL && tx->fd >= 0 && !tx->waiting &&
      al_list_empty(&tx->queue)) {
    /* Nothing left to write: one fdatasync makes it durable. */
    if (tx_fdatasync(tx) == 0) {
      tx->flush_synced = true;
      tx->busy = true;
      return;
    }
  }
  if (tx->closing && al_list_empty(&tx->queue) && !tx->busy) {
    if (tx->fd >= 0) {
      if (uv_fs_close(tx->loop, &tx->req, tx->fd, tx_on_fs) == 0) {
        tx->busy = true;
        return;
      }
      tx->fd = -1;
      tx->closed_fd = true;
    }
    if (tx->closed_fd || tx->fd < 0) {
      if (tx->retry_init) {
        tx->retry_init = false;
        uv_close((uv_handle_t *)&tx->retry, tx_retry_closed);
        return;
      }
      tx_free(tx);
    }
  }
}

int al__tx_open(uv_loop_t *loop, const char *path, size_t max_queue,
                al_tx_t **out) {
  al_tx_t *tx = al_calloc(1, sizeof(*tx));
  int rc;

  if (tx == NULL) {
    return AL_ENOMEM;
  }
  tx->loop = loop;
  tx->fd = -1;
  tx->max_queue = max_queue;
  al_list_init(&tx->queue);
  tx->path = al_strdup(path);
  if (tx->path == NULL) {
    al_free(tx);
    return AL_ENOMEM;
  }
  /* libuv adds O_CLOEXEC to every open. */
  rc = uv_fs_open(loop, &tx->req, path, O_WRONLY | O_APPEND | O_CREAT, 0600,
                  tx_on_fs);
  if (rc != 0) {
    al_free(tx->path);
    al_free(tx);
    return rc;
  }
  tx->busy = true;
  *out = tx;
  return 0;
}

void al__tx_set_state_cb(al_tx_t *tx, al_tx_state_cb cb, void *data) {
  tx->on_state = cb;
  tx->state_data = data;
}

bool al__tx_lost(const al_tx_t *tx) { return tx->lost; }

int al__tx_append(al_tx_t *tx, al_blob_t *blob, bool sync) {
  tx_entry_t *e;

  if (tx->lost) {
    return tx->err;
  }
  if (tx->queued + blob->len > tx->max_queue) {
    /* Failing for so long that the bound is reached: stop here rather
     * than write a transcript with a hole in it. */
    tx_lose(tx, AL_ETOOBIG, "the in-memory queue bound was reached");
    tx_drop_queue(tx);
    return AL_ETOOBIG;
  }
  e = al_malloc(sizeof(*e));
  if (e == NULL) {
    return AL_ENOMEM;
  }
  e->blob = al__blob_ref(blob);
  e->sync = sync;
  al_list_insert_tail(&tx->queue, &e->node);
  tx->queued += blob->len;
  tx_kick(tx);
  return 0;
}

int al__tx_flush(al_tx_t *tx, al_tx_flush_cb cb, void *data) {
  if (tx->flush_cb != NULL || tx->closing) {
    return AL_EBUSY;
  }
  tx->flush_cb = cb;
  tx->flush_data = data;
  tx->flush_synced = false;
  if (!tx->busy) {
    /* Idle: go through the threadpool so cb never runs inside. */
    if (tx->fd >= 0 && tx->err == 0 &&
        tx_fdatasync(tx) == 0) {
      tx->flush_synced = al_list_empty(&tx->queue);
      tx->busy = true;
      return 0;
    }
    if (uv_fs_stat(tx->loop, &tx->req, "/", tx_close_deferred) == 0) {
      tx->busy = true;
      return 0;
    }
    tx->flush_cb = NULL;
    return AL_ENOMEM;
  }
  return 0;
}

size_t al__tx_pending(const al_tx_t *tx) { return tx->queued; }

int al__tx_error(const al_tx_t *tx) { return tx->err; }

void al__tx_loss(const al_tx_t *tx, al_tx_loss_t *out) { *out = tx->loss; }

void al__tx_retry_now(al_tx_t *tx) {
  if (tx->waiting && !tx->closing) {
    uv_timer_stop(&tx->retry);
    tx->waiting = false;
    tx_kick(tx);
  }
}

static void tx_close_deferred(uv_fs_t *req) {
  al_tx_t *tx = AL_CONTAINER_OF(req, al_tx_t, req);

  uv_fs_req_cleanup(req);
  tx->busy = false;
  tx_kick(tx);
}

void al__tx_close(al_tx_t *tx, al_tx_close_cb cb, void *data) {
  if (tx->closing) {
    return;
  }
  tx->closing = true;
  tx->close_cb = cb;
  tx->close_data = data;
  if (tx->busy) {
    return; /* the request in flight kicks the rest */
  }
  /* Never call back inside the call: a final fdatasync when the file is
   * open (wanted anyway), else a cheap stat through the threadpool. */
  if (tx->fd >= 0 && tx->err == 0 && al_list_empty(&tx->queue)) {
    if (tx_fdatasync(tx) == 0) {
      tx->busy = true;
      return;
    }
  }
  if (uv_fs_stat(tx->loop, &tx->req, "/", tx_close_deferred) == 0) {
    tx->busy = true;
    return;
  }
  tx_kick(tx);
}

/* ---- records ---------------------------------------------------------------- */

al_blob_t *al__tx_record(const json_t *rec) {
  size_t n = json_dumpb(rec, NULL, 0, JSON_COMPACT);
  al_blob_t *b;

  if (n == 0 || (b = al__blob_alloc(n + 1)) == NULL) {
    return NULL;
  }
  if (json_dumpb(rec, b->data, n, JSON_COMPACT) != n) {
    al__blob_unref(b);
    return NULL;
  }
  b->data[n] = '\n';
  return b;
}

/* Indexed by al_commit_kind_t: the one table of history record kinds
 * (the daemon and `agentloop run` both write through it). */
static const char *const commit_kinds[] = {
    [AL_COMMIT_USER] = "user",
    [AL_COMMIT_ASSISTANT] = "assistant",
    [AL_COMMIT_TOOL_RESULTS] = "tool_results",
    [AL_COMMIT_COMPACTION] = "compaction",
    [AL_COMMIT_MICRO] = "micro",
};

const char *al__tx_commit_kind_name(al_commit_kind_t kind) {
  size_t k = (size_t)kind;

  return k < sizeof(commit_kinds) / sizeof(commit_kinds[0])
             ? commit_kinds[k]
             : NULL;
}

al_blob_t *al__tx_commit_record(al_commit_kind_t kind, const char *message,
                                size_t len) {
  const char *name = al__tx_commit_kind_name(kind);
  json_t *m;
  json_t *rec;
  al_blob_t *b;

  if (name == NULL) {
    return NULL;
  }
  m = json_loadb(message, len, JSON_ALLOW_NUL, NULL);
  if (m == NULL) {
    return NULL;
  }
  rec = json_pack("{s:s, s:o}", "rec", name, "message", m);
  if (rec == NULL) {
    return NULL;
  }
  b = al__tx_record(rec);
  json_decref(rec);
  return b;
}

al_blob_t *al__tx_synthetic_record(const json_t *synthetic) {
  json_t *rec = json_pack("{s:s, s:O}", "rec", "tool_results", "message",
                          synthetic);
  al_blob_t *b = rec != NULL ? al__tx_record(rec) : NULL;

  json_decref(rec);
  return b;
}

bool al__session_id_valid(const char *id) {
  size_t i;
  size_t n = id != NULL ? strlen(id) : 0;

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

/* ---- a reply's deltas --------------------------------------------------------- */

void al__tx_deltas_init(al_tx_deltas_t *d, size_t max) {
  memset(d, 0, sizeof(*d));
  d->max = max;
}

static bool is_delta(al_event_type_t t) {
  return t == AL_EVENT_TEXT_DELTA || t == AL_EVENT_THINKING_DELTA ||
         t == AL_EVENT_TOOL_INPUT_DELTA;
}

bool al__tx_is_delta(al_event_type_t t) {
  return is_delta(t);
}

bool al__tx_deltas_keep(al_tx_deltas_t *d, const al_event_t *ev,
                        size_t line_len, al_blob_t **note) {
  *note = NULL;
  if (is_delta(ev->type)) {
    if (d->kept + line_len <= d->max) {
      d->kept += line_len;
      return true;
    }
    if (d->elided == 0) {
      d->first_seq = ev->seq;
      d->run = ev->run;
      d->turn = ev->turn;
    }
    d->elided++;
    d->elided_bytes += line_len;
    d->last_seq = ev->seq;
    return false;
  }
  if (d->elided > 0) {
    /* The span ends here: say what it held and what ended it (a rejected
     * reply's api_error, or the reply's own end). */
    const char *by = al_event_type_name(ev->type);
    json_t *rec = json_pack(
        "{s:s, s:{s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:s}}", "rec", "elided",
        "message", "run", (json_int_t)d->run, "turn", (int)d->turn,
        "first_seq", (json_int_t)d->first_seq, "last_seq",
        (json_int_t)d->last_seq, "events", (json_int_t)d->elided, "bytes",
        (json_int_t)d->elided_bytes, "max_bytes", (json_int_t)d->max,
        "ended_by", by != NULL ? by : "?");

    *note = rec != NULL ? al__tx_record(rec) : NULL;
    json_decref(rec);
    d->elided = 0;
    d->elided_bytes = 0;
  }
  if (ev->type == AL_EVENT_STREAM_REQUEST_START ||
      ev->type == AL_EVENT_TURN_STARTED ||
      ev->type == AL_EVENT_RUN_STARTED ||
      ev->type == AL_EVENT_COMPACTION_STARTED) {
    /* A new attempt (a retry's deltas are the reply again) or a new
     * stream (a summary's): its own budget. Other events in the middle
     * of a reply (a block completed) do not reset it. */
    d->kept = 0;
  }
  return true;
}

/* ---- the hash chain ----------------------------------------------------------- */

/* The hash of a chained record, in hex. Format 1 (id ""): sha256(prev ||
 * rec). Format 2: sha256("al-tx2:" || id || ":" || prev || rec), so the
 * record is bound to its session as well as to its place (an id is
 * [A-Za-z0-9_-] and prev fixed-length hex or "", so the fields cannot run
 * into each other). prev is the previous chained record's hash ("" for
 * the first), rec the record's compact JSON without "h". */
static void chain_hash(const char *id, const char *prev, const char *a,
                       size_t an, const char *b, size_t bn,
                       char out[AL_TX_HASH_HEX + 1]) {
  static const char hex[] = "0123456789abcdef";
  mbedtls_sha256_context c;
  unsigned char d[32];
  size_t i;

  mbedtls_sha256_init(&c);
  mbedtls_sha256_starts_ret(&c, 0);
  if (id != NULL && id[0] != '\0') {
    mbedtls_sha256_update_ret(&c, (const unsigned char *)"al-tx2:", 7);
    mbedtls_sha256_update_ret(&c, (const unsigned char *)id, strlen(id));
    mbedtls_sha256_update_ret(&c, (const unsigned char *)":", 1);
  }
  mbedtls_sha256_update_ret(&c, (const unsigned char *)prev, strlen(prev));
  mbedtls_sha256_update_ret(&c, (const unsigned char *)a, an);
  mbedtls_sha256_update_ret(&c, (const unsigned char *)b, bn);
  mbedtls_sha256_finish_ret(&c, d);
  mbedtls_sha256_free(&c);
  for (i = 0; i < 32; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[AL_TX_HASH_HEX] = '\0';
}

#define CHAIN_SUFFIX_LEN (sizeof(",\"h\":\"\"}") - 1 + AL_TX_HASH_HEX)

al_blob_t *al__tx_chain_record(const char *id, const char *prev,
                               const al_blob_t *rec,
                               char h[AL_TX_HASH_HEX + 1]) {
  al_blob_t *b;
  size_t n;

  /* rec is "{...}\n": R is everything before the '\n'. */
  if (rec->len < 3 || rec->data[rec->len - 1] != '\n' ||
      rec->data[rec->len - 2] != '}') {
    return NULL;
  }
  n = rec->len - 1;
  chain_hash(id, prev, rec->data, n, "", 0, h);
  b = al__blob_alloc(n - 1 + CHAIN_SUFFIX_LEN + 1);
  if (b == NULL) {
    return NULL;
  }
  memcpy(b->data, rec->data, n - 1);
  snprintf(b->data + n - 1, CHAIN_SUFFIX_LEN + 2, ",\"h\":\"%s\"}\n", h);
  return b;
}

int al__tx_append_chained(al_tx_t *tx, al_blob_t *rec, bool sync) {
  char h[AL_TX_HASH_HEX + 1];
  al_blob_t *b = al__tx_chain_record(tx->chain_id, tx->chain, rec, h);
  int rc;

  if (b == NULL) {
    return AL_ENOMEM;
  }
  rc = al__tx_append(tx, b, sync);
  al__blob_unref(b);
  if (rc == 0) {
    memcpy(tx->chain, h, sizeof(h));
  }
  return rc;
}

void al__tx_set_gate(al_tx_t *tx, bool (*gate)(void *data), void *data,
                     uint64_t window_ms) {
  tx->gate = gate;
  tx->gate_data = data;
  tx->gate_window_ns = window_ms * 1000000u;
}

void al__tx_set_no_lock(al_tx_t *tx) {
  tx->no_lock = true;
}

void al__tx_set_chain(al_tx_t *tx, const char *hash, const char *id) {
  snprintf(tx->chain, sizeof(tx->chain), "%s", hash != NULL ? hash : "");
  snprintf(tx->chain_id, sizeof(tx->chain_id), "%s",
           id != NULL && al__session_id_valid(id) ? id : "");
}

/* Checks a chained line p[0..n) of session id's chain ("": format 1)
 * against prev (and, failing that, alt); fills h with its hash. 1
 * verified, 0 no "h" suffix, -1 mismatch. */
static int chain_check(const char *p, size_t n, const char *id,
                       const char *prev, const char *alt,
                       char h[AL_TX_HASH_HEX + 1]) {
  const char *suf;
  char want[AL_TX_HASH_HEX + 1];
  size_t rn;

  if (n < CHAIN_SUFFIX_LEN + 2) {
    return 0;
  }
  suf = p + n - CHAIN_SUFFIX_LEN;
  if (memcmp(suf, ",\"h\":\"", 6) != 0 || p[n - 2] != '"' ||
      p[n - 1] != '}') {
    return 0;
  }
  memcpy(h, suf + 6, AL_TX_HASH_HEX);
  h[AL_TX_HASH_HEX] = '\0';
  rn = (size_t)(suf - p);
  chain_hash(id, prev, p, rn, "}", 1, want);
  if (memcmp(want, h, AL_TX_HASH_HEX) == 0) {
    return 1;
  }
  if (alt != NULL && alt[0] != '\0') {
    chain_hash(id, alt, p, rn, "}", 1, want);
    if (memcmp(want, h, AL_TX_HASH_HEX) == 0) {
      return 1;
    }
  }
  return -1;
}

/* ---- the header ------------------------------------------------------------ */

al_blob_t *al__tx_header_record(const char *id, const al_tx_header_t *h) {
  json_t *rec = json_pack(
      "{s:s, s:i, s:s, s:I, s:s?, s:s?, s:s?, s:s?, s:s?, s:O?, s:O?, "
      "s:O?, s:O?}", "rec",
      "session", "v", AL_TX_FORMAT, "session", id, "created_ms",
      (json_int_t)h->created_ms, "cwd", h->cwd, "model", h->model,
      "provider", h->provider, "base_url", h->base_url, "system", h->system,
      "ask_tools", h->ask_tools, "allow_tools", h->allow_tools, "deny_tools",
      h->deny_tools, "limits", h->limits);
  al_blob_t *b;

  if (rec != NULL && h->fallback_model != NULL) {
    json_object_set_new(rec, "fallback_model",
                        json_string(h->fallback_model));
  }
  if (rec != NULL && h->sandbox != NULL) {
    json_object_set_new(rec, "sandbox", json_string(h->sandbox));
  }
  if (rec != NULL && h->max_tokens > 0) {
    json_object_set_new(rec, "max_tokens", json_integer(h->max_tokens));
  }
  if (rec != NULL && h->network) {
    json_object_set_new(rec, "network", json_true());
  }
  if (rec != NULL && h->max_turns > 0) {
    json_object_set_new(rec, "max_turns", json_integer(h->max_turns));
  }
  if (rec != NULL && h->timeouts != NULL) {
    json_object_set(rec, "timeouts", h->timeouts);
  }
  if (rec != NULL && h->paths != NULL) {
    json_object_set(rec, "paths", h->paths);
  }
  if (rec != NULL && h->context != NULL) {
    json_object_set(rec, "context", h->context);
  }
  if (rec != NULL && h->parent != NULL) {
    json_object_set(rec, "parent", h->parent);
  }
  if (rec != NULL && h->subagents != NULL) {
    json_object_set(rec, "subagents", h->subagents);
  }
  b = rec != NULL ? al__tx_record(rec) : NULL;
  json_decref(rec);
  return b;
}

static char *str_field(const json_t *o, const char *key) {
  const char *v = json_string_value(json_object_get(o, key));

  return v != NULL ? al_strdup(v) : NULL;
}

bool al__tx_header_parse(const json_t *rec, al_tx_header_t *h) {
  const json_t *ask;

  if (!json_is_object(rec) ||
      !json_is_string(json_object_get(rec, "rec")) ||
      strcmp(json_string_value(json_object_get(rec, "rec")), "session") !=
          0) {
    return false;
  }
  al__tx_header_free(h);
  h->cwd = str_field(rec, "cwd");
  h->model = str_field(rec, "model");
  h->provider = str_field(rec, "provider");
  h->base_url = str_field(rec, "base_url");
  h->fallback_model = str_field(rec, "fallback_model");
  h->system = str_field(rec, "system");
  ask = json_object_get(rec, "ask_tools");
  h->ask_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "allow_tools");
  h->allow_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "deny_tools");
  h->deny_tools = json_is_array(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "limits");
  h->limits = json_is_object(ask) ? json_deep_copy(ask) : NULL;
  h->created_ms = (uint64_t)json_integer_value(
      json_object_get(rec, "created_ms"));
  h->sandbox = str_field(rec, "sandbox");
  h->max_tokens = json_integer_value(json_object_get(rec, "max_tokens"));
  h->max_turns = json_integer_value(json_object_get(rec, "max_turns"));
  h->network = json_is_true(json_object_get(rec, "network"));
  ask = json_object_get(rec, "timeouts");
  h->timeouts = json_is_object(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "paths");
  h->paths = json_is_object(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "context");
  h->context = json_is_object(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "parent");
  h->parent = json_is_object(ask) ? json_deep_copy(ask) : NULL;
  ask = json_object_get(rec, "subagents");
  h->subagents = json_is_object(ask) ? json_deep_copy(ask) : NULL;
  return true;
}

void al__tx_header_free(al_tx_header_t *h) {
  al_free(h->cwd);
  al_free(h->model);
  al_free(h->provider);
  al_free(h->base_url);
  al_free(h->fallback_model);
  al_free(h->system);
  json_decref(h->ask_tools);
  json_decref(h->allow_tools);
  json_decref(h->deny_tools);
  al_free(h->sandbox);
  json_decref(h->timeouts);
  json_decref(h->paths);
  json_decref(h->limits);
  json_decref(h->context);
  json_decref(h->parent);
  json_decref(h->subagents);
  memset(h, 0, sizeof(*h));
}

bool al__tx_scan_head(const char *p, size_t n, al_tx_header_t *h,
                      char **first_user_text) {
  const char *line = p;
  bool found = false;

  *first_user_text = NULL;
  while (line < p + n) {
    const char *e = memchr(line, '\n', (size_t)(p + n - line));
    json_t *o;
    const char *rec;

    if (e == NULL) {
      break;
    }
    o = json_loadb(line, (size_t)(e - line), 0, NULL);
    rec = json_string_value(json_object_get(o, "rec"));
    if (!found && rec != NULL && strcmp(rec, "session") == 0) {
      found = al__tx_header_parse(o, h);
    } else if (rec != NULL && strcmp(rec, "user") == 0 &&
               *first_user_text == NULL) {
      const char *t = json_string_value(json_object_get(
          json_array_get(
              json_object_get(json_object_get(o, "message"), "content"), 0),
          "text"));

      *first_user_text = t != NULL ? al_strdup(t) : NULL;
    }
    json_decref(o);
    if (found && h->cwd != NULL && *first_user_text != NULL) {
      break;
    }
    line = e + 1;
  }
  return found;
}

/* ---- loading ---------------------------------------------------------------- */

typedef struct {
  al_tx_loaded_t *out;
  size_t max_event_bytes;
  size_t event_bytes;
  size_t cap;
  size_t head; /* events[head..nevents) are live (a queue in an array) */
  size_t lineno;
  bool chained;                       /* a chained record was seen */
  char skipped_h[AL_TX_HASH_HEX + 1]; /* claimed hash of the last record
                                         that failed the chain */
} loader_t;

static void note_bad(al_tx_loaded_t *l, size_t lineno, const char *what) {
  l->bad_lines++;
  /* Exactly what was skipped: line and reason, for the first 64. */
  if (l->skipped == NULL) {
    l->skipped = json_array();
  }
  if (l->skipped != NULL && json_array_size(l->skipped) < 64) {
    json_array_append_new(l->skipped,
                          json_pack("{s:I, s:s}", "line", (json_int_t)lineno,
                                    "reason", what));
  }
  if (l->why[0] == '\0') {
    snprintf(l->why, sizeof(l->why), "line %zu: %s", lineno, what);
  }
}

static int push_event(loader_t *ld, uint64_t seq, const char *p, size_t n) {
  al_tx_loaded_t *l = ld->out;
  al_blob_t *b;

  /* Drop the oldest events while the new one does not fit. */
  while (ld->head < l->nevents &&
         ld->event_bytes + n + 1 > ld->max_event_bytes) {
    ld->event_bytes -= l->events[ld->head].line->len;
    al__blob_unref(l->events[ld->head].line);
    l->events[ld->head].line = NULL;
    ld->head++;
  }
  if (n + 1 > ld->max_event_bytes) {
    return 0;
  }
  if (ld->head > 0 && ld->head * 2 >= l->nevents) {
    memmove(l->events, l->events + ld->head,
            (l->nevents - ld->head) * sizeof(*l->events));
    l->nevents -= ld->head;
    ld->head = 0;
  }
  if (l->nevents == ld->cap) {
    size_t ncap = ld->cap != 0 ? ld->cap * 2 : 64;
    al_tx_event_t *ne = al_realloc(l->events, ncap * sizeof(*ne));

    if (ne == NULL) {
      return AL_ENOMEM;
    }
    l->events = ne;
    ld->cap = ncap;
  }
  if ((b = al__blob_alloc(n + 1)) == NULL) {
    return AL_ENOMEM;
  }
  memcpy(b->data, p, n);
  b->data[n] = '\n';
  l->events[l->nevents].seq = seq;
  l->events[l->nevents].line = b;
  l->nevents++;
  ld->event_bytes += n + 1;
  return 0;
}

/* Context records (docs/context.md): a compaction replaces the history
 * with the one it recorded (checked first: a damaged record must not make
 * the conversation unsendable); a micro-compaction clears the same
 * results again. Both only between turns. */
static bool replay_context(al_history_t *h, const char *kind,
                           const json_t *msg) {
  const json_t *v;

  if (al__history_turn_open(h)) {
    return false;
  }
  if (strcmp(kind, "micro") == 0) {
    v = json_object_get(msg, "call_ids");
    if (!json_is_array(v) || h->messages == NULL) {
      return false;
    }
    al__micro_clear_ids(h->messages, v);
    return true;
  }
  v = json_object_get(msg, "messages");
  if (!json_is_array(v) || json_array_size(v) == 0 ||
      al__history_validate_json(v, NULL, 0) != 0) {
    return false;
  }
  json_decref(h->messages);
  h->messages = json_deep_copy(v);
  return h->messages != NULL;
}

/* Replays one history record; false when it does not fit the history
 * (counted as a bad line by the caller). */
static bool replay(al_tx_loaded_t *l, const char *kind, const json_t *msg) {
  al_history_t *h = &l->history;
  const json_t *content = json_object_get(msg, "content");
  size_t i;
  const json_t *b;

  if (strcmp(kind, "compaction") == 0 || strcmp(kind, "micro") == 0) {
    return replay_context(h, kind, msg);
  }
  if (!json_is_array(content)) {
    return false;
  }
  if (strcmp(kind, "user") == 0) {
    if (al__history_turn_open(h)) {
      return false;
    }
    json_array_foreach(content, i, b) {
      const char *t = json_string_value(json_object_get(b, "text"));

      if (t != NULL && al__history_append_user_text(h, t) != 0) {
        return false;
      }
    }
    if (l->first_user_text == NULL) {
      const char *t =
          json_string_value(json_object_get(json_array_get(content, 0),
                                            "text"));

      l->first_user_text = t != NULL ? al_strdup(t) : NULL;
    }
    return true;
  }
  if (strcmp(kind, "assistant") == 0) {
    /* The history copies blocks verbatim; a damaged record must not make
     * the loaded conversation unsendable. */
    return al__history_check_blocks(content, true, NULL, 0) == 0 &&
           al__history_commit_assistant(h, msg) == 0;
  }
  if (strcmp(kind, "tool_results") == 0) {
    if (!al__history_turn_open(h)) {
      return false;
    }
    json_array_foreach(content, i, b) {
      const char *id = json_string_value(json_object_get(b, "tool_use_id"));
      const json_t *c = json_object_get(b, "content");

      if (id == NULL) {
        continue;
      }
      json_t *empty = c == NULL ? json_string("") : NULL;
      bool err = json_is_true(json_object_get(b, "is_error"));

      /* A result the history refuses (unknown id, twice) is dropped; the
       * turn is still closed below. Content blocks it refuses (a damaged
       * image) come back as their text view, so the conversation stays
       * sendable. */
      if (al__history_add_tool_result(h, id, c != NULL ? c : empty, err) ==
              AL_EINVAL &&
          json_is_array(c)) {
        char *t = al__media_text_view(c);
        al_buf_t note;

        al_buf_init(&note, (size_t)1 << 30);
        al_buf_printf(&note, "%s\n[agentloop: this result's attachments "
                            "were damaged in the transcript and are not "
                             "shown]", t != NULL ? t : "");
        if (note.data != NULL) {
          al__history_add_tool_result_text(h, id, note.data, err);
        }
        al_buf_free(&note);
        al_free(t);
      }
      json_decref(empty);
    }
    if (al__history_pending(h) > 0) {
      al__history_cancel_open(h, AL_TX_SYNTHETIC_TEXT);
    } else {
      al__history_close_turn(h);
    }
    return true;
  }
  return false;
}

/* A "child" record into l->children; false when it names no task or no
 * child session. */
static bool child_link(al_tx_loaded_t *l, const json_t *o) {
  json_t *c;

  if (!json_is_string(json_object_get(o, "task")) ||
      !json_is_string(json_object_get(o, "session"))) {
    return false;
  }
  if (l->children == NULL && (l->children = json_array()) == NULL) {
    return true; /* OOM: the list is shorter, the load goes on */
  }
  c = json_deep_copy(o);
  if (c != NULL) {
    json_object_del(c, "rec");
    json_object_del(c, "h");
    json_array_append_new(l->children, c);
  }
  return true;
}

static int load_line(loader_t *ld, const char *p, size_t n, size_t lineno) {
  al_tx_loaded_t *l = ld->out;
  json_error_t err;
  json_t *o = json_loadb(p, n, JSON_ALLOW_NUL, &err);
  const json_t *rec;
  const json_t *seq;
  int rc = 0;

  if (o == NULL || !json_is_object(o)) {
    note_bad(l, lineno, o == NULL ? err.text : "not an object");
    json_decref(o);
    return 0;
  }
  rec = json_object_get(o, "rec");
  seq = json_object_get(o, "seq");
  if (json_is_string(rec)) {
    const char *kind = json_string_value(rec);
    char h[AL_TX_HASH_HEX + 1];
    const char *id = l->chain_id;
    const char *own = NULL;
    int ck;

    /* The first format-2 header binds the chain to its session id from
     * there on (before it, format 1: an older file, possibly continued
     * by a newer writer). */
    if (id[0] == '\0' && strcmp(kind, "session") == 0 &&
        json_integer_value(json_object_get(o, "v")) >= 2 &&
        al__session_id_valid(
            json_string_value(json_object_get(o, "session")))) {
      own = json_string_value(json_object_get(o, "session"));
    }
    ck = chain_check(p, n, own != NULL ? own : id, l->chain, ld->skipped_h,
                     h);
    if (ck < 0 && own != NULL) {
      /* A header written into a format-1 file by the writer continuing
       * it (session/configure): still format 1. */
      ck = chain_check(p, n, "", l->chain, ld->skipped_h, h);
      own = NULL;
    }
    /* Records carry a hash chain (each hash covers the session id and the
     * previous hash): a record that fails it was edited, forged, or
     * copied from another session, and is skipped; records after it that
     * chain to the last good one (or to the skipped one's own hash: an
     * edit in place) are kept. A record of another session verifies
     * after nothing here, so it never becomes the chain's head: the
     * session's own next record still follows its last good one. */
    if (ck < 0) {
      memcpy(ld->skipped_h, h, sizeof(h));
      l->chain_breaks++;
      note_bad(l, lineno, "record fails the hash chain (edited, forged, or "
                          "copied from another session)");
      json_decref(o);
      return 0;
    }
    if (ck == 0 && ld->chained) {
      l->chain_breaks++;
      note_bad(l, lineno, "record without its chain hash after chained "
                          "records");
      json_decref(o);
      return 0;
    }
    if (ck > 0) {
      memcpy(l->chain, h, sizeof(h));
      ld->chained = true;
      ld->skipped_h[0] = '\0';
      if (own != NULL) {
        snprintf(l->chain_id, sizeof(l->chain_id), "%s", own);
      }
    }
    if (strcmp(kind, "session") == 0) {
      /* A later header (settings changed by session/configure) wins. */
      if (al__tx_header_parse(o, &l->header)) {
        l->has_header = true;
      }
    } else if (strcmp(kind, "title") == 0) {
      /* session/rename: the last title wins. */
      const char *t = json_string_value(json_object_get(o, "title"));
      char *dup = t != NULL && al__tx_title_check(t) == NULL ? al_strdup(t)
                                                               : NULL;

      if (dup == NULL) {
        note_bad(l, lineno, "title record without a usable title");
        json_decref(o);
        return 0;
      }
      al_free(l->title);
      l->title = dup;
    } else if (strcmp(kind, "elided") == 0) {
      /* A note on deltas left out (al__tx_deltas_keep): nothing to
       * replay. */
    } else if (strcmp(kind, "child") == 0) {
      /* A sub-agent's link: listed, nothing to replay (its answer is its
       * task call's result). */
      if (!child_link(l, o)) {
        note_bad(l, lineno, "child record without its ids");
        json_decref(o);
        return 0;
      }
    } else if (!replay(l, kind, json_object_get(o, "message"))) {
      note_bad(l, lineno, "history record does not fit the history");
      json_decref(o);
      return 0;
    }
  } else if (json_is_string(json_object_get(o, "type")) &&
             json_is_integer(seq) && json_integer_value(seq) > 0) {
    uint64_t s = (uint64_t)json_integer_value(seq);

    if (s > l->last_seq) {
      json_int_t run = json_integer_value(json_object_get(o, "run"));

      const char *type = json_string_value(json_object_get(o, "type"));

      l->last_seq = s;
      /* A child's events (with "path") are re-posted into the parent's
       * stream; a child's final does not end the parent's run. */
      if (run > 0 && (uint64_t)run >= l->last_run &&
          json_object_get(o, "path") == NULL) {
        l->last_run = (uint64_t)run;
        l->last_turn =
            (uint32_t)json_integer_value(json_object_get(o, "turn"));
        l->run_open = strcmp(type, "final") != 0 &&
                      strcmp(type, "error") != 0 &&
                      strcmp(type, "interrupted") != 0;
      }
      rc = push_event(ld, s, p, n);
    } else {
      note_bad(l, lineno, "event seq out of order");
    }
  } else {
    note_bad(l, lineno, "unknown record");
    json_decref(o);
    return 0;
  }
  l->records++;
  json_decref(o);
  return rc;
}

static void loader_init(loader_t *ld, al_tx_loaded_t *out,
                        size_t max_event_bytes) {
  memset(out, 0, sizeof(*out));
  al__history_init(&out->history);
  memset(ld, 0, sizeof(*ld));
  ld->out = out;
  ld->max_event_bytes = max_event_bytes;
}

/* Loads the complete lines of p[0..n); returns the bytes consumed (up to
 * and including the last '\n') in *used. */
static int loader_lines(loader_t *ld, const char *p, size_t n, size_t *used) {
  size_t off = 0;
  int rc = 0;

  while (off < n) {
    const char *nl = memchr(p + off, '\n', n - off);
    size_t len;

    if (nl == NULL) {
      break;
    }
    len = (size_t)(nl - (p + off));
    ld->lineno++;
    if (len > 0 && (rc = load_line(ld, p + off, len, ld->lineno)) != 0) {
      break;
    }
    off += len + 1;
  }
  *used = off;
  return rc;
}

/* The safety net: the checks of every record (replay) keep the history
 * sendable, so no record sequence known today reaches the cut below (the
 * fuzz_transcript target found one before those checks); it stays so
 * that a replay rule missed later cannot make a session unresumable. */
size_t al__tx_keep_valid_prefix(al_tx_loaded_t *out, size_t lineno) {
  json_t *m = out->history.messages;
  size_t cut = 0;

  if (al__history_turn_open(&out->history) ||
      al__history_count(&out->history) == 0 ||
      al__history_validate(&out->history, NULL, 0) == 0) {
    return 0;
  }
  while (json_array_size(m) > 0 &&
         al__history_validate_json(m, NULL, 0) != 0) {
    json_array_remove(m, json_array_size(m) - 1);
    cut++;
    note_bad(out, lineno, "history cut back to its last valid message");
  }
  if (json_array_size(m) == 0) {
    json_decref(m);
    out->history.messages = NULL;
  }
  return cut;
}

/* After the last line: compaction, the safety net, the open turn. */
static int loader_finish(loader_t *ld, int rc) {
  al_tx_loaded_t *out = ld->out;
  size_t lineno = ld->lineno;

  /* Compact the event queue. */
  if (ld->head > 0) {
    memmove(out->events, out->events + ld->head,
            (out->nevents - ld->head) * sizeof(*out->events));
    out->nevents -= ld->head;
  }
  if (rc == 0) {
    al__tx_keep_valid_prefix(out, lineno);
  }
  if (rc == 0 && al__history_turn_open(&out->history)) {
    const json_t *m;

    const json_t *hm = al__history_to_json(&out->history);
    const json_t *last = json_array_get(hm, json_array_size(hm) - 1);
    size_t k;

    out->closed_tool_uses = al__history_pending(&out->history);
    out->closed_calls = json_array();
    for (k = 0; k < out->closed_tool_uses; k++) {
      const char *id = al__history_open_id(&out->history, k);
      const char *name = NULL;
      size_t b;
      json_t *blk;

      json_array_foreach(json_object_get(last, "content"), b, blk) {
        if (id != NULL &&
            json_is_string(json_object_get(blk, "id")) &&
            strcmp(json_string_value(json_object_get(blk, "id")), id) == 0) {
          name = json_string_value(json_object_get(blk, "name"));
        }
      }
      json_array_append_new(out->closed_calls,
                            json_pack("{s:s?, s:s?}", "id", id, "name", name));
    }
    if (al__history_cancel_open(&out->history, AL_TX_SYNTHETIC_TEXT) != 0) {
      rc = AL_ENOMEM;
    } else {
      m = al__history_to_json(&out->history);
      out->synthetic = json_pack(
          "{s:s, s:O, s:b}", "role", "user", "content",
          json_object_get(json_array_get(m, json_array_size(m) - 1),
                          "content"),
          "synthetic", 1);
    }
  }
  out->err = rc;
  return rc;
}

int al__tx_load_buf(const char *p, size_t n, size_t max_event_bytes,
                    al_tx_loaded_t *out, size_t *good_len) {
  loader_t ld;
  size_t used = 0;
  int rc;

  loader_init(&ld, out, max_event_bytes);
  rc = loader_lines(&ld, p, n, &used);
  /* No '\n' after the last bytes: that record was being written. */
  out->torn_tail = rc == 0 && used < n;
  if (good_len != NULL) {
    *good_len = used;
  }
  return loader_finish(&ld, rc);
}

#define LOAD_CHUNK (1024 * 1024)

/* Streams the file in chunks: memory is the longest line plus what is
 * kept (history, the newest events), not the file. */
int al__tx_load(const char *path, bool truncate, size_t max_event_bytes,
                al_tx_loaded_t *out) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  loader_t ld;
  al_buf_t buf;
  size_t good = 0;
  int rc = 0;

  loader_init(&ld, out, max_event_bytes);
  if (fd < 0) {
    rc = -errno;
    out->err = rc;
    return rc;
  }
  al_buf_init(&buf, SIZE_MAX / 2);
  for (;;) {
    ssize_t r;
    size_t used;

    if ((rc = al_buf_reserve(&buf, LOAD_CHUNK)) != 0) {
      break;
    }
    r = read(fd, buf.data + buf.len, LOAD_CHUNK);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      rc = -errno;
      break;
    }
    if (r == 0) {
      break;
    }
    buf.len += (size_t)r;
    if ((rc = loader_lines(&ld, buf.data, buf.len, &used)) != 0) {
      break;
    }
    good += used;
    al_buf_consume(&buf, used);
  }
  out->torn_tail = rc == 0 && buf.len > 0;
  al_buf_free(&buf);
  rc = loader_finish(&ld, rc);
  if (rc == 0 && out->torn_tail && truncate &&
      ftruncate(fd, (off_t)good) != 0) {
    rc = -errno;
    out->err = rc;
  }
  close(fd);
  return rc;
}

void al__tx_loaded_free(al_tx_loaded_t *l) {
  size_t i;

  al__tx_header_free(&l->header);
  json_decref(l->synthetic);
  json_decref(l->closed_calls);
  json_decref(l->children);
  json_decref(l->skipped);
  al__history_free(&l->history);
  al_free(l->first_user_text);
  al_free(l->title);
  for (i = 0; i < l->nevents; i++) {
    al__blob_unref(l->events[i].line);
  }
  al_free(l->events);
  memset(l, 0, sizeof(*l));
}
