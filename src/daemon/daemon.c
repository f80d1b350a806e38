/* agentloopd core (daemon.h): process set-up and shutdown, the idle exit,
 * and the wiring of the client layer (clients.c) to the methods
 * (methods.c) and sessions (sessions.c); internal.h says who owns what.
 *
 * Handles close asynchronously; the daemon counts what is still open
 * (d->pending) and calls on_exit when the count reaches zero. */
#include "daemon/internal.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

#define DEFAULT_MAX_QUEUE (2u * 1024 * 1024)
#define DEFAULT_SOFT_MS 10000
#define DEFAULT_REPLAY (16u * 1024 * 1024)
#define DEFAULT_REPLAY_IDLE_MS (10u * 60 * 1000)
#define SHUTDOWN_GRACE_MS 2000

/* ---- idle exit, shutdown -------------------------------------------------------- */

static void on_idle_timer(uv_timer_t *t) {
  al_daemon_t *d = t->data;

  if (d->clients.n == 0) {
    al_list_t *pos;

    al_list_foreach(pos, &d->sessions) {
      session_t *s = AL_CONTAINER_OF(pos, session_t, node);

      if (s->running) {
        return;
      }
    }
    al_log(AL_LOG_INFO, "idle for %llu ms: exiting",
           (unsigned long long)d->o.idle_exit_ms);
    al__daemon_shutdown(d);
  }
}

void al__daemon_idle_check(al_daemon_t *d) {
  al_list_t *pos;

  if (d->o.idle_exit_ms == 0 || d->shutting_down) {
    return;
  }
  if (d->clients.n > 0) {
    uv_timer_stop(&d->idle);
    return;
  }
  al_list_foreach(pos, &d->sessions) {
    if (AL_CONTAINER_OF(pos, session_t, node)->running) {
      uv_timer_stop(&d->idle);
      return;
    }
  }
  /* From now, not from the loop's cached time, which predates blocking
   * start-up work (the sandbox probe) when the daemon is being created. */
  uv_update_time(d->loop);
  uv_timer_start(&d->idle, on_idle_timer, d->o.idle_exit_ms, 0);
}

static void daemon_free(al_daemon_t *d) {
  if (d->state_lock >= 0) {
    close(d->state_lock);
  }
  if (d->socket_lock >= 0) {
    close(d->socket_lock);
  }
  al_free(d->socket_path);
  al_free(d->state_dir);
  al_free(d->sessions_dir);
  al_models_free(d->models);
  al_free(d);
}

static void on_final_closed(uv_handle_t *h) {
  al_daemon_t *d = h->data;

  if (--d->final == 0) {
    void (*cb)(al_daemon_t *, void *) = d->o.on_exit;
    void *data = d->o.data;

    if (cb != NULL) {
      cb(d, data);
    }
    daemon_free(d);
  }
}

void al__daemon_maybe_exit(al_daemon_t *d) {
  if (!d->shutting_down || d->pending != 0 || d->exiting) {
    return;
  }
  /* Every session (agent) and client is gone: the shared HTTP client
   * (its handles close on their own; the loop drains them) and our last
   * handles. */
  d->exiting = true;
  if (d->http != NULL) {
    al_client_close(d->http, NULL);
    d->http = NULL;
  }
  d->final = 5;
  uv_close((uv_handle_t *)&d->sweep, on_final_closed);
  uv_close((uv_handle_t *)&d->sigterm, on_final_closed);
  uv_close((uv_handle_t *)&d->sigint, on_final_closed);
  uv_close((uv_handle_t *)&d->idle, on_final_closed);
  uv_close((uv_handle_t *)&d->grace, on_final_closed);
}

static void on_grace(uv_timer_t *t) {
  al_daemon_t *d = t->data;

  /* Clients that do not read their last lines are cut off. */
  al__dclients_close_all(&d->clients);
}

static void on_server_closed(uv_handle_t *h) {
  al_daemon_t *d = AL_CONTAINER_OF(h, al_daemon_t, server);

  d->pending--;
  al__daemon_maybe_exit(d);
}

void al__daemon_shutdown(al_daemon_t *d) {
  al_list_t *pos, *next;

  if (d->shutting_down) {
    return;
  }
  d->shutting_down = true;
  al_log(AL_LOG_INFO, "shutting down");
  uv_timer_stop(&d->idle);
  uv_timer_stop(&d->sweep);
  uv_signal_stop(&d->sigterm);
  uv_signal_stop(&d->sigint);
  d->pending++;
  uv_close((uv_handle_t *)&d->server, on_server_closed);
  unlink(d->socket_path);
  /* Sessions: cancel runs (interrupted reaches watchers and transcripts),
   * say session/closed, close agents, flush transcripts. */
  for (pos = d->sessions.next; pos != &d->sessions; pos = next) {
    next = pos->next;
    al__session_close(AL_CONTAINER_OF(pos, session_t, node));
  }
  /* Clients: flush what is queued, then EOF. */
  al__dclients_shutdown(&d->clients);
  uv_timer_start(&d->grace, on_grace, SHUTDOWN_GRACE_MS, 0);
  uv_unref((uv_handle_t *)&d->grace);
  al__daemon_maybe_exit(d);
}

static void on_signal(uv_signal_t *h, int signum) {
  al_log(AL_LOG_INFO, "signal %d", signum);
  al__daemon_shutdown(h->data);
}

/* ---- the client layer's callbacks ------------------------------------------- */

static void on_client_accepted(client_t *c) {
  uv_timer_stop(&client_daemon(c)->idle);
}

static void on_client_closing(client_t *c) {
  al_daemon_t *d = client_daemon(c);

  al__sessions_client_closing(c);
  al__daemon_idle_check(d);
}

static void on_client_handle(void *data, int delta) {
  al_daemon_t *d = data;

  d->pending += delta;
  if (delta < 0) {
    al__daemon_maybe_exit(d);
  }
}

static bool admit_client(void *data) {
  return !((al_daemon_t *)data)->shutting_down;
}

/* ---- descriptors (issue 22) ------------------------------------------------------ */

/* A procfs directory: the kernel's fd table, read without touching a
 * disk (a few microseconds for a thousand entries), so it is fine on the
 * loop thread; it is read only when a session is created, loaded or run. */
