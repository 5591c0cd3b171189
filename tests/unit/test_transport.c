/* transport: real QUIC between endpoints on 127.0.0.1 in one libuv loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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
#include "transport_int.h" /* ACK_DEFER_MS: the ACK-deferral tests measure against it */

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
    uint64_t echo_delay_ms; /* echo from a timer this much later (0: in the data callback) */
    bool got_data;          /* stream bytes arrived: */
    uint64_t data_at_ms;    /*   the loop time they first did */
    uint64_t data_at_out;   /*   datagrams_out then */
    /* a sink that does not read (hold): bytes stay unconsumed until released */
    bool hold, released;
    tp_stream_t *held[8];
    size_t held_unconsumed[8];
    int n_held;
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
    size_t held; /* echo: bytes received but not yet consumed (back-pressure) */
} sctx_t;

static void note_data(node_t *n)
{
    if (n->got_data) return;
    n->got_data = true;
    n->data_at_ms = uv_now(&loop);
    n->data_at_out = tp_stats(n->ep)->datagrams_out;
}

static void echo_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    sctx_t *x = tp_stream_data(s);
    note_data(x->n);
    x->n->bytes_in += n;
    if (!x->n->echo) {
        tp_stream_consumed(s, n);
        return;
    }
    /* an echo that honours back-pressure: while its own send queue is over the high-water mark
     * it withholds flow-control credit, so its peer slows down instead of the queue growing */
    if (tp_stream_write(s, p, n) != 0) fail_msg("echo write refused (%zu bytes)", n);
    if (tp_stream_over_high_water(s))
        x->held += n;
    else
        tp_stream_consumed(s, n);
}
static void echo_drain(tp_stream_t *s)
{
    sctx_t *x = tp_stream_data(s);
    size_t n = x->held;
    x->held = 0;
    if (n) tp_stream_consumed(s, n);
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
static const tp_stream_cb_t echo_cb = {echo_data, echo_fin, echo_drain, echo_close};

/* echo that answers echo_delay_ms after the bytes arrived (a server that computes a while) */
typedef struct {
    node_t *n;
    tp_stream_t *s;
    uv_timer_t t;
    uint8_t pend[4096];
    size_t npend;
} lag_t;

static void lag_fire(uv_timer_t *t)
{
    lag_t *x = t->data;
    if (x->s && x->npend) assert_int_equal(tp_stream_write(x->s, x->pend, x->npend), 0);
    x->npend = 0;
}
static void lag_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    lag_t *x = tp_stream_data(s);
    note_data(x->n);
    x->n->bytes_in += n;
    if (n > sizeof x->pend - x->npend) fail_msg("lagged echo: %zu bytes pending", x->npend + n);
    memcpy(x->pend + x->npend, p, n);
    x->npend += n;
    tp_stream_consumed(s, n);
    if (!uv_is_active((uv_handle_t *)&x->t))
        uv_timer_start(&x->t, lag_fire, x->n->echo_delay_ms, 0);
}
static void lag_fin(tp_stream_t *s)
{
    lag_t *x = tp_stream_data(s);
    x->n->fin_in = true;
    lag_fire(&x->t);
    tp_stream_shutdown(s);
}
static void lag_free(uv_handle_t *h)
{
    free(h->data);
}
static void lag_close(tp_stream_t *s, int err)
{
    lag_t *x = tp_stream_data(s);
    x->s = NULL;
    uv_close((uv_handle_t *)&x->t, lag_free);
}
static const tp_stream_cb_t lag_cb = {lag_data, lag_fin, NULL, lag_close};

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
static void hold_data(tp_stream_t *s, const uint8_t *p, size_t len)
{
    node_t *n = tp_stream_data(s);
    n->bytes_in += len;
    if (n->released) {
        tp_stream_consumed(s, len);
        return;
    }
    for (int i = 0; i < n->n_held; i++)
        if (n->held[i] == s) n->held_unconsumed[i] += len;
}
static void hold_close(tp_stream_t *s, int err)
{
    node_t *n = tp_stream_data(s);
    for (int i = 0; i < n->n_held; i++)
        if (n->held[i] == s) n->held[i] = NULL;
}
static const tp_stream_cb_t hold_cb = {hold_data, NULL, NULL, hold_close};

/* the sink starts reading: everything held is consumed, what follows at once */
static void hold_release(node_t *n)
{
    n->released = true;
    for (int i = 0; i < n->n_held; i++)
        if (n->held[i] && n->held_unconsumed[i])
            tp_stream_consumed(n->held[i], n->held_unconsumed[i]);
}

static void on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    node_t *n = tp_endpoint_data(ep);
    n->streams_in++;
    if (n->hold) {
        if (n->n_held < 8) n->held[n->n_held++] = s;
        tp_stream_set_cb(s, &hold_cb, n);
        return;
    }
    if (n->echo_delay_ms) {
        lag_t *l = calloc(1, sizeof *l);
        l->n = n;
        l->s = s;
        uv_timer_init(&loop, &l->t);
        l->t.data = l;
        tp_stream_set_cb(s, &lag_cb, l);
        return;
    }
    sctx_t *x = calloc(1, sizeof *x);
    x->n = n;
    tp_stream_set_cb(s, &echo_cb, x);
}

