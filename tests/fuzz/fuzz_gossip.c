/* libFuzzer target: gossip messages from a peer (gossip_msg validation + the state machine's
 * handlers). Input: byte 0 picks the sender (one of 3 ids), the rest is the message's JSON.
 * Oracles besides the sanitizers: a message rejected as malformed changes nothing (peer count,
 * incarnation); the machine keeps ticking afterwards. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gossip.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *ids[] = {
        "1111111111111111111111111111111111111111111111111111111111111111",
        "2222222222222222222222222222222222222222222222222222222222222222",
        "0000000000000000000000000000000000000000000000000000000000000000", /* self */
    };
    if (size < 1) return 0;
    json_t *j = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!j) return 0;
    gossip_cfg_t cfg;
    gossip_cfg_default(&cfg, 1000);
    gossip_io_t io = {NULL, io_send, io_event, io_random};
    gossip_t *g = gossip_new(ids[2], 5, json_pack("{s:s}", "role", "worker"), &cfg, &io, 1000);
    CHECK(g != NULL);
    gossip_join(g, ids[0], 1000);
    size_t before = gossip_peer_count(g);
    uint64_t inc = gossip_incarnation(g);
    int rc = gossip_receive(g, ids[data[0] % 3], j, 1500);
    if (rc == -22) { /* -EINVAL: nothing changed */
        CHECK(gossip_peer_count(g) == before);
        CHECK(gossip_incarnation(g) == inc);
    }
    for (uint64_t t = 2000; t < 8000; t += 700)
        gossip_tick(g, t);
    json_decref(j);
    gossip_free(g);
    return 0;
}
