/* The chat's view of a run: LoopEvents (as JSON, the daemon's `event`
 * params) become what the person sees.
 *
 *   The answer streams to stdout as Markdown (md_render.c).
 *   Thinking streams dim to stderr.
 *   A running tool is a line in the live area at the bottom of the screen:
 *       ⠹ bash(sleep 5)  1.2s
 *   redrawn by al__tui_view_tick() every 100 ms; when it ends the line is
 *   replaced by its outcome, which stays:
 *       ✓ bash(ls -la src)  0.4s
 *       ✗ bash(false)  0.1s
 *         ⎿ exit status 1
 *   After the run, its sources (citation events, each once) as dim
 *   numbered lines, then one dim usage line.
 *
 * The live area is only drawn while the cursor is at a line start; text
 * written to the screen first erases it (cursor up over its rows, erase to
 * the end of the screen) and it is redrawn below. Every string that came
 * from the model or a tool goes through al__tui_sanitize(). */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "client/tui.h"

static const char *const spinner[] = {"⠋", "⠙", "⠹", "⠸", "⠼",
                                      "⠴", "⠦", "⠧", "⠇", "⠏"};

/* Lines of a tool's output shown under its outcome line. */
#define OUTCOME_LINES 3

void al__tui_view_init(al__tui_view_t *v, FILE *out, FILE *err, bool color,
                       bool live, int cols, int rows) {
  memset(v, 0, sizeof(*v));
  v->out = out;
  v->err = err;
  v->color = color;
  v->live = live;
  v->show_thinking = true;
  v->cols = cols > 20 ? cols : 80;
  v->rows = rows > 4 ? rows : 24;
  v->text_index = -1;
  v->out_at_bol = true;
  v->thinking_at_bol = true;
  al__md_stream_init(&v->md, color, v->cols, v->rows);
  al_buf_init(&v->scratch, 16u << 20);
  al_buf_init(&v->last_output, 1u << 20);
  v->sources = json_array();
}

void al__tui_view_free(al__tui_view_t *v) {
  al__md_stream_free(&v->md);
  al_buf_free(&v->scratch);
  al_buf_free(&v->last_output);
  json_decref(v->sources);
  v->sources = NULL;
}

void al__tui_view_resize(al__tui_view_t *v, int cols, int rows) {
  if (cols > 20) {
    v->cols = cols;
    v->md.cols = cols;
  }
  if (rows > 4) {
    v->rows = rows;
    v->md.rows = rows;
  }
}

static void sgr(al__tui_view_t *v, FILE *f, const char *code) {
  if (v->color) {
    fputs(code, f);
  }
}

/* ---- the live area ------------------------------------------------------ */

static int live_count(const al__tui_view_t *v) {
  int i;
  int n = 0;

  for (i = 0; i < AL_TUI_MAX_LIVE; i++) {
    n += v->tools[i].used ? 1 : 0;
  }
  return n;
}

static void live_erase(al__tui_view_t *v) {
  if (v->live_rows > 0) {
    fprintf(v->err, "\x1b[%dA\r\x1b[J", v->live_rows);
    v->live_rows = 0;
  }
}

static void fmt_elapsed(uint64_t ms, char *buf, size_t n) {
  if (ms < 60000) {
    snprintf(buf, n, "%" PRIu64 ".%" PRIu64 "s", ms / 1000, ms % 1000 / 100);
  } else {
    snprintf(buf, n, "%" PRIu64 "m%02" PRIu64 "s", ms / 60000,
             ms % 60000 / 1000);
  }
}

static void live_draw(al__tui_view_t *v, uint64_t now_ms) {
  int i;

  if (!v->live || !v->out_at_bol || v->md.pv_col > 0 || !v->thinking_at_bol) {
    return;
  }
  for (i = 0; i < AL_TUI_MAX_LIVE; i++) {
    al__tui_tool_t *t = &v->tools[i];
    char el[32];

    if (!t->used) {
      continue;
    }
    fmt_elapsed(now_ms >= t->started_ms ? now_ms - t->started_ms : 0, el,
                sizeof(el));
    fputs("\r\x1b[K", v->err);
    sgr(v, v->err, AL_SGR_YELLOW);
    fputs(spinner[v->spin % AL_ARRAY_SIZE(spinner)], v->err);
    sgr(v, v->err, AL_SGR_RESET);
    fprintf(v->err, " %s  ", t->label);
    sgr(v, v->err, AL_SGR_DIM);
    fputs(el, v->err);
    sgr(v, v->err, AL_SGR_RESET);
    fputc('\n', v->err);
    v->live_rows++;
  }
  fflush(v->err);
}

void al__tui_view_tick(al__tui_view_t *v, uint64_t now_ms) {
  if (!v->live || live_count(v) == 0) {
    return;
  }
  v->spin++;
  fflush(v->out);
  live_erase(v);
  live_draw(v, now_ms);
}

/* ---- text and thinking -------------------------------------------------- */

static void thinking_end(al__tui_view_t *v) {
  if (!v->thinking_open) {
    return;
  }
  sgr(v, v->err, AL_SGR_RESET);
  if (!v->thinking_at_bol) {
    fputc('\n', v->err);
  }
  v->thinking_open = false;
  v->thinking_at_bol = true;
  fflush(v->err);
}

