/* issue 24: `agentloop batch run` on a terminal draws its progress line on
 * stderr (src/client/batch.c print_progress): the binary run with stderr
 * on a pseudo-terminal, the line read from the master side. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "unit/wire/wire_cli.h"

typedef struct {
  uv_loop_t *loop;
  uv_tty_t master;
  uv_process_t proc;
  char buf[65536];
  size_t len;
  int64_t status;
  int exits, ends;
} tty_run_t;

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  tty_run_t *t = h->data;

  (void)hint;
  *b = uv_buf_init(t->buf + t->len, (unsigned)(sizeof(t->buf) - t->len - 1));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  tty_run_t *t = s->data;

  (void)b;
  if (n > 0) {
    t->len += (size_t)n;
    t->buf[t->len] = '\0';
  } else if (n < 0) {
    /* EIO once the slave side is closed by the exited child. */
    uv_close((uv_handle_t *)s, NULL);
    t->ends++;
  }
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  tty_run_t *t = p->data;

  (void)sig;
  t->status = status;
  t->exits++;
  uv_close((uv_handle_t *)p, NULL);
}

TEST_IMPL(batch_progress_line_on_terminal) {
  char root[] = "/tmp/al-batch-tty-XXXXXX";
  char jobs[128], out[128], bin[4096], text[1024], cfg[160], st[160];
  char *env[] = {"PATH=/usr/bin:/bin", "TERM=xterm", cfg, st, NULL};
  char *argv[] = {bin, "batch", "run", jobs, "--out", out, "-j", "2", NULL};
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  tty_run_t t;
  wire_cli_t c;
  int m, s;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(cfg, sizeof(cfg), "XDG_CONFIG_HOME=%s/cfg", root);
  snprintf(st, sizeof(st), "XDG_STATE_HOME=%s/state", root);
  snprintf(jobs, sizeof(jobs), "%s/jobs.jsonl", root);
  snprintf(out, sizeof(out), "%s/out", root);
  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  wire_cli_start(&c, "responses:\n  - reply: {content: [{text: 'ok'}]}\n");
  snprintf(text, sizeof(text),
           "{\"id\":\"p1\",\"prompt\":\"one\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n"
           "{\"id\":\"p2\",\"prompt\":\"two\",\"workspace\":\"%s\","
           "\"base_url\":\"http://127.0.0.1:%d\"}\n",
           root, al_mockllm_port(c.mock), root, al_mockllm_port(c.mock));
  wire_write(root, "jobs.jsonl", text);

  m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT(m >= 0);
  ASSERT_EQ(grantpt(m), 0);
  ASSERT_EQ(unlockpt(m), 0);
  s = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT(s >= 0);
  memset(&t, 0, sizeof(t));
  t.loop = &c.loop;
  ASSERT_EQ(uv_tty_init(&c.loop, &t.master, m, 1), 0);
  t.master.data = &t;
  t.proc.data = &t;
  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_IGNORE;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = s;
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  ASSERT_EQ(uv_spawn(&c.loop, &t.proc, &po), 0);
  close(s); /* the child's now: its exit ends the master's reads */
  ASSERT_EQ(uv_read_start((uv_stream_t *)&t.master, on_alloc, on_read), 0);
  while (t.exits == 0 || t.ends == 0) {
    uv_run(&c.loop, UV_RUN_ONCE);
  }
  if (t.status != 0 || strstr(t.buf, "batch: 2/2 done, 0 running, 0 failed") ==
                           NULL ||
      strstr(t.buf, "\033[K") == NULL) {
    AL_TEST_FAIL("exit %d, terminal: %s", (int)t.status, t.buf);
  }
  ASSERT_NOT_NULL(strstr(t.buf, " tokens, $"));
  wire_cli_finish(&c);
  al_test_rm_tree(root);
  return 0;
}
