/* Unit tests for src/core/turn_client.h: the TURN client driven by hand-made server responses on a
 * virtual clock (the 401 challenge, 438 stale nonce, integrity of responses, retransmission times,
 * refresh schedules, permissions and channels, wrapping and unwrapping, close, bounds) and the
 * STUN Binding client. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stun.h"
#include "turn_client.h"

#define USER "alice"
#define PASS "wonderland"
#define REALM "mesh.test"

static void counter_rand(void *ud, uint8_t *buf, size_t n)
{
    unsigned *k = ud;
    (*k)++;
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(*k * 31 + i);
}

typedef struct {
    uint8_t b[1500];
    size_t n;
    stun_msg_t m;
} sent_t;

static turn_client_t cl; /* large: not on the test's stack */
static unsigned rand_k;
static uint8_t key[STUN_KEY_LEN];

static stun_addr_t A(const char *s)
{
    stun_addr_t a;
    assert_int_equal(stun_addr_parse(s, &a), 0);
    return a;
}

static void setup_client(turn_client_t *c, bool no_channels)
{
    turn_config_t cfg = {.username = USER,
                         .password = PASS,
                         .no_channels = no_channels,
                         .rand = counter_rand,
                         .rand_ud = &rand_k};
    assert_int_equal(turn_init(c, &cfg), 0);
    assert_int_equal(stun_long_term_key(USER, REALM, strlen(REALM), PASS, key), 0);
}

/* everything the client wants to send now, decoded; returns how many */
static size_t drain(turn_client_t *c, uint64_t now, sent_t *out, size_t max)
{
    size_t k = 0;
    int n;
    static sent_t spare;
    while ((n = turn_poll_send(c, k < max ? out[k].b : spare.b, sizeof spare.b, now)) > 0) {
        sent_t *s = k < max ? &out[k] : &spare;
        s->n = (size_t)n;
        assert_int_equal(stun_decode(s->b, s->n, &s->m), 0);
        assert_true(s->m.have & STUN_HAVE_FINGERPRINT);
        k++;
    }
    assert_true(n == 0);
    return k;
}

static sent_t one(turn_client_t *c, uint64_t now)
{
    sent_t s[4];
    size_t n = drain(c, now, s, 4);
    if (n != 1) fail_msg("%zu datagrams, want 1", n);
    return s[0];
}

static void none(turn_client_t *c, uint64_t now)
{
    sent_t s[1];
    size_t n = drain(c, now, s, 1);
    if (n) fail_msg("%zu datagrams, want none", n);
}

/* a server answer to the request in s */
static size_t answer(const sent_t *req, uint16_t cls, int code, const char *nonce, bool sign,
                     uint32_t lifetime, uint8_t *out, size_t cap)
{
    stun_enc_t e;
    stun_enc_init(&e, out, cap, req->m.method, cls, req->m.tid);
    if (code) stun_enc_error(&e, code, code == 401 ? "Unauthorized" : "Stale Nonce");
    if (nonce) {
        stun_enc_attr(&e, STUN_A_REALM, REALM, strlen(REALM));
        stun_enc_attr(&e, STUN_A_NONCE, nonce, strlen(nonce));
    }
    if (cls == STUN_SUCCESS && req->m.method == STUN_ALLOCATE) {
        stun_addr_t relayed = A("198.51.100.7:50000"), mapped = A("203.0.113.5:40000");
        stun_enc_addr(&e, STUN_A_XOR_RELAYED_ADDRESS, &relayed, true);
        stun_enc_addr(&e, STUN_A_XOR_MAPPED_ADDRESS, &mapped, true);
    }
    if (lifetime) stun_enc_u32(&e, STUN_A_LIFETIME, lifetime);
    if (sign) stun_enc_integrity(&e, key, STUN_KEY_LEN);
    stun_enc_fingerprint(&e);
    int n = stun_enc_finish(&e);
    assert_true(n > 0);
    return (size_t)n;
}

static void deliver(turn_client_t *c, const sent_t *req, uint16_t cls, int code, const char *nonce,
                    bool sign, uint32_t lifetime, uint64_t now)
{
    uint8_t b[512];
    size_t n = answer(req, cls, code, nonce, sign, lifetime, b, sizeof b);
    turn_data_t d;
    assert_int_equal(turn_recv(c, b, n, now, &d), 0);
}

