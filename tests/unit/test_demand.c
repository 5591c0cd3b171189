/* Unit tests for demand counting (src/core/demand.h), the mesh's sums, and the promotion and
 * demotion rules (src/core/promote.h). Time is a plain number passed in. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "demand.h"
#include "promote.h"
#include "route_table.h"

#define A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* this node */
#define B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define Z "0000000000000000000000000000000000000000000000000000000000000000" /* smallest id */

/* ---- counting ---- */

static void test_windows(void **state)
{
    (void)state;
    demand_t d;
    demand_init(&d, 1000); /* 1 s windows: a request per window = 60 per minute */
    assert_false(demand_tick(&d, 5000));
    for (int i = 0; i < 3; i++)
        assert_int_equal(demand_record(&d, "M", 5100 + (uint64_t)i, 1700000000 + (uint64_t)i), 0);
    assert_int_equal(demand_rate(&d, "M"), 0); /* nothing published inside the window */
    assert_false(demand_tick(&d, 5999));
    assert_true(demand_tick(&d, 6000)); /* the window closes: 3 per second = 180 per minute */
    assert_int_equal(demand_rate(&d, "M"), 180);
    const demand_entry_t *e = demand_find(&d, "M");
    assert_non_null(e);
    assert_int_equal(e->last_unix, 1700000002);
    assert_int_equal(e->last_ms, 5102);
    /* one request in the next window */
    demand_record(&d, "M", 6500, 1700000003);
    assert_true(demand_tick(&d, 7000));
    assert_int_equal(demand_rate(&d, "M"), 60);
    /* a quiet window publishes 0; the last request time stays */
    assert_true(demand_tick(&d, 8000));
    assert_int_equal(demand_rate(&d, "M"), 0);
    assert_false(demand_tick(&d, 9000));
    assert_int_equal(demand_find(&d, "M")->last_unix, 1700000003);
    /* requests, then several windows pass at once: the last closed window was empty */
    demand_record(&d, "M", 9100, 1);
    assert_false(demand_tick(&d, 11500)); /* 0 before, 0 now */
    assert_int_equal(demand_rate(&d, "M"), 0);
    /* the window start keeps its phase: [11000, 12000) */
    demand_record(&d, "M", 11900, 2);
    assert_true(demand_tick(&d, 12000));
    assert_int_equal(demand_rate(&d, "M"), 60);
}

static void test_minute_and_models(void **state)
{
    (void)state;
    demand_t d;
    demand_init(&d, 0);
    assert_int_equal(d.window_ms, DEMAND_WINDOW_MS);
    demand_tick(&d, 0);
    for (int i = 0; i < 12; i++)
        demand_record(&d, "hot", 1000 + (uint64_t)i, 5);
    demand_record(&d, "cold", 2000, 6);
    assert_true(demand_tick(&d, 60000));
    assert_int_equal(demand_rate(&d, "hot"), 12);
    assert_int_equal(demand_rate(&d, "cold"), 1);
    assert_int_equal(demand_rate(&d, "never"), 0);
    assert_int_equal(demand_record(&d, "", 1, 1), -EINVAL);
    assert_int_equal(demand_record(&d, "bad\nname", 1, 1), -EINVAL);
}

static void test_table_full(void **state)
{
    (void)state;
    demand_t d;
    demand_init(&d, 1000);
    char name[32];
    for (int i = 0; i < DEMAND_MAX_MODELS; i++) {
        snprintf(name, sizeof name, "m%d", i);
        demand_record(&d, name, 100 + (uint64_t)i, 1);
    }
    assert_int_equal(d.n, DEMAND_MAX_MODELS);
    demand_record(&d, "new", 500, 1); /* replaces m0, the oldest */
    assert_int_equal(d.n, DEMAND_MAX_MODELS);
    assert_null(demand_find(&d, "m0"));
    assert_non_null(demand_find(&d, "m1"));
    assert_non_null(demand_find(&d, "new"));
}

/* ---- the mesh's sums, from announcements ---- */

static json_t *parse(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (!j) fail_msg("bad test JSON: %s", err.text);
    return j;
}

