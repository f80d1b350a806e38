/* The agent's tools (STYLE §6.1, SPEC §6, §8): the registry (the tool
 * list and the definitions offered to the model), the built-ins, and the
 * sandbox and tools.d set-up. Every registered tool is wrapped in the
 * permission gate (gate.c), which the executor sees. Owns a->reg with
 * inproc.c (the in-process tools' contexts, a->reg.live_ctx); mcp_attach.c
 * registers its tools through the functions here. */
#include <dirent.h>
#include <ctype.h>
#include <string.h>
#include <sys/stat.h>

#include "loop/agent_priv.h"
#include "loop/task.h"
#include "sandbox/launch.h"
#include "sandbox/pool.h"
#include "sandbox/sandbox.h"
#include "tools/bash.h"
#include "tools/clitool.h"
#include "tools/tools.h"

/* ---- the registry -------------------------------------------------------- */

static void tool_free(ag_tool_t *t) {
  if (t->inner != NULL && t->free_inner != NULL) {
    t->free_inner(t->inner);
  }
  al_free(t->name);
  al_free(t->description);
  al_free(t->mcp_tool);
  json_decref(t->schema);
  al_free(t);
}

ag_tool_t *al__agent_tool_find(al_agent_t *a, const char *name) {
  al_list_t *pos;

  al_list_foreach(pos, &a->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);

    if (!t->removed && strcmp(t->name, name) == 0) {
      return t;
    }
  }
  return NULL;
}

const al_tool_impl_t *al__agent_lookup(al_executor_t *ex, const char *name) {
  ag_exec_t *box = AL_CONTAINER_OF(ex, ag_exec_t, ex);
  ag_tool_t *t = al__agent_tool_find(box->agent, name);

  return t != NULL ? &t->gate : al__agent_mcp_lookup(box->agent, name);
}

static bool name_ok(const char *name) {
  size_t i;

  if (name == NULL || name[0] == '\0' || strlen(name) > 64) {
    return false;
  }
  for (i = 0; name[i] != '\0'; i++) {
    if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-') {
      return false;
    }
  }
  return true;
}

static bool in_strv(char *const *l, const char *name) {
  size_t i;

  for (i = 0; l != NULL && l[i] != NULL; i++) {
    if (strcmp(l[i], name) == 0) {
      return true;
    }
  }
  return false;
}

/* tools_only / tools_never. mcp_tool_search is the loop's way to reach
 * deferred MCP tools, which pass this filter themselves: never filtered. */
static bool filter_allows(al_agent_t *a, const char *name) {
  if (strcmp(name, "mcp_tool_search") == 0) {
    return true;
  }
  return (a->reg.only == NULL || in_strv(a->reg.only, name)) &&
         !in_strv(a->reg.never, name);
}

int al__reg_filter_copy(al_agent_t *a, const al_agent_options_t *o) {
  return al__agent_strv_dup(o->tools_only, &a->reg.only) != 0 ||
                 al__agent_strv_dup(o->tools_never, &a->reg.never) != 0
             ? AL_ENOMEM
             : 0;
}

/* Registers a tool whose implementation is `inner` (NULL for in-process:
 * filled by the caller). On failure inner is freed. */
