/* Unit tests for the planner's policy (src/plan_policy.h): pure decisions over typed views.
 *
 * Each step builds the peers' views and this node's facts, calls pp_decide and renders the
 * actions as one string ("SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1"), so each test
 * asserts the exact sequence a membership change produced. Time (the plan ids' wall clock and
 * the allocation's settle delay) is a plain value passed in by the test.
 *
 * Memory in the tests: model M is 1000 bytes and needs 1100 (1.1 ×); it has 24 layers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "plan_policy.h"

#define A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* this node */
#define B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    view_node_t peers[4];
    size_t n_peers;
    bool rpc_running;
    bool split_private;
    uint64_t now_s;
    pp_model_t m;
    char seeded[PP_PLAN_ID_MAX];
    pp_state_t st;
    uint32_t speed;     /* this node's calibrated speed, 0 unknown */
    bool speed_pending; /* its calibration still runs */
    uint64_t now_ms;    /* the rebalance ticks' clock */
    pp_stage_t stages[2];
    uint64_t device_bytes[2]; /* this node's own devices (issue 28) */
    size_t n_devices;
} world_t;

static world_t g_w; /* a few KiB: keep it off the stack */

static world_t *world(uint64_t offer, bool loaded)
{
    for (size_t i = 0; i < g_w.n_peers; i++)
        view_node_free(&g_w.peers[i]);
    memset(&g_w, 0, sizeof g_w);
    g_w.now_s = 0x64;
    g_w.m = (pp_model_t){.name = "M",
                         .has_file = true,
                         .size_bytes = 1000,
                         .need_bytes = 1100,
                         .n_layers = 24,
                         .offer_bytes = offer,
                         .loaded = loaded,
                         .ready = loaded,
                         .seeded_plan = g_w.seeded};
    return &g_w;
}

/* A live peer that is a member of M's group and offers vram bytes. */
static view_node_t *peer(world_t *w, const char *id, uint64_t vram)
{
    view_node_t *v = &w->peers[w->n_peers++];
    view_node_init(v);
    snprintf(v->id, sizeof v->id, "%s", id);
    v->vram_bytes = vram;
    view_avail_t *a = view_add_available(v, "M");
    assert_non_null(a);
    a->size_bytes = 1000;
    a->need_bytes = 1100;
    view_serving_t *s = view_add_serving(v, "M");
    assert_non_null(s);
    s->member = true;
    return v;
}

static void drop_peer(world_t *w, const char *id)
{
    for (size_t i = 0; i < w->n_peers; i++)
        if (strcmp(w->peers[i].id, id) == 0) {
            view_node_free(&w->peers[i]);
            w->peers[i] = w->peers[--w->n_peers];
            return;
        }
    fail_msg("no peer %s", id);
}

static view_node_t *find(world_t *w, const char *id)
{
    for (size_t i = 0; i < w->n_peers; i++)
        if (strcmp(w->peers[i].id, id) == 0) return &w->peers[i];
    fail_msg("no peer %s", id);
    return NULL;
}

/* The worker announces it is ready for the host's (this node's) plan. */
static void ready_for(world_t *w, const char *id, const char *plan_id)
{
    snprintf(find(w, id)->serving[0].plan_ready, VIEW_PLAN_ID_MAX, "%s", plan_id);
}

/* Peer `host` announces a plan that gives this node layers [first, end) + output. */
static void host_plan(world_t *w, const char *host, const char *plan_id, uint32_t first,
                      uint32_t end)
{
    view_node_t *v = find(w, host);
    view_plan_t *p = view_add_plan(v, &v->serving[0], plan_id);
    assert_non_null(p);
    p->ngl = 25 - first;
    view_worker_t *wk = &p->workers[p->n_workers++];
    snprintf(wk->id, sizeof wk->id, "%s", A);
    wk->first = first;
    wk->end = end;
    wk->output = true;
    wk->weight = end - first + 1;
}

