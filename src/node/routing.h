/* routing — the driver of the router (core/router.h) and of the planner's gate: a request for
 * a model this node does not serve goes to the peers the router picks through the relay
 * (relay.h: first-byte deadline, one retry on the next candidate, streams continued elsewhere);
 * a request for a model this node has is served here, parked while its split starts, or sent to
 * the model's host. Also who may reach this node's rpc-server through TUNNEL_RPC. */
#ifndef MESH_ROUTING_H
#define MESH_ROUTING_H

#include <stdbool.h>

#include "httpd.h"
#include "mesh.h"
#include "planner.h"
#include "relay.h"

typedef struct {
    planner_t *plan;
    mesh_t *mesh;       /* NULL before the mesh starts and once it stops */
    relay_ctx_t *relay; /* the node's relay counters and affinity memory */
    uint64_t rotation;  /* requests without a stickiness key routed so far (round robin) */
} routing_t;

/* A model this node does not have: forward it, or answer (400/503). false: no node knows it
 * (the caller answers 404). */
bool routing_remote(routing_t *rt, const char *model, int needs, httpd_req_t *req);
/* A model this node has: false when it is served here; true when the request was taken care
 * of (parked, forwarded, or answered). hop: it came through a tunnel (never forwarded again). */
bool routing_local_gate(routing_t *rt, const char *model, int needs, httpd_req_t *req, bool hop);
/* Whether a model this node has is served now or soon: here, by its split starting here, by a
 * host the router would forward to, one that loads it, or a download (admission's has_host). */
bool routing_has_host(routing_t *rt, const char *model);
/* The local rpc-server's port for a TUNNEL_RPC stream from peer_id for model; -1 refuses it (not
 * the host of a split this node works for, or no rpc-server). */
int routing_rpc_port(routing_t *rt, const char *peer_id, const char *model);

#endif
