/* The job queue protocol's primitives (docs/fleet.md), each one command on
 * the connection: a plain command where nothing is conditional, else a Lua
 * script, which Redis runs atomically (and writes to the AOF as one
 * MULTI/EXEC block). The scripts name derived keys (P:result:<id>, ...)
 * from the prefix, so they assume one Redis, not a cluster.
 *
 * Each call allocates an op that lives until its one reply; the reply is
 * decoded into the callback's arguments, which borrow the reply's strings. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "fleet/fleet.h"

enum op_kind {
  OP_STATUS, /* any non-error reply is success */
  OP_GROUP,  /* also BUSYGROUP: the group exists already */
  OP_SUBMIT,
  OP_READ,
  OP_CLAIM,
  OP_FENCED, /* integer 1: held, 0: AL_EFENCED */
  OP_REAP,
};

typedef struct {
  enum op_kind kind;
  union {
    al_fleet_status_cb status;
    al_fleet_submit_cb submit;
    al_fleet_entries_cb entries;
    al_fleet_claim_cb claim;
  } cb;
  void *data;
} op_t;

/* ---- scripts ------------------------------------------------------------- */

/* KEYS: job, jobs, submitted. ARGV: id, body. The entry id, or nil when
 * known. The counter of fresh jobs lets a reader (`batch results
 * --follow`, `batch status`) know how many results make "all done". */
static const char submit_lua[] =
    "if redis.call('SET', KEYS[1], ARGV[2], 'NX') then\n"
    "  redis.call('INCR', KEYS[3])\n"
    "  return redis.call('XADD', KEYS[2], '*', 'id', ARGV[1])\n"
    "end\n"
    "return false\n";

/* KEYS: epoch, owner, result. ARGV: consumer, lease ms. The new epoch; 0
 * when a result exists; -1 when another owner holds the lease. */
static const char claim_lua[] =
    "if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end\n"
    "if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end\n"
    "local e = redis.call('INCR', KEYS[1])\n"
    "redis.call('SET', KEYS[2], ARGV[1] .. ':' .. e, 'PX', ARGV[2])\n"
    "return e\n";

/* The fence, shared by the scripts below. KEYS: epoch, owner. ARGV:
 * "consumer:epoch", epoch. */
#define FENCE_LUA                                \
  "if redis.call('GET', KEYS[2]) ~= ARGV[1] or " \
  "redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end\n"

static const char fence_lua[] = FENCE_LUA "return 1\n";

/* + KEYS: jobs. ARGV: lease ms, group, consumer, entry id. XCLAIM JUSTID
 * resets the entry's idle time without counting a delivery, so the reaper
 * does not take a live job. */
static const char renew_lua[] = FENCE_LUA
    "redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
    "redis.call('XCLAIM', KEYS[3], ARGV[4], ARGV[5], 0, ARGV[6], 'JUSTID')\n"
    "return 1\n";

/* + KEYS: result, results, jobs. ARGV: result, group, entry id, job id.
 * The result is written once (NX) and appended to the results stream only
 * then; the ack and the release happen either way. */
/* + KEYS: jobs. ARGV: group, consumer, entry id, idle ms. Hands a job
 * back: the owner key goes (another worker may claim at once) and XCLAIM
 * IDLE makes the entry look a lease old, so the next reap takes it; JUSTID
 * counts no delivery. Not acked: the job is not done. */
static const char release_lua[] = FENCE_LUA
    "redis.call('DEL', KEYS[2])\n"
    "redis.call('XCLAIM', KEYS[3], ARGV[3], ARGV[4], 0, ARGV[5], 'IDLE', "
    "ARGV[6], 'JUSTID')\n"
    "return 1\n";

static const char complete_lua[] = FENCE_LUA
    "if redis.call('SET', KEYS[3], ARGV[3], 'NX') then\n"
    "  redis.call('XADD', KEYS[4], '*', 'id', ARGV[6], 'result', ARGV[3])\n"
    "end\n"
    "redis.call('XACK', KEYS[5], ARGV[4], ARGV[5])\n"
    "redis.call('DEL', KEYS[2])\n"
    "return 1\n";

/* KEYS: jobs, dead, results. ARGV: group, consumer, min idle ms, count,
 * max deliveries, prefix. {dead count, {entry id, job id, ...}}. The
 * delivery count after XAUTOCLAIM includes the one it just made. */
