/* issue 24: `agentloop batch run` (src/client/batch*.c, docs/batch.md),
 * the real binary against an in-process agentloop-mockllm (the harness of
 * tests/unit/wire/wire_cli.h): N jobs at a concurrency under N give one
 * result line each and a rerun asks the model nothing; a batch SIGKILLed
 * while a job waits for its second reply, rerun, gives exactly one line per
 * job and that job's session resumed (its first turn sent again, the
 * resume text after it); copy and git-worktree workspaces; a bad jobs line
 * is named FILE:LINE with its job id. Nothing sleeps: the kill follows
 * the mock's record of the request it waits on. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "test.h"
#include "unit/wire/wire_cli.h"

typedef struct {
  char root[64];
  char xdg_cfg[128], xdg_state[128];
  char *env[6];
} bt_env_t;

static void bt_env(bt_env_t *e) {
  snprintf(e->root, sizeof(e->root), "/tmp/al-batch-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(e->root));
  snprintf(e->xdg_cfg, sizeof(e->xdg_cfg), "XDG_CONFIG_HOME=%s/cfg", e->root);
  snprintf(e->xdg_state, sizeof(e->xdg_state), "XDG_STATE_HOME=%s/state",
           e->root);
  e->env[0] = "PATH=/usr/bin:/bin";
  e->env[1] = "NO_COLOR=1";
  e->env[2] = "ANTHROPIC_API_KEY=k";
  e->env[3] = e->xdg_cfg;
  e->env[4] = e->xdg_state;
  e->env[5] = NULL;
}

/* results.jsonl as {id: count} plus the parsed lines by id. */
static json_t *results(const char *root, json_t **by_id) {
  char path[256];
  char *text;
  size_t len;
  json_t *counts = json_object();
  char *line, *save = NULL;

  *by_id = json_object();
  snprintf(path, sizeof(path), "%s/out/results.jsonl", root);
  text = al_test_read_file(path, &len);
  if (text == NULL) {
    return counts;
  }
  for (line = strtok_r(text, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    json_t *o = json_loads(line, 0, NULL);
    const char *id = json_string_value(json_object_get(o, "id"));

    if (id == NULL) {
      AL_TEST_FAIL("results.jsonl: a bad line: %s", line);
    }
    json_object_set_new(counts, id,
                        json_integer(json_integer_value(
                                         json_object_get(counts, id)) +
                                     1));
    json_object_set(*by_id, id, o);
    json_decref(o);
  }
  free(text);
  return counts;
}

static void expect_once(const json_t *counts, const char *const *ids,
                        size_t n) {
  size_t i;

  ASSERT_EQ(json_object_size(counts), n);
  for (i = 0; i < n; i++) {
    if (json_integer_value(json_object_get(counts, ids[i])) != 1) {
      AL_TEST_FAIL("job %s: %lld result lines", ids[i],
                   (long long)json_integer_value(
                       json_object_get(counts, ids[i])));
    }
  }
}

static const char k_plain[] =
    "responses:\n"
    "  - reply: {content: [{text: 'plain answer'}]}\n";

TEST_IMPL(batch_jobs_once_concurrency_rerun_skips) {
  static const char *const ids[] = {"a1", "a2", "a3", "a4", "a5"};
  bt_env_t e;
  char jobs[256], out[256], line[512];
  const char *args[] = {"batch", "run", jobs, "--out", out, "--concurrency",
                        "2", "--output-format", "ndjson", NULL};
  json_t *counts, *by_id;
  wire_cli_t c;
  size_t i, reqs;
  FILE *f;

  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_write(e.root, "ws/README", "x\n");
  wire_cli_start(&c, k_plain);
  f = fopen(jobs, "w");
  ASSERT_NOT_NULL(f);
  for (i = 0; i < 5; i++) {
    snprintf(line, sizeof(line),
             "{\"id\":\"%s\",\"prompt\":\"job %s\",\"workspace\":\"%s/ws\","
             "\"base_url\":\"http://127.0.0.1:%d\"}\n",
             ids[i], ids[i], e.root, al_mockllm_port(c.mock));
    fputs(line, f);
  }
  fclose(f);
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("exit %d\nstdout: %s\nstderr: %s", (int)c.exit_status,
                 c.obuf, c.ebuf);
  }
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 5);
  for (i = 0; i < 5; i++) {
    json_t *r = json_object_get(by_id, ids[i]);

    ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "done");
    ASSERT_STR_EQ(json_string_value(json_object_get(r, "text")),
                  "plain answer");
    ASSERT_EQ(json_integer_value(json_object_get(r, "turns")), 1);
  }
  json_decref(counts);
  json_decref(by_id);
  /* ndjson: a start and a result line per job, then the end. */
  ASSERT_NOT_NULL(strstr(c.obuf, "\"type\":\"batch_end\""));
  ASSERT_NOT_NULL(strstr(c.obuf, "\"done\":5"));
  reqs = al_mockllm_record_count(c.mock);
  ASSERT_EQ(reqs, 5);

  /* Again: every job is finished; nothing is asked, nothing added. */
  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0 || strstr(c.obuf, "\"skipped\":5") == NULL) {
    AL_TEST_FAIL("rerun: exit %d\nstdout: %s\nstderr: %s",
                 (int)c.exit_status, c.obuf, c.ebuf);
  }
  ASSERT_EQ(al_mockllm_record_count(c.mock), reqs);
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 5);
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

