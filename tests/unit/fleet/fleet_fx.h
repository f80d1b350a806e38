/* The fleet end-to-end fixture (tests/unit/fleet/test_worker.c,
 * test_fleet_chaos.c): a real redis-server (tests/redis_server.h) with the
 * queue under prefix "t", an in-process agentloop-mockllm recording every
 * request, and agentloopd --queue workers spawned as wN. Every wait is for
 * a condition checked on a 10 ms poll of the fixture's loop, with a
 * deadline scaled by al_test_timeout_multiplier(). */
#ifndef AL_TEST_FLEET_FX_H
#define AL_TEST_FLEET_FX_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "mockllm/mockllm.h"
#include "redis_server.h"

/* The workers' lease (ms). */
#define LEASE_MS 800
#define MAX_W 48

typedef struct fw_s fw_t;

typedef struct {
  fw_t *fx;
  uv_process_t proc;
  uv_pipe_t err;
  char ebuf[16384];
  char scratch[4096];
  size_t elen;
  bool running;
  bool err_open;
  int64_t status;
  int sig;
  char name[32];
} fw_proc_t;

struct fw_s {
  char root[64];
  char url[400];
  uv_loop_t loop;
  al_mockllm_t *mock;
  al_test_redis_t redis;
  fw_proc_t w[MAX_W];
  int nw;
  /* the wait */
  uv_timer_t poll;
  bool (*pred)(fw_t *fx, void *arg);
  void *arg;
  bool met;
};

typedef struct {
  int track, index;
} fw_saw_t;

/* ---- redis (the test's own connection) ---- */
char *fw_rcmd(fw_t *fx, int argc, const char **argv);
/* GET t:KIND:ID, malloc'd ("(nil)" when absent). */
char *fw_get_key(fw_t *fx, const char *kind, const char *id);
bool fw_key_exists(fw_t *fx, const char *kind, const char *id);
/* EVAL script with KEYS t:jobs t:results, ARGV "g" arg; its integer. */
long long fw_lua_int(fw_t *fx, const char *script, const char *arg);
/* Entries of t:results for this id. */
long long fw_results_for(fw_t *fx, const char *id);
/* Entries of group g's pending list. */
long long fw_pending_count(fw_t *fx);
/* Submits a job the way the CLI does (SET NX, XADD). */
void fw_submit(fw_t *fx, const char *id, const char *prompt);

/* ---- workers ---- */
/* A worker named wN, with extra environment (NULL-terminated, may be
 * NULL); grace NULL: 30000 ms. */
fw_proc_t *fw_spawn_worker(fw_t *fx, unsigned slots, const char *grace,
                           const char *const *xenv);
fw_proc_t *fw_worker_named(fw_t *fx, const char *name);

/* ---- waiting ---- */
/* Runs the loop until pred holds; fails past ms (scaled), printing every
 * worker's stderr. */
void fw_wait_for(fw_t *fx, bool (*pred)(fw_t *fx, void *arg), void *arg,
                 uint64_t ms, const char *what);
bool fw_p_exited(fw_t *fx, void *arg);     /* arg: fw_proc_t */
bool fw_p_stderr_has(fw_t *fx, void *arg); /* arg: {name, text} */
bool fw_p_result(fw_t *fx, void *arg);     /* arg: job id */
void fw_wait_stderr(fw_t *fx, const char *name, const char *text, uint64_t ms);
/* The mock recorded a request of (track, response index). */
bool fw_mock_saw(fw_t *fx, int track, int index);
bool fw_p_saw(fw_t *fx, void *arg); /* arg: fw_saw_t */

/* ---- set-up, tear-down, checks ---- */
void fw_init(fw_t *fx, const char *yaml);
void fw_init_aof(fw_t *fx, const char *yaml, bool aof);
/* SIGKILLs the workers still running, closes everything, removes root. */
void fw_finish(fw_t *fx);
/* The job's transcript loads with its hash chain whole. */
void fw_assert_chain(fw_t *fx, const char *id);
/* The job's result record, parsed (fails when absent). */
json_t *fw_result_of(fw_t *fx, const char *id);
/* Who owns the job now ("wN"), from the owner key "wN:epoch". */
bool fw_owner_of(fw_t *fx, const char *id, char *out, size_t len);

#endif