int al__agent_add_entry(al_agent_t *a, const char *name, al_tool_impl_t *inner,
                        void (*free_inner)(al_tool_impl_t *),
                        const char *description, const char *schema,
                        al_tool_category_t category, ag_tool_t **out) {
  ag_tool_t *t;
  json_t *def;
  json_error_t jerr;

  if (!name_ok(name) || description == NULL ||
      (unsigned)category > AL_TOOL_ADMIN) {
    goto inval;
  }
  if (al__agent_tool_find(a, name) != NULL) {
    if (inner != NULL && free_inner != NULL) {
      free_inner(inner);
    }
    return AL_EEXIST;
  }
  t = al_calloc(1, sizeof(*t));
  if (t == NULL) {
    goto nomem;
  }
  t->agent = a;
  t->inner = inner;
  t->free_inner = free_inner;
  t->category = category;
  t->name = al_strdup(name);
  t->description = al_strdup(description);
  if (schema != NULL) {
    t->schema = json_loads(schema, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(t->schema)) {
      tool_free(t);
      return AL_EINVAL;
    }
  } else {
    t->schema = json_pack("{s:s, s:{}}", "type", "object", "properties");
  }
  if (t->name == NULL || t->description == NULL || t->schema == NULL) {
    tool_free(t);
    return AL_ENOMEM;
  }
  def = json_pack("{s:s, s:s, s:O}", "name", t->name, "description",
                  t->description, "input_schema", t->schema);
  if (def == NULL || json_array_append_new(a->reg.tool_defs, def) != 0) {
    tool_free(t);
    return AL_ENOMEM;
  }
  t->source = "builtin";
  al__gate_bind(t);
  al_list_insert_tail(&a->reg.tools, &t->node);
  /* Registered and at once retired, not refused: every caller goes on as
   * for any tool, and a retired tool is never offered, found or lent. */
  if (!filter_allows(a, t->name)) {
    al__agent_tool_retire(a, t);
  }
  if (out != NULL) {
    *out = t;
  }
  return 0;
inval:
  if (inner != NULL && free_inner != NULL) {
    free_inner(inner);
  }
  return AL_EINVAL;
nomem:
  if (inner != NULL && free_inner != NULL) {
    free_inner(inner);
  }
  return AL_ENOMEM;
}

/* ---- built-ins ----------------------------------------------------------- */

static const char bash_desc[] =
    "Run a shell command with /bin/sh -c in the workspace and return its "
    "output (stdout, then stderr) and exit status. Use it for builds, tests "
    "and inspecting the system. It runs alone: no other tool runs beside it.";
static const char bash_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"type\":\"string\",\"description\":\"The command line.\"},"
    "\"timeout\":{\"type\":\"number\",\"description\":\"Seconds before the "
    "command is killed (default 120).\"}},\"required\":[\"command\"]}";
static const char read_desc[] =
    "Read a text file in the workspace. Optional offset (1-based first line) "
    "and limit (number of lines) select a part of a long file; with either, "
    "each line is shown after its line number and a tab (the number and "
    "tab are not part of the file).";
static const char read_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"File path, relative to "
    "the workspace or absolute.\"},"
    "\"offset\":{\"type\":\"integer\",\"description\":\"First line, "
    "1-based.\"},"
    "\"limit\":{\"type\":\"integer\",\"description\":\"Number of lines.\"}},"
    "\"required\":[\"path\"]}";
static const char write_desc[] =
    "Write a file in the workspace, replacing its content; missing parent "
    "directories are created.";
static const char write_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"File path.\"},"
    "\"content\":{\"type\":\"string\",\"description\":\"The new content.\"}},"
    "\"required\":[\"path\",\"content\"]}";
static const char edit_desc[] =
    "Edit a file in the workspace by exact string replacement: old_string "
    "must match the file's text exactly (whitespace included) and occur "
    "exactly once, unless replace_all is true. Include enough surrounding "
    "lines to make it unique. An empty old_string creates a new file with "
    "new_string as its content. The result shows the change as a unified "
    "diff. Read the file first; prefer this to write_file for changes to "
    "existing files.";
static const char edit_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"File path.\"},"
    "\"old_string\":{\"type\":\"string\",\"description\":\"The exact text "
    "to replace (empty: create a new file).\"},"
    "\"new_string\":{\"type\":\"string\",\"description\":\"The text to put "
    "in its place.\"},"
    "\"replace_all\":{\"type\":\"boolean\",\"description\":\"Replace every "
    "occurrence (default false).\"}},"
    "\"required\":[\"path\",\"old_string\",\"new_string\"]}";
static const char grep_desc[] =
    "Search file contents with a POSIX extended regular expression, per "
    "line, under a directory of the workspace (or in one file). Skips .git, "
    "what .gitignore files ignore, and binary files. output_mode: "
    "\"content\" (default: path:line:text), \"files_with_matches\" or "
    "\"count\". Read-only; prefer it to bash grep.";
