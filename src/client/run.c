/* `agentloop run -p PROMPT`: one streamed request, printed as it arrives.
 *
 * This is the streaming core end to end: the provider builds the request,
 * the transport sends it (TLS, proxy, keep-alive), body bytes go through
 * the SSE parser and decoder, and every text delta is written to stdout the
 * moment it is decoded. The agent loop (tools, retries, turns) will replace
 * the single request; the flags and exit codes already follow
 * CONVENTIONS.md 7.1 and 7.5. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "client/cli.h"
#include "common/common.h"
#include "provider/provider.h"
#include "transport/transport.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SIGINT = 130 };

typedef struct run_s {
  uv_loop_t loop;
  uv_signal_t sigint;
  al_http_client_t *client;
  al_http_request_t *req;
  al_pstream_t stream;
  bool stream_ready;
  bool ndjson;
  bool color;          /* dim thinking on a TTY */
  bool in_thinking;
  bool printed_text;
  bool text_ends_nl;
  int exit_code;
  char reason[512];
} run_t;

static void usage(FILE *f) {
  fputs(
      "usage: agentloop run -p PROMPT [options]\n"
      "  -p, --prompt TEXT         the user message (piped stdin is appended)\n"
      "      --provider NAME       anthropic (default) or openai\n"
      "      --model NAME          model (default: $AGENTLOOP_MODEL or the\n"
      "                            provider's default)\n"
      "      --base-url URL        endpoint (default: $AGENTLOOP_BASE_URL,\n"
      "                            $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL)\n"
      "      --api-key KEY         key (default: $ANTHROPIC_API_KEY /\n"
      "                            $OPENAI_API_KEY)\n"
      "      --system TEXT         system prompt\n"
      "      --max-tokens N        default 4096\n"
      "      --output-format F     text (default) or ndjson (stream events)\n"
      "      --timeout-ms N        stall timeout for idle bytes (default "
      "30000)\n"
      "  -h, --help\n",
      f);
}

static void set_reason(run_t *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(run_t *r, int code, const char *fmt, ...) {
  va_list ap;

  if (r->exit_code != EXIT_OK) {
    return; /* keep the first reason */
  }
  r->exit_code = code;
  va_start(ap, fmt);
  vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
  va_end(ap);
}

static void end_thinking(run_t *r) {
  if (r->in_thinking) {
    fputs(r->color ? "\x1b[0m\n" : "\n", stderr);
    r->in_thinking = false;
  }
}

static void print_ndjson(const al_pevent_t *ev) {
  json_t *o = al__cli_pevent_json(ev);
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);

  if (s != NULL) {
    puts(s);
    free(s);
  }
  json_decref(o);
  fflush(stdout);
}

static int on_pevent(void *data, const al_pevent_t *ev) {
  run_t *r = data;

  if (ev->progress && r->req != NULL) {
    al_http_request_progress(r->req);
  }
  if (r->ndjson) {
    print_ndjson(ev);
    return 0;
  }
  switch (ev->type) {
  case AL_PEV_THINKING_DELTA:
    /* Thinking goes to stderr, dimmed on a terminal, so stdout carries
     * only the answer. */
    if (!r->in_thinking) {
      fputs(r->color ? "\x1b[2m" : "[thinking] ", stderr);
      r->in_thinking = true;
    }
    fwrite(ev->text, 1, ev->len, stderr);
    fflush(stderr);
    break;
  case AL_PEV_TEXT_DELTA:
    end_thinking(r);
    if (ev->len > 0) {
      fwrite(ev->text, 1, ev->len, stdout);
      fflush(stdout);
      r->printed_text = true;
      r->text_ends_nl = ev->text[ev->len - 1] == '\n';
    }
    break;
  case AL_PEV_BLOCK_STOP:
    end_thinking(r);
    break;
  case AL_PEV_ERROR:
    set_reason(r, EXIT_FAIL, "%s: %.*s",
               ev->error_kind == AL_PERR_STREAM_EVENT ? "stream error event"
                                                      : "decode error",
               (int)ev->len, ev->text ? ev->text : "");
    break;
  default:
    break;
  }
  return 0;
}

static void on_response(al_http_request_t *req, int status,
                        const al_http_headers_t *h) {
  (void)req;
  (void)status;
  (void)h;
}

static void on_data(al_http_request_t *req, const char *p, size_t n) {
  run_t *r = al_http_request_get_data(req);
  int err = al_pstream_feed(&r->stream, p, n);

  if (err != 0) {
    /* The decoder already reported what went wrong through an ERROR event
     * (or ran out of its limits); stop reading. */
    set_reason(r, EXIT_FAIL, "decoding the stream: %s", al_strerror(err));
    al_http_request_cancel(req);
    r->req = NULL;
    uv_close((uv_handle_t *)&r->sigint, NULL);
  }
}

