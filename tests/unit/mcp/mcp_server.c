/* A scriptable MCP server over stdio, for the client's tests: run as
 * `al_tests --helper mcp_server [OPTIONS]`. It is a separate process, so it
 * may block on stdin. Options:
 *   --tools N        N extra tools t0..t(N-1) besides the fixed ones
 *   --page P         tools per tools/list page (0: all on one page)
 *   --hang-init      never answer initialize
 *   --version V      answer initialize with protocolVersion V
 *   --exit-after N   exit(3) after answering N tools/call
 *   --exit-at-start C  write to stderr and exit with status C at once
 *   --ignore-eof     keep running after stdin ends (until a signal)
 *   --ignore-term    also ignore SIGTERM (only SIGKILL ends it)
 *   --garbage        write a non-JSON line after initialize
 *   --dup NAME       also offer a tool named NAME
 *   --pidfile FILE   write our pid to FILE
 *   --env-tool       also offer `env` (our environment, one NAME=value a
 *                    line)
 *   --init-gate FILE answer initialize only once FILE exists (polled every
 *                    5 ms: a start-up as slow as the test wants)
 * Fixed tools: echo {text} (readOnlyHint), fail (isError), rpcerr (a
 * JSON-RPC error), big {bytes} (one line of that many 'x'), stall (never
 * answers), ticks {n, ms} (n progress notifications ms apart, then "ticked
 * n"), roots (asks the client roots/list and returns the answer), change
 * (sends tools/list_changed, after which the list has 'added'),
 * structured {ok} (structuredContent checked against outputSchema), image
 * (an image part), destroy (destructiveHint); cancelled (not listed):
 * the request ids of the notifications/cancelled it got, "2,5,". */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "test.h"

static int extra_tools = 0;
static int page = 0;
static const char *dup_name = NULL;
static int changed = 0;
static bool env_tool = false;
extern char **environ;
static json_t *progress_token = NULL; /* params._meta.progressToken */
static char cancelled_ids[256];        /* notifications/cancelled seen */

