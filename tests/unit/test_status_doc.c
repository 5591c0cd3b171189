/* Unit tests for status_doc.h: the status document of a node with no mesh (idle), its keys in
 * the order clients have always seen them, the processes it lists, the token hidden from
 * clients that may not see it, and the one assembly of a mesh node's document from each
 * module's parts (status_doc_place); the streams' "events", handed in, come last. */
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
                                   "routing", "catalog", "plan",   "requests",  "events"};

typedef struct {
    const char *idle_id;
    int api_port;
    uint16_t console_port;
    bool child, child_open; /* a supervised llama-server, its process there */
    const char *node_id;    /* expected node.id (NULL: null) */
    size_t n_processes;
    bool events; /* the streams' counters handed in: the last key */
} case_t;

static const case_t CASES[] = {
    {"ab12", 9337, 3131, false, false, "ab12", 0, true},
    {NULL, 0, 0, false, false, NULL, 0, false},
    {"ab12", 9337, 3131, true, false, "ab12", 0, false}, /* a child whose process is gone */
    {"ab12", 9337, 3131, true, true, "ab12", 1, true},
};

static int extra_calls;

static void extra(void *data, status_parts_t *parts)
{
    (void)data;
    (void)parts;
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
                    .dep = {.idle_id = k->idle_id, .api_port = k->api_port, .status_parts = extra}};
        g.httpd.port = k->console_port;
        extra_calls = 0;
        json_t *st = status_doc(&g, k->events ? json_pack("{s:i}", "clients", 2) : NULL);
        assert_non_null(st);
        assert_int_equal(extra_calls, 0); /* the plan and catalog come with a mesh only */
        /* the keys, in order (the console and scripts read them) */
        size_t n = 0, n_keys = N(KEYS) - (k->events ? 0 : 1);
        const char *key;
        json_t *v;
        json_object_foreach(st, key, v)
        {
            assert_true(n < n_keys);
            assert_string_equal(key, KEYS[n]);
            n++;
        }
        assert_int_equal(n, n_keys);
        if (k->events)
            assert_int_equal(
                json_integer_value(json_object_get(json_object_get(st, "events"), "clients")), 2);
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

/* A mesh's document as mesh_status makes it (the part status_doc_place starts from). */
static json_t *mesh_doc(void)
{
    return json_pack("{s:{s:s,s:s,s:b},s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}],s:{s:i}}", "node", "id",
                     "self", "role", "worker", "passive", 0, "peers", "id", "fast", "state",
                     "alive", "id", "slow", "state", "alive", "id", "sb", "state", "left", "stats",
                     "gossip_sent", 3);
}

static planner_status_t planner_parts(void)
{
    planner_status_t pl = {
        .memory = json_pack("{s:i}", "offered_bytes", 100),
        .role = json_string("host"),
        .assignment = json_null(),
        .demand = json_pack("{s:i}", "window_ms", 60000),
        .speed = json_pack("{s:i}", "mflops", 7),
        .catalog = json_pack("[{s:s}]", "name", "tiny"),
        .plan = json_array(),
        .rpc_tunnel = json_pack("{s:i}", "host_tx", 1),
        .speeds = calloc(2, sizeof(planner_speed_t)),
        .n_speeds = 2,
    };
    assert_non_null(pl.speeds);
    snprintf(pl.speeds[0].id, sizeof pl.speeds[0].id, "fast");
    pl.speeds[0].mflops = 4629;
    snprintf(pl.speeds[1].id, sizeof pl.speeds[1].id, "slow"); /* said none: null */
    return pl;
}

/* An active node: each module's part where clients have always read it — the planner's facts in
 * "node", each peer's decoded speed next to its gossip state, a standby that checks in shown as
 * "standby" (one that does not stays "left"), the counters in "stats". */
