/* planner_view — this node's announcement, the mesh catalog (/v1/models, /api/status) and the
 * plan in the status document. See planner.h. */
#include "planner_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "model_ref.h"
#include "models_slots.h"
#include "tunnel_rpc.h"

/* ---- the mesh as seen from here ---- */

int peers_get(planner_t *pl, peers_t *P)
{
    memset(P, 0, sizeof *P);
    if (!pl->mesh) return 0;
    P->n = mesh_peers(pl->mesh, &P->v); /* decoded once per change by the mesh, borrowed */
    if (P->n > CATALOG_MAX_NODES - 1) P->n = CATALOG_MAX_NODES - 1;
    return 0;
}

void peers_free(peers_t *P)
{
    memset(P, 0, sizeof *P);
}

const view_node_t *peers_find(const peers_t *P, const char *id)
{
    for (size_t i = 0; i < P->n; i++)
        if (strcmp(P->v[i].id, id) == 0) return &P->v[i];
    return NULL;
}

pmodel_t *pm_find(planner_t *pl, const char *name)
{
    for (size_t i = 0; i < pl->n; i++)
        if (strcmp(pl->models[i].name, name) == 0) return &pl->models[i];
    return NULL;
}

const char *pm_role_name(const pmodel_t *pm)
{
    return pm->st.waiting ? "waiting" : election_role_name(pm->st.role);
}

bool pm_pinned(const pmodel_t *pm)
{
    return pm->assigned || strcmp(pm->rule, "explicit") == 0;
}

bool pm_is_host(const pmodel_t *pm)
{
    return pm->e &&
           ((pm->st.role == ELECTION_REPLICA) || (pm->st.role == ELECTION_HOST && pm->st.launched));
}

const peers_t *peers_cached(planner_t *pl)
{
    peers_t *P = pl->route_peers ? pl->route_peers : calloc(1, sizeof *P);
    if (!P) return NULL;
    pl->route_peers = P;
    peers_get(pl, P); /* borrowed from the mesh: no decode, always the current generation */
    return P;
}

void planner_peers_changed(planner_t *pl)
{
    if (!pl->route_peers) return;
    peers_free(pl->route_peers);
    free(pl->route_peers);
    pl->route_peers = NULL;
}

/* ---- routing facts ---- */

size_t planner_route_facts(planner_t *pl, const char *model, rd_host_t *out, size_t max)
{
    const peers_t *C = peers_cached(pl);
    if (!C) return 0;
    const peers_t P = *C;
    size_t n = 0;
    for (size_t i = 0; i < P.n && n < max; i++) {
        const view_node_t *v = &P.v[i];
        rd_host_t f = {.id = v->id, .type = -1};
        for (size_t k = 0; k < v->n_serving; k++) {
            const view_serving_t *s = &v->serving[k];
            if (strcmp(s->model, model) != 0) continue;
            if (s->slots) f.slots = s->slots;
            if (s->busy > f.busy) f.busy = s->busy;
            if (s->plan && s->plan->private_split) f.priv = true;
            if (s->http_ready)
                f.ready = true;
            else if (s->is_host)
                f.starting = true;
            else
                f.member = true;
        }
        for (size_t k = 0; k < v->n_available; k++) {
            const view_avail_t *a = &v->available[k];
            if (strcmp(a->name, model) != 0) continue;
            f.has_file = true;
            f.vision = a->vision;
            if (a->has_type) f.type = (int)a->type;
        }
        f.requested = view_requested(v, model);
        if (f.ready || f.starting || f.member || f.has_file || f.requested) out[n++] = f;
    }
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
    return pm->st.role == ELECTION_WORKER && pm->st.follow_plan[0] &&
           strcmp(pm->seeded_plan, pm->st.follow_plan) == 0 && pl->rpc &&
           pl->rpc->state == CHILD_READY;
}

const char *self_role(planner_t *pl)
{
    if (pl->cfg->client) return "client";
    for (size_t i = 0; i < pl->n; i++)
        if (pm_is_host(&pl->models[i])) return "host";
    for (model_entry_t *e = NULL; (e = models_next(pl->ms, e));)
        if (models_state(e) != MODEL_UNLOADED) return "host";
    return "worker";
}

