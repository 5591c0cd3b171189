/* planner_view — this node's announcement, the mesh catalog (/v1/models, /api/status) and the
 * plan in the status document. See planner.h. */
#include "planner_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "tunnel_rpc.h"

/* ---- shared helpers ---- */
/* ---- the mesh as seen from here ---- */

static void collect_cb(void *data, const char *id, json_t *ann)
{
    peers_t *P = data;
    if (!ann || P->n >= P->cap) return;
    P->v[P->n].id = id;
    P->v[P->n].ann = ann;
    P->n++;
}

int peers_get(planner_t *pl, peers_t *P)
{
    P->n = 0;
    P->cap = CATALOG_MAX_NODES - 1;
    P->v = calloc(P->cap, sizeof *P->v);
    if (!P->v) return -ENOMEM;
    if (pl->mesh) mesh_foreach_peer(pl->mesh, collect_cb, P);
    return 0;
}

json_t *ann_serving(json_t *ann, const char *model)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(ann, "serving"), i, v)
    {
        const char *m = json_string_value(json_object_get(v, "model"));
        if (m && strcmp(m, model) == 0) return v;
    }
    return NULL;
}

uint64_t ann_u64(json_t *o, const char *k)
{
    json_int_t v = json_integer_value(json_object_get(o, k));
    return v > 0 ? (uint64_t)v : 0;
}

uint64_t ann_offer_for(json_t *ann, const char *model)
{
    uint64_t total = ann_u64(ann, "vram_bytes");
    if (!json_is_integer(json_object_get(ann, "free_bytes"))) return total;
    uint64_t o = ann_u64(ann, "free_bytes");
    json_t *s = ann_serving(ann, model);
    uint64_t held = s ? ann_u64(s, "bytes") : 0;
    o = o > UINT64_MAX - held ? UINT64_MAX : o + held;
    return o < total ? o : total;
}

pmodel_t *pm_find(planner_t *pl, const char *name)
{
    for (size_t i = 0; i < pl->n; i++)
        if (strcmp(pl->models[i].name, name) == 0) return &pl->models[i];
    return NULL;
}

const char *pm_role_name(const pmodel_t *pm)
{
    return pm->waiting ? "waiting" : election_role_name(pm->role);
}

bool pm_is_host(const pmodel_t *pm)
{
    return pm->e && ((pm->role == ELECTION_REPLICA) || (pm->role == ELECTION_HOST && pm->launched));
}

static mm_type_t type_of(const char *t)
{
    if (t && strcmp(t, "embedding") == 0) return MM_EMBEDDING;
    if (t && strcmp(t, "reranking") == 0) return MM_RERANKING;
    return MM_LLM;
}

/* ---- routing facts ---- */

size_t planner_route_facts(planner_t *pl, const char *model, router_peer_t *out, size_t max)
{
    peers_t P;
    if (peers_get(pl, &P) != 0) return 0;
    size_t n = 0;
    for (size_t i = 0; i < P.n && n < max; i++) {
        json_t *ann = P.v[i].ann;
        router_peer_t f = {.id = P.v[i].id};
        size_t k;
        json_t *v;
        json_array_foreach(json_object_get(ann, "serving"), k, v)
        {
            const char *mo = json_string_value(json_object_get(v, "model"));
            if (!mo || strcmp(mo, model) != 0) continue;
            if (json_is_true(json_object_get(v, "http_ready")))
                f.ready = true;
            else if (json_is_true(json_object_get(v, "is_host")))
                f.starting = true;
            else
                f.member = true;
        }
        json_array_foreach(json_object_get(ann, "available_models"), k, v)
        {
            const char *mo = json_string_value(json_object_get(v, "name"));
            if (!mo || strcmp(mo, model) != 0) continue;
            f.has_file = true;
            const char *t = json_string_value(json_object_get(v, "type"));
            if (t) f.type = t;
        }
        json_array_foreach(json_object_get(ann, "requested_models"), k, v)
        {
            const char *mo = json_string_value(v);
            if (mo && strcmp(mo, model) == 0) f.requested = true;
        }
        if (f.ready || f.starting || f.member || f.has_file || f.requested) out[n++] = f;
    }
    free(P.v);
    return n;
}

bool planner_requested(const planner_t *pl, const char *model)
{
    for (size_t i = 0; i < pl->cfg->n_requested; i++)
        if (strcmp(pl->cfg->requested[i], model) == 0) return true;
    return false;
}

/* ---- this node's announcement ---- */

bool worker_ready(planner_t *pl, const pmodel_t *pm)
{
    return pm->role == ELECTION_WORKER && pm->follow_plan[0] &&
           strcmp(pm->seeded_plan, pm->follow_plan) == 0 && pl->rpc &&
           pl->rpc->state == CHILD_READY;
}

json_t *self_serving(planner_t *pl)
{
    json_t *a = json_array();
    for (size_t i = 0; i < pl->n; i++) {
        pmodel_t *pm = &pl->models[i];
        const char *st = pm->e ? models_status(pm->e) : "unloaded";
        bool host = pm_is_host(pm);
        json_t *o =
            json_pack("{s:s,s:b,s:s,s:s,s:b,s:b,s:b}", "model", pm->name, "member", 1, "role",
                      pm_role_name(pm), "state", host ? st : "standby", "http_ready",
                      host && strcmp(st, "ready") == 0, "is_host", host, "split", pl->cfg->split);
        if (!o) continue;
        json_object_set_new(o, "bytes",
                            json_integer((json_int_t)ledger_held_for(&pl->ms->ledger, pm->name)));
        if (pm->role == ELECTION_HOST && pm->n_workers) {
            json_t *w = json_array();
            for (size_t k = 0; k < pm->n_workers; k++) {
                const election_range_t *r = &pm->workers[k].range;
                json_array_append_new(w, json_pack("{s:s,s:i,s:i,s:b,s:i}", "id", pm->workers[k].id,
                                                   "first", (int)r->first, "end", (int)r->end,
                                                   "output", r->output, "weight", (int)r->weight));
            }
            json_object_set_new(
                o, "plan",
                json_pack("{s:s,s:i,s:o}", "id", pm->plan_id, "ngl", (int)pm->ngl, "workers", w));
        }
        if (worker_ready(pl, pm))
            json_object_set_new(o, "plan_ready", json_string(pm->follow_plan));
        json_array_append_new(a, o);
    }
    /* models this node loaded on demand outside any plan: a solo replica */
    for (size_t i = 0; i < pl->ms->n; i++) {
        model_entry_t *e = &pl->ms->entries[i];
        const char *st = models_status(e);
        if (pm_find(pl, e->mm->name) || strcmp(st, "unloaded") == 0) continue;
        json_array_append_new(
            a, json_pack("{s:s,s:b,s:s,s:s,s:b,s:b,s:I}", "model", e->mm->name, "member", 0, "role",
                         "replica", "state", st, "http_ready", strcmp(st, "ready") == 0, "is_host",
                         1, "bytes", (json_int_t)ledger_held_for(&pl->ms->ledger, e->mm->name)));
    }
    return a;
}

static json_t *self_available(planner_t *pl)
{
    json_t *a = json_array();
    for (size_t i = 0; i < pl->ms->n; i++) {
        model_entry_t *e = &pl->ms->entries[i];
        json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:s}", "name", e->mm->name, "size_bytes",
                                           (json_int_t)e->size, "need_bytes",
                                           (json_int_t)models_need_bytes(pl->ms, e), "type",
                                           mm_type_name(e->mm->type)));
    }
    return a;
}

const char *self_role(planner_t *pl)
{
    if (pl->cfg->client) return "client";
    for (size_t i = 0; i < pl->n; i++)
        if (pm_is_host(&pl->models[i])) return "host";
    for (size_t i = 0; i < pl->ms->n; i++)
        if (strcmp(models_status(&pl->ms->entries[i]), "unloaded") != 0) return "host";
    return "worker";
}

/* Names this node asked for: its --model files and the names it has no file for. */
static json_t *self_requested(planner_t *pl)
{
    json_t *a = json_array();
    for (size_t i = 0; i < pl->cfg->n_models; i++)
        if (!pl->cfg->models[i].from_dir)
            json_array_append_new(a, json_string(pl->cfg->models[i].name));
    for (size_t i = 0; i < pl->cfg->n_requested; i++)
        json_array_append_new(a, json_string(pl->cfg->requested[i]));
    return a;
}

