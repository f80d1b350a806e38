/* Durability that tells the truth (issue 15): with the state directory on
 * a full filesystem, a turn's `final` reaches the client only after a
 * session/persist_error naming ENOSPC; the session keeps running in
 * memory; once space returns the writer catches up (session/persist_ok)
 * and a restarted daemon has every turn. As root the test mounts a real
 * 256 KiB tmpfs in its own mount namespace and fills it; otherwise the
 * writer's seam makes writes fail with ENOSPC. */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtest.h"
#include "../loop/binfx.h"
#include "session/session.h"

static bool seam_full;

static int seam_hook(const char *path) {
  (void)path;
  return seam_full ? UV_ENOSPC : 0;
}

/* A tmpfs on `dir` in a private mount namespace; false when not allowed. */
static bool mount_small_fs(const char *dir) {
  /* AL_TEST_NO_MOUNT: take the seam's path even as root (to test it). */
  if (geteuid() != 0 || getenv("AL_TEST_NO_MOUNT") != NULL ||
      unshare(CLONE_NEWNS) != 0) {
    return false;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    return false;
  }
  return mount("none", dir, "tmpfs", 0, "size=256k,mode=0700") == 0;
}

static void fill_fs(const char *dir, char *filler, size_t len) {
  char block[4096];
  int fd;

  snprintf(filler, len, "%s/filler", dir);
  fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT(fd >= 0);
  memset(block, 'x', sizeof(block));
  while (write(fd, block, sizeof(block)) > 0) {
  }
  /* The last partial blocks too, so not one byte is left. */
  while (write(fd, block, 1) > 0) {
  }
  ASSERT_EQ(errno, ENOSPC);
  close(fd);
}

static size_t find_msg(dt_client_t *c, const char *method, const char *type,
                       size_t from) {
  size_t i;

  for (i = from; i < json_array_size(c->msgs); i++) {
    json_t *m = json_array_get(c->msgs, i);
    const char *mm = json_string_value(json_object_get(m, "method"));

    if (mm == NULL || strcmp(mm, method) != 0) {
      continue;
    }
    if (type == NULL ||
        strcmp(json_string_value(json_object_get(
                   json_object_get(m, "params"), "type")) ?: "",
               type) == 0) {
      return i;
    }
  }
  return (size_t)-1;
}

TEST_IMPL(daemon_enospc_tells_and_catches_up) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cl[] = {&c, &c2};
  char p[512];
  char sid[64];
  char filler[400];
  bool real_fs;
  size_t err_i, fin_i;
  const json_t *pe;
  json_t *r;
  char *dump;

  /* Replies larger than a page: a full tmpfs still takes appends into
   * the transcript's last partly used page. */
  {
    static char yaml[20000];
    char pad[6001];

    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    snprintf(yaml, sizeof(yaml),
             "responses:\n"
             "  - reply: {content: [{text: 'first answer %s'}]}\n"
             "  - reply: {content: [{text: 'second answer %s'}]}\n"
             "  - reply: {content: [{text: 'third answer'}]}\n",
             pad, pad);
    dt_init(&t, yaml);
  }
  ASSERT_EQ(mkdir(t.state, 0700), 0);
  real_fs = mount_small_fs(t.state);
  al__tx_retry_min_ms = 5;
  al__tx_retry_max_ms = 20;
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);

  /* The disk fills. */
  if (real_fs) {
    fill_fs(t.state, filler, sizeof(filler));
  } else {
    al__tx_write_fault = seam_hook;
    seam_full = true;
  }
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"one\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  fin_i = dt_wait_event(&c, "final", 0);
  if (getenv("AL_TEST_DUMP") != NULL) {
    size_t k;

    fprintf(stderr, "real_fs %d\n", (int)real_fs);
    for (k = 0; k < json_array_size(c.msgs); k++) {
      char *d = json_dumps(json_array_get(c.msgs, k), JSON_COMPACT);

      fprintf(stderr, "%zu %.200s\n", k, d);
      free(d);
    }
  }
  err_i = find_msg(&c, "session/persist_error", NULL, 0);
  /* Told before final, naming the cause. */
  ASSERT(err_i != (size_t)-1);
  ASSERT(err_i < fin_i);
  pe = json_object_get(json_array_get(c.msgs, err_i), "params");
  ASSERT_STR_EQ(json_string_value(json_object_get(pe, "error")), "ENOSPC");
  ASSERT(json_is_false(json_object_get(pe, "lost")));
  ASSERT_STR_EQ(json_string_value(json_object_get(pe, "session")), sid);

  /* The session runs on in memory: a second turn works. */
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"two\"}", sid);
  dt_call(&c, 5, "turn/send", p);
  dt_wait_event(&c, "final", fin_i + 1);

  /* Space returns: the writer catches up and says so. */
  if (real_fs) {
    ASSERT_EQ(unlink(filler), 0);
  } else {
    seam_full = false;
  }
  dt_wait_notification(&c, "session/persist_ok", err_i);

  /* A restart has both turns. */
  al__daemon_shutdown(t.d);
  while (!t.exited) {
    uv_run(&t.loop, UV_RUN_ONCE);
  }
  t.exited = false;
  if (getenv("AL_TEST_DUMP") != NULL) {
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "ls -la %s %s/sessions; cut -c1-150 %s/sessions/%s.jsonl >&2",
             t.state, t.state, t.state, sid);
    (void)!system(cmd);
  }
  dt_start(&t);
  dt_connect(&t, &c2);
  dt_init_client(&c2);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c2, 6, "session/resume", p);
  ASSERT_EQ(dt_err(r), 0);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(r, "result"),
                                               "messages")),
            4);
  /* And the next request carries both earlier turns. */
  dt_call(&c2, 7, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"three\"}", sid);
  dt_call(&c2, 8, "turn/send", p);
  dt_wait_event(&c2, "final", 0);
  dt_assert_valid(&t);
  {
    size_t nrec = al_mockllm_record_count(t.mock);
    const al_mockllm_record_t *rec = al_mockllm_record_get(t.mock, nrec - 1);

    dump = json_dumps(rec->body, JSON_COMPACT);
    ASSERT_NOT_NULL(strstr(dump, "first answer"));
    ASSERT_NOT_NULL(strstr(dump, "second answer"));
    free(dump);
  }
  al__tx_write_fault = NULL;
  if (real_fs) {
    al__daemon_shutdown(t.d);
    while (!t.exited) {
      uv_run(&t.loop, UV_RUN_ONCE);
    }
    t.d = NULL;
    ASSERT_EQ(umount2(t.state, MNT_DETACH), 0);
  }
  dt_finish(&t, cl, 2);
  return 0;
}

