/* Issue 23's hardest check, end to end: SIGINT to the real `agentloop run`
 * and turn/cancel over agentloopd's socket while THREE children work at
 * once (parallel_writers): one mid-stream, two in a bash `sleep`. Then no
 * tool process is left (found by a tag in its environment or command line,
 * so bwrap, sh, env and sleep all count), every transcript (parent and
 * three children) loads with nothing to repair, and nothing went on
 * asking the model. The time from the signal / the cancel to the last
 * process gone is printed ("quiet after N ms"); the bound asserted is
 * generous, for a loaded 2-core box. The "at a bash start" cases stop
 * everything as soon as a child's bash call started, its sandbox perhaps
 * still starting (where a bwrap ignoring the TERM outlived the cancel by
 * the spawn's 500 ms drain: test_i23_spawn_kill.c). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>

#include "../daemon/dtest.h"
#include "../wire/wire_cli.h"
#include "session/session.h"
#include "test.h"

#define C3_MAXPIDS 32

/* Parent: three task calls at once. Child 1 streams a long text slowly
 * (400 deltas 50 ms apart); children 2 and 3 write a file (the sign they
 * run), then sleep with a tag in their environment. A second parent reply serves the daemon's next
 * turn. */
static void c3_scenario(char *buf, size_t n, const char *tag) {
  snprintf(buf, n,
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - tool_use: {id: k1, name: task, input: {description: "
           "s1, prompt: 'CHILD-1 talk'}}\n"
           "        - tool_use: {id: k2, name: task, input: {description: "
           "s2, prompt: 'CHILD-2 wait'}}\n"
           "        - tool_use: {id: k3, name: task, input: {description: "
           "s3, prompt: 'CHILD-3 wait'}}\n"
           "  - reply: {content: [{text: 'after cancel'}]}\n"
           "tracks:\n"
           "  - match: {first_user_contains: 'CHILD-1'}\n"
           "    responses:\n"
           "      - delay_ms: 50\n"
           "        reply:\n"
           "          content:\n"
           "            - text: 'DRIP-%0400d'\n"
           "              chunks: 400\n"
           "  - match: {first_user_contains: 'CHILD-2'}\n"
           "    responses:\n"
           "      - reply:\n"
           "          content:\n"
           "            - tool_use: {id: c2, name: bash, input: {command: "
           "'echo $$ > p2; exec env AL_C3=%s-2 sleep 30'}}\n"
           "  - match: {first_user_contains: 'CHILD-3'}\n"
           "    responses:\n"
           "      - reply:\n"
           "          content:\n"
           "            - tool_use: {id: c3, name: bash, input: {command: "
           "'echo $$ > p3; exec env AL_C3=%s-3 sleep 30'}}\n",
           0, tag, tag);
}

/* Reads /proc/pid/<what> into buf with NULs turned to spaces (blocking:
 * test code, not the reactor under test). */
static size_t c3_proc_read(const char *pid, const char *what, char *buf,
                           size_t n) {
  char path[64];
  FILE *f;
  size_t k, i;

  snprintf(path, sizeof(path), "/proc/%s/%s", pid, what);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  k = fread(buf, 1, n - 1, f);
  fclose(f);
  for (i = 0; i < k; i++) {
    if (buf[i] == '\0') {
      buf[i] = ' ';
    }
  }
  buf[k] = '\0';
  return k;
}

typedef struct {
  pid_t pids[C3_MAXPIDS];
  size_t n;
  bool sleeping[2]; /* a sleep with tag-2 / tag-3 exists */
} c3_procs_t;

/* Every process whose command line or environment holds "AL_C3=tag-". */
static void c3_scan(const char *tag, c3_procs_t *out) {
  char needle[96], n2[100], n3[100];
  static char buf[65536];
  DIR *d = opendir("/proc");
  struct dirent *e;

  memset(out, 0, sizeof(*out));
  ASSERT_NOT_NULL(d);
  snprintf(needle, sizeof(needle), "AL_C3=%s-", tag);
  snprintf(n2, sizeof(n2), "%s2", needle);
  snprintf(n3, sizeof(n3), "%s3", needle);
  while ((e = readdir(d)) != NULL) {
    bool hit = false;
    char cmd[256];

    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    cmd[0] = '\0';
    if (c3_proc_read(e->d_name, "cmdline", buf, sizeof(buf)) > 0) {
      size_t k = strlen(buf) < sizeof(cmd) - 1 ? strlen(buf) : sizeof(cmd) - 1;

      memcpy(cmd, buf, k);
      cmd[k] = '\0';
      hit = strstr(buf, needle) != NULL;
    }
    if (c3_proc_read(e->d_name, "environ", buf, sizeof(buf)) > 0 &&
        strstr(buf, needle) != NULL) {
      hit = true;
      if (strncmp(cmd, "sleep ", 6) == 0) {
        out->sleeping[0] = out->sleeping[0] || strstr(buf, n2) != NULL;
        out->sleeping[1] = out->sleeping[1] || strstr(buf, n3) != NULL;
      }
    }
    if (hit && out->n < C3_MAXPIDS) {
      out->pids[out->n++] = (pid_t)atoi(e->d_name);
    }
  }
  closedir(d);
}

/* Alive: the process exists and is not a zombie (a zombie has exited). */
static bool c3_alive(pid_t pid) {
  char p[32], buf[512];
  const char *s;

  snprintf(p, sizeof(p), "%d", (int)pid);
  if (c3_proc_read(p, "stat", buf, sizeof(buf)) == 0) {
    return false;
  }
  s = strrchr(buf, ')');
  return s != NULL && s[1] == ' ' && s[2] != 'Z' && s[2] != 'X';
}

static size_t c3_alive_count(const c3_procs_t *p) {
  size_t i, k = 0;

  for (i = 0; i < p->n; i++) {
    k += c3_alive(p->pids[i]) ? 1 : 0;
  }
  return k;
}

/* A failed run must not leave 30 s sleeps behind. */
static void c3_reap(const char *tag) {
  c3_procs_t p;
  size_t i;

  c3_scan(tag, &p);
  for (i = 0; i < p.n; i++) {
    (void)kill(p.pids[i], SIGKILL);
  }
}

/* No tagged process is alive; on failure says which (and whether each
 * went away within 3 s: a late kill or a true orphan), then kills them. */
static void c3_assert_none(const char *tag, const char *when) {
  c3_procs_t left;
  char pb[16], stat[512], cmd[512];
  uint64_t t1;
  size_t q;

  c3_scan(tag, &left);
  if (c3_alive_count(&left) == 0) {
    return;
  }
  for (q = 0; q < left.n; q++) {
    snprintf(pb, sizeof(pb), "%d", (int)left.pids[q]);
    c3_proc_read(pb, "stat", stat, sizeof(stat));
    c3_proc_read(pb, "cmdline", cmd, sizeof(cmd));
    printf("left: %s stat %.60s cmd %.200s\n", pb, stat, cmd);
  }
  t1 = uv_hrtime();
  while (c3_alive_count(&left) != 0 && uv_hrtime() - t1 < 3000000000u) {
    usleep(1000); /* diagnosis of a failure only */
  }
  printf("alive 3 s on: %zu\n", c3_alive_count(&left));
  c3_reap(tag);
  AL_TEST_FAIL("%zu tagged processes alive %s", left.n, when);
}

static bool c3_file_exists(const char *dir, const char *name) {
  char path[512];

  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* The four transcripts in dir (the parent's and its children's, "-tN"):
 * each loads with no bad line, an unbroken chain, nothing closed by the
 * load (no orphan tool_use), a sendable history, no synthetic record;
 * the parent links three children and its run ended. */
static void c3_check_transcripts(const char *dir, size_t ncalls) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int files = 0, kids = 0;
  static const char *const calls[] = {"k1", "k2", "k3", "c2", "c3"};
  bool answered[5] = {false};
  size_t i;

  ASSERT_NOT_NULL(d);
  while ((e = readdir(d)) != NULL) {
    char path[1024], why[256];
    size_t len = strlen(e->d_name);
    al_tx_loaded_t l;
    bool child;
    FILE *f;
    static char text[1 << 20];
    size_t k;

    if (len < 7 || strcmp(e->d_name + len - 6, ".jsonl") != 0) {
      continue;
    }
    files++;
    child = strstr(e->d_name, "-t") != NULL;
    kids += child ? 1 : 0;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    memset(&l, 0, sizeof(l));
    ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
    if (l.bad_lines != 0 || l.chain_breaks != 0 || l.closed_tool_uses != 0 ||
        l.synthetic != NULL) {
      AL_TEST_FAIL(
          "%s: bad_lines %zu chain_breaks %zu closed_tool_uses %zu "
          "(%s)",
          e->d_name, l.bad_lines, l.chain_breaks, l.closed_tool_uses, l.why);
    }
    why[0] = '\0';
    if (al__history_validate(&l.history, why, sizeof(why)) != 0) {
      AL_TEST_FAIL("%s: history not valid: %s", e->d_name, why);
    }
    if (!child) {
      ASSERT(!l.run_open);
      ASSERT_EQ(json_array_size(l.children), 3);
    }
    {
      char *h = json_dumps(al__history_to_json(&l.history), JSON_COMPACT);
      size_t c;

      ASSERT_NOT_NULL(h);
      for (c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
        char key[64];

        snprintf(key, sizeof(key), "\"tool_use_id\":\"%s\"", calls[c]);
        answered[c] = answered[c] || strstr(h, key) != NULL;
      }
      free(h);
    }
    al__tx_loaded_free(&l);
    f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    k = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[k] = '\0';
    ASSERT_NULL(strstr(text, "\"synthetic\":true"));
  }
  closedir(d);
  ASSERT_EQ(files, 4);
  ASSERT_EQ(kids, 3);
  /* Not vacuous: the calls made are in the histories, each answered. */
  for (i = 0; i < ncalls; i++) {
    if (!answered[i]) {
      AL_TEST_FAIL("call %s has no result in any transcript", calls[i]);
    }
  }
}

static void c3_tag(const char *root, char *tag, size_t n) {
  const char *b = strrchr(root, '/');

  snprintf(tag, n, "%s", b != NULL ? b + 1 : root);
}

/* ---- agentloop run + SIGINT ---- */

typedef struct {
  wire_cli_t c; /* first: the loop's data is both */
  uv_timer_t tick;
  const char *tag;
  const char *ws;
  c3_procs_t procs;
  uint64_t t_start, t_sig, t_quiet, t_exit;
  bool drip;  /* a text_delta came: child 1 is mid-stream (only it
               * streams text) */
  bool bash;  /* a child's bash call started */
  bool early; /* SIGINT at that start, its process perhaps not yet made */
  bool signalled, quiet, ticker_closed;
  int limit_ms;
  char why[256];
} c3_run_t;

/* The loop ends when the run exited, both pipes ended and the ticker
 * closed (the mock's listener would keep it running). */
static void c3_maybe_stop(c3_run_t *r) {
  if (r->c.exits == 1 && r->c.eofs == 2 && r->ticker_closed) {
    uv_stop(&r->c.loop);
  }
}

static void c3_tick_closed(uv_handle_t *h) {
  c3_run_t *r = h->data;

  r->ticker_closed = true;
  c3_maybe_stop(r);
}

static void c3_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  wire_cli_t *c = h->loop->data;
  bool out = h == (uv_handle_t *)&c->out;

  (void)hint;
  *buf = out ? uv_buf_init(c->obuf + c->olen,
                           (unsigned)(sizeof(c->obuf) - c->olen - 1))
             : uv_buf_init(c->ebuf + c->elen,
                           (unsigned)(sizeof(c->ebuf) - c->elen - 1));
}

static void c3_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  wire_cli_t *c = s->loop->data;

  (void)buf;
  if (n > 0) {
    if (s == (uv_stream_t *)&c->out) {
      c->olen += (size_t)n;
      c->obuf[c->olen] = '\0';
    } else {
      c->elen += (size_t)n;
      c->ebuf[c->elen] = '\0';
    }
    if (strstr(c->obuf, "\"type\":\"text_delta\"") != NULL) {
      ((c3_run_t *)c)->drip = true;
    }
    {
      const char *l = c->obuf;

      while ((l = strstr(l, "{\"type\":\"tool_use_started\"")) != NULL) {
        const char *end = strchr(l, '\n');

        if (end != NULL && (size_t)(end - l) < 4096 &&
            memmem(l, (size_t)(end - l), "\"name\":\"bash\"", 13) != NULL) {
          ((c3_run_t *)c)->bash = true;
        }
        l++;
      }
    }
    /* A full buffer would stop reading; the child then blocks on
     * stdout. Keep the tail only (enough for the markers we look for). */
    if (c->olen > sizeof(c->obuf) - 4096) {
      memmove(c->obuf, c->obuf + c->olen - 2048, 2048);
      c->olen = 2048;
      c->obuf[c->olen] = '\0';
    }
  } else if (n < 0) {
    uv_close((uv_handle_t *)s, NULL);
    c->eofs++;
    c3_maybe_stop((c3_run_t *)c);
  }
}

