/* rebalance — when a running split moves to a better layout (pure: no I/O, time passed in).
 *
 * Seed 004: the Parallax allocator acts on "a per-shard stability counter (≥ 3 consistent ticks
 * of 'this shard wants to move here' before it acts)". While a split's membership is stable, its
 * host re-plans every tick (opts.tick_ms) with the workers' observed speeds (stage.h) and
 * proposes the layout they give (a signature naming every member's layers) with its predicted
 * compute time per token (layer_split_cost); rb_tick says whether to apply it:
 *
 *   - a call before tick_ms has passed since the last tick is no tick: nothing changes (KEEP);
 *   - a tick with no candidate (none, the running layout, an unknown cost) or whose predicted
 *     gain (cur − cand) / cur is below opts.gain_pct % resets the counter (KEEP);
 *   - the same candidate as the last tick's counts one more tick in a row, another one starts
 *     again at 1 (WAIT);
 *   - when the counter reaches opts.ticks (≥ 1; the default RB_TICKS) the candidate is applied
 *     (APPLY) and the counter starts again from 0.
 * So a layout is applied only after it was the best for `ticks` ticks in a row AND its gain
 * beats the threshold: a speed that wavers around a boundary, or a gain within the noise, never
 * flaps the layout (each change costs a llama-server restart). Membership changes (a join, a
 * death) are not this rule's: they re-plan at once (rb_reset). */
#ifndef MESH_REBALANCE_H
#define MESH_REBALANCE_H

#include <stdbool.h>
#include <stdint.h>

#define RB_SIG_MAX 1024
#define RB_TICK_MS 10000 /* defaults (MESH_LLM_REBALANCE_*) */
#define RB_TICKS 3
#define RB_GAIN_PCT 20

typedef struct {
    uint64_t tick_ms; /* 0: RB_TICK_MS */
    uint32_t ticks;   /* 0: RB_TICKS */
    uint32_t gain_pct;
} rb_opts_t;

typedef struct {
    bool ticked; /* a tick happened (last_tick_ms valid) */
    uint64_t last_tick_ms;
    char cand[RB_SIG_MAX]; /* the candidate counted so far ("" none) */
    uint32_t streak;       /* ticks in a row it was the best */
    double gain;           /* the last tick's predicted gain (fraction; 0 none) */
    uint64_t n_ticks, applied;
} rb_state_t;

typedef enum { RB_KEEP = 0, RB_WAIT, RB_APPLY } rb_verdict_t;

/* cand: the proposed layout's signature (NULL or "" none, or equal to cur_sig: none); costs:
 * predicted time per token of the running layout and of the candidate (same units, > 0). */
rb_verdict_t rb_tick(rb_state_t *st, const rb_opts_t *o, uint64_t now_ms, const char *cur_sig,
                     const char *cand, double cur_cost, double cand_cost);
/* Membership changed (a new plan not made by this rule): the counter starts again. */
void rb_reset(rb_state_t *st);
const char *rb_verdict_name(rb_verdict_t v);

#endif