static view_state_t view_state_of_model(model_state_t s)
{
    switch (s) {
    case MODEL_READY:
        return VIEW_STATE_READY;
    case MODEL_LOADING:
        return VIEW_STATE_LOADING;
    default:
        return VIEW_STATE_UNLOADED;
    }
}

static view_serve_role_t serve_role(const pmodel_t *pm)
{
    if (pm->st.waiting) return VIEW_SERVE_WAITING;
    switch (pm->st.role) {
    case ELECTION_REPLICA:
        return VIEW_SERVE_REPLICA;
    case ELECTION_HOST:
        return VIEW_SERVE_HOST;
    case ELECTION_WORKER:
        return VIEW_SERVE_WORKER;
    default:
        return VIEW_SERVE_IDLE;
    }
}

/* This node's serving entries: every planned model, then the models it loaded on demand
 * outside any plan (a solo replica). */
static int self_serving(planner_t *pl, view_node_t *n)
{
    for (size_t i = 0; i < pl->n; i++) {
        pmodel_t *pm = &pl->models[i];
        if (pm->e && pm->e->deleted) continue; /* gone now; the next re-plan drops it */
        model_state_t st = pm->e ? models_state(pm->e) : MODEL_UNLOADED;
        bool host = pm_is_host(pm);
        view_serving_t *s = view_add_serving(n, pm->name);
        if (!s) return -ENOMEM;
        s->member = true;
        s->role = serve_role(pm);
        s->state = host ? view_state_of_model(st) : VIEW_STATE_STANDBY;
        s->http_ready = host && st == MODEL_READY;
        s->is_host = host;
        s->split = pl->cfg->split;
        s->pinned = pm_pinned(pm);
        s->bytes = ledger_held_for(&pl->ms->ledger, pm->name);
        if (host && pm->e) {
            s->slots = models_slots(pm->e);
            s->busy = models_busy(pm->e);
        }
        if (pm->st.role == ELECTION_HOST && pm->st.n_workers) {
            view_plan_t *p = view_add_plan(n, s, pm->st.plan_id);
            if (!p) return -ENOMEM;
            p->ngl = pm->st.ngl;
            p->private_split = pm->st.split_private;
            for (size_t k = 0; k < pm->st.n_workers && k < VIEW_MAX_PLAN_WORKERS; k++) {
                const election_range_t *r = &pm->st.workers[k].range;
                view_worker_t *w = &p->workers[p->n_workers++];
                snprintf(w->id, sizeof w->id, "%s", pm->st.workers[k].id);
                w->first = r->first;
                w->end = r->end;
                w->output = r->output;
                w->weight = r->weight;
            }
        }
        if (worker_ready(pl, pm))
            snprintf(s->plan_ready, sizeof s->plan_ready, "%s", pm->st.follow_plan);
    }
    for (model_entry_t *e = NULL; (e = models_next(pl->ms, e));) {
        model_state_t st = models_state(e);
        if (pm_find(pl, e->mm->name) || st == MODEL_UNLOADED) continue;
        view_serving_t *s = view_add_serving(n, e->mm->name);
        if (!s) return -ENOMEM;
        s->role = VIEW_SERVE_REPLICA;
        s->state = view_state_of_model(st);
        s->http_ready = st == MODEL_READY;
        s->is_host = true;
        s->bytes = ledger_held_for(&pl->ms->ledger, e->mm->name);
        s->slots = models_slots(e);
        s->busy = models_busy(e);
    }
    return 0;
}

/* A file on disk that is a catalog model's (same file name): its source is the catalog name,
 * so any node can fetch the same file (rule 4). */
static void catalog_sources(planner_t *pl, view_node_t *n)
{
    for (const model_entry_t *e = NULL; (e = models_next(pl->ms, e));) {
        const known_model_t *k = known_model_find(e->mm->name);
        if (!k || view_source(n, e->mm->name)) continue;
        const char *file = model_ref_basename(k->file);
        size_t len = strlen(e->mm->name);
        if (strncmp(file, e->mm->name, len) != 0 || strcmp(file + len, ".gguf") != 0) continue;
        view_source_t *src = view_add_source(n, e->mm->name, k->name);
        if (src) src->size_bytes = e->size;
    }
}

