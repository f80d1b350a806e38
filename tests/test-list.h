/* Every test and helper, one list file per area so areas never share a file.
 * Each list holds TEST_ENTRY(name) / HELPER_ENTRY(name) lines only; CMake
 * reads them to register one ctest case per TEST_ENTRY. */
#include "list/common.h"
#include "list/sse.h"
#include "list/transport.h"
#include "list/provider.h"
#include "list/mockllm.h"
#include "list/client.h"
#include "list/loop.h"
#include "list/events.h"
#include "list/executor.h"
#include "list/tools.h"
#include "list/bash.h"
#include "list/sandbox.h"
#include "list/agent.h"
#include "list/tui.h"
#include "list/daemon.h"
#include "list/resume.h"
