/* Unit tests for the memory ledger (src/core/ledger.h) and the model manager's use of it (mm.h with
 * mm_set_ledger): arithmetic, KV estimates, and the load decisions memory drives. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ledger.h"
#include "mm.h"

#define MB 1000000ULL

/* ---- ledger arithmetic ---- */

static void test_arithmetic(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l, 100 * MB);
    assert_int_equal(ledger_free(&l), 100 * MB);
    assert_int_equal(ledger_set(&l, "a", LEDGER_MODEL, 30 * MB, true), 0);
    assert_int_equal(ledger_set(&l, "b", LEDGER_WORKER, 20 * MB, false), 0);
    assert_int_equal(ledger_set(&l, "a", LEDGER_WORKER, 5 * MB, false), 0);
    assert_int_equal(ledger_held(&l), 55 * MB);
    assert_int_equal(ledger_free(&l), 45 * MB);
    assert_int_equal(ledger_held_kind(&l, LEDGER_WORKER), 25 * MB);
    assert_int_equal(ledger_held_for(&l, "a"), 35 * MB);
    /* a group is offered what is free plus what the node holds for that model already */
    assert_int_equal(ledger_offer_for(&l, "a"), 80 * MB);
    assert_int_equal(ledger_offer_for(&l, "b"), 65 * MB);
    assert_int_equal(ledger_offer_for(&l, "other"), 45 * MB);
    /* replacing an entry changes, never adds */
    assert_int_equal(ledger_set(&l, "a", LEDGER_MODEL, 10 * MB, false), 0);
    assert_int_equal(ledger_held(&l), 35 * MB);
    assert_false(ledger_get(&l, "a", LEDGER_MODEL)->loading);
    ledger_clear(&l, "a", LEDGER_MODEL);
    ledger_clear(&l, "a", LEDGER_MODEL); /* twice: no-op */
    ledger_clear(&l, "nope", LEDGER_WORKER);
    assert_int_equal(ledger_held(&l), 25 * MB);
    assert_null(ledger_get(&l, "a", LEDGER_MODEL));
    /* over-commitment never makes free negative */
    assert_int_equal(ledger_set(&l, "huge", LEDGER_MODEL, 500 * MB, false), 0);
    assert_int_equal(ledger_free(&l), 0);
    assert_int_equal(ledger_offer_for(&l, "huge"), 100 * MB); /* capped at the offer */
    /* saturation */
    assert_int_equal(ledger_set(&l, "max", LEDGER_MODEL, UINT64_MAX, false), 0);
    assert_int_equal(ledger_held(&l), UINT64_MAX);
}

static void test_bad_entries(void **state)
{
    (void)state;
    ledger_t l;
    ledger_init(&l, 1);
    char longname[LEDGER_NAME_MAX + 1];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(ledger_set(&l, longname, LEDGER_MODEL, 1, false), -EINVAL);
    assert_int_equal(ledger_set(&l, "", LEDGER_MODEL, 1, false), -EINVAL);
    assert_int_equal(ledger_set(&l, NULL, LEDGER_MODEL, 1, false), -EINVAL);
    assert_int_equal(ledger_set(&l, "k", (ledger_kind_t)7, 1, false), -EINVAL);
    for (int i = 0; i < LEDGER_MAX; i++) {
        char n[16];
        snprintf(n, sizeof n, "m%d", i);
        assert_int_equal(ledger_set(&l, n, LEDGER_MODEL, 1, false), 0);
    }
    assert_int_equal(ledger_set(&l, "one-more", LEDGER_MODEL, 1, false), -ENOSPC);
    assert_int_equal(ledger_set(&l, "m3", LEDGER_MODEL, 2, false), 0); /* update still works */
    assert_int_equal(ledger_held(&l), LEDGER_MAX + 1);
}

