/* Unit tests of the node's planner (src/node/planner*.c) with typed peers in (view_node_t, as
 * mesh_peers hands them out) and the planner's decision out:
 *  - standby (planner_demand.c, since S6e called with the peers and this node's view): a standby
 *    takes a model (promotion), a serving node gives its model back (demotion), and the demand
 *    sums of a listing entry;
 *  - the plan (planner.c:replan via planner_start / planner_kick): the model's group from the
 *    peers that announce themselves members, the election's mode and this node's role — waiting
 *    alone, idle beside a peer that fits, host or worker of a split on a memory shortfall.
 *
 * The planner is the node's real one over the real model manager (models_t, the shared test GGUF
 * files, models_fixture.h) whose child seams record starts and stops instead of spawning
 * llama-server; the peers are built with view.h's builders. The plan tests run a real mesh on
 * 127.0.0.1 alone and hand it the peers' announcements (encoded, then decoded by the mesh's
 * view_set as gossip's would be); the peers do not exist, so a split never launches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <unistd.h>
#include <uv.h>

#include "mesh_int.h" /* the test hands the mesh its peers' views (view_set_sync) */
#include "models_fixture.h"
#include "planner_int.h"
#include "standby.h"

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
    if (models_fixture_init(&fx, 0, fake_start, fake_stop) != 0) return -1;
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
    assert_true(pd_check_demote(&pl, &p, NULL, false));
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
    assert_false(pd_check_demote(&pl, &p, NULL, false));
    assert_int_equal(pl.n, 1);
    b->serving[0].pinned = true;
    assert_true(pd_check_demote(&pl, &p, NULL, false));
    assert_int_equal(pl.n, 0);
}

/* No other host: the last replica is kept, idle or not; a host that is not ready yet does not
 * count. Busy mesh demand keeps it too. */
static void test_demote_never_the_last(void **state)
{
    (void)state;
    serving_idle(0);
    peers_t none = {0};
    assert_false(pd_check_demote(&pl, &none, NULL, false));
    view_node_t *b = peer(HIGH);
    serves(b, M(0), false);
    b->serving[0].http_ready = false;
    peers_t p = P();
    assert_false(pd_check_demote(&pl, &p, NULL, false));
    b->serving[0].http_ready = true;
    rate(b, M(0), 10 * PROMO_HOT_PER_MIN); /* the mesh still wants two hosts */
    assert_false(pd_check_demote(&pl, &p, NULL, false));
    assert_int_equal(pl.n, 1);
    assert_int_equal(pl.demotions, 0);
}

/* A split that needs this node's memory more (split_needs_memory) takes even the last replica;
 * an assigned model is never demoted, whatever the mesh needs. */
