/* Test helpers for unit tests that run two real transport endpoints (net/transport.h) in one
 * libuv loop: the loop, a bounded RUN_UNTIL on its clock, a count of the handles left on it,
 * nodes with a fresh identity listening on 127.0.0.1, and a stream reader standing in for
 * mesh.c's (test_tunnel_rpc, test_tunnels). Include after cmocka.h.
 * Header-only: each test is its own program. */
#ifndef MESH_TEST_TP_PAIR_H
#define MESH_TEST_TP_PAIR_H

#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "identity.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

static uv_loop_t loop;
static uint8_t secret[32]; /* the mesh secret both endpoints use */
static int tick_marker;    /* RUN_UNTIL's own timer, not counted by handles_left */

/* Before anything else: libsodium, the loop, a fresh mesh secret. 0 or -1. */
static inline int pair_init(void)
{
    if (sodium_init() < 0 || uv_loop_init(&loop) != 0) return -1;
    randombytes_buf(secret, 32);
    return 0;
}

static inline void tick_noop(uv_timer_t *t)
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
        _t.data = &tick_marker;                                                                    \
        uv_timer_start(&_t, tick_noop, 20, 20);                                                    \
        while (!(cond) && uv_now(&loop) < _end) {                                                  \
            uv_run(&loop, UV_RUN_ONCE);                                                            \
        }                                                                                          \
        uv_close((uv_handle_t *)&_t, NULL);                                                        \
        uv_run(&loop, UV_RUN_NOWAIT);                                                              \
    } while (0)

static inline void count_cb(uv_handle_t *h, void *arg)
{
    if (h->data != &tick_marker) (*(int *)arg)++;
}

static inline int handles_left(void)
{
    int n = 0;
    uv_walk(&loop, count_cb, &n);
    return n;
}

typedef struct {
    identity_t id;
    tp_endpoint_t *ep;
    int ready; /* connections that became ready */
} node_t;

static inline void make_id(identity_t *id)
{
    crypto_sign_keypair(id->pk, id->sk);
    hex_encode(id->pk, 32, id->id);
    id->incarnation = 1;
}

static inline void node_on_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    (void)c;
    ((node_t *)tp_endpoint_data(ep))->ready++;
}

/* A node with a fresh identity on 127.0.0.1 (any port); on_stream: its incoming streams. */
static inline void node_up(node_t *n,
                           void (*on_stream)(tp_endpoint_t *, tp_conn_t *, tp_stream_t *))
{
    memset(n, 0, sizeof *n);
    make_id(&n->id);
    tp_callbacks_t cb = {n, node_on_ready, NULL, on_stream};
    tp_config_t cfg;
    tp_config_default(&cfg);
    cfg.handshake_timeout_ms = 3000;
    assert_int_equal(tp_endpoint_new(&n->ep, &loop, &n->id, secret, "127.0.0.1", 0, &cfg, &cb), 0);
}

static inline void node_closed_cb(void *d)
{
    (*(int *)d)++;
}

static inline void node_down(node_t *n)
{
    int done = 0;
    tp_endpoint_close(n->ep, node_closed_cb, &done);
    RUN_UNTIL(done, 5000);
    assert_int_equal(done, 1);
}

/* Dial b from a and wait until both sides are ready: the connection, or NULL. */
static inline tp_conn_t *node_connect(node_t *a, node_t *b)
{
    struct sockaddr_in sa;
    tp_conn_t *c = NULL;
    uv_ip4_addr("127.0.0.1", tp_endpoint_port(b->ep), &sa);
    if (tp_dial(a->ep, b->id.id, (struct sockaddr *)&sa, &c) != 0) return NULL;
    RUN_UNTIL(a->ready && b->ready, 5000);
    return a->ready && b->ready ? c : NULL;
}

/* ---- the worker's stream reader: what mesh.c's in_data does with a non-gossip stream ---- */

/* Reads a stream's first frame and hands it to reader_take (mesh_opts_t.on_stream's shape,
 * called with reader_data): a malformed frame resets the stream (reader_bad), one not taken
 * too (reader_refused); a taken stream whose callbacks were replaced is the taker's. Only
 * reader_node's incoming streams are read (the others are reset by the transport). */
static bool (*reader_take)(void *data, tp_stream_t *s, int type, const char *from, json_t *frame,
                           const uint8_t *rest, size_t n);
static void *reader_data;
static node_t *reader_node;
static int reader_bad, reader_refused;

typedef struct {
    wire_reader_t rd;
    char from[ID_HEX_LEN + 1];
    bool done;
} reader_ctx_t;

static inline void reader_data_cb(tp_stream_t *s, const uint8_t *p, size_t n)
{
    reader_ctx_t *x = tp_stream_data(s);
    tp_stream_consumed(s, n);
    while (n > 0 && !x->done) {
        json_t *f = NULL;
        ssize_t used = wire_read(&x->rd, p, n, &f);
        if (used < 0) {
            reader_bad++;
            x->done = true;
            tp_stream_reset(s, 1);
            return;
        }
        p += used;
        n -= (size_t)used;
        if (!f) continue;
        x->done = true; /* one message per stream */
        if (!reader_take(reader_data, s, x->rd.type, x->from, f, p, n)) {
            reader_refused++;
            json_decref(f);
            tp_stream_reset(s, 2);
            return;
        }
        json_decref(f);
        if (tp_stream_data(s) != x) { /* taken over */
            wire_reader_free(&x->rd);
            free(x);
            return;
        }
    }
}

static inline void reader_fin_cb(tp_stream_t *s)
{
    tp_stream_shutdown(s);
}

static inline void reader_close_cb(tp_stream_t *s, int err)
{
    (void)err;
    reader_ctx_t *x = tp_stream_data(s);
    wire_reader_free(&x->rd);
    free(x);
}

static const tp_stream_cb_t reader_cb = {reader_data_cb, reader_fin_cb, NULL, reader_close_cb};

/* node_up's on_stream for both nodes. */
static inline void reader_on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    if (tp_endpoint_data(ep) != reader_node) return; /* no callbacks: the transport resets it */
    reader_ctx_t *x = calloc(1, sizeof *x);
    if (!x) return;
    wire_reader_init(&x->rd, 1);
    snprintf(x->from, sizeof x->from, "%s", tp_conn_peer_id(c));
    tp_stream_set_cb(s, &reader_cb, x);
}

#endif