/* cfg: NULL for the defaults (a 3 s handshake timeout) */
static void node_up_cfg(node_t *n, const uint8_t secret[32], const tp_config_t *cfg)
{
    memset(n, 0, sizeof *n);
    make_id(&n->id);
    tp_callbacks_t cb = {n, on_ready, on_closed, on_stream};
    tp_config_t def;
    tp_config_default(&def);
    def.handshake_timeout_ms = 3000;
    assert_int_equal(
        tp_endpoint_new(&n->ep, &loop, &n->id, secret, "127.0.0.1", 0, cfg ? cfg : &def, &cb), 0);
}

static void node_up(node_t *n, const uint8_t secret[32])
{
    node_up_cfg(n, secret, NULL);
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
    /* below the Retry threshold: no extra round trip */
    assert_int_equal(tp_stats(b.ep)->retries_sent, 0);
    assert_int_equal(tp_stats(b.ep)->conns_accepted, 1);
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

static void test_refused_admission_then_new_secret(void **state)
{
    node_t a, b;
    node_up(&a, secret_b); /* a is in another mesh */
    node_up(&b, secret_a);
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, NULL), 0);
    RUN_UNTIL(a.closed, 5000);
    assert_int_equal(a.last_err, TP_ERR_ADMISSION); /* the dialer learns why */
    tp_endpoint_set_secret(a.ep, secret_a);         /* a moves to b's mesh */
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, NULL), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    assert_int_equal(a.ready, 1);
    assert_int_equal(b.ready, 1);
    node_down(&a);
    node_down(&b);
}

/* b's process "dies" without a word (no CONNECTION_CLOSE) and b comes back on its port with the
 * same key: a's next packet is answered with a Stateless Reset that a recognizes. */
static void test_restarted_peer_resets_stale_connection(void **state)
{
    node_t a, b, b2;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    int port = tp_endpoint_port(b.ep);
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, NULL), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    int fd = b.ep->fd; /* silence b: its close sends nothing, like kill -9 */
    b.ep->fd = -1;
    node_down(&b);
    close(fd);
    memset(&b2, 0, sizeof b2);
    b2.id = b.id;
    tp_callbacks_t cb = {&b2, on_ready, on_closed, on_stream};
    tp_config_t cfg;
    tp_config_default(&cfg);
    assert_int_equal(tp_endpoint_new(&b2.ep, &loop, &b2.id, secret_a, "127.0.0.1", port, &cfg, &cb),
                     0);
    tp_conn_t *c = tp_find(a.ep, b.id.id);
    assert_non_null(c);
    tp_stream_t *s;
    sctx_t *x = calloc(1, sizeof *x);
    x->n = &a;
    assert_int_equal(tp_stream_open(c, &echo_cb, x, &s), 0);
    assert_int_equal(tp_stream_write(s, "hello", 5), 0);
    RUN_UNTIL(a.closed, 3000); /* far below the idle timeout */
    assert_int_equal(a.closed, 1);
    assert_int_equal(a.last_err, -ECONNRESET);
    assert_non_null(strstr(a.last_why, "stateless reset"));
    assert_null(tp_find(a.ep, b.id.id));
    /* and a reaches the new process */
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, NULL), 0);
    RUN_UNTIL(a.ready == 2 && b2.ready == 1, 5000);
    assert_int_equal(b2.ready, 1);
    node_down(&a);
    node_down(&b2);
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

/* ---- ACK deferral (transport_tx.c, "scheduling") ---- */

static void connect_pair(node_t *a, node_t *b, tp_conn_t **c)
{
    struct sockaddr_in sa;
    addr_of(b, &sa);
    assert_int_equal(tp_dial(a->ep, b->id.id, (struct sockaddr *)&sa, c), 0);
    RUN_UNTIL(a->ready && b->ready, 5000);
    assert_int_equal(a->ready, 1);
    assert_int_equal(b->ready, 1);
}

/* Run until neither endpoint sent a datagram for a while (the admission exchange and its
 * deferred ACKs are over), so that what a test counts afterwards is its own traffic. */
static void wait_quiet(node_t *a, node_t *b)
{
    for (int i = 0; i < 40; i++) {
        uint64_t oa = tp_stats(a->ep)->datagrams_out, ob = tp_stats(b->ep)->datagrams_out;
        RUN_UNTIL(false, 4 * ACK_DEFER_MS);
        if (tp_stats(a->ep)->datagrams_out == oa && tp_stats(b->ep)->datagrams_out == ob) return;
    }
    fail_msg("the endpoints never went quiet");
}

/* client of a request/response exchange: PP_K messages of PP_MSG bytes, each sent from the
 * data callback that completed the echo of the one before */
enum { PP_K = 64, PP_MSG = 100 };
typedef struct {
    tp_stream_t *s;
    const tp_endpoint_t *a, *b;
    int done;   /* echoes complete */
    size_t got; /* bytes of the current echo */
    bool bad, closed;
    tp_stats_t a_end, b_end; /* both endpoints' counters when the last echo completed */
} pp_t;

