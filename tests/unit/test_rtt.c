/* Unit tests for src/core/rtt.h: the announced steps, the bounded pick, the symmetric matrix. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "rtt.h"

static const char *id_of(char tag)
{
    static char ids[16][CATALOG_ID_LEN + 1];
    int k = tag <= '9' ? tag - '0' : tag - 'a' + 10;
    memset(ids[k], tag, CATALOG_ID_LEN);
    ids[k][CATALOG_ID_LEN] = '\0';
    return ids[k];
}

static rtt_entry_t entry(char tag, int32_t ms)
{
    rtt_entry_t e;
    memcpy(e.id, id_of(tag), sizeof e.id);
    e.ms = ms;
    return e;
}

static void test_round(void **state)
{
    (void)state;
    static const struct {
        double in;
        int32_t want;
    } rows[] = {
        {-1, -1},     {-0.001, -1}, {0, 0},         {0.4, 0},       {0.6, 1},
        {9.4, 9},     {9.6, 10},    {12.4, 10},     {12.6, 15},     {47.4, 45},
        {97.4, 95},   {97.6, 100},  {112, 100},     {113, 125},     {990, 1000},
        {1120, 1000}, {1130, 1250}, {59999, 60000}, {60000, 60000}, {1e12, 60000},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rtt_round(rows[i].in) != rows[i].want)
            fail_msg("rtt_round(%g) = %d, want %d", rows[i].in, rtt_round(rows[i].in),
                     rows[i].want);
    assert_int_equal(rtt_round(NAN), -1);
}

static void test_pick(void **state)
{
    (void)state;
    rtt_entry_t e[40];
    for (int i = 0; i < 40; i++)
        e[i] = entry("0123456789abcdef"[i % 16], 40 - i);
    size_t n = rtt_pick(e, 40, RTT_MAX_ENTRIES);
    assert_int_equal(n, RTT_MAX_ENTRIES);
    for (size_t i = 1; i < n; i++)
        assert_true(e[i - 1].ms < e[i].ms);
    assert_int_equal(e[0].ms, 1); /* the nearest kept */
    /* ties by id; fewer than max: all */
    rtt_entry_t f[3] = {entry('c', 5), entry('a', 5), entry('b', 1)};
    assert_int_equal(rtt_pick(f, 3, RTT_MAX_ENTRIES), 3);
    assert_int_equal(f[0].id[0], 'b');
    assert_int_equal(f[1].id[0], 'a');
    assert_int_equal(f[2].id[0], 'c');
    rtt_entry_t g[3] = {entry('b', 1), entry('a', 5), entry('c', 5)};
    assert_true(rtt_equal(f, 3, g, 3));
    g[2].ms = 10;
    assert_false(rtt_equal(f, 3, g, 3));
    assert_false(rtt_equal(f, 3, g, 2));
    assert_true(rtt_equal(NULL, 0, NULL, 0));
}

/* Rows: what each node measured; the matrix: the larger direction, one known direction, else
 * unknown; foreign ids and self entries ignored. */
static void test_matrix(void **state)
{
    (void)state;
    const char *ids[4] = {id_of('a'), id_of('b'), id_of('c'), id_of('d')};
    rtt_entry_t ra[] = {entry('b', 10), entry('c', 40), entry('e', 1), entry('a', 7)};
    rtt_entry_t rb[] = {entry('a', 12), entry('c', 5)};
    rtt_entry_t rc[] = {entry('b', 3), entry('c', 9), entry('b', 4)}; /* duplicate: the larger */
    const rtt_entry_t *rows[4] = {ra, rb, rc, NULL};
    size_t n_rows[4] = {4, 2, 3, 0};
    int32_t m[16];
    assert_int_equal(rtt_matrix(ids, 4, rows, n_rows, m), 0);
    static const int32_t want[16] = {
        0,  12, 40, -1, /* a */
        12, 0,  5,  -1, /* b: a-b both known, the larger; b-c max(5, 4) */
        40, 5,  0,  -1, /* c */
        -1, -1, -1, 0,  /* d: measured nothing, nobody measured it */
    };
    for (int i = 0; i < 16; i++)
        if (m[i] != want[i]) fail_msg("m[%d][%d] = %d, want %d", i / 4, i % 4, m[i], want[i]);
    assert_int_equal(rtt_matrix(ids, 0, NULL, NULL, m), 0);
    assert_int_equal(rtt_matrix(ids, 2, NULL, NULL, m), 0);
    assert_int_equal(m[1], -1);
    assert_int_equal(m[3], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_matrix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