static size_t count(const char *s, const char *needle) {
  size_t n = 0;

  while ((s = strstr(s, needle)) != NULL) {
    n++;
    s += strlen(needle);
  }
  return n;
}

/* ---- SIGKILL mid-way -------------------------------------------------------- */

/* SLOW's first reply lists the workspace (a committed turn), its second
 * request gets headers and then nothing: the batch is killed there. On the
 * rerun its third response wants the resumed history: the first turn's
 * tool result and the resume text. */
static const char k_kill[] =
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

typedef struct {
  wire_cli_t *c;
  uv_timer_t poll;
  bool killed;
} killer_t;

static void on_poll(uv_timer_t *t) {
  killer_t *k = t->data;
  size_t i, n = al_mockllm_record_count(k->c->mock);

  for (i = 0; i < n && !k->killed; i++) {
    const al_mockllm_record_t *r = al_mockllm_record_get(k->c->mock, i);

    if (r->track == 0 && r->response_index == 1) {
      ASSERT_EQ(uv_process_kill(&k->c->proc, SIGKILL), 0);
      k->killed = true;
    }
  }
  if (k->killed || k->c->exits > 0) {
    uv_close((uv_handle_t *)t, NULL);
  }
}

TEST_IMPL(batch_sigkill_rerun_resumes_exactly_once) {
  static const char *const ids[] = {"f1", "s1", "f2"};
  bt_env_t e;
  char jobs[256], out[256], text[2048];
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "1",
                        "--output-format", "ndjson", NULL};
  json_t *counts, *by_id;
  const al_mockllm_record_t *r;
  killer_t k;
  wire_cli_t c;
  char *body;
  size_t i, n, calls;

  al_test_timeout_s(30);
  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_write(e.root, "ws/MARKER-FILE", "x\n");
  wire_cli_start(&c, k_kill);
  snprintf(text, sizeof(text),
           "{\"id\":\"f1\",\"prompt\":\"first\",\"workspace\":\"%s/ws\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"s1\",\"prompt\":\"SLOW-JOB\",\"workspace\":\"%s/ws\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"f2\",\"prompt\":\"second\",\"workspace\":\"%s/ws\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, al_mockllm_port(c.mock),
           e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  memset(&k, 0, sizeof(k));
  k.c = &c;
  ASSERT_EQ(uv_timer_init(&c.loop, &k.poll), 0);
  k.poll.data = &k;
  ASSERT_EQ(uv_timer_start(&k.poll, on_poll, 2, 2), 0);
  wire_cli_run(&c, args, e.env);
  if (!k.killed) {
    AL_TEST_FAIL("the batch ended before its kill: exit %d\nstdout: %s\n"
                 "stderr: %s", (int)c.exit_status, c.obuf, c.ebuf);
  }
  /* Killed with -j 1: f1 finished before s1 started; s1 and f2 have no
   * line. */
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 1);
  json_decref(counts);
  json_decref(by_id);

  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("rerun: exit %d\nstdout: %s\nstderr: %s",
                 (int)c.exit_status, c.obuf, c.ebuf);
  }
  ASSERT_NOT_NULL(strstr(c.obuf, "{\"type\":\"job_started\",\"id\":\"s1\","
                                 "\"resumed\":true}"));
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 3);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(by_id, "s1"), "text")),
                "slow answer");
  json_decref(counts);
  json_decref(by_id);
  /* The resumed request carries what of the first turn was on disk, once:
   * the prompt, and the listing call with its result (the listing, or the
   * loader's "interrupted" answer) when their commits were written: the
   * next request may go out before a commit's fdatasync returned, so the
   * kill can come before either (then the prompt alone is resumed). */
  n = al_mockllm_record_count(c.mock);
  r = NULL;
  for (i = 0; i < n; i++) {
    const al_mockllm_record_t *x = al_mockllm_record_get(c.mock, i);

    if (x->track == 0 && x->response_index == 2) {
      r = x;
    }
  }
  ASSERT_NOT_NULL(r);
  ASSERT(r->valid);
  body = json_dumps(r->body, JSON_COMPACT);
  calls = count(body, "\"tool_use_id\":\"t1\"");
  if (count(body, "SLOW-JOB") != 1 || calls > 1 ||
      count(body, "MARKER-FILE") + count(body, "interrupted:") != calls) {
    AL_TEST_FAIL("the resumed request: %s", body);
  }
  fprintf(stderr, "the resumed request has %s\n",
          calls == 0                          ? "the prompt alone"
          : count(body, "MARKER-FILE") == 1 ? "the listing"
                                              : "the loader's answer");
  free(body);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* ---- workspaces ------------------------------------------------------------- */

