/* libFuzzer target: images and PDFs in tool results (src/common/media.c,
 * src/mcp/mcp_content.c). The input is a file's bytes, as a server would
 * send them in an MCP image part:
 *  - sniffing and the header readers (PNG, GIF, JPEG markers, WebP) on the
 *    raw bytes and on their base64 give the same answers;
 *  - the bytes' base64 is valid, decodes to their length; the raw bytes
 *    taken as base64 text never crash the checker;
 *  - the result conversion, under each image type and as a PDF resource:
 *    every block it emits passes the block checks, and the request built
 *    from it passes the validators of all three APIs (what we make, the
 *    mock - like the API - accepts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/base64.h>

#include "common/common.h"
#include "common/media.h"
#include "mcp/mcp.h"
#include "provider/provider.h"
#include "provider/validate.h"

static void check_request(const al_provider_t *p, json_t *hist,
                          bool (*ok)(const json_t *, const json_t *,
                                     al_validate_verdict_t *)) {
  al_provider_options_t o;
  al_provider_request_t r;
  al_validate_verdict_t v;
  json_t *body;

  al_provider_options_init(&o);
  o.model = "m";
  o.max_tokens = 10;
  if (al_provider_build_request(p, hist, &o, &r) != 0) {
    return;
  }
  body = json_loadb(r.body, r.body_len, 0, NULL);
  if (body == NULL || !ok(body, NULL, &v)) {
    abort(); /* we built what the API would refuse */
  }
  json_decref(body);
  al_provider_request_free(&r);
}

static void convert(const char *b64, const char *part) {
  static const char *const types[] = {"image/png", "image/jpeg", "image/gif",
                                      "image/webp", NULL};
  size_t i, k;

  for (i = 0; types[i] != NULL; i++) {
    json_t *res =
        strcmp(part, "image") == 0
            ? json_pack("{s:[{s:s,s:s},{s:s,s:s,s:s}]}", "content", "type",
                        "text", "text", "x", "type", "image", "mimeType",
                        types[i], "data", b64)
            : json_pack("{s:[{s:s,s:{s:s,s:s,s:s}}]}", "content", "type",
                        "resource", "resource", "uri", "file:///a.pdf",
                        "mimeType", "application/pdf", "blob", b64);
    json_t *blocks = NULL;
    json_t *b;
    bool is_error;
    char *text;
    char why[256];

    if (res == NULL) {
      return;
    }
    text = al__mcp_result_content(res, NULL, 1000, "t", &is_error, &blocks);
    if (text == NULL) {
      abort();
    }
    json_array_foreach(blocks, k, b) {
      const char *t = json_string_value(json_object_get(b, "type"));

      if (t != NULL && strcmp(t, "text") != 0 &&
          al__media_check_block(b, why, sizeof(why)) != 0) {
        abort();
      }
    }
    if (blocks != NULL) {
      json_t *hist = json_pack(
          "[{s:s,s:s},{s:s,s:[{s:s,s:s,s:s,s:{}}]},"
          "{s:s,s:[{s:s,s:s,s:O}]}]",
          "role", "user", "content", "go", "role", "assistant", "content",
          "type", "tool_use", "id", "c1", "name", "t", "input", "role", "user",
          "content", "type", "tool_result", "tool_use_id", "c1", "content",
          blocks);

      check_request(&al_provider_anthropic, hist, al__validate_anthropic);
      check_request(&al_provider_openai, hist, al__validate_openai);
      check_request(&al_provider_openai_responses, hist,
                    al__validate_responses);
      json_decref(hist);
    }
    json_decref(blocks);
    al_free(text);
    json_decref(res);
    if (strcmp(part, "image") != 0) {
      return;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t olen = 0, n = 0;
  char *b64;
  uint32_t w1, h1, w2, h2;
  bool s1, s2;
  const char *t1, *t2;

  (void)al__media_b64_valid((const char *)data, size, NULL);
  if (size == 0) {
    return 0;
  }
  mbedtls_base64_encode(NULL, 0, &olen, data, size);
  b64 = malloc(olen + 1);
  if (b64 == NULL ||
      mbedtls_base64_encode((unsigned char *)b64, olen + 1, &olen, data,
                            size) != 0) {
    abort();
  }
  b64[olen] = '\0';
  if (!al__media_b64_valid(b64, olen, &n) || n != size) {
    abort();
  }
  t1 = al__media_sniff(data, size);
  t2 = al__media_sniff_b64(b64, olen);
  if ((t1 == NULL) != (t2 == NULL) || (t1 != NULL && strcmp(t1, t2) != 0)) {
    abort();
  }
  s1 = al__media_image_size(data, size, &w1, &h1);
  if (size <= 48 * 1024) {
    s2 = al__media_image_size_b64(b64, olen, &w2, &h2);
    if (s1 != s2 || (s1 && (w1 != w2 || h1 != h2))) {
      abort();
    }
  }
  if (s1 && (w1 == 0 || h1 == 0)) {
    abort();
  }
  if (al__media_image_tokens(b64, olen) < 1) {
    abort();
  }
  convert(b64, "image");
  convert(b64, "resource");
  free(b64);
  return 0;
}
