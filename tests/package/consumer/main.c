/* Uses only the installed public headers: version, errors, allocator. */
#include <stdio.h>
#include <string.h>

#include <agentloop/agentloop.h>

int main(void) {
  uv_loop_t loop;

  if (uv_loop_init(&loop) != 0) {
    return 1;
  }
  printf("%s\n%s\n", al_version_full(), al_strerror(AL_ETOOBIG));
  if (strcmp(al_version_string(), AL_VERSION_STRING) != 0) {
    return 1;
  }
  return uv_loop_close(&loop);
}