static void c3_exit(uv_process_t *p, int64_t status, int sig) {
  c3_run_t *r = p->loop->data;

  (void)sig;
  r->c.exit_status = status;
  r->c.exits++;
  r->t_exit = uv_hrtime();
  uv_close((uv_handle_t *)p, NULL);
  c3_maybe_stop(r);
}

static void c3_tick(uv_timer_t *t) {
  c3_run_t *r = t->data;
  uint64_t now = uv_hrtime();

  if (!r->signalled) {
    bool drip = r->drip;

    if (r->c.exits != 0) {
      snprintf(r->why, sizeof(r->why), "the run ended before the cancel");
    } else if (r->early ? r->bash
                        : drip && c3_file_exists(r->ws, "p2") &&
                              c3_file_exists(r->ws, "p3")) {
      c3_scan(r->tag, &r->procs);
      if (r->early || (r->procs.sleeping[0] && r->procs.sleeping[1])) {
        /* All three at work: one streaming, two sleeping. */
        r->signalled = true;
        r->t_sig = uv_hrtime();
        ASSERT_EQ(uv_process_kill(&r->c.proc, SIGINT), 0);
        return; /* measured from the next tick on (now < t_sig) */
      }
    }
    if (!r->signalled && r->why[0] == '\0' &&
        now - r->t_start > (uint64_t)r->limit_ms * 6000000u) {
      snprintf(r->why, sizeof(r->why),
               "three children never at work (drip %d p2 %d p3 %d)", drip,
               c3_file_exists(r->ws, "p2"), c3_file_exists(r->ws, "p3"));
    }
  } else if (!r->quiet) {
    if (c3_alive_count(&r->procs) == 0) {
      r->quiet = true;
      r->t_quiet = uv_hrtime();
    } else if (now - r->t_sig > (uint64_t)r->limit_ms * 1000000u) {
      snprintf(r->why, sizeof(r->why),
               "%zu tool processes alive %d ms after "
               "SIGINT",
               c3_alive_count(&r->procs), r->limit_ms);
    }
  }
  if (r->signalled && r->c.exits == 0 && r->why[0] == '\0' &&
      now - r->t_sig > (uint64_t)r->limit_ms * 1000000u) {
    snprintf(r->why, sizeof(r->why), "the run did not exit %d ms after SIGINT",
             r->limit_ms);
  }
  if (r->why[0] != '\0' || (r->quiet && r->c.exits != 0)) {
    if (r->c.exits == 0) {
      (void)uv_process_kill(&r->c.proc, SIGKILL);
    }
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, c3_tick_closed);
  }
}

