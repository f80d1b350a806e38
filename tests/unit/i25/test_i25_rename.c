/* Issue 25, rename and export: session/rename through a real in-process
 * agentloopd (listed, kept in the chain, found again after a restart),
 * titles with control characters refused, a session picked by its title
 * (two with one title: refused, naming both), and agentloop export's
 * Markdown and JSONL of a transcript with tool calls: every call and
 * result, no planted secret, a tampered record named. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/export.h"
#include "client/names.h"
#include "daemon/internal.h"
#include "../daemon/dtest.h"
#include "session/session.h"

static bool exited(void *data) { return ((dt_t *)data)->exited; }

/* The session's entry in session/list. */
static json_t *list_entry(dt_client_t *c, int id, const char *sid) {
  json_t *r = dt_call(c, id, "session/list", NULL);
  json_t *s;
  size_t i;

  json_array_foreach(json_object_get(json_object_get(r, "result"), "sessions"),
                     i, s) {
    if (strcmp(json_string_value(json_object_get(s, "session")), sid) == 0) {
      return s;
    }
  }
  AL_TEST_FAIL("session %s not listed", sid);
  return NULL;
}

static void rename_to(dt_client_t *c, int id, const char *sid,
                      const char *title, int want_err) {
  json_t *p = json_pack("{s:s, s:s}", "session", sid, "title", title);
  char *ps = json_dumps(p, JSON_COMPACT);
  json_t *r = dt_call(c, id, "session/rename", ps);

  ASSERT_EQ(dt_err(r), want_err);
  free(ps);
  json_decref(p);
}

TEST_IMPL(i25_rename_listed_kept_and_resumed) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cl[] = {&c, &c2};
  char p[600], sid[64], txp[400];
  json_t *s;
  size_t n;

  dt_init(&t, "responses:\n"
              "  - reply: {content: [{text: one}]}\n"
              "  - reply: {content: [{text: two}]}\n");
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"first input\"}",
           sid);
  dt_call(&c, 4, "turn/send", p);
  n = dt_wait_event(&c, "final", 0);
  s = list_entry(&c, 5, sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")), "first input");
  ASSERT(json_is_false(json_object_get(s, "named")));

  rename_to(&c, 6, sid, "fix the flaky build", 0);
  s = list_entry(&c, 7, sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")),
                "fix the flaky build");
  ASSERT(json_is_true(json_object_get(s, "named")));
  /* The session goes on after it: the chain continues past the title. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"again\"}", sid);
  dt_call(&c, 8, "turn/send", p);
  dt_wait_event(&c, "final", n + 1);

  /* A new daemon lists it by its title from the scan, and keeps it when
   * the session is loaded. */
  al__daemon_shutdown(t.d);
  dt_run_until(&t, exited, &t);
  dt_wait_eof(&c);
  t.exited = false;
  snprintf(txp, sizeof(txp), "%s/sessions/%s.jsonl", t.state, sid);
  {
    al_tx_loaded_t l;

    ASSERT_EQ(al__tx_load(txp, false, 1 << 20, &l), 0);
    ASSERT_EQ(l.chain_breaks, 0);
    ASSERT_EQ(l.bad_lines, 0);
    ASSERT_STR_EQ(l.title, "fix the flaky build");
    ASSERT_EQ(al__history_count(&l.history), 4);
    al__tx_loaded_free(&l);
  }
  dt_start(&t);
  dt_connect(&t, &c2);
  dt_init_client(&c2);
  s = list_entry(&c2, 2, sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")),
                "fix the flaky build");
  ASSERT(json_is_true(json_object_get(s, "named")));
  {
    char id[128], why[512];
    json_t *r = dt_call(&c2, 3, "session/list", NULL);

    /* resume NAME: the chat picks it from the listing by its title. */
    ASSERT_EQ(al__session_pick(json_object_get(json_object_get(r, "result"),
                                               "sessions"),
                               "fix the flaky build", id, sizeof(id), why,
                               sizeof(why)),
              AL_PICK_FOUND);
    ASSERT_STR_EQ(id, sid);
  }
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  ASSERT_EQ(dt_err(dt_call(&c2, 4, "session/resume", p)), 0);
  s = list_entry(&c2, 5, sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")),
                "fix the flaky build");
  ASSERT(json_is_true(json_object_get(s, "loaded")));
  dt_assert_valid(&t);
  dt_finish(&t, cl, 2);
  return 0;
}

