/* Unit tests for the typed model listing (src/core/model_list.h): merge by id, the status
 * mapping, and the /v1/models objects byte for byte. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_list.h"

static void test_merge(void **state)
{
    (void)state;
    model_list_t l;
    ml_init(&l);
    ml_row_t *a = ml_add(&l, "qwen");
    assert_non_null(a);
    a->size = 1;
    assert_non_null(ml_add(&l, "glm"));
    ml_row_t *dup = ml_add(&l, "qwen"); /* listers that append do not merge */
    assert_non_null(dup);
    dup->size = 2;
    assert_int_equal(l.n, 3);
    /* merge by id: the row listed last with that name */
    ml_row_t *r = ml_get(&l, "qwen", false);
    assert_non_null(r);
    assert_int_equal(r->size, 2);
    assert_ptr_equal(r, &l.rows[2]);
    assert_null(ml_get(&l, "llama", false));
    assert_int_equal(l.n, 3);
    r = ml_get(&l, "llama", true);
    assert_non_null(r);
    assert_int_equal(l.n, 4);
    assert_string_equal(r->id, "llama");
    assert_int_equal(r->status, ML_UNLOADED);
    assert_false(r->described || r->has_type || r->has_hosts || r->in_catalog);
    assert_ptr_equal(ml_get(&l, "llama", true), r); /* found, not added again */
    assert_int_equal(l.n, 4);
    /* a listing names each model once */
    assert_false(ml_listed_before(&l, 0, "qwen"));
    assert_false(ml_listed_before(&l, 2, "llama"));
    assert_true(ml_listed_before(&l, 2, "qwen"));
    assert_true(ml_listed_before(&l, 99, "glm")); /* i past the end: the whole list */
    /* ids: non-empty, bounded */
    char longest[ML_ID_MAX], too_long[ML_ID_MAX + 1];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    memset(too_long, 'x', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    assert_null(ml_add(&l, ""));
    assert_null(ml_add(&l, NULL));
    assert_null(ml_add(&l, too_long));
    assert_null(ml_get(&l, too_long, true));
    assert_non_null(ml_add(&l, longest));
    /* growth keeps the rows (ids and hosts) */
    for (int i = 0; i < 100; i++) {
        char id[16];
        snprintf(id, sizeof id, "m%d", i);
        r = ml_add(&l, id);
        assert_non_null(r);
        for (int k = 0; k < i % 7; k++)
            assert_int_equal(ml_add_host(r, "abc"), 0);
    }
    assert_int_equal(l.n, 105);
    assert_string_equal(l.rows[0].id, "qwen");
    assert_string_equal(l.rows[104].id, "m99");
    assert_int_equal(l.rows[104].n_hosts, 99 % 7);
    assert_true(l.rows[104].has_hosts);
    /* host ids are catalog ids */
    char id65[CATALOG_ID_LEN + 2];
    memset(id65, 'a', sizeof id65 - 1);
    id65[sizeof id65 - 1] = '\0';
    assert_int_equal(ml_add_host(&l.rows[0], id65), -EINVAL);
    assert_int_equal(ml_add_host(&l.rows[0], ""), -EINVAL);
    assert_false(l.rows[0].has_hosts);
    id65[CATALOG_ID_LEN] = '\0';
    assert_int_equal(ml_add_host(&l.rows[0], id65), 0);
    assert_string_equal(l.rows[0].hosts[0], id65);
    ml_free(&l);
    assert_int_equal(l.n, 0);
    assert_null(l.rows);
}

/* The words of /v1/models, and the status each carries into a route table: a model whose
 * split group waits is loading there (a passive node answers 503 for it, as an active one
 * does, not 404); a download is not a catalog status. */
