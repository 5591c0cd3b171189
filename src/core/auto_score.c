/* Scoring discovered meshes for --auto. */
#include "auto_score.h"

#include <string.h>

#define GIB (1024ull * 1024 * 1024)

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

int64_t auto_score(const mesh_listing_t *l, const auto_prefs_t *p)
{
    int64_t s = 0;
    if (p->region && p->region[0] && strcmp(p->region, l->region) == 0) s += AUTO_SCORE_REGION;
    if (p->last_mesh && p->last_mesh[0] && strcmp(p->last_mesh, l->mesh_id) == 0)
        s += AUTO_SCORE_STICKY;
    for (size_t w = 0; w < p->n_wanted; w++) {
        int best = 0;
        for (size_t i = 0; i < l->n_models; i++) {
            if (strcmp(l->models[i].name, p->wanted[w]) != 0) continue;
            int v = l->models[i].served ? AUTO_SCORE_SERVES : AUTO_SCORE_HOLDS;
            if (v > best) best = v;
        }
        s += best;
    }
    s += 10 * (int64_t)min_u64(l->node_count, 20);
    s += 2 * (int64_t)min_u64(l->mem_free / GIB, 200);
    s += (int64_t)min_u64(l->mem_total / (4 * GIB), 256);
    return s;
}

/* a before b? */
static bool better(const mesh_listing_t *a, int64_t sa, const mesh_listing_t *b, int64_t sb)
{
    if (sa != sb) return sa > sb;
    if (a->mem_free != b->mem_free) return a->mem_free > b->mem_free;
    return strcmp(a->mesh_id, b->mesh_id) < 0;
}

void auto_rank(const mesh_listing_t *ls, size_t n, const auto_prefs_t *p, size_t *order)
{
    int64_t sc[LISTING_SET_MAX];
    if (n > LISTING_SET_MAX) n = LISTING_SET_MAX;
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
        sc[i] = auto_score(&ls[i], p);
    }
    for (size_t i = 1; i < n; i++) /* insertion sort: n is small */
        for (size_t k = i;
             k > 0 && better(&ls[order[k]], sc[order[k]], &ls[order[k - 1]], sc[order[k - 1]]);
             k--) {
            size_t t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
}

double auto_est_tps(uint64_t size_bytes, uint32_t mflops)
{
    return size_bytes ? (double)mflops * 1e6 / (double)size_bytes : 0;
}

/* m before best? on disk first, then more memory, then the larger file */
static bool pick_better(const known_model_t *m, bool m_disk, const known_model_t *best,
                        bool best_disk)
{
    if (!best) return true;
    if (m_disk != best_disk) return m_disk;
    if (m->min_memory != best->min_memory) return m->min_memory > best->min_memory;
    return m->size > best->size;
}

auto_pick_t auto_pick_model(uint64_t mem, uint32_t mflops,
                            bool (*on_disk)(void *data, const known_model_t *m), void *data)
{
    auto_pick_t p = {.why = AUTO_PICK_NONE_FITS};
    bool best_disk = false;
    for (size_t i = 0; i < known_models_n; i++) {
        const known_model_t *m = &known_models[i];
        if (m->type != KNOWN_LLM || m->mmproj || m->min_memory > mem) continue;
        if (mflops == 0) { /* unknown speed: the default, else the smallest that fits */
            p.why = AUTO_PICK_UNKNOWN_SPEED;
            if (m == known_model_default() || (!p.model && (!p.best || m->size < p.best->size)))
                p.best = m;
            if (m == known_model_default()) p.model = m;
            continue;
        }
        double tps = auto_est_tps(m->size, mflops);
        if (tps < AUTO_MIN_TPS) {
            if (!p.best || m->size < p.best->size) p.best = m;
            if (p.why == AUTO_PICK_NONE_FITS) p.why = AUTO_PICK_TOO_SLOW;
            continue;
        }
        bool disk = on_disk && on_disk(data, m);
        if (pick_better(m, disk, p.model, best_disk)) {
            p.model = m;
            p.tps = tps;
            best_disk = disk;
        }
        p.why = AUTO_PICK_FAST;
    }
    if (p.why == AUTO_PICK_UNKNOWN_SPEED) {
        p.model = p.best;
        p.on_disk = on_disk && on_disk(data, p.model);
    }
    if (p.model) p.best = NULL;
    if (p.why == AUTO_PICK_FAST) p.on_disk = best_disk;
    return p;
}
