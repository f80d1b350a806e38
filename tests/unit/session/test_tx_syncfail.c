/* The transcript writer when fdatasync fails (issue 15, RELIABILITY F4):
 * EIO from a sync, which no small filesystem the suite can make will
 * produce, comes from the library's sync seam (set here, never read from
 * the environment). A failed sync is never taken as success: the owner is
 * told, a flush reports the failure, the sync is tried again, and a close
 * while it still fails is a loss that says the records may not be on the
 * disk. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "session/session.h"
#include "test.h"

static int sync_fail;  /* the seam's answer while on */
static int sync_calls; /* fdatasyncs issued */

static int sync_hook(const char *path) {
  (void)path;
  sync_calls++;
  return sync_fail;
}

static int states[8];
static int nstates;
static bool lost_told;
static al_tx_loss_t close_loss; /* what the loss dropped, when told */

static void on_state(al_tx_t *tx, int err, bool lost, void *data) {
  (void)data;
  if (lost) {
    lost_told = true;
    al__tx_loss(tx, &close_loss);
    return;
  }
  if (nstates < 8) {
    states[nstates] = err;
  }
  nstates++;
}

static int flush_err;
static bool flushed;

static void on_flush(al_tx_t *tx, void *data) {
  (void)data;
  flush_err = al__tx_error(tx);
  flushed = true;
}

static bool closed;

static void on_closed(al_tx_t *tx, void *data) {
  (void)tx; /* already freed: only its address */
  (void)data;
  closed = true;
}

static void append(al_tx_t *tx, const char *line) {
  al_blob_t *b = al__blob_new(line, strlen(line));

  ASSERT_NOT_NULL(b);
  ASSERT_EQ(al__tx_append(tx, b, true), 0);
  al__blob_unref(b);
}

static void flush_wait(uv_loop_t *loop, al_tx_t *tx) {
  flushed = false;
  ASSERT_EQ(al__tx_flush(tx, on_flush, NULL), 0);
  while (!flushed) {
    uv_run(loop, UV_RUN_ONCE);
  }
}

static void setup(uv_loop_t *loop, char *dir, char *path, size_t n,
                  al_tx_t **tx) {
  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(path, n, "%s/s.jsonl", dir);
  al__tx_retry_min_ms = 2;
  al__tx_retry_max_ms = 8;
  nstates = 0;
  lost_told = false;
  memset(&close_loss, 0, sizeof(close_loss));
  closed = false;
  sync_calls = 0;
  ASSERT_EQ(uv_loop_init(loop), 0);
  ASSERT_EQ(al__tx_open(loop, path, 1 << 20, tx), 0);
  al__tx_set_state_cb(*tx, on_state, NULL);
  al__tx_sync_fault = sync_hook;
}

static void teardown(uv_loop_t *loop, const char *dir, const char *path) {
  ASSERT_LOOP_CLOSES(loop);
  al__tx_sync_fault = NULL;
  unlink(path);
  rmdir(dir);
}

/* EIO from the sync of a history commit: failing, then good again. */
TEST_IMPL(transcript_writer_fdatasync_eio_retried) {
  uv_loop_t loop;
  al_tx_t *tx;
  char dir[] = "/var/tmp/al-txsync-XXXXXX";
  char path[128];
  char *got;
  size_t n;

  setup(&loop, dir, path, sizeof(path), &tx);
  sync_fail = UV_EIO;
  append(tx, "{\"n\":1}\n");
  flush_wait(&loop, tx);
  /* The write went through, its sync did not: not durable, and said. */
  ASSERT_EQ(flush_err, UV_EIO);
  ASSERT(sync_calls >= 1);
  ASSERT(nstates >= 1);
  ASSERT_EQ(states[0], UV_EIO);
  ASSERT(!al__tx_lost(tx));
  /* The disk recovers: the sync is made again, the owner is told. */
  sync_fail = 0;
  while (nstates < 2) {
    uv_run(&loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(states[1], 0);
  flush_wait(&loop, tx);
  ASSERT_EQ(flush_err, 0);
  al__tx_close(tx, on_closed, NULL);
  while (!closed) {
    uv_run(&loop, UV_RUN_ONCE);
  }
  ASSERT(!lost_told);
  ASSERT(!close_loss.unsynced);
  got = al_test_read_file(path, &n);
  ASSERT_NOT_NULL(got);
  ASSERT_MEM_EQ(got, n, "{\"n\":1}\n", 8);
  free(got);
  teardown(&loop, dir, path);
  return 0;
}

/* Closed while the sync still fails: a loss, flagged unsynced (what was
 * written may not be on the disk), with the errno. */
TEST_IMPL(transcript_writer_fdatasync_eio_at_close_is_loss) {
  uv_loop_t loop;
  al_tx_t *tx;
  char dir[] = "/var/tmp/al-txsync-XXXXXX";
  char path[128];

  setup(&loop, dir, path, sizeof(path), &tx);
  sync_fail = UV_EIO;
  append(tx, "{\"n\":1}\n");
  append(tx, "{\"n\":2}\n");
  flush_wait(&loop, tx);
  ASSERT_EQ(flush_err, UV_EIO);
  al__tx_close(tx, on_closed, NULL);
  while (!closed) {
    uv_run(&loop, UV_RUN_ONCE);
  }
  ASSERT(lost_told);
  ASSERT(close_loss.unsynced);
  ASSERT_EQ(close_loss.err, UV_EIO);
  teardown(&loop, dir, path);
  return 0;
}
