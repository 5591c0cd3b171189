/* models_slots — a model's parallel slots on this node (core/slots.h's rule over the model's
 * file, its llama-server arguments and this node's ledger).
 *
 * The node sizes the slots of a model it runs whole (a replica, solo or one of several) when
 * its own arguments leave that to it: no --ctx-size/-c among its llamacpp_args (then the
 * operator or the loading client set llama-server's total context themselves, and llama.cpp's
 * automatic count, 4 slots sharing that context, stays) and the context per slot is known
 * (--ctx-size, else the model's trained context). A split host keeps llama.cpp's automatic
 * count too: its KV cache lives on its workers, whose memory its ledger does not hold. */
#ifndef MESH_MODELS_SLOTS_H
#define MESH_MODELS_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "models.h"
#include "slots.h"

/* Whether the node sizes e's slots (above). */
bool models_slots_sized(const model_entry_t *e);
/* The slots asked for e: --slots or its config entry (e->want_slots), else a -np among its
 * llamacpp_args; 0: as many as fit. */
unsigned models_slots_wanted(const model_entry_t *e);
/* The context of one slot (tokens): --ctx-size, else the model's own; 0 unknown. */
uint32_t models_slot_ctx(const model_entry_t *e);
/* core/slots.h's input for e with `room` bytes free for it. */
slots_in_t models_slots_in(const models_t *ms, const model_entry_t *e, uint64_t room);
/* Called as e's llama-server is about to start: sizes its slots from the memory free for it now
 * (the model budget less what the other models hold, and less the need of the --model entries
 * not loaded yet, so spare slots never take a startup model's place), holds their bytes in the
 * ledger and sets e->slots. Not sized: e->slots is llama.cpp's count. */
void models_slots_size(models_t *ms, model_entry_t *e);
/* e's llama-server stopped or failed to start: no slots (models_update_bytes then gives it back
 * its planned need). */
void models_slots_reset(model_entry_t *e);
/* The parallel slots of e's llama-server (running: what it was started with; else what it
 * would get: the slots asked for, else llama.cpp's automatic 4). Admission, the announcement
 * and the status use it. */
unsigned models_slots(const model_entry_t *e);
/* The requests e's server has in flight or queued for it here (mm's in_flight + pending: the
 * announcement's `busy`, slots.h's LOAD), at most VIEW_MAX_BUSY. */
uint32_t models_busy(const model_entry_t *e);
/* Its slots not taken now (models_slots less models_busy, at least 0). */
unsigned models_free_slots(const model_entry_t *e);

#endif
