/* Unit tests of the relay (src/node/relay.c): a routed request's attempts over its hosts. Two
 * real transport endpoints in one loop (tp_pair.h): the entry node's relay opens real
 * TUNNEL_HTTP calls to the worker, whose tunnels (net/tunnels.h) hand them to the worker's API
 * server, a test handler that answers or fails. The hosts the relay is given are names the
 * test's relay_io_t maps to the one real connection (or to none: an unreachable host), so the
 * test sees which host each attempt went to (the io's conn calls) and which hosts it suspected.
 *
 * Pinned: unreachable hosts are skipped at the start; no reachable host: relay_start_io fails
 * and leaves the request to its caller; a host that fails before answering is retried once on
 * the next untried host in ring order and suspected; the attempt bound (one retry) ends in 503
 * "host_failed"; an answer that is not streamed reaches the client whole; a ready host silent
 * past the first-byte deadline is reset and the next host answers; a client that leaves cancels
 * the call; a 502/503 answer is retried on the next host (other errors pass through); a stream
 * whose host ends it before [DONE] is continued on the next replica (spliced), or ended with an
 * error event and [DONE] when there is none. Hosts are not "ready" except in the deadline test (20
 * ms on the loop's clock), so only that test waits on a timer; no test asserts a duration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "httpd.h"
#include "identity.h"
#include "relay.h"
#include "transport.h"
#include "tunables.h"
#include "tunnels.h"
#include "util.h"
#include "wire.h"

#include "tp_pair.h"

static node_t entry, worker;
static tp_conn_t *econn; /* entry -> worker */
static tunnels_t tun;    /* the worker's */

/* ---------------- the worker's API server ---------------- */

static httpd_t api;
static int api_requests;
static int api_fail;      /* this many requests are cut before any answer */
static int api_hold;      /* this many requests are kept unanswered */
static httpd_req_t *held; /* the one kept now */
static int held_aborted;  /* kept requests whose stream went away */

static void held_abort(httpd_req_t *req)
{
    (void)req;
    held = NULL;
    held_aborted++;
}

static int api_cut;         /* this many streams end after their first event, before [DONE] */
static char api_body[4096]; /* the last request's body */
static int api_err_count;   /* this many requests are answered api_err_status */
static int api_err_status;

#define EV(content, finish)                                                                        \
    "data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":1,"            \
    "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" content "\"},"           \
    "\"finish_reason\":" finish "}]}\n\n"

/* A streamed answer: "Hel" and an end without [DONE] (cut), or "lo", the finish, [DONE]. */
static void api_stream(httpd_req_t *req)
{
    char ev[512];
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
    httpd_write(req, head, strlen(head));
    if (api_cut > 0) {
        api_cut--;
        int n = snprintf(ev, sizeof ev, EV("Hel", "null"), api_requests);
        httpd_write(req, ev, (size_t)n);
        httpd_end(req, false); /* before [DONE]: the host went away mid-stream */
        return;
    }
    int n = snprintf(ev, sizeof ev, EV("lo", "null") EV("", "\"stop\"") "data: [DONE]\n\n",
                     api_requests, api_requests);
    httpd_write(req, ev, (size_t)n);
    httpd_end(req, false);
}

static void api_handler(httpd_req_t *req)
{
    api_requests++;
    snprintf(api_body, sizeof api_body, "%.*s", (int)req->body_len, req->body);
    if (api_err_count > 0) {
        api_err_count--;
        httpd_respond_error(req, api_err_status, "unavailable", "test", "answered %d",
                            api_err_status);
        return;
    }
    if (strstr(api_body, "\"stream\":true")) {
        api_stream(req);
        return;
    }
    if (api_hold > 0) {
        api_hold--;
        held = req;
        req->on_abort = held_abort;
        return;
    }
    if (api_fail > 0) {
        api_fail--;
        httpd_abort(req);
        return;
    }
    char body[128];
    int n = snprintf(body, sizeof body, "{\"answer\":%d,\"path\":\"%s\"}", api_requests, req->path);
    httpd_respond(req, 200, "application/json", body, (size_t)n, NULL);
}

/* ---------------- the relay's view of the hosts ---------------- */

static char conn_calls[256];  /* "a,b," : the hosts the relay asked a connection for */
static char suspected[256];   /* the hosts the relay suspected */
static const char *reachable; /* the names that map to econn, each one letter */

