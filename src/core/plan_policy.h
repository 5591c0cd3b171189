/* plan_policy — what this node does for the mesh's models (pure: no libuv, no I/O, time passed
 * in). The planner (planner.c) gathers the inputs on every membership change, calls the policy
 * and executes the actions it returns; the policy keeps its per-model state (pp_state_t) in the
 * caller's memory between calls.
 *
 * Inputs: the live peers' typed views (view.h) with this node's RTT to each, this node's id and
 * --split flag, the wall clock (plan ids), whether its rpc-server runs, and per model it plans:
 * whether it has the file, size / need / layers, the memory it offers the model's group
 * (ledger_offer_for), whether its llama-server is loaded / ready, whether an old plan's tunnels
 * are still open, and the worker's seeding progress.
 *
 * Per model (pp_decide), in this order — the decisions planner.c made before, unchanged:
 *  - the group = this node + every peer announcing itself a member; size and need are the
 *    largest any node announces; election.c elects. No size or an election error: EMPTY, idle
 *    and waiting (STOP_HOST, STOP_MODEL). IMPOSSIBLE: idle and waiting.
 *  - the ledger follows the plan: SET_LEDGER MODEL (a split host's bytes in the plan — its
 *    layers' part plus its host bytes: draft, projector, input layer, with --split-private the
 *    output layer — else 0) and WORKER (a worker's bytes: its layers' part only; 0 =
 *    cleared), each only when it changes. Every node's host bytes come from its announcement
 *    (view_avail_t.host_bytes), this node's from pp_model_t;
 *  - any role but host: STOP_HOST when a host plan or its --rpc arguments remain;
 *  - host: lay the split out (election_cpu_layout; with --split-private pp_private_layout:
 *    no worker holds the output layer); impossible (no file, unknown layers, too
 *    many workers): waiting, STOP_HOST, STOP_MODEL. A new layout signature → a new plan id
 *    ("<id8>-<now hex>-<seq>") and NEW_PLAN (retire the old tunnels). Launched: CLOSE_RETIRED
 *    once llama-server is ready on the new plan. Otherwise START_HOST once every worker
 *    announces plan_ready for the plan id (the driver reports a failed start with
 *    pp_host_failed);
 *  - worker: follow the host's announced plan; not named in it (or a bad range): idle.
 *    Named: START_RPC_SERVER when it does not run, START_WORKER (seed the cache for the plan's
 *    range) unless seeding or seeded for that plan;
 *  - replica: START_REPLICA when it should load (first time, or after it was taken down);
 *  - idle, worker, waiting: STOP_MODEL when its llama-server runs.
 *  - rebalancing (host of a launched, ready split whose membership and memory give the running
 *    layout): every rebalance tick the layout is proposed again with each worker's observed
 *    speed (stage_speed over pp_model_t.stages: the calibrated speed scaled by how its
 *    per-layer stage time grew since its baseline); the candidate's and the running layout's
 *    predicted cost per token (layer_split_cost over those speeds and the layouts' slots) go to
 *    rb_tick, and when it says APPLY the speeds are kept in pp_state_t.applied (the election
 *    uses them for those workers from then on, so the layout stays) and the candidate is the
 *    plan: a new layout signature, NEW_PLAN, the usual cut-over. A layout that changes for any
 *    other reason (membership, memory) resets the counter (rb_reset) and forgets the applied
 *    speeds when the worker set changes;
 * After every model: STOP_RPC_SERVER when the rpc-server runs, no model is a worker and no
 * peer's announced plan names this node (a host still running an old plan keeps it).
 *
 * Allocation (pp_allocate, a node without --model): once it has peers for ALLOC_SETTLE_MS, the
 * first call chooses with alloc.c from its files on disk and, when it can download, the models
 * some peer announces a model_source for (rule 4 "download and serve": DOWNLOAD with that ref;
 * models a peer is downloading already are left to it); when no rule applies, it may still
 * join a split group without the file (cant_run_without_me: the weights come through the
 * tunnel). */
