/* election — per-model host election and latency-aware split plan (pure: no I/O, no clock,
 * deterministic). Re-run it for every model group on every join, leave and death.
 *
 * Input: the model's size, its layer count, and the live nodes serving that model (their id,
 * offered memory --max-vram, RTT, --split flag). Rules (seed 000 "Per-model election", seed 001
 * "Solo by default" and "Latency-Aware Tensor Split", DESIGN.md §5 "Mesh"):
 *
 *  need = ceil(1.1 × model size) bytes (election_need_bytes).
 *
 *  1. SOLO — "a node with memory ≥ 1.1 × model size serves it solo": when at least one node has
 *     vram ≥ need, every such node is a replica and runs its own llama-server with the whole
 *     model; nodes that do not fit are idle for this model. Replicas are listed by memory
 *     descending, ties to the larger id.
 *  2. SPLIT — otherwise the nodes form a split group. Host = the highest-memory node, ties to the
 *     larger id (seed 000: max_by_key(|p| (p.vram_bytes, p.id))). Worker candidates = every
 *     other node with vram > 0 whose RTT to the host is < 80 ms or unknown (seed 001: "Filter
 *     candidates by rtt_ms < 80ms"; unknown is kept because "unknown RTT sorts last"), sorted by
 *     RTT ascending, unknown last, ties to the larger memory then the larger id. Workers are
 *     taken in that order while host + workers < need ("Greedily accumulate VRAM until
 *     ≥ model_size × 1.1. Stop — don't add unnecessary high-latency peers").
 *  3. IMPOSSIBLE — host + every candidate < need: the host waits for more capacity. The plan
 *     still names the host and the candidates (members) so the status can show the shortfall.
 *  4. --split (force_split on any node of the group) forces a split even when a node fits: the
 *     same host and greedy, but with at least one worker (mesh-llm: "When --split is forced,
 *     always include at least one worker"). With no worker candidate at all, rules 1–3 apply.
 *
 * Device order and --tensor-split. llama.cpp puts RPC devices first, in --rpc order, then the
 * local device(s) ("add RPC servers at the front of the list", src/llama.cpp), and
 * --tensor-split lists proportions in that device order. So a split plan's members are the
 * workers in --rpc order (the RTT order above) followed by the host, last; the host therefore
 * holds the last layers and the output layer. (A CPU-only host that lends its own memory through
 * a local rpc-server must list that endpoint last in --rpc for the order to hold.)
 *
 * Layers. With L repeating layers (GGUF block_count) llama.cpp assigns layer il (0..L, where L is
 * the output layer) to the first device j whose normalised cumulative split s_j > il / (L + 1).
 * The plan applies that rule exactly (integer arithmetic) to the members' memory proportions:
 * with V_j the cumulative memory of members 0..j and V the total, C_j = ceil((L+1) × V_j / V),
 * member j holds layers [C_{j-1}, C_j) (C_{-1} = 0) — contiguous ranges, proportional to memory,
 * rounded like llama.cpp. The weight of member j is C_j − C_{j-1} (its layer count, +1 on the
 * member holding the output layer); passing the weights as --tensor-split makes llama.cpp (float
 * maths included) reproduce exactly these ranges, so a worker can seed only its layers' tensors.
 * A member may get 0 layers when there are more members than layers. With L = 0 (unknown) no
 * ranges are computed and the weights are the members' memory in MiB (at least 1).
 *
 * Speed. When every member of a split announces a calibrated compute speed (speed_mflops) and
 * they differ by at least LS_EQUAL_RATIO, the layer counts come from layer_split.h instead of
 * the memory proportions: a pipeline computes a token through every stage in turn, so the time
 * per token is the sum of the stage times, smallest when the fastest members hold as many
 * slots as their memory allows (slot = layer_bytes / (L + 1) bytes, the same per-slot memory the
 * proportional rule gives when the group's memory equals the need). The ranges are then laid
 * out from those counts exactly as above (contiguous, same member order, same output layer
 * rule), plan.speed_aware is set, and a member's share is its slots / (L + 1). Unknown speeds
 * (an old peer, a node still calibrating), near-equal ones, or counts that give a member more
 * slots than its memory for layers holds: the memory-proportional rule.
 *
 * Host bytes. Some of a split's memory sits on its host whatever the layer split: the node's
 * draft model (--draft: the host drafts on its own CPU) and vision projector files, llama.cpp's
 * input layer (token_embd…: always on the CPU of the node running llama-server), and with
 * --split-private the output layer too. Each node announces them (election_node_t.host_bytes;
 * they differ per node: drafts and flags are per node). The host's host bytes H are counted on
 * the host only: the rest of the need, layer_bytes = need − H, is what the layers take, and
 * the layer split above runs on each member's memory for layers — a worker's memory, the
 * host's memory less H. A member's bytes (what its ledger holds) are its part of layer_bytes
 * (proportional to that memory, or its slots / (L + 1) when speed-aware), plus H on the host;
 * they never exceed the member's memory. The host order prefers, among the nodes with the
 * file, one whose memory holds its H; when the host's memory does not (no node's does), the
 * plan is IMPOSSIBLE. A replica holds the whole need (its own draft included).
 *
 * RTT matrix (rtt.h). With election_input_t.rtt (every node builds the same symmetric matrix
 * from the announced rtt_ms of every node, so every node computes the host's view, not its own)
 * the worker order above becomes: RTT to the host ascending (unknown last) — llama.cpp's RPC
 * traffic is a star around the host (a tensor moves between two RPC servers through the host),
 * so the host links carry the tokens — and, among candidates at the same RTT to the host, the
 * one whose largest RTT to the workers taken so far is the smallest (a tight group: unknown
 * counts as ELECTION_MAX_RTT_MS), then the replica order. Memory still decides how many are
 * taken. No flapping: a worker of the running split (election_input_t.keep) sorts as if its
 * RTT were half of what it is (rounded up), so jitter, or a newcomer that is only a little
 * closer, never re-plans a running split (a restart of llama-server); one at least twice as
 * close does (the 80 ms bound applies to the real RTT; unknown RTTs get no hysteresis). The
 * announced values are rtt.h steps of the connections' least RTT, stable by themselves.
 *
 * Determinism: nodes are sorted by id internally, so any input order gives the same plan.
 */
