/* Unit tests for src/core/election.h: table-driven cases per rule and tie-break, the layer plan
 * against llama.cpp's split maths, and property tests on random groups. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"

#define G 1000000000ULL
#define UNK (-1)

/* Node ids from one hex tag character: 'a' → "aaaa…a" (64 chars). */
static const char *tag_id(char tag)
{
    static char ids[16][ELECTION_ID_LEN + 1];
    int k = tag <= '9' ? tag - '0' : tag - 'a' + 10;
    memset(ids[k], tag, ELECTION_ID_LEN);
    ids[k][ELECTION_ID_LEN] = '\0';
    return ids[k];
}

typedef struct {
    char tag;
    uint64_t vram; /* bytes */
    int32_t rtt;
    bool split;
    bool no_file;
    uint32_t speed; /* MFLOP/s, 0 unknown */
    uint64_t host;  /* host bytes (draft, input layer, private output layer) */
} tn_t;

static int run_nodes(const tn_t *tn, size_t n, uint64_t size, uint32_t layers, const int32_t *rtt,
                     election_plan_t *plan)
{
    election_node_t nodes[16];
    for (size_t i = 0; i < n; i++)
        nodes[i] = (election_node_t){tag_id(tn[i].tag), tn[i].vram,  tn[i].rtt, tn[i].split,
                                     tn[i].no_file,     tn[i].speed, tn[i].host};
    election_input_t in = {size, layers, nodes, n, rtt, 0, NULL, 0};
    return election_run(&in, plan);
}

/* "a24@10 b16 c8s d8n e8x500 f6h1.5": tag, memory in GB, @RTT ms (absent = unknown), s = --split,
 * n = no copy of the file, xN = speed N MFLOP/s (absent = unknown), hN = N GB of host bytes. */
static size_t parse_nodes(const char *spec, tn_t *tn)
{
    size_t n = 0;
    for (const char *p = spec; *p;) {
        while (*p == ' ')
            p++;
        if (!*p) break;
        char *end;
        tn[n] = (tn_t){.tag = *p++, .rtt = UNK};
        tn[n].vram = strtoull(p, &end, 10) * G;
        p = end;
        if (*p == '@') {
            tn[n].rtt = (int32_t)strtol(p + 1, &end, 10);
            p = end;
        }
        if (*p == 's') {
            tn[n].split = true;
            p++;
        }
        if (*p == 'n') {
            tn[n].no_file = true;
            p++;
        }
        if (*p == 'x') {
            tn[n].speed = (uint32_t)strtoul(p + 1, &end, 10);
            p = end;
        }
        if (*p == 'h') {
            tn[n].host = (uint64_t)(strtod(p + 1, &end) * (double)G);
            p = end;
        }
        n++;
    }
    return n;
}

static int run_spec(const char *spec, uint64_t size, uint32_t layers, const int32_t *rtt,
                    election_plan_t *plan)
{
    tn_t tn[16];
    return run_nodes(tn, parse_nodes(spec, tn), size, layers, rtt, plan);
}

/* "first-end[*]" per member ('*' = holds the output layer), space separated. */
static const char *ranges(const election_plan_t *p)
{
    static char buf[256];
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < p->n_members; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%u-%u%s", i ? " " : "",
                                p->members[i].layer_first, p->members[i].layer_end,
                                p->members[i].output_layer ? "*" : "");
    return buf;
}

static void check_members(const election_plan_t *p, const char *tags, const char *what)
{
    char got[32] = "";
    for (size_t i = 0; i < p->n_members && i < sizeof got - 1; i++)
        got[i] = p->members[i].id[0];
    got[p->n_members < sizeof got ? p->n_members : sizeof got - 1] = '\0';
    if (strcmp(got, tags) != 0) fail_msg("%s: members '%s', expected '%s'", what, got, tags);
}

typedef struct {
    const char *what;
    uint64_t size_gb;
    uint32_t layers;
    const char *nodes;
    election_mode_t mode;
    const char *members; /* expected member tags in plan order ("" none) */
    const char *split;   /* expected --tensor-split, NULL when not checked */
} ecase_t;