TEST_IMPL(i25_rename_refuses_control_chars) {
  static const char *const bad[] = {
      "red \x1b[31mtitle", "two\nlines", "tab\there", "del\x7f",
      "c1 \xc2\x9b" "31m", ""};
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char p[600], sid[64], txp[400], big[AL_TX_TITLE_MAX + 2];
  json_t *s;
  size_t i;

  dt_init(&t, NULL);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  for (i = 0; i < AL_ARRAY_SIZE(bad); i++) {
    rename_to(&c, 10 + (int)i, sid, bad[i], AL_RPC_INVALID_PARAMS);
  }
  memset(big, 'x', AL_TX_TITLE_MAX + 1);
  big[AL_TX_TITLE_MAX + 1] = '\0';
  rename_to(&c, 20, sid, big, AL_RPC_INVALID_PARAMS);
  big[AL_TX_TITLE_MAX] = '\0';
  rename_to(&c, 21, sid, big, 0); /* the bound itself is fine */
  rename_to(&c, 22, sid, "caf\xc3\xa9 \xe2\x9c\x93", 0); /* UTF-8 is */
  s = list_entry(&c, 23, sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")),
                "caf\xc3\xa9 \xe2\x9c\x93");
  al__daemon_shutdown(t.d);
  dt_run_until(&t, exited, &t);
  snprintf(txp, sizeof(txp), "%s/sessions/%s.jsonl", t.state, sid);
  {
    al_tx_loaded_t l;

    ASSERT_EQ(al__tx_load(txp, false, 1 << 20, &l), 0);
    ASSERT_EQ(l.chain_breaks, 0);
    ASSERT_STR_EQ(l.title, "caf\xc3\xa9 \xe2\x9c\x93");
    al__tx_loaded_free(&l);
  }
  dt_finish(&t, cl, 1);
  return 0;
}

/* ---- export ----------------------------------------------------------------- */

#define PLANTED_KEY "sk-ant-api03-PLANTEDsecretKEY0123456789abcdef"
#define PLANTED_TOKEN "tok_PLANTED_bearer_987654"
/* A configured key of no known shape: redacted only as the exporting
 * shell's $ANTHROPIC_API_KEY. */
#define CONF_KEY "conf9key9of9no9shape"

static void put_chained(FILE *f, const char *id, char prev[AL_TX_HASH_HEX + 1],
                        al_blob_t *rec) {
  char h[AL_TX_HASH_HEX + 1];
  al_blob_t *b;

  ASSERT_NOT_NULL(rec);
  b = al__tx_chain_record(id, prev, rec, h);
  ASSERT_NOT_NULL(b);
  fwrite(b->data, 1, b->len, f);
  memcpy(prev, h, sizeof(h));
  al__blob_unref(b);
  al__blob_unref(rec);
}

static void put_commit(FILE *f, const char *id, char prev[AL_TX_HASH_HEX + 1],
                       al_commit_kind_t kind, const char *msg) {
  put_chained(f, id, prev, al__tx_commit_record(kind, msg, strlen(msg)));
}

/* A session with a bash call (a bearer token in its command), a read
 * whose result holds a key and is long enough to be cut, a title, and a
 * sub-agent with a call of its own. */
