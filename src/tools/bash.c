/* The bash built-in tool: see bash.h for the contract.
 *
 * One run_t per spawned call, held in call->tool_data; the spawn's on_done
 * completes the call and frees the run. A result known up front (bad
 * input, blocked, spawn failure) comes from al__tool_fail_later's zero
 * timer, and the run is freed at once. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "provider/provider.h"
#include "tools/bash.h"
#include "tools/spawn.h"
#include "tools/tools.h"

typedef struct bash_tool_s {
  al_tool_impl_t impl;
  uv_loop_t *loop;
  char *workspace;
  char *shell;
  char **env; /* NULL-terminated copy, or NULL */
  size_t output_max;
  size_t display_max;
  uint64_t timeout_ms;
  uint64_t max_timeout_ms;
  uint64_t kill_grace_ms;
  uint64_t drain_ms;
  al_sandbox_t *sandbox;
  bool network;
} bash_tool_t;

typedef struct run_s {
  bash_tool_t *tool;
  al_tool_call_t *call;
  al_spawn_t *sp;
  uint64_t timeout_ms;
} run_t;

void al__bash_options_init(al_bash_options_t *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->shell = "/bin/sh";
  opts->output_max = AL_SPAWN_DEFAULT_OUTPUT_MAX;
  opts->display_max = AL_BASH_DEFAULT_DISPLAY_MAX;
  opts->timeout_ms = AL_SPAWN_DEFAULT_TIMEOUT_MS;
  opts->max_timeout_ms = AL_BASH_DEFAULT_MAX_TIMEOUT_MS;
  opts->kill_grace_ms = AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  opts->drain_ms = AL_SPAWN_DEFAULT_DRAIN_MS;
}

/* ---- blocklist ----------------------------------------------------------- */

#define MAX_WORDS 64
#define MAX_DEPTH 4

typedef struct words_s {
  char *w[MAX_WORDS];
  size_t n;
} words_t;

static const char *check_command(const char *cmd, int depth);

static const char *base_name(const char *w) {
  const char *s = strrchr(w, '/');

  return s != NULL && s[1] != '\0' ? s + 1 : w;
}

static bool is_assignment(const char *w) {
  const char *p = w;

  if (!(isalpha((unsigned char)*p) || *p == '_')) {
    return false;
  }
  while (isalnum((unsigned char)*p) || *p == '_') {
    p++;
  }
  return *p == '=';
}

/* "/" or a top-level directory, "~", $HOME, after stripping trailing
 * slashes and a trailing "/\*" or "/.". */
static bool dangerous_rm_target(const char *w) {
  char t[256];
  size_t n = strlen(w);
  const char *slash;

  if (n == 0 || n >= sizeof(t)) {
    return false;
  }
  memcpy(t, w, n + 1);
  for (;;) {
    if (n > 1 && t[n - 1] == '/') {
      t[--n] = '\0';
    } else if (n >= 2 && t[n - 2] == '/' &&
               (t[n - 1] == '*' || t[n - 1] == '.')) {
      n -= 1;
      t[n] = '\0';
    } else {
      break;
    }
  }
  if (strcmp(t, "*") == 0 && w[0] == '/') {
    return true;
  }
  if (strcmp(t, "~") == 0 || strcmp(t, "$HOME") == 0 ||
      strcmp(t, "${HOME}") == 0 || strcmp(t, "/..") == 0) {
    return true;
  }
  if (t[0] == '/') {
    slash = strchr(t + 1, '/');
    return slash == NULL; /* "/" or "/etc" */
  }
  return false;
}

static bool is_recursive_flag(const char *w) {
  if (strcmp(w, "--recursive") == 0) {
    return true;
  }
  return w[0] == '-' && w[1] != '-' &&
         (strchr(w, 'r') != NULL || strchr(w, 'R') != NULL);
}