void planner_fill_announcement(planner_t *pl, json_t *ann)
{
    json_object_set_new(ann, "available_models", self_available(pl));
    json_object_set_new(ann, "requested_models", self_requested(pl));
    json_object_set_new(ann, "serving", self_serving(pl));
    json_object_set_new(ann, "role", json_string(self_role(pl)));
    json_object_set_new(ann, "vram_bytes", json_integer((json_int_t)pl->ms->ledger.offered));
    json_object_set_new(ann, "free_bytes", json_integer((json_int_t)ledger_free(&pl->ms->ledger)));
}

/* ---- catalog ---- */

void cnodes_free(cnodes_t *c)
{
    free(c->nodes);
    free(c->av);
    free(c->sv);
    free(c->rq);
    json_decref(c->self);
    memset(c, 0, sizeof *c);
}

static void ann_to_node(json_t *ann, const char *id, catalog_node_t *n, catalog_avail_t *av,
                        catalog_serving_t *sv, const char **rq)
{
    memset(n, 0, sizeof *n);
    n->id = id;
    n->alive = true;
    n->vram_bytes = ann_u64(ann, "vram_bytes");
    const char *role = json_string_value(json_object_get(ann, "role"));
    n->role = role && strcmp(role, "client") == 0 ? CATALOG_ROLE_CLIENT
              : role && strcmp(role, "host") == 0 ? CATALOG_ROLE_HOST
                                                  : CATALOG_ROLE_WORKER;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(ann, "available_models"), i, v)
    {
        if (n->n_available >= CATALOG_MAX_NODE_MODELS) break;
        const char *name = json_string_value(json_object_get(v, "name"));
        if (!name) continue;
        catalog_avail_t *a = &av[n->n_available++];
        a->name = name;
        a->size_bytes = ann_u64(v, "size_bytes");
        a->need_bytes = ann_u64(v, "need_bytes");
        a->type = type_of(json_string_value(json_object_get(v, "type")));
    }
    n->available = av;
    json_array_foreach(json_object_get(ann, "serving"), i, v)
    {
        if (n->n_serving >= CATALOG_MAX_NODE_MODELS) break;
        const char *name = json_string_value(json_object_get(v, "model"));
        if (!name) continue;
        catalog_serving_t *s = &sv[n->n_serving++];
        s->model = name;
        s->is_host = json_is_true(json_object_get(v, "is_host"));
        s->state = s->is_host && json_is_true(json_object_get(v, "http_ready"))
                       ? CATALOG_SERVE_READY
                       : CATALOG_SERVE_LOADING;
    }
    n->serving = sv;
    json_array_foreach(json_object_get(ann, "requested_models"), i, v)
    {
        if (n->n_requested >= CATALOG_MAX_NODE_MODELS) break;
        const char *name = json_string_value(v);
        if (name) rq[n->n_requested++] = name;
    }
    n->requested = rq;
}

/* Catalog nodes: the live peers and, unless skip_self, this node. */
int cnodes_build(planner_t *pl, const peers_t *P, bool skip_self, cnodes_t *c)
{
    memset(c, 0, sizeof *c);
    size_t max = P->n + 1;
    c->nodes = calloc(max, sizeof *c->nodes);
    c->av = calloc(max * CATALOG_MAX_NODE_MODELS, sizeof *c->av);
    c->sv = calloc(max * CATALOG_MAX_NODE_MODELS, sizeof *c->sv);
    c->rq = calloc(max * CATALOG_MAX_NODE_MODELS, sizeof *c->rq);
    c->self = json_object();
    if (!c->nodes || !c->av || !c->sv || !c->rq || !c->self) {
        cnodes_free(c);
        return -ENOMEM;
    }
    for (size_t i = 0; i < P->n; i++, c->n++)
        ann_to_node(P->v[i].ann, P->v[i].id, &c->nodes[c->n],
                    c->av + c->n * CATALOG_MAX_NODE_MODELS, c->sv + c->n * CATALOG_MAX_NODE_MODELS,
                    c->rq + c->n * CATALOG_MAX_NODE_MODELS);
    if (!skip_self) {
        planner_fill_announcement(pl, c->self);
        ann_to_node(c->self, pl->id, &c->nodes[c->n], c->av + c->n * CATALOG_MAX_NODE_MODELS,
                    c->sv + c->n * CATALOG_MAX_NODE_MODELS, c->rq + c->n * CATALOG_MAX_NODE_MODELS);
        c->n++;
    }
    return 0;
}

