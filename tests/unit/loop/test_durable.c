/* Durable context management (docs/context.md §Durability): compaction and
 * micro-compaction are records of their own in the append-only
 * transcript; replaying it rebuilds the exact post-compaction history, so
 * the next request after a resume is byte-identical to the live one, and
 * a transcript cut anywhere in the compaction record still loads. */
#include <stdlib.h>
#include <string.h>

#include <mbedtls/sha256.h>

#include "agent_fx.h"
#include "session/session.h"
#include "test.h"

#define GOAL "GOAL-ZEBRA-42: count the x in every file"

/* The transcripts' commit hook (al__tx_commit_record, the one record
 * table), into a buffer: the transcript's history part. */
static void on_commit(al_agent_t *agent, al_commit_kind_t kind,
                      const char *message, size_t len, void *data) {
  al_buf_t *tx = data;
  al_blob_t *b = al__tx_commit_record(kind, message, len);

  (void)agent;
  ASSERT_NOT_NULL(b);
  ASSERT_EQ(al_buf_append(tx, b->data, b->len), 0);
  al__blob_unref(b);
}

static void sha(const json_t *body, unsigned char out[32]) {
  char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);

  ASSERT_NOT_NULL(s);
  ASSERT_EQ(mbedtls_sha256_ret((const unsigned char *)s, strlen(s), out, 0), 0);
  free(s);
}

static const char *live_yaml =
    "usage_from_request: {bytes_per_token: 4}\n"
    "responses:\n"
    "  - reply: {content: [{tool_use: {id: t1, name: read_file, input: {path: f1}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t2, name: read_file, input: {path: f2}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t3, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t4, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{tool_use: {id: t5, name: read_file, input: {path: f3}}}]}\n"
    "  - reply: {content: [{text: first done}]}\n"
    "  - reply: {content: [{text: \"## Goal\\ncount\\n## Next step\\nanswer\"}]}\n"
    "  - reply: {content: [{text: next done}]}\n";

/* f1, f2: 6 KB; f3: 100 bytes. */
static void files(fx_t *f) {
  char big[6001];
  int k;

  for (k = 1; k <= 3; k++) {
    char name[8];
    size_t n = k < 3 ? sizeof(big) - 1 : 100;

    memset(big, 'a' + k, n);
    big[n] = '\0';
    snprintf(name, sizeof(name), "f%d", k);
    fx_write(f, name, big);
  }
}

/* Loads the transcript's first n bytes into a new agent: its next
 * request's body (sha) after "next question". */
static void resumed_request(const char *tx, size_t n, unsigned char out[32],
                            size_t *msgs) {
  al_tx_loaded_t l;
  size_t good = 0;
  fx_t f;
  char *hist;
  json_t *o;

  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(tx, n, 1 << 20, &l, &good), 0);
  if (l.bad_lines != 0) {
    AL_TEST_FAIL("transcript: %zu bad lines: %s", l.bad_lines, l.why);
  }
  o = json_pack("{s:n, s:O}", "system", "messages",
                l.history.messages != NULL ? l.history.messages
                                           : json_array());
  hist = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  fx_init(&f, "responses:\n  - reply: {content: [{text: next done}]}\n");
  f.opts.micro_min_tokens = 2000;
  fx_start(&f);
  files(&f);
  ASSERT_EQ(al_agent_load_history_json(f.agent, hist, strlen(hist)), 0);
  free(hist);
  fx_run(&f, "next question");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  ASSERT_EQ(fx_requests(&f), 1);
  *msgs = json_array_size(json_object_get(fx_request(&f, 0)->body, "messages"));
  sha(fx_request(&f, 0)->body, out);
  fx_finish(&f);
  al__tx_loaded_free(&l);
}

