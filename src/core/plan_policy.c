/* plan_policy — see plan_policy.h. */
#include "plan_policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_split.h"
#include "model_ref.h"

static void emit(pp_actions_t *out, pp_action_kind_t k, size_t model, ledger_kind_t lk,
                 uint64_t bytes)
{
    if (out->n < PP_MAX_ACTIONS)
        out->a[out->n++] = (pp_action_t){.kind = k, .model = model, .ledger = lk, .bytes = bytes};
}

#define EMIT(k) emit(out, (k), mi, LEDGER_MODEL, 0)

/* Stop being a split host: the plan, its tunnels and the --rpc arguments go. */
static void leave_host(pp_state_t *st, bool *mesh_args, size_t mi, pp_actions_t *out)
{
    if (st->plan_id[0] || st->n_workers || st->launched || *mesh_args) EMIT(PP_STOP_HOST);
    st->n_workers = 0;
    st->n_applied = 0;
    rb_reset(&st->rb);
    st->plan_sig[0] = st->plan_id[0] = '\0';
    st->launched = false;
    *mesh_args = false;
}

/* This node should not run the model (idle, worker, waiting): stop its llama-server. */
static void take_down(pp_state_t *st, const pp_model_t *m, bool *loaded, size_t mi,
                      pp_actions_t *out)
{
    if (m->has_file && *loaded) {
        EMIT(PP_STOP_MODEL);
        st->load_when_replica = true;
        *loaded = false;
    }
}

static bool peer_ready_for(const pp_input_t *in, const char *id, const char *model,
                           const char *plan)
{
    for (size_t i = 0; i < in->n_peers; i++) {
        if (strcmp(in->peers[i].id, id) != 0) continue;
        const view_serving_t *s = view_serving(&in->peers[i], model);
        return s && strcmp(s->plan_ready, plan) == 0;
    }
    return false;
}

void pp_private_layout(election_range_t *workers, size_t n_workers)
{
    /* the weights stay: llama.cpp still counts the output slot in the last device's share
     * (-ngl, --tensor-split), so every repeating layer keeps its device; only the output
     * layer's tensors are overridden to the host's CPU (PP_PRIVATE_OT) */
    for (size_t k = 0; k < n_workers; k++)
        workers[k].output = false;
}

/* A split's layout (its ranges, -ngl) and signature. false: it cannot be laid out. */
static bool layout_of(const pp_input_t *in, const election_plan_t *plan, election_range_t *ranges,
                      uint32_t *ngl, char *sig)
{
    *ngl = 0;
    /* a host with devices offloads every layer, the workers first (election_device_layout) —
     * but a private split keeps its first layers on the host (election_cpu_layout), so its
     * workers compute on hidden states, never on the input embeddings */
    bool dev = in->n_devices > 0 && !in->split_private;
    if (plan->n_members > PP_MAX_WORKERS + 1 || (dev ? election_device_layout(plan, ranges, ngl)
                                                     : election_cpu_layout(plan, ranges, ngl)) != 0)
        return false;
    if (in->split_private) pp_private_layout(ranges, plan->n_members - 1);
    size_t off = (size_t)snprintf(sig, PP_SIG_MAX, "ngl=%u%s%s", *ngl, dev ? "+d" : "",
                                  in->split_private ? "+p" : "");
    for (size_t k = 0; k + 1 < plan->n_members && off < PP_SIG_MAX; k++)
        off += (size_t)snprintf(sig + off, PP_SIG_MAX - off, ";%.16s:%u-%u%s", plan->members[k].id,
                                ranges[k].first, ranges[k].end, ranges[k].output ? "+o" : "");
    return true;
}

