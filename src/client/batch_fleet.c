/* `agentloop batch submit | results | status --queue URL` (docs/batch.md):
 * one Redis connection on a loop of its own, every reply a callback.
 *
 * submit validates the whole jobs file with batch run's reader first
 * (nothing is sent when a line is bad), then pipelines the idempotent
 * submit script with a bounded window. results reads P:results from the
 * start in pages; with --follow it blocks on XREAD (this connection does
 * nothing else, so a block holds up nothing) for a second at a time, so a
 * signal is prompt, and after a reconnect goes on after the last entry it
 * printed. status pipelines read-only queries (fleet/admin.h). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "client/batch.h"
#include "client/batch_fleet.h"
#include "common/common.h"
#include "fleet/admin.h"
#include "fleet/fleet.h"

enum {
  EXIT_OK = 0,
  EXIT_FAIL = 1,
  EXIT_USAGE = 2,
  EXIT_SIGINT = 130,
  EXIT_SIGTERM = 143
};

#define SUBMIT_WINDOW 256 /* submits in flight at once */
#define RESULTS_PAGE 500
#define FOLLOW_BLOCK_MS 1000

typedef enum { CMD_SUBMIT, CMD_RESULTS, CMD_STATUS } cmd_t;

typedef struct {
  uv_loop_t loop;
  cmd_t cmd;
  const char *url_text;
  al_fleet_url_t url;
  al_fleet_redis_t *redis;
  al_fleet_queue_t q;
  uv_timer_t connect_timer;
  uv_signal_t sigint, sigterm;
  bool started; /* the first connection came up */
  bool finished;
  int code;
  bool machine; /* ndjson / json */
  const char *group;
  /* submit */
  al_batch_job_t *jobs;
  char **bodies;
  size_t njobs, next, inflight, fresh, known, failed;
  int fail_status;
  /* results */
  bool follow;
  bool reading; /* a read or the count is in flight */
  char last_id[64];
  int64_t seen;
} fc_t;

static void usage(FILE *f) {
  fputs(
      "usage: agentloop batch submit JOBS.jsonl --queue URL [options]\n"
      "       agentloop batch results --queue URL [--follow] [options]\n"
      "       agentloop batch status --queue URL [--group NAME] [options]\n"
      "\n"
      "Fleet mode (docs/fleet.md): submit puts every job of JOBS.jsonl on\n"
      "the queue (each line checked as batch run checks it; nothing is\n"
      "submitted when one is bad; submitting again is harmless); results\n"
      "prints every result so far, and with --follow the new ones until\n"
      "every submitted job has one; status counts the jobs.\n"
      "URL: redis://HOST[:PORT][/PREFIX] or unix://PATH[?prefix=PREFIX].\n"
      "\n"
      "      --queue URL            the queue (required)\n"
      "      --connect-timeout S    give up when Redis does not answer in S\n"
      "                             seconds (default 5)\n"
      "      --follow               results: wait for the rest\n"
      "      --group NAME           status: the workers' group (agentloop)\n"
      "      --output-format F      text (default), ndjson (submit,\n"
      "                             results) or json (status)\n"
      "  -h, --help                 this text\n"
      "\n"
      "exit: 0 done, 1 Redis unreachable or an error, 2 usage or a bad\n"
      "jobs file, 130 / 143 interrupted by SIGINT / SIGTERM\n",
      f);
}

/* ---- ending -------------------------------------------------------------- */

static void finish(fc_t *c, int code) {
  if (c->finished) {
    return;
  }
  c->finished = true;
  c->code = code;
  fflush(stdout);
  al_fleet_redis_close(c->redis, NULL);
  uv_close((uv_handle_t *)&c->connect_timer, NULL);
  uv_close((uv_handle_t *)&c->sigint, NULL);
  uv_close((uv_handle_t *)&c->sigterm, NULL);
}

static void on_signal(uv_signal_t *s, int signum) {
  fc_t *c = s->data;

  finish(c, signum == SIGINT ? EXIT_SIGINT : EXIT_SIGTERM);
}

static void on_connect_timeout(uv_timer_t *t) {
  fc_t *c = t->data;
  const char *why = al_fleet_redis_last_error(c->redis);

  al__batch_say("cannot reach Redis at %s: %s", c->url_text,
           why[0] != '\0' ? why : "no answer");
  finish(c, EXIT_FAIL);
}

/* ---- submit -------------------------------------------------------------- */

static void submit_pump(fc_t *c);