static uint8_t pp_byte(int msg, size_t off)
{
    return (uint8_t)(msg * 31 + (int)off);
}
static void pp_send(pp_t *p)
{
    uint8_t m[PP_MSG];
    for (size_t j = 0; j < PP_MSG; j++)
        m[j] = pp_byte(p->done, j);
    if (tp_stream_write(p->s, m, sizeof m) != 0) p->bad = true;
}
static void pp_data(tp_stream_t *s, const uint8_t *d, size_t n)
{
    pp_t *p = tp_stream_data(s);
    for (size_t i = 0; i < n; i++)
        if (p->got + i >= PP_MSG || d[i] != pp_byte(p->done, p->got + i)) p->bad = true;
    p->got += n;
    tp_stream_consumed(s, n);
    if (p->bad || p->got < PP_MSG) return;
    p->got = 0;
    if (++p->done < PP_K) {
        pp_send(p);
        return;
    }
    p->a_end = *tp_stats(p->a);
    p->b_end = *tp_stats(p->b);
}
static void pp_fin(tp_stream_t *s) {}
static void pp_close(tp_stream_t *s, int err)
{
    pp_t *p = tp_stream_data(s);
    p->closed = true;
    p->s = NULL;
}
static const tp_stream_cb_t pp_cb = {pp_data, pp_fin, NULL, pp_close};

/* PP_K request/response exchanges; the server answers echo_delay_ms after each request. Each
 * side should send one datagram per exchange: the ACK of what it read rides on its next
 * message. Sending ACK-only datagrams as well would make that about two per exchange. */
static void ping_pong(uint64_t echo_delay_ms)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    b.echo = true;
    b.echo_delay_ms = echo_delay_ms;
    tp_conn_t *c = NULL;
    connect_pair(&a, &b, &c);
    wait_quiet(&a, &b);
    pp_t p = {.a = a.ep, .b = b.ep};
    tp_stats_t a0 = *tp_stats(a.ep), b0 = *tp_stats(b.ep);
    assert_int_equal(tp_stream_open(c, &pp_cb, &p, &p.s), 0);
    pp_send(&p);
    RUN_UNTIL(p.done == PP_K || p.bad || p.closed, 20000);
    assert_false(p.bad);
    assert_int_equal(p.done, PP_K);
    uint64_t out_a = p.a_end.datagrams_out - a0.datagrams_out;
    uint64_t out_b = p.b_end.datagrams_out - b0.datagrams_out;
    /* at least one each per exchange; more than K/4 extra (ACK-only datagrams, probes after a
     * late answer under load) means ACKs are not waiting for the answer */
    if (out_a < PP_K || out_a > PP_K + PP_K / 4 || out_b < PP_K || out_b > PP_K + PP_K / 4)
        fail_msg("%d exchanges (answer delay %llu ms): client sent %llu datagrams, server %llu",
                 PP_K, (unsigned long long)echo_delay_ms, (unsigned long long)out_a,
                 (unsigned long long)out_b);
    tp_stream_shutdown(p.s);
    RUN_UNTIL(p.closed, 5000);
    assert_true(p.closed);
    node_down(&a);
    node_down(&b);
}

/* the server answers from inside its data callback, in the same loop turn */
static void test_ack_piggyback_immediate_answer(void **state)
{
    ping_pong(0);
}

/* the server answers a few ms later, within ACK_DEFER_MS: the ACK of each request waits for
 * the answer instead of going alone right away */
static void test_ack_piggyback_delayed_answer(void **state)
{
    ping_pong(ACK_DEFER_MS / 4 ? ACK_DEFER_MS / 4 : 1);
}

/* One small message and nothing back: the receiver's ACK is deferred (waiting for data that
 * never comes), but goes out on its own after ACK_DEFER_MS, and the sender's queue drains. */
static void test_one_way_message_acked(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a); /* a sink: no echo */
    tp_conn_t *c = NULL;
    connect_pair(&a, &b, &c);
    wait_quiet(&a, &b);
    sctx_t *x = calloc(1, sizeof *x);
    buf_init(&x->got, 1024);
    x->to_send = 10;
    x->no_fin = true;
    assert_int_equal(tp_stream_open(c, &client_cb, x, &x->s), 0);
    cl_pump(x);
    assert_int_equal(tp_stream_buffered(x->s), 10);
    RUN_UNTIL(b.bytes_in == 10, 5000);
    assert_int_equal(b.bytes_in, 10);
    assert_true(b.got_data);
    RUN_UNTIL(tp_stats(b.ep)->datagrams_out > b.data_at_out, 3000);
    uint64_t answered_ms = uv_now(&loop);
    assert_true(tp_stats(b.ep)->datagrams_out > b.data_at_out);
    /* the timer that sends it starts when the bytes are read: never sooner (load only delays) */
    if (answered_ms - b.data_at_ms < ACK_DEFER_MS / 2)
        fail_msg("answered %llu ms after the data arrived: not deferred",
                 (unsigned long long)(answered_ms - b.data_at_ms));
    RUN_UNTIL(!x->s || tp_stream_buffered(x->s) == 0, 3000);
    assert_non_null(x->s);
    assert_int_equal(tp_stream_buffered(x->s), 0); /* acknowledged: freed from the queue */
    assert_false(x->closed);
    node_down(&a);
    node_down(&b);
    assert_true(x->closed);
    sctx_free(x);
}

/* Bulk one way to a receiver that never sends stream data: every ACK and every credit update
 * it sends is ACK-only, so the transfer depends on the rules that send them at once
 * (full-sized datagrams, DEFER_MAX_BYTES, consumed window). The echo in
 * test_bulk_backpressure_and_many_streams carries the ACKs on stream data instead. Without
 * those rules the receiver answers once per ACK_DEFER_MS and 8 MiB take some 200 of them
 * (about 4 s); with them, tens of ms (a few hundred under ASan and load). */
