/* The Markdown renderer and its streaming mode (src/client/md_render.c).
 * Output is compared byte for byte: the layout without colour, and the SGR
 * codes with colour. The stream tests replay a reply in every 2-way split
 * and one byte at a time and check that what a terminal would finally show
 * equals the one-shot rendering. */
#include <locale.h>
#include <unistd.h>

#include "client/tui.h"
#include "test.h"

static char *render(const char *md, bool color) {
  al_buf_t b;
  char *s;

  al_buf_init(&b, 1u << 20);
  ASSERT_EQ(al__md_render(md, strlen(md), color, &b), 0);
  s = strdup(b.data != NULL ? b.data : "");
  al_buf_free(&b);
  return s;
}

#define ASSERT_RENDERS(md, color, expected)   \
  do {                                        \
    char *got_ = render((md), (color));       \
    ASSERT_STR_EQ(got_, (expected));          \
    free(got_);                               \
  } while (0)

static void utf8_locale(void) {
  if (setlocale(LC_CTYPE, "C.UTF-8") == NULL) {
    setlocale(LC_CTYPE, "en_US.UTF-8");
  }
}

TEST_IMPL(tui_md_plain_layout) {
  utf8_locale();
  ASSERT_RENDERS("", false, "");
  ASSERT_RENDERS("Hello **bold** and *it*.", false, "Hello bold and it.\n");
  ASSERT_RENDERS("# Title\n\nText", false, "# Title\n\nText\n");
  ASSERT_RENDERS("a\n\nb\n", false, "a\n\nb\n");
  ASSERT_RENDERS("- one\n- two\n  - nested\n- three\n\nafter", false,
                 "* one\n* two\n  - nested\n* three\n\nafter\n");
  ASSERT_RENDERS("3. c\n4. d\n", false, "3. c\n4. d\n");
  ASSERT_RENDERS("- [x] done\n- [ ] todo\n", false, "[x] done\n[ ] todo\n");
  ASSERT_RENDERS("> quoted\n> more\n", false, "> quoted\n> more\n");
  ASSERT_RENDERS("use `ls -la` here", false, "use `ls -la` here\n");
  ASSERT_RENDERS("```sh\nls -la\ncd /\n```\n", false, "ls -la\ncd /\n");
  ASSERT_RENDERS("see [docs](https://x.test/d) now", false,
                 "see docs (https://x.test/d) now\n");
  ASSERT_RENDERS("<https://x.test>", false, "https://x.test\n");
  ASSERT_RENDERS("a &amp; b &#65; &#27;", false, "a & b A ^[\n");
  ASSERT_RENDERS("---\n", false,
                 "----------------------------------------\n");
  return 0;
}

TEST_IMPL(tui_md_table_columns) {
  utf8_locale();
  ASSERT_RENDERS("| a | bbb |\n|---|--:|\n| cc | 1 |\n| d | 22 |\n", false,
                 "a  | bbb\n"
                 "---+----\n"
                 "cc |   1\n"
                 "d  |  22\n");
  /* Wide characters are measured in columns, not bytes. */
  ASSERT_RENDERS("| 名前 | x |\n|---|---|\n| ab | y |\n", false,
                 "名前 | x\n"
                 "-----+--\n"
                 "ab   | y\n");
  return 0;
}

TEST_IMPL(tui_md_color_codes) {
  utf8_locale();
  ASSERT_RENDERS("**b**", true, "\x1b[0m\x1b[1mb\x1b[0m\n");
  ASSERT_RENDERS("`c`", true, "\x1b[0m\x1b[36mc\x1b[0m\n");
  ASSERT_RENDERS("# H", true, "\x1b[0m\x1b[1m\x1b[4mH\x1b[0m\n");
  ASSERT_RENDERS("- x", true,
                 "\x1b[0m\x1b[1m• \x1b[0m\x1b[0mx\n");
  return 0;
}

/* RELIABILITY E5: nothing the model writes reaches the terminal as a
 * control sequence - not raw, not through an entity, not in a code block,
 * a link or a table. */
