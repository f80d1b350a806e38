/* agentloop-embed: embedding an agent in your own libuv program.
 *
 * What it shows, in the order a real embedder needs it:
 *   1. the program owns the uv loop; the agent is created on it;
 *   2. a custom in-process tool, `word_count`, that does its work off the
 *      loop thread (uv_queue_work), reports progress, and completes later;
 *   3. a subscriber that prints the streamed text and one line per tool
 *      event;
 *   4. one prompt; on `final` (or `error`, `interrupted`) the agent is
 *      closed asynchronously and the loop runs dry, so main() returns.
 *
 * It starts no model server itself: point it at one with --base-url (for
 * example a local agentloop-mockllm) or leave it out to use the provider's
 * public endpoint with an API key.
 *
 *   agentloop-embed --base-url http://127.0.0.1:8080 \
 *       "How many words are in 'the quick brown fox'?"
 *
 * Only the installed public API (<agentloop/agentloop.h>), libuv and
 * jansson (for the tool's JSON input) are used. Build it with CMake
 * (find_package(agentloop)) or with pkg-config;
 * see README.md next to this file. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <agentloop/agentloop.h>
#include <jansson.h>
#include <uv.h>

typedef struct {
  uv_loop_t *loop;
  uv_signal_t sigint;  /* Ctrl-C cancels the run */
  al_agent_t *agent;
  int exit_code;
  bool at_line_start; /* for tidy tool lines between text deltas */
} app_t;

/* ---- the custom tool: word_count -------------------------------------------
 * agentloop calls word_count_run on the loop thread when the model's
 * tool_use block is complete, often while the reply is still streaming.
 * It must not block: the counting is handed to libuv's threadpool and the
 * call finishes in after_work, back on the loop thread, with exactly one
 * al_tool_ctx_complete(). */

typedef struct {
  uv_work_t req;       /* req.data is unused: container is the job itself */
  al_tool_ctx_t *ctx;
  char *text;
  size_t words;
} count_job_t;

static void count_work(uv_work_t *req) {
  /* Threadpool thread: touch only the job, never the agent or the ctx. */
  count_job_t *job = (count_job_t *)req;
  const char *p = job->text;
  bool in_word = false;

  for (; *p != '\0'; p++) {
    bool space = *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r';

    if (!space && !in_word) {
      job->words++;
    }
    in_word = !space;
  }
}

static void count_after(uv_work_t *req, int status) {
  /* Loop thread again. status is UV_ECANCELED when word_count_cancel
   * pulled the job before a thread picked it up. */
  count_job_t *job = (count_job_t *)req;
  char result[64];

  if (status == UV_ECANCELED || al_tool_ctx_cancelled(job->ctx)) {
    /* Still complete the call exactly once; its content is dropped. */
    al_tool_ctx_complete(job->ctx, true, "cancelled", 9);
  } else {
    int n = snprintf(result, sizeof(result), "%zu words", job->words);

    al_tool_ctx_complete(job->ctx, false, result, (size_t)n);
  }
  /* ctx is freed inside al_tool_ctx_complete; the job is ours. */
  free(job->text);
  free(job);
}

static void word_count_run(al_tool_ctx_t *ctx, void *data) {
  app_t *app = data;
  /* The input is compact JSON object text, e.g. {"text":"the quick fox"},
   * already checked against the tool's input_schema by agentloop. Any JSON
   * library will do; jansson is what agentloop itself links. */
  json_t *input = json_loads(al_tool_ctx_input(ctx), 0, NULL);
  const char *text = json_string_value(json_object_get(input, "text"));
  count_job_t *job;
  char note[96];
  int n;

  if (text == NULL) {
    json_decref(input);
    al_tool_ctx_complete(ctx, true, "input needs a string `text`", 27);
    return;
  }
  job = calloc(1, sizeof(*job));
  if (job == NULL || (job->text = strdup(text)) == NULL) {
    free(job);
    json_decref(input);
    al_tool_ctx_complete(ctx, true, "out of memory", 13);
    return;
  }
  json_decref(input);
  job->ctx = ctx;
  al_tool_ctx_set_data(ctx, job); /* word_count_cancel finds it there */

  /* A tool_progress event: subscribers see it before the result. */
  n = snprintf(note, sizeof(note), "counting words in %zu bytes",
               strlen(job->text));
  al_tool_ctx_progress(ctx, note, (size_t)n);

  if (uv_queue_work(app->loop, &job->req, count_work, count_after) != 0) {
    free(job->text);
    free(job);
    al_tool_ctx_complete(ctx, true, "could not queue the work", 24);
  }
}

