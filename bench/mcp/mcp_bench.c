/* agentloop's MCP client (src/mcp) against server-everything over stdio,
 * the same work as sdk_client.mjs: spawn to ready (initialize + tools/list),
 * CALLS sequential echo round trips (p50/p99), close time, processes left.
 * Prints one JSON line. usage: agentloop-mcp-bench SERVER_JS CALLS */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "mcp/mcp.h"

typedef struct {
  uv_loop_t loop;
  al_mcp_t *m;
  int done;
  bool err;
  bool closed;
} mb_t;

static void on_done(al_mcp_call_t *c, bool is_error, const char *text,
                    size_t len, void *data) {
  mb_t *b = data;

  (void)c;
  (void)text;
  (void)len;
  b->done++;
  b->err = b->err || is_error;
}

static void on_closed(void *data) { ((mb_t *)data)->closed = true; }

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  mb_t b;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  char json[2048];
  char cwd[4096];
  size_t n = sizeof(cwd);
  int calls = argc > 2 ? atoi(argv[2]) : 1000;
  double *lat;
  uint64_t t0, c0;
  double ready_ms, close_ms;
  int pid, i;

  if (argc < 2 || calls <= 0) {
    fprintf(stderr, "usage: agentloop-mcp-bench SERVER_JS CALLS\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  lat = calloc((size_t)calls, sizeof(*lat));
  memset(&b, 0, sizeof(b));
  uv_loop_init(&b.loop);
  uv_cwd(cwd, &n);
  snprintf(json, sizeof(json),
           "{\"mcpServers\":{\"e\":{\"command\":\"node\",\"args\":[\"%s\","
           "\"stdio\"],\"sandbox\":false}}}",
           argv[1]);
  al_buf_init(&err, 4096);
  if (al__mcp_config_parse(json, strlen(json), &cfg, &err) != 0) {
    fprintf(stderr, "config: %s\n", err.data);
    return 2;
  }
  al__mcp_options_init(&o);
  o.loop = &b.loop;
  o.workspace = cwd;
  o.max_restarts = 0;
  t0 = uv_hrtime();
  if (al__mcp_new(&o, &cfg, &b.m) != 0) {
    return 2;
  }
  al__mcp_config_free(&cfg);
  al__mcp_start(b.m);
  while (!al__mcp_settled(b.m)) {
    uv_run(&b.loop, UV_RUN_ONCE);
  }
  ready_ms = (double)(uv_hrtime() - t0) / 1e6;
  if (al__mcp_server_state(al__mcp_server(b.m, 0)) != AL_MCP_READY) {
    fprintf(stderr, "not ready: %s\n",
            al__mcp_server_error(al__mcp_server(b.m, 0)));
    return 1;
  }
  pid = al__mcp_server_pid(al__mcp_server(b.m, 0));
  for (i = 0; i < calls; i++) {
    json_t *args = json_pack("{s:s}", "message", "x");
    al_mcp_call_t *c;
    uint64_t a = uv_hrtime();
    int want = b.done + 1;

    if (al__mcp_call(al__mcp_server(b.m, 0), "echo", args, NULL, on_done, &b,
                     &c) != 0) {
      return 1;
    }
    json_decref(args);
    while (b.done < want) {
      uv_run(&b.loop, UV_RUN_ONCE);
    }
    lat[i] = (double)(uv_hrtime() - a) / 1e3;
  }
  qsort(lat, (size_t)calls, sizeof(*lat), cmp);
  c0 = uv_hrtime();
  al__mcp_close(b.m, on_closed, &b);
  while (!b.closed) {
    uv_run(&b.loop, UV_RUN_ONCE);
  }
  close_ms = (double)(uv_hrtime() - c0) / 1e6;
  uv_run(&b.loop, UV_RUN_DEFAULT);
  uv_loop_close(&b.loop);
  printf("{\"ready_ms\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"calls\":%d,"
         "\"close_ms\":%.1f,\"left\":%d,\"errors\":%d}\n",
         ready_ms, lat[calls / 2], lat[(int)(calls * 0.99)], calls, close_ms,
         kill(pid, 0) == 0 || errno != ESRCH, b.err ? 1 : 0);
  free(lat);
  return b.err ? 1 : 0;
}
