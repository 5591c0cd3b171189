/* Unit tests for the router (src/core/router.h): table tests of verdicts and candidate order. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "router.h"

/* Peer facts written as "id:flags[:type]" with flags from R (ready) S (starting) M (member)
 * F (has file) Q (requested) V (vision), e.g. "a:RF:llm". */
static size_t parse(const char *const *specs, router_peer_t *out, char ids[][8], char types[][16])
{
    size_t n = 0;
    for (; specs[n]; n++) {
        router_peer_t *p = &out[n];
        memset(p, 0, sizeof *p);
        char flags[8] = "";
        types[n][0] = '\0';
        sscanf(specs[n], "%7[^:]:%7[^:]:%15s", ids[n], flags, types[n]);
        p->id = ids[n];
        p->ready = strchr(flags, 'R');
        p->starting = strchr(flags, 'S');
        p->member = strchr(flags, 'M');
        p->has_file = strchr(flags, 'F');
        p->requested = strchr(flags, 'Q');
        p->vision = strchr(flags, 'V');
        p->type = types[n][0] ? types[n] : NULL;
    }
    return n;
}

static bool g_images; /* the request of run() carries images */

/* "FORWARD a,b" / "UNKNOWN" / "MISMATCH llm" / "NO_FILE" / "UNAVAILABLE loading|unloaded" /
 * "NO_VISION" */