static void submit_end(fc_t *c) {
  if (c->machine) {
    printf(
        "{\"type\":\"submit_end\",\"submitted\":%zu,\"already\":%zu,"
        "\"failed\":%zu}\n",
        c->fresh, c->known, c->njobs - c->fresh - c->known);
  } else {
    printf("%zu submitted, %zu already there\n", c->fresh, c->known);
  }
  if (c->failed > 0 || c->fresh + c->known < c->njobs) {
    al__batch_say(
        "%s: %zu of %zu jobs not submitted: %s (submitting again is "
        "harmless)",
        c->url_text, c->njobs - c->fresh - c->known, c->njobs,
        al_strerror(c->fail_status));
    finish(c, EXIT_FAIL);
    return;
  }
  finish(c, EXIT_OK);
}

static void on_submitted(int status, bool fresh, void *data) {
  fc_t *c = data;

  c->inflight--;
  if (status != 0) {
    c->failed++;
    if (c->fail_status == 0) {
      c->fail_status = status;
    }
  } else if (fresh) {
    c->fresh++;
  } else {
    c->known++;
  }
  submit_pump(c);
}

static void submit_pump(fc_t *c) {
  while (c->fail_status == 0 && c->inflight < SUBMIT_WINDOW &&
         c->next < c->njobs) {
    int rc = al_fleet_queue_submit(&c->q, c->jobs[c->next].id,
                                   c->bodies[c->next], on_submitted, c);

    if (rc != 0) {
      c->fail_status = rc;
      break;
    }
    c->next++;
    c->inflight++;
  }
  if (c->inflight == 0 && (c->next == c->njobs || c->fail_status != 0)) {
    submit_end(c);
  }
}

/* Every job's line re-serialized compact by jansson, in the parser's order
 * (the k-th non-blank line is job k: the parser accepted the file). */
static int submit_bodies(fc_t *c, const char *text, size_t len) {
  const char *p = text, *end = text + len;
  size_t k = 0;

  c->bodies = al_calloc(c->njobs, sizeof(*c->bodies));
  if (c->bodies == NULL) {
    return AL_ENOMEM;
  }
  while (p < end && k < c->njobs) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t ll = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
    json_t *o;

    if (strspn(p, " \t\r") < ll) {
      o = json_loadb(p, ll, 0, NULL);
      c->bodies[k] = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
      json_decref(o);
      if (c->bodies[k] == NULL) {
        return AL_ENOMEM;
      }
      k++;
    }
    p += ll + 1;
  }
  return k == c->njobs ? 0 : AL_EPROTO;
}

/* Reads and checks the whole file before the connection is made. */
static int submit_prepare(fc_t *c, const char *path) {
  char *text;
  size_t len;
  char err[4096 + 1024];
  int rc = al__batch_read_file(path, AL_BATCH_JOBS_FILE_MAX, &text, &len);

  if (rc != 0) {
    al__batch_say("%s: %s", path, al_strerror(rc));
    return EXIT_USAGE;
  }
  rc = al__batch_jobs_parse(path, text, len, &c->jobs, &c->njobs, err,
                            sizeof(err));
  if (rc != 0) {
    al_free(text);
    al__batch_say("%s", err);
    return EXIT_USAGE;
  }
  rc = submit_bodies(c, text, len);
  al_free(text);
  if (rc != 0) {
    al__batch_say("%s: %s", path, al_strerror(rc));
    return EXIT_FAIL;
  }
  return EXIT_OK;
}

/* ---- results ------------------------------------------------------------- */

static void results_read(fc_t *c);

static void print_text(const al_fleet_result_t *r) {
  json_t *o = json_loads(r->result, 0, NULL);
  const char *outcome = json_string_value(json_object_get(o, "outcome"));
  const json_t *cost = json_object_get(o, "cost_usd");
  const char *text = json_string_value(json_object_get(o, "text"));
  char costbuf[32] = "-";
  size_t tl;

  if (text == NULL) {
    text = json_string_value(json_object_get(o, "error"));
  }
  if (text == NULL) {
    text = "";
  }
  tl = strcspn(text, "\r\n");
  if (json_is_number(cost)) {
    snprintf(costbuf, sizeof(costbuf), "$%.4f", json_number_value(cost));
  }
  printf("%s  %s  %lld turns  %s  %.*s\n", r->job_id,
         outcome != NULL ? outcome : "?",
         (long long)json_integer_value(json_object_get(o, "turns")), costbuf,
         (int)AL_MIN(tl, (size_t)160), text);
  json_decref(o);
}

