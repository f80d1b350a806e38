/* The interactive front end's building blocks (CONVENTIONS.md 7.2), shared
 * by chat.c and its unit tests (tests/unit/tui/):
 *
 *   tui_term.c   colour decision, display width, control-character
 *                neutralisation of model and tool text (RELIABILITY E5)
 *   md_render.c  Markdown -> ANSI on md4c, whole text or streamed per block
 *   tui_view.c   LoopEvents -> what the person sees: streamed text, dim
 *                thinking, tool lines with a live spinner, usage line
 *   slash.c      slash-command parser
 *   paths.c      state dir, history file, daemon binary lookup
 *
 * Nothing here talks to the daemon; the pure parts write into an al_buf_t
 * so tests compare bytes. */
#ifndef AL_CLIENT_TUI_H
#define AL_CLIENT_TUI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/common.h"

/* ---- tui_term.c --------------------------------------------------------- */

typedef enum { AL_COLOR_AUTO, AL_COLOR_ALWAYS, AL_COLOR_NEVER } al_color_when_t;

/* Parses auto|always|never; false for anything else. */
bool al__tui_parse_color(const char *s, al_color_when_t *out);
/* CONVENTIONS 7.2: colour when forced (--color=always, FORCE_COLOR set and
 * not "0"), never when --color=never; on auto only if `is_tty`, TERM is not
 * "dumb" and NO_COLOR is unset or empty. Environment values are passed in
 * so tests need no setenv. */
bool al__tui_color_decide(al_color_when_t when, bool is_tty, const char *term,
                          const char *no_color, const char *force_color);
/* The same with the real environment, for file descriptor fd. */
bool al__tui_want_color(al_color_when_t when, int fd);

/* Appends `s` with every control character made harmless (RELIABILITY E5):
 * ESC, CR, BS, BEL, DEL and the other C0 controls, the C1 controls
 * (U+0080..U+009F) and bidi overrides (U+202A..U+202E, U+2066..U+2069) are
 * shown as visible escapes (ESC -> "^[", U+009B -> "\u009b") instead of
 * reaching the terminal; invalid UTF-8 becomes U+FFFD. TAB and, unless
 * `one_line`, LF pass; with `one_line` LF and TAB become a space. Returns
 * 0 or AL_ETOOBIG / AL_ENOMEM from the buffer. */
int al__tui_sanitize(al_buf_t *out, const char *s, size_t n, bool one_line);
/* The display width of UTF-8 text without escape sequences (wcwidth per
 * character; invalid bytes count 1). */
size_t al__tui_width(const char *s, size_t n);
/* Display width of text that may hold our own SGR sequences (ESC [ ... m),
 * which count 0. */
size_t al__tui_visible_width(const char *s, size_t n);
/* The length of the longest prefix of s (at most n bytes) whose display
 * width is <= max_width, never splitting a UTF-8 character. */
size_t al__tui_fit(const char *s, size_t n, size_t max_width);

/* SGR sequences used by the front end. */
#define AL_SGR_RESET "\x1b[0m"
#define AL_SGR_BOLD "\x1b[1m"
#define AL_SGR_DIM "\x1b[2m"
#define AL_SGR_ITALIC "\x1b[3m"
#define AL_SGR_UNDERLINE "\x1b[4m"
#define AL_SGR_STRIKE "\x1b[9m"
#define AL_SGR_RED "\x1b[31m"
#define AL_SGR_GREEN "\x1b[32m"
#define AL_SGR_YELLOW "\x1b[33m"
#define AL_SGR_BLUE "\x1b[34m"
#define AL_SGR_MAGENTA "\x1b[35m"
#define AL_SGR_CYAN "\x1b[36m"

/* ---- md_render.c -------------------------------------------------------- */

/* Renders a complete Markdown text (CommonMark + GFM tables,
 * strikethrough, task lists) for a terminal and appends it to out. Model
 * text is sanitized first, so the only escape sequences in the output are
 * our own SGR codes (none without `color`: then the layout - bullets,
 * indents, table columns - is kept and emphasis markers are dropped).
 * The output ends with a newline unless the input is empty. */
int al__md_render(const char *md, size_t len, bool color, al_buf_t *out);
/* The same for a terminal `cols` wide (0: no limit): a table wider than
 * that has its widest columns narrowed and their cells cut with "…", so
 * no row wraps. */
int al__md_render_cols(const char *md, size_t len, bool color, int cols,
                       al_buf_t *out);

