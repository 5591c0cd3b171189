/* rtt — see rtt.h. */
#include "rtt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int32_t rtt_round(double ms)
{
    if (!(ms >= 0)) return -1; /* NaN too */
    if (ms >= RTT_MAX_MS) return RTT_MAX_MS;
    double step = ms < 9.5 ? 1 : ms < 97.5 ? 5 : ms < 987.5 ? 25 : 250;
    int32_t r = (int32_t)(ms / step + 0.5) * (int32_t)step;
    return r > RTT_MAX_MS ? RTT_MAX_MS : r;
}

static int cmp_entry(const void *a, const void *b)
{
    const rtt_entry_t *x = a, *y = b;
    if (x->ms != y->ms) return x->ms < y->ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

size_t rtt_pick(rtt_entry_t *e, size_t n, size_t max)
{
    if (n > 1) qsort(e, n, sizeof *e, cmp_entry);
    return n < max ? n : max;
}

bool rtt_equal(const rtt_entry_t *a, size_t na, const rtt_entry_t *b, size_t nb)
{
    if (na != nb) return false;
    for (size_t i = 0; i < na; i++)
        if (a[i].ms != b[i].ms || strcmp(a[i].id, b[i].id) != 0) return false;
    return true;
}

typedef struct {
    const char *id;
    size_t idx;
} slot_t;

static int cmp_slot(const void *a, const void *b)
{
    return strcmp(((const slot_t *)a)->id, ((const slot_t *)b)->id);
}

int rtt_matrix(const char *const *ids, size_t n, const rtt_entry_t *const *rows,
               const size_t *n_rows, int32_t *out)
{
    if (n == 0) return 0;
    slot_t *s = malloc(n * sizeof *s);
    if (!s) return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        s[i] = (slot_t){ids[i], i};
    qsort(s, n, sizeof *s, cmp_slot);
    for (size_t i = 0; i < n * n; i++)
        out[i] = -1;
    for (size_t i = 0; i < n; i++) {
        out[i * n + i] = 0;
        for (size_t k = 0; rows && rows[i] && k < n_rows[i]; k++) {
            const rtt_entry_t *e = &rows[i][k];
            slot_t key = {e->id, 0}, *hit = bsearch(&key, s, n, sizeof *s, cmp_slot);
            if (!hit || hit->idx == i || e->ms < 0) continue;
            size_t j = hit->idx;
            int32_t v = e->ms > RTT_MAX_MS ? RTT_MAX_MS : e->ms;
            /* the larger of the two directions (and of duplicate entries) */
            if (v > out[i * n + j]) out[i * n + j] = out[j * n + i] = v;
        }
    }
    free(s);
    return 0;
}
