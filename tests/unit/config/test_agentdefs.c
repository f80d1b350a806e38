/* Agent definitions (src/config/agentdefs.c, docs/subagents.md): every
 * field in our spelling and in Claude Code's, the tool-name map, the four
 * locations and their precedence, an untrusted project, errors with
 * FILE:LINE:COL (the file skipped, the rest loaded), the bounds on files,
 * the task tool's listing within its budget, and the load in the pool. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/utf8.h"
#include "config/agentdefs.h"
#include "test.h"
#include "tools/clitool.h"

/* The note of that level whose text contains needle, or NULL. */
static const char *note_with(const al_agentdefs_t *d, al_agentdefs_level_t lv,
                             const char *needle) {
  size_t i;

  for (i = 0; i < d->n_notes; i++) {
    if (d->notes[i].level == lv && strstr(d->notes[i].text, needle) != NULL) {
      return d->notes[i].text;
    }
  }
  return NULL;
}

static void dump_notes(const al_agentdefs_t *d) {
  al_buf_t b;

  al_buf_init(&b, 1 << 20);
  ASSERT_EQ(al_agentdefs_notes_text(d, &b), 0);
  fprintf(stderr, "%s", b.data != NULL ? b.data : "");
  al_buf_free(&b);
}

static size_t list_len(const char *const *l) {
  size_t n = 0;

  while (l != NULL && l[n] != NULL) {
    n++;
  }
  return n;
}

static void add(al_agentdefs_t *d, const char *path, const char *text) {
  ASSERT_EQ(al_agentdefs_add_text(d, path, text, strlen(text)), 0);
}

static void add_file(al_agentdefs_t *d, const char *rel) {
  size_t len;
  char *text = al_test_read_file(al_test_data_path(rel), &len);

  ASSERT_NOT_NULL(text);
  ASSERT_EQ(al_agentdefs_add_text(d, rel, text, len), 0);
  free(text);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");

  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(text, 1, strlen(text), f), strlen(text));
  ASSERT_EQ(fclose(f), 0);
}

static void mkdirs(const char *root, const char *rel) {
  char path[4096];
  char *s;

  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (s = path + strlen(root) + 1; (s = strchr(s, '/')) != NULL; s++) {
    *s = '\0';
    ASSERT(mkdir(path, 0700) == 0 || errno == EEXIST);
    *s = '/';
  }
  ASSERT(mkdir(path, 0700) == 0 || errno == EEXIST);
}

/* An agent file NAME in root/rel with a description of its own. */
static void agent_file(const char *root, const char *rel, const char *file,
                       const char *name, const char *desc) {
  char path[4096], text[1024];

  mkdirs(root, rel);
  snprintf(path, sizeof(path), "%s/%s/%s", root, rel, file);
  snprintf(text, sizeof(text),
           "---\nname: %s\ndescription: %s\n---\nprompt of %s\n", name, desc,
           desc);
  write_text(path, text);
}

TEST_IMPL(agentdefs_builtins) {
  al_agentdefs_t *d;
  const al_subagent_def_t *e;
  size_t i;

  const al_subagent_def_t *b;
  size_t nb;

  /* The loader reads files only: the built-ins are the loop's, one source
   * for the agent and every listing. */
  ASSERT_EQ(al_agentdefs_new(&d), 0);
  ASSERT_EQ(d->n, 0);
  ASSERT_NULL(al_agentdefs_find(d, "explore"));
  al_agentdefs_free(d);
  b = al_subagent_builtins(&nb);
  ASSERT_EQ(nb, 2);
  ASSERT_STR_EQ(b[0].name, "explore");
  ASSERT_STR_EQ(b[1].name, "general");
  e = &b[0];
  ASSERT_STR_EQ(e->source, "builtin");
  ASSERT_NOT_NULL(e->system);
  ASSERT_EQ(e->permission_mode, -1);
  ASSERT_NULL(e->model);
  /* Read-only: nothing that writes or runs a command. */
  ASSERT(list_len(e->tools) >= 2);
  for (i = 0; e->tools[i] != NULL; i++) {
    ASSERT(strcmp(e->tools[i], "bash") != 0);
    ASSERT(strcmp(e->tools[i], "write_file") != 0);
    ASSERT(strcmp(e->tools[i], "edit_file") != 0);
    ASSERT(strcmp(e->tools[i], "task") != 0);
  }
  e = &b[1];
  ASSERT_NULL(e->tools); /* all of the parent's */
  ASSERT_NULL(e->disallowed_tools);
  return 0;
}