static void render(const world_t *w, const pp_action_t *a, char *out, size_t cap)
{
    const pp_state_t *st = &w->st;
    int n = snprintf(out, cap, "%s M", pp_action_name(a->kind));
    if (a->kind == PP_STOP_RPC_SERVER) n = snprintf(out, cap, "STOP_RPC_SERVER");
    char args[256];
    switch (a->kind) {
    case PP_SET_LEDGER:
        snprintf(out + n, cap - (size_t)n, " %s %llu",
                 a->ledger == LEDGER_MODEL ? "model" : "worker", (unsigned long long)a->bytes);
        break;
    case PP_NEW_PLAN:
        snprintf(out + n, cap - (size_t)n, " %s", st->plan_id);
        break;
    case PP_START_HOST:
        assert_int_equal(pp_host_args(st, args, sizeof args), 0);
        snprintf(out + n, cap - (size_t)n, " %s [%s]", st->plan_id, args);
        for (size_t k = 0; k < st->n_workers; k++) {
            size_t len = strlen(out);
            snprintf(out + len, cap - len, " %.1s:%u-%u%s", st->workers[k].id,
                     st->workers[k].range.first, st->workers[k].range.end,
                     st->workers[k].range.output ? "+o" : "");
        }
        break;
    case PP_START_WORKER:
        snprintf(out + n, cap - (size_t)n, " %s %u-%u%s", st->follow_plan, st->my_range.first,
                 st->my_range.end, st->my_range.output ? "+o" : "");
        break;
    default:
        break;
    }
}

/* Decide once; every action in order, joined with "; ". */
static const char *step(world_t *w)
{
    static char buf[4096];
    static pp_actions_t acts;
    pp_input_t in = {.id = A,
                     .force_split = false,
                     .split_private = w->split_private,
                     .now_s = w->now_s,
                     .peers = w->peers,
                     .rtt_ms = NULL,
                     .n_peers = w->n_peers,
                     .rpc_running = w->rpc_running,
                     .speed_mflops = w->speed,
                     .speed_pending = w->speed_pending,
                     .now_ms = w->now_ms,
                     .n_devices = w->n_devices};
    for (size_t i = 0; i < w->n_devices; i++)
        in.device_bytes[i] = w->device_bytes[i];
    acts.n = 0;
    pp_decide(&in, &w->m, &w->st, 1, &acts);
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < acts.n; i++) {
        char one[512];
        render(w, &acts.a[i], one, sizeof one);
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? "; " : "", one);
    }
    return buf;
}

#define EXPECT(w, s) assert_string_equal(step(w), (s))

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

/* A node joins alone with a model that fits: solo replica, loaded once. */
static void test_join_solo(void **state)
{
    (void)state;
    world_t *w = world(2000, false);
    w->st.load_when_replica = true; /* allocated (an explicit --model preloads itself) */
    EXPECT(w, "START_REPLICA M");
    assert_int_equal(w->st.role, ELECTION_REPLICA);
    assert_int_equal(w->st.mode, ELECTION_SOLO);
    w->m.loaded = w->m.ready = true;
    EXPECT(w, ""); /* stable */
    EXPECT(w, "");
    /* a second node that fits too: another replica, nothing changes here */
    peer(w, B, 1500);
    EXPECT(w, "");
    assert_int_equal(w->st.n_members, 2);
}

/* A node too small alone waits; a second small node joins: the split forms with this node as
 * host (more memory), llama-server starts once the worker is ready for the plan id. The worker
 * dies: the host stops and waits; it comes back: a new plan. */
