/* A small harness for the issue-23 wiring tests: the real `agentloop`
 * binary spawned against an in-process agentloop-mockllm on the test's
 * loop; stdout, stderr and the exit status collected. Nothing sleeps: the
 * loop runs until the process exited and both pipes reached EOF. */
#ifndef AL_TESTS_WIRE_CLI_H
#define AL_TESTS_WIRE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "mockllm/mockllm.h"

typedef struct wire_cli_s {
  uv_loop_t loop;
  al_mockllm_t *mock;
  uv_process_t proc;
  uv_pipe_t out, err;
  const char *cwd;
  char obuf[131072];
  size_t olen;
  char ebuf[65536];
  size_t elen;
  int64_t exit_status;
  int exits, eofs;
} wire_cli_t;

/* A loop and a mock playing yaml (records kept). */
void wire_cli_start(wire_cli_t *c, const char *yaml);
/* Runs `agentloop ARGS` ({PORT} in an argument is the mock's port) with
 * env (NULL-terminated) until it exits. */
void wire_cli_run(wire_cli_t *c, const char *const *args, char **env);
/* Closes the mock and checks the loop closes. */
void wire_cli_finish(wire_cli_t *c);
/* Writes text to root/rel (directories made), blocking: test set-up. */
void wire_write(const char *root, const char *rel, const char *text);

#endif
