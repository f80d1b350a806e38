/* issue 24, the fleet worker end to end (src/fleet/worker.c,
 * docs/fleet.md "The worker"): real agentloopd processes with --queue on a
 * real redis-server (tests/redis_server.h), an in-process
 * agentloop-mockllm, short leases. Nothing sleeps for timing: every wait
 * is for a condition (a request recorded by the mock, a key in Redis, a
 * line on a worker's stderr, a process exit), checked on a short poll,
 * with a deadline sized for a loaded 2-core machine. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "session/session.h"
#include "test.h"
#include "unit/fleet/fleet_fx.h"

/* SLOW's first reply lists the workspace (a committed turn); its second
 * request gets headers and then nothing (the worker is killed or stopped
 * there); its third, from the next owner, resumes the session. */
static const char k_slow[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'SLOW-JOB'}\n"
    "    responses:\n"
    "      - reply: {content: [{tool_use: {id: t1, name: list_directory, "
    "input: {path: '.'}}}]}\n"
    "      - fault: {stall_after_headers: true}\n"
    "      - expect_request: {contains: 'was interrupted'}\n"
    "        reply: {content: [{text: 'slow answer'}]}\n";

/* ---- F1 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_sigkill_mid_stream_taken_over) {
  fw_t fx;
  fw_saw_t stalled = {0, 1};
  char owner[32];
  fw_proc_t *victim, *other;
  json_t *r;

  al_test_timeout_s(60);
  fw_init(&fx, k_slow);
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_submit(&fx, "s1", "SLOW-JOB");
  fw_submit(&fx, "f1", "first");
  fw_wait_for(&fx, fw_p_saw, &stalled, 20000, "the slow job's stalled request");
  ASSERT(fw_owner_of(&fx, "s1", owner, sizeof(owner)));
  victim = fw_worker_named(&fx, owner);
  ASSERT_NOT_NULL(victim);
  other = victim == &fx.w[0] ? &fx.w[1] : &fx.w[0];
  ASSERT_EQ(uv_process_kill(&victim->proc, SIGKILL), 0);
  fw_wait_for(&fx, fw_p_exited, victim, 10000, "the victim's exit");
  /* The other takes it over within a lease and a reap interval (the
   * deadline is wider for a loaded machine). */
  fw_wait_for(&fx, fw_p_result, "s1", 20000, "s1's result");
  fw_wait_for(&fx, fw_p_result, "f1", 20000, "f1's result");
  r = fw_result_of(&fx, "s1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "slow answer");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), other->name);
  ASSERT(json_integer_value(json_object_get(r, "deliveries")) >= 2);
  json_decref(r);
  ASSERT_EQ(fw_results_for(&fx, "s1"), 1);
  ASSERT_EQ(fw_results_for(&fx, "f1"), 1);
  ASSERT(fw_mock_saw(&fx, 0, 2));
  fw_assert_chain(&fx, "s1");
  ASSERT_EQ(fw_pending_count(&fx), 0);
  fw_finish(&fx);
  return 0;
}

/* ---- F2 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_sigkill_after_final_before_ack) {
  static const char *const stop[] = {
      "AGENTLOOP_TEST_FLEET_STOP_BEFORE_COMPLETE=1", NULL};
  fw_t fx;
  fw_proc_t *first;
  json_t *r;

  al_test_timeout_s(60);
  fw_init(&fx, k_slow);
  first = fw_spawn_worker(&fx, 1, NULL, stop);
  fw_submit(&fx, "f1", "first");
  /* It dies by its own SIGKILL once the final record is durable, before
   * the completion. */
  fw_wait_for(&fx, fw_p_exited, first, 20000, "the first worker's death");
  ASSERT_EQ(first->sig, SIGKILL);
  ASSERT(!fw_key_exists(&fx, "result", "f1"));
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 1);
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_wait_for(&fx, fw_p_result, "f1", 20000, "f1's result");
  r = fw_result_of(&fx, "f1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "fast answer");
  ASSERT(json_is_true(json_object_get(r, "recovered")));
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w1");
  json_decref(r);
  /* No model request from the next owner: the transcript had the answer. */
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 1);
  ASSERT_EQ(fw_results_for(&fx, "f1"), 1);
  fw_assert_chain(&fx, "f1");
  ASSERT_EQ(fw_pending_count(&fx), 0);
  fw_finish(&fx);
  return 0;
}

/* ---- F3 --------------------------------------------------------------------
 */

