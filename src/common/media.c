/* Images and documents in tool results: see media.h. */
#include <stdio.h>
#include <string.h>

#include <mbedtls/base64.h>

#include "common/common.h"
#include "common/media.h"

static bool b64_char(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '+' || c == '/';
}

bool al__media_b64_valid(const char *s, size_t len, size_t *decoded) {
  size_t i, pad = 0;

  if (s == NULL || len == 0 || len % 4 != 0) {
    return false;
  }
  /* mbedtls accepts line breaks and spaces inside; the APIs do not, so
   * the alphabet is checked here first. */
  for (i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];

    if (c == '=') {
      pad++;
    } else if (pad > 0 || !b64_char(c)) {
      return false;
    }
  }
  if (pad > 2) {
    return false;
  }
  {
    size_t olen = 0;
    int rc = mbedtls_base64_decode(NULL, 0, &olen, (const unsigned char *)s,
                                   len);

    if (rc != 0 && rc != MBEDTLS_ERR_BASE64_BUFFER_TOO_SMALL) {
      return false;
    }
    if (decoded != NULL) {
      *decoded = olen;
    }
  }
  return true;
}

/* Decodes at most the first `max` bytes' worth (a whole number of base64
 * quads). Returns the bytes decoded (0 on bad input). */
static size_t b64_prefix(const char *s, size_t len, unsigned char *out,
                         size_t max) {
  size_t take = AL_MIN(len, max / 3 * 4);
  size_t olen = 0;

  take -= take % 4;
  if (take == 0 ||
      mbedtls_base64_decode(out, max, &olen, (const unsigned char *)s, take) !=
          0) {
    return 0;
  }
  return olen;
}

const char *al__media_sniff(const unsigned char *p, size_t n) {
  if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) {
    return "image/png";
  }
  if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) {
    return "image/jpeg";
  }
  if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) {
    return "image/gif";
  }
  if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) {
    return "image/webp";
  }
  if (n >= 5 && memcmp(p, "%PDF-", 5) == 0) {
    return "application/pdf";
  }
  return NULL;
}

const char *al__media_sniff_b64(const char *s, size_t len) {
  unsigned char head[48];
  size_t n = b64_prefix(s, len, head, sizeof(head));

  return al__media_sniff(head, n);
}

bool al__media_image_type(const char *mime) {
  return mime != NULL &&
         (strcmp(mime, "image/png") == 0 || strcmp(mime, "image/jpeg") == 0 ||
          strcmp(mime, "image/gif") == 0 || strcmp(mime, "image/webp") == 0);
}

static uint32_t be16(const unsigned char *p) {
  return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

static uint32_t le16(const unsigned char *p) {
  return (uint32_t)p[1] << 8 | p[0];
}

static uint32_t le24(const unsigned char *p) {
  return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* The first SOFn marker's size; markers are walked by their lengths. */
static bool jpeg_size(const unsigned char *p, size_t n, uint32_t *w,
                      uint32_t *h) {
  size_t i = 2;

  while (i + 9 < n) {
    unsigned char m;

    if (p[i] != 0xFF) {
      return false;
    }
    m = p[i + 1];
    if (m == 0xFF) { /* fill byte */
      i++;
      continue;
    }
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
      i += 2; /* markers without a length */
      continue;
    }
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      *h = be16(p + i + 5);
      *w = be16(p + i + 7);
      return *w > 0 && *h > 0;
    }
    if (m == 0xD9 || m == 0xDA) {
      return false; /* end, or the scan: no frame header before it */
    }
    i += 2 + be16(p + i + 2);
  }
  return false;
}

