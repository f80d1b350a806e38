/* Helpers shared between the files of the provider layer (not for other
 * layers: they use provider.h). */
#ifndef AL_PROVIDER_INT_H
#define AL_PROVIDER_INT_H

#include "provider/provider.h"

int al__provider_add_header(al_provider_request_t *r, const char *name,
                            const char *value);
/* Sets method, path (prefix + suffix) and the compact JSON body. */
int al__provider_finish_request(al_provider_request_t *r, const char *prefix,
                                const char *suffix, json_t *body);
/* The OpenAI-style tail of a request: finish_request with suffix, JSON
 * content-type and accept (event stream when o->stream), and a bearer
 * authorization when o->api_key is set. Shared by Chat Completions and
 * Responses. */
int al__provider_finish_openai(al_provider_request_t *r,
                               const al_provider_options_t *o,
                               const char *suffix, json_t *body);
al_perr_class_t al__provider_class_from_type(const char *type);
al_perr_class_t al__provider_class_from_status(int status);
int al__provider_http_error(int status, const char *body, size_t len,
                            al_provider_error_t *out);

/* Same bytes? (ptr, len) against a C string literal. */
static inline bool al__provider_eq(const char *p, size_t n, const char *lit) {
  size_t l = strlen(lit);
  return n == l && memcmp(p, lit, l) == 0;
}

/* Tool-result media for the OpenAI APIs (media_oai.c). */
bool al__oai_is_media(const json_t *blk);
/* "data:<media_type>;base64,<data>" of an image/document block. */
json_t *al__oai_data_url(const json_t *blk);
/* The text of a tool_result content, each image/PDF named "[image
 * image/png: <where>]". A string content as is. */
json_t *al__oai_tool_text(const json_t *content, const char *where);
/* Appends a naming text part and the image_url / file parts of a
 * tool_result content's media to parts. 0 or AL_ENOMEM. */
int al__oai_chat_media_parts(const json_t *content, const char *call_id,
                             json_t *parts);
/* function_call_output.output for an array content: input_text,
 * input_image, input_file items. NULL for a string content. */
json_t *al__oai_responses_output(const json_t *content);

#endif
