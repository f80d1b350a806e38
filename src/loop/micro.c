/* Micro-compaction (docs/context.md §Micro-compaction, seed 002): before
 * a request, old results of compactable tools are replaced by a short
 * placeholder, when that saves enough.
 *
 * Invariants:
 *  - ids and the tool_use/tool_result pairing are never touched: only the
 *    `content` of a tool_result changes, in a new block and a new message
 *    object (history members are shared by reference elsewhere);
 *  - a cleared result stays cleared, and its placeholder depends only on
 *    the tool name, the call id and the original size, so the request's
 *    prefix stays byte-stable for the provider's prompt cache;
 *  - a result holding images or PDFs is a candidate whatever its tool
 *    (an image is the costliest output there is), and its size counts
 *    its images by their token cost, not their base64;
 *  - the request-size guard: when the images and PDFs left would exceed
 *    what one request may carry (AL_MICRO_MEDIA_MAX_B64, AL_MICRO_MEDIA_MAX),
 *    the oldest media results are cleared until they fit, whatever
 *    min_tokens and keep say (an image is cheap in tokens but not in
 *    bytes); the newest result always stays;
 *  - otherwise the `keep` most recent results of compactable tools are never
 *    cleared, and nothing is cleared unless the total saved reaches
 *    min_tokens (a small saving would only break the cache). */
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "common/media.h"
#include "loop/micro.h"

static const char *str(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);

  return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool is_type(const json_t *b, const char *t) {
  const char *s = str(b, "type");

  return s != NULL && strcmp(s, t) == 0;
}

bool al__micro_is_cleared(const json_t *result) {
  const char *c = str(result, "content");

  return c != NULL && strncmp(c, AL_MICRO_PREFIX, strlen(AL_MICRO_PREFIX)) == 0;
}

/* Bytes of a result's content as the model sees it; an image counts as
 * 4 bytes per token it costs, not by its base64 (common/media.h). */
static size_t content_bytes(const json_t *result) {
  const json_t *c = json_object_get(result, "content");
  size_t bytes, b64 = 0;
  int64_t tokens = 0;
  json_t *wrap;

  if (json_is_string(c)) {
    return json_string_length(c);
  }
  bytes = json_dumpb(c, NULL, 0, JSON_COMPACT);
  /* al__media_scan walks messages: wrap the content as one. */
  wrap = json_pack("[{s:O}]", "content", c);
  al__media_scan(wrap, &b64, &tokens);
  json_decref(wrap);
  return bytes - AL_MIN(bytes, b64) + (size_t)tokens * 4;
}

/* A result that holds images or PDFs: cleared like the output of a
 * compactable tool, whatever tool gave it. */
static bool has_media(const json_t *result) {
  const json_t *c = json_object_get(result, "content");

  return json_is_array(c) && al__media_has_blocks(c);
}

int al__micro_placeholder(char *buf, size_t size, const char *tool,
                          const char *id, size_t bytes) {
  return snprintf(buf, size,
                  AL_MICRO_PREFIX " to save context: the output of %s (call "
                  "%s, %zu bytes). Call " AL_MICRO_TOOL " with {\"call_id\": "
                  "\"%s\"} to read it again.]",
                  tool, id, bytes, id);
}

static bool listed(const char *const *names, const char *name) {
  size_t i;

  for (i = 0; names != NULL && names[i] != NULL; i++) {
    if (name != NULL && strcmp(names[i], name) == 0) {
      return true;
    }
  }
  return false;
}

/* Base64 characters and count of the images and PDFs of a result. */
static void media_size(const json_t *result, size_t *chars, size_t *count) {
  const json_t *c = json_object_get(result, "content");
  const json_t *b;
  size_t i;

  *chars = *count = 0;
  json_array_foreach(c, i, b) {
    const json_t *d = json_object_get(json_object_get(b, "source"), "data");

    if ((is_type(b, "image") || is_type(b, "document")) && json_is_string(d)) {
      *chars += json_string_length(d);
      *count += 1;
    }
  }
}

