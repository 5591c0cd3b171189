/* Unit tests of the check-in client (src/node/checkin.h). Two real transport endpoints in one
 * loop (tp_pair.h): the passive node's client asks the worker, whose tunnels (net/tunnels.h)
 * answer its ROUTE_REQUEST with the test's table. The client reaches nodes through the test's
 * checkin_io_t: the worker's id maps to the one real connection, the table's other nodes to
 * none (a dial that never ends); its clock is the test's (fake_now), so the attempt bound is
 * crossed by moving it, not by waiting.
 *
 * Pinned: the first round asks the --join tokens; later rounds take the table's nodes in
 * rendezvous order (rt_checkin_order: self skipped) and the join tokens last, each once; a node
 * that does not answer is abandoned exactly when its attempt bound passes; a silent host is
 * sent as a hint with the next ROUTE_REQUEST, skipped as a candidate, and its mark outlives a
 * new table while a plain bad mark does not, unless every candidate is silent (then they are
 * asked anyway); paused, the client does not check in and tells its
 * watcher, keeps the last table; resumed, it checks in at once and forgets the bad marks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "checkin.h"
#include "route_table.h"
#include "transport.h"
#include "tunnels.h"

#include "tp_pair.h"

#define MESH "mesh-1"
#define REFRESH_MS 600 /* attempt bound: clamp(200, 500, 5000) = 500 */
#define ID_A "a000000000000000000000000000000000000000000000000000000000000000"
#define ID_B "b000000000000000000000000000000000000000000000000000000000000000"
#define ID_C "c000000000000000000000000000000000000000000000000000000000000000"

static node_t client, worker;
static tp_conn_t *wconn; /* client -> worker */
static tunnels_t tun;    /* the worker's */
static uint64_t fake_now;

/* what the client asked for */
static char asked[16][ID_HEX_LEN + 1]; /* io.conn's ids, in order */
static size_t n_asked;
static int requests;         /* ROUTE_REQUESTs the worker answered */
static rt_request_t last_rq; /* the last one, decoded */
static int tables, nones;    /* on_table with a table / NULL */
static int watched;          /* the watcher's calls */
static size_t table_nodes;   /* the worker's table: the first of A, B, C (and the client) */
static checkin_t *ck;        /* the client under test */

/* ---------------- the worker: a table of the first table_nodes of A, B, C, and the client ---- */

static json_t *route_request(void *data, const char *peer, json_t *frame)
{
    (void)data;
    assert_int_equal(rt_request_decode(frame, peer, &last_rq), 0);
    requests++;
    rt_table_t *t = malloc(sizeof *t);
    assert_non_null(t);
    rt_table_init(t, MESH);
    const char *ids[] = {ID_A, ID_B, ID_C};
    for (size_t i = 0; i < table_nodes; i++)
        assert_true(rt_table_add_node(t, ids[i], 0) >= 0);
    assert_true(rt_table_add_node(t, client.id.id, 0) >= 0);
    rt_model_t *m = rt_table_add_model(t, "m", CATALOG_READY);
    assert_true(m && rt_model_add_host(m, 0, 0));
    json_t *f = rt_table_encode(t);
    free(t);
    return f;
}

/* ---------------- the client's io ---------------- */

static tp_conn_t *io_find(void *data, const char *id)
{
    (void)data;
    return strcmp(id, worker.id.id) == 0 ? wconn : NULL;
}

static tp_conn_t *io_conn(void *data, const char *id)
{
    if (n_asked < 16) snprintf(asked[n_asked++], sizeof asked[0], "%s", id);
    return io_find(data, id);
}

static void io_set_addrs(void *data, const char *id, const char *const *a, size_t n)
{
    (void)data, (void)id, (void)a, (void)n;
}

static const char *io_mesh_id(void *data)
{
    (void)data;
    return MESH;
}

static uint64_t io_now(void *data)
{
    (void)data;
    return fake_now;
}

static void on_table(void *data, const rt_table_t *t)
{
    (void)data;
    if (t)
        tables++;
    else
        nones++;
}

static void on_watch(void *data)
{
    (void)data;
    watched++;
}

