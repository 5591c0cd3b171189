/* libFuzzer target: STUN/TURN messages and ChannelData (src/core/stun.h), and the TURN client
 * (src/core/turn_client.h) receiving them.
 *
 * Oracles besides the sanitizers: a decoded message lies inside the input and respects the caps;
 * every byte field points into it; what decodes re-encodes (header, addresses, LIFETIME,
 * ERROR-CODE, REALM, NONCE, DATA, CHANNEL-NUMBER) and decodes again to the same values; the
 * classifiers agree with the decoders; ChannelData round-trips; an allocated client fed the input
 * stays within its bounds and hands out data that lies inside the input. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stun.h"
#include "turn_client.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static const uint8_t *lo, *hi;

static void in_input(stun_bytes_t b)
{
    if (b.n) CHECK(b.p >= lo && b.p + b.n <= hi);
}

static bool bytes_same(stun_bytes_t a, stun_bytes_t b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static void fixed_rand(void *ud, uint8_t *buf, size_t n)
{
    (void)ud;
    memset(buf, 0x5a, n);
}

static turn_client_t base, work; /* an allocated client with a bound peer, and its copy */
static bool base_ready;
static uint8_t key[STUN_KEY_LEN];

static size_t reply(const uint8_t *req, size_t n, uint8_t *out, size_t cap, int code, bool sign)
{
    stun_msg_t m;
    CHECK(stun_decode(req, n, &m) == 0);
    stun_enc_t e;
    stun_enc_init(&e, out, cap, m.method, code ? STUN_ERROR : STUN_SUCCESS, m.tid);
    if (code) {
        stun_enc_error(&e, code, "Unauthorized");
        stun_enc_attr(&e, STUN_A_REALM, "r", 1);
        stun_enc_attr(&e, STUN_A_NONCE, "n", 1);
    }
    if (!code && m.method == STUN_ALLOCATE) {
        stun_addr_t relayed = {.family = 4, .port = 5000, .ip = {10, 0, 0, 1}};
        stun_enc_addr(&e, STUN_A_XOR_RELAYED_ADDRESS, &relayed, true);
        stun_enc_u32(&e, STUN_A_LIFETIME, 600);
    }
    if (sign) stun_enc_integrity(&e, key, STUN_KEY_LEN);
    stun_enc_fingerprint(&e);
    int r = stun_enc_finish(&e);
    CHECK(r > 0);
    return (size_t)r;
}

static void make_base(void)
{
    turn_config_t cfg = {.username = "u", .password = "p", .rand = fixed_rand};
    CHECK(turn_init(&base, &cfg) == 0);
    CHECK(stun_long_term_key("u", "r", 1, "p", key) == 0);
    uint8_t b[1500], r[1500];
    turn_data_t d;
    turn_start(&base, 0);
    int n = turn_poll_send(&base, b, sizeof b, 0);
    turn_recv(&base, r, reply(b, (size_t)n, r, sizeof r, 401, false), 0, &d);
    n = turn_poll_send(&base, b, sizeof b, 0);
    turn_recv(&base, r, reply(b, (size_t)n, r, sizeof r, 0, true), 0, &d);
    CHECK(turn_state(&base) == TURN_ALLOCATED);
    stun_addr_t peer = {.family = 4, .port = 7000, .ip = {192, 0, 2, 1}};
    CHECK(turn_add_peer(&base, &peer, 0) == 0);
    for (int i = 0; i < 2; i++) { /* the permission, then the channel */
        n = turn_poll_send(&base, b, sizeof b, 0);
        CHECK(n > 0);
        turn_recv(&base, r, reply(b, (size_t)n, r, sizeof r, 0, true), 0, &d);
    }
    int perm, chan;
    CHECK(turn_peer_state(&base, &peer, &perm, &chan) == 0 && chan == TURN_P_READY);
    turn_event_t ev;
    while (turn_next_event(&base, &ev)) {
    }
    base_ready = true;
}

