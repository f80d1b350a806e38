/* Read-only queries on a fleet queue (admin.h): what `agentloop batch
 * results` and `agentloop batch status` show. Nothing here writes a key. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "fleet/admin.h"

#define KEYLEN 512
/* The rate scan reads at most this many result entries (in pages of 500,
 * inside one script, so only two numbers cross the wire). */
#define RATE_SCAN_MAX "100000"
/* The lease scan looks at most at this many running jobs. */
#define LEASE_SCAN_MAX "10000"

static int key(char *buf, size_t len, const char *prefix, const char *what) {
  int n = snprintf(buf, len, "%s:%s", prefix, what);

  return n < 0 || (size_t)n >= len ? AL_ETOOBIG : 0;
}


/* ---- results ------------------------------------------------------------- */

typedef struct {
  al_fleet_results_cb cb;
  void *data;
} results_op_t;

/* XREAD's nil (timed out) or [[stream, [[id, [f, v, ...]], ...]]]. */
static int decode_results(redisReply *reply, al_fleet_result_t **out,
                          size_t *n) {
  const redisReply *list;
  size_t i;
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
    const redisReply *e = list->element[i];

    (*out)[i].entry_id = al__fleet_entry(e, "id", &(*out)[i].job_id);
    (void)al__fleet_entry(e, "result", &(*out)[i].result);
    if ((*out)[i].entry_id == NULL || (*out)[i].job_id == NULL ||
        (*out)[i].result == NULL) {
      al_free(*out);
      *out = NULL;
      return AL_EPROTO;
    }
  }
  *n = list->elements;
  return 0;
}

static void on_results(al_fleet_redis_t *r, int status, redisReply *reply,
                       void *data) {
  results_op_t *op = data;
  al_fleet_result_t *res = NULL;
  size_t n = 0;

  (void)r;
  if (status == 0) {
    status = decode_results(reply, &res, &n);
  }
  op->cb(status, res, n, op->data);
  al_free(res);
  al_free(op);
}

int al_fleet_admin_results(al_fleet_redis_t *r, const char *prefix,
                           const char *after, unsigned count, int64_t block_ms,
                           al_fleet_results_cb cb, void *data) {
  char results[KEYLEN];
  char cnt[16];
  char block[24];
  const char *argv[8];
  int argc = 0;
  results_op_t *op;
  int rc;

  if (count == 0) {
    return AL_EINVAL;
  }
  if (key(results, sizeof(results), prefix, "results") != 0) {
    return AL_ETOOBIG;
  }
  snprintf(cnt, sizeof(cnt), "%u", count);
  snprintf(block, sizeof(block), "%" PRId64, block_ms);
  argv[argc++] = "XREAD";
  if (block_ms >= 0) {
    argv[argc++] = "BLOCK";
    argv[argc++] = block;
  }
  argv[argc++] = "COUNT";
  argv[argc++] = cnt;
  argv[argc++] = "STREAMS";
  argv[argc++] = results;
  argv[argc++] = after;
  op = al_calloc(1, sizeof(*op));
  if (op == NULL) {
    return UV_ENOMEM;
  }
  op->cb = cb;
  op->data = data;
  rc = al_fleet_redis_command_rel(r, on_results, al_free, op, argc, argv, NULL);
  if (rc != 0) {
    al_free(op);
  }
  return rc;
}

/* ---- the submitted count ------------------------------------------------- */

typedef struct {
  al_fleet_count_cb cb;
  void *data;
} count_op_t;

static int64_t reply_int(const redisReply *reply, bool *ok) {
  char *end;
  long long v;

  *ok = true;
  if (reply->type == REDIS_REPLY_INTEGER) {
    return reply->integer;
  }
  if (reply->type == REDIS_REPLY_NIL) {
    return 0;
  }
  if (al__fleet_is_str(reply)) {
    v = strtoll(reply->str, &end, 10);
    if (end != reply->str && *end == '\0') {
      return v;
    }
  }
  *ok = false;
  return 0;
}

static void on_count(al_fleet_redis_t *r, int status, redisReply *reply,
                     void *data) {
  count_op_t *op = data;
  int64_t n = 0;
  bool ok = true;

  (void)r;
  if (status == 0) {
    n = reply_int(reply, &ok);
    status = ok ? 0 : AL_EPROTO;
  }
  op->cb(status, n, op->data);
  al_free(op);
}