static void start(void)
{
    token_t join = {0};
    snprintf(join.id, sizeof join.id, "%s", worker.id.id);
    checkin_opts_t o = {.role = RT_ROLE_CLIENT,
                        .refresh_ms = REFRESH_MS,
                        .joins = &join,
                        .n_joins = 1,
                        .on_table = on_table};
    checkin_io_t io = {.conn = io_conn,
                       .find = io_find,
                       .set_addrs = io_set_addrs,
                       .mesh_id = io_mesh_id,
                       .now = io_now};
    ck = NULL;
    assert_int_equal(checkin_start_io(&ck, &loop, client.id.id, &io, &o), 0);
    checkin_watch(ck, on_watch, NULL);
}

/* Started, and its first table came (from the join token). */
static void start_with_table(void)
{
    start();
    RUN_UNTIL(checkin_table(ck) != NULL, 3000);
    assert_non_null(checkin_table(ck));
}

static int setup(void **state)
{
    (void)state;
    node_up(&client, reader_on_stream);
    node_up(&worker, reader_on_stream);
    reader_node = &worker;
    reader_take = tunnels_take;
    reader_data = &tun;
    wconn = node_connect(&client, &worker);
    if (!wconn) return -1;
    tun = (tunnels_t){.loop = &loop, .route_request = route_request, .data = &worker};
    fake_now = 1000000;
    n_asked = 0;
    requests = tables = nones = watched = 0;
    table_nodes = 3;
    memset(&last_rq, 0, sizeof last_rq);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    checkin_stop(ck);
    node_down(&client); /* its streams closed: nothing calls back now */
    node_down(&worker);
    checkin_free(ck);
    ck = NULL;
    RUN_UNTIL(handles_left() == 0, 2000);
    assert_int_equal(handles_left(), 0);
    return 0;
}

/* The table's nodes in rendezvous order for this client (self skipped). */
static size_t rendezvous(char ids[][ID_HEX_LEN + 1])
{
    const rt_table_t *t = checkin_table(ck);
    size_t order[RT_MAX_NODES];
    size_t n = rt_checkin_order(t, client.id.id, order, RT_MAX_NODES);
    for (size_t k = 0; k < n; k++)
        snprintf(ids[k], ID_HEX_LEN + 1, "%s", t->nodes[order[k]].id);
    return n;
}

static size_t index_of(const char *id)
{
    for (size_t i = 0; i < n_asked; i++)
        if (strcmp(asked[i], id) == 0) return i;
    return n_asked;
}

/* Past the current attempt's bound on the fake clock: the next candidate is asked. */
static void expire_attempt(void)
{
    size_t was = n_asked;
    fake_now += checkin_attempt_ms(ck);
    RUN_UNTIL(n_asked > was || requests > 1, 2000);
}

/* ---------------- tests ---------------- */

/* First round: the join token; the table comes and is kept. */
static void test_first_round_asks_the_join_token(void **state)
{
    (void)state;
    start();
    assert_null(checkin_table(ck));
    RUN_UNTIL(checkin_table(ck) != NULL, 3000);
    assert_non_null(checkin_table(ck));
    assert_int_equal(n_asked, 1);
    assert_string_equal(asked[0], worker.id.id);
    assert_int_equal(requests, 1);
    assert_string_equal(last_rq.id, client.id.id);
    assert_int_equal(last_rq.role, RT_ROLE_CLIENT);
    assert_int_equal(tables, 1);
    assert_true(watched >= 1);
}

/* A later round: the table's nodes in rendezvous order (the client itself skipped), then the
 * join tokens; each once. */
static void test_rendezvous_order_then_joins(void **state)
{
    (void)state;
    start_with_table();
    char want[RT_MAX_NODES][ID_HEX_LEN + 1];
    size_t n = rendezvous(want);
    assert_int_equal(n, 3); /* A, B, C: not the client */
    checkin_pause(ck);
    checkin_resume(ck); /* a round at once */
    RUN_UNTIL(n_asked >= 2, 2000);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(n_asked, 2 + k);
        assert_string_equal(asked[1 + k], want[k]);
        expire_attempt(); /* A, B, C never connect */
    }
    RUN_UNTIL(requests == 2, 2000);
    assert_int_equal(n_asked, 5);
    assert_string_equal(asked[4], worker.id.id);
    assert_int_equal(requests, 2);
    assert_int_equal(tables, 2);
}

/* A node that does not answer is given exactly its attempt bound (clamp(refresh / 3, 500 ms,
 * 5 s)), on the client's clock. */