static turn_event_t event(turn_client_t *c, turn_event_type_t want)
{
    turn_event_t ev;
    if (!turn_next_event(c, &ev)) fail_msg("no event, want %d", want);
    if (ev.type != want)
        fail_msg("event %d, want %d (%s)", ev.type, want, ev.reason ? ev.reason : "");
    return ev;
}

static void no_event(turn_client_t *c)
{
    turn_event_t ev;
    if (turn_next_event(c, &ev)) fail_msg("unexpected event %d", ev.type);
}

static bool has_cred(const sent_t *s, const char *nonce)
{
    return s->m.username.n == strlen(USER) && memcmp(s->m.username.p, USER, strlen(USER)) == 0 &&
           s->m.realm.n == strlen(REALM) && s->m.nonce.n == strlen(nonce) &&
           memcmp(s->m.nonce.p, nonce, strlen(nonce)) == 0 &&
           stun_check_integrity(s->b, s->n, &s->m, key, STUN_KEY_LEN) == 0;
}

/* allocated at time 0 with nonce "n1", lifetime 600 */
static void allocate(turn_client_t *c, bool no_channels)
{
    setup_client(c, no_channels);
    assert_int_equal(turn_start(c, 0), 0);
    sent_t s = one(c, 0);
    deliver(c, &s, STUN_ERROR, 401, "n1", false, 0, 0);
    s = one(c, 0);
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 600, 0);
    event(c, TURN_EV_ALLOCATED);
}

static void test_allocate_challenge(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    setup_client(c, false);
    assert_int_equal(turn_start(c, 1000), 0);
    assert_int_equal(turn_start(c, 1000), -EALREADY);
    assert_int_equal(turn_state(c), TURN_ALLOCATING);
    sent_t s = one(c, 1000);
    assert_int_equal(s.m.method, STUN_ALLOCATE);
    assert_int_equal(s.m.cls, STUN_REQUEST);
    assert_int_equal(s.m.transport, 17);
    assert_false(s.m.have & (STUN_HAVE_USERNAME | STUN_HAVE_INTEGRITY));
    uint8_t first_tid[STUN_TID_LEN];
    memcpy(first_tid, s.m.tid, sizeof first_tid);
    deliver(c, &s, STUN_ERROR, 401, "n1", false, 0, 1010);
    no_event(c);
    s = one(c, 1010);
    assert_int_equal(s.m.method, STUN_ALLOCATE);
    assert_memory_not_equal(s.m.tid, first_tid, STUN_TID_LEN);
    assert_true(has_cred(&s, "n1"));
    /* a success without integrity, or signed with another key, is not the server's */
    deliver(c, &s, STUN_SUCCESS, 0, NULL, false, 600, 1020);
    assert_int_equal(turn_state(c), TURN_ALLOCATING);
    uint8_t saved[STUN_KEY_LEN];
    memcpy(saved, key, sizeof key);
    key[0] ^= 1;
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 600, 1020);
    memcpy(key, saved, sizeof key);
    assert_int_equal(turn_state(c), TURN_ALLOCATING);
    no_event(c);
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 600, 1030);
    turn_event_t ev = event(c, TURN_EV_ALLOCATED);
    char b1[64], b2[64];
    assert_string_equal(stun_addr_str(&ev.relayed, b1, sizeof b1), "198.51.100.7:50000");
    assert_string_equal(stun_addr_str(&ev.mapped, b2, sizeof b2), "203.0.113.5:40000");
    assert_int_equal(ev.lifetime, 600);
    assert_int_equal(turn_state(c), TURN_ALLOCATED);
    /* the refresh is due a minute before the lifetime ends */
    assert_int_equal(turn_next_timeout(c), 1030 + 540000);
    /* a retransmitted (duplicate) success changes nothing */
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 600, 1040);
    no_event(c);
    none(c, 1040);
}

