/* Unit tests of the provider layer: the JSON fast path against jansson,
 * surrogate pairs split across deltas, strict block indexes, the request
 * builders, HTTP error classification, and allocations on the hot path. */
#include "provider/provider.h"
#include "mockllm/mockllm.h"
#include "test.h"

/* ---- fast path vs jansson ------------------------------------------------ */

typedef struct {
  int rc;
  al_fj_kind_t kind;
  int64_t index;
  char *text;
  size_t len;
  uint32_t lead;
  uint32_t trail;
} fj_result_t;

static void fj_fast(const char *data, size_t len, fj_result_t *r) {
  al_buf_t scratch;
  al_fj_delta_t d;

  memset(r, 0, sizeof(*r));
  al_buf_init(&scratch, 1 << 20);
  r->rc = al__fj_parse_delta(data, len, &scratch, &d);
  if (r->rc == 1) {
    r->kind = d.kind;
    r->index = d.index;
    r->text = malloc(d.len + 1);
    memcpy(r->text, d.text, d.len);
    r->len = d.len;
    r->lead = d.lead_lo;
    r->trail = d.trail_hi;
  }
  al_buf_free(&scratch);
}

static void fj_dom(const char *data, size_t len, fj_result_t *r) {
  al_buf_t scratch;
  al_fj_delta_t d;

  memset(r, 0, sizeof(*r));
  al_buf_init(&scratch, 1 << 20);
  r->rc = al__fj_parse_delta_jansson(data, len, &scratch, &d);
  if (r->rc == 1) {
    r->kind = d.kind;
    r->index = d.index;
    r->text = malloc(d.len + 1);
    memcpy(r->text, d.text, d.len);
    r->len = d.len;
    r->lead = d.lead_lo;
    r->trail = d.trail_hi;
  }
  al_buf_free(&scratch);
}

/* Both paths must agree; when the fast path declines (rc 0), jansson's
 * answer is the result. expect_fast: the fast path must accept it. */
static void fj_compare(const char *data, size_t len, int expect_fast) {
  fj_result_t f;
  fj_result_t j;

  fj_fast(data, len, &f);
  fj_dom(data, len, &j);
  if (expect_fast == 1 && f.rc != 1) {
    AL_TEST_FAIL("fast path declined: %.*s", (int)len, data);
  }
  if (expect_fast == 0 && f.rc != 0) {
    AL_TEST_FAIL("fast path accepted an unsupported shape: %.*s", (int)len,
                 data);
  }
  if (f.rc == 1) {
    if (j.rc != 1 || f.kind != j.kind || f.index != j.index ||
        f.len != j.len || memcmp(f.text, j.text, f.len) != 0 ||
        f.lead != j.lead || f.trail != j.trail) {
      AL_TEST_FAIL("paths differ on %.*s:\n fast: rc=%d kind=%d len=%zu "
                   "lead=%x trail=%x '%.*s'\n dom:  rc=%d kind=%d len=%zu "
                   "lead=%x trail=%x '%.*s'",
                   (int)len, data, f.rc, f.kind, f.len, f.lead, f.trail,
                   (int)f.len, f.text, j.rc, j.kind, j.len, j.lead, j.trail,
                   (int)j.len, j.text);
    }
  }
  free(f.text);
  free(j.text);
}

#define CBD "{\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":"

