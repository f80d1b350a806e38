/* The replaceable allocator (alloc.h). The hook is process-wide because
 * libuv's and jansson's hooks are; it is set before anything is created. */
#include <stdlib.h>

#include <jansson.h>
#include <uv.h>

#include "common/common.h"

static al_malloc_func al__m = malloc;
static al_realloc_func al__r = realloc;
static al_calloc_func al__c = calloc;
static al_free_func al__f = free;

/* jansson only takes malloc/free; route them through our hook so a
 * replacement installed later is still seen. */
static void *json_malloc_thunk(size_t n) { return al__m(n); }
static void json_free_thunk(void *p) { al__f(p); }

int al_set_allocator(al_malloc_func m, al_realloc_func r, al_calloc_func c,
                     al_free_func f) {
  int err;

  if (m == NULL || r == NULL || c == NULL || f == NULL) {
    return AL_EINVAL;
  }
  err = uv_replace_allocator(m, r, c, f);
  if (err != 0) {
    return err;
  }
  al__m = m;
  al__r = r;
  al__c = c;
  al__f = f;
  json_set_alloc_funcs(json_malloc_thunk, json_free_thunk);
  return 0;
}

void *al_malloc(size_t size) { return al__m(size); }
void *al_realloc(void *ptr, size_t size) { return al__r(ptr, size); }
void *al_calloc(size_t count, size_t size) { return al__c(count, size); }
void al_free(void *ptr) {
  if (ptr != NULL) {
    al__f(ptr);
  }
}

char *al_strndup(const char *s, size_t n) {
  char *p = al_malloc(n + 1);

  if (p == NULL) {
    return NULL;
  }
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *al_strdup(const char *s) { return al_strndup(s, strlen(s)); }
