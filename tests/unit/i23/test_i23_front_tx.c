/* Issue 23, sub-agents' transcripts (session/session.h): each child has a
 * transcript of its own (its own hash chain, a header naming its parent),
 * linked from the parent's chain by a "child" record that the loader
 * lists; a crash while a child runs leaves the parent's task call open,
 * and the load closes it with the interrupted result like any tool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "session/session.h"
#include "test.h"

static void chain_put(al_buf_t *buf, const char *id, char *prev,
                      const char *rec, size_t n) {
  al_blob_t *r = al__blob_new(rec, n);
  char h[AL_TX_HASH_HEX + 1];
  al_blob_t *b = al__tx_chain_record(id, prev, r, h);

  ASSERT_NOT_NULL(b);
  ASSERT_EQ(al_buf_append(buf, b->data, b->len), 0);
  memcpy(prev, h, sizeof(h));
  al__blob_unref(b);
  al__blob_unref(r);
}

#define CHAIN(buf, id, prev, lit) chain_put(buf, id, prev, lit, strlen(lit))

static int closed;
static void on_kids_closed(void *data) {
  (void)data;
  closed++;
}

/* The child's transcript is its own chain with a header naming the
 * parent; the parent's "child" record chains in the parent's and is
 * listed on load. */
TEST_IMPL(i23_child_transcript_own_chain_linked) {
  char dir[] = "/tmp/al-i23-txXXXXXX";
  char path[256];
  uv_loop_t loop;
  al_tx_kids_t *k;
  al_tx_child_t c = {"t1",      "s_parent.t1", "s_parent", "toolu_1",
                     "explore", false,         1};
  al_tx_header_t h;
  al_blob_t *link = NULL;
  void *cd = NULL;
  al_tx_loaded_t l;
  al_buf_t buf;
  char prev[AL_TX_HASH_HEX + 1] = "";
  static const char user[] =
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"}]}";
  static const char asst[] =
      "{\"role\":\"assistant\",\"content\":[{\"type\":"
      "\"text\",\"text\":\"found it\"}]}";
  const json_t *ch;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_EQ(uv_loop_init(&loop), 0);
  k = al__tx_kids_new(&loop, dir, 1 << 20);
  ASSERT_NOT_NULL(k);
  memset(&h, 0, sizeof(h));
  h.cwd = "/work";
  h.created_ms = 7;
  /* An id that could name another path is refused. */
  {
    al_tx_child_t bad = c;

    bad.session_id = "../x"; /* and one past 63 bytes */
    ASSERT_EQ(al__tx_kids_open(k, &bad, &h, &cd, &link), AL_EINVAL);
    bad.session_id =
        "s_0123456789012345678901234567890123456789012345678901"
        "23456789.t1";
    ASSERT_EQ(al__tx_kids_open(k, &bad, &h, &cd, &link), AL_EINVAL);
    ASSERT_NULL(link);
  }
  ASSERT_EQ(al__tx_kids_open(k, &c, &h, &cd, &link), 0);
  ASSERT_NOT_NULL(cd);
  ASSERT_NOT_NULL(link);
  al__tx_kid_commit(NULL, AL_COMMIT_USER, user, strlen(user), cd);
  al__tx_kid_commit(NULL, AL_COMMIT_ASSISTANT, asst, strlen(asst), cd);
  ASSERT_EQ(al__tx_kids_count(k), 1);
  /* Its own child (depth 2) is linked from its transcript, not the
   * session's: no link comes back. */
  {
    al_tx_child_t g = {
        "t3", "s_parent.t1.t3", "s_parent.t1", "toolu_9", "explore", false, 2};
    al_blob_t *glink = NULL;
    void *gd = NULL;

    ASSERT_EQ(al__tx_kids_open(k, &g, &h, &gd, &glink), 0);
    ASSERT_NULL(glink);
    ASSERT_NOT_NULL(gd);
    al__tx_kid_commit(NULL, AL_COMMIT_USER, user, strlen(user), gd);
    al__tx_kids_end(k, "s_parent.t1.t3");
  }
  /* The child ended (its subagent_completed): its writer closes; a stray
   * commit after that is dropped, not written into freed memory. */
  al__tx_kids_end(k, "s_parent.t1");
  al__tx_kid_commit(NULL, AL_COMMIT_USER, user, strlen(user), cd);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(al__tx_kids_pending(k), 0);
  al__tx_kids_close(k, on_kids_closed, NULL);
  ASSERT_EQ(closed, 0); /* never inside the call */
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(closed, 1);

  snprintf(path, sizeof(path), "%s/s_parent-t1.jsonl", dir);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT(l.has_header);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_STR_EQ(l.chain_id, "s_parent-t1");
  ASSERT_EQ(al__history_count(&l.history), 2);
  ASSERT_EQ(json_array_size(l.children), 1); /* its child t3 */
  ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(l.children, 0),
                                                  "transcript")),
                "s_parent-t1-t3");
  ASSERT_STR_EQ(l.header.cwd, "/work");
  ASSERT_NOT_NULL(l.header.parent);
  ASSERT_STR_EQ(json_string_value(json_object_get(l.header.parent, "session")),
                "s_parent");
  ASSERT_STR_EQ(json_string_value(json_object_get(l.header.parent, "task")),
                "t1");
  ASSERT_STR_EQ(
      json_string_value(json_object_get(l.header.parent, "parent_call")),
      "toolu_1");
  al__tx_loaded_free(&l);

  /* The link chains in the parent's transcript and is listed. */
  al_buf_init(&buf, 1 << 20);
  CHAIN(&buf, "s_parent", prev,
        "{\"rec\":\"session\",\"v\":2,\"session\":\"s_parent\","
        "\"created_ms\":1,\"cwd\":\"/work\"}\n");
  chain_put(&buf, "s_parent", prev, link->data, link->len);
  al__blob_unref(link);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(buf.data, buf.len, 1 << 20, &l, NULL), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(json_array_size(l.children), 1);
  ch = json_array_get(l.children, 0);
  ASSERT_STR_EQ(json_string_value(json_object_get(ch, "task")), "t1");
  ASSERT_STR_EQ(json_string_value(json_object_get(ch, "session")),
                "s_parent.t1");
  ASSERT_STR_EQ(json_string_value(json_object_get(ch, "transcript")),
                "s_parent-t1");
  ASSERT_STR_EQ(json_string_value(json_object_get(ch, "agent")), "explore");
  ASSERT_STR_EQ(json_string_value(json_object_get(ch, "parent_call")),
                "toolu_1");
  ASSERT_NULL(json_object_get(ch, "h"));
  al__tx_loaded_free(&l);
  al_buf_free(&buf);

  snprintf(path, sizeof(path), "%s/s_parent-t1-t3.jsonl", dir);
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load(path, false, 1 << 20, &l), 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(al__history_count(&l.history), 1);
  al__tx_loaded_free(&l);
  unlink(path);
  snprintf(path, sizeof(path), "%s/s_parent-t1.jsonl", dir);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  unlink(path);
  rmdir(dir);
  return 0;
}

