/* transport: real QUIC between endpoints on 127.0.0.1 in one libuv loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "identity.h"
#include "util.h"
#include "transport.h"

typedef struct node node_t;
struct node {
    identity_t id;
    tp_endpoint_t *ep;
    int ready, closed, streams_in, refused;
    char last_why[200];
    int last_err;
    /* echo server / sink state */
    size_t bytes_in;
    bool fin_in;
    bool echo;
};

static uv_loop_t loop;

static void make_id(identity_t *id)
{
    crypto_sign_keypair(id->pk, id->sk);
    hex_encode(id->pk, 32, id->id);
    id->incarnation = 1;
}

/* ---- stream handlers ---- */
typedef struct {
    node_t *n;
    buf_t got;
    bool fin, closed;
    int close_err;
    size_t to_send, sent;
    tp_stream_t *s;
    int drains;
    bool no_fin;
} sctx_t;

static void echo_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    sctx_t *x = tp_stream_data(s);
    x->n->bytes_in += n;
    if (x->n->echo) tp_stream_write(s, p, n);
    tp_stream_consumed(s, n);
}
static void echo_fin(tp_stream_t *s)
{
    sctx_t *x = tp_stream_data(s);
    x->fin = true;
    x->n->fin_in = true;
    tp_stream_shutdown(s);
}
static void echo_close(tp_stream_t *s, int err)
{
    free(tp_stream_data(s));
}
static const tp_stream_cb_t echo_cb = {echo_data, echo_fin, NULL, echo_close};

static void on_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    ((node_t *)tp_endpoint_data(ep))->ready++;
}
static void on_closed(tp_endpoint_t *ep, tp_conn_t *c, bool was_ready, int err, const char *why)
{
    node_t *n = tp_endpoint_data(ep);
    n->closed++;
    n->last_err = err;
    snprintf(n->last_why, sizeof n->last_why, "%s", why);
}
static void on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    node_t *n = tp_endpoint_data(ep);
    n->streams_in++;
    sctx_t *x = calloc(1, sizeof *x);
    x->n = n;
    tp_stream_set_cb(s, &echo_cb, x);
}

static void node_up(node_t *n, const uint8_t secret[32])
{
    memset(n, 0, sizeof *n);
    make_id(&n->id);
    tp_callbacks_t cb = {n, on_ready, on_closed, on_stream};
    tp_config_t cfg;
    tp_config_default(&cfg);
    cfg.handshake_timeout_ms = 3000;
    assert_int_equal(tp_endpoint_new(&n->ep, &loop, &n->id, secret, "127.0.0.1", 0, &cfg, &cb), 0);
}

static void closed_cb(void *d)
{
    (*(int *)d)++;
}

static void node_down(node_t *n)
{
    int done = 0;
    tp_endpoint_close(n->ep, closed_cb, &done);
    for (int i = 0; i < 1000 && !done; i++)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(done, 1);
}

