/* Agent test fixture (agent_fx.h). */
#include "agent_fx.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "events/events.h"
#include "test.h"

static void recorder(const al_event_t *ev, void *data) {
  fx_t *f = data;
  json_t *j = al__events_to_json(ev);

  ASSERT_NOT_NULL(j);
  json_array_append_new(f->events, j);
  /* A sub-agent's re-posted end (ev->path) does not end the run. */
  if (ev->path == NULL &&
      (ev->type == AL_EVENT_FINAL || ev->type == AL_EVENT_ERROR ||
       ev->type == AL_EVENT_INTERRUPTED)) {
    f->ends++;
  }
  if (f->hook != NULL) {
    f->hook(f, ev, j);
  }
}

void fx_init_proto(fx_t *f, const char *yaml, const char *provider) {
  al_mockllm_options_t mo;
  char err[512];
  static char url[64];

  memset(f, 0, sizeof(*f));
  ASSERT_EQ(uv_loop_init(&f->loop), 0);
  f->loop.data = f;
  al_mockllm_options_init(&mo);
  mo.scenario_yaml = yaml;
  mo.record = true;
  mo.err = err;
  mo.err_len = sizeof(err);
  err[0] = '\0';
  if (al_mockllm_new(&f->loop, &mo, &f->mock) != 0) {
    AL_TEST_FAIL("mockllm: %s", err);
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", al_mockllm_port(f->mock));
  snprintf(f->workspace, sizeof(f->workspace), "/tmp/al-agent-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(f->workspace));
  f->events = json_array();
  al_agent_options_init(&f->opts);
  f->opts.provider = provider;
  f->opts.base_url = url;
  f->opts.api_key = "test-key";
  f->opts.model = "mock-model";
  f->opts.workspace = f->workspace;
  f->opts.builtin_tools = true;
  f->opts.retry_base_ms = 1;
  f->opts.retry_cap_ms = 5;
  f->opts.kill_grace_ms = 100;
  f->opts.rng_seed = 42;
  f->opts.session_id = "s_test";
  f->opts.data = f;
}

void fx_init(fx_t *f, const char *yaml) { fx_init_proto(f, yaml, "anthropic"); }

void fx_start(fx_t *f) {
  ASSERT_EQ(al_agent_new(&f->loop, &f->opts, &f->agent), 0);
  ASSERT_EQ(al_agent_subscribe(f->agent, recorder, f, NULL), 0);
}

void fx_wait_end(fx_t *f, int ends) {
  while (f->ends < ends) {
    ASSERT(uv_run(&f->loop, UV_RUN_ONCE) != 0 || f->ends >= ends);
  }
}

void fx_run(fx_t *f, const char *text) {
  int ends = f->ends;

  ASSERT_EQ(al_agent_run(f->agent, text), 0);
  fx_wait_end(f, ends + 1);
}

static void on_agent_closed(al_agent_t *a) {
  fx_t *f = al_agent_get_data(a);

  if (f != NULL) {
    f->closed = true;
  }
}


void fx_finish(fx_t *f) {
  if (f->agent != NULL) {
    al_agent_close(f->agent, on_agent_closed);
    f->agent = NULL;
  }
  al_mockllm_close(f->mock, NULL);
  ASSERT_LOOP_CLOSES(&f->loop);
  ASSERT_EQ(al_test_rm_tree(f->workspace), 0);
  json_decref(f->events);
}

void fx_write(fx_t *f, const char *rel, const char *content) {
  char path[512];
  FILE *fp;

  snprintf(path, sizeof(path), "%s/%s", f->workspace, rel);
  fp = fopen(path, "w");
  ASSERT_NOT_NULL(fp);
  fputs(content, fp);
  fclose(fp);
}

const char *fx_jstr(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

#define jstr fx_jstr

void fx_assert_valid(const fx_t *f) {
  size_t i;

  for (i = 0; i < fx_requests(f); i++) {
    const al_mockllm_record_t *r = fx_request(f, i);

    if (!r->valid) {
      AL_TEST_FAIL("request %zu invalid: %s", i, r->error ? r->error : "?");
    }
  }
}

size_t fx_count(const fx_t *f, const char *type) {
  size_t i, n = 0;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    if (strcmp(jstr(e, "type"), type) == 0) {
      n++;
    }
  }
  return n;
}

long fx_find(const fx_t *f, const char *type, const char *call_id, size_t n) {
  size_t i;
  json_t *e;

  json_array_foreach(f->events, i, e) {
    if (strcmp(jstr(e, "type"), type) != 0) {
      continue;
    }
    if (call_id != NULL &&
        (jstr(e, "call_id") == NULL || strcmp(jstr(e, "call_id"), call_id) != 0)) {
      continue;
    }
    if (n-- == 0) {
      return (long)i;
    }
  }
  return -1;
}

const json_t *fx_event(const fx_t *f, long i) {
  return i < 0 ? NULL : json_array_get(f->events, (size_t)i);
}

const char *fx_last_type(const fx_t *f) {
  size_t n = json_array_size(f->events);

  return n == 0 ? "" : jstr(json_array_get(f->events, n - 1), "type");
}

char *fx_text_after_tombstone(const fx_t *f) {
  al_buf_t b;
  size_t i;
  json_t *e;

  al_buf_init(&b, SIZE_MAX / 2);
  al_buf_append(&b, "", 0);
  json_array_foreach(f->events, i, e) {
    if (strcmp(jstr(e, "type"), "tombstone") == 0) {
      al_buf_reset(&b);
    } else if (strcmp(jstr(e, "type"), "text_delta") == 0) {
      al_buf_append_str(&b, jstr(e, "text"));
    }
  }
  al_buf_append(&b, "", 1);
  return b.data;
}

size_t fx_requests(const fx_t *f) { return al_mockllm_record_count(f->mock); }

const al_mockllm_record_t *fx_request(const fx_t *f, size_t i) {
  const al_mockllm_record_t *r = al_mockllm_record_get(f->mock, i);

  ASSERT_NOT_NULL(r);
  return r;
}

const json_t *fx_last_message(const fx_t *f, size_t i) {
  const json_t *msgs = json_object_get(fx_request(f, i)->body, "messages");

  ASSERT(json_array_size(msgs) > 0);
  return json_array_get(msgs, json_array_size(msgs) - 1);
}

const json_t *fx_tool_result(const fx_t *f, size_t i, const char *id) {
  const json_t *msgs = json_object_get(fx_request(f, i)->body, "messages");
  size_t m, k;
  json_t *msg, *blk;

  json_array_foreach(msgs, m, msg) {
    json_array_foreach(json_object_get(msg, "content"), k, blk) {
      if (json_is_object(blk) && jstr(blk, "type") != NULL &&
          strcmp(jstr(blk, "type"), "tool_result") == 0 &&
          strcmp(jstr(blk, "tool_use_id"), id) == 0) {
        return blk;
      }
    }
  }
  return NULL;
}

bool fx_offers(const fx_t *f, size_t i, const char *name) {
  const json_t *tools = json_object_get(fx_request(f, i)->body, "tools");
  size_t k;
  json_t *t;

  json_array_foreach(tools, k, t) {
    if (strcmp(fx_jstr(t, "name"), name) == 0) {
      return true;
    }
  }
  return false;
}

long fx_request_with(const fx_t *f, const char *marker) {
  size_t i;

  for (i = 0; i < fx_requests(f); i++) {
    char *s = json_dumps(fx_request(f, i)->body, JSON_COMPACT);
    bool hit = strstr(s, marker) != NULL;

    free(s);
    if (hit) {
      return (long)i;
    }
  }
  return -1;
}
