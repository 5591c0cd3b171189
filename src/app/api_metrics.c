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

/* The peers of the mesh's status document, as metrics facts. */
static void fill_peers(mgmt_t *g)
{
    static metrics_peer_t peers[METRICS_MAX_PEERS];
    size_t n = 0;
    json_t *st = g->mesh ? mesh_status(g->mesh) : NULL;
    json_t *list = json_object_get(st, "peers");
    for (size_t i = 0; i < json_array_size(list) && n < METRICS_MAX_PEERS; i++) {
        json_t *p = json_array_get(list, i);
        const char *id = json_string_value(json_object_get(p, "id"));
        const char *state = json_string_value(json_object_get(p, "state"));
        json_t *rtt = json_object_get(p, "rtt_ms");
        if (!id) continue;
        snprintf(peers[n].id, sizeof peers[n].id, "%s", id);
        snprintf(peers[n].state, sizeof peers[n].state, "%s", state ? state : "unknown");
        peers[n].rtt_s = json_is_number(rtt) ? json_number_value(rtt) / 1e3 : -1.0;
        n++;
    }
    json_decref(st);
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
