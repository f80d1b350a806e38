/* al__json_scrub_nul (issue 15): every string holding a NUL, at any depth,
 * values and keys alike, gets U+FFFD per NUL; other strings and the
 * structure stay as they were. */
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "test.h"

TEST_IMPL(json_scrub_nul_everywhere) {
  json_error_t e;
  /* (jansson's parser refuses NUL in keys: those are made by hand) */
  const char *text =
      "{\"a\":\"x\\u0000y\",\"clean\":\"caf\\u00e9\",\"n\":7,"
      "\"arr\":[\"\\u0000\",[\"p\\u0000q\"],{}]}";
  json_t *v = json_loads(text, JSON_ALLOW_NUL, &e);
  char *out;

  ASSERT_NOT_NULL(v);
  ASSERT_EQ(json_object_setn_new(json_array_get(json_object_get(v, "arr"), 2),
                                 "k\0", 2, json_string("v")),
            0);
  ASSERT_EQ(json_object_setn_new(v, "k\0ey", 4,
                                 json_pack("{s:s%}", "deep", "\0\0", 2)),
            0);
  /* 4 strings and 2 keys with NUL. */
  ASSERT_EQ(al__json_scrub_nul(v), 6);
  out = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
  ASSERT_NOT_NULL(out);
  ASSERT_STR_EQ(out,
                "{\"a\":\"x\xEF\xBF\xBDy\",\"arr\":[\"\xEF\xBF\xBD\","
                "[\"p\xEF\xBF\xBDq\"],{\"k\xEF\xBF\xBD\":\"v\"}],"
                "\"clean\":\"caf\xC3\xA9\",\"k\xEF\xBF\xBD" "ey\":"
                "{\"deep\":\"\xEF\xBF\xBD\xEF\xBF\xBD\"},\"n\":7}");
  free(out);
  /* Nothing left to do the second time. */
  ASSERT_EQ(al__json_scrub_nul(v), 0);
  json_decref(v);
  ASSERT_EQ(al__json_scrub_nul(NULL), 0);
  return 0;
}
