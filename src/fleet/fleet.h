/* Fleet layer: the Redis Streams client and the job queue protocol
 * (issue 24, docs/fleet.md).
 *
 * al_fleet_redis_t is one hiredis async connection on a uv loop (hiredis'
 * libuv adapter): every reply is a callback on the loop thread. It
 * reconnects with back-off when Redis goes away and says so through
 * on_state, so a worker pauses its intake; commands issued while it is down
 * are refused (UV_ENOTCONN), never queued. Commands in flight when the
 * connection drops complete with UV_ECONNRESET: a write may or may not have
 * been applied, which is why every queue primitive is idempotent or fenced.
 *
 * al_fleet_queue_* are the protocol's primitives over one connection. The
 * conditional steps (submit, claim, renew, fence, reap, complete) are Lua
 * scripts: Redis runs a script atomically, as it runs a MULTI, and a script
 * can hold the condition (NX, the fence) that a MULTI cannot express without
 * WATCH, which a shared, pipelined connection cannot use safely. */
#ifndef AL_FLEET_H
#define AL_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/common.h"

struct redisReply;
typedef struct al_fleet_redis_s al_fleet_redis_t;

/* up: connected (again); !up: the connection is gone, status why, and a
 * reconnect is scheduled. Never fires after al_fleet_redis_close. */
typedef void (*al_fleet_redis_state_cb)(al_fleet_redis_t *r, bool up,
                                        int status);
/* status 0 with a reply; AL_EREDIS with the error reply; UV_ECONNRESET
 * (reply NULL) when the connection dropped first. The reply is valid only
 * inside the callback. Never fires after al_fleet_redis_close. */
typedef void (*al_fleet_reply_cb)(al_fleet_redis_t *r, int status,
                                  struct redisReply *reply, void *data);
typedef void (*al_fleet_redis_close_cb)(al_fleet_redis_t *r);

typedef struct {
  const char *unix_path; /* a unix socket, or else host + port */
  const char *host;      /* a numeric address: hiredis resolves names with
                            a blocking getaddrinfo, which the loop must not */
  int port;
  uint64_t backoff_min_ms; /* first reconnect delay (100) */
  uint64_t backoff_max_ms; /* doubling stops here (5000) */
  al_fleet_redis_state_cb on_state;
  void *data; /* the embedder's */
} al_fleet_redis_options_t;

void al_fleet_redis_options_init(al_fleet_redis_options_t *o);
/* Starts connecting; the first on_state(up) says it is ready. Connection
 * failures are retried, never returned: AL_EINVAL / AL_ECONFIG / UV_ENOMEM
 * only for bad options or no memory. */
int al_fleet_redis_new(uv_loop_t *loop, const al_fleet_redis_options_t *o,
                       al_fleet_redis_t **out);
bool al_fleet_redis_is_up(const al_fleet_redis_t *r);
void *al_fleet_redis_data(const al_fleet_redis_t *r);
/* Sends one command (arguments borrowed, copied by hiredis). 0 and cb fires
 * exactly once later; or UV_ENOTCONN (down), AL_ECLOSING, UV_ENOMEM and cb
 * never fires. */
int al_fleet_redis_command(al_fleet_redis_t *r, al_fleet_reply_cb cb,
                           void *data, int argc, const char **argv,
                           const size_t *argvlen);
/* Frees a command's data when close drops the command (cb never fires). */
typedef void (*al_fleet_release_cb)(void *data);
/* The same; release (may be NULL) runs instead of cb, once, for a command
 * still pending when r is closed (inside al_fleet_redis_close or when
 * hiredis leaves the callback it is in), so data the caller allocated for
 * the reply is not leaked. It must only free: r is closing. */
int al_fleet_redis_command_rel(al_fleet_redis_t *r, al_fleet_reply_cb cb,
                               al_fleet_release_cb release, void *data,
                               int argc, const char **argv,
                               const size_t *argvlen);
/* Asynchronous, once: nothing fires after it returns (pending commands'
 * callbacks included); cb (may be NULL) runs on a later iteration, when
 * every handle is closed and r is about to be freed. */
void al_fleet_redis_close(al_fleet_redis_t *r, al_fleet_redis_close_cb cb);
/* Reconnects made since new (for tests and status). */
unsigned al_fleet_redis_reconnects(const al_fleet_redis_t *r);
/* Why the last connect failed (hiredis' words), "" when none has. */
const char *al_fleet_redis_last_error(const al_fleet_redis_t *r);

/* ---- replies (for the fleet's own modules) ----------------------------- */

/* A string or status reply. */
bool al__fleet_is_str(const struct redisReply *r);
/* The entries of an XREAD / XREADGROUP reply of one stream: 0 with
 * *entries NULL for nil or none; 0 with the array of [id, [f, v, ...]]
 * entries; AL_EPROTO for any other shape. */
int al__fleet_stream_entries(const struct redisReply *reply,
                             const struct redisReply **entries);
/* The id of entry e, and (name non-NULL) its field's value in *value
 * (NULL when absent); NULL for an entry of another shape (one deleted
 * while pending has no fields). */
const char *al__fleet_entry(const struct redisReply *e, const char *name,
                            const char **value);

/* ---- queue URLs -------------------------------------------------------- */