static void write_session(const char *dir, const char *id) {
  char path[512], prev[AL_TX_HASH_HEX + 1] = "";
  al_tx_header_t h;
  FILE *f;
  char *big = malloc(20000);
  json_t *m;
  char *ms;

  memset(&h, 0, sizeof(h));
  h.cwd = (char *)"/w";
  h.model = (char *)"m";
  h.created_ms = 1;
  snprintf(path, sizeof(path), "%s/%s.jsonl", dir, id);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  put_chained(f, id, prev, al__tx_header_record(id, &h));
  put_commit(f, id, prev, AL_COMMIT_USER,
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
             "\"deploy it\"}]}");
  put_commit(f, id, prev, AL_COMMIT_ASSISTANT,
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
             "\"text\":\"calling\"},{\"type\":\"tool_use\",\"id\":\"tu_bash\","
             "\"name\":\"bash\",\"input\":{\"command\":\"curl -H "
             "'Authorization: Bearer " PLANTED_TOKEN "' https://x/\"}},"
             "{\"type\":\"tool_use\",\"id\":\"tu_read\",\"name\":\"read_file\","
             "\"input\":{\"path\":\".env\"}}]}");
  memset(big, 'y', 19999);
  big[19999] = '\0';
  m = json_pack("{s:s, s:[{s:s, s:s, s:s}, {s:s, s:s, s:s+}]}", "role", "user",
                "content", "type", "tool_result", "tool_use_id", "tu_bash",
                "content", "deployed with " CONF_KEY, "type", "tool_result",
                "tool_use_id",
                "tu_read", "content", "KEY=" PLANTED_KEY "\n", big);
  ms = json_dumps(m, JSON_COMPACT);
  put_commit(f, id, prev, AL_COMMIT_TOOL_RESULTS, ms);
  free(ms);
  json_decref(m);
  free(big);
  put_chained(f, id, prev, al__tx_title_record("deploy day"));
  {
    al_tx_child_t c = {.task_id = "t1", .session_id = "s_exp.t1",
                       .parent_session = id, .parent_call = "tu_task",
                       .agent = "general"};

    put_chained(f, id, prev, al__tx_child_record(&c));
  }
  put_commit(f, id, prev, AL_COMMIT_ASSISTANT,
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
             "\"text\":\"all done\"}]}");
  put_commit(f, id, prev, AL_COMMIT_COMPACTION,
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
             "\"text\",\"text\":\"deploy it\\n\\nSUMMARY: deployed ok\"}]}]}");
  fclose(f);

  /* The child's own transcript (its id as a file: s_exp-t1). */
  snprintf(path, sizeof(path), "%s/s_exp-t1.jsonl", dir);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  prev[0] = '\0';
  put_chained(f, "s_exp-t1", prev, al__tx_header_record("s_exp-t1", &h));
  put_commit(f, "s_exp-t1", prev, AL_COMMIT_USER,
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
             "\"check the logs\"}]}");
  put_commit(f, "s_exp-t1", prev, AL_COMMIT_ASSISTANT,
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
             "\"id\":\"tu_child\",\"name\":\"grep\",\"input\":{\"pattern\":"
             "\"x-api-key: " PLANTED_TOKEN "\"}}]}");
  put_commit(f, "s_exp-t1", prev, AL_COMMIT_TOOL_RESULTS,
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
             "\"tool_use_id\":\"tu_child\",\"content\":\"no match\"}]}");
  fclose(f);
}

/* The export of dir's session id as a string (malloc'd). */
static char *export_to_string(const char *dir, const char *id, bool md,
                              bool *broken, int *rc) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  al_export_opts_t o;
  char why[512];

  memset(&o, 0, sizeof(o));
  o.md = md;
  *rc = al__export_session(dir, id, &o, f, broken, why, sizeof(why));
  fclose(f);
  return s;
}

static bool has(const char *s, const char *what) {
  return strstr(s, what) != NULL;
}