static const char reap_lua[] =
    "local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3],"
    " '0-0', 'COUNT', ARGV[4])\n"
    "local out = {}\n"
    "local dead = 0\n"
    "for _, e in ipairs(r[2]) do\n"
    "  local eid, f, jid = e[1], e[2], nil\n"
    "  for i = 1, #f, 2 do if f[i] == 'id' then jid = f[i + 1] end end\n"
    "  if jid then\n"
    "    local p = redis.call('XPENDING', KEYS[1], ARGV[1], eid, eid, 1)\n"
    "    local n = p[1][4]\n"
    "    if n > tonumber(ARGV[5]) then\n"
    "      local pre = ARGV[6] .. ':'\n"
    "      local err = redis.call('GET', pre .. 'error:' .. jid) or ''\n"
    "      redis.call('XADD', KEYS[2], '*', 'id', jid, 'deliveries', n,"
    " 'error', err)\n"
    "      local res = cjson.encode({id = jid, outcome = 'dead_letter',"
    " error = err, deliveries = n})\n"
    "      if redis.call('SET', pre .. 'result:' .. jid, res, 'NX') then\n"
    "        redis.call('XADD', KEYS[3], '*', 'id', jid, 'result', res)\n"
    "      end\n"
    "      redis.call('XACK', KEYS[1], ARGV[1], eid)\n"
    "      redis.call('DEL', pre .. 'owner:' .. jid)\n"
    "      dead = dead + 1\n"
    "    else\n"
    "      out[#out + 1] = eid\n"
    "      out[#out + 1] = jid\n"
    "    end\n"
    "  else\n"
    "    redis.call('XACK', KEYS[1], ARGV[1], eid)\n"
    "  end\n"
    "end\n"
    "return {dead, out}\n";

/* ---- replies ------------------------------------------------------------- */


/* XREADGROUP's [[stream, [[id, [f, v, ...]], ...]]] into entries. */
static int decode_read(redisReply *reply, al_fleet_entry_t **out, size_t *n) {
  const redisReply *list;
  size_t i;
  size_t k = 0;
  int rc = al__fleet_stream_entries(reply, &list);

  *out = NULL;
  *n = 0;
  if (rc != 0 || list == NULL) {
    return rc;
  }
  *out = al_calloc(list->elements, sizeof(**out));
  if (*out == NULL) {
    return UV_ENOMEM;
  }
  for (i = 0; i < list->elements; i++) {
    const char *job;
    const char *eid = al__fleet_entry(list->element[i], "id", &job);

    /* An entry deleted while pending has no fields: skipped. */
    if (eid != NULL && job != NULL) {
      (*out)[k].entry_id = eid;
      (*out)[k].job_id = job;
      k++;
    }
  }
  *n = k;
  return 0;
}

/* The reap script's {dead, {eid, jid, ...}}. */
static int decode_reap(redisReply *reply, al_fleet_entry_t **out, size_t *n,
                       size_t *dead) {
  redisReply *list;
  size_t i;

  *out = NULL;
  *n = 0;
  *dead = 0;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
      reply->element[0]->type != REDIS_REPLY_INTEGER ||
      reply->element[1]->type != REDIS_REPLY_ARRAY ||
      reply->element[1]->elements % 2 != 0) {
    return AL_EPROTO;
  }
  *dead = (size_t)reply->element[0]->integer;
  list = reply->element[1];
  if (list->elements == 0) {
    return 0;
  }
  *out = al_calloc(list->elements / 2, sizeof(**out));
  if (*out == NULL) {
    return UV_ENOMEM;
  }
  for (i = 0; i < list->elements; i += 2) {
    if (!al__fleet_is_str(list->element[i]) || !al__fleet_is_str(list->element[i + 1])) {
      al_free(*out);
      *out = NULL;
      return AL_EPROTO;
    }
    (*out)[i / 2].entry_id = list->element[i]->str;
    (*out)[i / 2].job_id = list->element[i + 1]->str;
  }
  *n = list->elements / 2;
  return 0;
}

