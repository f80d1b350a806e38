/* Test framework: TEST_IMPL defines a test, ASSERT_* abort with file:line.
 * Each test runs in its own forked process with a timeout (runner.c), so a
 * failing assertion simply aborts the child. */
#ifndef AL_TEST_H
#define AL_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#define TEST_IMPL(name) int run_test_##name(void)
#define HELPER_IMPL(name) int run_helper_##name(int argc, char **argv)

#define AL_TEST_FAIL(...)                                      \
  do {                                                         \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);       \
    fprintf(stderr, __VA_ARGS__);                              \
    fputc('\n', stderr);                                       \
    fflush(stderr);                                            \
    abort();                                                   \
  } while (0)

#define ASSERT(expr)                                           \
  do {                                                         \
    if (!(expr)) {                                             \
      AL_TEST_FAIL("assertion failed: %s", #expr);             \
    }                                                          \
  } while (0)

#define ASSERT_EQ(a, b)                                                      \
  do {                                                                       \
    int64_t al_a_ = (int64_t)(a);                                            \
    int64_t al_b_ = (int64_t)(b);                                            \
    if (al_a_ != al_b_) {                                                    \
      AL_TEST_FAIL("%s == %s: %" PRId64 " != %" PRId64, #a, #b, al_a_, al_b_); \
    }                                                                        \
  } while (0)

#define ASSERT_NE(a, b)                                                  \
  do {                                                                   \
    int64_t al_a_ = (int64_t)(a);                                        \
    int64_t al_b_ = (int64_t)(b);                                        \
    if (al_a_ == al_b_) {                                                \
      AL_TEST_FAIL("%s != %s: both %" PRId64, #a, #b, al_a_);            \
    }                                                                    \
  } while (0)

#define ASSERT_GE(a, b)                                                        \
  do {                                                                         \
    int64_t al_a_ = (int64_t)(a);                                              \
    int64_t al_b_ = (int64_t)(b);                                              \
    if (!(al_a_ >= al_b_)) {                                                   \
      AL_TEST_FAIL("%s >= %s: %" PRId64 " < %" PRId64, #a, #b, al_a_, al_b_);  \
    }                                                                          \
  } while (0)

#define ASSERT_LE(a, b)                                                        \
  do {                                                                         \
    int64_t al_a_ = (int64_t)(a);                                              \
    int64_t al_b_ = (int64_t)(b);                                              \
    if (!(al_a_ <= al_b_)) {                                                   \
      AL_TEST_FAIL("%s <= %s: %" PRId64 " > %" PRId64, #a, #b, al_a_, al_b_);  \
    }                                                                          \
  } while (0)

#define ASSERT_STR_EQ(a, b)                                               \
  do {                                                                    \
    const char *al_a_ = (a);                                              \
    const char *al_b_ = (b);                                              \
    if (al_a_ == NULL || al_b_ == NULL || strcmp(al_a_, al_b_) != 0) {    \
      AL_TEST_FAIL("%s == %s:\n  got:      %s\n  expected: %s", #a, #b,   \
                   al_a_ ? al_a_ : "(null)", al_b_ ? al_b_ : "(null)");   \
    }                                                                     \
  } while (0)

#define ASSERT_MEM_EQ(a, alen, b, blen)                                     \
  do {                                                                      \
    size_t al_al_ = (size_t)(alen);                                         \
    size_t al_bl_ = (size_t)(blen);                                         \
    if (al_al_ != al_bl_ || memcmp((a), (b), al_al_) != 0) {                \
      AL_TEST_FAIL("%s == %s:\n  got:      %.*s\n  expected: %.*s", #a, #b, \
                   (int)al_al_, (const char *)(a), (int)al_bl_,             \
                   (const char *)(b));                                      \
    }                                                                       \
  } while (0)

#define ASSERT_NULL(p) ASSERT((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT((p) != NULL)

/* Runs the loop dry and checks that nothing is left open: every test that
 * uses a loop ends with this (STYLE.md 3.6). */
#define ASSERT_LOOP_CLOSES(loop)                     \
  do {                                               \
    uv_run((loop), UV_RUN_DEFAULT);                  \
    if (uv_loop_close(loop) != 0) {                  \
      uv_print_all_handles((loop), stderr);          \
      AL_TEST_FAIL("uv_loop_close: handles left");   \
    }                                                \
  } while (0)

/* Helpers in tests/util.c. */
/* Reads a whole file (tests only; blocking I/O is fine here). Returns a
 * malloc'd NUL-terminated buffer or NULL; *len_out gets its length. */
char *al_test_read_file(const char *path, size_t *len_out);
/* Path of a file under tests/data (static buffer, overwritten each call). */
const char *al_test_data_path(const char *rel);
/* Path to this test binary (for --helper re-exec). */
const char *al_test_exe(void);
/* The timeout multiplier from AL_TEST_TIMEOUT_MULTIPLIER (default 1). */
int al_test_timeout_multiplier(void);
/* A test that must run longer than the runner's 5 s (it starts several
 * real peers, say): its own budget, scaled like the default. */
void al_test_timeout_s(unsigned secs);

/* Every entry below root, one line each: path (from root), mode, size
 * (files); malloc'd. Two listings of an unchanged tree are equal. */
char *al_test_tree_listing(const char *root);
/* rm -rf in this process (a fork of sh and rm per call cost 10-20 ms on a
 * loaded machine, in loops of many runs): 0, or -1 with errno. */
int al_test_rm_tree(const char *root);
/* The pid of a live process whose parent is ppid and whose command line
 * contains needle, or 0. */
int al_test_child_with(int ppid, const char *needle);

/* tests/bwrap_gate.c: bwrap mode (the real sandbox) here? `why` gets the
 * probe's detail (the cause when not). Probes once per process. */
bool al_test_bwrap_available(char *why, size_t len);
/* CI=true in the environment. */
bool al_test_ci(void);
/* For tests that need bwrap mode: returns when it is available; otherwise
 * fails under CI=true and else exits with AL_TEST_SKIP_CODE (ctest: not
 * run) after one line on stderr saying why. */
void al_test_need_bwrap(void);
/* The exit status of a test that did not run (ctest SKIP_RETURN_CODE). */
#define AL_TEST_SKIP_CODE 77

#endif
