/* `agentloop batch run JOBS.jsonl --out DIR` (docs/batch.md): every job of
 * the file in this one process, on one reactor, at most --concurrency at a
 * time, each its own agent, session and workspace, all sharing one HTTP
 * client (its connections, and later its pacing).
 *
 * Before the loop runs (blocking I/O is fine there): the jobs file is
 * read, DIR is locked (one batch per DIR), DIR/results.jsonl is read back
 * into the set of finished jobs (a torn last line is cut off), the user's
 * agent definitions are read once.
 *
 * A job's life on the loop: its configuration, options, prompts and
 * session (loaded when DIR/sessions/ID.jsonl exists: an interrupted run,
 * resumed) prepared in libuv's pool -> workspace (batch_ws.c) -> agent
 * run -> the
 * terminal event -> the agent closes -> the transcript flushes and closes
 * -> its result line is appended to results.jsonl and fdatasync'ed (one
 * write at a time) -> the workspace is removed unless kept -> the next
 * job starts. The result is written only once the transcript is durable,
 * and a job counts as finished only by its result line: a crash anywhere
 * before leaves no line, and the rerun resumes the session (a session
 * whose last run had already answered gives its answer without a model
 * request). SIGINT/SIGTERM cancel the running jobs without writing their
 * results, so a rerun resumes them too. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "client/batch.h"
#include "client/batch_fleet.h"
#include "client/cli.h"
#include "client/run_int.h"
#include "client/tui.h"
#include "common/common.h"
#include "config/agent_opts.h"
#include "config/agentdefs.h"
#include "config/config.h"
#include "loop/history.h"
#include "session/session.h"

#define JOBS_FILE_MAX ((size_t)1 << 30)
#define RESULTS_FILE_MAX ((size_t)1 << 30)
#define CONCURRENCY_MAX 4096
#define PROGRESS_MS 500
/* What a resumed session is told when its transcript holds the prompt
 * already. */
#define RESUME_TEXT                                                          \
  "(agentloop batch: the previous run of this job was interrupted; "       \
  "continue the task from where it stopped.)"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SIGINT = 130,
       EXIT_SIGTERM = 143 };

typedef enum {
  J_PREPARING,
  J_WORKSPACE,
  J_RUNNING,
  J_CLOSING,  /* agent and transcript closing */
  J_WRITING,  /* result line being written */
  J_CLEANUP,
  J_DONE
} job_state_t;

struct batch_s;

/* A started job (allocated when it starts, freed when it is done: memory
 * follows --concurrency, not the number of jobs). */
typedef struct bjob_s {
  struct batch_s *b;
  struct bjob_s *prev, *next; /* b->running */
  al_batch_job_t *spec;
  job_state_t state;
  al_config_t cfg;
  al_agent_opts_store_t store;
  al_agent_options_t o;
  al_buf_t sysprompt;
  al_buf_t preamble; /* what a fresh sub-agent's prompt ends with */
  al__run_session_t sess;
  al_tx_header_t hdr;
  char ws_real[PATH_MAX];
  al_batch_ws_t ws;
  al_agent_t *agent;
  al_sub_t *sub;
  bool recovered; /* answered before the crash: result from the transcript */
  bool max_turns;
  bool no_result; /* cancelled by a signal: resumed by the next run */
  const char *outcome;
  char error_kind[48];
  char *text;
  al_agent_stats_t stats;
  uint64_t t0_ms;
  char *line; /* the result line being written */
  struct bjob_s *next_write;
  /* limits.timeout_s, else the configuration's timeouts.run: the job is
   * cancelled and ends with outcome "timeout". */
  uv_timer_t timer;
  bool timer_open;
  bool timer_closing; /* its close callback frees j when free_pending */
  bool free_pending;
  bool timed_out;
  uint64_t timeout_ms;
  /* Prepared in the pool just before the job starts (configuration,
   * prompts, session: blocking reads), so memory and start-up grow with
   * --concurrency, not with the number of jobs. */
  uv_work_t prep;
  bool prepared;
  bool opts_init; /* store and cfg to free */
  bool opts_freed;
  bool ws_made;   /* a copy or worktree to remove */
  char why[PATH_MAX + 1024];
} bjob_t;

typedef struct batch_s {
  uv_loop_t loop;
  al_client_t *client;
  uv_signal_t sigint, sigterm;
  uv_timer_t progress;
  bool handles_open;
  bool tty;
  bool ndjson;
  bool keep_ws;
  int cause; /* EXIT_SIGINT / EXIT_SIGTERM once cancelled */
  const char *out_dir;
  char sessions_dir[PATH_MAX];
  al_batch_job_t *specs;
  size_t nspecs;
  bool *skip;       /* by spec: in results.jsonl already */
  bjob_t *running;  /* started, not yet done */
  size_t next; /* the next job to look at for a start */
  size_t concurrency;
  size_t active; /* started, not yet J_DONE */
  size_t skipped, done, failed, started_now, finished_now;
  size_t unsaved; /* ended without a line: their transcript not saved */
  uint64_t tokens;
  double cost;
  bool cost_unknown;
  uint64_t t0_ms;
  al_models_t *models;
  struct al_agentdefs_s *agents; /* the user's agent definitions */
  int results_fd;
  bjob_t *wq_head, *wq_tail; /* results waiting to be written */
  bjob_t *group;             /* the ones being written */
  bool writing;
  uv_fs_t wreq;
  char *wbuf;
  size_t wlen;
  int write_err;
} batch_t;