TEST_IMPL(i25_export_md_jsonl_every_call_no_secret) {
  char dir[] = "/tmp/al-i25-XXXXXX";
  char id[128], why[512];
  bool broken;
  int rc;
  char *md;
  char *jl;
  size_t lines = 0;

  ASSERT_NOT_NULL(mkdtemp(dir));
  write_session(dir, "s_exp");
  ASSERT_EQ(al__export_find(dir, "deploy day", id, sizeof(id), why,
                            sizeof(why)),
            AL_PICK_FOUND);
  ASSERT_STR_EQ(id, "s_exp");

  md = export_to_string(dir, "s_exp", true, &broken, &rc);
  ASSERT_EQ(rc, 0);
  ASSERT(!broken);
  ASSERT(has(md, "deploy it"));
  ASSERT(has(md, "**Tool call** `bash` (`tu_bash`)"));
  ASSERT(has(md, "**Tool call** `read_file` (`tu_read`)"));
  ASSERT(has(md, "**Result** of `tu_bash`"));
  ASSERT(has(md, "deployed"));
  ASSERT(has(md, "**Result** of `tu_read`"));
  ASSERT(has(md, "more bytes of this result cut by export"));
  ASSERT(has(md, "all done"));
  ASSERT(has(md, "compacted here") && has(md, "SUMMARY: deployed ok"));
  ASSERT(has(md, "Sub-agent s_exp-t1"));
  ASSERT(has(md, "check the logs"));
  ASSERT(has(md, "**Tool call** `grep` (`tu_child`)"));
  ASSERT(has(md, "no match"));
  ASSERT(has(md, "Authorization: [REDACTED]"));
  ASSERT(!has(md, PLANTED_KEY));
  ASSERT(!has(md, "sk-ant-api03"));
  ASSERT(!has(md, PLANTED_TOKEN));

  jl = export_to_string(dir, "s_exp", false, &broken, &rc);
  ASSERT_EQ(rc, 0);
  ASSERT(!has(jl, "sk-ant-api03"));
  ASSERT(!has(jl, PLANTED_TOKEN));
  /* One message a line, the child's among them; results whole. */
  for (char *l = jl, *e; (e = strchr(l, '\n')) != NULL; l = e + 1) {
    json_t *o = json_loadb(l, (size_t)(e - l), 0, NULL);

    ASSERT_NOT_NULL(o);
    ASSERT(json_is_object(json_object_get(o, "message")));
    lines++;
    json_decref(o);
  }
  ASSERT_EQ(lines, 8);
  ASSERT(has(jl, "\"tu_bash\"") && has(jl, "\"tu_read\"") &&
         has(jl, "\"tu_child\"") && has(jl, "\"session\":\"s_exp-t1\""));
  ASSERT(!has(jl, "cut by export"));
  free(md);
  free(jl);
  dt_rmtree(dir);
  return 0;
}

TEST_IMPL(i25_export_tampered_says_chain_broken) {
  char dir[] = "/tmp/al-i25-XXXXXX";
  char path[512];
  bool broken;
  int rc;
  char *md;
  char *buf;
  char *at;
  FILE *f;
  long n;

  ASSERT_NOT_NULL(mkdtemp(dir));
  write_session(dir, "s_exp");
  /* An edit in place: "deployed" becomes "DEPLOYED", its hash kept. */
  snprintf(path, sizeof(path), "%s/s_exp.jsonl", dir);
  f = fopen(path, "r+");
  ASSERT_NOT_NULL(f);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  buf = malloc((size_t)n + 1);
  ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  at = strstr(buf, "\"deployed with");
  ASSERT_NOT_NULL(at);
  memcpy(at, "\"DEPLOYED", 9);
  rewind(f);
  fwrite(buf, 1, (size_t)n, f);
  fclose(f);
  free(buf);

  md = export_to_string(dir, "s_exp", true, &broken, &rc);
  ASSERT_EQ(rc, 0);
  ASSERT(broken);
  ASSERT(has(md, "hash chain is broken"));
  ASSERT(!has(md, "DEPLOYED"));
  ASSERT(has(md, "deploy it")); /* what verifies is still there */
  free(md);
  dt_rmtree(dir);
  return 0;
}

