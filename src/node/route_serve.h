/* route_serve — an active node's side of ROUTE_REQUEST (0x05, core/route_table.h): answers a
 * passive node's check-in with the routing table built from this node's view of the mesh (live
 * active nodes with their addresses and memory, the catalog with each model's status, each
 * ready model's hosts with their announced load), and remembers the passive nodes that checked
 * in (shown in /api/status as "passive", those seen in the last two refresh periods).
 *
 * Cost per check-in: the table is built at most once per cache period (min(1 s, refresh / 4))
 * and its encoded frame is reused; a check-in costs one decode of a small frame, a lookup in
 * the passive list and a copy of the cached answer. */
#ifndef MESH_ROUTE_SERVE_H
#define MESH_ROUTE_SERVE_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "mesh.h"
#include "planner.h"
#include "route_table.h"

#define RS_MAX_PASSIVE 4096 /* passive nodes remembered; beyond it the oldest is forgotten */

typedef struct {
    char id[CATALOG_ID_LEN + 1];
    rt_role_t role;
    uint64_t vram_bytes;
    size_t n_models;
    uint64_t last_ms; /* loop time of its last check-in */
    uint64_t wall_s;  /* and in unix seconds */
} rs_passive_t;

typedef struct {
    uv_loop_t *loop;
    planner_t *plan;
    mesh_t *mesh; /* NULL before the mesh starts and once it stops */
    uint64_t refresh_ms, cache_ms;
    json_t *cached; /* the last table frame */
    uint64_t built_at;
    rs_passive_t *seen;
    size_t n_seen, cap_seen;
    uint64_t answered, refused;
} route_serve_t;

void route_serve_init(route_serve_t *rs, uv_loop_t *loop, planner_t *plan, uint64_t refresh_ms);
void route_serve_free(route_serve_t *rs);
/* The mesh it answers from: set when the mesh starts, NULL once it stops. */
void route_serve_set_mesh(route_serve_t *rs, mesh_t *mesh);
/* mesh_opts_t.route_request: the answer to one check-in (new reference) or NULL (refused). */
json_t *route_serve_answer(route_serve_t *rs, const char *peer_id, json_t *req);
/* The mesh changed: the next check-in gets a fresh table. */
void route_serve_invalidate(route_serve_t *rs);
/* Build the routing table from this node's view (t is overwritten). */
int route_serve_build(route_serve_t *rs, rt_table_t *t);
/* Its parts of the status document: "passive": [{id, role, last_checkin, vram_bytes, models}]
 * (seen in the last two refresh periods; a new value), the ids of those passive nodes (ids,
 * n_ids; free()) and its stats.route_answered / route_refused. */
typedef struct {
    json_t *passive;
    catalog_id_t *ids;
    size_t n_ids;
    uint64_t answered, refused;
} route_serve_status_t;
void route_serve_status(route_serve_t *rs, route_serve_status_t *out);
/* The passive nodes seen in the last two refresh periods: how many, and their memory (a
 * client's is 0) added to *vram_bytes. */
size_t route_serve_passive_count(const route_serve_t *rs, uint64_t *vram_bytes);

#endif
