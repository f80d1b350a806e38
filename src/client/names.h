/* Sessions named by id or title (issue 25): `agentloop resume NAME`,
 * `/resume NAME` and `agentloop export NAME`. */
#ifndef AL_CLIENT_NAMES_H
#define AL_CLIENT_NAMES_H

#include <jansson.h>
#include <stddef.h>

typedef enum {
  AL_PICK_FOUND,    /* out: the session's id */
  AL_PICK_NONE,     /* no id and no title is arg */
  AL_PICK_AMBIGUOUS /* titled arg more than once: why names them */
} al_pick_t;

/* Picks from sessions (session/list's array: {session, title, named,
 * updated_ms, cwd}) the one whose id is arg, else the one whose title is
 * exactly arg. Two or more with that title: none is guessed, why lists
 * their ids, newest first as the list is. */
al_pick_t al__session_pick(const json_t *sessions, const char *arg, char *out,
                           size_t out_len, char *why, size_t why_len);

#endif
