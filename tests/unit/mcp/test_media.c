/* Images and PDFs in tool results (docs/mcp.md §Images): the MCP
 * conversion, the three request builders through the mock's validators,
 * the history, micro-compaction, the context estimate and the transcript. */
#include <jansson.h>
#include <mbedtls/base64.h>

#include "common/common.h"
#include "common/media.h"
#include "loop/budget.h"
#include "loop/history.h"
#include "loop/micro.h"
#include "agentloop/models.h"
#include "mcp/mcp.h"
#include "mockllm/mockllm.h"
#include "provider/provider.h"
#include "session/session.h"
#include "test.h"

/* ---- fixtures ------------------------------------------------------------------ */

/* base64 of n bytes (al_malloc'd). */
static char *b64(const unsigned char *p, size_t n) {
  size_t olen = 0;
  char *out;

  mbedtls_base64_encode(NULL, 0, &olen, p, n);
  out = al_malloc(olen + 1);
  ASSERT_NOT_NULL(out);
  ASSERT_EQ(mbedtls_base64_encode((unsigned char *)out, olen + 1, &olen, p, n),
            0);
  out[olen] = '\0';
  return out;
}

/* A PNG signature and IHDR of w x h, padded with zeros to `total` bytes
 * (the validators read headers, not pixels). */
static unsigned char *png(uint32_t w, uint32_t h, size_t total) {
  unsigned char *p = al_calloc(1, total < 33 ? 33 : total);

  memcpy(p, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
  p[16] = (unsigned char)(w >> 24);
  p[17] = (unsigned char)(w >> 16);
  p[18] = (unsigned char)(w >> 8);
  p[19] = (unsigned char)w;
  p[20] = (unsigned char)(h >> 24);
  p[21] = (unsigned char)(h >> 16);
  p[22] = (unsigned char)(h >> 8);
  p[23] = (unsigned char)h;
  p[24] = 8;
  p[25] = 2;
  return p;
}

static char *png64(uint32_t w, uint32_t h, size_t total) {
  unsigned char *p = png(w, h, total);
  char *s = b64(p, total < 33 ? 33 : total);

  al_free(p);
  return s;
}

static char *gif64(void) {
  static const unsigned char g[] = {'G', 'I', 'F', '8', '9', 'a', 10, 0, 10,
                                    0,   0,   0,   0};

  return b64(g, sizeof(g));
}

static char *pdf64(void) {
  static const char d[] = "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n";

  return b64((const unsigned char *)d, sizeof(d) - 1);
}

static json_t *image_block(const char *mt, const char *data) {
  return json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "image", "source", "type",
                   "base64", "media_type", mt, "data", data);
}

/* A history: user text, an assistant tool_use, its result `content`. */
static json_t *history_with(json_t *content) {
  return json_pack(
      "[{s:s,s:[{s:s,s:s}]},{s:s,s:[{s:s,s:s,s:s,s:{}}]},"
      "{s:s,s:[{s:s,s:s,s:o}]}]",
      "role", "user", "content", "type", "text", "text", "look at it",
      "role", "assistant", "content", "type", "tool_use", "id", "toolu_1",
      "name", "mcp__ev__get-tiny-image", "input",
      "role", "user", "content", "type", "tool_result", "tool_use_id",
      "toolu_1", "content", content);
}

static json_t *build_ex(const al_provider_t *p, const json_t *hist,
                        bool no_media) {
  al_provider_options_t o;
  al_provider_request_t r;
  json_t *body;

  al_provider_options_init(&o);
  o.no_media = no_media;
  o.model = "m";
  o.max_tokens = 100;
  o.api_key = "k";
  ASSERT_EQ(al_provider_build_request(p, hist, &o, &r), 0);
  body = json_loadb(r.body, r.body_len, 0, NULL);
  ASSERT_NOT_NULL(body);
  al_provider_request_free(&r);
  return body;
}

static json_t *build(const al_provider_t *p, const json_t *hist) {
  return build_ex(p, hist, false);
}

static const char *sv(const json_t *o, const char *path) {
  const char *s = json_string_value(o);
  char key[64];
  const char *dot;

  while (path != NULL && *path != '\0') {
    dot = strchr(path, '.');
    snprintf(key, sizeof(key), "%.*s",
             (int)(dot != NULL ? (size_t)(dot - path) : strlen(path)), path);
    if (json_is_array(o)) {
      o = json_array_get(o, (size_t)atoi(key));
    } else {
      o = json_object_get(o, key);
    }
    path = dot != NULL ? dot + 1 : NULL;
  }
  s = json_string_value(o);
  return s != NULL ? s : "(none)";
}

/* ---- base64, formats, tokens --------------------------------------------------- */

