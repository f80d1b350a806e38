/* The demo view of `agentloop run -v`: LoopEvents as a readable live log.
 *
 *   [   3 ms] run started: claude-sonnet-5-5 (anthropic), cwd /tmp/w
 *   [   4 ms] turn 1: request sent (claude-sonnet-5-5)
 *   [  40 ms] text: Let me look.
 *   [  52 ms] ● read_file {"path":"a.txt"} started (reply still streaming)
 *   [  55 ms] ✓ read_file 3 ms
 *   [  61 ms] turn 1: reply complete (2 tools, 1 started while streaming)
 *   [  62 ms]   explore t1: ● grep {"pattern":"x"} started
 *   ...
 *
 * A sub-agent's events (ev->path set) are nested: indented by depth,
 * prefixed with its agent's name (from its subagent_started) and path. *
 * Everything goes to one FILE (stderr); the caller keeps the answer on
 * stdout. Colour (dim timestamps and thinking, green/red marks) only when
 * the caller says so (a TTY without NO_COLOR). The view keeps no copies of
 * event payloads: each event is written while it is borrowed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "client/run_int.h"
#include "common/common.h"

#define C_DIM "\x1b[2m"
#define C_RED "\x1b[31m"
#define C_GREEN "\x1b[32m"
#define C_YELLOW "\x1b[33m"
#define C_CYAN "\x1b[36m"
#define C_RESET "\x1b[0m"

/* Width of "[%5 ms] ", used to indent continuation lines of text. */
#define STAMP_INDENT "          "

/* Longest tool input / result excerpt shown on one line, in bytes. */
#define EXCERPT_MAX 100

void al__cli_view_init(al__cli_view_t *v, FILE *f, bool color) {
  memset(v, 0, sizeof(*v));
  v->f = f;
  v->color = color;
  v->open_block = -1;
}

static void put(al__cli_view_t *v, const char *color, const char *s) {
  if (v->color && color != NULL) {
    fputs(color, v->f);
    fputs(s, v->f);
    fputs(C_RESET, v->f);
  } else {
    fputs(s, v->f);
  }
}

void al__cli_view_flush(al__cli_view_t *v) {
  if (v->open_block < 0) {
    return;
  }
  if (v->color && v->open_thinking) {
    fputs(C_RESET, v->f);
  }
  if (!v->at_line_start) {
    fputc('\n', v->f);
  }
  v->open_block = -1;
  v->open_thinking = false;
  fflush(v->f);
}

/* Starts a log line: ends any open text line, writes the timestamp. */
static void stamp(al__cli_view_t *v, const al_event_t *ev) {
  char s[40];
  uint64_t ms;

  al__cli_view_flush(v);
  if (!v->started) {
    v->started = true;
    v->t0_ns = ev->ts_ns;
  }
  ms = ev->ts_ns >= v->t0_ns ? (ev->ts_ns - v->t0_ns) / 1000000u : 0;
  snprintf(s, sizeof(s), "[%5" PRIu64 " ms] ", ms);
  put(v, C_DIM, s);
}

/* Writes at most `max` bytes of a slice on one line: control characters
 * (newlines included) become spaces, a cut never splits a UTF-8 character
 * and is marked with an ellipsis. */
static void excerpt(al__cli_view_t *v, al_slice_t s, size_t max) {
  size_t n = s.len;
  size_t i;

  if (s.ptr == NULL) {
    return;
  }
  if (n > max) {
    n = max;
    while (n > 0 && ((unsigned char)s.ptr[n] & 0xC0) == 0x80) {
      n--;
    }
  }
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    fputc(c < 0x20 || c == 0x7f ? ' ' : (int)c, v->f);
  }
  if (n < s.len) {
    fputs("…", v->f);
  }
}

static void end_line(al__cli_view_t *v) {
  fputc('\n', v->f);
  fflush(v->f);
}

/* Streams a text or thinking delta: the first one of a block opens a
 * stamped line, later ones continue it; newlines in the text continue on
 * an indented line so the timestamps column stays readable. */