static void text_end(al__tui_view_t *v) {
  if (!v->md_open) {
    return;
  }
  al_buf_reset(&v->scratch);
  al__md_stream_finish(&v->md, &v->scratch);
  fwrite(v->scratch.data, 1, v->scratch.len, v->out);
  fflush(v->out);
  v->md_open = false;
  v->text_index = -1;
  v->out_at_bol = true;
}

void al__tui_view_settle(al__tui_view_t *v) {
  live_erase(v);
  thinking_end(v);
  text_end(v);
  fflush(v->out);
  fflush(v->err);
}

static void text_delta(al__tui_view_t *v, json_t *ev, uint64_t now_ms) {
  const char *t = json_string_value(json_object_get(ev, "text"));
  size_t n = json_string_length(json_object_get(ev, "text"));
  int index = (int)json_integer_value(json_object_get(ev, "index"));

  if (t == NULL || n == 0) {
    return;
  }
  thinking_end(v);
  fflush(v->err);
  live_erase(v);
  if (v->md_open && index != v->text_index) {
    text_end(v);
  }
  v->md_open = true;
  v->text_index = index;
  al_buf_reset(&v->scratch);
  al__md_stream_feed(&v->md, t, n, &v->scratch);
  fwrite(v->scratch.data, 1, v->scratch.len, v->out);
  fflush(v->out);
  v->out_at_bol = v->md.at_line_start;
  live_draw(v, now_ms);
}

static void thinking_delta(al__tui_view_t *v, json_t *ev) {
  const char *t = json_string_value(json_object_get(ev, "text"));
  size_t n = json_string_length(json_object_get(ev, "text"));

  if (!v->show_thinking || t == NULL || n == 0) {
    return;
  }
  live_erase(v);
  text_end(v);
  al_buf_reset(&v->scratch);
  if (al__tui_sanitize(&v->scratch, t, n, false) != 0 ||
      v->scratch.len == 0) {
    return;
  }
  if (!v->thinking_open) {
    v->thinking_open = true;
    sgr(v, v->err, AL_SGR_DIM AL_SGR_ITALIC);
    if (!v->color) {
      fputs("thinking: ", v->err);
    }
  }
  sgr(v, v->err, AL_SGR_DIM AL_SGR_ITALIC);
  fwrite(v->scratch.data, 1, v->scratch.len, v->err);
  v->thinking_at_bol = v->scratch.data[v->scratch.len - 1] == '\n';
  fflush(v->err);
}

/* ---- tools -------------------------------------------------------------- */

void al__tui_tool_label(const char *name, json_t *input, size_t max_width,
                        char *buf, size_t n) {
  static const char *const keys[] = {"command", "cmd",     "path",
                                     "file_path", "pattern", "query",
                                     "url",     "file",    "dir",
                                     "description"}; /* task's */
  al_buf_t b;
  const char *arg = NULL;
  size_t arg_len = 0;
  char *dumped = NULL;
  size_t i;
  size_t fit;

  al_buf_init(&b, 8192);
  if (json_is_object(input)) {
    for (i = 0; i < AL_ARRAY_SIZE(keys) && arg == NULL; i++) {
      json_t *s = json_object_get(input, keys[i]);

      if (json_is_string(s)) {
        arg = json_string_value(s);
        arg_len = json_string_length(s);
      }
    }
    /* One string argument, whatever its name: its value says it all. */
    if (arg == NULL && json_object_size(input) == 1) {
      json_t *only = json_object_iter_value(json_object_iter(input));

      if (json_is_string(only)) {
        arg = json_string_value(only);
        arg_len = json_string_length(only);
      }
    }
    if (arg == NULL && json_object_size(input) > 0) {
      dumped = json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY);
      arg = dumped;
      arg_len = dumped != NULL ? strlen(dumped) : 0;
    }
  } else if (json_is_string(input)) {
    arg = json_string_value(input);
    arg_len = json_string_length(input);
  }
  al__tui_sanitize(&b, name != NULL ? name : "?",
                   name != NULL ? strlen(name) : 1, true);
  al_buf_append_str(&b, "(");
  if (arg != NULL) {
    al__tui_sanitize(&b, arg, AL_MIN(arg_len, (size_t)4096), true);
  }
  al_free(dumped);
  if (b.data == NULL) {
    snprintf(buf, n, "?");
    return;
  }
  /* Cut to the width, keeping room for "…)". */
  fit = al__tui_fit(b.data, b.len, max_width > 2 ? max_width - 2 : 1);
  if (fit < b.len) {
    snprintf(buf, n, "%.*s…)", (int)fit, b.data);
  } else {
    snprintf(buf, n, "%s)", b.data);
  }
  /* snprintf may have cut inside a UTF-8 character: back off to one. */
  if (strlen(buf) + 1 >= n) {
    size_t k = strlen(buf);

    while (k > 0 && ((unsigned char)buf[k - 1] & 0xC0) == 0x80) {
      k--;
    }
    if (k > 0 && ((unsigned char)buf[k - 1] & 0x80)) {
      k--;
    }
    buf[k] = '\0';
  }
  al_buf_free(&b);
}

