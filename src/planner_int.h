/* planner_int — what planner.c (decisions, actions) and planner_view.c (announcement, catalog,
 * status) share. Private to the planner. */
#ifndef MESH_PLANNER_INT_H
#define MESH_PLANNER_INT_H

#include "catalog.h"
#include "planner.h"

/* The live peers with an announcement, borrowed from the mesh until the loop runs again. */
typedef struct {
    const char *id;
    json_t *ann;
} pview_t;

typedef struct {
    pview_t *v;
    size_t n, cap;
} peers_t;

int peers_get(planner_t *pl, peers_t *P); /* free(P->v) after */
json_t *ann_serving(json_t *ann, const char *model);
uint64_t ann_u64(json_t *o, const char *k);
/* The memory a peer offers `model`'s group: its free memory plus what it holds for the model
 * (announcements without free_bytes: all it offers). */
uint64_t ann_offer_for(json_t *ann, const char *model);
pmodel_t *pm_find(planner_t *pl, const char *name);
const char *pm_role_name(const pmodel_t *pm);
bool pm_is_host(const pmodel_t *pm);
bool worker_ready(planner_t *pl, const pmodel_t *pm);

/* This node's "serving" list and role, as announced. */
json_t *self_serving(planner_t *pl);
const char *self_role(planner_t *pl);

/* Catalog inputs built from the peers' announcements and (unless skip_self) this node's. */
typedef struct {
    catalog_node_t *nodes;
    catalog_avail_t *av;
    catalog_serving_t *sv;
    const char **rq; /* requested_models names */
    json_t *self;
    size_t n;
} cnodes_t;
int cnodes_build(planner_t *pl, const peers_t *P, bool skip_self, cnodes_t *c);
void cnodes_free(cnodes_t *c);

#endif
