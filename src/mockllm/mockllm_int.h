/* Internals shared by the mockllm sources: the parsed scenario, its
 * pre-rendered event lists, and the renderers.
 *
 * A scenario is immutable once loaded except for the lazily built
 * non-streaming bodies (single-threaded, so caching them is safe). Event
 * bytes live as long as the scenario; connections point into them. */
#ifndef AL_MOCKLLM_INT_H
#define AL_MOCKLLM_INT_H

#include "common/common.h"
#include "mockllm/mockllm.h"

/* Default limits. */
#define AL__MOCK_MAX_HEADER_BYTES (64 * 1024)
#define AL__MOCK_MAX_BODY_BYTES (32 * 1024 * 1024)

typedef enum {
  AL__BLK_TEXT,
  AL__BLK_THINKING,
  AL__BLK_REDACTED,
  AL__BLK_TOOL_USE,
  AL__BLK_REPEAT_TEXT,
  AL__BLK_PING
} al__mock_blk_kind_t;

typedef struct {
  al__mock_blk_kind_t kind;
  char *text;       /* text / thinking / redacted data / repeat unit */
  char *signature;  /* thinking */
  char *id;         /* tool_use */
  char *name;       /* tool_use */
  char *input;      /* tool_use input as JSON text (maybe invalid if raw) */
  uint32_t chunks;  /* split text into this many deltas (0 = unset) */
  uint32_t chunk_size; /* or deltas of this many bytes (0 = unset) */
  uint32_t pieces;  /* tool_use: partial_json pieces (default 1) */
  uint64_t count;   /* repeat_text */
  int64_t delay_ms; /* per-event delay inside this block, -1 = inherit */
} al__mock_block_t;

/* Event flags. */
#define AL__EV_PING 1u    /* keep-alive, not counted by error_event_after */
#define AL__EV_DONE 2u    /* OpenAI [DONE] */
#define AL__EV_USAGE 4u   /* carries the input counts (usage_from_request) */

typedef struct {
  char *bytes; /* the SSE event, ending with the blank line, no id line */
  size_t len;
  uint32_t delay_ms; /* before this event (each repetition) */
  uint32_t flags;
  uint64_t repeat;   /* >= 1 */
} al__mock_event_t;

typedef struct {
  al__mock_event_t *v;
  size_t n;
  size_t cap;
} al__mock_events_t;

/* Rendered variants of one response. */
typedef enum {
  AL__R_ANTHROPIC = 0,
  AL__R_OPENAI = 1,       /* no usage */
  AL__R_OPENAI_USAGE = 2, /* stream_options.include_usage */
  AL__R_RESPONSES = 3,    /* OpenAI Responses API (/v1/responses) */
  AL__R_COUNT = 4
} al__mock_variant_t;

typedef enum { AL__XFER_DEFAULT = 0, AL__XFER_CHUNKED, AL__XFER_CLOSE } al__mock_xfer_t;

typedef struct {
  int line; /* 1-based, for messages */
  /* reply */
  al__mock_block_t *blocks;
  size_t nblocks;
  char *model;
  char *id;     /* Anthropic message id */
  char *oai_id; /* OpenAI completion id */
  char *stop_reason; /* NULL = derived */
  int64_t in_tokens, out_tokens, cache_create, cache_read;
  uint32_t delay_ms;
  uint32_t first_byte_delay_ms;
  al__mock_xfer_t xfer;
  json_t *headers; /* extra response headers: object name -> string */
  /* expect_request: the request body (compact JSON) must contain / must
   * not contain these strings, else a 400 (NULL: no check). */
  char *expect_contains;
  char *expect_not_contains;
  /* faults */
  int status;       /* 0 = 200 reply */
  int64_t retry_after; /* -1 = none */
  char *error_type;
  char *error_message;
  char *error_code;  /* OpenAI `code` */
  int64_t error_event_after; /* -1 = none */
  char *error_event_type;
  int64_t reset_after_bytes; /* -1 = none */
  bool stall_after_headers;
  bool pings_only;
  uint32_t ping_interval_ms;
  uint32_t drip_bytes;
  uint32_t drip_interval_ms;
  uint64_t drip_seed;  /* != 0: each slice 1..drip_bytes, sizes from it */
  /* raw: the body played verbatim for every protocol (recorded captures of
   * real servers), instead of a rendered reply. */
  char *raw;
  size_t raw_len;
  /* rendered */
  al__mock_events_t ev[AL__R_COUNT];
  char *body[2]; /* non-streaming JSON bodies (anthropic, openai), lazy */
  size_t body_len[2];
} al__mock_response_t;

typedef enum {
  AL__EXH_REPEAT_LAST = 0,
  AL__EXH_ERROR,
  AL__EXH_CYCLE
} al__mock_exhausted_t;

/* A track: its own script, played to the requests its match selects (a
 * parent and its sub-agents from one server, whatever order their requests
 * arrive in). Every given condition must hold; a condition holds when one
 * text part of that place contains the string. */
