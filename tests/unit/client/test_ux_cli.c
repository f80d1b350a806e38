/* Issue 22, defect 10: what a user meets in the first hour of the command
 * line - `run -p` on a terminal, the default model and the deprecation
 * warning from the catalogue, `doctor` reaching the configured base URL
 * (plain and TLS, the certificate verified), and Ctrl-C keeping the
 * partial reply for the model.
 *
 * The real binaries run against an in-process agentloop-mockllm on the
 * test's loop; nothing sleeps: the loop runs until the child exited and
 * its pipes reached EOF. */
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agentloop/agent.h"
#include "provider/provider.h"
#include "agentloop/alloc.h"
#include "agentloop/models.h"
#include "mockllm/mockllm.h"
#include "test.h"

typedef struct {
  uv_loop_t loop;
  al_mockllm_t *mock;
  uv_process_t proc;
  uv_pipe_t out;
  uv_pipe_t err;
  int pty;       /* the master side when stderr is a terminal, else -1 */
  char obuf[65536];
  size_t olen;
  char ebuf[65536];
  size_t elen;
  int64_t exit_status;
  int exits;
  int eofs;
  int want_eofs;
  const char *cwd;        /* the child's working directory (NULL: ours) */
  const char *sigint_at;  /* SIGINT once stdout holds this text */
  bool sigint_sent;
} ux_t;

static void maybe_done(ux_t *c) {
  if (c->exits == 1 && c->eofs == c->want_eofs) {
    uv_stop(&c->loop);
  }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  ux_t *c = h->loop->data;
  bool is_out = h == (uv_handle_t *)&c->out;
  char *base = is_out ? c->obuf + c->olen : c->ebuf + c->elen;
  size_t room = is_out ? sizeof(c->obuf) - c->olen - 1
                       : sizeof(c->ebuf) - c->elen - 1;

  (void)hint;
  *buf = uv_buf_init(base, (unsigned int)room);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  ux_t *c = s->loop->data;

  (void)buf;
  if (n > 0) {
    if (s == (uv_stream_t *)&c->out) {
      c->olen += (size_t)n;
      c->obuf[c->olen] = '\0';
      if (c->sigint_at != NULL && !c->sigint_sent && c->exits == 0 &&
          strstr(c->obuf, c->sigint_at) != NULL) {
        c->sigint_sent = true;
        ASSERT_EQ(uv_process_kill(&c->proc, SIGINT), 0);
      }
    } else {
      c->elen += (size_t)n;
      c->ebuf[c->elen] = '\0';
    }
  } else if (n < 0) {
    uv_close((uv_handle_t *)s, NULL);
    c->eofs++;
    maybe_done(c);
  }
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  ux_t *c = p->loop->data;

  ASSERT_EQ(sig, 0);
  c->exit_status = status;
  c->exits++;
  uv_close((uv_handle_t *)p, NULL);
  maybe_done(c);
}

static void ux_start(ux_t *c, const char *yaml, bool tls) {
  al_mockllm_options_t mo;
  char err[256];

  memset(c, 0, sizeof(*c));
  c->pty = -1;
  ASSERT_EQ(uv_loop_init(&c->loop), 0);
  c->loop.data = c;
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  if (tls) {
    mo.tls_cert = AL_TEST_CERTS_DIR "/server.crt";
    mo.tls_key = AL_TEST_CERTS_DIR "/server.key";
  }
  ASSERT_EQ(al_mockllm_new(&c->loop, &mo, &c->mock), 0);
}

/* Spawns BIN ARGS (NULL-terminated; {PORT} replaced by the mock's port)
 * with env, stderr on a pseudo-terminal when pty, and runs the loop until
 * the child is gone and its output read. */
