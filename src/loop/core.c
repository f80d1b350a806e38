/* The agent's kernel (STYLE §6.1): what every module of src/loop may call.
 * It posts events with the run's numbers, hands history records to the
 * embedder's commit hook, and counts what must wind down before a closed
 * agent is freed (handles closing, tool work held), like libuv's
 * uv__handle_start/stop. Owns a->core; calls nothing of the other modules
 * but the hook runner's idle check and the free function agent.c set. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "loop/agent_priv.h"

void al__core_init(al_agent_t *a, const al_agent_options_t *o,
                   void (*on_free)(al_agent_t *a)) {
  a->core.on_commit = o->on_commit;
  a->core.commit_data = o->commit_data;
  a->core.admit = o->admit;
  a->core.admit_data = o->admit_data;
  a->core.on_free = on_free;
}

int al__core_open(al_agent_t *a, const al_agent_options_t *o, uint64_t seed) {
  if (o->session_id != NULL) {
    if (al__events_session_set(&a->core.session, o->session_id,
                               o->first_seq) != 0) {
      return AL_EINVAL;
    }
  } else {
    al_retry_rng_t r;
    char id[40];

    al__retry_rng_seed(&r, seed * 0x9E3779B97F4A7C15ULL + 1);
    snprintf(id, sizeof(id), "s_%016" PRIx64, al__retry_rng_next(&r));
    al__events_session_set(&a->core.session, id, o->first_seq);
  }
  return al__events_bus_new(&a->core.bus, NULL);
}

void al__core_handles_init(al_agent_t *a) {
  uv_idle_init(a->loop, &a->core.finish);
}

void al__core_free(al_agent_t *a) {
  if (a->core.bus != NULL) {
    al__events_bus_free(a->core.bus);
  }
}

bool al__agent_post(al_agent_t *a, al_event_t *ev) {
  uint64_t gen = a->run.gen;

  if (ag_closing(a)) {
    return true;
  }
  ev->run = a->run.run_id;
  ev->turn = a->run.turn;
  al__events_publish(a->core.bus, &a->core.session, ev);
  return a->run.gen != gen || ag_closing(a);
}

/* ---- history records (al_agent_options_t.on_commit) --------------------- */

void al__agent_commit(al_agent_t *a, al_commit_kind_t kind, const json_t *msg) {
  json_t *m;
  char *txt;

  if (a->core.on_commit == NULL || msg == NULL) {
    return;
  }
  m = json_pack("{s:s, s:O}", "role",
                kind == AL_COMMIT_ASSISTANT ? "assistant" : "user", "content",
                json_object_get(msg, "content"));
  txt = m != NULL ? json_dumps(m, JSON_COMPACT) : NULL;
  json_decref(m);
  if (txt != NULL) {
    a->core.on_commit(a, kind, txt, strlen(txt), a->core.commit_data);
    al_free(txt);
  }
}

void al__agent_commit_results(al_agent_t *a) {
  const json_t *m = al__history_to_json(&a->history);

  if (m != NULL && json_array_size(m) > 0) {
    al__agent_commit(a, AL_COMMIT_TOOL_RESULTS,
                     json_array_get(m, json_array_size(m) - 1));
  }
}

void al__agent_commit_record(al_agent_t *a, al_commit_kind_t kind,
                             const char *key, json_t *value) {
  json_t *rec;
  char *txt;

  if (a->core.on_commit == NULL) {
    return;
  }
  rec = json_pack("{s:O}", key, value);
  txt = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;
  if (txt != NULL) {
    a->core.on_commit(a, kind, txt, strlen(txt), a->core.commit_data);
  }
  al_free(txt);
  json_decref(rec);
}

/* ---- NULL-terminated string lists (copied options) ---------------------- */

void al__agent_strv_free(char **l) {
  size_t i;

  for (i = 0; l != NULL && l[i] != NULL; i++) {
    al_free(l[i]);
  }
  al_free(l);
}

int al__agent_strv_dup(const char *const *src, char ***out) {
  size_t n = 0;
  size_t i;
  char **l;

  *out = NULL;
  if (src == NULL) {
    return 0;
  }
  while (src[n] != NULL) {
    n++;
  }
  l = al_calloc(n + 1, sizeof(*l));
  if (l == NULL) {
    return AL_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    l[i] = al_strdup(src[i]);
    if (l[i] == NULL) {
      al__agent_strv_free(l);
      return AL_ENOMEM;
    }
  }
  *out = l;
  return 0;
}

/* ---- close accounting --------------------------------------------------- */

void al__agent_ref(al_agent_t *a) { a->core.pending++; }

void al__agent_unref(al_agent_t *a) {
  a->core.pending--;
  al__agent_maybe_finish(a);
}

void al__agent_unref_quiet(al_agent_t *a) { a->core.pending--; }

void al__agent_hold(al_agent_t *a) { a->core.holds++; }

void al__agent_release(al_agent_t *a) {
  assert(a->core.holds > 0);
  a->core.holds--;
}

uint64_t al__agent_tool_holds(const al_agent_t *a) { return a->core.holds; }

static void on_finish_close(uv_handle_t *h) {
  al_agent_t *a = AL_CONTAINER_OF((uv_idle_t *)h, al_agent_t, core.finish);
  void (*cb)(al_agent_t *) = a->core.close_cb;

  a->core.on_free(a);
  if (cb != NULL) {
    cb(a);
  }
  al_free(a);
}

void al__agent_maybe_finish(al_agent_t *a) {
  if (!ag_closing(a) || a->core.finishing || a->core.pending > 0 ||
      a->core.holds > 0 || a->reg.live_ctx > 0 || !al__agent_hooks_idle(a)) {
    return;
  }
  a->core.finishing = true;
  uv_close((uv_handle_t *)&a->core.finish, on_finish_close);
}

void al__agent_closing(al_agent_t *a, void (*cb)(al_agent_t *agent)) {
  a->core.close_cb = cb;
}
