/* The daemon follows the client (docs/protocol.md): session/create carries
 * the client's model, base URL and key; session/configure (the chat's
 * /model) switches the model for the next run and keeps the history; the
 * key never reaches the transcript; a later load keeps the new model. */
#include <unistd.h>

#include "dtest.h"
#include "session/session.h"

static const char *two_replies =
    "responses:\n"
    "  - reply: {content: [{text: one}]}\n"
    "  - reply: {content: [{text: two}]}\n"
    "  - reply: {content: [{text: three}]}\n";

static const char *rec_model(const dt_t *t, size_t i) {
  const al_mockllm_record_t *r = al_mockllm_record_get(t->mock, i);

  ASSERT_NOT_NULL(r);
  return json_string_value(json_object_get(r->body, "model"));
}

static bool exited(void *data) {
  return ((dt_t *)data)->exited;
}

TEST_IMPL(daemon_follows_client_settings) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char sid[64];
  json_t *r;
  size_t at;
  const al_mockllm_record_t *rec;
  char path[400];
  FILE *f;
  char line[8192];
  bool key_in_file = false;

  dt_init(&t, two_replies);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  /* The daemon was started with model "mock-model" and key "test-key";
   * this client's shell says otherwise. */
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"model\":\"m-shell\",\"base_url\":\"%s\","
           "\"api_key\":\"k-from-the-shell-0123\",\"max_tokens\":321,"
           "\"sandbox\":\"auto\",\"timeouts\":{\"tool_ms\":1234}}",
           t.work, t.url);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"first\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  at = dt_wait_event(&c, "final", 0);
  ASSERT_STR_EQ(rec_model(&t, 0), "m-shell");
  rec = al_mockllm_record_get(t.mock, 0);
  ASSERT_STR_EQ(json_string_value(json_object_get(rec->headers, "x-api-key")),
                "k-from-the-shell-0123");
  ASSERT_EQ(json_integer_value(json_object_get(rec->body, "max_tokens")), 321);
  {
    char q[512];

    snprintf(q, sizeof(q), "{\"cwd\":\"%s\",\"sandbox\":\"loose\"}",
             t.work);
    ASSERT_EQ(dt_err(dt_call(&c, 40, "session/create", q)),
              AL_RPC_INVALID_PARAMS);
    snprintf(q, sizeof(q), "{\"cwd\":\"%s\",\"max_turns\":0}", t.work);
    ASSERT_EQ(dt_err(dt_call(&c, 41, "session/create", q)),
              AL_RPC_INVALID_PARAMS);
    snprintf(q, sizeof(q), "{\"cwd\":\"%s\",\"timeouts\":{\"nap_ms\":1}}",
             t.work);
    ASSERT_EQ(dt_err(dt_call(&c, 42, "session/create", q)),
              AL_RPC_INVALID_PARAMS);
  }

  /* /model: the next run uses the new model, with the history. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"model\":\"m-next\"}", sid);
  r = dt_call(&c, 5, "session/configure", p);
  ASSERT_EQ(dt_err(r), 0);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(r, "result"), "model")),
                "m-next");
  ASSERT(json_is_true(json_object_get(json_object_get(r, "result"),
                                      "changed")));
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"second\"}", sid);
  r = dt_call(&c, 6, "turn/send", p);
  ASSERT_EQ(dt_err(r), 0);
  /* Runs go on numbering where they were. */
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(r, "result"),
                                               "run")),
            2);
  dt_wait_event(&c, "final", at + 1);
  ASSERT_STR_EQ(rec_model(&t, 1), "m-next");
  rec = al_mockllm_record_get(t.mock, 1);
  ASSERT_EQ(json_array_size(json_object_get(rec->body, "messages")), 3);
  ASSERT_STR_EQ(json_string_value(json_object_get(rec->headers, "x-api-key")),
                "k-from-the-shell-0123");
  dt_assert_valid(&t);

  /* Bad values are refused and the session keeps its settings. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"provider\":\"nope\"}", sid);
  r = dt_call(&c, 7, "session/configure", p);
  ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"base_url\":\"ftp://x\"}",
           sid);
  r = dt_call(&c, 8, "session/configure", p);
  ASSERT_EQ(dt_err(r), AL_RPC_INVALID_PARAMS);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"third\"}", sid);
  dt_call(&c, 9, "turn/send", p);
  dt_wait_event(&c, "final", at + 2);
  ASSERT_STR_EQ(rec_model(&t, 2), "m-next");
  al__daemon_shutdown(t.d); /* flushes the transcript */
  dt_run_until(&t, exited, &t);

  /* The transcript keeps the new model and never the key. */
  snprintf(path, sizeof(path), "%s/sessions/%s.jsonl", t.state, sid);
  f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  {
    bool new_header = false;

    while (fgets(line, sizeof(line), f) != NULL) {
      key_in_file |= strstr(line, "k-from-the-shell") != NULL;
      new_header |= strstr(line, "\"rec\":\"session\"") != NULL &&
                    strstr(line, "m-next") != NULL &&
                    strstr(line, "\"tool_ms\":1234") != NULL &&
                    strstr(line, "\"max_tokens\":321") != NULL;
    }
    ASSERT(new_header);
  }
  fclose(f);
  ASSERT(!key_in_file);
  /* A reload takes the later header: it is in the hash chain too. */
  {
    al_tx_loaded_t l;

    ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
    ASSERT_EQ(l.chain_breaks, 0);
    ASSERT_EQ(l.bad_lines, 0);
    ASSERT_STR_EQ(l.header.model, "m-next");
    al__tx_loaded_free(&l);
  }
  dt_finish(&t, cs, 1);
  return 0;
}