static void c3_spawn(c3_run_t *r, const char *const *args, char **env) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char *argv[16];
  char bin[4096], port[16];
  static char url[64];
  size_t i;

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  snprintf(port, sizeof(port), "%d", al_mockllm_port(r->c.mock));
  snprintf(url, sizeof(url), "http://127.0.0.1:%s", port);
  argv[0] = bin;
  for (i = 0; args[i] != NULL && i < 14; i++) {
    argv[i + 1] = strcmp(args[i], "{URL}") == 0 ? url : (char *)args[i];
  }
  argv[i + 1] = NULL;
  ASSERT_EQ(uv_pipe_init(&r->c.loop, &r->c.out, 0), 0);
  ASSERT_EQ(uv_pipe_init(&r->c.loop, &r->c.err, 0), 0);
  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&r->c.out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&r->c.err;
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = c3_exit;
  ASSERT_EQ(uv_spawn(&r->c.loop, &r->c.proc, &po), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&r->c.out, c3_alloc, c3_read), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&r->c.err, c3_alloc, c3_read), 0);
}

static int c3_run_case(bool early) {
  char root[] = "/tmp/al-c3run-XXXXXX";
  char tag[64], ws[128], cfg[160], st[160], home[160], sdir[256];
  char yaml[4096];
  char *env[] = {"PATH=/usr/bin:/bin",
                 "NO_COLOR=1",
                 "ANTHROPIC_API_KEY=k",
                 cfg,
                 st,
                 home,
                 NULL};
  const char *args[] = {
      "run",    "--base-url", "{URL}", "--cwd", ws, "--output-format",
      "ndjson", "-p",         "go",    NULL};
  static c3_run_t r;
  al_mockllm_stats_t ms;

  al_test_timeout_s(60); /* the bounds below say why it failed first */
  ASSERT_NOT_NULL(mkdtemp(root));
  c3_tag(root, tag, sizeof(tag));
  snprintf(ws, sizeof(ws), "%s/ws", root);
  snprintf(cfg, sizeof(cfg), "XDG_CONFIG_HOME=%s/cfg", root);
  snprintf(st, sizeof(st), "XDG_STATE_HOME=%s/state", root);
  snprintf(home, sizeof(home), "HOME=%s/home", root);
  wire_write(root, "cfg/agentloop/config.yaml",
             "subagents:\n  parallel_writers: true\n");
  wire_write(root, "ws/README", "three children\n");
  wire_write(root, "home/.keep", "");
  c3_scenario(yaml, sizeof(yaml), tag);

  memset(&r, 0, sizeof(r));
  wire_cli_start(&r.c, yaml);
  r.tag = tag;
  r.ws = ws;
  r.early = early;
  r.limit_ms = 5000 * al_test_timeout_multiplier();
  r.t_start = uv_hrtime();
  c3_spawn(&r, args, env);
  ASSERT_EQ(uv_timer_init(&r.c.loop, &r.tick), 0);
  r.tick.data = &r;
  ASSERT_EQ(uv_timer_start(&r.tick, c3_tick, 1, 1), 0);
  uv_run(&r.c.loop, UV_RUN_DEFAULT);
  if (r.why[0] != '\0') {
    c3_reap(tag);
    AL_TEST_FAIL("%s\nstderr: %s\nstdout tail: %.2000s", r.why, r.c.ebuf,
                 r.c.olen > 2000 ? r.c.obuf + r.c.olen - 2000 : r.c.obuf);
  }
  printf(
      "run SIGINT%s, three children: quiet after %.1f ms, exited after "
      "%.1f ms (%zu tool processes)\n",
      early ? " at a bash start" : "", (double)(r.t_quiet - r.t_sig) / 1e6,
      (double)(r.t_exit - r.t_sig) / 1e6, r.procs.n);
  /* The interrupted exit code (CONVENTIONS.md: 130 for SIGINT). */
  if (r.c.exit_status != 130) {
    AL_TEST_FAIL("exit %d\nstderr: %s", (int)r.c.exit_status, r.c.ebuf);
  }
  /* Nothing with the tag anywhere (not only the processes seen). */
  c3_assert_none(tag, "left");
  /* The model was asked four times (the parent's turn, each child's
   * first; early, a child may not have asked yet), never again, and the
   * mock holds no open connection. */
  if (early) {
    ASSERT_LE(al_mockllm_record_count(r.c.mock), 4);
  } else {
    ASSERT_EQ(al_mockllm_record_count(r.c.mock), 4);
  }
  al_mockllm_stats(r.c.mock, &ms);
  ASSERT_EQ(ms.connections_active, 0);
  snprintf(sdir, sizeof(sdir), "%s/state/agentloop/sessions", root);
  c3_check_transcripts(sdir, early ? 3 : 5);
  wire_cli_finish(&r.c);
  dt_rmtree(root);
  return 0;
}

