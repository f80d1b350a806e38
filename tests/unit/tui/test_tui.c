/* The chat's pure parts: colour decision, sanitizing, widths, slash
 * commands, the usage line, tool labels and the view fed with events. */
#include <locale.h>

#include "client/tui.h"
#include "test.h"

static void utf8_locale(void) {
  if (setlocale(LC_CTYPE, "C.UTF-8") == NULL) {
    setlocale(LC_CTYPE, "en_US.UTF-8");
  }
}

TEST_IMPL(tui_color_decision) {
  al_color_when_t w;

  /* auto: a TTY, TERM not dumb, NO_COLOR unset or empty. */
  ASSERT(al__tui_color_decide(AL_COLOR_AUTO, true, "xterm", NULL, NULL));
  ASSERT(!al__tui_color_decide(AL_COLOR_AUTO, false, "xterm", NULL, NULL));
  ASSERT(!al__tui_color_decide(AL_COLOR_AUTO, true, "dumb", NULL, NULL));
  ASSERT(!al__tui_color_decide(AL_COLOR_AUTO, true, "xterm", "1", NULL));
  ASSERT(al__tui_color_decide(AL_COLOR_AUTO, true, "xterm", "", NULL));
  /* Forced on: flag or FORCE_COLOR (not "0"); forced off by the flag. */
  ASSERT(al__tui_color_decide(AL_COLOR_ALWAYS, false, "dumb", "1", NULL));
  ASSERT(al__tui_color_decide(AL_COLOR_AUTO, false, NULL, NULL, "1"));
  ASSERT(!al__tui_color_decide(AL_COLOR_AUTO, false, NULL, NULL, "0"));
  ASSERT(!al__tui_color_decide(AL_COLOR_NEVER, true, "xterm", NULL, "1"));
  ASSERT(al__tui_parse_color("never", &w) && w == AL_COLOR_NEVER);
  ASSERT(!al__tui_parse_color("sometimes", &w));
  return 0;
}

static char *clean(const char *s, size_t n, bool one_line) {
  al_buf_t b;
  char *r;

  al_buf_init(&b, 1u << 16);
  ASSERT_EQ(al__tui_sanitize(&b, s, n, one_line), 0);
  r = strdup(b.data != NULL ? b.data : "");
  al_buf_free(&b);
  return r;
}

#define ASSERT_CLEAN(in, one_line, expected)                  \
  do {                                                        \
    char *got_ = clean((in), sizeof(in) - 1, (one_line));     \
    ASSERT_STR_EQ(got_, (expected));                          \
    free(got_);                                               \
  } while (0)

TEST_IMPL(tui_sanitize_controls) {
  ASSERT_CLEAN("plain text ok", false, "plain text ok");
  ASSERT_CLEAN("a\nb\tc", false, "a\nb\tc");
  ASSERT_CLEAN("a\nb\tc", true, "a b c");
  ASSERT_CLEAN("\x1b[2Jx", false, "^[[2Jx");
  ASSERT_CLEAN("\x1b]52;c;aGk=\x07", false, "^[]52;c;aGk=^G");
  ASSERT_CLEAN("fake\r? Allow", false, "fake^M? Allow");
  ASSERT_CLEAN("del\x7f bs\x08", false, "del^? bs^H");
  ASSERT_CLEAN("nul\0x", false, "nul^@x");
  /* C1 CSI (U+009B) and bidi overrides are spelled out. */
  ASSERT_CLEAN("\xc2\x9b" "2J", false, "\\u009b2J");
  ASSERT_CLEAN("\xe2\x80\xae" "abc", false, "\\u202eabc");
  /* Invalid UTF-8, overlongs and surrogates become U+FFFD. */
  ASSERT_CLEAN("\xff", false, "\xef\xbf\xbd");
  ASSERT_CLEAN("\xc0\x80", false, "\xef\xbf\xbd\xef\xbf\xbd");
  ASSERT_CLEAN("\xed\xa0\x80", false,
               "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  ASSERT_CLEAN("caf\xc3\xa9 \xf0\x9f\x98\x80", false,
               "caf\xc3\xa9 \xf0\x9f\x98\x80");
  return 0;
}

TEST_IMPL(tui_display_width) {
  utf8_locale();
  ASSERT_EQ(al__tui_width("abc", 3), 3);
  ASSERT_EQ(al__tui_width("名前", 6), 4);
  ASSERT_EQ(al__tui_visible_width("\x1b[1mab\x1b[0m", 10), 2);
  /* fit never splits a character and respects double width. */
  ASSERT_EQ(al__tui_fit("名前x", 7, 3), 3);
  ASSERT_EQ(al__tui_fit("名前x", 7, 4), 6);
  ASSERT_EQ(al__tui_fit("abc", 3, 10), 3);
  return 0;
}

TEST_IMPL(tui_slash_parse) {
  al_slash_cmd_t c;

  al__slash_parse("hello", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_NONE);
  al__slash_parse("//etc/passwd is a path", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_NONE);
  al__slash_parse("/help", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_HELP);
  al__slash_parse("  /new  ", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_NEW);
  al__slash_parse("/clear", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_NEW);
  ASSERT_STR_EQ(c.name, "new");
  al__slash_parse("/resume s_123 ", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_RESUME);
  ASSERT_STR_EQ(c.arg, "s_123");
  al__slash_parse("/resume", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_RESUME);
  ASSERT_STR_EQ(c.arg, "");
  /* A title (issue 25) may have spaces. */
  al__slash_parse("/resume fix the build ", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_RESUME);
  ASSERT_STR_EQ(c.arg, "fix the build");
  al__slash_parse("/rename  fix the build", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_RENAME);
  ASSERT_STR_EQ(c.arg, "fix the build");
  al__slash_parse("/rename", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_BAD_ARGS);
  al__slash_parse("/quit now", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_BAD_ARGS);
  ASSERT_STR_EQ(c.error, "/quit takes no arguments");
  al__slash_parse("/exit", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_QUIT);
  al__slash_parse("/cost", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_USAGE);
  al__slash_parse("/sessions", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_SESSIONS);
  al__slash_parse("/compact", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_COMPACT);
  ASSERT_STR_EQ(c.arg, "");
  al__slash_parse("/compact keep the test names  ", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_COMPACT);
  ASSERT_STR_EQ(c.arg, "keep the test names");
  al__slash_parse("/tools", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_TOOLS);
  al__slash_parse("/last", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_LAST);
  al__slash_parse("/frobnicate x", &c);
  ASSERT_EQ(c.cmd, AL_SLASH_UNKNOWN);
  ASSERT_STR_EQ(c.error, "unknown command /frobnicate, try /help");
  return 0;
}

TEST_IMPL(tui_usage_line_format) {
  al__tui_usage_t run = {1200, 512, 8100, 0};
  al__tui_usage_t ses = {3000, 1100, 300000, 400};
  al__tui_usage_t small = {25, 9, 0, 0};
  char line[256];

  al__tui_usage_line(&run, &ses, line, sizeof(line));
  ASSERT_STR_EQ(line, "9.3k in (8.1k cached) · 512 out · session 303.4k in "
                      "· 1.1k out");
  al__tui_usage_line(&small, &small, line, sizeof(line));
  ASSERT_STR_EQ(line, "25 in · 9 out · session 25 in · 9 out");
  {
    al__tui_usage_t both = {200, 10, 8100, 1500};
    al__tui_usage_t write = {200, 10, 0, 1500};

    al__tui_usage_line(&both, &both, line, sizeof(line));
    ASSERT_STR_EQ(line, "9.8k in (8.1k cached, 1.5k written) · 10 out · "
                        "session 9.8k in · 10 out");
    al__tui_usage_line(&write, &write, line, sizeof(line));
    ASSERT_STR_EQ(line, "1.7k in (1.5k written to cache) · 10 out · "
                        "session 1.7k in · 10 out");
  }
  return 0;
}

TEST_IMPL(tui_tool_label_summary) {
  char label[160];
  json_t *in;

  utf8_locale();
  in = json_pack("{s:s}", "command", "ls -la src");
  al__tui_tool_label("bash", in, 60, label, sizeof(label));
  ASSERT_STR_EQ(label, "bash(ls -la src)");
  json_decref(in);
  in = json_pack("{s:s,s:i}", "path", "a.txt", "offset", 3);
  al__tui_tool_label("read_file", in, 60, label, sizeof(label));
  ASSERT_STR_EQ(label, "read_file(a.txt)");
  json_decref(in);
  in = json_pack("{s:i}", "n", 3);
  al__tui_tool_label("count", in, 60, label, sizeof(label));
  ASSERT_STR_EQ(label, "count({\"n\":3})");
  json_decref(in);
  /* Newlines and escapes in arguments stay on one inert line; long
   * arguments are cut with an ellipsis. */
  in = json_pack("{s:s}", "command", "echo a\n\x1b[2Jrm -rf /tmp/x");
  al__tui_tool_label("bash", in, 20, label, sizeof(label));
  ASSERT_STR_EQ(label, "bash(echo a ^[[2Jr…)");
  json_decref(in);
  al__tui_tool_label("done", NULL, 20, label, sizeof(label));
  ASSERT_STR_EQ(label, "done()");
  return 0;
}

/* Feeds events (JSON lines) through a view writing to memory streams. */
typedef struct {
  char *out;
  size_t out_len;
  char *err;
  size_t err_len;
  FILE *fo;
  FILE *fe;
  al__tui_view_t v;
} vfix_t;

static void vfix_init(vfix_t *f, bool live) {
  memset(f, 0, sizeof(*f));
  f->fo = open_memstream(&f->out, &f->out_len);
  f->fe = open_memstream(&f->err, &f->err_len);
  al__tui_view_init(&f->v, f->fo, f->fe, false, live, 80, 24);
}

static bool vfix_feed(vfix_t *f, const char *line, uint64_t now) {
  json_error_t e;
  json_t *ev = json_loads(line, 0, &e);
  bool end;

  ASSERT_NOT_NULL(ev);
  end = al__tui_view_event(&f->v, ev, now);
  json_decref(ev);
  fflush(f->fo);
  fflush(f->fe);
  return end;
}

static void vfix_free(vfix_t *f) {
  al__tui_view_free(&f->v);
  fclose(f->fo);
  fclose(f->fe);
  free(f->out);
  free(f->err);
}

TEST_IMPL(tui_view_run_lines) {
  vfix_t f;

  utf8_locale();
  vfix_init(&f, false);
  ASSERT(!vfix_feed(&f, "{\"type\":\"run_started\",\"session\":\"s\",\"seq\":1}", 0));
  vfix_feed(&f, "{\"type\":\"text_delta\",\"index\":0,\"text\":\"Let me \"}", 1);
  vfix_feed(&f, "{\"type\":\"text_delta\",\"index\":0,\"text\":\"look.\"}", 2);
  vfix_feed(&f, "{\"type\":\"content_block_completed\",\"index\":0,"
                "\"block_type\":\"text\"}", 3);
  vfix_feed(&f, "{\"type\":\"tool_use_started\",\"call_id\":\"t1\","
                "\"name\":\"bash\",\"input\":{\"command\":\"ls\"}}", 4);
  vfix_feed(&f, "{\"type\":\"tool_use_completed\",\"call_id\":\"t1\","
                "\"name\":\"bash\",\"is_error\":false,\"content\":"
                "\"a.txt\\nb.txt\\n\",\"duration_ms\":412}", 5);
  vfix_feed(&f, "{\"type\":\"tool_use_started\",\"call_id\":\"t2\","
                "\"name\":\"bash\",\"input\":{\"command\":\"false\"}}", 6);
  vfix_feed(&f, "{\"type\":\"tool_use_completed\",\"call_id\":\"t2\","
                "\"name\":\"bash\",\"is_error\":true,\"content\":"
                "\"exit status 1\",\"duration_ms\":3}", 7);
  vfix_feed(&f, "{\"type\":\"usage\",\"input_tokens\":100,"
                "\"output_tokens\":20,\"cache_read_input_tokens\":0,"
                "\"cache_creation_input_tokens\":0}", 8);
  vfix_feed(&f, "{\"type\":\"thinking_delta\",\"index\":0,\"text\":\"hmm\"}", 9);
  vfix_feed(&f, "{\"type\":\"text_delta\",\"index\":1,\"text\":\"Two files.\"}", 10);
  ASSERT(vfix_feed(&f, "{\"type\":\"final\",\"text\":\"Two files.\"}", 11));
  ASSERT_STR_EQ(f.out, "Let me look.\nTwo files.\n");
  ASSERT_STR_EQ(f.err, "● bash(ls)\n"
                       "✓ bash(ls)  0.4s\n"
                       "  ⎿ a.txt\n"
                       "    b.txt\n"
                       "● bash(false)\n"
                       "✗ bash(false)  0.0s\n"
                       "  ⎿ exit status 1\n"
                       "thinking: hmm\n"
                       "100 in · 20 out · session 100 in · 20 out\n");
  vfix_free(&f);
  return 0;
}

