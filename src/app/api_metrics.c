/* api_metrics — see api_metrics.h. */
#include "api_metrics.h"

#include <jansson.h>
#include <llhttp.h>
#include <stdio.h>
#include <string.h>

#include "meshstat.h"
#include "tunnel_rpc.h"
#include "util.h"

#define METRICS_MAX_BYTES (8u << 20)

/* The peers gossip holds (mesh_peer_states), as metrics facts. */
static void fill_peers(mgmt_t *g)
{
    static metrics_peer_t peers[METRICS_MAX_PEERS];
    mesh_peer_state_t st[METRICS_MAX_PEERS]; /* ~5 KiB */
    size_t n = g->mesh ? mesh_peer_states(g->mesh, st, METRICS_MAX_PEERS) : 0;
    for (size_t i = 0; i < n; i++) {
        _Static_assert(sizeof peers[i].id == sizeof st[i].id, "peer id sizes");
        memcpy(peers[i].id, st[i].id, sizeof peers[i].id);
        snprintf(peers[i].state, sizeof peers[i].state, "%s", st[i].state);
        peers[i].rtt_s = st[i].rtt_ms >= 0 ? st[i].rtt_ms / 1e3 : -1.0;
        snprintf(peers[i].path, sizeof peers[i].path, "%s", st[i].path);
    }
    metrics_set_peers(meshstat_metrics(g->stat), peers, n);
}

bool api_metrics_handle(mgmt_t *g, httpd_req_t *req)
{
    if (strcmp(req->path, "/metrics") != 0) return false;
    if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
        httpd_respond_405(req, "GET");
        return true;
    }
    fill_peers(g);
    const tunnel_rpc_stats_t none = {0}, *ts = g->dep.rpc_stats ? g->dep.rpc_stats : &none;
    metrics_set_rpc_tunnel(meshstat_metrics(g->stat), ts->host_tx, ts->host_rx, ts->host_turns);
    buf_t b;
    buf_init(&b, METRICS_MAX_BYTES);
    int rc = metrics_render(&g->stat->metrics, g->stat->node, MESH_VERSION, &b);
    if (rc == 0)
        httpd_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "",
                      b.len, NULL);
    else
        httpd_respond_error(req, 500, "server_error", "metrics_too_large",
                            "the metrics exposition passed its cap");
    buf_free(&b);
    return true;
}
