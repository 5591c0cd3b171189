/* planner_demand — the driver of demand, promotion and idle unload (decisions: demand.c,
 * promote.c). See planner.h.
 *
 * - Demand: models_route counts every request this node's llama-servers take (models.c); the
 *   planner's tick closes the windows and re-announces when a rate changed, so the mesh sees
 *   request_rates / last_request at most once per window per node.
 * - Promotion: a node without --model that stands by (allocation found nothing for it, or it
 *   was demoted) asks promo_decide on every re-plan; a choice becomes its model like an
 *   allocation (the policy then elects and loads it).
 * - Demotion: once a second, a model the mesh gave this node (not --model) that it serves as a
 *   solo replica is checked with promo_demote; a demoted model's llama-server is unloaded, its
 *   ledger entries cleared, and the node stands by again (the next re-plan stops an rpc-server
 *   no plan needs).
 * Timers: MESH_LLM_IDLE_UNLOAD_MS (30 min), MESH_LLM_MIN_SERVE_MS (5 min). */
#include "planner_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "options.h"
#include "promote.h"
#include "util.h"

#define DEMOTE_CHECK_MS 1000
#define MAX_SUMS (CATALOG_MAX_NODE_MODELS * 4)

static uint64_t now_ms(planner_t *pl)
{
    return uv_now(pl->loop);
}

void pd_init(planner_t *pl)
{
    pl->idle_ms = pl->cfg->tun.idle_unload_ms;
    pl->min_serve_ms = pl->cfg->tun.min_serve_ms;
}

void pd_fill_self(planner_t *pl, view_node_t *n)
{
    const demand_t *d = &pl->ms->demand;
    for (size_t i = 0; i < d->n; i++) {
        view_demand_t *v = view_add_demand(n, d->e[i].name);
        if (!v) continue;
        v->rate = d->e[i].rate;
        v->last_unix = d->e[i].last_unix;
    }
}

/* The mesh's per-model sums: the peers' views and this node's (self NULL: unknown). */
static size_t mesh_sums(const peers_t *P, const view_node_t *self, demand_sum_t *s)
{
    return demand_sum(P->v, P->n, self, s, MAX_SUMS);
}

static void take(planner_t *pl, const char *model, const char *rule)
{
    pmodel_t *pm = &pl->models[pl->n++];
    memset(pm, 0, sizeof *pm);
    pm->pl = pl;
    snprintf(pm->name, sizeof pm->name, "%s", model);
    snprintf(pm->rule, sizeof pm->rule, "%s", rule);
    pm->e = models_find(pl->ms, model);
    pm->st.load_when_replica = true;
    pl->serving_since_ms = now_ms(pl);
}

/* The promotion rules over the mesh's models (from the gossip view or a routing table): a
 * choice becomes this node's model like an allocation. */
static bool promote_with(planner_t *pl, const promo_model_t *models, size_t n_models,
                         size_t n_active, const char *from)
{
    promo_disk_t disk[MM_MAX_MODELS];
    size_t nd = 0;
    for (model_entry_t *e = NULL; nd < MM_MAX_MODELS && (e = models_next(pl->ms, e));) {
        if (e->bad) continue;
        disk[nd++] =
            (promo_disk_t){.name = e->mm->name, .need_bytes = models_need_bytes(pl->ms, e)};
    }
    promo_input_t in = {.free_bytes = ledger_free(&pl->ms->ledger),
                        .disk = disk,
                        .n_disk = nd,
                        .models = models,
                        .n_models = n_models,
                        .n_active = n_active};
    promo_result_t r;
    promo_decide(&in, &pl->promo, &r);
    if (r.reason == PROMO_NONE) return false;
    size_t hosts = 0;
    uint64_t rate = 0;
    for (size_t i = 0; i < n_models; i++)
        if (strcmp(models[i].name, r.model) == 0) {
            hosts = models[i].n_hosts;
            rate = models[i].rate;
        }
    char rule[32];
    snprintf(rule, sizeof rule, "promoted_%s", promo_reason_name(r.reason));
    LOGI("planner",
         "standby → serving %s (%s: %zu host(s), %llu request(s)/min in the mesh, %zu active "
         "node(s) in %s)",
         r.model, promo_reason_name(r.reason), hosts, (unsigned long long)rate, n_active, from);
    take(pl, r.model, rule);
    snprintf(pl->alloc.rule, sizeof pl->alloc.rule, "%s", rule);
    pl->standby = false;
    pl->promotions++;
    return true;
}