#ifndef MESH_ELECTION_H
#define MESH_ELECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ELECTION_ID_LEN 64        /* lowercase hex of an Ed25519 public key */
#define ELECTION_MAX_NODES 1025   /* GOSSIP_MAX_PEERS + self */
#define ELECTION_MAX_LAYERS 65536 /* block_count cap */
#define ELECTION_MAX_RTT_MS 80    /* workers need RTT < this (or unknown) */

/* ceil(1.1 × model_bytes), saturating at UINT64_MAX: the memory a model needs. */
uint64_t election_need_bytes(uint64_t model_bytes);

typedef struct {
    const char *id;        /* 64 lowercase hex chars */
    uint64_t vram_bytes;   /* memory offered (--max-vram) */
    int32_t rtt_ms;        /* RTT between this node and the host, ms, < 0 unknown (used when
                            * election_input_t.rtt is NULL; the host's own value is ignored) */
    bool force_split;      /* started with --split */
    bool no_file;          /* holds no copy of the model's file: a worker, never the host (hosts
                            * are taken among the nodes with the file first) */
    uint32_t speed_mflops; /* calibrated compute speed (announced), 0 unknown */
    uint64_t host_bytes;   /* held only as a split host, besides its layers (see "Host bytes") */
} election_node_t;

typedef struct {
    uint64_t model_bytes; /* > 0 */
    uint32_t n_layers;    /* repeating layers (GGUF block_count), 0 = unknown */
    const election_node_t *nodes;
    size_t n_nodes;
    /* Optional n_nodes × n_nodes RTT matrix in ms, row-major: rtt[i * n + j] = RTT that node i
     * measured to node j, < 0 unknown. The RTT of worker j to host h is rtt[h][j] (the host's
     * view) when known, else rtt[j][h], else unknown. NULL: use nodes[j].rtt_ms. */
    const int32_t *rtt;
    uint64_t need_bytes; /* memory to run it (KV cache included); 0: election_need_bytes */
    /* The workers of the split running now (the host's current plan), or none: see "RTT
     * matrix" for the hysteresis they get. */
    const char *const *keep;
    size_t n_keep;
} election_input_t;

typedef enum {
    ELECTION_EMPTY = 0,  /* no node serves the model */
    ELECTION_SOLO,       /* members = replicas, each serving the whole model */
    ELECTION_SPLIT,      /* members = workers in --rpc order, then the host */
    ELECTION_IMPOSSIBLE, /* host + every candidate < need; members as for a split */
} election_mode_t;

typedef enum {
    ELECTION_IDLE = 0, /* not used for this model (does not fit / too far / not needed) */
    ELECTION_REPLICA,  /* solo: runs llama-server with the whole model */
    ELECTION_HOST,     /* split: runs llama-server --rpc <workers> --tensor-split <weights> */
    ELECTION_WORKER,   /* split: lends memory through its rpc-server */
} election_role_t;

