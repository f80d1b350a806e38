/* Sub-agents (docs/subagents.md): the `task` tool and the children it
 * starts on the parent's loop. All child state lives in a->tasks, written
 * only by task.c; the agent calls in at a few marked points (creation,
 * approvals, stats, the turn boundary, close). */
#ifndef AL_LOOP_TASK_H
#define AL_LOOP_TASK_H

#include <stdbool.h>

#include "agentloop/agent.h"

struct al_sandbox_s;

/* al_agent_new, after the tools: copies the sub-agent options, links a
 * child to its parent and registers `task` (builtin_tools and not
 * no_task_tool). AL_ENOMEM, AL_EINVAL (a bad definition). */
int al__task_init(al_agent_t *a, const al_agent_options_t *o);
/* With the agent's fields (after the tools are freed). */
void al__task_free(al_agent_t *a);

/* The agent al_agent_new is making now is a child of this parent (NULL:
 * a top agent). registry.c borrows the parent's sandbox and warm pool. */
const al_agent_t *al__task_spawning_parent(const al_agent_t *a);

/* al_agent_close, after the run's cancel: cancels and closes every child;
 * a->pending covers each until its close callback. */
void al__task_close_all(al_agent_t *a);
/* A run of the parent ends with a cancel: its foreground children are
 * cancelled with their calls (the executor's cancel does it); nothing to
 * do here but kept for the driver's clarity. */

/* At the driver's turn boundary: the background results that came in
 * since the last one (al_malloc'd text, NULL: none), taken; the driver
 * adds them to the history as a user message. */
char *al__task_take_inbox(al_agent_t *a);

/* al_agent_approve found no approval of its own: a child's (request ids
 * carry the child's path). AL_ENOTFOUND when none has it. */
int al__task_approve(al_agent_t *a, const char *request,
                     al_approval_t decision);
/* The prefix of a's approval ids ("" for a top agent, "t1." for its child
 * t1), so ids are unique across the tree. */
const char *al__task_approval_prefix(const al_agent_t *a);

/* al_agent_stats: adds the children's usage and the cost. */
void al__task_stats(const al_agent_t *a, al_agent_stats_t *out);

#endif
