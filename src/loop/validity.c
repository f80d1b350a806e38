/* The validity gate (docs/context.md §Validity gate, issue 11 item 4).
 *
 * Every request body the agent builds is parsed back and checked with the
 * provider's validator (provider/validate.c, the very rules
 * agentloop-mockllm enforces) before it is sent. A violation is never
 * sent: the history is repaired where the repair is unambiguous, or the
 * run fails with an error naming the rule.
 *
 * Unambiguous repairs, all on the normalized (Anthropic-shaped) history,
 * so both providers get them:
 *  - tool_use_without_result: a tool_use whose id no result answers gets a
 *    synthetic error result (the call's outcome is unknown, so the model
 *    is told so), in a user message right after its assistant message;
 *  - tool_result_without_use: a result whose id the previous assistant
 *    message did not ask for is dropped;
 *  - duplicate_tool_result: a second result for the same id is dropped
 *    (the first one is what the model was given at the time);
 *  - tool_results_first: results are moved to the front of their message,
 *    in the order of the tool_use blocks;
 *  - empty_content: a message left without blocks is dropped;
 *  - same_role_joined: two adjacent messages of one role are joined, as
 *    the Messages API itself combines them (blocks keep their order and
 *    bytes, so thinking blocks stay valid).
 * Not repaired (no single right answer): duplicate tool_use ids, a first
 * message that is not the user's, malformed blocks. Assistant content is
 * only ever joined, never edited, so thinking blocks stay byte-exact. */
#include <stdio.h>
#include <string.h>

#include "loop/validity.h"

#define SYNTH_TEXT                                                         \
  "Error: no result was recorded for this tool call (agentloop repaired " \
  "the history before sending it)"

static const char *str(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);

  return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool is_type(const json_t *b, const char *t) {
  const char *s = str(b, "type");

  return s != NULL && strcmp(s, t) == 0;
}

static bool role_is(const json_t *m, const char *r) {
  const char *s = str(m, "role");

  return s != NULL && strcmp(s, r) == 0;
}

static void note(json_t *done, const char *rule, size_t msg, const char *id) {
  json_t *o;

  if (done == NULL) {
    return;
  }
  o = json_pack("{s:s, s:I}", "rule", rule, "message", (json_int_t)msg);
  if (o != NULL && id != NULL) {
    json_object_set_new(o, "id", json_string(id));
  }
  json_array_append_new(done, o);
}

/* The tool_use ids of an assistant message, in order (new array). */
static json_t *use_ids(const json_t *m) {
  json_t *ids = json_array();
  const json_t *b;
  size_t i;

  json_array_foreach(json_object_get(m, "content"), i, b) {
    if (is_type(b, "tool_use") && str(b, "id") != NULL) {
      json_array_append_new(ids, json_string(str(b, "id")));
    }
  }
  return ids;
}

static bool in_ids(const json_t *ids, const char *id) {
  const json_t *v;
  size_t i;

  json_array_foreach(ids, i, v) {
    if (id != NULL && strcmp(json_string_value(v), id) == 0) {
      return true;
    }
  }
  return false;
}

/* Rewrites user message `u` (index n) that follows an assistant message
 * asking for `ids`: results for those ids first (tool_use order, first
 * result of each id), then the rest of its blocks; drops foreign and
 * duplicate results; adds synthetic results for unanswered ids. Returns
 * the repairs made. */
static size_t fix_results(json_t *u, size_t n, const json_t *ids,
                          json_t *done) {
  json_t *content = json_object_get(u, "content");
  json_t *first = json_object();  /* id -> first result block */
  json_t *out = json_array();
  json_t *rest = json_array();
  const json_t *b;
  const json_t *idv;
  size_t i;
  size_t fixes = 0;
  size_t seen_other = 0;
  bool misplaced = false;

  json_array_foreach(content, i, b) {
    const char *id = str(b, "tool_use_id");

    if (!is_type(b, "tool_result")) {
      json_array_append(rest, (json_t *)b);
      seen_other++;
      continue;
    }
    if (!in_ids(ids, id)) {
      note(done, "tool_result_without_use", n, id);
      fixes++;
      continue;
    }
    if (json_object_get(first, id) != NULL) {
      note(done, "duplicate_tool_result", n, id);
      fixes++;
      continue;
    }
    if (seen_other > 0) {
      misplaced = true;
    }
    json_object_set(first, id, (json_t *)b);
  }
  json_array_foreach(ids, i, idv) {
    const char *id = json_string_value(idv);
    json_t *r = json_object_get(first, id);

    if (r != NULL) {
      json_array_append(out, r);
      continue;
    }
    note(done, "tool_use_without_result", n, id);
    fixes++;
    json_array_append_new(
        out, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool_result",
                       "tool_use_id", id, "content", SYNTH_TEXT, "is_error",
                       1));
  }
  if (misplaced) {
    note(done, "tool_results_first", n, NULL);
    fixes++;
  }
  if (fixes > 0) {
    json_array_extend(out, rest);
    json_object_set(u, "content", out);
  }
  json_decref(first);
  json_decref(out);
  json_decref(rest);
  return fixes;
}

