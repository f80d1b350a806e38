/* agentloop export (issue 25, docs/export.md): a session's transcript as
 * Markdown or JSONL, read-only, secrets redacted. */
#ifndef AL_CLIENT_EXPORT_H
#define AL_CLIENT_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "client/names.h"
#include "common/common.h"

/* A tool result's text past this many bytes is cut in the Markdown, with
 * a marker saying how much was left out (JSONL keeps it whole). */
#define AL_EXPORT_RESULT_MAX 4096

typedef struct {
  bool md;                 /* Markdown; false: JSONL */
  size_t result_max;       /* 0: AL_EXPORT_RESULT_MAX */
  const char *const *keys; /* configured key values to redact, or NULL */
  size_t nkeys;
} al_export_opts_t;

/* The secrets of s redacted into b (docs/export.md: sk-... keys, the
 * values of Authorization / Proxy-Authorization / x-api-key headers,
 * bearer tokens, and each of keys). AL_ENOMEM or 0. */
int al__export_redact(al_buf_t *b, const char *s, size_t n,
                      const char *const *keys, size_t nkeys);

/* Writes the transcript dir/id.jsonl (and its sub-agents', nested) to out.
 * The hash chain is checked by al__tx_load: records that fail it are left
 * out, and *broken is set (the caller says so). 0, or the load's error
 * with why filled. */
int al__export_session(const char *dir, const char *id,
                       const al_export_opts_t *o, FILE *out, bool *broken,
                       char *why, size_t why_len);

/* The session of the transcripts in dir whose id is arg, else whose
 * title (a title record, found as agentloopd's listing finds it) is
 * exactly arg (al__session_pick). Blocking: the CLI's. */
al_pick_t al__export_find(const char *dir, const char *arg, char *out,
                          size_t out_len, char *why, size_t why_len);

#endif
