/* agentloop-exec --cgroup (cgroup_join.c). */
#ifndef AL_EXEC_CGROUP_JOIN_H
#define AL_EXEC_CGROUP_JOIN_H

#include <stdbool.h>

/* argv[1] is "--cgroup": joins, then execs the command; returns only on
 * failure (the exit code). With "--launch" in place of "-- COMMAND" (a
 * pre-joined launcher, src/sandbox/launch.h), calls launch(owner) once
 * joined, which waits for its command and execs it. */
int al_exec_cgroup_main(int argc, char **argv, int (*launch)(long owner));
/* The janitor's part: removes base/agentloop-<owner>-* (the owner has
 * exited: its tools die with it; a few short retries while they do). */
void al_exec_cgroup_sweep_owner(const char *base, long owner);

#endif
