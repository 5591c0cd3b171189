/* view — one typed view of a node's model fields, as the mesh sees it (pure: no I/O, no clock).
 *
 * A peer's PeerAnnouncement (DESIGN.md §4, README) is decoded once into a view_node_t; this
 * node's own state is filled into the same type by the planner (planner_view.c) and its
 * announcement's model fields are encoded from it (view_encode), so the planner reads one type
 * for every node and the announcement has one source of truth.
 *
 * Fields (see planner.h for the serving-entry protocol):
 *   role (worker|host|client), vram_bytes, free_bytes (optional),
 *   speed_mflops (optional: the node's calibrated compute speed, MFLOP/s of an F32
 *   matrix-vector product on its llama.cpp threads — node/speed.h; absent = unknown; a larger
 *   claim than VIEW_SPEED_MAX is clamped to it, a non-integer or negative one is ignored),
 *   available_models [{name, size_bytes, need_bytes, host_bytes, type, vision}] (vision: true
 *   when the node serves the model with a vision projector, --mmproj; absent = false;
 *   host_bytes: what the node would hold only as the model's split host — its draft and
 *   projector, the input layer, with --split-private the output layer; absent = 0),
 *   serving [{model, member, role, state, http_ready, is_host, split, bytes,
 *             plan {id, ngl, private, workers [{id, first, end, output, weight}]},
 *             plan_ready, slots, busy}] (plan.private: true when the host runs the split with
 *   --split-private — its workers see hidden states only; absent = false; slots: its server's
 *   parallel slots; busy: the requests it has in flight or queued for the model, absent = 0),
 *   requested_models [name],
 *   request_rates {model: requests per minute}, last_request {model: unix s} (demand.h; one
 *   list of view_demand_t per node, keyed by model; a serving entry may say pinned: true when
 *   the node serves the model because its operator asked (--model): never unloaded for idleness),
 *   model_source {model: {ref, size_bytes}} (where any node can fetch the model's file: a
 *   catalog name, hf://…, ORG/REPO:QUANT or an https:// URL — model_ref.h; size_bytes 0 or
 *   absent: unknown), downloading [{model, bytes, total}] (downloads in progress on the node;
 *   total 0: unknown), addrs ["host:port"] (where to dial it; at most VIEW_MAX_ADDRS, each
 *   1..VIEW_ADDR_MAX-1 bytes without control characters), nostr_published (boolean),
 *   rtt_ms {"<node id>": ms} (the RTT of the node's QUIC connections, rtt.h: at most
 *   RTT_MAX_ENTRIES kept, ids that are not node ids or the node's own skipped, a value that is
 *   not a non-negative number skipped, a larger one than RTT_MAX_MS clamped, a fraction rounded),
 *   devices [{name, backend, description, total_bytes, free_bytes}] (the accelerators its
 *   llama.cpp build lists, devices.h; at most VIEW_MAX_DEVICES, name and backend
 *   [A-Za-z0-9_-]+ of at most DEVICE_NAME_MAX-1 / DEVICE_BACKEND_MAX-1 bytes, description at
 *   most DEVICE_DESC_MAX-1 bytes without control characters, free <= total; others skipped).
 *
 * Decoding never trusts the sender:
 *  - the node id is the mesh's (authenticated) id, 64 lowercase hex; the announcement is an
 *    object; otherwise -EINVAL and nothing is kept;
 *  - names (models, plan ids) are 1..max-1 bytes without control characters or NUL
 *    (catalog_name_valid); worker ids are node ids (catalog_id_valid);
 *  - integers are non-negative and fit their field; booleans are booleans; words (roles,
 *    states, types) are known words;
 *  - lists keep at most VIEW_MAX_LIST entries, at most VIEW_MAX_PLANS serving entries carry a
 *    plan; a plan with more than VIEW_MAX_PLAN_WORKERS workers is dropped whole (a truncated
 *    plan would misstate who holds which layers);
 *  - a model_source ref is 1..VIEW_REF_MAX-1 bytes and parses as a remote model reference
 *    (never a path on the receiver's disk); a download's bytes never exceed a known total;
 *  - an entry without its name is skipped; a field of the wrong type is treated as absent;
 *    every skipped entry, dropped list element and ignored field counts once in `rejected`. */
#ifndef MESH_VIEW_H
#define MESH_VIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "devices.h"
#include "mm.h"
#include "rtt.h"

