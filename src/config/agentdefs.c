/* Agent definitions: the Markdown files with YAML front matter that name
 * the agents a `task` call may start (agentdefs.h says where they are
 * read from and in which order; docs/subagents.md is the user's view).
 *
 * A file is "---", YAML, "---", then the body, the agent's system prompt.
 * The YAML handed to al_yaml_load is the file's text up to the closing
 * line, opening "---" included (a document start marker to libyaml), so
 * every position libyaml gives is the file's own line and column.
 *
 * Invariants: d->defs is always in listing order (explore, general, then
 * by name) and owns every string it points to (the const in the public
 * struct is for the agent, which only borrows); a file with an error
 * changes nothing in d but its note. Nothing here touches the loop but
 * the pool request at the end. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/utf8.h"
#include "common/yamlnode.h"
#include "config/agentdefs.h"
#include "config/config.h"

/* ---- Claude Code's tool names
 * ------------------------------------------------ */

/* Claude Code's built-in tools (its docs' "Tools available to Claude")
 * and ours. A name not in the table is taken as one of ours (tools.d,
 * MCP's mcp__server__tool, which Claude Code spells the same way). */
const al_claude_tool_t al_claude_tools[] = {
    {"Read", "read_file"},     {"Write", "write_file"},
    {"Edit", "edit_file"},     {"MultiEdit", "edit_file"},
    {"Bash", "bash"},          {"Glob", "glob"},
    {"Grep", "grep"},          {"LS", "list_directory"},
    {"Task", "task"},          {"Agent", "task"},
    {"WebFetch", NULL},        {"WebSearch", NULL},
    {"TodoWrite", NULL},       {"TodoRead", NULL},
    {"NotebookRead", NULL},    {"NotebookEdit", NULL},
    {"BashOutput", NULL},      {"KillShell", NULL},
    {"KillBash", NULL},        {"SlashCommand", NULL},
    {"Skill", NULL},           {"ExitPlanMode", NULL},
    {"AskUserQuestion", NULL}, {NULL, NULL},
};

const al_claude_tool_t *al_claude_tool_find(const char *claude) {
  const al_claude_tool_t *t;

  for (t = al_claude_tools; t->claude != NULL; t++) {
    if (strcmp(t->claude, claude) == 0) {
      return t;
    }
  }
  return NULL;
}

/* ---- the set
 * -------------------------------------------------------------------- */

void al_agentdefs_options_init(al_agentdefs_options_t *o) {
  memset(o, 0, sizeof(*o));
}

static void list_free(const char *const *l) {
  size_t i;

  if (l == NULL) {
    return;
  }
  for (i = 0; l[i] != NULL; i++) {
    al_free((char *)l[i]);
  }
  al_free((void *)l);
}

static void def_free(al_subagent_def_t *s) {
  al_free((char *)s->name);
  al_free((char *)s->description);
  al_free((char *)s->system);
  al_free((char *)s->model);
  list_free(s->tools);
  list_free(s->disallowed_tools);
  al_free((char *)s->source);
  memset(s, 0, sizeof(*s));
}

void al_agentdefs_free(al_agentdefs_t *d) {
  size_t i;

  if (d == NULL) {
    return;
  }
  for (i = 0; i < d->n; i++) {
    def_free(&d->defs[i]);
  }
  for (i = 0; i < d->n_notes; i++) {
    al_free(d->notes[i].text);
  }
  al_free(d->defs);
  al_free(d->notes);
  al_free(d);
}

/* Listing order: the built-ins' names first (a file replacing one
 * stands in its place), then by name. The built-ins themselves are the
 * loop's (al_subagent_builtins): this loader reads files only. */
static int rank(const char *name) {
  size_t i, n;
  const al_subagent_def_t *b = al_subagent_builtins(&n);

  for (i = 0; i < n; i++) {
    if (strcmp(name, b[i].name) == 0) {
      return (int)i;
    }
  }
  return (int)n;
}

static bool is_builtin_name(const char *name) {
  size_t n;

  (void)al_subagent_builtins(&n);
  return rank(name) < (int)n;
}

static int order(const char *a, const char *b) {
  int ra = rank(a), rb = rank(b);

  if (ra != rb) {
    return ra < rb ? -1 : 1;
  }
  return strcmp(a, b);
}

/* Puts s (taken) at its place. A definition of its name already there
 * is moved to *old (the caller's to free; old->name NULL: none). AL_ENOMEM
 * with s freed. */
static int insert(al_agentdefs_t *d, al_subagent_def_t *s,
                  al_subagent_def_t *old) {
  size_t i;
  al_subagent_def_t *nd;

  memset(old, 0, sizeof(*old));
  for (i = 0; i < d->n; i++) {
    int c = order(s->name, d->defs[i].name);

    if (c == 0) {
      *old = d->defs[i];
      d->defs[i] = *s;
      return 0;
    }
    if (c < 0) {
      break;
    }
  }
  nd = al_realloc(d->defs, (d->n + 1) * sizeof(*nd));
  if (nd == NULL) {
    def_free(s);
    return AL_ENOMEM;
  }
  d->defs = nd;
  memmove(&nd[i + 1], &nd[i], (d->n - i) * sizeof(*nd));
  nd[i] = *s;
  d->n++;
  return 0;
}

