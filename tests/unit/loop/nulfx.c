/* The NUL-sending model: see nulfx.h. YAML literal blocks keep the SSE
 * text as written, backslashes included (|+: the last blank line too). */
#include "nulfx.h"

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
