/* agentloop-bench daemon: what agentloopd costs.
 *
 *  - RSS of a real agentloopd process (spawned from the directory of this
 *    binary, --foreground, private socket and state dir): idle with one
 *    client, then with N idle sessions created.
 *  - Latency of a text_delta from the daemon's reactor to a socket
 *    client: the event's ts_ns is stamped when the agent publishes it on
 *    the daemon's loop (CLOCK_MONOTONIC, the uv_hrtime clock), and the
 *    client takes uv_hrtime() once the notification line is parsed. Both
 *    processes read one clock, so the difference is encoding + socket
 *    write + kernel + client read + parse.
 *  - Its references in the same run: the same scenario played to an
 *    in-process agent on the bench's loop, measured the same way
 *    (publish -> subscriber callback), which is what an embedder gets;
 *    and the floor of any socket hop: a forked child writes lines of the
 *    same shape and size, stamped just before write(2), paced alike, and
 *    this process reads and parses them with the same code. Daemon minus
 *    floor is what the daemon itself adds (encoding, its loop, queueing).
 * The mock server (in-process) paces deltas (--delta-ms) so the figures
 * are latency, not queueing behind a burst. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "agentloop/agentloop.h"
#include "bench.h"
#include "common/common.h"
#include "mockllm/mockllm.h"
#include "rpc/rpc.h"

typedef struct {
  uv_loop_t loop;
  al_mockllm_t *mock;
  char url[64];
  char root[64];
  char sock[160];
  char state[160];
  uv_process_t proc;
  bool child_exited;
  /* client */
  uv_pipe_t pipe;
  uv_connect_t creq;
  bool connected;
  int cstatus;
  bool eof;
  al_rpc_framer_t framer;
  json_t *last_resp;
  int64_t want_id;
  uint64_t *lat;
  size_t nlat;
  size_t cap;
  bool final_seen;
  /* in-process reference */
  uint64_t *ref;
  size_t nref;
  size_t refcap;
  /* socket floor */
  bool floor_mode;
  uint64_t *flo;
  size_t nflo;
  size_t flocap;
  size_t floor_want;
  bool ref_done;
} bd_t;

static uint64_t now_ns(void) { return uv_hrtime(); }

static void push(uint64_t **v, size_t *n, size_t *cap, uint64_t x) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 4096;
    *v = realloc(*v, *cap * sizeof(**v));
  }
  (*v)[(*n)++] = x;
}

static bool on_line(al_rpc_framer_t *f, const char *line, size_t len,
                    bool too_long, void *data) {
  bd_t *b = data;
  uint64_t t = now_ns();
  json_t *j = too_long ? NULL : json_loadb(line, len, 0, NULL);
  const char *m = json_string_value(json_object_get(j, "method"));

  if (m != NULL && strcmp(m, "event") == 0) {
    json_t *p = json_object_get(j, "params");
    const char *type = json_string_value(json_object_get(p, "type"));

    if (type != NULL && strcmp(type, "text_delta") == 0) {
      uint64_t ts = (uint64_t)json_integer_value(json_object_get(p, "ts_ns"));

      if (b->floor_mode) {
        push(&b->flo, &b->nflo, &b->flocap, t > ts ? t - ts : 0);
      } else {
        push(&b->lat, &b->nlat, &b->cap, t > ts ? t - ts : 0);
      }
    } else if (type != NULL &&
               (strcmp(type, "final") == 0 || strcmp(type, "error") == 0)) {
      b->final_seen = true;
    }
    json_decref(j);
  } else if (j != NULL && json_integer_value(json_object_get(j, "id")) ==
                              b->want_id) {
    json_decref(b->last_resp);
    b->last_resp = j;
  } else {
    json_decref(j);
  }
  return true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  buf->base = malloc(hint);
  buf->len = hint;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  bd_t *b = s->data;

  if (n > 0) {
    al_rpc_framer_feed(&b->framer, buf->base, (size_t)n, on_line, b);
  } else if (n < 0) {
    b->eof = true;
    uv_read_stop(s);
  }
  free(buf->base);
}

static void on_connect(uv_connect_t *r, int status) {
  bd_t *b = r->data;

  b->connected = true;
  b->cstatus = status;
  if (status == 0) {
    uv_read_start((uv_stream_t *)&b->pipe, on_alloc, on_read);
  }
}

static void on_written(uv_write_t *w, int status) {
  free(w->data);
  free(w);
}