int self_view(planner_t *pl, view_node_t *n)
{
    view_node_init(n);
    snprintf(n->id, sizeof n->id, "%s", pl->id);
    const char *role = self_role(pl);
    n->role = strcmp(role, "client") == 0 ? CATALOG_ROLE_CLIENT
              : strcmp(role, "host") == 0 ? CATALOG_ROLE_HOST
                                          : CATALOG_ROLE_WORKER;
    n->vram_bytes = pl->ms->ledger.offered;
    n->free_bytes = ledger_free(&pl->ms->ledger);
    n->has_free = true;
    n->speed_mflops = pl->speed.mflops;
    for (unsigned i = 0; pl->devices && i < pl->devices->n && i < VIEW_MAX_DEVICES; i++)
        n->devices[n->n_devices++] = pl->devices->dev[i];
    for (model_entry_t *e = NULL; (e = models_next(pl->ms, e));) {
        view_avail_t *a = view_add_available(n, e->mm->name);
        if (!a) continue; /* beyond the list cap */
        a->size_bytes = e->size;
        a->need_bytes = models_need_bytes(pl->ms, e);
        a->host_bytes = models_host_bytes(pl->ms, e);
        a->type = e->mm->type;
        a->has_type = true;
        a->vision = e->vision;
    }
    /* the names this node asked for: its --model files (not one deleted since) and the names
     * it has no file for */
    for (size_t i = 0; i < pl->cfg->n_models; i++)
        if (!pl->cfg->models[i].from_dir && models_find(pl->ms, pl->cfg->models[i].name))
            view_add_requested(n, pl->cfg->models[i].name);
    for (size_t i = 0; i < pl->cfg->n_requested; i++)
        view_add_requested(n, pl->cfg->requested[i]);
    node_dl_fill_view(pl->dl, n); /* model_source, downloading, refs asked for */
    catalog_sources(pl, n);
    pd_fill_self(pl, n);
    return self_serving(pl, n);
}

uint64_t planner_load_sig(planner_t *pl)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over each model's name and load class */
    for (model_entry_t *e = NULL; (e = models_next(pl->ms, e));) {
        uint32_t c = slots_load_class(models_busy(e), models_slots(e));
        for (const char *p = e->mm->name; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ULL;
        for (int k = 0; k < 4; k++)
            h = (h ^ ((c >> (8 * k)) & 0xff)) * 1099511628211ULL;
    }
    return h;
}

void planner_fill_announcement(planner_t *pl, json_t *ann)
{
    pl->load_sig = planner_load_sig(pl); /* the load this announcement carries */
    pl->load_ann_ms = uv_now(pl->loop);
    view_node_t self;
    if (self_view(pl, &self) == 0 && view_encode(&self, ann) != 0)
        LOGW("planner", "cannot encode this node's announcement: out of memory");
    view_node_free(&self);
}

/* ---- catalog ---- */

void cnodes_free(cnodes_t *c)
{
    free(c->nodes);
    free(c->av);
    free(c->sv);
    free(c->rq);
    free(c->rq_size);
    view_node_free(&c->self);
    memset(c, 0, sizeof *c);
}

/* Catalog nodes: the live peers and, unless skip_self, this node. */
int cnodes_build(planner_t *pl, const peers_t *P, bool skip_self, cnodes_t *c)
{
    memset(c, 0, sizeof *c);
    view_node_init(&c->self);
    if (!skip_self && self_view(pl, &c->self) != 0) {
        cnodes_free(c);
        return -ENOMEM;
    }
    pp_cnodes_t pc;
    int rc = pp_cnodes_build(P->v, P->n, skip_self ? NULL : &c->self, &pc);
    if (rc) {
        cnodes_free(c);
        return rc;
    }
    c->nodes = pc.nodes;
    c->av = pc.av;
    c->sv = pc.sv;
    c->rq = pc.rq;
    c->rq_size = pc.rq_size;
    c->n = pc.n;
    return 0;
}

