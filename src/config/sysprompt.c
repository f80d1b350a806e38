/* The system prompt (sysprompt.h). */
#include "config/sysprompt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#define MAX_DEPTH 64

/* Our base prompt: short, factual, in our own words. The environment
 * block is also the start of a child agent's preamble
 * (al_sysprompt_preamble). */
static const char INTRO[] =
    "You are agentloop, a coding agent working in a terminal on the user's "
    "machine. You act through tools; the user sees each call and its "
    "result.\n"
    "\n";
static const char ENV[] =
    "Environment:\n"
    "- Working directory: %s\n"
    "- Platform: %s\n"
    "- Date: %s\n"
    "- Sandbox: %s\n";
static const char HOWTO[] =
    "\n"
    "How to work:\n"
    "- Look before you act: list_directory and read_file (with offset and "
    "limit for large files) to learn the code, bash for commands such as "
    "builds, tests and git. Paths are relative to the working directory.\n"
    "- Change files with the file tools rather than shell redirection; "
    "prefer a small exact edit (edit_file, when offered) to rewriting a "
    "whole file. Keep to the style of the code around the change.\n"
    "- Independent tool calls may go in one reply: they run in parallel.\n"
    "- A call the permission policy or the sandbox refuses will be refused "
    "again: do not repeat it; choose another way or say what you need.\n"
    "- After a change, run the project's tests when it has them.\n"
    "- Be brief. When done, say what changed and what you did not "
    "check.\n";

static bool is_dir(const char *p) {
  struct stat st;

  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *p) {
  struct stat st;

  return lstat(p, &st) == 0;
}

/* Appends one instruction file under a heading, within *left bytes. */
static int add_file(al_buf_t *out, const char *path, size_t *left,
                    json_t *sources, al_buf_t *notices) {
  FILE *f = fopen(path, "re");
  char chunk[8192];
  size_t n, total = 0, kept = 0;
  bool cut = false;
  struct stat st;

  if (f == NULL) {
    return 0;
  }
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return 0;
  }
  if (al_buf_printf(out, "\n# Instructions from %s\n\n", path) != 0) {
    fclose(f);
    return AL_ENOMEM;
  }
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    size_t take = n < *left ? n : *left;

    total += n;
    if (take > 0 && al_buf_append(out, chunk, take) != 0) {
      fclose(f);
      return AL_ENOMEM;
    }
    kept += take;
    *left -= take;
    if (take < n) {
      cut = true;
    }
  }
  fclose(f);
  if (kept > 0 && out->data[out->len - 1] != '\n') {
    (void)al_buf_append_str(out, "\n");
  }
  if (cut) {
    (void)al_buf_printf(out, "[... %zu more bytes of this file left out: "
                             "instruction files share a %s cap]\n",
                        total - kept, "size");
    if (notices != NULL) {
      (void)al_buf_printf(notices, "system prompt: %s cut to %zu of %zu "
                                   "bytes (the instruction files' size "
                                   "cap)\n", path, kept, total);
    }
  }
  if (sources != NULL) {
    json_array_append_new(sources,
                          json_pack("{s:s, s:I, s:b}", "path", path, "bytes",
                                    (json_int_t)total, "cut", cut));
  }
  return 0;
}

static int add_dir(al_buf_t *out, const char *dir, size_t *left,
                   json_t *sources, al_buf_t *notices) {
  static const char *const names[] = {"AGENTS.md", "CLAUDE.md"};
  size_t i;
  int rc = 0;

  for (i = 0; i < AL_ARRAY_SIZE(names) && rc == 0; i++) {
    char p[PATH_MAX + 16];

    snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
    rc = add_file(out, p, left, sources, notices);
  }
  return rc;
}

/* The directories from the repository root down to ws (ws last) into
 * dirs (MAX_DEPTH entries); just ws when no parent has a .git. Returns how
 * many. */
static size_t project_dirs(const char *ws, char (*dirs)[PATH_MAX]) {
  char cur[PATH_MAX];
  size_t n = 0, i;
  bool found = false;

  if (realpath(ws, cur) == NULL) {
    snprintf(cur, sizeof(cur), "%s", ws);
  }
  while (n < MAX_DEPTH) {
    char git[PATH_MAX + 8];
    char *slash;

    snprintf(dirs[n++], PATH_MAX, "%s", cur);
    snprintf(git, sizeof(git), "%s/.git", cur);
    if (exists(git)) {
      found = true;
      break;
    }
    slash = strrchr(cur, '/');
    if (slash == NULL || slash == cur) {
      break;
    }
    *slash = '\0';
  }
  if (!found) {
    return 1;
  }
  for (i = 0; i < n / 2; i++) {
    char tmp[PATH_MAX];

    memcpy(tmp, dirs[i], PATH_MAX);
    memcpy(dirs[i], dirs[n - 1 - i], PATH_MAX);
    memcpy(dirs[n - 1 - i], tmp, PATH_MAX);
  }
  return n;
}