static void on_reply(al_fleet_redis_t *r, int status, redisReply *reply,
                     void *data) {
  op_t *op = data;
  al_fleet_entry_t *e = NULL;
  size_t n = 0;
  size_t dead = 0;

  switch (op->kind) {
    case OP_GROUP:
      if (status == AL_EREDIS && strncmp(reply->str, "BUSYGROUP", 9) == 0) {
        status = 0;
      }
      op->cb.status(status, op->data);
      break;
    case OP_STATUS:
      op->cb.status(status, op->data);
      break;
    case OP_SUBMIT:
      if (status == 0 && !al__fleet_is_str(reply) && reply->type != REDIS_REPLY_NIL) {
        status = AL_EPROTO;
      }
      op->cb.submit(status, status == 0 && al__fleet_is_str(reply), op->data);
      break;
    case OP_FENCED:
      if (status == 0) {
        status = reply->type != REDIS_REPLY_INTEGER ? AL_EPROTO
                 : reply->integer == 1              ? 0
                                                    : AL_EFENCED;
      }
      op->cb.status(status, op->data);
      break;
    case OP_CLAIM:
      if (status == 0 && reply->type != REDIS_REPLY_INTEGER) {
        status = AL_EPROTO;
      }
      if (status == 0 && reply->integer < 0) {
        status = AL_EFENCED;
      }
      op->cb.claim(status, status == 0 ? reply->integer : 0,
                   status == 0 && reply->integer == 0, op->data);
      break;
    case OP_READ:
    case OP_REAP:
      if (status == 0) {
        status = op->kind == OP_READ ? decode_read(reply, &e, &n)
                                     : decode_reap(reply, &e, &n, &dead);
      }
      op->cb.entries(status, status == 0 ? e : NULL, status == 0 ? n : 0, dead,
                     op->data);
      al_free(e);
      break;
  }
  al_free(op);
}

/* ---- sending ---------------------------------------------------------------
 */

static int send_op(al_fleet_queue_t *q, op_t *op, int argc, const char **argv) {
  int rc;

  if (op == NULL) {
    return UV_ENOMEM;
  }
  /* An op dropped by a close of the connection is freed, not leaked. */
  rc = al_fleet_redis_command_rel(q->redis, on_reply, al_free, op, argc, argv,
                                  NULL);
  if (rc != 0) {
    al_free(op);
  }
  return rc;
}

static op_t *op_new(enum op_kind kind, void *data) {
  op_t *op = al_calloc(1, sizeof(*op));

  if (op != NULL) {
    op->kind = kind;
    op->data = data;
  }
  return op;
}

/* "P:<what>:<id>" or "P:<what>" into a caller's buffer; AL_ETOOBIG when it
 * does not fit (job ids are bounded by the caller's buffers). */
static int key(char *buf, size_t len, const al_fleet_queue_t *q,
               const char *what, const char *id) {
  int n = id ? snprintf(buf, len, "%s:%s:%s", q->prefix, what, id)
             : snprintf(buf, len, "%s:%s", q->prefix, what);

  return n < 0 || (size_t)n >= len ? AL_ETOOBIG : 0;
}

#define KEYLEN 512

int al_fleet_queue_ensure_group(al_fleet_queue_t *q, al_fleet_status_cb cb,
                                void *data) {
  char jobs[KEYLEN];
  const char *argv[6];
  op_t *op;
  int rc = key(jobs, sizeof(jobs), q, "jobs", NULL);

  if (rc != 0) {
    return rc;
  }
  argv[0] = "XGROUP";
  argv[1] = "CREATE";
  argv[2] = jobs;
  argv[3] = q->group;
  argv[4] = "0";
  argv[5] = "MKSTREAM";
  op = op_new(OP_GROUP, data);
  if (op != NULL) {
    op->cb.status = cb;
  }
  return send_op(q, op, 6, argv);
}

int al_fleet_queue_submit(al_fleet_queue_t *q, const char *job_id,
                          const char *body, al_fleet_submit_cb cb, void *data) {
  char job[KEYLEN];
  char jobs[KEYLEN];
  char submitted[KEYLEN];
  const char *argv[8];
  op_t *op;

  if (key(job, sizeof(job), q, "job", job_id) != 0 ||
      key(jobs, sizeof(jobs), q, "jobs", NULL) != 0 ||
      key(submitted, sizeof(submitted), q, "submitted", NULL) != 0) {
    return AL_ETOOBIG;
  }
  argv[0] = "EVAL";
  argv[1] = submit_lua;
  argv[2] = "3";
  argv[3] = job;
  argv[4] = jobs;
  argv[5] = submitted;
  argv[6] = job_id;
  argv[7] = body;
  op = op_new(OP_SUBMIT, data);
  if (op != NULL) {
    op->cb.submit = cb;
  }
  return send_op(q, op, 8, argv);
}

