/* Request validation the way the real APIs do it (PROTOCOLS.md §2.1-2.3 for
 * Anthropic Messages, §3.1 for OpenAI Chat Completions).
 *
 * The point is that a client which passes here is accepted by the real
 * service, and one that sends a broken history (a tool_use without its
 * tool_result, results not first, ids that do not match) gets the very
 * message the real API sends, so tests catch what production would. The
 * validator is pure (jansson in, verdict out) and callable without a
 * server. It stops at the first problem, like the API does. */
#include <stdarg.h>
#include <stdio.h>

#include <string.h>
#include <strings.h>

#include "common/media.h"
#include "provider/validate.h"

static bool vfail(al_validate_verdict_t *v, int status, const char *type,
                  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The rule a message states (validate.h), from the API's own wording: one
 * table, so the texts stay exactly the APIs' and the names stay stable. */
static const struct {
  const char *text;
  const char *rule;
} rules[] = {
    {"without `tool_result` blocks immediately after",
     "tool_use_without_result"},
    {"must be followed by tool messages responding", "tool_use_without_result"},
    {"unexpected `tool_use_id`", "tool_result_without_use"},
    {"must be a response to a preceeding message", "tool_result_without_use"},
    {"must have a unique `tool_use_id`", "duplicate_tool_result"},
    {"at the beginning of this message", "tool_results_first"},
    {"`tool_use` ids must be unique", "duplicate_tool_use_id"},
    {"first message must use the", "first_message_user"},
    {"must have non-empty content", "empty_content"},
};

static bool vfail(al_validate_verdict_t *v, int status, const char *type,
                  const char *param, const char *fmt, ...) {
  va_list ap;
  size_t i;

  v->status = status;
  snprintf(v->type, sizeof(v->type), "%s", type);
  snprintf(v->param, sizeof(v->param), "%s", param ? param : "");
  va_start(ap, fmt);
  vsnprintf(v->message, sizeof(v->message), fmt, ap);
  va_end(ap);
  snprintf(v->rule, sizeof(v->rule), "%s",
           status == 401 ? "auth" : "request_shape");
  for (i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
    if (strstr(v->message, rules[i].text) != NULL) {
      snprintf(v->rule, sizeof(v->rule), "%s", rules[i].rule);
      break;
    }
  }
  return false;
}

static void vok(al_validate_verdict_t *v) {
  memset(v, 0, sizeof(*v));
}

static const char *hdr(const json_t *headers, const char *name) {
  const json_t *h = headers ? json_object_get(headers, name) : NULL;

  return json_is_string(h) ? json_string_value(h) : NULL;
}

static bool has_bearer(const json_t *headers) {
  const char *a = hdr(headers, "authorization");

  return a != NULL && strncasecmp(a, "Bearer ", 7) == 0 && a[7] != '\0';
}

static const char *jtype(const json_t *j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT:
      return "an object";
    case JSON_ARRAY:
      return "an array";
    case JSON_STRING:
      return "a string";
    case JSON_INTEGER:
      return "an integer";
    case JSON_REAL:
      return "a decimal";
    case JSON_TRUE:
    case JSON_FALSE:
      return "a boolean";
    default:
      return "null";
  }
}

/* A growing ", "-separated id list, truncated rather than overflowing. */
static void list_add(char *buf, size_t size, const char *id) {
  size_t len = strlen(buf);

  snprintf(buf + len, size - len, "%s%s", len ? ", " : "", id);
}

/* ---- Anthropic Messages ------------------------------------------------- */

static const char *const ant_block_types[] = {
    "text", "image", "document", "search_result", "tool_use", "tool_result",
    "thinking", "redacted_thinking", "server_tool_use",
    "web_search_tool_result", "web_fetch_tool_result",
    "code_execution_tool_result", "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result", "mcp_tool_use",
    "mcp_tool_result", "container_upload", NULL};

static bool known_block(const char *t) {
  size_t i;

  for (i = 0; ant_block_types[i] != NULL; i++) {
    if (strcmp(ant_block_types[i], t) == 0) {
      return true;
    }
  }
  return false;
}

#define ANT_FAIL(...) \
  vfail(v, 400, "invalid_request_error", NULL, __VA_ARGS__)

static bool need_str(al_validate_verdict_t *v, const json_t *blk, size_t n,
                     size_t m, const char *field) {
  const json_t *f = json_object_get(blk, field);

  if (f == NULL) {
    return ANT_FAIL("messages.%zu.content.%zu.%s: Field required", n, m, field);
  }
  if (!json_is_string(f)) {
    return ANT_FAIL("messages.%zu.content.%zu.%s: Input should be a valid "
                    "string", n, m, field);
  }
  return true;
}

/* An image or document block (path: where it sits, for the message). */
static bool ant_media(al_validate_verdict_t *v, const json_t *blk,
                      const char *path) {
  char why[300];

  if (al__media_check_block(blk, why, sizeof(why)) != 0) {
    return ANT_FAIL("%s.%s.%s", path, json_string_value(json_object_get(blk,
                                                                        "type")),
                    why);
  }
  return true;
}

/* A tool_result's list content: text, image, document and search_result
 * blocks only, each well formed. */
