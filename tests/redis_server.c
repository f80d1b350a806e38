/* A redis-server per test (tests/redis_server.h). */
#include "redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "test.h"

#ifndef AL_REDIS_SERVER
#define AL_REDIS_SERVER "redis-server"
#endif

static bool redis_server_exists(void) {
  const char *path = getenv("PATH");
  char buf[4096];
  char *save = NULL;
  char *dir;

  if (path == NULL) {
    return false;
  }
  snprintf(buf, sizeof(buf), "%s", path);
  for (dir = strtok_r(buf, ":", &save); dir != NULL;
       dir = strtok_r(NULL, ":", &save)) {
    char full[4200];

    snprintf(full, sizeof(full), "%s/%s", dir, AL_REDIS_SERVER);
    if (access(full, X_OK) == 0) {
      return true;
    }
  }
  return false;
}

static void spawn_server(al_test_redis_t *s) {
  char logfile[300];
  pid_t parent = getpid();
  pid_t pid;

  char port[16], delay[16];
  const char *argv[32];
  int n = 0;

  snprintf(logfile, sizeof(logfile), "%s/redis.log", s->dir);
  snprintf(port, sizeof(port), "%d", s->port);
  snprintf(delay, sizeof(delay), "%d", s->load_delay_us);
  argv[n++] = AL_REDIS_SERVER;
  argv[n++] = "--port";
  argv[n++] = port;
  argv[n++] = "--bind";
  argv[n++] = "127.0.0.1";
  argv[n++] = "--unixsocket";
  argv[n++] = s->sock;
  argv[n++] = "--unixsocketperm";
  argv[n++] = "700";
  argv[n++] = "--dir";
  argv[n++] = s->dir;
  argv[n++] = "--save";
  argv[n++] = "";
  argv[n++] = "--appendonly";
  argv[n++] = s->aof ? "yes" : "no";
  argv[n++] = "--appendfsync";
  argv[n++] = "always";
  argv[n++] = "--daemonize";
  argv[n++] = "no";
  argv[n++] = "--logfile";
  argv[n++] = logfile;
  if (s->load_delay_us > 0) {
    argv[n++] = "--key-load-delay";
    argv[n++] = delay;
    argv[n++] = "--loading-process-events-interval-bytes";
    argv[n++] = "1024";
  }
  argv[n] = NULL;
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    /* Dies with the test, whatever way the test ends. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(1);
    }
    execvp(AL_REDIS_SERVER, (char *const *)argv);
    _exit(127);
  }
  s->pid = pid;
}

/* ---- one command on a private loop ------------------------------------- */

typedef struct {
  uv_loop_t loop;
  uv_timer_t timer;
  redisAsyncContext *ac;
  al_test_redis_t *s;
  int argc;
  const char **argv;
  char *text; /* the reply, once there */
  bool done;
  bool retry; /* reconnect until it answers (the server is starting) */
  uint64_t deadline;
} oneshot_t;

static void oneshot_connect(oneshot_t *o);

static void oneshot_retry(uv_timer_t *t) {
  oneshot_connect((oneshot_t *)((char *)t - offsetof(oneshot_t, timer)));
}

static char *reply_text(redisReply *r) {
  char *out = NULL;

  if (r == NULL) {
    return NULL;
  }
  switch (r->type) {
    case REDIS_REPLY_NIL:
      out = strdup("(nil)");
      break;
    case REDIS_REPLY_INTEGER:
      ASSERT(asprintf(&out, "%lld", r->integer) >= 0);
      break;
    case REDIS_REPLY_ERROR:
      ASSERT(asprintf(&out, "ERR:%s", r->str) >= 0);
      break;
    case REDIS_REPLY_ARRAY:
      ASSERT(asprintf(&out, "(array %zu)", r->elements) >= 0);
      break;
    default:
      out = strdup(r->str);
      break;
  }
  return out;
}

static void oneshot_reply(redisAsyncContext *ac, void *reply, void *priv) {
  oneshot_t *o = priv;

  if (reply == NULL) {
    return; /* dropped: the disconnect callback retries */
  }
  o->text = reply_text(reply);
  o->done = true;
  redisAsyncDisconnect(ac);
}

static void oneshot_disconnected(const redisAsyncContext *ac, int status) {
  oneshot_t *o = ac->data;

  o->ac = NULL;
  if (!o->done) {
    uv_timer_start(&o->timer, oneshot_retry, 5, 0);
  }
}

static void oneshot_connected(const redisAsyncContext *ac, int status) {
  oneshot_t *o = ac->data;

  if (status != REDIS_OK) {
    o->ac = NULL;
    ASSERT(uv_now(&o->loop) < o->deadline);
    uv_timer_start(&o->timer, oneshot_retry, 5, 0);
  }
}

/* The server has exited (it could not bind its port, say): reaped, and
 * the wait ends with no reply. */
static bool server_gone(oneshot_t *o) {
  int st;

  if (o->s->pid > 0 && waitpid(o->s->pid, &st, WNOHANG) == o->s->pid) {
    o->s->pid = 0;
    o->done = true;
    return true;
  }
  return false;
}

static void oneshot_connect(oneshot_t *o) {
  redisAsyncContext *ac = redisAsyncConnectUnix(o->s->sock);

  ASSERT_NOT_NULL(ac);
  if (ac->err != 0) {
    /* Not listening yet (the socket file is missing). */
    redisAsyncFree(ac);
    if (server_gone(o)) {
      return;
    }
    ASSERT(uv_now(&o->loop) < o->deadline);
    uv_timer_start(&o->timer, oneshot_retry, 5, 0);
    return;
  }
  ASSERT_EQ(redisLibuvAttach(ac, &o->loop), REDIS_OK);
  ac->data = o;
  redisAsyncSetConnectCallback(ac, oneshot_connected);
  redisAsyncSetDisconnectCallback(ac, oneshot_disconnected);
  o->ac = ac;
  ASSERT_EQ(redisAsyncCommandArgv(ac, oneshot_reply, o, o->argc, o->argv, NULL),
            REDIS_OK);
}

static char *oneshot(al_test_redis_t *s, int argc, const char **argv) {
  oneshot_t o;

  memset(&o, 0, sizeof(o));
  ASSERT_EQ(uv_loop_init(&o.loop), 0);
  uv_timer_init(&o.loop, &o.timer);
  o.s = s;
  o.argc = argc;
  o.argv = argv;
  o.deadline = uv_now(&o.loop) + 4000 * (uint64_t)al_test_timeout_multiplier();
  oneshot_connect(&o);
  while (!o.done) {
    ASSERT(uv_run(&o.loop, UV_RUN_ONCE) != 0 || o.done);
  }
  uv_close((uv_handle_t *)&o.timer, NULL);
  ASSERT_LOOP_CLOSES(&o.loop);
  return o.text;
}

char *al_test_redis_cmd(al_test_redis_t *s, int argc, const char **argv) {
  return oneshot(s, argc, argv);
}

/* PONG, once it has loaded its AOF (LOADING errors until then); false
 * when the server exited instead. */
static bool wait_ready(al_test_redis_t *s) {
  const char *ping[] = {"PING"};
  int tries = 0;
  char *pong;

  while ((pong = oneshot(s, 1, ping)) != NULL &&
         strncmp(pong, "ERR:LOADING", 11) == 0) {
    free(pong);
    ASSERT(++tries < 100000);
  }
  if (pong == NULL && s->pid == 0) {
    return false;
  }
  ASSERT_STR_EQ(pong, "PONG");
  free(pong);
  return true;
}

static void start(al_test_redis_t *s, bool aof, bool tcp);

void al_test_redis_start(al_test_redis_t *s, bool aof) {
  start(s, aof, false);
}

void al_test_redis_start_tcp(al_test_redis_t *s) {
  start(s, false, true);
}

static int free_port(void) {
  struct sockaddr_in a;
  socklen_t alen = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int port;

  ASSERT(fd >= 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
  port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void start(al_test_redis_t *s, bool aof, bool tcp) {
  const char *tmp = getenv("TMPDIR");
  int tries;

  if (!redis_server_exists()) {
    if (al_test_ci()) {
      AL_TEST_FAIL("CI=true needs %s (scripts/setup.sh installs it)",
                   AL_REDIS_SERVER);
    }
    fprintf(stderr, "not run: %s is not installed (scripts/setup.sh)\n",
            AL_REDIS_SERVER);
    exit(AL_TEST_SKIP_CODE);
  }
  memset(s, 0, sizeof(*s));
  snprintf(s->dir, sizeof(s->dir), "%s/al-redis-XXXXXX", tmp ? tmp : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(s->dir));
  snprintf(s->sock, sizeof(s->sock), "%s/redis.sock", s->dir);
  s->aof = aof;
  for (tries = 0; tries < 5; tries++) {
    s->port = tcp ? free_port() : 0;
    spawn_server(s);
    if (wait_ready(s)) {
      return;
    }
  }
  AL_TEST_FAIL("redis-server did not start (see %s/redis.log)", s->dir);
}

static void signal_and_reap(al_test_redis_t *s, int sig) {
  int st;

  if (s->pid == 0) {
    return;
  }
  kill(s->pid, sig);
  while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR) {
  }
  s->pid = 0;
}

void al_test_redis_kill(al_test_redis_t *s) {
  signal_and_reap(s, SIGKILL);
  unlink(s->sock);
}

void al_test_redis_stop(al_test_redis_t *s) {
  signal_and_reap(s, SIGTERM);
}

void al_test_redis_restart(al_test_redis_t *s) {
  ASSERT_EQ(s->pid, 0);
  spawn_server(s);
  ASSERT(wait_ready(s));
}

void al_test_redis_restart_loading(al_test_redis_t *s) {
  const char *ping[] = {"PING"};
  char *pong;

  ASSERT_EQ(s->pid, 0);
  spawn_server(s);
  pong = oneshot(s, 1, ping);
  ASSERT_NOT_NULL(pong);
  if (strncmp(pong, "ERR:LOADING", 11) != 0) {
    AL_TEST_FAIL("redis-server answered %s, not LOADING (a load too fast?)",
                 pong);
  }
  free(pong);
}

void al_test_redis_cleanup(al_test_redis_t *s) {
  signal_and_reap(s, SIGKILL);
  if (s->dir[0] != '\0') {
    al_test_rm_tree(s->dir);
  }
}