static void test_split_forms_dies_returns(void **state)
{
    (void)state;
    world_t *w = world(800, false);
    EXPECT(w, "");
    assert_true(w->st.waiting);
    assert_int_equal(w->st.mode, ELECTION_IMPOSSIBLE);
    assert_int_equal(w->st.need_bytes, 1100);
    assert_int_equal(w->st.total_bytes, 800);

    peer(w, B, 500);
    /* host share = 1100 × 800 / 1300 */
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    assert_false(w->st.waiting);
    assert_int_equal(w->st.role, ELECTION_HOST);
    assert_false(w->st.launched);
    EXPECT(w, ""); /* the worker is not ready yet */
    ready_for(w, B, "aaaaaaaa-64-0");
    EXPECT(w, ""); /* ready for another plan */
    ready_for(w, B, "aaaaaaaa-64-1");
    /* 25 slots by memory (9.6 rounded up for the worker): the host keeps layers 0-14 on its
     * CPU, the worker 15-23 and the output layer */
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o");
    assert_true(w->st.launched);
    w->m.loaded = true;
    EXPECT(w, "");
    w->m.ready = true;
    EXPECT(w, "");

    /* the worker dies */
    drop_peer(w, B);
    w->now_s = 0x65;
    EXPECT(w, "SET_LEDGER M model 0; STOP_HOST M; STOP_MODEL M");
    assert_true(w->st.waiting);
    assert_true(w->st.load_when_replica);
    w->m.loaded = w->m.ready = false;
    EXPECT(w, "");

    /* it comes back: a new plan id */
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-65-2");
    ready_for(w, B, "aaaaaaaa-65-2");
    EXPECT(w, "START_HOST M aaaaaaaa-65-2 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o");
    /* the driver could not start it: decided again next time */
    pp_host_failed(&w->st);
    EXPECT(w, "START_HOST M aaaaaaaa-65-2 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o");
}

/* A host with devices of its own (a GPU, issue 28) offloads every layer: the worker (RPC0,
 * first in llama.cpp's device order) takes the first layers, the host the last ones and the
 * output layer on its devices — its share spread over two devices by their memory. */
static void test_split_on_a_gpu_host(void **state)
{
    (void)state;
    world_t *w = world(800, false);
    w->n_devices = 2;
    w->device_bytes[0] = 300;
    w->device_bytes[1] = 100;
    EXPECT(w, "");
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(w, B, "aaaaaaaa-64-1");
    /* 25 slots: the worker layers 0-9 (its 10), the host 15 slots, 12 and 3 over its devices
     * (11.25 and 3.75, the remainder to the first) */
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 10,12,3 -ngl 25 --fit off] b:0-10");
    assert_int_equal(w->st.host_first, 10);
    assert_int_equal(w->st.host_end, 24);
    assert_int_equal(w->st.n_host_weights, 2);

    /* a private split keeps its first layers on the host's CPU: the CPU layout */
    world_t *p = world(800, false);
    p->n_devices = 1;
    p->device_bytes[0] = 300;
    p->split_private = true;
    EXPECT(p, "");
    peer(p, B, 500);
    EXPECT(p, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(p, B, "aaaaaaaa-64-1");
    assert_int_equal(p->st.host_first, 0);
    assert_int_equal(p->st.n_host_weights, 0);
}

/* Speeds announced by the peers and this node's own reach the election: the faster member
 * holds as many layers as its memory allows (25 slots of 44 bytes: caps 18 and 11). */
