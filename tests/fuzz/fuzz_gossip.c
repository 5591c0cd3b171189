/* libFuzzer target: gossip messages from a peer (gossip_msg validation, signatures, the state
 * machine's handlers). Input: byte 0 = flags, the rest is the message's JSON, in which the
 * tokens @0 @1 @2 stand for the three node ids (@2 is the node under test).
 *   flags & 3  the sender (0, 1 or 2 = ourselves, which is refused)
 *   flags & 4  sign: every announcement of @0/@1/@2 in "ann"/"anns", every "left" record with a
 *              signature slot and a "leaving" get their origin's real signature, so that the
 *              fuzzer reaches past the signature checks
 * The node knows @0 and @1 alive (signed hellos) before the message. Oracles besides the
 * sanitizers: a message rejected as malformed changes nothing (peer count, incarnation); no
 * message ever makes the node hold a live peer dead (only its own failed probe does); without
 * real signatures no peer is added, changed or dropped; the machine keeps ticking afterwards. */
#include <jansson.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gossip.h"
#include "gossip_msg.h"
#include "identity.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

#define WALL 1000000

static char ids[3][GOSSIP_ID_LEN + 1];
static uint8_t sks[3][64];

static void io_send(void *d, const char *to, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT); /* what mesh.c does with it */
    CHECK(s != NULL);
    free(s);
}
static void io_event(void *d, gossip_event_t ev, const gossip_peer_t *p)
{
    CHECK(strlen(p->id) == GOSSIP_ID_LEN);
}
static uint64_t io_random(void *d)
{
    static uint64_t x = 88172645463325252ULL;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}
static void io_sign(void *d, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(d ? d : sks[2], msg, len, sig);
}
static uint64_t io_wall(void *d)
{
    return WALL;
}

static void init_keys(void)
{
    static int done;
    if (done++) return;
    CHECK(sodium_init() >= 0);
    for (int i = 0; i < 3; i++) {
        uint8_t seed[32], pk[32];
        memset(seed, 'a' + i, sizeof seed);
        crypto_sign_seed_keypair(pk, sks[i], seed);
        hex_encode(pk, sizeof pk, ids[i]);
    }
}

static int key_index(const char *id)
{
    for (int i = 0; id && i < 3; i++)
        if (!strcmp(id, ids[i])) return i;
    return -1;
}

/* The input with @0 @1 @2 replaced by the ids (NULL if too long). */
static char *expand(const uint8_t *p, size_t n, size_t *len)
{
    char *out = malloc(n * GOSSIP_ID_LEN / 2 + 1);
    size_t k = 0;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '@' && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '2') {
            memcpy(out + k, ids[p[++i] - '0'], GOSSIP_ID_LEN);
            k += GOSSIP_ID_LEN;
        } else {
            out[k++] = (char)p[i];
        }
    }
    *len = k;
    return out;
}

static void sign_ann(json_t *a)
{
    int k = key_index(json_string_value(json_object_get(a, "id")));
    if (k >= 0 && json_is_object(a)) gmsg_ann_sign(a, io_sign, sks[k]);
}

static void sign_leave(json_t *rec, size_t slot, const char *id, json_t *incj)
{
    int k = key_index(id);
    char hex[GMSG_SIG_HEX + 1], *b;
    size_t len = 0;
    if (k < 0 || !json_is_integer(incj) || json_integer_value(incj) < 0) return;
    if (!(b = gmsg_leave_bytes(id, (uint64_t)json_integer_value(incj), &len))) return;
    gmsg_sign_hex(io_sign, sks[k], b, len, hex);
    free(b);
    if (json_is_array(rec))
        json_array_set_new(rec, slot, json_string(hex));
    else
        json_object_set_new(rec, "sig", json_string(hex));
}

static void sign_all(json_t *j, const char *from)
{
    size_t i;
    json_t *e;
    if (!json_is_object(j)) return;
    sign_ann(json_object_get(j, "ann"));
    json_array_foreach(json_object_get(j, "anns"), i, e) sign_ann(e);
    json_array_foreach(json_object_get(j, "dead"), i, e)
    {
        if (json_array_size(e) == 4)
            sign_leave(e, 3, json_string_value(json_array_get(e, 0)), json_array_get(e, 1));
    }
    if (json_is_string(json_object_get(j, "sig")))
        sign_leave(j, 0, from, json_object_get(j, "inc"));
}

static void hello_from(gossip_t *g, int k, uint64_t now)
{
    json_t *a = json_pack("{s:s, s:i, s:i, s:s}", "id", ids[k], "incarnation", 5, "seq", 1, "role",
                          "worker");
    json_t *m;
    gmsg_ann_sign(a, io_sign, sks[k]);
    m = json_pack("{s:i, s:s, s:i, s:o}", "v", 1, "type", "hello", "inc", 5, "ann", a);
    CHECK(gossip_receive(g, ids[k], m, now) == 0);
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_keys();
    if (size < 1 || size > 65536) return 0;
    size_t len = 0;
    char *text = expand(data + 1, size - 1, &len);
    json_t *j = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    if (!j) return 0;
    const char *from = ids[data[0] % 4 == 3 ? 0 : data[0] % 4];
    bool signed_mode = data[0] & 4;
    if (signed_mode) sign_all(j, from);
    gossip_cfg_t cfg;
    gossip_cfg_default(&cfg, 1000);
    gossip_io_t io = {NULL, io_send, io_event, io_random, io_sign, io_wall};
    gossip_t *g = gossip_new(ids[2], 5, json_pack("{s:s}", "role", "worker"), &cfg, &io, 1000);
    CHECK(g != NULL);
    gossip_join(g, ids[0], 1000);
    hello_from(g, 0, 1000);
    hello_from(g, 1, 1000);
    size_t before = gossip_peer_count(g);
    uint64_t inc = gossip_incarnation(g);
    int rc = gossip_receive(g, from, j, 1500);
    if (rc == -22) { /* -EINVAL: nothing changed */
        CHECK(gossip_peer_count(g) == before);
        CHECK(gossip_incarnation(g) == inc);
    }
    for (int k = 0; k < 2; k++) {
        const gossip_peer_t *p = gossip_find(g, ids[k]);
        CHECK(p != NULL);
        CHECK(p->state != GOSSIP_DEAD); /* claims are hints: only a failed probe kills */
        if (!signed_mode) CHECK(p->state == GOSSIP_ALIVE && p->inc == 5 && p->seq == 1);
    }
    if (!signed_mode) CHECK(gossip_peer_count(g) == before);
    for (uint64_t t = 2000; t < 8000; t += 700)
        gossip_tick(g, t);
    json_decref(j);
    gossip_free(g);
    return 0;
}
