/* Images and PDFs of tool results for the OpenAI APIs (docs/mcp.md
 * §Images). The history holds them Anthropic-shaped inside tool_result
 * content; here they become
 *  - Chat Completions: a tool message is text only, so it keeps the text
 *    with a line naming each attachment, and the media follow in ONE user
 *    message after the run of tool messages (image_url / file parts with
 *    data: URLs), beside the user's own text of that turn;
 *  - Responses: function_call_output.output as an array of input_text,
 *    input_image and input_file (accepted since the 2025-09 API). */
#include <string.h>

#include "common/common.h"
#include "common/media.h"
#include "provider/provider_int.h"

static const char *type_of(const json_t *b) {
  const char *t = json_string_value(json_object_get(b, "type"));

  return t != NULL ? t : "";
}

static const char *media_type(const json_t *b) {
  const char *mt = json_string_value(
      json_object_get(json_object_get(b, "source"), "media_type"));

  return mt != NULL ? mt : "";
}

bool al__oai_is_media(const json_t *b) {
  const json_t *src = json_object_get(b, "source");

  return (strcmp(type_of(b), "image") == 0 ||
          strcmp(type_of(b), "document") == 0) &&
         strcmp(type_of(src), "base64") == 0 &&
         json_is_string(json_object_get(src, "data"));
}

json_t *al__oai_data_url(const json_t *b) {
  const json_t *d = json_object_get(json_object_get(b, "source"), "data");
  al_buf_t u;
  json_t *out;

  al_buf_init(&u, json_string_length(d) + 256);
  al_buf_printf(&u, "data:%s;base64,", media_type(b));
  al_buf_append(&u, json_string_value(d), json_string_length(d));
  out = u.data != NULL ? json_stringn(u.data, u.len) : NULL;
  al_buf_free(&u);
  return out;
}

static const char *filename(const json_t *b) {
  const char *t = json_string_value(json_object_get(b, "title"));
  const char *slash = t != NULL ? strrchr(t, '/') : NULL;

  if (slash != NULL && slash[1] != '\0') {
    return slash + 1;
  }
  return t != NULL && t[0] != '\0' ? t : "document.pdf";
}

json_t *al__oai_tool_text(const json_t *content, const char *where) {
  al_buf_t b;
  size_t i;
  const json_t *blk;
  json_t *out;

  if (json_is_string(content)) {
    return json_incref((json_t *)content);
  }
  al_buf_init(&b, (size_t)1 << 30);
  json_array_foreach(content, i, blk) {
    const char *t = type_of(blk);

    if (strcmp(t, "text") == 0 &&
        json_is_string(json_object_get(blk, "text"))) {
      if (b.len > 0) {
        al_buf_append(&b, "\n", 1);
      }
      al_buf_append_str(&b, json_string_value(json_object_get(blk, "text")));
    } else if (al__oai_is_media(blk)) {
      if (b.len > 0) {
        al_buf_append(&b, "\n", 1);
      }
      al_buf_printf(&b, "[%s %s: %s]", t, media_type(blk), where);
    }
  }
  out = json_stringn(b.data != NULL ? b.data : "", b.len);
  al_buf_free(&b);
  return out;
}

int al__oai_chat_media_parts(const json_t *content, const char *call_id,
                             json_t *parts) {
  size_t i;
  const json_t *blk;
  bool named = false;

  json_array_foreach(content, i, blk) {
    json_t *url;

    if (!al__oai_is_media(blk)) {
      continue;
    }
    if (!named) {
      json_array_append_new(
          parts, json_pack("{s:s,s:s+}", "type", "text", "text",
                           "Attachments of tool call ",
                           call_id != NULL ? call_id : ""));
      named = true;
    }
    if ((url = al__oai_data_url(blk)) == NULL) {
      return AL_ENOMEM;
    }
    if (strcmp(type_of(blk), "image") == 0) {
      json_array_append_new(parts,
                            json_pack("{s:s,s:{s:o}}", "type", "image_url",
                                      "image_url", "url", url));
    } else {
      json_array_append_new(
          parts, json_pack("{s:s,s:{s:s,s:o}}", "type", "file", "file",
                           "filename", filename(blk), "file_data", url));
    }
  }
  return 0;
}

json_t *al__oai_responses_output(const json_t *content) {
  json_t *out;
  size_t i;
  const json_t *blk;

  if (!json_is_array(content)) {
    return NULL;
  }
  out = json_array();
  json_array_foreach(content, i, blk) {
    const char *t = type_of(blk);
    json_t *item = NULL;

    if (strcmp(t, "text") == 0 &&
        json_is_string(json_object_get(blk, "text"))) {
      item = json_pack("{s:s,s:O}", "type", "input_text", "text",
                       json_object_get(blk, "text"));
    } else if (al__oai_is_media(blk) && strcmp(t, "image") == 0) {
      item = json_pack("{s:s,s:o,s:s}", "type", "input_image", "image_url",
                       al__oai_data_url(blk), "detail", "auto");
    } else if (al__oai_is_media(blk)) {
      item = json_pack("{s:s,s:s,s:o}", "type", "input_file", "filename",
                       filename(blk), "file_data", al__oai_data_url(blk));
    }
    if (item != NULL) {
      json_array_append_new(out, item);
    }
  }
  if (json_array_size(out) == 0) {
    json_array_append_new(out, json_pack("{s:s,s:s}", "type", "input_text",
                                         "text", ""));
  }
  return out;
}
