/* The context budget: see budget.h. */
#include "loop/budget.h"

#include <string.h>

#include "common/common.h"
#include "common/media.h"

void al__budget_init(al_budget_t *b) {
  memset(b, 0, sizeof(*b));
}

void al__budget_free(al_budget_t *b) {
  json_decref(b->ratios);
  b->ratios = NULL;
}

int64_t al__budget_raw(size_t body_len, size_t n_messages) {
  return (int64_t)((body_len + 16 * n_messages + 3) / 4);
}

int64_t al__budget_raw_msgs(size_t body_len, const json_t *messages) {
  size_t b64 = 0;
  int64_t images = 0;

  al__media_scan(messages, &b64, &images);
  return al__budget_raw(body_len - AL_MIN(body_len, b64),
                        json_array_size(messages)) +
         images;
}

double al__budget_ratio(const al_budget_t *b, const char *model) {
  json_t *v = model != NULL ? json_object_get(b->ratios, model) : NULL;

  return json_is_real(v) ? json_real_value(v) : 1.0;
}

void al__budget_sent(al_budget_t *b, int64_t raw) { b->last_raw = raw; }

static int64_t u(const json_t *usage, const char *k) {
  json_int_t v = json_integer_value(json_object_get(usage, k));

  return v > 0 ? (int64_t)v : 0;
}

bool al__budget_has_server_tools(const json_t *usage) {
  const json_t *st = json_object_get(usage, "server_tool_use");
  const char *k;
  const json_t *v;

  json_object_foreach((json_t *)st, k, v) {
    if (json_integer_value(v) > 0) {
      return true;
    }
  }
  return false;
}

int64_t al__budget_observed(al_budget_t *b, const char *model,
                            const json_t *usage, bool server_tools) {
  int64_t ctx = u(usage, "input_tokens") + u(usage, "cache_read_input_tokens") +
                u(usage, "cache_creation_input_tokens");
  double obs;
  double r;

  if (server_tools || al__budget_has_server_tools(usage)) {
    return 0; /* not the size of our request: the caller estimates it */
  }
  if (ctx <= 0 || b->last_raw <= 0) {
    return ctx;
  }
  obs = (double)ctx / (double)b->last_raw;
  obs = obs < AL_BUDGET_RATIO_MIN   ? AL_BUDGET_RATIO_MIN
        : obs > AL_BUDGET_RATIO_MAX ? AL_BUDGET_RATIO_MAX
                                    : obs;
  if (model != NULL) {
    json_t *v = json_object_get(b->ratios, model);

    r = json_is_real(v) ? AL_BUDGET_EWMA_NEW * obs +
                              (1 - AL_BUDGET_EWMA_NEW) * json_real_value(v)
                        : obs;
    if (b->ratios == NULL) {
      b->ratios = json_object();
    }
    if (b->ratios != NULL) {
      json_object_set_new(b->ratios, model, json_real(r));
    }
  }
  b->last_ctx = ctx;
  b->anchor_raw = b->last_raw;
  return ctx;
}

int64_t al__budget_project(const al_budget_t *b, const char *model,
                           int64_t raw) {
  double r = al__budget_ratio(b, model);
  double p;

  if (b->last_ctx > 0) {
    /* Anchored on the last real count: only the difference is guessed. */
    p = (double)b->last_ctx + r * (double)(raw - b->anchor_raw);
  } else {
    p = r * (double)raw;
  }
  if (p <= 0) {
    return 0;
  }
  /* Rounded up, without libm (the package's consumers link no -lm). */
  return (int64_t)p + ((double)(int64_t)p < p ? 1 : 0);
}

int64_t al__budget_compact_at(const al_budget_t *b, int64_t max_tokens) {
  int64_t reserve = AL_MAX((int64_t)AL_BUDGET_RESERVE, max_tokens);

  return b->window - AL_MIN(reserve, b->window / 2);
}

uint32_t al__budget_pct(const al_budget_t *b, int64_t tokens) {
  if (b->window <= 0 || tokens <= 0) {
    return 0;
  }
  return (uint32_t)AL_MIN((int64_t)UINT32_MAX, tokens * 100 / b->window);
}
