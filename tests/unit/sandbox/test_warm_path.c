/* The warm path's second wave (issue 17, s19): a stdin pipe passed
 * through the hand-off, the cold start planned off the loop
 * (async_start), and a loop that never waits on the sandbox lock. Runs in
 * bwrap mode through the sandbox fixture (sbx.h), with the spawn wrapper
 * called directly so each result carries its pid and start error. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/pool.h"
#include "test.h"
#include "tools/spawn.h"
#include "tools/tools.h"
#include "unit/sandbox/sbx.h"

typedef struct run_s {
  int done;
  int status;
  int pid;
  int start_error;
  int64_t exit_status;
  char out[8192];
  char text[1024]; /* the result as the model would see it */
} run_t;

static void run_done(al_spawn_t *sp, const al_spawn_result_t *r) {
  run_t *w = sp->data;
  al_buf_t b;
  bool is_error = false;

  w->done++;
  w->status = r->status;
  w->pid = r->pid;
  w->start_error = r->start_error;
  w->exit_status = r->exit_status;
  snprintf(w->out, sizeof(w->out), "%.*s%.*s", (int)r->out_len, r->out,
           (int)r->err_len, r->err);
  al_buf_init(&b, (size_t)-1);
  al__tool_format_spawn(r, "bash", 4096, 1000, &b, &is_error);
  snprintf(w->text, sizeof(w->text), "%s", b.data != NULL ? b.data : "");
  al_buf_free(&b);
}

static void opts_for(sbx_t *x, al_spawn_options_t *o, const char **argv,
                     run_t *w) {
  memset(w, 0, sizeof(*w));
  al__spawn_options_init(o);
  o->argv = argv;
  o->cwd = x->ws;
  o->on_done = run_done;
  o->data = w;
  o->sandbox = x->sb;
  o->kill_grace_ms = 100;
  o->drain_ms = 200;
  o->async_start = true; /* as the bash and tools.d tools start */
}

static void run_wait(sbx_t *x, run_t *w) {
  while (w->done == 0) {
    uv_run(&x->loop, UV_RUN_ONCE);
  }
}

static al_pool_stats_t stats(sbx_t *x) {
  al_pool_stats_t st;

  ASSERT(al__pool_stats(x->sb, &st));
  return st;
}

static bool exists(const char *p) {
  struct stat st;

  return lstat(p, &st) == 0;
}

static bool gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

static void no_placeholders(sbx_t *x) {
  char p[512];

  snprintf(p, sizeof(p), "%s/tools.d", x->ws);
  ASSERT(!exists(p));
  snprintf(p, sizeof(p), "%s/.agentloop", x->ws);
  ASSERT(!exists(p));
}

/* A command that reads stdin (a hook's JSON, an MCP server's requests)
 * starts warm too: the pipe goes through the hand-off. */
TEST_IMPL(warm_stdin_pipe_through_handoff) {
  const char *argv[] = {"/bin/sh", "-c", "read line; echo \"got:$line\"",
                        NULL};
  static const char msg[] = "hello through the hand-off\n";
  uv_write_t wr;
  uv_buf_t buf;
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  int p1;
  uint64_t served;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  p1 = stats(&x).idle_pids[0];
  served = stats(&x).served;
  opts_for(&x, &o, argv, &r);
  o.stdin_pipe = true;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT_EQ(stats(&x).served, served + 1);
  ASSERT_NOT_NULL(al__spawn_stdin(sp));
  buf = uv_buf_init((char *)msg, sizeof(msg) - 1);
  ASSERT_EQ(uv_write(&wr, al__spawn_stdin(sp), &buf, 1, NULL), 0);
  al__spawn_close_stdin(sp);
  run_wait(&x, &r);
  ASSERT_EQ(r.pid, p1); /* it ran in the warm one */
  ASSERT_EQ(r.exit_status, 0);
  ASSERT_STR_EQ(r.out, "got:hello through the hand-off\n");
  sbx_finish(&x);
  return 0;
}

/* Without a pipe asked for, stdin stays /dev/null in a warm sandbox
 * (never the pool's control socket). */