static void test_wrong_password(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    setup_client(c, false);
    turn_start(c, 0);
    sent_t s = one(c, 0);
    deliver(c, &s, STUN_ERROR, 401, "n1", false, 0, 0);
    s = one(c, 0);
    deliver(c, &s, STUN_ERROR, 401, "n2", false, 0, 5);
    turn_event_t ev = event(c, TURN_EV_FAILED);
    assert_non_null(strstr(ev.reason, "allocate: 401"));
    assert_non_null(strstr(ev.reason, "password"));
    assert_int_equal(turn_state(c), TURN_FAILED);
    assert_string_equal(turn_reason(c), ev.reason);
    none(c, 10);
    assert_true(turn_next_timeout(c) == UINT64_MAX);
    stun_addr_t p = A("192.0.2.9:1000");
    assert_int_equal(turn_add_peer(c, &p, 10), -EPIPE);
}

static void test_allocate_errors(void **state)
{
    (void)state;
    static const struct {
        int code;
        const char *want;
    } rows[] = {
        {486, "allocate: 486"},
        {437, "allocate: 437"},
        {508, "allocate: 508"},
        {438, "allocate: 438"}, /* a 438 without a NONCE cannot be answered */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        turn_client_t *c = &cl;
        setup_client(c, false);
        turn_start(c, 0);
        sent_t s = one(c, 0);
        deliver(c, &s, STUN_ERROR, 401, "n1", false, 0, 0);
        s = one(c, 0);
        deliver(c, &s, STUN_ERROR, rows[i].code, NULL, false, 0, 0);
        turn_event_t ev = event(c, TURN_EV_FAILED);
        if (!strstr(ev.reason, rows[i].want)) fail_msg("row %zu: %s", i, ev.reason);
    }
}

static void test_unknown_required_attribute(void **state)
{
    (void)state;
    /* a success carrying an attribute the client must understand and does not: failed */
    turn_client_t *c = &cl;
    setup_client(c, false);
    turn_start(c, 0);
    sent_t s = one(c, 0);
    deliver(c, &s, STUN_ERROR, 401, "n1", false, 0, 0);
    s = one(c, 0);
    uint8_t b[256];
    stun_enc_t e;
    stun_enc_init(&e, b, sizeof b, STUN_ALLOCATE, STUN_SUCCESS, s.m.tid);
    stun_addr_t relayed = A("198.51.100.7:50000");
    stun_enc_addr(&e, STUN_A_XOR_RELAYED_ADDRESS, &relayed, true);
    stun_enc_attr(&e, 0x7ffe, "?", 1);
    stun_enc_integrity(&e, key, STUN_KEY_LEN);
    turn_data_t in;
    assert_int_equal(turn_recv(c, b, (size_t)stun_enc_finish(&e), 0, &in), 0);
    turn_event_t ev = event(c, TURN_EV_FAILED);
    assert_non_null(strstr(ev.reason, "allocate: the response has an unknown"));
    assert_non_null(strstr(ev.reason, "0x7ffe"));
}

static void test_retransmission(void **state)
{
    (void)state;
    /* RFC 8489 6.2.1: sends at 0, 500, 1500, 3500, 7500, 15500, 31500; gives up at 39500 */
    static const uint64_t at[] = {0, 500, 1500, 3500, 7500, 15500, 31500};
    turn_client_t *c = &cl;
    setup_client(c, false);
    turn_start(c, 0);
    uint8_t tid[STUN_TID_LEN];
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        if (i) {
            assert_int_equal(turn_next_timeout(c), at[i]);
            turn_tick(c, at[i] - 1);
            none(c, at[i] - 1);
            turn_tick(c, at[i]);
        }
        sent_t s = one(c, at[i]);
        if (i == 0) memcpy(tid, s.m.tid, sizeof tid);
        assert_memory_equal(s.m.tid, tid, sizeof tid); /* the same transaction */
    }
    assert_int_equal(turn_next_timeout(c), 39500);
    turn_tick(c, 39499);
    no_event(c);
    turn_tick(c, 39500);
    turn_event_t ev = event(c, TURN_EV_FAILED);
    assert_non_null(strstr(ev.reason, "no response"));
    none(c, 39500);
}