static al__tui_tool_t *tool_find(al__tui_view_t *v, const char *call_id) {
  int i;

  for (i = 0; call_id != NULL && i < AL_TUI_MAX_LIVE; i++) {
    if (v->tools[i].used && strcmp(v->tools[i].call_id, call_id) == 0) {
      return &v->tools[i];
    }
  }
  return NULL;
}

static al__tui_tool_t *queued_find(al__tui_view_t *v, const char *call_id) {
  size_t i;

  for (i = 0; call_id != NULL && i < AL_ARRAY_SIZE(v->queued); i++) {
    if (v->queued[i].used && strcmp(v->queued[i].call_id, call_id) == 0) {
      return &v->queued[i];
    }
  }
  return NULL;
}

static size_t label_width(const al__tui_view_t *v);

static void nest_indent(al__tui_view_t *v);

/* A sub-agent's label: the nest prefix first (the caller's buffer is the
 * label's size; a long one is cut on a character). */
static void nest_label(const al__tui_view_t *v, char *label, size_t n) {
  char tmp[sizeof(v->tools[0].label)];
  size_t k;

  if (v->nest[0] == '\0') {
    return;
  }
  snprintf(tmp, sizeof(tmp), "%s%s", v->nest, label);
  k = strlen(tmp);
  if (k + 1 >= sizeof(tmp)) {
    while (k > 0 && ((unsigned char)tmp[k - 1] & 0xC0) == 0x80) {
      k--;
    }
    if (k > 0 && ((unsigned char)tmp[k - 1] & 0x80)) {
      k--;
    }
    tmp[k] = '\0';
  }
  snprintf(label, n, "%s", tmp);
}

static void tool_queued(al__tui_view_t *v, json_t *ev) {
  const char *id = json_string_value(json_object_get(ev, "call_id"));
  al__tui_tool_t *t =
      &v->queued[v->queued_next++ % AL_ARRAY_SIZE(v->queued)];

  t->used = true;
  snprintf(t->call_id, sizeof(t->call_id), "%s", id != NULL ? id : "");
  al__tui_tool_label(json_string_value(json_object_get(ev, "name")),
                     json_object_get(ev, "input"), label_width(v), t->label,
                     sizeof(t->label));
  nest_label(v, t->label, sizeof(t->label));
}

static size_t label_width(const al__tui_view_t *v) {
  return v->cols > 24 ? (size_t)v->cols - 14 : 10;
}

static void tool_started(al__tui_view_t *v, json_t *ev, uint64_t now_ms) {
  const char *id = json_string_value(json_object_get(ev, "call_id"));
  const char *name = json_string_value(json_object_get(ev, "name"));
  char label[sizeof(v->tools[0].label)];
  int i;

  al__tui_tool_label(name, json_object_get(ev, "input"), label_width(v),
                     label, sizeof(label));
  nest_label(v, label, sizeof(label));
  if (!v->live) {
    text_end(v);
    thinking_end(v);
    nest_indent(v);
    fputs("● ", v->err);
    fputs(label, v->err);
    fputc('\n', v->err);
    fflush(v->err);
  }
  for (i = 0; i < AL_TUI_MAX_LIVE; i++) {
    al__tui_tool_t *t = &v->tools[i];

    if (!t->used) {
      t->used = true;
      snprintf(t->call_id, sizeof(t->call_id), "%s", id != NULL ? id : "");
      memcpy(t->label, label, sizeof(label));
      t->started_ms = now_ms;
      break;
    }
  }
  if (v->live) {
    /* The answer's open block is finished before the live area. */
    if (!v->out_at_bol) {
      text_end(v);
    }
    thinking_end(v);
    live_erase(v);
    live_draw(v, now_ms);
  }
}

/* n with a comma between groups of three digits: 1,988. */
static void group_digits(uint64_t n, char *buf, size_t len) {
  char digits[32];
  size_t nd = (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, n);
  size_t i, o = 0;

  for (i = 0; i < nd && o + 2 < len; i++) {
    if (i > 0 && (nd - i) % 3 == 0) {
      buf[o++] = ',';
    }
    buf[o++] = digits[i];
  }
  buf[o] = '\0';
}

void al__tui_more_lines(const char *s, size_t n, char *buf, size_t len) {
  uint64_t lines = 0;
  char l[32], b[32];
  size_t i;

  for (i = 0; i < n; i++) {
    lines += s[i] == '\n';
  }
  lines += n > 0 && s[n - 1] != '\n'; /* a last line without its newline */
  group_digits(lines, l, sizeof(l));
  group_digits(n, b, sizeof(b));
  snprintf(buf, len, "… %s more line%s (%s bytes)", l, lines == 1 ? "" : "s",
           b);
}

/* Up to OUTCOME_LINES lines of the result, dim and indented, each cut to
 * the screen width. */
