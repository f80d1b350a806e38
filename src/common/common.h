/* Common layer: allocation, bounded buffers, intrusive lists, clock, log.
 *
 * Everything above this layer allocates through al_malloc & co (alloc.h)
 * and grows memory only through al_buf, whose maximum is fixed at init so
 * that oversized input is an AL_ETOOBIG error instead of an allocation. */
#ifndef AL_COMMON_H
#define AL_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agentloop/alloc.h"
#include "agentloop/errno.h"

#define AL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define AL_CONTAINER_OF(ptr, type, member) \
  ((type *)((char *)(ptr) - offsetof(type, member)))
#define AL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AL_MAX(a, b) ((a) > (b) ? (a) : (b))

char *al_strdup(const char *s);

/* limits.c: a JSON object of limits (names of agentloop/limits.h, values
 * integers or strings such as "64M" / "none") onto l. 0, or AL_EINVAL with
 * the reason in why. */
struct al_limits_s;
struct json_t;
int al_limits_from_json(struct al_limits_s *l, const struct json_t *obj,
                        char *why, size_t why_len);
char *al_strndup(const char *s, size_t n);

/* ---- bounded buffer ---------------------------------------------------- */

/* A growable byte buffer with a hard maximum. data is NUL-terminated after
 * every successful append (the terminator is not counted in len, but it
 * counts against max so a full buffer is still a C string). */
typedef struct al_buf_s {
  char *data;
  size_t len;
  size_t cap;
  size_t max;
} al_buf_t;

/* In place, cannot fail; max is the most bytes len may ever reach. */
void al_buf_init(al_buf_t *b, size_t max);
/* Makes room for `extra` more bytes. AL_ETOOBIG if len + extra > max (and
 * nothing is allocated), AL_ENOMEM if the allocator fails. */
int al_buf_reserve(al_buf_t *b, size_t extra);
int al_buf_append(al_buf_t *b, const void *p, size_t n);
int al_buf_append_str(al_buf_t *b, const char *s);
int al_buf_printf(al_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes (n <= len), keeping the rest at the start. */
void al_buf_consume(al_buf_t *b, size_t n);
static inline void al_buf_reset(al_buf_t *b) {
  b->len = 0;
  if (b->data != NULL) {
    b->data[0] = '\0';
  }
}
/* Releases memory; the buffer stays usable (empty) with the same max. */
void al_buf_free(al_buf_t *b);

/* ---- intrusive doubly linked list (circular, with a head node) ---------- */

typedef struct al_list_s {
  struct al_list_s *next;
  struct al_list_s *prev;
} al_list_t;

static inline void al_list_init(al_list_t *h) { h->next = h->prev = h; }
static inline bool al_list_empty(const al_list_t *h) { return h->next == h; }
static inline void al_list_insert_tail(al_list_t *h, al_list_t *n) {
  n->next = h;
  n->prev = h->prev;
  h->prev->next = n;
  h->prev = n;
}
static inline void al_list_insert_head(al_list_t *h, al_list_t *n) {
  n->next = h->next;
  n->prev = h;
  h->next->prev = n;
  h->next = n;
}
static inline void al_list_remove(al_list_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->next = n->prev = n;
}
#define al_list_foreach(pos, head) \
  for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* ---- clock --------------------------------------------------------------- */

/* Monotonic nanoseconds (uv_hrtime). Code that does time math takes `now`
 * as a parameter instead of calling this, so tests can inject it. */
uint64_t al_now_ns(void);

/* ---- log ----------------------------------------------------------------- */

typedef enum {
  AL_LOG_ERROR = 0,
  AL_LOG_WARN = 1,
  AL_LOG_INFO = 2,
  AL_LOG_DEBUG = 3
} al_log_level_t;

/* Messages above the level are dropped. Default: AL_LOG_WARN, or the value
 * of AGENTLOOP_LOG (error|warn|info|debug) read once by al_log_init(). */
void al_log_init(void);
/* "error", "warn", "info" or "debug" to its level; false otherwise. */
bool al_log_level_parse(const char *name, al_log_level_t *out);
void al_log_set_level(al_log_level_t level);
al_log_level_t al_log_get_level(void);
void al_log(al_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