static size_t fds_in_use(void) {
  DIR *dir = opendir("/proc/self/fd");
  struct dirent *de;
  size_t n = 0;

  if (dir == NULL) {
    return 0;
  }
  while ((de = readdir(dir)) != NULL) {
    if (de->d_name[0] != '.') {
      n++;
    }
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0; /* not the directory's own */
}

/* The least recently active idle session (NULL: none), and how many
 * there are. */
static session_t *idle_lru(al_daemon_t *d, const session_t *keep, size_t *n) {
  session_t *lru = NULL;
  al_list_t *pos;

  *n = 0;
  al_list_foreach(pos, &d->sessions) {
    session_t *s = AL_CONTAINER_OF(pos, session_t, node);

    if (al__session_is_idle(s)) {
      (*n)++;
      if (s != keep &&
          (lru == NULL || s->last_active < lru->last_active)) {
        lru = s;
      }
    }
  }
  return lru;
}

/* Unloads idle sessions other than `keep` (least recently active first)
 * until `want` descriptors are free or will be once their closes finish,
 * and until no more than the allowed number are idle. */
static void fd_relieve(al_daemon_t *d, const session_t *keep, size_t in_use) {
  size_t per = d->o.session_fds;
  /* Room for two more sessions beyond the reserve: the next create finds
   * it even though an unload takes a few loop turns to finish. */
  size_t want = AL_DAEMON_FD_RESERVE + 2 * per;
  size_t coming = d->nunloading * per;
  size_t nidle;
  session_t *lru;

  while ((lru = idle_lru(d, keep, &nidle)) != NULL) {
    bool short_of_fds = d->fd_limit != 0 && in_use != 0 &&
                        in_use + want > d->fd_limit + coming;

    if (!short_of_fds && nidle <= d->o.max_idle_sessions) {
      return;
    }
    al_log(AL_LOG_INFO, "session %s unloaded (%zu idle; %zu of %zu "
                        "descriptors in use)", lru->id, nidle, in_use,
           d->fd_limit);
    al__session_unload(lru);
    coming += per;
  }
}

bool al__daemon_fd_admit(al_daemon_t *d, const session_t *keep, client_t *c,
                         const json_t *id, size_t need, const char *what) {
  size_t in_use;
  char msg[300];

  in_use = d->fd_limit != 0 ? fds_in_use() : 0;
  fd_relieve(d, keep, in_use != 0 ? in_use + need : 0);
  if (in_use == 0) {
    return true; /* no limit, or no way to count: as before */
  }
  if (in_use + need + AL_DAEMON_FD_RESERVE <= d->fd_limit) {
    return true;
  }
  d->stats.fd_refused++;
  snprintf(msg, sizeof(msg),
           "cannot %s: the daemon is at its open-file limit (RLIMIT_NOFILE "
           "%zu, %zu in use, %zu sessions loaded, none idle to unload); "
           "close or unsubscribe from sessions, or raise the limit "
           "(ulimit -n) and restart the daemon",
           what, d->fd_limit, in_use, d->nloaded);
  al_log(AL_LOG_WARN, "%s", msg);
  al__daemon_reply_err(c, id, AL_RPC_FD_LIMIT, msg,
                       json_pack("{s:s, s:I, s:I}", "limit", "open_files",
                                 "max", (json_int_t)d->fd_limit, "in_use",
                                 (json_int_t)in_use));
  return false;
}

/* ---- setup -------------------------------------------------------------------- */

void al__daemon_options_init(al_daemon_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->handle_signals = true;
}

#define TITLE_TAIL (64 * 1024)

/* Reads the header (and the first user text) of every transcript, so
 * session/list knows them without loading them. Blocking: before the
 * loop runs. Only the first 64 KiB of each file are read. */
static void scan_sessions(al_daemon_t *d) {
  DIR *dir = opendir(d->sessions_dir);
  struct dirent *de;
  char *buf = al_malloc(64 * 1024 + 1);
  char *tail = al_malloc(TITLE_TAIL);

  if (dir == NULL || buf == NULL || tail == NULL) {
    if (dir != NULL) {
      closedir(dir);
    }
    al_free(buf);
    al_free(tail);
    return;
  }
  while ((de = readdir(dir)) != NULL) {
    size_t nl = strlen(de->d_name);
    char id[64];
    char *path;
    int fd;
    ssize_t n;
    ssize_t tn;
    off_t tat;
    session_t *s;
    struct stat st;

    if (nl <= 6 || nl - 6 >= sizeof(id) ||
        strcmp(de->d_name + nl - 6, ".jsonl") != 0) {
      continue;
    }
    memcpy(id, de->d_name, nl - 6);
    id[nl - 6] = '\0';
    if (!al__session_id_valid(id) || al__session_find(d, id) != NULL ||
        (path = al__transcript_path(d, id)) == NULL) {
      continue;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    al_free(path);
    if (fd < 0) {
      continue;
    }
    n = read(fd, buf, 64 * 1024);
    if (fstat(fd, &st) != 0) {
      st.st_mtime = 0;
      st.st_size = 0;
    }
    /* A session/rename's title record is the last in the file: looked
     * for in the head and the last TITLE_TAIL bytes (a listing; the load
     * reads all of it and knows for sure). */
    tn = -1;
    tat = 0;
    if (n > 0 && st.st_size > (off_t)n) {
      /* It may overlap the head: a title line across the head's end is
       * whole here. */
      tat = st.st_size > TITLE_TAIL ? st.st_size - TITLE_TAIL : 0;
      tn = pread(fd, tail, TITLE_TAIL, tat);
    }
    close(fd);
    if (n < 0 || (s = al__session_alloc(d, id)) == NULL) {
      continue;
    }
    buf[n] = '\0';
    s->updated_ms = (uint64_t)st.st_mtime * 1000;
    {
      char *first = NULL;
      char *named;

      al__tx_scan_head(buf, (size_t)n, &s->h, &first);
      if (first != NULL) {
        s->title = al__make_title(first);
        al_free(first);
      }
      named = al__tx_scan_title(buf, (size_t)n);
      if (tn > 0) {
        /* From the first whole line of the tail. */
        const char *lf = memchr(tail, '\n', (size_t)tn);
        const char *from = tat == 0 ? tail : lf != NULL ? lf + 1 : NULL;
        char *t = from != NULL ? al__tx_scan_title(from, (size_t)(tail + tn -
                                                                  from))
                               : NULL;

        if (t != NULL) {
          al_free(named);
          named = t;
        }
      }
      if (named != NULL) {
        al_free(s->title);
        s->title = named;
        s->named = true;
      }
    }
  }
  closedir(dir);
  al_free(buf);
  al_free(tail);
}

static int take_lock(const char *path, int *out, char *why, size_t why_len) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

  if (fd < 0) {
    int e = -errno;

    snprintf(why, why_len, "cannot open lock %s: %s", path, strerror(-e));
    return e;
  }
  /* A daemon killed while spawning a tool leaves a child between fork and
   * exec that still shares the lock for a moment: retry for up to 0.5 s
   * before calling it another daemon. Startup only, before the loop. */
  for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
    struct timespec ts = {0, 25 * 1000 * 1000};

    if (errno != EWOULDBLOCK || tries == 20) {
      close(fd);
      snprintf(why, why_len, "another agentloopd holds %s", path);
      return UV_EBUSY;
    }
    nanosleep(&ts, NULL);
  }
  *out = fd;
  return 0;
}