TEST_IMPL(i23_run_sigint_three_children_no_orphan) {
  return c3_run_case(false);
}

/* SIGINT as soon as a child's bash call started: its sandbox may still be
 * starting, the other child may still stream its call. Whatever state
 * each is in, nothing is left and nothing needs repair. */
TEST_IMPL(i23_run_sigint_at_child_bash_start_no_orphan) {
  return c3_run_case(true);
}

/* ---- agentloopd + turn/cancel ---- */

static json_t *c3_params(const dt_client_t *c, size_t i) {
  return json_object_get(json_array_get(c->msgs, i), "params");
}

typedef struct {
  dt_client_t *c;
  const char *tag;
  const char *work;
  c3_procs_t procs;
  uint64_t t0, t_quiet;
  bool early; /* cancel at the first child bash start */
} c3_dwait_t;

/* A child's bash call started (an event with a path). */
static bool c3_d_bash(const dt_client_t *c) {
  size_t i, n = json_array_size(c->msgs);

  for (i = 0; i < n; i++) {
    const json_t *p = c3_params(c, i);
    const char *name = json_string_value(json_object_get(p, "name"));

    if (strcmp(dt_ev_type(c, i), "tool_use_started") == 0 &&
        json_object_get(p, "path") != NULL && name != NULL &&
        strcmp(name, "bash") == 0) {
      return true;
    }
  }
  return false;
}

