/* Tests for src/core/gossip.c: focused unit tests with a recording I/O, and a deterministic
 * simulation of 100 nodes: virtual clock, a priority queue of in-flight messages with 1-50 ms
 * delay and 1.5 % loss, every message through the JSON codec (json_dumps when sent — once per
 * message object, so a broadcast is serialized once — and json_loads on first delivery), kills,
 * restarts, leaves, stale replays and partitions. Fixed seeds; GOSSIP_SIM_SEED=<n> explores
 * other runs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip.h"
#include "route_decide.h"
#include "route_table.h"
#include "gossip_msg.h"
#include "identity.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* An Ed25519 key pair from a 32-byte seed drawn from `seed`; the id is the public key's hex. */
static void make_key(uint64_t *seed, char id[GOSSIP_ID_LEN + 1], uint8_t sk[64])
{
    uint8_t kseed[32], pk[32];
    for (int w = 0; w < 4; w++) {
        uint64_t x = splitmix(seed);
        memcpy(kseed + 8 * w, &x, 8);
    }
    crypto_sign_seed_keypair(pk, sk, kseed);
    hex_encode(pk, sizeof pk, id);
}

/* =============================================================================================
 * Simulation harness
 * =========================================================================================== */

#define MAXN 128
#define NCAP 8

typedef struct sim sim_t;

typedef struct {
    sim_t *sim;
    unsigned idx;
    char id[GOSSIP_ID_LEN + 1];
    uint8_t sk[64]; /* every simulated node has its own key */
    gossip_t *g;
    bool up;
    uint64_t rng;
    uint64_t timer_at;
    int group;
} node_t;

enum { EV_DELIVER, EV_TIMER };

/* A serialized message, shared by the copies of a broadcast; parsed on its first delivery. */
typedef struct {
    int refs;
    char *text;
    json_t *parsed;
} payload_t;

typedef struct {
    uint64_t t, seq;
    int kind;
    unsigned to, from;
    payload_t *payload;
} sev_t;

typedef struct {
    unsigned from;
    char *payload;
} capture_t;

struct sim {
    node_t nodes[MAXN];
    unsigned n;
    sev_t *heap;
    size_t hn, hcap;
    uint64_t seqno, now, rng;
    gossip_cfg_t cfg;
    unsigned loss_bp; /* basis points */
    uint64_t dmax;    /* delay uniform in [1, dmax] ms */
    bool partition;
    uint64_t dead_at[MAXN][MAXN], left_at[MAXN][MAXN], up_at[MAXN][MAXN]; /* [observer][subject] */
    uint64_t sent_by_type[16];
    uint64_t delivered, lost;
    json_t *last_sent; /* referenced, so its address cannot be reused while cached */
    payload_t *last_payload;
    int capture_victim; /* -1: no capture */
    unsigned capture_skip;
    capture_t caps[NCAP];
};

static const char *const sim_types[] = {"hb",   "ack",  "update",    "hello",   "sync",
                                        "ping", "pong", "peer_down", "leaving", "dead_notice"};
enum { C_SYNC, C_ACK, C_UPDATE, C_HB3, C_OWN_HB, C_OWN_UPDATE, C_OWN_HELLO };

static int type_index(const char *t)
{
    for (int i = 0; i < 10; i++)
        if (t && !strcmp(t, sim_types[i])) return i;
    return 15;
}

static int node_by_id(sim_t *s, const char *id)
{
    for (unsigned i = 0; i < s->n; i++)
        if (!strcmp(s->nodes[i].id, id)) return (int)i;
    return -1;
}

static void heap_push(sim_t *s, sev_t e)
{
    size_t i;
    if (s->hn == s->hcap) {
        s->hcap = s->hcap ? s->hcap * 2 : 1024;
        s->heap = realloc(s->heap, s->hcap * sizeof *s->heap);
        assert_non_null(s->heap);
    }
    e.seq = s->seqno++;
    i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        sev_t *q = &s->heap[p];
        if (q->t < e.t || (q->t == e.t && q->seq < e.seq)) break;
        s->heap[i] = *q;
        i = p;
    }
    s->heap[i] = e;
}

static sev_t heap_pop(sim_t *s)
{
    sev_t top = s->heap[0], last = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->hn) break;
        if (c + 1 < s->hn &&
            (s->heap[c + 1].t < s->heap[c].t ||
             (s->heap[c + 1].t == s->heap[c].t && s->heap[c + 1].seq < s->heap[c].seq)))
            c++;
        if (last.t < s->heap[c].t || (last.t == s->heap[c].t && last.seq < s->heap[c].seq)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->hn) s->heap[i] = last;
    return top;
}

static bool anns_mention(json_t *anns, const char *id)
{
    size_t i;
    json_t *a;
    json_array_foreach(anns, i, a)
    {
        if (!strcmp(json_string_value(json_object_get(a, "id")), id)) return true;
    }
    return false;
}

static void capture_set(sim_t *s, int slot, unsigned from, json_t *msg)
{
    free(s->caps[slot].payload);
    s->caps[slot].payload = json_dumps(msg, JSON_COMPACT);
    s->caps[slot].from = from;
}

/* Keep the latest messages that carry the victim's announcement (or digest entry). */
static void capture(sim_t *s, unsigned from, json_t *msg)
{
    const char *vid = s->nodes[s->capture_victim].id;
    int t = type_index(json_string_value(json_object_get(msg, "type")));
    json_t *anns = json_object_get(msg, "anns");
    if (from == s->capture_skip) return;
    if ((int)from == s->capture_victim) {
        if (t == 0) capture_set(s, C_OWN_HB, from, msg);
        if (t == 2) capture_set(s, C_OWN_UPDATE, from, msg);
        if (t == 3) capture_set(s, C_OWN_HELLO, from, msg);
        return;
    }
    if ((t == 1 || t == 2 || t == 4) && anns_mention(anns, vid))
        capture_set(s, t == 4 ? C_SYNC : t == 1 ? C_ACK : C_UPDATE, from, msg);
    if (t == 0 && !s->caps[C_HB3].payload) { /* the first third-party hb listing the victim */
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(msg, "digest"), i, e)
        {
            if (!strcmp(json_string_value(json_array_get(e, 0)), vid))
                capture_set(s, C_HB3, from, msg);
        }
    }
}

static payload_t *payload_new(char *text)
{
    payload_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    assert_non_null(text);
    p->refs = 1;
    p->text = text;
    return p;
}

static void payload_unref(payload_t *p)
{
    if (!p || --p->refs) return;
    free(p->text);
    json_decref(p->parsed);
    free(p);
}

/* gossip never changes a message once sent: the same object sent again is the same bytes */
static payload_t *serialize(sim_t *s, json_t *msg)
{
    if (msg != s->last_sent) {
        json_decref(s->last_sent);
        payload_unref(s->last_payload);
        s->last_sent = json_incref(msg);
        s->last_payload = payload_new(json_dumps(msg, JSON_COMPACT));
    }
    s->last_payload->refs++;
    return s->last_payload;
}

static void io_send(void *data, const char *to, json_t *msg)
{
    node_t *nd = data;
    sim_t *s = nd->sim;
    int dst = node_by_id(s, to);
    sev_t e = {0};

    assert_true(nd->up);
    s->sent_by_type[type_index(json_string_value(json_object_get(msg, "type")))]++;
    if (s->capture_victim >= 0) capture(s, nd->idx, msg);
    if (dst < 0 || !s->nodes[dst].up) return;
    if ((s->partition && s->nodes[dst].group != nd->group) ||
        splitmix(&s->rng) % 10000 < s->loss_bp) {
        s->lost++;
        return;
    }
    e.t = s->now + 1 + splitmix(&s->rng) % s->dmax;
    e.kind = EV_DELIVER;
    e.to = (unsigned)dst;
    e.from = nd->idx;
    e.payload = serialize(s, msg);
    heap_push(s, e);
}

static void io_event(void *data, gossip_event_t ev, const gossip_peer_t *peer)
{
    node_t *nd = data;
    sim_t *s = nd->sim;
    int subj = node_by_id(s, peer->id);
    if (subj < 0) return;
    if (ev == GOSSIP_EV_DEAD) s->dead_at[nd->idx][subj] = s->now;
    if (ev == GOSSIP_EV_LEFT) s->left_at[nd->idx][subj] = s->now;
    if (ev == GOSSIP_EV_UP) s->up_at[nd->idx][subj] = s->now;
}

static uint64_t io_random(void *data)
{
    return splitmix(&((node_t *)data)->rng);
}

static void io_sign(void *data, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(((node_t *)data)->sk, msg, len, sig);
}

/* the virtual clock is also the wall clock (incarnations are small numbers here) */
static uint64_t io_wall(void *data)
{
    return ((node_t *)data)->sim->now;
}

static void reschedule(sim_t *s, node_t *nd)
{
    uint64_t d;
    if (!nd->up) return;
    d = gossip_next_deadline(nd->g);
    if (d < s->now) d = s->now;
    if (d < nd->timer_at) {
        sev_t e = {.t = d, .kind = EV_TIMER, .to = nd->idx};
        nd->timer_at = d;
        heap_push(s, e);
    }
}

/* Fixed seeds make the tests deterministic; GOSSIP_SIM_SEED=<n> explores other runs. */
static sim_t *sim_new(unsigned n, uint64_t seed, uint64_t hb_ms)
{
    sim_t *s = calloc(1, sizeof *s);
    const char *env = getenv("GOSSIP_SIM_SEED");
    if (env && *env) seed += strtoull(env, NULL, 10) * 1000003;
    uint64_t idseed = seed * 7919 + 1;
    assert_non_null(s);
    assert_true(n <= MAXN);
    s->n = n;
    s->rng = seed;
    s->loss_bp = 150;
    s->dmax = 50;
    s->capture_victim = -1;
    gossip_cfg_default(&s->cfg, hb_ms);
    for (unsigned i = 0; i < n; i++) {
        node_t *nd = &s->nodes[i];
        nd->sim = s;
        nd->idx = i;
        nd->rng = seed ^ (0x1000 + i);
        make_key(&idseed, nd->id, nd->sk);
        for (unsigned j = 0; j < i; j++)
            assert_string_not_equal(nd->id, s->nodes[j].id);
    }
    return s;
}

static void node_start(sim_t *s, unsigned i, uint64_t inc, int via)
{
    node_t *nd = &s->nodes[i];
    gossip_io_t io = {.data = nd,
                      .send = io_send,
                      .event = io_event,
                      .random = io_random,
                      .sign = io_sign,
                      .wall_ms = io_wall};
    json_t *ann =
        json_pack("{s:s, s:i, s:[s]}", "role", "worker", "vram_gb", (int)i, "addrs", "127.0.0.1:1");
    assert_false(nd->up);
    nd->g = gossip_new(nd->id, inc, ann, &s->cfg, &io, s->now);
    assert_non_null(nd->g);
    nd->up = true;
    nd->timer_at = UINT64_MAX;
    if (via >= 0) gossip_join(nd->g, s->nodes[via].id, s->now);
    reschedule(s, nd);
}

static void node_kill(sim_t *s, unsigned i)
{
    node_t *nd = &s->nodes[i];
    assert_true(nd->up);
    gossip_free(nd->g);
    nd->g = NULL;
    nd->up = false;
}

static void sim_free(sim_t *s)
{
    for (unsigned i = 0; i < s->n; i++)
        if (s->nodes[i].up) node_kill(s, i);
    while (s->hn)
        payload_unref(heap_pop(s).payload);
    json_decref(s->last_sent);
    payload_unref(s->last_payload);
    for (int i = 0; i < NCAP; i++)
        free(s->caps[i].payload);
    free(s->heap);
    free(s);
}

static void deliver(sim_t *s, unsigned to, unsigned from, payload_t *pl)
{
    node_t *nd = &s->nodes[to];
    json_t *msg = pl->parsed ? pl->parsed : (pl->parsed = json_loads(pl->text, 0, NULL));
    assert_non_null(msg);
    /* every message the state machine produces must pass its own validation */
    assert_int_equal(gossip_receive(nd->g, s->nodes[from].id, msg, s->now), 0);
    s->delivered++;
    reschedule(s, nd);
}

static void sim_run_until(sim_t *s, uint64_t t)
{
    while (s->hn && s->heap[0].t <= t) {
        sev_t e = heap_pop(s);
        node_t *nd = &s->nodes[e.to];
        s->now = e.t;
        if (e.kind == EV_DELIVER) {
            if (nd->up) deliver(s, e.to, e.from, e.payload);
            payload_unref(e.payload);
        } else if (nd->up && e.t == nd->timer_at) {
            nd->timer_at = UINT64_MAX;
            gossip_tick(nd->g, s->now);
            /* a tick consumes every due timer */
            assert_true(gossip_next_deadline(nd->g) > s->now);
            reschedule(s, nd);
        }
    }
    if (t > s->now) s->now = t;
}

static uint64_t node_seq(node_t *nd)
{
    return (uint64_t)json_integer_value(json_object_get(gossip_self(nd->g), "seq"));
}

