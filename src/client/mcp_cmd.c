/* `agentloop mcp list|get NAME`: starts the configured MCP servers (the
 * same configuration `agentloop run` uses: config.yaml's mcp_servers:, a
 * trusted project's .mcp.json, --mcp-config FILE), waits until each is
 * ready or failed, and shows its state, tool count, start-up time and last
 * error; `get` also lists its tools. Nothing is sent to a model. The
 * servers are shut down the usual way before it exits.
 *
 *   --cwd DIR          the workspace (default: .)
 *   --mcp-config FILE  more servers
 *   --trust-project    read the workspace's .mcp.json for this command
 *   --json             one JSON object on stdout
 *   --wait MS          wait at most MS for the servers; those still
 *                      starting then are shown as `starting`
 *
 * Exit status: 0 all listed servers ready, 1 some failed (or still
 * starting), 2 usage or configuration error. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "client/cli.h"
#include "common/common.h"
#include "config/config.h"
#include "mcp/mcp.h"
#include "tools/clitool.h"

typedef struct {
  al_mcp_t *m;
  bool closed;
  bool waited; /* --wait ran out */
} mc_t;

static void usage(FILE *f) {
  fputs("usage: agentloop mcp list [--json] [--cwd DIR] [--mcp-config FILE]\n"
        "                          [--trust-project] [--wait MS]\n"
        "       agentloop mcp get NAME [same options]\n"
        "\n"
        "Starts the configured MCP servers (docs/mcp.md), waits for each to\n"
        "be ready or to fail (--wait MS: at most that long; the ones still\n"
        "starting are shown as such), and shows its state, tools and last\n"
        "error.\n",
        f);
}

static void on_closed(void *data) { ((mc_t *)data)->closed = true; }

int al__cli_mcp_load(const char *cwd, const char *file, bool trust,
                     char **json, al_buf_t *err) {
  al_config_t cfg;
  bool trusted = trust || al__tools_project_trusted(cwd);
  int rc;

  al_config_init(&cfg);
  rc = al_config_load(&cfg, cwd, trusted, NULL);
  if (rc == 0 && cfg.n_errors > 0) {
    al_buf_append(err, cfg.errors.data, cfg.errors.len);
    rc = AL_EINVAL;
  }
  if (rc == 0) {
    rc = al__mcp_config_load2(file, al_config_section(&cfg, "mcp_servers"),
                              cwd, trusted, json, err);
  }
  if (rc == 0 && al__mcp_project_skipped(cwd, trusted)) {
    fprintf(stderr, "agentloop: %s/.mcp.json is not read: the project is "
                    "not trusted (--trust-project)\n", cwd);
  }
  al_config_free(&cfg);
  return rc;
}

void al__cli_mcp_line(const json_t *s, al_buf_t *out) {
  const char *st = json_string_value(json_object_get(s, "state"));
  long long ms = (long long)json_integer_value(json_object_get(s, "ms"));

  al_buf_printf(out, "%s: %s", json_string_value(json_object_get(s, "name")),
                st != NULL ? st : "?");
  if (st != NULL && strcmp(st, "starting") == 0) {
    al_buf_printf(out, " (%lld ms so far)", ms);
    return;
  }
  al_buf_printf(out, ", %lld tools, %lld ms",
                (long long)json_integer_value(json_object_get(s, "tools")),
                ms);
  if (json_is_string(json_object_get(s, "protocol"))) {
    al_buf_printf(out, ", protocol %s",
                  json_string_value(json_object_get(s, "protocol")));
  }
}

static void on_wait_over(uv_timer_t *t) { ((mc_t *)t->data)->waited = true; }

int al__cli_mcp_states(const char *cwd, const char *json, json_t **out) {
  return al__cli_mcp_states_wait(cwd, json, 0, out);
}

