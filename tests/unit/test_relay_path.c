/* Relayed paths in the transport (net/transport.h "Punching and relays"), with three real
 * endpoints on 127.0.0.1 in one loop: a relay R and two members A and B. A dials B at the
 * virtual address of a session through R; bytes flow both ways end to end; R forwards only the
 * members' frames (a frame from another address, or of an unknown session, is dropped); the
 * session's rate cap holds a bulk transfer back; a direct connection is preferred over the
 * relayed one; punch datagrams are counted and dropped. Prints the bulk throughput direct and
 * relayed (a measurement, not asserted: docs/nat.md). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tp_pair.h"

typedef struct {
    identity_t id;
    tp_endpoint_t *ep;
    int ready;
    size_t got;      /* bytes read on incoming streams */
    bool got_fin;    /* an incoming stream finished */
    tp_conn_t *last; /* the last connection that became ready */
} rnode_t;

static void rn_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    rnode_t *n = tp_endpoint_data(ep);
    n->ready++;
    n->last = c;
}

static void sink_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    rnode_t *r = tp_stream_data(s);
    r->got += n;
    tp_stream_consumed(s, n);
}

static void sink_fin(tp_stream_t *s)
{
    ((rnode_t *)tp_stream_data(s))->got_fin = true;
    tp_stream_shutdown(s);
}

static void sink_close(tp_stream_t *s, int err)
{
    (void)s;
    (void)err;
}

static const tp_stream_cb_t sink_cb = {sink_data, sink_fin, NULL, sink_close};

static void rn_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    tp_stream_set_cb(s, &sink_cb, tp_endpoint_data(ep));
}

static rnode_t R, A, B;

static void up(rnode_t *n)
{
    memset(n, 0, sizeof *n);
    make_id(&n->id);
    tp_callbacks_t cb = {n, rn_ready, NULL, rn_stream};
    tp_config_t cfg;
    tp_config_default(&cfg);
    assert_int_equal(tp_endpoint_new(&n->ep, &loop, &n->id, secret, "127.0.0.1", 0, &cfg, &cb), 0);
}

static void down(rnode_t *n)
{
    int done = 0;
    tp_endpoint_close(n->ep, node_closed_cb, &done);
    RUN_UNTIL(done, 5000);
}

static void addr_of(const rnode_t *n, struct sockaddr_in *sa)
{
    uv_ip4_addr("127.0.0.1", tp_endpoint_port(n->ep), sa);
}

static int setup(void **state)
{
    (void)state;
    up(&R);
    up(&A);
    up(&B);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    down(&A);
    down(&B);
    down(&R);
    RUN_UNTIL(handles_left() == 0, 5000);
    return 0;
}

/* A session on R between A and B (side 0: A), routes on both ends; A dials B through it. */
static tp_conn_t *relayed_conn(const uint8_t sid[TP_SID_LEN], uint64_t rate)
{
    struct sockaddr_in ra, aa, ba;
    addr_of(&R, &ra);
    addr_of(&A, &aa);
    addr_of(&B, &ba);
    assert_int_equal(
        tp_relay_session_add(R.ep, sid, (struct sockaddr *)&aa, (struct sockaddr *)&ba, rate), 0);
    struct sockaddr_storage va, vb;
    assert_int_equal(tp_route_add(A.ep, sid, 0, (struct sockaddr *)&ra, &va), 0);
    assert_int_equal(tp_route_add(B.ep, sid, 1, (struct sockaddr *)&ra, &vb), 0);
    assert_true(tp_addr_virtual((struct sockaddr *)&va));
    struct sockaddr_storage back;
    assert_int_equal(tp_route_relay(A.ep, (struct sockaddr *)&va, &back), 0);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(A.ep, B.id.id, (struct sockaddr *)&va, &c), 0);
    RUN_UNTIL(A.ready && B.ready, 5000);
    assert_int_equal(A.ready, 1);
    assert_int_equal(B.ready, 1);
    return c;
}

/* Send n bytes on a new stream of c and wait until the receiver has them all; seconds taken. */
static double bulk(tp_conn_t *c, rnode_t *rx, size_t n)
{
    static uint8_t chunk[65536];
    tp_stream_t *s = NULL;
    assert_int_equal(tp_stream_open(c, &sink_cb, rx, &s), 0);
    size_t sent = 0, start = rx->got;
    uv_update_time(&loop);
    uint64_t t0 = uv_hrtime(), end = uv_now(&loop) + 60000;
    while (rx->got - start < n && uv_now(&loop) < end) {
        while (sent < n && !tp_stream_over_high_water(s)) {
            size_t k = n - sent < sizeof chunk ? n - sent : sizeof chunk;
            if (tp_stream_write(s, chunk, k) != 0) break;
            sent += k;
        }
        uv_run(&loop, UV_RUN_ONCE);
    }
    double secs = (double)(uv_hrtime() - t0) / 1e9;
    assert_int_equal(rx->got - start, n);
    tp_stream_shutdown(s);
    return secs;
}

