/* Transcript defects of issue 22, on the record format and its writers:
 *  - one record-kind table (session/): `agentloop run` records
 *    compactions as the daemon does, so a resumed compacted run sends
 *    the request the live session would have sent;
 *  - format 2 of the hash chain binds each record to its session: records
 *    spliced in from another session are refused, the session's own
 *    records around them kept; format-1 files still load;
 *  - the loader's longest-valid-prefix safety net;
 *  - no test seam's name in the shipped binaries;
 *  - a reply rejected at its bound leaves a bounded trace.
 * The CLI tests spawn the real `agentloop` against an in-process
 * agentloop-mockllm, as tests/unit/client/test_run.c does. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../daemon/dtest.h"
#include "mockllm/mockllm.h"
#include "session/session.h"
#include "test.h"

/* ---- spawning `agentloop` ------------------------------------------------- */

typedef struct {
  uv_loop_t loop;
  al_mockllm_t *mock;
  uv_process_t proc;
  uv_pipe_t in;
  uv_pipe_t out;
  uv_pipe_t err;
  uv_write_t wreq;
  const char *stdin_text;
  char obuf[262144];
  size_t olen;
  char ebuf[65536];
  size_t elen;
  int64_t exit_status;
  int term_signal;
  int exits;
  int eofs;
} cli_t;

static void maybe_done(cli_t *c) {
  if (c->exits == 1 && c->eofs == 2) {
    uv_stop(&c->loop);
  }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  cli_t *c = h->loop->data;
  bool out = h == (uv_handle_t *)&c->out;
  char *b = out ? c->obuf : c->ebuf;
  size_t cap = out ? sizeof(c->obuf) : sizeof(c->ebuf);
  size_t used = out ? c->olen : c->elen;

  (void)hint;
  /* Keep one byte for the terminating NUL; a full buffer reads into a
   * scratch tail that is dropped. */
  if (used + 1 >= cap) {
    static char sink[4096];

    *buf = uv_buf_init(sink, sizeof(sink));
    return;
  }
  *buf = uv_buf_init(b + used, (unsigned)(cap - used - 1));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  cli_t *c = s->loop->data;
  bool out = s == (uv_stream_t *)&c->out;

  if (n > 0) {
    size_t *used = out ? &c->olen : &c->elen;
    char *b = out ? c->obuf : c->ebuf;

    if (buf->base == b + *used) {
      *used += (size_t)n;
      b[*used] = '\0';
    }
    return;
  }
  if (n < 0) {
    uv_close((uv_handle_t *)s, NULL);
    c->eofs++;
    maybe_done(c);
  }
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  cli_t *c = p->loop->data;

  c->exit_status = status;
  c->term_signal = sig;
  c->exits++;
  uv_close((uv_handle_t *)p, NULL);
  maybe_done(c);
}

static void on_stdin_written(uv_write_t *w, int status) {
  (void)status;
  uv_close((uv_handle_t *)w->handle, NULL);
}

static void on_mock_closed(al_mockllm_t *m) { (void)m; }

static void start_mock(cli_t *c, const char *yaml) {
  al_mockllm_options_t mo;
  char err[256];

  memset(c, 0, sizeof(*c));
  ASSERT_EQ(uv_loop_init(&c->loop), 0);
  c->loop.data = c;
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&c->loop, &mo, &c->mock), 0);
}

static void finish(cli_t *c) {
  al_mockllm_close(c->mock, on_mock_closed);
  ASSERT_LOOP_CLOSES(&c->loop);
}

/* `agentloop ARGS...` with {PORT} replaced by the mock's port; runs the
 * loop until it exited and its output is read. */
static void run_cli(cli_t *c, const char *const *args, char **env) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char *argv[40];
  char bin[4096];
  char expanded[38][512];
  size_t i;

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  argv[0] = bin;
  for (i = 0; args[i] != NULL && i < 38; i++) {
    const char *p = strstr(args[i], "{PORT}");

    if (p != NULL) {
      snprintf(expanded[i], sizeof(expanded[i]), "%.*s%d%s",
               (int)(p - args[i]), args[i], al_mockllm_port(c->mock), p + 6);
      argv[i + 1] = expanded[i];
    } else {
      argv[i + 1] = (char *)args[i];
    }
  }
  argv[i + 1] = NULL;
  ASSERT_EQ(uv_pipe_init(&c->loop, &c->out, 0), 0);
  ASSERT_EQ(uv_pipe_init(&c->loop, &c->err, 0), 0);
  memset(&po, 0, sizeof(po));
  if (c->stdin_text != NULL) {
    ASSERT_EQ(uv_pipe_init(&c->loop, &c->in, 0), 0);
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&c->in;
  } else {
    stdio[0].flags = UV_IGNORE;
  }
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&c->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&c->err;
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  ASSERT_EQ(uv_spawn(&c->loop, &c->proc, &po), 0);
  if (c->stdin_text != NULL) {
    uv_buf_t b = uv_buf_init((char *)c->stdin_text,
                             (unsigned)strlen(c->stdin_text));

    ASSERT_EQ(uv_write(&c->wreq, (uv_stream_t *)&c->in, &b, 1,
                       on_stdin_written),
              0);
  }
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->out, on_alloc, on_read), 0);
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->err, on_alloc, on_read), 0);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  ASSERT_EQ(c->exits, 1);
  ASSERT_EQ(c->term_signal, 0);
}

