/* affinity — see affinity.h. */
#include "affinity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static affinity_entry_t *find(affinity_t *t, uint64_t key)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->e[i].key == key) return &t->e[i];
    return NULL;
}

const char *affinity_get(affinity_t *t, uint64_t key)
{
    affinity_entry_t *e = key ? find(t, key) : NULL;
    if (!e) return NULL;
    e->used = ++t->tick;
    return e->host;
}

void affinity_put(affinity_t *t, uint64_t key, const char *host)
{
    if (!key || !host) return;
    affinity_entry_t *e = find(t, key);
    if (!e) {
        if (t->n < AFFINITY_MAX) {
            e = &t->e[t->n++];
        } else {
            e = &t->e[0];
            for (size_t i = 1; i < t->n; i++)
                if (t->e[i].used < e->used) e = &t->e[i];
        }
        e->key = key;
    }
    snprintf(e->host, sizeof e->host, "%s", host);
    e->used = ++t->tick;
}

int affinity_pick(affinity_t *t, uint64_t key, const char *const *ids, size_t *order, size_t n)
{
    if (!key || n == 0) return 0;
    const char *want = affinity_get(t, key);
    int hit = 0;
    for (size_t k = 0; want && k < n; k++) {
        if (strcmp(ids[order[k]], want) == 0) {
            size_t chosen = order[k];
            memmove(order + 1, order, k * sizeof *order);
            order[0] = chosen;
            hit = 1;
            break;
        }
    }
    if (hit)
        t->hits++;
    else
        t->misses++;
    affinity_put(t, key, ids[order[0]]);
    return hit;
}
