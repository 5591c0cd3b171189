/* route_decide — where one inference request goes, for active and passive nodes alike (pure:
 * no I/O, no clock; the caller gathers the facts and carries the verdict out).
 *
 * Input: the typed request (request.h), what the endpoint needs, whether it came through the
 * mesh already (a hop is never forwarded again), this node's own facts about the model (it
 * has it, its type and vision, the planner's gate), and the hosts: for an active node, what
 * each live peer announces about the model; for a passive node, the model's hosts in its route
 * table (route_table.h), each with this node's requests in flight there and whether it just
 * failed. Output: one verdict —
 *  - RD_LOCAL: serve it here; RD_PARK: hold it while the split starting here gets ready;
 *  - RD_FORWARD: relay it, `order` the hosts to try in turn (indexes into hosts);
 *  - RD_WAIT: a passive node with no table yet: decide again when one comes (bounded by the
 *    caller's deadline, then table_expired);
 *  - RD_REFUSE: answer status / type / code / msg (or, `download` set, the download's 503
 *    with its progress, which the caller knows);
 *  - RD_UNKNOWN: no node knows the model: 404 (msg says so; the caller appends the names
 *    available, as GET /v1/models lists them).
 *
 * The order of the decision is today's (app/api_openai.c:handle_inference with
 * app/main.c:route_remote / local_gate / has_host, node/routing.c, core/router.c and
 * node/passive.c:passive_route / step):
 *  1. a model this node has, a request with images and no projector here: another node's copy
 *     with one (not for a hop), else 400 model_not_multimodal;
 *  2. a model this node has, on a passive node whose table lists hosts for it: the table's
 *     hosts (not for a hop);
 *  3. a model this node has: the planner's gate (rd_local_gate) — serve (after the type
 *     check, 400 model_type_mismatch), park, or (its host is elsewhere, or its copy here is not
 *     ready yet and a peer's is: the bootstrap rule) forward by the active rule, else 503 "not
 *     ready yet";
 *  4. a model this node does not have: 404 for a hop; a download of it here: 503
 *     model_downloading; a passive node: its table (no table yet: wait, then 503 no_route; not
 *     in it: unknown; another type: 400; no hosts: 503 with the table's status; tried
 *     min(hosts, RD_MAX_TRIES) hosts: 503 host_unreachable); an active node: the peers (none
 *     knows it: unknown; another type: 400; images and no peer with a projector: 400; no
 *     candidate: a download in the mesh 503 model_downloading, else 503 — requested but no
 *     file anywhere, or loading / unloaded).
 * Candidates of an active node: the peers whose server for the model answers, else those that
 * would take it (a host still starting it, a node with the file); with images, only peers
 * serving it with a vision projector. Of a passive node: every host of its table (a table lists
 * only hosts whose server answers); with images, those the table marks as serving it with a
 * projector (route_table.h's "vision"), or every host when none is marked (an older table, or
 * no projector anywhere: a host without one answers 400 itself). At most RD_MAX_HOSTS
 * candidates, the lowest ids.
 *
 * THE STICKINESS RULE (one, for active and passive nodes; it is passive.c's of today plus
 * prefix affinity):
 *  - candidates are ordered by id (strcmp), so every node sees the same ring;
 *  - a request with a stickiness key (request_t.sticky: a non-empty "user", else a non-empty
 *    "session_id") starts at candidate FNV-1a(key) % n and takes the others in ring order; it
 *    is pinned there: no affinity, no spill (one conversation stays on one host for its KV
 *    cache, from whichever entry node it comes);
 *  - a request without one starts at candidate mix(FNV-1a(self_id "\n" model)) % n (each
 *    entry node has its own home host per model, so entry nodes spread over the hosts), then:
 *    when its prefix key (request_t.prefix) was last sent to a host that is a candidate, that
 *    host goes first (prefix affinity: its prompt cache holds the prefix) unless it has no free
 *    slot while another candidate has one; else, on a first try (spill-over): of the candidates
 *    with a free slot, the one with the fewest of this node's own requests in flight per slot;
 *    with none free, the least load per slot; the home host among equals, so with nothing in
 *    flight always the home host. LOAD: a host's load is the larger of what it announces
 *    (rd_host_t.busy: its requests in flight or queued from every entry node, a second or so
 *    old — slots.h) and this node's own requests in flight there (fresh); it has a free slot
 *    when load < slots. The announced load only says which hosts are free: every entry node
 *    reads the same second-old announcements, and all sending to the one least loaded host
 *    would herd there (bench/route_sim: p99 queue wait 8.1 s against 3.6 s at 70 % load);
 *    among the free ones each entry's own fresh count decides (cross-multiplied);
 *  - LOCAL SPILL: a model this node serves itself (RD_PLAN_SERVE) whose own server has no free
 *    slot (local_full: admission would queue the request) goes, unkeyed, not a hop, on a first
 *    try, to the least loaded peer replica whose server answers if that one has a free slot
 *    (RD_FORWARD, spilled; never a private split's host); otherwise it is served, queued, here;
 *  - hosts that just failed (bad) go last, in ring order; the others keep theirs;
 *  - the caller remembers order[0] for the prefix key (`remember`) and counts an affinity hit
 *    or miss when `affinity` is set.
 * Active nodes (node/route.c) and passive nodes (node/passive.c) follow it since issue 30's
 * S20; the prefix memory and its counters are the node's relay_ctx_t's (relay.h:
 * relay_affinity_input / relay_affinity_note), whichever path decides. What changed with it:
 * active nodes no longer pin on "user": "" (which shadowed session_id and sent every such
 * request to FNV-1a("")) nor on messages[0], and spread unkeyed requests by home host and
 * spill-over instead of round robin, with prefix affinity for unkeyed requests only; passive
 * nodes gained prefix affinity, pin "user": "" + session_id by the session_id and hash keys
 * over 255 bytes whole. */
