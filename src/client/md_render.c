/* Markdown for the terminal: md4c parses, this file renders its SAX
 * callbacks to text with our SGR codes, and streams a reply block by block.
 *
 * Rendering: headings bold (h1 also underlined), emphasis italic, strong
 * bold, code spans cyan, code blocks green and verbatim (no prefix, so a
 * copy from the terminal is the code), quotes behind a dim bar, list items
 * with bullets or numbers and hanging indents, task items as checkboxes,
 * links underlined with the URL after them when it differs from the text,
 * tables with aligned columns. Lines are not wrapped: the terminal does it,
 * and copying text keeps its real line breaks. Tables are the exception: a
 * table wider than the terminal would wrap into ragged rows, so its widest
 * columns are narrowed to fit and their cells cut with "…".
 *
 * The input is sanitized before md4c sees it, so nothing the model writes
 * becomes an escape sequence (RELIABILITY E5); entities are decoded and
 * sanitized again (&#27; is ESC).
 *
 * Streaming (al__md_stream_*): see tui.h. Why per-block re-rendering
 * instead of printing rendered pieces as they come: Markdown is not
 * incremental - a line's meaning can depend on the next one (a table's
 * delimiter row, a setext underline, a fence's closing line), so a
 * renderer that commits early would have to draw wrong things. Printing
 * the raw text at once keeps the latency of streaming, and the block is
 * redrawn properly as soon as it is known. LLM replies are short blocks
 * separated by blank lines, so redraws are small. */
#include <stdlib.h>
#include <string.h>

#include <md4c.h>

#include "client/tui.h"

/* Span and block styles, as bits, so a line start or a span end can
 * re-apply exactly what is active. */
enum {
  ST_BOLD = 1u << 0,
  ST_ITALIC = 1u << 1,
  ST_UNDERLINE = 1u << 2,
  ST_STRIKE = 1u << 3,
  ST_CODE = 1u << 4,
  ST_LINK = 1u << 5,
  ST_DIM = 1u << 6,
  ST_CODEBLOCK = 1u << 7
};

#define MAX_DEPTH 32
#define MAX_CELLS 4096
#define HR_WIDTH 40

typedef struct {
  MD_BLOCKTYPE type;
  unsigned next_num;   /* OL: the next item's number */
  char marker[16];     /* LI: "• ", "12. ", "☐ " */
  size_t marker_width;
  bool marker_pending; /* LI: the first line has not started yet */
} container_t;

typedef struct {
  al_buf_t text;
  size_t width;
  MD_ALIGN align;
  unsigned row;
} cell_t;

typedef struct {
  al_buf_t *out;  /* the document */
  al_buf_t *dst;  /* where text goes now: out, or a table cell */
  bool color;
  size_t cols; /* the terminal's width; 0: no limit */
  int rc;
  container_t stack[MAX_DEPTH];
  int depth;
  unsigned styles;
  bool at_bol;
  bool wrote;
  bool blank_pending;
  int heading;
  /* the open link: its href, to print after the text */
  char *href;
  size_t link_text_start;
  /* tables */
  bool in_table;
  cell_t *cells;
  size_t ncells;
  unsigned row;
  unsigned head_rows;
  al_buf_t cell;
  MD_ALIGN cell_align;
} render_t;

static void put(render_t *r, const char *s, size_t n) {
  if (r->rc == 0 && n > 0) {
    r->rc = al_buf_append(r->dst, s, n);
  }
}

static void puts_(render_t *r, const char *s) { put(r, s, strlen(s)); }

static void sgr(render_t *r, const char *code) {
  if (r->color) {
    puts_(r, code);
  }
}

static void apply_styles(render_t *r) {
  unsigned s = r->styles;

  if (!r->color) {
    return;
  }
  puts_(r, AL_SGR_RESET);
  if (s & ST_BOLD) {
    puts_(r, AL_SGR_BOLD);
  }
  if (s & ST_DIM) {
    puts_(r, AL_SGR_DIM);
  }
  if (s & ST_ITALIC) {
    puts_(r, AL_SGR_ITALIC);
  }
  if (s & (ST_UNDERLINE | ST_LINK)) {
    puts_(r, AL_SGR_UNDERLINE);
  }
  if (s & ST_STRIKE) {
    puts_(r, AL_SGR_STRIKE);
  }
  if (s & ST_LINK) {
    puts_(r, AL_SGR_BLUE);
  } else if (s & ST_CODE) {
    puts_(r, AL_SGR_CYAN);
  } else if (s & ST_CODEBLOCK) {
    puts_(r, AL_SGR_GREEN);
  }
}