static void test_place_active(void **state)
{
    (void)state;
    json_t *st = mesh_doc();
    status_parts_t p = {
        .route_requests = 5,
        .plan = planner_parts(),
        .rs = {.passive = json_pack("[{s:s}]", "id", "sb"),
               .ids = calloc(2, sizeof(catalog_id_t)),
               .n_ids = 2,
               .answered = 9,
               .refused = 1},
        .standby = json_pack("{s:b}", "passive", 0),
        .admission = json_pack("{s:i}", "queue_len", 8),
        .downloads = json_array(),
        .download_errors = json_array(),
        .nostr = json_object(),
    };
    assert_non_null(p.rs.ids);
    snprintf(p.rs.ids[0], sizeof p.rs.ids[0], "client1");
    snprintf(p.rs.ids[1], sizeof p.rs.ids[1], "sb");
    status_doc_place(st, &p);
    assert_null(p.plan.speeds); /* taken over */
    assert_null(p.rs.ids);
    char *js = json_dumps(st, JSON_COMPACT);
    assert_string_equal(
        js, "{\"node\":{\"id\":\"self\",\"role\":\"host\",\"passive\":false,"
            "\"memory\":{\"offered_bytes\":100},\"assignment\":null,\"demand\":{\"window_ms\":"
            "60000},\"speed\":{\"mflops\":7},\"standby\":{\"passive\":false}},"
            "\"peers\":[{\"id\":\"fast\",\"state\":\"alive\",\"speed_mflops\":4629},"
            "{\"id\":\"slow\",\"state\":\"alive\",\"speed_mflops\":null},"
            "{\"id\":\"sb\",\"state\":\"standby\"}],"
            "\"stats\":{\"gossip_sent\":3,\"route_requests\":5,\"route_answered\":9,"
            "\"route_refused\":1},"
            "\"catalog\":[{\"name\":\"tiny\"}],\"plan\":[],\"rpc_tunnel\":{\"host_tx\":1},"
            "\"passive\":[{\"id\":\"sb\"}],\"admission\":{\"queue_len\":8},\"downloads\":[],"
            "\"download_errors\":[],\"nostr\":{}}");
    free(js);
    json_decref(st);
}

/* A passive node: its route section, and the catalog its table says in place of the planner's
 * (same position); no "passive" list, no route_answered; a "left" peer stays "left". Parts that
 * are absent (NULL) leave no key. */
static void test_place_passive(void **state)
{
    (void)state;
    for (int has_table = 0; has_table < 2; has_table++) {
        json_t *st = mesh_doc();
        status_parts_t p = {
            .plan = planner_parts(),
            .passive = true,
            .pas = {.route = json_pack("{s:s}", "role", "client"),
                    .catalog = has_table ? json_pack("[{s:s}]", "name", "from-table") : NULL},
        };
        status_doc_place(st, &p);
        char *js = json_dumps(st, JSON_COMPACT), want[1024];
        snprintf(want, sizeof want,
                 "{\"node\":{\"id\":\"self\",\"role\":\"host\",\"passive\":false,"
                 "\"memory\":{\"offered_bytes\":100},\"assignment\":null,\"demand\":{"
                 "\"window_ms\":60000},\"speed\":{\"mflops\":7}},"
                 "\"peers\":[{\"id\":\"fast\",\"state\":\"alive\",\"speed_mflops\":4629},"
                 "{\"id\":\"slow\",\"state\":\"alive\",\"speed_mflops\":null},"
                 "{\"id\":\"sb\",\"state\":\"left\"}],"
                 "\"stats\":{\"gossip_sent\":3,\"route_requests\":0},"
                 "\"catalog\":[{\"name\":\"%s\"}],\"plan\":[],\"rpc_tunnel\":{"
                 "\"host_tx\":1},\"route\":{\"role\":\"client\"}}",
                 has_table ? "from-table" : "tiny");
        assert_string_equal(js, want);
        free(js);
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
        cmocka_unit_test(test_place_active),
        cmocka_unit_test(test_place_passive),
        cmocka_unit_test(test_hide_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