/* A workspace with its own state directory (XDG_STATE_HOME) and HOME. */
typedef struct {
  char dir[64];
  char state[128];
  char envs[2][200];
  char *env[5];
} ws_t;

static void ws_make(ws_t *w) {
  memset(w, 0, sizeof(*w));
  snprintf(w->dir, sizeof(w->dir), "/tmp/al-i22-tx-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(w->dir));
  snprintf(w->state, sizeof(w->state), "%s/state", w->dir);
  snprintf(w->envs[0], sizeof(w->envs[0]), "XDG_STATE_HOME=%s", w->state);
  snprintf(w->envs[1], sizeof(w->envs[1]), "HOME=%s", w->dir);
  w->env[0] = "PATH=/usr/bin:/bin";
  w->env[1] = "NO_COLOR=1";
  w->env[2] = w->envs[0];
  w->env[3] = w->envs[1];
  w->env[4] = NULL;
}

static void ws_file(ws_t *w, const char *name, const char *content) {
  char path[200];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", w->dir, name);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(content, f);
  fclose(f);
}

static void ws_remove(ws_t *w) {
  char cmd[200];

  snprintf(cmd, sizeof(cmd), "rm -rf %s", w->dir);
  ASSERT_EQ(system(cmd), 0);
}

static void tx_path(const ws_t *w, const char *id, char *buf, size_t n) {
  snprintf(buf, n, "%s/agentloop/sessions/%s.jsonl", w->state, id);
}

/* The session id of the last result line (json / stream-json output). */
static void result_session(cli_t *c, char *id, size_t n) {
  const char *p = c->obuf;
  const char *last = NULL;

  while ((p = strstr(p, "\"session_id\":\"")) != NULL) {
    last = p + 14;
    p = last;
  }
  ASSERT_NOT_NULL(last);
  snprintf(id, n, "%.*s", (int)(strchr(last, '"') - last), last);
}

/* The request body as canonical JSON (sorted keys), malloc'd. The
 * system prompt's date line is masked: the processes compared may run on
 * either side of midnight, and the date is not what is under test. */
static char *body_text(cli_t *c, size_t i) {
  const al_mockllm_record_t *r = al_mockllm_record_get(c->mock, i);
  char *s;
  char *d;

  ASSERT_NOT_NULL(r);
  s = json_dumps(r->body, JSON_COMPACT | JSON_SORT_KEYS);
  ASSERT_NOT_NULL(s);
  for (d = s; (d = strstr(d, "- Date: ")) != NULL; d += 8) {
    size_t k;

    for (k = 8; k < 18 && d[k] != '\0' && d[k] != '\\'; k++) {
      d[k] = 'X';
    }
  }
  return s;
}

/* The user texts of request i, joined with '|'. */
static void user_texts(cli_t *c, size_t i, char *buf, size_t n) {
  const al_mockllm_record_t *r = al_mockllm_record_get(c->mock, i);
  json_t *m;
  json_t *b;
  size_t k, j;

  ASSERT_NOT_NULL(r);
  buf[0] = '\0';
  json_array_foreach(json_object_get(r->body, "messages"), k, m) {
    if (strcmp(json_string_value(json_object_get(m, "role")), "user") != 0) {
      continue;
    }
    json_array_foreach(json_object_get(m, "content"), j, b) {
      const char *t = json_string_value(json_object_get(b, "text"));

      if (t != NULL) {
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s",
                 buf[0] != '\0' ? "|" : "", t);
      }
    }
  }
}

/* ---- 1. one record table: a compacted `run` resumes exactly ------------ */

#define GOAL "GOAL-ZEBRA-42: count the x in every file"

static const char *live_yaml =
    "usage_from_request: {bytes_per_token: 4}\n"
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t5, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{text: first done}]}\n"
    "  - reply: {content: [{text: next done}]}\n";

static const char *summary_yaml =
    "usage_from_request: {bytes_per_token: 4}\n"
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
    "  - reply: {content: [{text: \"## Goal\\ncount\\n## Next step\\nSUMMARY-MARK-9\"}]}\n"
    "  - reply: {content: [{text: first done}]}\n"
    "  - reply: {content: [{text: next done}]}\n";