/* Writes the container prefixes of a new line: quote bars, list markers
 * on an item's first line and hanging indents after it. */
static void line_prefix(render_t *r) {
  int i;

  if (r->in_table) {
    return;
  }
  for (i = 0; i < r->depth; i++) {
    container_t *c = &r->stack[i];

    if (c->type == MD_BLOCK_QUOTE) {
      sgr(r, AL_SGR_RESET AL_SGR_DIM);
      puts_(r, r->color ? "│ " : "> ");
      sgr(r, AL_SGR_RESET);
    } else if (c->type == MD_BLOCK_LI) {
      if (c->marker_pending) {
        c->marker_pending = false;
        sgr(r, AL_SGR_RESET AL_SGR_BOLD);
        puts_(r, c->marker);
        sgr(r, AL_SGR_RESET);
      } else {
        size_t k;

        for (k = 0; k < c->marker_width; k++) {
          put(r, " ", 1);
        }
      }
    }
  }
  apply_styles(r);
}

static void newline(render_t *r) {
  if (r->in_table) {
    put(r, " ", 1); /* a line break inside a cell */
    return;
  }
  if (r->color && r->styles != 0) {
    puts_(r, AL_SGR_RESET);
  }
  put(r, "\n", 1);
  r->at_bol = true;
}

/* Text of the document, split at newlines so every line gets its
 * prefixes. The input was sanitized before parsing. */
static void text(render_t *r, const char *s, size_t n) {
  while (n > 0) {
    const char *nl = memchr(s, '\n', n);
    size_t seg = nl != NULL ? (size_t)(nl - s) : n;

    if (seg > 0) {
      if (r->at_bol) {
        r->at_bol = false;
        line_prefix(r);
      }
      put(r, s, seg);
      r->wrote = true;
    }
    if (nl == NULL) {
      break;
    }
    newline(r);
    s += seg + 1;
    n -= seg + 1;
  }
}

static void end_line(render_t *r) {
  if (!r->at_bol) {
    newline(r);
  }
}

/* A leaf block starts: end the previous line and, after a block that asks
 * for it, leave one blank line. */
static void block_start(render_t *r) {
  end_line(r);
  if (r->blank_pending && r->wrote) {
    put(r, "\n", 1);
  }
  r->blank_pending = false;
}

static container_t *push(render_t *r, MD_BLOCKTYPE type) {
  container_t *c;

  if (r->depth >= MAX_DEPTH) {
    return NULL;
  }
  c = &r->stack[r->depth++];
  memset(c, 0, sizeof(*c));
  c->type = type;
  return c;
}

static container_t *parent_list(render_t *r) {
  int i;

  for (i = r->depth - 1; i >= 0; i--) {
    if (r->stack[i].type == MD_BLOCK_UL || r->stack[i].type == MD_BLOCK_OL) {
      return &r->stack[i];
    }
  }
  return NULL;
}

static int list_depth(render_t *r) {
  int i;
  int n = 0;

  for (i = 0; i < r->depth; i++) {
    if (r->stack[i].type == MD_BLOCK_UL || r->stack[i].type == MD_BLOCK_OL) {
      n++;
    }
  }
  return n;
}

/* ---- tables ------------------------------------------------------------- */

static void table_free(render_t *r) {
  size_t i;

  for (i = 0; i < r->ncells; i++) {
    al_buf_free(&r->cells[i].text);
  }
  al_free(r->cells);
  r->cells = NULL;
  r->ncells = 0;
  al_buf_free(&r->cell);
}

static void cell_end(render_t *r) {
  cell_t *c;
  cell_t *grown;

  if (r->ncells >= MAX_CELLS) {
    al_buf_reset(&r->cell);
    return;
  }
  grown = al_realloc(r->cells, (r->ncells + 1) * sizeof(*grown));
  if (grown == NULL) {
    r->rc = AL_ENOMEM;
    return;
  }
  r->cells = grown;
  c = &r->cells[r->ncells++];
  /* The cell's text moves into the table; the cell buffer starts over. */
  c->text = r->cell;
  al_buf_init(&r->cell, 1u << 20);
  c->width = al__tui_visible_width(c->text.data ? c->text.data : "",
                                   c->text.len);
  c->align = r->cell_align;
  c->row = r->row;
}

