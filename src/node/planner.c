/* planner — see planner.h. */
#include "planner_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog.h"
#include "ledger.h"
#include "llama_args.h"
#include "log.h"
#include "promote.h"
#include "options.h"
#include "rpc_cache.h"
#include "slots.h"
#include "tunnel_rpc.h"
#include "util.h"

#define KICK_DELAY_MS 30
#define TICK_MS 250
#define WAIT_REPLAN_MS 2000 /* a model waiting for more nodes: planned again this often */
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
    const peers_t *P = peers_cached(pl);
    bool yes = false;
    for (size_t i = 0; P && i < P->n && !yes; i++) {
        const view_serving_t *s = view_serving(&P->v[i], model);
        yes = s && s->http_ready;
    }
    return yes;
}

plan_route_t planner_route(planner_t *pl, const char *model)
{
    pmodel_t *pm = pm_find(pl, model);
    model_entry_t *e = models_find(pl->ms, model);
    bool ready_here = e && models_state(e) == MODEL_READY;
    rd_gate_t g = {.planned = pm != NULL,
                   .have_file = pm && pm->e,
                   .first_plan_done = pm && pm->st.planned,
                   .fits_alone = pm && pm->e && models_fits(pl->ms, pm->e) && !pl->cfg->split,
                   .role = pm ? (int)pm->st.role : ELECTION_IDLE,
                   .launched = pm && pm->st.launched,
                   .local_ready = ready_here,
                   .ready_elsewhere = !ready_here && ready_elsewhere(pl, model)};
    switch (rd_local_gate(&g)) { /* the pure rule, with the bootstrap (route_decide.h) */
    case RD_PLAN_SERVE:
        return PLAN_SERVE;
    case RD_PLAN_WAIT:
        return PLAN_WAIT;
    default:
        return PLAN_REMOTE;
    }
}

bool planner_rpc_allowed(planner_t *pl, const char *peer_id, const char *model)
{
    pmodel_t *pm = pm_find(pl, model);
    return pm && pm->st.role == ELECTION_WORKER && pm->st.host[0] &&
           strcmp(pm->st.host, peer_id) == 0;
}

/* ---- allocation ---- */

/* The promotion rules over the peers and this node's view (planner_demand.c). */
static void promote(planner_t *pl, const peers_t *P)
{
    view_node_t self;
    bool ok = self_view(pl, &self) == 0;
    pd_promote(pl, P, ok ? &self : NULL);
    view_node_free(&self);
}