typedef struct {
  int line;
  char *first_user; /* the first user message's text; NULL: not checked */
  char *system;     /* the system prompt's text; NULL: not checked */
  size_t first;     /* its responses: responses[first .. first + n) */
  size_t n;
  al__mock_exhausted_t on_exhausted;
  /* Playback state, written only by the server that owns the scenario
   * (reset by al_mockllm_set_scenario and al_mockllm_rewind). */
  size_t cursor;
} al__mock_track_t;

struct al_mockllm_scenario_s {
  char *name;
  /* Every response: the top-level ones first (n of them, possibly none
   * when there are tracks), then each track's, n_all in total. */
  al__mock_response_t *responses;
  size_t n;
  size_t n_all;
  al__mock_track_t *tracks;
  size_t ntracks;
  al__mock_exhausted_t on_exhausted;
  bool timestamps;
  int64_t created; /* OpenAI `created`, fixed at load */
  /* OpenAI: the field an assistant message with tool_calls must carry
   * (reasoning_content: DeepSeek's 400; reasoning_details: a non-empty
   * array), or NULL. */
  char *require_reasoning;
  /* usage_from_request: input counts from the request's size (0: off),
   * and the simulated prompt cache (the prefix shared with the previous
   * request counts as cache read). */
  int64_t usage_bytes_per_token;
  bool usage_cache;
};

/* track.c: the first track whose match holds for this request body (any
 * protocol's shape), or -1 (the top-level responses). */
int al__mockllm_track_pick(const al_mockllm_scenario_t *s, const json_t *body);

/* render.c */
/* Compact JSON text of j in al_malloc'd memory (jansson's own allocator may
 * differ); *len gets the length when len is not NULL. NULL on failure. */
char *al__mockllm_dumps(const json_t *j, size_t *len);
int al__mockllm_render(al_mockllm_scenario_t *s, al__mock_response_t *r,
                       size_t index);
/* Builds (once) the non-streaming body for proto; returns 0 or AL_ENOMEM. */
int al__mockllm_render_body(al_mockllm_scenario_t *s, al__mock_response_t *r,
                            al_mockllm_proto_t proto);
/* The stop reason as played (explicit or derived). */
const char *al__mockllm_stop_reason(const al__mock_response_t *r);
/* Default error type/message for an HTTP status in each protocol. */
const char *al__mockllm_error_type(int status, al_mockllm_proto_t proto);
const char *al__mockllm_error_message(int status);
/* An error body in the protocol's shape (jansson-encoded, al_malloc'd). */
char *al__mockllm_error_body(al_mockllm_proto_t proto, const char *type,
                             const char *message, const char *param,
                             const char *code, const char *request_id);
void al__mockllm_response_free(al__mock_response_t *r);
/* Rewrites a usage-carrying event (AL__EV_USAGE) with these input counts
 * (`in` uncached, `cached` read from the cache) into out. */
int al__mockllm_usage_rewrite(const al__mock_event_t *ev,
                              al_mockllm_proto_t proto, int64_t in,
                              int64_t cached, al_buf_t *out);
/* A fixed reply used when there is no scenario. */
int al__mockllm_default_scenario(al_mockllm_scenario_t **out);

/* tls.c: the TLS listener's sessions (mbedtls, server side) over memory
 * buffers. One al__mock_tls_t per server, one al__mock_tls_conn_t per
 * connection. */
typedef struct al__mock_tls_s al__mock_tls_t;
typedef struct al__mock_tls_conn_s al__mock_tls_conn_t;
/* Receives decrypted bytes; returns false to stop feeding (the connection
 * is closing: the rest of the ciphertext is dropped). */
typedef bool (*al__mock_tls_plain_cb)(void *arg, const char *data, size_t len);

/* Loads the certificate chain and key (PEM files, blocking). 0, or AL_EINVAL
 * / AL_ENOMEM with a reason in err. */
int al__mock_tls_new(const char *cert, const char *key, al__mock_tls_t **out,
                     char *err, size_t errlen);
void al__mock_tls_free(al__mock_tls_t *t);
al__mock_tls_conn_t *al__mock_tls_conn_new(al__mock_tls_t *t);
void al__mock_tls_conn_free(al__mock_tls_conn_t *c);
/* Feeds received ciphertext: advances the handshake (its records are
 * appended to `records`, to be sent), then hands every decrypted byte to
 * cb. 0, AL_EOF (the peer closed the session) or AL_ETLS. */
int al__mock_tls_feed(al__mock_tls_conn_t *c, const char *data, size_t len,
                      al_buf_t *records, al__mock_tls_plain_cb cb, void *arg);
/* Encrypts len plaintext bytes into records appended to `records`. AL_ETLS
 * before the handshake completed or after a failure. */
int al__mock_tls_encrypt(al__mock_tls_conn_t *c, const char *data, size_t len,
                         al_buf_t *records);
/* Appends a close_notify alert (best effort; nothing before the handshake). */
void al__mock_tls_close_notify(al__mock_tls_conn_t *c, al_buf_t *records);

#endif