TEST_IMPL(provider_fastpath_escapes) {
  static const char *const hot[] = {
      CBD "\"text_delta\",\"text\":\"plain\"}}",
      CBD "\"text_delta\",\"text\":\"\"}}",
      CBD "\"text_delta\",\"text\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}}",
      CBD "\"text_delta\",\"text\":\"\\u0041\\u00e9\\u20AC\\uffff\"}}",
      CBD "\"text_delta\",\"text\":\"nul:\\u0000:end\"}}",
      CBD "\"text_delta\",\"text\":\"pair \\ud83d\\ude00 ok\"}}",
      CBD "\"text_delta\",\"text\":\"PAIR \\uD83D\\uDE00\"}}",
      CBD "\"text_delta\",\"text\":\"ends in a high half \\ud83d\"}}",
      CBD "\"text_delta\",\"text\":\"\\ude00 starts with a low half\"}}",
      CBD "\"text_delta\",\"text\":\"\\ude00\"}}",
      CBD "\"text_delta\",\"text\":\"\\ud83d\"}}",
      CBD "\"text_delta\",\"text\":\"lone \\ud83d in the middle\"}}",
      CBD "\"text_delta\",\"text\":\"lone \\ude00 low in the middle\"}}",
      CBD "\"text_delta\",\"text\":\"\\ud83d\\ud83d\"}}",
      /* fuzz_fastjson: a high half followed by "^ude0e" (no backslash)
       * is lone, not a pair. */
      CBD "\"thinking_delta\",\"thinking\":\"\\ud83d^ude0e\"}}",
      /* fuzz_fastjson: an extra number beyond the double range; jansson
       * used to reject it while the fast path skipped it. */
      CBD "\"thinking_delta\",\"thinking\":\"\",\"\":1e900}}",
      CBD "\"text_delta\",\"text\":\"raw UTF-8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}}",
      CBD "\"thinking_delta\",\"thinking\":\"hmm \\n\"}}",
      CBD "\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": \\\"\\\\u00\"}}",
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"text_delta\",\"text\":\"x\"}}",
      " \n{ \"index\" : 12 , \"delta\" : { \"text\" : \"ws\" , \"type\" : "
      "\"text_delta\" } , \"type\" : \"content_block_delta\" } \r\n",
      CBD "\"text_delta\",\"text\":\"extra\",\"n\":-1.5e3,\"b\":true,\"z\":"
          "null},\"extra\":\"\\u00e9\",\"x\":0}",
      CBD "\"text_delta\",\"thinking\":\"other field\",\"text\":\"t\"}}",
  };
  static const char *const decline[] = {
      /* valid JSON the fast path leaves to jansson */
      CBD "\"text_delta\",\"text\":\"a\",\"o\":{\"k\":1}}}",
      CBD "\"text_delta\",\"text\":\"a\"},\"arr\":[1,2]}",
      "{\"type\":\"content_block_delta\",\"index\":1.0,\"delta\":{\"type\":"
      "\"text_delta\",\"text\":\"a\"}}",
      "{\"type\":\"content_block_delta\",\"index\":-1,\"delta\":{\"type\":"
      "\"text_delta\",\"text\":\"a\"}}",
      "{\"type\":\"content_block_delta\",\"index\":99999999999,\"delta\":{"
      "\"type\":\"text_delta\",\"text\":\"a\"}}",
      "{\"ty\\u0070e\":\"content_block_delta\",\"index\":1,\"delta\":{"
      "\"type\":\"text_delta\",\"text\":\"a\"}}",
      CBD "\"text_delta\",\"text\":\"a\",\"text\":\"b\"}}",
      CBD "\"signature_delta\",\"signature\":\"s\"}}",
      CBD "\"citations_delta\",\"citation\":{}}}",
      CBD "\"text_delta\"}}",
      "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{}}",
      /* invalid JSON: both paths must refuse */
      CBD "\"text_delta\",\"text\":\"bad escape \\x\"}}",
      CBD "\"text_delta\",\"text\":\"raw\ncontrol\"}}",
      CBD "\"text_delta\",\"text\":\"short \\u12\"}}",
      CBD "\"text_delta\",\"text\":\"overlong \xc0\xaf\"}}",
      CBD "\"text_delta\",\"text\":\"surrogate in UTF-8 \xed\xa0\x80\"}}",
      CBD "\"text_delta\",\"text\":\"unterminated}}",
      CBD "\"text_delta\",\"text\":\"a\"}} trailing",
      CBD "\"text_delta\",\"text\":\"a\"},}",
      CBD "\"text_delta\",\"text\":\"a\",\"n\":01}}",
      "",
      "[]",
  };
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(hot); i++) {
    fj_compare(hot[i], strlen(hot[i]), 1);
  }
  for (i = 0; i < AL_ARRAY_SIZE(decline); i++) {
    fj_compare(decline[i], strlen(decline[i]), 0);
  }
  /* \u0000 works in both paths (JSON_ALLOW_NUL). */
  {
    fj_result_t f;
    const char *nul = hot[4];

    fj_fast(nul, strlen(nul), &f);
    ASSERT_EQ(f.len, 9);
    ASSERT_MEM_EQ(f.text, f.len, "nul:\0:end", 9);
    free(f.text);
  }
  return 0;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}

/* Random strings built from every escape form, raw UTF-8 and lone
 * surrogates, in random key orders and whitespace (fixed seed). */
TEST_IMPL(provider_fastpath_random) {
  static const char *const atoms[] = {
      "a", "Z", " ", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r",
      "\\t", "\\u0000", "\\u001f", "\\u00e9", "\\u20ac", "\\uFFFD",
      "\\ud83d\\ude00", "\\uD800\\uDC00", "\\udbff\\udfff", "\\ud83d",
      "\\ude00", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "{", "}",
      ":", ",", "[", "'"};
  static const char *const kinds[][2] = {{"text_delta", "text"},
                                         {"thinking_delta", "thinking"},
                                         {"input_json_delta", "partial_json"}};
  char str[512];
  char json[1024];
  int iter;

  for (iter = 0; iter < 20000; iter++) {
    size_t n = rnd() % 12;
    size_t i;
    int k = (int)(rnd() % 3);
    const char *ws = (rnd() % 4 == 0) ? " \n" : "";

    str[0] = '\0';
    for (i = 0; i < n; i++) {
      strcat(str, atoms[rnd() % AL_ARRAY_SIZE(atoms)]);
    }
    if (rnd() % 2) {
      snprintf(json, sizeof(json),
               "{%s\"type\"%s:%s\"content_block_delta\",\"index\":%u,"
               "\"delta\":{\"type\":\"%s\",%s\"%s\":\"%s\"}%s}",
               ws, ws, ws, rnd() % 5, kinds[k][0], ws, kinds[k][1], str, ws);
    } else {
      snprintf(json, sizeof(json),
               "{\"delta\":{\"%s\":\"%s\",\"type\":\"%s\"},\"index\":%u,"
               "\"type\":\"content_block_delta\"}",
               kinds[k][1], str, kinds[k][0], rnd() % 5);
    }
    fj_compare(json, strlen(json), 1);
  }
  return 0;
}