TEST_IMPL(tui_md_neutralises_escapes) {
  static const char *const evil[] = {
      "\x1b]52;c;ZWNobyBoaQ==\x07 clipboard",
      "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
      "text\r? Allow bash: rm -rf ~?  [y]es",
      "\x1b[2J\x1b[H cleared",
      "```\n\x1b[31mred\n```",
      "[a](http://x/\x1b[2J)",
      "| \x1b[5m | b |\n|---|---|\n| c | d |",
      "&#27;[2J &#x9b;2J \xc2\x9b" "2J",
      "\xe2\x80\xae" "reversed",
      "bad utf8 \xff\xfe",
  };
  size_t i;
  bool color;

  utf8_locale();
  for (i = 0; i < AL_ARRAY_SIZE(evil); i++) {
    for (color = false; ; color = true) {
      char *out = render(evil[i], color);
      const char *p;

      for (p = out; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;

        ASSERT(ch != '\r' && ch != 0x07 && ch != 0x7f);
        if (ch == 0x1b) {
          /* Only our SGR: ESC [ digits m */
          const char *q = p + 1;

          ASSERT(*q == '[');
          q++;
          while (*q >= '0' && *q <= '9') {
            q++;
          }
          ASSERT(*q == 'm');
        }
        ASSERT(!(ch == 0xc2 && (unsigned char)p[1] >= 0x80 &&
                 (unsigned char)p[1] <= 0x9f));
      }
      ASSERT(strstr(out, "\xe2\x80\xae") == NULL);
      free(out);
      if (color) {
        break;
      }
    }
  }
  return 0;
}

/* A tiny terminal: applies what the stream wrote (text, \n, \r, CSI n A,
 * CSI J) to a grid of rows, to check what a person finally sees. */
typedef struct {
  char rows[64][512];
  int row;
  int col;
  int cols;
} screen_t;

static void screen_put(screen_t *s, const char *p, size_t n) {
  size_t i = 0;

  while (i < n) {
    if (p[i] == '\n') {
      s->row++;
      s->col = 0;
      i++;
    } else if (p[i] == '\r') {
      s->col = 0;
      i++;
    } else if (p[i] == '\x1b' && i + 1 < n && p[i + 1] == '[') {
      int num = 0;
      char fin;

      i += 2;
      while (i < n && p[i] >= '0' && p[i] <= '9') {
        num = num * 10 + (p[i] - '0');
        i++;
      }
      fin = p[i++];
      if (fin == 'A') {
        s->row -= num;
        ASSERT(s->row >= 0);
      } else if (fin == 'J') {
        int r;

        s->rows[s->row][s->col] = '\0';
        for (r = s->row + 1; r < 64; r++) {
          s->rows[r][0] = '\0';
        }
      }
      /* 'm' (colour) changes nothing on the grid. */
    } else {
      size_t len = 1;

      while (i + len < n && ((unsigned char)p[i + len] & 0xC0) == 0x80) {
        len++;
      }
      if (s->col >= s->cols) {
        s->row++;
        s->col = 0;
      }
      ASSERT(s->row < 64);
      /* One column per character is enough for ASCII test text. */
      memcpy(&s->rows[s->row][s->col], p + i, len);
      s->rows[s->row][s->col + (int)len] = '\0';
      s->col += (int)len;
      i += len;
    }
  }
}

static void screen_text(screen_t *s, al_buf_t *out) {
  int r;
  int last = s->row;

  al_buf_reset(out);
  for (r = 0; r <= last && r < 64; r++) {
    const char *p = s->rows[r];

    /* Drop SGR leftovers: the grid stores plain characters only. */
    al_buf_append_str(out, p);
    al_buf_append_str(out, "\n");
  }
}

static void stream_in_pieces(const char *md, const size_t *cuts, size_t ncuts,
                             int cols, al_buf_t *shown) {
  al__md_stream_t st;
  al_buf_t out;
  screen_t *scr = calloc(1, sizeof(*scr));
  size_t pos = 0;
  size_t k;

  scr->cols = cols;
  al__md_stream_init(&st, true, cols, 40);
  al_buf_init(&out, 1u << 20);
  for (k = 0; k <= ncuts; k++) {
    size_t end = k < ncuts ? cuts[k] : strlen(md);

    al_buf_reset(&out);
    ASSERT_EQ(al__md_stream_feed(&st, md + pos, end - pos, &out), 0);
    screen_put(scr, out.data ? out.data : "", out.len);
    pos = end;
  }
  al_buf_reset(&out);
  ASSERT_EQ(al__md_stream_finish(&st, &out), 0);
  screen_put(scr, out.data ? out.data : "", out.len);
  screen_text(scr, shown);
  al_buf_free(&out);
  al__md_stream_free(&st);
  free(scr);
}

static const char *const replies[] = {
    "Hello **world**.\n\nA list:\n- one\n- two\n\n```sh\nls -la\n```\nDone.",
    "# Plan\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nbye\n",
    "single line without newline",
    "para one\n\n\n\npara two after blanks\n",
    "a long line that wraps across several rows of a narrow terminal for "
    "sure\n\nnext",
};