TEST_IMPL(agentdefs_fields_ours) {
  al_agentdefs_t *d;
  const al_subagent_def_t *s;

  ASSERT_EQ(al_agentdefs_new(&d), 0);
  add_file(d, "agents/ours/doc-writer.md");
  if (d->n_notes != 0) {
    dump_notes(d);
  }
  ASSERT_EQ(d->n_notes, 0);
  ASSERT_EQ(d->n, 1);
  ASSERT_STR_EQ(d->defs[0].name, "doc_writer");
  s = &d->defs[0];
  ASSERT_STR_EQ(s->description,
                "Writes and updates the documentation under docs/.");
  ASSERT_STR_EQ(s->system,
                "Write documentation in plain words. Keep each page's "
                "headings.");
  ASSERT_STR_EQ(s->model, "claude-haiku-4-5");
  ASSERT_EQ(list_len(s->tools), 4);
  ASSERT_STR_EQ(s->tools[0], "read_file");
  ASSERT_STR_EQ(s->tools[2], "edit_file");
  ASSERT_STR_EQ(s->tools[3], "mcp__wiki__search");
  ASSERT_EQ(list_len(s->disallowed_tools), 1);
  ASSERT_STR_EQ(s->disallowed_tools[0], "bash");
  ASSERT_EQ(s->permission_mode, AL_PERMISSION_MODE_HEADLESS);
  ASSERT_EQ(s->max_turns, 30);
  ASSERT_STR_EQ(s->source, "agents/ours/doc-writer.md");

  /* The smallest file: name and description; the rest the parent's. */
  add(d, "min.md", "---\nname: min\ndescription: d\n---\n");
  s = al_agentdefs_find(d, "min");
  ASSERT_NOT_NULL(s);
  ASSERT_NULL(s->system);
  ASSERT_NULL(s->tools);
  ASSERT_NULL(s->disallowed_tools);
  ASSERT_NULL(s->model);
  ASSERT_EQ(s->permission_mode, -1);
  ASSERT_EQ(s->max_turns, 0);
  /* CRLF lines, an empty tools list (no tools at all) and the other modes. */
  add(d, "crlf.md",
      "---\r\nname: crlf\r\ndescription: x\r\ntools: []\r\n"
      "permission_mode: job\r\n---\r\nbody\r\n");
  s = al_agentdefs_find(d, "crlf");
  ASSERT_NOT_NULL(s);
  ASSERT_NOT_NULL(s->tools);
  ASSERT_EQ(list_len(s->tools), 0);
  ASSERT_EQ(s->permission_mode, AL_PERMISSION_MODE_JOB);
  ASSERT_STR_EQ(s->system, "body");
  ASSERT_EQ(d->n_notes, 0);
  al_agentdefs_free(d);
  return 0;
}

