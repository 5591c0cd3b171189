/* api_mgmt — the management API on 127.0.0.1:--console (default 3131): GET /api/status. */
#ifndef MESH_API_MGMT_H
#define MESH_API_MGMT_H

#include <stdbool.h>
#include <uv.h>

#include "config.h"
#include "httpd.h"
#include "mesh.h"
#include "models.h"
#include "supervisor.h"

typedef struct {
    httpd_t httpd;
    bool started;
    const config_t *cfg;
    mesh_t *mesh;
    models_t *ms;
    supervisor_t *sv;
    int api_port;
    /* Adds the mesh plan and catalog to a status document. */
    void (*extra_status)(void *data, json_t *status);
    void *extra_data;
    struct events *events; /* GET /api/events (api_events.h), made by its first client */
} mgmt_t;

int mgmt_start(mgmt_t *g, uv_loop_t *loop, const config_t *cfg, mesh_t *mesh, models_t *ms,
               supervisor_t *sv);
void mgmt_stop(mgmt_t *g);
/* Whether a client may see the invite token (the mesh secret) in the status document: only one
 * on this machine that names it by a loopback host (Host header). */
bool mgmt_may_see_secrets(httpd_peer_t peer, const char *host_header);
/* The whole status document (also what the console shows). */
json_t *mgmt_status(mgmt_t *g);

#endif