static void on_complete(al_http_request_t *req, int status,
                        const al_http_error_t *e) {
  run_t *r = al_http_request_get_data(req);
  int err;

  r->req = NULL;
  if (status == 0) {
    err = al_pstream_finish(&r->stream);
    if (err != 0) {
      set_reason(r, EXIT_FAIL, "stream ended without a complete message (%s)",
                 al_strerror(err));
    }
  } else if (e != NULL && e->http_status >= 300) {
    set_reason(r, EXIT_FAIL, "HTTP %d %s: %s", e->http_status,
               al_http_error_kind_name(e->kind),
               e->api_message ? e->api_message : e->message);
  } else {
    set_reason(r, EXIT_FAIL, "%s: %s%s%s",
               e ? al_http_error_kind_name(e->kind) : "error",
               e ? e->message : al_strerror(status),
               e && e->detail ? " - " : "", e && e->detail ? e->detail : "");
  }
  uv_close((uv_handle_t *)&r->sigint, NULL);
}

static void on_sigint(uv_signal_t *h, int signum) {
  run_t *r = AL_CONTAINER_OF(h, run_t, sigint);

  (void)signum;
  if (r->req != NULL) {
    al_http_request_cancel(r->req);
    r->req = NULL;
  }
  set_reason(r, EXIT_SIGINT, "interrupted");
  uv_close((uv_handle_t *)h, NULL);
}

static char *read_piped_stdin(void) {
  al_buf_t b;
  char tmp[8192];
  ssize_t n;

  if (isatty(STDIN_FILENO)) {
    return NULL;
  }
  al_buf_init(&b, 32u << 20);
  /* Runs before the loop starts, so a blocking read is harmless here. */
  while ((n = read(STDIN_FILENO, tmp, sizeof(tmp))) != 0) {
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    if (al_buf_append(&b, tmp, (size_t)n) != 0) {
      break;
    }
  }
  return b.data;
}

static const char *env_or(const char *a, const char *b, const char *dflt) {
  const char *v = a ? getenv(a) : NULL;

  if (v != NULL && *v != '\0') {
    return v;
  }
  v = b ? getenv(b) : NULL;
  return v != NULL && *v != '\0' ? v : dflt;
}

