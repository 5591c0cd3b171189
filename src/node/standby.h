/* standby — the driver of a standby node (seed 002 "Standby GPU"): a node without --model that
 * the mesh gave nothing (or that was demoted) stops gossiping and checks in like a passive
 * client, as role "standby" with its memory and models on disk; the promotion rules decide from
 * each routing table whether it serves again. The decisions are pure (core/promote.h:
 * promo_go_passive, promo_decide over promo_models_from_table); this driver only switches the
 * mesh (mesh_go_passive / mesh_go_active) and the check-in client (checkin.h: checkin_pause /
 * checkin_resume).
 *
 *   active, nothing to serve ──(after a re-plan: promo_go_passive)──► passive standby
 *   passive standby ──(a table, or none answering: promo_decide chose a model)──► active,
 *       serving it (the planner plans it like an allocation: solo, or joining its split group),
 *       joined to gossip through the --join tokens
 *   active ──(demotion: idle unload; planner_demand.c)──► nothing to serve → passive again
 *
 * Switches happen on a zero-delay timer, never inside the mesh's or the planner's callbacks. */
#ifndef MESH_STANDBY_H
#define MESH_STANDBY_H

#include <stdbool.h>
#include <uv.h>

#include "mesh.h"
#include "passive.h"
#include "planner.h"

typedef struct {
    uv_loop_t *loop;
    planner_t *pl;
    mesh_t *mesh;
    passive_t *pv; /* role standby; paused while the node is a gossip member */
    uv_timer_t timer;
    bool want_check;    /* a re-plan happened: look whether to stand by */
    bool in_timer;      /* on_timer is running (re-arms wait 1 ms) */
    bool have_table;    /* a table (or none answering) arrived while passive */
    bool none_answered; /* and it was: no active node answered */
    uint64_t went_passive, went_active;
    bool started;
} standby_t;

/* Creates the passive driver (paused; o: its options, role/on_table/paused set here) and hooks
 * the planner's re-plans. *pv_out: the driver (the node routes through it while it is active). */
int standby_start(standby_t *s, uv_loop_t *loop, planner_t *pl, mesh_t *mesh,
                  const passive_opts_t *o, passive_t **pv_out);
/* A node that joins a mesh without --model (o->n_joins > 0, not a client, nothing planned yet):
 * the mesh chooses its model (planner_allocate) and, when it gives nothing, the node stands by
 * (standby_start, with o's joins/relay/refresh/memory and the models on disk filled in here).
 * Returns 0 (started, or not such a node) or a negative errno. */
int standby_join(standby_t *s, uv_loop_t *loop, planner_t *pl, mesh_t *mesh, bool client,
                 const passive_opts_t *o, passive_t **pv_out);
/* node.standby of the status document: {passive, went_passive, went_active} (a new value; NULL
 * when not started). */
json_t *standby_status(const standby_t *s);
void standby_stop(standby_t *s);

#endif
