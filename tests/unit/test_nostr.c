/* Unit tests for the Nostr modules: nostr_event (NIP-01 ids, BIP-340 signatures), nostr_msg
 * (relay messages), listing (kind 31990 mesh listings) and auto_score (--auto's choice). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <secp256k1.h>
#include <secp256k1_extrakeys.h>
#include <secp256k1_schnorrsig.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto_score.h"
#include "config.h"
#include "identity.h"
#include "listing.h"
#include "nostr_event.h"
#include "nostr_msg.h"
#include "publisher.h"
#include "ws_client.h"

static void unhex(const char *h, uint8_t *out, size_t n)
{
    assert_int_equal(hex_decode(h, 2 * n, out, n), 0);
}

/* BIP-340 test vectors 0 and 1 (bip-0340/test-vectors.csv): key → x-only public key, and the
 * vectors' signatures verify with the library the module uses. */
static void test_bip340_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *sk, *pk, *msg, *sig;
    } v[] = {
        {"0000000000000000000000000000000000000000000000000000000000000003",
         "f9308a019258c31049344f85f89d5229b531c845836f99b08601f113bce036f9",
         "0000000000000000000000000000000000000000000000000000000000000000",
         "e907831f80848d1069a5371b402410364bdf1c5f8307b0084c55f1ce2dca821525f66a4a85ea8b71e482a74f3"
         "82"
         "d2ce5ebeee8fdb2172f477df4900d310536c0"},
        {"b7e151628aed2a6abf7158809cf4f3c762e7160f38b4da56a784d9045190cfef",
         "dff1d77f2a671c5f36183726db2341be58feae1da2deced843240f7b502ba659",
         "243f6a8885a308d313198a2e03707344a4093822299f31d0082efa98ec4e6c89",
         "6896bd60eeae296db48a229ff71dfe071bde413e6d43f917dc8dcf8c78de33418906d11ac976abccb20b09129"
         "2bff4ea897efcb639ea871cfa95f6de339e4b0a"},
    };
    for (size_t i = 0; i < 2; i++) {
        uint8_t sk[32], pk[32], msg[32], sig[64];
        char pkhex[NOSTR_HEX32];
        unhex(v[i].sk, sk, 32);
        assert_int_equal(nostr_pubkey(sk, pkhex), 0);
        assert_string_equal(pkhex, v[i].pk);
        unhex(v[i].pk, pk, 32);
        unhex(v[i].msg, msg, 32);
        unhex(v[i].sig, sig, 64);
        secp256k1_xonly_pubkey x;
        assert_true(secp256k1_xonly_pubkey_parse(secp256k1_context_static, &x, pk));
        assert_int_equal(secp256k1_schnorrsig_verify(secp256k1_context_static, sig, msg, 32, &x),
                         1);
        sig[5] ^= 1;
        assert_int_equal(secp256k1_schnorrsig_verify(secp256k1_context_static, sig, msg, 32, &x),
                         0);
    }
    uint8_t zero[32] = {0};
    char pkhex[NOSTR_HEX32];
    assert_int_equal(nostr_pubkey(zero, pkhex), -EINVAL); /* not a valid secret key */
}

/* An event made and signed by nostr-tools 2.x (finalizeEvent with BIP-340 vector 1's key):
 * content with a non-ASCII letter, quotes, newline, tab, a control character and a slash. */
static const char *KAT =
    "{\"kind\":31990,\"created_at\":1700000000,\"tags\":[[\"d\",\"abc\"],[\"t\",\"mesh-llm\"]],"
    "\"content\":\"h\xc3\xa9llo \\\"q\\\"\\n\\t\\u0001 /\","
    "\"pubkey\":\"dff1d77f2a671c5f36183726db2341be58feae1da2deced843240f7b502ba659\","
    "\"id\":\"fdaee01ad60f84902e078d351c31c567f72bc2b54052fd2affd2643b1150cac7\","
    "\"sig\":\"b0040294fa6f43890edc9861eca59345d1e1755cb310df1219fbb4c7a01a1c52cdeb4ca0b1f6292fb9"
    "12e69e26636b204b0f6a7262b86ec4205a17eb18f044b2\"}";