/* Runs GOAL then "next question" once in one process (both on stdin) and
 * once as `run -p GOAL` then `run --continue -p "next question"`, with
 * the same flags (extra, NULL-terminated) and f1, f2 of big bytes, f3 of
 * 100; the live session's last request must hold mark (what the
 * compaction left), the second process's request must be that one, byte
 * for byte, and the transcript must hold each record kind of want. */
static void resume_same_request(const char *yaml, size_t big,
                                const char *const *extra, size_t live_reqs,
                                const char *const *want, const char *mark) {
  ws_t w;
  cli_t c;
  char *fill = al_malloc(big + 1);
  char *live;
  char *resumed;
  char id[64];
  char path[300];
  char *tx;
  size_t len, i, k;
  al_tx_loaded_t l;
  const char *live_args[24] = {"run", "--base-url",
                               "http://127.0.0.1:{PORT}", "--cwd", NULL,
                               "--input-format", "stream-json",
                               "--output-format", "stream-json"};
  const char *first[24] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                           "--cwd", NULL, "--output-format", "json", "-p",
                           GOAL};
  const char *cont[24] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                          "--cwd", NULL, "--output-format", "json",
                          "--continue", "-p", "next question"};

  ASSERT_NOT_NULL(fill);
  ws_make(&w);
  live_args[4] = first[4] = cont[4] = w.dir;
  for (k = 0; extra[k] != NULL; k++) {
    ASSERT(k < 12);
    live_args[9 + k] = first[9 + k] = extra[k];
    cont[10 + k] = extra[k];
  }
  memset(fill, 'b', big);
  fill[big] = '\0';
  ws_file(&w, "f1", fill);
  memset(fill, 'c', big);
  ws_file(&w, "f2", fill);
  fill[100] = '\0';
  ws_file(&w, "f3", fill);
  al_free(fill);
  w.env[4] = "ANTHROPIC_API_KEY=k";

  /* The live session: both questions in one process. */
  start_mock(&c, yaml);
  c.stdin_text = "{\"type\":\"user\",\"message\":{\"role\":\"user\","
                 "\"content\":\"" GOAL "\"}}\n"
                 "{\"type\":\"user\",\"message\":{\"role\":\"user\","
                 "\"content\":\"next question\"}}\n";
  run_cli(&c, live_args, w.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("live: exit %d: %s", (int)c.exit_status, c.ebuf);
  }
  if (al_mockllm_record_count(c.mock) != live_reqs) {
    for (i = 0; i < al_mockllm_record_count(c.mock); i++) {
      char *b = body_text(&c, i);

      fprintf(stderr, "request %zu: %zu bytes: tool_choice %d, ends %s\n", i,
              strlen(b), strstr(b, "tool_choice") != NULL,
              b + (strlen(b) > 400 ? strlen(b) - 400 : 0));
      free(b);
    }
    fprintf(stderr, "%s\n", c.ebuf);
    AL_TEST_FAIL("live: %zu requests, not %zu",
                 al_mockllm_record_count(c.mock), live_reqs);
  }
  for (i = 0; i < live_reqs; i++) {
    ASSERT(al_mockllm_record_get(c.mock, i)->valid);
  }
  live = body_text(&c, live_reqs - 1);
  finish(&c);
  if (mark != NULL && strstr(live, mark) == NULL) {
    AL_TEST_FAIL("the live request after the compaction lacks %s", mark);
  }

  /* The same session in two processes. */
  start_mock(&c, yaml);
  run_cli(&c, first, w.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("first: exit %d: %s", (int)c.exit_status, c.ebuf);
  }
  result_session(&c, id, sizeof(id));
  finish(&c);
  tx_path(&w, id, path, sizeof(path));
  tx = al_test_read_file(path, &len);
  ASSERT_NOT_NULL(tx);
  for (k = 0; want[k] != NULL; k++) {
    char pat[64];

    snprintf(pat, sizeof(pat), "{\"rec\":\"%s\"", want[k]);
    if (strstr(tx, pat) == NULL) {
      AL_TEST_FAIL("no %s record in the transcript", want[k]);
    }
  }
  free(tx);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(l.chain_breaks, 0);
  al__tx_loaded_free(&l);

  start_mock(&c, "responses:\n  - reply: {content: [{text: next done}]}\n");
  run_cli(&c, cont, w.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("--continue: exit %d: %s", (int)c.exit_status, c.ebuf);
  }
  ASSERT_NULL(strstr(c.ebuf, "damaged or forged"));
  ASSERT_EQ(al_mockllm_record_count(c.mock), 1);
  ASSERT(al_mockllm_record_get(c.mock, 0)->valid);
  resumed = body_text(&c, 0);
  finish(&c);
  if (strcmp(live, resumed) != 0) {
    AL_TEST_FAIL("the resumed request differs from the live one:\nlive:    "
                 "%.2000s\nresumed: %.2000s",
                 live, resumed);
  }
  free(live);
  free(resumed);
  ws_remove(&w);
}