/* Every member of the group announces "waiting": the group cannot form yet. */
static bool group_waiting(planner_t *pl, const peers_t *P, const char *model)
{
    bool any = false;
    pmodel_t *pm = pm_find(pl, model);
    if (pm) {
        if (!pm->waiting) return false;
        any = true;
    }
    for (size_t i = 0; i < P->n; i++) {
        json_t *s = ann_serving(P->v[i].ann, model);
        if (!s) continue;
        const char *r = json_string_value(json_object_get(s, "role"));
        if (!r || strcmp(r, "waiting") != 0) return false;
        any = true;
    }
    return any;
}

static const char *entry_status(planner_t *pl, const peers_t *P, const catalog_t *cat,
                                const catalog_entry_t *e)
{
    if (e->status == CATALOG_LOADING && group_waiting(pl, P, e->name))
        return cat->capacity_bytes < e->need_bytes ? "needs_capacity" : "waiting";
    return catalog_status_name(e->status);
}

static json_t *ids_json(const catalog_id_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(ids[i]));
    return a;
}

static int catalog_now(planner_t *pl, peers_t *P, cnodes_t *cn, catalog_t *cat)
{
    int rc = peers_get(pl, P);
    if (rc) return rc;
    rc = cnodes_build(pl, P, false, cn);
    if (rc == 0) rc = catalog_build(cn->nodes, cn->n, cat);
    if (rc) {
        cnodes_free(cn);
        free(P->v);
    }
    return rc;
}

void planner_list_models(planner_t *pl, json_t *list)
{
    peers_t P;
    cnodes_t cn;
    catalog_t cat;
    if (catalog_now(pl, &P, &cn, &cat) != 0) return;
    for (size_t i = 0; i < cat.n; i++) {
        const catalog_entry_t *e = &cat.entries[i];
        json_t *o = NULL;
        size_t k;
        json_t *v;
        json_array_foreach(list, k, v)
        {
            const char *id = json_string_value(json_object_get(v, "id"));
            if (id && strcmp(id, e->name) == 0) o = v;
        }
        if (!o) {
            o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:I}", "id", e->name, "object", "model", "created",
                          (json_int_t)time(NULL), "owned_by", "mesh-llm", "type",
                          mm_type_name(e->type), "size", (json_int_t)e->size_bytes);
            if (!o) continue;
            json_array_append_new(list, o);
        }
        json_object_set_new(o, "status", json_string(entry_status(pl, &P, &cat, e)));
        json_object_set_new(o, "hosts", ids_json(e->hosts, e->n_hosts));
        json_object_set_new(o, "nodes", json_integer((json_int_t)e->n_holders));
        json_object_set_new(o, "requested", json_boolean(e->requested));
    }
    catalog_free(&cat);
    cnodes_free(&cn);
    free(P.v);
}

/* ---- status ---- */

/* node.memory: the ledger — what this node offers, what is free, who holds what. */
static void memory_status(planner_t *pl, json_t *st)
{
    const ledger_t *l = &pl->ms->ledger;
    json_t *held = json_array();
    for (size_t i = 0; i < l->n; i++)
        json_array_append_new(held,
                              json_pack("{s:s,s:s,s:I,s:b}", "model", l->e[i].name, "kind",
                                        l->e[i].kind == LEDGER_WORKER ? "worker" : "model", "bytes",
                                        (json_int_t)l->e[i].bytes, "loading", l->e[i].loading));
    json_t *node = json_object_get(st, "node");
    if (node)
        json_object_set_new(node, "memory",
                            json_pack("{s:I,s:I,s:o}", "offered_bytes", (json_int_t)l->offered,
                                      "free_bytes", (json_int_t)ledger_free(l), "held", held));
    else
        json_decref(held);
}

