/* Found by the cancel3 tests: turn/cancel while a child's bash was in
 * its sandbox's start left bwrap's inner half (a PID namespace's init,
 * which a TERM does not reach) alive, holding the pipes, until the drain's
 * KILL 500 ms later (the child's result waited as long). The same shape
 * without a sandbox: the leader ends on the TERM, a group member that
 * ignores TERM holds the pipes. A kill must end it at once once the
 * leader is gone, not after the drain or the grace (both made long
 * here, so only that path can end the run in time). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "test.h"
#include "tools/spawn.h"

typedef struct {
  bool killed, done;
  int status;
  int member; /* the TERM-ignoring member's pid */
  uint64_t t_kill, t_done;
  char out[256];
  size_t olen;
} sk_t;

static void sk_output(al_spawn_t *sp, int stream, const char *p, size_t n) {
  sk_t *k = sp->data;
  const char *r;

  if (stream != 0 || k->killed) {
    return;
  }
  if (n > sizeof(k->out) - 1 - k->olen) {
    n = sizeof(k->out) - 1 - k->olen;
  }
  memcpy(k->out + k->olen, p, n);
  k->olen += n;
  k->out[k->olen] = '\0';
  if ((r = strstr(k->out, "ready ")) != NULL && strchr(r, '\n') != NULL) {
    k->member = atoi(r + 6);
    k->killed = true;
    k->t_kill = uv_hrtime();
    al__spawn_kill(sp);
  }
}

static void sk_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  sk_t *k = sp->data;

  k->done = true;
  k->status = res->status;
  k->t_done = uv_hrtime();
}

static void sk_bound(uv_timer_t *t) {
  (void)t;
  AL_TEST_FAIL(
      "the killed run did not end 5 s after the kill (the group's "
      "TERM-ignoring member waited for the drain or the grace)");
}

/* Whether pid is still a live process (not gone, not a zombie); its stat
 * line in st. */
static bool member_alive(int pid, char *st, size_t n) {
  char path[64];
  const char *s = NULL;
  FILE *f;

  st[0] = '\0';
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  f = fopen(path, "r");
  if (f != NULL) {
    size_t got = fread(st, 1, n - 1, f);

    fclose(f);
    st[got] = '\0';
    s = strrchr(st, ')');
  }
  return s != NULL && s[1] != '\0' && s[2] != 'Z' && s[2] != 'X';
}

typedef struct {
  uv_timer_t t;
  int pid;
  int left;
  int polls;
  bool done;
} member_poll_t;

static void member_poll(uv_timer_t *t) {
  member_poll_t *mp = t->data;
  char st[256];

  mp->polls++;
  if (!member_alive(mp->pid, st, sizeof(st)) || --mp->left <= 0) {
    mp->done = true;
    uv_timer_stop(t);
  }
}

TEST_IMPL(i23_spawn_kill_ends_group_once_leader_gone) {
  uv_loop_t loop;
  uv_timer_t bound;
  al_spawn_options_t o;
  al_spawn_t *sp;
  sk_t k;
  char cwd[] = "/tmp";
  /* The member ignores TERM (inherited by its exec), says its pid, then
   * sleeps with the pipes; the leader sleeps and ends on the TERM. */
  const char *argv[] = {
      "/bin/sh", "-c",
      "(trap '' TERM; exec /bin/sh -c 'echo ready $$; exec sleep 30') & "
      "exec sleep 30",
      NULL};

  al_test_timeout_s(30); /* the bound below says why it failed first */
  memset(&k, 0, sizeof(k));
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al__spawn_options_init(&o);
  o.argv = argv;
  o.cwd = cwd;
  o.kill_grace_ms = 60000;
  o.drain_ms = 60000;
  o.on_done = sk_done;
  o.on_output = sk_output;
  o.data = &k;
  ASSERT_EQ(al__spawn_start(&loop, &o, &sp), 0);
  ASSERT_EQ(uv_timer_init(&loop, &bound), 0);
  while (!k.done) {
    if (k.killed && !uv_is_active((uv_handle_t *)&bound)) {
      uv_timer_start(&bound, sk_bound,
                     5000 * (uint64_t)al_test_timeout_multiplier(), 0);
    }
    uv_run(&loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&bound, NULL);
  printf("killed run done %.1f ms after the kill\n",
         (double)(k.t_done - k.t_kill) / 1e6);
  ASSERT_EQ(k.status, AL_ECANCELED);
  ASSERT(k.member > 0);
  /* Gone (reaped by init or a zombie at most). The KILL was sent when
   * the leader was reaped; a loaded machine may take a moment to schedule
   * the member's exit, so its state is polled, bounded. */
  {
    char st[256];
    member_poll_t mp;

    memset(&mp, 0, sizeof(mp));
    mp.pid = k.member;
    mp.left = 2000 * al_test_timeout_multiplier(); /* ms */
    ASSERT_EQ(uv_timer_init(&loop, &mp.t), 0);
    mp.t.data = &mp;
    uv_timer_start(&mp.t, member_poll, 0, 1);
    while (!mp.done) {
      uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&mp.t, NULL);
    if (member_alive(k.member, st, sizeof(st))) {
      (void)kill(k.member, SIGKILL);
      AL_TEST_FAIL("the member %d is alive 2 s after the run ended: %s",
                   k.member, st);
    }
    printf("member gone %.1f ms after the run ended\n", mp.polls * 1.0);
  }
  ASSERT_LOOP_CLOSES(&loop);
  return 0;
}