/* Canonical deltas whose string puts a byte the scanner must stop at
 * (quote, backslash, raw control byte, invalid or valid UTF-8) at every
 * offset of 16-byte steps and of the 5-15 byte tail; raw control bytes and
 * bad UTF-8 make jansson refuse, and the fast path must then agree or
 * decline. */
TEST_IMPL(provider_fastpath_random_bytes) {
  static const char *const atoms[] = {"a", "bc", "defghijklmn", "\\n",
                                      "\\\"", "\x01", "\x1f", "\x7f",
                                      "\xc3\xa9", "\xc3", "\xff", "\\u00e9"};
  char str[512];
  char json[1024];
  int iter;

  for (iter = 0; iter < 20000; iter++) {
    size_t pad = rnd() % 40;
    size_t n = rnd() % 4;
    size_t i;

    memset(str, 'x', pad);
    str[pad] = '\0';
    for (i = 0; i < n; i++) {
      strcat(str, atoms[rnd() % AL_ARRAY_SIZE(atoms)]);
    }
    for (i = rnd() % 20; i > 0; i--) {
      strcat(str, "y");
    }
    snprintf(json, sizeof(json),
             "{\"type\":\"content_block_delta\",\"index\":%u,\"delta\":{"
             "\"type\":\"text_delta\",\"text\":\"%s\"}}",
             rnd() % 3, str);
    fj_compare(json, strlen(json), -1);
  }
  return 0;
}

/* ---- the pipeline -------------------------------------------------------- */

typedef struct {
  al_buf_t text;
  int deltas;
  int errors;
  int stops;
  int progress;
  char errmsg[256];
} collect_t;

static int collect_cb(void *data, const al_pevent_t *ev) {
  collect_t *c = data;

  if (ev->progress) {
    c->progress++;
  }
  if (ev->type == AL_PEV_TEXT_DELTA) {
    c->deltas++;
    ASSERT(al__utf8_valid(ev->text, ev->len));
    ASSERT_EQ(al_buf_append(&c->text, ev->text, ev->len), 0);
  } else if (ev->type == AL_PEV_ERROR) {
    c->errors++;
    snprintf(c->errmsg, sizeof(c->errmsg), "%.*s", (int)ev->len, ev->text);
  } else if (ev->type == AL_PEV_BLOCK_STOP) {
    c->stops++;
  }
  return 0;
}

static const char ms[] =
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{"
    "\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
    "\"x\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
    "\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n";

static void feed_str(al_pstream_t *s, const char *str, int expect) {
  ASSERT_EQ(al_pstream_feed(s, str, strlen(str)), expect);
}

static void delta_event(char *out, size_t n, int index, const char *text) {
  snprintf(out, n,
           "event: content_block_delta\ndata: {\"type\":\"content_block_delta\""
           ",\"index\":%d,\"delta\":{\"type\":\"text_delta\",\"text\":\"%s\"}}"
           "\n\n",
           index, text);
}

static const char block0[] =
    "event: content_block_start\ndata: {\"type\":\"content_block_start\","
    "\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
static const char stop0[] =
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
    "\"index\":0}\n\n";

static void surrogate_run(bool fast) {
  al_pstream_t s;
  al_pstream_options_t o;
  collect_t c;
  char ev[512];
  json_t *msg;

  memset(&c, 0, sizeof(c));
  al_buf_init(&c.text, 4096);
  al_pstream_options_init(&o);
  o.on_event = collect_cb;
  o.data = &c;
  o.fast_path = fast;
  ASSERT_EQ(al_pstream_init(&s, &al_provider_anthropic, &o), 0);
  feed_str(&s, ms, 0);
  feed_str(&s, block0, 0);
  delta_event(ev, sizeof(ev), 0, "A\\ud83d");
  feed_str(&s, ev, 0);
  delta_event(ev, sizeof(ev), 0, "\\ude00B");
  feed_str(&s, ev, 0);
  /* A high half with an empty delta in between still pairs. */
  delta_event(ev, sizeof(ev), 0, "\\ud83d");
  feed_str(&s, ev, 0);
  delta_event(ev, sizeof(ev), 0, "");
  feed_str(&s, ev, 0);
  delta_event(ev, sizeof(ev), 0, "\\ude01");
  feed_str(&s, ev, 0);
  /* A high half followed by plain text: U+FFFD. */
  delta_event(ev, sizeof(ev), 0, "\\ud83d");
  feed_str(&s, ev, 0);
  delta_event(ev, sizeof(ev), 0, "C");
  feed_str(&s, ev, 0);
  /* A lone low half at the start: U+FFFD. */
  delta_event(ev, sizeof(ev), 0, "\\ude00D");
  feed_str(&s, ev, 0);
  /* Unpaired at block end: U+FFFD. */
  delta_event(ev, sizeof(ev), 0, "E\\ud83d");
  feed_str(&s, ev, 0);
  feed_str(&s, stop0, 0);
  feed_str(&s, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 0);
  ASSERT_EQ(al_pstream_finish(&s), 0);
  ASSERT_MEM_EQ(c.text.data, c.text.len,
                "A\xf0\x9f\x98\x80" "B\xf0\x9f\x98\x81\xef\xbf\xbd"
                "C\xef\xbf\xbd" "DE\xef\xbf\xbd",
                22);
  msg = al_pstream_message(&s);
  ASSERT_NOT_NULL(msg);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(msg, "content"), 0),
                    "text")),
                c.text.data);
  if (fast) {
    ASSERT_GE(s.fast_hits, 9);
  }
  al_pstream_free(&s);
  al_buf_free(&c.text);
}

