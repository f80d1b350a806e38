/* Slash commands of the chat (CONVENTIONS.md 7.2). A line that starts with
 * '/' is a command and is never sent to the model, even when it is not
 * one we know ("unknown command, try /help"); "//text" sends "/text". */
#include <ctype.h>
#include <string.h>

#include "client/tui.h"

typedef struct {
  const char *name;
  al_slash_t cmd;
  int args; /* 0: none, 1: exactly one, 2: optional one, 3: optional text,
             * 4: text, required */
} slash_def_t;

static const slash_def_t defs[] = {
    {"help", AL_SLASH_HELP, 0},       {"?", AL_SLASH_HELP, 0},
    {"new", AL_SLASH_NEW, 0},         {"clear", AL_SLASH_NEW, 0},
    {"sessions", AL_SLASH_SESSIONS, 0}, {"resume", AL_SLASH_RESUME, 3},
    {"compact", AL_SLASH_COMPACT, 3}, {"usage", AL_SLASH_USAGE, 0},
    {"cost", AL_SLASH_USAGE, 0},      {"tools", AL_SLASH_TOOLS, 0},
    {"last", AL_SLASH_LAST, 0},       {"model", AL_SLASH_MODEL, 1},
    {"tasks", AL_SLASH_TASKS, 3},     {"rename", AL_SLASH_RENAME, 4},
    {"quit", AL_SLASH_QUIT, 0},       {"exit", AL_SLASH_QUIT, 0},
};

/* The canonical name of each command (the first def for it). */
static const char *canonical(al_slash_t cmd) {
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(defs); i++) {
    if (defs[i].cmd == cmd) {
      return defs[i].name;
    }
  }
  return NULL;
}

void al__slash_parse(const char *line, al_slash_cmd_t *out) {
  const char *p = line;
  const char *name;
  size_t name_len;
  const char *arg;
  size_t arg_len;
  size_t i;

  memset(out, 0, sizeof(*out));
  while (*p == ' ' || *p == '\t') {
    p++;
  }
  if (p[0] != '/' || p[1] == '/') {
    out->cmd = AL_SLASH_NONE;
    return;
  }
  name = p + 1;
  name_len = strcspn(name, " \t");
  arg = name + name_len;
  while (*arg == ' ' || *arg == '\t') {
    arg++;
  }
  arg_len = strlen(arg);
  while (arg_len > 0 && isspace((unsigned char)arg[arg_len - 1])) {
    arg_len--;
  }
  for (i = 0; i < AL_ARRAY_SIZE(defs); i++) {
    const slash_def_t *d = &defs[i];

    if (strlen(d->name) != name_len || strncmp(d->name, name, name_len)) {
      continue;
    }
    out->cmd = d->cmd;
    out->name = canonical(d->cmd);
    if (d->args == 0 && arg_len > 0) {
      out->cmd = AL_SLASH_BAD_ARGS;
      snprintf(out->error, sizeof(out->error), "/%s takes no arguments",
               out->name);
      return;
    }
    if ((d->args == 1 || d->args == 4) && arg_len == 0) {
      out->cmd = AL_SLASH_BAD_ARGS;
      snprintf(out->error, sizeof(out->error), "/%s needs an argument",
               out->name);
      return;
    }
    if (arg_len >= sizeof(out->arg) ||
        (d->args < 3 && memchr(arg, ' ', arg_len) != NULL)) {
      out->cmd = AL_SLASH_BAD_ARGS;
      snprintf(out->error, sizeof(out->error), "/%s: one short argument",
               out->name);
      return;
    }
    memcpy(out->arg, arg, arg_len);
    out->arg[arg_len] = '\0';
    if (d->cmd == AL_SLASH_TASKS && arg_len > 0 &&
        (strncmp(out->arg, "cancel ", 7) != 0 ||
         out->arg[7 + strspn(out->arg + 7, " \t")] == '\0' ||
         strpbrk(out->arg + 7 + strspn(out->arg + 7, " \t"), " \t") !=
             NULL)) {
      out->cmd = AL_SLASH_BAD_ARGS;
      snprintf(out->error, sizeof(out->error),
               "/tasks takes nothing, or cancel ID");
    }
    return;
  }
  out->cmd = AL_SLASH_UNKNOWN;
  snprintf(out->error, sizeof(out->error),
           "unknown command /%.*s, try /help",
           (int)AL_MIN(name_len, (size_t)64), name);
}

const char *al__slash_help(void) {
  return "commands:\n"
         "  /help              this list\n"
         "  /new               start a new session (alias /clear)\n"
         "  /sessions          list the daemon's sessions\n"
         "  /resume [ID|NAME]  continue a session (none: the latest; NAME: a\n"
         "                     title /rename gave)\n"
         "  /rename TITLE      title this session (shown by /sessions)\n"
         "  /compact [TEXT]    summarize the history to free context (TEXT: what\n"
         "                     the summary must keep)\n"
         "  /usage             tokens used by this session (alias /cost)\n"
         "  /tools             the tools the model may call\n"
         "  /last              the full output of the last tool call\n"
         "  /model NAME        use model NAME from the next turn on\n"
         "  /tasks             the session's sub-agents (also during a run)\n"
         "  /tasks cancel ID   stop sub-agent ID, its children and tools\n"
         "  /quit              leave; the session stays (alias /exit)\n"
         "keys: Enter sends, Ctrl-C cancels a running turn or clears the\n"
         "line, twice (or Ctrl-D on an empty line) quits; Up/Down history.\n"
         "A line ending in \\ continues on the next; a line starting with\n"
         "// sends a literal '/'.\n";
}
