/* Request validation the way the real APIs do it (validate.c): the rules
 * agentloop-mockllm enforces on every request it receives, and the
 * agent's validity gate runs on every request body it builds before
 * sending it (docs/context.md §Validity gate). Pure: jansson in, verdict
 * out, no uv.h. */
#ifndef AL_PROVIDER_VALIDATE_H
#define AL_PROVIDER_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>

typedef struct {
  int status;         /* 0 when valid, else 400 (or 401 for missing auth) */
  char type[48];      /* error type, e.g. "invalid_request_error" */
  char param[64];     /* OpenAI's `param` ("" = null) */
  char message[1024]; /* the API's error text (truncated if very long) */
  /* The rule broken, a stable name for errors and events:
   * tool_use_without_result, tool_result_without_use,
   * duplicate_tool_result, tool_results_first, duplicate_tool_use_id,
   * first_message_user, empty_content, request_shape, auth. */
  char rule[40];
} al_validate_verdict_t;

/* Validates a request body (and, when headers is not NULL, the headers: an
 * object of lower-cased names). Returns true if the request is valid;
 * otherwise false with the verdict filled. Stops at the first problem,
 * like the APIs. */
bool al__validate_anthropic(const json_t *body, const json_t *headers,
                            al_validate_verdict_t *v);
/* OpenAI Responses (POST /v1/responses): model, a non-empty input array of
 * known items, every function_call_output answering an earlier
 * function_call's call_id (once) and every call answered, reasoning items
 * sent back whole (id, encrypted_content, summary) with store: false and
 * include reasoning.encrypted_content, stream: true. */
bool al__validate_responses(const json_t *body, const json_t *headers,
                            al_validate_verdict_t *v);
bool al__validate_openai(const json_t *body, const json_t *headers,
                         al_validate_verdict_t *v);
/* The same with the key check optional: require_key false lets a request
 * without x-api-key / Bearer through (a local server needs no key). */
bool al__validate_anthropic_ex(const json_t *body, const json_t *headers,
                               bool require_key, al_validate_verdict_t *v);
bool al__validate_openai_ex(const json_t *body, const json_t *headers,
                            bool require_key, al_validate_verdict_t *v);

#endif