static void allocate(planner_t *pl, const peers_t *P)
{
    if (!pl->allocating || pl->n > 0 || !pl->mesh || pl->passive) return;
    if (pl->standby) { /* demoted: only promotion gives it a model again */
        promote(pl, P);
        return;
    }
    size_t n_disk = 0;
    catalog_avail_t *disk = calloc(pl->ms->n + 1, sizeof *disk);
    if (!disk) return;
    for (model_entry_t *e = NULL; (e = models_next(pl->ms, e)); n_disk++) {
        disk[n_disk].name = e->mm->name;
        disk[n_disk].size_bytes = e->size;
        disk[n_disk].type = e->mm->type;
    }
    const char *rq[CONFIG_MAX_MODELS];
    for (size_t i = 0; i < pl->cfg->n_requested; i++)
        rq[i] = pl->cfg->requested[i];
    const char *failed[PLAN_MAX_MODELS];
    for (size_t i = 0; i < pl->n_dl_failed; i++)
        failed[i] = pl->dl_failed[i];
    pp_alloc_input_t in = {.id = pl->id,
                           .free_bytes = ledger_free(&pl->ms->ledger),
                           .disk = disk,
                           .n_disk = n_disk,
                           .requested = rq,
                           .n_requested = pl->cfg->n_requested,
                           .peers = P->v,
                           .n_peers = P->n,
                           .can_download = pl->dl != NULL && pl->dl->d != NULL,
                           .follow_urls = pl->cfg->tun.dl_follow_urls,
                           .failed = failed,
                           .n_failed = pl->n_dl_failed};
    pp_alloc_result_t res;
    pp_allocate(&in, &pl->alloc, now_ms(pl), &res);
    free(disk);
    pl->alloc_none = res.kind == PP_ALLOC_NONE;
    pl->alloc_settling = res.kind == PP_ALLOC_LATER && P->n > 0; /* the tick comes back */
    if (res.kind == PP_ALLOC_NONE && res.changed)
        LOGI("planner", "nothing in the mesh needs this node's models or memory now: "
                        "standing by as a worker");
    if (res.kind == PP_ALLOC_MISSING && res.changed)
        LOGW("planner",
             "model %s is not on this node's disk and no node of the mesh says where to "
             "download it: the mesh lists it as requested; this node stands by (put %s.gguf in "
             "~/.models or --models-dir to serve it)",
             res.model, res.model);
    if (res.kind == PP_ALLOC_DOWNLOAD) {
        /* rule 4: download and serve. Solo unless the plan makes it a split worker. */
        uint64_t free_b = ledger_free(&pl->ms->ledger);
        bool solo = res.size_bytes && free_b >= res.size_bytes + res.size_bytes / 10;
        char err[512];
        if (node_dl_start_mesh(pl->dl, res.ref, solo, err, sizeof err) != 0) {
            LOGW("planner", "model %s: cannot download %s: %s", res.model, res.ref, err);
            if (pl->n_dl_failed < PLAN_MAX_MODELS)
                snprintf(pl->dl_failed[pl->n_dl_failed++], MODEL_NAME_MAX, "%s", res.model);
            return;
        }
    } else if (res.kind != PP_ALLOC_TAKE) {
        /* standing by (or every peer gone): the promotion rules may still want this node */
        if (res.kind != PP_ALLOC_LATER || P->n == 0) promote(pl, P);
        return;
    }
    pmodel_t *pm = &pl->models[pl->n++];
    memset(pm, 0, sizeof *pm);
    pm->pl = pl;
    snprintf(pm->name, sizeof pm->name, "%s", res.model);
    snprintf(pm->rule, sizeof pm->rule, "%s", res.rule);
    pm->e = models_find(pl->ms, res.model);
    pm->st.load_when_replica = true;
    pm->dl = res.kind == PP_ALLOC_DOWNLOAD;
    if (pm->dl) snprintf(pm->dl_ref, sizeof pm->dl_ref, "%s", res.ref);
    LOGI("planner", "the mesh gives this node model %s (rule: %s)%s", res.model, res.rule,
         pm->e    ? ""
         : pm->dl ? "; downloading it, then serving it"
                  : "; its weights will come from the host through the tunnel");
}

void planner_download_failed(planner_t *pl, const char *ref)
{
    /* the allocation gives a node one model: it is models[0] */
    pmodel_t *pm = &pl->models[0];
    if (pl->n != 1 || !pm->dl || pm->e || strcmp(pm->dl_ref, ref) != 0) return;
    LOGW("planner", "model %s: its download failed; this node gives it up and stands by", pm->name);
    if (pl->n_dl_failed < PLAN_MAX_MODELS)
        snprintf(pl->dl_failed[pl->n_dl_failed++], MODEL_NAME_MAX, "%s", pm->name);
    ledger_clear(&pl->ms->ledger, pm->name, LEDGER_WORKER);
    memset(pm, 0, sizeof *pm);
    pm->pl = pl;
    pl->n = 0;
    snprintf(pl->alloc.rule, sizeof pl->alloc.rule, "standby");
    planner_kick(pl);
}

/* ---- executing the policy's actions ---- */

static void close_fwds(pmodel_t *pm, bool retired_only)
{
    for (size_t i = 0; i < pm->n_retired; i++)
        tunnel_rpc_close(pm->retired[i]);
    pm->n_retired = 0;
    if (retired_only) return;
    for (size_t i = 0; i < PLAN_MAX_WORKERS; i++)
        if (pm->fwd[i]) {
            tunnel_rpc_close(pm->fwd[i]);
            pm->fwd[i] = NULL;
        }
}

static void retire_fwds(pmodel_t *pm)
{
    for (size_t i = 0; i < PLAN_MAX_WORKERS; i++) {
        if (!pm->fwd[i]) continue;
        if (pm->n_retired < sizeof pm->retired / sizeof pm->retired[0])
            pm->retired[pm->n_retired++] = pm->fwd[i];
        else
            tunnel_rpc_close(pm->fwd[i]);
        pm->fwd[i] = NULL;
    }
}

static tp_conn_t *get_conn(void *data, const char *peer_id)
{
    planner_t *pl = data;
    return pl->mesh && !pl->stopping ? mesh_conn(pl->mesh, peer_id) : NULL;
}

