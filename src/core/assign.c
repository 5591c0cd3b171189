/* assign — see assign.h. */
#include "assign.h"

#include <string.h>

/* What the kept models (go KEEP, other than skip) use: loaded ones of the type, bytes held. */
static void kept_use(const assign_input_t *in, size_t n, size_t skip, const assign_result_t *r,
                     unsigned *same, uint64_t *held)
{
    *same = 0;
    *held = 0;
    for (size_t i = 0; i < n; i++) {
        const assign_held_t *h = &in->planned[i];
        if (i == skip || r->go[i] != ASSIGN_KEEP) continue;
        if (h->loaded && h->type == in->type) (*same)++;
        *held += h->bytes;
    }
}

/* The kept model that frees what is short (a slot: a loaded one of the type; memory: one that
 * holds some), assigned ones only when `assigned`; least recently used first. n when none. */
static size_t pick(const assign_input_t *in, size_t n, size_t skip, const assign_result_t *r,
                   bool for_slot, bool assigned)
{
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        const assign_held_t *h = &in->planned[i];
        if (i == skip || r->go[i] != ASSIGN_KEEP || h->assigned != assigned) continue;
        if (for_slot ? !(h->loaded && h->type == in->type) : h->bytes == 0) continue;
        if (best == n || h->last_use < in->planned[best].last_use) best = i;
    }
    return best;
}

void assign_decide(const assign_input_t *in, assign_result_t *out)
{
    memset(out, 0, sizeof *out);
    size_t n = in->n_planned < ASSIGN_MAX ? in->n_planned : ASSIGN_MAX, self = n;
    for (size_t i = 0; i < n && self == n; i++)
        if (strcmp(in->planned[i].name, in->model) == 0) self = i;
    out->already_planned = self < n;
    if (self < n && in->planned[self].assigned) {
        out->verdict = ASSIGN_ALREADY;
        return;
    }
    if (in->need_bytes > in->offer_bytes) {
        out->verdict = ASSIGN_TOO_BIG;
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (i != self && !in->planned[i].pinned && !in->planned[i].assigned)
            out->go[i] = ASSIGN_GO_MESH;
    unsigned slots = in->slots ? in->slots : 1;
    for (;;) {
        unsigned same;
        uint64_t held;
        kept_use(in, n, self, out, &same, &held);
        bool slot_ok = same < slots, mem_ok = held <= in->offer_bytes - in->need_bytes;
        if (slot_ok && mem_ok) return;
        size_t v = pick(in, n, self, out, !slot_ok, false);
        if (v == n) {
            out->in_the_way = pick(in, n, self, out, !slot_ok, true);
            out->verdict = ASSIGN_CONFLICT;
            memset(out->go, 0, sizeof out->go);
            return;
        }
        out->go[v] = slot_ok ? ASSIGN_GO_MEMORY : ASSIGN_GO_SLOT;
    }
}

const char *assign_go_name(assign_go_t g)
{
    static const char *const names[] = {"keep", "given_by_the_mesh", "slot_needed",
                                        "memory_needed"};
    return (size_t)g < sizeof names / sizeof names[0] ? names[g] : "?";
}

const char *assign_verdict_name(assign_verdict_t v)
{
    static const char *const names[] = {"ok", "already_assigned", "too_big", "conflict"};
    return (size_t)v < sizeof names / sizeof names[0] ? names[v] : "?";
}
