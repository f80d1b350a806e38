/* Small reads of a libyaml document node, shared by the YAML loaders
 * (models catalogue, tools.d). Each loader keeps its own error reporting:
 * these only answer questions about a node. */
#ifndef AL_COMMON_YAMLNODE_H
#define AL_COMMON_YAMLNODE_H

#include <stdbool.h>
#include <string.h>

#include <yaml.h>

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