/* `agentloop run` records a micro-compaction and a compaction (here the
 * message-count trim, recorded like a summary) as the daemon does: a
 * session continued with --continue sends, byte for byte, the request
 * the live session sent for the same question, and loads without a
 * damaged record. Before the one table, run indexed a 3-name table with
 * the kinds 3 and 4: micro records came out as {"rec":"cwd"} (or worse)
 * and compactions were not written, so the resumed request was the whole
 * uncompacted history. */
TEST_IMPL(cli_run_resume_compacted_same_request) {
  static const char *const extra[] = {"--micro-min-tokens", "2000",
                                      "--max-messages", "10", NULL};
  static const char *const want[] = {"micro", "compaction", NULL};

  resume_same_request(live_yaml, 6000, extra, 7, want, "agentloop cleared");
  return 0;
}

/* The same with a summary compaction: a 32000-token window, two 40 KB
 * reads, an automatic compaction (the mock's third reply is the
 * summary) in the middle of the first run. */
TEST_IMPL(cli_run_resume_summary_same_request) {
  static const char *const extra[] = {"--context-window", "32000", NULL};
  static const char *const want[] = {"compaction", NULL};

  resume_same_request(summary_yaml, 40000, extra, 5, want, "SUMMARY-MARK-9");
  return 0;
}

/* Every commit kind has its record name, and nothing outside the enum
 * indexes the table. */
TEST_IMPL(transcript_commit_kinds_one_table) {
  static const struct {
    al_commit_kind_t kind;
    const char *name;
  } k[] = {{AL_COMMIT_USER, "user"},
           {AL_COMMIT_ASSISTANT, "assistant"},
           {AL_COMMIT_TOOL_RESULTS, "tool_results"},
           {AL_COMMIT_COMPACTION, "compaction"},
           {AL_COMMIT_MICRO, "micro"}};
  size_t i;

  for (i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
    al_blob_t *b = al__tx_commit_record(k[i].kind, "{}", 2);
    char want[64];

    ASSERT_STR_EQ(al__tx_commit_kind_name(k[i].kind), k[i].name);
    ASSERT_NOT_NULL(b);
    snprintf(want, sizeof(want), "{\"rec\":\"%s\",", k[i].name);
    ASSERT(strncmp(b->data, want, strlen(want)) == 0);
    al__blob_unref(b);
  }
  ASSERT_NULL(al__tx_commit_kind_name((al_commit_kind_t)5));
  ASSERT_NULL(al__tx_commit_kind_name((al_commit_kind_t)-1));
  ASSERT_NULL(al__tx_commit_record((al_commit_kind_t)5, "{}", 2));
  ASSERT(al__session_id_valid("s_0123abcd"));
  ASSERT(!al__session_id_valid(""));
  ASSERT(!al__session_id_valid("../x"));
  ASSERT(!al__session_id_valid(NULL));
  return 0;
}

/* ---- 6. records bound to their session ---------------------------------- */

/* The whole line of the first record of kind rec (with its '\n') in tx,
 * at or after from; NULL when none. */
static const char *find_rec(const char *tx, const char *from,
                            const char *kind, size_t *len) {
  char pat[64];
  const char *p;

  snprintf(pat, sizeof(pat), "{\"rec\":\"%s\"", kind);
  for (p = from; (p = strstr(p, pat)) != NULL; p++) {
    if (p == tx || p[-1] == '\n') {
      *len = (size_t)(strchr(p, '\n') - p) + 1;
      return p;
    }
  }
  return NULL;
}

/* Two real sessions; B's user and assistant records copied verbatim into
 * the middle of A (after A's first exchange). Loading A refuses both,
 * names them, and keeps A whole: its records before them and its own
 * records after them, which still chain to A's last good one. Before
 * format 2, B's assistant record verified after B's refused user record
 * (the edit-in-place rule), was merged into A's reply, became the chain's
 * head, and A's next question failed the chain and was dropped. */