int al_fleet_admin_submitted(al_fleet_redis_t *r, const char *prefix,
                             al_fleet_count_cb cb, void *data) {
  char k[KEYLEN];
  const char *argv[2];
  count_op_t *op;
  int rc;

  if (key(k, sizeof(k), prefix, "submitted") != 0) {
    return AL_ETOOBIG;
  }
  argv[0] = "GET";
  argv[1] = k;
  op = al_calloc(1, sizeof(*op));
  if (op == NULL) {
    return UV_ENOMEM;
  }
  op->cb = cb;
  op->data = data;
  rc = al_fleet_redis_command_rel(r, on_count, al_free, op, 2, argv, NULL);
  if (rc != 0) {
    al_free(op);
  }
  return rc;
}

/* ---- status -------------------------------------------------------------- */

/* KEYS: results. ARGV: scan bound. {last minute, last 10 minutes (-1 past
 * the bound)} by the server's clock, which also stamps the entry ids. The
 * exclusive range "(" (Redis 6.2) pages without id arithmetic. */
static const char rate_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local m1 = now - 60000\n"
    "local lo = string.format('%d', now - 600000)\n"
    "local n1, n10 = 0, 0\n"
    "local hi = '+'\n"
    "while n10 < tonumber(ARGV[1]) do\n"
    "  local r = redis.call('XREVRANGE', KEYS[1], hi, lo, 'COUNT', 500)\n"
    "  if #r == 0 then return {n1, n10} end\n"
    "  for _, e in ipairs(r) do\n"
    "    n10 = n10 + 1\n"
    "    if tonumber(string.match(e[1], '^(%d+)')) >= m1 then\n"
    "      n1 = n1 + 1\n"
    "    end\n"
    "  end\n"
    "  hi = '(' .. r[#r][1]\n"
    "end\n"
    "return {n1, -1}\n";

/* KEYS: jobs. ARGV: group, prefix, scan bound. {{consumer, shortest
 * lease left in ms (-1 none), entries without an owner key}, ...} over the
 * group's pending entries (one XRANGE and one PTTL each: as many as jobs
 * are running, bounded). */
static const char leases_lua[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+',"
    " tonumber(ARGV[3]))\n"
    "local by, out = {}, {}\n"
    "for _, e in ipairs(p) do\n"
    "  local r = redis.call('XRANGE', KEYS[1], e[1], e[1])\n"
    "  local jid = nil\n"
    "  if r[1] then\n"
    "    local f = r[1][2]\n"
    "    for i = 1, #f, 2 do if f[i] == 'id' then jid = f[i + 1] end end\n"
    "  end\n"
    "  local t = -2\n"
    "  if jid then t = redis.call('PTTL', ARGV[2] .. ':owner:' .. jid) end\n"
    "  local s = by[e[2]]\n"
    "  if not s then\n"
    "    s = {e[2], -1, 0}\n"
    "    by[e[2]] = s\n"
    "    out[#out + 1] = s\n"
    "  end\n"
    "  if t == -2 then s[3] = s[3] + 1\n"
    "  elseif t >= 0 and (s[2] < 0 or t < s[2]) then s[2] = t end\n"
    "end\n"
    "return out\n";

enum st_kind {
  ST_SUBMITTED,
  ST_QUEUED,
  ST_DONE,
  ST_DEAD,
  ST_GROUPS,
  ST_PENDING,
  ST_LEASES, /* after ST_PENDING: it fills the consumers listed there */
  ST_RATE,
  ST_APPENDONLY,
  ST_APPENDFSYNC,
  ST_N
};

typedef struct status_ctx_s status_ctx_t;

typedef struct {
  status_ctx_t *ctx;
  enum st_kind kind;
} st_op_t;

struct status_ctx_s {
  al_fleet_status_t st;
  char group[128];
  int64_t entries_read; /* -1 unknown */
  int64_t lag;          /* -1 unknown */
  unsigned outstanding;
  int status;
  al_fleet_status_done_cb cb;
  void *data;
  st_op_t ops[ST_N];
};

static bool err_is(const redisReply *reply, const char *prefix) {
  return reply != NULL && reply->type == REDIS_REPLY_ERROR &&
         strstr(reply->str, prefix) != NULL;
}

/* XINFO GROUPS: one flat name/value array per group. */
static int decode_groups(status_ctx_t *c, redisReply *reply) {
  size_t i, j;

  if (reply->type != REDIS_REPLY_ARRAY) {
    return AL_EPROTO;
  }
  for (i = 0; i < reply->elements; i++) {
    redisReply *g = reply->element[i];
    bool mine = false;
    int64_t er = -1, lag = -1;

    if (g->type != REDIS_REPLY_ARRAY) {
      return AL_EPROTO;
    }
    for (j = 0; j + 1 < g->elements; j += 2) {
      const redisReply *k = g->element[j], *v = g->element[j + 1];

      if (!al__fleet_is_str(k)) {
        continue;
      }
      if (strcmp(k->str, "name") == 0 && al__fleet_is_str(v)) {
        mine = strcmp(v->str, c->group) == 0;
      } else if (strcmp(k->str, "entries-read") == 0 &&
                 v->type == REDIS_REPLY_INTEGER) {
        er = v->integer;
      } else if (strcmp(k->str, "lag") == 0 && v->type == REDIS_REPLY_INTEGER) {
        lag = v->integer;
      }
    }
    if (mine) {
      c->st.group_exists = true;
      c->entries_read = er;
      c->lag = lag;
    }
  }
  return 0;
}

/* XPENDING summary: [count, min, max, [[consumer, "n"], ...]]. */
static int decode_pending(status_ctx_t *c, redisReply *reply) {
  redisReply *list;
  size_t i;
  bool ok;

  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4 ||
      reply->element[0]->type != REDIS_REPLY_INTEGER) {
    return AL_EPROTO;
  }
  c->st.running = reply->element[0]->integer;
  list = reply->element[3];
  if (list->type != REDIS_REPLY_ARRAY) {
    return 0; /* nil: nothing pending */
  }
  for (i = 0; i < list->elements; i++) {
    redisReply *e = list->element[i];
    al_fleet_consumer_t *k;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        !al__fleet_is_str(e->element[0])) {
      return AL_EPROTO;
    }
    if (c->st.nconsumers == AL_FLEET_STATUS_CONSUMERS) {
      break;
    }
    k = &c->st.consumers[c->st.nconsumers++];
    snprintf(k->name, sizeof(k->name), "%s", e->element[0]->str);
    k->lease_min_ms = -1;
    k->pending = reply_int(e->element[1], &ok);
    if (!ok) {
      return AL_EPROTO;
    }
  }
  return 0;
}