static void test_one_way_bulk(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a); /* a sink: no echo */
    tp_conn_t *c = NULL;
    connect_pair(&a, &b, &c);
    enum { BULK = 8 << 20 };
    tp_stats_t a0 = *tp_stats(a.ep), b0 = *tp_stats(b.ep);
    uv_update_time(&loop);
    uint64_t t0 = uv_now(&loop);
    sctx_t *x = client_stream(c, BULK);
    RUN_UNTIL(x->closed, 30000);
    uint64_t took = uv_now(&loop) - t0;
    assert_true(x->closed);
    assert_int_equal(x->close_err, 0);
    assert_int_equal(b.bytes_in, BULK);
    assert_true(b.fin_in);
    assert_int_equal(x->got.len, 0);
    uint64_t out_a = tp_stats(a.ep)->datagrams_out - a0.datagrams_out;
    uint64_t out_b = tp_stats(b.ep)->datagrams_out - b0.datagrams_out;
    uint64_t limit = 100 * ACK_DEFER_MS < 1000 ? 1000 : 100 * ACK_DEFER_MS;
    if (took > limit)
        fail_msg("8 MiB took %llu ms (receiver sent %llu datagrams): ACKs waited for the timer",
                 (unsigned long long)took, (unsigned long long)out_b);
    assert_true(out_a >= BULK / 1452);
    /* the receiver answers at most once per loop turn that read datagrams */
    if (out_b == 0 || out_b > out_a)
        fail_msg("sender %llu datagrams, receiver %llu", (unsigned long long)out_a,
                 (unsigned long long)out_b);
    sctx_free(x);
    node_down(&a);
    node_down(&b);
}

/* ---- Retry (address validation) ----
 * a dials a relay (one UDP socket in the test) that passes datagrams between a and b. When a
 * comes back from b's Retry with the token, the relay first sends b a copy with one token byte
 * changed and an untouched copy from another port (a spoofed source), then the real one. */
typedef struct {
    uv_udp_t sock, spoof;
    struct sockaddr_in a, b;
    int tampered;
    bool drop; /* the path goes silent: nothing passes either way */
} relay_t;

static void relay_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char mem[65536];
    b->base = mem;
    b->len = sizeof mem;
}

static void relay_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                       unsigned flags)
{
    relay_t *r = h->data;
    if (n <= 0 || !from || r->drop) return;
    const struct sockaddr_in *f = (const struct sockaddr_in *)from;
    uv_buf_t out = uv_buf_init(buf->base, (unsigned)n);
    if (f->sin_port == r->b.sin_port) {
        uv_udp_try_send(&r->sock, &out, 1, (const struct sockaddr *)&r->a);
        return;
    }
    r->a = *f;
    ngtcp2_pkt_hd hd;
    if (!r->tampered && ngtcp2_accept(&hd, (uint8_t *)buf->base, (size_t)n) == 0 &&
        hd.type == NGTCP2_PKT_INITIAL && hd.token.len > 0) {
        r->tampered = 1;
        static char bad[65536];
        memcpy(bad, buf->base, (size_t)n);
        bad[(hd.token.base - (uint8_t *)buf->base) + hd.token.len / 2] ^= 0x55;
        uv_buf_t b1 = uv_buf_init(bad, (unsigned)n);
        assert_int_equal(uv_udp_try_send(&r->sock, &b1, 1, (const struct sockaddr *)&r->b), n);
        assert_int_equal(uv_udp_try_send(&r->spoof, &out, 1, (const struct sockaddr *)&r->b), n);
    }
    uv_udp_try_send(&r->sock, &out, 1, (const struct sockaddr *)&r->b);
}

/* A relay on 127.0.0.1 to b; ra: its address (dial it to reach b through it). */
static void relay_up(relay_t *r, node_t *b, struct sockaddr_in *ra)
{
    memset(r, 0, sizeof *r);
    addr_of(b, &r->b);
    struct sockaddr_in any;
    uv_ip4_addr("127.0.0.1", 0, &any);
    uv_udp_init(&loop, &r->sock);
    uv_udp_init(&loop, &r->spoof);
    r->sock.data = r;
    assert_int_equal(uv_udp_bind(&r->sock, (struct sockaddr *)&any, 0), 0);
    assert_int_equal(uv_udp_bind(&r->spoof, (struct sockaddr *)&any, 0), 0);
    int len = sizeof *ra;
    uv_udp_getsockname(&r->sock, (struct sockaddr *)ra, &len);
    assert_int_equal(uv_udp_recv_start(&r->sock, relay_alloc, relay_recv), 0);
}

static void relay_down(relay_t *r)
{
    uv_close((uv_handle_t *)&r->sock, NULL);
    uv_close((uv_handle_t *)&r->spoof, NULL);
}

/* ---- STUN/TURN servers and TURN paths (transport_turn.c) ----
 * The test plays the TURN server and the driver: a UDP socket `relayed` stands for a's relayed
 * address; what b sends there is handed to a with tp_turn_deliver (as a's driver does with an
 * unwrapped Data indication), and a's sender callback sends a's packets out of `relayed` to b. */
typedef struct {
    uv_udp_t sock;
    node_t *a;
    struct sockaddr_in peer; /* b, as the "server" sees it */
    int delivered, calls, sent;
    bool silent; /* delivers nothing more */
} fake_turn_t;