/* The configuration's permission rules reach the daemon's gate: a deny
 * pattern refuses `rm -rf`, an ask pattern makes `git status` wait for a
 * watcher. */
static const char *rules_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: t1, name: bash, input: {command: \"rm -rf "
    "zz\"}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: t2, name: bash, input: {command: \"git "
    "status\"}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: done\n";

TEST_IMPL(daemon_permission_rules_from_client) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char sid[64];
  size_t i;
  const char *content;

  dt_init(&t, rules_yaml);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"deny_tools\":[\"bash(rm *)\"],"
           "\"ask_tools\":[\"bash(git *)\"]}",
           t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"go\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  i = dt_wait_event(&c, "tool_use_completed", 0);
  content = json_string_value(json_object_get(
      json_object_get(json_array_get(c.msgs, i), "params"), "content"));
  ASSERT_NOT_NULL(content);
  ASSERT_NOT_NULL(strstr(content, "deny list"));
  /* The git call waits for a watcher. */
  i = dt_wait_event(&c, "approval_required", i);
  {
    const char *req = json_string_value(json_object_get(
        json_object_get(json_array_get(c.msgs, i), "params"), "request"));
    char reqbuf[64];

    ASSERT_NOT_NULL(req);
    snprintf(reqbuf, sizeof(reqbuf), "%s", req);
    snprintf(p, sizeof(p),
             "{\"session\":\"%s\",\"request\":\"%s\",\"decision\":"
             "\"deny\"}",
             sid, reqbuf);
    dt_call(&c, 5, "approval/respond", p);
  }
  dt_wait_event(&c, "final", i);
  /* Bad rule lists are refused. */
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"allow_tools\":\"bash\"}",
           t.work);
  ASSERT_EQ(dt_err(dt_call(&c, 6, "session/create", p)),
            AL_RPC_INVALID_PARAMS);
  dt_finish(&t, cs, 1);
  return 0;
}