static bool ant_result_content(al_validate_verdict_t *v, const json_t *c,
                               size_t n, size_t m) {
  size_t k;
  const json_t *b;
  char path[96];

  json_array_foreach(c, k, b) {
    const char *t = json_string_value(json_object_get(b, "type"));

    snprintf(path, sizeof(path), "messages.%zu.content.%zu.content.%zu", n, m,
             k);
    if (!json_is_object(b) || t == NULL) {
      return ANT_FAIL("%s: Unable to extract tag using discriminator 'type'",
                      path);
    }
    if (strcmp(t, "text") == 0) {
      if (!json_is_string(json_object_get(b, "text"))) {
        return ANT_FAIL("%s.text.text: Field required", path);
      }
    } else if (strcmp(t, "image") == 0 || strcmp(t, "document") == 0) {
      if (!ant_media(v, b, path)) {
        return false;
      }
    } else if (strcmp(t, "search_result") != 0) {
      return ANT_FAIL("%s.type: Input tag '%s' found using 'type' does not "
                      "match any of the expected tags: 'text', 'image', "
                      "'search_result', 'document'", path, t);
    }
  }
  return true;
}

static bool ant_block(al_validate_verdict_t *v, const json_t *blk, size_t n,
                      size_t m, const char *role) {
  const json_t *t = json_object_get(blk, "type");
  const char *type;

  if (!json_is_object(blk)) {
    return ANT_FAIL("messages.%zu.content.%zu: Input should be a valid "
                    "dictionary", n, m);
  }
  if (t == NULL) {
    return ANT_FAIL("messages.%zu.content.%zu: Unable to extract tag using "
                    "discriminator 'type'", n, m);
  }
  type = json_is_string(t) ? json_string_value(t) : "";
  if (!known_block(type)) {
    return ANT_FAIL("messages.%zu.content.%zu.type: Input tag '%s' found "
                    "using 'type' does not match any of the expected tags: "
                    "'text', 'image', 'document', 'search_result', "
                    "'tool_use', 'tool_result', 'thinking', "
                    "'redacted_thinking', 'server_tool_use', "
                    "'web_search_tool_result'", n, m, type);
  }
  if (strcmp(type, "text") == 0) {
    return need_str(v, blk, n, m, "text");
  }
  if (strcmp(type, "image") == 0 || strcmp(type, "document") == 0) {
    char path[64];

    if (strcmp(role, "user") != 0) {
      return ANT_FAIL("messages.%zu.content.%zu: %s blocks can only be in "
                      "user messages", n, m, type);
    }
    snprintf(path, sizeof(path), "messages.%zu.content.%zu", n, m);
    return ant_media(v, blk, path);
  }
  if (strcmp(type, "tool_use") == 0) {
    if (strcmp(role, "assistant") != 0) {
      return ANT_FAIL("messages.%zu.content.%zu: tool_use blocks can only be "
                      "in assistant messages", n, m);
    }
    if (!need_str(v, blk, n, m, "id") || !need_str(v, blk, n, m, "name")) {
      return false;
    }
    if (!json_is_object(json_object_get(blk, "input"))) {
      return ANT_FAIL("messages.%zu.content.%zu.input: %s", n, m,
                      json_object_get(blk, "input") == NULL
                          ? "Field required"
                          : "Input should be a valid dictionary");
    }
    return true;
  }
  if (strcmp(type, "tool_result") == 0) {
    const json_t *c = json_object_get(blk, "content");
    const json_t *e = json_object_get(blk, "is_error");

    if (strcmp(role, "user") != 0) {
      return ANT_FAIL("messages.%zu.content.%zu: tool_result blocks can only "
                      "be in user messages", n, m);
    }
    if (!need_str(v, blk, n, m, "tool_use_id")) {
      return false;
    }
    if (c != NULL && !json_is_string(c) && !json_is_array(c)) {
      return ANT_FAIL("messages.%zu.content.%zu.content: Input should be a "
                      "valid string or list", n, m);
    }
    if (e != NULL && !json_is_boolean(e)) {
      return ANT_FAIL("messages.%zu.content.%zu.is_error: Input should be a "
                      "valid boolean", n, m);
    }
    return !json_is_array(c) || ant_result_content(v, c, n, m);
  }
  if (strcmp(type, "thinking") == 0) {
    if (strcmp(role, "assistant") != 0) {
      return ANT_FAIL("messages.%zu.content.%zu: thinking blocks can only be "
                      "in assistant messages", n, m);
    }
    return need_str(v, blk, n, m, "thinking") &&
           need_str(v, blk, n, m, "signature");
  }
  if (strcmp(type, "redacted_thinking") == 0) {
    return need_str(v, blk, n, m, "data");
  }
  return true;
}

static bool is_type(const json_t *blk, const char *type) {
  const json_t *t = json_object_get(blk, "type");

  return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}

static const char *str_field(const json_t *o, const char *k) {
  const json_t *f = json_object_get(o, k);

  return json_is_string(f) ? json_string_value(f) : "";
}

/* Checks the message after an assistant message (index n) that asked for
 * tools (its tool_use ids in `ids`). */