/* Child 1 streamed some of its text (a delta with a path), children 2
 * and 3 sleep. */
static bool c3_d_busy(void *data) {
  c3_dwait_t *w = data;
  size_t i, n = json_array_size(w->c->msgs);
  bool drip = false;

  if (w->early && c3_d_bash(w->c)) {
    c3_scan(w->tag, &w->procs);
    return true;
  }
  for (i = 0; i < n && !drip; i++) {
    const json_t *p = c3_params(w->c, i);

    drip = strcmp(dt_ev_type(w->c, i), "text_delta") == 0 &&
           json_object_get(p, "path") != NULL;
  }
  if (uv_hrtime() - w->t0 >
      (uint64_t)al_test_timeout_multiplier() * 30000000000u) {
    c3_reap(w->tag);
    AL_TEST_FAIL("three children never at work (drip %d p2 %d p3 %d)", drip,
                 c3_file_exists(w->work, "p2"), c3_file_exists(w->work, "p3"));
  }
  if (!drip || !c3_file_exists(w->work, "p2") ||
      !c3_file_exists(w->work, "p3")) {
    return false;
  }
  c3_scan(w->tag, &w->procs);
  return w->procs.sleeping[0] && w->procs.sleeping[1];
}

static bool c3_d_quiet(void *data) {
  c3_dwait_t *w = data;

  if (c3_alive_count(&w->procs) != 0) {
    if (uv_hrtime() - w->t0 >
        (uint64_t)al_test_timeout_multiplier() * 5000000000u) {
      c3_reap(w->tag);
      AL_TEST_FAIL("%zu tool processes alive 5 s after turn/cancel",
                   c3_alive_count(&w->procs));
    }
    return false;
  }
  w->t_quiet = uv_hrtime();
  return true;
}