/* A crash while a child runs: the parent's transcript ends with the task
 * call open, the child's link, and the child's own events (re-posted
 * with "path", its final among them). The load closes the task call with
 * the interrupted result like any tool, and the child's final does not
 * count as the end of the parent's run. */
TEST_IMPL(i23_crash_while_child_runs_closes_task_call) {
  al_buf_t buf;
  char prev[AL_TX_HASH_HEX + 1] = "";
  al_tx_loaded_t l;
  char *hist;

  al_buf_init(&buf, 1 << 20);
  CHAIN(&buf, "s_p", prev,
        "{\"rec\":\"session\",\"v\":2,\"session\":\"s_p\",\"created_ms\":1,"
        "\"cwd\":\"/w\"}\n");
  CHAIN(&buf, "s_p", prev,
        "{\"rec\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{"
        "\"type\":\"text\",\"text\":\"go\"}]}}\n");
  al_buf_append_str(&buf,
                    "{\"type\":\"run_started\",\"seq\":1,\"run\":1,"
                    "\"turn\":0,\"session\":\"s_p\"}\n");
  CHAIN(&buf, "s_p", prev,
        "{\"rec\":\"assistant\",\"message\":{\"role\":\"assistant\","
        "\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_T\",\"name\":"
        "\"task\",\"input\":{\"description\":\"d\",\"prompt\":\"p\"}}]}}\n");
  CHAIN(&buf, "s_p", prev,
        "{\"rec\":\"child\",\"task\":\"t1\",\"session\":\"s_c\","
        "\"parent_call\":\"toolu_T\",\"agent\":\"general\","
        "\"background\":false,\"depth\":1}\n");
  al_buf_append_str(&buf,
                    "{\"type\":\"final\",\"seq\":2,\"run\":1,"
                    "\"turn\":1,\"session\":\"s_c\",\"path\":\"t1\"}"
                    "\n");
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al__tx_load_buf(buf.data, buf.len, 1 << 20, &l, NULL), 0);
  ASSERT_EQ(l.bad_lines, 0);
  ASSERT_EQ(l.chain_breaks, 0);
  ASSERT_EQ(json_array_size(l.children), 1);
  ASSERT_EQ(l.closed_tool_uses, 1);
  ASSERT_NOT_NULL(l.synthetic);
  ASSERT(l.run_open); /* the child's final is not the parent's */
  ASSERT_EQ(l.last_run, 1);
  hist = json_dumps(al__history_to_json(&l.history), JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(hist, "toolu_T"));
  ASSERT_NOT_NULL(strstr(hist, AL_TX_SYNTHETIC_TEXT));
  free(hist);
  ASSERT_EQ(al__history_validate(&l.history, NULL, 0), 0);
  al__tx_loaded_free(&l);
  al_buf_free(&buf);
  return 0;
}
