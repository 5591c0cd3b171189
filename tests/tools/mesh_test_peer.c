/* mesh-test-peer TOKEN [MODE VICTIM_ID [SECONDS]] — an admitted but hostile peer for integration
 * tests: it joins the mesh of TOKEN with a fresh key (it holds the mesh secret, so it is a
 * member) and, without MODE, sends malformed streams (bad type bytes, oversized and broken
 * frames, invalid gossip, unsupported tunnels, random bytes, resets). With a MODE it forges
 * gossip about the live node VICTIM_ID for SECONDS (default 4), see hostile_gossip(). Exit 0
 * when everything was sent over an admitted connection, 2 when it could not connect.
 *
 * mesh-test-peer TOKEN rpc MODEL — opens a TUNNEL_RPC stream for MODEL to the token's node, as if
 * it were that model's split host, and sends bytes. Prints what became of the stream; exit 0 when
 * the node refused it (reset before any byte came back), 3 when it answered.
 *
 * mesh-test-peer TOKEN tunnel MODEL REQUEST_FILE — one TUNNEL_HTTP stream for MODEL carrying the
 * bytes of REQUEST_FILE as they are (e.g. pipelined requests); what the node answers is written
 * to stdout. Exit 0 when the node closed the stream, 2 when it could not connect, 3 when no
 * answer ended within 30 s. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "gossip.h"
#include "gossip_msg.h"
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

static size_t rpc_rx;
static int rpc_closed, rpc_err = -1;
static void rpc_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    rpc_rx += n;
    tp_stream_consumed(s, n);
}
static void rpc_close(tp_stream_t *s, int err)
{
    rpc_closed = 1;
    rpc_err = err;
}
static const tp_stream_cb_t rpc_cb = {rpc_data, NULL, NULL, rpc_close};

/* TUNNEL_RPC for `model`, then a few bytes as llama.cpp's RPC client would send. */
static int rpc_probe(uv_loop_t *loop, const char *model)
{
    char json[256];
    int n = snprintf(json, sizeof json, "{\"v\":1,\"model\":\"%s\"}", model);
    uint8_t msg[5 + sizeof json + 9];
    msg[0] = WIRE_TUNNEL_RPC;
    msg[1] = msg[2] = 0;
    msg[3] = (uint8_t)(n >> 8);
    msg[4] = (uint8_t)n;
    memcpy(msg + 5, json, (size_t)n);
    memset(msg + 5 + n, 0, 9); /* a command byte and a zero payload size */
    tp_stream_t *s;
    if (tp_stream_open(conn, &rpc_cb, NULL, &s) != 0) return 2;
    tp_stream_write(s, msg, 5 + (size_t)n + 9);
    uint64_t end = uv_now(loop) + 5000;
    while (!rpc_closed && !closed && rpc_rx == 0 && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    bool refused = rpc_closed && rpc_err != 0 && rpc_rx == 0;
    printf("mesh-test-peer: rpc stream for %s: %s (%d), %zu bytes back\n", model,
           refused      ? "refused"
           : rpc_closed ? "closed"
                        : "open",
           rpc_err, rpc_rx);
    return refused ? 0 : 3;
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

static void send_malformed(void)
{
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
}

/* ---- hostile gossip: a member forging statements about another node (the victim) ----
 * The peer never says hello, so the node never watches it (it is never declared dead and its
 * messages are always looked at); each round it sends an hb with an empty digest, which the
 * node answers with every announcement it has: that is how it follows the victim's current
 * incarnation and announcement (the victim refutes claims, which bumps its incarnation). */

static identity_t me;
static const char *victim;
static uint64_t v_inc;  /* the victim's incarnation as last seen */
static json_t *v_ann;   /* its announcement as last seen (signed by it) */
static unsigned rounds; /* rounds sent */

static void sign_me(void *data, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(me.sk, msg, len, sig);
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void send_json(int type, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT);
    if (s) send_frame(type, s);
    free(s);
    json_decref(m);
}

/* a message of ours: {"v":1,"type":…,"inc":1} */
static json_t *msg(const char *type)
{
    return json_pack("{s:i, s:s, s:i}", "v", 1, "type", type, "inc", 1);
}

/* The victim's announcements in what the node sends us. */
static void learn(json_t *f)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(f, "anns"), i, a)
    {
        json_int_t inc = json_integer_value(json_object_get(a, "incarnation"));
        const char *id = json_string_value(json_object_get(a, "id"));
        if (!id || strcmp(id, victim) || (uint64_t)inc < v_inc) continue;
        v_inc = (uint64_t)inc;
        json_decref(v_ann);
        v_ann = json_deep_copy(a);
    }
}

typedef struct {
    wire_reader_t rd;
} in_t;

