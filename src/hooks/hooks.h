/* Hooks (SPEC §16, RESEARCH-WAVE2 §3, docs/hooks.md): commands, or C
 * callbacks, run at points of the loop, that may allow, deny, ask, rewrite
 * a tool's input, add context for the model or replace a tool result.
 *
 * A hook run (al_hooks_run_t) starts every hook that matches an event and
 * a tool at once, each as a child through the spawn wrapper (own process
 * group, the env allowlist plus AGENTLOOP_HOOK_EVENT, the tool sandbox,
 * the JSON input on stdin, a timeout after which the group is killed),
 * and calls back once with the combined result after the last one ended.
 *
 * Decisions recorded here:
 *  - Fail closed: a hook that times out, dies on a signal, exits with a
 *    status other than 0 or 2, or prints something that is not a JSON
 *    object gets its on_failure decision, by default deny for the gating
 *    events (pre_tool_use, user_prompt_submit) and no decision for the
 *    others. A guard that fails open is no guard.
 *  - Exit 2 denies with stderr as the reason (Claude Code's convention).
 *  - Combining: deny > ask > allow > none; two hooks rewriting the input
 *    differently deny; contexts are joined (capped at 10 KB).
 *  - The run never calls back synchronously; cancel kills every hook's
 *    group and nothing fires afterwards. */
#ifndef AL_HOOKS_H
#define AL_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agent.h"
#include "common/common.h"
#include "sandbox/sandbox.h"

#define AL_HOOKS_DEFAULT_TIMEOUT_MS 10000
#define AL_HOOKS_CONTEXT_MAX (10 * 1024)
#define AL_HOOKS_OUTPUT_MAX (64 * 1024)

typedef enum {
  AL_HOOK_SESSION_START = 0,
  AL_HOOK_USER_PROMPT_SUBMIT,
  AL_HOOK_PRE_TOOL_USE,
  AL_HOOK_POST_TOOL_USE,
  AL_HOOK_STOP,
  AL_HOOK_PRE_COMPACT,
  AL_HOOK_SUBAGENT_START, /* task: a child started / ended (observational) */
  AL_HOOK_SUBAGENT_STOP,
  AL_HOOK_EVENT_COUNT
} al_hook_event_t;

const char *al__hook_event_name(al_hook_event_t ev);

const char *al__hook_decision_name(al_hook_decision_t d);

typedef struct al_hook_def_s {
  char *name;
  al_hook_event_t event;
  char **argv;       /* NULL-terminated */
  char **matchers;   /* tool-name globs (NULL: any tool) */
  int category;      /* al_tool_category_t, or -1 for any */
  uint64_t timeout_ms;
  al_hook_decision_t on_failure;
  bool sandbox;      /* run inside the tool sandbox (default true) */
} al_hook_def_t;

typedef struct al_hooks_s al_hooks_t;
typedef struct al_hooks_run_s al_hooks_run_t;

/* The combined result. Strings and JSON are owned by the run and valid
 * only inside the done callback. */
typedef struct al_hooks_result_s {
  al_hook_decision_t decision;
  const char *reason;         /* the deciding hook's text, or NULL */
  const char *hook;           /* the deciding hook's name, or NULL */
  const json_t *updated_input; /* pre_tool_use rewrite, or NULL */
  const char *context;        /* additional context for the model, or NULL */
  const char *replace;        /* post_tool_use: the result to show, or NULL */
  int ran;                    /* hooks that ran */
} al_hooks_result_t;

/* One hook ended (for hook_executed events). outcome: ok, exit, timeout,
 * crash, bad_output, callback. */
typedef struct al_hook_report_s {
  const char *hook;
  al_hook_event_t event;
  al_hook_decision_t decision;
  const char *outcome;
  int exit_status;
  uint64_t ms;
  const char *reason;
  bool rewrote;
} al_hook_report_t;

typedef void (*al_hooks_report_cb)(const al_hook_report_t *r, void *run_data);
typedef void (*al_hooks_done_cb)(al_hooks_run_t *run,
                                 const al_hooks_result_t *res, void *data);

typedef struct al_hooks_options_s {
  uv_loop_t *loop;
  const char *workspace;
  al_sandbox_t *sandbox;   /* borrowed; NULL: unconfined */
  uint64_t kill_grace_ms;  /* TERM -> KILL; 0: 2 s */
  /* In-process hook (al_agent_options_t.hook), called synchronously for
   * every event at the start of a run of hooks; may be NULL. */
  al_hook_cb callback;
  void *callback_data;
  al_agent_t *agent;       /* passed to the callback */
  /* After a run freed itself (al__hooks_live went down); may be NULL. */
  void (*on_run_freed)(void *data);
  void *on_run_freed_data;
} al_hooks_options_t;

/* Parses {"hooks": {EVENT: [{name?, command: [..], matcher?: "a|b*",
 * category?: read|write|admin, timeout_ms?, on_failure?: deny|allow,
 * sandbox?: bool}]}}. AL_EINVAL with the reason in err. */
int al__hooks_new(const al_hooks_options_t *o, const char *json,
                  al_hooks_t **out, al_buf_t *err);
void al__hooks_free(al_hooks_t *h); /* no run may be in flight */
/* Whether `json` would make hooks (al__hooks_new's check alone): a front
 * door names a bad hook before any session is built on it. */
int al__hooks_check(const char *json, al_buf_t *err);

/* Whether some hook (or the callback) would run for this event and tool
 * (tool NULL for events without one). */
bool al__hooks_match(const al_hooks_t *h, al_hook_event_t ev,
                     const char *tool, int category);

/* Starts the matching hooks with `input` (a JSON object; "event" is
 * added). report fires per hook, done once, both later (never inside this
 * call). 0, AL_ENOMEM. */
int al__hooks_run(al_hooks_t *h, al_hook_event_t ev, const char *tool,
                  int category, json_t *input, al_hooks_report_cb report,
                  al_hooks_done_cb done, void *data, al_hooks_run_t **out);
/* Kills the hooks of the run; no callback fires afterwards. The run frees
 * itself once its children are gone. */
void al__hooks_cancel(al_hooks_run_t *run);
/* Hook runs still holding children (the owner waits for 0 before freeing
 * the hooks). */
int al__hooks_live(const al_hooks_t *h);

#endif
