/* `agentloop` with no command: the interactive chat (SPEC §12,
 * CONVENTIONS.md 7.2). Also `agentloop resume [ID]` and `agentloop
 * sessions`.
 *
 * Everything runs on one uv loop: the daemon connection (conn.c), stdin
 * watched by a uv_poll_t and fed to libedit's callback interface one read
 * at a time, SIGINT / SIGWINCH / SIGTERM as uv_signal_t, and a 100 ms timer
 * for the tool spinner. States:
 *
 *   CONNECTING  until the session is created or resumed and subscribed
 *   IDLE        the prompt: libedit owns the line (handler installed)
 *   BUSY        a run streams: the handler is removed, the terminal is in
 *               no-echo, non-canonical mode and typed keys are discarded -
 *               so nothing typed during a run is echoed into the answer,
 *               and nothing typed ahead can answer an approval
 *   APPROVAL    BUSY with an approval_required on screen: y / n / a
 *
 * Ctrl-C: in BUSY or APPROVAL it cancels the run (turn/cancel; the
 * `interrupted` event ends it); at the prompt it clears the line, and a
 * second one within 2 s quits. Ctrl-D on an empty line quits. Quitting
 * leaves the session in the daemon.
 *
 * libedit quirk: rl_callback_read_char() puts the terminal back into raw
 * mode after the line handler returns, so the handler only records the
 * line; it is acted on after rl_callback_read_char() returned. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <editline/readline.h>

#include "agentloop/models.h"
#include "client/chat.h"
#include "client/cli.h"
#include "client/conn.h"
#include "client/names.h"
#include "client/tui.h"
#include "session/session.h"

#define TICK_MS 100
#define QUIT_WINDOW_MS 2000
#define HISTORY_MAX 1000

typedef enum { ST_CONNECTING, ST_IDLE, ST_BUSY, ST_APPROVAL, ST_DONE } state_t;

typedef enum { MODE_CHAT, MODE_SESSIONS } mode_t_;

typedef struct {
  char request[128];
  char label[200];
} approval_t;

#define MAX_APPROVALS 16
#define MAX_QUEUED 16

typedef struct chat_s {
  uv_loop_t *loop;
  al__conn_t conn;
  uv_poll_t in;
  uv_signal_t sigint;
  uv_signal_t sigwinch;
  uv_signal_t sigterm;
  uv_timer_t tick;
  bool handles_open;
  int closing_handles;
  mode_t_ mode;
  state_t state;
  bool tty;
  bool json;               /* sessions --json */
  char here[PATH_MAX];     /* sessions --here: this directory ("" = all) */
  bool show_thinking;      /* --no-thinking hides it */
  json_t *ask_tools;       /* --ask-tool NAME...: calls that ask first */
  /* --model, --provider, --base-url, and what a session takes from this
   * shell (al__chat_settings). */
  const char *opt_model;
  const char *opt_provider;
  const char *opt_base_url;
  json_t *settings;
  bool color;
  al_color_when_t color_when;
  struct termios orig_tio;
  bool have_tio;
  bool handler_installed;
  char *pending_line;      /* set by the libedit handler */
  char in_buf[512];        /* keys read, not yet given to libedit */
  const char *prompt;      /* "> ", or ". " inside a continued message */
  al_buf_t multi;          /* the lines of a message continued with \ */
  size_t in_pos;
  size_t in_len;
  bool pending_eof;
  char history[PATH_MAX];
  bool have_history;
  char session[128];
  char resume_id[256];     /* resume this one, by id or title */
  bool resume_latest;
  int64_t run;
  int64_t replay_until;    /* events with seq < this are replayed */
  uint64_t last_sigint_ms;
  bool cancel_sent;
  bool replay_run_active;  /* the replay ended inside a run */
  approval_t approvals[MAX_APPROVALS];
  int napprovals;
  al__tui_view_t view;
  bool view_ready;
  int exit_code;
  /* Our own sends whose user_message has not come back yet: the prompt
   * already shows those lines, so the event is not drawn again. */
  int own_pending;
  /* Typed while a run streams: the line being typed (not echoed), and the
   * finished lines, sent one per run as each run ends. */
  char typeahead[4096];
  size_t typeahead_len;
  char *queued[MAX_QUEUED];
  int nqueued;
  /* The models catalogue, read before the loop runs: a deprecated model
   * is named when a session starts with it or switches to it. */
  al_models_t *models;
} chat_t;

static chat_t *g_chat; /* the libedit line handler has no user pointer */

static void quit(chat_t *c, int code);
static void approval_prompt(chat_t *c);
static void to_idle(chat_t *c);
static void send_queued(chat_t *c);
static void typeahead_to_prompt(chat_t *c);
static void to_busy(chat_t *c);
static void on_tick(uv_timer_t *t);

static uint64_t now_ms(chat_t *c) { return uv_now(c->loop); }

/* ---- terminal ---------------------------------------------------------- */

static void term_size(int *cols, int *rows) {
  struct winsize ws;

  *cols = 80;
  *rows = 24;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    *cols = ws.ws_col;
    *rows = ws.ws_row;
  }
}

/* BUSY mode: no echo, no line editing, signals still generated by the
 * tty (Ctrl-C stays SIGINT). */
static void term_busy(chat_t *c) {
  struct termios t;

  if (!c->have_tio) {
    return;
  }
  t = c->orig_tio;
  t.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ECHONL);
  t.c_lflag |= ISIG;
  t.c_cc[VMIN] = 1;
  t.c_cc[VTIME] = 0;
  tcsetattr(STDIN_FILENO, TCSANOW, &t);
}

static void term_restore(chat_t *c) {
  if (c->have_tio) {
    tcsetattr(STDIN_FILENO, TCSANOW, &c->orig_tio);
  }
}

/* ---- output helpers ---------------------------------------------------- */

/* Prints a line on stderr while the prompt may be on screen: the prompt
 * line is cleared first and redrawn after. */