static void test_known_event(void **state)
{
    (void)state;
    json_t *j = json_loads(KAT, 0, NULL);
    assert_non_null(j);
    nostr_event_t ev;
    char err[128];
    assert_int_equal(nostr_event_from_json(j, &ev, err, sizeof err), 0);
    char id[NOSTR_HEX32];
    assert_int_equal(nostr_event_compute_id(&ev, id), 0);
    assert_string_equal(id, "fdaee01ad60f84902e078d351c31c567f72bc2b54052fd2affd2643b1150cac7");
    assert_true(nostr_event_verify(&ev));
    assert_string_equal(nostr_event_tag(&ev, "d"), "abc");
    /* any change breaks it: content, a tag, the time, the signature */
    ev.created_at++;
    assert_false(nostr_event_verify(&ev));
    ev.created_at--;
    ev.tags[0].v[1][0] = 'x';
    assert_false(nostr_event_verify(&ev));
    ev.tags[0].v[1][0] = 'a';
    assert_true(nostr_event_verify(&ev));
    ev.sig[10] = ev.sig[10] == '0' ? '1' : '0';
    assert_false(nostr_event_verify(&ev));
    nostr_event_free(&ev);
    json_decref(j);
}

static void test_sign_roundtrip(void **state)
{
    (void)state;
    uint8_t sk[32];
    randombytes_buf(sk, sizeof sk);
    nostr_event_t ev = {.kind = 1, .created_at = 1234};
    assert_int_equal(nostr_event_add_tag(&ev, 2, (const char *[]){"t", "x"}), 0);
    assert_int_equal(nostr_event_set_content(&ev, "hello"), 0);
    assert_int_equal(nostr_event_sign(&ev, sk), 0);
    assert_true(nostr_event_verify(&ev));
    char *msg = nostr_msg_event(&ev);
    assert_non_null(msg);
    /* relay echo: ["EVENT", sub, event] parses to the same verified event */
    json_t *a = json_loads(msg, 0, NULL);
    json_array_insert_new(a, 1, json_string("s1"));
    char *echo = json_dumps(a, JSON_COMPACT);
    nostr_msg_t m;
    assert_int_equal(nostr_msg_parse(echo, strlen(echo), &m), NOSTR_MSG_EVENT);
    assert_string_equal(m.sub_id, "s1");
    assert_true(nostr_event_verify(&m.event));
    assert_string_equal(m.event.id, ev.id);
    nostr_msg_free(&m);
    free(echo);
    json_decref(a);
    free(msg);
    nostr_event_free(&ev);
}

static void test_msg_table(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        nostr_msg_type_t want;
    } rows[] = {
        {"[\"EOSE\",\"s1\"]", NOSTR_MSG_EOSE},
        {"[\"NOTICE\",\"slow down\"]", NOSTR_MSG_NOTICE},
        {"[\"OK\",\"fdaee01ad60f84902e078d351c31c567f72bc2b54052fd2affd2643b1150cac7\",true,\"\"]",
         NOSTR_MSG_OK},
        {"[\"CLOSED\",\"s1\",\"auth-required\"]", NOSTR_MSG_CLOSED},
        {"", NOSTR_MSG_INVALID},
        {"[", NOSTR_MSG_INVALID},
        {"{}", NOSTR_MSG_INVALID},
        {"[]", NOSTR_MSG_INVALID},
        {"[1,2]", NOSTR_MSG_INVALID},
        {"[\"EOSE\"]", NOSTR_MSG_INVALID},
        {"[\"EOSE\",5]", NOSTR_MSG_INVALID},
        {"[\"OK\",\"short\",true,\"\"]", NOSTR_MSG_INVALID},
        {"[\"OK\",\"fdaee01ad60f84902e078d351c31c567f72bc2b54052fd2affd2643b1150cac7\",1,\"\"]",
         NOSTR_MSG_INVALID},
        {"[\"EVENT\",\"s1\",{}]", NOSTR_MSG_INVALID},
        {"[\"EVENT\",\"s1\",{\"id\":1}]", NOSTR_MSG_INVALID},
        {"[\"AUTH\",\"challenge\"]", NOSTR_MSG_INVALID},
        {"[\"EOSE\",\"s1\",\"s1\"]", NOSTR_MSG_INVALID},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        nostr_msg_t m;
        nostr_msg_type_t t = nostr_msg_parse(rows[i].in, strlen(rows[i].in), &m);
        if (t != rows[i].want)
            fail_msg("row %zu (%s): %d, want %d", i, rows[i].in, t, rows[i].want);
        if (t == NOSTR_MSG_INVALID) assert_true(m.message[0] != 0);
        nostr_msg_free(&m);
    }
    /* a NUL inside a string, an over-long subscription id, a message over the cap */
    char sub[200];
    memset(sub, 'a', sizeof sub - 1);
    sub[sizeof sub - 1] = 0;
    char buf[400];
    snprintf(buf, sizeof buf, "[\"EOSE\",\"%s\"]", sub);
    nostr_msg_t m;
    assert_int_equal(nostr_msg_parse(buf, strlen(buf), &m), NOSTR_MSG_INVALID);
    assert_int_equal(nostr_msg_parse("[\"EOSE\",\"a\\u0000b\"]", 19, &m), NOSTR_MSG_INVALID);
    char *big = malloc(NOSTR_MSG_MAX + 2);
    memset(big, ' ', NOSTR_MSG_MAX + 1);
    assert_int_equal(nostr_msg_parse(big, NOSTR_MSG_MAX + 1, &m), NOSTR_MSG_INVALID);
    free(big);
    /* an event with too many tags */
    json_t *j = json_loads(KAT, 0, NULL);
    json_t *tags = json_object_get(j, "tags");
    for (int i = 0; i < NOSTR_MAX_TAGS; i++)
        json_array_append_new(tags, json_pack("[s]", "x"));
    nostr_event_t ev;
    char err[128];
    assert_int_equal(nostr_event_from_json(j, &ev, err, sizeof err), -EINVAL);
    json_decref(j);
}

