/* The models catalogue: what agentloop knows about a model by its name
 * (context window, output limit, how it carries reasoning, list prices).
 *
 * A catalogue ships inside the library (src/provider/models.yaml) and a
 * user may override or extend it with $XDG_CONFIG_HOME/agentloop/models.yaml
 * (same format, docs/context.md). Lookup walks the user's entries, then the
 * shipped ones, each in file order; an entry matches when its `match` glob
 * matches the model name (fnmatch, case-insensitive), and each field comes
 * from the first matching entry that sets it. A model nothing matches falls
 * back to SPEC §9: a 200,000-token window for Claude (the anthropic
 * provider or a name containing "claude"), 8,192 otherwise.
 *
 * A catalogue is immutable once built and may be shared by any number of
 * agents (borrowed: it must outlive them). Loading reads a file with
 * blocking I/O: do it at start-up, before the loop runs, or off the loop. */
#ifndef AGENTLOOP_MODELS_H
#define AGENTLOOP_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct al_models_s al_models_t;

/* What the catalogue says about one model. Fixed-size strings, so the value
 * does not depend on the catalogue's lifetime. */
typedef struct al_model_info_s {
  bool known;                /* some entry matched */
  char provider[16];         /* "anthropic", "openai" or "" (unknown) */
  int64_t context_window;    /* tokens; always > 0 (fallback applied) */
  int64_t max_output_tokens; /* tokens; 0: unknown */
  bool echo_reasoning;       /* send the model's reasoning back */
  char reasoning_field[64];  /* e.g. "reasoning_content"; "": none */
  bool think_tags;           /* reasoning inside <think>...</think> */
  bool has_prices;           /* prices below are valid */
  struct {
    double input, output, cache_read, cache_write; /* USD per 1M tokens */
  } prices;
  /* `images: false`: the model takes no images or PDFs, so tool results
   * carry their text view only (docs/mcp.md). Default false: sent. */
  bool no_images;
  /* `end_of_life: YYYY-MM-DD`: the provider retires the model on that date
   * (it is deprecated until then); "" when none is known. `replacement`:
   * the model to move to; may be "". */
  char end_of_life[16];
  char replacement[64];
} al_model_info_t;

/* Builds a catalogue: the shipped one, overlaid by the user's file. path:
 * the file to overlay; NULL: $XDG_CONFIG_HOME/agentloop/models.yaml (or
 * ~/.config/...), where a missing file is not an error; "": none (shipped
 * only). Blocking. Errors: AL_ECONFIG with *error (when error != NULL) set
 * to "FILE:LINE:COL: message" (al_free it), AL_ENOMEM, a negative errno
 * from reading an explicit path. */
int al_models_load(al_models_t **out, const char *path, char **error);

/* The same from text already in memory: `yaml` (len bytes) is the overlay
 * and `name` the file name used in error messages. yaml NULL: shipped only.
 * Pure (no I/O). Errors as al_models_load. */
int al_models_parse(al_models_t **out, const char *yaml, size_t len,
                    const char *name, char **error);

void al_models_free(al_models_t *m);

/* Fills *out for `model`. provider ("anthropic"/"openai", may be NULL) only
 * chooses the fallback window when nothing matches. m NULL: the fallback
 * alone. Never fails. */
void al_models_lookup(const al_models_t *m, const char *model,
                      const char *provider, al_model_info_t *out);

/* The cost in USD of the given token counts at the model's list prices
 * (per million tokens), or -1 when the catalogue has no prices for it.
 * The one price computation: `run`, the daemon's session/usage and the
 * chat all use it. */
double al_model_cost_usd(const al_model_info_t *mi, uint64_t input_tokens,
                         uint64_t output_tokens, uint64_t cache_read_tokens,
                         uint64_t cache_write_tokens);

/* When the model is deprecated (the catalogue names its end of life),
 * writes one line for stderr into buf - "model M is deprecated: its end of
 * life is YYYY-MM-DD; use R (...)" - and returns true; else false. */
bool al_model_deprecation(const al_model_info_t *mi, const char *model,
                          char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