/* Context management events become one notice each. */
TEST_IMPL(tui_view_context_notices) {
  vfix_t f;

  utf8_locale();
  vfix_init(&f, false);
  vfix_feed(&f, "{\"type\":\"context_warning\",\"context_tokens\":161000,"
                "\"context_window\":200000,\"context_pct\":80}", 1);
  vfix_feed(&f, "{\"type\":\"micro_compaction\",\"cleared\":3,"
                "\"tokens_saved\":30000}", 2);
  vfix_feed(&f, "{\"type\":\"compaction_completed\",\"trigger\":\"auto\","
                "\"tokens_before\":150000,\"tokens_after\":20000,"
                "\"dropped_messages\":40,\"fallback\":true}", 3);
  vfix_feed(&f, "{\"type\":\"history_repaired\",\"count\":1}", 4);
  ASSERT_STR_EQ(f.err,
                "context 80% full (161000 of 200000 tokens): /compact frees it\n"
                "cleared 3 old tool outputs (30000 tokens saved)\n"
                "context compacted (auto): 150,000 → 20,000 tokens, 40 "
                "messages summarized (the summary failed: trimmed instead)\n"
                "history repaired before sending (1 fixes)\n");
  vfix_free(&f);
  return 0;
}

/* MCP trouble is said in the chat as `run` says it: a failed server, a
 * degraded server stream (issue 22 point 5) and warnings; ready and
 * starting are routine and stay quiet. */
TEST_IMPL(tui_view_mcp_trouble_said) {
  vfix_t f;

  utf8_locale();
  vfix_init(&f, false);
  vfix_feed(&f, "{\"type\":\"mcp_server_state\",\"server\":\"fs\","
                "\"state\":\"starting\",\"tools\":0,\"ms\":0}", 1);
  vfix_feed(&f, "{\"type\":\"mcp_server_state\",\"server\":\"fs\","
                "\"state\":\"ready\",\"tools\":3,\"ms\":20}", 2);
  vfix_feed(&f, "{\"type\":\"mcp_server_state\",\"server\":\"web\","
                "\"state\":\"degraded\",\"tools\":2,\"ms\":0,\"error\":"
                "\"server stream closed 3 times in a row: reopening in 4 s\"}", 3);
  vfix_feed(&f, "{\"type\":\"mcp_server_state\",\"server\":\"db\","
                "\"state\":\"failed\",\"tools\":0,\"ms\":5,\"error\":"
                "\"exited with status 1\"}", 4);
  vfix_feed(&f, "{\"type\":\"mcp_warning\",\"server\":\"fs\","
                "\"message\":\"tool list truncated\"}", 5);
  ASSERT_STR_EQ(f.err,
                "mcp web: server stream closed 3 times in a row: reopening "
                "in 4 s\n"
                "mcp db: exited with status 1\n"
                "mcp fs: tool list truncated\n");
  vfix_free(&f);
  return 0;
}

/* Citations become the run's sources, each once, numbered (the
 * provider's own [n] when given), listed before the usage line; a
 * provider_notice is one dim line; a new run starts a new list. */