static void delta(al__cli_view_t *v, const al_event_t *ev, bool thinking) {
  const char *p = ev->u.delta.text.ptr;
  size_t n = ev->u.delta.text.len;
  size_t i;

  if (p == NULL || n == 0) {
    return;
  }
  if (v->open_block != ev->u.delta.index || v->open_thinking != thinking) {
    stamp(v, ev);
    put(v, thinking ? C_DIM : NULL, thinking ? "thinking: " : "text: ");
    v->open_block = ev->u.delta.index;
    v->open_thinking = thinking;
    v->at_line_start = false;
  }
  if (v->color && thinking) {
    fputs(C_DIM, v->f);
  }
  for (i = 0; i < n; i++) {
    if (v->at_line_start) {
      fputs(STAMP_INDENT "      ", v->f);
      v->at_line_start = false;
    }
    fputc(p[i], v->f);
    if (p[i] == '\n') {
      v->at_line_start = true;
    }
  }
  if (v->color && thinking) {
    fputs(C_RESET, v->f);
  }
  fflush(v->f);
}

/* Closes the reply's stream window: writes the head of a "reply complete"
 * line (without its newline) and returns true, or false when no stream was
 * open. */
static bool reply_done(al__cli_view_t *v, const al_event_t *ev,
                       const char *why) {
  if (!v->streaming) {
    return false;
  }
  v->streaming = false;
  stamp(v, ev);
  fprintf(v->f, "turn %" PRIu32 ": reply %s", ev->turn, why);
  if (v->tools_in_reply > 0) {
    fprintf(v->f, " (%" PRIu32 " tool%s, %" PRIu32 " started while "
                  "streaming)",
            v->tools_in_reply, v->tools_in_reply == 1 ? "" : "s",
            v->tools_early);
  }
  return true;
}

/* The path of the child a subagent_* event names: the event's own path
 * (the parent's, NULL at the top) and its task id. */
static void kid_path(const al_event_t *ev, char *buf, size_t n) {
  const al_event_subagent_t *sa = &ev->u.subagent;

  snprintf(buf, n, "%s%s%.*s", ev->path != NULL ? ev->path : "",
           ev->path != NULL ? "/" : "", (int)sa->task_id.len,
           sa->task_id.ptr != NULL ? sa->task_id.ptr : "");
}

static void kid_remember(al__cli_view_t *v, const al_event_t *ev) {
  uint32_t i = v->nkids++ % (uint32_t)(sizeof(v->kids) / sizeof(v->kids[0]));

  kid_path(ev, v->kids[i].path, sizeof(v->kids[i].path));
  snprintf(v->kids[i].agent, sizeof(v->kids[i].agent), "%.*s",
           (int)ev->u.subagent.agent.len,
           ev->u.subagent.agent.ptr != NULL ? ev->u.subagent.agent.ptr : "");
}

/* Starts a sub-agent's line: the stamp, two spaces per level below the
 * top, then its agent's name and task path ("explore t1: "). */
static void nest(al__cli_view_t *v, const al_event_t *ev, const char *path) {
  const char *agent = NULL;
  const char *p;
  uint32_t i;
  uint32_t n = v->nkids < 32 ? v->nkids : 32;

  stamp(v, ev);
  for (p = path; *p != '\0'; p++) {
    if (*p == '/') {
      fputs("  ", v->f);
    }
  }
  fputs("  ", v->f);
  for (i = 0; i < n; i++) {
    if (strcmp(v->kids[i].path, path) == 0) {
      agent = v->kids[i].agent;
    }
  }
  if (agent != NULL && agent[0] != '\0') {
    put(v, C_CYAN, agent);
    fputc(' ', v->f);
  }
  fprintf(v->f, "%s: ", path);
}

/* subagent_started / subagent_completed, the top agent's or a child's. */
static void subagent_line(al__cli_view_t *v, const al_event_t *ev) {
  const al_event_subagent_t *sa = &ev->u.subagent;
  char path[48];
  bool ok = true;

  kid_path(ev, path, sizeof(path));
  if (ev->type == AL_EVENT_SUBAGENT_STARTED) {
    kid_remember(v, ev);
  }
  nest(v, ev, path);
  if (ev->type == AL_EVENT_SUBAGENT_STARTED) {
    put(v, C_YELLOW, "●");
    fputs(" started", v->f);
    if (sa->background) {
      fputs(" in the background", v->f);
    }
    fputs(": ", v->f);
    excerpt(v, sa->description, EXCERPT_MAX);
    end_line(v);
    return;
  }
  ok = sa->outcome.len == 9 && memcmp(sa->outcome.ptr, "completed", 9) == 0;
  put(v, ok ? C_GREEN : C_RED, ok ? "✓" : "✗");
  fputc(' ', v->f);
  excerpt(v, sa->outcome, 16);
  fprintf(v->f, ", %" PRIu64 " in / %" PRIu64 " out tokens",
          sa->input_tokens, sa->output_tokens);
  if (sa->result.len > 0) {
    fputs(": ", v->f);
    excerpt(v, sa->result, EXCERPT_MAX);
  }
  end_line(v);
}