static void say(chat_t *c, const char *sgr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(chat_t *c, const char *sgr, const char *fmt, ...) {
  char msg[2048];
  al_buf_t clean;
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* Messages carry daemon text (errors, ids): inert like everything. */
  al_buf_init(&clean, sizeof(msg) * 4);
  al__tui_sanitize(&clean, msg, strlen(msg), false);
  if (c->handler_installed) {
    fputs("\r\x1b[K", stderr);
  }
  if (sgr != NULL && c->color) {
    fputs(sgr, stderr);
  }
  fputs(clean.data != NULL ? clean.data : "", stderr);
  al_buf_free(&clean);
  if (sgr != NULL && c->color) {
    fputs(AL_SGR_RESET, stderr);
  }
  fputc('\n', stderr);
  fflush(stderr);
  if (c->handler_installed) {
    rl_forced_update_display();
  }
}

/* Writes text that came from the daemon (titles, tool descriptions):
 * sanitized, one line. */
static void clean_line(char *dst, size_t n, const char *s) {
  al_buf_t b;

  al_buf_init(&b, 4096);
  if (s == NULL) {
    s = "";
  }
  if (al__tui_sanitize(&b, s, AL_MIN(strlen(s), (size_t)1024), true) == 0 &&
      b.data != NULL) {
    size_t fit = al__tui_fit(b.data, b.len, n > 1 ? n - 1 : 0);

    snprintf(dst, n, "%.*s", (int)fit, b.data);
  } else {
    snprintf(dst, n, "%s", "");
  }
  al_buf_free(&b);
}

static const char *err_message(json_t *error) {
  const char *m = json_string_value(json_object_get(error, "message"));

  return m != NULL ? m : "error";
}

/* ---- sessions ---------------------------------------------------------- */

static void fmt_age(uint64_t ms_then, char *buf, size_t n) {
  struct timespec ts;
  uint64_t now;
  uint64_t d;

  clock_gettime(CLOCK_REALTIME, &ts);
  now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  d = now > ms_then ? (now - ms_then) / 1000 : 0;
  if (d < 60) {
    snprintf(buf, n, "%" PRIu64 "s ago", d);
  } else if (d < 3600) {
    snprintf(buf, n, "%" PRIu64 "m ago", d / 60);
  } else if (d < 86400) {
    snprintf(buf, n, "%" PRIu64 "h ago", d / 3600);
  } else {
    snprintf(buf, n, "%" PRIu64 "d ago", d / 86400);
  }
}

/* sessions --here: drops the sessions of other directories. */
static void sessions_filter(chat_t *c, json_t *result) {
  json_t *list = json_object_get(result, "sessions");
  size_t i = 0;

  while (i < json_array_size(list)) {
    const char *cwd =
        json_string_value(json_object_get(json_array_get(list, i), "cwd"));

    /* A sub-agent's transcript ("parent") is part of its parent's
     * session, not one to list or resume. */
    if (json_object_get(json_array_get(list, i), "parent") != NULL ||
        (c->here[0] != '\0' && (cwd == NULL || strcmp(cwd, c->here) != 0))) {
      json_array_remove(list, i);
    } else {
      i++;
    }
  }
}

/* A directory for a column: "~" for $HOME, cut from the left to n-1 bytes
 * ("…" then the end, which names the project). */
static void fmt_dir(char *buf, size_t n, const char *dir) {
  const char *home = getenv("HOME");
  char tmp[PATH_MAX + 2];
  size_t hl = home != NULL ? strlen(home) : 0;
  size_t l;

  if (dir == NULL) {
    snprintf(buf, n, "?");
    return;
  }
  if (hl > 1 && strncmp(dir, home, hl) == 0 &&
      (dir[hl] == '/' || dir[hl] == '\0')) {
    snprintf(tmp, sizeof(tmp), "~%s", dir + hl);
  } else {
    snprintf(tmp, sizeof(tmp), "%s", dir);
  }
  l = strlen(tmp);
  if (l < n) {
    clean_line(buf, n, tmp);
    return;
  }
  /* Keep the tail; start on a character boundary. */
  {
    const char *t = tmp + l - (n - 4);

    while (((unsigned char)*t & 0xC0) == 0x80) {
      t++;
    }
    snprintf(tmp, sizeof(tmp), "\xe2\x80\xa6%s", t); /* … */
  }
  clean_line(buf, n, tmp);
}

static void print_sessions(chat_t *c, json_t *result) {
  json_t *list = json_object_get(result, "sessions");
  size_t i;
  json_t *s;

  sessions_filter(c, result);
  if (json_array_size(list) == 0) {
    say(c, AL_SGR_DIM, c->here[0] != '\0' ? "no sessions in this directory"
                                          : "no sessions yet");
    return;
  }
  json_array_foreach(list, i, s) {
    const char *id = json_string_value(json_object_get(s, "session"));
    char title[64];
    char idc[64];
    char age[32];
    char dir[40];
    bool current = id != NULL && strcmp(id, c->session) == 0;
    bool running = json_is_true(json_object_get(s, "running"));

    clean_line(title, sizeof(title),
               json_string_value(json_object_get(s, "title")));
    clean_line(idc, sizeof(idc), id);
    fmt_age((uint64_t)json_integer_value(json_object_get(s, "updated_ms")),
            age, sizeof(age));
    fmt_dir(dir, 32, json_string_value(json_object_get(s, "cwd")));
    if (c->mode == MODE_SESSIONS) {
      printf("%-20s %-8s %-31s %s%s\n", idc, age, dir,
             title[0] ? title : "(empty)", running ? "  [running]" : "");
    } else {
      say(c, NULL, "%s %-20s %-8s %-31s %s%s", current ? "*" : " ", idc, age,
          dir, title[0] ? title : "(empty)", running ? "  [running]" : "");
    }
  }
}

/* ---- events ------------------------------------------------------------ */

static void approval_draw(chat_t *c) {
  approval_t *a = &c->approvals[0];

  if (c->color) {
    fprintf(stderr, AL_SGR_BOLD AL_SGR_YELLOW "? " AL_SGR_RESET AL_SGR_BOLD
                    "Allow %s?" AL_SGR_RESET
                    "  [y]es  [n]o  [a]lways this session ",
            a->label);
  } else {
    fprintf(stderr, "? Allow %s?  [y]es  [n]o  [a]lways this session ",
            a->label);
  }
  fflush(stderr);
}

/* Asks the first queued approval. Whatever was typed before the question
 * was on screen must not answer it: the input queue is flushed. */
static void approval_prompt(chat_t *c) {
  al__tui_view_settle(&c->view);
  /* The unfinished typed-ahead line goes with the flushed input: a key
   * typed before the question must neither answer it nor come back. */
  c->typeahead_len = 0;
  if (c->tty) {
    tcflush(STDIN_FILENO, TCIFLUSH);
  }
  approval_draw(c);
}

static void on_approval_sent(al__conn_t *conn, json_t *result, json_t *error,
                             void *data) {
  chat_t *c = conn->data;

  (void)result;
  (void)data;
  if (error != NULL) {
    al__tui_view_notice(&c->view, AL_SGR_DIM, "approval: %s",
                        err_message(error));
  }
}

static void approval_answer(chat_t *c, const char *decision) {
  approval_t a = c->approvals[0];

  memmove(&c->approvals[0], &c->approvals[1],
          sizeof(approval_t) * (size_t)(c->napprovals - 1));
  c->napprovals--;
  fprintf(stderr, "%s\n", strcmp(decision, "allow") == 0   ? "allowed"
                          : strcmp(decision, "deny") == 0 ? "denied"
                                                          : "always allowed");
  fflush(stderr);
  al__conn_call(&c->conn, "approval/respond",
                json_pack("{s:s,s:s,s:s}", "session", c->session, "request",
                          a.request, "decision", decision),
                on_approval_sent, NULL);
  if (c->napprovals > 0) {
    approval_prompt(c);
  } else if (c->state == ST_APPROVAL) {
    c->state = ST_BUSY;
  }
}

/* An approval_required: queued, and asked now when `ask` (live) - a
 * replayed one is asked when the replay is over, if still pending. */
static void approval_required(chat_t *c, json_t *ev, bool ask) {
  approval_t *a;
  const char *req = json_string_value(json_object_get(ev, "request"));

  if (req == NULL || c->napprovals >= MAX_APPROVALS) {
    return;
  }
  if (!c->tty && ask) {
    /* Non-TTY never prompts (CONVENTIONS 7.2). */
    al__conn_call(&c->conn, "approval/respond",
                  json_pack("{s:s,s:s,s:s,s:s}", "session", c->session,
                            "request", req, "decision", "deny", "reason",
                            "no terminal to ask on"),
                  NULL, NULL);
    return;
  }
  a = &c->approvals[c->napprovals++];
  snprintf(a->request, sizeof(a->request), "%s", req);
  al__tui_tool_label(json_string_value(json_object_get(ev, "name")),
                     json_object_get(ev, "input"),
                     (size_t)(c->view.cols > 60 ? c->view.cols - 50 : 20),
                     a->label, sizeof(a->label));
  if (json_is_string(json_object_get(ev, "path"))) {
    /* A sub-agent asks: named, so the answer is given knowing who. */
    char who[96];
    al_buf_t b;

    al__tui_view_kid_name(&c->view,
                          json_string_value(json_object_get(ev, "path")), who,
                          sizeof(who));
    al_buf_init(&b, 1024);
    al_buf_append_str(&b, "[");
    al_buf_append_str(&b, who);
    al_buf_append_str(&b, "] ");
    al_buf_append_str(&b, a->label);
    if (b.data != NULL) {
      /* Cut on a character boundary. */
      size_t k = AL_MIN(b.len, sizeof(a->label) - 1);

      while (k > 0 && k < b.len && ((unsigned char)b.data[k] & 0xC0) == 0x80) {
        k--;
      }
      memcpy(a->label, b.data, k);
      a->label[k] = '\0';
    }
    al_buf_free(&b);
  }
  if (ask && c->state != ST_APPROVAL) {
    c->state = ST_APPROVAL;
    approval_prompt(c);
  }
}

/* A decision was made (approval_response): forget the request. Live
 * decisions made here were already dropped by approval_answer(). */
static void approval_forget(chat_t *c, const char *req) {
  int i;

  for (i = 0; req != NULL && i < c->napprovals; i++) {
    if (strcmp(c->approvals[i].request, req) == 0) {
      memmove(&c->approvals[i], &c->approvals[i + 1],
              sizeof(approval_t) * (size_t)(c->napprovals - i - 1));
      c->napprovals--;
      return;
    }
  }
}

/* A decision came from elsewhere (approval_response or
 * approval/resolved, whichever arrives first; the second finds nothing):
 * the question is withdrawn - on screen with the decision when it was the
 * one being asked. */
static void approval_resolved(chat_t *c, json_t *p) {
  const char *req = json_string_value(json_object_get(p, "request"));
  const char *decision = json_string_value(json_object_get(p, "decision"));
  int i;

  for (i = 0; req != NULL && i < c->napprovals; i++) {
    if (strcmp(c->approvals[i].request, req) == 0) {
      bool shown = i == 0 && c->state == ST_APPROVAL;

      memmove(&c->approvals[i], &c->approvals[i + 1],
              sizeof(approval_t) * (size_t)(c->napprovals - i - 1));
      c->napprovals--;
      if (shown) {
        char d[32];

        clean_line(d, sizeof(d), decision);
        fprintf(stderr, "%s (answered elsewhere)\n", d);
        fflush(stderr);
        if (c->napprovals > 0) {
          approval_prompt(c);
        } else {
          c->state = ST_BUSY;
        }
      }
      return;
    }
  }
}

/* The replay of a resumed session is over: show the prompt, or, when the
 * session is mid-run (another client's, or one that outlived us), follow
 * the run - and ask any approval it waits for. */
static void replay_done(chat_t *c) {
  al__tui_view_settle(&c->view);
  if (c->replay_run_active) {
    to_busy(c);
    if (c->napprovals > 0) {
      c->state = ST_APPROVAL;
      approval_prompt(c);
    }
  } else {
    c->napprovals = 0;
    to_idle(c);
  }
}

/* Shows an event that may come while the prompt is up (a background
 * sub-agent works on after its parent's run): the prompt line is cleared,
 * the lines printed without the live area (it would draw under the
 * prompt), and the prompt redrawn with what was typed. */
static bool view_event_at_prompt(chat_t *c, json_t *ev) {
  bool idle = c->handler_installed;
  bool live = c->view.live;
  bool ended;

  if (idle) {
    fputs("\r\x1b[K", stderr);
    c->view.live = false;
  }
  ended = al__tui_view_event(&c->view, ev, now_ms(c));
  if (idle) {
    c->view.live = live;
    fflush(stdout);
    rl_forced_update_display();
  }
  return ended;
}

/* An event of this session or of one of its sub-agents (not the user's
 * line): approvals are asked or settled, the rest drawn. Output while a
 * question is up (parallel tools, more text, a child's lines): the
 * question line is cleared, the event shown, the question redrawn. true
 * when it ended the session's run. */
static bool show_event(chat_t *c, json_t *ev, const char *type, bool replay) {
  bool asking = !replay && c->state == ST_APPROVAL;
  bool ended;

  if (strcmp(type, "approval_required") == 0) {
    approval_required(c, ev, !replay);
    return false;
  }
  if (strcmp(type, "approval_response") == 0) {
    if (replay) {
      approval_forget(c, json_string_value(json_object_get(ev, "request")));
    } else {
      approval_resolved(c, ev);
    }
    return false;
  }
  if (asking) {
    fputs("\r\x1b[K", stderr);
  }
  ended = view_event_at_prompt(c, ev);
  if (asking && !ended && c->state == ST_APPROVAL && c->napprovals > 0) {
    al__tui_view_settle(&c->view);
    approval_draw(c);
  }
  return ended;
}

static void on_event(chat_t *c, json_t *ev) {
  const char *type = json_string_value(json_object_get(ev, "type"));
  const char *session = json_string_value(json_object_get(ev, "session"));
  json_int_t seq = json_integer_value(json_object_get(ev, "seq"));
  bool replay = seq < c->replay_until;
  bool ended;

  if (type == NULL || session == NULL) {
    return;
  }
  if (json_is_string(json_object_get(ev, "path"))) {
    /* A sub-agent's event (its own session id, in this session's
     * stream): its approvals are asked here, the rest shown nested; its
     * run's start and end are not this session's. */
    (void)show_event(c, ev, type, replay);
    if (replay && c->state == ST_CONNECTING && seq + 1 >= c->replay_until) {
      replay_done(c);
    }
    return;
  }
  if (strcmp(session, c->session) != 0) {
    return;
  }
  if (replay && strcmp(type, "run_started") == 0) {
    c->replay_run_active = true;
    c->napprovals = 0;
  }
  if (!replay && strcmp(type, "run_started") == 0 && c->state == ST_IDLE) {
    /* A run started by another client of this session: the empty prompt
     * line goes, the run (its user_message first) is drawn in its place. */
    if (c->handler_installed) {
      fputs("\r\x1b[K", stderr);
    }
    to_busy(c);
  }
  if (strcmp(type, "user_message") == 0) {
    json_t *t = json_object_get(ev, "text");
    size_t tl = json_string_length(t);

    /* Replayed, or typed in another chat of this session: shown. Our own
     * live send: the prompt line already shows it. */
    if (tl > 0 && !replay && c->own_pending > 0) {
      c->own_pending--;
    } else if (tl > 0) {
      al__tui_view_user(&c->view, json_string_value(t), tl, NULL);
    }
  } else {
    ended = show_event(c, ev, type, replay);
    if (ended && replay) {
      c->replay_run_active = false;
    } else if (ended && (c->state == ST_BUSY || c->state == ST_APPROVAL)) {
      c->napprovals = 0;
      if (c->nqueued > 0) {
        /* Straight on to the message typed during the run. */
        c->cancel_sent = false;
        c->last_sigint_ms = 0;
        send_queued(c);
      } else {
        to_idle(c);
        typeahead_to_prompt(c);
      }
    }
  }
  if (replay && c->state == ST_CONNECTING && seq + 1 >= c->replay_until) {
    replay_done(c);
  }
}

static void on_notify(al__conn_t *conn, const char *method, json_t *params) {
  chat_t *c = conn->data;

  if (strcmp(method, "event") == 0) {
    on_event(c, params);
  } else if (strcmp(method, "approval/resolved") == 0) {
    approval_resolved(c, params);
  } else if (strcmp(method, "lagged") == 0) {
    json_int_t resume = json_integer_value(json_object_get(params, "resume_seq"));

    al__tui_view_notice(&c->view, AL_SGR_YELLOW,
                        "(fell behind; %" PRId64 " events skipped, catching up)",
                        (int64_t)json_integer_value(
                            json_object_get(params, "dropped")));
    al__conn_call(&c->conn, "session/subscribe",
                  json_pack("{s:s,s:I}", "session", c->session, "since_seq",
                            (json_int_t)(resume > 0 ? resume - 1 : 0)),
                  NULL, NULL);
  } else if (strcmp(method, "session/configured") == 0) {
    /* Another client changed this session's settings (issue 22). */
    char model[128];

    clean_line(model, sizeof(model),
               json_string_value(json_object_get(params, "model")));
    say(c, AL_SGR_YELLOW, "another client switched this session to %s",
        model[0] != '\0' ? model : "the default model");
  } else if (strcmp(method, "session/closed") == 0) {
    al__tui_view_settle(&c->view);
    say(c, AL_SGR_RED, "agentloopd shut down; the session is saved");
    quit(c, AL_EXIT_UNAVAILABLE);
  }
}

static void on_lost(al__conn_t *conn, int status) {
  chat_t *c = conn->data;

  if (c->state == ST_DONE) {
    return;
  }
  if (c->view_ready) {
    al__tui_view_settle(&c->view);
  }
  if (c->handler_installed) {
    fputs("\r\x1b[K", stderr);
  }
  fprintf(stderr, "agentloop: lost the connection to agentloopd (%s)\n",
          uv_strerror(status));
  quit(c, AL_EXIT_UNAVAILABLE);
}

/* ---- states ------------------------------------------------------------ */

static void on_line(char *line);

static void install_handler(chat_t *c) {
  if (!c->handler_installed) {
    term_restore(c);
    rl_callback_handler_install(c->prompt, on_line);
    c->handler_installed = true;
  }
}

static void remove_handler(chat_t *c) {
  if (c->handler_installed) {
    rl_callback_handler_remove();
    c->handler_installed = false;
  }
}

static void to_idle(chat_t *c) {
  c->state = ST_IDLE;
  c->cancel_sent = false;
  /* A Ctrl-C that cancelled a run is not the first of a double quit. */
  c->last_sigint_ms = 0;
  uv_timer_stop(&c->tick);
  install_handler(c);
}

static void to_busy(chat_t *c) {
  c->state = ST_BUSY;
  c->cancel_sent = false;
  remove_handler(c);
  term_busy(c);
  uv_timer_start(&c->tick, on_tick, TICK_MS, TICK_MS);
}

static void on_tick(uv_timer_t *t) {
  chat_t *c = t->data;

  if (c->state == ST_BUSY) {
    al__tui_view_tick(&c->view, now_ms(c));
  }
}

/* ---- requests ---------------------------------------------------------- */

static void on_sent(al__conn_t *conn, json_t *result, json_t *error,
                    void *data) {
  chat_t *c = conn->data;

  (void)data;
  if (error != NULL) {
    if (c->own_pending > 0) {
      c->own_pending--;
    }
    al__tui_view_notice(&c->view, AL_SGR_RED, "%s", err_message(error));
    if (c->state == ST_BUSY) {
      to_idle(c);
    }
    return;
  }
  c->run = json_integer_value(json_object_get(result, "run"));
}

static void send_input(chat_t *c, const char *text) {
  to_busy(c);
  c->own_pending++;
  if (al__conn_call(&c->conn, "turn/send",
                    json_pack("{s:s,s:s}", "session", c->session, "input",
                              text),
                    on_sent, NULL) != 0) {
    al__tui_view_notice(&c->view, AL_SGR_RED, "cannot send to agentloopd");
    to_idle(c);
  }
}

/* The next message typed during a run, once the run is over. */
static void send_queued(chat_t *c) {
  char *text;

  if (c->nqueued == 0) {
    return;
  }
  text = c->queued[0];
  memmove(c->queued, c->queued + 1, (size_t)(c->nqueued - 1) * sizeof(char *));
  c->nqueued--;
  /* Shown again where its run begins, so the screen reads in order. */
  al__tui_view_user(&c->view, text, strlen(text), NULL);
  send_input(c, text);
  al_free(text);
}

static void feed_editor(chat_t *c);

/* A line typed during the run without Enter: back at the prompt, as if
 * typed there (libedit gets the keys), so nothing typed is lost. */
static void typeahead_to_prompt(chat_t *c) {
  size_t n = AL_MIN(c->typeahead_len, sizeof(c->in_buf));

  if (n == 0 || c->state != ST_IDLE || !c->handler_installed) {
    c->typeahead_len = 0;
    return;
  }
  memcpy(c->in_buf, c->typeahead, n);
  c->in_pos = 0;
  c->in_len = n;
  c->typeahead_len = 0;
  feed_editor(c);
}

/* A key typed while a run streams (not an approval's answer): kept, not
 * echoed; Enter queues the line as the next message and shows it. */
static void tasks_cmd(chat_t *c, const al_slash_cmd_t *cmd);

static void typeahead_key(chat_t *c, unsigned char ch) {
  if (ch == '\r' || ch == '\n') {
    char *t;
    al_slash_cmd_t cmd;

    if (c->typeahead_len == 0) {
      return;
    }
    /* /tasks acts now: a sub-agent is cancelled while it runs, not after
     * the run it belongs to. */
    c->typeahead[c->typeahead_len] = '\0';
    al__slash_parse(c->typeahead, &cmd);
    if (cmd.cmd == AL_SLASH_TASKS) {
      al__tui_view_user(&c->view, c->typeahead, c->typeahead_len, NULL);
      c->typeahead_len = 0;
      tasks_cmd(c, &cmd);
      return;
    }
    if (c->nqueued == MAX_QUEUED) {
      al__tui_view_notice(&c->view, AL_SGR_YELLOW,
                          "(%d messages are queued already; this one is "
                          "dropped)",
                          MAX_QUEUED);
      c->typeahead_len = 0;
      return;
    }
    t = al_strndup(c->typeahead, c->typeahead_len);
    c->typeahead_len = 0;
    if (t == NULL) {
      return;
    }
    c->queued[c->nqueued++] = t;
    al__tui_view_user(&c->view, t, strlen(t),
                      "(queued: sent when this run ends)");
    return;
  }
  if (ch == 0x7f || ch == 0x08) {
    /* One character back (UTF-8 continuation bytes with it). */
    while (c->typeahead_len > 0 &&
           ((unsigned char)c->typeahead[--c->typeahead_len] & 0xC0) == 0x80) {
    }
    return;
  }
  if (ch == 0x15) { /* Ctrl-U */
    c->typeahead_len = 0;
    return;
  }
  if (ch < 0x20 || c->typeahead_len + 1 >= sizeof(c->typeahead)) {
    return; /* other control keys and escape sequences' ESC */
  }
  c->typeahead[c->typeahead_len++] = (char)ch;
}

static void on_subscribed(al__conn_t *conn, json_t *result, json_t *error,
                          void *data) {
  chat_t *c = conn->data;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "subscribe: %s", err_message(error));
    quit(c, 1);
    return;
  }
  {
    bool wanted = c->replay_until == INT64_MAX;
    json_int_t next = json_integer_value(json_object_get(result, "next_seq"));
    json_t *from = json_object_get(result, "replay_from");

    /* The daemon drops an idle session's replay memory: say why the
     * earlier turns are not redrawn (the model still has them). */
    if (wanted && next > 1 &&
        (!json_is_integer(from) || json_integer_value(from) > 1)) {
      say(c, AL_SGR_DIM, "(earlier events are no longer in the daemon's "
                         "memory; the conversation goes on from its "
                         "history)");
    }
    c->replay_until = next;
  }
  c->replay_run_active = false;
  /* With a replay, the prompt comes back after its last event. */
  if (c->state == ST_CONNECTING &&
      (!json_is_integer(json_object_get(result, "replay_from")) ||
       json_integer_value(json_object_get(result, "replay_from")) >=
           c->replay_until)) {
    to_idle(c);
  }
}

