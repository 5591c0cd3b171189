/* planner — what this node does for the mesh's models, re-decided on every membership change.
 *
 * Inputs: this node's models (registry), its offered memory, and the live peers' announcements.
 * Decisions (pure modules): plan_policy.c decides, from the peers' typed views and this node's
 * facts, which model a node without --model serves (with alloc.c, once it has joined) and per
 * model the group's plan (election.c) and this node's part in it, and returns actions; this
 * driver gathers the inputs, calls it and executes the actions (I/O only).
 * Actions: a replica loads the model in its own llama-server; a split host starts llama-server
 * with --rpc to one local tunnel port per worker (tunnel_rpc.c), --tensor-split and -ngl (the
 * host keeps the first layers on its CPU); a worker runs ggml-rpc-server -c and first fills its
 * cache from its own copy of the GGUF (rpc_cache.c) for the layers the host's plan gives it; the
 * rpc-server stops when no worker role remains.
 *
 * Protocol (in the PeerAnnouncement's "serving" entries):
 *   {model, member, role (replica|host|worker|idle|waiting), state, http_ready, is_host, split,
 *    plan {id, ngl, workers [{id, first, end, output, weight}]}   (a split host)
 *    plan_ready: ID                                               (a worker: ready for plan ID)}
 * Every member elects the same host (memory, then id); the host alone picks the workers (by its
 * RTT) and announces the plan; the workers follow it and say when they are ready; the host then
 * starts llama-server. A changed group gives a new plan id and a restart; requests that arrive
 * meanwhile wait (bounded, MESH_LLM_PLAN_WAIT_MS, default 30 s). */
#ifndef MESH_PLANNER_H
#define MESH_PLANNER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "election.h"
#include "httpd.h"
#include "listing.h"
#include "mesh.h"
#include "model_list.h"
#include "models.h"
#include "node_dl.h"
#include "plan_policy.h"
#include "promote.h"
#include "route_table.h"
#include "route_decide.h"
#include "speed.h"
#include "supervisor.h"
#include "tunnel_rpc.h"
#include "view.h"

#define PLAN_MAX_MODELS PP_MAX_MODELS
#define PLAN_MAX_WORKERS PP_MAX_WORKERS
#define PLAN_ID_MAX PP_PLAN_ID_MAX

typedef struct rpc_fwd rpc_fwd_t;
typedef struct planner planner_t;

/* A model this node plans for: the policy's state (plan_policy.h) and the driver's resources. */
typedef struct {
    planner_t *pl;
    char name[MODEL_NAME_MAX];
    model_entry_t *e;  /* this node's copy, NULL when it has no file (split worker only) */
    char rule[32];     /* why it serves it: explicit, assigned or an allocation rule */
    bool assigned;     /* an operator's assignment (planner_assign): never demoted or replaced */
    bool was_explicit; /* assigned, and --model before: explicit again when unassigned */
    uint64_t assigned_unix; /* when it was assigned */
    bool dl;                /* rule 4: being downloaded (dl_ref) for the mesh */
    char dl_ref[NODE_DL_REF_MAX];
    pp_state_t st;
    /* host */
    rpc_fwd_t *fwd[PLAN_MAX_WORKERS]; /* local port → each worker's rpc-server */
    rpc_fwd_t *retired[PLAN_MAX_WORKERS * 2];
    size_t n_retired;
    pp_stage_t stages[PLAN_MAX_WORKERS]; /* its workers' observed stage times (stage.h) */
    uint64_t rebalanced_unix_ms; /* when the last rebalance was applied (wall clock), 0 never */
    size_t n_stages;
    /* worker */
    char seeded_plan[PLAN_ID_MAX];
    bool seeding;
    char seeding_plan[PLAN_ID_MAX];
    uint64_t seed_bytes_present, seed_bytes_written;
    uint64_t seed_started_ms; /* uv_now when the seeding started */
} pmodel_t;

typedef struct pwait pwait_t;