/* A sub-agent's own event: its tool lines, approvals and failures,
 * nested under it; its text and turns stay in its transcript (the
 * parent's reply would be cut up by them). */
/* The line's head: the time, then for a sub-agent's event its depth,
 * agent and path. */
static void lead(al__cli_view_t *v, const al_event_t *ev) {
  if (ev->path != NULL) {
    nest(v, ev, ev->path);
  } else {
    stamp(v, ev);
  }
}

/* A tool's start, end or abort and an approval asked: the same line for
 * the agent's own calls and, nested, for its sub-agents'. */
static void tool_line(al__cli_view_t *v, const al_event_t *ev) {
  const al_event_tool_t *t = &ev->u.tool;

  switch (ev->type) {
  case AL_EVENT_TOOL_USE_STARTED:
    lead(v, ev);
    put(v, C_YELLOW, "●");
    fputc(' ', v->f);
    excerpt(v, t->name, 64);
    fputc(' ', v->f);
    excerpt(v, t->input, EXCERPT_MAX);
    fputs(" started", v->f);
    if (ev->path == NULL && v->streaming) {
      v->tools_early++;
      put(v, C_CYAN, " (reply still streaming)");
    }
    end_line(v);
    break;
  case AL_EVENT_TOOL_USE_COMPLETED:
    lead(v, ev);
    put(v, t->is_error ? C_RED : C_GREEN, t->is_error ? "✗" : "✓");
    fputc(' ', v->f);
    excerpt(v, t->name, 64);
    fprintf(v->f, " %" PRIu64 " ms", t->duration_ms);
    if (t->is_error) {
      fputs(": ", v->f);
      excerpt(v, t->content, EXCERPT_MAX);
    }
    end_line(v);
    break;
  case AL_EVENT_TOOL_EXECUTION_ABORTED:
    lead(v, ev);
    put(v, C_RED, "✗");
    fputc(' ', v->f);
    /* A run-wide abort (cancel) names no call. */
    if (t->name.ptr != NULL) {
      excerpt(v, t->name, 64);
    } else {
      fputs("tools", v->f);
    }
    fputs(" aborted (", v->f);
    excerpt(v, t->reason, 64);
    fputc(')', v->f);
    end_line(v);
    break;
  case AL_EVENT_APPROVAL_REQUIRED:
    lead(v, ev);
    fputs("approval required: ", v->f);
    excerpt(v, ev->u.approval.name, 64);
    fputc(' ', v->f);
    excerpt(v, ev->u.approval.input, EXCERPT_MAX);
    end_line(v);
    break;
  default:
    break;
  }
}

static void child_event(al__cli_view_t *v, const al_event_t *ev) {
  switch (ev->type) {
  case AL_EVENT_SUBAGENT_STARTED:
  case AL_EVENT_SUBAGENT_COMPLETED:
    subagent_line(v, ev);
    break;
  case AL_EVENT_API_ERROR:
  case AL_EVENT_ERROR:
    nest(v, ev, ev->path);
    put(v, C_RED, ev->type == AL_EVENT_ERROR ? "error" : "API error");
    fputs(": ", v->f);
    excerpt(v, ev->type == AL_EVENT_ERROR ? ev->u.error.message
                                          : ev->u.api_error.message,
            EXCERPT_MAX);
    end_line(v);
    break;
  default:
    tool_line(v, ev);
    break;
  }
}

