/* layer_split — how many layer slots each member of a split holds, from its memory and its
 * measured compute speed (pure: no I/O, no clock, deterministic).
 *
 * Why the sum. A split is a llama.cpp layer pipeline over RPC: every decoded token goes through
 * the members' layers one after the other (host layers, then worker 1's, then worker 2's …), and
 * the next token starts only when the last stage has produced the logits. Nothing overlaps for
 * one stream, so the compute time per token is the SUM of the stage times,
 *     T = Σ_j n_j × t_j        (n_j slots on member j, t_j its time per slot = 1 / speed_j),
 * not the maximum of them (that would be a pipelined throughput, which single-stream decoding
 * does not get). T is linear in the n_j, so with Σ n_j = S slots and each member's memory cap
 * n_j ≤ cap_j, it is smallest when the fastest member holds as many slots as its memory allows,
 * then the next fastest, and so on: the slow member keeps only what memory forces on it, and it
 * no longer paces every token with a memory-proportional share of the layers.
 *
 * Rules of layer_split_speed:
 *  - every member needs a known speed (> 0); otherwise the caller keeps the memory-proportional
 *    split (returns 0);
 *  - speeds within LS_EQUAL_RATIO of each other count as equal (a short calibration on a busy
 *    machine is that noisy, and T barely changes): returns 0, memory-proportional;
 *  - cap_j = floor(cap_bytes_j / slot_bytes); when Σ cap_j < S the memory does not cover the
 *    slots at this granularity: returns 0;
 *  - every member gets at least one slot (the election took it for its memory; an idle
 *    rpc-server that the plan still waits for helps nobody) — when S ≥ members;
 *  - the remaining slots go greedily to the members by speed, fastest first (ties: lower index),
 *    each up to its cap.
 * The slot size is uniform (the repeating layers of a llama-style model are the same size; the
 * output slot counts as one more — an approximation the weights' memory cap already bounds). */
#ifndef MESH_LAYER_SPLIT_H
#define MESH_LAYER_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#define LS_EQUAL_RATIO 1.5     /* max/min speed below this: the speeds count as equal */
#define LS_MAX_NODES 1025      /* ELECTION_MAX_NODES */
#define LS_SPEED_MAX 100000000 /* MFLOP/s (100 TFLOP/s): larger claims are clamped */

typedef struct {
    uint64_t cap_bytes;    /* memory the member offers the model */
    uint32_t speed_mflops; /* calibrated compute speed, 0 unknown */
} ls_node_t;

/* Slots per member into counts[0..n) (Σ = n_slots) when the speed-aware rule applies: returns 1.
 * Returns 0 when it does not (counts untouched: use the memory-proportional split), -EINVAL
 * (NULL, n 0 or > LS_MAX_NODES, slot_bytes 0, n_slots 0). */
int layer_split_speed(const ls_node_t *nodes, size_t n, uint32_t n_slots, uint64_t slot_bytes,
                      uint32_t *counts);

/* Σ counts[j] / speed_j in slot-units per MFLOP/s — the relative compute time per token of a
 * layout (smaller is faster), for tests and logs. 0 when a speed is unknown. */
double layer_split_cost(const ls_node_t *nodes, size_t n, const uint32_t *counts);

#endif