TEST_IMPL(media_base64_formats_tokens) {
  static const unsigned char jpeg[] = {
      0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0,
      1, 0, 1, 0, 0, /* APP0 (16 bytes with its length) */
      0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01, 0xE0, 0x02, 0x80, 0x03, 0, 0, 0, 0,
      0, 0, 0, 0, 0, 0, 0, 0};
  static const unsigned char webp[] = {
      'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', 'X',
      10, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 49, 0, 0};
  size_t n = 0;
  uint32_t w, h;
  unsigned char *p;
  char *s;

  ASSERT(al__media_b64_valid("aGk=", 4, &n));
  ASSERT_EQ(n, 2);
  ASSERT(!al__media_b64_valid("aGk", 3, NULL));       /* length */
  ASSERT(!al__media_b64_valid("aG k", 4, NULL));      /* whitespace */
  ASSERT(!al__media_b64_valid("aG=k", 4, NULL));      /* padding inside */
  ASSERT(!al__media_b64_valid("a===", 4, NULL));      /* three pads */
  ASSERT(!al__media_b64_valid("@@@@", 4, NULL));      /* alphabet */
  ASSERT(!al__media_b64_valid("", 0, NULL));
  ASSERT(!al__media_b64_valid("aGk=\naGk=", 9, NULL)); /* line break */

  p = png(200, 100, 40);
  ASSERT_STR_EQ(al__media_sniff(p, 40), "image/png");
  ASSERT(al__media_image_size(p, 40, &w, &h));
  ASSERT_EQ(w, 200);
  ASSERT_EQ(h, 100);
  al_free(p);
  ASSERT_STR_EQ(al__media_sniff(jpeg, sizeof(jpeg)), "image/jpeg");
  ASSERT(al__media_image_size(jpeg, sizeof(jpeg), &w, &h));
  ASSERT_EQ(w, 640);
  ASSERT_EQ(h, 480);
  ASSERT_STR_EQ(al__media_sniff(webp, sizeof(webp)), "image/webp");
  ASSERT(al__media_image_size(webp, sizeof(webp), &w, &h));
  ASSERT_EQ(w, 100);
  ASSERT_EQ(h, 50);
  s = gif64();
  ASSERT_STR_EQ(al__media_sniff_b64(s, strlen(s)), "image/gif");
  /* 10 x 10 = 100 px: one token, not zero. */
  ASSERT_EQ(al__media_image_tokens(s, strlen(s)), 1);
  al_free(s);
  s = pdf64();
  ASSERT_STR_EQ(al__media_sniff_b64(s, strlen(s)), "application/pdf");
  al_free(s);
  ASSERT_NULL(al__media_sniff((const unsigned char *)"hello world", 11));

  /* w x h / 750, rounded up; the provider's downscale caps big ones. */
  s = png64(200, 100, 40);
  ASSERT_EQ(al__media_image_tokens(s, strlen(s)), 27);
  al_free(s);
  s = b64(jpeg, sizeof(jpeg));
  ASSERT_EQ(al__media_image_tokens(s, strlen(s)), 410);
  al_free(s);
  s = png64(4000, 3000, 40);
  ASSERT_EQ(al__media_image_tokens(s, strlen(s)), AL_MEDIA_IMAGE_TOKENS_DEFAULT);
  al_free(s);
  /* Unreadable size: the fixed estimate. */
  ASSERT_EQ(al__media_image_tokens("AAAAAAAA", 8), AL_MEDIA_IMAGE_TOKENS_DEFAULT);
  return 0;
}

/* ---- the MCP conversion ---------------------------------------------------------- */

