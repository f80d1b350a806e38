/* Test harness: a real redis-server per test, on a unix socket in the
 * test's own temporary directory (no TCP port, so no port races between
 * parallel tests), killed with the test's process if it dies
 * (PR_SET_PDEATHSIG). */
#ifndef AL_TEST_REDIS_SERVER_H
#define AL_TEST_REDIS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct {
  char dir[256];  /* the server's --dir (AOF files, log) */
  char sock[300]; /* its unix socket */
  pid_t pid;      /* 0 when stopped */
  bool aof;       /* appendonly yes, appendfsync always */
  int port;       /* also on 127.0.0.1:port (0: unix socket only) */
  /* Set before a (re)start: each key loaded waits this long (redis'
   * key-load-delay, with events served every KiB), so the server answers
   * LOADING for a while. 0: none. */
  int load_delay_us;
} al_test_redis_t;

/* Makes the directory, starts the server and returns once it answers PING
 * (a hiredis async PING on a private loop, retried every 5 ms). Skips the
 * test (exit 77) when redis-server is missing, except under CI=true. */
void al_test_redis_start(al_test_redis_t *s, bool aof);
/* The same, also listening on 127.0.0.1 at a port that was free a moment
 * before (bound to port 0 and released): another is tried when the server
 * could not bind it. */
void al_test_redis_start_tcp(al_test_redis_t *s);
/* SIGKILL and reap: a crash, nothing flushed beyond what fsync gave. */
void al_test_redis_kill(al_test_redis_t *s);
/* SIGTERM and reap: a clean shutdown (the AOF is flushed). */
void al_test_redis_stop(al_test_redis_t *s);
/* Starts the server again on the same directory and socket (with AOF, the
 * data comes back) and waits until it answers. */
void al_test_redis_restart(al_test_redis_t *s);
/* The same, returning as soon as it answers LOADING (its AOF is being
 * loaded): for a load slowed by load_delay_us. */
void al_test_redis_restart_loading(al_test_redis_t *s);
/* Kills the server if running and removes the directory. */
void al_test_redis_cleanup(al_test_redis_t *s);
/* One synchronous-looking command on a private loop (tests only):
 * returns the reply as text (integers printed, nil "(nil)"), malloc'd. */
char *al_test_redis_cmd(al_test_redis_t *s, int argc, const char **argv);

#endif