typedef struct {
  const char *tag;
  uint64_t t0, t_gone;
  size_t max_seen;
} c3_gonew_t;

/* No process with the tag is alive (a rescan: those started late count
 * too), the daemon's loop running meanwhile. */
static bool c3_d_gone(void *data) {
  c3_gonew_t *w = data;
  c3_procs_t p;
  size_t n;

  c3_scan(w->tag, &p);
  n = c3_alive_count(&p);
  w->max_seen = n > w->max_seen ? n : w->max_seen;
  if (n == 0) {
    w->t_gone = uv_hrtime();
    return true;
  }
  if (uv_hrtime() - w->t0 >
      (uint64_t)al_test_timeout_multiplier() * 5000000000u) {
    c3_assert_none(w->tag, "5 s after the cancel");
  }
  return false;
}

typedef struct {
  al_mockllm_t *mock;
  uint64_t before, t0;
} c3_connw_t;

/* The mock holds fewer open connections than while child 1 streamed. */
static bool c3_d_conn_closed(void *data) {
  c3_connw_t *w = data;
  al_mockllm_stats_t ms;

  al_mockllm_stats(w->mock, &ms);
  if (ms.connections_active >= w->before &&
      uv_hrtime() - w->t0 >
          (uint64_t)al_test_timeout_multiplier() * 5000000000u) {
    AL_TEST_FAIL(
        "the mock still holds %llu connections (%llu while child 1 "
        "streamed) 5 s after the cancel",
        (unsigned long long)ms.connections_active,
        (unsigned long long)w->before);
  }
  return ms.connections_active < w->before;
}

