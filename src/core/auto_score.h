/* auto_score — which discovered mesh an --auto node joins (pure; seed 001's score_mesh and
 * smart_auto).
 *
 * score = region match +200, sticky (the mesh joined last, $MESH_LLM_HOME/last-mesh) +500,
 *         serves a model this node asked for +300 (holds it on disk: +100),
 *         capacity: +10 per node (at most 20 nodes counted), +2 per GiB free (at most 200 GiB),
 *         +1 per 4 GiB total (at most 1 TiB).
 * A listing that does not hold a model this node asked for is still a candidate (the node may
 * bring or download its model). Ties: more free memory, then smaller mesh id (deterministic). */
#ifndef MESH_AUTO_SCORE_H
#define MESH_AUTO_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "listing.h"
#include "model_ref.h"

#define AUTO_SCORE_REGION 200
#define AUTO_SCORE_STICKY 500
#define AUTO_SCORE_SERVES 300
#define AUTO_SCORE_HOLDS 100

typedef struct {
    const char *region;        /* --region ("" or NULL: none) */
    const char *last_mesh;     /* last-mesh ("" or NULL: none) */
    const char *const *wanted; /* models this node asked for (--model names) */
    size_t n_wanted;
} auto_prefs_t;

int64_t auto_score(const mesh_listing_t *l, const auto_prefs_t *p);
/* Indices of the listings, best first, into order (n entries). */
void auto_rank(const mesh_listing_t *ls, size_t n, const auto_prefs_t *p, size_t *order);

/* smart_auto's model for a node that starts a new mesh without one: the catalog's chat model
 * needing the most memory that still fits in mem bytes (NULL: none fits). */
const known_model_t *auto_pick_model(uint64_t mem);

#endif