static void test_view_round_trip_and_sum(void **state)
{
    (void)state;
    /* B hosts M (ready) and announces its demand; C is loading M and asks for R */
    json_t *jb = parse("{\"serving\":[{\"model\":\"M\",\"is_host\":true,\"http_ready\":true,"
                       "\"pinned\":true}],\"request_rates\":{\"M\":30,\"X\":2},"
                       "\"last_request\":{\"M\":1700000000}}");
    json_t *jc = parse("{\"serving\":[{\"model\":\"M\",\"is_host\":true}],\"requested_models\":"
                       "[\"R\"],\"request_rates\":{\"M\":6,\"bad\":-1,\"Y\":\"x\"},"
                       "\"last_request\":{\"M\":1700000009}}");
    view_node_t v[2];
    assert_int_equal(view_decode(jb, B, &v[0]), 0);
    assert_int_equal(view_decode(jc, C, &v[1]), 0);
    assert_int_equal(v[0].rejected, 0);
    assert_int_equal(v[1].rejected, 2); /* a negative rate, a string */
    assert_true(view_serving(&v[0], "M")->pinned);
    assert_false(view_serving(&v[1], "M")->pinned);
    assert_int_equal(view_demand(&v[0], "M")->rate, 30);
    assert_int_equal(view_demand(&v[0], "M")->last_unix, 1700000000);
    assert_int_equal(view_demand(&v[0], "X")->last_unix, 0);
    /* round trip: encode B's view, decode it again, equal */
    json_t *out = json_object();
    assert_int_equal(view_encode(&v[0], out), 0);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(out, "request_rates"), "X")), 2);
    assert_null(json_object_get(json_object_get(out, "last_request"), "X"));
    view_node_t again;
    assert_int_equal(view_decode(out, B, &again), 0);
    assert_true(view_node_equal(&again, &v[0]));
    view_demand_t *dd = view_add_demand(&again, "M");
    dd->rate = 31;
    assert_false(view_node_equal(&again, &v[0]));
    view_node_free(&again);
    json_decref(out);

    demand_sum_t s[8];
    size_t n = demand_sum(v, 2, NULL, s, 8);
    const demand_sum_t *m = demand_sum_find(s, n, "M");
    assert_non_null(m);
    assert_int_equal(m->rate, 36);
    assert_int_equal(m->last_unix, 1700000009);
    assert_int_equal(m->n_hosts, 2);
    assert_int_equal(m->n_ready, 1);
    assert_true(m->loading);
    const demand_sum_t *r = demand_sum_find(s, n, "R");
    assert_non_null(r);
    assert_true(r->requested);
    assert_int_equal(r->n_hosts, 0);
    assert_int_equal(demand_sum_find(s, n, "X")->rate, 2);
    for (int i = 0; i < 2; i++)
        view_node_free(&v[i]);
    json_decref(jb);
    json_decref(jc);
}

static void test_view_demand_bounds(void **state)
{
    (void)state;
    /* more models than a list holds: the first VIEW_MAX_LIST are kept, the rest rejected */
    json_t *o = json_object(), *rr = json_object();
    char name[32];
    for (int i = 0; i < VIEW_MAX_LIST + 5; i++) {
        snprintf(name, sizeof name, "m%03d", i);
        json_object_set_new(rr, name, json_integer(i));
    }
    json_object_set_new(o, "request_rates", rr);
    json_object_set_new(o, "last_request", json_string("no"));
    view_node_t v;
    assert_int_equal(view_decode(o, A, &v), 0);
    assert_int_equal(v.n_demand, VIEW_MAX_LIST);
    assert_int_equal(v.rejected, 5 + 1);
    view_node_free(&v);
    json_decref(o);
}

/* ---- promotion ---- */

typedef struct {
    const char *what;
    uint64_t free_bytes;
    const char *disk;   /* "M:need,N:need" */
    const char *models; /* "M:hosts:rate[:r][:l]" (r requested, l a host loading) */
    size_t n_active;
    bool seen_active;
    const char *want; /* "reason model" or "none" */
} promo_case_t;

static size_t parse_disk(const char *spec, promo_disk_t *d, char names[][16])
{
    size_t n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        unsigned long long need = 0;
        sscanf(t, "%15[^:]:%llu", names[n], &need);
        d[n] = (promo_disk_t){.name = names[n], .need_bytes = need};
        n++;
    }
    return n;
}

