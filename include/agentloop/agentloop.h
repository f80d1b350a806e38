/* agentloop: event-driven agent-loop runtime on libuv. Umbrella header.
 *
 * Conventions (libuv's): the caller owns the uv_loop_t; objects are created
 * on it, report errors as negative AL_E* codes (al_strerror), and close
 * asynchronously with a close callback. No globals; several agents per loop. */
#ifndef AGENTLOOP_H
#define AGENTLOOP_H

#include <uv.h>

#include "agentloop/agent.h"
#include "agentloop/alloc.h"
#include "agentloop/client.h"
#include "agentloop/errno.h"
#include "agentloop/events.h"
#include "agentloop/limits.h"
#include "agentloop/models.h"
#include "agentloop/sandbox.h"
#include "agentloop/version.h"

#endif