int al_fleet_queue_read(al_fleet_queue_t *q, unsigned free_slots,
                        al_fleet_entries_cb cb, void *data) {
  char jobs[KEYLEN];
  char count[16];
  const char *argv[9];
  op_t *op;

  if (free_slots == 0) {
    return AL_EINVAL;
  }
  if (key(jobs, sizeof(jobs), q, "jobs", NULL) != 0) {
    return AL_ETOOBIG;
  }
  snprintf(count, sizeof(count), "%u", free_slots);
  argv[0] = "XREADGROUP";
  argv[1] = "GROUP";
  argv[2] = q->group;
  argv[3] = q->consumer;
  argv[4] = "COUNT";
  argv[5] = count;
  argv[6] = "STREAMS";
  argv[7] = jobs;
  argv[8] = ">";
  op = op_new(OP_READ, data);
  if (op != NULL) {
    op->cb.entries = cb;
  }
  return send_op(q, op, 9, argv);
}

int al_fleet_queue_claim(al_fleet_queue_t *q, const char *job_id,
                         al_fleet_claim_cb cb, void *data) {
  char epoch[KEYLEN];
  char owner[KEYLEN];
  char result[KEYLEN];
  char lease[24];
  const char *argv[8];
  op_t *op;

  if (key(epoch, sizeof(epoch), q, "epoch", job_id) != 0 ||
      key(owner, sizeof(owner), q, "owner", job_id) != 0 ||
      key(result, sizeof(result), q, "result", job_id) != 0) {
    return AL_ETOOBIG;
  }
  snprintf(lease, sizeof(lease), "%" PRIu64, q->lease_ms);
  argv[0] = "EVAL";
  argv[1] = claim_lua;
  argv[2] = "3";
  argv[3] = epoch;
  argv[4] = owner;
  argv[5] = result;
  argv[6] = q->consumer;
  argv[7] = lease;
  op = op_new(OP_CLAIM, data);
  if (op != NULL) {
    op->cb.claim = cb;
  }
  return send_op(q, op, 8, argv);
}

/* The fenced scripts share their first keys and arguments. */
typedef struct {
  char epoch[KEYLEN];
  char owner[KEYLEN];
  char owner_val[KEYLEN];
  char epoch_val[24];
} fence_args_t;

static int fence_args(fence_args_t *f, const al_fleet_queue_t *q,
                      const char *job_id, int64_t epoch) {
  int n;

  if (key(f->epoch, sizeof(f->epoch), q, "epoch", job_id) != 0 ||
      key(f->owner, sizeof(f->owner), q, "owner", job_id) != 0) {
    return AL_ETOOBIG;
  }
  n = snprintf(f->owner_val, sizeof(f->owner_val), "%s:%" PRId64, q->consumer,
               epoch);
  if (n < 0 || (size_t)n >= sizeof(f->owner_val)) {
    return AL_ETOOBIG;
  }
  snprintf(f->epoch_val, sizeof(f->epoch_val), "%" PRId64, epoch);
  return 0;
}

int al_fleet_queue_fence(al_fleet_queue_t *q, const char *job_id, int64_t epoch,
                         al_fleet_status_cb cb, void *data) {
  fence_args_t f;
  const char *argv[7];
  op_t *op;
  int rc = fence_args(&f, q, job_id, epoch);

  if (rc != 0) {
    return rc;
  }
  argv[0] = "EVAL";
  argv[1] = fence_lua;
  argv[2] = "2";
  argv[3] = f.epoch;
  argv[4] = f.owner;
  argv[5] = f.owner_val;
  argv[6] = f.epoch_val;
  op = op_new(OP_FENCED, data);
  if (op != NULL) {
    op->cb.status = cb;
  }
  return send_op(q, op, 7, argv);
}

/* A fenced script on the job's entry: KEYS epoch, owner, jobs; ARGV the
 * owner's value, the epoch, then four more (renew and release). */
static int send_fenced_entry(al_fleet_queue_t *q, const char *script,
                             const char *job_id, int64_t epoch,
                             const char *const more[4],
                             al_fleet_status_cb cb, void *data) {
  fence_args_t f;
  char jobs[KEYLEN];
  const char *argv[12];
  op_t *op;
  int rc = fence_args(&f, q, job_id, epoch);

  if (rc != 0 || key(jobs, sizeof(jobs), q, "jobs", NULL) != 0) {
    return AL_ETOOBIG;
  }
  argv[0] = "EVAL";
  argv[1] = script;
  argv[2] = "3";
  argv[3] = f.epoch;
  argv[4] = f.owner;
  argv[5] = jobs;
  argv[6] = f.owner_val;
  argv[7] = f.epoch_val;
  memcpy(&argv[8], more, 4 * sizeof(*more));
  op = op_new(OP_FENCED, data);
  if (op != NULL) {
    op->cb.status = cb;
  }
  return send_op(q, op, 12, argv);
}

