/* catalog — the mesh catalog computed from gossip state (pure: no I/O, no clock, deterministic).
 *
 * Every node derives the same catalog from the same announcements (seed 000 "Mesh catalog":
 * "the union of available_models from all peers, plus any models from --model flags that
 * haven't been downloaded yet"). The I/O layer fills one catalog_node_t per known node
 * (itself included) from its PeerAnnouncement (DESIGN.md §4); strings are borrowed for the
 * duration of catalog_build only, the result owns copies.
 *
 * Inputs used:
 *  - dead nodes (alive == false) are ignored entirely;
 *  - client nodes lend no memory and serve nothing: they contribute model names (and sizes) to
 *    the catalog but are never holders, servers or hosts, and are not counted in the capacity;
 *  - every other live node contributes its files on disk (holders), what it serves (servers,
 *    hosts) and what it requested (names only).
 *
 * Entry fields:
 *  - size_bytes: the largest size any live node reports for the name, from a file on disk or
 *    a requested model's known size (0 = unknown: only requested or served, nobody reports a
 *    size); type: the type reported with that size
 *    (ties: the lowest mm_type_t), MM_LLM when unknown;
 *  - holders: live non-client nodes with the file; servers: live non-client nodes that list it
 *    in serving (loading or ready); hosts: servers that flag is_host; all sorted by id, each
 *    node at most once per list (a node listing a model twice counts once: ready and is_host
 *    win);
 *  - servers_vram / max_server_vram: sum / maximum of the servers' memory.
 *
 * Status (first match wins):
 *  - ready:          some live host serves it with state ready;
 *  - loading:        otherwise some live node serves it (a group loading, or re-electing its
 *                    host: "someone is loading it");
 *  - needs_capacity: nobody serves it, its size is known, and the memory of every live
 *                    non-client node together is < election_need_bytes(size) = ceil(1.1 ×
 *                    size), or the need its holders announce (KV cache included). Any live
 * non-client node could take the model (download, or swap out what it serves), so the sum of all of
 * them is the most the mesh can ever put behind it; no single node can have more than that sum, so
 * "no single node nor the sum of nodes" reduces to this one comparison;
 *  - unloaded:       otherwise (servable once a node loads it; includes unknown sizes).
 *
 * Validation and caps: a node with an invalid id (not 64 lowercase hex chars), a duplicate of an
 * earlier live node's id, invalid model names (1..CATALOG_NAME_MAX-1 bytes, no control
 * characters) and list entries beyond CATALOG_MAX_NODE_MODELS per list are skipped and counted
 * in n_rejected. Beyond CATALOG_MAX_MODELS distinct names, the alphabetically first ones are
 * kept and `truncated` is set.
 */
#ifndef MESH_CATALOG_H
#define MESH_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mm.h"

#define CATALOG_ID_LEN 64
#define CATALOG_NAME_MAX 128        /* bytes including the NUL (MODEL_NAME_MAX) */
#define CATALOG_MAX_NODES 1025      /* GOSSIP_MAX_PEERS + self */
#define CATALOG_MAX_NODE_MODELS 256 /* per list per node */
#define CATALOG_MAX_MODELS 1024     /* distinct names */

typedef char catalog_id_t[CATALOG_ID_LEN + 1];

typedef enum { CATALOG_ROLE_WORKER = 0, CATALOG_ROLE_HOST, CATALOG_ROLE_CLIENT } catalog_role_t;
typedef enum { CATALOG_SERVE_LOADING = 0, CATALOG_SERVE_READY } catalog_serve_state_t;

typedef struct {
    const char *name;
    uint64_t size_bytes;
    mm_type_t type;
    uint64_t need_bytes; /* memory to run it whole, as its holder's ledger counts it; 0 unknown */
} catalog_avail_t;

typedef struct {
    const char *model;
    catalog_serve_state_t state;
    bool is_host; /* this node runs the model's llama-server (solo replica or split host) */
} catalog_serving_t;

typedef struct {
    const char *id;
    uint64_t vram_bytes;
    catalog_role_t role;
    bool alive;
    const catalog_avail_t *available; /* GGUFs on disk */
    size_t n_available;
    const catalog_serving_t *serving;
    size_t n_serving;
    const char *const *requested; /* --model names (wanted, maybe not on disk) */
    size_t n_requested;
    const uint64_t *requested_size; /* per requested name, its size when the node knows it (its
                                       model_source); NULL or 0: unknown */
} catalog_node_t;

typedef enum {
    CATALOG_UNLOADED = 0,
    CATALOG_LOADING,
    CATALOG_READY,
    CATALOG_NEEDS_CAPACITY,
} catalog_status_t;

typedef struct {
    char name[CATALOG_NAME_MAX];
    uint64_t size_bytes; /* 0 = unknown */
    uint64_t need_bytes; /* the largest need announced, else election_need_bytes(size); 0 unknown */
    mm_type_t type;
    catalog_status_t status;
    bool requested; /* some live node requested it */
    catalog_id_t *holders;
    size_t n_holders;
    catalog_id_t *servers;
    size_t n_servers;
    size_t n_ready; /* servers whose state is ready */
    catalog_id_t *hosts;
    size_t n_hosts;
    uint64_t servers_vram; /* saturating */
    uint64_t max_server_vram;
} catalog_entry_t;

typedef struct {
    catalog_entry_t *entries; /* sorted by name (strcmp) */
    size_t n;
    uint64_t capacity_bytes; /* memory of the live non-client nodes (saturating) */
    size_t n_live;           /* live non-client nodes */
    size_t n_rejected;       /* skipped nodes and list entries */
    bool truncated;          /* more than CATALOG_MAX_MODELS names */
    catalog_id_t *pool_;     /* private: storage of the id lists */
} catalog_t;

/* Build the catalog. 0 (release with catalog_free), -EINVAL (NULL), -E2BIG (n_nodes >
 * CATALOG_MAX_NODES), -ENOMEM. On error out is empty and needs no free. */
int catalog_build(const catalog_node_t *nodes, size_t n_nodes, catalog_t *out);
void catalog_free(catalog_t *cat);

/* Entry by exact name, or NULL. */
const catalog_entry_t *catalog_find(const catalog_t *cat, const char *name);
/* Whether id is listed (ids are sorted; binary search). */
bool catalog_has_id(const catalog_id_t *ids, size_t n, const char *id);

bool catalog_id_valid(const char *id);
bool catalog_name_valid(const char *name);
const char *catalog_status_name(catalog_status_t s); /* ready|loading|unloaded|needs_capacity */

#endif
