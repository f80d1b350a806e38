/* agentloop-mockllm: the scripted model server as a command.
 *
 *   agentloop-mockllm --listen HOST:PORT --scenario FILE.yaml [options]
 *
 * Everything before uv_run is allowed to block (reading the scenario,
 * writing the port file); once the loop runs, the server never does. The
 * port file is written (atomically, via rename) before the "listening on"
 * line is printed, so a script can wait for either. SIGINT/SIGTERM close the
 * server and exit 0; a bad scenario exits 2 with FILE:LINE:COL. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentloop/agentloop.h"
#include "common/common.h"
#include "mockllm/mockllm.h"

typedef struct {
  uv_loop_t *loop;
  al_mockllm_t *server;
  uv_signal_t sigint;
  uv_signal_t sigterm;
  bool quiet;
  bool stopping;
} app_t;

static void usage(FILE *f) {
  fputs(
      "usage: agentloop-mockllm --listen HOST:PORT --scenario FILE.yaml "
      "[options]\n"
      "\n"
      "A scripted model server speaking the Anthropic Messages and OpenAI\n"
      "Chat Completions streaming protocols (see docs/mockllm.md).\n"
      "\n"
      "  --listen HOST:PORT  address to bind (default 127.0.0.1:0; port 0 =\n"
      "                      any free port; IPv6 as [::1]:PORT)\n"
      "  --scenario FILE     the YAML scenario to play (default: one short\n"
      "                      text reply)\n"
      "  --record FILE       append every request as one NDJSON line\n"
      "  --no-validate       skip the API's request rules (a body that is\n"
      "                      not JSON is still a 400)\n"
      "  --require-api-key   answer requests without a key with the API's\n"
      "                      401 (default: a local server needs no key)\n"
      "  --timestamps        put the send time (uv_hrtime ns) on every event\n"
      "                      as an SSE id: line\n"
      "  --port-file FILE    write the bound port there once listening\n"
      "  --tls-cert FILE     serve HTTPS with this PEM certificate chain\n"
      "  --tls-key FILE      and this PEM private key (both needed)\n"
      "  --allow-remote      allow a non-loopback --listen address\n"
      "  -q, --quiet         no log lines on stderr\n"
      "  --version           versions of agentloop and its libraries\n"
      "  -h, --help          this help\n",
      f);
}

/* HOST:PORT, [V6]:PORT, or just PORT. */
static int parse_listen(const char *arg, char *host, size_t hlen, int *port) {
  const char *colon;
  char *end;
  long p;

  if (arg[0] == '[') {
    const char *rb = strchr(arg, ']');

    if (rb == NULL || rb[1] != ':' || (size_t)(rb - arg - 1) >= hlen) {
      return -1;
    }
    memcpy(host, arg + 1, (size_t)(rb - arg - 1));
    host[rb - arg - 1] = '\0';
    colon = rb + 1;
  } else {
    colon = strrchr(arg, ':');
    if (colon == NULL) {
      snprintf(host, hlen, "127.0.0.1");
      colon = arg - 1;
    } else {
      if ((size_t)(colon - arg) >= hlen || colon == arg) {
        return -1;
      }
      memcpy(host, arg, (size_t)(colon - arg));
      host[colon - arg] = '\0';
    }
  }
  errno = 0;
  p = strtol(colon + 1, &end, 10);
  if (errno != 0 || *end != '\0' || end == colon + 1 || p < 0 || p > 65535) {
    return -1;
  }
  *port = (int)p;
  return 0;
}

static int write_port_file(const char *path, int port) {
  char tmp[4096];
  FILE *f;

  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
      (int)sizeof(tmp)) {
    return -1;
  }
  f = fopen(tmp, "w");
  if (f == NULL) {
    return -1;
  }
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

static void on_signal_close(uv_handle_t *h) { (void)h; }

static void on_server_closed(al_mockllm_t *m) {
  app_t *app = al_mockllm_get_data(m);

  app->server = NULL;
  uv_close((uv_handle_t *)&app->sigint, on_signal_close);
  uv_close((uv_handle_t *)&app->sigterm, on_signal_close);
}

