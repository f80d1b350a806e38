/* `agentloop decode --provider sse|anthropic|openai|openai-responses [--events]`
 * (SPEC §12, docs/decode.md).
 *
 * Reads a captured response body on stdin (plain blocking reads: there is
 * no loop here), feeding each read to the parser as it arrives -- the body
 * is never held whole, so memory stays flat however long the capture --
 * and prints what the decoders make of it as compact JSON:
 *   sse        one object per dispatched event, then {"retry":N} if a valid
 *              retry field was seen;
 *   anthropic  the final Message, built as the Anthropic SDK's accumulator
 *              builds it (PROTOCOLS.md §2.5);
 *   openai     the final chat.completion, as the OpenAI SDK's
 *              ChatCompletionStream finalizes it (PROTOCOLS.md §3.3);
 *   --events   the normalized stream events as NDJSON instead, decoded
 *              with the options the agent loop runs with
 *              (al_pstream_options_runtime): what decode shows is what
 *              the loop does.
 * Exit 0 on success. An error event prints
 * {"error":{"kind":"stream_error_event","body":...}} on stderr and exits 1;
 * an undecodable stream prints {"error":{"kind":"decode_error",
 * "message":"..."}} and exits 1. Usage errors exit 2. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client/cli.h"
#include "provider/provider.h"
#include "sse/sse.h"

/* One read's worth: large enough that the per-read cost vanishes, small
 * enough to stay in cache while the parser walks it. */
#define DECODE_CHUNK ((size_t)256 << 10)
/* The largest single SSE event accepted (the whole body used to be the
 * limit; a stream has no length up front). */
#define DECODE_MAX_EVENT ((size_t)1 << 30)

static const char usage_text[] =
    "usage: agentloop decode --provider sse|anthropic|openai|openai-responses [--events]\n"
    "                        [--sdk-helpers|--no-sdk-helpers] [--think-tags]\n"
    "Reads a captured response body on stdin and prints compact JSON.\n";

typedef int (*chunk_fn)(void *data, const char *p, size_t n);

/* Reads fd to its end, handing each read to fn. 0, fn's non-zero value,
 * or -errno. */
static int read_stream(int fd, chunk_fn fn, void *data) {
  char *buf = al_malloc(DECODE_CHUNK);
  int rc = 0;

  if (buf == NULL) {
    return AL_ENOMEM;
  }
  for (;;) {
    ssize_t n = read(fd, buf, DECODE_CHUNK);

    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      rc = -errno;
      break;
    }
    if (n == 0) {
      break;
    }
    if ((rc = fn(data, buf, (size_t)n)) != 0) {
      break;
    }
  }
  al_free(buf);
  return rc;
}

/* Compact, objects in insertion order, reals spelled as JSON.stringify
 * spells them (shortest round-trip, 1.0 -> 1, -1.5e3 -> -1500). */
static void print_json(FILE *f, json_t *j) {
  al__json_write_js(f, j);
}

static void print_decode_error(const char *message) {
  json_t *e = json_pack("{s:{s:s,s:o}}", "error", "kind", "decode_error",
                        "message",
                        al__json_string_utf8(message, strlen(message)));

  print_json(stderr, e);
  json_decref(e);
}

/* ---- sse ------------------------------------------------------------------ */

typedef struct {
  bool has_retry;
  uint64_t retry;
} sse_ctx_t;

static json_t *str_or_null(bool has, const char *p, size_t n) {
  return has ? al__json_string_utf8(p, n) : json_null();
}

static int sse_on_event(void *data, const al_sse_event_t *ev) {
  json_t *o = json_object();

  (void)data;
  json_object_set_new(o, "event", str_or_null(ev->has_type, ev->type,
                                              ev->type_len));
  json_object_set_new(o, "data", al__json_string_utf8(ev->data, ev->data_len));
  json_object_set_new(o, "id", str_or_null(ev->has_id, ev->id, ev->id_len));
  json_object_set_new(o, "lastEventId",
                      al__json_string_utf8(ev->last_event_id,
                                           ev->last_event_id_len));
  print_json(stdout, o);
  json_decref(o);
  return 0;
}

static void sse_on_retry(void *data, uint64_t ms) {
  sse_ctx_t *c = data;

  c->has_retry = true;
  c->retry = ms;
}

static int sse_chunk(void *data, const char *p, size_t n) {
  return al_sse_feed(data, p, n);
}