static void subscribe(chat_t *c, bool replay) {
  json_t *p = json_pack("{s:s}", "session", c->session);

  if (replay) {
    json_object_set_new(p, "since_seq", json_integer(0));
  }
  c->replay_until = replay ? INT64_MAX : 0;
  al__conn_call(&c->conn, "session/subscribe", p, on_subscribed, NULL);
}

static void usage_from_json(al__tui_usage_t *u, json_t *o) {
  u->input_tokens =
      (uint64_t)json_integer_value(json_object_get(o, "input_tokens"));
  u->output_tokens =
      (uint64_t)json_integer_value(json_object_get(o, "output_tokens"));
  u->cache_read = (uint64_t)json_integer_value(
      json_object_get(o, "cache_read_input_tokens"));
  u->cache_creation = (uint64_t)json_integer_value(
      json_object_get(o, "cache_creation_input_tokens"));
}

/* A session to talk to: the result of create or resume. */
/* From the catalogue's end_of_life: a warning the user sees at start. */
static void warn_deprecated(chat_t *c, const char *model) {
  al_model_info_t mi;
  char why[512];

  if (c->models == NULL || model == NULL) {
    return;
  }
  al_models_lookup(c->models, model, NULL, &mi);
  if (al_model_deprecation(&mi, model, why, sizeof(why))) {
    say(c, AL_SGR_YELLOW, "warning: %s", why);
  }
}