/* A link to a worker failed or its reply is overdue (tunnel_rpc_on_suspect): probe the worker
 * now rather than at its monitors' next heartbeat; a confirmed death re-plans the model. */
static void on_rpc_suspect(void *data, const char *peer_id, const char *why)
{
    planner_t *pl = data;
    LOGD("planner", "split worker %.12s suspected (%s): probing it", peer_id, why);
    if (pl->mesh && !pl->stopping) mesh_suspect(pl->mesh, peer_id);
}

/* A worker's stage of a token, observed by its tunnel (tunnel_rpc_on_stage): into its EMA, as
 * the slots it holds in the running plan, less the connection's least RTT. Retired tunnels (the
 * old layout, still draining) are not the plan's: not counted. */
static void on_rpc_stage(void *data, rpc_fwd_t *f, double ms)
{
    planner_t *pl = data;
    pmodel_t *pm = NULL; /* by the tunnel: models move up in pl->models when one goes */
    size_t k = 0;
    for (size_t i = 0; i < pl->n && !pm; i++)
        for (k = 0; k < pl->models[i].st.n_workers; k++)
            if (pl->models[i].fwd[k] == f) {
                pm = &pl->models[i];
                break;
            }
    if (!pm || !pm->st.launched) return;
    const pp_worker_t *w = &pm->st.workers[k];
    pp_stage_t *sg = NULL;
    for (size_t i = 0; i < pm->n_stages && !sg; i++)
        if (strcmp(pm->stages[i].id, w->id) == 0) sg = &pm->stages[i];
    if (!sg) {
        /* a new worker: a free entry, else the one no longer in the plan */
        size_t slot = pm->n_stages;
        for (size_t i = 0; i < pm->n_stages && slot == pm->n_stages; i++) {
            bool in_plan = false;
            for (size_t j = 0; j < pm->st.n_workers; j++)
                in_plan |= strcmp(pm->stages[i].id, pm->st.workers[j].id) == 0;
            if (!in_plan) slot = i;
        }
        if (slot == PLAN_MAX_WORKERS) return;
        if (slot == pm->n_stages) pm->n_stages++;
        sg = &pm->stages[slot];
        *sg = (pp_stage_t){0};
        memcpy(sg->id, w->id, sizeof sg->id);
    }
    tp_conn_t *c = pl->mesh ? mesh_conn(pl->mesh, w->id) : NULL;
    stage_set_slots(&sg->ema, w->range.weight);
    stage_note(&sg->ema, ms, c ? tp_conn_min_rtt_ms(c) : -1);
}

/* Every worker of the plan is ready: tunnels, then llama-server with the plan. */
static void start_host(planner_t *pl, pmodel_t *pm)
{
    buf_t rpc;
    buf_init(&rpc, 1 << 14);
    int rc = 0;
    for (size_t k = 0; k < pm->st.n_workers && rc == 0; k++) {
        tunnel_rpc_opts_t ro;
        tunables_rpc_opts(&pl->cfg->tun, &ro);
        rc = tunnel_rpc_listen(pl->loop, pm->st.workers[k].id, pm->name, get_conn, pl, &ro,
                               &pm->fwd[k]);
        if (rc == 0) tunnel_rpc_on_suspect(pm->fwd[k], on_rpc_suspect);
        if (rc == 0) tunnel_rpc_on_stage(pm->fwd[k], on_rpc_stage, pl);
        if (rc == 0) tunnel_rpc_set_stats(pm->fwd[k], pl->rpc_stats);
        if (rc == 0) buf_printf(&rpc, "%s127.0.0.1:%d", k ? "," : "", tunnel_rpc_port(pm->fwd[k]));
    }
    char rest[1 << 14], args[1 << 15];
    if (rc == 0) rc = pp_host_args(&pm->st, rest, sizeof rest);
    /* llama-server's prompt cache (--cache-ram, on by default) saves the idle slot's KV cache
     * to RAM when a task arrives: on a split, GET_TENSORs of the workers' KV cache through the
     * tunnels, round trips and bytes before every first token. Off unless the operator or the
     * loading client asked for it. */
    bool cram = pm->e && (llama_args_sets(pm->e->llamacpp_args, "--cache-ram") ||
                          llama_args_sets(pm->e->serve_args, "--cache-ram"));
    if (rc == 0) {
        snprintf(args, sizeof args, "--rpc %s %s%s", rpc.data, rest, cram ? "" : " --cache-ram 0");
        rc = models_set_mesh_args(pl->ms, pm->e, args);
    }
    if (rc == 0) {
        LOGI("planner", "model %s: workers ready; starting llama-server %s", pm->name, args);
        models_load(pl->ms, pm->e, true);
    } else {
        LOGE("planner", "model %s: cannot start the split: %s", pm->name, strerror(-rc));
        pp_host_failed(&pm->st);
        for (size_t k = 0; k < PLAN_MAX_WORKERS; k++)
            if (pm->fwd[k]) {
                tunnel_rpc_close(pm->fwd[k]);
                pm->fwd[k] = NULL;
            }
    }
    buf_free(&rpc);
}

