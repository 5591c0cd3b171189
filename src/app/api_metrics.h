/* api_metrics — GET /metrics on the console port: the Prometheus text exposition of the
 * node's registry (mgmt_t.stat, meshstat.h), with the mesh's peers (state, RTT) read at scrape
 * time. */
#ifndef MESH_API_METRICS_H
#define MESH_API_METRICS_H

#include <stdbool.h>

#include "api_mgmt.h"
#include "httpd.h"

/* Answers req and returns true when it is for /metrics. */
bool api_metrics_handle(mgmt_t *g, httpd_req_t *req);

#endif
