/* The context settings as they travel (docs/context.md, docs/protocol.md):
 * their JSON form for session/create and the transcript header,
 * keep_recent choosing a compaction's kept tail, and tools.d tools marked
 * `compactable: true` joining micro-compaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent_fx.h"
#include "common/common.h"
#include "config/context.h"
#include "test.h"

TEST_IMPL(context_settings_json) {
  static const char *const bad[] = {
      "{\"window\":5}",          "{\"window\":\"big\"}",
      "{\"keep_recent\":0}",     "{\"max_messages\":-1}",
      "{\"micro_min_tokens\":-2}", "{\"auto_compact\":1}",
      "{\"nap\":1}",             "[1]",
  };
  al_agent_options_t o;
  json_t *j;
  json_t *back;
  char why[200];
  size_t i;

  /* Nothing set: an empty object; null and absent are no settings. */
  memset(&o, 0, sizeof(o));
  j = al__context_to_json(&o);
  ASSERT_EQ(json_object_size(j), 0);
  json_decref(j);
  ASSERT_EQ(al__context_from_json(NULL, &o, why, sizeof(why)), 0);
  /* A round trip keeps every setting. */
  o.context_window = 32000;
  o.micro_min_tokens = -1;
  o.max_messages = 40;
  o.keep_recent = 3000;
  o.no_auto_compact = true;
  o.no_prompt_cache = true;
  j = al__context_to_json(&o);
  memset(&o, 0, sizeof(o));
  ASSERT_EQ(al__context_from_json(j, &o, why, sizeof(why)), 0);
  ASSERT_EQ(o.context_window, 32000);
  ASSERT_EQ(o.micro_min_tokens, -1);
  ASSERT_EQ(o.max_messages, 40);
  ASSERT_EQ(o.keep_recent, 3000);
  ASSERT(o.no_auto_compact);
  ASSERT(o.no_prompt_cache);
  back = al__context_to_json(&o);
  ASSERT(json_equal(j, back));
  json_decref(back);
  /* A value a flag set stays. */
  memset(&o, 0, sizeof(o));
  o.keep_recent = 77;
  ASSERT_EQ(al__context_from_json(j, &o, why, sizeof(why)), 0);
  ASSERT_EQ(o.keep_recent, 77);
  json_decref(j);
  /* Bad values are refused whole, naming the key; nothing is applied. */
  for (i = 0; i < AL_ARRAY_SIZE(bad); i++) {
    json_t *b = json_loads(bad[i], JSON_DECODE_ANY, NULL);

    ASSERT_NOT_NULL(b);
    memset(&o, 0, sizeof(o));
    why[0] = '\0';
    if (al__context_from_json(b, &o, why, sizeof(why)) != AL_EINVAL) {
      AL_TEST_FAIL("%s was accepted", bad[i]);
    }
    ASSERT_NOT_NULL(strstr(why, "context"));
    ASSERT_EQ(o.context_window, 0);
    json_decref(b);
  }
  j = json_loads("{\"max_messages\":9,\"keep_recent\":0}", 0, NULL);
  memset(&o, 0, sizeof(o));
  ASSERT_EQ(al__context_from_json(j, &o, why, sizeof(why)), AL_EINVAL);
  ASSERT_NOT_NULL(strstr(why, "context.keep_recent"));
  ASSERT_EQ(o.max_messages, 0);
  json_decref(j);
  return 0;
}

/* n files f1..fn of `bytes` bytes each, a different letter per file. */
static void files(fx_t *f, int n, size_t bytes) {
  char *big = malloc(bytes + 1);
  int k;

  ASSERT_NOT_NULL(big);
  for (k = 1; k <= n; k++) {
    char name[16];

    memset(big, 'a' + k, bytes);
    big[bytes] = '\0';
    snprintf(name, sizeof(name), "f%d", k);
    fx_write(f, name, big);
  }
  free(big);
}

/* keep_recent picks the kept tail: with 1 token only the last assistant
 * message stays after the summary; with a large budget the tail reaches
 * back to the first tool round. */
static int64_t dropped_with(int64_t keep) {
  fx_t f;
  const json_t *c;
  int64_t dropped;

  fx_init(&f,
          "responses:\n"
          "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
          "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
          "  - reply: {content: [{text: first done}]}\n"
          "  - reply: {content: [{text: \"## Goal\\nkept summary\"}]}\n"
          "  - reply: {content: [{text: second done}]}\n");
  f.opts.micro_min_tokens = -1;
  f.opts.keep_recent = keep;
  fx_start(&f);
  files(&f, 2, 4000);
  fx_run(&f, "read both");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(al_agent_compact(f.agent, NULL), 0);
  while (fx_count(&f, "compaction_completed") == 0) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  c = fx_event(&f, fx_find(&f, "compaction_completed", NULL, 0));
  ASSERT(!json_is_true(json_object_get(c, "fallback")));
  dropped = (int64_t)json_integer_value(json_object_get(c, "dropped_messages"));
  fx_run(&f, "and now?");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  fx_finish(&f);
  return dropped;
}

TEST_IMPL(context_keep_recent) {
  int64_t small = dropped_with(1);
  int64_t large = dropped_with(1000000);

  /* History: user, (assistant, tool results) x2, assistant. */
  ASSERT_EQ(small, 4);
  ASSERT_EQ(large, 2);
  return 0;
}

/* A tools.d tool marked compactable: its old results are cleared like
 * read_file's; without the mark they stay. */
