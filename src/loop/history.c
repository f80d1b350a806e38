/* The conversation history (history.h): jansson messages plus the open
 * tool turn. Every mutation builds what it adds first and links it into
 * the array last, so a failure (AL_ENOMEM included) leaves the history as
 * it was. */
#include <stdarg.h>
#include <stdio.h>

#include "common/media.h"
#include "loop/history.h"

void al__history_init(al_history_t *h) { memset(h, 0, sizeof(*h)); }

static void clear_turn(al_history_t *h) {
  json_decref(h->open_ids);
  json_decref(h->results);
  h->open_ids = NULL;
  h->results = NULL;
}

void al__history_free(al_history_t *h) {
  al_free(h->system);
  json_decref(h->messages);
  clear_turn(h);
  memset(h, 0, sizeof(*h));
}

int al__history_set_system(al_history_t *h, const char *system) {
  char *s = NULL;

  if (system != NULL && (s = al_strdup(system)) == NULL) {
    return AL_ENOMEM;
  }
  al_free(h->system);
  h->system = s;
  return 0;
}

const char *al__history_system(const al_history_t *h) { return h->system; }

size_t al__history_count(const al_history_t *h) {
  return json_array_size(h->messages);
}

const json_t *al__history_to_json(const al_history_t *h) {
  return h->messages;
}

bool al__history_turn_open(const al_history_t *h) {
  return h->open_ids != NULL;
}

const char *al__history_open_id(const al_history_t *h, size_t i) {
  return json_string_value(json_array_get(h->open_ids, i));
}

size_t al__history_pending(const al_history_t *h) {
  size_t i, n = 0;

  for (i = 0; i < json_array_size(h->open_ids); i++) {
    if (json_object_get(h->results, al__history_open_id(h, i)) == NULL) {
      n++;
    }
  }
  return n;
}

static json_t *last_message(const al_history_t *h) {
  size_t n = json_array_size(h->messages);

  return n > 0 ? json_array_get(h->messages, n - 1) : NULL;
}