bool al__media_image_size(const unsigned char *p, size_t n, uint32_t *w,
                          uint32_t *h) {
  const char *t = al__media_sniff(p, n);

  *w = *h = 0;
  if (t == NULL) {
    return false;
  }
  if (strcmp(t, "image/png") == 0) {
    if (n < 24 || memcmp(p + 12, "IHDR", 4) != 0) {
      return false;
    }
    *w = be32(p + 16);
    *h = be32(p + 20);
  } else if (strcmp(t, "image/gif") == 0) {
    if (n < 10) {
      return false;
    }
    *w = le16(p + 6);
    *h = le16(p + 8);
  } else if (strcmp(t, "image/jpeg") == 0) {
    return jpeg_size(p, n, w, h);
  } else if (strcmp(t, "image/webp") == 0) {
    if (n >= 30 && memcmp(p + 12, "VP8 ", 4) == 0) {
      *w = le16(p + 26) & 0x3FFF;
      *h = le16(p + 28) & 0x3FFF;
    } else if (n >= 25 && memcmp(p + 12, "VP8L", 4) == 0) {
      *w = 1 + (p[21] | (uint32_t)(p[22] & 0x3F) << 8);
      *h = 1 + (p[22] >> 6 | (uint32_t)p[23] << 2 |
                (uint32_t)(p[24] & 0x0F) << 10);
    } else if (n >= 30 && memcmp(p + 12, "VP8X", 4) == 0) {
      *w = 1 + le24(p + 24);
      *h = 1 + le24(p + 27);
    } else {
      return false;
    }
  } else {
    return false;
  }
  return *w > 0 && *h > 0;
}

bool al__media_image_size_b64(const char *b64, size_t len, uint32_t *w,
                              uint32_t *h) {
  /* A JPEG's frame header may sit after large EXIF/ICC segments. */
  enum { HEAD = 48 * 1024 };
  unsigned char *head = al_malloc(HEAD);
  size_t n = head != NULL ? b64_prefix(b64, len, head, HEAD) : 0;
  bool ok = al__media_image_size(head, n, w, h);

  al_free(head);
  return ok;
}

int64_t al__media_image_tokens(const char *b64, size_t len) {
  uint32_t w, h;
  uint64_t lw, lh, t;

  if (!al__media_image_size_b64(b64, len, &w, &h)) {
    return AL_MEDIA_IMAGE_TOKENS_DEFAULT;
  }
  /* The provider scales the long edge to 1568 px, then the area to about
   * 1.15 megapixels (~1,600 tokens), before it counts w x h / 750. Integer
   * arithmetic: no libm for the library's users to link. */
  lw = w;
  lh = h;
  if (lw > 1568 || lh > 1568) {
    uint64_t long_edge = lw > lh ? lw : lh;

    lw = lw * 1568 / long_edge;
    lh = lh * 1568 / long_edge;
  }
  t = (lw * lh + 749) / 750;
  if (t > AL_MEDIA_IMAGE_TOKENS_DEFAULT) {
    t = AL_MEDIA_IMAGE_TOKENS_DEFAULT;
  }
  return t > 0 ? (int64_t)t : 1;
}

static bool is_type(const json_t *b, const char *t) {
  const char *s = json_string_value(json_object_get(b, "type"));

  return s != NULL && strcmp(s, t) == 0;
}

static void scan_blocks(const json_t *content, size_t *chars, int64_t *tokens,
                        int depth) {
  size_t i;
  const json_t *b;

  json_array_foreach(content, i, b) {
    if (is_type(b, "image")) {
      const json_t *src = json_object_get(b, "source");
      const json_t *d = json_object_get(src, "data");

      if (is_type(src, "base64") && json_is_string(d)) {
        *chars += json_string_length(d);
        *tokens += al__media_image_tokens(json_string_value(d),
                                          json_string_length(d));
      }
    } else if (depth == 0 && is_type(b, "tool_result")) {
      scan_blocks(json_object_get(b, "content"), chars, tokens, 1);
    }
  }
}

void al__media_scan(const json_t *messages, size_t *b64_chars,
                    int64_t *tokens) {
  size_t i;
  const json_t *m;

  *b64_chars = 0;
  *tokens = 0;
  json_array_foreach(messages, i, m) {
    scan_blocks(json_object_get(m, "content"), b64_chars, tokens, 0);
  }
}

bool al__media_has_blocks(const json_t *content) {
  size_t i;
  const json_t *b;

  json_array_foreach(content, i, b) {
    if (is_type(b, "image") || is_type(b, "document")) {
      return true;
    }
  }
  return false;
}