static size_t micro_count(bool mark, char *ids, size_t ids_len) {
  fx_t f;
  char dir[] = "/tmp/al_ctx_toolsd_XXXXXX";
  char path[300];
  const char *dirs[2];
  FILE *y;
  size_t n;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/show.yaml", dir);
  y = fopen(path, "w");
  ASSERT_NOT_NULL(y);
  fprintf(y,
          "tools:\n"
          "  - name: show\n"
          "    description: print a file of the workspace\n"
          "    category: read\n"
          "    cmd: cat\n"
          "    args: ['{{path}}']\n"
          "%s"
          "    parameters:\n"
          "      path: {type: string}\n",
          mark ? "    compactable: true\n" : "");
  fclose(y);
  dirs[0] = dir;
  dirs[1] = NULL;
  fx_init(&f, "usage_from_request: {bytes_per_token: 4}\n"
              "responses:\n"
              "  - reply: {content: [{tool_use: {id: t1, name: show, input: {path: f1}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t2, name: show, input: {path: f2}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t3, name: show, input: {path: f3}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t4, name: show, input: {path: f4}}}]}\n"
              "  - reply: {content: [{tool_use: {id: t5, name: show, input: {path: f5}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.micro_min_tokens = 2000;
  f.opts.tools_dirs = dirs;
  fx_start(&f);
  files(&f, 5, 8000);
  fx_run(&f, "show all five");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  /* The tool ran (its output reached the model). */
  ASSERT_NOT_NULL(strstr(fx_jstr(fx_tool_result(&f, 1, "t1"), "content"),
                         "bbbbbbbb"));
  n = fx_count(&f, "micro_compaction");
  ids[0] = '\0';
  if (n > 0) {
    char *s = json_dumps(
        json_object_get(fx_event(&f, fx_find(&f, "micro_compaction", NULL, 0)),
                        "call_ids"),
        JSON_COMPACT);

    snprintf(ids, ids_len, "%s", s);
    free(s);
  }
  fx_finish(&f);
  unlink(path);
  rmdir(dir);
  return n;
}

TEST_IMPL(context_tools_d_compactable) {
  char ids[200];

  ASSERT_EQ(micro_count(true, ids, sizeof(ids)), 1);
  ASSERT_STR_EQ(ids, "[\"t1\",\"t2\"]");
  ASSERT_EQ(micro_count(false, ids, sizeof(ids)), 0);
  return 0;
}

/* RESEARCH-WAVE2 C5: a second automatic compaction in the same run only
 * when the first left at most 0.6 x the trigger. Window 8,000: the
 * trigger is 4,000 tokens, 0.6 x it 2,400. 3 KB reads (about 750 tokens
 * each) cross it after the fifth. keep_recent 1 makes the first
 * compaction effective; a large keep_recent keeps nearly everything. */
#define READ(id, file)                                                   \
  "  - reply: {content: [{tool_use: {id: " id ", name: read_file, "      \
  "input: {path: " file "}}}]}\n"
#define SUMMARY "  - reply: {content: [{text: \"## Goal\\nkeep reading\"}]}\n"
/* Sized with bash, read_file, write_file, list_directory and done: the
 * search and edit tools and task are left out so the requests keep their
 * sizes. */
static const char *const sized_tools_off[] = {"edit_file", "grep", "glob",
                                              "task", NULL};

TEST_IMPL(compact_second_auto_needs_effective_first) {
  fx_t f;
  const json_t *c;
  long i;

  /* Effective: about 1,600 tokens after the first; the run grows past
   * the trigger again and compacts a second time. */
  fx_init(&f, "usage_from_request: {bytes_per_token: 4}\n"
              "responses:\n" READ("t1", "f1") READ("t2", "f2")
                  READ("t3", "f3") READ("t4", "f4") READ("t5", "f5")
                      SUMMARY READ("t6", "f6") READ("t7", "f7")
                          READ("t8", "f8") READ("t9", "f1") SUMMARY
              "  - reply: {content: [{text: done}]}\n");
  f.opts.context_window = 8000;
  f.opts.deny_tools = sized_tools_off;
  f.opts.micro_min_tokens = -1;
  f.opts.keep_recent = 1;
  fx_start(&f);
  files(&f, 8, 3000);
  fx_run(&f, "read them all");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "compaction_completed"), 2);
  c = fx_event(&f, fx_find(&f, "compaction_completed", NULL, 0));
  ASSERT_LE(json_integer_value(json_object_get(c, "tokens_after")), 2400);
  fx_finish(&f);

  /* Ineffective: the first compaction keeps nearly all (above 2,400);
   * when the run crosses the trigger again it goes on uncompacted (below
   * the 95% refusal). */
  fx_init(&f, "usage_from_request: {bytes_per_token: 4}\n"
              "responses:\n" READ("t1", "f1") READ("t2", "f2")
                  READ("t3", "f3") READ("t4", "f4") READ("t5", "f5")
                      SUMMARY READ("t6", "f6") READ("t7", "f7")
              "  - reply: {content: [{text: done}]}\n");
  f.opts.context_window = 8000;
  f.opts.deny_tools = sized_tools_off;
  f.opts.micro_min_tokens = -1;
  f.opts.keep_recent = 1000000;
  fx_start(&f);
  files(&f, 8, 3000);
  fx_run(&f, "read them all");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_count(&f, "compaction_completed"), 1);
  c = fx_event(&f, fx_find(&f, "compaction_completed", NULL, 0));
  ASSERT(json_integer_value(json_object_get(c, "tokens_after")) > 2400);
  /* A later request was above the trigger and was sent as it was. */
  {
    bool above = false;

    for (i = 0; fx_find(&f, "usage", NULL, (size_t)i) >= 0; i++) {
      const json_t *u = fx_event(&f, fx_find(&f, "usage", NULL, (size_t)i));

      above = above ||
              json_integer_value(json_object_get(u, "context_tokens")) > 4000;
    }
    ASSERT(above);
  }
  fx_finish(&f);
  return 0;
}