#define VIEW_MAX_LIST CATALOG_MAX_NODE_MODELS /* entries per list per node */
#define VIEW_MAX_PLANS 16                     /* serving entries with a plan, per node */
#define VIEW_MAX_PLAN_WORKERS 16
#define VIEW_PLAN_ID_MAX 48      /* bytes including the NUL */
#define VIEW_REF_MAX 512         /* model_source ref, bytes including the NUL */
#define VIEW_SPEED_MAX 100000000 /* speed_mflops clamp (100 TFLOP/s; = LS_SPEED_MAX) */
#define VIEW_MAX_ADDRS 16        /* addrs kept per node */
#define VIEW_ADDR_MAX 64         /* one "host:port", bytes including the NUL (= TOKEN_ADDR_MAX) */
#define VIEW_MAX_DEVICES 8       /* devices kept per node */

typedef enum {
    VIEW_SERVE_NONE = 0, /* absent or unknown */
    VIEW_SERVE_REPLICA,
    VIEW_SERVE_HOST,
    VIEW_SERVE_WORKER,
    VIEW_SERVE_IDLE,
    VIEW_SERVE_WAITING,
} view_serve_role_t;

typedef enum {
    VIEW_STATE_NONE = 0, /* absent or unknown */
    VIEW_STATE_UNLOADED,
    VIEW_STATE_LOADING,
    VIEW_STATE_READY,
    VIEW_STATE_STANDBY,
} view_state_t;

typedef struct {
    char name[CATALOG_NAME_MAX];
    uint64_t size_bytes;
    uint64_t need_bytes; /* 0 unknown */
    uint64_t host_bytes; /* held only as the model's split host (election.h "Host bytes"), 0 */
    mm_type_t type;
    bool has_type; /* type announced */
    bool vision;   /* served with a vision projector: takes images */
} view_avail_t;

typedef struct {
    char id[CATALOG_ID_LEN + 1];
    uint32_t first, end; /* repeating layers [first, end) */
    bool output;         /* and the output layer */
    uint32_t weight;     /* --tensor-split entry */
} view_worker_t;

typedef struct {
    char id[VIEW_PLAN_ID_MAX];
    uint32_t ngl;
    bool private_split; /* "private": true — the host runs it with --split-private (absent =
                         * false; an older host never says it) */
    view_worker_t workers[VIEW_MAX_PLAN_WORKERS];
    size_t n_workers;
} view_plan_t;

typedef struct {
    char model[CATALOG_NAME_MAX];
    uint64_t rate;      /* request_rates: per minute */
    uint64_t last_unix; /* last_request: unix seconds (0 absent) */
} view_demand_t;

#define VIEW_MAX_SLOTS 4096
#define VIEW_MAX_BUSY 65535 /* a serving entry's busy: requests in flight or queued */

typedef struct {
    char model[CATALOG_NAME_MAX];
    char ref[VIEW_REF_MAX]; /* a remote model reference (model_ref.h) */
    uint64_t size_bytes;    /* 0 unknown */
} view_source_t;

typedef struct {
    char model[CATALOG_NAME_MAX];
    uint64_t bytes, total; /* total 0 unknown; bytes <= total when known */
} view_download_t;

typedef struct {
    char model[CATALOG_NAME_MAX];
    bool member; /* in the model's group (false: loaded on demand outside any plan) */
    view_serve_role_t role;
    view_state_t state;
    bool http_ready, is_host, split;
    bool pinned;    /* --model on that node: never unloaded for idleness */
    uint64_t bytes; /* memory the node holds for the model */
    uint32_t slots; /* its server's parallel slots (0 unknown; ≤ 4096) */
    uint32_t busy; /* requests its server has in flight or queued for it (≤ VIEW_MAX_BUSY; load.h:
                      re-announced at most once per LOAD_ANN_MIN_MS, so a few seconds old) */
    const view_plan_t *plan;           /* a split host's plan (in the node's plans), or NULL */
    char plan_ready[VIEW_PLAN_ID_MAX]; /* a worker: ready for this plan id ("" none) */
} view_serving_t;

