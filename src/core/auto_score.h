/* auto_score — which discovered mesh an --auto node joins (pure; seed 001's score_mesh and
 * smart_auto).
 *
 * score = region match +200, sticky (the mesh joined last, $MESH_LLM_HOME/last-mesh) +500,
 *         serves a model this node asked for +300 (holds it on disk: +100),
 *         capacity: +10 per node (at most 20 nodes counted), +2 per GiB free (at most 200 GiB),
 *         +1 per 4 GiB total (at most 1 TiB).
 * A listing that does not hold a model this node asked for is still a candidate (the node may
 * bring or download its model). Ties: more free memory, then smaller mesh id (deterministic). */
#ifndef MESH_AUTO_SCORE_H
#define MESH_AUTO_SCORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "listing.h"
#include "model_ref.h"

#define AUTO_SCORE_REGION 200
#define AUTO_SCORE_STICKY 500
#define AUTO_SCORE_SERVES 300
#define AUTO_SCORE_HOLDS 100

typedef struct {
    const char *region;        /* --region ("" or NULL: none) */
    const char *last_mesh;     /* last-mesh ("" or NULL: none) */
    const char *const *wanted; /* models this node asked for (--model names) */
    size_t n_wanted;
} auto_prefs_t;

int64_t auto_score(const mesh_listing_t *l, const auto_prefs_t *p);
/* Indices of the listings, best first, into order (n entries). */
void auto_rank(const mesh_listing_t *ls, size_t n, const auto_prefs_t *p, size_t *order);

/* The catalog model for a node that starts a new mesh without one: one this node can run at a
 * usable speed.
 *
 * Speed: decoding a token streams every weight of the model once, so its rate is bounded by
 * the memory bandwidth the node's compute threads get; the start-up calibration (node/speed.h)
 * measures that as an F32 matrix-vector product over a matrix larger than the caches (2 flops
 * per 4-byte weight: bandwidth = 2 bytes per measured flop). The estimate takes half of that
 * bound for the rest of a decode step (attention, the KV cache, dequantisation, sampling):
 *     tokens/s ~= mflops x 10^6 / model bytes.
 * (At 3258 MFLOP/s, one thread of a 2-core VM: Qwen2.5-0.5B 6.6, Llama-3.2-1B 4.0,
 * Qwen2.5-7B 0.7 tokens/s.) */
#define AUTO_MIN_TPS 5.0
/* mflops for a node whose offer is an accelerator's memory: the CPU calibration says nothing of
 * its speed, so memory alone decides */
#define AUTO_SPEED_UNLIMITED UINT32_MAX

double auto_est_tps(uint64_t size_bytes, uint32_t mflops);

typedef enum {
    AUTO_PICK_NONE_FITS = 0, /* no catalog chat model fits the memory offered */
    AUTO_PICK_TOO_SLOW,      /* some fit, none reaches AUTO_MIN_TPS: model is NULL */
    AUTO_PICK_FAST,          /* the largest that fits and reaches AUTO_MIN_TPS */
    AUTO_PICK_UNKNOWN_SPEED, /* speed unknown (mflops 0): the catalog default, if it fits */
} auto_pick_why_t;

typedef struct {
    const known_model_t *model; /* NULL: none */
    auto_pick_why_t why;
    double tps;                /* the estimate for model (0 when the speed is unknown) */
    const known_model_t *best; /* AUTO_PICK_TOO_SLOW: the fastest that fits, for the message */
    bool on_disk;              /* model is on disk already (no download) */
} auto_pick_t;

/* mem: bytes this node offers; mflops: its measured speed (0 unknown); on_disk (may be NULL):
 * whether a catalog model's file is on disk already. Among the chat models that fit mem
 * (min_memory) and run at >= AUTO_MIN_TPS, the ones on disk come first (no download), then the
 * one needing the most memory (ties: the larger file). Vision models (a catalog entry with a
 * projector) are never picked: a new mesh's model is a text chat model. */
auto_pick_t auto_pick_model(uint64_t mem, uint32_t mflops,
                            bool (*on_disk)(void *data, const known_model_t *m), void *data);

#endif
