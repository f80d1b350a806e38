/* agentloop error codes.
 *
 * 0 is success; failures are negative. Where libuv has a code for the
 * condition we reuse its value (AL_ECANCELED == UV_ECANCELED) so libuv
 * statuses pass through unchanged. Our own conditions live in -7000..-7099.
 * One X-macro list generates the enum, al_err_name() and al_strerror(). */
#ifndef AGENTLOOP_ERRNO_H
#define AGENTLOOP_ERRNO_H

#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XX(name, value, message) for our own range. */
#define AL_ERRNO_MAP(XX)                                                      \
  XX(ETLS, -7000, "TLS failure")                                              \
  XX(ECERT, -7001, "certificate verification failed")                         \
  XX(EHTTP, -7002, "malformed HTTP response")                                 \
  XX(EPARSE, -7003, "parse error")                                            \
  XX(ETOOBIG, -7004, "size limit exceeded")                                   \
  XX(ESTALL, -7005, "stream stalled")                                         \
  XX(ECLOSING, -7006, "object is closing")                                    \
  XX(EAPI, -7007, "provider API error")                                       \
  XX(EPROTO, -7008, "protocol violation")                                     \
  XX(ECONNTIMEDOUT, -7009, "connection timed out")                            \
  XX(EPROXY, -7010, "proxy refused the tunnel")                               \
  XX(ECONFIG, -7011, "invalid configuration")                                 \
  XX(ESTATE, -7012, "operation not valid in this state")                      \
  XX(ENOTFOUND, -7013, "not found")                                           \
  XX(ETRUNCATED, -7014, "stream ended early")                                 \
  XX(EHISTORY, -7040, "invalid request history")                              \
  XX(ECONTEXT, -7041, "context window exceeded")                              \
  XX(ECOMPACT, -7042, "compaction failed")                                    \
  XX(EREDIS, -7060, "Redis answered with an error")                           \
  XX(EFENCED, -7061, "job ownership lost (lease or epoch)")

typedef enum {
#define AL_ERRNO_GEN(name, val, msg) AL_##name = (val),
  AL_ERRNO_MAP(AL_ERRNO_GEN)
#undef AL_ERRNO_GEN
  AL_ERRNO_MAX_ = -7099
} al_errno_t;

/* Codes shared with libuv. */
#define AL_ENOMEM UV_ENOMEM
#define AL_EINVAL UV_EINVAL
#define AL_ECANCELED UV_ECANCELED
#define AL_ETIMEDOUT UV_ETIMEDOUT
#define AL_ECONNRESET UV_ECONNRESET
#define AL_ECONNREFUSED UV_ECONNREFUSED
#define AL_EOF UV_EOF
#define AL_EBUSY UV_EBUSY
#define AL_EEXIST UV_EEXIST
#define AL_ENOENT UV_ENOENT
#define AL_EPIPE UV_EPIPE
#define AL_ENOTSUP UV_ENOTSUP

/* Message for any code: ours from the table, anything else via uv_strerror.
 * Never NULL; static storage. */
const char *al_strerror(int err);
/* Symbolic name ("ETOOBIG", "ECANCELED"); never NULL; static storage. */
const char *al_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif
