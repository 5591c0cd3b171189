/* Unit tests for src/core/layer_split.h: a table of layouts, and a brute-force check that the
 * greedy layout has the smallest sum of stage times among every layout memory allows. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_split.h"

typedef struct {
    const char *what;
    uint32_t slots;
    uint64_t slot_bytes;
    size_t n;
    ls_node_t nodes[4];
    int rc;
    uint32_t counts[4];
} lcase_t;

/* clang-format off */
static const lcase_t cases[] = {
    {"fast first to its cap, the slow one the rest", 10, 1, 2, {{8, 1000}, {8, 100}}, 1, {8, 2}},
    {"order does not matter, speed does", 10, 1, 2, {{8, 100}, {8, 1000}}, 1, {2, 8}},
    {"speed unknown on one: proportional (0)", 10, 1, 2, {{8, 1000}, {8, 0}}, 0, {0}},
    {"speeds within 1.5x: proportional (0)", 10, 1, 2, {{8, 1000}, {8, 667}}, 0, {0}},
    {"exactly 1.5x apart: speed-aware", 10, 1, 2, {{8, 150}, {8, 100}}, 1, {8, 2}},
    {"memory does not cover the slots: 0", 10, 1, 2, {{4, 1000}, {5, 100}}, 0, {0}},
    {"caps in slot units (floor)", 10, 3, 2, {{26, 1000}, {30, 100}}, 1, {8, 2}},
    {"every member keeps one slot", 10, 1, 3, {{10, 1000}, {10, 500}, {10, 100}}, 1, {8, 1, 1}},
    {"three, the middle one fills after the fastest", 10, 1, 3, {{4, 1000}, {5, 500}, {10, 100}},
     1, {4, 5, 1}},
    {"speed tie: lower index first", 10, 1, 3, {{8, 500}, {8, 500}, {8, 100}}, 1, {8, 1, 1}},
    {"more members than slots: no minimum", 2, 1, 3, {{4, 1000}, {4, 500}, {4, 100}}, 1,
     {2, 0, 0}},
    {"absurd speed claim: clamped, still only its memory", 10, 1, 2,
     {{3, UINT32_MAX}, {9, 100}}, 1, {3, 7}},
};
/* clang-format on */

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const lcase_t *c = &cases[i];
        uint32_t got[4] = {0};
        int rc = layer_split_speed(c->nodes, c->n, c->slots, c->slot_bytes, got);
        if (rc != c->rc) fail_msg("%s: rc %d, expected %d", c->what, rc, c->rc);
        if (rc == 1 && memcmp(got, c->counts, c->n * sizeof got[0]) != 0)
            fail_msg("%s: %u,%u,%u expected %u,%u,%u", c->what, got[0], got[1], got[2],
                     c->counts[0], c->counts[1], c->counts[2]);
    }
}

static void test_invalid(void **state)
{
    (void)state;
    ls_node_t n[1] = {{10, 100}};
    uint32_t c[1];
    assert_int_equal(layer_split_speed(NULL, 1, 10, 1, c), -EINVAL);
    assert_int_equal(layer_split_speed(n, 1, 10, 1, NULL), -EINVAL);
    assert_int_equal(layer_split_speed(n, 0, 10, 1, c), -EINVAL);
    assert_int_equal(layer_split_speed(n, 1, 0, 1, c), -EINVAL);
    assert_int_equal(layer_split_speed(n, 1, 10, 0, c), -EINVAL);
    assert_int_equal(layer_split_speed(n, LS_MAX_NODES + 1, 10, 1, c), -EINVAL);
    /* one member with the memory: all slots */
    assert_int_equal(layer_split_speed(n, 1, 10, 1, c), 0); /* one speed: "all equal" */
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd_below(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Smallest Σ c_j / s_j over every layout with Σ c_j = S, 1 ≤ c_j ≤ cap_j (the minimum of one
 * slot applies when S ≥ n). */
static double brute_best(const ls_node_t *x, size_t n, uint32_t S, uint64_t sb, size_t j,
                         uint32_t left, double acc)
{
    uint32_t lo = S >= n ? 1 : 0;
    if (j == n - 1) {
        uint64_t cap = x[j].cap_bytes / sb;
        if (left < lo || (left > cap && left > lo)) return 1e300;
        return acc + (double)left / x[j].speed_mflops;
    }
    double best = 1e300;
    uint64_t cap = x[j].cap_bytes / sb;
    for (uint32_t c = lo; c <= left; c++) {
        if (c > cap && c > lo) break;
        double v = brute_best(x, n, S, sb, j + 1, left - c, acc + (double)c / x[j].speed_mflops);
        best = v < best ? v : best;
    }
    return best;
}

static void test_greedy_is_optimal(void **state)
{
    (void)state;
    size_t checked = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 2 + rnd_below(3);
        uint32_t S = 1 + rnd_below(12);
        ls_node_t x[4];
        for (size_t j = 0; j < n; j++)
            x[j] = (ls_node_t){.cap_bytes = rnd_below(10) * 1000 + rnd_below(1000),
                               .speed_mflops = 50 + rnd_below(2000)};
        uint32_t c[4];
        int rc = layer_split_speed(x, n, S, 1000, c);
        assert_true(rc == 0 || rc == 1);
        if (rc == 0) continue;
        uint32_t sum = 0;
        for (size_t j = 0; j < n; j++) {
            sum += c[j];
            assert_true(c[j] <= x[j].cap_bytes / 1000 || (c[j] == 1 && S >= n));
            if (S >= n) assert_true(c[j] >= 1);
        }
        assert_int_equal(sum, S);
        double got = layer_split_cost(x, n, c);
        double best = brute_best(x, n, S, 1000, 0, S, 0);
        if (got > best * (1 + 1e-9))
            fail_msg("iter %d: greedy cost %.6f > best %.6f", iter, got, best);
        checked++;
    }
    assert_true(checked > 500);
}

static void test_cost(void **state)
{
    (void)state;
    ls_node_t x[2] = {{8, 1000}, {8, 100}};
    uint32_t prop[2] = {5, 5}, fast[2] = {8, 2};
    /* the memory-proportional layout costs 5/1000 + 5/100 = 0.055, the speed-aware 0.028 */
    assert_true(layer_split_cost(x, 2, fast) < layer_split_cost(x, 2, prop));
    x[1].speed_mflops = 0;
    assert_true(layer_split_cost(x, 2, fast) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_greedy_is_optimal),
        cmocka_unit_test(test_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
