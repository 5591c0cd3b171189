/* api_mgmt — the management API on 127.0.0.1:--console (default 3131): GET /api/status (the
 * document is status_doc.h's), GET /api/events (api_events.h), GET /metrics (api_metrics.h),
 * POST /api/join, POST /api/chat, GET /api/discover (api_mgmt_join.c), POST /api/assign,
 * POST /api/unassign (api_mgmt_assign.c). */
#ifndef MESH_API_MGMT_H
#define MESH_API_MGMT_H

#include <stdbool.h>
#include <uv.h>

#include "changes.h"
#include "config.h"
#include "httpd.h"
#include "mesh.h"
#include "models.h"
#include "relay.h"
#include "supervisor.h"
#include "tunnel_rpc.h"

struct status_parts; /* status_doc.h */

/* What the node gives its management API (mgmt_start). */
typedef struct {
    int api_port;
    relay_ctx_t *relay; /* the node's relay counters (the status' "routing"); NULL: zeros */
    const tunnel_rpc_stats_t *rpc_stats; /* the node's RPC tunnel counters (/metrics); NULL: 0 */
    /* Fills the node's parts of the status document (status_doc.h; called with a mesh only). */
    void (*status_parts)(void *data, struct status_parts *parts);
    void *data; /* status_parts', join's, discover's and chat's */
    /* Idle mode (mesh NULL): this node's id for the status document. */
    const char *idle_id;
    /* POST /api/join with a decoded token: returns the HTTP status (join_policy.h) and says in
     * msg what happens (202: the join runs in the background, shown in GET /api/status). */
    int (*join)(void *data, const token_t *t, char *msg, size_t msglen);
    /* GET /api/discover: the public listings (nostr_app.h); NULL: none */
    void (*discover)(void *data, httpd_req_t *req);
    /* POST /api/chat: answered as POST /v1/chat/completions by the inference API. */
    void (*chat)(void *data, httpd_req_t *req);
    /* POST /api/assign {"model"} (unassign false) and POST /api/unassign {"model"}: returns
     * the HTTP status (planner.h planner_assign) and says in msg what happened. */
    int (*assign)(void *data, const char *model, bool unassign, char *msg, size_t msglen);
    /* When set, replaces the --api-key check on /api/ (--api-keys: any configured key). */
    bool (*key_known)(void *data, const httpd_req_t *req);
    void *key_data;
} mgmt_deps_t;

typedef struct {
    httpd_t httpd;
    bool started;
    const config_t *cfg;
    mesh_t *mesh;
    models_t *ms;
    supervisor_t *sv;
    changes_t *changes;    /* the node's change bus (the event streams listen; a join notifies) */
    meshstat_t *stat;      /* the node's metrics and request log (GET /metrics, the status) */
    mgmt_deps_t dep;       /* mgmt_start's */
    struct events *events; /* GET /api/events (api_events.h), made by mgmt_start */
} mgmt_t;

#define MGMT_JOIN_MAX_BODY 16384 /* POST /api/join bodies: {"token": "..."} */

int mgmt_start(mgmt_t *g, uv_loop_t *loop, const config_t *cfg, mesh_t *mesh, models_t *ms,
               supervisor_t *sv, changes_t *changes, meshstat_t *stat, httpd_budget_t *budget,
               const mgmt_deps_t *dep);
/* The node entered a mesh (an idle node's join): the status and /metrics show it. */
void mgmt_set_mesh(mgmt_t *g, mesh_t *mesh);
void mgmt_stop(mgmt_t *g);
/* api_mgmt_join.c: POST /api/join, POST /api/chat, GET /api/discover (false: another path). */
bool mgmt_join_routes(mgmt_t *g, httpd_req_t *req);
/* Whether req may change this node (join, assign): a loopback client naming it by a loopback
 * name, or any client once the node has an API key (checked before, on every /api/ path). */
bool mgmt_may_change(const mgmt_t *g, const httpd_req_t *req);
/* api_mgmt_assign.c: POST /api/assign, POST /api/unassign (false: another path). */
bool mgmt_assign_routes(mgmt_t *g, httpd_req_t *req);

#endif