TEST_IMPL(media_mcp_result_every_part) {
  char *img = png64(20, 20, 64);
  char *gif = gif64();
  char *pdf = pdf64();
  json_t *res = json_pack(
      "{s:[{s:s,s:s},{s:s,s:s,s:s},{s:s,s:s},{s:s,s:s,s:s},"
      "{s:s,s:{s:s,s:s}},{s:s,s:{s:s,s:s,s:s}},{s:s,s:{s:s,s:s,s:s}},"
      "{s:s,s:{s:s,s:s,s:s}},{s:s,s:s},{s:s,s:s,s:s},{s:s,s:s,s:s},"
      "{s:s,s:s,s:s},{s:s}]}",
      "content",
      "type", "text", "text", "before",
      "type", "image", "mimeType", "image/png", "data", img,
      "type", "text", "text", "after",
      "type", "audio", "mimeType", "audio/wav", "data", "UklGRg==",
      "type", "resource", "resource", "uri", "file:///t.txt", "text", "hello",
      "type", "resource", "resource", "uri", "file:///a.png", "mimeType",
      "image/png", "blob", img,
      "type", "resource", "resource", "uri", "file:///doc.pdf", "mimeType",
      "application/pdf", "blob", pdf,
      "type", "resource", "resource", "uri", "file:///x.zip", "mimeType",
      "application/zip", "blob", "UEsDBA==",
      "type", "resource_link", "uri", "file:///l",
      "type", "image", "mimeType", "image/png", "data", "!!!!",
      /* named PNG, really a GIF: sent as what it is */
      "type", "image", "mimeType", "image/png", "data", gif,
      "type", "image", "mimeType", "image/bmp", "data", "Qk0=",
      "type", "video");
  json_t *blocks = NULL;
  bool is_error = true;
  char *text;

  text = al__mcp_result_content(res, NULL, 100000, "t", &is_error, &blocks);
  ASSERT(!is_error);
  ASSERT_NOT_NULL(blocks);
  ASSERT_EQ(json_array_size(blocks), 8);
  ASSERT_STR_EQ(sv(blocks, "0.type"), "text");
  ASSERT_STR_EQ(sv(blocks, "0.text"), "before");
  ASSERT_STR_EQ(sv(blocks, "1.type"), "image");
  ASSERT_STR_EQ(sv(blocks, "1.source.type"), "base64");
  ASSERT_STR_EQ(sv(blocks, "1.source.media_type"), "image/png");
  ASSERT_STR_EQ(sv(blocks, "1.source.data"), img);
  ASSERT_STR_EQ(sv(blocks, "2.text"),
                "after\n[audio audio/wav, 8 bytes of base64 not shown]\n"
                "[resource file:///t.txt]\nhello");
  ASSERT_STR_EQ(sv(blocks, "3.type"), "image");
  ASSERT_STR_EQ(sv(blocks, "3.source.data"), img);
  ASSERT_STR_EQ(sv(blocks, "4.type"), "document");
  ASSERT_STR_EQ(sv(blocks, "4.source.media_type"), "application/pdf");
  ASSERT_STR_EQ(sv(blocks, "4.source.data"), pdf);
  ASSERT_STR_EQ(sv(blocks, "4.title"), "file:///doc.pdf");
  ASSERT_STR_EQ(sv(blocks, "5.text"),
                "[binary resource file:///x.zip application/zip not shown]\n"
                "[resource link file:///l]\n"
                "[image image/png, 4 bytes of base64 not shown: invalid "
                "base64]");
  ASSERT_STR_EQ(sv(blocks, "6.type"), "image");
  ASSERT_STR_EQ(sv(blocks, "6.source.media_type"), "image/gif");
  ASSERT_STR_EQ(sv(blocks, "7.text"),
                "[image image/bmp, 4 bytes of base64 not shown: a type the "
                "model cannot take]\n[video content not shown]");
  /* The text view (events, hooks) names every part in order. */
  ASSERT_STR_EQ(
      text,
      "before\n[image image/png, 64 bytes]\nafter\n"
      "[audio audio/wav, 8 bytes of base64 not shown]\n"
      "[resource file:///t.txt]\nhello\n"
      "[image image/png, 64 bytes] from file:///a.png\n"
      "[document application/pdf, 48 bytes] from file:///doc.pdf\n"
      "[binary resource file:///x.zip application/zip not shown]\n"
      "[resource link file:///l]\n"
      "[image image/png, 4 bytes of base64 not shown: invalid base64]\n"
      "[image image/gif, 13 bytes]\n"
      "[image image/bmp, 4 bytes of base64 not shown: a type the model "
      "cannot take]\n[video content not shown]");
  /* Everything it made is what the API takes. */
  {
    json_t *hist = history_with(json_incref(blocks));
    json_t *body = build(&al_provider_anthropic, hist);
    al_validate_verdict_t v;

    if (!al_mockllm_validate_anthropic(body, NULL, &v)) {
      AL_TEST_FAIL("%s", v.message);
    }
    json_decref(body);
    json_decref(hist);
  }
  al_free(text);
  json_decref(blocks);

  /* Text alone: no blocks, the text as before. */
  json_decref(res);
  res = json_pack("{s:[{s:s,s:s},{s:s,s:s,s:s}]}", "content", "type", "text",
                  "text", "plain", "type", "image", "mimeType", "image/png",
                  "data", "AAAA");
  text = al__mcp_result_content(res, NULL, 100000, "t", &is_error, &blocks);
  ASSERT_NULL(blocks);
  ASSERT_STR_EQ(text, "plain\n[image image/png, 4 bytes of base64 not shown: "
                      "not a PNG, JPEG, GIF or WebP image]");
  al_free(text);
  json_decref(res);
  al_free(img);
  al_free(gif);
  al_free(pdf);
  return 0;
}

static bool ant_ok(json_t *content, char *why, size_t n);

