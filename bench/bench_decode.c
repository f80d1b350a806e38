/* `agentloop-bench decode`: CPU cost per event of the streaming decode
 * pipeline (SPEC §15, issue budget: <= 0.15 us per ~147-byte text_delta).
 *
 * One synthetic Anthropic body is built in memory: message_start, a text
 * block, N (default 200,000) content_block_delta/text_delta events of
 * about 147 bytes each (every 8th text carries a \n escape, every 16th a
 * non-ASCII character), block stop, message_delta, message_stop. The same
 * bytes are then fed in CHUNK-sized pieces (default 16 KiB, like TLS
 * records off a socket) through:
 *   pipeline   SSE parser + decoder (fast path) + aggregator + delivery to
 *              a subscriber callback that touches every delta byte;
 *   jansson    the same pipeline with the fast path off (a DOM per event);
 *   sse-only   the SSE parser alone with an empty callback (its share);
 *   memchr     a raw scan for '\n' over the same bytes (the floor).
 * Each is repeated REPS times (default 7); the table shows the median CPU
 * time (CLOCK_PROCESS_CPUTIME_ID) per event and the throughput. The
 * final message is checked so a broken pipeline cannot look fast. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "provider/provider.h"
#include "sse/sse.h"

typedef struct {
  uint64_t events;
  uint64_t bytes;
  uint64_t sum;
} sub_t;

static int subscriber(void *data, const al_pevent_t *ev) {
  sub_t *s = data;

  s->events++;
  if (ev->type == AL_PEV_TEXT_DELTA) {
    /* Touch the slice as a real subscriber would (it copies or prints). */
    s->bytes += ev->len;
    if (ev->len > 0) {
      s->sum += (unsigned char)ev->text[0] +
                (unsigned char)ev->text[ev->len - 1];
    }
  }
  return 0;
}

static int sse_noop(void *data, const al_sse_event_t *ev) {
  uint64_t *n = data;

  (*n) += ev->data_len;
  return 0;
}

static double cpu_now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const words[] = {
    "the ", "stream ", "of ", "tokens ", "arrives ", "quickly ", "and ",
    "each ", "delta ", "is ", "small; ", "parsing ", "must ", "stay ",
    "cheap, ", "so ", "we ", "avoid ", "DOMs. "};