static const char grep_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pattern\":{\"type\":\"string\",\"description\":\"Extended regular "
    "expression.\"},"
    "\"path\":{\"type\":\"string\",\"description\":\"Directory or file "
    "(default: the workspace root).\"},"
    "\"glob\":{\"type\":\"string\",\"description\":\"Only files matching "
    "this glob, e.g. *.c or src/**/*.h.\"},"
    "\"ignore_case\":{\"type\":\"boolean\"},"
    "\"output_mode\":{\"type\":\"string\",\"enum\":[\"content\","
    "\"files_with_matches\",\"count\"]}},"
    "\"required\":[\"pattern\"]}";
static const char glob_desc[] =
    "Find files by name pattern under a directory of the workspace: \"*\" "
    "and \"?\" within a path component, \"**\" across directories "
    "(src/**/*.c); a pattern without \"/\" matches file names at any depth. "
    "Skips .git and what .gitignore files ignore. Read-only.";
static const char glob_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pattern\":{\"type\":\"string\",\"description\":\"Glob pattern.\"},"
    "\"path\":{\"type\":\"string\",\"description\":\"Directory to search "
    "(default: the workspace root).\"}},"
    "\"required\":[\"pattern\"]}";
static const char list_desc[] =
    "List a directory of the workspace: one entry per line, '/' after "
    "directories, '@' after symbolic links.";
static const char list_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"Directory (default: the "
    "workspace root).\"}}}";
static const char done_desc[] =
    "Finish the task: call it once everything is done, with the final "
    "message for the user. It ends the run.";
static const char done_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"message\":{\"type\":\"string\",\"description\":\"The final answer.\"}},"
    "\"required\":[\"message\"]}";

static size_t count_list(char *const *l) {
  size_t n = 0;

  while (l != NULL && l[n] != NULL) {
    n++;
  }
  return n;
}

int al__agent_tools_init(al_agent_t *a) {
  al_fstools_options_t fo;
  al_bash_options_t bo;
  al_tool_impl_t *impl;
  ag_tool_t *t;
  int rc;

  al__fstools_options_init(&fo);
  fo.loop = a->loop;
  fo.workspace = a->workspace;
  fo.allowed_paths = (const char *const *)a->allowed_paths;
  fo.n_allowed_paths = count_list(a->allowed_paths);
  fo.denied_paths = (const char *const *)a->denied_paths;
  fo.n_denied_paths = count_list(a->denied_paths);
  /* limits (agentloop/limits.h): 0 the default, "none" no bound */
  if (a->limits.file_scan_bytes != 0) {
    fo.scan_max = a->limits.file_scan_bytes > 0
                      ? (size_t)a->limits.file_scan_bytes
                      : SIZE_MAX;
  }
  if (a->limits.file_time_ms != 0) {
    fo.time_limit_ms = a->limits.file_time_ms > 0
                           ? (uint64_t)a->limits.file_time_ms
                           : 0;
  }

  al__bash_options_init(&bo);
  bo.loop = a->loop;
  bo.workspace = a->workspace;
  bo.sandbox = a->reg.sandbox;
  bo.timeout_ms = a->tool_timeout_ms;
  bo.kill_grace_ms = a->kill_grace_ms;
  bo.network = a->bash_network;

  if ((rc = al__bash_tool_new(&bo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "bash", impl, al__bash_tool_free, bash_desc,
                      bash_schema, AL_TOOL_WRITE, &t)) != 0) {
    return rc;
  }
  t->spawns = true;
  if ((rc = al__read_file_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "read_file", impl, al__fstool_free,
                                read_desc, read_schema, AL_TOOL_READ, NULL)) !=
          0) {
    return rc;
  }
  if ((rc = al__write_file_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "write_file", impl, al__fstool_free,
                                write_desc, write_schema, AL_TOOL_WRITE,
                                NULL)) != 0) {
    return rc;
  }
  if ((rc = al__edit_file_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "edit_file", impl, al__fstool_free,
                                edit_desc, edit_schema, AL_TOOL_WRITE, NULL)) !=
          0) {
    return rc;
  }
  if ((rc = al__list_directory_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "list_directory", impl, al__fstool_free,
                                list_desc, list_schema, AL_TOOL_READ, NULL)) !=
          0) {
    return rc;
  }
  if ((rc = al__grep_tool_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "grep", impl, al__search_tool_free,
                                grep_desc, grep_schema, AL_TOOL_READ, NULL)) !=
          0) {
    return rc;
  }
  if ((rc = al__glob_tool_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "glob", impl, al__search_tool_free,
                                glob_desc, glob_schema, AL_TOOL_READ, NULL)) !=
          0) {
    return rc;
  }
  if ((rc = al__done_tool_new(&fo, &impl)) != 0 ||
      (rc = al__agent_add_entry(a, "done", impl, al__fstool_free, done_desc,
                      done_schema, AL_TOOL_READ, NULL)) != 0) {
    return rc;
  }
  return 0;
}

