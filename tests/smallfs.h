/* A real small filesystem for a test (issue 15): a tmpfs of a given size
 * mounted in a mount namespace private to this test process (so it
 * vanishes with the process and no other test sees it). As root the
 * process unshares its mount namespace; otherwise it makes a user
 * namespace first (`unshare -Urm` style). Children spawned afterwards
 * (the agentloop binary under test) see the mount too. Call it before
 * anything starts a thread (the namespaces require a single-threaded
 * process). */
#ifndef AL_TEST_SMALLFS_H
#define AL_TEST_SMALLFS_H

#include <stdbool.h>
#include <stddef.h>

/* Mounts a tmpfs of `size` ("256k") on the existing directory `dir`.
 * Returns true, or false with the reason in `why` (the caller then skips
 * the test with AL_TEST_SKIP_CODE). */
bool al_test_smallfs(const char *dir, const char *size, char *why,
                     size_t why_len);
/* Remounts it read-only (EROFS for every write from then on). */
bool al_test_smallfs_readonly(const char *dir, char *why, size_t why_len);
/* Fills it: a file `dir`/fill grows until the filesystem is full. */
void al_test_smallfs_fill(const char *dir);

#endif
