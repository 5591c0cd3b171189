/* route_decide — see route_decide.h. */
#include "route_decide.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "catalog.h"
#include "election.h"
#include "mm.h"
#include "route_table.h"
#include "vision.h"

#define FNV_BASIS 1469598103934665603ULL

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

static uint64_t mix(uint64_t z) /* splitmix64's finaliser (route_table.c's) */
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The home host's hash of a request without a key (route_table.c's rt_pick_hosts' was) */
static uint64_t home_hash(const char *self_id, const char *model)
{
    return mix(fnv1a(fnv1a(fnv1a(FNV_BASIS, self_id ? self_id : ""), "\n"), model ? model : ""));
}

static const char *type_name(int t)
{
    return mm_type_name((mm_type_t)t);
}

static void answer(rd_decision_t *out, rd_verdict_t v, int status, const char *type,
                   const char *code)
{
    out->verdict = v;
    out->status = status;
    out->type = type;
    out->code = code;
}

static void refuse(rd_decision_t *out, int status, const char *type, const char *code)
{
    answer(out, RD_REFUSE, status, type, code);
}

static void unknown(const rd_input_t *in, rd_decision_t *out)
{
    answer(out, RD_UNKNOWN, 404, "invalid_request_error", "model_not_found");
    snprintf(out->msg, sizeof out->msg, "model '%s' not found", in->model);
}

static void downloading(const rd_input_t *in, rd_decision_t *out, rd_download_t where)
{
    refuse(out, 503, "unavailable", "model_downloading");
    out->download = where;
    snprintf(out->msg, sizeof out->msg, "model '%s' is downloading on %s; retry later", in->model,
             where == RD_DL_HERE ? "this node" : "a node of the mesh");
}

static void no_vision(const rd_input_t *in, rd_decision_t *out)
{
    refuse(out, 400, "invalid_request_error", VISION_ERR_CODE);
    vision_refusal(in->model, out->msg, sizeof out->msg);
}

static void type_mismatch(const rd_input_t *in, rd_decision_t *out, int type)
{
    refuse(out, 400, "invalid_request_error", "model_type_mismatch");
    snprintf(out->msg, sizeof out->msg, "model '%s' is a %s model and cannot serve %s", in->model,
             type_name(type), in->path ? in->path : "this endpoint");
}

/* ---- the order of the candidates ---- */

/* Insert host i into cand[0..*n) sorted by id, keeping the `cap` lowest ids. */
static void insert_by_id(const rd_host_t *hosts, size_t *cand, size_t *n, size_t cap, size_t i)
{
    size_t k = *n < cap ? (*n)++ : cap;
    if (k == cap && strcmp(hosts[cand[cap - 1]].id, hosts[i].id) <= 0) return;
    if (k == cap) k = cap - 1;
    while (k > 0 && strcmp(hosts[cand[k - 1]].id, hosts[i].id) > 0) {
        cand[k] = cand[k - 1];
        k--;
    }
    cand[k] = i;
}

static void move_first(size_t *order, size_t k)
{
    size_t chosen = order[k];
    memmove(order + 1, order, k * sizeof *order);
    order[0] = chosen;
}

/* The index in order[0..n) of host id, n when it is not there. */
static size_t find(const rd_host_t *hosts, const size_t *order, size_t n, const char *id)
{
    for (size_t k = 0; id && k < n; k++)
        if (strcmp(hosts[order[k]].id, id) == 0) return k;
    return n;
}

static uint64_t slots_of(const rd_host_t *h)
{
    return h->slots ? h->slots : RT_DEFAULT_SLOTS;
}

/* LOAD (the header): what it announces or what this node has in flight there, the larger */
static uint64_t load_of(const rd_host_t *h)
{
    return h->busy > h->inflight ? h->busy : h->inflight;
}

static bool has_free(const rd_host_t *h)
{
    return load_of(h) < slots_of(h);
}

static bool any_free(const rd_host_t *h, const size_t *order, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (has_free(&h[order[k]])) return true;
    return false;
}

/* cand[0..nc): candidates in id order. Writes out->order by the stickiness rule (see the
 * header) and RD_FORWARD. */
