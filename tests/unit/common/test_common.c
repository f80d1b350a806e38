/* Tests of the common layer: bounded buffer, error table, allocator hook. */
#include <jansson.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentloop/agentloop.h"
#include "common/common.h"
#include "test.h"

TEST_IMPL(common_buf_bounds) {
  al_buf_t b;
  char big[100];

  memset(big, 'x', sizeof(big));
  al_buf_init(&b, 10);
  ASSERT_EQ(al_buf_append(&b, "hello", 5), 0);
  ASSERT_EQ(al_buf_append(&b, "world", 5), 0);
  ASSERT_STR_EQ(b.data, "helloworld");
  /* At the limit: one more byte is refused and nothing changes. */
  ASSERT_EQ(al_buf_append(&b, "!", 1), AL_ETOOBIG);
  ASSERT_EQ(b.len, 10);
  ASSERT_LE(b.cap, 11);
  al_buf_reset(&b);
  ASSERT_EQ(al_buf_append(&b, big, sizeof(big)), AL_ETOOBIG);
  ASSERT_EQ(b.len, 0);
  /* A size that would overflow len + extra is refused too. */
  ASSERT_EQ(al_buf_reserve(&b, SIZE_MAX), AL_ETOOBIG);
  al_buf_free(&b);
  ASSERT_NULL(b.data);
  ASSERT_EQ(b.max, 10);
  return 0;
}

/* max = SIZE_MAX ("no limit") must grow normally: max + 1 wraps to 0. */
TEST_IMPL(common_buf_unbounded_max) {
  al_buf_t b;
  char chunk[1000];
  int i;

  memset(chunk, 'y', sizeof(chunk));
  al_buf_init(&b, SIZE_MAX);
  for (i = 0; i < 100; i++) {
    ASSERT_EQ(al_buf_append(&b, chunk, sizeof(chunk)), 0);
  }
  ASSERT_EQ(b.len, 100000);
  ASSERT_GE(b.cap, b.len + 1);
  ASSERT_EQ(b.data[99999], 'y');
  ASSERT_EQ(b.data[100000], '\0');
  ASSERT_EQ(al_buf_reserve(&b, SIZE_MAX - b.len), AL_ETOOBIG);
  al_buf_free(&b);

  /* A limit that is not a power of two is still reached exactly. */
  al_buf_init(&b, 1000);
  ASSERT_EQ(al_buf_append(&b, chunk, 999), 0);
  ASSERT_EQ(al_buf_append(&b, chunk, 1), 0);
  ASSERT_EQ(b.cap, 1001);
  ASSERT_EQ(al_buf_append(&b, chunk, 1), AL_ETOOBIG);
  al_buf_free(&b);
  return 0;
}

TEST_IMPL(common_buf_printf_consume) {
  al_buf_t b;

  al_buf_init(&b, 64);
  ASSERT_EQ(al_buf_printf(&b, "%s-%d", "abc", 42), 0);
  ASSERT_STR_EQ(b.data, "abc-42");
  al_buf_consume(&b, 4);
  ASSERT_STR_EQ(b.data, "42");
  ASSERT_EQ(al_buf_printf(&b, "%0100d", 1), AL_ETOOBIG);
  ASSERT_STR_EQ(b.data, "42");
  al_buf_consume(&b, 2);
  ASSERT_EQ(b.len, 0);
  al_buf_free(&b);
  return 0;
}

TEST_IMPL(common_errno_table) {
  ASSERT_STR_EQ(al_strerror(AL_ETOOBIG), "size limit exceeded");
  ASSERT_STR_EQ(al_err_name(AL_ETOOBIG), "ETOOBIG");
  ASSERT_STR_EQ(al_err_name(AL_ECANCELED), "ECANCELED");
  ASSERT_EQ(AL_ECANCELED, UV_ECANCELED);
  ASSERT_STR_EQ(al_strerror(UV_ECONNREFUSED), uv_strerror(UV_ECONNREFUSED));
  ASSERT_STR_EQ(al_strerror(0), "success");
  /* Our range stays clear of libuv's (EAI codes sit at -3000..-3014). */
  ASSERT(AL_ETLS <= -7000 && AL_ETRUNCATED >= -7099);
  return 0;
}