/* leases_lua's {{consumer, shortest, without}, ...}. */
static int decode_leases(status_ctx_t *c, redisReply *reply) {
  size_t i, k;
  bool ok = true;

  if (reply->type != REDIS_REPLY_ARRAY) {
    return AL_EPROTO;
  }
  for (i = 0; i < reply->elements; i++) {
    redisReply *e = reply->element[i];

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 3 ||
        !al__fleet_is_str(e->element[0])) {
      return AL_EPROTO;
    }
    for (k = 0; k < c->st.nconsumers; k++) {
      al_fleet_consumer_t *x = &c->st.consumers[k];

      if (strcmp(x->name, e->element[0]->str) == 0) {
        x->lease_min_ms = reply_int(e->element[1], &ok);
        x->no_lease = ok ? reply_int(e->element[2], &ok) : 0;
      }
    }
  }
  return ok ? 0 : AL_EPROTO;
}

static int decode_config(redisReply *reply, char *out, size_t len) {
  if (reply->type != REDIS_REPLY_ARRAY) {
    return AL_EPROTO;
  }
  if (reply->elements == 2 && al__fleet_is_str(reply->element[1])) {
    snprintf(out, len, "%s", reply->element[1]->str);
  }
  return 0;
}

static void status_finish(status_ctx_t *c) {
  al_fleet_status_t *st = &c->st;

  if (!st->group_exists) {
    st->undelivered = st->queued; /* no worker has read any */
  } else if (c->lag >= 0) {
    st->undelivered = c->lag;
  } else if (c->entries_read >= 0) {
    st->undelivered = AL_MAX(st->queued - c->entries_read, 0);
  } else {
    st->undelivered = -1;
  }
  if (st->appendonly[0] == '\0' || st->appendfsync[0] == '\0') {
    st->persistence = -1;
  } else {
    st->persistence = strcmp(st->appendonly, "yes") == 0 &&
                      strcmp(st->appendfsync, "no") != 0;
  }
  c->cb(c->status, st, c->data);
  al_free(c);
}

