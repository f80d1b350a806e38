/* `agentloop tools [--json]`: the tools an `agentloop run` in this
 * workspace would offer the model (built-ins and tools.d CLI tools), the
 * tools.d files that did not load (FILE:LINE:COL: reason) and the sandbox
 * mode. It builds the same agent `run` does, in-process, without a daemon
 * and without sending anything; all of it is start-up work, so blocking
 * I/O is fine here.
 *
 *   --cwd DIR          the workspace (default: .)
 *   --tools-dir DIR    another tools.d directory (repeatable)
 *   --trust-project    approve this workspace's tools.d/, .agentloop/ and
 *                      .mcp.json as they are now (their hash goes into
 *                      $XDG_CONFIG_HOME/agentloop/trusted-projects) and
 *                      list what was added, removed or modified since
 *                      the last approval
 *   --sandbox MODE     auto | required | none, as for run
 *   --json             one JSON object (al_agent_tools_json) on stdout
 *
 * Exit status: 0 listed (load errors included), 2 usage or the agent
 * could not be created. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "agentloop/agentloop.h"
#include "client/cli.h"
#include "common/common.h"
#include "tools/clitool.h"

#define MAX_DIRS 32

static void usage(FILE *f) {
  fputs("usage: agentloop tools [--json] [--cwd DIR] [--tools-dir DIR]...\n"
        "                       [--trust-project] [--sandbox MODE]\n"
        "\n"
        "Lists the tools a run would offer (built-ins, tools.d CLI tools),\n"
        "the tools.d files that failed to load (FILE:LINE:COL: reason) and\n"
        "the sandbox mode. The project's tools.d/, .agentloop/ and\n"
        ".mcp.json are used only when trusted: --trust-project approves\n"
        "them as they are now and lists what changed since the last\n"
        "approval; a file added or changed after it is not used until\n"
        "approved again.\n",
        f);
}

static void print_text(json_t *o) {
  json_t *sb = json_object_get(o, "sandbox");
  json_t *t;
  json_t *m;
  size_t i;

  printf("sandbox: %s", json_string_value(json_object_get(sb, "mode")));
  if (json_integer_value(json_object_get(sb, "landlock_abi")) > 0) {
    printf(" (landlock abi %lld)",
           (long long)json_integer_value(json_object_get(sb, "landlock_abi")));
  }
  if (json_array_size(json_object_get(sb, "missing")) > 0) {
    printf("; missing:");
    json_array_foreach(json_object_get(sb, "missing"), i, m) {
      printf("%s%s", i ? "," : " ", json_string_value(m));
    }
  }
  printf("\ntools:\n");
  json_array_foreach(json_object_get(o, "tools"), i, t) {
    const char *d = json_string_value(json_object_get(t, "description"));
    const char *nl = d != NULL ? strchr(d, '\n') : NULL;

    printf("  %-18s %-6s %-10s %.*s\n",
           json_string_value(json_object_get(t, "name")),
           json_string_value(json_object_get(t, "category")),
           json_string_value(json_object_get(t, "source")),
           (int)(nl != NULL ? nl - d : (d != NULL ? (int)strlen(d) : 0)),
           d != NULL ? d : "");
  }
  if (json_array_size(json_object_get(o, "errors")) > 0) {
    printf("errors:\n");
    json_array_foreach(json_object_get(o, "errors"), i, t) {
      printf("  %s\n", json_string_value(t));
    }
  }
  t = json_object_get(o, "project_trust");
  {
    const char *st = json_string_value(json_object_get(t, "state"));
    json_t *ch = json_object_get(t, "changes");
    bool approved = json_is_true(json_object_get(t, "approved"));

    if (approved) {
      printf("trusted: %s (%zu change%s approved since the last time)\n",
             json_string_value(json_object_get(t, "path")),
             json_array_size(ch), json_array_size(ch) == 1 ? "" : "s");
    } else if (st != NULL && (strcmp(st, "changed") == 0 ||
                              strcmp(st, "unbound") == 0)) {
      printf("note: %s: %s; its tools.d/, .agentloop/ and .mcp.json are "
             "not used until `agentloop tools --trust-project` approves "
             "them again:\n",
             json_string_value(json_object_get(t, "path")),
             strcmp(st, "changed") == 0
                 ? "files changed since you trusted this project"
                 : "this project was trusted before trust was bound to "
                   "its files' content");
    } else if (st != NULL && strcmp(st, "unreadable") == 0) {
      printf("note: %s: the project's files could not be read whole "
             "(over %s); it is not trusted\n",
             json_string_value(json_object_get(t, "path")),
             AL_TRUST_LIMITS_TEXT ", or unreadable");
    }
    if (approved || (st != NULL && (strcmp(st, "changed") == 0 ||
                                    strcmp(st, "unbound") == 0))) {
      json_array_foreach(ch, i, m) {
        printf("  %-8s %s\n",
               json_string_value(json_object_get(m, "change")),
               json_string_value(json_object_get(m, "path")));
      }
    }
    if (st != NULL && (strcmp(st, "changed") == 0 ||
                       strcmp(st, "unbound") == 0)) {
      return; /* said above, with what to approve */
    }
  }
  m = json_object_get(o, "project_tools_d");
  if (m != NULL && !json_is_true(json_object_get(m, "trusted"))) {
    printf("note: %s was not loaded: its tools are code from the project's "
           "repository and this project is not trusted; "
           "`agentloop tools --trust-project` trusts it\n",
           json_string_value(json_object_get(m, "path")));
  }
}

