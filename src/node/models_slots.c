/* models_slots — see models_slots.h. */
#include "models_slots.h"

#include <stdio.h>

#include "ledger.h"
#include "llama_args.h"
#include "log.h"
#include "view.h"

/* The arguments' memory flags in the order llama-server reads them (the last wins). */
static llama_mem_t mem_of(const model_entry_t *e)
{
    llama_mem_t mem = LLAMA_MEM_INIT;
    llama_args_memory(e->serve_args, &mem);
    llama_args_memory(e->llamacpp_args, &mem);
    return mem;
}

uint32_t models_slot_ctx(const model_entry_t *e)
{
    return e->ctx_size ? e->ctx_size : e->train_ctx;
}

bool models_slots_sized(const model_entry_t *e)
{
    if (e->mesh_args || e->host_share) return false;
    llama_mem_t mem = mem_of(e);
    return !mem.has_ctx && models_slot_ctx(e) > 0;
}

unsigned models_slots_wanted(const model_entry_t *e)
{
    llama_mem_t mem = mem_of(e);
    return mem.np ? mem.np : e->want_slots;
}

slots_in_t models_slots_in(const models_t *ms, const model_entry_t *e, uint64_t room)
{
    (void)ms;
    llama_mem_t mem = mem_of(e);
    uint32_t ctx = slots_ctx_cells(models_slot_ctx(e)); /* what llama.cpp allocates */
    uint64_t w = e->size + e->serve_bytes;
    return (slots_in_t){
        .weights = w < e->size ? UINT64_MAX : w,
        .kv_slot = ledger_kv_bytes_as(&e->shape, ctx, mem.k_x32, mem.v_x32),
        .compute = ledger_compute_bytes(&e->shape, ctx, llama_mem_ubatch(&mem)),
        .want = models_slots_wanted(e),
        .room = room,
    };
}

/* The memory free for e now: the model budget (the offer less worker shards) less what the other
 * models hold, less the need of the startup models that have not loaded yet. */
static uint64_t room_for(const models_t *ms, const model_entry_t *e)
{
    const ledger_t *l = &ms->ledger;
    uint64_t workers = ledger_held_kind(l, LEDGER_WORKER);
    uint64_t budget = l->offered > workers ? l->offered - workers : 0;
    const ledger_entry_t *mine = ledger_get(l, e->mm->name, LEDGER_MODEL);
    uint64_t others = ledger_held_kind(l, LEDGER_MODEL) - (mine ? mine->bytes : 0);
    for (size_t i = 0; i < ms->n; i++) {
        const model_entry_t *x = &ms->entries[i];
        if (x != e && !x->deleted && x->preload && x->mm->state == MM_UNLOADED && !x->waits_memory)
            others = others + x->mm->bytes < others ? UINT64_MAX : others + x->mm->bytes;
    }
    return budget > others ? budget - others : 0;
}

void models_slots_size(models_t *ms, model_entry_t *e)
{
    e->slot_ctx = 0;
    if (!models_slots_sized(e)) {
        unsigned want = models_slots_wanted(e);
        e->slots = want ? want : SLOTS_AUTO_MAX;
        return;
    }
    uint64_t room = ms->ledger.offered ? room_for(ms, e) : UINT64_MAX;
    slots_in_t in = models_slots_in(ms, e, room);
    slots_t s = slots_size(&in);
    e->slots = s.slots;
    e->slot_ctx = models_slot_ctx(e);
    char b[32], r[32] = "no limit";
    if (room != UINT64_MAX) ledger_fmt(room, r, sizeof r);
    LOGI("models",
         "model %s: %u parallel slot(s) of %u tokens (%s; it holds %s, %s was free "
         "for it)",
         e->mm->name, s.slots, e->slot_ctx, in.want ? "as set" : "as many as fit, up to 4",
         ledger_fmt(s.bytes, b, sizeof b), r);
    if (s.bytes != e->mm->bytes) {
        e->mm->bytes = s.bytes;
        if (ms->ledger.offered) ledger_set(&ms->ledger, e->mm->name, LEDGER_MODEL, s.bytes, true);
    }
}

void models_slots_reset(model_entry_t *e)
{
    e->slots = 0;
    e->slot_ctx = 0;
}

unsigned models_slots(const model_entry_t *e)
{
    if (e->slots) return e->slots;
    unsigned want = models_slots_wanted(e);
    return want ? want : SLOTS_AUTO_MAX;
}

uint32_t models_busy(const model_entry_t *e)
{
    uint64_t b = (uint64_t)e->mm->in_flight + e->mm->pending;
    return b > VIEW_MAX_BUSY ? VIEW_MAX_BUSY : (uint32_t)b;
}

unsigned models_free_slots(const model_entry_t *e)
{
    unsigned slots = models_slots(e);
    uint32_t busy = models_busy(e);
    return busy < slots ? slots - busy : 0;
}