static void tick_noop(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until cond holds or ms passed (bounded polling on the loop's clock). */
#define RUN_UNTIL(cond, ms)                                                                        \
    do {                                                                                           \
        uv_update_time(&loop);                                                                     \
        uint64_t _end = uv_now(&loop) + (ms);                                                      \
        uv_timer_t _t;                                                                             \
        uv_timer_init(&loop, &_t);                                                                 \
        uv_timer_start(&_t, tick_noop, 20, 20);                                                    \
        while (!(cond) && uv_now(&loop) < _end) {                                                  \
            uv_run(&loop, UV_RUN_ONCE);                                                            \
        }                                                                                          \
        uv_close((uv_handle_t *)&_t, NULL);                                                        \
        uv_run(&loop, UV_RUN_NOWAIT);                                                              \
    } while (0)

static void addr_of(node_t *n, struct sockaddr_in *sa)
{
    uv_ip4_addr("127.0.0.1", tp_endpoint_port(n->ep), sa);
}

static uint8_t secret_a[32], secret_b[32];

/* client side of a stream: send to_send bytes of a pattern (respecting the high-water mark),
 * FIN, collect what comes back */
static void cl_pump(sctx_t *x)
{
    uint8_t blk[16384];
    while (x->sent < x->to_send && !tp_stream_over_high_water(x->s)) {
        size_t n = x->to_send - x->sent < sizeof blk ? x->to_send - x->sent : sizeof blk;
        for (size_t i = 0; i < n; i++)
            blk[i] = (uint8_t)((x->sent + i) * 7);
        assert_int_equal(tp_stream_write(x->s, blk, n), 0);
        x->sent += n;
    }
    if (x->sent == x->to_send && !x->no_fin) tp_stream_shutdown(x->s);
}
static void cl_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    sctx_t *x = tp_stream_data(s);
    buf_append(&x->got, p, n);
    tp_stream_consumed(s, n);
}
static void cl_fin(tp_stream_t *s)
{
    ((sctx_t *)tp_stream_data(s))->fin = true;
}
static void cl_drain(tp_stream_t *s)
{
    sctx_t *x = tp_stream_data(s);
    x->drains++;
    cl_pump(x);
}
static void cl_close(tp_stream_t *s, int err)
{
    sctx_t *x = tp_stream_data(s);
    x->closed = true;
    x->close_err = err;
    x->s = NULL;
}
static const tp_stream_cb_t client_cb = {cl_data, cl_fin, cl_drain, cl_close};

static sctx_t *client_stream(tp_conn_t *c, size_t n)
{
    sctx_t *x = calloc(1, sizeof *x);
    buf_init(&x->got, 64 << 20);
    x->to_send = n;
    assert_int_equal(tp_stream_open(c, &client_cb, x, &x->s), 0);
    cl_pump(x);
    return x;
}
static void sctx_free(sctx_t *x)
{
    buf_free(&x->got);
    free(x);
}

static void test_connect_and_echo(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    b.echo = true;
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    assert_int_equal(a.ready, 1);
    assert_int_equal(b.ready, 1);
    assert_ptr_equal(tp_find(a.ep, b.id.id), c);
    tp_conn_t *bc = tp_find(b.ep, a.id.id);
    assert_non_null(bc);
    assert_string_equal(tp_conn_peer_id(bc), a.id.id);

    /* a stream: write, FIN, read the echo back */
    sctx_t *x = client_stream(c, 100000);
    RUN_UNTIL(x->closed, 10000);
    assert_true(x->fin);
    assert_true(x->closed);
    assert_int_equal(x->close_err, 0);
    assert_int_equal(x->got.len, 100000);
    for (size_t i = 0; i < x->got.len; i++)
        if ((uint8_t)x->got.data[i] != (uint8_t)(i * 7)) fail_msg("byte %zu differs", i);
    sctx_free(x);
    node_down(&a);
    node_down(&b);
}

static void test_wrong_secret_refused(void **state)
{
    node_t a, b;
    node_up(&a, secret_b); /* a has another mesh's secret */
    node_up(&b, secret_a);
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, NULL), 0);
    RUN_UNTIL(a.closed && b.closed, 5000);
    assert_int_equal(a.ready + b.ready, 0);
    assert_int_equal(b.closed, 1);
    assert_int_equal(a.closed, 1);
    assert_int_equal(tp_stats(b.ep)->conns_refused, 1);
    assert_null(tp_find(b.ep, a.id.id));
    node_down(&a);
    node_down(&b);
}

static void test_wrong_key_refused(void **state)
{
    node_t a, b, c;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    node_up(&c, secret_a);
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    /* a dials b's address expecting c's id: b's key differs from the id a dialled */
    assert_int_equal(tp_dial(a.ep, c.id.id, (struct sockaddr *)&sa, NULL), 0);
    RUN_UNTIL(a.closed, 5000);
    assert_int_equal(a.ready + b.ready, 0);
    assert_int_equal(a.closed, 1);
    assert_non_null(strstr(a.last_why, "not the node"));
    node_down(&a);
    node_down(&b);
    node_down(&c);
}

static void test_garbage_datagrams_dropped(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    b.echo = true;
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    uint8_t junk[1500];
    for (int i = 0; i < 500; i++) {
        size_t n = 1 + randombytes_uniform(sizeof junk);
        randombytes_buf(junk, n);
        if (i % 3 == 0) junk[0] |= 0xc0; /* long header: looks like an Initial */
        sendto(fd, junk, n, 0, (struct sockaddr *)&sa, sizeof sa);
    }
    close(fd);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    assert_int_equal(b.ready, 1);
    assert_true(tp_stats(b.ep)->dropped > 0);
    sctx_t *x = client_stream(c, 5000);
    RUN_UNTIL(x->closed, 5000);
    assert_int_equal(x->got.len, 5000);
    sctx_free(x);
    /* garbage never became a connection that stays */
    RUN_UNTIL(tp_conn_count(b.ep) == 1, 5000);
    assert_int_equal(tp_conn_count(b.ep), 1);
    node_down(&a);
    node_down(&b);
}