static size_t parse_models(const char *spec, promo_model_t *m, char names[][16])
{
    size_t n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        unsigned hosts = 0;
        unsigned long long rate = 0, short_b = 0;
        char flags[8] = "";
        sscanf(t, "%15[^:]:%u:%llu:%7[^:]:%llu", names[n], &hosts, &rate, flags, &short_b);
        m[n] = (promo_model_t){.name = names[n],
                               .n_hosts = hosts,
                               .rate = rate,
                               .requested = strchr(flags, 'r') != NULL,
                               .loading = strchr(flags, 'l') != NULL,
                               .short_bytes = short_b};
        n++;
    }
    return n;
}

static const promo_case_t PROMO_CASES[] = {
    {"nothing on disk", 100, "", "M:1:500", 1, false, "none"},
    {"unserved model on disk", 100, "M:50", "", 1, false, "unserved M"},
    {"unserved but too big", 40, "M:50", "", 1, false, "none"},
    {"need unknown: never", 100, "M:0", "", 1, false, "none"},
    {"served, quiet", 100, "M:50", "M:1:0", 1, false, "none"},
    {"requested beats unserved", 100, "M:50,R:20", "R:0:0:r", 1, false, "requested R"},
    {"demand without a host counts as requested", 100, "M:50,R:20", "R:0:3", 1, false,
     "requested R"},
    {"single hot model at the threshold", 100, "M:50", "M:1:10", 1, false, "hot M"},
    {"single model below the threshold", 100, "M:50", "M:1:9", 1, false, "none"},
    {"per host: two hosts share 19", 100, "M:50", "M:2:19", 2, false, "none"},
    {"per host: two hosts share 20", 100, "M:50", "M:2:20", 2, false, "hot M"},
    {"imbalance 3x the others", 100, "M:50", "M:1:30,N:1:10", 2, false, "hot M"},
    {"imbalance under 3x", 100, "M:50", "M:1:29,N:1:10", 2, false, "none"},
    {"others spread over hosts", 100, "M:50", "M:1:30,N:3:30", 4, false, "hot M"},
    {"hot but another host still loading", 100, "M:50", "M:2:100:l", 2, false, "none"},
    {"hot but does not fit", 40, "M:50", "M:1:100", 1, false, "none"},
    {"hot: the hotter of two on disk", 100, "M:50,N:10", "M:1:20,N:1:90", 2, false, "hot N"},
    {"ties: larger need, then name", 100, "B:10,A:10,C:5", "", 1, false, "unserved A"},
    {"every active node gone", 100, "M:50", "M:1:0", 0, true, "all_hosts_gone M"},
    {"no active node ever seen: not all_gone", 100, "M:50", "M:1:0", 0, false, "none"},
    /* models "name:hosts:rate:flags:short_bytes" ("-": no flag) */
    {"split short: free memory covers it, no file needed", 60, "", "M:0:0:-:50", 1, false,
     "split_short M"},
    {"split short by more than the free memory", 40, "", "M:0:0:-:50", 1, false, "none"},
    {"split short beats requested", 100, "R:20", "M:0:0:-:50,R:0:0:r", 1, false, "split_short M"},
    {"split short: on disk first", 100, "N:200", "M:0:5:-:50,N:0:0:-:50", 1, false,
     "split_short N"},
    {"split short: more demand, then the name", 100, "", "B:0:0:-:10,A:0:0:-:10,C:0:3:-:10", 1,
     false, "split_short C"},
    {"split short: but a host is ready", 100, "", "M:1:0:-:50", 1, false, "none"},
};

static void test_promotion_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof PROMO_CASES / sizeof PROMO_CASES[0]; i++) {
        const promo_case_t *c = &PROMO_CASES[i];
        char dn[8][16], mn[8][16];
        promo_disk_t disk[8];
        promo_model_t models[8];
        promo_input_t in = {.free_bytes = c->free_bytes,
                            .disk = disk,
                            .n_disk = parse_disk(c->disk, disk, dn),
                            .models = models,
                            .n_models = parse_models(c->models, models, mn),
                            .n_active = c->n_active};
        promo_state_t st = {.seen_active = c->seen_active};
        promo_result_t r;
        promo_decide(&in, &st, &r);
        char got[64];
        if (r.reason == PROMO_NONE)
            snprintf(got, sizeof got, "none");
        else
            snprintf(got, sizeof got, "%s %s", promo_reason_name(r.reason), r.model);
        if (strcmp(got, c->want) != 0) fail_msg("%s: got '%s', want '%s'", c->what, got, c->want);
    }
}