/* Returns false when the split cannot be laid out (the caller takes the model down). */
static bool host_apply(const pp_input_t *in, const pp_model_t *m, pp_state_t *st,
                       const election_plan_t *plan, size_t mi, pp_actions_t *out)
{
    election_range_t ranges[PP_MAX_WORKERS + 1];
    uint32_t ngl = 0;
    char sig[PP_SIG_MAX];
    if (!m->has_file || !layout_of(in, plan, ranges, &ngl, sig)) return false;
    if (strcmp(sig, st->plan_sig) != 0) {
        snprintf(st->plan_sig, sizeof st->plan_sig, "%s", sig);
        st->n_workers = plan->n_members - 1;
        for (size_t k = 0; k < st->n_workers; k++) {
            snprintf(st->workers[k].id, sizeof st->workers[k].id, "%s", plan->members[k].id);
            st->workers[k].range = ranges[k];
        }
        st->ngl = ngl;
        st->split_private = in->split_private;
        st->host_first = ranges[plan->host_index].first;
        st->host_end = ranges[plan->host_index].end;
        st->n_host_weights = in->split_private                ? 0
                             : in->n_devices < PP_MAX_DEVICES ? in->n_devices
                                                              : PP_MAX_DEVICES;
        election_spread(ranges[plan->host_index].weight, in->device_bytes, st->n_host_weights,
                        st->host_weights);
        st->speed_aware = plan->speed_aware;
        snprintf(st->plan_id, sizeof st->plan_id, "%.8s-%llx-%u", in->id,
                 (unsigned long long)in->now_s, ++st->plan_seq);
        st->launched = false;
        EMIT(PP_NEW_PLAN);
    }
    if (st->launched) {
        if (m->retired_tunnels && m->ready) EMIT(PP_CLOSE_RETIRED);
        return true;
    }
    for (size_t k = 0; k < st->n_workers; k++)
        if (!peer_ready_for(in, st->workers[k].id, m->name, st->plan_id)) return true;
    EMIT(PP_START_HOST);
    st->launched = true;
    st->load_when_replica = true;
    return true;
}

static void worker_apply(const pp_input_t *in, const pp_model_t *m, pp_state_t *st, size_t mi,
                         pp_actions_t *out)
{
    /* the host's announced plan says whether this node is one of its workers, and which layers */
    const view_plan_t *plan = NULL;
    for (size_t i = 0; i < in->n_peers && !plan; i++) {
        if (strcmp(in->peers[i].id, st->host) != 0) continue;
        const view_serving_t *s = view_serving(&in->peers[i], m->name);
        plan = s ? s->plan : NULL;
        break;
    }
    const view_worker_t *mine = NULL;
    for (size_t i = 0; plan && i < plan->n_workers; i++)
        if (strcmp(plan->workers[i].id, in->id) == 0) mine = &plan->workers[i];
    if (!mine) {
        st->role = ELECTION_IDLE; /* not (yet) in the host's plan */
        st->follow_plan[0] = '\0';
        return;
    }
    if (mine->end < mine->first || mine->end > ELECTION_MAX_LAYERS) {
        st->role = ELECTION_IDLE;
        return;
    }
    if (strcmp(st->follow_plan, plan->id) != 0) {
        snprintf(st->follow_plan, sizeof st->follow_plan, "%s", plan->id);
        st->my_range.first = mine->first;
        st->my_range.end = mine->end;
        st->my_range.output = mine->output;
    }
    if (!in->rpc_running) EMIT(PP_START_RPC_SERVER);
    if (m->seeding || strcmp(m->seeded_plan ? m->seeded_plan : "", plan->id) == 0) return;
    EMIT(PP_START_WORKER);
}

/* The ledger follows the plan: a split host's llama-server holds its bytes in the plan (its
 * layers and its host bytes), a worker's rpc-server its layers' bytes; a replica the whole
 * model (models.c). */
static void hold_share(const pp_input_t *in, const pp_model_t *m, pp_state_t *st,
                       const election_plan_t *plan, size_t mi, pp_actions_t *out)
{
    uint64_t share = 0;
    for (size_t i = 0; i < plan->n_members; i++)
        if (strcmp(plan->members[i].id, in->id) == 0) share = plan->members[i].bytes;
    uint64_t host = st->role == ELECTION_HOST ? share : 0;
    if (m->has_file && host != st->held_model) {
        emit(out, PP_SET_LEDGER, mi, LEDGER_MODEL, host);
        st->held_model = host;
    }
    bool worker = st->role == ELECTION_WORKER;
    if (worker ? !st->worker_held || st->held_worker != share : st->worker_held) {
        emit(out, PP_SET_LEDGER, mi, LEDGER_WORKER, worker ? share : 0);
        st->worker_held = worker;
        st->held_worker = worker ? share : 0;
    }
}