TEST_IMPL(agentdefs_claude_code_files) {
  al_agentdefs_t *d;
  const al_subagent_def_t *s;

  ASSERT_EQ(al_agentdefs_new(&d), 0);
  add_file(d, "agents/claude/code-reviewer.md");
  add_file(d, "agents/claude/test-runner.md");
  dump_notes(d);
  ASSERT_EQ(d->n_errors, 0);

  /* "Code Reviewer" lower-cased, its space a '-', said as info. */
  s = al_agentdefs_find(d, "code-reviewer");
  ASSERT_NOT_NULL(s);
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_INFO,
                            "agents/claude/code-reviewer.md:2:7: name "
                            "'Code Reviewer' is used as 'code-reviewer'"));
  /* Read, Grep, Glob, Bash mapped; WebFetch dropped, named. */
  ASSERT_EQ(list_len(s->tools), 4);
  ASSERT_STR_EQ(s->tools[0], "read_file");
  ASSERT_STR_EQ(s->tools[1], "grep");
  ASSERT_STR_EQ(s->tools[2], "glob");
  ASSERT_STR_EQ(s->tools[3], "bash");
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "code-reviewer.md:4:8: 'tools': Claude Code's "
                            "tool 'WebFetch' has no equivalent here"));
  /* The alias is kept, and said. */
  ASSERT_STR_EQ(s->model, "sonnet");
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "code-reviewer.md:5:8: model 'sonnet'"));
  /* bypassPermissions never loosens: the parent's mode, with a warning. */
  ASSERT_EQ(s->permission_mode, -1);
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "code-reviewer.md:6:17: 'permissionMode: "
                            "bypassPermissions' is taken as the parent's"));
  ASSERT_EQ(s->max_turns, 12);
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "code-reviewer.md:8:1: 'color' (Claude Code) is "
                            "ignored"));
  ASSERT(strncmp(s->system, "You are a careful reviewer.", 27) == 0);
  ASSERT(strstr(s->system, "Do not edit files.") != NULL);

  s = al_agentdefs_find(d, "test-runner");
  ASSERT_NOT_NULL(s);
  ASSERT_NULL(s->tools);
  /* Write mapped; a rule with a pattern disallows the whole tool. */
  ASSERT_EQ(list_len(s->disallowed_tools), 2);
  ASSERT_STR_EQ(s->disallowed_tools[0], "write_file");
  ASSERT_STR_EQ(s->disallowed_tools[1], "bash");
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "'Bash(rm:*)' is a rule with a pattern; the "
                            "whole tool is disallowed"));
  ASSERT_NULL(s->model); /* inherit */
  ASSERT_EQ(s->permission_mode, -1);
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "test-runner.md:6:17: 'permissionMode: "
                            "acceptEdits'"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "test-runner.md:7:1: 'skills' (Claude Code) is "
                            "ignored"));

  /* A YAML list with Claude Code's names too; Edit and MultiEdit are one
   * tool; a pattern in an allowlist is dropped (stricter); an unknown
   * key names its place. */
  add(d, "list.md",
      "---\nname: l\ndescription: d\ntools: [Edit, MultiEdit, LS, Task, "
      "\"Bash(git:*)\", my_tool]\nfavourite: blue\n---\n");
  s = al_agentdefs_find(d, "l");
  ASSERT_NOT_NULL(s);
  ASSERT_EQ(list_len(s->tools), 4);
  ASSERT_STR_EQ(s->tools[0], "edit_file");
  ASSERT_STR_EQ(s->tools[1], "list_directory");
  ASSERT_STR_EQ(s->tools[2], "task");
  ASSERT_STR_EQ(s->tools[3], "my_tool");
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "list.md:4:36: 'tools': 'Bash(git:*)' is a rule "
                            "with a pattern"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "list.md:5:1: unknown key 'favourite' ignored"));
  /* Every tool dropped: no tools at all, said. */
  add(d, "none.md",
      "---\nname: none\ndescription: d\ntools: WebFetch, "
      "WebSearch\n---\n");
  s = al_agentdefs_find(d, "none");
  ASSERT_NOT_NULL(s->tools);
  ASSERT_EQ(list_len(s->tools), 0);
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "none.md:4:8: 'tools': no tool named is one "
                            "here; the agent gets no tools"));
  /* The shared map. */
  ASSERT_STR_EQ(al_claude_tool_find("Read")->ours, "read_file");
  ASSERT_NULL(al_claude_tool_find("WebSearch")->ours);
  ASSERT_NULL(al_claude_tool_find("read_file"));
  al_agentdefs_free(d);
  return 0;
}

