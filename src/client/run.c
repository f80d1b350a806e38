/* `agentloop run -p PROMPT`: one headless agent run (CONVENTIONS.md 7.1,
 * 7.5, 7.6).
 *
 * The command is a thin embedder of the public agent API: it resolves the
 * flags and environment into al_agent_options_t, creates one agent with the
 * builtin tools in --cwd, permission mode HEADLESS (never asks; admin tools
 * need --allow-tool), subscribes to its LoopEvents, starts the run and lets
 * the loop drive everything. It prints:
 *
 *   text    the final text on stdout at the end (the demo view, -v, shows
 *           progress and streamed text on stderr)
 *   json    one `result` object at the end
 *   ndjson  every LoopEvent as a line as it happens, then the `result`
 *
 * A run ends with exactly one of final, interrupted or error; on that event
 * the subscriber records the outcome, unsubscribes, closes the signal and
 * timer handles and closes the agent, so uv_run returns once the agent has
 * released its tools and connections. SIGINT / SIGTERM / --timeout cancel
 * the run (al_agent_cancel posts `interrupted` before it returns) and pick
 * the exit code: 130, 143, 124.
 *
 * Blocking I/O happens only before the loop starts (piped stdin, --system
 * FILE, the --tools-dir listing); while the agent runs, only stdout and
 * stderr are written, as any command-line filter does. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "client/cli.h"
#include "client/run_int.h"
#include "common/common.h"
#include "config/config.h"
#include "config/agent_opts.h"
#include "config/agentdefs.h"
#include "events/events.h"
#include "mcp/mcp.h"
#include "tools/clitool.h"

enum {
  EXIT_OK = 0,
  EXIT_FAIL = 1,
  EXIT_USAGE = 2,
  EXIT_MAX_TURNS = 3,
  EXIT_NOT_SAVED = 4, /* the answer came; the transcript is incomplete */
  EXIT_TIMEOUT = 124,
  EXIT_SIGINT = 130,
  EXIT_SIGTERM = 143
};

typedef enum { FMT_TEXT, FMT_JSON, FMT_NDJSON, FMT_STREAM } run_format_t;

/* Piped stdin and --system FILE are capped (the API's own body limit). */
#define INPUT_MAX (32u << 20)
/* One NDJSON line: a tool result can be large, but not unbounded. */
#define LINE_MAX_BYTES (64u << 20)
#define MAX_TOOL_FLAGS 64

typedef struct run_s {
  uv_loop_t loop;
  uv_signal_t sigint;
  uv_signal_t sigterm;
  uv_timer_t timer;
  /* The answer came while background sub-agents still run: the run goes
   * on until they are done (their results start the agent's next run);
   * bg_check looks again once a child's end has been handled. */
  uv_timer_t bg_check;
  bool bg_wait;
  bool handles_open;
  al_agent_t *agent;
  al_sub_t *sub;
  run_format_t format;
  bool verbose;
  al__cli_view_t view;
  al_buf_t line;
  uint64_t timeout_ms;
  double timeout_s;
  /* Why we cancelled (0: we did not): the exit code of `interrupted`. */
  int cause;
  /* The outcome, filled by the terminal event. */
  bool ended;
  bool max_turns;
  al_event_type_t end_type;
  int exit_code;
  char *result;
  char *session;
  al_agent_stats_t stats;
  /* The transcript (NULL: not kept, e.g. no state directory). */
  al__run_session_t *sess;
  al_tx_header_t hdr;
  al__stream_json_t sj; /* FMT_STREAM */
  /* --allow-tool / --deny-tool as given (checked against the tools). */
  const char *const *flag_allow;
  const char *const *flag_deny;
  /* --input-format stream-json: messages from stdin, one run each. */
  bool stream_in;
  al__line_reader_t lr;
  bool printed;     /* the last run's result line is out */
  bool run_active;  /* a run is going (not waiting for stdin) */
  int runs;         /* runs started */
  int line_no;
  /* The run's cost from the catalogue's prices (has_cost: known). */
  bool has_cost;
  double cost_usd;
  uint64_t last_seq; /* of the last event (a late error line follows it) */
} run_t;

static void usage(FILE *f) {
  fputs(
      "usage: agentloop run -p PROMPT [options]\n"
      "\n"
      "Runs the agent once, headless: the model may call the builtin tools\n"
      "(bash, read_file, edit_file, write_file, grep, glob, list_directory,\n"
      "done) in --cwd until it\n"
      "answers. Piped stdin is appended to the prompt after a blank line.\n"
      "\n"
      "  -p, --prompt TEXT         the user message\n"
      "      --output-format F     text (default: the final answer), json\n"
      "                            (one result object), ndjson (every\n"
      "                            event, then the result) or stream-json\n"
      "                            (Claude Code's lines: system, assistant,\n"
      "                            user, result)\n"
      "      --include-partial-messages  stream-json: stream_event lines\n"
      "                            with the deltas too\n"
      "      --input-format F      text (default) or stream-json: user\n"
      "                            messages as JSON lines on stdin\n"
      "                            ({\"type\":\"user\",\"message\":{...}}), one\n"
      "                            run each, in one session, until EOF\n"
      "  -v, --verbose             live log on stderr: turns, streamed text,\n"
      "                            tools, retries (default: off)\n"
      "  -q, --quiet               no live log (the default)\n"
      "      --color WHEN          auto (default), always, never\n"
      "      --no-color            same as --color never\n"
      "\n"
      "model:\n"
      "      --provider NAME       anthropic (default, $AGENTLOOP_PROVIDER)\n"
      "                            or openai\n"
      "      --model NAME          default $AGENTLOOP_MODEL, else the\n"
      "                            provider's default model\n"
      "                            (claude-sonnet-5-5, gpt-4o-mini)\n"
      "      --fallback-model NAME used after repeated overloaded errors\n"
      "      --base-url URL        default $AGENTLOOP_BASE_URL, then\n"
      "                            $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL,\n"
      "                            then the provider's public endpoint\n"
      "      --api-key KEY         default $ANTHROPIC_API_KEY /\n"
      "                            $OPENAI_API_KEY (required only for the\n"
      "                            public endpoints)\n"
      "      --system FILE         system prompt read from FILE\n"
      "      --system-text TEXT    system prompt given inline\n"
      "      --max-tokens N        per reply (default 4096)\n"
      "      --context-window N    the model's window in tokens (default:\n"
      "                            the models catalogue, docs/context.md)\n"
      "      --no-auto-compact     never compact the history on its own\n"
      "      --no-prompt-cache     no Anthropic cache_control breakpoints\n"
      "      --max-messages N      keep at most N messages (oldest dropped)\n"
      "      --micro-min-tokens N  clear old tool outputs when that saves N\n"
      "                            tokens (default 20000; 'off')\n"
      "      --keep-recent N       a compaction keeps the last N tokens\n"
      "                            verbatim (default min(20000, window/4))\n"
      "      --max-turns N         model replies per run (default 20); at\n"
      "                            the limit a summary is the result, exit 3\n"
      "      --max-retries N       retries per request (default 3)\n"
      "      --idle-timeout-ms N   a stream silent this long is a stall\n"
      "                            (retried; default 30000)\n"
      "      --timeout SECS        whole run; on expiry cancel, exit 124\n"
      "      --limit NAME=VALUE    a bound on replies (repeatable):\n"
      "                            reply_bytes (64M), tool_input_bytes (32M),\n"
      "                            header_bytes (64K), header_count (256),\n"
      "                            total_time_ms (1800000), min_rate_bytes\n"
      "                            (128) per min_rate_window_ms (60000);\n"
      "                            and on tools: tool_processes (512),\n"
      "                            tool_memory_bytes, file_scan_bytes (8M),\n"
      "                            file_time_ms (20000);\n"
      "                            none disables one (docs/run.md)\n"
      "\n"
      "sessions (kept in $XDG_STATE_HOME/agentloop/sessions, as the chat's):\n"
      "      --continue            continue the latest session of this\n"
      "                            workspace\n"
      "      --resume ID           continue session ID\n"
      "\n"
      "tools:\n"
      "      --cwd DIR             workspace of the tools (default: .)\n"
      "      --allow-tool NAME     allow an admin tool (repeatable)\n"
      "      --mcp-config FILE     MCP servers ({\"mcpServers\": ...}, the\n"
      "                            .mcp.json shape; docs/mcp.md); a trusted\n"
      "                            project's .mcp.json is read too\n"
      "      --hooks-config FILE   hooks ({\"hooks\": {EVENT: [...]}};\n"
      "                            docs/hooks.md); failing hooks block\n"
      "      --deny-tool NAME      deny a tool: its calls get an error\n"
      "                            result (repeatable; deny wins)\n"
      "      --tools-dir DIR       another tools.d directory of YAML CLI\n"
      "                            tools (repeatable; docs/tools.md). The\n"
      "                            user's $XDG_CONFIG_HOME/agentloop/tools.d\n"
      "                            always loads; the project's tools.d only\n"
      "                            when trusted\n"
      "      --print-system-prompt print the assembled system prompt (base,\n"
      "                            AGENTS.md/CLAUDE.md, configured text,\n"
      "                            --system) and exit; nothing is sent\n"
      "      --trust-project       load the workspace's tools.d (code from\n"
      "                            the repository) for this run\n"
      "      --sandbox MODE        auto (default): bwrap, else degraded,\n"
      "                            else refuse bash and write tools;\n"
      "                            required: bwrap or fail; none: no sandbox\n"
      "\n"
      "exit status: 0 answered, 1 failed, 2 usage or configuration error,\n"
      "3 max turns reached, 124 --timeout, 130 SIGINT, 143 SIGTERM.\n"
      "  -h, --help                this text\n",
      f);
}