#ifndef MESH_PLAN_POLICY_H
#define MESH_PLAN_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "catalog.h"
#include "election.h"
#include "ledger.h"
#include "rebalance.h"
#include "stage.h"
#include "view.h"

#define PP_MAX_MODELS 16
#define PP_MAX_WORKERS 16
#define PP_RTT_MATRIX_MAX 128 /* larger groups: no RTT matrix (election.h), host RTTs only */
#define PP_PLAN_ID_MAX VIEW_PLAN_ID_MAX
#define PP_SIG_MAX 1024
#define PP_ALLOC_SETTLE_MS 1500
#define PP_MAX_ACTIONS (PP_MAX_MODELS * 8 + 2)
#define PP_MAX_DEVICES 8 /* a host's own devices in --tensor-split */

typedef struct {
    char id[ELECTION_ID_LEN + 1];
    election_range_t range;
} pp_worker_t;

/* A split worker's observed stage time (stage.h), kept by the host's driver per worker id. */
typedef struct {
    char id[ELECTION_ID_LEN + 1];
    stage_ema_t ema;
} pp_stage_t;

/* A speed the running layout was made with (a rebalance applied it): used for that member
 * instead of its announced one until membership changes. */
typedef struct {
    char id[ELECTION_ID_LEN + 1];
    uint32_t mflops;
} pp_speed_t;

/* What the policy remembers per model (zero-initialise it). */
typedef struct {
    bool planned; /* the plan ran at least once */
    election_mode_t mode;
    election_role_t role;
    bool waiting; /* impossible: not enough memory in the group yet */
    char host[ELECTION_ID_LEN + 1];
    uint64_t need_bytes, total_bytes; /* the last election's (for the waiting message) */
    size_t n_members;
    bool load_when_replica; /* load it when it becomes a replica */
    /* host */
    char plan_sig[PP_SIG_MAX];
    char plan_id[PP_PLAN_ID_MAX];
    unsigned plan_seq;
    uint32_t ngl;
    bool split_private; /* --split-private: the output layer stays here (PP_PRIVATE_OT) */
    uint32_t host_first, host_end;         /* this node holds layers [host_first, host_end) */
    uint32_t host_weights[PP_MAX_DEVICES]; /* its slots per own device (device layout) */
    size_t n_host_weights;                 /* 0: a CPU host (election_cpu_layout) */
    pp_worker_t workers[PP_MAX_WORKERS];
    size_t n_workers;
    bool launched;    /* llama-server started with the current plan */
    bool speed_aware; /* the plan's layer counts follow the members' speeds (election.h) */
    /* rebalancing while membership is stable (rebalance.h, "Rebalancing" below) */
    rb_state_t rb;
    pp_speed_t applied[PP_MAX_WORKERS];
    size_t n_applied;
    double cost_now, cost_cand; /* the last tick's predicted cost of the layout and candidate */
    char cand_sig[PP_SIG_MAX];  /* the last tick's candidate ("" none) */
    bool rebalanced;            /* this decision applied a rebalance (for the driver's log) */
    /* worker */
    char follow_plan[PP_PLAN_ID_MAX]; /* the host's plan that includes this node */
    election_range_t my_range;
    /* ledger as last set */
    uint64_t held_model, held_worker;
    bool worker_held;
} pp_state_t;

typedef struct {
    const char *name;
    bool has_file;
    uint64_t size_bytes, need_bytes; /* this node's file (0 without one) */
    uint64_t host_bytes;             /* held only as its split host (election.h "Host bytes") */
    uint32_t n_layers;
    uint64_t offer_bytes;     /* what it offers this model's group */
    bool loaded;              /* its llama-server is not unloaded */
    bool ready;               /* its llama-server is ready, not draining for a restart */
    bool mesh_args;           /* it has --rpc arguments */
    bool retired_tunnels;     /* an old plan's tunnels are still open */
    bool seeding;             /* a cache seed runs */
    const char *seeded_plan;  /* the plan the cache was last seeded for ("" none) */
    const pp_stage_t *stages; /* host: its workers' observed stage times (NULL: none) */
    size_t n_stages;
} pp_model_t;

