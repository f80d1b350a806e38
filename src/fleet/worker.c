/* The fleet worker (worker.h, docs/fleet.md "The worker").
 *
 * Timers on the daemon's loop drive it: intake (a poll while Redis is up
 * and slots are free: XREADGROUP COUNT = free slots), renewal (every
 * lease/3, every in-flight job), reap (every lease/2: XAUTOCLAIM of
 * entries idle a lease, dead letters past max_deliveries). A job taken is
 * claimed (an epoch and the owner key), its JSON read, then run by the job
 * engine; its result, once the final transcript record is durable, goes
 * out with al_fleet_queue_complete.
 *
 * The fence: each job's lease is counted locally from the send time of
 * its last successful claim or renewal (monotonic clock, which runs on
 * while the process is stopped). A model request or a transcript append
 * may start only with at least lease/3 left (the engine's gate); past it,
 * or when a renewal is fenced out, the job stops at once and writes
 * nothing more: another worker may own it already. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "client/batch_engine.h"
#include "client/cli.h"
#include "client/tui.h"
#include "common/common.h"
#include "config/agentdefs.h"
#include "config/config.h"
#include "fleet/fleet.h"
#include "fleet/worker.h"

#define WHO "agentloopd"

/* GET the job and its delivery count in one round trip. KEYS: job,
 * jobs. ARGV: group, entry id. */
static const char fetch_lua[] =
    "local b = redis.call('GET', KEYS[1])\n"
    "local p = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1)\n"
    "local n = 0\n"
    "if p[1] then n = p[1][4] end\n"
    "return {b, n}\n";

typedef struct fjob_s {
  al_fleet_worker_t *w;
  struct fjob_s *prev, *next;
  char id[64];
  char entry[64];
  int64_t epoch;
  int64_t deliveries;
  uint64_t lease_t0; /* send time of the last good claim / renewal */
  uint64_t sent;     /* of the claim or renewal in flight */
  bool renewing;
  bool gone;        /* the slot is free; freed when no command is out */
  unsigned cmds;    /* our commands in flight (their callbacks use us) */
  bool handed_back; /* the drain's grace is over: give it back */
  bool reaped;      /* taken over from a worker that did not finish it */
  al_batch_job_t *spec;
  size_t nspec;
  al_bjob_t *bj;
} fjob_t;

struct al_fleet_worker_s {
  uv_loop_t *loop;
  al_fleet_worker_options_t o;
  char url[512];
  char group[128];
  char consumer[160];
  char sessions[4096];
  char work[4096];
  al_fleet_url_t u;
  al_fleet_redis_t *redis;
  al_fleet_queue_t q;
  al_bengine_t eng;
  al_client_t *http;
  al_models_t *models;
  struct al_agentdefs_s *agents;
  uv_timer_t intake, renew, reap, grace;
  uv_signal_t sigterm, sigint;
  fjob_t *jobs;
  unsigned used; /* slots taken */
  unsigned live; /* fjob_t allocated */
  unsigned cmds; /* worker-level commands in flight */
  bool reading;
  bool group_ok;
  bool announced;
  bool draining;
  bool grace_over;
  bool closing;
  bool intake_stopped; /* a storage failure: no more jobs taken */
  int handles;
  uint64_t done, failed, fenced, handed_back, dead, storage_failures;
  char last_error[1024];
};

static uint64_t now_ms(void) {
  return al__bengine_now_ms();
}