static void outcome_lines(al__tui_view_t *v, const char *s, size_t n) {
  int shown = 0;
  size_t width = v->cols > 8 ? (size_t)v->cols - 6 : 10;

  while (n > 0 && shown < OUTCOME_LINES) {
    const char *nl = memchr(s, '\n', n);
    size_t len = nl != NULL ? (size_t)(nl - s) : n;
    size_t fit;

    if (len > 0 || shown > 0) {
      al_buf_reset(&v->scratch);
      al__tui_sanitize(&v->scratch, s, AL_MIN(len, (size_t)4096), true);
      fit = v->scratch.data != NULL
                ? al__tui_fit(v->scratch.data, v->scratch.len, width)
                : 0;
      sgr(v, v->err, AL_SGR_DIM);
      fprintf(v->err, "%s%.*s%s", shown == 0 ? "  ⎿ " : "    ", (int)fit,
              v->scratch.data != NULL ? v->scratch.data : "",
              fit < v->scratch.len ? "…" : "");
      sgr(v, v->err, AL_SGR_RESET);
      fputc('\n', v->err);
      shown++;
    }
    if (nl == NULL) {
      break;
    }
    s = nl + 1;
    n -= len + 1;
  }
  while (n > 0 && s[n - 1] == '\n') {
    n--; /* trailing blank lines are not worth a mention */
  }
  if (n > 0 && shown == OUTCOME_LINES) {
    char more[96];

    /* What was cut, so a long output is not mistaken for a short one. */
    al__tui_more_lines(s, n, more, sizeof(more));
    sgr(v, v->err, AL_SGR_DIM);
    fprintf(v->err, "    %s\n", more);
    sgr(v, v->err, AL_SGR_RESET);
  }
}

static void tool_completed(al__tui_view_t *v, json_t *ev, uint64_t now_ms) {
  const char *id = json_string_value(json_object_get(ev, "call_id"));
  const char *name = json_string_value(json_object_get(ev, "name"));
  const char *reason = json_string_value(json_object_get(ev, "reason"));
  json_t *content = json_object_get(ev, "content");
  bool is_error = json_is_true(json_object_get(ev, "is_error"));
  uint64_t ms = (uint64_t)json_integer_value(json_object_get(ev, "duration_ms"));
  al__tui_tool_t *t = tool_find(v, id);
  char label[sizeof(v->tools[0].label)];
  char el[32];

  if (t != NULL) {
    memcpy(label, t->label, sizeof(label));
    t->used = false;
  } else if ((t = queued_find(v, id)) != NULL) {
    memcpy(label, t->label, sizeof(label));
  } else {
    al__tui_tool_label(name, NULL, label_width(v), label, sizeof(label));
    nest_label(v, label, sizeof(label));
  }
  fflush(v->out);
  live_erase(v);
  if (!v->out_at_bol) {
    text_end(v);
  }
  thinking_end(v);
  fmt_elapsed(ms, el, sizeof(el));
  nest_indent(v);
  sgr(v, v->err, is_error ? AL_SGR_RED : AL_SGR_GREEN);
  fputs(is_error ? "✗" : "✓", v->err);
  sgr(v, v->err, AL_SGR_RESET);
  fprintf(v->err, " %s  ", label);
  sgr(v, v->err, AL_SGR_DIM);
  if (reason != NULL && strcmp(reason, "user_interrupted") == 0) {
    fputs("interrupted", v->err);
  } else if (reason != NULL) {
    fputs("aborted (", v->err);
    al_buf_reset(&v->scratch);
    al__tui_sanitize(&v->scratch, reason, strlen(reason), true);
    fputs(v->scratch.data != NULL ? v->scratch.data : "", v->err);
    fputs(")", v->err);
  } else {
    fputs(el, v->err);
  }
  sgr(v, v->err, AL_SGR_RESET);
  fputc('\n', v->err);
  /* The output's first lines tell whether it did the right thing; errors
   * always, successes too (full output stays in the transcript). */
  if (reason == NULL && json_is_string(content) && v->nest[0] == '\0') {
    size_t n = AL_MIN(json_string_length(content), (size_t)(1u << 20) - 1);

    outcome_lines(v, json_string_value(content), json_string_length(content));
    /* Kept (up to 1 MiB) for /last. */
    al_buf_reset(&v->last_output);
    al_buf_append(&v->last_output, json_string_value(content), n);
    memcpy(v->last_label, label, sizeof(v->last_label));
  }
  fflush(v->err);
  live_draw(v, now_ms);
}

/* ---- notices and usage -------------------------------------------------- */

void al__tui_view_notice(al__tui_view_t *v, const char *code, const char *fmt,
                         ...) {
  char msg[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fflush(v->out);
  live_erase(v);
  if (!v->out_at_bol) {
    text_end(v);
  }
  thinking_end(v);
  al_buf_reset(&v->scratch);
  al__tui_sanitize(&v->scratch, msg, strlen(msg), true);
  if (code != NULL) {
    sgr(v, v->err, code);
  }
  fputs(v->scratch.data != NULL ? v->scratch.data : "", v->err);
  if (code != NULL) {
    sgr(v, v->err, AL_SGR_RESET);
  }
  fputc('\n', v->err);
  fflush(v->err);
}

void al__tui_view_user(al__tui_view_t *v, const char *text, size_t len,
                       const char *tag) {
  size_t i = 0;
  bool first = true;

  fflush(v->out);
  live_erase(v);
  if (!v->out_at_bol) {
    text_end(v);
  }
  thinking_end(v);
  /* Line by line, as the prompt showed it: "> " then ". " (a continued
   * message), each line sanitized (no escape sequences from a transcript). */
  while (i < len || first) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t e = nl != NULL ? (size_t)(nl - text) : len;

    al_buf_reset(&v->scratch);
    al__tui_sanitize(&v->scratch, text + i, e - i, true);
    sgr(v, v->err, AL_SGR_BOLD);
    fputs(first ? "> " : ". ", v->err);
    fputs(v->scratch.data != NULL ? v->scratch.data : "", v->err);
    sgr(v, v->err, AL_SGR_RESET);
    if (first && tag != NULL) {
      sgr(v, v->err, AL_SGR_DIM);
      fprintf(v->err, "  %s", tag);
      sgr(v, v->err, AL_SGR_RESET);
    }
    fputc('\n', v->err);
    first = false;
    if (nl == NULL) {
      break;
    }
    i = e + 1;
  }
  fflush(v->err);
}

