/* Fixture for agent tests: one loop, an in-process agentloop-mockllm (with
 * request recording and validation), an agent pointed at it, and a
 * subscriber that keeps every event as JSON. Tests drive it with fx_run()
 * (returns once the run ended: final, error or interrupted) and inspect
 * the events and the requests the server received. */
#ifndef AL_TEST_AGENT_FX_H
#define AL_TEST_AGENT_FX_H

#include <jansson.h>
#include <stdbool.h>

#include "agentloop/agentloop.h"
#include "mockllm/mockllm.h"

typedef struct fx_s fx_t;
/* Called for every event after it was recorded; may drive the agent. */
typedef void (*fx_hook_t)(fx_t *f, const al_event_t *ev, const json_t *j);

struct fx_s {
  uv_loop_t loop;
  al_mockllm_t *mock;
  al_agent_t *agent;
  al_agent_options_t opts; /* fx_start copies what it needs */
  json_t *events;          /* every event as JSON, in order */
  int ends;                /* final / error / interrupted seen */
  fx_hook_t hook;
  void *user;
  char workspace[256];
  bool closed;
};

/* Loop, mock server (YAML scenario; NULL: the default reply), a temp
 * workspace directory, and agent options with defaults for tests:
 * base_url set to the server, builtin tools on, retry base 1 ms, cap 5 ms,
 * kill grace 100 ms. Change f->opts, then call fx_start(). */
void fx_init(fx_t *f, const char *yaml);
void fx_init_proto(fx_t *f, const char *yaml, const char *provider);
/* Creates the agent and subscribes the recorder. */
void fx_start(fx_t *f);
/* al_agent_run(text) (asserts 0), then runs the loop until the run ends. */
void fx_run(fx_t *f, const char *text);
/* Runs the loop until the number of ended runs reaches `ends`. */
void fx_wait_end(fx_t *f, int ends);
/* Closes agent and server, runs the loop dry, checks it closes, removes
 * the workspace, frees everything. */
void fx_finish(fx_t *f);

/* Writes a file in the workspace (blocking; tests only). */
void fx_write(fx_t *f, const char *rel, const char *content);

/* Events. */
size_t fx_count(const fx_t *f, const char *type);
/* Index of the n-th (0-based) event of `type`, optionally for call_id
 * (NULL: any); -1 when absent. */
long fx_find(const fx_t *f, const char *type, const char *call_id, size_t n);
const json_t *fx_event(const fx_t *f, long i);
/* Type of the last event. */
const char *fx_last_type(const fx_t *f);
/* Concatenated text_delta texts after the last tombstone. */
char *fx_text_after_tombstone(const fx_t *f);

/* A string member of an event or block (NULL when absent). */
const char *fx_jstr(const json_t *o, const char *k);
/* Every request the server received passed its validator. */
void fx_assert_valid(const fx_t *f);

/* Requests the server received. */
size_t fx_requests(const fx_t *f);
const al_mockllm_record_t *fx_request(const fx_t *f, size_t i);
/* The last message of request i's body. */
const json_t *fx_last_message(const fx_t *f, size_t i);
/* Whether request i offered the tool name. */
bool fx_offers(const fx_t *f, size_t i, const char *name);
/* The first request whose body contains marker (-1: none). */
long fx_request_with(const fx_t *f, const char *marker);
/* The tool_result block of request i for tool_use_id, or NULL. */
const json_t *fx_tool_result(const fx_t *f, size_t i, const char *id);

#endif
