/* libFuzzer target: the daemon's input side without a socket. The bytes
 * go through the NDJSON framer (4 KiB line limit, so over-long lines are
 * exercised) and every line through al_rpc_parse; each line must give
 * exactly one verdict (a message or an error code), and an error must
 * come with a NUL-terminated reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc.h"

static bool on_line(al_rpc_framer_t *f, const char *line, size_t len,
                    bool too_long, void *data) {
  al_rpc_msg_t msg;
  json_t *bad_id = NULL;
  char why[128];
  int rc;

  (void)f;
  (void)data;
  if (too_long) {
    return true;
  }
  if (line == NULL || len > 4096) {
    abort();
  }
  memset(why, 'x', sizeof(why));
  rc = al_rpc_parse(line, len, &msg, &bad_id, why, sizeof(why));
  if (rc == 0) {
    if (msg.root == NULL || msg.kind == 0) {
      abort();
    }
    al_rpc_msg_free(&msg);
  } else {
    if ((rc != AL_RPC_PARSE_ERROR && rc != AL_RPC_INVALID_REQUEST) ||
        memchr(why, '\0', sizeof(why)) == NULL) {
      abort();
    }
    json_decref(bad_id);
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_rpc_framer_t f;
  size_t half = size / 2;

  al_rpc_framer_init(&f, 4096);
  /* Two feeds: a split anywhere must not matter. */
  if (al_rpc_framer_feed(&f, (const char *)data, half, on_line, NULL) != 0 ||
      al_rpc_framer_feed(&f, (const char *)data + half, size - half, on_line,
                         NULL) != 0) {
    abort();
  }
  al_rpc_framer_free(&f);
  return 0;
}