static const char *run(const char *const *specs, bool self_req, int needs, const char *key,
                       uint64_t rotation)
{
    static char buf[256];
    router_peer_t peers[32];
    char ids[32][8], types[32][16];
    size_t n = parse(specs, peers, ids, types);
    uint64_t h = 1469598103934665603ULL; /* the key's FNV-1a (request_t.router_key) */
    for (const char *c = key; c && *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    router_request_t rq = {
        .needs = needs, .has_key = key != NULL, .key = h, .rotation = rotation, .images = g_images};
    router_result_t r;
    router_route(peers, n, self_req, &rq, &r);
    switch (r.verdict) {
    case ROUTER_UNKNOWN:
        return "UNKNOWN";
    case ROUTER_NO_FILE:
        return "NO_FILE";
    case ROUTER_NO_VISION:
        return "NO_VISION";
    case ROUTER_TYPE_MISMATCH:
        snprintf(buf, sizeof buf, "MISMATCH %s", r.type);
        return buf;
    case ROUTER_UNAVAILABLE:
        snprintf(buf, sizeof buf, "UNAVAILABLE %s", r.loading ? "loading" : "unloaded");
        return buf;
    case ROUTER_FORWARD:
        break;
    }
    size_t len = (size_t)snprintf(buf, sizeof buf, "FORWARD ");
    for (size_t i = 0; i < r.n; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? "," : "",
                                peers[r.order[i]].id);
    return buf;
}

#define S(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_verdicts(void **state)
{
    (void)state;
    static const char *const none[] = {NULL};
    assert_string_equal(run(none, false, -1, NULL, 0), "UNKNOWN");
    /* requested by this node only, no file anywhere */
    assert_string_equal(run(none, true, -1, NULL, 0), "NO_FILE");
    assert_string_equal(run(S("a:Q"), false, -1, NULL, 0), "NO_FILE");
    /* requested, and a member is loading it: not "no file", it is coming */
    assert_string_equal(run(S("a:Q", "b:M"), false, -1, NULL, 0), "UNAVAILABLE loading");
    /* a split worker alone (no file, not host): known and loading, but nobody to send it to */
    assert_string_equal(run(S("a:M"), false, -1, NULL, 0), "UNAVAILABLE loading");
    /* the type of the file decides what the endpoint may ask of it */
    assert_string_equal(run(S("a:RF:embedding"), false, 0, NULL, 0), "MISMATCH embedding");
    assert_string_equal(run(S("a:RF:embedding"), false, 1, NULL, 0), "FORWARD a");
    assert_string_equal(run(S("a:RF:embedding"), false, -1, NULL, 0), "FORWARD a");
    /* peers that mention other models are not passed in: one peer with the file */
    assert_string_equal(run(S("a:F:llm"), false, 0, NULL, 0), "FORWARD a");
}

static void test_ready_before_takers(void **state)
{
    (void)state;
    /* ready hosts win over a starting host and a node with the file */
    assert_string_equal(run(S("a:S", "b:RF", "c:F", "d:R"), false, -1, NULL, 0), "FORWARD b,d");
    assert_string_equal(run(S("a:S", "b:RF", "c:F", "d:R"), false, -1, NULL, 1), "FORWARD d,b");
    /* none ready: a starting host (it holds the request) and nodes with the file, in order */
    assert_string_equal(run(S("a:S", "b:M", "c:F"), false, -1, NULL, 0), "FORWARD a,c");
    assert_string_equal(run(S("a:S", "b:M", "c:F"), false, -1, NULL, 3), "FORWARD c,a");
}

static void test_vision(void **state)
{
    (void)state;
    g_images = true;
    /* images go only to peers with a vision projector, ready ones first */
    assert_string_equal(run(S("a:RF", "b:RFV", "c:FV"), false, -1, NULL, 0), "FORWARD b");
    assert_string_equal(run(S("a:RF", "b:FV"), false, -1, NULL, 0), "FORWARD b");
    /* nobody has one: a clear 400, whether the others are ready, starting or have the file */
    assert_string_equal(run(S("a:RF", "b:S", "c:F"), false, -1, NULL, 0), "NO_VISION");
    /* unknown and unavailable stay what they are */
    assert_string_equal(run(S("a:M"), false, -1, NULL, 0), "UNAVAILABLE loading");
    static const char *const none[] = {NULL};
    assert_string_equal(run(none, false, -1, NULL, 0), "UNKNOWN");
    g_images = false;
    /* without images, vision does not matter */
    assert_string_equal(run(S("a:RF", "b:RFV"), false, -1, NULL, 0), "FORWARD a,b");
}

static void test_sticky_key(void **state)
{
    (void)state;
    const char *const *three = S("a:R", "b:R", "c:R");
    /* the same key always picks the same first host, whatever the rotation */
    const char *first = run(three, false, -1, "alice", 0);
    char want[64];
    snprintf(want, sizeof want, "%s", first);
    for (uint64_t rot = 1; rot < 10; rot++)
        assert_string_equal(run(three, false, -1, "alice", rot), want);
    /* and different keys spread: over 64 keys every host is first at least once */
    int seen[3] = {0};
    for (int i = 0; i < 64; i++) {
        char k[16];
        snprintf(k, sizeof k, "user-%d", i);
        seen[run(three, false, -1, k, 0)[8] - 'a']++;
    }
    assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    /* without a key, requests rotate */
    assert_string_equal(run(three, false, -1, NULL, 0), "FORWARD a,b,c");
    assert_string_equal(run(three, false, -1, NULL, 1), "FORWARD b,c,a");
    assert_string_equal(run(three, false, -1, NULL, 5), "FORWARD c,a,b");
}

static void test_candidate_cap(void **state)
{
    (void)state;
    router_peer_t peers[40];
    char ids[40][8];
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof ids[i], "p%d", i);
        peers[i] = (router_peer_t){.id = ids[i], .ready = true};
    }
    router_request_t rq = {.needs = -1};
    router_result_t r;
    router_route(peers, 40, false, &rq, &r);
    assert_int_equal(r.verdict, ROUTER_FORWARD);
    assert_int_equal(r.n, ROUTER_MAX_CANDIDATES);
    for (size_t i = 0; i < r.n; i++)
        assert_true(r.order[i] < ROUTER_MAX_CANDIDATES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),   cmocka_unit_test(test_ready_before_takers),
        cmocka_unit_test(test_sticky_key), cmocka_unit_test(test_candidate_cap),
        cmocka_unit_test(test_vision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