/* The configuration's denied paths reach the daemon's file tools. */
static const char *denied_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: t1, name: read_file, input: {path: "
    "\"secret.txt\"}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: done\n";

TEST_IMPL(daemon_denied_paths_from_client) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char path[300];
  char sid[64];
  size_t i;
  const char *content;
  FILE *f;

  dt_init(&t, denied_yaml);
  snprintf(path, sizeof(path), "%s/secret.txt", t.work);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("the-secret-canary\n", f);
  fclose(f);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p),
           "{\"cwd\":\"%s\",\"paths\":{\"denied\":[\"%s\"]}}", t.work, path);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"read\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  i = dt_wait_event(&c, "tool_use_completed", 0);
  content = json_string_value(json_object_get(
      json_object_get(json_array_get(c.msgs, i), "params"), "content"));
  ASSERT_NOT_NULL(content);
  ASSERT_NULL(strstr(content, "the-secret-canary"));
  ASSERT(json_is_true(json_object_get(
      json_object_get(json_array_get(c.msgs, i), "params"), "is_error")));
  dt_wait_event(&c, "final", i);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"paths\":{\"denied\":[\"rel\"]}}",
           t.work);
  ASSERT_EQ(dt_err(dt_call(&c, 5, "session/create", p)),
            AL_RPC_INVALID_PARAMS);
  dt_finish(&t, cs, 1);
  return 0;
}

/* "network": true at session/create (the client's sandbox.network) lets
 * the session's bash keep the host's network namespace; without it bash
 * has a private one. The flag is kept in the transcript header. */
static const char *ns_yaml =
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: n1, name: bash, input: "
    "{command: 'readlink /proc/self/ns/net'}}}]}\n"
    "  - reply: {content: [{text: done}]}\n"
    "  - reply: {content: [{tool_use: {id: n2, name: bash, input: "
    "{command: 'readlink /proc/self/ns/net'}}}]}\n"
    "  - reply: {content: [{text: done}]}\n";

static bool ns_shared(dt_client_t *c, size_t i, const char *host_ns) {
  const char *content = json_string_value(json_object_get(
      json_object_get(json_array_get(c->msgs, i), "params"), "content"));

  ASSERT_NOT_NULL(content);
  ASSERT_NOT_NULL(strstr(content, "net:["));
  return strstr(content, host_ns) != NULL;
}

TEST_IMPL(daemon_network_from_client) {
  dt_t t;
  dt_client_t c;
  dt_client_t *cs[] = {&c};
  char p[1024];
  char sid[64];
  char host_ns[64];
  ssize_t n;
  size_t i;
  int pass;

  al_test_need_bwrap();
  n = readlink("/proc/self/ns/net", host_ns, sizeof(host_ns) - 1);
  ASSERT(n > 0);
  host_ns[n] = '\0';
  dt_init(&t, ns_yaml);
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\",\"network\":\"yes\"}", t.work);
  ASSERT_EQ(dt_err(dt_call(&c, 90, "session/create", p)),
            AL_RPC_INVALID_PARAMS);
  i = 0;
  for (pass = 0; pass < 2; pass++) {
    snprintf(p, sizeof(p),
             "{\"cwd\":\"%s\",\"sandbox\":\"required\"%s}", t.work,
             pass == 1 ? ",\"network\":true" : "");
    {
      /* dt_create's fixed request id would find the first answer again. */
      json_t *r = dt_call(&c, 30 + pass, "session/create", p);
      const char *id = json_string_value(
          json_object_get(json_object_get(r, "result"), "session"));

      ASSERT_NOT_NULL(id);
      snprintf(sid, sizeof(sid), "%s", id);
    }
    snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
    dt_call(&c, 10 + pass * 10, "session/subscribe", p);
    snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"ns\"}", sid);
    dt_call(&c, 11 + pass * 10, "turn/send", p);
    i = dt_wait_event(&c, "tool_use_completed", i);
    ASSERT_EQ(ns_shared(&c, i, host_ns), pass == 1);
    i = dt_wait_event(&c, "final", i);
  }
  dt_finish(&t, cs, 1);
  return 0;
}