static void test_bulk_backpressure_and_many_streams(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    b.echo = true;
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    sctx_t *big = client_stream(c, 24 << 20);
    RUN_UNTIL(big->closed, 60000);
    assert_true(big->closed);
    assert_int_equal(big->got.len, 24 << 20);
    assert_true(big->drains > 0); /* the writer was held back and resumed */
    for (size_t i = 0; i < big->got.len; i += 4093)
        if ((uint8_t)big->got.data[i] != (uint8_t)(i * 7)) fail_msg("byte %zu differs", i);
    sctx_free(big);
    enum { N = 300 }; /* more than the peer's initial stream limit (256) */
    sctx_t *xs[N];
    for (int i = 0; i < N; i++)
        xs[i] = client_stream(c, 1000 + (size_t)i);
    int done = 0;
    uv_update_time(&loop);
    RUN_UNTIL(({
                  done = 0;
                  for (int i = 0; i < N; i++)
                      done += xs[i]->closed;
                  done == N;
              }),
              30000);
    assert_int_equal(done, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(xs[i]->got.len, 1000 + (size_t)i);
        sctx_free(xs[i]);
    }
    assert_true(tp_conn_rtt_ms(c) > 0);
    node_down(&a);
    node_down(&b);
}

static void test_simultaneous_dial_one_connection(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    a.echo = b.echo = true;
    struct sockaddr_in sa, sb;
    addr_of(&a, &sa);
    addr_of(&b, &sb);
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sb, NULL), 0);
    assert_int_equal(tp_dial(b.ep, a.id.id, (struct sockaddr *)&sa, NULL), 0);
    /* a second parallel dial from a as well (several addresses of one peer) */
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sb, NULL), 0);
    RUN_UNTIL(tp_conn_count(a.ep) == 1 && tp_conn_count(b.ep) == 1 && a.ready >= 2 && b.ready >= 2,
              10000);
    assert_int_equal(tp_conn_count(a.ep), 1);
    assert_int_equal(tp_conn_count(b.ep), 1);
    tp_conn_t *ca = tp_find(a.ep, b.id.id), *cb = tp_find(b.ep, a.id.id);
    assert_non_null(ca);
    assert_non_null(cb);
    /* the survivor was dialled by the larger id, on both sides */
    bool a_larger = strcmp(a.id.id, b.id.id) > 0;
    assert_int_equal(tp_conn_outbound(ca), a_larger);
    assert_int_equal(tp_conn_outbound(cb), !a_larger);
    sctx_t *x = client_stream(ca, 3000);
    RUN_UNTIL(x->closed, 5000);
    assert_int_equal(x->got.len, 3000);
    sctx_free(x);
    node_down(&a);
    node_down(&b);
}

static void test_dial_nobody_times_out(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    struct sockaddr_in sb;
    addr_of(&b, &sb);
    node_down(&b); /* nobody listens there any more */
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sb, NULL), 0);
    RUN_UNTIL(a.closed, 10000);
    assert_int_equal(a.closed, 1);
    assert_int_equal(a.ready, 0);
    assert_int_equal(tp_conn_count(a.ep), 0);
    node_down(&a);
}

static void test_peer_close_ends_streams(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    struct sockaddr_in sb;
    addr_of(&b, &sb);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sb, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    sctx_t *x = calloc(1, sizeof *x); /* no FIN from us, no echo from b: stays open */
    buf_init(&x->got, 1024);
    x->to_send = 10;
    x->no_fin = true;
    assert_int_equal(tp_stream_open(c, &client_cb, x, &x->s), 0);
    cl_pump(x);
    RUN_UNTIL(b.bytes_in == 10, 5000);
    node_down(&b); /* sends CONNECTION_CLOSE */
    RUN_UNTIL(x->closed && a.closed, 5000);
    assert_true(x->closed);
    assert_int_not_equal(x->close_err, 0);
    assert_int_equal(a.closed, 1);
    sctx_free(x);
    node_down(&a);
}

int main(void)
{
    if (sodium_init() < 0) return 1;
    uv_loop_init(&loop);
    randombytes_buf(secret_a, 32);
    randombytes_buf(secret_b, 32);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_and_echo),
        cmocka_unit_test(test_wrong_secret_refused),
        cmocka_unit_test(test_wrong_key_refused),
        cmocka_unit_test(test_garbage_datagrams_dropped),
        cmocka_unit_test(test_bulk_backpressure_and_many_streams),
        cmocka_unit_test(test_simultaneous_dial_one_connection),
        cmocka_unit_test(test_dial_nobody_times_out),
        cmocka_unit_test(test_peer_close_ends_streams),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
