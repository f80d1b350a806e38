/* agentloop-mockllm: the scripted model server, embeddable on a caller's loop.
 *
 * A real HTTP/1.1 server (libuv + llhttp) on loopback that answers
 * POST /v1/messages (Anthropic Messages) and POST /v1/chat/completions
 * (OpenAI Chat Completions) by playing a scenario: a YAML list of scripted
 * responses (text, thinking, tool_use blocks, pacing, faults), one per
 * request, rendered in the protocol the request used. Every request is
 * validated like the real API (PROTOCOLS.md §2.3, §3.1); a broken history is
 * answered with a 400 in that API's error shape. The scenario format is
 * documented in docs/mockllm.md.
 *
 * Ownership and threading follow libuv: the caller owns the loop; the server
 * lives on it, never blocks it (the one exception, reading a scenario file,
 * happens in al_mockllm_load_scenario_file or al_mockllm_new before the
 * server starts), and closes asynchronously with al_mockllm_close.
 *
 * Like any libuv server, the embedding process should ignore SIGPIPE (a
 * client hanging up mid-stream would otherwise kill it); the CLI does.
 *
 * The hot path does no JSON work: every event of every response is rendered
 * to bytes once, when the scenario loads, and playback copies those bytes
 * into a bounded per-connection output buffer written in batches. */
#ifndef AL_MOCKLLM_H
#define AL_MOCKLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "provider/validate.h"

typedef struct al_mockllm_s al_mockllm_t;
typedef struct al_mockllm_scenario_s al_mockllm_scenario_t;

/* Which API a request spoke (decided by its path). */
typedef enum {
  AL_MOCKLLM_PROTO_NONE = 0,
  AL_MOCKLLM_PROTO_ANTHROPIC = 1,
  AL_MOCKLLM_PROTO_OPENAI = 2
} al_mockllm_proto_t;

/* ---- scenarios ---------------------------------------------------------- */

/* Parses a scenario file. Blocking file I/O: call it before the loop runs
 * (or let al_mockllm_new do it from options.scenario_path, same caveat).
 * On success *out owns the scenario (al_mockllm_scenario_free, or hand it to
 * al_mockllm_new). On failure returns AL_EPARSE (bad YAML or a bad value),
 * AL_ENOENT/other uv codes (cannot read) or AL_ENOMEM, and writes
 * "FILE:LINE:COL: reason" into err (err may be NULL). */
int al_mockllm_load_scenario_file(const char *path, al_mockllm_scenario_t **out,
                                  char *err, size_t err_len);
/* Same from a string; `name` is used in error messages (e.g. "<test>"). */
int al_mockllm_load_scenario_string(const char *yaml, size_t len,
                                    const char *name,
                                    al_mockllm_scenario_t **out, char *err,
                                    size_t err_len);
void al_mockllm_scenario_free(al_mockllm_scenario_t *s);
/* Number of top-level scripted responses (tracks not counted). */
size_t al_mockllm_scenario_count(const al_mockllm_scenario_t *s);

/* ---- server ------------------------------------------------------------- */

typedef struct {
  /* Listen address. host defaults to "127.0.0.1"; port 0 = ephemeral. A
   * host that is not loopback is refused (AL_EINVAL) unless allow_remote. */
  const char *host;
  int port;
  bool allow_remote;
  /* The scenario, exactly one of: a loaded scenario (ownership passes to the
   * server when al_mockllm_new succeeds), YAML text, or a file path (read
   * with blocking I/O inside al_mockllm_new). None: every request gets a
   * short default reply. */
  al_mockllm_scenario_t *scenario;
  const char *scenario_yaml;
  const char *scenario_path;
  /* Keep every request in memory (al_mockllm_record_get). Default off. */
  bool record;
  /* Also append each request as one NDJSON line to this file, written
   * asynchronously with uv_fs_write. NULL = no file. */
  const char *record_path;
  /* Validate requests like the real API. Default on. */
  bool validate;
  /* Answer a request without an API key (x-api-key or Bearer) with the
   * API's 401. Default off: like any local server, the mock serves
   * clients that send no key (agentloop sends none to a non-public URL
   * when none is set). */
  bool require_api_key;
  /* Put the server's uv_hrtime() at send time on each event as an SSE
   * `id: <ns>` line. Default off; a scenario may also turn it on. */
  bool timestamps;
  /* TLS: PEM certificate chain and private key files (both, read with
   * blocking I/O inside al_mockllm_new). NULL: plaintext HTTP. Over TLS
   * the same engine plays the same bytes; byte counts of faults
   * (reset_after_bytes, drip) count plaintext. */
  const char *tls_cert;
  const char *tls_key;
  /* Request limits: header block (431 beyond) and body (413 beyond). */
  size_t max_header_bytes;
  size_t max_body_bytes;
  /* Where al_mockllm_new writes a reason on failure (may be NULL). */
  char *err;
  size_t err_len;
} al_mockllm_options_t;