static void test_req_build(void **state)
{
    (void)state;
    nostr_filter_t f = {
        .kinds = {LISTING_KIND}, .n_kinds = 1, .t_tags = {LISTING_TAG}, .n_t = 1, .limit = 100};
    char *s = nostr_msg_req("disc1", &f);
    assert_string_equal(
        s, "[\"REQ\",\"disc1\",{\"kinds\":[31990],\"#t\":[\"mesh-llm\"],\"limit\":100}]");
    free(s);
    s = nostr_msg_close("disc1");
    assert_string_equal(s, "[\"CLOSE\",\"disc1\"]");
    free(s);
    assert_null(nostr_msg_req("", &f));
}

static void make_listing(mesh_listing_t *l, const char *mesh, const char *region)
{
    memset(l, 0, sizeof *l);
    token_t t = {.n_addrs = 1};
    memset(t.id, 'a', 64);
    snprintf(t.mesh_id, sizeof t.mesh_id, "%s", mesh);
    snprintf(t.addrs[0], sizeof t.addrs[0], "127.0.0.1:4000");
    assert_int_equal(token_encode(&t, l->token, sizeof l->token), 0);
    snprintf(l->mesh_id, sizeof l->mesh_id, "%s", mesh);
    snprintf(l->name, sizeof l->name, "demo");
    snprintf(l->region, sizeof l->region, "%s", region);
    snprintf(l->version, sizeof l->version, "0.1.0");
    memset(l->node, 'a', 64);
    l->node_count = 2;
    l->mem_total = 16ull << 30;
    l->mem_free = 8ull << 30;
    l->n_models = 1;
    snprintf(l->models[0].name, sizeof l->models[0].name, "stories260K");
    snprintf(l->models[0].status, sizeof l->models[0].status, "ready");
    l->models[0].served = true;
}