/* A passive standby decides from a routing table: hosts, summed loads, loading, requested. */
static void test_promotion_from_table(void **state)
{
    (void)state;
    static rt_table_t t;
    rt_table_init(&t, "mesh");
    int b = rt_table_add_node(&t, B, 100), c = rt_table_add_node(&t, C, 100);
    assert_true(b >= 0 && c >= 0);
    rt_model_t *hot = rt_table_add_model(&t, "hot", CATALOG_READY);
    rt_model_add_host(hot, (size_t)b, 7);
    rt_model_add_host(hot, (size_t)c, 16);
    rt_model_t *q = rt_table_add_model(&t, "quiet", CATALOG_READY);
    rt_model_add_host(q, (size_t)b, 1);
    rt_table_add_model(&t, "asked", CATALOG_UNLOADED)->requested = true;
    rt_table_add_model(&t, "starting", CATALOG_LOADING);
    /* the table's frame carries the requested flag */
    json_t *f = rt_table_encode(&t);
    static rt_table_t d;
    assert_int_equal(rt_table_decode(f, &d), 0);
    json_decref(f);
    assert_int_equal(d.rejected, 0);
    promo_model_t m[8];
    size_t n = promo_models_from_table(&d, m, 8);
    assert_int_equal(n, 4);
    assert_string_equal(m[0].name, "hot");
    assert_int_equal(m[0].n_hosts, 2);
    assert_int_equal(m[0].rate, 23);
    assert_false(m[0].requested || m[0].loading);
    assert_int_equal(m[2].n_hosts, 0);
    assert_true(m[2].requested);
    assert_true(m[3].loading && !m[3].requested);
    assert_int_equal(promo_models_from_table(&d, m, 1), 1); /* bounded by max */
    /* per host 11.5 ≥ 10 and ≥ 3 × the quiet model's 1: this standby takes "hot"; the asked
     * model without a host comes first when it is on the disk */
    promo_disk_t disk[] = {{"hot", 50}, {"quiet", 50}};
    promo_input_t in = {.free_bytes = 100,
                        .disk = disk,
                        .n_disk = 2,
                        .models = m,
                        .n_models = promo_models_from_table(&d, m, 8),
                        .n_active = d.n_nodes};
    promo_state_t st = {0};
    promo_result_t r;
    promo_decide(&in, &st, &r);
    assert_int_equal(r.reason, PROMO_HOT);
    assert_string_equal(r.model, "hot");
    promo_disk_t disk2[] = {{"hot", 50}, {"asked", 10}};
    in.disk = disk2;
    promo_decide(&in, &st, &r);
    assert_int_equal(r.reason, PROMO_REQUESTED);
    assert_string_equal(r.model, "asked");
    /* a bad "requested" is counted, not taken */
    f = rt_table_encode(&t);
    json_object_set_new(json_array_get(json_object_get(f, "models"), 0), "requested",
                        json_string("yes"));
    assert_int_equal(rt_table_decode(f, &d), 0);
    json_decref(f);
    assert_int_equal(d.rejected, 1);
    assert_false(d.models[0].requested);
    /* the shortfall of a split that needs capacity travels in the table (short_bytes) */
    rt_table_add_model(&t, "short", CATALOG_NEEDS_CAPACITY)->short_bytes = 40;
    f = rt_table_encode(&t);
    assert_int_equal(rt_table_decode(f, &d), 0);
    json_decref(f);
    assert_int_equal(d.rejected, 0);
    n = promo_models_from_table(&d, m, 8);
    assert_int_equal(n, 5);
    assert_string_equal(m[4].name, "short");
    assert_int_equal(m[4].short_bytes, 40);
    assert_int_equal(m[0].short_bytes, 0);
    promo_disk_t none[] = {{"x", 500}};
    in = (promo_input_t){
        .free_bytes = 40, .disk = none, .n_disk = 1, .models = m, .n_models = n, .n_active = 2};
    promo_decide(&in, &st, &r);
    assert_int_equal(r.reason, PROMO_SPLIT_SHORT);
    assert_string_equal(r.model, "short");
    /* a bad short_bytes is counted, not taken */
    f = rt_table_encode(&t);
    json_object_set_new(json_array_get(json_object_get(f, "models"), 4), "short_bytes",
                        json_integer(-1));
    assert_int_equal(rt_table_decode(f, &d), 0);
    json_decref(f);
    assert_int_equal(d.rejected, 1);
    assert_int_equal(d.models[4].short_bytes, 0);
}

