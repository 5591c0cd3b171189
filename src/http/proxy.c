#include "proxy.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_routes.h"
#include "log.h"
#include "meshstat.h"
#include "util.h"

#define MAX_RESP_HEADER (64 * 1024)

struct proxy {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect;
    uv_loop_t *loop;
    httpd_req_t *req; /* NULL once the client side is finished or gone */
    proxy_opts_t opts;
    llhttp_t parser;
    llhttp_settings_t settings;
    buf_t status_text;
    buf_t hdr; /* "name\0value\0..." */
    bool last_was_value;
    bool headers_sent;
    bool message_done;
    bool needs_eof;
    bool connected;
    bool reading;
    bool closing;
    bool done_reported;
    bool sse_chunked; /* a chunked text/event-stream answer: a cut can still end it properly */
    bool in_chunk;    /* inside a chunk's data (from llhttp's chunk callbacks) */
    int status;
    int handles_open;
    size_t resp_bytes;
    uint64_t last_rx; /* loop time (ms) of the last upstream bytes */
    uint16_t port;
    char tail[PROXY_TAIL_BYTES]; /* ring of the last body bytes */
    size_t tail_pos;
};

static bool is_hop_by_hop(const char *name)
{
    static const char *const hop[] = {
        "connection",          "keep-alive", "proxy-connection", "proxy-authenticate",
        "proxy-authorization", "te",         "trailer",          "upgrade"};
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (strcasecmp(name, hop[i]) == 0) return true;
    return false;
}

int proxy_copy_headers(const char *hdr, size_t len, unsigned drop, buf_t *out)
{
    int rc = 0;
    const char *q = hdr, *end = hdr ? hdr + len : NULL;
    while (rc == 0 && q && q < end) {
        const char *name = q;
        q += strlen(q) + 1;
        if (q >= end) break;
        const char *value = q;
        q += strlen(q) + 1;
        bool skip = is_hop_by_hop(name) || strncasecmp(name, "access-control-", 15) == 0;
        if ((drop & PROXY_HDR_REFRAME) &&
            (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0))
            skip = true;
        if ((drop & PROXY_HDR_OWN_MESH) &&
            (strncasecmp(name, "x-mesh-", 7) == 0 || strcasecmp(name, "server-timing") == 0))
            skip = true;
        if (!skip) rc = buf_printf(out, "%s: %s\r\n", name, value);
    }
    return rc;
}

static void on_handle_closed(uv_handle_t *h)
{
    proxy_t *p = h->data;
    if (--p->handles_open > 0) return;
    buf_free(&p->status_text);
    buf_free(&p->hdr);
    free(p);
}

/* The last body bytes in order (lin holds PROXY_TAIL_BYTES); returns how many. */
static size_t tail_copy(const proxy_t *p, char *lin)
{
    size_t n = p->resp_bytes < PROXY_TAIL_BYTES ? p->resp_bytes : PROXY_TAIL_BYTES;
    size_t start = (p->tail_pos + PROXY_TAIL_BYTES - n) % PROXY_TAIL_BYTES;
    size_t first = PROXY_TAIL_BYTES - start;
    if (first > n) first = n;
    memcpy(lin, p->tail + start, first);
    memcpy(lin + first, p->tail, n - first);
    return n;
}

static void report(proxy_t *p, bool ok, int status)
{
    if (p->done_reported) return;
    p->done_reported = true;
    if (p->opts.on_done) {
        char lin[PROXY_TAIL_BYTES];
        size_t n = tail_copy(p, lin);
        p->opts.on_done(p->opts.data, ok, status, lin, n);
    }
}

static void proxy_close(proxy_t *p)
{
    if (p->closing) return;
    p->closing = true;
    if (p->req) {
        p->req->data = NULL;
        p->req->on_abort = NULL;
        p->req->on_drain = NULL;
        p->req = NULL;
    }
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, on_handle_closed);
    uv_close((uv_handle_t *)&p->tcp, on_handle_closed);
}

