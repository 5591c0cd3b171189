/* tunnels (src/net/tunnels.h): the mesh's non-gossip streams — TUNNEL_HTTP to the API server,
 * ROUTE_REQUEST answered and counted, TUNNEL_RPC to the rpc-server's port — and the refusals
 * (no handler for the type, an unknown type, no answer, no port). Two real transport endpoints
 * in one loop; the worker's stream reader (tp_pair.h) does what mesh.c's does, with
 * tunnels_take as mesh_opts_t.on_stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "httpd.h"
#include "identity.h"
#include "transport.h"
#include "tunnels.h"
#include "util.h"
#include "wire.h"

#include "tp_pair.h"

/* ---------------- the two nodes ---------------- */

static node_t host, worker;
static tp_conn_t *hconn; /* host -> worker */
static tunnels_t tun;    /* the worker's */

/* The worker's handlers */
static char route_from[ID_HEX_LEN + 1], rpc_from[ID_HEX_LEN + 1], rpc_model[64];
static json_t *route_seen;  /* the frame route_request was given (copy) */
static bool route_answers;  /* false: route_request returns NULL */
static int rpc_port_answer; /* what rpc_port returns */

static json_t *route_request(void *data, const char *peer, json_t *frame)
{
    assert_ptr_equal(data, &worker);
    snprintf(route_from, sizeof route_from, "%s", peer);
    json_decref(route_seen);
    route_seen = json_deep_copy(frame);
    return route_answers ? json_pack("{s:s,s:i}", "table", "t1", "n", 7) : NULL;
}

static int rpc_port(void *data, const char *peer, const char *model)
{
    assert_ptr_equal(data, &worker);
    snprintf(rpc_from, sizeof rpc_from, "%s", peer);
    snprintf(rpc_model, sizeof rpc_model, "%s", model);
    return rpc_port_answer;
}

/* ---------------- the requester's side of one stream ---------------- */

typedef struct {
    buf_t got;
    bool fin, closed;
    int err;
} client_t;

static void cl_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    client_t *c = tp_stream_data(s);
    tp_stream_consumed(s, n);
    assert_int_equal(buf_append(&c->got, p, n), 0);
}

static void cl_fin(tp_stream_t *s)
{
    ((client_t *)tp_stream_data(s))->fin = true;
}

static void cl_close(tp_stream_t *s, int err)
{
    client_t *c = tp_stream_data(s);
    c->closed = true;
    c->err = err;
}

static const tp_stream_cb_t cl_cb = {cl_data, cl_fin, NULL, cl_close};

/* Open a stream to the worker with [type][frame] then extra, half-close, and wait for its end. */
static void exchange(client_t *c, int type, json_t *frame, const char *extra)
{
    memset(c, 0, sizeof *c);
    buf_init(&c->got, 1 << 20);
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + 8);
    assert_int_equal(wire_write(&b, type, frame), 0);
    if (extra) assert_int_equal(buf_append(&b, extra, strlen(extra)), 0);
    json_decref(frame);
    tp_stream_t *s;
    assert_int_equal(tp_stream_open(hconn, &cl_cb, c, &s), 0);
    assert_int_equal(tp_stream_write(s, b.data, b.len), 0);
    tp_stream_shutdown(s);
    buf_free(&b);
    RUN_UNTIL(c->closed, 5000);
    assert_true(c->closed);
}

/* ---------------- an API server and an rpc-server stand-in ---------------- */

static httpd_t api;
static httpd_peer_t api_peer_seen;
static int api_requests;

static void api_handler(httpd_req_t *req)
{
    api_requests++;
    api_peer_seen = req->peer;
    httpd_respond(req, 200, "text/plain", "hello", 5, NULL);
}

static uv_tcp_t rpc_srv;
static int rpc_accepted;

static void rpc_conn_closed(uv_handle_t *h)
{
    free(h);
}

static void rpc_on_conn(uv_stream_t *s, int status)
{
    uv_tcp_t *c = malloc(sizeof *c);
    uv_tcp_init(&loop, c);
    if (status == 0 && uv_accept(s, (uv_stream_t *)c) == 0) rpc_accepted++;
    uv_close((uv_handle_t *)c, rpc_conn_closed); /* the relay sees EOF and ends the stream */
}

static int setup(void **state)
{
    node_up(&host, reader_on_stream);
    node_up(&worker, reader_on_stream);
    reader_node = &worker;
    reader_take = tunnels_take;
    reader_data = &tun;
    hconn = node_connect(&host, &worker);
    if (!hconn) return -1;
    httpd_opts_t o = {.host = "127.0.0.1", .port = 0, .handler = api_handler};
    if (httpd_start(&api, &loop, &o) != 0) return -1;
    uv_tcp_init(&loop, &rpc_srv);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    if (uv_tcp_bind(&rpc_srv, (struct sockaddr *)&sa, 0) != 0 ||
        uv_listen((uv_stream_t *)&rpc_srv, 16, rpc_on_conn) != 0)
        return -1;
    struct sockaddr_in bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&rpc_srv, (struct sockaddr *)&bound, &len);
    rpc_port_answer = ntohs(bound.sin_port);
    tun = (tunnels_t){.loop = &loop,
                      .api = &api,
                      .rpc_port = rpc_port,
                      .route_request = route_request,
                      .data = &worker};
    route_answers = true;
    reader_refused = reader_bad = api_requests = rpc_accepted = 0;
    route_from[0] = rpc_from[0] = rpc_model[0] = '\0';
    return 0;
}