static void ux_run(ux_t *c, const char *bin_name, const char *const *args,
                   char **env, bool pty) {
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  char *argv[32];
  char expanded[30][512];
  char bin[4096];
  char ports[16];
  size_t i;
  int slave = -1;

  if (bin_name[0] == '/') {
    snprintf(bin, sizeof(bin), "%s", bin_name);
  } else {
    snprintf(bin, sizeof(bin), "%s/%s", AL_BINARY_DIR, bin_name);
  }
  snprintf(ports, sizeof(ports), "%d", al_mockllm_port(c->mock));
  c->exits = 0;
  c->eofs = 0;
  c->olen = c->elen = 0;
  c->obuf[0] = c->ebuf[0] = '\0';
  argv[0] = bin;
  for (i = 0; args[i] != NULL && i < 30; i++) {
    const char *p = strstr(args[i], "{PORT}");

    if (p != NULL) {
      snprintf(expanded[i], sizeof(expanded[i]), "%.*s%s%s",
               (int)(p - args[i]), args[i], ports, p + 6);
      argv[i + 1] = expanded[i];
    } else {
      argv[i + 1] = (char *)args[i];
    }
  }
  argv[i + 1] = NULL;
  ASSERT_EQ(uv_pipe_init(&c->loop, &c->out, 0), 0);
  memset(&po, 0, sizeof(po));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&c->out;
  if (pty) {
    c->pty = posix_openpt(O_RDWR | O_NOCTTY);
    ASSERT(c->pty >= 0);
    ASSERT_EQ(grantpt(c->pty), 0);
    ASSERT_EQ(unlockpt(c->pty), 0);
    slave = open(ptsname(c->pty), O_RDWR | O_NOCTTY);
    ASSERT(slave >= 0);
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = slave;
    c->want_eofs = 1;
  } else {
    ASSERT_EQ(uv_pipe_init(&c->loop, &c->err, 0), 0);
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&c->err;
    c->want_eofs = 2;
  }
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.cwd = c->cwd;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  ASSERT_EQ(uv_spawn(&c->loop, &c->proc, &po), 0);
  if (slave >= 0) {
    close(slave);
  }
  ASSERT_EQ(uv_read_start((uv_stream_t *)&c->out, on_alloc, on_read), 0);
  if (!pty) {
    ASSERT_EQ(uv_read_start((uv_stream_t *)&c->err, on_alloc, on_read), 0);
  }
  uv_run(&c->loop, UV_RUN_DEFAULT);
  ASSERT_EQ(c->exits, 1);
  if (pty) {
    /* The child is gone: what it wrote is in the master's buffer. */
    ssize_t n;

    ASSERT_EQ(fcntl(c->pty, F_SETFL, O_NONBLOCK), 0);
    while (c->elen + 1 < sizeof(c->ebuf) &&
           (n = read(c->pty, c->ebuf + c->elen,
                     sizeof(c->ebuf) - c->elen - 1)) > 0) {
      c->elen += (size_t)n;
    }
    c->ebuf[c->elen] = '\0';
    close(c->pty);
    c->pty = -1;
  }
}

static void ux_finish(ux_t *c) {
  al_mockllm_close(c->mock, NULL);
  ASSERT_LOOP_CLOSES(&c->loop);
}

static const char *answer_yaml =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - text: \"The answer.\"\n"
    "          chunks: 3\n";

static const char *rec_model(ux_t *c, size_t i) {
  const al_mockllm_record_t *r = al_mockllm_record_get(c->mock, i);

  ASSERT_NOT_NULL(r);
  return json_string_value(json_object_get(r->body, "model"));
}

/* `run -p` on a terminal prints the answer, as `claude -p` does; the
 * stamped view comes with -v only. */
TEST_IMPL(ux_run_p_terminal_answer_only) {
  ux_t c;
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", "ANTHROPIC_API_KEY=k",
                 "TERM=xterm", "HOME=/nonexistent",
                 "XDG_CONFIG_HOME=/nonexistent", NULL};
  const char *args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                        "--model", "m-test", "--sandbox", "none", "-p",
                        "hello", NULL};
  const char *vargs[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                         "--model", "m-test", "--sandbox", "none", "-v",
                         "-p", "hello", NULL};

  ux_start(&c, answer_yaml, false);
  ux_run(&c, "agentloop", args, env, true);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.obuf, "The answer.\n");
  ASSERT_NULL(strstr(c.ebuf, "run started"));
  ASSERT_NULL(strstr(c.ebuf, "The answer"));
  ux_finish(&c);

  ux_start(&c, answer_yaml, false);
  ux_run(&c, "agentloop", vargs, env, true);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.obuf, "The answer.\n");
  ASSERT_NOT_NULL(strstr(c.ebuf, "run started"));
  ux_finish(&c);
  return 0;
}