static void fmt_tokens(uint64_t n, char *buf, size_t len) {
  if (n < 1000) {
    snprintf(buf, len, "%" PRIu64, n);
  } else if (n < 1000000) {
    snprintf(buf, len, "%" PRIu64 ".%" PRIu64 "k", n / 1000, n % 1000 / 100);
  } else {
    snprintf(buf, len, "%" PRIu64 ".%" PRIu64 "M", n / 1000000,
             n % 1000000 / 100000);
  }
}

static void usd(double v, char *buf, size_t n) {
  /* Cents hide what a short session costs: four places below a dollar. */
  snprintf(buf, n, v < 1.0 ? "$%.4f" : "$%.2f", v);
}

void al__tui_cost_text(const json_t *session_usd, const json_t *run_usd,
                       char *buf, size_t n) {
  char a[32], b[32];

  if (!json_is_number(session_usd)) {
    snprintf(buf, n, "cost unknown: no prices for this model in the models "
                     "catalogue (models.yaml)");
    return;
  }
  usd(json_number_value(session_usd), a, sizeof(a));
  if (json_is_number(run_usd)) {
    usd(json_number_value(run_usd), b, sizeof(b));
    snprintf(buf, n, "%s this session (%s last run)", a, b);
  } else {
    snprintf(buf, n, "%s this session", a);
  }
}

void al__tui_usage_line(const al__tui_usage_t *run,
                        const al__tui_usage_t *session, char *buf, size_t n) {
  char in[32];
  char cached[32];
  char out[32];
  char sin[32];
  char sout[32];
  uint64_t run_in =
      run->input_tokens + run->cache_read + run->cache_creation;
  uint64_t ses_in =
      session->input_tokens + session->cache_read + session->cache_creation;
  int w;

  fmt_tokens(run_in, in, sizeof(in));
  fmt_tokens(run->cache_read, cached, sizeof(cached));
  fmt_tokens(run->output_tokens, out, sizeof(out));
  fmt_tokens(ses_in, sin, sizeof(sin));
  fmt_tokens(session->output_tokens, sout, sizeof(sout));
  if (run->cache_read > 0 && run->cache_creation > 0) {
    char written[32];

    fmt_tokens(run->cache_creation, written, sizeof(written));
    w = snprintf(buf, n, "%s in (%s cached, %s written) · %s out", in, cached,
                 written, out);
  } else if (run->cache_read > 0) {
    w = snprintf(buf, n, "%s in (%s cached) · %s out", in, cached, out);
  } else if (run->cache_creation > 0) {
    fmt_tokens(run->cache_creation, cached, sizeof(cached));
    w = snprintf(buf, n, "%s in (%s written to cache) · %s out", in, cached,
                 out);
  } else {
    w = snprintf(buf, n, "%s in · %s out", in, out);
  }
  if (w > 0 && (size_t)w < n) {
    snprintf(buf + w, n - (size_t)w, " · session %s in · %s out", sin, sout);
  }
}

static void add_usage(al__tui_usage_t *u, json_t *ev) {
  u->input_tokens +=
      (uint64_t)json_integer_value(json_object_get(ev, "input_tokens"));
  u->output_tokens +=
      (uint64_t)json_integer_value(json_object_get(ev, "output_tokens"));
  u->cache_read += (uint64_t)json_integer_value(
      json_object_get(ev, "cache_read_input_tokens"));
  u->cache_creation += (uint64_t)json_integer_value(
      json_object_get(ev, "cache_creation_input_tokens"));
}

static void usage_line(al__tui_view_t *v) {
  char line[256];

  al__tui_usage_line(&v->run, &v->session, line, sizeof(line));
  al__tui_view_notice(v, AL_SGR_DIM, "%s", line);
}

static const char *str(json_t *ev, const char *key) {
  const char *s = json_string_value(json_object_get(ev, key));

  return s != NULL ? s : "";
}

/* Drops every live tool line: the run is over, whatever did not report a
 * result will not. */
static void tools_clear(al__tui_view_t *v) {
  live_erase(v);
  memset(v->tools, 0, sizeof(v->tools));
}

/* ---- sources ----------------------------------------------------------- */

/* Keeps a citation's source once: the same URL (or, without one, the same
 * title and cited text) cited twice is one source. */
