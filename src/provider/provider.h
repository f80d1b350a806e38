/* Provider layer: request builders, stream decoders, block aggregator
 * (SPEC §5, PROTOCOLS.md §2-§4).
 *
 * A provider is a small vtable (al_provider_t): it builds the HTTP request
 * (method, path, headers, JSON body) from the history and options, and it
 * decodes the streamed response body into normalized stream events. The
 * decoders are pure (no uv.h): bytes go in through al_pstream_feed(), which
 * runs the SSE parser, the provider decoder and the content-block aggregator
 * and delivers al_pevent_t values to one callback.
 *
 * Ownership and lifetime: every pointer inside an al_pevent_t (text slices,
 * json_t values) is borrowed and valid only during the callback; a
 * subscriber copies (or json_incref's) what it keeps. The hot deltas
 * (text, thinking, tool input) carry a (ptr, len) UTF-8 slice and allocate
 * nothing per event: the fast JSON path (fastjson.c) decodes the three hot
 * shapes without a DOM and the aggregator appends into bounded buffers.
 *
 * Normalized message model (history is jansson, Anthropic-shaped for both
 * providers): {"id","type":"message","role":"assistant","model","content":
 * [blocks...],"stop_reason","stop_sequence","usage"} where blocks are text
 * (+citations), thinking (+signature), redacted_thinking, tool_use (input
 * parsed once at block stop: empty => {}, invalid => {"_raw": "<text>"}),
 * server tool blocks and unknown block types kept exactly as given. */
#ifndef AL_PROVIDER_H
#define AL_PROVIDER_H

#include <jansson.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/utf8.h"
#include "sse/sse.h"

/* ---- normalized stop reasons -------------------------------------------- */

#define AL_STOP_REASON_MAP(XX)   \
  XX(NONE, "none")               \
  XX(END_TURN, "end_turn")       \
  XX(TOOL_USE, "tool_use")       \
  XX(MAX_TOKENS, "max_tokens")   \
  XX(STOP_SEQUENCE, "stop_sequence") \
  XX(PAUSE_TURN, "pause_turn")   \
  XX(REFUSAL, "refusal")         \
  XX(ERROR, "error")

typedef enum {
#define AL_STOP_GEN(name, str) AL_STOP_##name,
  AL_STOP_REASON_MAP(AL_STOP_GEN)
#undef AL_STOP_GEN
} al_stop_reason_t;

const char *al_stop_reason_name(al_stop_reason_t r);
/* Anthropic stop_reason / OpenAI finish_reason text -> normalized value.
 * NULL -> NONE; unknown values -> ERROR. */
al_stop_reason_t al__provider_stop_from_anthropic(const char *s);
al_stop_reason_t al__provider_stop_from_openai(const char *s);

/* ---- block types ---------------------------------------------------------- */

typedef enum {
  AL_BLOCK_UNKNOWN = 0, /* any other type: kept as given, deltas ignored */
  AL_BLOCK_TEXT,
  AL_BLOCK_THINKING,
  AL_BLOCK_REDACTED_THINKING,
  AL_BLOCK_TOOL_USE,
  AL_BLOCK_SERVER_TOOL_USE, /* server_tool_use, mcp_tool_use: input deltas */
} al_block_type_t;

al_block_type_t al__provider_block_type(const char *type);

/* ---- normalized stream events --------------------------------------------- */

/* XX(name, snake_case name used by `agentloop decode --events`) */
#define AL_PEVENT_MAP(XX)                       \
  XX(MESSAGE_START, "message_start")            \
  XX(BLOCK_START, "content_block_start")        \
  XX(TEXT_DELTA, "text_delta")                  \
  XX(THINKING_DELTA, "thinking_delta")          \
  XX(SIGNATURE, "signature_delta")              \
  XX(TOOL_INPUT_DELTA, "tool_input_delta")      \
  XX(CITATION, "citation_delta")                \
  XX(BLOCK_STOP, "content_block_completed")     \
  XX(MESSAGE_DELTA, "message_delta")            \
  XX(MESSAGE_STOP, "message_stop")              \
  XX(PING, "ping")                              \
  XX(RAW, "raw_event")                          \
  XX(ERROR, "api_error")                        \
  XX(NOTICE, "notice")