static const char k_ws[] =
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: t1, name: list_directory, "
    "input: {path: '.'}}}]}\n"
    "  - reply: {content: [{text: 'listed'}]}\n"
    "on_exhausted: cycle\n";

static bool exists(const char *path) {
  struct stat st;

  return stat(path, &st) == 0;
}

TEST_IMPL(batch_copy_and_git_workspaces) {
  bt_env_t e;
  char jobs[256], out[256], text[2048], cmd[1024], path[256];
  char head1[64] = "";
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "1", NULL};
  const al_mockllm_record_t *r;
  json_t *counts, *by_id;
  wire_cli_t c;
  char *body;
  FILE *p;
  int rc;

  al_test_timeout_s(30);
  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_write(e.root, "src/COPY-ME", "x\n");
  wire_write(e.root, "repo/AT-COMMIT-1", "x\n");
  /* Test set-up, before any loop: a repository with two commits. */
  snprintf(cmd, sizeof(cmd),
           "cd %s/repo && git init -q . && git -c user.name=t -c "
           "user.email=t@t add . && git -c user.name=t -c user.email=t@t "
           "commit -qm one && git rev-parse HEAD && echo y > AFTER-COMMIT-1 "
           "&& git add . && git -c user.name=t -c user.email=t@t commit -qm "
           "two",
           e.root);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  ASSERT_NOT_NULL(fgets(head1, sizeof(head1), p));
  rc = pclose(p);
  ASSERT_EQ(rc, 0);
  head1[strcspn(head1, "\n")] = '\0';
  wire_cli_start(&c, k_ws);
  snprintf(text, sizeof(text),
           "{\"id\":\"cp\",\"prompt\":\"copy\",\"workspace\":{\"copy\":"
           "\"%s/src\"},\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"gt\",\"prompt\":\"git\",\"workspace\":{\"git\":"
           "\"%s/repo\",\"commit\":\"%s\"},\"base_url\":"
           "\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, head1,
           al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  /* Left by a run killed before these jobs' sessions began (a worktree
   * add cut short): made again, not used. */
  wire_write(e.root, "out/work/cp/STALE-FILE", "x\n");
  wire_write(e.root, "out/work/gt/STALE-FILE", "x\n");
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("exit %d\nstdout: %s\nstderr: %s", (int)c.exit_status,
                 c.obuf, c.ebuf);
  }
  ASSERT_EQ(al_mockllm_record_count(c.mock), 4);
  /* cp's listing (request 2) shows the copy; gt's (request 4) the first
   * commit's tree only. */
  r = al_mockllm_record_get(c.mock, 1);
  body = json_dumps(r->body, JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(body, "COPY-ME"));
  ASSERT_NULL(strstr(body, "STALE-FILE"));
  free(body);
  r = al_mockllm_record_get(c.mock, 3);
  body = json_dumps(r->body, JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(body, "AT-COMMIT-1"));
  ASSERT_NULL(strstr(body, "AFTER-COMMIT-1"));
  ASSERT_NULL(strstr(body, "STALE-FILE"));
  free(body);
  counts = results(e.root, &by_id);
  ASSERT_EQ(json_object_size(counts), 2);
  json_decref(counts);
  json_decref(by_id);
  /* Removed after (no --keep-workspaces): the copy, and the worktree
   * from the repository's list too. */
  snprintf(path, sizeof(path), "%s/out/work/cp", e.root);
  ASSERT(!exists(path));
  snprintf(path, sizeof(path), "%s/out/work/gt", e.root);
  ASSERT(!exists(path));
  snprintf(path, sizeof(path), "%s/src/COPY-ME", e.root);
  ASSERT(exists(path));
  snprintf(cmd, sizeof(cmd), "git -C %s/repo worktree list | wc -l", e.root);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  ASSERT_NOT_NULL(fgets(text, sizeof(text), p));
  pclose(p);
  ASSERT_EQ(atoi(text), 1);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

