/* `agentloop agents`: the agents a `task` call of a session started here
 * could start (docs/subagents.md): the built-ins (the loop's,
 * al_subagent_builtins) unless a file replaces one, then the user's and a
 * trusted project's definition files, with where each came from, its
 * tools and model, and every note the loader made (FILE:LINE:COL).
 * Start-up work only: blocking file reads are fine here.
 *
 *   --json            one object {agents: [...], notes: [...]}
 *   --cwd DIR         the workspace whose .agentloop/agents count
 *   --trust-project   read the project's agents although it is not trusted
 *
 * Exit status (CONVENTIONS.md 7.5): 0; 2 when a file has an error (it
 * was skipped: a session would not have that agent) or config.yaml does. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "agentloop/agent.h"
#include "client/cli.h"
#include "common/common.h"
#include "config/agentdefs.h"
#include "config/config.h"

static const char *const k_levels[] = {"info", "warning", "error"};

int al__cli_agents_load(const al_config_t *cfg, const char *cwd, bool trust,
                        bool verbose, const char *who, al_agentdefs_t **out) {
  al_agentdefs_options_t ao;
  size_t i;
  int rc;

  al_agentdefs_options_init(&ao);
  ao.workspace = cwd != NULL ? cwd : ".";
  ao.project_trusted = trust || cfg->project_trusted;
  if ((rc = al_config_agents_load(&ao, out)) != 0) {
    fprintf(stderr, "%s: out of memory reading the agent definitions\n", who);
    return rc;
  }
  for (i = 0; i < (*out)->n_notes; i++) {
    const al_agentdefs_note_t *n = &(*out)->notes[i];

    if (n->level != AL_AGENTDEFS_INFO || verbose) {
      fprintf(stderr, "%s: %s: %s\n", who, k_levels[n->level], n->text);
    }
  }
  return 0;
}

static const char *mode_name(int m) {
  switch (m) {
    case AL_PERMISSION_MODE_INTERACTIVE:
      return "interactive";
    case AL_PERMISSION_MODE_HEADLESS:
      return "headless";
    case AL_PERMISSION_MODE_JOB:
      return "job";
    default:
      return "inherit";
  }
}

static json_t *list_json(const char *const *l) {
  json_t *a;
  size_t i;

  if (l == NULL) {
    return json_null();
  }
  a = json_array();
  for (i = 0; a != NULL && l[i] != NULL; i++) {
    json_array_append_new(a, json_string(l[i]));
  }
  return a;
}

/* One agent: text line(s) into stdout, or an object into arr. */
static void show(const al_subagent_def_t *s, json_t *arr) {
  size_t i;

  if (arr != NULL) {
    json_array_append_new(
        arr,
        json_pack("{s:s, s:s, s:s, s:o, s:o, s:s?, s:s, s:i}", "name", s->name,
                  "description", s->description != NULL ? s->description : "",
                  "source", s->source != NULL ? s->source : "", "tools",
                  list_json(s->tools), "disallowed_tools",
                  list_json(s->disallowed_tools), "model", s->model,
                  "permission_mode", mode_name(s->permission_mode), "max_turns",
                  (json_int_t)s->max_turns));
    return;
  }
  printf("%s  (%s)\n  %s\n  tools: ", s->name,
         s->source != NULL ? s->source : "", s->description);
  if (s->tools == NULL) {
    printf("all of the parent's");
  } else if (s->tools[0] == NULL) {
    printf("none");
  }
  for (i = 0; s->tools != NULL && s->tools[i] != NULL; i++) {
    printf("%s%s", i > 0 ? ", " : "", s->tools[i]);
  }
  for (i = 0; s->disallowed_tools != NULL && s->disallowed_tools[i] != NULL;
       i++) {
    printf("%s%s", i == 0 ? "; not: " : ", ", s->disallowed_tools[i]);
  }
  printf("\n  model: %s", s->model != NULL ? s->model : "the parent's");
  if (s->permission_mode != -1) {
    printf("; permission mode: %s", mode_name(s->permission_mode));
  }
  if (s->max_turns > 0) {
    printf("; max turns: %u", s->max_turns);
  }
  putchar('\n');
}

