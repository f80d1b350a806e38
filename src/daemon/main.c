/* agentloopd: the command line around the daemon core (daemon.h).
 *
 *   agentloopd [--socket PATH] [--foreground] [--log-level LEVEL]
 *              [--idle-exit SECS] [--provider P] [--model M]
 *              [--base-url URL] [--state-dir DIR] [--max-line BYTES]
 *              [--max-queue BYTES]
 *
 * Without --foreground the process forks; the child detaches (setsid),
 * logs to $XDG_STATE_HOME/agentloop/agentloopd.log and tells the parent
 * over a pipe once it listens, so the parent's exit status says whether
 * the daemon is up (0) or not (1, with the reason on stderr). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentloop/sandbox.h"
#include "agentloop/version.h"
#include "common/common.h"
#include "daemon/daemon.h"
#include "fleet/fleet.h"
#include "fleet/worker.h"
#include "config/config.h"
#include "hooks/hooks.h"
#include "mcp/mcp.h"
#include "rpc/rpc.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: agentloopd [--socket PATH] [--foreground] "
          "[--log-level error|warn|info|debug]\n"
          "                  [--idle-exit SECS] "
          "[--provider anthropic|openai|openai-responses] [--model M]\n"
          "                  [--base-url URL] [--state-dir DIR] "
          "[--max-line BYTES] [--max-queue BYTES]\n"
          "                  [--mcp-config FILE] [--hooks-config FILE] "
          "(docs/mcp.md, docs/hooks.md)\n"
          "                  [--limit NAME=VALUE]... (defaults and ceilings "
          "of every session; docs/daemon.md)\n"
          "Fleet worker (docs/fleet.md): --queue URL [--group NAME] "
          "[--slots N] [--consumer NAME]\n"
          "                  [--sessions DIR] [--work DIR] [--lease-ms MS] "
          "[--max-deliveries N]\n"
          "                  [--drain-grace-ms MS]\n"
          "Environment: AGENTLOOP_SOCKET, AGENTLOOP_PROVIDER, "
          "AGENTLOOP_MODEL, AGENTLOOP_BASE_URL,\n"
          "  ANTHROPIC_API_KEY, OPENAI_API_KEY, XDG_RUNTIME_DIR, "
          "XDG_STATE_HOME, AGENTLOOP_LOG.\n"
          "Protocol: docs/protocol.md.\n");
}

/* The daemon's limits: its config file's `limits:` (an error there is
 * fatal: the daemon would run with weaker bounds than written), then
 * --limit. */
static int daemon_limits(const al_config_t *cfg, const al_limits_t *flags,
                         al_limits_t *out) {
  char why[200];
  const char *p = cfg->errors.data;

  while (p != NULL && *p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);

    if (memmem(p, n, "limit", 5) != NULL) {
      fprintf(stderr, "agentloopd: config: %.*s\n", (int)n, p);
      return -1;
    }
    /* The rest is what `run` reports too (a file refused whole, a bad
     * key): said, never silent, and the daemon starts without it. */
    fprintf(stderr, "agentloopd: config: %.*s (ignored)\n", (int)n, p);
    al_log(AL_LOG_WARN, "config: %.*s (ignored)", (int)n, p);
    p += n + (nl != NULL ? 1 : 0);
  }
  memset(out, 0, sizeof(*out));
  if (al_limits_from_json(out, al_config_section(cfg, "limits"), why,
                          sizeof(why)) != 0) {
    fprintf(stderr, "agentloopd: config: %s\n", why);
    return -1;
  }
  al_limits_overlay(out, flags);
  return 0;
}

static const char *env(const char *name) {
  /* Sees the keys al_sandbox_harden_process() scrubbed from environ. */
  const char *v = al_sandbox_getenv(name);

  return v != NULL && v[0] != '\0' ? v : NULL;
}

static int state_dir(char *buf, size_t len) {
  const char *x = env("XDG_STATE_HOME");
  const char *home = env("HOME");
  int n;

  if (x != NULL && x[0] == '/') {
    n = snprintf(buf, len, "%s/agentloop", x);
  } else if (home != NULL) {
    char base[4096];

    snprintf(base, sizeof(base), "%s/.local/state", home);
    /* Parents are ordinary directories of the user: create quietly. */
    snprintf(buf, len, "%s/.local", home);
    mkdir(buf, 0700);
    mkdir(base, 0700);
    n = snprintf(buf, len, "%s/agentloop", base);
  } else {
    return -1;
  }
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static bool parse_size(const char *s, uint64_t *out) {
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') {
    return false;
  }
  *out = v;
  return true;
}