static const char *check_words(const words_t *ws, int depth) {
  size_t i = 0;
  size_t j;
  const char *cmd;

  /* Assignments and wrappers that run their arguments as a command. */
  while (i < ws->n) {
    const char *b = base_name(ws->w[i]);

    if (is_assignment(ws->w[i]) || strcmp(b, "command") == 0 ||
        strcmp(b, "exec") == 0 || strcmp(b, "nohup") == 0 ||
        strcmp(b, "time") == 0 || strcmp(b, "builtin") == 0 ||
        strcmp(b, "then") == 0 || strcmp(b, "do") == 0 ||
        strcmp(b, "else") == 0 || strcmp(b, "if") == 0 ||
        strcmp(b, "while") == 0 || strcmp(b, "until") == 0 ||
        strcmp(b, "!") == 0) {
      i++;
    } else if (strcmp(b, "env") == 0 || strcmp(b, "nice") == 0 ||
               strcmp(b, "xargs") == 0 || strcmp(b, "timeout") == 0) {
      i++;
      while (i < ws->n && (ws->w[i][0] == '-' || is_assignment(ws->w[i]) ||
                           isdigit((unsigned char)ws->w[i][0]))) {
        i++;
      }
    } else {
      break;
    }
  }
  if (i >= ws->n) {
    return NULL;
  }
  cmd = base_name(ws->w[i]);
  if (strcmp(cmd, "sudo") == 0 || strcmp(cmd, "su") == 0 ||
      strcmp(cmd, "doas") == 0 || strcmp(cmd, "pkexec") == 0) {
    return "privilege escalation (sudo, su, doas) is not allowed";
  }
  if (strcmp(cmd, "shutdown") == 0 || strcmp(cmd, "reboot") == 0 ||
      strcmp(cmd, "halt") == 0 || strcmp(cmd, "poweroff") == 0) {
    return "shutdown, reboot, halt and poweroff are not allowed";
  }
  if ((strcmp(cmd, "init") == 0 || strcmp(cmd, "telinit") == 0) &&
      i + 1 < ws->n &&
      (strcmp(ws->w[i + 1], "0") == 0 || strcmp(ws->w[i + 1], "6") == 0)) {
    return "shutdown, reboot, halt and poweroff are not allowed";
  }
  if (strcmp(cmd, "systemctl") == 0) {
    for (j = i + 1; j < ws->n; j++) {
      if (strcmp(ws->w[j], "poweroff") == 0 ||
          strcmp(ws->w[j], "reboot") == 0 || strcmp(ws->w[j], "halt") == 0) {
        return "shutdown, reboot, halt and poweroff are not allowed";
      }
    }
  }
  if (strcmp(cmd, "mkfs") == 0 || strncmp(cmd, "mkfs.", 5) == 0 ||
      strcmp(cmd, "mke2fs") == 0) {
    return "mkfs (formatting a filesystem) is not allowed";
  }
  if (strcmp(cmd, "dd") == 0) {
    for (j = i + 1; j < ws->n; j++) {
      const char *a = ws->w[j];

      if (strncmp(a, "of=/dev/", 8) == 0 && strcmp(a, "of=/dev/null") != 0 &&
          strcmp(a, "of=/dev/stdout") != 0 &&
          strcmp(a, "of=/dev/stderr") != 0) {
        return "dd to a device is not allowed";
      }
    }
  }
  if (strcmp(cmd, "chmod") == 0) {
    for (j = i + 1; j < ws->n; j++) {
      const char *a = ws->w[j];

      if (strcmp(a, "777") == 0 || strcmp(a, "0777") == 0 ||
          strcmp(a, "a+rwx") == 0 || strcmp(a, "ugo+rwx") == 0 ||
          strcmp(a, "a=rwx") == 0) {
        return "chmod 777 (world-writable permissions) is not allowed";
      }
    }
  }
  if (strcmp(cmd, "rm") == 0) {
    bool recursive = false;
    bool root_target = false;

    for (j = i + 1; j < ws->n; j++) {
      const char *a = ws->w[j];

      if (strcmp(a, "--no-preserve-root") == 0) {
        return "rm --no-preserve-root is not allowed";
      }
      if (is_recursive_flag(a)) {
        recursive = true;
      } else if (a[0] != '-' && dangerous_rm_target(a)) {
        root_target = true;
      }
    }
    if (recursive && root_target) {
      return "rm -rf of /, a top-level directory or the home directory is "
             "not allowed";
    }
  }
  if ((strcmp(cmd, "sh") == 0 || strcmp(cmd, "bash") == 0 ||
       strcmp(cmd, "dash") == 0 || strcmp(cmd, "zsh") == 0 ||
       strcmp(cmd, "ksh") == 0) &&
      depth < MAX_DEPTH) {
    for (j = i + 1; j + 1 < ws->n; j++) {
      if (strcmp(ws->w[j], "-c") == 0) {
        return check_command(ws->w[j + 1], depth + 1);
      }
    }
  }
  if (strcmp(cmd, "eval") == 0 && depth < MAX_DEPTH) {
    const char *r;

    for (j = i + 1; j < ws->n; j++) {
      r = check_command(ws->w[j], depth + 1);
      if (r != NULL) {
        return r;
      }
    }
  }
  return NULL;
}

