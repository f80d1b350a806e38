/* Binary inputs for the binary-safety tests (test_binary.c): seeded
 * random bytes, a file of them, and the check that a string is safe. */
#ifndef AL_TEST_BINFX_H
#define AL_TEST_BINFX_H

#include <stddef.h>
#include <stdint.h>

void bin_fill(unsigned char *p, size_t n, uint64_t seed);
void bin_write_file(const char *dir, const char *name, size_t n);
void bin_assert_clean(const char *s);
/* Three tool calls: read_file of rand.bin and text.txt, bash cat rand.bin
 * and a printf with a NUL; then text replies. */
extern const char bin_scenario[];

#endif