static int decode_sse(int fd) {
  al_sse_settings_t st;
  al_sse_parser_t p;
  sse_ctx_t ctx = {false, 0};
  int rc;

  al_sse_settings_init(&st);
  st.on_event = sse_on_event;
  st.on_retry = sse_on_retry;
  st.data = &ctx;
  st.max_event = DECODE_MAX_EVENT;
  if (st.max_line < st.max_event) {
    st.max_line = st.max_event;
  }
  al_sse_init(&p, &st);
  rc = read_stream(fd, sse_chunk, &p);
  if (rc == 0) {
    rc = al_sse_finish(&p);
  }
  if (rc != 0) {
    al_sse_free(&p);
    print_decode_error(al_strerror(rc));
    return 1;
  }
  if (ctx.has_retry) {
    size_t dlen;
    const char *digits = al_sse_retry_digits(&p, &dlen);

    /* The exact integer, however large (jansson's json_int_t cannot hold
     * it): the digits are a valid JSON number token, written as is. */
    fputs("{\"retry\":", stdout);
    if (digits != NULL && dlen > 0) {
      fwrite(digits, 1, dlen, stdout);
    } else {
      printf("%" PRIu64, ctx.retry);
    }
    fputs("}\n", stdout);
  }
  al_sse_free(&p);
  return 0;
}

/* ---- provider streams ---------------------------------------------------- */

static json_t *slice(const char *p, size_t n) {
  return al__json_string_utf8(p != NULL ? p : "", n);
}

static void set_borrowed(json_t *o, const char *k, json_t *v) {
  json_object_set_new(o, k, v != NULL ? json_deep_copy(v) : json_null());
}

/* The JSON of one normalized event (the shapes are in docs/decode.md). */
json_t *al__cli_pevent_json(const al_pevent_t *ev) {
  json_t *o = json_object();

  json_object_set_new(o, "type", json_string(al_pevent_name(ev->type)));
  switch (ev->type) {
  case AL_PEV_MESSAGE_START:
    json_object_set_new(o, "id", ev->id ? json_string(ev->id) : json_null());
    json_object_set_new(o, "model",
                        ev->model ? json_string(ev->model) : json_null());
    set_borrowed(o, "usage", ev->usage);
    set_borrowed(o, "message", ev->json);
    break;
  case AL_PEV_BLOCK_START:
  case AL_PEV_BLOCK_STOP:
    json_object_set_new(o, "index", json_integer(ev->index));
    json_object_set_new(o, "block_type",
                        ev->block_type_name ? json_string(ev->block_type_name)
                                            : json_null());
    set_borrowed(o, "block", ev->json);
    break;
  case AL_PEV_TEXT_DELTA:
  case AL_PEV_THINKING_DELTA:
  case AL_PEV_TOOL_INPUT_DELTA:
    json_object_set_new(o, "index", json_integer(ev->index));
    json_object_set_new(o, "text", slice(ev->text, ev->len));
    break;
  case AL_PEV_SIGNATURE:
    json_object_set_new(o, "index", json_integer(ev->index));
    set_borrowed(o, "signature", ev->json);
    break;
  case AL_PEV_CITATION:
    json_object_set_new(o, "index", json_integer(ev->index));
    set_borrowed(o, "citation", ev->json);
    break;
  case AL_PEV_MESSAGE_DELTA:
  case AL_PEV_MESSAGE_STOP:
    json_object_set_new(o, "stop_reason",
                        ev->stop_reason == AL_STOP_NONE
                            ? json_null()
                            : json_string(al_stop_reason_name(ev->stop_reason)));
    json_object_set_new(o, "stop_reason_raw",
                        ev->stop_reason_raw ? json_string(ev->stop_reason_raw)
                                            : json_null());
    set_borrowed(o, "usage", ev->usage);
    if (ev->type == AL_PEV_MESSAGE_STOP) {
      set_borrowed(o, "message", ev->json);
    }
    break;
  case AL_PEV_RAW:
    json_object_set_new(o, "event", slice(ev->text, ev->len));
    set_borrowed(o, "data", ev->json);
    break;
  case AL_PEV_ERROR:
    json_object_set_new(o, "kind", json_string(ev->error_kind ==
                                                       AL_PERR_STREAM_EVENT
                                                   ? "stream_error_event"
                                                   : "decode_error"));
    json_object_set_new(o, "error_type", ev->error_type
                                             ? json_string(ev->error_type)
                                             : json_null());
    json_object_set_new(o, "message", slice(ev->text, ev->len));
    set_borrowed(o, "body", ev->json);
    break;
  case AL_PEV_NOTICE:
    json_object_set_new(o, "kind", ev->error_type ? json_string(ev->error_type)
                                                  : json_null());
    json_object_set_new(o, "message", slice(ev->text, ev->len));
    break;
  default:
    break;
  }
  return o;
}