static void test_go_passive(void **state)
{
    (void)state;
    const promo_passive_input_t standby = {
        .allocating = true, .nothing_for_it = true, .n_ready_peers = 1};
    assert_true(promo_go_passive(&standby));
    promo_passive_input_t in = standby;
    in.allocating = false; /* --model: never */
    assert_false(promo_go_passive(&in));
    in = standby;
    in.n_requested = 1; /* it asks for a model: the mesh must see the request */
    assert_false(promo_go_passive(&in));
    in = standby;
    in.n_planned = 1; /* serves or works for a split */
    assert_false(promo_go_passive(&in));
    in = standby;
    in.nothing_for_it = false; /* allocation has not decided yet */
    assert_false(promo_go_passive(&in));
    in = standby;
    in.n_ready_peers = 0; /* nothing served anywhere: nobody to check in with */
    assert_false(promo_go_passive(&in));
}

static void test_promotion_remembers_active(void **state)
{
    (void)state;
    promo_disk_t disk[] = {{"M", 50}};
    promo_model_t m[] = {{.name = "M", .n_hosts = 1}};
    promo_input_t in = {
        .free_bytes = 100, .disk = disk, .n_disk = 1, .models = m, .n_models = 1, .n_active = 1};
    promo_state_t st = {0};
    promo_result_t r;
    promo_decide(&in, &st, &r);
    assert_int_equal(r.reason, PROMO_NONE);
    assert_true(st.seen_active);
    in.n_active = 0; /* the host is gone; the view still lists it (a passive node's old table) */
    promo_decide(&in, &st, &r);
    assert_int_equal(r.reason, PROMO_ALL_GONE);
    assert_string_equal(r.model, "M");
}

/* ---- demotion ---- */

#define MIN 60000u

static promo_demote_input_t idle_replica(void)
{
    return (promo_demote_input_t){.id = A,
                                  .replica = true,
                                  .now_ms = 100 * MIN,
                                  .serving_since_ms = 10 * MIN,
                                  .last_request_ms = 50 * MIN,
                                  .idle_ms = 30 * MIN,
                                  .min_serve_ms = 5 * MIN};
}