static int add_note_v(al_agentdefs_t *d, al_agentdefs_level_t lv,
                      const char *fmt, va_list ap) {
  al_agentdefs_note_t *nn;
  char text[4096];
  char *t;

  vsnprintf(text, sizeof(text), fmt, ap);
  if ((t = al_strdup(text)) == NULL) {
    return AL_ENOMEM;
  }
  nn = al_realloc(d->notes, (d->n_notes + 1) * sizeof(*nn));
  if (nn == NULL) {
    al_free(t);
    return AL_ENOMEM;
  }
  d->notes = nn;
  nn[d->n_notes].level = lv;
  nn[d->n_notes].text = t;
  d->n_notes++;
  if (lv == AL_AGENTDEFS_ERROR) {
    d->n_errors++;
  }
  return 0;
}

static int add_note(al_agentdefs_t *d, al_agentdefs_level_t lv, const char *fmt,
                    ...) __attribute__((format(printf, 3, 4)));
static int add_note(al_agentdefs_t *d, al_agentdefs_level_t lv, const char *fmt,
                    ...) {
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = add_note_v(d, lv, fmt, ap);
  va_end(ap);
  return rc;
}

int al_agentdefs_new(al_agentdefs_t **out) {
  *out = al_calloc(1, sizeof(**out));
  return *out != NULL ? 0 : AL_ENOMEM;
}

const al_subagent_def_t *al_agentdefs_find(const al_agentdefs_t *d,
                                           const char *name) {
  size_t i;

  for (i = 0; i < d->n; i++) {
    if (strcmp(d->defs[i].name, name) == 0) {
      return &d->defs[i];
    }
  }
  return NULL;
}

int al_agentdefs_notes_text(const al_agentdefs_t *d, al_buf_t *out) {
  static const char *const lv[] = {"info", "warning", "error"};
  size_t i;
  int rc;

  for (i = 0; i < d->n_notes; i++) {
    if ((rc = al_buf_printf(out, "%s: %s\n", lv[d->notes[i].level],
                            d->notes[i].text)) != 0) {
      return rc;
    }
  }
  return 0;
}

/* ---- one file
 * ------------------------------------------------------------------ */

/* The fields, each a bit of pctx_t.seen so a key given twice is said. */
enum {
  F_NAME = 1 << 0,
  F_DESC = 1 << 1,
  F_TOOLS = 1 << 2,
  F_DENY = 1 << 3,
  F_MODEL = 1 << 4,
  F_PERM = 1 << 5,
  F_TURNS = 1 << 6
};

typedef struct pctx_s {
  al_agentdefs_t *d;
  const char *path;
  yaml_document_t *doc;
  bool failed; /* an error: the file is skipped */
  bool nomem;
  unsigned seen;
  al_subagent_def_t s;
  const yaml_node_t *name_node;
} pctx_t;

