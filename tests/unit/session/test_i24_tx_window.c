/* A gated transcript writer's window (al__tx_set_gate, fleet mode's
 * fence): a write issued under the gate's yes and not made within the
 * window is not made late; the gate is asked again. The threadpool is held
 * busy (every thread waits on a semaphore) so the write waits in its queue
 * past the window, as it does in a process stopped (SIGSTOP) or starved
 * between the gate's yes and the write(2). */
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "session/session.h"
#include "test.h"

typedef struct {
  bool yes;
  int asked;
} win_gate_t;

static bool win_gate(void *data) {
  win_gate_t *g = data;

  g->asked++;
  return g->yes;
}

static uv_sem_t win_hold;

static void win_block(uv_work_t *w) {
  (void)w;
  uv_sem_wait(&win_hold);
}

static void win_unblocked(uv_work_t *w, int status) {
  (void)w;
  (void)status;
}

static void win_flushed(al_tx_t *tx, void *data) {
  (void)tx;
  *(bool *)data = true;
}

static void win_closed(al_tx_t *tx, void *data) {
  (void)tx;
  *(bool *)data = true;
}

static void win_append(al_tx_t *tx, const char *line) {
  al_blob_t *b = al__blob_new(line, strlen(line));

  ASSERT_NOT_NULL(b);
  ASSERT_EQ(al__tx_append(tx, b, false), 0);
  al__blob_unref(b);
}

static void win_flush(uv_loop_t *loop, al_tx_t *tx) {
  bool done = false;

  ASSERT_EQ(al__tx_flush(tx, win_flushed, &done), 0);
  while (!done) {
    ASSERT(uv_run(loop, UV_RUN_ONCE) != 0 || done);
  }
}

/* The second record's write waits in the pool past its 1 ms window; then
 * the gate says `renewed`. Returns the file's text. */
static char *win_run(bool renewed) {
  char dir[64], path[128];
  uv_loop_t loop;
  al_tx_t *tx;
  win_gate_t g = {true, 0};
  const char *env = getenv("UV_THREADPOOL_SIZE");
  int threads = env != NULL && atoi(env) > 0 ? atoi(env) : 4, i;
  uv_work_t *blockers = calloc((size_t)threads, sizeof(*blockers));
  uint64_t t;
  bool closed = false;
  char *text;

  ASSERT_NOT_NULL(blockers);
  snprintf(dir, sizeof(dir), "/tmp/al-txwin-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/s.jsonl", dir);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(al__tx_open(&loop, path, 1 << 20, &tx), 0);
  al__tx_set_no_lock(tx);
  al__tx_set_gate(tx, win_gate, &g, 1);
  win_append(tx, "one\n");
  win_flush(&loop, tx);
  /* Every pool thread busy: the next write waits in the queue. */
  ASSERT_EQ(uv_sem_init(&win_hold, 0), 0);
  for (i = 0; i < threads; i++) {
    ASSERT_EQ(uv_queue_work(&loop, &blockers[i], win_block, win_unblocked), 0);
  }
  win_append(tx, "two\n");
  ASSERT(g.asked >= 2);
  /* Past the window while it waits (the pool cannot take it). */
  t = uv_hrtime();
  while (uv_hrtime() < t + 3000000u) {
  }
  g.yes = renewed;
  for (i = 0; i < threads; i++) {
    uv_sem_post(&win_hold);
  }
  win_flush(&loop, tx);
  al__tx_close(tx, win_closed, &closed);
  while (!closed) {
    ASSERT(uv_run(&loop, UV_RUN_ONCE) != 0 || closed);
  }
  ASSERT_LOOP_CLOSES(&loop);
  uv_sem_destroy(&win_hold);
  free(blockers);
  text = al_test_read_file(path, NULL);
  ASSERT_NOT_NULL(text);
  (void)al_test_rm_tree(dir);
  return text;
}

TEST_IMPL(i24_tx_window_late_write_not_made) {
  char *text = win_run(false);

  /* The lease ran out while the write waited: never written. */
  ASSERT_STR_EQ(text, "one\n");
  free(text);
  return 0;
}

TEST_IMPL(i24_tx_window_renewed_write_made) {
  char *text = win_run(true);

  /* Renewed meanwhile: the gate says yes again and the write is made. */
  ASSERT_STR_EQ(text, "one\ntwo\n");
  free(text);
  return 0;
}