/* The group's RTT matrix (rtt.h) for the election: this node's row from its own measurements
 * (in->rtt_ms), every peer's from its announced rtt_ms. NULL (the election then reads
 * nodes[].rtt_ms) for a group larger than PP_RTT_MATRIX_MAX or without memory. */
static int32_t *group_matrix(const pp_input_t *in, const election_node_t *nodes, size_t n,
                             const size_t *pidx)
{
    if (n < 2 || n > PP_RTT_MATRIX_MAX) return NULL;
    const char *ids[PP_RTT_MATRIX_MAX];
    const rtt_entry_t *rows[PP_RTT_MATRIX_MAX];
    size_t n_rows[PP_RTT_MATRIX_MAX];
    rtt_entry_t mine[PP_RTT_MATRIX_MAX];
    size_t n_mine = 0;
    for (size_t k = 0; k < n; k++) {
        ids[k] = nodes[k].id;
        const view_node_t *v = k ? &in->peers[pidx[k]] : NULL;
        rows[k] = v ? v->rtt : mine;
        n_rows[k] = v ? v->n_rtt : 0;
        if (k && nodes[k].rtt_ms >= 0) {
            memcpy(mine[n_mine].id, nodes[k].id, sizeof mine[n_mine].id);
            mine[n_mine++].ms = nodes[k].rtt_ms;
        }
    }
    n_rows[0] = n_mine;
    int32_t *mx = malloc(n * n * sizeof *mx);
    if (mx && rtt_matrix(ids, n, rows, n_rows, mx) != 0) {
        free(mx);
        mx = NULL;
    }
    return mx;
}

static const pp_stage_t *stage_of(const pp_model_t *m, const char *id)
{
    for (size_t i = 0; m->stages && i < m->n_stages; i++)
        if (strcmp(m->stages[i].id, id) == 0) return &m->stages[i];
    return NULL;
}

static uint32_t applied_speed(const pp_state_t *st, const char *id, uint32_t announced)
{
    for (size_t i = 0; i < st->n_applied; i++)
        if (strcmp(st->applied[i].id, id) == 0) return st->applied[i].mflops;
    return announced;
}

/* The predicted compute time per token of a layout (its slots) at the members' speeds (by id
 * from nodes); 0 when a speed is unknown. */
static double layout_cost(const election_plan_t *plan, const election_range_t *ranges,
                          const election_node_t *nodes, size_t n)
{
    ls_node_t ls[PP_MAX_WORKERS + 1];
    uint32_t slots[PP_MAX_WORKERS + 1];
    for (size_t j = 0; j < plan->n_members; j++) {
        ls[j] = (ls_node_t){0};
        for (size_t k = 0; k < n; k++)
            if (strcmp(nodes[k].id, plan->members[j].id) == 0)
                ls[j].speed_mflops = nodes[k].speed_mflops;
        slots[j] = ranges[j].weight;
    }
    return layer_split_cost(ls, plan->n_members, slots);
}

/* Rebalancing (plan_policy.h): on a tick, the layout the observed speeds give against the running
 * one; on APPLY *plan becomes the candidate. nodes carry the speeds the plan was made with. */