static void note_at(pctx_t *p, al_agentdefs_level_t lv, const yaml_node_t *n,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void note_at(pctx_t *p, al_agentdefs_level_t lv, const yaml_node_t *n,
                    const char *fmt, ...) {
  char msg[2048];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (add_note(p->d, lv, "%s:%d:%d: %s", p->path,
               n != NULL ? (int)n->start_mark.line + 1 : 1,
               n != NULL ? (int)n->start_mark.column + 1 : 1, msg) != 0) {
    p->nomem = true;
  }
  if (lv == AL_AGENTDEFS_ERROR) {
    p->failed = true;
  }
}

static yaml_node_t *node(pctx_t *p, int id) {
  return yaml_document_get_node(p->doc, id);
}

/* A string value (al_malloc'd) or NULL with an error said. */
static char *string_value(pctx_t *p, const char *key, const yaml_node_t *v) {
  const char *why = al_yaml_string_problem(v);
  char *s;

  if (why != NULL) {
    note_at(p, AL_AGENTDEFS_ERROR, v, "'%s' %s", key, why);
    return NULL;
  }
  if ((s = al_strdup(al_yaml_scalar(v))) == NULL) {
    p->nomem = true;
  }
  return s;
}

/* `tools: ` with nothing, or null: as if not given. */
static bool is_null(const yaml_node_t *v) {
  const char *t;

  if (!al_yaml_is_scalar(v) || !al_yaml_plain(v)) {
    return false;
  }
  t = al_yaml_scalar(v);
  return t[0] == '\0' || strcmp(t, "~") == 0 || strcmp(t, "null") == 0;
}

/* One line: whitespace runs (newlines too) become one space, trimmed. */
static void one_line(char *s) {
  char *w = s;
  const char *r = s;
  bool space = false;

  while (*r == ' ' || *r == '\t' || *r == '\r' || *r == '\n') {
    r++;
  }
  for (; *r != '\0'; r++) {
    if (*r == ' ' || *r == '\t' || *r == '\r' || *r == '\n') {
      space = true;
      continue;
    }
    if (space) {
      *w++ = ' ';
      space = false;
    }
    *w++ = *r;
  }
  *w = '\0';
}

static bool tool_name_ok(const char *s, size_t n) {
  size_t i;

  if (n == 0 || n > 64) {
    return false;
  }
  for (i = 0; i < n; i++) {
    char c = s[i];

    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

/* Appends our name for the tool `item` (len n) to *list, or says why it
 * is dropped. deny: a disallowed list, where a rule with a pattern
 * ("Bash(rm:*)") disallows the whole tool (stricter), where an allowlist
 * drops it (stricter too). */
static void add_tool(pctx_t *p, const yaml_node_t *at, const char *key,
                     const char *item, size_t n, bool deny, char ***list,
                     size_t *count) {
  char name[128];
  const char *ours = name;
  const char *paren = memchr(item, '(', n);
  const al_claude_tool_t *row;
  char **nl;
  size_t i;

  if (paren != NULL) {
    size_t base = (size_t)(paren - item);

    if (!deny) {
      note_at(p, AL_AGENTDEFS_WARNING, at,
              "'%s': '%.*s' is a rule with a pattern, which an agent's "
              "list does not take; dropped",
              key, (int)n, item);
      return;
    }
    note_at(p, AL_AGENTDEFS_WARNING, at,
            "'%s': '%.*s' is a rule with a pattern; the whole tool is "
            "disallowed",
            key, (int)n, item);
    n = base;
    while (n > 0 && item[n - 1] == ' ') {
      n--;
    }
  }
  if (n == 0 || n >= sizeof(name)) {
    note_at(p, AL_AGENTDEFS_WARNING, at,
            "'%s': '%.*s' is not a tool name; "
            "dropped",
            key, (int)(n < 200 ? n : 200), item);
    return;
  }
  memcpy(name, item, n);
  name[n] = '\0';
  if ((row = al_claude_tool_find(name)) != NULL) {
    if (row->ours == NULL) {
      note_at(p, AL_AGENTDEFS_WARNING, at,
              "'%s': Claude Code's tool '%s' has no equivalent here; "
              "dropped",
              key, name);
      return;
    }
    ours = row->ours;
  } else if (!tool_name_ok(name, n)) {
    note_at(p, AL_AGENTDEFS_WARNING, at,
            "'%s': '%s' is not a tool name; dropped", key, name);
    return;
  }
  for (i = 0; i < *count; i++) {
    if (strcmp((*list)[i], ours) == 0) {
      return; /* Edit and MultiEdit are both edit_file */
    }
  }
  nl = al_realloc(*list, (*count + 2) * sizeof(*nl));
  if (nl == NULL) {
    p->nomem = true;
    return;
  }
  *list = nl;
  if ((nl[*count] = al_strdup(ours)) == NULL) {
    p->nomem = true;
    nl[*count] = NULL;
    return;
  }
  (*count)++;
  nl[*count] = NULL;
}

/* A YAML list of names or Claude Code's "Read, Grep, Glob". */
static void tools_value(pctx_t *p, const char *key, const yaml_node_t *v,
                        bool deny, const char *const **out) {
  char **list = al_calloc(1, sizeof(*list));
  size_t count = 0, named = 0;

  if (list == NULL) {
    p->nomem = true;
    return;
  }
  if (v->type == YAML_SEQUENCE_NODE) {
    yaml_node_item_t *it;

    for (it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
      const yaml_node_t *e = node(p, *it);
      const char *why = al_yaml_string_problem(e);
      const char *t;
      size_t n;

      if (why != NULL) {
        note_at(p, AL_AGENTDEFS_ERROR, e, "'%s': each tool %s", key, why);
        continue;
      }
      t = al_yaml_scalar(e);
      n = strlen(t);
      while (n > 0 && (*t == ' ' || *t == '\t')) {
        t++;
        n--;
      }
      while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == '\t')) {
        n--;
      }
      named++;
      add_tool(p, e, key, t, n, deny, &list, &count);
    }
  } else if (al_yaml_string_problem(v) == NULL) {
    const char *t = al_yaml_scalar(v);

    while (*t != '\0') {
      size_t n = strcspn(t, ",");
      size_t a = 0, b = n;

      while (a < b && (t[a] == ' ' || t[a] == '\t')) {
        a++;
      }
      while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t')) {
        b--;
      }
      if (b > a) {
        named++;
        add_tool(p, v, key, t + a, b - a, deny, &list, &count);
      }
      t += n;
      if (*t == ',') {
        t++;
      }
    }
  } else {
    note_at(p, AL_AGENTDEFS_ERROR, v,
            "'%s' must be a list of tool names or a string "
            "\"Read, Grep\"",
            key);
  }
  if (!deny && named > 0 && count == 0 && !p->failed) {
    /* An empty allowlist is no tools at all, which `tools: []` says on
     * purpose; here it is what the drops left. */
    note_at(p, AL_AGENTDEFS_WARNING, v,
            "'%s': no tool named is one here; the agent gets no tools", key);
  }
  *out = (const char *const *)list;
}

static bool name_ok(const char *s) {
  size_t n = strlen(s), i;

  if (n == 0 || n > 64) {
    return false;
  }
  for (i = 0; i < n; i++) {
    char c = s[i];

    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-')) {
      return false;
    }
  }
  return true;
}

static void name_value(pctx_t *p, const yaml_node_t *v) {
  char *s = string_value(p, "name", v);
  char *c;
  bool changed = false;

  if (s == NULL) {
    return;
  }
  /* Claude Code's "Code Reviewer": lower case, spaces as '-'. */
  for (c = s; *c != '\0'; c++) {
    if (*c >= 'A' && *c <= 'Z') {
      *c = (char)(*c - 'A' + 'a');
      changed = true;
    } else if (*c == ' ') {
      *c = '-';
      changed = true;
    }
  }
  if (!name_ok(s)) {
    note_at(p, AL_AGENTDEFS_ERROR, v,
            "'name' must be 1 to 64 of a-z 0-9 _ - (got '%.80s')",
            al_yaml_scalar(v));
    al_free(s);
    return;
  }
  if (changed) {
    note_at(p, AL_AGENTDEFS_INFO, v, "name '%s' is used as '%s'",
            al_yaml_scalar(v), s);
  }
  p->s.name = s;
  p->name_node = v;
}

/* Claude Code's permissionMode and ours. An agent is never looser than
 * its parent, so the modes that loosen (or that we have no rule for)
 * keep the parent's. */