static void order_hosts(const rd_input_t *in, const size_t *cand, size_t nc, rd_decision_t *out)
{
    const request_t *rq = in->rq;
    const rd_host_t *h = in->hosts;
    bool keyed = rq && rq->has_sticky;
    uint64_t hash = keyed ? rq->sticky : home_hash(in->self_id, in->model);
    size_t first = (size_t)(hash % nc), bad[RD_MAX_HOSTS], n_bad = 0;
    for (size_t k = 0; k < nc; k++) { /* the ring from the first, hosts that failed last */
        size_t i = cand[(first + k) % nc];
        if (h[i].bad)
            bad[n_bad++] = i;
        else
            out->order[out->n++] = i;
    }
    out->n_good = out->n;
    for (size_t k = 0; k < n_bad; k++)
        out->order[out->n++] = bad[k];
    out->verdict = RD_FORWARD;

    bool prefix = rq && rq->prefix && !in->no_affinity && nc >= 2;
    if (prefix && !keyed) {
        out->affinity = true;
        size_t k = find(h, out->order, out->n_good, in->affinity_host);
        if (k < out->n_good &&
            (has_free(&h[out->order[k]]) || !any_free(h, out->order, out->n_good))) {
            move_first(out->order, k);
            out->affinity_hit = true;
        }
    }
    out->remember = prefix;
    if (keyed || out->affinity_hit || in->tries > 0) return;
    /* spill-over: among the hosts with a free slot (by LOAD), the fewest of this node's own
     * requests in flight per slot — fresh, and its own: entry nodes acting on the same
     * second-old announcements do not all rush the one least loaded host — the earlier of
     * equals (the home host whenever it is as free as any); with none free, the least load
     * per slot. Both cross-multiplied. */
    bool free_any = any_free(h, out->order, out->n_good);
    size_t best = 0;
    while (free_any && !has_free(&h[out->order[best]]))
        best++;
    for (size_t k = best + 1; k < out->n_good; k++) {
        const rd_host_t *x = &h[out->order[k]], *b = &h[out->order[best]];
        if (free_any ? has_free(x) && x->inflight * slots_of(b) < b->inflight * slots_of(x)
                     : load_of(x) * slots_of(b) < load_of(b) * slots_of(x))
            best = k;
    }
    if (best == 0) return;
    move_first(out->order, best);
    out->spilled = true;
}

/* ---- active nodes: what the peers announce (router.c) ---- */

typedef struct {
    bool known, requested, loading, blind;
    int type;
    size_t ready[RD_MAX_HOSTS], take[RD_MAX_HOSTS];
    size_t n_ready, n_take;
} peers_t;

static void classify(const rd_input_t *in, bool images, peers_t *p)
{
    memset(p, 0, sizeof *p);
    p->known = p->requested = in->self_requested;
    p->type = -1;
    for (size_t i = 0; i < in->n_hosts; i++) {
        const rd_host_t *h = &in->hosts[i];
        p->known |= h->ready || h->starting || h->member || h->has_file || h->requested;
        p->requested |= h->requested;
        p->loading |= (h->starting || h->member) && !h->ready;
        if (h->has_file && h->type >= 0) p->type = h->type;
        if ((h->ready || h->starting || h->has_file) && images && !h->vision) {
            p->blind = true; /* it would serve the model, but cannot read images */
            continue;
        }
        if (h->ready)
            insert_by_id(in->hosts, p->ready, &p->n_ready, RD_MAX_HOSTS, i);
        else if (h->starting || h->has_file) /* holds it until ready / loads it on demand */
            insert_by_id(in->hosts, p->take, &p->n_take, RD_MAX_HOSTS, i);
    }
}

static void decide_active(const rd_input_t *in, rd_decision_t *out)
{
    if (in->offline) {
        unknown(in, out);
        return;
    }
    peers_t p;
    classify(in, in->rq && in->rq->images, &p);
    if (!p.known) {
        unknown(in, out);
        return;
    }
    if (p.type >= 0 && in->needs >= 0 && in->needs < MM_N_TYPES && p.type != in->needs) {
        type_mismatch(in, out, p.type);
        return;
    }
    const size_t *cand = p.n_ready ? p.ready : p.take;
    size_t nc = p.n_ready ? p.n_ready : p.n_take;
    if (nc == 0 && p.blind) {
        no_vision(in, out);
        return;
    }
    if (nc == 0 && in->dl_mesh) {
        downloading(in, out, RD_DL_MESH);
        return;
    }
    if (nc == 0) {
        refuse(out, 503, "unavailable", "model_unavailable");
        if (p.requested && !p.loading && p.type < 0)
            snprintf(out->msg, sizeof out->msg,
                     "model '%s' is in the mesh (status unloaded): requested, but no node has its "
                     "file",
                     in->model);
        else
            snprintf(out->msg, sizeof out->msg,
                     "model '%s' is in the mesh (status %s) but no node can serve it now",
                     in->model, p.loading ? "loading" : "unloaded");
        return;
    }
    order_hosts(in, cand, nc, out);
}

/* ---- passive nodes: the route table (passive.c) ---- */