static bool ant_results(al_validate_verdict_t *v, const json_t *msgs, size_t n,
                        const json_t *ids) {
  const json_t *next = json_array_get(msgs, n + 1);
  const json_t *content;
  size_t k = json_array_size(ids);
  size_t m, i;
  size_t leading = 0;
  bool any_result = false;
  char missing[900];

  content = next ? json_object_get(next, "content") : NULL;
  if (next != NULL && json_is_array(content) &&
      strcmp(str_field(next, "role"), "user") == 0) {
    for (m = 0; m < json_array_size(content); m++) {
      const json_t *b = json_array_get(content, m);

      if (is_type(b, "tool_result")) {
        any_result = true;
        if (leading == m) {
          leading++;
        }
      }
    }
  }
  if (any_result && leading < json_array_size(content) && leading == 0) {
    /* Results exist but something else comes first. */
    return ANT_FAIL("messages.%zu: Did not find %zu tool_result block(s) at "
                    "the beginning of this message. Messages following "
                    "`tool_use` blocks must begin with a matching number of "
                    "tool_result blocks.", n + 1, k);
  }
  if (any_result) {
    /* Every leading result must answer one of this message's tool_use ids;
     * a result after other content is misplaced. */
    for (m = 0; m < json_array_size(content); m++) {
      const json_t *b = json_array_get(content, m);
      const char *id;
      bool found = false;

      if (!is_type(b, "tool_result")) {
        continue;
      }
      if (m >= leading) {
        return ANT_FAIL("messages.%zu: Did not find %zu tool_result block(s) "
                        "at the beginning of this message. Messages "
                        "following `tool_use` blocks must begin with a "
                        "matching number of tool_result blocks.", n + 1, k);
      }
      id = str_field(b, "tool_use_id");
      for (i = 0; i < k; i++) {
        if (strcmp(json_string_value(json_array_get(ids, i)), id) == 0) {
          found = true;
        }
      }
      if (!found) {
        return ANT_FAIL("messages.%zu.content.%zu: unexpected `tool_use_id` "
                        "found in `tool_result` blocks: %s. Each "
                        "`tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message.", n + 1, m,
                        id);
      }
      for (i = 0; i < m; i++) {
        if (strcmp(str_field(json_array_get(content, i), "tool_use_id"), id) ==
            0) {
          return ANT_FAIL("messages.%zu.content.%zu: each tool_result block "
                          "must have a unique `tool_use_id`: %s", n + 1, m,
                          id);
        }
      }
    }
  }
  missing[0] = '\0';
  for (i = 0; i < k; i++) {
    const char *id = json_string_value(json_array_get(ids, i));
    bool found = false;

    for (m = 0; any_result && m < leading; m++) {
      if (strcmp(str_field(json_array_get(content, m), "tool_use_id"), id) ==
          0) {
        found = true;
      }
    }
    if (!found) {
      list_add(missing, sizeof(missing), id);
    }
  }
  if (missing[0] != '\0') {
    return ANT_FAIL("messages.%zu: `tool_use` ids were found without "
                    "`tool_result` blocks immediately after: %s. Each "
                    "`tool_use` block must have a corresponding "
                    "`tool_result` block in the next message.", n, missing);
  }
  return true;
}

bool al__validate_anthropic(const json_t *body, const json_t *headers,
                            al_validate_verdict_t *v) {
  return al__validate_anthropic_ex(body, headers, true, v);
}

bool al__validate_openai(const json_t *body, const json_t *headers,
                         al_validate_verdict_t *v) {
  return al__validate_openai_ex(body, headers, true, v);
}

bool al__validate_anthropic_ex(const json_t *body, const json_t *headers,
                               bool require_key, al_validate_verdict_t *v) {
  const json_t *msgs, *mt, *tools, *model;
  json_t *seen = NULL; /* tool_use ids seen so far: object id -> true */
  json_t *prev_ids = NULL;
  size_t n, m, nmsgs;
  bool ok = false;

  vok(v);
  if (headers != NULL) {
    if (require_key && hdr(headers, "x-api-key") == NULL &&
        !has_bearer(headers)) {
      return vfail(v, 401, "authentication_error", NULL,
                   "x-api-key header is required");
    }
    if (hdr(headers, "anthropic-version") == NULL) {
      return ANT_FAIL("anthropic-version: header is required");
    }
  }
  if (!json_is_object(body)) {
    return ANT_FAIL("The request body is not valid JSON: expected an object");
  }
  model = json_object_get(body, "model");
  if (model == NULL) {
    return ANT_FAIL("model: Field required");
  }
  if (!json_is_string(model) || json_string_length(model) == 0) {
    return ANT_FAIL("model: Input should be a valid string");
  }
  mt = json_object_get(body, "max_tokens");
  if (mt == NULL) {
    return ANT_FAIL("max_tokens: Field required");
  }
  if (!json_is_integer(mt)) {
    return ANT_FAIL("max_tokens: Input should be a valid integer");
  }
  if (json_integer_value(mt) < 1) {
    return ANT_FAIL("max_tokens: Input should be greater than or equal to 1");
  }
  msgs = json_object_get(body, "messages");
  if (msgs == NULL) {
    return ANT_FAIL("messages: Field required");
  }
  if (!json_is_array(msgs)) {
    return ANT_FAIL("messages: Input should be a valid list");
  }
  nmsgs = json_array_size(msgs);
  if (nmsgs == 0) {
    return ANT_FAIL("messages: at least one message is required");
  }
  {
    const json_t *st = json_object_get(body, "stream");
    const json_t *sys = json_object_get(body, "system");

    if (st != NULL && !json_is_boolean(st)) {
      return ANT_FAIL("stream: Input should be a valid boolean");
    }
    if (sys != NULL && !json_is_string(sys) && !json_is_array(sys)) {
      return ANT_FAIL("system: Input should be a valid string or a list of "
                      "text blocks");
    }
  }
  tools = json_object_get(body, "tools");
  if (tools != NULL) {
    if (!json_is_array(tools)) {
      return ANT_FAIL("tools: Input should be a valid list");
    }
    for (n = 0; n < json_array_size(tools); n++) {
      const json_t *t = json_array_get(tools, n);
      const json_t *ty = json_object_get(t, "type");
      size_t j;

      if (!json_is_object(t)) {
        return ANT_FAIL("tools.%zu: Input should be a valid dictionary", n);
      }
      if (!json_is_string(json_object_get(t, "name"))) {
        return ANT_FAIL("tools.%zu.name: Field required", n);
      }
      /* Server tools (typed, e.g. web_search_20250305) have no schema. */
      if ((ty == NULL || (json_is_string(ty) &&
                          strcmp(json_string_value(ty), "custom") == 0)) &&
          !json_is_object(json_object_get(t, "input_schema"))) {
        return ANT_FAIL("tools.%zu.custom.input_schema: Field required", n);
      }
      for (j = 0; j < n; j++) {
        if (strcmp(str_field(json_array_get(tools, j), "name"),
                   str_field(t, "name")) == 0) {
          return ANT_FAIL("tools: Tool names must be unique.");
        }
      }
    }
  }

  seen = json_object();
  if (seen == NULL) {
    return vfail(v, 500, "api_error", NULL, "out of memory");
  }
  for (n = 0; n < nmsgs; n++) {
    const json_t *msg = json_array_get(msgs, n);
    const json_t *rj, *content;
    const char *role;
    bool last = n + 1 == nmsgs;
    json_t *ids;

    if (!json_is_object(msg)) {
      ANT_FAIL("messages.%zu: Input should be a valid dictionary", n);
      goto out;
    }
    rj = json_object_get(msg, "role");
    if (rj == NULL) {
      ANT_FAIL("messages.%zu.role: Field required", n);
      goto out;
    }
    role = json_is_string(rj) ? json_string_value(rj) : "";
    if (strcmp(role, "system") == 0) {
      ANT_FAIL("messages: Unexpected role \"system\". The Messages API "
               "accepts a top-level `system` parameter, not \"system\" as an "
               "input message role.");
      goto out;
    }
    if (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0) {
      ANT_FAIL("messages.%zu.role: Input should be 'user' or 'assistant'", n);
      goto out;
    }
    if (n == 0 && strcmp(role, "user") != 0) {
      ANT_FAIL("messages: first message must use the \"user\" role");
      goto out;
    }
    content = json_object_get(msg, "content");
    if (content == NULL) {
      ANT_FAIL("messages.%zu.content: Field required", n);
      goto out;
    }
    if (!json_is_string(content) && !json_is_array(content)) {
      ANT_FAIL("messages.%zu.content: Input should be a valid string or a "
               "list of content blocks", n);
      goto out;
    }
    if (((json_is_string(content) && json_string_length(content) == 0) ||
         (json_is_array(content) && json_array_size(content) == 0)) &&
        !(last && strcmp(role, "assistant") == 0)) {
      ANT_FAIL("messages.%zu: all messages must have non-empty content except "
               "for the optional final assistant message", n);
      goto out;
    }
    /* A user message with results must follow an assistant that asked. */
    if (json_is_array(content) && prev_ids == NULL) {
      for (m = 0; m < json_array_size(content); m++) {
        const json_t *b = json_array_get(content, m);

        if (!ant_block(v, b, n, m, role)) {
          goto out;
        }
        if (is_type(b, "tool_result")) {
          ANT_FAIL("messages.%zu.content.%zu: unexpected `tool_use_id` found "
                   "in `tool_result` blocks: %s. Each `tool_result` block "
                   "must have a corresponding `tool_use` block in the "
                   "previous message.", n, m, str_field(b, "tool_use_id"));
          goto out;
        }
      }
    } else if (json_is_array(content)) {
      for (m = 0; m < json_array_size(content); m++) {
        if (!ant_block(v, json_array_get(content, m), n, m, role)) {
          goto out;
        }
      }
    }
    if (prev_ids != NULL) {
      /* ant_results looked at this message already (from n - 1). */
      json_decref(prev_ids);
      prev_ids = NULL;
    }
    if (strcmp(role, "assistant") != 0 || !json_is_array(content)) {
      continue;
    }
    ids = json_array();
    if (ids == NULL) {
      vfail(v, 500, "api_error", NULL, "out of memory");
      goto out;
    }
    for (m = 0; m < json_array_size(content); m++) {
      const json_t *b = json_array_get(content, m);
      const char *id;

      if (!is_type(b, "tool_use")) {
        continue;
      }
      id = str_field(b, "id");
      if (json_object_get(seen, id) != NULL) {
        json_decref(ids);
        ANT_FAIL("messages.%zu.content.%zu: `tool_use` ids must be unique", n,
                 m);
        goto out;
      }
      json_object_set_new(seen, id, json_true());
      json_array_append_new(ids, json_string(id));
    }
    if (json_array_size(ids) == 0) {
      json_decref(ids);
      continue;
    }
    if (!ant_results(v, msgs, n, ids)) {
      json_decref(ids);
      goto out;
    }
    prev_ids = ids;
  }
  ok = true;
out:
  json_decref(prev_ids);
  json_decref(seen);
  return ok;
}

