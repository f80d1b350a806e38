/* A tools/call result as the model gets it (docs/mcp.md §Results).
 *
 * Two views of one result:
 *  - the text: every part rendered as text (images and documents named,
 *    with their size), capped with the SPEC §8 notice. Events, hooks and
 *    text-only consumers see it;
 *  - the blocks, only when the result carries media the model can take:
 *    Anthropic-shaped content blocks in order (text runs merged into one
 *    text block, images, PDF documents), the text of the text blocks
 *    capped the same way. The history stores them as the tool_result's
 *    content; the OpenAI builders convert them.
 * A part whose media is refused (bad base64, a type no provider takes, the
 * bytes not being what mimeType says, over a limit) is named in both views
 * with the reason, never sent broken. */
#include <stdio.h>
#include <string.h>

#include "common/media.h"
#include "common/utf8.h"
#include "mcp/mcp.h"
#include "tools/tools.h"

typedef struct {
  al_buf_t text; /* the text view */
  al_buf_t seg;  /* the current text run of the block view */
  json_t *blocks;
  size_t media;     /* media blocks kept */
  size_t media_b64; /* their base64 characters */
} conv_t;

static void text_add(al_buf_t *b, const char *s, size_t n) {
  if (b->len > 0) {
    al_buf_append(b, "\n", 1);
  }
  al__utf8_sanitize_append(b, s, n);
}

/* Text for both views. */
static void both(conv_t *c, const char *s) {
  text_add(&c->text, s, strlen(s));
  text_add(&c->seg, s, strlen(s));
}

static void flush_seg(conv_t *c) {
  if (c->seg.len > 0) {
    json_array_append_new(c->blocks,
                          json_pack("{s:s,s:s%}", "type", "text", "text",
                                    c->seg.data, c->seg.len));
    al_buf_reset(&c->seg);
  }
}

/* The reason base64 `data` of `mime` cannot go to the model, or NULL.
 * *mime_out gets the type to send (the bytes' own type when the server
 * named a different image type: the APIs reject a mismatch). */
static const char *media_refusal(conv_t *c, const char *mime, const json_t *d,
                                 bool image, const char **mime_out) {
  const char *s = json_string_value(d);
  size_t len = json_string_length(d);
  const char *seen;

  *mime_out = mime;
  if (image ? !al__media_image_type(mime)
            : (mime == NULL || strcmp(mime, "application/pdf") != 0)) {
    return "a type the model cannot take";
  }
  if (!al__media_b64_valid(s, len, NULL)) {
    return "invalid base64";
  }
  seen = al__media_sniff_b64(s, len);
  if (seen == NULL || (image ? !al__media_image_type(seen)
                             : strcmp(seen, "application/pdf") != 0)) {
    return image ? "not a PNG, JPEG, GIF or WebP image" : "not a PDF";
  }
  *mime_out = seen;
  if (image && len > AL_MEDIA_IMAGE_MAX_B64) {
    return "over the 5 MB image limit";
  }
  if (image) {
    uint32_t w, h;

    if (al__media_image_size_b64(s, len, &w, &h) &&
        (w > AL_MEDIA_IMAGE_MAX_PX || h > AL_MEDIA_IMAGE_MAX_PX)) {
      return "over 8000 pixels on a side";
    }
  }
  if (c->media >= AL_MCP_RESULT_MAX_MEDIA ||
      c->media_b64 + len > AL_MCP_RESULT_MAX_MEDIA_B64) {
    return "over this result's media limit";
  }
  return NULL;
}

/* An image or PDF (data: base64 string) as a block, or its summary. */
static void add_media(conv_t *c, const char *kind, const char *mime,
                      const json_t *d, const char *uri) {
  bool image = strcmp(kind, "image") == 0;
  const char *send;
  const char *why = media_refusal(c, mime, d, image, &send);
  size_t len = json_string_length(d);
  size_t bytes = 0;
  al_buf_t t;
  json_t *blk;

  al_buf_init(&t, 64 * 1024);
  if (why != NULL) {
    al_buf_printf(&t, "[%s%s%s %s, %zu bytes of base64 not shown: %s]",
                  uri != NULL ? "resource " : "", uri != NULL ? uri : "",
                  uri != NULL ? "," : kind, mime != NULL ? mime : "(no type)",
                  len, why);
    both(c, t.data != NULL ? t.data : "");
    al_buf_free(&t);
    return;
  }
  al__media_b64_valid(json_string_value(d), len, &bytes);
  blk = json_pack("{s:s,s:{s:s,s:s,s:O}}", "type",
                  image ? "image" : "document", "source", "type", "base64",
                  "media_type", send, "data", d);
  if (!image && uri != NULL) {
    json_object_set_new(blk, "title", json_string(uri));
  }
  flush_seg(c);
  json_array_append_new(c->blocks, blk);
  c->media++;
  c->media_b64 += len;
  al_buf_printf(&t, "[%s %s, %zu bytes]", image ? "image" : "document", send,
                bytes);
  if (uri != NULL) {
    al_buf_printf(&t, " from %s", uri);
  }
  text_add(&c->text, t.data, t.len);
  al_buf_free(&t);
}