TEST_IMPL(transcript_splice_from_other_session) {
  ws_t w;
  cli_t c;
  char a[64];
  char b[64];
  char pa[300];
  char pb[300];
  char texts[1024];
  char *ta;
  char *tb;
  size_t la, lb, n1, n2;
  const char *at;
  const char *u;
  const char *asst;
  char *body;
  FILE *f;
  al_tx_loaded_t l;
  const char *yaml_a = "on_exhausted: repeat_last\n"
                       "responses:\n  - reply: {content: [{text: Noted.}]}\n";
  const char *yaml_b = "responses:\n"
                       "  - reply: {content: [{text: BRAVO-REPLY}]}\n";
  const char *first[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                         "--cwd", NULL, "--output-format", "json", "-p",
                         NULL, NULL};
  const char *resume[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                          "--cwd", NULL, "--output-format", "json",
                          "--resume", NULL, "-p", NULL, NULL};

  ws_make(&w);
  w.env[4] = "ANTHROPIC_API_KEY=k";
  first[4] = resume[4] = w.dir;
  first[8] = "alpha-1";
  start_mock(&c, yaml_a);
  run_cli(&c, first, w.env);
  ASSERT_EQ(c.exit_status, 0);
  result_session(&c, a, sizeof(a));
  finish(&c);
  first[8] = "bravo-1";
  start_mock(&c, yaml_b);
  run_cli(&c, first, w.env);
  ASSERT_EQ(c.exit_status, 0);
  result_session(&c, b, sizeof(b));
  finish(&c);
  ASSERT(strcmp(a, b) != 0);
  resume[8] = a;
  resume[10] = "alpha-2";
  start_mock(&c, yaml_a);
  run_cli(&c, resume, w.env);
  ASSERT_EQ(c.exit_status, 0);
  finish(&c);

  /* Splice B's two records in after A's first assistant record. */
  tx_path(&w, a, pa, sizeof(pa));
  tx_path(&w, b, pb, sizeof(pb));
  ta = al_test_read_file(pa, &la);
  tb = al_test_read_file(pb, &lb);
  ASSERT_NOT_NULL(ta);
  ASSERT_NOT_NULL(tb);
  at = find_rec(ta, ta, "assistant", &n1);
  ASSERT_NOT_NULL(at);
  at += n1;
  u = find_rec(tb, tb, "user", &n1);
  asst = find_rec(tb, tb, "assistant", &n2);
  ASSERT_NOT_NULL(u);
  ASSERT_NOT_NULL(asst);
  f = fopen(pa, "w");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(ta, 1, (size_t)(at - ta), f), (size_t)(at - ta));
  ASSERT_EQ(fwrite(u, 1, n1, f), n1);
  ASSERT_EQ(fwrite(asst, 1, n2, f), n2);
  ASSERT_EQ(fwrite(at, 1, la - (size_t)(at - ta), f), la - (size_t)(at - ta));
  fclose(f);
  free(ta);
  free(tb);

  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(pa, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 2);
  ASSERT_EQ(l.bad_lines, 2);
  ASSERT_STR_EQ(l.chain_id, a);
  ASSERT_EQ(al__history_count(&l.history), 4);
  body = json_dumps(al__history_to_json(&l.history), JSON_COMPACT);
  ASSERT_NULL(strstr(body, "BRAVO"));
  ASSERT_NULL(strstr(body, "bravo"));
  ASSERT_NOT_NULL(strstr(body, "alpha-2"));
  free(body);
  al__tx_loaded_free(&l);

  /* Resumed: both refused and said so, A's questions all sent. */
  resume[10] = "alpha-3";
  start_mock(&c, yaml_a);
  run_cli(&c, resume, w.env);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_NOT_NULL(strstr(c.ebuf, "2 damaged or forged record(s) skipped"));
  ASSERT_NOT_NULL(strstr(c.ebuf, "copied from another session"));
  user_texts(&c, 0, texts, sizeof(texts));
  ASSERT_STR_EQ(texts, "alpha-1|alpha-2|alpha-3");
  body = body_text(&c, 0);
  ASSERT_NULL(strstr(body, "BRAVO"));
  free(body);
  finish(&c);
  /* The session goes on in one chain after the refused records. */
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(pa, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 2);
  ASSERT_EQ(al__history_count(&l.history), 6);
  al__tx_loaded_free(&l);
  ws_remove(&w);
  return 0;
}

/* Appends rec (a record line) to buf, chained after *prev in id's chain
 * ("": format 1); *prev becomes its hash. */
static void chain_put(al_buf_t *buf, const char *id, char *prev,
                      const char *rec) {
  al_blob_t *r = al__blob_new(rec, strlen(rec));
  char h[AL_TX_HASH_HEX + 1];
  al_blob_t *b = al__tx_chain_record(id, prev, r, h);

  ASSERT_NOT_NULL(b);
  ASSERT_EQ(al_buf_append(buf, b->data, b->len), 0);
  memcpy(prev, h, sizeof(h));
  al__blob_unref(b);
  al__blob_unref(r);
}

#define REC_USER(t)                                                          \
  "{\"rec\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":" \
  "\"text\",\"text\":\"" t "\"}]}}\n"
#define REC_ASST(t)                                                          \
  "{\"rec\":\"assistant\",\"message\":{\"role\":\"assistant\",\"content\":"  \
  "[{\"type\":\"text\",\"text\":\"" t "\"}]}}\n"