/* ---- OpenAI Chat Completions ---------------------------------------------- */

#define OAI_FAIL(param, ...) \
  vfail(v, 400, "invalid_request_error", param, __VA_ARGS__)

/* A data: URL of base64 bytes that must be one of `image` (the four
 * image types) or a PDF; http(s) URLs pass (the API fetches them). NULL
 * when acceptable, else the problem. */
static const char *oai_data_url(const char *url, bool image) {
  const char *comma, *semi;
  const char *seen;
  size_t n;

  if (url == NULL) {
    return "a URL string is required";
  }
  if (strncmp(url, "https://", 8) == 0 || strncmp(url, "http://", 7) == 0) {
    return image ? NULL : "a file needs file_data or file_id";
  }
  if (strncmp(url, "data:", 5) != 0 ||
      (semi = strstr(url, ";base64,")) == NULL) {
    return "Invalid image URL: expected an http(s) URL or a base64 data URL";
  }
  comma = semi + 8;
  n = strlen(comma);
  if (!al__media_b64_valid(comma, n, NULL)) {
    return "Invalid base64 data in the data URL";
  }
  seen = al__media_sniff_b64(comma, n);
  if (image ? !al__media_image_type(seen)
            : (seen == NULL || strcmp(seen, "application/pdf") != 0)) {
    return image ? "You uploaded an unsupported image. Please make sure your "
                   "image is below 20 MB in size and is of one the following "
                   "formats: ['png', 'jpeg', 'gif', 'webp']."
                 : "The file data is not a PDF.";
  }
  return NULL;
}

/* One part of a Chat Completions content array; `allowed` is the role's
 * part types ("text" alone for tool and system messages). */
static bool oai_part(al_validate_verdict_t *v, const json_t *p, size_t n,
                     size_t k, const char *allowed) {
  const char *t = json_string_value(json_object_get(p, "type"));
  char param[96];
  const char *why = NULL;

  snprintf(param, sizeof(param), "messages[%zu].content[%zu].type", n, k);
  if (t == NULL) {
    return OAI_FAIL(param, "Missing required parameter: '%s'.", param);
  }
  if (strcmp(t, "text") != 0 && strcmp(allowed, "text") == 0) {
    return OAI_FAIL(param, "Invalid value: '%s'. Supported values are: "
                    "'text'.", t);
  }
  if (strcmp(t, "text") != 0 && strcmp(t, "refusal") != 0 &&
      strcmp(allowed, "assistant") == 0) {
    return OAI_FAIL(param, "Invalid value: '%s'. Supported values are: "
                    "'text' and 'refusal'.", t);
  }
  if (strcmp(t, "text") == 0) {
    if (!json_is_string(json_object_get(p, "text"))) {
      snprintf(param, sizeof(param), "messages[%zu].content[%zu].text", n, k);
      return OAI_FAIL(param, "Missing required parameter: '%s'.", param);
    }
    return true;
  }
  if (strcmp(t, "image_url") == 0) {
    why = oai_data_url(json_string_value(json_object_get(
                           json_object_get(p, "image_url"), "url")),
                       true);
  } else if (strcmp(t, "file") == 0) {
    const json_t *f = json_object_get(p, "file");

    if (json_is_string(json_object_get(f, "file_id"))) {
      return true;
    }
    why = !json_is_string(json_object_get(f, "filename"))
              ? "Missing required parameter: 'file.filename'."
              : oai_data_url(json_string_value(json_object_get(f, "file_data")),
                             false);
  } else if (strcmp(t, "input_audio") != 0 && strcmp(t, "refusal") != 0) {
    return OAI_FAIL(param, "Invalid value: '%s'. Supported values are: "
                    "'text', 'image_url', 'input_audio', 'refusal', 'audio', "
                    "and 'file'.", t);
  }
  if (why != NULL) {
    snprintf(param, sizeof(param), "messages[%zu].content[%zu]", n, k);
    return OAI_FAIL(param, "%s", why);
  }
  return true;
}

static bool oai_parts(al_validate_verdict_t *v, const json_t *content,
                      size_t n, const char *role) {
  size_t k;
  const json_t *p;
  /* Tool, system and developer messages take text parts only (the API's
   * ChatCompletionToolMessageParam: string or text parts). */
  const char *allowed = strcmp(role, "user") == 0        ? "any"
                        : strcmp(role, "assistant") == 0 ? "assistant"
                                                         : "text";

  json_array_foreach(content, k, p) {
    if (!oai_part(v, p, n, k, allowed)) {
      return false;
    }
  }
  return true;
}

static bool oai_missing_results(al_validate_verdict_t *v, const json_t *pending,
                                size_t at) {
  char ids[900];
  char param[64];
  const char *key;
  json_t *val;

  ids[0] = '\0';
  json_object_foreach((json_t *)pending, key, val) {
    if (json_is_false(val)) {
      list_add(ids, sizeof(ids), key);
    }
  }
  if (ids[0] == '\0') {
    return true;
  }
  snprintf(param, sizeof(param), "messages.[%zu].role", at);
  return OAI_FAIL(param,
                  "An assistant message with 'tool_calls' must be followed by "
                  "tool messages responding to each 'tool_call_id'. The "
                  "following tool_call_ids did not have response messages: %s",
                  ids);
}

