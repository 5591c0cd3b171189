/* rebalance — see rebalance.h. */
#include "rebalance.h"

#include <stdio.h>
#include <string.h>

void rb_reset(rb_state_t *st)
{
    if (!st) return;
    st->cand[0] = '\0';
    st->streak = 0;
    st->gain = 0;
}

rb_verdict_t rb_tick(rb_state_t *st, const rb_opts_t *o, uint64_t now_ms, const char *cur_sig,
                     const char *cand, double cur_cost, double cand_cost)
{
    if (!st) return RB_KEEP;
    uint64_t every = o && o->tick_ms ? o->tick_ms : RB_TICK_MS;
    uint32_t need = o && o->ticks ? o->ticks : RB_TICKS;
    double min_gain = (o ? (double)o->gain_pct : (double)RB_GAIN_PCT) / 100.0;
    if (st->ticked && now_ms < st->last_tick_ms + every) return RB_KEEP;
    st->ticked = true;
    st->last_tick_ms = now_ms;
    st->n_ticks++;
    bool none = !cand || !cand[0] || (cur_sig && strcmp(cand, cur_sig) == 0) || !(cur_cost > 0) ||
                !(cand_cost > 0);
    double gain = none ? 0 : (cur_cost - cand_cost) / cur_cost;
    st->gain = gain > 0 ? gain : 0;
    if (none || gain < min_gain || gain <= 0) {
        st->cand[0] = '\0';
        st->streak = 0;
        return RB_KEEP;
    }
    if (strcmp(st->cand, cand) == 0) {
        st->streak++;
    } else {
        snprintf(st->cand, sizeof st->cand, "%s", cand);
        st->streak = 1;
    }
    if (st->streak < need) return RB_WAIT;
    st->cand[0] = '\0';
    st->streak = 0;
    st->applied++;
    return RB_APPLY;
}

const char *rb_verdict_name(rb_verdict_t v)
{
    switch (v) {
    case RB_WAIT:
        return "wait";
    case RB_APPLY:
        return "apply";
    default:
        return "keep";
    }
}