static void decide_passive(const rd_input_t *in, rd_decision_t *out)
{
    if (!in->have_table) {
        if (!in->table_expired) {
            out->verdict = RD_WAIT;
            return;
        }
        refuse(out, 503, "unavailable", "no_route");
        snprintf(out->msg, sizeof out->msg,
                 "model '%s': no active node of the mesh answered a route request yet; retry "
                 "shortly",
                 in->model);
        return;
    }
    if (!in->in_table) {
        unknown(in, out);
        return;
    }
    if (in->table_type >= 0 && in->needs >= 0 && in->needs < MM_N_TYPES &&
        in->table_type != in->needs) {
        type_mismatch(in, out, in->table_type);
        return;
    }
    /* images: the hosts the table says have a projector; none (or a table from a node that does
     * not say): every host, whose own check answers */
    bool seeing = false;
    for (size_t i = 0; in->rq && in->rq->images && i < in->n_hosts; i++)
        seeing |= in->hosts[i].vision;
    size_t cand[RD_MAX_HOSTS], nc = 0;
    for (size_t i = 0; i < in->n_hosts; i++)
        if (!seeing || in->hosts[i].vision) insert_by_id(in->hosts, cand, &nc, RD_MAX_HOSTS, i);
    if (nc == 0) {
        refuse(out, 503, "unavailable", "model_unavailable");
        snprintf(out->msg, sizeof out->msg,
                 "model '%s': in the mesh (status %s) but no node serves it now; retry shortly",
                 in->model, catalog_status_name((catalog_status_t)in->table_status));
        return;
    }
    if (in->tries >= nc || in->tries >= RD_MAX_TRIES) {
        refuse(out, 503, "unavailable", "host_unreachable");
        snprintf(out->msg, sizeof out->msg,
                 "model '%s': its hosts cannot be reached right now; retry shortly", in->model);
        return;
    }
    order_hosts(in, cand, nc, out);
}

/* app/main.c:route_remote: a download here answers first, then the table or the peers */
static void decide_remote(const rd_input_t *in, rd_decision_t *out)
{
    if (in->dl_here) {
        downloading(in, out, RD_DL_HERE);
        return;
    }
    if (in->passive)
        decide_passive(in, out);
    else
        decide_active(in, out);
}

/* LOCAL SPILL (the header): the least loaded peer replica that answers and has a free slot. */
static bool spill_local(const rd_input_t *in, rd_decision_t *out)
{
    peers_t p;
    classify(in, in->rq && in->rq->images, &p);
    size_t cand[RD_MAX_HOSTS], nc = 0;
    for (size_t k = 0; k < p.n_ready; k++)
        if (!in->hosts[p.ready[k]].priv && !in->hosts[p.ready[k]].bad) cand[nc++] = p.ready[k];
    if (nc == 0) return false;
    order_hosts(in, cand, nc, out);
    if (out->n_good && has_free(&in->hosts[out->order[0]])) {
        out->spilled = true;
        return true;
    }
    memset(out, 0, sizeof *out);
    return false;
}

static const char *endpoint_for(int t)
{
    return t == MM_EMBEDDING   ? "/v1/embeddings"
           : t == MM_RERANKING ? "/v1/rerank"
                               : "/v1/chat/completions, /v1/completions, /v1/messages or "
                                 "/v1/responses";
}

static void decide(const rd_input_t *in, rd_decision_t *out)
{
    memset(out, 0, sizeof *out);
    if (!in->local) {
        if (in->hop)
            unknown(in, out);
        else
            decide_remote(in, out);
        return;
    }
    /* images for a model of this node without a projector: a copy elsewhere that has one */
    if (in->rq && in->rq->images && !in->local_vision) {
        if (!in->hop) {
            decide_remote(in, out);
            if (out->verdict != RD_UNKNOWN) return;
            memset(out, 0, sizeof *out);
        }
        no_vision(in, out);
        return;
    }
    /* a passive standby sends a model it has on disk to the table's hosts while there are any */
    if (in->passive && in->have_table && in->in_table && in->n_hosts > 0 && !in->hop) {
        decide_passive(in, out);
        return;
    }
    switch (in->local_plan) {
    case RD_PLAN_SERVE:
        if (in->needs >= 0 && in->local_type != in->needs) {
            refuse(out, 400, "invalid_request_error", "model_type_mismatch");
            snprintf(out->msg, sizeof out->msg,
                     "model '%s' is a %s model and cannot serve %s; use %s", in->model,
                     type_name(in->local_type), in->path ? in->path : "this endpoint",
                     endpoint_for(in->local_type));
            return;
        }
        if (in->local_full && !in->hop && !(in->rq && in->rq->has_sticky) && in->tries == 0 &&
            !in->passive && !in->offline && spill_local(in, out))
            return;
        out->verdict = RD_LOCAL;
        return;
    case RD_PLAN_WAIT:
        out->verdict = RD_PARK;
        return;
    default:
        break;
    }
    if (!in->hop) { /* its host is elsewhere (routing_local_gate: the peers, not a table) */
        decide_active(in, out);
        if (out->verdict != RD_UNKNOWN) return;
        memset(out, 0, sizeof *out);
    }
    refuse(out, 503, "unavailable", "model_unavailable");
    snprintf(out->msg, sizeof out->msg,
             "model '%s' is hosted by another node of the mesh, which is not ready yet; retry "
             "shortly",
             in->model);
}

