/* promote — see promote.h. */
#include "promote.h"

#include <string.h>

static const promo_model_t *mesh_model(const promo_input_t *in, const char *name)
{
    for (size_t i = 0; i < in->n_models; i++)
        if (strcmp(in->models[i].name, name) == 0) return &in->models[i];
    return NULL;
}

/* Whether candidate a beats b (b may be NULL): more demand, larger need, smaller name. */
static bool better(const promo_disk_t *a, uint64_t ra, const promo_disk_t *b, uint64_t rb)
{
    if (!b) return true;
    if (ra != rb) return ra > rb;
    if (a->need_bytes != b->need_bytes) return a->need_bytes > b->need_bytes;
    return strcmp(a->name, b->name) < 0;
}

/* Per-host rate of the served models other than skip: their rate / their hosts. */
static bool others_per_host(const promo_input_t *in, const char *skip, uint64_t *out)
{
    uint64_t rate = 0, hosts = 0;
    for (size_t i = 0; i < in->n_models; i++) {
        const promo_model_t *m = &in->models[i];
        if (m->n_hosts == 0 || strcmp(m->name, skip) == 0) continue;
        rate += m->rate;
        hosts += m->n_hosts;
    }
    if (!hosts) return false;
    *out = rate / hosts;
    return true;
}

static bool rule_applies(const promo_input_t *in, promo_reason_t r, const promo_disk_t *d,
                         const promo_model_t *m)
{
    switch (r) {
    case PROMO_ALL_GONE:
        return true;
    case PROMO_REQUESTED:
        return m && m->n_hosts == 0 && (m->requested || m->rate > 0);
    case PROMO_UNSERVED:
        return !m || m->n_hosts == 0;
    case PROMO_HOT: {
        if (!m || m->n_hosts == 0 || m->loading) return false;
        uint64_t per_host = m->rate / m->n_hosts, others;
        if (per_host < PROMO_HOT_PER_MIN) return false;
        if (!others_per_host(in, d->name, &others)) return true; /* the only served model */
        return per_host >= PROMO_IMBALANCE * others;
    }
    default:
        return false;
    }
}

static bool on_disk(const promo_input_t *in, const char *name)
{
    for (size_t i = 0; i < in->n_disk; i++)
        if (strcmp(in->disk[i].name, name) == 0) return true;
    return false;
}

/* SPLIT_SHORT: the mesh's model whose split this node's free memory completes, or NULL. */
static const char *split_short(const promo_input_t *in)
{
    const promo_model_t *best = NULL;
    bool best_disk = false;
    for (size_t i = 0; i < in->n_models; i++) {
        const promo_model_t *m = &in->models[i];
        if (!m->short_bytes || m->n_hosts || m->short_bytes > in->free_bytes) continue;
        bool disk = on_disk(in, m->name), better_one;
        if (!best)
            better_one = true;
        else if (disk != best_disk)
            better_one = disk;
        else if (m->rate != best->rate)
            better_one = m->rate > best->rate;
        else
            better_one = strcmp(m->name, best->name) < 0;
        if (better_one) {
            best = m;
            best_disk = disk;
        }
    }
    return best ? best->name : NULL;
}

void promo_decide(const promo_input_t *in, promo_state_t *st, promo_result_t *out)
{
    memset(out, 0, sizeof *out);
    if (in->n_active > 0) st->seen_active = true;
    static const promo_reason_t order[] = {PROMO_ALL_GONE, PROMO_SPLIT_SHORT, PROMO_REQUESTED,
                                           PROMO_UNSERVED, PROMO_HOT};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        if (order[k] == PROMO_ALL_GONE && !(st->seen_active && in->n_active == 0)) continue;
        if (order[k] == PROMO_SPLIT_SHORT) {
            if ((out->model = split_short(in)) != NULL) {
                out->reason = PROMO_SPLIT_SHORT;
                return;
            }
            continue;
        }
        const promo_disk_t *best = NULL;
        uint64_t best_rate = 0;
        for (size_t i = 0; i < in->n_disk; i++) {
            const promo_disk_t *d = &in->disk[i];
            if (!d->need_bytes || d->need_bytes > in->free_bytes) continue;
            const promo_model_t *m = mesh_model(in, d->name);
            if (!rule_applies(in, order[k], d, m)) continue;
            uint64_t rate = m ? m->rate : 0;
            if (better(d, rate, best, best_rate)) {
                best = d;
                best_rate = rate;
            }
        }
        if (best) {
            out->reason = order[k];
            out->model = best->name;
            return;
        }
    }
}

