/* What the model sees of a tool's output: every tool cuts its (already
 * sanitized) UTF-8 text at the same number of characters and names the cut
 * with the same notice (SPEC §8), so the counting and the notice live here
 * once. Characters are code points: bytes that are not continuation bytes.
 * A child's result (bash, CLI tools) is formatted here once too. */
#include <stdio.h>

#include "common/utf8.h"
#include "tools/spawn.h"
#include "tools/tools.h"

size_t al__tool_display_cut(const char *s, size_t len, size_t extra_chars,
                            size_t limit, size_t *shown, size_t *total) {
  size_t i;
  size_t n = 0;
  size_t cut = len;

  for (i = 0; i < len; i++) {
    if (((unsigned char)s[i] & 0xC0) != 0x80) {
      if (n == limit && cut == len) {
        cut = i;
      }
      n++;
    }
  }
  *total = n + extra_chars;
  *shown = AL_MIN(n, limit);
  return cut;
}

int al__tool_truncation_notice(al_buf_t *b, size_t shown, size_t total,
                               const char *tool) {
  return al_buf_printf(b,
                       "[OUTPUT TRUNCATED: showing %zu of %zu characters "
                       "from %s]",
                       shown, total, tool);
}

/* ---- a child's result as the model sees it --------------------------------- */

static void sep(al_buf_t *b) {
  if (b->len > 0 && b->data[b->len - 1] != '\n') {
    al_buf_append_str(b, "\n");
  }
}

void al__tool_format_spawn(const al_spawn_result_t *res, const char *tool,
                           size_t display_max, uint64_t timeout_ms,
                           al_buf_t *b, bool *is_error) {
  al_buf_t body;
  al_text_clean_t st;
  size_t total;
  size_t shown;
  size_t cut;
  size_t hidden = 0;
  int rc = 0;

  if (res->start_error != 0) {
    /* An asynchronous start that failed: the words of a refused one. */
    *is_error = true;
    if (al_buf_printf(b, "Error: could not start %s: %s",
                      res->program != NULL ? res->program : tool,
                      al_strerror(res->start_error)) != 0) {
      al_buf_reset(b);
    }
    return;
  }
  memset(&st, 0, sizeof(st));
  al_buf_init(&body, (size_t)-1);
  /* Binary stdout is named, not pasted; any other NUL or bad byte becomes
   * U+FFFD, counted in a note, so nothing unsafe reaches the history, the
   * transcript or a request (issue 15). */
  if (res->out_len > 0 && al__text_looks_binary(res->out, res->out_len, false)) {
    hidden = res->out_total;
    rc |= al_buf_printf(&body,
                        "[binary output: %zu bytes not shown (NUL bytes or "
                        "invalid UTF-8); pipe it through xxd, base64 or "
                        "strings to see it]",
                        (size_t)res->out_total);
  } else {
    rc |= al__text_clean_append(&body, res->out, res->out_len, &st);
  }
  if (res->err_len > 0) {
    sep(&body);
    rc |= al_buf_append_str(&body, "[stderr]\n");
    rc |= al__text_clean_append(&body, res->err, res->err_len, &st);
  }
  if (st.nul + st.invalid > 0) {
    sep(&body);
    rc |= al__text_clean_note(&body, &st);
  }
  cut = al__tool_display_cut(
      body.data != NULL ? body.data : "", body.len,
      (hidden > 0 ? 0 : res->out_total - res->out_len) +
          (res->err_total - res->err_len),
      display_max, &shown, &total);

  if (res->status == AL_ETIMEDOUT) {
    rc |= al_buf_printf(b, "Error: command timed out after %g s",
                        (double)timeout_ms / 1000.0);
    if (cut > 0) {
      rc |= al_buf_append_str(b, "\n");
    }
  } else if (res->status == AL_ECANCELED) {
    rc |= al_buf_append_str(b, "Error: command cancelled");
    if (cut > 0) {
      rc |= al_buf_append_str(b, "\n");
    }
  }
  if (cut > 0) {
    rc |= al_buf_append(b, body.data, cut);
  }
  if (shown < total) {
    sep(b);
    rc |= al__tool_truncation_notice(b, shown, total, tool);
  }
  *is_error = res->status != 0;
  if (res->status == 0 && res->term_signal != 0) {
    sep(b);
    rc |= al_buf_printf(b, "killed by signal %d", res->term_signal);
    *is_error = true;
  } else if (res->status == 0 && res->exit_status != 0) {
    sep(b);
    rc |= al_buf_printf(b, "exit code %lld", (long long)res->exit_status);
    *is_error = true;
  }
  if (rc == 0 && b->len == 0) {
    rc |= al_buf_append_str(b, "(no output)");
  }
  al_buf_free(&body);
  if (rc != 0) {
    al_buf_reset(b);
    *is_error = true;
  }
}


void al__tool_complete_spawn(al_tool_call_t *call,
                             const al_spawn_result_t *res, const char *tool,
                             size_t display_max, uint64_t timeout_ms) {
  static const char oom[] = "Error: out of memory";
  al_buf_t b;
  bool is_error = true;

  al_buf_init(&b, (size_t)-1);
  al__tool_format_spawn(res, tool, display_max, timeout_ms, &b, &is_error);
  if (b.len == 0) {
    al__executor_call_complete(call, true, oom, strlen(oom));
  } else {
    al__executor_call_complete(call, is_error, b.data, b.len);
  }
  al_buf_free(&b);
}

typedef struct fail_later_s {
  uv_timer_t timer;
  al_tool_call_t *call;
  char *msg;
} fail_later_t;

static void on_fail_close(uv_handle_t *h) {
  fail_later_t *f = h->data;

  al_free(f->msg);
  al_free(f);
}

static void on_fail(uv_timer_t *t) {
  fail_later_t *f = t->data;
  const char *msg = f->msg != NULL ? f->msg : "Error: out of memory";

  uv_close((uv_handle_t *)t, on_fail_close);
  al__executor_call_complete(f->call, true, msg, strlen(msg));
}

int al__tool_fail_later(uv_loop_t *loop, al_tool_call_t *call, char *msg) {
  fail_later_t *f = al_calloc(1, sizeof(*f));

  call->tool_data = NULL;
  if (f == NULL) {
    /* No memory for the timer either: refuse the start instead (the
     * executor completes the call with an error itself). */
    al_free(msg);
    return AL_ENOMEM;
  }
  f->call = call;
  f->msg = msg;
  uv_timer_init(loop, &f->timer);
  f->timer.data = f;
  uv_timer_start(&f->timer, on_fail, 0, 0);
  return 0;
}