typedef enum {
#define AL_PEV_GEN(name, str) AL_PEV_##name,
  AL_PEVENT_MAP(AL_PEV_GEN)
#undef AL_PEV_GEN
  AL_PEV_COUNT_
} al_pevent_type_t;

const char *al_pevent_name(al_pevent_type_t t);

/* Kinds of AL_PEV_ERROR. */
typedef enum {
  AL_PERR_STREAM_EVENT = 1, /* the provider sent an error event/payload */
  AL_PERR_DECODE = 2,       /* the stream cannot be decoded (bad JSON,
                               truncated, protocol violation, bad order) */
  AL_PERR_HTTP = 3          /* a non-2xx response body (al_provider_http_error) */
} al_perr_kind_t;

typedef struct al_pevent_s {
  al_pevent_type_t type;
  /* Content progress: a delta, a block start or a block stop. The
   * transport's progress-stall timer is reset by these only (SPEC §3). */
  bool progress;
  int index;                 /* block index, -1 when not a block event */
  al_block_type_t block_type;
  const char *block_type_name; /* "text", "tool_use", ... (block events) */
  /* TEXT_DELTA / THINKING_DELTA / TOOL_INPUT_DELTA / SIGNATURE: the UTF-8
   * piece. RAW: the event name. ERROR: the message. NOTICE: what the
   * decoder decided on the stream's behalf (error_type holds its kind,
   * e.g. "stop_inferred"). */
  const char *text;
  size_t len;
  /* Borrowed JSON:
   *   MESSAGE_START  the message object as started
   *   BLOCK_START    the content_block as given
   *   CITATION       the citation object
   *   BLOCK_STOP     the completed block (tool_use: input parsed)
   *   MESSAGE_DELTA  the provider's delta object
   *   MESSAGE_STOP   the final normalized message
   *   RAW            the parsed data (NULL if not JSON)
   *   ERROR          the error body (provider JSON, or NULL) */
  json_t *json;
  json_t *usage; /* MESSAGE_START/MESSAGE_DELTA/MESSAGE_STOP: usage or NULL */
  /* MESSAGE_START */
  const char *id;
  const char *model;
  /* MESSAGE_DELTA / MESSAGE_STOP */
  al_stop_reason_t stop_reason;
  const char *stop_reason_raw; /* as the provider spelled it, or NULL */
  /* ERROR */
  al_perr_kind_t error_kind;
  const char *error_type; /* provider error type ("overloaded_error") */
  /* Events decoded inside al_pstream_feed(): when the chunk that carried
   * them was decoded (al_now_ns, read once per feed call, at its first
   * event; the events of one chunk arrived together). 0 for events emitted
   * outside a feed. */
  uint64_t ts_ns;
} al_pevent_t;

/* Return 0 to continue; non-zero stops decoding and is returned by feed. */
typedef int (*al_pstream_event_cb)(void *data, const al_pevent_t *ev);

/* ---- providers and requests ------------------------------------------------ */

typedef enum {
  AL_PROVIDER_ANTHROPIC = 1,
  AL_PROVIDER_OPENAI = 2,
  AL_PROVIDER_OPENAI_RESPONSES = 3
} al_provider_kind_t;

typedef enum {
  AL_AUTH_X_API_KEY = 0, /* x-api-key: KEY (default) */
  AL_AUTH_BEARER = 1     /* Authorization: Bearer KEY */
} al_auth_style_t;

typedef struct al_provider_options_s {
  const char *model;
  int64_t max_tokens;       /* default 4096 */
  const char *system;       /* top-level system prompt, or NULL */
  json_t *tools;            /* borrowed: [{name, description, input_schema}] */
  json_t *tool_choice;      /* borrowed; Anthropic shape ({"type":"auto"}) */
  json_t *thinking;         /* borrowed; Anthropic thinking object */
  double temperature;
  bool has_temperature;
  bool cache_control;       /* breakpoints on system + last tool (default on) */
  bool stream;              /* default true */
  const char *api_key;      /* NULL: no auth header */
  al_auth_style_t auth;     /* Anthropic only; OpenAI is always Bearer */
  const char *anthropic_version; /* default "2023-06-01" */
  const char *anthropic_beta;    /* comma list or NULL */
  const char *path_prefix;  /* default "/v1" */
  json_t *extra_body;       /* borrowed; keys merged into the body */
  /* OpenAI-compatible round-trips (models catalogue): send each assistant
   * message's thinking back in `reasoning_field` (default
   * "reasoning_content") -- DeepSeek's thinking mode refuses a tool round
   * without it. reasoning_details kept from OpenRouter go back always. */
  bool echo_reasoning;
  const char *reasoning_field;
  /* The model takes no images or PDFs (catalogue `images: false`): the
   * OpenAI builders send a tool result's text view only. Anthropic models
   * all take them. */
  bool no_media;
} al_provider_options_t;