#ifndef MESH_ROUTE_DECIDE_H
#define MESH_ROUTE_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"
#include "route_table.h"

#define RD_MAX_HOSTS 32 /* candidates ordered (RT_MAX_HOSTS: a table's hosts per model) */
#define RD_MAX_TRIES 3  /* hosts a request tries before 503 host_unreachable (PV_MAX_TRIES) */
#define RD_MSG_MAX 320

/* the planner's gate for a model this node has (node/planner.h's plan_route_t values) */
enum { RD_PLAN_SERVE = 0, RD_PLAN_REMOTE = 1, RD_PLAN_WAIT = 2 };

typedef enum { RD_DL_NONE = 0, RD_DL_HERE, RD_DL_MESH } rd_download_t;

typedef struct {
    const char *id;
    bool ready;        /* its server for the model answers (active: http_ready) */
    bool starting;     /* runs the model's server (solo or split host), not ready yet */
    bool member;       /* serves it in another role (split worker, waiting) */
    bool has_file;     /* has the GGUF on disk: would load it on request */
    bool requested;    /* asks for the model */
    bool vision;       /* serves it with a vision projector */
    int type;          /* mm_type_t of its file, -1 unknown (read with has_file only) */
    uint32_t slots;    /* its server's parallel slots, 0 unknown (RT_DEFAULT_SLOTS) */
    uint32_t inflight; /* this node's requests in flight there */
    uint32_t busy;     /* its requests in flight or queued, from every entry (announced) */
    bool bad;          /* failed just now: tried last */
    bool priv;         /* runs it as a private split (its plan's "private": the private rule) */
} rd_host_t;

typedef enum {
    RD_LOCAL = 0,
    RD_PARK,
    RD_FORWARD,
    RD_WAIT,
    RD_REFUSE,
    RD_UNKNOWN,
} rd_verdict_t;

typedef struct {
    const request_t *rq; /* NULL: no body facts (no images, no keys) */
    const char *path;    /* the endpoint, for the texts */
    const char *model;
    int needs; /* mm_type_t the endpoint needs, -1 any */
    bool hop;  /* came through the mesh: never forwarded again */
    const char *self_id;
    /* this node's own facts */
    bool local;     /* it has the model */
    int local_type; /* its mm_type_t */
    bool local_vision;
    int local_plan;  /* RD_PLAN_* (planner_route) */
    bool local_full; /* its own server for the model has no free slot (the local spill) */
    bool self_requested;
    bool offline; /* no mesh (before it starts, once it stops): peers unknown */
    bool dl_here; /* a download of the model runs here (node_dl_find) */
    bool dl_mesh; /* a peer announces a download of it (planner_downloading) */
    /* a passive node: the route table is the source of hosts */
    bool passive;
    bool have_table;
    bool table_expired; /* no table came within the request's wait */
    bool in_table;
    int table_status; /* catalog_status_t of the model in the table */
    int table_type;   /* mm_type_t the table says, -1 unknown */
    unsigned tries;   /* hosts tried already for this request */
    /* the hosts (peers that know the model, or the table's hosts of it) */
    const rd_host_t *hosts;
    size_t n_hosts;
    const char *affinity_host; /* where rq->prefix went last (affinity_get), NULL */
    bool no_affinity;          /* MESH_LLM_PREFIX_AFFINITY=0 */
    bool allow_host;           /* RD_ALLOW_HOST_HEADER: RD_ALLOW_HOST (the private rule) */
} rd_input_t;

