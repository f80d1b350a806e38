/* libFuzzer target: the transcript loader (RELIABILITY F). Any bytes must
 * load: bad lines are counted, a torn tail is reported, and whatever the
 * records say, the rebuilt history is closed and passes the validator
 * whenever it holds messages. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  al_tx_loaded_t l;
  size_t good = 0;

  if (al__tx_load_buf((const char *)data, size, 4096, &l, &good) == 0) {
    if (good > size || al__history_turn_open(&l.history)) {
      abort();
    }
    if (al__history_count(&l.history) > 0 &&
        al__history_validate(&l.history, NULL, 0) != 0) {
      abort();
    }
  }
  al__tx_loaded_free(&l);
  return 0;
}