/* State directories: created 0700; an existing one of ours that is wider
 * is tightened (transcripts hold the conversation, RELIABILITY F7). Unlike
 * the socket directory it may be a symlink (dotfile setups). */
static int mkdir_private(const char *dir, char *why, size_t why_len) {
  struct stat st;

  if (mkdir(dir, 0700) != 0 && errno == ENOENT) {
    /* $XDG_STATE_HOME itself may not exist yet (a fresh account, a
     * container): its parents are made as the XDG spec asks, 0700. */
    char parent[PATH_MAX];
    char *slash;

    snprintf(parent, sizeof(parent), "%s", dir);
    slash = strrchr(parent, '/');
    if (slash != NULL && slash != parent) {
      *slash = '\0';
      if (mkdir_private(parent, why, why_len) != 0) {
        return -ENOENT;
      }
      (void)mkdir(dir, 0700);
    }
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int e = -errno;

    snprintf(why, why_len, "cannot create %s: %s", dir, strerror(-e));
    return e;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(why, why_len, "%s is not a directory", dir);
    return UV_ENOTDIR;
  }
  if (st.st_uid != geteuid()) {
    snprintf(why, why_len, "%s is owned by another user; refusing it", dir);
    return UV_EPERM;
  }
  if ((st.st_mode & 077) != 0 && chmod(dir, 0700) != 0) {
    int e = -errno;

    snprintf(why, why_len, "cannot make %s private: %s", dir, strerror(-e));
    return e;
  }
  return 0;
}

static char *join(const char *a, const char *b) {
  al_buf_t buf;

  al_buf_init(&buf, 8192);
  if (al_buf_printf(&buf, "%s/%s", a, b) != 0) {
    al_buf_free(&buf);
    return NULL;
  }
  return buf.data;
}

static void on_failed_server_closed(uv_handle_t *h) {
  daemon_free(AL_CONTAINER_OF(h, al_daemon_t, server));
}

