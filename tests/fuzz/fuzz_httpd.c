/* libFuzzer target: the HTTP/1.1 request path of httpd (llhttp + our URL/header/body callbacks,
 * limits, pipelining, Expect: 100-continue, error responses), driven through a socketpair with
 * httpd_serve_fd, so the real connection code runs on a real libuv loop without a network.
 *
 * Input: byte 0 is a control byte, the rest is what the client sends.
 *   bits 0-3: 0 = send everything at once, k = send in chunks of k*k bytes (split callbacks)
 *   bits 4-5: how the handler answers: 0 JSON response, 1 raw write + end, 2 error, 3 never
 *             (the request stays in flight until the client goes away and it is aborted)
 * Limits are small (2 KiB of header, 4 KiB of body) so that inputs reach them.
 *
 * Oracles besides the sanitizers: every request handed to the handler is well formed (NUL-ended
 * url/path/body, path a prefix of url, headers within the limits); the server answers with
 * HTTP/1.1 responses, and with raw answers (mode 1) exactly one per request handled, in order;
 * an in-flight request is aborted when the client goes away; the connection always goes away
 * once the client does. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api_openai.h"
#include "httpd.h"
#include "log.h"
#include "util.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_HEADER 2048
#define MAX_BODY 4096
#define PUMP_LIMIT 100000

static uv_loop_t loop;
static httpd_t srv;
static int mode;
static unsigned handled, aborted;
static buf_t out;    /* everything the server wrote on this connection */
static bool verbose; /* FUZZ_VERBOSE=1: print what the server answered (reproducing a case) */

#define RAW_OK "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
#define CONTINUE "HTTP/1.1 100 Continue\r\n\r\n"

static bool starts(const char *p, const char *end, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(end - p) >= n && memcmp(p, s, n) == 0;
}

/* The server only ever writes HTTP/1.1 responses. With raw answers (mode 1) the whole stream is
 * checkable: one answer per request handed to the handler, in order, interleaved only with
 * 100 Continue and keep-alive 414/431 answers (requests past llama-server's limits), and at most
 * one final 4xx from the server itself (limit or parse error). */
static void check_output(void)
{
    if (out.len == 0) return;
    const char *p = out.data, *end = out.data + out.len;
    CHECK(starts(p, end, "HTTP/1.1 "));
    if (mode != 1) return;
    unsigned answers = 0;
    while (p < end) {
        if (starts(p, end, RAW_OK)) {
            answers++;
            p += strlen(RAW_OK);
        } else if (starts(p, end, CONTINUE)) {
            p += strlen(CONTINUE);
        } else {
            CHECK(starts(p, end, "HTTP/1.1 4"));
            /* A request past a limit that is not about memory (414, 431: what llama-server
             * would refuse) is answered in turn and the connection goes on when the client
             * allows keep-alive; any other 4xx is the last answer. */
            const char *hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
            if (!hend) break;
            size_t hl = (size_t)(hend - p) + 2; /* with the last header line's CRLF */
            const char *ka = memmem(p, hl, "Connection: keep-alive\r\n", 24);
            if (!ka) {
                CHECK(memmem(p, hl, "Connection: close\r\n", 19) != NULL);
                break;
            }
            CHECK(starts(p, end, "HTTP/1.1 414 ") || starts(p, end, "HTTP/1.1 431 "));
            const char *cl = memmem(p, hl, "Content-Length: ", 16);
            CHECK(cl != NULL);
            p = hend + 4 + strtoul(cl + 16, NULL, 10);
            if (p > end) break;
        }
    }
    CHECK(answers == handled);
}

static void on_abort(httpd_req_t *req)
{
    aborted++;
}

static void check_req(const httpd_req_t *r)
{
    CHECK(r->url && r->path && r->body && r->method_str);
    size_t ul = strlen(r->url), pl = strlen(r->path);
    CHECK(ul <= MAX_HEADER);
    CHECK(pl <= ul && memcmp(r->path, r->url, pl) == 0);
    CHECK(r->url[pl] == '\0' || r->url[pl] == '?');
    CHECK(r->body_len <= MAX_BODY && r->body[r->body_len] == '\0');
    CHECK(r->n_headers <= HTTPD_MAX_HEADERS);
    size_t hbytes = ul;
    for (size_t i = 0; i < r->n_headers; i++) {
        CHECK(r->headers[i].name && r->headers[i].value);
        hbytes += strlen(r->headers[i].name) + strlen(r->headers[i].value);
    }
    CHECK(hbytes <= MAX_HEADER);
}