static const struct {
  const char *name;
  int mode;
  const char *why; /* non-NULL: a warning, the parent's mode kept */
} k_modes[] = {
    {"default", -1, NULL},
    {"inherit", -1, NULL},
    {"interactive", AL_PERMISSION_MODE_INTERACTIVE, NULL},
    {"headless", AL_PERMISSION_MODE_HEADLESS, NULL},
    {"job", AL_PERMISSION_MODE_JOB, NULL},
    {"acceptEdits", -1, "edits are accepted as the parent's rules say"},
    {"plan", -1, "there is no plan mode here; restrict 'tools' instead"},
    {"bypassPermissions", -1,
     "an agent is never looser than the one that starts it"},
    {"dontAsk", -1, "an agent asks as the parent does"},
};

static void perm_value(pctx_t *p, const char *key, const yaml_node_t *v) {
  const char *t;
  size_t i;

  if (al_yaml_string_problem(v) != NULL) {
    note_at(p, AL_AGENTDEFS_ERROR, v, "'%s' must be a string", key);
    return;
  }
  t = al_yaml_scalar(v);
  for (i = 0; i < sizeof(k_modes) / sizeof(k_modes[0]); i++) {
    if (strcmp(t, k_modes[i].name) == 0) {
      p->s.permission_mode = k_modes[i].mode;
      if (k_modes[i].why != NULL) {
        note_at(p, AL_AGENTDEFS_WARNING, v,
                "'%s: %s' is taken as the parent's mode: %s", key, t,
                k_modes[i].why);
      }
      return;
    }
  }
  note_at(p, AL_AGENTDEFS_ERROR, v,
          "'%s' is one of interactive, headless, job, inherit, or "
          "Claude Code's default, acceptEdits, plan, bypassPermissions, "
          "dontAsk (got '%.80s')",
          key, t);
}

static void turns_value(pctx_t *p, const char *key, const yaml_node_t *v) {
  const char *t;
  char *end;
  unsigned long long x;

  if (!al_yaml_is_scalar(v) || !al_yaml_plain(v)) {
    note_at(p, AL_AGENTDEFS_ERROR, v, "'%s' must be a whole number", key);
    return;
  }
  t = al_yaml_scalar(v);
  errno = 0;
  x = strtoull(t, &end, 10);
  if (t[0] < '0' || t[0] > '9' || *end != '\0' || errno != 0 ||
      x > AL_AGENTDEFS_MAX_TURNS) {
    note_at(p, AL_AGENTDEFS_ERROR, v,
            "'%s' must be a whole number from 0 to %d (got '%.40s')", key,
            AL_AGENTDEFS_MAX_TURNS, t);
    return;
  }
  p->s.max_turns = (uint32_t)x;
}

static void model_value(pctx_t *p, const yaml_node_t *v) {
  char *s = string_value(p, "model", v);

  if (s == NULL) {
    return;
  }
  one_line(s);
  if (s[0] == '\0' || strcmp(s, "inherit") == 0) {
    al_free(s);
    return;
  }
  /* The models catalogue has no aliases: Claude Code's short names are
   * passed on as they are (docs/subagents.md). */
  if (strcmp(s, "sonnet") == 0 || strcmp(s, "opus") == 0 ||
      strcmp(s, "haiku") == 0) {
    note_at(p, AL_AGENTDEFS_WARNING, v,
            "model '%s' is Claude Code's alias; it is sent to the provider "
            "as it is (give a model id)",
            s);
  }
  p->s.model = s;
}

/* Claude Code's keys that mean nothing here (docs/subagents.md). */
static const char *const k_ignored[] = {
    "color",     "skills", "hooks",      "mcpServers",    "memory",
    "isolation", "effort", "background", "initialPrompt", NULL};

static bool once(pctx_t *p, unsigned bit, const yaml_node_t *k) {
  if (p->seen & bit) {
    note_at(p, AL_AGENTDEFS_ERROR, k, "'%s' is given twice", al_yaml_scalar(k));
    return false;
  }
  p->seen |= bit;
  return true;
}

static void field(pctx_t *p, const yaml_node_t *k, const yaml_node_t *v) {
  const char *key;
  size_t i;

  if (!al_yaml_is_scalar(k)) {
    note_at(p, AL_AGENTDEFS_ERROR, k, "a key must be a string");
    return;
  }
  key = al_yaml_scalar(k);
  if (strcmp(key, "name") == 0) {
    if (once(p, F_NAME, k)) {
      name_value(p, v);
    }
  } else if (strcmp(key, "description") == 0) {
    if (once(p, F_DESC, k) &&
        (p->s.description = string_value(p, key, v)) != NULL) {
      one_line((char *)p->s.description);
      if (p->s.description[0] == '\0') {
        note_at(p, AL_AGENTDEFS_ERROR, v, "'description' is empty");
      }
    }
  } else if (strcmp(key, "tools") == 0) {
    if (once(p, F_TOOLS, k) && !is_null(v)) {
      tools_value(p, key, v, false, &p->s.tools);
    }
  } else if (strcmp(key, "disallowed_tools") == 0 ||
             strcmp(key, "disallowedTools") == 0) {
    if (once(p, F_DENY, k) && !is_null(v)) {
      tools_value(p, key, v, true, &p->s.disallowed_tools);
    }
  } else if (strcmp(key, "model") == 0) {
    if (once(p, F_MODEL, k) && !is_null(v)) {
      model_value(p, v);
    }
  } else if (strcmp(key, "permission_mode") == 0 ||
             strcmp(key, "permissionMode") == 0) {
    if (once(p, F_PERM, k)) {
      perm_value(p, key, v);
    }
  } else if (strcmp(key, "max_turns") == 0 || strcmp(key, "maxTurns") == 0) {
    if (once(p, F_TURNS, k)) {
      turns_value(p, key, v);
    }
  } else {
    for (i = 0; k_ignored[i] != NULL; i++) {
      if (strcmp(key, k_ignored[i]) == 0) {
        note_at(p, AL_AGENTDEFS_WARNING, k,
                "'%s' (Claude Code) is ignored here", key);
        return;
      }
    }
    note_at(p, AL_AGENTDEFS_WARNING, k, "unknown key '%.80s' ignored", key);
  }
}