static void rebalance(const pp_input_t *in, const pp_model_t *m, pp_state_t *st,
                      const election_node_t *nodes, const uint32_t *announced, size_t n,
                      const election_input_t *ein, election_plan_t *plan)
{
    election_range_t ranges[PP_MAX_WORKERS + 1], cranges[PP_MAX_WORKERS + 1];
    uint32_t ngl;
    char sig[PP_SIG_MAX], csig[PP_SIG_MAX];
    if (!layout_of(in, plan, ranges, &ngl, sig)) return;
    if (!st->plan_sig[0] || strcmp(sig, st->plan_sig) != 0) {
        /* membership or memory changed the layout: that re-plans at once, the counter restarts;
         * speeds applied for workers that left the plan go */
        rb_reset(&st->rb);
        size_t keep = 0;
        for (size_t i = 0; i < st->n_applied; i++)
            for (size_t j = 0; j + 1 < plan->n_members; j++)
                if (strcmp(st->applied[i].id, plan->members[j].id) == 0)
                    st->applied[keep++] = st->applied[i];
        st->n_applied = keep;
        return;
    }
    if (!st->launched || !m->ready || !m->n_stages) return;
    election_node_t obs[PP_MAX_WORKERS + 1];
    if (n > PP_MAX_WORKERS + 1) return;
    bool differs = false;
    for (size_t k = 0; k < n; k++) {
        obs[k] = nodes[k];
        const pp_stage_t *sg = k ? stage_of(m, nodes[k].id) : NULL;
        if (sg) obs[k].speed_mflops = stage_speed(&sg->ema, announced[k]);
        differs |= obs[k].speed_mflops != nodes[k].speed_mflops;
    }
    election_input_t cin = *ein;
    cin.nodes = obs;
    election_plan_t cand;
    st->cand_sig[0] = '\0';
    double cur = layout_cost(plan, ranges, obs, n), cost = 0;
    bool have = differs && election_run(&cin, &cand) == 0;
    if (have && (cand.mode != ELECTION_SPLIT || cand.n_members != plan->n_members ||
                 !layout_of(in, &cand, cranges, &ngl, csig))) {
        election_plan_free(&cand);
        have = false;
    }
    if (have) {
        cost = layout_cost(&cand, cranges, obs, n);
        snprintf(st->cand_sig, sizeof st->cand_sig, "%s", csig);
    }
    st->cost_now = cur;
    st->cost_cand = have ? cost : 0;
    rb_verdict_t v =
        rb_tick(&st->rb, &in->rebalance, in->now_ms, st->plan_sig, have ? csig : NULL, cur, cost);
    if (v != RB_APPLY) {
        if (have) election_plan_free(&cand);
        return;
    }
    st->n_applied = 0;
    for (size_t k = 1; k < n && st->n_applied < PP_MAX_WORKERS; k++) {
        pp_speed_t *a = &st->applied[st->n_applied++];
        snprintf(a->id, sizeof a->id, "%s", obs[k].id);
        a->mflops = obs[k].speed_mflops;
    }
    election_plan_free(plan);
    *plan = cand;
    st->rebalanced = true;
}