static void use_session(chat_t *c, json_t *result, bool resumed) {
  const char *id = json_string_value(json_object_get(result, "session"));
  char idc[128];
  char model[128];
  char cwd[256];

  if (id == NULL) {
    say(c, AL_SGR_RED, "the daemon answered without a session id");
    quit(c, 1);
    return;
  }
  if (c->session[0] != '\0' && strcmp(c->session, id) != 0) {
    al__conn_call(&c->conn, "session/unsubscribe",
                  json_pack("{s:s}", "session", c->session), NULL, NULL);
  }
  snprintf(c->session, sizeof(c->session), "%s", id);
  memset(&c->view.session, 0, sizeof(c->view.session));
  clean_line(idc, sizeof(idc), id);
  clean_line(model, sizeof(model),
             json_string_value(json_object_get(result, "model")));
  clean_line(cwd, sizeof(cwd),
             json_string_value(json_object_get(result, "cwd")));
  if (resumed) {
    if (c->ask_tools != NULL) {
      /* session/resume takes no ask_tools: the session keeps its own. */
      say(c, AL_SGR_YELLOW, "--ask-tool applies to new sessions only");
    }
    /* The replay's usage events add up the session's totals again. */
    say(c, AL_SGR_DIM, "resumed session %s (%s%s%" PRId64 " messages) in %s",
        idc, model, model[0] ? ", " : "",
        (int64_t)json_integer_value(json_object_get(result, "messages")),
        cwd);
  } else {
    say(c, AL_SGR_DIM, "session %s%s%s%s in %s · /help for commands", idc,
        model[0] ? " (" : "", model, model[0] ? ")" : "", cwd);
  }
  warn_deprecated(c, json_string_value(json_object_get(result, "model")));
  subscribe(c, resumed);
}

