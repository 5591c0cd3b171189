/* ledger — one account of this node's memory (pure: no I/O, no clock).
 *
 * What the node offers (--max-vram; else the detected memory) and what each holder keeps:
 *  - LEDGER_MODEL: a model this node runs in its own llama-server (a replica, or a split host's
 *    share of the layers), from the moment its load starts (loading = true) until it is unloaded;
 *  - LEDGER_WORKER: the layers a split worker's rpc-server holds for a host's plan.
 * Every load path asks the ledger before it starts anything: the local model manager (mm.c)
 * for startup models, auto-loads, /api/v1/load and split hosts; the planner for worker shards.
 *
 * A node offers each model's group only what is free plus what it already holds for that model
 * (ledger_offer_for), so a node in several groups never offers the same bytes twice, and a node
 * serving a model does not see its own copy as missing memory.
 *
 * Sizes: a whole model needs ledger_need(file bytes, KV bytes) = max(ceil(1.1 × file),
 * file + KV for its context) — the seeds' 1.1 × size rule, raised when the KV cache of the
 * context it is loaded with is larger than that 10 % margin (ledger_kv_bytes, from GGUF
 * metadata, for the cache types and context its llama-server arguments set, plus what a
 * micro-batch above the default adds: ledger_kv_bytes_as, ledger_compute_bytes). The mesh's plans
 * (catalog, allocation, election) use the same figure, announced per model as need_bytes, so
 * `needs_capacity` and the plans agree with what nodes do. */
#ifndef MESH_LEDGER_H
#define MESH_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEDGER_MAX 320 /* MM_MAX_MODELS loaded models + worker shards */
#define LEDGER_NAME_MAX 128

typedef enum { LEDGER_MODEL = 0, LEDGER_WORKER = 1 } ledger_kind_t;

typedef struct {
    char name[LEDGER_NAME_MAX];
    ledger_kind_t kind;
    uint64_t bytes;
    bool loading; /* held for a load in progress */
} ledger_entry_t;

typedef struct {
    uint64_t offered; /* 0: the node lends nothing (a --client) */
    ledger_entry_t e[LEDGER_MAX];
    size_t n;
} ledger_t;

void ledger_init(ledger_t *l, uint64_t offered);
/* Hold `bytes` for (name, kind), replacing what it held. 0, -ENOSPC when the table is full,
 * -EINVAL for a bad name. */
int ledger_set(ledger_t *l, const char *name, ledger_kind_t kind, uint64_t bytes, bool loading);
/* Release what (name, kind) holds (nothing held: no-op). */
void ledger_clear(ledger_t *l, const char *name, ledger_kind_t kind);
const ledger_entry_t *ledger_get(const ledger_t *l, const char *name, ledger_kind_t kind);

uint64_t ledger_held(const ledger_t *l); /* every holder */
uint64_t ledger_held_kind(const ledger_t *l, ledger_kind_t kind);
uint64_t ledger_held_for(const ledger_t *l, const char *name); /* every kind, one model */
uint64_t ledger_free(const ledger_t *l);                       /* offered - held, never below 0 */
/* What this node can give model `name`'s group: free + what it holds for the model now. */
uint64_t ledger_offer_for(const ledger_t *l, const char *name);

/* The shape of a model that decides its KV cache (GGUF metadata; 0 = unknown). */
typedef struct {
    uint32_t n_layers;
    uint32_t n_embd;
    uint32_t n_head;
    uint32_t n_head_kv;                /* 0: same as n_head */
    uint32_t key_length, value_length; /* per head; 0: n_embd / n_head */
} ledger_shape_t;

/* KV cache bytes (F16 K and V) for n_ctx tokens; 0 when the shape is unknown. */
uint64_t ledger_kv_bytes(const ledger_shape_t *s, uint32_t n_ctx);
/* The same for cache types of k_x32 and v_x32 bytes per 32 elements (F16: 64, Q8_0: 34, F32:
 * 128; llama_args_memory reads them from -ctk/-ctv). */
uint64_t ledger_kv_bytes_as(const ledger_shape_t *s, uint32_t n_ctx, uint32_t k_x32,
                            uint32_t v_x32);
/* llama.cpp's micro-batch by default; the 10 % margin of ledger_need covers its buffers. */
#define LEDGER_UBATCH_DEFAULT 512
/* What a larger micro-batch adds: the attention scores (n_ctx × ubatch × n_head F32) beyond
 * those of the default micro-batch (ubatch is at most n_ctx, as in llama.cpp). */
uint64_t ledger_compute_bytes(const ledger_shape_t *s, uint32_t n_ctx, uint32_t ubatch);
/* What a whole model needs: max(ceil(1.1 × file), file + kv), saturating. */
uint64_t ledger_need(uint64_t file_bytes, uint64_t kv_bytes);

/* Partial offload (--offload-ram): how many of a model's n_layers repeating layers go on the
 * accelerators when the model needs `need` bytes and `on_device` of the devices' memory is free
 * for it. -1 when the whole model fits there (llama.cpp's own placement: every layer); else the
 * layers that fit, in proportion (floor(n_layers x on_device / need): the layers are the bulk
 * of a model, the rest goes with them), 0..n_layers-1; the others run on the CPU from RAM.
 * n_layers 0 (unknown): -1 when it fits, else 0. */
int ledger_gpu_layers(uint64_t need, uint32_t n_layers, uint64_t on_device);

/* What a node holds only as a model's split host (election.h "Host bytes"): the files it serves
 * with the model (its draft and projector: the host runs them on its own CPU), the model's
 * input layer (llama.cpp keeps it on the CPU of the node running llama-server) and, with
 * --split-private, the output layer too (the tensors' bytes from the GGUF table:
 * gguf_tensors_layer_bytes). Saturating. */
uint64_t ledger_host_bytes(uint64_t serve_bytes, uint64_t input_bytes, uint64_t output_bytes,
                           bool split_private);

/* "12.3 MB" style, for messages. */
const char *ledger_fmt(uint64_t bytes, char *buf, size_t len);

#endif
