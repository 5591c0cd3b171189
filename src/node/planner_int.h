/* planner_int — what planner.c (decisions, actions) and planner_view.c (announcement, catalog,
 * status) share. Private to the planner. */
#ifndef MESH_PLANNER_INT_H
#define MESH_PLANNER_INT_H

#include "catalog.h"
#include "planner.h"
#include "view.h"

/* The live peers with an announcement as the mesh decoded them (mesh_peers: once per change),
 * borrowed: valid until the loop runs again (the next gossip event). */
typedef struct {
    const view_node_t *v;
    size_t n;
} peers_t;

int peers_get(planner_t *pl, peers_t *P); /* peers_free(P) after (forgets the borrow) */
void peers_free(peers_t *P);
const view_node_t *peers_find(const peers_t *P, const char *id);
/* peers_get into the planner's own peers_t (planner.h route_peers; NULL on no memory): for the
 * per-request paths. Valid until the next change; ids are the views' own. */
const peers_t *peers_cached(planner_t *pl);
pmodel_t *pm_find(planner_t *pl, const char *name);
const char *pm_role_name(const pmodel_t *pm);
bool pm_is_host(const pmodel_t *pm);
bool worker_ready(planner_t *pl, const pmodel_t *pm);
/* --model or assigned: the mesh's rules never take it away (announced as pinned). */
bool pm_pinned(const pmodel_t *pm);
/* Model i is no longer planned here (planner.c): its forwards, the mesh's arguments, its host
 * share and worker shard go (unload: its llama-server too); the models after it move up. Never
 * for one whose rpc cache is being filled (seed_done holds it). */
void pm_release(planner_t *pl, size_t i, bool unload);
/* planner_assign.c: a model file arrived (planner_add_model): assigned if it was pending. */
void pa_arrived(planner_t *pl, const char *model);

/* This node's own state in the mesh's terms (what it announces), without JSON. 0, -ENOMEM;
 * view_node_free(out) either way. */
int self_view(planner_t *pl, view_node_t *out);
/* The load classes of this node's models (slots.h LOAD), one signature: the announcement notes
 * the one it carries (pl->load_sig), and the tick re-announces when it changed. */
uint64_t planner_load_sig(planner_t *pl);
const char *self_role(planner_t *pl);

/* Catalog inputs built from the peers' views and (unless skip_self) this node's. */
typedef struct {
    catalog_node_t *nodes;
    catalog_avail_t *av;
    catalog_serving_t *sv;
    const char **rq;   /* requested_models names */
    uint64_t *rq_size; /* and their sizes from model_source (0 unknown) */
    view_node_t self;
    size_t n;
} cnodes_t;
int cnodes_build(planner_t *pl, const peers_t *P, bool skip_self, cnodes_t *c);
void cnodes_free(cnodes_t *c);

/* planner_demand.c: the bottom of the planner (planner.c -> planner_view.c -> planner_demand.c;
 * it calls neither): callers hand it the peers and this node's view (self_view; NULL when it
 * could not be built), and it says what the planner should do instead of doing it. */
void pd_init(planner_t *pl);
/* Close the demand windows; true when a rate changed (re-announced): re-plan (planner_kick). */
bool pd_tick(planner_t *pl);
/* A demotion check is due (once a second, for a node serving one model the mesh gave it). */
bool pd_demote_due(planner_t *pl);
/* promo_demote over the peers (split_wanted: promo_split_wanted over the catalog, planner.c);
 * true when it demoted the model: re-plan. */
bool pd_check_demote(planner_t *pl, const peers_t *P, const view_node_t *self, bool split_wanted);
bool pd_promote(planner_t *pl, const peers_t *P, const view_node_t *self); /* took a model */
void pd_fill_self(planner_t *pl, view_node_t *n);
json_t *pd_status(planner_t *pl); /* node.demand */
/* request_rate / last_request of model over the peers and self (0 when nobody counts it). */
void pd_rate(const peers_t *P, const view_node_t *self, const char *model, uint64_t *rate,
             uint64_t *last);
/* the same, into entry (/api/status). */
void pd_annotate(const peers_t *P, const view_node_t *self, json_t *entry, const char *model);

#endif
