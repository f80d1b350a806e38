/* Shared pieces of the server-driven scenarios (bench_stream.c): the
 * agentloop-mockllm child process, CPU and memory readings, exact
 * percentiles, and the raw-socket floor reader.
 *
 * The server is always a separate process: the built agentloop-mockllm
 * next to this binary, started with --port-file and a scenario written to
 * a temp file, optionally pinned to a core. Its CPU time is read from
 * /proc/PID/schedstat so a run shows when the server, not the
 * client, is the bottleneck. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

extern char **environ;

int bu_exe_dir(char *out, size_t len) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  char *slash;

  if (n <= 0) {
    return -1;
  }
  self[n] = '\0';
  slash = strrchr(self, '/');
  if (slash == NULL) {
    return -1;
  }
  *slash = '\0';
  if ((size_t)snprintf(out, len, "%s", self) >= len) {
    return -1;
  }
  return 0;
}

int bu_find_certs(const char *given, char *out, size_t len) {
  char dir[PATH_MAX];
  char probe[PATH_MAX + 64];
  const char *cands[3];
  char c1[PATH_MAX + 32];
  int i;

  if (given != NULL) {
    snprintf(out, len, "%s", given);
    return 0;
  }
  c1[0] = '\0';
  if (bu_exe_dir(dir, sizeof(dir)) == 0) {
    snprintf(c1, sizeof(c1), "%s/../tests/certs", dir);
  }
  cands[0] = c1;
  cands[1] = "tests/certs";
  cands[2] = "../tests/certs";
  for (i = 0; i < 3; i++) {
    if (cands[i][0] == '\0') {
      continue;
    }
    snprintf(probe, sizeof(probe), "%s/server.crt", cands[i]);
    if (access(probe, R_OK) == 0) {
      snprintf(out, len, "%s", cands[i]);
      return 0;
    }
  }
  return -1;
}

int bu_pin(pid_t pid, int cpu) {
  cpu_set_t set;

  if (cpu < 0) {
    return 0;
  }
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(pid, sizeof(set), &set);
}

int bu_srv_start(bu_srv_t *s, const char *yaml, int cpu, const char *certs) {
  return bu_srv_start_rec(s, yaml, cpu, certs, NULL);
}

int bu_srv_start_rec(bu_srv_t *s, const char *yaml, int cpu, const char *certs,
                     const char *record) {
  char dir[PATH_MAX];
  char cert[PATH_MAX + 32];
  char key[PATH_MAX + 32];
  char *args[20];
  int na = 0;
  int fd;
  FILE *f;
  posix_spawn_file_actions_t fa;
  struct timespec ts = {0, 5 * 1000 * 1000};
  int i;

  memset(s, 0, sizeof(*s));
  s->pid = -1;
  if (bu_exe_dir(dir, sizeof(dir)) != 0) {
    fprintf(stderr, "bench: cannot resolve /proc/self/exe\n");
    return -1;
  }
  snprintf(s->exe, sizeof(s->exe), "%s/agentloop-mockllm", dir);
  if (access(s->exe, X_OK) != 0) {
    fprintf(stderr, "bench: %s not found (build agentloop-mockllm)\n", s->exe);
    return -1;
  }
  snprintf(s->scn, sizeof(s->scn), "/tmp/agentloop-bench-scn-XXXXXX");
  fd = mkstemp(s->scn);
  if (fd < 0) {
    return -1;
  }
  f = fdopen(fd, "w");
  if (f == NULL || fputs(yaml, f) < 0 || fclose(f) != 0) {
    unlink(s->scn);
    return -1;
  }
  snprintf(s->pf, sizeof(s->pf), "%s.port", s->scn);
  unlink(s->pf);
  args[na++] = s->exe;
  args[na++] = "--listen";
  args[na++] = "127.0.0.1:0";
  args[na++] = "--scenario";
  args[na++] = s->scn;
  args[na++] = "--port-file";
  args[na++] = s->pf;
  args[na++] = "-q";
  if (certs != NULL) {
    snprintf(cert, sizeof(cert), "%s/server.crt", certs);
    snprintf(key, sizeof(key), "%s/server.key", certs);
    args[na++] = "--tls-cert";
    args[na++] = cert;
    args[na++] = "--tls-key";
    args[na++] = key;
    s->tls = true;
  }
  if (record != NULL) {
    args[na++] = "--record";
    args[na++] = (char *)record;
  }
  args[na] = NULL;
  posix_spawn_file_actions_init(&fa);
  /* Its "listening on" line must not mix with our table / JSON. */
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&s->pid, s->exe, &fa, NULL, args, environ) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    s->pid = -1;
    unlink(s->scn);
    return -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  if (cpu >= 0 && bu_pin(s->pid, cpu) != 0) {
    fprintf(stderr, "bench: cannot pin the server to cpu %d: %s\n", cpu,
            strerror(errno));
  }
  s->cpu = cpu;
  for (i = 0; i < 2000; i++) { /* 10 s */
    int st;

    f = fopen(s->pf, "r");
    if (f != NULL) {
      int port = 0;

      if (fscanf(f, "%d", &port) == 1 && port > 0) {
        fclose(f);
        s->port = port;
        return 0;
      }
      fclose(f);
    }
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      fprintf(stderr, "bench: agentloop-mockllm exited before listening\n");
      s->pid = -1;
      unlink(s->scn);
      return -1;
    }
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "bench: agentloop-mockllm did not listen within 10 s\n");
  bu_srv_stop(s);
  return -1;
}

