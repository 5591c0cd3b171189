/* Unit tests for src/core/stun.h: the RFC 5769 test vectors, the message types, encode/decode
 * round trips of every TURN message, ChannelData, the classifiers and malformed input (rows). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "stun.h"

/* RFC 5769 2.1, Sample Request (short-term password below) */
static const uint8_t req[] = {
    0x00, 0x01, 0x00, 0x58, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86,
    0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x10, 0x53, 0x54, 0x55, 0x4e, 0x20, 0x74, 0x65, 0x73,
    0x74, 0x20, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x00, 0x24, 0x00, 0x04, 0x6e, 0x00, 0x01, 0xff,
    0x80, 0x29, 0x00, 0x08, 0x93, 0x2f, 0xf9, 0xb1, 0x51, 0x26, 0x3b, 0x36, 0x00, 0x06, 0x00, 0x09,
    0x65, 0x76, 0x74, 0x6a, 0x3a, 0x68, 0x36, 0x76, 0x59, 0x20, 0x20, 0x20, 0x00, 0x08, 0x00, 0x14,
    0x9a, 0xea, 0xa7, 0x0c, 0xbf, 0xd8, 0xcb, 0x56, 0x78, 0x1e, 0xf2, 0xb5, 0xb2, 0xd3, 0xf2, 0x49,
    0xc1, 0xb5, 0x71, 0xa2, 0x80, 0x28, 0x00, 0x04, 0xe5, 0x7a, 0x3b, 0xcf};

/* 2.2, Sample IPv4 Response: XOR-MAPPED-ADDRESS 192.0.2.1:32853 */
static const uint8_t respv4[] = {
    0x01, 0x01, 0x00, 0x3c, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86,
    0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x0b, 0x74, 0x65, 0x73, 0x74, 0x20, 0x76, 0x65, 0x63,
    0x74, 0x6f, 0x72, 0x20, 0x00, 0x20, 0x00, 0x08, 0x00, 0x01, 0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43,
    0x00, 0x08, 0x00, 0x14, 0x2b, 0x91, 0xf5, 0x99, 0xfd, 0x9e, 0x90, 0xc3, 0x8c, 0x74, 0x89, 0xf9,
    0x2a, 0xf9, 0xba, 0x53, 0xf0, 0x6b, 0xe7, 0xd7, 0x80, 0x28, 0x00, 0x04, 0xc0, 0x7d, 0x4c, 0x96};

/* 2.3, Sample IPv6 Response: [2001:db8:1234:5678:11:2233:4455:6677]:32853 */
static const uint8_t respv6[] = {
    0x01, 0x01, 0x00, 0x48, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86,
    0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x0b, 0x74, 0x65, 0x73, 0x74, 0x20, 0x76, 0x65, 0x63,
    0x74, 0x6f, 0x72, 0x20, 0x00, 0x20, 0x00, 0x14, 0x00, 0x02, 0xa1, 0x47, 0x01, 0x13, 0xa9, 0xfa,
    0xa5, 0xd3, 0xf1, 0x79, 0xbc, 0x25, 0xf4, 0xb5, 0xbe, 0xd2, 0xb9, 0xd9, 0x00, 0x08, 0x00, 0x14,
    0xa3, 0x82, 0x95, 0x4e, 0x4b, 0xe6, 0x7b, 0xf1, 0x17, 0x84, 0xc9, 0x7c, 0x82, 0x92, 0xc2, 0x75,
    0xbf, 0xe3, 0xed, 0x41, 0x80, 0x28, 0x00, 0x04, 0xc8, 0xfb, 0x0b, 0x4c};

/* 2.4, Sample Request with Long-Term Authentication (no FINGERPRINT) */
static const uint8_t reqltc[] = {
    0x00, 0x01, 0x00, 0x60, 0x21, 0x12, 0xa4, 0x42, 0x78, 0xad, 0x34, 0x33, 0xc6, 0xad, 0x72,
    0xc0, 0x29, 0xda, 0x41, 0x2e, 0x00, 0x06, 0x00, 0x12, 0xe3, 0x83, 0x9e, 0xe3, 0x83, 0x88,
    0xe3, 0x83, 0xaa, 0xe3, 0x83, 0x83, 0xe3, 0x82, 0xaf, 0xe3, 0x82, 0xb9, 0x00, 0x00, 0x00,
    0x15, 0x00, 0x1c, 0x66, 0x2f, 0x2f, 0x34, 0x39, 0x39, 0x6b, 0x39, 0x35, 0x34, 0x64, 0x36,
    0x4f, 0x4c, 0x33, 0x34, 0x6f, 0x4c, 0x39, 0x46, 0x53, 0x54, 0x76, 0x79, 0x36, 0x34, 0x73,
    0x41, 0x00, 0x14, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x6f, 0x72,
    0x67, 0x00, 0x00, 0x08, 0x00, 0x14, 0xf6, 0x70, 0x24, 0x65, 0x6d, 0xd6, 0x4a, 0x3e, 0x02,
    0xb8, 0xe0, 0x71, 0x2e, 0x85, 0xc9, 0xa2, 0x8c, 0xa8, 0x96, 0x66};