static void fail_usage(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void fail_usage(const char *fmt, ...) {
  va_list ap;

  fputs("agentloop batch: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static void usage(FILE *f) {
  fputs(
      "usage: agentloop batch run JOBS.jsonl --out DIR [options]\n"
      "\n"
      "Runs every job of JOBS.jsonl (one JSON object a line: id, prompt,\n"
      "workspace, and optionally model, provider, base_url, limits, tools)\n"
      "in this one process, each its own headless agent and session. One\n"
      "result line per job goes to DIR/results.jsonl, written once; the\n"
      "transcripts to DIR/sessions/. Running the same command again skips\n"
      "the finished jobs and resumes the interrupted ones (docs/batch.md).\n"
      "\n"
      "  -j, --concurrency N       jobs running at once (default 4)\n"
      "  -o, --out DIR             results, sessions and workspaces\n"
      "      --keep-workspaces     keep the copies and git worktrees made\n"
      "                            under DIR/work/\n"
      "      --output-format F     text (default: a progress line on a\n"
      "                            terminal, a summary at the end) or\n"
      "                            ndjson (a line per job start and result)\n"
      "  -h, --help                this text\n"
      "\n"
      "exit: 0 every job done, 1 some failed, 2 usage or a bad jobs file,\n"
      "130 / 143 interrupted by SIGINT / SIGTERM (rerun to go on)\n",
      f);
}

static const char *env_get(const char *name) {
  const char *v = name != NULL ? al_sandbox_getenv(name) : NULL;

  return v != NULL && *v != '\0' ? v : NULL;
}

static uint64_t now_ms(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Reads a whole file (start-up only). */
static int slurp(const char *path, size_t max, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  al_buf_t b;
  char chunk[65536];
  size_t n;
  int rc = 0;

  *out = NULL;
  *len = 0;
  if (f == NULL) {
    return -errno;
  }
  al_buf_init(&b, max);
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && rc == 0) {
    rc = al_buf_append(&b, chunk, n);
  }
  if (ferror(f) && rc == 0) {
    rc = UV_EIO;
  }
  fclose(f);
  if (rc != 0) {
    al_buf_free(&b);
    return rc;
  }
  if (b.data == NULL) {
    *out = al_strdup("");
  } else {
    *out = b.data; /* owned by the caller now */
  }
  *len = b.len;
  return *out != NULL ? 0 : AL_ENOMEM;
}

/* ---- results.jsonl ---------------------------------------------------------- */

/* The ids with a result line; a torn last line (a crash mid-write) is cut
 * off so the next append starts on a line of its own. */
static int read_results(const char *path, json_t *done, char *err,
                        size_t errlen) {
  char *text = NULL;
  size_t len = 0, good = 0;
  const char *p;
  int rc = slurp(path, RESULTS_FILE_MAX, &text, &len);

  if (rc == UV_ENOENT) {
    return 0;
  }
  if (rc != 0) {
    snprintf(err, errlen, "%s: %s", path, al_strerror(rc));
    return rc;
  }
  for (p = text; p < text + len;) {
    const char *nl = memchr(p, '\n', (size_t)(text + len - p));
    json_t *o;
    const char *id;

    if (nl == NULL) {
      break; /* torn */
    }
    o = json_loadb(p, (size_t)(nl - p), 0, NULL);
    id = json_string_value(json_object_get(o, "id"));
    if (id != NULL) {
      json_object_set_new(done, id, json_true());
    }
    json_decref(o);
    p = nl + 1;
    good = (size_t)(p - text);
  }
  al_free(text);
  if (good < len && truncate(path, (off_t)good) != 0) {
    snprintf(err, errlen, "%s: cannot cut its torn last line: %s", path,
             strerror(errno));
    return -errno;
  }
  return 0;
}

static json_t *result_json(const bjob_t *j) {
  json_t *o = json_object();
  json_t *usage = json_pack(
      "{s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)j->stats.input_tokens,
      "output_tokens", (json_int_t)j->stats.output_tokens,
      "cache_read_input_tokens",
      (json_int_t)j->stats.cache_read_input_tokens,
      "cache_creation_input_tokens",
      (json_int_t)j->stats.cache_creation_input_tokens);

  json_object_set_new(o, "id", json_string(j->spec->id));
  json_object_set_new(o, "outcome", json_string(j->outcome));
  json_object_set_new(o, "text",
                      j->text != NULL ? json_string(j->text) : json_null());
  json_object_set_new(o, "turns", json_integer(j->stats.turns));
  json_object_set_new(o, "usage", usage != NULL ? usage : json_null());
  json_object_set_new(o, "cost_usd", j->stats.cost_usd >= 0
                                         ? json_real(j->stats.cost_usd)
                                         : json_null());
  json_object_set_new(o, "duration_ms",
                      json_integer((json_int_t)(now_ms() - j->t0_ms)));
  json_object_set_new(o, "error_kind", j->error_kind[0] != '\0'
                                           ? json_string(j->error_kind)
                                           : json_null());
  json_object_set_new(o, "session", json_string(j->sess.path));
  if (j->recovered) {
    json_object_set_new(o, "recovered", json_true());
  }
  return o;
}

static void write_next(batch_t *b);
static void job_written(bjob_t *j);

/* The group in flight is out (or failed: b->write_err): each job goes on. */
static void group_done(batch_t *b) {
  bjob_t *j = b->group;

  b->group = NULL;
  b->writing = false;
  al_free(b->wbuf);
  b->wbuf = NULL;
  while (j != NULL) {
    bjob_t *next = j->next_write;

    job_written(j);
    j = next;
  }
  write_next(b);
}

static void on_result_synced(uv_fs_t *req) {
  batch_t *b = req->data;

  if (req->result < 0 && b->write_err == 0) {
    b->write_err = (int)req->result;
  }
  uv_fs_req_cleanup(req);
  group_done(b);
}

static void on_result_written(uv_fs_t *req) {
  batch_t *b = req->data;
  ssize_t rc = req->result;

  uv_fs_req_cleanup(req);
  if (rc < 0 || (size_t)rc != b->wlen) {
    /* A short append is a torn line: the next start cuts it off. */
    if (b->write_err == 0) {
      b->write_err = rc < 0 ? (int)rc : UV_EIO;
    }
    group_done(b);
    return;
  }
  if (uv_fs_fdatasync(&b->loop, &b->wreq, b->results_fd,
                      on_result_synced) != 0) {
    b->write_err = UV_EIO;
    group_done(b);
  }
}

/* Every line queued while the last group was written goes out in one
 * append and one fdatasync (a group commit): thousands of short jobs do
 * not wait for a sync each. */
static void write_next(batch_t *b) {
  bjob_t *j;
  al_buf_t w;
  uv_buf_t buf;

  if (b->writing || b->wq_head == NULL) {
    return;
  }
  b->group = b->wq_head;
  b->wq_head = b->wq_tail = NULL;
  b->writing = true;
  al_buf_init(&w, SIZE_MAX);
  for (j = b->group; j != NULL && b->write_err == 0; j = j->next_write) {
    if (al_buf_append_str(&w, j->line) != 0) {
      b->write_err = AL_ENOMEM;
    }
  }
  if (b->write_err != 0) {
    /* results.jsonl failed once: nothing more is claimed written. */
    al_buf_free(&w);
    group_done(b);
    return;
  }
  b->wbuf = w.data; /* freed by group_done */
  b->wlen = w.len;
  b->wreq.data = b;
  buf = uv_buf_init(b->wbuf, (unsigned)b->wlen);
  if (uv_fs_write(&b->loop, &b->wreq, b->results_fd, &buf, 1, -1,
                  on_result_written) != 0) {
    b->write_err = UV_EIO;
    group_done(b);
  }
}

/* ---- progress ----------------------------------------------------------- */

static void print_progress(batch_t *b, bool final) {
  size_t total = b->nspecs - b->skipped;
  size_t fin = b->done + b->failed;
  uint64_t tokens = b->tokens;
  double cost = b->cost;
  bool unknown = b->cost_unknown;
  char eta[32] = "";
  bjob_t *j;

  if (!b->tty || b->ndjson) {
    return;
  }
  /* The running jobs' counts so far too: the line moves while they do. */
  for (j = b->running; j != NULL; j = j->next) {
    al_agent_stats_t st;

    if (j->state == J_RUNNING) {
      al_agent_stats(j->agent, &st);
      tokens += st.input_tokens + st.output_tokens;
      if (st.cost_usd >= 0) {
        cost += st.cost_usd;
      } else {
        unknown = true;
      }
    }
  }
  if (b->finished_now > 0 && fin < total) {
    uint64_t el = now_ms() - b->t0_ms;
    uint64_t left = el / b->finished_now * (total - fin);

    snprintf(eta, sizeof(eta), ", ETA %" PRIu64 "s", left / 1000u);
  }
  fprintf(stderr,
          "\r\033[Kbatch: %zu/%zu done, %zu running, %zu failed, %" PRIu64
          " tokens, $%.4f%s%s%s",
          fin, total, b->active, b->failed, tokens, cost, unknown ? "+" : "",
          eta, final ? "\n" : "");
  fflush(stderr);
}

static void on_progress(uv_timer_t *t) {
  print_progress(t->data, false);
}

static void ndjson_line(json_t *o) {
  char *s = json_dumps(o, JSON_COMPACT);

  if (s != NULL) {
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    free(s);
  }
  json_decref(o);
}

/* ---- jobs --------------------------------------------------------------- */

static void start_jobs(batch_t *b);
static void maybe_end(batch_t *b);

/* The agent copied what it keeps: its options' store and configuration
 * go once it exists (or the job ends without one). */
static void free_opts(bjob_t *j) {
  if (j->opts_init && !j->opts_freed) {
    j->opts_freed = true;
    al_agent_opts_store_free(&j->store);
    al_config_free(&j->cfg);
  }
}

static void job_done(bjob_t *j) {
  batch_t *b = j->b;

  j->state = J_DONE;
  b->active--;
  if (j->prev != NULL) {
    j->prev->next = j->next;
  } else {
    b->running = j->next;
  }
  if (j->next != NULL) {
    j->next->prev = j->prev;
  }
  free_opts(j);
  al_free(j->text);
  al__run_session_free(&j->sess);
  al_buf_free(&j->sysprompt);
  al_buf_free(&j->preamble);
  if (j->timer_closing) {
    j->free_pending = true;
  } else {
    al_free(j);
  }
  start_jobs(b);
  maybe_end(b);
}

static void on_ws_removed(al_batch_ws_t *w, int status, const char *why) {
  bjob_t *j = w->data;

  if (status != 0) {
    fprintf(stderr, "agentloop batch: job %s: %s\n", j->spec->id, why);
  }
  job_done(j);
}

/* The result line is out (or could not be written: said once at the
 * end). */
static void job_written(bjob_t *j) {
  batch_t *b = j->b;

  al_free(j->line);
  j->line = NULL;
  if (strcmp(j->outcome, "done") == 0) {
    b->done++;
  } else {
    b->failed++;
  }
  b->finished_now++;
  if (b->ndjson) {
    json_t *o = result_json(j);

    json_object_set_new(o, "type", json_string("job_result"));
    ndjson_line(o);
  }
  al_free(j->text);
  j->text = NULL;
  if (!b->keep_ws && j->ws_made && b->write_err == 0) {
    j->state = J_CLEANUP;
    al__batch_ws_remove(&j->ws, on_ws_removed);
    return;
  }
  job_done(j);
}

static void queue_result(bjob_t *j) {
  batch_t *b = j->b;
  json_t *o;
  char *s;

  if (j->no_result) {
    /* Cancelled by a signal, or its transcript not saved: no line, the
     * next run resumes it. */
    if (b->cause == 0) {
      b->unsaved++;
    }
    job_done(j);
    return;
  }
  o = result_json(j);
  s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (s != NULL) {
    j->line = al_malloc(strlen(s) + 2);
    if (j->line != NULL) {
      sprintf(j->line, "%s\n", s);
    }
    free(s);
  }
  b->tokens += j->stats.input_tokens + j->stats.output_tokens;
  if (j->stats.cost_usd >= 0) {
    b->cost += j->stats.cost_usd;
  } else {
    b->cost_unknown = true;
  }
  if (j->line == NULL) {
    b->write_err = AL_ENOMEM;
  }
  j->state = J_WRITING;
  j->next_write = NULL;
  if (b->wq_tail != NULL) {
    b->wq_tail->next_write = j;
  } else {
    b->wq_head = j;
  }
  b->wq_tail = j;
  write_next(b);
}

static void on_sess_closed(al__run_session_t *rs, void *data) {
  bjob_t *j = data;

  (void)rs;
  if (j->sess.loss.err != 0 && !j->no_result) {
    char why[1024];

    /* Not durable: no result either; the rerun resumes what was saved. */
    al__run_session_loss_text(&j->sess, why, sizeof(why));
    fprintf(stderr, "agentloop batch: job %s: %s\n", j->spec->id, why);
    j->no_result = true;
  }
  queue_result(j);
}

static void on_agent_closed(al_agent_t *agent) {
  bjob_t *j = al_agent_get_data(agent);

  j->agent = NULL;
  free_opts(j);
  al__run_session_agent_closed(&j->sess);
  if (j->sess.tx != NULL) {
    j->sess.on_closed = on_sess_closed;
    j->sess.closed_data = j;
    al__run_session_close(&j->sess);
    return;
  }
  queue_result(j);
}

static void on_timer_closed(uv_handle_t *h) {
  bjob_t *j = h->data;

  j->timer_closing = false;
  if (j->free_pending) {
    al_free(j);
  }
}

static void end_job(bjob_t *j) {
  j->state = J_CLOSING;
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

static void set_error(bjob_t *j, const char *outcome, const char *kind,
                      al_slice_t msg) {
  j->outcome = outcome;
  snprintf(j->error_kind, sizeof(j->error_kind), "%s", kind);
  al_free(j->text);
  j->text = msg.ptr != NULL ? al_strndup(msg.ptr, msg.len) : NULL;
}

static void on_event(const al_event_t *ev, void *data) {
  bjob_t *j = data;

  if (j->state != J_RUNNING) {
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
    set_error(j, "error", al_err_name(ev->u.error.code),
              ev->u.error.message);
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
    if (j->b->cause != 0) {
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
  bjob_t *j = t->data;

  if (j->state == J_RUNNING && !j->timed_out) {
    j->timed_out = true;
    (void)al_agent_cancel(j->agent); /* posts interrupted: end_job */
  }
}

static void fail_job(bjob_t *j, const char *kind, const char *why) {
  j->outcome = "error";
  snprintf(j->error_kind, sizeof(j->error_kind), "%s", kind);
  al_free(j->text);
  j->text = al_strdup(why);
  fprintf(stderr, "agentloop batch: job %s: %s\n", j->spec->id, why);
  queue_result(j);
}

static void on_ws_ready(al_batch_ws_t *w, int status, const char *why) {
  bjob_t *j = w->data;
  batch_t *b = j->b;
  char err[PATH_MAX + 256];
  const char *text;
  int rc;

  if (b->cause != 0) {
    j->no_result = true;
    queue_result(j);
    return;
  }
  if (status != 0) {
    fail_job(j, "workspace", why);
    return;
  }
  j->ws_made = j->spec->mode != AL_BATCH_WS_INPLACE;
  if (j->recovered) {
    j->outcome = "done";
    queue_result(j);
    return;
  }
  j->o.workspace = w->path;
  rc = al_agent_new(&b->loop, &j->o, &j->agent);
  if (rc != 0) {
    snprintf(err, sizeof(err), "cannot create the agent: %s",
             al_strerror(rc));
    fail_job(j, al_err_name(rc), err);
    return;
  }
  j->hdr.cwd = w->path;
  rc = al__run_session_attach(&j->sess, &b->loop, j->agent, &j->hdr, err,
                              sizeof(err));
  if (rc == 0) {
    rc = al_agent_subscribe(j->agent, on_event, j, &j->sub);
  }
  text = j->sess.resumed && al__history_to_json(&j->sess.loaded.history) !=
                                NULL &&
                 json_array_size(al__history_to_json(
                     &j->sess.loaded.history)) > 0
             ? RESUME_TEXT
             : j->spec->prompt;
  j->state = J_RUNNING;
  if (rc == 0) {
    rc = al_agent_run(j->agent, text);
    if (rc == 0 && j->timeout_ms > 0) {
      uv_timer_init(&b->loop, &j->timer);
      j->timer.data = j;
      j->timer_open = true;
      uv_timer_start(&j->timer, on_job_timeout, j->timeout_ms, 0);
    }
    if (rc != 0) {
      snprintf(err, sizeof(err), "cannot start the run: %s",
               al_strerror(rc));
    }
  }
  if (rc != 0) {
    j->outcome = "error";
    snprintf(j->error_kind, sizeof(j->error_kind), "%s", al_err_name(rc));
    j->text = al_strdup(err);
    end_job(j);
  }
}

static bool prepare_job(batch_t *b, bjob_t *j);

static void prep_work(uv_work_t *req) {
  bjob_t *j = req->data;

  j->prepared = prepare_job(j->b, j);
}

static void prep_done(uv_work_t *req, int status) {
  bjob_t *j = req->data;
  batch_t *b = j->b;

  (void)status;
  if (b->cause != 0) {
    j->no_result = true;
    queue_result(j);
    return;
  }
  if (b->ndjson) {
    ndjson_line(json_pack("{s:s,s:s,s:b}", "type", "job_started", "id",
                          j->spec->id, "resumed", j->sess.resumed));
  }
  if (!j->prepared) {
    fail_job(j, "config", j->why);
    return;
  }
  j->state = J_WORKSPACE;
  al__batch_ws_prepare(&j->ws, &b->loop, j->spec, b->out_dir,
                       j->sess.resumed, on_ws_ready, j);
}

static void start_job(batch_t *b, al_batch_job_t *spec) {
  bjob_t *j = al_calloc(1, sizeof(*j));

  if (j == NULL) {
    /* Not started: no line, the next run takes it. */
    b->unsaved++;
    return;
  }
  j->b = b;
  j->spec = spec;
  j->next = b->running;
  if (b->running != NULL) {
    b->running->prev = j;
  }
  b->running = j;
  j->state = J_PREPARING;
  j->t0_ms = now_ms();
  j->stats.cost_usd = -1; /* null until an agent's stats say */
  b->active++;
  b->started_now++;
  j->prep.data = j;
  uv_queue_work(&b->loop, &j->prep, prep_work, prep_done);
}

static void start_jobs(batch_t *b) {
  while (b->cause == 0 && b->active < b->concurrency && b->next < b->nspecs) {
    size_t i = b->next++;

    if (!b->skip[i]) {
      start_job(b, &b->specs[i]);
    }
  }
}

static void on_client_closed(al_client_t *c) {
  (void)c;
}

static void maybe_end(batch_t *b) {
  if (b->active > 0 || (b->cause == 0 && b->next < b->nspecs) ||
      !b->handles_open) {
    return;
  }
  b->handles_open = false;
  uv_close((uv_handle_t *)&b->sigint, NULL);
  uv_close((uv_handle_t *)&b->sigterm, NULL);
  uv_close((uv_handle_t *)&b->progress, NULL);
  al_client_close(b->client, on_client_closed);
}

static void on_signal(uv_signal_t *h, int signum) {
  batch_t *b = h->data;
  bjob_t *j, *next;

  if (b->cause != 0) {
    return;
  }
  b->cause = signum == SIGINT ? EXIT_SIGINT : EXIT_SIGTERM;
  for (j = b->running; j != NULL; j = next) {
    /* A cancel ends the job's run at once (interrupted): the job may
     * leave the list meanwhile. */
    next = j->next;
    if (j->state == J_RUNNING) {
      j->no_result = true;
      (void)al_agent_cancel(j->agent);
    }
  }
  maybe_end(b);
}

/* ---- set-up (before the loop) ------------------------------------------- */

/* A job's configuration, options and session, in the pool (blocking
 * reads; nothing here touches the loop). false with the reason in
 * j->why: the job fails with error_kind "config". */
/* A job's main agent: a definition of the user's, else a built-in. */
static const al_subagent_def_t *job_agent(const batch_t *b,
                                          const char *name) {
  const al_subagent_def_t *d = al_agentdefs_find(b->agents, name);
  size_t i, n;

  if (d == NULL) {
    const al_subagent_def_t *bi = al_subagent_builtins(&n);

    for (i = 0; i < n && d == NULL; i++) {
      d = strcmp(bi[i].name, name) == 0 ? &bi[i] : NULL;
    }
  }
  return d;
}

static bool prepare_job(batch_t *b, bjob_t *j) {
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
    snprintf(j->why, sizeof(j->why), "the configuration does not load "
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
                                              keys[i], why,
                                              sizeof(why)) != 0) {
      snprintf(j->why, sizeof(j->why), "%s", why);
      return false;
    }
  }
  {
    const char *var = NULL;

    /* As run says it (exit 2 there): before anything is sent. */
    if (al_config_api_key(&j->cfg, env_get, &var) == NULL &&
        al__cli_public_endpoint(j->cfg.base_url)) {
      snprintf(j->why, sizeof(j->why), "no API key for %s: set %s",
               j->cfg.base_url != NULL ? j->cfg.base_url
                                       : "the public endpoint",
               var != NULL ? var : "the provider's key variable");
      return false;
    }
  }
  rc = al__run_session_prepare_at(&j->sess, b->sessions_dir, s->id, why,
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
    snprintf(j->ws_real, sizeof(j->ws_real), "%.3000s/work/%s", b->out_dir,
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
  in.models = b->models;
  in.mcp_project = true;
  in.flags.max_turns = s->max_turns;
  in.flags.max_tokens = s->max_tokens;
  in.flags.limits = &s->limits;
  in.flags.allow_tools = tools;
  in.flags.sandbox = -1;
  in.flags.retries = -1;
  in.subagents = b->agents->defs;
  in.n_subagents = b->agents->n;
  in.task_preamble = j->preamble.data;
  /* Checked before the batch started (every job's agent exists). */
  in.main_agent = s->agent != NULL ? job_agent(b, s->agent) : NULL;
  in.model_flag = s->model != NULL;
  rc = al_config_agent_options(&j->cfg, &in, &j->o, &j->store, why,
                               sizeof(why));
  if (rc != 0) {
    snprintf(j->why, sizeof(j->why), "%s", why);
    return false;
  }
  j->o.client = b->client;
  j->o.data = j;
  j->timeout_ms = s->timeout_ms != 0 ? s->timeout_ms
                  : j->cfg.timeouts.run_ms > 0
                      ? (uint64_t)j->cfg.timeouts.run_ms
                      : 0;
  al__run_session_options(&j->sess, &j->o);
  j->hdr.model = (char *)j->o.model;
  j->hdr.provider = (char *)j->o.provider;
  j->hdr.base_url = (char *)j->o.base_url;
  j->hdr.system = (char *)j->o.system;
  j->hdr.created_ms = (uint64_t)time(NULL) * 1000u;
  return true;
}

/* One batch per DIR. A POSIX record lock, not flock: it belongs to this
 * process alone, so a helper forked from it (a warm sandbox) that outlives
 * a SIGKILL does not keep the next run out. */
static int lock_dir(const char *dir) {
  char path[PATH_MAX];
  struct flock fl;
  int fd;

  snprintf(path, sizeof(path), "%.4000s/.lock", dir);
  fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail_usage("%s: %s", path, strerror(errno));
    return -1;
  }
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (fcntl(fd, F_SETLK, &fl) != 0) {
    fail_usage("%s is in use by another agentloop batch (one at a time)",
               dir);
    close(fd);
    return -1;
  }
  return fd; /* held until exit */
}

static int batch_run(int argc, char **argv) {
  enum { O_KEEP = 256, O_FORMAT };
  static const struct option longopts[] = {
      {"concurrency", required_argument, NULL, 'j'},
      {"out", required_argument, NULL, 'o'},
      {"keep-workspaces", no_argument, NULL, O_KEEP},
      {"output-format", required_argument, NULL, O_FORMAT},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  batch_t *b;
  const char *jobs_path = NULL, *out = NULL, *format = "text";
  unsigned long conc = 4;
  char *text = NULL, *end;
  size_t len = 0, i;
  char err[PATH_MAX + 1024], path[PATH_MAX];
  json_t *done;
  char *models_err = NULL;
  int c, rc, code = EXIT_OK, lock_fd;
  bool keep = false;

  /* As run: this process holds the API keys and runs tools (before any
   * thread: the pool starts with the first job). */
  (void)al_sandbox_harden_process();
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":j:o:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j':
      errno = 0;
      conc = strtoul(optarg, &end, 10);
      if (errno != 0 || *end != '\0' || conc == 0 ||
          conc > CONCURRENCY_MAX) {
        fail_usage("--concurrency: 1 to %d, not '%s'", CONCURRENCY_MAX,
                   optarg);
        return EXIT_USAGE;
      }
      break;
    case 'o':
      out = optarg;
      break;
    case O_KEEP:
      keep = true;
      break;
    case O_FORMAT:
      format = optarg;
      break;
    case 'h':
      usage(stdout);
      return EXIT_OK;
    case ':':
      fail_usage("%s needs a value (try agentloop batch --help)",
                 argv[optind - 1]);
      return EXIT_USAGE;
    default:
      fail_usage("unknown option '%s' (try agentloop batch --help)",
                 argv[optind - 1]);
      return EXIT_USAGE;
    }
  }
  if (optind + 1 != argc) {
    fail_usage(optind >= argc ? "run: JOBS.jsonl is required"
                              : "run: one jobs file, not '%s' too",
               optind < argc ? argv[optind + 1] : "");
    return EXIT_USAGE;
  }
  jobs_path = argv[optind];
  if (out == NULL) {
    fail_usage("run: --out DIR is required");
    return EXIT_USAGE;
  }
  if (strcmp(format, "text") != 0 && strcmp(format, "ndjson") != 0) {
    fail_usage("--output-format: text or ndjson, not '%s'", format);
    return EXIT_USAGE;
  }
  rc = slurp(jobs_path, JOBS_FILE_MAX, &text, &len);
  if (rc != 0) {
    fail_usage("%s: %s", jobs_path, al_strerror(rc));
    return EXIT_USAGE;
  }
  b = al_calloc(1, sizeof(*b));
  if (b == NULL) {
    al_free(text);
    return EXIT_FAIL;
  }
  rc = al__batch_jobs_parse(jobs_path, text, len, &b->specs, &b->nspecs, err,
                            sizeof(err));
  al_free(text);
  if (rc != 0) {
    fprintf(stderr, "agentloop batch: %s\n", err);
    al_free(b);
    return EXIT_USAGE;
  }
  b->results_fd = -1;
  if (al__tui_mkdirs(out) != 0 || realpath(out, path) == NULL) {
    fail_usage("--out %s: cannot create it", out);
    code = EXIT_USAGE;
    goto out_specs;
  }
  b->out_dir = al_strdup(path);
  snprintf(b->sessions_dir, sizeof(b->sessions_dir), "%.4000s/sessions",
           b->out_dir);
  snprintf(path, sizeof(path), "%.4000s/work", b->out_dir);
  if (al__tui_mkdirs(b->sessions_dir) != 0 || al__tui_mkdirs(path) != 0) {
    fail_usage("cannot create %s/sessions and work", b->out_dir);
    code = EXIT_USAGE;
    goto out_specs;
  }
  lock_fd = lock_dir(b->out_dir);
  if (lock_fd < 0) {
    code = EXIT_USAGE;
    goto out_specs;
  }
  snprintf(path, sizeof(path), "%.4000s/results.jsonl", b->out_dir);
  done = json_object();
  if (read_results(path, done, err, sizeof(err)) != 0) {
    fail_usage("%s", err);
    json_decref(done);
    code = EXIT_USAGE;
    goto out_specs;
  }
  b->results_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (b->results_fd < 0) {
    fail_usage("%s: %s", path, strerror(errno));
    json_decref(done);
    code = EXIT_USAGE;
    goto out_specs;
  }
  signal(SIGPIPE, SIG_IGN);
  json_object_seed(0);
  rc = al_models_load(&b->models, NULL, &models_err);
  if (rc != 0) {
    fail_usage("%s", models_err != NULL ? models_err : al_strerror(rc));
    al_free(models_err);
    json_decref(done);
    code = EXIT_USAGE;
    goto out_specs;
  }
  uv_loop_init(&b->loop);
  {
    al_client_options_t co;

    al_client_options_init(&co);
    rc = al_client_new(&b->loop, &co, &b->client);
  }
  if (rc != 0) {
    fail_usage("cannot create the HTTP client: %s", al_strerror(rc));
    json_decref(done);
    code = EXIT_FAIL;
    goto out_loop;
  }
  b->skip = al_calloc(b->nspecs, sizeof(*b->skip));
  b->concurrency = conc;
  b->keep_ws = keep;
  b->ndjson = strcmp(format, "ndjson") == 0;
  b->tty = isatty(STDERR_FILENO) != 0;
  for (i = 0; b->skip != NULL && i < b->nspecs; i++) {
    if (json_object_get(done, b->specs[i].id) != NULL) {
      b->skip[i] = true;
      b->skipped++;
    }
  }
  json_decref(done);
  {
    /* The user's agent definitions, for every job's task tool: read once
     * (the user's, and an approved project's of this directory). A
     * configuration that does not load stops the batch here. */
    al_config_t base;

    if (al__cli_config_load_for(&base, NULL, false, NULL,
                                "agentloop batch") != 0) {
      code = EXIT_USAGE;
    } else if (al__cli_agents_load(&base, NULL, false, false,
                                   "agentloop batch", &b->agents) != 0) {
      code = EXIT_FAIL;
    }
    al_config_free(&base);
  }
  for (i = 0; code == EXIT_OK && i < b->nspecs; i++) {
    if (b->specs[i].agent != NULL && job_agent(b, b->specs[i].agent) == NULL) {
      fprintf(stderr,
              "agentloop batch: %s:%zu: job %s: no agent definition named "
              "'%s' (agentloop agents lists them)\n",
              jobs_path, b->specs[i].line, b->specs[i].id, b->specs[i].agent);
      code = EXIT_USAGE;
    }
  }
  if (b->skip == NULL || code != EXIT_OK) {
    al_client_close(b->client, on_client_closed);
    uv_run(&b->loop, UV_RUN_DEFAULT);
    code = code != EXIT_OK ? code : EXIT_FAIL;
    goto out_loop;
  }
  uv_signal_init(&b->loop, &b->sigint);
  uv_signal_init(&b->loop, &b->sigterm);
  uv_timer_init(&b->loop, &b->progress);
  b->sigint.data = b->sigterm.data = b->progress.data = b;
  b->handles_open = true;
  uv_signal_start(&b->sigint, on_signal, SIGINT);
  uv_signal_start(&b->sigterm, on_signal, SIGTERM);
  if (b->tty && !b->ndjson) {
    uv_timer_start(&b->progress, on_progress, 0, PROGRESS_MS);
  }
  b->t0_ms = now_ms();
  start_jobs(b);
  maybe_end(b);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  print_progress(b, true);
  if (b->write_err != 0) {
    fprintf(stderr, "agentloop batch: %s/results.jsonl: %s: the jobs "
                    "without a line run again next time\n",
            b->out_dir, al_strerror(b->write_err));
  }
  if (b->unsaved > 0) {
    fprintf(stderr, "agentloop batch: %zu job%s ended with an incomplete "
                    "transcript and no result line: rerun to resume\n",
            b->unsaved, b->unsaved == 1 ? "" : "s");
  }
  if (b->ndjson) {
    ndjson_line(json_pack("{s:s,s:I,s:I,s:I,s:I,s:b}", "type", "batch_end",
                          "jobs", (json_int_t)b->nspecs, "done",
                          (json_int_t)b->done, "failed",
                          (json_int_t)b->failed, "skipped",
                          (json_int_t)b->skipped, "interrupted",
                          b->cause != 0));
  } else {
    fprintf(stderr,
            "agentloop batch: %zu jobs: %zu done, %zu failed, %zu skipped "
            "(finished before)%s\n",
            b->nspecs, b->done, b->failed, b->skipped,
            b->cause != 0 ? "; interrupted: rerun to go on" : "");
  }
  code = b->cause != 0                         ? b->cause
         : b->failed > 0 || b->write_err != 0 || b->unsaved > 0
             ? EXIT_FAIL
                                               : EXIT_OK;
out_loop:
  if (uv_loop_close(&b->loop) != 0) {
    uv_run(&b->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&b->loop);
  }
  al_models_free(b->models);
  al_agentdefs_free(b->agents);
out_specs:
  if (b->results_fd >= 0) {
    close(b->results_fd);
  }
  al_free(b->skip);
  al__batch_jobs_free(b->specs, b->nspecs);
  al_free((char *)b->out_dir);
  al_free(b);
  return code;
}

int al_cli_batch(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "--help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_OK;
  }
  if (strcmp(argv[1], "run") == 0) {
    return batch_run(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "submit") == 0 || strcmp(argv[1], "results") == 0 ||
      strcmp(argv[1], "status") == 0) {
    return al__cli_batch_fleet(argc - 1, argv + 1);
  }
  fail_usage("unknown command '%s' (run; try agentloop batch --help)",
             argv[1]);
  return EXIT_USAGE;
}