bool pd_promote(planner_t *pl, const peers_t *P, const view_node_t *self)
{
    if (pl->n > 0 || !pl->allocating || pl->passive || (P->n == 0 && !pl->promo.seen_active))
        return false;
    static demand_sum_t sums[MAX_SUMS];
    static promo_model_t models[MAX_SUMS];
    size_t ns = mesh_sums(P, self, sums);
    return promote_with(pl, models, promo_models_from_sums(sums, ns, models, MAX_SUMS), P->n,
                        "the gossip view");
}

bool planner_promote_from_table(planner_t *pl, const rt_table_t *t)
{
    if (pl->n > 0 || !pl->allocating || pl->stopping) return false;
    static promo_model_t models[RT_MAX_MODELS];
    size_t n = t ? promo_models_from_table(t, models, RT_MAX_MODELS) : 0;
    return promote_with(pl, models, n, t ? t->n_nodes : 0,
                        t ? "the routing table" : "no routing table: none answered");
}

/* A model on this node's disk that is wanted (requested or asked for), has no host, and does
 * not fit beside pm. */
static bool memory_wanted(planner_t *pl, const pmodel_t *pm, const demand_sum_t *s, size_t ns)
{
    uint64_t free_b = ledger_free(&pl->ms->ledger);
    uint64_t held = ledger_held_for(&pl->ms->ledger, pm->name);
    for (model_entry_t *e = NULL; (e = models_next(pl->ms, e));) {
        if (e == pm->e || e->bad) continue;
        const demand_sum_t *m = demand_sum_find(s, ns, e->mm->name);
        if (!m || m->n_hosts > 0 || !(m->requested || m->rate > 0)) continue;
        uint64_t need = models_need_bytes(pl->ms, e);
        if (need > free_b && need <= free_b + held) return true;
    }
    return false;
}

static void demote(planner_t *pl, pmodel_t *pm, promo_demote_t why)
{
    LOGI("planner", "model %s: %s (%s); unloading it and standing by", pm->name,
         why == DEMOTE_MEMORY  ? "idle, and its memory is wanted by a model without a host"
         : why == DEMOTE_SPLIT ? "idle, and a split the mesh waits for needs its memory"
                               : "idle, and another host keeps serving it",
         promo_demote_name(why));
    pm_release(pl, 0, true); /* the only one (pd_demote_due) */
    pl->standby = true;
    pl->demotions++;
    snprintf(pl->alloc.rule, sizeof pl->alloc.rule, "standby");
}

bool pd_demote_due(planner_t *pl)
{
    uint64_t now = now_ms(pl);
    if (now - pl->last_demote_check_ms < DEMOTE_CHECK_MS) return false;
    pl->last_demote_check_ms = now;
    if (!pl->allocating || pl->n != 1 || !pl->mesh) return false;
    const pmodel_t *pm = &pl->models[0];
    return pm->e && !pm->seeding;
}

