/* mesh-test-peer TOKEN — an admitted but hostile peer for integration tests: it joins the mesh
 * of TOKEN with a fresh key and sends malformed streams (bad type bytes, oversized and broken
 * frames, invalid gossip, unsupported tunnels, random bytes, resets). Exit 0 when all of them
 * were sent over an admitted connection, 2 when it could not connect.
 *
 * mesh-test-peer TOKEN tunnel MODEL REQUEST_FILE — one TUNNEL_HTTP stream for MODEL carrying the
 * bytes of REQUEST_FILE as they are (e.g. pipelined requests); what the node answers is written
 * to stdout. Exit 0 when the node closed the stream, 2 when it could not connect, 3 when no
 * answer ended within 30 s. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "identity.h"
#include "transport.h"
#include "wire.h"

static int ready, closed, done_streams, total_streams;
static tp_conn_t *conn;

static void s_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tp_stream_consumed(s, n);
}
static void s_close(tp_stream_t *s, int err)
{
    done_streams++;
}
static const tp_stream_cb_t cb = {s_data, NULL, NULL, s_close};

static void on_ready(tp_endpoint_t *ep, tp_conn_t *c)
{
    ready = 1;
    conn = c;
}
static void on_closed(tp_endpoint_t *ep, tp_conn_t *c, bool was_ready, int err, const char *why)
{
    closed = 1;
    fprintf(stderr, "mesh-test-peer: connection closed: %s\n", why);
}

static void send_raw(const void *p, size_t n, bool fin, bool reset)
{
    tp_stream_t *s;
    if (tp_stream_open(conn, &cb, NULL, &s) != 0) return;
    total_streams++;
    if (n) tp_stream_write(s, p, n);
    if (reset)
        tp_stream_reset(s, 7);
    else if (fin)
        tp_stream_shutdown(s);
}

static void send_frame(int type, const char *json)
{
    buf_t b;
    buf_init(&b, 1 << 21);
    uint8_t hdr[5] = {(uint8_t)type, 0, 0, 0, 0};
    size_t n = strlen(json);
    hdr[1] = (uint8_t)(n >> 24);
    hdr[2] = (uint8_t)(n >> 16);
    hdr[3] = (uint8_t)(n >> 8);
    hdr[4] = (uint8_t)n;
    buf_append(&b, hdr, 5);
    buf_append(&b, json, n);
    send_raw(b.data, b.len, true, false);
    buf_free(&b);
}

/* ---- tunnel mode ---- */

static buf_t tun_answer;
static bool tun_done;

static void tun_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    buf_append(&tun_answer, p, n);
    tp_stream_consumed(s, n);
}
static void tun_fin(tp_stream_t *s)
{
    tun_done = true;
}
static void tun_close(tp_stream_t *s, int err)
{
    tun_done = true;
}
static const tp_stream_cb_t tun_cb = {tun_data, tun_fin, NULL, tun_close};

static int tunnel_mode(uv_loop_t *loop, const char *model, const char *request_file)
{
    FILE *f = fopen(request_file, "rb");
    if (!f) {
        perror(request_file);
        return 1;
    }
    buf_t b;
    buf_init(&b, 1 << 24);
    json_t *fr = json_pack("{s:i,s:s}", "v", 1, "model", model);
    wire_write(&b, WIRE_TUNNEL_HTTP, fr);
    json_decref(fr);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, n);
    fclose(f);
    buf_init(&tun_answer, 1 << 24);
    tp_stream_t *s;
    if (tp_stream_open(conn, &tun_cb, NULL, &s) != 0) return 1;
    tp_stream_write(s, b.data, b.len);
    tp_stream_shutdown(s);
    buf_free(&b);
    uint64_t end = uv_now(loop) + 30000;
    while (!tun_done && !closed && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    fwrite(tun_answer.data ? tun_answer.data : "", 1, tun_answer.len, stdout);
    fflush(stdout);
    return tun_done ? 0 : 3;
}

static void tick(uv_timer_t *t)
{
    (void)t;
}

