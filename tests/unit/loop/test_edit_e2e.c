/* End to end through the real agent and agentloop-mockllm (issue 12): the
 * model edits a file in place across turns and runs with edit_file, and
 * the user's side of each turn is a user_message event. */
#include <stdlib.h>
#include <string.h>

#include "agent_fx.h"
#include "test.h"

#define jstr fx_jstr

static bool ws_file_is(fx_t *f, const char *rel, const char *want) {
  char p[512];
  size_t len;
  char *got;
  bool same;

  snprintf(p, sizeof(p), "%s/%s", f->workspace, rel);
  got = al_test_read_file(p, &len);
  same = got != NULL && len == strlen(want) && memcmp(got, want, len) == 0;
  if (!same) {
    fprintf(stderr, "%s is '%.*s'\n", rel, got != NULL ? (int)len : 0,
            got != NULL ? got : "");
  }
  free(got);
  return same;
}

TEST_IMPL(e2e_model_edits_file_in_place) {
  fx_t f;
  const json_t *r;
  const char *content;
  long um;

  fx_init(&f,
          "responses:\n"
          /* Run 1, turn 1: read the file. */
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: t_read, name: read_file,"
          " input: {path: app.cfg}, pieces: 3}\n"
          /* Turn 2: change one line of it in place. */
          "  - reply:\n"
          "      content:\n"
          "        - text: 'Raising the port.'\n"
          "        - tool_use: {id: t_edit1, name: edit_file, input: {path: "
          "app.cfg, old_string: 'port = 80', new_string: 'port = 8080'},"
          " pieces: 5}\n"
          "  - reply: {content: [{text: 'Port changed.'}]}\n"
          /* Run 2: a second edit; first an ambiguous one the model must
           * repair from the error. */
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: t_edit2, name: edit_file, input: {path: "
          "app.cfg, old_string: 'on', new_string: 'off'}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: t_edit3, name: edit_file, input: {path: "
          "app.cfg, old_string: 'debug = on', new_string: 'debug = off'}}\n"
          "  - reply: {content: [{text: 'Debug is off.'}]}\n");
  fx_start(&f);
  fx_write(&f, "app.cfg", "name = demo\nport = 80\ndebug = on\nlog = on\n");

  fx_run(&f, "use port 8080");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT(ws_file_is(&f, "app.cfg",
                    "name = demo\nport = 8080\ndebug = on\nlog = on\n"));
  /* The model got the diff as the edit's result. */
  r = fx_tool_result(&f, 2, "t_edit1");
  ASSERT_NOT_NULL(r);
  content = jstr(r, "content");
  ASSERT_NOT_NULL(content);
  ASSERT_NOT_NULL(strstr(content, "Edited app.cfg: 1 replacement"));
  ASSERT_NOT_NULL(strstr(content, "-port = 80\n+port = 8080"));
  /* user_message: the prompt, then one per tool-results message. */
  ASSERT_EQ(fx_count(&f, "user_message"), 3);
  um = fx_find(&f, "user_message", NULL, 0);
  ASSERT_STR_EQ(jstr(fx_event(&f, um), "text"), "use port 8080");
  um = fx_find(&f, "user_message", NULL, 2);
  ASSERT_STR_EQ(jstr(fx_event(&f, um), "text"), "");
  ASSERT_STR_EQ(jstr(json_array_get(json_object_get(fx_event(&f, um),
                                                    "tool_results"),
                                    0),
                     "tool_use_id"),
                "t_edit1");
  /* After the turn's tool_use_completed, before its turn_completed. */
  ASSERT(fx_find(&f, "tool_use_completed", "t_edit1", 0) < um);
  ASSERT(um < fx_find(&f, "turn_completed", NULL, 1));

  fx_run(&f, "and turn debug off");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  r = fx_tool_result(&f, 4, "t_edit2");
  ASSERT_NOT_NULL(r);
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(jstr(r, "content"), "matches 2 times"));
  ASSERT(json_is_true(json_object_get(
      json_array_get(json_object_get(
                         fx_event(&f, fx_find(&f, "user_message", NULL, 4)),
                         "tool_results"),
                     0),
      "is_error")));
  ASSERT(ws_file_is(&f, "app.cfg",
                    "name = demo\nport = 8080\ndebug = off\nlog = on\n"));
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}