int al__daemon_new(uv_loop_t *loop, const al_daemon_options_t *o,
                   al_daemon_t **out, char *why, size_t why_len) {
  al_daemon_t *d;
  al_client_options_t co;
  char *lockp = NULL;
  mode_t old;
  int rc;

  *out = NULL;
  why[0] = '\0';
  d = al_calloc(1, sizeof(*d));
  if (d == NULL) {
    return AL_ENOMEM;
  }
  d->loop = loop;
  d->o = *o;
  d->state_lock = d->socket_lock = -1;
  /* libuv writes to sockets with write(2): a client that vanished would
   * kill the process with SIGPIPE (RELIABILITY G7). The daemon core is
   * only ever the daemon (agentloopd, or its tests). */
  signal(SIGPIPE, SIG_IGN);
  if (d->o.max_line == 0) {
    d->o.max_line = AL_RPC_DEFAULT_MAX_LINE;
  }
  if (d->o.max_queue == 0) {
    d->o.max_queue = DEFAULT_MAX_QUEUE;
  }
  if (d->o.soft_ms == UINT64_MAX) {
    d->o.soft_ms = 0;
  } else if (d->o.soft_ms == 0) {
    d->o.soft_ms = DEFAULT_SOFT_MS;
  }
  if (d->o.replay_bytes == 0) {
    d->o.replay_bytes = DEFAULT_REPLAY;
  }
  if (d->o.replay_idle_ms == 0) {
    d->o.replay_idle_ms = DEFAULT_REPLAY_IDLE_MS;
  }
  if (d->o.max_sessions == 0) {
    d->o.max_sessions = 1024;
  }
  if (d->o.max_clients == 0) {
    d->o.max_clients = 1024;
  }
  if (d->o.max_idle_sessions == 0) {
    d->o.max_idle_sessions = AL_DAEMON_MAX_IDLE;
  }
  if (d->o.session_fds == 0) {
    d->o.session_fds = AL_DAEMON_SESSION_FDS;
  }
  d->fd_limit = d->o.fd_limit;
  if (d->fd_limit == 0) {
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      d->fd_limit = (size_t)rl.rlim_cur;
    }
  }
  al_list_init(&d->sessions);
  {
    static const al_dclients_cbs_t cbs = {
        .on_line = al__daemon_on_line,
        .on_drained = al__sessions_client_drained,
        .on_accepted = on_client_accepted,
        .on_closing = on_client_closing,
        .on_handle = on_client_handle,
        .admit = admit_client,
    };

    al__dclients_init(&d->clients, loop, d->o.max_line, d->o.max_queue,
                      d->o.max_clients, &cbs, d);
  }
  d->socket_path = al_strdup(o->socket_path);
  d->state_dir = al_strdup(o->state_dir);
  d->sessions_dir = join(o->state_dir, "sessions");
  if (d->socket_path == NULL || d->state_dir == NULL ||
      d->sessions_dir == NULL) {
    rc = AL_ENOMEM;
    goto fail;
  }
  /* State: dir 0700, one daemon per state dir (RELIABILITY F5). */
  if ((rc = mkdir_private(d->state_dir, why, why_len)) != 0 ||
      (rc = mkdir_private(d->sessions_dir, why, why_len)) != 0) {
    goto fail;
  }
  lockp = join(d->state_dir, "agentloopd.lock");
  if (lockp == NULL ||
      (rc = take_lock(lockp, &d->state_lock, why, why_len)) != 0) {
    rc = lockp == NULL ? AL_ENOMEM : rc;
    goto fail;
  }
  al_free(lockp);
  lockp = NULL;
  /* Socket: one daemon per path (G9); with the lock held, a leftover file
   * is a stale socket of a dead daemon and is replaced. */
  if ((rc = al__rpc_socket_path_check(d->socket_path, why, why_len)) != 0) {
    goto fail;
  }
  {
    al_buf_t lb;

    al_buf_init(&lb, 8192);
    if (al_buf_printf(&lb, "%s.lock", d->socket_path) != 0) {
      rc = AL_ENOMEM;
      goto fail;
    }
    rc = take_lock(lb.data, &d->socket_lock, why, why_len);
    al_buf_free(&lb);
    if (rc != 0) {
      goto fail;
    }
  }
  scan_sessions(d);
  {
    /* Sessions' agents use the default probe options: probe now, before
     * the loop runs, not inside the first session/create on the loop. */
    al_sandbox_probe_options_t po;

    al_sandbox_probe_options_init(&po);
    al__sandbox_warm(&po);
  }
  {
    /* The models catalogue (docs/context.md), read before the loop runs:
     * a mistake in the user's models.yaml stops the start with its place. */
    char *merr = NULL;

    rc = al_models_load(&d->models, NULL, &merr);
    if (rc != 0) {
      snprintf(why, why_len, "%s", merr != NULL ? merr : al_strerror(rc));
      al_free(merr);
      goto fail;
    }
  }
  al_client_options_init(&co);
  co.ca_file = o->ca_file;
  if ((rc = al_client_new(loop, &co, &d->http)) != 0) {
    snprintf(why, why_len, "cannot create the HTTP client: %s",
             al_strerror(rc));
    goto fail;
  }
  uv_pipe_init(loop, &d->server, 0);
  d->server.data = &d->clients;
  /* Bound under a temporary name and renamed into place once listening,
   * so a client never finds a socket that refuses connections. 0600 from
   * creation: no window in which the socket is wider. */
  {
    char tmp[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int tn = snprintf(tmp, sizeof(tmp), "%s.%d", d->socket_path,
                      (int)getpid());
    const char *bindp =
        tn > 0 && (size_t)tn < sizeof(tmp) ? tmp : d->socket_path;

    unlink(bindp);
    if (bindp == d->socket_path) {
      unlink(d->socket_path);
    }
    old = umask(0177);
    rc = uv_pipe_bind(&d->server, bindp);
    umask(old);
    if (rc == 0 && o->open_socket) {
      chmod(bindp, 0666);
    }
    if (rc == 0) {
      rc = uv_listen((uv_stream_t *)&d->server, 128,
                     al__dclients_on_connection);
    }
    if (rc == 0 && bindp != d->socket_path &&
        rename(bindp, d->socket_path) != 0) {
      rc = -errno;
    }
    if (rc != 0 && bindp != d->socket_path) {
      unlink(bindp);
    }
  }
  if (rc != 0) {
    snprintf(why, why_len, "cannot listen on %s: %s", d->socket_path,
             uv_strerror(rc));
    al_client_close(d->http, NULL);
    d->http = NULL;
    while (!al_list_empty(&d->sessions)) {
      al__session_free(AL_CONTAINER_OF(d->sessions.next, session_t, node));
    }
    /* d holds the server handle: freed in its close callback (the caller
     * runs the loop to drain it, as it must before uv_loop_close). */
    uv_close((uv_handle_t *)&d->server, on_failed_server_closed);
    return rc;
  }
  uv_signal_init(loop, &d->sigterm);
  uv_signal_init(loop, &d->sigint);
  d->sigterm.data = d->sigint.data = d;
  if (o->handle_signals) {
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_signal, SIGINT);
  }
  uv_unref((uv_handle_t *)&d->sigterm);
  uv_unref((uv_handle_t *)&d->sigint);
  uv_timer_init(loop, &d->idle);
  uv_timer_init(loop, &d->grace);
  uv_timer_init(loop, &d->sweep);
  /* The set-up above blocks (scan, probe) and the loop's cached time may
   * be older still: measure the idle time from now, or a loaded machine
   * sees the daemon exit before its first client is accepted. */
  uv_update_time(loop);
  d->idle.data = d->grace.data = d->sweep.data = d;
  if (d->o.replay_idle_ms != UINT64_MAX) {
    /* Checked at half the idle time: a ring lives at most 1.5 x it. */
    uint64_t every = d->o.replay_idle_ms / 2 > 0 ? d->o.replay_idle_ms / 2 : 1;

    uv_timer_start(&d->sweep, al__ring_sweep, every, every);
    uv_unref((uv_handle_t *)&d->sweep);
  }
  al__daemon_idle_check(d);
  *out = d;
  return 0;

fail:
  al_free(lockp);
  while (!al_list_empty(&d->sessions)) {
    al__session_free(AL_CONTAINER_OF(d->sessions.next, session_t, node));
  }
  daemon_free(d);
  return rc;
}

void al__daemon_stats(const al_daemon_t *d, al_daemon_stats_t *out) {
  const al_list_t *pos;

  *out = d->stats;
  out->refused_peers = d->clients.refused;
  out->replay_bytes = 0;
  al_list_foreach(pos, &d->sessions) {
    out->replay_bytes +=
        AL_CONTAINER_OF(pos, const session_t, node)->ring_bytes;
  }
  out->clients = d->clients.n;
  out->sessions_loaded = d->nloaded;
  out->sessions_known = d->nknown;
  out->fd_limit = d->fd_limit;
}

void al__daemon_set_status(al_daemon_t *d, json_t *(*fn)(void *data),
                           void *data) {
  d->status = fn;
  d->status_data = data;
}

al_agent_t *al__daemon_agent(al_daemon_t *d, const char *session) {
  session_t *s = al__session_find(d, session);

  return s != NULL ? s->agent : NULL;
}
