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
 * A job's life is the job engine's (batch_engine.c, shared with the fleet
 * worker); this file is its file driver: jobs from the file, at most
 * --concurrency at a time; each result line, once the engine has made the
 * transcript durable, appended to results.jsonl and fdatasync'ed (one
 * write at a time); then the next job starts. A job counts as finished
 * only by its result line: a crash anywhere before leaves no line, and the
 * rerun resumes the session (a session whose last run had already
 * answered gives its answer without a model request). SIGINT/SIGTERM
 * cancel the running jobs without writing their results, so a rerun
 * resumes them too. */
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
#include "client/batch_engine.h"
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


#define RESULTS_FILE_MAX ((size_t)1 << 30)
#define CONCURRENCY_MAX 4096
#define PROGRESS_MS 500

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SIGINT = 130,
       EXIT_SIGTERM = 143 };

/* A result line queued for results.jsonl. */
typedef struct bline_s {
  al_bjob_t *j;
  char *line;
  struct bline_s *next_write;
} bline_t;

typedef struct batch_s {
  uv_loop_t loop;
  al_bengine_t eng; /* the jobs running */
  al_client_t *client;
  uv_signal_t sigint, sigterm;
  uv_timer_t progress;
  bool handles_open;
  bool tty;
  bool ndjson;
  int cause; /* EXIT_SIGINT / EXIT_SIGTERM once cancelled */
  const char *out_dir;
  al_batch_job_t *specs;
  size_t nspecs;
  bool *skip;  /* by spec: in results.jsonl already */
  size_t next; /* the next job to look at for a start */
  size_t concurrency;
  size_t skipped, done, failed, started_now, finished_now;
  size_t unsaved; /* ended without a line: their transcript not saved */
  uint64_t tokens;
  double cost;
  bool cost_unknown;
  uint64_t t0_ms;
  al_models_t *models;
  struct al_agentdefs_s *agents; /* the user's agent definitions */
  int results_fd;
  bline_t *wq_head, *wq_tail; /* results waiting to be written */
  bline_t *group;             /* the ones being written */
  bool writing;
  uv_fs_t wreq;
  char *wbuf;
  size_t wlen;
  int write_err;
} batch_t;