int main(int argc, char **argv)
{
    if (argc < 2 || sodium_init() < 0) {
        fprintf(stderr, "usage: mesh-test-peer TOKEN\n");
        return 1;
    }
    token_t tok;
    char err[256];
    if (token_decode(argv[1], strlen(argv[1]), &tok, err, sizeof err) != 0) {
        fprintf(stderr, "mesh-test-peer: %s\n", err);
        return 1;
    }
    identity_t id;
    crypto_sign_keypair(id.pk, id.sk);
    hex_encode(id.pk, 32, id.id);
    id.incarnation = 1;
    uv_loop_t *loop = uv_default_loop();
    tp_endpoint_t *ep;
    tp_callbacks_t cbs = {NULL, on_ready, on_closed, NULL};
    if (tp_endpoint_new(&ep, loop, &id, tok.secret, "0.0.0.0", 0, NULL, &cbs) != 0) return 1;
    char host[64];
    int port;
    struct sockaddr_in sa;
    addr_split(tok.addrs[tok.n_addrs - 1], host, sizeof host, &port); /* loopback is last */
    uv_ip4_addr(host, port, &sa);
    tp_dial(ep, tok.id, (struct sockaddr *)&sa, NULL);
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, tick, 20, 20);
    uint64_t end = uv_now(loop) + 10000;
    while (!ready && !closed && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    if (!ready) return 2;
    if (argc >= 5 && strcmp(argv[2], "tunnel") == 0) return tunnel_mode(loop, argv[3], argv[4]);

    uint8_t b1[] = {0x99, 0, 0, 0, 2, '{', '}'};
    send_raw(b1, sizeof b1, true, false);                 /* unknown stream type */
    uint8_t b2[] = {WIRE_GOSSIP, 0xff, 0xff, 0xff, 0xff}; /* 4 GiB frame */
    send_raw(b2, sizeof b2, true, false);
    uint8_t b3[] = {WIRE_GOSSIP, 0, 0, 0, 0}; /* empty frame */
    send_raw(b3, sizeof b3, true, false);
    send_frame(WIRE_GOSSIP, "notjs");
    send_frame(WIRE_GOSSIP, "[1,2,3]");
    send_frame(WIRE_GOSSIP, "{\"v\":2,\"type\":\"hb\"}");
    send_frame(WIRE_GOSSIP, "{\"v\":1,\"type\":\"hb\",\"inc\":\"x\",\"digest\":7}");
    send_frame(WIRE_GOSSIP, "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"ann\":{\"id\":\"nope\"}}");
    send_frame(WIRE_GOSSIP, "{\"v\":1,\"type\":\"sync\",\"inc\":1,\"anns\":[1,2,{\"id\":5}]}");
    send_frame(WIRE_PEER_DOWN, "{\"v\":1,\"type\":\"peer_down\",\"id\":\"zz\",\"inc\":1}");
    send_frame(WIRE_PEER_LEAVING, "{\"v\":1,\"type\":\"leaving\",\"inc\":\"many\"}");
    send_frame(WIRE_TUNNEL_HTTP, "{\"v\":1,\"model\":\"nothing\"}");
    send_frame(WIRE_ROUTE_REQUEST, "{\"v\":1}");
    uint8_t b4[] = {WIRE_GOSSIP, 0, 0, 1, 0, '{', '"'}; /* half a frame, then FIN */
    send_raw(b4, sizeof b4, true, false);
    send_raw(b4, sizeof b4, false, true); /* half a frame, then reset */
    uint8_t rnd[4096];
    for (int i = 0; i < 100; i++) {
        size_t n = 1 + randombytes_uniform(sizeof rnd);
        randombytes_buf(rnd, n);
        send_raw(rnd, n, i % 2 == 0, i % 5 == 0);
    }
    end = uv_now(loop) + 10000;
    while (!closed && done_streams < total_streams && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    printf("mesh-test-peer: sent %d hostile streams, %d finished, connection %s\n", total_streams,
           done_streams, closed ? "closed by the node" : "still open");
    return 0;
}