/* Drops tool_result blocks from a user message that answers nothing. */
static size_t drop_results(json_t *u, size_t n, json_t *done) {
  json_t *content = json_object_get(u, "content");
  json_t *out;
  const json_t *b;
  size_t i;
  size_t fixes = 0;

  if (!json_is_array(content)) {
    return 0;
  }
  out = json_array();
  json_array_foreach(content, i, b) {
    if (is_type(b, "tool_result")) {
      note(done, "tool_result_without_use", n, str(b, "tool_use_id"));
      fixes++;
    } else {
      json_array_append(out, (json_t *)b);
    }
  }
  if (fixes > 0) {
    json_object_set(u, "content", out);
  }
  json_decref(out);
  return fixes;
}

static bool empty(const json_t *m) {
  const json_t *c = json_object_get(m, "content");

  return (json_is_array(c) && json_array_size(c) == 0) ||
         (json_is_string(c) && json_string_length(c) == 0);
}

/* Empty messages out, adjacent same-role messages joined. */
static size_t tidy(json_t *msgs, json_t *done) {
  size_t fixes = 0;
  size_t i = 0;

  while (i < json_array_size(msgs)) {
    json_t *m = json_array_get(msgs, i);
    json_t *prev = i > 0 ? json_array_get(msgs, i - 1) : NULL;

    if (empty(m)) {
      note(done, "empty_content", i, NULL);
      json_array_remove(msgs, i);
      fixes++;
      continue;
    }
    if (prev != NULL && json_is_array(json_object_get(m, "content")) &&
        json_is_array(json_object_get(prev, "content")) &&
        strcmp(str(m, "role") ? str(m, "role") : "",
               str(prev, "role") ? str(prev, "role") : "") == 0) {
      json_t *joined = json_copy(json_object_get(prev, "content"));

      json_array_extend(joined, json_object_get(m, "content"));
      json_object_set_new(prev, "content", joined);
      note(done, "same_role_joined", i, NULL);
      json_array_remove(msgs, i);
      fixes++;
      continue;
    }
    i++;
  }
  return fixes;
}

/* One pass over the whole history. */
static size_t repair_pass(json_t *msgs, json_t *done) {
  size_t fixes = tidy(msgs, done);
  size_t n;

  for (n = 0; n < json_array_size(msgs); n++) {
    json_t *m = json_array_get(msgs, n);
    json_t *prev = n > 0 ? json_array_get(msgs, n - 1) : NULL;

    if (role_is(m, "assistant")) {
      json_t *ids = use_ids(m);
      json_t *next = json_array_get(msgs, n + 1);

      if (json_array_size(ids) > 0 && (next == NULL || !role_is(next, "user") ||
                                       !json_is_array(json_object_get(
                                           next, "content")))) {
        /* The answer is missing altogether: a user message of results. */
        json_t *u = json_pack("{s:s, s:[]}", "role", "user", "content");

        if (next != NULL && role_is(next, "user")) {
          /* A string content becomes a text block after the results. */
          json_array_append_new(json_object_get(u, "content"),
                                json_pack("{s:s, s:O}", "type", "text", "text",
                                          json_object_get(next, "content")));
          json_array_set_new(msgs, n + 1, u);
        } else {
          json_array_insert_new(msgs, n + 1, u);
        }
        next = u;
      }
      if (json_array_size(ids) > 0) {
        fixes += fix_results(next, n + 1, ids, done);
        n++; /* the results message is done */
      }
      json_decref(ids);
    } else if (role_is(m, "user") &&
               (prev == NULL || !role_is(prev, "assistant") ||
                !json_is_array(json_object_get(prev, "content")))) {
      fixes += drop_results(m, n, done);
    } else if (role_is(m, "user")) {
      /* After an assistant message without tool_use. */
      json_t *ids = use_ids(prev);

      if (json_array_size(ids) == 0) {
        fixes += drop_results(m, n, done);
      }
      json_decref(ids);
    }
  }
  return fixes;
}

size_t al__validity_repair(json_t *msgs, json_t *done) {
  size_t total = 0;
  size_t k;

  if (!json_is_array(msgs)) {
    return 0;
  }
  /* Dropping and joining can expose a new pair to fix: a few passes reach
   * the fixed point (each pass removes or answers something). */
  for (k = 0; k < 4; k++) {
    size_t f = repair_pass(msgs, done);

    total += f;
    if (f == 0) {
      break;
    }
  }
  return total;
}

bool al__validity_check(const al_provider_t *p, const char *body, size_t len,
                        al_validate_verdict_t *v) {
  json_error_t jerr;
  /* \u0000 is valid JSON: a thinking block keeps the NUL the model sent
   * (its signature covers those bytes), and the API takes it back. */
  json_t *j = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
  bool ok;

  if (j == NULL) {
    memset(v, 0, sizeof(*v));
    v->status = 400;
    snprintf(v->rule, sizeof(v->rule), "request_shape");
    snprintf(v->message, sizeof(v->message),
             "the request body is not valid JSON: %s", jerr.text);
    return false;
  }
  ok = p->kind == AL_PROVIDER_OPENAI ? al__validate_openai(j, NULL, v)
       : p->kind == AL_PROVIDER_OPENAI_RESPONSES
           ? al__validate_responses(j, NULL, v)
           : al__validate_anthropic(j, NULL, v);
  json_decref(j);
  return ok;
}