static unsigned live_count(sim_t *s)
{
    unsigned k = 0;
    for (unsigned i = 0; i < s->n; i++)
        k += s->nodes[i].up;
    return k;
}

/* Every live node sees exactly the other live nodes as ALIVE, at their current (inc, seq). */
static bool converged(sim_t *s)
{
    unsigned live = live_count(s);
    for (unsigned i = 0; i < s->n; i++) {
        node_t *a = &s->nodes[i];
        if (!a->up) continue;
        if (gossip_alive_count(a->g) != live - 1) return false;
        for (unsigned j = 0; j < s->n; j++) {
            node_t *b = &s->nodes[j];
            const gossip_peer_t *p;
            if (!b->up || i == j) continue;
            p = gossip_find(a->g, b->id);
            if (!p || p->state != GOSSIP_ALIVE || p->inc != gossip_incarnation(b->g) ||
                p->seq != node_seq(b))
                return false;
        }
    }
    return true;
}

/* Why a sim is not converged (printed when an assertion is about to fail). */
static void explain(sim_t *s)
{
    unsigned shown = 0, live = live_count(s);
    for (unsigned i = 0; i < s->n && shown < 12; i++) {
        node_t *a = &s->nodes[i];
        if (!a->up) continue;
        if (gossip_alive_count(a->g) != live - 1)
            printf("  node %u: %zu alive, %u expected\n", i, gossip_alive_count(a->g), live - 1);
        for (unsigned j = 0; j < s->n && shown < 12; j++) {
            node_t *b = &s->nodes[j];
            const gossip_peer_t *p = i == j ? NULL : gossip_find(a->g, b->id);
            if (i == j || (!b->up && (!p || p->state != GOSSIP_ALIVE))) continue;
            if (b->up && p && p->state == GOSSIP_ALIVE && p->inc == gossip_incarnation(b->g) &&
                p->seq == node_seq(b))
                continue;
            printf("  node %u sees %u (%s): %s inc %llu seq %llu, real inc %llu seq %llu\n", i, j,
                   b->up ? "up" : "down",
                   !p                         ? "unknown"
                   : p->state == GOSSIP_ALIVE ? "alive"
                   : p->state == GOSSIP_DEAD  ? "dead"
                                              : "left",
                   p ? (unsigned long long)p->inc : 0ULL, p ? (unsigned long long)p->seq : 0ULL,
                   b->up ? (unsigned long long)gossip_incarnation(b->g) : 0ULL,
                   b->up ? (unsigned long long)node_seq(b) : 0ULL);
            shown++;
        }
    }
}

/* Run until converged; returns the time it happened or UINT64_MAX at the deadline. */
static uint64_t run_until_converged(sim_t *s, uint64_t deadline)
{
    while (!converged(s)) {
        if (s->now >= deadline) {
            explain(s);
            return UINT64_MAX;
        }
        sim_run_until(s, s->now + 10);
    }
    return s->now;
}

/* Node 0 starts alone, node k starts at k*20 ms joining through a random started node. */
static uint64_t sim_boot(sim_t *s)
{
    uint64_t t, T = s->cfg.heartbeat_ms;
    node_start(s, 0, 1, -1);
    for (unsigned i = 1; i < s->n; i++) {
        sim_run_until(s, s->now + 20);
        node_start(s, i, 1, (int)(splitmix(&s->rng) % i));
    }
    t = run_until_converged(s, s->now + 20 * T);
    assert_true(t != UINT64_MAX);
    return t;
}

static unsigned random_live(sim_t *s, int except)
{
    for (;;) {
        unsigned i = (unsigned)(splitmix(&s->rng) % s->n);
        if (s->nodes[i].up && (int)i != except) return i;
    }
}

static gossip_state_t state_of(sim_t *s, unsigned obs, unsigned subj)
{
    const gossip_peer_t *p = gossip_find(s->nodes[obs].g, s->nodes[subj].id);
    return p ? p->state : (gossip_state_t)-1;
}

static bool all_see(sim_t *s, unsigned subj, gossip_state_t st)
{
    for (unsigned i = 0; i < s->n; i++)
        if (s->nodes[i].up && i != subj && state_of(s, i, subj) != st) return false;
    return true;
}

/* The node whose id follows i's on the ring (among live nodes, or all when `all`). */
static unsigned ring_successor(sim_t *s, unsigned i, bool all)
{
    int best = -1, first = -1;
    for (unsigned j = 0; j < s->n; j++) {
        if ((!all && !s->nodes[j].up) || j == i) continue;
        if (first < 0 || strcmp(s->nodes[j].id, s->nodes[first].id) < 0) first = (int)j;
        if (strcmp(s->nodes[j].id, s->nodes[i].id) > 0 &&
            (best < 0 || strcmp(s->nodes[j].id, s->nodes[best].id) < 0))
            best = (int)j;
    }
    return (unsigned)(best >= 0 ? best : first);
}

/* Mean hb+ack+update messages per live node per heartbeat over `beats` heartbeats, and the
 * largest per-node figure. */
static double traffic(sim_t *s, unsigned beats, double *max_node)
{
    uint64_t before[MAXN], total = 0;
    unsigned live = 0;
    *max_node = 0;
    for (unsigned i = 0; i < s->n; i++)
        before[i] = s->nodes[i].up ? gossip_stats(s->nodes[i].g)->sent_hb : 0;
    sim_run_until(s, s->now + beats * s->cfg.heartbeat_ms);
    for (unsigned i = 0; i < s->n; i++) {
        double d;
        if (!s->nodes[i].up) continue;
        d = (double)(gossip_stats(s->nodes[i].g)->sent_hb - before[i]) / beats;
        total += gossip_stats(s->nodes[i].g)->sent_hb - before[i];
        if (d > *max_node) *max_node = d;
        live++;
    }
    return (double)total / live / beats;
}

/* =============================================================================================
 * Simulation tests
 * =========================================================================================== */

#define HB 1000

/* Steady-state traffic of a converged sim, printed and checked against 3 * fanout + 2. */
static double check_traffic(sim_t *s, unsigned beats)
{
    double mx, per, bound = 3.0 * s->cfg.fanout + 2;
    per = traffic(s, beats, &mx);
    printf("[ gossip ] N=%u: %.2f hb/ack/update messages per node per heartbeat (max node %.2f, "
           "bound %.0f)\n",
           s->n, per, mx, bound);
    assert_true(per <= bound);
    assert_true(mx <= bound);
    assert_true(converged(s)); /* nothing changed while measuring */
    return per;
}

static void test_sim_lifecycle(void **state)
{
    sim_t *s = sim_new(100, 7, HB), *small;
    const unsigned victim = 3;
    unsigned leaver = 8;
    uint64_t T, P, D = s->dmax, tk, t, worst, bound;
    uint64_t old_inc, tr, tl, sum = 0;
    unsigned cnt = 0, i, r, replayed = 0, buddy;
    double per20, per100;
    (void)state;

    /* dead records stop being gossiped after 8 beats: the replay below outlasts that */
    s->cfg.dead_retry_beats = 8;
    T = s->cfg.heartbeat_ms;
    P = s->cfg.probe_ms;
    s->capture_victim = victim;
    s->capture_skip = buddy = ring_successor(s, victim, true); /* killed too, later */
    t = sim_boot(s);
    printf("[ gossip ] N=100: converged %llu ms after the last join\n",
           (unsigned long long)(t - 20 * 99));
    sim_run_until(s, s->now + T);

    /* --- traffic is O(fanout), not O(N): the same per node at N=20 and N=100 */
    small = sim_new(20, 8, HB);
    t = sim_boot(small);
    printf("[ gossip ] N=20: converged %llu ms after the last join\n",
           (unsigned long long)(t - 20 * 19));
    sim_run_until(small, small->now + T);
    per20 = check_traffic(small, 10);
    sim_free(small);
    per100 = check_traffic(s, 10);
    assert_true(per100 <= per20 * 1.2 + 0.2);

    /* an announcement change propagates to everyone (directly, or via digests when lost) */
    t = s->now;
    gossip_set_announcement(s->nodes[victim].g, json_pack("{s:s}", "serving", "qwen"), s->now);
    assert_true(run_until_converged(s, t + 2 * T) != UINT64_MAX);
    for (i = 0; i < s->n; i++) {
        const gossip_peer_t *p;
        if (i == victim) continue;
        p = gossip_find(s->nodes[i].g, s->nodes[victim].id);
        assert_string_equal(json_string_value(json_object_get(p->ann, "serving")), "qwen");
    }
    printf("[ gossip ] announcement update reached all 99 peers in %llu ms\n",
           (unsigned long long)(s->now - t));
    s->capture_victim = -1;
    assert_non_null(s->caps[C_SYNC].payload);
    assert_non_null(s->caps[C_HB3].payload);
    assert_non_null(s->caps[C_OWN_HB].payload);
    assert_non_null(s->caps[C_OWN_UPDATE].payload);

    /* --- kill the victim and its ring successor at once (so the victim has one live monitor
     * left): everyone declares both dead within 2.25 T + probe (the monitor), + the peer_down
     * and the receiver's own probe, + message delays (peer_down, forwarded peer_down, last hb) */
    old_inc = gossip_incarnation(s->nodes[victim].g);
    assert_int_equal(buddy, ring_successor(s, victim, false));
    tk = s->now;
    node_kill(s, victim);
    node_kill(s, buddy);
    bound = T * 9 / 4 + 2 * P + 3 * D;
    while (!(all_see(s, victim, GOSSIP_DEAD) && all_see(s, buddy, GOSSIP_DEAD)) &&
           s->now < tk + 10 * T)
        sim_run_until(s, s->now + 5);
    worst = 0;
    for (i = 0; i < s->n; i++) {
        if (i == victim || i == buddy) continue;
        for (unsigned k = 0; k < 2; k++) {
            unsigned x = k ? buddy : victim;
            assert_int_equal(state_of(s, i, x), GOSSIP_DEAD);
            assert_true(s->dead_at[i][x] >= tk);
            if (s->dead_at[i][x] - tk > worst) worst = s->dead_at[i][x] - tk;
            sum += s->dead_at[i][x] - tk;
            cnt++;
        }
    }
    printf("[ gossip ] kill (2 ring neighbours): worst detection %llu ms, mean %llu ms (bound "
           "2.25T+2probe+3maxdelay = %llu ms)\n",
           (unsigned long long)worst, (unsigned long long)(sum / cnt), (unsigned long long)bound);
    assert_true(worst <= bound);
    sim_run_until(s, s->now + 2 * T);
    assert_true(converged(s)); /* and nobody else was dropped */

    /* the third-party captures come from live senders at their current incarnation, so the
     * receivers really look at the announcement inside (not dismissed as from an old sender) */
    for (int c = C_SYNC; c <= C_HB3; c++) {
        capture_t *cp = &s->caps[c];
        json_t *m = cp->payload ? json_loads(cp->payload, 0, NULL) : NULL;
        if (!m) continue;
        assert_true(s->nodes[cp->from].up);
        assert_int_equal(json_integer_value(json_object_get(m, "inc")),
                         gossip_incarnation(s->nodes[cp->from].g));
        json_decref(m);
    }

    /* --- stale gossip: replay old messages carrying the dead node's announcement for 12
     * heartbeats (beyond the 8 during which its dead record is gossiped), to random nodes; it
     * must stay dead everywhere */
    for (r = 0; r < 120; r++) {
        for (int c = 0; c < NCAP; c++) {
            capture_t *cp = &s->caps[c];
            sev_t e = {.kind = EV_DELIVER, .t = s->now + 1};
            if (!cp->payload || (cp->from != victim && !s->nodes[cp->from].up)) continue;
            e.from = cp->from;
            e.to = random_live(s, (int)cp->from);
            e.payload = payload_new(strdup(cp->payload));
            heap_push(s, e);
            replayed++;
        }
        sim_run_until(s, s->now + T / 10);
        assert_true(all_see(s, victim, GOSSIP_DEAD));
    }
    for (i = 0; i < s->n; i++)
        assert_true(i == victim || !s->nodes[i].up || s->up_at[i][victim] < tk);
    assert_true(converged(s));
    printf("[ gossip ] stale replay: %u old messages over %u heartbeats, no resurrection\n",
           replayed, r / 10);

    /* --- restart with a higher incarnation: accepted by all, promptly */
    tr = s->now;
    node_start(s, victim, old_inc + 1, (int)random_live(s, victim));
    while (!all_see(s, victim, GOSSIP_ALIVE) && s->now < tr + 10 * T)
        sim_run_until(s, s->now + 5);
    assert_true(all_see(s, victim, GOSSIP_ALIVE));
    worst = sum = cnt = 0;
    for (i = 0; i < s->n; i++) {
        if (i == victim || !s->nodes[i].up) continue;
        assert_true(s->up_at[i][victim] >= tr);
        if (s->up_at[i][victim] - tr > worst) worst = s->up_at[i][victim] - tr;
        sum += s->up_at[i][victim] - tr;
        cnt++;
    }
    printf("[ gossip ] restart: accepted by all in %llu ms (mean %llu ms, bound 2T+6maxdelay)\n",
           (unsigned long long)worst, (unsigned long long)(sum / cnt));
    assert_true(worst <= 2 * T + 6 * D);
    assert_true(run_until_converged(s, s->now + 3 * T) != UINT64_MAX);

    /* --- clean leave: all mark it LEFT within a few message delays */
    if (!s->nodes[leaver].up) leaver = random_live(s, victim);
    tl = s->now;
    gossip_leave(s->nodes[leaver].g, s->now);
    node_kill(s, leaver);
    sim_run_until(s, s->now + 4 * D);
    assert_true(all_see(s, leaver, GOSSIP_LEFT));
    worst = 0;
    for (i = 0; i < s->n; i++)
        if (i != leaver && s->nodes[i].up && s->left_at[i][leaver] - tl > worst)
            worst = s->left_at[i][leaver] - tl;
    printf("[ gossip ] leave: all marked it LEFT within %llu ms (bound 4 maxdelay = %llu)\n",
           (unsigned long long)worst, (unsigned long long)(4 * D));
    sim_run_until(s, s->now + 2 * T);
    assert_true(converged(s));
    for (i = 0; i < s->n; i++)
        assert_true(i == leaver || !s->nodes[i].up || state_of(s, i, leaver) == GOSSIP_LEFT);
    sim_free(s);
}

static bool sides_split(sim_t *s)
{
    for (unsigned i = 0; i < s->n; i++)
        for (unsigned j = 0; j < s->n; j++)
            if (s->nodes[i].group != s->nodes[j].group && state_of(s, i, j) == GOSSIP_ALIVE)
                return false;
    return true;
}

static void test_sim_partition_heals(void **state)
{
    sim_t *s = sim_new(100, 99, HB);
    uint64_t T = s->cfg.heartbeat_ms, tp, th, t;
    unsigned a = 0;
    (void)state;
    sim_boot(s);
    sim_run_until(s, s->now + 2 * T);
    for (unsigned i = 0; i < s->n; i++)
        a += (s->nodes[i].group = (int)(splitmix(&s->rng) & 1));
    assert_true(a > 0 && a < s->n);
    tp = s->now;
    s->partition = true;
    while (!sides_split(s) && s->now < tp + 25 * T)
        sim_run_until(s, s->now + 50);
    assert_true(sides_split(s));
    printf("[ gossip ] partition %u/%u: each side declared the other dead after %llu ms\n", a,
           s->n - a, (unsigned long long)(s->now - tp));
    /* each side stays consistent within itself */
    for (unsigned i = 0; i < s->n; i++) {
        unsigned same = 0;
        for (unsigned j = 0; j < s->n; j++)
            same += s->nodes[j].group == s->nodes[i].group;
        assert_int_equal(gossip_alive_count(s->nodes[i].g), same - 1);
    }
    th = s->now;
    s->partition = false;
    /* within a heartbeat every node has sent an hb across (to a peer it declared dead); the two
     * ends refute each other at once and the new incarnations spread by digest */
    t = run_until_converged(s, th + 3 * T);
    assert_true(t != UINT64_MAX);
    printf("[ gossip ] partition healed: full membership again %llu ms after the heal (bound "
           "3 heartbeats)\n",
           (unsigned long long)(t - th));
    sim_run_until(s, s->now + 2 * T);
    assert_true(converged(s));
    sim_free(s);
}

/* Four ring neighbours die at once: the last two are monitored by live nodes, the first two only
 * by the dead — the live monitor pings the ones beyond its predecessors when it suspects them,
 * so all four are declared dead within the bound of a single failure. */
static void test_sim_adjacent_failures(void **state)
{
    sim_t *s = sim_new(100, 31, HB);
    uint64_t T = s->cfg.heartbeat_ms, P = s->cfg.probe_ms, D = s->dmax, tk, worst = 0, bound;
    unsigned v[4], i, k;
    (void)state;
    sim_boot(s);
    sim_run_until(s, s->now + 2 * T);
    v[0] = 17;
    for (k = 1; k < 4; k++)
        v[k] = ring_successor(s, v[k - 1], true);
    tk = s->now;
    for (k = 0; k < 4; k++)
        node_kill(s, v[k]);
    bound = T * 9 / 4 + 2 * P + 3 * D;
    for (;;) {
        bool all = true;
        for (k = 0; k < 4; k++)
            all &= all_see(s, v[k], GOSSIP_DEAD);
        if (all || s->now > tk + 10 * T) break;
        sim_run_until(s, s->now + 5);
    }
    for (i = 0; i < s->n; i++) {
        if (!s->nodes[i].up) continue;
        for (k = 0; k < 4; k++) {
            assert_int_equal(state_of(s, i, v[k]), GOSSIP_DEAD);
            if (s->dead_at[i][v[k]] - tk > worst) worst = s->dead_at[i][v[k]] - tk;
        }
    }
    printf("[ gossip ] kill (4 adjacent ring nodes): worst detection %llu ms (single-failure "
           "bound %llu ms)\n",
           (unsigned long long)worst, (unsigned long long)bound);
    assert_true(worst <= bound);
    sim_run_until(s, s->now + 2 * T);
    assert_true(converged(s));
    sim_free(s);
}

/* gossip_suspect (a tunnel stream to the peer failed): a live peer answers the probe and stays;
 * a dead one is declared dead within a probe time, long before its monitors would notice. */
static void test_sim_suspect(void **state)
{
    sim_t *s = sim_new(20, 5, HB);
    uint64_t P = s->cfg.probe_ms, D = s->dmax, t;
    unsigned obs = 2, live = 9, gone = 12;
    (void)state;
    sim_boot(s);
    sim_run_until(s, s->now + 2 * s->cfg.heartbeat_ms);
    gossip_suspect(s->nodes[obs].g, s->nodes[live].id, s->now);
    sim_run_until(s, s->now + P + 3 * D);
    assert_int_equal(state_of(s, obs, live), GOSSIP_ALIVE);
    node_kill(s, gone);
    t = s->now;
    gossip_suspect(s->nodes[obs].g, s->nodes[gone].id, s->now);
    while (state_of(s, obs, gone) != GOSSIP_DEAD && s->now < t + 5 * s->cfg.heartbeat_ms)
        sim_run_until(s, s->now + 5);
    assert_int_equal(state_of(s, obs, gone), GOSSIP_DEAD);
    printf("[ gossip ] suspected after a failed stream: declared dead in %llu ms (probe %llu)\n",
           (unsigned long long)(s->dead_at[obs][gone] - t), (unsigned long long)P);
    assert_true(s->dead_at[obs][gone] - t <= P + 2 * D);
    sim_free(s);
}

/* Default timings (docs/timings.md), 100 nodes at the default heartbeat (60 s): the node that
 * talks to a killed peer finds it silent at the transport's liveness bound (2 s: gossip_silent)
 * and the whole mesh agrees within 5 s of the kill (the others confirm with their own probe,
 * GOSSIP_PROBE_MAX_MS); a live peer that one node alone finds silent (a slow path) is never
 * declared dead by the others and is alive again at that node once it refutes. Prints the
 * steady gossip cost in messages per node per second. */
static void test_sim_default_timings(void **state)
{
    enum { LIVE_MS = 2000 };
    sim_t *s = sim_new(100, 13, 0); /* 0: the defaults */
    const unsigned victim = 5, obs = 40, slow = 17, obs2 = 60;
    uint64_t T = s->cfg.heartbeat_ms, P = s->cfg.probe_ms, D = s->dmax, tk, worst = 0, t;
    double mx, per;
    (void)state;
    assert_int_equal(T, 60000);
    assert_int_equal(P, GOSSIP_PROBE_MAX_MS);
    sim_boot(s);
    sim_run_until(s, s->now + T);
    per = traffic(s, 5, &mx);
    printf("[ gossip ] N=100, default heartbeat %llu ms: %.3f messages per node per second "
           "(max node %.3f)\n",
           (unsigned long long)T, per * 1000 / T, mx * 1000 / T);
    assert_true(mx <= 3.0 * s->cfg.fanout + 2);

    /* kill -9: obs had a stream open to the victim; its transport finds it silent at LIVE_MS */
    tk = s->now;
    node_kill(s, victim);
    sim_run_until(s, tk + LIVE_MS);
    gossip_silent(s->nodes[obs].g, s->nodes[victim].id, s->now);
    reschedule(s, &s->nodes[obs]);
    while (!all_see(s, victim, GOSSIP_DEAD) && s->now < tk + 10 * T)
        sim_run_until(s, s->now + 5);
    assert_true(all_see(s, victim, GOSSIP_DEAD));
    for (unsigned i = 0; i < s->n; i++)
        if (i != victim && s->dead_at[i][victim] - tk > worst) worst = s->dead_at[i][victim] - tk;
    printf("[ gossip ] kill -9 seen by a node talking to it at %u ms: dead at that node at %llu "
           "ms, everywhere within %llu ms (bound 5000)\n",
           LIVE_MS, (unsigned long long)(s->dead_at[obs][victim] - tk), (unsigned long long)worst);
    assert_true(s->dead_at[obs][victim] - tk <= LIVE_MS + D);
    assert_true(worst <= 5000);

    /* a slow path: obs2 alone finds `slow` silent; everyone else hears it */
    t = s->now;
    gossip_silent(s->nodes[obs2].g, s->nodes[slow].id, s->now);
    reschedule(s, &s->nodes[obs2]);
    sim_run_until(s, t + 2 * P + 10 * D);
    for (unsigned i = 0; i < s->n; i++) {
        if (i == victim || i == slow) continue;
        assert_int_equal(state_of(s, i, slow), GOSSIP_ALIVE);
        if (i != obs2) assert_true(s->dead_at[i][slow] == 0); /* never, anywhere else */
    }
    assert_true(s->dead_at[obs2][slow] >= t); /* suspected there, then refuted */
    printf("[ gossip ] a live node found silent by one peer: dead nowhere else, alive again "
           "there %llu ms later\n",
           (unsigned long long)(s->up_at[obs2][slow] - t));
    sim_free(s);
}

/* A node cut off from everyone (messages to and from it dropped) is declared dead; both sides
 * refute when it comes back (dead_notice path end to end). */
static void test_sim_dead_notice_rejoin(void **state)
{
    sim_t *s = sim_new(5, 5, HB);
    uint64_t T = s->cfg.heartbeat_ms, inc;
    (void)state;
    s->loss_bp = 0;
    sim_boot(s);
    inc = gossip_incarnation(s->nodes[2].g);
    s->nodes[2].group = 1;
    s->partition = true;
    sim_run_until(s, s->now + 6 * T);
    assert_true(all_see(s, 2, GOSSIP_DEAD));
    assert_int_equal(gossip_alive_count(s->nodes[2].g), 0);
    s->partition = false;
    assert_true(run_until_converged(s, s->now + 5 * T) != UINT64_MAX);
    assert_true(s->sent_by_type[9] > 0); /* dead_notice */
    assert_true(gossip_incarnation(s->nodes[2].g) > inc);
    assert_true(gossip_stats(s->nodes[2].g)->refutations >= 1);
    sim_free(s);
}

/* =============================================================================================
 * Focused unit tests with a recording I/O
 * =========================================================================================== */

typedef struct {
    char to[GOSSIP_ID_LEN + 1];
    char *text;
} sent_t;

typedef struct {
    sent_t sent[64];
    unsigned nsent;
    gossip_t *reenter; /* when set, every ping sent reports its target unreachable at once */
    unsigned nev[GOSSIP_EV_FORGOTTEN + 1];
    char ev_id[GOSSIP_EV_FORGOTTEN + 1][GOSSIP_ID_LEN + 1];
    uint64_t rng;
    uint64_t wall;     /* the wall clock it reports */
    const uint8_t *sk; /* the key it signs with */
} rec_t;

static void rec_send(void *data, const char *to, json_t *msg)
{
    rec_t *r = data;
    assert_true(r->nsent < 64);
    memcpy(r->sent[r->nsent].to, to, GOSSIP_ID_LEN + 1);
    r->sent[r->nsent++].text = json_dumps(msg, JSON_COMPACT | JSON_SORT_KEYS);
    if (r->reenter && !strcmp(json_string_value(json_object_get(msg, "type")), "ping"))
        gossip_unreachable(r->reenter, to, 0);
}

static void rec_event(void *data, gossip_event_t ev, const gossip_peer_t *p)
{
    rec_t *r = data;
    r->nev[ev]++;
    memcpy(r->ev_id[ev], p->id, GOSSIP_ID_LEN + 1);
}

static uint64_t rec_random(void *data)
{
    return splitmix(&((rec_t *)data)->rng);
}

static char ID_A[65], ID_B[65], ID_C[65], ID_D[65];
static uint8_t SK_A[64], SK_B[64], SK_C[64], SK_D[64];

static void rec_sign(void *data, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(((rec_t *)data)->sk, msg, len, sig);
}