/* Sends a request and runs the loop until its response. */
static json_t *call(bd_t *b, int id, const char *method, json_t *params) {
  json_t *msg = al_rpc_request_new(json_integer(id), method, params);
  size_t len;
  char *s = al_rpc_dump_line_alloc(msg, &len);
  uv_write_t *w = malloc(sizeof(*w));
  uv_buf_t buf = uv_buf_init(malloc(len), (unsigned)len);

  memcpy(buf.base, s, len);
  al_free(s);
  json_decref(msg);
  w->data = buf.base;
  b->want_id = id;
  json_decref(b->last_resp);
  b->last_resp = NULL;
  uv_write(w, (uv_stream_t *)&b->pipe, &buf, 1, on_written);
  while (b->last_resp == NULL && !b->eof) {
    uv_run(&b->loop, UV_RUN_ONCE);
  }
  return b->last_resp;
}

static long rss_kb(int pid) {
  char path[64];
  char line[256];
  long kb = -1;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/%d/status", pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return -1;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) {
      kb = strtol(line + 6, NULL, 10);
    }
  }
  fclose(f);
  return kb;
}

static void on_child_exit(uv_process_t *p, int64_t st, int sig) {
  bd_t *b = p->data;

  b->child_exited = true;
  uv_close((uv_handle_t *)p, NULL);
}

static void on_tick(uv_timer_t *t) { (void)t; }

static void ref_event(const al_event_t *ev, void *data) {
  bd_t *b = data;
  uint64_t t = now_ns();

  if (ev->type == AL_EVENT_TEXT_DELTA) {
    push(&b->ref, &b->nref, &b->refcap, t > ev->ts_ns ? t - ev->ts_ns : 0);
  } else if (ev->type == AL_EVENT_FINAL || ev->type == AL_EVENT_ERROR) {
    b->ref_done = true;
  }
}

/* The floor: a child writes n event-shaped lines (about the daemon's
 * size for this scenario), each stamped right before its write, one per
 * delta_ms; we read them with on_line. */
static void floor_child(int fd, size_t n, unsigned delta_ms) {
  char line[512];
  size_t i;

  for (i = 0; i < n; i++) {
    struct timespec ts = {0, (long)delta_ms * 1000000L};
    int len = snprintf(
        line, sizeof(line),
        "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{"
        "\"type\":\"text_delta\",\"session\":\"s_0123456789abcdef\","
        "\"run\":1,\"turn\":1,\"seq\":%zu,\"ts_ns\":%llu,\"index\":0,"
        "\"text\":\"a delta of forty bytes, give or take.\","
        "\"call_id\":null}}\n",
        i + 4, (unsigned long long)uv_hrtime());

    if (write(fd, line, (size_t)len) != len) {
      break;
    }
    nanosleep(&ts, NULL);
  }
  _exit(0);
}

static void measure_floor(bd_t *b, size_t n, unsigned delta_ms) {
  int sv[2];
  pid_t pid;
  uv_pipe_t p;

  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return;
  }
  pid = fork();
  if (pid == 0) {
    close(sv[0]);
    floor_child(sv[1], n, delta_ms);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    return;
  }
  b->floor_mode = true;
  b->eof = false;
  uv_pipe_init(&b->loop, &p, 0);
  uv_pipe_open(&p, sv[0]);
  p.data = b;
  uv_read_start((uv_stream_t *)&p, on_alloc, on_read);
  while (!b->eof) {
    uv_run(&b->loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&p, NULL);
  uv_run(&b->loop, UV_RUN_NOWAIT);
  waitpid(pid, NULL, 0);
  b->floor_mode = false;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, size_t n, double q) {
  size_t rank;

  if (n == 0) {
    return 0;
  }
  rank = (size_t)(q * (double)n + 0.999999);
  return (double)v[rank > 0 ? rank - 1 : 0] / 1e3;
}

