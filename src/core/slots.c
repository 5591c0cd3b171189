/* slots — see slots.h. */
#include "slots.h"

#include "ledger.h"

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t n)
{
    return n && a > UINT64_MAX / n ? UINT64_MAX : a * n;
}

static unsigned clamp_want(unsigned want)
{
    return want > SLOTS_MAX ? SLOTS_MAX : want;
}

uint32_t slots_ctx_cells(uint32_t ctx)
{
    uint64_t c = ((uint64_t)ctx + SLOTS_CTX_PAD - 1) / SLOTS_CTX_PAD * SLOTS_CTX_PAD;
    return c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
}

uint64_t slots_bytes(const slots_in_t *in, unsigned n)
{
    return ledger_need(in->weights, sat_add(sat_mul(in->kv_slot, n ? n : 1), in->compute));
}

slots_t slots_size(const slots_in_t *in)
{
    unsigned n = clamp_want(in->want);
    if (!n) {
        n = 1;
        for (unsigned k = SLOTS_AUTO_MAX; k > 1; k--)
            if (slots_bytes(in, k) <= in->room) {
                n = k;
                break;
            }
    }
    uint64_t b = slots_bytes(in, n);
    return (slots_t){.slots = n, .bytes = b, .fits = b <= in->room};
}

uint64_t slots_need(const slots_in_t *in)
{
    return slots_bytes(in, clamp_want(in->want));
}

uint32_t slots_load_class(uint32_t busy, uint32_t slots)
{
    if (!slots) slots = 1;
    if (busy < slots) return busy;
    uint32_t q = busy - slots, bucket = 0;
    while (q) {
        bucket++;
        q >>= 1;
    }
    return slots + bucket;
}