static uint64_t rec_wall(void *data)
{
    return ((rec_t *)data)->wall;
}

#define WALL 1000000 /* the recording node's wall clock (ms) */
#define FUTURE (WALL + GOSSIP_MAX_AHEAD_MS + 1)

static void rec_clear(rec_t *r)
{
    for (unsigned i = 0; i < r->nsent; i++)
        free(r->sent[i].text);
    r->nsent = 0;
    memset(r->nev, 0, sizeof r->nev);
}

static void make_ids(void)
{
    uint64_t seed = 1234;
    make_key(&seed, ID_A, SK_A);
    make_key(&seed, ID_B, SK_B);
    make_key(&seed, ID_C, SK_C);
    make_key(&seed, ID_D, SK_D);
}

static const uint8_t *key_of(const char *id)
{
    return !strcmp(id, ID_A)   ? SK_A
           : !strcmp(id, ID_B) ? SK_B
           : !strcmp(id, ID_C) ? SK_C
           : !strcmp(id, ID_D) ? SK_D
                               : NULL;
}

static void sign_with(void *data, const uint8_t *msg, size_t len, uint8_t sig[64])
{
    identity_sign(data, msg, len, sig);
}

/* The compact JSON of announcement {id, incarnation, seq, <extra fields>} signed by `signer`'s
 * key (normally its own). Returned from a ring of static buffers: valid for a few calls. */
static const char *ann_by(const char *signer, const char *id, uint64_t inc, uint64_t seq,
                          const char *extra)
{
    static char ring_buf[8][4096];
    static unsigned k;
    char tmp[4096], *out = ring_buf[k++ % 8], *js;
    json_t *a;
    snprintf(tmp, sizeof tmp, "{\"id\":\"%s\",\"incarnation\":%llu,\"seq\":%llu%s%s}", id,
             (unsigned long long)inc, (unsigned long long)seq, extra ? "," : "",
             extra ? extra : "");
    a = json_loads(tmp, 0, NULL);
    assert_non_null(a);
    assert_int_equal(gmsg_ann_sign(a, sign_with, (void *)key_of(signer)), 0);
    js = json_dumps(a, JSON_COMPACT);
    assert_true(strlen(js) < sizeof ring_buf[0]);
    strcpy(out, js);
    free(js);
    json_decref(a);
    return out;
}

static const char *ann(const char *id, uint64_t inc, uint64_t seq, const char *extra)
{
    return ann_by(id, id, inc, seq, extra);
}

/* `signer`'s signature (hex) of id's leave at inc */
static const char *leave_sig_by(const char *signer, const char *id, uint64_t inc)
{
    static char ring_buf[4][GMSG_SIG_HEX + 1];
    static unsigned k;
    char *out = ring_buf[k++ % 4];
    size_t len = 0;
    char *b = gmsg_leave_bytes(id, inc, &len);
    assert_non_null(b);
    gmsg_sign_hex(sign_with, (void *)key_of(signer), b, len, out);
    free(b);
    return out;
}

/* A recording node with id `id` (one of ID_A..ID_D) at incarnation inc. */
static gossip_t *rec_new_as(rec_t *r, const char *id, uint64_t inc, uint64_t now)
{
    gossip_cfg_t cfg;
    gossip_io_t io = {.data = r,
                      .send = rec_send,
                      .event = rec_event,
                      .random = rec_random,
                      .sign = rec_sign,
                      .wall_ms = rec_wall};
    memset(r, 0, sizeof *r);
    r->rng = 77;
    r->wall = WALL;
    r->sk = key_of(id);
    gossip_cfg_default(&cfg, HB);
    return gossip_new(id, inc, json_pack("{s:s}", "role", "host"), &cfg, &io, now);
}

static gossip_t *rec_new(rec_t *r, uint64_t now)
{
    make_ids();
    return rec_new_as(r, ID_A, 1, now);
}

static int recv_str(gossip_t *g, const char *from, const char *text, uint64_t now)
{
    json_error_t err;
    json_t *m = json_loads(text, JSON_DECODE_ANY, &err);
    int rc;
    if (!m) fail_msg("bad test JSON: %s: %s", err.text, text);
    rc = gossip_receive(g, from, m, now);
    json_decref(m);
    return rc;
}

static int recvf(gossip_t *g, const char *from, uint64_t now, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int recvf(gossip_t *g, const char *from, uint64_t now, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return recv_str(g, from, buf, now);
}

static void hello(gossip_t *g, const char *id, uint64_t inc, uint64_t now)
{
    assert_int_equal(recvf(g, id, now, "{\"v\":1,\"type\":\"hello\",\"inc\":%llu,\"ann\":%s}",
                           (unsigned long long)inc, ann(id, inc, 0, NULL)),
                     0);
}

/* A knows B alive (inc 1), C dead (inc 3). */
static gossip_t *setup_abc(rec_t *r)
{
    gossip_t *g = rec_new(r, 0);
    assert_non_null(g);
    hello(g, ID_B, 1, 10);
    hello(g, ID_C, 3, 10);
    assert_int_equal(
        recvf(g, ID_B, 20,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",3,\"dead\"]]}", ID_C),
        0);
    assert_true(gossip_find(g, ID_C)->probing);
    gossip_unreachable(g, ID_C, 30);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE); /* at the next tick, due now */
    assert_int_equal(gossip_next_deadline(g), 0);
    gossip_tick(g, 30);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_DEAD);
    assert_int_equal(gossip_find(g, ID_B)->state, GOSSIP_ALIVE);
    rec_clear(r);
    return g;
}

typedef struct {
    uint64_t inc, seq;
    size_t n;
    gossip_peer_t peers[8];
    char *ann[8];
    gossip_stats_t st;
} snap_t;

static void snap(gossip_t *g, snap_t *s)
{
    memset(s, 0, sizeof *s);
    s->inc = gossip_incarnation(g);
    s->seq = (uint64_t)json_integer_value(json_object_get(gossip_self(g), "seq"));
    s->n = gossip_peer_count(g);
    assert_true(s->n <= 8);
    for (size_t i = 0; i < s->n; i++) {
        s->peers[i] = *gossip_peer_at(g, i);
        s->ann[i] = s->peers[i].ann ? json_dumps(s->peers[i].ann, JSON_SORT_KEYS) : NULL;
        s->peers[i].ann = NULL;
    }
    s->st = *gossip_stats(g);
    s->st.received = s->st.rejected = 0;
}

static void snap_free(snap_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->ann[i]);
}

/* Copy a template with $A $B $D replaced by the ids, $b by B's id cut to 63 chars, $W by D's
 * valid signed announcement (incarnation 1, seq 0), $S by a well-formed but wrong signature, $s
 * by one a character short, $U by one in upper case. */
static void subst(char *out, size_t cap, const char *tpl)
{
    static const char sig[] = "abababababababababababababababababababababababababababababababab"
                              "abababababababababababababababababababababababababababababababab";
    static const char usig[] = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
                               "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB";
    size_t n = 0;
    for (; *tpl; tpl++) {
        const char *rp = NULL;
        size_t len = GOSSIP_ID_LEN;
        if (*tpl == '$' && tpl[1]) {
            switch (*++tpl) {
            case 'A':
                rp = ID_A;
                break;
            case 'B':
                rp = ID_B;
                break;
            case 'D':
                rp = ID_D;
                break;
            case 'b':
                rp = ID_B, len = GOSSIP_ID_LEN - 1;
                break;
            case 'W':
                rp = ann(ID_D, 1, 0, NULL), len = strlen(rp);
                break;
            case 'S':
                rp = sig, len = GMSG_SIG_HEX;
                break;
            case 's':
                rp = sig, len = GMSG_SIG_HEX - 1;
                break;
            case 'U':
                rp = usig, len = GMSG_SIG_HEX;
                break;
            default:
                fail_msg("bad template %s", tpl);
            }
        } else {
            rp = tpl, len = 1;
        }
        if (n + len >= cap) fail_msg("template too long");
        memcpy(out + n, rp, len);
        n += len;
    }
    out[n] = '\0';
}

static void test_malformed_rejected(void **state)
{
    rec_t r;
    gossip_t *g = setup_abc(&r);
    char big[200000], *p;
    snap_t before, after;
    (void)state;

    const char *bad[] = {
        "[]",
        "\"hb\"",
        "{\"type\":\"hb\",\"inc\":1,\"digest\":[]}",
        "{\"v\":2,\"type\":\"hb\",\"inc\":1,\"digest\":[]}",
        "{\"v\":\"1\",\"type\":\"hb\",\"inc\":1,\"digest\":[]}",
        "{\"v\":1,\"inc\":1,\"digest\":[]}",
        "{\"v\":1,\"type\":5,\"inc\":1,\"digest\":[]}",
        "{\"v\":1,\"type\":\"bogus\",\"inc\":1}",
        "{\"v\":1,\"type\":\"hb\",\"digest\":[]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":-1,\"digest\":[]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1.5,\"digest\":[]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":\"x\"}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"$B\",1]]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"$B\",1,0],[\"$B\",1,-2]]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"$B\",1,0],[\"ABCDEF\",1,0]]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"$b\",1,0]]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"$bG\",1,0]]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"$B0\",1,0]]}",
        "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[7,1,0]]}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":{}}",
        /* the first announcement is valid and new: nothing may be applied */
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[$W,{\"id\":\"$B\",\"seq\":3,"
        "\"sig\":\"$S\"}]}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[$W,{\"id\":\"$B\",\"incarnation\":"
        "\"2\",\"seq\":3,\"sig\":\"$S\"}]}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[$W,[1,2]]}",
        "{\"v\":1,\"type\":\"sync\",\"inc\":1,\"anns\":[$W],\"dead\":[[\"$B\",1,\"gone\"]]}",
        /* unsigned, or a signature that is not 128 lowercase hex chars */
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[$W,{\"id\":\"$B\",\"incarnation\":1,"
        "\"seq\":3}]}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[{\"id\":\"$B\",\"incarnation\":1,"
        "\"seq\":3,\"sig\":\"$s\"}]}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[{\"id\":\"$B\",\"incarnation\":1,"
        "\"seq\":3,\"sig\":\"$U\"}]}",
        "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[{\"id\":\"$B\",\"incarnation\":1,"
        "\"seq\":3,\"sig\":5}]}",
        "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"ann\":{\"id\":\"$B\",\"incarnation\":1,"
        "\"seq\":3}}",
        "{\"v\":1,\"type\":\"leaving\",\"inc\":1}",
        "{\"v\":1,\"type\":\"leaving\",\"inc\":1,\"sig\":\"$s\"}",
        "{\"v\":1,\"type\":\"leaving\",\"inc\":1,\"sig\":[\"$S\"]}",
        "{\"v\":1,\"type\":\"hello\",\"inc\":1}",
        "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"ann\":{\"id\":\"$D\",\"incarnation\":1,"
        "\"seq\":0,\"sig\":\"$S\"}}",
        "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"ann\":{\"id\":\"$B\",\"incarnation\":2,"
        "\"seq\":0,\"sig\":\"$S\"}}",
        "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"join\":\"yes\",\"ann\":{\"id\":\"$B\","
        "\"incarnation\":1,\"seq\":0,\"sig\":\"$S\"}}",
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1}",
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"$D\",1]]}",
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"$D\",1,\"dead\",1]]}",
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"$D\",-1,\"dead\"]]}",
        /* a signature only on a "left" record, well-formed, and nothing after it */
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"$D\",1,\"dead\",\"$S\"]]}",
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"$D\",1,\"left\",\"x\"]]}",
        "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"$D\",1,\"left\",\"$S\",1]]}",
        "{\"v\":1,\"type\":\"dead_notice\",\"inc\":1,\"dead\":\"x\"}",
        "{\"v\":1,\"type\":\"ack\",\"inc\":1,\"want\":[\"$D\",3]}",
        "{\"v\":1,\"type\":\"ack\",\"inc\":1,\"want\":\"$D\"}",
        "{\"v\":1,\"type\":\"ping\",\"inc\":1,\"dead\":[[\"$A\",1,\"dead\"],[\"$D\",1,7]]}",
    };
    char buf[4096];

    snap(g, &before);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        subst(buf, sizeof buf, bad[i]);
        if (recv_str(g, ID_B, buf, 100) != -EINVAL) fail_msg("accepted: %s", buf);
    }
    /* bad sender ids */
    snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"ping\",\"inc\":1}");
    assert_int_equal(recv_str(g, "B", buf, 100), -EINVAL);
    assert_int_equal(recv_str(g, ID_A, buf, 100), -EINVAL);
    big[0] = 0;
    {
        json_t *o = json_object();
        assert_int_equal(gossip_receive(g, NULL, o, 100), -EINVAL);
        json_decref(o);
    }
    assert_int_equal(gossip_receive(g, ID_B, NULL, 100), -EINVAL);
    /* a sender's incarnation more than a day past our wall clock */
    assert_int_equal(
        recvf(g, ID_B, 100, "{\"v\":1,\"type\":\"ping\",\"inc\":%llu}", (unsigned long long)FUTURE),
        -EINVAL);
    /* arrays beyond GOSSIP_MAX_PEERS + 1 entries */
    p = big + sprintf(big, "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[");
    for (int i = 0; i < 2000; i++)
        p += sprintf(p, "[\"%s\",1,1],", ID_D);
    strcpy(p - 1, "]}");
    assert_int_equal(recv_str(g, ID_B, big, 100), -EINVAL);
    p = big + sprintf(big, "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[");
    for (int i = 0; i < 2000; i++)
        p += sprintf(p, "[\"%s\",1,\"dead\"],", ID_D);
    strcpy(p - 1, "]}");
    assert_int_equal(recv_str(g, ID_B, big, 100), -EINVAL);
    p = big + sprintf(big, "{\"v\":1,\"type\":\"ack\",\"inc\":1,\"want\":[");
    for (int i = 0; i < 2000; i++)
        p += sprintf(p, "\"%s\",", ID_D);
    strcpy(p - 1, "]}");
    assert_int_equal(recv_str(g, ID_B, big, 100), -EINVAL);

    snap(g, &after);
    assert_int_equal(after.inc, before.inc);
    assert_int_equal(after.seq, before.seq);
    assert_int_equal(after.n, before.n);
    for (size_t i = 0; i < after.n; i++) {
        const gossip_peer_t *x = &after.peers[i], *y = &before.peers[i];
        assert_string_equal(x->id, y->id);
        assert_int_equal(x->inc, y->inc);
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->state, y->state);
        assert_int_equal(x->last_direct, y->last_direct);
        assert_int_equal(x->changed_at, y->changed_at);
        assert_int_equal(x->probing, y->probing);
        if (before.ann[i]) assert_string_equal(after.ann[i], before.ann[i]);
    }
    assert_memory_equal(&after.st, &before.st, sizeof after.st);
    assert_int_equal(r.nsent, 0);
    assert_int_equal(r.nev[0] + r.nev[1] + r.nev[2] + r.nev[3], 0);
    assert_int_equal(gossip_stats(g)->rejected, sizeof bad / sizeof bad[0] + 8);
    assert_null(gossip_find(g, ID_D));

    /* the same shapes, well-formed, are accepted */
    assert_int_equal(recvf(g, ID_B, 100, "{\"v\":1,\"type\":\"ping\",\"inc\":1,\"x\":[1]}"), 0);
    snap_free(&before);
    snap_free(&after);
    rec_clear(&r);
    gossip_free(g);
}

