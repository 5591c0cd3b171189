/* alloc — see alloc.h for the rules. */
#include "alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"

const char *alloc_rule_name(alloc_rule_t rule)
{
    switch (rule) {
    case ALLOC_RULE_EXPLICIT:
        return "explicit";
    case ALLOC_RULE_CANT_RUN_WITHOUT_ME:
        return "cant_run_without_me";
    case ALLOC_RULE_UNSERVED:
        return "unserved";
    case ALLOC_RULE_BENEFITS:
        return "benefits_from_capacity";
    case ALLOC_RULE_DOWNLOAD:
        return "download_and_serve";
    case ALLOC_RULE_BIGGEST:
        return "biggest";
    default:
        return "standby";
    }
}

/* What the rules need to know about one catalog model. */
typedef struct {
    const catalog_entry_t *e;
    bool disk;   /* on this node's disk */
    bool wanted; /* eligible: among the --model names, or every model without them */
} cand_t;

static bool on_disk(const alloc_self_t *self, const char *name)
{
    for (size_t i = 0; i < self->n_disk; i++)
        if (self->disk[i].name && strcmp(self->disk[i].name, name) == 0) return true;
    return false;
}

static bool in_list(const char *const *list, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] && strcmp(list[i], name) == 0) return true;
    return false;
}

static bool listed(const alloc_self_t *self, const char *name)
{
    return in_list(self->models, self->n_models, name);
}

static uint64_t entry_need(const catalog_entry_t *e)
{
    return e->need_bytes ? e->need_bytes : election_need_bytes(e->size_bytes);
}

static bool rule_applies(alloc_rule_t rule, const cand_t *c, const alloc_self_t *self)
{
    const catalog_entry_t *e = c->e;
    if (!c->wanted || e->size_bytes == 0) return false;
    uint64_t need = entry_need(e);
    uint64_t vram = self->vram_bytes;
    bool served = e->n_servers > 0;
    bool split = served && e->max_server_vram < need;
    bool unserved = !served && !in_list(self->fetching, self->n_fetching, e->name);
    bool dl =
        !self->no_download && (!self->sources || in_list(self->sources, self->n_sources, e->name));
    bool get = c->disk || dl;
    switch (rule) {
    case ALLOC_RULE_CANT_RUN_WITHOUT_ME:
        return split && e->servers_vram < need && vram >= need - e->servers_vram && get;
    case ALLOC_RULE_UNSERVED:
        return unserved && c->disk && vram >= need;
    case ALLOC_RULE_BENEFITS:
        return split && c->disk;
    case ALLOC_RULE_DOWNLOAD:
        return !c->disk && dl && ((unserved && vram >= need) || split);
    case ALLOC_RULE_BIGGEST:
        return served && get && (split || vram >= need);
    default:
        return false;
    }
}

/* Tie-break: on disk > larger > alphabetical. Candidates come sorted by name, so a later one
 * replaces the best only when strictly better. */
static bool better(const cand_t *a, const cand_t *b)
{
    if (a->disk != b->disk) return a->disk;
    return a->e->size_bytes > b->e->size_bytes;
}

static const cand_t *pick(const cand_t *c, size_t n, alloc_rule_t rule, const alloc_self_t *self)
{
    const cand_t *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (rule_applies(rule, &c[i], self) && (!best || better(&c[i], best))) best = &c[i];
    return best;
}

/* Several --model names and no rule applies: the one this node suits best. */
static const cand_t *pick_listed(const cand_t *c, size_t n, const alloc_self_t *self)
{
    const cand_t *fit = NULL, *any = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!c[i].wanted) continue;
        uint64_t size = c[i].e->size_bytes;
        if (size > 0 && self->vram_bytes >= entry_need(c[i].e) && (!fit || better(&c[i], fit)))
            fit = &c[i];
        if (!any || better(&c[i], any)) any = &c[i];
    }
    return fit ? fit : any;
}

static void result(alloc_result_t *out, alloc_rule_t rule, const cand_t *c)
{
    out->rule = rule;
    memcpy(out->model, c->e->name, strlen(c->e->name) + 1);
    out->size_bytes = c->e->size_bytes;
    out->download = !c->disk;
}

int alloc_choose(const alloc_self_t *self, const catalog_node_t *nodes, size_t n_nodes,
                 alloc_result_t *out)
{
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!self || !catalog_id_valid(self->id) || (!nodes && n_nodes) ||
        (!self->disk && self->n_disk) || (!self->models && self->n_models) ||
        (!self->fetching && self->n_fetching) || (!self->sources && self->n_sources))
        return -EINVAL;
    if (self->n_disk > ALLOC_MAX_MODELS || self->n_models > ALLOC_MAX_MODELS) return -E2BIG;
    for (size_t i = 0; i < self->n_models; i++)
        if (!catalog_name_valid(self->models[i])) return -EINVAL;

    /* the mesh as the catalog sees it, with this node in it serving nothing */
    catalog_node_t *all = malloc((n_nodes + 1) * sizeof *all);
    if (!all) return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < n_nodes; i++)
        if (!nodes[i].id || strcmp(nodes[i].id, self->id) != 0) all[n++] = nodes[i];
    all[n++] = (catalog_node_t){.id = self->id,
                                .vram_bytes = self->vram_bytes,
                                .role = CATALOG_ROLE_WORKER,
                                .alive = true,
                                .available = self->disk,
                                .n_available = self->n_disk,
                                .requested = self->models,
                                .n_requested = self->n_models};
    catalog_t cat;
    int rc = n > CATALOG_MAX_NODES ? -E2BIG : catalog_build(all, n, &cat);
    free(all);
    if (rc < 0) return rc;

    cand_t *c = calloc(cat.n + 1, sizeof *c);
    if (!c) {
        catalog_free(&cat);
        return -ENOMEM;
    }
    for (size_t i = 0; i < cat.n; i++) {
        c[i].e = &cat.entries[i];
        c[i].disk = on_disk(self, c[i].e->name);
        c[i].wanted = self->n_models == 0 || listed(self, c[i].e->name);
    }

    if (self->n_models == 1) { /* even when the catalog had to drop it (truncated) */
        const catalog_entry_t *e = catalog_find(&cat, self->models[0]);
        out->rule = ALLOC_RULE_EXPLICIT;
        memcpy(out->model, self->models[0], strlen(self->models[0]) + 1);
        out->size_bytes = e ? e->size_bytes : 0;
        out->download = !on_disk(self, self->models[0]);
        goto out;
    }
    if (self->vram_bytes > 0) {
        static const alloc_rule_t order[] = {ALLOC_RULE_CANT_RUN_WITHOUT_ME, ALLOC_RULE_UNSERVED,
                                             ALLOC_RULE_BENEFITS, ALLOC_RULE_DOWNLOAD,
                                             ALLOC_RULE_BIGGEST};
        for (size_t r = 0; r < sizeof order / sizeof order[0]; r++) {
            const cand_t *best = pick(c, cat.n, order[r], self);
            if (best) {
                result(out, order[r], best);
                goto out;
            }
        }
    }
    if (self->n_models > 1) {
        const cand_t *best = pick_listed(c, cat.n, self);
        if (best) result(out, ALLOC_RULE_EXPLICIT, best);
    }
out:
    free(c);
    catalog_free(&cat);
    return 0;
}