typedef struct {
  const char *dir;
  uint64_t t0;
  int ok;
} c3_txw_t;

/* Four transcripts, each loading with nothing to close. */
static bool c3_d_written(void *data) {
  c3_txw_t *w = data;
  DIR *d = opendir(w->dir);
  struct dirent *e;
  int ok = 0;

  if (d == NULL) {
    return false;
  }
  while ((e = readdir(d)) != NULL) {
    char path[1024];
    al_tx_loaded_t l;
    size_t len = strlen(e->d_name);

    if (len < 7 || strcmp(e->d_name + len - 6, ".jsonl") != 0) {
      continue;
    }
    snprintf(path, sizeof(path), "%s/%s", w->dir, e->d_name);
    memset(&l, 0, sizeof(l));
    if (al__tx_load(path, false, 1 << 20, &l) == 0 && l.closed_tool_uses == 0 &&
        al__history_count(&l.history) >= 1 &&
        (strstr(e->d_name, "-t") != NULL || !l.run_open)) {
      ok++;
    }
    al__tx_loaded_free(&l);
  }
  closedir(d);
  w->ok = ok;
  if (ok != 4 && uv_hrtime() - w->t0 >
                     (uint64_t)al_test_timeout_multiplier() * 10000000000u) {
    AL_TEST_FAIL("%d of 4 transcripts whole 10 s after the cancel", ok);
  }
  return ok == 4;
}