static void replan(planner_t *pl);

static void seed_done(void *data, int status, const rpc_cache_result_t *r)
{
    pmodel_t *pm = data;
    planner_t *pl = pm->pl;
    pm->seeding = false;
    if (status == 0) {
        pm->seed_bytes_present = r->bytes_present;
        pm->seed_bytes_written = r->bytes_seeded;
        LOGI("planner",
             "model %s: rpc cache filled from the local file in %.2f s (%u tensor(s) written, "
             "%u already there, %.0f MB hashed)",
             pm->name, (double)(now_ms(pl) - pm->seed_started_ms) / 1000.0, r->n_seeded,
             r->n_present, (double)r->bytes_hashed / 1e6);
    } else {
        LOGW("planner",
             "model %s: cannot fill the rpc cache (%s); the weights will come "
             "through the tunnel",
             pm->name, strerror(-status));
    }
    snprintf(pm->seeded_plan, sizeof pm->seeded_plan, "%s", pm->seeding_plan);
    /* announce plan_ready now rather than after the kick's delay: the host waits for it */
    if (!pl->stopping) replan(pl);
}

static void start_rpc(planner_t *pl)
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

/* Running or starting (not stopped, not being stopped). */
static bool rpc_running(const planner_t *pl)
{
    return pl->rpc && pl->rpc->state != CHILD_STOPPED && pl->rpc->state != CHILD_STOPPING;
}

static void start_worker(planner_t *pl, pmodel_t *pm)
{
    const pp_state_t *st = &pm->st;
    snprintf(pm->seeding_plan, sizeof pm->seeding_plan, "%s", st->follow_plan);
    char dir[4096];
    if (!pm->e || rpc_cache_dir(dir, sizeof dir) != 0 ||
        rpc_cache_seed(pl->loop, pm->e->path, dir, st->my_range.first, st->my_range.end,
                       st->my_range.output, seed_done, pm) != 0) {
        snprintf(pm->seeded_plan, sizeof pm->seeded_plan, "%s", st->follow_plan);
        return;
    }
    pm->seed_started_ms = now_ms(pl);
    pm->seeding = true;
}

static void execute(planner_t *pl, const pp_action_t *a)
{
    pmodel_t *pm = a->kind == PP_STOP_RPC_SERVER ? NULL : &pl->models[a->model];
    switch (a->kind) {
    case PP_STOP_HOST:
        close_fwds(pm, false);
        if (pm->e && pm->e->mesh_args) models_set_mesh_args(pl->ms, pm->e, NULL);
        break;
    case PP_STOP_MODEL:
        LOGI("planner", "model %s: this node is now %s for it; stopping its llama-server", pm->name,
             pm_role_name(pm));
        models_unload(pl->ms, pm->e);
        break;
    case PP_SET_LEDGER:
        if (a->ledger == LEDGER_MODEL)
            models_set_host_share(pl->ms, pm->e, a->bytes);
        else if (a->bytes || pm->st.role == ELECTION_WORKER)
            ledger_set(&pl->ms->ledger, pm->name, LEDGER_WORKER, a->bytes, false);
        else
            ledger_clear(&pl->ms->ledger, pm->name, LEDGER_WORKER);
        break;
    case PP_NEW_PLAN: {
        retire_fwds(pm);
        char layers[64] = "no repeating layer";
        if (pm->st.host_end > pm->st.host_first)
            snprintf(layers, sizeof layers, "layers %u-%u%s", pm->st.host_first,
                     pm->st.host_end - 1, pm->st.n_host_weights ? " on its devices" : "");
        LOGI("planner",
             "model %s: split over %zu node(s) (plan %s): this node hosts %s%s, %zu "
             "worker(s) hold the rest; waiting for them",
             pm->name, pm->st.n_workers + 1, pm->st.plan_id, layers,
             pm->st.split_private ? " and the output layer (--split-private)" : "",
             pm->st.n_workers);
        break;
    }
    case PP_START_HOST:
        start_host(pl, pm);
        break;
    case PP_CLOSE_RETIRED:
        close_fwds(pm, true);
        break;
    case PP_START_REPLICA:
        models_load(pl->ms, pm->e, false);
        break;
    case PP_START_RPC_SERVER:
        start_rpc(pl);
        break;
    case PP_START_WORKER:
        start_worker(pl, pm);
        break;
    case PP_STOP_RPC_SERVER:
        LOGI("planner", "no split worker role remains: stopping this node's rpc-server");
        sv_stop(pl->rpc, 2000);
        break;
    }
}

