/* The agent's context management around its history (docs/context.md):
 * micro-compaction before each request, the tool output cache it fills
 * (in memory, and on disk when the agent has a directory for it), and
 * the built-in read_tool_output tool that reads a cleared output back.
 *
 * Disk work never runs on the loop thread: writes and reads go through
 * libuv's threadpool (uv_queue_work), each counted by al__agent_ref so
 * that al_agent_close waits for them.
 *
 * Layers (STYLE §6.1): owns a->ctx; the driver calls al__agent_micro
 * before a request of the main history. Calls down: micro.c, history,
 * the registry (read_tool_output), core.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/media.h"
#include "loop/agent_priv.h"
#include "loop/micro.h"
#include "tools/clitool.h"

static const char *const default_compactable[] = {
    "read_file", "list_directory", "bash", "grep", "glob", AL_MICRO_TOOL,
    NULL};

static const char read_desc[] =
    "Read back a tool output that agentloop cleared from the conversation "
    "to save context (the placeholder names the call id).";
static const char read_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"call_id\":{\"type\":\"string\",\"description\":\"The call id the "
    "placeholder names.\"}},\"required\":[\"call_id\"]}";

/* ---- the disk cache ------------------------------------------------------ */

typedef struct {
  uv_work_t w;
  al_agent_t *agent;
  char *path;
  char *data; /* write: the content; read: what was read */
  size_t len;
  int err;
  al_tool_ctx_t *ctx; /* read: the call to complete */
} cache_job_t;

/* A call id as a file name: anything but [A-Za-z0-9_-] becomes '_'. */
static char *cache_path(const char *dir, const char *id) {
  al_buf_t b;
  size_t i;

  al_buf_init(&b, 8192);
  if (al_buf_printf(&b, "%s/", dir) != 0) {
    return NULL;
  }
  for (i = 0; id[i] != '\0' && i < 200; i++) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-';

    if (al_buf_append(&b, ok ? &c : "_", 1) != 0) {
      al_buf_free(&b);
      return NULL;
    }
  }
  if (al_buf_append_str(&b, ".txt") != 0) {
    al_buf_free(&b);
    return NULL;
  }
  return b.data;
}

static void job_free(cache_job_t *j) {
  al_free(j->path);
  al_free(j->data);
  al_free(j);
}

static void write_work(uv_work_t *w) {
  cache_job_t *j = AL_CONTAINER_OF(w, cache_job_t, w);
  char *slash = strrchr(j->path, '/');
  size_t off = 0;
  int fd;

  if (slash != NULL) {
    *slash = '\0';
    (void)mkdir(j->path, 0700); /* the session's directory exists */
    *slash = '/';
  }
  fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    j->err = -errno;
    return;
  }
  while (off < j->len) {
    ssize_t n = write(fd, j->data + off, j->len - off);

    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      j->err = n < 0 ? -errno : UV_EIO;
      break;
    }
    off += (size_t)n;
  }
  close(fd);
}

static void job_done(uv_work_t *w, int status) {
  cache_job_t *j = AL_CONTAINER_OF(w, cache_job_t, w);
  al_agent_t *a = j->agent;

  if (status != 0 || j->err != 0) {
    al_log(AL_LOG_WARN, "agent %s: cannot save a cleared tool output to %s: %s",
           a->core.session.id, j->path,
           al_strerror(status != 0 ? status : j->err));
  }
  job_free(j);
  al__agent_unref(a);
}

static void cache_write(al_agent_t *a, const char *id, const json_t *content) {
  cache_job_t *j;

  if (a->ctx.tool_output_dir == NULL) {
    return;
  }
  j = al_calloc(1, sizeof(*j));
  if (j == NULL) {
    return;
  }
  j->agent = a;
  j->path = cache_path(a->ctx.tool_output_dir, id);
  j->data = json_is_string(content)
                ? al_strndup(json_string_value(content),
                             json_string_length(content))
                : json_dumps(content, JSON_COMPACT);
  if (j->path == NULL || j->data == NULL) {
    job_free(j);
    return;
  }
  j->len = json_is_string(content) ? json_string_length(content)
                                   : strlen(j->data);
  if (uv_queue_work(a->loop, &j->w, write_work, job_done) != 0) {
    job_free(j);
    return;
  }
  al__agent_ref(a);
}