struct planner {
    uv_loop_t *loop;
    const config_t *cfg;
    models_t *ms;
    supervisor_t *sv;
    mesh_t *mesh;
    char id[ELECTION_ID_LEN + 1];
    uint64_t vram;
    pmodel_t models[PLAN_MAX_MODELS];
    size_t n;
    bool allocating; /* no --model: the mesh chooses */
    pp_alloc_state_t alloc;
    node_dl_t *dl;                 /* downloads (rule 4 "download and serve"); NULL: none */
    tunnel_rpc_stats_t *rpc_stats; /* the node's RPC tunnel counters (host side); NULL: none */
    char dl_failed[PLAN_MAX_MODELS][MODEL_NAME_MAX]; /* models whose mesh download failed here */
    size_t n_dl_failed;
    sv_child_t *rpc;
    uv_timer_t timer, tick;
    bool timer_open;
    view_node_t last_self; /* this node as last announced (its serving list decides) */
    bool last_self_valid;
    pwait_t *waiting;
    uint64_t wait_ms;
    bool stopping;
    /* demand, promotion, idle unload (planner_demand.c) */
    promo_state_t promo;
    bool standby;        /* demoted: only the promotion rules give it a model again */
    bool alloc_none;     /* the last allocation found nothing for this node */
    bool alloc_settling; /* it waits for the mesh to settle (PP_ALLOC_SETTLE_MS) */
    bool passive;        /* standing by passively (standby.h): no gossip, so no allocation */
    /* The peers for routing (planner_view.c: a peers_t borrowing mesh_peers, refreshed on each
     * use; the holder is freed by planner_peers_changed). */
    void *route_peers;
    /* Called after every re-plan (the standby driver looks whether to stand by passively). */
    void (*on_replanned)(void *data);
    void *hook_data;
    uint64_t serving_since_ms, last_demote_check_ms;
    uint64_t last_wait_replan_ms; /* a model waits for more nodes: its last re-plan */
    uint64_t last_rebalance_ms;   /* a split host's last rebalance tick (plan_policy.h) */
    uint64_t load_sig;            /* the models' load classes last announced (slots.h LOAD) */
    uint64_t load_ann_ms;         /* ... when */
    uint64_t idle_ms, min_serve_ms;
    uint64_t promotions, demotions;
    /* assignments (planner_assign.c): ones whose file is being downloaded (assigned when it
     * arrives), and the --model ones an assignment pushed out (back when none remains) */
    char assign_pending[PLAN_MAX_MODELS][MODEL_NAME_MAX];
    size_t n_assign_pending;
    char displaced[PLAN_MAX_MODELS][MODEL_NAME_MAX];
    size_t n_displaced;
    /* compute speed (speed.h): announced as speed_mflops; the models are not planned while it
     * is being measured (a plan made without it would be re-made a moment later) */
    node_speed_t speed;
    /* the accelerators llama-server lists (offer_detect; NULL or none: CPU and RAM), announced
     * as devices; the composition root sets it before the first announcement */
    const devices_t *devices;
};

/* rpc_stats: the node's RPC tunnel counters (host side); NULL: none */
int planner_init(planner_t *pl, uv_loop_t *loop, const config_t *cfg, models_t *ms,
                 supervisor_t *sv, uint64_t vram, tunnel_rpc_stats_t *rpc_stats);
/* No --model and a mesh joined at run time: the mesh chooses this node's model (allocation). */
void planner_allocate(planner_t *pl);
/* Downloads work: rule 4 may "download and serve" through dl (NULL: none). */
void planner_set_downloads(planner_t *pl, node_dl_t *dl);
/* The mesh is up: start deciding. */
void planner_start(planner_t *pl, mesh_t *mesh);
/* Something changed (peers, local models, children): re-decide soon. */
void planner_kick(planner_t *pl);
/* A model file arrived while the node runs (a --model REF download, or the model the mesh gave
 * it): serve it like a --model file, or (given by the mesh) now with its file. */
void planner_add_model(planner_t *pl, model_entry_t *e);
/* A download ended without a file (ref, the model it was for): a model the mesh gave this node
 * (rule 4) is given up and not chosen again from the mesh's sources. */
void planner_download_failed(planner_t *pl, const char *ref);
/* A peer announces it is downloading model: its id (who) and progress. */
bool planner_downloading(planner_t *pl, const char *model, char *who, size_t len, uint64_t *bytes,
                         uint64_t *total);
void planner_stop(planner_t *pl);