static void set_last_error(al_fleet_worker_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_last_error(al_fleet_worker_t *w, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(w->last_error, sizeof(w->last_error), fmt, ap);
  va_end(ap);
}

static bool lease_ok(const fjob_t *fj) {
  const al_fleet_worker_t *w = fj->w;

  return fj->epoch > 0 && !w->closing &&
         now_ms() + w->o.lease_ms / 3 < fj->lease_t0 + w->o.lease_ms;
}

static void maybe_exit(al_fleet_worker_t *w);

/* Still to be stopped: a job whose completion is out is Redis' to fence. */
static bool stoppable(const fjob_t *fj) {
  return fj->bj != NULL && fj->bj->state < AL_BJOB_STORING;
}

/* ---- jobs ------------------------------------------------------------------
 */

static void fjob_free_maybe(fjob_t *fj) {
  al_fleet_worker_t *w = fj->w;

  if (!fj->gone || fj->cmds > 0) {
    return;
  }
  if (fj->spec != NULL) {
    al__batch_jobs_free(fj->spec, fj->nspec);
  }
  al_free(fj);
  w->live--;
  maybe_exit(w);
}

/* The slot is free (the job's commands may still be out). */
static void fjob_drop(fjob_t *fj) {
  al_fleet_worker_t *w = fj->w;

  if (fj->gone) {
    return;
  }
  fj->gone = true;
  w->used--;
  if (fj->prev != NULL) {
    fj->prev->next = fj->next;
  } else {
    w->jobs = fj->next;
  }
  if (fj->next != NULL) {
    fj->next->prev = fj->prev;
  }
  fjob_free_maybe(fj);
}

static void on_job_cmd(int status, void *data) {
  fjob_t *fj = data;

  if (status != 0 && status != AL_EFENCED) {
    set_last_error(fj->w, "job %s: %s", fj->id, al_strerror(status));
  }
  fj->cmds--;
  fjob_free_maybe(fj);
}

/* Hands the job back unfinished: the owner key goes, the entry is left
 * pending (not acked) and made a lease old for the next reap. */
static void release(fjob_t *fj) {
  if (fj->epoch > 0 && al_fleet_queue_release(&fj->w->q, fj->id, fj->epoch,
                                              fj->entry, on_job_cmd, fj) == 0) {
    fj->cmds++;
  }
}

static void on_raw_job_reply(al_fleet_redis_t *r, int status,
                             struct redisReply *reply, void *data) {
  (void)r;
  (void)reply;
  on_job_cmd(status, data);
}

static void ack(fjob_t *fj) {
  char jobs[300];
  const char *argv[4];

  snprintf(jobs, sizeof(jobs), "%s:jobs", fj->w->u.prefix);
  argv[0] = "XACK";
  argv[1] = jobs;
  argv[2] = fj->w->group;
  argv[3] = fj->entry;
  if (al_fleet_redis_command(fj->w->redis, on_raw_job_reply, fj, 4, argv,
                             NULL) == 0) {
    fj->cmds++;
  }
}

/* ---- the engine's fleet driver ---------------------------------------------
 */

static bool drv_admit(al_bjob_t *j) {
  return lease_ok(j->data);
}

static void on_completed(int status, void *data) {
  fjob_t *fj = data;
  al_fleet_worker_t *w = fj->w;
  al_bjob_t *bj = fj->bj;

  fj->cmds--;
  if (status == 0) {
    if (strcmp(bj->outcome, "done") == 0) {
      w->done++;
    } else {
      w->failed++;
    }
  } else if (status == AL_EFENCED) {
    bj->fenced = true; /* counted in on_end */
  } else {
    /* Unknown (the connection dropped): the result may be stored or not;
     * the reaper hands the job on and its next owner finds the finished
     * transcript. */
    set_last_error(w, "job %s: completion: %s", fj->id, al_strerror(status));
  }
  al__bjob_stored(bj, status);
}

static void drv_result(al_bjob_t *j) {
  fjob_t *fj = j->data;
  al_fleet_worker_t *w = fj->w;
  json_t *o;
  char *s;
  int rc;

  if (!lease_ok(fj)) {
    j->fenced = true;
    al__bjob_stored(j, AL_EFENCED);
    return;
  }
  {
    /* Test seam (tests/unit/fleet/test_worker.c, F2): die here, the final
     * record durable and no completion sent. */
    const char *stop = getenv("AGENTLOOP_TEST_FLEET_STOP_BEFORE_COMPLETE");

    if (stop != NULL && strcmp(stop, "1") == 0) {
      raise(SIGKILL);
    }
  }
  o = al__bjob_result_json(j);
  json_object_set_new(o, "worker", json_string(w->consumer));
  json_object_set_new(o, "deliveries", json_integer(fj->deliveries));
  s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  rc = s != NULL ? al_fleet_queue_complete(&w->q, fj->id, fj->epoch, fj->entry,
                                           s, on_completed, fj)
                 : AL_ENOMEM;
  free(s);
  if (rc != 0) {
    set_last_error(w, "job %s: completion: %s", fj->id, al_strerror(rc));
    al__bjob_stored(j, rc);
    return;
  }
  fj->cmds++;
}

static void drv_end(al_bjob_t *j) {
  fjob_t *fj = j->data;
  al_fleet_worker_t *w = fj->w;

  fj->bj = NULL;
  if (j->fenced) {
    /* Not ours any more: nothing written, nothing said to Redis. */
    w->fenced++;
    set_last_error(w,
                   "job %s: fenced (its lease ran out or another "
                   "worker owns it)",
                   fj->id);
    fprintf(stderr, WHO ": fleet: job %s fenced: stopped without writing\n",
            fj->id);
  } else if (j->storage) {
    /* Its transcript cannot be written here: not acked, not completed,
     * the reason kept for the dead letter; this worker takes no more. */
    w->storage_failures++;
    set_last_error(w, "job %s: the transcript cannot be written: %s", fj->id,
                   j->why);
    if (!w->intake_stopped) {
      w->intake_stopped = true;
      fprintf(stderr,
              WHO
              ": fleet worker %s stops taking jobs: job %s: the "
              "transcript cannot be written (%s)\n",
              w->consumer, fj->id, j->why);
    }
    if (al_fleet_queue_set_error(&w->q, fj->id, w->last_error, on_job_cmd,
                                 fj) == 0) {
      fj->cmds++;
    }
    release(fj);
  } else if (j->no_result) {
    w->handed_back++;
    release(fj);
  }
  fjob_drop(fj);
}

static const al_bengine_driver_t fleet_driver = {NULL, drv_result, drv_end,
                                                 drv_admit};

/* A job that cannot be run (its JSON does not parse) still gets its one
 * result. */
static void complete_error(fjob_t *fj, const char *why) {
  json_t *o =
      json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "id", fj->id, "outcome", "error",
                "error_kind", "config", "text", why, "worker", fj->w->consumer,
                "deliveries", (json_int_t)fj->deliveries);
  char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

  json_decref(o);
  if (s != NULL && al_fleet_queue_complete(&fj->w->q, fj->id, fj->epoch,
                                           fj->entry, s, on_job_cmd, fj) == 0) {
    fj->cmds++;
    fj->w->failed++;
  }
  free(s);
  fjob_drop(fj);
}

