/* Micro-compaction (docs/context.md): which results are cleared, the
 * placeholder, stickiness and byte-stable prefixes, the tool output cache
 * and read_tool_output, through the agent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_fx.h"
#include "loop/micro.h"
#include "test.h"

#define jstr fx_jstr

static const char *const compactable[] = {"read_file", "bash", NULL};

/* [user, (assistant tool_use i, user result i) x n] with results of
 * `bytes` bytes; call 2 is write_file (not compactable). */
static json_t *history(int n, size_t bytes) {
  json_t *msgs = json_array();
  char *big = malloc(bytes + 1);
  int i;

  memset(big, 'x', bytes);
  big[bytes] = '\0';
  json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role", "user",
                                        "content", "type", "text", "text", "go"));
  for (i = 1; i <= n; i++) {
    char id[16];

    snprintf(id, sizeof(id), "t%d", i);
    json_array_append_new(
        msgs, json_pack("{s:s, s:[{s:s, s:s, s:s, s:{}}]}", "role",
                        "assistant", "content", "type", "tool_use", "id", id,
                        "name", i == 2 ? "write_file" : "read_file", "input"));
    json_array_append_new(
        msgs, json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "role", "user", "content",
                        "type", "tool_result", "tool_use_id", id, "content",
                        big));
  }
  free(big);
  return msgs;
}

static const json_t *result_of(const json_t *msgs, int i) {
  return json_array_get(json_object_get(json_array_get(msgs, (size_t)(2 * i)),
                                        "content"),
                        0);
}

TEST_IMPL(micro_clears_old_results) {
  json_t *msgs = history(6, 8000);
  json_t *before = json_deep_copy(msgs);
  json_t *orig = json_object();
  json_t *ids = json_array();
  al_micro_options_t o = {compactable, 3, 1000, 1.0};
  char ph[512];
  char *s;
  int i;

  /* Results 1..6, 2 is write_file: compactable 1,3,4,5,6; the 3 newest
   * (4,5,6) stay: 1 and 3 are cleared. */
  ASSERT(al__micro_compact(msgs, &o, orig, ids) >= 3900);
  s = json_dumps(ids, JSON_COMPACT);
  ASSERT_STR_EQ(s, "[\"t1\",\"t3\"]");
  free(s);
  al__micro_placeholder(ph, sizeof(ph), "read_file", "t1", 8000);
  ASSERT_STR_EQ(jstr(result_of(msgs, 1), "content"), ph);
  ASSERT_STR_EQ(ph, "[agentloop cleared this tool output to save context: "
                    "the output of read_file (call t1, 8000 bytes). Call "
                    "read_tool_output with {\"call_id\": \"t1\"} to read it "
                    "again.]");
  ASSERT(al__micro_is_cleared(result_of(msgs, 3)));
  for (i = 4; i <= 6; i++) {
    ASSERT(!al__micro_is_cleared(result_of(msgs, i)));
  }
  ASSERT(json_equal(result_of(msgs, 2), result_of(before, 2)));
  /* Ids and pairing untouched; the original is kept. */
  for (i = 1; i <= 6; i++) {
    ASSERT_STR_EQ(jstr(result_of(msgs, i), "tool_use_id"),
                  jstr(result_of(before, i), "tool_use_id"));
    ASSERT(json_equal(json_array_get(msgs, (size_t)(2 * i - 1)),
                      json_array_get(before, (size_t)(2 * i - 1))));
  }
  ASSERT(json_equal(json_object_get(orig, "t1"),
                    json_object_get(result_of(before, 1), "content")));
  /* The copy made before was not changed (copy on write). */
  ASSERT(!al__micro_is_cleared(result_of(before, 1)));
  /* Sticky and stable: a second pass clears nothing, changes nothing. */
  {
    json_t *again = json_deep_copy(msgs);

    ASSERT_EQ(al__micro_compact(msgs, &o, NULL, NULL), 0);
    ASSERT(json_equal(msgs, again));
    json_decref(again);
  }
  json_decref(orig);
  json_decref(ids);
  json_decref(before);
  json_decref(msgs);

  /* Below the minimum: nothing at all. */
  msgs = history(6, 8000);
  before = json_deep_copy(msgs);
  o.min_tokens = 5000;
  ASSERT_EQ(al__micro_compact(msgs, &o, NULL, NULL), 0);
  ASSERT(json_equal(msgs, before));
  json_decref(before);
  json_decref(msgs);
  /* Three or fewer compactable results: nothing. */
  msgs = history(4, 8000);
  o.min_tokens = 1;
  ASSERT_EQ(al__micro_compact(msgs, &o, NULL, NULL), 0);
  json_decref(msgs);
  return 0;
}

/* A message as compact JSON without its cache_control marks. */
static char *dump_unmarked(const json_t *m) {
  json_t *c = json_deep_copy(m);
  json_t *b;
  size_t i;
  char *s;

  json_array_foreach(json_object_get(c, "content"), i, b) {
    json_object_del(b, "cache_control");
  }
  s = json_dumps(c, JSON_COMPACT);
  json_decref(c);
  return s;
}