static void pad(render_t *r, size_t n) {
  while (n-- > 0) {
    put(r, " ", 1);
  }
}

/* The width line_prefix() takes on a continuation line. */
static size_t prefix_width(const render_t *r) {
  size_t w = 0;
  int i;

  for (i = 0; i < r->depth; i++) {
    if (r->stack[i].type == MD_BLOCK_QUOTE) {
      w += 2;
    } else if (r->stack[i].type == MD_BLOCK_LI) {
      w += r->stack[i].marker_width;
    }
  }
  return w;
}

/* Narrows the widest columns until the row fits in `avail` columns: each
 * column keeps its natural width if it is below the fair share of what is
 * left, the others split the rest (at least 1 each). */
static void fit_columns(size_t *widths, unsigned ncols, size_t avail) {
  size_t total = 0;
  size_t budget;
  bool fixed[64];
  unsigned k, left = ncols;

  for (k = 0; k < ncols; k++) {
    total += widths[k];
    fixed[k] = false;
  }
  total += 3 * (ncols > 0 ? ncols - 1 : 0);
  if (ncols == 0 || total <= avail) {
    return;
  }
  budget = avail > 3 * (ncols - 1) ? avail - 3 * (ncols - 1) : 0;
  for (;;) {
    bool changed = false;
    size_t share = left > 0 ? budget / left : 0;

    for (k = 0; k < ncols; k++) {
      if (!fixed[k] && widths[k] <= share) {
        fixed[k] = true;
        budget -= widths[k];
        left--;
        changed = true;
      }
    }
    if (!changed || left == 0) {
      break;
    }
  }
  for (k = 0; k < ncols && left > 0; k++) {
    if (!fixed[k]) {
      size_t share = budget / left;

      widths[k] = AL_MAX(share, (size_t)1);
      budget -= AL_MIN(share, budget);
      left--;
    }
  }
}

/* Copies a cell's text cut to max_w columns, the last one "…"; our SGR
 * codes pass through at no width. Returns the columns written (max_w, or
 * one less when a wide character did not fit). */
static size_t put_cut(render_t *r, const char *s, size_t n, size_t max_w) {
  size_t i = 0;
  size_t w = 0;

  while (i < n) {
    size_t j = i;
    size_t cw;

    if (s[i] == '\x1b') {
      j++;
      if (j < n && s[j] == '[') {
        j++;
        while (j < n && !((unsigned char)s[j] >= 0x40 &&
                          (unsigned char)s[j] <= 0x7e)) {
          j++;
        }
      }
      j = AL_MIN(j + 1, n);
      put(r, s + i, j - i);
      i = j;
      continue;
    }
    j = i + al__tui_fit(s + i, n - i, 1);
    if (j == i) { /* a wide character: take it whole */
      j = i + 1;
      while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80) {
        j++;
      }
    }
    cw = al__tui_width(s + i, j - i);
    if (w + cw + 1 > max_w) {
      break;
    }
    put(r, s + i, j - i);
    w += cw;
    i = j;
  }
  puts_(r, "…");
  sgr(r, AL_SGR_RESET);
  return w + 1;
}