/* A counting allocator that fails allocation number fail_at (1-based). */
static int alloc_count;
static int fail_at;

static void *t_malloc(size_t n) {
  if (++alloc_count == fail_at) {
    return NULL;
  }
  return malloc(n);
}
static void *t_realloc(void *p, size_t n) {
  if (++alloc_count == fail_at) {
    return NULL;
  }
  return realloc(p, n);
}
static void *t_calloc(size_t c, size_t n) {
  if (++alloc_count == fail_at) {
    return NULL;
  }
  return calloc(c, n);
}

TEST_IMPL(common_alloc_hook_reaches_libs) {
  json_t *j;
  uv_loop_t *loop;
  int before;

  ASSERT_EQ(al_set_allocator(NULL, t_realloc, t_calloc, free), AL_EINVAL);
  ASSERT_EQ(al_set_allocator(t_malloc, t_realloc, t_calloc, free), 0);

  /* jansson allocates through the hook... */
  before = alloc_count;
  j = json_pack("{s:s}", "k", "v");
  ASSERT_NOT_NULL(j);
  ASSERT(alloc_count > before);
  json_decref(j);

  /* ...and fails cleanly when the hook fails. */
  fail_at = alloc_count + 1;
  ASSERT_NULL(json_pack("{s:s}", "k", "v"));
  fail_at = 0;

  /* libuv too: uv_loop_new allocates the loop through the hook. */
  before = alloc_count;
  loop = uv_loop_new();
  ASSERT_NOT_NULL(loop);
  ASSERT(alloc_count > before);
  ASSERT_EQ(uv_loop_close(loop), 0);
  free(loop);

  /* Our own buffer fails with ENOMEM, never crashes. */
  {
    al_buf_t b;
    al_buf_init(&b, 100);
    fail_at = alloc_count + 1;
    ASSERT_EQ(al_buf_append(&b, "x", 1), AL_ENOMEM);
    fail_at = 0;
    ASSERT_EQ(al_buf_append(&b, "x", 1), 0);
    al_buf_free(&b);
  }
  return 0;
}

TEST_IMPL(common_version) {
  char expect[32];

  snprintf(expect, sizeof(expect), "%d.%d.%d", AL_VERSION_MAJOR,
           AL_VERSION_MINOR, AL_VERSION_PATCH);
  ASSERT_STR_EQ(al_version_string(), expect);
  ASSERT_EQ(al_version(), AL_VERSION_HEX);
  ASSERT_NOT_NULL(strstr(al_version_full(), "libuv 1."));
  ASSERT_NOT_NULL(strstr(al_version_full(), "llhttp 8.1.0"));
  return 0;
}

/* The runner itself: a test that never ends is killed by its timeout and
 * fails the run; one that fails fails it; one that did not run is reported
 * as not run (exit 77, ctest's SKIP_RETURN_CODE), never as passed. */
static int runner_rc(const char *cmd_fmt) {
  char cmd[4200];
  int rc;

  snprintf(cmd, sizeof(cmd), cmd_fmt, al_test_exe());
  rc = system(cmd);
  ASSERT(WIFEXITED(rc));
  return WEXITSTATUS(rc);
}

TEST_IMPL(runner_timeout_kills_test) {
  ASSERT_EQ(runner_rc("AL_TEST_TIMEOUT_MULTIPLIER=1 '%s' --helper exit_code 7 "
                      ">/dev/null"),
            7);
  ASSERT_EQ(runner_rc("'%s' no_such_test >/dev/null 2>&1"), 2);
  ASSERT_EQ(runner_rc("AL_RUNNER_PROBE=hang AL_TEST_TIMEOUT_MS=50 '%s' "
                      "_runner_probe | grep -q 'FAIL   _runner_probe "
                      "(timeout'"),
            0);
  ASSERT_EQ(runner_rc("AL_RUNNER_PROBE=hang AL_TEST_TIMEOUT_MS=50 '%s' "
                      "_runner_probe >/dev/null"),
            1);
  ASSERT_EQ(runner_rc("AL_RUNNER_PROBE=fail '%s' _runner_probe >/dev/null"),
            1);
  ASSERT_EQ(runner_rc("AL_RUNNER_PROBE=skip '%s' _runner_probe | grep -q "
                      "'^skip   _runner_probe'"),
            0);
  ASSERT_EQ(runner_rc("AL_RUNNER_PROBE=skip '%s' _runner_probe >/dev/null"),
            77);
  ASSERT_EQ(runner_rc("AL_RUNNER_PROBE=pass '%s' _runner_probe >/dev/null"),
            0);
  /* The probe is no ctest case. */
  ASSERT_EQ(runner_rc("'%s' --list | grep -q _runner_probe"), 1);
  return 0;
}