/* A function that pipes into itself in the background: `:(){ :|:& };:`
 * and any renaming of it, whitespace ignored. */
static bool is_fork_bomb(const char *cmd) {
  char s[1024];
  size_t n = 0;
  const char *p;
  char *def;
  char *start;
  char pat[160];
  size_t nl;

  for (p = cmd; *p != '\0' && n + 1 < sizeof(s); p++) {
    if (!isspace((unsigned char)*p)) {
      s[n++] = *p;
    }
  }
  s[n] = '\0';
  for (def = strstr(s, "(){"); def != NULL; def = strstr(def + 1, "(){")) {
    start = def;
    while (start > s && strchr(";&|(){}\n", start[-1]) == NULL) {
      start--;
    }
    nl = (size_t)(def - start);
    if (nl == 0 || 2 * nl + 3 > sizeof(pat)) {
      continue;
    }
    memcpy(pat, start, nl);
    pat[nl] = '|';
    memcpy(pat + nl + 1, start, nl);
    pat[2 * nl + 1] = '\0';
    if (strstr(def, pat) != NULL) {
      return true;
    }
  }
  return false;
}

static void words_clear(words_t *ws) {
  size_t i;

  for (i = 0; i < ws->n; i++) {
    al_free(ws->w[i]);
  }
  ws->n = 0;
}

static const char *check_command(const char *cmd, int depth) {
  words_t ws;
  al_buf_t word;
  const char *p = cmd;
  const char *r = NULL;
  char q = 0;
  bool in_word = false;
  bool end_seg;

  if (is_fork_bomb(cmd)) {
    return "fork bombs are not allowed";
  }
  ws.n = 0;
  al_buf_init(&word, (size_t)-1);
  for (;; p++) {
    char c = *p;

    end_seg = false;
    if (c == '\0') {
      end_seg = true;
    } else if (q == '\'') {
      if (c == '\'') {
        q = 0;
      } else {
        al_buf_append(&word, &c, 1);
      }
      continue;
    } else if (q == '"') {
      if (c == '"') {
        q = 0;
      } else if (c == '\\' && p[1] != '\0') {
        al_buf_append(&word, ++p, 1);
      } else {
        al_buf_append(&word, &c, 1);
      }
      continue;
    } else if (c == '\'' || c == '"') {
      q = c;
      in_word = true;
      continue;
    } else if (c == '\\' && p[1] != '\0') {
      al_buf_append(&word, ++p, 1);
      in_word = true;
      continue;
    } else if (c == '$' && p[1] == '{') {
      /* ${VAR} stays one word. */
      while (*p != '\0' && *p != '}') {
        al_buf_append(&word, p++, 1);
      }
      if (*p == '}') {
        al_buf_append(&word, p, 1);
      } else {
        p--;
      }
      in_word = true;
      continue;
    } else if (strchr(";&|()`{}\n", c) != NULL ||
               (c == '$' && p[1] == '(')) {
      end_seg = true;
    } else if (isspace((unsigned char)c)) {
      /* ends the word below */
    } else {
      al_buf_append(&word, &c, 1);
      in_word = true;
      continue;
    }
    if (in_word) {
      if (ws.n < MAX_WORDS) {
        ws.w[ws.n++] = al_strndup(word.data != NULL ? word.data : "",
                                  word.len);
        if (ws.w[ws.n - 1] == NULL) {
          ws.n--;
        }
      }
      al_buf_reset(&word);
      in_word = false;
    }
    if (end_seg) {
      r = check_words(&ws, depth);
      words_clear(&ws);
      if (r != NULL || c == '\0') {
        break;
      }
    }
  }
  words_clear(&ws);
  al_buf_free(&word);
  return r;
}