/* ---- sandbox and tools.d ------------------------------------------------- */

static void free_tools_d(al_agent_t *a) {
  if (a->reg.cli_set != NULL) {
    al__cli_set_free(a->reg.cli_set);
    al_free(a->reg.cli_set);
    a->reg.cli_set = NULL;
  }
  al_free(a->reg.project_tools_d);
  a->reg.project_tools_d = NULL;
}

/* Whether the directory holds a file the tools.d loader would read (a
 * name ending .yaml or .yml, not hidden): a README or a .gitkeep is no
 * tool to skip. */
static bool dir_has_tool_file(const char *path) {
  DIR *d = opendir(path);
  struct dirent *de;
  bool any = false;

  while (d != NULL && !any && (de = readdir(d)) != NULL) {
    size_t l = strlen(de->d_name);

    any = de->d_name[0] != '.' &&
          ((l > 5 && strcmp(de->d_name + l - 5, ".yaml") == 0) ||
           (l > 4 && strcmp(de->d_name + l - 4, ".yml") == 0));
  }
  if (d != NULL) {
    closedir(d);
  }
  return any || d == NULL; /* unreadable: say so as before */
}

int al__agent_sandbox_init(al_agent_t *a, const al_agent_options_t *o) {
  al_sandbox_config_t cfg;
  al_cli_set_t *set;
  const char *const *extra = o->tools_dirs;
  char buf[4096];
  const char *cfgdir;
  size_t n_roots = count_list(a->allowed_paths);
  const al_agent_t *lender;
  const char **roots;
  size_t i;
  int rc;

  if ((unsigned)o->sandbox > AL_SANDBOX_OFF) {
    return AL_EINVAL;
  }
  /* A child borrows its parent's sandbox and warm pool, and has no
   * tools.d of its own (the parent's tools are lent, task.c). */
  if ((lender = al__task_spawning_parent(a)) != NULL) {
    a->reg.sandbox = lender->reg.sandbox;
    a->reg.sandbox_info = lender->reg.sandbox_info;
    a->reg.sandbox_refuse = lender->reg.sandbox_refuse;
    a->reg.sandbox_borrowed = true;
    return 0;
  }
  a->reg.sandbox_info.mode = AL_SANDBOX_MODE_NONE;
  if (!o->builtin_tools && !o->tools_d &&
      (extra == NULL || extra[0] == NULL)) {
    return 0; /* nothing here starts a child */
  }
  /* Writable roots: the workspace, then the allowed paths. */
  roots = al_calloc(n_roots + 2, sizeof(*roots));
  if (roots == NULL) {
    return AL_ENOMEM;
  }
  roots[0] = a->workspace;
  for (i = 0; i < n_roots; i++) {
    roots[i + 1] = a->allowed_paths[i];
  }
  al__sandbox_config_init(&cfg);
  cfg.policy = o->sandbox;
  cfg.probe.bwrap = o->sandbox_bwrap;
  cfg.probe.helper = o->sandbox_helper;
  cfg.probe.no_landlock = o->sandbox_no_landlock;
  cfg.write_roots = roots;
  cfg.n_write_roots = n_roots + 1;
  cfg.hidden = (const char *const *)a->denied_paths;
  cfg.n_hidden = count_list(a->denied_paths);
  /* limits (agentloop/limits.h): 0 the default, "none" no bound */
  if (o->limits.tool_processes != 0) {
    cfg.nproc = o->limits.tool_processes > 0
                    ? (uint64_t)o->limits.tool_processes
                    : UINT64_MAX;
  }
  if (o->limits.tool_memory_bytes != 0) {
    cfg.data_bytes = o->limits.tool_memory_bytes > 0
                         ? (uint64_t)o->limits.tool_memory_bytes
                         : UINT64_MAX;
  }
  rc = al__sandbox_new(&cfg, &a->reg.sandbox, &a->reg.sandbox_info);
  al_free(roots);
  if (rc != 0) {
    return rc;
  }
  a->reg.sandbox_refuse = o->sandbox == AL_SANDBOX_AUTO &&
                      a->reg.sandbox_info.mode == AL_SANDBOX_MODE_NONE;
  /* bwrap mode: the first sandboxes are built now, on the threadpool. */
  rc = al__pool_start(a->loop, a->reg.sandbox, (size_t)a->concurrency, 0);
  if (rc != 0) {
    return rc;
  }
  /* Where tools get a cgroup: a cold start finds it joined already. */
  rc = al__launch_start(a->loop, a->reg.sandbox, 0);
  if (rc != 0) {
    return rc;
  }
  if (al__sandbox_helper_in_roots(a->reg.sandbox, buf, sizeof(buf))) {
    /* The file tools run outside the sandbox: they must not replace the
     * helper either. */
    size_t n = count_list(a->denied_paths);
    char **nv = al_realloc(a->denied_paths, (n + 2) * sizeof(*nv));

    if (nv == NULL) {
      return AL_ENOMEM;
    }
    a->denied_paths = nv;
    nv[n] = al_strdup(buf);
    nv[n + 1] = NULL;
    if (nv[n] == NULL) {
      return AL_ENOMEM;
    }
  }

  set = al_calloc(1, sizeof(*set));
  if (set == NULL) {
    return AL_ENOMEM;
  }
  al__cli_set_init(set);
  a->reg.cli_set = set;
  rc = 0;
  if (o->tools_d) {
    /* Project tools.d first (SPEC §8), only when trusted: its files are
     * code from the repository. */
    struct stat st;

    snprintf(buf, sizeof(buf), "%s/tools.d", a->workspace);
    /* One without tool files holds no tools to skip (an empty one may
     * be an older agentloop's placeholder). Trust is bound to the
     * content of tools.d/, .agentloop/ and .mcp.json (tools/trust.c). */
    if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode) &&
        dir_has_tool_file(buf)) {
      a->reg.project_tools_d = al_strdup(buf);
      if (a->reg.project_tools_d == NULL) {
        return AL_ENOMEM;
      }
      a->reg.project_trusted =
          o->trust_project || al__tools_project_trusted(a->workspace);
      if (a->reg.project_trusted) {
        rc = al__cli_load_dir(set, buf, true);
      }
    }
    cfgdir = al__tools_config_dir(buf, sizeof(buf));
    if (rc == 0 && cfgdir != NULL) {
      char dir[4200];

      snprintf(dir, sizeof(dir), "%s/tools.d", cfgdir);
      rc = al__cli_load_dir(set, dir, false);
    }
  }
  for (i = 0; rc == 0 && extra != NULL && extra[i] != NULL; i++) {
    rc = al__cli_load_dir(set, extra[i], false);
  }
  return rc;
}