/* Every member of the group announces "waiting": the group cannot form yet. */
static bool group_waiting(planner_t *pl, const peers_t *P, const char *model)
{
    bool any = false;
    pmodel_t *pm = pm_find(pl, model);
    if (pm) {
        if (!pm->st.waiting) return false;
        any = true;
    }
    for (size_t i = 0; i < P->n; i++) {
        const view_serving_t *s = view_serving(&P->v[i], model);
        if (!s) continue;
        if (s->role != VIEW_SERVE_WAITING) return false;
        any = true;
    }
    return any;
}

/* A catalog entry as the listings show it: the catalog's status, except that a loading model
 * whose whole group waits needs capacity when the mesh lacks its memory, and waits otherwise. */
typedef struct {
    catalog_status_t status;
    bool waiting; /* status is loading: "waiting" */
} entry_status_t;

static entry_status_t entry_status(planner_t *pl, const peers_t *P, const catalog_t *cat,
                                   const catalog_entry_t *e)
{
    if (e->status == CATALOG_LOADING && group_waiting(pl, P, e->name))
        return cat->capacity_bytes < e->need_bytes
                   ? (entry_status_t){.status = CATALOG_NEEDS_CAPACITY}
                   : (entry_status_t){.status = CATALOG_LOADING, .waiting = true};
    return (entry_status_t){.status = e->status};
}

static const char *entry_status_name(entry_status_t s)
{
    return s.waiting ? "waiting" : catalog_status_name(s.status);
}

/* A model that needs capacity: the memory its group lacks (need − the memory of the nodes
 * serving or waiting for it), which a standby with that much free completes (routing tables
 * carry it); 0 otherwise. */
static uint64_t entry_short(entry_status_t s, const catalog_entry_t *e)
{
    if (s.status != CATALOG_NEEDS_CAPACITY) return 0;
    return e->need_bytes > e->servers_vram ? e->need_bytes - e->servers_vram : 0;
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
        peers_free(P);
    }
    return rc;
}

/* A node of the mesh (this one included) downloading model, with its id; NULL when none. */
static const view_download_t *mesh_download(const peers_t *P, const view_node_t *self,
                                            const char *model, const char **who)
{
    const view_download_t *d = view_download(self, model);
    *who = self->id;
    for (size_t i = 0; i < P->n && !d; i++) {
        d = view_download(&P->v[i], model);
        *who = P->v[i].id;
    }
    return d;
}

bool planner_downloading(planner_t *pl, const char *model, char *who, size_t len, uint64_t *bytes,
                         uint64_t *total)
{
    peers_t P;
    if (peers_get(pl, &P) != 0) return false;
    view_node_t self;
    view_node_init(&self); /* peers only: this node's own download answers before routing */
    const char *id;
    const view_download_t *d = mesh_download(&P, &self, model, &id);
    if (d) {
        snprintf(who, len, "%s", id);
        *bytes = d->bytes;
        *total = d->total;
    }
    peers_free(&P);
    return d != NULL;
}

/* {node, bytes, total} of a download of model somewhere in the mesh, or NULL. */
static json_t *download_json(const peers_t *P, const view_node_t *self, const char *model)
{
    const char *who;
    const view_download_t *d = mesh_download(P, self, model, &who);
    return d ? json_pack("{s:s,s:I,s:I}", "node", who, "bytes", (json_int_t)d->bytes, "total",
                         (json_int_t)d->total)
             : NULL;
}