TEST_IMPL(batch_bad_jobs_line_names_file_line) {
  bt_env_t e;
  char jobs[256], out[256], text[1024], want[300], path[300];
  const char *args[] = {"batch", "run", jobs, "--out", out, NULL};
  wire_cli_t c;

  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  snprintf(text, sizeof(text),
           "{\"id\":\"ok1\",\"prompt\":\"p\",\"workspace\":\"%s\"}\n"
           "\n"
           "{\"id\":\"bad2\",\"prompt\":\"p\",\"workspace\":\"%s\","
           "\"limits\":{\"max_turns\":\"lots\"}}\n",
           e.root, e.root);
  wire_write(e.root, "jobs.jsonl", text);
  wire_cli_start(&c, NULL);
  wire_cli_run(&c, args, e.env);
  ASSERT_EQ(c.exit_status, 2);
  snprintf(want, sizeof(want), "%s:3: job bad2: limits.max_turns", jobs);
  if (strstr(c.ebuf, want) == NULL) {
    AL_TEST_FAIL("want '%s' in stderr: %s", want, c.ebuf);
  }
  /* Nothing ran, nothing written. */
  ASSERT_EQ(al_mockllm_record_count(c.mock), 0);
  snprintf(path, sizeof(path), "%s/out/results.jsonl", e.root);
  ASSERT(!exists(path));
  /* Not JSON: the line, no id yet. */
  wire_write(e.root, "jobs.jsonl", "{\"id\": \"x\",\n");
  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  ASSERT_EQ(c.exit_status, 2);
  snprintf(want, sizeof(want), "%s:1: not JSON", jobs);
  if (strstr(c.ebuf, want) == NULL) {
    AL_TEST_FAIL("want '%s' in stderr: %s", want, c.ebuf);
  }
  /* A line past the bound (1 MiB) is an error at its line. */
  {
    size_t big = ((size_t)1 << 20) + 64;
    char *line = malloc(big + 64);

    ASSERT_NOT_NULL(line);
    snprintf(line, 64, "{\"id\":\"ok\",\"prompt\":\"p\",\"workspace\":\"/\"}\n");
    memset(line + strlen(line), ' ', big);
    line[big] = '\n';
    line[big + 1] = '\0';
    wire_write(e.root, "jobs.jsonl", line);
    free(line);
  }
  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  ASSERT_EQ(c.exit_status, 2);
  snprintf(want, sizeof(want), "%s:2: line longer than 1048576 bytes", jobs);
  if (strstr(c.ebuf, want) == NULL) {
    AL_TEST_FAIL("want '%s' in stderr: %s", want, c.ebuf);
  }
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* A crash after a job's transcript was closed and before its result line
 * was whole: the line is missing or torn. The rerun cuts the torn line
 * off and gives the job's answer from its transcript, asking the model
 * nothing; the other job stays skipped. */
TEST_IMPL(batch_result_lost_recovered_from_transcript) {
  static const char *const ids[] = {"r1", "r2"};
  bt_env_t e;
  char jobs[256], out[256], text[1024], path[300];
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "1",
                        NULL};
  json_t *counts, *by_id;
  wire_cli_t c;
  char *res, *nl;
  size_t len, reqs;
  FILE *f;

  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_cli_start(&c, k_plain);
  snprintf(text, sizeof(text),
           "{\"id\":\"r1\",\"prompt\":\"one\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"r2\",\"prompt\":\"two\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  wire_cli_run(&c, args, e.env);
  ASSERT_EQ(c.exit_status, 0);
  reqs = al_mockllm_record_count(c.mock);
  ASSERT_EQ(reqs, 2);
  /* Keep r1's line; r2's becomes a torn half. */
  snprintf(path, sizeof(path), "%s/out/results.jsonl", e.root);
  res = al_test_read_file(path, &len);
  ASSERT_NOT_NULL(res);
  nl = strchr(res, '\n');
  ASSERT_NOT_NULL(nl);
  ASSERT_NOT_NULL(strstr(nl + 1, "\"r2\""));
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fwrite(res, 1, (size_t)(nl + 1 - res) + 12, f);
  fclose(f);
  free(res);

  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("rerun: exit %d\nstderr: %s", (int)c.exit_status, c.ebuf);
  }
  ASSERT_EQ(al_mockllm_record_count(c.mock), reqs);
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 2);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(by_id, "r2"), "text")),
                "plain answer");
  ASSERT(json_is_true(
      json_object_get(json_object_get(by_id, "r2"), "recovered")));
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* SIGINT while a job waits for its reply: the batch cancels it, writes no
 * line for it, exits 130; the rerun resumes it and skips the one done. */