static void on_submitted_count(int status, int64_t n, void *data) {
  fc_t *c = data;

  c->reading = false;
  if (c->finished) {
    return;
  }
  if (status == UV_ECONNRESET) {
    return; /* read again once it is back (on_state) */
  }
  if (status != 0) {
    al__batch_say("%s: reading the submitted count: %s", c->url_text,
             al_strerror(status));
    finish(c, EXIT_FAIL);
    return;
  }
  if (c->seen >= n) {
    finish(c, EXIT_OK);
    return;
  }
  results_read(c);
}

static void on_results(int status, const al_fleet_result_t *res, size_t n,
                       void *data) {
  fc_t *c = data;
  size_t i;
  int rc;

  c->reading = false;
  if (c->finished) {
    return;
  }
  if (status == UV_ECONNRESET && c->follow) {
    return; /* read again after the last id once it is back (on_state) */
  }
  if (status != 0) {
    al__batch_say("%s: reading the results: %s", c->url_text, al_strerror(status));
    finish(c, EXIT_FAIL);
    return;
  }
  for (i = 0; i < n; i++) {
    if (c->machine) {
      fputs(res[i].result, stdout);
      fputc('\n', stdout);
    } else {
      print_text(&res[i]);
    }
    snprintf(c->last_id, sizeof(c->last_id), "%s", res[i].entry_id);
  }
  c->seen += (int64_t)n;
  fflush(stdout);
  if (!c->follow) {
    if (n == RESULTS_PAGE) {
      results_read(c); /* more may be there already */
    } else {
      finish(c, EXIT_OK);
    }
    return;
  }
  /* Following: the count after every page, so the last page ends it
   * without waiting out a block. */
  rc = al_fleet_admin_submitted(c->redis, c->url.prefix, on_submitted_count, c);
  if (rc == 0) {
    c->reading = true;
  } else if (rc != UV_ENOTCONN) {
    al__batch_say("%s: %s", c->url_text, al_strerror(rc));
    finish(c, EXIT_FAIL);
  }
}

static void results_read(fc_t *c) {
  int rc;

  if (c->reading || c->finished) {
    return;
  }
  rc = al_fleet_admin_results(c->redis, c->url.prefix, c->last_id, RESULTS_PAGE,
                              c->follow ? FOLLOW_BLOCK_MS : -1, on_results, c);
  if (rc == 0) {
    c->reading = true;
  } else if (rc != UV_ENOTCONN || !c->follow) {
    al__batch_say("%s: %s", c->url_text, al_strerror(rc));
    finish(c, EXIT_FAIL);
  }
  /* UV_ENOTCONN while following: on_state(up) reads again. */
}

/* ---- status -------------------------------------------------------------- */

