/* Internal hooks of the agent for benchmarks and tests. */
#ifndef AL_LOOP_AGENT_INT_H
#define AL_LOOP_AGENT_INT_H

#include <stdint.h>

#include <jansson.h>

#include "agentloop/agent.h"

/* The send stamp (the SSE `id:` agentloop-mockllm writes with timestamps
 * on: uv_hrtime ns at send time) of the event that completed tool_use
 * block `call_id` in the current run, or 0 when unknown. */
uint64_t al__agent_call_stamp(const al_agent_t *a, const char *call_id);

/* The send stamp (SSE `id:`, as above) of the event being delivered right
 * now (valid inside a subscriber callback of a streamed event, e.g.
 * text_delta), or 0 when the stream carries none. */
uint64_t al__agent_last_stamp(const al_agent_t *a);

/* Number of tool calls whose work has not released yet (tests: a closed
 * agent waits for these). */
uint64_t al__agent_tool_holds(const al_agent_t *a);

/* The agent's al_sandbox_t (sandbox/sandbox.h), NULL when it has none
 * (bench: the warm pool's counters). */
void *al__agent_sandbox(const al_agent_t *a);

/* Projected context tokens of the next request of the current history
 * (the budget's calibrated estimate; -1 when it cannot be built). */
int64_t al__agent_projected(al_agent_t *a);

/* The agent's history messages (borrowed; tests corrupt it to check the
 * validity gate, as a bug elsewhere would). */
json_t *al__agent_messages(al_agent_t *a);

/* The summary prompt of the max_turns call and its fixed fallback. */
#define AL_AGENT_SUMMARY_PROMPT                                            \
  "You have reached the maximum number of turns for this run. Do not call " \
  "any tools. Summarize what has been done so far, what the results were " \
  "and what is left to do."
#define AL_AGENT_SUMMARY_FALLBACK \
  "The run stopped after reaching its maximum number of turns."

#endif