TEST_IMPL(tui_md_stream_split_invariant) {
  size_t r;

  utf8_locale();
  for (r = 0; r < AL_ARRAY_SIZE(replies); r++) {
    const char *md = replies[r];
    size_t len = strlen(md);
    al_buf_t whole;
    al_buf_t split;
    size_t cut;
    size_t *every = calloc(len + 1, sizeof(size_t));

    al_buf_init(&whole, 1u << 20);
    al_buf_init(&split, 1u << 20);
    stream_in_pieces(md, NULL, 0, 30, &whole);
    ASSERT(whole.len > 0);
    for (cut = 1; cut < len; cut++) {
      stream_in_pieces(md, &cut, 1, 30, &split);
      ASSERT_STR_EQ(split.data, whole.data);
    }
    for (cut = 0; cut < len; cut++) {
      every[cut] = cut + 1;
    }
    stream_in_pieces(md, every, len - 1, 30, &split);
    ASSERT_STR_EQ(split.data, whole.data);
    free(every);
    al_buf_free(&whole);
    al_buf_free(&split);
  }
  return 0;
}

/* The final screen of a streamed reply, for the eye and one exact check. */
TEST_IMPL(tui_md_stream_final_screen) {
  al_buf_t shown;

  utf8_locale();
  al_buf_init(&shown, 1u << 20);
  stream_in_pieces(replies[0], NULL, 0, 40, &shown);
  ASSERT_STR_EQ(shown.data, "Hello world.\n"
                            "\n"
                            "A list:\n"
                            "\n"
                            "• one\n"
                            "• two\n"
                            "\n"
                            "ls -la\n"
                            "\n"
                            "Done.\n"
                            "\n");
  al_buf_free(&shown);
  return 0;
}

/* Without colour the stream is the raw text, sanitized, nothing held. */
TEST_IMPL(tui_md_stream_plain_passthrough) {
  al__md_stream_t st;
  al_buf_t out;

  al__md_stream_init(&st, false, 80, 24);
  al_buf_init(&out, 4096);
  ASSERT_EQ(al__md_stream_feed(&st, "**hi**\x1b[2J", 10, &out), 0);
  ASSERT_STR_EQ(out.data, "**hi**^[[2J");
  ASSERT_EQ(al__md_stream_finish(&st, &out), 0);
  ASSERT_STR_EQ(out.data, "**hi**^[[2J\n");
  al_buf_free(&out);
  al__md_stream_free(&st);
  return 0;
}

/* `al_tests --helper tui_md_dump [--color]`: renders stdin (for a look). */
HELPER_IMPL(tui_md_dump) {
  char buf[65536];
  size_t n = fread(buf, 1, sizeof(buf), stdin);
  al_buf_t out;

  utf8_locale();
  al_buf_init(&out, 1u << 20);
  al__md_render(buf, n, argc > 0 && strcmp(argv[argc - 1], "--color") == 0,
                &out);
  fwrite(out.data, 1, out.len, stdout);
  al_buf_free(&out);
  return 0;
}

/* `al_tests --helper tui_md_stream_dump COLS CHUNK`: streams stdin in
 * CHUNK-byte pieces and prints the final screen (for a look). */
HELPER_IMPL(tui_md_stream_dump) {
  char buf[65536];
  size_t n = fread(buf, 1, sizeof(buf) - 1, stdin);
  size_t chunk = argc > 1 ? (size_t)atoi(argv[argc - 1]) : 8;
  size_t cuts[8192];
  size_t k = 0;
  size_t pos;
  al_buf_t shown;

  utf8_locale();
  buf[n] = '\0';
  for (pos = chunk; pos < n && k < 8192; pos += chunk) {
    cuts[k++] = pos;
  }
  al_buf_init(&shown, 1u << 20);
  stream_in_pieces(buf, cuts, k, 60, &shown);
  fwrite(shown.data, 1, shown.len, stdout);
  al_buf_free(&shown);
  return 0;
}

/* A block taller than the screen cannot be erased (the cursor cannot go
 * above the top row): it stays raw, and the next block renders again. */
TEST_IMPL(tui_md_stream_tall_block_stays_raw) {
  al__md_stream_t st;
  al_buf_t out;
  int i;

  utf8_locale();
  al__md_stream_init(&st, true, 40, 6);
  al_buf_init(&out, 1u << 16);
  for (i = 0; i < 8; i++) {
    ASSERT_EQ(al__md_stream_feed(&st, "**line**\n", 9, &out), 0);
  }
  ASSERT_EQ(al__md_stream_feed(&st, "\n**next**\n", 10, &out), 0);
  ASSERT_EQ(al__md_stream_finish(&st, &out), 0);
  /* The tall block: raw, never erased (no cursor-up over 5 rows). */
  ASSERT_NOT_NULL(strstr(out.data, "**line**\n**line**\n"));
  ASSERT_NULL(strstr(out.data, "\x1b[5A"));
  ASSERT_NULL(strstr(out.data, "\x1b[8A"));
  /* The short block after it is rendered (bold, markers gone). */
  ASSERT_NOT_NULL(strstr(out.data, "\x1b[1mnext"));
  al_buf_free(&out);
  al__md_stream_free(&st);
  return 0;
}