typedef struct {
    char id[ELECTION_ID_LEN + 1];
    uint64_t vram_bytes;
    election_role_t role;
    int32_t rtt_ms;       /* worker: RTT to the host used for the choice, -1 unknown; else 0 */
    double share;         /* its part of the layers: memory for layers / the members' (solo: 1;
                           * speed-aware: slots / (L + 1)) */
    uint32_t weight;      /* --tensor-split entry (split only) */
    uint32_t layer_first; /* repeating layers [layer_first, layer_end) held (solo: all) */
    uint32_t layer_end;
    bool output_layer;     /* holds the output layer (split: normally the host; solo: true) */
    uint32_t speed_mflops; /* as announced, 0 unknown */
    uint64_t bytes;        /* memory it holds for the model (split: "Host bytes"; solo: need) */
} election_member_t;

typedef struct {
    election_mode_t mode;
    bool forced;          /* split made under --split (rule 4; at least one worker) */
    bool speed_aware;     /* the layer counts follow the members' speeds (see "Speed") */
    uint64_t need_bytes;  /* election_need_bytes(model_bytes) */
    uint64_t total_bytes; /* memory of the members (saturating) */
    uint64_t host_bytes;  /* split/impossible: the host's host bytes (at most need_bytes) */
    uint64_t layer_bytes; /* split/impossible: need_bytes - host_bytes, spread over the layers */
    uint32_t n_layers;
    election_member_t *members; /* owned; see election_mode_t for the order */
    size_t n_members;
    size_t host_index; /* split/impossible: n_members - 1; solo/empty: 0 */
} election_plan_t;

/* Elect. 0 (out filled; release with election_plan_free), -EINVAL (NULL, model_bytes 0, bad or
 * duplicate id, n_layers > ELECTION_MAX_LAYERS), -E2BIG (n_nodes > ELECTION_MAX_NODES),
 * -ENOMEM. On error out is empty and needs no free. */
int election_run(const election_input_t *in, election_plan_t *out);
void election_plan_free(election_plan_t *plan);

/* Role of node `id` in the plan (ELECTION_IDLE when absent or the plan is impossible/empty). */
election_role_t election_role_of(const election_plan_t *plan, const char *id);
/* The host (split/impossible) or NULL. */
const election_member_t *election_host(const election_plan_t *plan);

/* "w0,w1,…,wHost" (split plans only) into buf. Returns the length, -EINVAL if the plan is not a
 * split, -ENOSPC if buf is too small. */
int election_tensor_split(const election_plan_t *plan, char *buf, size_t len);

/* Layout of a split whose host computes on the CPU. llama.cpp keeps every layer it does not
 * offload on the CPU and offloads the LAST -ngl layer slots (of L + 1, the output layer last) to
 * the GPU/RPC devices, in --rpc order, by --tensor-split. So the host holds the FIRST layers —
 * as many slots as its weight in the plan (its memory share) — and the workers the rest in
 * --rpc order, the last non-empty one holding the output layer. ranges gets one entry per
 * member in plan order (workers…, host); weights for --tensor-split are the workers' slot
 * counts (ranges[i].weight). Needs n_layers > 0. Returns 0, -EINVAL (not a split, no layers). */
typedef struct {
    uint32_t first, end; /* repeating layers [first, end) */
    bool output;         /* holds the output layer */
    uint32_t weight;     /* slots: end - first + output */
} election_range_t;
int election_cpu_layout(const election_plan_t *plan, election_range_t *ranges, uint32_t *ngl);

/* Layout of a split whose host has devices of its own (a GPU: issue 28). Every layer slot is
 * offloaded (-ngl = L + 1) to the devices in llama.cpp's order: the RPC devices first, in --rpc
 * order, then the host's. So the members take consecutive ranges in plan order (workers…, then
 * the host, last), each as many slots as its weight, the host the rest and the output layer;
 * --tensor-split lists every member's slots (the host's spread over its devices:
 * election_spread). Returns 0, -EINVAL (not a split, no layers). */
int election_device_layout(const election_plan_t *plan, election_range_t *ranges, uint32_t *ngl);

/* Spread `slots` over n devices in proportion to their free memory (integer, the remainder to
 * the first ones; all memory 0: evenly): out[0..n). */
void election_spread(uint32_t slots, const uint64_t *device_bytes, size_t n, uint32_t *out);

const char *election_mode_name(election_mode_t mode); /* empty|solo|split|impossible */
const char *election_role_name(election_role_t role); /* idle|replica|host|worker */

#endif