static void test_relayed_connection_carries_bytes_end_to_end(void **state)
{
    (void)state;
    uint8_t sid[TP_SID_LEN];
    randombytes_buf(sid, sizeof sid);
    tp_conn_t *c = relayed_conn(sid, 0);
    assert_string_equal(tp_conn_peer_id(c), B.id.id);
    assert_ptr_equal(tp_find(A.ep, B.id.id), c);
    /* B's end of it is the relayed path too: its remote is a virtual address */
    struct sockaddr_storage rb;
    tp_conn_remote(B.last, &rb);
    assert_true(tp_addr_virtual((struct sockaddr *)&rb));
    /* no "seen" over a relay: the relay's address is not a reflexive candidate */
    assert_string_equal(tp_conn_seen(c), "");
    double relayed = bulk(c, &B, (size_t)32 << 20);
    tp_relay_info_t info;
    assert_int_equal(tp_relay_session_info(R.ep, sid, &info), 0);
    assert_true(info.bytes > ((size_t)32 << 20)); /* all of it went through R */
    assert_true(tp_stats(R.ep)->relay_forwarded > 0);
    assert_true(tp_stats(A.ep)->relayed_out > 0 && tp_stats(B.ep)->relayed_in > 0);
    /* the same transfer on a direct connection between two fresh endpoints */
    rnode_t C, D;
    up(&C);
    up(&D);
    struct sockaddr_in da;
    addr_of(&D, &da);
    tp_conn_t *cd = NULL;
    assert_int_equal(tp_dial(C.ep, D.id.id, (struct sockaddr *)&da, &cd), 0);
    RUN_UNTIL(C.ready && D.ready, 5000);
    double direct = bulk(cd, &D, (size_t)32 << 20);
    print_message("bulk 32 MiB on 127.0.0.1: direct %.0f MB/s, relayed %.0f MB/s (%.2fx)\n",
                  32 * 1.048576 / direct, 32 * 1.048576 / relayed, relayed / direct);
    down(&C);
    down(&D);
}

static void test_relay_forwards_only_its_members(void **state)
{
    (void)state;
    uint8_t sid[TP_SID_LEN];
    randombytes_buf(sid, sizeof sid);
    relayed_conn(sid, 0);
    uint64_t fwd = tp_stats(R.ep)->relay_forwarded, dropped = tp_stats(R.ep)->relay_dropped;
    /* a stranger sends a frame of the session (as if captured on the wire) from its own address */
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in ra;
    addr_of(&R, &ra);
    uint8_t frame[64] = {0x3a, 0};
    memcpy(frame + 2, sid, TP_SID_LEN);
    memset(frame + 18, 0x55, sizeof frame - 18);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sendto(fd, frame, sizeof frame, 0, (struct sockaddr *)&ra, sizeof ra),
                         (ssize_t)sizeof frame);
    RUN_UNTIL(tp_stats(R.ep)->relay_dropped >= dropped + 5, 2000);
    assert_int_equal(tp_stats(R.ep)->relay_dropped, dropped + 5);
    assert_int_equal(tp_stats(R.ep)->relay_forwarded, fwd); /* none of them forwarded */
    /* the session gone, a member's frames are not forwarded either */
    tp_relay_session_del(R.ep, sid);
    assert_int_equal(tp_relay_session_count(R.ep), 0);
    tp_relay_info_t info;
    assert_int_equal(tp_relay_session_info(R.ep, sid, &info), -ENOENT);
    close(fd);
}

static void test_rate_cap_holds_a_bulk_transfer_back(void **state)
{
    (void)state;
    uint8_t sid[TP_SID_LEN];
    randombytes_buf(sid, sizeof sid);
    tp_conn_t *c = relayed_conn(sid, 4 << 20); /* 4 MiB a second */
    bulk(c, &B, (size_t)12 << 20); /* all of it arrives (QUIC recovers what the cap dropped) */
    tp_relay_info_t info;
    assert_int_equal(tp_relay_session_info(R.ep, sid, &info), 0);
    assert_true(info.dropped > 0); /* 12 MiB is more than the bucket's 4: frames were dropped */
    assert_int_equal(tp_stats(R.ep)->relay_dropped, info.dropped);
}

static void test_direct_beats_relayed_and_punches_are_dropped(void **state)
{
    (void)state;
    uint8_t sid[TP_SID_LEN];
    randombytes_buf(sid, sizeof sid);
    tp_conn_t *relayed = relayed_conn(sid, 0);
    struct sockaddr_in ba;
    addr_of(&B, &ba);
    uint64_t in = tp_stats(B.ep)->punches_in;
    assert_int_equal(tp_punch(A.ep, (struct sockaddr *)&ba), 0);
    RUN_UNTIL(tp_stats(B.ep)->punches_in > in, 2000);
    assert_int_equal(tp_stats(B.ep)->punches_in, in + 1);
    tp_conn_t *direct = NULL;
    assert_int_equal(tp_dial(A.ep, B.id.id, (struct sockaddr *)&ba, &direct), 0);
    RUN_UNTIL(A.ready == 2 && B.ready == 2, 5000);
    assert_int_equal(A.ready, 2);
    /* both ends prefer the direct connection now */
    assert_ptr_equal(tp_find(A.ep, B.id.id), direct);
    struct sockaddr_storage rb;
    tp_conn_remote(tp_find(B.ep, A.id.id), &rb);
    assert_false(tp_addr_virtual((struct sockaddr *)&rb));
    assert_ptr_not_equal(direct, relayed);
}

int main(void)
{
    if (pair_init() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relayed_connection_carries_bytes_end_to_end, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_relay_forwards_only_its_members, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_cap_holds_a_bulk_transfer_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_beats_relayed_and_punches_are_dropped, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