TEST_IMPL(media_mcp_result_limits) {
  char why[1024];
  /* Just over Anthropic's 5 MB of base64 for one image. */
  size_t big = AL_MEDIA_IMAGE_MAX_B64 / 4 * 3 + 3;
  char *over = png64(100, 100, big);
  /* Two of 4.5 MB: each fits alone, not both in one result's 8 MiB. */
  char *half = png64(100, 100, (size_t)4500 * 1024 / 4 * 3);
  char *small = png64(10, 10, 40);
  json_t *res, *content;
  json_t *blocks = NULL;
  bool is_error;
  char *text;
  size_t i;

  ASSERT_EQ(strlen(over), AL_MEDIA_IMAGE_MAX_B64 + 4);
  res = json_pack("{s:[{s:s,s:s,s:s}]}", "content", "type", "image",
                  "mimeType", "image/png", "data", over);
  text = al__mcp_result_content(res, NULL, 100000, "t", &is_error, &blocks);
  ASSERT_NULL(blocks);
  ASSERT_NOT_NULL(strstr(text, "over the 5 MB image limit"));
  al_free(text);
  json_decref(res);

  res = json_pack("{s:[{s:s,s:s,s:s},{s:s,s:s,s:s}]}", "content", "type",
                  "image", "mimeType", "image/png", "data", half, "type",
                  "image", "mimeType", "image/png", "data", half);
  text = al__mcp_result_content(res, NULL, 100000, "t", &is_error, &blocks);
  ASSERT_NOT_NULL(blocks);
  ASSERT_EQ(json_array_size(blocks), 2);
  ASSERT_STR_EQ(sv(blocks, "0.type"), "image");
  ASSERT_NOT_NULL(strstr(sv(blocks, "1.text"),
                         "over this result's media limit"));
  al_free(text);
  json_decref(blocks);
  json_decref(res);

  /* At most AL_MCP_RESULT_MAX_MEDIA images. */
  content = json_array();
  for (i = 0; i < AL_MCP_RESULT_MAX_MEDIA + 1; i++) {
    json_array_append_new(content, json_pack("{s:s,s:s,s:s}", "type", "image",
                                             "mimeType", "image/png", "data",
                                             small));
  }
  res = json_pack("{s:o}", "content", content);
  text = al__mcp_result_content(res, NULL, 100000, "t", &is_error, &blocks);
  ASSERT_EQ(json_array_size(blocks), AL_MCP_RESULT_MAX_MEDIA + 1);
  ASSERT_STR_EQ(sv(blocks, "19.type"), "image");
  ASSERT_STR_EQ(sv(blocks, "20.type"), "text");
  ASSERT_NOT_NULL(strstr(sv(blocks, "20.text"), "media limit"));
  al_free(text);
  json_decref(blocks);
  json_decref(res);

  /* Over 8000 px on a side: refused as the API would. */
  {
    char *wide = png64(8001, 10, 40);

    res = json_pack("{s:[{s:s,s:s,s:s}]}", "content", "type", "image",
                    "mimeType", "image/png", "data", wide);
    text = al__mcp_result_content(res, NULL, 100000, "t", &is_error, &blocks);
    ASSERT_NULL(blocks);
    ASSERT_NOT_NULL(strstr(text, "over 8000 pixels on a side"));
    al_free(text);
    json_decref(res);
    ASSERT(!ant_ok(json_pack("[o]", image_block("image/png", wide)), why,
                   sizeof(why)));
    ASSERT_NOT_NULL(strstr(why, "exceed max allowed size: 8000 pixels"));
    al_free(wide);
  }

  /* Text is capped with the usual notice in both views; the image stays. */
  res = json_pack("{s:[{s:s,s:s},{s:s,s:s,s:s},{s:s,s:s}]}", "content",
                  "type", "text", "text", "0123456789abcdef", "type", "image",
                  "mimeType", "image/png", "data", small, "type", "text",
                  "text", "tail");
  text = al__mcp_result_content(res, NULL, 10, "mcp__x__y", &is_error,
                                &blocks);
  ASSERT_EQ(json_array_size(blocks), 2);
  ASSERT_STR_EQ(sv(blocks, "0.text"),
                "0123456789\n[OUTPUT TRUNCATED: showing 10 of 20 characters "
                "from mcp__x__y]");
  ASSERT_STR_EQ(sv(blocks, "1.type"), "image");
  ASSERT_NOT_NULL(strstr(text, "[OUTPUT TRUNCATED: showing 10 of"));
  al_free(text);
  json_decref(blocks);
  json_decref(res);

  /* An outputSchema mismatch is an error, text only. */
  res = json_pack("{s:[{s:s,s:s,s:s}],s:{}}", "content", "type", "image",
                  "mimeType", "image/png", "data", small, "structuredContent");
  {
    json_t *schema = json_pack("{s:s,s:[s]}", "type", "object", "required",
                               "v");

    text = al__mcp_result_content(res, schema, 100000, "t", &is_error,
                                  &blocks);
    json_decref(schema);
  }
  ASSERT(is_error);
  ASSERT_NULL(blocks);
  al_free(text);
  json_decref(res);
  al_free(over);
  al_free(half);
  al_free(small);
  return 0;
}

/* ---- the validators -------------------------------------------------------------- */

static bool ant_ok(json_t *content, char *why, size_t n) {
  json_t *hist = history_with(content);
  json_t *body = json_pack("{s:s,s:i,s:O}", "model", "m", "max_tokens", 10,
                           "messages", hist);
  al_validate_verdict_t v;
  bool ok = al_mockllm_validate_anthropic(body, NULL, &v);

  snprintf(why, n, "%s", v.message);
  json_decref(body);
  json_decref(hist);
  return ok;
}