bool al__validate_openai_ex(const json_t *body, const json_t *headers,
                            bool require_key, al_validate_verdict_t *v) {
  const json_t *msgs, *model, *tools;
  json_t *pending = NULL; /* tool_call_id -> answered? (insertion order) */
  size_t n, nmsgs, last_asst = 0;
  char param[96];
  bool ok = false;

  vok(v);
  if (headers != NULL && require_key && !has_bearer(headers)) {
    return vfail(v, 401, "invalid_request_error", NULL,
                 "You didn't provide an API key. You need to provide your API "
                 "key in an Authorization header using Bearer auth (i.e. "
                 "Authorization: Bearer YOUR_KEY).");
  }
  if (!json_is_object(body)) {
    return OAI_FAIL(NULL, "We could not parse the JSON body of your request. "
                    "(HINT: This likely means you aren't using your HTTP "
                    "library correctly.)");
  }
  model = json_object_get(body, "model");
  if (!json_is_string(model) || json_string_length(model) == 0) {
    return OAI_FAIL(NULL, "you must provide a model parameter");
  }
  msgs = json_object_get(body, "messages");
  if (msgs == NULL) {
    return OAI_FAIL("messages", "Missing required parameter: 'messages'.");
  }
  if (!json_is_array(msgs)) {
    return OAI_FAIL("messages", "Invalid type for 'messages': expected an "
                    "array of objects, but got %s instead.", jtype(msgs));
  }
  nmsgs = json_array_size(msgs);
  if (nmsgs == 0) {
    return OAI_FAIL("messages", "Invalid 'messages': empty array. Expected an "
                    "array with minimum length 1, but got an empty array "
                    "instead.");
  }
  if (json_object_get(body, "stream_options") != NULL &&
      !json_is_true(json_object_get(body, "stream"))) {
    return OAI_FAIL("stream_options", "The 'stream_options' parameter is only "
                    "allowed when 'stream' is enabled.");
  }
  tools = json_object_get(body, "tools");
  if (tools != NULL) {
    if (!json_is_array(tools)) {
      return OAI_FAIL("tools", "Invalid type for 'tools': expected an array "
                      "of objects, but got %s instead.", jtype(tools));
    }
    for (n = 0; n < json_array_size(tools); n++) {
      const json_t *t = json_array_get(tools, n);
      const json_t *fn = json_object_get(t, "function");

      if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
        snprintf(param, sizeof(param), "tools[%zu].function.name", n);
        return OAI_FAIL(param, "Missing required parameter: '%s'.", param);
      }
    }
  }
  pending = json_object();
  if (pending == NULL) {
    return vfail(v, 500, "server_error", NULL, "out of memory");
  }
  for (n = 0; n < nmsgs; n++) {
    const json_t *msg = json_array_get(msgs, n);
    const json_t *rj, *content, *calls;
    const char *role;

    if (!json_is_object(msg)) {
      snprintf(param, sizeof(param), "messages[%zu]", n);
      OAI_FAIL(param, "Invalid type for '%s': expected an object, but got %s "
               "instead.", param, jtype(msg));
      goto out;
    }
    rj = json_object_get(msg, "role");
    if (!json_is_string(rj)) {
      snprintf(param, sizeof(param), "messages[%zu].role", n);
      OAI_FAIL(param, "Missing required parameter: '%s'.", param);
      goto out;
    }
    role = json_string_value(rj);
    if (strcmp(role, "system") != 0 && strcmp(role, "developer") != 0 &&
        strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 &&
        strcmp(role, "tool") != 0 && strcmp(role, "function") != 0) {
      snprintf(param, sizeof(param), "messages[%zu].role", n);
      OAI_FAIL(param, "Invalid value: '%s'. Supported values are: 'system', "
               "'assistant', 'user', 'function', 'tool', and 'developer'.",
               role);
      goto out;
    }
    content = json_object_get(msg, "content");
    calls = json_object_get(msg, "tool_calls");
    if (strcmp(role, "tool") == 0) {
      const json_t *id = json_object_get(msg, "tool_call_id");
      json_t *st;

      if (!json_is_string(id)) {
        snprintf(param, sizeof(param), "messages.[%zu].tool_call_id", n);
        OAI_FAIL(param, "Missing parameter 'tool_call_id': messages with role "
                 "'tool' must have a 'tool_call_id'.");
        goto out;
      }
      st = json_object_get(pending, json_string_value(id));
      if (st == NULL || json_is_true(st)) {
        snprintf(param, sizeof(param), "messages.[%zu].role", n);
        OAI_FAIL(param, "Invalid parameter: messages with role 'tool' must be "
                 "a response to a preceeding message with 'tool_calls'.");
        goto out;
      }
      json_object_set_new(pending, json_string_value(id), json_true());
      if (content == NULL || (!json_is_string(content) &&
                              !json_is_array(content))) {
        snprintf(param, sizeof(param), "messages[%zu].content", n);
        OAI_FAIL(param, "Missing required parameter: '%s'.", param);
        goto out;
      }
      if (json_is_array(content) && !oai_parts(v, content, n, role)) {
        goto out;
      }
      continue;
    }
    /* Any other message closes the run of tool answers. */
    if (!oai_missing_results(v, pending, n)) {
      goto out;
    }
    json_object_clear(pending);
    if (strcmp(role, "assistant") == 0) {
      size_t k;

      if (calls != NULL && (!json_is_array(calls) ||
                            json_array_size(calls) == 0)) {
        snprintf(param, sizeof(param), "messages[%zu].tool_calls", n);
        OAI_FAIL(param, "Invalid 'messages[%zu].tool_calls': empty array. "
                 "Expected an array with minimum length 1, but got an empty "
                 "array instead.", n);
        goto out;
      }
      if ((content == NULL || json_is_null(content)) && calls == NULL) {
        snprintf(param, sizeof(param), "messages.[%zu].content", n);
        OAI_FAIL(param, "Invalid value for 'content': expected a string, got "
                 "null.");
        goto out;
      }
      last_asst = n;
      for (k = 0; calls != NULL && k < json_array_size(calls); k++) {
        const json_t *c = json_array_get(calls, k);
        const json_t *fn = json_object_get(c, "function");
        const char *id = str_field(c, "id");

        if (!json_is_string(json_object_get(c, "id"))) {
          snprintf(param, sizeof(param), "messages[%zu].tool_calls[%zu].id",
                   n, k);
          OAI_FAIL(param, "Missing required parameter: '%s'.", param);
          goto out;
        }
        if (!json_is_object(fn) ||
            !json_is_string(json_object_get(fn, "name")) ||
            !json_is_string(json_object_get(fn, "arguments"))) {
          snprintf(param, sizeof(param),
                   "messages[%zu].tool_calls[%zu].function", n, k);
          OAI_FAIL(param, "Missing required parameter: '%s.name' or "
                   "'%s.arguments'.", param, param);
          goto out;
        }
        if (json_object_get(pending, id) != NULL) {
          snprintf(param, sizeof(param), "messages[%zu].tool_calls", n);
          OAI_FAIL(param, "Duplicate value for 'tool_call_id' of %s in "
                   "'messages[%zu].tool_calls'.", id, n);
          goto out;
        }
        json_object_set_new(pending, id, json_false());
      }
    } else if (content == NULL ||
               (!json_is_string(content) && !json_is_array(content))) {
      snprintf(param, sizeof(param), "messages[%zu].content", n);
      OAI_FAIL(param, "Missing required parameter: '%s'.", param);
      goto out;
    } else if (json_is_array(content) && !oai_parts(v, content, n, role)) {
      goto out;
    }
  }
  if (!oai_missing_results(v, pending, last_asst)) {
    goto out;
  }
  ok = true;