/* Each rule of docs/export.md, and what is left alone. */
TEST_IMPL(i25_export_redact_rules) {
  static const char *const cases[][2] = {
      {"key sk-ant-api03-abcdefghijklmnop9 end", "key [REDACTED] end"},
      {"sk-proj-0123456789abcdefXYZ", "[REDACTED]"},
      {"task-sk-0123456789abcdefXYZ", "task-sk-0123456789abcdefXYZ"},
      {"sk-short", "sk-short"},
      {"-H 'Authorization: Bearer abc.def' x", "-H 'Authorization: [REDACTED]' x"},
      {"Proxy-Authorization: Basic dXNlcjpw\nnext",
       "Proxy-Authorization: [REDACTED]\nnext"},
      {"X-Api-Key:k123\"", "X-Api-Key:[REDACTED]\""},
      {"token=bearer QWERTY12 rest", "token=bearer [REDACTED] rest"},
      {"use conf-9-key-9-value here", "use [REDACTED] here"},
      {"no secrets here", "no secrets here"},
  };
  static const char *const keys[] = {"conf-9-key-9-value", "short"};
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(cases); i++) {
    al_buf_t b;

    al_buf_init(&b, 1 << 20);
    ASSERT_EQ(al__export_redact(&b, cases[i][0], strlen(cases[i][0]), keys,
                                2),
              0);
    ASSERT_STR_EQ(b.data != NULL ? b.data : "", cases[i][1]);
    al_buf_free(&b);
  }
  return 0;
}

TEST_IMPL(i25_resume_name_two_matches_refused) {
  json_t *list = json_pack(
      "[{s:s, s:s, s:b}, {s:s, s:s, s:b}, {s:s, s:s, s:b}]", "session", "s_a",
      "title", "same", "named", 1, "session", "s_b", "title", "same", "named",
      1, "session", "s_c", "title", "only first input", "named", 0);
  char id[64], why[512];

  ASSERT_EQ(al__session_pick(list, "same", id, sizeof(id), why, sizeof(why)),
            AL_PICK_AMBIGUOUS);
  ASSERT(has(why, "s_a") && has(why, "s_b"));
  ASSERT_STR_EQ(id, "");
  /* A first input shown as the title is no name. */
  ASSERT_EQ(al__session_pick(list, "only first input", id, sizeof(id), why,
                             sizeof(why)),
            AL_PICK_NONE);
  ASSERT_EQ(al__session_pick(list, "s_c", id, sizeof(id), why, sizeof(why)),
            AL_PICK_FOUND);
  ASSERT_STR_EQ(id, "s_c");
  json_decref(list);
  return 0;
}

/* The command itself: a title names the session, the shell's key value is
 * redacted, a tampered transcript exits 3, two sessions with one title
 * are refused naming both. Blocking waits: the test's own thread, no
 * loop runs. */
static int run_export(const char *state, const char *args, const char *out) {
  char cmd[2048];
  int st;

  snprintf(cmd, sizeof(cmd),
           "env -i PATH=/usr/bin:/bin XDG_STATE_HOME='%s' "
           "ANTHROPIC_API_KEY=" CONF_KEY " '%s/agentloop' export %s "
           ">'%s' 2>&1",
           state, AL_BINARY_DIR, args, out);
  st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  char *s = NULL;
  size_t n = 0;

  ASSERT_NOT_NULL(f);
  ASSERT_NE(getdelim(&s, &n, '\0', f), -1);
  fclose(f);
  return s;
}