TEST_IMPL(provider_surrogate_split) {
  surrogate_run(true);
  surrogate_run(false);
  return 0;
}

TEST_IMPL(provider_strict_indexes) {
  static const char *const bad[] = {
      /* start with a gap */
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
      /* delta for a block that was never started */
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
      "\"index\":5,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
      /* a second block while the first is open (interleaving) */
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
      /* stop of a block that is not open */
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
      "\"index\":0}\n\n",
      /* indexes that are not integers: named as such, not as "-1" */
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":0.5,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}"
      "\n\n",
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":\"0\",\"content_block\":{\"type\":\"text\",\"text\":"
      "\"\"}}\n\n",
  };
  size_t i;

  for (i = 0; i < AL_ARRAY_SIZE(bad); i++) {
    al_pstream_t s;
    al_pstream_options_t o;
    collect_t c;

    memset(&c, 0, sizeof(c));
    al_buf_init(&c.text, 4096);
    al_pstream_options_init(&o);
    o.on_event = collect_cb;
    o.data = &c;
    ASSERT_EQ(al_pstream_init(&s, &al_provider_anthropic, &o), 0);
    feed_str(&s, ms, 0);
    ASSERT_EQ(al_pstream_feed(&s, bad[i], strlen(bad[i])), AL_EPROTO);
    ASSERT_EQ(c.errors, 1);
    ASSERT_EQ(al_pstream_error_kind(&s), AL_PERR_DECODE);
    ASSERT_NULL(strstr(c.errmsg, "-1"));
    if (i >= 4) {
      ASSERT_NOT_NULL(strstr(c.errmsg, "without a non-negative integer index"));
    }
    /* Sticky: nothing more is delivered. */
    ASSERT_EQ(al_pstream_feed(&s, ms, strlen(ms)), AL_EPROTO);
    ASSERT_EQ(c.errors, 1);
    al_pstream_free(&s);
    al_buf_free(&c.text);
  }
  return 0;
}

/* Progress: deltas and block start/stop count, pings do not. */
TEST_IMPL(provider_progress_events) {
  al_pstream_t s;
  al_pstream_options_t o;
  collect_t c;
  char ev[256];

  memset(&c, 0, sizeof(c));
  al_buf_init(&c.text, 4096);
  al_pstream_options_init(&o);
  o.on_event = collect_cb;
  o.data = &c;
  ASSERT_EQ(al_pstream_init(&s, &al_provider_anthropic, &o), 0);
  feed_str(&s, ms, 0);
  ASSERT_EQ(c.progress, 0);
  feed_str(&s, "event: ping\ndata: {\"type\": \"ping\"}\n\n: comment\n\n", 0);
  ASSERT_EQ(c.progress, 0);
  feed_str(&s, block0, 0);
  delta_event(ev, sizeof(ev), 0, "x");
  feed_str(&s, ev, 0);
  feed_str(&s, stop0, 0);
  ASSERT_EQ(c.progress, 3);
  ASSERT_EQ(c.stops, 1);
  al_pstream_free(&s);
  al_buf_free(&c.text);
  return 0;
}

/* Every event of one feed carries the same ts_ns (one clock read per chunk,
 * at its first event); a later feed's is not earlier. */
static uint64_t ts_seen[8];
static int ts_n;

static int ts_cb(void *data, const al_pevent_t *ev) {
  (void)data;
  if (ts_n < (int)AL_ARRAY_SIZE(ts_seen)) {
    ts_seen[ts_n++] = ev->ts_ns;
  }
  return 0;
}

TEST_IMPL(provider_feed_ts) {
  al_pstream_t s;
  al_pstream_options_t o;
  char d1[256];
  char d2[256];
  char chunk[1024];
  uint64_t before;

  al_pstream_options_init(&o);
  o.on_event = ts_cb;
  ts_n = 0;
  ASSERT_EQ(al_pstream_init(&s, &al_provider_anthropic, &o), 0);
  before = al_now_ns();
  feed_str(&s, ms, 0);
  feed_str(&s, block0, 0);
  delta_event(d1, sizeof(d1), 0, "a");
  delta_event(d2, sizeof(d2), 0, "b");
  snprintf(chunk, sizeof(chunk), "%s%s", d1, d2);
  feed_str(&s, chunk, 0);
  ASSERT_EQ(ts_n, 4); /* message_start, block start, two deltas */
  ASSERT(ts_seen[0] >= before);
  ASSERT(ts_seen[1] >= ts_seen[0]);
  ASSERT(ts_seen[2] >= ts_seen[1]);
  ASSERT_EQ(ts_seen[3], ts_seen[2]);
  ASSERT(ts_seen[3] <= al_now_ns());
  al_pstream_free(&s);
  return 0;
}