TEST_IMPL(media_validate_anthropic) {
  char *img = png64(20, 20, 40);
  char *gif = gif64();
  char *pdf = pdf64();
  char *over = png64(10, 10, AL_MEDIA_IMAGE_MAX_B64 / 4 * 3 + 3);
  char why[1024];
  json_t *body;
  al_validate_verdict_t v;

  ASSERT(ant_ok(json_pack("[{s:s,s:s},o]", "type", "text", "text", "x",
                          image_block("image/png", img)),
                why, sizeof(why)));
  ASSERT(ant_ok(json_pack("[{s:s,s:{s:s,s:s,s:s}}]", "type", "document",
                          "source", "type", "base64", "media_type",
                          "application/pdf", "data", pdf),
                why, sizeof(why)));
  ASSERT(ant_ok(json_pack("[{s:s,s:{s:s,s:s}}]", "type", "image", "source",
                          "type", "url", "url", "https://e.x/a.png"),
                why, sizeof(why)));
  ASSERT(!ant_ok(json_pack("[o]", image_block("image/bmp", img)), why,
                 sizeof(why)));
  ASSERT_NOT_NULL(strstr(why, "content.0.content.0.image.source.base64."
                              "media_type: Input should be"));
  ASSERT(!ant_ok(json_pack("[o]", image_block("image/png", "iVBO@@@=")), why,
                 sizeof(why)));
  ASSERT_NOT_NULL(strstr(why, "invalid base64"));
  ASSERT(!ant_ok(json_pack("[o]", image_block("image/jpeg", img)), why,
                 sizeof(why)));
  ASSERT_NOT_NULL(strstr(why, "image/jpeg media type, but the data appears "
                              "to be image/png"));
  ASSERT(!ant_ok(json_pack("[o]", image_block("image/png", gif)), why,
                 sizeof(why)));
  ASSERT(!ant_ok(json_pack("[o]", image_block("image/png", over)), why,
                 sizeof(why)));
  ASSERT_NOT_NULL(strstr(why, "image exceeds 5 MB maximum"));
  ASSERT(!ant_ok(json_pack("[{s:s,s:{s:s,s:s}}]", "type", "image", "source",
                           "type", "base64", "media_type", "image/png"),
                 why, sizeof(why)));
  ASSERT(!ant_ok(json_pack("[{s:s,s:{s:s,s:s,s:s}}]", "type", "document",
                           "source", "type", "base64", "media_type",
                           "image/png", "data", img),
                 why, sizeof(why)));
  ASSERT(!ant_ok(json_pack("[{s:s,s:s,s:s,s:{}}]", "type", "tool_use",
                           "id", "x", "name", "y", "input"),
                 why, sizeof(why)));
  if (strstr(why, "Input tag 'tool_use'") == NULL) {
    AL_TEST_FAIL("%s", why);
  }
  /* An image in an assistant message is refused. */
  body = json_pack("{s:s,s:i,s:[{s:s,s:s},{s:s,s:[o]}]}", "model", "m",
                   "max_tokens", 10, "messages", "role", "user", "content",
                   "hi", "role", "assistant", "content",
                   image_block("image/png", img));
  ASSERT(!al_mockllm_validate_anthropic(body, NULL, &v));
  ASSERT_NOT_NULL(strstr(v.message, "image blocks can only be in user"));
  json_decref(body);
  /* A top-level user image is checked the same way. */
  body = json_pack("{s:s,s:i,s:[{s:s,s:[o]}]}", "model", "m", "max_tokens",
                   10, "messages", "role", "user", "content",
                   image_block("image/webp", img));
  ASSERT(!al_mockllm_validate_anthropic(body, NULL, &v));
  json_decref(body);
  al_free(img);
  al_free(gif);
  al_free(pdf);
  al_free(over);
  return 0;
}

/* ---- the three request builders ------------------------------------------------- */

static json_t *media_result(const char *img, const char *pdf) {
  json_t *c = json_pack("[{s:s,s:s},o,{s:s,s:s}]", "type", "text", "text",
                        "Here's the image you requested:",
                        image_block("image/png", img), "type", "text", "text",
                        "The image above is the MCP logo.");

  if (pdf != NULL) {
    json_array_append_new(c, json_pack("{s:s,s:{s:s,s:s,s:s},s:s}", "type",
                                       "document", "source", "type", "base64",
                                       "media_type", "application/pdf", "data",
                                       pdf, "title", "file:///r/doc.pdf"));
  }
  return c;
}

TEST_IMPL(media_request_anthropic) {
  char *img = png64(20, 20, 40);
  char *pdf = pdf64();
  json_t *hist = history_with(media_result(img, pdf));
  json_t *body = build(&al_provider_anthropic, hist);
  al_validate_verdict_t v;

  /* Natively: the blocks inside tool_result.content, as stored. */
  ASSERT_STR_EQ(sv(body, "messages.2.content.0.type"), "tool_result");
  ASSERT_STR_EQ(sv(body, "messages.2.content.0.content.0.text"),
                "Here's the image you requested:");
  ASSERT_STR_EQ(sv(body, "messages.2.content.0.content.1.type"), "image");
  ASSERT_STR_EQ(sv(body, "messages.2.content.0.content.1.source.data"), img);
  ASSERT_STR_EQ(sv(body, "messages.2.content.0.content.3.type"), "document");
  if (!al_mockllm_validate_anthropic(body, NULL, &v)) {
    AL_TEST_FAIL("%s", v.message);
  }
  json_decref(body);
  json_decref(hist);
  al_free(img);
  al_free(pdf);
  return 0;
}

