/* Golden-file tests of the decoders (tests/data/anthropic, tests/data/openai)
 * and of the `agentloop decode` command.
 *
 * Each NAME.sse is a captured-style response body; NAME.expected is what
 * `agentloop decode` prints for it (the final object on stdout, or the one
 * error line on stderr with exit 1), written from PROTOCOLS.md §2.5/§3.3.
 * In-process, every body runs whole, one byte at a time and at every 2-way
 * split, with the fast path on and off, and must give the same line. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "provider/provider.h"
#include "test.h"

static const char *const anthropic_cases[] = {
    "text", "thinking_signature", "redacted_thinking", "tool_use_split",
    "tool_empty_input", "tool_invalid_input", "citations", "server_tool",
    "unknown_block", "ping_before_start", "error_mid", "no_message_stop",
    "second_message_start", "usage_cumulative", "delta_no_stop_sequence",
    "after_message_stop", "big_numbers", "number_spelling",
    "start_surrogate", "tool_whitespace_input", "tool_key_order"};

static const char *const openai_cases[] = {
    "text", "reasoning", "tool_calls_interleaved", "done_garbage",
    "unterminated", "missing_finish", "error_payload", "event_only",
    "malformed_json", "surrogate_split", "surrogate_noncharacter",
    "content_empty", "big_numbers", "tools_custom",
    "audio", "chunk_id_rule", "choice_index_gap", "tools_index_gap"};

static char *dump(json_t *j) {
  return al__json_dumps_js(j); /* what `agentloop decode` prints */
}

/* The line `agentloop decode` prints (without the newline). */
static char *result_line(al_pstream_t *s, int rc) {
  json_t *o;
  char *out;

  if (rc != 0) {
    if (al_pstream_error_kind(s) == AL_PERR_STREAM_EVENT) {
      o = json_pack("{s:{s:s,s:O}}", "error", "kind", "stream_error_event",
                    "body", al_pstream_error_body(s));
    } else {
      const char *m = al_pstream_error_message(s);
      o = json_pack("{s:{s:s,s:s}}", "error", "kind", "decode_error",
                    "message", m != NULL ? m : al_strerror(rc));
    }
  } else {
    const char *err;
    o = al_pstream_final_json(s, -1, &err);
  }
  ASSERT_NOT_NULL(o);
  out = dump(o);
  json_decref(o);
  return out;
}

/* Runs body through a fresh pipeline, cut at the given points. */
static char *run_split(const al_provider_t *p, const char *body, size_t len,
                       size_t step, size_t cut, bool fast) {
  al_pstream_t s;
  al_pstream_options_t o;
  size_t off = 0;
  int rc = 0;
  char *line;

  al_pstream_options_init(&o);
  o.strict_indexes = false;
  o.fast_path = fast;
  ASSERT_EQ(al_pstream_init(&s, p, &o), 0);
  if (step > 0) {
    while (off < len && rc == 0) {
      size_t n = AL_MIN(step, len - off);
      rc = al_pstream_feed(&s, body + off, n);
      off += n;
    }
  } else {
    rc = al_pstream_feed(&s, body, cut);
    if (rc == 0) {
      rc = al_pstream_feed(&s, body + cut, len - cut);
    }
  }
  if (rc == 0) {
    rc = al_pstream_finish(&s);
  }
  line = result_line(&s, rc);
  al_pstream_free(&s);
  return line;
}

