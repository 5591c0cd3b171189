/* HTTP/1.1 server on libuv + llhttp: keep-alive, pipelining-safe, bounded headers and bodies,
 * idle, slow-client and stalled-reader timeouts, a process-wide cap on buffered request bytes,
 * raw (byte-for-byte) response writes with back-pressure, and an optional web guard (cross-site
 * requests and CORS, see httpd_guard.h). */
#ifndef MESH_HTTPD_H
#define MESH_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

#include "metrics.h"
#include "request.h"

#define HTTPD_MAX_HEADERS 128

/* Limits of llama-server's HTTP parser (cpp-httplib 0.57.1 as built by the pinned llama.cpp:
 * CPPHTTPLIB_HEADER_MAX_LENGTH 8192 per header line including CRLF, CPPHTTPLIB_HEADER_MAX_COUNT
 * 100, CPPHTTPLIB_REQUEST_URI_MAX_LENGTH 32768). What the node accepts it can forward: a header
 * line "Name: value\r\n" longer than this, more headers than this (the proxy adds Host,
 * Content-Length and Connection), or a longer URI is answered here (431 / 414, OpenAI error
 * shape) instead of by a bare 400 from llama-server. */
#define HTTPD_DEFAULT_MAX_HEADER_LINE 8192
#define HTTPD_DEFAULT_MAX_HEADER_COUNT 97
#define HTTPD_DEFAULT_MAX_URL 32704

typedef struct httpd httpd_t;
typedef struct httpd_conn httpd_conn_t;
typedef struct httpd_req httpd_req_t;
typedef struct httpd_filter httpd_filter_t; /* below */

typedef struct {
    const char *name;
    const char *value;
} httpd_header_t;

/* Who is at the other end of a connection. */
typedef enum {
    HTTPD_PEER_NETWORK = 0, /* a TCP client on another host */
    HTTPD_PEER_LOOPBACK,    /* a TCP client on this host (127.0.0.0/8, ::1), or a local test */
    HTTPD_PEER_TUNNEL,      /* a mesh member's request through a TUNNEL_HTTP stream */
} httpd_peer_t;

struct httpd_req {
    void *data; /* the handler's */
    httpd_t *server;
    int method; /* llhttp_method_t */
    const char *method_str;
    const char *url;  /* as sent, NUL-terminated */
    const char *path; /* url without the query string */
    httpd_header_t headers[HTTPD_MAX_HEADERS];
    size_t n_headers;
    const char *body; /* NUL-terminated for convenience; body_len is authoritative */
    size_t body_len;
    bool keep_alive; /* the client allows keep-alive */
    httpd_peer_t peer;
    /* Set by the web guard when the request's Origin is one of the allowed ones: responses
     * carry Access-Control-Allow-Origin with it (httpd_respond, the proxy, the tunnel). */
    const char *cors_origin;
    /* Set by the handler: the shape of the node's own errors on this request (API_ERR_OPENAI
     * or API_ERR_ANTHROPIC of api_routes.h; 0 is OpenAI). */
    int error_shape;
    uint64_t start_ns;
    /* What the node learns about the request as it handles it (model, route, timings, tokens):
     * its response headers and metrics (meshstat.h). Counted when the response ends. */
    metrics_req_t mesh;
    /* The body of an inference request, parsed once (core/request.h) by the API's handler
     * (meshstat_parse_body) before it is admitted: every stage after reads these facts. */
    request_t rq;
    bool rq_ok; /* rq is this request's */
    /* Set by the handler when it keeps the request past the handler call. */
    void (*on_abort)(httpd_req_t *req); /* client gone; req is invalid after this returns */
    void (*on_drain)(httpd_req_t *req); /* write queue fell below the low-water mark */
    /* Set by whoever wants to know when the request's life ends, whatever ends it (a response
     * completed, httpd_abort, the client gone): called once, after on_abort if that ran. */
    void (*on_finish)(httpd_req_t *req);
    void *finish_data;
    uint64_t tag; /* the handler's id for the request (admission control); 0: none */
    /* Set by the handler (before the response starts) to keep the last HTTPD_TAIL_BYTES bytes
     * written to the client: the response's usage and timings, read by on_finish (admission
     * counts a routed request's tokens from them). Freed when the next request starts. */
    bool keep_tail;
    char *tail;
    size_t tail_len;
    httpd_filter_t *filter; /* NULL: bytes go to the client as written */
    httpd_conn_t *conn;
};

#define HTTPD_TAIL_BYTES 4096

typedef void (*httpd_handler_cb)(httpd_req_t *req);

/* A response filter (set by a handler before the response starts): every byte written to the
 * request (httpd_write: status line, headers, body, whoever writes them — httpd_respond, the
 * proxy, the relay) goes to write instead of the client, and the filter writes what the client
 * gets with httpd_write_through. keep_tail still keeps the bytes given to httpd_write. end runs
 * once before the response ends (httpd_end; httpd_abort too: complete is then false, and a
 * filter that wrote its end lets the connection close after it instead of cutting it), done
 * once when the request's life ends (after on_finish): the filter's memory goes there. */
struct httpd_filter {
    int (*write)(httpd_req_t *req, const void *data, size_t len);
    /* complete: the response ended normally; *keep_alive: the writer's wish (may be cleared) */
    void (*end)(httpd_req_t *req, bool complete, bool *keep_alive);
    void (*done)(httpd_req_t *req);
    void *data;
};

/* Request bytes buffered by the servers that share this budget (headers, bodies, pipelined
 * input), and the cap on them (0: HTTPD_DEFAULT_BUFFER_CAP). A connection whose input would
 * pass it is answered 503 (or, while its previous request is in flight, read later). The node
 * owns one for its servers; the loop is single-threaded, as is every server on it. */