/* ---- allocations on the hot path ------------------------------------------ */

static long allocs;

static void *count_malloc(size_t n) {
  allocs++;
  return malloc(n);
}
static void *count_realloc(void *p, size_t n) {
  allocs++;
  return realloc(p, n);
}
static void *count_calloc(size_t a, size_t b) {
  allocs++;
  return calloc(a, b);
}

TEST_IMPL(provider_hot_path_no_alloc) {
  al_pstream_t s;
  al_pstream_options_t o;
  collect_t c;
  char ev[256];
  long before;
  int i;

  ASSERT_EQ(al_set_allocator(count_malloc, count_realloc, count_calloc, free),
            0);
  memset(&c, 0, sizeof(c));
  al_buf_init(&c.text, 1 << 20);
  al_pstream_options_init(&o);
  ASSERT_EQ(al_pstream_init(&s, &al_provider_anthropic, &o), 0);
  feed_str(&s, ms, 0);
  feed_str(&s, block0, 0);
  delta_event(ev, sizeof(ev), 0, "warm up \\n \\u00e9");
  for (i = 0; i < 100; i++) {
    feed_str(&s, ev, 0);
  }
  before = allocs;
  for (i = 0; i < 1000; i++) {
    feed_str(&s, ev, 0);
  }
  /* Only the per-block buffer doubling may allocate: a handful of times
   * for 1000 events. */
  ASSERT_LE(allocs - before, 4);
  ASSERT_EQ(s.fast_hits, 1100);
  al_pstream_free(&s);
  al_buf_free(&c.text);
  return 0;
}

/* ---- OpenAI normalized model --------------------------------------------- */

TEST_IMPL(provider_openai_normalized) {
  al_pstream_t s;
  al_pstream_options_t o;
  char *body;
  size_t len;
  json_t *msg;
  json_t *content;

  body = al_test_read_file(
      al_test_data_path("openai/tool_calls_interleaved.sse"), &len);
  ASSERT_NOT_NULL(body);
  al_pstream_options_init(&o);
  ASSERT_EQ(al_pstream_init(&s, &al_provider_openai, &o), 0);
  ASSERT_EQ(al_pstream_feed(&s, body, len), 0);
  ASSERT_EQ(al_pstream_finish(&s), 0);
  msg = al_pstream_message(&s);
  ASSERT_NOT_NULL(msg);
  ASSERT_STR_EQ(json_string_value(json_object_get(msg, "stop_reason")),
                "tool_use");
  content = json_object_get(msg, "content");
  ASSERT_EQ(json_array_size(content), 3);
  ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(content, 0),
                                                  "id")),
                "call_a");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(json_array_get(content, 0), "input"),
                    "path")),
                "a\xc3\xa9");
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(json_array_get(content, 1), "input"),
                    "command")),
                "ls");
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(msg, "usage"),
                                               "input_tokens")),
            50);
  al_pstream_free(&s);
  free(body);
  return 0;
}

/* ---- OpenAI hot chunk ------------------------------------------------------ */

#define OAI_HEAD                                                            \
  "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","      \
  "\"created\":1700000000,\"model\":\"gpt-x\",\"system_fingerprint\":"     \
  "\"fp_1\",\"usage\":null,"

/* One stream through al_pstream_t: the normalized text, the final
 * chat.completion (dumped) and the fast path's hit count. */