bool pd_check_demote(planner_t *pl, const peers_t *P, const view_node_t *self, bool split_wanted)
{
    pmodel_t *pm = &pl->models[0];
    model_entry_t *e = pm->e;
    static demand_sum_t sums[MAX_SUMS];
    size_t ns = mesh_sums(P, self, sums);
    promo_host_t others[CATALOG_MAX_NODES];
    size_t no = 0;
    for (size_t i = 0; i < P->n && no < CATALOG_MAX_NODES; i++) {
        const view_serving_t *s = view_serving(&P->v[i], pm->name);
        if (s && s->is_host && s->http_ready)
            others[no++] = (promo_host_t){.id = P->v[i].id, .pinned = s->pinned};
    }
    const demand_entry_t *d = demand_find(&pl->ms->demand, pm->name);
    const demand_sum_t *m = demand_sum_find(sums, ns, pm->name);
    promo_demote_input_t in = {
        .id = pl->id,
        .pinned = pm_pinned(pm),
        .replica = pm->st.role == ELECTION_REPLICA && pm->st.mode == ELECTION_SOLO,
        .busy = e->mm->in_flight > 0 || e->waiting != NULL || models_state(e) == MODEL_LOADING,
        .now_ms = now_ms(pl),
        .serving_since_ms = pl->serving_since_ms,
        .last_request_ms = d ? d->last_ms : 0,
        .idle_ms = pl->idle_ms,
        .min_serve_ms = pl->min_serve_ms,
        .others = others,
        .n_others = no,
        .mesh_rate = m ? m->rate : 0,
        .memory_wanted = memory_wanted(pl, pm, sums, ns),
        .split_wanted = split_wanted,
    };
    promo_demote_t why = promo_demote(&in);
    if (why == DEMOTE_KEEP) return false;
    demote(pl, pm, why);
    return true;
}

bool pd_tick(planner_t *pl)
{
    uint64_t now = now_ms(pl);
    if (pl->n > 0 && !pl->serving_since_ms) pl->serving_since_ms = now;
    if (!demand_tick(&pl->ms->demand, now) || !pl->mesh) return false;
    mesh_announce_changed(pl->mesh); /* the new rates */
    return true;
}

/* node.demand in /api/status: this node's counts and its standby state. */
json_t *pd_status(planner_t *pl)
{
    const demand_t *d = &pl->ms->demand;
    json_t *rates = json_object(), *last = json_object(), *counts = json_object();
    for (size_t i = 0; i < d->n; i++) {
        json_object_set_new(rates, d->e[i].name, json_integer((json_int_t)d->e[i].rate));
        json_object_set_new(counts, d->e[i].name, json_integer((json_int_t)d->e[i].count));
        json_object_set_new(last, d->e[i].name, json_integer((json_int_t)d->e[i].last_unix));
    }
    return json_pack("{s:o,s:o,s:o,s:I,s:b,s:I,s:I,s:I,s:I}", "request_rates", rates,
                     "last_request", last, "window_counts", counts, "window_ms",
                     (json_int_t)d->window_ms, "standby", pl->allocating && pl->n == 0,
                     "promotions", (json_int_t)pl->promotions, "demotions",
                     (json_int_t)pl->demotions, "idle_unload_ms", (json_int_t)pl->idle_ms,
                     "min_serve_ms", (json_int_t)pl->min_serve_ms);
}

/* request_rate / last_request of model across the mesh (0 when nobody counts it). */
void pd_rate(const peers_t *P, const view_node_t *self, const char *model, uint64_t *rate,
             uint64_t *last)
{
    static demand_sum_t sums[MAX_SUMS];
    size_t ns = mesh_sums(P, self, sums);
    const demand_sum_t *s = demand_sum_find(sums, ns, model);
    *rate = s ? (uint64_t)s->rate : 0;
    *last = s ? (uint64_t)s->last_unix : 0;
}

/* request_rate / last_request of each catalog model in /api/status entries. */
void pd_annotate(const peers_t *P, const view_node_t *self, json_t *entry, const char *model)
{
    uint64_t rate, last;
    pd_rate(P, self, model, &rate, &last);
    json_object_set_new(entry, "request_rate", json_integer((json_int_t)rate));
    json_object_set_new(entry, "last_request", json_integer((json_int_t)last));
}