TEST_IMPL(fleet_sigstop_past_lease_writes_nothing) {
  fw_t fx;
  fw_saw_t stalled = {0, 1};
  fw_proc_t *first;
  char path[256];
  char *before, *after;
  size_t blen, alen;
  json_t *r;

  al_test_timeout_s(60);
  fw_init(&fx, k_slow);
  first = fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_submit(&fx, "s1", "SLOW-JOB");
  fw_wait_for(&fx, fw_p_saw, &stalled, 20000, "the slow job's stalled request");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGSTOP), 0);
  /* Another worker takes it over once the lease has run out, resumes it
   * and finishes it. */
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_wait_for(&fx, fw_p_result, "s1", 20000, "s1's result from the second");
  snprintf(path, sizeof(path), "%s/sessions/s1.jsonl", fx.root);
  before = al_test_read_file(path, &blen);
  ASSERT_NOT_NULL(before);
  /* The first wakes far past its lease: it must stop without writing. */
  ASSERT_EQ(uv_process_kill(&first->proc, SIGCONT), 0);
  fw_wait_stderr(&fx, "w0", "job s1 fenced", 20000);
  after = al_test_read_file(path, &alen);
  ASSERT_NOT_NULL(after);
  if (alen != blen || memcmp(before, after, blen) != 0) {
    AL_TEST_FAIL(
        "the fenced worker wrote to the transcript (%zu bytes, "
        "then %zu):\n%s\n--- w0:\n%s",
        blen, alen, after + (alen > blen ? blen : 0), first->ebuf);
  }
  free(before);
  free(after);
  r = fw_result_of(&fx, "s1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "slow answer");
  json_decref(r);
  ASSERT_EQ(fw_results_for(&fx, "s1"), 1);
  fw_assert_chain(&fx, "s1");
  fw_finish(&fx);
  return 0;
}

/* ---- F5 --------------------------------------------------------------------
 */

/* Every request of CRASH-JOB stalls; the test SIGKILLs the worker that
 * sent it (the job's owner) and starts another in its place. */
static const char k_crash[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'CRASH-JOB'}\n"
    "    responses:\n"
    "      - fault: {stall_after_headers: true}\n";

typedef struct {
  size_t seen; /* crash-job requests handled */
  int kills;
} crasher_t;

static bool p_crash_loop(fw_t *fx, void *arg) {
  crasher_t *c = arg;
  size_t i, n = al_mockllm_record_count(fx->mock), mine = 0;

  for (i = 0; i < n; i++) {
    if (al_mockllm_record_get(fx->mock, i)->track == 0) {
      mine++;
    }
  }
  if (mine > c->seen) {
    char owner[32];
    fw_proc_t *p;

    c->seen = mine;
    ASSERT(fw_owner_of(fx, "c1", owner, sizeof(owner)));
    p = fw_worker_named(fx, owner);
    ASSERT_NOT_NULL(p);
    ASSERT(p->running);
    ASSERT_EQ(uv_process_kill(&p->proc, SIGKILL), 0);
    c->kills++;
    fw_spawn_worker(fx, 1, NULL, NULL);
  }
  return fw_key_exists(fx, "result", "c1") &&
         fw_key_exists(fx, "result", "f1") && fw_key_exists(fx, "result", "f2");
}

TEST_IMPL(fleet_crashing_job_dead_lettered) {
  fw_t fx;
  crasher_t c = {0, 0};
  json_t *r;
  const char *xlen[] = {"XLEN", "t:dead"};
  char *v;

  al_test_timeout_s(90);
  fw_init(&fx, k_crash);
  /* One slot each: a kill takes the crashing job alone, never another job
   * with it (which would be redelivered, and dead-lettered in turn when
   * it shared a killed worker three times). */
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_submit(&fx, "c1", "CRASH-JOB");
  fw_submit(&fx, "f1", "first");
  fw_submit(&fx, "f2", "second");
  fw_wait_for(&fx, p_crash_loop, &c, 60000, "the crashing job's dead letter");
  /* Delivered 3 times, a worker killed each time; the 4th reap
   * dead-letters it. */
  ASSERT_EQ(c.kills, 3);
  r = fw_result_of(&fx, "c1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")),
                "dead_letter");
  ASSERT_EQ(json_integer_value(json_object_get(r, "deliveries")), 4);
  ASSERT_NOT_NULL(
      strstr(json_string_value(json_object_get(r, "error")), "taken over"));
  json_decref(r);
  v = fw_rcmd(&fx, 2, xlen);
  if (strcmp(v, "1") != 0) {
    AL_TEST_FAIL("%s dead letters, not 1", v);
  }
  free(v);
  r = fw_result_of(&fx, "f1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
  json_decref(r);
  ASSERT_EQ(fw_results_for(&fx, "c1"), 1);
  ASSERT_EQ(fw_results_for(&fx, "f1"), 1);
  ASSERT_EQ(fw_results_for(&fx, "f2"), 1);
  ASSERT_EQ(fw_pending_count(&fx), 0);
  fw_finish(&fx);
  return 0;
}

