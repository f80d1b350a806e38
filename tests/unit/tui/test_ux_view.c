/* Issue 22, defect 10: what the chat shows a new user - a long tool output
 * says how much was cut, a wide Markdown table fits the terminal. */
#include <locale.h>

#include <jansson.h>

#include "client/tui.h"
#include "test.h"

static void utf8_locale(void) {
  if (setlocale(LC_CTYPE, "C.UTF-8") == NULL) {
    setlocale(LC_CTYPE, "en_US.UTF-8");
  }
}

typedef struct {
  char *out;
  size_t out_len;
  char *err;
  size_t err_len;
  FILE *fo;
  FILE *fe;
  al__tui_view_t v;
} vfix_t;

static void vfix_init(vfix_t *f) {
  memset(f, 0, sizeof(*f));
  f->fo = open_memstream(&f->out, &f->out_len);
  f->fe = open_memstream(&f->err, &f->err_len);
  al__tui_view_init(&f->v, f->fo, f->fe, false, false, 80, 24);
}

static void vfix_feed_json(vfix_t *f, json_t *ev, uint64_t now) {
  (void)al__tui_view_event(&f->v, ev, now);
  json_decref(ev);
  fflush(f->fo);
  fflush(f->fe);
}

static void vfix_free(vfix_t *f) {
  al__tui_view_free(&f->v);
  fclose(f->fo);
  fclose(f->fe);
  free(f->out);
  free(f->err);
}

/* A 2,000-line tool output: three lines shown, then how many lines and
 * bytes were left out - not a bare "…". */
TEST_IMPL(ux_tool_output_cut_says_how_much) {
  vfix_t f;
  al_buf_t b;
  size_t i, rest;
  char line[32];
  char want[128];

  utf8_locale();
  al_buf_init(&b, 1u << 20);
  for (i = 1; i <= 2000; i++) {
    snprintf(line, sizeof(line), "line %zu\n", i);
    ASSERT_EQ(al_buf_append(&b, line, strlen(line)), 0);
  }
  /* Bytes after the third line, without the last newline. */
  rest = b.len - strlen("line 1\nline 2\nline 3\n") - 1;
  vfix_init(&f);
  vfix_feed_json(&f, json_pack("{s:s, s:s, s:s, s:{s:s}}", "type",
                               "tool_use_started", "call_id", "t1", "name",
                               "bash", "input", "command", "seq 2000"), 1);
  vfix_feed_json(&f, json_pack("{s:s, s:s, s:s, s:b, s:s%, s:i}", "type",
                               "tool_use_completed", "call_id", "t1", "name",
                               "bash", "is_error", 0, "content", b.data,
                               b.len, "duration_ms", 5), 2);
  snprintf(want, sizeof(want),
           "  ⎿ line 1\n    line 2\n    line 3\n"
           "    … 1,997 more lines (%zu,%03zu bytes)\n",
           rest / 1000, rest % 1000);
  ASSERT_NOT_NULL(strstr(f.err, want));
  /* One line left: named as one. */
  vfix_feed_json(&f, json_pack("{s:s, s:s, s:s, s:{s:s}}", "type",
                               "tool_use_started", "call_id", "t2", "name",
                               "bash", "input", "command", "ls"), 3);
  vfix_feed_json(&f, json_pack("{s:s, s:s, s:s, s:b, s:s, s:i}", "type",
                               "tool_use_completed", "call_id", "t2", "name",
                               "bash", "is_error", 0, "content",
                               "a\nb\nc\nd\n", "duration_ms", 5), 4);
  ASSERT_NOT_NULL(strstr(f.err, "    c\n    … 1 more line (1 bytes)\n"));
  vfix_free(&f);
  al_buf_free(&b);
  return 0;
}

/* Every line of s (split at \n) is at most cols columns wide on screen. */
static void assert_lines_fit(const char *s, size_t cols) {
  while (*s != '\0') {
    const char *nl = strchr(s, '\n');
    size_t len = nl != NULL ? (size_t)(nl - s) : strlen(s);
    size_t w = al__tui_visible_width(s, len);

    if (w > cols) {
      AL_TEST_FAIL("a line of %zu columns (> %zu): %.*s", w, cols, (int)len,
                   s);
    }
    if (nl == NULL) {
      break;
    }
    s = nl + 1;
  }
}

static const char *wide_table =
    "| name | description | size |\n"
    "|------|-------------|-----:|\n"
    "| alpha | a very long description of the first thing that goes on and "
    "on past any terminal | 12 |\n"
    "| beta | short | 3456 |\n"
    "| gamma | another long cell, with **bold** words inside it, also far "
    "too wide | 7 |\n";

/* A table wider than the terminal: its wide column is narrowed and cut
 * with "…", the narrow ones keep their width, no line is wider than the
 * terminal - with and without colour, and through the chat's stream. */
