/* al_tests: the test runner.
 *
 *   al_tests               run every test, each in a forked child
 *   al_tests NAME...       run the named tests (ctest calls it this way)
 *   al_tests --list        print the test names
 *   al_tests --helper NAME [ARGS]  run a helper in this process (a child tool,
 *                          a side server) and exit with its status
 *   al_tests --bwrap-check one line: can bwrap mode run here, and if not,
 *                          why and what would enable it (exit 0 / 1)
 *
 * A test passes when it returns 0 and exits normally within its timeout
 * (5 s, times AL_TEST_TIMEOUT_MULTIPLIER). One that exits with
 * AL_TEST_SKIP_CODE did not run (bwrap_gate.c); a run of only such tests
 * exits with that code, which ctest reports as not run. */
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#define TEST_ENTRY(n) int run_test_##n(void);
#define HELPER_ENTRY(n) int run_helper_##n(int argc, char **argv);
#include "test-list.h"
#undef TEST_ENTRY
#undef HELPER_ENTRY

typedef struct {
  const char *name;
  int (*fn)(void);
} test_entry_t;

typedef struct {
  const char *name;
  int (*fn)(int, char **);
} helper_entry_t;

static const test_entry_t tests[] = {
#define TEST_ENTRY(n) {#n, run_test_##n},
#define HELPER_ENTRY(n)
#include "test-list.h"
#undef TEST_ENTRY
#undef HELPER_ENTRY
    {NULL, NULL}};

static const helper_entry_t helpers[] = {
#define TEST_ENTRY(n)
#define HELPER_ENTRY(n) {#n, run_helper_##n},
#include "test-list.h"
#undef TEST_ENTRY
#undef HELPER_ENTRY
    {NULL, NULL}};

/* The runner's own probe for runner_timeout_kills_test, run by name only
 * (not in --list, so not a ctest case that could pass without checking
 * anything): AL_RUNNER_PROBE=hang never returns, =skip does not run, =fail
 * fails, anything else passes. */
static int runner_probe(void) {
  const char *m = getenv("AL_RUNNER_PROBE");

  m = m != NULL ? m : "";
  if (strcmp(m, "hang") == 0) {
    for (;;) {
      pause();
    }
  }
  if (strcmp(m, "skip") == 0) {
    exit(AL_TEST_SKIP_CODE);
  }
  return strcmp(m, "fail") == 0 ? 1 : 0;
}

static const test_entry_t probe_entry = {"_runner_probe", runner_probe};

static char exe_path[4096];

const char *al_test_exe(void) { return exe_path; }

int al_test_timeout_multiplier(void) {
  const char *v = getenv("AL_TEST_TIMEOUT_MULTIPLIER");
  int m = v ? atoi(v) : 1;

  return m > 0 ? m : 1;
}

/* The limit in force in the test's child, shared with the runner so that
 * a timeout names the test's own budget, not the default. */
static unsigned *limit_s;

void al_test_timeout_s(unsigned secs) {
  struct itimerval itv;

  memset(&itv, 0, sizeof(itv));
  itv.it_value.tv_sec = (time_t)secs * al_test_timeout_multiplier();
  setitimer(ITIMER_REAL, &itv, NULL);
  if (limit_s != NULL) {
    *limit_s = secs * (unsigned)al_test_timeout_multiplier();
  }
}

static int run_one(const test_entry_t *t) {
  pid_t pid;
  int status;
  unsigned int secs = 5u * (unsigned int)al_test_timeout_multiplier();
  const char *ms_env = getenv("AL_TEST_TIMEOUT_MS"); /* runner self-test */
  struct itimerval itv;

  memset(&itv, 0, sizeof(itv));
  if (ms_env != NULL && atoi(ms_env) > 0) {
    itv.it_value.tv_sec = atoi(ms_env) / 1000;
    itv.it_value.tv_usec = (atoi(ms_env) % 1000) * 1000;
  } else {
    itv.it_value.tv_sec = secs;
  }

  if (limit_s == NULL) {
    void *m = mmap(NULL, sizeof(*limit_s), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    limit_s = m != MAP_FAILED ? m : NULL;
  }
  if (limit_s != NULL) {
    *limit_s = secs;
  }
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    /* Own process group so a timeout also takes down what the test spawned. */
    setpgid(0, 0);
    setitimer(ITIMER_REAL, &itv, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* exit(), not _exit(): LeakSanitizer checks at exit (stdio was flushed
     * before the fork, so nothing is written twice). */
    exit(t->fn() == 0 ? 0 : 1);
  }
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      perror("waitpid");
      return 1;
    }
  }
  kill(-pid, SIGKILL); /* anything the test left behind */
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    printf("ok     %s\n", t->name);
    return 0;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == AL_TEST_SKIP_CODE) {
    printf("skip   %s (not run here)\n", t->name);
    return AL_TEST_SKIP_CODE;
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
    printf("FAIL   %s (timeout after %u s)\n", t->name,
           limit_s != NULL ? *limit_s : secs);
  } else if (WIFSIGNALED(status)) {
    printf("FAIL   %s (signal %d)\n", t->name, WTERMSIG(status));
  } else {
    printf("FAIL   %s (exit %d)\n", t->name, WEXITSTATUS(status));
  }
  return 1;
}

/* Adds one test's outcome to the counts. */
static void count(int rc, int *failed, int *skipped) {
  if (rc == AL_TEST_SKIP_CODE) {
    (*skipped)++;
  } else if (rc != 0) {
    (*failed)++;
  }
}

int main(int argc, char **argv) {
  int failed = 0;
  int skipped = 0;
  int ran = 0;
  ssize_t n;
  int i;
  const test_entry_t *t;

  n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
  if (n > 0) {
    exe_path[n] = '\0';
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
    for (t = tests; t->name != NULL; t++) {
      printf("%s\n", t->name);
    }
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "--helper") == 0) {
    const helper_entry_t *h;

    for (h = helpers; h->name != NULL; h++) {
      if (strcmp(h->name, argv[2]) == 0) {
        return h->fn(argc - 3, argv + 3);
      }
    }
    fprintf(stderr, "al_tests: no helper named %s\n", argv[2]);
    return 127;
  }
  if (argc >= 2 && strcmp(argv[1], "--bwrap-check") == 0) {
    char why[600];

    if (al_test_bwrap_available(why, sizeof(why))) {
      printf("bwrap mode: available\n");
      return 0;
    }
    printf("bwrap mode cannot run here: %s\n", why);
    return 1;
  }

  if (argc == 1) {
    for (t = tests; t->name != NULL; t++) {
      count(run_one(t), &failed, &skipped);
      ran++;
    }
  } else {
    for (i = 1; i < argc; i++) {
      for (t = tests; t->name != NULL; t++) {
        if (strcmp(t->name, argv[i]) == 0) {
          break;
        }
      }
      if (strcmp(argv[i], probe_entry.name) == 0) {
        t = &probe_entry;
      }
      if (t->name == NULL) {
        fprintf(stderr, "al_tests: no test named %s\n", argv[i]);
        return 2;
      }
      count(run_one(t), &failed, &skipped);
      ran++;
    }
  }
  printf("%d passed, %d failed, %d not run\n", ran - failed - skipped,
         failed, skipped);
  if (failed) {
    return 1;
  }
  return skipped > 0 && skipped == ran ? AL_TEST_SKIP_CODE : 0;
}