static void table_render(render_t *r) {
  size_t widths[64];
  unsigned ncols = 0;
  size_t i;
  unsigned row;
  unsigned nrows = r->ncells > 0 ? r->cells[r->ncells - 1].row + 1 : 0;

  memset(widths, 0, sizeof(widths));
  for (i = 0; i < r->ncells; i++) {
    unsigned col = 0;
    size_t j;

    for (j = i; j > 0 && r->cells[j - 1].row == r->cells[i].row; j--) {
      col++;
    }
    if (col < 64) {
      widths[col] = AL_MAX(widths[col], r->cells[i].width);
      ncols = AL_MAX(ncols, col + 1);
    }
  }
  if (r->cols > 0) {
    size_t pw = prefix_width(r);

    fit_columns(widths, ncols, r->cols > pw ? r->cols - pw : 1);
  }
  i = 0;
  for (row = 0; row < nrows; row++) {
    unsigned col = 0;

    text(r, "", 0);
    if (r->at_bol) {
      r->at_bol = false;
      line_prefix(r);
    }
    for (; i < r->ncells && r->cells[i].row == row; i++, col++) {
      cell_t *c = &r->cells[i];
      size_t w = col < 64 ? widths[col] : c->width;
      bool cut = col < 64 && c->width > w;
      size_t space = w > c->width ? w - c->width : 0;
      size_t left = c->align == MD_ALIGN_RIGHT    ? space
                    : c->align == MD_ALIGN_CENTER ? space / 2
                                                  : 0;

      if (col > 0) {
        sgr(r, AL_SGR_DIM);
        puts_(r, r->color ? " │ " : " | ");
        sgr(r, AL_SGR_RESET);
      }
      pad(r, left);
      if (row < r->head_rows) {
        sgr(r, AL_SGR_BOLD);
      }
      if (cut) {
        size_t wrote = put_cut(r, c->text.data ? c->text.data : "",
                               c->text.len, w);

        space = w > wrote ? w - wrote : 0; /* a wide character left out */
        left = 0;
      } else {
        put(r, c->text.data ? c->text.data : "", c->text.len);
      }
      sgr(r, AL_SGR_RESET);
      /* No trailing blanks after the last column. */
      if (col + 1 < ncols) {
        pad(r, space - left);
      }
    }
    r->wrote = true;
    newline(r);
    if (row + 1 == r->head_rows) {
      unsigned k;

      r->at_bol = false;
      line_prefix(r);
      sgr(r, AL_SGR_DIM);
      for (k = 0; k < ncols; k++) {
        size_t d;

        if (k > 0) {
          puts_(r, r->color ? "─┼─" : "-+-");
        }
        for (d = 0; d < widths[k]; d++) {
          puts_(r, r->color ? "─" : "-");
        }
      }
      sgr(r, AL_SGR_RESET);
      newline(r);
    }
  }
}

/* ---- md4c callbacks ----------------------------------------------------- */

static int enter_block(MD_BLOCKTYPE type, void *detail, void *ud) {
  render_t *r = ud;
  container_t *c;
  container_t *list;

  switch (type) {
  case MD_BLOCK_DOC:
    break;
  case MD_BLOCK_QUOTE:
    block_start(r);
    push(r, type);
    r->styles |= ST_DIM;
    break;
  case MD_BLOCK_UL:
  case MD_BLOCK_OL:
    /* A nested list starts on its own line, without a blank one. */
    if (list_depth(r) == 0) {
      block_start(r);
    } else {
      end_line(r);
    }
    c = push(r, type);
    if (c != NULL && type == MD_BLOCK_OL) {
      c->next_num = ((MD_BLOCK_OL_DETAIL *)detail)->start;
    }
    break;
  case MD_BLOCK_LI: {
    MD_BLOCK_LI_DETAIL *li = detail;

    end_line(r);
    list = parent_list(r);
    c = push(r, type);
    if (c == NULL) {
      break;
    }
    if (li->is_task) {
      snprintf(c->marker, sizeof(c->marker), "%s ",
               li->task_mark == ' ' ? (r->color ? "☐" : "[ ]")
                                    : (r->color ? "☑" : "[x]"));
    } else if (list != NULL && list->type == MD_BLOCK_OL) {
      snprintf(c->marker, sizeof(c->marker), "%u. ", list->next_num++);
    } else {
      static const char *const bullets[] = {"• ", "◦ ", "▪ "};
      static const char *const plain[] = {"* ", "- ", "+ "};
      int d = list_depth(r) - 1;

      snprintf(c->marker, sizeof(c->marker), "%s",
               r->color ? bullets[d % 3] : plain[d % 3]);
    }
    c->marker_width = al__tui_width(c->marker, strlen(c->marker));
    c->marker_pending = true;
    break;
  }
  case MD_BLOCK_HR: {
    int i;

    block_start(r);
    text(r, "", 0);
    r->at_bol = false;
    line_prefix(r);
    sgr(r, AL_SGR_DIM);
    for (i = 0; i < HR_WIDTH; i++) {
      puts_(r, r->color ? "─" : "-");
    }
    sgr(r, AL_SGR_RESET);
    r->wrote = true;
    newline(r);
    r->blank_pending = true;
    break;
  }
  case MD_BLOCK_H:
    block_start(r);
    r->heading = (int)((MD_BLOCK_H_DETAIL *)detail)->level;
    if (r->color) {
      r->styles |= ST_BOLD | (r->heading == 1 ? ST_UNDERLINE : 0);
    } else {
      char hashes[8];
      int i;

      for (i = 0; i < r->heading && i < 6; i++) {
        hashes[i] = '#';
      }
      hashes[i] = ' ';
      text(r, hashes, (size_t)i + 1);
    }
    break;
  case MD_BLOCK_CODE:
    block_start(r);
    r->styles |= ST_CODEBLOCK;
    break;
  case MD_BLOCK_HTML:
  case MD_BLOCK_P:
    block_start(r);
    break;
  case MD_BLOCK_TABLE:
    block_start(r);
    r->in_table = true;
    r->row = 0;
    r->head_rows = ((MD_BLOCK_TABLE_DETAIL *)detail)->head_row_count;
    break;
  case MD_BLOCK_THEAD:
  case MD_BLOCK_TBODY:
  case MD_BLOCK_TR:
    break;
  case MD_BLOCK_TH:
  case MD_BLOCK_TD:
    r->dst = &r->cell;
    r->cell_align = ((MD_BLOCK_TD_DETAIL *)detail)->align;
    break;
  }
  return r->rc;
}

