/* al_yaml_load (yamlnode.h): libyaml's events composed into its document
 * API by us, so that depth, alias count and the size a walk of the tree
 * meets are bounded while the document is built.
 *
 * Nodes are added in the order libyaml's own composer adds them (a
 * collection when it starts), so the root is node 1 as loaders expect.
 * The expanded size is one running sum: a scalar adds 1 + its length, a
 * collection 1, an alias the size of the node it names, which is known
 * because that node ended before (else the alias is a cycle). A
 * collection's size is the sum's growth between its start and its end. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/common.h"
#include "common/yamlnode.h"

typedef struct {
  int id;
  size_t start; /* the running sum when the collection started */
  int key;      /* a mapping's key waiting for its value, 0: none */
} open_t;

typedef struct {
  yaml_document_t *doc;
  al_yaml_error_t *e;
  json_t *anchors;    /* anchor -> node id */
  size_t *size;       /* by node id - 1: expanded size, 0 while open */
  size_t n_size, cap_size;
  open_t stack[AL_YAML_MAX_DEPTH];
  int depth;
  size_t total, limit, aliases;
} comp_t;

static int refuse(comp_t *c, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(comp_t *c, const yaml_mark_t *m, const char *fmt, ...) {
  va_list ap;

  c->e->line = (int)m->line + 1;
  c->e->col = (int)m->column + 1;
  c->e->context_line = c->e->line;
  c->e->context[0] = '\0';
  va_start(ap, fmt);
  vsnprintf(c->e->problem, sizeof(c->e->problem), fmt, ap);
  va_end(ap);
  return AL_EPARSE;
}

static int nomem(comp_t *c, const yaml_mark_t *m) {
  c->e->nomem = 1;
  (void)refuse(c, m, "out of memory");
  return AL_ENOMEM;
}

/* The walk grows by n; refused past the limit. */
static int grow(comp_t *c, const yaml_mark_t *m, size_t n) {
  if (n > c->limit - c->total) {
    return refuse(c, m, "aliases expand this document past %zu nodes and "
                        "bytes (%d x its size + %zu): refused as a "
                        "\"billion laughs\" document",
                  c->limit, AL_YAML_EXPAND_PER_BYTE, AL_YAML_EXPAND_FLOOR);
  }
  c->total += n;
  return 0;
}

static int note_size(comp_t *c, const yaml_mark_t *m, int id, size_t size) {
  if ((size_t)id > c->cap_size) {
    size_t cap = c->cap_size != 0 ? c->cap_size * 2 : 64;
    size_t *ns;

    while (cap < (size_t)id) {
      cap *= 2;
    }
    ns = al_realloc(c->size, cap * sizeof(*ns));
    if (ns == NULL) {
      return nomem(c, m);
    }
    c->size = ns;
    c->cap_size = cap;
  }
  while (c->n_size < (size_t)id) {
    c->size[c->n_size++] = 0;
  }
  c->size[id - 1] = size;
  return 0;
}

static int add_anchor(comp_t *c, const yaml_mark_t *m, const yaml_char_t *a,
                      int id) {
  json_t *v;

  if (a == NULL) {
    return 0;
  }
  /* A later anchor of the same name hides the earlier one (YAML 1.2). */
  v = json_integer(id);
  if (v == NULL ||
      json_object_set_new_nocheck(c->anchors, (const char *)a, v) != 0) {
    return nomem(c, m);
  }
  return 0;
}

/* Hangs node id under the innermost open collection. */
static int attach(comp_t *c, const yaml_mark_t *m, int id) {
  open_t *o;
  yaml_node_t *p;
  int ok;

  if (c->depth == 0) {
    return 0; /* the root */
  }
  o = &c->stack[c->depth - 1];
  p = yaml_document_get_node(c->doc, o->id);
  if (p->type == YAML_SEQUENCE_NODE) {
    ok = yaml_document_append_sequence_item(c->doc, o->id, id);
  } else if (o->key == 0) {
    o->key = id;
    ok = 1;
  } else {
    ok = yaml_document_append_mapping_pair(c->doc, o->id, o->key, id);
    o->key = 0;
  }
  return ok ? 0 : nomem(c, m);
}

static void set_marks(comp_t *c, int id, const yaml_event_t *ev) {
  yaml_node_t *n = yaml_document_get_node(c->doc, id);

  n->start_mark = ev->start_mark;
  n->end_mark = ev->end_mark;
}

/* libyaml's default tags stand for "none given". */
static yaml_char_t *tag_of(yaml_char_t *t) {
  return t != NULL && strcmp((const char *)t, "!") != 0 ? t : NULL;
}

static int on_alias(comp_t *c, const yaml_event_t *ev) {
  const char *name = (const char *)ev->data.alias.anchor;
  json_t *v = json_object_get(c->anchors, name);
  int id;
  int rc;

  if (++c->aliases > AL_YAML_MAX_ALIASES) {
    return refuse(c, &ev->start_mark, "more than %d aliases",
                  AL_YAML_MAX_ALIASES);
  }
  if (v == NULL) {
    return refuse(c, &ev->start_mark, "found undefined alias '*%s'", name);
  }
  id = (int)json_integer_value(v);
  if (c->size[id - 1] == 0) {
    return refuse(c, &ev->start_mark,
                  "alias '*%s' is inside the node it names (a cycle)", name);
  }
  rc = grow(c, &ev->start_mark, c->size[id - 1]);
  return rc != 0 ? rc : attach(c, &ev->start_mark, id);
}

static int on_scalar(comp_t *c, const yaml_event_t *ev) {
  size_t len = ev->data.scalar.length;
  int id;
  int rc;

  if ((rc = grow(c, &ev->start_mark, len + 1)) != 0) {
    return rc;
  }
  id = yaml_document_add_scalar(c->doc, tag_of(ev->data.scalar.tag),
                                ev->data.scalar.value, (int)len,
                                ev->data.scalar.style);
  if (id == 0) {
    return nomem(c, &ev->start_mark);
  }
  set_marks(c, id, ev);
  if ((rc = note_size(c, &ev->start_mark, id, len + 1)) != 0 ||
      (rc = add_anchor(c, &ev->start_mark, ev->data.scalar.anchor, id)) != 0) {
    return rc;
  }
  return attach(c, &ev->start_mark, id);
}

static int on_start(comp_t *c, const yaml_event_t *ev) {
  bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
  const yaml_char_t *anchor = seq ? ev->data.sequence_start.anchor
                                  : ev->data.mapping_start.anchor;
  int id;
  int rc;

  if (c->depth == AL_YAML_MAX_DEPTH) {
    return refuse(c, &ev->start_mark, "nested deeper than %d levels",
                  AL_YAML_MAX_DEPTH);
  }
  if ((rc = grow(c, &ev->start_mark, 1)) != 0) {
    return rc;
  }
  id = seq ? yaml_document_add_sequence(
                 c->doc, tag_of(ev->data.sequence_start.tag),
                 ev->data.sequence_start.style)
           : yaml_document_add_mapping(c->doc,
                                       tag_of(ev->data.mapping_start.tag),
                                       ev->data.mapping_start.style);
  if (id == 0) {
    return nomem(c, &ev->start_mark);
  }
  set_marks(c, id, ev);
  /* Size 0 until it ends: an alias to it from inside is a cycle. */
  if ((rc = note_size(c, &ev->start_mark, id, 0)) != 0 ||
      (rc = add_anchor(c, &ev->start_mark, anchor, id)) != 0 ||
      (rc = attach(c, &ev->start_mark, id)) != 0) {
    return rc;
  }
  c->stack[c->depth].id = id;
  c->stack[c->depth].start = c->total - 1;
  c->stack[c->depth].key = 0;
  c->depth++;
  return 0;
}

static void on_end(comp_t *c, const yaml_event_t *ev) {
  open_t *o = &c->stack[--c->depth];

  yaml_document_get_node(c->doc, o->id)->end_mark = ev->end_mark;
  c->size[o->id - 1] = c->total - o->start;
}

static void parser_error(const yaml_parser_t *p, al_yaml_error_t *e) {
  const yaml_mark_t *mk = p->problem != NULL ? &p->problem_mark
                                             : &p->context_mark;

  e->nomem = p->error == YAML_MEMORY_ERROR;
  e->line = (int)mk->line + 1;
  e->col = (int)mk->column + 1;
  e->context_line = (int)p->context_mark.line + 1;
  snprintf(e->problem, sizeof(e->problem), "%s",
           p->problem != NULL ? p->problem : "parse error");
  snprintf(e->context, sizeof(e->context), "%s",
           p->context != NULL ? p->context : "");
}

int al_yaml_load(yaml_document_t *doc, const char *text, size_t len,
                 al_yaml_error_t *e) {
  static const yaml_mark_t start = {0, 0, 0};
  yaml_parser_t parser;
  yaml_event_t ev;
  comp_t c;
  bool done = false;
  int rc = 0;

  memset(e, 0, sizeof(*e));
  memset(&c, 0, sizeof(c));
  c.doc = doc;
  c.e = e;
  c.limit = len > (SIZE_MAX - AL_YAML_EXPAND_FLOOR) / AL_YAML_EXPAND_PER_BYTE
                ? SIZE_MAX
                : len * AL_YAML_EXPAND_PER_BYTE + AL_YAML_EXPAND_FLOOR;
  c.anchors = json_object();
  if (c.anchors == NULL || !yaml_parser_initialize(&parser)) {
    json_decref(c.anchors);
    return nomem(&c, &start);
  }
  if (!yaml_document_initialize(doc, NULL, NULL, NULL, 1, 1)) {
    yaml_parser_delete(&parser);
    json_decref(c.anchors);
    return nomem(&c, &start);
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  while (rc == 0 && !done) {
    if (!yaml_parser_parse(&parser, &ev)) {
      parser_error(&parser, e);
      rc = e->nomem ? AL_ENOMEM : AL_EPARSE;
      break;
    }
    switch (ev.type) {
    case YAML_ALIAS_EVENT:
      rc = on_alias(&c, &ev);
      break;
    case YAML_SCALAR_EVENT:
      rc = on_scalar(&c, &ev);
      break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
      rc = on_start(&c, &ev);
      break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      on_end(&c, &ev);
      break;
    case YAML_DOCUMENT_END_EVENT:
    case YAML_STREAM_END_EVENT:
      /* The first document only, as yaml_parser_load reads it. */
      done = true;
      break;
    default:
      break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&parser);
  json_decref(c.anchors);
  al_free(c.size);
  if (rc != 0) {
    yaml_document_delete(doc);
  }
  return rc;
}