int al__cli_mcp_states_wait(const char *cwd, const char *json,
                            uint64_t wait_ms, json_t **out) {
  uv_loop_t loop;
  uv_timer_t wait;
  al_mcp_config_t cfg;
  al_mcp_options_t o;
  al_buf_t err;
  mc_t mc;
  json_t *arr;
  size_t i;
  int rc;

  *out = NULL;
  al_buf_init(&err, 4096);
  rc = al__mcp_config_parse(json, strlen(json), &cfg, &err);
  al_buf_free(&err);
  if (rc != 0) {
    return rc;
  }
  memset(&mc, 0, sizeof(mc));
  uv_loop_init(&loop);
  al__mcp_options_init(&o);
  o.loop = &loop;
  o.workspace = cwd;
  o.max_restarts = 0; /* report the first failure; do not retry */
  rc = al__mcp_new(&o, &cfg, &mc.m);
  al__mcp_config_free(&cfg);
  if (rc != 0) {
    uv_loop_close(&loop);
    return rc;
  }
  al__mcp_start(mc.m);
  uv_timer_init(&loop, &wait);
  wait.data = &mc;
  if (wait_ms > 0) {
    uv_timer_start(&wait, on_wait_over, wait_ms, 0);
  }
  while (!al__mcp_settled(mc.m) && !mc.waited) {
    uv_run(&loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&wait, NULL);
  arr = json_array();
  for (i = 0; i < al__mcp_count(mc.m); i++) {
    al_mcp_server_t *s = al__mcp_server(mc.m, i);
    json_t *o1 = al__mcp_server_json(s);
    json_t *names = json_array();
    size_t k;
    json_t *t;

    json_array_foreach(al__mcp_server_tools(s), k, t) {
      char n[65];

      al__mcp_tool_name(al__mcp_server_name(s),
                        json_string_value(json_object_get(t, "name")), n);
      json_array_append_new(
          names, json_pack("{s:O, s:s, s:O*}", "tool", json_object_get(t, "name"),
                           "name", n, "description",
                           json_object_get(t, "description")));
    }
    json_object_set_new(o1, "tool_list", names);
    json_array_append_new(arr, o1);
  }
  al__mcp_close(mc.m, on_closed, &mc);
  while (!mc.closed) {
    uv_run(&loop, UV_RUN_ONCE);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  *out = arr;
  return 0;
}

int al_cli_mcp(int argc, char **argv) {
  enum { O_CWD = 256, O_FILE, O_TRUST, O_JSON, O_WAIT };
  static const struct option longopts[] = {
      {"cwd", required_argument, NULL, O_CWD},
      {"mcp-config", required_argument, NULL, O_FILE},
      {"trust-project", no_argument, NULL, O_TRUST},
      {"json", no_argument, NULL, O_JSON},
      {"wait", required_argument, NULL, O_WAIT},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *cwd = NULL;
  const char *file = NULL;
  const char *want = NULL;
  bool trust = false, as_json = false, get;
  uint64_t wait_ms = 0;
  char *end;
  char cwdbuf[4096];
  size_t n = sizeof(cwdbuf);
  char *json = NULL;
  json_t *states = NULL;
  al_buf_t err;
  size_t i;
  json_t *s;
  int c, failed = 0, shown = 0;

  if (argc < 2 || (strcmp(argv[1], "list") != 0 && strcmp(argv[1], "get") != 0)) {
    usage(argc >= 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
    return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
  }
  get = strcmp(argv[1], "get") == 0;
  /* A server that died must cost a failed write, not this process. */
  signal(SIGPIPE, SIG_IGN);
  optind = 2;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_CWD: cwd = optarg; break;
    case O_FILE: file = optarg; break;
    case O_TRUST: trust = true; break;
    case O_JSON: as_json = true; break;
    case O_WAIT:
      wait_ms = strtoull(optarg, &end, 10);
      if (end == optarg || *end != '\0' || wait_ms == 0) {
        fprintf(stderr, "agentloop mcp: --wait wants a number of ms > 0\n");
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (get) {
    if (optind >= argc) {
      fprintf(stderr, "agentloop mcp get: which server?\n");
      return 2;
    }
    want = argv[optind];
  }
  if (cwd == NULL) {
    cwd = uv_cwd(cwdbuf, &n) == 0 ? cwdbuf : ".";
  }
  al_buf_init(&err, 64 * 1024);
  if (al__cli_mcp_load(cwd, file, trust, &json, &err) != 0) {
    fprintf(stderr, "agentloop mcp: %s\n",
            err.data != NULL ? err.data : "out of memory");
    al_buf_free(&err);
    return 2;
  }
  al_buf_free(&err);
  if (json == NULL) {
    if (as_json) {
      puts("{\"servers\":[]}");
    } else {
      puts("no MCP servers configured (docs/mcp.md)");
    }
    return want != NULL ? 2 : 0;
  }
  if (al__cli_mcp_states_wait(cwd, json, wait_ms, &states) != 0) {
    al_free(json);
    fprintf(stderr, "agentloop mcp: cannot start the servers\n");
    return 2;
  }
  al_free(json);
  if (as_json) {
    json_t *sel = json_array();
    char *text;

    json_array_foreach(states, i, s) {
      if (want == NULL ||
          strcmp(json_string_value(json_object_get(s, "name")), want) == 0) {
        json_array_append(sel, s);
      }
    }
    {
      json_t *o = json_pack("{s:o}", "servers", sel);

      text = json_dumps(o, JSON_COMPACT);
      json_decref(o);
    }
    puts(text != NULL ? text : "{}");
    al_free(text);
  }
  json_array_foreach(states, i, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    const char *st = json_string_value(json_object_get(s, "state"));
    const char *e = json_string_value(json_object_get(s, "error"));
    size_t k;
    json_t *t;
    al_buf_t line;

    if (want != NULL && strcmp(name, want) != 0) {
      continue;
    }
    shown++;
    failed += strcmp(st, "ready") != 0;
    if (as_json) {
      continue;
    }
    al_buf_init(&line, 64 * 1024);
    al__cli_mcp_line(s, &line);
    printf("%s\n", line.data != NULL ? line.data : name);
    al_buf_free(&line);
    if (e != NULL) {
      printf("  error: %s\n", e);
    }
    if (want != NULL) {
      json_array_foreach(json_object_get(s, "tool_list"), k, t) {
        const char *d = json_string_value(json_object_get(t, "description"));

        printf("  %s", json_string_value(json_object_get(t, "name")));
        if (d != NULL) {
          printf(" - %.100s", d);
        }
        putchar('\n');
      }
    }
  }
  json_decref(states);
  if (want != NULL && shown == 0) {
    fprintf(stderr, "agentloop mcp get: no server named '%s'\n", want);
    return 2;
  }
  return failed > 0 ? 1 : 0;
}