typedef struct {
    const char *id; /* this node */
    bool force_split;
    bool split_private; /* --split-private: a split this node hosts keeps its output layer */
    uint64_t now_s;     /* wall clock, seconds (plan ids) */
    const view_node_t *peers;
    const int32_t *rtt_ms; /* per peer: this node's RTT to it (rtt_round), < 0 unknown; NULL:
                            * all unknown. With the peers' announced rtt_ms it makes the
                            * group's RTT matrix (election.h "RTT matrix") */
    size_t n_peers;
    bool rpc_running;      /* this node's rpc-server child exists and is not stopped */
    uint32_t speed_mflops; /* this node's calibrated compute speed, 0 unknown (election.h) */
    bool speed_pending;    /* its calibration still runs: a split waits for it (a replica does
                            * not: solo decisions do not depend on speed) */
    uint64_t now_ms;       /* monotonic clock, ms (rebalance ticks) */
    rb_opts_t rebalance;   /* MESH_LLM_REBALANCE_* (zero: the defaults) */
    /* this node's own devices (issue 28; none: a CPU host): a split it hosts then offloads
     * every layer, its own on them (election_device_layout) */
    uint64_t device_bytes[PP_MAX_DEVICES];
    size_t n_devices;
} pp_input_t;

typedef enum {
    PP_STOP_HOST = 0,    /* close the plan's tunnels, drop the --rpc arguments */
    PP_STOP_MODEL,       /* unload the model's llama-server */
    PP_SET_LEDGER,       /* kind, bytes (MODEL: the host share; WORKER: 0 clears) */
    PP_NEW_PLAN,         /* a new host plan (plan_id): retire the old plan's tunnels */
    PP_START_HOST,       /* tunnels to the plan's workers, llama-server with --rpc (re)started */
    PP_CLOSE_RETIRED,    /* the new plan runs: close the old plan's tunnels */
    PP_START_REPLICA,    /* load the model */
    PP_START_RPC_SERVER, /* (re)start this node's rpc-server */
    PP_START_WORKER,     /* seed the rpc cache for plan_id's range (host) */
    PP_STOP_RPC_SERVER,  /* no worker role remains */
} pp_action_kind_t;

typedef struct {
    pp_action_kind_t kind;
    size_t model; /* index into the models passed in */
    ledger_kind_t ledger;
    uint64_t bytes;
} pp_action_t;

typedef struct {
    pp_action_t a[PP_MAX_ACTIONS];
    size_t n;
} pp_actions_t;

/* Decide for model index mi (its facts m, its state st). Appends to out. */
void pp_decide_model(const pp_input_t *in, const pp_model_t *m, pp_state_t *st, size_t mi,
                     pp_actions_t *out);
/* After every model: whether the rpc-server should stop (STOP_RPC_SERVER appended). */
void pp_decide_rpc(const pp_input_t *in, const pp_state_t *st, size_t n, pp_actions_t *out);
/* Both, for every model (st[i] is models[i]'s state). Appends to out (set out->n = 0 first). */
void pp_decide(const pp_input_t *in, const pp_model_t *models, pp_state_t *st, size_t n,
               pp_actions_t *out);
/* The driver could not start the host's llama-server: retry when next decided. */
void pp_host_failed(pp_state_t *st);
/* The args START_HOST passes (besides --rpc): "--tensor-split W,… -ngl N --fit off", and with
 * --split-private "-ot PP_PRIVATE_OT". */
int pp_host_args(const pp_state_t *st, char *buf, size_t len);

