/* Sessions named by id or by exact title (client/names.h). */
#include <stdio.h>
#include <string.h>

#include "client/names.h"

al_pick_t al__session_pick(const json_t *sessions, const char *arg, char *out,
                           size_t out_len, char *why, size_t why_len) {
  const json_t *s;
  size_t i;
  size_t hits = 0;
  size_t w;

  why[0] = '\0';
  json_array_foreach(sessions, i, s) {
    const char *id = json_string_value(json_object_get(s, "session"));

    if (id != NULL && strcmp(id, arg) == 0) {
      snprintf(out, out_len, "%s", id);
      return AL_PICK_FOUND;
    }
  }
  w = (size_t)snprintf(why, why_len,
                       "more than one session is titled "
                       "\"%s\":",
                       arg);
  json_array_foreach(sessions, i, s) {
    const char *id = json_string_value(json_object_get(s, "session"));
    const char *t = json_string_value(json_object_get(s, "title"));

    /* Only a title given by session/rename names a session: a first
     * input shown as the title is no name. */
    if (id == NULL || t == NULL || !json_is_true(json_object_get(s, "named")) ||
        strcmp(t, arg) != 0) {
      continue;
    }
    if (hits++ == 0) {
      snprintf(out, out_len, "%s", id);
    }
    if (w < why_len) {
      w += (size_t)snprintf(why + w, why_len - w, " %s", id);
    }
  }
  if (hits == 1) {
    why[0] = '\0';
    return AL_PICK_FOUND;
  }
  if (hits == 0) {
    snprintf(why, why_len, "no session has the id or the title \"%s\"", arg);
    out[0] = '\0';
    return AL_PICK_NONE;
  }
  out[0] = '\0';
  return AL_PICK_AMBIGUOUS;
}