static void oai_run(const al_provider_t *prov, const char *const *events,
                    size_t n, size_t repeat, bool fast, al_buf_t *text,
                    char **completion, uint64_t *fast_hits, long *hot_allocs) {
  al_pstream_t s;
  al_pstream_options_t o;
  collect_t c;
  json_t *comp;
  const char *err = NULL;
  size_t i;
  size_t r;
  long before = 0;

  memset(&c, 0, sizeof(c));
  al_buf_init(&c.text, 1 << 24);
  al_pstream_options_init(&o);
  o.on_event = collect_cb;
  o.data = &c;
  o.fast_path = fast;
  ASSERT_EQ(al_pstream_init(&s, prov, &o), 0);
  for (i = 0; i < n; i++) {
    for (r = 0; r < (i == 1 ? repeat : 1); r++) {
      if (i == 1 && r == 100) {
        before = allocs;
      }
      ASSERT_EQ(al_pstream_feed(&s, events[i], strlen(events[i])), 0);
    }
    if (i == 1 && hot_allocs != NULL) {
      *hot_allocs = allocs - before;
    }
  }
  ASSERT_EQ(al_pstream_finish(&s), 0);
  comp = prov == &al_provider_openai
             ? al_pstream_openai_completion(&s, &err)
             : json_deep_copy(al_pstream_message(&s));
  ASSERT_NOT_NULL(comp);
  *completion = json_dumps(comp, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref(comp);
  *fast_hits = s.fast_hits;
  al_buf_append(text, c.text.data != NULL ? c.text.data : "", c.text.len);
  al_pstream_free(&s);
  al_buf_free(&c.text);
}

/* Runs events (the second one 1100 times) with the fast path on and off:
 * the second event must be taken every time and nothing else, both runs
 * must give the same text and final JSON, and 1000 hot events may only
 * allocate for the doubling of three text buffers (the content, the
 * block, this test's copy). *final gets the fast run's final JSON. */
static void hot_path_check(const al_provider_t *prov,
                           const char *const *ev, size_t n, char **final) {
  al_buf_t tf;
  al_buf_t ts;
  char *cs;
  uint64_t hits_f;
  uint64_t hits_s;
  long hot = -1;

  al_buf_init(&tf, 1 << 24);
  al_buf_init(&ts, 1 << 24);
  ASSERT_EQ(al_set_allocator(count_malloc, count_realloc, count_calloc, free),
            0);
  oai_run(prov, ev, n, 1100, true, &tf, final, &hits_f, &hot);
  oai_run(prov, ev, n, 1100, false, &ts, &cs, &hits_s, NULL);
  ASSERT_EQ(hits_f, 1100);
  ASSERT_EQ(hits_s, 0);
  ASSERT_MEM_EQ(tf.data, tf.len, ts.data, ts.len);
  ASSERT_STR_EQ(*final, cs);
  ASSERT_LE(hot, 16);
  free(cs);
  al_buf_free(&tf);
  al_buf_free(&ts);
}

/* The steady chunk of an OpenAI-style stream (content appended to choice
 * 0, every other member unchanged) is decoded without a DOM, allocates
 * nothing but the growing text buffers, and gives exactly what the
 * jansson path gives; a chunk that changes anything else is not taken. */
TEST_IMPL(provider_openai_hot_path) {
  static const char *const ev[] = {
      OAI_HEAD "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
               "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}"
               "\n\n",
      OAI_HEAD "\"obfuscation\":\"a1\",\"choices\":[{\"index\":0,\"delta\":"
               "{\"content\":\"tok \\u00e9\\n\"},\"logprobs\":null,"
               "\"finish_reason\":null}]}\n\n",
      /* Declined: the role changes. */
      OAI_HEAD "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"tool\","
               "\"content\":\"y\"},\"finish_reason\":null}]}\n\n",
      /* Declined: a new model name would be assigned to the snapshot. */
      OAI_HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},"
               "\"finish_reason\":null}],\"model\":\"gpt-y\"}\n\n",
      OAI_HEAD "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
               "\"stop\"}]}\n\n",
      "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
      "\"created\":1700000000,\"model\":\"gpt-x\",\"choices\":[],\"usage\":"
      "{\"prompt_tokens\":5,\"completion_tokens\":1002,\"total_tokens\":1007}}"
      "\n\n",
      "data: [DONE]\n\n"};
  char *final;

  /* Taken: the 1100 steady chunks, not the two that change the role or
   * the model. */
  hot_path_check(&al_provider_openai, ev, AL_ARRAY_SIZE(ev), &final);
  ASSERT_NOT_NULL(strstr(final, "\"role\":\"tool\""));
  free(final);
  return 0;
}

/* The same for the Responses API's delta events. */
TEST_IMPL(provider_responses_hot_path) {
  static const char *const ev[] = {
      "event: response.created\ndata: {\"type\":\"response.created\","
      "\"response\":{\"id\":\"r\",\"object\":\"response\",\"status\":"
      "\"in_progress\",\"model\":\"m\",\"output\":[]}}\n\n"
      "event: response.output_item.added\ndata: {\"type\":"
      "\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":"
      "\"msg\",\"type\":\"message\",\"content\":[],\"role\":\"assistant\"}}"
      "\n\n",
      "event: response.output_text.delta\ndata: {\"type\":"
      "\"response.output_text.delta\",\"sequence_number\":7,\"item_id\":"
      "\"msg\",\"output_index\":0,\"content_index\":0,\"delta\":\"w \\u00e9"
      "\\n\",\"logprobs\":[]}\n\n",
      /* Declined: logprobs with content (not a scalar). */
      "event: response.output_text.delta\ndata: {\"type\":"
      "\"response.output_text.delta\",\"output_index\":0,\"delta\":\"x\","
      "\"logprobs\":[{\"token\":\"x\"}]}\n\n",
      "event: response.completed\ndata: {\"type\":\"response.completed\","
      "\"response\":{\"id\":\"r\",\"status\":\"completed\",\"output\":[],"
      "\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}}\n\n"};
  char *final;

  hot_path_check(&al_provider_openai_responses, ev, AL_ARRAY_SIZE(ev),
                 &final);
  free(final);
  return 0;
}

/* ---- request builders ------------------------------------------------------ */