static void test_listing_roundtrip(void **state)
{
    (void)state;
    mesh_listing_t l, back;
    make_listing(&l, "0123456789abcdef0123456789abcdef", "eu");
    nostr_event_t ev;
    assert_int_equal(listing_to_event(&l, 1000, 120, &ev), 0);
    uint8_t sk[32];
    randombytes_buf(sk, sizeof sk);
    assert_int_equal(nostr_event_sign(&ev, sk), 0);
    assert_true(nostr_event_verify(&ev));
    assert_string_equal(nostr_event_tag(&ev, "d"), l.mesh_id);
    assert_string_equal(nostr_event_tag(&ev, "expiration"), "1120");
    char err[128];
    assert_int_equal(listing_from_event(&ev, 1100, &back, err, sizeof err), 0);
    assert_string_equal(back.mesh_id, l.mesh_id);
    assert_string_equal(back.region, "eu");
    assert_string_equal(back.token, l.token);
    assert_int_equal(back.node_count, 2);
    assert_int_equal(back.mem_free, l.mem_free);
    assert_int_equal(back.n_models, 1);
    assert_true(back.models[0].served);
    assert_int_equal(back.expires_at, 1120);
    assert_string_equal(back.publisher, ev.pubkey);
    /* expired */
    assert_int_equal(listing_from_event(&ev, 1120, &back, err, sizeof err), -ETIME);
    /* from the future (beyond the clock skew allowed) */
    assert_int_equal(listing_from_event(&ev, 1000 - LISTING_MAX_SKEW_S, &back, err, sizeof err), 0);
    assert_int_equal(listing_from_event(&ev, 1000 - LISTING_MAX_SKEW_S - 1, &back, err, sizeof err),
                     -EINVAL);
    nostr_event_t longlived;
    assert_int_equal(listing_to_event(&l, 1000, LISTING_MAX_TTL_S + 1, &longlived), 0);
    assert_int_equal(listing_from_event(&longlived, 1100, &back, err, sizeof err), -EINVAL);
    nostr_event_free(&longlived);
    /* the d tag must be the content's mesh */
    free(ev.tags[0].v[1]);
    ev.tags[0].v[1] = strdup("ffff");
    assert_int_equal(listing_from_event(&ev, 1100, &back, err, sizeof err), -EINVAL);
    nostr_event_free(&ev);
    /* a token for another mesh */
    mesh_listing_t other;
    make_listing(&other, "ffffffffffffffffffffffffffffffff", "eu");
    memcpy(l.token, other.token, sizeof l.token);
    assert_int_equal(listing_to_event(&l, 1000, 120, &ev), 0);
    assert_int_equal(listing_from_event(&ev, 1100, &back, err, sizeof err), -EINVAL);
    nostr_event_free(&ev);
}

static void test_listing_set(void **state)
{
    (void)state;
    listing_set_t s;
    assert_int_equal(listing_set_init(&s), 0);
    mesh_listing_t a, b;
    make_listing(&a, "aaaa", "eu");
    a.created_at = 100;
    a.expires_at = 220;
    assert_true(listing_set_add(&s, &a));
    make_listing(&b, "aaaa", "us");
    b.created_at = 90; /* older: dropped */
    b.expires_at = 500;
    assert_false(listing_set_add(&s, &b));
    b.created_at = 110; /* newer: replaces (another publisher took over) */
    assert_true(listing_set_add(&s, &b));
    assert_int_equal(s.n, 1);
    assert_string_equal(listing_set_find(&s, "aaaa")->region, "us");
    make_listing(&a, "bbbb", "eu");
    a.created_at = 100;
    a.expires_at = 220;
    assert_true(listing_set_add(&s, &a));
    listing_set_expire(&s, 220);
    assert_int_equal(s.n, 1);
    assert_null(listing_set_find(&s, "bbbb"));
    listing_set_free(&s);
}

static void test_auto_score_table(void **state)
{
    (void)state;
    const char *wanted[] = {"stories260K"};
    static const struct {
        const char *region, *last, *mesh_region;
        bool wants, served;
        int64_t want;
    } rows[] = {
        /* base: 2 nodes (+20), 8 GiB free (+16), 16 GiB total (+4) = 40 */
        {"", "", "eu", false, true, 40},     {"eu", "", "eu", false, true, 240}, /* region */
        {"us", "", "eu", false, true, 40},   /* other region: no bonus */
        {"", "m", "eu", false, true, 540},   /* sticky */
        {"", "x", "eu", false, true, 40},    /* another last mesh */
        {"", "", "eu", true, true, 340},     /* serves the wanted model */
        {"", "", "eu", true, false, 140},    /* holds it only */
        {"eu", "m", "eu", true, true, 1040}, /* everything */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mesh_listing_t l;
        make_listing(&l, "m", rows[i].mesh_region);
        l.models[0].served = rows[i].served;
        auto_prefs_t p = {.region = rows[i].region,
                          .last_mesh = rows[i].last,
                          .wanted = wanted,
                          .n_wanted = rows[i].wants ? 1 : 0};
        int64_t got = auto_score(&l, &p);
        if (got != rows[i].want)
            fail_msg("row %zu: %lld, want %lld", i, (long long)got, (long long)rows[i].want);
    }
}