/* One default endpoint per provider, for the agent and for doctor (which
 * checked https://api.anthropic.com for openai-responses, and the OpenAI
 * host without the /v1 the agent uses). */
TEST_IMPL(provider_default_base_url) {
  ASSERT_STR_EQ(al_provider_default_base_url(&al_provider_anthropic),
                "https://api.anthropic.com");
  ASSERT_STR_EQ(al_provider_default_base_url(&al_provider_openai),
                "https://api.openai.com/v1");
  ASSERT_STR_EQ(al_provider_default_base_url(&al_provider_openai_responses),
                "https://api.openai.com/v1");
  return 0;
}

/* Opus 4.6 and 4.7 have Opus 4.5's list prices, not the claude-opus-4*
 * catch-all's (Opus 4's); the current generation and the deprecated
 * preview are Anthropic models through the claude-* entry. */
TEST_IMPL(models_catalogue_opus_prices) {
  al_models_t *m = NULL;
  al_model_info_t i;
  char *err = NULL;
  static const char *const current[] = {"claude-opus-5-5", "claude-haiku-5-5",
                                        "claude-fable-5-2", "claude-mythos-5",
                                        "claude-mythos-preview"};
  size_t k;

  ASSERT_EQ(al_models_parse(&m, NULL, 0, "shipped", &err), 0);
  al_models_lookup(m, "claude-opus-4-6", NULL, &i);
  ASSERT(i.has_prices);
  ASSERT_EQ(al_model_cost_usd(&i, 1000000, 1000000, 0, 0), 30);
  al_models_lookup(m, "claude-opus-4-7", NULL, &i);
  ASSERT_EQ(al_model_cost_usd(&i, 1000000, 1000000, 0, 0), 30);
  al_models_lookup(m, "claude-opus-4-1", NULL, &i);
  ASSERT_EQ(al_model_cost_usd(&i, 1000000, 1000000, 0, 0), 90);
  for (k = 0; k < sizeof(current) / sizeof(current[0]); k++) {
    al_models_lookup(m, current[k], NULL, &i);
    ASSERT(i.known);
    ASSERT_STR_EQ(i.provider, "anthropic");
    ASSERT_EQ(i.context_window, 200000);
  }
  ASSERT_STR_EQ(i.end_of_life, "2026-06-30");
  al_models_free(m);
  return 0;
}

/* The catalogue knows the end of life of a model and its replacement; the
 * default is of the current generation and not deprecated. */
TEST_IMPL(ux_models_end_of_life) {
  al_models_t *m = NULL;
  al_model_info_t i;
  char buf[512];
  char *err = NULL;

  ASSERT_EQ(al_models_parse(&m, NULL, 0, "shipped", &err), 0);
  al_models_lookup(m, "claude-sonnet-4-5", NULL, &i);
  ASSERT_STR_EQ(i.end_of_life, "2026-11-30");
  ASSERT_STR_EQ(i.replacement, "claude-sonnet-5-5");
  ASSERT(i.has_prices); /* the rest still comes from claude-sonnet-4* */
  ASSERT(al_model_deprecation(&i, "claude-sonnet-4-5", buf, sizeof(buf)));
  ASSERT_NOT_NULL(strstr(buf, "model claude-sonnet-4-5 is deprecated: its "
                              "end of life is 2026-11-30; use "
                              "claude-sonnet-5-5"));
  al_models_lookup(m, "claude-sonnet-4-5-20250929", NULL, &i);
  ASSERT_STR_EQ(i.end_of_life, "2026-11-30");
  al_models_lookup(m, "claude-opus-4-5", NULL, &i);
  ASSERT_STR_EQ(i.end_of_life, "2027-01-22");
  ASSERT_STR_EQ(i.replacement, "claude-opus-5-5");
  al_models_lookup(m, "claude-sonnet-5-5", NULL, &i);
  ASSERT(i.known);
  ASSERT_STR_EQ(i.provider, "anthropic");
  ASSERT_STR_EQ(i.end_of_life, "");
  ASSERT(!al_model_deprecation(&i, "claude-sonnet-5-5", buf, sizeof(buf)));
  al_models_lookup(m, "claude-sonnet-4-6", NULL, &i);
  ASSERT_STR_EQ(i.end_of_life, "");
  ASSERT_EQ(al_model_cost_usd(&i, 1000, 2000, 0, 0) * 1e6, 33000);
  al_models_free(m);
  /* A user's file may mark one too; a bad date is refused with its line. */
  ASSERT_EQ(al_models_parse(&m,
                            "models:\n  - match: \"my-*\"\n"
                            "    end_of_life: \"2030-01-02\"\n"
                            "    replacement: my-next\n",
                            80, "u.yaml", &err),
            0);
  al_models_lookup(m, "my-model", NULL, &i);
  ASSERT_STR_EQ(i.end_of_life, "2030-01-02");
  ASSERT_STR_EQ(i.replacement, "my-next");
  al_models_free(m);
  ASSERT_NE(al_models_parse(&m,
                            "models:\n  - match: \"my-*\"\n"
                            "    end_of_life: \"soon\"\n",
                            50, "u.yaml", &err),
            0);
  ASSERT_NOT_NULL(err);
  ASSERT_NOT_NULL(strstr(err, "u.yaml:3:"));
  al_free(err);
  return 0;
}