/* One name table serves AGENTLOOP_LOG and agentloopd --log-level. */
TEST_IMPL(common_log_level_parse) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  al_log_level_t lv;
  size_t i;

  for (i = 0; i < 4; i++) {
    lv = (al_log_level_t)99;
    ASSERT(al_log_level_parse(names[i], &lv));
    ASSERT_EQ(lv, i);
  }
  lv = AL_LOG_INFO;
  ASSERT(!al_log_level_parse("verbose", &lv));
  ASSERT(!al_log_level_parse("WARN", &lv));
  ASSERT(!al_log_level_parse("", &lv));
  ASSERT(!al_log_level_parse(NULL, &lv));
  ASSERT_EQ(lv, AL_LOG_INFO);
  return 0;
}

HELPER_IMPL(exit_code) { return argc > 0 ? atoi(argv[0]) : 0; }

/* agentloop/limits.h: names, suffixes, "none", refusals. */
#include "agentloop/limits.h"

TEST_IMPL(limits_parse) {
  al_limits_t l;

  memset(&l, 0, sizeof(l));
  ASSERT_EQ(al_limits_set(&l, "reply_bytes", "512M"), 0);
  ASSERT_EQ(l.reply_bytes, 512LL << 20);
  ASSERT_EQ(al_limits_set_kv(&l, "header_count=100"), 0);
  ASSERT_EQ(l.header_count, 100);
  ASSERT_EQ(al_limits_set_kv(&l, "total_time_ms=none"), 0);
  ASSERT_EQ(l.total_time_ms, -1);
  ASSERT_EQ(al_limits_set(&l, "min_rate_bytes", "2k"), 0);
  ASSERT_EQ(l.min_rate_bytes, 2048);
  /* Time limits take no size suffix; junk, zero, negatives are refused. */
  ASSERT_EQ(al_limits_set(&l, "total_time_ms", "5k"), AL_EINVAL);
  ASSERT_EQ(al_limits_set(&l, "reply_bytes", "0"), AL_EINVAL);
  ASSERT_EQ(al_limits_set(&l, "reply_bytes", "-5"), AL_EINVAL);
  ASSERT_EQ(al_limits_set(&l, "reply_bytes", "12x"), AL_EINVAL);
  ASSERT_EQ(al_limits_set(&l, "reply_bytes", "99999999999G"), AL_EINVAL);
  ASSERT_EQ(al_limits_set(&l, "nope", "1"), AL_ENOTFOUND);
  ASSERT_EQ(al_limits_set_kv(&l, "reply_bytes"), AL_EINVAL);
  ASSERT_EQ(l.reply_bytes, 512LL << 20);
  /* The header block is always bounded: "none" is refused, by name. */
  ASSERT_EQ(al_limits_set(&l, "header_bytes", "none"), AL_EINVAL);
  ASSERT_EQ(l.header_bytes, 0);
  ASSERT_NOT_NULL(strstr(al_limits_expect("header_bytes"), "cannot be none"));
  ASSERT_NOT_NULL(strstr(al_limits_expect("reply_bytes"), "or none"));
  {
    json_t *o = json_pack("{s:s}", "header_bytes", "none");
    char why[128];

    ASSERT_EQ(al_limits_from_json(&l, o, why, sizeof(why)), AL_EINVAL);
    ASSERT_STR_EQ(why, "limits.header_bytes: a positive integer (K/M/G); "
                       "this limit cannot be none");
    json_decref(o);
  }
  return 0;
}