static void on_fetched(al_fleet_redis_t *r, int status,
                       struct redisReply *reply, void *data) {
  fjob_t *fj = data;
  al_fleet_worker_t *w = fj->w;
  char name[256], err[1024];
  int rc;

  (void)r;
  fj->cmds--;
  if (fj->gone) {
    fjob_free_maybe(fj);
    return;
  }
  if (status != 0 || reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
      reply->elements != 2) {
    set_last_error(w, "job %s: cannot read it: %s", fj->id,
                   al_strerror(status != 0 ? status : AL_EPROTO));
    release(fj);
    fjob_drop(fj);
    return;
  }
  if (reply->element[1]->type == REDIS_REPLY_INTEGER) {
    fj->deliveries = reply->element[1]->integer;
  }
  if (w->draining || !lease_ok(fj)) {
    release(fj);
    fjob_drop(fj);
    return;
  }
  if (reply->element[0]->type != REDIS_REPLY_STRING) {
    complete_error(fj, "the job's JSON is missing");
    return;
  }
  snprintf(name, sizeof(name), "%s:job:%s", w->u.prefix, fj->id);
  rc =
      al__batch_jobs_parse(name, reply->element[0]->str, reply->element[0]->len,
                           &fj->spec, &fj->nspec, err, sizeof(err));
  if (rc != 0 || fj->nspec != 1 || strcmp(fj->spec[0].id, fj->id) != 0) {
    complete_error(fj, rc != 0 ? err : "the job's JSON is not this job");
    return;
  }
  fj->bj = al__bjob_start(&w->eng, &fj->spec[0], fj);
  if (fj->bj == NULL) {
    release(fj);
    fjob_drop(fj);
  }
}

