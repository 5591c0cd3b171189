/* Unit tests for join_policy (src/core/join_policy.h): what POST /api/join does. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "join_policy.h"

static void test_table(void **state)
{
    (void)state;
    static const struct {
        const char *own, *cur;
        bool stuck;
        const char *tok_id, *tok_mesh;
        join_decision_t want;
        int status;
    } rows[] = {
        {"aa", NULL, false, "bb", "m1", JOIN_START, 202},   /* idle: join */
        {"", NULL, false, "bb", "m1", JOIN_START, 202},     /* idle, id not known yet */
        {"aa", "m1", false, "bb", "m1", JOIN_ALREADY, 200}, /* same mesh: nothing to do */
        {"aa", "m1", false, "cc", "m1", JOIN_ALREADY, 200}, /* same mesh through another member */
        {"aa", "m1", false, "bb", "m2", JOIN_OTHER_MESH, 409}, /* another mesh: refused */
        {"aa", NULL, false, "aa", "m1", JOIN_OWN_TOKEN, 400},  /* this node's own token */
        {"aa", "m1", false, "aa", "m1", JOIN_OWN_TOKEN, 400},
        /* issue 33 item 3: a join that reached no one is replaced by any new token */
        {"aa", "m1", true, "bb", "m1", JOIN_REPLACE, 202},
        {"aa", "m1", true, "cc", "m2", JOIN_REPLACE, 202},
        {"aa", "m1", true, "aa", "m1", JOIN_OWN_TOKEN, 400},
        {"aa", NULL, true, "bb", "m1", JOIN_START, 202},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        join_decision_t d =
            join_decide(rows[i].own, rows[i].cur, rows[i].stuck, rows[i].tok_id, rows[i].tok_mesh);
        if (d != rows[i].want) fail_msg("row %zu: decision %d, want %d", i, d, rows[i].want);
        assert_int_equal(join_http_status(d), rows[i].status);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