static void test_refresh(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    allocate(c, false);
    uint64_t t = 540000;
    assert_int_equal(turn_next_timeout(c), t);
    turn_tick(c, t - 1);
    none(c, t - 1);
    turn_tick(c, t);
    sent_t s = one(c, t);
    assert_int_equal(s.m.method, STUN_REFRESH);
    assert_int_equal(s.m.lifetime, 600);
    assert_true(has_cred(&s, "n1"));
    /* stale nonce: sent again with the new one, a new transaction */
    deliver(c, &s, STUN_ERROR, 438, "n2", false, 0, t + 10);
    sent_t r = one(c, t + 10);
    assert_int_equal(r.m.method, STUN_REFRESH);
    assert_memory_not_equal(r.m.tid, s.m.tid, STUN_TID_LEN);
    assert_true(has_cred(&r, "n2"));
    assert_int_equal(c->stale_retries, 1);
    /* a short lifetime is refreshed halfway */
    deliver(c, &r, STUN_SUCCESS, 0, NULL, true, 100, t + 20);
    turn_event_t ev = event(c, TURN_EV_REFRESHED);
    assert_int_equal(ev.lifetime, 100);
    assert_int_equal(turn_next_timeout(c), t + 20 + 50000);
    /* a refresh the server no longer knows (437) ends it */
    turn_tick(c, t + 20 + 50000);
    s = one(c, t + 20 + 50000);
    deliver(c, &s, STUN_ERROR, 437, NULL, false, 0, t + 20 + 50001);
    ev = event(c, TURN_EV_FAILED);
    assert_non_null(strstr(ev.reason, "refresh: 437"));
}

static void test_permission_channel(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    allocate(c, false);
    stun_addr_t peer = A("192.0.2.50:7000"), other = A("192.0.2.51:7000");
    uint8_t out[256];
    const uint8_t msg[] = "quic-packet";
    assert_int_equal(turn_wrap(c, &peer, msg, 11, out, sizeof out), -ENOENT);
    assert_int_equal(turn_add_peer(c, &peer, 100), 0);
    assert_int_equal(turn_add_peer(c, &peer, 100), 0); /* the same peer again */
    assert_int_equal(turn_wrap(c, &peer, msg, 11, out, sizeof out), -EAGAIN);
    sent_t s = one(c, 100);
    assert_int_equal(s.m.method, STUN_CREATE_PERMISSION);
    assert_true(stun_addr_equal(&s.m.xor_peer, &peer));
    assert_true(has_cred(&s, "n1"));
    /* a 438 on the permission: again with the new nonce */
    deliver(c, &s, STUN_ERROR, 438, "n2", false, 0, 110);
    s = one(c, 110);
    assert_true(has_cred(&s, "n2"));
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, 120);
    turn_event_t ev = event(c, TURN_EV_PERMISSION);
    assert_true(stun_addr_equal(&ev.peer, &peer));
    /* data goes as a Send indication until the channel is bound */
    int n = turn_wrap(c, &peer, msg, 11, out, sizeof out);
    stun_msg_t m;
    assert_true(n > 0);
    assert_int_equal(stun_decode(out, (size_t)n, &m), 0);
    assert_int_equal(m.method, STUN_SEND);
    assert_int_equal(m.cls, STUN_INDICATION);
    assert_true(stun_addr_equal(&m.xor_peer, &peer));
    assert_true(m.data.n == 11 && memcmp(m.data.p, msg, 11) == 0);
    assert_int_equal(turn_wrap(c, &peer, msg, 11, out, 30), -ENOBUFS);
    /* then the channel */
    s = one(c, 120);
    assert_int_equal(s.m.method, STUN_CHANNEL_BIND);
    assert_int_equal(s.m.channel, 0x4000);
    assert_true(has_cred(&s, "n2"));
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, 130);
    ev = event(c, TURN_EV_CHANNEL);
    assert_int_equal(ev.channel, 0x4000);
    int perm, chan;
    assert_int_equal(turn_peer_state(c, &peer, &perm, &chan), 0);
    assert_int_equal(perm, TURN_P_READY);
    assert_int_equal(chan, TURN_P_READY);
    n = turn_wrap(c, &peer, msg, 11, out, sizeof out);
    assert_int_equal(n, 16);
    uint16_t ch;
    stun_bytes_t d;
    assert_int_equal(stun_channel_data_decode(out, (size_t)n, &ch, &d), 0);
    assert_int_equal(ch, 0x4000);
    assert_true(d.n == 11 && memcmp(d.p, msg, 11) == 0);

    /* refreshes: the permission 240 s after it was last installed (the channel binding at 130
     * installed it too), the channel at 540 s */
    for (uint64_t t = 130 + 240000; t < 540000; t += 240000) {
        assert_int_equal(turn_next_timeout(c), t);
        turn_tick(c, t);
        s = one(c, t);
        assert_int_equal(s.m.method, STUN_CREATE_PERMISSION);
        deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, t);
        no_event(c); /* a refresh is no news */
    }
    /* the allocation's refresh at 540 s comes first, then the channel's at 540.13 s */
    assert_int_equal(turn_next_timeout(c), 540000);
    turn_tick(c, 540000);
    s = one(c, 540000);
    assert_int_equal(s.m.method, STUN_REFRESH);
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 600, 540000);
    event(c, TURN_EV_REFRESHED);
    assert_int_equal(turn_next_timeout(c), 130 + 540000);
    turn_tick(c, 130 + 540000);
    s = one(c, 130 + 540000);
    assert_int_equal(s.m.method, STUN_CHANNEL_BIND);
    assert_int_equal(s.m.channel, 0x4000);
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, 130 + 540000);
    no_event(c);

    /* a refused peer: an event, and no data for it */
    assert_int_equal(turn_add_peer(c, &other, 700000), 1);
    s = one(c, 700000);
    uint8_t b[256];
    stun_enc_t e;
    stun_enc_init(&e, b, sizeof b, STUN_CREATE_PERMISSION, STUN_ERROR, s.m.tid);
    stun_enc_error(&e, 403, "Forbidden IP");
    stun_enc_fingerprint(&e);
    turn_data_t in;
    assert_int_equal(turn_recv(c, b, (size_t)stun_enc_finish(&e), 700001, &in), 0);
    ev = event(c, TURN_EV_PEER_FAILED);
    assert_non_null(strstr(ev.reason, "permission: 403 Forbidden IP"));
    assert_int_equal(turn_wrap(c, &other, msg, 11, out, sizeof out), -EAGAIN);
    assert_int_equal(turn_state(c), TURN_ALLOCATED);
}