/* the private rule (route_decide.h): a forward of a model some candidate runs as a private split
 * is refused unless the request allows the serving node to read it. */
static void private_guard(const rd_input_t *in, rd_decision_t *out)
{
    if (out->verdict != RD_FORWARD || in->hop || in->allow_host) return;
    const rd_host_t *host = NULL;
    for (size_t i = 0; i < in->n_hosts && !host; i++)
        if (in->hosts[i].priv) host = &in->hosts[i];
    if (!host) return;
    /* servable elsewhere: a plain replica of the model takes it, the private hosts drop out */
    size_t kept = 0, good = 0, first = out->n ? out->order[0] : 0;
    for (size_t i = 0; i < out->n; i++) {
        if (in->hosts[out->order[i]].priv) continue;
        if (i < out->n_good) good++;
        out->order[kept++] = out->order[i];
    }
    if (kept) {
        out->n = kept;
        out->n_good = good;
        if (out->order[0] != first) out->affinity_hit = false;
        return;
    }
    memset(out, 0, sizeof *out);
    refuse(out, 403, "permission_error", "private_split");
    snprintf(out->msg, sizeof out->msg,
             "model '%.64s' runs as a private split (--split-private) on node %.12s: the node "
             "that serves a request reads its text, and this one would go there; send it to "
             "that node's own API, or send the header '" RD_ALLOW_HOST_HEADER ": " RD_ALLOW_HOST
             "' to accept that",
             in->model, host->id);
}

bool rd_allows_host(const char *v)
{
    return v && strcasecmp(v, RD_ALLOW_HOST) == 0;
}

void route_decide(const rd_input_t *in, rd_decision_t *out)
{
    decide(in, out);
    private_guard(in, out);
}

int rd_local_gate(const rd_gate_t *g)
{
    bool bootstrap = !g->local_ready && g->ready_elsewhere; /* a ready peer answers meanwhile */
    if (!g->planned) return bootstrap ? RD_PLAN_REMOTE : RD_PLAN_SERVE; /* served on demand */
    if (!g->have_file) return RD_PLAN_REMOTE;
    if (!g->first_plan_done) /* as a node alone would: a replica if it fits alone */
        return !g->fits_alone ? RD_PLAN_WAIT : bootstrap ? RD_PLAN_REMOTE : RD_PLAN_SERVE;
    if (g->role == ELECTION_REPLICA) return bootstrap ? RD_PLAN_REMOTE : RD_PLAN_SERVE;
    if (g->role == ELECTION_HOST) return g->launched ? RD_PLAN_SERVE : RD_PLAN_WAIT;
    return RD_PLAN_REMOTE;
}

bool route_has_host(const rd_input_t *in)
{
    if (in->passive && in->have_table && in->in_table && in->n_hosts > 0) return true;
    if (in->local_plan != RD_PLAN_REMOTE) return true; /* served or starting here */
    if (in->offline) return false;
    peers_t p;
    classify(in, false, &p);
    /* a candidate, a host that loads it, or a download of it will drain the queue */
    return (p.known && (p.n_ready || p.n_take)) || (p.known && p.loading) || in->dl_mesh;
}

size_t rd_table_hosts(const rt_table_t *t, const rt_model_t *m, rd_host_t *hosts, size_t *node_of,
                      size_t max)
{
    size_t n = 0;
    for (size_t i = 0; m && i < m->n_hosts && n < max; i++) {
        size_t node = m->hosts[i].node;
        if (node >= t->n_nodes) continue;
        hosts[n] = (rd_host_t){.id = t->nodes[node].id,
                               .ready = true,
                               .type = -1,
                               .slots = rt_host_slots(m, node),
                               .vision = m->hosts[i].vision,
                               .priv = m->hosts[i].priv};
        if (node_of) node_of[n] = node;
        n++;
    }
    return n;
}

void rd_passive_input(rd_input_t *in, const rt_table_t *t, const char *model, const char *self_id,
                      rd_host_t *hosts, size_t *node_of, size_t max)
{
    const rt_model_t *m = t ? rt_table_find_model(t, model) : NULL;
    *in = (rd_input_t){.model = model,
                       .needs = -1,
                       .self_id = self_id,
                       .passive = true,
                       .have_table = t != NULL,
                       .in_table = m != NULL,
                       .table_status = m ? (int)m->status : 0,
                       .table_type = m && m->has_type ? (int)m->type : -1,
                       .hosts = hosts,
                       .n_hosts = m ? rd_table_hosts(t, m, hosts, node_of, max) : 0};
}