/* Every session holds descriptors (its transcript, its warm sandboxes'
 * pipes and sockets): the common soft limit of 1024 ran out at about 48
 * sessions (issue 22). The hard limit is ours to take; the daemon then
 * plans for what it got (al_daemon_options_t.fd_limit). */
static void raise_nofile(void) {
  struct rlimit rl;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) {
    return;
  }
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    al_log(AL_LOG_WARN, "cannot raise the open-file limit: %s",
           strerror(errno));
  }
}

/* The daemon and the fleet worker end together, whichever goes first: a
 * signal drains the worker, then the daemon stops; `agentloop daemon
 * stop` (or --idle-exit) stops the daemon, then the worker drains. */
static al_fleet_worker_t *g_worker;
static al_daemon_t *g_daemon;
static uint64_t g_grace_ms;

static void on_worker_exit(al_fleet_worker_t *w, void *data) {
  (void)w;
  (void)data;
  g_worker = NULL;
  if (g_daemon != NULL) {
    al__daemon_set_status(g_daemon, NULL, NULL);
    al__daemon_shutdown(g_daemon);
  }
}

static json_t *worker_status(void *data) {
  return al_fleet_worker_status(data);
}

static void on_exit_cb(al_daemon_t *d, void *data) {
  (void)d;
  (void)data;
  g_daemon = NULL;
  if (g_worker != NULL) {
    al_fleet_worker_drain(g_worker, g_grace_ms);
  }
  al_log(AL_LOG_INFO, "agentloopd stopped");
}