static void fail_usage(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void fail_usage(const char *fmt, ...) {
  va_list ap;

  fputs("agentloop: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* ---- input ---------------------------------------------------------------- */

/* Reads all of fd into b (runs before the loop starts: blocking is fine). */
static int read_all(int fd, al_buf_t *b) {
  char tmp[16384];
  ssize_t n;
  int err;

  for (;;) {
    n = read(fd, tmp, sizeof(tmp));
    if (n == 0) {
      return 0;
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return -errno;
    }
    err = al_buf_append(b, tmp, (size_t)n);
    if (err != 0) {
      return err;
    }
  }
}

/* Piped stdin: not a terminal (nothing is read from one) and open. An
 * empty pipe or /dev/null gives nothing. */
static int read_piped_stdin(al_buf_t *b) {
  struct stat st;

  if (isatty(STDIN_FILENO) || fstat(STDIN_FILENO, &st) != 0) {
    return 0;
  }
  return read_all(STDIN_FILENO, b);
}

static int read_file(const char *path, al_buf_t *b) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int err;

  if (fd < 0) {
    return -errno;
  }
  err = read_all(fd, b);
  close(fd);
  return err;
}

/* --tools-dir: a directory that cannot be read is a usage error (the
 * files in it are checked by the loader, which reports each bad one). */
static int check_tools_dir(const char *dir) {
  DIR *d = opendir(dir);

  if (d == NULL) {
    fail_usage("--tools-dir %s: %s", dir, strerror(errno));
    return EXIT_USAGE;
  }
  closedir(d);
  return EXIT_OK;
}

/* ---- configuration --------------------------------------------------------- */

static const char *env_get(const char *name) {
  /* Sees the secrets al_sandbox_harden_process() scrubbed. */
  const char *v = name != NULL ? al_sandbox_getenv(name) : NULL;

  return v != NULL && *v != '\0' ? v : NULL;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end;
  unsigned long long v;

  if (s == NULL || *s < '0' || *s > '9') {
    return false;
  }
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) {
    return false;
  }
  *out = v;
  return true;
}

/* ---- output ---------------------------------------------------------------- */

/* A JSON string for text that should be UTF-8 but may not be (an error
 * message quoting bytes): invalid bytes become U+FFFD through the events
 * encoder's rule, approximated here by '?'. */
static json_t *json_text(const char *s) {
  json_t *j;
  char *copy;
  size_t i;

  if (s == NULL) {
    return json_null();
  }
  j = json_string(s);
  if (j != NULL) {
    return j;
  }
  copy = al_strdup(s);
  if (copy == NULL) {
    return json_null();
  }
  for (i = 0; copy[i] != '\0'; i++) {
    if ((unsigned char)copy[i] >= 0x80) {
      copy[i] = '?';
    }
  }
  j = json_string(copy);
  al_free(copy);
  return j != NULL ? j : json_null();
}

static const char *result_subtype(const run_t *r) {
  switch (r->end_type) {
  case AL_EVENT_FINAL:
    return r->max_turns ? "error_max_turns" : "success";
  case AL_EVENT_INTERRUPTED:
    return "interrupted";
  default:
    return "error_during_execution";
  }
}

/* The `result` object of json and ndjson modes (CONVENTIONS.md 7.6). */
static void print_result(const run_t *r) {
  json_t *o = json_object();
  json_t *u = json_object();
  char *s;

  if (o == NULL || u == NULL) {
    json_decref(o);
    json_decref(u);
    return;
  }
  json_object_set_new(o, "type", json_string("result"));
  json_object_set_new(o, "subtype", json_string(result_subtype(r)));
  json_object_set_new(o, "is_error", json_boolean(r->exit_code != EXIT_OK));
  json_object_set_new(o, "result", json_text(r->result ? r->result : ""));
  json_object_set_new(o, "session_id", json_text(r->session));
  json_object_set_new(o, "num_turns", json_integer(r->stats.turns));
  json_object_set_new(o, "duration_ms",
                      json_integer((json_int_t)r->stats.duration_ms));
  json_object_set_new(o, "duration_api_ms",
                      json_integer((json_int_t)r->stats.duration_api_ms));
  json_object_set_new(u, "input_tokens",
                      json_integer((json_int_t)r->stats.input_tokens));
  json_object_set_new(u, "output_tokens",
                      json_integer((json_int_t)r->stats.output_tokens));
  json_object_set_new(
      u, "cache_read_input_tokens",
      json_integer((json_int_t)r->stats.cache_read_input_tokens));
  json_object_set_new(
      u, "cache_creation_input_tokens",
      json_integer((json_int_t)r->stats.cache_creation_input_tokens));
  json_object_set_new(o, "usage", u);
  if (r->has_cost) {
    json_object_set_new(o, "total_cost_usd", json_real(r->cost_usd));
  }
  s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s != NULL) {
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
  }
  json_decref(o);
}

static void write_ndjson(run_t *r, const al_event_t *ev) {
  int err = al__events_encode_line(ev, &r->line);

  if (err != 0) {
    fprintf(stderr, "agentloop: event %s (seq %" PRIu64 ") not written: %s\n",
            al_event_type_name(ev->type), ev->seq, al_strerror(err));
    return;
  }
  fwrite(r->line.data, 1, r->line.len, stdout);
  fflush(stdout);
  al_buf_reset(&r->line);
}

/* ---- the run --------------------------------------------------------------- */

/* Durability that tells the truth (issue 15): the transcript's writer
 * retried until the end of the run; what it still could not write is said
 * on stderr and, in ndjson / stream-json, as an error line before the
 * result, and a run that otherwise succeeded exits EXIT_NOT_SAVED. */