TEST_IMPL(warm_stdin_default_is_devnull) {
  const char *argv[] = {"/bin/sh", "-c", "readlink /proc/self/fd/0", NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  int p1;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  p1 = stats(&x).idle_pids[0];
  opts_for(&x, &o, argv, &r);
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  run_wait(&x, &r);
  ASSERT_EQ(r.pid, p1);
  ASSERT_STR_EQ(r.out, "/dev/null\n");
  sbx_finish(&x);
  return 0;
}

/* A cold bwrap start is planned on the threadpool; a cancel before the
 * plan is back means the command never starts: no pid, no side effect,
 * one on_done with AL_ECANCELED, and the placeholders the plan made are
 * released as for a finished run. */
TEST_IMPL(cold_cancel_during_async_plan_starts_nothing) {
  char cmd[600], marker[400];
  const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;

  sbx_init(&x, SBX_BWRAP);
  snprintf(marker, sizeof(marker), "%s/started", x.ws);
  snprintf(cmd, sizeof(cmd), "touch '%s'; exec sleep 1000", marker);
  opts_for(&x, &o, argv, &r);
  /* The lock held (as by a clean-up): the start is cold, and its plan
   * cannot finish before the cancel. */
  al__sandbox_test_hold(x.sb, true);
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT(sp->planning); /* nothing of bwrap's argv was built on the loop */
  al__spawn_kill(sp);
  al__sandbox_test_hold(x.sb, false);
  run_wait(&x, &r);
  ASSERT_EQ(r.status, AL_ECANCELED);
  ASSERT_EQ(r.pid, 0);
  ASSERT_EQ(r.start_error, 0);
  ASSERT_STR_EQ(r.text, "Error: command cancelled");
  /* Nothing more fires, and nothing ran. */
  while (uv_run(&x.loop, UV_RUN_NOWAIT) != 0 && r.done == 1) {
    if (exists(marker)) {
      break;
    }
  }
  ASSERT_EQ(r.done, 1);
  ASSERT(!exists(marker));
  no_placeholders(&x);
  sbx_finish(&x);
  return 0;
}

/* An asynchronous cold start runs the command once planned, and one that
 * cannot start reports what a synchronous start would have returned. */
TEST_IMPL(cold_async_start_runs_and_fails_as_sync) {
  char missing[400];
  const char *argv[] = {"/bin/sh", "-c", "echo cold-ok", NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  int sync_rc;
  char want[512];

  sbx_init(&x, SBX_BWRAP);
  /* It runs, from the loop, once planned (cold: the network flag has no
   * warm sandbox yet). */
  opts_for(&x, &o, argv, &r);
  o.network = true;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT(sp->planning);
  run_wait(&x, &r);
  ASSERT_EQ(r.status, 0);
  ASSERT(r.pid > 0);
  ASSERT_STR_EQ(r.out, "cold-ok\n");
  /* A start that fails: the error a synchronous start returns for a
   * working directory that does not exist (no sandbox there: the same
   * posix_spawn/uv_spawn chdir), in the same words. */
  snprintf(missing, sizeof(missing), "%s/no-such-dir", x.ws);
  opts_for(&x, &o, argv, &r);
  o.cwd = missing;
  o.sandbox = NULL;
  sync_rc = al__spawn_start(&x.loop, &o, &sp);
  ASSERT_EQ(sync_rc, UV_ENOENT);
  opts_for(&x, &o, argv, &r);
  o.cwd = missing;
  al__sandbox_test_hold(x.sb, true); /* cold, whatever the pool holds */
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT(sp->planning);
  al__sandbox_test_hold(x.sb, false);
  run_wait(&x, &r);
  ASSERT_EQ(r.done, 1);
  ASSERT_EQ(r.start_error, sync_rc);
  ASSERT_EQ(r.status, sync_rc);
  ASSERT_EQ(r.pid, 0);
  snprintf(want, sizeof(want), "Error: could not start /bin/sh: %s",
           al_strerror(sync_rc));
  ASSERT_STR_EQ(r.text, want);
  no_placeholders(&x);
  sbx_finish(&x);
  return 0;
}

/* A clean-up on the threadpool holds the sandbox lock (here: the test
 * does). The loop must never wait for it: a warm start then starts cold
 * (its plan waits on the threadpool), and a run that ends hands its
 * release to the threadpool. If either waited on the loop thread, this
 * test would deadlock (the lock's holder is this same thread). */
TEST_IMPL(loop_never_waits_on_sandbox_lock) {
  const char *echo[] = {"/bin/sh", "-c", "echo lock-ok", NULL};
  const char *slp[] = {"/bin/sh", "-c", "exec sleep 1000", NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  char p[512];
  uint64_t served;
  int i;

  sbx_init(&x, SBX_BWRAP);
  /* A workspace without .git: the one placeholder a sandbox still makes
   * there (tools.d/ and .agentloop/ get none). */
  snprintf(p, sizeof(p), "rm -rf '%s/.git'", x.ws);
  ASSERT_EQ(system(p), 0);
  sbx_wait_warm(&x);
  served = stats(&x).served;
  al__sandbox_test_hold(x.sb, true);
  opts_for(&x, &o, echo, &r);
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT_EQ(stats(&x).served, served); /* not warm: the claim was busy */
  ASSERT(sp->planning);
  for (i = 0; i < 20; i++) {
    uv_run(&x.loop, UV_RUN_NOWAIT);
  }
  ASSERT_EQ(r.done, 0); /* its plan waits for the lock, off the loop */
  al__sandbox_test_hold(x.sb, false);
  run_wait(&x, &r);
  ASSERT_STR_EQ(r.out, "lock-ok\n");

  /* The release of a run that ends while the lock is held. */
  sbx_wait_warm(&x);
  opts_for(&x, &o, slp, &r);
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT_EQ(stats(&x).served, served + 1);
  snprintf(p, sizeof(p), "%s/.git", x.ws);
  while (!exists(p)) { /* its helper makes the placeholder */
    uv_run(&x.loop, UV_RUN_NOWAIT);
  }
  i = sp->pid;
  al__sandbox_test_hold(x.sb, true);
  al__spawn_kill(sp);
  /* Until the run is over and every handle of it closed: its release
   * then comes (with the lock held, it must not wait on this thread). */
  while (!sp->finished || sp->pending_closes > 0) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  ASSERT(gone(i));
  for (i = 0; i < 50; i++) {
    uv_run(&x.loop, UV_RUN_NOWAIT);
  }
  /* Its result waits for the placeholders' removal, which waits for the
   * lock; the loop kept running. */
  ASSERT_EQ(r.done, 0);
  ASSERT(exists(p));
  al__sandbox_test_hold(x.sb, false);
  run_wait(&x, &r);
  ASSERT_EQ(r.status, AL_ECANCELED);
  no_placeholders(&x);
  sbx_finish(&x);
  return 0;
}

/* The clean-up of our own placeholders after each command (their
 * directories removed, watches on them gone) is no change to the plan:
 * command after command starts warm without the protected paths being
 * planned again and without a warm sandbox being retired. */
TEST_IMPL(pool_own_cleanup_keeps_plan) {
  const char *argv[] = {"/bin/sh", "-c", "echo again", NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  uint64_t replans, retired, served;
  int i;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  replans = stats(&x).replans;
  retired = stats(&x).retired;
  served = stats(&x).served;
  for (i = 0; i < 4; i++) {
    opts_for(&x, &o, argv, &r);
    ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
    run_wait(&x, &r);
    ASSERT_STR_EQ(r.out, "again\n");
    no_placeholders(&x); /* removed before the result was delivered */
    sbx_wait_warm(&x);   /* drains what the removal queued */
  }
  ASSERT_EQ(stats(&x).served, served + 4);
  ASSERT_EQ(stats(&x).replans, replans);
  ASSERT_EQ(stats(&x).retired, retired);
  sbx_finish(&x);
  return 0;
}

/* The timeout counts from the call, the plan included: a run whose
 * timeout fires while its plan waits (here: on the lock) never starts. */
TEST_IMPL(cold_timeout_during_async_plan_starts_nothing) {
  char cmd[600], marker[400];
  const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;

  sbx_init(&x, SBX_BWRAP);
  snprintf(marker, sizeof(marker), "%s/started", x.ws);
  snprintf(cmd, sizeof(cmd), "touch '%s'; exec sleep 1000", marker);
  opts_for(&x, &o, argv, &r);
  o.timeout_ms = 1;
  al__sandbox_test_hold(x.sb, true);
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT(sp->planning);
  while (!sp->killing) { /* the timeout fires; the plan still waits */
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  ASSERT(sp->planning);
  al__sandbox_test_hold(x.sb, false);
  run_wait(&x, &r);
  ASSERT_EQ(r.status, AL_ETIMEDOUT);
  ASSERT_EQ(r.pid, 0);
  ASSERT(!exists(marker));
  no_placeholders(&x);
  sbx_finish(&x);
  return 0;
}

/* The janitor's lock (held while a clean-up tells it of removals) is only
 * tried by the loop too: with it held, a start goes cold and the loop
 * runs on; the command runs once the lock is free. Were it waited for on
 * the loop thread, this test would deadlock. */
TEST_IMPL(loop_never_waits_on_janitor_lock) {
  const char *echo[] = {"/bin/sh", "-c", "echo janitor-ok", NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  uint64_t served;
  int i;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  served = stats(&x).served;
  al__sandbox_test_hold_janitor(true);
  opts_for(&x, &o, echo, &r);
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT_EQ(stats(&x).served, served);
  ASSERT(sp->planning);
  for (i = 0; i < 20; i++) {
    uv_run(&x.loop, UV_RUN_NOWAIT);
  }
  ASSERT_EQ(r.done, 0);
  al__sandbox_test_hold_janitor(false);
  run_wait(&x, &r);
  ASSERT_STR_EQ(r.out, "janitor-ok\n");
  no_placeholders(&x);
  sbx_finish(&x);
  return 0;
}

/* stdin_text reaches the child whichever way it starts: not confined
 * (synchronous), a cold sandbox planned on the threadpool (the child does
 * not exist yet when al__spawn_start returns: the hooks' case), and a warm
 * hand-off; then EOF, so a reader to the end finishes. */
TEST_IMPL(spawn_stdin_text_every_start) {
  const char *cat[] = {"/bin/sh", "-c", "cat; echo END", NULL};
  static const char text[] = "{\"event\":\"pre_tool_use\"}\n";
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;
  int way;

  sbx_init(&x, SBX_BWRAP);
  sbx_wait_warm(&x);
  for (way = 0; way < 3; way++) {
    opts_for(&x, &o, cat, &r);
    o.stdin_text = text;
    o.stdin_len = strlen(text);
    if (way == 0) {
      o.sandbox = NULL;
    } else if (way == 1) {
      o.network = true; /* no warm sandbox for it: planned cold */
    }
    ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
    if (way == 1) {
      ASSERT(sp->planning);
    }
    run_wait(&x, &r);
    ASSERT_EQ(r.status, 0);
    if (strcmp(r.out, "{\"event\":\"pre_tool_use\"}\nEND\n") != 0) {
      AL_TEST_FAIL("start %d: got '%s'", way, r.out);
    }
  }
  sbx_finish(&x);
  return 0;
}

/* al__spawn_write before the child exists (an MCP server's initialize
 * request right after an asynchronous start): the lines wait and reach
 * the child first, in order; later ones go straight through. */
TEST_IMPL(spawn_write_before_child_exists) {
  const char *cat[] = {"/bin/sh", "-c", "head -n 3", NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;
  sbx_t x;
  run_t r;

  sbx_init(&x, SBX_BWRAP);
  opts_for(&x, &o, cat, &r);
  o.network = true; /* no warm sandbox for it: planned cold */
  o.stdin_pipe = true;
  ASSERT_EQ(al__spawn_start(&x.loop, &o, &sp), 0);
  ASSERT(sp->planning);
  ASSERT_EQ(al__spawn_write(sp, al_strdup("one\n"), 4), 0);
  ASSERT_EQ(al__spawn_write(sp, al_strdup("two\n"), 4), 0);
  while (sp->planning) {
    uv_run(&x.loop, UV_RUN_ONCE);
  }
  ASSERT_EQ(al__spawn_write(sp, al_strdup("three\n"), 6), 0);
  run_wait(&x, &r);
  ASSERT_EQ(r.status, 0);
  ASSERT_STR_EQ(r.out, "one\ntwo\nthree\n");
  sbx_finish(&x);
  return 0;
}