static void check_case(const al_provider_t *p, const char *dir,
                       const char *name) {
  char path[512];
  char *body;
  char *expected;
  size_t len;
  size_t elen;
  size_t cut;
  int fast;

  snprintf(path, sizeof(path), "%s/%s.sse", dir, name);
  body = al_test_read_file(al_test_data_path(path), &len);
  ASSERT_NOT_NULL(body);
  snprintf(path, sizeof(path), "%s/%s.expected", dir, name);
  expected = al_test_read_file(al_test_data_path(path), &elen);
  ASSERT_NOT_NULL(expected);
  while (elen > 0 && expected[elen - 1] == '\n') {
    expected[--elen] = '\0';
  }
  for (fast = 1; fast >= 0; fast--) {
    char *got = run_split(p, body, len, 0, len, fast);
    if (strcmp(got, expected) != 0) {
      AL_TEST_FAIL("%s/%s (whole, fast=%d):\n  got:      %s\n  expected: %s",
                   dir, name, fast, got, expected);
    }
    free(got);
    got = run_split(p, body, len, 1, 0, fast);
    if (strcmp(got, expected) != 0) {
      AL_TEST_FAIL("%s/%s (bytewise, fast=%d):\n  got:      %s", dir, name,
                   fast, got);
    }
    free(got);
  }
  for (cut = 0; cut <= len; cut++) {
    char *got = run_split(p, body, len, 0, cut, true);
    if (strcmp(got, expected) != 0) {
      AL_TEST_FAIL("%s/%s (split at %zu):\n  got:      %s", dir, name, cut,
                   got);
    }
    free(got);
  }
  free(body);
  free(expected);
}

TEST_IMPL(decode_anthropic_corpus) {
  size_t i;

  /* Every vector whole, bytewise and at every 2-way split: 0.8 s of CPU,
   * past 5 s on a loaded 2-core machine (issue 22). */
  al_test_timeout_s(30);
  for (i = 0; i < AL_ARRAY_SIZE(anthropic_cases); i++) {
    check_case(&al_provider_anthropic, "anthropic", anthropic_cases[i]);
  }
  return 0;
}

TEST_IMPL(decode_openai_corpus) {
  size_t i;

  /* As decode_anthropic_corpus: 0.6 s of CPU, 3.2 s loaded. */
  al_test_timeout_s(30);
  for (i = 0; i < AL_ARRAY_SIZE(openai_cases); i++) {
    check_case(&al_provider_openai, "openai", openai_cases[i]);
  }
  return 0;
}

/* ---- the agentloop binary ------------------------------------------------ */

/* Runs `agentloop decode ARGS < input`; returns the exit status and the
 * captured stdout/stderr (malloc'd). */
static int run_cli(const char *args, const char *input, char **out,
                   char **err) {
  char cmd[2048];
  char opath[64];
  char epath[64];
  int st;

  snprintf(opath, sizeof(opath), "/tmp/al_decode_%d.out", (int)getpid());
  snprintf(epath, sizeof(epath), "/tmp/al_decode_%d.err", (int)getpid());
  snprintf(cmd, sizeof(cmd), "'%s/agentloop' decode %s < '%s' > %s 2> %s",
           AL_BINARY_DIR, args, input, opath, epath);
  st = system(cmd);
  *out = al_test_read_file(opath, NULL);
  *err = al_test_read_file(epath, NULL);
  unlink(opath);
  unlink(epath);
  ASSERT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static void check_cli(const char *provider, const char *name) {
  char args[64];
  char path[512];
  char *expected;
  char *out;
  char *err;
  int code;

  snprintf(args, sizeof(args), "--provider %s", provider);
  snprintf(path, sizeof(path), "%s/%s.expected", provider, name);
  expected = al_test_read_file(al_test_data_path(path), NULL);
  ASSERT_NOT_NULL(expected);
  snprintf(path, sizeof(path), "%s/%s.sse", provider, name);
  code = run_cli(args, al_test_data_path(path), &out, &err);
  ASSERT_NOT_NULL(out);
  ASSERT_NOT_NULL(err);
  if (strncmp(expected, "{\"error\":", 9) == 0) {
    ASSERT_EQ(code, 1);
    ASSERT_STR_EQ(out, "");
    ASSERT_STR_EQ(err, expected);
  } else {
    ASSERT_EQ(code, 0);
    ASSERT_STR_EQ(err, "");
    ASSERT_STR_EQ(out, expected);
  }
  free(expected);
  free(out);
  free(err);
}

TEST_IMPL(decode_cli_anthropic) {
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(anthropic_cases); i++) {
    check_cli("anthropic", anthropic_cases[i]);
  }
  return 0;
}

TEST_IMPL(decode_cli_openai) {
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(openai_cases); i++) {
    check_cli("openai", openai_cases[i]);
  }
  return 0;
}

