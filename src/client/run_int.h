/* `agentloop run` internals shared by run.c (flags, the agent, output
 * formats, exit codes) and run_view.c (the demo view: a readable live log
 * of the LoopEvents on stderr). */
#ifndef AL_CLIENT_RUN_INT_H
#define AL_CLIENT_RUN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "agentloop/events.h"

/* The demo view. One line per notable event, each stamped with the
 * milliseconds since run_started; streamed text and thinking are shown as
 * they arrive, interleaved with the tool lines.
 *
 * "Reply still streaming": a reply's stream is open from its
 * stream_request_start until its `usage` event, which the loop posts once
 * per response when the provider reports the final counts (message_delta /
 * the last chunk), i.e. after the last content block of that response. A
 * tool_use_started seen inside that window started while the model was
 * still writing the reply, and its line says so. A retry, a tombstone or
 * the end of the turn also close the window. */
typedef struct al__cli_view_s {
  FILE *f;
  bool color;
  bool started;        /* run_started seen: t0 is valid */
  uint64_t t0_ns;
  uint32_t turn;
  bool streaming;      /* a reply's stream is open (see above) */
  uint32_t tools_in_reply;
  uint32_t tools_early;  /* started while the reply was streaming */
  /* An open text or thinking line (no newline written yet). */
  int open_block;      /* -1: none */
  bool open_thinking;
  bool at_line_start;  /* inside the open block: the last byte was \n */
} al__cli_view_t;

void al__cli_view_init(al__cli_view_t *v, FILE *f, bool color);
/* Writes what `ev` shows (often nothing) and flushes. */
void al__cli_view_event(al__cli_view_t *v, const al_event_t *ev);
/* Ends an open text line (before the caller writes to the same stream). */
void al__cli_view_flush(al__cli_view_t *v);

#endif
