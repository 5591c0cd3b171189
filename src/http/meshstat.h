/* meshstat — the process's metrics registry (core/metrics.h) and this node's id, for the HTTP
 * layer and the drivers above it: every finished model request is counted here, and proxied
 * answers carry the node's X-Mesh-* and Server-Timing headers. */
#ifndef MESH_MESHSTAT_H
#define MESH_MESHSTAT_H

#include "changes.h"
#include "httpd.h"
#include "metrics.h"
#include "reqlog.h"

metrics_t *meshstat(void);
/* This node's id (hex), set once the mesh started; "" before. */
void meshstat_set_node(const char *id);
const char *meshstat_node(void);
/* The change bus told of every request logged (the request log is in the status); NULL: none.
 * (meshstat is still process state: issue 30 S9 makes it an object holding this pointer.) */
void meshstat_set_changes(changes_t *c);
/* The last model requests through this node (filled by meshstat_req_done). */
const reqlog_t *meshstat_reqlog(void);
/* The request ended (answered, cut or abandoned): counted once and logged if it named a
 * model. */
void meshstat_req_done(httpd_req_t *req);
/* The request's body parsed into req->rq (request_parse), once: later calls return the same
 * facts without parsing again. Each parse is counted (mesh_llm_request_parses_total). */
const request_t *meshstat_parse_body(httpd_req_t *req);

#endif