/* `run` warns on stderr, from the catalogue, when the configured model is
 * deprecated (the date and the replacement); the default model is the
 * current generation's and draws no warning. */
TEST_IMPL(ux_run_deprecated_model_warns) {
  ux_t c;
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", "ANTHROPIC_API_KEY=k",
                 "HOME=/nonexistent", "XDG_CONFIG_HOME=/nonexistent", NULL};
  const char *old_args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                            "--model", "claude-sonnet-4-5", "--sandbox",
                            "none", "-p", "hello", NULL};
  const char *def_args[] = {"run", "--base-url", "http://127.0.0.1:{PORT}",
                            "--sandbox", "none", "-p", "hello", NULL};

  ux_start(&c, answer_yaml, false);
  ux_run(&c, "agentloop", old_args, env, false);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.obuf, "The answer.\n");
  ASSERT_NOT_NULL(strstr(c.ebuf, "warning: model claude-sonnet-4-5 is "
                                 "deprecated: its end of life is 2026-11-30; "
                                 "use claude-sonnet-5-5"));
  ASSERT_STR_EQ(rec_model(&c, 0), "claude-sonnet-4-5");
  ux_finish(&c);

  ux_start(&c, answer_yaml, false);
  ux_run(&c, "agentloop", def_args, env, false);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_NULL(strstr(c.ebuf, "deprecated"));
  ASSERT_STR_EQ(rec_model(&c, 0), "claude-sonnet-5-5");
  ux_finish(&c);
  return 0;
}

/* ---- Ctrl-C keeps the partial reply -------------------------------------- */

typedef struct {
  int deltas;
  int ends;
  int interrupted;
} intr_t;

static void intr_event(const al_event_t *ev, void *data) {
  intr_t *f = data;

  if (ev->type == AL_EVENT_TEXT_DELTA) {
    f->deltas++;
  } else if (ev->type == AL_EVENT_FINAL || ev->type == AL_EVENT_ERROR ||
             ev->type == AL_EVENT_INTERRUPTED) {
    f->interrupted += ev->type == AL_EVENT_INTERRUPTED;
    f->ends++;
  }
}

/* The user interrupts a reply while it streams (its second block waits a
 * minute): the next request holds what the model had said, then the
 * user-side note that it was interrupted, then the new question. */