static void test_split_follows_speed(void **state)
{
    (void)state;
    static const struct {
        uint32_t self, peer;
        const char *plan, *start;
        bool aware;
    } cases[] = {
        /* this node (the host) is fast: it keeps 18 slots, the worker 7 */
        {10000, 1000, "SET_LEDGER M model 792; NEW_PLAN M aaaaaaaa-64-1",
         "START_HOST M aaaaaaaa-64-1 [--tensor-split 7 -ngl 7 --fit off] b:18-24+o", true},
        /* the worker is fast: it takes its cap of 11, the host the other 14 */
        {1000, 10000, "SET_LEDGER M model 616; NEW_PLAN M aaaaaaaa-64-1",
         "START_HOST M aaaaaaaa-64-1 [--tensor-split 11 -ngl 11 --fit off] b:14-24+o", true},
        /* within 1.5x, or one unknown: memory-proportional, as without speeds */
        {1000, 1400, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1",
         "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o", false},
        {0, 10000, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1",
         "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        world_t *w = world(800, false);
        w->speed = cases[i].self;
        peer(w, B, 500)->speed_mflops = cases[i].peer;
        EXPECT(w, cases[i].plan);
        ready_for(w, B, "aaaaaaaa-64-1");
        EXPECT(w, cases[i].start);
        assert_int_equal(w->st.speed_aware, cases[i].aware);
    }
}

/* Worker B's observed stage (stage.h): its baseline per-layer time 1 ms, now `now_ms` a layer. */
static void observe(world_t *w, double now_ms, uint32_t slots)
{
    pp_stage_t *sg = &w->stages[0];
    snprintf(sg->id, sizeof sg->id, "%s", B);
    sg->ema = (stage_ema_t){.ema_ms = now_ms * slots,
                            .samples = STAGE_MIN_SAMPLES,
                            .windows = 2,
                            .total = 1000,
                            .slots = slots,
                            .base_layer_ms = 1};
    w->m.stages = w->stages;
    w->m.n_stages = 1;
}

/* Rebalancing (plan_policy.h, rebalance.h): a running split whose worker's stage time grew 4x
 * moves layers to the host after 3 ticks in a row (the defaults: 10 s, 3 ticks, 20 %), calls
 * between ticks change nothing, and once the worker is fast again the layout stays (with equal
 * speeds every layout costs the same: no gain, no flapping). */
static void test_rebalance_moves_layers(void **state)
{
    (void)state;
    world_t *w = world(800, false);
    w->speed = 1000;
    peer(w, B, 500)->speed_mflops = 1000;
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(w, B, "aaaaaaaa-64-1");
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o");
    w->m.loaded = w->m.ready = true;
    observe(w, 4, 10); /* B: 4 ms a layer against its 1 ms baseline */
    w->now_ms = 1000;
    EXPECT(w, ""); /* tick 1 */
    assert_int_equal(w->st.rb.streak, 1);
    assert_true(w->st.cost_cand > 0 && w->st.cost_cand < w->st.cost_now);
    w->now_ms = 5000;
    EXPECT(w, ""); /* no tick */
    assert_int_equal(w->st.rb.streak, 1);
    w->now_ms = 11000;
    EXPECT(w, ""); /* tick 2 */
    w->now_ms = 21000;
    EXPECT(w, "SET_LEDGER M model 792; NEW_PLAN M aaaaaaaa-64-2"); /* tick 3: applied */
    assert_true(w->st.rebalanced);
    assert_int_equal(w->st.rb.applied, 1);
    assert_int_equal(w->st.n_applied, 1);
    assert_int_equal(w->st.applied[0].mflops, 250);
    assert_true(w->st.speed_aware);
    ready_for(w, B, w->st.plan_id);
    EXPECT(w, "START_HOST M aaaaaaaa-64-2 [--tensor-split 7 -ngl 7 --fit off] b:18-24+o");
    /* B is fast again (its EMA restarted for its new slots): the layout stays */
    observe(w, 1, w->st.workers[0].range.weight);
    for (int t = 0; t < 6; t++) {
        w->now_ms += 10000;
        EXPECT(w, "");
    }
    assert_int_equal(w->st.rb.applied, 1);
    /* a membership change re-plans at once and forgets B's applied speed when B goes */
    drop_peer(w, B);
    step(w);
    assert_int_equal(w->st.n_applied, 0);
}

/* While this node's calibration runs a replica starts (speed does not matter solo) but a split
 * waits: its layout would be redone, with a llama-server restart, once the speed is known. */
static void test_split_waits_for_calibration(void **state)
{
    (void)state;
    world_t *w = world(2000, false);
    w->st.load_when_replica = true;
    w->speed_pending = true;
    EXPECT(w, "START_REPLICA M");
    assert_int_equal(w->st.role, ELECTION_REPLICA);

    w = world(800, false);
    w->speed_pending = true;
    peer(w, B, 500);
    EXPECT(w, ""); /* nothing decided, nothing remembered */
    assert_false(w->st.planned);
    assert_int_equal(w->st.role, ELECTION_IDLE);
    w->speed_pending = false;
    w->speed = 1000;
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    assert_int_equal(w->st.role, ELECTION_HOST);
}

/* --split-private: the same layout (every repeating layer keeps its device: -ngl and the
 * weights are unchanged), but no worker holds the output layer; llama-server gets -ot with the
 * pattern that keeps every non-layer tensor on the host's CPU. The plan the worker follows
 * (and seeds its cache for) has no output layer. */
static void test_private_split(void **state)
{
    (void)state;
    world_t *w = world(800, false);
    w->split_private = true;
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(w, B, "aaaaaaaa-64-1");
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off -ot " PP_PRIVATE_OT
              "] b:15-24");
    assert_true(w->st.split_private);
    assert_false(w->st.workers[0].range.output);
    assert_int_equal(w->st.workers[0].range.weight, 10);

    election_range_t r[3] = {{.first = 3, .end = 6, .weight = 3},
                             {.first = 6, .end = 9, .output = true, .weight = 4},
                             {.first = 0, .end = 3, .weight = 3}};
    pp_private_layout(r, 2);
    assert_false(r[0].output || r[1].output);
    assert_int_equal(r[1].weight, 4);
    assert_int_equal(r[1].end, 9);
}