static const char k_int[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'SLOW-JOB'}\n"
    "    responses:\n"
    "      - fault: {stall_after_headers: true}\n"
    "      - expect_request: {contains: 'was interrupted'}\n"
    "        reply: {content: [{text: 'slow answer'}]}\n";

typedef struct {
  wire_cli_t *c;
  uv_timer_t poll;
  bool sent;
} interrupter_t;

static void on_poll_int(uv_timer_t *t) {
  interrupter_t *k = t->data;
  size_t i, n = al_mockllm_record_count(k->c->mock);

  for (i = 0; i < n && !k->sent; i++) {
    if (al_mockllm_record_get(k->c->mock, i)->track == 0) {
      ASSERT_EQ(uv_process_kill(&k->c->proc, SIGINT), 0);
      k->sent = true;
    }
  }
  if (k->sent || k->c->exits > 0) {
    uv_close((uv_handle_t *)t, NULL);
  }
}

TEST_IMPL(batch_sigint_no_line_rerun_resumes) {
  static const char *const ids[] = {"f1", "s1"};
  bt_env_t e;
  char jobs[256], out[256], text[1024];
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "1",
                        "--output-format", "ndjson", NULL};
  json_t *counts, *by_id;
  interrupter_t k;
  wire_cli_t c;

  al_test_timeout_s(30);
  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_cli_start(&c, k_int);
  snprintf(text, sizeof(text),
           "{\"id\":\"f1\",\"prompt\":\"first\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"s1\",\"prompt\":\"SLOW-JOB\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  memset(&k, 0, sizeof(k));
  k.c = &c;
  ASSERT_EQ(uv_timer_init(&c.loop, &k.poll), 0);
  k.poll.data = &k;
  ASSERT_EQ(uv_timer_start(&k.poll, on_poll_int, 2, 2), 0);
  wire_cli_run(&c, args, e.env);
  if (!k.sent || c.exit_status != 130 ||
      strstr(c.obuf, "\"interrupted\":true") == NULL) {
    AL_TEST_FAIL("sent %d, exit %d\nstdout: %s\nstderr: %s", k.sent,
                 (int)c.exit_status, c.obuf, c.ebuf);
  }
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 1);
  json_decref(counts);
  json_decref(by_id);

  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0 ||
      strstr(c.obuf, "{\"type\":\"job_started\",\"id\":\"s1\","
                     "\"resumed\":true}") == NULL) {
    AL_TEST_FAIL("rerun: exit %d\nstdout: %s\nstderr: %s",
                 (int)c.exit_status, c.obuf, c.ebuf);
  }
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 2);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(by_id, "s1"), "text")),
                "slow answer");
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* limits.timeout_s: a job whose reply never comes is cancelled and ends
 * with outcome "timeout" (its line written: it is not run again); the
 * other job is not held up by it. */
