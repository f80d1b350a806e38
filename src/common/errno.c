/* The error table: names and messages from AL_ERRNO_MAP; anything outside
 * our range is libuv's (or errno's, through libuv). */
#include <uv.h>

#include "common/common.h"

const char *al_strerror(int err) {
  switch (err) {
#define AL_ERRNO_MSG(name, val, msg) \
  case AL_##name:                    \
    return msg;
    AL_ERRNO_MAP(AL_ERRNO_MSG)
#undef AL_ERRNO_MSG
  case 0:
    return "success";
  default:
    return uv_strerror(err);
  }
}

const char *al_err_name(int err) {
  switch (err) {
#define AL_ERRNO_NAME(name, val, msg) \
  case AL_##name:                     \
    return #name;
    AL_ERRNO_MAP(AL_ERRNO_NAME)
#undef AL_ERRNO_NAME
  case 0:
    return "OK";
  default:
    return uv_err_name(err);
  }
}
