/* The daemon's peer-uid check (RELIABILITY G2) from the other side: the
 * daemon runs as a non-root user (uid 65534, set in a forked child when
 * the test runs as root) and root connects. root is refused like any other
 * uid: the check compares the peer with the daemon's own uid, it does not
 * trust root. Where the test cannot switch uid, the same-uid half runs and
 * the test reports itself not run. */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtest.h"
#include "test.h"

extern bool al__rpc_test_open_mode;

static bool refused_one(void *data) {
  dt_t *t = data;
  al_daemon_stats_t st;

  al__daemon_stats(t->d, &st);
  return st.refused_peers >= 1;
}

/* Connects to sock, sends initialize, reads to EOF; the bytes read, or -1
 * when connect failed. Blocking on purpose: this side runs no loop. */
static long probe_peer(const char *sock) {
  struct sockaddr_un sa;
  static const char req[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n";
  char buf[256];
  ssize_t n;
  long total = 0;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  ASSERT(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  ASSERT(strlen(sock) < sizeof(sa.sun_path));
  memcpy(sa.sun_path, sock, strlen(sock) + 1);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  if (write(fd, req, sizeof(req) - 1) < 0) {
    /* closed already: fine */
  }
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    total += n;
  }
  close(fd);
  return total;
}

/* The child: the daemon as uid 65534, until it refused one peer. */
static void daemon_as_nobody(int wfd) {
  dt_t t;
  char run[200];
  al_daemon_stats_t st;

  if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
    AL_TEST_FAIL("cannot switch to uid 65534: %s", strerror(errno));
  }
  ASSERT_EQ(geteuid(), 65534);
  al__rpc_test_open_mode = true;
  dt_init(&t, NULL);
  snprintf(run, sizeof(run), "%s/run", t.root);
  ASSERT_EQ(chmod(t.root, 0711), 0);
  ASSERT_EQ(chmod(run, 0711), 0);
  t.o.open_socket = true;
  dt_start(&t);
  ASSERT_EQ(write(wfd, t.sock, strlen(t.sock) + 1),
            (ssize_t)strlen(t.sock) + 1);
  close(wfd);
  dt_run_until(&t, refused_one, &t);
  al__daemon_stats(t.d, &st);
  ASSERT_EQ(st.refused_peers, 1);
  ASSERT_EQ(st.requests, 0);
  dt_finish(&t, NULL, 0);
  exit(0);
}

TEST_IMPL(daemon_refuses_root_peer_when_not_root) {
  int p[2];
  pid_t pid;
  char sock[256];
  size_t got = 0;
  ssize_t n;
  int status;

  if (geteuid() != 0) {
    /* Same uid: accepted and served (the half that needs no privilege). */
    dt_t t;
    dt_client_t c;
    dt_client_t *cl[] = {&c};
    al_daemon_stats_t st;

    dt_init(&t, NULL);
    dt_start(&t);
    dt_connect(&t, &c);
    dt_init_client(&c);
    al__daemon_stats(t.d, &st);
    ASSERT_EQ(st.refused_peers, 0);
    dt_finish(&t, cl, 1);
    fprintf(stderr, "not run: a peer of another uid needs root to make\n");
    exit(AL_TEST_SKIP_CODE);
  }
  ASSERT_EQ(pipe(p), 0);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    daemon_as_nobody(p[1]);
  }
  close(p[1]);
  while (got < sizeof(sock) &&
         (n = read(p[0], sock + got, sizeof(sock) - got)) > 0) {
    got += (size_t)n;
  }
  close(p[0]);
  ASSERT(got > 0 && sock[got - 1] == '\0');
  /* root, connecting to a daemon of uid 65534: closed without a byte. */
  ASSERT_EQ(probe_peer(sock), 0);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    AL_TEST_FAIL("the daemon side failed (status 0x%x)", status);
  }
  return 0;
}
