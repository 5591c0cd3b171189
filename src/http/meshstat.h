/* meshstat — the node's metrics registry (core/metrics.h), its request log and its id, for the
 * HTTP layer and the drivers above it: every finished model request is counted here, and proxied
 * answers carry the node's X-Mesh-* and Server-Timing headers. One object, owned by the node
 * (app/main.c) and handed to the HTTP servers (httpd_opts_t.stat) and the drivers at init; a
 * holder of a request reaches it through req->server->opts.stat. NULL everywhere means none:
 * nothing is counted (tests, tools). */
#ifndef MESH_MESHSTAT_H
#define MESH_MESHSTAT_H

#include "changes.h"
#include "httpd.h"
#include "metrics.h"
#include "reqlog.h"

struct meshstat {
    metrics_t metrics;
    reqlog_t reqlog;             /* the last model requests through this node */
    char node[METRICS_PEER_LEN]; /* this node's id (hex) once the mesh started; "" before */
    changes_t *changes; /* told of every request logged (it is in the status); NULL: none */
};

void meshstat_init(meshstat_t *st, changes_t *changes);
/* The registry, or NULL (every metrics_* call takes NULL as "not counted"). */
metrics_t *meshstat_metrics(meshstat_t *st);
/* The stat of the server that holds req; NULL: none. */
meshstat_t *meshstat_of(const httpd_req_t *req);
void meshstat_set_node(meshstat_t *st, const char *id);
/* This node's id; "" before it is set or when st is NULL. */
const char *meshstat_node(const meshstat_t *st);
/* The request ended (answered, cut or abandoned) at now (httpd_now_ns): counted once and
 * logged if it named a model. */
void meshstat_req_done(meshstat_t *st, httpd_req_t *req, uint64_t now);
/* The request's body parsed into req->rq (request_parse), once: later calls return the same
 * facts without parsing again. Each parse is counted (mesh_llm_request_parses_total) in the
 * stat of the server holding req. */
const request_t *meshstat_parse_body(httpd_req_t *req);

#endif
