/* Unit tests for the ROUTE_REQUEST frames and the passive node's choices (src/core/route_table.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route_table.h"

static void mkid(char out[65], unsigned i)
{
    snprintf(out, 65, "%064x", i);
}

static rt_table_t *new_table(void)
{
    rt_table_t *t = malloc(sizeof *t);
    assert_non_null(t);
    rt_table_init(t, "abc123");
    return t;
}

static void test_request_roundtrip(void **state)
{
    (void)state;
    rt_request_t rq, back;
    memset(&rq, 0, sizeof rq);
    mkid(rq.id, 7);
    rq.role = RT_ROLE_STANDBY;
    rq.vram_bytes = 123456789;
    snprintf(rq.models[rq.n_models++], CATALOG_NAME_MAX, "qwen");
    snprintf(rq.models[rq.n_models++], CATALOG_NAME_MAX, "glm");
    mkid(rq.silent[rq.n_silent++], 9);
    json_t *f = rt_request_encode(&rq);
    assert_non_null(f);
    assert_int_equal(rt_request_decode(f, rq.id, &back), 0);
    assert_int_equal(back.n_silent, 1);
    assert_string_equal(back.silent[0], rq.silent[0]);
    assert_string_equal(back.id, rq.id);
    assert_int_equal(back.role, RT_ROLE_STANDBY);
    assert_int_equal(back.vram_bytes, 123456789);
    assert_int_equal(back.n_models, 2);
    assert_string_equal(back.models[1], "glm");
    assert_int_equal(back.rejected, 0);
    /* the id must be the authenticated peer's */
    char other[65];
    mkid(other, 8);
    assert_int_equal(rt_request_decode(f, other, &back), -EPERM);
    json_decref(f);
}

static void test_request_invalid(void **state)
{
    (void)state;
    char id[65];
    mkid(id, 1);
    rt_request_t out;
    const char *bad[] = {
        "[]",
        "{\"type\":\"route_table\",\"id\":\"%s\",\"role\":\"client\"}",
        "{\"type\":\"route_request\",\"role\":\"client\"}",
        "{\"type\":\"route_request\",\"id\":\"%s\",\"role\":\"host\"}",
        "{\"type\":\"route_request\",\"id\":\"%s\"}",
        "{\"type\":\"route_request\",\"id\":\"XYZ\",\"role\":\"client\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[512];
        const char *at = strstr(bad[i], "%s");
        if (at)
            snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - bad[i]), bad[i], id, at + 2);
        else
            snprintf(buf, sizeof buf, "%s", bad[i]);
        json_t *f = json_loads(buf, 0, NULL);
        assert_non_null(f);
        assert_int_equal(rt_request_decode(f, id, &out), -EINVAL);
        json_decref(f);
    }
    /* wrong field types and bad names are skipped and counted, the rest is kept */
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"type\":\"route_request\",\"id\":\"%s\",\"role\":\"client\",\"vram_bytes\":-5,"
             "\"models\":[\"a\",7,\"\",\"a\",\"b\\u0001\",\"c\"],"
             "\"silent\":[\"%s\",\"XYZ\",3]}",
             id, id);
    json_t *f = json_loads(buf, 0, NULL);
    assert_int_equal(rt_request_decode(f, id, &out), 0);
    assert_int_equal(out.vram_bytes, 0);
    assert_int_equal(out.n_models, 2);
    assert_string_equal(out.models[1], "c");
    assert_int_equal(out.n_silent, 1); /* the hints: bad ids skipped and counted */
    assert_int_equal(out.rejected, 7);
    json_decref(f);
}

static void test_table_roundtrip(void **state)
{
    (void)state;
    rt_table_t *t = new_table(), *b = malloc(sizeof *b);
    t->refresh_ms = 30000;
    char id[65];
    for (unsigned i = 0; i < 3; i++) {
        mkid(id, i + 1);
        int k = rt_table_add_node(t, id, (i + 1) * 1000);
        assert_int_equal(k, (int)i);
        assert_true(rt_node_add_addr(&t->nodes[k], "127.0.0.1:4000"));
        assert_false(rt_node_add_addr(&t->nodes[k], "127.0.0.1:4000")); /* duplicate */
    }
    rt_model_t *m = rt_table_add_model(t, "qwen", CATALOG_READY);
    m->has_type = true;
    m->type = MM_EMBEDDING;
    assert_true(rt_model_add_host(m, 0, 12));
    assert_true(rt_model_add_host(m, 2, 0));
    assert_false(rt_model_add_host(m, 2, 0));
    assert_null(rt_table_add_model(t, "qwen", CATALOG_READY));
    assert_non_null(rt_table_add_model(t, "big", CATALOG_NEEDS_CAPACITY));
    json_t *f = rt_table_encode(t);
    assert_int_equal(rt_table_decode(f, b), 0);
    assert_int_equal(b->rejected, 0);
    assert_string_equal(b->mesh_id, "abc123");
    assert_int_equal(b->refresh_ms, 30000);
    assert_int_equal(b->n_nodes, 3);
    assert_int_equal(b->nodes[2].vram_bytes, 3000);
    assert_string_equal(b->nodes[1].addrs[0], "127.0.0.1:4000");
    assert_int_equal(b->n_models, 2);
    const rt_model_t *q = rt_table_find_model(b, "qwen");
    assert_non_null(q);
    assert_int_equal(q->status, CATALOG_READY);
    assert_true(q->has_type);
    assert_int_equal(q->type, MM_EMBEDDING);
    assert_int_equal(q->n_hosts, 2);
    assert_int_equal(q->hosts[0].load, 12);
    assert_string_equal(b->nodes[q->hosts[1].node].id, t->nodes[2].id);
    assert_int_equal(rt_table_find_model(b, "big")->status, CATALOG_NEEDS_CAPACITY);
    json_decref(f);
    free(t);
    free(b);
}

static void test_table_caps_and_validation(void **state)
{
    (void)state;
    json_t *nodes = json_array(), *hosts = json_array(), *models = json_array();
    char id[65];
    for (unsigned i = 0; i < RT_MAX_NODES + 20; i++) {
        mkid(id, i);
        json_t *addrs = json_array();
        for (int a = 0; a < RT_MAX_ADDRS + 2; a++) {
            char s[32];
            snprintf(s, sizeof s, "10.0.0.%d:1", a);
            json_array_append_new(addrs, json_string(s));
        }
        json_array_append_new(nodes, json_pack("{s:s,s:o,s:I}", "id", id, "addrs", addrs,
                                               "vram_bytes", (json_int_t)i));
    }
    json_array_append_new(nodes, json_pack("{s:s}", "id", "not-hex"));
    mkid(id, 3);
    json_array_append_new(nodes, json_pack("{s:s}", "id", id)); /* duplicate */
    for (unsigned i = 0; i < RT_MAX_HOSTS + 5; i++) {
        mkid(id, i);
        json_array_append_new(hosts, json_pack("{s:s,s:i}", "id", id, "load", 1));
    }
    mkid(id, 100000); /* not in nodes */
    json_array_append_new(hosts, json_pack("{s:s}", "id", id));
    json_array_append_new(
        models, json_pack("{s:s,s:s,s:o}", "name", "m", "status", "ready", "hosts", hosts));
    json_array_append_new(models, json_pack("{s:s,s:s}", "name", "x", "status", "bogus"));
    json_array_append_new(
        models, json_pack("{s:s,s:s,s:s}", "name", "y", "status", "loading", "type", "nope"));
    for (unsigned i = 0; i < RT_MAX_MODELS + 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "model-%u", i);
        json_array_append_new(models, json_pack("{s:s,s:s}", "name", name, "status", "unloaded"));
    }
    json_t *f = json_pack("{s:s,s:s,s:o,s:o}", "type", "route_table", "mesh_id", "m1", "nodes",
                          nodes, "models", models);
    rt_table_t *t = new_table();
    assert_int_equal(rt_table_decode(f, t), 0);
    assert_int_equal(t->n_nodes, RT_MAX_NODES);
    for (size_t i = 0; i < t->n_nodes; i++)
        assert_int_equal(t->nodes[i].n_addrs, RT_MAX_ADDRS);
    const rt_model_t *m = rt_table_find_model(t, "m");
    assert_int_equal(m->n_hosts, RT_MAX_HOSTS);
    assert_null(rt_table_find_model(t, "x"));
    assert_false(rt_table_find_model(t, "y")->has_type);
    assert_int_equal(t->n_models, RT_MAX_MODELS);
    size_t expect = 20 + 2             /* nodes over the cap, bad id, duplicate */
                    + RT_MAX_NODES * 2 /* addresses over the cap */
                    + 5 + 1            /* hosts over the cap, unknown host */
                    + 1 + 1            /* bad status, bad type */
                    + (RT_MAX_MODELS + 3 + 2 - RT_MAX_MODELS); /* models over the cap */
    assert_int_equal(t->rejected, expect);
    json_decref(f);
    /* not a table */
    const char *bad[] = {"[]", "{\"type\":\"route_table\"}", "{\"mesh_id\":\"a\"}",
                         "{\"type\":\"route_table\",\"mesh_id\":\"\"}",
                         "{\"type\":\"route_table\",\"mesh_id\":\"a b\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        assert_int_equal(rt_table_decode(j, t), -EINVAL);
        json_decref(j);
    }
    free(t);
}

/* A table with one ready model hosted by n new nodes (ids id0, id0 + 1, ...). */
static rt_model_t *hosted(rt_table_t *t, const char *model, unsigned n, unsigned id0)
{
    char id[65];
    rt_model_t *m = rt_table_add_model(t, model, CATALOG_READY);
    for (unsigned i = 0; i < n; i++) {
        mkid(id, id0 + i);
        assert_true(rt_model_add_host(m, (size_t)rt_table_add_node(t, id, 0), 0));
    }
    return m;
}

/* A host's slots travel in the table; a bad count is rejected, not taken. (The pick and spill
 * cases that were here test core/route_decide now: test_route_decide.c.) */
static void test_slots(void **state)
{
    (void)state;
    rt_table_t *t = new_table();
    rt_model_t *m = hosted(t, "qwen", 3, 500);
    assert_false(rt_model_set_slots(m, 0, RT_MAX_SLOTS + 1));
    assert_false(rt_model_set_slots(m, 77, 4)); /* not a host */
    rt_model_set_slots(m, m->hosts[0].node, 7);
    json_t *f = rt_table_encode(t);
    rt_table_t *d = new_table();
    assert_int_equal(rt_table_decode(f, d), 0);
    assert_int_equal(d->rejected, 0);
    const rt_model_t *dm = rt_table_find_model(d, "qwen");
    assert_int_equal(rt_host_slots(dm, dm->hosts[0].node), 7);
    json_t *h = json_array_get(
        json_object_get(json_array_get(json_object_get(f, "models"), 0), "hosts"), 1);
    json_object_set_new(h, "slots", json_integer(RT_MAX_SLOTS + 1));
    assert_int_equal(rt_table_decode(f, d), 0);
    assert_int_equal(d->rejected, 1);
    dm = rt_table_find_model(d, "qwen");
    assert_int_equal(dm->n_hosts, 3); /* the host is kept, its slots unknown */
    assert_int_equal(rt_host_slots(dm, dm->hosts[1].node), RT_DEFAULT_SLOTS);
    json_decref(f);
    free(d);
    free(t);
}

/* A host's vision mark (it serves the model with a projector) travels in the table, only when
 * true; absent is false (an older node's table); a non-boolean is rejected, not taken. */
static void test_vision(void **state)
{
    (void)state;
    rt_table_t *t = new_table();
    rt_model_t *m = hosted(t, "llava", 2, 600);
    assert_false(rt_model_set_vision(m, 77, true)); /* not a host */
    assert_true(rt_model_set_vision(m, m->hosts[1].node, true));
    json_t *f = rt_table_encode(t);
    json_t *hosts = json_object_get(json_array_get(json_object_get(f, "models"), 0), "hosts");
    assert_null(json_object_get(json_array_get(hosts, 0), "vision"));
    assert_true(json_is_true(json_object_get(json_array_get(hosts, 1), "vision")));
    rt_table_t *d = new_table();
    assert_int_equal(rt_table_decode(f, d), 0);
    assert_int_equal(d->rejected, 0);
    const rt_model_t *dm = rt_table_find_model(d, "llava");
    assert_false(dm->hosts[0].vision);
    assert_true(dm->hosts[1].vision);
    json_object_set_new(json_array_get(hosts, 1), "vision", json_string("yes"));
    assert_int_equal(rt_table_decode(f, d), 0);
    assert_int_equal(d->rejected, 1);
    dm = rt_table_find_model(d, "llava");
    assert_int_equal(dm->n_hosts, 2); /* the host is kept, without the mark */
    assert_false(dm->hosts[1].vision);
    json_decref(f);
    free(d);
    free(t);
}

/* A host's private mark (it runs the model as a private split) travels the same way: only when
 * true, absent is false, a non-boolean is rejected and not taken. */
static void test_private_mark(void **state)
{
    (void)state;
    rt_table_t *t = new_table();
    rt_model_t *m = hosted(t, "big", 2, 600);
    assert_false(rt_model_set_private(m, 77, true)); /* not a host */
    assert_true(rt_model_set_private(m, m->hosts[0].node, true));
    json_t *f = rt_table_encode(t);
    json_t *hosts = json_object_get(json_array_get(json_object_get(f, "models"), 0), "hosts");
    assert_true(json_is_true(json_object_get(json_array_get(hosts, 0), "private")));
    assert_null(json_object_get(json_array_get(hosts, 1), "private"));
    rt_table_t *d = new_table();
    assert_int_equal(rt_table_decode(f, d), 0);
    assert_int_equal(d->rejected, 0);
    const rt_model_t *dm = rt_table_find_model(d, "big");
    assert_true(dm->hosts[0].priv);
    assert_false(dm->hosts[1].priv);
    json_object_set_new(json_array_get(hosts, 0), "private", json_integer(1));
    assert_int_equal(rt_table_decode(f, d), 0);
    assert_int_equal(d->rejected, 1);
    dm = rt_table_find_model(d, "big");
    assert_int_equal(dm->n_hosts, 2); /* the host is kept, without the mark */
    assert_false(dm->hosts[0].priv);
    json_decref(f);
    free(d);
    free(t);
}

/* Check-in order: rendezvous hashing. Removing a node moves only the passive nodes that
 * checked in with it. */
static void test_checkin_order(void **state)
{
    (void)state;
    rt_table_t *t = new_table(), *t2 = new_table();
    char id[65], self[65];
    for (unsigned i = 0; i < 20; i++) {
        mkid(id, 300 + i);
        rt_table_add_node(t, id, 0);
        if (i != 5) rt_table_add_node(t2, id, 0);
    }
    unsigned per[20] = {0};
    for (unsigned c = 0; c < 2000; c++) {
        size_t o[RT_MAX_NODES], o2[RT_MAX_NODES];
        mkid(self, 90000 + c);
        size_t n = rt_checkin_order(t, self, o, RT_MAX_NODES);
        assert_int_equal(n, 20);
        assert_int_equal(rt_checkin_order(t2, self, o2, RT_MAX_NODES), 19);
        /* scores descend */
        for (size_t k = 1; k < n; k++)
            assert_true(rt_score(self, t->nodes[o[k - 1]].id) >= rt_score(self, t->nodes[o[k]].id));
        per[o[0]]++;
        if (o[0] != 5)
            assert_string_equal(t->nodes[o[0]].id, t2->nodes[o2[0]].id);
        else /* its fallback is the next one of the full order */
            assert_string_equal(t->nodes[o[1]].id, t2->nodes[o2[0]].id);
        /* top-k with a small max is the prefix of the full order */
        size_t top[3];
        assert_int_equal(rt_checkin_order(t, self, top, 3), 3);
        assert_memory_equal(top, o, sizeof top);
    }
    for (unsigned i = 0; i < 20; i++)
        assert_true(per[i] >= 60 && per[i] <= 140);
    /* a node never checks in with itself */
    size_t o[RT_MAX_NODES];
    assert_int_equal(rt_checkin_order(t, t->nodes[3].id, o, RT_MAX_NODES), 19);
    for (size_t k = 0; k < 19; k++)
        assert_int_not_equal(o[k], 3);
    free(t);
    free(t2);
}

static uint32_t load_of(void *data, size_t node, const char *model)
{
    (void)model;
    ++*(int *)data;
    return (uint32_t)(node * 10 + 1);
}

/* The table an active node answers with, from its listing's rows (route_serve_build): a model
 * whose split group waits is in it as loading (a passive node answers 503 for it, as an active
 * one does, instead of 404); a download is not a catalog status; hosts are the nodes whose
 * server for the model is ready, with their load and slots. */
static void test_table_from_list(void **state)
{
    (void)state;
    rt_table_t *t = new_table();
    char id[65];
    for (unsigned i = 1; i <= 2; i++) {
        mkid(id, i);
        assert_int_equal(rt_table_add_node(t, id, 1000), (int)i - 1);
    }
    view_node_t views[2];
    for (int k = 0; k < 2; k++)
        view_node_init(&views[k]);
    view_serving_t *s = view_add_serving(&views[0], "ready_m");
    s->http_ready = true;
    s->slots = 4;
    view_add_available(&views[0], "ready_m")->vision = true; /* with a projector */
    view_add_serving(&views[1], "ready_m");                  /* its server does not answer yet */
    s = view_add_serving(&views[1], "wait_m");
    s->http_ready = true;
    view_add_plan(&views[1], s, "p-1")->private_split = true; /* a --split-private host */
    model_list_t l;
    ml_init(&l);
    ml_row_t *r = ml_add(&l, "ready_m");
    r->status = ML_READY;
    r->has_type = r->requested = true;
    r->type = MM_EMBEDDING;
    ml_add(&l, "wait_m")->status = ML_WAITING;
    ml_add(&l, "dl_m")->status = ML_DOWNLOADING;
    r = ml_add(&l, "ncap");
    r->status = ML_NEEDS_CAPACITY;
    r->short_bytes = 77;
    ml_add(&l, "ready_m")->status = ML_UNLOADED; /* a duplicate: the first stays */
    ml_add(&l, "bad\tname");                     /* not a catalog name */
    int calls = 0;
    const view_node_t *vp[2] = {&views[0], &views[1]};
    rt_table_from_list(t, &l, vp, load_of, &calls);
    assert_int_equal(t->n_models, 3);
    const rt_model_t *m = rt_table_find_model(t, "ready_m");
    assert_non_null(m);
    assert_int_equal(m->status, CATALOG_READY);
    assert_true(m->has_type && m->requested);
    assert_int_equal(m->type, MM_EMBEDDING);
    assert_int_equal(m->short_bytes, 0);
    assert_int_equal(m->n_hosts, 1);
    assert_int_equal(m->hosts[0].node, 0);
    assert_int_equal(m->hosts[0].load, 1);
    assert_int_equal(m->hosts[0].slots, 4);
    assert_true(m->hosts[0].vision);
    assert_false(m->hosts[0].priv);
    m = rt_table_find_model(t, "wait_m");
    assert_non_null(m);
    assert_int_equal(m->status, CATALOG_LOADING);
    assert_false(m->has_type || m->requested);
    assert_int_equal(m->n_hosts, 1);
    assert_int_equal(m->hosts[0].node, 1);
    assert_int_equal(m->hosts[0].load, 11);
    assert_false(m->hosts[0].vision);
    assert_true(m->hosts[0].priv);
    assert_null(rt_table_find_model(t, "dl_m"));
    m = rt_table_find_model(t, "ncap");
    assert_non_null(m);
    assert_int_equal(m->status, CATALOG_NEEDS_CAPACITY);
    assert_int_equal(m->short_bytes, 77);
    assert_int_equal(m->n_hosts, 0);
    assert_int_equal(calls, 2); /* load asked for hosts only */
    /* no load function: load unknown */
    rt_table_init(t, "abc123");
    mkid(id, 1);
    rt_table_add_node(t, id, 0);
    rt_table_from_list(t, &l, vp, NULL, NULL);
    m = rt_table_find_model(t, "ready_m");
    assert_int_equal(m->n_hosts, 1);
    assert_int_equal(m->hosts[0].load, 0);
    /* the table's words stay its four */
    catalog_status_t st;
    assert_false(rt_status_of("waiting", &st));
    assert_false(rt_status_of("downloading", &st));
    ml_free(&l);
    for (int k = 0; k < 2; k++)
        view_node_free(&views[k]);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_roundtrip),
        cmocka_unit_test(test_request_invalid),
        cmocka_unit_test(test_table_roundtrip),
        cmocka_unit_test(test_table_caps_and_validation),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_vision),
        cmocka_unit_test(test_private_mark),
        cmocka_unit_test(test_checkin_order),
        cmocka_unit_test(test_table_from_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
