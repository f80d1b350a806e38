/* Summary compaction, the pure part: see compact.h.
 *
 * The shape of a compacted history (always valid for both APIs):
 *   user:      [first user text blocks verbatim..., summary block,
 *               latest dropped user request verbatim (if any)]
 *   assistant: msgs[cut] ...   (the kept tail, unchanged)
 * The tail starts at an assistant message, so every tool_result kept has
 * its tool_use kept right before it, and roles alternate. */
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "common/media.h"
#include "loop/compact.h"
#include "loop/micro.h"

static const char *str(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);

  return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool role_is(const json_t *m, const char *r) {
  const char *s = str(m, "role");

  return s != NULL && strcmp(s, r) == 0;
}

static bool is_type(const json_t *b, const char *t) {
  const char *s = str(b, "type");

  return s != NULL && strcmp(s, t) == 0;
}

static int64_t msg_tokens(const json_t *m, double ratio) {
  json_t *one = json_pack("[O]", m);
  size_t bytes = json_dumpb(m, NULL, 0, JSON_COMPACT) + 16;
  size_t b64 = 0;
  int64_t images = 0;

  /* An image costs its pixel size, not its base64 (common/media.h). */
  al__media_scan(one, &b64, &images);
  json_decref(one);
  bytes -= AL_MIN(bytes, b64);
  return (int64_t)(((double)bytes / 4.0 + (double)images) * ratio) + 1;
}

int64_t al__compact_tokens(const json_t *msgs, size_t from, double ratio) {
  int64_t t = 0;
  size_t i;

  for (i = from; i < json_array_size(msgs); i++) {
    t += msg_tokens(json_array_get(msgs, i), ratio);
  }
  return t;
}

/* A user message that is a request, not an answer to tools. */
static bool user_turn(const json_t *m) {
  const json_t *b;
  size_t i;
  bool text = false;

  if (!role_is(m, "user")) {
    return false;
  }
  if (json_is_string(json_object_get(m, "content"))) {
    return true;
  }
  json_array_foreach(json_object_get(m, "content"), i, b) {
    if (is_type(b, "tool_result")) {
      return false;
    }
    text = text || is_type(b, "text");
  }
  return text;
}

size_t al__compact_cut(const json_t *msgs, int64_t keep_tokens, double ratio) {
  size_t n = json_array_size(msgs);
  size_t c;
  size_t last = 0;
  int64_t tail = 0;
  size_t best = 0;

  /* Walk back from the end, adding messages to the tail; every assistant
   * message reached is a candidate. */
  for (c = n; c-- > 2;) {
    const json_t *m = json_array_get(msgs, c);

    tail += msg_tokens(m, ratio);
    if (!role_is(m, "assistant")) {
      continue;
    }
    if (last == 0) {
      last = c;
    }
    if (tail <= keep_tokens) {
      best = c;
    } else {
      break;
    }
  }
  return best != 0 ? best : last;
}

/* The text blocks of a user message (a string content becomes one). */
static void append_text_blocks(json_t *out, const json_t *m) {
  const json_t *c = json_object_get(m, "content");
  const json_t *b;
  size_t i;

  if (json_is_string(c)) {
    json_array_append_new(out, json_pack("{s:s, s:O}", "type", "text", "text",
                                         c));
    return;
  }
  json_array_foreach(c, i, b) {
    if (is_type(b, "text")) {
      json_array_append(out, (json_t *)b);
    }
  }
}

/* The first message's own text: without the summary block (and what
 * follows it) of an earlier compaction, which the new summary replaces. */
static void append_first_blocks(json_t *out, const json_t *m) {
  const json_t *c = json_object_get(m, "content");
  const json_t *b;
  size_t i;
  size_t head = strlen("[agentloop compacted this conversation");

  if (!json_is_array(c)) {
    append_text_blocks(out, m);
    return;
  }
  json_array_foreach(c, i, b) {
    const char *t = str(b, "text");

    if (is_type(b, "text") && t != NULL &&
        strncmp(t, "[agentloop compacted this conversation", head) == 0) {
      break;
    }
    if (is_type(b, "text")) {
      json_array_append(out, (json_t *)b);
    }
  }
}

