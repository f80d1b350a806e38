/* OpenAI-compatible servers as they really stream (issue 14): recorded
 * shapes under tests/data/compat/, each decoded
 *   - in process, with the options the loop runs with, whole, byte by byte
 *     and at every 2-way split;
 *   - by `agentloop decode --provider openai --events` (the same path);
 * and the run tests (test_compat_run.c) play the same bytes to the agent
 * over loopback HTTP in random slices.
 * What is compared is a summary of the final normalized message (blocks,
 * stop reason, usage) plus the notices and citations delivered, so a
 * wrong split, a lost part or a double-counted token shows. */
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "provider/provider.h"
#include "test.h"
#include "unit/provider/compat.h"

typedef struct {
  al_buf_t side; /* notices and citations, in order */
} col_t;

static int col_cb(void *data, const al_pevent_t *ev) {
  col_t *c = data;

  if (ev->type == AL_PEV_NOTICE) {
    al_buf_printf(&c->side, "notice:%s;", ev->error_type);
  } else if (ev->type == AL_PEV_CITATION) {
    json_t *u = json_object_get(ev->json, "url");
    json_t *t = json_object_get(ev->json, "title");

    al_buf_printf(&c->side, "cite:%d:%s:%s;", ev->index,
                  json_is_string(u) ? json_string_value(u) : "-",
                  json_is_string(t) ? json_string_value(t) : "-");
  }
  return 0;
}

char *compat_summary(json_t *msg, const char *side) {
  al_buf_t b;
  size_t i;
  json_t *blk;
  char *u;

  al_buf_init(&b, (size_t)1 << 24);
  json_array_foreach(json_object_get(msg, "content"), i, blk) {
    const char *t = json_string_value(json_object_get(blk, "type"));

    if (strcmp(t, "text") == 0) {
      al_buf_printf(&b, "text[%s]", json_string_value(json_object_get(blk, "text")));
    } else if (strcmp(t, "thinking") == 0) {
      json_t *rd = json_object_get(blk, "reasoning_details");

      al_buf_printf(&b, "thinking[%s]",
                    json_string_value(json_object_get(blk, "thinking")));
      if (rd != NULL) {
        char *d = json_dumps(rd, JSON_COMPACT | JSON_SORT_KEYS);

        al_buf_printf(&b, "details%s", d);
        free(d);
      }
    } else if (strcmp(t, "tool_use") == 0) {
      char *in = json_dumps(json_object_get(blk, "input"),
                            JSON_COMPACT | JSON_SORT_KEYS);

      al_buf_printf(&b, "tool[%s %s %s]",
                    json_string_value(json_object_get(blk, "id")),
                    json_string_value(json_object_get(blk, "name")), in);
      free(in);
    } else {
      al_buf_printf(&b, "%s[]", t);
    }
  }
  u = json_dumps(json_object_get(msg, "usage"), JSON_COMPACT | JSON_SORT_KEYS);
  al_buf_printf(&b, " stop=%s usage=%s %s",
                json_string_value(json_object_get(msg, "stop_reason")), u,
                side);
  free(u);
  return b.data;
}

/* The loop's options; cut == len: whole; step > 0: step bytes at a time. */
static const al_provider_t *cur_provider = &al_provider_openai;

static char *decode_runtime(const char *body, size_t len, size_t step,
                            size_t cut, bool think_tags) {
  al_pstream_t s;
  al_pstream_options_t o;
  col_t c;
  size_t off = 0;
  int rc = 0;
  char *out;

  al_buf_init(&c.side, 1 << 20);
  al_buf_append(&c.side, "", 0);
  al_pstream_options_runtime(&o);
  o.on_event = col_cb;
  o.data = &c;
  o.think_tags = think_tags;
  ASSERT_EQ(al_pstream_init(&s, cur_provider, &o), 0);
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
  if (rc != 0) {
    al_buf_t e;

    al_buf_init(&e, 4096);
    al_buf_printf(&e, "error: %s", al_pstream_error_message(&s)
                                       ? al_pstream_error_message(&s)
                                       : al_strerror(rc));
    out = e.data;
  } else {
    out = compat_summary(al_pstream_message(&s), c.side.data);
  }
  al_pstream_free(&s);
  al_buf_free(&c.side);
  return out;
}

static void check_runtime(const char *body, size_t len, const char *name,
                          bool think_tags, const char *expected) {
  size_t cut;
  char *got = decode_runtime(body, len, 0, len, think_tags);

  if (strcmp(got, expected) != 0) {
    AL_TEST_FAIL("%s (whole):\n  got:      %s\n  expected: %s", name, got,
                 expected);
  }
  free(got);
  got = decode_runtime(body, len, 1, 0, think_tags);
  if (strcmp(got, expected) != 0) {
    AL_TEST_FAIL("%s (bytewise):\n  got:      %s", name, got);
  }
  free(got);
  /* Every split of the short bodies; every third byte of the long ones
   * (each cut is a fresh decode of the whole body; the SSE and JSON layers
   * have their own every-split tests). */
  for (cut = 0; cut <= len; cut += len > 2048 ? 3 : 1) {
    got = decode_runtime(body, len, 0, cut, think_tags);
    if (strcmp(got, expected) != 0) {
      AL_TEST_FAIL("%s (split at %zu):\n  got:      %s", name, cut, got);
    }
    free(got);
  }
}

