/* demand — see demand.h. */
#include "demand.h"

#include <errno.h>
#include <string.h>

void demand_init(demand_t *d, uint64_t window_ms)
{
    memset(d, 0, sizeof *d);
    d->window_ms = window_ms ? window_ms : DEMAND_WINDOW_MS;
}

static demand_entry_t *find(demand_t *d, const char *model)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->e[i].name, model) == 0) return &d->e[i];
    return NULL;
}

const demand_entry_t *demand_find(const demand_t *d, const char *model)
{
    return find((demand_t *)d, model);
}

uint64_t demand_rate(const demand_t *d, const char *model)
{
    const demand_entry_t *e = demand_find(d, model);
    return e ? e->rate : 0;
}

int demand_record(demand_t *d, const char *model, uint64_t now_ms, uint64_t now_unix)
{
    if (!catalog_name_valid(model) || strlen(model) >= CATALOG_NAME_MAX) return -EINVAL;
    demand_tick(d, now_ms);
    demand_entry_t *e = find(d, model);
    if (!e) {
        if (d->n < DEMAND_MAX_MODELS) {
            e = &d->e[d->n++];
        } else { /* replace the model whose last request is oldest */
            e = &d->e[0];
            for (size_t i = 1; i < d->n; i++)
                if (d->e[i].last_ms < e->last_ms) e = &d->e[i];
        }
        memset(e, 0, sizeof *e);
        strcpy(e->name, model);
    }
    if (e->count < UINT32_MAX) e->count++;
    e->last_ms = now_ms;
    e->last_unix = now_unix;
    return 0;
}

bool demand_tick(demand_t *d, uint64_t now_ms)
{
    if (!d->started) {
        d->started = true;
        d->win_start = now_ms;
        return false;
    }
    if (now_ms < d->win_start || now_ms - d->win_start < d->window_ms) return false;
    uint64_t windows = (now_ms - d->win_start) / d->window_ms;
    d->win_start += windows * d->window_ms;
    bool changed = false;
    for (size_t i = 0; i < d->n; i++) {
        demand_entry_t *e = &d->e[i];
        /* the window that just closed is the current one when exactly one ended; after more,
         * the last closed window had no request */
        uint64_t count = windows == 1 ? e->count : 0;
        uint64_t rate = count * 60000u / d->window_ms;
        if (count && rate == 0) rate = 1; /* windows longer than a minute: never round to 0 */
        if (rate != e->rate) changed = true;
        e->rate = rate;
        e->count = 0;
    }
    return changed;
}

/* ---- the mesh's sums ---- */

static demand_sum_t *sum_entry(demand_sum_t *out, size_t *n, size_t max, const char *model)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(out[i].model, model) == 0) return &out[i];
    if (*n >= max) return NULL;
    demand_sum_t *s = &out[(*n)++];
    memset(s, 0, sizeof *s);
    s->model = model;
    return s;
}

size_t demand_sum(const view_node_t *nodes, size_t n, const view_node_t *self, demand_sum_t *out,
                  size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i <= n; i++) {
        const view_node_t *v = i < n ? &nodes[i] : self;
        if (!v) break;
        for (size_t j = 0; j < v->n_demand; j++) {
            demand_sum_t *s = sum_entry(out, &k, max, v->demand[j].model);
            if (!s) continue;
            uint64_t r = v->demand[j].rate;
            s->rate = s->rate > UINT64_MAX - r ? UINT64_MAX : s->rate + r;
            if (v->demand[j].last_unix > s->last_unix) s->last_unix = v->demand[j].last_unix;
        }
        for (size_t j = 0; j < v->n_serving; j++) {
            const view_serving_t *sv = &v->serving[j];
            if (!sv->is_host) continue;
            demand_sum_t *s = sum_entry(out, &k, max, sv->model);
            if (!s) continue;
            s->n_hosts++;
            if (sv->http_ready)
                s->n_ready++;
            else
                s->loading = true;
        }
        for (size_t j = 0; j < v->n_requested; j++) {
            demand_sum_t *s = sum_entry(out, &k, max, v->requested[j]);
            if (s) s->requested = true;
        }
    }
    return k;
}

const demand_sum_t *demand_sum_find(const demand_sum_t *s, size_t n, const char *model)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].model, model) == 0) return &s[i];
    return NULL;
}