TEST_IMPL(durable_resume_after_compaction) {
  fx_t f;
  al_buf_t tx;
  unsigned char live[32];
  unsigned char resumed[32];
  size_t live_msgs;
  size_t msgs;
  const char *rec;
  const char *eol;
  size_t cut;
  char *ph;

  al_buf_init(&tx, 1 << 24);
  fx_init(&f, live_yaml);
  f.opts.micro_min_tokens = 2000;
  f.opts.on_commit = on_commit;
  f.opts.commit_data = &tx;
  fx_start(&f);
  files(&f);
  fx_run(&f, GOAL);
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(fx_count(&f, "micro_compaction"), 1);
  ASSERT_EQ(al_agent_compact(f.agent, NULL), 0);
  while (fx_count(&f, "compaction_completed") == 0) {
    uv_run(&f.loop, UV_RUN_ONCE);
  }
  fx_run(&f, "next question");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  /* What the live session sent after its micro-compaction (request 6). */
  ph = json_dumps(json_object_get(fx_tool_result(&f, 5, "t1"), "content"),
                  JSON_ENCODE_ANY);
  ASSERT_NOT_NULL(strstr(ph, "agentloop cleared"));
  live_msgs = json_array_size(json_object_get(
      fx_request(&f, fx_requests(&f) - 1)->body, "messages"));
  sha(fx_request(&f, fx_requests(&f) - 1)->body, live);
  fx_finish(&f);

  /* The transcript holds both context records, and the originals. */
  ASSERT_NOT_NULL(strstr(tx.data, "{\"rec\":\"micro\""));
  rec = strstr(tx.data, "{\"rec\":\"compaction\"");
  ASSERT_NOT_NULL(rec);
  ASSERT_NOT_NULL(strstr(tx.data, "bbbbbbbbbbbbbbbbbbbb")); /* f1 itself */

  /* The "next question" record is the last user record: cut before it,
   * so the resumed agent adds it itself. */
  {
    const char *last_user = NULL;
    const char *p = tx.data;

    while ((p = strstr(p, "{\"rec\":\"user\"")) != NULL) {
      last_user = p;
      p++;
    }
    ASSERT_NOT_NULL(last_user);
    cut = (size_t)(last_user - tx.data);
  }
  resumed_request(tx.data, cut, resumed, &msgs);
  ASSERT_EQ(msgs, live_msgs);
  ASSERT_MEM_EQ(resumed, 32, live, 32);

  /* Resumed between the micro-compaction and the compaction: t1 is
   * cleared with the very placeholder the live session sent. */
  {
    al_tx_loaded_t l;
    size_t good = 0;
    size_t i, k;
    const json_t *m;
    const json_t *blk;
    bool seen = false;

    memset(&l, 0, sizeof(l));
    ASSERT_EQ(al__tx_load_buf(tx.data, (size_t)(rec - tx.data), 1 << 20, &l,
                              &good),
              0);
    json_array_foreach(l.history.messages, i, m) {
      json_array_foreach(json_object_get(m, "content"), k, blk) {
        const char *id = json_string_value(json_object_get(blk, "tool_use_id"));

        if (id != NULL && strcmp(id, "t1") == 0) {
          char *got = json_dumps(json_object_get(blk, "content"),
                                 JSON_ENCODE_ANY);

          ASSERT_STR_EQ(got, ph);
          free(got);
          seen = true;
        }
      }
    }
    ASSERT(seen);
    al__tx_loaded_free(&l);
  }
  free(ph);

  /* Killed while the compaction record was being written (a torn last
   * line) or right before it: the session loads, valid, uncompacted. */
  eol = strchr(rec, '\n');
  ASSERT_NOT_NULL(eol);
  for (cut = (size_t)(rec - tx.data); cut <= (size_t)(eol - tx.data);
       cut += (size_t)(eol - rec) / 7 + 1) {
    al_tx_loaded_t l;
    size_t good = 0;

    memset(&l, 0, sizeof(l));
    ASSERT_EQ(al__tx_load_buf(tx.data, cut, 1 << 20, &l, &good), 0);
    ASSERT(al__history_validate_json(l.history.messages, NULL, 0) == 0);
    ASSERT(json_array_size(l.history.messages) > 3); /* not compacted */
    al__tx_loaded_free(&l);
  }
  /* Right after it: loads compacted (and valid). */
  {
    al_tx_loaded_t l;
    size_t good = 0;

    memset(&l, 0, sizeof(l));
    ASSERT_EQ(al__tx_load_buf(tx.data, (size_t)(eol - tx.data) + 1, 1 << 20,
                              &l, &good),
              0);
    ASSERT(al__history_validate_json(l.history.messages, NULL, 0) == 0);
    ASSERT_NOT_NULL(strstr(json_string_value(json_object_get(
                               json_array_get(json_object_get(
                                   json_array_get(l.history.messages, 0),
                                   "content"), 1),
                               "text")),
                           "## Next step\nanswer"));
    al__tx_loaded_free(&l);
  }
  al_buf_free(&tx);
  return 0;
}