typedef struct {
    size_t buffered, cap;
} httpd_budget_t;
#define HTTPD_DEFAULT_BUFFER_CAP ((size_t)256 << 20)

typedef struct meshstat meshstat_t; /* meshstat.h */

typedef struct {
    const char *host;
    int port;                  /* 0 = any free port */
    size_t max_header_bytes;   /* request line + headers; default 64 KiB */
    size_t max_header_line;    /* one "Name: value\r\n"; default HTTPD_DEFAULT_MAX_HEADER_LINE */
    size_t max_header_count;   /* default HTTPD_DEFAULT_MAX_HEADER_COUNT */
    size_t max_url_bytes;      /* default HTTPD_DEFAULT_MAX_URL */
    size_t max_body_bytes;     /* default 8 MiB */
    uint64_t idle_timeout_ms;  /* keep-alive idle; default 60 s */
    uint64_t read_timeout_ms;  /* whole request must arrive within this; default 30 s */
    uint64_t write_timeout_ms; /* a client that takes no response bytes for this long is cut off
                                  (its request aborted); default 30 s */
    unsigned max_conns;        /* default 4096 */
    /* The web guard (httpd_guard.h): state-changing requests must be JSON and not cross-site,
     * CORS preflights are answered. Origins in allow_origins may call from web pages. */
    bool web_guard;
    const char *const *allow_origins;
    size_t n_allow_origins;
    /* Where finished requests are counted and logged (meshstat.h); NULL: nowhere. */
    meshstat_t *stat;
    /* The buffer budget this server shares; NULL: its own, with the default cap. */
    httpd_budget_t *budget;
    httpd_handler_cb handler;
    void *data;
} httpd_opts_t;

struct httpd {
    uv_poll_t listener;
    uv_timer_t accept_pause; /* out of file descriptors and nothing could be shed: wait */
    int lfd;                 /* the listening socket */
    int reserve_fd;          /* spent to refuse connections when out of file descriptors */
    uint64_t emfile_logged_ms;
    unsigned emfile_refused; /* since the last log line */
    bool emfile_ever;
    bool listening;
    uv_loop_t *loop;
    httpd_opts_t opts;
    httpd_budget_t *budget; /* opts.budget, or own_budget */
    httpd_budget_t own_budget;
    int port;
    void *data;
    httpd_conn_t *conns; /* linked list */
    unsigned n_conns;
    bool closing;
};

int httpd_start(httpd_t *s, uv_loop_t *loop, const httpd_opts_t *opts);
/* Stop listening and close every connection (in-flight requests are aborted). */
void httpd_stop(httpd_t *s);
/* Serve an already-connected stream socket (e.g. one end of a socketpair) as if the listener
 * had accepted it from `peer`; used by the tunnel (HTTPD_PEER_TUNNEL), tests and fuzzers. Takes
 * ownership of fd, also on failure. Returns 0 or a negative errno. */
int httpd_serve_fd(httpd_t *s, uv_os_sock_t fd, httpd_peer_t peer);

const char *httpd_header(const httpd_req_t *req, const char *name);

/* Complete response with a body. Ends the request. */
int httpd_respond(httpd_req_t *req, int status, const char *content_type, const char *body,
                  size_t len, const char *extra_headers);
/* OpenAI-shaped error: {"error":{"message","type","code"}}. Ends the request. */
int httpd_respond_error(httpd_req_t *req, int status, const char *type, const char *code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* JSON response from o (the reference is stolen). Ends the request. */
int httpd_respond_json(httpd_req_t *req, int status, json_t *o);
/* 405 in the OpenAI error shape, with an Allow header. Ends the request. */
int httpd_respond_405(httpd_req_t *req, const char *allow);

/* Begin a response whose length is not known (a stream: Server-Sent Events): the status line,
 * Content-Type, Cache-Control: no-cache, X-Accel-Buffering: no, extra_headers, the CORS headers
 * and Connection: close, without Content-Length; the body is what follows through httpd_write
 * until httpd_end(req, false) or httpd_abort. The caller keeps req (on_abort) and bounds what it
 * queues (httpd_write_queue). */
int httpd_stream_begin(httpd_req_t *req, int status, const char *content_type,
                       const char *extra_headers);

/* Raw writes: the caller produces the status line, headers and body framing itself. */
int httpd_write(httpd_req_t *req, const void *data, size_t len);
/* Past the request's filter (what a filter writes); without a filter, httpd_write. */
int httpd_write_through(httpd_req_t *req, const void *data, size_t len);
size_t httpd_write_queue(const httpd_req_t *req);
/* Response bytes the client has not taken yet: those queued here plus those still in the
 * socket's send queue (SIOCOUTQ: unsent or unacknowledged). What a long stream bounds. */
size_t httpd_unsent(const httpd_req_t *req);
/* The response is complete. keep_alive=false closes the connection once written. */
void httpd_end(httpd_req_t *req, bool keep_alive);
/* Drop the connection now (response truncated); the handler gets no on_abort. */
void httpd_abort(httpd_req_t *req);

/* The header lines that let a web page of req->cors_origin read the response ("" when none):
 * "Access-Control-Allow-Origin: ...\r\nVary: Origin\r\n". */
int httpd_cors_headers(const httpd_req_t *req, char *out, size_t outlen);

/* The address the client reached this server at, as an IP literal (no brackets), or "" when
 * unknown (not a TCP connection). */
void httpd_local_host(const httpd_req_t *req, char *out, size_t outlen);

const char *httpd_status_text(int status);
uint64_t httpd_now_ns(void);

#define HTTPD_WRITE_HIGH_WATER (1u << 20)
#define HTTPD_WRITE_LOW_WATER (256u << 10)

#endif
