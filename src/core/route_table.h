/* route_table — the ROUTE_REQUEST (0x05) exchange of passive nodes (seed 002), pure: typed
 * encode/decode of both frames, bounded and validated, and the passive node's choices (which
 * active node to check in with, which host serves a request). No I/O, no clock.
 *
 * A passive node (`--client`, or a standby GPU) does not gossip. Every refresh period
 * (MESH_LLM_ROUTE_REFRESH_MS, default 30 s) it opens a ROUTE_REQUEST stream on an admitted QUIC
 * connection to one active node and sends one frame; the active node answers with one frame and
 * FIN:
 *
 *   request  {"v":1,"type":"route_request","id":ID,"role":"client"|"standby",
 *             "vram_bytes":N,"models":[NAME…],         (models: a standby's files on disk)
 *             "silent":[ID…]}   (optional: nodes whose connection with the passive node went
 *                                silent while it waited on them; a hint: the active node
 *                                probes them itself, so a dead host is agreed mesh-wide)
 *   answer   {"v":1,"type":"route_table","mesh_id":M,"refresh_ms":N,
 *             "nodes":[{"id":ID,"addrs":["host:port"…],"vram_bytes":N}…],   (active nodes)
 *             "models":[{"name":NAME,"status":"ready"|"loading"|"unloaded"|"needs_capacity",
 *                        "type":"llm"|"embedding"|"reranking","requested":true,
 *                        "short_bytes":N,                        (optional, additive)
 *                        "hosts":[{"id":ID,"load":N,"slots":N,"vision":true,
 *                                  "private":true}…]}…]}
 *
 * `nodes` are the active nodes to check in with (and to dial: hosts are listed there too);
 * `models` is the mesh catalog with each model's status; a model's `hosts` are the nodes whose
 * llama-server for it answers, with their load (requests per minute they announce) and their
 * server's parallel slots (optional), and `vision` (optional, additive: true when the host
 * serves the model with a vision projector, --mmproj; absent = false: a passive node sends
 * images to the marked hosts), and `private` (optional, additive: true when the host runs the
 * model as a private split, its plan's "private"; absent = false: a passive node applies THE
 * PRIVATE RULE of route_decide.h to it). `short_bytes` (optional, a model that needs capacity): the
 * memory its split group lacks (need − the memory of the nodes serving or waiting for it) — a
 * standby that has it free is promoted into the group.
 *
 * Validation (never trust the sender): the request's id must be the authenticated peer's
 * (-EPERM); ids are 64 lowercase hex, names catalog_name_valid, addresses 1..RT_ADDR_MAX-1
 * printable bytes, integers non-negative; lists are cut at their caps; an invalid or duplicate
 * entry, a host that is not in `nodes`, and a field of the wrong type are skipped and counted in
 * `rejected`. A frame that is not an object, has the wrong "type", or lacks the id/role
 * (request) or mesh_id (table) is -EINVAL.
 *
 * Choices:
 *  - host: among a model's hosts in id order, the one at hash(sticky key) when the request has
 *    one ("user", else "session_id": a conversation stays on one host), else
 *    hash(self id + model) % hosts; the others follow in ring order (retry candidates);
 *  - check-in: the active nodes by rendezvous hashing of (self id, node id): spread evenly over
 *    the active nodes, and only the passive nodes of a node that is gone move. */
#ifndef MESH_ROUTE_TABLE_H
#define MESH_ROUTE_TABLE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "mm.h"
#include "model_list.h"
#include "view.h"

#define RT_MAX_NODES 128     /* active nodes in a table */
#define RT_MAX_MODELS 128    /* catalog entries in a table */
#define RT_MAX_HOSTS 32      /* hosts per model */
#define RT_MAX_ADDRS 4       /* addresses per node */
#define RT_ADDR_MAX 64       /* bytes including the NUL (TOKEN_ADDR_MAX) */
#define RT_MAX_REQ_MODELS 64 /* a standby's models on disk */
#define RT_MAX_SILENT 8      /* "silent" hints per request */
#define RT_MESH_ID_MAX 65    /* bytes including the NUL */
#define RT_REFRESH_MS 30000  /* MESH_LLM_ROUTE_REFRESH_MS default */
#define RT_MAX_SLOTS 4096    /* a host's parallel slots */
#define RT_DEFAULT_SLOTS 4   /* a host that does not say (llama-server's -np auto) */

typedef enum { RT_ROLE_CLIENT = 0, RT_ROLE_STANDBY } rt_role_t;

typedef struct {
    char id[CATALOG_ID_LEN + 1];
    rt_role_t role;
    uint64_t vram_bytes;
    char models[RT_MAX_REQ_MODELS][CATALOG_NAME_MAX];
    size_t n_models;
    char silent[RT_MAX_SILENT][CATALOG_ID_LEN + 1];
    size_t n_silent;
    size_t rejected;
} rt_request_t;