static void add_part(conv_t *c, const json_t *part) {
  const char *type = json_string_value(json_object_get(part, "type"));
  const char *mime = json_string_value(json_object_get(part, "mimeType"));
  al_buf_t t;

  al_buf_init(&t, 64 * 1024);
  if (type == NULL) {
    both(c, "[content part without a type]");
  } else if (strcmp(type, "text") == 0) {
    const char *s = json_string_value(json_object_get(part, "text"));

    text_add(&c->text, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
    text_add(&c->seg, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
  } else if (strcmp(type, "image") == 0) {
    add_media(c, "image", mime, json_object_get(part, "data"), NULL);
  } else if (strcmp(type, "audio") == 0) {
    al_buf_printf(&t, "[audio %s, %zu bytes of base64 not shown]",
                  mime != NULL ? mime : "",
                  json_string_length(json_object_get(part, "data")));
    both(c, t.data);
  } else if (strcmp(type, "resource_link") == 0) {
    const char *uri = json_string_value(json_object_get(part, "uri"));

    al_buf_printf(&t, "[resource link %s]", uri != NULL ? uri : "");
    both(c, t.data);
  } else if (strcmp(type, "resource") == 0) {
    const json_t *r = json_object_get(part, "resource");
    const char *uri = json_string_value(json_object_get(r, "uri"));
    const char *rmime = json_string_value(json_object_get(r, "mimeType"));
    const char *s = json_string_value(json_object_get(r, "text"));
    const json_t *blob = json_object_get(r, "blob");

    if (uri == NULL) {
      uri = "";
    }
    if (s != NULL) {
      al_buf_printf(&t, "[resource %s]\n", uri);
      al__utf8_sanitize_append(&t, s, strlen(s));
      both(c, t.data);
    } else if (json_is_string(blob) &&
               (al__media_image_type(rmime) ||
                (rmime != NULL && strcmp(rmime, "application/pdf") == 0))) {
      add_media(c, al__media_image_type(rmime) ? "image" : "document", rmime,
                blob, uri);
    } else {
      al_buf_printf(&t, "[binary resource %s%s%s not shown]", uri,
                    rmime != NULL ? " " : "", rmime != NULL ? rmime : "");
      both(c, t.data);
    }
  } else {
    al_buf_printf(&t, "[%s content not shown]", type);
    both(c, t.data);
  }
  al_buf_free(&t);
}

/* Top-level type and required keys: the mismatches a server makes when
 * its schema and code drift apart. */
static bool structured_ok(const json_t *sc, const json_t *schema,
                          al_buf_t *why) {
  const json_t *req = json_object_get(schema, "required");
  const json_t *type = json_object_get(schema, "type");
  size_t i;
  json_t *v;

  if (json_is_string(type) && strcmp(json_string_value(type), "object") == 0 &&
      !json_is_object(sc)) {
    al_buf_printf(why, "structuredContent is not an object");
    return false;
  }
  json_array_foreach(req, i, v) {
    if (json_is_string(v) && json_object_get(sc, json_string_value(v)) == NULL) {
      al_buf_printf(why, "structuredContent lacks required property '%s'",
                    json_string_value(v));
      return false;
    }
  }
  return true;
}

/* s cut at max_chars with the notice; a new string. */
static char *capped(const al_buf_t *b, size_t max_chars, const char *tool) {
  size_t shown, total;
  size_t cut = al__tool_display_cut(b->data != NULL ? b->data : "", b->len, 0,
                                    max_chars, &shown, &total);
  al_buf_t out;

  al_buf_init(&out, cut + 256);
  al_buf_append(&out, b->data != NULL ? b->data : "", cut);
  if (shown < total) {
    al_buf_append(&out, "\n", 1);
    al__tool_truncation_notice(&out, shown, total, tool);
  }
  return out.data != NULL ? out.data : al_strdup("");
}

/* The text blocks of `blocks` cut to max_chars characters in all, the
 * notice closing the last text kept; text blocks past the cut go. */
static void cap_blocks(json_t *blocks, size_t max_chars, const char *tool) {
  size_t total = 0, left = max_chars, i, last = (size_t)-1;
  json_t *b;

  json_array_foreach(blocks, i, b) {
    const char *s = json_string_value(json_object_get(b, "text"));
    size_t shown, n;

    if (s != NULL) {
      al__tool_display_cut(s, strlen(s), 0, (size_t)-1, &shown, &n);
      total += n;
    }
  }
  if (total <= max_chars) {
    return;
  }
  for (i = 0; i < json_array_size(blocks);) {
    json_t *blk = json_array_get(blocks, i);
    const char *s = json_string_value(json_object_get(blk, "text"));
    size_t shown, n, cut;

    if (s == NULL) {
      i++;
      continue;
    }
    if (left == 0) {
      json_array_remove(blocks, i);
      continue;
    }
    cut = al__tool_display_cut(s, strlen(s), 0, left, &shown, &n);
    if (cut < strlen(s)) {
      json_object_set_new(blk, "text", json_stringn(s, cut));
    }
    left -= shown;
    last = i;
    i++;
  }
  {
    al_buf_t t;
    const char *s;

    al_buf_init(&t, (size_t)1 << 30);
    if (last != (size_t)-1) {
      s = json_string_value(json_object_get(json_array_get(blocks, last),
                                            "text"));
      al_buf_append_str(&t, s);
      al_buf_append(&t, "\n", 1);
    }
    al__tool_truncation_notice(&t, max_chars, total, tool);
    if (last != (size_t)-1) {
      json_object_set_new(json_array_get(blocks, last), "text",
                          json_string(t.data));
    } else {
      json_array_append_new(blocks, json_pack("{s:s,s:s}", "type", "text",
                                              "text", t.data));
    }
    al_buf_free(&t);
  }
}

char *al__mcp_result_content(const json_t *result, const json_t *output_schema,
                             size_t max_chars, const char *tool,
                             bool *is_error, json_t **blocks) {
  const json_t *content = json_object_get(result, "content");
  const json_t *sc = json_object_get(result, "structuredContent");
  conv_t c;
  size_t i;
  json_t *part;
  char *s;

  if (blocks != NULL) {
    *blocks = NULL;
  }
  memset(&c, 0, sizeof(c));
  al_buf_init(&c.text, (size_t)1 << 30);
  al_buf_init(&c.seg, (size_t)1 << 30);
  *is_error = json_is_true(json_object_get(result, "isError"));
  if (sc != NULL && output_schema != NULL && !*is_error &&
      !structured_ok(sc, output_schema, &c.seg)) {
    *is_error = true;
    al_buf_printf(&c.text, "Error: MCP tool '%s' returned a result that does "
                           "not match its outputSchema: %s",
                  tool, c.seg.data != NULL ? c.seg.data : "");
    al_buf_free(&c.seg);
    return c.text.data != NULL ? c.text.data : al_strdup("Error");
  }
  c.blocks = json_array();
  json_array_foreach(content, i, part) { add_part(&c, part); }
  if (json_array_size(content) == 0 && sc != NULL) {
    s = json_dumps(sc, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s != NULL) {
      al_buf_append_str(&c.text, s);
      al_free(s);
    }
  }
  if (c.text.len == 0) {
    al_buf_append_str(&c.text, "(no output)");
  }
  flush_seg(&c);
  s = capped(&c.text, max_chars, tool);
  al_buf_free(&c.text);
  al_buf_free(&c.seg);
  if (c.media > 0 && blocks != NULL && c.blocks != NULL) {
    cap_blocks(c.blocks, max_chars, tool);
    *blocks = c.blocks;
  } else {
    json_decref(c.blocks);
  }
  return s;
}

char *al__mcp_format_result(const json_t *result, const json_t *output_schema,
                            size_t max_chars, const char *tool,
                            bool *is_error) {
  return al__mcp_result_content(result, output_schema, max_chars, tool,
                                is_error, NULL);
}