static void in_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    in_t *x = tp_stream_data(s);
    tp_stream_consumed(s, n);
    while (n > 0) {
        json_t *f = NULL;
        ssize_t used = wire_read(&x->rd, p, n, &f);
        if (used < 0) return;
        p += used;
        n -= (size_t)used;
        if (f) learn(f);
        json_decref(f);
    }
}
static void in_fin(tp_stream_t *s)
{
    tp_stream_shutdown(s);
}
static void in_close(tp_stream_t *s, int err)
{
    in_t *x = tp_stream_data(s);
    wire_reader_free(&x->rd);
    free(x);
}
static const tp_stream_cb_t in_cb = {in_data, in_fin, NULL, in_close};

static void on_stream(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s)
{
    in_t *x = calloc(1, sizeof *x);
    if (!x) return;
    wire_reader_init(&x->rd, 1);
    tp_stream_set_cb(s, &in_cb, x);
}

/* [victim, inc, state] (+ sig) */
static json_t *rec(uint64_t inc, const char *state, const char *sig)
{
    return sig ? json_pack("[s, I, s, s]", victim, (json_int_t)inc, state, sig)
               : json_pack("[s, I, s]", victim, (json_int_t)inc, state);
}

/* Our own signature of the victim's leave: well-formed, but not the victim's. */
static void forged_leave_sig(uint64_t inc, char hex[GMSG_SIG_HEX + 1])
{
    size_t len = 0;
    char *b = gmsg_leave_bytes(victim, inc, &len);
    if (b) gmsg_sign_hex(sign_me, NULL, b, len, hex);
    free(b);
}

/* PEER_DOWN for the live victim at its incarnation (and the next few, in case it refuted since
 * we last looked). */
static void forge_down(void)
{
    json_t *m = msg("peer_down"), *dead = json_array();
    for (uint64_t j = 0; j < 4; j++)
        json_array_append_new(dead, rec(v_inc + j, "dead", NULL));
    json_object_set_new(m, "dead", dead);
    send_json(WIRE_PEER_DOWN, m);
}

/* A dead record with a huge incarnation (one just short of the "future" bound too), in every
 * list that carries records: peer_down, hb and sync. */
static void forge_dead_huge(void)
{
    uint64_t huge[] = {v_inc + 1000000000ULL, wall_ms() + GOSSIP_MAX_AHEAD_MS - 60000};
    const char *types[] = {"peer_down", "hb", "sync"};
    for (size_t t = 0; t < 3; t++) {
        json_t *m = msg(types[t]), *dead = json_array();
        for (size_t k = 0; k < 2; k++)
            json_array_append_new(dead, rec(huge[k], "dead", NULL));
        json_object_set_new(m, "dead", dead);
        if (t == 1) json_object_set_new(m, "digest", json_array());
        if (t == 2) json_object_set_new(m, "anns", json_array());
        send_json(t == 0 ? WIRE_PEER_DOWN : WIRE_GOSSIP, m);
    }
}

/* The victim's leave, said by us: a "left" record without a signature (in a peer_down, also at
 * the next few incarnations, and in an hb), one with our signature of the victim's leave (also at a
 * huge incarnation), and a PEER_LEAVING naming the victim, signed by us over the victim's leave.
 * One message each. */
static void forge_leave(void)
{
    char sig[GMSG_SIG_HEX + 1], sig2[GMSG_SIG_HEX + 1];
    json_t *recs[3];
    forged_leave_sig(v_inc, sig);
    forged_leave_sig(v_inc + 1000000000ULL, sig2);
    recs[0] = rec(v_inc, "left", NULL);
    recs[1] = rec(v_inc, "left", sig);
    recs[2] = rec(v_inc + 1000000000ULL, "left", sig2);
    for (size_t i = 0; i < 3; i++) {
        json_t *m = msg("peer_down");
        json_object_set_new(m, "dead", json_pack("[O]", recs[i]));
        send_json(WIRE_PEER_DOWN, m);
    }
    for (uint64_t j = 1; j < 4; j++) { /* in case it refuted since we last looked */
        json_t *m = msg("peer_down");
        json_object_set_new(m, "dead", json_pack("[o]", rec(v_inc + j, "left", NULL)));
        send_json(WIRE_PEER_DOWN, m);
    }
    json_t *hb = msg("hb");
    json_object_set_new(hb, "digest", json_array());
    json_object_set_new(hb, "dead", json_pack("[O]", recs[0]));
    send_json(WIRE_GOSSIP, hb);
    for (size_t i = 0; i < 3; i++)
        json_decref(recs[i]);
    json_t *m = json_pack("{s:i, s:s, s:I, s:s, s:s}", "v", 1, "type", "leaving", "inc",
                          (json_int_t)v_inc, "id", victim, "sig", sig);
    send_json(WIRE_PEER_LEAVING, m);
}

/* Announcements with bad signatures: the victim's own, altered (newer seq, serving nothing,
 * another address; its signature kept); one for the victim's next incarnation signed by us; and
 * a hello whose (our own) announcement carries a signature of something else. */