/* create or resume failed: at start-up that ends the chat; from /new or
 * /resume the current session goes on. */
static void session_failed(chat_t *c) {
  if (c->session[0] == '\0') {
    quit(c, 1);
  } else {
    to_idle(c);
  }
}

static void on_created(al__conn_t *conn, json_t *result, json_t *error,
                       void *data) {
  chat_t *c = conn->data;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "cannot create a session: %s", err_message(error));
    session_failed(c);
    return;
  }
  use_session(c, result, false);
}

static void on_resumed(al__conn_t *conn, json_t *result, json_t *error,
                       void *data) {
  chat_t *c = conn->data;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "cannot resume: %s", err_message(error));
    session_failed(c);
    return;
  }
  use_session(c, result, true);
}

static void create_session(chat_t *c) {
  char cwd[PATH_MAX];
  json_t *p = json_object();

  if (getcwd(cwd, sizeof(cwd)) != NULL) {
    json_object_set_new(p, "cwd", json_string(cwd));
  }
  if (c->settings != NULL) {
    json_object_update(p, c->settings);
  }
  if (c->ask_tools != NULL) {
    /* --ask-tool adds to the configured ask rules. */
    json_t *ask = json_deep_copy(json_object_get(p, "ask_tools"));

    if (!json_is_array(ask)) {
      json_decref(ask);
      ask = json_array();
    }
    json_array_extend(ask, c->ask_tools);
    json_object_set_new(p, "ask_tools", ask);
  }
  al__conn_call(&c->conn, "session/create", p, on_created, NULL);
}

static void resume_session(chat_t *c, const char *id) {
  json_t *p = json_pack("{s:s}", "session", id);

  /* This shell's provider, model, URL and key; the session keeps its own
   * system prompt. */
  if (c->settings != NULL && p != NULL) {
    json_object_update(p, c->settings);
    /* The session keeps its own prompt and rules. */
    json_object_del(p, "system");
    json_object_del(p, "allow_tools");
    json_object_del(p, "deny_tools");
    json_object_del(p, "ask_tools");
    json_object_del(p, "sandbox");
    json_object_del(p, "max_tokens");
    json_object_del(p, "max_turns");
    json_object_del(p, "timeouts");
    json_object_del(p, "paths");
    json_object_del(p, "mcp_config");
    json_object_del(p, "hooks_config");
    /* The shell's model, provider and URL only fill in what the session
     * lacks; --model, --provider or --base-url ask to change them (and
     * the chats attached to it are told: session/configured). */
    if (c->opt_model != NULL || c->opt_provider != NULL ||
        c->opt_base_url != NULL) {
      json_object_set_new(p, "configure", json_true());
    }
  }
  al__conn_call(&c->conn, "session/resume", p, on_resumed, NULL);
}

static void on_configured(al__conn_t *conn, json_t *result, json_t *error,
                          void *data) {
  chat_t *c = conn->data;
  char model[128];

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "/model: %s", err_message(error));
    return;
  }
  clean_line(model, sizeof(model),
             json_string_value(json_object_get(result, "model")));
  say(c, AL_SGR_DIM, "model %s from the next turn on", model);
  warn_deprecated(c, json_string_value(json_object_get(result, "model")));
}

static void set_model(chat_t *c, const char *model) {
  if (c->settings != NULL) {
    json_object_set_new(c->settings, "model", json_string(model));
  }
  al__conn_call(&c->conn, "session/configure",
                json_pack("{s:s, s:s}", "session", c->session, "model",
                          model),
                on_configured, NULL);
}

/* `resume NAME`, `/resume NAME`: an id, or a title session/rename gave
 * (two sessions with that title: neither is guessed). An id the listing
 * does not know yet (a headless run's transcript written since the
 * daemon started) is still tried: the daemon finds it by its file. */
static void on_list_for_name(al__conn_t *conn, json_t *result, json_t *error,
                             void *data) {
  chat_t *c = conn->data;
  char id[128];
  char why[1024];
  al_pick_t pick;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "sessions: %s", err_message(error));
    quit(c, 1);
    return;
  }
  pick = al__session_pick(json_object_get(result, "sessions"), c->resume_id,
                          id, sizeof(id), why, sizeof(why));
  if (pick == AL_PICK_FOUND) {
    resume_session(c, id);
  } else if (pick == AL_PICK_NONE && al__session_id_valid(c->resume_id)) {
    resume_session(c, c->resume_id);
  } else {
    say(c, AL_SGR_RED, "%s", why);
    if (c->session[0] == '\0') {
      quit(c, 1);
    } else {
      to_idle(c);
    }
  }
}

static void resume_named(chat_t *c, const char *name) {
  if (name != c->resume_id) {
    snprintf(c->resume_id, sizeof(c->resume_id), "%s", name);
  }
  al__conn_call(&c->conn, "session/list", NULL, on_list_for_name, NULL);
}

static void on_renamed(al__conn_t *conn, json_t *result, json_t *error,
                       void *data) {
  chat_t *c = conn->data;
  char t[256];

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "rename: %s", err_message(error));
    return;
  }
  clean_line(t, sizeof(t), json_string_value(json_object_get(result, "title")));
  say(c, AL_SGR_DIM, "session titled \"%s\"", t);
}

/* The newest session other than the current one. */
static void on_list_for_resume(al__conn_t *conn, json_t *result,
                               json_t *error, void *data) {
  chat_t *c = conn->data;
  json_t *list = json_object_get(result, "sessions");
  size_t i;
  json_t *s;

  (void)data;
  if (error == NULL) {
    json_array_foreach(list, i, s) {
      const char *id = json_string_value(json_object_get(s, "session"));

      if (id != NULL && strcmp(id, c->session) != 0 &&
          json_object_get(s, "parent") == NULL) {
        resume_session(c, id);
        return;
      }
    }
  }
  say(c, AL_SGR_DIM, "no other session to resume; starting a new one");
  create_session(c);
}

static void on_list(al__conn_t *conn, json_t *result, json_t *error,
                    void *data) {
  chat_t *c = conn->data;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "sessions: %s", err_message(error));
  } else if (c->mode == MODE_SESSIONS && c->json) {
    char *s;

    sessions_filter(c, result);
    s = json_dumps(result, JSON_COMPACT);

    if (s != NULL) {
      puts(s);
      al_free(s);
    }
  } else {
    print_sessions(c, result);
  }
  if (c->mode == MODE_SESSIONS) {
    quit(c, error != NULL ? 1 : 0);
  }
}

static void on_usage(al__conn_t *conn, json_t *result, json_t *error,
                     void *data) {
  chat_t *c = conn->data;
  json_t *s = json_object_get(result, "session");
  al__tui_usage_t u;
  al__tui_usage_t last;
  char line[256];
  char cost[160];

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "usage: %s", err_message(error));
    return;
  }
  usage_from_json(&u, s);
  usage_from_json(&last, json_object_get(result, "last_run"));
  al__tui_usage_line(&last, &u, line, sizeof(line));
  al__tui_cost_text(json_object_get(s, "cost_usd"),
                    json_object_get(json_object_get(result, "last_run"),
                                    "cost_usd"),
                    cost, sizeof(cost));
  say(c, NULL, "last run: %s · %" PRId64 " run%s · %s", line,
      (int64_t)json_integer_value(json_object_get(s, "runs")),
      json_integer_value(json_object_get(s, "runs")) == 1 ? "" : "s", cost);
}

/* /tasks: one line per sub-agent of the session. */
static void on_tasks(al__conn_t *conn, json_t *result, json_t *error,
                     void *data) {
  chat_t *c = conn->data;
  json_t *tasks = json_object_get(result, "tasks");
  size_t i;
  json_t *t;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "tasks: %s", err_message(error));
    return;
  }
  if (json_array_size(tasks) == 0) {
    say(c, AL_SGR_DIM, "no sub-agents in this session");
    return;
  }
  json_array_foreach(tasks, i, t) {
    char id[32], agent[48], state[16], desc[256];
    json_t *u = json_object_get(t, "usage");

    clean_line(id, sizeof(id), json_string_value(json_object_get(t, "id")));
    clean_line(agent, sizeof(agent),
               json_string_value(json_object_get(t, "agent")));
    clean_line(state, sizeof(state),
               json_string_value(json_object_get(t, "state")));
    clean_line(desc, (size_t)AL_MAX(20, AL_MIN(c->view.cols - 50, 255)),
               json_string_value(json_object_get(t, "description")));
    say(c, NULL, "  %-5s %-10s %-10s %-40s %" PRId64 " in · %" PRId64
                 " out%s",
        id, agent, state, desc,
        (int64_t)json_integer_value(json_object_get(u, "input_tokens")),
        (int64_t)json_integer_value(json_object_get(u, "output_tokens")),
        json_is_true(json_object_get(t, "background")) ? "  (background)"
                                                       : "");
  }
}