TEST_IMPL(i25_export_cli_by_name) {
  char root[] = "/tmp/al-i25c-XXXXXX";
  char dir[256], out[256], log[256], path[300];
  char *s;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(dir, sizeof(dir), "%s/agentloop", root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  snprintf(dir, sizeof(dir), "%s/agentloop/sessions", root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  write_session(dir, "s_exp");
  snprintf(out, sizeof(out), "%s/out.md", root);
  snprintf(log, sizeof(log), "%s/log", root);

  {
    char args[400];

    snprintf(args, sizeof(args), "'deploy day' --format md --out '%s'", out);
    ASSERT_EQ(run_export(root, args, log), 0);
  }
  s = slurp(out);
  ASSERT(has(s, "**Tool call** `bash` (`tu_bash`)"));
  ASSERT(has(s, "deployed with [REDACTED]"));
  ASSERT(!has(s, CONF_KEY) && !has(s, PLANTED_KEY) && !has(s, PLANTED_TOKEN));
  free(s);
  ASSERT_EQ(run_export(root, "s_exp --format jsonl", out), 0);
  s = slurp(out);
  ASSERT(has(s, "\"tu_read\"") && !has(s, CONF_KEY));
  free(s);
  ASSERT_EQ(run_export(root, "s_exp --format html", log), 2);

  /* Another session with the same title: neither is guessed. */
  write_session(dir, "s_two");
  ASSERT_EQ(run_export(root, "'deploy day' --format md", log), 1);
  s = slurp(log);
  ASSERT(has(s, "s_exp") && has(s, "s_two"));
  free(s);

  /* Tampered: written without the record, exit 3, said on stderr. */
  snprintf(path, sizeof(path), "%s/s_exp.jsonl", dir);
  s = slurp(path);
  {
    char *at = strstr(s, "deploy it");
    FILE *f = fopen(path, "w");

    ASSERT_NOT_NULL(at);
    at[0] = 'D';
    fputs(s, f);
    fclose(f);
  }
  free(s);
  ASSERT_EQ(run_export(root, "s_exp --format md", out), 3);
  s = slurp(out);
  ASSERT(has(s, "hash chain is broken"));
  ASSERT(!has(s, "Deploy it"));
  free(s);
  dt_rmtree(root);
  return 0;
}

/* ---- the chat: resume NAME, /rename --------------------------------------- */

typedef struct {
  uv_process_t proc;
  uv_poll_t poll;
  int master;
  char buf[65536];
  size_t len;
  const char *const *script; /* {wait_for, then_type} pairs, NULL-ended */
  size_t step;
  size_t from; /* the next step's text is looked for from here */
  int64_t status;
  bool exited;
} chat_t;

static void chat_on_pty(uv_poll_t *p, int status, int events) {
  chat_t *t = p->data;
  ssize_t n = 0;

  (void)events;
  if (status < 0) {
    uv_poll_stop(p);
    return;
  }
  while (t->len + 1 < sizeof(t->buf) &&
         (n = read(t->master, t->buf + t->len,
                   sizeof(t->buf) - t->len - 1)) > 0) {
    t->len += (size_t)n;
  }
  t->buf[t->len] = '\0';
  if (getenv("AL_TEST_DUMP") != NULL) {
    fprintf(stderr, "--- pty ---\n%s\n", t->buf);
  }
  if (n == 0 || (n < 0 && errno != EAGAIN)) {
    uv_poll_stop(p); /* the chat is gone: EIO on the master */
  }
  /* Each step waits for its text after the previous step's, then types. */
  while (t->script[t->step] != NULL) {
    const char *at = strstr(t->buf + t->from, t->script[t->step]);
    const char *type = t->script[t->step + 1];

    if (at == NULL) {
      break;
    }
    t->from = (size_t)(at - t->buf) + strlen(t->script[t->step]);
    if (type != NULL) {
      ASSERT_EQ(write(t->master, type, strlen(type)), (ssize_t)strlen(type));
    }
    t->step += 2;
  }
}

static void chat_on_exit(uv_process_t *p, int64_t status, int sig) {
  chat_t *t = p->data;

  (void)sig;
  t->status = status;
  t->exited = true;
  uv_close((uv_handle_t *)p, NULL);
}

static bool chat_gone(void *data) { return ((chat_t *)data)->exited; }

/* `agentloop resume NAME` on a terminal, against the test's daemon (its
 * socket from AGENTLOOP_SOCKET), played by script; returns its exit. */
static int64_t chat_run(dt_t *dt, const char *name,
                        const char *const *script, chat_t *t) {
  char bin[4096], e_sock[200], e_url[120], e_home[200], e_state[200];
  char *argv[] = {bin, "resume", (char *)name, NULL};
  char *env[] = {"PATH=/usr/bin:/bin", "TERM=xterm", "LANG=C.UTF-8",
                 "NO_COLOR=1", "XDG_CONFIG_HOME=/nonexistent",
                 "ANTHROPIC_API_KEY=k", e_sock, e_url, e_home, e_state, NULL};
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  struct winsize ws = {24, 120, 0, 0};
  int slave;
  size_t i;

  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  snprintf(e_sock, sizeof(e_sock), "AGENTLOOP_SOCKET=%s", dt->sock);
  snprintf(e_url, sizeof(e_url), "AGENTLOOP_BASE_URL=%s", dt->url);
  snprintf(e_home, sizeof(e_home), "HOME=%s", dt->root);
  snprintf(e_state, sizeof(e_state), "XDG_STATE_HOME=%s/chatstate", dt->root);
  memset(t, 0, sizeof(*t));
  t->script = script;
  t->master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT(t->master >= 0);
  ASSERT_EQ(grantpt(t->master), 0);
  ASSERT_EQ(unlockpt(t->master), 0);
  ASSERT_EQ(ioctl(t->master, TIOCSWINSZ, &ws), 0);
  slave = open(ptsname(t->master), O_RDWR | O_NOCTTY);
  ASSERT(slave >= 0);
  ASSERT_EQ(fcntl(t->master, F_SETFL, O_NONBLOCK), 0);
  memset(&po, 0, sizeof(po));
  for (i = 0; i < 3; i++) {
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = slave;
  }
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.cwd = dt->work;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = chat_on_exit;
  po.flags = UV_PROCESS_DETACHED;
  t->proc.data = t;
  ASSERT_EQ(uv_spawn(&dt->loop, &t->proc, &po), 0);
  close(slave);
  ASSERT_EQ(uv_poll_init(&dt->loop, &t->poll, t->master), 0);
  t->poll.data = t;
  ASSERT_EQ(uv_poll_start(&t->poll, UV_READABLE, chat_on_pty), 0);
  dt_run_until(dt, chat_gone, t);
  uv_poll_stop(&t->poll);
  uv_close((uv_handle_t *)&t->poll, NULL);
  close(t->master);
  return t->status;
}

static void create_as(dt_client_t *c, int id, const char *params,
                      char out[64]) {
  json_t *r = dt_call(c, id, "session/create", params);
  const char *sid = json_string_value(
      json_object_get(json_object_get(r, "result"), "session"));

  ASSERT_NOT_NULL(sid);
  snprintf(out, 64, "%s", sid);
}

TEST_IMPL(i25_chat_resume_by_name_and_rename) {
  static const char *const rename_script[] = {
      "resumed session", NULL, "> ", "/rename renamed in the chat\r",
      "session titled \"renamed in the chat\"", "/quit\r", NULL};
  static const char *const dup_script[] = {NULL};
  dt_t t;
  dt_client_t c;
  dt_client_t *cl[] = {&c};
  char p[600], sid[64], other[64], third[64];
  chat_t ch;
  json_t *s;

  al_test_timeout_s(30); /* two chats on a loaded box */
  dt_init(&t, NULL);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  /* dt_create answers its first create only: distinct request ids. */
  create_as(&c, 20, p, sid);
  create_as(&c, 21, p, other);
  create_as(&c, 22, p, third);
  rename_to(&c, 10, sid, "release notes", 0);
  rename_to(&c, 11, other, "dup", 0);
  rename_to(&c, 12, third, "dup", 0);

  /* By name: the chat opens that session, and /rename renames it. */
  if (chat_run(&t, "release notes", rename_script, &ch) != 0 ||
      ch.script[ch.step] != NULL) {
    AL_TEST_FAIL("the chat stopped at step %zu:\n%s", ch.step / 2, ch.buf);
  }
  ASSERT_NOT_NULL(strstr(ch.buf, sid));
  s = list_entry(&c, 13, sid);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")),
                "renamed in the chat");
  s = list_entry(&c, 14, other);
  ASSERT_STR_EQ(json_string_value(json_object_get(s, "title")), "dup");

  /* Two sessions titled "dup": neither is guessed, both are named. */
  ASSERT_EQ(chat_run(&t, "dup", dup_script, &ch), 1);
  if (strstr(ch.buf, other) == NULL || strstr(ch.buf, third) == NULL ||
      strstr(ch.buf, "more than one session") == NULL) {
    AL_TEST_FAIL("no refusal naming both:\n%s", ch.buf);
  }
  dt_finish(&t, cl, 1);
  return 0;
}
