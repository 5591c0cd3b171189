/* route — see route.h. */
#include "route.h"

#include <stdio.h>
#include <string.h>

#include "affinity.h"
#include "log.h"
#include "meshstat.h"
#include "node_dl.h"
#include "passive.h"
#include "route_table.h"
#include "tunnel.h"
#include "vision.h"

/* ---- the node's facts and actions ---- */

static size_t node_peers(void *data, const char *model, rd_host_t *out, size_t max)
{
    route_t *rt = data;
    return planner_route_facts(rt->d.plan, model, out, max);
}

static int node_plan(void *data, const char *model)
{
    route_t *rt = data;
    switch (planner_route(rt->d.plan, model)) {
    case PLAN_SERVE:
        return RD_PLAN_SERVE;
    case PLAN_WAIT:
        return RD_PLAN_WAIT;
    default:
        return RD_PLAN_REMOTE;
    }
}

static bool node_requested(void *data, const char *model)
{
    route_t *rt = data;
    return planner_requested(rt->d.plan, model);
}

static bool node_online(void *data)
{
    route_t *rt = data;
    return rt->d.mesh != NULL;
}

static bool node_dl_here(void *data, const char *model)
{
    route_t *rt = data;
    return rt->d.ndl && node_dl_find(rt->d.ndl, model) != NULL;
}

static bool node_dl_mesh(void *data, const char *model)
{
    route_t *rt = data;
    char who[80];
    uint64_t b, t;
    return planner_downloading(rt->d.plan, model, who, sizeof who, &b, &t);
}

static passive_t *passive_of(route_t *rt)
{
    passive_t *p = rt->d.passive ? *rt->d.passive : NULL;
    return passive_active(p) ? p : NULL;
}

static bool node_passive_facts(void *data, const char *model, rd_input_t *in, rd_host_t *hosts,
                               size_t max)
{
    passive_t *p = passive_of(data);
    if (!p) return false;
    passive_facts(p, model, in, hosts, NULL, max);
    return true;
}

static bool node_passive_route(void *data, const char *model, int needs, httpd_req_t *req)
{
    return passive_route(passive_of(data), model, needs, req);
}

static void node_park(void *data, const char *model, httpd_req_t *req)
{
    route_t *rt = data;
    planner_park(rt->d.plan, model, req);
}

static int node_relay(void *data, const char *model, httpd_req_t *req, const relay_host_t *hosts,
                      size_t n)
{
    route_t *rt = data;
    return relay_start(rt->d.relay, rt->d.mesh, model, req, hosts, n, false);
}

static void node_downloading(void *data, rd_download_t where, const char *model, httpd_req_t *req)
{
    route_t *rt = data;
    char who[80], at[96];
    uint64_t b = 0, t = 0;
    if (where == RD_DL_HERE && rt->d.ndl && node_dl_answer(rt->d.ndl, model, req)) return;
    if (where == RD_DL_MESH && planner_downloading(rt->d.plan, model, who, sizeof who, &b, &t))
        snprintf(at, sizeof at, "node %.12s of the mesh", who);
    else
        snprintf(at, sizeof at, "%s", where == RD_DL_HERE ? "this node" : "a node of the mesh");
    node_dl_respond_downloading(req, model, at, b, t); /* 503 + Retry-After */
}

static void node_answer(void *data, httpd_req_t *req, int status, const char *type,
                        const char *code, const char *msg)
{
    (void)data;
    httpd_respond_error(req, status, type, code, "%s", msg);
}

static const route_ops_t NODE_OPS = {
    .peers = node_peers,
    .plan = node_plan,
    .requested = node_requested,
    .online = node_online,
    .dl_here = node_dl_here,
    .dl_mesh = node_dl_mesh,
    .passive_facts = node_passive_facts,
    .passive_route = node_passive_route,
    .park = node_park,
    .relay = node_relay,
    .downloading = node_downloading,
    .answer = node_answer,
};

void route_init(route_t *rt, const route_deps_t *d)
{
    rt->d = *d;
    rt->ops = &NODE_OPS;
    rt->ops_data = rt;
    route_set_mesh(rt, d->mesh);
}

void route_init_ops(route_t *rt, const route_ops_t *ops, void *data, const char *self_id)
{
    memset(&rt->d, 0, sizeof rt->d);
    rt->ops = ops;
    rt->ops_data = data;
    rt->self_id = self_id;
}

void route_set_mesh(route_t *rt, mesh_t *mesh)
{
    rt->d.mesh = mesh;
    rt->self_id = mesh ? mesh_node_id(mesh) : NULL;
}

/* ---- deciding ---- */

/* The facts of an active node about model (the peers, the planner, the downloads). */
static void gather(route_t *rt, const char *model, const route_local_t *local, int needs, bool hop,
                   const request_t *rq, rd_input_t *in)
{
    const route_ops_t *o = rt->ops;
    void *d = rt->ops_data;
    bool online = o->online(d);
    *in = (rd_input_t){
        .rq = rq,
        .model = model,
        .needs = needs,
        .hop = hop,
        .self_id = rt->self_id,
        .local = local && local->have,
        .local_type = local ? local->type : 0,
        .local_vision = local && local->vision,
        .local_plan = local && local->have ? o->plan(d, model) : RD_PLAN_REMOTE,
        .local_full = local && local->have && local->full,
        .self_requested = o->requested(d, model),
        .offline = !online,
        .dl_here = o->dl_here(d, model),
        .dl_mesh = online && o->dl_mesh(d, model),
    };
    /* a passive node's hosts are its table's (a hop is never forwarded again: the peers' rules,
     * which forward nothing); an active node's, the peers' */
    if (hop || !o->passive_facts(d, model, in, rt->peers, RD_MAX_HOSTS)) {
        size_t n = online ? o->peers(d, model, rt->peers, ROUTE_MAX_PEERS) : 0;
        for (size_t i = 0; rt->d.relay && i < n; i++) /* the spill-over's facts */
            rt->peers[i].inflight = relay_inflight(rt->d.relay, rt->peers[i].id);
        in->hosts = rt->peers;
        in->n_hosts = n;
    }
    relay_affinity_input(rt->d.relay, in);
}

