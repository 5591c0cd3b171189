/* checkin — the check-in client of a passive node (seed 002): `--client`, and a standby GPU while
 * it stands by (standby.h; paused while it is a gossip member). Its mesh runs in passive mode
 * (mesh.h): no gossip. Instead, every refresh period (MESH_LLM_ROUTE_REFRESH_MS, default 30 s)
 * it asks one active node for the routing table (ROUTE_REQUEST, core/route_table.h): the first
 * answering node of the check-in order — the last table's active nodes by rendezvous hash of
 * (own id, node id), so passive nodes spread evenly over the active ones, then the --join
 * tokens. Each attempt (dial + answer) is bounded (clamp(refresh / 3, 500 ms, 5 s)); a node that
 * does not answer is skipped (its connection closed) and the next one is asked at once, so
 * losing the node it checks in with costs one attempt. When every candidate fails the round is
 * retried after a jittered backoff below the refresh period.
 *
 * It also keeps the hosts that just failed (bad marks): a host the request path could not reach
 * is skipped until the next table; a host whose connection went silent (mesh_on_silent) stays
 * skipped past the next table (the table may list it until the mesh agreed it is dead), is sent
 * to the active node as a silent hint with each ROUTE_REQUEST, and brings the next check-in
 * forward (CK_SILENT_REFRESH_MS). When every candidate of a round is marked silent they are
 * asked all the same (the silence may have been this node's own: a network change, a laptop
 * moving), so a passive node that lost its network is back as soon as the network is, not when
 * the marks expire. The request path (passive.h) reads the table and the marks. */
#ifndef MESH_CHECKIN_H
#define MESH_CHECKIN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "identity.h"
#include "mesh.h"
#include "route_table.h"
#include "transport.h"

#define CK_POLL_MS 50 /* while a dial or an answer is awaited */
/* after a host went silent: a new table once the mesh agreed it is dead (the gossip probe,
 * GOSSIP_PROBE_MAX_MS, + slack) */
#define CK_SILENT_REFRESH_MS 3000
#define CK_GONE_ROUNDS 3 /* rounds in a row without an answer: every active node is gone */
#define CK_MAX_BAD 32

typedef struct checkin checkin_t;

typedef struct {
    rt_role_t role;
    uint64_t refresh_ms;       /* 0: RT_REFRESH_MS */
    uint64_t vram_bytes;       /* a standby's memory */
    const char *const *models; /* a standby's models on disk (copied) */
    size_t n_models;
    const token_t *joins; /* --join tokens: the last check-in candidates (copied) */
    size_t n_joins;
    /* A new table arrived (promotion decisions read it), or t NULL: CK_GONE_ROUNDS rounds in a
     * row found no active node answering (every active node is gone). May be NULL. */
    void (*on_table)(void *data, const rt_table_t *t);
    void *data;
    bool paused; /* start paused (a standby that is still a gossip member) */
} checkin_opts_t;

/* How the client reaches nodes, and its clock. checkin_start uses the mesh's; tests give their
 * own (a connection of their own, a clock they move). */
typedef struct {
    tp_conn_t *(*conn)(void *data, const char *id); /* mesh_conn: NULL while a dial runs */
    tp_conn_t *(*find)(void *data, const char *id); /* mesh_find_conn: no dial */
    void (*set_addrs)(void *data, const char *id, const char *const *addrs, size_t n);
    const char *(*mesh_id)(void *data); /* the mesh whose tables are taken */
    uint64_t (*now)(void *data);        /* ms */
    void *data;
} checkin_io_t;

/* Starts checking in (at once, unless o->paused). 0 or -ENOMEM. */
int checkin_start(checkin_t **out, uv_loop_t *loop, mesh_t *mesh, const checkin_opts_t *o);
int checkin_start_io(checkin_t **out, uv_loop_t *loop, const char *self_id, const checkin_io_t *io,
                     const checkin_opts_t *o);
/* Stops checking in. The client stays allocated: streams in flight may still call back until
 * the mesh closes; they find it stopped. */
void checkin_stop(checkin_t *ck);
/* After checkin_stop, once no stream of it can call back (its connections closed): closes its
 * timers and frees it in their close callbacks (the loop must run). */
void checkin_free(checkin_t *ck);
/* Paused, it does not check in (a standby while it is a gossip member); resumed, it checks in
 * at once (the last table, kept, gives the order) and forgets every bad mark. */
void checkin_pause(checkin_t *ck);
void checkin_resume(checkin_t *ck);
/* Neither stopped nor paused. */
bool checkin_active(const checkin_t *ck);
/* The last table (NULL before the first) and when it came (checkin's clock). */
const rt_table_t *checkin_table(const checkin_t *ck);
uint64_t checkin_now(const checkin_t *ck);
uint64_t checkin_refresh_ms(const checkin_t *ck);
uint64_t checkin_attempt_ms(const checkin_t *ck); /* the bound of one dial + answer */

/* Host id failed (silent: its connection went silent): skipped until the next table (silent:
 * and past it, for a refresh period). */
void checkin_mark_bad(checkin_t *ck, const char *id, bool silent);
bool checkin_is_bad(const checkin_t *ck, const char *id);
/* mesh_on_silent's callback (checkin_start registers it): marks id silent, asks for a new table
 * within CK_SILENT_REFRESH_MS. */
void checkin_on_silent(void *ck, const char *id);

/* The one listener of the request path: called when a table arrived, a host went silent, or
 * the client paused or stopped (look at the requests waiting). fn NULL: none. */
void checkin_watch(checkin_t *ck, void (*fn)(void *data), void *data);

/* What the check-in client shows: the beginning of the status document's "route" {role,
 * checkin, refresh_ms, table_age_ms, active_nodes, checkins, failed_rounds} (passive.h). */
typedef struct {
    const char *role;    /* rt_role_name */
    const char *checkin; /* the node whose table it holds; NULL: no table yet */
    uint64_t refresh_ms, table_age_ms, active_nodes, checkins, failed_rounds;
} checkin_stat_t;
checkin_stat_t checkin_stat(const checkin_t *ck);

#endif
