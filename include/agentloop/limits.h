/* Bounds on what a model server may make the runtime hold (docs/run.md,
 * "Limits"). Every field: 0 takes the default, a negative value disables
 * the bound. Names match the `limits:` configuration section, the
 * `agentloop run --limit NAME=VALUE` flag and the daemon's session/create
 * "limits" object. */
#ifndef AGENTLOOP_LIMITS_H
#define AGENTLOOP_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct al_limits_s {
  int64_t reply_bytes;        /* reply_bytes: body of one reply, 64 MiB */
  int64_t tool_input_bytes;   /* tool_input_bytes: all tool inputs of one
                                 reply, 32 MiB */
  int64_t header_bytes;       /* header_bytes: response header block, 64 KiB */
  int64_t header_count;       /* header_count: response headers, 256 */
  int64_t total_time_ms;      /* total_time_ms: one request, first byte sent
                                 to last byte read, 30 min */
  int64_t min_rate_bytes;     /* min_rate_bytes per min_rate_window_ms once
                                 the response started: 128 */
  int64_t min_rate_window_ms; /* 60 s */
  /* What one sandboxed tool may hold (docs/sandbox.md): */
  int64_t tool_processes;     /* tool_processes: processes and threads of
                                 one tool (pids.max of its cgroup, and
                                 RLIMIT_NPROC), 512 */
  int64_t tool_memory_bytes;  /* tool_memory_bytes: memory one tool process
                                 may write to (RLIMIT_DATA), and all of the
                                 tool's memory (its cgroup's limit), 50 %
                                 of the machine */
  int64_t file_scan_bytes;    /* file_scan_bytes: read_file reads what it
                                 shows plus at most this to count the
                                 rest, 8 MiB */
  int64_t file_time_ms;       /* file_time_ms: one file tool call, 20 s */
} al_limits_t;

/* Sets one limit by name from text: a decimal integer with an optional
 * K/M/G suffix (binary multiples) for sizes, or "none" (-1; not for
 * header_bytes, which is always bounded). Returns 0,
 * AL_ENOTFOUND for an unknown name, AL_EINVAL for a bad value. */
int al_limits_set(al_limits_t *l, const char *name, const char *value);
/* What al_limits_set accepts for name, for error messages. */
const char *al_limits_expect(const char *name);
/* "NAME=VALUE" (the run flag). */
int al_limits_set_kv(al_limits_t *l, const char *kv);
/* Every field of src set (non-zero) replaces dst's: flags over the
 * configuration file. */
void al_limits_overlay(al_limits_t *dst, const al_limits_t *src);
/* The names, NULL-terminated (for help texts and error messages). */
extern const char *const al_limits_names[];
/* Ceilings (agentloopd's own limits): every limit `ceiling` sets (non-zero,
 * not "none") bounds what `ask` may set: a larger value or "none" there is
 * a raise. 0, or AL_EINVAL with the first raised limit's name in *name and
 * a sentence naming it, the ceiling and the value asked for in why. */
int al_limits_check_ceiling(const al_limits_t *ceiling, const al_limits_t *ask,
                            const char **name, char *why, size_t why_len);
/* Lowers every limit of l above its ceiling (or "none" where the ceiling
 * sets one) to the ceiling: for a session made under other ceilings. */
void al_limits_clamp(al_limits_t *l, const al_limits_t *ceiling);

#ifdef __cplusplus
}
#endif
#endif