static int teardown(void **state)
{
    json_decref(route_seen);
    route_seen = NULL;
    httpd_stop(&api);
    uv_close((uv_handle_t *)&rpc_srv, NULL);
    node_down(&host);
    node_down(&worker);
    RUN_UNTIL(handles_left() == 0, 5000);
    assert_int_equal(handles_left(), 0);
    return 0;
}

/* ---------------- tests ---------------- */

static void test_route_request_answered_and_counted(void **state)
{
    client_t c;
    exchange(&c, WIRE_ROUTE_REQUEST, json_pack("{s:s}", "want", "table"), NULL);
    assert_int_equal(c.err, 0);
    assert_true(c.fin);
    assert_string_equal(route_from, host.id.id);
    assert_string_equal(json_string_value(json_object_get(route_seen, "want")), "table");
    /* the answer: one frame, no type byte */
    wire_reader_t rd;
    wire_reader_init(&rd, 0);
    json_t *f = NULL;
    ssize_t used = wire_read(&rd, (const uint8_t *)c.got.data, c.got.len, &f);
    assert_int_equal((size_t)used, c.got.len);
    assert_non_null(f);
    assert_string_equal(json_string_value(json_object_get(f, "table")), "t1");
    assert_int_equal(json_integer_value(json_object_get(f, "n")), 7);
    json_decref(f);
    wire_reader_free(&rd);
    buf_free(&c.got);
    assert_int_equal(tun.route_in, 1);
    /* the status document's stats.route_requests (status_doc.c places it) */
    assert_int_equal(tunnels_route_requests(&tun), 1);
}

static void test_route_request_without_answer_reset(void **state)
{
    route_answers = false;
    client_t c;
    exchange(&c, WIRE_ROUTE_REQUEST, json_object(), NULL);
    assert_int_not_equal(c.err, 0);
    assert_int_equal(c.got.len, 0);
    assert_string_equal(route_from, host.id.id); /* asked, answered nothing */
    assert_int_equal(reader_refused, 0);         /* handled: reset by tunnels */
    assert_int_equal(tun.route_in, 0);
    buf_free(&c.got);
}

/* A passive node (no route_request), a node without API server or rpc-server, an unknown
 * type: not taken, the reader resets the stream. */
static void test_not_taken(void **state)
{
    tun.route_request = NULL;
    tun.api = NULL;
    tun.rpc_port = NULL;
    client_t c;
    exchange(&c, WIRE_ROUTE_REQUEST, json_object(), NULL);
    assert_int_not_equal(c.err, 0);
    exchange(&c, WIRE_TUNNEL_HTTP, json_pack("{s:s}", "model", "m"), "GET / HTTP/1.1\r\n\r\n");
    assert_int_not_equal(c.err, 0);
    exchange(&c, WIRE_TUNNEL_RPC, json_pack("{s:s}", "model", "m"), NULL);
    assert_int_not_equal(c.err, 0);
    tun = (tunnels_t){.loop = &loop,
                      .api = &api,
                      .rpc_port = rpc_port,
                      .route_request = route_request,
                      .data = &worker};
    exchange(&c, WIRE_TUNNEL_MAP, json_object(), NULL);
    assert_int_not_equal(c.err, 0);
    assert_int_equal(reader_refused, 4);
    assert_string_equal(route_from, ""); /* no handler was asked */
    assert_string_equal(rpc_from, "");
    assert_int_equal(api_requests, 0);
    assert_int_equal(tun.route_in, 0);
    buf_free(&c.got);
}

static void test_tunnel_http_to_api(void **state)
{
    client_t c;
    exchange(&c, WIRE_TUNNEL_HTTP, json_pack("{s:s}", "model", "m"),
             "GET /v1/models HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n");
    assert_int_equal(c.err, 0);
    assert_int_equal(api_requests, 1);
    assert_int_equal(api_peer_seen, HTTPD_PEER_TUNNEL);
    assert_true(c.got.len > 12);
    assert_memory_equal(c.got.data, "HTTP/1.1 200", 12);
    assert_non_null(strstr(c.got.data, "\r\n\r\nhello"));
    assert_int_equal(reader_refused, 0);
    buf_free(&c.got);
}

static void test_tunnel_rpc_to_port(void **state)
{
    client_t c;
    exchange(&c, WIRE_TUNNEL_RPC, json_pack("{s:s}", "model", "split-m"), NULL);
    assert_string_equal(rpc_from, host.id.id);
    assert_string_equal(rpc_model, "split-m");
    RUN_UNTIL(rpc_accepted == 1, 5000);
    assert_int_equal(rpc_accepted, 1);
    assert_int_equal(reader_refused, 0);
    buf_free(&c.got);
    /* no rpc-server for it (port <= 0): taken, refused by the tunnel */
    int port = rpc_port_answer;
    rpc_port_answer = 0;
    exchange(&c, WIRE_TUNNEL_RPC, json_pack("{s:s}", "model", "other"), NULL);
    rpc_port_answer = port;
    assert_int_not_equal(c.err, 0);
    assert_string_equal(rpc_model, "other");
    assert_int_equal(rpc_accepted, 1);
    assert_int_equal(reader_refused, 0);
    buf_free(&c.got);
}

int main(void)
{
    if (pair_init() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_route_request_answered_and_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_request_without_answer_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_taken, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tunnel_http_to_api, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tunnel_rpc_to_port, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