static const char short_term[] = "VOkJxbRl1RmTxUk/WvJxBt";
static const uint8_t tid0[STUN_TID_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static bool bytes_eq(stun_bytes_t b, const char *s)
{
    return b.n == strlen(s) && memcmp(b.p, s, b.n) == 0;
}

static stun_addr_t addr(const char *s)
{
    stun_addr_t a;
    assert_int_equal(stun_addr_parse(s, &a), 0);
    return a;
}

static void test_crc32(void **state)
{
    (void)state;
    assert_int_equal(stun_crc32((const uint8_t *)"123456789", 9), 0xCBF43926u);
    assert_int_equal(stun_crc32(NULL, 0), 0);
}

static void test_rfc5769_request(void **state)
{
    (void)state;
    stun_msg_t m;
    assert_true(stun_is_stun(req, sizeof req));
    assert_int_equal(stun_decode(req, sizeof req, &m), 0);
    assert_int_equal(m.method, STUN_BINDING);
    assert_int_equal(m.cls, STUN_REQUEST);
    assert_memory_equal(m.tid, req + 8, 12);
    assert_int_equal(m.len, sizeof req);
    assert_true(bytes_eq(m.username, "evtj:h6vY"));
    assert_true(bytes_eq(m.software, "STUN test client"));
    assert_true(m.have & STUN_HAVE_FINGERPRINT);
    assert_int_equal(m.n_unknown, 0); /* PRIORITY is known, ICE-CONTROLLED optional */
    assert_int_equal(m.n_attrs, 6);
    assert_int_equal(
        stun_check_integrity(req, sizeof req, &m, (const uint8_t *)short_term, strlen(short_term)),
        0);
    assert_int_equal(
        stun_check_integrity(req, sizeof req, &m, (const uint8_t *)"VOkJxbRl1RmTxUk", 15), -EACCES);
    /* one changed bit of the SOFTWARE text breaks the FINGERPRINT */
    uint8_t bad[sizeof req];
    memcpy(bad, req, sizeof req);
    bad[30] ^= 1;
    assert_int_equal(stun_decode(bad, sizeof bad, &m), -EBADMSG);
}

static void check_response(const uint8_t *p, size_t n, const char *want)
{
    stun_msg_t m;
    char s[64];
    assert_int_equal(stun_decode(p, n, &m), 0);
    assert_int_equal(m.method, STUN_BINDING);
    assert_int_equal(m.cls, STUN_SUCCESS);
    assert_true(m.have & STUN_HAVE_XOR_MAPPED);
    assert_string_equal(stun_addr_str(&m.xor_mapped, s, sizeof s), want);
    assert_true(bytes_eq(m.software, "test vector"));
    assert_int_equal(
        stun_check_integrity(p, n, &m, (const uint8_t *)short_term, strlen(short_term)), 0);
    /* the builder writes the RFC's bytes (the RFC pads SOFTWARE with a space) */
    uint8_t out[128];
    stun_enc_t e;
    stun_enc_init(&e, out, sizeof out, STUN_BINDING, STUN_SUCCESS, m.tid);
    stun_enc_attr(&e, STUN_A_SOFTWARE, "test vector", 11);
    out[STUN_HEADER_LEN + 4 + 11] = 0x20;
    stun_enc_addr(&e, STUN_A_XOR_MAPPED_ADDRESS, &m.xor_mapped, true);
    stun_enc_integrity(&e, (const uint8_t *)short_term, strlen(short_term));
    stun_enc_fingerprint(&e);
    assert_int_equal(stun_enc_finish(&e), (int)n);
    assert_memory_equal(out, p, n);
}

static void test_rfc5769_responses(void **state)
{
    (void)state;
    check_response(respv4, sizeof respv4, "192.0.2.1:32853");
    check_response(respv6, sizeof respv6, "[2001:db8:1234:5678:11:2233:4455:6677]:32853");
}

static void test_rfc5769_long_term(void **state)
{
    (void)state;
    /* USERNAME is U+30DE U+30C8 U+30EA U+30C3 U+30AF U+30B9 in UTF-8; the password
     * "The<U+00AD>M<U+00AA>tr<U+2168>" after SASLprep is "TheMatrIX" */
    static const char user[] = "\xe3\x83\x9e\xe3\x83\x88\xe3\x83\xaa\xe3\x83\x83\xe3\x82\xaf"
                               "\xe3\x82\xb9";
    stun_msg_t m;
    assert_int_equal(stun_decode(reqltc, sizeof reqltc, &m), 0);
    assert_true(bytes_eq(m.username, user));
    assert_true(bytes_eq(m.realm, "example.org"));
    assert_true(bytes_eq(m.nonce, "f//499k954d6OL34oL9FSTvy64sA"));
    assert_false(m.have & STUN_HAVE_FINGERPRINT);
    uint8_t key[STUN_KEY_LEN];
    assert_int_equal(stun_long_term_key(user, "example.org", 11, "TheMatrIX", key), 0);
    assert_int_equal(stun_check_integrity(reqltc, sizeof reqltc, &m, key, sizeof key), 0);
    assert_int_equal(stun_long_term_key(user, "example.org", 11, "TheMatrix", key), 0);
    assert_int_equal(stun_check_integrity(reqltc, sizeof reqltc, &m, key, sizeof key), -EACCES);
    /* re-encoded with our builder: the same bytes (padding zero, as in the RFC) */
    stun_cred_t cr = {.username = user,
                      .realm = (const uint8_t *)"example.org",
                      .realm_len = 11,
                      .nonce = m.nonce.p,
                      .nonce_len = m.nonce.n};
    assert_int_equal(stun_long_term_key(user, "example.org", 11, "TheMatrIX", cr.key), 0);
    uint8_t out[160];
    stun_enc_t e;
    stun_enc_init(&e, out, sizeof out, STUN_BINDING, STUN_REQUEST, m.tid);
    stun_enc_attr(&e, STUN_A_USERNAME, cr.username, strlen(cr.username));
    stun_enc_attr(&e, STUN_A_NONCE, cr.nonce, cr.nonce_len);
    stun_enc_attr(&e, STUN_A_REALM, cr.realm, cr.realm_len);
    stun_enc_integrity(&e, cr.key, STUN_KEY_LEN);
    assert_int_equal(stun_enc_finish(&e), (int)sizeof reqltc);
    assert_memory_equal(out, reqltc, sizeof reqltc);
}

static void test_types(void **state)
{
    (void)state;
    static const struct {
        uint16_t method, cls, type;
    } rows[] = {
        {STUN_BINDING, STUN_REQUEST, 0x0001},
        {STUN_BINDING, STUN_SUCCESS, 0x0101},
        {STUN_BINDING, STUN_ERROR, 0x0111},
        {STUN_ALLOCATE, STUN_REQUEST, 0x0003},
        {STUN_ALLOCATE, STUN_SUCCESS, 0x0103},
        {STUN_ALLOCATE, STUN_ERROR, 0x0113},
        {STUN_REFRESH, STUN_REQUEST, 0x0004},
        {STUN_REFRESH, STUN_SUCCESS, 0x0104},
        {STUN_SEND, STUN_INDICATION, 0x0016},
        {STUN_DATA, STUN_INDICATION, 0x0017},
        {STUN_CREATE_PERMISSION, STUN_REQUEST, 0x0008},
        {STUN_CREATE_PERMISSION, STUN_SUCCESS, 0x0108},
        {STUN_CHANNEL_BIND, STUN_REQUEST, 0x0009},
        {STUN_CHANNEL_BIND, STUN_ERROR, 0x0119},
        {0xFFF, STUN_ERROR, 0x3FFF},
        {0x080, STUN_REQUEST, 0x0200},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (stun_type(rows[i].method, rows[i].cls) != rows[i].type)
            fail_msg("row %zu: type %#x", i, stun_type(rows[i].method, rows[i].cls));
        assert_int_equal(stun_type_method(rows[i].type), rows[i].method);
        assert_int_equal(stun_type_class(rows[i].type), rows[i].cls);
    }
}

static void test_turn_round_trips(void **state)
{
    (void)state;
    uint8_t buf[512];
    stun_msg_t m;
    stun_cred_t cr = {.username = "user",
                      .realm = (const uint8_t *)"mesh",
                      .realm_len = 4,
                      .nonce = (const uint8_t *)"abcdef0123",
                      .nonce_len = 10};
    assert_int_equal(stun_long_term_key("user", "mesh", 4, "pass", cr.key), 0);
    stun_addr_t p4 = addr("10.1.2.3:40000"), p6 = addr("[2001:db8::7]:5000");

    /* Allocate: REQUESTED-TRANSPORT UDP, LIFETIME, credentials, integrity, fingerprint */
    int n = stun_encode_allocate(buf, sizeof buf, tid0, &cr, 300);
    assert_true(n > 0 && n % 4 == 0);
    assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
    assert_int_equal(m.method, STUN_ALLOCATE);
    assert_int_equal(m.cls, STUN_REQUEST);
    assert_int_equal(m.transport, 17);
    assert_int_equal(m.lifetime, 300);
    assert_true(bytes_eq(m.username, "user") && bytes_eq(m.realm, "mesh") &&
                bytes_eq(m.nonce, "abcdef0123"));
    assert_true(m.have & STUN_HAVE_FINGERPRINT);
    assert_int_equal(stun_check_integrity(buf, (size_t)n, &m, cr.key, STUN_KEY_LEN), 0);
    /* without credentials: no integrity, no LIFETIME for 0 */
    n = stun_encode_allocate(buf, sizeof buf, tid0, NULL, 0);
    assert_int_equal(n, 20 + 8 + 8);
    assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
    assert_false(m.have & (STUN_HAVE_LIFETIME | STUN_HAVE_INTEGRITY | STUN_HAVE_USERNAME));
    assert_int_equal(stun_check_integrity(buf, (size_t)n, &m, cr.key, STUN_KEY_LEN), -ENOENT);

    /* Refresh 0 (delete) keeps LIFETIME 0 */
    n = stun_encode_refresh(buf, sizeof buf, tid0, &cr, 0);
    assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
    assert_int_equal(m.method, STUN_REFRESH);
    assert_true(m.have & STUN_HAVE_LIFETIME);
    assert_int_equal(m.lifetime, 0);

    /* CreatePermission, ChannelBind for both families */
    const stun_addr_t *peers[] = {&p4, &p6};
    for (size_t i = 0; i < 2; i++) {
        n = stun_encode_create_permission(buf, sizeof buf, tid0, &cr, peers[i]);
        assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
        assert_int_equal(m.method, STUN_CREATE_PERMISSION);
        assert_true(stun_addr_equal(&m.xor_peer, peers[i]));
        assert_int_equal(stun_check_integrity(buf, (size_t)n, &m, cr.key, STUN_KEY_LEN), 0);
        n = stun_encode_channel_bind(buf, sizeof buf, tid0, &cr, 0x4abc, peers[i]);
        assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
        assert_int_equal(m.method, STUN_CHANNEL_BIND);
        assert_int_equal(m.channel, 0x4abc);
        assert_true(stun_addr_equal(&m.xor_peer, peers[i]));
        n = stun_encode_send(buf, sizeof buf, tid0, peers[i], (const uint8_t *)"hello", 5);
        assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
        assert_int_equal(m.method, STUN_SEND);
        assert_int_equal(m.cls, STUN_INDICATION);
        assert_true(stun_addr_equal(&m.xor_peer, peers[i]));
        assert_true(bytes_eq(m.data, "hello"));
    }
    assert_int_equal(stun_encode_channel_bind(buf, sizeof buf, tid0, &cr, 0x3fff, &p4), -EINVAL);
    assert_int_equal(stun_encode_channel_bind(buf, sizeof buf, tid0, &cr, 0x8000, &p4), -EINVAL);

    /* a server's error response: ERROR-CODE, REALM, NONCE */
    stun_enc_t e;
    stun_enc_init(&e, buf, sizeof buf, STUN_ALLOCATE, STUN_ERROR, tid0);
    stun_enc_error(&e, 438, "Stale Nonce");
    stun_enc_attr(&e, STUN_A_REALM, "mesh", 4);
    stun_enc_attr(&e, STUN_A_NONCE, "n2", 2);
    stun_enc_fingerprint(&e);
    n = stun_enc_finish(&e);
    assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
    assert_int_equal(m.cls, STUN_ERROR);
    assert_int_equal(m.error_code, 438);
    assert_true(bytes_eq(m.error_reason, "Stale Nonce") && bytes_eq(m.nonce, "n2"));
}

static void test_no_overflow(void **state)
{
    (void)state;
    /* every cap below a message's size fails cleanly and writes nothing past the cap */
    stun_cred_t cr = {.username = "user", .realm = (const uint8_t *)"r", .realm_len = 1};
    stun_addr_t p6 = addr("[2001:db8::7]:5000");
    uint8_t big[512], buf[512];
    int full = stun_encode_channel_bind(big, sizeof big, tid0, &cr, 0x4001, &p6);
    assert_true(full > 0);
    for (int cap = 0; cap < full; cap++) {
        memset(buf, 0xAA, sizeof buf);
        assert_int_equal(stun_encode_channel_bind(buf, (size_t)cap, tid0, &cr, 0x4001, &p6),
                         -ENOBUFS);
        for (size_t i = (size_t)cap; i < sizeof buf; i++)
            if (buf[i] != 0xAA) fail_msg("cap %d: byte %zu written", cap, i);
    }
    assert_int_equal(stun_encode_channel_bind(buf, (size_t)full, tid0, &cr, 0x4001, &p6), full);
    uint8_t d[9] = "datagram";
    full = stun_channel_data_encode(big, sizeof big, 0x4001, d, 9);
    assert_int_equal(full, 4 + 12);
    for (int cap = 0; cap < full; cap++)
        assert_int_equal(stun_channel_data_encode(buf, (size_t)cap, 0x4001, d, 9), -ENOBUFS);
}

static void test_channel_data(void **state)
{
    (void)state;
    uint8_t buf[64];
    uint16_t ch;
    stun_bytes_t d;
    int n = stun_channel_data_encode(buf, sizeof buf, 0x4001, (const uint8_t *)"hello", 5);
    assert_int_equal(n, 12); /* padded over UDP too */
    assert_true(stun_is_channel_data(buf, (size_t)n));
    assert_false(stun_is_stun(buf, (size_t)n));
    assert_int_equal(stun_channel_data_decode(buf, (size_t)n, &ch, &d), 0);
    assert_int_equal(ch, 0x4001);
    assert_true(bytes_eq(d, "hello"));
    /* unpadded is fine too */
    assert_int_equal(stun_channel_data_decode(buf, 9, &ch, &d), 0);
    assert_true(bytes_eq(d, "hello"));
    static const struct {
        uint8_t b[12];
        size_t n;
    } bad[] = {
        {{0x40, 0x01, 0x00}, 3},                        /* shorter than the header */
        {{0x40, 0x01, 0x00, 0x05, 'h', 'e'}, 6},        /* length past the datagram */
        {{0x3f, 0xff, 0x00, 0x01, 'x', 0, 0, 0}, 8},    /* below 0x4000 */
        {{0x80, 0x00, 0x00, 0x01, 'x', 0, 0, 0}, 8},    /* above 0x7fff */
        {{0xc0, 0x00, 0x00, 0x01, 0x08, 0, 0, 0}, 8},   /* a QUIC long header */
        {{0x40, 0x01, 0x00, 0x01, 'x', 0, 0, 0, 0}, 9}, /* more than the padding after it */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (stun_channel_data_decode(bad[i].b, bad[i].n, &ch, &d) != -EINVAL)
            fail_msg("bad row %zu decoded", i);
    assert_int_equal(stun_channel_data_encode(buf, sizeof buf, 0x3fff, NULL, 0), -EINVAL);
    assert_int_equal(stun_channel_data_encode(buf, sizeof buf, 0x4000, NULL, 0), 4);
}

/* a message of header + the given attribute bytes (length field from n unless len_override) */
static size_t mk(uint8_t *out, const uint8_t *attrs, size_t n)
{
    static const uint8_t hdr[] = {0x01, 0x01, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1,  2,
                                  3,    4,    5, 6, 7,    8,    9,    10,   11, 12};
    memcpy(out, hdr, 20);
    out[2] = (uint8_t)(n >> 8);
    out[3] = (uint8_t)n;
    memcpy(out + 20, attrs, n);
    return 20 + n;
}

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        uint8_t a[40];
        size_t n;
        int want;
    } rows[] = {
        {"LIFETIME of 0 bytes", {0x00, 0x0d, 0x00, 0x00}, 4, -EINVAL},
        {"attribute past the message", {0x00, 0x0d, 0x00, 0x08, 0, 0, 0, 1}, 8, -EINVAL},
        {"LIFETIME of 2 bytes", {0x00, 0x0d, 0x00, 0x02, 0, 1, 0, 0}, 8, -EINVAL},
        {"address family 3", {0x00, 0x20, 0x00, 0x08, 0, 3, 0, 1, 1, 2, 3, 4}, 12, -EINVAL},
        {"IPv4 address of 16 bytes", {0x00, 0x20, 0x00, 0x14, 0, 1, 0, 1}, 24, -EINVAL},
        {"MAPPED-ADDRESS of 3 bytes", {0x00, 0x01, 0x00, 0x03, 0, 1, 0, 0}, 8, -EINVAL},
        {"ERROR-CODE class 7", {0x00, 0x09, 0x00, 0x04, 0, 0, 7, 1}, 8, -EINVAL},
        {"ERROR-CODE number 100", {0x00, 0x09, 0x00, 0x04, 0, 0, 4, 100}, 8, -EINVAL},
        {"ERROR-CODE of 3 bytes", {0x00, 0x09, 0x00, 0x03, 0, 0, 4, 0}, 8, -EINVAL},
        {"MESSAGE-INTEGRITY of 4 bytes", {0x00, 0x08, 0x00, 0x04, 1, 2, 3, 4}, 8, -EINVAL},
        {"FINGERPRINT wrong", {0x80, 0x28, 0x00, 0x04, 1, 2, 3, 4}, 8, -EBADMSG},
        {"FINGERPRINT of 8 bytes", {0x80, 0x28, 0x00, 0x08}, 12, -EINVAL},
        {"CHANNEL-NUMBER of 2 bytes", {0x00, 0x0c, 0x00, 0x02, 0x40, 0, 0, 0}, 8, -EINVAL},
        {"a well-formed LIFETIME", {0x00, 0x0d, 0x00, 0x04, 0, 0, 1, 0}, 8, 0},
        {"an unknown optional attribute", {0x80, 0x99, 0x00, 0x01, 9, 0, 0, 0}, 8, 0},
    };
    uint8_t buf[128];
    stun_msg_t m;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t n = mk(buf, rows[i].a, rows[i].n);
        int rc = stun_decode(buf, n, &m);
        if (rc != rows[i].want) fail_msg("%s: %d, want %d", rows[i].what, rc, rows[i].want);
    }
    /* the header: too short, wrong cookie, top bits, length not a multiple of 4, past the end */
    size_t n = mk(buf, (const uint8_t *)"", 0);
    assert_int_equal(stun_decode(buf, n, &m), 0);
    assert_int_equal(stun_decode(buf, 19, &m), -EINVAL);
    buf[4] ^= 1;
    assert_int_equal(stun_decode(buf, n, &m), -EINVAL);
    buf[4] ^= 1;
    buf[0] |= 0x40;
    assert_int_equal(stun_decode(buf, n, &m), -EINVAL);
    buf[0] &= 0x3f;
    buf[3] = 2;
    assert_int_equal(stun_decode(buf, 24, &m), -EINVAL);
    buf[3] = 4;
    assert_int_equal(stun_decode(buf, 20, &m), -EINVAL);
    assert_int_equal(stun_decode(NULL, 0, &m), -EINVAL);
    /* too many attributes */
    uint8_t many[20 + 4 * (STUN_MAX_ATTRS + 1)];
    uint8_t body[4 * (STUN_MAX_ATTRS + 1)];
    for (size_t i = 0; i < STUN_MAX_ATTRS + 1; i++) {
        body[4 * i] = 0x80;
        body[4 * i + 1] = 0x99;
        body[4 * i + 2] = body[4 * i + 3] = 0;
    }
    n = mk(many, body, 4 * STUN_MAX_ATTRS);
    assert_int_equal(stun_decode(many, n, &m), 0);
    n = mk(many, body, sizeof body);
    assert_int_equal(stun_decode(many, n, &m), -EINVAL);
    /* an unknown comprehension-required attribute is reported */
    static const uint8_t unk[] = {0x00, 0x7f, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x04, 0, 0, 0, 9};
    n = mk(buf, unk, sizeof unk);
    assert_int_equal(stun_decode(buf, n, &m), 0);
    assert_int_equal(m.n_unknown, 1);
    assert_int_equal(m.unknown[0], 0x007f);
    assert_int_equal(m.lifetime, 9);
}