static const json_t *cand_block(const json_t *msgs, const json_t *cand,
                                size_t i) {
  const json_t *at = json_array_get(cand, i);

  return json_array_get(
      json_object_get(json_array_get(msgs, (size_t)json_integer_value(
                                               json_array_get(at, 0))),
                      "content"),
      (size_t)json_integer_value(json_array_get(at, 1)));
}

/* The request-size guard: the media results to clear, oldest first, so
 * that what stays fits one request (AL_MICRO_MEDIA_MAX_B64 of base64,
 * AL_MICRO_MEDIA_MAX images and PDFs), whatever min_tokens says; the
 * newest result always stays. Sets force[i] per candidate; true when
 * any. */
static bool media_guard(const json_t *msgs, const json_t *cand, bool *force) {
  size_t n = json_array_size(cand), i, chars, count;
  size_t total = 0, items = 0;
  bool any = false;

  for (i = 0; i < n; i++) {
    media_size(cand_block(msgs, cand, i), &chars, &count);
    total += chars;
    items += count;
  }
  for (i = 0; i + 1 < n && (total > AL_MICRO_MEDIA_MAX_B64 ||
                            items > AL_MICRO_MEDIA_MAX);
       i++) {
    media_size(cand_block(msgs, cand, i), &chars, &count);
    if (count > 0) {
      force[i] = true;
      any = true;
      total -= chars;
      items -= count;
    }
  }
  return any;
}

int64_t al__micro_compact(json_t *msgs, const al_micro_options_t *o,
                          json_t *originals, json_t *cleared) {
  json_t *names = json_object(); /* call id -> tool name */
  json_t *cand = json_array();   /* [msg index, block index] of results */
  const json_t *m;
  size_t i, k;
  int64_t saved_bytes = 0, forced_bytes = 0;
  int64_t saved;
  size_t n_cand;
  bool *force = NULL;
  bool forced, regular;

  /* Every result of a compactable tool, oldest first. */
  json_array_foreach(msgs, i, m) {
    const json_t *b;

    json_array_foreach(json_object_get(m, "content"), k, b) {
      if (is_type(b, "tool_use") && str(b, "id") != NULL &&
          str(b, "name") != NULL) {
        json_object_set_new(names, str(b, "id"), json_string(str(b, "name")));
      } else if (is_type(b, "tool_result") &&
                 (has_media(b) ||
                  listed(o->compactable,
                         str(names, str(b, "tool_use_id")
                                        ? str(b, "tool_use_id")
                                        : "")))) {
        json_array_append_new(cand, json_pack("[I,I]", (json_int_t)i,
                                              (json_int_t)k));
      }
    }
  }
  n_cand = json_array_size(cand);
  force = n_cand > 0 ? al_calloc(n_cand, sizeof(*force)) : NULL;
  forced = force != NULL && media_guard(msgs, cand, force);
  if (n_cand <= o->keep && !forced) {
    goto out_none;
  }
  /* What clearing every older one (and the forced ones) would save. */
  for (i = 0; i < n_cand; i++) {
    const json_t *at = json_array_get(cand, i);
    const json_t *b = json_array_get(
        json_object_get(json_array_get(msgs, (size_t)json_integer_value(
                                                 json_array_get(at, 0))),
                        "content"),
        (size_t)json_integer_value(json_array_get(at, 1)));
    char ph[512];
    const char *id = str(b, "tool_use_id");
    size_t bytes = content_bytes(b);
    int plen;

    if (al__micro_is_cleared(b)) {
      continue;
    }
    plen = al__micro_placeholder(ph, sizeof(ph), str(names, id), id, bytes);
    if ((int64_t)bytes > plen && i + o->keep < n_cand) {
      saved_bytes += (int64_t)bytes - plen;
    }
    if (force != NULL && force[i] && (int64_t)bytes > plen) {
      /* tokens, as the estimate counts them (an image by its pixels) */
      forced_bytes += (int64_t)bytes - plen;
    }
  }
  saved = (int64_t)((double)saved_bytes / 4.0 * o->ratio);
  regular = saved > 0 && saved >= o->min_tokens;
  if (!regular && !forced) {
    goto out_none;
  }
  if (!regular) {
    saved = AL_MAX((int64_t)((double)forced_bytes / 4.0 * o->ratio), 1);
  }
  for (i = 0; i < n_cand; i++) {
    const json_t *at = json_array_get(cand, i);
    size_t mi = (size_t)json_integer_value(json_array_get(at, 0));
    size_t bi = (size_t)json_integer_value(json_array_get(at, 1));
    json_t *msg = json_array_get(msgs, mi);
    json_t *content = json_object_get(msg, "content");
    json_t *b = json_array_get(content, bi);
    const char *id = str(b, "tool_use_id");
    char ph[512];
    json_t *nb;
    json_t *nc;
    json_t *nm;

    if (!(regular && i + o->keep < n_cand) && !(force != NULL && force[i])) {
      continue;
    }
    if (al__micro_is_cleared(b) || content_bytes(b) <= 1) {
      continue;
    }
    al__micro_placeholder(ph, sizeof(ph), str(names, id), id,
                          content_bytes(b));
    if (strlen(ph) >= content_bytes(b) && !(force != NULL && force[i])) {
      continue; /* already shorter than its placeholder */
    }
    if (originals != NULL) {
      json_object_set(originals, id, json_object_get(b, "content"));
    }
    if (cleared != NULL) {
      json_array_append_new(cleared, json_string(id));
    }
    /* Copy on write: a new block, content array and message. */
    nb = json_copy(b);
    json_object_set_new(nb, "content", json_string(ph));
    nc = json_copy(content);
    json_array_set_new(nc, bi, nb);
    nm = json_copy(msg);
    json_object_set_new(nm, "content", nc);
    json_array_set_new(msgs, mi, nm);
  }
  json_decref(names);
  json_decref(cand);
  al_free(force);
  return saved;
out_none:
  json_decref(names);
  json_decref(cand);
  al_free(force);
  return 0;
}