static int leave_block(MD_BLOCKTYPE type, void *detail, void *ud) {
  render_t *r = ud;

  (void)detail;
  switch (type) {
  case MD_BLOCK_DOC:
    end_line(r);
    break;
  case MD_BLOCK_QUOTE:
    end_line(r);
    r->depth--;
    r->styles &= ~(unsigned)ST_DIM;
    r->blank_pending = true;
    break;
  case MD_BLOCK_UL:
  case MD_BLOCK_OL:
    end_line(r);
    r->depth--;
    if (list_depth(r) == 0) {
      r->blank_pending = true;
    }
    break;
  case MD_BLOCK_LI:
    /* An empty item still shows its marker. */
    if (r->stack[r->depth - 1].marker_pending) {
      text(r, "", 0);
      r->at_bol = false;
      line_prefix(r);
    }
    end_line(r);
    r->depth--;
    r->blank_pending = false;
    break;
  case MD_BLOCK_HR:
    break;
  case MD_BLOCK_H:
    end_line(r);
    r->styles &= ~(unsigned)(ST_BOLD | ST_UNDERLINE);
    r->heading = 0;
    r->blank_pending = true;
    break;
  case MD_BLOCK_CODE:
    end_line(r);
    r->styles &= ~(unsigned)ST_CODEBLOCK;
    r->blank_pending = true;
    break;
  case MD_BLOCK_HTML:
  case MD_BLOCK_P:
    end_line(r);
    /* Inside a list item, paragraphs of a loose list are separated by a
     * blank line too; the next item's end_line handles tight lists. */
    r->blank_pending = true;
    break;
  case MD_BLOCK_TABLE:
    r->in_table = false;
    r->dst = r->out;
    table_render(r);
    table_free(r);
    r->blank_pending = true;
    break;
  case MD_BLOCK_THEAD:
  case MD_BLOCK_TBODY:
    break;
  case MD_BLOCK_TR:
    r->row++;
    break;
  case MD_BLOCK_TH:
  case MD_BLOCK_TD:
    r->dst = r->out;
    cell_end(r);
    break;
  }
  return r->rc;
}

static int enter_span(MD_SPANTYPE type, void *detail, void *ud) {
  render_t *r = ud;

  switch (type) {
  case MD_SPAN_EM:
    r->styles |= ST_ITALIC;
    break;
  case MD_SPAN_STRONG:
    r->styles |= ST_BOLD;
    break;
  case MD_SPAN_U:
    r->styles |= ST_UNDERLINE;
    break;
  case MD_SPAN_DEL:
    r->styles |= ST_STRIKE;
    if (!r->color) {
      text(r, "~~", 2);
    }
    break;
  case MD_SPAN_CODE:
    r->styles |= ST_CODE;
    if (!r->color) {
      text(r, "`", 1);
    }
    break;
  case MD_SPAN_A: {
    MD_SPAN_A_DETAIL *a = detail;

    r->styles |= ST_LINK;
    al_free(r->href);
    r->href = al_strndup(a->href.text, a->href.size);
    r->link_text_start = r->dst->len;
    break;
  }
  case MD_SPAN_IMG:
    text(r, "[image: ", 8);
    break;
  default:
    break;
  }
  if (!r->at_bol) {
    apply_styles(r);
  }
  return r->rc;
}

