/* The job engine (batch_engine.h): one job's life, whoever drives it.
 * Cut out of batch.c so that `agentloop batch run` and the fleet worker
 * run a job alike (same fields, workspaces, resume, result JSON). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "client/batch_engine.h"
#include "client/cli.h"
#include "client/run_int.h"
#include "common/common.h"
#include "config/agent_opts.h"
#include "config/agentdefs.h"
#include "config/config.h"
#include "loop/history.h"
#include "session/session.h"

/* What a resumed session is told when its transcript holds the prompt
 * already. */
#define RESUME_TEXT                                                  \
  "(agentloop batch: the previous run of this job was interrupted; " \
  "continue the task from where it stopped.)"

static const char *env_get(const char *name) {
  const char *v = name != NULL ? al_sandbox_getenv(name) : NULL;

  return v != NULL && *v != '\0' ? v : NULL;
}

uint64_t al__bengine_now_ms(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

json_t *al__bjob_result_json(const al_bjob_t *j) {
  json_t *o = json_object();
  json_t *usage = json_pack(
      "{s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)j->stats.input_tokens,
      "output_tokens", (json_int_t)j->stats.output_tokens,
      "cache_read_input_tokens", (json_int_t)j->stats.cache_read_input_tokens,
      "cache_creation_input_tokens",
      (json_int_t)j->stats.cache_creation_input_tokens);

  json_object_set_new(o, "id", json_string(j->spec->id));
  json_object_set_new(o, "outcome", json_string(j->outcome));
  json_object_set_new(o, "text",
                      j->text != NULL ? json_string(j->text) : json_null());
  json_object_set_new(o, "turns", json_integer(j->stats.turns));
  json_object_set_new(o, "usage", usage != NULL ? usage : json_null());
  json_object_set_new(
      o, "cost_usd",
      j->stats.cost_usd >= 0 ? json_real(j->stats.cost_usd) : json_null());
  json_object_set_new(
      o, "duration_ms",
      json_integer((json_int_t)(al__bengine_now_ms() - j->t0_ms)));
  json_object_set_new(
      o, "error_kind",
      j->error_kind[0] != '\0' ? json_string(j->error_kind) : json_null());
  json_object_set_new(o, "session", json_string(j->sess.path));
  if (j->recovered) {
    json_object_set_new(o, "recovered", json_true());
  }
  return o;
}

/* ---- the gate ------------------------------------------------------------ */

static bool gate(al_bjob_t *j) {
  al_bengine_t *e = j->e;

  if (j->fenced || (j->storage && j->no_result)) {
    return false;
  }
  if (e->drv->admit != NULL && j->sess.failing != 0) {
    /* Its transcript cannot be written (fleet mode): nothing it does can
     * be made durable, so it stops now, without a result. */
    snprintf(j->why, sizeof(j->why), "%s: %s", j->sess.path,
             al_strerror(j->sess.failing));
    j->storage = true;
    j->no_result = true;
    return false;
  }
  if (e->drv->admit != NULL && !e->drv->admit(j)) {
    j->fenced = true;
    j->no_result = true;
    return false;
  }
  return true;
}

static bool agent_admit(al_agent_t *agent, void *data) {
  (void)agent;
  return gate(data);
}

static bool sess_admit(void *data) {
  return gate(data);
}

/* ---- a job's end ----------------------------------------------------------
 */

static void free_opts(al_bjob_t *j) {
  if (j->opts_init && !j->opts_freed) {
    j->opts_freed = true;
    al_agent_opts_store_free(&j->store);
    al_config_free(&j->cfg);
  }
}

static void job_done(al_bjob_t *j) {
  al_bengine_t *e = j->e;

  j->state = AL_BJOB_DONE;
  e->active--;
  if (j->prev != NULL) {
    j->prev->next = j->next;
  } else {
    e->running = j->next;
  }
  if (j->next != NULL) {
    j->next->prev = j->prev;
  }
  free_opts(j);
  al_free(j->text);
  j->text = NULL;
  e->drv->on_end(j);
  al__run_session_free(&j->sess);
  al_buf_free(&j->sysprompt);
  al_buf_free(&j->preamble);
  if (j->timer_closing) {
    j->free_pending = true;
  } else {
    al_free(j);
  }
}

static void on_ws_removed(al_batch_ws_t *w, int status, const char *why) {
  al_bjob_t *j = w->data;

  if (status != 0) {
    fprintf(stderr, "%s: job %s: %s\n", j->e->who, j->spec->id, why);
  }
  job_done(j);
}

void al__bjob_stored(al_bjob_t *j, int status) {
  al_free(j->text);
  j->text = NULL;
  if (!j->e->keep_ws && j->ws_made && status == 0) {
    j->state = AL_BJOB_CLEANUP;
    al__batch_ws_remove(&j->ws, on_ws_removed);
    return;
  }
  job_done(j);
}

static void finish(al_bjob_t *j) {
  if (j->no_result) {
    /* Stopped, fenced or not saved: no result; the next run (or owner)
     * resumes the session. */
    job_done(j);
    return;
  }
  j->state = AL_BJOB_STORING;
  j->e->drv->on_result(j);
}

static void on_sess_closed(al__run_session_t *rs, void *data) {
  al_bjob_t *j = data;

  (void)rs;
  if (j->sess.loss.err != 0 && !j->no_result) {
    /* Not durable: no result either; the rerun resumes what was saved. */
    al__run_session_loss_text(&j->sess, j->why, sizeof(j->why));
    fprintf(stderr, "%s: job %s: %s\n", j->e->who, j->spec->id, j->why);
    j->no_result = true;
    j->storage = true;
  }
  finish(j);
}

static void on_agent_closed(al_agent_t *agent) {
  al_bjob_t *j = al_agent_get_data(agent);

  j->agent = NULL;
  free_opts(j);
  al__run_session_agent_closed(&j->sess);
  if (j->sess.tx != NULL) {
    j->sess.on_closed = on_sess_closed;
    j->sess.closed_data = j;
    al__run_session_close(&j->sess);
    return;
  }
  finish(j);
}

static void on_timer_closed(uv_handle_t *h) {
  al_bjob_t *j = h->data;

  j->timer_closing = false;
  if (j->free_pending) {
    al_free(j);
  }
}

static void end_job(al_bjob_t *j) {
  j->state = AL_BJOB_CLOSING;
  if (j->timer_open) {
    j->timer_open = false;
    j->timer_closing = true;
    uv_close((uv_handle_t *)&j->timer, on_timer_closed);
  }
  al_agent_stats(j->agent, &j->stats);
  if (j->sub != NULL) {
    al_agent_unsubscribe(j->agent, j->sub);
    j->sub = NULL;
  }
  al_agent_close(j->agent, on_agent_closed);
}

static void set_error(al_bjob_t *j, const char *outcome, const char *kind,
                      al_slice_t msg) {
  j->outcome = outcome;
  snprintf(j->error_kind, sizeof(j->error_kind), "%s", kind);
  al_free(j->text);
  j->text = msg.ptr != NULL ? al_strndup(msg.ptr, msg.len) : NULL;
}

static void on_event(const al_event_t *ev, void *data) {
  al_bjob_t *j = data;

  if (j->state != AL_BJOB_RUNNING) {
    return;
  }
  al__run_session_event(&j->sess, ev);
  if (ev->path != NULL) {
    return; /* a sub-agent's */
  }
  switch (ev->type) {
    case AL_EVENT_MAX_TURNS_REACHED:
      j->max_turns = true;
      break;
    case AL_EVENT_FINAL:
      j->outcome = j->max_turns ? "max_turns" : "done";
      if (j->max_turns) {
        snprintf(j->error_kind, sizeof(j->error_kind), "max_turns");
      }
      al_free(j->text);
      j->text = ev->u.final.text.ptr != NULL
                    ? al_strndup(ev->u.final.text.ptr, ev->u.final.text.len)
                    : NULL;
      end_job(j);
      break;
    case AL_EVENT_ERROR:
      set_error(j, "error", al_err_name(ev->u.error.code), ev->u.error.message);
      end_job(j);
      break;
    case AL_EVENT_INTERRUPTED:
      set_error(j, j->timed_out ? "timeout" : "interrupted",
                j->timed_out ? "timeout" : "interrupted",
                ev->u.interrupted.reason);
      if (j->timed_out) {
        char msg[64];

        al_free(j->text);
        snprintf(msg, sizeof(msg), "timed out after %.3g s",
                 (double)j->timeout_ms / 1000.0);
        j->text = al_strdup(msg);
      }
      if (j->e->stopping) {
        j->no_result = true;
      }
      end_job(j);
      break;
    default:
      break;
  }
}
/* The text of the last message when it is the assistant's answer (no
 * tool call): a session that ended before its result was written. */
static char *answered_text(const al_history_t *h) {
  const json_t *msgs = al__history_to_json(h);
  const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
  const json_t *c = json_object_get(last, "content");
  const json_t *blk;
  const char *role = json_string_value(json_object_get(last, "role"));
  al_buf_t t;
  size_t i;

  if (role == NULL || strcmp(role, "assistant") != 0) {
    return NULL;
  }
  if (json_is_string(c)) {
    return al_strdup(json_string_value(c));
  }
  al_buf_init(&t, 64u << 20);
  json_array_foreach(c, i, blk) {
    const char *ty = json_string_value(json_object_get(blk, "type"));

    if (ty != NULL && strcmp(ty, "tool_use") == 0) {
      al_buf_free(&t);
      return NULL;
    }
    if (ty != NULL && strcmp(ty, "text") == 0) {
      al_buf_append_str(&t, json_string_value(json_object_get(blk, "text")));
    }
  }
  if (t.data == NULL) {
    return al_strdup("");
  }
  return t.data;
}

static void on_job_timeout(uv_timer_t *t) {
  al_bjob_t *j = t->data;

  if (j->state == AL_BJOB_RUNNING && !j->timed_out) {
    j->timed_out = true;
    (void)al_agent_cancel(j->agent); /* posts interrupted: end_job */
  }
}

static void fail_job(al_bjob_t *j, const char *kind, const char *why) {
  j->outcome = "error";
  snprintf(j->error_kind, sizeof(j->error_kind), "%s", kind);
  al_free(j->text);
  j->text = al_strdup(why);
  fprintf(stderr, "%s: job %s: %s\n", j->e->who, j->spec->id, why);
  finish(j);
}

static void on_ws_ready(al_batch_ws_t *w, int status, const char *why) {
  al_bjob_t *j = w->data;
  al_bengine_t *e = j->e;
  char err[PATH_MAX + 256];
  const char *text;
  int rc;

  if (e->stopping || j->no_result) {
    j->no_result = true; /* stopped meanwhile */
    finish(j);
    return;
  }
  if (status != 0) {
    fail_job(j, "workspace", why);
    return;
  }
  j->ws_made = j->spec->mode != AL_BATCH_WS_INPLACE;
  if (j->recovered) {
    j->outcome = "done";
    finish(j);
    return;
  }
  j->o.workspace = w->path;
  rc = al_agent_new(e->loop, &j->o, &j->agent);
  if (rc != 0) {
    snprintf(err, sizeof(err), "cannot create the agent: %s", al_strerror(rc));
    fail_job(j, al_err_name(rc), err);
    return;
  }
  j->hdr.cwd = w->path;
  rc = al__run_session_attach(&j->sess, e->loop, j->agent, &j->hdr, err,
                              sizeof(err));
  if (rc != 0 && e->drv->admit != NULL && j->sess.tx == NULL) {
    /* The transcript cannot be opened (a read-only or full disk): no
     * result may be given without it; the job goes back unfinished. */
    snprintf(j->why, sizeof(j->why), "%s", err);
    fprintf(stderr, "%s: job %s: %s\n", e->who, j->spec->id, err);
    j->storage = true;
    j->no_result = true;
  }
  if (rc == 0) {
    rc = al_agent_subscribe(j->agent, on_event, j, &j->sub);
  }
  text =
      j->sess.resumed && al__history_to_json(&j->sess.loaded.history) != NULL &&
              json_array_size(al__history_to_json(&j->sess.loaded.history)) > 0
          ? RESUME_TEXT
          : j->spec->prompt;
  j->state = AL_BJOB_RUNNING;
  if (rc == 0) {
    rc = al_agent_run(j->agent, text);
    if (rc == 0 && j->timeout_ms > 0) {
      uv_timer_init(e->loop, &j->timer);
      j->timer.data = j;
      j->timer_open = true;
      uv_timer_start(&j->timer, on_job_timeout, j->timeout_ms, 0);
    }
    if (rc != 0) {
      snprintf(err, sizeof(err), "cannot start the run: %s", al_strerror(rc));
    }
  }
  if (rc != 0) {
    j->outcome = "error";
    snprintf(j->error_kind, sizeof(j->error_kind), "%s", al_err_name(rc));
    j->text = al_strdup(err);
    end_job(j);
  }
}

static bool prepare_job(al_bengine_t *e, al_bjob_t *j);

static void prep_work(uv_work_t *req) {
  al_bjob_t *j = req->data;

  j->prepared = prepare_job(j->e, j);
}

static void prep_done(uv_work_t *req, int status) {
  al_bjob_t *j = req->data;
  al_bengine_t *e = j->e;

  (void)status;
  if (e->stopping || j->no_result) {
    j->no_result = true; /* stopped meanwhile */
    finish(j);
    return;
  }
  if (e->drv->on_started != NULL) {
    e->drv->on_started(j);
  }
  if (!j->prepared) {
    fail_job(j, "config", j->why);
    return;
  }
  j->state = AL_BJOB_WORKSPACE;
  al__batch_ws_prepare(&j->ws, e->loop, j->spec, e->work_dir, j->sess.resumed,
                       on_ws_ready, j);
}

al_bjob_t *al__bjob_start(al_bengine_t *e, al_batch_job_t *spec, void *data) {
  al_bjob_t *j = al_calloc(1, sizeof(*j));

  if (j == NULL) {
    return NULL;
  }
  j->e = e;
  j->data = data;
  j->spec = spec;
  j->next = e->running;
  if (e->running != NULL) {
    e->running->prev = j;
  }
  e->running = j;
  j->state = AL_BJOB_PREPARING;
  j->t0_ms = al__bengine_now_ms();
  j->stats.cost_usd = -1; /* null until an agent's stats say */
  e->active++;
  j->prep.data = j;
  uv_queue_work(e->loop, &j->prep, prep_work, prep_done);
  return j;
}

void al__bjob_stop(al_bjob_t *j, bool fenced) {
  if (fenced) {
    j->fenced = true; /* the gates say no from now on */
  }
  j->no_result = true;
  /* A job being prepared or getting its workspace ends at the next step;
   * a running one ends at once (interrupted; nothing is written when
   * fenced). */
  if (j->state == AL_BJOB_RUNNING && j->agent != NULL) {
    (void)al_agent_cancel(j->agent);
  }
}

void al__bengine_stop(al_bengine_t *e) {
  al_bjob_t *j, *next;

  e->stopping = true;
  for (j = e->running; j != NULL; j = next) {
    /* A cancel ends the job's run at once (interrupted): the job may
     * leave the list meanwhile. */
    next = j->next;
    if (j->state == AL_BJOB_RUNNING) {
      al__bjob_stop(j, false);
    }
  }
}

const al_subagent_def_t *al__bengine_job_agent(
    const struct al_agentdefs_s *agents, const char *name) {
  const al_subagent_def_t *d = al_agentdefs_find(agents, name);
  size_t i, n;

  if (d == NULL) {
    const al_subagent_def_t *bi = al_subagent_builtins(&n);

    for (i = 0; i < n && d == NULL; i++) {
      d = strcmp(bi[i].name, name) == 0 ? &bi[i] : NULL;
    }
  }
  return d;
}

static bool prepare_job(al_bengine_t *e, al_bjob_t *j) {
  al_batch_job_t *s = j->spec;
  al_agent_opts_input_t in;
  const char *keys[] = {"model", "base_url"};
  const char *vals[] = {s->model, s->base_url};
  const char *const *tools = (const char *const *)s->tools;
  const char *src;
  char why[1024];
  size_t i;
  int rc;

  al_sandbox_policy_t policy = AL_SANDBOX_AUTO;

  al_agent_opts_store_init(&j->store);
  j->opts_init = true; /* cfg is initialized by the load, either way */
  al_buf_init(&j->sysprompt, 128u << 20);
  al_buf_init(&j->preamble, 128u << 20);
  if (al__cli_config_load_for(&j->cfg, NULL, false, s->provider,
                              "agentloop batch") != 0) {
    snprintf(j->why, sizeof(j->why),
             "the configuration does not load "
             "(the reason is on stderr)");
    return false;
  }
  if (s->provider != NULL &&
      al_config_set_flag(&j->cfg, "provider", s->provider, "provider", why,
                         sizeof(why)) != 0) {
    snprintf(j->why, sizeof(j->why), "%s", why);
    return false;
  }
  for (i = 0; i < 2; i++) {
    if (vals[i] != NULL && al_config_set_flag(&j->cfg, keys[i], vals[i],
                                              keys[i], why, sizeof(why)) != 0) {
      snprintf(j->why, sizeof(j->why), "%s", why);
      return false;
    }
  }
  {
    const char *var = NULL;

    /* As run says it (exit 2 there): before anything is sent. */
    if (al_config_api_key(&j->cfg, env_get, &var) == NULL &&
        al__cli_public_endpoint(j->cfg.base_url)) {
      snprintf(
          j->why, sizeof(j->why), "no API key for %s: set %s",
          j->cfg.base_url != NULL ? j->cfg.base_url : "the public endpoint",
          var != NULL ? var : "the provider's key variable");
      return false;
    }
  }
  rc = al__run_session_prepare_at(&j->sess, e->sessions_dir, s->id, why,
                                  sizeof(why));
  if (rc != 0) {
    snprintf(j->why, sizeof(j->why), "%s", why);
    return false;
  }
  if (j->sess.resumed && !j->sess.loaded.run_open) {
    j->text = answered_text(&j->sess.loaded.history);
    j->recovered = j->text != NULL;
    j->stats.cost_usd = -1; /* not known from the transcript: null */
  }
  /* The workspace the job will run in; its instruction files are read
   * from the source (a copy or a checkout of it). */
  src = s->ws_src;
  if (s->mode == AL_BATCH_WS_INPLACE || s->mode == AL_BATCH_WS_COPY) {
    char real[PATH_MAX];
    struct stat st;

    if (realpath(s->ws_src, real) == NULL || stat(real, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      snprintf(j->why, sizeof(j->why), "workspace %.3000s: not a directory",
               s->ws_src);
      return false;
    }
    al_free(s->ws_src);
    s->ws_src = al_strdup(real);
    src = s->ws_src;
  }
  if (s->mode == AL_BATCH_WS_INPLACE) {
    snprintf(j->ws_real, sizeof(j->ws_real), "%s", s->ws_src);
  } else {
    snprintf(j->ws_real, sizeof(j->ws_real), "%.3000s/work/%s", e->work_dir,
             s->id);
  }
  if (j->cfg.sandbox.mode != NULL) {
    (void)al_config_sandbox_policy(j->cfg.sandbox.mode, &policy);
  }
  if (al__cli_system_prompt(&j->cfg, src, policy, NULL, &j->sysprompt,
                            "agentloop batch") != 0 ||
      al__cli_task_preamble(&j->cfg, src, policy, &j->preamble) != 0) {
    snprintf(j->why, sizeof(j->why), "out of memory");
    return false;
  }
  al_agent_opts_input_init(&in);
  in.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  in.workspace = j->ws_real;
  in.system = j->sysprompt.data;
  in.getenv_fn = env_get;
  in.models = e->models;
  in.mcp_project = true;
  in.flags.max_turns = s->max_turns;
  in.flags.max_tokens = s->max_tokens;
  in.flags.limits = &s->limits;
  in.flags.allow_tools = tools;
  in.flags.sandbox = -1;
  in.flags.retries = -1;
  in.subagents = e->agents->defs;
  in.n_subagents = e->agents->n;
  in.task_preamble = j->preamble.data;
  /* A job's main agent: batch run checked every job's before it started;
   * a fleet job is checked here. */
  in.main_agent =
      s->agent != NULL ? al__bengine_job_agent(e->agents, s->agent) : NULL;
  if (s->agent != NULL && in.main_agent == NULL) {
    snprintf(j->why, sizeof(j->why),
             "no agent definition named '%.200s' (agentloop agents lists "
             "them)",
             s->agent);
    return false;
  }
  in.model_flag = s->model != NULL;
  rc =
      al_config_agent_options(&j->cfg, &in, &j->o, &j->store, why, sizeof(why));
  if (rc != 0) {
    snprintf(j->why, sizeof(j->why), "%s", why);
    return false;
  }
  j->o.client = e->client;
  j->o.data = j;
  j->timeout_ms = s->timeout_ms != 0 ? s->timeout_ms
                  : j->cfg.timeouts.run_ms > 0
                      ? (uint64_t)j->cfg.timeouts.run_ms
                      : 0;
  al__run_session_options(&j->sess, &j->o);
  if (e->drv->admit != NULL) {
    j->o.admit = agent_admit;
    j->o.admit_data = j;
    j->sess.admit = sess_admit;
    j->sess.admit_data = j;
    j->sess.admit_window_ms = e->admit_window_ms;
    j->sess.no_lock = true;
  }
  j->hdr.model = (char *)j->o.model;
  j->hdr.provider = (char *)j->o.provider;
  j->hdr.base_url = (char *)j->o.base_url;
  j->hdr.system = (char *)j->o.system;
  j->hdr.created_ms = (uint64_t)time(NULL) * 1000u;
  return true;
}