static void test_demote_for_a_split(void **state)
{
    (void)state;
    serving_idle(0);
    peers_t none = {0};
    pl.models[0].assigned = true;
    assert_false(pd_check_demote(&pl, &none, NULL, true));
    assert_int_equal(pl.n, 1);
    pl.models[0].assigned = false;
    assert_true(pd_check_demote(&pl, &none, NULL, true));
    assert_int_equal(pl.n, 0);
    assert_true(pl.standby);
    assert_int_equal(pl.demotions, 1);
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

/* ---- the plan (planner.c:replan) over typed peers ---- */

static mesh_t *mesh;
static char home[64];
static uint64_t need; /* this node's need for model 0, its --model */

/* Model 0 is this node's --model; a mesh of its own on 127.0.0.1 (no join, no peer in gossip:
 * the test gives the mesh its peers' views directly). */
static int setup_replan(void **state)
{
    (void)state;
    if (models_fixture_init(&fx, 1u, fake_start, fake_stop) != 0) return -1;
    events[0] = '\0';
    n_peers = 0;
    snprintf(home, sizeof home, "/tmp/test_planner.XXXXXX");
    if (!mkdtemp(home)) return -1;
    setenv("LLAMA_CACHE", home, 1); /* a worker seeds its layers there (rpc_cache.h) */
    mesh_opts_t o = {.home = home,
                     .bind_host = "127.0.0.1",
                     .role = "worker",
                     .heartbeat_ms = 60000,
                     .ephemeral = true,
                     .tun = &fx.cfg.tun};
    char err[256];
    if (mesh_start(&mesh, &fx.loop, &o, err, sizeof err) != 0) {
        fprintf(stderr, "mesh_start: %s\n", err);
        return -1;
    }
    need = models_need_bytes(&fx.ms, &fx.ms.entries[0]);
    return 0;
}

static void mesh_stopped(void *data)
{
    *(bool *)data = true;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown_replan(void **state)
{
    (void)state;
    planner_stop(&pl);
    bool done = false;
    mesh_stop(mesh, mesh_stopped, &done);
    for (int k = 0; k < 1000 && !done; k++)
        uv_run(&fx.loop, UV_RUN_ONCE);
    nftw(home, rm_entry, 8, FTW_DEPTH | FTW_PHYS); /* the mesh's files, the worker's cache */
    for (size_t i = 0; i < n_peers; i++)
        view_node_free(&peers[i]);
    return done ? models_fixture_free(&fx) : -1;
}

/* A peer offering vram that has model 0 on its disk and is a member of its group (its --model
 * too), announcing the role it took in its own plan. */
static view_node_t *holder(const char *id, uint64_t vram, view_serve_role_t role)
{
    view_node_t *v = peer(id);
    v->vram_bytes = vram;
    view_avail_t *a = view_add_available(v, M(0));
    assert_non_null(a);
    a->size_bytes = fx.ms.entries[0].size;
    a->need_bytes = need;
    view_serving_t *s = view_add_serving(v, M(0));
    assert_non_null(s);
    s->member = true;
    s->role = role;
    return v;
}

/* This node offers `offer`; the peers announce what the test built (encoded, then decoded by
 * the mesh like gossip's); the planner starts and makes its plan. */
static const pp_state_t *plan_with(uint64_t offer)
{
    models_set_offer(&fx.ms, offer, 0);
    assert_int_equal(planner_init(&pl, &fx.loop, &fx.cfg, &fx.ms, &fx.sv, offer, NULL), 0);
    view_set_in_t in[4];
    json_t *anns[4];
    for (size_t i = 0; i < n_peers; i++) {
        anns[i] = json_object();
        assert_int_equal(view_encode(&peers[i], anns[i]), 0);
        in[i] = (view_set_in_t){peers[i].id, anns[i], 1, 1};
    }
    view_set_sync(&mesh->views, in, n_peers);
    for (size_t i = 0; i < n_peers; i++)
        json_decref(anns[i]);
    planner_start(&pl, mesh);
    for (int k = 0; k < 20; k++)
        uv_run(&fx.loop, UV_RUN_NOWAIT);
    assert_int_equal(pl.n, 1);
    assert_string_equal(pl.models[0].name, M(0));
    return &pl.models[0].st;
}

/* Too little memory and no peer: the model waits for capacity; nothing starts. */
static void test_replan_waits_alone(void **state)
{
    (void)state;
    const pp_state_t *st = plan_with(need / 2);
    assert_int_equal(st->mode, ELECTION_IMPOSSIBLE);
    assert_true(st->waiting);
    assert_string_equal(events, "");
}

/* A peer fits the model alone: it is the replica, this node (too small) idles for it. */
static void test_replan_peer_fits_solo(void **state)
{
    (void)state;
    holder(HIGH, 4 * need, VIEW_SERVE_REPLICA);
    const pp_state_t *st = plan_with(need / 2);
    assert_int_equal(st->mode, ELECTION_SOLO);
    assert_int_equal(st->role, ELECTION_IDLE);
    assert_false(st->waiting);
    assert_string_equal(events, "");
}

/* A peer that has the file but is no member of the group (it serves something else) does not
 * count: the model still waits. */
static void test_replan_non_member_ignored(void **state)
{
    (void)state;
    view_node_t *v = holder(HIGH, 4 * need, VIEW_SERVE_REPLICA);
    v->serving[0].member = false;
    const pp_state_t *st = plan_with(need / 2);
    assert_int_equal(st->mode, ELECTION_IMPOSSIBLE);
    assert_true(st->waiting);
}

/* Neither fits alone, together they do: a split whose host is the node with more memory (the
 * peer). This node waits for the host's plan; once the host announces a plan that names it (its
 * layers), it works for it. */
static void test_replan_split_peer_hosts(void **state)
{
    (void)state;
    view_node_t *h = holder(HIGH, need * 7 / 10, VIEW_SERVE_HOST);
    const pp_state_t *st = plan_with(need * 6 / 10);
    assert_int_equal(st->mode, ELECTION_SPLIT);
    assert_string_equal(st->host, HIGH);
    assert_int_equal(st->role, ELECTION_IDLE); /* no plan from the host yet */
    assert_string_equal(st->follow_plan, "");

    view_plan_t *plan = view_add_plan(h, &h->serving[0], "hhhhhhhh-1-1");
    assert_non_null(plan);
    plan->ngl = 99;
    plan->n_workers = 1;
    snprintf(plan->workers[0].id, sizeof plan->workers[0].id, "%s", mesh_node_id(mesh));
    plan->workers[0].first = 0;
    plan->workers[0].end = 3;
    plan->workers[0].weight = 3;
    json_t *ann = json_object();
    assert_int_equal(view_encode(h, ann), 0);
    view_set_in_t in = {h->id, ann, 1, 2};
    view_set_sync(&mesh->views, &in, 1);
    json_decref(ann);
    planner_kick(&pl);
    for (int k = 0; k < 100 && strcmp(st->follow_plan, "hhhhhhhh-1-1") != 0; k++)
        uv_run(&fx.loop, UV_RUN_ONCE);
    assert_int_equal(st->role, ELECTION_WORKER);
    assert_string_equal(st->follow_plan, "hhhhhhhh-1-1");
    assert_int_equal(st->my_range.first, 0);
    assert_int_equal(st->my_range.end, 3);
}

/* The same with this node the larger: it hosts, the peer is its one worker. */
static void test_replan_split_self_hosts(void **state)
{
    (void)state;
    holder(LOW, need * 6 / 10, VIEW_SERVE_WAITING);
    const pp_state_t *st = plan_with(need * 7 / 10);
    assert_int_equal(st->mode, ELECTION_SPLIT);
    assert_int_equal(st->role, ELECTION_HOST);
    assert_string_equal(st->host, mesh_node_id(mesh));
    assert_int_equal(st->n_workers, 1);
    assert_string_equal(st->workers[0].id, LOW);
}

/* This node's --model deleted (DELETE /api/delete): gone from its announcement at once (not
 * available, not served), no longer planned after the re-plan; its file back (a re-download)
 * plans it again. */
static void test_replan_drops_a_deleted_model(void **state)
{
    (void)state;
    plan_with(need / 2);
    model_entry_t *e = &fx.ms.entries[0];
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s", e->path);
    models_delete(&fx.ms, e);
    view_node_t self;
    assert_int_equal(self_view(&pl, &self), 0);
    assert_null(view_serving(&self, M(0)));
    assert_null(view_available(&self, M(0)));
    assert_false(view_requested(&self, M(0))); /* the --model file is not asked of the mesh */
    view_node_free(&self);
    planner_kick(&pl);
    for (int k = 0; k < 100 && pl.n; k++)
        uv_run(&fx.loop, UV_RUN_ONCE);
    assert_int_equal(pl.n, 0);
    model_entry_t *back;
    assert_int_equal(models_add_file(&fx.ms, path, &back, err, sizeof err), 0);
    assert_ptr_equal(back, e);
    planner_add_model(&pl, back);
    assert_int_equal(pl.n, 1);
    assert_ptr_equal(pl.models[0].e, e);
}

/* standby_join (the node policy enter_mesh calls): only a node that joins a mesh (a token)
 * without --model, and is not a client, is allocated and stands by; any other is left as it
 * was: not allocating, no standby driver. */
static void test_standby_join_only_joiners_without_model(void **state)
{
    (void)state;
    pl.allocating = false;
    standby_t sb = {0};
    passive_t *pv = NULL;
    token_t tok;
    memset(&tok, 0, sizeof tok);
    passive_opts_t o = {.joins = &tok, .n_joins = 0};
    assert_int_equal(standby_join(&sb, &fx.loop, &pl, NULL, false, &o, &pv), 0); /* no join */
    o.n_joins = 1;
    assert_int_equal(standby_join(&sb, &fx.loop, &pl, NULL, true, &o, &pv), 0); /* a client */
    pl.n = 1;
    assert_int_equal(standby_join(&sb, &fx.loop, &pl, NULL, false, &o, &pv), 0); /* --model */
    pl.n = 0;
    assert_false(pl.allocating);
    assert_false(sb.started);
    assert_null(pv);
    assert_null(pl.on_replanned);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_promote_requested, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promote_hot_only_with_demand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promote_all_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_idle_other_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_keeps_last_of_two, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_for_a_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demote_never_the_last, setup, teardown),
        cmocka_unit_test_setup_teardown(test_annotate_sums_peers_and_self, setup, teardown),
        cmocka_unit_test_setup_teardown(test_standby_join_only_joiners_without_model, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_replan_waits_alone, setup_replan, teardown_replan),
        cmocka_unit_test_setup_teardown(test_replan_peer_fits_solo, setup_replan, teardown_replan),
        cmocka_unit_test_setup_teardown(test_replan_non_member_ignored, setup_replan,
                                        teardown_replan),
        cmocka_unit_test_setup_teardown(test_replan_split_peer_hosts, setup_replan,
                                        teardown_replan),
        cmocka_unit_test_setup_teardown(test_replan_split_self_hosts, setup_replan,
                                        teardown_replan),
        cmocka_unit_test_setup_teardown(test_replan_drops_a_deleted_model, setup_replan,
                                        teardown_replan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
