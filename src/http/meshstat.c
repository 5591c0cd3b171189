/* meshstat — see meshstat.h. */
#include "meshstat.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void meshstat_init(meshstat_t *st, changes_t *changes)
{
    memset(st, 0, sizeof *st);
    metrics_init(&st->metrics);
    st->changes = changes;
}

metrics_t *meshstat_metrics(meshstat_t *st)
{
    return st ? &st->metrics : NULL;
}

meshstat_t *meshstat_of(const httpd_req_t *req)
{
    return req && req->server ? req->server->opts.stat : NULL;
}

void meshstat_set_node(meshstat_t *st, const char *id)
{
    if (st) snprintf(st->node, sizeof st->node, "%s", id ? id : "");
}

const char *meshstat_node(const meshstat_t *st)
{
    return st ? st->node : "";
}

void meshstat_req_done(meshstat_t *st, httpd_req_t *req, uint64_t now)
{
    if (!st) return;
    bool first = !req->mesh.reported;
    metrics_request_done(&st->metrics, &req->mesh, now);
    reqlog_entry_t e;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wall_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    if (first && reqlog_entry_from(&e, &req->mesh, st->node, now, wall_ms) == 0) {
        reqlog_add(&st->reqlog, &e);
        changes_notify(st->changes); /* the request log is part of the status */
    }
}

const request_t *meshstat_parse_body(httpd_req_t *req)
{
    if (!req->rq_ok) {
        request_parse(&req->rq, req->path, req->body, req->body_len);
        req->rq_ok = true;
        meshstat_t *st = meshstat_of(req);
        if (st) st->metrics.request_parses++;
    }
    return &req->rq;
}