TEST_IMPL(ux_interrupt_keeps_partial_reply) {
  ux_t c;
  intr_t f;
  al_agent_options_t ao;
  al_agent_t *a;
  char url[64];
  const al_mockllm_record_t *rec;
  json_t *msgs, *m1, *m2;

  ux_start(&c,
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - text: \"I was saying that\"\n"
           "          chunks: 2\n"
           "        - text: \" and more\"\n"
           "          delay_ms: 60000\n"
           "  - reply:\n"
           "      content:\n"
           "        - text: \"ok\"\n"
           "  - reply:\n"
           "      content:\n"
           "        - text: \"\\n\\n\"\n"
           "        - text: \"later\"\n"
           "          delay_ms: 60000\n"
           "  - reply:\n"
           "      content:\n"
           "        - text: \"fine\"\n",
           false);
  memset(&f, 0, sizeof(f));
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(c.mock));
  al_agent_options_init(&ao);
  ao.base_url = url;
  ao.api_key = "k";
  ao.model = "m";
  ao.retry_max_attempts = 1;
  ASSERT_EQ(al_agent_new(&c.loop, &ao, &a), 0);
  ASSERT_EQ(al_agent_subscribe(a, intr_event, &f, NULL), 0);
  ASSERT_EQ(al_agent_run(a, "hello"), 0);
  while (f.deltas < 2 && uv_run(&c.loop, UV_RUN_ONCE) != 0) {
  }
  ASSERT_EQ(f.deltas, 2); /* the first block, in its two chunks */
  ASSERT_EQ(al_agent_cancel(a), 0);
  ASSERT_EQ(f.interrupted, 1);
  ASSERT_EQ(al_agent_run(a, "go on"), 0);
  while (f.ends < 2 && uv_run(&c.loop, UV_RUN_ONCE) != 0) {
  }
  ASSERT_EQ(f.ends, 2);
  ASSERT_EQ(al_mockllm_record_count(c.mock), 2);
  rec = al_mockllm_record_get(c.mock, 1);
  ASSERT(rec->valid);
  msgs = json_object_get(rec->body, "messages");
  ASSERT_EQ(json_array_size(msgs), 3);
  m1 = json_array_get(msgs, 1);
  ASSERT_STR_EQ(json_string_value(json_object_get(m1, "role")), "assistant");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m1, "content"), 0),
                    "text")),
                "I was saying that");
  m2 = json_array_get(msgs, 2);
  ASSERT_STR_EQ(json_string_value(json_object_get(m2, "role")), "user");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m2, "content"), 0),
                    "text")),
                "[the user interrupted this reply]");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m2, "content"), 1),
                    "text")),
                "go on");

  /* Only white space streamed: nothing to keep (the API refuses a blank
   * text block), the next question follows the last answer. */
  ASSERT_EQ(al_agent_run(a, "third"), 0);
  while (f.deltas < 4 && uv_run(&c.loop, UV_RUN_ONCE) != 0) {
  }
  ASSERT_EQ(al_agent_cancel(a), 0);
  ASSERT_EQ(al_agent_run(a, "fourth"), 0);
  while (f.ends < 4 && uv_run(&c.loop, UV_RUN_ONCE) != 0) {
  }
  ASSERT_EQ(al_mockllm_record_count(c.mock), 4);
  rec = al_mockllm_record_get(c.mock, 3);
  ASSERT(rec->valid);
  msgs = json_object_get(rec->body, "messages");
  ASSERT_EQ(json_array_size(msgs), 5);
  m2 = json_array_get(msgs, 4);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m2, "content"), 0),
                    "text")),
                "third");
  al_agent_close(a, NULL);
  ux_finish(&c);
  return 0;
}

/* The same through `agentloop run`: Ctrl-C while the reply streams, then
 * `run --continue` - the transcript kept the partial reply and the note,
 * so the resumed session's request holds them before the new question. */
