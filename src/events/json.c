/* JSON form of LoopEvents (docs/events.md is the reference).
 *
 * Used for the NDJSON output of `agentloop run` (CONVENTIONS §7.6), the
 * daemon's `event` notifications (§7.7) and the transcript, so the field
 * set and order of each type are a contract: common fields first, then
 * the payload fields in the documented order. Every field of a type is
 * always present (absent slices are null), so consumers never have to
 * guess between missing and empty.
 *
 * Payload strings may be arbitrary bytes (tool output), which jansson
 * refuses, so all of them go through al__json_string_utf8 (provider
 * layer), which replaces invalid sequences with U+FFFD. Fields that carry
 * JSON text (tools, tool input, completed block) are embedded as JSON
 * when they parse and as a string when they do not, so a malformed tool
 * input from the model is still visible rather than lost. */
#include "events/events.h"

#include "provider/provider.h"

typedef struct {
  json_t *o;
  bool fail;
} enc_t;

static void put(enc_t *e, const char *key, json_t *v) {
  /* json_object_set_new steals v even on failure, and NULL v is a
   * failure: one check covers both allocation sites. */
  if (e->fail || v == NULL || json_object_set_new(e->o, key, v) != 0) {
    if (e->fail || v == NULL) {
      json_decref(v);
    }
    e->fail = true;
  }
}

static void put_str(enc_t *e, const char *key, al_slice_t s) {
  if (s.ptr == NULL) {
    put(e, key, json_null());
  } else {
    put(e, key, al__json_string_utf8(s.ptr, s.len));
  }
}

static void put_json_text(enc_t *e, const char *key, al_slice_t s) {
  json_t *v;

  if (s.ptr == NULL) {
    put(e, key, json_null());
    return;
  }
  v = json_loadb(s.ptr, s.len, JSON_DECODE_ANY, NULL);
  put(e, key, v != NULL ? v : al__json_string_utf8(s.ptr, s.len));
}

static void put_u64(enc_t *e, const char *key, uint64_t n) {
  /* json_int_t is signed 64 bits; nothing real gets near the top. */
  put(e, key, json_integer(n > INT64_MAX ? INT64_MAX : (json_int_t)n));
}

static void put_int(enc_t *e, const char *key, int64_t n) {
  put(e, key, json_integer((json_int_t)n));
}

static void put_bool(enc_t *e, const char *key, bool b) {
  put(e, key, json_boolean(b));
}

static void put_tool_head(enc_t *e, const al_event_tool_t *t) {
  put_str(e, "call_id", t->call_id);
  put_str(e, "name", t->name);
}

static void put_subagent(enc_t *e, const al_event_t *ev) {
  const al_event_subagent_t *s = &ev->u.subagent;
  json_t *u;

  put_str(e, "task_id", s->task_id);
  put_str(e, "call_id", s->call_id);
  put_str(e, "child_session", s->child_session);
  put_str(e, "agent", s->agent);
  put_str(e, "description", s->description);
  put_bool(e, "background", s->background);
  put_u64(e, "depth", s->depth);
  if (ev->type != AL_EVENT_SUBAGENT_COMPLETED) {
    return;
  }
  put_str(e, "outcome", s->outcome);
  u = json_pack("{sIsIso}", "input_tokens",
                (json_int_t)(s->input_tokens > INT64_MAX ? INT64_MAX
                                                         : s->input_tokens),
                "output_tokens",
                (json_int_t)(s->output_tokens > INT64_MAX ? INT64_MAX
                                                          : s->output_tokens),
                "cost_usd", s->cost_usd < 0 ? json_null()
                                            : json_real(s->cost_usd));
  put(e, "usage", u);
  put_str(e, "result", s->result);
}

