/* `agentloop config show [--origin] [--json]`: the effective configuration
 * (docs/config.md) of a run in this workspace, and where each value came
 * from: a file with its line and column, an environment variable, a flag
 * or the default. The API key is shown masked, with the variable it was
 * read from. Start-up work only: blocking file reads are fine here.
 *
 *   --cwd DIR         the workspace whose .agentloop/config.yaml counts
 *   --trust-project   read the project file although it is not trusted
 *
 * Exit status: 0, or 2 with every FILE:LINE:COL error on stderr. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentloop/sandbox.h"
#include "client/cli.h"
#include "common/common.h"
#include "config/config.h"
#include "tools/clitool.h"

static void usage(FILE *f) {
  fputs("usage: agentloop config show [--origin] [--json] [--cwd DIR]\n"
        "                             [--trust-project]\n"
        "\n"
        "Prints the effective configuration: the user file\n"
        "($XDG_CONFIG_HOME/agentloop/config.yaml), the project file\n"
        "(.agentloop/config.yaml, when the project is trusted), the\n"
        "environment and the defaults, highest first: flags > environment >\n"
        "project > user > defaults. --origin says where each value came\n"
        "from. Secrets are masked.\n",
        f);
}

static const char *env_get(const char *name) {
  const char *v = al_sandbox_getenv(name);

  return v != NULL && v[0] != '\0' ? v : NULL;
}

int al__cli_config_load(al_config_t *cfg, const char *cwd, bool trust,
                        const char *who) {
  return al__cli_config_load_for(cfg, cwd, trust, NULL, who);
}

int al__cli_config_load_for(al_config_t *cfg, const char *cwd, bool trust,
                            const char *provider_flag, const char *who) {
  char here[PATH_MAX];
  const char *ws = cwd;
  al_project_trust_t tr;
  bool trusted = trust;

  if (ws == NULL) {
    ws = getcwd(here, sizeof(here)) != NULL ? here : NULL;
  }
  al_config_init(cfg);
  cfg->provider_hint = provider_flag;
  if (!trust && ws != NULL) {
    /* Every run reads its configuration here first: the one place to say
     * that the project's approved files changed (src/tools/trust.c). */
    (void)al__tools_project_trust(ws, &tr);
    trusted = tr.state == AL_TRUST_TRUSTED;
    if (tr.state == AL_TRUST_CHANGED || tr.state == AL_TRUST_UNBOUND) {
      fprintf(stderr,
              "%s: note: %s: %s; its tools.d/, .agentloop/ and .mcp.json "
              "are not used until `agentloop tools --trust-project` "
              "approves them again (it lists the changes):\n",
              who, tr.real,
              tr.state == AL_TRUST_CHANGED
                  ? "files changed since you trusted this project"
                  : "this project was trusted before trust was bound to "
                    "its files' content");
      {
        const char *p = tr.changes.data;

        while (p != NULL && *p != '\0') {
          const char *e = strchr(p, '\n');
          size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

          fprintf(stderr, "%s:   %.*s\n", who, (int)n, p);
          p = e != NULL ? e + 1 : NULL;
        }
      }
    }
    if (tr.state == AL_TRUST_UNREADABLE) {
      fprintf(stderr,
              "%s: note: %s: the project's tools.d/ and .agentloop/ could "
              "not be read whole (over " AL_TRUST_LIMITS_TEXT ", "
              "or unreadable): it is not trusted\n",
              who, tr.real);
    }
    al__project_trust_free(&tr);
  }
  if (al_config_load(cfg, ws, trusted, env_get) != 0) {
    fprintf(stderr, "%s: out of memory reading the configuration\n", who);
    return 1;
  }
  if (cfg->n_errors > 0) {
    const char *p = cfg->errors.data;

    while (p != NULL && *p != '\0') {
      const char *e = strchr(p, '\n');
      size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

      fprintf(stderr, "%s: %.*s\n", who, (int)n, p);
      p = e != NULL ? e + 1 : NULL;
    }
    return 2;
  }
  if (cfg->project_untrusted) {
    fprintf(stderr, "%s: note: %s was not read: this project is not "
                    "trusted (`agentloop tools --trust-project`)\n",
            who, cfg->project_file);
  }
  return 0;
}

int al_cli_config(int argc, char **argv) {
  enum { O_ORIGIN = 256, O_JSON, O_CWD, O_TRUST };
  static const struct option longopts[] = {
      {"origin", no_argument, NULL, O_ORIGIN},
      {"json", no_argument, NULL, O_JSON},
      {"cwd", required_argument, NULL, O_CWD},
      {"trust-project", no_argument, NULL, O_TRUST},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  bool origin = false, json = false, trust = false;
  const char *cwd = NULL;
  al_config_t cfg;
  int c;
  int code;

  if (argc < 2 || strcmp(argv[1], "show") != 0) {
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "--help") == 0)) {
      usage(stdout);
      return 0;
    }
    usage(stderr);
    return 2;
  }
  argc--;
  argv++;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_ORIGIN: origin = true; break;
    case O_JSON: json = true; break;
    case O_CWD: cwd = optarg; break;
    case O_TRUST: trust = true; break;
    case 'h': usage(stdout); return 0;
    default:
      fprintf(stderr, "agentloop config: unknown option '%s'\n",
              argv[optind - 1]);
      return 2;
    }
  }
  code = al__cli_config_load(&cfg, cwd, trust, "agentloop config");
  if (code == 0) {
    if (json) {
      json_t *j = al_config_to_json(&cfg, origin, env_get);
      char *s = j != NULL ? json_dumps(j, JSON_INDENT(2)) : NULL;

      if (s != NULL) {
        puts(s);
      }
      al_free(s);
      json_decref(j);
    } else {
      al_buf_t out;

      al_buf_init(&out, 16 * 1024 * 1024);
      printf("# user file: %s (%s)\n",
             cfg.user_file != NULL ? cfg.user_file : "(no config dir)",
             cfg.user_loaded ? "read" : "absent");
      if (cfg.project_file != NULL) {
        printf("# project file: %s (%s)\n", cfg.project_file,
               cfg.project_loaded      ? "read"
               : cfg.project_untrusted ? "not trusted: not read"
                                       : "absent");
      }
      if (al_config_show(&cfg, origin, env_get, &out) == 0 &&
          out.data != NULL) {
        fputs(out.data, stdout);
      }
      al_buf_free(&out);
    }
  }
  al_config_free(&cfg);
  return code;
}