static void fake_turn_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                           unsigned flags)
{
    fake_turn_t *t = h->data;
    if (n <= 0 || !from || t->silent) return;
    t->peer = *(const struct sockaddr_in *)from;
    if (tp_turn_deliver(t->a->ep, from, (const uint8_t *)buf->base, (size_t)n) == 0) t->delivered++;
}

static void fake_turn_send(void *data, const struct sockaddr *peer, const uint8_t *p, size_t n)
{
    fake_turn_t *t = data;
    t->calls++;
    uv_buf_t out = uv_buf_init((char *)p, (unsigned)n);
    if (uv_udp_try_send(&t->sock, &out, 1, peer) == (int)n) t->sent++;
}

static void test_turn_path(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    node_up(&b, secret_a);
    a.echo = true;
    fake_turn_t t = {.a = &a};
    struct sockaddr_in any, relayed;
    uv_ip4_addr("127.0.0.1", 0, &any);
    uv_udp_init(&loop, &t.sock);
    t.sock.data = &t;
    assert_int_equal(uv_udp_bind(&t.sock, (struct sockaddr *)&any, 0), 0);
    int len = sizeof relayed;
    uv_udp_getsockname(&t.sock, (struct sockaddr *)&relayed, &len);
    assert_int_equal(uv_udp_recv_start(&t.sock, relay_alloc, fake_turn_recv), 0);
    tp_turn_set_sender(a.ep, fake_turn_send, &t);

    /* b dials a's "relayed address": the connection on a is on a TURN path's virtual address */
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(b.ep, a.id.id, (struct sockaddr *)&relayed, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    assert_int_equal(a.ready, 1);
    tp_conn_t *ac = tp_find(a.ep, b.id.id);
    assert_non_null(ac);
    struct sockaddr_storage remote, peer;
    tp_conn_remote(ac, &remote);
    assert_true(tp_addr_virtual((struct sockaddr *)&remote));
    assert_true(tp_turn_peer(a.ep, (struct sockaddr *)&remote, &peer));
    assert_int_equal(((struct sockaddr_in *)&peer)->sin_port, t.peer.sin_port); /* b's socket */
    assert_int_equal(((struct sockaddr_in *)&peer)->sin_port, htons(tp_endpoint_port(b.ep)));
    /* b says it sees a at the relayed address (the mesh knows it as its relay candidate) */
    char rs[64];
    addr_format((struct sockaddr *)&relayed, rs, sizeof rs);
    assert_string_equal(tp_conn_seen(ac), rs);
    /* a stream over it, both ways */
    sctx_t *x = client_stream(c, 200000);
    RUN_UNTIL(x->closed, 10000);
    assert_int_equal(x->got.len, 200000);
    sctx_free(x);
    assert_true(t.delivered > 0 && t.sent > 0);
    assert_int_equal(tp_stats(a.ep)->turn_in, (uint64_t)t.delivered);
    assert_int_equal(tp_stats(a.ep)->turn_out, (uint64_t)t.calls);
    /* not a QUIC packet (a punch sent to the relayed address): not delivered */
    static const uint8_t punch[8] = {0x3b, 'm', 'e', 's', 'h', 'l', 'l', 'm'};
    assert_int_equal(tp_turn_deliver(a.ep, (struct sockaddr *)&t.peer, punch, sizeof punch),
                     -EINVAL);
    /* the allocation is gone: the route goes, a's packets to it are dropped (until the peer's
     * next packet, which would make a route again: the fake server delivers none here) */
    t.silent = true;
    tp_turn_routes_clear(a.ep);
    assert_false(tp_turn_peer(a.ep, (struct sockaddr *)&remote, NULL));
    int calls = t.calls;
    uint64_t dropped = tp_stats(a.ep)->dropped;
    x = client_stream(ac, 1000);
    RUN_UNTIL(false, 300);
    assert_int_equal(t.calls, calls);
    assert_true(tp_stats(a.ep)->dropped > dropped);
    tp_turn_set_sender(a.ep, NULL, NULL);
    uv_close((uv_handle_t *)&t.sock, NULL);
    node_down(&a);
    node_down(&b);
    sctx_free(x); /* its stream closed with a */
}

static int raw_hits;
static uint8_t raw_last[64];
static void on_raw_dgram(void *data, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    raw_hits++;
    memcpy(raw_last, p, n < sizeof raw_last ? n : sizeof raw_last);
}

/* Datagrams from a registered server that are STUN or ChannelData go to its handler, before
 * QUIC; the same bytes from another address do not; tp_send_raw leaves from the QUIC port. */
static void test_raw_handler(void **state)
{
    node_t a;
    node_up(&a, secret_a);
    int srv = socket(AF_INET, SOCK_DGRAM, 0), other = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in any, sa, aa;
    uv_ip4_addr("127.0.0.1", 0, &any);
    assert_int_equal(bind(srv, (struct sockaddr *)&any, sizeof any), 0);
    assert_int_equal(bind(other, (struct sockaddr *)&any, sizeof any), 0);
    socklen_t sl = sizeof sa;
    getsockname(srv, (struct sockaddr *)&sa, &sl);
    addr_of(&a, &aa);
    assert_int_equal(tp_set_raw_handler(a.ep, (struct sockaddr *)&sa, on_raw_dgram, NULL), 0);
    /* a Binding success header (no attributes) and a ChannelData message (looks like QUIC) */
    uint8_t stun[20] = {0x01, 0x01, 0, 0, 0x21, 0x12, 0xA4, 0x42};
    uint8_t chan[12] = {0x40, 0x00, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8};
    raw_hits = 0;
    sendto(srv, stun, sizeof stun, 0, (struct sockaddr *)&aa, sizeof aa);
    sendto(srv, chan, sizeof chan, 0, (struct sockaddr *)&aa, sizeof aa);
    sendto(other, chan, sizeof chan, 0, (struct sockaddr *)&aa, sizeof aa);
    sendto(other, stun, sizeof stun, 0, (struct sockaddr *)&aa, sizeof aa);
    RUN_UNTIL(tp_stats(a.ep)->datagrams_in >= 4, 2000);
    assert_int_equal(raw_hits, 2);
    assert_int_equal(tp_stats(a.ep)->raw_in, 2);
    assert_int_equal(raw_last[0], 0x40); /* the ChannelData came second */
    /* out of the QUIC socket */
    assert_int_equal(tp_send_raw(a.ep, (struct sockaddr *)&sa, "ping", 4), 0);
    char buf[16];
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    assert_int_equal(recvfrom(srv, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl), 4);
    assert_int_equal(from.sin_port, aa.sin_port);
    /* removed: no more */
    assert_int_equal(tp_set_raw_handler(a.ep, (struct sockaddr *)&sa, NULL, NULL), 0);
    sendto(srv, stun, sizeof stun, 0, (struct sockaddr *)&aa, sizeof aa);
    RUN_UNTIL(tp_stats(a.ep)->datagrams_in >= 5, 2000);
    assert_int_equal(raw_hits, 2);
    close(srv);
    close(other);
    node_down(&a);
}

/* host NULL: one dual-stack socket. An IPv4 peer's address is plain AF_INET on both ends (not
 * ::ffff:a.b.c.d), an IPv6 peer's is AF_INET6, and both carry streams; "seen" reports either
 * form. An IPv4-only endpoint refuses an IPv6 address up front. */
static void test_dual_stack(void **state)
{
    (void)state;
    int probe = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool v6 = probe >= 0 && bind(probe, (struct sockaddr *)&lo6, sizeof lo6) == 0;
    if (probe >= 0) close(probe);
    if (!v6) skip(); /* this machine has no IPv6 loopback */
    node_t a, b, c4;
    tp_callbacks_t cb;
    tp_config_t cfg;
    tp_config_default(&cfg);
    cfg.handshake_timeout_ms = 3000;
    node_t *ns[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        memset(ns[i], 0, sizeof *ns[i]);
        make_id(&ns[i]->id);
        cb = (tp_callbacks_t){ns[i], on_ready, on_closed, on_stream};
        assert_int_equal(
            tp_endpoint_new(&ns[i]->ep, &loop, &ns[i]->id, secret_a, NULL, 0, &cfg, &cb), 0);
        assert_true(tp_endpoint_ipv6(ns[i]->ep));
    }
    b.echo = true;
    /* over IPv4 */
    struct sockaddr_in sa;
    addr_of(&b, &sa);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&sa, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    assert_int_equal(a.ready, 1);
    tp_conn_t *bc = tp_find(b.ep, a.id.id);
    assert_non_null(bc);
    struct sockaddr_storage r;
    tp_conn_remote(bc, &r);
    assert_int_equal(r.ss_family, AF_INET);
    char s1[64], want[64];
    assert_int_equal(addr_format((struct sockaddr *)&r, s1, sizeof s1), 0);
    snprintf(want, sizeof want, "127.0.0.1:%d", tp_endpoint_port(a.ep));
    assert_string_equal(s1, want);
    assert_string_equal(tp_conn_seen(c), want); /* what b told a it sees */
    sctx_t *x = client_stream(c, 50000);
    RUN_UNTIL(x->closed, 10000);
    assert_int_equal(x->got.len, 50000);
    sctx_free(x);
    tp_conn_close(c, 0, "test");
    RUN_UNTIL(tp_conn_count(a.ep) == 0 && tp_conn_count(b.ep) == 0, 5000);
    /* over IPv6 */
    struct sockaddr_storage s6;
    char b6[64];
    snprintf(b6, sizeof b6, "[::1]:%d", tp_endpoint_port(b.ep));
    assert_int_equal(addr_parse(b6, &s6), 0);
    c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&s6, &c), 0);
    RUN_UNTIL(a.ready == 2 && b.ready == 2, 5000);
    assert_int_equal(a.ready, 2);
    bc = tp_find(b.ep, a.id.id);
    assert_non_null(bc);
    tp_conn_remote(bc, &r);
    assert_int_equal(r.ss_family, AF_INET6);
    snprintf(want, sizeof want, "[::1]:%d", tp_endpoint_port(a.ep));
    assert_string_equal(tp_conn_seen(c), want);
    x = client_stream(c, 50000);
    RUN_UNTIL(x->closed, 10000);
    assert_int_equal(x->got.len, 50000);
    sctx_free(x);
    /* an IPv4-only endpoint: an IPv6 destination is refused, not sent into the void */
    memset(&c4, 0, sizeof c4);
    make_id(&c4.id);
    cb = (tp_callbacks_t){&c4, on_ready, on_closed, on_stream};
    assert_int_equal(tp_endpoint_new(&c4.ep, &loop, &c4.id, secret_a, "0.0.0.0", 0, &cfg, &cb), 0);
    assert_false(tp_endpoint_ipv6(c4.ep));
    assert_int_equal(tp_dial(c4.ep, b.id.id, (struct sockaddr *)&s6, NULL), -EAFNOSUPPORT);
    node_down(&c4);
    node_down(&a);
    node_down(&b);
}

