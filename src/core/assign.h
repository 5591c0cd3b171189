/* assign — what an operator's assignment (mesh-llm assign MODEL, POST /api/assign) moves off
 * this node (pure: no I/O). Seed 000 "Unloading and contention": "the node is explicitly told
 * to switch (admin command)".
 *
 * An assignment is made by the node itself, through its own management API (loopback or its
 * API key): a peer can never order it. The assigned model becomes this node's to serve like a
 * --model one and more: the mesh's rules never demote or idle-unload it, the planner gives the
 * node nothing else in its place, and it is pinned against eviction.
 *
 * What goes, over the models the node plans for (planned[]):
 *   - a model the mesh gave the node (allocation, promotion: neither --model nor assigned) goes
 *     always: the assignment replaces it (ASSIGN_GO_MESH);
 *   - a --model one stays while the assigned model fits beside it (a free slot of its type
 *     among the kept models, memory: what the node offers minus what the kept models hold);
 *     otherwise the least recently used --model ones of the same type go first for a slot,
 *     then the least recently used of any type for memory (ASSIGN_GO_SLOT, ASSIGN_GO_MEMORY);
 *   - an assigned model never goes: when the new one cannot fit beside the assigned ones, the
 *     assignment is refused (ASSIGN_CONFLICT, naming one in the way: unassign it first);
 *   - a model that needs more than the node offers is refused (ASSIGN_TOO_BIG).
 * Models loaded on demand outside any plan are the model manager's (LRU) and not listed. */
#ifndef MESH_ASSIGN_H
#define MESH_ASSIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ASSIGN_MAX 16 /* planned models considered (PLAN_MAX_MODELS) */

typedef struct {
    const char *name;
    unsigned type;     /* mm_type_t */
    uint64_t bytes;    /* what it holds (or would hold) in the ledger */
    bool loaded;       /* its server runs or starts */
    bool pinned;       /* --model */
    bool assigned;     /* an assignment */
    uint64_t last_use; /* for LRU (any monotonic clock) */
} assign_held_t;

typedef struct {
    const char *model; /* the model to assign */
    unsigned type;
    uint64_t need_bytes;
    uint64_t offer_bytes; /* what the node offers its models */
    unsigned slots;       /* of the model's type (--max-loaded-models) */
    const assign_held_t *planned;
    size_t n_planned;
} assign_input_t;

typedef enum {
    ASSIGN_OK = 0,
    ASSIGN_ALREADY,  /* it is assigned already: nothing changes */
    ASSIGN_TOO_BIG,  /* need_bytes > offer_bytes */
    ASSIGN_CONFLICT, /* other assignments leave it no slot or memory */
} assign_verdict_t;

typedef enum {
    ASSIGN_KEEP = 0,
    ASSIGN_GO_MESH,   /* the mesh gave it: the assignment replaces it */
    ASSIGN_GO_SLOT,   /* a --model one whose slot the assigned model needs */
    ASSIGN_GO_MEMORY, /* a --model one whose memory the assigned model needs */
} assign_go_t;

typedef struct {
    assign_verdict_t verdict;
    assign_go_t go[ASSIGN_MAX]; /* per planned model (ASSIGN_OK only) */
    size_t in_the_way;          /* ASSIGN_CONFLICT: an assigned model in the way */
    bool already_planned;       /* the model is one of planned[] (it stays) */
} assign_result_t;

void assign_decide(const assign_input_t *in, assign_result_t *out);
const char *assign_go_name(assign_go_t g);
const char *assign_verdict_name(assign_verdict_t v);

#endif