static void put_payload(enc_t *e, const al_event_t *ev) {
  const al_event_tool_t *t = &ev->u.tool;
  const al_event_approval_t *a = &ev->u.approval;
  const al_event_compaction_t *c = &ev->u.compaction;

  switch (ev->type) {
  case AL_EVENT_RUN_STARTED:
    put_str(e, "model", ev->u.run_started.model);
    put_str(e, "provider", ev->u.run_started.provider);
    put_str(e, "cwd", ev->u.run_started.cwd);
    put_json_text(e, "tools", ev->u.run_started.tools);
    put_str(e, "sandbox", ev->u.run_started.sandbox);
    break;
  case AL_EVENT_TURN_STARTED:
    break;
  case AL_EVENT_STREAM_REQUEST_START:
    put_str(e, "model", ev->u.stream_request.model);
    put_u64(e, "attempt", ev->u.stream_request.attempt);
    break;
  case AL_EVENT_TEXT_DELTA:
  case AL_EVENT_THINKING_DELTA:
    put_int(e, "index", ev->u.delta.index);
    put_str(e, "text", ev->u.delta.text);
    break;
  case AL_EVENT_TOOL_INPUT_DELTA:
    put_int(e, "index", ev->u.delta.index);
    put_str(e, "call_id", ev->u.delta.call_id);
    put_str(e, "partial_json", ev->u.delta.text);
    break;
  case AL_EVENT_CONTENT_BLOCK_COMPLETED:
    put_int(e, "index", ev->u.block.index);
    put_str(e, "block_type", ev->u.block.block_type);
    put_json_text(e, "block", ev->u.block.block);
    break;
  case AL_EVENT_TOOL_USE_QUEUED:
  case AL_EVENT_TOOL_USE_STARTED:
    put_tool_head(e, t);
    put_json_text(e, "input", t->input);
    break;
  case AL_EVENT_TOOL_PROGRESS:
    put_tool_head(e, t);
    put_str(e, "content", t->content);
    break;
  case AL_EVENT_TOOL_USE_COMPLETED:
    put_tool_head(e, t);
    put_bool(e, "is_error", t->is_error);
    put_str(e, "content", t->content);
    put_u64(e, "duration_ms", t->duration_ms);
    if (t->reason.ptr != NULL) {
      put_str(e, "reason", t->reason); /* only on synthetic abort results */
    }
    break;
  case AL_EVENT_TOOL_EXECUTION_ABORTED:
    put_tool_head(e, t);
    put_str(e, "reason", t->reason);
    break;
  case AL_EVENT_APPROVAL_REQUIRED:
    put_str(e, "request", a->request);
    put_str(e, "call_id", a->call_id);
    put_str(e, "name", a->name);
    put_json_text(e, "input", a->input);
    put_str(e, "category", a->category);
    put_str(e, "reason", a->reason);
    break;
  case AL_EVENT_APPROVAL_RESPONSE:
    put_str(e, "request", a->request);
    put_str(e, "call_id", a->call_id);
    put_str(e, "decision", a->decision);
    put_str(e, "reason", a->reason);
    break;
  case AL_EVENT_USAGE:
    put_u64(e, "input_tokens", ev->u.usage.input_tokens);
    put_u64(e, "output_tokens", ev->u.usage.output_tokens);
    put_u64(e, "cache_read_input_tokens",
            ev->u.usage.cache_read_input_tokens);
    put_u64(e, "cache_creation_input_tokens",
            ev->u.usage.cache_creation_input_tokens);
    put_u64(e, "reasoning_tokens", ev->u.usage.reasoning_tokens);
    put_u64(e, "context_tokens", ev->u.usage.context_tokens);
    put_u64(e, "context_window", ev->u.usage.context_window);
    put_u64(e, "context_pct", ev->u.usage.context_pct);
    put_bool(e, "context_estimated", ev->u.usage.context_estimated);
    break;
  case AL_EVENT_HISTORY_REPAIRED:
    put_u64(e, "count", ev->u.repaired.count);
    put_json_text(e, "repairs", ev->u.repaired.repairs);
    break;
  case AL_EVENT_CONTEXT_WARNING:
    put_u64(e, "context_tokens", ev->u.usage.context_tokens);
    put_u64(e, "context_window", ev->u.usage.context_window);
    put_u64(e, "context_pct", ev->u.usage.context_pct);
    break;
  case AL_EVENT_RETRY:
    put_u64(e, "attempt", ev->u.retry.attempt);
    put_u64(e, "max", ev->u.retry.max);
    put_u64(e, "delay_ms", ev->u.retry.delay_ms);
    put_str(e, "kind", ev->u.retry.kind);
    put_int(e, "status", ev->u.retry.status);
    put_str(e, "message", ev->u.retry.message);
    break;
  case AL_EVENT_API_ERROR:
    put_str(e, "kind", ev->u.api_error.kind);
    put_int(e, "status", ev->u.api_error.status);
    put_str(e, "message", ev->u.api_error.message);
    break;
  case AL_EVENT_STREAM_STALL_DETECTED:
    put_u64(e, "idle_ms", ev->u.stall.idle_ms);
    put_bool(e, "content_delivered", ev->u.stall.content_delivered);
    break;
  case AL_EVENT_MODEL_FALLBACK:
    put_str(e, "from", ev->u.fallback.from);
    put_str(e, "to", ev->u.fallback.to);
    put_str(e, "reason", ev->u.fallback.reason);
    break;
  case AL_EVENT_TOMBSTONE:
    put_str(e, "message_id", ev->u.tombstone.message_id);
    put_str(e, "reason", ev->u.tombstone.reason);
    break;
  case AL_EVENT_MICRO_COMPACTION:
    put_u64(e, "cleared", c->cleared);
    put_json_text(e, "call_ids", c->call_ids);
    put_u64(e, "tokens_saved", c->tokens_saved);
    put_u64(e, "tokens_before", c->tokens_before);
    put_u64(e, "tokens_after", c->tokens_after);
    break;
  case AL_EVENT_COMPACTION_STARTED:
    put_str(e, "trigger", c->trigger);
    put_u64(e, "tokens_before", c->tokens_before);
    break;
  case AL_EVENT_COMPACTION_COMPLETED:
    put_str(e, "trigger", c->trigger);
    put_u64(e, "tokens_before", c->tokens_before);
    put_u64(e, "tokens_after", c->tokens_after);
    put_u64(e, "dropped_messages", c->dropped_messages);
    put_u64(e, "dropped_tool_results", c->dropped_tool_results);
    put_u64(e, "summary_tokens", c->summary_tokens);
    put_bool(e, "fallback", c->fallback);
    break;
  case AL_EVENT_TURN_COMPLETED:
    put_str(e, "stop_reason", ev->u.turn_completed.stop_reason);
    put_u64(e, "tool_calls", ev->u.turn_completed.tool_calls);
    break;
  case AL_EVENT_MAX_TURNS_REACHED:
    put_u64(e, "max_turns", ev->u.max_turns.max_turns);
    break;
  case AL_EVENT_INTERRUPTED:
    put_str(e, "reason", ev->u.interrupted.reason);
    break;
  case AL_EVENT_MCP_SERVER_STATE:
    put_str(e, "server", ev->u.mcp.server);
    put_str(e, "state", ev->u.mcp.state);
    put_u64(e, "tools", ev->u.mcp.tools);
    put_u64(e, "ms", ev->u.mcp.ms);
    if (ev->u.mcp.error.ptr != NULL) {
      put_str(e, "error", ev->u.mcp.error);
    }
    break;
  case AL_EVENT_MCP_TOOLS_CHANGED:
    put_str(e, "server", ev->u.mcp.server);
    put_u64(e, "tools", ev->u.mcp.tools);
    put_u64(e, "added", ev->u.mcp.added);
    put_u64(e, "removed", ev->u.mcp.removed);
    put_u64(e, "definition_tokens", ev->u.mcp.definition_tokens);
    put_u64(e, "deferred", ev->u.mcp.deferred);
    put_u64(e, "deferred_tokens", ev->u.mcp.deferred_tokens);
    break;
  case AL_EVENT_MCP_WARNING:
    put_str(e, "server", ev->u.mcp.server);
    put_str(e, "message", ev->u.mcp.error);
    break;
  case AL_EVENT_MCP_TOOL_CALL_BEGIN:
  case AL_EVENT_MCP_TOOL_CALL_END:
    put_str(e, "server", ev->u.mcp_call.server);
    put_str(e, "tool", ev->u.mcp_call.tool);
    put_str(e, "name", ev->u.mcp_call.name);
    put_str(e, "call_id", ev->u.mcp_call.call_id);
    if (ev->type == AL_EVENT_MCP_TOOL_CALL_END) {
      put_bool(e, "is_error", ev->u.mcp_call.is_error);
      put_u64(e, "duration_ms", ev->u.mcp_call.duration_ms);
      if (ev->u.mcp_call.end.ptr != NULL) {
        put_str(e, "end", ev->u.mcp_call.end);
      }
    }
    break;
  case AL_EVENT_MCP_STARTUP_COMPLETE:
    put_json_text(e, "ready", ev->u.mcp_startup.ready);
    put_json_text(e, "failed", ev->u.mcp_startup.failed);
    put_json_text(e, "pending", ev->u.mcp_startup.pending);
    put_u64(e, "waited_ms", ev->u.mcp_startup.waited_ms);
    break;
  case AL_EVENT_HOOK_EXECUTED:
    put_str(e, "hook", ev->u.hook.hook);
    put_str(e, "event", ev->u.hook.event);
    put_str(e, "decision", ev->u.hook.decision);
    put_str(e, "outcome", ev->u.hook.outcome);
    put_int(e, "exit_status", ev->u.hook.exit_status);
    put_u64(e, "ms", ev->u.hook.ms);
    if (ev->u.hook.reason.ptr != NULL) {
      put_str(e, "reason", ev->u.hook.reason);
    }
    if (ev->u.hook.call_id.ptr != NULL) {
      put_str(e, "call_id", ev->u.hook.call_id);
      put_str(e, "name", ev->u.hook.name);
    }
    break;
  case AL_EVENT_SUBAGENT_STARTED:
  case AL_EVENT_SUBAGENT_COMPLETED:
    put_subagent(e, ev);
    break;
  case AL_EVENT_ERROR:
    put_int(e, "code", ev->u.error.code);
    put(e, "code_name", json_string(al_err_name(ev->u.error.code)));
    put_str(e, "message", ev->u.error.message);
    break;
  case AL_EVENT_FINAL:
    put_str(e, "text", ev->u.final.text);
    break;
  case AL_EVENT_USER_MESSAGE:
    put_str(e, "text", ev->u.user_message.text);
    put_json_text(e, "tool_results", ev->u.user_message.tool_results);
    break;
  case AL_EVENT_PROVIDER_NOTICE:
    put_str(e, "kind", ev->u.notice.kind);
    put_str(e, "message", ev->u.notice.message);
    break;
  case AL_EVENT_CITATION:
    put_int(e, "index", ev->u.citation.index);
    put_json_text(e, "citation", ev->u.citation.citation);
    break;
  default:
    break;
  }
}

