/* Image results through the agent (docs/mcp.md §Images): a cleared image
 * output read back with read_tool_output comes back as blocks (the
 * history's tool_result holds the image again, the server validated it),
 * while its tool_use_completed event carries the text view only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_fx.h"
#include "test.h"

TEST_IMPL(media_read_back_blocks) {
  /* A 20x20 PNG's signature and IHDR, base64. */
  static const char png[] = "iVBORw0KGgoAAAANSUhEUgAAABQAAAAUCAIAAAAC";
  fx_t f;
  char dir[] = "/tmp/al-media-XXXXXX";
  char path[300];
  const json_t *r, *img, *ev;
  FILE *fp;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/toolu_9.txt", dir);
  fp = fopen(path, "w");
  ASSERT_NOT_NULL(fp);
  fprintf(fp,
          "[{\"type\":\"text\",\"text\":\"the logo\"},{\"type\":\"image\","
          "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\","
          "\"data\":\"%s\"}}]",
          png);
  fclose(fp);
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: read_tool_output, input: {call_id: toolu_9}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.tool_output_dir = dir;
  fx_start(&f);
  fx_run(&f, "read it back");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  r = json_object_get(fx_tool_result(&f, 1, "r1"), "content");
  ASSERT(json_is_array(r));
  ASSERT_EQ(json_array_size(r), 2);
  ASSERT_STR_EQ(fx_jstr(json_array_get(r, 0), "text"), "the logo");
  img = json_array_get(r, 1);
  ASSERT_STR_EQ(fx_jstr(img, "type"), "image");
  ASSERT_STR_EQ(fx_jstr(json_object_get(img, "source"), "data"), png);
  ev = fx_event(&f, fx_find(&f, "tool_use_completed", "r1", 0));
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(fx_jstr(ev, "content"), "the logo\n[image image/png, 30 bytes]");
  fx_finish(&f);
  unlink(path);
  rmdir(dir);
  return 0;
}

/* A post_tool_use hook on a result with an image (issue 13): added
 * context follows the blocks as a text block, so the image stays; a
 * replacement is the hook's text alone. */
static void post_hook_on_image(const char *answer, bool keeps_image) {
  static const char png[] = "iVBORw0KGgoAAAANSUhEUgAAABQAAAAUCAIAAAAC";
  fx_t f;
  char dir[] = "/tmp/al-media-XXXXXX";
  char path[300];
  char hooks[512];
  const json_t *r;
  FILE *fp;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/toolu_9.txt", dir);
  fp = fopen(path, "w");
  ASSERT_NOT_NULL(fp);
  fprintf(fp,
          "[{\"type\":\"text\",\"text\":\"the logo\"},{\"type\":\"image\","
          "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\","
          "\"data\":\"%s\"}}]",
          png);
  fclose(fp);
  {
    char script[256];
    json_t *h;
    char *txt;

    snprintf(script, sizeof(script), "cat >/dev/null; echo '%s'", answer);
    h = json_pack("{s:{s:[{s:s, s:[s,s,s]}]}}", "hooks", "post_tool_use",
                  "name", "h", "command", "sh", "-c", script);
    txt = json_dumps(h, JSON_COMPACT);
    snprintf(hooks, sizeof(hooks), "%s", txt);
    free(txt);
    json_decref(h);
  }
  fx_init(&f, "responses:\n"
              "  - reply: {content: [{tool_use: {id: r1, name: read_tool_output, input: {call_id: toolu_9}}}]}\n"
              "  - reply: {content: [{text: done}]}\n");
  f.opts.tool_output_dir = dir;
  f.opts.hooks_config = hooks;
  fx_start(&f);
  fx_run(&f, "read it back");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  fx_assert_valid(&f);
  r = json_object_get(fx_tool_result(&f, 1, "r1"), "content");
  if (keeps_image) {
    ASSERT(json_is_array(r));
    ASSERT_EQ(json_array_size(r), 3);
    ASSERT_STR_EQ(fx_jstr(json_array_get(r, 1), "type"), "image");
    ASSERT_STR_EQ(fx_jstr(json_array_get(r, 2), "text"),
                  "[hook context]\nfrom the hook");
  } else {
    ASSERT(json_is_string(r) ||
           (json_is_array(r) && json_array_size(r) == 1));
    char *d = json_dumps(r, JSON_ENCODE_ANY);

    ASSERT_NULL(strstr(d, png));
    free(d);
  }
  fx_finish(&f);
  unlink(path);
  rmdir(dir);
}

TEST_IMPL(media_post_hook_keeps_image) {
  post_hook_on_image("{\"additional_context\":\"from the hook\"}", true);
  post_hook_on_image("{\"replace_result\":\"redacted\"}", false);
  return 0;
}