static void on_status_reply(al_fleet_redis_t *r, int status, redisReply *reply,
                            void *data) {
  st_op_t *op = data;
  status_ctx_t *c = op->ctx;
  al_fleet_status_t *st = &c->st;
  bool ok = true;
  int rc = status;

  (void)r;
  if (status == AL_EREDIS) {
    /* Nothing submitted yet, no group yet, or CONFIG refused: not errors. */
    if ((op->kind == ST_GROUPS && err_is(reply, "no such key")) ||
        ((op->kind == ST_PENDING || op->kind == ST_LEASES) &&
         err_is(reply, "NOGROUP")) ||
        op->kind == ST_APPENDONLY || op->kind == ST_APPENDFSYNC) {
      rc = 0;
      reply = NULL;
    }
  }
  if (rc == 0 && reply != NULL) {
    switch (op->kind) {
      case ST_SUBMITTED:
        st->submitted = reply_int(reply, &ok);
        break;
      case ST_QUEUED:
        st->queued = reply_int(reply, &ok);
        break;
      case ST_DONE:
        st->done = reply_int(reply, &ok);
        break;
      case ST_DEAD:
        st->dead = reply_int(reply, &ok);
        break;
      case ST_GROUPS:
        rc = decode_groups(c, reply);
        break;
      case ST_PENDING:
        rc = decode_pending(c, reply);
        break;
      case ST_LEASES:
        rc = decode_leases(c, reply);
        break;
      case ST_RATE:
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
          rc = AL_EPROTO;
        } else {
          st->rate_1m = reply_int(reply->element[0], &ok);
          st->rate_10m = ok ? reply_int(reply->element[1], &ok) : 0;
        }
        break;
      case ST_APPENDONLY:
        rc = decode_config(reply, st->appendonly, sizeof(st->appendonly));
        break;
      case ST_APPENDFSYNC:
        rc = decode_config(reply, st->appendfsync, sizeof(st->appendfsync));
        break;
      case ST_N:
        break;
    }
    if (!ok) {
      rc = AL_EPROTO;
    }
  }
  if (rc != 0 && c->status == 0) {
    c->status = rc;
  }
  if (--c->outstanding == 0) {
    status_finish(c);
  }
}

/* A reply dropped by a close: the last one frees the context. */
static void status_release(void *data) {
  st_op_t *op = data;
  status_ctx_t *c = op->ctx;

  if (--c->outstanding == 0) {
    al_free(c);
  }
}

int al_fleet_admin_status(al_fleet_redis_t *r, const char *prefix,
                          const char *group, al_fleet_status_done_cb cb,
                          void *data) {
  char submitted[KEYLEN], jobs[KEYLEN], results[KEYLEN], dead[KEYLEN];
  const char *argv[ST_N][7];
  int argc[ST_N];
  status_ctx_t *c;
  unsigned i;
  int rc = 0;

  if (key(submitted, sizeof(submitted), prefix, "submitted") != 0 ||
      key(jobs, sizeof(jobs), prefix, "jobs") != 0 ||
      key(results, sizeof(results), prefix, "results") != 0 ||
      key(dead, sizeof(dead), prefix, "dead") != 0 ||
      strlen(group) >= sizeof(c->group)) {
    return AL_ETOOBIG;
  }
  c = al_calloc(1, sizeof(*c));
  if (c == NULL) {
    return UV_ENOMEM;
  }
  snprintf(c->group, sizeof(c->group), "%s", group);
  c->entries_read = c->lag = -1;
  c->cb = cb;
  c->data = data;
#define CMD(k, n, ...)                \
  do {                                \
    const char *a_[] = {__VA_ARGS__}; \
    memcpy(argv[k], a_, sizeof(a_));  \
    argc[k] = n;                      \
  } while (0)
  CMD(ST_SUBMITTED, 2, "GET", submitted);
  CMD(ST_QUEUED, 2, "XLEN", jobs);
  CMD(ST_DONE, 2, "XLEN", results);
  CMD(ST_DEAD, 2, "XLEN", dead);
  CMD(ST_GROUPS, 3, "XINFO", "GROUPS", jobs);
  CMD(ST_PENDING, 3, "XPENDING", jobs, c->group);
  CMD(ST_LEASES, 7, "EVAL", leases_lua, "1", jobs, c->group, prefix,
      LEASE_SCAN_MAX);
  CMD(ST_RATE, 5, "EVAL", rate_lua, "1", results, RATE_SCAN_MAX);
  CMD(ST_APPENDONLY, 3, "CONFIG", "GET", "appendonly");
  CMD(ST_APPENDFSYNC, 3, "CONFIG", "GET", "appendfsync");
#undef CMD
  /* All pipelined; the last reply finishes. A send refused part-way (the
   * connection went down) fails the whole status, once. */
  c->outstanding = 1;
  for (i = 0; i < ST_N && rc == 0; i++) {
    c->ops[i].ctx = c;
    c->ops[i].kind = (enum st_kind)i;
    rc = al_fleet_redis_command_rel(r, on_status_reply, status_release,
                                    &c->ops[i], argc[i], argv[i], NULL);
    if (rc == 0) {
      c->outstanding++;
    }
  }
  if (rc != 0) {
    c->status = rc;
  }
  if (--c->outstanding == 0) {
    if (i == 1 && rc != 0) {
      al_free(c); /* nothing sent: the caller gets rc, no callback */
      return rc;
    }
    status_finish(c);
  }
  return 0;
}
