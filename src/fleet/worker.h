/* The fleet worker (docs/fleet.md, "The worker"): `agentloopd --queue URL
 * --group NAME --slots N` takes jobs from a Redis Streams consumer group
 * and runs each through the job engine (client/batch_engine.h) that
 * `agentloop batch run` uses, with the session id = the job id and the
 * transcripts in a directory every worker reaches. Everything is on the
 * daemon's loop; every Redis reply is a callback there. */
#ifndef AL_FLEET_WORKER_H
#define AL_FLEET_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

typedef struct al_fleet_worker_s al_fleet_worker_t;

typedef struct {
  const char *url;          /* redis://... or unix://... */
  const char *group;        /* "agentloop" */
  const char *consumer;     /* NULL: <hostname>-<pid> */
  const char *sessions_dir; /* transcripts (created) */
  const char *work_dir;     /* copies and worktrees: WORK/work/ID */
  unsigned slots;
  uint64_t lease_ms;       /* 30000 */
  unsigned max_deliveries; /* 3 */
  uint64_t drain_grace_ms; /* 30000 */
  uint64_t poll_ms;        /* intake poll while idle (0: lease/4, <= 250) */
  /* Drained (or stopped) and every handle closed: the daemon may exit. */
  void (*on_exit)(al_fleet_worker_t *w, void *data);
  void *data;
} al_fleet_worker_options_t;

void al_fleet_worker_options_init(al_fleet_worker_options_t *o);
/* Before the loop runs (reads the configuration and agent definitions,
 * blocking). 0, or an error with a one-line reason in why. It takes
 * SIGTERM (drain within drain_grace_ms) and SIGINT (drain with no grace). */
int al_fleet_worker_new(uv_loop_t *loop, const al_fleet_worker_options_t *o,
                        al_fleet_worker_t **out, char *why, size_t why_len);
/* Stops intake; in-flight jobs get grace_ms to finish, then are handed
 * back; then on_exit. */
void al_fleet_worker_drain(al_fleet_worker_t *w, uint64_t grace_ms);
/* Metrics for `agentloop daemon status` (a new object). */
json_t *al_fleet_worker_status(const al_fleet_worker_t *w);

#endif
