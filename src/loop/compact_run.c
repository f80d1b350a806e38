/* Summary compaction and trimming as a sub-run of the driver (STYLE §6.1,
 * SPEC §9, RESEARCH-WAVE2 C5). It decides whether a request must wait for
 * a compaction (al__compact_check), builds the summary request
 * (al__compact_begin: the driver sends it in the COMPACTING state),
 * assembles the new history from the summary or the deterministic
 * fallback (al__compact_end) and trims to max_messages. Owns a->compact;
 * answers the driver with values and never changes the run's state. Calls
 * down: compact.c (pure), history, budget, the pre_compact hooks, core.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/agent_int.h"
#include "loop/agent_priv.h"
#include "loop/compact.h"

/* ---- summary compaction -------------------------------------------------- */

/* "prompt is too long" (Anthropic), context_length_exceeded / "maximum
 * context length" (OpenAI-compatible servers). */
bool al__compact_is_overflow(const char *message) {
  return message != NULL &&
         (strstr(message, "prompt is too long") != NULL ||
          strstr(message, "context_length_exceeded") != NULL ||
          strstr(message, "maximum context length") != NULL ||
          strstr(message, "context window") != NULL);
}

static int64_t keep_tokens(const al_agent_t *a) {
  if (a->compact.keep_recent > 0) {
    return a->compact.keep_recent;
  }
  return AL_MIN((int64_t)AL_COMPACT_KEEP_TOKENS, a->budget.window / 4);
}

/* Before a request of the run (its turn's results are committed, nothing
 * streams, no tool runs): whether a requested or needed compaction starts
 * here. */
int al__compact_check(al_agent_t *a, int64_t projected, const char **trigger,
                      char *msg, size_t msg_len) {
  int64_t at = al__budget_compact_at(&a->budget, a->run.cur_max_tokens);
  bool again;

  if (a->compact.requested) {
    a->compact.requested = false;
    *trigger = "manual";
    return AG_COMPACT_START;
  }
  if (projected <= at) {
    return AG_COMPACT_NONE;
  }
  /* A second automatic compaction in a run only after an effective
   * first one (tokens after <= 0.6 x the trigger). */
  again = a->compact.run_after < 0 || a->compact.run_after * 10 <= at * 6;
  if (a->compact.auto_compact && !a->compact.this_turn && again) {
    *trigger = "auto";
    return AG_COMPACT_START;
  }
  if ((a->compact.this_turn || !again) &&
      al__budget_pct(&a->budget, projected) > AL_BUDGET_REFUSE_PCT) {
    snprintf(msg, msg_len,
             "context_limit_exceeded: the next request needs about %lld "
             "tokens (%u%% of the %lld-token window) even after compaction",
             (long long)projected, al__budget_pct(&a->budget, projected),
             (long long)a->budget.window);
    return AG_COMPACT_REFUSE;
  }
  return AG_COMPACT_NONE;
}

/* The main history's projected tokens (0 when it cannot be built). */
static int64_t project_history(al_agent_t *a) {
  int64_t p = al__agent_projected(a);

  return p < 0 ? 0 : p;
}

/* max_messages (seed 004): the oldest messages go at a safe cut, without
 * a model call; reported like a compaction (trigger "max_messages") and
 * recorded the same way. True when the caller must stop. */
bool al__compact_trim(al_agent_t *a) {
  json_t *msgs = a->history.messages;
  size_t cut;
  char notice[160];
  json_t *next;
  al_event_t ev;
  uint32_t dropped;
  uint32_t results;
  int64_t before;

  if (a->compact.max_messages == 0 ||
      json_array_size(msgs) <= a->compact.max_messages ||
      (cut = al__compact_cut_count(msgs, a->compact.max_messages)) == 0) {
    return false;
  }
  before = project_history(a);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_STARTED;
  ev.u.compaction.trigger = ag_slice("max_messages");
  ev.u.compaction.tokens_before = (uint64_t)before;
  if (al__agent_post(a, &ev)) {
    return true;
  }
  snprintf(notice, sizeof(notice),
           "(The oldest messages were dropped to keep at most %u messages.)",
           a->compact.max_messages);
  next = al__compact_assemble(msgs, cut, notice, strlen(notice));
  if (next == NULL) {
    return false;
  }
  al__compact_counts(msgs, cut, &dropped, &results);
  json_decref(a->history.messages);
  a->history.messages = next;
  al__agent_commit_record(a, AL_COMMIT_COMPACTION, "messages", next);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_COMPLETED;
  ev.u.compaction.trigger = ag_slice("max_messages");
  ev.u.compaction.tokens_before = (uint64_t)before;
  ev.u.compaction.tokens_after = (uint64_t)project_history(a);
  ev.u.compaction.dropped_messages = dropped;
  ev.u.compaction.dropped_tool_results = results;
  return al__agent_post(a, &ev);
}