static void usage(FILE *f) {
  fputs(
      "usage: agentloop batch run JOBS.jsonl --out DIR [options]\n"
      "       agentloop batch submit | results | status --queue URL ...\n"
      "                 (fleet mode: agentloop batch submit --help)\n"
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


/* ---- results.jsonl ---------------------------------------------------------- */

/* The ids with a result line; a torn last line (a crash mid-write) is cut
 * off so the next append starts on a line of its own. */
static int read_results(const char *path, json_t *done, char *err,
                        size_t errlen) {
  char *text = NULL;
  size_t len = 0, good = 0;
  const char *p;
  int rc = al__batch_read_file(path, RESULTS_FILE_MAX, &text, &len);

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


static void write_next(batch_t *b);
static void job_written(batch_t *b, bline_t *l);

/* The group in flight is out (or failed: b->write_err): each job goes on. */
static void group_done(batch_t *b) {
  bline_t *l = b->group;

  b->group = NULL;
  b->writing = false;
  al_free(b->wbuf);
  b->wbuf = NULL;
  while (l != NULL) {
    bline_t *next = l->next_write;

    job_written(b, l);
    l = next;
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

/* Every line queued while the last group was written goes out in one
 * append and one fdatasync (a group commit): thousands of short jobs do
 * not wait for a sync each. */
static void write_next(batch_t *b) {
  bline_t *l;
  al_buf_t w;
  uv_buf_t buf;

  if (b->writing || b->wq_head == NULL) {
    return;
  }
  b->group = b->wq_head;
  b->wq_head = b->wq_tail = NULL;
  b->writing = true;
  al_buf_init(&w, SIZE_MAX);
  for (l = b->group; l != NULL && b->write_err == 0; l = l->next_write) {
    if (al_buf_append_str(&w, l->line) != 0) {
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
  al_bjob_t *j;

  if (!b->tty || b->ndjson) {
    return;
  }
  /* The running jobs' counts so far too: the line moves while they do. */
  for (j = b->eng.running; j != NULL; j = j->next) {
    al_agent_stats_t st;

    if (j->state == AL_BJOB_RUNNING) {
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
    uint64_t el = al__bengine_now_ms() - b->t0_ms;
    uint64_t left = el / b->finished_now * (total - fin);

    snprintf(eta, sizeof(eta), ", ETA %" PRIu64 "s", left / 1000u);
  }
  fprintf(stderr,
          "\r\033[Kbatch: %zu/%zu done, %zu running, %zu failed, %" PRIu64
          " tokens, $%.4f%s%s%s",
          fin, total, b->eng.active, b->failed, tokens, cost, unknown ? "+" : "",
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


/* ---- jobs (the engine's file driver) -------------------------------------- */

static void start_jobs(batch_t *b);
static void maybe_end(batch_t *b);

static void on_job_started(al_bjob_t *j) {
  batch_t *b = j->e->data;

  if (b->ndjson) {
    ndjson_line(json_pack("{s:s,s:s,s:b}", "type", "job_started", "id",
                          j->spec->id, "resumed", j->sess.resumed));
  }
}

/* The result line is out (or could not be written: said once at the
 * end). */
static void job_written(batch_t *b, bline_t *l) {
  al_bjob_t *j = l->j;

  if (strcmp(j->outcome, "done") == 0) {
    b->done++;
  } else {
    b->failed++;
  }
  b->finished_now++;
  if (b->ndjson) {
    json_t *o = al__bjob_result_json(j);

    json_object_set_new(o, "type", json_string("job_result"));
    ndjson_line(o);
  }
  al_free(l->line);
  al_free(l);
  al__bjob_stored(j, b->write_err);
}

static void on_job_result(al_bjob_t *j) {
  batch_t *b = j->e->data;
  bline_t *l = al_calloc(1, sizeof(*l));
  json_t *o;
  char *s;

  if (l == NULL) {
    b->write_err = AL_ENOMEM;
    al__bjob_stored(j, AL_ENOMEM);
    return;
  }
  l->j = j;
  o = al__bjob_result_json(j);
  s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (s != NULL) {
    l->line = al_malloc(strlen(s) + 2);
    if (l->line != NULL) {
      sprintf(l->line, "%s\n", s);
    }
    free(s);
  }
  b->tokens += j->stats.input_tokens + j->stats.output_tokens;
  if (j->stats.cost_usd >= 0) {
    b->cost += j->stats.cost_usd;
  } else {
    b->cost_unknown = true;
  }
  if (l->line == NULL) {
    b->write_err = AL_ENOMEM;
  }
  if (b->wq_tail != NULL) {
    b->wq_tail->next_write = l;
  } else {
    b->wq_head = l;
  }
  b->wq_tail = l;
  write_next(b);
}

static void on_job_end(al_bjob_t *j) {
  batch_t *b = j->e->data;

  if (j->no_result && b->cause == 0) {
    /* Its transcript not saved: no line, the next run resumes it. */
    b->unsaved++;
  }
  start_jobs(b);
  maybe_end(b);
}

static const al_bengine_driver_t file_driver = {
    on_job_started, on_job_result, on_job_end, NULL};

static void start_jobs(batch_t *b) {
  while (b->cause == 0 && b->eng.active < b->concurrency &&
         b->next < b->nspecs) {
    size_t i = b->next++;

    if (!b->skip[i]) {
      b->started_now++;
      if (al__bjob_start(&b->eng, &b->specs[i], NULL) == NULL) {
        /* Not started: no line, the next run takes it. */
        b->unsaved++;
      }
    }
  }
}

static void on_client_closed(al_client_t *c) {
  (void)c;
}

static void maybe_end(batch_t *b) {
  if (b->eng.active > 0 || (b->cause == 0 && b->next < b->nspecs) ||
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

  if (b->cause != 0) {
    return;
  }
  b->cause = signum == SIGINT ? EXIT_SIGINT : EXIT_SIGTERM;
  al__bengine_stop(&b->eng);
  maybe_end(b);
}

/* ---- set-up (before the loop) ------------------------------------------- */

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
    al__batch_say("%s: %s", path, strerror(errno));
    return -1;
  }
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (fcntl(fd, F_SETLK, &fl) != 0) {
    al__batch_say("%s is in use by another agentloop batch (one at a time)",
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
        al__batch_say("--concurrency: 1 to %d, not '%s'", CONCURRENCY_MAX,
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
      al__batch_say("%s needs a value (try agentloop batch --help)",
                 argv[optind - 1]);
      return EXIT_USAGE;
    default:
      al__batch_say("unknown option '%s' (try agentloop batch --help)",
                 argv[optind - 1]);
      return EXIT_USAGE;
    }
  }
  if (optind + 1 != argc) {
    al__batch_say(optind >= argc ? "run: JOBS.jsonl is required"
                              : "run: one jobs file, not '%s' too",
               optind < argc ? argv[optind + 1] : "");
    return EXIT_USAGE;
  }
  jobs_path = argv[optind];
  if (out == NULL) {
    al__batch_say("run: --out DIR is required");
    return EXIT_USAGE;
  }
  if (strcmp(format, "text") != 0 && strcmp(format, "ndjson") != 0) {
    al__batch_say("--output-format: text or ndjson, not '%s'", format);
    return EXIT_USAGE;
  }
  rc = al__batch_read_file(jobs_path, AL_BATCH_JOBS_FILE_MAX, &text, &len);
  if (rc != 0) {
    al__batch_say("%s: %s", jobs_path, al_strerror(rc));
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
    al__batch_say("--out %s: cannot create it", out);
    code = EXIT_USAGE;
    goto out_specs;
  }
  b->out_dir = al_strdup(path);
  snprintf(b->eng.sessions_dir, sizeof(b->eng.sessions_dir),
           "%.4000s/sessions", b->out_dir);
  snprintf(path, sizeof(path), "%.4000s/work", b->out_dir);
  if (al__tui_mkdirs(b->eng.sessions_dir) != 0 || al__tui_mkdirs(path) != 0) {
    al__batch_say("cannot create %s/sessions and work", b->out_dir);
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
    al__batch_say("%s", err);
    json_decref(done);
    code = EXIT_USAGE;
    goto out_specs;
  }
  b->results_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (b->results_fd < 0) {
    al__batch_say("%s: %s", path, strerror(errno));
    json_decref(done);
    code = EXIT_USAGE;
    goto out_specs;
  }
  signal(SIGPIPE, SIG_IGN);
  json_object_seed(0);
  rc = al_models_load(&b->models, NULL, &models_err);
  if (rc != 0) {
    al__batch_say("%s", models_err != NULL ? models_err : al_strerror(rc));
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
    al__batch_say("cannot create the HTTP client: %s", al_strerror(rc));
    json_decref(done);
    code = EXIT_FAIL;
    goto out_loop;
  }
  b->skip = al_calloc(b->nspecs, sizeof(*b->skip));
  b->concurrency = conc;
  b->eng.loop = &b->loop;
  b->eng.client = b->client;
  b->eng.models = b->models;
  b->eng.work_dir = b->out_dir;
  b->eng.who = "agentloop batch";
  b->eng.keep_ws = keep;
  b->eng.drv = &file_driver;
  b->eng.data = b;
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
    b->eng.agents = b->agents;
  }
  for (i = 0; code == EXIT_OK && i < b->nspecs; i++) {
    if (b->specs[i].agent != NULL &&
        al__bengine_job_agent(b->agents, b->specs[i].agent) == NULL) {
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
  b->t0_ms = al__bengine_now_ms();
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
  al__batch_say("unknown command '%s' (run, submit, results, status; try agentloop batch --help)",
             argv[1]);
  return EXIT_USAGE;
}