typedef struct {
    rd_verdict_t verdict;
    int status;              /* RD_REFUSE (400, 503), RD_UNKNOWN (404) */
    const char *type, *code; /* of the error answer */
    char msg[RD_MSG_MAX];
    rd_download_t download;     /* RD_REFUSE: answer with this download's progress (503) */
    size_t order[RD_MAX_HOSTS]; /* RD_FORWARD: indexes into hosts, first to try first */
    size_t n;
    size_t n_good;     /* of those, the first n_good did not just fail */
    bool spilled;      /* order[0] is not the hashed host: it spilled by load */
    bool affinity;     /* the prefix key took part: count a hit or a miss */
    bool affinity_hit; /* affinity_host went first */
    bool remember;     /* remember order[0] for rq->prefix (affinity_put) */
} rd_decision_t;

/* the private rule (seed 004's "encrypted pipeline": no remote node sees the plaintext). A
 * --split-private host keeps its split's input and output layers, so its workers never see
 * token ids or logits — but the node that runs a request's llama-server reads its text, and
 * stock llama.cpp RPC cannot give an entry node its own first and last segment over the same
 * workers (an rpc-server serves one client at a time, its tensors that client's alone: a
 * second host would need a second rpc-server and copy of the layers on every worker;
 * bench/rpc-clients). So a request that would be relayed (RD_FORWARD, not a hop) for a model
 * that some candidate host runs as a private split (rd_host_t.priv) goes only to the hosts
 * that do not (a plain replica), and with none is refused, 403 permission_error
 * private_split naming that host, unless the request allows it with the
 * header RD_ALLOW_HOST_HEADER: RD_ALLOW_HOST (allow_host: the client accepts that the node
 * serving it reads it). Served here (the host itself, a copy of this node's) and hops are
 * unchanged: they reach no node the entry does not choose. */
#define RD_ALLOW_HOST_HEADER "X-Mesh-Private"
#define RD_ALLOW_HOST "allow-host"
/* The header's value (NULL: absent) gives that consent: RD_ALLOW_HOST, any case. */
bool rd_allows_host(const char *header_value);

/* Decide. in->hosts may be NULL when n_hosts is 0. */
void route_decide(const rd_input_t *in, rd_decision_t *out);

/* The planner's gate for a model this node has (planner_route gathers the facts; rd_input_t's
 * local_plan). THE BOOTSTRAP RULE (seed 001's bootstrap proxy): while this node's own copy is
 * not ready — loading, or not loaded — and a live peer's server for the model answers, the
 * peer answers (RD_PLAN_REMOTE: route_decide forwards by the stickiness rule over the ready
 * peers); once this node's copy is ready it serves it (RD_PLAN_SERVE). It applies to a solo
 * replica, to a model before its first plan that fits this node alone (it will be a replica),
 * and to a model the planner does not plan here (served on demand). Otherwise: a split host
 * serves once its llama-server is launched and parks requests until then (RD_PLAN_WAIT), as
 * does a model before its first plan that does not fit alone; a planned model without its file
 * here, or one this node only works for (split worker, idle), is served elsewhere. */
typedef struct {
    bool planned;         /* the planner plans the model here (a --model file, one given) */
    bool have_file;       /* ... with its file on this node */
    bool first_plan_done; /* the plan ran at least once */
    bool fits_alone;      /* it fits this node's memory alone and --split is not set */
    int role;             /* election_role_t of this node for the model */
    bool launched;        /* a split host: llama-server started with the current plan */
    bool local_ready;     /* this node's server for the model answers */
    bool ready_elsewhere; /* a live peer's server for the model answers */
} rd_gate_t;
int rd_local_gate(const rd_gate_t *g);

/* Whether requests queued for a model this node has will be served (admission's has_host):
 * served or starting here, a passive table's hosts, a candidate peer, a peer loading it, or a
 * download of it in the mesh. Reads local_plan, offline, dl_mesh, passive, have_table,
 * in_table, self_requested, hosts. */
bool route_has_host(const rd_input_t *in);

/* A passive node's hosts of model m of table t, for rd_input_t.hosts: each valid host (ready,
 * type unknown, its slots from the table; inflight and bad left 0 for the caller), at most
 * max; node_of[k] (may be NULL): hosts[k]'s index in t->nodes. Returns the count. */
size_t rd_table_hosts(const rt_table_t *t, const rt_model_t *m, rd_host_t *hosts, size_t *node_of,
                      size_t max);
/* The input of a passive node's decision for `model` over its table t (NULL: none yet):
 * passive, have_table, in_table, table_status / table_type, the model's hosts (rd_table_hosts
 * into hosts[max] and node_of), no request facts (needs -1). The caller adds the request's
 * (rq, path, needs, tries, table_expired), prefix affinity's (affinity_host, no_affinity) and
 * each host's inflight / bad. */
void rd_passive_input(rd_input_t *in, const rt_table_t *t, const char *model, const char *self_id,
                      rd_host_t *hosts, size_t *node_of, size_t max);

#endif