json_t *al__compact_request(const json_t *msgs, int64_t max_tokens,
                            double ratio, const char *instructions,
                            size_t *dropped) {
  json_t *out;
  json_t *first;
  json_t *last;
  json_t *content;
  char *prompt;
  size_t start = 1;
  size_t n = json_array_size(msgs);
  size_t i;
  int64_t total = al__compact_tokens(msgs, 0, ratio) + 1500;
  al_buf_t b;

  *dropped = 0;
  if (n == 0) {
    return NULL;
  }
  /* Oldest whole exchanges first: the kept part must start at an
   * assistant message (results stay with their tool_use). */
  while (total > max_tokens && start + 2 < n) {
    size_t next = start + 1;

    total -= msg_tokens(json_array_get(msgs, start), ratio);
    while (next < n && !role_is(json_array_get(msgs, next), "assistant")) {
      total -= msg_tokens(json_array_get(msgs, next), ratio);
      next++;
    }
    if (next + 1 >= n) {
      break; /* keep at least the last exchange */
    }
    start = next;
  }
  *dropped = start - 1;
  out = json_array();
  first = json_pack("{s:s, s:[]}", "role", "user", "content");
  if (out == NULL || first == NULL) {
    json_decref(out);
    json_decref(first);
    return NULL;
  }
  content = json_object_get(first, "content");
  append_text_blocks(content, json_array_get(msgs, 0));
  if (json_array_size(content) == 0) {
    json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text",
                                             "text", "(no text)"));
  }
  if (*dropped > 0) {
    char notice[200];

    snprintf(notice, sizeof(notice),
             "[%zu earlier messages were left out of this summary request "
             "to fit the context window.]",
             *dropped);
    json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text",
                                             "text", notice));
  }
  json_array_append_new(out, first);
  for (i = start; i < n; i++) {
    json_array_append(out, json_array_get(msgs, i));
  }
  if (start == 1 && n > 1 && !role_is(json_array_get(msgs, 1), "assistant")) {
    /* msgs[0] and msgs[1] both user (cannot happen in a valid history). */
  }
  al_buf_init(&b, 1 << 20);
  al_buf_append_str(&b, AL_COMPACT_PROMPT);
  if (instructions != NULL && instructions[0] != '\0') {
    al_buf_printf(&b, "\n\nAlso, from the user: %s", instructions);
  }
  prompt = b.data;
  last = json_array_get(out, json_array_size(out) - 1);
  if (role_is(last, "user") &&
      json_is_array(json_object_get(last, "content"))) {
    /* After the results of the last tool turn: a copy, never in place. */
    json_t *nm = json_copy(last);
    json_t *nc = json_copy(json_object_get(last, "content"));

    json_array_append_new(nc, json_pack("{s:s, s:s}", "type", "text", "text",
                                        prompt ? prompt : ""));
    json_object_set_new(nm, "content", nc);
    json_array_set_new(out, json_array_size(out) - 1, nm);
  } else {
    json_array_append_new(out, json_pack("{s:s, s:[{s:s, s:s}]}", "role",
                                         "user", "content", "type", "text",
                                         "text", prompt ? prompt : ""));
  }
  al_buf_free(&b);
  return out;
}

json_t *al__compact_assemble(const json_t *msgs, size_t cut,
                             const char *summary, size_t summary_len) {
  json_t *out = json_array();
  json_t *first = json_pack("{s:s, s:[]}", "role", "user", "content");
  json_t *content;
  al_buf_t b;
  size_t i;
  size_t latest = 0;

  if (out == NULL || first == NULL || cut < 2 ||
      cut > json_array_size(msgs)) {
    json_decref(out);
    json_decref(first);
    return NULL;
  }
  content = json_object_get(first, "content");
  append_first_blocks(content, json_array_get(msgs, 0));
  al_buf_init(&b, summary_len + 1024);
  al_buf_printf(&b, AL_COMPACT_HEAD, cut - 1);
  al_buf_append(&b, summary, summary_len);
  json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text",
                                           "text", b.data ? b.data : "",
                                           b.len));
  al_buf_free(&b);
  /* The latest request of the user among the dropped messages, verbatim:
   * the step in progress is the user's own words, not a paraphrase. */
  for (i = 1; i < cut; i++) {
    if (user_turn(json_array_get(msgs, i))) {
      latest = i;
    }
  }
  if (latest != 0) {
    json_array_append_new(content,
                          json_pack("{s:s, s:s}", "type", "text", "text",
                                    "[The user's latest request, verbatim:]"));
    append_text_blocks(content, json_array_get(msgs, latest));
  }
  json_array_append_new(out, first);
  for (i = cut; i < json_array_size(msgs); i++) {
    json_array_append(out, json_array_get(msgs, i));
  }
  return out;
}