int al_cli_run(int argc, char **argv) {
  static const struct option longopts[] = {
      {"prompt", required_argument, NULL, 'p'},
      {"provider", required_argument, NULL, 'P'},
      {"model", required_argument, NULL, 'm'},
      {"base-url", required_argument, NULL, 'u'},
      {"api-key", required_argument, NULL, 'k'},
      {"system", required_argument, NULL, 's'},
      {"max-tokens", required_argument, NULL, 'T'},
      {"output-format", required_argument, NULL, 'o'},
      {"timeout-ms", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  run_t *r;
  const char *prompt = NULL;
  const char *provider_name = env_or("AGENTLOOP_PROVIDER", NULL, "anthropic");
  const char *model = NULL;
  const char *base_url = NULL;
  const char *api_key = NULL;
  const char *system = NULL;
  const char *format = "text";
  long max_tokens = 4096;
  long timeout_ms = 30000;
  const al_provider_t *prov;
  al_provider_options_t po;
  al_provider_request_t preq;
  al_pstream_options_t so;
  al_http_request_options_t ro;
  al_http_header_t *hdrs = NULL;
  json_t *history;
  char *piped;
  char *content;
  char url[2048];
  size_t i;
  int c;
  int err;
  int code;

  optind = 1;
  while ((c = getopt_long(argc, argv, "p:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': prompt = optarg; break;
    case 'P': provider_name = optarg; break;
    case 'm': model = optarg; break;
    case 'u': base_url = optarg; break;
    case 'k': api_key = optarg; break;
    case 's': system = optarg; break;
    case 'T': max_tokens = strtol(optarg, NULL, 10); break;
    case 'o': format = optarg; break;
    case 't': timeout_ms = strtol(optarg, NULL, 10); break;
    case 'h': usage(stdout); return EXIT_OK;
    default: usage(stderr); return EXIT_USAGE;
    }
  }
  if (prompt == NULL) {
    fprintf(stderr, "agentloop run: -p PROMPT is required\n");
    return EXIT_USAGE;
  }
  prov = al_provider_by_name(provider_name);
  if (prov == NULL) {
    fprintf(stderr, "agentloop run: unknown provider '%s' "
                    "(anthropic or openai)\n", provider_name);
    return EXIT_USAGE;
  }
  if (strcmp(format, "text") != 0 && strcmp(format, "ndjson") != 0) {
    fprintf(stderr, "agentloop run: --output-format must be text or ndjson\n");
    return EXIT_USAGE;
  }
  if (max_tokens <= 0 || timeout_ms < 0) {
    fprintf(stderr, "agentloop run: --max-tokens and --timeout-ms must be "
                    "positive\n");
    return EXIT_USAGE;
  }
  if (prov->kind == AL_PROVIDER_ANTHROPIC) {
    model = model ? model : env_or("AGENTLOOP_MODEL", NULL, "claude-sonnet-4-5");
    base_url = base_url ? base_url
                        : env_or("AGENTLOOP_BASE_URL", "ANTHROPIC_BASE_URL",
                                 "https://api.anthropic.com");
    api_key = api_key ? api_key : env_or("ANTHROPIC_API_KEY", NULL, NULL);
  } else {
    model = model ? model : env_or("AGENTLOOP_MODEL", NULL, "gpt-4o-mini");
    base_url = base_url ? base_url
                        : env_or("AGENTLOOP_BASE_URL", "OPENAI_BASE_URL",
                                 "https://api.openai.com/v1");
    api_key = api_key ? api_key : env_or("OPENAI_API_KEY", NULL, NULL);
  }
  if (api_key == NULL) {
    fprintf(stderr, "agentloop run: no API key: set %s or pass --api-key\n",
            prov->kind == AL_PROVIDER_ANTHROPIC ? "ANTHROPIC_API_KEY"
                                                : "OPENAI_API_KEY");
    return EXIT_USAGE;
  }

  piped = read_piped_stdin();
  if (piped != NULL && piped[0] != '\0') {
    size_t n = strlen(prompt) + strlen(piped) + 3;
    content = malloc(n);
    snprintf(content, n, "%s\n\n%s", prompt, piped);
  } else {
    content = strdup(prompt);
  }
  al_free(piped);
  json_object_seed(0); /* not mid-loop: jansson reads /dev/urandom once */
  history = json_pack("[{s:s, s:s}]", "role", "user", "content", content);
  free(content);

  al_provider_options_init(&po);
  po.model = model;
  po.max_tokens = max_tokens;
  po.system = system;
  po.api_key = api_key;
  /* Base URLs of OpenAI-compatible servers conventionally end in /v1. */
  {
    size_t bl = strlen(base_url);
    while (bl > 0 && base_url[bl - 1] == '/') {
      bl--;
    }
    if (bl >= 3 && memcmp(base_url + bl - 3, "/v1", 3) == 0) {
      po.path_prefix = "";
    }
    err = al_provider_build_request(prov, history, &po, &preq);
    json_decref(history);
    if (err != 0) {
      fprintf(stderr, "agentloop run: building the request: %s\n",
              al_strerror(err));
      return EXIT_FAIL;
    }
    snprintf(url, sizeof(url), "%.*s%s", (int)bl, base_url, preq.path);
  }

  r = calloc(1, sizeof(*r));
  r->ndjson = strcmp(format, "ndjson") == 0;
  r->color = isatty(STDERR_FILENO) && getenv("NO_COLOR") == NULL;
  uv_loop_init(&r->loop);
  uv_signal_init(&r->loop, &r->sigint);
  uv_signal_start(&r->sigint, on_sigint, SIGINT);

  al_pstream_options_init(&so);
  so.on_event = on_pevent;
  so.data = r;
  al_pstream_init(&r->stream, prov, &so);
  r->stream_ready = true;

  err = al_http_client_new(&r->loop, NULL, &r->client);
  if (err == 0) {
    hdrs = calloc(preq.nheaders ? preq.nheaders : 1, sizeof(*hdrs));
    for (i = 0; i < preq.nheaders; i++) {
      hdrs[i].name = preq.headers[i].name;
      hdrs[i].name_len = strlen(preq.headers[i].name);
      hdrs[i].value = preq.headers[i].value;
      hdrs[i].value_len = strlen(preq.headers[i].value);
    }
    al_http_request_options_init(&ro);
    ro.method = preq.method;
    ro.url = url;
    ro.headers = hdrs;
    ro.n_headers = preq.nheaders;
    ro.body = preq.body;
    ro.body_len = preq.body_len;
    ro.idle_timeout_ms = timeout_ms;
    ro.on_response = on_response;
    ro.on_data = on_data;
    ro.on_complete = on_complete;
    ro.data = r;
    err = al_http_request_start(r->client, &ro, &r->req);
  }
  if (err != 0) {
    set_reason(r, EXIT_FAIL, "starting the request to %s: %s", url,
               al_strerror(err));
    uv_close((uv_handle_t *)&r->sigint, NULL);
  }
  uv_run(&r->loop, UV_RUN_DEFAULT);
  if (r->client != NULL) {
    al_http_client_close(r->client, NULL);
    uv_run(&r->loop, UV_RUN_DEFAULT);
  }
  end_thinking(r);
  if (!r->ndjson && r->printed_text && !r->text_ends_nl) {
    fputc('\n', stdout);
  }
  fflush(stdout);
  if (r->exit_code != EXIT_OK) {
    fprintf(stderr, "agentloop run: %s\n", r->reason);
  }
  code = r->exit_code;
  al_pstream_free(&r->stream);
  uv_loop_close(&r->loop);
  free(hdrs);
  al_provider_request_free(&preq);
  free(r);
  return code;
}