static void on_claimed(int status, int64_t epoch, bool done, void *data) {
  fjob_t *fj = data;
  al_fleet_worker_t *w = fj->w;
  char job[300], jobs[300];
  const char *argv[7];

  fj->cmds--;
  if (status == 0 && done) {
    ack(fj); /* finished before (F2): one result already */
    fjob_drop(fj);
    return;
  }
  if (status != 0 || epoch <= 0 || w->closing) {
    /* Another holds it (its renewals take the entry back), or Redis went
     * away: the reaper hands it on later. */
    fjob_drop(fj);
    return;
  }
  fj->epoch = epoch;
  fj->lease_t0 = fj->sent;
  if (fj->reaped) {
    /* Its last owner stopped without a result (it crashed, or lost its
     * lease): the error a dead letter will carry unless a later one says
     * more. */
    char why[160];

    snprintf(why, sizeof(why),
             "taken over: its worker stopped without "
             "finishing it (%s)",
             fj->entry);
    if (al_fleet_queue_set_error(&w->q, fj->id, why, on_job_cmd, fj) == 0) {
      fj->cmds++;
    }
  }
  snprintf(job, sizeof(job), "%s:job:%s", w->u.prefix, fj->id);
  snprintf(jobs, sizeof(jobs), "%s:jobs", w->u.prefix);
  argv[0] = "EVAL";
  argv[1] = fetch_lua;
  argv[2] = "2";
  argv[3] = job;
  argv[4] = jobs;
  argv[5] = w->group;
  argv[6] = fj->entry;
  if (al_fleet_redis_command(w->redis, on_fetched, fj, 7, argv, NULL) != 0) {
    release(fj);
    fjob_drop(fj);
    return;
  }
  fj->cmds++;
}

static void take(al_fleet_worker_t *w, const al_fleet_entry_t *e, bool reaped) {
  fjob_t *fj;

  if (strlen(e->job_id) >= sizeof(fj->id) ||
      strlen(e->entry_id) >= sizeof(fj->entry)) {
    return;
  }
  fj = al_calloc(1, sizeof(*fj));
  if (fj == NULL) {
    return; /* left pending: reaped later */
  }
  fj->w = w;
  fj->reaped = reaped;
  snprintf(fj->id, sizeof(fj->id), "%s", e->job_id);
  snprintf(fj->entry, sizeof(fj->entry), "%s", e->entry_id);
  fj->next = w->jobs;
  if (w->jobs != NULL) {
    w->jobs->prev = fj;
  }
  w->jobs = fj;
  w->used++;
  w->live++;
  fj->sent = now_ms();
  if (al_fleet_queue_claim(&w->q, fj->id, on_claimed, fj) != 0) {
    fjob_drop(fj);
    return;
  }
  fj->cmds++;
}

/* ---- intake, renewal, reap --------------------------------------------- */

static bool can_take(const al_fleet_worker_t *w) {
  return al_fleet_redis_is_up(w->redis) && w->group_ok && !w->draining &&
         !w->closing && !w->intake_stopped && !w->reading &&
         w->used < w->o.slots;
}

static void entries(al_fleet_worker_t *w, int status, const al_fleet_entry_t *e,
                    size_t n, size_t dead, bool reaped) {
  size_t i;

  w->reading = false;
  w->cmds--;
  if (status != 0) {
    set_last_error(w, "intake: %s", al_strerror(status));
  }
  w->dead += dead;
  for (i = 0; i < n; i++) {
    if (w->draining || w->closing) {
      break; /* left pending to us: reaped after a lease */
    }
    take(w, &e[i], reaped);
  }
  maybe_exit(w);
}

static void on_read_entries(int status, const al_fleet_entry_t *e, size_t n,
                            size_t dead, void *data) {
  entries(data, status, e, n, dead, false);
}

static void on_reaped(int status, const al_fleet_entry_t *e, size_t n,
                      size_t dead, void *data) {
  entries(data, status, e, n, dead, true);
}

static void on_intake(uv_timer_t *t) {
  al_fleet_worker_t *w = t->data;

  if (!can_take(w)) {
    return;
  }
  if (al_fleet_queue_read(&w->q, w->o.slots - w->used, on_read_entries, w) ==
      0) {
    w->reading = true;
    w->cmds++;
  }
}

static void on_reap(uv_timer_t *t) {
  al_fleet_worker_t *w = t->data;

  if (!can_take(w)) {
    return;
  }
  if (al_fleet_queue_reap(&w->q, w->o.slots - w->used, on_reaped, w) == 0) {
    w->reading = true;
    w->cmds++;
  }
}

static void on_renewed(int status, void *data) {
  fjob_t *fj = data;

  fj->cmds--;
  fj->renewing = false;
  if (status == 0) {
    fj->lease_t0 = fj->sent;
  } else if (status == AL_EFENCED && stoppable(fj)) {
    al__bjob_stop(fj->bj, true);
  }
  fjob_free_maybe(fj);
}