static void usage(FILE *f) {
  fputs(
      "usage: agentloop agents [--json] [--cwd DIR] [--trust-project]\n"
      "\n"
      "Lists the agents a `task` call could start in a session begun in\n"
      "this directory: the built-ins explore and general (unless a file\n"
      "of that name replaces one), then the definition files of\n"
      "~/.claude/agents, $XDG_CONFIG_HOME/agentloop/agents and, in a\n"
      "trusted project, .claude/agents and .agentloop/agents; each with\n"
      "its source, tools and model, and the problems found in the files\n"
      "(FILE:LINE:COL). Exit status 2 when a file has an error.\n",
      f);
}

int al_cli_agents(int argc, char **argv) {
  enum { O_JSON = 256, O_CWD, O_TRUST };
  static const struct option longopts[] = {
      {"json", no_argument, NULL, O_JSON},
      {"cwd", required_argument, NULL, O_CWD},
      {"trust-project", no_argument, NULL, O_TRUST},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *who = "agentloop agents";
  bool json = false, trust = false;
  const char *cwd = NULL;
  al_config_t cfg;
  al_agentdefs_t *d = NULL;
  const al_subagent_def_t *b;
  json_t *arr = NULL;
  size_t nb, i;
  int c, code;

  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
      case O_JSON:
        json = true;
        break;
      case O_CWD:
        cwd = optarg;
        break;
      case O_TRUST:
        trust = true;
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        fprintf(stderr, "%s: unknown option '%s'\n", who, argv[optind - 1]);
        return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", who, argv[optind]);
    return 2;
  }
  if ((code = al__cli_config_load(&cfg, cwd, trust, who)) != 0) {
    al_config_free(&cfg);
    return code;
  }
  /* The notes on stderr in text mode (info too: this is the place to see
   * which file replaced which); in the JSON object otherwise. */
  if (json) {
    al_agentdefs_options_t ao;

    al_agentdefs_options_init(&ao);
    ao.workspace = cwd != NULL ? cwd : ".";
    ao.project_trusted = trust || cfg.project_trusted;
    code = al_config_agents_load(&ao, &d) != 0 ? 1 : 0;
  } else {
    code = al__cli_agents_load(&cfg, cwd, trust, true, who, &d) != 0 ? 1 : 0;
  }
  if (code != 0) {
    al_config_free(&cfg);
    return code;
  }
  arr = json ? json_array() : NULL;
  b = al_subagent_builtins(&nb);
  /* The task tool's order: explore, general (or the files replacing
   * them), then the others (the loader keeps those names first). */
  for (i = 0; i < nb; i++) {
    if (al_agentdefs_find(d, b[i].name) == NULL) {
      show(&b[i], arr);
    } else {
      show(al_agentdefs_find(d, b[i].name), arr);
    }
  }
  for (i = 0; i < d->n; i++) {
    size_t k;

    for (k = 0; k < nb && strcmp(d->defs[i].name, b[k].name) != 0; k++) {
    }
    if (k == nb) {
      show(&d->defs[i], arr);
    }
  }
  if (json) {
    json_t *notes = json_array();
    json_t *o;
    char *s;

    for (i = 0; notes != NULL && i < d->n_notes; i++) {
      json_array_append_new(
          notes, json_pack("{s:s, s:s}", "level", k_levels[d->notes[i].level],
                           "text", d->notes[i].text));
    }
    o = json_pack("{s:o, s:o}", "agents", arr, "notes", notes);
    s = o != NULL ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (s != NULL) {
      puts(s);
    }
    al_free(s);
    json_decref(o);
  }
  code = d->n_errors > 0 ? 2 : 0;
  al_agentdefs_free(d);
  al_config_free(&cfg);
  return code;
}
