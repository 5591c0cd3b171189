/* tunnel_rpc: TCP <-> QUIC <-> TCP relays between two real transport endpoints in one loop.
 * A TCP echo server (and a sink, and a counting server) stand in for ggml-rpc-server; TCP
 * clients stand in for llama-server's RPC client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "identity.h"
#include "transport.h"
#include "tunnel_rpc.h"
#include "util.h"
#include "wire.h"

#include "tp_pair.h"

/* ---------------- test data ---------------- */

static uint8_t pat(unsigned seed, size_t i)
{
    return (uint8_t)(i * 7 + (i >> 8) * 31 + (i >> 16) * 101 + seed * 13);
}

/* ---------------- the two nodes ---------------- */

static node_t host, worker;
static tp_conn_t *hconn;          /* host -> worker */
static int rpc_port;              /* what the worker passes to tunnel_rpc_serve */
static tunnel_rpc_stats_t rpc_st; /* the counters both sides count into (as the node's) */
static tunnel_rpc_opts_t opts;    /* both sides' (the defaults; a test changes and restores them) */

/* The worker takes TUNNEL_RPC streams (as tunnels.c does, with rpc_port for every one). */
static bool take_rpc(void *data, tp_stream_t *s, int type, const char *from, json_t *frame,
                     const uint8_t *rest, size_t n)
{
    (void)data;
    (void)from;
    if (type != WIRE_TUNNEL_RPC) return false;
    tunnel_rpc_serve(&loop, s, frame, rest, n, rpc_port, &opts, &rpc_st);
    return true;
}

/* get_conn: NULL for the first `null_calls` calls, optionally closing the listener */
static int get_calls, null_calls;
static rpc_fwd_t *close_in_get_conn;

static tp_conn_t *get_conn(void *data, const char *peer_id)
{
    get_calls++;
    assert_string_equal(peer_id, worker.id.id);
    assert_ptr_equal(data, &host);
    if (close_in_get_conn && get_calls >= 2) {
        rpc_fwd_t *f = close_in_get_conn;
        close_in_get_conn = NULL;
        tunnel_rpc_close(f);
        return NULL;
    }
    if (get_calls <= null_calls) return NULL;
    return tp_find(host.ep, peer_id);
}

/* ---------------- TCP servers standing in for rpc-server ---------------- */

typedef enum { SRV_ECHO, SRV_SINK, SRV_COUNT } srv_mode_t;

typedef struct {
    uv_tcp_t h;
    srv_mode_t mode;
    int port;
    int conns_open, conns_total;
    size_t bytes;
    bool paused; /* some connection's writes backed up */
} tsrv_t;

typedef struct {
    uv_tcp_t h;
    tsrv_t *srv;
    size_t pending, got;
    bool eof, paused;
    uv_shutdown_t sd;
} sconn_t;

typedef struct {
    uv_write_t w;
    sconn_t *c;
    size_t n;
    char data[];
} swr_t;

static char rbuf[65536];
static void rd_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    b->base = rbuf;
    b->len = sizeof rbuf;
}

static void sconn_closed(uv_handle_t *h)
{
    sconn_t *c = h->data;
    c->srv->conns_open--;
    free(c);
}

static void sconn_close(sconn_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->h)) uv_close((uv_handle_t *)&c->h, sconn_closed);
}

static void sconn_shut_done(uv_shutdown_t *r, int status)
{
    sconn_close(r->data);
}

static void sconn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

static void sconn_written(uv_write_t *w, int status)
{
    swr_t *r = (swr_t *)w;
    sconn_t *c = r->c;
    c->pending -= r->n;
    free(r);
    if (status < 0) {
        sconn_close(c);
        return;
    }
    if (c->paused && c->pending < (1u << 20) && !uv_is_closing((uv_handle_t *)&c->h)) {
        c->paused = false;
        uv_read_start((uv_stream_t *)&c->h, rd_alloc, sconn_read);
    }
    if (c->eof && c->pending == 0 && !uv_is_closing((uv_handle_t *)&c->h)) {
        c->sd.data = c;
        if (uv_shutdown(&c->sd, (uv_stream_t *)&c->h, sconn_shut_done) != 0) sconn_close(c);
    }
}

