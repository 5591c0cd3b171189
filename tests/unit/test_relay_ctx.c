/* Unit tests for the relay's shared state (src/node/relay.h relay_ctx_t): the counters belong to
 * a context the node owns, not to the process, and the status object reads the context it is
 * given. (The prefix-affinity memory, per context, and its switch: test_route.c, since the
 * routing driver applies it.) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
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
    a.stats.spilled = 3;
    json_t *s = relay_status_json(&a);
    assert_int_equal(field(s, "routed_requests"), 7);
    assert_int_equal(field(s, "failovers_resumed"), 2);
    assert_int_equal(field(s, "spilled"), 3);
    assert_int_equal(json_object_size(s), 10);
    json_decref(s);
    json_t *z = relay_status_json(NULL); /* no context (an idle console): zeros, same keys */
    assert_int_equal(json_object_size(z), 10);
    assert_int_equal(field(z, "routed_requests"), 0);
    json_decref(z);
}

static int prev_finished;
static void prev_finish(httpd_req_t *req)
{
    assert_ptr_equal(req->finish_data, &prev_finished); /* its own data, given back */
    prev_finished++;
}

/* In flight per host (the spill-over's facts): counted from relay_track until the request
 * finishes; whoever watched the request's end before is told after; a host's entry is free
 * again when nothing is in flight there. */
static void test_in_flight(void **state)
{
    (void)state;
    static relay_ctx_t rc;
    memset(&rc, 0, sizeof rc);
    httpd_req_t r1, r2, r3;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    memset(&r3, 0, sizeof r3);
    r1.on_finish = prev_finish; /* admission watches r1 */
    r1.finish_data = &prev_finished;
    relay_track(&rc, &r1, "host-a");
    relay_track(&rc, &r2, "host-a");
    relay_track(&rc, &r3, "host-b");
    assert_int_equal(relay_inflight(&rc, "host-a"), 2);
    assert_int_equal(relay_inflight(&rc, "host-b"), 1);
    assert_int_equal(relay_inflight(&rc, "host-c"), 0);
    void (*f)(httpd_req_t *) = r1.on_finish; /* httpd's req_finished */
    r1.on_finish = NULL;
    f(&r1);
    assert_int_equal(prev_finished, 1);
    assert_int_equal(relay_inflight(&rc, "host-a"), 1);
    f = r2.on_finish;
    r2.on_finish = NULL;
    f(&r2);
    f = r3.on_finish;
    r3.on_finish = NULL;
    f(&r3);
    assert_int_equal(relay_inflight(&rc, "host-a"), 0);
    assert_int_equal(relay_inflight(&rc, "host-b"), 0);
    assert_int_equal(prev_finished, 1);
    /* every entry taken by a host with a request in flight: one more host is not counted */
    static httpd_req_t many[RELAY_FLIGHT_HOSTS + 1];
    char id[16];
    for (size_t i = 0; i <= RELAY_FLIGHT_HOSTS; i++) {
        snprintf(id, sizeof id, "h%zu", i);
        relay_track(&rc, &many[i], id);
    }
    assert_int_equal(relay_inflight(&rc, "h0"), 1);
    assert_null(many[RELAY_FLIGHT_HOSTS].on_finish);
    assert_int_equal(relay_inflight(&rc, id), 0);
    for (size_t i = 0; i < RELAY_FLIGHT_HOSTS; i++) {
        f = many[i].on_finish;
        many[i].on_finish = NULL;
        f(&many[i]);
    }
    relay_track(&rc, &r1, "host-z"); /* a free entry again */
    assert_int_equal(relay_inflight(&rc, "host-z"), 1);
    f = r1.on_finish;
    r1.on_finish = NULL;
    f(&r1);
}

/* relay_untrack (a passive node's request the relay refused, parked again): no longer in flight,
 * the watcher of before is back and not called; untracking an untracked request does nothing.
 * relay_each_inflight lists the hosts with requests in flight (passive.c's status). */
static void count_host(const char *id, uint32_t n, void *data)
{
    uint32_t *sum = data;
    *sum += n * (strcmp(id, "host-a") == 0 ? 1 : 100);
}

static void test_untrack(void **state)
{
    (void)state;
    static relay_ctx_t rc;
    memset(&rc, 0, sizeof rc);
    prev_finished = 0;
    httpd_req_t r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    r1.on_finish = prev_finish;
    r1.finish_data = &prev_finished;
    relay_track(&rc, &r1, "host-a");
    relay_track(&rc, &r2, "host-b");
    uint32_t sum = 0;
    relay_each_inflight(&rc, count_host, &sum);
    assert_int_equal(sum, 101);
    relay_untrack(&r1);
    assert_int_equal(relay_inflight(&rc, "host-a"), 0);
    assert_ptr_equal(r1.on_finish, prev_finish);
    assert_ptr_equal(r1.finish_data, &prev_finished);
    assert_int_equal(prev_finished, 0);
    relay_untrack(&r1); /* not tracked any more: nothing */
    assert_ptr_equal(r1.on_finish, prev_finish);
    relay_untrack(&r2);
    assert_null(r2.on_finish);
    sum = 0;
    relay_each_inflight(&rc, count_host, &sum);
    assert_int_equal(sum, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_reads_the_context),
        cmocka_unit_test(test_in_flight),
        cmocka_unit_test(test_untrack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