/* The catalog's rows, merged by id into list (see model_list.h). */
static void list_catalog(planner_t *pl, model_list_t *list, bool downloads)
{
    peers_t P;
    cnodes_t cn;
    catalog_t cat;
    if (catalog_now(pl, &P, &cn, &cat) != 0) return;
    for (size_t i = 0; i < cat.n; i++) {
        const catalog_entry_t *e = &cat.entries[i];
        ml_row_t *r = ml_get(list, e->name, false);
        if (!r && (r = ml_add(list, e->name)) != NULL) {
            r->described = r->has_type = true;
            r->type = e->type;
            r->size = e->size_bytes;
        }
        if (!r) continue;
        entry_status_t status = entry_status(pl, &P, &cat, e);
        ml_status_t mesh = status.waiting ? ML_WAITING : ml_status_of_catalog(status.status);
        /* this node's own copy, unloaded here (keep_alive, an LRU eviction, an unload call)
         * while it alone hosts it: the catalog's "loading" only says it is the elected host; the
         * model loads on its next request */
        bool self_only = e->n_hosts == 1 && strcmp(e->hosts[0], cn.self.id) == 0;
        if (!(r->own && r->status == ML_UNLOADED && mesh == ML_LOADING && self_only))
            r->status = mesh;
        uint64_t short_b = entry_short(status, e);
        if (short_b) r->short_bytes = short_b;
        const char *who;
        const view_download_t *d = !downloads || e->status == CATALOG_READY
                                       ? NULL
                                       : mesh_download(&P, &cn.self, e->name, &who);
        if (d) { /* being downloaded somewhere in the mesh: that is what it waits for */
            r->status = ML_DOWNLOADING;
            r->has_progress = true;
            snprintf(r->dl_node, sizeof r->dl_node, "%s", who);
            r->dl_bytes = d->bytes;
            r->dl_total = d->total;
        }
        r->n_hosts = 0;
        r->has_hosts = true;
        for (size_t k = 0; k < e->n_hosts; k++)
            ml_add_host(r, e->hosts[k]);
        r->in_catalog = true;
        r->nodes = e->n_holders;
        r->requested = e->requested;
        pd_rate(&P, &cn.self, e->name, &r->request_rate, &r->last_request);
    }
    catalog_free(&cat);
    cnodes_free(&cn);
    peers_free(&P);
}

void planner_list_models(planner_t *pl, model_list_t *list)
{
    list_catalog(pl, list, true);
}

void planner_list_catalog(planner_t *pl, model_list_t *list)
{
    list_catalog(pl, list, false);
}

/* ---- status ---- */

/* node.memory: the ledger — what this node offers, what is free, who holds what. */
static json_t *memory_status(planner_t *pl)
{
    const ledger_t *l = &pl->ms->ledger;
    json_t *held = json_array();
    for (size_t i = 0; i < l->n; i++) {
        json_t *o = json_pack("{s:s,s:s,s:I,s:b}", "model", l->e[i].name, "kind",
                              l->e[i].kind == LEDGER_WORKER ? "worker" : "model", "bytes",
                              (json_int_t)l->e[i].bytes, "loading", l->e[i].loading);
        const model_entry_t *e =
            l->e[i].kind == LEDGER_MODEL ? models_find(pl->ms, l->e[i].name) : NULL;
        if (o && e && e->slots) { /* the parallel slots these bytes hold, and their context */
            json_object_set_new(o, "slots", json_integer(e->slots));
            if (e->slot_ctx) json_object_set_new(o, "ctx_per_slot", json_integer(e->slot_ctx));
        }
        json_array_append_new(held, o);
    }
    return json_pack("{s:I,s:I,s:o}", "offered_bytes", (json_int_t)l->offered, "free_bytes",
                     (json_int_t)ledger_free(l), "held", held);
}

/* Each peer's speed as this node decoded (and clamped) it from the announcement. */
static void speed_status(planner_t *pl, planner_status_t *out)
{
    peers_t P;
    if (peers_get(pl, &P) != 0) return;
    out->speeds = P.n ? calloc(P.n, sizeof *out->speeds) : NULL;
    for (size_t k = 0; out->speeds && k < P.n; k++) {
        snprintf(out->speeds[k].id, sizeof out->speeds[k].id, "%s", P.v[k].id);
        out->speeds[k].mflops = P.v[k].speed_mflops;
    }
    out->n_speeds = out->speeds ? P.n : 0;
    peers_free(&P);
}
/* A split host's observed stage times (stage.h) and rebalancing state (rebalance.h), into o:
 * stage per worker in the plan's order, rebalance for the plan. */
