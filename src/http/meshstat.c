/* meshstat — see meshstat.h. */
#include "meshstat.h"

#include <stdio.h>
#include <time.h>

static metrics_t g_metrics;
static char g_node[METRICS_PEER_LEN];
static reqlog_t g_reqlog;
static changes_t *g_changes;

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

void meshstat_set_changes(changes_t *c)
{
    g_changes = c;
}

const reqlog_t *meshstat_reqlog(void)
{
    return &g_reqlog;
}

void meshstat_req_done(httpd_req_t *req)
{
    bool first = !req->mesh.reported;
    uint64_t now = httpd_now_ns();
    metrics_request_done(&g_metrics, &req->mesh, now);
    reqlog_entry_t e;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wall_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    if (first && reqlog_entry_from(&e, &req->mesh, g_node, now, wall_ms) == 0) {
        reqlog_add(&g_reqlog, &e);
        changes_notify(g_changes); /* the request log is part of the status */
    }
}

const request_t *meshstat_parse_body(httpd_req_t *req)
{
    if (!req->rq_ok) {
        request_parse(&req->rq, req->path, req->body, req->body_len);
        req->rq_ok = true;
        g_metrics.request_parses++;
    }
    return &req->rq;
}
