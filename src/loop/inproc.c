/* In-process tools (STYLE §6.1): al_agent_add_tool and the al_tool_ctx_*
 * contexts their run callbacks get (include/agentloop/tools.h). A context
 * lives until both the tool completed it and the executor released the
 * call; a->reg.live_ctx counts them (written here only) so a closed agent
 * waits for them. Calls down: the registry (al__agent_add_entry), the
 * executor's call API, core.c. */
#include <stdio.h>
#include <string.h>

#include "loop/agent_priv.h"

struct al_tool_ctx_s {
  al_agent_t *agent;
  ag_tool_t *tool;
  al_tool_call_t *call;
  char *id;
  char *name;
  char *input;
  void *data;
  uv_timer_t timer;
  bool cancelled;
  bool completed;  /* al_tool_ctx_complete was called */
  bool exec_done;  /* the executor call was completed (released) */
  bool entered;    /* def.run was called */
};

static const char cancelled_text[] = AL_HISTORY_CANCELLED_TEXT;

/* ---- in-process tools ---------------------------------------------------- */

const char *al_tool_ctx_id(const al_tool_ctx_t *ctx) { return ctx->id; }
const char *al_tool_ctx_name(const al_tool_ctx_t *ctx) { return ctx->name; }
const char *al_tool_ctx_input(const al_tool_ctx_t *ctx) { return ctx->input; }
bool al_tool_ctx_cancelled(const al_tool_ctx_t *ctx) { return ctx->cancelled; }
void al_tool_ctx_set_data(al_tool_ctx_t *ctx, void *data) { ctx->data = data; }
void *al_tool_ctx_get_data(const al_tool_ctx_t *ctx) { return ctx->data; }

static void ctx_on_close(uv_handle_t *h) {
  al_tool_ctx_t *ctx = h->data;
  al_agent_t *a = ctx->agent;

  al_free(ctx->id);
  al_free(ctx->name);
  al_free(ctx->input);
  al_free(ctx);
  a->reg.live_ctx--;
  al__agent_maybe_finish(a);
}

