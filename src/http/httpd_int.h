/* Internal to the HTTP server's files (httpd.c, httpd_parse.c, httpd_listen.c, httpd_respond.c). */
#ifndef MESH_HTTPD_INT_H
#define MESH_HTTPD_INT_H

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "httpd.h"
#include "util.h"

typedef enum {
    CONN_IDLE,     /* waiting for the first byte of a request */
    CONN_READING,  /* a request is arriving */
    CONN_HANDLING, /* dispatched; the handler owns the response */
    CONN_LINGER,   /* final response written; draining input before close */
    CONN_CLOSED,
} conn_state_t;

struct httpd_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    httpd_t *server;
    httpd_conn_t *next, *prev;
    conn_state_t state;
    httpd_peer_t peer;
    llhttp_t parser;
    llhttp_settings_t settings;
    buf_t url;
    buf_t hdr; /* "name\0value\0..." */
    buf_t body;
    buf_t path;
    buf_t pending;    /* bytes received while a request is being handled */
    size_t accounted; /* buffer bytes counted in server->budget */
    bool last_was_value;
    bool headers_done;
    size_t trailer_bytes; /* chunked trailers: counted against the header cap, then dropped */
    bool reading;
    int parse_error_status; /* 413/414/431 when a limit was hit inside a callback */
    /* A complete request that is answered here instead of by the handler (a limit that the
     * upstream would enforce): status, code, message. */
    int reject_status;
    const char *reject_code;
    char reject_msg[160];
    size_t wq; /* bytes queued for writing */
    /* Stalled-reader watch (while a request is handled): bytes handed to the kernel, how many
     * of them the client had taken at the last check, and when that last grew. */
    uint64_t handed;
    uint64_t delivered_seen;
    uint64_t progress_ms;
    bool above_high;
    bool end_pending; /* response complete once the queue drains */
    bool end_keep_alive;
    bool reset_on_close; /* cut off: RST, the unread response is dropped */
    int handles_open;
    httpd_req_t req;
    bool req_live; /* req handed to the handler and not yet ended/aborted */
};

/* httpd.c: queue bytes on the connection (0, or a negative errno). */
int httpd_conn_write(httpd_conn_t *c, const void *data, size_t len);

/* httpd_parse.c: the llhttp callbacks of a connection (parser->data is the httpd_conn_t). */
void httpd_parse_settings(llhttp_settings_t *s);

/* httpd_listen.c: the listening socket, accepting, out-of-descriptor handling. */
int httpd_listen_open(httpd_t *s, const char *host, int port);
void httpd_listen_close(httpd_t *s);

/* httpd_respond.c: apply the web guard (httpd_guard.h) to a dispatched request; true when it
 * answered (preflight, 403, 415). Sets req->cors_origin for an allowed origin. */
bool httpd_guard_answer(httpd_req_t *req);

#endif
