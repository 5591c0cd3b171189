/* HTTP/1.1 server on libuv + llhttp: keep-alive, pipelining-safe, bounded headers and bodies,
 * idle and slow-client timeouts, raw (byte-for-byte) response writes with back-pressure. */
#ifndef MESH_HTTPD_H
#define MESH_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

#define HTTPD_MAX_HEADERS 128

typedef struct httpd httpd_t;
typedef struct httpd_conn httpd_conn_t;
typedef struct httpd_req httpd_req_t;

typedef struct {
    const char *name;
    const char *value;
} httpd_header_t;

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
    uint64_t start_ns;
    /* Set by the handler when it keeps the request past the handler call. */
    void (*on_abort)(httpd_req_t *req); /* client gone; req is invalid after this returns */
    void (*on_drain)(httpd_req_t *req); /* write queue fell below the low-water mark */
    httpd_conn_t *conn;
};

typedef void (*httpd_handler_cb)(httpd_req_t *req);

typedef struct {
    const char *host;
    int port;                 /* 0 = any free port */
    size_t max_header_bytes;  /* default 64 KiB */
    size_t max_body_bytes;    /* default 8 MiB */
    uint64_t idle_timeout_ms; /* keep-alive idle; default 60 s */
    uint64_t read_timeout_ms; /* whole request must arrive within this; default 30 s */
    unsigned max_conns;       /* default 4096 */
    httpd_handler_cb handler;
    void *data;
} httpd_opts_t;

struct httpd {
    uv_tcp_t listener;
    uv_loop_t *loop;
    httpd_opts_t opts;
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
 * had accepted it; used by tests and fuzzers to talk to the server without a network. Takes
 * ownership of fd, also on failure. Returns 0 or a negative errno. */
int httpd_serve_fd(httpd_t *s, uv_os_sock_t fd);

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

/* Raw writes: the caller produces the status line, headers and body framing itself. */
int httpd_write(httpd_req_t *req, const void *data, size_t len);
size_t httpd_write_queue(const httpd_req_t *req);
/* The response is complete. keep_alive=false closes the connection once written. */
void httpd_end(httpd_req_t *req, bool keep_alive);
/* Drop the connection now (response truncated); the handler gets no on_abort. */
void httpd_abort(httpd_req_t *req);

const char *httpd_status_text(int status);
uint64_t httpd_now_ns(void);

#define HTTPD_WRITE_HIGH_WATER (1u << 20)
#define HTTPD_WRITE_LOW_WATER (256u << 10)

#endif
