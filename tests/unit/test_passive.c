/* Unit tests of a passive node's request path (src/node/passive.h). Two real transport endpoints
 * in one loop (tp_pair.h): the passive node's check-in client (started by passive_start_io
 * through the test's checkin_io_t) asks the worker, whose tunnels (net/tunnels.h) answer its
 * ROUTE_REQUEST with the test's table; until the test lets the worker be reached (serving) no
 * table comes. Requests arrive through a real HTTP server (httpd_serve_fd on socketpairs, no
 * network) whose handler calls passive_route (and answers 404 "declined" when it returns false,
 * as the API does). The table's hosts A..D (ids starting with their letter) are reached through
 * the test's passive_io_t: conn maps the reachable ones to the one real connection, the others
 * to none (a dial that never ends); relay records each call (the hosts, in order) and takes the
 * request (the test answers it later) or refuses it. Both clocks are the test's (fake_now): the
 * attempt and table bounds are crossed by moving it, not by waiting.
 *
 * Pinned: a request that arrives before the first table waits and is forwarded when the table
 * comes, or is answered 503 no_route exactly when its table bound passes; a model the table does
 * not list is declined (passive_route false), a waiting request whose model the first table lacks
 * is answered 404 model_not_found; requests with the same "user" go to the same host (FNV-1a of
 * the key on the ring of host ids) even with requests in flight there; an unkeyed request goes to
 * the home host (mix(FNV-1a(self id "\n" model))), spills to the other host while the home host
 * has this node's requests in flight (spilled), and goes home again once they finished; a host
 * without a connection is given exactly the attempt bound, then marked bad and the next host in
 * ring order is tried, at most PV_MAX_TRIES hosts, then 503 host_unreachable; a host the relay
 * refuses is marked bad and the request retried on the next one (forwarded and in flight not
 * counted for the refusing host); a paused check-in client answers waiting requests 503
 * model_replanned, passive_stop 503 shutting_down, and passive_free frees everything (the ASan
 * build runs this too); past PV_MAX_PENDING waiting requests the next is answered 503 busy;
 * passive_status counts forwarded requests per host, the in-flight ones and the check-ins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "checkin.h"
#include "httpd.h"
#include "meshstat.h"
#include "passive.h"
#include "relay.h"
#include "request.h"
#include "route_table.h"
#include "transport.h"
#include "tunnels.h"

#include "tp_pair.h"

#define MESH "mesh-1"
/* no second check-in round within a test (a refresh period on the loop's clock); the attempt
 * bound is clamp(refresh / 3, 500, 5000) = 5000 ms on the fake clock */
#define REFRESH_MS 60000
#define ID_A "a000000000000000000000000000000000000000000000000000000000000000"
#define ID_B "b000000000000000000000000000000000000000000000000000000000000000"
#define ID_C "c000000000000000000000000000000000000000000000000000000000000000"
#define ID_D "d000000000000000000000000000000000000000000000000000000000000000"
#define N_HOSTS 4
#define MAX_CLIENTS (PV_MAX_PENDING + 8)
#define MAX_RELAYED 32

static node_t client, worker;
static tp_conn_t *wconn; /* client -> worker */
static tunnels_t tun;    /* the worker's */
static uint64_t fake_now;
static bool serving;            /* the worker can be reached: the check-in gets its table */
static size_t table_hosts;      /* the table's hosts of table_model: the first of A..D */
static const char *table_model; /* the table's one model */
static relay_ctx_t rctx;        /* the node's relay counters (in flight per host) */
static passive_t *pv;           /* the driver under test */

/* the hosts, as the request path reaches them */
static const char *reachable;   /* host letters with a connection */
static const char *refusing;    /* host letters the relay takes nothing for (first host) */
static unsigned dials[N_HOSTS]; /* io.conn calls per host */
static struct {
    char hosts[RELAY_MAX_HOSTS + 1]; /* the hosts given, a letter each, in order */
    bool refused;
    httpd_req_t *req;
} relayed[MAX_RELAYED]; /* io.relay calls */
static size_t n_relayed;

/* the clients */
static httpd_t api;
static int handled, declined; /* handler calls; passive_route false */
static int cfd[MAX_CLIENTS];  /* the clients' ends */
static char cout[MAX_CLIENTS][1024];
static size_t cout_len[MAX_CLIENTS];
static int n_clients;

/* ---------------- the worker: a table of table_hosts of A..D hosting table_model ---------- */