static void handler(httpd_req_t *req)
{
    handled++;
    check_req(req);
    /* What the inference API does with every request. */
    request_t rq;
    request_parse(&rq, req->path, req->body, req->body_len); /* the body, parsed once */
    int rc = rq.model_rc;
    api_key_ok(httpd_header(req, "authorization"), "sk-secret");

    switch (mode) {
    case 0: {
        json_t *h = json_array();
        for (size_t i = 0; i < req->n_headers; i++)
            json_array_append_new(h,
                                  json_pack("[s,s]", req->headers[i].name, req->headers[i].value));
        httpd_respond_json(req, 200,
                           json_pack("{s:s,s:s,s:i,s:o}", "path", req->path, "method",
                                     req->method_str, "model_rc", rc, "headers", h));
        break;
    }
    case 1: {
        static const char resp[] = RAW_OK;
        httpd_write(req, resp, sizeof resp - 1);
        httpd_end(req, true);
        break;
    }
    case 2:
        if (req->body_len % 2)
            httpd_respond_405(req, "POST");
        else
            httpd_respond_error(req, 404, "invalid_request_error", "not_found", "no endpoint at %s",
                                req->path);
        break;
    default:
        req->on_abort = on_abort;
        break;
    }
}

static void server_up(void)
{
    httpd_opts_t o = {
        .host = "127.0.0.1",
        .port = 0,
        .max_header_bytes = MAX_HEADER,
        .max_body_bytes = MAX_BODY,
        .handler = handler,
    };
    CHECK(httpd_start(&srv, &loop, &o) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    signal(SIGPIPE, SIG_IGN);
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    log_init(LOG_FORMAT_PRETTY, LOG_ERROR);
    buf_init(&out, 64u << 20);
    CHECK(uv_loop_init(&loop) == 0);
    server_up();
    return 0;
}

/* Collect whatever the server wrote. Returns the number of bytes read. */
static size_t drain(int fd)
{
    size_t total = 0;
    char b[65536];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n <= 0) break;
        CHECK(buf_append(&out, b, (size_t)n) == 0);
        if (verbose) fwrite(b, 1, (size_t)n, stderr);
        total += (size_t)n;
    }
    return total;
}

/* Run the loop until the server has nothing left to do with what it has received. */
static void pump(int fd)
{
    unsigned idle = 0, last = handled;
    for (int i = 0; i < PUMP_LIMIT && srv.n_conns > 0 && idle < 3; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        size_t got = drain(fd);
        if (got == 0 && handled == last)
            idle++;
        else
            idle = 0;
        last = handled;
    }
}

static void send_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0 && srv.n_conns > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) return; /* server closed */
            pump(fd);
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Past max_header + max_body + 64 KiB of unanswered input the server stops reading (back-
     * pressure) and, in mode 3, would only see the client leave once the request ends. */
    if (size < 1 || size > 65536) return 0;
    unsigned k = data[0] & 0x0f;
    mode = (data[0] >> 4) & 3;
    data++;
    size--;
    size_t chunk = k ? (size_t)k * k : (size ? size : 1);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    handled = aborted = 0;
    buf_reset(&out);
    CHECK(httpd_serve_fd(&srv, sv[0], HTTPD_PEER_LOOPBACK) == 0);
    CHECK(srv.n_conns == 1);

    for (size_t off = 0; off < size && srv.n_conns > 0; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        send_all(sv[1], data + off, n);
        pump(sv[1]);
    }
    /* Client goes away (half-close first, so a lingering server still sees EOF). */
    shutdown(sv[1], SHUT_WR);
    pump(sv[1]);
    for (int i = 0; i < PUMP_LIMIT && srv.n_conns > 0; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        drain(sv[1]);
    }
    CHECK(srv.n_conns == 0);      /* EOF always ends the connection */
    uv_run(&loop, UV_RUN_NOWAIT); /* close callbacks: the connection is freed */
    check_output();
    if (mode == 3) CHECK(aborted == handled);
    if (verbose)
        fprintf(stderr, "\n-- mode %d, chunk %zu: %u request(s) handled, %zu response bytes\n",
                mode, chunk, handled, out.len);
    close(sv[1]);
    return 0;
}