/* size 10 GB → need 11 GB unless noted */
/* clang-format off */
static const ecase_t cases[] = {
    /* rule 1: solo */
    {"one node fits", 10, 0, "a24", ELECTION_SOLO, "a", NULL},
    {"exactly 1.1x fits", 10, 0, "a11", ELECTION_SOLO, "a", NULL},
    {"every fitting node is a replica, larger first", 10, 0, "a12 b16 c11",
     ELECTION_SOLO, "bac", NULL},
    {"replicas of equal memory: larger id first", 10, 0, "a12 c12 b12", ELECTION_SOLO, "cba", NULL},
    {"a node that does not fit is idle when another fits", 10, 0, "a8@5 b12",
     ELECTION_SOLO, "b", NULL},
    /* rule 2: split */
    {"split: host = max memory, closest worker first", 10, 0, "a4@30 b4@10 c8 d4@20",
     ELECTION_SPLIT, "bc", "3814,7629"},
    {"split: greedy until >= need (22), in RTT order", 20, 0, "a6@30 b6@10 c8 d6@20 e6@5",
     ELECTION_SPLIT, "ebdc", NULL},
    {"split: host tie on memory goes to the larger id", 10, 0, "a6@10 b6@10",
     ELECTION_SPLIT, "ab", NULL},
    {"split: RTT 80 is excluded, 79 kept", 10, 0, "a6@80 b6@79 c7", ELECTION_SPLIT, "bc", NULL},
    {"split: unknown RTT sorts after every known one", 10, 0, "a6 b6@70 c7",
     ELECTION_SPLIT, "bc", NULL},
    {"split: unknown RTTs are still candidates", 10, 0, "a6 c7", ELECTION_SPLIT, "ac", NULL},
    {"split: RTT tie -> larger memory, then larger id", 10, 0, "a3@10 b4@10 d3@10 e5",
     ELECTION_SPLIT, "bde", NULL},
    {"split: nodes without memory are never workers", 10, 0, "a0@1 b6@50 c7",
     ELECTION_SPLIT, "bc", NULL},
    /* rule 3: impossible */
    {"impossible: not enough memory in the group (33)", 30, 0, "a6@10 b6 c7",
     ELECTION_IMPOSSIBLE, "abc", NULL},
    {"impossible: the memory is too far away", 10, 0, "a6@200 b7", ELECTION_IMPOSSIBLE, "b", NULL},
    {"impossible: nobody has memory", 10, 0, "a0@1 b0@1", ELECTION_IMPOSSIBLE, "b", NULL},
    /* rule 4: --split */
    {"--split on the host: one worker although it fits", 10, 0, "a24s b16@40 c16@10",
     ELECTION_SPLIT, "ca", NULL},
    {"--split on a worker also forces the split", 10, 0, "a24 b16@40s", ELECTION_SPLIT, "ba", NULL},
    {"--split, host short: greedy continues until need (33)", 30, 0, "a14s b12@40 c12@10",
     ELECTION_SPLIT, "cba", NULL},
    {"--split without eligible worker: solo", 10, 0, "a24s b16@90", ELECTION_SOLO, "ab", NULL},
    {"--split alone: solo", 10, 0, "a24s", ELECTION_SOLO, "a", NULL},
    {"--split alone, too small: impossible", 10, 0, "a2s", ELECTION_IMPOSSIBLE, "a", NULL},
    /* layers */
    {"layers: 2 equal members, 32 layers", 10, 32, "a6@10 b6@10", ELECTION_SPLIT, "ab", "17,16"},
    {"layers: 4/4/8, 10 layers (need 14.3)", 13, 10, "a4@10 b4@20 c8",
     ELECTION_SPLIT, "abc", "3,3,5"},
    {"layers: more members than layers", 10, 1, "a4@10 b4@20 c4", ELECTION_SPLIT, "abc", "1,1,0"},
    /* speed (11 slots of 1 GB: need 11 GB, 10 layers + output) */
    {"speed unknown: memory-proportional", 10, 10, "a9@10 b9", ELECTION_SPLIT, "ab", "6,5"},
    {"speed of one member unknown: memory-proportional", 10, 10, "a9@10x1000 b9",
     ELECTION_SPLIT, "ab", "6,5"},
    {"speeds within 1.5x: memory-proportional", 10, 10, "a9@10x1000 b9x700",
     ELECTION_SPLIT, "ab", "6,5"},
    {"fast worker: takes what its memory allows", 10, 10, "a9@10x1000 b9x100",
     ELECTION_SPLIT, "ab", "9,2"},
    {"slow worker: keeps what memory forces on it", 10, 10, "a9@10x100 b9x1000",
     ELECTION_SPLIT, "ab", "2,9"},
    {"exactly 1.5x: speed-aware", 10, 10, "a9@10x150 b9x100", ELECTION_SPLIT, "ab", "9,2"},
    {"three members: fastest, then next, slowest last", 10, 10, "a4@10x100 b4@20x1000 c4x500",
     ELECTION_SPLIT, "abc", "3,4,4"},
    {"three, proportional for comparison", 10, 10, "a4@10 b4@20 c4", ELECTION_SPLIT, "abc",
     "4,4,3"},
    {"tight memory: speed cannot move layers", 10, 10, "a5@10x100 b6x1000", ELECTION_SPLIT,
     "ab", "5,6"},
};
/* clang-format on */

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ecase_t *c = &cases[i];
        tn_t tn[16];
        size_t n = parse_nodes(c->nodes, tn);
        election_plan_t p;
        int rc = run_nodes(tn, n, c->size_gb * G, c->layers, NULL, &p);
        if (rc != 0) fail_msg("%s: rc %d", c->what, rc);
        if (p.mode != c->mode)
            fail_msg("%s: mode %s, expected %s", c->what, election_mode_name(p.mode),
                     election_mode_name(c->mode));
        check_members(&p, c->members, c->what);
        char buf[128];
        if (c->split) {
            assert_true(election_tensor_split(&p, buf, sizeof buf) > 0);
            if (strcmp(buf, c->split) != 0)
                fail_msg("%s: split '%s', expected '%s'", c->what, buf, c->split);
        } else if (p.mode != ELECTION_SPLIT) {
            assert_int_equal(election_tensor_split(&p, buf, sizeof buf), -EINVAL);
        }
        assert_int_equal(p.need_bytes, election_need_bytes(c->size_gb * G));
        election_plan_free(&p);
    }
    /* one byte under 1.1 × size */
    tn_t tn = {'a', 11 * G - 1, UNK, false, false, 0, 0};
    election_plan_t p;
    assert_int_equal(run_nodes(&tn, 1, 10 * G, 0, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_IMPOSSIBLE);
    election_plan_free(&p);
}

static void test_need_bytes(void **state)
{
    (void)state;
    assert_int_equal(election_need_bytes(0), 0);
    assert_int_equal(election_need_bytes(1), 2); /* ceil(1.1) */
    assert_int_equal(election_need_bytes(9), 10);
    assert_int_equal(election_need_bytes(10), 11);
    assert_int_equal(election_need_bytes(11), 13); /* ceil(12.1) */
    assert_int_equal(election_need_bytes(100), 110);
    assert_int_equal(election_need_bytes(10 * G), 11 * G);
    assert_int_equal(election_need_bytes(UINT64_MAX), UINT64_MAX);
    assert_int_equal(election_need_bytes(UINT64_MAX / 11 * 10), UINT64_MAX / 11 * 11);
}

