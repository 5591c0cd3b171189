/* Unit tests for prefix affinity (src/core/affinity.h): keys, the LRU table, reordering. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "affinity.h"
#include "request.h"

/* the prefix key as the node reads it: request_t.prefix of the body parsed once */
static uint64_t prefix_of(const char *body, size_t len)
{
    request_t rq;
    request_parse(&rq, "/v1/chat/completions", body, len);
    return rq.prefix;
}

static char ctx[3000];

static const char *chat(char *buf, size_t n, int turns)
{
    int o = snprintf(buf, n, "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"}", ctx);
    for (int i = 0; i < turns; i++)
        o += snprintf(buf + o, n - (size_t)o,
                      ",{\"role\":\"user\",\"content\":\"q%d\"},{\"role\":\"assistant\","
                      "\"content\":\"a%d\"}",
                      i, i);
    snprintf(buf + o, n - (size_t)o, "]}");
    return buf;
}

static void test_keys(void **state)
{
    (void)state;
    memset(ctx, 'x', sizeof ctx - 1);
    static char a[8192], b[8192];
    /* later turns of one conversation share the key of the first */
    chat(a, sizeof a, 1);
    chat(b, sizeof b, 3);
    uint64_t k1 = prefix_of(a, strlen(a));
    uint64_t k3 = prefix_of(b, strlen(b));
    assert_true(k1 != 0);
    assert_true(k1 == k3);
    /* another scaffold: another key */
    ctx[10] = 'y';
    chat(b, sizeof b, 1);
    assert_true(prefix_of(b, strlen(b)) != k1);
    /* completions: the prompt string */
    snprintf(a, sizeof a, "{\"prompt\":\"%s and more\"}", ctx);
    snprintf(b, sizeof b, "{\"prompt\":\"%s then other\"}", ctx);
    assert_true(prefix_of(a, strlen(a)) == prefix_of(b, strlen(b)));
    /* short, absent, not JSON: no key */
    static const char *const none[] = {"{\"prompt\":\"short\"}", "{\"input\":\"x\"}", "nope", ""};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        assert_true(prefix_of(none[i], strlen(none[i])) == 0);
}

static void test_pick_and_lru(void **state)
{
    (void)state;
    static affinity_t t;
    memset(&t, 0, sizeof t);
    const char *ids[] = {"a", "b", "c"};
    size_t order[3] = {0, 1, 2};
    /* first sight: the router's order stands, its first is remembered */
    assert_int_equal(affinity_pick(&t, 42, ids, order, 3), 0);
    assert_int_equal(order[0], 0);
    /* next time the router prefers c: the remembered a goes first, the rest keep their order */
    size_t o2[3] = {2, 0, 1};
    assert_int_equal(affinity_pick(&t, 42, ids, o2, 3), 1);
    assert_int_equal(o2[0], 0);
    assert_int_equal(o2[1], 2);
    assert_int_equal(o2[2], 1);
    /* a is gone (not a candidate): the router's choice, remembered */
    size_t o3[2] = {1, 2};
    assert_int_equal(affinity_pick(&t, 42, ids, o3, 2), 0);
    assert_string_equal(affinity_get(&t, 42), "b");
    assert_int_equal(t.hits, 1);
    assert_int_equal(t.misses, 2);
    /* key 0: untouched */
    size_t o4[2] = {1, 0};
    assert_int_equal(affinity_pick(&t, 0, ids, o4, 2), 0);
    assert_int_equal(o4[0], 1);
    /* bounded: the least recently used entry makes room */
    memset(&t, 0, sizeof t);
    for (uint64_t k = 1; k <= AFFINITY_MAX; k++)
        affinity_put(&t, k, "a");
    assert_non_null(affinity_get(&t, 1)); /* 1 is now recently used; 2 is the oldest */
    affinity_put(&t, AFFINITY_MAX + 1, "b");
    assert_int_equal(t.n, AFFINITY_MAX);
    assert_null(affinity_get(&t, 2));
    assert_non_null(affinity_get(&t, 1));
    assert_string_equal(affinity_get(&t, AFFINITY_MAX + 1), "b");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_pick_and_lru),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