static tp_conn_t *io_conn(void *data, const char *id)
{
    (void)data;
    size_t l = strlen(conn_calls);
    snprintf(conn_calls + l, sizeof conn_calls - l, "%s,", id);
    return strlen(id) == 1 && strchr(reachable, id[0]) ? econn : NULL;
}

static void io_suspect(void *data, const char *id)
{
    (void)data;
    size_t l = strlen(suspected);
    snprintf(suspected + l, sizeof suspected - l, "%s,", id);
}

static relay_io_t io = {.conn = io_conn, .suspect = io_suspect};
static relay_ctx_t rctx; /* the node's relay counters and affinity memory */
static tunables_t tuns;  /* the node's defaults, but for what a test sets */

/* ---------------- the entry node's API: the handler relays ---------------- */

static httpd_t front;
static const char *hosts_given; /* "xab": one host per letter */
static const char *hosts_ready; /* the ready hosts: the first-byte deadline applies to them */
static int start_rc;

static void front_handler(httpd_req_t *req)
{
    relay_host_t hosts[RELAY_MAX_HOSTS];
    size_t n = 0;
    for (const char *p = hosts_given; *p && n < RELAY_MAX_HOSTS; p++, n++)
        hosts[n] = (relay_host_t){.id = {*p, 0}, .ready = strchr(hosts_ready, *p) != NULL};
    start_rc = relay_start_io(&rctx, &io, "m", req, hosts, n);
    if (start_rc) httpd_respond_error(req, 502, "unavailable", "no_route", "no host reachable");
}

/* Send one request to the entry node and collect the answer until the server closes the
 * connection or a complete response with a body arrived. */
static char out[1 << 16];
static size_t out_len;

static bool stream_req; /* the client asks for a stream */

static int client_open(const char *hosts)
{
    hosts_given = hosts;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(httpd_serve_fd(&front, sv[0], HTTPD_PEER_LOOPBACK), 0);
    const char *body = stream_req ? "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":"
                                    "\"user\",\"content\":\"hi\"}]}"
                                  : "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                                    "\"content\":\"hi\"}]}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    assert_int_equal(send(sv[1], req, (size_t)n, MSG_NOSIGNAL), n);
    return sv[1];
}

static void request(const char *hosts)
{
    int fd = client_open(hosts);
    memset(out, 0, sizeof out);
    out_len = 0;
    RUN_UNTIL(({
                  ssize_t r_;
                  while ((r_ = recv(fd, out + out_len, sizeof out - 1 - out_len, MSG_DONTWAIT)) > 0)
                      out_len += (size_t)r_;
                  stream_req ? strstr(out, "\r\n0\r\n\r\n") != NULL : strstr(out, "}") != NULL;
              }),
              10000);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    node_up(&entry, reader_on_stream);
    node_up(&worker, reader_on_stream);
    reader_node = &worker;
    reader_take = tunnels_take;
    reader_data = &tun;
    econn = node_connect(&entry, &worker);
    if (!econn) return -1;
    httpd_opts_t o = {.host = "127.0.0.1", .port = 0, .handler = api_handler};
    if (httpd_start(&api, &loop, &o) != 0) return -1;
    httpd_opts_t f = {.host = "127.0.0.1", .port = 0, .handler = front_handler};
    if (httpd_start(&front, &loop, &f) != 0) return -1;
    tun = (tunnels_t){.loop = &loop, .api = &api, .data = &worker};
    api_requests = api_fail = api_hold = held_aborted = api_cut = api_err_count = 0;
    stream_req = false;
    held = NULL;
    hosts_ready = "";
    conn_calls[0] = suspected[0] = '\0';
    reachable = "abc";
    start_rc = 1;
    io.no_wait = false;
    tunables_defaults(&tuns);
    rctx.tun = &tuns;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    httpd_stop(&front);
    httpd_stop(&api);
    node_down(&entry);
    node_down(&worker);
    RUN_UNTIL(handles_left() == 0, 5000);
    assert_int_equal(handles_left(), 0);
    return 0;
}

/* ---------------- tests ---------------- */

/* The attempts went to `calls` (conn asked in that order), `susp` were suspected, the worker's API
 * saw n requests and the client's answer starts with status_line. */
static void expect(const char *calls, const char *susp, int n, const char *status_line)
{
    assert_int_equal(start_rc, 0);
    assert_string_equal(conn_calls, calls);
    assert_string_equal(suspected, susp);
    assert_int_equal(api_requests, n);
    assert_memory_equal(out, status_line, strlen(status_line));
}

/* An unreachable first host is skipped (not suspected: nothing was sent to it); the next one
 * answers and its answer reaches the client whole. */