static const char *header(const al_provider_request_t *r, const char *name) {
  size_t i;

  for (i = 0; i < r->nheaders; i++) {
    if (strcmp(r->headers[i].name, name) == 0) {
      return r->headers[i].value;
    }
  }
  return NULL;
}

static json_t *test_history(void) {
  return json_loads(
      "[{\"role\":\"user\",\"content\":\"list files\"},"
      "{\"role\":\"assistant\",\"content\":["
      "{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"s\"},"
      "{\"type\":\"text\",\"text\":\"Sure.\"},"
      "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"bash\","
      "\"input\":{\"command\":\"ls\"}}]},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
      "\"tool_use_id\":\"toolu_1\",\"content\":\"a b\",\"is_error\":false}]}]",
      0, NULL);
}

static json_t *test_tools(void) {
  return json_loads("[{\"name\":\"read_file\",\"description\":\"r\","
                    "\"input_schema\":{\"type\":\"object\"}},"
                    "{\"name\":\"bash\",\"description\":\"b\","
                    "\"input_schema\":{\"type\":\"object\",\"properties\":"
                    "{\"command\":{\"type\":\"string\"}}}}]",
                    0, NULL);
}

TEST_IMPL(provider_request_anthropic) {
  al_provider_options_t o;
  al_provider_request_t r;
  json_t *hist = test_history();
  json_t *tools = test_tools();
  json_t *tc = json_pack("{s:s}", "type", "auto");
  json_t *body;

  al_provider_options_init(&o);
  o.model = "claude-x";
  o.max_tokens = 1024;
  o.system = "You are helpful.";
  o.tools = tools;
  o.tool_choice = tc;
  o.api_key = "sk-test";
  ASSERT_EQ(al_provider_build_request(&al_provider_anthropic, hist, &o, &r),
            0);
  ASSERT_STR_EQ(r.method, "POST");
  ASSERT_STR_EQ(r.path, "/v1/messages");
  ASSERT_STR_EQ(header(&r, "x-api-key"), "sk-test");
  ASSERT_NULL(header(&r, "authorization"));
  ASSERT_STR_EQ(header(&r, "anthropic-version"), "2023-06-01");
  ASSERT_STR_EQ(header(&r, "content-type"), "application/json");
  ASSERT_STR_EQ(
      r.body,
      "{\"model\":\"claude-x\",\"max_tokens\":1024,\"system\":[{\"type\":"
      "\"text\",\"text\":\"You are helpful.\",\"cache_control\":{\"type\":"
      "\"ephemeral\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"list "
      "files\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\","
      "\"thinking\":\"t\",\"signature\":\"s\"},{\"type\":\"text\",\"text\":"
      "\"Sure.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"bash\","
      "\"input\":{\"command\":\"ls\"}}]},{\"role\":\"user\",\"content\":[{"
      "\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"a "
      "b\",\"is_error\":false,\"cache_control\":{\"type\":\"ephemeral\"}}]}],"
      "\"tools\":[{\"name\":\"read_file\","
      "\"description\":\"r\",\"input_schema\":{\"type\":\"object\"}},{\"name\""
      ":\"bash\",\"description\":\"b\",\"input_schema\":{\"type\":\"object\","
      "\"properties\":{\"command\":{\"type\":\"string\"}}},\"cache_control\":{"
      "\"type\":\"ephemeral\"}}],\"tool_choice\":{\"type\":\"auto\"},"
      "\"stream\":true}");
  al_provider_request_free(&r);

  /* Bearer auth, the newer version, beta header, thinking, temperature. */
  o.auth = AL_AUTH_BEARER;
  o.anthropic_version = "2026-10-21";
  o.anthropic_beta = "a-1,b-2";
  o.cache_control = false;
  o.thinking = json_pack("{s:s,s:i}", "type", "enabled", "budget_tokens", 2048);
  o.has_temperature = true;
  o.temperature = 0.5;
  ASSERT_EQ(al_provider_build_request(&al_provider_anthropic, hist, &o, &r),
            0);
  ASSERT_STR_EQ(header(&r, "authorization"), "Bearer sk-test");
  ASSERT_NULL(header(&r, "x-api-key"));
  ASSERT_STR_EQ(header(&r, "anthropic-version"), "2026-10-21");
  ASSERT_STR_EQ(header(&r, "anthropic-beta"), "a-1,b-2");
  body = json_loads(r.body, 0, NULL);
  ASSERT_NOT_NULL(body);
  ASSERT_STR_EQ(json_string_value(json_object_get(body, "system")),
                "You are helpful.");
  ASSERT_NULL(json_object_get(json_array_get(json_object_get(body, "tools"), 1),
                              "cache_control"));
  ASSERT_EQ(json_integer_value(json_object_get(
                json_object_get(body, "thinking"), "budget_tokens")),
            2048);
  ASSERT(json_real_value(json_object_get(body, "temperature")) == 0.5);
  json_decref(body);
  json_decref(o.thinking);
  al_provider_request_free(&r);

  o.model = NULL;
  ASSERT_EQ(al_provider_build_request(&al_provider_anthropic, hist, &o, &r),
            AL_EINVAL);
  json_decref(hist);
  json_decref(tools);
  json_decref(tc);
  return 0;
}