/* ---- read_tool_output ---------------------------------------------------- */

static void read_work(uv_work_t *w) {
  cache_job_t *j = AL_CONTAINER_OF(w, cache_job_t, w);
  struct stat st;
  int fd = open(j->path, O_RDONLY | O_CLOEXEC);

  if (fd < 0) {
    j->err = -errno;
    return;
  }
  if (fstat(fd, &st) != 0 || st.st_size > (off_t)AL_CONTEXT_MAX_OUTPUT) {
    j->err = AL_ETOOBIG;
    close(fd);
    return;
  }
  j->data = al_malloc((size_t)st.st_size + 1);
  if (j->data == NULL) {
    j->err = AL_ENOMEM;
    close(fd);
    return;
  }
  while (j->len < (size_t)st.st_size) {
    ssize_t n = read(fd, j->data + j->len, (size_t)st.st_size - j->len);

    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    j->len += (size_t)n;
  }
  close(fd);
}

/* A saved output back to the model: a content array with images or PDFs
 * as blocks again (their text view for events), anything else as text. */
static void complete_saved(al_tool_ctx_t *ctx, const json_t *c,
                           const char *raw, size_t raw_len) {
  char *text;

  if (json_is_array(c) && al__media_has_blocks(c)) {
    text = al__media_text_view(c);
    al__tool_ctx_complete_blocks(ctx, false, text != NULL ? text : "",
                                 text != NULL ? strlen(text) : 0, c);
    al_free(text);
    return;
  }
  al_tool_ctx_complete(ctx, false, raw, raw_len);
}

static void read_done(uv_work_t *w, int status) {
  cache_job_t *j = AL_CONTAINER_OF(w, cache_job_t, w);
  al_agent_t *a = j->agent;

  if (status != 0 || j->err != 0) {
    char msg[300];

    snprintf(msg, sizeof(msg), "Error: no saved output for this call id (%s)",
             al_strerror(status != 0 ? status : j->err));
    al_tool_ctx_complete(j->ctx, true, msg, strlen(msg));
  } else {
    json_t *c = j->len > 0 && j->data[0] == '['
                    ? json_loadb(j->data, j->len, 0, NULL)
                    : NULL;

    complete_saved(j->ctx, c, j->data, j->len);
    json_decref(c);
  }
  job_free(j);
  al__agent_unref(a);
}

static void read_run(al_tool_ctx_t *ctx, void *data) {
  al_agent_t *a = data;
  json_t *in = json_loads(al_tool_ctx_input(ctx), 0, NULL);
  const char *id = json_string_value(json_object_get(in, "call_id"));
  const json_t *c = id != NULL ? json_object_get(a->ctx.tool_cache, id) : NULL;
  cache_job_t *j;
  char *text;

  if (c != NULL) {
    if (json_is_string(c)) {
      al_tool_ctx_complete(ctx, false, json_string_value(c),
                           json_string_length(c));
    } else {
      text = json_dumps(c, JSON_COMPACT);
      complete_saved(ctx, c, text != NULL ? text : "",
                     text != NULL ? strlen(text) : 0);
      al_free(text);
    }
    json_decref(in);
    return;
  }
  j = id != NULL && a->ctx.tool_output_dir != NULL ? al_calloc(1, sizeof(*j))
                                                : NULL;
  if (j != NULL) {
    j->agent = a;
    j->ctx = ctx;
    j->path = cache_path(a->ctx.tool_output_dir, id);
    if (j->path != NULL &&
        uv_queue_work(a->loop, &j->w, read_work, read_done) == 0) {
      al__agent_ref(a);
      json_decref(in);
      return;
    }
    job_free(j);
  }
  {
    static const char none[] =
        "Error: no cleared output is saved for this call id";

    al_tool_ctx_complete(ctx, true, none, sizeof(none) - 1);
  }
  json_decref(in);
}

/* ---- set-up and the pass before each request ----------------------------- */