static json_t *route_request(void *data, const char *peer, json_t *frame)
{
    (void)data;
    rt_request_t rq;
    assert_int_equal(rt_request_decode(frame, peer, &rq), 0);
    rt_table_t *t = malloc(sizeof *t);
    assert_non_null(t);
    rt_table_init(t, MESH);
    const char *ids[N_HOSTS] = {ID_A, ID_B, ID_C, ID_D};
    for (size_t i = 0; i < N_HOSTS; i++)
        assert_true(rt_table_add_node(t, ids[i], 0) >= 0);
    rt_model_t *m = rt_table_add_model(t, table_model, CATALOG_READY);
    assert_non_null(m);
    for (size_t i = 0; i < table_hosts; i++)
        assert_true(rt_model_add_host(m, i, 0));
    json_t *f = rt_table_encode(t);
    free(t);
    return f;
}

/* ---------------- the check-in client's io: the worker, when serving ---------------- */

static tp_conn_t *ck_find(void *data, const char *id)
{
    (void)data;
    return serving && strcmp(id, worker.id.id) == 0 ? wconn : NULL;
}

static void ck_set_addrs(void *data, const char *id, const char *const *a, size_t n)
{
    (void)data, (void)id, (void)a, (void)n;
}

static const char *ck_mesh_id(void *data)
{
    (void)data;
    return MESH;
}

static uint64_t ck_now(void *data)
{
    (void)data;
    return fake_now;
}

/* ---------------- the request path's io ---------------- */

static const char *pv_self_id(void *data)
{
    (void)data;
    return client.id.id;
}

static tp_conn_t *pv_conn(void *data, const char *id)
{
    (void)data;
    assert_true(id[0] >= 'a' && id[0] < 'a' + N_HOSTS);
    dials[id[0] - 'a']++;
    return strchr(reachable, id[0]) ? wconn : NULL; /* never used but as "connected" */
}

static void pv_set_addrs(void *data, const char *id, const char *const *a, size_t n)
{
    (void)data, (void)id, (void)a, (void)n;
}

static int pv_relay(void *data, relay_ctx_t *rc, const char *model, httpd_req_t *req,
                    const relay_host_t *hosts, size_t n)
{
    (void)data;
    assert_ptr_equal(rc, &rctx);
    assert_string_equal(model, "m");
    assert_true(n > 0 && n <= RELAY_MAX_HOSTS);
    assert_true(n_relayed < MAX_RELAYED);
    size_t k = n_relayed++;
    for (size_t i = 0; i < n; i++)
        relayed[k].hosts[i] = hosts[i].id[0];
    relayed[k].hosts[n] = '\0';
    relayed[k].refused = strchr(refusing, hosts[0].id[0]) != NULL;
    relayed[k].req = relayed[k].refused ? NULL : req;
    return relayed[k].refused ? -ENOTCONN : 0;
}

/* The relay's answer to relayed request k (taken): its life ends, so does its count in flight. */
static void answer_relayed(size_t k)
{
    assert_non_null(relayed[k].req);
    httpd_respond(relayed[k].req, 200, "application/json", "{\"ok\":1}", 8, NULL);
    relayed[k].req = NULL;
}

/* ---------------- the clients ---------------- */

static void handler(httpd_req_t *req)
{
    const request_t *rq = meshstat_parse_body(req);
    handled++;
    if (!passive_route(pv, rq->model, -1, req)) {
        declined++;
        httpd_respond_error(req, 404, "invalid_request_error", "declined", "not in the table");
    }
}

/* A request for model (with "user": user unless NULL) from a client of its own, once the
 * handler saw it: the client's index. */
static int send_req(const char *model, const char *user)
{
    assert_true(n_clients < MAX_CLIENTS);
    int i = n_clients++;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(httpd_serve_fd(&api, sv[0], HTTPD_PEER_LOOPBACK), 0);
    cfd[i] = sv[1];
    char body[256];
    if (user)
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"user\":\"%s\"}", model, user);
    else
        snprintf(body, sizeof body, "{\"model\":\"%s\"}", model);
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    assert_int_equal(send(sv[1], req, (size_t)n, MSG_NOSIGNAL), n);
    int before = handled;
    RUN_UNTIL(handled > before, 5000);
    assert_int_equal(handled, before + 1);
    return i;
}