void al_provider_options_init(al_provider_options_t *o);

typedef struct al_provider_header_s {
  char *name;
  char *value;
} al_provider_header_t;

typedef struct al_provider_request_s {
  const char *method; /* static "POST" */
  char *path;
  al_provider_header_t *headers;
  size_t nheaders;
  char *body; /* compact JSON, NUL-terminated */
  size_t body_len;
} al_provider_request_t;

void al_provider_request_free(al_provider_request_t *r);

/* Typed provider error from a non-2xx response body or an error event. */
typedef enum {
  AL_PCLASS_UNKNOWN = 0,
  AL_PCLASS_INVALID_REQUEST,
  AL_PCLASS_AUTHENTICATION,
  AL_PCLASS_PERMISSION,
  AL_PCLASS_NOT_FOUND,
  AL_PCLASS_RATE_LIMIT,
  AL_PCLASS_OVERLOADED,
  AL_PCLASS_API_ERROR,
  AL_PCLASS_TIMEOUT,
  AL_PCLASS_TOO_LARGE
} al_perr_class_t;

const char *al_perr_class_name(al_perr_class_t c);

typedef struct al_provider_error_s {
  int status;            /* HTTP status, 0 for an in-stream error */
  al_perr_class_t cls;
  char *type;            /* provider error type, or NULL */
  char *message;         /* provider message, or a short synthesized one */
  json_t *body;          /* owned: the parsed body, or a JSON string of the raw bytes */
  bool retryable;        /* 408, 409, 429, >= 500 (x-should-retry decided by caller) */
} al_provider_error_t;

void al_provider_error_free(al_provider_error_t *e);

struct al_pstream_s;

/* decode_flags: how the pipeline sets itself up for a wire format. */
#define AL_PDEC_OWN_INDEXES 1u  /* the decoder numbers blocks itself and may
                                   interleave them: strict_indexes off */
#define AL_PDEC_SSE_FLUSH_EOF 2u /* SSE: flush an unterminated last event
                                    and dispatch event-only blocks */

typedef struct al_provider_s {
  al_provider_kind_t kind;
  const char *name; /* "anthropic", "openai" */
  /* history: borrowed array of normalized (Anthropic-shaped) messages. */
  int (*build_request)(const json_t *history, const al_provider_options_t *o,
                       al_provider_request_t *out);
  /* Classifies a non-2xx body. Never fails except AL_ENOMEM. */
  int (*http_error)(int status, const char *body, size_t len,
                    al_provider_error_t *out);
  /* ---- decode hooks (pstream.c calls them; nothing else switches on the
   * wire format) ---- */
  unsigned decode_flags;
  /* One dispatched SSE event: decode it and drive the aggregator. */
  int (*decode_event)(struct al_pstream_s *s, const al_sse_event_t *ev);
  /* End of body: the validity rules of the format (truncation). */
  int (*decode_finish)(struct al_pstream_s *s);
  /* Frees the format's own state (may be NULL). */
  void (*decode_free)(struct al_pstream_s *s);
  /* `agentloop decode` output: the final object as the official SDK builds
   * it (new ref), or NULL with *err. helpers: 1 add the SDK's helper
   * fields, 0 leave them out, -1 the format's default. NULL: the
   * normalized message. */
  json_t *(*decode_final)(struct al_pstream_s *s, int helpers,
                          const char **err);
} al_provider_t;