/* One NDJSON line per normalized event. */
static int events_on_event(void *data, const al_pevent_t *ev) {
  json_t *o = al__cli_pevent_json(ev);

  (void)data;
  print_json(stdout, o);
  json_decref(o);
  return 0;
}

static int report_failure(al_pstream_t *s) {
  if (al_pstream_error_kind(s) == AL_PERR_STREAM_EVENT) {
    json_t *body = al_pstream_error_body(s);
    json_t *e = json_pack("{s:{s:s,s:O}}", "error", "kind",
                          "stream_error_event", "body",
                          body != NULL ? body : json_null());
    print_json(stderr, e);
    json_decref(e);
  } else {
    const char *m = al_pstream_error_message(s);
    print_decode_error(m != NULL ? m : "decode failed");
  }
  return 1;
}

static int pstream_chunk(void *data, const char *p, size_t n) {
  int rc = al_pstream_feed(data, p, n);

  /* --events: a reader of the pipe sees each read's events as they are
   * decoded (one write per read, not per event). */
  fflush(stdout);
  return rc;
}

static int decode_provider(const al_provider_t *p, int fd, bool events,
                           int helpers, bool think_tags) {
  al_pstream_t s;
  al_pstream_options_t o;
  int rc;
  int exit_code = 0;

  if (events) {
    al_pstream_options_runtime(&o);
    o.on_event = events_on_event;
  } else {
    /* SDK-faithful: blocks are pushed on start and addressed by index. */
    al_pstream_options_init(&o);
    o.strict_indexes = false;
  }
  o.max_event = DECODE_MAX_EVENT;
  /* What the catalogue's think_tags does in the loop (decode has no model). */
  o.think_tags = think_tags;
  al_pstream_init(&s, p, &o);
  rc = read_stream(fd, pstream_chunk, &s);
  if (rc == 0) {
    rc = al_pstream_finish(&s);
  }
  if (rc != 0) {
    if (al_pstream_error_message(&s) == NULL) {
      print_decode_error(al_strerror(rc));
      exit_code = 1;
    } else {
      exit_code = report_failure(&s);
    }
  } else if (!events) {
    const char *err = NULL;
    json_t *out = al_pstream_final_json(&s, helpers, &err);

    if (out == NULL) {
      print_decode_error(err != NULL ? err : "no final message");
      exit_code = 1;
    } else {
      print_json(stdout, out);
      json_decref(out);
    }
  }
  al_pstream_free(&s);
  return exit_code;
}

int al_cli_decode(int argc, char **argv) {
  const char *provider = NULL;
  bool events = false;
  bool think_tags = false;
  int helpers = -1; /* provider default: see docs/decode.md */
  int rc;
  int i;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc) {
      provider = argv[++i];
    } else if (strncmp(argv[i], "--provider=", 11) == 0) {
      provider = argv[i] + 11;
    } else if (strcmp(argv[i], "--events") == 0) {
      events = true;
    } else if (strcmp(argv[i], "--sdk-helpers") == 0) {
      helpers = 1;
    } else if (strcmp(argv[i], "--think-tags") == 0) {
      think_tags = true;
    } else if (strcmp(argv[i], "--no-sdk-helpers") == 0) {
      helpers = 0;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage_text, stdout);
      return 0;
    } else {
      fprintf(stderr, "agentloop decode: unknown argument '%s'\n%s", argv[i],
              usage_text);
      return 2;
    }
  }
  if (provider == NULL ||
      (strcmp(provider, "sse") != 0 && al_provider_by_name(provider) == NULL)) {
    fprintf(stderr, "agentloop decode: --provider sse|anthropic|openai|openai-responses "
                    "is required\n%s",
            usage_text);
    return 2;
  }
  json_object_seed(0);
  if (strcmp(provider, "sse") == 0) {
    rc = decode_sse(0);
  } else {
    rc = decode_provider(al_provider_by_name(provider), 0, events, helpers,
                         think_tags);
  }
  fflush(stdout);
  return rc;
}
