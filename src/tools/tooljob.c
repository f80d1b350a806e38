/* Shared lifecycle of the threadpool tool jobs (see tooljob.h). */
#include "tools/tooljob.h"

#include <string.h>

#include "executor/executor.h"

void al__tooljob_init(al_tooljob_t *j, al_tool_call_t *call,
                      const char *tool, size_t raw_max,
                      void (*free_job)(al_tooljob_t *j)) {
  j->call = call;
  j->tool = tool;
  atomic_init(&j->cancelled, 0);
  j->free_job = free_job;
  al_buf_init(&j->raw, raw_max);
  al_buf_init(&j->out, SIZE_MAX / 2);
}

static void tooljob_after(uv_work_t *req, int status) {
  al_tooljob_t *j = AL_CONTAINER_OF(req, al_tooljob_t, req);
  al_tool_call_t *call = j->call;

  call->tool_data = NULL;
  if (status != 0) {
    /* uv_cancel() won: the work never ran. The result is dropped. */
    al__executor_call_complete(call, true, "cancelled", 9);
  } else {
    al__executor_call_complete(call, j->is_error,
                               j->out.len ? j->out.data : "", j->out.len);
  }
  j->free_job(j);
}

int al__tooljob_queue(al_tooljob_t *j, uv_loop_t *loop, uv_work_cb work) {
  int rc = uv_queue_work(loop, &j->req, work, tooljob_after);

  if (rc == 0) {
    j->call->tool_data = j;
  }
  return rc;
}

void al__tooljob_cancel(al_tool_call_t *call) {
  al_tooljob_t *j = call->tool_data;

  if (j == NULL) {
    return;
  }
  atomic_store(&j->cancelled, 1);
  /* Succeeds only if the work has not begun; tooljob_after runs either
   * way. */
  uv_cancel((uv_req_t *)&j->req);
}

bool al__tooljob_cancelled(const al_tooljob_t *j) {
  return atomic_load(&j->cancelled) != 0;
}

void al__tooljob_preset(al_tooljob_t *j, const char *fmt, const char *param) {
  j->preset = true;
  j->is_error = true;
  al_buf_printf(&j->raw, "%s: invalid arguments: ", j->tool);
  al_buf_printf(&j->raw, fmt, param);
}

void al__tooljob_release(al_tooljob_t *j) {
  al_buf_free(&j->raw);
  al_buf_free(&j->out);
}

int al__fstool_conf_init(al_fstool_conf_t *c,
                         const al_fstools_options_t *opts) {
  memset(c, 0, sizeof(*c));
  if (opts == NULL || opts->loop == NULL || opts->workspace == NULL) {
    return AL_EINVAL;
  }
  c->loop = opts->loop;
  c->output_max =
      opts->output_max ? opts->output_max : AL_FSTOOLS_DEFAULT_OUTPUT_MAX;
  c->display_max =
      opts->display_max ? opts->display_max : AL_FSTOOLS_DEFAULT_DISPLAY_MAX;
  c->list_max = opts->list_max ? opts->list_max : AL_FSTOOLS_DEFAULT_LIST_MAX;
  c->scan_max = opts->scan_max ? opts->scan_max : AL_FSTOOLS_DEFAULT_SCAN_MAX;
  c->edit_max = opts->edit_max ? opts->edit_max : AL_FSTOOLS_DEFAULT_EDIT_MAX;
  c->time_limit_ms = opts->time_limit_ms;
  al__pathpolicy_init(&c->policy);
  return al__pathpolicy_set(&c->policy, opts->workspace, opts->allowed_paths,
                            opts->n_allowed_paths, opts->denied_paths,
                            opts->n_denied_paths);
}

void al__fstool_conf_free(al_fstool_conf_t *c) {
  al__pathpolicy_free(&c->policy);
}