out:
  json_decref(pending);
  return ok;
}

/* ---- OpenAI Responses ------------------------------------------------------- */

/* input_text / input_image / input_file items (a user message's content,
 * a function_call_output's output). */
static bool rsp_parts(al_validate_verdict_t *v, const json_t *arr,
                      const char *p) {
  size_t k;
  const json_t *it;
  char param[96];

  json_array_foreach(arr, k, it) {
    const char *t = json_string_value(json_object_get(it, "type"));
    const char *why = NULL;

    snprintf(param, sizeof(param), "%s[%zu]", p, k);
    if (t == NULL) {
      return vfail(v, 400, "invalid_request_error", param,
                   "Missing required parameter: '%s.type'.", param);
    }
    if (strcmp(t, "input_text") == 0) {
      why = json_is_string(json_object_get(it, "text"))
                ? NULL
                : "Missing required parameter: 'text'.";
    } else if (strcmp(t, "input_image") == 0) {
      const char *d = json_string_value(json_object_get(it, "detail"));

      if (json_is_string(json_object_get(it, "file_id"))) {
        why = NULL;
      } else {
        why = oai_data_url(json_string_value(json_object_get(it, "image_url")),
                           true);
      }
      if (why == NULL && json_object_get(it, "detail") != NULL &&
          (d == NULL || (strcmp(d, "low") != 0 && strcmp(d, "high") != 0 &&
                         strcmp(d, "auto") != 0))) {
        why = "Invalid value for 'detail': expected 'low', 'high' or 'auto'.";
      }
    } else if (strcmp(t, "input_file") == 0) {
      if (json_is_string(json_object_get(it, "file_id")) ||
          json_is_string(json_object_get(it, "file_url"))) {
        why = NULL;
      } else if (!json_is_string(json_object_get(it, "filename"))) {
        why = "Missing required parameter: 'filename'.";
      } else {
        why = oai_data_url(json_string_value(json_object_get(it, "file_data")),
                           false);
      }
    } else {
      return vfail(v, 400, "invalid_request_error", param,
                   "Invalid value: '%s'. Supported values are: "
                   "'input_text', 'input_image', and 'input_file'.", t);
    }
    if (why != NULL) {
      return vfail(v, 400, "invalid_request_error", param, "%s", why);
    }
  }
  return true;
}

