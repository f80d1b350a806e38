/* Binary-safe history (issue 15): a file with NUL bytes and invalid UTF-8
 * read with read_file, and a bash command printing (seeded) random bytes,
 * go through the agent; the next request is valid, no tool result holds a
 * NUL or invalid UTF-8, and the results say what was done to them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "binfx.h"
#include "test.h"

/* Deterministic "random" bytes (xorshift64*), every byte value present. */
void bin_fill(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  size_t i;

  for (i = 0; i < n; i++) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    p[i] = (unsigned char)((x * 0x2545F4914F6CDD1DULL) >> 56);
  }
}

void bin_write_file(const char *dir, const char *name, size_t n) {
  char path[512];
  unsigned char *buf = malloc(n);
  FILE *fp;

  ASSERT_NOT_NULL(buf);
  bin_fill(buf, n, 42);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  fp = fopen(path, "wb");
  ASSERT_NOT_NULL(fp);
  ASSERT_EQ(fwrite(buf, 1, n, fp), n);
  fclose(fp);
  free(buf);
}

/* No NUL, valid UTF-8 (jansson's own check on a round trip). */
void bin_assert_clean(const char *s) {
  json_t *j;
  char *d;

  ASSERT_NOT_NULL(s);
  j = json_string(s);
  ASSERT_NOT_NULL(j); /* NULL on invalid UTF-8 */
  d = json_dumps(j, JSON_ENCODE_ANY);
  ASSERT_NOT_NULL(d);
  ASSERT_NULL(strstr(d, "\\u0000"));
  free(d);
  json_decref(j);
}

const char bin_scenario[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: r1, name: read_file, input: {path: rand.bin}}\n"
    "        - tool_use: {id: r2, name: read_file, input: {path: text.txt}}\n"
    "        - tool_use: {id: b1, name: bash, input: {command: "
    "\"cat rand.bin\"}}\n"
    "        - tool_use: {id: b2, name: bash, input: {command: "
    "\"printf 'tail\\\\000end\\\\377\\\\n'\"}}\n"
    "  - reply: {content: [{text: 'seen'}]}\n"
    "  - reply: {content: [{text: 'again'}]}\n";

TEST_IMPL(binary_tool_output_agent) {
  fx_t f;
  const json_t *r1, *r2, *b1, *b2;

  fx_init(&f, bin_scenario);
  f.opts.sandbox = AL_SANDBOX_OFF;
  fx_start(&f);
  bin_write_file(f.workspace, "rand.bin", 4096);
  fx_write(&f, "text.txt", "caf\xc3\xa9 ok\nbad \xff byte\nnul-free\n");
  fx_run(&f, "look");
  if (getenv("AL_TEST_DUMP") != NULL) {
    size_t i;
    json_t *e;

    json_array_foreach(f.events, i, e) {
      char *d = json_dumps(e, JSON_COMPACT);

      fprintf(stderr, "%3zu %.300s\n", i, d);
      free(d);
    }
  }
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  r1 = fx_tool_result(&f, 1, "r1");
  r2 = fx_tool_result(&f, 1, "r2");
  b1 = fx_tool_result(&f, 1, "b1");
  b2 = fx_tool_result(&f, 1, "b2");
  ASSERT_NOT_NULL(b2);
  bin_assert_clean(fx_jstr(b2, "content"));
  ASSERT_NOT_NULL(r1);
  ASSERT_NOT_NULL(r2);
  ASSERT_NOT_NULL(b1);
  bin_assert_clean(fx_jstr(r1, "content"));
  bin_assert_clean(fx_jstr(r2, "content"));
  bin_assert_clean(fx_jstr(b1, "content"));
  /* A binary file is named as such, not dumped. */
  ASSERT_NOT_NULL(strstr(fx_jstr(r1, "content"), "binary"));
  /* Text with one bad byte keeps its text, the byte replaced. */
  ASSERT_NOT_NULL(strstr(fx_jstr(r2, "content"), "caf\xc3\xa9 ok"));
  ASSERT_NOT_NULL(strstr(fx_jstr(r2, "content"), "bad \xef\xbf\xbd byte"));
  /* Binary bash output is named with its size. */
  ASSERT_NOT_NULL(strstr(fx_jstr(b1, "content"), "[binary output: 4096 bytes"));
  /* A stray NUL and bad byte in text: replaced, the text kept, a note. */
  ASSERT_NOT_NULL(strstr(fx_jstr(b2, "content"),
                         "tail\xef\xbf\xbd" "end\xef\xbf\xbd"));
  ASSERT_NOT_NULL(strstr(fx_jstr(b2, "content"),
                         "[1 NUL byte(s) and 1 invalid UTF-8"));
  /* The history carries on: a second run's request is valid too. */
  fx_run(&f, "again");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}