static int leave_span(MD_SPANTYPE type, void *detail, void *ud) {
  render_t *r = ud;

  (void)detail;
  switch (type) {
  case MD_SPAN_EM:
    r->styles &= ~(unsigned)ST_ITALIC;
    break;
  case MD_SPAN_STRONG:
    r->styles &= ~(unsigned)ST_BOLD;
    break;
  case MD_SPAN_U:
    r->styles &= ~(unsigned)ST_UNDERLINE;
    break;
  case MD_SPAN_DEL:
    r->styles &= ~(unsigned)ST_STRIKE;
    if (!r->color) {
      text(r, "~~", 2);
    }
    break;
  case MD_SPAN_CODE:
    r->styles &= ~(unsigned)ST_CODE;
    if (!r->color) {
      text(r, "`", 1);
    }
    break;
  case MD_SPAN_A: {
    const char *shown = r->dst->data ? r->dst->data + r->link_text_start : "";
    size_t shown_len = r->dst->len - r->link_text_start;

    r->styles &= ~(unsigned)ST_LINK;
    apply_styles(r);
    /* The URL follows unless the text already is it (autolinks). */
    if (r->href != NULL && *r->href != '\0' &&
        (shown_len < strlen(r->href) ||
         memmem(shown, shown_len, r->href, strlen(r->href)) == NULL)) {
      al_buf_t clean;

      al_buf_init(&clean, 1u << 16);
      if (al__tui_sanitize(&clean, r->href, strlen(r->href), true) == 0) {
        sgr(r, AL_SGR_DIM);
        text(r, " (", 2);
        text(r, clean.data ? clean.data : "", clean.len);
        text(r, ")", 1);
        apply_styles(r);
      }
      al_buf_free(&clean);
    }
    al_free(r->href);
    r->href = NULL;
    break;
  }
  case MD_SPAN_IMG:
    text(r, "]", 1);
    break;
  default:
    break;
  }
  if (!r->at_bol) {
    apply_styles(r);
  }
  return r->rc;
}

