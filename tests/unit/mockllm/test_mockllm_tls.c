/* mockllm's TLS listener, driven by a real agent over loopback HTTPS (the
 * project's own mbedtls client trusting the test CA): a stream big enough
 * that the server's writes go partial, two requests on one kept-alive
 * session, a reset_after_bytes fault counted in plaintext, and the option
 * checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentloop/agentloop.h"
#include "mockllm/mockllm.h"
#include "test.h"

typedef struct {
  uv_loop_t loop;
  al_mockllm_t *mock;
  al_agent_t *agent;
  uint64_t deltas;
  uint64_t text_bytes;
  int finals;
  int errors;
  int ends;
} tls_fx_t;

static void tls_fx_event(const al_event_t *ev, void *data) {
  tls_fx_t *f = data;

  switch (ev->type) {
  case AL_EVENT_TEXT_DELTA:
    f->deltas++;
    f->text_bytes += ev->u.delta.text.len;
    break;
  case AL_EVENT_FINAL:
    f->finals++;
    f->ends++;
    break;
  case AL_EVENT_ERROR:
    f->errors++;
    f->ends++;
    break;
  case AL_EVENT_INTERRUPTED:
    f->ends++;
    break;
  default:
    break;
  }
}

static void tls_fx_start(tls_fx_t *f, const char *yaml) {
  al_mockllm_options_t mo;
  al_agent_options_t ao;
  char err[256];
  char url[64];

  memset(f, 0, sizeof(*f));
  ASSERT_EQ(uv_loop_init(&f->loop), 0);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.tls_cert = AL_TEST_CERTS_DIR "/server.crt";
  mo.tls_key = AL_TEST_CERTS_DIR "/server.key";
  mo.err = err;
  mo.err_len = sizeof(err);
  ASSERT_EQ(al_mockllm_new(&f->loop, &mo, &f->mock), 0);
  snprintf(url, sizeof(url), "https://localhost:%d", al_mockllm_port(f->mock));
  al_agent_options_init(&ao);
  ao.base_url = url;
  ao.api_key = "k";
  ao.model = "m";
  ao.max_turns = 1;
  ao.retry_max_attempts = 1;
  ao.ca_file = AL_TEST_CERTS_DIR "/ca.crt";
  ASSERT_EQ(al_agent_new(&f->loop, &ao, &f->agent), 0);
  ASSERT_EQ(al_agent_subscribe(f->agent, tls_fx_event, f, NULL), 0);
}

static void tls_fx_run(tls_fx_t *f) {
  int want = f->ends + 1;

  ASSERT_EQ(al_agent_run(f->agent, "go"), 0);
  while (f->ends < want && uv_run(&f->loop, UV_RUN_ONCE) != 0) {
  }
  ASSERT_EQ(f->ends, want);
}

static void tls_fx_finish(tls_fx_t *f) {
  al_agent_close(f->agent, NULL);
  al_mockllm_close(f->mock, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&f->loop), 0);
}

/* ~5 MB of events: more than a socket buffer takes at once, so records go
 * out through uv_write after partial writes, in order. */
TEST_IMPL(mockllm_tls_big_stream) {
  tls_fx_t f;
  al_mockllm_stats_t st;

  tls_fx_start(&f, "responses:\n"
                   "  - reply:\n"
                   "      content:\n"
                   "        - repeat_text: {count: 40000, text: \"tok \"}\n");
  tls_fx_run(&f);
  ASSERT_EQ(f.errors, 0);
  ASSERT_EQ(f.finals, 1);
  ASSERT_EQ(f.deltas, 40000);
  ASSERT_EQ(f.text_bytes, 160000);
  al_mockllm_stats(f.mock, &st);
  ASSERT_EQ(st.connections_accepted, 1);
  tls_fx_finish(&f);
  return 0;
}

/* Two runs: the second request reuses the first's TLS session. */
TEST_IMPL(mockllm_tls_keep_alive) {
  tls_fx_t f;
  al_mockllm_stats_t st;

  tls_fx_start(&f, "responses:\n"
                   "  - reply: {content: [{text: \"one\"}]}\n"
                   "  - reply: {content: [{text: \"two\"}]}\n");
  tls_fx_run(&f);
  tls_fx_run(&f);
  ASSERT_EQ(f.finals, 2);
  ASSERT_EQ(f.errors, 0);
  al_mockllm_stats(f.mock, &st);
  ASSERT_EQ(st.requests, 2);
  ASSERT_EQ(st.connections_accepted, 1);
  ASSERT_EQ(al_mockllm_record_count(f.mock), 2);
  tls_fx_finish(&f);
  return 0;
}

/* reset_after_bytes counts plaintext: the cut lands inside the stream and
 * the agent reports the connection loss (no retries configured). */
TEST_IMPL(mockllm_tls_reset_fault) {
  tls_fx_t f;

  tls_fx_start(&f, "responses:\n"
                   "  - reply:\n"
                   "      content:\n"
                   "        - repeat_text: {count: 1000, text: \"tok \"}\n"
                   "    fault: {reset_after_bytes: 2000}\n");
  tls_fx_run(&f);
  ASSERT_EQ(f.finals, 0);
  ASSERT_EQ(f.errors, 1);
  ASSERT(f.deltas > 0 && f.deltas < 1000);
  tls_fx_finish(&f);
  return 0;
}

TEST_IMPL(mockllm_tls_options) {
  uv_loop_t loop;
  al_mockllm_options_t mo;
  al_mockllm_t *m = NULL;
  char err[256];

  ASSERT_EQ(uv_loop_init(&loop), 0);
  al_mockllm_options_init(&mo);
  mo.err = err;
  mo.err_len = sizeof(err);
  mo.tls_cert = AL_TEST_CERTS_DIR "/server.crt";
  ASSERT_EQ(al_mockllm_new(&loop, &mo, &m), AL_EINVAL);
  ASSERT_NOT_NULL(strstr(err, "tls_key"));
  mo.tls_key = AL_TEST_CERTS_DIR "/missing.key";
  ASSERT_EQ(al_mockllm_new(&loop, &mo, &m), AL_EINVAL);
  ASSERT_NOT_NULL(strstr(err, "missing.key"));
  ASSERT_NULL(m);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  return 0;
}