static void check_message(const uint8_t *data, size_t size)
{
    stun_msg_t m, m2;
    int rc = stun_decode(data, size, &m);
    CHECK(rc == 0 || rc == -EINVAL || rc == -EBADMSG);
    if (!stun_is_stun(data, size)) CHECK(rc == -EINVAL);
    if (rc != 0) return;
    CHECK(m.len >= STUN_HEADER_LEN && m.len <= size && m.len % 4 == 0);
    CHECK(m.n_attrs <= STUN_MAX_ATTRS);
    CHECK(stun_type(m.method, m.cls) == (uint16_t)(data[0] << 8 | data[1]));
    stun_bytes_t fields[] = {m.error_reason, m.realm, m.nonce, m.data, m.username, m.software};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        in_input(fields[i]);
    CHECK(m.realm.n <= STUN_MAX_STRING && m.nonce.n <= STUN_MAX_STRING);
    if (m.have & STUN_HAVE_ERROR) CHECK(m.error_code >= 300 && m.error_code <= 699);
    if (m.have & STUN_HAVE_INTEGRITY) {
        CHECK(m.integrity_at >= STUN_HEADER_LEN && m.integrity_at + 24 <= m.len);
        int ir = stun_check_integrity(data, size, &m, key, STUN_KEY_LEN);
        CHECK(ir == 0 || ir == -EACCES);
    }
    const stun_addr_t *addrs[] = {&m.mapped, &m.xor_mapped, &m.xor_relayed, &m.xor_peer};
    static const unsigned bits[] = {STUN_HAVE_MAPPED, STUN_HAVE_XOR_MAPPED, STUN_HAVE_XOR_RELAYED,
                                    STUN_HAVE_XOR_PEER};
    for (size_t i = 0; i < 4; i++)
        if (m.have & bits[i]) CHECK(addrs[i]->family == 4 || addrs[i]->family == 6);

    /* re-encode what was understood, decode again */
    static uint8_t out[70000];
    stun_enc_t e;
    stun_enc_init(&e, out, sizeof out, m.method, m.cls, m.tid);
    static const uint16_t types[] = {STUN_A_MAPPED_ADDRESS, STUN_A_XOR_MAPPED_ADDRESS,
                                     STUN_A_XOR_RELAYED_ADDRESS, STUN_A_XOR_PEER_ADDRESS};
    for (size_t i = 0; i < 4; i++)
        if (m.have & bits[i]) stun_enc_addr(&e, types[i], addrs[i], i > 0);
    if (m.have & STUN_HAVE_LIFETIME) stun_enc_u32(&e, STUN_A_LIFETIME, m.lifetime);
    if (m.have & STUN_HAVE_CHANNEL)
        stun_enc_u32(&e, STUN_A_CHANNEL_NUMBER, (uint32_t)m.channel << 16);
    if (m.have & STUN_HAVE_ERROR) {
        uint8_t v[4 + STUN_MAX_STRING] = {0};
        v[2] = (uint8_t)(m.error_code / 100);
        v[3] = (uint8_t)(m.error_code % 100);
        memcpy(v + 4, m.error_reason.p, m.error_reason.n);
        stun_enc_attr(&e, STUN_A_ERROR_CODE, v, 4 + m.error_reason.n);
    }
    if (m.have & STUN_HAVE_REALM) stun_enc_attr(&e, STUN_A_REALM, m.realm.p, m.realm.n);
    if (m.have & STUN_HAVE_NONCE) stun_enc_attr(&e, STUN_A_NONCE, m.nonce.p, m.nonce.n);
    if (m.have & STUN_HAVE_DATA) stun_enc_attr(&e, STUN_A_DATA, m.data.p, m.data.n);
    stun_enc_integrity(&e, key, STUN_KEY_LEN);
    stun_enc_fingerprint(&e);
    int n = stun_enc_finish(&e);
    if (n == -ENOBUFS) return; /* more than a STUN message's 64 KiB */
    CHECK(n > 0);
    lo = out;
    hi = out + n;
    CHECK(stun_decode(out, (size_t)n, &m2) == 0);
    CHECK(stun_check_integrity(out, (size_t)n, &m2, key, STUN_KEY_LEN) == 0);
    CHECK(m2.method == m.method && m2.cls == m.cls && memcmp(m2.tid, m.tid, STUN_TID_LEN) == 0);
    unsigned kept = STUN_HAVE_MAPPED | STUN_HAVE_XOR_MAPPED | STUN_HAVE_XOR_RELAYED |
                    STUN_HAVE_XOR_PEER | STUN_HAVE_LIFETIME | STUN_HAVE_CHANNEL | STUN_HAVE_ERROR |
                    STUN_HAVE_REALM | STUN_HAVE_NONCE | STUN_HAVE_DATA;
    CHECK((m2.have & kept) == (m.have & kept));
    for (size_t i = 0; i < 4; i++)
        if (m.have & bits[i]) {
            const stun_addr_t *a2[] = {&m2.mapped, &m2.xor_mapped, &m2.xor_relayed, &m2.xor_peer};
            CHECK(stun_addr_equal(addrs[i], a2[i]));
        }
    CHECK(m2.lifetime == m.lifetime && m2.channel == m.channel && m2.error_code == m.error_code);
    CHECK(bytes_same(m2.error_reason, m.error_reason) && bytes_same(m2.realm, m.realm) &&
          bytes_same(m2.nonce, m.nonce) && bytes_same(m2.data, m.data));
}

static void check_channel_data(const uint8_t *data, size_t size)
{
    uint16_t ch;
    stun_bytes_t d;
    int rc = stun_channel_data_decode(data, size, &ch, &d);
    CHECK((rc == 0) == stun_is_channel_data(data, size));
    if (rc != 0) return;
    CHECK(ch >= STUN_CHANNEL_MIN && ch <= STUN_CHANNEL_MAX);
    in_input(d);
    CHECK(!stun_is_stun(data, size)); /* the first two bits differ */
    static uint8_t out[70000];
    int n = stun_channel_data_encode(out, sizeof out, ch, d.p, d.n);
    CHECK(n > 0 && (size_t)n >= size && n % 4 == 0);
    uint16_t ch2;
    stun_bytes_t d2;
    CHECK(stun_channel_data_decode(out, (size_t)n, &ch2, &d2) == 0 && ch2 == ch);
    CHECK(bytes_same(d, d2));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base_ready) make_base();
    lo = data;
    hi = data + size;
    check_message(data, size);
    lo = data;
    hi = data + size;
    check_channel_data(data, size);

    /* the allocated client receives it */
    memcpy(&work, &base, sizeof work);
    turn_data_t in;
    int rc = turn_recv(&work, data, size, 1000, &in);
    CHECK(rc == 1 || rc == 0 || rc == -EINVAL || rc == -ENOENT);
    if (rc == 1) CHECK(in.n == 0 || (in.data >= data && in.data + in.n <= data + size));
    CHECK(work.ev_count <= TURN_MAX_EVENTS);
    uint8_t b[1500];
    int sends = 0;
    while (turn_poll_send(&work, b, sizeof b, 1000) > 0)
        CHECK(++sends <= 2 * TURN_MAX_PEERS + 1);
    turn_event_t ev;
    while (turn_next_event(&work, &ev))
        if (ev.reason) CHECK(strlen(ev.reason) < TURN_REASON_LEN);
    return 0;
}