TEST_IMPL(agentdefs_errors_name_place) {
  static const struct {
    const char *text, *note;
  } cases[] = {
      {"no front matter\n", "e.md:1:1: no front matter"},
      {"---\nname: a\ndescription: b\n", "e.md:1:1: no front matter"},
      {"---\nname: [a\ndescription: b\n---\n", "e.md:3:12: YAML:"},
      {"---\n- a\n- b\n---\n", "e.md:2:1: the front matter must be a mapping"},
      {"---\ndescription: b\n---\n", "e.md:2:1: no 'name'"},
      {"---\nname: a\n---\n", "e.md:2:1: no 'description'"},
      {"---\nname: a/b\ndescription: c\n---\n",
       "e.md:2:7: 'name' must be 1 to 64 of a-z 0-9 _ - (got 'a/b')"},
      {"---\nname: "
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
       "description: c\n---\n",
       "e.md:2:7: 'name' must be 1 to 64"},
      {"---\nname: {x: 1}\ndescription: c\n---\n",
       "e.md:2:7: 'name' must be a string"},
      {"---\nname: a\ndescription: c\nmax_turns: many\n---\n",
       "e.md:4:12: 'max_turns' must be a whole number from 0 to"},
      {"---\nname: a\ndescription: c\nmaxTurns: -3\n---\n",
       "e.md:4:11: 'maxTurns' must be a whole number"},
      {"---\nname: a\ndescription: c\nmax_turns: \"7\"\n---\n",
       "e.md:4:12: 'max_turns' must be a whole number"},
      {"---\nname: a\ndescription: c\ntools: {Read: 1}\n---\n",
       "e.md:4:8: 'tools' must be a list of tool names"},
      {"---\nname: a\ndescription: c\ntools: [[Read]]\n---\n",
       "e.md:4:9: 'tools': each tool must be a string"},
      {"---\nname: a\ndescription: c\npermissionMode: sometimes\n---\n",
       "e.md:4:17: 'permissionMode' is one of"},
      {"---\nname: a\ndescription: c\nname: b\n---\n",
       "e.md:4:1: 'name' is given twice"},
      {"---\nname: a\ndescription: c\n---\nbad \xff byte\n",
       "e.md:5:1: the prompt (the text after the front matter) is not UTF-8"},
      {"---\nname: a\ndescription: \"  \"\n---\n",
       "e.md:3:14: 'description' is empty"},
  };
  al_agentdefs_t *d;
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ASSERT_EQ(al_agentdefs_new(&d), 0);
    add(d, "e.md", cases[i].text);
    if (note_with(d, AL_AGENTDEFS_ERROR, cases[i].note) == NULL) {
      dump_notes(d);
      AL_TEST_FAIL("case %zu: no error note '%s'", i, cases[i].note);
    }
    ASSERT_EQ(d->n_errors, 1);
    ASSERT_EQ(d->n, 0); /* the file is skipped, nothing half-added */
    al_agentdefs_free(d);
  }
  return 0;
}