static const char k_stall[] =
    "responses:\n"
    "  - reply: {content: [{text: 'fast answer'}]}\n"
    "tracks:\n"
    "  - match: {first_user_contains: 'SLOW-JOB'}\n"
    "    responses:\n"
    "      - fault: {stall_after_headers: true}\n";

TEST_IMPL(batch_job_timeout_outcome) {
  static const char *const ids[] = {"t1", "f1"};
  bt_env_t e;
  char jobs[256], out[256], text[1024];
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "2", NULL};
  json_t *counts, *by_id, *r;
  wire_cli_t c;

  al_test_timeout_s(20);
  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_cli_start(&c, k_stall);
  snprintf(text, sizeof(text),
           "{\"id\":\"t1\",\"prompt\":\"SLOW-JOB\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\","
           "\"limits\":{\"timeout_s\":0.2}}\n"
           "{\"id\":\"f1\",\"prompt\":\"fast\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 1) {
    AL_TEST_FAIL("exit %d\nstderr: %s", (int)c.exit_status, c.ebuf);
  }
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 2);
  r = json_object_get(by_id, "t1");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "outcome")), "timeout");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "error_kind")),
                "timeout");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(by_id, "f1"), "outcome")),
                "done");
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* A job bound for a provider's own endpoint without a key fails alone,
 * before anything is sent, as run refuses it (exit 2 there); the job with
 * a local base_url runs. */
TEST_IMPL(batch_job_without_key_fails_alone) {
  static const char *const ids[] = {"nokey", "local"};
  bt_env_t e;
  char jobs[256], out[256], text[1024];
  const char *args[] = {"batch", "run", jobs, "--out", out, NULL};
  json_t *counts, *by_id, *r;
  wire_cli_t c;

  bt_env(&e);
  e.env[2] = "AGENTLOOP_LOG=error"; /* no ANTHROPIC_API_KEY */
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_cli_start(&c, k_plain);
  snprintf(text, sizeof(text),
           "{\"id\":\"nokey\",\"prompt\":\"p\",\"workspace\":\"%s\"}\n"
           "{\"id\":\"local\",\"prompt\":\"p\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  wire_cli_run(&c, args, e.env);
  ASSERT_EQ(c.exit_status, 1);
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 2);
  r = json_object_get(by_id, "nokey");
  ASSERT_STR_EQ(json_string_value(json_object_get(r, "error_kind")),
                "config");
  if (strstr(json_string_value(json_object_get(r, "text")),
             "no API key for") == NULL) {
    AL_TEST_FAIL("nokey: %s", json_string_value(json_object_get(r, "text")));
  }
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(by_id, "local"), "outcome")),
                "done");
  ASSERT_EQ(al_mockllm_record_count(c.mock), 1);
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* Killed again and again: run r is SIGKILLed once the mock has taken r + 1
 * more requests (wherever the jobs are then: streaming, between a commit
 * and its sync, writing results), eight runs; then a run is left to
 * finish. Every job ends with exactly one line, each "done", and
 * every request (resumed histories too) passed the API's rules. */