/* Files written before format 2 (header "v":1, no id in the hash) load
 * unbroken, also once a newer writer continued them (it keeps format 1,
 * even for a header it writes); a format-2 record verifies only in its
 * own session's chain. */
TEST_IMPL(transcript_format1_still_loads) {
  al_buf_t buf;
  char prev[AL_TX_HASH_HEX + 1] = "";
  al_tx_loaded_t l;
  al_tx_header_t h;
  al_blob_t *hdr;
  char *cut;

  al_buf_init(&buf, 1 << 20);
  chain_put(&buf, "", prev,
            "{\"rec\":\"session\",\"v\":1,\"session\":\"s_old\","
            "\"created_ms\":1,\"cwd\":\"/w\"}\n");
  chain_put(&buf, "", prev, REC_USER("one"));
  chain_put(&buf, "", prev, REC_ASST("uno"));
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(buf.data, buf.len, 1 << 20, &l, NULL), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_STR_EQ(l.chain_id, "");
  ASSERT_STR_EQ(l.chain, prev);
  ASSERT_EQ(al__history_count(&l.history), 2);
  al__tx_loaded_free(&l);

  /* Continued by this version: the loaded chain_id ("") keeps format 1,
   * for a new header (session/configure) too. */
  memset(&h, 0, sizeof(h));
  h.cwd = "/w";
  hdr = al__tx_header_record("s_old", &h);
  ASSERT_NOT_NULL(hdr);
  ASSERT_NOT_NULL(strstr(hdr->data, "\"v\":2"));
  chain_put(&buf, "", prev, hdr->data);
  al__blob_unref(hdr);
  chain_put(&buf, "", prev, REC_USER("two"));
  chain_put(&buf, "", prev, REC_ASST("dos"));
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(buf.data, buf.len, 1 << 20, &l, NULL), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_STR_EQ(l.chain_id, "");
  ASSERT_EQ(al__history_count(&l.history), 4);
  al__tx_loaded_free(&l);

  /* Format 2: the header binds s_new; a record hashed for another
   * session after the very same predecessor is refused, the next one of
   * s_new kept. */
  al_buf_reset(&buf);
  prev[0] = '\0';
  hdr = al__tx_header_record("s_new", &h);
  chain_put(&buf, "s_new", prev, hdr->data);
  al__blob_unref(hdr);
  chain_put(&buf, "s_new", prev, REC_USER("one"));
  {
    char other[AL_TX_HASH_HEX + 1];

    memcpy(other, prev, sizeof(other));
    chain_put(&buf, "s_other", other, REC_ASST("FOREIGN"));
  }
  chain_put(&buf, "s_new", prev, REC_ASST("uno"));
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(buf.data, buf.len, 1 << 20, &l, NULL), 0);
  ASSERT_STR_EQ(l.chain_id, "s_new");
  ASSERT_EQ(l.chain_breaks, 1);
  cut = json_dumps(al__history_to_json(&l.history), JSON_COMPACT);
  ASSERT_NULL(strstr(cut, "FOREIGN"));
  ASSERT_NOT_NULL(strstr(cut, "uno"));
  free(cut);
  al__tx_loaded_free(&l);
  al_buf_free(&buf);
  return 0;
}

/* ---- 14. the loader's safety net ------------------------------------------- */

/* The checks of every record keep a replayed history sendable, so no
 * record sequence reaches the loader's last safety net today (3 million
 * random sequences of 18 record shapes, damaged ones included, did not);
 * it is tested on the loaded result instead: a history whose tail a
 * replay rule missed (two replies in a row; a result that is neither a
 * string nor a list) is cut back to its longest valid prefix, each cut
 * named, and the result is sendable. */
TEST_IMPL(transcript_safety_net_cuts_to_valid_prefix) {
  static const char tx[] = REC_USER("q1") REC_ASST("r1") REC_USER("q2")
      REC_ASST("r2");
  al_tx_loaded_t l;
  char why[256];
  json_t *m;

  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(tx, sizeof(tx) - 1, 1 << 20, &l, NULL), 0);
  ASSERT_EQ(al__history_count(&l.history), 4);
  ASSERT_EQ(al__tx_keep_valid_prefix(&l, 4), 0); /* valid: untouched */
  ASSERT_EQ(l.bad_lines, 0);
  /* The damaged tail: a second reply after the last one. */
  m = json_pack("{s:s, s:[{s:s, s:s}]}", "role", "assistant", "content",
                "type", "text", "text", "stray");
  ASSERT_EQ(json_array_append_new(l.history.messages, m), 0);
  ASSERT(al__history_validate(&l.history, NULL, 0) != 0);
  ASSERT_EQ(al__tx_keep_valid_prefix(&l, 4), 1);
  if (al__history_validate(&l.history, why, sizeof(why)) != 0) {
    AL_TEST_FAIL("not sendable after the cut: %s", why);
  }
  ASSERT_EQ(al__history_count(&l.history), 4);
  ASSERT_EQ(l.bad_lines, 1);
  ASSERT_NOT_NULL(strstr(l.why, "line 4: history cut back"));
  /* Damage further in: everything from it goes, the head stays. */
  json_object_set_new(json_array_get(l.history.messages, 1), "content",
                      json_pack("[{s:s, s:s, s:{}}]", "type", "tool_use",
                                "id", "t1", "name", "x", "input"));
  ASSERT_EQ(al__tx_keep_valid_prefix(&l, 4), 3);
  ASSERT_EQ(al__history_count(&l.history), 1);
  ASSERT_EQ(al__history_validate(&l.history, NULL, 0), 0);
  ASSERT_EQ(l.bad_lines, 4);
  al__tx_loaded_free(&l);
  return 0;
}