int al__media_check_block(const json_t *blk, char *why, size_t why_len) {
  const json_t *src = json_object_get(blk, "source");
  const char *mt = json_string_value(json_object_get(src, "media_type"));
  const json_t *d = json_object_get(src, "data");
  bool image = is_type(blk, "image");
  const char *seen;
  size_t len;

  if (!json_is_object(src)) {
    snprintf(why, why_len, "source: Field required");
    return -1;
  }
  if (is_type(src, "url")) {
    if (!json_is_string(json_object_get(src, "url"))) {
      snprintf(why, why_len, "source.url: Field required");
      return -1;
    }
    return 0;
  }
  if (!image && is_type(src, "text")) {
    if (!json_is_string(d) || mt == NULL || strcmp(mt, "text/plain") != 0) {
      snprintf(why, why_len, "source.text: data and media_type 'text/plain' "
                             "required");
      return -1;
    }
    return 0;
  }
  if (!is_type(src, "base64")) {
    snprintf(why, why_len, "source.type: Input tag '%s' found using 'type' "
                           "does not match any of the expected tags: "
                           "'base64', 'url'%s",
             json_string_value(json_object_get(src, "type")) != NULL
                 ? json_string_value(json_object_get(src, "type"))
                 : "",
             image ? "" : ", 'text', 'content'");
    return -1;
  }
  if (image ? !al__media_image_type(mt)
            : (mt == NULL || strcmp(mt, "application/pdf") != 0)) {
    snprintf(why, why_len, "source.base64.media_type: Input should be %s",
             image ? "'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
                   : "'application/pdf'");
    return -1;
  }
  if (!json_is_string(d)) {
    snprintf(why, why_len, "source.base64.data: Field required");
    return -1;
  }
  len = json_string_length(d);
  if (!al__media_b64_valid(json_string_value(d), len, NULL)) {
    snprintf(why, why_len, "source.base64.data: invalid base64 data");
    return -1;
  }
  if (image && len > AL_MEDIA_IMAGE_MAX_B64) {
    snprintf(why, why_len, "source.base64: image exceeds 5 MB maximum: %zu "
                           "bytes > %zu bytes", len, AL_MEDIA_IMAGE_MAX_B64);
    return -1;
  }
  seen = al__media_sniff_b64(json_string_value(d), len);
  if (seen == NULL || strcmp(seen, mt) != 0) {
    snprintf(why, why_len, "source.base64.data: The %s was specified using "
                           "the %s media type, but the data appears to be %s",
             image ? "image" : "document", mt,
             seen != NULL ? seen : "of an unsupported format");
    return -1;
  }
  if (image) {
    uint32_t w, h;

    if (al__media_image_size_b64(json_string_value(d), len, &w, &h) &&
        (w > AL_MEDIA_IMAGE_MAX_PX || h > AL_MEDIA_IMAGE_MAX_PX)) {
      snprintf(why, why_len, "source.base64.data: At least one of the image "
                             "dimensions exceed max allowed size: %d pixels",
               AL_MEDIA_IMAGE_MAX_PX);
      return -1;
    }
  }
  return 0;
}

char *al__media_text_view(const json_t *content) {
  al_buf_t b;
  size_t i;
  const json_t *blk;

  al_buf_init(&b, (size_t)1 << 30);
  al_buf_append(&b, "", 0);
  json_array_foreach(content, i, blk) {
    const json_t *src = json_object_get(blk, "source");
    const json_t *d = json_object_get(src, "data");
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    size_t bytes = 0;

    if (b.len > 0) {
      al_buf_append(&b, "\n", 1);
    }
    if (is_type(blk, "text")) {
      al_buf_append_str(&b, json_string_value(json_object_get(blk, "text"))
                                ? json_string_value(json_object_get(blk,
                                                                    "text"))
                                : "");
    } else {
      if (json_is_string(d)) {
        al__media_b64_valid(json_string_value(d), json_string_length(d),
                            &bytes);
      }
      al_buf_printf(&b, "[%s %s, %zu bytes]",
                    json_string_value(json_object_get(blk, "type")) != NULL
                        ? json_string_value(json_object_get(blk, "type"))
                        : "block",
                    mt != NULL ? mt : "", bytes);
    }
  }
  return b.data;
}