/* The environment block, then the user's and the project's instruction
 * files (parts 1 and 2-3 of sysprompt.h), within *left bytes. */
static int add_env_and_files(const al_sysprompt_options_t *o, bool howto,
                             al_buf_t *out, size_t *left, json_t *src,
                             al_buf_t *notices) {
  struct utsname u;
  char platform[400];
  char date[32];
  char cfgdir[4096];
  time_t now = o->now != 0 ? o->now : time(NULL);
  struct tm tm;
  const char *cdir = o->config_dir;
  char (*dirs)[PATH_MAX] = al_malloc(MAX_DEPTH * sizeof(*dirs));
  size_t nd, i;
  int rc;

  if (dirs == NULL) {
    return AL_ENOMEM;
  }
  if (uname(&u) == 0) {
    snprintf(platform, sizeof(platform), "%s %s (%s)", u.sysname, u.release,
             u.machine);
  } else {
    snprintf(platform, sizeof(platform), "unknown");
  }
  gmtime_r(&now, &tm);
  strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  rc = al_buf_printf(out, ENV, o->workspace, platform, date,
                     o->sandbox != NULL ? o->sandbox : "unknown");
  if (rc == 0 && howto) {
    rc = al_buf_append_str(out, HOWTO);
  }
  if (cdir == NULL) {
    cdir = al_config_dir(cfgdir, sizeof(cfgdir));
  }
  if (rc == 0 && cdir != NULL && is_dir(cdir)) {
    rc = add_dir(out, cdir, left, src, notices);
  }
  nd = project_dirs(o->workspace, dirs);
  for (i = 0; i < nd && rc == 0; i++) {
    if (cdir == NULL || strcmp(dirs[i], cdir) != 0) {
      rc = add_dir(out, dirs[i], left, src, notices);
    }
  }
  al_free(dirs);
  return rc;
}

int al_sysprompt_preamble(const al_sysprompt_options_t *o, al_buf_t *out,
                          al_buf_t *notices) {
  size_t left = o->cap != 0 ? o->cap : AL_SYSPROMPT_DEFAULT_CAP;
  int rc = add_env_and_files(o, false, out, &left, NULL, notices);

  if (rc == 0 && out->data == NULL) {
    rc = al_buf_append_str(out, "");
  }
  return rc != 0 ? AL_ENOMEM : 0;
}

int al_sysprompt_build(const al_sysprompt_options_t *o, al_buf_t *out,
                       json_t **sources, al_buf_t *notices) {
  size_t left = o->cap != 0 ? o->cap : AL_SYSPROMPT_DEFAULT_CAP;
  json_t *src = json_array();
  int rc;

  if (src == NULL) {
    return AL_ENOMEM;
  }
  rc = al_buf_append_str(out, INTRO);
  if (rc == 0) {
    rc = add_env_and_files(o, true, out, &left, src, notices);
  }
  if (rc == 0 && o->cfg != NULL && o->cfg->system_prompt.file != NULL) {
    char *p = al_config_path(o->cfg, "system_prompt.file",
                             o->cfg->system_prompt.file, o->workspace);

    if (p == NULL) {
      rc = AL_ENOMEM;
    } else {
      if (!exists(p) && notices != NULL) {
        (void)al_buf_printf(notices, "system prompt: system_prompt.file %s: "
                                     "%s\n", p, strerror(ENOENT));
      }
      rc = add_file(out, p, &left, src, notices);
      al_free(p);
    }
  }
  if (rc == 0 && o->cfg != NULL && o->cfg->system_prompt.append != NULL) {
    rc = al_buf_printf(out, "\n%s\n", o->cfg->system_prompt.append);
  }
  if (rc == 0 && o->extra != NULL && o->extra[0] != '\0') {
    rc = al_buf_printf(out, "\n%s%s", o->extra,
                       o->extra[strlen(o->extra) - 1] == '\n' ? "" : "\n");
  }
  if (rc == 0 && out->data == NULL) {
    rc = al_buf_append_str(out, "");
  }
  if (sources != NULL && rc == 0) {
    *sources = src;
  } else {
    json_decref(src);
  }
  return rc != 0 ? AL_ENOMEM : 0;
}