static void test_after_integrity(void **state)
{
    (void)state;
    /* after MESSAGE-INTEGRITY only FINGERPRINT counts; something after FINGERPRINT is refused */
    uint8_t buf[128];
    stun_enc_t e;
    stun_enc_init(&e, buf, sizeof buf, STUN_REFRESH, STUN_SUCCESS, tid0);
    stun_enc_u32(&e, STUN_A_LIFETIME, 600);
    stun_enc_integrity(&e, (const uint8_t *)"k", 1);
    stun_enc_u32(&e, STUN_A_LIFETIME, 5); /* ignored */
    stun_enc_fingerprint(&e);
    int n = stun_enc_finish(&e);
    stun_msg_t m;
    assert_int_equal(stun_decode(buf, (size_t)n, &m), 0);
    assert_int_equal(m.lifetime, 600);
    stun_enc_u32(&e, STUN_A_LIFETIME, 5);
    n = stun_enc_finish(&e);
    assert_int_equal(stun_decode(buf, (size_t)n, &m), -EBADMSG);
}

static void test_addr(void **state)
{
    (void)state;
    char s[64];
    static const char *good[] = {"127.0.0.1:3478", "[::1]:1", "[2001:db8::1]:65535", "0.0.0.0:9"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        stun_addr_t a = addr(good[i]);
        assert_string_equal(stun_addr_str(&a, s, sizeof s), good[i]);
    }
    static const char *bad[] = {
        "127.0.0.1", "127.0.0.1:", "127.0.0.1:0",    "127.0.0.1:65536", "::1:5", "[::1]5",
        "[::1]:x",   "host:1",     "1.2.3.4:123456", "[1.2.3.4]:5",     ""};
    stun_addr_t a;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (stun_addr_parse(bad[i], &a) == 0) fail_msg("\"%s\" parsed", bad[i]);
    stun_addr_t x = addr("1.2.3.4:5"), y = addr("1.2.3.4:6");
    assert_false(stun_addr_equal(&x, &y));
}