/* Builds the body; *text_bytes gets the total decoded text length. */
static char *build_body(size_t nevents, size_t *len_out, size_t *text_bytes) {
  al_buf_t b;
  size_t i;
  size_t w = 0;
  size_t total = 0;

  al_buf_init(&b, (size_t)1 << 31);
  al_buf_append_str(
      &b,
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{"
      "\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\","
      "\"model\":\"bench\",\"content\":[],\"stop_reason\":null,"
      "\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,"
      "\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\","
      "\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
  for (i = 0; i < nevents; i++) {
    char text[64];
    size_t tl = 0;
    size_t decoded;

    /* 33 bytes of JSON string content => a 147-byte SSE event. */
    text[0] = '\0';
    while (tl < 33) {
      const char *wd = words[w++ % (sizeof(words) / sizeof(words[0]))];
      size_t n = strlen(wd);

      if (tl + n > 33) {
        n = 33 - tl;
      }
      memcpy(text + tl, wd, n);
      tl += n;
    }
    text[tl] = '\0';
    decoded = tl;
    if (i % 8 == 7) {
      memcpy(text + tl - 2, "\\n", 2); /* an escape: 2 bytes -> 1 */
      decoded -= 1;
    }
    if (i % 16 == 15) {
      memcpy(text, "\xc3\xa9", 2); /* raw UTF-8 */
    }
    total += decoded;
    al_buf_printf(&b,
                  "event: content_block_delta\ndata: {\"type\":"
                  "\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
                  "\"text_delta\",\"text\":\"%s\"}}\n\n",
                  text);
  }
  al_buf_append_str(
      &b,
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
      "\"index\":0}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"
      "\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{"
      "\"output_tokens\":9}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
  *len_out = b.len;
  *text_bytes = total;
  return b.data;
}

static double run_pipeline(const char *body, size_t len, size_t chunk,
                           bool fast, size_t expect_text, uint64_t *fast_hits) {
  al_pstream_t s;
  al_pstream_options_t o;
  sub_t sub = {0, 0, 0};
  size_t off;
  double t0;
  double t1;
  json_t *msg;
  json_t *text;

  al_pstream_options_init(&o);
  o.on_event = subscriber;
  o.data = &sub;
  o.fast_path = fast;
  o.max_block = (size_t)1 << 30;
  t0 = cpu_now();
  al_pstream_init(&s, &al_provider_anthropic, &o);
  for (off = 0; off < len; off += chunk) {
    if (al_pstream_feed(&s, body + off, AL_MIN(chunk, len - off)) != 0) {
      fprintf(stderr, "bench: decode failed: %s\n",
              al_pstream_error_message(&s));
      exit(1);
    }
  }
  if (al_pstream_finish(&s) != 0) {
    fprintf(stderr, "bench: finish failed\n");
    exit(1);
  }
  t1 = cpu_now();
  /* Outside the timed region: check the aggregate. */
  msg = al_pstream_message(&s);
  text = json_object_get(json_array_get(json_object_get(msg, "content"), 0),
                         "text");
  if (json_string_length(text) != expect_text || sub.bytes != expect_text) {
    fprintf(stderr, "bench: wrong aggregate (%zu / %llu, expected %zu)\n",
            json_string_length(text), (unsigned long long)sub.bytes,
            expect_text);
    exit(1);
  }
  *fast_hits = s.fast_hits;
  al_pstream_free(&s);
  return t1 - t0;
}

static double run_sse_only(const char *body, size_t len, size_t chunk) {
  al_sse_settings_t st;
  al_sse_parser_t p;
  uint64_t n = 0;
  size_t off;
  double t0;
  double t1;

  al_sse_settings_init(&st);
  st.on_event = sse_noop;
  st.data = &n;
  t0 = cpu_now();
  al_sse_init(&p, &st);
  for (off = 0; off < len; off += chunk) {
    al_sse_feed(&p, body + off, AL_MIN(chunk, len - off));
  }
  al_sse_finish(&p);
  al_sse_free(&p);
  t1 = cpu_now();
  if (n == 0) {
    exit(1);
  }
  return t1 - t0;
}

static volatile size_t sink;

static double run_memchr(const char *body, size_t len, size_t chunk) {
  size_t off;
  size_t lines = 0;
  double t0 = cpu_now();

  for (off = 0; off < len; off += chunk) {
    const char *p = body + off;
    const char *end = p + AL_MIN(chunk, len - off);

    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
      lines++;
      p++;
    }
  }
  sink = lines;
  return cpu_now() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a;
  double y = *(const double *)b;

  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int al_bench_decode(int argc, char **argv) {
  size_t nevents = 200000;
  size_t chunk = 16384;
  int reps = 7;
  bool as_json = false;
  bool only_pipeline = false; /* for profilers: the fast pipeline alone */
  char *body;
  size_t len;
  size_t text_bytes;
  double tp[64];
  double tj[64];
  double ts[64];
  double tm[64];
  double mp;
  double mj;
  double msse;
  double mm;
  uint64_t hits = 0;
  uint64_t hits_j = 0;
  int i;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
      nevents = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
      chunk = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else if (strcmp(argv[i], "--pipeline-only") == 0) {
      only_pipeline = true;
    } else {
      fprintf(stderr,
              "usage: agentloop-bench decode [--events N] [--reps N] "
              "[--chunk BYTES] [--json]\n");
      return 2;
    }
  }
  if (nevents == 0 || chunk == 0 || reps < 1 || reps > 64) {
    fprintf(stderr, "agentloop-bench decode: bad arguments\n");
    return 2;
  }
  json_object_seed(0);
  body = build_body(nevents, &len, &text_bytes);
  if (only_pipeline) {
    for (i = 0; i < reps; i++) {
      tp[i] = run_pipeline(body, len, chunk, true, text_bytes, &hits);
    }
    printf("pipeline: %.4f us/event\n", median(tp, reps) * 1e6 / nevents);
    free(body);
    return 0;
  }
  /* One untimed warm-up of each path (page faults, caches). */
  run_pipeline(body, len, chunk, true, text_bytes, &hits);
  run_pipeline(body, len, chunk, false, text_bytes, &hits_j);
  for (i = 0; i < reps; i++) {
    tp[i] = run_pipeline(body, len, chunk, true, text_bytes, &hits);
    tj[i] = run_pipeline(body, len, chunk, false, text_bytes, &hits_j);
    ts[i] = run_sse_only(body, len, chunk);
    tm[i] = run_memchr(body, len, chunk);
  }
  mp = median(tp, reps) * 1e6 / (double)nevents;
  mj = median(tj, reps) * 1e6 / (double)nevents;
  msse = median(ts, reps) * 1e6 / (double)nevents;
  mm = median(tm, reps) * 1e6 / (double)nevents;
  if (as_json) {
    printf("{\"scenario\":\"decode\",\"events\":%zu,\"bytes\":%zu,"
           "\"bytes_per_event\":%.1f,\"chunk\":%zu,\"reps\":%d,"
           "\"fast_path_hits\":%llu,"
           "\"us_per_event\":{\"pipeline\":%.4f,\"jansson\":%.4f,"
           "\"sse_only\":%.4f,\"memchr\":%.4f},"
           "\"budget_us_per_event\":0.15,\"within_budget\":%s}\n",
           nevents, len, (double)len / (double)nevents, chunk, reps,
           (unsigned long long)hits, mp, mj, msse, mm,
           mp <= 0.15 ? "true" : "false");
  } else {
    printf("decode: %zu text_delta events, %.1f bytes/event, %zu-byte "
           "chunks, median of %d\n",
           nevents, (double)len / (double)nevents, chunk, reps);
    printf("%-44s %12s %10s\n", "path", "us/event", "MB/s");
    printf("%-44s %12.4f %10.0f\n",
           "pipeline (SSE+fast decode+aggregate+deliver)", mp,
           (double)len / (mp * (double)nevents));
    printf("%-44s %12.4f %10.0f\n", "pipeline, fast path off (jansson DOM)",
           mj, (double)len / (mj * (double)nevents));
    printf("%-44s %12.4f %10.0f\n", "SSE parser alone (share of pipeline)",
           msse, (double)len / (msse * (double)nevents));
    printf("%-44s %12.4f %10.0f\n", "memchr scan (floor)", mm,
           (double)len / (mm * (double)nevents));
    printf("fast path hits: %llu of %zu deltas; budget 0.15 us/event: %s\n",
           (unsigned long long)hits, nevents,
           mp <= 0.15 ? "met" : "NOT met");
  }
  free(body);
  return 0;
}

/* ---- `agentloop decode` on a capture (issue 17 item 4) ------------------- */

#include <fcntl.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* CPU seconds (user + system) and peak RSS (KiB) of one
 * `agentloop decode --provider anthropic [extra] < capture > /dev/null`. */
static int run_cli_decode(const char *exe, const char *capture,
                          const char *extra, double *cpu, long *maxrss) {
  struct rusage ru;
  int status;
  pid_t pid = fork();

  if (pid < 0) {
    return -1;
  }
  if (pid == 0) {
    int in = open(capture, O_RDONLY);
    int out = open("/dev/null", O_WRONLY);

    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0) {
      _exit(127);
    }
    if (extra != NULL) {
      execl(exe, exe, "decode", "--provider", "anthropic", extra,
            (char *)NULL);
    } else {
      execl(exe, exe, "decode", "--provider", "anthropic", (char *)NULL);
    }
    _exit(127);
  }
  if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    fprintf(stderr, "bench: agentloop decode failed (status %d)\n", status);
    return -1;
  }
  *cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
  *maxrss = ru.ru_maxrss;
  return 0;
}