/* Host bytes (election.h): what only the split host holds — its draft, the input layer, with
 * --split-private the output layer — counts in the host's ledger share alone, and its layers
 * follow the memory left for them; a worker's share is layers only. */
static void test_host_bytes_in_ledger(void **state)
{
    (void)state;
    /* this node hosts with a 200-byte draft: 900 bytes of layers over 600 + 500 of memory for
     * layers; the host holds 200 + 491 (not 677), the worker 12 of 25 slots (not 10) */
    world_t *w = world(800, false);
    w->m.host_bytes = ledger_host_bytes(200, 0, 0, false);
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 691; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(w, B, "aaaaaaaa-64-1");
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 12 -ngl 12 --fit off] b:13-24+o");

    /* --split-private: the input and output layers (100 + 100) are the host's too */
    w = world(800, false);
    w->split_private = true;
    w->m.host_bytes = ledger_host_bytes(0, 100, 100, true);
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 691; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(w, B, "aaaaaaaa-64-1");
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 12 -ngl 12 --fit off -ot " PP_PRIVATE_OT
              "] b:13-24");

    /* this node is the worker of a host that announces 200 host bytes: its share is its part
     * of the 900 bytes of layers (410, not 424) */
    w = world(500, false);
    peer(w, B, 800)->available[0].host_bytes = 200;
    EXPECT(w, "SET_LEDGER M worker 410");

    /* this node's memory (800) cannot hold its host bytes (900: a big draft): the peer with the
     * file hosts although it has less memory, and this node lends its 800 as a worker */
    w = world(800, false);
    w->m.host_bytes = 900;
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M worker 677");
    assert_string_equal(w->st.host, B);
}

/* A replica whose offered memory drops below the need becomes a split host (its llama-server
 * keeps running until the plan's restart). */
static void test_memory_drops_to_split(void **state)
{
    (void)state;
    world_t *w = world(2000, true);
    peer(w, B, 500);
    EXPECT(w, "");
    assert_int_equal(w->st.role, ELECTION_REPLICA);
    w->m.offer_bytes = 800;
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    assert_int_equal(w->st.role, ELECTION_HOST);
    ready_for(w, B, "aaaaaaaa-64-1");
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o");
}

/* The group changes under a running split: a new plan, the host restarts on it, and the old
 * plan's tunnels close once llama-server is ready again. */