static void report_loss(run_t *r) {
  char msg[1024];

  if (r->sess == NULL ||
      !al__run_session_loss_text(r->sess, msg, sizeof(msg))) {
    return;
  }
  fprintf(stderr, "agentloop: %s\n", msg);
  if (r->format == FMT_NDJSON) {
    al_event_t ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = AL_EVENT_ERROR;
    ev.seq = r->last_seq + 1;
    ev.ts_ns = uv_hrtime();
    ev.session = r->session;
    ev.u.error.code = r->sess->loss.err;
    ev.u.error.message.ptr = msg;
    ev.u.error.message.len = strlen(msg);
    write_ndjson(r, &ev);
  } else if (r->format == FMT_STREAM) {
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s?}", "type", "system",
                          "subtype", "error", "code", r->sess->loss.err,
                          "code_name", al_err_name(r->sess->loss.err),
                          "message", msg, "session_id", r->session);
    char *line = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

    if (line != NULL) {
      fputs(line, stdout);
      fputc('\n', stdout);
      free(line);
    }
    json_decref(o);
  }
  if (r->exit_code == EXIT_OK || r->exit_code == EXIT_MAX_TURNS) {
    r->exit_code = EXIT_NOT_SAVED;
  }
}

static void on_agent_closed(al_agent_t *agent) {
  run_t *r = al_agent_get_data(agent);

  r->agent = NULL;
  if (r->sess != NULL) {
    al__run_session_agent_closed(r->sess);
  }
}

/* The run is over: keep the totals, stop listening, let the loop drain. */
static void end_run(run_t *r) {
  const char *sid;

  r->ended = true;
  if (r->stream_in) {
    al__line_reader_close(&r->lr);
  }
  al_agent_stats(r->agent, &r->stats);
  {
    /* USD from the models catalogue's prices (per million tokens). */
    al_model_info_t mi;

    al_agent_model_info(r->agent, &mi);
    r->has_cost = mi.has_prices;
    r->cost_usd = al_model_cost_usd(
        &mi, r->stats.input_tokens, r->stats.output_tokens,
        r->stats.cache_read_input_tokens,
        r->stats.cache_creation_input_tokens);
  }
  sid = al_agent_session(r->agent);
  al_free(r->session);
  r->session = sid != NULL ? al_strdup(sid) : NULL;
  if (r->sub != NULL) {
    al_agent_unsubscribe(r->agent, r->sub);
    r->sub = NULL;
  }
  if (r->handles_open) {
    r->handles_open = false;
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->timer, NULL);
    uv_close((uv_handle_t *)&r->bg_check, NULL);
  }
  al_agent_close(r->agent, on_agent_closed);
  if (r->sess != NULL) {
    /* The loop runs until the transcript is written and closed. */
    al__run_session_close(r->sess);
  }
}

static void set_result(run_t *r, al_slice_t s) {
  al_free(r->result);
  r->result = s.ptr != NULL ? al_strndup(s.ptr, s.len) : NULL;
}

static void run_result_now(run_t *r);

static void on_bg_check(uv_timer_t *t);

/* Background sub-agents of this agent still running (with any: how many
 * it started at all). */
static size_t bg_count(const run_t *r, bool any) {
  char *txt = NULL;
  json_t *l;
  json_t *t;
  size_t i, n = 0;

  if (al_agent_tasks_json(r->agent, &txt) != 0) {
    return 0;
  }
  l = json_loads(txt, 0, NULL);
  al_free(txt);
  json_array_foreach(l, i, t) {
    const char *st = json_string_value(json_object_get(t, "state"));

    if (json_is_true(json_object_get(t, "background")) &&
        (any || (st != NULL && strcmp(st, "running") == 0))) {
      n++;
    }
  }
  json_decref(l);
  return n;
}

/* After an answer: ends the run unless background children still work. A
 * child that finishes starts the agent's next run with its result (its
 * answer ends up here again); one cancelled or failed may not, so its end
 * schedules bg_check. A result that came in during this answer starts
 * the next run from this very event (task.c): bg_check, one tick later,
 * sees it running. */
