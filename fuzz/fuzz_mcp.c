/* libFuzzer target: the MCP client's handling of a server's stdout
 * (src/mcp/mcp.c): line splitting, the initialize answer, paginated
 * tools/list answers, server->client requests, notifications, tools/call
 * answers and their formatting. The input is split at its first 0xFF byte:
 * the first part is fed before a tools/call is made (when the server got
 * ready), the rest after it; in the second part the call's id is 4 or
 * more. Nothing may crash or leak, and close must always finish. Also
 * parses the input as an MCP configuration and as a tools/call result. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp.h"

static void on_done(al_mcp_call_t *c, bool is_error, const char *text,
                    size_t len, void *data) {
  (void)c;
  (void)is_error;
  if (strlen(text) != len) {
    abort();
  }
  *(int *)data += 1;
}

static void on_closed(void *data) { *(int *)data = 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char cfg_text[] =
      "{\"mcpServers\":{\"f\":{\"command\":\"/nonexistent\"}}}";
  const char *p = (const char *)data;
  const uint8_t *cut = memchr(data, 0xff, size);
  size_t first = cut != NULL ? (size_t)(cut - data) : size;
  uv_loop_t loop;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  al_mcp_t *m;
  al_mcp_call_t *c;
  json_t *res;
  int done = 0, closed = 0;

  signal(SIGPIPE, SIG_IGN);
  /* The same bytes as a configuration and as a result. */
  al_buf_init(&err, 4096);
  if (al__mcp_config_parse(p, size, &cfg, &err) == 0) {
    al__mcp_config_free(&cfg);
  }
  al_buf_free(&err);
  res = json_loadb(p, size, 0, NULL);
  if (res != NULL) {
    bool is_error;
    char *t = al__mcp_format_result(res, json_object_get(res, "outputSchema"),
                                    1000, "t", &is_error);

    free(t);
    json_decref(res);
  }

  uv_loop_init(&loop);
  al_buf_init(&err, 4096);
  if (al__mcp_config_parse(cfg_text, strlen(cfg_text), &cfg, &err) != 0) {
    abort();
  }
  al_buf_free(&err);
  al__mcp_options_init(&o);
  o.loop = &loop;
  o.workspace = "/tmp";
  o.line_max = 4096;
  o.result_max_chars = 200;
  if (al__mcp_new(&o, &cfg, &m) != 0) {
    abort();
  }
  al__mcp_config_free(&cfg);
  al__mcp_fuzz_feed(m, p, first);
  if (al__mcp_server_state(al__mcp_server(m, 0)) == AL_MCP_READY) {
    json_t *args = json_object();

    if (al__mcp_call(al__mcp_server(m, 0), "echo", args, NULL, on_done, &done,
                     &c) != 0) {
      c = NULL;
    }
    json_decref(args);
  }
  if (cut != NULL) {
    al__mcp_fuzz_feed(m, p + first + 1, size - first - 1);
  }
  al__mcp_close(m, on_closed, &closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (!closed) {
    abort();
  }
  uv_loop_close(&loop);
  return 0;
}