static void test_group_change_restarts_host(void **state)
{
    (void)state;
    world_t *w = world(800, false);
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 677; NEW_PLAN M aaaaaaaa-64-1");
    ready_for(w, B, "aaaaaaaa-64-1");
    EXPECT(w, "START_HOST M aaaaaaaa-64-1 [--tensor-split 10 -ngl 10 --fit off] b:15-24+o");
    w->m.loaded = w->m.ready = true;
    EXPECT(w, "");

    /* C joins but the group has enough: it stays a spare */
    peer(w, C, 300);
    EXPECT(w, "");
    /* B now offers less: C (more memory) replaces it; 800 + 300 = 1100 is enough */
    find(w, B)->vram_bytes = 200;
    EXPECT(w, "SET_LEDGER M model 800; NEW_PLAN M aaaaaaaa-64-2");
    assert_false(w->st.launched);
    EXPECT(w, ""); /* C is not ready: the old llama-server keeps running */
    ready_for(w, C, "aaaaaaaa-64-2");
    EXPECT(w, "START_HOST M aaaaaaaa-64-2 [--tensor-split 7 -ngl 7 --fit off] c:18-24+o");
    w->m.retired_tunnels = true;
    w->m.ready = false; /* restarting */
    EXPECT(w, "");
    w->m.ready = true;
    EXPECT(w, "CLOSE_RETIRED M");
}

/* This node as a split worker: it follows the host's announced plan, starts its rpc-server and
 * seeds its cache; when its role ends the rpc-server stops — but not while a host still
 * announces a plan that names it. */
static void test_worker_role_and_rpc_server(void **state)
{
    (void)state;
    world_t *w = world(500, false);
    peer(w, B, 800);
    /* worker share = 1100 × 500 / 1300, rounded up; the host has not announced its plan yet: idle
     */
    EXPECT(w, "SET_LEDGER M worker 424");
    assert_int_equal(w->st.role, ELECTION_IDLE);
    host_plan(w, B, "bbbbbbbb-64-1", 16, 24);
    EXPECT(w, "START_RPC_SERVER M; START_WORKER M bbbbbbbb-64-1 16-24+o");
    assert_int_equal(w->st.role, ELECTION_WORKER);
    assert_string_equal(w->st.follow_plan, "bbbbbbbb-64-1");
    w->rpc_running = true;
    w->m.seeding = true;
    EXPECT(w, "");
    w->m.seeding = false;
    snprintf(w->seeded, sizeof w->seeded, "bbbbbbbb-64-1");
    EXPECT(w, "");
    /* the rpc-server died: restarted */
    w->rpc_running = false;
    EXPECT(w, "START_RPC_SERVER M");
    w->rpc_running = true;

    /* this node gets enough memory to serve M alone: replica; the host still announces its
     * plan with this node in it, so the rpc-server stays for now */
    w->m.offer_bytes = 1200;
    w->st.load_when_replica = true;
    EXPECT(w, "SET_LEDGER M worker 0; START_REPLICA M");
    assert_int_equal(w->st.role, ELECTION_REPLICA);
    /* the host re-plans without this node: the rpc-server stops */
    find(w, B)->n_plans = 0;
    find(w, B)->serving[0].plan = NULL;
    EXPECT(w, "STOP_RPC_SERVER");
    w->rpc_running = false;
    EXPECT(w, "");
}

/* A worker whose host dies: its role ends, the ledger share goes, the rpc-server stops. */
static void test_worker_host_dies(void **state)
{
    (void)state;
    world_t *w = world(500, false);
    peer(w, B, 800);
    host_plan(w, B, "bbbbbbbb-64-1", 16, 24);
    EXPECT(w, "SET_LEDGER M worker 424; START_RPC_SERVER M; START_WORKER M bbbbbbbb-64-1 16-24+o");
    w->rpc_running = true;
    snprintf(w->seeded, sizeof w->seeded, "bbbbbbbb-64-1");
    EXPECT(w, "");
    drop_peer(w, B);
    EXPECT(w, "SET_LEDGER M worker 0; STOP_RPC_SERVER");
    assert_true(w->st.waiting);
    assert_string_equal(w->st.follow_plan, "");
}

/* A host without the file (or an unknown layer count) cannot lay the split out: it waits. */
static void test_host_without_layers_waits(void **state)
{
    (void)state;
    world_t *w = world(800, true);
    w->m.n_layers = 0;
    peer(w, B, 500);
    EXPECT(w, "SET_LEDGER M model 677; STOP_MODEL M");
    assert_true(w->st.waiting);
    assert_int_equal(w->st.role, ELECTION_HOST);
}

/* No size known anywhere: nothing to elect. */
static void test_unknown_size_is_empty(void **state)
{
    (void)state;
    world_t *w = world(2000, true);
    w->m.has_file = false;
    w->m.size_bytes = w->m.need_bytes = 0;
    EXPECT(w, "");
    assert_int_equal(w->st.mode, ELECTION_EMPTY);
    assert_true(w->st.waiting);
}

/* ---- allocation ---- */

static void alloc_peer(view_node_t *v, const char *id, const char *model, bool serving)
{
    view_node_init(v);
    snprintf(v->id, sizeof v->id, "%s", id);
    v->role = CATALOG_ROLE_WORKER;
    v->vram_bytes = 4000;
    view_avail_t *a = view_add_available(v, model);
    assert_non_null(a);
    a->size_bytes = 1000;
    if (serving) {
        view_serving_t *s = view_add_serving(v, model);
        s->member = true;
        s->role = VIEW_SERVE_REPLICA;
        s->state = VIEW_STATE_READY;
        s->http_ready = s->is_host = true;
        v->role = CATALOG_ROLE_HOST;
    }
}

static void test_allocation(void **state)
{
    (void)state;
    view_node_t peers[1];
    alloc_peer(&peers[0], B, "M", false);
    catalog_avail_t disk[] = {{.name = "M", .size_bytes = 1000}};
    pp_alloc_input_t in = {
        .id = A, .free_bytes = 2000, .disk = disk, .n_disk = 1, .peers = peers, .n_peers = 0};
    pp_alloc_state_t st = {0};
    pp_alloc_result_t r;
    pp_allocate(&in, &st, 1000, &r);
    assert_int_equal(r.kind, PP_ALLOC_LATER); /* alone */
    in.n_peers = 1;
    pp_allocate(&in, &st, 2000, &r); /* the first peer: settle */
    assert_int_equal(r.kind, PP_ALLOC_LATER);
    pp_allocate(&in, &st, 3499, &r);
    assert_int_equal(r.kind, PP_ALLOC_LATER);
    pp_allocate(&in, &st, 3500, &r);
    assert_int_equal(r.kind, PP_ALLOC_TAKE);
    assert_string_equal(r.model, "M");
    assert_string_equal(r.rule, "unserved");
    assert_true(r.has_file);
    assert_true(r.changed);

    /* served solo by a bigger node, nothing else: standby, said once */
    view_node_free(&peers[0]);
    alloc_peer(&peers[0], B, "M", true);
    pp_alloc_state_t st2 = {.first_peer_ms = 1};
    pp_allocate(&in, &st2, 5000, &r);
    in.free_bytes = 500; /* too small for another replica */
    pp_allocate(&in, &st2, 5000, &r);
    assert_int_equal(r.kind, PP_ALLOC_NONE);
    assert_true(r.changed);
    pp_allocate(&in, &st2, 5001, &r);
    assert_int_equal(r.kind, PP_ALLOC_NONE);
    assert_false(r.changed);

    /* --model X without the file: the mesh lists it, this node stands by */
    const char *rq[] = {"X"};
    in.requested = rq;
    in.n_requested = 1;
    pp_allocate(&in, &st2, 5002, &r);
    assert_int_equal(r.kind, PP_ALLOC_MISSING);
    assert_string_equal(r.model, "X");
    assert_false(r.has_file);
    view_node_free(&peers[0]);
}

/* Rule 4: a peer requests a model it cannot serve and announces where to fetch it; a joiner with
 * room and a downloader downloads it; one that cannot download, or is too small, or sees another
 * peer downloading it already, does not. */