/* Through the agent: five 8 KB reads, then the model reads the first one
 * back. The micro-compaction clears t1 and t2 before request 5, every
 * later request starts with the same bytes as the one before it (the
 * placeholder never changes), the server accepted everything, and
 * read_tool_output returns the original from memory and from disk. */
TEST_IMPL(micro_through_agent) {
  fx_t f;
  char dir[] = "/tmp/al-micro-XXXXXX";
  char path[300];
  char big[8001];
  const json_t *ev;
  const json_t *r;
  char *ids;
  size_t i;
  int k;

  ASSERT_NOT_NULL(mkdtemp(dir));
  fx_init(&f, "usage_from_request: {bytes_per_token: 4}\n"
              "responses:\n"
              "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f3}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: f4}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t5, name: read_file, input: {path: f5}}}]}\n"
              "  - reply: {content: [{tool_use: {id: r1, name: read_tool_output, input: {call_id: t1}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.micro_min_tokens = 2000;
  snprintf(path, sizeof(path), "%s/out", dir);
  f.opts.tool_output_dir = path;
  fx_start(&f);
  for (k = 1; k <= 5; k++) {
    char name[8];

    memset(big, 'a' + k, sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    snprintf(name, sizeof(name), "f%d", k);
    fx_write(&f, name, big);
  }
  fx_run(&f, "read all five");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_requests(&f), 7);
  ASSERT_EQ(fx_count(&f, "micro_compaction"), 1);
  ev = fx_event(&f, fx_find(&f, "micro_compaction", NULL, 0));
  ids = json_dumps(json_object_get(ev, "call_ids"), JSON_COMPACT);
  ASSERT_STR_EQ(ids, "[\"t1\",\"t2\"]");
  free(ids);
  ASSERT(json_integer_value(json_object_get(ev, "tokens_saved")) >= 2000);
  /* It came right before the 6th request (5 results in the history). */
  ASSERT_EQ(fx_find(&f, "micro_compaction", NULL, 0) + 1,
            fx_find(&f, "stream_request_start", NULL, 5));
  r = fx_tool_result(&f, 5, "t1");
  ASSERT(al__micro_is_cleared(r));
  ASSERT(!al__micro_is_cleared(fx_tool_result(&f, 5, "t3")));
  ASSERT(!al__micro_is_cleared(fx_tool_result(&f, 4, "t1")));
  /* Byte-stable prefix: request 6's messages start with request 5's. */
  {
    const json_t *m5 = json_object_get(fx_request(&f, 5)->body, "messages");
    const json_t *m6 = json_object_get(fx_request(&f, 6)->body, "messages");

    ASSERT(json_array_size(m6) > json_array_size(m5));
    /* cache_control marks move with the end (prompt caching); the cached
     * content is everything else. */
    for (i = 0; i < json_array_size(m5); i++) {
      char *a = dump_unmarked(json_array_get(m5, i));
      char *b = dump_unmarked(json_array_get(m6, i));

      ASSERT_STR_EQ(b, a);
      free(a);
      free(b);
    }
  }
  /* read_tool_output gave the original back (from memory). */
  memset(big, 'a' + 1, sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  r = fx_tool_result(&f, 6, "r1");
  ASSERT_STR_EQ(jstr(r, "content"), big);
  fx_finish(&f);
  /* And the disk cache holds it (written off the loop before close). */
  snprintf(path, sizeof(path), "%s/out/t1.txt", dir);
  {
    size_t len;
    char *disk = al_test_read_file(path, &len);

    ASSERT_NOT_NULL(disk);
    ASSERT_STR_EQ(disk, big);
    free(disk);
  }
  unlink(path);
  snprintf(path, sizeof(path), "%s/out/t2.txt", dir);
  unlink(path);
  snprintf(path, sizeof(path), "%s/out", dir);
  rmdir(path);
  rmdir(dir);
  return 0;
}

/* A saved output is read back from disk by a later agent (a resumed
 * session has no memory of it). */
TEST_IMPL(micro_read_back_from_disk) {
  fx_t f;
  char dir[] = "/tmp/al-micro-XXXXXX";
  char path[300];
  FILE *fp;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/toolu_9.txt", dir);
  fp = fopen(path, "w");
  ASSERT_NOT_NULL(fp);
  fputs("the old output", fp);
  fclose(fp);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: read_tool_output, input: {call_id: toolu_9}}},\n"
              "                      {tool_use: {id: r2, name: read_tool_output, input: {call_id: nope}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.tool_output_dir = dir;
  fx_start(&f);
  fx_run(&f, "read it back");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(jstr(fx_tool_result(&f, 1, "r1"), "content"), "the old output");
  ASSERT(json_is_true(json_object_get(fx_tool_result(&f, 1, "r2"), "is_error")));
  fx_finish(&f);
  unlink(path);
  rmdir(dir);
  return 0;
}
