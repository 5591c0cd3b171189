/* Unit tests for src/core/slots.h: the slot count a load gets and what it holds — a table of
 * memory situations. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "ledger.h"
#include "slots.h"

#define MB (1000ull * 1000)
#define NO_LIMIT UINT64_MAX

typedef struct {
    const char *what;
    slots_in_t in;
    unsigned slots;
    uint64_t bytes;
    bool fits;
    uint64_t need;
} scase_t;

/* weights 1000 MB: the 10 % margin is 100 MB; kv 200 MB a slot */
/* clang-format off */
static const scase_t cases[] = {
    {"room for four: four (llama-server's own count)", {1000 * MB, 200 * MB, 0, 0, 10000 * MB},
     4, 1800 * MB, true, 1200 * MB},
    {"no limit known: four", {1000 * MB, 200 * MB, 0, 0, NO_LIMIT}, 4, 1800 * MB, true,
     1200 * MB},
    {"room for two and a half: two", {1000 * MB, 200 * MB, 0, 0, 1500 * MB}, 2, 1400 * MB, true,
     1200 * MB},
    {"exactly three", {1000 * MB, 200 * MB, 0, 0, 1600 * MB}, 3, 1600 * MB, true, 1200 * MB},
    {"room for one: one", {1000 * MB, 200 * MB, 0, 0, 1200 * MB}, 1, 1200 * MB, true, 1200 * MB},
    {"not even one: one that does not fit", {1000 * MB, 200 * MB, 0, 0, 1100 * MB}, 1, 1200 * MB,
     false, 1200 * MB},
    {"asked for eight: eight, whatever the room", {1000 * MB, 200 * MB, 0, 8, 1500 * MB}, 8,
     2600 * MB, false, 2600 * MB},
    {"asked for one with room for four: one", {1000 * MB, 200 * MB, 0, 1, NO_LIMIT}, 1, 1200 * MB,
     true, 1200 * MB},
    {"asked for more than the bound: the bound", {1000 * MB, 1 * MB, 0, 1000, NO_LIMIT},
     SLOTS_MAX, 1100 * MB, true, 1100 * MB},
    /* a small KV cache: the 10 % margin covers a few slots */
    {"KV inside the margin: four cost the margin", {1000 * MB, 10 * MB, 0, 0, 1100 * MB}, 4,
     1100 * MB, true, 1100 * MB},
    {"the compute buffer counts once", {1000 * MB, 200 * MB, 100 * MB, 0, 1700 * MB}, 3,
     1700 * MB, true, 1300 * MB},
    {"unknown shape (no KV): four within the margin", {1000 * MB, 0, 0, 0, 1100 * MB}, 4,
     1100 * MB, true, 1100 * MB},
    {"saturating: two slots of a huge KV overflow, one does not", {1000 * MB, UINT64_MAX / 2, 0,
     0, NO_LIMIT - 1}, 1, 1000 * MB + UINT64_MAX / 2, true, 1000 * MB + UINT64_MAX / 2},
    {"saturating: asked for two of them", {1000 * MB, UINT64_MAX / 2, 0, 2, NO_LIMIT - 1}, 2,
     UINT64_MAX, false, UINT64_MAX},
};
/* clang-format on */

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const scase_t *c = &cases[i];
        slots_t s = slots_size(&c->in);
        if (s.slots != c->slots || s.bytes != c->bytes || s.fits != c->fits)
            fail_msg("%s: %u slots, %llu bytes, fits %d; expected %u, %llu, %d", c->what, s.slots,
                     (unsigned long long)s.bytes, s.fits, c->slots, (unsigned long long)c->bytes,
                     c->fits);
        uint64_t need = slots_need(&c->in);
        if (need != c->need)
            fail_msg("%s: need %llu, expected %llu", c->what, (unsigned long long)need,
                     (unsigned long long)c->need);
    }
}

/* The bytes of n slots grow by one slot's KV once it is past the margin, and n = 0 is one. */
static void test_bytes(void **state)
{
    (void)state;
    slots_in_t in = {1000 * MB, 200 * MB, 0, 0, NO_LIMIT};
    assert_int_equal(slots_bytes(&in, 0), slots_bytes(&in, 1));
    for (unsigned n = 1; n < 8; n++)
        assert_int_equal(slots_bytes(&in, n + 1) - slots_bytes(&in, n), 200 * MB);
    assert_int_equal(slots_bytes(&in, 1), ledger_need(1000 * MB, 200 * MB));
}

static void test_ctx_cells(void **state)
{
    (void)state;
    const uint32_t in[] = {0, 1, 128, 255, 256, 257, 1000, 4096, UINT32_MAX};
    const uint32_t want[] = {0, 256, 256, 256, 256, 512, 1024, 4096, UINT32_MAX};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (slots_ctx_cells(in[i]) != want[i])
            fail_msg("%u tokens: %u cells, expected %u", in[i], slots_ctx_cells(in[i]), want[i]);
}

/* The load class: exact while a slot is free, then full + a power-of-two bucket of the queue. */
static void test_load_class(void **state)
{
    (void)state;
    static const struct {
        uint32_t busy, slots, want;
    } rows[] = {
        {0, 4, 0}, {1, 4, 1},  {3, 4, 3},
        {4, 4, 4},                         /* full, nothing queued */
        {5, 4, 5}, {6, 4, 6},  {7, 4, 6},  /* a queue of 2 and 3: one bucket */
        {8, 4, 7}, {11, 4, 7}, {12, 4, 8}, /* 4-7, then 8-15 */
        {0, 0, 0}, {1, 0, 1},  {2, 0, 2},  /* unknown slots: one */
        {0, 1, 0}, {1, 1, 1},  {UINT32_MAX, 1, 1 + 32},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        uint32_t got = slots_load_class(rows[i].busy, rows[i].slots);
        if (got != rows[i].want)
            fail_msg("case %zu: busy %u of %u slots: class %u, want %u", i, rows[i].busy,
                     rows[i].slots, got, rows[i].want);
    }
    /* a free slot is always told apart from a full server */
    for (uint32_t slots = 1; slots <= 64; slots++)
        for (uint32_t busy = 0; busy < 200; busy++)
            assert_int_equal(slots_load_class(busy, slots) < slots, busy < slots);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctx_cells),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_load_class),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
