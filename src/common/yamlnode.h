/* The one way agentloop reads YAML (config.yaml, the models catalogue,
 * tools.d, mockllm scenarios), and small reads of a document's nodes.
 *
 * al_yaml_load builds libyaml's document (every node keeps its line and
 * column) from the parser's events itself, instead of yaml_parser_load,
 * so that a document is bounded before any loader walks it:
 *  - nesting: deeper than AL_YAML_MAX_DEPTH is refused at the node that
 *    goes too deep (libyaml's scanner costs O(depth) per token, so 195 KB
 *    of '[' took over 30 s; the bound stops it after a constant amount);
 *  - aliases: an alias is the node it names, not a copy, so a loader that
 *    walks the tree meets the anchored node once per alias. The size a
 *    full walk meets (nodes plus scalar bytes, every alias counted as its
 *    node's whole size) is summed as the document is built and may not
 *    pass AL_YAML_EXPAND_PER_BYTE x the file's size + AL_YAML_EXPAND_FLOOR
 *    (a "billion laughs" file of 341 bytes expands to 10^9); at most
 *    AL_YAML_MAX_ALIASES aliases; an alias inside the node it names (a
 *    cycle) is refused.
 * A document without aliases always fits, and the work is linear in the
 * file's size. Each loader keeps its own error reporting: al_yaml_load
 * gives the place and the reason, the other helpers only answer questions
 * about a node. */
#ifndef AL_COMMON_YAMLNODE_H
#define AL_COMMON_YAMLNODE_H

#include <stdbool.h>
#include <string.h>

#include <yaml.h>

#define AL_YAML_MAX_DEPTH 64
#define AL_YAML_MAX_ALIASES 4096
#define AL_YAML_EXPAND_PER_BYTE 4
#define AL_YAML_EXPAND_FLOOR ((size_t)256 * 1024)

/* Why a document was refused: 1-based place of the problem (libyaml's
 * problem mark, else its context mark), libyaml's problem and context
 * texts or ours (context may be empty), and the line of the context. */
typedef struct al_yaml_error_s {
  int line, col;
  int context_line;
  int nomem; /* out of memory, not a problem of the file */
  char problem[256];
  char context[128];
} al_yaml_error_t;

/* Parses the first document of text[0..len) into *doc, bounded as above.
 * 0: *doc is filled (maybe with no root node: an empty file) and the
 * caller frees it with yaml_document_delete. AL_EPARSE (the file) or
 * AL_ENOMEM: *doc needs no freeing and *e says why and where. */
int al_yaml_load(yaml_document_t *doc, const char *text, size_t len,
                 al_yaml_error_t *e);

static inline bool al_yaml_is_scalar(const yaml_node_t *n) {
  return n != NULL && n->type == YAML_SCALAR_NODE;
}

/* The scalar's text; n must be a scalar. */
static inline const char *al_yaml_scalar(const yaml_node_t *n) {
  return (const char *)n->data.scalar.value;
}

/* Written without quotes (so `true` and `12` are not strings). */
static inline bool al_yaml_plain(const yaml_node_t *n) {
  return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Why a node cannot be a string value, or NULL when it can: not a scalar,
 * or a NUL byte inside (C strings would silently cut it). */
static inline const char *al_yaml_string_problem(const yaml_node_t *n) {
  if (!al_yaml_is_scalar(n)) {
    return "must be a string";
  }
  if (strlen(al_yaml_scalar(n)) != n->data.scalar.length) {
    return "contains a NUL byte";
  }
  return NULL;
}

/* A plain `true` or `false`: 1 or 0; anything else -1. */
static inline int al_yaml_bool(const yaml_node_t *n) {
  if (!al_yaml_is_scalar(n) || !al_yaml_plain(n)) {
    return -1;
  }
  if (strcmp(al_yaml_scalar(n), "true") == 0) {
    return 1;
  }
  return strcmp(al_yaml_scalar(n), "false") == 0 ? 0 : -1;
}

#endif