/* ---- 11. no test seam reachable from a shipped binary -------------------- */

/* The installed programs carry no test variable's name: a test seam that
 * an environment variable (AL_TEST_*) could reach would show here. The
 * writer's fault hooks (al__tx_write_fault, al__tx_sync_fault) are
 * function pointers in the one static library the programs and al_tests
 * link; only test code assigns them, and nothing reads them from the
 * environment or a file. */
TEST_IMPL(shipped_binaries_have_no_test_seam_names) {
  static const char *const bins[] = {"agentloop", "agentloopd",
                                     "agentloop-exec", "agentloop-mockllm"};
  size_t i;

  for (i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
    char path[4200];
    size_t n;
    char *b;
    const char *hit;

    snprintf(path, sizeof(path), "%s/%s", AL_BINARY_DIR, bins[i]);
    b = al_test_read_file(path, &n);
    if (b == NULL) {
      AL_TEST_FAIL("cannot read %s", path);
    }
    hit = memmem(b, n, "AL_TEST_", 8);
    if (hit != NULL) {
      AL_TEST_FAIL("%s holds \"%.40s\": a test seam in a shipped binary",
                   bins[i], hit);
    }
    free(b);
  }
  return 0;
}

/* ---- 16. a rejected reply leaves a bounded trace --------------------------- */

/* A reply rejected at its bound (here --limit reply_bytes=4M, the mock
 * streaming 4.8 MB of text in 8 KB deltas) leaves at most
 * AL_TX_REPLY_DELTAS_MAX of delta events in the transcript, one "elided"
 * record saying what was left out and that the api_error ended it, and
 * the api_error itself; the transcript loads clean. Before, every delta
 * was written: about 4 MB here, 70 MB at the default 64 MiB bound. */
TEST_IMPL(cli_run_rejected_reply_bounded_in_transcript) {
  ws_t w;
  cli_t c;
  char *yaml;
  char piece[8001];
  char id[64];
  char path[300];
  char *tx;
  size_t len;
  size_t deltas = 0;
  const char *p;
  al_tx_loaded_t l;
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--cwd", NULL, "--limit", "reply_bytes=4M",
                        "--output-format", "json", "-p", "write a lot", NULL};

  ws_make(&w);
  w.env[4] = "ANTHROPIC_API_KEY=k";
  args[4] = w.dir;
  memset(piece, 'z', 8000);
  piece[8000] = '\0';
  yaml = al_malloc(9000);
  ASSERT_NOT_NULL(yaml);
  snprintf(yaml, 9000,
           "responses:\n  - reply:\n      content:\n"
           "        - repeat_text: {count: 600, text: \"%s\"}\n",
           piece);
  start_mock(&c, yaml);
  run_cli(&c, args, w.env);
  ASSERT_EQ(c.exit_status, 1);
  ASSERT_NOT_NULL(strstr(c.ebuf, "exceeds the limit of 4194304 bytes"));
  result_session(&c, id, sizeof(id));
  finish(&c);
  al_free(yaml);

  tx_path(&w, id, path, sizeof(path));
  tx = al_test_read_file(path, &len);
  ASSERT_NOT_NULL(tx);
  for (p = tx; (p = strstr(p, "{\"type\":\"text_delta\"")) != NULL; p++) {
    deltas++;
  }
  if (len > AL_TX_REPLY_DELTAS_MAX + 64 * 1024) {
    AL_TEST_FAIL("the transcript holds %zu bytes (%zu text deltas) of a "
                 "rejected reply", len, deltas);
  }
  ASSERT_GE(deltas, 1); /* the head of the reply is kept */
  p = strstr(tx, "{\"rec\":\"elided\"");
  ASSERT_NOT_NULL(p);
  ASSERT_NOT_NULL(strstr(p, "\"ended_by\":\"api_error\""));
  ASSERT_NOT_NULL(strstr(p, "{\"type\":\"api_error\""));
  ASSERT_NOT_NULL(strstr(tx, "reply_too_large"));
  free(tx);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(l.chain_breaks, 0);
  al__tx_loaded_free(&l);
  ws_remove(&w);
  return 0;
}