/* The end of the front matter: the offset of its closing "---" line and
 * of the body after it. false: not closed. */
static bool front_matter(const char *t, size_t len, size_t *yaml_end,
                         size_t *body) {
  size_t pos = 0;
  bool first = true;

  if (len >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) {
    pos = 3; /* a BOM (libyaml reads it too) */
  }
  while (pos < len) {
    const char *nl = memchr(t + pos, '\n', len - pos);
    size_t end = nl != NULL ? (size_t)(nl - t) : len;
    size_t e = end;

    while (e > pos &&
           (t[e - 1] == '\r' || t[e - 1] == ' ' || t[e - 1] == '\t')) {
      e--;
    }
    if (e - pos == 3 && memcmp(t + pos, "---", 3) == 0) {
      if (!first) {
        *yaml_end = pos;
        *body = nl != NULL ? end + 1 : len;
        return true;
      }
    } else if (first) {
      return false;
    }
    first = false;
    pos = nl != NULL ? end + 1 : len;
  }
  return false;
}

/* The body as the prompt: blank lines before and whitespace after go.
 * NULL (no error) when there is none. */
static void body_value(pctx_t *p, const char *t, size_t len, size_t at,
                       int line) {
  size_t a = at, b = len;

  while (a < b &&
         (t[a] == '\n' || t[a] == '\r' || t[a] == ' ' || t[a] == '\t')) {
    a++;
  }
  while (b > a && (t[b - 1] == '\n' || t[b - 1] == '\r' || t[b - 1] == ' ' ||
                   t[b - 1] == '\t')) {
    b--;
  }
  if (b == a) {
    return;
  }
  if (memchr(t + a, '\0', b - a) != NULL || !al__utf8_valid(t + a, b - a)) {
    yaml_node_t fake;

    memset(&fake, 0, sizeof(fake));
    fake.start_mark.line = (size_t)line - 1;
    note_at(p, AL_AGENTDEFS_ERROR, &fake,
            "the prompt (the text after the front matter) is not UTF-8 "
            "text");
    return;
  }
  if ((p->s.system = al_strndup(t + a, b - a)) == NULL) {
    p->nomem = true;
  }
}

static int lines_before(const char *t, size_t at) {
  int n = 1;
  size_t i;

  for (i = 0; i < at; i++) {
    n += t[i] == '\n';
  }
  return n;
}

int al_agentdefs_add_text(al_agentdefs_t *d, const char *path, const char *text,
                          size_t len) {
  pctx_t p;
  yaml_document_t doc;
  al_yaml_error_t ye;
  yaml_node_t *root;
  yaml_node_pair_t *pair;
  al_subagent_def_t old;
  size_t yaml_end, body;
  int rc;

  memset(&p, 0, sizeof(p));
  p.d = d;
  p.path = path;
  p.s.permission_mode = -1;
  if (!front_matter(text, len, &yaml_end, &body)) {
    note_at(&p, AL_AGENTDEFS_ERROR, NULL,
            "no front matter: the file starts with a line '---', then "
            "YAML (name, description...), then a line '---', then the "
            "prompt");
    return p.nomem ? AL_ENOMEM : 0;
  }
  rc = al_yaml_load(&doc, text, yaml_end, &ye);
  if (rc != 0) {
    if (ye.nomem) {
      return AL_ENOMEM;
    }
    if (add_note(d, AL_AGENTDEFS_ERROR, "%s:%d:%d: YAML: %s%s%s", path, ye.line,
                 ye.col, ye.problem, ye.context[0] != '\0' ? " " : "",
                 ye.context) != 0) {
      return AL_ENOMEM;
    }
    return 0;
  }
  p.doc = &doc;
  root = yaml_document_get_root_node(&doc);
  if (root == NULL || root->type != YAML_MAPPING_NODE) {
    note_at(&p, AL_AGENTDEFS_ERROR, root,
            "the front matter must be a mapping of keys (name: NAME)");
  } else {
    for (pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top && !p.nomem; pair++) {
      field(&p, node(&p, pair->key), node(&p, pair->value));
    }
    if (!(p.seen & F_NAME)) {
      note_at(&p, AL_AGENTDEFS_ERROR, root, "no 'name'");
    } else if (!(p.seen & F_DESC)) {
      note_at(&p, AL_AGENTDEFS_ERROR, root,
              "no 'description' (the task tool lists it)");
    }
  }
  if (!p.failed && !p.nomem) {
    body_value(&p, text, len, body, lines_before(text, body));
  }
  if (!p.failed && !p.nomem && (p.s.source = al_strdup(path)) == NULL) {
    p.nomem = true;
  }
  if (p.failed || p.nomem) {
    def_free(&p.s);
    yaml_document_delete(&doc);
    return p.nomem ? AL_ENOMEM : 0;
  }
  if (insert(d, &p.s, &old) != 0) {
    yaml_document_delete(&doc);
    return AL_ENOMEM;
  }
  if (old.name != NULL) {
    /* A later location's definition wins (agentdefs.h); said, not an
     * error: it is how a project refines a user's agent. */
    note_at(&p, AL_AGENTDEFS_INFO, p.name_node,
            "agent '%s' replaces the one from %s", old.name, old.source);
    def_free(&old);
  } else if (is_builtin_name(p.s.name)) {
    note_at(&p, AL_AGENTDEFS_INFO, p.name_node,
            "agent '%s' replaces the built-in one", p.s.name);
  }
  yaml_document_delete(&doc);
  return p.nomem ? AL_ENOMEM : 0;
}