/* Streaming: text is printed as it arrives and each Markdown block is
 * re-rendered once it is complete (a blank line outside a code fence, a
 * closing fence, or the end of the reply). While a block is still open its
 * raw text is on screen as a preview; when it closes, the preview is erased
 * (cursor up over the rows it took, erase to end of screen) and the
 * rendered block is written in its place. A preview taller than the screen
 * cannot be erased reliably; that block stays raw. Without colour nothing
 * is buffered or rewritten: the raw Markdown passes through, sanitized
 * (CONVENTIONS 1.10). All output goes to `out` (a buffer the caller writes
 * to the terminal), so the stream is testable without one. */
typedef struct al__md_stream_s {
  bool color;
  int cols;             /* terminal width, > 0 */
  int rows;             /* terminal height, > 0 */
  al_buf_t block;       /* the open block's raw text */
  size_t line_start;    /* offset in block of the current line */
  bool in_fence;
  char fence_ch;
  size_t fence_len;
  /* The preview: rows fully passed (newlines and wraps) and the column of
   * the cursor in the current row, as the terminal wraps. */
  int pv_rows;
  int pv_col;
  bool raw_block;       /* preview too tall: this block stays raw */
  bool close_after;     /* the line being shown closes a fence */
  bool blank_pending;   /* a blank line separates the next block */
  bool wrote_any;       /* something was written for this reply */
  bool at_line_start;   /* the last byte written was a newline */
} al__md_stream_t;

void al__md_stream_init(al__md_stream_t *s, bool color, int cols, int rows);
/* Feeds a text delta; appends what to write to out. */
int al__md_stream_feed(al__md_stream_t *s, const char *p, size_t n,
                       al_buf_t *out);
/* Ends the reply's text: renders the open block and ends the line. */
int al__md_stream_finish(al__md_stream_t *s, al_buf_t *out);
void al__md_stream_free(al__md_stream_t *s);

/* ---- slash.c ------------------------------------------------------------ */

typedef enum {
  AL_SLASH_NONE,      /* not a slash command: send the line to the model */
  AL_SLASH_HELP,
  AL_SLASH_NEW,
  AL_SLASH_SESSIONS,
  AL_SLASH_RESUME,
  AL_SLASH_COMPACT,
  AL_SLASH_USAGE,
  AL_SLASH_TOOLS,
  AL_SLASH_LAST,
  AL_SLASH_MODEL,
  AL_SLASH_TASKS,     /* "/tasks" or "/tasks cancel ID" (issue 23) */
  AL_SLASH_RENAME,    /* "/rename TITLE" (issue 25) */
  AL_SLASH_QUIT,
  AL_SLASH_UNKNOWN,   /* "/x": never sent to the model */
  AL_SLASH_BAD_ARGS   /* a known command with wrong arguments */
} al_slash_t;

typedef struct {
  al_slash_t cmd;
  const char *name;   /* canonical name ("resume"); NULL for NONE */
  char arg[256];      /* the argument, trimmed ("" when none) */
  char error[128];    /* for UNKNOWN and BAD_ARGS: what to print */
} al_slash_cmd_t;

/* Parses one input line. A line starting with "//" is text (an escaped
 * slash: the model gets the line minus one slash), as is any line not
 * starting with '/'. Aliases: /clear = /new, /cost = /usage, /exit = /quit,
 * /? = /help. */
void al__slash_parse(const char *line, al_slash_cmd_t *out);
/* The /help text. */
const char *al__slash_help(void);

/* ---- tui_view.c --------------------------------------------------------- */

/* One running tool call as the live area shows it. */
typedef struct {
  char call_id[96];
  char label[160];      /* "bash(ls -la src)", sanitized, one line */
  uint64_t started_ms;
  bool used;
} al__tui_tool_t;

#define AL_TUI_MAX_LIVE 8

/* Session totals shown on the usage line. */
typedef struct {
  uint64_t input_tokens;
  uint64_t output_tokens;
  uint64_t cache_read;
  uint64_t cache_creation;
} al__tui_usage_t;

/* The chat view: writes the answer (Markdown) to `out`, everything else -
 * thinking, tool lines, the spinner, notices, the usage line - to `err`
 * (CONVENTIONS 7.2: spinners and status on stderr only). Events arrive as
 * the JSON objects of docs/events.md (the daemon's `event` params). With
 * `live` (stderr is a terminal), running tools are shown in a live area at
 * the bottom that al__tui_view_tick() redraws with a spinner and elapsed
 * time; text written above it first erases it. Without `live` a tool gets
 * one line when it starts and one when it ends. */