void al_mockllm_options_init(al_mockllm_options_t *o);

/* Creates the server on `loop`, binds and listens (synchronously: the port
 * is known when this returns). Returns 0 and *out, or a negative code
 * (AL_EPARSE scenario, AL_EINVAL options, uv bind errors such as
 * UV_EADDRINUSE, AL_ENOMEM) with a reason in o->err. On failure no handle
 * is left on the loop and the scenario in o->scenario is not taken. */
int al_mockllm_new(uv_loop_t *loop, const al_mockllm_options_t *o,
                   al_mockllm_t **out);
/* The bound port (useful with port 0). */
int al_mockllm_port(const al_mockllm_t *m);
/* Stops listening, closes every connection (playing streams are cut), waits
 * for pending record-file writes, then calls cb (may be NULL) on a later
 * loop iteration and frees the server. Call once. */
void al_mockllm_close(al_mockllm_t *m, void (*cb)(al_mockllm_t *m));

/* Replaces the scenario (ownership passes to the server) and rewinds to its
 * first response. AL_EBUSY while a response is playing (the old scenario's
 * bytes are in use); the caller keeps `s` then. */
int al_mockllm_set_scenario(al_mockllm_t *m, al_mockllm_scenario_t *s);
/* Rewinds to the first response of the scenario and of each track. */
void al_mockllm_rewind(al_mockllm_t *m);

/* The embedder's pointer. */
void al_mockllm_set_data(al_mockllm_t *m, void *data);
void *al_mockllm_get_data(const al_mockllm_t *m);

typedef struct {
  uint64_t connections_accepted;
  uint64_t connections_active;
  uint64_t requests;            /* complete requests parsed */
  uint64_t responses_played;    /* scenario responses started */
  uint64_t validation_failures; /* 400/401 answers from the validator */
  uint64_t events_sent;         /* SSE events written */
  uint64_t bytes_sent;          /* all bytes written */
} al_mockllm_stats_t;

void al_mockllm_stats(const al_mockllm_t *m, al_mockllm_stats_t *out);

/* ---- recorded requests (options.record) ---------------------------------- */

typedef struct {
  char *method;
  char *path;          /* without the query string */
  json_t *headers;     /* object: lower-cased name -> value (last wins) */
  json_t *body;        /* the parsed JSON body, NULL if not JSON / empty */
  al_mockllm_proto_t proto;
  bool valid;          /* the validator's verdict (true if validation off) */
  int status;          /* the HTTP status answered */
  char *error;         /* validation error message, NULL when valid */
  int response_index;  /* response played (an index in its track's
                        * responses, or the top level's), -1 if none */
  int track;           /* the scenario's track it went to, -1: top level */
  uint64_t arrival_ns; /* uv_hrtime() when the whole request was parsed */
} al_mockllm_record_t;

size_t al_mockllm_record_count(const al_mockllm_t *m);
/* Borrowed; valid until al_mockllm_record_clear or close. NULL if i is out
 * of range. */
const al_mockllm_record_t *al_mockllm_record_get(const al_mockllm_t *m,
                                                 size_t i);
void al_mockllm_record_clear(al_mockllm_t *m);
/* The message of the most recent validation failure, or NULL (kept even
 * with recording off). Borrowed; valid until the next request. */
const char *al_mockllm_last_error(const al_mockllm_t *m);

/* ---- the validator, callable without a server ----------------------------- */

typedef al_validate_verdict_t al_mockllm_verdict_t;

/* Validates a request body (and, when headers is not NULL, the headers: an
 * object of lower-cased names). Returns true if the request is valid;
 * otherwise false with the verdict filled. The rules live in the library
 * (provider/validate.c), where the agent's validity gate runs them too. */
static inline bool al_mockllm_validate_anthropic(const json_t *body,
                                                 const json_t *headers,
                                                 al_mockllm_verdict_t *v) {
  return al__validate_anthropic(body, headers, v);
}
static inline bool al_mockllm_validate_openai(const json_t *body,
                                              const json_t *headers,
                                              al_mockllm_verdict_t *v) {
  return al__validate_openai(body, headers, v);
}
/* The same, with the key check optional (require_key false: a request with
 * no key passes, as a local server would take it). */
static inline bool al_mockllm_validate_anthropic_ex(const json_t *body,
                                                    const json_t *headers,
                                                    bool require_key,
                                                    al_mockllm_verdict_t *v) {
  return al__validate_anthropic_ex(body, headers, require_key, v);
}
static inline bool al_mockllm_validate_openai_ex(const json_t *body,
                                                 const json_t *headers,
                                                 bool require_key,
                                                 al_mockllm_verdict_t *v) {
  return al__validate_openai_ex(body, headers, require_key, v);
}
/* POST /v1/responses (al__validate_responses). */
static inline bool al_mockllm_validate_responses(const json_t *body,
                                                 const json_t *headers,
                                                 al_mockllm_verdict_t *v) {
  return al__validate_responses(body, headers, v);
}

#endif
