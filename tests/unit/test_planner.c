/* Unit tests of the planner's standby decisions (src/node/planner_demand.c) since S6e: typed
 * peers in (view_node_t, as mesh_peers hands them out), the planner's action out — a standby
 * takes a model (promotion) or a serving node gives its model back (demotion).
 *
 * The planner is the node's real one (planner_t, the real model manager models_t over the
 * shared test GGUF files, with the models_t child seams recording starts and stops instead of
 * spawning llama-server); the peers are built with view.h's builders. Election and splitting
 * (planner.c:replan) are not covered here: they need the mesh and the supervisor's rpc-servers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "models_fixture.h"
#include "planner_int.h"

#define SELF "5555555555555555555555555555555555555555555555555555555555555555"
#define LOW "1111111111111111111111111111111111111111111111111111111111111111"  /* < SELF */
#define HIGH "9999999999999999999999999999999999999999999999999999999999999999" /* > SELF */

static models_fixture_t fx;
static planner_t pl;
static char events[512]; /* "start X;stop Y;" */
static view_node_t peers[4];
static size_t n_peers;

static int fake_start(sv_child_t *c)
{
    size_t l = strlen(events);
    snprintf(events + l, sizeof events - l, "start %s;", c->name);
    c->state = CHILD_STARTING;
    return 0;
}

static void fake_stop(sv_child_t *c, uint64_t grace_ms)
{
    (void)grace_ms;
    size_t l = strlen(events);
    snprintf(events + l, sizeof events - l, "stop %s;", c->name);
    c->state = CHILD_STOPPING;
}

static const char *M(size_t i)
{
    return fx.ms.entries[i].mm->name;
}

/* A peer (id) in the test's peer list, empty. */
static view_node_t *peer(const char *id)
{
    view_node_t *v = &peers[n_peers++];
    view_node_init(v);
    memcpy(v->id, id, sizeof v->id);
    v->vram_bytes = 8ull << 30;
    return v;
}

/* v serves model as a ready solo replica (pinned: --model there). */
static void serves(view_node_t *v, const char *model, bool pinned)
{
    view_serving_t *s = view_add_serving(v, model);
    assert_non_null(s);
    s->member = true;
    s->role = VIEW_SERVE_REPLICA;
    s->state = VIEW_STATE_READY;
    s->http_ready = s->is_host = true;
    s->pinned = pinned;
}

static void rate(view_node_t *v, const char *model, uint64_t per_min)
{
    view_demand_t *d = view_add_demand(v, model);
    assert_non_null(d);
    d->rate = per_min;
}

static peers_t P(void)
{
    return (peers_t){.v = peers, .n = n_peers};
}

static int setup(void **state)
{
    (void)state;
    if (models_fixture_init(&fx, fake_start, fake_stop) != 0) return -1;
    /* the planner of a node that joined without --model (planner_init without its timers and
     * speed calibration): it allocates, and stands by */
    memset(&pl, 0, sizeof pl);
    pl.loop = &fx.loop;
    pl.cfg = &fx.cfg;
    pl.ms = &fx.ms;
    pl.allocating = true;
    pl.standby = true;
    snprintf(pl.id, sizeof pl.id, "%s", SELF);
    pd_init(&pl);
    for (size_t i = 0; i < PLAN_MAX_MODELS; i++)
        pl.models[i].pl = &pl;
    events[0] = '\0';
    n_peers = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_peers; i++)
        view_node_free(&peers[i]);
    return models_fixture_free(&fx);
}

/* A model some peer asks for, with no host, on this node's disk: the standby takes it. */
static void test_promote_requested(void **state)
{
    (void)state;
    view_node_t *b = peer(HIGH);
    assert_true(view_add_requested(b, M(2)));
    serves(b, M(0), false); /* every other model has a host: only the request decides */
    serves(b, M(1), false);
    peers_t p = P();
    assert_true(pd_promote(&pl, &p, NULL));
    assert_int_equal(pl.n, 1);
    assert_string_equal(pl.models[0].name, M(2));
    assert_string_equal(pl.models[0].rule, "promoted_requested");
    assert_ptr_equal(pl.models[0].e, &fx.ms.entries[2]);
    assert_false(pl.standby);
    assert_int_equal(pl.promotions, 1);
    /* it serves now: no second promotion */
    assert_false(pd_promote(&pl, &p, NULL));
    assert_int_equal(pl.n, 1);
}

/* Every model served and quiet: the standby stays one; the same mesh with a hot model (≥
 * PROMO_HOT_PER_MIN per host, announced in a peer's request_rates) promotes it. */
static void test_promote_hot_only_with_demand(void **state)
{
    (void)state;
    view_node_t *b = peer(HIGH);
    for (size_t i = 0; i < 3; i++)
        serves(b, M(i), false);
    peers_t p = P();
    assert_false(pd_promote(&pl, &p, NULL));
    assert_int_equal(pl.n, 0);
    assert_true(pl.standby);

    rate(b, M(1), 10 * PROMO_HOT_PER_MIN);
    assert_true(pd_promote(&pl, &p, NULL));
    assert_string_equal(pl.models[0].name, M(1));
    assert_string_equal(pl.models[0].rule, "promoted_hot");
}

