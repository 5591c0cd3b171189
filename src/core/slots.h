/* slots — how many parallel slots a model's llama-server gets, and what they cost (pure: no
 * I/O, no clock).
 *
 * A slot is one request llama-server decodes at a time; each has a context of its own (the
 * model's --ctx-size, else the context it was trained with). llama-server is started with
 * `-np S --ctx-size S × context`: with an explicit slot count it gives every slot its own KV
 * cache of exactly that context (checked with the pinned llama-server: -np 4 -c 4096 keeps 4
 * cells of 1024 tokens, 64 MiB on the 363M bench model, four times -np 1 -c 1024; the compute
 * buffer stays the same), so the memory a model holds is
 *
 *     ledger_need(weights, S × KV of one slot's context + compute)
 *
 * The slot count is the one asked for (--slots, the config file's per-model `slots`, a -np in
 * its llamacpp_args); otherwise ("auto") as many as fit the memory free for the model when it
 * loads, up to SLOTS_AUTO_MAX (llama-server's own automatic count) and at least 1: a node with
 * room serves four users at once, a node without still serves one. The mesh's plans use the
 * need of one slot (or of the slots asked for): a model is placed where it fits at all, and the
 * node it lands on adds slots from its spare memory. */
#ifndef MESH_SLOTS_H
#define MESH_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#define SLOTS_AUTO_MAX 4 /* llama-server's -np -1 */
#define SLOTS_MAX 64     /* llama_args' bound on -np */

typedef struct {
    uint64_t weights; /* the files loaded: model, draft, projector */
    uint64_t kv_slot; /* KV cache of one slot's context */
    uint64_t compute; /* what a larger micro-batch adds (the same for any slot count) */
    unsigned want;    /* slots asked for, 1..SLOTS_MAX; 0: auto */
    uint64_t room;    /* memory the model may take now; UINT64_MAX: no limit known */
} slots_in_t;

typedef struct {
    unsigned slots; /* 1..SLOTS_MAX */
    uint64_t bytes; /* what the model holds with them */
    bool fits;      /* bytes <= room */
} slots_t;

/* The KV cells llama.cpp gives a slot of ctx tokens: it pads every sequence's context to a
 * multiple of 256 (the pinned llama-server: -np 2 -c 256 keeps 2 × 256 cells, not 2 × 128). */
#define SLOTS_CTX_PAD 256
uint32_t slots_ctx_cells(uint32_t ctx);
/* What n slots hold (saturating). */
uint64_t slots_bytes(const slots_in_t *in, unsigned n);
/* The slots a load gets: `want` when given (clamped to 1..SLOTS_MAX), else the most in
 * 1..SLOTS_AUTO_MAX that fit `room` (1 when none does: fits is false). */
slots_t slots_size(const slots_in_t *in);
/* The need the mesh plans with: the slots asked for, else one. */
uint64_t slots_need(const slots_in_t *in);

/* LOAD. A serving node announces each model's `busy` — the requests its server has in flight or
 * queued for it (view.h) — and entry nodes send new requests to the replica with a free slot, the
 * least loaded (route_decide.h). Announcements are signed and gossiped to every node, so load is
 * re-announced only when its class changes, at most once per SLOTS_LOAD_ANN_MS: the exact count
 * while a slot is free (every free slot counts), then "full" plus a power-of-two bucket of the
 * queue (1, 2-3, 4-7, …): routing needs "has a free slot" at once and the queue's order of
 * magnitude, not each arrival in it. */
#define SLOTS_LOAD_ANN_MS 1000
uint32_t slots_load_class(uint32_t busy, uint32_t slots); /* slots 0: one */

#endif