void al__cli_view_event(al__cli_view_t *v, const al_event_t *ev) {
  if (ev->path != NULL) {
    child_event(v, ev);
    return;
  }
  switch (ev->type) {
  case AL_EVENT_SUBAGENT_STARTED:
  case AL_EVENT_SUBAGENT_COMPLETED:
    subagent_line(v, ev);
    break;
  case AL_EVENT_RUN_STARTED:
    stamp(v, ev);
    fputs("run started: ", v->f);
    excerpt(v, ev->u.run_started.model, 80);
    fputs(" (", v->f);
    excerpt(v, ev->u.run_started.provider, 20);
    fputs("), cwd ", v->f);
    excerpt(v, ev->u.run_started.cwd, 200);
    fputs(", tools ", v->f);
    excerpt(v, ev->u.run_started.tools, 200);
    end_line(v);
    break;
  case AL_EVENT_TURN_STARTED:
    v->turn = ev->turn;
    break;
  case AL_EVENT_STREAM_REQUEST_START:
    v->streaming = true;
    v->tools_in_reply = 0;
    v->tools_early = 0;
    stamp(v, ev);
    fprintf(v->f, "turn %" PRIu32 ": request sent (", ev->turn);
    excerpt(v, ev->u.stream_request.model, 80);
    fputc(')', v->f);
    if (ev->u.stream_request.attempt > 1) {
      fprintf(v->f, ", attempt %" PRIu32, ev->u.stream_request.attempt);
    }
    end_line(v);
    break;
  case AL_EVENT_TEXT_DELTA:
    delta(v, ev, false);
    break;
  case AL_EVENT_THINKING_DELTA:
    delta(v, ev, true);
    break;
  case AL_EVENT_CONTENT_BLOCK_COMPLETED:
    if (ev->u.block.index == v->open_block) {
      al__cli_view_flush(v);
    }
    if (ev->u.block.block_type.ptr != NULL &&
        ev->u.block.block_type.len == 8 &&
        memcmp(ev->u.block.block_type.ptr, "tool_use", 8) == 0) {
      v->tools_in_reply++;
    }
    break;
  case AL_EVENT_TOOL_USE_STARTED:
  case AL_EVENT_TOOL_USE_COMPLETED:
  case AL_EVENT_TOOL_EXECUTION_ABORTED:
  case AL_EVENT_APPROVAL_REQUIRED:
    tool_line(v, ev);
    break;
  case AL_EVENT_APPROVAL_RESPONSE:
    stamp(v, ev);
    fputs("approval: ", v->f);
    excerpt(v, ev->u.approval.name, 64);
    fputc(' ', v->f);
    excerpt(v, ev->u.approval.decision, 16);
    if (ev->u.approval.reason.ptr != NULL) {
      fputs(" (", v->f);
      excerpt(v, ev->u.approval.reason, EXCERPT_MAX);
      fputc(')', v->f);
    }
    end_line(v);
    break;
  case AL_EVENT_USAGE:
    if (reply_done(v, ev, "complete")) {
      fprintf(v->f, ", %" PRIu64 " in / %" PRIu64 " out tokens",
              ev->u.usage.input_tokens, ev->u.usage.output_tokens);
      if (ev->u.usage.cache_read_input_tokens > 0) {
        fprintf(v->f, " (%" PRIu64 " cached)",
                ev->u.usage.cache_read_input_tokens);
      }
      if (ev->u.usage.context_window > 0) {
        fprintf(v->f, ", context %s%" PRIu64 " of %" PRIu64 " (%" PRIu32 "%%)",
                ev->u.usage.context_estimated ? "~" : "",
                ev->u.usage.context_tokens, ev->u.usage.context_window,
                ev->u.usage.context_pct);
      }
      end_line(v);
    }
    break;
  case AL_EVENT_HISTORY_REPAIRED:
    stamp(v, ev);
    put(v, C_YELLOW, "history repaired");
    fprintf(v->f, " before sending (%" PRIu32 " fix%s): ", ev->u.repaired.count,
            ev->u.repaired.count == 1 ? "" : "es");
    excerpt(v, ev->u.repaired.repairs, EXCERPT_MAX);
    end_line(v);
    break;
  case AL_EVENT_CONTEXT_WARNING:
    stamp(v, ev);
    put(v, C_YELLOW, "context");
    fprintf(v->f, ": %" PRIu32 "%% of the window used (%" PRIu64 " of %" PRIu64
                  " tokens)",
            ev->u.usage.context_pct, ev->u.usage.context_tokens,
            ev->u.usage.context_window);
    end_line(v);
    break;
  case AL_EVENT_RETRY:
    v->streaming = false;
    stamp(v, ev);
    put(v, C_YELLOW, "retry");
    fprintf(v->f, ": attempt %" PRIu32 "/%" PRIu32 " in %" PRIu64 " ms (",
            ev->u.retry.attempt, ev->u.retry.max, ev->u.retry.delay_ms);
    excerpt(v, ev->u.retry.kind, 32);
    if (ev->u.retry.status != 0) {
      fprintf(v->f, ", HTTP %d", ev->u.retry.status);
    }
    if (ev->u.retry.message.ptr != NULL) {
      fputs(": ", v->f);
      excerpt(v, ev->u.retry.message, EXCERPT_MAX);
    }
    fputc(')', v->f);
    end_line(v);
    break;
  case AL_EVENT_API_ERROR:
    stamp(v, ev);
    put(v, C_RED, "API error");
    if (ev->u.api_error.status != 0) {
      fprintf(v->f, " HTTP %d", ev->u.api_error.status);
    }
    if (ev->u.api_error.kind.ptr != NULL) {
      fputc(' ', v->f);
      excerpt(v, ev->u.api_error.kind, 64);
    }
    fputs(": ", v->f);
    excerpt(v, ev->u.api_error.message, EXCERPT_MAX);
    end_line(v);
    break;
  case AL_EVENT_STREAM_STALL_DETECTED:
    stamp(v, ev);
    fprintf(v->f, "stream stalled: no data for %" PRIu64 " ms%s",
            ev->u.stall.idle_ms,
            ev->u.stall.content_delivered ? " (after content)" : "");
    end_line(v);
    break;
  case AL_EVENT_MODEL_FALLBACK:
    stamp(v, ev);
    put(v, C_YELLOW, "model fallback");
    fputs(": ", v->f);
    excerpt(v, ev->u.fallback.from, 80);
    fputs(" → ", v->f);
    excerpt(v, ev->u.fallback.to, 80);
    fputs(" (", v->f);
    excerpt(v, ev->u.fallback.reason, 64);
    fputc(')', v->f);
    end_line(v);
    break;
  case AL_EVENT_TOMBSTONE:
    v->streaming = false;
    stamp(v, ev);
    put(v, C_YELLOW, "tombstone");
    fputs(": partial reply ", v->f);
    if (ev->u.tombstone.message_id.ptr != NULL) {
      excerpt(v, ev->u.tombstone.message_id, 64);
      fputc(' ', v->f);
    }
    fputs("dropped (", v->f);
    excerpt(v, ev->u.tombstone.reason, 64);
    fputs("); the text above is discarded", v->f);
    end_line(v);
    break;
  case AL_EVENT_MICRO_COMPACTION:
  case AL_EVENT_COMPACTION_STARTED:
  case AL_EVENT_COMPACTION_COMPLETED:
    stamp(v, ev);
    fputs(al_event_type_name(ev->type), v->f);
    fputs(" (", v->f);
    excerpt(v, ev->u.compaction.trigger, 32);
    fprintf(v->f, "): %" PRIu64 " -> %" PRIu64 " tokens",
            ev->u.compaction.tokens_before, ev->u.compaction.tokens_after);
    end_line(v);
    break;
  case AL_EVENT_TURN_COMPLETED:
    if (reply_done(v, ev, "complete")) {
      end_line(v);
    }
    stamp(v, ev);
    fprintf(v->f, "turn %" PRIu32 ": done (", ev->turn);
    excerpt(v, ev->u.turn_completed.stop_reason, 32);
    fprintf(v->f, ", %" PRIu32 " tool%s)", ev->u.turn_completed.tool_calls,
            ev->u.turn_completed.tool_calls == 1 ? "" : "s");
    end_line(v);
    break;
  case AL_EVENT_MAX_TURNS_REACHED:
    stamp(v, ev);
    put(v, C_YELLOW, "max turns");
    fprintf(v->f, " (%" PRIu32 ") reached: asking for a summary",
            ev->u.max_turns.max_turns);
    end_line(v);
    break;
  case AL_EVENT_INTERRUPTED:
    v->streaming = false;
    stamp(v, ev);
    put(v, C_RED, "interrupted");
    fputs(" (", v->f);
    excerpt(v, ev->u.interrupted.reason, 64);
    fputc(')', v->f);
    end_line(v);
    break;
  case AL_EVENT_ERROR:
    v->streaming = false;
    stamp(v, ev);
    put(v, C_RED, "error");
    fprintf(v->f, " %s: ", al_err_name(ev->u.error.code));
    excerpt(v, ev->u.error.message, 300);
    end_line(v);
    break;
  case AL_EVENT_FINAL:
    v->streaming = false;
    stamp(v, ev);
    put(v, C_GREEN, "final");
    fprintf(v->f, " after %" PRIu32 " turn%s", ev->turn,
            ev->turn == 1 ? "" : "s");
    end_line(v);
    break;
  case AL_EVENT_USER_MESSAGE:
    if (ev->u.user_message.text.len > 0) {
      stamp(v, ev);
      fputs("user: ", v->f);
      excerpt(v, ev->u.user_message.text, 200);
      end_line(v);
    }
    break;
  case AL_EVENT_PROVIDER_NOTICE:
    stamp(v, ev);
    fputs("note: ", v->f);
    excerpt(v, ev->u.notice.message, EXCERPT_MAX);
    end_line(v);
    break;
  case AL_EVENT_CITATION:
    /* The citation's JSON as sent (url, title, cited_text). */
    stamp(v, ev);
    fputs("source: ", v->f);
    excerpt(v, ev->u.citation.citation, EXCERPT_MAX);
    end_line(v);
    break;
  case AL_EVENT_MCP_SERVER_STATE:
  case AL_EVENT_MCP_WARNING:
    /* ready/starting are routine; failures, a degraded server stream
     * (its notice) and warnings are shown. */
    if (ev->type == AL_EVENT_MCP_SERVER_STATE &&
        (ev->u.mcp.state.len != 6 ||
         memcmp(ev->u.mcp.state.ptr, "failed", 6) != 0) &&
        (ev->u.mcp.state.len != 8 ||
         memcmp(ev->u.mcp.state.ptr, "degraded", 8) != 0)) {
      break;
    }
    v->streaming = false;
    stamp(v, ev);
    put(v, C_YELLOW, "mcp");
    fprintf(v->f, " %.*s: ", (int)ev->u.mcp.server.len, ev->u.mcp.server.ptr);
    excerpt(v, ev->u.mcp.error, 300);
    end_line(v);
    break;
  case AL_EVENT_HOOK_EXECUTED:
    v->streaming = false;
    stamp(v, ev);
    put(v, C_DIM, "hook");
    fprintf(v->f, " %.*s %.*s -> %.*s (%.*s, %" PRIu64 " ms)",
            (int)ev->u.hook.hook.len, ev->u.hook.hook.ptr,
            (int)ev->u.hook.event.len, ev->u.hook.event.ptr,
            (int)ev->u.hook.decision.len, ev->u.hook.decision.ptr,
            (int)ev->u.hook.outcome.len, ev->u.hook.outcome.ptr,
            ev->u.hook.ms);
    end_line(v);
    break;
  case AL_EVENT_MCP_TOOL_CALL_END:
    /* A call the server never answered (timed out, died, shut down);
     * answers and cancels show in tool_use_completed. */
    if (ev->u.mcp_call.end.ptr == NULL ||
        (ev->u.mcp_call.end.len == 9 &&
         memcmp(ev->u.mcp_call.end.ptr, "cancelled", 9) == 0)) {
      break;
    }
    v->streaming = false;
    stamp(v, ev);
    put(v, C_YELLOW, "mcp");
    fprintf(v->f, " %.*s: %.*s %.*s after %" PRIu64 " ms",
            (int)ev->u.mcp_call.server.len, ev->u.mcp_call.server.ptr,
            (int)ev->u.mcp_call.tool.len, ev->u.mcp_call.tool.ptr,
            (int)ev->u.mcp_call.end.len, ev->u.mcp_call.end.ptr,
            ev->u.mcp_call.duration_ms);
    end_line(v);
    break;
  case AL_EVENT_MCP_STARTUP_COMPLETE:
    /* Only when a server is missing from the first turn. */
    if (ev->u.mcp_startup.failed.len <= 2 &&
        ev->u.mcp_startup.pending.len <= 2) {
      break;
    }
    v->streaming = false;
    stamp(v, ev);
    put(v, C_YELLOW, "mcp");
    fprintf(v->f, " start-up after %" PRIu64 " ms: failed ",
            ev->u.mcp_startup.waited_ms);
    excerpt(v, ev->u.mcp_startup.failed, 300);
    fputs(", still starting ", v->f);
    excerpt(v, ev->u.mcp_startup.pending, 200);
    end_line(v);
    break;
  case AL_EVENT_MCP_TOOL_CALL_BEGIN:
  case AL_EVENT_MCP_TOOLS_CHANGED:
  case AL_EVENT_TOOL_USE_QUEUED:
  case AL_EVENT_TOOL_INPUT_DELTA:
  case AL_EVENT_TOOL_PROGRESS:
  case AL_EVENT_TYPE_COUNT:
    break;
  }
}