TEST_IMPL(agentdefs_precedence) {
  char root[] = "/tmp/al-agentdefs-XXXXXX";
  char home[4096], cfg[4096], ws[4096];
  al_agentdefs_options_t o;
  al_agentdefs_t *d;
  const al_subagent_def_t *s;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(home, sizeof(home), "%s/home", root);
  snprintf(cfg, sizeof(cfg), "%s/home/.config/agentloop", root);
  snprintf(ws, sizeof(ws), "%s/proj", root);
  /* rev everywhere, each layer one of its own too. */
  agent_file(root, "home/.claude/agents", "rev.md", "rev", "claude-user");
  agent_file(root, "home/.claude/agents", "cu.md", "cu", "claude-user");
  agent_file(root, "home/.config/agentloop/agents", "rev.md", "rev", "user");
  agent_file(root, "home/.config/agentloop/agents", "us.md", "us", "user");
  agent_file(root, "proj/.claude/agents", "rev.md", "Rev", "claude-proj");
  agent_file(root, "proj/.claude/agents", "cp.md", "cp", "claude-proj");
  agent_file(root, "proj/.agentloop/agents", "x.md", "rev", "proj");
  /* A file replaces a built-in, which keeps its place at the front. */
  agent_file(root, "proj/.agentloop/agents", "e.md", "explore", "mine");
  /* Not an agent file: skipped without a word. */
  agent_file(root, "proj/.agentloop/agents", "notes.txt", "zz", "txt");

  al_agentdefs_options_init(&o);
  o.home = home;
  o.config_dir = cfg;
  o.workspace = ws;
  o.project_trusted = true;
  ASSERT_EQ(al_config_agents_load(&o, &d), 0);
  dump_notes(d);
  ASSERT_EQ(d->n_errors, 0);
  ASSERT_EQ(d->n_files, 8);
  s = al_agentdefs_find(d, "rev");
  ASSERT_STR_EQ(s->description, "proj");
  ASSERT(strstr(s->source, "proj/.agentloop/agents/x.md") != NULL);
  ASSERT_STR_EQ(s->system, "prompt of proj");
  /* Each step said, as info. */
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_INFO,
                            "home/.config/agentloop/agents/rev.md:2:7: agent "
                            "'rev' replaces the one from"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_INFO,
                            "proj/.claude/agents/rev.md:2:7: agent 'rev' "
                            "replaces the one from"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_INFO,
                            "x.md:2:7: agent 'rev' replaces the one from"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_INFO,
                            "agent 'explore' replaces the built-in one"));
  ASSERT_STR_EQ(d->defs[0].name, "explore");
  ASSERT_STR_EQ(d->defs[0].description, "mine");
  /* The rest by name, whatever their layer; general stays the loop's. */
  ASSERT_EQ(d->n, 5);
  ASSERT_STR_EQ(d->defs[1].name, "cp");
  ASSERT_STR_EQ(d->defs[2].name, "cu");
  ASSERT_STR_EQ(d->defs[3].name, "rev");
  ASSERT_STR_EQ(d->defs[4].name, "us");
  ASSERT_NULL(al_agentdefs_find(d, "zz"));
  al_agentdefs_free(d);

  /* Without Claude Code's directories. */
  o.no_claude = true;
  ASSERT_EQ(al_config_agents_load(&o, &d), 0);
  ASSERT_NULL(al_agentdefs_find(d, "cu"));
  ASSERT_NULL(al_agentdefs_find(d, "cp"));
  ASSERT_NOT_NULL(al_agentdefs_find(d, "us"));
  al_agentdefs_free(d);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}

TEST_IMPL(agentdefs_untrusted_project_skipped) {
  char root[] = "/tmp/al-agentdefs-XXXXXX";
  char cfg[4096], ws[4096];
  al_agentdefs_options_t o;
  al_agentdefs_t *d;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(cfg, sizeof(cfg), "%s/cfg", root);
  snprintf(ws, sizeof(ws), "%s/proj", root);
  agent_file(root, "cfg/agents", "rev.md", "rev", "user");
  agent_file(root, "proj/.claude/agents", "rev.md", "rev", "claude-proj");
  agent_file(root, "proj/.agentloop/agents", "rev.md", "rev", "proj");
  agent_file(root, "proj/.agentloop/agents", "pw.md", "pwn", "proj");

  al_agentdefs_options_init(&o);
  o.home = "";
  o.config_dir = cfg;
  o.workspace = ws;
  o.project_trusted = false;
  ASSERT_EQ(al_config_agents_load(&o, &d), 0);
  dump_notes(d);
  ASSERT_STR_EQ(al_agentdefs_find(d, "rev")->description, "user");
  ASSERT_NULL(al_agentdefs_find(d, "pwn"));
  ASSERT_EQ(d->n_files, 1);
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "proj/.agentloop/agents: not read: the project "
                            "is not trusted"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "proj/.claude/agents: not read: the project is "
                            "not trusted"));
  al_agentdefs_free(d);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}