static void test_auto_rank(void **state)
{
    (void)state;
    mesh_listing_t ls[3];
    make_listing(&ls[0], "eu1", "eu");
    make_listing(&ls[1], "us1", "us");
    make_listing(&ls[2], "us2", "us");
    ls[2].mem_free = 9ull << 30; /* +2: beats us1 */
    size_t order[3];
    auto_prefs_t p = {.region = "us"};
    auto_rank(ls, 3, &p, order);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 1);
    assert_int_equal(order[2], 0);
    /* sticky beats region */
    p.last_mesh = "eu1";
    auto_rank(ls, 3, &p, order);
    assert_int_equal(order[0], 0);
    /* equal scores: the smaller mesh id first (deterministic) */
    ls[2].mem_free = ls[1].mem_free;
    p.last_mesh = NULL;
    auto_rank(ls, 3, &p, order);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
}

/* A named mesh's id derives from the name and the originator's Nostr key: the same name picked
 * by two people gives two meshes; the same person gets the same mesh every time. */
static void test_named_mesh(void **state)
{
    (void)state;
    identity_t id;
    identity_ephemeral(&id, 1);
    uint8_t pk1[32], pk2[32];
    memset(pk1, 1, 32);
    memset(pk2, 2, 32);
    mesh_cred_t a, b, c, d;
    identity_named_mesh(&id, pk1, "demo", &a);
    identity_named_mesh(&id, pk2, "demo", &b);
    identity_named_mesh(&id, pk1, "demo", &c);
    identity_named_mesh(&id, pk1, "other", &d);
    assert_string_not_equal(a.mesh_id, b.mesh_id);
    assert_string_equal(a.mesh_id, c.mesh_id);
    assert_string_not_equal(a.mesh_id, d.mesh_id);
    assert_int_equal(strlen(a.mesh_id), 32);
}