TEST_IMPL(ux_md_wide_table_fits_terminal) {
  al_buf_t b;
  al__md_stream_t st;
  const char *last_erase;
  const char *p;

  utf8_locale();
  al_buf_init(&b, 1u << 20);
  ASSERT_EQ(al__md_render_cols(wide_table, strlen(wide_table), false, 40, &b),
            0);
  assert_lines_fit(b.data, 40);
  ASSERT_NOT_NULL(strstr(b.data, "…"));
  ASSERT_NOT_NULL(strstr(b.data, "beta  | short")); /* narrow: kept whole */
  ASSERT_NOT_NULL(strstr(b.data, "|   12\n"));        /* right-aligned */
  al_buf_reset(&b);
  ASSERT_EQ(al__md_render_cols(wide_table, strlen(wide_table), true, 40, &b),
            0);
  assert_lines_fit(b.data, 40);
  al_buf_reset(&b);
  /* A table inside a quote counts the quote's bar. */
  {
    const char *quoted = "> | a | b |\n> |---|---|\n> | xxxxxxxxxxxxxxxxxxxx"
                         "xxxxxxxxxxxx | yyyyyyyyyyyyyyyy |\n";

    ASSERT_EQ(al__md_render_cols(quoted, strlen(quoted), false, 30, &b), 0);
  }
  assert_lines_fit(b.data, 30);
  al_buf_reset(&b);
  /* Wide characters cut at an odd width: the row is padded to the column
   * so the separators stay aligned. */
  {
    const char *cjk = "| 名前名前名前名前名前 | x |\n|---|---|\n"
                      "| abcdefghijklmnopqrstuvwxyz | y |\n";

    ASSERT_EQ(al__md_render_cols(cjk, strlen(cjk), false, 14, &b), 0);
  }
  assert_lines_fit(b.data, 14);
  {
    const char *l2 = strchr(b.data, '\n') + 1;
    const char *l3 = strchr(l2, '\n') + 1;

    ASSERT_EQ(al__tui_width(b.data, (size_t)(strstr(b.data, " | ") - b.data)),
              al__tui_width(l3, (size_t)(strstr(l3, " | ") - l3)));
  }
  al_buf_reset(&b);
  /* No limit: the table as it was. */
  ASSERT_EQ(al__md_render_cols(wide_table, strlen(wide_table), false, 0, &b),
            0);
  ASSERT_NULL(strstr(b.data, "…"));
  al_buf_reset(&b);

  /* The chat's stream: what stays on screen after the preview is erased. */
  al__md_stream_init(&st, true, 40, 50);
  ASSERT_EQ(al__md_stream_feed(&st, wide_table, strlen(wide_table), &b), 0);
  ASSERT_EQ(al__md_stream_finish(&st, &b), 0);
  al__md_stream_free(&st);
  last_erase = NULL;
  for (p = b.data; (p = strstr(p, "\x1b[J")) != NULL; p += 3) {
    last_erase = p + 3;
  }
  ASSERT_NOT_NULL(last_erase);
  assert_lines_fit(last_erase, 40);
  ASSERT_NOT_NULL(strstr(last_erase, "…"));
  al_buf_free(&b);
  return 0;
}

/* An automatic compaction: "compacting…" first, the summary the model
 * streams is not printed as the answer, one line with the result after;
 * the answer that follows is shown again. */
TEST_IMPL(ux_compaction_not_shown_as_answer) {
  vfix_t f;
  json_error_t e;
  static const char *const evs[] = {
      "{\"type\":\"run_started\",\"seq\":1}",
      "{\"type\":\"compaction_started\",\"trigger\":\"auto\","
      "\"tokens_before\":150000}",
      "{\"type\":\"text_delta\",\"index\":0,\"text\":\"SUMMARY of the "
      "history\"}",
      "{\"type\":\"thinking_delta\",\"index\":0,\"text\":\"summary-thought\"}",
      "{\"type\":\"content_block_completed\",\"index\":0,"
      "\"block_type\":\"text\"}",
      "{\"type\":\"compaction_completed\",\"trigger\":\"auto\","
      "\"tokens_before\":150000,\"tokens_after\":20000,"
      "\"dropped_messages\":40,\"fallback\":false}",
      "{\"type\":\"text_delta\",\"index\":0,\"text\":\"The answer.\"}",
      "{\"type\":\"content_block_completed\",\"index\":0,"
      "\"block_type\":\"text\"}",
      "{\"type\":\"final\",\"text\":\"The answer.\"}",
  };
  size_t i;
  const char *c1, *c2;

  utf8_locale();
  vfix_init(&f);
  for (i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
    json_t *ev = json_loads(evs[i], 0, &e);

    ASSERT_NOT_NULL(ev);
    vfix_feed_json(&f, ev, i);
  }
  ASSERT_STR_EQ(f.out, "The answer.\n");
  ASSERT_NULL(strstr(f.err, "SUMMARY"));
  ASSERT_NULL(strstr(f.err, "summary-thought"));
  c1 = strstr(f.err, "compacting… (auto, 150,000 tokens)\n");
  c2 = strstr(f.err, "context compacted (auto): 150,000 → 20,000 tokens, 40 "
                     "messages summarized\n");
  ASSERT_NOT_NULL(c1);
  ASSERT_NOT_NULL(c2);
  ASSERT(c1 < c2);
  vfix_free(&f);
  return 0;
}

/* /usage and /cost: the dollars the daemon's session/usage gives. */
TEST_IMPL(ux_usage_cost_text) {
  char buf[160];
  json_t *a = json_real(0.033);
  json_t *b = json_real(0.011);
  json_t *big = json_real(12.5);

  al__tui_cost_text(a, b, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "$0.0330 this session ($0.0110 last run)");
  al__tui_cost_text(big, json_null(), buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "$12.50 this session");
  al__tui_cost_text(json_null(), json_null(), buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "cost unknown"));
  json_decref(a);
  json_decref(b);
  json_decref(big);
  return 0;
}