TEST_IMPL(agentdefs_file_bounds) {
  char root[] = "/tmp/al-agentdefs-XXXXXX";
  char cfg[4096], path[8192];
  al_agentdefs_options_t o;
  al_agentdefs_t *d;
  char *big;
  size_t head, i;
  FILE *f;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(cfg, sizeof(cfg), "%s/cfg", root);
  mkdirs(root, "cfg/agents");
  /* Exactly the bound: read; one byte more: an error naming the file. */
  big = malloc(AL_AGENTDEFS_MAX_FILE_BYTES + 2);
  ASSERT_NOT_NULL(big);
  head = (size_t)snprintf(big, 64, "---\nname: fits\ndescription: d\n---\n");
  memset(big + head, 'x', AL_AGENTDEFS_MAX_FILE_BYTES - head);
  big[AL_AGENTDEFS_MAX_FILE_BYTES] = '\0';
  snprintf(path, sizeof(path), "%s/agents/a-fits.md", cfg);
  write_text(path, big);
  memcpy(big, "---\nname: over\n", 15);
  big[AL_AGENTDEFS_MAX_FILE_BYTES] = 'x';
  big[AL_AGENTDEFS_MAX_FILE_BYTES + 1] = '\0';
  snprintf(path, sizeof(path), "%s/agents/b-over.md", cfg);
  write_text(path, big);
  free(big);
  /* A FIFO would hold the pool's thread: not opened for a read. */
  snprintf(path, sizeof(path), "%s/agents/c-fifo.md", cfg);
  ASSERT_EQ(mkfifo(path, 0600), 0);
  agent_file(root, "cfg/agents", "d-ok.md", "ok", "fine");

  al_agentdefs_options_init(&o);
  o.home = "";
  o.config_dir = cfg;
  ASSERT_EQ(al_config_agents_load(&o, &d), 0);
  dump_notes(d);
  ASSERT_NOT_NULL(al_agentdefs_find(d, "fits"));
  ASSERT_NULL(al_agentdefs_find(d, "over"));
  ASSERT_NOT_NULL(al_agentdefs_find(d, "ok"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_ERROR,
                            "agents/b-over.md:1:1: larger than 262144 "
                            "bytes"));
  ASSERT_NOT_NULL(
      note_with(d, AL_AGENTDEFS_WARNING, "c-fifo.md: not a regular file"));
  ASSERT_EQ(d->n_errors, 1);
  al_agentdefs_free(d);

  /* At most AL_AGENTDEFS_MAX_FILES in all: the rest said, in name order. */
  ASSERT_EQ(unlink(path), 0);
  for (i = 0; i < AL_AGENTDEFS_MAX_FILES + 3; i++) {
    snprintf(path, sizeof(path), "%s/agents/n%03zu.md", cfg, i);
    f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fprintf(f, "---\nname: n%03zu\ndescription: d\n---\n", i);
    ASSERT_EQ(fclose(f), 0);
  }
  ASSERT_EQ(al_config_agents_load(&o, &d), 0);
  ASSERT_EQ(d->n_files, AL_AGENTDEFS_MAX_FILES);
  ASSERT_NOT_NULL(al_agentdefs_find(d, "fits"));
  ASSERT_NOT_NULL(al_agentdefs_find(d, "n252"));
  ASSERT_NULL(al_agentdefs_find(d, "n253"));
  ASSERT_NOT_NULL(note_with(d, AL_AGENTDEFS_WARNING,
                            "6 agent files not read (from n253.md on)"));
  al_agentdefs_free(d);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}

typedef struct load_s {
  int calls;
  int status;
  al_agentdefs_t *defs;
} load_t;

static void on_loaded(al_agentdefs_req_t *req, int status, al_agentdefs_t *d,
                      void *data) {
  load_t *l = data;

  l->calls++;
  l->status = status;
  l->defs = d;
}

TEST_IMPL(agentdefs_load_in_pool) {
  char root[] = "/tmp/al-agentdefs-XXXXXX";
  char cfg[4096];
  al_agentdefs_options_t o;
  al_agentdefs_req_t *req;
  uv_loop_t loop;
  load_t l;
  int i;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(cfg, sizeof(cfg), "%s/cfg", root);
  agent_file(root, "cfg/agents", "rev.md", "rev", "user");
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al_agentdefs_options_init(&o);
  o.home = "";
  o.config_dir = cfg;

  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al_config_agents_load_start(&loop, &o, on_loaded, &l, &req), 0);
  ASSERT_NOT_NULL(req);
  ASSERT_EQ(l.calls, 0); /* never inside the call */
  ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ASSERT_EQ(l.calls, 1);
  ASSERT_EQ(l.status, 0);
  ASSERT_NOT_NULL(l.defs);
  ASSERT_STR_EQ(al_agentdefs_find(l.defs, "rev")->description, "user");
  al_agentdefs_free(l.defs);

  /* Cancelled before the pool starts it or while it reads (either may
   * happen): never called back, and the request frees itself. */
  for (i = 0; i < 20; i++) {
    memset(&l, 0, sizeof(l));
    ASSERT_EQ(al_config_agents_load_start(&loop, &o, on_loaded, &l, &req), 0);
    al_config_agents_load_cancel(req);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(l.calls, 0);
  }
  ASSERT_LOOP_CLOSES(&loop);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}