TEST_IMPL(media_request_chat_completions) {
  char *img = png64(20, 20, 40);
  char *pdf = pdf64();
  json_t *hist = history_with(media_result(img, pdf));
  json_t *body;
  json_t *msgs;
  al_validate_verdict_t v;
  char url[256];

  /* The user's own text of that turn joins the attachments' message. */
  json_array_append_new(
      json_object_get(json_array_get(hist, 2), "content"),
      json_pack("{s:s,s:s}", "type", "text", "text", "and now?"));
  body = build(&al_provider_openai, hist);
  msgs = json_object_get(body, "messages");
  ASSERT_EQ(json_array_size(msgs), 4);
  ASSERT_STR_EQ(sv(msgs, "2.role"), "tool");
  ASSERT_STR_EQ(sv(msgs, "2.tool_call_id"), "toolu_1");
  ASSERT_STR_EQ(sv(msgs, "2.content"),
                "Here's the image you requested:\n"
                "[image image/png: in the user message after the tool "
                "results]\nThe image above is the MCP logo.\n"
                "[document application/pdf: in the user message after the "
                "tool results]");
  ASSERT_STR_EQ(sv(msgs, "3.role"), "user");
  ASSERT_STR_EQ(sv(msgs, "3.content.0.text"),
                "Attachments of tool call toolu_1");
  ASSERT_STR_EQ(sv(msgs, "3.content.1.type"), "image_url");
  snprintf(url, sizeof(url), "data:image/png;base64,%s", img);
  ASSERT_STR_EQ(sv(msgs, "3.content.1.image_url.url"), url);
  ASSERT_STR_EQ(sv(msgs, "3.content.2.type"), "file");
  ASSERT_STR_EQ(sv(msgs, "3.content.2.file.filename"), "doc.pdf");
  ASSERT_STR_EQ(sv(msgs, "3.content.3.text"), "and now?");
  if (!al_mockllm_validate_openai(body, NULL, &v)) {
    AL_TEST_FAIL("%s", v.message);
  }
  /* What the API refuses: an image in a tool message, a bad data URL. */
  json_object_set_new(json_array_get(msgs, 2), "content",
                      json_pack("[{s:s,s:{s:s}}]", "type", "image_url",
                                "image_url", "url", url));
  ASSERT(!al_mockllm_validate_openai(body, NULL, &v));
  ASSERT_NOT_NULL(strstr(v.message, "Supported values are: 'text'."));
  json_object_set_new(json_array_get(msgs, 2), "content", json_string("x"));
  ASSERT(al_mockllm_validate_openai(body, NULL, &v));
  json_object_set_new(json_object_get(json_array_get(json_object_get(
                                          json_array_get(msgs, 3), "content"),
                                      1),
                                      "image_url"),
                      "url", json_string("data:image/png;base64,@@@@"));
  ASSERT(!al_mockllm_validate_openai(body, NULL, &v));
  ASSERT_NOT_NULL(strstr(v.message, "Invalid base64"));
  json_decref(body);
  json_decref(hist);
  al_free(img);
  al_free(pdf);
  return 0;
}

TEST_IMPL(media_request_responses) {
  char *img = png64(20, 20, 40);
  char *pdf = pdf64();
  json_t *hist = history_with(media_result(img, pdf));
  json_t *body = build(&al_provider_openai_responses, hist);
  json_t *input = json_object_get(body, "input");
  json_t *out;
  al_validate_verdict_t v;
  char url[256];

  ASSERT_STR_EQ(sv(input, "2.type"), "function_call_output");
  ASSERT_STR_EQ(sv(input, "2.call_id"), "toolu_1");
  out = json_object_get(json_array_get(input, 2), "output");
  ASSERT(json_is_array(out));
  ASSERT_EQ(json_array_size(out), 4);
  ASSERT_STR_EQ(sv(out, "0.type"), "input_text");
  ASSERT_STR_EQ(sv(out, "1.type"), "input_image");
  snprintf(url, sizeof(url), "data:image/png;base64,%s", img);
  ASSERT_STR_EQ(sv(out, "1.image_url"), url);
  ASSERT_STR_EQ(sv(out, "2.type"), "input_text");
  ASSERT_STR_EQ(sv(out, "3.type"), "input_file");
  ASSERT_STR_EQ(sv(out, "3.filename"), "doc.pdf");
  if (!al__validate_responses(body, NULL, &v)) {
    AL_TEST_FAIL("%s", v.message);
  }
  json_object_set_new(json_array_get(out, 1), "image_url",
                      json_string("data:image/png;base64,AAAA"));
  ASSERT(!al__validate_responses(body, NULL, &v));
  ASSERT_NOT_NULL(strstr(v.message, "unsupported image"));
  json_object_set_new(json_array_get(out, 1), "image_url", json_string(url));
  json_object_set_new(json_array_get(out, 1), "type", json_string("image"));
  ASSERT(!al__validate_responses(body, NULL, &v));
  ASSERT_NOT_NULL(strstr(v.message, "Invalid value: 'image'"));
  json_decref(body);
  json_decref(hist);
  al_free(img);
  al_free(pdf);
  return 0;
}

/* ---- history, micro-compaction, estimate, transcript -------------------------- */

static void open_turn(al_history_t *h, const char *id) {
  json_t *a = json_pack("{s:s,s:[{s:s,s:s,s:s,s:{}}]}", "role", "assistant",
                        "content", "type", "tool_use", "id", id, "name",
                        "mcp__ev__shot", "input");

  ASSERT_EQ(al__history_commit_assistant(h, a), 0);
  json_decref(a);
}

