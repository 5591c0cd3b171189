/* tunnels — what this node does with the mesh's non-gossip streams (issue 30 S16): the mesh
 * driver (node/mesh.h) does membership only and hands every other stream a peer opens, once
 * its first frame is read, to mesh_opts_t.on_stream; tunnels_take is that handler.
 *
 *  - TUNNEL_HTTP: a request for this node's API server (tunnel.h, tunnel_http_serve);
 *  - ROUTE_REQUEST: a passive node's routing-table request, answered with route_request's
 *    document as one frame, then FIN (counted in route_in); no answer resets the stream;
 *  - TUNNEL_RPC: a split host's link to this node's rpc-server, at the port rpc_port gives
 *    (tunnel_rpc.h, tunnel_rpc_serve; <= 0 resets the stream).
 * A type without its handler (no api, no route_request, no rpc_port) or any other type is not
 * taken: the mesh resets the stream. */
#ifndef MESH_TUNNELS_H
#define MESH_TUNNELS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "httpd.h"
#include "transport.h"
#include "tunnel_rpc.h"

typedef struct {
    uv_loop_t *loop;
    httpd_t *api; /* this node's API server: tunnelled requests are handed to it; NULL: none */
    /* The local rpc-server's port for a TUNNEL_RPC stream that peer opened for model; <= 0
     * refuses it (no rpc-server, or the peer is not that model's split host). NULL: none. */
    int (*rpc_port)(void *data, const char *peer, const char *model);
    /* The answer to peer's ROUTE_REQUEST frame (a new reference; NULL resets the stream).
     * NULL: route requests are refused (passive nodes). */
    json_t *(*route_request)(void *data, const char *peer, json_t *frame);
    const tunnel_rpc_opts_t *rpc_opts; /* the worker side's (tunnel_rpc_serve); NULL: defaults */
    void *data;
    tunnel_rpc_stats_t *rpc_stats; /* the node's RPC tunnel counters (worker side); NULL: none */
    uint64_t route_in;             /* ROUTE_REQUEST streams answered */
} tunnels_t;

/* mesh_opts_t.on_stream (tunnels is a tunnels_t): take the stream s that peer `from` opened
 * with a frame of `type` (borrowed; rest: the n bytes after it, already acknowledged).
 * Returns false when this node does not serve that type (the caller resets the stream); true
 * when the stream was handled: either taken over (its callbacks replaced) or answered on the
 * caller's callbacks (ROUTE_REQUEST). */
bool tunnels_take(void *tunnels, tp_stream_t *s, int type, const char *from, json_t *frame,
                  const uint8_t *rest, size_t n);

/* The ROUTE_REQUEST streams it took (the status document's stats.route_requests). */
uint64_t tunnels_route_requests(const tunnels_t *t);

#endif