void planner_status(planner_t *pl, json_t *st)
{
    memory_status(pl, st);
    peers_t P;
    cnodes_t cn;
    catalog_t cat;
    if (catalog_now(pl, &P, &cn, &cat) == 0) {
        json_t *a = json_array();
        for (size_t i = 0; i < cat.n; i++) {
            const catalog_entry_t *e = &cat.entries[i];
            json_array_append_new(
                a, json_pack("{s:s,s:I,s:I,s:s,s:s,s:o,s:o,s:o,s:b}", "name", e->name, "size_bytes",
                             (json_int_t)e->size_bytes, "need_bytes", (json_int_t)e->need_bytes,
                             "type", mm_type_name(e->type), "status", entry_status(pl, &P, &cat, e),
                             "holders", ids_json(e->holders, e->n_holders), "servers",
                             ids_json(e->servers, e->n_servers), "hosts",
                             ids_json(e->hosts, e->n_hosts), "requested", e->requested));
        }
        json_object_set_new(st, "catalog", a);
        catalog_free(&cat);
        cnodes_free(&cn);
        free(P.v);
    }
    json_t *plan = json_array();
    for (size_t i = 0; i < pl->n; i++) {
        pmodel_t *pm = &pl->models[i];
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:b}", "model", pm->name, "rule", pm->rule,
                              "mode", election_mode_name(pm->mode), "role", pm_role_name(pm),
                              "host", pm->host, "has_file", pm->e != NULL);
        if (!o) continue;
        if (pm->role == ELECTION_HOST) {
            json_t *w = json_array();
            for (size_t k = 0; k < pm->n_workers; k++) {
                plan_worker_t *pw = &pm->workers[k];
                json_array_append_new(w, json_pack("{s:s,s:i,s:i,s:b,s:i,s:i}", "id", pw->id,
                                                   "first", (int)pw->range.first, "end",
                                                   (int)pw->range.end, "output", pw->range.output,
                                                   "weight", (int)pw->range.weight, "tunnel_port",
                                                   pw->fwd ? tunnel_rpc_port(pw->fwd) : 0));
            }
            json_object_set_new(o, "plan_id", json_string(pm->plan_id));
            json_object_set_new(o, "ngl", json_integer(pm->ngl));
            json_object_set_new(o, "workers", w);
            json_object_set_new(o, "launched", json_boolean(pm->launched));
        } else if (pm->role == ELECTION_WORKER) {
            json_object_set_new(o, "plan_id", json_string(pm->follow_plan));
            json_object_set_new(o, "layers",
                                json_pack("{s:i,s:i,s:b}", "first", (int)pm->my_range.first, "end",
                                          (int)pm->my_range.end, "output", pm->my_range.output));
            json_object_set_new(o, "ready", json_boolean(worker_ready(pl, pm)));
            json_object_set_new(o, "seeded_bytes_present",
                                json_integer((json_int_t)pm->seed_bytes_present));
            json_object_set_new(o, "seeded_bytes_written",
                                json_integer((json_int_t)pm->seed_bytes_written));
        }
        json_array_append_new(plan, o);
    }
    json_object_set_new(st, "plan", plan);
    const tunnel_rpc_stats_t *ts = tunnel_rpc_stats();
    json_object_set_new(st, "rpc_tunnel",
                        json_pack("{s:I,s:I,s:I,s:I}", "host_tx", (json_int_t)ts->host_tx,
                                  "host_rx", (json_int_t)ts->host_rx, "worker_rx",
                                  (json_int_t)ts->worker_rx, "worker_tx",
                                  (json_int_t)ts->worker_tx));
    json_t *node = json_object_get(st, "node");
    if (node) {
        json_object_set_new(node, "role", json_string(self_role(pl)));
        json_object_set_new(node, "assignment",
                            pl->allocating ? json_pack("{s:s,s:s}", "rule", pl->alloc_rule, "model",
                                                       pl->n ? pl->models[0].name : "")
                                           : json_null());
    }
}