static void stage_status(planner_t *pl, const pmodel_t *pm, json_t *o)
{
    const peers_t *P = peers_cached(pl);
    json_t *w = json_object_get(o, "workers");
    for (size_t k = 0; k < pm->st.n_workers && w; k++) {
        const pp_stage_t *sg = NULL;
        for (size_t i = 0; i < pm->n_stages && !sg; i++)
            if (strcmp(pm->stages[i].id, pm->st.workers[k].id) == 0) sg = &pm->stages[i];
        json_t *x = json_array_get(w, k);
        if (!x) continue;
        if (!sg) {
            json_object_set_new(x, "stage", json_null());
            continue;
        }
        const view_node_t *v = P ? peers_find(P, sg->id) : NULL;
        uint32_t announced = v ? v->speed_mflops : 0;
        const stage_ema_t *e = &sg->ema;
        json_object_set_new(
            x, "stage",
            json_pack("{s:f,s:I,s:I,s:i,s:f,s:f,s:I,s:I}", "ema_ms", e->windows ? e->ema_ms : 0.0,
                      "samples", (json_int_t)e->samples, "total", (json_int_t)e->total, "slots",
                      (int)e->slots, "layer_ms", stage_layer_ms(e), "base_layer_ms",
                      e->base_layer_ms, "speed_mflops", (json_int_t)stage_speed(e, announced),
                      "announced_mflops", (json_int_t)announced));
    }
    const pp_state_t *st = &pm->st;
    const tunables_t *t = &pl->cfg->tun;
    json_t *applied = json_object();
    for (size_t i = 0; i < st->n_applied; i++)
        json_object_set_new(applied, st->applied[i].id, json_integer(st->applied[i].mflops));
    json_object_set_new(
        o, "rebalance",
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:s,s:o}", "tick_ms",
                  (json_int_t)t->rebalance_tick_ms, "ticks_needed", (json_int_t)t->rebalance_ticks,
                  "gain_pct", (json_int_t)t->rebalance_gain_pct, "ticks",
                  (json_int_t)st->rb.n_ticks, "streak", (json_int_t)st->rb.streak, "gain",
                  st->rb.gain, "cost", st->cost_now, "candidate_cost", st->cost_cand, "candidate",
                  st->cand_sig, "applied_mflops", applied));
    json_object_set_new(o, "rebalances", json_integer((json_int_t)st->rb.applied));
    json_object_set_new(o, "rebalanced_unix_ms", json_integer((json_int_t)pm->rebalanced_unix_ms));
}