void pp_decide_model(const pp_input_t *in, const pp_model_t *m, pp_state_t *st, size_t mi,
                     pp_actions_t *out)
{
    election_node_t nodes[ELECTION_MAX_NODES];
    size_t pidx[ELECTION_MAX_NODES];        /* nodes[k] (k > 0) is in->peers[pidx[k]] */
    uint32_t announced[ELECTION_MAX_NODES]; /* nodes[k]'s announced speed */
    size_t n = 0;
    uint64_t size = m->size_bytes, need = m->need_bytes;
    bool loaded = m->loaded, mesh_args = m->mesh_args;
    const pp_state_t before = *st;
    /* the group: this node and every live peer that announces itself a member; a node offers
     * each group what is free plus what it holds for this model already */
    nodes[n++] = (election_node_t){.id = in->id,
                                   .vram_bytes = m->offer_bytes,
                                   .rtt_ms = 0,
                                   .force_split = in->force_split,
                                   .no_file = !m->has_file,
                                   .speed_mflops = in->speed_mflops,
                                   .host_bytes = m->host_bytes};
    announced[0] = in->speed_mflops;
    st->rebalanced = false;
    for (size_t i = 0; i < in->n_peers && n < ELECTION_MAX_NODES; i++) {
        const view_node_t *v = &in->peers[i];
        bool file = false;
        uint64_t host_bytes = 0;
        for (size_t k = 0; k < v->n_available; k++) {
            const view_avail_t *a = &v->available[k];
            if (strcmp(a->name, m->name) != 0) continue;
            file = true;
            host_bytes = a->host_bytes;
            if (a->size_bytes > size) size = a->size_bytes;
            if (a->need_bytes > need) need = a->need_bytes;
        }
        const view_serving_t *s = view_serving(v, m->name);
        if (!s || !s->member) continue;
        pidx[n] = i;
        nodes[n++] = (election_node_t){
            .id = v->id,
            .vram_bytes = view_offer_for(v, m->name),
            .rtt_ms = in->rtt_ms ? in->rtt_ms[i] : -1,
            .force_split = s->split,
            .no_file = !file,
            .speed_mflops = applied_speed(st, v->id, v->speed_mflops),
            .host_bytes = host_bytes,
        };
        announced[n - 1] = v->speed_mflops;
    }
    st->planned = true;
    st->waiting = false;
    st->host[0] = '\0';
    election_plan_t plan;
    /* the running split's workers keep their places against small RTT changes (election.h) */
    const char *keep[PP_MAX_WORKERS];
    size_t n_keep = 0;
    for (size_t k = 0; st->plan_sig[0] && k < st->n_workers && k < PP_MAX_WORKERS; k++)
        keep[n_keep++] = st->workers[k].id;
    int32_t *mx = group_matrix(in, nodes, n, pidx);
    election_input_t ein = {.model_bytes = size,
                            .need_bytes = need,
                            .n_layers = m->has_file ? m->n_layers : 0,
                            .nodes = nodes,
                            .n_nodes = n,
                            .rtt = mx,
                            .keep = keep,
                            .n_keep = n_keep};
    int erc = size == 0 ? -EINVAL : election_run(&ein, &plan);
    if (erc != 0) {
        free(mx);
        st->mode = ELECTION_EMPTY;
        st->role = ELECTION_IDLE;
        st->waiting = true;
        leave_host(st, &mesh_args, mi, out);
        take_down(st, m, &loaded, mi, out);
        return;
    }
    if (plan.mode == ELECTION_SPLIT && in->speed_pending) {
        /* decided once this node's speed is known: a layout made without it would be redone
         * (a llama-server restart) a moment later */
        *st = before;
        election_plan_free(&plan);
        free(mx);
        return;
    }
    st->mode = plan.mode;
    st->need_bytes = plan.need_bytes;
    st->total_bytes = plan.total_bytes;
    st->n_members = plan.n_members;
    const election_member_t *h = election_host(&plan);
    if (h) snprintf(st->host, sizeof st->host, "%s", h->id);
    if (plan.mode == ELECTION_SOLO) {
        st->role = election_role_of(&plan, in->id);
        if (st->role == ELECTION_REPLICA && !m->has_file) st->role = ELECTION_IDLE;
    } else if (plan.mode == ELECTION_SPLIT) {
        st->role = h && strcmp(h->id, in->id) == 0 ? ELECTION_HOST : ELECTION_WORKER;
    } else {
        st->role = ELECTION_IDLE;
        st->waiting = true;
    }
    if (st->role == ELECTION_HOST && plan.mode == ELECTION_SPLIT && m->has_file)
        rebalance(in, m, st, nodes, announced, n, &ein, &plan);
    free(mx);
    hold_share(in, m, st, &plan, mi, out);
    if (st->role != ELECTION_HOST) leave_host(st, &mesh_args, mi, out);
    if (st->role == ELECTION_HOST) {
        if (!host_apply(in, m, st, &plan, mi, out)) {
            st->waiting = true;
            leave_host(st, &mesh_args, mi, out);
            take_down(st, m, &loaded, mi, out);
        }
    } else if (st->role == ELECTION_WORKER) {
        worker_apply(in, m, st, mi, out);
    }
    if (st->role != ELECTION_WORKER) st->follow_plan[0] = '\0';
    if (st->role == ELECTION_REPLICA) {
        if (st->load_when_replica) {
            st->load_when_replica = false;
            EMIT(PP_START_REPLICA);
        }
    } else if (st->role != ELECTION_HOST) {
        take_down(st, m, &loaded, mi, out);
    }
    election_plan_free(&plan);
}

/* Some peer's announced plan names this node as a worker. */
static bool named_by_a_plan(const pp_input_t *in)
{
    for (size_t i = 0; i < in->n_peers; i++)
        for (size_t p = 0; p < in->peers[i].n_plans; p++) {
            const view_plan_t *pl = &in->peers[i].plans[p];
            for (size_t k = 0; k < pl->n_workers; k++)
                if (strcmp(pl->workers[k].id, in->id) == 0) return true;
        }
    return false;
}

void pp_decide_rpc(const pp_input_t *in, const pp_state_t *st, size_t n, pp_actions_t *out)
{
    for (size_t i = 0; i < n; i++)
        if (st[i].role == ELECTION_WORKER) return;
    if (in->rpc_running && !named_by_a_plan(in)) emit(out, PP_STOP_RPC_SERVER, 0, LEDGER_MODEL, 0);
}

void pp_decide(const pp_input_t *in, const pp_model_t *models, pp_state_t *st, size_t n,
               pp_actions_t *out)
{
    for (size_t i = 0; i < n; i++)
        pp_decide_model(in, &models[i], &st[i], i, out);
    pp_decide_rpc(in, st, n, out);
}