TEST_IMPL(ux_run_interrupt_then_continue) {
  ux_t c;
  char home[] = "/var/tmp/al_uxint_XXXXXX";
  char e_home[96], e_state[128], e_url[96], cmd[160];
  char *env[8];
  const char *first[] = {"run", "--sandbox", "none", "--output-format",
                         "ndjson", "-p", "hello", NULL};
  const char *again[] = {"run", "--sandbox", "none", "--continue", "-p",
                         "go on", NULL};
  const al_mockllm_record_t *rec;
  json_t *msgs, *m;
  bool sent;
  int64_t status;

  ux_start(&c,
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - text: \"I was saying that\"\n"
           "        - text: \" and more\"\n"
           "          delay_ms: 60000\n"
           "  - reply:\n"
           "      content:\n"
           "        - text: \"ok\"\n",
           false);
  ASSERT_NOT_NULL(mkdtemp(home));
  snprintf(e_home, sizeof(e_home), "HOME=%s", home);
  snprintf(e_state, sizeof(e_state), "XDG_STATE_HOME=%s/state", home);
  snprintf(e_url, sizeof(e_url), "AGENTLOOP_BASE_URL=http://127.0.0.1:%d",
           al_mockllm_port(c.mock));
  env[0] = "PATH=/usr/bin:/bin";
  env[1] = "XDG_CONFIG_HOME=/nonexistent";
  env[2] = "ANTHROPIC_API_KEY=k";
  env[3] = e_home;
  env[4] = e_state;
  env[5] = e_url;
  env[6] = NULL;
  c.cwd = home;
  c.sigint_at = "I was saying that";
  ux_run(&c, "agentloop", first, env, false);
  sent = c.sigint_sent;
  status = c.exit_status;
  c.sigint_at = NULL;
  ux_run(&c, "agentloop", again, env, false);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
  ASSERT_EQ(system(cmd), 0); /* before any assertion */
  ASSERT(sent);
  ASSERT_EQ(status, 130);
  ASSERT_EQ(c.exit_status, 0);
  ASSERT_STR_EQ(c.obuf, "ok\n");
  ASSERT_EQ(al_mockllm_record_count(c.mock), 2);
  rec = al_mockllm_record_get(c.mock, 1);
  ASSERT(rec->valid);
  msgs = json_object_get(rec->body, "messages");
  ASSERT_EQ(json_array_size(msgs), 3);
  m = json_array_get(msgs, 1);
  ASSERT_STR_EQ(json_string_value(json_object_get(m, "role")), "assistant");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m, "content"), 0), "text")),
                "I was saying that");
  m = json_array_get(msgs, 2);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m, "content"), 0), "text")),
                "[the user interrupted this reply]");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(m, "content"), 1), "text")),
                "go on");
  ux_finish(&c);
  return 0;
}

/* ---- doctor reaches the configured base URL ------------------------------ */

typedef struct {
  char home[64];
  char e_home[128], e_run[128], e_url[160], e_ca[300];
  char *env[10];
  char out[16384]; /* what doctor printed (doc_run) */
} doc_env_t;

/* A private home and runtime directory (doctor starts the daemon it
 * checks), no key, the base URL from the environment when url != NULL. */
static void doc_env(doc_env_t *d, const char *url, const char *ca) {
  size_t n = 0;

  snprintf(d->home, sizeof(d->home), "/var/tmp/al_uxdoc_XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(d->home));
  snprintf(d->e_home, sizeof(d->e_home), "HOME=%s", d->home);
  snprintf(d->e_run, sizeof(d->e_run), "XDG_RUNTIME_DIR=%s", d->home);
  d->env[n++] = "PATH=/usr/bin:/bin";
  d->env[n++] = "NO_COLOR=1";
  d->env[n++] = "XDG_CONFIG_HOME=/nonexistent";
  d->env[n++] = d->e_home;
  d->env[n++] = d->e_run;
  if (url != NULL) {
    snprintf(d->e_url, sizeof(d->e_url), "AGENTLOOP_BASE_URL=%s", url);
    d->env[n++] = d->e_url;
  }
  if (ca != NULL) {
    snprintf(d->e_ca, sizeof(d->e_ca), "SSL_CERT_FILE=%s", ca);
    d->env[n++] = d->e_ca;
  }
  d->env[n] = NULL;
}

/* Runs `agentloop ARGS` with its output in a file, read into d->out: the
 * daemon doctor starts inherits doctor's stdout and stderr, so pipes would
 * not reach EOF while it runs. */
static void doc_run(ux_t *c, doc_env_t *d, const char *args) {
  char script[1024];
  char path[128];
  const char *sh[] = {"-c", script, NULL};
  FILE *f;
  size_t n;

  snprintf(path, sizeof(path), "%s/doctor.out", d->home);
  snprintf(script, sizeof(script), "exec '%s/agentloop' %s >'%s' 2>&1",
           AL_BINARY_DIR, args, path);
  ux_run(c, "/bin/sh", sh, d->env, false);
  f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  n = fread(d->out, 1, sizeof(d->out) - 1, f);
  d->out[n] = '\0';
  fclose(f);
}

/* Stops the daemon doctor started and removes the home. */
static void doc_env_done(ux_t *c, doc_env_t *d) {
  const char *args[] = {"daemon", "stop", NULL};
  char cmd[200];

  ux_run(c, "agentloop", args, d->env, false);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->home);
  ASSERT_EQ(system(cmd), 0);
}