/* The bound is per attempt: a retry's stream_request_start starts it
 * again; other events pass; the note comes once, before the event that
 * ends the span. */
TEST_IMPL(transcript_deltas_bound_per_attempt) {
  al_tx_deltas_t d;
  al_event_t ev;
  al_blob_t *note;
  int i;
  int kept = 0;

  al__tx_deltas_init(&d, 250);
  memset(&ev, 0, sizeof(ev));
  ev.run = 1;
  ev.turn = 1;
  ev.type = AL_EVENT_STREAM_REQUEST_START;
  ASSERT(al__tx_deltas_keep(&d, &ev, 100, &note));
  ASSERT_NULL(note);
  for (i = 0; i < 5; i++) {
    ev.type = AL_EVENT_TEXT_DELTA;
    ev.seq = 10 + (uint64_t)i;
    kept += al__tx_deltas_keep(&d, &ev, 100, &note);
    ASSERT_NULL(note);
  }
  ASSERT_EQ(kept, 2);
  ev.type = AL_EVENT_API_ERROR;
  ASSERT(al__tx_deltas_keep(&d, &ev, 100, &note));
  ASSERT_NOT_NULL(note);
  ASSERT_NOT_NULL(strstr(note->data, "\"first_seq\":12"));
  ASSERT_NOT_NULL(strstr(note->data, "\"last_seq\":14"));
  ASSERT_NOT_NULL(strstr(note->data, "\"events\":3"));
  ASSERT_NOT_NULL(strstr(note->data, "\"ended_by\":\"api_error\""));
  al__blob_unref(note);
  ev.type = AL_EVENT_RETRY;
  ASSERT(al__tx_deltas_keep(&d, &ev, 100, &note));
  ASSERT_NULL(note);
  ev.type = AL_EVENT_STREAM_REQUEST_START;
  ASSERT(al__tx_deltas_keep(&d, &ev, 100, &note));
  ev.type = AL_EVENT_THINKING_DELTA;
  ASSERT(al__tx_deltas_keep(&d, &ev, 100, &note));
  ev.type = AL_EVENT_TOOL_INPUT_DELTA;
  ASSERT(al__tx_deltas_keep(&d, &ev, 100, &note));
  ASSERT(!al__tx_deltas_keep(&d, &ev, 100, &note));
  return 0;
}

static const char *g_tx; /* the transcript dt_run_until watches */

static bool tx_has_error(void *data) {
  size_t n;
  char *b = al_test_read_file(g_tx, &n);
  bool ok = b != NULL && strstr(b, "{\"type\":\"error\"") != NULL;

  (void)data;
  free(b);
  return ok;
}

/* The same bound in agentloopd (the rule is shared): a session limited
 * to 2 MiB replies gets a 2.4 MB reply; its subscriber still receives
 * every delta live, and the transcript keeps at most the bound of them,
 * the "elided" record and the api_error. */
TEST_IMPL(daemon_rejected_reply_bounded_in_transcript) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[512];
  char sid[64];
  char path[300];
  char piece[8001];
  char *yaml;
  char *tx;
  size_t len, i, live = 0;

  memset(piece, 'y', 8000);
  piece[8000] = '\0';
  yaml = al_malloc(9000);
  ASSERT_NOT_NULL(yaml);
  snprintf(yaml, 9000,
           "responses:\n  - reply:\n      content:\n"
           "        - repeat_text: {count: 300, text: \"%s\"}\n",
           piece);
  dt_init(&t, yaml);
  al_free(yaml);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"limits\":{\"reply_bytes\":\"2M\"}}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"hi\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  dt_wait_event(&c, "error", 0);
  for (i = 0; i < json_array_size(c.msgs); i++) {
    const char *ty = json_string_value(json_object_get(
        json_object_get(json_array_get(c.msgs, i), "params"), "type"));

    live += ty != NULL && strcmp(ty, "text_delta") == 0;
  }
  snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", t.state, sid);
  g_tx = path;
  dt_run_until(&t, tx_has_error, NULL);
  tx = al_test_read_file(path, &len);
  ASSERT_NOT_NULL(tx);
  if (len > AL_TX_REPLY_DELTAS_MAX + 64 * 1024) {
    AL_TEST_FAIL("the transcript holds %zu bytes of a rejected reply", len);
  }
  ASSERT_GE(live, 200); /* live, nothing was left out */
  ASSERT_NOT_NULL(strstr(tx, "{\"rec\":\"elided\""));
  ASSERT_NOT_NULL(strstr(tx, "\"ended_by\":\"api_error\""));
  free(tx);
  dt_finish(&t, cs, 1);
  return 0;
}