/* ---- allocation failures ------------------------------------------------ */

/* Fails allocation number fail_at (1-based) through the al_ hook. */
static int alloc_count;
static int alloc_fail_at;

static void *fail_malloc(size_t n) {
  return ++alloc_count == alloc_fail_at ? NULL : malloc(n);
}

static void *fail_realloc(void *p, size_t n) {
  return ++alloc_count == alloc_fail_at ? NULL : realloc(p, n);
}

static void *fail_calloc(size_t c, size_t n) {
  return ++alloc_count == alloc_fail_at ? NULL : calloc(c, n);
}

/* Every allocation of a load, a file's parse and the listing fails in
 * turn: AL_ENOMEM, never a crash or a half-built set (valgrind or ASan
 * see the leaks). */
TEST_IMPL(agentdefs_alloc_failure) {
  char root[] = "/tmp/al-agentdefs-XXXXXX";
  char cfg[4096];
  al_agentdefs_options_t o;
  al_agentdefs_t *d;
  size_t len;
  char *text = al_test_read_file(
      al_test_data_path("agents/claude/code-reviewer.md"), &len);
  int k, rc;
  bool done = false;

  ASSERT_NOT_NULL(text);
  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(cfg, sizeof(cfg), "%s/cfg", root);
  agent_file(root, "cfg/agents", "a.md", "a", "first");
  agent_file(root, "cfg/agents", "b.md", "A", "second, the same name");
  al_agentdefs_options_init(&o);
  o.home = "";
  o.config_dir = cfg;
  ASSERT_EQ(al_set_allocator(fail_malloc, fail_realloc, fail_calloc, free), 0);
  for (k = 1; !done; k++) {
    ASSERT(k < 10000);
    alloc_count = 0;
    alloc_fail_at = k;
    rc = al_config_agents_load(&o, &d);
    if (rc != 0) {
      ASSERT_EQ(rc, AL_ENOMEM);
      ASSERT_NULL(d);
      continue;
    }
    rc = al_agentdefs_add_text(d, "r.md", text, len);
    ASSERT(rc == 0 || rc == AL_ENOMEM);
    ASSERT_NOT_NULL(al_agentdefs_find(d, "a"));
    al_agentdefs_free(d);
    done = alloc_count < alloc_fail_at;
  }
  ASSERT_GE(k, 20);
  alloc_fail_at = 0;
  free(text);
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}

/* A project's .claude/agents is bound to its trust as .agentloop/ is
 * (src/tools/trust.c): an agent file added after the trust withholds the
 * project's set (its prompt and tool list steer a child) until approved
 * again. */
TEST_IMPL(agentdefs_claude_dir_bound_to_trust) {
  char root[] = "/tmp/al-agentdefs-XXXXXX";
  char cfg[4096], ws[4096];

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(cfg, sizeof(cfg), "%s/cfg", root);
  snprintf(ws, sizeof(ws), "%s/proj", root);
  mkdirs(root, "cfg");
  mkdirs(root, "proj/.claude");
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", cfg, 1), 0);
  ASSERT_EQ(al__tools_trust_project(ws, NULL), 0);
  ASSERT(al__tools_project_trusted(ws));
  /* Claude Code's other files in .claude/ are not ours to bind. */
  agent_file(root, "proj/.claude", "settings.local.json", "x", "y");
  ASSERT(al__tools_project_trusted(ws));
  agent_file(root, "proj/.claude/agents", "rev.md", "rev", "added later");
  ASSERT(!al__tools_project_trusted(ws));
  ASSERT_EQ(al__tools_trust_project(ws, NULL), 0);
  ASSERT(al__tools_project_trusted(ws));
  ASSERT_EQ(al_test_rm_tree(root), 0);
  return 0;
}