extern const al_provider_t al_provider_anthropic;
extern const al_provider_t al_provider_openai;
extern const al_provider_t al_provider_openai_responses;
/* "anthropic" / "openai" / "openai-responses" -> vtable, or NULL. */
const al_provider_t *al_provider_by_name(const char *name);
/* The provider's own endpoint, used when no base URL is configured. */
const char *al_provider_default_base_url(const al_provider_t *p);

int al_provider_build_request(const al_provider_t *p, const json_t *history,
                              const al_provider_options_t *o,
                              al_provider_request_t *out);
int al_provider_http_error(const al_provider_t *p, int status,
                           const char *body, size_t len,
                           al_provider_error_t *out);

/* ---- the decoding pipeline (SSE + decoder + aggregator) ------------------- */

typedef struct al_pstream_options_s {
  al_pstream_event_cb on_event; /* optional */
  void *data;
  /* Use the hand-written fast path for hot deltas (default true). Off:
   * every event goes through a jansson DOM (benchmark baseline, tests). */
  bool fast_path;
  /* Runtime strictness for block indexes (default true): a block start whose
   * index is not the next one, a start while another block is open, or a
   * delta/stop for a block that is not open is a decode error. Off: the
   * Anthropic SDK accumulator's behaviour (push on start, address by index,
   * ignore what does not match) -- `agentloop decode` uses that. */
  bool strict_indexes;
  /* OpenAI: also build the SDK-shaped chat.completion (default true). */
  bool openai_completion;
  /* Limits. */
  size_t max_event;  /* largest SSE event payload (default 8 MiB) */
  size_t max_block;  /* largest accumulated text of one block (default 64 MiB) */
  /* Whole reply: body bytes fed (default 64 MiB), and the tool input of all
   * tool calls together (default 32 MiB); 0 disables. Past either the
   * stream fails with error_type "reply_too_large" / "tool_input_too_large"
   * (not retryable: the same endpoint would send the same). */
  size_t max_reply;
  size_t max_tool_input;
  /* Seed for synthesized ids (OpenAI tool calls without id). */
  uint64_t id_seed;
  /* OpenAI-compatible: the model writes its reasoning inside
   * <think>...</think> in the content (models catalogue think_tags):
   * that part becomes thinking. */
  bool think_tags;
} al_pstream_options_t;

void al_pstream_options_init(al_pstream_options_t *o);
/* The options the agent loop runs with (and `agentloop decode --events`,
 * so that what decode shows is what the loop does). */
void al_pstream_options_runtime(al_pstream_options_t *o);

/* Per-block accumulation state (aggregate.c). */
typedef struct al__pblock_s {
  al_block_type_t type;
  const char *type_name; /* the block's "type" string (owned by block) */
  json_t *block;     /* the block as it will appear in content[] */
  al_buf_t buf;      /* text / thinking / raw partial_json appended */
  json_t *base;      /* the start block's text/thinking value (string) */
  bool stopped;
  bool dirty;        /* buf changed since the block JSON was materialized */
  uint32_t pending_hi; /* high surrogate carried to the next delta, or 0 */
  bool input_delta;  /* an input_json_delta reached this tool block */
} al__pblock_t;

typedef struct al__oai_choice_s al__oai_choice_t;

