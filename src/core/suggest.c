/* suggest — see suggest.h. */
#include "suggest.h"

#include <string.h>

size_t suggest_distance(const char *a, const char *b)
{
    size_t la = strnlen(a, SUGGEST_NAME_MAX), lb = strnlen(b, SUGGEST_NAME_MAX);
    /* three rows of the optimal-string-alignment table */
    size_t prev2[SUGGEST_NAME_MAX + 1], prev[SUGGEST_NAME_MAX + 1], cur[SUGGEST_NAME_MAX + 1];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = prev[j - 1] + cost;
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        memcpy(prev2, prev, (lb + 1) * sizeof prev[0]);
        memcpy(prev, cur, (lb + 1) * sizeof cur[0]);
    }
    return prev[lb];
}

const char *suggest_closest(const char *typed, const char *const *names, size_t n)
{
    size_t len = strnlen(typed, SUGGEST_NAME_MAX);
    if (len == 0) return NULL;
    size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    const char *best = NULL, *prefix = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) continue;
        size_t d = suggest_distance(typed, names[i]);
        if (d < best_d) best_d = d, best = names[i];
        if (!prefix && len >= 3 && strncmp(names[i], typed, len) == 0) prefix = names[i];
    }
    if (best && best_d <= limit) return best;
    return prefix;
}
