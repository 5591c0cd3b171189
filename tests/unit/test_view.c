/* Unit tests for the typed view of a node (src/core/view.h): decoding peers' announcements with
 * bounds, encoding this node's, the round trip, and the memory a node offers a group. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view.h"

#define ID_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define ID_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define ID_C "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static json_t *parse(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (!j) fail_msg("bad test JSON: %s (line %d)", err.text, err.line);
    return j;
}

/* ---- a full, valid announcement ---- */

static const char *FULL =
    "{\"id\":\"" ID_A "\",\"version\":\"0.1.0\",\"role\":\"host\",\"vram_bytes\":8000000000,"
    "\"free_bytes\":3000000000,\"addrs\":[\"127.0.0.1:1\"],"
    "\"available_models\":[{\"name\":\"big\",\"size_bytes\":5000000000,\"need_bytes\":"
    "5600000000,\"host_bytes\":1200000000,\"type\":\"llm\",\"vision\":true},{\"name\":\"emb\","
    "\"size_bytes\":100,\"need_"
    "bytes\":110,"
    "\"type\":\"embedding\"},{\"name\":\"old\",\"size_bytes\":7}],"
    "\"requested_models\":[\"big\",\"wanted\"],"
    "\"serving\":[{\"model\":\"big\",\"member\":true,\"role\":\"host\",\"state\":\"ready\","
    "\"http_ready\":true,\"is_host\":true,\"split\":true,\"bytes\":2000000000,"
    "\"plan\":{\"id\":\"aaaaaaaa-5f-1\",\"ngl\":99,\"workers\":[{\"id\":\"" ID_B "\",\"first\":0,"
    "\"end\":10,\"output\":false,\"weight\":3},{\"id\":\"" ID_C "\",\"first\":10,\"end\":20,"
    "\"output\":true,\"weight\":5}]}},"
    "{\"model\":\"small\",\"member\":true,\"role\":\"worker\",\"state\":\"standby\","
    "\"http_ready\":false,\"is_host\":false,\"split\":false,\"bytes\":10,"
    "\"plan_ready\":\"bbbbbbbb-1-2\"},"
    "{\"model\":\"emb\",\"member\":false,\"role\":\"replica\",\"state\":\"loading\","
    "\"http_ready\":false,\"is_host\":true,\"bytes\":110}],"
    "\"request_rates\":{},\"rtt_ms\":{}}";

static void test_decode_full(void **state)
{
    (void)state;
    json_t *ann = parse(FULL);
    view_node_t n;
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    assert_int_equal(n.rejected, 0);
    assert_string_equal(n.id, ID_A);
    assert_int_equal(n.role, CATALOG_ROLE_HOST);
    assert_int_equal(n.vram_bytes, 8000000000ULL);
    assert_true(n.has_free);
    assert_int_equal(n.free_bytes, 3000000000ULL);

    assert_int_equal(n.n_available, 3);
    assert_string_equal(n.available[0].name, "big");
    assert_int_equal(n.available[0].size_bytes, 5000000000ULL);
    assert_int_equal(n.available[0].need_bytes, 5600000000ULL);
    assert_int_equal(n.available[0].host_bytes, 1200000000ULL);
    assert_int_equal(n.available[1].host_bytes, 0); /* absent */
    assert_true(n.available[0].has_type);
    assert_int_equal(n.available[0].type, MM_LLM);
    assert_int_equal(n.available[1].type, MM_EMBEDDING);
    assert_true(n.available[0].vision);
    assert_false(n.available[1].vision);
    assert_false(n.available[2].has_type);
    assert_int_equal(n.available[2].need_bytes, 0);
    assert_ptr_equal(view_available(&n, "emb"), &n.available[1]);
    assert_null(view_available(&n, "nope"));

    assert_int_equal(n.n_requested, 2);
    assert_string_equal(n.requested[1], "wanted");
    assert_true(view_requested(&n, "wanted"));
    assert_false(view_requested(&n, "emb"));

    assert_int_equal(n.n_serving, 3);
    const view_serving_t *s = view_serving(&n, "big");
    assert_non_null(s);
    assert_true(s->member && s->http_ready && s->is_host && s->split);
    assert_int_equal(s->role, VIEW_SERVE_HOST);
    assert_int_equal(s->state, VIEW_STATE_READY);
    assert_int_equal(s->bytes, 2000000000ULL);
    assert_string_equal(s->plan_ready, "");
    assert_non_null(s->plan);
    assert_string_equal(s->plan->id, "aaaaaaaa-5f-1");
    assert_int_equal(s->plan->ngl, 99);
    assert_int_equal(s->plan->n_workers, 2);
    assert_string_equal(s->plan->workers[0].id, ID_B);
    assert_int_equal(s->plan->workers[0].end, 10);
    assert_false(s->plan->workers[0].output);
    assert_int_equal(s->plan->workers[0].weight, 3);
    assert_string_equal(s->plan->workers[1].id, ID_C);
    assert_int_equal(s->plan->workers[1].first, 10);
    assert_int_equal(s->plan->workers[1].end, 20);
    assert_true(s->plan->workers[1].output);

    s = view_serving(&n, "small");
    assert_non_null(s);
    assert_int_equal(s->role, VIEW_SERVE_WORKER);
    assert_int_equal(s->state, VIEW_STATE_STANDBY);
    assert_false(s->is_host || s->http_ready || s->split);
    assert_null(s->plan);
    assert_string_equal(s->plan_ready, "bbbbbbbb-1-2");

    s = view_serving(&n, "emb");
    assert_false(s->member);
    assert_int_equal(s->role, VIEW_SERVE_REPLICA);
    assert_int_equal(s->state, VIEW_STATE_LOADING);

    /* the catalog sees what the announcement says */
    catalog_node_t cn;
    catalog_avail_t av[3];
    catalog_serving_t sv[3];
    const char *rq[2];
    view_to_catalog(&n, &cn, av, sv, rq);
    assert_string_equal(cn.id, ID_A);
    assert_true(cn.alive);
    assert_int_equal(cn.n_available, 3);
    assert_int_equal(cn.available[1].need_bytes, 110);
    assert_int_equal(cn.n_serving, 3);
    assert_int_equal(cn.serving[0].state, CATALOG_SERVE_READY);
    assert_int_equal(cn.serving[2].state, CATALOG_SERVE_LOADING); /* host, not ready */
    assert_true(cn.serving[2].is_host);
    assert_int_equal(cn.n_requested, 2);
    assert_string_equal(cn.requested[0], "big");

    view_node_free(&n);
    assert_int_equal(n.n_serving, 0);
    json_decref(ann);
}

/* ---- malformed input ---- */

static void test_decode_not_an_object_or_bad_id(void **state)
{
    (void)state;
    view_node_t n;
    const char *bad_docs[] = {"[]", "\"x\"", "3", "null"};
    for (size_t i = 0; i < sizeof bad_docs / sizeof *bad_docs; i++) {
        json_t *j = json_loads(bad_docs[i], JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        assert_int_equal(view_decode(j, ID_A, &n), -EINVAL);
        assert_int_equal(n.n_serving + n.n_available + n.n_requested, 0);
        view_node_free(&n);
        json_decref(j);
    }
    assert_int_equal(view_decode(NULL, ID_A, &n), -EINVAL);
    json_t *ok = parse("{}");
    const char *bad_ids[] = {
        NULL,
        "",
        "abc",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", /* upper case */
        ID_A "a",                                                           /* 65 chars */
        "gaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        assert_int_equal(view_decode(ok, bad_ids[i], &n), -EINVAL);
        view_node_free(&n);
    }
    /* an empty object is a node that says nothing */
    assert_int_equal(view_decode(ok, ID_A, &n), 0);
    assert_int_equal(n.rejected, 0);
    assert_int_equal(n.role, CATALOG_ROLE_WORKER);
    assert_false(n.has_free);
    view_node_free(&n);
    json_decref(ok);
}

static void test_decode_wrong_types(void **state)
{
    (void)state;
    json_t *ann = parse(
        "{\"role\":\"boss\",\"vram_bytes\":\"8\",\"free_bytes\":-1,"
        "\"available_models\":[5,{\"size_bytes\":1},{\"name\":7},{\"name\":\"\"},"
        "{\"name\":\"tab\\there\"},{\"name\":\"del\\u007f\"},"
        "{\"name\":\"ok\",\"size_bytes\":-5,\"need_bytes\":1.5,\"host_bytes\":-2,"
        "\"type\":\"foo\","
        "\"vision\":\"yes\"}],"
        "\"requested_models\":[7,\"fine\",\"bad\\u0001\",null],"
        "\"serving\":[{\"member\":true},{\"model\":\"m\",\"member\":\"yes\",\"role\":\"boss\","
        "\"state\":3,\"http_ready\":1,\"is_host\":null,\"split\":\"true\",\"bytes\":-1,"
        "\"plan\":[],\"plan_ready\":\"a\\nb\"}]}");
    /* a name with a NUL inside, and one of 128 bytes */
    json_t *av = json_object_get(ann, "available_models");
    json_array_append_new(av, json_pack("{s:o}", "name", json_stringn("a\0b", 3)));
    char long_name[CATALOG_NAME_MAX + 1];
    memset(long_name, 'x', CATALOG_NAME_MAX);
    long_name[CATALOG_NAME_MAX] = '\0';
    json_array_append_new(av, json_pack("{s:s}", "name", long_name));
    long_name[CATALOG_NAME_MAX - 1] = '\0'; /* 127 bytes: the longest valid name */
    json_array_append_new(av, json_pack("{s:s}", "name", long_name));
    /* a plan id too long for the field */
    json_t *sv = json_object_get(ann, "serving");
    char long_plan[VIEW_PLAN_ID_MAX + 1];
    memset(long_plan, 'p', VIEW_PLAN_ID_MAX);
    long_plan[VIEW_PLAN_ID_MAX] = '\0';
    json_array_append_new(sv, json_pack("{s:s,s:s}", "model", "m2", "plan_ready", long_plan));

    view_node_t n;
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    /* node: role, vram_bytes, free_bytes */
    assert_int_equal(n.role, CATALOG_ROLE_WORKER);
    assert_int_equal(n.vram_bytes, 0);
    assert_false(n.has_free);
    /* available: 5, no name, name 7, "", tab, DEL, NUL inside, 128 bytes skipped; "ok" kept
     * with size -5, need 1.5, host_bytes -2, type foo ignored; the 127-byte name kept */
    assert_int_equal(n.n_available, 2);
    assert_string_equal(n.available[0].name, "ok");
    assert_int_equal(n.available[0].size_bytes, 0);
    assert_int_equal(n.available[0].need_bytes, 0);
    assert_int_equal(n.available[0].host_bytes, 0);
    assert_false(n.available[0].has_type);
    assert_false(n.available[0].vision);
    assert_int_equal(strlen(n.available[1].name), CATALOG_NAME_MAX - 1);
    /* requested: 7, control character, null skipped */
    assert_int_equal(n.n_requested, 1);
    assert_string_equal(n.requested[0], "fine");
    /* serving: the entry without a model skipped; every field of "m" ignored */
    assert_int_equal(n.n_serving, 2);
    const view_serving_t *s = view_serving(&n, "m");
    assert_non_null(s);
    assert_false(s->member || s->http_ready || s->is_host || s->split);
    assert_int_equal(s->role, VIEW_SERVE_NONE);
    assert_int_equal(s->state, VIEW_STATE_NONE);
    assert_int_equal(s->bytes, 0);
    assert_null(s->plan);
    assert_string_equal(s->plan_ready, "");
    assert_string_equal(view_serving(&n, "m2")->plan_ready, "");
    assert_int_equal(n.rejected, 3 + 8 + 5 + 3 + 1 + 9 + 1);
    view_node_free(&n);

    /* lists that are not lists */
    json_t *j = parse("{\"available_models\":{},\"serving\":\"x\",\"requested_models\":1}");
    assert_int_equal(view_decode(j, ID_A, &n), 0);
    assert_int_equal(n.rejected, 3);
    assert_int_equal(n.n_available + n.n_serving + n.n_requested, 0);
    view_node_free(&n);
    json_decref(j);
    json_decref(ann);
}

static void test_oversized_lists(void **state)
{
    (void)state;
    json_t *ann = json_object();
    json_t *av = json_array(), *rq = json_array(), *sv = json_array();
    const size_t N = VIEW_MAX_LIST + 44;
    for (size_t i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%zu", i);
        json_array_append_new(av, json_pack("{s:s,s:I}", "name", name, "size_bytes", 1));
        json_array_append_new(rq, json_string(name));
        json_array_append_new(sv, json_pack("{s:s,s:b}", "model", name, "member", 1));
    }
    json_object_set_new(ann, "available_models", av);
    json_object_set_new(ann, "requested_models", rq);
    json_object_set_new(ann, "serving", sv);
    view_node_t n;
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    assert_int_equal(n.n_available, VIEW_MAX_LIST);
    assert_int_equal(n.n_requested, VIEW_MAX_LIST);
    assert_int_equal(n.n_serving, VIEW_MAX_LIST);
    assert_int_equal(n.rejected, 3 * 44);
    assert_string_equal(n.serving[VIEW_MAX_LIST - 1].model, "m255");
    assert_null(view_serving(&n, "m256"));
    /* the builders stop at the cap too */
    assert_null(view_add_serving(&n, "more"));
    assert_null(view_add_available(&n, "more"));
    assert_false(view_add_requested(&n, "more"));
    view_node_free(&n);
    json_decref(ann);
}

static json_t *plan_with(size_t n_workers)
{
    json_t *w = json_array();
    for (size_t i = 0; i < n_workers; i++) {
        char id[CATALOG_ID_LEN + 1];
        snprintf(id, sizeof id, "%064zx", i + 1);
        json_array_append_new(w,
                              json_pack("{s:s,s:I,s:I,s:b,s:I}", "id", id, "first", (json_int_t)i,
                                        "end", (json_int_t)i + 1, "output", 0, "weight", 1));
    }
    return json_pack("{s:s,s:i,s:o}", "id", "plan-1", "ngl", 5, "workers", w);
}

static void test_plan_bounds(void **state)
{
    (void)state;
    view_node_t n;
    /* 16 workers: kept; 17: the plan is dropped whole, the entry stays */
    json_t *ann = json_pack("{s:[{s:s,s:o},{s:s,s:o}]}", "serving", "model", "a", "plan",
                            plan_with(VIEW_MAX_PLAN_WORKERS), "model", "b", "plan",
                            plan_with(VIEW_MAX_PLAN_WORKERS + 1));
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    assert_int_equal(n.n_serving, 2);
    assert_non_null(view_serving(&n, "a")->plan);
    assert_int_equal(view_serving(&n, "a")->plan->n_workers, VIEW_MAX_PLAN_WORKERS);
    assert_null(view_serving(&n, "b")->plan);
    assert_int_equal(n.rejected, 1);
    view_node_free(&n);
    json_decref(ann);

    /* unreadable workers are left out, each counted; bad plan ids drop the plan */
    ann = parse("{\"serving\":[{\"model\":\"a\",\"plan\":{\"id\":\"p\",\"ngl\":-1,\"workers\":["
                "{\"id\":\"" ID_B "\",\"first\":0,\"end\":4,\"weight\":1},"
                "{\"id\":\"" ID_B "X\",\"first\":0,\"end\":4},"
                "{\"id\":\"" ID_C "\",\"first\":-1,\"end\":4},"
                "{\"id\":\"" ID_C "\",\"first\":0,\"end\":4294967296},"
                "{\"id\":\"" ID_C "\",\"first\":0},"
                "{\"id\":\"" ID_C "\",\"first\":0,\"end\":2,\"weight\":\"1\"},"
                "{\"id\":\"" ID_C "\",\"first\":1,\"end\":2,\"output\":\"yes\"},"
                "\"" ID_C "\"]}},"
                "{\"model\":\"b\",\"plan\":{\"id\":\"bad\\u0001\",\"workers\":[]}},"
                "{\"model\":\"c\",\"plan\":{\"ngl\":1}},"
                "{\"model\":\"d\",\"plan\":{\"id\":\"q\",\"workers\":{}}}]}");
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    const view_plan_t *p = view_serving(&n, "a")->plan;
    assert_non_null(p);
    assert_string_equal(p->id, "p");
    assert_int_equal(p->ngl, 0);
    assert_int_equal(p->n_workers, 2);
    assert_string_equal(p->workers[0].id, ID_B);
    assert_int_equal(p->workers[1].first, 1);
    assert_false(p->workers[1].output);
    assert_null(view_serving(&n, "b")->plan);
    assert_null(view_serving(&n, "c")->plan);
    assert_null(view_serving(&n, "d")->plan);
    /* ngl, 6 workers, the output field, 3 plans */
    assert_int_equal(n.rejected, 1 + 6 + 1 + 3);
    view_node_free(&n);
    json_decref(ann);

    /* at most VIEW_MAX_PLANS plans per node */
    json_t *sv = json_array();
    for (size_t i = 0; i < VIEW_MAX_PLANS + 1; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%zu", i);
        json_array_append_new(sv, json_pack("{s:s,s:o}", "model", name, "plan", plan_with(1)));
    }
    ann = json_pack("{s:o}", "serving", sv);
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    assert_int_equal(n.n_serving, VIEW_MAX_PLANS + 1);
    assert_int_equal(n.n_plans, VIEW_MAX_PLANS);
    assert_non_null(n.serving[VIEW_MAX_PLANS - 1].plan);
    assert_null(n.serving[VIEW_MAX_PLANS].plan);
    assert_int_equal(n.rejected, 1);
    view_node_free(&n);
    json_decref(ann);
}

/* plan.private (--split-private on the host): additive; absent is false, a non-boolean is
 * ignored and counted; encoded only when set; round-trips. */
static void test_plan_private(void **state)
{
    (void)state;
    static const struct {
        const char *field; /* inside the plan object, after the id */
        bool want;
        size_t rejected;
    } cases[] = {
        {"", false, 0},
        {",\"private\":true", true, 0},
        {",\"private\":false", false, 0},
        {",\"private\":\"yes\"", false, 1},
        {",\"private\":1", false, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"serving\":[{\"model\":\"m\",\"plan\":{\"id\":\"p-1\"%s,"
                 "\"workers\":[]}}]}",
                 cases[i].field);
        json_t *ann = parse(text);
        view_node_t n;
        assert_int_equal(view_decode(ann, ID_A, &n), 0);
        const view_plan_t *p = view_serving(&n, "m")->plan;
        assert_non_null(p);
        assert_int_equal(p->private_split, cases[i].want);
        assert_int_equal(n.rejected, cases[i].rejected);
        /* encoded back: "private" only when set; decoded equal */
        json_t *out = json_object();
        assert_int_equal(view_encode(&n, out), 0);
        json_t *plan = json_object_get(json_array_get(json_object_get(out, "serving"), 0), "plan");
        assert_non_null(plan);
        assert_int_equal(json_object_get(plan, "private") != NULL, cases[i].want);
        view_node_t back;
        assert_int_equal(view_decode(out, ID_A, &back), 0);
        assert_true(view_serving_equal(&n, &back));
        /* a plan that differs only in the flag is not equal */
        assert_int_equal(back.n_plans, 1);
        back.plans[0].private_split = !back.plans[0].private_split;
        assert_false(view_serving_equal(&n, &back));
        view_node_free(&back);
        json_decref(out);
        view_node_free(&n);
        json_decref(ann);
    }
}

/* A serving entry's slots and busy: bounded (an absurd or mistyped value counts as rejected and
 * reads 0), encoded only when set; busy alone is no change of what the node serves (load re-plans
 * nothing) but is a change of the node. */
static void test_slots_and_busy(void **state)
{
    (void)state;
    static const struct {
        const char *fields;
        uint32_t slots, busy;
        size_t rejected;
    } cases[] = {
        {"", 0, 0, 0},
        {",\"slots\":4,\"busy\":6", 4, 6, 0},
        {",\"slots\":4096,\"busy\":65535", 4096, 65535, 0},
        {",\"slots\":4097,\"busy\":65536", 0, 0, 2},
        {",\"busy\":-1", 0, 0, 1},
        {",\"busy\":\"many\"", 0, 0, 1},
        {",\"busy\":1.5", 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"serving\":[{\"model\":\"m\"%s}]}", cases[i].fields);
        json_t *ann = parse(text);
        view_node_t n;
        assert_int_equal(view_decode(ann, ID_A, &n), 0);
        const view_serving_t *s = view_serving(&n, "m");
        assert_non_null(s);
        assert_int_equal(s->slots, cases[i].slots);
        assert_int_equal(s->busy, cases[i].busy);
        assert_int_equal(n.rejected, cases[i].rejected);
        json_t *out = json_object();
        assert_int_equal(view_encode(&n, out), 0);
        json_t *e = json_array_get(json_object_get(out, "serving"), 0);
        assert_int_equal(json_object_get(e, "busy") != NULL, cases[i].busy != 0);
        assert_int_equal(json_integer_value(json_object_get(e, "busy")), cases[i].busy);
        view_node_t back;
        assert_int_equal(view_decode(out, ID_A, &back), 0);
        assert_true(view_node_equal(&n, &back));
        back.serving[0].busy++;
        assert_true(view_serving_equal(&n, &back));
        assert_false(view_node_equal(&n, &back));
        view_node_free(&back);
        json_decref(out);
        view_node_free(&n);
        json_decref(ann);
    }
}

/* ---- encode → decode ---- */

static void build_node(view_node_t *n, bool with_free)
{
    view_node_init(n);
    memcpy(n->id, ID_C, sizeof n->id);
    n->role = CATALOG_ROLE_HOST;
    n->vram_bytes = 9000000000ULL;
    n->has_free = with_free;
    n->free_bytes = with_free ? 1234567890ULL : 0;
    view_avail_t *a = view_add_available(n, "big");
    a->size_bytes = 5000000000ULL;
    a->need_bytes = 5500000001ULL;
    a->host_bytes = 700000001ULL;
    a->type = MM_LLM;
    a->has_type = true;
    a = view_add_available(n, "rr");
    a->size_bytes = 3;
    a->type = MM_RERANKING;
    a->has_type = true;
    assert_true(view_add_requested(n, "big"));
    assert_true(view_add_requested(n, "elsewhere"));
    assert_false(view_add_requested(n, "bad\nname"));
    view_serving_t *s = view_add_serving(n, "big");
    s->member = true;
    s->role = VIEW_SERVE_HOST;
    s->state = VIEW_STATE_LOADING;
    s->is_host = true;
    s->split = true;
    s->bytes = 3000000000ULL;
    view_plan_t *p = view_add_plan(n, s, "cccccccc-6561-3");
    assert_non_null(p);
    p->ngl = 12;
    p->workers[0] = (view_worker_t){.id = ID_A, .first = 0, .end = 6, .weight = 2};
    p->workers[1] = (view_worker_t){.id = ID_B, .first = 6, .end = 12, .output = true, .weight = 7};
    p->n_workers = 2;
    s = view_add_serving(n, "small");
    s->member = true;
    s->role = VIEW_SERVE_WAITING;
    s->state = VIEW_STATE_STANDBY;
    snprintf(s->plan_ready, sizeof s->plan_ready, "%s", "aaaaaaaa-1-1");
    s = view_add_serving(n, "rr");
    s->role = VIEW_SERVE_REPLICA;
    s->state = VIEW_STATE_READY;
    s->http_ready = s->is_host = true;
    s->bytes = 4;
    assert_null(view_add_serving(n, ""));
    assert_null(view_add_plan(n, s, "bad\tid"));
    assert_null(s->plan);
}

/* speed_mflops: optional; absurd claims are clamped, wrong types ignored; round-trips. */
/* out (n encoded, consumed) decodes to a node equal to n. */
static void decodes_back(const view_node_t *n, json_t *out)
{
    view_node_t back;
    assert_int_equal(view_decode(out, ID_A, &back), 0);
    assert_true(view_node_equal(n, &back));
    view_node_free(&back);
    json_decref(out);
}

static void test_speed(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        uint32_t want;
        size_t rejected;
    } cases[] = {
        {"{}", 0, 0},
        {"{\"speed_mflops\":12345}", 12345, 0},
        {"{\"speed_mflops\":0}", 0, 0},
        {"{\"speed_mflops\":99999999999999}", VIEW_SPEED_MAX, 0},
        {"{\"speed_mflops\":-5}", 0, 1},
        {"{\"speed_mflops\":1.5}", 0, 1},
        {"{\"speed_mflops\":\"fast\"}", 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = parse(cases[i].json);
        view_node_t n;
        assert_int_equal(view_decode(j, ID_A, &n), 0);
        assert_int_equal(n.speed_mflops, cases[i].want);
        assert_int_equal(n.rejected, cases[i].rejected);
        /* encoded back: present when known, absent otherwise */
        json_t *out = json_object();
        assert_int_equal(view_encode(&n, out), 0);
        json_t *v = json_object_get(out, "speed_mflops");
        if (cases[i].want)
            assert_int_equal(json_integer_value(v), cases[i].want);
        else
            assert_null(v);
        decodes_back(&n, out);
        view_node_free(&n);
        json_decref(j);
    }
}

/* rtt_ms: {"<node id>": ms}, bounded and validated; absent or {} (an old node) is no entry. */
static void test_rtt(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        size_t n;
        int32_t first;
        size_t rejected;
    } cases[] = {
        {"{}", 0, 0, 0},
        {"{\"rtt_ms\":{}}", 0, 0, 0},
        {"{\"rtt_ms\":[]}", 0, 0, 1},
        {"{\"rtt_ms\":{\"" ID_B "\":12}}", 1, 12, 0},
        {"{\"rtt_ms\":{\"" ID_B "\":12.6}}", 1, 13, 0},
        {"{\"rtt_ms\":{\"" ID_B "\":99999999}}", 1, RTT_MAX_MS, 0},
        {"{\"rtt_ms\":{\"" ID_B "\":-1}}", 0, 0, 1},
        {"{\"rtt_ms\":{\"" ID_B "\":\"near\"}}", 0, 0, 1},
        {"{\"rtt_ms\":{\"" ID_B "\":null,\"" ID_C "\":3}}", 1, 3, 1},
        {"{\"rtt_ms\":{\"bbbb\":1,\"" ID_A "\":1}}", 0, 0, 2}, /* not an id; its own */
        {"{\"rtt_ms\":{\"BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\":1}}", 0,
         0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = parse(cases[i].json);
        view_node_t n;
        assert_int_equal(view_decode(j, ID_A, &n), 0);
        if (n.n_rtt != cases[i].n || n.rejected != cases[i].rejected ||
            (n.n_rtt && n.rtt[0].ms != cases[i].first))
            fail_msg("%s: %zu entries (%d), %zu rejected", cases[i].json, n.n_rtt,
                     n.n_rtt ? n.rtt[0].ms : -1, n.rejected);
        json_t *out = json_object();
        assert_int_equal(view_encode(&n, out), 0);
        assert_true(cases[i].n ? json_is_object(json_object_get(out, "rtt_ms"))
                               : json_object_get(out, "rtt_ms") == NULL);
        decodes_back(&n, out);
        view_node_free(&n);
        json_decref(j);
    }
    /* at most RTT_MAX_ENTRIES kept, the rest rejected; a changed value is a changed view */
    json_t *ann = json_object(), *r = json_object();
    char id[CATALOG_ID_LEN + 1];
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "%064x", i + 1);
        json_object_set_new(r, id, json_integer(i));
    }
    json_object_set_new(ann, "rtt_ms", r);
    view_node_t a, b;
    assert_int_equal(view_decode(ann, ID_A, &a), 0);
    assert_int_equal(a.n_rtt, RTT_MAX_ENTRIES);
    assert_int_equal(a.rejected, 40 - RTT_MAX_ENTRIES);
    json_object_set_new(r, id, json_integer(7)); /* the 40th: dropped either way */
    assert_int_equal(view_decode(ann, ID_A, &b), 0);
    assert_true(view_node_equal(&a, &b));
    view_node_free(&b);
    snprintf(id, sizeof id, "%064x", 1);
    json_object_set_new(r, id, json_integer(5));
    assert_int_equal(view_decode(ann, ID_A, &b), 0);
    assert_false(view_node_equal(&a, &b));
    view_node_free(&b);
    view_node_free(&a);
    json_decref(ann);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int with_free = 0; with_free < 2; with_free++) {
        view_node_t n, back;
        build_node(&n, with_free);
        json_t *ann = json_pack("{s:s,s:i}", "free_bytes", "stale", "api_port", 1);
        assert_int_equal(view_encode(&n, ann), 0);
        assert_int_equal(json_integer_value(json_object_get(ann, "api_port")), 1);
        assert_int_equal(json_object_get(ann, "free_bytes") != NULL, with_free);
        /* through the wire's text form */
        char *text = json_dumps(ann, JSON_COMPACT);
        json_t *again = parse(text);
        assert_int_equal(view_decode(again, ID_C, &back), 0);
        assert_int_equal(back.rejected, 0);
        assert_true(view_node_equal(&n, &back));
        assert_true(view_serving_equal(&n, &back));
        assert_int_equal(view_available(&back, "big")->host_bytes, 700000001ULL);
        assert_int_equal(view_available(&back, "rr")->host_bytes, 0);
        /* equality notices a change of host bytes */
        back.available[0].host_bytes++;
        assert_false(view_node_equal(&n, &back));
        back.available[0].host_bytes--;
        /* and equality notices a change in a plan */
        view_plan_t *p = (view_plan_t *)view_serving(&back, "big")->plan;
        p->workers[1].weight++;
        assert_false(view_serving_equal(&n, &back));
        assert_false(view_node_equal(&n, &back));
        free(text);
        json_decref(again);
        json_decref(ann);
        view_node_free(&n);
        view_node_free(&back);
    }
}

/* ---- model_source and downloading ---- */

static void test_sources_and_downloads(void **state)
{
    (void)state;
    /* valid entries are kept; a path, a bare name, a control character, an overlong ref, a wrong
     * type, bytes above a known total and a duplicate download are rejected, one count each */
    char longref[VIEW_REF_MAX + 40] = "hf://org/repo/";
    memset(longref + strlen(longref), 'x', VIEW_REF_MAX);
    strcpy(longref + VIEW_REF_MAX + 14, ".gguf");
    static char text[4096];
    int w = snprintf(text, sizeof text,
                     "{\"model_source\":{\"tiny\":{\"ref\":\"hf://org/tiny-GGUF/tiny.gguf\","
                     "\"size_bytes\":1234},\"qwen\":{\"ref\":\"Qwen2.5-0.5B-Instruct-Q4_K_M\"},"
                     "\"u\":{\"ref\":\"https://example.org/m.gguf\",\"size_bytes\":-1},"
                     "\"p\":{\"ref\":\"/etc/passwd\"},\"n\":{\"ref\":\"justaname\"},"
                     "\"c\":{\"ref\":\"hf://org/r/a\\u0001.gguf\"},\"l\":{\"ref\":\"%s\"},"
                     "\"s\":\"hf://org/r/x.gguf\"},"
                     "\"downloading\":[{\"model\":\"tiny\",\"bytes\":10,\"total\":1234},"
                     "{\"model\":\"qwen\",\"bytes\":5},{\"model\":\"x\",\"bytes\":9,"
                     "\"total\":8},{\"model\":\"tiny\",\"bytes\":1,\"total\":2},"
                     "{\"bytes\":1}]}",
                     longref);
    assert_true(w > 0 && (size_t)w < sizeof text);
    json_t *j = parse(text);
    view_node_t n, back;
    assert_int_equal(view_decode(j, ID_A, &n), 0);
    assert_int_equal(n.n_sources, 3);
    const view_source_t *s = view_source(&n, "tiny");
    assert_non_null(s);
    assert_string_equal(s->ref, "hf://org/tiny-GGUF/tiny.gguf");
    assert_int_equal(s->size_bytes, 1234);
    assert_int_equal(view_source(&n, "qwen")->size_bytes, 0);
    assert_int_equal(view_source(&n, "u")->size_bytes, 0); /* a negative size is ignored */
    assert_null(view_source(&n, "p"));
    assert_null(view_source(&n, "n"));
    assert_int_equal(n.n_downloads, 2);
    assert_int_equal(view_download(&n, "tiny")->bytes, 10);
    assert_int_equal(view_download(&n, "tiny")->total, 1234);
    assert_int_equal(view_download(&n, "qwen")->total, 0);
    assert_null(view_download(&n, "x"));
    /* u's size, p, n, c, l, s; x, the second tiny, the nameless one */
    assert_int_equal(n.rejected, 9);
    /* round trip */
    json_t *out = json_object();
    assert_int_equal(view_encode(&n, out), 0);
    assert_int_equal(view_decode(out, ID_A, &back), 0);
    assert_int_equal(back.rejected, 0);
    assert_true(view_node_equal(&n, &back));
    view_download_t *d = (view_download_t *)view_download(&back, "tiny");
    d->bytes++;
    assert_false(view_node_equal(&n, &back));
    view_node_free(&back);
    /* none left: the keys disappear from the announcement */
    view_node_t empty;
    view_node_init(&empty);
    assert_int_equal(view_encode(&empty, out), 0);
    assert_null(json_object_get(out, "model_source"));
    assert_null(json_object_get(out, "downloading"));
    /* building refuses a local path */
    assert_null(view_add_source(&empty, "m", "./m.gguf"));
    assert_non_null(view_add_source(&empty, "m", "org/repo:Q4_K_M"));
    /* a reference that brings a vision projector is a source like any (model_ref.h); a
     * projector that escapes the repo is not */
    assert_non_null(view_add_source(&empty, "v", "hf://o/r/v.gguf?mmproj=mmproj-v-F16.gguf"));
    assert_string_equal(view_source(&empty, "v")->ref, "hf://o/r/v.gguf?mmproj=mmproj-v-F16.gguf");
    assert_null(view_add_source(&empty, "w", "hf://o/r/w.gguf?mmproj=../x/mmproj.gguf"));
    /* the catalog learns a requested model's size from its source */
    assert_true(view_add_requested(&empty, "m"));
    view_add_source(&empty, "m", "org/repo:Q4_K_M")->size_bytes = 77;
    memcpy(empty.id, ID_B, sizeof empty.id);
    catalog_node_t cn;
    const char *rq[1];
    uint64_t rqs[1];
    view_to_catalog_sized(&empty, &cn, NULL, NULL, rq, rqs);
    catalog_t cat;
    assert_int_equal(catalog_build(&cn, 1, &cat), 0);
    assert_int_equal(catalog_find(&cat, "m")->size_bytes, 77);
    assert_true(catalog_find(&cat, "m")->requested);
    assert_int_equal(catalog_find(&cat, "m")->n_holders, 0);
    catalog_free(&cat);
    view_node_free(&empty);
    json_decref(out);
    json_decref(j);
    view_node_free(&n);
}

/* ---- the memory a node offers a group ---- */

static void test_offer(void **state)
{
    (void)state;
    view_node_t n;
    view_node_init(&n);
    n.vram_bytes = 100;
    view_serving_t *s = view_add_serving(&n, "held");
    s->bytes = 30;
    /* no free_bytes announced: all it offers */
    assert_int_equal(view_offer_for(&n, "held"), 100);
    n.has_free = true;
    n.free_bytes = 50;
    assert_int_equal(view_offer_for(&n, "held"), 80);  /* free + held for it */
    assert_int_equal(view_offer_for(&n, "other"), 50); /* free only */
    n.free_bytes = 90;
    assert_int_equal(view_offer_for(&n, "held"), 100); /* capped at vram */
    n.free_bytes = UINT64_MAX;
    n.vram_bytes = UINT64_MAX;
    assert_int_equal(view_offer_for(&n, "held"), UINT64_MAX); /* saturating */
    n.free_bytes = 0;
    n.vram_bytes = 100;
    assert_int_equal(view_offer_for(&n, "other"), 0);
    view_node_free(&n);
}

/* devices (issue 28): the accelerators a node announces, bounded and checked like every other
 * field from a peer, and carried through the round trip. Table: one entry per case, whether it
 * is kept. */
static void test_devices(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        bool kept;
    } cases[] = {
        {"{\"name\":\"Vulkan0\",\"backend\":\"Vulkan\",\"description\":\"llvmpipe (LLVM 15.0.6, "
         "256 bits)\",\"total_bytes\":2147483648,\"free_bytes\":2147483648}",
         true},
        {"{\"name\":\"CUDA1\",\"backend\":\"CUDA\",\"description\":\"\",\"total_bytes\":10,"
         "\"free_bytes\":0}",
         true},
        {"{\"name\":\"Metal\",\"backend\":\"Metal\",\"description\":\"Apple M2\"}", true},
        {"{\"name\":\"bad name\",\"backend\":\"CUDA\",\"description\":\"x\"}", false},
        {"{\"name\":\"\",\"backend\":\"CUDA\",\"description\":\"x\"}", false},
        {"{\"name\":\"CUDA0\",\"description\":\"x\"}", false},
        {"{\"name\":\"CUDA0\",\"backend\":\"CU/DA\",\"description\":\"x\"}", false},
        {"{\"name\":\"CUDA0\",\"backend\":\"CUDA\",\"description\":\"a\\u0001b\"}", false},
        {"{\"name\":\"CUDA0\",\"backend\":\"CUDA\",\"description\":5}", false},
        {"{\"name\":\"CUDA0\",\"backend\":\"CUDA\",\"description\":\"x\",\"total_bytes\":-1}",
         false},
        {"{\"name\":\"CUDA0\",\"backend\":\"CUDA\",\"description\":\"x\",\"total_bytes\":1,"
         "\"free_bytes\":2}",
         false},
        {"\"CUDA0\"", false},
        {"{\"name\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\",\"backend\":\"A\",\"description\":"
         "\"\"}",
         false},
    };
    size_t want_kept = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[512];
        snprintf(buf, sizeof buf, "{\"devices\":[%s]}", cases[i].json);
        json_t *j = parse(buf);
        view_node_t n;
        assert_int_equal(view_decode(j, ID_A, &n), 0);
        if (n.n_devices != (cases[i].kept ? 1u : 0u)) fail_msg("case %zu: %s", i, cases[i].json);
        assert_int_equal(n.rejected, cases[i].kept ? 0 : 1);
        want_kept += cases[i].kept;
        view_node_free(&n);
        json_decref(j);
    }
    assert_int_equal(want_kept, 3);

    /* the first entry decoded, every field */
    json_t *j = parse("{\"devices\":[{\"name\":\"Vulkan0\",\"backend\":\"Vulkan\","
                      "\"description\":\"llvmpipe\",\"total_bytes\":200,\"free_bytes\":100}]}");
    view_node_t n, back;
    assert_int_equal(view_decode(j, ID_A, &n), 0);
    assert_string_equal(n.devices[0].name, "Vulkan0");
    assert_string_equal(n.devices[0].backend, "Vulkan");
    assert_string_equal(n.devices[0].desc, "llvmpipe");
    assert_int_equal(n.devices[0].total_bytes, 200);
    assert_int_equal(n.devices[0].free_bytes, 100);
    view_node_free(&n);
    json_decref(j);

    /* 12 devices: VIEW_MAX_DEVICES kept, the rest rejected; encoded back and decoded equal */
    json_t *list = json_array();
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof name, "CUDA%d", i);
        json_array_append_new(list, json_pack("{s:s,s:s,s:s,s:i,s:i}", "name", name, "backend",
                                              "CUDA", "description", "G", "total_bytes", 10 + i,
                                              "free_bytes", i));
    }
    j = json_pack("{s:o}", "devices", list);
    assert_int_equal(view_decode(j, ID_A, &n), 0);
    assert_int_equal(n.n_devices, VIEW_MAX_DEVICES);
    assert_int_equal(n.rejected, 12 - VIEW_MAX_DEVICES);
    assert_string_equal(n.devices[VIEW_MAX_DEVICES - 1].name, "CUDA7");
    json_t *out = json_object();
    assert_int_equal(view_encode(&n, out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "devices")), VIEW_MAX_DEVICES);
    assert_int_equal(view_decode(out, ID_A, &back), 0);
    assert_true(view_node_equal(&n, &back));
    back.devices[3].free_bytes++;
    assert_false(view_node_equal(&n, &back));
    view_node_free(&back);
    json_decref(out);
    view_node_free(&n);
    json_decref(j);

    /* a node without devices (CPU and RAM) announces none: the field is left out */
    view_node_init(&n);
    memcpy(n.id, ID_A, sizeof n.id);
    out = json_object();
    assert_int_equal(view_encode(&n, out), 0);
    assert_null(json_object_get(out, "devices"));
    json_decref(out);
    view_node_free(&n);
}

/* addrs and nostr_published (the mesh's own fields, decoded with the rest since S13): bounded,
 * checked, and carried through the round trip. */
static void test_addrs_and_published(void **state)
{
    (void)state;
    view_node_t n, back;
    json_t *ann = parse(FULL);
    assert_int_equal(view_decode(ann, ID_A, &n), 0);
    assert_int_equal(n.n_addrs, 1);
    assert_string_equal(n.addrs[0], "127.0.0.1:1");
    assert_false(n.nostr_published);
    view_node_free(&n);
    json_decref(ann);

    /* 20 addresses: 16 kept, 4 rejected; a non-string, an empty and an over-long one rejected */
    json_t *j = parse("{\"nostr_published\":true}");
    json_t *addrs = json_array();
    for (int i = 0; i < 20; i++) {
        char a[32];
        snprintf(a, sizeof a, "10.0.0.%d:9337", i);
        json_array_append_new(addrs, json_string(a));
    }
    json_array_insert_new(addrs, 0, json_integer(5));
    json_array_insert_new(addrs, 1, json_string(""));
    char longa[VIEW_ADDR_MAX + 1];
    memset(longa, 'x', VIEW_ADDR_MAX);
    longa[VIEW_ADDR_MAX] = '\0';
    json_array_insert_new(addrs, 2, json_string(longa));
    json_object_set_new(j, "addrs", addrs);
    assert_int_equal(view_decode(j, ID_A, &n), 0);
    assert_int_equal(n.n_addrs, VIEW_MAX_ADDRS);
    assert_string_equal(n.addrs[0], "10.0.0.0:9337");
    assert_string_equal(n.addrs[VIEW_MAX_ADDRS - 1], "10.0.0.15:9337");
    assert_int_equal(n.rejected, 3 + 4);
    assert_true(n.nostr_published);

    /* encoded back only because set; decoded equal */
    json_t *out = json_object();
    assert_int_equal(view_encode(&n, out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "addrs")), VIEW_MAX_ADDRS);
    assert_true(json_is_true(json_object_get(out, "nostr_published")));
    assert_int_equal(view_decode(out, ID_A, &back), 0);
    assert_true(view_node_equal(&n, &back));
    back.nostr_published = false;
    assert_false(view_node_equal(&n, &back));
    view_node_free(&back);
    json_decref(out);

    /* a node without them (this node's own view) leaves the announcement's as they are */
    view_node_t self;
    view_node_init(&self);
    memcpy(self.id, ID_A, sizeof self.id);
    out = parse("{\"addrs\":[\"1.2.3.4:5\"]}");
    assert_int_equal(view_encode(&self, out), 0);
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "addrs"), 0)),
                        "1.2.3.4:5");
    assert_null(json_object_get(out, "nostr_published"));
    json_decref(out);

    /* wrong types are ignored and counted */
    view_node_free(&n);
    json_decref(j);
    j = parse("{\"addrs\":\"1.2.3.4:5\",\"nostr_published\":1}");
    assert_int_equal(view_decode(j, ID_A, &n), 0);
    assert_int_equal(n.n_addrs, 0);
    assert_false(n.nostr_published);
    assert_int_equal(n.rejected, 2);
    view_node_free(&n);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_full),
        cmocka_unit_test(test_decode_not_an_object_or_bad_id),
        cmocka_unit_test(test_decode_wrong_types),
        cmocka_unit_test(test_oversized_lists),
        cmocka_unit_test(test_plan_bounds),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_plan_private),
        cmocka_unit_test(test_slots_and_busy),
        cmocka_unit_test(test_speed),
        cmocka_unit_test(test_rtt),
        cmocka_unit_test(test_offer),
        cmocka_unit_test(test_sources_and_downloads),
        cmocka_unit_test(test_addrs_and_published),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