static void test_unreachable_host_skipped(void **state)
{
    (void)state;
    relay_stats_t before, after;
    relay_stats(&rctx, &before);
    request("xa");
    expect("x,a,", "", 1, "HTTP/1.1 200");
    assert_non_null(strstr(out, "{\"answer\":1,\"path\":\"/v1/chat/completions\"}"));
    relay_stats(&rctx, &after);
    assert_int_equal(after.requests, before.requests + 1);
    assert_int_equal(after.retries, before.retries);
}

/* No host reachable and no_wait (a caller that dials its hosts itself): relay_start_io fails and
 * the caller answers (here 502). */
static void test_no_host_reachable(void **state)
{
    (void)state;
    io.no_wait = true;
    request("xy");
    assert_int_equal(start_rc, -ENOTCONN);
    assert_string_equal(conn_calls, "x,y,");
    assert_int_equal(api_requests, 0);
    assert_non_null(strstr(out, "HTTP/1.1 502"));
}

/* No host connected yet (the mesh is dialling them): the relay takes the request and waits
 * MESH_LLM_CONNECT_WAIT_MS for a connection; none by then: 503 host_unreachable, nothing sent. */
static void test_no_connection_waits_then_503(void **state)
{
    (void)state;
    tuns.connect_wait_ms = 300;
    reachable = "";
    uv_update_time(&loop);
    uint64_t t0 = uv_now(&loop);
    request("xy");
    assert_int_equal(start_rc, 0); /* taken */
    assert_true(uv_now(&loop) - t0 >= 300);
    assert_int_equal(api_requests, 0);
    assert_non_null(strstr(out, "HTTP/1.1 503"));
    assert_non_null(strstr(out, "host_unreachable"));
    assert_non_null(strstr(out, "no connection within 300 ms"));
}

static void become_reachable(uv_timer_t *t)
{
    reachable = "b";
    uv_close((uv_handle_t *)t, NULL);
}

/* A host whose connection comes up during the wait (a hole punch that worked) takes the
 * request and answers it whole. */
static void test_connection_during_wait_takes_request(void **state)
{
    (void)state;
    reachable = "";
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, become_reachable, 150, 0);
    request("xb");
    assert_int_equal(start_rc, 0);
    assert_int_equal(api_requests, 1);
    assert_memory_equal(out, "HTTP/1.1 200", 12);
    assert_string_equal(suspected, "");
}

/* A host that fails before answering is suspected and the request goes once to the next host. */
static void test_failed_host_retried_on_next(void **state)
{
    (void)state;
    relay_stats_t before, after;
    relay_stats(&rctx, &before);
    api_fail = 1;
    request("ab");
    expect("a,b,", "a,", 2, "HTTP/1.1 200");
    assert_non_null(strstr(out, "{\"answer\":2,"));
    relay_stats(&rctx, &after);
    assert_int_equal(after.retries, before.retries + 1);
}

/* The retry skips hosts already tried (the unreachable one at the start) and goes on in ring
 * order from the failed one. */
static void test_retry_ring_order_skips_tried(void **state)
{
    (void)state;
    api_fail = 1;
    request("bxa"); /* b fails; x was never tried (b answered first); then x, then a */
    expect("b,x,a,", "b,", 2, "HTTP/1.1 200");
}

/* The attempt bound: one retry. Every host fails: two attempts, then 503 host_failed, although a
 * third host was there. */
static void test_one_retry_then_503(void **state)
{
    (void)state;
    api_fail = 10;
    request("abc");
    expect("a,b,", "a,b,", 2, "HTTP/1.1 503");
    assert_non_null(strstr(out, "\"code\":\"host_failed\""));
    assert_non_null(strstr(out, "the node serving model 'm' failed before answering"));
}

/* A host that answers 502 or 503 could not serve the request (its llama-server died, hangs or
 * restarts): the next host gets it, once. Other errors (400), and a 503 with no other host to
 * try, reach the client as they are. */
static void test_error_answers(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *hosts, *calls, *susp;
        int n;
        const char *got;
    } rows[] = {
        {503, "ab", "a,b,", "a,", 2, "HTTP/1.1 200"},
        {502, "ab", "a,b,", "a,", 2, "HTTP/1.1 200"},
        {400, "ab", "a,", "", 1, "HTTP/1.1 400"},
        {503, "a", "a,", "", 1, "HTTP/1.1 503"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        api_requests = 0;
        conn_calls[0] = suspected[0] = '\0';
        api_err_count = 1;
        api_err_status = rows[i].status;
        request(rows[i].hosts);
        expect(rows[i].calls, rows[i].susp, rows[i].n, rows[i].got);
    }
}

/* A ready host that sends no first byte within MESH_LLM_FIRST_BYTE_MS (the context's tunables) is
 * given up: its stream is reset (the worker's request is aborted), it is suspected, and the next
 * host answers. The deadline is 20 ms of the loop's clock; the test waits for outcomes, never for
 * durations. */
static void test_first_byte_deadline_moves_on(void **state)
{
    (void)state;
    relay_stats_t before, after;
    relay_stats(&rctx, &before);
    static tunables_t fb_tun; /* the node's MESH_LLM_FIRST_BYTE_MS=20, through the context */
    const char *envp[] = {"MESH_LLM_FIRST_BYTE_MS=20", NULL};
    char err[128];
    assert_int_equal(tunables_load(&fb_tun, envp, err, sizeof err), 0);
    rctx.tun = &fb_tun;
    hosts_ready = "a"; /* b has no deadline: a slow machine cannot time it out too */
    api_hold = 1;
    request("ab");
    rctx.tun = NULL; /* the defaults again */
    expect("a,b,", "a,", 2, "HTTP/1.1 200");
    assert_non_null(strstr(out, "{\"answer\":2,"));
    RUN_UNTIL(held_aborted == 1, 5000);
    assert_int_equal(held_aborted, 1);
    relay_stats(&rctx, &after);
    assert_int_equal(after.first_byte_timeouts, before.first_byte_timeouts + 1);
    assert_int_equal(after.retries, before.retries + 1);
}

/* A host still loading (not ready) has no first-byte deadline; when the client goes away the
 * relay cancels its call (the worker's request is aborted) and tries no other host. */
static void test_client_gone_cancels_call(void **state)
{
    (void)state;
    api_hold = 1;
    int fd = client_open("ab");
    RUN_UNTIL(held != NULL, 5000);
    assert_non_null(held);
    close(fd);
    RUN_UNTIL(held_aborted == 1, 5000);
    assert_int_equal(held_aborted, 1);
    assert_string_equal(conn_calls, "a,");
    assert_string_equal(suspected, "");
    assert_int_equal(api_requests, 1);
}

/* A stream whose host dies after "Hel" goes on on the next replica: the continuation's body
 * carries the text so far, the client gets "Hel" then "lo" under the first stream's id, and a
 * proper end. */
static void test_stream_failover_continues(void **state)
{
    (void)state;
    relay_stats_t before, after;
    relay_stats(&rctx, &before);
    stream_req = true;
    api_cut = 1;
    request("ab");
    expect("a,b,", "a,", 2, "HTTP/1.1 200");
    assert_non_null(strstr(api_body, "Hel")); /* the continuation asks for the rest */
    const char *hel = strstr(out, "\"content\":\"Hel\""), *lo = strstr(out, "\"content\":\"lo\"");
    assert_non_null(hel);
    assert_non_null(lo);
    assert_true(hel < lo);
    assert_null(strstr(out, "chatcmpl-2")); /* spliced under the first stream's id */
    assert_non_null(strstr(out, "data: [DONE]"));
    assert_null(strstr(out, "\"error\""));
    relay_stats(&rctx, &after);
    assert_int_equal(after.failovers, before.failovers + 1);
    assert_int_equal(after.failovers_resumed, before.failovers_resumed + 1);
}

/* No other replica: the client gets an SSE error event and a proper end, never a silent cut. */
static void test_stream_failover_without_replica(void **state)
{
    (void)state;
    relay_stats_t before, after;
    relay_stats(&rctx, &before);
    stream_req = true;
    api_cut = 1;
    request("a");
    expect("a,", "a,", 1, "HTTP/1.1 200");
    assert_non_null(strstr(out, "\"content\":\"Hel\""));
    assert_non_null(strstr(out, "\"error\""));
    assert_non_null(strstr(out, "data: [DONE]"));
    relay_stats(&rctx, &after);
    assert_int_equal(after.failovers_refused, before.failovers_refused + 1);
}

int main(void)
{
    if (pair_init() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unreachable_host_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_host_reachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_connection_waits_then_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_during_wait_takes_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_host_retried_on_next, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_ring_order_skips_tried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_retry_then_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_byte_deadline_moves_on, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_gone_cancels_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_failover_continues, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_failover_without_replica, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    return rc;
}