TEST_IMPL(media_history_micro_estimate) {
  al_history_t h;
  char *img = png64(1000, 1000, 60000);
  json_t *bad = json_pack("[o]", image_block("image/png", "AAAA"));
  json_t *good = json_pack("[{s:s,s:s},o]", "type", "text", "text", "shot",
                           image_block("image/png", img));
  json_t *cleared = json_array();
  const char *const compactable[] = {"read_file", NULL};
  al_micro_options_t mo = {compactable, 3, 100, 1.0};
  char id[16];
  size_t b64n = 0;
  int64_t toks = 0, raw, bytes_raw;
  size_t body;
  int i;

  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  for (i = 0; i < 5; i++) {
    snprintf(id, sizeof(id), "t%d", i);
    open_turn(&h, id);
    /* A broken image never enters the history. */
    ASSERT_EQ(al__history_add_tool_result(&h, id, bad, false), AL_EINVAL);
    ASSERT_EQ(al__history_add_tool_result(&h, id, good, false), 0);
    ASSERT_EQ(al__history_close_turn(&h), 0);
  }
  /* Estimate: each 1000 x 1000 image is 1334 tokens, not its base64. */
  al__media_scan(al__history_to_json(&h), &b64n, &toks);
  ASSERT_EQ(b64n, 5 * strlen(img));
  ASSERT_EQ(toks, 5 * 1334);
  body = json_dumpb(al__history_to_json(&h), NULL, 0, JSON_COMPACT);
  raw = al__budget_raw_msgs(body, al__history_to_json(&h));
  bytes_raw = al__budget_raw(body, al__history_count(&h));
  ASSERT_EQ(raw, al__budget_raw(body - b64n, al__history_count(&h)) + toks);
  ASSERT(raw < bytes_raw);

  /* Micro-compaction clears old image results of any tool (mcp__ev__shot
   * is not in the compactable list), keeping the 3 newest. */
  ASSERT(al__micro_compact(h.messages, &mo, NULL, cleared) > 0);
  ASSERT_EQ(json_array_size(cleared), 2);
  ASSERT_STR_EQ(json_string_value(json_array_get(cleared, 0)), "t0");
  ASSERT_STR_EQ(json_string_value(json_array_get(cleared, 1)), "t1");
  al__media_scan(al__history_to_json(&h), &b64n, &toks);
  ASSERT_EQ(toks, 3 * 1334);
  {
    char why[256];

    ASSERT_EQ(al__history_validate(&h, why, sizeof(why)), 0);
  }
  json_decref(cleared);
  json_decref(bad);
  json_decref(good);
  al__history_free(&h);
  al_free(img);
  return 0;
}

TEST_IMPL(media_transcript_round_trip) {
  char *img = png64(20, 20, 40);
  json_t *blocks = media_result(img, NULL);
  json_t *user = json_pack("{s:s,s:[{s:s,s:s}]}", "role", "user", "content",
                           "type", "text", "text", "look");
  json_t *asst = json_pack("{s:s,s:[{s:s,s:s,s:s,s:{}}]}", "role",
                           "assistant", "content", "type", "tool_use", "id",
                           "toolu_1", "name", "mcp__ev__get-tiny-image",
                           "input");
  json_t *res = json_pack("{s:s,s:[{s:s,s:s,s:O}]}", "role", "user",
                          "content", "type", "tool_result", "tool_use_id",
                          "toolu_1", "content", blocks);
  json_t *kinds[3] = {user, asst, res};
  const al_commit_kind_t names[3] = {AL_COMMIT_USER, AL_COMMIT_ASSISTANT,
                                     AL_COMMIT_TOOL_RESULTS};
  al_buf_t b;
  al_tx_loaded_t l;
  const json_t *m;
  int i;

  al_buf_init(&b, (size_t)1 << 24);
  for (i = 0; i < 3; i++) {
    char *txt = json_dumps(kinds[i], JSON_COMPACT);
    al_blob_t *rec = al__tx_commit_record(names[i], txt, strlen(txt));

    ASSERT_NOT_NULL(rec);
    al_buf_append(&b, rec->data, rec->len);
    al_free(txt);
    al__blob_unref(rec);
  }
  ASSERT_EQ(al__tx_load_buf(b.data, b.len, 1 << 20, &l, NULL), 0);
  ASSERT_EQ(al__history_count(&l.history), 3);
  m = json_array_get(al__history_to_json(&l.history), 2);
  /* The same blocks, image and all. */
  ASSERT(json_equal(json_object_get(json_array_get(json_object_get(m,
                                                                   "content"),
                                                   0),
                                    "content"),
                    blocks));
  al__tx_loaded_free(&l);

  /* A damaged image in the record: its text view, never a broken
   * request. */
  al_buf_reset(&b);
  json_object_set_new(json_object_get(json_array_get(blocks, 1), "source"),
                      "data", json_string("@@@@"));
  for (i = 0; i < 3; i++) {
    char *txt = json_dumps(kinds[i], JSON_COMPACT);
    al_blob_t *rec = al__tx_commit_record(names[i], txt, strlen(txt));

    al_buf_append(&b, rec->data, rec->len);
    al_free(txt);
    al__blob_unref(rec);
  }
  ASSERT_EQ(al__tx_load_buf(b.data, b.len, 1 << 20, &l, NULL), 0);
  m = json_array_get(al__history_to_json(&l.history), 2);
  {
    const json_t *c = json_object_get(
        json_array_get(json_object_get(m, "content"), 0), "content");
    char why[256];

    ASSERT(json_is_string(c));
    ASSERT_NOT_NULL(strstr(json_string_value(c),
                           "Here's the image you requested:\n[image "
                           "image/png, 0 bytes]"));
    ASSERT_NOT_NULL(strstr(json_string_value(c), "were damaged"));
    ASSERT_EQ(al__history_validate(&l.history, why, sizeof(why)), 0);
  }
  al__tx_loaded_free(&l);
  al_buf_free(&b);
  json_decref(user);
  json_decref(asst);
  json_decref(res);
  json_decref(blocks);
  al_free(img);
  return 0;
}

