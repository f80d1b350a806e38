/* agentloop-exec --cgroup (cgroup_join.c). */
#ifndef AL_EXEC_CGROUP_JOIN_H
#define AL_EXEC_CGROUP_JOIN_H

#include <stdbool.h>

/* argv[1] is "--cgroup": joins, then execs the command; returns only on
 * failure (the exit code). */
int al_exec_cgroup_main(int argc, char **argv);

#endif