int al__agent_cli_tools_init(al_agent_t *a) {
  al_cli_set_t *set = a->reg.cli_set;
  al_clitool_options_t co;
  size_t i;

  if (set == NULL) {
    return 0;
  }
  al__clitool_options_init(&co);
  co.loop = a->loop;
  co.workspace = a->workspace;
  co.sandbox = a->reg.sandbox;
  if (a->kill_grace_ms > 0) {
    co.kill_grace_ms = a->kill_grace_ms;
  }
  for (i = 0; i < set->n; i++) {
    al_cli_def_t *d = set->defs[i];
    al_tool_impl_t *impl;
    json_t *schema = al__cli_def_schema(d);
    char *st = schema != NULL ? json_dumps(schema, JSON_COMPACT) : NULL;
    ag_tool_t *t = NULL;
    int rc;

    json_decref(schema);
    if (st == NULL) {
      return AL_ENOMEM;
    }
    rc = al__clitool_new(&co, d, &impl);
    if (rc == 0) {
      rc = al__agent_add_entry(a, d->name, impl, al__clitool_free,
                               d->description, st, d->category, &t);
    }
    al_free(st);
    if (rc == AL_EEXIST) {
      al__cli_set_error(set, d->file, d->line, 1,
                        "tool '%s' is already defined (a built-in or "
                        "in-process tool)",
                        d->name);
      continue;
    }
    if (rc != 0) {
      return rc;
    }
    t->spawns = true;
    t->source = d->file;
  }
  return 0;
}