static void test_ws_url(void **state)
{
    (void)state;
    static const struct {
        const char *url;
        int ok, tls, port;
        const char *host, *path;
    } rows[] = {
        {"ws://127.0.0.1:7000", 1, 0, 7000, "127.0.0.1", "/"},
        {"wss://relay.damus.io", 1, 1, 443, "relay.damus.io", "/"},
        {"WSS://nos.lol/path?x=1", 1, 1, 443, "nos.lol", "/path?x=1"},
        {"ws://[::1]:8080/r", 1, 0, 8080, "::1", "/r"},
        {"ws://host?q", 1, 0, 80, "host", "/?q"},
        {"ws://host#frag", 1, 0, 80, "host", "/"},
        {"http://host", 0, 0, 0, NULL, NULL},
        {"ws://", 0, 0, 0, NULL, NULL},
        {"ws://:80", 0, 0, 0, NULL, NULL},
        {"ws://host:0", 0, 0, 0, NULL, NULL},
        {"ws://host:65536", 0, 0, 0, NULL, NULL},
        {"ws://host:x", 0, 0, 0, NULL, NULL},
        {"ws://[]:80", 0, 0, 0, NULL, NULL},
        {"ws://[::1", 0, 0, 0, NULL, NULL},
        {"ws://user@host", 0, 0, 0, NULL, NULL},
        {"ws://host/a b", 0, 0, 0, NULL, NULL},
        {"ws://host/a\r\nX: y", 0, 0, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int tls = -1, port = -1;
        char host[256], path[WS_URL_MAX];
        int rc = ws_parse_url(rows[i].url, &tls, host, sizeof host, &port, path, sizeof path);
        if ((rc == 0) != rows[i].ok) fail_msg("row %zu (%s): rc %d", i, rows[i].url, rc);
        if (!rows[i].ok) continue;
        assert_int_equal(tls, rows[i].tls);
        assert_int_equal(port, rows[i].port);
        assert_string_equal(host, rows[i].host);
        assert_string_equal(path, rows[i].path);
    }
}

static void test_publisher_decide(void **state)
{
    (void)state;
    static const struct {
        bool active, listed;
        const char *lister;
        bool seen, smallest, due;
        pub_action_t want;
    } rows[] = {
        /* a publisher republishes when due, else waits */
        {true, true, "bb", false, false, true, PUB_PUBLISH},
        {true, true, "bb", false, false, false, PUB_NOTHING},
        {true, false, NULL, true, false, true, PUB_PUBLISH},
        /* two publishers: the larger id yields to the smaller */
        {true, true, "aa", true, false, true, PUB_YIELD},
        {true, true, "cc", true, true, true, PUB_PUBLISH},
        /* a watcher: the listing alive → nothing */
        {false, true, "aa", true, true, true, PUB_NOTHING},
        /* expired: the smallest live member takes over, the others wait */
        {false, false, NULL, true, true, false, PUB_TAKE_OVER},
        {false, false, NULL, true, false, false, PUB_NOTHING},
        /* a listing by a stranger (lister NULL): no yield, but no takeover either */
        {true, true, NULL, true, false, true, PUB_PUBLISH},
        {false, true, NULL, true, true, false, PUB_NOTHING},
        /* never seen listed (not a published mesh): nothing */
        {false, false, NULL, false, true, false, PUB_NOTHING},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        pub_action_t a = publisher_decide(rows[i].active, rows[i].listed, rows[i].lister, "bb",
                                          rows[i].seen, rows[i].smallest, rows[i].due);
        if (a != rows[i].want) fail_msg("row %zu: %d, want %d", i, a, rows[i].want);
    }
}

static bool disk_has(void *data, const known_model_t *m)
{
    const char *name = data;
    return name && strcmp(name, m->name) == 0;
}

/* --auto's model for a new mesh: the largest that fits and runs at >= 5 tokens/s estimated,
 * the ones on disk first; a 2-core VM (3258 MFLOP/s measured on one thread) never gets the 7B */
static void test_auto_pick_model(void **state)
{
    (void)state;
    const uint64_t GBy = 1000000000ull, MBy = 1000000ull;
    struct {
        uint64_t mem;
        uint32_t mflops;
        const char *disk, *want, *best;
        auto_pick_why_t why;
    } rows[] = {
        {4 * GBy, 3258, NULL, "Qwen2.5-0.5B-Instruct-Q4_K_M", NULL, AUTO_PICK_FAST},
        {8 * GBy, 3258, NULL, "Qwen2.5-0.5B-Instruct-Q4_K_M", NULL, AUTO_PICK_FAST},
        {16 * GBy, 40000, NULL, "Qwen2.5-7B-Instruct-Q4_K_M", NULL, AUTO_PICK_FAST},
        {16 * GBy, 12000, NULL, "Llama-3.2-3B-Instruct-Q4_K_M", NULL, AUTO_PICK_FAST},
        {2 * GBy, 12000, NULL, "Qwen2.5-1.5B-Instruct-Q4_K_M", NULL, AUTO_PICK_FAST},
        {4 * GBy, 1000, NULL, NULL, "SmolLM2-360M-Instruct-Q4_K_M", AUTO_PICK_TOO_SLOW},
        {100 * MBy, 40000, NULL, NULL, NULL, AUTO_PICK_NONE_FITS},
        {4 * GBy, 0, NULL, "Qwen2.5-0.5B-Instruct-Q4_K_M", NULL, AUTO_PICK_UNKNOWN_SPEED},
        {800 * MBy, 0, NULL, "SmolLM2-360M-Instruct-Q4_K_M", NULL, AUTO_PICK_UNKNOWN_SPEED},
        /* an accelerator: memory alone */
        {8 * GBy, AUTO_SPEED_UNLIMITED, NULL, "Qwen2.5-7B-Instruct-Q4_K_M", NULL, AUTO_PICK_FAST},
        /* on disk and fast enough: no download */
        {4 * GBy, 12000, "SmolLM2-360M-Instruct-Q4_K_M", "SmolLM2-360M-Instruct-Q4_K_M", NULL,
         AUTO_PICK_FAST},
        /* on disk but too slow here: not taken */
        {4 * GBy, 3258, "Llama-3.2-3B-Instruct-Q4_K_M", "Qwen2.5-0.5B-Instruct-Q4_K_M", NULL,
         AUTO_PICK_FAST},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        auto_pick_t p =
            auto_pick_model(rows[i].mem, rows[i].mflops, disk_has, (void *)rows[i].disk);
        const char *got = p.model ? p.model->name : NULL;
        if (p.why != rows[i].why || (got == NULL) != (rows[i].want == NULL) ||
            (got && strcmp(got, rows[i].want) != 0))
            fail_msg("row %zu: %s (why %d), want %s (why %d)", i, got ? got : "none", p.why,
                     rows[i].want ? rows[i].want : "none", rows[i].why);
        if (rows[i].best && (!p.best || strcmp(p.best->name, rows[i].best) != 0))
            fail_msg("row %zu: best %s, want %s", i, p.best ? p.best->name : "none", rows[i].best);
        assert_int_equal(p.on_disk, rows[i].disk && got && strcmp(rows[i].disk, got) == 0);
        if (p.why == AUTO_PICK_FAST) assert_true(p.tps >= AUTO_MIN_TPS);
    }
    /* the estimate: bandwidth-bound, half of 2 bytes per measured flop */
    assert_true(auto_est_tps(4683 * MBy, 3258) < 1.0);
    assert_true(auto_est_tps(491 * MBy, 3258) > 6.0 && auto_est_tps(491 * MBy, 3258) < 7.0);
}

static int parse(config_t *cfg, const char *const *args, size_t n, char *err, size_t errlen)
{
    char *argv[16] = {"mesh-llm"};
    for (size_t i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    return config_parse(cfg, (int)n + 1, argv, err, errlen);
}

static void test_config_flags(void **state)
{
    (void)state;
    config_t cfg;
    char err[512];
    const char *ok[] = {"--auto",
                        "--region",
                        "eu",
                        "--nostr-relay",
                        "ws://127.0.0.1:1",
                        "--nostr-relay",
                        "wss://relay.damus.io"};
    assert_int_equal(parse(&cfg, ok, 7, err, sizeof err), 0);
    assert_true(cfg.auto_join && !cfg.publish);
    assert_string_equal(cfg.region, "eu");
    assert_int_equal(cfg.n_nostr_relays, 2);
    assert_false(config_idle(&cfg)); /* --auto joins by itself */
    config_free(&cfg);
    const char *pub[] = {"--publish", "--mesh-name", "demo"};
    assert_int_equal(parse(&cfg, pub, 3, err, sizeof err), 0);
    assert_true(cfg.publish && !config_idle(&cfg));
    config_free(&cfg);
    static const struct {
        const char *a[4];
        size_t n;
        const char *says;
    } bad[] = {
        {{"--client", "--publish"}, 2, "--client cannot be combined with --publish"},
        {{"--client", "--auto"}, 2, "--client cannot be combined with --auto"},
        {{"--nostr-relay", "http://x"}, 2, "ws:// or wss://"},
        {{"--nostr-relay", "ws://"}, 2, "ws:// or wss://"},
        {{"--region", ""}, 2, "--region"},
        {{"--region", "0123456789012345678901234567890123456789"}, 2, "--region"},
    };
    /* --auto finds its mesh: not with --join */
    token_t t = {.n_addrs = 1};
    memset(t.id, 'a', 64);
    memset(t.mesh_id, 'b', 32);
    snprintf(t.addrs[0], sizeof t.addrs[0], "127.0.0.1:4000");
    char tok[TOKEN_MAX_LEN];
    assert_int_equal(token_encode(&t, tok, sizeof tok), 0);
    const char *aj[] = {"--auto", "--join", tok};
    assert_int_equal(parse(&cfg, aj, 3, err, sizeof err), -EINVAL);
    if (!strstr(err, "--auto finds a mesh to join")) {
        fprintf(stderr, "ERR=[%s]\n", err);
        fail();
    }
    config_free(&cfg);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(&cfg, bad[i].a, bad[i].n, err, sizeof err);
        if (rc != -EINVAL) fail_msg("row %zu: rc %d", i, rc);
        if (bad[i].says && !strstr(err, bad[i].says)) fail_msg("row %zu: %s", i, err);
        config_free(&cfg);
    }
}

int main(void)
{
    if (sodium_init() < 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bip340_vectors),  cmocka_unit_test(test_known_event),
        cmocka_unit_test(test_sign_roundtrip),  cmocka_unit_test(test_msg_table),
        cmocka_unit_test(test_req_build),       cmocka_unit_test(test_listing_roundtrip),
        cmocka_unit_test(test_listing_set),     cmocka_unit_test(test_auto_score_table),
        cmocka_unit_test(test_auto_rank),       cmocka_unit_test(test_named_mesh),
        cmocka_unit_test(test_ws_url),          cmocka_unit_test(test_publisher_decide),
        cmocka_unit_test(test_auto_pick_model), cmocka_unit_test(test_config_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