const char *al__bash_blocked(const char *command) {
  return check_command(command, 0);
}

/* ---- the tool ------------------------------------------------------------ */

static void on_spawn_done(al_spawn_t *sp, const al_spawn_result_t *res) {
  run_t *run = sp->data;
  al_tool_call_t *call = run->call;
  size_t display_max = run->tool->display_max;
  uint64_t timeout_ms = run->timeout_ms;

  al_free(run);
  al__tool_complete_spawn(call, res, "bash", display_max, timeout_ms);
}

/* An error result known up front, delivered later (never inside start).
 * Takes msg (may be NULL: out of memory). */
static int refuse(run_t *run, char *msg) {
  uv_loop_t *loop = run->tool->loop;
  al_tool_call_t *call = run->call;

  al_free(run);
  return al__tool_fail_later(loop, call, msg);
}

static char *msgf(const char *fmt, const char *arg) {
  al_buf_t b;

  al_buf_init(&b, (size_t)-1);
  if (al_buf_printf(&b, fmt, arg) != 0) {
    al_buf_free(&b);
    return NULL;
  }
  return b.data;
}

static int bash_start(al_tool_call_t *call) {
  bash_tool_t *tool = call->impl->data;
  run_t *run;
  const json_t *jcmd = json_object_get(call->input, "command");
  const json_t *jto = json_object_get(call->input, "timeout");
  const char *cmd;
  const char *why;
  const char *argv[4];
  al_spawn_options_t so;
  int rc;

  run = al_calloc(1, sizeof(*run));
  if (run == NULL) {
    return AL_ENOMEM;
  }
  run->tool = tool;
  run->call = call;
  run->timeout_ms = tool->timeout_ms;
  call->tool_data = run;
  if (!json_is_string(jcmd) || json_string_length(jcmd) == 0) {
    return refuse(run, al_strdup("Error: bash requires a non-empty string "
                                 "\"command\""));
  }
  cmd = json_string_value(jcmd);
  if (strlen(cmd) != json_string_length(jcmd)) {
    return refuse(run, al_strdup("Error: the command contains a NUL byte"));
  }
  if (jto != NULL && !json_is_null(jto)) {
    double secs = json_number_value(jto);

    if (!json_is_number(jto) || !(secs > 0) || !isfinite(secs)) {
      return refuse(run, al_strdup("Error: \"timeout\" must be a positive "
                                   "number of seconds"));
    }
    if (secs * 1000.0 >= (double)tool->max_timeout_ms) {
      run->timeout_ms = tool->max_timeout_ms;
    } else {
      run->timeout_ms = (uint64_t)(secs * 1000.0);
      if (run->timeout_ms == 0) {
        run->timeout_ms = 1;
      }
    }
  }
  why = al__bash_blocked(cmd);
  if (why != NULL) {
    return refuse(run, msgf("Error: command blocked by the bash safety "
                            "blocklist: %s",
                            why));
  }
  argv[0] = tool->shell;
  argv[1] = "-c";
  argv[2] = cmd;
  argv[3] = NULL;
  al__spawn_options_init(&so);
  so.argv = argv;
  so.cwd = tool->workspace;
  so.env = (const char *const *)tool->env;
  so.output_max = tool->output_max;
  so.timeout_ms = run->timeout_ms;
  so.kill_grace_ms = tool->kill_grace_ms;
  so.drain_ms = tool->drain_ms;
  so.on_done = on_spawn_done;
  so.data = run;
  so.sandbox = tool->sandbox;
  so.async_start = true; /* bwrap cold: planned off the loop */
  so.network = tool->network;
  rc = al__spawn_start(tool->loop, &so, &run->sp);
  if (rc != 0) {
    al_buf_t b;

    al_buf_init(&b, (size_t)-1);
    if (al_buf_printf(&b, "Error: could not start %s: %s", tool->shell,
                      al_strerror(rc)) != 0) {
      al_buf_free(&b);
    }
    return refuse(run, b.data);
  }
  return 0;
}