/* --split-private (seed 004 "boomerang"): the host keeps the input layer (token_embd: llama.cpp
 * runs the embedding lookup on the CPU anyway) and the output layer (output, output_norm, and
 * token_embd again when the output is tied to it), so its workers compute on hidden states
 * only: they never receive token ids nor produce logits. llama.cpp offloads the output layer
 * first (-ngl counts it as the last slot, on the last device of --tensor-split), so the layout
 * keeps -ngl and the weights and overrides the buffer of every tensor that is not in a
 * repeating layer (blk.N., enc.blk.N., dec.blk.N.) nor a per-layer rope table to the CPU.
 * The pattern goes through argv_split (no spaces, quotes or backslashes) and llama.cpp's -ot
 * parser (no ',' or '='); llama.cpp matches it with std::regex_search (ECMAScript). */
#define PP_PRIVATE_OT "^(?!(blk|enc[.]blk|dec[.]blk)[.][0-9]|rope_)=CPU"
/* The private layout's worker ranges: none holds the output layer (weights unchanged). */
void pp_private_layout(election_range_t *workers, size_t n_workers);
const char *pp_action_name(pp_action_kind_t k);

/* Catalog inputs from views (strings borrowed from them); self may be NULL. */
typedef struct {
    catalog_node_t *nodes;
    catalog_avail_t *av;
    catalog_serving_t *sv;
    const char **rq;
    uint64_t *rq_size; /* requested models' sizes from their model_source (0 unknown) */
    size_t n;
} pp_cnodes_t;
int pp_cnodes_build(const view_node_t *v, size_t n, const view_node_t *self, pp_cnodes_t *c);
void pp_cnodes_free(pp_cnodes_t *c);

/* Allocation. */
typedef struct {
    uint64_t first_peer_ms; /* when a peer was first seen */
    char rule[32];          /* last choice's rule ("" before the first) */
} pp_alloc_state_t;

typedef struct {
    const char *id;
    uint64_t free_bytes; /* the ledger's free memory */
    const catalog_avail_t *disk;
    size_t n_disk;
    const char *const *requested; /* --model NAME without a file */
    size_t n_requested;
    const view_node_t *peers;
    size_t n_peers;
    bool can_download; /* this node has a downloader (rule 4) */
    bool follow_urls;  /* download a URL a peer announces as a model's source (else the hub's and
                          the catalog's references only: MESH_LLM_DL_FOLLOW_URLS=1) */
    const char *const *failed; /* models whose download failed here: not downloaded again */
    size_t n_failed;
} pp_alloc_input_t;

/* Whether a model source a peer announces is downloaded here (rule 4): a catalog name or a
 * reference to the hub (hf://ORG/REPO/FILE, ORG/REPO:QUANT) always, any other URL only when this
 * node's own configuration allows it (follow_urls): a member must not make others fetch from an
 * address of its choosing. */
bool pp_source_followed(const char *ref, bool follow_urls);

typedef enum {
    PP_ALLOC_LATER = 0, /* not now (settling, error) */
    PP_ALLOC_NONE,      /* standby: nothing needs this node */
    PP_ALLOC_MISSING,   /* the mesh wants a model this node does not have */
    PP_ALLOC_TAKE,      /* serve `model` */
    PP_ALLOC_DOWNLOAD,  /* download `model` from `ref`, then serve it */
} pp_alloc_kind_t;

typedef struct {
    pp_alloc_kind_t kind;
    bool changed; /* the rule differs from the last choice's */
    char model[CATALOG_NAME_MAX];
    const char *rule;
    bool has_file;
    char ref[VIEW_REF_MAX]; /* DOWNLOAD: the model_source a peer announces */
    uint64_t size_bytes;    /* the catalog's size (0 unknown) */
} pp_alloc_result_t;

void pp_allocate(const pp_alloc_input_t *in, pp_alloc_state_t *st, uint64_t now_ms,
                 pp_alloc_result_t *out);

#endif