/* It saw active nodes and now sees none: every host is gone, it takes the model with the most
 * demand (its own view's request_rates). */
static void test_promote_all_gone(void **state)
{
    (void)state;
    peers_t none = {0};
    assert_false(pd_promote(&pl, &none, NULL)); /* never saw an active node: nothing */
    assert_int_equal(pl.n, 0);
    pl.promo.seen_active = true;
    view_node_t self;
    view_node_init(&self);
    memcpy(self.id, SELF, sizeof self.id);
    rate(&self, M(2), 3); /* not the largest file: without the demand the largest would win */
    assert_true(pd_promote(&pl, &none, &self));
    assert_string_equal(pl.models[0].name, M(2));
    assert_string_equal(pl.models[0].rule, "promoted_all_hosts_gone");
    view_node_free(&self);
}

/* A node serving the mesh's model as an idle solo replica. */
static void serving_idle(size_t i)
{
    pmodel_t *pm = &pl.models[0];
    snprintf(pm->name, sizeof pm->name, "%s", M(i));
    snprintf(pm->rule, sizeof pm->rule, "promoted_unserved");
    pm->e = &fx.ms.entries[i];
    pm->st.role = ELECTION_REPLICA;
    pm->st.mode = ELECTION_SOLO;
    pl.n = 1;
    pl.standby = false;
    pl.serving_since_ms = 1;
    pl.idle_ms = pl.min_serve_ms = 1; /* past both: the test's loop time is well beyond 2 ms */
    uv_update_time(&fx.loop);
    while (uv_now(&fx.loop) < 10)
        uv_update_time(&fx.loop);
}

/* Idle, and another ready host with a larger id keeps serving it: it gives the model back. */
static void test_demote_idle_other_host(void **state)
{
    (void)state;
    serving_idle(0);
    serves(peer(HIGH), M(0), false);
    peers_t p = P();
    assert_true(pd_check_demote(&pl, &p, NULL));
    assert_int_equal(pl.n, 0);
    assert_true(pl.standby);
    assert_int_equal(pl.demotions, 1);
    assert_string_equal(pl.alloc.rule, "standby");
}

/* The other idle replica has the smaller id and is not pinned: two idle replicas never both
 * leave, so the one with the larger id (this node) stays; a pinned other lets it go. */
static void test_demote_keeps_last_of_two(void **state)
{
    (void)state;
    serving_idle(0);
    view_node_t *b = peer(LOW);
    serves(b, M(0), false);
    peers_t p = P();
    assert_false(pd_check_demote(&pl, &p, NULL));
    assert_int_equal(pl.n, 1);
    b->serving[0].pinned = true;
    assert_true(pd_check_demote(&pl, &p, NULL));
    assert_int_equal(pl.n, 0);
}

/* No other host: the last replica is kept, idle or not; a host that is not ready yet does not
 * count. Busy mesh demand keeps it too. */
static void test_demote_never_the_last(void **state)
{
    (void)state;
    serving_idle(0);
    peers_t none = {0};
    assert_false(pd_check_demote(&pl, &none, NULL));
    view_node_t *b = peer(HIGH);
    serves(b, M(0), false);
    b->serving[0].http_ready = false;
    peers_t p = P();
    assert_false(pd_check_demote(&pl, &p, NULL));
    b->serving[0].http_ready = true;
    rate(b, M(0), 10 * PROMO_HOT_PER_MIN); /* the mesh still wants two hosts */
    assert_false(pd_check_demote(&pl, &p, NULL));
    assert_int_equal(pl.n, 1);
    assert_int_equal(pl.demotions, 0);
}

/* request_rate / last_request of a listing entry: the peers' and this node's demand summed. */
static void test_annotate_sums_peers_and_self(void **state)
{
    (void)state;
    view_node_t *b = peer(HIGH), *c = peer(LOW);
    rate(b, "m", 4);
    rate(c, "m", 5);
    view_add_demand(c, "m")->last_unix = 1700000000;
    view_node_t self;
    view_node_init(&self);
    memcpy(self.id, SELF, sizeof self.id);
    rate(&self, "m", 6);
    peers_t p = P();
    json_t *o = json_object();
    pd_annotate(&p, &self, o, "m");
    assert_int_equal(json_integer_value(json_object_get(o, "request_rate")), 15);
    assert_int_equal(json_integer_value(json_object_get(o, "last_request")), 1700000000);
    pd_annotate(&p, NULL, o, "m"); /* no self view: the peers only */
    assert_int_equal(json_integer_value(json_object_get(o, "request_rate")), 9);
    pd_annotate(&p, &self, o, "other");
    assert_int_equal(json_integer_value(json_object_get(o, "request_rate")), 0);
    json_decref(o);
    view_node_free(&self);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_promote_requested, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promote_hot_only_with_demand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promote_all_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_idle_other_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_keeps_last_of_two, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_never_the_last, setup, teardown),
        cmocka_unit_test_setup_teardown(test_annotate_sums_peers_and_self, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