static void source_add(al__tui_view_t *v, json_t *ev) {
  json_t *c = json_object_get(ev, "citation");
  const char *url = json_string_value(json_object_get(c, "url"));
  const char *title = json_string_value(json_object_get(c, "title"));
  const char *cited = json_string_value(json_object_get(c, "cited_text"));
  size_t i;
  json_t *s;

  if (!json_is_object(c) || v->sources == NULL ||
      (url == NULL && title == NULL && cited == NULL)) {
    return;
  }
  json_array_foreach(v->sources, i, s) {
    const char *su = json_string_value(json_object_get(s, "url"));
    const char *st = json_string_value(json_object_get(s, "title"));
    const char *sc = json_string_value(json_object_get(s, "cited_text"));

    if (url != NULL ? su != NULL && strcmp(su, url) == 0
                    : su == NULL && (st == title || (st != NULL &&
                                                    title != NULL &&
                                                    strcmp(st, title) == 0)) &&
                          (sc == cited || (sc != NULL && cited != NULL &&
                                           strcmp(sc, cited) == 0))) {
      return;
    }
  }
  json_array_append(v->sources, c);
}

/* At most `max` bytes of s, cut on a UTF-8 character boundary. */
static int utf8_cut(const char *s, int max) {
  int n = (int)strlen(s);

  if (n <= max) {
    return n;
  }
  while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80) {
    max--;
  }
  return max;
}

/* One dim line per source: "[n] title · url"; n is the provider's own
 * number (Perplexity's [n] markers) when it gave one. */
static void sources_show(al__tui_view_t *v) {
  size_t i;
  json_t *s;

  json_array_foreach(v->sources, i, s) {
    const char *url = json_string_value(json_object_get(s, "url"));
    const char *title = json_string_value(json_object_get(s, "title"));
    const char *cited = json_string_value(json_object_get(s, "cited_text"));
    json_t *num = json_object_get(s, "number");
    long long n = json_is_integer(num) ? (long long)json_integer_value(num)
                                       : (long long)i + 1;

    if (title == NULL) {
      title = json_string_value(json_object_get(s, "document_title"));
    }
    if (url != NULL && title != NULL) {
      al__tui_view_notice(v, AL_SGR_DIM, "[%lld] %.200s \xc2\xb7 %.400s", n,
                          title, url);
    } else if (url != NULL) {
      al__tui_view_notice(v, AL_SGR_DIM, "[%lld] %.400s", n, url);
    } else if (title != NULL) {
      al__tui_view_notice(v, AL_SGR_DIM, "[%lld] %.200s", n, title);
    } else {
      al__tui_view_notice(v, AL_SGR_DIM, "[%lld] \"%.*s\"", n,
                          utf8_cut(cited, 120), cited);
    }
  }
  json_array_clear(v->sources);
}

/* ---- sub-agents ---------------------------------------------------------- */

/* The path of the child a subagent_* event names: the event's own path
 * (its parent's; none at the top) and its task id. */
static void kid_path(json_t *ev, char *buf, size_t n) {
  const char *p = str(ev, "path");

  snprintf(buf, n, "%s%s%s", p, p[0] != '\0' ? "/" : "", str(ev, "task_id"));
}

void al__tui_view_kid_name(const al__tui_view_t *v, const char *path,
                           char *buf, size_t n) {
  unsigned i;
  unsigned k = v->nkids < AL_ARRAY_SIZE(v->kids) ? v->nkids
                                                   : (unsigned)AL_ARRAY_SIZE(
                                                         v->kids);
  const char *agent = NULL;
  al_buf_t b;

  for (i = 0; i < k; i++) {
    if (strcmp(v->kids[i].path, path) == 0) {
      agent = v->kids[i].agent;
    }
  }
  al_buf_init(&b, 512);
  if (agent != NULL && agent[0] != '\0') {
    al__tui_sanitize(&b, agent, strlen(agent), true);
    al_buf_append_str(&b, " ");
  }
  al__tui_sanitize(&b, path, strlen(path), true);
  snprintf(buf, n, "%s", b.data != NULL ? b.data : "?");
  al_buf_free(&b);
}

/* Sets v->nest for a line of the sub-agent at path: two spaces per level,
 * then "explore t1 › ". */
static void nest_set(al__tui_view_t *v, const char *path) {
  char name[96];
  const char *p;

  v->nest_depth = 1;
  for (p = path; *p != '\0'; p++) {
    v->nest_depth += *p == '/';
  }
  al__tui_view_kid_name(v, path, name, sizeof(name));
  snprintf(v->nest, sizeof(v->nest), "%s › ", name);
}

static void nest_clear(al__tui_view_t *v) {
  v->nest[0] = '\0';
  v->nest_depth = 0;
}

/* The indent of a sub-agent's line (none for the agent's own). */
static void nest_indent(al__tui_view_t *v) {
  int i;

  for (i = 0; i < v->nest_depth && i < 16; i++) {
    fputs("  ", v->err);
  }
}