static void sconn_send(sconn_t *c, const void *p, size_t n)
{
    swr_t *r = malloc(sizeof *r + n);
    r->c = c;
    r->n = n;
    memcpy(r->data, p, n);
    c->pending += n;
    uv_buf_t b = uv_buf_init(r->data, (unsigned)n);
    if (uv_write(&r->w, (uv_stream_t *)&c->h, &b, 1, sconn_written) != 0) {
        c->pending -= n;
        free(r);
        sconn_close(c);
    }
}

static void sconn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    sconn_t *c = st->data;
    if (n == 0) return;
    if (n < 0) {
        uv_read_stop(st);
        if (n != UV_EOF || c->srv->mode == SRV_SINK) {
            sconn_close(c);
            return;
        }
        c->eof = true;
        if (c->srv->mode == SRV_COUNT) {
            uint64_t v = c->got; /* answer after the client's half-close */
            uint8_t be[8];
            for (int i = 0; i < 8; i++)
                be[i] = (uint8_t)(v >> (56 - 8 * i));
            sconn_send(c, be, 8);
        } else if (c->pending == 0) {
            c->sd.data = c;
            if (uv_shutdown(&c->sd, st, sconn_shut_done) != 0) sconn_close(c);
        }
        return;
    }
    c->got += (size_t)n;
    c->srv->bytes += (size_t)n;
    if (c->srv->mode != SRV_ECHO) return;
    sconn_send(c, b->base, (size_t)n);
    if (c->pending > (4u << 20)) {
        uv_read_stop(st);
        c->paused = true;
        c->srv->paused = true;
    }
}

static void srv_conn(uv_stream_t *s, int status)
{
    tsrv_t *srv = s->data;
    sconn_t *c = calloc(1, sizeof *c);
    c->srv = srv;
    uv_tcp_init(&loop, &c->h);
    c->h.data = c;
    srv->conns_open++;
    srv->conns_total++;
    if (uv_accept(s, (uv_stream_t *)&c->h) != 0) {
        sconn_close(c);
        return;
    }
    uv_read_start((uv_stream_t *)&c->h, rd_alloc, sconn_read);
}

static void srv_start(tsrv_t *srv, srv_mode_t mode)
{
    memset(srv, 0, sizeof *srv);
    srv->mode = mode;
    uv_tcp_init(&loop, &srv->h);
    srv->h.data = srv;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_tcp_bind(&srv->h, (struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&srv->h, 64, srv_conn), 0);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_tcp_getsockname(&srv->h, (struct sockaddr *)&ss, &len);
    srv->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void srv_stop(tsrv_t *srv)
{
    uv_close((uv_handle_t *)&srv->h, NULL);
}

/* ---------------- TCP clients standing in for llama-server ---------------- */

typedef struct {
    uv_tcp_t h;
    uv_connect_t cr;
    uv_shutdown_t sd;
    unsigned seed;
    size_t to_send, sent, queued;
    bool no_fin, no_read, connected, eof, closed, shut;
    int err;
    buf_t got;
} client_t;

typedef struct {
    uv_write_t w;
    client_t *c;
    size_t n;
    uint8_t data[];
} cwr_t;

static void cl_pump(client_t *c);

static void cl_closed(uv_handle_t *h)
{
    ((client_t *)h->data)->closed = true;
}

static void cl_close(client_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->h)) uv_close((uv_handle_t *)&c->h, cl_closed);
}

