/* The `context:` section applied to agent options (context.c). */
#ifndef AL_CONFIG_CONTEXT_H
#define AL_CONFIG_CONTEXT_H

#include <stddef.h>

#include "agentloop/agent.h"
#include "config/config.h"

/* Checks the section and sets the options it names, leaving values a flag
 * already set (non-zero) alone. 0, or AL_ECONFIG with "FILE:LINE:COL:
 * context.KEY ..." in why. */
int al__config_context_apply(const al_config_t *cfg, al_agent_options_t *o,
                             char *why, size_t why_len);

/* The same settings as JSON (session/create's `context`, the transcript
 * header): checks ctx (NULL or null: nothing) and, when o is not NULL,
 * sets what a flag has not set. 0, or AL_EINVAL with "context.KEY ..." in
 * why. */
int al__context_from_json(const json_t *ctx, al_agent_options_t *o,
                          char *why, size_t why_len);
/* The context settings o holds (non-default values only), as an object
 * al__context_from_json accepts; NULL on OOM. */
json_t *al__context_to_json(const al_agent_options_t *o);

#endif