/* What the decisions changed, for the log. */
static void log_changes(pmodel_t *pm, const pp_state_t *was)
{
    const pp_state_t *st = &pm->st;
    if (st->rebalanced) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        pm->rebalanced_unix_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    }
    if (st->rebalanced)
        LOGI("planner",
             "model %s: rebalancing the split from its workers' observed stage times: the "
             "new layout predicts %.0f%% less compute per token (best for %llu tick(s) in a "
             "row); it loads when the workers are ready and the requests in flight on the old "
             "layout have ended (new ones wait; both layouts do not fit the workers' memory at "
             "once)",
             pm->name, st->rb.gain * 100, (unsigned long long)pm->pl->cfg->tun.rebalance_ticks);
    if (st->waiting && !was->waiting && st->role == ELECTION_HOST) {
        LOGW("planner", "model %s: cannot lay out the split (%s)", pm->name,
             !pm->e ? "this node has no copy of the file" : "unknown layer count");
    } else if (st->waiting && !was->waiting && st->mode != ELECTION_EMPTY) {
        char nb[32], have[32];
        LOGW("planner", "model %s needs %s of memory; its group has %s: waiting for more nodes",
             pm->name, ledger_fmt(st->need_bytes, nb, sizeof nb),
             ledger_fmt(st->total_bytes, have, sizeof have));
    }
    if (st->role == ELECTION_REPLICA && was->role != ELECTION_REPLICA)
        LOGI("planner", "model %s: this node serves it alone (%s)", pm->name,
             st->n_members > 1 ? "one of several replicas" : "solo");
    if (st->follow_plan[0] && strcmp(st->follow_plan, was->follow_plan) != 0)
        LOGI("planner",
             "model %s: this node is a split worker for host %.12s (plan %s, layers "
             "%u-%u%s)",
             pm->name, st->host, st->follow_plan, st->my_range.first, st->my_range.end,
             st->my_range.output ? " + output" : "");
}

/* This node's facts about a model, for the policy. */
static pp_model_t model_facts(planner_t *pl, const pmodel_t *pm)
{
    model_entry_t *e = pm->e;
    model_state_t s = e ? models_state(e) : MODEL_UNLOADED;
    return (pp_model_t){.name = pm->name,
                        .has_file = e != NULL,
                        .size_bytes = e ? e->size : 0,
                        .need_bytes = e ? models_need_bytes(pl->ms, e) : 0,
                        .host_bytes = e ? models_host_bytes(pl->ms, e) : 0,
                        .n_layers = e ? e->n_layers : 0,
                        .offer_bytes = ledger_offer_for(&pl->ms->ledger, pm->name),
                        .loaded = s != MODEL_UNLOADED,
                        /* ready on the plan it was last (re)started with: a llama-server
                         * draining for a restart (mm_reload: unload pending) still serves its
                         * requests in flight on the old plan, whose tunnels must stay open */
                        .ready = s == MODEL_READY && !(e && e->mm->unload_pending),
                        .mesh_args = e && e->mesh_args,
                        .retired_tunnels = pm->n_retired > 0,
                        .seeding = pm->seeding,
                        .seeded_plan = pm->seeded_plan,
                        .stages = pm->stages,
                        .n_stages = pm->n_stages};
}

/* Gather the inputs, decide model by model (each sees the ledger as the previous one left it),
 * execute the actions. */