TEST_IMPL(tui_view_sources_and_notices) {
  vfix_t f;

  utf8_locale();
  vfix_init(&f, false);
  vfix_feed(&f, "{\"type\":\"run_started\",\"seq\":1}", 0);
  vfix_feed(&f, "{\"type\":\"text_delta\",\"index\":0,\"text\":\"Let me search. \"}", 1);
  vfix_feed(&f, "{\"type\":\"content_block_completed\",\"index\":0}", 2);
  vfix_feed(&f, "{\"type\":\"provider_notice\",\"kind\":\"pause_turn\","
                "\"message\":\"the provider paused the turn: continuing (1 of 5)\"}", 3);
  vfix_feed(&f, "{\"type\":\"text_delta\",\"index\":0,\"text\":\"Sunny [1][2].\"}", 4);
  vfix_feed(&f, "{\"type\":\"citation\",\"index\":0,\"citation\":{\"type\":"
                "\"url_citation\",\"url\":\"https://a.example/x\",\"title\":"
                "\"Page \\u001b[31mA\",\"cited_text\":null,\"number\":1}}", 5);
  vfix_feed(&f, "{\"type\":\"citation\",\"index\":0,\"citation\":{\"type\":"
                "\"url_citation\",\"url\":\"https://b.example/y\",\"title\":null,"
                "\"cited_text\":null,\"number\":2}}", 6);
  vfix_feed(&f, "{\"type\":\"citation\",\"index\":0,\"citation\":{\"type\":"
                "\"url_citation\",\"url\":\"https://a.example/x\",\"title\":"
                "\"Page A\",\"cited_text\":\"again\",\"number\":1}}", 7);
  vfix_feed(&f, "{\"type\":\"citation\",\"index\":0,\"citation\":{\"type\":"
                "\"char_location\",\"document_title\":\"notes.txt\","
                "\"cited_text\":\"the sky is clear\"}}", 8);
  vfix_feed(&f, "{\"type\":\"citation\",\"index\":0,\"citation\":{}}", 9);
  ASSERT(vfix_feed(&f, "{\"type\":\"final\",\"text\":\"x\"}", 10));
  ASSERT_STR_EQ(f.err,
                "the provider paused the turn: continuing (1 of 5)\n"
                "[1] Page ^[[31mA \xc2\xb7 https://a.example/x\n"
                "[2] https://b.example/y\n"
                "[3] notes.txt\n"
                "0 in \xc2\xb7 0 out \xc2\xb7 session 0 in \xc2\xb7 0 out\n");
  /* The next run lists only its own sources. */
  vfix_feed(&f, "{\"type\":\"run_started\",\"seq\":20}", 11);
  ASSERT(vfix_feed(&f, "{\"type\":\"final\",\"text\":\"y\"}", 12));
  ASSERT_NULL(strstr(strstr(f.err, "session 0 in") + 1, "[1]"));
  vfix_free(&f);
  return 0;
}

TEST_IMPL(tui_view_live_spinner) {
  vfix_t f;

  utf8_locale();
  vfix_init(&f, true);
  vfix_feed(&f, "{\"type\":\"tool_use_started\",\"call_id\":\"t1\","
                "\"name\":\"bash\",\"input\":{\"command\":\"sleep 5\"}}", 1000);
  /* The live line, then a tick redraws it in place with the time. */
  ASSERT_NOT_NULL(strstr(f.err, "⠋ bash(sleep 5)  0.0s\n"));
  al__tui_view_tick(&f.v, 2300);
  fflush(f.fe);
  ASSERT_NOT_NULL(strstr(f.err, "\x1b[1A\r\x1b[J\r\x1b[K⠙ bash(sleep 5)  1.3s\n"));
  vfix_feed(&f, "{\"type\":\"interrupted\",\"reason\":\"user\"}", 2400);
  ASSERT_NOT_NULL(strstr(f.err, "interrupted\n"));
  vfix_free(&f);
  return 0;
}

/* Two tools at once: two live rows, erased together (cursor up 2) and
 * redrawn; the one that ends leaves its outcome above the other. */
TEST_IMPL(tui_view_two_live_tools) {
  vfix_t f;
  const char *after;

  utf8_locale();
  vfix_init(&f, true);
  vfix_feed(&f, "{\"type\":\"tool_use_started\",\"call_id\":\"a\","
                "\"name\":\"read_file\",\"input\":{\"path\":\"a.txt\"}}", 0);
  vfix_feed(&f, "{\"type\":\"tool_use_started\",\"call_id\":\"b\","
                "\"name\":\"bash\",\"input\":{\"command\":\"make\"}}", 0);
  al__tui_view_tick(&f.v, 500);
  fflush(f.fe);
  after = strstr(f.err, "\x1b[2A\r\x1b[J");
  ASSERT_NOT_NULL(after);
  ASSERT_NOT_NULL(strstr(after, "read_file(a.txt)  0.5s\n"));
  ASSERT_NOT_NULL(strstr(after, "bash(make)  0.5s\n"));
  vfix_feed(&f, "{\"type\":\"tool_use_completed\",\"call_id\":\"a\","
                "\"name\":\"read_file\",\"is_error\":false,\"content\":\"x\","
                "\"duration_ms\":600}", 600);
  after = strstr(after, "✓ read_file(a.txt)  0.6s\n");
  ASSERT_NOT_NULL(after);
  /* Only the running one is redrawn below the outcome. */
  ASSERT_NOT_NULL(strstr(after, "bash(make)  0.6s\n"));
  ASSERT_NULL(strstr(after, "⠋ read_file"));
  ASSERT_EQ(f.v.live_rows, 1);
  vfix_free(&f);
  return 0;
}