static void test_retry_address_validation(void **state)
{
    node_t a, b;
    node_up(&a, secret_a);
    tp_config_t cfg;
    tp_config_default(&cfg);
    cfg.retry_after = 0; /* every new connection goes through a Retry */
    node_up_cfg(&b, secret_a, &cfg);
    b.echo = true;
    relay_t r;
    struct sockaddr_in ra;
    relay_up(&r, &b, &ra);

    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a.ep, b.id.id, (struct sockaddr *)&ra, &c), 0);
    RUN_UNTIL(a.ready && b.ready, 5000);
    assert_int_equal(a.ready, 1);
    assert_int_equal(b.ready, 1);
    const tp_stats_t *st = tp_stats(b.ep);
    assert_int_equal(st->retries_sent, 1);
    assert_int_equal(r.tampered, 1);
    assert_int_equal(st->bad_tokens, 2); /* the changed token, the spoofed source */
    assert_int_equal(st->conns_accepted, 1);
    assert_int_equal(tp_conn_count(b.ep), 1);
    sctx_t *x = client_stream(c, 5000);
    RUN_UNTIL(x->closed, 5000);
    assert_int_equal(x->got.len, 5000);
    sctx_free(x);

    relay_down(&r);
    node_down(&a);
    node_down(&b);
}