static void test_roles_and_fields(void **state)
{
    (void)state;
    election_plan_t p;
    assert_int_equal(run_spec("a4@30 b4@10 c8 d4@20", 10 * G, 0, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_SPLIT);
    assert_false(p.forced);
    assert_int_equal(p.host_index, 1);
    assert_string_equal(election_host(&p)->id, tag_id('c'));
    assert_int_equal(election_role_of(&p, tag_id('c')), ELECTION_HOST);
    assert_int_equal(election_role_of(&p, tag_id('b')), ELECTION_WORKER);
    assert_int_equal(election_role_of(&p, tag_id('a')), ELECTION_IDLE);
    assert_int_equal(election_role_of(&p, "nobody"), ELECTION_IDLE);
    assert_int_equal(p.members[0].rtt_ms, 10);
    assert_int_equal(p.members[1].rtt_ms, 0);
    assert_int_equal(p.total_bytes, 12 * G);
    assert_true(p.members[0].share > 0.333 && p.members[0].share < 0.334);
    assert_true(p.members[1].share > 0.666 && p.members[1].share < 0.667);
    /* no layer count: weights are MiB, no ranges */
    assert_int_equal(p.members[0].weight, (uint32_t)((4 * G) >> 20));
    assert_int_equal(p.members[0].layer_end, 0);
    election_plan_free(&p);
    assert_null(p.members);

    assert_int_equal(run_spec("a24 b8@5", 10 * G, 28, NULL, &p), 0);
    assert_int_equal(election_role_of(&p, tag_id('a')), ELECTION_REPLICA);
    assert_int_equal(election_role_of(&p, tag_id('b')), ELECTION_IDLE);
    assert_null(election_host(&p));
    assert_true(p.members[0].share == 1.0);
    election_plan_free(&p);

    assert_int_equal(run_spec("a24s b16@40", 10 * G, 0, NULL, &p), 0);
    assert_true(p.forced);
    election_plan_free(&p);

    /* impossible: host named, nobody has a role yet */
    assert_int_equal(run_spec("a2@10 b3", 10 * G, 0, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_IMPOSSIBLE);
    assert_string_equal(election_host(&p)->id, tag_id('b'));
    assert_int_equal(election_role_of(&p, tag_id('b')), ELECTION_IDLE);
    assert_int_equal(p.total_bytes, 5 * G);
    election_plan_free(&p);
}

/* The host runs llama-server on its own copy of the file: a node without one never hosts while
 * a member with the file can (it still lends its memory as a worker). */
static void test_host_has_the_file(void **state)
{
    (void)state;
    election_plan_t p;
    /* equal memory: the larger id would host, but it has no file */
    assert_int_equal(run_spec("a6 b6n", 10 * G, 0, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_SPLIT);
    assert_string_equal(election_host(&p)->id, tag_id('a'));
    assert_int_equal(election_role_of(&p, tag_id('b')), ELECTION_WORKER);
    election_plan_free(&p);
    /* more memory without the file: still a worker */
    assert_int_equal(run_spec("a4 b8n", 10 * G, 0, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_SPLIT);
    assert_string_equal(election_host(&p)->id, tag_id('a'));
    election_plan_free(&p);
    /* with the file: the usual order (memory, then id) */
    assert_int_equal(run_spec("a6 b6", 10 * G, 0, NULL, &p), 0);
    assert_string_equal(election_host(&p)->id, tag_id('b'));
    election_plan_free(&p);
    /* nobody has the file: the usual order among them (the plan waits for a file elsewhere) */
    assert_int_equal(run_spec("a6n b6n", 10 * G, 0, NULL, &p), 0);
    assert_string_equal(election_host(&p)->id, tag_id('b'));
    election_plan_free(&p);
}

static void test_layers_edge(void **state)
{
    (void)state;
    election_plan_t p;
    char buf[64];
    /* more members than layers: the host holds nothing, the output goes to the last holder */
    assert_int_equal(run_spec("a4@10 b4@20 c4", 10 * G, 1, NULL, &p), 0);
    assert_int_equal(election_tensor_split(&p, buf, sizeof buf), 5);
    assert_string_equal(buf, "1,1,0");
    assert_string_equal(ranges(&p), "0-1 1-1* 1-1");
    /* buffer too small */
    assert_int_equal(election_tensor_split(&p, buf, 5), -ENOSPC);
    assert_string_equal(buf, "");
    assert_int_equal(election_tensor_split(&p, buf, 0), -ENOSPC);
    election_plan_free(&p);
    /* 4/4/8 GB over 10 layers: ceil(11 × 4/16) = 3, ceil(11 × 8/16) = 6, 11 */
    assert_int_equal(run_spec("a4@10 b4@20 c8", 13 * G, 10, NULL, &p), 0);
    assert_string_equal(ranges(&p), "0-3 3-6 6-10*");
    election_plan_free(&p);
    /* 2 × 6 GB over 32 layers: ceil(33 / 2) = 17 on the worker, 15 + output on the host */
    assert_int_equal(run_spec("a6@10 b6@10", 10 * G, 32, NULL, &p), 0);
    assert_string_equal(ranges(&p), "0-17 17-32*");
    election_plan_free(&p);
    /* solo: every replica holds everything */
    assert_int_equal(run_spec("a24 b12", 10 * G, 28, NULL, &p), 0);
    assert_string_equal(ranges(&p), "0-28* 0-28*");
    election_plan_free(&p);
}

static void test_rtt_matrix(void **state)
{
    (void)state;
    /* host c (8G); a and b 4G each; need 11G → one worker. */
    const char *tn = "a4@1 b4@1 c8@0";
    election_plan_t p;
    /* the host's view wins: c measured a 50, b 20 (per-node rtt_ms is ignored) */
    int32_t m1[9] = {-1, -1, 5, -1, -1, 60, 50, 20, -1};
    assert_int_equal(run_spec(tn, 10 * G, 0, m1, &p), 0);
    check_members(&p, "bc", "host view");
    assert_int_equal(p.members[0].rtt_ms, 20);
    election_plan_free(&p);
    /* host has no measurement: the worker's own view of the host */
    int32_t m2[9] = {-1, -1, 30, -1, -1, 10, -1, -1, -1};
    assert_int_equal(run_spec(tn, 10 * G, 0, m2, &p), 0);
    check_members(&p, "bc", "worker view");
    election_plan_free(&p);
    /* neither side measured: unknown, after a known one (both needed for 14 GB) */
    int32_t m3[9] = {-1, -1, -1, -1, -1, 10, -1, -1, -1};
    assert_int_equal(run_spec(tn, 14 * G, 0, m3, &p), 0);
    check_members(&p, "bac", "unknown");
    assert_int_equal(p.members[0].rtt_ms, 10);
    assert_int_equal(p.members[1].rtt_ms, -1);
    election_plan_free(&p);
    /* the host's view says too far: excluded even though the worker measured less */
    int32_t m5[9] = {-1, -1, 5, -1, -1, 10, 100, -1, -1};
    assert_int_equal(run_spec(tn, 10 * G, 0, m5, &p), 0);
    check_members(&p, "bc", "host says far");
    election_plan_free(&p);
    int32_t m4[9] = {-1, -1, -1, -1, -1, -1, 100, 85, -1};
    assert_int_equal(run_spec(tn, 10 * G, 0, m4, &p), 0);
    assert_int_equal(p.mode, ELECTION_IMPOSSIBLE);
    check_members(&p, "c", "all far");
    election_plan_free(&p);
}

static void test_invalid(void **state)
{
    (void)state;
    election_plan_t p;
    election_node_t nodes[2] = {{tag_id('a'), G, 1, false, false, 0, 0},
                                {tag_id('b'), G, 1, false, false, 0, 0}};
    election_input_t in = {10 * G, 0, nodes, 2, NULL, 0, NULL, 0};
    assert_int_equal(election_run(NULL, &p), -EINVAL);
    assert_int_equal(election_run(&in, NULL), -EINVAL);
    in.model_bytes = 0;
    assert_int_equal(election_run(&in, &p), -EINVAL);
    in.model_bytes = 10 * G;
    in.n_layers = ELECTION_MAX_LAYERS + 1;
    assert_int_equal(election_run(&in, &p), -EINVAL);
    in.n_layers = ELECTION_MAX_LAYERS;
    assert_int_equal(election_run(&in, &p), 0);
    election_plan_free(&p);
    in.n_layers = 0;
    nodes[1].id = tag_id('a'); /* duplicate */
    assert_int_equal(election_run(&in, &p), -EINVAL);
    assert_null(p.members);
    char upper[65], nonhex[65], longer[66];
    memset(upper, 'A', 64);
    upper[64] = '\0';
    memset(nonhex, 'a', 64);
    nonhex[10] = 'g';
    nonhex[64] = '\0';
    memset(longer, 'a', 65);
    longer[65] = '\0';
    const char *bad[] = {NULL, "", "abc", upper, nonhex, longer};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nodes[1].id = bad[i];
        assert_int_equal(election_run(&in, &p), -EINVAL);
    }
    in.nodes = NULL;
    assert_int_equal(election_run(&in, &p), -EINVAL);
    in.n_nodes = ELECTION_MAX_NODES + 1;
    in.nodes = nodes;
    assert_int_equal(election_run(&in, &p), -E2BIG);
    /* no node: empty */
    in.n_nodes = 0;
    assert_int_equal(election_run(&in, &p), 0);
    assert_int_equal(p.mode, ELECTION_EMPTY);
    assert_int_equal(p.n_members, 0);
    assert_int_equal(election_role_of(&p, tag_id('a')), ELECTION_IDLE);
    election_plan_free(&p);
    election_plan_free(NULL);
    assert_string_equal(election_mode_name(ELECTION_EMPTY), "empty");
    assert_string_equal(election_mode_name(ELECTION_SOLO), "solo");
    assert_string_equal(election_mode_name(ELECTION_SPLIT), "split");
    assert_string_equal(election_mode_name(ELECTION_IMPOSSIBLE), "impossible");
    assert_string_equal(election_role_name(ELECTION_IDLE), "idle");
    assert_string_equal(election_role_name(ELECTION_REPLICA), "replica");
    assert_string_equal(election_role_name(ELECTION_HOST), "host");
    assert_string_equal(election_role_name(ELECTION_WORKER), "worker");
}

/* ------------------------------------------------------------------------------------------
 * Property tests
 * ---------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static uint64_t rnd_below(uint64_t n)
{
    return rnd() % n;
}

/* llama.cpp's assignment of layer il (0..L) for a --tensor-split vector, with its float maths:
 * the first device whose normalised cumulative split is > il / (L + 1). */
static size_t llama_device_of(const uint32_t *w, size_t n, uint32_t L, uint32_t il)
{
    float splits[64], sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        sum += (float)w[i];
        splits[i] = sum;
    }
    for (size_t i = 0; i < n; i++)
        splits[i] /= sum;
    float x = (float)il / (float)(L + 1);
    size_t j = 0;
    while (j < n && !(splits[j] > x))
        j++;
    return j;
}

static void check_plan(const election_input_t *in, const election_plan_t *p)
{
    size_t n = in->n_nodes;
    uint64_t need = p->need_bytes;
    bool forced = false, any_fit = false;
    const election_node_t *best = NULL;
    for (size_t i = 0; i < n; i++) {
        const election_node_t *x = &in->nodes[i];
        forced |= x->force_split;
        any_fit |= x->vram_bytes >= need;
        /* host order: the file, then memory that holds its host bytes, then memory, then id */
        int xh = 2 * !x->no_file + (x->vram_bytes >= x->host_bytes);
        int bh = best ? 2 * !best->no_file + (best->vram_bytes >= best->host_bytes) : -1;
        if (xh > bh ||
            (xh == bh && (x->vram_bytes > best->vram_bytes ||
                          (x->vram_bytes == best->vram_bytes && strcmp(x->id, best->id) > 0))))
            best = x;
    }
    if (p->mode == ELECTION_SOLO) {
        size_t fit = 0;
        for (size_t i = 0; i < n; i++)
            fit += in->nodes[i].vram_bytes >= need;
        assert_int_equal(p->n_members, fit); /* every fitting node is a replica */
        for (size_t i = 0; i < p->n_members; i++) {
            assert_true(p->members[i].vram_bytes >= need);
            assert_int_equal(p->members[i].role, ELECTION_REPLICA);
            if (i) assert_true(p->members[i - 1].vram_bytes >= p->members[i].vram_bytes);
        }
        return;
    }
    assert_true(p->mode == ELECTION_SPLIT || p->mode == ELECTION_IMPOSSIBLE);
    if (!forced) assert_false(any_fit);
    const election_member_t *h = election_host(p);
    assert_non_null(h);
    assert_int_equal(p->host_index, p->n_members - 1);
    assert_string_equal(h->id, best->id); /* host = max memory, ties to the larger id */
    uint64_t hb = best->host_bytes < need ? best->host_bytes : need;
    assert_int_equal(p->host_bytes, hb);
    assert_int_equal(p->layer_bytes, need - hb);
    uint64_t sum = 0;
    for (size_t i = 0; i < p->n_members; i++) {
        const election_member_t *m = &p->members[i];
        sum += m->vram_bytes;
        if (i == p->host_index) continue;
        assert_int_equal(m->role, ELECTION_WORKER);
        assert_true(m->rtt_ms < ELECTION_MAX_RTT_MS);
        assert_true(m->vram_bytes > 0);
        if (i > 0) { /* RTT ascending, unknown last */
            int32_t a = p->members[i - 1].rtt_ms, b = m->rtt_ms;
            if (a < 0)
                assert_true(b < 0);
            else if (b >= 0)
                assert_true(a <= b);
        }
    }
    assert_int_equal(sum, p->total_bytes);
    if (p->mode == ELECTION_IMPOSSIBLE) {
        assert_true(sum < need || best->vram_bytes < best->host_bytes);
        return;
    }
    assert_true(sum >= need); /* members' memory >= 1.1 x size */
    /* no over-commit: every member's bytes fit its memory; the host holds its host bytes;
     * together they hold the need (each part rounded up) */
    uint64_t held = 0;
    for (size_t i = 0; i < p->n_members; i++) {
        assert_true(p->members[i].bytes <= p->members[i].vram_bytes);
        held += p->members[i].bytes;
    }
    assert_true(h->bytes >= hb);
    assert_true(held >= need && held <= need + p->n_members);
    assert_true(p->n_members >= 2);
    /* minimal: without the last worker it would not be enough (unless --split needs one) */
    uint64_t without = sum - p->members[p->n_members - 2].vram_bytes;
    if (!(forced && p->n_members == 2)) assert_true(without < need);
    if (p->n_layers == 0) return;
    /* layers: contiguous, cover 0..L-1, output once; llama.cpp reproduces them from weights */
    uint32_t w[64], next = 0, total = 0;
    size_t outs = 0;
    for (size_t i = 0; i < p->n_members; i++) {
        const election_member_t *m = &p->members[i];
        w[i] = m->weight;
        total += m->weight;
        assert_int_equal(m->layer_first, next);
        assert_true(m->layer_end >= m->layer_first);
        next = m->layer_end;
        outs += m->output_layer;
        assert_int_equal(m->weight, m->layer_end - m->layer_first + m->output_layer);
    }
    assert_int_equal(next, p->n_layers);
    assert_int_equal(outs, 1);
    assert_int_equal(total, p->n_layers + 1);
    for (uint32_t il = 0; il <= p->n_layers; il++) {
        size_t d = llama_device_of(w, p->n_members, p->n_layers, il);
        assert_true(d < p->n_members);
        const election_member_t *m = &p->members[d];
        if (il < p->n_layers)
            assert_true(il >= m->layer_first && il < m->layer_end);
        else
            assert_true(m->output_layer);
    }
}

static bool plans_equal(const election_plan_t *a, const election_plan_t *b)
{
    if (a->mode != b->mode || a->n_members != b->n_members || a->total_bytes != b->total_bytes ||
        a->forced != b->forced)
        return false;
    for (size_t i = 0; i < a->n_members; i++) {
        const election_member_t *x = &a->members[i], *y = &b->members[i];
        if (strcmp(x->id, y->id) || x->role != y->role || x->rtt_ms != y->rtt_ms ||
            x->weight != y->weight || x->layer_first != y->layer_first ||
            x->layer_end != y->layer_end || x->output_layer != y->output_layer ||
            x->bytes != y->bytes)
            return false;
    }
    return true;
}

static void test_random_properties(void **state)
{
    (void)state;
    enum { N = 12 };
    char ids[N][ELECTION_ID_LEN + 1];
    size_t seen[4] = {0}, forced = 0, layered = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 1 + rnd_below(N);
        election_node_t nodes[N], shuffled[N];
        int32_t matrix[N * N], pmatrix[N * N];
        size_t perm[N];
        uint64_t unit = rnd_below(2) ? G : 1 + rnd_below(1000);
        for (size_t i = 0; i < n; i++) {
            /* few distinct ids/values so ties happen */
            snprintf(ids[i], sizeof ids[i], "%064llx", (unsigned long long)(rnd_below(4) + 16 * i));
            int32_t r = (int32_t)rnd_below(130) - 20; /* -20..109: unknown, near, far */
            nodes[i] = (election_node_t){ids[i],
                                         (rnd_below(5) == 0 ? 0 : rnd_below(8) + 1) * unit,
                                         r,
                                         rnd_below(8) == 0,
                                         false,
                                         0,
                                         rnd_below(3) == 0 ? rnd_below(5) * unit : 0};
            perm[i] = i;
        }
        for (size_t i = 0; i < n * n; i++)
            matrix[i] = (int32_t)rnd_below(130) - 40;
        election_input_t in = {(1 + rnd_below(24)) * unit,
                               (uint32_t)rnd_below(3) * 20 + rnd_below(4),
                               nodes,
                               n,
                               rnd_below(2) ? matrix : NULL,
                               0,
                               NULL,
                               0};
        election_plan_t p, q;
        assert_int_equal(election_run(&in, &p), 0);
        check_plan(&in, &p);
        seen[p.mode]++;
        forced += p.forced;
        layered += p.mode == ELECTION_SPLIT && p.n_layers > 0;
        /* same inputs in another order → same plan */
        for (size_t i = n; i > 1; i--) {
            size_t j = rnd_below(i), t = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = t;
        }
        for (size_t i = 0; i < n; i++) {
            shuffled[i] = nodes[perm[i]];
            for (size_t j = 0; j < n; j++)
                pmatrix[i * n + j] = matrix[perm[i] * n + perm[j]];
        }
        election_input_t in2 = in;
        in2.nodes = shuffled;
        if (in.rtt) in2.rtt = pmatrix;
        assert_int_equal(election_run(&in2, &q), 0);
        assert_true(plans_equal(&p, &q));
        election_plan_free(&p);
        election_plan_free(&q);
    }
    /* the generator reaches every outcome */
    assert_true(seen[ELECTION_SOLO] > 300 && seen[ELECTION_SPLIT] > 300 &&
                seen[ELECTION_IMPOSSIBLE] > 300);
    assert_true(forced > 50 && layered > 200);
}

/* llama.cpp with a CPU host (src/llama-model.cpp): layer il of 0..L stays on the CPU when
 * il < L + 1 - ngl, else goes to the RPC device chosen by --tensor-split over the offloaded
 * slots. The CPU layout must reproduce the ranges it announces to the workers. */
static void check_cpu_layout(const election_plan_t *p)
{
    election_range_t r[16];
    uint32_t ngl = 0;
    assert_int_equal(election_cpu_layout(p, r, &ngl), 0);
    uint32_t L = p->n_layers, nw = (uint32_t)p->n_members - 1, w[16];
    for (uint32_t k = 0; k < nw; k++)
        w[k] = r[k].weight;
    uint32_t start = L + 1 - ngl, covered = 0;
    assert_int_equal(r[nw].first, 0);
    for (uint32_t il = 0; il <= L; il++) {
        size_t dev;
        if (il < start) {
            dev = nw; /* the host's CPU */
        } else {
            float splits[16], sum = 0.0f;
            for (uint32_t k = 0; k < nw; k++)
                splits[k] = (sum += (float)w[k]);
            for (uint32_t k = 0; k < nw; k++)
                splits[k] /= sum;
            float x = (float)(il - start) / (float)ngl;
            dev = 0;
            while (dev < nw && !(splits[dev] > x))
                dev++;
            assert_true(dev < nw);
        }
        const election_range_t *m = &r[dev];
        if (il == L)
            assert_true(m->output);
        else
            assert_true(il >= m->first && il < m->end);
        covered++;
    }
    assert_int_equal(covered, L + 1);
    uint32_t total = 0;
    for (uint32_t k = 0; k <= nw; k++)
        total += r[k].weight;
    assert_int_equal(total, L + 1);
}

static void range_is(const election_range_t *r, uint32_t first, uint32_t end, bool output)
{
    assert_int_equal(r->first, first);
    assert_int_equal(r->end, end);
    assert_int_equal(r->output, output);
}

/* llama.cpp with every layer offloaded (-ngl L + 1) to the devices [RPC0..RPCn-1, the host's]:
 * layer il goes to the first device whose normalised cumulative split exceeds il / (L + 1). The
 * device layout must reproduce the ranges it announces. */
static void check_device_layout(const election_plan_t *p)
{
    election_range_t r[16];
    uint32_t ngl = 0;
    assert_int_equal(election_device_layout(p, r, &ngl), 0);
    uint32_t L = p->n_layers, n = (uint32_t)p->n_members;
    assert_int_equal(ngl, L + 1);
    float splits[16], sum = 0.0f;
    for (uint32_t k = 0; k < n; k++)
        splits[k] = (sum += (float)r[k].weight);
    for (uint32_t k = 0; k < n; k++)
        splits[k] /= sum;
    assert_int_equal(r[0].first, 0);
    assert_true(r[n - 1].output); /* the host, last, holds the output layer */
    for (uint32_t il = 0; il <= L; il++) {
        float x = (float)il / (float)(L + 1);
        size_t dev = 0;
        while (dev < n && !(splits[dev] > x))
            dev++;
        assert_true(dev < n);
        if (il == L)
            assert_true(r[dev].output);
        else
            assert_true(il >= r[dev].first && il < r[dev].end);
    }
}

static void test_device_layout(void **state)
{
    (void)state;
    election_plan_t p;
    /* two equal nodes, 5 layers: the worker (RPC0) takes 0-2, the host 3-4 + output, all
     * offloaded */
    assert_int_equal(run_spec("a1 b1", 1500000000ULL, 5, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_SPLIT);
    election_range_t r[2];
    uint32_t ngl;
    assert_int_equal(election_device_layout(&p, r, &ngl), 0);
    assert_int_equal(ngl, 6);
    range_is(&r[0], 0, 3, false);
    range_is(&r[1], 3, 5, true);
    check_device_layout(&p);
    election_plan_free(&p);
    assert_int_equal(run_spec("a4", 1 * G, 5, NULL, &p), 0);
    assert_int_equal(election_device_layout(&p, r, &ngl), -EINVAL);
    election_plan_free(&p);
    /* random splits: llama.cpp's placement matches the ranges */
    size_t checked = 0;
    for (unsigned seed = 1; seed <= 400; seed++) {
        char spec[128];
        unsigned nn = 2 + seed % 5, L = 1 + (seed * 7) % 40;
        size_t off = 0;
        for (unsigned k = 0; k < nn; k++)
            off += (size_t)snprintf(spec + off, sizeof spec - off, "%s%c%u", k ? " " : "",
                                    (char)('a' + k), 1 + (seed * (k + 3)) % 4);
        if (run_spec(spec, (uint64_t)nn * G, L, NULL, &p) == 0 && p.mode == ELECTION_SPLIT) {
            check_device_layout(&p);
            checked++;
        }
        election_plan_free(&p);
    }
    assert_true(checked > 100);
}

/* A host's slots over its own devices, by free memory (table) */
static void test_spread(void **state)
{
    (void)state;
    static const struct {
        uint32_t slots;
        uint64_t bytes[3];
        size_t n;
        uint32_t want[3];
    } rows[] = {
        {6, {100}, 1, {6}},
        {6, {100, 100}, 2, {3, 3}},
        {7, {100, 100}, 2, {4, 3}}, /* the remainder to the first */
        {6, {300, 100, 200}, 3, {3, 1, 2}},
        {5, {0, 0}, 2, {3, 2}}, /* no memory known: evenly */
        {0, {5, 5}, 2, {0, 0}},
        {10, {UINT64_MAX, UINT64_MAX}, 2, {5, 5}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint32_t out[3] = {99, 99, 99};
        election_spread(rows[i].slots, rows[i].bytes, rows[i].n, out);
        for (size_t k = 0; k < rows[i].n; k++)
            if (out[k] != rows[i].want[k]) fail_msg("row %zu device %zu: %u", i, k, out[k]);
    }
}

static void test_cpu_layout(void **state)
{
    (void)state;
    election_plan_t p;
    /* two equal nodes, 5 layers (stories260K): host keeps 0-2, the worker 3-4 + output */
    assert_int_equal(run_spec("a1 b1", 1500000000ULL, 5, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_SPLIT);
    election_range_t r[2];
    uint32_t ngl;
    assert_int_equal(election_cpu_layout(&p, r, &ngl), 0);
    assert_int_equal(ngl, 3);
    range_is(&r[1], 0, 3, false);
    range_is(&r[0], 3, 5, true);
    check_cpu_layout(&p);
    election_plan_free(&p);
    /* not a split, or no layer count: refused */
    assert_int_equal(run_spec("a4", 1 * G, 5, NULL, &p), 0);
    assert_int_equal(election_cpu_layout(&p, r, &ngl), -EINVAL);
    election_plan_free(&p);
    assert_int_equal(run_spec("a1 b1", 1500000000ULL, 0, NULL, &p), 0);
    assert_int_equal(election_cpu_layout(&p, r, &ngl), -EINVAL);
    election_plan_free(&p);
    /* random splits: llama.cpp's placement matches the announced ranges */
    size_t checked = 0, speed_checked = 0;
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = 2 + rnd_below(6);
        tn_t tn[8];
        for (size_t i = 0; i < n; i++)
            tn[i] = (tn_t){.tag = "abcdef12"[i],
                           .vram = (1 + rnd_below(9)) * G,
                           .rtt = UNK,
                           .speed = iter % 2 ? 0 : 100 + (uint32_t)rnd_below(2000),
                           .host = rnd_below(3) ? 0 : rnd_below(3) * G};
        uint64_t size = 0;
        for (size_t i = 0; i < n; i++)
            size += tn[i].vram;
        size = size * 8 / 10; /* fits together, usually not alone */
        if (run_nodes(tn, n, size, 1 + (uint32_t)rnd_below(80), NULL, &p) != 0) continue;
        if (p.mode == ELECTION_SPLIT) {
            check_cpu_layout(&p);
            checked++;
            /* speed-aware: no member holds more slots than its memory for layers (the host's
             * less its host bytes); no member's bytes exceed its memory */
            uint64_t slots = (uint64_t)p.n_layers + 1;
            uint64_t slot_bytes = (p.layer_bytes + slots - 1) / slots;
            for (size_t i = 0; i < p.n_members; i++) {
                const election_member_t *m = &p.members[i];
                uint64_t cap = m->vram_bytes - (i == p.host_index ? p.host_bytes : 0);
                if (p.speed_aware) assert_true(m->weight * slot_bytes <= cap);
                assert_true(m->bytes <= m->vram_bytes);
            }
            speed_checked += p.speed_aware;
        }
        election_plan_free(&p);
    }
    assert_true(checked > 500);
    assert_true(speed_checked > 100);
}

/* Host bytes (election.h): what only the split host holds — its draft (--draft), the input
 * layer, with --split-private the output layer — is counted on the host alone; the layers
 * share the rest of the need by each member's memory for layers (the host's less its host
 * bytes); no member's bytes exceed its memory. */
typedef struct {
    const char *what;
    const char *nodes;
    uint64_t need; /* bytes (size 10 GB) */
    election_mode_t mode;
    const char *members;    /* "" none */
    const char *split;      /* 32 layers; NULL: not a split */
    uint64_t host, workers; /* expected bytes: the host's, the workers' together */
} hcase_t;

#define M_ (G / 1000) /* MB */
/* clang-format off */
static const hcase_t hcases[] = {
    /* the need (11.5 GB) includes a's 2 GB draft: a hosts (the file), b lends memory. The host
     * holds 2 GB + 9.5 GB × 4/10 of the layers, the worker 9.5 GB × 6/10 — nothing of D */
    {"draft on the host only", "a6h2 b6@10n", 11500 * M_, ELECTION_SPLIT, "ba", "20,13",
     5800 * M_, 5700 * M_},
    {"the same without host bytes (the old accounting)", "a6 b6@10n", 11500 * M_,
     ELECTION_SPLIT, "ba", "17,16", 5750 * M_, 5750 * M_},
    /* --split-private: a keeps its input and output layers (1.5 + 1.5 GB); the worker's
     * bytes are repeating layers only (8 GB × 8/13) */
    {"private: input and output layers on the host", "a8h3 b8@10n", 11 * G, ELECTION_SPLIT,
     "ba", "21,12", 3 * G + 3076923077ULL, 4923076924ULL},
    /* a's memory cannot hold its 7 GB draft: b (with the file) hosts, a stays idle */
    {"a host that cannot hold its host bytes is not elected", "a6h7 b5 c6@10n", 11 * G,
     ELECTION_SPLIT, "cb", "18,15", 5 * G, 6 * G},
    {"no node with the file can: impossible", "a6h7 c8@10n", 11 * G, ELECTION_IMPOSSIBLE, "ca",
     NULL, 0, 0},
    /* a replica holds the whole need, its draft included */
    {"solo: the whole need", "a12h2 b6@10", 11 * G, ELECTION_SOLO, "a", NULL, 11 * G, 0},
};
/* clang-format on */

static void test_host_bytes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof hcases / sizeof hcases[0]; i++) {
        const hcase_t *c = &hcases[i];
        tn_t tn[16];
        election_node_t nodes[16];
        size_t n = parse_nodes(c->nodes, tn);
        for (size_t k = 0; k < n; k++)
            nodes[k] = (election_node_t){tag_id(tn[k].tag), tn[k].vram,  tn[k].rtt, tn[k].split,
                                         tn[k].no_file,     tn[k].speed, tn[k].host};
        election_input_t in = {10 * G, 32, nodes, n, NULL, c->need, NULL, 0};
        election_plan_t p;
        assert_int_equal(election_run(&in, &p), 0);
        if (p.mode != c->mode)
            fail_msg("%s: mode %s, expected %s", c->what, election_mode_name(p.mode),
                     election_mode_name(c->mode));
        check_members(&p, c->members, c->what);
        check_plan(&in, &p);
        char buf[128];
        if (c->split) {
            assert_true(election_tensor_split(&p, buf, sizeof buf) > 0);
            if (strcmp(buf, c->split) != 0)
                fail_msg("%s: split '%s', expected '%s'", c->what, buf, c->split);
        }
        uint64_t host = 0, workers = 0;
        for (size_t k = 0; k < p.n_members && p.mode != ELECTION_IMPOSSIBLE; k++) {
            const election_member_t *m = &p.members[k];
            if (m->role == ELECTION_WORKER)
                workers += m->bytes;
            else if (m->role == ELECTION_HOST || k == 0)
                host = m->bytes;
        }
        if (host != c->host || workers != c->workers)
            fail_msg("%s: host %llu workers %llu, expected %llu %llu", c->what,
                     (unsigned long long)host, (unsigned long long)workers,
                     (unsigned long long)c->host, (unsigned long long)c->workers);
        election_plan_free(&p);
    }
}

/* Absurd announced memory (a sum of caps past 2^64) neither crashes nor over-commits. */
static void test_host_bytes_extreme(void **state)
{
    (void)state;
    election_node_t nodes[2] = {{tag_id('a'), UINT64_MAX, 0, true, false, 0, UINT64_MAX / 3},
                                {tag_id('b'), UINT64_MAX, 5, false, true, 0, 0}};
    election_input_t in = {UINT64_MAX / 2, 32, nodes, 2, NULL, 0, NULL, 0};
    election_plan_t p;
    assert_int_equal(election_run(&in, &p), 0);
    assert_int_equal(p.mode, ELECTION_SPLIT);
    assert_int_equal(p.host_bytes, UINT64_MAX / 3);
    for (size_t i = 0; i < p.n_members; i++)
        assert_true(p.members[i].bytes <= p.members[i].vram_bytes);
    assert_true(election_host(&p)->bytes >= UINT64_MAX / 3);
    election_plan_free(&p);
}

/* The case that over-committed: equal memory, so the old accounting gave the host as many
 * layers as its worker (16 of 33 slots) and counted its draft across both. The memory the host
 * really holds — its slots of the layer part plus the whole draft — passed its 6 GB; with host
 * bytes it gets 13 slots and holds less than its memory. */
static void test_draft_overcommit(void **state)
{
    (void)state;
    const uint64_t vram = 6 * G, draft = 2 * G, need = 11500 * M_, layers = need - draft;
    election_plan_t p;
    election_node_t nodes[2] = {{tag_id('a'), vram, 0, false, false, 0, 0},
                                {tag_id('b'), vram, 10, false, true, 0, 0}};
    election_input_t in = {10 * G, 32, nodes, 2, NULL, need, NULL, 0};
    for (int with = 0; with < 2; with++) {
        nodes[0].host_bytes = with ? draft : 0;
        assert_int_equal(election_run(&in, &p), 0);
        assert_int_equal(p.mode, ELECTION_SPLIT);
        const election_member_t *h = election_host(&p);
        assert_string_equal(h->id, tag_id('a'));
        /* what llama.cpp puts on the host's CPU (its weight in slots, election_cpu_layout) */
        election_range_t r[2];
        uint32_t ngl;
        assert_int_equal(election_cpu_layout(&p, r, &ngl), 0);
        uint64_t real = r[1].weight * layers / 33 + draft;
        if (with) {
            assert_int_equal(r[1].weight, 13);
            assert_true(real <= vram && h->bytes <= vram && h->bytes >= real);
            assert_true(p.members[0].bytes <= layers); /* nothing of the draft */
        } else {
            assert_int_equal(r[1].weight, 16);
            assert_true(real > vram); /* over-committed */
        }
        election_plan_free(&p);
    }
}

/* Re-running on leave/death: removing the host makes the next-biggest node host. */
static void test_rerun_after_death(void **state)
{
    (void)state;
    election_plan_t p;
    assert_int_equal(run_spec("a4@10 b6@20 c8 d4@30", 10 * G, 0, NULL, &p), 0);
    check_members(&p, "ac", "before");
    election_plan_free(&p);
    /* c dies: b hosts; RTTs are now to b (caller-supplied) */
    assert_int_equal(run_spec("a4@15 b6@0 d4@5", 10 * G, 0, NULL, &p), 0);
    check_members(&p, "dab", "after");
    election_plan_free(&p);
    /* a leaves too: impossible until someone joins */
    assert_int_equal(run_spec("b6@0 d4@5", 10 * G, 0, NULL, &p), 0);
    assert_int_equal(p.mode, ELECTION_IMPOSSIBLE);
    election_plan_free(&p);
}

/* The RTT matrix: among workers at the same RTT to the host, the one closest to the workers
 * already taken; memory still decides how many. */
static void test_rtt_matrix_tight_group(void **state)
{
    (void)state;
    tn_t tn[4];
    size_t n = parse_nodes("a4@10 b4@10 c4@10 f4", tn);
    election_plan_t p;
    assert_int_equal(run_nodes(tn, n, 10 * G, 0, NULL, &p), 0);
    check_members(&p, "cbf", "no matrix: equal RTT, larger id first");
    election_plan_free(&p);
    /* a b c f; f (the host) is 10 ms from each; c is 2 ms from a, 50 from b */
    static const int32_t mx[16] = {
        0,  30, 2,  10, /* a */
        30, 0,  50, 10, /* b */
        2,  50, 0,  10, /* c */
        10, 10, 10, 0,  /* f */
    };
    assert_int_equal(run_nodes(tn, n, 10 * G, 0, mx, &p), 0);
    check_members(&p, "caf", "matrix: the pair closest together");
    election_plan_free(&p);
    /* the host's RTT still comes first: a 5 ms worker (b) beats the tight pair */
    static const int32_t mx2[16] = {
        0, 30, 2, 10, 30, 0, 50, 5, 2, 50, 0, 10, 10, 5, 10, 0,
    };
    assert_int_equal(run_nodes(tn, n, 10 * G, 0, mx2, &p), 0);
    check_members(&p, "baf", "matrix: host RTT first, then the one nearer b");
    election_plan_free(&p);
    /* unknown pairwise RTT counts as the bound: a known near one is preferred */
    static const int32_t mx3[16] = {
        0, -1, -1, 10, -1, 0, 60, 10, -1, 60, 0, 10, 10, 10, 10, 0,
    };
    assert_int_equal(run_nodes(tn, n, 10 * G, 0, mx3, &p), 0);
    check_members(&p, "cbf", "matrix: 60 ms known < unknown (80)");
    election_plan_free(&p);
}

/* A running split's workers keep their places unless a newcomer is at least twice as close. */
static void test_rtt_hysteresis(void **state)
{
    (void)state;
    static const struct {
        const char *nodes;
        const char *keep; /* tag or "" */
        const char *members;
    } rows[] = {
        {"a4@20 b4@15 f8", "", "bf"},   /* fresh: the closest */
        {"a4@20 b4@15 f8", "a", "af"},  /* a runs: 15 is not enough better than 20 */
        {"a4@20 b4@11 f8", "a", "af"},  /* nor 11 */
        {"a4@20 b4@9 f8", "a", "bf"},   /* 9 < 20 / 2: re-planned */
        {"a4@90 b4@30 f8", "a", "bf"},  /* the 80 ms bound is on the real RTT */
        {"a4 b4@30 f8", "a", "bf"},     /* unknown RTT gets no hysteresis */
        {"a2@20 b4@15 f8", "a", "abf"}, /* memory still first: a alone does not fit */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        tn_t tn[8];
        size_t n = parse_nodes(rows[i].nodes, tn);
        election_node_t nodes[8];
        for (size_t k = 0; k < n; k++)
            nodes[k] =
                (election_node_t){tag_id(tn[k].tag), tn[k].vram, tn[k].rtt, false, false, 0, 0};
        const char *keep[1] = {rows[i].keep[0] ? tag_id(rows[i].keep[0]) : NULL};
        election_input_t in = {10 * G, 0, nodes, n, NULL, 0, keep, rows[i].keep[0] ? 1 : 0};
        election_plan_t p;
        assert_int_equal(election_run(&in, &p), 0);
        check_members(&p, rows[i].members, rows[i].nodes);
        election_plan_free(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_need_bytes),
        cmocka_unit_test(test_roles_and_fields),
        cmocka_unit_test(test_host_has_the_file),
        cmocka_unit_test(test_layers_edge),
        cmocka_unit_test(test_rtt_matrix),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_random_properties),
        cmocka_unit_test(test_rerun_after_death),
        cmocka_unit_test(test_cpu_layout),
        cmocka_unit_test(test_device_layout),
        cmocka_unit_test(test_spread),
        cmocka_unit_test(test_host_bytes),
        cmocka_unit_test(test_draft_overcommit),
        cmocka_unit_test(test_host_bytes_extreme),
        cmocka_unit_test(test_rtt_matrix_tight_group),
        cmocka_unit_test(test_rtt_hysteresis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
