/* Unit tests for the pure decisions of the mesh driver (src/node/mesh_join.c): the timing bounds,
 * jittered backoff, the merge rule. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "mesh_int.h"

static void test_timing_scales_with_the_heartbeat(void **state)
{
    (void)state;
    mesh_timing_t t;
    mesh_timing_init(&t, 60000, 5000); /* the defaults */
    assert_int_equal(t.dial_timeout, 5000);
    assert_int_equal(t.dial_base, 1000);
    assert_int_equal(t.dial_cap, 30000);
    assert_true(t.join_timeout > t.dial_timeout);
    mesh_timing_init(&t, 2000, 5000); /* short heartbeats: a dial ends within 2 of them */
    assert_int_equal(t.dial_timeout, 4000);
    assert_int_equal(t.dial_base, 250);
    assert_int_equal(t.dial_cap, 1000);
    mesh_timing_init(&t, 100, 5000); /* floors: a handshake on a busy machine still fits */
    assert_int_equal(t.dial_timeout, 1000);
    assert_int_equal(t.dial_base, 100);
    assert_int_equal(t.dial_cap, 500);
    mesh_timing_init(&t, 60000, 0); /* no transport limit given: 2 heartbeats */
    assert_int_equal(t.dial_timeout, 120000);
}

static void test_retry_delay_jitter_within_half(void **state)
{
    (void)state;
    /* attempt 0: base; then doubling; capped; jitter takes off at most half */
    assert_int_equal(mesh_retry_delay(0, 250, 1000, 0), 250);
    assert_int_equal(mesh_retry_delay(0, 250, 1000, 125), 125);
    assert_int_equal(mesh_retry_delay(0, 250, 1000, 126), 250);
    assert_int_equal(mesh_retry_delay(1, 250, 1000, 0), 500);
    assert_int_equal(mesh_retry_delay(30, 250, 1000, 0), 1000);
    for (uint64_t r = 0; r < 5000; r += 7) {
        uint64_t d = mesh_retry_delay(5, 250, 1000, r * 2654435761u);
        assert_true(d >= 500 && d <= 1000);
    }
}

static void test_mesh_id_order(void **state)
{
    (void)state;
    assert_true(mesh_id_cmp("ab", "aa") > 0);
    assert_true(mesh_id_cmp("aa", "ab") < 0);
    assert_int_equal(mesh_id_cmp("ab", "ab"), 0);
    assert_true(mesh_id_cmp("100", "ff") > 0); /* as numbers: longer is larger */
}

static void test_merge_next_only_upwards(void **state)
{
    (void)state;
    const char *ids[] = {"30", "10", "50", "40"};
    assert_int_equal(mesh_merge_next("20", ids, 4), 0);  /* the smallest larger: 30 */
    assert_int_equal(mesh_merge_next("30", ids, 4), 3);  /* then 40 */
    assert_int_equal(mesh_merge_next("40", ids, 4), 2);  /* then 50 */
    assert_int_equal(mesh_merge_next("50", ids, 4), -1); /* the largest stays */
    assert_int_equal(mesh_merge_next("00", ids, 0), -1);
}

/* The two sides of a cross-join: each holds {own mesh, the other's token's mesh}, each is in the
 * other's. Exactly one side moves, and both end in the larger mesh. */
static void test_merge_two_sides_converge(void **state)
{
    (void)state;
    const char *mp = "1f0e", *mq = "a001";
    const char *p_holds[] = {mp, mq}, *q_holds[] = {mq, mp};
    const char *p_cur = mq, *q_cur = mp; /* P joined Q's token and Q joined P's */
    int kp = mesh_merge_next(p_cur, p_holds, 2), kq = mesh_merge_next(q_cur, q_holds, 2);
    assert_int_equal(kp, -1); /* P is in the larger mesh already */
    assert_int_equal(kq, 0);  /* Q moves to its own, larger mesh */
    assert_string_equal(q_holds[kq], mq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timing_scales_with_the_heartbeat),
        cmocka_unit_test(test_retry_delay_jitter_within_half),
        cmocka_unit_test(test_mesh_id_order),
        cmocka_unit_test(test_merge_next_only_upwards),
        cmocka_unit_test(test_merge_two_sides_converge),
    };
    return cmocka_run_group_tests_name("mesh_join", tests, NULL, NULL);
}