static void test_unwrap(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    stun_addr_t peer = A("192.0.2.50:7000");
    uint8_t b[256];
    turn_data_t in;
    setup_client(c, false);
    /* before the allocation: nothing is for us yet */
    int n = stun_channel_data_encode(b, sizeof b, 0x4000, (const uint8_t *)"early", 5);
    assert_int_equal(turn_recv(c, b, (size_t)n, 0, &in), -ENOENT);
    allocate(c, false);
    assert_int_equal(turn_add_peer(c, &peer, 0), 0);
    sent_t s = one(c, 0);
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, 0);
    event(c, TURN_EV_PERMISSION);
    /* a Data indication from the peer */
    stun_enc_t e;
    uint8_t tid[STUN_TID_LEN] = {9};
    stun_enc_init(&e, b, sizeof b, STUN_DATA, STUN_INDICATION, tid);
    stun_enc_addr(&e, STUN_A_XOR_PEER_ADDRESS, &peer, true);
    stun_enc_attr(&e, STUN_A_DATA, "from-peer", 9);
    n = stun_enc_finish(&e);
    assert_int_equal(turn_recv(c, b, (size_t)n, 1, &in), 1);
    assert_false(in.channel);
    assert_true(stun_addr_equal(&in.peer, &peer));
    assert_true(in.n == 9 && memcmp(in.data, "from-peer", 9) == 0);
    /* a Data indication without DATA is malformed */
    stun_enc_init(&e, b, sizeof b, STUN_DATA, STUN_INDICATION, tid);
    stun_enc_addr(&e, STUN_A_XOR_PEER_ADDRESS, &peer, true);
    n = stun_enc_finish(&e);
    assert_int_equal(turn_recv(c, b, (size_t)n, 1, &in), -EINVAL);
    /* ChannelData on the peer's channel (its binding is on the way: accepted) */
    s = one(c, 1);
    assert_int_equal(s.m.method, STUN_CHANNEL_BIND);
    n = stun_channel_data_encode(b, sizeof b, 0x4000, (const uint8_t *)"chan", 4);
    assert_int_equal(turn_recv(c, b, (size_t)n, 2, &in), 1);
    assert_true(in.channel && in.n == 4 && stun_addr_equal(&in.peer, &peer));
    /* another channel, garbage, a request, a stray response */
    n = stun_channel_data_encode(b, sizeof b, 0x4001, (const uint8_t *)"chan", 4);
    assert_int_equal(turn_recv(c, b, (size_t)n, 2, &in), -ENOENT);
    static const uint8_t quic[] = {0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0};
    assert_int_equal(turn_recv(c, quic, sizeof quic, 2, &in), -EINVAL);
    n = stun_encode_binding(b, sizeof b, tid);
    assert_int_equal(turn_recv(c, b, (size_t)n, 2, &in), 0);
    sent_t stray = s;
    stray.m.tid[0] ^= 0xff;
    deliver(c, &stray, STUN_SUCCESS, 0, NULL, true, 0, 3);
    no_event(c);
    none(c, 3);
}