typedef struct al_pstream_s {
  const al_provider_t *provider;
  int (*decode_event)(struct al_pstream_s *s, const al_sse_event_t *ev);
  al_pstream_options_t opts;
  al_sse_parser_t sse;
  int error;        /* sticky: first error returned */
  bool failed;      /* an ERROR event was emitted */
  bool in_feed;
  uint64_t feed_ts; /* the current feed's ts_ns, 0 until its first event */
  al_pevent_t delta_ev; /* emitted for every delta (aggregate.c emit_delta) */
  /* Anthropic-shaped aggregate. */
  json_t *message;  /* snapshot after message_start, NULL before */
  al__pblock_t *blocks;
  size_t nblocks;
  uint64_t reply_bytes;      /* body bytes fed (max_reply) */
  uint64_t tool_input_bytes; /* input deltas of all tool calls */
  size_t cap_blocks;
  bool message_stopped;
  bool seen_any;    /* any decodable event seen */
  int open_block;   /* strict mode: index of the open block, or -1 */
  /* Scratch for decoded delta strings (reused, bounded). */
  al_buf_t scratch;
  al_buf_t joinbuf; /* surrogate pairs joined across deltas */
  /* OpenAI state. */
  bool oai_done;    /* [DONE] seen */
  json_t *oai_snapshot;
  al__oai_choice_t *oai_choices; /* by choice index */
  size_t oai_nchoices;
  int oai_text_block;   /* normalized block index of open text block, -1 */
  int oai_think_block;  /* ... of the open thinking block, -1 */
  int *oai_tool_block;  /* choice-0 tool call index -> block index */
  size_t oai_ntool;
  char *oai_finish_reason;
  bool oai_marked;      /* the current chunk carries boundary marks */
  bool oai_in_think;    /* think_tags: inside <think>...</think> */
  uint8_t oai_tag_match; /* think_tags: bytes of the next tag matched */
  bool eof_flushed;     /* an unterminated last event was flushed at EOF */
  size_t oai_ncited;    /* Perplexity citations already delivered */
  /* OpenAI Responses state (responses.c). */
  int *rsp_block;       /* output_index -> normalized block index, or -1 */
  size_t rsp_nblock;
  json_t *rsp_final;    /* the response of response.completed/incomplete */
  bool rsp_calls;       /* a function_call item was seen */
  bool in_finish;
  /* Error detail kept after an ERROR event for al_pstream_error_*(). */
  al_perr_kind_t err_kind;
  char *err_message;
  json_t *err_body;
  /* Statistics. */
  uint64_t events;
  uint64_t fast_hits;
  uint64_t slow_hits;
} al_pstream_t;

/* In place. Returns 0 or AL_EINVAL (provider NULL). */
int al_pstream_init(al_pstream_t *s, const al_provider_t *p,
                    const al_pstream_options_t *o);
/* Feeds body bytes. Returns 0, the callback's non-zero value, AL_EAPI
 * after an error event, AL_EPARSE/AL_EPROTO after a decode error,
 * AL_ETOOBIG/AL_ENOMEM; errors are sticky. */
int al_pstream_feed(al_pstream_t *s, const char *bytes, size_t len);
/* End of body. A stream without message_stop (Anthropic) / without chunks
 * or with an unfinished choice (OpenAI) is AL_ETRUNCATED (and an ERROR
 * event with kind DECODE is delivered first). */
int al_pstream_finish(al_pstream_t *s);
/* Feeds one already-parsed SSE event (bypassing the byte parser). */
int al_pstream_sse_event(al_pstream_t *s, const al_sse_event_t *ev);
/* Final normalized message (borrowed; valid until free) or NULL. */
json_t *al_pstream_message(al_pstream_t *s);
/* OpenAI: the finalized chat.completion as the SDK builds it (new ref),
 * or NULL with *err set to a message (static or owned by s). */
json_t *al_pstream_openai_completion(al_pstream_t *s, const char **err);
/* `agentloop decode`'s final object (provider decode_final; see there). */
json_t *al_pstream_final_json(al_pstream_t *s, int helpers, const char **err);
/* The error detail after a failure (NULL when none). */
const char *al_pstream_error_message(const al_pstream_t *s);
json_t *al_pstream_error_body(const al_pstream_t *s);
al_perr_kind_t al_pstream_error_kind(const al_pstream_t *s);
void al_pstream_free(al_pstream_t *s);

/* ---- fast JSON path (fastjson.c) ------------------------------------------ */

typedef enum {
  AL_FJ_NONE = 0,
  AL_FJ_TEXT = 1,     /* text_delta / "text" */
  AL_FJ_THINKING = 2, /* thinking_delta / "thinking" */
  AL_FJ_INPUT = 3     /* input_json_delta / "partial_json" */
} al_fj_kind_t;

typedef struct al_fj_delta_s {
  al_fj_kind_t kind;
  int64_t index;
  /* Decoded UTF-8 (lone surrogates inside the string become U+FFFD). Points
   * into the input when the string had no escapes, else into scratch. */
  const char *text;
  size_t len;
  /* A high surrogate escape ending the string (not emitted in text) and a
   * low surrogate escape starting it (not emitted either): the aggregator
   * pairs them across deltas of one block. 0 when none. */
  uint32_t trail_hi;
  uint32_t lead_lo;
} al_fj_delta_t;

