/* passive — the request path of a passive node (seed 002): `--client`, and a standby GPU while
 * it stands by (standby.h). Its routing tables come from its check-in client (checkin.h), which
 * passive_start starts and passive_checkin hands out (a standby pauses and resumes it).
 *
 * Requests. A request for a model of the table goes through the relay (relay.h: first-byte
 * deadline, one retry on the next host, streams continued elsewhere) to the hosts ordered by
 * core/route_decide (passive: the table's hosts of the model; the request's "user" /
 * "session_id" as rt_sticky_key reads them, else hash(own id + model); a request without a key
 * spills to the host with the fewest of this node's requests in flight per slot — counted until
 * the request's life ends, httpd on_finish, chained; no prefix affinity yet); the tunnel is
 * on a connection this node dials to the host itself (addresses from the table). A host that
 * cannot be dialled within the attempt bound (or takes no stream) is marked bad (checkin.h:
 * skipped until the next table) and the request retried on the next host (at most
 * PV_MAX_TRIES hosts). Requests that arrive before the first table wait for it (bounded). A
 * model the table does not list is unknown (the API answers 404). While the check-in client
 * is paused (a standby that joined gossip) or stopped, waiting requests are answered 503. */
#ifndef MESH_PASSIVE_H
#define MESH_PASSIVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "checkin.h"
#include "httpd.h"
#include "identity.h"
#include "mesh.h"
#include "model_list.h"
#include "relay.h"
#include "route_decide.h"
#include "route_table.h"

#define PV_MAX_TRIES 3     /* hosts tried per request */
#define PV_MAX_PENDING 256 /* requests waiting for a table or a connection */

typedef struct passive passive_t;

/* role .. paused: the check-in client's (checkin_opts_t, checkin.h) */
typedef struct {
    rt_role_t role;
    uint64_t refresh_ms;       /* 0: RT_REFRESH_MS */
    uint64_t vram_bytes;       /* a standby's memory */
    const char *const *models; /* a standby's models on disk (copied) */
    size_t n_models;
    const token_t *joins; /* --join tokens: the last check-in candidates (copied) */
    size_t n_joins;
    void (*on_table)(void *data, const rt_table_t *t);
    void *data;
    bool paused;        /* start paused (a standby that is still a gossip member) */
    relay_ctx_t *relay; /* the node's relay counters (requests forwarded through relays) */
} passive_opts_t;

int passive_start(passive_t **out, uv_loop_t *loop, mesh_t *mesh, const passive_opts_t *o);

/* How the request path reaches the mesh; its check-in client reaches nodes (and reads its
 * clock, the request path's too) through ck (checkin.h). passive_start uses the mesh's (and
 * checkin_start); tests give their own (a connection of their own, a relay that records, a
 * clock they move). */
typedef struct {
    const char *(*self_id)(void *data);             /* mesh_node_id */
    tp_conn_t *(*conn)(void *data, const char *id); /* mesh_conn: NULL while a dial runs */
    void (*set_addrs)(void *data, const char *id, const char *const *addrs, size_t n);
    /* relay_start over the mesh: 0 when a host took req (the relay answers it) */
    int (*relay)(void *data, relay_ctx_t *rc, const char *model, httpd_req_t *req,
                 const relay_host_t *hosts, size_t n);
    void *data;
} passive_io_t;
int passive_start_io(passive_t **out, uv_loop_t *loop, const passive_io_t *io,
                     const checkin_io_t *ck, const passive_opts_t *o);
/* Answers every waiting request (503) and stops its check-in client; the driver stays
 * allocated (callbacks pending in the transport find it stopping) until passive_free. */
void passive_stop(passive_t *p);
/* After passive_stop, once no stream of its check-in client can call back (its connections
 * closed): closes its timer and its check-in client's (checkin_free) and frees them in their
 * close callbacks (the loop must run). */
void passive_free(passive_t *p);

/* A request for `model` that route_decide sent to the table (RD_FORWARD or RD_WAIT over
 * passive_facts, node/route.c): false when the table does not know it (it changed since);
 * otherwise it is forwarded or answered, after waiting for a table or a connection when it must
 * (each step decides again over passive_facts). needs: mm_type_t the endpoint needs, -1 any. */
bool passive_route(passive_t *p, const char *model, int needs, httpd_req_t *req);
/* Its facts about model for route_decide (core/route_decide.h), the same for the first decision
 * (node/route.c) and each later step here: the table's (passive, have_table, in_table,
 * table_status / table_type; no table yet: have_table false) and the table's hosts of the model
 * into hosts[max] (in->hosts; node_of[k], may be NULL: hosts[k]'s index in the table's nodes),
 * each with this node's requests in flight there (relay_inflight) and the check-in client's bad
 * mark. The rest of *in is the caller's (self_id is read). */
void passive_facts(const passive_t *p, const char *model, rd_input_t *in, rd_host_t *hosts,
                   size_t *node_of, size_t max);
/* /v1/models: appends a row per model of the table (type, status and hosts). */
void passive_list_models(passive_t *p, model_list_t *list);
/* Its parts of the status document (new values, NULL: absent): route {role, checkin,
 * table_age_ms, checkins, failures, retries, forwarded {host: n}, spilled, in_flight, nodes}
 * and the mesh's catalog as its table says (NULL: no table yet). */
typedef struct {
    json_t *route, *catalog;
} passive_status_t;
void passive_status(passive_t *p, passive_status_t *out);
/* Its check-in client (a standby pauses and resumes it: checkin.h). */
checkin_t *passive_checkin(const passive_t *p);
/* Routing: not stopped, its check-in client not paused. */
bool passive_active(const passive_t *p);
/* The last table (NULL before the first): checkin_table. */
const rt_table_t *passive_table(const passive_t *p);

#endif
