/* Unit tests for status_doc.h: the status document of a node with no mesh (idle), its keys in
 * the order clients have always seen them, the processes it lists, and the token hidden from
 * clients that may not see it. The streams' "events" are api_mgmt.c's, not the document's. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status_doc.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *const KEYS[] = {"node",    "peers",   "models", "processes", "http",
                                   "routing", "catalog", "plan",   "requests"};

typedef struct {
    const char *idle_id;
    int api_port;
    uint16_t console_port;
    bool child, child_open; /* a supervised llama-server, its process there */
    const char *node_id;    /* expected node.id (NULL: null) */
    size_t n_processes;
} case_t;

static const case_t CASES[] = {
    {"ab12", 9337, 3131, false, false, "ab12", 0},
    {NULL, 0, 0, false, false, NULL, 0},
    {"ab12", 9337, 3131, true, false, "ab12", 0}, /* a child whose process is gone: not listed */
    {"ab12", 9337, 3131, true, true, "ab12", 1},
};

static int extra_calls;

static void extra(void *data, json_t *st)
{
    (void)data;
    (void)st;
    extra_calls++;
}

static void test_idle(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(CASES); i++) {
        const case_t *k = &CASES[i];
        supervisor_t sv = {.llama_server = "/opt/llama-server"};
        sv_child_t c = {.sv = &sv,
                        .kind = SV_KIND_LLAMA,
                        .path = "/m/tiny.gguf",
                        .port = 41000,
                        .pid = 4242,
                        .restarts = 2,
                        .state = CHILD_READY,
                        .proc_open = k->child_open};
        snprintf(c.name, sizeof c.name, "tiny");
        if (k->child) sv.children = &c;
        mgmt_t g = {.sv = &sv,
                    .dep = {.idle_id = k->idle_id, .api_port = k->api_port, .extra_status = extra}};
        g.httpd.port = k->console_port;
        extra_calls = 0;
        json_t *st = status_doc(&g);
        assert_non_null(st);
        assert_int_equal(extra_calls, 0); /* the plan and catalog come with a mesh only */
        /* the keys, in order (the console and scripts read them; "events" is added by api_mgmt) */
        size_t n = 0;
        const char *key;
        json_t *v;
        json_object_foreach(st, key, v)
        {
            assert_true(n < N(KEYS));
            assert_string_equal(key, KEYS[n]);
            n++;
        }
        assert_int_equal(n, N(KEYS));
        json_t *node = json_object_get(st, "node");
        assert_string_equal(json_string_value(json_object_get(node, "state")), "idle");
        if (k->node_id)
            assert_string_equal(json_string_value(json_object_get(node, "id")), k->node_id);
        else
            assert_true(json_is_null(json_object_get(node, "id")));
        assert_true(json_is_null(json_object_get(node, "token")));
        assert_false(json_boolean_value(json_object_get(node, "joined")));
        assert_int_equal(json_integer_value(json_object_get(node, "api_port")), k->api_port);
        assert_int_equal(json_integer_value(json_object_get(node, "console_port")),
                         k->console_port);
        assert_int_equal(json_array_size(json_object_get(st, "catalog")), 0);
        assert_int_equal(json_array_size(json_object_get(st, "plan")), 0);
        assert_int_equal(json_array_size(json_object_get(st, "models")), 0);
        json_t *procs = json_object_get(st, "processes");
        assert_int_equal(json_array_size(procs), k->n_processes);
        if (k->n_processes) {
            json_t *p = json_array_get(procs, 0);
            char *js = json_dumps(p, JSON_COMPACT);
            assert_string_equal(js, "{\"kind\":\"llama-server\",\"model\":\"tiny\",\"pid\":4242,"
                                    "\"port\":41000,\"restarts\":2,\"state\":\"ready\",\"args\":"
                                    "[\"--model\",\"/m/tiny.gguf\",\"--alias\",\"tiny\",\"--host\","
                                    "\"127.0.0.1\",\"--port\",\"41000\"]}");
            free(js);
        }
        json_decref(st);
    }
}

static void test_hide_secrets(void **state)
{
    (void)state;
    json_t *st = json_pack("{s:{s:s,s:s},s:[]}", "node", "id", "ab12", "token", "SECRET", "peers");
    status_doc_hide_secrets(st);
    char *js = json_dumps(st, JSON_COMPACT);
    assert_string_equal(js, "{\"node\":{\"id\":\"ab12\",\"token\":null},\"peers\":[]}");
    free(js);
    json_decref(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle),
        cmocka_unit_test(test_hide_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