static const char k_cycle[] =
    "responses:\n"
    "  - delay_ms: 3\n"
    "    reply: {content: [{text: 'cycled answer', chunks: 4}]}\n";

typedef struct {
  wire_cli_t *c;
  uv_timer_t poll;
  size_t at;
  bool killed;
} nth_killer_t;

static void on_poll_nth(uv_timer_t *t) {
  nth_killer_t *k = t->data;

  if (!k->killed && al_mockllm_record_count(k->c->mock) >= k->at) {
    ASSERT_EQ(uv_process_kill(&k->c->proc, SIGKILL), 0);
    k->killed = true;
  }
  if (k->killed || k->c->exits > 0) {
    uv_close((uv_handle_t *)t, NULL);
  }
}

TEST_IMPL(batch_kill_loop_exactly_once) {
  static const char *const ids[] = {"k1", "k2", "k3", "k4", "k5", "k6"};
  bt_env_t e;
  char jobs[256], out[256], line[512];
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "3", NULL};
  json_t *counts, *by_id;
  nth_killer_t k;
  wire_cli_t c;
  size_t i;
  int round, kills = 0;
  FILE *f;

  al_test_timeout_s(60);
  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_write(e.root, "ws/FILE", "x\n");
  wire_cli_start(&c, k_cycle);
  f = fopen(jobs, "w");
  ASSERT_NOT_NULL(f);
  for (i = 0; i < 6; i++) {
    snprintf(line, sizeof(line),
             "{\"id\":\"%s\",\"prompt\":\"job %s\",\"workspace\":\"%s/ws\","
             "\"base_url\":\"http://127.0.0.1:%d\"}\n",
             ids[i], ids[i], e.root, al_mockllm_port(c.mock));
    fputs(line, f);
  }
  fclose(f);
  for (round = 0; round < 9; round++) {
    c.olen = c.elen = 0;
    c.exits = c.eofs = 0;
    memset(&k, 0, sizeof(k));
    k.c = &c;
    /* Later rounds go further: some jobs finish (their lines written,
     * or not yet) before the kill. */
    k.at = al_mockllm_record_count(c.mock) + 1 + (size_t)round;
    if (round < 8) {
      ASSERT_EQ(uv_timer_init(&c.loop, &k.poll), 0);
      k.poll.data = &k;
      ASSERT_EQ(uv_timer_start(&k.poll, on_poll_nth, 1, 1), 0);
    }
    wire_cli_run(&c, args, e.env);
    /* wire_cli_run stops the loop once the CLI has exited; a run that
     * ended before the poll saw its threshold leaves the timer armed,
     * and it must not outlive k (or the mock). */
    if (round < 8 && !uv_is_closing((uv_handle_t *)&k.poll)) {
      uv_close((uv_handle_t *)&k.poll, NULL);
      uv_run(&c.loop, UV_RUN_NOWAIT);
    }
    kills += k.killed;
    if (!k.killed) {
      if (c.exit_status != 0) {
        AL_TEST_FAIL("round %d: exit %d\nstderr: %s", round,
                     (int)c.exit_status, c.ebuf);
      }
      break;
    }
  }
  counts = results(e.root, &by_id);
  expect_once(counts, ids, 6);
  for (i = 0; i < 6; i++) {
    ASSERT_STR_EQ(json_string_value(json_object_get(
                      json_object_get(by_id, ids[i]), "outcome")),
                  "done");
  }
  for (i = 0; i < al_mockllm_record_count(c.mock); i++) {
    if (!al_mockllm_record_get(c.mock, i)->valid) {
      AL_TEST_FAIL("request %zu refused: %s", i,
                   al_mockllm_record_get(c.mock, i)->error);
    }
  }
  fprintf(stderr, "%d kills, %zu requests\n", kills,
          al_mockllm_record_count(c.mock));
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}