int al_bench_daemon(int argc, char **argv) {
  bd_t b;
  size_t deltas = 2000;
  unsigned delta_ms = 1;
  size_t idle_sessions = 100;
  bool as_json = false;
  al_mockllm_options_t mo;
  char err[256];
  char yaml[512];
  char exe[PATH_MAX];
  char dexe[PATH_MAX + 32];
  char *args[10];
  char envs[3][256];
  char *env[4];
  uv_process_options_t po;
  uv_timer_t tick;
  json_t *r;
  char sid[64];
  long rss_idle, rss_many;
  size_t i;
  ssize_t n;

  for (i = 1; i < (size_t)argc; i++) {
    if (strcmp(argv[i], "--deltas") == 0 && i + 1 < (size_t)argc) {
      deltas = (size_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--delta-ms") == 0 && i + 1 < (size_t)argc) {
      delta_ms = (unsigned)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--sessions") == 0 && i + 1 < (size_t)argc) {
      idle_sessions = (size_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else {
      fprintf(stderr, "usage: agentloop-bench daemon [--deltas N] "
                      "[--delta-ms MS] [--sessions N] [--json]\n");
      return 2;
    }
  }
  memset(&b, 0, sizeof(b));
  uv_loop_init(&b.loop);
  snprintf(yaml, sizeof(yaml),
           "delay_ms: %u\n"
           "responses:\n"
           "  - reply:\n"
           "      content:\n"
           "        - repeat_text: {count: %zu, text: \"a delta of forty "
           "bytes, give or take.\"}\n",
           delta_ms, deltas);
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.err = err;
  mo.err_len = sizeof(err);
  if (al_mockllm_new(&b.loop, &mo, &b.mock) != 0) {
    fprintf(stderr, "mockllm: %s\n", err);
    return 1;
  }
  snprintf(b.url, sizeof(b.url), "http://127.0.0.1:%d",
           al_mockllm_port(b.mock));
  snprintf(b.root, sizeof(b.root), "/tmp/al-bench-d-XXXXXX");
  if (mkdtemp(b.root) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(b.sock, sizeof(b.sock), "%s/d.sock", b.root);
  snprintf(b.state, sizeof(b.state), "%s/state", b.root);
  n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    return 1;
  }
  exe[n] = '\0';
  *strrchr(exe, '/') = '\0';
  snprintf(dexe, sizeof(dexe), "%s/agentloopd", exe);
  args[0] = dexe;
  args[1] = "--foreground";
  args[2] = "--socket";
  args[3] = b.sock;
  args[4] = "--state-dir";
  args[5] = b.state;
  args[6] = NULL;
  snprintf(envs[0], sizeof(envs[0]), "AGENTLOOP_BASE_URL=%s", b.url);
  snprintf(envs[1], sizeof(envs[1]), "ANTHROPIC_API_KEY=bench");
  snprintf(envs[2], sizeof(envs[2]), "PATH=/usr/bin:/bin");
  env[0] = envs[0];
  env[1] = envs[1];
  env[2] = envs[2];
  env[3] = NULL;
  memset(&po, 0, sizeof(po));
  po.file = dexe;
  po.args = args;
  po.env = env;
  po.exit_cb = on_child_exit;
  b.proc.data = &b;
  if (uv_spawn(&b.loop, &b.proc, &po) != 0) {
    fprintf(stderr, "cannot start %s\n", dexe);
    return 1;
  }
  uv_timer_init(&b.loop, &tick);
  uv_timer_start(&tick, on_tick, 2, 2);
  for (;;) {
    struct stat st;

    if (stat(b.sock, &st) == 0 || b.child_exited) {
      break;
    }
    uv_run(&b.loop, UV_RUN_ONCE);
  }
  uv_pipe_init(&b.loop, &b.pipe, 0);
  b.pipe.data = &b;
  b.creq.data = &b;
  al_rpc_framer_init(&b.framer, 64 * 1024 * 1024);
  uv_pipe_connect(&b.creq, &b.pipe, b.sock, on_connect);
  while (!b.connected) {
    uv_run(&b.loop, UV_RUN_ONCE);
  }
  if (b.cstatus != 0) {
    fprintf(stderr, "connect: %s\n", uv_strerror(b.cstatus));
    return 1;
  }
  call(&b, 1, "initialize", NULL);
  rss_idle = rss_kb(b.proc.pid);
  /* Latency: one session, paced deltas. */
  r = call(&b, 2, "session/create", json_pack("{s:s}", "cwd", b.root));
  snprintf(sid, sizeof(sid), "%s",
           json_string_value(json_object_get(json_object_get(r, "result"),
                                             "session")));
  call(&b, 3, "session/subscribe", json_pack("{s:s}", "session", sid));
  call(&b, 4, "turn/send", json_pack("{s:s, s:s}", "session", sid, "input",
                                     "stream"));
  while (!b.final_seen && !b.eof) {
    uv_run(&b.loop, UV_RUN_ONCE);
  }
  /* Reference: the same stream to an in-process agent on this loop. */
  {
    al_agent_options_t ao;
    al_agent_t *a = NULL;

    al_mockllm_rewind(b.mock);
    al_agent_options_init(&ao);
    ao.base_url = b.url;
    ao.api_key = "bench";
    if (al_agent_new(&b.loop, &ao, &a) == 0) {
      al_agent_subscribe(a, ref_event, &b, NULL);
      al_agent_run(a, "stream");
      while (!b.ref_done) {
        uv_run(&b.loop, UV_RUN_ONCE);
      }
      al_agent_close(a, NULL);
    }
  }
  /* Memory: N more idle sessions. */
  for (i = 0; i < idle_sessions; i++) {
    call(&b, (int)(10 + i), "session/create",
         json_pack("{s:s}", "cwd", b.root));
  }
  rss_many = rss_kb(b.proc.pid);
  call(&b, 9, "shutdown", NULL);
  while (!b.child_exited) {
    uv_run(&b.loop, UV_RUN_ONCE);
  }
  measure_floor(&b, deltas, delta_ms);
  uv_close((uv_handle_t *)&b.pipe, NULL);
  uv_close((uv_handle_t *)&tick, NULL);
  al_mockllm_close(b.mock, NULL);
  uv_run(&b.loop, UV_RUN_DEFAULT);
  uv_loop_close(&b.loop);
  json_decref(b.last_resp);
  al_rpc_framer_free(&b.framer);
  qsort(b.lat, b.nlat, sizeof(*b.lat), cmp_u64);
  qsort(b.ref, b.nref, sizeof(*b.ref), cmp_u64);
  qsort(b.flo, b.nflo, sizeof(*b.flo), cmp_u64);
  if (as_json) {
    printf("{\"deltas\":%zu,\"delta_ms\":%u,\"rss_idle_kb\":%ld,"
           "\"rss_sessions_kb\":%ld,\"sessions\":%zu,"
           "\"socket_us\":{\"n\":%zu,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},"
           "\"inproc_us\":{\"n\":%zu,\"p50\":%.2f,\"p99\":%.2f,\"max\":%.2f},"
           "\"socket_floor_us\":{\"n\":%zu,\"p50\":%.1f,\"p99\":%.1f,"
           "\"max\":%.1f}}\n",
           deltas, delta_ms, rss_idle, rss_many, idle_sessions, b.nlat,
           pct(b.lat, b.nlat, 0.5), pct(b.lat, b.nlat, 0.99),
           pct(b.lat, b.nlat, 1.0), b.nref, pct(b.ref, b.nref, 0.5),
           pct(b.ref, b.nref, 0.99), pct(b.ref, b.nref, 1.0), b.nflo,
           pct(b.flo, b.nflo, 0.5), pct(b.flo, b.nflo, 0.99),
           pct(b.flo, b.nflo, 1.0));
  } else {
    printf("agentloopd RSS: idle (1 client) %ld KiB; with %zu idle sessions "
           "%ld KiB (%.1f KiB/session)\n",
           rss_idle, idle_sessions, rss_many,
           idle_sessions ? (double)(rss_many - rss_idle) /
                               (double)(idle_sessions + 1)
                         : 0.0);
    printf("text_delta publish -> consumer (us), %zu deltas paced %u ms:\n",
           deltas, delta_ms);
    printf("  %-34s n=%-6zu p50 %8.1f  p99 %8.1f  max %8.1f\n",
           "daemon reactor -> socket client", b.nlat,
           pct(b.lat, b.nlat, 0.5), pct(b.lat, b.nlat, 0.99),
           pct(b.lat, b.nlat, 1.0));
    printf("  %-34s n=%-6zu p50 %8.2f  p99 %8.2f  max %8.2f\n",
           "reference: in-process subscriber", b.nref,
           pct(b.ref, b.nref, 0.5), pct(b.ref, b.nref, 0.99),
           pct(b.ref, b.nref, 1.0));
    printf("  %-34s n=%-6zu p50 %8.1f  p99 %8.1f  max %8.1f\n",
           "reference: bare socket hop (floor)", b.nflo,
           pct(b.flo, b.nflo, 0.5), pct(b.flo, b.nflo, 0.99),
           pct(b.flo, b.nflo, 1.0));
  }
  free(b.lat);
  free(b.ref);
  free(b.flo);
  {
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b.root);
    if (system(cmd) != 0) {
      fprintf(stderr, "could not remove %s\n", b.root);
    }
  }
  return b.nlat > 0 ? 0 : 1;
}
