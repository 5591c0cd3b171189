/* alloc — which model a node should serve (pure: no I/O, no clock, deterministic).
 *
 * Seed 000 "Model allocation heuristic": "When a node joins (or a new model is added), the mesh
 * decides what model the node should serve." alloc_choose() is called with the node itself
 * (memory, GGUFs on disk, --model names) and the views of the other nodes (catalog_node_t, as
 * for catalog_build). It builds the catalog with the node in it and serving nothing (a node asks
 * when it joins or after it unloaded: "updates gossip to serving: None, and the allocation
 * heuristic runs again"), then applies the first rule that has a candidate.
 *
 * Per catalog model m (live non-client nodes other than this one):
 *   size    = the catalog size (largest reported); models of unknown size (0) are never chosen
 *             by rules 1–5 (fit cannot be judged: seed 002 "check if node VRAM ≥ size × 1.1");
 *   need    = election_need_bytes(size) = ceil(1.1 × size);
 *   servers = nodes serving m (loading or ready), sv = their memory, max = the largest;
 *   solo    = servers ≥ 1 and max ≥ need (someone serves it alone);
 *   split   = servers ≥ 1 and max < need (a split group, complete or not);
 *   disk    = m is among this node's files; get = disk, or downloading is allowed (and, when
 *             sources are given, m is among them);
 *   fetching = another node is downloading m: it is not unserved (rules 2 and 4 skip it).
 *
 * Rules, in priority order (seed 000 wording quoted):
 *   1 CANT_RUN_WITHOUT_ME "Model that can't run without this node. A model needs tensor split
 *     and doesn't have enough VRAM yet. This node's VRAM would put it over the threshold.
 *     Prefer models the node already has on disk": split, sv < need ≤ sv + vram, get.
 *   2 UNSERVED "Model with no nodes serving it. … Assign it if the node has enough VRAM and has
 *     it on disk. Gets a new model online with zero download": servers = 0, disk, vram ≥ need.
 *   3 BENEFITS "Model that would benefit from more capacity. A model is being served but tensor
 *     split could use more VRAM (faster split, more headroom). Node already has it on disk":
 *     split, disk. (A complete group keeps the node as a spare: the host's greedy takes workers
 *     only up to need, closest first.)
 *   4 DOWNLOAD "Download and serve. Same as above but the node needs to download first": not
 *     disk, downloading allowed, and either servers = 0 with vram ≥ need (rule 2 but download;
 *     seed 002 "Don't download what won't fit") or split (rule 3 but download; seed 002
 *     "Exception: if joining a tensor split group, download anyway").
 *   5 BIGGEST "Join the biggest model. If everything is covered, join the largest model's group":
 *     servers ≥ 1, get, and the node is useful there: split, or vram ≥ need (another solo
 *     replica). A solo-served model the node cannot fit is not joined.
 *   none: no candidate — the node stays a standby worker ("nothing useful to serve"), e.g. an
 *     empty catalog, every model solo-served by nodes bigger than this one, or an unserved model
 *     too big for this node alone (it needs a node that asks for it with --model to start its
 *     group; rule 1 then applies to the next joiners).
 *
 * Tie-break inside a rule (seed 000): "prefer models already on disk > larger models >
 * alphabetical" — disk first, then larger size, then the smaller name (strcmp). Rule 5's
 * "biggest" is this same order (on-disk groups first, then the largest).
 *
 * --model: one name overrides everything (EXPLICIT: "I want to serve this specifically"), even
 * a model the mesh does not know yet. Several names (a seeder with "--model A --model B"; "the
 * node itself only loads one model (the one it's best suited for given its VRAM)"): rules 1–5
 * restricted to those names; when none applies, EXPLICIT picks among them by the tie-break,
 * models this node fits alone (known size, vram ≥ need) before the others. A node with
 * vram_bytes == 0 and no --model stays standby.
 */
#ifndef MESH_ALLOC_H
#define MESH_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"

#define ALLOC_MAX_MODELS CATALOG_MAX_NODE_MODELS /* --model names and files on disk */

typedef enum {
    ALLOC_RULE_NONE = 0,            /* standby worker */
    ALLOC_RULE_EXPLICIT,            /* --model */
    ALLOC_RULE_CANT_RUN_WITHOUT_ME, /* 1 */
    ALLOC_RULE_UNSERVED,            /* 2 */
    ALLOC_RULE_BENEFITS,            /* 3 */
    ALLOC_RULE_DOWNLOAD,            /* 4 */
    ALLOC_RULE_BIGGEST,             /* 5 */
} alloc_rule_t;

typedef struct {
    const char *id; /* 64 lowercase hex */
    uint64_t vram_bytes;
    const catalog_avail_t *disk; /* GGUFs on this node's disk */
    size_t n_disk;
    const char *const *models; /* --model names, in order; none = let the mesh choose */
    size_t n_models;
    bool no_download; /* never choose a model that is not on disk (except an explicit one) */
    /* With sources != NULL, only these models can be downloaded (some node announces where to
     * fetch them: model_source); NULL: any. */
    const char *const *sources;
    size_t n_sources;
    /* Models another node is downloading now: not "unserved" (rules 2 and 4 leave them to it). */
    const char *const *fetching;
    size_t n_fetching;
} alloc_self_t;

typedef struct {
    alloc_rule_t rule;
    char model[CATALOG_NAME_MAX]; /* "" when standby */
    uint64_t size_bytes;          /* catalog size, 0 unknown */
    bool download;                /* not on this node's disk */
} alloc_result_t;

/* Choose. nodes may include the node itself (its entry is replaced by self). 0 (out filled),
 * -EINVAL (NULL, invalid id or --model name), -E2BIG (more than CATALOG_MAX_NODES nodes with
 * self, or lists over ALLOC_MAX_MODELS), -ENOMEM. */
int alloc_choose(const alloc_self_t *self, const catalog_node_t *nodes, size_t n_nodes,
                 alloc_result_t *out);

/* standby|explicit|cant_run_without_me|unserved|benefits_from_capacity|download_and_serve|
 * biggest */
const char *alloc_rule_name(alloc_rule_t rule);

#endif