/* /proc/PID/schedstat's first field is the time on CPU in ns (the server
 * is single-threaded); /proc/PID/stat's utime + stime, in clock ticks (10
 * ms), are too coarse for a run of a few tens of ms and only a fallback. */
double bu_srv_cpu_s(const bu_srv_t *s) {
  char path[64];
  char buf[2048];
  FILE *f;
  size_t n;
  char *p;
  unsigned long ut = 0;
  unsigned long st = 0;
  unsigned long long ns = 0;

  if (s->pid <= 0) {
    return 0;
  }
  snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)s->pid);
  f = fopen(path, "r");
  if (f != NULL) {
    int ok = fscanf(f, "%llu", &ns) == 1;

    fclose(f);
    if (ok) {
      return (double)ns / 1e9;
    }
  }
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)s->pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  p = strrchr(buf, ')'); /* comm may hold spaces */
  if (p == NULL ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
             &ut, &st) != 2) {
    return 0;
  }
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

void bu_srv_stop(bu_srv_t *s) {
  int st;

  if (s->pid > 0) {
    kill(s->pid, SIGTERM);
    waitpid(s->pid, &st, 0);
    s->pid = -1;
  }
  if (s->scn[0] != '\0') {
    unlink(s->scn);
    unlink(s->pf);
    s->scn[0] = '\0';
  }
}

double bu_cpu_s(void) {
  struct rusage ru;

  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

long bu_rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0;
  long res = 0;

  if (f == NULL) {
    return 0;
  }
  if (fscanf(f, "%ld %ld", &size, &res) != 2) {
    res = 0;
  }
  fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

long bu_max_rss_kb(void) {
  struct rusage ru;

  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

/* Nearest rank over the sorted raw samples (ns in, us out). */
bu_pct_t bu_percentiles(uint64_t *v, size_t n) {
  static const double q[5] = {0.50, 0.90, 0.99, 0.999, 1.0};
  bu_pct_t p;
  double *out[5];
  int i;

  memset(&p, 0, sizeof(p));
  out[0] = &p.p50;
  out[1] = &p.p90;
  out[2] = &p.p99;
  out[3] = &p.p999;
  out[4] = &p.max;
  p.n = n;
  if (n == 0) {
    return p;
  }
  qsort(v, n, sizeof(*v), cmp_u64);
  for (i = 0; i < 5; i++) {
    size_t rank = (size_t)(q[i] * (double)n + 0.999999);

    if (rank > n) {
      rank = n;
    }
    *out[i] = (double)v[rank > 0 ? rank - 1 : 0] / 1e3;
  }
  return p;
}

void bu_pct_row(const char *label, const bu_pct_t *p) {
  printf("  %-34s %9.1f %9.1f %9.1f %9.1f %9.1f %9zu\n", label, p->p50,
         p->p90, p->p99, p->p999, p->max, p->n);
}

void bu_pct_json(const bu_pct_t *p) {
  printf("{\"n\":%zu,\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,"
         "\"p999_us\":%.2f,\"max_us\":%.2f}",
         p->n, p->p50, p->p90, p->p99, p->p999, p->max);
}

int bu_samples_push(bu_samples_t *s, uint64_t v) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    uint64_t *nv = realloc(s->v, cap * sizeof(*nv));

    if (nv == NULL) {
      return -1;
    }
    s->v = nv;
    s->cap = cap;
  }
  s->v[s->n++] = v;
  return 0;
}

void bu_samples_free(bu_samples_t *s) {
  free(s->v);
  memset(s, 0, sizeof(*s));
}

/* ---- the raw-socket floor reader ------------------------------------------ */

static const char floor_body[] =
    "{\"model\":\"m\",\"max_tokens\":100,\"stream\":true,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

static void floor_closed(uv_handle_t *h) {
  bu_floor_t *f = h->data;

  f->closed = true;
}