int al__compact_begin(al_agent_t *a, const char *trigger) {
  const json_t *msgs = a->history.messages;
  double ratio = al__budget_ratio(&a->budget, a->model);
  al_event_t ev;
  json_t *req;
  size_t dropped;

  a->compact.in_run = al_agent_running(a);
  a->compact.trigger = trigger;
  a->compact.before = project_history(a);
  a->compact.cut = json_is_array(msgs) ? al__compact_cut(msgs, keep_tokens(a),
                                                         ratio)
                                       : 0;
  al__agent_pre_compact_hooks(a, trigger, (int64_t)a->compact.before);
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_STARTED;
  ev.u.compaction.trigger = ag_slice(trigger);
  ev.u.compaction.tokens_before = (uint64_t)a->compact.before;
  if (al__agent_post(a, &ev)) {
    return AG_COMPACT_STOPPED;
  }
  if (a->compact.cut == 0) {
    return AG_COMPACT_FINISH; /* nothing older than the kept part */
  }
  req = al__compact_request(msgs,
                            a->budget.window * AL_COMPACT_REQUEST_PCT / 100,
                            ratio, a->compact.instructions, &dropped);
  al__history_free(&a->compact.hist);
  al__history_init(&a->compact.hist);
  if (req == NULL ||
      al__history_set_system(&a->compact.hist,
                             al__history_system(&a->history)) != 0) {
    json_decref(req);
    return AG_COMPACT_FAILED;
  }
  a->compact.hist.messages = req;
  return AG_COMPACT_SEND;
}

/* The summary arrived (summary != NULL, maybe empty when there was
 * nothing to drop) or the summary call failed (NULL): the new history,
 * the events, then the run goes on. */
int al__compact_end(al_agent_t *a, const char *summary, size_t len, char *msg,
                    size_t msg_len) {
  json_t *msgs = a->history.messages;
  size_t cut = a->compact.cut;
  char *fallback = NULL;
  json_t *next = NULL;
  al_event_t ev;
  uint32_t dropped = 0;
  uint32_t results = 0;
  int64_t after;
  bool failed = summary == NULL || (cut != 0 && len == 0);

  al__history_free(&a->compact.hist);
  al__history_init(&a->compact.hist);
  al_free(a->compact.instructions);
  a->compact.instructions = NULL;
  if (cut != 0) {
    if (failed) {
      fallback = al__compact_fallback_summary(msgs, cut);
      summary = fallback != NULL ? fallback : "";
      len = strlen(summary);
    }
    next = al__compact_assemble(msgs, cut, summary, len);
    if (next != NULL) {
      al__compact_counts(msgs, cut, &dropped, &results);
      json_decref(a->history.messages);
      a->history.messages = next;
      /* Durable: the transcript keeps the originals and this record;
       * a resumed session starts from it. */
      al__agent_commit_record(a, AL_COMMIT_COMPACTION, "messages", next);
    }
  }
  a->compact.failures = failed && cut != 0 ? a->compact.failures + 1 : 0;
  after = project_history(a);
  a->compact.after = after;
  if (a->compact.before > after) {
    a->compact.saved += (uint64_t)(a->compact.before - after);
  }
  memset(&ev, 0, sizeof(ev));
  ev.type = AL_EVENT_COMPACTION_COMPLETED;
  ev.u.compaction.trigger = ag_slice(a->compact.trigger);
  ev.u.compaction.tokens_before = (uint64_t)a->compact.before;
  ev.u.compaction.tokens_after = (uint64_t)after;
  ev.u.compaction.dropped_messages = dropped;
  ev.u.compaction.dropped_tool_results = results;
  ev.u.compaction.summary_tokens = (uint64_t)(len + 3) / 4;
  ev.u.compaction.fallback = failed && cut != 0;
  al_free(fallback);
  if (al__agent_post(a, &ev)) {
    return AG_COMPACT_STOPPED;
  }
  if (a->compact.failures >= AL_COMPACT_MAX_FAILURES) {
    a->compact.failures = 0;
    snprintf(msg, msg_len, "%s",
             "compaction_failed: the summary request failed 3 times in a "
             "row (a deterministic trim was used each time)");
    return AG_COMPACT_GIVE_UP;
  }
  if (al__budget_pct(&a->budget, after) > AL_BUDGET_REFUSE_PCT) {
    snprintf(msg, msg_len,
             "context_limit_exceeded: about %lld tokens (%u%% of the "
             "%lld-token window) remain after compaction",
             (long long)after, al__budget_pct(&a->budget, after),
             (long long)a->budget.window);
    return AG_COMPACT_TOO_BIG;
  }
  return AG_COMPACT_RESUME;
}

/* ---- the driver's milestones --------------------------------------------- */

void al__compact_turn_started(al_agent_t *a) { a->compact.this_turn = false; }

void al__compact_resumed(al_agent_t *a) {
  a->compact.this_turn = true;
  if (strcmp(a->compact.trigger, "auto") == 0) {
    a->compact.run_after = a->compact.after;
  }
}

void al__compact_run_ended(al_agent_t *a) {
  al__history_free(&a->compact.hist);
  al__history_init(&a->compact.hist);
  /* requested stays: a compaction asked for during a run that then ended
   * runs before the next run's first request. */
  a->compact.this_turn = false;
  a->compact.run_after = -1;
}

void al__compact_manual(al_agent_t *a, char *instructions, bool running) {
  al_free(a->compact.instructions);
  a->compact.instructions = instructions;
  if (running) {
    a->compact.requested = true; /* before the run's next request */
  }
}

void al__compact_init(al_agent_t *a, const al_agent_options_t *o) {
  al__history_init(&a->compact.hist);
  a->compact.auto_compact = !o->no_auto_compact;
  a->compact.max_messages = o->max_messages;
  a->compact.keep_recent = o->keep_recent > 0 ? o->keep_recent : 0;
}

void al__compact_free(al_agent_t *a) {
  al__history_free(&a->compact.hist);
  al_free(a->compact.instructions);
}