static void bad_sig(void)
{
    json_t *m, *anns = json_array(), *a, *hello;
    if (v_ann) {
        a = json_deep_copy(v_ann);
        json_object_set_new(a, "seq",
                            json_integer(json_integer_value(json_object_get(a, "seq")) + 1));
        json_object_set_new(a, "serving", json_array());
        json_object_set_new(a, "addrs", json_pack("[s]", "127.0.0.1:9"));
        json_array_append_new(anns, a);
    }
    a = json_pack("{s:s, s:I, s:I, s:s, s:[]}", "id", victim, "incarnation", (json_int_t)v_inc + 1,
                  "seq", (json_int_t)0, "role", "worker", "serving");
    gmsg_ann_sign(a, sign_me, NULL);
    json_array_append_new(anns, a);
    m = msg("update");
    json_object_set_new(m, "anns", anns);
    send_json(WIRE_GOSSIP, m);
    a = json_pack("{s:s, s:i, s:i, s:s}", "id", me.id, "incarnation", 1, "seq", 0, "role", "host");
    gmsg_ann_sign(a, sign_me, NULL);
    json_object_set_new(a, "role", json_string("client")); /* after signing */
    hello = msg("hello");
    json_object_set_new(hello, "ann", a);
    json_object_set_new(hello, "join", json_true());
    send_json(WIRE_GOSSIP, hello);
}

static void ask_announcements(void)
{
    json_t *m = msg("hb");
    json_object_set_new(m, "digest", json_array());
    send_json(WIRE_GOSSIP, m);
}

/* Every 100 ms for `seconds`: learn the victim's state, then forge. */
static int hostile_gossip(uv_loop_t *loop, const char *mode, double seconds)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } modes[] = {{"forge-down", forge_down},
                 {"forge-dead-huge", forge_dead_huge},
                 {"forge-leave", forge_leave},
                 {"bad-sig", bad_sig}};
    void (*fn)(void) = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(mode, modes[i].name)) fn = modes[i].fn;
    if (!fn) {
        fprintf(stderr, "mesh-test-peer: unknown mode %s\n", mode);
        return 1;
    }
    uint64_t end = uv_now(loop) + (uint64_t)(seconds * 1000), next = 0;
    ask_announcements();
    while (!closed && uv_now(loop) < end) {
        if (uv_now(loop) >= next && v_ann) {
            fn();
            rounds++;
            ask_announcements();
            next = uv_now(loop) + 100;
        } else if (uv_now(loop) >= next) {
            ask_announcements(); /* not yet: the node has not answered */
            next = uv_now(loop) + 100;
        }
        uv_run(loop, UV_RUN_ONCE);
    }
    printf("mesh-test-peer: %s: %u rounds against %.12s (its incarnation %llu)\n", mode, rounds,
           victim, (unsigned long long)v_inc);
    json_decref(v_ann);
    return closed ? 2 : rounds ? 0 : 3;
}

int main(int argc, char **argv)
{
    bool rpc = argc == 4 && !strcmp(argv[2], "rpc");
    bool tunnel = argc == 5 && !strcmp(argv[2], "tunnel");
    if ((argc != 2 && argc != 4 && argc != 5) || sodium_init() < 0) {
        fprintf(stderr, "usage: mesh-test-peer TOKEN [MODE VICTIM_ID [SECONDS]]\n"
                        "       mesh-test-peer TOKEN rpc MODEL\n"
                        "       mesh-test-peer TOKEN tunnel MODEL REQUEST_FILE\n"
                        "  MODE: forge-down | forge-dead-huge | forge-leave | bad-sig\n");
        return 1;
    }
    token_t tok;
    char err[256];
    if (token_decode(argv[1], strlen(argv[1]), &tok, err, sizeof err) != 0) {
        fprintf(stderr, "mesh-test-peer: %s\n", err);
        return 1;
    }
    if (argc >= 4 && !rpc && !tunnel && !gmsg_valid_id(argv[3])) {
        fprintf(stderr, "mesh-test-peer: the victim id must be 64 lowercase hex characters\n");
        return 1;
    }
    identity_t *id = &me;
    crypto_sign_keypair(id->pk, id->sk);
    hex_encode(id->pk, 32, id->id);
    id->incarnation = 1;
    uv_loop_t *loop = uv_default_loop();
    tp_endpoint_t *ep;
    tp_callbacks_t cbs = {NULL, on_ready, on_closed, on_stream};
    if (tp_endpoint_new(&ep, loop, id, tok.secret, "0.0.0.0", 0, NULL, &cbs) != 0) return 1;
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
    if (rpc) return rpc_probe(loop, argv[3]);
    if (tunnel) return tunnel_mode(loop, argv[3], argv[4]);
    if (argc >= 4) {
        victim = argv[3];
        return hostile_gossip(loop, argv[2], argc == 5 ? atof(argv[4]) : 4.0);
    }
    send_malformed();
    end = uv_now(loop) + 10000;
    while (!closed && done_streams < total_streams && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    printf("mesh-test-peer: sent %d hostile streams, %d finished, connection %s\n", total_streams,
           done_streams, closed ? "closed by the node" : "still open");
    return 0;
}
