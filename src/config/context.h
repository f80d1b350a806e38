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

#endif