/* The in-process pipeline and the `agentloop decode` process on the same
 * capture, alternating, in one run: CPU per event of each, their ratio
 * (target: decode within 2x of the pipeline), and decode's peak RSS
 * beside the capture's size. */
int al_bench_decode_cli(int argc, char **argv) {
  size_t nevents = 400000;
  int reps = 5;
  char exe[PATH_MAX];
  char capture[] = "/tmp/al-bench-capture-XXXXXX";
  char *slash;
  char *body;
  size_t len;
  size_t text_bytes;
  double tp[64];
  double tc[64];
  double te[64];
  double ratio[64];
  long rss = 0;
  long rss_e = 0;
  uint64_t hits = 0;
  ssize_t n;
  size_t off;
  int fd;
  int i;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
      nevents = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: agentloop-bench decode-cli [--events N] "
                      "[--reps N]\n");
      return 2;
    }
  }
  if (nevents == 0 || reps < 1 || reps > 64) {
    return 2;
  }
  n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    return 1;
  }
  exe[n] = '\0';
  slash = strrchr(exe, '/');
  snprintf(slash + 1, sizeof(exe) - (size_t)(slash + 1 - exe), "agentloop");
  json_object_seed(0);
  body = build_body(nevents, &len, &text_bytes);
  fd = mkstemp(capture);
  if (fd < 0) {
    return 1;
  }
  for (off = 0; off < len; off += (size_t)n) {
    n = write(fd, body + off, len - off);
    if (n <= 0) {
      close(fd);
      unlink(capture);
      return 1;
    }
  }
  close(fd);
  run_pipeline(body, len, 16384, true, text_bytes, &hits); /* warm-up */
  for (i = 0; i < reps; i++) {
    long r;

    tp[i] = run_pipeline(body, len, 16384, true, text_bytes, &hits);
    if (run_cli_decode(exe, capture, NULL, &tc[i], &r) != 0 ||
        run_cli_decode(exe, capture, "--events", &te[i], &rss_e) != 0) {
      unlink(capture);
      free(body);
      return 1;
    }
    rss = r > rss ? r : rss;
    ratio[i] = tc[i] / tp[i];
  }
  unlink(capture);
  free(body);
  {
    double mp = median(tp, reps) * 1e6 / (double)nevents;
    double mc = median(tc, reps) * 1e6 / (double)nevents;
    double me = median(te, reps) * 1e6 / (double)nevents;
    double lo;
    double hi;

    qsort(ratio, (size_t)reps, sizeof(ratio[0]), cmp_double);
    lo = ratio[0];
    hi = ratio[reps - 1];
    printf("decode-cli: %zu events, %.1f MB capture, %d alternating runs\n",
           nevents, (double)len / 1e6, reps);
    printf("%-52s %10s\n", "path", "us/event");
    printf("%-52s %10.4f\n", "in-process pipeline (16 KiB feeds)", mp);
    printf("%-52s %10.4f\n",
           "agentloop decode --provider anthropic (whole process)", mc);
    printf("%-52s %10.4f\n", "agentloop decode ... --events (NDJSON out)", me);
    printf("decode / pipeline: median %.2fx (runs %.2f..%.2f); target "
           "<= 2x: %s\n",
           median(ratio, reps), lo, hi,
           median(ratio, reps) <= 2.0 ? "met" : "NOT met");
    printf("peak RSS: decode %.1f MB, --events %.1f MB (capture %.1f MB)\n",
           (double)rss / 1024.0, (double)rss_e / 1024.0, (double)len / 1e6);
  }
  return 0;
}