/* {"path", "state", "changes": [{"change", "path"}], "approved"}: the
 * project's trust (src/tools/trust.c); approved when --trust-project just
 * recorded it, and changes are then what it approved. */
static json_t *trust_json(const al_project_trust_t *t, bool approved) {
  json_t *ch = json_array();
  const char *p = t->changes.data;

  while (p != NULL && *p != '\0') {
    const char *e = strchr(p, '\n');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
    const char *sp = memchr(p, ' ', n);

    if (sp != NULL) {
      json_array_append_new(
          ch, json_pack("{s:s%, s:s%}", "change", p, (size_t)(sp - p),
                        "path", sp + 1, (size_t)(n - (size_t)(sp - p) - 1)));
    }
    p = e != NULL ? e + 1 : NULL;
  }
  return json_pack("{s:s, s:s, s:o, s:b}", "path", t->real, "state",
                   al__trust_state_name(t->state), "changes", ch, "approved",
                   approved);
}

bool al__cli_sandbox_policy(const char *arg, al_sandbox_policy_t *out) {
  if (strcmp(arg, "auto") == 0) {
    *out = AL_SANDBOX_AUTO;
  } else if (strcmp(arg, "required") == 0) {
    *out = AL_SANDBOX_REQUIRED;
  } else if (strcmp(arg, "none") == 0) {
    *out = AL_SANDBOX_OFF;
  } else {
    return false;
  }
  return true;
}

int al_cli_tools(int argc, char **argv) {
  enum { O_CWD = 256, O_DIR, O_TRUST, O_SANDBOX, O_JSON };
  static const struct option longopts[] = {
      {"cwd", required_argument, NULL, O_CWD},
      {"tools-dir", required_argument, NULL, O_DIR},
      {"trust-project", no_argument, NULL, O_TRUST},
      {"sandbox", required_argument, NULL, O_SANDBOX},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *dirs[MAX_DIRS + 1];
  size_t ndirs = 0;
  const char *cwd = ".";
  char real[PATH_MAX];
  bool json = false;
  bool trust = false;
  al_sandbox_policy_t sandbox = AL_SANDBOX_AUTO;
  al_agent_options_t o;
  al_agent_t *agent = NULL;
  uv_loop_t loop;
  char *text = NULL;
  json_t *obj;
  al_project_trust_t tr;
  int c;
  int rc;

  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_CWD: cwd = optarg; break;
    case O_DIR:
      if (ndirs == MAX_DIRS) {
        fprintf(stderr, "agentloop tools: at most %d --tools-dir\n",
                MAX_DIRS);
        return 2;
      }
      dirs[ndirs++] = optarg;
      break;
    case O_TRUST: trust = true; break;
    case O_JSON: json = true; break;
    case O_SANDBOX:
      if (!al__cli_sandbox_policy(optarg, &sandbox)) {
        fprintf(stderr, "agentloop tools: --sandbox: auto, required or "
                        "none, not '%s'\n", optarg);
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    default:
      fprintf(stderr, "agentloop tools: bad option '%s' (try --help)\n",
              argv[optind - 1]);
      return 2;
    }
  }
  dirs[ndirs] = NULL;
  if (realpath(cwd, real) == NULL) {
    fprintf(stderr, "agentloop tools: --cwd %s: %s\n", cwd, strerror(errno));
    return 2;
  }
  cwd = real;
  if (trust) {
    rc = al__tools_trust_project(cwd, &tr);
    if (rc != 0) {
      fprintf(stderr, "agentloop tools: cannot record trust for %s: %s\n",
              cwd,
              rc == AL_ETOOBIG
                  ? "tools.d/ or .agentloop/ holds over " AL_TRUST_LIMITS_TEXT
                  : rc < 0 && rc > -4096 ? strerror(-rc) : al_strerror(rc));
      al__project_trust_free(&tr);
      return 2;
    }
  } else {
    (void)al__tools_project_trust(cwd, &tr);
  }
  uv_loop_init(&loop);
  al_agent_options_init(&o);
  o.workspace = cwd;
  o.builtin_tools = true;
  o.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  o.sandbox = sandbox;
  o.tools_d = true;
  o.tools_dirs = dirs;
  /* Decided above: the agent need not hash the project again. */
  o.trust_project = tr.state == AL_TRUST_TRUSTED;
  rc = al_agent_new(&loop, &o, &agent);
  if (rc != 0) {
    fprintf(stderr, "agentloop tools: cannot create the agent: %s\n",
            al_strerror(rc));
    uv_loop_close(&loop);
    return 2;
  }
  rc = al_agent_tools_json(agent, &text);
  al_agent_close(agent, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (rc != 0) {
    fprintf(stderr, "agentloop tools: %s\n", al_strerror(rc));
    al__project_trust_free(&tr);
    return 2;
  }
  obj = json_loads(text, 0, NULL);
  al_free(text);
  if (obj == NULL) {
    al__project_trust_free(&tr);
    return 2;
  }
  json_object_set_new(obj, "project_trust", trust_json(&tr, trust));
  al__project_trust_free(&tr);
  if (json) {
    text = json_dumps(obj, JSON_COMPACT);
    printf("%s\n", text != NULL ? text : "{}");
    al_free(text);
  } else {
    print_text(obj);
  }
  json_decref(obj);
  return 0;
}