typedef struct {
    char id[CATALOG_ID_LEN + 1];
    char addrs[RT_MAX_ADDRS][RT_ADDR_MAX];
    size_t n_addrs;
    uint64_t vram_bytes;
} rt_node_t;

typedef struct {
    uint16_t node;  /* index into rt_table_t.nodes */
    uint16_t slots; /* its server's parallel slots (0 unknown: RT_DEFAULT_SLOTS) */
    uint32_t load;  /* requests per minute it announces (0 unknown) */
    bool vision;    /* serves the model with a vision projector */
    bool priv;      /* runs it as a private split (route_decide.h: the private rule) */
} rt_host_t;

typedef struct {
    char name[CATALOG_NAME_MAX];
    catalog_status_t status;
    mm_type_t type;
    bool has_type;
    bool requested;       /* some node asks for it (a standby's promotion reads it) */
    uint64_t short_bytes; /* needs_capacity: the memory its group lacks (0: not said) */
    rt_host_t hosts[RT_MAX_HOSTS];
    size_t n_hosts;
} rt_model_t;

typedef struct {
    char mesh_id[RT_MESH_ID_MAX];
    uint64_t refresh_ms; /* the active node's refresh period (0: not said) */
    rt_node_t nodes[RT_MAX_NODES];
    size_t n_nodes;
    rt_model_t models[RT_MAX_MODELS];
    size_t n_models;
    size_t rejected;
} rt_table_t;

const char *rt_role_name(rt_role_t r);
/* "ready" | "loading" | "unloaded" | "needs_capacity" → status; false for another word. */
bool rt_status_of(const char *s, catalog_status_t *out);
bool rt_type_of(const char *s, mm_type_t *out);

/* Frames. encode: a new object (NULL on no memory). decode: 0, -EINVAL (see above), -EPERM
 * (request id is not peer_id); out is fully written either way. */
json_t *rt_request_encode(const rt_request_t *rq);
int rt_request_decode(const json_t *f, const char *peer_id, rt_request_t *out);
json_t *rt_table_encode(const rt_table_t *t);
int rt_table_decode(const json_t *f, rt_table_t *out);

/* Building a table (the active node's side, tests). add_node: the node's index (an existing
 * one for a known id), -1 invalid id or full. add_model: NULL invalid name, duplicate or full.
 * add_host: false when the node index is invalid, already a host, or the model is full. */
void rt_table_init(rt_table_t *t, const char *mesh_id);
int rt_table_add_node(rt_table_t *t, const char *id, uint64_t vram_bytes);
bool rt_node_add_addr(rt_node_t *n, const char *addr);
rt_model_t *rt_table_add_model(rt_table_t *t, const char *name, catalog_status_t st);
bool rt_model_add_host(rt_model_t *m, size_t node, uint32_t load);
/* The slots of host `node` of m (after add_host); false when it is not a host or out of range. */
bool rt_model_set_slots(rt_model_t *m, size_t node, uint32_t slots);
/* Host `node` of m (after add_host) serves it with a vision projector; false when not a host. */
bool rt_model_set_vision(rt_model_t *m, size_t node, bool vision);
/* Host `node` of m runs it as a private split (its plan's "private"); false when not a host. */
bool rt_model_set_private(rt_model_t *m, size_t node, bool priv);
/* The models of an active node's listing (planner_list_catalog's rows) into t, whose nodes are
 * added: each row whose status a table carries (ml_status_catalog) becomes a model (type,
 * requested, short_bytes), hosted by every node k whose view (views[k], t->n_nodes of them)
 * serves it with its HTTP server ready, with load(data, k, name), the view's slots and its
 * available_models[].vision and its plan's private flag. Rows
 * rt_table_add_model refuses are skipped. */
typedef uint32_t (*rt_load_fn)(void *data, size_t node, const char *model);
void rt_table_from_list(rt_table_t *t, const model_list_t *l, const view_node_t *const *views,
                        rt_load_fn load, void *data);
int rt_table_find_node(const rt_table_t *t, const char *id);
const rt_model_t *rt_table_find_model(const rt_table_t *t, const char *name);

/* A host's slots (RT_DEFAULT_SLOTS when the table does not say). */
uint32_t rt_host_slots(const rt_model_t *m, size_t node);

/* Active nodes to check in with, best first (node indexes); at most max. */
size_t rt_checkin_order(const rt_table_t *t, const char *self_id, size_t *order, size_t max);
/* Rendezvous score of node for self (the check-in order sorts by it, descending). */
uint64_t rt_score(const char *self_id, const char *node_id);

#endif