/* Client i's answer: its status once the whole response came, else 0. */
static int status_of(int i)
{
    ssize_t r;
    while ((r = recv(cfd[i], cout[i] + cout_len[i], sizeof cout[i] - 1 - cout_len[i],
                     MSG_DONTWAIT)) > 0)
        cout_len[i] += (size_t)r;
    cout[i][cout_len[i]] = '\0';
    const char *end = strstr(cout[i], "\r\n\r\n");
    const char *cl = strstr(cout[i], "Content-Length: ");
    if (!end || !cl || strncmp(cout[i], "HTTP/1.1 ", 9) != 0) return 0;
    if (strlen(end + 4) < strtoul(cl + 16, NULL, 10)) return 0;
    return atoi(cout[i] + 9);
}

/* Client i was answered status with error code `code` (NULL: any body). */
static void expect_answer(int i, int status, const char *code)
{
    RUN_UNTIL(status_of(i) != 0, 5000);
    assert_int_equal(status_of(i), status);
    if (code) {
        char want[64];
        snprintf(want, sizeof want, "\"code\":\"%s\"", code);
        if (!strstr(cout[i], want)) fail_msg("client %d: no %s in %s", i, want, cout[i]);
    }
}

/* Client i has no answer yet, after several polls of the request path (PV_POLL_MS). */
static void expect_waiting(int i)
{
    size_t was = n_relayed;
    RUN_UNTIL(status_of(i) != 0 || n_relayed != was, 300);
    assert_int_equal(status_of(i), 0);
    assert_int_equal(n_relayed, was);
}