int al_tool_ctx_progress(al_tool_ctx_t *ctx, const char *text, size_t len) {
  al_event_t ev;

  if (ctx->cancelled || ctx->completed) {
    return AL_ECANCELED;
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_TOOL_PROGRESS;
  ev.u.tool.call_id = ag_slice(ctx->id);
  ev.u.tool.name = ag_slice(ctx->name);
  ev.u.tool.content.ptr = text != NULL ? text : "";
  ev.u.tool.content.len = text != NULL ? len : 0;
  al__agent_post(ctx->agent, &ev);
  return 0;
}

void al_tool_ctx_complete(al_tool_ctx_t *ctx, bool is_error,
                          const char *content, size_t len) {
  al__tool_ctx_complete_blocks(ctx, is_error, content, len, NULL);
}

void al__tool_ctx_complete_blocks(al_tool_ctx_t *ctx, bool is_error,
                                  const char *content, size_t len,
                                  const json_t *blocks) {
  if (ctx->completed) {
    return;
  }
  ctx->completed = true;
  uv_timer_stop(&ctx->timer);
  if (!ctx->exec_done) {
    ctx->exec_done = true;
    al__executor_call_complete_blocks(ctx->call, is_error,
                                      content != NULL ? content : "",
                                      content != NULL ? len : 0, blocks);
  }
  uv_close((uv_handle_t *)&ctx->timer, ctx_on_close);
}

static void ctx_on_timeout(uv_timer_t *timer) {
  al_tool_ctx_t *ctx = timer->data;
  al_tool_call_t *call = ctx->call;
  ag_tool_t *t = ctx->tool;
  char secs[32];

  ctx->cancelled = true;
  ctx->exec_done = true;
  snprintf(secs, sizeof(secs), "%.3g",
           (double)(t->def.timeout_ms ? t->def.timeout_ms
                                      : AG_TOOL_DEFAULT_TIMEOUT_MS) /
               1000.0);
  /* The result goes to the model now; the tool's own completion, when it
   * comes, only frees the context. */
  al__call_complete_fmt(call, "Error: tool '%s' timed out after %s s", t->name,
                        secs);
  if (t->def.cancel != NULL) {
    t->def.cancel(ctx, t->def.data);
  }
}

static int inproc_start(al_tool_call_t *call) {
  ag_tool_t *t = AL_CONTAINER_OF(call->impl, ag_tool_t, inproc_impl);
  al_agent_t *a = t->agent;
  al_tool_ctx_t *ctx = al_calloc(1, sizeof(*ctx));
  uint64_t timeout = t->def.timeout_ms ? t->def.timeout_ms
                                       : AG_TOOL_DEFAULT_TIMEOUT_MS;

  if (ctx == NULL) {
    return AL_ENOMEM;
  }
  ctx->agent = a;
  ctx->tool = t;
  ctx->call = call;
  ctx->id = al_strdup(call->id);
  ctx->name = al_strdup(call->name);
  ctx->input = al__tool_input_text(call->input);
  if (ctx->id == NULL || ctx->name == NULL || ctx->input == NULL) {
    al_free(ctx->id);
    al_free(ctx->name);
    al_free(ctx->input);
    al_free(ctx);
    return AL_ENOMEM;
  }
  uv_timer_init(a->loop, &ctx->timer);
  ctx->timer.data = ctx;
  a->reg.live_ctx++;
  call->tool_data = ctx;
  uv_timer_start(&ctx->timer, ctx_on_timeout, timeout, 0);
  /* "Started" means the tool's callback is entered, which is next. */
  al__agent_post_tool(a, AL_EVENT_TOOL_USE_STARTED, call, ctx->input);
  if (ctx->cancelled) {
    /* A subscriber cancelled the run inside that event. */
    al_tool_ctx_complete(ctx, true, cancelled_text, strlen(cancelled_text));
    return 0;
  }
  ctx->entered = true;
  t->def.run(ctx, t->def.data);
  return 0;
}

static void inproc_cancel(al_tool_call_t *call) {
  al_tool_ctx_t *ctx = call->tool_data;
  ag_tool_t *t;

  if (ctx == NULL || ctx->exec_done || ctx->cancelled) {
    return;
  }
  t = ctx->tool;
  ctx->cancelled = true;
  uv_timer_stop(&ctx->timer);
  /* Cancelled from a subscriber of tool_use_started, before run: the tool
   * never saw the call, so its cancel must not either (it would find no
   * state of its own); inproc_start completes the call. */
  if (t->def.cancel != NULL && ctx->entered) {
    t->def.cancel(ctx, t->def.data);
  }
}

static bool inproc_safe(const al_tool_impl_t *impl, const json_t *input) {
  (void)impl;
  (void)input;
  return true;
}

int al_agent_add_tool(al_agent_t *a, const al_tool_def_t *def) {
  if (ag_closing(a)) {
    return AL_ECLOSING;
  }
  if (a->run.state != AG_IDLE) {
    return AL_EBUSY;
  }
  return al__agent_add_inproc(a, def, NULL);
}

int al__agent_add_inproc(al_agent_t *a, const al_tool_def_t *def,
                         ag_tool_t **out) {
  ag_tool_t *t;
  int rc;

  if (def == NULL || def->run == NULL) {
    return AL_EINVAL;
  }
  rc = al__agent_add_entry(a, def->name, NULL, NULL, def->description,
                 def->input_schema, def->category, &t);
  if (rc != 0) {
    return rc;
  }
  if (out != NULL) {
    *out = t;
  }
  t->inproc = true;
  t->source = "in-process";
  t->def = *def;
  t->def.name = t->name;
  t->def.description = t->description;
  t->def.input_schema = NULL;
  t->inproc_impl.name = t->name;
  t->inproc_impl.is_concurrency_safe =
      def->concurrency_safe ? inproc_safe : NULL;
  t->inproc_impl.start = inproc_start;
  t->inproc_impl.cancel = inproc_cancel;
  t->inproc_impl.data = t;
  t->inner = &t->inproc_impl;
  return 0;
}