/* Recognises {"type":"content_block_delta","index":N,"delta":{"type":
 * "text_delta"|"thinking_delta"|"input_json_delta", "text"|"thinking"|
 * "partial_json": "..."}} with any whitespace, any key order, and extra
 * keys whose values are strings, numbers, true/false/null. Returns 1 and
 * fills out on success, 0 when the shape is not recognised (or anything is
 * in doubt: the caller then uses jansson), AL_ETOOBIG/AL_ENOMEM. */
int al__fj_parse_delta(const char *data, size_t len, al_buf_t *scratch,
                       al_fj_delta_t *out);
/* The same result through a jansson DOM (the reference and the fallback).
 * Returns 1, 0 (not this shape / invalid JSON), or AL_ENOMEM. */
int al__fj_parse_delta_jansson(const char *data, size_t len,
                               al_buf_t *scratch, al_fj_delta_t *out);
/* A scalar member of a scanned object: its key and its value as raw
 * bytes (a string's without the quotes). type: 's' string, 'n' number,
 * 't' true, 'f' false, 'z' null, 'a' an empty array. */
typedef struct al_fj_member_s {
  const char *key;
  size_t klen;
  const char *val;
  size_t vlen;
  char type;
  bool escaped; /* a string with escapes (val is not its decoded text) */
} al_fj_member_t;

#define AL_FJ_MAX_MEMBERS 24
/* An OpenAI-style chunk of the one hot shape: {..scalars..,"choices":[
 * {..scalars..,"delta":{..scalars..}}]}; every member but choices and
 * delta is in top/choice/delta (index and content included). */
typedef struct al_fj_oai_s {
  al_fj_member_t top[AL_FJ_MAX_MEMBERS];
  al_fj_member_t choice[AL_FJ_MAX_MEMBERS];
  al_fj_member_t delta[AL_FJ_MAX_MEMBERS];
  size_t ntop, nchoice, ndelta;
  int64_t index;         /* the choice's index (an integer) */
  al_fj_delta_t content; /* delta.content decoded (a string) */
} al_fj_oai_t;

/* 1 when data is that shape with an integer choice index and a string
 * delta.content without a surrogate half at either end (decoded into
 * scratch when escaped); 0 otherwise (the caller uses jansson);
 * AL_ETOOBIG/AL_ENOMEM. Like al__fj_parse_delta it validates what it
 * accepts as jansson would. */
int al__fj_parse_oai_chunk(const char *data, size_t len, al_buf_t *scratch,
                           al_fj_oai_t *out);
/* 1 when data is an object whose members are all scalars (or empty
 * arrays, type 'a'), at most max of them, none repeated: *n members in m.
 * 0 otherwise. */
int al__fj_parse_flat(const char *data, size_t len, al_fj_member_t *m,
                      size_t max, size_t *n);
/* A string member decoded as al__fj_parse_delta decodes (surrogate
 * halves at the ends in out->lead_lo/trail_hi): 1, 0 when not a string,
 * -1 when scratch cannot hold it. */
int al__fj_member_string(const al_fj_member_t *m, al_buf_t *scratch,
                         al_fj_delta_t *out);
/* The member named key, or NULL. */
const al_fj_member_t *al__fj_member(const al_fj_member_t *m, size_t n,
                                    const char *key);
/* A number member without fraction or exponent and at most 18 digits. */
bool al__fj_member_int(const al_fj_member_t *m, int64_t *v);
/* Parses provider JSON with JSON_ALLOW_NUL. Lone surrogate escapes, which
 * jansson rejects, are rewritten to \uFFFD first. NULL on failure (err may
 * be NULL). */
json_t *al__provider_json_load(const char *data, size_t len,
                               json_error_t *err);
/* The same, reporting boundary lone surrogates of the hot text values
 * ("text", "thinking", "partial_json") as the fast path does. */
json_t *al__provider_json_load2(const char *data, size_t len,
                                json_error_t *err, uint32_t *lead_lo,
                                uint32_t *trail_hi);
/* The same, for the values of `key` alone (the other hot keys' lone
 * surrogates become U+FFFD): the halves of the one string a decoder uses
 * when the event holds more than one hot value. */