static void test_attempt_bound(void **state)
{
    (void)state;
    start_with_table();
    assert_int_equal(checkin_attempt_ms(ck), 500);
    checkin_pause(ck);
    checkin_resume(ck);
    RUN_UNTIL(n_asked >= 2, 2000);
    assert_int_equal(n_asked, 2);
    fake_now += checkin_attempt_ms(ck) - 1;
    RUN_UNTIL(n_asked > 2, 300); /* several polls: still waiting */
    assert_int_equal(n_asked, 2);
    fake_now += 1;
    RUN_UNTIL(n_asked > 2, 2000);
    assert_int_equal(n_asked, 3);
    assert_string_not_equal(asked[2], asked[1]);
}

/* A silent host: a hint in the next ROUTE_REQUEST, no candidate, marked past a new table (a
 * plain bad mark is not), for a refresh period. */
static void test_silent_hint(void **state)
{
    (void)state;
    table_nodes = 2; /* A and B: the marks last a refresh period, B's attempt takes 500 ms */
    start_with_table();
    int w = watched;
    checkin_on_silent(ck, ID_A);
    checkin_mark_bad(ck, ID_B, false);
    assert_int_equal(watched, w + 1);
    assert_true(checkin_is_bad(ck, ID_A));
    assert_true(checkin_is_bad(ck, ID_B));
    RUN_UNTIL(n_asked >= 2, 3000); /* the refresh period's round */
    while (requests < 2 && n_asked < 6)
        expire_attempt();
    RUN_UNTIL(requests == 2, 2000);
    assert_int_equal(requests, 2);
    assert_int_equal(index_of(ID_A), n_asked); /* never dialled */
    assert_true(index_of(ID_B) < n_asked);     /* a plain bad mark still is */
    assert_int_equal(last_rq.n_silent, 1);
    assert_string_equal(last_rq.silent[0], ID_A);
    assert_true(checkin_is_bad(ck, ID_A)); /* the new table did not clear it */
    assert_false(checkin_is_bad(ck, ID_B));
    fake_now += REFRESH_MS;
    assert_false(checkin_is_bad(ck, ID_A));
}

/* Every candidate silent (the only one: the join token, the mesh's one active node, went silent
 * because this node lost its network): the next round asks it all the same, rather than failing
 * every round until the mark expires a refresh period later. */
static void test_all_silent_asked_anyway(void **state)
{
    (void)state;
    table_nodes = 0; /* the table lists only the client: the join token is the one candidate */
    start_with_table();
    assert_int_equal(requests, 1);
    checkin_on_silent(ck, worker.id.id);
    assert_true(checkin_is_bad(ck, worker.id.id));
    RUN_UNTIL(requests == 2, CK_SILENT_REFRESH_MS + 2000); /* the round the silence brought on */
    assert_int_equal(requests, 2);
    assert_int_equal(tables, 2);
    assert_int_equal(nones, 0);
    assert_int_equal(last_rq.n_silent, 1);         /* still a hint to the node it asks */
    assert_true(checkin_is_bad(ck, worker.id.id)); /* the mark stays for the request path */
}

/* Paused: no check-in, the watcher told, the table kept; resumed: a round at once from the last
 * table's order, bad marks forgotten. */
static void test_pause_resume(void **state)
{
    (void)state;
    start_with_table();
    checkin_mark_bad(ck, ID_B, false);
    int w = watched;
    checkin_pause(ck);
    assert_false(checkin_active(ck));
    assert_int_equal(watched, w + 1);
    assert_non_null(checkin_table(ck));
    RUN_UNTIL(requests > 1 || n_asked > 1, 2 * REFRESH_MS); /* past a refresh period */
    assert_int_equal(requests, 1);
    assert_int_equal(n_asked, 1);
    checkin_resume(ck);
    assert_true(checkin_active(ck));
    assert_false(checkin_is_bad(ck, ID_B));
    char want[RT_MAX_NODES][ID_HEX_LEN + 1];
    rendezvous(want);
    RUN_UNTIL(n_asked >= 2, 2000); /* at once; the bound only guards a busy machine */
    assert_int_equal(n_asked, 2);
    assert_string_equal(asked[1], want[0]);
}

int main(void)
{
    if (pair_init() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_round_asks_the_join_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rendezvous_order_then_joins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attempt_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_hint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_silent_asked_anyway, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_resume, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
