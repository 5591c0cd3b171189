/* stage — see stage.h. */
#include "stage.h"

#include <stddef.h>

#include "layer_split.h"

void stage_set_slots(stage_ema_t *e, uint32_t slots)
{
    if (!e || e->slots == slots) return;
    e->slots = slots;
    e->samples = e->windows = e->win_n = 0;
    e->ema_ms = e->win_sum = 0;
}

bool stage_note(stage_ema_t *e, double sample_ms, double rtt_ms)
{
    if (!e || e->slots == 0 || !(sample_ms >= 0) || sample_ms > STAGE_SAMPLE_MAX_MS) return false;
    double x = sample_ms;
    if (rtt_ms > 0) x = x > rtt_ms ? x - rtt_ms : 0;
    if (e->samples < UINT32_MAX) e->samples++;
    if (e->total < UINT64_MAX) e->total++;
    e->win_sum += x;
    if (++e->win_n < STAGE_WINDOW) return true;
    x = e->win_sum / e->win_n;
    e->win_sum = 0;
    e->win_n = 0;
    if (e->windows >= STAGE_WARM) {
        double hi = e->ema_ms * STAGE_OUTLIER, lo = e->ema_ms / STAGE_OUTLIER;
        x = x > hi ? hi : x < lo ? lo : x;
    }
    e->ema_ms = e->windows == 0 ? x : STAGE_ALPHA * x + (1 - STAGE_ALPHA) * e->ema_ms;
    if (e->windows < UINT32_MAX) e->windows++;
    /* the baseline: the first per-layer time, then the lowest one seen once a layout has its
     * samples (the worker at its best: a baseline taken while it was busy would make it look
     * faster than its calibration later) */
    double now = stage_layer_ms(e);
    if (e->base_layer_ms <= 0 ? e->samples >= STAGE_BASE_SAMPLES
                              : e->samples >= STAGE_MIN_SAMPLES && now < e->base_layer_ms)
        e->base_layer_ms = now;
    return true;
}

double stage_layer_ms(const stage_ema_t *e)
{
    if (!e || e->windows == 0 || e->slots == 0) return 0;
    return e->ema_ms / (double)e->slots;
}

uint32_t stage_speed(const stage_ema_t *e, uint32_t calibrated_mflops)
{
    if (calibrated_mflops == 0 || !e || e->base_layer_ms <= 0 || e->samples < STAGE_MIN_SAMPLES)
        return calibrated_mflops;
    double now = stage_layer_ms(e);
    /* an EMA of 0 (every sample within the RTT) is as fast as anything measured */
    double s = now > 0 ? (double)calibrated_mflops * e->base_layer_ms / now : (double)LS_SPEED_MAX;
    if (s < 1) return 1;
    if (s > LS_SPEED_MAX) return LS_SPEED_MAX;
    return (uint32_t)(s + 0.5);
}