static void utf8_put(char *b, size_t *n, unsigned cp) {
  if (cp < 0x80) {
    b[(*n)++] = (char)cp;
  } else if (cp < 0x800) {
    b[(*n)++] = (char)(0xC0 | (cp >> 6));
    b[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    b[(*n)++] = (char)(0xE0 | (cp >> 12));
    b[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else {
    b[(*n)++] = (char)(0xF0 | (cp >> 18));
    b[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[(*n)++] = (char)(0x80 | (cp & 0x3F));
  }
}

/* &amp; &#39; &#x1F600; and the few named entities models write; others
 * stay as written. The result is sanitized: &#27; must not become ESC. */
static void entity(render_t *r, const char *s, size_t n) {
  static const struct {
    const char *name;
    const char *utf8;
  } named[] = {{"&amp;", "&"},   {"&lt;", "<"},    {"&gt;", ">"},
               {"&quot;", "\""}, {"&apos;", "'"},  {"&nbsp;", " "},
               {"&copy;", "©"},  {"&mdash;", "—"}, {"&ndash;", "–"},
               {"&hellip;", "…"}, {"&rarr;", "→"}, {"&larr;", "←"}};
  char b[8];
  size_t len = 0;
  size_t i;

  if (n >= 4 && s[1] == '#') {
    unsigned long cp =
        (s[2] == 'x' || s[2] == 'X') ? strtoul(s + 3, NULL, 16)
                                     : strtoul(s + 2, NULL, 10);
    al_buf_t clean;

    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      cp = 0xFFFD;
    }
    utf8_put(b, &len, (unsigned)cp);
    al_buf_init(&clean, 64);
    if (al__tui_sanitize(&clean, b, len, true) == 0) {
      text(r, clean.data, clean.len);
    }
    al_buf_free(&clean);
    return;
  }
  for (i = 0; i < AL_ARRAY_SIZE(named); i++) {
    if (strlen(named[i].name) == n && memcmp(named[i].name, s, n) == 0) {
      text(r, named[i].utf8, strlen(named[i].utf8));
      return;
    }
  }
  text(r, s, n);
}

static int on_text(MD_TEXTTYPE type, const MD_CHAR *s, MD_SIZE n, void *ud) {
  render_t *r = ud;

  switch (type) {
  case MD_TEXT_NULLCHAR:
    text(r, "\xEF\xBF\xBD", 3);
    break;
  case MD_TEXT_BR:
  case MD_TEXT_SOFTBR:
    newline(r);
    break;
  case MD_TEXT_ENTITY:
    entity(r, s, n);
    break;
  default:
    text(r, s, n);
    break;
  }
  return r->rc;
}

int al__md_render(const char *md, size_t len, bool color, al_buf_t *out) {
  return al__md_render_cols(md, len, color, 0, out);
}

int al__md_render_cols(const char *md, size_t len, bool color, int cols,
                       al_buf_t *out) {
  MD_PARSER parser;
  render_t r;
  al_buf_t clean;
  int rc;

  al_buf_init(&clean, len * 4 + 16);
  if ((rc = al__tui_sanitize(&clean, md, len, false)) != 0) {
    al_buf_free(&clean);
    return rc;
  }
  memset(&r, 0, sizeof(r));
  r.out = out;
  r.dst = out;
  r.color = color;
  r.cols = cols > 0 ? (size_t)cols : 0;
  r.at_bol = true;
  al_buf_init(&r.cell, 1u << 20);
  memset(&parser, 0, sizeof(parser));
  parser.flags = MD_FLAG_TABLES | MD_FLAG_STRIKETHROUGH | MD_FLAG_TASKLISTS |
                 MD_FLAG_PERMISSIVEURLAUTOLINKS | MD_FLAG_NOHTML;
  parser.enter_block = enter_block;
  parser.leave_block = leave_block;
  parser.enter_span = enter_span;
  parser.leave_span = leave_span;
  parser.text = on_text;
  rc = md_parse(clean.data ? clean.data : "", (MD_SIZE)clean.len, &parser,
                &r);
  if (rc == 0) {
    rc = r.rc;
  } else if (r.rc != 0) {
    rc = r.rc;
  } else {
    rc = AL_EPARSE;
  }
  al_free(r.href);
  table_free(&r);
  al_buf_free(&clean);
  return rc;
}

/* ---- streaming ---------------------------------------------------------- */

void al__md_stream_init(al__md_stream_t *s, bool color, int cols, int rows) {
  memset(s, 0, sizeof(*s));
  s->color = color;
  s->cols = cols > 0 ? cols : 80;
  s->rows = rows > 0 ? rows : 24;
  s->at_line_start = true;
  al_buf_init(&s->block, 8u << 20);
}

void al__md_stream_free(al__md_stream_t *s) { al_buf_free(&s->block); }

/* Advances the preview's cursor model over sanitized text as a terminal
 * with auto-wrap would: a character that does not fit moves to the next
 * row first; the cursor may sit at column == cols (wrap pending). */
static void preview_advance(al__md_stream_t *s, const char *p, size_t n) {
  size_t i = 0;

  while (i < n) {
    size_t len = 1;
    size_t w;

    if (p[i] == '\n') {
      s->pv_rows++;
      s->pv_col = 0;
      i++;
      continue;
    }
    if (p[i] == '\t') {
      w = (size_t)(8 - s->pv_col % 8);
    } else {
      while (i + len < n && ((unsigned char)p[i + len] & 0xC0) == 0x80) {
        len++;
      }
      w = al__tui_width(p + i, len);
    }
    if (s->pv_col + (int)w > s->cols) {
      s->pv_rows++;
      s->pv_col = 0;
    }
    s->pv_col += (int)w;
    i += len;
  }
}

static bool line_is_blank(const char *p, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') {
      return false;
    }
  }
  return true;
}

/* A fence line: up to 3 spaces, then 3+ backticks or tildes. Returns the
 * run's length (0 when not a fence) and its character. */
static size_t fence_run(const char *p, size_t n, char *ch) {
  size_t i = 0;
  size_t k;

  while (i < n && i < 3 && p[i] == ' ') {
    i++;
  }
  if (i >= n || (p[i] != '`' && p[i] != '~')) {
    return 0;
  }
  *ch = p[i];
  for (k = i; k < n && p[k] == *ch; k++) {
  }
  return k - i >= 3 ? k - i : 0;
}

/* Moves the cursor back to the preview's first row and erases from there
 * to the end of the screen. */
static void erase_preview(al__md_stream_t *s, al_buf_t *out) {
  if (s->pv_rows > 0) {
    al_buf_printf(out, "\r\x1b[%dA\x1b[J", s->pv_rows);
  } else if (s->pv_col > 0) {
    al_buf_append_str(out, "\r\x1b[J");
  }
  s->pv_rows = 0;
  s->pv_col = 0;
}

/* Replaces the preview of the open block with its rendering. */
static int commit_block(al__md_stream_t *s, al_buf_t *out) {
  int rc = 0;

  if (s->block.len == 0) {
    erase_preview(s, out);
    return 0;
  }
  if (!s->raw_block) {
    erase_preview(s, out);
    rc = al__md_render_cols(s->block.data, s->block.len, true, s->cols,
                            out);
  } else if (s->block.data[s->block.len - 1] != '\n') {
    al_buf_append_str(out, "\n");
  }
  s->wrote_any = true;
  s->at_line_start = true;
  al_buf_reset(&s->block);
  s->line_start = 0;
  s->pv_rows = 0;
  s->pv_col = 0;
  s->raw_block = false;
  return rc;
}

/* The line at line_start (complete, ending in \n, not printed yet) is
 * classified: a blank line outside a fence closes the block and is not
 * shown (the separator is printed before the next block); a closing fence
 * closes the block after it is shown. Returns true when the line is to be
 * shown. */
static bool line_done(al__md_stream_t *s, al_buf_t *out, int *rc) {
  const char *line = s->block.data + s->line_start;
  size_t n = s->block.len - s->line_start;
  size_t lead = strspn(line, " ");
  char ch = 0;
  size_t run = fence_run(line, n, &ch);

  *rc = 0;
  if (s->in_fence) {
    if (run >= s->fence_len && ch == s->fence_ch &&
        line_is_blank(line + lead + run, n - lead - run)) {
      s->in_fence = false;
      s->close_after = true;
    }
    s->line_start = s->block.len;
    return true;
  }
  if (run > 0) {
    s->in_fence = true;
    s->fence_ch = ch;
    s->fence_len = run;
    s->line_start = s->block.len;
    return true;
  }
  if (line_is_blank(line, n)) {
    s->block.len = s->line_start;
    s->block.data[s->block.len] = '\0';
    *rc = commit_block(s, out);
    if (s->wrote_any) {
      s->blank_pending = true;
    }
    return false;
  }
  s->line_start = s->block.len;
  return true;
}

static void show(al__md_stream_t *s, const char *p, size_t n, al_buf_t *out) {
  al_buf_t clean;

  al_buf_init(&clean, n * 6 + 16);
  if (al__tui_sanitize(&clean, p, n, false) == 0 && clean.len > 0) {
    al_buf_append(out, clean.data, clean.len);
    if (!s->raw_block) {
      preview_advance(s, clean.data, clean.len);
      if (s->pv_rows >= s->rows - 1) {
        s->raw_block = true;
      }
    }
    s->at_line_start = clean.data[clean.len - 1] == '\n';
  }
  al_buf_free(&clean);
}

int al__md_stream_feed(al__md_stream_t *s, const char *p, size_t n,
                       al_buf_t *out) {
  int rc;

  if (n == 0) {
    return 0;
  }
  if (!s->color) {
    /* Raw Markdown, only made harmless. */
    rc = al__tui_sanitize(out, p, n, false);
    s->at_line_start = out->len > 0 && out->data[out->len - 1] == '\n';
    s->wrote_any = true;
    return rc;
  }
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t seg = nl != NULL ? (size_t)(nl - p) + 1 : n;
    size_t before = s->block.len;

    rc = 0;
    if (before == 0 && s->blank_pending && !line_is_blank(p, seg)) {
      /* The separator goes above the next block, outside its preview. */
      al_buf_append_str(out, "\n");
      s->blank_pending = false;
    }
    if (al_buf_append(&s->block, p, seg) != 0) {
      /* A block larger than its buffer: the rest of it stays raw. */
      s->raw_block = true;
      show(s, p, seg, out);
    } else if (nl == NULL) {
      show(s, p, seg, out);
    } else if (line_done(s, out, &rc)) {
      show(s, s->block.data + before, seg, out);
      if (s->close_after) {
        s->close_after = false;
        rc = commit_block(s, out);
        s->blank_pending = true;
      }
    }
    if (rc != 0) {
      return rc;
    }
    p += seg;
    n -= seg;
  }
  return 0;
}

int al__md_stream_finish(al__md_stream_t *s, al_buf_t *out) {
  int rc = 0;

  if (s->color) {
    rc = commit_block(s, out);
  } else if (!s->at_line_start) {
    rc = al_buf_append_str(out, "\n");
  }
  s->at_line_start = true;
  s->in_fence = false;
  s->blank_pending = false;
  s->wrote_any = false;
  return rc;
}
