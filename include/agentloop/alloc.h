/* Replaceable allocator.
 *
 * Every allocation in agentloop goes through al_malloc & co. Installing a
 * hook with al_set_allocator() also installs it into libuv
 * (uv_replace_allocator) and jansson (json_set_alloc_funcs), so a test can
 * fail the Nth allocation of the whole stack. Call it before creating any
 * object, as libuv requires. The functions are also called from libuv's
 * threadpool (file tools, DNS, the CA bundle load), so they must be
 * thread-safe. */
#ifndef AGENTLOOP_ALLOC_H
#define AGENTLOOP_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *(*al_malloc_func)(size_t size);
typedef void *(*al_realloc_func)(void *ptr, size_t size);
typedef void *(*al_calloc_func)(size_t count, size_t size);
typedef void (*al_free_func)(void *ptr);

/* Installs the four functions (all required). Returns 0, or AL_EINVAL if
 * one is NULL, or the libuv error when libuv refuses. */
int al_set_allocator(al_malloc_func m, al_realloc_func r, al_calloc_func c,
                     al_free_func f);

void *al_malloc(size_t size);
void *al_realloc(void *ptr, size_t size);
void *al_calloc(size_t count, size_t size);
void al_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif
