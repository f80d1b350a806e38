/* Internals of the models catalogue (models.c), for the library and tests. */
#ifndef AL_PROVIDER_MODELS_INT_H
#define AL_PROVIDER_MODELS_INT_H

#include <stddef.h>

#include "agentloop/models.h"

/* SPEC §9: the window of a model the catalogue does not know. */
#define AL_MODELS_FALLBACK_CLAUDE 200000
#define AL_MODELS_FALLBACK_OTHER 8192

/* The shipped models.yaml, generated into the build tree by CMake
 * (cmake/embed.cmake); NUL-terminated, len without the NUL. */
extern const char *const al__models_shipped;
extern const size_t al__models_shipped_len;

/* $XDG_CONFIG_HOME/agentloop/models.yaml (or ~/.config/...) into buf;
 * NULL when neither variable gives an absolute directory. */
const char *al__models_user_path(char *buf, size_t size);

#endif