typedef struct al__tui_view_s {
  FILE *out;
  FILE *err;
  bool color;
  bool live;
  bool show_thinking;
  al__md_stream_t md;
  bool md_open;         /* text of the current reply is streaming */
  int text_index;       /* content block index of that text */
  bool thinking_open;
  bool thinking_at_bol;
  bool out_at_bol;      /* the last byte on the terminal was a newline */
  al__tui_tool_t tools[AL_TUI_MAX_LIVE];
  /* Labels of queued calls, for outcome lines of calls that never
   * started (denied, aborted): a small ring. */
  al__tui_tool_t queued[16];
  unsigned queued_next;
  int live_rows;        /* rows of the live area on screen now */
  unsigned spin;
  al_buf_t last_output; /* the last tool result, for /last */
  char last_label[160];
  al__tui_usage_t run;  /* this run */
  al__tui_usage_t session;
  int cols;
  int rows;
  al_buf_t scratch;
  /* This run's citations (each source once), listed when it ends. */
  json_t *sources;
  /* Between compaction_started and compaction_completed the model streams
   * the summary of the history: it is not the answer, so it is not shown
   * (a "compacting…" line is, then the result). */
  bool compacting;
  /* Sub-agents seen (subagent_started): path -> agent name, for their
   * nested lines and approvals; the oldest entry is reused past 32. */
  struct {
    char path[48];
    char agent[40];
  } kids[32];
  unsigned nkids;
  char nest[128]; /* the prefix of the sub-agent line being drawn */
  int nest_depth;  /* its depth: two spaces each before the line */
} al__tui_view_t;

void al__tui_view_init(al__tui_view_t *v, FILE *out, FILE *err, bool color,
                       bool live, int cols, int rows);
void al__tui_view_free(al__tui_view_t *v);
void al__tui_view_resize(al__tui_view_t *v, int cols, int rows);
/* Shows one event; `now_ms` is the loop's clock (for elapsed times).
 * Returns true when the event ends a run (final, interrupted, error). A
 * sub-agent's event ("path") never does: its tool lines are shown nested
 * (indented by depth, "explore t1 › " before the label, no output lines),
 * its start and outcome as lines, its text not at all (the parent's
 * answer would be cut up by it); its usage counts in the totals. */
bool al__tui_view_event(al__tui_view_t *v, json_t *ev, uint64_t now_ms);
/* "explore t1": the agent name and task path of a sub-agent's events
 * (ev's "path"), for its lines and its approvals ("t1" alone when its
 * subagent_started was not seen). */
void al__tui_view_kid_name(const al__tui_view_t *v, const char *path,
                           char *buf, size_t n);
/* Shows a user message as the prompt did ("> " first line, ". " the
 * others, bold), e.g. from a replayed user_message event, with an
 * optional dim tag after the first line ("(queued)"). */
void al__tui_view_user(al__tui_view_t *v, const char *text, size_t len,
                       const char *tag);
/* Redraws the live area (spinner frame, elapsed times). */
void al__tui_view_tick(al__tui_view_t *v, uint64_t now_ms);
/* Removes the live area and ends any open line, before the caller prints
 * (a notice, the prompt). */
void al__tui_view_settle(al__tui_view_t *v);
/* Prints a notice line on err ("interrupted", errors): dim or red. */
void al__tui_view_notice(al__tui_view_t *v, const char *sgr, const char *fmt,
                         ...) __attribute__((format(printf, 3, 4)));
/* Formats "1.2k in (800 cached) · 512 out · session 3.4k in · 1.1k out"
 * into buf (size n). */
/* "… 1,988 more lines (54,321 bytes)": what is left of a tool's output in
 * s[0..n) after the lines shown. */
void al__tui_more_lines(const char *s, size_t n, char *buf, size_t len);

/* The dollars of /usage: session (and last run) cost_usd as the daemon's
 * session/usage gives them (numbers, or null when the models catalogue
 * has no prices for the model): "$0.0330 this session ($0.0110 last
 * run)" or "cost unknown: ...". */
void al__tui_cost_text(const json_t *session_usd, const json_t *run_usd,
                       char *buf, size_t n);

void al__tui_usage_line(const al__tui_usage_t *run,
                        const al__tui_usage_t *session, char *buf, size_t n);
/* The one-line label of a tool call: name(summary), where the summary is
 * the input's most telling string (command, path, pattern, url, ...) or
 * the compact JSON, cut to max_width columns with an ellipsis. */
void al__tui_tool_label(const char *name, json_t *input, size_t max_width,
                        char *buf, size_t n);

/* ---- paths.c ------------------------------------------------------------ */

/* $XDG_STATE_HOME/agentloop (default ~/.local/state/agentloop) into buf;
 * false when neither is set. */
bool al__tui_state_dir(char *buf, size_t n);
/* The input history file, $STATE/history. */
bool al__tui_history_path(char *buf, size_t n);
/* mkdir -p with mode 0700 for each created component. */
int al__tui_mkdirs(const char *path);
/* The agentloopd to start: next to this executable first, then PATH.
 * false when none is found. */
bool al__tui_find_daemon(char *buf, size_t n);

#endif
