/* promote — when a standby node starts serving, and when a serving node goes back to standby
 * (pure: no I/O, time passed in). Seed 002 "Promotion", seed 000 "Unloading and contention".
 *
 * The input is typed and independent of where it came from: the mesh's models (hosts, demand,
 * requested) are filled from the gossip view (promo_models_from_views) by an active standby, or
 * from a routing table by a passive one.
 *
 * Promotion (promo_decide; a standby: it serves nothing), first rule that has a candidate:
 *   ALL_GONE   it saw active nodes before and now sees none: every host is gone, so this node
 *              is needed — the model on disk it fits with the most demand, then the largest;
 *   SPLIT_SHORT a model without a ready host whose split group is short of memory (short_bytes,
 *              from the routing table) by no more than this node's free memory: it joins the
 *              group as a worker, on its disk or not (a worker without the file gets the weights
 *              through the tunnel). Ties: on its disk, more demand, the smaller name;
 *   REQUESTED  a model some node asks for (requested_models) or that has demand, with no host,
 *              on this node's disk and fitting its free memory;
 *   UNSERVED   a model on its disk with no host that fits;
 *   HOT        a model on its disk that fits, served, no host still loading it (a promotion in
 *              progress), whose per-host rate (rate / hosts) is ≥ PROMO_HOT_PER_MIN and either
 *              the only served model or ≥ PROMO_IMBALANCE × the per-host rate of the other
 *              served models together (their rate / their hosts).
 *   Ties: more demand, then larger need, then the smaller name.
 *
 * Demotion (promo_demote; a node serving a model as a solo replica it was given by the mesh,
 * not pinned with --model, not split): never while a request is in flight or the model loads,
 * never before min_serve_ms after it started serving (hysteresis), and only after idle_ms
 * without a request (MESH_LLM_IDLE_UNLOAD_MS, 30 min). Then:
 *   MEMORY     its memory is wanted (a model on its disk that is requested, has no host and does
 *              not fit beside it): unloaded even as the last replica;
 *   SPLIT      a split the mesh waits for ("needs_capacity", short_bytes) needs the memory this
 *              node would free, and is wanted more than its model (promo_split_wanted): unloaded
 *              even as the last replica; standing by, the node then joins that split
 *              (SPLIT_SHORT);
 *   IDLE       another ready host keeps serving it — a pinned one or one with a larger id (two
 *              idle replicas never both leave) — and the mesh's demand spread over the hosts
 *              that remain stays below half the HOT threshold (the gap that keeps a demoted node
 *              from promoting again at once).
 *   The last replica is kept otherwise. */
#ifndef MESH_PROMOTE_H
#define MESH_PROMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "demand.h"
#include "route_table.h"
#include "view.h"

#define PROMO_HOT_PER_MIN 10
#define PROMO_IMBALANCE 3
#define PROMO_IDLE_MS (30u * 60u * 1000u)
#define PROMO_MIN_SERVE_MS (5u * 60u * 1000u)

typedef struct {
    const char *name;
    uint64_t need_bytes; /* 0 unknown: never chosen */
} promo_disk_t;

typedef struct {
    const char *name;
    size_t n_hosts;       /* nodes whose server for it runs */
    bool loading;         /* one of them is not ready yet */
    uint64_t rate;        /* requests per minute over the mesh */
    bool requested;       /* some node asks for it */
    uint64_t last_unix;   /* the mesh's last request (0 none) */
    uint64_t short_bytes; /* its split group lacks this much memory (0: not short, unknown) */
} promo_model_t;

typedef struct {
    uint64_t free_bytes;
    const promo_disk_t *disk;
    size_t n_disk;
    const promo_model_t *models; /* the mesh's models */
    size_t n_models;
    size_t n_active; /* active nodes this node can see (gossip peers, the table's nodes) */
} promo_input_t;

typedef struct {
    bool seen_active; /* it saw an active node once */
} promo_state_t;

typedef enum {
    PROMO_NONE = 0,
    PROMO_ALL_GONE,
    PROMO_SPLIT_SHORT,
    PROMO_REQUESTED,
    PROMO_UNSERVED,
    PROMO_HOT,
} promo_reason_t;

typedef struct {
    promo_reason_t reason;
    const char *model; /* borrowed from the input's disk list (SPLIT_SHORT: its models) */
} promo_result_t;

void promo_decide(const promo_input_t *in, promo_state_t *st, promo_result_t *out);
const char *promo_reason_name(promo_reason_t r);

/* The mesh's models from the demand sums (demand_sum over the peers' views). */
size_t promo_models_from_sums(const demand_sum_t *s, size_t n, promo_model_t *out, size_t max);

/* The mesh's models as a routing table shows them (a passive standby; route_table.h): a model's
 * hosts are its ready hosts, its rate the sum of their announced loads, loading its status,
 * requested the table's flag, short_bytes the table's. Names are borrowed from t. */
size_t promo_models_from_table(const rt_table_t *t, promo_model_t *out, size_t max);

/* Whether a node stands by passively (seed 002: no gossip, routing tables instead): it has no
 * --model (the mesh chooses) and asks for no model, allocation gave it nothing (or it was
 * demoted), and some other node serves a model (an active node to check in with; in a mesh
 * where nothing is served every node stays a gossip member). */
typedef struct {
    bool allocating;      /* no --model */
    size_t n_requested;   /* models it asks for (--model NAME without a file) */
    size_t n_planned;     /* models it serves, hosts or works for */
    bool nothing_for_it;  /* allocation found nothing for it, or it was demoted */
    size_t n_ready_peers; /* live peers with a server that answers */
} promo_passive_input_t;

bool promo_go_passive(const promo_passive_input_t *in);

typedef struct {
    const char *id; /* a ready host of the model other than this node */
    bool pinned;
} promo_host_t;

typedef struct {
    const char *id; /* this node */
    bool pinned;    /* --model */
    bool replica;   /* serves it as a solo replica (not split) */
    bool busy;      /* a request in flight, or it loads */
    uint64_t now_ms, serving_since_ms, last_request_ms; /* monotonic; last 0: none */
    uint64_t idle_ms, min_serve_ms;
    const promo_host_t *others; /* the other ready hosts */
    size_t n_others;
    uint64_t mesh_rate; /* the model's requests per minute over the mesh */
    bool memory_wanted; /* see above */
    bool split_wanted;  /* promo_split_wanted */
} promo_demote_input_t;

typedef enum {
    DEMOTE_KEEP = 0,
    DEMOTE_IDLE,
    DEMOTE_MEMORY,
    DEMOTE_SPLIT,
} promo_demote_t;

/* Whether a split needs this node's memory more than its model (DEMOTE_SPLIT): a model of the
 * mesh other than mine, without a ready host, whose split group lacks short_bytes > 0 that this
 * node's free memory plus what it holds for mine (held_bytes) covers, and that is wanted more
 * than mine: more requests per minute over the mesh than my_rate, or asked for (requested)
 * while mine has none. */
bool promo_split_wanted(const promo_model_t *models, size_t n, const char *mine, uint64_t my_rate,
                        uint64_t free_bytes, uint64_t held_bytes);

promo_demote_t promo_demote(const promo_demote_input_t *in);
const char *promo_demote_name(promo_demote_t d);

#endif