/* The last n raw bytes sent to the client end with `want`. */
static bool tail_ends_with(const proxy_t *p, const char *want)
{
    size_t n = strlen(want);
    if (p->resp_bytes < n) return false;
    for (size_t i = 0; i < n; i++)
        if (p->tail[(p->tail_pos + PROXY_TAIL_BYTES - n + i) % PROXY_TAIL_BYTES] != want[i])
            return false;
    return true;
}

/* A streamed answer cut by the model server between two events: end it properly with an error
 * event, "[DONE]" and the last chunk, so the client can tell it from a short answer. */
static bool end_stream_with_error(proxy_t *p, const char *code, const char *why)
{
    if (!p->sse_chunked || p->in_chunk) return false;
    if (p->resp_bytes > 0 && !tail_ends_with(p, "\n\n\r\n")) return false; /* mid-event */
    /* in the shape of the endpoint's own protocol (OpenAI, Anthropic, Responses) */
    char *ev = api_stream_error(api_stream_kind(p->req->path), code, why);
    if (!ev) return false;
    buf_t out;
    buf_init(&out, 8192);
    int rc = buf_printf(&out, "%zx\r\n%s\r\n0\r\n\r\n", strlen(ev), ev);
    free(ev);
    if (rc == 0) rc = httpd_write(p->req, out.data, out.len);
    buf_free(&out);
    if (rc) return false;
    httpd_end(p->req, false);
    return true;
}

/* Fail the exchange: answer the client if nothing was sent yet; end a stream cut between two
 * events with an error event; else cut the connection. */
static void proxy_fail(proxy_t *p, int status, const char *code, const char *why)
{
    if (p->req) {
        httpd_req_t *req = p->req;
        req->on_abort = NULL;
        req->on_drain = NULL;
        req->data = NULL;
        if (!p->headers_sent) {
            httpd_respond_error(req, status, "upstream_error", code, "%s", why);
        } else if (end_stream_with_error(p, code, why)) {
            LOGW("proxy", "stream cut by the model server (%s): ended with an error event", why);
        } else {
            httpd_abort(req);
        }
        p->req = NULL;
    }
    report(p, false, status);
    proxy_close(p);
}

void proxy_cancel(proxy_t *p, int status, const char *code, const char *why)
{
    if (!p->closing) proxy_fail(p, status, code, why);
}