/* ---- liveness (transport.h "Liveness") ---- */

/* a and b with a short liveness bound (and the default 30 s idle timeout); a reaches b through
 * a relay that can go silent; b holds its streams open */
static tp_conn_t *live_pair(node_t *a, node_t *b, relay_t *r, uint64_t live_ms)
{
    tp_config_t cfg;
    tp_config_default(&cfg);
    cfg.handshake_timeout_ms = 3000;
    cfg.live_ms = live_ms;
    node_up_cfg(a, secret_a, &cfg);
    node_up_cfg(b, secret_a, &cfg);
    b->hold = true;
    struct sockaddr_in ra;
    relay_up(r, b, &ra);
    tp_conn_t *c = NULL;
    assert_int_equal(tp_dial(a->ep, b->id.id, (struct sockaddr *)&ra, &c), 0);
    RUN_UNTIL(a->ready && b->ready, 5000);
    assert_int_equal(a->ready, 1);
    return c;
}

static sctx_t *open_held_stream(tp_conn_t *c, node_t *b)
{
    sctx_t *x = calloc(1, sizeof *x); /* no FIN from us, b holds: stays open */
    buf_init(&x->got, 1024);
    x->to_send = 10;
    x->no_fin = true;
    assert_int_equal(tp_stream_open(c, &client_cb, x, &x->s), 0);
    cl_pump(x);
    RUN_UNTIL(b->bytes_in == 10, 5000);
    assert_int_equal(b->bytes_in, 10);
    return x;
}

static void test_silent_peer_ends_busy_connection(void **state)
{
    enum { LIVE = 600 };
    node_t a, b;
    relay_t r;
    tp_conn_t *c = live_pair(&a, &b, &r, LIVE);
    /* idle (no stream): a silent path costs nothing and ends nothing before the idle timeout */
    r.drop = true;
    RUN_UNTIL(a.closed, 4 * LIVE);
    assert_int_equal(a.closed, 0);
    r.drop = false;
    /* a stream in flight: the silent peer is found at the liveness bound, long before the
     * 30 s idle timeout (the old and only bound), and the stream ends with an error */
    sctx_t *x = open_held_stream(c, &b);
    r.drop = true;
    RUN_UNTIL(a.closed && x->closed, 10000);
    assert_int_equal(a.closed, 1);
    assert_int_equal(a.last_err, -ETIMEDOUT);
    assert_non_null(strstr(a.last_why, "peer silent"));
    assert_true(x->closed);
    assert_int_not_equal(x->close_err, 0);
    sctx_free(x);
    relay_down(&r);
    node_down(&a);
    node_down(&b);
}

static void test_quiet_live_peer_keeps_busy_connection(void **state)
{
    enum { LIVE = 400 };
    node_t a, b;
    relay_t r;
    tp_conn_t *c = live_pair(&a, &b, &r, LIVE);
    /* a stream open and nothing sent on it for many liveness bounds: the PINGs keep a live
     * peer's connection up */
    sctx_t *x = open_held_stream(c, &b);
    uint64_t out0 = tp_stats(a.ep)->datagrams_out, outb = tp_stats(b.ep)->datagrams_out;
    uv_update_time(&loop);
    uint64_t t0 = uv_now(&loop);
    RUN_UNTIL(a.closed || x->closed, 8 * LIVE);
    assert_int_equal(a.closed, 0);
    assert_false(x->closed);
    assert_true(tp_stats(a.ep)->datagrams_out > out0); /* the PINGs */
    double secs = (double)(uv_now(&loop) - t0) / 1000;
    printf("[ transport ] a silent stream open, liveness %d ms: %.1f datagrams/s from the "
           "dialer, %.1f from the other side\n",
           LIVE, (double)(tp_stats(a.ep)->datagrams_out - out0) / secs,
           (double)(tp_stats(b.ep)->datagrams_out - outb) / secs);
    relay_down(&r);
    node_down(&a); /* ends the stream (x->closed) before x goes */
    node_down(&b);
    assert_true(x->closed);
    sctx_free(x);
}