static void test_kv_and_need(void **state)
{
    (void)state;
    /* stories260K: 5 layers, n_embd 64, 8 heads, 4 KV heads, trained context 512 */
    ledger_shape_t s = {.n_layers = 5, .n_embd = 64, .n_head = 8, .n_head_kv = 4};
    /* per token and layer: (8 + 8) dims × 4 heads × 2 bytes = 128 bytes */
    assert_int_equal(ledger_kv_bytes(&s, 512), 512ULL * 5 * 128);
    assert_int_equal(ledger_kv_bytes(&s, 0), 0);
    /* explicit key/value lengths win over n_embd / n_head */
    s.key_length = 32;
    s.value_length = 16;
    assert_int_equal(ledger_kv_bytes(&s, 10), 10ULL * 5 * (32 + 16) * 4 * 2);
    /* no KV heads given: as many as attention heads */
    ledger_shape_t g = {.n_layers = 32, .n_embd = 4096, .n_head = 32};
    assert_int_equal(ledger_kv_bytes(&g, 4096), 4096ULL * 32 * 4096 * 2 * 2); /* 2 GiB */
    ledger_shape_t unknown = {0};
    assert_int_equal(ledger_kv_bytes(&unknown, 4096), 0);
    /* cache types: F32 K doubles K, Q8_0 V takes 34 bytes per 32 elements */
    assert_int_equal(ledger_kv_bytes_as(&g, 4096, 64, 64), ledger_kv_bytes(&g, 4096));
    assert_int_equal(ledger_kv_bytes_as(&g, 4096, 128, 34),
                     4096ULL * 32 * 4096 * 4 + 4096ULL * 32 * 4096 / 32 * 34);
    /* a micro-batch above the default adds its attention scores; the default adds nothing */
    assert_int_equal(ledger_compute_bytes(&g, 4096, 512), 0);
    assert_int_equal(ledger_compute_bytes(&g, 4096, 2048), 1536ULL * 4096 * 32 * 4);
    assert_int_equal(ledger_compute_bytes(&unknown, 4096, 2048), 0);
    assert_int_equal(ledger_compute_bytes(&g, 1024, 8192), 512ULL * 1024 * 32 * 4);
    /* need: the 1.1 × rule, raised by a KV cache larger than the 10 % margin */
    assert_int_equal(ledger_need(1000, 0), 1100);
    assert_int_equal(ledger_need(1001, 0), 1102); /* ceil */
    assert_int_equal(ledger_need(1000, 50), 1100);
    assert_int_equal(ledger_need(1000, 500), 1500);
    assert_int_equal(ledger_need(UINT64_MAX - 1, 10), UINT64_MAX);
    /* host bytes (election.h): the draft and projector files, the input layer, and the output
     * layer only with --split-private */
    static const struct {
        uint64_t serve, in, out;
        bool priv;
        uint64_t want;
    } hb[] = {
        {0, 0, 0, false, 0},
        {500, 0, 0, false, 500}, /* a draft, layers unknown */
        {500, 131072, 131328, false, 500 + 131072},
        {500, 131072, 131328, true, 500 + 131072 + 131328},
        {0, 131072, 131328, true, 131072 + 131328},
        {UINT64_MAX, 1, 1, true, UINT64_MAX}, /* saturates */
    };
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++)
        assert_int_equal(ledger_host_bytes(hb[i].serve, hb[i].in, hb[i].out, hb[i].priv),
                         hb[i].want);
    char b[32];
    assert_string_equal(ledger_fmt(1300000, b, sizeof b), "1.30 MB");
    assert_string_equal(ledger_fmt(700, b, sizeof b), "0.7 kB");
}

/* ---- the model manager under a memory budget ---- */

static mm_t g_mm;
static ledger_t g_l;

static const char *drain(mm_t *mm)
{
    static char buf[4096];
    size_t len = 0;
    buf[0] = '\0';
    mm_action_t a;
    while (mm_next_action(mm, &a)) {
        const char *k = a.kind == MM_ACT_LOAD     ? "LOAD"
                        : a.kind == MM_ACT_UNLOAD ? "UNLOAD"
                        : a.kind == MM_ACT_SERVE  ? "SERVE"
                                                  : "FAIL";
        len += (size_t)snprintf(
            buf + len, sizeof buf - len, "%s%s %s%s", len ? "; " : "", k, a.model->name,
            a.kind == MM_ACT_FAIL && a.reason == MM_FAIL_MEMORY ? " memory" : "");
    }
    return buf;
}

#define EXPECT(s) assert_string_equal(drain(&g_mm), (s))

static mm_model_t *model(const char *name, mm_type_t type, uint64_t bytes)
{
    mm_model_t *m = mm_add(&g_mm, name, type, MM_DEV_CPU);
    assert_non_null(m);
    mm_set_bytes(m, bytes);
    return m;
}

static void setup_mm(uint64_t offered, unsigned slots)
{
    const unsigned max[MM_N_TYPES] = {slots, slots, slots};
    mm_init(&g_mm, max);
    ledger_init(&g_l, offered);
    mm_set_ledger(&g_mm, &g_l);
}