const char *promo_reason_name(promo_reason_t r)
{
    static const char *const names[] = {"none",      "all_hosts_gone", "split_short",
                                        "requested", "unserved",       "hot"};
    return (size_t)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

size_t promo_models_from_sums(const demand_sum_t *s, size_t n, promo_model_t *out, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k < max; i++)
        out[k++] = (promo_model_t){.name = s[i].model,
                                   .n_hosts = s[i].n_hosts,
                                   .loading = s[i].loading,
                                   .rate = s[i].rate,
                                   .requested = s[i].requested,
                                   .last_unix = s[i].last_unix};
    return k;
}

size_t promo_models_from_table(const rt_table_t *t, promo_model_t *out, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n_models && k < max; i++) {
        const rt_model_t *m = &t->models[i];
        uint64_t rate = 0;
        for (size_t h = 0; h < m->n_hosts; h++)
            rate += m->hosts[h].load;
        out[k++] = (promo_model_t){.name = m->name,
                                   .n_hosts = m->n_hosts,
                                   .loading = m->status == CATALOG_LOADING,
                                   .rate = rate,
                                   .requested = m->requested,
                                   .short_bytes = m->short_bytes};
    }
    return k;
}

bool promo_go_passive(const promo_passive_input_t *in)
{
    return in->allocating && in->n_requested == 0 && in->n_planned == 0 && in->nothing_for_it &&
           in->n_ready_peers > 0;
}

promo_demote_t promo_demote(const promo_demote_input_t *in)
{
    if (in->pinned || !in->replica || in->busy) return DEMOTE_KEEP;
    if (in->now_ms < in->serving_since_ms || in->now_ms - in->serving_since_ms < in->min_serve_ms)
        return DEMOTE_KEEP;
    uint64_t since =
        in->last_request_ms > in->serving_since_ms ? in->last_request_ms : in->serving_since_ms;
    if (in->now_ms - since < in->idle_ms) return DEMOTE_KEEP;
    if (in->memory_wanted) return DEMOTE_MEMORY;
    if (in->split_wanted) return DEMOTE_SPLIT;
    bool kept = false;
    for (size_t i = 0; i < in->n_others && !kept; i++)
        kept = in->others[i].pinned || strcmp(in->others[i].id, in->id) > 0;
    if (!kept) return DEMOTE_KEEP; /* the last replica (or the one the others leave to) */
    /* the gap: what remains would not be hot at half the promotion threshold */
    if (in->mesh_rate / in->n_others * 2 >= PROMO_HOT_PER_MIN) return DEMOTE_KEEP;
    return DEMOTE_IDLE;
}

const char *promo_demote_name(promo_demote_t d)
{
    static const char *const names[] = {"keep", "idle", "memory_wanted", "split_needs_memory"};
    return (size_t)d < sizeof names / sizeof names[0] ? names[d] : "?";
}

bool promo_split_wanted(const promo_model_t *models, size_t n, const char *mine, uint64_t my_rate,
                        uint64_t free_bytes, uint64_t held_bytes)
{
    for (size_t i = 0; i < n; i++) {
        const promo_model_t *m = &models[i];
        if (!m->short_bytes || m->n_hosts || strcmp(m->name, mine) == 0) continue;
        if (m->short_bytes > free_bytes + held_bytes) continue;
        if (m->rate > my_rate || (m->requested && my_rate == 0)) return true;
    }
    return false;
}
