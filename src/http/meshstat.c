/* meshstat — see meshstat.h. */
#include "meshstat.h"

#include <stdio.h>

static metrics_t g_metrics;
static char g_node[METRICS_PEER_LEN];

metrics_t *meshstat(void)
{
    return &g_metrics;
}

void meshstat_set_node(const char *id)
{
    snprintf(g_node, sizeof g_node, "%s", id ? id : "");
}

const char *meshstat_node(void)
{
    return g_node;
}

void meshstat_req_done(httpd_req_t *req)
{
    metrics_request_done(&g_metrics, &req->mesh, httpd_now_ns());
}