static void word_count_cancel(al_tool_ctx_t *ctx, void *data) {
  count_job_t *job = al_tool_ctx_get_data(ctx);

  /* Succeeds only while the job still waits for a thread; either way
   * count_after runs and completes the call. */
  if (job != NULL) {
    uv_cancel((uv_req_t *)&job->req);
  }
}

/* ---- events -------------------------------------------------------------- */

static void print_slice(FILE *f, al_slice_t s) {
  if (s.ptr != NULL) {
    fwrite(s.ptr, 1, s.len, f);
  }
}

/* Tool lines start on a line of their own, even mid-text. */
static void tool_line_start(app_t *app) {
  if (!app->at_line_start) {
    fputc('\n', stdout);
  }
  fputs("[tool] ", stdout);
}

static void on_agent_closed(al_agent_t *agent) {
  app_t *app = al_agent_get_data(agent);

  app->agent = NULL;
  /* The last handle of ours: after this the loop has nothing left. */
  uv_close((uv_handle_t *)&app->sigint, NULL);
}

static void on_event(const al_event_t *ev, void *data) {
  app_t *app = data;

  switch (ev->type) {
  case AL_EVENT_TEXT_DELTA:
    /* Slices are borrowed: print (or copy) them now. */
    print_slice(stdout, ev->u.delta.text);
    if (ev->u.delta.text.len > 0) {
      app->at_line_start =
          ev->u.delta.text.ptr[ev->u.delta.text.len - 1] == '\n';
    }
    break;
  case AL_EVENT_TOOL_USE_STARTED:
    tool_line_start(app);
    print_slice(stdout, ev->u.tool.name);
    fputc(' ', stdout);
    print_slice(stdout, ev->u.tool.input);
    fputc('\n', stdout);
    app->at_line_start = true;
    break;
  case AL_EVENT_TOOL_PROGRESS:
    tool_line_start(app);
    print_slice(stdout, ev->u.tool.name);
    fputs(": ", stdout);
    print_slice(stdout, ev->u.tool.content);
    fputc('\n', stdout);
    app->at_line_start = true;
    break;
  case AL_EVENT_TOOL_USE_COMPLETED:
    tool_line_start(app);
    print_slice(stdout, ev->u.tool.name);
    fputs(ev->u.tool.is_error ? " failed: " : " -> ", stdout);
    print_slice(stdout, ev->u.tool.content);
    printf(" (%llu ms)\n", (unsigned long long)ev->u.tool.duration_ms);
    app->at_line_start = true;
    break;
  case AL_EVENT_RETRY:
    fprintf(stderr, "[retry %u/%u in %llu ms] ", ev->u.retry.attempt,
            ev->u.retry.max, (unsigned long long)ev->u.retry.delay_ms);
    print_slice(stderr, ev->u.retry.message);
    fputc('\n', stderr);
    break;
  case AL_EVENT_FINAL:
    if (!app->at_line_start) {
      fputc('\n', stdout);
    }
    app->exit_code = 0;
    /* Closing from inside a subscriber is allowed; the agent is freed on
     * a later loop iteration, after on_agent_closed returns. */
    al_agent_close(app->agent, on_agent_closed);
    break;
  case AL_EVENT_ERROR:
    fprintf(stderr, "%serror: %s: ", app->at_line_start ? "" : "\n",
            al_strerror(ev->u.error.code));
    print_slice(stderr, ev->u.error.message);
    fputc('\n', stderr);
    app->exit_code = 1;
    al_agent_close(app->agent, on_agent_closed);
    break;
  case AL_EVENT_INTERRUPTED:
    fputs(app->at_line_start ? "interrupted\n" : "\ninterrupted\n", stderr);
    app->exit_code = 130;
    al_agent_close(app->agent, on_agent_closed);
    break;
  default:
    break;
  }
  fflush(stdout);
}

