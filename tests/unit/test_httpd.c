/* Tests of the HTTP server's request handling, driven through a socketpair (httpd_serve_fd):
 * the real connection code on a real loop, without a network. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "httpd.h"

static unsigned handled;

static void handler(httpd_req_t *req)
{
    handled++;
    char body[256];
    int n = snprintf(body, sizeof body, "%s %s", req->method_str, req->path);
    httpd_respond(req, 200, "text/plain", body, (size_t)n, NULL);
}

static size_t count(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Send req on a fresh connection, half-close, and collect everything the server answers until
 * it closes the connection. */
static char *exchange(const char *req)
{
    uv_loop_t loop;
    httpd_t srv;
    assert_int_equal(uv_loop_init(&loop), 0);
    httpd_opts_t o = {
        .host = "127.0.0.1", .max_header_bytes = 1024, .max_body_bytes = 1024, .handler = handler};
    assert_int_equal(httpd_start(&srv, &loop, &o), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(httpd_serve_fd(&srv, sv[0]), 0);
    assert_int_equal(send(sv[1], req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    shutdown(sv[1], SHUT_WR);
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    for (int i = 0; i < 100000 && srv.n_conns > 0; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n;
        while ((n = recv(sv[1], out + len, cap - 1 - len, MSG_DONTWAIT)) > 0)
            len += (size_t)n;
    }
    ssize_t n;
    while ((n = recv(sv[1], out + len, cap - 1 - len, MSG_DONTWAIT)) > 0)
        len += (size_t)n;
    assert_int_equal(srv.n_conns, 0);
    httpd_stop(&srv);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(sv[1]);
    return out;
}

static void test_pipelined_requests(void **state)
{
    handled = 0;
    char *out = exchange("GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
                         "GET /c?x=1 HTTP/1.1\r\n\r\n");
    assert_int_equal(handled, 3);
    assert_int_equal(count(out, "HTTP/1.1 200 OK"), 3);
    assert_non_null(strstr(out, "GET /a"));
    assert_non_null(strstr(out, "POST /b"));
    assert_non_null(strstr(out, "GET /c"));
    free(out);
}

/* A request asking for Upgrade (curl --http2 on http:// sends "Upgrade: h2c") gets a plain
 * HTTP/1.1 answer; the connection stays HTTP/1.1 and the next request on it is served (it used
 * to get "400 malformed HTTP request: Pause on CONNECT/Upgrade"). */
static void test_upgrade_request_then_next(void **state)
{
    handled = 0;
    char *out = exchange("GET /up HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                         "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
                         "GET /next HTTP/1.1\r\n\r\n");
    assert_int_equal(handled, 2);
    assert_int_equal(count(out, "HTTP/1.1 200 OK"), 2);
    assert_null(strstr(out, "400"));
    assert_non_null(strstr(out, "GET /next"));
    free(out);
}

static void test_upgrade_with_body_then_next(void **state)
{
    handled = 0;
    char *out = exchange("POST /up HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                         "Content-Length: 2\r\n\r\n{}GET /next HTTP/1.1\r\n\r\n");
    assert_int_equal(handled, 2);
    assert_int_equal(count(out, "HTTP/1.1 200 OK"), 2);
    free(out);
}

static void test_connect_then_next(void **state)
{
    handled = 0;
    char *out = exchange("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
                         "GET /next HTTP/1.1\r\n\r\n");
    assert_int_equal(handled, 2);
    assert_non_null(strstr(out, "GET /next"));
    free(out);
}

static void test_limits(void **state)
{
    handled = 0;
    char *out = exchange("POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n");
    assert_int_equal(handled, 0);
    assert_non_null(strstr(out, "HTTP/1.1 413 "));
    free(out);
    char big[1200];
    memset(big, 'u', sizeof big);
    memcpy(big, "GET /", 5);
    strcpy(big + sizeof big - 20, " HTTP/1.1\r\n\r\n");
    out = exchange(big);
    assert_int_equal(handled, 0);
    assert_non_null(strstr(out, "HTTP/1.1 413 "));
    free(out);
    out = exchange("GET / HTTP/9.9\r\n\r\n");
    assert_non_null(strstr(out, "HTTP/1.1 400 "));
    free(out);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_requests),
        cmocka_unit_test(test_upgrade_request_then_next),
        cmocka_unit_test(test_upgrade_with_body_then_next),
        cmocka_unit_test(test_connect_then_next),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