static void out(json_t *msg) {
  char *s;

  json_object_set_new(msg, "jsonrpc", json_string("2.0"));
  s = json_dumps(msg, JSON_COMPACT);
  fputs(s, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  free(s);
  json_decref(msg);
}

static json_t *tool(const char *name, const char *desc, bool ro, bool destr) {
  return json_pack("{s:s, s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, "
                   "s:{s:s}, s:{s:s}}}, s:{s:b, s:b}}",
                   "name", name, "description", desc, "inputSchema", "type",
                   "object", "properties", "text", "type", "string", "bytes",
                   "type", "integer", "n", "type", "integer", "ms", "type",
                   "integer", "ok", "type", "boolean", "annotations",
                   "readOnlyHint", ro, "destructiveHint", destr);
}

static json_t *all_tools(void) {
  json_t *a = json_array();
  int i;
  char n[32];

  json_array_append_new(a, tool("echo", "Echo the text back", true, false));
  json_array_append_new(a, tool("fail", "Always fails", false, false));
  json_array_append_new(a, tool("rpcerr", "A JSON-RPC error", false, false));
  json_array_append_new(a, tool("big", "A long line", true, false));
  json_array_append_new(a, tool("stall", "Never answers", true, false));
  json_array_append_new(a, tool("ticks", "Progress", true, false));
  json_array_append_new(a, tool("roots", "Asks roots/list", true, false));
  json_array_append_new(a, tool("change", "Changes the tool list", false, false));
  json_array_append_new(a, tool("image", "An image", true, false));
  json_array_append_new(a, tool("destroy", "Destructive", false, true));
  {
    json_t *t = tool("structured", "Structured", true, false);

    json_object_set_new(t, "outputSchema",
                        json_pack("{s:s, s:{s:{s:s}}, s:[s]}", "type", "object",
                                  "properties", "value", "type", "integer",
                                  "required", "value"));
    json_array_append_new(a, t);
  }
  /* A tool whose inputSchema is not an object: dropped by the client. */
  json_array_append_new(a, json_pack("{s:s, s:s}", "name", "badschema",
                                     "inputSchema", "nope"));
  if (dup_name != NULL) {
    json_array_append_new(a, tool(dup_name, "Duplicate name", true, false));
  }
  if (changed) {
    json_array_append_new(a, tool("added", "Added later", true, false));
  }
  if (env_tool) {
    json_array_append_new(a, tool("env", "Our environment", true, false));
  }
  for (i = 0; i < extra_tools; i++) {
    snprintf(n, sizeof(n), "t%d", i);
    json_array_append_new(a, tool(n, "An extra tool", true, false));
  }
  return a;
}

static void text_result(json_t *id, const char *text, bool err) {
  out(json_pack("{s:O, s:{s:[{s:s, s:s}], s:b}}", "id", id, "result",
                "content", "type", "text", "text", text, "isError", err));
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

  nanosleep(&ts, NULL);
}

/* Reads the next message that is an answer (to our roots/list). */
static json_t *read_answer(void) {
  char *line = NULL;
  size_t cap = 0;
  json_t *m = NULL;

  while (getline(&line, &cap, stdin) > 0) {
    m = json_loads(line, 0, NULL);
    if (m != NULL && json_object_get(m, "method") == NULL) {
      break;
    }
    json_decref(m);
    m = NULL;
  }
  free(line);
  return m;
}

static void on_call(json_t *id, const char *name, json_t *args) {
  if (strcmp(name, "echo") == 0 || (dup_name && strcmp(name, dup_name) == 0)) {
    const char *t = json_string_value(json_object_get(args, "text"));

    text_result(id, t != NULL ? t : "", false);
  } else if (strcmp(name, "fail") == 0) {
    text_result(id, "it failed on purpose", true);
  } else if (strcmp(name, "rpcerr") == 0) {
    out(json_pack("{s:O, s:{s:i, s:s}}", "id", id, "error", "code", -32602,
                  "message", "bad params on purpose"));
  } else if (strcmp(name, "big") == 0) {
    json_int_t n = json_integer_value(json_object_get(args, "bytes"));
    char *b = malloc((size_t)n + 1);

    memset(b, 'x', (size_t)n);
    b[n] = '\0';
    text_result(id, b, false);
    free(b);
  } else if (strcmp(name, "stall") == 0) {
    /* never answers */
  } else if (strcmp(name, "ticks") == 0) {
    int n = (int)json_integer_value(json_object_get(args, "n"));
    int ms = (int)json_integer_value(json_object_get(args, "ms"));
    char text[64];
    int i;

    for (i = 0; i < n; i++) {
      sleep_ms(ms);
      out(json_pack("{s:s, s:{s:O, s:i, s:i, s:s}}", "method",
                    "notifications/progress", "params", "progressToken",
                    progress_token != NULL ? progress_token : json_null(),
                    "progress", i + 1, "total", n, "message", "tick"));
    }
    snprintf(text, sizeof(text), "ticked %d", n);
    text_result(id, text, false);
  } else if (strcmp(name, "roots") == 0) {
    json_t *a;
    char *s;

    out(json_pack("{s:s, s:s}", "id", "r1", "method", "roots/list"));
    a = read_answer();
    s = json_dumps(a, JSON_COMPACT);
    text_result(id, s != NULL ? s : "null", false);
    free(s);
    json_decref(a);
  } else if (strcmp(name, "change") == 0) {
    changed = 1;
    out(json_pack("{s:s}", "method", "notifications/tools/list_changed"));
    text_result(id, "changed", false);
  } else if (strcmp(name, "structured") == 0) {
    if (json_is_true(json_object_get(args, "ok"))) {
      out(json_pack("{s:O, s:{s:[], s:{s:i}}}", "id", id, "result", "content",
                    "structuredContent", "value", 42));
    } else {
      out(json_pack("{s:O, s:{s:[], s:{s:s}}}", "id", id, "result", "content",
                    "structuredContent", "other", "x"));
    }
  } else if (strcmp(name, "env") == 0 && env_tool) {
    size_t k, len = 1;
    char *b;

    for (k = 0; environ[k] != NULL; k++) {
      len += strlen(environ[k]) + 1;
    }
    b = calloc(1, len);
    for (k = 0; environ[k] != NULL; k++) {
      strcat(b, environ[k]);
      strcat(b, "\n");
    }
    text_result(id, b, false);
    free(b);
  } else if (strcmp(name, "cancelled") == 0) {
    text_result(id, cancelled_ids, false);
  } else if (strcmp(name, "image") == 0) {
    out(json_pack("{s:O, s:{s:[{s:s, s:s, s:s}, {s:s, s:s}]}}", "id", id,
                  "result", "content", "type", "image", "mimeType",
                  "image/png", "data", "iVBORw0KGgo=", "type", "text", "text",
                  "caption"));
  } else {
    text_result(id, "MCP error -32602: unknown tool", true);
  }
}

HELPER_IMPL(mcp_server) {
  const char *version = "2025-11-25";
  bool hang_init = false, ignore_eof = false, garbage = false;
  const char *init_gate = NULL;
  int exit_after = -1, calls = 0;
  char *line = NULL;
  size_t cap = 0;
  int i;

  signal(SIGPIPE, SIG_DFL);
  for (i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : "";

    if (strcmp(a, "--tools") == 0) {
      extra_tools = atoi(v), i++;
    } else if (strcmp(a, "--page") == 0) {
      page = atoi(v), i++;
    } else if (strcmp(a, "--hang-init") == 0) {
      hang_init = true;
    } else if (strcmp(a, "--version") == 0) {
      version = v, i++;
    } else if (strcmp(a, "--exit-after") == 0) {
      exit_after = atoi(v), i++;
    } else if (strcmp(a, "--exit-at-start") == 0) {
      fprintf(stderr, "line one\nfatal: cannot start on purpose\n");
      return atoi(v);
    } else if (strcmp(a, "--ignore-eof") == 0) {
      ignore_eof = true;
    } else if (strcmp(a, "--ignore-term") == 0) {
      signal(SIGTERM, SIG_IGN);
    } else if (strcmp(a, "--garbage") == 0) {
      garbage = true;
    } else if (strcmp(a, "--env-tool") == 0) {
      env_tool = true;
    } else if (strcmp(a, "--init-gate") == 0) {
      init_gate = v, i++;
    } else if (strcmp(a, "--dup") == 0) {
      dup_name = v, i++;
    } else if (strcmp(a, "--pidfile") == 0) {
      FILE *f = fopen(v, "w");

      if (f != NULL) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
      }
      i++;
    }
  }
  fprintf(stderr, "mcp_server: started\n");
  while (getline(&line, &cap, stdin) > 0) {
    json_t *m = json_loads(line, 0, NULL);
    json_t *id = json_object_get(m, "id");
    const char *method = json_string_value(json_object_get(m, "method"));
    json_t *params = json_object_get(m, "params");

    if (method == NULL) {
      json_decref(m);
      continue;
    }
    if (strcmp(method, "notifications/cancelled") == 0) {
      char one[32];

      snprintf(one, sizeof(one), "%lld,",
               (long long)json_integer_value(
                   json_object_get(params, "requestId")));
      strncat(cancelled_ids, one,
              sizeof(cancelled_ids) - strlen(cancelled_ids) - 1);
    }
    if (strcmp(method, "initialize") == 0) {
      while (init_gate != NULL && access(init_gate, F_OK) != 0) {
        /* A helper process: it may block. End of input ends it at once
         * (the client closes before the gate opened). */
        struct pollfd pfd = {0, POLLIN, 0};
        char byte;

        if (poll(&pfd, 1, 5) > 0 && read(0, &byte, 1) <= 0) {
          return 0;
        }
      }
      if (!hang_init) {
        out(json_pack("{s:O, s:{s:s, s:{s:{s:b}}, s:{s:s, s:s}}}", "id", id,
                      "result", "protocolVersion", version, "capabilities",
                      "tools", "listChanged", 1, "serverInfo", "name",
                      "fault", "version", "1"));
        if (garbage) {
          fputs("this is not json\n", stdout);
          fflush(stdout);
        }
      }
    } else if (strcmp(method, "tools/list") == 0) {
      json_t *tools = all_tools();
      const char *cur = json_string_value(json_object_get(params, "cursor"));
      size_t from = cur != NULL ? (size_t)atoi(cur) : 0;
      size_t n = json_array_size(tools);
      size_t to = page > 0 && from + (size_t)page < n ? from + (size_t)page : n;
      json_t *slice = json_array();
      json_t *res;
      size_t k;

      for (k = from; k < to; k++) {
        json_array_append(slice, json_array_get(tools, k));
      }
      res = json_pack("{s:o}", "tools", slice);
      if (to < n) {
        char c[32];

        snprintf(c, sizeof(c), "%zu", to);
        json_object_set_new(res, "nextCursor", json_string(c));
      }
      out(json_pack("{s:O, s:o}", "id", id, "result", res));
      json_decref(tools);
    } else if (strcmp(method, "tools/call") == 0) {
      progress_token =
          json_object_get(json_object_get(params, "_meta"), "progressToken");
      on_call(id, json_string_value(json_object_get(params, "name")),
              json_object_get(params, "arguments"));
      if (exit_after >= 0 && ++calls >= exit_after) {
        fprintf(stderr, "mcp_server: exiting after %d calls\n", calls);
        json_decref(m);
        free(line);
        exit(3);
      }
    } else if (strcmp(method, "ping") == 0) {
      out(json_pack("{s:O, s:{}}", "id", id, "result"));
    } else if (id != NULL) {
      out(json_pack("{s:O, s:{s:i, s:s}}", "id", id, "error", "code", -32601,
                    "message", "Method not found"));
    }
    json_decref(m);
  }
  free(line);
  while (ignore_eof) {
    pause();
  }
  return 0;
}