static void on_task_cancelled(al__conn_t *conn, json_t *result,
                              json_t *error, void *data) {
  chat_t *c = conn->data;

  (void)result;
  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "tasks cancel: %s", err_message(error));
  }
  /* Done: its subagent_completed ("cancelled") says so in the stream. */
}

/* /tasks or /tasks cancel ID; at the prompt and during a run alike (a
 * sub-agent runs inside a run, a background one after it). */
static void tasks_cmd(chat_t *c, const al_slash_cmd_t *cmd) {
  if (cmd->arg[0] == '\0') {
    al__conn_call(&c->conn, "task/list",
                  json_pack("{s:s}", "session", c->session), on_tasks, NULL);
    return;
  }
  al__conn_call(&c->conn, "task/cancel",
                json_pack("{s:s, s:s}", "session", c->session, "task",
                          cmd->arg + 7 + strspn(cmd->arg + 7, " \t")),
                on_task_cancelled, NULL);
}

static void on_tools(al__conn_t *conn, json_t *result, json_t *error,
                     void *data) {
  chat_t *c = conn->data;
  json_t *tools = json_object_get(result, "tools");
  json_t *errors = json_object_get(result, "errors");
  size_t i;
  json_t *t;

  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_RED, "tools: %s", err_message(error));
    return;
  }
  json_array_foreach(tools, i, t) {
    char name[64];
    char desc[256];
    const char *d = json_string_value(json_object_get(t, "description"));
    size_t first = d != NULL ? strcspn(d, "\n") : 0;
    char firstline[256];

    snprintf(firstline, sizeof(firstline), "%.*s", (int)AL_MIN(first, 255u),
             d != NULL ? d : "");
    clean_line(name, sizeof(name),
               json_string_value(json_object_get(t, "name")));
    clean_line(desc, (size_t)AL_MAX(20, c->view.cols - 20), firstline);
    say(c, NULL, "  %-16s %s", name, desc);
  }
  json_array_foreach(errors, i, t) {
    char line[512];

    clean_line(line, sizeof(line),
               json_is_string(t) ? json_string_value(t)
                                 : json_string_value(json_object_get(t, "message")));
    say(c, AL_SGR_RED, "  error: %s", line);
  }
  /* MCP servers in every state: one still starting has no tools above
   * yet, but its calls wait for it (docs/mcp.md). */
  json_array_foreach(json_object_get(result, "mcp_servers"), i, t) {
    const char *st = json_string_value(json_object_get(t, "state"));
    al_buf_t b;
    char line[512];

    al_buf_init(&b, 4096);
    al__cli_mcp_line(t, &b);
    clean_line(line, sizeof(line), b.data != NULL ? b.data : "");
    al_buf_free(&b);
    if (i == 0) {
      say(c, NULL, "MCP servers:");
    }
    say(c, st != NULL && strcmp(st, "ready") == 0 ? NULL : AL_SGR_YELLOW,
        "  %s", line);
    if (json_is_string(json_object_get(t, "error"))) {
      clean_line(line, sizeof(line),
                 json_string_value(json_object_get(t, "error")));
      say(c, AL_SGR_RED, "    error: %s", line);
    }
  }
}

/* /last: the whole result of the last tool call, inert. */
static void show_last(chat_t *c) {
  al_buf_t *o = &c->view.last_output;

  if (o->len == 0) {
    say(c, AL_SGR_DIM, "no tool output yet");
    return;
  }
  say(c, AL_SGR_DIM, "%s:", c->view.last_label);
  if (c->handler_installed) {
    fputs("\r\x1b[K", stderr);
  }
  al_buf_reset(&c->view.scratch);
  al__tui_sanitize(&c->view.scratch, o->data, o->len, false);
  fwrite(c->view.scratch.data, 1, c->view.scratch.len, stderr);
  if (o->data[o->len - 1] != '\n') {
    fputc('\n', stderr);
  }
  fflush(stderr);
  if (c->handler_installed) {
    rl_forced_update_display();
  }
}

static void on_compacted(al__conn_t *conn, json_t *result, json_t *error,
                         void *data) {
  chat_t *c = conn->data;

  (void)result;
  (void)data;
  if (error != NULL) {
    say(c, AL_SGR_YELLOW, "compact: %s", err_message(error));
  } else {
    say(c, AL_SGR_DIM,
        json_is_true(json_object_get(result, "deferred"))
            ? "compaction queued: it runs before the next request of this run"
            : "compacting the history...");
  }
}

/* ---- input ------------------------------------------------------------- */

static void save_history(chat_t *c) {
  if (c->have_history) {
    write_history(c->history);
    chmod(c->history, 0600);
  }
}

/* A line ending in a backslash continues on the next one (CONVENTIONS
 * 7.2); the parts are joined with newlines and sent as one message. */
static bool continue_line(chat_t *c, char *line, size_t n) {
  if (n > 0 && line[n - 1] == '\\') {
    line[n - 1] = '\0';
    if (al_buf_append_str(&c->multi, line) != 0 ||
        al_buf_append_str(&c->multi, "\n") != 0) {
      say(c, AL_SGR_RED, "message too long");
      al_buf_reset(&c->multi);
      return true;
    }
    add_history(line);
    c->prompt = ". ";
    return true;
  }
  return false;
}

static void handle_line(chat_t *c, char *line) {
  al_slash_cmd_t cmd;
  size_t n = strlen(line);
  const char *start;

  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
    line[--n] = '\0';
  }
  if (continue_line(c, line, n)) {
    return;
  }
  c->prompt = "> ";
  if (c->multi.len > 0) {
    al_buf_append_str(&c->multi, line);
    add_history(line);
    save_history(c);
    send_input(c, c->multi.data);
    al_buf_reset(&c->multi);
    return;
  }
  if (line[strspn(line, " \t")] == '\0') {
    return;
  }
  add_history(line);
  save_history(c);
  al__slash_parse(line, &cmd);
  switch (cmd.cmd) {
  case AL_SLASH_NONE:
    /* "//x" is the escaped "/x". */
    start = line + strspn(line, " \t");
    send_input(c, start[0] == '/' ? start + 1 : line);
    break;
  case AL_SLASH_HELP:
    say(c, NULL, "%s", al__slash_help());
    break;
  case AL_SLASH_NEW:
    c->state = ST_CONNECTING; /* the prompt returns once subscribed */
    create_session(c);
    break;
  case AL_SLASH_SESSIONS:
    al__conn_call(&c->conn, "session/list", NULL, on_list, NULL);
    break;
  case AL_SLASH_RESUME:
    c->state = ST_CONNECTING;
    if (cmd.arg[0] != '\0') {
      resume_named(c, cmd.arg);
    } else {
      al__conn_call(&c->conn, "session/list", NULL, on_list_for_resume, NULL);
    }
    break;
  case AL_SLASH_RENAME:
    al__conn_call(&c->conn, "session/rename",
                  json_pack("{s:s, s:s}", "session", c->session, "title",
                            cmd.arg),
                  on_renamed, NULL);
    break;
  case AL_SLASH_COMPACT:
    al__conn_call(&c->conn, "session/compact",
                  json_pack("{s:s, s:s?}", "session", c->session,
                            "instructions",
                            cmd.arg[0] != '\0' ? cmd.arg : NULL),
                  on_compacted, NULL);
    break;
  case AL_SLASH_USAGE:
    al__conn_call(&c->conn, "session/usage",
                  json_pack("{s:s}", "session", c->session), on_usage, NULL);
    break;
  case AL_SLASH_TOOLS:
    al__conn_call(&c->conn, "tools/list",
                  json_pack("{s:s}", "session", c->session), on_tools, NULL);
    break;
  case AL_SLASH_LAST:
    show_last(c);
    break;
  case AL_SLASH_TASKS:
    tasks_cmd(c, &cmd);
    break;
  case AL_SLASH_MODEL:
    set_model(c, cmd.arg);
    break;
  case AL_SLASH_QUIT:
    quit(c, 0);
    break;
  case AL_SLASH_UNKNOWN:
  case AL_SLASH_BAD_ARGS:
    say(c, AL_SGR_YELLOW, "%s", cmd.error);
    break;
  }
}

