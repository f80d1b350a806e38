/* A main agent from a definition (issue 24: a batch job's "agent"):
 * al_agent_options_t.tools_only / tools_never decide which tools the
 * agent has at all, from every source and for its children too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "test.h"

#define jstr fx_jstr

static void probe_run(al_tool_ctx_t *ctx, void *data) {
  int *runs = data;

  (*runs)++;
  al_tool_ctx_complete(ctx, false, "probe-ok", 8);
}

static void add_probe(fx_t *f, const char *name, int *runs) {
  al_tool_def_t d;

  memset(&d, 0, sizeof(d));
  d.name = name;
  d.description = "a test tool";
  d.category = AL_TOOL_READ;
  d.run = probe_run;
  d.data = runs;
  ASSERT_EQ(al_agent_add_tool(f->agent, &d), 0);
}

/* Only read_file, probe and task (grep listed but never): the built-ins
 * left out, an in-process tool added after the start and grep are not
 * offered; a call to one of them is an error result and never runs; a
 * general child (all of its parent's tools) has no more than its parent. */
TEST_IMPL(agent_tools_only_every_source) {
  static const char *const only[] = {"read_file", "grep", "probe", "task",
                                     NULL};
  static const char *const never[] = {"grep", NULL};
  fx_t f;
  int probe_runs = 0, other_runs = 0;
  char *tools = NULL;
  long c, r;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: b1, name: bash, input: {command: "
          "'echo SHOULD-NOT-RUN'}}\n"
          "        - tool_use: {id: o1, name: other, input: {}}\n"
          "        - tool_use: {id: p1, name: probe, input: {}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: task, input: {description: a, "
          "prompt: 'CHILD-Q', agent: general}}\n"
          "  - reply: {content: [{text: 'child answer'}]}\n"
          "  - reply: {content: [{text: 'main done'}]}\n");
  f.opts.sandbox = AL_SANDBOX_OFF;
  f.opts.tools_only = only;
  f.opts.tools_never = never;
  fx_start(&f);
  add_probe(&f, "probe", &probe_runs);
  add_probe(&f, "other", &other_runs);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(fx_offers(&f, 0, "read_file"));
  ASSERT(fx_offers(&f, 0, "probe"));
  ASSERT(fx_offers(&f, 0, "task"));
  ASSERT(!fx_offers(&f, 0, "bash"));
  ASSERT(!fx_offers(&f, 0, "write_file"));
  ASSERT(!fx_offers(&f, 0, "list_directory"));
  ASSERT(!fx_offers(&f, 0, "grep"));
  ASSERT(!fx_offers(&f, 0, "other"));
  ASSERT(!fx_offers(&f, 0, "done"));
  ASSERT_EQ(probe_runs, 1);
  ASSERT_EQ(other_runs, 0);
  c = fx_find(&f, "tool_use_completed", "b1", 0);
  ASSERT(c >= 0);
  ASSERT(json_is_true(json_object_get(fx_event(&f, c), "is_error")));
  ASSERT_NULL(strstr(jstr(fx_event(&f, c), "content"), "SHOULD-NOT-RUN"));
  c = fx_find(&f, "tool_use_completed", "o1", 0);
  ASSERT(c >= 0);
  ASSERT(json_is_true(json_object_get(fx_event(&f, c), "is_error")));
  /* The child: the parent's tools it may have, nothing the parent lacks. */
  r = fx_request_with(&f, "CHILD-Q");
  ASSERT(r >= 1);
  ASSERT(fx_offers(&f, (size_t)r, "read_file"));
  ASSERT(fx_offers(&f, (size_t)r, "probe"));
  ASSERT(!fx_offers(&f, (size_t)r, "bash"));
  ASSERT(!fx_offers(&f, (size_t)r, "grep"));
  ASSERT(!fx_offers(&f, (size_t)r, "other"));
  /* The listing shows what the agent has. */
  ASSERT_EQ(al_agent_tools_json(f.agent, &tools), 0);
  ASSERT_NULL(strstr(tools, "\"bash\""));
  ASSERT_NULL(strstr(tools, "\"other\""));
  ASSERT_NOT_NULL(strstr(tools, "\"probe\""));
  free(tools);
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* An empty allowlist: no tools at all (the request has none), not "all". */
TEST_IMPL(agent_tools_only_empty_means_none) {
  static const char *const none[] = {NULL};
  fx_t f;

  fx_init(&f, "responses:\n  - reply: {content: [{text: 'no tools'}]}\n");
  f.opts.sandbox = AL_SANDBOX_OFF;
  f.opts.tools_only = none;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_EQ(json_array_size(json_object_get(fx_request(&f, 0)->body, "tools")),
            0);
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}