/* Binary-safe history through the daemon (issue 15): a real binary file
 * and a command printing random bytes; the turn is final, the transcript
 * reloads after a restart with every tool result (none "interrupted"), and
 * the next request is valid. */
TEST_IMPL(daemon_binary_tool_output_resumes) {
  dt_t t;
  dt_client_t c, c2;
  dt_client_t *cl[] = {&c, &c2};
  char p[512];
  char sid[64];
  json_t *r;
  const json_t *rec;
  char *dump;
  const al_mockllm_record_t *last;

  dt_init(&t, bin_scenario);
  bin_write_file(t.work, "rand.bin", 4096);
  {
    char path[300];
    FILE *f;

    snprintf(path, sizeof(path), "%s/text.txt", t.work);
    f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs("caf\xc3\xa9 ok\nbad \xff byte\n", f);
    fclose(f);
  }
  dt_start(&t);
  dt_connect(&t, &c);
  dt_init_client(&c);
  snprintf(p, sizeof(p), "{\"cwd\":\"%s\"}", t.work);
  dt_create(&c, p, sid, sizeof(sid));
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  dt_call(&c, 3, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"look\"}", sid);
  dt_call(&c, 4, "turn/send", p);
  dt_wait_event(&c, "final", 0);
  dt_assert_valid(&t);

  al__daemon_shutdown(t.d);
  while (!t.exited) {
    uv_run(&t.loop, UV_RUN_ONCE);
  }
  t.exited = false;
  dt_start(&t);
  dt_connect(&t, &c2);
  dt_init_client(&c2);
  snprintf(p, sizeof(p), "{\"session\":\"%s\"}", sid);
  r = dt_call(&c2, 6, "session/resume", p);
  ASSERT_EQ(dt_err(r), 0);
  rec = json_object_get(json_object_get(r, "result"), "recovered");
  ASSERT_EQ(json_integer_value(json_object_get(rec, "closed_tool_uses")), 0);
  ASSERT_EQ(json_integer_value(json_object_get(rec, "bad_lines")), 0);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(r, "result"),
                                               "messages")),
            4);
  dt_call(&c2, 7, "session/subscribe", p);
  snprintf(p, sizeof(p), "{\"session\":\"%s\",\"input\":\"again\"}", sid);
  dt_call(&c2, 8, "turn/send", p);
  dt_wait_event(&c2, "final", 0);
  dt_assert_valid(&t);
  last = al_mockllm_record_get(t.mock, al_mockllm_record_count(t.mock) - 1);
  dump = json_dumps(last->body, JSON_COMPACT);
  ASSERT_NOT_NULL(strstr(dump, "[binary output: 4096 bytes"));
  ASSERT_NOT_NULL(strstr(dump, "looks like a binary file"));
  ASSERT_NULL(strstr(dump, "interrupted"));
  ASSERT_NULL(strstr(dump, "\\u0000"));
  free(dump);
  dt_finish(&t, cl, 2);
  return 0;
}
