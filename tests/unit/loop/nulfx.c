/* The NUL-sending model: see nulfx.h. YAML literal blocks keep the SSE
 * text as written, backslashes included (|+: the last blank line too). */
#include "nulfx.h"

#include <mbedtls/base64.h>
#include <stdio.h>
#include <string.h>

#include "test.h"

#define SSE_START                                                          \
  "      event: message_start\n"                                          \
  "      data: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\","    \
  "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":"  \
  "\"x\",\"stop_reason\":null,\"usage\":{\"input_tokens\":1,"              \
  "\"output_tokens\":1}}}\n"                                               \
  "\n"
#define SSE_TEXT(i, t)                                                     \
  "      event: content_block_start\n"                                     \
  "      data: {\"type\":\"content_block_start\",\"index\":" #i ","         \
  "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n"                 \
  "\n"                                                                     \
  "      event: content_block_delta\n"                                     \
  "      data: {\"type\":\"content_block_delta\",\"index\":" #i ","         \
  "\"delta\":{\"type\":\"text_delta\",\"text\":\"" t "\"}}\n"              \
  "\n"                                                                     \
  "      event: content_block_stop\n"                                      \
  "      data: {\"type\":\"content_block_stop\",\"index\":" #i "}\n"        \
  "\n"
#define SSE_END(stop)                                                      \
  "      event: message_delta\n"                                           \
  "      data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""   \
  stop "\"},\"usage\":{\"output_tokens\":3}}\n"                            \
  "\n"                                                                     \
  "      event: message_stop\n"                                            \
  "      data: {\"type\":\"message_stop\"}\n"                            \
  "\n"

const char nul_scenario[] =
    "on_exhausted: repeat_last\n"
    "responses:\n"
    "  - raw: |+\n" SSE_START SSE_TEXT(0, "before\\u0000after")
    "      event: content_block_start\n"
    "      data: {\"type\":\"content_block_start\",\"index\":1,"
    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":"
    "\"list_directory\",\"input\":{}}}\n"
    "\n"
    "      event: content_block_delta\n"
    "      data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
    "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": "
    "\\\"no\\\\u0000such\\\"}\"}}\n"
    "\n"
    "      event: content_block_stop\n"
    "      data: {\"type\":\"content_block_stop\",\"index\":1}\n"
    "\n" SSE_END("tool_use")
    "  - raw: |+\n" SSE_START SSE_TEXT(0, "said \\u0000 again")
        SSE_END("end_turn");

/* The SSE lines without the YAML indentation. */
#define B_START                                                            \
  "event: message_start\n"                                                \
  "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\","          \
  "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":"  \
  "\"x\",\"stop_reason\":null,\"usage\":{\"input_tokens\":1,"              \
  "\"output_tokens\":1}}}\n\n"

const char *bad_utf8_scenario(void) {
  static const char body[] =
      B_START
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":0,"
      "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
      "{\"type\":\"text_delta\",\"text\":\"bad \xff\xfe bytes\"}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: content_block_start\n"
      "data: {\"type\":\"content_block_start\",\"index\":1,"
      "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":"
      "\"list_directory\",\"input\":{}}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
      "{\"type\":\"input_json_delta\",\"partial_json\":"
      "\"{\\\"path\\\": \\\"x\xffy\\\"}\"}}\n\n"
      "event: content_block_stop\n"
      "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
      "event: message_delta\n"
      "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
      "\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n"
      "event: message_stop\n"
      "data: {\"type\":\"message_stop\"}\n\n";
  static char yaml[4096];
  unsigned char b64[3000];
  size_t n = 0;

  ASSERT_EQ(mbedtls_base64_encode(b64, sizeof(b64), &n,
                                  (const unsigned char *)body,
                                  sizeof(body) - 1),
            0);
  snprintf(yaml, sizeof(yaml),
           "on_exhausted: repeat_last\n"
           "responses:\n"
           "  - raw_base64: \"%.*s\"\n"
           "  - reply: {content: [{text: done}]}\n",
           (int)n, (const char *)b64);
  return yaml;
}