int al_fleet_queue_renew(al_fleet_queue_t *q, const char *job_id, int64_t epoch,
                         const char *entry_id, al_fleet_status_cb cb,
                         void *data) {
  char lease[24];
  const char *more[4];

  snprintf(lease, sizeof(lease), "%" PRIu64, q->lease_ms);
  more[0] = lease;
  more[1] = q->group;
  more[2] = q->consumer;
  more[3] = entry_id;
  return send_fenced_entry(q, renew_lua, job_id, epoch, more, cb, data);
}

int al_fleet_queue_release(al_fleet_queue_t *q, const char *job_id,
                           int64_t epoch, const char *entry_id,
                           al_fleet_status_cb cb, void *data) {
  char idle[24];
  const char *more[4];

  snprintf(idle, sizeof(idle), "%" PRIu64, q->lease_ms);
  more[0] = q->group;
  more[1] = q->consumer;
  more[2] = entry_id;
  more[3] = idle;
  return send_fenced_entry(q, release_lua, job_id, epoch, more, cb, data);
}

int al_fleet_queue_set_error(al_fleet_queue_t *q, const char *job_id,
                             const char *error, al_fleet_status_cb cb,
                             void *data) {
  char k[KEYLEN];
  const char *argv[3];
  op_t *op;

  if (key(k, sizeof(k), q, "error", job_id) != 0) {
    return AL_ETOOBIG;
  }
  argv[0] = "SET";
  argv[1] = k;
  argv[2] = error;
  op = op_new(OP_STATUS, data);
  if (op != NULL) {
    op->cb.status = cb;
  }
  return send_op(q, op, 3, argv);
}

int al_fleet_queue_reap(al_fleet_queue_t *q, unsigned count,
                        al_fleet_entries_cb cb, void *data) {
  char jobs[KEYLEN];
  char dead[KEYLEN];
  char results[KEYLEN];
  char idle[24];
  char cnt[16];
  char maxd[16];
  const char *argv[12];
  op_t *op;

  if (count == 0) {
    return AL_EINVAL;
  }
  if (key(jobs, sizeof(jobs), q, "jobs", NULL) != 0 ||
      key(dead, sizeof(dead), q, "dead", NULL) != 0 ||
      key(results, sizeof(results), q, "results", NULL) != 0) {
    return AL_ETOOBIG;
  }
  snprintf(idle, sizeof(idle), "%" PRIu64, q->lease_ms);
  snprintf(cnt, sizeof(cnt), "%u", count);
  snprintf(maxd, sizeof(maxd), "%u", q->max_deliveries);
  argv[0] = "EVAL";
  argv[1] = reap_lua;
  argv[2] = "3";
  argv[3] = jobs;
  argv[4] = dead;
  argv[5] = results;
  argv[6] = q->group;
  argv[7] = q->consumer;
  argv[8] = idle;
  argv[9] = cnt;
  argv[10] = maxd;
  argv[11] = q->prefix;
  op = op_new(OP_REAP, data);
  if (op != NULL) {
    op->cb.entries = cb;
  }
  return send_op(q, op, 12, argv);
}

int al_fleet_queue_complete(al_fleet_queue_t *q, const char *job_id,
                            int64_t epoch, const char *entry_id,
                            const char *result, al_fleet_status_cb cb,
                            void *data) {
  fence_args_t f;
  char res_key[KEYLEN];
  char results[KEYLEN];
  char jobs[KEYLEN];
  const char *argv[14];
  op_t *op;

  if (fence_args(&f, q, job_id, epoch) != 0 ||
      key(res_key, sizeof(res_key), q, "result", job_id) != 0 ||
      key(results, sizeof(results), q, "results", NULL) != 0 ||
      key(jobs, sizeof(jobs), q, "jobs", NULL) != 0) {
    return AL_ETOOBIG;
  }
  argv[0] = "EVAL";
  argv[1] = complete_lua;
  argv[2] = "5";
  argv[3] = f.epoch;
  argv[4] = f.owner;
  argv[5] = res_key;
  argv[6] = results;
  argv[7] = jobs;
  argv[8] = f.owner_val;
  argv[9] = f.epoch_val;
  argv[10] = result;
  argv[11] = q->group;
  argv[12] = entry_id;
  argv[13] = job_id;
  op = op_new(OP_FENCED, data);
  if (op != NULL) {
    op->cb.status = cb;
  }
  return send_op(q, op, 14, argv);
}