json_t *al__provider_json_load2_key(const char *data, size_t len,
                                    json_error_t *err, uint32_t *lead_lo,
                                    uint32_t *trail_hi, const char *key);
/* Boundary marks (OpenAI, where one chunk has many appendable strings):
 * like al__provider_json_load, but a lone high surrogate escape that ends
 * a string or a lone low one that starts it becomes a 7-byte mark (U+FDD0
 * or U+FDD1, then U+F0000 + the 10 payload bits) instead of U+FFFD, so
 * the appender can join it with the other half in the next chunk. Marks
 * are used only when the data holds no U+FDD0/U+FDD1 of its own; *marked
 * says whether any was written. */
#define AL_MARK_HI 0xFDD0
#define AL_MARK_LO 0xFDD1
#define AL_MARK_LEN 7
json_t *al__provider_json_load_marked(const char *data, size_t len,
                                      json_error_t *err, bool *marked);
/* Removes a leading low mark and a trailing high mark from (*s, *n),
 * reporting their surrogates (0 when absent). */
void al__marks_strip(const char **s, size_t *n, uint32_t *lead_lo,
                     uint32_t *trail_hi);
/* Appends a piece to b (marks are looked for only when `marks`: the
 * chunk it came from was loaded with marks), joining it with *pending_hi (a high half
 * carried from the previous piece of the same field); what cannot be
 * joined becomes U+FFFD. An empty piece keeps the pending half waiting. */
int al__marks_append(al_buf_t *b, uint32_t *pending_hi, const char *s,
                     size_t n, bool marks);
/* Replaces the marks of every string in v by U+FFFD, except the strings
 * listed in keep. */
int al__marks_clear(json_t *v, json_t *const *keep, size_t nkeep);
/* Compact JSON (as json_dumps with JSON_COMPACT | JSON_ENCODE_ANY) with
 * every real spelled as JavaScript's JSON.stringify spells it: shortest
 * round-trip digits, integral values without ".0" (1.0 -> 1, -1.5e3 ->
 * -1500), exponent only beyond 1e21 / below 1e-6, -0 -> 0. For
 * `agentloop decode` output only (the runtime's history keeps jansson's
 * spelling). al_malloc'd, NULL when out of memory. */
char *al__json_dumps_js(const json_t *j);
/* The same text as al__json_dumps_js(j) plus "\n", written to f as it is
 * produced (no copy of the whole document): `agentloop decode`'s output.
 * 0, -EIO or AL_ENOMEM. */
int al__json_write_js(FILE *f, const json_t *j);
/* Extracts a hot delta from a parsed event (1), or 0 if not that shape. */
int al__fj_from_dom(json_t *root, al_buf_t *scratch, al_fj_delta_t *out);
/* The UTF-8 helpers (al__utf8_*, al__json_string_utf8) are in
 * common/utf8.h. */

/* Internal (pstream.c / aggregate.c and the decoders). */
/* OpenAI-style usage -> normalized usage (new object), NULL if not one. */
json_t *al__provider_usage_from_openai(json_t *u);
int al__pstream_emit(al_pstream_t *s, al_pevent_t *ev);
int al__pstream_fail(al_pstream_t *s, al_perr_kind_t kind, const char *type,
                     const char *message, json_t *body);
/* Aggregator operations (normalized model). */
int al__agg_message_start(al_pstream_t *s, json_t *message);
int al__agg_block_start(al_pstream_t *s, int64_t index, json_t *block);
int al__agg_delta(al_pstream_t *s, int64_t index, al_fj_kind_t kind,
                  const char *text, size_t len, uint32_t lead_lo,
                  uint32_t trail_hi);
int al__agg_signature(al_pstream_t *s, int64_t index, json_t *sig);
int al__agg_citation(al_pstream_t *s, int64_t index, json_t *citation);
int al__agg_block_stop(al_pstream_t *s, int64_t index);
int al__agg_message_delta(al_pstream_t *s, json_t *data);
int al__agg_message_stop(al_pstream_t *s);
/* Materializes every block into s->message (text, tool input). */
int al__agg_materialize(al_pstream_t *s);
void al__agg_free(al_pstream_t *s);

#endif