static void cl_written(uv_write_t *w, int status)
{
    cwr_t *r = (cwr_t *)w;
    client_t *c = r->c;
    c->queued -= r->n;
    free(r);
    if (status < 0) {
        if (!c->err) c->err = status;
        cl_close(c);
        return;
    }
    cl_pump(c);
}

static void cl_shut(uv_shutdown_t *r, int status)
{
    (void)r;
    (void)status;
}

static void cl_pump(client_t *c)
{
    if (uv_is_closing((uv_handle_t *)&c->h)) return;
    while (c->sent < c->to_send && c->queued < (1u << 20)) {
        size_t n = c->to_send - c->sent < 65536 ? c->to_send - c->sent : 65536;
        cwr_t *r = malloc(sizeof *r + n);
        r->c = c;
        r->n = n;
        for (size_t i = 0; i < n; i++)
            r->data[i] = pat(c->seed, c->sent + i);
        uv_buf_t b = uv_buf_init((char *)r->data, (unsigned)n);
        if (uv_write(&r->w, (uv_stream_t *)&c->h, &b, 1, cl_written) != 0) {
            free(r);
            cl_close(c);
            return;
        }
        c->sent += n;
        c->queued += n;
    }
    if (c->sent == c->to_send && !c->no_fin && !c->shut) {
        c->shut = true;
        uv_shutdown(&c->sd, (uv_stream_t *)&c->h, cl_shut);
    }
}

static void cl_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    client_t *c = st->data;
    if (n == 0) return;
    if (n < 0) {
        if (n == UV_EOF)
            c->eof = true;
        else if (!c->err)
            c->err = (int)n;
        cl_close(c);
        return;
    }
    assert_int_equal(buf_append(&c->got, b->base, (size_t)n), 0);
}

static void cl_connected(uv_connect_t *r, int status)
{
    client_t *c = r->data;
    if (status < 0) {
        c->err = status;
        cl_close(c);
        return;
    }
    c->connected = true;
    if (!c->no_read) uv_read_start((uv_stream_t *)&c->h, rd_alloc, cl_read);
    cl_pump(c);
}

static client_t *cl_start(int port, unsigned seed, size_t n, bool no_fin)
{
    client_t *c = calloc(1, sizeof *c);
    c->seed = seed;
    c->to_send = n;
    c->no_fin = no_fin;
    buf_init(&c->got, 128u << 20);
    uv_tcp_init(&loop, &c->h);
    c->h.data = c;
    c->cr.data = c;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    assert_int_equal(uv_tcp_connect(&c->cr, &c->h, (struct sockaddr *)&sa, cl_connected), 0);
    return c;
}

static void cl_free(client_t *c)
{
    assert_true(c->closed);
    buf_free(&c->got);
    free(c);
}

static void assert_echoed(const client_t *c, size_t n)
{
    assert_true(c->eof);
    assert_int_equal(c->err, 0);
    assert_int_equal(c->got.len, n);
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)c->got.data[i] != pat(c->seed, i))
            fail_msg("client %u: byte %zu differs", c->seed, i);
}

/* ---------------- fixture ---------------- */

static tsrv_t echo, sink, counter;
static tunnel_rpc_stats_t st0; /* counters at the start of a test */

static int setup(void **state)
{
    tunnel_rpc_opts_default(&opts);
    node_up(&host, reader_on_stream);
    node_up(&worker, reader_on_stream);
    reader_node = &worker;
    reader_take = take_rpc;
    hconn = node_connect(&host, &worker);
    if (!hconn) return -1;
    srv_start(&echo, SRV_ECHO);
    srv_start(&sink, SRV_SINK);
    srv_start(&counter, SRV_COUNT);
    rpc_port = echo.port;
    reader_bad = 0;
    get_calls = null_calls = 0;
    close_in_get_conn = NULL;
    st0 = rpc_st;
    return 0;
}

static int teardown(void **state)
{
    RUN_UNTIL(rpc_st.links_active == 0, 5000);
    assert_int_equal(rpc_st.links_active, 0);
    node_down(&host);
    node_down(&worker);
    srv_stop(&echo);
    srv_stop(&sink);
    srv_stop(&counter);
    RUN_UNTIL(handles_left() == 0, 5000);
    assert_int_equal(handles_left(), 0); /* nothing of the tunnels is left on the loop */
    assert_false(uv_loop_alive(&loop));
    return 0;
}

static rpc_fwd_t *listen_fwd(void)
{
    rpc_fwd_t *f = NULL;
    assert_int_equal(
        tunnel_rpc_listen(&loop, worker.id.id, "stories260K", get_conn, &host, &opts, &f), 0);
    tunnel_rpc_set_stats(f, &rpc_st);
    assert_true(tunnel_rpc_port(f) > 0);
    return f;
}

static void close_fwd(rpc_fwd_t *f)
{
    tunnel_rpc_close(f);
    RUN_UNTIL(rpc_st.links_active == 0, 5000);
}

/* ---------------- tests ---------------- */

/* (1) 8 MiB through one link, echoed back byte-exact; half-close both ways */
static void test_echo_8mib(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    client_t *c = cl_start(tunnel_rpc_port(f), 1, 8u << 20, false);
    RUN_UNTIL(c->closed, 60000);
    assert_echoed(c, 8u << 20);
    cl_free(c);
    RUN_UNTIL(echo.conns_open == 0 && rpc_st.links_active == 0, 5000);
    assert_int_equal(echo.conns_total, 1);
    assert_int_equal(echo.conns_open, 0);
    assert_int_equal(rpc_st.links_active, 0); /* both relays ended cleanly */
    /* the echo answered what it was sent: at least one request/response turn, at most one per
     * chunk the worker sent back */
    uint64_t turns = rpc_st.host_turns - st0.host_turns;
    assert_true(turns >= 1);
    assert_true(turns <= (8u << 20) / 1024);
    close_fwd(f);
}

/* (2) 4 concurrent TCP connections through one listener */
static void test_four_concurrent(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    client_t *c[4];
    for (unsigned i = 0; i < 4; i++)
        c[i] = cl_start(tunnel_rpc_port(f), 10 + i, (2u << 20) + i * 12345, false);
    RUN_UNTIL(c[0]->closed && c[1]->closed && c[2]->closed && c[3]->closed, 60000);
    for (unsigned i = 0; i < 4; i++) {
        assert_echoed(c[i], (2u << 20) + i * 12345);
        cl_free(c[i]);
    }
    assert_int_equal(echo.conns_total, 4);
    assert_int_equal(rpc_st.links_opened - st0.links_opened, 4);
    close_fwd(f);
}

/* back-pressure end to end: a client that does not read stalls the echo server, and the
 * tunnels hold no more than their windows meanwhile; once it reads, everything arrives */
static void test_slow_reader(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    size_t n = 64u << 20;
    client_t *c = cl_start(tunnel_rpc_port(f), 2, n, false);
    c->no_read = true; /* set before the connect callback runs */
    RUN_UNTIL(echo.conns_total == 1 && echo.paused, 30000);
    assert_true(echo.paused); /* the echo's writes back stalled: the worker stopped reading */
    size_t sent = c->sent;
    assert_true(sent < n);
    assert_true(rpc_st.read_pauses > st0.read_pauses);
    uv_read_start((uv_stream_t *)&c->h, rd_alloc, cl_read);
    RUN_UNTIL(c->closed, 60000);
    assert_echoed(c, n);
    cl_free(c);
    close_fwd(f);
}

/* half-close: the server answers only after the client's EOF came through */
static void test_half_close(void **state)
{
    rpc_port = counter.port;
    rpc_fwd_t *f = listen_fwd();
    client_t *c = cl_start(tunnel_rpc_port(f), 3, 3u << 20, false);
    RUN_UNTIL(c->closed, 30000);
    assert_true(c->eof);
    assert_int_equal(c->err, 0);
    assert_int_equal(c->got.len, 8);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | (uint8_t)c->got.data[i];
    assert_int_equal(v, 3u << 20);
    cl_free(c);
    close_fwd(f);
}

/* (3) the worker's rpc port refuses: the host's TCP connection closes, the listener lives on */
static void test_rpc_refused(void **state)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* bound, never listening: connect is refused */
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    rpc_port = ntohs(sa.sin_port);
    rpc_fwd_t *f = listen_fwd();
    client_t *c = cl_start(tunnel_rpc_port(f), 4, 1000, false);
    RUN_UNTIL(c->closed, 5000);
    assert_true(c->closed);
    assert_int_equal(c->got.len, 0);
    cl_free(c);
    assert_int_equal(rpc_st.worker_failed - st0.worker_failed, 1);
    /* no rpc-server at all on the worker: same */
    rpc_port = 0;
    c = cl_start(tunnel_rpc_port(f), 5, 1000, false);
    RUN_UNTIL(c->closed, 5000);
    assert_true(c->closed);
    assert_int_equal(c->got.len, 0);
    cl_free(c);
    assert_int_equal(rpc_st.worker_failed - st0.worker_failed, 2);
    /* the listener still works */
    rpc_port = echo.port;
    c = cl_start(tunnel_rpc_port(f), 6, 100000, false);
    RUN_UNTIL(c->closed, 10000);
    assert_echoed(c, 100000);
    cl_free(c);
    close(fd);
    close_fwd(f);
}

/* (4) the QUIC connection dies mid-transfer: both TCP sides close */
static void test_conn_dies_mid_transfer(void **state)
{
    rpc_port = sink.port;
    rpc_fwd_t *f = listen_fwd();
    client_t *c = cl_start(tunnel_rpc_port(f), 7, (size_t)1 << 30, true);
    RUN_UNTIL(sink.bytes > (2u << 20), 20000);
    assert_true(sink.bytes > (2u << 20));
    assert_false(c->closed);
    tp_conn_close(hconn, 0, "test");
    RUN_UNTIL(c->closed && sink.conns_open == 0 && rpc_st.links_active == 0, 5000);
    assert_true(c->closed);
    assert_true(c->sent < c->to_send);
    assert_int_equal(sink.conns_open, 0);
    assert_int_equal(rpc_st.links_active, 0);
    cl_free(c);
    close_fwd(f);
}

static int suspects;
static char suspected[ID_HEX_LEN + 1], suspect_why[128];

static void on_suspect(void *data, const char *peer_id, const char *why)
{
    assert_ptr_equal(data, &host);
    suspects++;
    snprintf(suspected, sizeof suspected, "%s", peer_id);
    snprintf(suspect_why, sizeof suspect_why, "%s", why);
}

/* The host suspects its worker: a reply overdue (again, at doubling intervals, while the
 * silence lasts) and a lost connection; a worker that answers is not suspected. */
static void test_suspect(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    tunnel_rpc_on_suspect(f, on_suspect); /* default quiet time (2 s): echoed at once */
    suspects = 0;
    client_t *c = cl_start(tunnel_rpc_port(f), 50, 50000, false);
    RUN_UNTIL(c->closed, 5000);
    assert_echoed(c, 50000);
    cl_free(c);
    assert_int_equal(suspects, 0);
    close_fwd(f);

    opts.quiet_ms = 100;
    opts.coalesce = false; /* any bytes sent wait for a reply */
    rpc_port = sink.port;  /* takes everything, never answers */
    f = listen_fwd();
    tunnel_rpc_on_suspect(f, on_suspect);
    c = cl_start(tunnel_rpc_port(f), 51, 1000, true);
    RUN_UNTIL(suspects >= 2, 5000); /* after 100 ms, then 200 ms more */
    tunnel_rpc_opts_default(&opts);
    assert_true(suspects >= 2);
    assert_string_equal(suspected, worker.id.id);
    assert_non_null(strstr(suspect_why, "overdue"));
    assert_int_equal(rpc_st.suspects - st0.suspects, (uint64_t)suspects);
    assert_false(c->closed);
    tp_conn_close(hconn, 0, "test"); /* the connection is lost: suspected at once */
    RUN_UNTIL(c->closed, 5000);
    assert_true(c->closed);
    assert_non_null(strstr(suspect_why, "connection lost"));
    cl_free(c);
    close_fwd(f);
}

/* (5) tunnel_rpc_close with live relays (mid-transfer, and waiting for a connection) */
static void test_close_with_live_relays(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    client_t *c[3];
    for (unsigned i = 0; i < 3; i++)
        c[i] = cl_start(tunnel_rpc_port(f), 20 + i, (size_t)1 << 30, true);
    RUN_UNTIL(c[0]->got.len > 300000 && c[1]->got.len > 300000 && c[2]->got.len > 300000, 20000);
    assert_int_equal(echo.conns_open, 3);
    null_calls = 1000000; /* a fourth waits for a connection */
    client_t *w = cl_start(tunnel_rpc_port(f), 30, 1000, false);
    RUN_UNTIL(get_calls >= 2, 5000);
    assert_int_equal(rpc_st.links_active - st0.links_active, 7);
    tunnel_rpc_close(f);
    RUN_UNTIL(c[0]->closed && c[1]->closed && c[2]->closed && w->closed && echo.conns_open == 0 &&
                  rpc_st.links_active == 0,
              5000);
    for (unsigned i = 0; i < 3; i++) {
        assert_true(c[i]->closed);
        cl_free(c[i]);
    }
    assert_int_equal(w->got.len, 0);
    cl_free(w);
    assert_int_equal(echo.conns_open, 0);
    assert_int_equal(rpc_st.links_active, 0);
}

/* tunnel_rpc_close from inside get_conn (a callback of the listener's own relay) */
static void test_close_from_get_conn(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    null_calls = 1000000;
    close_in_get_conn = f;
    client_t *c = cl_start(tunnel_rpc_port(f), 31, 1000, false);
    RUN_UNTIL(c->closed, 5000);
    assert_true(c->closed);
    assert_int_equal(get_calls, 2);
    assert_null(close_in_get_conn);
    cl_free(c);
}

/* get_conn retries while the dial is under way, and gives up after the deadline */
static void test_get_conn_retry(void **state)
{
    null_calls = 3;
    rpc_fwd_t *f = listen_fwd();
    client_t *c = cl_start(tunnel_rpc_port(f), 40, 50000, false);
    RUN_UNTIL(c->closed, 5000);
    assert_echoed(c, 50000);
    assert_int_equal(get_calls, 4);
    cl_free(c);
    close_fwd(f);

    opts.connect_ms = 300;
    f = listen_fwd();
    tunnel_rpc_opts_default(&opts);
    get_calls = 0;
    null_calls = 1000000;
    c = cl_start(tunnel_rpc_port(f), 41, 1000, false);
    RUN_UNTIL(c->closed, 3000);
    assert_true(c->closed);
    assert_int_equal(c->got.len, 0);
    assert_true(get_calls >= 4 && get_calls <= 9); /* every 50 ms for 300 ms */
    assert_int_equal(rpc_st.links_failed - st0.links_failed, 1);
    cl_free(c);
    close_fwd(f);
}

/* malformed control frames reset the stream */
typedef struct {
    bool closed;
    int err;
} raw_t;

static void raw_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tp_stream_consumed(s, n);
}

static void raw_close(tp_stream_t *s, int err)
{
    raw_t *r = tp_stream_data(s);
    r->closed = true;
    r->err = err;
}

static const tp_stream_cb_t raw_cb = {raw_data, NULL, NULL, raw_close};

static void raw_stream(const char *json, bool valid_json, raw_t *r)
{
    buf_t b;
    buf_init(&b, 4096);
    if (valid_json) {
        json_t *fr = json_loads(json, 0, NULL);
        assert_non_null(fr);
        assert_int_equal(wire_write(&b, WIRE_TUNNEL_RPC, fr), 0);
        json_decref(fr);
    } else {
        uint8_t h[5] = {WIRE_TUNNEL_RPC, 0, 0, 0, (uint8_t)strlen(json)};
        buf_append(&b, h, 5);
        buf_append(&b, json, strlen(json));
    }
    buf_append(&b, "hello", 5);
    tp_stream_t *s = NULL;
    assert_int_equal(tp_stream_open(hconn, &raw_cb, r, &s), 0);
    assert_int_equal(tp_stream_write(s, b.data, b.len), 0);
    buf_free(&b);
}

static void test_bad_frames(void **state)
{
    raw_t r[4] = {0};
    raw_stream("{\"v\":1}", true, &r[0]);
    raw_stream("{\"v\":1,\"model\":5}", true, &r[1]);
    raw_stream("{\"v\":1,\"model\":\"\"}", true, &r[2]);
    raw_stream("{\"v\":1,\"model\"", false, &r[3]);
    RUN_UNTIL(r[0].closed && r[1].closed && r[2].closed && r[3].closed, 5000);
    for (int i = 0; i < 4; i++) {
        assert_true(r[i].closed);
        assert_int_not_equal(r[i].err, 0);
    }
    assert_int_equal(reader_bad, 1);
    assert_int_equal(rpc_st.worker_failed - st0.worker_failed, 3);
    assert_int_equal(echo.conns_total, 0);
    /* a good one after them */
    raw_t ok = {0};
    raw_stream("{\"v\":1,\"model\":\"m\"}", true, &ok);
    RUN_UNTIL(echo.bytes == 5, 5000);
    assert_int_equal(echo.bytes, 5);
    assert_false(ok.closed);
    tp_conn_close(hconn, 0, "done"); /* closes the open raw stream */
    RUN_UNTIL(ok.closed && echo.conns_open == 0, 5000);
    assert_true(ok.closed);
}

/* (6) the counters add up */
static void test_counters(void **state)
{
    rpc_fwd_t *f = listen_fwd();
    client_t *a = cl_start(tunnel_rpc_port(f), 50, 1u << 20, false);
    RUN_UNTIL(a->closed, 10000);
    assert_echoed(a, 1u << 20);
    cl_free(a);
    rpc_port = sink.port;
    client_t *b = cl_start(tunnel_rpc_port(f), 51, 100000, false);
    RUN_UNTIL(b->closed && sink.bytes == 100000, 10000);
    assert_int_equal(sink.bytes, 100000);
    cl_free(b);
    RUN_UNTIL(rpc_st.links_active == 0, 5000);
    const tunnel_rpc_stats_t *s = &rpc_st;
    assert_int_equal(s->host_tx - st0.host_tx, (1u << 20) + 100000);
    assert_int_equal(s->worker_rx - st0.worker_rx, (1u << 20) + 100000);
    assert_int_equal(s->worker_tx - st0.worker_tx, 1u << 20);
    assert_int_equal(s->host_rx - st0.host_rx, 1u << 20);
    assert_int_equal(s->links_opened - st0.links_opened, 2);
    assert_int_equal(s->worker_opened - st0.worker_opened, 2);
    assert_int_equal(s->links_failed - st0.links_failed, 0);
    assert_int_equal(s->worker_failed - st0.worker_failed, 0);
    assert_int_equal(s->links_active, 0);
    close_fwd(f);
}

int main(void)
{
    if (pair_init() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_echo_8mib, setup, teardown),
        cmocka_unit_test_setup_teardown(test_four_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conn_dies_mid_transfer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_live_relays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_get_conn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_conn_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_suspect, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