static void on_line(char *line) {
  chat_t *c = g_chat;

  if (line == NULL) {
    c->pending_eof = true;
    return;
  }
  free(c->pending_line);
  c->pending_line = line;
}

/* libedit reads its keys through this (rl_getc_function): from the bytes
 * on_stdin() already read, so the loop decides when libedit runs and the
 * chat can feed it keys of its own (Ctrl-C's line clearing). Only when a
 * key sequence was split across reads does it wait for the rest. */
static int getc_fn(FILE *f) {
  chat_t *c = g_chat;
  unsigned char ch;

  (void)f;
  if (c->in_pos < c->in_len) {
    return (unsigned char)c->in_buf[c->in_pos++];
  }
  if (read(STDIN_FILENO, &ch, 1) == 1) {
    return ch;
  }
  return EOF;
}

/* Runs libedit over the buffered keys while the prompt is up; a completed
 * line is handled once libedit returned. */
static void feed_editor(chat_t *c) {
  while (c->in_pos < c->in_len && c->state == ST_IDLE &&
         c->handler_installed) {
    rl_callback_read_char();
    if (c->pending_eof) {
      c->pending_eof = false;
      fputc('\n', stderr);
      quit(c, 0);
      return;
    }
    if (c->pending_line != NULL) {
      char *line = c->pending_line;

      c->pending_line = NULL;
      remove_handler(c);
      handle_line(c, line);
      free(line);
      if (c->state == ST_IDLE) {
        install_handler(c);
      }
    }
  }
  /* Keys typed ahead of a run are not kept for after it. */
  if (c->state != ST_IDLE) {
    c->in_pos = c->in_len = 0;
  }
}

static void on_stdin(uv_poll_t *h, int status, int events) {
  chat_t *c = h->data;
  char buf[256];
  ssize_t n;

  (void)events;
  if (status < 0) {
    quit(c, 0);
    return;
  }
  if (c->state == ST_IDLE && c->handler_installed) {
    n = read(STDIN_FILENO, c->in_buf, sizeof(c->in_buf));
    if (n <= 0) {
      quit(c, 0);
      return;
    }
    c->in_pos = 0;
    c->in_len = (size_t)n;
    feed_editor(c);
    return;
  }
  /* BUSY: keys are typed ahead into the next message; in an approval,
   * the last key is its answer. */
  n = read(STDIN_FILENO, buf, sizeof(buf));
  if (n == 0) {
    quit(c, 0);
    return;
  }
  if (n < 0) {
    return;
  }
  if (c->state == ST_BUSY) {
    ssize_t i;

    for (i = 0; i < n; i++) {
      typeahead_key(c, (unsigned char)buf[i]);
    }
    return;
  }
  if (c->state != ST_APPROVAL || c->napprovals == 0) {
    return;
  }
  switch (buf[n - 1]) {
  case 'y':
  case 'Y':
    approval_answer(c, "allow");
    break;
  case 'n':
  case 'N':
    approval_answer(c, "deny");
    break;
  case 'a':
  case 'A':
    approval_answer(c, "always");
    break;
  default:
    break;
  }
}

/* ---- signals ----------------------------------------------------------- */

static void on_cancelled(al__conn_t *conn, json_t *result, json_t *error,
                         void *data) {
  chat_t *c = conn->data;

  (void)data;
  /* No run was active (it ended as we asked): back to the prompt. */
  if (error == NULL && !json_is_true(json_object_get(result, "cancelled")) &&
      (c->state == ST_BUSY || c->state == ST_APPROVAL)) {
    al__tui_view_settle(&c->view);
    to_idle(c);
  }
}

static void on_sigint(uv_signal_t *h, int signum) {
  chat_t *c = h->data;
  uint64_t now = now_ms(c);
  bool twice = c->last_sigint_ms != 0 &&
               now - c->last_sigint_ms < QUIT_WINDOW_MS;

  (void)signum;
  c->last_sigint_ms = now;
  switch (c->state) {
  case ST_BUSY:
  case ST_APPROVAL:
    if (c->cancel_sent && twice) {
      quit(c, 130);
      return;
    }
    if (c->state == ST_APPROVAL) {
      fputc('\n', stderr);
      c->state = ST_BUSY;
      c->napprovals = 0;
    }
    c->cancel_sent = true;
    al__conn_call(&c->conn, "turn/cancel",
                  json_pack("{s:s}", "session", c->session), on_cancelled,
                  NULL);
    break;
  case ST_IDLE:
    if (twice) {
      fputc('\n', stderr);
      quit(c, 0);
      return;
    }
    /* Clear the line; the prompt comes back empty. libedit's
     * rl_replace_line() ignores an empty text and rl_end is stale in
     * callback mode, so the line is killed as a person would: Ctrl-E,
     * Ctrl-U, fed to libedit as keys. */
    al_buf_reset(&c->multi);
    if (strcmp(c->prompt, "> ") != 0) {
      c->prompt = "> ";
      rl_set_prompt(c->prompt);
    }
    c->in_buf[0] = 0x05;
    c->in_buf[1] = 0x15;
    c->in_pos = 0;
    c->in_len = 2;
    feed_editor(c);
    fputs("^C\n", stderr);
    say(c, AL_SGR_DIM, "(Ctrl-C again to quit)");
    break;
  default:
    quit(c, 130);
    break;
  }
}

static void on_sigterm(uv_signal_t *h, int signum) {
  (void)signum;
  quit(h->data, 143);
}

static void on_sigwinch(uv_signal_t *h, int signum) {
  chat_t *c = h->data;
  int cols;
  int rows;

  (void)signum;
  term_size(&cols, &rows);
  al__tui_view_resize(&c->view, cols, rows);
  if (c->handler_installed) {
    rl_resize_terminal();
  }
}