/* ---- definitions that travel
 * ---------------------------------------------------- */

static const char *const k_wire_modes[] = {"interactive", "headless", "job"};

static json_t *names_json(const char *const *l) {
  json_t *a = json_array();
  size_t i;

  for (i = 0; a != NULL && l[i] != NULL; i++) {
    if (json_array_append_new(a, json_string(l[i])) != 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

json_t *al_agentdefs_to_json(const al_agentdefs_t *d) {
  json_t *a = json_array();
  size_t i;

  for (i = 0; a != NULL && d != NULL && i < d->n; i++) {
    const al_subagent_def_t *s = &d->defs[i];
    json_t *o = json_pack("{s:s, s:s, s:s?, s:s?, s:s?}", "name", s->name,
                          "description", s->description, "system", s->system,
                          "model", s->model, "source", s->source);
    bool bad = o == NULL;

    if (!bad && s->tools != NULL) {
      bad = json_object_set_new(o, "tools", names_json(s->tools)) != 0;
    }
    if (!bad && s->disallowed_tools != NULL) {
      bad = json_object_set_new(o, "disallowed_tools",
                                names_json(s->disallowed_tools)) != 0;
    }
    if (!bad && s->permission_mode >= 0 &&
        (size_t)s->permission_mode < AL_ARRAY_SIZE(k_wire_modes)) {
      bad = json_object_set_new(
                o, "permission_mode",
                json_string(k_wire_modes[s->permission_mode])) != 0;
    }
    if (!bad && s->max_turns > 0) {
      bad =
          json_object_set_new(o, "max_turns", json_integer(s->max_turns)) != 0;
    }
    if (bad || json_array_append_new(a, o) != 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

/* A string member (NULL: absent) of at most max bytes; *bytes counts it. */
static bool wire_str(const json_t *o, const char *key, bool required,
                     size_t max, const char **out, size_t *bytes) {
  const json_t *v = json_object_get(o, key);

  *out = NULL;
  if (v == NULL || json_is_null(v)) {
    return !required;
  }
  if (!json_is_string(v) || json_string_length(v) > max ||
      strlen(json_string_value(v)) != json_string_length(v)) {
    return false;
  }
  *out = json_string_value(v);
  *bytes += json_string_length(v);
  return true;
}

/* A list of tool names (NULL: absent) into *out (copies). */
static int wire_tools(const json_t *v, const char *const **out, size_t *bytes) {
  const json_t *t;
  char **l;
  size_t i;

  *out = NULL;
  if (v == NULL || json_is_null(v)) {
    return 0;
  }
  if (!json_is_array(v) || json_array_size(v) > 256) {
    return AL_EINVAL;
  }
  json_array_foreach(v, i, t) {
    if (!json_is_string(t) ||
        !tool_name_ok(json_string_value(t), json_string_length(t))) {
      return AL_EINVAL;
    }
    *bytes += json_string_length(t);
  }
  if ((l = al_calloc(json_array_size(v) + 1, sizeof(*l))) == NULL) {
    return AL_ENOMEM;
  }
  *out = (const char *const *)l;
  json_array_foreach(v, i, t) {
    if ((l[i] = al_strdup(json_string_value(t))) == NULL) {
      return AL_ENOMEM;
    }
  }
  return 0;
}

/* One entry into s (its strings copied); AL_EINVAL with what in *what. */
static int wire_def(const json_t *o, al_subagent_def_t *s, size_t *bytes,
                    const char **what) {
  const char *name, *desc, *sys, *model, *src, *mode;
  const json_t *mt = json_object_get(o, "max_turns");
  size_t i;
  int rc;

  s->permission_mode = -1;
  if (!json_is_object(o)) {
    return *what = "must be an object", AL_EINVAL;
  }
  if (!wire_str(o, "name", true, 64, &name, bytes) || !name_ok(name)) {
    return *what = "name: 1 to 64 of a-z 0-9 _ -", AL_EINVAL;
  }
  if (!wire_str(o, "description", true, 4096, &desc, bytes)) {
    return *what = "description: a string of at most 4096 bytes", AL_EINVAL;
  }
  if (!wire_str(o, "system", false, AL_AGENTDEFS_MAX_FILE_BYTES, &sys, bytes) ||
      !wire_str(o, "model", false, 256, &model, bytes) ||
      !wire_str(o, "source", false, 4096, &src, bytes) ||
      !wire_str(o, "permission_mode", false, 16, &mode, bytes)) {
    return *what = "system, model, source, permission_mode: bounded strings",
           AL_EINVAL;
  }
  if (mode != NULL) {
    for (i = 0;
         i < AL_ARRAY_SIZE(k_wire_modes) && strcmp(mode, k_wire_modes[i]) != 0;
         i++) {
    }
    if (i == AL_ARRAY_SIZE(k_wire_modes)) {
      return *what = "permission_mode: interactive, headless or job", AL_EINVAL;
    }
    s->permission_mode = (int)i;
  }
  if (mt != NULL && !json_is_null(mt) &&
      (!json_is_integer(mt) || json_integer_value(mt) < 0 ||
       json_integer_value(mt) > AL_AGENTDEFS_MAX_TURNS)) {
    return *what = "max_turns: 0 to 100000", AL_EINVAL;
  }
  s->max_turns = (uint32_t)json_integer_value(mt);
  if ((s->name = al_strdup(name)) == NULL ||
      (s->description = al_strdup(desc)) == NULL ||
      (sys != NULL && (s->system = al_strdup(sys)) == NULL) ||
      (model != NULL && (s->model = al_strdup(model)) == NULL) ||
      (s->source = al_strdup(src != NULL ? src : "session")) == NULL) {
    return AL_ENOMEM;
  }
  if ((rc = wire_tools(json_object_get(o, "tools"), &s->tools, bytes)) != 0 ||
      (rc = wire_tools(json_object_get(o, "disallowed_tools"),
                       &s->disallowed_tools, bytes)) != 0) {
    if (rc == AL_EINVAL) {
      *what = "tools, disallowed_tools: at most 256 tool names";
    }
    return rc;
  }
  return 0;
}

int al_agentdefs_from_json(const json_t *a, al_agentdefs_t **out, char *why,
                           size_t why_len) {
  al_agentdefs_t *d;
  const json_t *o;
  size_t i, bytes = 0;
  int rc = 0;

  *out = NULL;
  if (a != NULL && !json_is_null(a) &&
      (!json_is_array(a) || json_array_size(a) > AL_AGENTDEFS_MAX_FILES)) {
    snprintf(why, why_len, "agents: an array of at most %d definitions",
             AL_AGENTDEFS_MAX_FILES);
    return AL_EINVAL;
  }
  if ((rc = al_agentdefs_new(&d)) != 0) {
    return rc;
  }
  json_array_foreach(a, i, o) {
    al_subagent_def_t s, old;
    const char *what = NULL;

    memset(&s, 0, sizeof(s));
    rc = wire_def(o, &s, &bytes, &what);
    if (rc == 0 && bytes > AL_AGENTDEFS_WIRE_BYTES) {
      rc = AL_EINVAL;
      what = "the definitions are over 1 MiB of text in all";
    }
    if (rc == 0 && al_agentdefs_find(d, s.name) != NULL) {
      rc = AL_EINVAL;
      what = "name: given twice";
    }
    if (rc != 0) {
      if (rc == AL_EINVAL) {
        snprintf(why, why_len, "agents[%zu]: %s", i, what);
      }
      def_free(&s);
      break;
    }
    if ((rc = insert(d, &s, &old)) != 0) {
      break;
    }
  }
  if (rc != 0) {
    al_agentdefs_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

/* ---- the directories
 * ------------------------------------------------------------ */

typedef struct where_s {
  char *config_dir, *home, *workspace;
  bool trusted, no_claude;
} where_t;

static int read_bounded(const char *path, al_buf_t *b, bool *big, int *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  struct stat st;
  char chunk[8192];
  ssize_t n;

  *big = false;
  *err = 0;
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  if (fstat(fd, &st) != 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  /* A FIFO named x.md would hold the pool's thread: regular files only. */
  if (!S_ISREG(st.st_mode)) {
    *err = EINVAL;
    close(fd);
    return -1;
  }
  if ((uint64_t)st.st_size > AL_AGENTDEFS_MAX_FILE_BYTES) {
    *big = true;
    close(fd);
    return -1;
  }
  al_buf_init(b, AL_AGENTDEFS_MAX_FILE_BYTES + 1);
  for (;;) {
    n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      *err = errno;
      break;
    }
    if (n == 0) {
      break;
    }
    if (al_buf_append(b, chunk, (size_t)n) != 0) {
      *big = true; /* it grew after the fstat */
      break;
    }
  }
  close(fd);
  if (*err != 0 || *big) {
    al_buf_free(b);
    return -1;
  }
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_md(const char *n) {
  size_t l = strlen(n);

  return n[0] != '.' && l > 3 && strcmp(n + l - 3, ".md") == 0;
}

/* The *.md files of dir, in name order, while *left allows. */
static int load_dir(al_agentdefs_t *d, const char *dir, size_t *left) {
  DIR *dh = opendir(dir);
  struct dirent *e;
  char **names = NULL;
  size_t n = 0, cap = 0, i;
  int rc = 0;

  if (dh == NULL) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return 0;
    }
    return add_note(d, AL_AGENTDEFS_WARNING, "%s: cannot read: %s", dir,
                    strerror(errno));
  }
  while ((e = readdir(dh)) != NULL) {
    if (!is_md(e->d_name)) {
      continue;
    }
    if (n == cap) {
      char **nn;

      cap = cap == 0 ? 16 : cap * 2;
      if ((nn = al_realloc(names, cap * sizeof(*nn))) == NULL) {
        rc = AL_ENOMEM;
        break;
      }
      names = nn;
    }
    if ((names[n] = al_strdup(e->d_name)) == NULL) {
      rc = AL_ENOMEM;
      break;
    }
    n++;
  }
  closedir(dh);
  if (rc == 0 && n > 0) {
    qsort(names, n, sizeof(*names), cmp_names);
  }
  for (i = 0; rc == 0 && i < n; i++) {
    al_buf_t b, path;
    bool big;
    int err;

    if (*left == 0) {
      rc = add_note(d, AL_AGENTDEFS_WARNING,
                    "%s: %zu agent files not read (from %s on): at most "
                    "%d are read in all",
                    dir, n - i, names[i], AL_AGENTDEFS_MAX_FILES);
      break;
    }
    al_buf_init(&path, 8192);
    if (al_buf_printf(&path, "%s/%s", dir, names[i]) != 0) {
      rc = AL_ENOMEM;
      break;
    }
    (*left)--;
    d->n_files++;
    if (read_bounded(path.data, &b, &big, &err) != 0) {
      if (big) {
        rc = add_note(d, AL_AGENTDEFS_ERROR,
                      "%s:1:1: larger than %zu bytes; not read", path.data,
                      AL_AGENTDEFS_MAX_FILE_BYTES);
      } else if (err == EINVAL) {
        rc = add_note(d, AL_AGENTDEFS_WARNING,
                      "%s: not a regular file; not read", path.data);
      } else {
        rc = add_note(d, AL_AGENTDEFS_ERROR, "%s:1:1: cannot read: %s",
                      path.data, strerror(err));
      }
    } else {
      rc = al_agentdefs_add_text(d, path.data, b.data != NULL ? b.data : "",
                                 b.len);
      al_buf_free(&b);
    }
    al_buf_free(&path);
  }
  for (i = 0; i < n; i++) {
    al_free(names[i]);
  }
  al_free(names);
  return rc;
}

static int load_where(const where_t *w, al_agentdefs_t **out) {
  al_agentdefs_t *d;
  size_t left = AL_AGENTDEFS_MAX_FILES;
  char path[4096];
  int rc;

  if ((rc = al_agentdefs_new(&d)) != 0) {
    return rc;
  }
  if (rc == 0 && w->home != NULL && !w->no_claude) {
    snprintf(path, sizeof(path), "%s/.claude/agents", w->home);
    rc = load_dir(d, path, &left);
  }
  if (rc == 0 && w->config_dir != NULL) {
    snprintf(path, sizeof(path), "%s/agents", w->config_dir);
    rc = load_dir(d, path, &left);
  }
  if (rc == 0 && w->workspace != NULL) {
    static const char *const rel[] = {".claude/agents", ".agentloop/agents"};
    size_t i;

    for (i = 0; rc == 0 && i < 2; i++) {
      struct stat st;

      if (i == 0 && w->no_claude) {
        continue;
      }
      snprintf(path, sizeof(path), "%s/%s", w->workspace, rel[i]);
      if (w->trusted) {
        rc = load_dir(d, path, &left);
      } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = add_note(d, AL_AGENTDEFS_WARNING,
                      "%s: not read: the project is not trusted "
                      "(`agentloop tools --trust-project` in it trusts it)",
                      path);
      }
    }
  }
  if (rc != 0) {
    al_agentdefs_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

static void where_free(where_t *w) {
  al_free(w->config_dir);
  al_free(w->home);
  al_free(w->workspace);
}

/* The options resolved on the caller's thread (getenv), copied. */
static int where_init(where_t *w, const al_agentdefs_options_t *o) {
  char dir[4096];
  const char *cd = o->config_dir;
  const char *home = o->home;

  memset(w, 0, sizeof(*w));
  if (cd == NULL) {
    cd = al_config_dir(dir, sizeof(dir));
  }
  if (home == NULL) {
    home = getenv("HOME");
    if (home != NULL && home[0] != '/') {
      home = NULL;
    }
  }
  w->trusted = o->project_trusted;
  w->no_claude = o->no_claude;
  if ((cd != NULL && cd[0] != '\0' &&
       (w->config_dir = al_strdup(cd)) == NULL) ||
      (home != NULL && home[0] != '\0' &&
       (w->home = al_strdup(home)) == NULL) ||
      (o->workspace != NULL &&
       (w->workspace = al_strdup(o->workspace)) == NULL)) {
    where_free(w);
    return AL_ENOMEM;
  }
  return 0;
}

int al_config_agents_load(const al_agentdefs_options_t *o,
                          al_agentdefs_t **out) {
  where_t w;
  int rc;

  *out = NULL;
  if ((rc = where_init(&w, o)) != 0) {
    return rc;
  }
  rc = load_where(&w, out);
  where_free(&w);
  return rc;
}

/* ---- in the pool
 * ------------------------------------------------------------------ */

struct al_agentdefs_req_s {
  uv_work_t work;
  where_t where;
  al_agentdefs_load_cb cb;
  void *data;
  bool cancelled;
  int rc;
  al_agentdefs_t *defs;
};

static void pool_work(uv_work_t *work) {
  al_agentdefs_req_t *r = AL_CONTAINER_OF(work, al_agentdefs_req_t, work);

  r->rc = load_where(&r->where, &r->defs);
}

static void pool_done(uv_work_t *work, int status) {
  al_agentdefs_req_t *r = AL_CONTAINER_OF(work, al_agentdefs_req_t, work);

  if (!r->cancelled) {
    int rc = status != 0 ? status : r->rc;

    r->cb(r, rc, rc == 0 ? r->defs : NULL, r->data);
    if (rc == 0) {
      r->defs = NULL; /* the callback's now */
    }
  }
  al_agentdefs_free(r->defs);
  where_free(&r->where);
  al_free(r);
}

int al_config_agents_load_start(uv_loop_t *loop,
                                const al_agentdefs_options_t *o,
                                al_agentdefs_load_cb cb, void *data,
                                al_agentdefs_req_t **out) {
  al_agentdefs_req_t *r = al_calloc(1, sizeof(*r));
  int rc;

  *out = NULL;
  if (r == NULL) {
    return AL_ENOMEM;
  }
  if ((rc = where_init(&r->where, o)) != 0) {
    al_free(r);
    return rc;
  }
  r->cb = cb;
  r->data = data;
  if ((rc = uv_queue_work(loop, &r->work, pool_work, pool_done)) != 0) {
    where_free(&r->where);
    al_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

void al_config_agents_load_cancel(al_agentdefs_req_t *req) {
  req->cancelled = true;
  /* Not started yet: the pool skips it (pool_done still frees it). */
  (void)uv_cancel((uv_req_t *)&req->work);
}