TEST_IMPL(decode_cli_events) {
  static const char *const cases[][2] = {
      {"anthropic", "tool_use_split"}, {"openai", "tool_calls_interleaved"}};
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(cases); i++) {
    char args[64];
    char path[512];
    char *expected;
    char *out;
    char *err;

    snprintf(args, sizeof(args), "--provider %s --events", cases[i][0]);
    snprintf(path, sizeof(path), "%s/%s.events", cases[i][0], cases[i][1]);
    expected = al_test_read_file(al_test_data_path(path), NULL);
    ASSERT_NOT_NULL(expected);
    snprintf(path, sizeof(path), "%s/%s.sse", cases[i][0], cases[i][1]);
    ASSERT_EQ(run_cli(args, al_test_data_path(path), &out, &err), 0);
    ASSERT_STR_EQ(out, expected);
    ASSERT_STR_EQ(err, "");
    free(expected);
    free(out);
    free(err);
  }
  return 0;
}

TEST_IMPL(decode_cli_sse) {
  const char *in = "/tmp/al_decode_sse_in";
  FILE *f;
  char *out;
  char *err;

  f = fopen(in, "wb");
  ASSERT_NOT_NULL(f);
  /* BOM, CRLF/CR/LF, a comment, id persistence and reset, an unnamed
   * event, retry (last valid one wins; bogus ignored), an id-only block,
   * and an unterminated last event (discarded). */
  fputs("\xEF\xBB\xBF: hi\r\nevent: a\r\ndata: 1\r\nid: 7\r\n\r\n"
        "data: two\rdata\r\rretry: 300\nretry: 1x\n\n"
        "id\n\ndata: three\nid: \xE2\x82\n\nretry: 50\ndata: gone",
        f);
  fclose(f);
  ASSERT_EQ(run_cli("--provider sse", in, &out, &err), 0);
  ASSERT_STR_EQ(out,
                "{\"event\":\"a\",\"data\":\"1\",\"id\":\"7\",\"lastEventId\":"
                "\"7\"}\n"
                "{\"event\":null,\"data\":\"two\\n\",\"id\":null,"
                "\"lastEventId\":\"7\"}\n"
                "{\"event\":null,\"data\":\"three\",\"id\":\"\xEF\xBF\xBD\","
                "\"lastEventId\":\"\xEF\xBF\xBD\"}\n"
                "{\"retry\":50}\n");
  ASSERT_STR_EQ(err, "");
  free(out);
  free(err);
  unlink(in);
  return 0;
}

/* retry beyond int64/uint64 prints the exact integer the stream gave. */
TEST_IMPL(decode_cli_sse_retry_exact) {
  static const char *const cases[][2] = {
      {"retry: 9223372036854775808\n", "{\"retry\":9223372036854775808}\n"},
      {"retry: 000100000000000000000000000000\nretry: -1\n",
       "{\"retry\":100000000000000000000000000}\n"},
      {"retry: 000\n", "{\"retry\":0}\n"}};
  const char *in = "/tmp/al_decode_sse_retry_in";
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(cases); i++) {
    FILE *f = fopen(in, "wb");
    char *out;
    char *err;

    ASSERT_NOT_NULL(f);
    fputs(cases[i][0], f);
    fclose(f);
    ASSERT_EQ(run_cli("--provider sse", in, &out, &err), 0);
    ASSERT_STR_EQ(out, cases[i][1]);
    ASSERT_STR_EQ(err, "");
    free(out);
    free(err);
  }
  unlink(in);
  return 0;
}

TEST_IMPL(decode_cli_usage) {
  char *out;
  char *err;

  ASSERT_EQ(run_cli("--provider nope", "/dev/null", &out, &err), 2);
  free(out);
  free(err);
  ASSERT_EQ(run_cli("", "/dev/null", &out, &err), 2);
  free(out);
  free(err);
  /* An empty body is a decode error, not a crash. */
  ASSERT_EQ(run_cli("--provider anthropic", "/dev/null", &out, &err), 1);
  ASSERT_STR_EQ(err, "{\"error\":{\"kind\":\"decode_error\",\"message\":"
                     "\"request ended without sending any chunks\"}}\n");
  free(out);
  free(err);
  return 0;
}