int al__agent_context_init(al_agent_t *a, const al_agent_options_t *o) {
  const char *const *names =
      o->compactable_tools != NULL ? o->compactable_tools : default_compactable;
  const al_cli_set_t *set = a->reg.cli_set;
  size_t n = 0;
  size_t m = 0;
  size_t i;

  a->ctx.tool_cache = json_object();
  if (a->ctx.tool_cache == NULL) {
    return AL_ENOMEM;
  }
  while (names[n] != NULL) {
    n++;
  }
  /* tools.d tools marked `compactable: true` join the list. */
  a->ctx.compactable = al_calloc(n + (set != NULL ? set->n : 0) + 1,
                             sizeof(*a->ctx.compactable));
  if (a->ctx.compactable == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    if ((a->ctx.compactable[m++] = al_strdup(names[i])) == NULL) {
      return AL_ENOMEM;
    }
  }
  for (i = 0; set != NULL && i < set->n; i++) {
    if (set->defs[i]->compactable &&
        (a->ctx.compactable[m++] = al_strdup(set->defs[i]->name)) == NULL) {
      return AL_ENOMEM;
    }
  }
  a->ctx.micro_min_tokens = o->micro_min_tokens != 0 ? o->micro_min_tokens
                                                 : AL_MICRO_MIN_TOKENS;
  if (o->tool_output_dir != NULL &&
      (a->ctx.tool_output_dir = al_strdup(o->tool_output_dir)) == NULL) {
    return AL_ENOMEM;
  }
  if (o->builtin_tools) {
    al_tool_def_t def;

    memset(&def, 0, sizeof(def));
    def.name = AL_MICRO_TOOL;
    def.description = read_desc;
    def.input_schema = read_schema;
    def.category = AL_TOOL_READ;
    def.concurrency_safe = true;
    def.run = read_run;
    def.data = a;
    return al_agent_add_tool(a, &def);
  }
  return 0;
}

void al__agent_context_free(al_agent_t *a) {
  size_t i;

  json_decref(a->ctx.tool_cache);
  a->ctx.tool_cache = NULL;
  for (i = 0; a->ctx.compactable != NULL && a->ctx.compactable[i] != NULL;
       i++) {
    al_free(a->ctx.compactable[i]);
  }
  al_free(a->ctx.compactable);
  a->ctx.compactable = NULL;
  al_free(a->ctx.tool_output_dir);
  a->ctx.tool_output_dir = NULL;
}

bool al__agent_micro(al_agent_t *a) {
  al_micro_options_t mo;
  json_t *msgs = a->history.messages;
  json_t *originals;
  json_t *cleared;
  int64_t before;
  int64_t saved;
  al_event_t ev;
  char *ids;
  const char *k;
  json_t *v;
  bool stop;

  if (a->ctx.micro_min_tokens < 0 || !json_is_array(msgs)) {
    return false;
  }
  mo.compactable = (const char *const *)a->ctx.compactable;
  mo.keep = AL_MICRO_KEEP;
  mo.min_tokens = a->ctx.micro_min_tokens;
  mo.ratio = al__budget_ratio(&a->budget, a->model);
  originals = json_object();
  cleared = json_array();
  before = al__budget_project(
      &a->budget, a->model,
      al__budget_raw_msgs(json_dumpb(msgs, NULL, 0, JSON_COMPACT), msgs));
  saved = al__micro_compact(msgs, &mo, originals, cleared);
  if (saved <= 0) {
    json_decref(originals);
    json_decref(cleared);
    return false;
  }
  json_object_foreach(originals, k, v) {
    json_object_set(a->ctx.tool_cache, k, v);
    cache_write(a, k, v);
  }
  a->ctx.micro_saved += (uint64_t)saved;
  /* Durable: a resumed session clears the same results. */
  al__agent_commit_record(a, AL_COMMIT_MICRO, "call_ids", cleared);
  ids = json_dumps(cleared, JSON_COMPACT);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_MICRO_COMPACTION;
  ev.u.compaction.trigger = ag_slice("auto");
  ev.u.compaction.cleared = (uint32_t)json_array_size(cleared);
  ev.u.compaction.call_ids = ag_slice(ids);
  ev.u.compaction.tokens_saved = (uint64_t)saved;
  ev.u.compaction.tokens_before = (uint64_t)before;
  ev.u.compaction.tokens_after =
      (uint64_t)(before > saved ? before - saved : 0);
  json_decref(originals);
  json_decref(cleared);
  stop = al__agent_post(a, &ev);
  al_free(ids);
  return stop;
}
