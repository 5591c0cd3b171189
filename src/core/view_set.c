/* view_set — see view_set.h. */
#include "view_set.h"

#include <stdlib.h>
#include <string.h>

void view_set_init(view_set_t *s)
{
    memset(s, 0, sizeof *s);
}

void view_set_free(view_set_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        view_node_free(&s->v[i]);
    free(s->v);
    free(s->inc);
    free(s->seq);
    uint64_t decodes = s->decodes, gen = s->gen;
    view_set_init(s);
    s->decodes = decodes;
    s->gen = gen + 1;
}

static int by_id(const void *a, const void *b)
{
    return strcmp((*(const view_set_in_t *const *)a)->id, (*(const view_set_in_t *const *)b)->id);
}

static ptrdiff_t find(const view_set_t *s, const char *id)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->v[mid].id, id);
        if (c == 0) return (ptrdiff_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

const view_node_t *view_set_find(const view_set_t *s, const char *id)
{
    ptrdiff_t i = id ? find(s, id) : -1;
    return i < 0 ? NULL : &s->v[i];
}

/* Is the set already exactly in[] (sorted, unique) at the same versions? */
static bool same(const view_set_t *s, const view_set_in_t *const *in, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(in[i]->id, in[i - 1]->id) == 0) continue;
        if (k >= s->n || strcmp(s->v[k].id, in[i]->id) != 0 || s->inc[k] != in[i]->inc ||
            s->seq[k] != in[i]->seq)
            return false;
        k++;
    }
    return k == s->n;
}

bool view_set_sync(view_set_t *s, const view_set_in_t *in, size_t n)
{
    const view_set_in_t **sorted = n ? malloc(n * sizeof *sorted) : NULL;
    if (n && !sorted) return false;
    for (size_t i = 0; i < n; i++)
        sorted[i] = &in[i];
    if (n > 1) qsort(sorted, n, sizeof *sorted, by_id);
    if (same(s, sorted, n)) {
        free(sorted);
        return false;
    }
    view_node_t *v = n ? calloc(n, sizeof *v) : NULL;
    uint64_t *inc = n ? calloc(n, sizeof *inc) : NULL;
    uint64_t *seq = n ? calloc(n, sizeof *seq) : NULL;
    bool *kept = s->n ? calloc(s->n, sizeof *kept) : NULL;
    if ((n && (!v || !inc || !seq)) || (s->n && !kept)) {
        free(sorted);
        free(v);
        free(inc);
        free(seq);
        free(kept);
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const view_set_in_t *p = sorted[i];
        if (i > 0 && strcmp(p->id, sorted[i - 1]->id) == 0) continue;
        ptrdiff_t o = find(s, p->id);
        if (o >= 0 && s->inc[o] == p->inc && s->seq[o] == p->seq) {
            v[k] = s->v[o]; /* moved: its lists are on the heap, not inside the struct */
            kept[o] = true;
        } else {
            s->decodes++;
            if (view_decode(p->ann, p->id, &v[k]) != 0) {
                view_node_free(&v[k]);
                continue;
            }
        }
        inc[k] = p->inc;
        seq[k] = p->seq;
        k++;
    }
    for (size_t i = 0; i < s->n; i++)
        if (!kept[i]) view_node_free(&s->v[i]);
    free(s->v);
    free(s->inc);
    free(s->seq);
    free(kept);
    free(sorted);
    s->v = v;
    s->inc = inc;
    s->seq = seq;
    s->n = k;
    s->gen++;
    return true;
}