static void on_renew(uv_timer_t *t) {
  al_fleet_worker_t *w = t->data;
  fjob_t *fj, *next;

  for (fj = w->jobs; fj != NULL; fj = next) {
    next = fj->next;
    if (fj->epoch <= 0) {
      continue; /* being claimed */
    }
    if (!lease_ok(fj)) {
      /* Too little lease left to write (Redis away, or this process was
       * stopped): stop now, as fenced. */
      if (stoppable(fj)) {
        al__bjob_stop(fj->bj, true);
      }
      continue;
    }
    if (fj->renewing || !al_fleet_redis_is_up(w->redis)) {
      continue;
    }
    fj->sent = now_ms();
    if (al_fleet_queue_renew(&w->q, fj->id, fj->epoch, fj->entry, on_renewed,
                             fj) == 0) {
      fj->renewing = true;
      fj->cmds++;
    }
  }
}

/* ---- the connection ---------------------------------------------------- */

/* CONFIG GET appendonly: without an AOF an answered submit or completion
 * can be lost (docs/fleet.md, Guarantees). Said, not refused: a Redis that
 * forbids CONFIG, or a test, still runs. */
static void on_aof(al_fleet_redis_t *r, int status, struct redisReply *reply,
                   void *data) {
  al_fleet_worker_t *w = data;

  (void)r;
  w->cmds--;
  if (status == 0 && reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
      reply->elements == 2 && reply->element[1]->type == REDIS_REPLY_STRING &&
      strcmp(reply->element[1]->str, "no") == 0) {
    fprintf(stderr, WHO
            ": fleet: warning: Redis runs without an AOF (appendonly "
            "no): a restart of Redis can lose jobs and results; use "
            "appendonly yes with appendfsync always (docs/fleet.md)\n");
  }
  maybe_exit(w);
}

static void on_group(int status, void *data) {
  al_fleet_worker_t *w = data;

  w->cmds--;
  if (status != 0) {
    set_last_error(w, "XGROUP CREATE: %s", al_strerror(status));
    maybe_exit(w);
    return;
  }
  w->group_ok = true;
  if (!w->announced) {
    const char *argv[] = {"CONFIG", "GET", "appendonly"};

    w->announced = true;
    fprintf(stderr, WHO ": fleet worker %s on %s group %s, %u slots\n",
            w->consumer, w->url, w->group, w->o.slots);
    if (al_fleet_redis_command(w->redis, on_aof, w, 3, argv, NULL) == 0) {
      w->cmds++;
    }
  }
  maybe_exit(w);
}

static void on_state(al_fleet_redis_t *r, bool up, int status) {
  al_fleet_worker_t *w = al_fleet_redis_data(r);

  if (!up) {
    w->group_ok = false;
    set_last_error(w, "redis: %s", al_strerror(status));
    fprintf(stderr, WHO ": fleet: redis is away (%s): intake paused\n",
            al_strerror(status));
    return;
  }
  if (w->announced) {
    fprintf(stderr, WHO ": fleet: redis is back: intake resumes\n");
  }
  if (!w->closing && al_fleet_queue_ensure_group(&w->q, on_group, w) == 0) {
    w->cmds++;
  }
}

/* ---- drain and exit ------------------------------------------------------ */

static void one_closed(al_fleet_worker_t *w) {
  if (--w->handles > 0) {
    return;
  }
  if (w->o.on_exit != NULL) {
    w->o.on_exit(w, w->o.data);
  }
  al_models_free(w->models);
  al_agentdefs_free(w->agents);
  al_free(w);
}

static void on_handle_closed(uv_handle_t *h) {
  one_closed(h->data);
}

static void on_redis_closed(al_fleet_redis_t *r) {
  one_closed(al_fleet_redis_data(r));
}

static void on_http_closed(al_client_t *c) {
  (void)c;
}

static void maybe_exit(al_fleet_worker_t *w) {
  uv_handle_t *hs[] = {(uv_handle_t *)&w->intake,  (uv_handle_t *)&w->renew,
                       (uv_handle_t *)&w->reap,    (uv_handle_t *)&w->grace,
                       (uv_handle_t *)&w->sigterm, (uv_handle_t *)&w->sigint};
  size_t i;

  if (!w->draining || w->closing || w->live > 0 || w->cmds > 0) {
    return;
  }
  /* Every job ended and every command answered: close; the last close
   * callback frees w. */
  w->closing = true;
  w->handles = 1 + (int)(sizeof(hs) / sizeof(hs[0]));
  al_fleet_redis_close(w->redis, on_redis_closed);
  al_client_close(w->http, on_http_closed);
  for (i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
    uv_close(hs[i], on_handle_closed);
  }
}