static void on_sigint(uv_signal_t *h, int signum) {
  app_t *app = h->data;

  /* Posts `interrupted` synchronously; our subscriber then closes. */
  if (app->agent != NULL && al_agent_running(app->agent)) {
    al_agent_cancel(app->agent);
  }
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fputs("usage: agentloop-embed [--base-url URL] [--api-key KEY] "
        "[--model NAME]\n"
        "                       [--provider anthropic|openai] [PROMPT]\n"
        "  --base-url  model endpoint (default: $AGENTLOOP_BASE_URL, else the\n"
        "              provider's public endpoint)\n"
        "  --api-key   default: $ANTHROPIC_API_KEY (or $OPENAI_API_KEY)\n",
        f);
}

int main(int argc, char **argv) {
  static const char default_prompt[] =
      "How many words are in \"the quick brown fox jumps over the lazy "
      "dog\"? Use the word_count tool.";
  const char *prompt = default_prompt;
  al_agent_options_t o;
  al_tool_def_t tool;
  uv_loop_t loop;
  app_t app;
  int rc;
  int i;

  al_agent_options_init(&o); /* every field gets its default */
  o.base_url = getenv("AGENTLOOP_BASE_URL");
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--base-url") == 0 && i + 1 < argc) {
      o.base_url = argv[++i];
    } else if (strcmp(argv[i], "--api-key") == 0 && i + 1 < argc) {
      o.api_key = argv[++i];
    } else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
      o.model = argv[++i];
    } else if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc) {
      o.provider = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 ||
               strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] != '-' && prompt == default_prompt) {
      prompt = argv[i];
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (o.api_key == NULL) {
    o.api_key = getenv(o.provider != NULL && strcmp(o.provider, "openai") == 0
                           ? "OPENAI_API_KEY"
                           : "ANTHROPIC_API_KEY");
  }
  if (o.api_key == NULL) {
    /* A local mock server does not check the value, only that it is sent. */
    o.api_key = "embed-example";
  }
  o.system = "You are a concise assistant. Use tools when they help.";
  o.max_turns = 4;

  /* Like any libuv client: a peer closing a socket must not kill us. */
  signal(SIGPIPE, SIG_IGN);

  /* 1. The loop is ours. */
  if (uv_loop_init(&loop) != 0) {
    return 1;
  }
  memset(&app, 0, sizeof(app));
  app.loop = &loop;
  app.exit_code = 1; /* until `final` says otherwise */
  app.at_line_start = true;
  o.data = &app;     /* al_agent_get_data() returns it in callbacks */

  /* 2. The agent, on our loop. Options are copied. */
  rc = al_agent_new(&loop, &o, &app.agent);
  if (rc != 0) {
    fprintf(stderr, "al_agent_new: %s\n", al_strerror(rc));
    uv_loop_close(&loop);
    return 1;
  }

  /* 3. The custom tool. The definition is copied; data comes back in run
   * and cancel. READ tools never need a permission. */
  memset(&tool, 0, sizeof(tool));
  tool.name = "word_count";
  tool.description = "Counts the words (whitespace-separated) in a text.";
  tool.input_schema =
      "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
      "\"description\":\"the text to count\"}},\"required\":[\"text\"]}";
  tool.category = AL_TOOL_READ;
  tool.concurrency_safe = true; /* may run beside other safe calls */
  tool.timeout_ms = 10000;
  tool.run = word_count_run;
  tool.cancel = word_count_cancel;
  tool.data = &app;
  rc = al_agent_add_tool(app.agent, &tool);
  if (rc == 0) {
    rc = al_agent_subscribe(app.agent, on_event, &app, NULL);
  }
  uv_signal_init(&loop, &app.sigint);
  app.sigint.data = &app;
  uv_signal_start(&app.sigint, on_sigint, SIGINT);

  /* 4. One prompt. run_started is delivered before this returns; the rest
   * arrives as the loop runs. */
  if (rc == 0) {
    rc = al_agent_run(app.agent, prompt);
  }
  if (rc != 0) {
    fprintf(stderr, "agentloop: %s\n", al_strerror(rc));
    al_agent_close(app.agent, on_agent_closed);
  }

  /* Runs until the agent is closed and the signal handle with it. */
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0) {
    fprintf(stderr, "handles left open on the loop\n");
    return 1;
  }
  return rc != 0 ? 1 : app.exit_code;
}