static void on_status(int status, al_fleet_status_t *st, void *data) {
  fc_t *c = data;
  size_t i;

  if (c->finished) {
    return;
  }
  if (status != 0) {
    al__batch_say("%s: %s", c->url_text, al_strerror(status));
    finish(c, EXIT_FAIL);
    return;
  }
  if (st->persistence == 0) {
    al__batch_say(
        "warning: Redis has appendonly %s, appendfsync %s: jobs can be "
        "lost: see docs/fleet.md",
        st->appendonly, st->appendfsync);
  }
  if (c->machine) {
    json_t *o = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:o,s:I,s:o,s:o,s:s,s:s}", "submitted",
        (json_int_t)st->submitted, "done", (json_int_t)st->done, "dead",
        (json_int_t)st->dead, "queued", (json_int_t)st->queued, "running",
        (json_int_t)st->running, "pending",
        st->undelivered >= 0 ? json_integer(st->undelivered) : json_null(),
        "results_last_minute", (json_int_t)st->rate_1m,
        "results_per_minute_10m",
        st->rate_10m >= 0 ? json_real((double)st->rate_10m / 10.0)
                          : json_null(),
        "durable",
        st->persistence < 0 ? json_null() : json_boolean(st->persistence),
        "appendonly", st->appendonly, "appendfsync", st->appendfsync);
    json_t *cons = json_object();
    json_t *leases = json_object();
    char *s;

    for (i = 0; i < st->nconsumers; i++) {
      const al_fleet_consumer_t *k = &st->consumers[i];

      json_object_set_new(cons, k->name, json_integer(k->pending));
      json_object_set_new(
          leases, k->name,
          json_pack("{s:o,s:I}", "shortest_left_ms",
                    k->lease_min_ms >= 0 ? json_integer(k->lease_min_ms)
                                         : json_null(),
                    "without_lease", (json_int_t)k->no_lease));
    }
    json_object_set_new(o, "leases_by_consumer", leases);
    json_object_set_new(o, "group", json_string(c->group));
    json_object_set_new(o, "running_by_consumer", cons);
    s = json_dumps(o, JSON_COMPACT);
    puts(s != NULL ? s : "{}");
    al_free(s);
    json_decref(o);
  } else {
    printf("queue: %s (group %s%s)\n", c->url_text, c->group,
           st->group_exists ? "" : ", not created yet: no worker joined");
    printf("submitted: %" PRId64 "\n", st->submitted);
    printf("done: %" PRId64 "\n", st->done);
    printf("dead letters: %" PRId64 "\n", st->dead);
    if (st->undelivered >= 0) {
      printf("pending: %" PRId64 "\n", st->undelivered);
    } else {
      printf("pending: unknown\n");
    }
    printf("running: %" PRId64 "\n", st->running);
    for (i = 0; i < st->nconsumers; i++) {
      const al_fleet_consumer_t *k = &st->consumers[i];

      printf("  %s: %" PRId64, k->name, k->pending);
      if (k->lease_min_ms >= 0) {
        printf(", shortest lease left %.1f s", (double)k->lease_min_ms / 1e3);
      }
      if (k->no_lease > 0) {
        printf(", %" PRId64 " without a live lease", k->no_lease);
      }
      putchar('\n');
    }
    if (st->rate_10m >= 0) {
      printf("results/min: %" PRId64 " last minute, %.1f last 10 minutes\n",
             st->rate_1m, (double)st->rate_10m / 10.0);
    } else {
      printf("results/min: %" PRId64
             "+ last minute, over %.0f last 10 "
             "minutes\n",
             st->rate_1m, 100000.0 / 10.0);
    }
  }
  finish(c, EXIT_OK);
}

/* ---- the connection ------------------------------------------------------ */

static void on_state(al_fleet_redis_t *r, bool up, int status) {
  fc_t *c = al_fleet_redis_data(r);
  int rc = 0;

  (void)status;
  if (!up || c->finished) {
    return; /* redis.c reconnects; results --follow waits for it */
  }
  if (c->started) {
    if (c->cmd == CMD_RESULTS) {
      results_read(c); /* after the last id printed: none twice */
    }
    return;
  }
  c->started = true;
  uv_timer_stop(&c->connect_timer);
  switch (c->cmd) {
    case CMD_SUBMIT:
      submit_pump(c);
      break;
    case CMD_RESULTS:
      results_read(c);
      break;
    case CMD_STATUS:
      rc = al_fleet_admin_status(c->redis, c->url.prefix, c->group, on_status,
                                 c);
      if (rc != 0) {
        al__batch_say("%s: %s", c->url_text, al_strerror(rc));
        finish(c, EXIT_FAIL);
      }
      break;
  }
}

static int parse_seconds(const char *s, uint64_t *ms) {
  char *end;
  double v;

  errno = 0;
  v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > 86400) {
    return AL_EINVAL;
  }
  *ms = (uint64_t)ceil(v * 1000.0);
  return 0;
}

