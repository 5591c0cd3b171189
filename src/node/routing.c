/* routing — see routing.h. */
#include "routing.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "meshstat.h"
#include "relay.h"
#include "router.h"
#include "vision.h"

bool routing_remote(routing_t *rt, const char *model, int needs, httpd_req_t *req)
{
    if (!rt->mesh) return false;
    static router_peer_t peers[1024]; /* one per live peer (GOSSIP_MAX_PEERS) */
    size_t np = planner_route_facts(rt->plan, model, peers, sizeof peers / sizeof peers[0]);
    const request_t *body = meshstat_parse_body(req); /* parsed once already (api_openai.c) */
    router_request_t rq = {.needs = needs,
                           .has_key = body->has_router_key,
                           .key = body->router_key,
                           .rotation = rt->rotation++,
                           .images = body->images};
    router_result_t res;
    router_route(peers, np, planner_requested(rt->plan, model), &rq, &res);
    char who[80], where[96];
    uint64_t b, t;
    if ((res.verdict == ROUTER_NO_FILE || res.verdict == ROUTER_UNAVAILABLE) &&
        planner_downloading(rt->plan, model, who, sizeof who, &b, &t)) {
        snprintf(where, sizeof where, "node %.12s of the mesh", who);
        node_dl_respond_downloading(req, model, where, b, t); /* 503 + Retry-After */
        return true;
    }
    switch (res.verdict) {
    case ROUTER_UNKNOWN:
        return false;
    case ROUTER_TYPE_MISMATCH:
        httpd_respond_error(req, 400, "invalid_request_error", "model_type_mismatch",
                            "model '%s' is a %s model and cannot serve %s", model, res.type,
                            req->path);
        return true;
    case ROUTER_NO_FILE:
        httpd_respond_error(req, 503, "unavailable", "model_unavailable",
                            "model '%s' is in the mesh (status unloaded): requested, but no "
                            "node has its file",
                            model);
        return true;
    case ROUTER_UNAVAILABLE:
        httpd_respond_error(req, 503, "unavailable", "model_unavailable",
                            "model '%s' is in the mesh (status %s) but no node can serve it now",
                            model, res.loading ? "loading" : "unloaded");
        return true;
    case ROUTER_NO_VISION: {
        char msg[512];
        vision_refusal(model, msg, sizeof msg);
        httpd_respond_error(req, 400, "invalid_request_error", VISION_ERR_CODE, "%s", msg);
        return true;
    }
    case ROUTER_FORWARD:
        break;
    }
    /* the relay (relay.h): first-byte deadline, one retry, streams continued elsewhere */
    static const char *ids[sizeof peers / sizeof peers[0]];
    for (size_t i = 0; i < np; i++)
        ids[i] = peers[i].id;
    relay_order_by_prefix(rt->relay, req, ids, res.order, res.n);
    relay_host_t hosts[RELAY_MAX_HOSTS];
    size_t nh = 0;
    for (size_t k = 0; k < res.n && nh < RELAY_MAX_HOSTS; k++, nh++) {
        snprintf(hosts[nh].id, sizeof hosts[nh].id, "%s", peers[res.order[k]].id);
        hosts[nh].ready = peers[res.order[k]].ready;
    }
    if (relay_start(rt->relay, rt->mesh, model, req, hosts, nh) == 0) return true;
    /* the relay tried each host: none is connected yet (dials to them are under way) or took a
     * stream (its stream limit or send queue full) */
    httpd_respond_error(req, 503, "unavailable", "host_unreachable",
                        "model '%s': its host%s cannot be reached right now; retry shortly", model,
                        res.n > 1 ? "s" : "");
    return true;
}

/* A model this node has: serve it here, send it to its host, or hold it while the split here
 * starts. Returns true when the request was taken care of. */
bool routing_local_gate(routing_t *rt, const char *model, int needs, httpd_req_t *req, bool hop)
{
    switch (planner_route(rt->plan, model)) {
    case PLAN_SERVE:
        return false;
    case PLAN_WAIT:
        planner_park(rt->plan, model, req);
        return true;
    default:
        break;
    }
    if (!hop && routing_remote(rt, model, needs, req)) return true;
    httpd_respond_error(req, 503, "unavailable", "model_unavailable",
                        "model '%s' is hosted by another node of the mesh, which is not ready "
                        "yet; retry shortly",
                        model);
    return true;
}

bool routing_has_host(routing_t *rt, const char *model)
{
    if (planner_route(rt->plan, model) != PLAN_REMOTE) return true; /* served or starting here */
    if (!rt->mesh) return false;
    static router_peer_t peers[1024]; /* one per live peer (GOSSIP_MAX_PEERS) */
    size_t np = planner_route_facts(rt->plan, model, peers, sizeof peers / sizeof peers[0]);
    router_request_t rq = {.needs = -1};
    router_result_t res;
    router_route(peers, np, planner_requested(rt->plan, model), &rq, &res);
    char who[80];
    uint64_t b, t; /* a host that loads it, or a download of it, will drain the queue */
    return res.verdict == ROUTER_FORWARD || (res.verdict == ROUTER_UNAVAILABLE && res.loading) ||
           planner_downloading(rt->plan, model, who, sizeof who, &b, &t);
}

int routing_rpc_port(routing_t *rt, const char *peer_id, const char *model)
{
    sv_child_t *c = rt->plan->rpc;
    if (!planner_rpc_allowed(rt->plan, peer_id, model)) {
        LOGW("node",
             "refused an rpc tunnel from %.12s for '%.64s': it is not the host of a split "
             "this node works for",
             peer_id, model);
        return -1;
    }
    return c && c->state == CHILD_READY ? c->port : -1;
}