void pp_host_failed(pp_state_t *st)
{
    st->launched = false;
}

int pp_host_args(const pp_state_t *st, char *buf, size_t len)
{
    size_t off = 0;
    int w = snprintf(buf, len, "--tensor-split ");
    if (w < 0 || (size_t)w >= len) return -ENOSPC;
    off = (size_t)w;
    for (size_t k = 0; k < st->n_workers; k++) {
        w = snprintf(buf + off, len - off, "%s%u", k ? "," : "", st->workers[k].range.weight);
        if (w < 0 || (size_t)w >= len - off) return -ENOSPC;
        off += (size_t)w;
    }
    for (size_t k = 0; k < st->n_host_weights; k++) { /* a host's own devices, last */
        w = snprintf(buf + off, len - off, ",%u", st->host_weights[k]);
        if (w < 0 || (size_t)w >= len - off) return -ENOSPC;
        off += (size_t)w;
    }
    w = snprintf(buf + off, len - off, " -ngl %u --fit off%s", st->ngl,
                 st->split_private ? " -ot " PP_PRIVATE_OT : "");
    if (w < 0 || (size_t)w >= len - off) return -ENOSPC;
    return 0;
}

const char *pp_action_name(pp_action_kind_t k)
{
    static const char *const names[] = {
        "STOP_HOST",     "STOP_MODEL",    "SET_LEDGER",       "NEW_PLAN",     "START_HOST",
        "CLOSE_RETIRED", "START_REPLICA", "START_RPC_SERVER", "START_WORKER", "STOP_RPC_SERVER"};
    return (size_t)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/* ---- catalog inputs ---- */

void pp_cnodes_free(pp_cnodes_t *c)
{
    free(c->nodes);
    free(c->av);
    free(c->sv);
    free(c->rq);
    free(c->rq_size);
    memset(c, 0, sizeof *c);
}

int pp_cnodes_build(const view_node_t *v, size_t n, const view_node_t *self, pp_cnodes_t *c)
{
    memset(c, 0, sizeof *c);
    size_t n_av = 0, n_sv = 0, n_rq = 0;
    for (size_t i = 0; i <= n; i++) {
        const view_node_t *x = i < n ? &v[i] : self;
        if (!x) break;
        n_av += x->n_available;
        n_sv += x->n_serving;
        n_rq += x->n_requested;
    }
    c->nodes = calloc(n + 1, sizeof *c->nodes);
    c->av = calloc(n_av + 1, sizeof *c->av);
    c->sv = calloc(n_sv + 1, sizeof *c->sv);
    c->rq = calloc(n_rq + 1, sizeof *c->rq);
    c->rq_size = calloc(n_rq + 1, sizeof *c->rq_size);
    if (!c->nodes || !c->av || !c->sv || !c->rq || !c->rq_size) {
        pp_cnodes_free(c);
        return -ENOMEM;
    }
    catalog_avail_t *av = c->av;
    catalog_serving_t *sv = c->sv;
    const char **rq = c->rq;
    uint64_t *rqs = c->rq_size;
    for (size_t i = 0; i <= n; i++) {
        const view_node_t *x = i < n ? &v[i] : self;
        if (!x) break;
        view_to_catalog_sized(x, &c->nodes[c->n++], av, sv, rq, rqs);
        av += x->n_available;
        sv += x->n_serving;
        rq += x->n_requested;
        rqs += x->n_requested;
    }
    return 0;
}

/* ---- allocation ---- */

bool pp_source_followed(const char *ref, bool follow_urls)
{
    model_ref_t r;
    char err[128];
    if (model_ref_parse(ref, &r, err, sizeof err) != 0) return false;
    return r.kind == MODEL_REF_CATALOG || r.kind == MODEL_REF_HF_FILE ||
           r.kind == MODEL_REF_HF_QUANT || (r.kind == MODEL_REF_URL && follow_urls);
}

void pp_allocate(const pp_alloc_input_t *in, pp_alloc_state_t *st, uint64_t now_ms,
                 pp_alloc_result_t *out)
{
    memset(out, 0, sizeof *out);
    out->kind = PP_ALLOC_LATER;
    if (in->n_peers == 0) return;
    if (!st->first_peer_ms) st->first_peer_ms = now_ms;
    if (now_ms - st->first_peer_ms < PP_ALLOC_SETTLE_MS) return; /* the tick comes back */
    pp_cnodes_t cn;
    if (pp_cnodes_build(in->peers, in->n_peers, NULL, &cn) != 0) return;
    /* what the peers say can be fetched, and what they are fetching */
    size_t n_src = 0, n_fetch = 0;
    for (size_t i = 0; i < in->n_peers; i++) {
        n_src += in->peers[i].n_sources;
        n_fetch += in->peers[i].n_downloads;
    }
    const char **src = calloc(n_src + 1, sizeof *src), **fetch = calloc(n_fetch + 1, sizeof *fetch);
    if (!src || !fetch) {
        free(src);
        free(fetch);
        pp_cnodes_free(&cn);
        return;
    }
    n_src = n_fetch = 0;
    for (size_t i = 0; i < in->n_peers; i++) {
        for (size_t k = 0; k < in->peers[i].n_sources; k++) {
            const char *m = in->peers[i].sources[k].model;
            if (!pp_source_followed(in->peers[i].sources[k].ref, in->follow_urls)) continue;
            bool failed = false;
            for (size_t f = 0; f < in->n_failed && !failed; f++)
                failed = strcmp(in->failed[f], m) == 0;
            if (!failed) src[n_src++] = m;
        }
        for (size_t k = 0; k < in->peers[i].n_downloads; k++)
            fetch[n_fetch++] = in->peers[i].downloads[k].model;
    }
    alloc_self_t self = {.id = in->id,
                         .vram_bytes = in->free_bytes,
                         .disk = in->disk,
                         .n_disk = in->n_disk,
                         .models = in->requested,
                         .n_models = in->n_requested, /* --model NAME without a file */
                         .no_download = !in->can_download,
                         .sources = src,
                         .n_sources = n_src,
                         .fetching = fetch,
                         .n_fetching = n_fetch};
    alloc_result_t res;
    int rc = alloc_choose(&self, cn.nodes, cn.n, &res);
    if (rc == 0 && res.rule == ALLOC_RULE_NONE) {
        /* Nothing on disk fits a rule. A split group may still take this node's memory
         * without the file: the weights then come through the tunnel. */
        alloc_result_t r2;
        self.no_download = false;
        self.sources = NULL;
        self.n_sources = 0;
        if (alloc_choose(&self, cn.nodes, cn.n, &r2) == 0 &&
            r2.rule == ALLOC_RULE_CANT_RUN_WITHOUT_ME)
            res = r2;
    }
    free(src);
    free(fetch);
    pp_cnodes_free(&cn);
    if (rc != 0) return;
    out->rule = alloc_rule_name(res.rule);
    out->size_bytes = res.size_bytes;
    out->changed = strcmp(st->rule, out->rule) != 0;
    snprintf(st->rule, sizeof st->rule, "%s", out->rule);
    snprintf(out->model, sizeof out->model, "%s", res.model);
    for (size_t i = 0; i < in->n_disk; i++)
        if (strcmp(in->disk[i].name, res.model) == 0) out->has_file = true;
    const view_source_t *vs = NULL;
    for (size_t i = 0; i < in->n_peers && !vs && !out->has_file && res.download; i++) {
        vs = view_source(&in->peers[i], res.model);
        if (vs && !pp_source_followed(vs->ref, in->follow_urls)) vs = NULL;
    }
    for (size_t f = 0; vs && f < in->n_failed; f++)
        if (strcmp(in->failed[f], res.model) == 0) vs = NULL;
    if (res.rule == ALLOC_RULE_NONE)
        out->kind = PP_ALLOC_NONE;
    else if (!out->has_file && vs && in->can_download &&
             res.rule != ALLOC_RULE_CANT_RUN_WITHOUT_ME) {
        out->kind = PP_ALLOC_DOWNLOAD;
        snprintf(out->ref, sizeof out->ref, "%s", vs->ref);
    } else if (!out->has_file && res.rule != ALLOC_RULE_CANT_RUN_WITHOUT_ME)
        out->kind = PP_ALLOC_MISSING;
    else
        out->kind = PP_ALLOC_TAKE;
}