static void on_grace(uv_timer_t *t) {
  al_fleet_worker_t *w = t->data;
  fjob_t *fj, *next;

  w->grace_over = true;
  for (fj = w->jobs; fj != NULL; fj = next) {
    next = fj->next;
    fj->handed_back = true;
    if (stoppable(fj)) {
      al__bjob_stop(fj->bj, false); /* drv_end releases it */
    }
  }
}

void al_fleet_worker_drain(al_fleet_worker_t *w, uint64_t grace_ms) {
  if (w->draining) {
    if (grace_ms == 0 && !w->grace_over) {
      uv_timer_start(&w->grace, on_grace, 0, 0); /* a second signal */
    }
    return;
  }
  w->draining = true;
  uv_timer_stop(&w->intake);
  uv_timer_stop(&w->reap);
  fprintf(stderr,
          WHO
          ": fleet worker %s draining: %u job%s in flight, "
          "%" PRIu64 " ms grace\n",
          w->consumer, w->used, w->used == 1 ? "" : "s", grace_ms);
  uv_timer_start(&w->grace, on_grace, grace_ms, 0);
  maybe_exit(w);
}

static void on_signal(uv_signal_t *h, int signum) {
  al_fleet_worker_t *w = h->data;

  al_fleet_worker_drain(w, signum == SIGINT ? 0 : w->o.drain_grace_ms);
}

json_t *al_fleet_worker_status(const al_fleet_worker_t *w) {
  return json_pack(
      "{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s,s:s?}", "queue",
      w->url, "group", w->group, "consumer", w->consumer, "sessions",
      w->sessions, "slots", (json_int_t)w->o.slots, "slots_used",
      (json_int_t)w->used, "done", (json_int_t)w->done, "failed",
      (json_int_t)w->failed, "fenced", (json_int_t)w->fenced, "handed_back",
      (json_int_t)w->handed_back, "dead_lettered", (json_int_t)w->dead,
      "storage_failures", (json_int_t)w->storage_failures, "redis",
      al_fleet_redis_is_up(w->redis) ? "up" : "down", "intake",
      w->draining                       ? "draining"
      : w->intake_stopped               ? "stopped"
      : !al_fleet_redis_is_up(w->redis) ? "paused"
                                        : "on",
      "last_error", w->last_error[0] != '\0' ? w->last_error : NULL);
}

/* ---- set-up (before the loop) ------------------------------------------- */

void al_fleet_worker_options_init(al_fleet_worker_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->group = "agentloop";
  o->slots = 1;
  o->lease_ms = 30000;
  o->max_deliveries = 3;
  o->drain_grace_ms = 30000;
}

