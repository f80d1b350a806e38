/* agentloop/limits.h applied to one attempt: the transport's time and
 * header bounds and the pipeline's reply bounds. 0 leaves the layer's own
 * default; a negative limit disables it (0 in the layer's terms). */
#include "loop/agent_priv.h"

static int64_t req_value(int64_t v) { return v == 0 ? -1 : v < 0 ? 0 : v; }

void al__agent_limits_request(const al_limits_t *l,
                              al_http_request_options_t *ro) {
  /* The header block is always bounded ("none" keeps the default). */
  ro->max_header_bytes = l->header_bytes > 0 ? l->header_bytes : -1;
  ro->max_header_count = req_value(l->header_count);
  ro->total_timeout_ms = req_value(l->total_time_ms);
  ro->min_rate_bytes = req_value(l->min_rate_bytes);
  ro->min_rate_window_ms = req_value(l->min_rate_window_ms);
}

void al__agent_limits_pstream(const al_limits_t *l, al_pstream_options_t *so) {
  if (l->reply_bytes != 0) {
    so->max_reply = l->reply_bytes < 0 ? 0 : (size_t)l->reply_bytes;
  }
  if (l->tool_input_bytes != 0) {
    so->max_tool_input =
        l->tool_input_bytes < 0 ? 0 : (size_t)l->tool_input_bytes;
  }
}