size_t al__micro_clear_ids(json_t *msgs, const json_t *ids) {
  json_t *names = json_object();
  size_t n = 0;
  size_t i, k;
  json_t *m;

  json_array_foreach(msgs, i, m) {
    json_t *content = json_object_get(m, "content");
    json_t *b;

    json_array_foreach(content, k, b) {
      const char *id = str(b, "tool_use_id");
      const json_t *v;
      size_t j;
      bool wanted = false;

      if (is_type(b, "tool_use") && str(b, "id") != NULL &&
          str(b, "name") != NULL) {
        json_object_set_new(names, str(b, "id"), json_string(str(b, "name")));
        continue;
      }
      if (!is_type(b, "tool_result") || id == NULL || al__micro_is_cleared(b)) {
        continue;
      }
      json_array_foreach(ids, j, v) {
        wanted = wanted || (json_is_string(v) &&
                            strcmp(json_string_value(v), id) == 0);
      }
      if (wanted) {
        char ph[512];
        json_t *nb = json_copy(b);
        json_t *nc = json_copy(content);
        json_t *nm = json_copy(m);

        al__micro_placeholder(ph, sizeof(ph),
                              str(names, id) ? str(names, id) : "a tool", id,
                              content_bytes(b));
        json_object_set_new(nb, "content", json_string(ph));
        json_array_set_new(nc, k, nb);
        json_object_set_new(nm, "content", nc);
        json_array_set_new(msgs, i, nm);
        m = nm;
        content = nc;
        n++;
      }
    }
  }
  json_decref(names);
  return n;
}