/* ---- F7 --------------------------------------------------------------------
 */

/* The sessions directory read-only: a read-only tmpfs in a private mount
 * namespace as root (root writes through mode bits), else mode 0555. */
static bool make_readonly(const char *dir) {
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
      return false;
    }
    return mount("none", dir, "tmpfs", MS_RDONLY, "size=64k,mode=0755") == 0;
  }
  return chmod(dir, 0555) == 0;
}

static bool p_released(fw_t *fx, void *arg) {
  return fw_key_exists(fx, "error", arg) && !fw_key_exists(fx, "owner", arg);
}

TEST_IMPL(fleet_readonly_sessions_dir_not_acked) {
  fw_t fx;
  char dir[256], cmd[600];
  fw_proc_t *w;
  FILE *f;
  char out[4096];
  size_t n;
  char *err;

  al_test_timeout_s(60);
  fw_init(&fx, k_slow);
  snprintf(dir, sizeof(dir), "%s/sessions", fx.root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  if (!make_readonly(dir)) {
    if (al_test_ci()) {
      AL_TEST_FAIL("cannot make %s read-only", dir);
    }
    fprintf(stderr, "cannot make a read-only directory here: not run\n");
    fw_finish(&fx);
    exit(AL_TEST_SKIP_CODE);
  }
  w = fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_submit(&fx, "r1", "first");
  fw_submit(&fx, "r2", "second");
  fw_wait_stderr(&fx, "w0", "stops taking jobs", 20000);
  fw_wait_for(&fx, p_released, "r1", 20000, "r1 handed back with its error");
  /* Not acked, not completed: r1 waits in the pending list for a worker
   * that can write it; r2 was never taken. */
  ASSERT(!fw_key_exists(&fx, "result", "r1"));
  ASSERT(!fw_key_exists(&fx, "result", "r2"));
  ASSERT_EQ(fw_pending_count(&fx), 1);
  err = fw_get_key(&fx, "error", "r1");
  ASSERT_NOT_NULL(strstr(err, "transcript cannot be written"));
  free(err);
  ASSERT(w->running);
  /* And its status says so. */
  snprintf(cmd, sizeof(cmd),
           "AGENTLOOP_SOCKET=%s/rt/w0.sock XDG_RUNTIME_DIR=%s/rt "
           "%s/agentloop daemon status 2>&1",
           fx.root, fx.root, AL_BINARY_DIR);
  f = popen(cmd, "r");
  ASSERT_NOT_NULL(f);
  n = fread(out, 1, sizeof(out) - 1, f);
  out[n] = '\0';
  pclose(f);
  if (strstr(out, "intake stopped") == NULL ||
      strstr(out, "transcript cannot be written") == NULL) {
    AL_TEST_FAIL("agentloop daemon status:\n%s", out);
  }
  fw_finish(&fx);
  return 0;
}

/* ---- SIGTERM ---------------------------------------------------------------
 */

TEST_IMPL(fleet_sigterm_drains) {
  fw_t fx;
  fw_saw_t stalled = {0, 1};
  fw_proc_t *first;
  json_t *r;

  al_test_timeout_s(60);
  fw_init(&fx, k_slow);
  first = fw_spawn_worker(&fx, 1, "300", NULL);
  fw_submit(&fx, "s1", "SLOW-JOB");
  fw_wait_for(&fx, fw_p_saw, &stalled, 20000, "the slow job's stalled request");
  fw_submit(&fx, "f1", "first");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGTERM), 0);
  /* Its job stalls past the grace: handed back, then exit 0. */
  fw_wait_for(&fx, fw_p_exited, first, 20000, "the drained worker's exit");
  ASSERT_EQ(first->sig, 0);
  ASSERT_EQ(first->status, 0);
  ASSERT_NOT_NULL(strstr(first->ebuf, "draining"));
  ASSERT(!fw_key_exists(&fx, "result", "s1"));
  ASSERT(!fw_key_exists(&fx, "owner", "s1"));
  /* s1 pending (handed back, not acked); f1 never taken. */
  ASSERT_EQ(fw_pending_count(&fx), 1);
  ASSERT_EQ(al_mockllm_record_count(fx.mock), 2);
  /* The next worker takes both over at once and finishes them. */
  fw_spawn_worker(&fx, 2, NULL, NULL);
  fw_wait_for(&fx, fw_p_result, "s1", 20000, "s1's result");
  fw_wait_for(&fx, fw_p_result, "f1", 20000, "f1's result");
  r = fw_result_of(&fx, "s1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "slow answer");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "worker")), "w1");
  json_decref(r);
  ASSERT_EQ(fw_results_for(&fx, "s1"), 1);
  ASSERT_EQ(fw_results_for(&fx, "f1"), 1);
  fw_assert_chain(&fx, "s1");
  fw_finish(&fx);
  return 0;
}