static void floor_finish(bu_floor_t *f, int err) {
  if (f->done) {
    return;
  }
  f->done = true;
  f->err = err;
  f->t_end = uv_hrtime();
  f->cpu_end = bu_cpu_s();
  uv_close((uv_handle_t *)&f->tcp, floor_closed);
}

void bu_floor_stop(bu_floor_t *f) { floor_finish(f, 0); }

static void floor_line(bu_floor_t *f, const char *p, size_t n, uint64_t now) {
  if (n > 0 && p[n - 1] == '\r') {
    n--;
  }
  if (n > 4 && memcmp(p, "id: ", 4) == 0) {
    uint64_t v = 0;
    size_t i;

    for (i = 4; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
      v = v * 10 + (uint64_t)(p[i] - '0');
    }
    f->pending = v;
  } else if (n == 26 && memcmp(p, "event: content_block_delta", 26) == 0) {
    f->events++;
    if (f->pending != 0 && f->samples != NULL) {
      bu_samples_push(f->samples, now - f->pending);
    }
    f->pending = 0;
  } else if (n == 19 && memcmp(p, "event: message_stop", 19) == 0) {
    f->pending = 0;
    f->saw_stop = true;
  } else if (n == 0 && f->saw_stop) {
    floor_finish(f, 0); /* the blank line after message_stop's data */
  }
}

static void floor_alloc(uv_handle_t *h, size_t sug, uv_buf_t *b) {
  /* One buffer for every reader: a read is scanned (and its unfinished
   * line copied to carry) before the next one starts. */
  static char rbuf[65536];

  (void)h;
  (void)sug;
  *b = uv_buf_init(rbuf, sizeof(rbuf));
}

static void floor_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  bu_floor_t *f = s->data;
  uint64_t now = uv_hrtime();
  const char *p = b->base;
  const char *end;
  const char *nl;

  if (nread < 0) {
    floor_finish(f, f->saw_stop ? 0 : (int)nread);
    return;
  }
  if (f->done || nread == 0) {
    return;
  }
  f->bytes += (uint64_t)nread;
  end = p + nread;
  while (p < end && !f->done) {
    nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL) {
      size_t n = (size_t)(end - p);

      if (f->carry_len + n > sizeof(f->carry)) {
        n = sizeof(f->carry) - f->carry_len; /* long data: lines, cut */
      }
      memcpy(f->carry + f->carry_len, p, n);
      f->carry_len += n;
      break;
    }
    if (f->carry_len > 0) {
      size_t n = (size_t)(nl - p);

      if (f->carry_len + n > sizeof(f->carry)) {
        n = sizeof(f->carry) - f->carry_len;
      }
      memcpy(f->carry + f->carry_len, p, n);
      floor_line(f, f->carry, f->carry_len + n, now);
      f->carry_len = 0;
    } else {
      floor_line(f, p, (size_t)(nl - p), now);
    }
    p = nl + 1;
  }
}

static void floor_written(uv_write_t *w, int status) {
  bu_floor_t *f = w->data;

  if (status < 0) {
    floor_finish(f, status);
  }
}

static void floor_connected(uv_connect_t *c, int status) {
  bu_floor_t *f = c->data;
  uv_buf_t b;

  if (status < 0) {
    floor_finish(f, status);
    return;
  }
  uv_tcp_nodelay(&f->tcp, 1);
  f->t0 = uv_hrtime();
  f->cpu0 = bu_cpu_s();
  b = uv_buf_init(f->req, (unsigned int)f->reqlen);
  f->wreq.data = f;
  if (uv_write(&f->wreq, (uv_stream_t *)&f->tcp, &b, 1, floor_written) != 0 ||
      uv_read_start((uv_stream_t *)&f->tcp, floor_alloc, floor_read) != 0) {
    floor_finish(f, -1);
  }
}

int bu_floor_start(bu_floor_t *f, uv_loop_t *loop, int port,
                   bu_samples_t *samples) {
  struct sockaddr_in sa;

  memset(f, 0, sizeof(*f));
  f->samples = samples;
  f->reqlen = (size_t)snprintf(
      f->req, sizeof(f->req),
      "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n"
      "content-type: application/json\r\nx-api-key: k\r\n"
      "anthropic-version: 2023-06-01\r\nconnection: close\r\n"
      "content-length: %zu\r\n\r\n%s",
      port, sizeof(floor_body) - 1, floor_body);
  uv_ip4_addr("127.0.0.1", port, &sa);
  uv_tcp_init(loop, &f->tcp);
  f->tcp.data = f;
  f->creq.data = f;
  if (uv_tcp_connect(&f->creq, &f->tcp, (const struct sockaddr *)&sa,
                     floor_connected) != 0) {
    f->done = true;
    f->err = -1;
    uv_close((uv_handle_t *)&f->tcp, floor_closed);
    return -1;
  }
  return 0;
}
