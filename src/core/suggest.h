/* suggest — "did you mean": the closest of a list of names to a mistyped one (edit distance).
 * Pure. */
#ifndef MESH_SUGGEST_H
#define MESH_SUGGEST_H

#include <stddef.h>

/* Levenshtein distance between a and b (insert, delete, substitute: 1 each; an adjacent swap
 * counts 1). Names longer than SUGGEST_NAME_MAX are compared on their first SUGGEST_NAME_MAX
 * bytes. */
#define SUGGEST_NAME_MAX 64
size_t suggest_distance(const char *a, const char *b);

/* The name of names[0..n) closest to typed, or NULL when none is close enough to be a typo (at
 * most 1 edit for names up to 4 characters, 2 up to 8, 3 beyond) and none starts with it.
 * NULL entries are skipped. On a tie the earlier name wins. */
const char *suggest_closest(const char *typed, const char *const *names, size_t n);

#endif