/* redis://HOST[:PORT][/PREFIX] (port 6379, prefix "agentloop"; HOST an
 * IPv4 address, [IPv6] or localhost, which is 127.0.0.1) or
 * unix://PATH[?prefix=PREFIX]. A prefix is [A-Za-z0-9_.-]+. */
typedef struct {
  char host[64];
  int port;
  char unix_path[108];
  char prefix[128];
} al_fleet_url_t;

/* 0, or AL_EINVAL with why (one sentence) filled. */
int al_fleet_url_parse(const char *url, al_fleet_url_t *out, char *why,
                       size_t why_len);

/* ---- the job queue protocol -------------------------------------------- */

/* Keys under prefix P: P:jobs (the stream, consumer group `group`),
 * P:job:<id> (the job, SET NX), P:epoch:<id> (INCR per claim),
 * P:owner:<id> ("consumer:epoch", PX lease), P:result:<id> (SET NX),
 * P:results (stream), P:dead (stream), P:error:<id> (last error),
 * P:submitted (the number of jobs submitted fresh). */
typedef struct {
  al_fleet_redis_t *redis; /* borrowed; outlives every call */
  const char *prefix;
  const char *group;
  const char *consumer; /* this worker's name, unique in the group */
  uint64_t lease_ms;
  unsigned max_deliveries; /* a job delivered more often is dead-lettered */
} al_fleet_queue_t;

typedef struct {
  const char *entry_id; /* the stream entry's id */
  const char *job_id;
} al_fleet_entry_t;

/* Every callback fires exactly once when the call returned 0, with status 0
 * or an error (UV_ECONNRESET, AL_EREDIS, AL_EPROTO for an unexpected reply,
 * AL_EFENCED where said). Strings are valid inside the callback only. */
typedef void (*al_fleet_status_cb)(int status, void *data);
/* fresh: this call created the job (false: it was already submitted). */
typedef void (*al_fleet_submit_cb)(int status, bool fresh, void *data);
typedef void (*al_fleet_entries_cb)(int status, const al_fleet_entry_t *e,
                                    size_t n, size_t dead, void *data);
/* epoch > 0: ours; done: a result exists already (ack, do not run). */
typedef void (*al_fleet_claim_cb)(int status, int64_t epoch, bool done,
                                  void *data);

/* XGROUP CREATE P:jobs group 0 MKSTREAM; an existing group is fine. */
int al_fleet_queue_ensure_group(al_fleet_queue_t *q, al_fleet_status_cb cb,
                                void *data);
/* Idempotent: SET NX P:job:<id> body, XADD P:jobs and INCR P:submitted in
 * one script, so a crash between them cannot leave a job recorded but never
 * queued (nor counted). */
int al_fleet_queue_submit(al_fleet_queue_t *q, const char *job_id,
                          const char *body, al_fleet_submit_cb cb, void *data);
/* XREADGROUP COUNT free_slots (never more; 0 is AL_EINVAL), no BLOCK: a
 * blocked read would hold up every other command on the connection. */
int al_fleet_queue_read(al_fleet_queue_t *q, unsigned free_slots,
                        al_fleet_entries_cb cb, void *data);
/* INCR the epoch and SET the owner key with the lease, only when no owner
 * holds it; AL_EFENCED when another does. */
int al_fleet_queue_claim(al_fleet_queue_t *q, const char *job_id,
                         al_fleet_claim_cb cb, void *data);
/* Extends the lease (PEXPIRE) and resets the entry's idle time (XCLAIM
 * JUSTID to ourselves) when the fence holds; AL_EFENCED otherwise. */
int al_fleet_queue_renew(al_fleet_queue_t *q, const char *job_id, int64_t epoch,
                         const char *entry_id, al_fleet_status_cb cb,
                         void *data);
/* 0 when the owner key is still "consumer:epoch" and the epoch unchanged;
 * AL_EFENCED otherwise. Checked before every model request and commit. */
int al_fleet_queue_fence(al_fleet_queue_t *q, const char *job_id, int64_t epoch,
                         al_fleet_status_cb cb, void *data);
/* Hands a job back unfinished (a drain, a storage failure): fenced, the
 * owner key deleted and the entry made a lease idle, so another worker
 * reaps and claims it at once; not acked. AL_EFENCED when not ours. */
int al_fleet_queue_release(al_fleet_queue_t *q, const char *job_id,
                           int64_t epoch, const char *entry_id,
                           al_fleet_status_cb cb, void *data);
/* Records a job's last error (kept for the dead letter). */
int al_fleet_queue_set_error(al_fleet_queue_t *q, const char *job_id,
                             const char *error, al_fleet_status_cb cb,
                             void *data);
/* XAUTOCLAIM to us of entries idle for a lease or more (at most count);
 * an entry delivered more than max_deliveries times goes to P:dead with its
 * last error, gets its one result (outcome dead_letter) and is acked. The
 * callback gets the entries taken over and how many were dead-lettered. */
int al_fleet_queue_reap(al_fleet_queue_t *q, unsigned count,
                        al_fleet_entries_cb cb, void *data);
/* Fenced and atomic: SET NX the result, XADD P:results, XACK, release the
 * owner key. AL_EFENCED (nothing written) when the fence fails. */
int al_fleet_queue_complete(al_fleet_queue_t *q, const char *job_id,
                            int64_t epoch, const char *entry_id,
                            const char *result, al_fleet_status_cb cb,
                            void *data);

#endif