/* ---- send-queue caps ---- */

static const tp_stream_cb_t quiet_cb = {NULL, NULL, NULL, NULL};

static void test_send_queue_caps(void **state)
{
    enum { BLK = 16384, HW = 65536, SMAX = 4 * HW, CHW = 8 * HW, CMAX = 16 * HW };
    tp_config_t ca, cb;
    tp_config_default(&ca);
    ca.high_water = HW;
    ca.stream_max_buffer = SMAX;
    ca.conn_high_water = CHW;
    ca.conn_max_buffer = CMAX;
    ca.max_pending_opens = 4;
    tp_config_default(&cb);
    cb.stream_window = HW; /* the sink's window: what a can get out before it reads */
    node_t a, b;
    node_up_cfg(&a, secret_a, &ca);
    node_up_cfg(&b, secret_a, &cb);
    b.hold = true;
    tp_conn_t *c = NULL;
    connect_pair(&a, &b, &c);
    static uint8_t blk[4 * BLK];
    memset(blk, 7, sizeof blk);

    /* one stream, a writer that ignores the high-water mark: told to wait, then refused */
    sctx_t *x = calloc(1, sizeof *x);
    buf_init(&x->got, 1024);
    x->no_fin = true;
    assert_int_equal(tp_stream_open(c, &client_cb, x, &x->s), 0);
    int writes = 0, rc = 0;
    while (writes < 1000 && (rc = tp_stream_write(x->s, blk, BLK)) == 0)
        writes++;
    assert_int_equal(rc, -EAGAIN);
    assert_true(tp_stream_over_high_water(x->s));
    assert_true(tp_stream_buffered(x->s) > SMAX);
    assert_true(tp_stream_buffered(x->s) <= SMAX + BLK);
    RUN_UNTIL(b.bytes_in >= HW, 5000); /* the sink's window fills; it reads nothing */
    assert_int_equal(b.bytes_in, HW);
    assert_true(tp_stream_over_high_water(x->s));
    assert_int_equal(x->drains, 0);
    size_t total = (size_t)writes * BLK;

    /* more streams: the connection's queues stay under its cap */
    sctx_t *ys[16];
    int ny = 0;
    rc = 0;
    while (ny < 16 && rc != -ENOBUFS) {
        sctx_t *y = calloc(1, sizeof *y);
        buf_init(&y->got, 1024);
        y->no_fin = true;
        assert_int_equal(tp_stream_open(c, &client_cb, y, &y->s), 0);
        ys[ny++] = y;
        while ((rc = tp_stream_write(y->s, blk, sizeof blk)) == 0) {
            total += sizeof blk;
            assert_true(tp_conn_buffered(c) <= CMAX);
        }
        assert_true(rc == -EAGAIN || rc == -ENOBUFS);
    }
    assert_int_equal(rc, -ENOBUFS);
    assert_true(tp_conn_buffered(c) <= CMAX);
    assert_true(tp_conn_buffered(c) > CMAX - sizeof blk);
    assert_true(tp_stream_over_high_water(ys[ny - 1]->s)); /* the connection is over its mark */

    /* streams waiting for the peer's stream limit (256): at most max_pending_opens */
    int opened = 0;
    tp_stream_t *s = NULL;
    while (opened < 300 && (rc = tp_stream_open(c, &quiet_cb, NULL, &s)) == 0)
        opened++;
    assert_int_equal(rc, -EAGAIN);
    assert_int_equal(c->n_pending, 4);
    assert_true(tp_stats(a.ep)->writes_refused >= 3);

    /* the sink reads: every writer hears it may go on, the queues empty */
    hold_release(&b);
    RUN_UNTIL(({
                  bool all = x->drains > 0 && tp_conn_buffered(c) == 0;
                  for (int i = 0; i < ny; i++)
                      all = all && ys[i]->drains > 0;
                  all;
              }),
              10000);
    assert_int_equal(x->drains, 1);
    for (int i = 0; i < ny; i++)
        assert_int_equal(ys[i]->drains, 1);
    assert_int_equal(tp_conn_buffered(c), 0);
    RUN_UNTIL(b.bytes_in == total, 5000);
    assert_int_equal(b.bytes_in, total); /* nothing refused was queued, nothing queued lost */
    node_down(&a);
    node_down(&b);
    sctx_free(x);
    for (int i = 0; i < ny; i++)
        sctx_free(ys[i]);
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
        cmocka_unit_test(test_refused_admission_then_new_secret),
        cmocka_unit_test(test_restarted_peer_resets_stale_connection),
        cmocka_unit_test(test_peer_close_ends_streams),
        cmocka_unit_test(test_ack_piggyback_immediate_answer),
        cmocka_unit_test(test_ack_piggyback_delayed_answer),
        cmocka_unit_test(test_one_way_message_acked),
        cmocka_unit_test(test_one_way_bulk),
        cmocka_unit_test(test_retry_address_validation),
        cmocka_unit_test(test_dual_stack),
        cmocka_unit_test(test_turn_path),
        cmocka_unit_test(test_raw_handler),
        cmocka_unit_test(test_send_queue_caps),
        cmocka_unit_test(test_silent_peer_ends_busy_connection),
        cmocka_unit_test(test_quiet_live_peer_keeps_busy_connection),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