/* A model the catalogue marks `images: false` (DeepSeek's API) gets the
 * text view only, and the validators still pass it. */
TEST_IMPL(media_model_without_images) {
  char *img = png64(20, 20, 40);
  json_t *hist = history_with(media_result(img, NULL));
  json_t *body;
  al_models_t *m;
  al_model_info_t info;
  al_validate_verdict_t v;
  static const char over[] = "models:\n  - match: 'llava*'\n    images: true\n"
                             "  - match: 'mine*'\n    images: false\n";

  ASSERT_EQ(al_models_parse(&m, over, strlen(over), "m.yaml", NULL), 0);
  al_models_lookup(m, "deepseek-chat", "openai", &info);
  ASSERT(info.no_images);
  al_models_lookup(m, "mine-7b", "openai", &info);
  ASSERT(info.no_images);
  al_models_lookup(m, "llava-13b", "openai", &info);
  ASSERT(!info.no_images);
  al_models_lookup(m, "claude-sonnet-4-5", "anthropic", &info);
  ASSERT(!info.no_images);
  al_models_free(m);

  body = build_ex(&al_provider_openai, hist, true);
  ASSERT_EQ(json_array_size(json_object_get(body, "messages")), 3);
  ASSERT_STR_EQ(sv(body, "messages.2.content"),
                "Here's the image you requested:\n"
                "[image image/png: not sent, this model takes no images]\n"
                "The image above is the MCP logo.");
  ASSERT(al_mockllm_validate_openai(body, NULL, &v));
  json_decref(body);
  body = build_ex(&al_provider_openai_responses, hist, true);
  ASSERT_STR_EQ(sv(body, "input.2.output"),
                "Here's the image you requested:\n"
                "[image image/png: not sent, this model takes no images]\n"
                "The image above is the MCP logo.");
  ASSERT(al__validate_responses(body, NULL, &v));
  json_decref(body);
  json_decref(hist);
  al_free(img);
  return 0;
}

/* The request-size guard: images are cheap in tokens but not in bytes, so
 * past 20 MiB of base64 (or 100 images) in the history the oldest media
 * results are cleared whatever min_tokens says, the newest kept. */
TEST_IMPL(media_micro_request_guard) {
  al_history_t h;
  char *mib = png64(10, 10, 786432); /* 1 MiB of base64 */
  char *tiny = png64(10, 10, 40);
  json_t *one = json_pack("[o]", image_block("image/png", mib));
  json_t *twenty = json_array();
  json_t *cleared = json_array();
  const char *const none[] = {NULL};
  al_micro_options_t mo = {none, 3, 1000000000, 1.0};
  char id[16];
  size_t b64n = 0;
  int64_t toks = 0;
  int i;

  ASSERT_EQ(strlen(mib), 1048576);
  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  for (i = 0; i < 25; i++) {
    snprintf(id, sizeof(id), "t%d", i);
    open_turn(&h, id);
    ASSERT_EQ(al__history_add_tool_result(&h, id, one, false), 0);
    ASSERT_EQ(al__history_close_turn(&h), 0);
  }
  /* 25 MiB: the 5 oldest go, though saving far less than min_tokens. */
  ASSERT(al__micro_compact(h.messages, &mo, NULL, cleared) > 0);
  ASSERT_EQ(json_array_size(cleared), 5);
  ASSERT_STR_EQ(json_string_value(json_array_get(cleared, 0)), "t0");
  ASSERT_STR_EQ(json_string_value(json_array_get(cleared, 4)), "t4");
  al__media_scan(al__history_to_json(&h), &b64n, &toks);
  ASSERT(b64n <= AL_MICRO_MEDIA_MAX_B64);
  /* Under the limit now: nothing more. */
  ASSERT_EQ(al__micro_compact(h.messages, &mo, NULL, cleared), 0);
  al__history_free(&h);

  /* 6 results of 20 images: 120 > 100, the oldest goes. */
  for (i = 0; i < 20; i++) {
    json_array_append_new(twenty, image_block("image/png", tiny));
  }
  json_array_clear(cleared);
  al__history_init(&h);
  ASSERT_EQ(al__history_append_user_text(&h, "go"), 0);
  for (i = 0; i < 6; i++) {
    snprintf(id, sizeof(id), "t%d", i);
    open_turn(&h, id);
    ASSERT_EQ(al__history_add_tool_result(&h, id, twenty, false), 0);
    ASSERT_EQ(al__history_close_turn(&h), 0);
  }
  ASSERT(al__micro_compact(h.messages, &mo, NULL, cleared) > 0);
  ASSERT_EQ(json_array_size(cleared), 1);
  ASSERT_STR_EQ(json_string_value(json_array_get(cleared, 0)), "t0");
  al__history_free(&h);
  json_decref(cleared);
  json_decref(one);
  json_decref(twenty);
  al_free(mib);
  al_free(tiny);
  return 0;
}
