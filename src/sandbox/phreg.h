/* Placeholders shared between agentloop processes (issue 15, point 8).
 *
 * A protected path that does not exist gets a read-only placeholder in
 * the sandbox, and the kernel can only mount on a name that exists, so
 * the placeholder's mount point is made on disk for as long as a sandbox
 * uses it. Two rules make that safe when several agents (two daemon
 * sessions, `agentloop run` beside agentloopd) work in one workspace:
 *
 *  - Removal checks the ground truth: a placeholder is removed only when
 *    it is empty and no sandbox of any agent has something mounted on it
 *    (the mount tables of every bwrap sandbox of this user are read).
 *    Removing a mount point another namespace uses would unmount it there
 *    and lift that sandbox's protection.
 *  - A registry (one small file per placeholder, in the agentloop state
 *    directory, created before the placeholder is made and removed after
 *    it) tells every agent that an empty protected directory is an
 *    agent's placeholder and not the user's, so the agent that ends last
 *    removes it, and `al_phreg_sweep` removes what a crash of both an
 *    agent and its janitor left behind.
 *
 * libc only: agentloop-exec's janitor uses it too. Every function does
 * file-system calls: never on the loop thread. */
#ifndef AL_SANDBOX_PHREG_H
#define AL_SANDBOX_PHREG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* True when /proc/<pid> is a bwrap process. */
bool al_phreg_is_bwrap(const char *pid);

/* True when some bwrap sandbox (a mount namespace other than the
 * caller's) has a mount whose mount point is `path`. */
bool al_phreg_mounted_elsewhere(const char *path);

/* True when `path` (lstat'ed into st) is what a placeholder is on disk:
 * an empty directory or an empty regular file (its content, if any, is a
 * mount inside a sandbox). */
bool al_phreg_empty(const char *path, const struct stat *st);

/* Records `path` as a placeholder in the registry directory `dir`
 * (created 0700 when missing), noted by `me` ("PID ID": one sandbox of
 * one agent). 0 or an errno. */
int al_phreg_note(const char *dir, const char *path, const char *me);

/* True when `path` is recorded in `dir`. */
bool al_phreg_known(const char *dir, const char *path);

/* Removes the placeholder at `path` if it is an empty directory or an
 * empty file and nothing is mounted on it elsewhere. The mount tables are
 * read only when another live noter than `me` is on its entry (me NULL:
 * always), so an agent alone pays nothing for them. A noter stays one for
 * its life; me NULL (the janitor, the sweep) also takes the lines of
 * agents that are gone off the entry, and the entry with the last.
 * Returns false when it stays because another sandbox still uses it: that
 * sandbox's agent removes it when it ends. dir may be NULL (no registry). */
bool al_phreg_release(const char *dir, const char *path, const char *me);

/* Releases every placeholder recorded in `dir` that no sandbox uses: what
 * agents that were killed together with their janitor left behind. */
void al_phreg_sweep(const char *dir);

#endif