/* For the announcement: available_models, serving, role. */
void planner_fill_announcement(planner_t *pl, json_t *ann);

typedef enum { PLAN_SERVE = 0, PLAN_REMOTE, PLAN_WAIT } plan_route_t;
/* How a request for a model this node has locally is handled. */
plan_route_t planner_route(planner_t *pl, const char *model);
/* What each live peer says about `model`, for route_decide (ids borrowed from the peers'
 * announcements: valid until the loop runs again; their servers' slots as announced, nothing in
 * flight). Returns the number of facts written. */
size_t planner_route_facts(planner_t *pl, const char *model, rd_host_t *out, size_t max);
/* This node asked for `model` (--model NAME without a file). */
bool planner_requested(const planner_t *pl, const char *model);
/* Whether `peer_id` may use this node's rpc-server for `model`: it is the host of that model's
 * split plan and this node one of its workers. */
bool planner_rpc_allowed(planner_t *pl, const char *peer_id, const char *model);
/* Park a request until the local plan is ready (bounded); answers it either way. */
void planner_park(planner_t *pl, const char *model, httpd_req_t *req);

/* The mesh's peers changed (an announcement, a join, a death; planner_kick calls it): routing
 * decodes them anew. */
void planner_peers_changed(planner_t *pl);

/* Standby (planner.c, planner_demand.c; the driver is standby.h). wants_passive: promo_go_passive
 * over this node's plan and its peers. promote_from_table: the promotion rules over a passive
 * standby's routing table (t NULL: no active node answered); true when it took a model (it then
 * plans for it like an allocated one). */
bool planner_wants_passive(planner_t *pl);
bool planner_promote_from_table(planner_t *pl, const rt_table_t *t);

/* Assignments (planner_assign.c, decisions: core/assign.h) — made by this node's operator
 * through its own management API (POST /api/assign, /api/unassign; mesh-llm assign), never by a
 * peer. planner_assign: model (a file on this node's disk) becomes this node's to serve; what
 * must go is unloaded (the model the mesh gave it; --model ones whose slot or memory it needs).
 * Returns an HTTP status (200 assigned or already, 404 not on disk, 409 refused) and says in
 * msg what happened. planner_assign_pending: its file is being downloaded: assigned when it
 * arrives (planner_add_model). planner_unassign: back to the mesh's rules (200, 404 not
 * assigned). planner_assignments: [{model, state, role, since, pending}]. */
int planner_assign(planner_t *pl, const char *model, char *msg, size_t len);
int planner_assign_pending(planner_t *pl, const char *model, char *msg, size_t len);
int planner_unassign(planner_t *pl, const char *model, char *msg, size_t len);
json_t *planner_assignments(planner_t *pl);

/* A peer's speed as this node decoded (and clamped) it from the announcement (0: none said). */
typedef struct {
    catalog_id_t id;
    uint64_t mflops;
} planner_speed_t;
/* The planner's parts of the status document, each a new value the caller owns (NULL: absent);
 * app/status_doc.c places them: node.{memory, role, assignment, demand, speed}, "assignments",
 * "catalog" (the
 * mesh's models, status, node ids; NULL when the catalog could not be built), "plan",
 * "rpc_tunnel", and each peer's speed_mflops (speeds, n_speeds; free()). */
typedef struct {
    json_t *memory, *role, *assignment, *demand, *speed;
    json_t *assignments; /* planner_assignments: the top-level "assignments" */
    json_t *catalog, *plan, *rpc_tunnel;
    planner_speed_t *speeds;
    size_t n_speeds;
} planner_status_t;
void planner_status(planner_t *pl, planner_status_t *out);
/* The mesh as a public listing shows it: node count, memory offered and free, the catalog's
 * models with their status (the caller fills name, id, region, token, version). */
void planner_listing(planner_t *pl, mesh_listing_t *l);
/* /v1/models: the mesh catalog's rows, merged by id into list (each listed model's status from
 * the catalog), the mesh's other models appended (see model_list.h). */
void planner_list_models(planner_t *pl, model_list_t *list);
/* The same rows as route tables carry them: a model downloaded somewhere keeps its catalog
 * status (or waiting; see ml_status_catalog), not downloading. */
void planner_list_catalog(planner_t *pl, model_list_t *list);

#endif