static bool bg_hold(run_t *r) {
  size_t n = bg_count(r, false);

  if (n == 0 && bg_count(r, true) == 0) {
    r->bg_wait = false;
    return false;
  }
  r->bg_wait = true;
  r->printed = false;
  if (n == 0) {
    uv_timer_start(&r->bg_check, on_bg_check, 0, 0);
    return true;
  }
  if (r->format == FMT_TEXT && r->result != NULL) {
    /* This answer now: the one the children's results lead to follows. */
    fputs(r->result, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    r->printed = true;
  }
  if (r->verbose) {
    al__cli_view_flush(&r->view);
    fprintf(stderr, "agentloop: waiting for %zu background sub-agent%s\n", n,
            n == 1 ? "" : "s");
  }
  return true;
}

static void on_bg_check(uv_timer_t *t) {
  run_t *r = t->data;

  if (r->ended || !r->bg_wait) {
    return;
  }
  if (al_agent_running(r->agent)) {
    /* A child's result started the next run: this answer is not the
     * last one. */
    if (r->format == FMT_TEXT && r->result != NULL && !r->printed) {
      fputs(r->result, stdout);
      fputc('\n', stdout);
      fflush(stdout);
      r->printed = true;
    }
    return;
  }
  if (bg_count(r, false) == 0) {
    r->bg_wait = false;
    end_run(r);
  }
}

static void on_event(const al_event_t *ev, void *data) {
  run_t *r = data;

  if (r->ended) {
    return;
  }
  if (ev->path != NULL) {
    /* A sub-agent's event (numbered in our stream): recorded, shown
     * nested by -v and in ndjson, but its final or error is the child's,
     * never the end of this run. stream-json shows the parent's
     * conversation only. */
    r->last_seq = ev->seq;
    if (r->sess != NULL) {
      al__run_session_event(r->sess, ev);
    }
    if (r->format == FMT_NDJSON) {
      write_ndjson(r, ev);
    }
    if (r->verbose) {
      al__cli_view_event(&r->view, ev);
    }
    return;
  }
  r->last_seq = ev->seq;
  if (r->sess != NULL) {
    al__run_session_event(r->sess, ev);
  }
  if (r->format == FMT_NDJSON) {
    write_ndjson(r, ev);
  } else if (r->format == FMT_STREAM) {
    al__stream_json_event(&r->sj, ev);
  }
  if (r->verbose) {
    al__cli_view_event(&r->view, ev);
  }
  switch (ev->type) {
  case AL_EVENT_MAX_TURNS_REACHED:
    r->max_turns = true;
    break;
  case AL_EVENT_FINAL:
    r->end_type = ev->type;
    r->exit_code = r->max_turns ? EXIT_MAX_TURNS : EXIT_OK;
    set_result(r, ev->u.final.text);
    if (r->stream_in) {
      /* This message's result, then the next message (read later). */
      run_result_now(r);
      r->run_active = false;
      r->max_turns = false;
      al__line_reader_next(&r->lr);
      break;
    }
    if (bg_hold(r)) {
      break;
    }
    end_run(r);
    break;
  case AL_EVENT_SUBAGENT_COMPLETED:
    if (r->bg_wait) {
      uv_timer_start(&r->bg_check, on_bg_check, 0, 0);
    }
    break;
  case AL_EVENT_ERROR: {
    char msg[1024];

    r->end_type = ev->type;
    r->exit_code = EXIT_FAIL;
    snprintf(msg, sizeof(msg), "%.*s",
             ev->u.error.message.ptr ? (int)ev->u.error.message.len : 0,
             ev->u.error.message.ptr ? ev->u.error.message.ptr : "");
    if (msg[0] == '\0') {
      snprintf(msg, sizeof(msg), "%s", al_strerror(ev->u.error.code));
    }
    al_free(r->result);
    r->result = al_strdup(msg);
    end_run(r);
    break;
  }
  case AL_EVENT_INTERRUPTED: {
    char msg[128];

    r->end_type = ev->type;
    r->exit_code = r->cause != 0 ? r->cause : EXIT_FAIL;
    if (r->cause == EXIT_TIMEOUT) {
      snprintf(msg, sizeof(msg), "timed out after %g s", r->timeout_s);
    } else if (r->cause == EXIT_SIGINT || r->cause == EXIT_SIGTERM) {
      snprintf(msg, sizeof(msg), "interrupted (%s)",
               r->cause == EXIT_SIGINT ? "SIGINT" : "SIGTERM");
    } else {
      snprintf(msg, sizeof(msg), "interrupted (%.*s)",
               ev->u.interrupted.reason.ptr
                   ? (int)ev->u.interrupted.reason.len : 7,
               ev->u.interrupted.reason.ptr ? ev->u.interrupted.reason.ptr
                                            : "unknown");
    }
    al_free(r->result);
    r->result = al_strdup(msg);
    end_run(r);
    break;
  }
  default:
    break;
  }
}

/* --input-format stream-json: one run's result line while the session
 * goes on (the totals of that run). */
static void run_result_now(run_t *r) {
  al_model_info_t mi;

  al_agent_stats(r->agent, &r->stats);
  al_agent_model_info(r->agent, &mi);
  r->has_cost = mi.has_prices;
  r->cost_usd = al_model_cost_usd(&mi, r->stats.input_tokens,
                                  r->stats.output_tokens,
                                  r->stats.cache_read_input_tokens,
                                  r->stats.cache_creation_input_tokens);
  al_free(r->session);
  r->session = al_agent_session(r->agent) != NULL
                   ? al_strdup(al_agent_session(r->agent))
                   : NULL;
  if (r->format == FMT_TEXT) {
    if (r->result != NULL) {
      size_t n = strlen(r->result);

      fputs(r->result, stdout);
      if (n == 0 || r->result[n - 1] != '\n') {
        fputc('\n', stdout);
      }
    }
  } else {
    print_result(r);
  }
  fflush(stdout);
  r->printed = true;
}

static void on_input_line(al__line_reader_t *lr, const char *line,
                          size_t len) {
  run_t *r = lr->data;
  al_buf_t text;
  char why[256];
  int err;

  r->line_no++;
  if (r->ended) {
    return;
  }
  if (strspn(line, " \t\r") == len) {
    al__line_reader_next(lr); /* blank line */
    return;
  }
  al_buf_init(&text, INPUT_MAX);
  err = al__stream_json_user_text(line, len, &text, why, sizeof(why));
  if (err == 0) {
    err = al_agent_run(r->agent, text.data);
    if (err != 0) {
      snprintf(why, sizeof(why), "cannot start the run: %s",
               al_strerror(err));
    }
  }
  al_buf_free(&text);
  if (err != 0) {
    char msg[320];

    snprintf(msg, sizeof(msg), "stdin line %d: %s", r->line_no, why);
    al_free(r->result);
    r->result = al_strdup(msg);
    r->end_type = AL_EVENT_ERROR;
    r->exit_code = EXIT_USAGE;
    r->printed = false;
    end_run(r);
    return;
  }
  r->runs++;
  r->run_active = true;
  r->printed = false;
}

static void on_input_end(al__line_reader_t *lr, int err) {
  run_t *r = lr->data;

  if (r->ended) {
    return;
  }
  if (err != 0 || r->runs == 0) {
    al_free(r->result);
    r->result = al_strdup(err != 0 ? "reading stdin failed"
                                   : "no user message on stdin");
    r->end_type = AL_EVENT_ERROR;
    r->exit_code = EXIT_USAGE;
    r->printed = false;
  }
  end_run(r);
}

/* SIGINT, SIGTERM, --timeout: cancel the run. The agent posts
 * `interrupted` inside al_agent_cancel, so `cause` is set first. */
static void cancel_run(run_t *r, int cause) {
  if (r->ended || r->cause != 0) {
    return;
  }
  if (r->stream_in && !r->run_active) {
    /* Waiting for the next message: the session ends here (the process
     * exits once the pending read of stdin returns). */
    r->exit_code = cause;
    r->printed = true;
    end_run(r);
    return;
  }
  if (r->bg_wait && !al_agent_running(r->agent)) {
    /* Answered, waiting for background children: they are cancelled
     * with the agent's close. */
    char msg[128];

    snprintf(msg, sizeof(msg), "interrupted (%s) while background "
             "sub-agents ran",
             cause == EXIT_SIGINT ? "SIGINT"
             : cause == EXIT_SIGTERM ? "SIGTERM" : "timeout");
    r->cause = cause;
    r->end_type = AL_EVENT_INTERRUPTED;
    r->exit_code = cause;
    al_free(r->result);
    r->result = al_strdup(msg);
    end_run(r);
    return;
  }
  r->cause = cause;
  if (al_agent_cancel(r->agent) != 0) {
    r->cause = 0; /* no run active: it is ending on its own */
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  run_t *r = h->data;

  cancel_run(r, signum == SIGINT ? EXIT_SIGINT : EXIT_SIGTERM);
}

static void on_timeout(uv_timer_t *t) {
  cancel_run(t->data, EXIT_TIMEOUT);
}

static bool want_color(const char *when) {
  const char *nc = getenv("NO_COLOR");
  const char *term = getenv("TERM");

  if (strcmp(when, "always") == 0) {
    return true;
  }
  if (strcmp(when, "never") == 0) {
    return false;
  }
  return isatty(STDERR_FILENO) && (nc == NULL || *nc == '\0') &&
         (term == NULL || strcmp(term, "dumb") != 0);
}

/* "agentloop: REASON" as one line: an API message may hold newlines. */
static void print_reason(const char *reason) {
  const char *p;

  fputs("agentloop: ", stderr);
  for (p = reason; *p != '\0'; p++) {
    fputc((unsigned char)*p < 0x20 ? ' ' : *p, stderr);
  }
  fputc('\n', stderr);
}

/* Runs the agent until its run ended and it closed; returns the exit
 * code. */
/* tools.d files that did not load: one stderr line each (the run goes on
 * with the tools that did); a sandbox weaker than bwrap: one line saying
 * what is missing. */
static void report_tool_errors(const al_agent_t *agent,
                               al_sandbox_policy_t policy) {
  char *text = NULL;
  json_t *o;
  json_t *e;
  json_t *sb;
  const char *mode;
  size_t i;

  if (al_agent_tools_json(agent, &text) != 0) {
    return;
  }
  o = json_loads(text, 0, NULL);
  al_free(text);
  json_array_foreach(json_object_get(o, "errors"), i, e) {
    fprintf(stderr, "agentloop: tools.d: %s\n", json_string_value(e));
  }
  sb = json_object_get(o, "sandbox");
  mode = json_string_value(json_object_get(sb, "mode"));
  if (policy == AL_SANDBOX_AUTO && mode != NULL &&
      strcmp(mode, "bwrap") != 0) {
    fprintf(stderr, "agentloop: sandbox %s (%s)%s; missing:", mode,
            json_string_value(json_object_get(sb, "detail")),
            strcmp(mode, "none") == 0
                ? "; bash and write tools are refused unless --sandbox=none"
                : "");
    json_array_foreach(json_object_get(sb, "missing"), i, e) {
      fprintf(stderr, "%s%s", i ? "," : " ", json_string_value(e));
    }
    fputc('\n', stderr);
  }
  json_decref(o);
}

/* --allow-tool / --deny-tool must name tools the agent has (built-in,
 * tools.d, in-process): a typo would otherwise be silently ignored. False
 * (and a usage line listing the known names) for the first unknown one. */
static bool check_tool_names(const al_agent_t *agent,
                             const char *const *allow,
                             const char *const *deny) {
  const char *const *lists[2] = {allow, deny};
  char *text = NULL;
  json_t *o;
  json_t *t;
  size_t i;
  int k;
  bool ok = true;

  if (al_agent_tools_json(agent, &text) != 0) {
    return true; /* out of memory: the run's own checks still apply */
  }
  o = json_loads(text, 0, NULL);
  al_free(text);
  for (k = 0; k < 2 && ok; k++) {
    const char *const *l = lists[k];

    for (; l != NULL && *l != NULL && ok; l++) {
      /* A rule is TOOL or TOOL(PATTERN), TOOL a glob: it must match some
       * tool's name. */
      const char *open = strchr(*l, '(');
      char tool[256];
      bool found = false;

      snprintf(tool, sizeof(tool), "%.*s",
               (int)(open != NULL ? (size_t)(open - *l) : strlen(*l)), *l);
      json_array_foreach(json_object_get(o, "tools"), i, t) {
        if (fnmatch(tool, json_string_value(json_object_get(t, "name")), 0) ==
            0) {
          found = true;
          break;
        }
      }
      if (!found) {
        ok = false;
        fprintf(stderr, "agentloop: --%s-tool %s: no tool has that name; "
                        "known:", k == 0 ? "allow" : "deny", *l);
        json_array_foreach(json_object_get(o, "tools"), i, t) {
          fprintf(stderr, "%s%s", i ? ", " : " ",
                  json_string_value(json_object_get(t, "name")));
        }
        fputc('\n', stderr);
      }
    }
  }
  json_decref(o);
  return ok;
}

static int drive(run_t *r, const al_agent_options_t *o, const char *text) {
  int err;

  err = al_agent_new(&r->loop, o, &r->agent);
  if (err == AL_ENOTSUP && o->sandbox == AL_SANDBOX_REQUIRED) {
    al_sandbox_info_t info;
    al_sandbox_probe_options_t po;

    al_sandbox_probe_options_init(&po);
    po.bwrap = o->sandbox_bwrap;
    po.helper = o->sandbox_helper;
    al_sandbox_probe(&po, &info);
    fail_usage("--sandbox=required: bubblewrap cannot run here (%s)",
               info.detail);
    return EXIT_USAGE;
  }
  if (err != 0) {
    fail_usage("cannot create the agent: %s", al_strerror(err));
    return err == AL_EINVAL ? EXIT_USAGE : EXIT_FAIL;
  }
  report_tool_errors(r->agent, o->sandbox);
  {
    al_model_info_t mi;
    char why[512];

    /* From the catalogue's end_of_life: the run goes on, but the user
     * learns before the provider starts refusing the model. */
    al_agent_model_info(r->agent, &mi);
    if (al_model_deprecation(&mi, o->model, why, sizeof(why))) {
      fprintf(stderr, "agentloop: warning: %s\n", why);
    }
  }
  if (!check_tool_names(r->agent, r->flag_allow, r->flag_deny)) {
    al_agent_close(r->agent, on_agent_closed);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    return EXIT_USAGE;
  }
  if (r->sess != NULL) {
    char why[PATH_MAX + 256];

    err = al__run_session_attach(r->sess, &r->loop, r->agent, &r->hdr, why,
                                 sizeof(why));
    if (err != 0) {
      fail_usage("%s", why);
      al__run_session_close(r->sess);
      al_agent_close(r->agent, on_agent_closed);
      uv_run(&r->loop, UV_RUN_DEFAULT);
      return EXIT_FAIL;
    }
  }
  err = al_agent_subscribe(r->agent, on_event, r, &r->sub);
  if (err == 0) {
    uv_signal_init(&r->loop, &r->sigint);
    uv_signal_init(&r->loop, &r->sigterm);
    uv_timer_init(&r->loop, &r->timer);
    uv_timer_init(&r->loop, &r->bg_check);
    r->bg_check.data = r;
    r->sigint.data = r;
    r->sigterm.data = r;
    r->timer.data = r;
    r->handles_open = true;
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    if (r->timeout_ms > 0) {
      uv_timer_start(&r->timer, on_timeout, r->timeout_ms, 0);
    }
    if (r->stream_in) {
      al__line_reader_init(&r->lr, &r->loop);
      r->lr.on_line = on_input_line;
      r->lr.on_end = on_input_end;
      r->lr.data = r;
      al__line_reader_next(&r->lr);
      err = 0;
    } else {
      err = al_agent_run(r->agent, text);
    }
  }
  if (err != 0) {
    /* Refused: no terminal event will come. */
    if (r->handles_open) {
      r->handles_open = false;
      uv_close((uv_handle_t *)&r->sigint, NULL);
      uv_close((uv_handle_t *)&r->sigterm, NULL);
      uv_close((uv_handle_t *)&r->timer, NULL);
      uv_close((uv_handle_t *)&r->bg_check, NULL);
    }
    al_agent_close(r->agent, on_agent_closed);
    if (r->sess != NULL) {
      al__run_session_close(r->sess);
    }
    uv_run(&r->loop, UV_RUN_DEFAULT);
    fail_usage("cannot start the run: %s", al_strerror(err));
    return EXIT_FAIL;
  }
  uv_run(&r->loop, UV_RUN_DEFAULT);
  if (r->verbose) {
    al__cli_view_flush(&r->view);
  }
  report_loss(r);
  switch (r->format) {
  case FMT_TEXT:
    if (r->end_type == AL_EVENT_FINAL && r->result != NULL && !r->printed) {
      size_t n = strlen(r->result);
      fputs(r->result, stdout);
      if (n == 0 || r->result[n - 1] != '\n') {
        fputc('\n', stdout);
      }
    }
    break;
  case FMT_JSON:
  case FMT_NDJSON:
  case FMT_STREAM:
    if (!r->printed) {
      print_result(r);
    }
    break;
  }
  fflush(stdout);
  if (r->end_type != AL_EVENT_FINAL) {
    print_reason(r->result ? r->result : "run failed");
  } else if (r->max_turns && !r->verbose) {
    fputs("agentloop: max turns reached; the result is the model's "
          "summary\n", stderr);
  }
  return r->ended ? r->exit_code : EXIT_FAIL;
}

/* The configuration of this run: files and environment (al_config_load),
 * then the flags that have a key. cfg is initialized either way. */
static int run_config(al_config_t *cfg, const char *cwd, bool trust,
                      const char *provider, const char *model,
                      const char *base_url, const char *fallback) {
  static const char *const keys[] = {"provider", "model", "base_url",
                                     "fallback_model"};
  static const char *const flags[] = {"--provider", "--model", "--base-url",
                                      "--fallback-model"};
  const char *vals[] = {provider, model, base_url, fallback};
  char why[700];
  size_t i;
  int code = al__cli_config_load_for(cfg, cwd, trust, provider, "agentloop");

  if (code != 0) {
    return EXIT_USAGE;
  }
  for (i = 0; i < AL_ARRAY_SIZE(keys); i++) {
    if (vals[i] != NULL &&
        al_config_set_flag(cfg, keys[i], vals[i], flags[i], why,
                           sizeof(why)) != 0) {
      /* The provider's message is the one users know. */
      fail_usage("%s", i == 0 ? strchr(why, ' ') + 1 : why);
      return EXIT_USAGE;
    }
  }
  return EXIT_OK;
}

int al_cli_run(int argc, char **argv) {
  enum {
    O_PROVIDER = 256, O_MODEL, O_BASE_URL, O_API_KEY, O_SYSTEM,
    O_SYSTEM_TEXT, O_MAX_TOKENS, O_MAX_TURNS, O_FORMAT, O_IDLE_TIMEOUT,
    O_TIMEOUT, O_CWD, O_ALLOW, O_DENY, O_TOOLS_DIR, O_FALLBACK, O_CONTEXT_WINDOW, O_NO_AUTO_COMPACT,
    O_NO_PROMPT_CACHE, O_MAX_MESSAGES, O_MICRO_MIN, O_KEEP_RECENT, O_COLOR,
    O_NO_COLOR, O_RETRIES, O_SANDBOX, O_TRUST, O_PRINT_PROMPT, O_LIMIT,
    O_MCP_CONFIG, O_HOOKS_CONFIG,
    O_CONTINUE, O_RESUME, O_PARTIAL, O_INPUT_FORMAT
  };
  static const struct option longopts[] = {
      {"prompt", required_argument, NULL, 'p'},
      {"provider", required_argument, NULL, O_PROVIDER},
      {"model", required_argument, NULL, O_MODEL},
      {"base-url", required_argument, NULL, O_BASE_URL},
      {"api-key", required_argument, NULL, O_API_KEY},
      {"system", required_argument, NULL, O_SYSTEM},
      {"system-text", required_argument, NULL, O_SYSTEM_TEXT},
      {"max-tokens", required_argument, NULL, O_MAX_TOKENS},
      {"max-turns", required_argument, NULL, O_MAX_TURNS},
      {"max-retries", required_argument, NULL, O_RETRIES},
      {"output-format", required_argument, NULL, O_FORMAT},
      {"idle-timeout-ms", required_argument, NULL, O_IDLE_TIMEOUT},
      {"limit", required_argument, NULL, O_LIMIT},
      {"timeout-ms", required_argument, NULL, O_IDLE_TIMEOUT}, /* old name */
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"cwd", required_argument, NULL, O_CWD},
      {"allow-tool", required_argument, NULL, O_ALLOW},
      {"deny-tool", required_argument, NULL, O_DENY},
      {"tools-dir", required_argument, NULL, O_TOOLS_DIR},
      {"sandbox", required_argument, NULL, O_SANDBOX},
      {"trust-project", no_argument, NULL, O_TRUST},
      {"print-system-prompt", no_argument, NULL, O_PRINT_PROMPT},
      {"fallback-model", required_argument, NULL, O_FALLBACK},
      {"context-window", required_argument, NULL, O_CONTEXT_WINDOW},
      {"keep-recent", required_argument, NULL, O_KEEP_RECENT},
      {"no-auto-compact", no_argument, NULL, O_NO_AUTO_COMPACT},
      {"no-prompt-cache", no_argument, NULL, O_NO_PROMPT_CACHE},
      {"max-messages", required_argument, NULL, O_MAX_MESSAGES},
      {"micro-min-tokens", required_argument, NULL, O_MICRO_MIN},
      {"mcp-config", required_argument, NULL, O_MCP_CONFIG},
      {"hooks-config", required_argument, NULL, O_HOOKS_CONFIG},
      {"continue", no_argument, NULL, O_CONTINUE},
      {"include-partial-messages", no_argument, NULL, O_PARTIAL},
      {"input-format", required_argument, NULL, O_INPUT_FORMAT},
      {"resume", required_argument, NULL, O_RESUME},
      {"color", required_argument, NULL, O_COLOR},
      {"no-color", no_argument, NULL, O_NO_COLOR},
      {"verbose", no_argument, NULL, 'v'},
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  run_t *r;
  al_agent_options_t o;
  const char *prompt = NULL;
  const char *provider = NULL;
  const char *model = NULL;
  const char *base_url = NULL;
  const char *api_key = NULL;
  const char *key_var = NULL;
  const char *system_file = NULL;
  const char *system_text = NULL;
  const char *format = "text";
  const char *cwd = NULL;
  const char *resume_id = NULL;
  bool cont = false;
  bool partial = false;
  const char *input_format = "text";
  bool stream_in = false;
  al__run_session_t sess;
  bool sess_on = false;
  char ws_real[PATH_MAX];
  char sess_err[PATH_MAX + 256];
  const char *tools_dirs[MAX_TOOL_FLAGS + 1];
  size_t ntools_dirs = 0;
  al_sandbox_policy_t sandbox = AL_SANDBOX_AUTO;
  bool sandbox_set = false;
  bool print_prompt = false;
  al_buf_t sysprompt;
  al_config_t cfg;
  al_agent_opts_input_t in;
  al_agent_opts_store_t store;
  al_agentdefs_t *agents = NULL;
  al_buf_t preamble;
  bool trust = false;
  const char *mcp_file = NULL;
  const char *hooks_file = NULL;
  const char *fallback = NULL;
  const char *color = "auto";
  const char *allow[MAX_TOOL_FLAGS + 1];
  const char *deny[MAX_TOOL_FLAGS + 1];
  size_t nallow = 0;
  size_t ndeny = 0;
  uint64_t max_tokens = 0;
  uint64_t max_turns = 0;
  uint64_t context_window = 0;
  uint64_t keep_recent = 0;
  uint64_t max_messages = 0;
  uint64_t micro_u = 0;
  int64_t micro_min = 0;
  bool no_auto_compact = false;
  bool no_prompt_cache = false;
  al_models_t *models = NULL;
  char *models_err = NULL;
  uint64_t idle_ms = 0;
  al_limits_t limits;
  uint64_t retries = UINT64_MAX;
  double timeout_s = 0;
  int verbose = -1; /* -1: auto */
  al_buf_t piped;
  al_buf_t sysbuf;
  al_buf_t text;
  bool public_url;
  int c;
  int err;
  int code;

  /* The keys live in this process: close /proc/PID/environ and mem to
   * other processes, scrub them from the environ block, no cores. */
  (void)al_sandbox_harden_process();
  optind = 1;
  opterr = 0;
  memset(&limits, 0, sizeof(limits));
  while ((c = getopt_long(argc, argv, ":p:hvq", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': prompt = optarg; break;
    case O_PROVIDER: provider = optarg; break;
    case O_MODEL: model = optarg; break;
    case O_BASE_URL: base_url = optarg; break;
    case O_API_KEY: api_key = optarg; break;
    case O_SYSTEM: system_file = optarg; break;
    case O_SYSTEM_TEXT: system_text = optarg; break;
    case O_FORMAT: format = optarg; break;
    case O_CWD: cwd = optarg; break;
    case O_TOOLS_DIR:
      if (ntools_dirs == MAX_TOOL_FLAGS) {
        fail_usage("--tools-dir: at most %d", MAX_TOOL_FLAGS);
        return EXIT_USAGE;
      }
      if (check_tools_dir(optarg) != EXIT_OK) {
        return EXIT_USAGE;
      }
      tools_dirs[ntools_dirs++] = optarg;
      break;
    case O_TRUST: trust = true; break;
    case O_MCP_CONFIG: mcp_file = optarg; break;
    case O_HOOKS_CONFIG: hooks_file = optarg; break;
    case O_PRINT_PROMPT: print_prompt = true; break;
    case O_CONTINUE: cont = true; break;
    case O_PARTIAL: partial = true; break;
    case O_INPUT_FORMAT: input_format = optarg; break;
    case O_RESUME: resume_id = optarg; break;
    case O_SANDBOX:
      if (!al__cli_sandbox_policy(optarg, &sandbox)) {
        fail_usage("--sandbox: auto, required or none, not '%s'", optarg);
        return EXIT_USAGE;
      }
      sandbox_set = true;
      break;
    case O_FALLBACK: fallback = optarg; break;
    case O_NO_AUTO_COMPACT: no_auto_compact = true; break;
    case O_NO_PROMPT_CACHE: no_prompt_cache = true; break;
    case O_MAX_MESSAGES:
      if (!parse_u64(optarg, 1000000, &max_messages) || max_messages < 3) {
        fail_usage("--max-messages: a count of at least 3, not '%s'", optarg);
        return EXIT_USAGE;
      }
      break;
    case O_MICRO_MIN:
      if (strcmp(optarg, "off") == 0) {
        micro_min = -1;
      } else if (!parse_u64(optarg, INT64_MAX, &micro_u) || micro_u == 0) {
        fail_usage("--micro-min-tokens: tokens or 'off', not '%s'", optarg);
        return EXIT_USAGE;
      } else {
        micro_min = (int64_t)micro_u;
      }
      break;
    case O_KEEP_RECENT:
      if (!parse_u64(optarg, 1000000000, &keep_recent) || keep_recent < 1) {
        fail_usage("--keep-recent: tokens, 1..1000000000, not '%s'", optarg);
        return EXIT_USAGE;
      }
      break;
    case O_CONTEXT_WINDOW:
      if (!parse_u64(optarg, 1000000000, &context_window) ||
          context_window < 1024) {
        fail_usage("--context-window: tokens, 1024..1000000000, not '%s'",
                   optarg);
        return EXIT_USAGE;
      }
      break;
    case O_COLOR: color = optarg; break;
    case O_NO_COLOR: color = "never"; break;
    case 'v': verbose = 1; break;
    case 'q': verbose = 0; break;
    case O_MAX_TOKENS:
      if (!parse_u64(optarg, INT64_MAX, &max_tokens) || max_tokens == 0) {
        fail_usage("--max-tokens: a positive integer, not '%s'", optarg);
        return EXIT_USAGE;
      }
      break;
    case O_MAX_TURNS:
      if (!parse_u64(optarg, UINT32_MAX, &max_turns) || max_turns == 0) {
        fail_usage("--max-turns: a positive integer, not '%s'", optarg);
        return EXIT_USAGE;
      }
      break;
    case O_RETRIES:
      if (!parse_u64(optarg, 100, &retries)) {
        fail_usage("--max-retries: an integer 0..100, not '%s'", optarg);
        return EXIT_USAGE;
      }
      break;
    case O_LIMIT: {
      int lrc = al_limits_set_kv(&limits, optarg);

      if (lrc == AL_ENOTFOUND) {
        fail_usage("--limit %s: unknown limit (reply_bytes, "
                   "tool_input_bytes, header_bytes, header_count, "
                   "total_time_ms, min_rate_bytes, min_rate_window_ms, "
                   "tool_processes, tool_memory_bytes, file_scan_bytes, "
                   "file_time_ms)",
                   optarg);
        return EXIT_USAGE;
      }
      if (lrc != 0) {
        char nm[64];

        snprintf(nm, sizeof(nm), "%.*s",
                 (int)(strchr(optarg, '=') != NULL
                           ? strchr(optarg, '=') - optarg
                           : (ptrdiff_t)strlen(optarg)),
                 optarg);
        fail_usage("--limit %s: NAME=VALUE with %s", optarg,
                   al_limits_expect(nm));
        return EXIT_USAGE;
      }
      break;
    }
    case O_IDLE_TIMEOUT:
      if (!parse_u64(optarg, INT64_MAX, &idle_ms) || idle_ms == 0) {
        fail_usage("--idle-timeout-ms: a positive integer, not '%s'",
                   optarg);
        return EXIT_USAGE;
      }
      break;
    case O_TIMEOUT: {
      char *end;
      errno = 0;
      timeout_s = strtod(optarg, &end);
      if (errno != 0 || end == optarg || *end != '\0' ||
          !(timeout_s > 0) || timeout_s > 1e9) {
        fail_usage("--timeout: a positive number of seconds, not '%s'",
                   optarg);
        return EXIT_USAGE;
      }
      break;
    }
    case O_ALLOW:
    case O_DENY:
      if ((c == O_ALLOW ? nallow : ndeny) == MAX_TOOL_FLAGS) {
        fail_usage("too many --%s-tool flags (at most %d)",
                   c == O_ALLOW ? "allow" : "deny", MAX_TOOL_FLAGS);
        return EXIT_USAGE;
      }
      if (c == O_ALLOW) {
        allow[nallow++] = optarg;
      } else {
        deny[ndeny++] = optarg;
      }
      break;
    case 'h':
      usage(stdout);
      return EXIT_OK;
    case ':':
      fail_usage("run: %s needs a value (try agentloop run --help)",
                 argv[optind - 1]);
      return EXIT_USAGE;
    default:
      if (optopt != 0) {
        fail_usage("run: unknown option '-%c' (try agentloop run --help)",
                   optopt);
      } else {
        fail_usage("run: unknown option '%s' (try agentloop run --help)",
                   argv[optind - 1]);
      }
      return EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fail_usage("run: unexpected argument '%s' (the prompt goes after -p)",
               argv[optind]);
    return EXIT_USAGE;
  }
  allow[nallow] = NULL;
  deny[ndeny] = NULL;

  al_buf_init(&sysprompt, 4 * INPUT_MAX);
  al_buf_init(&preamble, 4 * INPUT_MAX);
  al_agent_opts_store_init(&store);
  /* Configuration (docs/config.md), checked before anything is read or
   * sent: the files and the environment, then the flags over them. */
  if ((code = run_config(&cfg, cwd, trust, provider, model, base_url,
                         fallback)) != EXIT_OK) {
    al_config_free(&cfg);
    return code;
  }
  /* What the run itself needs before the options are built; the
   * options come from al_config_agent_options alone. */
  provider = al_config_provider(&cfg);
  model = cfg.model;
  base_url = cfg.base_url;
  if (timeout_s == 0 && cfg.timeouts.run_ms > 0) {
    timeout_s = (double)cfg.timeouts.run_ms / 1000.0;
  }
  if (!sandbox_set && cfg.sandbox.mode != NULL) {
    (void)al_config_sandbox_policy(cfg.sandbox.mode, &sandbox);
  }
  if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0 &&
      strcmp(format, "ndjson") != 0 && strcmp(format, "stream-json") != 0) {
    fail_usage("--output-format: text, json, ndjson or stream-json, not '%s'",
               format);
    code = EXIT_USAGE;
    goto done;
  }
  if (strcmp(input_format, "text") != 0 &&
      strcmp(input_format, "stream-json") != 0) {
    fail_usage("--input-format: text or stream-json, not '%s'",
               input_format);
    code = EXIT_USAGE;
    goto done;
  }
  stream_in = strcmp(input_format, "stream-json") == 0;
  if (stream_in && prompt != NULL) {
    fail_usage("--input-format stream-json reads the messages from stdin "
               "(one JSON line each); -p is not used with it");
    code = EXIT_USAGE;
    goto done;
  }
  if (partial && strcmp(format, "stream-json") != 0) {
    fail_usage("--include-partial-messages needs --output-format "
               "stream-json");
    code = EXIT_USAGE;
    goto done;
  }
  if (strcmp(color, "auto") != 0 && strcmp(color, "always") != 0 &&
      strcmp(color, "never") != 0) {
    fail_usage("--color: auto, always or never, not '%s'", color);
    code = EXIT_USAGE;
    goto done;
  }
  if (system_file != NULL && system_text != NULL) {
    fail_usage("--system FILE and --system-text TEXT: give one of them");
    code = EXIT_USAGE;
    goto done;
  }
  if (api_key == NULL) {
    api_key = al_config_api_key(&cfg, env_get, &key_var);
  }
  {
    char why[160];

    /* A malformed URL is configuration, not a network failure: name it
     * and the reason, exit 2 before any request. */
    if (al_agent_check_base_url(base_url, why, sizeof(why)) != 0) {
      fail_usage("base URL '%s': %s", base_url, why);
      code = EXIT_USAGE;
      goto done;
    }
  }
  public_url = al__cli_public_endpoint(base_url);
  if (api_key == NULL && public_url && !print_prompt) {
    fail_usage("no API key for %s: set %s or pass --api-key",
               base_url != NULL ? base_url : "the public endpoint", key_var);
    code = EXIT_USAGE;
    goto done;
  }
  if (cwd != NULL) {
    struct stat st;
    if (stat(cwd, &st) != 0) {
      fail_usage("--cwd %s: %s", cwd, strerror(errno));
      code = EXIT_USAGE;
      goto done;
    }
    if (!S_ISDIR(st.st_mode)) {
      fail_usage("--cwd %s: not a directory", cwd);
      code = EXIT_USAGE;
      goto done;
    }
  }
  if (cont && resume_id != NULL) {
    fail_usage("--continue and --resume ID: give one of them");
    code = EXIT_USAGE;
    goto done;
  }
  /* The session: kept in the state directory when there is one; resumed
   * when asked (then it must exist). */
  if (realpath(cwd != NULL ? cwd : ".", ws_real) == NULL) {
    fail_usage("--cwd %s: %s", cwd != NULL ? cwd : ".", strerror(errno));
    code = EXIT_USAGE;
    goto done;
  }
  err = al__run_session_prepare(&sess, resume_id, cont, ws_real, sess_err,
                                sizeof(sess_err));
  if (err != 0 && (resume_id != NULL || cont)) {
    al__run_session_free(&sess);
    fail_usage("%s", sess_err);
    code = EXIT_USAGE;
    goto done;
  }
  sess_on = err == 0;
  if (!sess_on) {
    al__run_session_free(&sess);
  }
  if (sess_on && sess.resumed && model == NULL &&
      al__run_session_model(&sess) != NULL) {
    char why[700];

    /* The session's model, unless given again. The system prompt is
     * built afresh (the instruction files may have changed). */
    if (al_config_set_flag(&cfg, "model", al__run_session_model(&sess),
                           "--resume", why, sizeof(why)) != 0) {
      fail_usage("%s", why);
      al__run_session_free(&sess);
      code = EXIT_USAGE;
      goto done;
    }
    model = cfg.model;
  }

  /* Inputs: read before the loop runs. */
  al_buf_init(&sysbuf, INPUT_MAX);
  if (system_file != NULL) {
    err = read_file(system_file, &sysbuf);
    if (err != 0) {
      fail_usage("--system %s: %s", system_file,
                 err == AL_ETOOBIG ? "larger than 32 MiB" : al_strerror(err));
      al_buf_free(&sysbuf);
      code = EXIT_USAGE;
      goto done;
    }
    system_text = sysbuf.data != NULL ? sysbuf.data : "";
  }
  /* The system prompt (docs/config.md): base, instruction files, the
   * configured text, then --system / --system-text. */
  if (al__cli_system_prompt(&cfg, cwd, sandbox, system_text, &sysprompt,
                            "agentloop") != 0) {
    fail_usage("out of memory building the system prompt");
    al_buf_free(&sysbuf);
    code = EXIT_FAIL;
    goto done;
  }
  system_text = sysprompt.data;
  if (print_prompt) {
    fputs(sysprompt.data, stdout);
    al_buf_free(&sysbuf);
    code = EXIT_OK;
    goto done;
  }
  al_buf_init(&piped, INPUT_MAX);
  err = stream_in ? 0 : read_piped_stdin(&piped);
  if (err != 0) {
    fail_usage("reading stdin: %s",
               err == AL_ETOOBIG ? "larger than 32 MiB" : al_strerror(err));
    al_buf_free(&piped);
    al_buf_free(&sysbuf);
    code = EXIT_USAGE;
    goto done;
  }
  al_buf_init(&text, 2 * INPUT_MAX);
  if (prompt != NULL) {
    al_buf_append_str(&text, prompt);
  }
  if (piped.len > 0) {
    if (text.len > 0) {
      al_buf_append_str(&text, "\n\n");
    }
    al_buf_append(&text, piped.data, piped.len);
  }
  al_buf_free(&piped);
  if (text.len == 0 && !stream_in) {
    fail_usage("run: -p PROMPT is required (or pipe the prompt on stdin)");
    al_buf_free(&text);
    al_buf_free(&sysbuf);
    code = EXIT_USAGE;
    goto done;
  }

  signal(SIGPIPE, SIG_IGN);
  json_object_seed(0); /* not mid-loop: jansson reads /dev/urandom once */
  /* The models catalogue with the user's overlay: read before the loop
   * runs; a bad file is a configuration error, never half-applied. */
  err = al_models_load(&models, NULL, &models_err);
  if (err != 0) {
    fail_usage("%s", models_err != NULL ? models_err : al_strerror(err));
    al_free(models_err);
    al_buf_free(&text);
    al_buf_free(&sysbuf);
    code = EXIT_USAGE; /* through done: the prompt and config are freed */
    goto done;
  }

  r = al_calloc(1, sizeof(*r));
  if (r == NULL) {
    al_models_free(models);
    fail_usage("out of memory");
    al_buf_free(&text);
    al_buf_free(&sysbuf);
    code = EXIT_FAIL;
    goto done;
  }
  r->format = strcmp(format, "json") == 0          ? FMT_JSON
              : strcmp(format, "ndjson") == 0      ? FMT_NDJSON
              : strcmp(format, "stream-json") == 0 ? FMT_STREAM
                                                   : FMT_TEXT;
  al__stream_json_init(&r->sj, stdout, partial);
  r->stream_in = stream_in;
  /* The answer alone unless -v asks for the view, on a terminal too (as
   * `claude -p` does): the view streamed the answer a second time. */
  r->verbose = verbose == 1;
  r->timeout_s = timeout_s;
  r->timeout_ms = timeout_s > 0 ? (uint64_t)ceil(timeout_s * 1000.0) : 0;
  r->end_type = AL_EVENT_ERROR;
  r->exit_code = EXIT_FAIL;
  al__cli_view_init(&r->view, stderr, want_color(color));
  al_buf_init(&r->line, LINE_MAX_BYTES);
  uv_loop_init(&r->loop);

  /* The options: the configuration under this run's flags, headless. */
  al_agent_opts_input_init(&in);
  in.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  in.workspace = cwd;
  in.system = system_text;
  in.api_key = api_key;
  in.getenv_fn = env_get;
  in.trust_project = trust;
  in.models = models;
  in.flags.max_tokens = (int64_t)max_tokens;
  in.flags.max_turns = (uint32_t)max_turns;
  in.flags.idle_timeout_ms = (int64_t)idle_ms;
  in.flags.retries = retries != UINT64_MAX ? (int)retries : -1;
  in.flags.sandbox = sandbox_set ? (int)sandbox : -1;
  tools_dirs[ntools_dirs] = NULL;
  in.flags.allow_tools = allow;
  in.flags.deny_tools = deny;
  in.flags.tools_dirs = tools_dirs;
  in.flags.limits = &limits;
  in.flags.mcp_file = mcp_file;
  in.flags.hooks_file = hooks_file;
  in.flags.context_window = (int64_t)context_window;
  in.flags.keep_recent = (int64_t)keep_recent;
  in.flags.micro_min_tokens = micro_min;
  in.flags.max_messages = (uint32_t)max_messages;
  in.flags.no_auto_compact = no_auto_compact;
  in.flags.no_prompt_cache = no_prompt_cache;
  /* Sub-agents (docs/subagents.md): the definition files and what a
   * fresh child's prompt ends with, read here before the loop runs. */
  if (al__cli_agents_load(&cfg, cwd, trust, verbose == 1, "agentloop",
                          &agents) != 0 ||
      al__cli_task_preamble(&cfg, cwd, sandbox, &preamble) != 0) {
    fail_usage("out of memory");
    code = EXIT_FAIL;
    goto out;
  }
  in.subagents = agents->defs;
  in.n_subagents = agents->n;
  in.task_preamble = preamble.data;
  {
    char why[1024];

    err = al_config_agent_options(&cfg, &in, &o, &store, why, sizeof(why));
    if (err != 0) {
      fail_usage("%s", why);
      code = err == AL_ENOMEM ? EXIT_FAIL : EXIT_USAGE;
      goto out;
    }
  }
  {
    char mws[4096];
    size_t wsn = sizeof(mws);
    const char *ws = cwd != NULL ? cwd
                     : uv_cwd(mws, &wsn) == 0 ? mws
                                              : ".";

    if (al__mcp_project_skipped(ws, trust || cfg.project_trusted)) {
      fprintf(stderr, "agentloop: %s/.mcp.json is not read: the project is "
                      "not trusted (--trust-project)\n", ws);
    }
  }
  /* This run's wiring: the view, the transcript. */
  r->flag_allow = allow;
  r->flag_deny = deny;
  o.data = r;
  if (sess_on) {
    r->sess = &sess;
    al__run_session_options(&sess, &o);
    r->hdr.cwd = ws_real;
    r->hdr.model = (char *)o.model;
    r->hdr.provider = (char *)o.provider;
    r->hdr.base_url = (char *)o.base_url;
    r->hdr.system = (char *)o.system;
    r->hdr.created_ms = (uint64_t)time(NULL) * 1000u;
  }

  code = drive(r, &o, text.data);
out:
  al_models_free(models);
  if (sess_on) {
    al__run_session_free(&sess);
  }

  al_buf_free(&text);
  al_buf_free(&sysbuf);
  al_buf_free(&r->line);
  al_free(r->result);
  al_free(r->session);
  al__stream_json_free(&r->sj);
  uv_loop_close(&r->loop);
  al_free(r);
done:
  al_buf_free(&sysprompt);
  al_buf_free(&preamble);
  al_agentdefs_free(agents);
  al_agent_opts_store_free(&store);
  al_config_free(&cfg);
  return code;
}
