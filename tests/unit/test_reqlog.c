/* Unit tests for the request log (src/core/reqlog.h): the ring, entries from finished requests,
 * the JSON shown in /api/status. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "reqlog.h"

#define MS 1000000ull

static reqlog_entry_t entry(int i)
{
    reqlog_entry_t e;
    memset(&e, 0, sizeof e);
    e.wall_ms = (uint64_t)i;
    snprintf(e.model, sizeof e.model, "m%d", i);
    e.status = 200;
    e.ttft_ms = e.tokens_per_s = -1;
    e.tokens_out = -1;
    return e;
}

static void test_ring_keeps_newest_in_order(void **state)
{
    (void)state;
    static reqlog_t l;
    reqlog_init(&l);
    assert_null(reqlog_get(&l, 0));
    for (int i = 0; i < 3; i++) {
        reqlog_entry_t e = entry(i);
        reqlog_add(&l, &e);
    }
    assert_int_equal(l.n, 3);
    assert_string_equal(reqlog_get(&l, 0)->model, "m2");
    assert_string_equal(reqlog_get(&l, 2)->model, "m0");
    assert_null(reqlog_get(&l, 3));
    /* past the cap: the oldest go, the count stays REQLOG_MAX */
    for (int i = 3; i < REQLOG_MAX + 57; i++) {
        reqlog_entry_t e = entry(i);
        reqlog_add(&l, &e);
    }
    assert_int_equal(l.n, REQLOG_MAX);
    assert_int_equal(l.total, REQLOG_MAX + 57);
    char want[16];
    snprintf(want, sizeof want, "m%d", REQLOG_MAX + 56);
    assert_string_equal(reqlog_get(&l, 0)->model, want);
    snprintf(want, sizeof want, "m%d", 57);
    assert_string_equal(reqlog_get(&l, REQLOG_MAX - 1)->model, want);
    assert_null(reqlog_get(&l, REQLOG_MAX));
}

static metrics_req_t req(const char *model)
{
    metrics_req_t r;
    metrics_req_init(&r, 1000 * MS);
    snprintf(r.model, sizeof r.model, "%s", model);
    return r;
}

static void test_entry_local_with_timings(void **state)
{
    (void)state;
    metrics_req_t r = req("stories");
    r.status = 200;
    r.head_ns = 1010 * MS;
    r.first_body_ns = 1025 * MS;
    r.tokens_out = 40;
    r.per_token_s = 0.004; /* llama-server's timings: 250 tokens/s */
    r.path = "/api/chat";  /* what the client called (an Ollama request, served as OpenAI's) */
    reqlog_entry_t e;
    assert_int_equal(reqlog_entry_from(&e, &r, "selfid", 1200 * MS, 1700000000123ull), 0);
    assert_string_equal(e.model, "stories");
    assert_string_equal(e.path, "/api/chat");
    assert_string_equal(e.node, "selfid");
    assert_int_equal(e.route, METRICS_ROUTE_LOCAL);
    assert_int_equal(e.status, 200);
    assert_true(e.ttft_ms > 24.99 && e.ttft_ms < 25.01);
    assert_true(e.duration_ms > 199.99 && e.duration_ms < 200.01);
    assert_true(e.tokens_per_s > 249.99 && e.tokens_per_s < 250.01);
    assert_int_equal(e.tokens_out, 40);
    assert_int_equal(e.wall_ms, 1700000000123ull);
}

static void test_entry_tunnel_and_measured_rate(void **state)
{
    (void)state;
    metrics_req_t r = req("tiny");
    r.status = 200;
    r.route = METRICS_ROUTE_TUNNEL;
    snprintf(r.peer, sizeof r.peer, "peerid");
    r.head_ns = 1050 * MS; /* no body byte noted: the head counts */
    r.tokens_out = 10;     /* usage without timings: measured from the first byte to the end */
    reqlog_entry_t e;
    assert_int_equal(reqlog_entry_from(&e, &r, "selfid", 1550 * MS, 1), 0);
    assert_string_equal(e.node, "peerid");
    assert_int_equal(e.route, METRICS_ROUTE_TUNNEL);
    assert_true(e.ttft_ms > 49.99 && e.ttft_ms < 50.01);
    assert_true(e.tokens_per_s > 19.99 && e.tokens_per_s < 20.01);
}

static void test_entry_cut_off_and_not_a_model(void **state)
{
    (void)state;
    metrics_req_t r = req("stories"); /* the client went away before any answer */
    reqlog_entry_t e;
    assert_int_equal(reqlog_entry_from(&e, &r, "selfid", 1100 * MS, 1), 0);
    assert_int_equal(e.status, 499);
    assert_true(e.ttft_ms < 0);
    assert_true(e.tokens_per_s < 0);
    assert_int_equal(e.tokens_out, -1);
    metrics_req_t none = req("");
    assert_int_equal(reqlog_entry_from(&e, &none, "selfid", 1100 * MS, 1), -ENOENT);
}

static void test_json_newest_first_nulls_for_unknown(void **state)
{
    (void)state;
    static reqlog_t l;
    reqlog_init(&l);
    json_t *a = reqlog_json(&l);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    reqlog_entry_t e = entry(1);
    reqlog_add(&l, &e);
    e = entry(2);
    e.route = METRICS_ROUTE_TUNNEL;
    snprintf(e.node, sizeof e.node, "peer");
    e.ttft_ms = 12.345;
    e.tokens_per_s = 99.96;
    e.tokens_out = 7;
    snprintf(e.path, sizeof e.path, "/v1/messages");
    reqlog_add(&l, &e);
    a = reqlog_json(&l);
    assert_int_equal(json_array_size(a), 2);
    json_t *n = json_array_get(a, 0);
    assert_string_equal(json_string_value(json_object_get(n, "model")), "m2");
    assert_string_equal(json_string_value(json_object_get(n, "route")), "tunnel");
    assert_string_equal(json_string_value(json_object_get(n, "node")), "peer");
    assert_int_equal(json_integer_value(json_object_get(n, "time_ms")), 2);
    assert_true(json_real_value(json_object_get(n, "ttft_ms")) > 12.29 &&
                json_real_value(json_object_get(n, "ttft_ms")) < 12.41);
    assert_int_equal(json_integer_value(json_object_get(n, "tokens")), 7);
    assert_string_equal(json_string_value(json_object_get(n, "path")), "/v1/messages");
    json_t *o = json_array_get(a, 1);
    assert_true(json_is_null(json_object_get(o, "path")));
    assert_string_equal(json_string_value(json_object_get(o, "route")), "local");
    assert_true(json_is_null(json_object_get(o, "ttft_ms")));
    assert_true(json_is_null(json_object_get(o, "tokens_per_s")));
    assert_true(json_is_null(json_object_get(o, "tokens")));
    json_decref(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_keeps_newest_in_order),
        cmocka_unit_test(test_entry_local_with_timings),
        cmocka_unit_test(test_entry_tunnel_and_measured_rate),
        cmocka_unit_test(test_entry_cut_off_and_not_a_model),
        cmocka_unit_test(test_json_newest_first_nulls_for_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