void planner_status(planner_t *pl, planner_status_t *out)
{
    *out = (planner_status_t){0};
    out->memory = memory_status(pl);
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
                             "type", mm_type_name(e->type), "status",
                             entry_status_name(entry_status(pl, &P, &cat, e)), "holders",
                             ids_json(e->holders, e->n_holders), "servers",
                             ids_json(e->servers, e->n_servers), "hosts",
                             ids_json(e->hosts, e->n_hosts), "requested", e->requested));
            json_t *o = json_array_get(a, json_array_size(a) - 1);
            pd_annotate(&P, &cn.self, o, e->name);
            json_t *dl = download_json(&P, &cn.self, e->name);
            if (dl) json_object_set_new(o, "downloading", dl);
        }
        out->catalog = a;
        catalog_free(&cat);
        cnodes_free(&cn);
        peers_free(&P);
    }
    json_t *plan = json_array();
    for (size_t i = 0; i < pl->n; i++) {
        pmodel_t *pm = &pl->models[i];
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:b}", "model", pm->name, "rule", pm->rule,
                              "mode", election_mode_name(pm->st.mode), "role", pm_role_name(pm),
                              "host", pm->st.host, "has_file", pm->e != NULL);
        if (!o) continue;
        if (pm->st.role == ELECTION_HOST) {
            json_t *w = json_array();
            for (size_t k = 0; k < pm->st.n_workers; k++) {
                const pp_worker_t *pw = &pm->st.workers[k];
                json_array_append_new(w, json_pack("{s:s,s:i,s:i,s:b,s:i,s:i}", "id", pw->id,
                                                   "first", (int)pw->range.first, "end",
                                                   (int)pw->range.end, "output", pw->range.output,
                                                   "weight", (int)pw->range.weight, "tunnel_port",
                                                   pm->fwd[k] ? tunnel_rpc_port(pm->fwd[k]) : 0));
            }
            json_object_set_new(o, "plan_id", json_string(pm->st.plan_id));
            json_object_set_new(o, "ngl", json_integer(pm->st.ngl));
            json_object_set_new(o, "workers", w);
            json_object_set_new(o, "launched", json_boolean(pm->st.launched));
            json_object_set_new(o, "host_layers",
                                json_pack("{s:i,s:i}", "first", (int)pm->st.host_first, "end",
                                          (int)pm->st.host_end));
            json_object_set_new(o, "speed_aware", json_boolean(pm->st.speed_aware));
            stage_status(pl, pm, o);
        } else if (pm->st.role == ELECTION_WORKER) {
            json_object_set_new(o, "plan_id", json_string(pm->st.follow_plan));
            json_object_set_new(o, "layers",
                                json_pack("{s:i,s:i,s:b}", "first", (int)pm->st.my_range.first,
                                          "end", (int)pm->st.my_range.end, "output",
                                          pm->st.my_range.output));
            json_object_set_new(o, "ready", json_boolean(worker_ready(pl, pm)));
            json_object_set_new(o, "seeded_bytes_present",
                                json_integer((json_int_t)pm->seed_bytes_present));
            json_object_set_new(o, "seeded_bytes_written",
                                json_integer((json_int_t)pm->seed_bytes_written));
        }
        json_array_append_new(plan, o);
    }
    out->plan = plan;
    const tunnel_rpc_stats_t none = {0}, *ts = pl->rpc_stats ? pl->rpc_stats : &none;
    out->rpc_tunnel =
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "host_tx", (json_int_t)ts->host_tx,
                  "host_rx", (json_int_t)ts->host_rx, "worker_rx", (json_int_t)ts->worker_rx,
                  "worker_tx", (json_int_t)ts->worker_tx, "host_turns", (json_int_t)ts->host_turns,
                  "bursts", (json_int_t)ts->bursts, "hold_expired", (json_int_t)ts->hold_expired,
                  "suspects", (json_int_t)ts->suspects);
    out->role = json_string(self_role(pl));
    bool assigned = pl->n && pl->models[0].assigned;
    out->assignment = pl->allocating
                          ? json_pack("{s:s,s:s}", "rule", assigned ? "assigned" : pl->alloc.rule,
                                      "model", pl->n ? pl->models[0].name : "")
                          : json_null();
    out->demand = pd_status(pl);
    out->assignments = planner_assignments(pl);
    out->speed =
        json_pack("{s:I,s:s,s:i}", "mflops", (json_int_t)pl->speed.mflops, "source",
                  pl->speed.source ? pl->speed.source : "off", "threads", (int)pl->speed.threads);
    speed_status(pl, out);
}

/* ---- the public listing (issue 16: --publish) ---- */

void planner_listing(planner_t *pl, mesh_listing_t *l)
{
    peers_t P;
    cnodes_t cn;
    catalog_t cat;
    l->node_count = 1;
    l->mem_total = pl->vram;
    l->mem_free = ledger_free(&pl->ms->ledger);
    l->n_models = 0;
    if (catalog_now(pl, &P, &cn, &cat) != 0) return;
    for (size_t i = 0; i < P.n; i++) {
        const view_node_t *v = &P.v[i];
        l->node_count++;
        l->mem_total += v->vram_bytes;
        l->mem_free += v->has_free ? v->free_bytes : v->vram_bytes;
    }
    for (size_t i = 0; i < cat.n && l->n_models < LISTING_MAX_MODELS; i++) {
        const catalog_entry_t *e = &cat.entries[i];
        listing_model_t *m = &l->models[l->n_models++];
        snprintf(m->name, sizeof m->name, "%s", e->name);
        snprintf(m->status, sizeof m->status, "%s",
                 entry_status_name(entry_status(pl, &P, &cat, e)));
        m->served = e->status == CATALOG_READY || e->status == CATALOG_LOADING;
    }
    catalog_free(&cat);
    cnodes_free(&cn);
    peers_free(&P);
}