int main(int argc, char **argv) {
  al_daemon_options_t o;
  char sock[256];
  char state[4096];
  char why[512];
  const char *sock_arg = NULL;
  const char *state_arg = NULL;
  bool foreground = false;
  uint64_t v;
  uv_loop_t loop;
  al_daemon_t *d;
  int ready[2] = {-1, -1};
  char *mcp_json = NULL;
  char *hooks_json = NULL;
  const char *mcp_file = NULL;
  const char *hooks_file = NULL;
  al_limits_t flag_limits;
  al_fleet_worker_options_t fo;
  al_fleet_worker_t *worker = NULL;
  char fleet_sessions[4400], fleet_work[4400];
  int i;
  int rc;

  /* The daemon holds the API keys and runs the model's tools: before
   * anything else, close /proc/self/{environ,mem} to same-uid processes,
   * scrub the keys from the environ block and mark inherited fds CLOEXEC
   * (RELIABILITY.md §4, "always"). */
  (void)al_sandbox_harden_process();
  al_log_init();
  raise_nofile();
  al__daemon_options_init(&o);
  memset(&flag_limits, 0, sizeof(flag_limits));
  al_fleet_worker_options_init(&fo);
  o.provider = env("AGENTLOOP_PROVIDER");
  o.model = env("AGENTLOOP_MODEL");
  o.base_url = env("AGENTLOOP_BASE_URL");
  o.anthropic_key = env("ANTHROPIC_API_KEY");
  o.openai_key = env("OPENAI_API_KEY");
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;

    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--version") == 0) {
      printf("agentloopd %s (libuv %s)\n", AL_VERSION_STRING,
             uv_version_string());
      return 0;
    }
    if (strcmp(a, "--foreground") == 0) {
      foreground = true;
      continue;
    }
    if (next == NULL) {
      fprintf(stderr, "agentloopd: unknown or incomplete option %s\n", a);
      usage(stderr);
      return 2;
    }
    i++;
    if (strcmp(a, "--socket") == 0) {
      sock_arg = next;
    } else if (strcmp(a, "--state-dir") == 0) {
      state_arg = next;
    } else if (strcmp(a, "--provider") == 0) {
      o.provider = next;
    } else if (strcmp(a, "--model") == 0) {
      o.model = next;
    } else if (strcmp(a, "--base-url") == 0) {
      o.base_url = next;
    } else if (strcmp(a, "--mcp-config") == 0) {
      mcp_file = next;
    } else if (strcmp(a, "--hooks-config") == 0) {
      hooks_file = next;
    } else if (strcmp(a, "--queue") == 0) {
      fo.url = next;
    } else if (strcmp(a, "--group") == 0) {
      fo.group = next;
    } else if (strcmp(a, "--consumer") == 0) {
      fo.consumer = next;
    } else if (strcmp(a, "--sessions") == 0) {
      fo.sessions_dir = next;
    } else if (strcmp(a, "--work") == 0) {
      fo.work_dir = next;
    } else if (strcmp(a, "--slots") == 0 && parse_size(next, &v) && v > 0 &&
               v <= 4096) {
      fo.slots = (unsigned)v;
    } else if (strcmp(a, "--lease-ms") == 0 && parse_size(next, &v) &&
               v >= 30) {
      fo.lease_ms = v;
    } else if (strcmp(a, "--max-deliveries") == 0 && parse_size(next, &v) &&
               v > 0 && v < 1000) {
      fo.max_deliveries = (unsigned)v;
    } else if (strcmp(a, "--drain-grace-ms") == 0 && parse_size(next, &v)) {
      fo.drain_grace_ms = v;
    } else if (strcmp(a, "--limit") == 0) {
      if (al_limits_set_kv(&flag_limits, next) != 0) {
        fprintf(stderr, "agentloopd: bad --limit %s (NAME=VALUE: a positive "
                        "integer, K/M/G for sizes, or none)\n", next);
        return 2;
      }
    } else if (strcmp(a, "--log-level") == 0) {
      al_log_level_t lv;

      if (!al_log_level_parse(next, &lv)) {
        fprintf(stderr, "agentloopd: bad --log-level %s\n", next);
        return 2;
      }
      al_log_set_level(lv);
    } else if (strcmp(a, "--idle-exit") == 0 && parse_size(next, &v)) {
      o.idle_exit_ms = v * 1000;
    } else if (strcmp(a, "--max-line") == 0 && parse_size(next, &v) &&
               v > 0) {
      o.max_line = (size_t)v;
    } else if (strcmp(a, "--max-queue") == 0 && parse_size(next, &v) &&
               v > 0) {
      o.max_queue = (size_t)v;
    } else {
      fprintf(stderr, "agentloopd: bad option %s %s\n", a, next);
      usage(stderr);
      return 2;
    }
  }
  {
    /* MCP servers and hooks for every session: the user's config.yaml
     * (mcp_servers:, hooks:) and the flags' files, read now, before the
     * loop (blocking is fine here). A project's own settings are not read:
     * sessions of many projects share this daemon. */
    al_config_t cfg;
    al_buf_t cerr;

    al_config_init(&cfg);
    al_buf_init(&cerr, 16 * 1024);
    (void)al_config_load(&cfg, NULL, false, NULL);
    if (al__mcp_config_load2(mcp_file, al_config_section(&cfg, "mcp_servers"),
                             NULL, false, &mcp_json, &cerr) != 0 ||
        al__hooks_config_load(hooks_file, al_config_section(&cfg, "hooks"),
                              &hooks_json, &cerr) != 0) {
      fprintf(stderr, "agentloopd: MCP/hooks configuration: %s\n",
              cerr.data != NULL ? cerr.data : "out of memory");
      al_buf_free(&cerr);
      al_config_free(&cfg);
      return 2;
    }
    if (hooks_json != NULL) {
      /* Checked now: a bad hook would otherwise fail every session. */
      if (al__hooks_check(hooks_json, &cerr) != 0) {
        fprintf(stderr, "agentloopd: hooks configuration: %s\n",
                cerr.data != NULL ? cerr.data : "out of memory");
        al_buf_free(&cerr);
        al_config_free(&cfg);
        return 2;
      }
    }
    if (daemon_limits(&cfg, &flag_limits, &o.limits) != 0) {
      al_buf_free(&cerr);
      al_config_free(&cfg);
      return 2;
    }
    o.pace_rpm = (int)cfg.pacing.rpm;
    o.pace_burst = (int)cfg.pacing.burst;
    al_buf_free(&cerr);
    al_config_free(&cfg);
    o.mcp_config = mcp_json;
    o.hooks_config = hooks_json;
  }
  if (o.provider != NULL && strcmp(o.provider, "anthropic") != 0 &&
      strcmp(o.provider, "openai") != 0 &&
      strcmp(o.provider, "openai-responses") != 0) {
    fprintf(stderr, "agentloopd: provider must be anthropic, openai or "
                    "openai-responses\n");
    return 2;
  }
  why[0] = '\0';
  if (sock_arg != NULL) {
    if (strlen(sock_arg) >= sizeof(sock)) {
      fprintf(stderr, "agentloopd: socket path too long\n");
      return 2;
    }
    strcpy(sock, sock_arg);
    rc = al__rpc_socket_path_check(sock, why, sizeof(why));
  } else {
    rc = al__rpc_socket_path(sock, sizeof(sock), true, why, sizeof(why));
  }
  if (rc != 0) {
    fprintf(stderr, "agentloopd: %s\n", why[0] ? why : uv_strerror(rc));
    return 1;
  }
  if (state_arg != NULL) {
    snprintf(state, sizeof(state), "%s", state_arg);
  } else if (state_dir(state, sizeof(state)) != 0) {
    fprintf(stderr, "agentloopd: no XDG_STATE_HOME or HOME for the state "
                    "directory\n");
    return 2;
  }
  if (fo.url != NULL) {
    al_fleet_url_t u;

    if (al_fleet_url_parse(fo.url, &u, why, sizeof(why)) != 0) {
      fprintf(stderr, "agentloopd: --queue %s: %s\n", fo.url, why);
      return 2;
    }
    /* Defaults under the state directory, one tree per queue prefix. */
    snprintf(fleet_sessions, sizeof(fleet_sessions), "%s/fleet/%s/sessions",
             state, u.prefix);
    snprintf(fleet_work, sizeof(fleet_work), "%s/fleet/%s", state, u.prefix);
    if (fo.sessions_dir == NULL) {
      fo.sessions_dir = fleet_sessions;
    }
    if (fo.work_dir == NULL) {
      fo.work_dir = fleet_work;
    }
    /* The worker takes SIGTERM (drain) and SIGINT; the daemon follows it. */
    o.handle_signals = false;
  }
  /* A client that vanishes must cost us an EPIPE, not the process. */
  signal(SIGPIPE, SIG_IGN);
  if (!foreground) {
    pid_t pid;
    char c;

    if (pipe2(ready, O_CLOEXEC) != 0) {
      perror("agentloopd: pipe");
      return 1;
    }
    pid = fork();
    if (pid < 0) {
      perror("agentloopd: fork");
      return 1;
    }
    if (pid > 0) {
      ssize_t n;

      close(ready[1]);
      do {
        n = read(ready[0], &c, 1);
      } while (n < 0 && errno == EINTR);
      close(ready[0]);
      if (n == 1) {
        return 0;
      }
      waitpid(pid, NULL, 0);
      return 1; /* the child said why on stderr */
    }
    close(ready[0]);
    setsid();
  }
  o.socket_path = sock;
  o.state_dir = state;
  o.on_exit = on_exit_cb;
  uv_loop_init(&loop);
  rc = al__daemon_new(&loop, &o, &d, why, sizeof(why));
  if (rc != 0) {
    fprintf(stderr, "agentloopd: %s\n", why[0] ? why : uv_strerror(rc));
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 1;
  }
  if (fo.url != NULL) {
    fo.on_exit = on_worker_exit;
    g_daemon = d;
    g_grace_ms = fo.drain_grace_ms;
    rc = al_fleet_worker_new(&loop, &fo, &worker, why, sizeof(why));
    if (rc != 0) {
      fprintf(stderr, "agentloopd: %s\n", why[0] ? why : uv_strerror(rc));
      al__daemon_shutdown(d);
      uv_run(&loop, UV_RUN_DEFAULT);
      uv_loop_close(&loop);
      return 1;
    }
    g_worker = worker;
    al__daemon_set_status(d, worker_status, worker);
  }
  if (!foreground) {
    char logp[4200];
    int fd;
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);

    snprintf(logp, sizeof(logp), "%s/agentloopd.log", state);
    fd = open(logp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (nul >= 0) {
      dup2(nul, 0);
      dup2(nul, 1);
      close(nul);
    }
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    if (write(ready[1], "r", 1) != 1) {
      /* The parent is gone; nobody waits for us. */
    }
    close(ready[1]);
  }
  al_log(AL_LOG_INFO, "agentloopd %s listening on %s (state %s, pid %d)",
         AL_VERSION_STRING, sock, state, (int)getpid());
  uv_run(&loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&loop);
  if (rc != 0) {
    al_log(AL_LOG_WARN, "loop not empty at exit: %s", uv_strerror(rc));
  }
  return 0;
}