TEST_IMPL(provider_request_openai) {
  al_provider_options_t o;
  al_provider_request_t r;
  json_t *hist = test_history();
  json_t *tools = test_tools();
  json_t *tc = json_pack("{s:s,s:s}", "type", "tool", "name", "bash");

  al_provider_options_init(&o);
  o.model = "gpt-x";
  o.max_tokens = 256;
  o.system = "sys";
  o.tools = tools;
  o.tool_choice = tc;
  o.api_key = "sk-o";
  ASSERT_EQ(al_provider_build_request(&al_provider_openai, hist, &o, &r), 0);
  ASSERT_STR_EQ(r.path, "/v1/chat/completions");
  ASSERT_STR_EQ(header(&r, "authorization"), "Bearer sk-o");
  ASSERT_STR_EQ(
      r.body,
      "{\"model\":\"gpt-x\",\"messages\":[{\"role\":\"system\",\"content\":"
      "\"sys\"},{\"role\":\"user\",\"content\":\"list files\"},{\"role\":"
      "\"assistant\",\"content\":\"Sure.\",\"tool_calls\":[{\"id\":"
      "\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"bash\","
      "\"arguments\":\"{\\\"command\\\":\\\"ls\\\"}\"}}]},{\"role\":\"tool\","
      "\"tool_call_id\":\"toolu_1\",\"content\":\"a b\"}],\"max_tokens\":256,"
      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"read_file\","
      "\"description\":\"r\",\"parameters\":{\"type\":\"object\"}}},{\"type\":"
      "\"function\",\"function\":{\"name\":\"bash\",\"description\":\"b\","
      "\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{"
      "\"type\":\"string\"}}}}}],\"tool_choice\":{\"type\":\"function\","
      "\"function\":{\"name\":\"bash\"}},\"stream\":true,\"stream_options\":{"
      "\"include_usage\":true}}");
  al_provider_request_free(&r);
  json_decref(hist);
  json_decref(tools);
  json_decref(tc);
  return 0;
}

/* An assistant message of thinking blocks alone: OpenAI allows null
 * content only beside tool_calls, so it must be "". The mock's validator
 * (the API's rules) accepts the result. */
TEST_IMPL(provider_request_openai_thinking_only_assistant) {
  al_provider_options_t o;
  al_provider_request_t r;
  al_mockllm_verdict_t v;
  json_t *hist = json_loads(
      "[{\"role\":\"user\",\"content\":\"hi\"},"
      "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\","
      "\"thinking\":\"hmm\",\"signature\":\"s\"}]},"
      "{\"role\":\"user\",\"content\":\"go on\"}]",
      0, NULL);
  json_t *body;

  ASSERT_NOT_NULL(hist);
  al_provider_options_init(&o);
  o.model = "gpt-x";
  ASSERT_EQ(al_provider_build_request(&al_provider_openai, hist, &o, &r), 0);
  body = json_loads(r.body, 0, NULL);
  ASSERT_NOT_NULL(body);
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_array_get(json_object_get(body, "messages"), 1),
                    "content")),
                "");
  ASSERT(al_mockllm_validate_openai(body, NULL, &v));
  json_decref(body);
  al_provider_request_free(&r);
  json_decref(hist);
  return 0;
}

TEST_IMPL(provider_http_error) {
  al_provider_error_t e;
  static const char ant[] =
      "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
      "\"message\":\"Overloaded\"},\"request_id\":\"req_1\"}";
  static const char oai[] =
      "{\"error\":{\"message\":\"Rate limit reached\",\"type\":"
      "\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}";

  ASSERT_EQ(al_provider_http_error(&al_provider_anthropic, 529, ant,
                                   strlen(ant), &e),
            0);
  ASSERT_EQ(e.cls, AL_PCLASS_OVERLOADED);
  ASSERT_STR_EQ(e.type, "overloaded_error");
  ASSERT_STR_EQ(e.message, "Overloaded");
  ASSERT(e.retryable);
  ASSERT_STR_EQ(json_string_value(json_object_get(e.body, "request_id")),
                "req_1");
  al_provider_error_free(&e);

  ASSERT_EQ(al_provider_http_error(&al_provider_openai, 429, oai, strlen(oai),
                                   &e),
            0);
  ASSERT_EQ(e.cls, AL_PCLASS_RATE_LIMIT);
  ASSERT_STR_EQ(e.message, "Rate limit reached");
  al_provider_error_free(&e);

  ASSERT_EQ(al_provider_http_error(&al_provider_anthropic, 401,
                                   "<html>nope</html>", 17, &e),
            0);
  ASSERT_EQ(e.cls, AL_PCLASS_AUTHENTICATION);
  ASSERT(!e.retryable);
  ASSERT_STR_EQ(e.message, "HTTP 401");
  ASSERT_STR_EQ(json_string_value(e.body), "<html>nope</html>");
  al_provider_error_free(&e);
  return 0;
}
