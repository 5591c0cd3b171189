/* affinity — see affinity.h. */
#include "affinity.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h ? h : 1;
}

uint64_t affinity_prefix_key(const char *body, size_t len)
{
    if (!body || !len) return 0;
    json_t *o = json_loadb(body, len, 0, NULL);
    uint64_t key = 0;
    const char *prompt = json_string_value(json_object_get(o, "prompt"));
    json_t *msgs = json_object_get(o, "messages");
    char *dump = NULL;
    if (!prompt && json_is_array(msgs)) prompt = dump = json_dumps(msgs, JSON_COMPACT);
    if (prompt) {
        size_t pl = strlen(prompt);
        if (pl >= AFFINITY_MIN_BYTES)
            key = fnv1a(prompt, pl < AFFINITY_PREFIX_BYTES ? pl : AFFINITY_PREFIX_BYTES);
    }
    free(dump);
    json_decref(o);
    return key;
}

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