int al_agent_tools_json(const al_agent_t *a, char **out) {
  json_t *o = json_object();
  json_t *tools = json_array();
  json_t *errs = json_array();
  json_t *sb = NULL;
  char *sbtext = NULL;
  al_list_t *pos;
  char *s;

  *out = NULL;
  if (al_sandbox_info_json(&a->reg.sandbox_info, &sbtext) == 0) {
    sb = json_loads(sbtext, 0, NULL);
    al_free(sbtext);
  }
  if (o == NULL || tools == NULL || errs == NULL || sb == NULL) {
    goto nomem;
  }
  al_list_foreach(pos, &a->reg.tools) {
    ag_tool_t *t = AL_CONTAINER_OF(pos, ag_tool_t, node);

    if (t->removed) {
      continue;
    }
    json_array_append_new(
        tools, json_pack("{s:s, s:s, s:s, s:s, s:O}", "name", t->name,
                         "description", t->description, "category",
                         al__tool_category_name(t->category), "source",
                         t->source != NULL ? t->source : "builtin",
                         "input_schema", t->schema));
  }
  if (a->reg.cli_set != NULL) {
    const al_cli_set_t *set = a->reg.cli_set;
    const char *p = set->errors.data;

    while (p != NULL && *p != '\0') {
      const char *nl = strchr(p, '\n');
      size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);

      json_array_append_new(errs, json_stringn(p, n));
      p += n + (nl != NULL ? 1 : 0);
    }
  }
  json_object_set_new(o, "sandbox", sb);
  json_object_set_new(o, "tools", tools);
  json_object_set_new(o, "mcp_servers", al__agent_mcp_json(a));
  json_object_set_new(o, "errors", errs);
  if (a->reg.project_tools_d != NULL) {
    json_object_set_new(o, "project_tools_d",
                        json_pack("{s:s, s:b}", "path", a->reg.project_tools_d,
                                  "trusted", a->reg.project_trusted));
  }
  s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (s == NULL) {
    return AL_ENOMEM;
  }
  *out = s; /* jansson allocates through al_malloc */
  return 0;
nomem:
  json_decref(o);
  json_decref(tools);
  json_decref(errs);
  json_decref(sb);
  return AL_ENOMEM;
}