static void plan_models(planner_t *pl, const peers_t *P)
{
    static pp_actions_t acts; /* a few KiB */
    static pp_state_t st[PLAN_MAX_MODELS];
    size_t np = P->n < CATALOG_MAX_NODES ? P->n : CATALOG_MAX_NODES;
    int32_t rtt[CATALOG_MAX_NODES];
    /* a worker's distance is the path's least RTT: the smoothed RTT of a busy machine (a starved
     * event loop, loss recovery) read 80 ms and more on a 50 ms link, and a split chosen by it
     * changed (or never formed) with the load */
    for (size_t i = 0; i < np; i++) {
        tp_conn_t *c = mesh_conn(pl->mesh, P->v[i].id);
        double ms = c ? tp_conn_min_rtt_ms(c) : -1;
        rtt[i] = rtt_round(ms); /* the steps it announces (rtt.h) */
    }
    pp_input_t in = {
        .id = pl->id,
        .force_split = pl->cfg->split,
        .split_private = pl->cfg->split_private,
        .n_devices =
            pl->devices ? (pl->devices->n < PP_MAX_DEVICES ? pl->devices->n : PP_MAX_DEVICES) : 0,
        .now_s = (uint64_t)time(NULL),
        .peers = P->v,
        .rtt_ms = rtt,
        .n_peers = np,
        .speed_mflops = pl->speed.mflops,
        .speed_pending = pl->speed.running,
        .now_ms = now_ms(pl),
        .rebalance = {.tick_ms = pl->cfg->tun.rebalance_tick_ms,
                      .ticks = (uint32_t)pl->cfg->tun.rebalance_ticks,
                      .gain_pct = (uint32_t)pl->cfg->tun.rebalance_gain_pct}};
    for (size_t i = 0; i < in.n_devices; i++)
        in.device_bytes[i] = pl->devices->dev[i].free_bytes;
    for (size_t i = 0; i < pl->n; i++) {
        pmodel_t *pm = &pl->models[i];
        if (pm->e && pm->e->waits_memory) { /* not preloaded for memory: loads once it fits */
            pm->e->waits_memory = 0;
            pm->st.load_when_replica = true;
        }
        pp_model_t m = model_facts(pl, pm);
        pp_state_t was = pm->st;
        in.rpc_running = rpc_running(pl);
        acts.n = 0;
        pp_decide_model(&in, &m, &pm->st, i, &acts);
        for (size_t k = 0; k < acts.n; k++)
            execute(pl, &acts.a[k]);
        log_changes(pm, &was);
    }
    for (size_t i = 0; i < pl->n; i++)
        st[i] = pl->models[i].st;
    in.rpc_running = rpc_running(pl);
    acts.n = 0;
    pp_decide_rpc(&in, st, pl->n, &acts);
    for (size_t k = 0; k < acts.n; k++)
        execute(pl, &acts.a[k]);
}

/* ---- the loop ---- */

/* Models deleted on this node (models_delete, which unloaded them) are no longer planned: what
 * the plan held for them (forwards to workers, the mesh's arguments, worker shards) goes, and the
 * models after them move up. One still filling its rpc cache (seed_done holds its pmodel), or
 * followed by one, waits for the re-plan seed_done makes. A node left with no model is given one
 * by the mesh again (allocation), as after a demotion. */
static void drop_deleted(planner_t *pl)
{
    for (size_t i = 0; i < pl->n;) {
        pmodel_t *pm = &pl->models[i];
        if (!pm->e || !pm->e->deleted) {
            i++;
            continue;
        }
        for (size_t k = i; k < pl->n; k++)
            if (pl->models[k].seeding) return;
        LOGI("planner", "model %s: deleted on this node; no longer planned here", pm->name);
        pm_release(pl, i, false);
    }
}

void pm_release(planner_t *pl, size_t i, bool unload)
{
    pmodel_t *pm = &pl->models[i];
    close_fwds(pm, false);
    if (pm->e) {
        if (pm->e->mesh_args) models_set_mesh_args(pl->ms, pm->e, NULL);
        models_set_host_share(pl->ms, pm->e, 0);
        if (unload) models_unload(pl->ms, pm->e);
    }
    ledger_clear(&pl->ms->ledger, pm->name, LEDGER_WORKER);
    memmove(pm, pm + 1, (pl->n - i - 1) * sizeof *pm);
    pl->n--;
    memset(&pl->models[pl->n], 0, sizeof pl->models[pl->n]);
    pl->models[pl->n].pl = pl;
    if (pl->n == 0) pl->serving_since_ms = 0;
}