json_t *al__events_to_json(const al_event_t *ev) {
  const char *name = al_event_type_name(ev->type);
  enc_t e;

  if (name == NULL) {
    return NULL; /* not an event: a programmer error upstream */
  }
  e.o = json_object();
  e.fail = e.o == NULL;
  put(&e, "type", json_string(name));
  if (ev->session != NULL) {
    put(&e, "session", al__json_string_utf8(ev->session, strlen(ev->session)));
  } else {
    put(&e, "session", json_null());
  }
  if (ev->path != NULL) { /* a child's event re-posted by its parent */
    put(&e, "path", al__json_string_utf8(ev->path, strlen(ev->path)));
  }
  put_u64(&e, "run", ev->run);
  put_u64(&e, "turn", ev->turn);
  put_u64(&e, "seq", ev->seq);
  put_u64(&e, "ts_ns", ev->ts_ns);
  put_payload(&e, ev);
  if (e.fail) {
    json_decref(e.o);
    return NULL;
  }
  return e.o;
}

int al__events_encode_line(const al_event_t *ev, al_buf_t *out) {
  json_t *j;
  size_t n;
  int rc;

  if ((j = al__events_to_json(ev)) == NULL) {
    return al_event_type_name(ev->type) == NULL ? AL_EINVAL : AL_ENOMEM;
  }
  /* JSON_COMPACT never emits a raw newline: strings escape theirs. Size
   * first, then dump straight into the buffer, reserved up front so a
   * line is appended whole or not at all. */
  n = json_dumpb(j, NULL, 0, JSON_COMPACT);
  if (n == 0) {
    rc = AL_ENOMEM;
  } else if ((rc = al_buf_reserve(out, n + 1)) == 0) {
    if (json_dumpb(j, out->data + out->len, n, JSON_COMPACT) != n) {
      rc = AL_ENOMEM;
    } else {
      out->data[out->len + n] = '\n';
      out->len += n + 1;
    }
    out->data[out->len] = '\0';
  }
  json_decref(j);
  return rc;
}
