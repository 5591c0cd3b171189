/* stage — the observed per-token stage time of a split's workers (pure: no I/O, no clock).
 *
 * Seed 004's Parallax scheduler places layers by "observed per-layer latencies (EMA over recent
 * forwards)". Here the forwards are the llama.cpp RPC turns a split host's relay sees
 * (tunnel_rpc.h): a worker's stage time is the time from the GRAPH_COMPUTE command that starts
 * its part of a token to the first byte of the reply that follows it (its output tensor), less
 * the connection's least RTT (the network's part, rtt.h). The samples are averaged over windows
 * of STAGE_WINDOW, and each window's mean goes into an EMA:
 *
 *   - windows, not single samples: a throttled or time-shared worker (a CPU quota, a competing
 *     job) answers most tokens at full speed and stalls on a few (its period's quota is spent);
 *     the mean over a window carries those stalls, an EMA of clamped single samples would cut
 *     them off;
 *   - the first window sets the EMA; later ones move it by STAGE_ALPHA;
 *   - outlier bound: once STAGE_WARM windows are in, a window's mean is clamped to
 *     [ema / STAGE_OUTLIER, ema × STAGE_OUTLIER] (a prompt's prefill, a scheduling hiccup move it
 *     a bounded step, and a real slowdown still arrives within a few windows);
 *   - samples beyond STAGE_SAMPLE_MAX_MS (a reply that waited for anything else) are dropped;
 *   - per-layer time = EMA / the layer slots the worker holds (stage_set_slots: a new layout
 *     restarts the EMA, its baseline stays).
 *
 * Baseline and speed. The host's own stage runs inside llama-server, where no relay sees it, and
 * the start-up calibration (speed_mflops, calib.c) is the one scale every member has; the
 * observed time corrects it. A worker's baseline is its per-layer time once STAGE_BASE_SAMPLES
 * samples came in, then the lowest per-layer time it showed in any layout with at least
 * STAGE_MIN_SAMPLES samples (the worker at its best: a baseline taken while it was busy would
 * make it look faster than its calibration later). Its effective speed is its calibrated speed
 * × baseline / its current per-layer time (clamped to 1 .. LS_SPEED_MAX), and the calibrated
 * speed itself while the EMA has fewer than STAGE_MIN_SAMPLES samples for the layout it holds:
 * a worker that slows down after the split formed (a competing load, a throttle) counts as
 * slower in the layer split (layer_split.h) by exactly the factor its stage time grew. */
#ifndef MESH_STAGE_H
#define MESH_STAGE_H

#include <stdbool.h>
#include <stdint.h>

#define STAGE_WINDOW 8 /* samples per window */
#define STAGE_ALPHA 0.2
#define STAGE_OUTLIER 4.0
#define STAGE_WARM 2          /* windows */
#define STAGE_MIN_SAMPLES 16  /* 2 windows */
#define STAGE_BASE_SAMPLES 32 /* 4 windows */
#define STAGE_SAMPLE_MAX_MS 60000.0

typedef struct {
    double ema_ms;    /* stage time, ms (valid when windows > 0) */
    uint32_t samples; /* since the layout it holds began (saturating) */
    uint32_t windows; /* windows that went into the EMA since then */
    double win_sum;   /* the current window's samples so far */
    uint32_t win_n;
    uint64_t total;       /* every sample taken (saturating) */
    uint32_t slots;       /* layer slots it holds (0 unknown: no sample is taken) */
    double base_layer_ms; /* baseline per-layer time, 0 before it is known */
} stage_ema_t;

/* The worker now holds `slots` layer slots; a change restarts the EMA (its baseline stays). */
void stage_set_slots(stage_ema_t *e, uint32_t slots);

/* One observed turn: sample_ms from GRAPH_COMPUTE to the reply, rtt_ms the connection's least
 * RTT (< 0 unknown: nothing subtracted). Returns whether the sample was taken. */
bool stage_note(stage_ema_t *e, double sample_ms, double rtt_ms);

/* EMA / slots, or 0 when no window is complete or there is no slot. */
double stage_layer_ms(const stage_ema_t *e);

/* The effective speed (see above) from the calibrated one; 0 stays 0 (unknown). */
uint32_t stage_speed(const stage_ema_t *e, uint32_t calibrated_mflops);

#endif