static void test_no_channels(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    allocate(c, true);
    stun_addr_t peer = A("192.0.2.50:7000");
    turn_add_peer(c, &peer, 0);
    sent_t s = one(c, 0);
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, 0);
    event(c, TURN_EV_PERMISSION);
    none(c, 0); /* no ChannelBind */
    uint8_t out[128];
    int n = turn_wrap(c, &peer, (const uint8_t *)"x", 1, out, sizeof out);
    assert_true(n > 0 && stun_is_stun(out, (size_t)n));
}

static void test_peers_before_allocation_and_bounds(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    setup_client(c, true);
    char s[32];
    for (int i = 0; i < TURN_MAX_PEERS; i++) {
        snprintf(s, sizeof s, "10.0.%d.%d:%d", i / 200, i % 200 + 1, 1000 + i);
        stun_addr_t p = A(s);
        assert_int_equal(turn_add_peer(c, &p, 0), i);
    }
    stun_addr_t extra = A("10.9.9.9:9"), first = A("10.0.0.1:1000"), v6 = A("[2001:db8::1]:5");
    assert_int_equal(turn_add_peer(c, &extra, 0), -ENOSPC);
    assert_int_equal(turn_remove_peer(c, &first), 0);
    assert_int_equal(turn_remove_peer(c, &first), -ENOENT);
    assert_int_equal(turn_add_peer(c, &extra, 0), 0);
    stun_addr_t bad = {0};
    assert_int_equal(turn_add_peer(c, &bad, 0), -EINVAL);
    /* nothing goes out for the peers before the allocation; then one permission each */
    turn_start(c, 0);
    sent_t one_s = one(c, 0);
    deliver(c, &one_s, STUN_ERROR, 401, "n1", false, 0, 0);
    one_s = one(c, 0);
    deliver(c, &one_s, STUN_SUCCESS, 0, NULL, true, 600, 0);
    event(c, TURN_EV_ALLOCATED);
    static sent_t all[TURN_MAX_PEERS + 1];
    assert_int_equal(drain(c, 0, all, TURN_MAX_PEERS + 1), TURN_MAX_PEERS);
    for (size_t i = 0; i < TURN_MAX_PEERS; i++)
        assert_int_equal(all[i].m.method, STUN_CREATE_PERMISSION);
    /* a peer of the other family than the relayed address */
    assert_int_equal(turn_remove_peer(c, &extra), 0);
    assert_int_equal(turn_add_peer(c, &v6, 0), -EINVAL);
}

static void test_close(void **state)
{
    (void)state;
    turn_client_t *c = &cl;
    allocate(c, false);
    turn_close(c, 100);
    assert_int_equal(turn_state(c), TURN_CLOSING);
    sent_t s = one(c, 100);
    assert_int_equal(s.m.method, STUN_REFRESH);
    assert_true(s.m.have & STUN_HAVE_LIFETIME);
    assert_int_equal(s.m.lifetime, 0);
    assert_true(has_cred(&s, "n1"));
    /* a stale nonce is answered while closing too */
    deliver(c, &s, STUN_ERROR, 438, "n2", false, 0, 110);
    s = one(c, 110);
    assert_int_equal(s.m.lifetime, 0);
    assert_true(has_cred(&s, "n2"));
    deliver(c, &s, STUN_SUCCESS, 0, NULL, true, 0, 120);
    event(c, TURN_EV_CLOSED);
    assert_int_equal(turn_state(c), TURN_CLOSED);
    none(c, 120);

    /* no answer: closed after the retransmissions anyway */
    allocate(c, false);
    turn_close(c, 0);
    for (int i = 0; i < 8; i++) {
        uint64_t t = turn_next_timeout(c);
        turn_tick(c, t);
        drain(c, t, NULL, 0);
    }
    event(c, TURN_EV_CLOSED);

    /* closed before allocating: at once */
    setup_client(c, false);
    turn_start(c, 0);
    turn_close(c, 0);
    event(c, TURN_EV_CLOSED);
}