/* A local server from the environment: no key wanted, and a real TCP
 * connect (the server sees the connection), not a DNS lookup of
 * api.anthropic.com. */
TEST_IMPL(ux_doctor_connects_plain) {
  ux_t c;
  doc_env_t d;
  al_mockllm_stats_t st;
  char url[64], want[200];

  ux_start(&c, answer_yaml, false);
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(c.mock));
  doc_env(&d, url, NULL);
  doc_run(&c, &d, "doctor --no-color");
  doc_env_done(&c, &d); /* before any assertion: no daemon left behind */
  snprintf(want, sizeof(want), "✓ API key      none needed for the local "
                               "server at %s\n", url);
  if (strstr(d.out, want) == NULL) {
    AL_TEST_FAIL("no '%s' in:\n%s%s", want, d.out, "");
  }
  snprintf(want, sizeof(want), "✓ base URL     %s: TCP connect (plain HTTP, "
                               "no TLS), HTTP ", url);
  if (strstr(d.out, want) == NULL) {
    AL_TEST_FAIL("no '%s' in:\n%s%s", want, d.out, "");
  }
  ASSERT_NULL(strstr(d.out, "api.anthropic.com"));
  al_mockllm_stats(c.mock, &st);
  ASSERT_GE(st.connections_accepted, 1);
  ux_finish(&c);
  return 0;
}

/* TLS: the handshake is made and the certificate verified against the CA
 * bundle (SSL_CERT_FILE): the test CA passes; a server whose certificate
 * another CA signed fails the check (exit 1). --base-url as for run. */
TEST_IMPL(ux_doctor_connects_tls) {
  ux_t c;
  doc_env_t d;
  char args[128];
  int64_t exit_status;
  al_mockllm_options_t mo;
  char err[256];
  char want[200];

  ux_start(&c, answer_yaml, true);
  doc_env(&d, NULL, AL_TEST_CERTS_DIR "/ca.crt");
  snprintf(args, sizeof(args), "doctor --no-color --base-url "
           "https://127.0.0.1:%d", al_mockllm_port(c.mock));
  doc_run(&c, &d, args);
  doc_env_done(&c, &d);
  snprintf(want, sizeof(want), "✓ base URL     https://127.0.0.1:%d: TCP "
                               "connect and TLS handshake (certificate "
                               "verified), HTTP ", al_mockllm_port(c.mock));
  if (strstr(d.out, want) == NULL) {
    AL_TEST_FAIL("no '%s' in:\n%s%s", want, d.out, "");
  }
  ux_finish(&c);

  /* The same server with a certificate of a CA the bundle does not hold. */
  memset(&c, 0, sizeof(c));
  c.pty = -1;
  ASSERT_EQ(uv_loop_init(&c.loop), 0);
  c.loop.data = &c;
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = answer_yaml;
  mo.err = err;
  mo.err_len = sizeof(err);
  mo.tls_cert = AL_TEST_CERTS_DIR "/unknown.crt";
  mo.tls_key = AL_TEST_CERTS_DIR "/unknown.key";
  ASSERT_EQ(al_mockllm_new(&c.loop, &mo, &c.mock), 0);
  doc_env(&d, NULL, AL_TEST_CERTS_DIR "/ca.crt");
  snprintf(args, sizeof(args), "doctor --no-color --base-url "
           "https://127.0.0.1:%d", al_mockllm_port(c.mock));
  doc_run(&c, &d, args);
  exit_status = c.exit_status;
  doc_env_done(&c, &d);
  snprintf(want, sizeof(want), "✗ base URL     https://127.0.0.1:%d: TLS "
                               "handshake failed", al_mockllm_port(c.mock));
  if (strstr(d.out, want) == NULL) {
    AL_TEST_FAIL("no '%s' in:\n%s%s", want, d.out, "");
  }
  ASSERT_EQ(exit_status, 1);
  ux_finish(&c);
  return 0;
}

/* ---- the chat warns of a deprecated model -------------------------------- */

typedef struct {
  ux_t *c;
  uv_poll_t poll;
  int master;
  char buf[65536];
  size_t len;
  const char *want;
  bool seen;
  bool done;
} chat_pty_t;

