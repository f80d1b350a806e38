/* The configuration file's `limits:` section (owner: issue 15): every key
 * a name of agentloop/limits.h, every value what `--limit NAME=VALUE`
 * takes (a positive integer, K/M/G for sizes, or none). Errors are
 * FILE:LINE:COL; the checked section is kept as JSON for
 * al_limits_from_json. */
#include <stdio.h>
#include <string.h>

#include "agentloop/limits.h"
#include "config/config.h"

int al__config_limits_section(al_cfg_ctx_t *cx, const char *name,
                              yaml_node_t *node) {
  yaml_node_pair_t *pr;
  al_limits_t l;
  bool ok = true;

  memset(&l, 0, sizeof(l));
  for (pr = node->data.mapping.pairs.start; pr < node->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = al__config_node(cx, pr->key);
    yaml_node_t *v = al__config_node(cx, pr->value);
    const char *ks, *vs;
    int rc;

    if (k == NULL || v == NULL || k->type != YAML_SCALAR_NODE) {
      al__config_err(cx, k, "limits: keys are limit names");
      ok = false;
      continue;
    }
    ks = (const char *)k->data.scalar.value;
    if (v->type != YAML_SCALAR_NODE) {
      al__config_err(cx, v, "limits.%s: a number or none", ks);
      ok = false;
      continue;
    }
    vs = (const char *)v->data.scalar.value;
    rc = al_limits_set(&l, ks, vs);
    if (rc == AL_ENOTFOUND) {
      char names[512] = "";
      size_t i, n = 0;

      for (i = 0; al_limits_names[i] != NULL && n < sizeof(names); i++) {
        n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
                              i > 0 ? ", " : "", al_limits_names[i]);
      }
      al__config_err(cx, k, "unknown limit '%s' (%s)", ks, names);
      ok = false;
    } else if (rc != 0) {
      al__config_err(cx, v, "limits.%s: %s, not '%s'", ks,
                     al_limits_expect(ks), vs);
      ok = false;
    }
  }
  return ok ? al__config_section_keep(cx, name, node) : 0;
}