int al__cli_batch_fleet(int argc, char **argv) {
  enum { O_QUEUE = 256, O_TIMEOUT, O_FOLLOW, O_GROUP, O_FORMAT };
  static const struct option longopts[] = {
      {"queue", required_argument, NULL, O_QUEUE},
      {"connect-timeout", required_argument, NULL, O_TIMEOUT},
      {"follow", no_argument, NULL, O_FOLLOW},
      {"group", required_argument, NULL, O_GROUP},
      {"output-format", required_argument, NULL, O_FORMAT},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  fc_t *c;
  const char *format = "text", *cmd = argv[0], *jobs_path = NULL;
  uint64_t timeout_ms = 5000;
  al_fleet_redis_options_t ro;
  char why[256];
  int ch, rc, code;
  size_t i;

  c = al_calloc(1, sizeof(*c));
  if (c == NULL) {
    return EXIT_FAIL;
  }
  c->cmd = strcmp(cmd, "submit") == 0    ? CMD_SUBMIT
           : strcmp(cmd, "results") == 0 ? CMD_RESULTS
                                         : CMD_STATUS;
  c->group = "agentloop";
  snprintf(c->last_id, sizeof(c->last_id), "0-0");
  code = EXIT_USAGE;
  opterr = 0;
  optind = 1;
  while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (ch) {
      case O_QUEUE:
        c->url_text = optarg;
        break;
      case O_TIMEOUT:
        if (parse_seconds(optarg, &timeout_ms) != 0) {
          al__batch_say("--connect-timeout: seconds (0 to 86400), not '%s'", optarg);
          goto out;
        }
        break;
      case O_FOLLOW:
        if (c->cmd != CMD_RESULTS) {
          al__batch_say("%s: --follow is for results", cmd);
          goto out;
        }
        c->follow = true;
        break;
      case O_GROUP:
        if (c->cmd != CMD_STATUS) {
          al__batch_say("%s: --group is for status", cmd);
          goto out;
        }
        c->group = optarg;
        break;
      case O_FORMAT:
        format = optarg;
        break;
      case 'h':
        usage(stdout);
        code = EXIT_OK;
        goto out;
      case ':':
        al__batch_say("%s needs a value (try agentloop batch --help)",
                 argv[optind - 1]);
        goto out;
      default:
        al__batch_say("unknown option '%s' (try agentloop batch %s --help)",
                 argv[optind - 1], cmd);
        goto out;
    }
  }
  if (c->cmd == CMD_SUBMIT) {
    if (optind + 1 != argc) {
      al__batch_say(optind >= argc ? "submit: JOBS.jsonl is required"
                              : "submit: one jobs file, not '%s' too",
               optind < argc ? argv[optind + 1] : "");
      goto out;
    }
    jobs_path = argv[optind];
  } else if (optind != argc) {
    al__batch_say("%s: unexpected '%s'", cmd, argv[optind]);
    goto out;
  }
  if (c->url_text == NULL) {
    al__batch_say("%s: --queue URL is required", cmd);
    goto out;
  }
  if (strcmp(format, "text") == 0) {
    c->machine = false;
  } else if (strcmp(format, c->cmd == CMD_STATUS ? "json" : "ndjson") == 0) {
    c->machine = true;
  } else {
    al__batch_say("--output-format: text or %s, not '%s'",
             c->cmd == CMD_STATUS ? "json" : "ndjson", format);
    goto out;
  }
  if (al_fleet_url_parse(c->url_text, &c->url, why, sizeof(why)) != 0) {
    al__batch_say("--queue %s: %s", c->url_text, why);
    goto out;
  }
  if (jobs_path != NULL) {
    code = submit_prepare(c, jobs_path);
    if (code != EXIT_OK) {
      goto out;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  uv_loop_init(&c->loop);
  al_fleet_redis_options_init(&ro);
  if (c->url.unix_path[0] != '\0') {
    ro.unix_path = c->url.unix_path;
  } else {
    ro.host = c->url.host;
    ro.port = c->url.port;
  }
  /* A CLI waits for a restarted Redis at most a second between tries. */
  ro.backoff_min_ms = 50;
  ro.backoff_max_ms = 1000;
  ro.on_state = on_state;
  ro.data = c;
  rc = al_fleet_redis_new(&c->loop, &ro, &c->redis);
  if (rc != 0) {
    al__batch_say("--queue %s: %s", c->url_text, al_strerror(rc));
    code = EXIT_FAIL;
    (void)uv_loop_close(&c->loop);
    goto out;
  }
  c->q.redis = c->redis;
  c->q.prefix = c->url.prefix;
  c->q.group = c->group;
  c->q.consumer = "submit";
  uv_timer_init(&c->loop, &c->connect_timer);
  uv_signal_init(&c->loop, &c->sigint);
  uv_signal_init(&c->loop, &c->sigterm);
  c->connect_timer.data = c->sigint.data = c->sigterm.data = c;
  uv_timer_start(&c->connect_timer, on_connect_timeout, timeout_ms, 0);
  uv_signal_start(&c->sigint, on_signal, SIGINT);
  uv_signal_start(&c->sigterm, on_signal, SIGTERM);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  code = c->code;
  if (uv_loop_close(&c->loop) != 0) {
    uv_run(&c->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&c->loop);
  }
out:
  for (i = 0; c->bodies != NULL && i < c->njobs; i++) {
    al_free(c->bodies[i]); /* json_dumps', through our allocator */
  }
  al_free(c->bodies);
  if (c->jobs != NULL) {
    al__batch_jobs_free(c->jobs, c->njobs);
  }
  al_free(c);
  return code;
}
