/* Unit tests for the relay's shared state (src/node/relay.h relay_ctx_t): the prefix-affinity
 * memory and the counters belong to a context the node owns, not to the process, so two
 * contexts never see each other's hosts, and the status object reads the context it is given. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "relay.h"
#include "tunables.h"

static const char *const IDS[] = {"host-a", "host-b"};

static void order_for(relay_ctx_t *rc, uint64_t prefix, size_t first, size_t *order)
{
    httpd_req_t req;
    memset(&req, 0, sizeof req);
    req.rq.prefix = prefix;
    order[0] = first;
    order[1] = 1 - first;
    relay_order_by_prefix(rc, &req, IDS, order, 2);
}

static json_int_t field(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void test_affinity_is_per_context(void **state)
{
    (void)state;
    unsetenv("MESH_LLM_PREFIX_AFFINITY");
    relay_ctx_t a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    size_t order[2];
    order_for(&a, 42, 0, order); /* a remembers host-a for the prefix */
    assert_int_equal(order[0], 0);
    order_for(&a, 42, 1, order); /* the router put host-b first: a moves host-a up */
    assert_int_equal(order[0], 0);
    order_for(&b, 42, 1, order); /* b never saw the prefix: the router's order stands */
    assert_int_equal(order[0], 1);
    json_t *sa = relay_status_json(&a), *sb = relay_status_json(&b);
    assert_int_equal(field(sa, "prefix_affinity_hits"), 1);
    assert_int_equal(field(sa, "prefix_affinity_misses"), 1);
    assert_int_equal(field(sb, "prefix_affinity_hits"), 0);
    assert_int_equal(field(sb, "prefix_affinity_misses"), 1);
    json_decref(sa);
    json_decref(sb);
}

/* MESH_LLM_PREFIX_AFFINITY follows the one 0/1 rule of the tunables (read once, through the
 * context): off, no, false and 0 turn it off (before, only "0" did: "off" left it on); unset, on
 * and 1 leave it on. Off, the router's order stands and nothing is counted or remembered. */
static void test_prefix_affinity_switch(void **state)
{
    (void)state;
    static const struct {
        const char *env;
        bool on;
    } CASES[] = {{NULL, true},
                 {"MESH_LLM_PREFIX_AFFINITY=1", true},
                 {"MESH_LLM_PREFIX_AFFINITY=on", true},
                 {"MESH_LLM_PREFIX_AFFINITY=0", false},
                 {"MESH_LLM_PREFIX_AFFINITY=off", false},
                 {"MESH_LLM_PREFIX_AFFINITY=No", false},
                 {"MESH_LLM_PREFIX_AFFINITY=false", false}};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        static tunables_t tun;
        const char *envp[] = {CASES[i].env, NULL};
        char err[256];
        assert_int_equal(tunables_load(&tun, envp, err, sizeof err), 0);
        static relay_ctx_t a;
        memset(&a, 0, sizeof a);
        a.tun = &tun;
        assert_int_equal(relay_prefix_affinity(&a), CASES[i].on);
        size_t order[2];
        order_for(&a, 42, 0, order); /* remembers host-a, when on */
        order_for(&a, 42, 1, order); /* host-b first: host-a moves up, when on */
        assert_int_equal(order[0], CASES[i].on ? 0 : 1);
        assert_int_equal(a.affinity.hits + a.affinity.misses, CASES[i].on ? 2 : 0);
    }
    relay_ctx_t z; /* no tunables (a zeroed context): the default, on */
    memset(&z, 0, sizeof z);
    assert_true(relay_prefix_affinity(&z));
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
        cmocka_unit_test(test_affinity_is_per_context),
        cmocka_unit_test(test_prefix_affinity_switch),
        cmocka_unit_test(test_status_reads_the_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