/* A job's "agent": the definition's prompt, model and tools make the
 * job's main agent (the job without one keeps the configuration's); a
 * name no definition has refuses the batch at its line, before anything
 * runs. */
TEST_IMPL(batch_job_agent_definition) {
  bt_env_t e;
  char jobs[256], out[256], text[1024], want[512];
  const char *args[] = {"batch", "run", jobs, "--out", out, "-j", "1", NULL};
  json_t *counts, *by_id;
  wire_cli_t c;
  size_t i;
  int seen = 0;

  al_test_timeout_s(30);
  bt_env(&e);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", e.root);
  snprintf(out, sizeof(out), "%s/out", e.root);
  wire_write(e.root, "cfg/agentloop/agents/reviewer.md",
             "---\nname: reviewer\ndescription: Reviews a change\n"
             "tools: read_file, grep\nmodel: m-reviewer\n---\n"
             "REVIEWER-SYSTEM-PROMPT\n");
  wire_write(e.root, "ws/FILE", "x\n");
  wire_cli_start(&c, k_plain);
  snprintf(text, sizeof(text),
           "{\"id\":\"r1\",\"prompt\":\"job r1\",\"workspace\":\"%s/ws\","
           "\"agent\":\"reviewer\",\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"u1\",\"prompt\":\"job u1\",\"workspace\":\"%s/ws\","
           "\"agent\":\"nosuch\",\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  wire_cli_run(&c, args, e.env);
  ASSERT_EQ(c.exit_status, 2);
  snprintf(want, sizeof(want),
           "%s:2: job u1: no agent definition named 'nosuch'", jobs);
  if (strstr(c.ebuf, want) == NULL) {
    AL_TEST_FAIL("want '%s' in stderr: %s", want, c.ebuf);
  }
  ASSERT_EQ(al_mockllm_record_count(c.mock), 0);

  snprintf(text, sizeof(text),
           "{\"id\":\"r1\",\"prompt\":\"job r1\",\"workspace\":\"%s/ws\","
           "\"agent\":\"reviewer\",\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"p1\",\"prompt\":\"job p1\",\"workspace\":\"%s/ws\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           e.root, al_mockllm_port(c.mock), e.root, al_mockllm_port(c.mock));
  wire_write(e.root, "jobs.jsonl", text);
  c.olen = c.elen = 0;
  c.exits = c.eofs = 0;
  wire_cli_run(&c, args, e.env);
  if (c.exit_status != 0) {
    AL_TEST_FAIL("exit %d\nstderr: %s", (int)c.exit_status, c.ebuf);
  }
  counts = results(e.root, &by_id);
  for (i = 0; i < al_mockllm_record_count(c.mock); i++) {
    const json_t *body = al_mockllm_record_get(c.mock, i)->body;
    char *s = json_dumps(body, JSON_COMPACT);
    const json_t *tools = json_object_get(body, "tools");
    bool reviewer = strstr(s, "job r1") != NULL;

    ASSERT(al_mockllm_record_get(c.mock, i)->valid);
    if (reviewer) {
      seen |= 1;
      ASSERT_STR_EQ(json_string_value(json_object_get(body, "model")),
                    "m-reviewer");
      ASSERT_NOT_NULL(strstr(s, "REVIEWER-SYSTEM-PROMPT"));
      ASSERT_EQ(json_array_size(tools), 2);
      ASSERT_NULL(strstr(s, "\"name\":\"write_file\""));
      ASSERT_NOT_NULL(strstr(s, "\"name\":\"grep\""));
    } else {
      seen |= 2;
      ASSERT_NULL(strstr(s, "REVIEWER-SYSTEM-PROMPT"));
      ASSERT_NOT_NULL(strstr(s, "\"name\":\"write_file\""));
      ASSERT(strcmp(json_string_value(json_object_get(body, "model")),
                    "m-reviewer") != 0);
    }
    free(s);
  }
  ASSERT_EQ(seen, 3);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(by_id, "r1"), "outcome")),
                "done");
  json_decref(counts);
  json_decref(by_id);
  wire_cli_finish(&c);
  al_test_rm_tree(e.root);
  return 0;
}
