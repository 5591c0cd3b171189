/* Unit tests for src/core/stage.h: the EMA update, the outlier bound, per-layer time, the
 * effective speed, and the layer split those speeds give (layer_split.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layer_split.h"
#include "stage.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

typedef struct {
    const char *what;
    uint32_t slots;
    size_t n;
    double windows[8]; /* each fed as STAGE_WINDOW equal samples */
    double rtt;
    int taken;    /* samples taken */
    double ema;   /* expected EMA after them */
    double layer; /* expected per-layer time */
} scase_t;

/* clang-format off */
static const scase_t cases[] = {
    {"first window sets the EMA", 2, 1, {10}, -1, 8, 10, 5},
    {"RTT subtracted", 2, 1, {10}, 4, 8, 6, 3},
    {"RTT above the sample: 0", 2, 1, {3}, 4, 8, 0, 0},
    {"EMA by alpha 0.2", 1, 2, {10, 20}, -1, 16, 12, 12},
    {"no slot: nothing taken", 0, 2, {10, 20}, -1, 0, 0, 0},
    {"negative and too large samples dropped", 1, 3, {-1, 60001, 5}, -1, 8, 5, 5},
    /* 2 warm windows of 10, then 1000 is clamped to 40: 0.2 * 40 + 0.8 * 10 = 16 */
    {"outlier bound above, once warm", 1, 3, {10, 10, 1000}, -1, 24, 16, 16},
    /* then 0 is clamped to 10/4 = 2.5: 0.2 * 2.5 + 0.8 * 10 = 8.5 */
    {"outlier bound below, once warm", 1, 3, {10, 10, 0}, -1, 24, 8.5, 8.5},
    {"not warm: no bound", 1, 2, {10, 1000}, -1, 16, 208, 208},
};
/* clang-format on */

static void test_ema_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const scase_t *c = &cases[i];
        stage_ema_t e = {0};
        stage_set_slots(&e, c->slots);
        int taken = 0;
        for (size_t k = 0; k < c->n; k++)
            for (int j = 0; j < STAGE_WINDOW; j++)
                taken += stage_note(&e, c->windows[k], c->rtt);
        if (taken != c->taken) fail_msg("%s: %d taken, expected %d", c->what, taken, c->taken);
        if (c->taken && !NEAR(e.ema_ms, c->ema))
            fail_msg("%s: EMA %g, expected %g", c->what, e.ema_ms, c->ema);
        if (!NEAR(stage_layer_ms(&e), c->layer))
            fail_msg("%s: per layer %g, expected %g", c->what, stage_layer_ms(&e), c->layer);
    }
}

static void feed(stage_ema_t *e, double ms, int n)
{
    for (int i = 0; i < n; i++)
        assert_true(stage_note(e, ms, -1));
}

/* A window's mean, not single samples: a partial window changes nothing yet; a worker that
 * stalls on one token in four (a spent CPU quota) shows its mean, which single clamped samples
 * would cut off at 4x. */