/* subagent_started / subagent_completed: one line each. */
static void subagent_line(al__tui_view_t *v, json_t *ev, bool started) {
  char path[48];
  char in[32], out[32];
  const char *outcome = str(ev, "outcome");
  bool ok = strcmp(outcome, "completed") == 0;

  kid_path(ev, path, sizeof(path));
  if (started) {
    unsigned i = v->nkids++ % (unsigned)AL_ARRAY_SIZE(v->kids);

    snprintf(v->kids[i].path, sizeof(v->kids[i].path), "%s", path);
    snprintf(v->kids[i].agent, sizeof(v->kids[i].agent), "%s",
             str(ev, "agent"));
  }
  nest_set(v, path);
  al_buf_reset(&v->scratch);
  al__tui_sanitize(&v->scratch, str(ev, "description"),
                   strlen(str(ev, "description")), true);
  if (started) {
    al__tui_view_notice(v, AL_SGR_DIM, "%*s%s%s%s", 2 * v->nest_depth, "",
                        v->nest,
                        json_is_true(json_object_get(ev, "background"))
                            ? "started in the background: "
                            : "started: ",
                        v->scratch.data != NULL ? v->scratch.data : "");
    return;
  }
  fmt_tokens((uint64_t)json_integer_value(json_object_get(
                 json_object_get(ev, "usage"), "input_tokens")),
             in, sizeof(in));
  fmt_tokens((uint64_t)json_integer_value(json_object_get(
                 json_object_get(ev, "usage"), "output_tokens")),
             out, sizeof(out));
  al__tui_view_notice(v, ok ? AL_SGR_DIM : AL_SGR_YELLOW,
                      "%*s%s%s %s · %s in · %s out", 2 * v->nest_depth, "",
                      v->nest, ok ? "✓" : "✗", outcome, in, out);
}

/* A sub-agent's own event. */
static void child_event(al__tui_view_t *v, json_t *ev, const char *type,
                        const char *path, uint64_t now_ms) {
  if (strcmp(type, "subagent_started") == 0 ||
      strcmp(type, "subagent_completed") == 0) {
    subagent_line(v, ev, type[9] == 's');
    nest_clear(v);
    return;
  }
  nest_set(v, path);
  if (strcmp(type, "tool_use_queued") == 0) {
    tool_queued(v, ev);
  } else if (strcmp(type, "tool_use_started") == 0) {
    tool_started(v, ev, now_ms);
  } else if (strcmp(type, "tool_use_completed") == 0) {
    tool_completed(v, ev, now_ms);
  } else if (strcmp(type, "usage") == 0) {
    add_usage(&v->run, ev);
    add_usage(&v->session, ev);
  } else if (strcmp(type, "error") == 0 || strcmp(type, "api_error") == 0) {
    al__tui_view_settle(v);
    al__tui_view_notice(v, AL_SGR_DIM, "%*s%s%s: %s", 2 * v->nest_depth,
                        "", v->nest, type, str(ev, "message"));
  }
  nest_clear(v);
}

