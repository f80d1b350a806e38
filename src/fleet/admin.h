/* Read-only queries on a fleet queue for `agentloop batch results` and
 * `agentloop batch status` (docs/fleet.md, docs/batch.md): the results
 * stream read in pages, the submitted count, and a status summary. Every
 * reply is a callback on the connection's loop; nothing here writes. */
#ifndef AL_FLEET_ADMIN_H
#define AL_FLEET_ADMIN_H

#include "fleet/fleet.h"

typedef struct {
  const char *entry_id; /* the P:results entry */
  const char *job_id;
  const char *result; /* the stored result JSON, as stored */
} al_fleet_result_t;

/* status 0 with n results after the id asked (n 0 when a block timed
 * out). Strings valid inside the callback only. */
typedef void (*al_fleet_results_cb)(int status, const al_fleet_result_t *res,
                                    size_t n, void *data);
/* XREAD [BLOCK block_ms] COUNT count STREAMS P:results after (after "0-0"
 * for the start). block_ms < 0: no BLOCK. A blocked read holds up the
 * connection: use it only on a connection that does nothing else. */
int al_fleet_admin_results(al_fleet_redis_t *r, const char *prefix,
                           const char *after, unsigned count, int64_t block_ms,
                           al_fleet_results_cb cb, void *data);

/* GET P:submitted (0 when never set). */
typedef void (*al_fleet_count_cb)(int status, int64_t n, void *data);
int al_fleet_admin_submitted(al_fleet_redis_t *r, const char *prefix,
                             al_fleet_count_cb cb, void *data);

typedef struct {
  char name[128];
  int64_t pending;      /* delivered to it, not acked */
  int64_t lease_min_ms; /* the shortest owner lease left; -1 none */
  int64_t no_lease;     /* of them, without a live owner key (not claimed
                           yet, or the lease ran out: to be taken over) */
} al_fleet_consumer_t;

#define AL_FLEET_STATUS_CONSUMERS 64

typedef struct {
  int64_t submitted; /* P:submitted */
  int64_t queued;    /* XLEN P:jobs */
  int64_t done;      /* XLEN P:results (dead letters included) */
  int64_t dead;      /* XLEN P:dead */
  bool group_exists;
  int64_t undelivered; /* never delivered to the group; -1 unknown */
  int64_t running;     /* delivered, not acked (XPENDING) */
  size_t nconsumers;   /* at most AL_FLEET_STATUS_CONSUMERS listed */
  al_fleet_consumer_t consumers[AL_FLEET_STATUS_CONSUMERS];
  int64_t rate_1m;  /* results with an entry id in the last minute */
  int64_t rate_10m; /* ... ten minutes (-1: more than the scan's bound) */
  int persistence;  /* 1 AOF with fsync; 0 jobs can be lost; -1 unknown
                       (CONFIG refused, as managed Redis may) */
  char appendonly[16];
  char appendfsync[16];
} al_fleet_status_t;

/* Pipelined commands; cb once, when all have answered (the first error's
 * status, AL_EREDIS an error reply other than a missing group or key). */
typedef void (*al_fleet_status_done_cb)(int status, al_fleet_status_t *st,
                                        void *data);
int al_fleet_admin_status(al_fleet_redis_t *r, const char *prefix,
                          const char *group, al_fleet_status_done_cb cb,
                          void *data);

#endif
