/* Images and documents in tool results (docs/mcp.md §Images): base64
 * checks, the format a picture really is, and what it costs in context.
 * Pure: no uv, no I/O. Base64 is mbedtls's decoder.
 *
 * Media blocks are Anthropic-shaped, as the history stores them:
 *   {"type":"image","source":{"type":"base64","media_type":M,"data":B}}
 *   {"type":"document","source":{"type":"base64",
 *                               "media_type":"application/pdf","data":B}}
 * The OpenAI builders convert them (image_url / input_image data: URLs). */
#ifndef AL_COMMON_MEDIA_H
#define AL_COMMON_MEDIA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Anthropic's hard limit: an image whose base64 is longer is a 400
 * ("image exceeds 5 MB maximum: N bytes > 5242880 bytes"). */
#define AL_MEDIA_IMAGE_MAX_B64 ((size_t)5 * 1024 * 1024)
/* What an image costs when its size cannot be read: Anthropic's cost of
 * an image at the size it scales every picture down to (~1.15 MP). */
#define AL_MEDIA_IMAGE_TOKENS_DEFAULT 1600

/* Strict standard base64 (A-Z a-z 0-9 + /, '=' padding, length a multiple
 * of 4, no whitespace), non-empty. *decoded (may be NULL) gets the byte
 * count. */
bool al__media_b64_valid(const char *s, size_t len, size_t *decoded);

/* The format of decoded bytes by their signature: "image/png",
 * "image/jpeg", "image/gif", "image/webp", "application/pdf", or NULL. */
const char *al__media_sniff(const unsigned char *p, size_t n);
/* The same on base64 (decodes only a short prefix). */
const char *al__media_sniff_b64(const char *s, size_t len);

/* One of the four image types every provider takes. */
bool al__media_image_type(const char *mime);

/* Pixel size from the header (PNG IHDR, GIF screen, JPEG SOFn, WebP
 * VP8/VP8L/VP8X). False when it cannot be read. */
bool al__media_image_size(const unsigned char *p, size_t n, uint32_t *w,
                          uint32_t *h);

/* The same on base64 (decodes at most a 48 KiB prefix). */
bool al__media_image_size_b64(const char *b64, size_t len, uint32_t *w,
                              uint32_t *h);
/* The APIs refuse an image over 8000 px on a side. */
#define AL_MEDIA_IMAGE_MAX_PX 8000

/* Context tokens of one base64 image: width x height / 750 (Anthropic's
 * vision guide) after the provider's downscale (long edge 1568 px, about
 * 1.15 MP: at most AL_MEDIA_IMAGE_TOKENS_DEFAULT), from the header;
 * AL_MEDIA_IMAGE_TOKENS_DEFAULT when the size is unreadable. */
int64_t al__media_image_tokens(const char *b64, size_t len);

/* Over a history (array of messages, tool_result contents included): the
 * base64 characters of its image blocks and the tokens they really cost,
 * so a byte-based estimate can swap one for the other. */
void al__media_scan(const json_t *messages, size_t *b64_chars,
                    int64_t *tokens);

/* True when a content array (a tool_result's) has an image or document
 * block. */
bool al__media_has_blocks(const json_t *content);

/* The text view of a content array: text blocks, and each image or
 * document named with its type and size ("[image image/png, 120 bytes]"),
 * joined by newlines. al_malloc'd; NULL on OOM. */
char *al__media_text_view(const json_t *content);

/* Checks one media block as the APIs do (type, source, media_type among
 * those allowed, base64 valid, the bytes being what media_type says,
 * the size limit). 0, or -1 with a reason in why. */
int al__media_check_block(const json_t *blk, char *why, size_t why_len);

#endif
