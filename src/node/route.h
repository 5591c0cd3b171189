/* route — the driver of route_decide (core/route_decide.h) for an inference request: it gathers
 * the facts (what each live peer announces about the model, the planner's gate for a model this
 * node has, a download here or in the mesh, prefix affinity's memory), asks route_decide where
 * the request goes and carries the verdict out: serve it here (the caller does), park it while
 * the split starting here gets ready (planner_park), relay it to the hosts in the order given
 * (relay.h: first-byte deadline, one retry, streams continued elsewhere), or answer (400 / 503,
 * a download's 503 with its progress). Also who may reach this node's rpc-server through
 * TUNNEL_RPC, and admission's has_host.
 *
 * A passive node (a --client, a standby checking in) decides the same way: its facts are its route
 * table's (passive.h: passive_facts), and a request route_decide sends to the table (forward, or
 * wait for a first table) is handed to the passive driver (passive_route), which waits for the
 * table or the connection to the host when it must and relays it by the same rule.
 *
 * The facts and the actions are route_ops_t: route_init's read the planner, the mesh, node_dl,
 * the passive driver and the relay; a test gives its own (tests/unit/test_route.c). */
#ifndef MESH_ROUTE_H
#define MESH_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "httpd.h"
#include "mesh.h"
#include "planner.h"
#include "relay.h"
#include "route_decide.h"

#define ROUTE_MAX_PEERS 1024 /* GOSSIP_MAX_PEERS: one fact per live peer */

struct node_dl;
struct passive;

/* What a request for a model comes to, for the caller (app/api_openai.c:handle_inference). */
typedef enum {
    ROUTE_LOCAL = 0, /* serve it here */
    ROUTE_TAKEN,     /* answered, parked or relayed */
    ROUTE_UNKNOWN,   /* no node knows the model: the caller answers 404 with the names */
} route_outcome_t;

/* This node's own model the request names (models.h's entry), have false when it has none. */
typedef struct {
    bool have;
    int type; /* mm_type_t */
    bool vision;
    bool full; /* admitted to spill: its server here had no free slot (admission_spilled) */
} route_local_t;

/* A request that came through the mesh already (a tunnel, or the hop header), whatever its
 * other headers say: never forwarded again (a member cannot make this node relay for it). */
bool route_req_is_hop(const httpd_req_t *req);

/* Facts and actions. data: route_t's ops_data. */
typedef struct {
    /* facts */
    size_t (*peers)(void *data, const char *model, rd_host_t *out, size_t max);
    int (*plan)(void *data, const char *model); /* RD_PLAN_* for a model this node has */
    bool (*requested)(void *data, const char *model);
    bool (*online)(void *data); /* the mesh runs */
    bool (*dl_here)(void *data, const char *model);
    bool (*dl_mesh)(void *data, const char *model);
    /* a passive driver routes: its facts about model into *in and hosts[max] (passive.h:
     * passive_facts), true; false when no passive driver routes (in untouched) */
    bool (*passive_facts)(void *data, const char *model, rd_input_t *in, rd_host_t *hosts,
                          size_t max);
    /* actions */
    /* the passive driver takes a request route_decide sent to its table (false: its table does
     * not know the model after all) */
    bool (*passive_route)(void *data, const char *model, int needs, httpd_req_t *req);
    void (*park)(void *data, const char *model, httpd_req_t *req);
    int (*relay)(void *data, const char *model, httpd_req_t *req, const relay_host_t *hosts,
                 size_t n); /* 0: the relay took it (relay_start) */
    void (*downloading)(void *data, rd_download_t where, const char *model, httpd_req_t *req);
    void (*answer)(void *data, httpd_req_t *req, int status, const char *type, const char *code,
                   const char *msg);
} route_ops_t;

typedef struct {
    planner_t *plan;
    mesh_t *mesh;             /* NULL before the mesh starts and once it stops */
    relay_ctx_t *relay;       /* the node's relay counters, affinity memory, settings */
    struct node_dl *ndl;      /* downloads here (NULL: none) */
    struct passive **passive; /* the node's passive driver (a --client, a standby), NULL: none */
} route_deps_t;

typedef struct route {
    route_deps_t d;
    const route_ops_t *ops;
    void *ops_data;
    const char *self_id;
    rd_host_t peers[ROUTE_MAX_PEERS]; /* one call's facts */
} route_t;

/* The node's facts and actions, from d (copied). */
void route_init(route_t *rt, const route_deps_t *d);
/* Facts and actions of a test (ops borrowed). */
void route_init_ops(route_t *rt, const route_ops_t *ops, void *data, const char *self_id);
/* The mesh started (its node id for the home host) or stopped (NULL). */
void route_set_mesh(route_t *rt, mesh_t *mesh);

/* Route req for model (this node's name for it when local.have). needs: mm_type_t the endpoint
 * needs, -1 any; hop: it came through the mesh (never forwarded again). */
route_outcome_t route_inference(route_t *rt, const char *model, const route_local_t *local,
                                int needs, httpd_req_t *req, bool hop);
/* Whether a request for model, which this node serves and whose server here has no free slot,
 * goes to a peer replica with one (route_decide.h's LOCAL SPILL). */
bool route_spills(route_t *rt, const char *model, httpd_req_t *req);
/* Whether requests queued for a model this node has will be served: here, by its split starting
 * here, a passive table's hosts, a peer that would take it or loads it, a download in the mesh
 * (admission's has_host). */
bool route_has_host_of(route_t *rt, const char *model);
/* The local rpc-server's port for a TUNNEL_RPC stream from peer_id for model; -1 refuses it (not
 * the host of a split this node works for, or no rpc-server). */
int route_rpc_port(route_t *rt, const char *peer_id, const char *model);

#endif
