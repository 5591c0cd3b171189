/* planner — what this node does for the mesh's models, re-decided on every membership change.
 *
 * Inputs: this node's models (registry), its offered memory, and the live peers' announcements.
 * Decisions (pure modules): the catalog (catalog.c), which model a node without --model serves
 * (alloc.c, once it has joined), and per model it serves, the group's plan (election.c).
 * Actions: a replica loads the model in its own llama-server; a split host starts llama-server
 * with --rpc to one local tunnel port per worker (tunnel_rpc.c), --tensor-split and -ngl (the
 * host keeps the first layers on its CPU); a worker runs ggml-rpc-server -c and first fills its
 * cache from its own copy of the GGUF (rpc_cache.c) for the layers the host's plan gives it.
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
#include "mesh.h"
#include "models.h"
#include "router.h"
#include "supervisor.h"
#include "view.h"

#define PLAN_MAX_MODELS 16
#define PLAN_MAX_WORKERS 16
#define PLAN_ID_MAX 48

typedef struct rpc_fwd rpc_fwd_t;
typedef struct planner planner_t;

typedef struct {
    char id[ELECTION_ID_LEN + 1];
    election_range_t range;
    rpc_fwd_t *fwd; /* host side: local port → this worker's rpc-server */
} plan_worker_t;

typedef struct {
    planner_t *pl;
    char name[MODEL_NAME_MAX];
    model_entry_t *e;       /* this node's copy, NULL when it has no file (split worker only) */
    char rule[32];          /* why it serves it: explicit or an allocation rule */
    bool load_when_replica; /* load it when it becomes a replica (allocated, or taken down) */
    bool planned;           /* the plan ran at least once */
    election_mode_t mode;
    election_role_t role;
    bool waiting; /* impossible: not enough memory in the group yet */
    char host[ELECTION_ID_LEN + 1];
    /* host */
    char plan_sig[1024];
    char plan_id[PLAN_ID_MAX];
    unsigned plan_seq;
    uint32_t ngl;
    plan_worker_t workers[PLAN_MAX_WORKERS];
    size_t n_workers;
    bool launched; /* llama-server started with the current plan */
    rpc_fwd_t *retired[PLAN_MAX_WORKERS * 2];
    size_t n_retired;
    /* worker */
    char follow_plan[PLAN_ID_MAX]; /* the host's plan that includes this node */
    election_range_t my_range;
    char seeded_plan[PLAN_ID_MAX];
    bool seeding;
    char seeding_plan[PLAN_ID_MAX];
    uint64_t seed_bytes_present, seed_bytes_written;
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
    bool allocating;        /* no --model: the mesh chooses */
    char alloc_rule[32];    /* last allocation's rule ("" before the first) */
    uint64_t first_peer_ms; /* when a peer was first seen (allocation waits a moment) */
    sv_child_t *rpc;
    uv_timer_t timer, tick;
    bool timer_open;
    view_node_t last_self; /* this node as last announced (its serving list decides) */
    bool last_self_valid;
    pwait_t *waiting;
    uint64_t wait_ms;
    bool stopping;
};

int planner_init(planner_t *pl, uv_loop_t *loop, const config_t *cfg, models_t *ms,
                 supervisor_t *sv, uint64_t vram);
/* The mesh is up: start deciding. */
void planner_start(planner_t *pl, mesh_t *mesh);
/* Something changed (peers, local models, children): re-decide soon. */
void planner_kick(planner_t *pl);
void planner_stop(planner_t *pl);

/* For the announcement: available_models, serving, role. */
void planner_fill_announcement(planner_t *pl, json_t *ann);

typedef enum { PLAN_SERVE = 0, PLAN_REMOTE, PLAN_WAIT } plan_route_t;
/* How a request for a model this node has locally is handled. */
plan_route_t planner_route(planner_t *pl, const char *model);
/* What each live peer says about `model`, for router_route (strings borrowed from the peers'
 * announcements: valid until the loop runs again). Returns the number of facts written. */
size_t planner_route_facts(planner_t *pl, const char *model, router_peer_t *out, size_t max);
/* This node asked for `model` (--model NAME without a file). */
bool planner_requested(const planner_t *pl, const char *model);
/* Whether `peer_id` may use this node's rpc-server for `model`: it is the host of that model's
 * split plan and this node one of its workers. */
bool planner_rpc_allowed(planner_t *pl, const char *peer_id, const char *model);
/* Park a request until the local plan is ready (bounded); answers it either way. */
void planner_park(planner_t *pl, const char *model, httpd_req_t *req);

/* Adds "catalog" (the mesh's models, status, node ids) and "plan" to a status document. */
void planner_status(planner_t *pl, json_t *status);
/* /v1/models: sets each listed model's status from the catalog and appends the mesh's others. */
void planner_list_models(planner_t *pl, json_t *list);

#endif
