/* bench/gossip_verify — gossip CPU per received announcement (goal < 100 µs).
 *
 * N nodes' announcements, each signed by its own key and shaped like a real one (mesh.c's
 * build_announcement: addresses, memory, a few models on disk, one served, request rates,
 * RTTs to peers, ~1 KB), arrive as the JSON text of gossip messages: one "update" each (the
 * common case: a change relayed by a peer) and, separately, in "sync" messages of 100 (a
 * join). The receiver is a real gossip_t to which every announcement is news, so each is
 * decoded (json_loads), validated, its signature verified (canonical form + Ed25519) and
 * stored. Also timed alone: the verification, and decoding alone. Prints one line:
 *   BENCH gossip_verify per_ann_us=… per_ann_sync_us=… verify_us=… decode_us=… … goal_met=yes|no
 * (medians of 5 rounds; the exit status says only whether the run worked). */
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gossip.h"
#include "gossip_msg.h"
#include "identity.h"

#define N 1000 /* at most GOSSIP_MAX_PEERS live peers per receiver */
#define ROUNDS 5
#define GOAL_US 100.0

static char ids[N + 2][GOSSIP_ID_LEN + 1];
static uint8_t sks[N + 2][64];

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void sign_with(void *data, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(data, msg, len, sig);
}
static void io_send(void *d, const char *to, json_t *m)
{
    (void)d, (void)to, (void)m;
}
static uint64_t io_random(void *d)
{
    return (uint64_t)rand();
}
static uint64_t io_wall(void *d)
{
    return (uint64_t)time(NULL) * 1000;
}

/* Node i's announcement, signed. */
static json_t *announcement(int i, uint64_t inc)
{
    json_t *rtt = json_object(), *models = json_array();
    for (int k = 1; k <= 5; k++)
        json_object_set_new(rtt, ids[(i + k) % N], json_real(0.25 * k));
    for (int k = 0; k < 4; k++)
        json_array_append_new(models,
                              json_pack("{s:s, s:I, s:s}", "name", k ? "Qwen3-8B-Q4_K_M" : "llama",
                                        "size_bytes", (json_int_t)5027784800LL, "type", "llm"));
    json_t *a = json_pack(
        "{s:s, s:I, s:I, s:s, s:s, s:s, s:[s, s, s], s:I, s:o, s:[{s:s, s:s, s:b}], s:[], s:{s:i},"
        " s:{s:I}, s:o, s:i, s:i, s:i}",
        "id", ids[i], "incarnation", (json_int_t)inc, "seq", (json_int_t)3, "version", "0.1.0",
        "mesh_id", "8a718caf3d45835379f0eb8a9318c514", "role", "worker", "addrs", "10.0.0.12:41234",
        "192.168.1.12:41234", "127.0.0.1:41234", "vram_bytes", (json_int_t)12326623232LL,
        "available_models", models, "serving", "model", "Qwen3-8B-Q4_K_M", "state", "ready",
        "http_ready", 1, "requested_models", "request_rates", "Qwen3-8B-Q4_K_M", 12, "last_request",
        "Qwen3-8B-Q4_K_M", (json_int_t)1795462919LL, "rtt_ms", rtt, "api_port", 9337,
        "console_port", 3131, "quic_port", 41234);
    if (!a || gmsg_ann_sign(a, sign_with, sks[i]) < 0) abort();
    return a;
}

static char *message(const char *type, json_t *anns)
{
    json_t *m = json_pack("{s:i, s:s, s:i, s:o}", "v", 1, "type", type, "inc", 1, "anns", anns);
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return s;
}

static gossip_t *receiver(void)
{
    gossip_io_t io = {sks[N], io_send, NULL, io_random, sign_with, io_wall};
    return gossip_new(ids[N], io_wall(NULL), NULL, NULL, &io, 0);
}

/* Feed the messages to a fresh receiver; µs per announcement. */
static double feed(char **msgs, size_t nmsgs, size_t per_msg)
{
    gossip_t *g = receiver();
    double t0 = now_us();
    for (size_t i = 0; i < nmsgs; i++) {
        json_t *m = json_loads(msgs[i], 0, NULL);
        if (!m || gossip_receive(g, ids[N + 1], m, 1) != 0) abort();
        json_decref(m);
    }
    double dt = now_us() - t0;
    if (gossip_alive_count(g) != N || gossip_stats(g)->bad_sig) {
        fprintf(stderr, "bench/gossip_verify: %zu of %d announcements taken\n",
                gossip_alive_count(g), N);
        exit(2);
    }
    gossip_free(g);
    return dt / (double)(nmsgs * per_msg);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    static char *single[N], *sync[N / 100];
    static json_t *anns[N];
    double per[ROUNDS], per_sync[ROUNDS], t0, verify_us, decode_us;
    uint64_t inc = (uint64_t)time(NULL) * 1000;
    size_t bytes = 0;

    if (sodium_init() < 0) return 1;
    for (int i = 0; i < N + 2; i++) {
        uint8_t pk[32];
        crypto_sign_keypair(pk, sks[i]);
        hex_encode(pk, sizeof pk, ids[i]);
    }
    for (int i = 0; i < N; i++) {
        anns[i] = announcement(i, inc);
        single[i] = message("update", json_pack("[O]", anns[i]));
        bytes += strlen(single[i]);
    }
    for (int k = 0; k < N / 100; k++) {
        json_t *a = json_array();
        for (int i = 0; i < 100; i++)
            json_array_append(a, anns[k * 100 + i]);
        sync[k] = message("sync", a);
    }
    for (int r = 0; r < ROUNDS; r++) {
        per[r] = feed(single, N, 1);
        per_sync[r] = feed(sync, N / 100, 100);
    }
    qsort(per, ROUNDS, sizeof per[0], cmp);
    qsort(per_sync, ROUNDS, sizeof per_sync[0], cmp);
    /* the parts: signature verification alone, JSON decoding alone */
    t0 = now_us();
    for (int i = 0; i < N; i++)
        if (!gmsg_ann_verify(anns[i], GOSSIP_MAX_ANN_BYTES)) abort();
    verify_us = (now_us() - t0) / N;
    t0 = now_us();
    for (int i = 0; i < N; i++)
        json_decref(json_loads(single[i], 0, NULL));
    decode_us = (now_us() - t0) / N;
    printf("BENCH gossip_verify per_ann_us=%.1f per_ann_sync_us=%.1f verify_us=%.1f "
           "decode_us=%.1f ann_bytes=%zu n=%d goal_us=%.0f goal_met=%s\n",
           per[ROUNDS / 2], per_sync[ROUNDS / 2], verify_us, decode_us, bytes / N, N, GOAL_US,
           per[ROUNDS / 2] < GOAL_US ? "yes" : "no");
    for (int i = 0; i < N; i++) {
        json_decref(anns[i]);
        free(single[i]);
    }
    for (int k = 0; k < N / 100; k++)
        free(sync[k]);
    return 0;
}