static void test_status_mapping(void **state)
{
    (void)state;
    static const struct {
        ml_status_t s;
        const char *word;
        bool in_table;
        catalog_status_t table;
    } rows[] = {
        {ML_UNLOADED, "unloaded", true, CATALOG_UNLOADED},
        {ML_LOADING, "loading", true, CATALOG_LOADING},
        {ML_READY, "ready", true, CATALOG_READY},
        {ML_NEEDS_CAPACITY, "needs_capacity", true, CATALOG_NEEDS_CAPACITY},
        {ML_WAITING, "waiting", true, CATALOG_LOADING},
        {ML_DOWNLOADING, "downloading", false, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        assert_string_equal(ml_status_name(rows[i].s), rows[i].word);
        catalog_status_t st = (catalog_status_t)99;
        bool in = ml_status_catalog(rows[i].s, &st);
        if (in != rows[i].in_table || (in && st != rows[i].table))
            fail_msg("%s: in table %d, status %d", rows[i].word, in, (int)st);
    }
    /* the catalog's four words are the listing's */
    for (int c = CATALOG_UNLOADED; c <= CATALOG_NEEDS_CAPACITY; c++) {
        ml_status_t s = ml_status_of_catalog((catalog_status_t)c);
        assert_string_equal(ml_status_name(s), catalog_status_name((catalog_status_t)c));
        catalog_status_t back;
        assert_true(ml_status_catalog(s, &back));
        assert_int_equal(back, c);
    }
    assert_string_equal(ml_status_name((ml_status_t)42), "unloaded");
}

static void assert_json(const ml_row_t *r, const char *want)
{
    json_t *o = ml_row_json(r, 1700000000);
    assert_non_null(o);
    char *got = json_dumps(o, JSON_COMPACT);
    assert_non_null(got);
    if (strcmp(got, want) != 0) fail_msg("got  %s\nwant %s", got, want);
    free(got);
    json_decref(o);
}

/* Each lister's row as /v1/models has shown it, byte for byte the JSON the listers built before
 * the rows (their key order included). */
static void test_json_golden(void **state)
{
    (void)state;
    model_list_t l;
    ml_init(&l);
    /* this node's own model (api_openai) */
    ml_row_t *r = ml_add(&l, "qwen");
    r->described = r->has_type = r->own = true;
    r->type = MM_LLM;
    r->size = 4683074048ULL;
    r->status = ML_READY;
    assert_json(r, "{\"id\":\"qwen\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":"
                   "\"mesh-llm\",\"status\":\"ready\",\"type\":\"llm\",\"size\":4683074048}");
    /* the planner's view merged into it */
    assert_ptr_equal(ml_get(&l, "qwen", true), r);
    r->status = ML_LOADING;
    r->has_hosts = true;
    assert_int_equal(ml_add_host(r, "aa"), 0);
    assert_int_equal(ml_add_host(r, "bb"), 0);
    r->in_catalog = true;
    r->nodes = 2;
    r->requested = true;
    r->request_rate = 12;
    r->last_request = 1699999999;
    assert_json(r, "{\"id\":\"qwen\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":"
                   "\"mesh-llm\",\"status\":\"loading\",\"type\":\"llm\",\"size\":4683074048,"
                   "\"hosts\":[\"aa\",\"bb\"],\"nodes\":2,\"requested\":true,\"request_rate\":12,"
                   "\"last_request\":1699999999}");
    /* a download of this node (node_dl) */
    r = ml_add(&l, "glm");
    r->status = ML_DOWNLOADING;
    r->has_progress = true;
    r->dl_bytes = 10;
    r->dl_total = 100;
    snprintf(r->source, sizeof r->source, "%s", "org/repo/glm-Q4_K_M.gguf");
    assert_json(r, "{\"id\":\"glm\",\"object\":\"model\",\"owned_by\":\"mesh-llm\",\"status\":"
                   "\"downloading\",\"progress\":{\"bytes\":10,\"total\":100},\"source\":\"org/"
                   "repo/glm-Q4_K_M.gguf\"}");
    /* ... that the planner sees downloading somewhere: who, and no "type"/"size" added */
    r = ml_get(&l, "glm", true);
    snprintf(r->dl_node, sizeof r->dl_node, "%s", "cc");
    r->dl_bytes = 20;
    r->has_hosts = true;
    r->in_catalog = true;
    assert_json(r, "{\"id\":\"glm\",\"object\":\"model\",\"owned_by\":\"mesh-llm\",\"status\":"
                   "\"downloading\",\"progress\":{\"node\":\"cc\",\"bytes\":20,\"total\":100},"
                   "\"source\":\"org/repo/glm-Q4_K_M.gguf\",\"hosts\":[],\"nodes\":0,\"requested\":"
                   "false,\"request_rate\":0,\"last_request\":0}");
    r->short_bytes = 9; /* the catalog's word comes after the download's own fields */
    assert_json(r,
                "{\"id\":\"glm\",\"object\":\"model\",\"owned_by\":\"mesh-llm\",\"status\":"
                "\"downloading\",\"progress\":{\"node\":\"cc\",\"bytes\":20,\"total\":100},"
                "\"source\":\"org/repo/glm-Q4_K_M.gguf\",\"short_bytes\":9,\"hosts\":[],\"nodes\":"
                "0,\"requested\":false,\"request_rate\":0,\"last_request\":0}");
    r->short_bytes = 0;
    /* a model only the mesh has (the planner) that needs capacity */
    r = ml_get(&l, "big", true);
    r->described = r->has_type = true;
    r->type = MM_EMBEDDING;
    r->size = 0;
    r->status = ML_NEEDS_CAPACITY;
    r->short_bytes = 5000;
    r->has_hosts = r->in_catalog = true;
    r->nodes = 1;
    assert_json(r, "{\"id\":\"big\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":"
                   "\"mesh-llm\",\"type\":\"embedding\",\"size\":0,\"status\":\"needs_capacity\","
                   "\"short_bytes\":5000,\"hosts\":[],\"nodes\":1,\"requested\":false,"
                   "\"request_rate\":0,\"last_request\":0}");
    r->status = ML_DOWNLOADING; /* ... that a node downloads: short_bytes, then progress */
    r->has_progress = true;
    snprintf(r->dl_node, sizeof r->dl_node, "%s", "ee");
    assert_json(r, "{\"id\":\"big\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":"
                   "\"mesh-llm\",\"type\":\"embedding\",\"size\":0,\"status\":\"downloading\","
                   "\"short_bytes\":5000,\"progress\":{\"node\":\"ee\",\"bytes\":0,\"total\":0},"
                   "\"hosts\":[],\"nodes\":1,\"requested\":false,\"request_rate\":0,"
                   "\"last_request\":0}");
    /* a passive node's table row */
    r = ml_add(&l, "rank");
    r->has_type = true;
    r->type = MM_RERANKING;
    r->status = ML_WAITING;
    r->has_hosts = true;
    assert_int_equal(ml_add_host(r, "dd"), 0);
    assert_json(r, "{\"id\":\"rank\",\"object\":\"model\",\"owned_by\":\"mesh-llm\",\"type\":"
                   "\"reranking\",\"status\":\"waiting\",\"hosts\":[\"dd\"]}");
    /* the list in listing order */
    json_t *a = ml_list_json(&l, 1);
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 4);
    static const char *const order[] = {"qwen", "glm", "big", "rank"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(a, i), "id")),
                            order[i]);
    json_decref(a);
    ml_free(&l);
    a = ml_list_json(&l, 1);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_status_mapping),
        cmocka_unit_test(test_json_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