int al_fleet_worker_new(uv_loop_t *loop, const al_fleet_worker_options_t *o,
                        al_fleet_worker_t **out, char *why, size_t why_len) {
  al_fleet_worker_t *w;
  al_fleet_redis_options_t ro;
  al_client_options_t co;
  al_config_t base;
  char *models_err = NULL;
  int rc;

  *out = NULL;
  if (o->slots == 0 || o->lease_ms < 30 || o->max_deliveries == 0 ||
      o->sessions_dir == NULL || o->work_dir == NULL) {
    snprintf(why, why_len,
             "fleet: bad options (slots, lease, deliveries, "
             "directories)");
    return AL_EINVAL;
  }
  w = al_calloc(1, sizeof(*w));
  if (w == NULL) {
    return AL_ENOMEM;
  }
  w->loop = loop;
  w->o = *o;
  snprintf(w->url, sizeof(w->url), "%s", o->url);
  snprintf(w->group, sizeof(w->group), "%s", o->group);
  if (al_fleet_url_parse(o->url, &w->u, why, why_len) != 0) {
    al_free(w);
    return AL_EINVAL;
  }
  if (o->consumer != NULL) {
    snprintf(w->consumer, sizeof(w->consumer), "%s", o->consumer);
  } else {
    char host[64] = "host";

    (void)gethostname(host, sizeof(host) - 1);
    snprintf(w->consumer, sizeof(w->consumer), "%s-%d", host, (int)getpid());
  }
  snprintf(w->sessions, sizeof(w->sessions), "%s", o->sessions_dir);
  snprintf(w->work, sizeof(w->work), "%s", o->work_dir);
  if (al__tui_mkdirs(w->sessions) != 0 || al__tui_mkdirs(w->work) != 0) {
    snprintf(why, why_len, "fleet: cannot create %s and %s", w->sessions,
             w->work);
    al_free(w);
    return AL_EINVAL;
  }
  if (w->o.poll_ms == 0) {
    w->o.poll_ms = w->o.lease_ms / 4 < 250 ? w->o.lease_ms / 4 : 250;
  }
  rc = al_models_load(&w->models, NULL, &models_err);
  if (rc != 0) {
    snprintf(why, why_len, "fleet: %s",
             models_err != NULL ? models_err : al_strerror(rc));
    al_free(models_err);
    al_free(w);
    return rc;
  }
  /* The user's agent definitions, read once, as batch run reads them. */
  if (al__cli_config_load_for(&base, NULL, false, NULL, WHO) != 0) {
    snprintf(why, why_len, "fleet: the configuration does not load");
    al_models_free(w->models);
    al_free(w);
    return AL_ECONFIG;
  }
  rc = al__cli_agents_load(&base, NULL, false, false, WHO, &w->agents);
  al_config_free(&base);
  if (rc != 0) {
    snprintf(why, why_len, "fleet: the agent definitions do not load");
    al_models_free(w->models);
    al_free(w);
    return rc;
  }
  al_client_options_init(&co);
  rc = al_client_new(loop, &co, &w->http);
  if (rc != 0) {
    snprintf(why, why_len, "fleet: cannot create the HTTP client: %s",
             al_strerror(rc));
    al_models_free(w->models);
    al_agentdefs_free(w->agents);
    al_free(w);
    return rc;
  }
  w->eng.loop = loop;
  w->eng.client = w->http;
  w->eng.models = w->models;
  w->eng.agents = w->agents;
  snprintf(w->eng.sessions_dir, sizeof(w->eng.sessions_dir), "%s", w->sessions);
  w->eng.work_dir = w->work;
  w->eng.who = WHO;
  w->eng.drv = &fleet_driver;
  /* lease_ok admits with at least lease/3 left: a yes holds that long. */
  w->eng.admit_window_ms = (uint64_t)w->o.lease_ms / 3;
  w->eng.data = w;
  al_fleet_redis_options_init(&ro);
  ro.unix_path = w->u.unix_path[0] != '\0' ? w->u.unix_path : NULL;
  ro.host = w->u.host;
  ro.port = w->u.port;
  ro.on_state = on_state;
  ro.data = w;
  rc = al_fleet_redis_new(loop, &ro, &w->redis);
  if (rc != 0) {
    snprintf(why, why_len, "fleet: %s", al_strerror(rc));
    al_client_close(w->http, on_http_closed);
    al_models_free(w->models);
    al_agentdefs_free(w->agents);
    al_free(w);
    return rc;
  }
  w->q.redis = w->redis;
  w->q.prefix = w->u.prefix;
  w->q.group = w->group;
  w->q.consumer = w->consumer;
  w->q.lease_ms = w->o.lease_ms;
  w->q.max_deliveries = w->o.max_deliveries;
  uv_timer_init(loop, &w->intake);
  uv_timer_init(loop, &w->renew);
  uv_timer_init(loop, &w->reap);
  uv_timer_init(loop, &w->grace);
  uv_signal_init(loop, &w->sigterm);
  uv_signal_init(loop, &w->sigint);
  w->intake.data = w->renew.data = w->reap.data = w->grace.data = w;
  w->sigterm.data = w->sigint.data = w;
  uv_timer_start(&w->intake, on_intake, w->o.poll_ms, w->o.poll_ms);
  uv_timer_start(&w->renew, on_renew, w->o.lease_ms / 3, w->o.lease_ms / 3);
  uv_timer_start(&w->reap, on_reap, w->o.lease_ms / 2, w->o.lease_ms / 2);
  uv_signal_start(&w->sigterm, on_signal, SIGTERM);
  uv_signal_start(&w->sigint, on_signal, SIGINT);
  *out = w;
  return 0;
}