static json_t *sent_json(rec_t *r, unsigned i)
{
    json_t *m = json_loads(r->sent[i].text, 0, NULL);
    assert_non_null(m);
    return m;
}

static const char *sent_type(rec_t *r, unsigned i, char *buf)
{
    json_t *m = sent_json(r, i);
    snprintf(buf, 32, "%s", json_string_value(json_object_get(m, "type")));
    json_decref(m);
    return buf;
}

static void test_refutation(void **state)
{
    rec_t r;
    gossip_t *g = setup_abc(&r);
    char t[32];
    json_t *m;
    (void)state;

    /* told it is dead at its incarnation: bumps it and tells every live peer (B) */
    assert_int_equal(
        recvf(g, ID_B, 100,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"dead\"]]}", ID_A),
        0);
    assert_int_equal(gossip_incarnation(g), 2);
    assert_int_equal(gossip_stats(g)->refutations, 1);
    assert_int_equal(r.nsent, 1);
    assert_string_equal(r.sent[0].to, ID_B);
    assert_string_equal(sent_type(&r, 0, t), "update");
    m = sent_json(&r, 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(json_object_get(m, "anns"), 0), "incarnation")),
                     2);
    json_decref(m);
    assert_int_equal(json_integer_value(json_object_get(gossip_self(g), "incarnation")), 2);
    rec_clear(&r);

    /* the same (now stale) claim again: nothing */
    assert_int_equal(
        recvf(g, ID_B, 110,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"dead\"]]}", ID_A),
        0);
    assert_int_equal(gossip_incarnation(g), 2);
    assert_int_equal(r.nsent, 0);

    /* a dead record about us in ordinary gossip (hb dead list), from C which we hold dead: C
     * gets a dead_notice and nothing else happens */
    assert_int_equal(recvf(g, ID_C, 120,
                           "{\"v\":1,\"type\":\"hb\",\"inc\":3,\"digest\":[[\"%s\",3,0]],\"dead\":["
                           "[\"%s\",2,\"dead\"]]}",
                           ID_C, ID_A),
                     0);
    assert_int_equal(gossip_incarnation(g), 2);
    assert_int_equal(r.nsent, 1);
    assert_string_equal(r.sent[0].to, ID_C);
    assert_string_equal(sent_type(&r, 0, t), "dead_notice");
    m = sent_json(&r, 0);
    assert_string_equal(
        json_string_value(json_array_get(json_array_get(json_object_get(m, "dead"), 0), 0)), ID_C);
    assert_int_equal(
        json_integer_value(json_array_get(json_array_get(json_object_get(m, "dead"), 0), 1)), 3);
    json_decref(m);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_DEAD);
    rec_clear(&r);

    /* a dead_notice from C (dead to us) about us: refute (to B and to C), and never answer a
     * notice with a notice */
    assert_int_equal(
        recvf(g, ID_C, 130,
              "{\"v\":1,\"type\":\"dead_notice\",\"inc\":3,\"dead\":[[\"%s\",2,\"dead\"]]}", ID_A),
        0);
    assert_int_equal(gossip_incarnation(g), 3);
    assert_int_equal(r.nsent, 2);
    for (unsigned i = 0; i < 2; i++)
        assert_string_equal(sent_type(&r, i, t), "update");
    assert_true(!strcmp(r.sent[0].to, ID_C) || !strcmp(r.sent[1].to, ID_C));
    /* the update to C carries our dead record of C, so that C refutes too */
    m = sent_json(&r, strcmp(r.sent[0].to, ID_C) ? 1 : 0);
    assert_string_equal(
        json_string_value(json_array_get(json_array_get(json_object_get(m, "dead"), 0), 0)), ID_C);
    json_decref(m);
    rec_clear(&r);
    gossip_free(g);
}

static void test_higher_incarnation_and_stale(void **state)
{
    rec_t r;
    gossip_t *g = setup_abc(&r);
    char t[32];
    json_t *m;
    (void)state;

    /* third-party announcement of C at the dead incarnation (even a higher seq): ignored, and B
     * is told we hold C dead */
    assert_int_equal(recvf(g, ID_B, 100, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, 3, 9, NULL)),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_DEAD);
    assert_int_equal(r.nev[GOSSIP_EV_UP], 0);
    assert_int_equal(r.nsent, 1);
    assert_string_equal(sent_type(&r, 0, t), "update");
    m = sent_json(&r, 0);
    assert_string_equal(
        json_string_value(json_array_get(json_array_get(json_object_get(m, "dead"), 0), 0)), ID_C);
    json_decref(m);
    rec_clear(&r);
    /* a direct message from C at the old incarnation: dead_notice, C stays dead */
    hello(g, ID_C, 3, 105);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_DEAD);
    assert_int_equal(r.nsent, 1);
    assert_string_equal(sent_type(&r, 0, t), "dead_notice");
    rec_clear(&r);
    /* from an even older incarnation: nothing changes, and C is shown the newer incarnation it
     * signed (its own announcement) with our record of it, so that a live process bumps past */
    hello(g, ID_C, 2, 106);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_DEAD);
    assert_int_equal(gossip_find(g, ID_C)->inc, 3);
    assert_int_equal(r.nsent, 1);
    assert_string_equal(r.sent[0].to, ID_C);
    assert_string_equal(sent_type(&r, 0, t), "update");
    m = sent_json(&r, 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(json_object_get(m, "anns"), 0), "incarnation")),
                     3);
    assert_true(gmsg_ann_verify(json_array_get(json_object_get(m, "anns"), 0), SIZE_MAX));
    assert_int_equal(
        json_integer_value(json_array_get(json_array_get(json_object_get(m, "dead"), 0), 1)), 3);
    json_decref(m);
    rec_clear(&r);

    /* a higher incarnation, from a third party: accepted at once, and we say hello to C */
    assert_int_equal(recvf(g, ID_B, 110, "{\"v\":1,\"type\":\"sync\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, 4, 0, "\"role\":\"worker\"")),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(gossip_find(g, ID_C)->inc, 4);
    assert_int_equal(r.nev[GOSSIP_EV_UP], 1);
    assert_string_equal(r.ev_id[GOSSIP_EV_UP], ID_C);
    assert_int_equal(r.nsent, 1);
    assert_string_equal(r.sent[0].to, ID_C);
    assert_string_equal(sent_type(&r, 0, t), "hello");
    rec_clear(&r);
    /* a newer seq: UPDATED; an older one: nothing */
    assert_int_equal(recvf(g, ID_B, 120, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, 4, 2, "\"role\":\"host\"")),
                     0);
    assert_int_equal(r.nev[GOSSIP_EV_UPDATED], 1);
    assert_int_equal(recvf(g, ID_B, 130, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, 4, 1, "\"role\":\"x\"")),
                     0);
    assert_int_equal(r.nev[GOSSIP_EV_UPDATED], 1);
    assert_string_equal(json_string_value(json_object_get(gossip_find(g, ID_C)->ann, "role")),
                        "host");
    /* a dead record for C's old incarnation: harmless */
    assert_int_equal(
        recvf(g, ID_B, 140,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",3,\"dead\"]]}", ID_C),
        0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_false(gossip_find(g, ID_C)->probing);
    rec_clear(&r);
    gossip_free(g);
}

static void test_dead_claim_is_verified(void **state)
{
    rec_t r;
    gossip_t *g = rec_new(&r, 0);
    char t[32];
    uint64_t probe;
    gossip_cfg_t cfg;
    (void)state;
    gossip_cfg_default(&cfg, HB);
    probe = cfg.probe_ms;
    hello(g, ID_B, 1, 10);
    hello(g, ID_C, 1, 10);
    hello(g, ID_D, 1, 10);
    rec_clear(&r);
    /* B says C is dead: A probes C (the ping shows the claim) and forwards the claim */
    assert_int_equal(
        recvf(g, ID_B, 100,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"dead\"]]}", ID_C),
        0);
    assert_true(gossip_find(g, ID_C)->probing);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_string_equal(r.sent[0].to, ID_C);
    assert_string_equal(sent_type(&r, 0, t), "ping");
    assert_int_equal(gossip_stats(g)->probes, 1);
    assert_true(gossip_next_deadline(g) <= 100 + probe / 2);
    /* C answers: still alive */
    assert_int_equal(recvf(g, ID_C, 150, "{\"v\":1,\"type\":\"pong\",\"inc\":1}"), 0);
    assert_false(gossip_find(g, ID_C)->probing);
    gossip_tick(g, 100 + probe + 1);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(r.nev[GOSSIP_EV_DEAD], 0);
    rec_clear(&r);
    /* D is claimed dead and does not answer: dead after probe_ms (second ping at half) */
    assert_int_equal(
        recvf(g, ID_B, 1000,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"dead\"]]}", ID_D),
        0);
    gossip_tick(g, 1000 + probe / 2);
    assert_int_equal(gossip_find(g, ID_D)->state, GOSSIP_ALIVE);
    gossip_tick(g, 1000 + probe - 1);
    assert_int_equal(gossip_find(g, ID_D)->state, GOSSIP_ALIVE);
    gossip_tick(g, 1000 + probe);
    assert_int_equal(gossip_find(g, ID_D)->state, GOSSIP_DEAD);
    assert_int_equal(r.nev[GOSSIP_EV_DEAD], 1);
    rec_clear(&r);
    /* a clean leave: at once, no probe */
    assert_int_equal(recvf(g, ID_C, 1500, "{\"v\":1,\"type\":\"leaving\",\"inc\":1,\"sig\":\"%s\"}",
                           leave_sig_by(ID_C, ID_C, 1)),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_LEFT);
    assert_int_equal(r.nev[GOSSIP_EV_LEFT], 1);
    assert_int_equal(gossip_alive_count(g), 1);
    rec_clear(&r);
    /* the transport reports a dial failure from inside send(): handled at the next tick */
    r.reenter = g;
    hello(g, ID_D, 2, 2000);
    assert_int_equal(recvf(g, ID_B, 2100,
                           "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",2,"
                           "\"dead\"]]}",
                           ID_D),
                     0);
    assert_true(gossip_find(g, ID_D)->probing);
    assert_int_equal(gossip_next_deadline(g), 0);
    gossip_tick(g, 2100);
    assert_int_equal(gossip_find(g, ID_D)->state, GOSSIP_DEAD);
    assert_true(gossip_next_deadline(g) > 2100);
    rec_clear(&r);
    gossip_free(g);
}