static int c3_daemon_case(bool early) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024], sid[64], tag[64], yaml[4096], sdir[256];
  size_t i;
  json_t *r;
  c3_dwait_t w;
  c3_txw_t tw;
  c3_connw_t cw;
  al_mockllm_stats_t ms;
  uint64_t t_answer;
  size_t asked;
  c3_gonew_t gw;
  int k;

  al_test_timeout_s(60); /* the bounds below say why it failed first */
  memset(&w, 0, sizeof(w));
  memset(&gw, 0, sizeof(gw));
  /* The tag must be unique to this run: the pid of the test process. */
  snprintf(tag, sizeof(tag), "al-c3d-%d", (int)getpid());
  c3_scenario(yaml, sizeof(yaml), tag);
  dt_init(&t, yaml);
  /* A TERM ignored must not be what ends the tools: with a long grace,
   * a process left to the KILL after it would outlive every bound. */
  t.o.kill_grace_ms = 10000;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"subagents\":{\"parallel_writers\":true}}",
           t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  w.c = &c;
  w.tag = tag;
  w.work = t.work;
  w.early = early;
  w.t0 = uv_hrtime();
  dt_run_until(&t, c3_d_busy, &w);

  al_mockllm_stats(t.mock, &ms);
  cw.mock = t.mock;
  cw.before = ms.connections_active;
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  w.t0 = uv_hrtime();
  r = dt_call(&c, 5, "turn/cancel", p);
  t_answer = uv_hrtime();
  ASSERT_EQ(dt_err(r), 0);
  dt_run_until(&t, c3_d_quiet, &w);
  printf(
      "daemon turn/cancel%s, three children: answered after %.1f ms, quiet "
      "after %.1f ms (%zu tool processes)\n",
      early ? " at a bash start" : "", (double)(t_answer - w.t0) / 1e6,
      (double)(w.t_quiet - w.t0) / 1e6, w.procs.n);
  /* Each child completed "cancelled", then the parent's run ended. */
  for (i = 0, k = 0; k < 3; k++) {
    i = dt_wait_event(&c, "subagent_completed", i);
    ASSERT_STR_EQ(
        json_string_value(json_object_get(c3_params(&c, i), "outcome")),
        "cancelled");
    i++;
  }
  for (i = 0;;) {
    i = dt_wait_event(&c, "interrupted", i);
    if (json_object_get(c3_params(&c, i), "path") == NULL) {
      break;
    }
    i++;
  }
  /* Child 1's stream is not left open: its connection closes (the
   * others may stay pooled, idle; no request was made since). Early,
   * child 1 may not have been streaming yet. */
  if (!early) {
    cw.t0 = uv_hrtime();
    dt_run_until(&t, c3_d_conn_closed, &cw);
    al_mockllm_stats(t.mock, &ms);
    printf("mock connections open: %llu while streaming, %llu after\n",
           (unsigned long long)cw.before,
           (unsigned long long)ms.connections_active);
  }
  /* The first check saw the processes alive at the cancel; some may have
   * been starting then. The report waits for every tagged one. */
  gw.tag = tag;
  gw.t0 = w.t0;
  dt_run_until(&t, c3_d_gone, &gw);
  printf(
      "daemon: every tagged process gone %.1f ms after the cancel (%zu "
      "seen alive after the events)\n",
      (double)(gw.t_gone - gw.t0) / 1e6, gw.max_seen);
  c3_assert_none(tag, "left");
  /* Four requests (early: perhaps fewer): none after the cancel. */
  asked = al_mockllm_record_count(t.mock);
  if (early) {
    ASSERT_LE(asked, 4);
  } else {
    ASSERT_EQ(asked, 4);
  }
  snprintf(sdir, sizeof(sdir), "%s/sessions", t.state);
  tw.dir = sdir;
  tw.t0 = uv_hrtime();
  dt_run_until(&t, c3_d_written, &tw);
  c3_check_transcripts(sdir, early ? 3 : 5);
  dt_assert_valid(&t);

  /* The session takes another turn. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"again\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c, 6, "turn/send", p)), 0);
  for (;;) {
    i = dt_wait_event(&c, "final", i + 1);
    if (json_object_get(c3_params(&c, i), "path") == NULL) {
      break;
    }
  }
  ASSERT_STR_EQ(json_string_value(json_object_get(c3_params(&c, i), "text")),
                "after cancel");
  ASSERT_EQ(al_mockllm_record_count(t.mock), asked + 1);
  /* Still nothing: no tool process was started late. */
  c3_assert_none(tag, "after the next turn");
  dt_finish(&t, cs, 1);
  return 0;
}

TEST_IMPL(i23_daemon_cancel_three_children_no_orphan) {
  return c3_daemon_case(false);
}

/* turn/cancel as soon as a child's bash call started (its sandbox perhaps
 * still starting, the other child perhaps still streaming its call). */
TEST_IMPL(i23_daemon_cancel_at_child_bash_start_no_orphan) {
  return c3_daemon_case(true);
}