bool al__tui_view_event(al__tui_view_t *v, json_t *ev, uint64_t now_ms) {
  const char *type = json_string_value(json_object_get(ev, "type"));
  const char *path = json_string_value(json_object_get(ev, "path"));

  if (type == NULL) {
    return false;
  }
  if (path != NULL) {
    child_event(v, ev, type, path, now_ms);
    return false;
  }
  if (strcmp(type, "subagent_started") == 0 ||
      strcmp(type, "subagent_completed") == 0) {
    subagent_line(v, ev, type[9] == 's');
    nest_clear(v);
    return false;
  }
  if (strcmp(type, "text_delta") == 0) {
    if (!v->compacting) {
      text_delta(v, ev, now_ms);
    }
  } else if (strcmp(type, "thinking_delta") == 0) {
    if (!v->compacting) {
      thinking_delta(v, ev);
    }
  } else if (strcmp(type, "compaction_started") == 0) {
    char n[32];

    al__tui_view_settle(v);
    v->compacting = true;
    group_digits((uint64_t)json_integer_value(
                     json_object_get(ev, "tokens_before")),
                 n, sizeof(n));
    al__tui_view_notice(v, AL_SGR_DIM, "compacting… (%s, %s tokens)",
                        str(ev, "trigger"), n);
  } else if (strcmp(type, "run_started") == 0) {
    v->compacting = false;
    memset(&v->run, 0, sizeof(v->run));
    json_array_clear(v->sources);
    tools_clear(v);
  } else if (strcmp(type, "citation") == 0) {
    source_add(v, ev);
  } else if (strcmp(type, "mcp_server_state") == 0 ||
             strcmp(type, "mcp_warning") == 0) {
    /* ready/starting are routine (/tools lists them); a server that failed,
     * one whose server stream degraded or was given up, and warnings are
     * said, as `run` says them. */
    const char *st = str(ev, "state");

    if (strcmp(type, "mcp_warning") == 0 || strcmp(st, "failed") == 0 ||
        strcmp(st, "degraded") == 0) {
      al__tui_view_settle(v);
      al__tui_view_notice(v, AL_SGR_YELLOW, "mcp %s: %s", str(ev, "server"),
                          str(ev, "error")[0] != '\0' ? str(ev, "error")
                                                      : str(ev, "message"));
    }
  } else if (strcmp(type, "provider_notice") == 0) {
    /* pause_turn continued, a finish_reason inferred: said, not alarming. */
    al__tui_view_notice(v, AL_SGR_DIM, "%s",
                        str(ev, "message")[0] != '\0' ? str(ev, "message")
                                                     : str(ev, "kind"));
  } else if (strcmp(type, "content_block_completed") == 0) {
    int index = (int)json_integer_value(json_object_get(ev, "index"));

    if (v->md_open && index == v->text_index) {
      live_erase(v);
      text_end(v);
      live_draw(v, now_ms);
    } else if (v->thinking_open) {
      thinking_end(v);
    }
  } else if (strcmp(type, "tool_use_queued") == 0) {
    tool_queued(v, ev);
  } else if (strcmp(type, "tool_use_started") == 0) {
    tool_started(v, ev, now_ms);
  } else if (strcmp(type, "tool_use_completed") == 0) {
    tool_completed(v, ev, now_ms);
  } else if (strcmp(type, "usage") == 0) {
    add_usage(&v->run, ev);
    add_usage(&v->session, ev);
  } else if (strcmp(type, "retry") == 0) {
    al__tui_view_notice(
        v, AL_SGR_YELLOW, "retrying in %.1fs (%s, attempt %" PRId64 "/%" PRId64 ")",
        (double)json_integer_value(json_object_get(ev, "delay_ms")) / 1000.0,
        str(ev, "kind"), (int64_t)json_integer_value(json_object_get(ev, "attempt")),
        (int64_t)json_integer_value(json_object_get(ev, "max")));
  } else if (strcmp(type, "mcp_startup_complete") == 0) {
    /* A configured server the first turn goes without. */
    json_t *f = json_object_get(ev, "failed");
    json_t *p = json_object_get(ev, "pending");
    size_t i;
    json_t *x;

    json_array_foreach(f, i, x) {
      al__tui_view_notice(v, AL_SGR_YELLOW, "MCP server %s failed: %.300s",
                          str(x, "server"), str(x, "error"));
    }
    json_array_foreach(p, i, x) {
      al__tui_view_notice(v, AL_SGR_DIM,
                          "MCP server %s is still starting; its tools join "
                          "when it is ready",
                          json_string_value(x) != NULL ? json_string_value(x)
                                                       : "?");
    }
  } else if (strcmp(type, "api_error") == 0) {
    al__tui_view_notice(v, AL_SGR_DIM, "API error: %s", str(ev, "message"));
  } else if (strcmp(type, "tombstone") == 0) {
    al__tui_view_notice(v, AL_SGR_YELLOW,
                        "(the partial reply above is discarded; the model "
                        "answers again)");
  } else if (strcmp(type, "model_fallback") == 0) {
    al__tui_view_notice(v, AL_SGR_YELLOW, "switching to %s (%s)",
                        str(ev, "to"), str(ev, "reason"));
  } else if (strcmp(type, "compaction_completed") == 0) {
    char before[32], after[32];

    v->compacting = false;
    group_digits((uint64_t)json_integer_value(
                     json_object_get(ev, "tokens_before")),
                 before, sizeof(before));
    group_digits((uint64_t)json_integer_value(
                     json_object_get(ev, "tokens_after")),
                 after, sizeof(after));
    al__tui_view_notice(
        v, json_is_true(json_object_get(ev, "fallback")) ? AL_SGR_YELLOW
                                                          : AL_SGR_DIM,
        "context compacted (%s): %s → %s tokens, %" PRId64
        " messages summarized%s",
        str(ev, "trigger"), before, after,
        (int64_t)json_integer_value(json_object_get(ev, "dropped_messages")),
        json_is_true(json_object_get(ev, "fallback"))
            ? " (the summary failed: trimmed instead)"
            : "");
  } else if (strcmp(type, "micro_compaction") == 0) {
    al__tui_view_notice(
        v, AL_SGR_DIM,
        "cleared %" PRId64 " old tool outputs (%" PRId64 " tokens saved)",
        (int64_t)json_integer_value(json_object_get(ev, "cleared")),
        (int64_t)json_integer_value(json_object_get(ev, "tokens_saved")));
  } else if (strcmp(type, "context_warning") == 0) {
    al__tui_view_notice(
        v, AL_SGR_YELLOW,
        "context %" PRId64 "%% full (%" PRId64 " of %" PRId64
        " tokens): /compact frees it",
        (int64_t)json_integer_value(json_object_get(ev, "context_pct")),
        (int64_t)json_integer_value(json_object_get(ev, "context_tokens")),
        (int64_t)json_integer_value(json_object_get(ev, "context_window")));
  } else if (strcmp(type, "history_repaired") == 0) {
    al__tui_view_notice(v, AL_SGR_YELLOW,
                        "history repaired before sending (%" PRId64
                        " fixes)",
                        (int64_t)json_integer_value(
                            json_object_get(ev, "count")));
  } else if (strcmp(type, "max_turns_reached") == 0) {
    al__tui_view_notice(v, AL_SGR_YELLOW,
                        "turn limit (%" PRId64 ") reached, summarizing",
                        (int64_t)json_integer_value(
                            json_object_get(ev, "max_turns")));
  } else if (strcmp(type, "interrupted") == 0) {
    v->compacting = false;
    tools_clear(v);
    al__tui_view_settle(v);
    sources_show(v);
    al__tui_view_notice(v, AL_SGR_RED, "interrupted");
    return true;
  } else if (strcmp(type, "error") == 0) {
    v->compacting = false;
    tools_clear(v);
    al__tui_view_settle(v);
    sources_show(v);
    al__tui_view_notice(v, AL_SGR_RED, "error: %s", str(ev, "message"));
    return true;
  } else if (strcmp(type, "final") == 0) {
    v->compacting = false;
    tools_clear(v);
    al__tui_view_settle(v);
    sources_show(v);
    usage_line(v);
    return true;
  }
  return false;
}