static void test_set_announcement_and_self(void **state)
{
    rec_t r;
    gossip_t *g = rec_new(&r, 0);
    json_t *self;
    char t[32];
    (void)state;
    self = gossip_self(g);
    assert_string_equal(json_string_value(json_object_get(self, "id")), ID_A);
    assert_int_equal(json_integer_value(json_object_get(self, "incarnation")), 1);
    assert_int_equal(json_integer_value(json_object_get(self, "seq")), 0);
    hello(g, ID_B, 1, 10);
    hello(g, ID_C, 1, 10);
    rec_clear(&r);
    gossip_set_announcement(g, json_pack("{s:s}", "role", "client"), 20);
    self = gossip_self(g);
    assert_int_equal(json_integer_value(json_object_get(self, "seq")), 1);
    assert_string_equal(json_string_value(json_object_get(self, "role")), "client");
    assert_int_equal(r.nsent, 2);
    for (unsigned i = 0; i < 2; i++)
        assert_string_equal(sent_type(&r, i, t), "update");
    rec_clear(&r);
    /* bad ids */
    assert_null(gossip_new("xyz", 1, NULL, NULL,
                           &(gossip_io_t){.send = rec_send, .random = rec_random}, 0));
    gossip_free(g);
}

/* =============================================================================================
 * Trust: signed announcements and leaves, claims as hints, incarnation bounds
 * =========================================================================================== */

static json_t *find_sent(rec_t *r, const char *to, const char *type)
{
    char t[32];
    for (unsigned i = 0; i < r->nsent; i++)
        if ((!to || !strcmp(r->sent[i].to, to)) && !strcmp(sent_type(r, i, t), type))
            return sent_json(r, i);
    return NULL;
}

static void test_signed_announcements(void **state)
{
    rec_t r;
    gossip_t *g = rec_new(&r, 0);
    const gossip_stats_t *st = gossip_stats(g);
    json_t *a, *m, *pad;
    char *text, *p;
    const char *orig_sig;
    (void)state;

    /* the own announcement is signed over its whole content, whatever the key order */
    a = gossip_self(g);
    assert_true(gmsg_ann_verify(a, GOSSIP_MAX_ANN_BYTES));
    text = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS);
    assert_non_null(strstr(text, "\"role\":\"host\",\"seq\":0,\"sig\":"));
    free(text);
    {
        /* the identity helpers underneath: the id is the key, in lowercase hex */
        uint8_t sig[64];
        char upper[GOSSIP_ID_LEN + 1];
        identity_sign(SK_A, "abc", 3, sig);
        assert_true(identity_verify(ID_A, "abc", 3, sig));
        assert_false(identity_verify(ID_A, "abd", 3, sig));
        assert_false(identity_verify(ID_B, "abc", 3, sig));
        for (int i = 0; i <= GOSSIP_ID_LEN; i++)
            upper[i] = (char)(ID_A[i] >= 'a' ? ID_A[i] - 32 : ID_A[i]);
        assert_false(identity_verify(upper, "abc", 3, sig));
        assert_false(identity_verify("abc", "abc", 3, sig));
        assert_false(identity_verify(NULL, "abc", 3, sig));
    }
    m = json_loads("{\"seq\":0,\"role\":\"host\"}", 0, NULL);
    json_object_update_missing(m, a); /* another insertion order */
    assert_true(gmsg_ann_verify(m, GOSSIP_MAX_ANN_BYTES));
    json_object_set_new(m, "role", json_string("client"));
    assert_false(gmsg_ann_verify(m, GOSSIP_MAX_ANN_BYTES));
    json_decref(m);

    hello(g, ID_B, 1, 10);
    rec_clear(&r);
    /* C's announcement relayed by B: C's signature makes it good */
    assert_int_equal(recvf(g, ID_B, 20, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, 1, 0, "\"role\":\"worker\"")),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(r.nev[GOSSIP_EV_UP], 1);
    orig_sig = json_string_value(json_object_get(gossip_find(g, ID_C)->ann, "sig"));
    assert_non_null(orig_sig);
    rec_clear(&r);
    /* and we relay it with the origin's signature (sync to a joiner) */
    assert_int_equal(recvf(g, ID_D, 25,
                           "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"join\":true,\"ann\":%s}",
                           ann(ID_D, 1, 0, NULL)),
                     0);
    m = find_sent(&r, ID_D, "sync");
    assert_non_null(m);
    {
        size_t i;
        json_t *e;
        bool seen = false;
        json_array_foreach(json_object_get(m, "anns"), i, e)
        {
            if (strcmp(json_string_value(json_object_get(e, "id")), ID_C)) continue;
            assert_string_equal(
                json_string_value(json_object_get(e, "sig")),
                json_string_value(json_object_get(gossip_find(g, ID_C)->ann, "sig")));
            assert_true(gmsg_ann_verify(e, GOSSIP_MAX_ANN_BYTES));
            seen = true;
        }
        assert_true(seen);
    }
    json_decref(m);
    rec_clear(&r);
    assert_int_equal(st->bad_sig, 0);

    /* altered after signing: refused, counted, nothing changes */
    text = strdup(ann(ID_C, 1, 1, "\"role\":\"host\""));
    p = strstr(text, "\"host\"");
    memcpy(p, "\"evil\"", 6);
    assert_int_equal(
        recvf(g, ID_B, 30, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}", text), 0);
    free(text);
    assert_int_equal(st->bad_sig, 1);
    assert_int_equal(gossip_find(g, ID_C)->seq, 0);
    /* signed by B, claiming to be C */
    assert_int_equal(recvf(g, ID_B, 31, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann_by(ID_B, ID_C, 2, 0, NULL)),
                     0);
    assert_int_equal(st->bad_sig, 2);
    assert_int_equal(gossip_find(g, ID_C)->inc, 1);
    /* a well-formed signature of nothing */
    assert_int_equal(recvf(g, ID_B, 32,
                           "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[{\"id\":\"%s\","
                           "\"incarnation\":1,\"seq\":5,\"sig\":\"%0128d\"}]}",
                           ID_C, 0),
                     0);
    assert_int_equal(st->bad_sig, 3);
    assert_int_equal(gossip_find(g, ID_C)->seq, 0);
    assert_int_equal(r.nev[0] + r.nev[1] + r.nev[2] + r.nev[3], 0);
    assert_int_equal(r.nsent, 0);

    /* replays of older versions, correctly signed: ignored (not even verified) */
    assert_int_equal(recvf(g, ID_B, 40, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, 1, 3, NULL)),
                     0);
    assert_int_equal(r.nev[GOSSIP_EV_UPDATED], 1);
    assert_int_equal(recvf(g, ID_B, 41, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s,%s]}",
                           ann(ID_C, 1, 2, "\"role\":\"old\""), ann(ID_C, 0, 9, NULL)),
                     0);
    assert_int_equal(r.nev[GOSSIP_EV_UPDATED], 1);
    assert_int_equal(gossip_find(g, ID_C)->seq, 3);
    assert_int_equal(st->bad_sig, 3);
    rec_clear(&r);

    /* oversized: refused even though correctly signed */
    a = json_pack("{s:s, s:I, s:I, s:o}", "id", ID_C, "incarnation", (json_int_t)1, "seq",
                  (json_int_t)4, "pad", pad = json_string(""));
    text = calloc(1, GOSSIP_MAX_ANN_BYTES + 1);
    memset(text, 'x', GOSSIP_MAX_ANN_BYTES);
    json_string_set(pad, text);
    free(text);
    assert_int_equal(gmsg_ann_sign(a, sign_with, (void *)SK_C), 0);
    assert_true(gmsg_ann_verify(a, SIZE_MAX));
    m = json_pack("{s:i, s:s, s:i, s:[o]}", "v", 1, "type", "update", "inc", 1, "anns", a);
    assert_int_equal(gossip_receive(g, ID_B, m, 50), 0);
    json_decref(m);
    assert_int_equal(st->bad_sig, 4);
    assert_int_equal(gossip_find(g, ID_C)->seq, 3);

    /* an incarnation more than a day ahead of our clock, correctly signed: refused */
    assert_int_equal(recvf(g, ID_B, 60, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, FUTURE, 0, NULL)),
                     0);
    assert_int_equal(st->future, 1);
    assert_int_equal(gossip_find(g, ID_C)->inc, 1);
    /* a day ahead exactly is still accepted */
    assert_int_equal(recvf(g, ID_B, 61, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_C, FUTURE - 1, 0, NULL)),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->inc, FUTURE - 1);
    rec_clear(&r);
    /* a digest entry from the future is not asked for */
    assert_int_equal(recvf(g, ID_B, 71,
                           "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"%s\",1,0],"
                           "[\"%s\",%llu,0],[\"%s\",1,0],[\"%s\",1,0]]}",
                           ID_B, ID_C, (unsigned long long)FUTURE, ID_A, ID_D),
                     0);
    assert_int_equal(st->future, 2);
    m = find_sent(&r, ID_B, "ack");
    assert_non_null(m);
    assert_int_equal(json_array_size(json_object_get(m, "want")), 0);
    json_decref(m);
    rec_clear(&r);

    /* a hello whose own announcement is wrongly signed: rejected, nothing answered or learned */
    assert_int_equal(recvf(g, ID_D, 80,
                           "{\"v\":1,\"type\":\"hello\",\"inc\":2,\"join\":true,\"ann\":%s}",
                           ann_by(ID_B, ID_D, 2, 0, NULL)),
                     -EINVAL);
    assert_int_equal(st->bad_sig, 5);
    assert_int_equal(gossip_find(g, ID_D)->inc, 1);
    assert_int_equal(r.nsent, 0);
    rec_clear(&r);
    gossip_free(g);
}

/* A knows B and C alive at incarnation 1; D never seen. */
static gossip_t *setup_abc_alive(rec_t *r)
{
    gossip_t *g = rec_new(r, 0);
    hello(g, ID_B, 1, 10);
    hello(g, ID_C, 1, 10);
    rec_clear(r);
    return g;
}

static bool ping_has_claim(rec_t *r, const char *to)
{
    json_t *m = find_sent(r, to, "ping");
    bool claim;
    assert_non_null(m);
    claim = json_object_get(m, "dead") != NULL;
    json_decref(m);
    return claim;
}

static void pong(gossip_t *g, const char *from, uint64_t inc, uint64_t now)
{
    assert_int_equal(
        recvf(g, from, now, "{\"v\":1,\"type\":\"pong\",\"inc\":%llu}", (unsigned long long)inc),
        0);
}