void al__agent_tools_free(al_agent_t *a) {
  while (!al_list_empty(&a->reg.tools)) {
    ag_tool_t *t = AL_CONTAINER_OF(a->reg.tools.next, ag_tool_t, node);

    al_list_remove(&t->node);
    if (t->inproc) {
      t->inner = NULL;
    }
    tool_free(t);
  }
  al__policy_approvals_free(a);
  al__agent_hooks_free(a);
  al__agent_mcp_free(a);
  /* The tools are gone, so no child uses them any more. */
  free_tools_d(a);
  if (!a->reg.sandbox_borrowed) { /* a child's is its parent's */
    al__sandbox_free(a->reg.sandbox);
  }
  a->reg.sandbox = NULL;
  /* The offered definitions (al__reg_init's array): nobody frees them
   * otherwise since the cut (LeakSanitizer, every agent). */
  json_decref(a->reg.tool_defs);
  a->reg.tool_defs = NULL;
  al__agent_strv_free(a->reg.only);
  al__agent_strv_free(a->reg.never);
  a->reg.only = a->reg.never = NULL;
}

void *al__agent_sandbox(const al_agent_t *a) { return a->reg.sandbox; }

void al__reg_init(al_agent_t *a) {
  al_list_init(&a->reg.tools);
  a->reg.tool_defs = json_array();
}

/* The definitions offered to the model (mcp_attach.c changes them at a
 * turn boundary: tools listed late, removed, deferred or loaded). */
void al__reg_def_remove(al_agent_t *a, const char *name) {
  size_t i;
  json_t *d;

  json_array_foreach(a->reg.tool_defs, i, d) {
    const char *n = json_string_value(json_object_get(d, "name"));

    if (n != NULL && strcmp(n, name) == 0) {
      json_array_remove(a->reg.tool_defs, i);
      return;
    }
  }
}

int al__reg_def_add(al_agent_t *a, const ag_tool_t *t) {
  return json_array_append_new(
      a->reg.tool_defs, json_pack("{s:s, s:s, s:O}", "name", t->name,
                              "description", t->description, "input_schema",
                              t->schema));
}

/* ---- tools lent to a child (task.c) ------------------------------------- */

void al__agent_tool_retire(al_agent_t *a, ag_tool_t *t) {
  size_t i;
  json_t *d;

  t->removed = true;
  json_array_foreach(a->reg.tool_defs, i, d) {
    const char *n = json_string_value(json_object_get(d, "name"));

    if (n != NULL && strcmp(n, t->name) == 0) {
      json_array_remove(a->reg.tool_defs, i);
      return;
    }
  }
}

int al__agent_lend_tool(al_agent_t *c, const ag_tool_t *pt) {
  ag_tool_t *ct;
  char *schema;
  int rc;

  schema = pt->schema != NULL ? json_dumps(pt->schema, JSON_COMPACT) : NULL;
  if (pt->inproc) {
    /* The same definition registered in the child, so its calls are the
     * child's (events, holds, close). */
    al_tool_def_t def = pt->def;

    def.name = pt->name;
    def.description = pt->description;
    def.input_schema = schema;
    def.category = pt->category;
    rc = al__agent_add_inproc(c, &def, &ct);
  } else if (pt->mcp != NULL) {
    /* The same server's tool, as the child's own entry: its calls and
     * their mcp_tool_call_* events are the child's. */
    rc = al__agent_add_entry(c, pt->name, NULL, NULL, pt->description, schema,
                             pt->category, &ct);
    if (rc == 0) {
      ct->mcp = pt->mcp;
      ct->mcp_tool = al_strdup(pt->mcp_tool);
      ct->mcp_safe = pt->mcp_safe;
      ct->mcp_impl = pt->mcp_impl;
      ct->mcp_impl.name = ct->name;
      ct->mcp_impl.data = ct;
      ct->inner = &ct->mcp_impl;
      if (ct->mcp_tool == NULL) {
        rc = AL_ENOMEM;
      }
    }
  } else {
    rc = al__agent_add_entry(c, pt->name, pt->inner, NULL, pt->description,
                             schema, pt->category, &ct);
  }
  al_free(schema);
  if (rc != 0) {
    return rc;
  }
  ct->source = pt->source;
  ct->spawns = pt->spawns;
  return 0;
}
