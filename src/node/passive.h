/* passive — the driver of a passive node (seed 002): `--client`, and a standby GPU while it
 * stands by (standby.h; paused while it is a gossip member). Its mesh runs in passive mode
 * (mesh.h): no gossip. Instead:
 *
 * Check-in. Every refresh period (MESH_LLM_ROUTE_REFRESH_MS, default 30 s) it asks one active
 * node for the routing table (ROUTE_REQUEST, core/route_table.h): the first answering node of
 * the check-in order — the last table's active nodes by rendezvous hash of (own id, node id),
 * so passive nodes spread evenly over the active ones, then the --join tokens. Each attempt
 * (dial + answer) is bounded (clamp(refresh / 3, 500 ms, 5 s)); a node that does not answer
 * is skipped (its connection closed) and the next one is asked at once, so losing the node it
 * checks in with costs one attempt. When every candidate fails the round is retried after a
 * jittered backoff below the refresh period.
 *
 * Requests. A request for a model of the table goes through the relay (relay.h: first-byte
 * deadline, one retry on the next host, streams continued elsewhere) to the hosts picked by
 * rt_pick_hosts (the request's "user"/"session_id", else hash(own id + model); a request
 * without a key spills to the host with the fewest of this node's requests in flight per slot,
 * rt_spill — counted until the request's life ends, httpd on_finish, chained); the tunnel is
 * on a connection this node dials to the host itself (addresses from the table). A host that
 * cannot be dialled within the attempt bound (or takes no stream) is skipped until the next
 * table and the request retried on the next host (at most PV_MAX_TRIES hosts). Requests that
 * arrive before the first table wait for it (bounded). A model the table does not list is
 * unknown (the API answers 404). */
#ifndef MESH_PASSIVE_H
#define MESH_PASSIVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "httpd.h"
#include "identity.h"
#include "mesh.h"
#include "model_list.h"
#include "relay.h"
#include "route_table.h"

#define PV_MAX_TRIES 3     /* hosts tried per request */
#define PV_MAX_PENDING 256 /* requests waiting for a table or a connection */

typedef struct passive passive_t;

typedef struct {
    rt_role_t role;
    uint64_t refresh_ms;       /* 0: RT_REFRESH_MS */
    uint64_t vram_bytes;       /* a standby's memory */
    const char *const *models; /* a standby's models on disk (copied) */
    size_t n_models;
    const token_t *joins; /* --join tokens: the last check-in candidates (copied) */
    size_t n_joins;
    /* A new table arrived (promotion decisions read it), or t NULL: PV_GONE_ROUNDS rounds in a
     * row found no active node answering (every active node is gone). May be NULL. */
    void (*on_table)(void *data, const rt_table_t *t);
    void *data;
    bool paused;        /* start paused (a standby that is still a gossip member) */
    relay_ctx_t *relay; /* the node's relay counters (requests forwarded through relays) */
} passive_opts_t;

int passive_start(passive_t **out, uv_loop_t *loop, mesh_t *mesh, const passive_opts_t *o);
/* Answers every waiting request (503) and frees everything (callbacks pending in the transport
 * find the driver gone). */
void passive_stop(passive_t *p);

/* A request for `model`: false when the table does not know it (the caller answers 404);
 * otherwise it is forwarded or answered. needs: mm_type_t the endpoint needs, -1 any. */
bool passive_route(passive_t *p, const char *model, int needs, httpd_req_t *req);
/* /v1/models: appends a row per model of the table (type, status and hosts). */
void passive_list_models(passive_t *p, model_list_t *list);
/* Adds "route": {role, checkin, table_age_ms, checkins, failures, forwarded {host: n}}. */
void passive_status(passive_t *p, json_t *st);
/* A standby (standby.h) pauses the driver while it is a gossip member and resumes it when it
 * stands by again: paused, it neither checks in nor routes (waiting requests are answered 503);
 * resumed, it checks in at once (the last table, kept, gives the order). active: not paused. */
void passive_pause(passive_t *p);
void passive_resume(passive_t *p);
bool passive_active(const passive_t *p);
/* The last table (NULL before the first). */
const rt_table_t *passive_table(const passive_t *p);

#endif