static void test_claims_are_hints(void **state)
{
    rec_t r;
    gossip_t *g = setup_abc_alive(&r);
    const gossip_stats_t *st = gossip_stats(g);
    uint64_t probe;
    gossip_cfg_t cfg;
    json_t *m;
    const uint64_t huge = WALL + GOSSIP_MAX_AHEAD_MS - 5; /* far above 1, not in the future */
    (void)state;
    gossip_cfg_default(&cfg, HB);
    probe = cfg.probe_ms;

    /* a dead record with a huge incarnation for live C (in an hb): not recorded, not passed
     * on; a plain ping (no claim: C need not even refute), and C answers */
    assert_int_equal(recvf(g, ID_B, 100,
                           "{\"v\":1,\"type\":\"hb\",\"inc\":1,\"digest\":[[\"%s\",1,0]],"
                           "\"dead\":[[\"%s\",%llu,\"dead\"]]}",
                           ID_B, ID_C, (unsigned long long)huge),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(gossip_find(g, ID_C)->inc, 1);
    assert_int_equal(st->unproven, 1);
    assert_true(gossip_find(g, ID_C)->probing);
    assert_false(ping_has_claim(&r, ID_C));
    m = find_sent(&r, NULL, "peer_down");
    assert_null(m);
    pong(g, ID_C, 1, 110);
    gossip_tick(g, 100 + probe);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(r.nev[GOSSIP_EV_DEAD] + r.nev[GOSSIP_EV_LEFT], 0);
    rec_clear(&r);

    /* a "left" for C without C's signature, or signed by B: a dead hint (probe with the
     * claim), never a leave */
    assert_int_equal(
        recvf(g, ID_B, 200,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"left\"]]}", ID_C),
        0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(st->unproven, 2);
    assert_true(ping_has_claim(&r, ID_C));
    pong(g, ID_C, 1, 210);
    rec_clear(&r);
    assert_int_equal(recvf(g, ID_B, 300,
                           "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"left\","
                           "\"%s\"],[\"%s\",%llu,\"left\",\"%s\"]]}",
                           ID_C, leave_sig_by(ID_B, ID_C, 1), ID_C, (unsigned long long)huge,
                           leave_sig_by(ID_B, ID_C, huge)),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(gossip_find(g, ID_C)->inc, 1);
    assert_int_equal(st->bad_sig, 2);
    pong(g, ID_C, 1, 310);
    gossip_tick(g, 300 + probe);
    /* a "leaving" from B signed with another key: rejected, B stays */
    assert_int_equal(recvf(g, ID_B, 320, "{\"v\":1,\"type\":\"leaving\",\"inc\":1,\"sig\":\"%s\"}",
                           leave_sig_by(ID_C, ID_B, 1)),
                     -EINVAL);
    assert_int_equal(gossip_find(g, ID_B)->state, GOSSIP_ALIVE);
    assert_int_equal(st->bad_sig, 3);
    assert_int_equal(r.nev[GOSSIP_EV_DEAD] + r.nev[GOSSIP_EV_LEFT], 0);
    rec_clear(&r);

    /* claims about a node never seen leave no trace: its announcement is accepted later */
    assert_int_equal(
        recvf(g, ID_B, 400,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",5,\"dead\"]]}", ID_D),
        0);
    assert_null(gossip_find(g, ID_D));
    assert_int_equal(st->unproven, 5); /* + the two signed by B above */
    hello(g, ID_D, 1, 410);
    assert_int_equal(gossip_find(g, ID_D)->state, GOSSIP_ALIVE);
    rec_clear(&r);

    /* claims about ourselves: above our incarnation we never signed it (ignored); at it, we
     * refute */
    assert_int_equal(
        recvf(g, ID_B, 500,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",9,\"dead\"]]}", ID_A),
        0);
    assert_int_equal(gossip_incarnation(g), 1);
    assert_int_equal(st->unproven, 6);
    assert_int_equal(r.nsent, 0);
    assert_int_equal(
        recvf(g, ID_B, 510,
              "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"dead\"]]}", ID_A),
        0);
    assert_int_equal(gossip_incarnation(g), 2);
    rec_clear(&r);
    /* our own signed leave (of a former process) above our incarnation: we bump past it */
    assert_int_equal(recvf(g, ID_B, 520,
                           "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",7,\"left\","
                           "\"%s\"]]}",
                           ID_A, leave_sig_by(ID_A, ID_A, 7)),
                     0);
    assert_int_equal(gossip_incarnation(g), 8);
    rec_clear(&r);

    /* records from the future: refused */
    assert_int_equal(recvf(g, ID_B, 600,
                           "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",%llu,"
                           "\"dead\"]]}",
                           ID_C, (unsigned long long)FUTURE),
                     0);
    assert_int_equal(st->future, 1);
    assert_false(gossip_find(g, ID_C)->probing);

    /* C's own signed leave, relayed by B: a fact — C is dropped at once and the record is
     * passed on with C's signature */
    assert_int_equal(recvf(g, ID_B, 700,
                           "{\"v\":1,\"type\":\"peer_down\",\"inc\":1,\"dead\":[[\"%s\",1,\"left\","
                           "\"%s\"]]}",
                           ID_C, leave_sig_by(ID_C, ID_C, 1)),
                     0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_LEFT);
    assert_int_equal(r.nev[GOSSIP_EV_LEFT], 1);
    m = find_sent(&r, ID_D, "peer_down");
    assert_non_null(m);
    assert_string_equal(
        json_string_value(json_array_get(json_array_get(json_object_get(m, "dead"), 0), 3)),
        leave_sig_by(ID_C, ID_C, 1));
    json_decref(m);
    rec_clear(&r);
    gossip_free(g);
}

/* A process restarted with an incarnation below the one others hold (lost state file, clock
 * set back): the peer that holds the newer one shows it C's own signed announcement, and C
 * bumps past it and is accepted. */
static void test_stale_restart_recovers(void **state)
{
    rec_t r, rc;
    gossip_t *g = setup_abc(&r), *c = rec_new_as(&rc, ID_C, 2, 200);
    json_t *m;
    (void)state;
    gossip_join(c, ID_A, 200);
    assert_int_equal(rc.nsent, 1);
    assert_int_equal(recv_str(g, ID_C, rc.sent[0].text, 210), 0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_DEAD);
    assert_int_equal(r.nsent, 1);
    rec_clear(&rc);
    assert_int_equal(recv_str(c, ID_A, r.sent[0].text, 220), 0);
    rec_clear(&r);
    assert_int_equal(gossip_incarnation(c), 4);
    m = find_sent(&rc, ID_A, "update");
    assert_non_null(m);
    json_decref(m);
    assert_int_equal(recv_str(g, ID_C, rc.sent[0].text, 230), 0);
    assert_int_equal(gossip_find(g, ID_C)->state, GOSSIP_ALIVE);
    assert_int_equal(gossip_find(g, ID_C)->inc, 4);
    rec_clear(&r);
    rec_clear(&rc);
    gossip_free(c);
    gossip_free(g);
}

/* Issue 12 item 8: a new incarnation is watched afresh — never probed or declared dead for the
 * silence of the old one. */
static void test_new_incarnation_watched_afresh(void **state)
{
    rec_t r;
    gossip_t *g = setup_abc_alive(&r); /* B and C are A's two ring predecessors */
    gossip_cfg_t cfg;
    uint64_t T, P, t, t2;
    (void)state;
    gossip_cfg_default(&cfg, HB);
    T = cfg.heartbeat_ms;
    P = cfg.probe_ms;
    /* B silent since 10 (crashed); C talks. At 10 + 2T, C relays B's restart. */
    for (t = 100; t < 10 + 2 * T; t += 100) {
        pong(g, ID_C, 1, t);
        gossip_tick(g, t);
    }
    assert_false(gossip_find(g, ID_B)->probing);
    t = 10 + 2 * T;
    assert_int_equal(recvf(g, ID_C, t, "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_B, 2, 0, NULL)),
                     0);
    assert_int_equal(gossip_find(g, ID_B)->inc, 2);
    /* the old incarnation's suspicion time passes: nothing */
    for (t2 = t + 50; t2 < t + T * 9 / 4; t2 += 50) {
        pong(g, ID_C, 1, t2);
        gossip_tick(g, t2);
        assert_false(gossip_find(g, ID_B)->probing);
    }
    /* the new incarnation's own silence does count */
    gossip_tick(g, t + T * 9 / 4);
    assert_true(gossip_find(g, ID_B)->probing);
    t = t + T * 9 / 4;
    /* a probe of incarnation 2 in progress when incarnation 3 is learned: it ends */
    assert_int_equal(recvf(g, ID_C, t + P / 4,
                           "{\"v\":1,\"type\":\"update\",\"inc\":1,\"anns\":[%s]}",
                           ann(ID_B, 3, 0, NULL)),
                     0);
    assert_false(gossip_find(g, ID_B)->probing);
    pong(g, ID_C, 1, t + P);
    gossip_tick(g, t + P);
    gossip_tick(g, t + 2 * P);
    assert_int_equal(gossip_find(g, ID_B)->state, GOSSIP_ALIVE);
    assert_int_equal(gossip_find(g, ID_B)->inc, 3);
    assert_int_equal(r.nev[GOSSIP_EV_DEAD], 0);
    rec_clear(&r);
    gossip_free(g);
}

/* --- the same rules in the simulation --- */

/* A message from node `from` to node `to`, delivered 1 ms from now. */
static void inject(sim_t *s, unsigned from, unsigned to, const char *text)
{
    sev_t e = {.kind = EV_DELIVER, .t = s->now + 1, .from = from, .to = to};
    e.payload = payload_new(strdup(text));
    heap_push(s, e);
}

/* The victim's current announcement with a higher seq and another role: its signature no longer
 * covers it. */
static char *tampered_ann(gossip_t *victim)
{
    json_t *a = json_deep_copy(gossip_self(victim));
    char *text;
    json_object_set_new(a, "role", json_string("evil"));
    json_object_set_new(a, "seq", json_integer(json_integer_value(json_object_get(a, "seq")) + 1));
    text = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return text;
}

/* One member (a real node of the sim) forges, every 100 ms for 10 heartbeats, to every other
 * node: peer_down for a live victim, dead records with a huge incarnation, "left" records
 * without or with a wrong signature, announcements of the victim signed by itself or altered.
 * The victim stays alive on every node all along, and the mesh stays converged. */
static void test_sim_hostile_member(void **state)
{
    sim_t *s = sim_new(20, 21, HB);
    const unsigned v = 4, h = 11;
    node_t *hn = &s->nodes[h];
    uint64_t T = s->cfg.heartbeat_ms, t0, refuted0, bad = 0, unproven = 0;
    unsigned round;
    char buf[8192];
    (void)state;
    sim_boot(s);
    sim_run_until(s, s->now + T);
    t0 = s->now;
    refuted0 = gossip_stats(s->nodes[v].g)->refutations;
    for (round = 0; s->now < t0 + 10 * T; round++) {
        const char *vid = s->nodes[v].id;
        uint64_t inc = gossip_incarnation(s->nodes[v].g), hinc = gossip_incarnation(hn->g);
        char *forged = NULL, *bad_ann = NULL;
        for (unsigned i = 0; i < s->n; i++) {
            if (i == h || i == v || !s->nodes[i].up) continue;
            switch (round % 4) {
            case 0:
                snprintf(buf, sizeof buf,
                         "{\"v\":1,\"type\":\"peer_down\",\"inc\":%llu,\"dead\":[[\"%s\",%llu,"
                         "\"dead\"]]}",
                         (unsigned long long)hinc, vid, (unsigned long long)inc);
                break;
            case 1:
                snprintf(buf, sizeof buf,
                         "{\"v\":1,\"type\":\"hb\",\"inc\":%llu,\"digest\":[],\"dead\":[[\"%s\","
                         "%llu,\"dead\"]]}",
                         (unsigned long long)hinc, vid, (unsigned long long)inc + 1000000);
                break;
            case 2: {
                char sig[GMSG_SIG_HEX + 1];
                size_t len = 0;
                char *b = gmsg_leave_bytes(vid, inc, &len);
                gmsg_sign_hex(sign_with, hn->sk, b, len, sig);
                free(b);
                snprintf(buf, sizeof buf,
                         "{\"v\":1,\"type\":\"peer_down\",\"inc\":%llu,\"dead\":[[\"%s\",%llu,"
                         "\"left\"],[\"%s\",%llu,\"left\",\"%s\"]]}",
                         (unsigned long long)hinc, vid, (unsigned long long)inc, vid,
                         (unsigned long long)inc, sig);
                break;
            }
            default:
                if (!forged) {
                    json_t *a = json_pack("{s:s, s:I, s:I, s:s}", "id", vid, "incarnation",
                                          (json_int_t)inc + 1, "seq", (json_int_t)0, "role", "x");
                    gmsg_ann_sign(a, sign_with, hn->sk);
                    forged = json_dumps(a, JSON_COMPACT);
                    json_decref(a);
                    bad_ann = tampered_ann(s->nodes[v].g);
                }
                snprintf(buf, sizeof buf,
                         "{\"v\":1,\"type\":\"update\",\"inc\":%llu,\"anns\":[%s,%s]}",
                         (unsigned long long)hinc, forged, bad_ann);
            }
            inject(s, h, i, buf);
        }
        free(forged);
        free(bad_ann);
        sim_run_until(s, s->now + 100);
        if (!all_see(s, v, GOSSIP_ALIVE)) explain(s);
        assert_true(all_see(s, v, GOSSIP_ALIVE));
    }
    for (unsigned i = 0; i < s->n; i++) {
        bad += gossip_stats(s->nodes[i].g)->bad_sig;
        unproven += gossip_stats(s->nodes[i].g)->unproven;
        assert_int_equal(s->dead_at[i][v] + s->left_at[i][v], 0);
    }
    assert_true(bad > 0 && unproven > 0);
    assert_true(run_until_converged(s, s->now + 3 * T) != UINT64_MAX);
    printf("[ gossip ] hostile member: %u rounds of forged claims, victim alive on all 18 others "
           "throughout (%llu refutations, %llu bad signatures, %llu unproven claims refused)\n",
           round, (unsigned long long)(gossip_stats(s->nodes[v].g)->refutations - refuted0),
           (unsigned long long)bad, (unsigned long long)unproven);
    sim_free(s);
}

/* Issue 12 item 8 in the simulation: a node killed and restarted 300 ms later (next
 * incarnation) is never declared dead by anyone. */
static void test_sim_fast_restart(void **state)
{
    sim_t *s = sim_new(20, 33, HB);
    const unsigned v = 6;
    uint64_t T = s->cfg.heartbeat_ms, inc, tr;
    (void)state;
    sim_boot(s);
    sim_run_until(s, s->now + T);
    inc = gossip_incarnation(s->nodes[v].g);
    node_kill(s, v);
    sim_run_until(s, s->now + 300);
    tr = s->now;
    node_start(s, v, inc + 1, (int)random_live(s, (int)v));
    while (s->now < tr + 10 * T) {
        sim_run_until(s, s->now + 50);
        for (unsigned i = 0; i < s->n; i++)
            assert_int_equal(s->dead_at[i][v], 0);
    }
    assert_true(all_see(s, v, GOSSIP_ALIVE));
    assert_true(converged(s));
    sim_free(s);
}

/* =============================================================================================
 * Passive nodes at scale (seed 002): 100 active gossiping nodes + 1000 passive nodes that never
 * gossip. Time is scaled as the seeds' defaults: a heartbeat (60 s) is HB, a refresh period
 * (30 s) HB / 2, a check-in attempt bound (5 s) HB / 12. A passive node checks in with the
 * first node of rt_checkin_order over its last table that is up (a dead one costs the attempt
 * bound); the answering node's table lists itself and the peers its gossip holds alive, and the
 * hosts of 10 models (model k on active nodes 10k..10k+9).
 * =========================================================================================== */

#define NPASSIVE 1000
#define NMODELS 10

typedef struct {
    char id[GOSSIP_ID_LEN + 1];
    uint64_t next;     /* next check-in */
    int with;          /* active node of its last check-in */
    uint64_t since;    /* when a fresh table was last taken */
    rt_table_t *table; /* shared table of the answering node (borrowed) */
} pnode_t;

typedef struct {
    sim_t *s;
    pnode_t p[NPASSIVE];
    rt_table_t *tables[MAXN]; /* the table each active node answers with, rebuilt per slot */
    uint64_t built[MAXN];
    uint64_t checkins[MAXN];
    uint64_t R, attempt;
} psim_t;

static rt_table_t *psim_table(psim_t *ps, unsigned a)
{
    sim_t *s = ps->s;
    if (ps->tables[a] && ps->built[a] == s->now / 50) return ps->tables[a];
    if (!ps->tables[a]) ps->tables[a] = malloc(sizeof(rt_table_t));
    rt_table_t *t = ps->tables[a];
    assert_non_null(t);
    rt_table_init(t, "mesh");
    rt_table_add_node(t, s->nodes[a].id, 0);
    for (size_t i = 0; i < gossip_peer_count(s->nodes[a].g); i++) {
        const gossip_peer_t *gp = gossip_peer_at(s->nodes[a].g, i);
        if (gp->state == GOSSIP_ALIVE) rt_table_add_node(t, gp->id, 0);
    }
    for (unsigned m = 0; m < NMODELS; m++) {
        char name[16];
        snprintf(name, sizeof name, "model-%u", m);
        rt_model_t *md = rt_table_add_model(t, name, CATALOG_READY);
        for (unsigned h = m * 10; h < m * 10 + 10 && h < s->n; h++) {
            int k = rt_table_find_node(t, s->nodes[h].id);
            if (k >= 0) rt_model_add_host(md, (size_t)k, 0);
        }
    }
    ps->built[a] = s->now / 50;
    return t;
}

/* Passive check-ins due until time t (gossip runs in between). */
static void psim_run_until(psim_t *ps, uint64_t t)
{
    sim_t *s = ps->s;
    while (s->now < t) {
        uint64_t step = s->now + 5 < t ? s->now + 5 : t;
        sim_run_until(s, step);
        for (unsigned i = 0; i < NPASSIVE; i++) {
            pnode_t *p = &ps->p[i];
            if (p->next > s->now) continue;
            size_t order[RT_MAX_NODES];
            size_t n = rt_checkin_order(p->table, p->id, order, RT_MAX_NODES);
            uint64_t cost = 0;
            int got = -1;
            for (size_t k = 0; k < n && got < 0; k++) {
                int a = node_by_id(s, p->table->nodes[order[k]].id);
                if (a >= 0 && s->nodes[a].up)
                    got = a;
                else
                    cost += ps->attempt; /* no answer within the attempt bound */
            }
            if (got < 0) { /* every node of the table is gone: the join token (node 1) */
                got = 1;
                assert_true(s->nodes[1].up);
            }
            ps->checkins[got]++;
            p->with = got;
            p->table = psim_table(ps, (unsigned)got);
            p->since = s->now + cost;
            p->next = s->now + cost + ps->R;
        }
    }
}

static void test_sim_passive_scale(void **state)
{
    (void)state;
    sim_t *s = sim_new(100, 11, HB);
    sim_boot(s);
    psim_t *ps = calloc(1, sizeof *ps);
    assert_non_null(ps);
    ps->s = s;
    ps->R = HB / 2;
    ps->attempt = HB / 12;
    uint64_t rng = 4242;
    for (unsigned i = 0; i < NPASSIVE; i++) { /* they join through node 1's token */
        pnode_t *p = &ps->p[i];
        for (int w = 0; w < 4; w++)
            snprintf(p->id + 16 * w, 17, "%016llx", (unsigned long long)splitmix(&rng));
        p->table = psim_table(ps, 1);
        p->next = s->now + splitmix(&rng) % ps->R; /* started at random moments */
    }
    psim_run_until(ps, s->now + 2 * HB); /* every passive node has a table from its own node */

    /* steady state over 10 heartbeats (10 minutes at the seeds' numbers) */
    uint64_t g0[MAXN], c0[MAXN], beats = 10;
    for (unsigned a = 0; a < s->n; a++) {
        g0[a] = gossip_stats(s->nodes[a].g)->sent + gossip_stats(s->nodes[a].g)->received;
        c0[a] = ps->checkins[a];
    }
    psim_run_until(ps, s->now + beats * HB);
    double gmax = 0, gsum = 0, cmax = 0, csum = 0, tmax = 0, cmin = 1e9;
    for (unsigned a = 0; a < s->n; a++) {
        double g = (double)(gossip_stats(s->nodes[a].g)->sent +
                            gossip_stats(s->nodes[a].g)->received - g0[a]) /
                   beats;
        double c = 2.0 * (double)(ps->checkins[a] - c0[a]) / beats; /* request + answer */
        gsum += g;
        csum += c;
        gmax = g > gmax ? g : gmax;
        cmax = c > cmax ? c : cmax;
        cmin = c < cmin ? c : cmin;
        tmax = g + c > tmax ? g + c : tmax;
    }
    double cmean = csum / s->n, gmean = gsum / s->n;
    printf("[ passive ] 100 active + %d passive: per active node per minute: gossip %.1f mean "
           "(max %.1f), check-in messages %.1f mean (min %.1f, max %.1f), total max %.1f\n",
           NPASSIVE, gmean, gmax, cmean, cmin, cmax, tmax);
    /* gossip is what 100 nodes alone send (bound of the gossip tests: 2 × (3·fanout + 2) sent
     * and received per heartbeat); check-ins: 2 × 1000 × 2 / 100 = 40 a minute on average */
    double gbound = 2 * (3.0 * s->cfg.fanout + 2);
    assert_true(gmax <= gbound);
    assert_true(cmean > 39 && cmean < 41);
    assert_true(cmax <= 2 * cmean);
    assert_true(converged(s));

    /* host choice: every passive node asks for every model once */
    unsigned per_host[MAXN] = {0}, hmax = 0, hmin = UINT32_MAX;
    for (unsigned i = 0; i < NPASSIVE; i++)
        for (unsigned m = 0; m < NMODELS; m++) {
            const rt_table_t *t = ps->p[i].table;
            rd_host_t hosts[RD_MAX_HOSTS];
            rd_input_t in;
            rd_passive_input(&in, t, t->models[m].name, ps->p[i].id, hosts, NULL, RD_MAX_HOSTS);
            rd_decision_t d;
            route_decide(&in, &d);
            assert_int_equal(d.verdict, RD_FORWARD);
            per_host[node_by_id(s, hosts[d.order[0]].id)]++;
        }
    for (unsigned a = 0; a < s->n; a++) {
        hmax = per_host[a] > hmax ? per_host[a] : hmax;
        hmin = per_host[a] < hmin ? per_host[a] : hmin;
    }
    printf("[ passive ] %d models x 10 hosts, %d passive nodes: requests per host min %u, max %u "
           "(even: %d)\n",
           NMODELS, NPASSIVE, hmin, hmax, NPASSIVE / 10);
    assert_true(hmin >= 60 && hmax <= 140);

    /* kill the node most passive nodes check in with: each of them has a fresh table from a
     * live node within one refresh period (plus the attempt on the dead node) */
    unsigned victim = 0;
    for (unsigned a = 0; a < s->n; a++)
        if (ps->checkins[a] > ps->checkins[victim] && a != 1) victim = a;
    bool affected[NPASSIVE];
    unsigned n_aff = 0;
    for (unsigned i = 0; i < NPASSIVE; i++)
        n_aff += affected[i] = ps->p[i].with == (int)victim;
    uint64_t t_kill = s->now;
    node_kill(s, victim);
    psim_run_until(ps, t_kill + ps->R + ps->attempt + 1);
    uint64_t worst = 0;
    for (unsigned i = 0; i < NPASSIVE; i++) {
        if (!affected[i]) continue;
        assert_int_not_equal(ps->p[i].with, (int)victim);
        assert_true(ps->p[i].since > t_kill);
        worst = ps->p[i].since - t_kill > worst ? ps->p[i].since - t_kill : worst;
    }
    printf("[ passive ] killed the check-in node of %u passive nodes: all had a table from a live "
           "node within %.2f refresh periods\n",
           n_aff, (double)worst / (double)ps->R);
    assert_true(n_aff > 0);
    assert_true(worst <= ps->R + ps->attempt);
    for (unsigned a = 0; a < MAXN; a++)
        free(ps->tables[a]);
    free(ps);
    sim_free(s);
}

/* Issue 33 item 7: nodes with fresh keys that join and leave do not pile up: at most
 * GOSSIP_MAX_DEPARTED departed records are kept (the oldest go first), and each is forgotten
 * twice its gossip window (2 x dead_retry_beats heartbeats) after it departed. */
static void test_departed_records_bounded(void **state)
{
    (void)state;
    rec_t r;
    gossip_t *g = rec_new(&r, 0);
    uint64_t seed = 4321, now = 100;
    char first[GOSSIP_ID_LEN + 1] = "", last[GOSSIP_ID_LEN + 1] = "";
    for (int i = 0; i < GOSSIP_MAX_DEPARTED + 10; i++) {
        char id[GOSSIP_ID_LEN + 1], sig[GMSG_SIG_HEX + 1];
        uint8_t sk[64];
        size_t len = 0;
        make_key(&seed, id, sk);
        json_t *a = json_pack("{s:s,s:i,s:i}", "id", id, "incarnation", 1, "seq", 0);
        assert_int_equal(gmsg_ann_sign(a, sign_with, sk), 0);
        char *js = json_dumps(a, JSON_COMPACT);
        assert_int_equal(recvf(g, id, now, "{\"v\":1,\"type\":\"hello\",\"inc\":1,\"ann\":%s}", js),
                         0);
        free(js);
        json_decref(a);
        char *b = gmsg_leave_bytes(id, 1, &len);
        gmsg_sign_hex(sign_with, sk, b, len, sig);
        free(b);
        assert_int_equal(
            recvf(g, id, now, "{\"v\":1,\"type\":\"leaving\",\"inc\":1,\"sig\":\"%s\"}", sig), 0);
        assert_int_equal(gossip_find(g, id)->state, GOSSIP_LEFT);
        if (!first[0]) memcpy(first, id, sizeof first);
        memcpy(last, id, sizeof last);
        assert_true(gossip_peer_count(g) <= GOSSIP_MAX_DEPARTED);
        now += 10;
        rec_clear(&r);
    }
    /* the count: the oldest went, the newest stays */
    assert_int_equal(gossip_peer_count(g), GOSSIP_MAX_DEPARTED);
    assert_null(gossip_find(g, first));
    assert_non_null(gossip_find(g, last));
    assert_int_equal(r.nev[GOSSIP_EV_FORGOTTEN], 0); /* cleared above; 10 were reported */
    /* the time: still kept just before twice the window, all gone at it */
    uint64_t ttl = 2 * 30 * (uint64_t)HB;
    gossip_tick(g, now - 10 + ttl - 1);
    assert_non_null(gossip_find(g, last));
    rec_clear(&r);
    gossip_tick(g, now - 10 + ttl);
    assert_int_equal(gossip_peer_count(g), 0);
    assert_int_equal(r.nev[GOSSIP_EV_FORGOTTEN], 1);
    assert_string_equal(r.ev_id[GOSSIP_EV_FORGOTTEN], last);
    rec_clear(&r);
    gossip_free(g);
}

int main(void)
{
    if (sodium_init() < 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_rejected),
        cmocka_unit_test(test_refutation),
        cmocka_unit_test(test_higher_incarnation_and_stale),
        cmocka_unit_test(test_dead_claim_is_verified),
        cmocka_unit_test(test_set_announcement_and_self),
        cmocka_unit_test(test_signed_announcements),
        cmocka_unit_test(test_claims_are_hints),
        cmocka_unit_test(test_stale_restart_recovers),
        cmocka_unit_test(test_new_incarnation_watched_afresh),
        cmocka_unit_test(test_sim_dead_notice_rejoin),
        cmocka_unit_test(test_sim_lifecycle),
        cmocka_unit_test(test_sim_partition_heals),
        cmocka_unit_test(test_sim_adjacent_failures),
        cmocka_unit_test(test_sim_suspect),
        cmocka_unit_test(test_sim_default_timings),
        cmocka_unit_test(test_sim_hostile_member),
        cmocka_unit_test(test_sim_fast_restart),
        cmocka_unit_test(test_sim_passive_scale),
        cmocka_unit_test(test_departed_records_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