static void bash_cancel(al_tool_call_t *call) {
  run_t *run = call->tool_data;

  /* A refusal completes from its timer anyway. */
  if (run != NULL && run->sp != NULL) {
    al__spawn_kill(run->sp);
  }
}

void al__bash_tool_free(al_tool_impl_t *impl) {
  bash_tool_t *tool;
  size_t i;

  if (impl == NULL) {
    return;
  }
  tool = AL_CONTAINER_OF(impl, bash_tool_t, impl);
  al_free(tool->workspace);
  al_free(tool->shell);
  for (i = 0; tool->env != NULL && tool->env[i] != NULL; i++) {
    al_free(tool->env[i]);
  }
  al_free(tool->env);
  al_free(tool);
}

int al__bash_tool_new(const al_bash_options_t *opts, al_tool_impl_t **out) {
  bash_tool_t *tool;
  size_t n = 0;
  size_t i;

  *out = NULL;
  if (opts == NULL || opts->loop == NULL || opts->workspace == NULL) {
    return AL_EINVAL;
  }
  for (i = 0; opts->env != NULL && opts->env[i] != NULL; i++) {
    const char *eq = strchr(opts->env[i], '=');

    if (eq == NULL || eq == opts->env[i]) {
      return AL_EINVAL;
    }
    n++;
  }
  tool = al_calloc(1, sizeof(*tool));
  if (tool == NULL) {
    return AL_ENOMEM;
  }
  tool->impl.name = "bash";
  tool->impl.is_concurrency_safe = NULL;
  tool->impl.start = bash_start;
  tool->impl.cancel = bash_cancel;
  tool->impl.data = tool;
  tool->loop = opts->loop;
  tool->output_max = opts->output_max ? opts->output_max
                                      : AL_SPAWN_DEFAULT_OUTPUT_MAX;
  tool->display_max = opts->display_max ? opts->display_max
                                        : AL_BASH_DEFAULT_DISPLAY_MAX;
  tool->timeout_ms = opts->timeout_ms ? opts->timeout_ms
                                      : AL_SPAWN_DEFAULT_TIMEOUT_MS;
  tool->max_timeout_ms = opts->max_timeout_ms ? opts->max_timeout_ms
                                              : AL_BASH_DEFAULT_MAX_TIMEOUT_MS;
  tool->kill_grace_ms = opts->kill_grace_ms ? opts->kill_grace_ms
                                            : AL_SPAWN_DEFAULT_KILL_GRACE_MS;
  tool->drain_ms = opts->drain_ms ? opts->drain_ms : AL_SPAWN_DEFAULT_DRAIN_MS;
  tool->sandbox = opts->sandbox;
  tool->network = opts->network;
  tool->workspace = al_strdup(opts->workspace);
  tool->shell = al_strdup(opts->shell != NULL ? opts->shell : "/bin/sh");
  if (n > 0) {
    tool->env = al_calloc(n + 1, sizeof(*tool->env));
  }
  if (tool->workspace == NULL || tool->shell == NULL ||
      (n > 0 && tool->env == NULL)) {
    al__bash_tool_free(&tool->impl);
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    tool->env[i] = al_strdup(opts->env[i]);
    if (tool->env[i] == NULL) {
      al__bash_tool_free(&tool->impl);
      return AL_ENOMEM;
    }
  }
  *out = &tool->impl;
  return 0;
}
