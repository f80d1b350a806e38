/* The system prompt for a session started from this shell (run, chat):
 * the sandbox in words, then al_sysprompt_build; start-up work (blocking
 * reads and a few-millisecond sandbox probe) before any loop runs. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agentloop/sandbox.h"
#include "client/cli.h"
#include "config/sysprompt.h"

static void sandbox_words(al_sandbox_policy_t policy, char *buf,
                          size_t len) {
  al_sandbox_info_t info;

  if (policy == AL_SANDBOX_OFF) {
    snprintf(buf, len, "off (turned off by the user): commands run "
                       "unconfined");
    return;
  }
  (void)al_sandbox_probe(NULL, &info);
  switch (info.mode) {
  case AL_SANDBOX_MODE_BWRAP:
    snprintf(buf, len, "bwrap: commands run isolated; only the working "
                       "directory and the allowed paths are writable");
    break;
  case AL_SANDBOX_MODE_DEGRADED:
    snprintf(buf, len, "degraded: commands run with Landlock/seccomp limits "
                       "(missing: %s)", info.missing);
    break;
  default:
    snprintf(buf, len, "none works on this machine: shell and write tools "
                       "need the user's approval or are refused");
    break;
  }
}

int al__cli_system_prompt(const al_config_t *cfg, const char *cwd,
                          al_sandbox_policy_t policy, const char *extra,
                          al_buf_t *out, const char *who) {
  char ws[PATH_MAX];
  char sb[700];
  al_sysprompt_options_t so;
  al_buf_t notices;
  int rc;

  if (realpath(cwd != NULL ? cwd : ".", ws) == NULL) {
    snprintf(ws, sizeof(ws), "%s", cwd != NULL ? cwd : ".");
  }
  sandbox_words(policy, sb, sizeof(sb));
  memset(&so, 0, sizeof(so));
  so.workspace = ws;
  so.sandbox = sb;
  so.cfg = cfg;
  so.extra = extra;
  al_buf_init(&notices, 64 * 1024);
  rc = al_sysprompt_build(&so, out, NULL, &notices);
  if (notices.data != NULL) {
    const char *p = notices.data;

    while (*p != '\0') {
      const char *e = strchr(p, '\n');
      size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

      fprintf(stderr, "%s: %.*s\n", who, (int)n, p);
      p = e != NULL ? e + 1 : p + n;
    }
  }
  al_buf_free(&notices);
  return rc;
}

int al__cli_task_preamble(const al_config_t *cfg, const char *cwd,
                          al_sandbox_policy_t policy, al_buf_t *out) {
  char ws[PATH_MAX];
  char sb[700];
  al_sysprompt_options_t so;

  if (realpath(cwd != NULL ? cwd : ".", ws) == NULL) {
    snprintf(ws, sizeof(ws), "%s", cwd != NULL ? cwd : ".");
  }
  sandbox_words(policy, sb, sizeof(sb));
  memset(&so, 0, sizeof(so));
  so.workspace = ws;
  so.sandbox = sb;
  so.cfg = cfg;
  /* Cut files were said for the parent's prompt already. */
  return al_sysprompt_preamble(&so, out, NULL);
}

/* The API key is needed only by the providers' own endpoints: local
 * servers, proxies and the mock take requests without one. */
bool al__cli_public_endpoint(const char *url) {
  const char *h;
  size_t n;

  if (url == NULL) {
    return true;
  }
  h = strstr(url, "://");
  h = h != NULL ? h + 3 : url;
  n = strcspn(h, ":/?#");
  return (n == 17 && strncasecmp(h, "api.anthropic.com", n) == 0) ||
         (n == 14 && strncasecmp(h, "api.openai.com", n) == 0);
}