static void on_pty(uv_poll_t *p, int status, int events) {
  chat_pty_t *t = p->data;
  const char *help;
  ssize_t n;

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
  if (t->len + 1 >= sizeof(t->buf)) {
    t->len = 0; /* keep draining: the chat waits for its output to drain */
    t->buf[0] = '\0';
  }
  /* The session's line, then the prompt: whatever the chat says at start
   * is on the screen by then (the warning, or nothing). */
  help = t->done ? NULL : strstr(t->buf, "/help for commands");
  if (help != NULL && strstr(help, "> ") != NULL) {
    t->done = true;
    t->seen = strstr(t->buf, t->want) != NULL;
    ASSERT_EQ(uv_process_kill(&t->c->proc, SIGTERM), 0);
  }
}

static void on_chat_exit(uv_process_t *p, int64_t status, int sig) {
  ux_t *c = p->loop->data;

  (void)status;
  (void)sig;
  c->exits++;
  uv_close((uv_handle_t *)p, NULL);
}

/* The chat, on a terminal, names the configured model's end of life and
 * its replacement when the session starts (from the catalogue). */
TEST_IMPL(ux_chat_deprecated_model_warns) {
  ux_t c;
  chat_pty_t t;
  doc_env_t d;
  char e_url[100], e_state[160];
  char *env[16];
  char bin[4096];
  char *argv[] = {bin, NULL};
  uv_process_options_t po;
  uv_stdio_container_t stdio[3];
  struct winsize ws = {24, 100, 0, 0};
  int slave;
  size_t n = 0, i;

  ux_start(&c, answer_yaml, false);
  doc_env(&d, NULL, NULL);
  for (i = 0; d.env[i] != NULL; i++) {
    env[n++] = d.env[i];
  }
  snprintf(e_url, sizeof(e_url), "AGENTLOOP_BASE_URL=http://127.0.0.1:%d",
           al_mockllm_port(c.mock));
  snprintf(e_state, sizeof(e_state), "XDG_STATE_HOME=%s/state", d.home);
  env[n++] = e_url;
  env[n++] = e_state;
  env[n++] = "AGENTLOOP_MODEL=claude-sonnet-4-5";
  env[n++] = "ANTHROPIC_API_KEY=k";
  env[n++] = "TERM=xterm";
  env[n++] = "LANG=C.UTF-8";
  env[n] = NULL;

  memset(&t, 0, sizeof(t));
  t.c = &c;
  t.want = "warning: model claude-sonnet-4-5 is deprecated: its end of life "
           "is 2026-11-30; use claude-sonnet-5-5";
  t.master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT(t.master >= 0);
  ASSERT_EQ(grantpt(t.master), 0);
  ASSERT_EQ(unlockpt(t.master), 0);
  ASSERT_EQ(ioctl(t.master, TIOCSWINSZ, &ws), 0);
  slave = open(ptsname(t.master), O_RDWR | O_NOCTTY);
  ASSERT(slave >= 0);
  ASSERT_EQ(fcntl(t.master, F_SETFL, O_NONBLOCK), 0);
  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  memset(&po, 0, sizeof(po));
  for (i = 0; i < 3; i++) {
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = slave;
  }
  po.file = bin;
  po.args = argv;
  po.env = env;
  po.cwd = d.home;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_chat_exit;
  po.flags = UV_PROCESS_DETACHED;
  ASSERT_EQ(uv_spawn(&c.loop, &c.proc, &po), 0);
  close(slave);
  ASSERT_EQ(uv_poll_init(&c.loop, &t.poll, t.master), 0);
  t.poll.data = &t;
  ASSERT_EQ(uv_poll_start(&t.poll, UV_READABLE, on_pty), 0);
  while (c.exits == 0 && uv_run(&c.loop, UV_RUN_ONCE) != 0) {
  }
  uv_poll_stop(&t.poll);
  uv_close((uv_handle_t *)&t.poll, NULL);
  doc_env_done(&c, &d); /* runs the loop: the poll handle is closed */
  close(t.master);
  if (!t.seen) {
    AL_TEST_FAIL("no '%s' on the chat's screen:\n%s", t.want, t.buf);
  }
  ux_finish(&c);
  return 0;
}