static void replan(planner_t *pl)
{
    planner_peers_changed(pl);
    if (pl->stopping) return;
    drop_deleted(pl);
    peers_t P;
    if (peers_get(pl, &P) != 0) return;
    allocate(pl, &P);
    plan_models(pl, &P);
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
    if (pl->on_replanned) pl->on_replanned(pl->hook_data);
}

static void on_kick(uv_timer_t *t)
{
    replan(t->data);
}

/* A model waits for more nodes (its group is short of memory, or a worker was too far): the plan
 * is made again every WAIT_REPLAN_MS, since what it waits for (a peer's RTT falling under the
 * bound) is no event of its own. */
static bool waits_for_nodes(planner_t *pl)
{
    bool waits = false;
    for (size_t i = 0; i < pl->n && !waits; i++)
        waits = pl->models[i].st.waiting && pl->models[i].st.planned;
    uint64_t now = now_ms(pl);
    if (!waits || now - pl->last_wait_replan_ms < WAIT_REPLAN_MS) return false;
    pl->last_wait_replan_ms = now;
    return true;
}

/* Whether a split the mesh waits for (its catalog row's short_bytes) needs the memory of this
 * node's one model more than that model is wanted (promo_split_wanted). */
static bool split_wants_memory(planner_t *pl)
{
    enum { MAX_SHORT = 64 };
    const pmodel_t *pm = &pl->models[0];
    model_list_t list;
    ml_init(&list);
    planner_list_catalog(pl, &list);
    promo_model_t m[MAX_SHORT];
    size_t n = 0;
    uint64_t mine = 0;
    for (size_t i = 0; i < list.n; i++) {
        const ml_row_t *r = &list.rows[i];
        if (strcmp(r->id, pm->name) == 0) mine = r->request_rate;
        if (r->short_bytes && n < MAX_SHORT)
            m[n++] = (promo_model_t){.name = r->id,
                                     .n_hosts = r->n_hosts,
                                     .rate = r->request_rate,
                                     .requested = r->requested,
                                     .short_bytes = r->short_bytes};
    }
    bool want = promo_split_wanted(m, n, pm->name, mine, ledger_free(&pl->ms->ledger),
                                   ledger_held_for(&pl->ms->ledger, pm->name));
    ml_free(&list);
    return want;
}

/* Demand windows, then (once a second) whether to demote: either re-plans. */
static void tick_demand(planner_t *pl)
{
    bool kick = pd_tick(pl);
    if (pd_demote_due(pl)) {
        peers_t P;
        view_node_t self;
        peers_get(pl, &P);
        bool ok = self_view(pl, &self) == 0;
        kick |= pd_check_demote(pl, &P, ok ? &self : NULL, split_wants_memory(pl));
        view_node_free(&self);
        peers_free(&P);
    }
    if (kick) planner_kick(pl);
}

/* A split this node hosts runs: its layout is re-planned every rebalance tick (plan_policy.h). */
static bool rebalance_due(planner_t *pl)
{
    bool hosts = false;
    for (size_t i = 0; i < pl->n && !hosts; i++)
        hosts = pl->models[i].st.role == ELECTION_HOST && pl->models[i].st.launched;
    uint64_t now = now_ms(pl);
    if (!hosts || now - pl->last_rebalance_ms < pl->cfg->tun.rebalance_tick_ms) return false;
    pl->last_rebalance_ms = now;
    return true;
}

static size_t ready_peers(const peers_t *P)
{
    size_t n = 0;
    for (size_t i = 0; i < P->n; i++) {
        bool ready = false;
        for (size_t k = 0; k < P->v[i].n_serving && !ready; k++)
            ready = P->v[i].serving[k].http_ready;
        n += ready;
    }
    return n;
}

bool planner_wants_passive(planner_t *pl)
{
    if (!pl->mesh || pl->stopping) return false;
    peers_t P;
    if (peers_get(pl, &P) != 0) return false;
    promo_passive_input_t in = {.allocating = pl->allocating,
                                .n_requested = pl->cfg->n_requested,
                                .n_planned = pl->n,
                                .nothing_for_it = pl->standby || pl->alloc_none,
                                .n_ready_peers = ready_peers(&P)};
    peers_free(&P);
    return promo_go_passive(&in);
}

/* Re-announce when a model's load class changed since the last announcement (whatever made
 * it: planner_fill_announcement notes the load it carries), at most once per
 * SLOTS_LOAD_ANN_MS. */
