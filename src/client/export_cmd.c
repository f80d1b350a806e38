/* agentloop export ID|NAME --format md|jsonl [--out FILE] (docs/export.md):
 * reads the transcript in the state directory; no daemon is needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli.h"
#include "client/export.h"
#include "client/tui.h"

static void export_usage(FILE *f) {
  fputs(
      "usage: agentloop export ID|NAME --format md|jsonl [--out FILE]\n"
      "\n"
      "  a session's transcript (and its sub-agents') as Markdown or as\n"
      "  JSONL (one message a line), API keys, Authorization and\n"
      "  x-api-key header values and bearer tokens redacted; NAME is a\n"
      "  title given by /rename (docs/export.md)\n",
      f);
}

int al_cli_export(int argc, char **argv) {
  const char *arg = NULL;
  const char *format = NULL;
  const char *out_path = NULL;
  const char *keys[2];
  al_export_opts_t o;
  char state[4096];
  char dir[4200];
  char id[128];
  char why[1024];
  bool broken = false;
  FILE *out;
  int rc;

  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      export_usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
      format = argv[++i];
    } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (argv[i][0] != '-' && arg == NULL) {
      arg = argv[i];
    } else {
      export_usage(stderr);
      return 2;
    }
  }
  if (arg == NULL || format == NULL ||
      (strcmp(format, "md") != 0 && strcmp(format, "jsonl") != 0)) {
    export_usage(stderr);
    return 2;
  }
  if (!al__tui_state_dir(state, sizeof(state))) {
    fprintf(stderr, "agentloop export: no state directory\n");
    return 1;
  }
  snprintf(dir, sizeof(dir), "%s/sessions", state);
  if (al__export_find(dir, arg, id, sizeof(id), why, sizeof(why)) !=
      AL_PICK_FOUND) {
    fprintf(stderr, "agentloop export: %s\n", why);
    return 1;
  }
  memset(&o, 0, sizeof(o));
  o.md = strcmp(format, "md") == 0;
  /* The keys this shell would use, whatever their shape. */
  keys[0] = getenv("ANTHROPIC_API_KEY");
  keys[1] = getenv("OPENAI_API_KEY");
  o.keys = keys;
  o.nkeys = 2;
  out = out_path != NULL ? fopen(out_path, "we") : stdout;
  if (out == NULL) {
    perror(out_path);
    return 1;
  }
  rc = al__export_session(dir, id, &o, out, &broken, why, sizeof(why));
  if ((out != stdout ? fclose(out) : fflush(out)) != 0 && rc == 0) {
    perror(out_path != NULL ? out_path : "stdout");
    return 1;
  }
  if (rc != 0) {
    fprintf(stderr, "agentloop export: %s\n", why);
    return 1;
  }
  /* The export is written, but not all of the transcript was trusted. */
  return broken ? 3 : 0;
}