/* Whether a split needs this node's memory more than its model: a table. */
static void test_split_wanted(void **state)
{
    (void)state;
    const uint64_t G = 1000000000ull;
    static const struct {
        const char *what;
        promo_model_t m;
        uint64_t my_rate, free_b, held;
        bool want;
    } rows[] = {
        {"short, covered, more demand",
         {.name = "big", .short_bytes = 3 * G, .rate = 5},
         1,
         G,
         2 * G,
         true},
        {"covered by free memory alone",
         {.name = "big", .short_bytes = G, .rate = 5},
         1,
         2 * G,
         0,
         true},
        {"more than it would free",
         {.name = "big", .short_bytes = 4 * G, .rate = 5},
         1,
         G,
         2 * G,
         false},
        {"less wanted than mine", {.name = "big", .short_bytes = G, .rate = 1}, 5, G, G, false},
        {"as wanted as mine", {.name = "big", .short_bytes = G, .rate = 5}, 5, G, G, false},
        {"requested, mine idle",
         {.name = "big", .short_bytes = G, .requested = true},
         0,
         G,
         G,
         true},
        {"requested, mine has demand",
         {.name = "big", .short_bytes = G, .requested = true},
         2,
         G,
         G,
         false},
        {"not short", {.name = "big", .rate = 5}, 0, G, G, false},
        {"has a host already",
         {.name = "big", .short_bytes = G, .rate = 5, .n_hosts = 1},
         0,
         G,
         G,
         false},
        {"my own model", {.name = "mine", .short_bytes = G, .rate = 5}, 0, G, G, false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (promo_split_wanted(&rows[i].m, 1, "mine", rows[i].my_rate, rows[i].free_b,
                               rows[i].held) != rows[i].want)
            fail_msg("%s: want %d", rows[i].what, rows[i].want);
    assert_false(promo_split_wanted(NULL, 0, "mine", 0, G, G));
}

static void test_demotion_rules(void **state)
{
    (void)state;
    promo_host_t pinned_b[] = {{B, true}}, plain_b[] = {{B, false}}, plain_z[] = {{Z, false}};
    promo_demote_input_t in = idle_replica();
    /* the last replica is kept */
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    /* ... unless its memory is wanted */
    in.memory_wanted = true;
    assert_int_equal(promo_demote(&in), DEMOTE_MEMORY);
    in.memory_wanted = false;
    /* ... or a split needs it (and memory wins the name when both hold) */
    in.split_wanted = true;
    assert_int_equal(promo_demote(&in), DEMOTE_SPLIT);
    assert_string_equal(promo_demote_name(DEMOTE_SPLIT), "split_needs_memory");
    in.busy = true; /* never mid-request */
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.busy = false;
    in.memory_wanted = true;
    assert_int_equal(promo_demote(&in), DEMOTE_MEMORY);
    in.memory_wanted = in.split_wanted = false;
    /* another ready host (pinned) keeps it: idle → standby */
    in.others = pinned_b;
    in.n_others = 1;
    assert_int_equal(promo_demote(&in), DEMOTE_IDLE);
    /* an unpinned host with a larger id keeps it too; a smaller one leaves it to this node */
    in.others = plain_b;
    assert_int_equal(promo_demote(&in), DEMOTE_IDLE);
    in.others = plain_z;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.others = pinned_b;
    /* never mid-request, never pinned, never a split role */
    in.busy = true;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.busy = false;
    in.pinned = true;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.pinned = false;
    in.replica = false;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.replica = true;
    /* not idle long enough: the last request 29 min ago */
    in.last_request_ms = in.now_ms - 29 * MIN;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.last_request_ms = in.now_ms - 30 * MIN;
    assert_int_equal(promo_demote(&in), DEMOTE_IDLE);
    /* no request ever: idle counts from when it started serving */
    in.last_request_ms = 0;
    in.serving_since_ms = in.now_ms - 10 * MIN;
    in.min_serve_ms = 0;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.serving_since_ms = in.now_ms - 30 * MIN;
    assert_int_equal(promo_demote(&in), DEMOTE_IDLE);
}

/* No flap: a node promoted for demand is not demoted while the demand lasts, nor before its
 * minimum time, and after it leaves the demand that remains does not promote it again. */
static void test_no_flap(void **state)
{
    (void)state;
    promo_host_t host_b[] = {{B, true}};
    promo_demote_input_t in = idle_replica();
    in.others = host_b;
    in.n_others = 1;
    in.idle_ms = 0; /* even with no idle period at all */
    /* promoted a minute ago: kept for min_serve_ms */
    in.serving_since_ms = in.now_ms - 1 * MIN;
    in.last_request_ms = 0;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.serving_since_ms = in.now_ms - 6 * MIN;
    /* B alone would get 12/min, above the threshold: kept */
    in.mesh_rate = 12;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    /* 5/min left for B: half the threshold exactly — still kept (the gap is strict) */
    in.mesh_rate = 5;
    assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    in.mesh_rate = 4;
    assert_int_equal(promo_demote(&in), DEMOTE_IDLE);
    /* and once it left, 4/min on B does not promote it again */
    promo_disk_t disk[] = {{"M", 50}};
    promo_model_t m[] = {{.name = "M", .n_hosts = 1, .rate = 4}};
    promo_input_t pin = {
        .free_bytes = 100, .disk = disk, .n_disk = 1, .models = m, .n_models = 1, .n_active = 1};
    promo_state_t st = {0};
    promo_result_t r;
    promo_decide(&pin, &st, &r);
    assert_int_equal(r.reason, PROMO_NONE);
    /* any rate in the gap [5, 10) neither promotes a standby nor demotes a replica */
    for (uint64_t rate = 5; rate < PROMO_HOT_PER_MIN; rate++) {
        m[0].rate = rate;
        promo_decide(&pin, &st, &r);
        assert_int_equal(r.reason, PROMO_NONE);
        in.mesh_rate = rate;
        assert_int_equal(promo_demote(&in), DEMOTE_KEEP);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_minute_and_models),
        cmocka_unit_test(test_table_full),
        cmocka_unit_test(test_view_round_trip_and_sum),
        cmocka_unit_test(test_view_demand_bounds),
        cmocka_unit_test(test_promotion_table),
        cmocka_unit_test(test_promotion_remembers_active),
        cmocka_unit_test(test_promotion_from_table),
        cmocka_unit_test(test_go_passive),
        cmocka_unit_test(test_split_wanted),
        cmocka_unit_test(test_demotion_rules),
        cmocka_unit_test(test_no_flap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