static void tick_load(planner_t *pl)
{
    if (!pl->mesh || pl->passive) return;
    if (planner_load_sig(pl) == pl->load_sig || now_ms(pl) - pl->load_ann_ms < SLOTS_LOAD_ANN_MS)
        return;
    mesh_announce_changed(pl->mesh);
}

static void on_tick(uv_timer_t *t)
{
    planner_t *pl = t->data;
    tick_demand(pl);
    tick_load(pl);
    /* a node without a model re-decides on changes (peers, children, models: planner_kick),
     * on this tick only while allocation waits for the mesh to settle; a passive standby
     * decides on its routing tables (standby.h) */
    if (pl->waiting || (pl->allocating && pl->n == 0 && !pl->passive && pl->alloc_settling) ||
        waits_for_nodes(pl) || rebalance_due(pl))
        replan(pl);
}

void planner_kick(planner_t *pl)
{
    planner_peers_changed(pl); /* whatever changed, routing decodes the peers anew */
    if (pl->stopping || !pl->timer_open) return;
    if (!uv_is_active((uv_handle_t *)&pl->timer))
        uv_timer_start(&pl->timer, on_kick, KICK_DELAY_MS, 0);
}

/* e is this node's to serve (--model): loaded at startup when it fits alone, else started by
 * the plan (as a split host) or not at all. Returns whether it may load now. */
static bool explicit_model(planner_t *pl, model_entry_t *e)
{
    pmodel_t *pm = &pl->models[pl->n++];
    snprintf(pm->name, sizeof pm->name, "%s", e->mm->name);
    snprintf(pm->rule, sizeof pm->rule, "explicit");
    pm->e = e;
    pm->pl = pl;
    pl->allocating = false;
    if (pl->cfg->split || !models_fits(pl->ms, e)) {
        e->preload = 0;
        pm->st.load_when_replica = true;
        return false;
    }
    return true;
}

void planner_add_model(planner_t *pl, model_entry_t *e)
{
    for (size_t i = 0; i < pl->n; i++)
        if (strcmp(pl->models[i].name, e->mm->name) == 0) {
            pl->models[i].e = e; /* the mesh gave it (rule 4): its file is here now */
            if (models_fits(pl->ms, e)) models_load(pl->ms, e, false);
            pa_arrived(pl, e->mm->name);
            planner_kick(pl);
            return;
        }
    if (pl->n >= PLAN_MAX_MODELS) return;
    if (explicit_model(pl, e)) models_load(pl->ms, e, false);
    pa_arrived(pl, e->mm->name);
    if (pl->mesh) planner_kick(pl);
}

/* The calibration ended: announce the speed and plan with it. */
static void speed_done(node_speed_t *s)
{
    planner_t *pl = s->data;
    if (pl->stopping) return;
    if (!pl->mesh) return; /* not in a mesh yet: its first announcement will carry it */
    if (s->mflops) mesh_announce_changed(pl->mesh);
    planner_kick(pl);
}

int planner_init(planner_t *pl, uv_loop_t *loop, const config_t *cfg, models_t *ms,
                 supervisor_t *sv, uint64_t vram, tunnel_rpc_stats_t *rpc_stats)
{
    memset(pl, 0, sizeof *pl);
    pl->rpc_stats = rpc_stats;
    pl->loop = loop;
    pl->cfg = cfg;
    pl->ms = ms;
    pl->sv = sv;
    pl->vram = cfg->client ? 0 : vram;
    pl->wait_ms = cfg->tun.plan_wait_ms;
    pd_init(pl);
    pl->allocating = cfg->n_joins > 0 && !cfg->client;
    for (model_entry_t *e = NULL; pl->n < PLAN_MAX_MODELS && (e = models_next(ms, e));) {
        if (!e->preload) continue; /* --model: this node serves it */
        explicit_model(pl, e);
    }
    for (size_t i = 0; i < PLAN_MAX_MODELS; i++)
        pl->models[i].pl = pl;
    uv_timer_init(loop, &pl->timer);
    uv_timer_init(loop, &pl->tick);
    pl->timer.data = pl->tick.data = pl;
    pl->timer_open = true;
    if (!cfg->client) node_speed_start(&pl->speed, loop, &cfg->tun, speed_done, pl);
    return 0;
}

void planner_allocate(planner_t *pl)
{
    pl->allocating = true;
}

void planner_set_downloads(planner_t *pl, node_dl_t *dl)
{
    pl->dl = dl;
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
    planner_peers_changed(pl);
    pl->mesh = NULL;
}