static const char *str_field(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

static bool is_role(const json_t *m, const char *role) {
  const char *r = str_field(m, "role");

  return r != NULL && strcmp(r, role) == 0;
}

static bool is_type(const json_t *blk, const char *type) {
  const char *t = str_field(blk, "type");

  return t != NULL && strcmp(t, type) == 0;
}

static int ensure_messages(al_history_t *h) {
  if (h->messages == NULL && (h->messages = json_array()) == NULL) {
    return AL_ENOMEM;
  }
  return 0;
}

/* Appends a new message {role, content} (content reference stolen). */
static int push_message(al_history_t *h, const char *role, json_t *content) {
  json_t *m;

  if (content == NULL || ensure_messages(h) != 0) {
    json_decref(content);
    return AL_ENOMEM;
  }
  m = json_pack("{s:s,s:o}", "role", role, "content", content);
  if (m == NULL || json_array_append_new(h->messages, m) != 0) {
    return AL_ENOMEM;
  }
  return 0;
}

/* The content of m as an array, converting a string content (a message
 * built elsewhere) to one text block in place. NULL on failure. */
static json_t *content_array(json_t *m) {
  json_t *c = json_object_get(m, "content");
  json_t *arr;

  if (json_is_array(c)) {
    return c;
  }
  if (!json_is_string(c)) {
    return NULL;
  }
  arr = json_pack("[{s:s,s:O}]", "type", "text", "text", c);
  if (arr == NULL || json_object_set_new(m, "content", arr) != 0) {
    return NULL;
  }
  return arr;
}

int al__history_append_user_text(al_history_t *h, const char *text) {
  json_t *last = last_message(h);
  json_t *blk;
  json_t *content;

  if (text == NULL || text[0] == '\0') {
    return AL_EINVAL;
  }
  if (h->open_ids != NULL) {
    return AL_EBUSY;
  }
  blk = json_pack("{s:s,s:s}", "type", "text", "text", text);
  if (blk == NULL) {
    return AL_EINVAL; /* not UTF-8 (or out of memory) */
  }
  if (last != NULL && is_role(last, "user")) {
    /* After the tool_result blocks, which must stay first. */
    content = content_array(last);
    if (content == NULL || json_array_append_new(content, blk) != 0) {
      return AL_ENOMEM;
    }
    return 0;
  }
  return push_message(h, "user", json_pack("[o]", blk));
}

/* Is id a tool_use id anywhere in the messages? */
static bool id_used(const json_t *messages, const char *id) {
  size_t i, j;

  for (i = 0; i < json_array_size(messages); i++) {
    json_t *c = json_object_get(json_array_get(messages, i), "content");

    for (j = 0; j < json_array_size(c); j++) {
      json_t *b = json_array_get(c, j);
      const char *bid = str_field(b, "id");

      if (is_type(b, "tool_use") && bid != NULL && strcmp(bid, id) == 0) {
        return true;
      }
    }
  }
  return false;
}

int al__history_commit_assistant(al_history_t *h, const json_t *message) {
  const json_t *content = json_object_get(message, "content");
  json_t *copy = NULL;
  json_t *ids = NULL;
  json_t *last = last_message(h);
  size_t i;
  int err = AL_ENOMEM;

  if (!is_role(message, "assistant") || !json_is_array(content)) {
    return AL_EINVAL;
  }
  if (h->open_ids != NULL) {
    return AL_EBUSY;
  }
  if (json_array_size(content) == 0) {
    return 0;
  }
  if (last == NULL) {
    return AL_ESTATE; /* the first message must be the user's */
  }
  if ((ids = json_array()) == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < json_array_size(content); i++) {
    const json_t *b = json_array_get(content, i);
    const char *id;
    size_t k;

    if (!json_is_object(b) || !json_is_string(json_object_get(b, "type"))) {
      err = AL_EINVAL;
      goto fail;
    }
    if (!is_type(b, "tool_use")) {
      continue;
    }
    id = str_field(b, "id");
    if (id == NULL || str_field(b, "name") == NULL ||
        !json_is_object(json_object_get(b, "input")) ||
        id_used(h->messages, id)) {
      err = AL_EINVAL;
      goto fail;
    }
    for (k = 0; k < json_array_size(ids); k++) {
      if (strcmp(json_string_value(json_array_get(ids, k)), id) == 0) {
        err = AL_EINVAL;
        goto fail;
      }
    }
    if (json_array_append_new(ids, json_string(id)) != 0) {
      goto fail;
    }
  }
  /* Each block is copied (the history may edit its own blocks later) but
   * their members are shared, not duplicated: the reply's text can be
   * megabytes and nobody mutates a string in place. */
  if ((copy = json_array()) == NULL) {
    goto fail;
  }
  for (i = 0; i < json_array_size(content); i++) {
    if (json_array_append_new(copy, json_copy(json_array_get(content, i))) !=
        0) {
      goto fail;
    }
  }
  if (json_array_size(ids) > 0 && (h->results = json_object()) == NULL) {
    goto fail;
  }
  if (is_role(last, "assistant")) {
    /* A continuation: its blocks extend the previous reply. */
    json_t *prev = content_array(last);

    if (prev == NULL || json_array_extend(prev, copy) != 0) {
      goto fail;
    }
    json_decref(copy);
    copy = NULL;
  } else {
    json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", copy);

    copy = NULL; /* stolen by json_pack, even on failure */
    if (m == NULL || json_array_append_new(h->messages, m) != 0) {
      goto fail;
    }
  }
  if (json_array_size(ids) > 0) {
    h->open_ids = ids;
  } else {
    json_decref(ids);
  }
  return 0;

fail:
  json_decref(copy);
  json_decref(ids);
  json_decref(h->results);
  h->results = NULL;
  return err;
}

static bool is_open_id(const al_history_t *h, const char *id) {
  size_t i;

  for (i = 0; i < json_array_size(h->open_ids); i++) {
    if (strcmp(al__history_open_id(h, i), id) == 0) {
      return true;
    }
  }
  return false;
}

/* A list content as the API takes it inside a tool_result: text, image,
 * document and search_result blocks, media well formed (a damaged image
 * from a transcript must not make the history unsendable). */
static bool result_blocks_ok(const json_t *content) {
  size_t i;
  const json_t *b;
  char why[256];

  json_array_foreach(content, i, b) {
    if (is_type(b, "text")) {
      if (!json_is_string(json_object_get(b, "text"))) {
        return false;
      }
    } else if (is_type(b, "image") || is_type(b, "document")) {
      if (al__media_check_block(b, why, sizeof(why)) != 0) {
        return false;
      }
    } else if (!is_type(b, "search_result")) {
      return false;
    }
  }
  return true;
}

int al__history_add_tool_result(al_history_t *h, const char *tool_use_id,
                                const json_t *content, bool is_error) {
  json_t *blk;

  if (tool_use_id == NULL || !is_open_id(h, tool_use_id)) {
    return AL_ENOTFOUND;
  }
  if (json_object_get(h->results, tool_use_id) != NULL) {
    return AL_EEXIST;
  }
  if (!json_is_string(content) &&
      !(json_is_array(content) && result_blocks_ok(content))) {
    return AL_EINVAL;
  }
  blk = json_pack("{s:s,s:s,s:o}", "type", "tool_result", "tool_use_id",
                  tool_use_id, "content", json_deep_copy(content));
  if (blk == NULL) {
    return AL_ENOMEM;
  }
  /* is_error only when set: the API's default is false, and a success
   * result then looks like every SDK's. */
  if (is_error && json_object_set_new(blk, "is_error", json_true()) != 0) {
    json_decref(blk);
    return AL_ENOMEM;
  }
  if (json_object_set_new(h->results, tool_use_id, blk) != 0) {
    return AL_ENOMEM;
  }
  return 0;
}

int al__history_add_tool_result_text(al_history_t *h, const char *tool_use_id,
                                     const char *text, bool is_error) {
  json_t *s;
  int err;

  /* NULL or not UTF-8 (jansson refuses it): the caller's text is bad. */
  if (text == NULL || (s = json_string(text)) == NULL) {
    return AL_EINVAL;
  }
  err = al__history_add_tool_result(h, tool_use_id, s, is_error);
  json_decref(s);
  return err;
}

int al__history_close_turn(al_history_t *h) {
  json_t *content;
  size_t i;

  if (h->open_ids == NULL) {
    return AL_ESTATE;
  }
  if (al__history_pending(h) > 0) {
    return AL_EBUSY;
  }
  if ((content = json_array()) == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < json_array_size(h->open_ids); i++) {
    json_t *r = json_object_get(h->results, al__history_open_id(h, i));

    if (json_array_append(content, r) != 0) {
      json_decref(content);
      return AL_ENOMEM;
    }
  }
  /* The last message is the assistant's: nothing can be appended while
   * the turn is open, so this always starts a new user message. */
  if (push_message(h, "user", content) != 0) {
    return AL_ENOMEM;
  }
  clear_turn(h);
  return 0;
}

int al__history_cancel_open(al_history_t *h, const char *text) {
  json_t *added;
  size_t i;
  int err = 0;

  if (h->open_ids == NULL) {
    return 0;
  }
  if (text == NULL) {
    text = AL_HISTORY_CANCELLED_TEXT;
  }
  /* Remember what we add so a failure can take it back: the results
   * the tools did deliver stay, and the turn stays open. */
  if ((added = json_array()) == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < json_array_size(h->open_ids) && err == 0; i++) {
    const char *id = al__history_open_id(h, i);

    if (json_object_get(h->results, id) != NULL) {
      continue;
    }
    err = al__history_add_tool_result_text(h, id, text, true);
    if (err == 0 && json_array_append_new(added, json_string(id)) != 0) {
      json_object_del(h->results, id);
      err = AL_ENOMEM;
    }
  }
  if (err == 0) {
    err = al__history_close_turn(h);
  }
  if (err != 0) {
    for (i = 0; i < json_array_size(added); i++) {
      json_object_del(h->results,
                      json_string_value(json_array_get(added, i)));
    }
  }
  json_decref(added);
  return err;
}

int al__history_copy(const al_history_t *src, al_history_t *dst) {
  al__history_init(dst);
  if (src->system != NULL && (dst->system = al_strdup(src->system)) == NULL) {
    goto fail;
  }
  if (src->messages != NULL &&
      (dst->messages = json_deep_copy(src->messages)) == NULL) {
    goto fail;
  }
  if (src->open_ids != NULL &&
      ((dst->open_ids = json_deep_copy(src->open_ids)) == NULL ||
       (dst->results = json_deep_copy(src->results)) == NULL)) {
    goto fail;
  }
  return 0;

fail:
  al__history_free(dst);
  return AL_ENOMEM;
}

/* ---- validation ---------------------------------------------------------- */

static int bad(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(char *why, size_t why_len, const char *fmt, ...) {
  va_list ap;

  if (why != NULL && why_len > 0) {
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
  }
  return AL_EINVAL;
}

static bool has_str(const json_t *b, const char *k) {
  return json_is_string(json_object_get(b, k));
}

/* The block shapes the API checks; other types pass as given (server tool
 * blocks, future types: the loop keeps what it received). */
static int check_block(const json_t *b, size_t n, size_t m, bool assistant,
                       char *why, size_t why_len) {
  if (!json_is_object(b) || !has_str(b, "type")) {
    return bad(why, why_len, "messages.%zu.content.%zu: not a typed block", n,
               m);
  }
  if (is_type(b, "text") && !has_str(b, "text")) {
    return bad(why, why_len, "messages.%zu.content.%zu: text without text", n,
               m);
  }
  if (is_type(b, "tool_use") &&
      (!assistant || !has_str(b, "id") || !has_str(b, "name") ||
       !json_is_object(json_object_get(b, "input")))) {
    return bad(why, why_len,
               "messages.%zu.content.%zu: tool_use needs an assistant "
               "message, a string id and name and an object input", n, m);
  }
  if (is_type(b, "tool_result")) {
    const json_t *c = json_object_get(b, "content");
    const json_t *e = json_object_get(b, "is_error");

    if (assistant || !has_str(b, "tool_use_id") ||
        (c != NULL && !json_is_string(c) && !json_is_array(c)) ||
        (e != NULL && !json_is_boolean(e))) {
      return bad(why, why_len,
                 "messages.%zu.content.%zu: tool_result needs a user "
                 "message, a string tool_use_id, string or list content "
                 "and a boolean is_error", n, m);
    }
  }
  if (is_type(b, "thinking") &&
      (!assistant || !has_str(b, "thinking") || !has_str(b, "signature"))) {
    return bad(why, why_len,
               "messages.%zu.content.%zu: thinking needs an assistant "
               "message, thinking and signature", n, m);
  }
  if (is_type(b, "redacted_thinking") && !has_str(b, "data")) {
    return bad(why, why_len,
               "messages.%zu.content.%zu: redacted_thinking without data", n,
               m);
  }
  return 0;
}

int al__history_check_blocks(const json_t *content, bool assistant,
                             char *why, size_t why_len) {
  size_t m;
  int err = 0;

  if (!json_is_array(content) || json_array_size(content) == 0) {
    return bad(why, why_len, "content must be a non-empty array");
  }
  for (m = 0; m < json_array_size(content) && err == 0; m++) {
    err = check_block(json_array_get(content, m), 0, m, assistant, why,
                      why_len);
  }
  return err;
}

int al__history_validate_json(const json_t *messages, char *why,
                              size_t why_len) {
  size_t n, m, nmsgs = json_array_size(messages);
  json_t *asked = NULL; /* tool_use blocks of the previous message */
  size_t nasked = 0;
  json_t *seen;
  int err = 0;

  if (!json_is_array(messages) || nmsgs == 0) {
    return bad(why, why_len, "messages: at least one message is required");
  }
  if ((seen = json_object()) == NULL) {
    return AL_ENOMEM;
  }
  for (n = 0; n < nmsgs && err == 0; n++) {
    const json_t *msg = json_array_get(messages, n);
    const json_t *content = json_object_get(msg, "content");
    bool assistant = is_role(msg, "assistant");
    size_t nres = 0, ncontent;
    json_t *arr = NULL;

    if (!assistant && !is_role(msg, "user")) {
      err = bad(why, why_len, "messages.%zu.role: must be user or assistant",
                n);
      break;
    }
    if (assistant != (n % 2 == 1)) {
      err = bad(why, why_len,
                "messages.%zu: roles must alternate, starting with user", n);
      break;
    }
    if (json_is_string(content) && json_string_length(content) > 0) {
      /* A plain string holds no blocks (and no results). */
      ncontent = 0;
    } else if (json_is_array(content) && json_array_size(content) > 0) {
      arr = (json_t *)content;
      ncontent = json_array_size(arr);
    } else {
      err = bad(why, why_len, "messages.%zu: content must be non-empty", n);
      break;
    }
    for (m = 0; m < ncontent && err == 0; m++) {
      const json_t *b = json_array_get(arr, m);

      err = check_block(b, n, m, assistant, why, why_len);
      if (err != 0 || !is_type(b, "tool_result")) {
        continue;
      }
      if (m != nres) {
        err = bad(why, why_len,
                  "messages.%zu.content.%zu: tool_result blocks must come "
                  "first", n, m);
      } else if (nres >= nasked ||
                 strcmp(str_field(b, "tool_use_id"),
                        str_field(json_array_get(asked, nres), "id")) != 0) {
        err = bad(why, why_len,
                  "messages.%zu.content.%zu: tool_result %s does not answer "
                  "tool_use %zu of the previous message", n, m,
                  str_field(b, "tool_use_id"), nres);
      } else {
        nres++;
      }
    }
    if (err != 0) {
      break;
    }
    if (nres < nasked) {
      err = bad(why, why_len,
                "messages.%zu: tool_use %s has no tool_result in the next "
                "message", n - 1, str_field(json_array_get(asked, nres), "id"));
      break;
    }
    json_decref(asked);
    asked = NULL;
    nasked = 0;
    if (!assistant) {
      continue;
    }
    /* Collect this message's tool_use blocks for the next one. */
    if ((asked = json_array()) == NULL) {
      err = AL_ENOMEM;
      break;
    }
    for (m = 0; m < ncontent; m++) {
      json_t *b = json_array_get(arr, m);
      const char *id;

      if (!is_type(b, "tool_use")) {
        continue;
      }
      id = str_field(b, "id");
      if (json_object_get(seen, id) != NULL) {
        err = bad(why, why_len,
                  "messages.%zu.content.%zu: tool_use id %s is not unique", n,
                  m, id);
        break;
      }
      if (json_object_set_new(seen, id, json_true()) != 0 ||
          json_array_append(asked, b) != 0) {
        err = AL_ENOMEM;
        break;
      }
    }
    nasked = json_array_size(asked);
  }
  if (err == 0 && nasked > 0) {
    err = bad(why, why_len,
              "messages.%zu: tool_use %s has no tool_result in the next "
              "message", nmsgs - 1, str_field(json_array_get(asked, 0), "id"));
  }
  json_decref(asked);
  json_decref(seen);
  return err;
}

int al__history_validate(const al_history_t *h, char *why, size_t why_len) {
  if (h->open_ids != NULL) {
    return bad(why, why_len, "a tool turn is open: %zu result(s) pending",
               al__history_pending(h));
  }
  return al__history_validate_json(h->messages, why, why_len);
}