bool al__validate_responses(const json_t *body, const json_t *headers,
                            al_validate_verdict_t *v) {
  const json_t *input = json_object_get(body, "input");
  const json_t *inc = json_object_get(body, "include");
  json_t *calls;
  json_t *answered;
  bool has_enc = false;
  size_t i;
  const json_t *it;

  vok(v);
  if (headers != NULL && !has_bearer(headers)) {
    v->status = 401;
    snprintf(v->type, sizeof(v->type), "invalid_request_error");
    snprintf(v->rule, sizeof(v->rule), "auth");
    snprintf(v->message, sizeof(v->message),
             "You didn't provide an API key.");
    return false;
  }
  if (!json_is_string(json_object_get(body, "model"))) {
    return vfail(v, 400, "invalid_request_error", "model",
                 "Missing required parameter: 'model'.");
  }
  if (!json_is_array(input) || json_array_size(input) == 0) {
    return vfail(v, 400, "invalid_request_error", "input",
                 "Invalid 'input': expected a non-empty array of items.");
  }
  if (!json_is_true(json_object_get(body, "stream"))) {
    return vfail(v, 400, "invalid_request_error", "stream",
                 "mockllm serves /v1/responses streaming only");
  }
  for (i = 0; i < json_array_size(inc); i++) {
    const char *s = json_string_value(json_array_get(inc, i));

    has_enc = has_enc || (s != NULL && strcmp(s, "reasoning.encrypted_content") == 0);
  }
  calls = json_object();
  answered = json_object();
  json_array_foreach(input, i, it) {
    const char *t = json_string_value(json_object_get(it, "type"));
    const char *cid = json_string_value(json_object_get(it, "call_id"));
    char p[32];

    snprintf(p, sizeof(p), "input[%zu]", i);
    if (t == NULL && json_is_string(json_object_get(it, "role"))) {
      t = "message";
    }
    if (t == NULL) {
      json_decref(calls);
      json_decref(answered);
      return vfail(v, 400, "invalid_request_error", p,
                   "Invalid '%s': an item needs a type.", p);
    }
    if (strcmp(t, "function_call") == 0) {
      if (cid == NULL || !json_is_string(json_object_get(it, "name")) ||
          !json_is_string(json_object_get(it, "arguments"))) {
        json_decref(calls);
        json_decref(answered);
        return vfail(v, 400, "invalid_request_error", p,
                     "Invalid '%s': a function_call needs call_id, name and "
                     "arguments.", p);
      }
      json_object_set_new(calls, cid, json_true());
    } else if (strcmp(t, "function_call_output") == 0) {
      if (cid == NULL || json_object_get(calls, cid) == NULL) {
        json_decref(calls);
        json_decref(answered);
        return vfail(v, 400, "invalid_request_error", p,
                     "No tool call found for function call output with "
                     "call_id %s.", cid != NULL ? cid : "(none)");
      }
      if (json_object_get(answered, cid) != NULL) {
        json_decref(calls);
        json_decref(answered);
        return vfail(v, 400, "invalid_request_error", p,
                     "Duplicate function call output for call_id %s.", cid);
      }
      json_object_set_new(answered, cid, json_true());
      {
        const json_t *o = json_object_get(it, "output");
        char op[48];

        snprintf(op, sizeof(op), "%s.output", p);
        if (!json_is_string(o) && !json_is_array(o)) {
          json_decref(calls);
          json_decref(answered);
          return vfail(v, 400, "invalid_request_error", op,
                       "Invalid type for '%s': expected a string or an array "
                       "of input items.", op);
        }
        if (json_is_array(o) && !rsp_parts(v, o, op)) {
          json_decref(calls);
          json_decref(answered);
          return false;
        }
      }
    } else if (strcmp(t, "reasoning") == 0) {
      const json_t *enc = json_object_get(it, "encrypted_content");

      if (!json_is_string(json_object_get(it, "id")) || !json_is_string(enc) ||
          json_string_length(enc) == 0 ||
          !json_is_array(json_object_get(it, "summary"))) {
        json_decref(calls);
        json_decref(answered);
        return vfail(v, 400, "invalid_request_error", p,
                     "Invalid '%s': a reasoning item must come back as it was "
                     "returned (id, summary, encrypted_content).", p);
      }
      if (!has_enc || json_is_true(json_object_get(body, "store"))) {
        json_decref(calls);
        json_decref(answered);
        return vfail(v, 400, "invalid_request_error", "include",
                     "Encrypted reasoning needs store: false and include: "
                     "[\"reasoning.encrypted_content\"].");
      }
    } else if (strcmp(t, "message") == 0) {
      const json_t *c = json_object_get(it, "content");
      const char *role = json_string_value(json_object_get(it, "role"));
      char cp[48];

      snprintf(cp, sizeof(cp), "%s.content", p);
      if (json_is_array(c) && role != NULL && strcmp(role, "user") == 0 &&
          !rsp_parts(v, c, cp)) {
        json_decref(calls);
        json_decref(answered);
        return false;
      }
    } else {
      json_decref(calls);
      json_decref(answered);
      return vfail(v, 400, "invalid_request_error", p,
                   "Invalid '%s': unknown item type '%s'.", p, t);
    }
  }
  /* Every call answered before the next model turn. */
  {
    const char *k;
    json_t *val;

    json_object_foreach(calls, k, val) {
      if (json_object_get(answered, k) == NULL) {
        char msg[200];

        snprintf(msg, sizeof(msg), "No tool output found for function call %s.",
                 k);
        json_decref(calls);
        json_decref(answered);
        return vfail(v, 400, "invalid_request_error", "input", "%s", msg);
      }
    }
  }
  json_decref(calls);
  json_decref(answered);
  return true;
}
