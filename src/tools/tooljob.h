/* The part every threadpool tool job shares (file tools, grep/glob): one
 * uv_work_t per call, a cancel flag the work polls, the raw output the
 * work produces and the final text the call completes with. A tool's job
 * struct embeds al_tooljob_t as its first member `j`. Lifecycle:
 * al__tooljob_init on the loop, al__tooljob_queue, the work on a pool
 * thread, then (on the loop) the call completes with j.out and free_job
 * runs; al__tooljob_cancel from the tool's cancel hook. */
#ifndef AL_TOOLS_TOOLJOB_H
#define AL_TOOLS_TOOLJOB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/common.h"
#include "tools/tools.h"

typedef struct al_tooljob_s al_tooljob_t;
struct al_tooljob_s {
  uv_work_t req;
  al_tool_call_t *call;
  const char *tool; /* the tool's name, for error texts */
  atomic_int cancelled;
  bool preset;      /* raw already holds an argument error: no work */
  bool is_error;
  al_buf_t raw;        /* what the tool produced, raw bytes */
  size_t extra_chars;  /* counted, not kept (past the tool's output_max) */
  al_buf_t out;        /* the text the call completes with */
  uint64_t t0;         /* uv_hrtime() when the work began */
  void (*free_job)(al_tooljob_t *j); /* frees the embedding job */
};

/* What every file-system tool instance holds (read_file, write_file,
 * edit_file, list_directory, done, grep, glob), from the options, with
 * the defaults applied. */
typedef struct al_fstool_conf_s {
  uv_loop_t *loop;
  al_pathpolicy_t policy;
  size_t output_max;
  size_t display_max;
  size_t list_max;
  size_t scan_max;        /* read_file: bytes counted past what is kept */
  size_t edit_max;        /* edit_file: largest file it reads */
  uint64_t time_limit_ms; /* per call; 0: none */
} al_fstool_conf_t;

/* AL_EINVAL without a loop or a workspace; the path policy's errors. */
int al__fstool_conf_init(al_fstool_conf_t *c,
                         const al_fstools_options_t *opts);
void al__fstool_conf_free(al_fstool_conf_t *c);

/* raw keeps at most raw_max bytes. */
void al__tooljob_init(al_tooljob_t *j, al_tool_call_t *call,
                      const char *tool, size_t raw_max,
                      void (*free_job)(al_tooljob_t *j));
/* Queues work; on success the call owns the job (call->tool_data). On
 * failure nothing is queued and the caller still owns the job. */
int al__tooljob_queue(al_tooljob_t *j, uv_loop_t *loop, uv_work_cb work);
/* The tool's cancel hook: sets the flag the work polls and cancels the
 * work if it has not begun; the completion runs either way. */
void al__tooljob_cancel(al_tool_call_t *call);
bool al__tooljob_cancelled(const al_tooljob_t *j);
/* An argument error, "TOOL: invalid arguments: " + fmt with param. */
void al__tooljob_preset(al_tooljob_t *j, const char *fmt, const char *param);
/* Frees raw and out (the embedding job frees the rest). */
void al__tooljob_release(al_tooljob_t *j);

#endif