static void on_client_abort(httpd_req_t *req)
{
    proxy_t *p = req->data;
    LOGD("proxy", "client went away; closing upstream");
    p->req = NULL;
    report(p, false, 499);
    proxy_close(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    static char slab[65536];
    (void)h;
    (void)suggested;
    *b = uv_buf_init(slab, sizeof slab);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

static void on_client_drain(httpd_req_t *req)
{
    proxy_t *p = req->data;
    if (!p->reading && !p->closing) {
        uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_read);
        p->reading = true;
    }
}

static void on_timeout(uv_timer_t *t)
{
    proxy_t *p = t->data;
    if (p->connected) {
        /* The idle timer is not re-armed per chunk: on_read only notes the time, and here the
         * timer is moved to the deadline that the last bytes set. */
        uint64_t idle = uv_now(p->loop) - p->last_rx;
        if (idle < p->opts.idle_timeout_ms) {
            uv_timer_start(t, on_timeout, p->opts.idle_timeout_ms - idle, 0);
            return;
        }
    }
    if (!p->connected)
        proxy_fail(p, 502, "upstream_connect_timeout", "could not connect to the model server");
    else
        proxy_fail(p, 504, "upstream_timeout", "the model server stopped responding");
}

static int cb_status(llhttp_t *ps, const char *at, size_t len)
{
    proxy_t *p = ps->data;
    return buf_append(&p->status_text, at, len) ? HPE_USER : 0;
}

static int cb_header_field(llhttp_t *ps, const char *at, size_t len)
{
    proxy_t *p = ps->data;
    if (p->last_was_value) {
        if (buf_append(&p->hdr, "", 1)) return HPE_USER;
        p->last_was_value = false;
    }
    return buf_append(&p->hdr, at, len) ? HPE_USER : 0;
}

static int cb_header_value(llhttp_t *ps, const char *at, size_t len)
{
    proxy_t *p = ps->data;
    if (!p->last_was_value) {
        if (buf_append(&p->hdr, "", 1)) return HPE_USER;
        p->last_was_value = true;
    }
    return buf_append(&p->hdr, at, len) ? HPE_USER : 0;
}

static int cb_headers_complete(llhttp_t *ps)
{
    proxy_t *p = ps->data;
    if (p->last_was_value && buf_append(&p->hdr, "", 1)) return HPE_USER;
    p->status = ps->status_code;
    if (p->status < 200) return 0; /* 1xx interim: not forwarded */
    p->needs_eof = llhttp_message_needs_eof(ps);
    const char *q = p->hdr.data, *end = p->hdr.data ? p->hdr.data + p->hdr.len : NULL;
    bool sse = false;
    while (q && q < end) { /* "name\0value\0..." */
        const char *name = q;
        q += strlen(q) + 1;
        if (q >= end) break;
        if (strcasecmp(name, "content-type") == 0 && strncasecmp(q, "text/event-stream", 17) == 0)
            sse = true;
        q += strlen(q) + 1;
    }
    p->sse_chunked = sse && (ps->flags & F_CHUNKED);
    return HPE_PAUSED;
}

static int cb_chunk_header(llhttp_t *ps)
{
    proxy_t *p = ps->data;
    p->in_chunk = ps->content_length > 0;
    return 0;
}

static int cb_chunk_complete(llhttp_t *ps)
{
    proxy_t *p = ps->data;
    p->in_chunk = false;
    return 0;
}

static int cb_message_complete(llhttp_t *ps)
{
    proxy_t *p = ps->data;
    if (p->status >= 200) {
        p->message_done = true;
        return HPE_PAUSED;
    }
    /* interim response finished: reset header state for the real one */
    buf_reset(&p->hdr);
    buf_reset(&p->status_text);
    p->last_was_value = false;
    return 0;
}

static int send_headers(proxy_t *p)
{
    buf_t out;
    buf_init(&out, MAX_RESP_HEADER + 1024);
    bool ka = !p->needs_eof && p->req->keep_alive;
    int rc = buf_printf(&out, "HTTP/1.1 %d %s\r\n", p->status,
                        p->status_text.len ? p->status_text.data : httpd_status_text(p->status));
    /* llama-server answers CORS for any Origin; the node decides (httpd_guard.h); the
     * X-Mesh-* and Server-Timing headers are the node's */
    if (rc == 0) rc = proxy_copy_headers(p->hdr.data, p->hdr.len, PROXY_HDR_OWN_MESH, &out);
    char cors[384];
    if (rc == 0 && httpd_cors_headers(p->req, cors, sizeof cors) > 0)
        rc = buf_append(&out, cors, strlen(cors));
    /* who served it and where the time went; a tunnelled request gets its route from the
     * node that forwarded it */
    char mesh[512];
    bool tunnelled = p->req->peer == HTTPD_PEER_TUNNEL;
    p->req->mesh.head_ns = httpd_now_ns();
    if (rc == 0 && metrics_resp_headers(&p->req->mesh, meshstat_node(meshstat_of(p->req)),
                                        tunnelled ? NULL : "local", tunnelled ? 1 : 0,
                                        p->req->mesh.head_ns, mesh, sizeof mesh) > 0)
        rc = buf_append(&out, mesh, strlen(mesh));
    if (rc == 0) rc = buf_printf(&out, "Connection: %s\r\n\r\n", ka ? "keep-alive" : "close");
    if (rc == 0) rc = httpd_write(p->req, out.data, out.len);
    buf_free(&out);
    p->headers_sent = true;
    return rc;
}

static void finish_ok(proxy_t *p)
{
    if (p->req) {
        httpd_req_t *req = p->req;
        char lin[PROXY_TAIL_BYTES]; /* token counts of the answer, for the metrics */
        size_t n = tail_copy(p, lin);
        if (p->status >= 200 && p->status < 300) metrics_parse_usage(lin, n, &req->mesh);
        req->on_abort = NULL;
        req->on_drain = NULL;
        req->data = NULL;
        p->req = NULL;
        httpd_end(req, !p->needs_eof);
    }
    report(p, true, p->status);
    proxy_close(p);
}

static void forward_body(proxy_t *p, const char *data, size_t len)
{
    if (len && p->req) {
        if (!p->req->mesh.first_body_ns) p->req->mesh.first_body_ns = httpd_now_ns();
        if (httpd_write(p->req, data, len) != 0) {
            proxy_fail(p, 502, "client_write_failed", "client write failed");
            return;
        }
        p->resp_bytes += len;
        size_t keep = len < PROXY_TAIL_BYTES ? len : PROXY_TAIL_BYTES;
        const char *src = data + len - keep;
        size_t first = PROXY_TAIL_BYTES - p->tail_pos; /* room before the ring wraps */
        if (first > keep) first = keep;
        memcpy(p->tail + p->tail_pos, src, first);
        memcpy(p->tail, src + first, keep - first);
        p->tail_pos = (p->tail_pos + keep) % PROXY_TAIL_BYTES;
        if (httpd_write_queue(p->req) >= HTTPD_WRITE_HIGH_WATER && p->reading) {
            uv_read_stop((uv_stream_t *)&p->tcp); /* back-pressure: resume on drain */
            p->reading = false;
        }
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    proxy_t *p = s->data;
    if (p->closing) return;
    if (nread < 0) {
        if (nread == UV_EOF && llhttp_finish(&p->parser) == HPE_OK && p->headers_sent &&
            (p->message_done || p->needs_eof)) {
            finish_ok(p);
            return;
        }
        LOGW("proxy", "model server closed the connection %s the response (%s)",
             p->headers_sent ? "in the middle of" : "before", uv_strerror((int)nread));
        proxy_fail(p, 502, "upstream_closed", "the model server closed the connection early");
        return;
    }
    if (nread == 0) return;
    p->last_rx = uv_now(p->loop); /* on_timeout measures the idle time from here */
    const char *data = b->base;
    size_t len = (size_t)nread;
    while (len > 0 && !p->closing && !p->message_done) {
        llhttp_errno_t err = llhttp_execute(&p->parser, data, len);
        size_t used = len;
        if (err == HPE_PAUSED) used = (size_t)(llhttp_get_error_pos(&p->parser) - data);
        if (err != HPE_OK && err != HPE_PAUSED) {
            LOGW("proxy", "bad response from model server: %s",
                 llhttp_get_error_reason(&p->parser));
            proxy_fail(p, 502, "bad_upstream_response", "malformed response from the model server");
            return;
        }
        if (!p->headers_sent) {
            if (err != HPE_PAUSED) {
                if (p->hdr.len > MAX_RESP_HEADER) {
                    proxy_fail(p, 502, "bad_upstream_response", "response header too large");
                    return;
                }
                return; /* need more header bytes */
            }
            /* paused at the end of the headers */
            llhttp_resume(&p->parser);
            if (!p->req || send_headers(p) != 0) {
                proxy_fail(p, 502, "client_write_failed", "client write failed");
                return;
            }
        } else {
            forward_body(p, data, used);
            if (err == HPE_PAUSED) { /* message complete */
                finish_ok(p);
                return;
            }
        }
        data += used;
        len -= used;
    }
}

typedef struct {
    uv_write_t w;
    buf_t b;
} upwrite_t;

static void on_upstream_written(uv_write_t *wr, int status)
{
    upwrite_t *w = (upwrite_t *)wr;
    proxy_t *p = wr->data;
    buf_free(&w->b);
    free(w);
    if (status < 0 && !p->closing)
        proxy_fail(p, 502, "upstream_write_failed",
                   "could not send the request to the model server");
}

static int build_request(proxy_t *p, httpd_req_t *req, uint16_t port, buf_t *out)
{
    int rc = buf_printf(out, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n", req->method_str, req->url,
                        port);
    for (size_t i = 0; rc == 0 && i < req->n_headers; i++) {
        const char *n = req->headers[i].name;
        if (is_hop_by_hop(n) || strcasecmp(n, "host") == 0 ||
            strcasecmp(n, "content-length") == 0 || strcasecmp(n, "transfer-encoding") == 0 ||
            strcasecmp(n, "expect") == 0 ||
            (p->opts.strip_authorization && strcasecmp(n, "authorization") == 0))
            continue;
        rc = buf_printf(out, "%s: %s\r\n", n, req->headers[i].value);
    }
    if (rc == 0)
        rc = buf_printf(out, "Content-Length: %zu\r\nConnection: close\r\n\r\n", req->body_len);
    if (rc == 0) rc = buf_append(out, req->body, req->body_len);
    return rc;
}

static void on_connect(uv_connect_t *cr, int status)
{
    proxy_t *p = cr->data;
    if (p->closing) return;
    if (status < 0) {
        LOGW("proxy", "cannot connect to the model server: %s", uv_strerror(status));
        proxy_fail(p, 502, "upstream_unreachable", "could not connect to the model server");
        return;
    }
    p->connected = true;
    p->last_rx = uv_now(p->loop);
    /* from the connect timeout to the idle timeout */
    uv_timer_start(&p->timer, on_timeout, p->opts.idle_timeout_ms, 0);
    uv_tcp_nodelay(&p->tcp, 1);
    upwrite_t *w = calloc(1, sizeof *w);
    if (!w) {
        proxy_fail(p, 500, "out_of_memory", "out of memory");
        return;
    }
    buf_init(&w->b, SIZE_MAX / 2);
    if (build_request(p, p->req, p->port, &w->b) != 0) {
        buf_free(&w->b);
        free(w);
        proxy_fail(p, 500, "out_of_memory", "out of memory");
        return;
    }
    w->w.data = p;
    uv_buf_t ub = uv_buf_init(w->b.data, (unsigned)w->b.len);
    if (uv_write(&w->w, (uv_stream_t *)&p->tcp, &ub, 1, on_upstream_written) < 0) {
        buf_free(&w->b);
        free(w);
        proxy_fail(p, 502, "upstream_write_failed",
                   "could not send the request to the model server");
        return;
    }
    if (uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_read) == 0) p->reading = true;
}

int proxy_forward(uv_loop_t *loop, httpd_req_t *req, uint16_t port, const proxy_opts_t *opts)
{
    proxy_t *p = calloc(1, sizeof *p);
    if (!p) {
        httpd_respond_error(req, 500, "server_error", "out_of_memory", "out of memory");
        return -ENOMEM;
    }
    if (opts->handle) *opts->handle = p;
    p->loop = loop;
    p->opts = *opts;
    if (!p->opts.connect_timeout_ms) p->opts.connect_timeout_ms = 5000;
    if (!p->opts.idle_timeout_ms) p->opts.idle_timeout_ms = 600000;
    p->req = req;
    p->port = port;
    req->mesh.dispatch_ns = httpd_now_ns();
    buf_init(&p->status_text, 1024);
    buf_init(&p->hdr, MAX_RESP_HEADER + 1024);
    llhttp_settings_init(&p->settings);
    p->settings.on_status = cb_status;
    p->settings.on_header_field = cb_header_field;
    p->settings.on_header_value = cb_header_value;
    p->settings.on_headers_complete = cb_headers_complete;
    p->settings.on_message_complete = cb_message_complete;
    p->settings.on_chunk_header = cb_chunk_header;
    p->settings.on_chunk_complete = cb_chunk_complete;
    llhttp_init(&p->parser, HTTP_RESPONSE, &p->settings);
    p->parser.data = p;
    uv_tcp_init(loop, &p->tcp);
    uv_timer_init(loop, &p->timer);
    p->tcp.data = p->timer.data = p;
    p->handles_open = 2;
    req->data = p;
    req->on_abort = on_client_abort;
    req->on_drain = on_client_drain;

    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    p->connect.data = p;
    int rc = uv_tcp_connect(&p->connect, &p->tcp, (struct sockaddr *)&sa, on_connect);
    if (rc) {
        proxy_fail(p, 502, "upstream_unreachable", "could not connect to the model server");
        return rc;
    }
    uv_timer_start(&p->timer, on_timeout, p->opts.connect_timeout_ms, 0);
    return 0;
}
