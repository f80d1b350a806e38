/* Track routing: which of a scenario's tracks a request belongs to.
 *
 * A pure function of the scenario and the parsed request body, the same for
 * every protocol: Anthropic Messages (`system`, `messages`), OpenAI Chat
 * Completions (`messages` with system/developer roles) and the Responses API
 * (`instructions`, `input` as a string or a list of items). A message's
 * content may be a string or a list of parts; a condition holds when one
 * text part contains the string (parts are not joined, so a marker is
 * matched within one part). Content that is neither is never matched. */
#include "mockllm/mockllm_int.h"

/* Does this content (a string, or a list of parts with a "text" string:
 * text, input_text, output_text) contain needle? */
static bool content_contains(const json_t *content, const char *needle) {
  const json_t *part;
  size_t i;

  if (json_is_string(content)) {
    return strstr(json_string_value(content), needle) != NULL;
  }
  json_array_foreach(content, i, part) {
    const char *text = json_string_value(json_object_get(part, "text"));

    if (text != NULL && strstr(text, needle) != NULL) {
      return true;
    }
  }
  return false;
}

/* The conversation's list: `messages`, else the Responses API's `input`
 * (a bare string input is handled by the callers). */
static const json_t *message_list(const json_t *body) {
  const json_t *l = json_object_get(body, "messages");

  return json_is_array(l) ? l : json_object_get(body, "input");
}

static bool role_is(const json_t *msg, const char *role) {
  const char *r = json_string_value(json_object_get(msg, "role"));

  return r != NULL && strcmp(r, role) == 0;
}

static bool first_user_contains(const json_t *body, const char *needle) {
  const json_t *l = message_list(body);
  const json_t *msg;
  size_t i;

  if (json_is_string(l)) {
    return content_contains(l, needle); /* Responses: input is the message */
  }
  json_array_foreach(l, i, msg) {
    if (role_is(msg, "user")) {
      return content_contains(json_object_get(msg, "content"), needle);
    }
  }
  return false;
}

static bool system_contains(const json_t *body, const char *needle) {
  const json_t *l = message_list(body);
  const json_t *msg;
  size_t i;

  if (content_contains(json_object_get(body, "system"), needle) ||
      content_contains(json_object_get(body, "instructions"), needle)) {
    return true;
  }
  if (!json_is_array(l)) {
    return false;
  }
  json_array_foreach(l, i, msg) {
    if ((role_is(msg, "system") || role_is(msg, "developer")) &&
        content_contains(json_object_get(msg, "content"), needle)) {
      return true;
    }
  }
  return false;
}

int al__mockllm_track_pick(const al_mockllm_scenario_t *s, const json_t *body) {
  size_t i;

  for (i = 0; body != NULL && i < s->ntracks; i++) {
    const al__mock_track_t *t = &s->tracks[i];

    if ((t->first_user == NULL || first_user_contains(body, t->first_user)) &&
        (t->system == NULL || system_contains(body, t->system))) {
      return (int)i;
    }
  }
  return -1;
}