static void on_signal(uv_signal_t *s, int signum) {
  app_t *app = s->data;

  if (app->stopping) {
    return;
  }
  app->stopping = true;
  if (!app->quiet) {
    fprintf(stderr, "agentloop-mockllm: %s, shutting down\n",
            signum == SIGINT ? "SIGINT" : "SIGTERM");
  }
  al_mockllm_close(app->server, on_server_closed);
}

int main(int argc, char **argv) {
  al_mockllm_options_t o;
  app_t app;
  char host[256] = "127.0.0.1";
  char err[1024];
  const char *port_file = NULL;
  int port = 0;
  int i;
  int rc;

  al_log_init();
  /* A client that hangs up mid-stream must cost an EPIPE, not the process. */
  signal(SIGPIPE, SIG_IGN);
  memset(&app, 0, sizeof(app));
  al_mockllm_options_init(&o);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    bool takes = strcmp(a, "--listen") == 0 || strcmp(a, "--scenario") == 0 ||
                 strcmp(a, "--record") == 0 || strcmp(a, "--port-file") == 0 ||
                 strcmp(a, "--tls-cert") == 0 || strcmp(a, "--tls-key") == 0;

    if (takes && val == NULL) {
      fprintf(stderr, "agentloop-mockllm: %s needs a value\n", a);
      return 2;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
      puts(al_version_full());
      return 0;
    } else if (strcmp(a, "--listen") == 0) {
      if (parse_listen(val, host, sizeof(host), &port) != 0) {
        fprintf(stderr, "agentloop-mockllm: bad --listen '%s' (want "
                "HOST:PORT)\n", val);
        return 2;
      }
      i++;
    } else if (strcmp(a, "--scenario") == 0) {
      o.scenario_path = val;
      i++;
    } else if (strcmp(a, "--record") == 0) {
      o.record_path = val;
      i++;
    } else if (strcmp(a, "--tls-cert") == 0) {
      o.tls_cert = val;
      i++;
    } else if (strcmp(a, "--tls-key") == 0) {
      o.tls_key = val;
      i++;
    } else if (strcmp(a, "--port-file") == 0) {
      port_file = val;
      i++;
    } else if (strcmp(a, "--no-validate") == 0) {
      o.validate = false;
    } else if (strcmp(a, "--require-api-key") == 0) {
      o.require_api_key = true;
    } else if (strcmp(a, "--timestamps") == 0) {
      o.timestamps = true;
    } else if (strcmp(a, "--allow-remote") == 0) {
      o.allow_remote = true;
    } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
      app.quiet = true;
    } else {
      fprintf(stderr, "agentloop-mockllm: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (app.quiet) {
    al_log_set_level(AL_LOG_ERROR);
  }
  o.host = host;
  o.port = port;
  o.err = err;
  o.err_len = sizeof(err);

  app.loop = uv_default_loop();
  rc = al_mockllm_new(app.loop, &o, &app.server);
  if (rc != 0) {
    fprintf(stderr, "agentloop-mockllm: %s\n", err[0] ? err : al_strerror(rc));
    /* Let a failed listener's close run before exiting. */
    uv_run(app.loop, UV_RUN_DEFAULT);
    return rc == AL_EPARSE || rc == AL_EINVAL ? 2 : 1;
  }
  al_mockllm_set_data(app.server, &app);
  uv_signal_init(app.loop, &app.sigint);
  uv_signal_init(app.loop, &app.sigterm);
  app.sigint.data = &app;
  app.sigterm.data = &app;
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);

  if (port_file != NULL &&
      write_port_file(port_file, al_mockllm_port(app.server)) != 0) {
    fprintf(stderr, "agentloop-mockllm: cannot write %s: %s\n", port_file,
            strerror(errno));
    al_mockllm_close(app.server, on_server_closed);
    uv_run(app.loop, UV_RUN_DEFAULT);
    return 1;
  }
  printf("listening on %s://%s%s%s:%d\n", o.tls_cert ? "https" : "http",
         strchr(host, ':') ? "[" : "", host,
         strchr(host, ':') ? "]" : "", al_mockllm_port(app.server));
  fflush(stdout);

  uv_run(app.loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(app.loop);
  if (!app.quiet && rc != 0) {
    fprintf(stderr, "agentloop-mockllm: loop not empty at exit\n");
  }
  return 0;
}
