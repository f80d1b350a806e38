/* `agentloop batch run` (docs/batch.md): many jobs in one process, on one
 * reactor. The jobs file's reader (batch_jobs.c, pure: no loop) and the
 * workspaces (batch_ws.c: a copy made in libuv's pool, a git worktree
 * made by a spawned git) are apart from the driver (batch.c). */
#ifndef AL_CLIENT_BATCH_H
#define AL_CLIENT_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agentloop/limits.h"

/* Bounds of the jobs file: a line, the number of jobs. */
#define AL_BATCH_LINE_MAX ((size_t)1 << 20)
#define AL_BATCH_JOBS_MAX ((size_t)100000)

typedef enum {
  AL_BATCH_WS_INPLACE, /* "workspace": "DIR" */
  AL_BATCH_WS_COPY,    /* "workspace": {"copy": "DIR"} */
  AL_BATCH_WS_GIT      /* "workspace": {"git": "REPO", "commit": "REV"} */
} al_batch_ws_mode_t;

typedef struct al_batch_job_s {
  char id[64];     /* also the session id: [A-Za-z0-9_-]{1,63} */
  size_t line;     /* in the jobs file */
  char *prompt;
  al_batch_ws_mode_t mode;
  char *ws_src;    /* the directory, or the git repository */
  char *commit;    /* git: the commit (any rev git resolves) */
  char *model;     /* NULL: the configuration's */
  char *provider;
  char *base_url;
  uint32_t max_turns;  /* limits.max_turns; 0: the configuration's */
  int64_t max_tokens;  /* limits.max_tokens */
  uint64_t timeout_ms; /* limits.timeout_s; 0: timeouts.run of the config */
  al_limits_t limits;  /* the other limits.* (al_limits_set names) */
  char **tools;        /* NULL-terminated allow rules, or NULL */
  char *agent;         /* a definition's name: the job's main agent */
} al_batch_job_t;

/* The bound of a jobs file (a million lines of about 1 KiB). */
#define AL_BATCH_JOBS_FILE_MAX ((size_t)1 << 30)

/* "agentloop batch: " and the message, a line on stderr. */
void al__batch_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads a whole file of at most max bytes (blocking: start-up only,
 * before the loop runs). 0 with *out (NUL-terminated, the caller's) and
 * *len; -errno, AL_ETOOBIG, UV_EIO, AL_ENOMEM. */
int al__batch_read_file(const char *path, size_t max, char **out,
                        size_t *len);

/* Parses the jobs file's text (len bytes; name for the messages): one JSON
 * object a line, blank lines skipped. 0 with *jobs (n of them); else
 * AL_EINVAL with "NAME:LINE: job ID: reason" (or without the id when
 * there is none yet) in err. */
int al__batch_jobs_parse(const char *name, const char *text, size_t len,
                         al_batch_job_t **jobs, size_t *n, char *err,
                         size_t errlen);
void al__batch_jobs_free(al_batch_job_t *jobs, size_t n);

/* ---- workspaces (batch_ws.c) ---------------------------------------------- */

typedef struct al_batch_ws_s al_batch_ws_t;
/* Done: status 0, or the error with a one-line reason in why. */
typedef void (*al_batch_ws_cb)(al_batch_ws_t *w, int status,
                               const char *why);

struct al_batch_ws_s {
  uv_loop_t *loop;
  al_batch_job_t *job;
  char path[4096]; /* the workspace the job runs in */
  al_batch_ws_cb cb;
  void *data;
  /* private */
  uv_work_t work;
  uv_process_t proc;
  bool removing;
  bool reuse; /* an existing workspace is the resumed session's */
  int err;
  char why[2 * 4096 + 256];
};

/* Makes the job's workspace at path (copy: DIR/work/ID; git: a worktree
 * there; in place: the directory itself). With reuse (the job's session
 * is resumed, so its workspace was whole when it started) one that exists
 * already is used as it is; without, it is left from a run killed before
 * its session began (a worktree perhaps half checked out) and is made
 * again. cb runs once, on a later iteration. */
void al__batch_ws_prepare(al_batch_ws_t *w, uv_loop_t *loop,
                          al_batch_job_t *job, const char *out_dir,
                          bool reuse, al_batch_ws_cb cb, void *data);
/* Removes a copy or a worktree (in place: nothing); cb runs once, on a
 * later iteration. */
void al__batch_ws_remove(al_batch_ws_t *w, al_batch_ws_cb cb);

#endif