static char *compat_body(const char *name, size_t *len) {
  char path[256];
  char *body;

  snprintf(path, sizeof(path), "compat/%s.sse", name);
  body = al_test_read_file(al_test_data_path(path), len);
  ASSERT_NOT_NULL(body);
  return body;
}

void compat_check_pipeline(size_t i) {
  const compat_case_t *c = &compat_cases[i];
  size_t len;
  char *body = compat_body(c->name, &len);

  cur_provider = al_provider_by_name(c->provider != NULL ? c->provider
                                                         : "openai");
  check_runtime(body, len, c->name, c->think_tags, c->expected);
  free(body);
}

/* `agentloop decode --provider openai --events`: the events include the
 * final message_stop whose message gives the same summary. */
static void check_cli_events(size_t i) {
  const compat_case_t *c = &compat_cases[i];
  char cmd[1024];
  char opath[64];
  char *out;
  char *line;
  char *save = NULL;
  al_buf_t side;
  json_t *final = NULL;
  int st;

  snprintf(opath, sizeof(opath), "/tmp/al_compat_%d.out", (int)getpid());
  {
    char in[512];
    char *slash;

    snprintf(in, sizeof(in), "%s", al_test_data_path("compat/x"));
    slash = strrchr(in, '/');
    snprintf(slash + 1, sizeof(in) - (size_t)(slash + 1 - in), "%s.sse",
             c->name);
    snprintf(cmd, sizeof(cmd),
             "'%s/agentloop' decode --provider %s --events%s < '%s' > %s",
             AL_BINARY_DIR, c->provider != NULL ? c->provider : "openai",
             c->think_tags ? " --think-tags" : "", in, opath);
  }
  st = system(cmd);
  ASSERT(WIFEXITED(st));
  out = al_test_read_file(opath, NULL);
  unlink(opath);
  ASSERT_NOT_NULL(out);
  if (strncmp(c->expected, "error:", 6) == 0) {
    ASSERT_EQ(WEXITSTATUS(st), 1);
    free(out);
    return;
  }
  ASSERT_EQ(WEXITSTATUS(st), 0);
  al_buf_init(&side, 1 << 20);
  al_buf_append(&side, "", 0);
  for (line = strtok_r(out, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    json_t *j = json_loads(line, 0, NULL);
    const char *t;

    ASSERT_NOT_NULL(j);
    t = json_string_value(json_object_get(j, "type"));
    if (strcmp(t, "notice") == 0) {
      al_buf_printf(&side, "notice:%s;",
                    json_string_value(json_object_get(j, "kind")));
    } else if (strcmp(t, "citation_delta") == 0) {
      json_t *ci = json_object_get(j, "citation");
      json_t *u = json_object_get(ci, "url");
      json_t *ti = json_object_get(ci, "title");

      al_buf_printf(&side, "cite:%d:%s:%s;",
                    (int)json_integer_value(json_object_get(j, "index")),
                    json_is_string(u) ? json_string_value(u) : "-",
                    json_is_string(ti) ? json_string_value(ti) : "-");
    } else if (strcmp(t, "message_stop") == 0) {
      json_decref(final);
      final = json_incref(json_object_get(j, "message"));
    }
    json_decref(j);
  }
  ASSERT_NOT_NULL(final);
  {
    char *got = compat_summary(final, side.data);

    if (strcmp(got, c->expected) != 0) {
      AL_TEST_FAIL("%s (agentloop decode --events):\n  got:      %s\n"
                   "  expected: %s",
                   c->name, got, c->expected);
    }
    free(got);
  }
  json_decref(final);
  al_buf_free(&side);
  free(out);
}

size_t compat_find(const char *name) {
  size_t i;

  for (i = 0; i < compat_ncases; i++) {
    if (strcmp(compat_cases[i].name, name) == 0) {
      return i;
    }
  }
  AL_TEST_FAIL("no compat case %s", name);
  return 0;
}

#define COMPAT_DECODE_TEST(n)                    \
  TEST_IMPL(compat_decode_##n) {                 \
    size_t i = compat_find(#n);                  \
    compat_check_pipeline(i);                    \
    check_cli_events(i);                         \
    return 0;                                    \
  }

COMPAT_DECODE_TEST(mistral_parts)
COMPAT_DECODE_TEST(mistral_tools_noindex)
COMPAT_DECODE_TEST(azure_empty_first)
COMPAT_DECODE_TEST(openrouter_reasoning)
COMPAT_DECODE_TEST(vllm_no_finish)
COMPAT_DECODE_TEST(perplexity_citations)
COMPAT_DECODE_TEST(openrouter_annotations)
COMPAT_DECODE_TEST(deepseek_think_tool)
COMPAT_DECODE_TEST(think_tags)
COMPAT_DECODE_TEST(responses_tool)
COMPAT_DECODE_TEST(responses_text)

/* A missing finish_reason is a normal end only after a clean end with a
 * complete message: a body cut inside an event, one whose last event was
 * never terminated, or one whose tool arguments are cut off is still a
 * truncated stream, at every split. */
TEST_IMPL(compat_decode_truncated) {
  static const char tool_cut[] =
      "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,"
      "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
      "\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
      "\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":"
      "\"{\\\"path\\\"\"}}]}}]}\n\n";
  size_t len;
  char *body = compat_body("vllm_no_finish", &len);
  size_t cuts[] = {len - 30, len - 1};
  size_t k;

  for (k = 0; k < AL_ARRAY_SIZE(cuts); k++) {
    size_t cut;

    for (cut = 0; cut <= cuts[k]; cut += 7) {
      char *got = decode_runtime(body, cuts[k], 0, cut, false);

      if (strncmp(got, "error: ", 7) != 0) {
        AL_TEST_FAIL("body cut to %zu bytes (split at %zu) was accepted: %s",
                     cuts[k], cut, got);
      }
      free(got);
    }
  }
  free(body);
  {
    char *got = decode_runtime(tool_cut, strlen(tool_cut), 0,
                               strlen(tool_cut), false);

    ASSERT_STR_EQ(got, "error: missing finish_reason for choice 0");
    free(got);
  }
  return 0;
}

/* `agentloop decode --provider openai-responses` prints exactly what the
 * official openai SDK's finalResponse() gave for the same capture
 * (NAME.sdk.expected, written by tests/diff/responses_diff.sh's
 * responses_sdk.mjs with the SDK pinned in bench/peers). */
TEST_IMPL(compat_decode_responses_sdk) {
  static const char *const names[] = {"responses_tool", "responses_text"};
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(names); i++) {
    char in[512];
    char exp[512];
    char cmd[2048];
    char opath[64];
    char *out;
    char *want;
    int st;

    snprintf(in, sizeof(in), "%s/compat/%s.sse", AL_TEST_DATA_DIR, names[i]);
    snprintf(exp, sizeof(exp), "%s/compat/%s.sdk.expected", AL_TEST_DATA_DIR,
             names[i]);
    snprintf(opath, sizeof(opath), "/tmp/al_compat_sdk_%d.out", (int)getpid());
    snprintf(cmd, sizeof(cmd),
             "'%s/agentloop' decode --provider openai-responses < '%s' > %s",
             AL_BINARY_DIR, in, opath);
    st = system(cmd);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    out = al_test_read_file(opath, NULL);
    unlink(opath);
    want = al_test_read_file(exp, NULL);
    ASSERT_NOT_NULL(out);
    ASSERT_NOT_NULL(want);
    ASSERT_STR_EQ(out, want);
    free(out);
    free(want);
  }
  return 0;
}

/* `agentloop decode` streams its input: with stdin still open, the
 * events of what has arrived are already on stdout (a decoder that read
 * all of stdin first would print nothing until the writer closed it). */
TEST_IMPL(decode_streams_stdin) {
  static const char part1[] =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"
      "{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
      "\"x\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
      "\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"early\"}}\n\n";
  static const char part2[] =
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
      "\"index\":0}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":"
      "{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":"
      "{\"output_tokens\":2}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  int in[2];
  int out[2];
  char exe[512];
  char buf[65536] = "";
  size_t got = 0;
  pid_t pid;
  int st;
  int waited_ms = 0;
  int limit_ms = 3000 * al_test_timeout_multiplier(); /* under the runner's 5 s */

  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  snprintf(exe, sizeof(exe), "%s/agentloop", AL_BINARY_DIR);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    execl(exe, exe, "decode", "--provider", "anthropic", "--events",
          (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  ASSERT_EQ(write(in[1], part1, sizeof(part1) - 1), (ssize_t)sizeof(part1) - 1);
  /* stdin stays open: the delta must come out now. */
  while (strstr(buf, "\"text\":\"early\"") == NULL || got == 0) {
    struct pollfd pfd = {out[0], POLLIN, 0};
    ssize_t n;

    buf[got] = '\0';
    if (strstr(buf, "\"text\":\"early\"") != NULL) {
      break;
    }
    ASSERT(waited_ms < limit_ms);
    if (poll(&pfd, 1, 100) == 0) {
      waited_ms += 100;
      continue;
    }
    n = read(out[0], buf + got, sizeof(buf) - 1 - got);
    ASSERT(n > 0);
    got += (size_t)n;
    buf[got] = '\0';
  }
  ASSERT_EQ(write(in[1], part2, sizeof(part2) - 1), (ssize_t)sizeof(part2) - 1);
  close(in[1]);
  for (;;) {
    ssize_t n = read(out[0], buf + got, sizeof(buf) - 1 - got);

    if (n <= 0) {
      break;
    }
    got += (size_t)n;
  }
  buf[got] = '\0';
  close(out[0]);
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_NOT_NULL(strstr(buf, "\"type\":\"message_stop\""));
  return 0;
}