typedef struct {
    char id[CATALOG_ID_LEN + 1];
    catalog_role_t role;
    uint64_t vram_bytes; /* offered */
    uint64_t free_bytes;
    bool has_free;         /* free_bytes announced */
    uint32_t speed_mflops; /* calibrated compute speed, 0 unknown (clamped to VIEW_SPEED_MAX) */
    view_avail_t *available;
    size_t n_available;
    view_serving_t *serving;
    size_t n_serving;
    char (*requested)[CATALOG_NAME_MAX];
    size_t n_requested;
    view_plan_t *plans; /* storage of the serving entries' plans */
    size_t n_plans;
    view_demand_t *demand; /* request_rates and last_request, merged per model */
    size_t n_demand;
    view_source_t *sources; /* model_source */
    size_t n_sources;
    view_download_t *downloads; /* downloading */
    size_t n_downloads;
    char addrs[VIEW_MAX_ADDRS][VIEW_ADDR_MAX]; /* where to dial the node (the mesh's, not the model
                                                  fields: view_encode writes them only when set) */
    size_t n_addrs;
    bool nostr_published; /* it publishes the mesh's listing on Nostr (nostr_app.h) */
    rtt_entry_t *rtt;     /* rtt_ms: what it measured to its peers, at most RTT_MAX_ENTRIES */
    size_t n_rtt;
    device_t devices[VIEW_MAX_DEVICES]; /* devices: its accelerators (none: CPU and RAM) */
    size_t n_devices;
    size_t rejected; /* skipped entries and ignored fields while decoding */
    size_t cap_av_, cap_sv_, cap_rq_, cap_dm_, cap_src_, cap_dl_;
} view_node_t;

void view_node_init(view_node_t *n);
void view_node_free(view_node_t *n); /* leaves it empty (initialised) */

/* Building a node (the decoder, this node's own state, tests). Each returns NULL for an invalid
 * name, a full list (VIEW_MAX_LIST, VIEW_MAX_PLANS) or no memory; new entries are zeroed. */
view_avail_t *view_add_available(view_node_t *n, const char *name);
view_serving_t *view_add_serving(view_node_t *n, const char *model);
bool view_add_requested(view_node_t *n, const char *name);
/* The demand entry for model (found or added, zeroed when new). */
view_demand_t *view_add_demand(view_node_t *n, const char *model);
/* The source entry for model (found or added, zeroed when new); NULL also for a ref that is not
 * a valid remote model reference (the entry is then not added). */
view_source_t *view_add_source(view_node_t *n, const char *model, const char *ref);
/* A download entry (added, zeroed). */
view_download_t *view_add_download(view_node_t *n, const char *model);
/* Give s (an entry of n) an empty plan with this id (catalog_name_valid, < VIEW_PLAN_ID_MAX). */
view_plan_t *view_add_plan(view_node_t *n, view_serving_t *s, const char *id);

/* Decode a peer's announcement. 0, -EINVAL (not an object, invalid id), -ENOMEM; out is
 * initialised either way (view_node_free it). */
int view_decode(const json_t *ann, const char *id, view_node_t *out);
/* Set the announcement's model fields (role, vram_bytes, free_bytes, speed_mflops (when
 * known), available_models,
 * requested_models, serving, request_rates, last_request, model_source, downloading) from n;
 * model_source / downloading are left out when empty; addrs and nostr_published are written
 * only when n has them (this node's own are the mesh's and nostr_app's), rtt_ms likewise (the
 * mesh's, mesh_self.c). 0, -ENOMEM. */
int view_encode(const view_node_t *n, json_t *ann);

/* devs[0..n) as the announcement's and the status's devices list; NULL when out of memory (or
 * a description that is not UTF-8). */
json_t *view_devices_json(const device_t *devs, size_t n);

/* The first serving entry / available model with this name, or NULL. */
const view_serving_t *view_serving(const view_node_t *n, const char *model);
const view_avail_t *view_available(const view_node_t *n, const char *name);
bool view_requested(const view_node_t *n, const char *name);
const view_demand_t *view_demand(const view_node_t *n, const char *model);
const view_source_t *view_source(const view_node_t *n, const char *model);
const view_download_t *view_download(const view_node_t *n, const char *model);
/* The memory n offers model's group: free + what it holds for the model, capped at vram_bytes;
 * vram_bytes when free_bytes was not announced. */
uint64_t view_offer_for(const view_node_t *n, const char *model);

/* Deep equality of the serving lists (but their `busy`: load alone re-plans nothing) / of
 * everything but `rejected`. */
bool view_serving_equal(const view_node_t *a, const view_node_t *b);
bool view_node_equal(const view_node_t *a, const view_node_t *b);

/* Catalog input for n (alive). av, sv, rq have room for n's lists; strings are borrowed from n. */
void view_to_catalog(const view_node_t *n, catalog_node_t *cn, catalog_avail_t *av,
                     catalog_serving_t *sv, const char **rq);
/* The same, with each requested model's size from its model_source (rq_size has room for
 * n_requested; 0 unknown). */
void view_to_catalog_sized(const view_node_t *n, catalog_node_t *cn, catalog_avail_t *av,
                           catalog_serving_t *sv, const char **rq, uint64_t *rq_size);

const char *view_serve_role_name(view_serve_role_t r); /* NULL for NONE */
const char *view_state_name(view_state_t s);           /* NULL for NONE */

#endif