static void test_windows(void **state)
{
    (void)state;
    stage_ema_t e = {0};
    stage_set_slots(&e, 1);
    feed(&e, 2, STAGE_WINDOW - 1);
    assert_int_equal(e.windows, 0);
    assert_true(stage_layer_ms(&e) == 0);
    assert_true(stage_note(&e, 10, -1)); /* (7 x 2 + 10) / 8 = 3 */
    assert_int_equal(e.windows, 1);
    assert_true(NEAR(e.ema_ms, 3));
    stage_ema_t t = {0};
    stage_set_slots(&t, 1);
    feed(&t, 2, 4 * STAGE_WINDOW); /* at full speed: 2 ms */
    for (int i = 0; i < 40 * STAGE_WINDOW; i++)
        assert_true(stage_note(&t, i % 4 == 3 ? 98 : 2, -1)); /* mean 26 ms */
    assert_true(fabs(t.ema_ms - 26) < 0.5);
    assert_int_equal(stage_speed(&t, 1000), 77); /* 1000 x 2 / 26 */
}
static void test_baseline_and_speed(void **state)
{
    (void)state;
    stage_ema_t e = {0};
    stage_set_slots(&e, 2);
    assert_int_equal(stage_speed(&e, 1000), 1000); /* nothing seen: calibrated */
    feed(&e, 4, STAGE_BASE_SAMPLES - 1);
    assert_true(e.base_layer_ms == 0);
    assert_int_equal(e.total, STAGE_BASE_SAMPLES - 1);
    assert_int_equal(stage_speed(&e, 1000), 1000);
    feed(&e, 4, 1);
    assert_true(NEAR(e.base_layer_ms, 2)); /* 4 ms over 2 slots */
    assert_int_equal(stage_speed(&e, 1000), 1000);
    /* a new layout: 1 slot, the EMA starts again, the baseline stays */
    stage_set_slots(&e, 1);
    assert_int_equal(e.samples, 0);
    assert_true(NEAR(e.base_layer_ms, 2));
    feed(&e, 8, STAGE_MIN_SAMPLES - 1);
    assert_int_equal(stage_speed(&e, 1000), 1000); /* too few for this layout */
    feed(&e, 8, 1);
    assert_int_equal(stage_speed(&e, 1000), 250); /* 8 ms per layer against 2: a quarter */
    stage_set_slots(&e, 1);                       /* the same: nothing restarts */
    assert_int_equal(e.samples, STAGE_MIN_SAMPLES);
    assert_int_equal(stage_speed(&e, 0), 0); /* unknown stays unknown */
    /* much slower: never below 1 */
    stage_ema_t s = {
        .slots = 1, .samples = STAGE_MIN_SAMPLES, .windows = 2, .ema_ms = 1e6, .base_layer_ms = 1};
    assert_int_equal(stage_speed(&s, 100), 1);
    /* an EMA of 0: as fast as anything measured */
    s.ema_ms = 0;
    assert_int_equal(stage_speed(&s, 100), LS_SPEED_MAX);
    assert_int_equal(stage_speed(NULL, 100), 100);
    assert_false(stage_note(NULL, 1, 1));
}

/* The baseline follows the worker at its best: a start taken while it was busy is lowered once
 * it runs faster, a slower time never raises it. */
static void test_baseline_is_the_best(void **state)
{
    (void)state;
    stage_ema_t e = {0};
    stage_set_slots(&e, 1);
    feed(&e, 8, STAGE_BASE_SAMPLES); /* busy at first: 8 ms */
    assert_true(NEAR(e.base_layer_ms, 8));
    feed(&e, 2, 40 * STAGE_WINDOW); /* then at its best */
    assert_true(e.base_layer_ms < 2.01);
    assert_int_equal(stage_speed(&e, 1000), 1000);
    double best = e.base_layer_ms;
    feed(&e, 6, 40 * STAGE_WINDOW); /* slowed down: the baseline stays, the speed falls */
    assert_true(e.base_layer_ms == best);
    assert_true(stage_speed(&e, 1000) < 340);
    /* a new layout's first samples do not move it */
    stage_set_slots(&e, 2);
    feed(&e, 1, STAGE_MIN_SAMPLES - 1);
    assert_true(e.base_layer_ms == best);
}

/* The split from observed speeds: three members offer 3, 2 and 2 slots of 6; with the
 * calibrated speeds equal the rule keeps the memory-proportional split (0); once worker 2's stage
 * time is 5x its baseline it is 5x slower and keeps one slot, the host takes its third. */
static void test_split_from_speeds(void **state)
{
    (void)state;
    stage_ema_t w1 = {0}, w2 = {0};
    stage_set_slots(&w1, 2);
    stage_set_slots(&w2, 2);
    feed(&w1, 2, STAGE_BASE_SAMPLES);
    feed(&w2, 2, STAGE_BASE_SAMPLES);
    ls_node_t n[3] = {{2, stage_speed(&w1, 1000)}, {2, stage_speed(&w2, 1000)}, {3, 1000}};
    uint32_t counts[3] = {0};
    assert_int_equal(layer_split_speed(n, 3, 6, 1, counts), 0);
    /* worker 2 slows down: the bounded EMA climbs to 10 ms within a few dozen windows */
    feed(&w2, 10, 40 * STAGE_WINDOW);
    assert_true(fabs(w2.ema_ms - 10) < 0.01);
    n[1].speed_mflops = stage_speed(&w2, 1000);
    assert_int_equal(n[1].speed_mflops, 200);
    assert_int_equal(layer_split_speed(n, 3, 6, 1, counts), 1);
    assert_int_equal(counts[0], 2);
    assert_int_equal(counts[1], 1);
    assert_int_equal(counts[2], 3);
    /* and it costs less per token than the proportional split */
    uint32_t prop[3] = {2, 2, 2};
    assert_true(layer_split_cost(n, 3, counts) < layer_split_cost(n, 3, prop));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ema_table),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_baseline_is_the_best),
        cmocka_unit_test(test_baseline_and_speed),
        cmocka_unit_test(test_split_from_speeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