static void loaded(mm_model_t *m, uint64_t t)
{
    mm_load(&g_mm, m, t);
    char want[160];
    snprintf(want, sizeof want, "LOAD %s", m->name);
    EXPECT(want);
    assert_int_equal(ledger_get(&g_l, m->name, LEDGER_MODEL)->bytes, m->bytes);
    assert_true(ledger_get(&g_l, m->name, LEDGER_MODEL)->loading);
    mm_load_done(&g_mm, m, true, false, t);
    EXPECT("");
    assert_false(ledger_get(&g_l, m->name, LEDGER_MODEL)->loading);
}

/* models_preload's rule: a model fits beside what the ones queued before it hold, in bytes,
 * within the offer minus worker shards. */
static void test_fits_beside(void **state)
{
    (void)state;
    setup_mm(3 * MB, 2);
    mm_model_t *m = model("m", MM_LLM, 1 * MB);
    const struct {
        uint64_t beside;
        bool fits;
    } rows[] = {
        {0, true}, {2 * MB, true}, {2 * MB + 1, false}, {3 * MB, false}, {UINT64_MAX, false}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        assert_int_equal(mm_fits_beside(&g_mm, m, rows[i].beside), rows[i].fits);
    /* worker shards take from the budget */
    ledger_set(&g_l, "shard", LEDGER_WORKER, 1 * MB, false);
    assert_true(mm_fits_beside(&g_mm, m, 1 * MB));
    assert_false(mm_fits_beside(&g_mm, m, 1 * MB + 1));
    /* beyond the budget alone: never, whatever beside it */
    mm_model_t *big = model("big", MM_LLM, 2 * MB + 1);
    assert_false(mm_fits_beside(&g_mm, big, 0));
    assert_false(mm_can_fit(&g_mm, big));
    /* a model of unknown size (0 bytes) is not held back */
    mm_model_t *unk = model("unk", MM_LLM, 0);
    assert_true(mm_fits_beside(&g_mm, unk, UINT64_MAX));
}

static void test_too_big_fails_at_once(void **state)
{
    (void)state;
    /* --max-vram 0.7 MB, a 1.2 MB model: the request fails, nothing is started or evicted */
    setup_mm(700000, 3);
    mm_model_t *small = model("small", MM_LLM, 300000);
    mm_model_t *big = model("big", MM_LLM, 1300000);
    loaded(small, 1);
    assert_false(mm_can_fit(&g_mm, big));
    assert_int_equal(mm_request_begin(&g_mm, big, 2), MM_WAIT);
    EXPECT("FAIL big memory");
    assert_int_equal(big->state, MM_UNLOADED);
    assert_int_equal(small->state, MM_LOADED);
    assert_null(ledger_get(&g_l, "big", LEDGER_MODEL));
    /* an explicit load of it too (no waiting request: count 0, still a FAIL for the driver) */
    mm_load(&g_mm, big, 3);
    EXPECT("FAIL big memory");
    /* and the queue moves on */
    mm_model_t *other = model("other", MM_EMBEDDING, 100000);
    assert_int_equal(mm_request_begin(&g_mm, other, 4), MM_WAIT);
    EXPECT("LOAD other");
}

static void test_evicts_idle_of_any_type(void **state)
{
    (void)state;
    /* 10 MB; slots would allow all three, memory does not */
    setup_mm(10 * MB, 3);
    mm_model_t *a = model("a", MM_LLM, 4 * MB);
    mm_model_t *e = model("e", MM_EMBEDDING, 4 * MB);
    mm_model_t *c = model("c", MM_LLM, 5 * MB);
    loaded(a, 1);
    loaded(e, 2);
    assert_int_equal(ledger_free(&g_l), 2 * MB);
    /* c needs 5: the least recently used idle model goes (a, an llm; e is another type) */
    assert_int_equal(mm_request_begin(&g_mm, c, 3), MM_WAIT);
    EXPECT("UNLOAD a");
    mm_unload_done(&g_mm, a, 4);
    EXPECT("LOAD c");
    assert_int_equal(ledger_held(&g_l), 9 * MB);
    mm_load_done(&g_mm, c, true, false, 5);
    EXPECT("SERVE c");
    /* now a again: e is idle and older than c, c is busy (serving): e goes */
    assert_int_equal(mm_request_begin(&g_mm, a, 6), MM_WAIT);
    EXPECT("UNLOAD e");
    mm_unload_done(&g_mm, e, 7);
    EXPECT("LOAD a");
}

static void test_busy_models_are_waited_for(void **state)
{
    (void)state;
    setup_mm(10 * MB, 3);
    mm_model_t *a = model("a", MM_LLM, 6 * MB);
    mm_model_t *b = model("b", MM_EMBEDDING, 6 * MB);
    loaded(a, 1);
    assert_int_equal(mm_request_begin(&g_mm, a, 2), MM_SERVE_NOW);
    /* b fits once a is gone, but a is busy: b waits, a is not evicted */
    assert_int_equal(mm_request_begin(&g_mm, b, 3), MM_WAIT);
    EXPECT("");
    assert_int_equal(a->state, MM_LOADED);
    mm_request_end(&g_mm, a, 4);
    EXPECT("UNLOAD a");
    mm_unload_done(&g_mm, a, 5);
    EXPECT("LOAD b");
}

static void test_worker_shards_count(void **state)
{
    (void)state;
    /* a split worker's shard holds 6 of 10 MB: a 5 MB model can not load beside it */
    setup_mm(10 * MB, 3);
    mm_model_t *m = model("m", MM_LLM, 5 * MB);
    assert_int_equal(ledger_set(&g_l, "split", LEDGER_WORKER, 6 * MB, false), 0);
    assert_false(mm_can_fit(&g_mm, m));
    assert_int_equal(mm_request_begin(&g_mm, m, 1), MM_WAIT);
    EXPECT("FAIL m memory");
    /* the role ends: it fits */
    ledger_clear(&g_l, "split", LEDGER_WORKER);
    assert_true(mm_can_fit(&g_mm, m));
    assert_int_equal(mm_request_begin(&g_mm, m, 2), MM_WAIT);
    EXPECT("LOAD m");
}

static void test_failed_load_releases(void **state)
{
    (void)state;
    setup_mm(10 * MB, 1);
    mm_model_t *m = model("m", MM_LLM, 5 * MB);
    mm_load(&g_mm, m, 1);
    EXPECT("LOAD m");
    assert_int_equal(ledger_held(&g_l), 5 * MB);
    mm_load_done(&g_mm, m, false, true, 2); /* file missing */
    EXPECT("");
    assert_int_equal(ledger_held(&g_l), 0);
    /* unknown size (0): not accounted, loads as before */
    mm_model_t *u = model("u", MM_RERANKING, 0);
    mm_load(&g_mm, u, 3);
    EXPECT("LOAD u");
    assert_null(ledger_get(&g_l, "u", LEDGER_MODEL));
}

/* Partial offload (--offload-ram): the layers that go on the devices. Table: need, layers, free
 * device memory → -1 (all: llama.cpp's own placement) or the count on the devices. */
static void test_gpu_layers(void **state)
{
    (void)state;
    static const struct {
        uint64_t need;
        uint32_t layers;
        uint64_t on_device;
        int want;
    } rows[] = {
        {1000, 32, 1000, -1},                 /* fits exactly */
        {1000, 32, 5000, -1},                 /* fits */
        {1000, 32, 500, 16},                  /* half the memory: half the layers */
        {1000, 32, 999, 31},                  /* nearly: never all (that would not fit) */
        {1000, 32, 0, 0},                     /* no device memory left: all on the CPU */
        {1000, 5, 600, 3},                    /* floor(5 x 0.6) */
        {1320000, 5, 790000, 2},              /* floor(5 x 0.598...) */
        {1000, 0, 500, 0},                    /* unknown layer count: none on the devices */
        {1000, 0, 2000, -1},                  /* ... unless it all fits */
        {UINT64_MAX, 80, UINT64_MAX / 4, 20}, /* no overflow */
        {0, 10, 0, -1},                       /* nothing needed fits */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int got = ledger_gpu_layers(rows[i].need, rows[i].layers, rows[i].on_device);
        if (got != rows[i].want) fail_msg("row %zu: got %d, want %d", i, got, rows[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_bad_entries),
        cmocka_unit_test(test_kv_and_need),
        cmocka_unit_test(test_too_big_fails_at_once),
        cmocka_unit_test(test_evicts_idle_of_any_type),
        cmocka_unit_test(test_busy_models_are_waited_for),
        cmocka_unit_test(test_worker_shards_count),
        cmocka_unit_test(test_failed_load_releases),
        cmocka_unit_test(test_gpu_layers),
        cmocka_unit_test(test_fits_beside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