/* ---------------- the ring (route_decide.h's one stickiness rule, restated) ---------------- */

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The host letter of ring position k (the table's hosts by id: a, b, ...). */
static char ring(uint64_t k)
{
    return (char)('a' + k % table_hosts);
}

/* This node's home host of "m": mix(FNV-1a(self id "\n" model)) on the ring. */
static char home_host(void)
{
    return ring(mix(fnv1a(fnv1a(fnv1a(1469598103934665603ULL, client.id.id), "\n"), "m")));
}

/* A "user" whose key (FNV-1a of it, request.h) starts at host letter h. */
static const char *user_for(char h, char *buf, size_t len)
{
    for (int k = 0; k < 1000; k++) {
        snprintf(buf, len, "user-%d", k);
        if (ring(fnv1a(1469598103934665603ULL, buf)) == h) return buf;
    }
    fail_msg("no user for host %c", h);
    return NULL;
}

/* ---------------- fixture ---------------- */

static bool is_bad(char h)
{
    const char *ids[N_HOSTS] = {ID_A, ID_B, ID_C, ID_D};
    return checkin_is_bad(passive_checkin(pv), ids[h - 'a']);
}

static void start(void)
{
    token_t join = {0};
    snprintf(join.id, sizeof join.id, "%s", worker.id.id);
    passive_opts_t o = {.role = RT_ROLE_CLIENT,
                        .refresh_ms = REFRESH_MS,
                        .joins = &join,
                        .n_joins = 1,
                        .relay = &rctx};
    passive_io_t io = {
        .self_id = pv_self_id, .conn = pv_conn, .set_addrs = pv_set_addrs, .relay = pv_relay};
    checkin_io_t ck = {.conn = ck_find,
                       .find = ck_find,
                       .set_addrs = ck_set_addrs,
                       .mesh_id = ck_mesh_id,
                       .now = ck_now};
    pv = NULL;
    assert_int_equal(passive_start_io(&pv, &loop, &io, &ck, &o), 0);
    assert_true(passive_active(pv));
}

/* Started, and its first table came. */
static void start_with_table(void)
{
    start();
    RUN_UNTIL(passive_table(pv) != NULL, 5000);
    assert_non_null(passive_table(pv));
}

/* A request's table bound: passive.c's, two attempts per check-in candidate (the join token)
 * and a refresh period. */
static uint64_t table_bound(void)
{
    checkin_t *ck = passive_checkin(pv);
    return 2 * checkin_attempt_ms(ck) * (1 + 1) + checkin_refresh_ms(ck);
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
    httpd_opts_t o = {.host = "127.0.0.1", .port = 0, .handler = handler};
    if (httpd_start(&api, &loop, &o) != 0) return -1;
    memset(&rctx, 0, sizeof rctx);
    fake_now = 1000000;
    serving = true;
    table_hosts = 2;
    table_model = "m";
    reachable = "abcd";
    refusing = "";
    memset(dials, 0, sizeof dials);
    memset(relayed, 0, sizeof relayed);
    n_relayed = 0;
    handled = declined = n_clients = 0;
    memset(cout_len, 0, sizeof cout_len);
    pv = NULL;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    passive_stop(pv);   /* answers the waiting requests */
    httpd_stop(&api);   /* the relayed ones end: no longer in flight */
    node_down(&client); /* its streams closed: nothing calls back now */
    node_down(&worker);
    passive_free(pv);
    pv = NULL;
    for (int i = 0; i < n_clients; i++)
        close(cfd[i]);
    RUN_UNTIL(handles_left() == 0, 5000);
    assert_int_equal(handles_left(), 0);
    for (size_t i = 0; i < RELAY_FLIGHT_HOSTS; i++)
        assert_int_equal(rctx.flight[i].n, 0);
    return 0;
}

/* passive_status's route object (the caller frees it). */
static json_t *route_status(void)
{
    passive_status_t st;
    passive_status(pv, &st);
    json_decref(st.catalog);
    assert_non_null(st.route);
    return st.route;
}

/* route.<what>.<host>'s count (0 when absent). */
static json_int_t per_host(const char *what, char h)
{
    const char *ids[N_HOSTS] = {ID_A, ID_B, ID_C, ID_D};
    json_t *r = route_status();
    json_t *o = json_object_get(r, what);
    assert_true(json_is_object(o));
    json_int_t n = json_integer_value(json_object_get(o, ids[h - 'a']));
    json_decref(r);
    return n;
}

static json_int_t route_count(const char *what)
{
    json_t *r = route_status();
    json_t *v = json_object_get(r, what);
    assert_true(json_is_integer(v));
    json_int_t n = json_integer_value(v);
    json_decref(r);
    return n;
}

/* ---------------- tests ---------------- */

/* Before the first table a request waits; when the table comes it is forwarded (to the home
 * host, with the other host after it for the relay's retry). */
static void test_waits_for_the_first_table(void **state)
{
    (void)state;
    serving = false;
    start();
    int c = send_req("m", NULL);
    expect_waiting(c);
    assert_null(passive_table(pv));
    serving = true;
    RUN_UNTIL(n_relayed == 1, 5000);
    assert_int_equal(n_relayed, 1);
    char want[3] = {home_host(), home_host() == 'a' ? 'b' : 'a', '\0'};
    assert_string_equal(relayed[0].hosts, want);
    answer_relayed(0);
    expect_answer(c, 200, NULL);
}

/* No table within the request's bound (the fake clock): 503 no_route, exactly at the bound. */
static void test_no_table_answered_503(void **state)
{
    (void)state;
    serving = false;
    start();
    int c = send_req("m", NULL);
    fake_now += table_bound() - 1;
    expect_waiting(c);
    fake_now += 1;
    expect_answer(c, 503, "no_route");
    assert_int_equal(n_relayed, 0);
}

/* A model the table does not list: passive_route declines it (the API answers 404). */
static void test_unknown_model_declined(void **state)
{
    (void)state;
    start_with_table();
    int c = send_req("x", NULL);
    expect_answer(c, 404, "declined");
    assert_int_equal(declined, 1);
    assert_int_equal(n_relayed, 0);
}

/* A request that waited for a table that came without its model: 404 model_not_found. */
static void test_table_without_the_model(void **state)
{
    (void)state;
    serving = false;
    start();
    int c = send_req("x", NULL);
    expect_waiting(c);
    serving = true;
    expect_answer(c, 404, "model_not_found");
    assert_non_null(passive_table(pv));
    assert_int_equal(declined, 0); /* taken while there was no table */
    assert_int_equal(n_relayed, 0);
}

/* The same "user" goes to the same host, FNV-1a of the key on the ring, whatever is in flight
 * there (no spill for a keyed request). */
static void test_sticky_user(void **state)
{
    (void)state;
    start_with_table();
    char ua[32], ub[32];
    user_for('a', ua, sizeof ua);
    user_for('b', ub, sizeof ub);
    for (int k = 0; k < 3; k++) {
        send_req("m", ua);
        send_req("m", ub);
    }
    assert_int_equal(n_relayed, 6);
    for (size_t k = 0; k < 6; k++)
        assert_string_equal(relayed[k].hosts, k % 2 ? "ba" : "ab");
    assert_int_equal(route_count("spilled"), 0);
    assert_int_equal(per_host("in_flight", 'a'), 3);
    assert_int_equal(per_host("in_flight", 'b'), 3);
}

/* An unkeyed request goes to the home host; while this node's request is in flight there the
 * next one spills to the other host (spilled); once both finished, home again. */
static void test_home_host_and_spill(void **state)
{
    (void)state;
    start_with_table();
    char home = home_host(), other = home == 'a' ? 'b' : 'a';
    send_req("m", NULL);
    assert_int_equal(n_relayed, 1);
    assert_int_equal(relayed[0].hosts[0], home);
    assert_int_equal(route_count("spilled"), 0);
    int c = send_req("m", NULL);
    assert_int_equal(n_relayed, 2);
    assert_int_equal(relayed[1].hosts[0], other);
    assert_int_equal(route_count("spilled"), 1);
    answer_relayed(0);
    answer_relayed(1);
    expect_answer(c, 200, NULL);
    assert_int_equal(per_host("in_flight", home), 0);
    send_req("m", NULL);
    assert_int_equal(n_relayed, 3);
    assert_int_equal(relayed[2].hosts[0], home);
    assert_int_equal(route_count("spilled"), 1);
}

/* A host without a connection is given the attempt bound (the fake clock), then it is marked
 * bad and the next host is tried (the bad one not given to the relay); the next request skips
 * it at once. */
static void test_unreachable_host_then_next(void **state)
{
    (void)state;
    start_with_table();
    char home = home_host(), other = home == 'a' ? 'b' : 'a';
    reachable = home == 'a' ? "b" : "a";
    send_req("m", NULL);
    assert_true(dials[home - 'a'] > 0);
    uint64_t bound = checkin_attempt_ms(passive_checkin(pv));
    fake_now += bound - 1;
    RUN_UNTIL(n_relayed > 0, 300);
    assert_int_equal(n_relayed, 0);
    assert_false(is_bad(home));
    fake_now += 1;
    RUN_UNTIL(n_relayed == 1, 5000);
    assert_int_equal(n_relayed, 1);
    assert_int_equal(relayed[0].hosts[0], other);
    assert_int_equal(strlen(relayed[0].hosts), 1);
    assert_true(is_bad(home));
    assert_int_equal(route_count("retries"), 1);
    unsigned d = dials[home - 'a'];
    send_req("m", NULL); /* in flight on the other host, the home host bad: no wait */
    assert_int_equal(n_relayed, 2);
    assert_int_equal(relayed[1].hosts[0], other);
    assert_int_equal(dials[home - 'a'], d);
}

/* No host reachable: one attempt bound per host, in ring order from the home host, at most
 * PV_MAX_TRIES hosts, then 503 host_unreachable. */
static void test_at_most_max_tries_hosts(void **state)
{
    (void)state;
    table_hosts = N_HOSTS;
    reachable = "";
    start_with_table();
    char home = home_host();
    int c = send_req("m", NULL);
    uint64_t bound = checkin_attempt_ms(passive_checkin(pv));
    for (unsigned k = 0; k < PV_MAX_TRIES; k++) {
        char h = ring((uint64_t)(home - 'a') + k);
        assert_true(dials[h - 'a'] > 0);
        assert_false(is_bad(h));
        expect_waiting(c);
        fake_now += bound;
        if (k + 1 < PV_MAX_TRIES)
            RUN_UNTIL(dials[ring((uint64_t)(home - 'a') + k + 1) - 'a'] > 0, 5000);
        else
            expect_answer(c, 503, "host_unreachable");
        assert_true(is_bad(h));
    }
    assert_int_equal(dials[ring((uint64_t)(home - 'a') + PV_MAX_TRIES) - 'a'], 0);
    assert_int_equal(n_relayed, 0);
}

/* The relay takes nothing for the home host: it is marked bad, the request is retried on the
 * next host; the refused attempt is not counted forwarded nor in flight. */
static void test_relay_refuses_next_host(void **state)
{
    (void)state;
    start_with_table();
    char home = home_host(), other = home == 'a' ? 'b' : 'a';
    char h[2] = {home, '\0'};
    refusing = h;
    int c = send_req("m", NULL);
    RUN_UNTIL(n_relayed == 2, 5000);
    assert_int_equal(n_relayed, 2);
    char both[3] = {home, other, '\0'}, next[2] = {other, '\0'};
    assert_string_equal(relayed[0].hosts, both);
    assert_true(relayed[0].refused);
    assert_string_equal(relayed[1].hosts, next); /* the bad host is no retry */
    assert_false(relayed[1].refused);
    assert_true(is_bad(home));
    assert_int_equal(per_host("forwarded", home), 0);
    assert_int_equal(per_host("forwarded", other), 1);
    assert_int_equal(per_host("in_flight", home), 0);
    assert_int_equal(per_host("in_flight", other), 1);
    assert_int_equal(route_count("spilled"), 0);
    assert_int_equal(route_count("retries"), 1);
    answer_relayed(1);
    expect_answer(c, 200, NULL);
}

/* Paused check-in (a standby that joined gossip): a waiting request is answered 503
 * model_replanned at once, and so is one that comes while it is paused. */
static void test_paused_checkin(void **state)
{
    (void)state;
    serving = false;
    start();
    int c = send_req("m", NULL);
    expect_waiting(c);
    checkin_pause(passive_checkin(pv));
    assert_false(passive_active(pv));
    expect_answer(c, 503, "model_replanned");
    c = send_req("m", NULL);
    expect_answer(c, 503, "model_replanned");
    assert_int_equal(n_relayed, 0);
}

/* passive_stop: every waiting request is answered 503 shutting_down (passive_free, in the
 * teardown, frees the rest). */
static void test_stop_answers_waiting(void **state)
{
    (void)state;
    serving = false;
    start();
    int c1 = send_req("m", NULL);
    int c2 = send_req("m", "u");
    expect_waiting(c1);
    passive_stop(pv);
    assert_false(passive_active(pv));
    expect_answer(c1, 503, "shutting_down");
    expect_answer(c2, 503, "shutting_down");
    assert_int_equal(n_relayed, 0);
}

/* PV_MAX_PENDING requests wait; the next one is answered 503 busy, the others keep waiting. */
static void test_max_pending(void **state)
{
    (void)state;
    serving = false;
    start();
    for (int k = 0; k < PV_MAX_PENDING; k++)
        send_req("m", NULL);
    int c = send_req("m", NULL);
    expect_answer(c, 503, "busy");
    for (int k = 0; k < PV_MAX_PENDING; k++)
        assert_int_equal(status_of(k), 0);
    passive_stop(pv);
    for (int k = 0; k < PV_MAX_PENDING; k++)
        expect_answer(k, 503, "shutting_down");
}

/* passive_status: the requests forwarded per host, those in flight, the check-ins; the table's
 * catalog; no request moved to another host (retries 0). */
static void test_status(void **state)
{
    (void)state;
    start_with_table();
    char ua[32], ub[32];
    user_for('a', ua, sizeof ua);
    user_for('b', ub, sizeof ub);
    send_req("m", ua);
    send_req("m", ua);
    send_req("m", ub);
    answer_relayed(0);
    RUN_UNTIL(per_host("in_flight", 'a') == 1, 5000);
    json_t *r = route_status();
    json_t *fwd = json_object_get(r, "forwarded");
    assert_int_equal(json_object_size(fwd), 2);
    assert_int_equal(json_integer_value(json_object_get(fwd, ID_A)), 2);
    assert_int_equal(json_integer_value(json_object_get(fwd, ID_B)), 1);
    json_t *inf = json_object_get(r, "in_flight");
    assert_int_equal(json_integer_value(json_object_get(inf, ID_A)), 1);
    assert_int_equal(json_integer_value(json_object_get(inf, ID_B)), 1);
    assert_int_equal(json_integer_value(json_object_get(r, "checkins")), 1);
    assert_int_equal(json_integer_value(json_object_get(r, "retries")), 0); /* none moved */
    assert_string_equal(json_string_value(json_object_get(r, "role")), "client");
    assert_string_equal(json_string_value(json_object_get(r, "checkin")), worker.id.id);
    assert_int_equal(json_array_size(json_object_get(r, "nodes")), N_HOSTS);
    json_decref(r);
    passive_status_t st;
    passive_status(pv, &st);
    json_decref(st.route);
    assert_int_equal(json_array_size(st.catalog), 1);
    json_t *m = json_array_get(st.catalog, 0);
    assert_string_equal(json_string_value(json_object_get(m, "name")), "m");
    assert_int_equal(json_array_size(json_object_get(m, "hosts")), 2);
    json_decref(st.catalog);
}

int main(void)
{
    if (pair_init() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_waits_for_the_first_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_table_answered_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_model_declined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_without_the_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sticky_user, setup, teardown),
        cmocka_unit_test_setup_teardown(test_home_host_and_spill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreachable_host_then_next, setup, teardown),
        cmocka_unit_test_setup_teardown(test_at_most_max_tries_hosts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relay_refuses_next_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused_checkin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_answers_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
