/* Unit tests for src/core/rebalance.h: the stability counter and the gain threshold with a
 * virtual clock — a table of tick sequences and their verdicts. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "rebalance.h"

typedef struct {
    uint64_t now;
    const char *cand; /* NULL: none */
    double cur, cost;
    rb_verdict_t want;
} step_t;

typedef struct {
    const char *what;
    rb_opts_t o;
    step_t s[10];
    size_t n;
    uint64_t applied;
} rcase_t;

#define K RB_KEEP
#define W RB_WAIT
#define A RB_APPLY

/* clang-format off */
static const rcase_t cases[] = {
    {"three ticks in a row, then applied", {1000, 3, 20},
     {{0, "x", 10, 5, W}, {1000, "x", 10, 5, W}, {2000, "x", 10, 5, A}}, 3, 1},
    {"calls between ticks are no ticks", {1000, 3, 20},
     {{0, "x", 10, 5, W}, {500, "x", 10, 5, K}, {999, "x", 10, 5, K}, {1000, "x", 10, 5, W},
      {1500, "x", 10, 5, K}, {2000, "x", 10, 5, A}}, 6, 1},
    {"another candidate starts again", {1000, 3, 20},
     {{0, "x", 10, 5, W}, {1000, "y", 10, 5, W}, {2000, "x", 10, 5, W}, {3000, "x", 10, 5, W},
      {4000, "x", 10, 5, A}}, 5, 1},
    {"a tick without a candidate resets", {1000, 3, 20},
     {{0, "x", 10, 5, W}, {1000, "x", 10, 5, W}, {2000, NULL, 10, 5, K}, {3000, "x", 10, 5, W},
      {4000, "x", 10, 5, W}, {5000, "x", 10, 5, A}}, 6, 1},
    {"gain below the threshold: never", {1000, 3, 20},
     {{0, "x", 10, 8.1, K}, {1000, "x", 10, 8.1, K}, {2000, "x", 10, 8.1, K},
      {3000, "x", 10, 8.1, K}}, 4, 0},
    {"exactly the threshold counts", {1000, 2, 20},
     {{0, "x", 10, 8, W}, {1000, "x", 10, 8, A}}, 2, 1},
    {"a gain wavering around the threshold never applies (no flapping)", {1000, 3, 20},
     {{0, "x", 10, 7, W}, {1000, "x", 10, 8.5, K}, {2000, "x", 10, 7, W}, {3000, "x", 10, 8.5, K},
      {4000, "x", 10, 7, W}, {5000, "x", 10, 7, W}, {6000, "x", 10, 7, A}}, 7, 1},
    {"a worse candidate is none", {1000, 1, 0},
     {{0, "x", 10, 12, K}, {1000, "x", 10, 10, K}}, 2, 0},
    {"the running layout is no candidate", {1000, 1, 0},
     {{0, "cur", 10, 1, K}}, 1, 0},
    {"unknown costs are no candidate", {1000, 1, 0},
     {{0, "x", 0, 1, K}, {1000, "x", 10, 0, K}}, 2, 0},
    {"after applying, the counter starts from 0", {1000, 2, 10},
     {{0, "x", 10, 5, W}, {1000, "x", 10, 5, A}, {2000, "x", 10, 5, W}, {3000, "x", 10, 5, A}}, 4, 2},
    {"defaults: 3 ticks of 10 s, 20 %", {0, 0, RB_GAIN_PCT},
     {{0, "x", 10, 5, W}, {9999, "x", 10, 5, K}, {10000, "x", 10, 5, W}, {20000, "x", 10, 5, A}},
     4, 1},
};
/* clang-format on */

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rcase_t *c = &cases[i];
        rb_state_t st = {0};
        for (size_t k = 0; k < c->n; k++) {
            const step_t *s = &c->s[k];
            rb_verdict_t v = rb_tick(&st, &c->o, s->now, "cur", s->cand, s->cur, s->cost);
            if (v != s->want)
                fail_msg("%s: step %zu: %s, expected %s", c->what, k, rb_verdict_name(v),
                         rb_verdict_name(s->want));
        }
        if (st.applied != c->applied)
            fail_msg("%s: applied %llu, expected %llu", c->what, (unsigned long long)st.applied,
                     (unsigned long long)c->applied);
    }
}

static void test_reset_and_gain(void **state)
{
    (void)state;
    rb_opts_t o = {1000, 3, 20};
    rb_state_t st = {0};
    assert_int_equal(rb_tick(&st, &o, 0, "cur", "x", 10, 5), RB_WAIT);
    assert_int_equal(rb_tick(&st, &o, 1000, "cur", "x", 10, 5), RB_WAIT);
    assert_true(st.gain > 0.49 && st.gain < 0.51);
    assert_int_equal(st.streak, 2);
    rb_reset(&st); /* membership changed */
    assert_int_equal(st.streak, 0);
    assert_int_equal(rb_tick(&st, &o, 2000, "cur", "x", 10, 5), RB_WAIT);
    assert_int_equal(st.streak, 1);
    assert_int_equal(st.n_ticks, 3);
    assert_int_equal(rb_tick(NULL, &o, 0, "cur", "x", 10, 5), RB_KEEP);
    assert_string_equal(rb_verdict_name(RB_APPLY), "apply");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_reset_and_gain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