static void test_sockaddr(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    stun_addr_t a = addr("192.0.2.1:3478"), b, v6 = addr("[2001:db8::2]:5");
    char s[64];
    assert_int_equal(stun_addr_to_sockaddr(&a, AF_INET, &ss), 0);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_int_equal(stun_addr_from_sockaddr((struct sockaddr *)&ss, &b), 0);
    assert_true(stun_addr_equal(&a, &b));
    /* a dual-stack socket: IPv4 as ::ffff:a.b.c.d both ways */
    assert_int_equal(stun_addr_to_sockaddr(&a, AF_INET6, &ss), 0);
    assert_int_equal(ss.ss_family, AF_INET6);
    const uint8_t *ip = (const uint8_t *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    assert_int_equal(ip[10], 0xff);
    assert_int_equal(ip[12], 192);
    assert_int_equal(stun_addr_from_sockaddr((struct sockaddr *)&ss, &b), 0);
    assert_int_equal(b.family, 4);
    assert_string_equal(stun_addr_str(&b, s, sizeof s), "192.0.2.1:3478");
    assert_int_equal(stun_addr_to_sockaddr(&v6, AF_INET6, &ss), 0);
    assert_int_equal(stun_addr_from_sockaddr((struct sockaddr *)&ss, &b), 0);
    assert_true(stun_addr_equal(&v6, &b));
    assert_int_equal(stun_addr_to_sockaddr(&v6, AF_INET, &ss), -EAFNOSUPPORT);
    ss.ss_family = AF_UNIX;
    assert_int_equal(stun_addr_from_sockaddr((struct sockaddr *)&ss, &b), -EAFNOSUPPORT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32),
        cmocka_unit_test(test_rfc5769_request),
        cmocka_unit_test(test_rfc5769_responses),
        cmocka_unit_test(test_rfc5769_long_term),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_turn_round_trips),
        cmocka_unit_test(test_no_overflow),
        cmocka_unit_test(test_channel_data),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_after_integrity),
        cmocka_unit_test(test_addr),
        cmocka_unit_test(test_sockaddr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