/* Relay the request to the decided hosts, remembering its prefix's host. */
static void forward(route_t *rt, const rd_input_t *in, const rd_decision_t *dec, httpd_req_t *req)
{
    relay_ctx_t *rc = rt->d.relay;
    relay_affinity_note(rc, in, dec);
    relay_host_t hosts[RELAY_MAX_HOSTS];
    size_t nh = 0;
    for (size_t k = 0; k < dec->n && nh < RELAY_MAX_HOSTS; k++, nh++) {
        const rd_host_t *h = &in->hosts[dec->order[k]];
        snprintf(hosts[nh].id, sizeof hosts[nh].id, "%s", h->id);
        hosts[nh].ready = h->ready;
    }
    if (rc && nh) relay_track(rc, req, hosts[0].id); /* in flight there until it finishes */
    if (rt->ops->relay(rt->ops_data, in->model, req, hosts, nh) == 0) return;
    /* the relay tried each host: none took a stream (its stream limit or send queue full; with
     * none connected yet, the relay itself waits for the mesh's dials) */
    char msg[RD_MSG_MAX];
    snprintf(msg, sizeof msg, "model '%s': its host%s cannot be reached right now; retry shortly",
             in->model, dec->n > 1 ? "s" : "");
    rt->ops->answer(rt->ops_data, req, 503, "unavailable", "host_unreachable", msg);
}

/* The passive driver takes a request the decision sent to its table (RD_FORWARD, or RD_WAIT for
 * a first table). Should its table not know the model after all, the request is what it would
 * be without a table entry: unknown, or served here (a vision request without a projector here:
 * 400). */
static route_outcome_t to_passive(route_t *rt, const char *model, const route_local_t *local,
                                  int needs, const request_t *rq, httpd_req_t *req)
{
    const route_ops_t *o = rt->ops;
    void *d = rt->ops_data;
    if (o->passive_route(d, model, needs, req)) return ROUTE_TAKEN;
    if (!local->have) return ROUTE_UNKNOWN;
    if (rq->images && !local->vision) {
        char msg[RD_MSG_MAX];
        vision_refusal(model, msg, sizeof msg);
        o->answer(d, req, 400, "invalid_request_error", VISION_ERR_CODE, msg);
        return ROUTE_TAKEN;
    }
    return ROUTE_LOCAL;
}

route_outcome_t route_inference(route_t *rt, const char *model, const route_local_t *local,
                                int needs, httpd_req_t *req, bool hop)
{
    static const route_local_t none = {.have = false};
    if (!local) local = &none;
    const request_t *rq = meshstat_parse_body(req); /* parsed once already (api_openai.c) */
    rd_input_t in;
    gather(rt, model, local, needs, hop, rq, &in);
    in.path = req->path;
    in.allow_host = rd_allows_host(httpd_header(req, RD_ALLOW_HOST_HEADER));
    rd_decision_t dec;
    route_decide(&in, &dec);
    switch (dec.verdict) {
    case RD_LOCAL:
        return ROUTE_LOCAL;
    case RD_PARK:
        rt->ops->park(rt->ops_data, model, req);
        return ROUTE_TAKEN;
    case RD_FORWARD:
        if (in.passive) return to_passive(rt, model, local, needs, rq, req);
        forward(rt, &in, &dec, req);
        return ROUTE_TAKEN;
    case RD_WAIT: /* a passive node without a table yet */
        return to_passive(rt, model, local, needs, rq, req);
    case RD_UNKNOWN:
        return ROUTE_UNKNOWN;
    case RD_REFUSE:
        break;
    }
    if (dec.download != RD_DL_NONE)
        rt->ops->downloading(rt->ops_data, dec.download, model, req);
    else
        rt->ops->answer(rt->ops_data, req, dec.status, dec.type, dec.code, dec.msg);
    return ROUTE_TAKEN;
}

bool route_req_is_hop(const httpd_req_t *req)
{
    return req->peer == HTTPD_PEER_TUNNEL || httpd_header(req, TUNNEL_HOP_HEADER) != NULL;
}

bool route_spills(route_t *rt, const char *model, httpd_req_t *req)
{
    route_local_t local = {.have = true, .full = true};
    rd_input_t in;
    gather(rt, model, &local, -1, route_req_is_hop(req), meshstat_parse_body(req), &in);
    rd_decision_t dec;
    route_decide(&in, &dec);
    return in.local_plan == RD_PLAN_SERVE && dec.verdict == RD_FORWARD;
}

bool route_has_host_of(route_t *rt, const char *model)
{
    route_local_t local = {.have = true};
    rd_input_t in;
    gather(rt, model, &local, -1, false, NULL, &in);
    return route_has_host(&in);
}

int route_rpc_port(route_t *rt, const char *peer_id, const char *model)
{
    sv_child_t *c = rt->d.plan->rpc;
    if (!planner_rpc_allowed(rt->d.plan, peer_id, model)) {
        LOGW("node",
             "refused an rpc tunnel from %.12s for '%.64s': it is not the host of a split "
             "this node works for",
             peer_id, model);
        return -1;
    }
    return c && c->state == CHILD_READY ? c->port : -1;
}