static void test_allocation_download(void **state)
{
    (void)state;
    view_node_t peers[2];
    view_node_init(&peers[0]);
    snprintf(peers[0].id, sizeof peers[0].id, "%s", B);
    peers[0].vram_bytes = 100;
    assert_true(view_add_requested(&peers[0], "tiny"));
    view_source_t *src = view_add_source(&peers[0], "tiny", "hf://org/tiny-GGUF/tiny.gguf");
    assert_non_null(src);
    src->size_bytes = 1000;
    pp_alloc_input_t in = {.id = A, .free_bytes = 2000, .peers = peers, .n_peers = 1};
    pp_alloc_state_t st = {.first_peer_ms = 1};
    pp_alloc_result_t r;
    pp_allocate(&in, &st, 5000, &r);
    assert_int_equal(r.kind, PP_ALLOC_NONE); /* no downloader */
    in.can_download = true;
    pp_allocate(&in, &st, 5000, &r);
    assert_int_equal(r.kind, PP_ALLOC_DOWNLOAD);
    assert_string_equal(r.model, "tiny");
    assert_string_equal(r.rule, "download_and_serve");
    assert_string_equal(r.ref, "hf://org/tiny-GGUF/tiny.gguf");
    assert_int_equal(r.size_bytes, 1000);
    assert_false(r.has_file);
    /* its download failed here before: not chosen again */
    const char *failed[] = {"tiny"};
    in.failed = failed;
    in.n_failed = 1;
    pp_allocate(&in, &st, 5000, &r);
    assert_int_equal(r.kind, PP_ALLOC_NONE);
    in.n_failed = 0;
    /* too small to serve it alone (1.1 x 1000 > 1050): never downloaded */
    in.free_bytes = 1050;
    pp_allocate(&in, &st, 5001, &r);
    assert_int_equal(r.kind, PP_ALLOC_NONE);
    /* another peer downloads it already */
    in.free_bytes = 2000;
    view_node_init(&peers[1]);
    snprintf(peers[1].id, sizeof peers[1].id, "%s", C);
    peers[1].vram_bytes = 5000;
    view_download_t *d = view_add_download(&peers[1], "tiny");
    assert_non_null(d);
    d->bytes = 10;
    in.n_peers = 2;
    pp_allocate(&in, &st, 5002, &r);
    assert_int_equal(r.kind, PP_ALLOC_NONE);
    view_node_free(&peers[0]);
    view_node_free(&peers[1]);
}

static int teardown(void **state)
{
    (void)state;
    world(0, false);
    return 0;
}

static void test_source_followed(void **state)
{
    (void)state;
    assert_true(pp_source_followed("hf://org/r/a.gguf", false));
    assert_true(pp_source_followed("org/r:Q4_K_M", false));
    assert_true(pp_source_followed("Qwen2.5-0.5B-Instruct-Q4_K_M", false));
    assert_false(pp_source_followed("http://10.0.0.1/x.gguf", false));
    assert_false(pp_source_followed("https://example.com/x.gguf", false));
    assert_true(pp_source_followed("https://example.com/x.gguf", true));
    assert_false(pp_source_followed("/etc/x.gguf", true));
    assert_false(pp_source_followed("", true));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_join_solo, teardown),
        cmocka_unit_test(test_allocation_download),
        cmocka_unit_test_teardown(test_split_forms_dies_returns, teardown),
        cmocka_unit_test_teardown(test_split_on_a_gpu_host, teardown),
        cmocka_unit_test_teardown(test_split_follows_speed, teardown),
        cmocka_unit_test_teardown(test_rebalance_moves_layers, teardown),
        cmocka_unit_test_teardown(test_split_waits_for_calibration, teardown),
        cmocka_unit_test_teardown(test_private_split, teardown),
        cmocka_unit_test_teardown(test_host_bytes_in_ledger, teardown),
        cmocka_unit_test_teardown(test_memory_drops_to_split, teardown),
        cmocka_unit_test_teardown(test_group_change_restarts_host, teardown),
        cmocka_unit_test_teardown(test_worker_role_and_rpc_server, teardown),
        cmocka_unit_test_teardown(test_worker_host_dies, teardown),
        cmocka_unit_test_teardown(test_host_without_layers_waits, teardown),
        cmocka_unit_test_teardown(test_unknown_size_is_empty, teardown),
        cmocka_unit_test(test_allocation),
        cmocka_unit_test(test_source_followed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