void al__compact_counts(const json_t *msgs, size_t cut, uint32_t *messages,
                        uint32_t *tool_results) {
  size_t i, k;
  const json_t *b;

  *messages = cut > 1 ? (uint32_t)(cut - 1) : 0;
  *tool_results = 0;
  for (i = 1; i < cut; i++) {
    json_array_foreach(json_object_get(json_array_get(msgs, i), "content"), k,
                       b) {
      if (is_type(b, "tool_result")) {
        (*tool_results)++;
      }
    }
  }
}

char *al__compact_fallback_summary(const json_t *msgs, size_t cut) {
  json_t *tools = json_object(); /* name -> count */
  json_t *paths = json_object(); /* path -> true (insertion order) */
  al_buf_t b;
  const char *k;
  json_t *v;
  size_t i, j;
  const json_t *blk;

  al_buf_init(&b, 64 * 1024);
  al_buf_append_str(&b,
                    "The summary of the earlier messages could not be made "
                    "(the summary request failed); they were dropped, and "
                    "this is what is known without it.\n\n## Goal\nSee the "
                    "user's original request above.\n\n## User "
                    "constraints\n");
  for (i = 1; i < cut; i++) {
    const json_t *m = json_array_get(msgs, i);

    if (!user_turn(m)) {
      continue;
    }
    json_array_foreach(json_object_get(m, "content"), j, blk) {
      if (is_type(blk, "text") && str(blk, "text") != NULL) {
        al_buf_printf(&b, "> %.2000s\n", str(blk, "text"));
      }
    }
  }
  for (i = 1; i < cut; i++) {
    json_array_foreach(json_object_get(json_array_get(msgs, i), "content"), j,
                       blk) {
      const json_t *in;
      const char *name;

      if (!is_type(blk, "tool_use") || (name = str(blk, "name")) == NULL) {
        continue;
      }
      json_object_set_new(
          tools, name,
          json_integer(json_integer_value(json_object_get(tools, name)) + 1));
      in = json_object_get(blk, "input");
      if (str(in, "path") != NULL) {
        json_object_set_new(paths, str(in, "path"), json_true());
      }
    }
  }
  al_buf_append_str(&b, "\n## Done\nTool calls made: ");
  j = 0;
  json_object_foreach(tools, k, v) {
    al_buf_printf(&b, "%s%s x%lld", j++ ? ", " : "", k,
                  (long long)json_integer_value(v));
  }
  al_buf_append_str(&b, j ? ".\n" : "none.\n");
  al_buf_append_str(&b, "\n## Current step\nUnknown: continue from the "
                        "messages below.\n\n## Failed attempts\nUnknown.\n\n"
                        "## Files touched\n");
  j = 0;
  json_object_foreach(paths, k, v) {
    al_buf_printf(&b, "%s\n", k);
    j++;
  }
  al_buf_append_str(&b, j ? "" : "None recorded.\n");
  al_buf_append_str(&b, "\n## Next step\nContinue the task from the messages "
                        "below; read files again where needed (cleared tool "
                        "outputs can be read back with " AL_MICRO_TOOL ").");
  json_decref(tools);
  json_decref(paths);
  return b.data;
}

size_t al__compact_cut_count(const json_t *msgs, size_t max_messages) {
  size_t n = json_array_size(msgs);
  size_t c;

  if (max_messages < 3) {
    max_messages = 3;
  }
  for (c = 2; c < n; c++) {
    if (role_is(json_array_get(msgs, c), "assistant") &&
        1 + (n - c) <= max_messages) {
      return c;
    }
  }
  return 0;
}
