/* `agentloop daemon status|stop|restart` (docs/frontend.md):
 *
 *   status    pid, version, socket and sessions of the running daemon;
 *             exit 0 when it runs, 3 when none does
 *   stop      asks it to shut down (runs are cancelled and transcripts
 *             flushed, as on SIGTERM) and waits until it let go of its
 *             socket; exit 0 also when none was running
 *   restart   stop, then start a new one (its settings come from each
 *             client anyway; a restart picks up a new agentloopd binary
 *             or the daemon's own environment)
 *
 * All of it runs on its own small loop; nothing here blocks it. */
#include <stdio.h>
#include <string.h>

#include "client/chat.h"
#include "client/cli.h"
#include "client/conn.h"

typedef enum { D_STATUS, D_STOP, D_RESTART } dcmd_t;

typedef struct {
  al__conn_t conn;
  uv_loop_t *loop;
  dcmd_t cmd;
  int exit_code;
  bool stopping;   /* waiting for the old daemon's EOF */
  bool restarting; /* the second connection (starting a new daemon) */
} dctl_t;

static void done(dctl_t *x, int code) {
  x->exit_code = code;
  al__conn_close(&x->conn, NULL);
}

static void on_list(al__conn_t *c, json_t *result, json_t *error,
                    void *data) {
  dctl_t *x = c->data;
  json_t *info = c->init_result;
  json_t *l = json_object_get(result, "sessions");
  size_t loaded = 0, running = 0, i;
  json_t *s;

  (void)data;
  json_array_foreach(l, i, s) {
    loaded += json_is_true(json_object_get(s, "loaded"));
    running += json_is_true(json_object_get(s, "running"));
  }
  printf("agentloopd %s running: pid %lld, socket %s\n",
         json_string_value(json_object_get(json_object_get(info, "server"),
                                           "version")),
         (long long)json_integer_value(json_object_get(info, "pid")),
         c->path);
  if (error == NULL) {
    printf("sessions: %zu known, %zu loaded, %zu running\n",
           json_array_size(l), loaded, running);
  }
  printf("settings: each session uses the provider, model, base URL and "
         "key of the client that created or resumed it\n");
  {
    /* A fleet worker (agentloopd --queue, docs/fleet.md). */
    json_t *f = json_object_get(info, "fleet");

    if (json_is_object(f)) {
      const char *le =
          json_string_value(json_object_get(f, "last_error"));

      printf("fleet worker %s on %s group %s: redis %s, intake %s\n",
             json_string_value(json_object_get(f, "consumer")),
             json_string_value(json_object_get(f, "queue")),
             json_string_value(json_object_get(f, "group")),
             json_string_value(json_object_get(f, "redis")),
             json_string_value(json_object_get(f, "intake")));
      printf("fleet slots: %lld/%lld used; jobs: %lld done, %lld failed, "
             "%lld fenced, %lld handed back, %lld storage failures\n",
             (long long)json_integer_value(json_object_get(f, "slots_used")),
             (long long)json_integer_value(json_object_get(f, "slots")),
             (long long)json_integer_value(json_object_get(f, "done")),
             (long long)json_integer_value(json_object_get(f, "failed")),
             (long long)json_integer_value(json_object_get(f, "fenced")),
             (long long)json_integer_value(json_object_get(f, "handed_back")),
             (long long)json_integer_value(
                 json_object_get(f, "storage_failures")));
      if (le != NULL) {
        printf("fleet last error: %s\n", le);
      }
    }
  }
  done(x, 0);
}

static void on_shutdown(al__conn_t *c, json_t *result, json_t *error,
                        void *data) {
  (void)c;
  (void)result;
  (void)error;
  (void)data;
  /* The daemon closes the connection once it is done: on_lost. */
}

static void on_ready(al__conn_t *c, int status);

static void on_closed_restart(al__conn_t *c) {
  dctl_t *x = c->data;

  memset(&x->conn, 0, sizeof(x->conn));
  x->conn.data = x;
  x->restarting = true;
  if (al__conn_open(&x->conn, x->loop, true, on_ready) != 0) {
    fprintf(stderr, "agentloop daemon: cannot start agentloopd: %s\n",
            x->conn.why);
    x->exit_code = AL_EXIT_UNAVAILABLE;
  }
}

static void on_lost(al__conn_t *c, int status) {
  dctl_t *x = c->data;

  (void)status;
  if (!x->stopping) {
    done(x, 1);
    return;
  }
  x->stopping = false;
  if (x->cmd == D_RESTART) {
    al__conn_close(c, on_closed_restart);
    return;
  }
  printf("agentloopd stopped\n");
  done(x, 0);
}

static void on_ready(al__conn_t *c, int status) {
  dctl_t *x = c->data;

  if (status != 0) {
    if (x->cmd == D_STATUS || (x->cmd == D_STOP && !x->restarting)) {
      printf("agentloopd is not running (socket %s)\n", c->path);
      done(x, x->cmd == D_STATUS ? 3 : 0);
      return;
    }
    if (x->cmd == D_RESTART && !x->restarting) {
      /* Nothing to stop: start one. */
      al__conn_close(c, on_closed_restart);
      return;
    }
    fprintf(stderr, "agentloop daemon: %s\n", c->why);
    done(x, AL_EXIT_UNAVAILABLE);
    return;
  }
  if (x->restarting) {
    printf("agentloopd started: pid %lld\n",
           (long long)json_integer_value(
               json_object_get(c->init_result, "pid")));
    done(x, 0);
    return;
  }
  if (x->cmd == D_STATUS) {
    al__conn_call(c, "session/list", NULL, on_list, NULL);
    return;
  }
  x->stopping = true;
  al__conn_call(c, "shutdown", NULL, on_shutdown, NULL);
}

int al_cli_daemon(int argc, char **argv) {
  dctl_t x;
  uv_loop_t loop;

  if (argc < 2 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "--help") == 0) {
    fputs("usage: agentloop daemon status|stop|restart\n", argc < 2 ? stderr
                                                                     : stdout);
    return argc < 2 ? 2 : 0;
  }
  memset(&x, 0, sizeof(x));
  if (strcmp(argv[1], "status") == 0) {
    x.cmd = D_STATUS;
  } else if (strcmp(argv[1], "stop") == 0) {
    x.cmd = D_STOP;
  } else if (strcmp(argv[1], "restart") == 0) {
    x.cmd = D_RESTART;
  } else {
    fprintf(stderr, "agentloop daemon: unknown command '%s' (status, stop "
                    "or restart)\n", argv[1]);
    return 2;
  }
  uv_loop_init(&loop);
  x.loop = &loop;
  x.conn.data = &x;
  x.conn.lost_cb = on_lost;
  if (al__conn_open(&x.conn, &loop, false, on_ready) != 0) {
    fprintf(stderr, "agentloop daemon: %s\n", x.conn.why);
    al__conn_close(&x.conn, NULL);
    x.exit_code = AL_EXIT_UNAVAILABLE;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return x.exit_code;
}