/* ---- Redis away ------------------------------------------------------------
 */

TEST_IMPL(fleet_redis_away_pauses_intake) {
  fw_t fx;
  fw_proc_t *w;

  al_test_timeout_s(60);
  fw_init_aof(&fx, k_slow, true);
  w = fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_submit(&fx, "f1", "first");
  fw_wait_for(&fx, fw_p_result, "f1", 20000, "f1's result");
  /* Redis goes away: the worker pauses and keeps trying; it does not
   * exit. Back (AOF: the queue survives), intake resumes. */
  al_test_redis_stop(&fx.redis);
  fw_wait_stderr(&fx, "w0", "redis is away", 20000);
  ASSERT(w->running);
  al_test_redis_restart(&fx.redis);
  fw_wait_stderr(&fx, "w0", "redis is back", 20000);
  fw_submit(&fx, "f2", "second");
  fw_wait_for(&fx, fw_p_result, "f2", 20000, "f2's result");
  ASSERT_EQ(fw_results_for(&fx, "f1"), 1);
  ASSERT_EQ(fw_results_for(&fx, "f2"), 1);
  ASSERT(w->running);
  fw_finish(&fx);
  return 0;
}

/* SIGINT: the same drain with no grace (the worker's grace is 30 s here;
 * the exit comes long before it). */
TEST_IMPL(fleet_sigint_hands_back_at_once) {
  fw_t fx;
  fw_saw_t stalled = {0, 1};
  fw_proc_t *first;

  al_test_timeout_s(60);
  fw_init(&fx, k_slow);
  first = fw_spawn_worker(&fx, 1, "30000", NULL);
  fw_submit(&fx, "s1", "SLOW-JOB");
  fw_wait_for(&fx, fw_p_saw, &stalled, 20000, "the slow job's stalled request");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGINT), 0);
  fw_wait_for(&fx, fw_p_exited, first, 15000, "the interrupted worker's exit");
  ASSERT_EQ(first->sig, 0);
  ASSERT_EQ(first->status, 0);
  ASSERT(!fw_key_exists(&fx, "result", "s1"));
  ASSERT(!fw_key_exists(&fx, "owner", "s1"));
  ASSERT_EQ(fw_pending_count(&fx), 1);
  fw_finish(&fx);
  return 0;
}

/* F3 with a sub-agent: the job's `task` child is mid-stream when its
 * worker is stopped; woken past the lease, neither the session's file nor
 * the child's beside it changes. */
static const char k_child[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'PARENT-JOB'}\n"
    "    responses:\n"
    "      - reply: {content: [{tool_use: {id: k1, name: task, input: "
    "{description: a, prompt: 'CHILD-Q', agent: explore}}}]}\n"
    "      - expect_request: {contains: 'was interrupted'}\n"
    "        reply: {content: [{text: 'parent done'}]}\n"
    "  - match: {first_user_contains: 'CHILD-Q'}\n"
    "    responses:\n"
    "      - reply: {content: [{tool_use: {id: c1, name: list_directory, "
    "input: {path: '.'}}}]}\n"
    "      - fault: {stall_after_headers: true}\n";

TEST_IMPL(fleet_sigstop_child_transcript_untouched) {
  fw_t fx;
  fw_saw_t stalled = {1, 1};
  fw_proc_t *first;
  char dir[256];
  char *before, *after;
  json_t *r;

  al_test_timeout_s(60);
  fw_init(&fx, k_child);
  first = fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_submit(&fx, "p1", "PARENT-JOB");
  fw_wait_for(&fx, fw_p_saw, &stalled, 20000, "the child's stalled request");
  ASSERT_EQ(uv_process_kill(&first->proc, SIGSTOP), 0);
  fw_spawn_worker(&fx, 1, NULL, NULL);
  fw_wait_for(&fx, fw_p_result, "p1", 20000, "p1's result from the second");
  r = fw_result_of(&fx, "p1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")), "parent done");
  json_decref(r);
  snprintf(dir, sizeof(dir), "%s/sessions", fx.root);
  before = al_test_tree_listing(dir);
  ASSERT_NOT_NULL(before);
  ASSERT_EQ(uv_process_kill(&first->proc, SIGCONT), 0);
  fw_wait_stderr(&fx, "w0", "job p1 fenced", 20000);
  after = al_test_tree_listing(dir);
  ASSERT_NOT_NULL(after);
  if (strcmp(before, after) != 0) {
    AL_TEST_FAIL("the fenced worker wrote:\nbefore:\n%s\nafter:\n%s", before,
                 after);
  }
  free(before);
  free(after);
  ASSERT_EQ(fw_results_for(&fx, "p1"), 1);
  fw_finish(&fx);
  return 0;
}