/* ---- start and stop ---------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h) {
  (void)h;
}

static void on_conn_closed(al__conn_t *conn) { (void)conn; }

static void quit(chat_t *c, int code) {
  if (c->state == ST_DONE) {
    return;
  }
  c->state = ST_DONE;
  c->exit_code = code;
  if (c->view_ready) {
    al__tui_view_settle(&c->view);
  }
  remove_handler(c);
  term_restore(c);
  save_history(c);
  if (c->handles_open) {
    c->handles_open = false;
    if (c->tty) {
      uv_poll_stop(&c->in);
      uv_close((uv_handle_t *)&c->in, on_handle_closed);
    }
    uv_close((uv_handle_t *)&c->sigint, on_handle_closed);
    uv_close((uv_handle_t *)&c->sigwinch, on_handle_closed);
    uv_close((uv_handle_t *)&c->sigterm, on_handle_closed);
    uv_close((uv_handle_t *)&c->tick, on_handle_closed);
  }
  al__conn_close(&c->conn, on_conn_closed);
}

static void on_ready(al__conn_t *conn, int status) {
  chat_t *c = conn->data;

  if (status != 0) {
    fprintf(stderr,
            "agentloop: cannot reach agentloopd at %s: %s\n"
            "  start it with `agentloopd` (its log: "
            "$XDG_STATE_HOME/agentloop/agentloopd.log), or run "
            "`agentloop doctor`\n",
            conn->path, conn->why[0] ? conn->why : uv_strerror(status));
    quit(c, AL_EXIT_UNAVAILABLE);
    return;
  }
  if (c->mode == MODE_SESSIONS) {
    al__conn_call(&c->conn, "session/list", NULL, on_list, NULL);
  } else if (c->resume_id[0] != '\0') {
    resume_named(c, c->resume_id);
  } else if (c->resume_latest) {
    al__conn_call(&c->conn, "session/list", NULL, on_list_for_resume, NULL);
  } else {
    create_session(c);
  }
}

static void history_init(chat_t *c) {
  char dir[PATH_MAX];

  using_history();
  stifle_history(HISTORY_MAX);
  c->have_history = al__tui_history_path(c->history, sizeof(c->history)) &&
                    al__tui_state_dir(dir, sizeof(dir)) &&
                    al__tui_mkdirs(dir) == 0;
  if (c->have_history) {
    read_history(c->history);
  }
}

static int chat_main(chat_t *c) {
  uv_loop_t loop;
  int cols;
  int rows;
  int rc;

  g_chat = c;
  /* A write to a daemon that just died must be an error on the stream,
   * not a SIGPIPE that kills us with the terminal in raw mode. */
  signal(SIGPIPE, SIG_IGN);
  uv_loop_init(&loop);
  c->loop = &loop;
  c->tty = isatty(STDIN_FILENO) && isatty(STDERR_FILENO);
  if (c->mode == MODE_CHAT && !c->tty) {
    fprintf(stderr, "agentloop: the chat needs a terminal; for scripts use "
                    "`agentloop run -p PROMPT`\n");
    uv_loop_close(&loop);
    return 2;
  }
  c->color = al__tui_want_color(c->color_when, STDOUT_FILENO);
  term_size(&cols, &rows);
  al__tui_view_init(&c->view, stdout, stderr, c->color,
                    isatty(STDERR_FILENO), cols, rows);
  c->view.show_thinking = c->show_thinking;
  c->view_ready = true;
  if (c->tty && tcgetattr(STDIN_FILENO, &c->orig_tio) == 0) {
    c->have_tio = true;
  }
  if (c->mode == MODE_CHAT) {
    /* libedit: our signal handling, our history file, stdin/stderr. */
    rl_catch_signals = 0;
    rl_getc_function = getc_fn;
    rl_instream = stdin;
    rl_outstream = stderr;
    history_init(c);
    uv_poll_init(&loop, &c->in, STDIN_FILENO);
    c->in.data = c;
    uv_poll_start(&c->in, UV_READABLE, on_stdin);
  }
  uv_signal_init(&loop, &c->sigint);
  uv_signal_init(&loop, &c->sigwinch);
  uv_signal_init(&loop, &c->sigterm);
  uv_timer_init(&loop, &c->tick);
  c->sigint.data = c->sigwinch.data = c->sigterm.data = c->tick.data = c;
  uv_signal_start(&c->sigint, on_sigint, SIGINT);
  uv_signal_start(&c->sigwinch, on_sigwinch, SIGWINCH);
  uv_signal_start(&c->sigterm, on_sigterm, SIGTERM);
  c->handles_open = true;
  if (c->mode != MODE_CHAT) {
    c->tty = false;
  }
  memset(&c->conn, 0, sizeof(c->conn));
  c->conn.data = c;
  c->conn.notify_cb = on_notify;
  c->conn.lost_cb = on_lost;
  rc = al__conn_open(&c->conn, &loop, true, on_ready);
  if (rc != 0) {
    fprintf(stderr, "agentloop: cannot reach agentloopd: %s\n",
            c->conn.why[0] ? c->conn.why : uv_strerror(rc));
    quit(c, AL_EXIT_UNAVAILABLE);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  free(c->pending_line);
  al_buf_free(&c->multi);
  while (c->nqueued > 0) {
    al_free(c->queued[--c->nqueued]);
  }
  al__tui_view_free(&c->view);
  uv_loop_close(&loop);
  g_chat = NULL;
  return c->exit_code;
}

static void chat_usage(FILE *f) {
  fputs("usage: agentloop [--color auto|always|never] [--no-color] "
        "[--no-thinking]\n"
        "                 [--ask-tool NAME]... [--model NAME]\n"
        "                 [--provider anthropic|openai|openai-responses]\n"
        "                 [--base-url URL]\n"
        "       agentloop resume [ID] [--color ...] [--no-thinking]\n"
        "       agentloop sessions [--json]\n"
        "\n"
        "The chat: talks to agentloopd (started if it is not running) in\n"
        "the current directory. /help inside lists the commands.\n"
        "  --ask-tool NAME   calls of tool NAME wait for your y/n/a in this\n"
        "                    session (admin tools always ask); repeatable\n"
        "  --model, --provider, --base-url\n"
        "                    override the configuration (docs/config.md)\n"
        "                    for the sessions of this chat\n",
        f);
}

static int parse_common(chat_t *c, int argc, char **argv, int first,
                        const char **positional) {
  int i;

  c->color_when = AL_COLOR_AUTO;
  for (i = first; i < argc; i++) {
    if (strcmp(argv[i], "--no-color") == 0) {
      c->color_when = AL_COLOR_NEVER;
    } else if (strncmp(argv[i], "--color=", 8) == 0 ||
               strcmp(argv[i], "--color") == 0) {
      const char *v = argv[i][7] == '=' ? argv[i] + 8
                      : i + 1 < argc    ? argv[++i]
                                        : "";

      if (!al__tui_parse_color(v, &c->color_when)) {
        fprintf(stderr, "agentloop: --color: auto, always or never\n");
        return 2;
      }
    } else if (strcmp(argv[i], "--no-thinking") == 0 &&
               c->mode == MODE_CHAT) {
      c->show_thinking = false;
    } else if (strcmp(argv[i], "--ask-tool") == 0 && c->mode == MODE_CHAT) {
      if (i + 1 >= argc) {
        fprintf(stderr, "agentloop: --ask-tool needs a tool name\n");
        return 2;
      }
      if (c->ask_tools == NULL) {
        c->ask_tools = json_array();
      }
      json_array_append_new(c->ask_tools, json_string(argv[++i]));
    } else if ((strcmp(argv[i], "--model") == 0 ||
                strcmp(argv[i], "--provider") == 0 ||
                strcmp(argv[i], "--base-url") == 0) &&
               c->mode == MODE_CHAT) {
      const char **dst = argv[i][2] == 'm'   ? &c->opt_model
                         : argv[i][2] == 'p' ? &c->opt_provider
                                             : &c->opt_base_url;

      if (i + 1 >= argc) {
        fprintf(stderr, "agentloop: %s needs a value\n", argv[i]);
        return 2;
      }
      *dst = argv[++i];
    } else if (strcmp(argv[i], "--json") == 0 && c->mode == MODE_SESSIONS) {
      c->json = true;
    } else if (strcmp(argv[i], "--here") == 0 && c->mode == MODE_SESSIONS) {
      if (realpath(".", c->here) == NULL) {
        fprintf(stderr, "agentloop: --here: %s\n", strerror(errno));
        return 1;
      }
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      chat_usage(stdout);
      return 0;
    } else if (argv[i][0] != '-' && positional != NULL &&
               *positional == NULL) {
      *positional = argv[i];
    } else {
      fprintf(stderr, "agentloop: unexpected argument '%s'\n", argv[i]);
      chat_usage(stderr);
      return 2;
    }
  }
  return -1;
}

static void chat_setup(chat_t *c) {
  memset(c, 0, sizeof(*c));
  c->prompt = "> ";
  al_buf_init(&c->multi, 1u << 20);
  c->show_thinking = true;
  /* Display widths need a UTF-8 LC_CTYPE; stay in "C" for the rest. */
  if (setlocale(LC_CTYPE, "") == NULL ||
      strstr(setlocale(LC_CTYPE, NULL), "UTF-8") == NULL) {
    setlocale(LC_CTYPE, "C.UTF-8");
  }
}

/* The three commands share the chat's machinery; they differ in mode and
 * in what the positional argument means. */
static int run_command(int argc, char **argv, mode_t_ mode, bool resume) {
  chat_t *c = al_calloc(1, sizeof(*c));
  const char *id = NULL;
  int rc;

  if (c == NULL) {
    return 1;
  }
  chat_setup(c);
  c->mode = mode;
  rc = parse_common(c, argc, argv, 1, resume ? &id : NULL);
  if (rc < 0) {
    if (id != NULL) {
      snprintf(c->resume_id, sizeof(c->resume_id), "%s", id);
    }
    c->resume_latest = resume && id == NULL;
    rc = mode == MODE_CHAT
             ? al__chat_settings(c->opt_provider, c->opt_model,
                                 c->opt_base_url, true, &c->settings)
             : 0;
    if (rc == 0 && mode == MODE_CHAT) {
      /* Blocking read, before the loop; a bad file was reported by the
       * daemon's own load, so the chat goes on without the warning. */
      char *merr = NULL;

      if (al_models_load(&c->models, NULL, &merr) != 0) {
        c->models = NULL;
      }
      al_free(merr);
    }
    if (rc == 0) {
      rc = chat_main(c);
    }
  }
  al_models_free(c->models);
  json_decref(c->settings);
  json_decref(c->ask_tools);
  al_free(c);
  return rc;
}

int al_cli_chat(int argc, char **argv) {
  return run_command(argc, argv, MODE_CHAT, false);
}

int al_cli_resume(int argc, char **argv) {
  return run_command(argc, argv, MODE_CHAT, true);
}

int al_cli_sessions(int argc, char **argv) {
  return run_command(argc, argv, MODE_SESSIONS, false);
}
