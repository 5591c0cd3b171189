/* Unit tests for the relay's shared state (src/node/relay.h relay_ctx_t): the counters belong to
 * a context the node owns, not to the process, and the status object reads the context it is
 * given. (The prefix-affinity memory, per context, and its switch: test_route.c, since the
 * routing driver applies it.) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "relay.h"

static json_int_t field(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void test_status_reads_the_context(void **state)
{
    (void)state;
    relay_ctx_t a;
    memset(&a, 0, sizeof a);
    a.stats.requests = 7;
    a.stats.failovers_resumed = 2;
    json_t *s = relay_status_json(&a);
    assert_int_equal(field(s, "routed_requests"), 7);
    assert_int_equal(field(s, "failovers_resumed"), 2);
    assert_int_equal(json_object_size(s), 9);
    json_decref(s);
    json_t *z = relay_status_json(NULL); /* no context (an idle console): zeros, same keys */
    assert_int_equal(json_object_size(z), 9);
    assert_int_equal(field(z, "routed_requests"), 0);
    json_decref(z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_reads_the_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
