/* planner — see planner.h. */
#include "planner_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "catalog.h"
#include "ledger.h"
#include "log.h"
#include "rpc_cache.h"
#include "tunnel_rpc.h"
#include "util.h"

#define KICK_DELAY_MS 30
#define TICK_MS 250
#define ALLOC_SETTLE_MS 1500
#define MAX_PARKED 256

_Static_assert(PLAN_ID_MAX == VIEW_PLAN_ID_MAX, "plan ids are announced");
_Static_assert(PLAN_MAX_WORKERS <= VIEW_MAX_PLAN_WORKERS, "a plan's workers are announced");
_Static_assert(PLAN_MAX_MODELS <= VIEW_MAX_PLANS, "every hosted plan is announced");

struct pwait {
    planner_t *pl;
    httpd_req_t *req;
    char model[MODEL_NAME_MAX];
    uint64_t deadline;
    pwait_t *next;
};

static uint64_t now_ms(planner_t *pl)
{
    return uv_now(pl->loop);
}

/* ---- parked requests ---- */

static void wait_unlink(planner_t *pl, pwait_t *w)
{
    for (pwait_t **pp = &pl->waiting; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

static void on_wait_abort(httpd_req_t *req)
{
    pwait_t *w = req->data;
    wait_unlink(w->pl, w);
    free(w);
}

void planner_park(planner_t *pl, const char *model, httpd_req_t *req)
{
    size_t n = 0;
    for (pwait_t *w = pl->waiting; w; w = w->next)
        n++;
    pwait_t *w = n < MAX_PARKED ? calloc(1, sizeof *w) : NULL;
    if (!w) {
        httpd_respond_error(req, 503, "unavailable", "busy",
                            "model '%s' is being re-planned and too many requests wait; retry",
                            model);
        return;
    }
    w->pl = pl;
    w->req = req;
    snprintf(w->model, sizeof w->model, "%s", model);
    w->deadline = now_ms(pl) + pl->wait_ms;
    w->next = pl->waiting;
    pl->waiting = w;
    req->data = w;
    req->on_abort = on_wait_abort;
    LOGD("planner", "request for %s waits for this node's split to start", model);
}

/* Serve, refuse or keep waiting every parked request. */
static void wake_parked(planner_t *pl, bool all_out)
{
    uint64_t now = now_ms(pl);
    pwait_t **pp = &pl->waiting;
    while (*pp) {
        pwait_t *w = *pp;
        plan_route_t r = all_out ? PLAN_REMOTE : planner_route(pl, w->model);
        if (r == PLAN_WAIT && now < w->deadline) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        httpd_req_t *req = w->req;
        req->data = NULL;
        req->on_abort = NULL;
        model_entry_t *e = models_find(pl->ms, w->model);
        if (r == PLAN_SERVE && e)
            models_route(pl->ms, e, req);
        else if (r == PLAN_WAIT)
            httpd_respond_error(req, 503, "unavailable", "model_starting",
                                "model '%s' is still starting on this node's split (waited %.0f "
                                "s); retry shortly",
                                w->model, (double)pl->wait_ms / 1000.0);
        else
            httpd_respond_error(req, 503, "unavailable", "model_replanned",
                                "model '%s' moved to another node of the mesh while this request "
                                "waited; retry",
                                w->model);
        free(w);
    }
}

/* ---- routing decision ---- */

/* Some live peer serves the model and is ready. */
static bool ready_elsewhere(planner_t *pl, const char *model)
{
    peers_t P;
    if (peers_get(pl, &P) != 0) return false;
    bool yes = false;
    for (size_t i = 0; i < P.n && !yes; i++) {
        const view_serving_t *s = view_serving(&P.v[i], model);
        yes = s && s->http_ready;
    }
    peers_free(&P);
    return yes;
}

plan_route_t planner_route(planner_t *pl, const char *model)
{
    pmodel_t *pm = pm_find(pl, model);
    model_entry_t *e = models_find(pl->ms, model);
    const char *st = e ? models_status(e) : "unloaded";
    if (!pm) /* not planned here: served on demand, unless a ready host elsewhere has it */
        return strcmp(st, "unloaded") == 0 && ready_elsewhere(pl, model) ? PLAN_REMOTE : PLAN_SERVE;
    if (!pm->e) return PLAN_REMOTE;
    if (!pm->planned) /* before the first plan: as a node alone would, if it fits alone */
        return models_fits(pl->ms, pm->e) && !pl->cfg->split ? PLAN_SERVE : PLAN_WAIT;
    if (pm->role == ELECTION_REPLICA) /* bootstrap: while it loads here, a ready peer answers */
        return strcmp(st, "ready") != 0 && ready_elsewhere(pl, model) ? PLAN_REMOTE : PLAN_SERVE;
    if (pm->role == ELECTION_HOST) return pm->launched ? PLAN_SERVE : PLAN_WAIT;
    return PLAN_REMOTE;
}

bool planner_rpc_allowed(planner_t *pl, const char *peer_id, const char *model)
{
    pmodel_t *pm = pm_find(pl, model);
    return pm && pm->role == ELECTION_WORKER && pm->host[0] && strcmp(pm->host, peer_id) == 0;
}

/* ---- allocation ---- */

static void allocate(planner_t *pl, const peers_t *P)
{
    if (!pl->allocating || pl->n > 0 || !pl->mesh || P->n == 0) return;
    uint64_t now = now_ms(pl);
    if (!pl->first_peer_ms) pl->first_peer_ms = now;
    if (now - pl->first_peer_ms < ALLOC_SETTLE_MS) return; /* the tick comes back */
    cnodes_t cn;
    if (cnodes_build(pl, P, true, &cn) != 0) return;
    catalog_avail_t *disk = calloc(pl->ms->n + 1, sizeof *disk);
    if (!disk) {
        cnodes_free(&cn);
        return;
    }
    for (size_t i = 0; i < pl->ms->n; i++) {
        disk[i].name = pl->ms->entries[i].mm->name;
        disk[i].size_bytes = pl->ms->entries[i].size;
        disk[i].type = pl->ms->entries[i].mm->type;
    }
    const char *rq[CONFIG_MAX_MODELS];
    for (size_t i = 0; i < pl->cfg->n_requested; i++)
        rq[i] = pl->cfg->requested[i];
    alloc_self_t self = {.id = pl->id,
                         .vram_bytes = ledger_free(&pl->ms->ledger),
                         .disk = disk,
                         .n_disk = pl->ms->n,
                         .models = rq,
                         .n_models = pl->cfg->n_requested, /* --model NAME without a file */
                         .no_download = true};
    alloc_result_t res;
    int rc = alloc_choose(&self, cn.nodes, cn.n, &res);
    if (rc == 0 && res.rule == ALLOC_RULE_NONE) {
        /* Nothing on disk fits a rule. A split group may still take this node's memory
         * without the file: the weights then come through the tunnel. */
        alloc_result_t r2;
        self.no_download = false;
        if (alloc_choose(&self, cn.nodes, cn.n, &r2) == 0 &&
            r2.rule == ALLOC_RULE_CANT_RUN_WITHOUT_ME)
            res = r2;
    }
    free(disk);
    cnodes_free(&cn);
    if (rc != 0) return;
    const char *rule = alloc_rule_name(res.rule);
    bool changed = strcmp(pl->alloc_rule, rule) != 0;
    snprintf(pl->alloc_rule, sizeof pl->alloc_rule, "%s", rule);
    if (res.rule == ALLOC_RULE_NONE) {
        if (changed)
            LOGI("planner", "nothing in the mesh needs this node's models or memory now: "
                            "standing by as a worker");
        return;
    }
    model_entry_t *e = models_find(pl->ms, res.model);
    if (!e && res.rule != ALLOC_RULE_CANT_RUN_WITHOUT_ME) {
        if (changed)
            LOGW("planner",
                 "model %s is not on this node's disk and mesh-llm does not download models: "
                 "the mesh lists it as requested; this node stands by (put %s.gguf in "
                 "~/.models or --models-dir to serve it)",
                 res.model, res.model);
        return;
    }
    pmodel_t *pm = &pl->models[pl->n++];
    memset(pm, 0, sizeof *pm);
    pm->pl = pl;
    snprintf(pm->name, sizeof pm->name, "%s", res.model);
    snprintf(pm->rule, sizeof pm->rule, "%s", rule);
    pm->e = e;
    pm->load_when_replica = true;
    LOGI("planner", "the mesh gives this node model %s (rule: %s)%s", res.model, rule,
         e ? "" : "; its weights will come from the host through the tunnel");
}

/* ---- per-model plans ---- */

static void close_fwds(pmodel_t *pm, bool retired_only)
{
    for (size_t i = 0; i < pm->n_retired; i++)
        tunnel_rpc_close(pm->retired[i]);
    pm->n_retired = 0;
    if (retired_only) return;
    for (size_t i = 0; i < pm->n_workers; i++)
        if (pm->workers[i].fwd) {
            tunnel_rpc_close(pm->workers[i].fwd);
            pm->workers[i].fwd = NULL;
        }
}

static void retire_fwds(pmodel_t *pm)
{
    for (size_t i = 0; i < pm->n_workers; i++) {
        if (!pm->workers[i].fwd) continue;
        if (pm->n_retired < sizeof pm->retired / sizeof pm->retired[0])
            pm->retired[pm->n_retired++] = pm->workers[i].fwd;
        else
            tunnel_rpc_close(pm->workers[i].fwd);
        pm->workers[i].fwd = NULL;
    }
}

/* Stop being a split host: the plan, its tunnels and the --rpc arguments go. */
static void leave_host(planner_t *pl, pmodel_t *pm)
{
    close_fwds(pm, false);
    pm->n_workers = 0;
    pm->plan_sig[0] = pm->plan_id[0] = '\0';
    pm->launched = false;
    if (pm->e && pm->e->mesh_args) models_set_mesh_args(pl->ms, pm->e, NULL);
}

/* This node should not run the model (idle, worker, waiting): stop its llama-server. */
static void take_down(planner_t *pl, pmodel_t *pm)
{
    if (pm->e && strcmp(models_status(pm->e), "unloaded") != 0) {
        LOGI("planner", "model %s: this node is now %s for it; stopping its llama-server", pm->name,
             pm_role_name(pm));
        models_unload(pl->ms, pm->e);
        pm->load_when_replica = true;
    }
}

static tp_conn_t *get_conn(void *data, const char *peer_id)
{
    planner_t *pl = data;
    return pl->mesh && !pl->stopping ? mesh_conn(pl->mesh, peer_id) : NULL;
}

static bool peer_ready_for(const peers_t *P, const char *id, const char *model, const char *plan)
{
    const view_node_t *v = peers_find(P, id);
    const view_serving_t *s = v ? view_serving(v, model) : NULL;
    return s && strcmp(s->plan_ready, plan) == 0;
}

static void host_apply(planner_t *pl, pmodel_t *pm, const election_plan_t *plan, const peers_t *P)
{
    election_range_t ranges[PLAN_MAX_WORKERS + 1];
    uint32_t ngl = 0;
    if (!pm->e || plan->n_members > PLAN_MAX_WORKERS + 1 ||
        election_cpu_layout(plan, ranges, &ngl) != 0) {
        LOGW("planner", "model %s: cannot lay out the split (%s)", pm->name,
             !pm->e ? "this node has no copy of the file" : "unknown layer count");
        pm->waiting = true;
        leave_host(pl, pm);
        take_down(pl, pm);
        return;
    }
    char sig[sizeof pm->plan_sig];
    size_t off = (size_t)snprintf(sig, sizeof sig, "ngl=%u", ngl);
    for (size_t k = 0; k + 1 < plan->n_members && off < sizeof sig; k++)
        off += (size_t)snprintf(sig + off, sizeof sig - off, ";%.16s:%u-%u%s", plan->members[k].id,
                                ranges[k].first, ranges[k].end, ranges[k].output ? "+o" : "");
    if (strcmp(sig, pm->plan_sig) != 0) {
        retire_fwds(pm);
        snprintf(pm->plan_sig, sizeof pm->plan_sig, "%s", sig);
        pm->n_workers = plan->n_members - 1;
        for (size_t k = 0; k < pm->n_workers; k++) {
            snprintf(pm->workers[k].id, sizeof pm->workers[k].id, "%s", plan->members[k].id);
            pm->workers[k].range = ranges[k];
            pm->workers[k].fwd = NULL;
        }
        pm->ngl = ngl;
        snprintf(pm->plan_id, sizeof pm->plan_id, "%.8s-%llx-%u", pl->id,
                 (unsigned long long)time(NULL), ++pm->plan_seq);
        pm->launched = false;
        LOGI("planner",
             "model %s: split over %zu node(s) (plan %s): this node hosts layers 0-%u, %zu "
             "worker(s) hold the rest; waiting for them",
             pm->name, pm->n_workers + 1, pm->plan_id, ranges[plan->host_index].end - 1,
             pm->n_workers);
    }
    if (pm->launched) {
        if (pm->n_retired && strcmp(models_status(pm->e), "ready") == 0) close_fwds(pm, true);
        return;
    }
    for (size_t k = 0; k < pm->n_workers; k++)
        if (!peer_ready_for(P, pm->workers[k].id, pm->name, pm->plan_id)) return;
    /* every worker is ready: tunnels, then llama-server with the plan */
    buf_t rpc, ts;
    buf_init(&rpc, 1 << 14);
    buf_init(&ts, 1 << 14);
    int rc = 0;
    for (size_t k = 0; k < pm->n_workers && rc == 0; k++) {
        plan_worker_t *w = &pm->workers[k];
        rc = tunnel_rpc_listen(pl->loop, w->id, pm->name, get_conn, pl, &w->fwd);
        if (rc == 0) {
            buf_printf(&rpc, "%s127.0.0.1:%d", k ? "," : "", tunnel_rpc_port(w->fwd));
            buf_printf(&ts, "%s%u", k ? "," : "", w->range.weight);
        }
    }
    if (rc == 0) {
        char args[1 << 15];
        snprintf(args, sizeof args, "--rpc %s --tensor-split %s -ngl %u --fit off", rpc.data,
                 ts.data, pm->ngl);
        rc = models_set_mesh_args(pl->ms, pm->e, args);
        if (rc == 0) {
            LOGI("planner", "model %s: workers ready; starting llama-server %s", pm->name, args);
            pm->launched = true;
            pm->load_when_replica = true;
            models_load(pl->ms, pm->e, true);
        }
    }
    if (rc != 0) {
        LOGE("planner", "model %s: cannot start the split: %s", pm->name, strerror(-rc));
        for (size_t k = 0; k < pm->n_workers; k++)
            if (pm->workers[k].fwd) {
                tunnel_rpc_close(pm->workers[k].fwd);
                pm->workers[k].fwd = NULL;
            }
    }
    buf_free(&rpc);
    buf_free(&ts);
}

static void seed_done(void *data, int status, const rpc_cache_result_t *r)
{
    pmodel_t *pm = data;
    planner_t *pl = pm->pl;
    pm->seeding = false;
    if (status == 0) {
        pm->seed_bytes_present = r->bytes_present;
        pm->seed_bytes_written = r->bytes_seeded;
        LOGI("planner",
             "model %s: rpc cache filled from the local file (%u tensor(s) written, %u already "
             "there)",
             pm->name, r->n_seeded, r->n_present);
    } else {
        LOGW("planner",
             "model %s: cannot fill the rpc cache (%s); the weights will come "
             "through the tunnel",
             pm->name, strerror(-status));
    }
    snprintf(pm->seeded_plan, sizeof pm->seeded_plan, "%s", pm->seeding_plan);
    if (!pl->stopping) planner_kick(pl);
}

static void ensure_rpc(planner_t *pl)
{
    if (!pl->rpc) {
        int rc = sv_add_rpc(pl->sv, "rpc-server", &pl->rpc);
        if (rc) {
            LOGE("planner",
                 "cannot run ggml-rpc-server (%s): this node cannot lend memory to "
                 "split models",
                 rc == -ENOENT ? "not found next to llama-server" : strerror(-rc));
            return;
        }
    }
    if (pl->rpc->state == CHILD_STOPPED) sv_start(pl->rpc);
}

static void worker_apply(planner_t *pl, pmodel_t *pm, const peers_t *P)
{
    /* the host's announced plan says whether this node is one of its workers, and which layers */
    const view_node_t *host = peers_find(P, pm->host);
    const view_serving_t *s = host ? view_serving(host, pm->name) : NULL;
    const view_plan_t *plan = s ? s->plan : NULL;
    const view_worker_t *mine = NULL;
    for (size_t i = 0; plan && i < plan->n_workers; i++)
        if (strcmp(plan->workers[i].id, pl->id) == 0) mine = &plan->workers[i];
    if (!mine) {
        pm->role = ELECTION_IDLE; /* not (yet) in the host's plan */
        pm->follow_plan[0] = '\0';
        return;
    }
    const char *plan_id = plan->id;
    if (mine->end < mine->first || mine->end > ELECTION_MAX_LAYERS) {
        pm->role = ELECTION_IDLE;
        return;
    }
    if (strcmp(pm->follow_plan, plan_id) != 0) {
        snprintf(pm->follow_plan, sizeof pm->follow_plan, "%s", plan_id);
        pm->my_range.first = mine->first;
        pm->my_range.end = mine->end;
        pm->my_range.output = mine->output;
        LOGI("planner",
             "model %s: this node is a split worker for host %.12s (plan %s, layers "
             "%u-%u%s)",
             pm->name, pm->host, plan_id, pm->my_range.first, pm->my_range.end,
             pm->my_range.output ? " + output" : "");
    }
    ensure_rpc(pl);
    if (pm->seeding || strcmp(pm->seeded_plan, plan_id) == 0) return;
    snprintf(pm->seeding_plan, sizeof pm->seeding_plan, "%s", plan_id);
    char dir[4096];
    if (!pm->e || rpc_cache_dir(dir, sizeof dir) != 0 ||
        rpc_cache_seed(pl->loop, pm->e->path, dir, pm->my_range.first, pm->my_range.end,
                       pm->my_range.output, seed_done, pm) != 0) {
        snprintf(pm->seeded_plan, sizeof pm->seeded_plan, "%s", plan_id);
        return;
    }
    pm->seeding = true;
}

/* The ledger follows the plan: a split host's llama-server holds its share of the model, a
 * worker's rpc-server the rest of its memory's share; a replica the whole model (models.c). */
static void hold_share(planner_t *pl, pmodel_t *pm, const election_plan_t *plan)
{
    uint64_t share = 0;
    for (size_t i = 0; i < plan->n_members; i++)
        if (strcmp(plan->members[i].id, pl->id) == 0)
            share = (uint64_t)((double)plan->need_bytes * plan->members[i].share + 0.5);
    if (pm->e) models_set_host_share(pl->ms, pm->e, pm->role == ELECTION_HOST ? share : 0);
    if (pm->role == ELECTION_WORKER)
        ledger_set(&pl->ms->ledger, pm->name, LEDGER_WORKER, share, false);
    else
        ledger_clear(&pl->ms->ledger, pm->name, LEDGER_WORKER);
}

static void plan_model(planner_t *pl, pmodel_t *pm, const peers_t *P)
{
    /* the group: this node and every live peer that announces itself a member */
    election_node_t nodes[ELECTION_MAX_NODES];
    size_t n = 0;
    uint64_t size = pm->e ? pm->e->size : 0;
    uint64_t need = pm->e ? models_need_bytes(pl->ms, pm->e) : 0;
    /* a node offers each group what is free plus what it holds for this model already */
    nodes[n++] = (election_node_t){.id = pl->id,
                                   .vram_bytes = ledger_offer_for(&pl->ms->ledger, pm->name),
                                   .rtt_ms = 0,
                                   .force_split = pl->cfg->split};
    for (size_t i = 0; i < P->n && n < ELECTION_MAX_NODES; i++) {
        const view_node_t *v = &P->v[i];
        for (size_t k = 0; k < v->n_available; k++) {
            const view_avail_t *a = &v->available[k];
            if (strcmp(a->name, pm->name) != 0) continue;
            if (a->size_bytes > size) size = a->size_bytes;
            if (a->need_bytes > need) need = a->need_bytes;
        }
        const view_serving_t *s = view_serving(v, pm->name);
        if (!s || !s->member) continue;
        tp_conn_t *c = pl->mesh ? mesh_conn(pl->mesh, v->id) : NULL;
        nodes[n++] = (election_node_t){
            .id = v->id,
            .vram_bytes = view_offer_for(v, pm->name),
            .rtt_ms = c ? (int32_t)(tp_conn_rtt_ms(c) + 0.5) : -1,
            .force_split = s->split,
        };
    }
    election_role_t was = pm->role;
    bool was_waiting = pm->waiting;
    pm->planned = true;
    pm->waiting = false;
    pm->host[0] = '\0';
    election_plan_t plan;
    election_input_t in = {.model_bytes = size,
                           .need_bytes = need,
                           .n_layers = pm->e ? pm->e->n_layers : 0,
                           .nodes = nodes,
                           .n_nodes = n};
    if (size == 0 || election_run(&in, &plan) != 0) {
        pm->mode = ELECTION_EMPTY;
        pm->role = ELECTION_IDLE;
        pm->waiting = true;
        leave_host(pl, pm);
        take_down(pl, pm);
        return;
    }
    pm->mode = plan.mode;
    const election_member_t *h = election_host(&plan);
    if (h) snprintf(pm->host, sizeof pm->host, "%s", h->id);
    if (plan.mode == ELECTION_SOLO) {
        pm->role = election_role_of(&plan, pl->id);
        if (pm->role == ELECTION_REPLICA && !pm->e) pm->role = ELECTION_IDLE;
    } else if (plan.mode == ELECTION_SPLIT) {
        pm->role = h && strcmp(h->id, pl->id) == 0 ? ELECTION_HOST : ELECTION_WORKER;
    } else {
        pm->role = ELECTION_IDLE;
        pm->waiting = true;
    }
    if (pm->waiting && !was_waiting) {
        char nb[32], have[32];
        LOGW("planner", "model %s needs %s of memory; its group has %s: waiting for more nodes",
             pm->name, ledger_fmt(plan.need_bytes, nb, sizeof nb),
             ledger_fmt(plan.total_bytes, have, sizeof have));
    }
    hold_share(pl, pm, &plan);
    if (pm->role != ELECTION_HOST) leave_host(pl, pm);
    if (pm->role == ELECTION_HOST)
        host_apply(pl, pm, &plan, P);
    else if (pm->role == ELECTION_WORKER)
        worker_apply(pl, pm, P);
    if (pm->role != ELECTION_WORKER) pm->follow_plan[0] = '\0';
    if (pm->role == ELECTION_REPLICA) {
        if (pm->e->mesh_args) {
            models_set_mesh_args(pl->ms, pm->e, NULL);
            if (strcmp(models_status(pm->e), "unloaded") != 0) models_load(pl->ms, pm->e, true);
        }
        if (pm->load_when_replica) {
            pm->load_when_replica = false;
            models_load(pl->ms, pm->e, false);
        }
        if (was != ELECTION_REPLICA)
            LOGI("planner", "model %s: this node serves it alone (%s)", pm->name,
                 plan.n_members > 1 ? "one of several replicas" : "solo");
    } else if (pm->role != ELECTION_HOST) {
        take_down(pl, pm);
    }
    election_plan_free(&plan);
}

/* ---- the loop ---- */

static void replan(planner_t *pl)
{
    if (pl->stopping) return;
    peers_t P;
    if (peers_get(pl, &P) != 0) return;
    allocate(pl, &P);
    for (size_t i = 0; i < pl->n; i++)
        plan_model(pl, &pl->models[i], &P);
    peers_free(&P);
    wake_parked(pl, false);
    /* announce when what this node serves changed */
    view_node_t now;
    if (self_view(pl, &now) == 0 &&
        (!pl->last_self_valid || !view_serving_equal(&now, &pl->last_self))) {
        view_node_free(&pl->last_self);
        pl->last_self = now;
        pl->last_self_valid = true;
        if (pl->mesh) {
            mesh_set_role(pl->mesh, self_role(pl));
            mesh_announce_changed(pl->mesh);
        }
    } else {
        view_node_free(&now);
    }
}

static void on_kick(uv_timer_t *t)
{
    replan(t->data);
}

static void on_tick(uv_timer_t *t)
{
    planner_t *pl = t->data;
    if (pl->waiting || (pl->allocating && pl->n == 0)) replan(pl);
}

void planner_kick(planner_t *pl)
{
    if (pl->stopping || !pl->timer_open) return;
    if (!uv_is_active((uv_handle_t *)&pl->timer))
        uv_timer_start(&pl->timer, on_kick, KICK_DELAY_MS, 0);
}

int planner_init(planner_t *pl, uv_loop_t *loop, const config_t *cfg, models_t *ms,
                 supervisor_t *sv, uint64_t vram)
{
    memset(pl, 0, sizeof *pl);
    pl->loop = loop;
    pl->cfg = cfg;
    pl->ms = ms;
    pl->sv = sv;
    pl->vram = cfg->client ? 0 : vram;
    pl->wait_ms = env_ms("MESH_LLM_PLAN_WAIT_MS", 30000);
    pl->allocating = cfg->n_joins > 0 && !cfg->client;
    for (size_t i = 0; i < ms->n && pl->n < PLAN_MAX_MODELS; i++) {
        model_entry_t *e = &ms->entries[i];
        if (!e->preload) continue; /* --model: this node serves it */
        pmodel_t *pm = &pl->models[pl->n++];
        snprintf(pm->name, sizeof pm->name, "%s", e->mm->name);
        snprintf(pm->rule, sizeof pm->rule, "explicit");
        pm->e = e;
        pm->pl = pl;
        pl->allocating = false;
        if (cfg->split || !models_fits(ms, e)) {
            /* it cannot run here alone: the plan starts it (as a split host) or not at all */
            e->preload = 0;
            pm->load_when_replica = true;
        }
    }
    for (size_t i = 0; i < PLAN_MAX_MODELS; i++)
        pl->models[i].pl = pl;
    uv_timer_init(loop, &pl->timer);
    uv_timer_init(loop, &pl->tick);
    pl->timer.data = pl->tick.data = pl;
    pl->timer_open = true;
    return 0;
}

void planner_start(planner_t *pl, mesh_t *mesh)
{
    pl->mesh = mesh;
    snprintf(pl->id, sizeof pl->id, "%s", mesh_node_id(mesh));
    uv_timer_start(&pl->tick, on_tick, TICK_MS, TICK_MS);
    replan(pl); /* decide now: a request may come before any timer fires */
}

void planner_stop(planner_t *pl)
{
    if (pl->stopping) return;
    pl->stopping = true;
    wake_parked(pl, true);
    for (size_t i = 0; i < pl->n; i++)
        close_fwds(&pl->models[i], false);
    if (pl->timer_open) {
        pl->timer_open = false;
        uv_close((uv_handle_t *)&pl->timer, NULL);
        uv_close((uv_handle_t *)&pl->tick, NULL);
    }
    view_node_free(&pl->last_self);
    pl->last_self_valid = false;
    pl->mesh = NULL;
}