static void test_bad_config(void **state)
{
    (void)state;
    char longname[TURN_MAX_CRED + 2];
    memset(longname, 'u', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    turn_config_t cfg = {.username = longname, .password = "p"};
    assert_int_equal(turn_init(&cl, &cfg), -EINVAL);
    cfg.username = NULL;
    assert_int_equal(turn_init(&cl, &cfg), -EINVAL);
    assert_int_equal(turn_init(&cl, NULL), -EINVAL);
}

static void test_stun_bind(void **state)
{
    (void)state;
    turn_config_t cfg = {.rand = counter_rand, .rand_ud = &rand_k, .rto_ms = 100, .max_tx = 3};
    stun_bind_t b;
    stun_bind_init(&b, &cfg);
    stun_bind_start(&b, 0);
    uint8_t buf[256];
    int n = stun_bind_poll_send(&b, buf, sizeof buf, 0);
    stun_msg_t m;
    assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
    assert_int_equal(m.method, STUN_BINDING);
    assert_int_equal(stun_bind_poll_send(&b, buf, sizeof buf, 0), 0);
    assert_int_equal(stun_bind_next_timeout(&b), 100);
    stun_bind_tick(&b, 100);
    assert_true(stun_bind_poll_send(&b, buf, sizeof buf, 100) > 0);
    /* the answer */
    stun_addr_t mapped = A("[2001:db8::5]:3478");
    uint8_t r[128];
    stun_enc_t e;
    stun_enc_init(&e, r, sizeof r, STUN_BINDING, STUN_SUCCESS, m.tid);
    stun_enc_addr(&e, STUN_A_XOR_MAPPED_ADDRESS, &mapped, true);
    stun_enc_fingerprint(&e);
    int rn = stun_enc_finish(&e);
    r[8] ^= 1;                                                    /* another transaction first */
    assert_int_equal(stun_bind_recv(&b, r, (size_t)rn), -EINVAL); /* its fingerprint broke */
    r[8] ^= 1;
    assert_int_equal(stun_bind_recv(&b, r, (size_t)rn), 1);
    assert_int_equal(b.state, STUN_BIND_DONE);
    assert_true(stun_addr_equal(&b.mapped, &mapped));

    /* an error answer, and no answer */
    stun_bind_start(&b, 0);
    n = stun_bind_poll_send(&b, buf, sizeof buf, 0);
    stun_decode(buf, (size_t)n, &m);
    stun_enc_init(&e, r, sizeof r, STUN_BINDING, STUN_ERROR, m.tid);
    stun_enc_error(&e, 400, "Bad Request");
    rn = stun_enc_finish(&e);
    assert_int_equal(stun_bind_recv(&b, r, (size_t)rn), 1);
    assert_int_equal(b.state, STUN_BIND_FAILED);
    assert_string_equal(b.reason, "binding: 400 Bad Request");
    stun_bind_start(&b, 0);
    /* sends at 0, 100, 300; gives up at 300 + 16 * 100 */
    static const uint64_t at[] = {0, 100, 300};
    for (size_t i = 0; i < 3; i++) {
        stun_bind_tick(&b, at[i]);
        assert_true(stun_bind_poll_send(&b, buf, sizeof buf, at[i]) > 0);
    }
    assert_int_equal(stun_bind_next_timeout(&b), 1900);
    stun_bind_tick(&b, 1900);
    assert_int_equal(b.state, STUN_BIND_FAILED);
    assert_non_null(strstr(b.reason, "no response"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocate_challenge),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_allocate_errors),
        cmocka_unit_test(test_unknown_required_attribute),
        cmocka_unit_test(test_retransmission),
        cmocka_unit_test(test_refresh),
        cmocka_unit_test(test_permission_channel),
        cmocka_unit_test(test_unwrap),
        cmocka_unit_test(test_no_channels),
        cmocka_unit_test(test_peers_before_allocation_and_bounds),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_stun_bind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
