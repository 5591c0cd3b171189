/* Forward an HTTP request to a local upstream (llama-server) and stream the response back byte
 * for byte. Hop-by-hop headers are rewritten; the body and its framing are untouched. The
 * upstream connection is closed as soon as the client goes away, which makes llama-server stop
 * generating. */
#ifndef MESH_PROXY_H
#define MESH_PROXY_H

#include <stdbool.h>
#include <stdint.h>

#include "httpd.h"
#include "util.h"

typedef struct proxy proxy_t;

#define PROXY_TAIL_BYTES 8192

typedef struct {
    uint64_t connect_timeout_ms; /* default 5 s */
    uint64_t idle_timeout_ms; /* no upstream bytes for this long → 504 / drop; default 10 min */
    bool strip_authorization; /* drop the client's Authorization header (our API key) */
    /* Called once when the exchange is over, whatever the outcome (ok=false on any failure).
     * tail holds the last bytes of the response body (up to PROXY_TAIL_BYTES), for stats. */
    void (*on_done)(void *data, bool ok, int http_status, const char *tail, size_t tail_len);
    void *data;
    proxy_t **handle; /* if set: receives the exchange, valid until on_done runs */
} proxy_opts_t;

/* Start forwarding req (whose body is req->body) to 127.0.0.1:port. On failure to start, the
 * client has already been answered with an error and a negative errno is returned. */
int proxy_forward(uv_loop_t *loop, httpd_req_t *req, uint16_t port, const proxy_opts_t *opts);
/* End an exchange now (its upstream is being killed): the client gets status with code/why if
 * no response began, else its connection is cut. on_done runs before this returns. */
void proxy_cancel(proxy_t *p, int status, const char *code, const char *why);

/* Copying an upstream answer's head to the client: hop-by-hop headers and access-control-* (the
 * node decides CORS, httpd_guard.h) are always dropped; with PROXY_HDR_REFRAME also
 * content-length and transfer-encoding (the node frames the body itself), with
 * PROXY_HDR_OWN_MESH also x-mesh-* and server-timing (the node writes its own). */
enum { PROXY_HDR_REFRAME = 1, PROXY_HDR_OWN_MESH = 2 };
/* hdr: the head's fields as NUL-terminated name, value, name, value... (len bytes). Appends
 * "Name: value\r\n" lines to out. 0 or the buffer's error. */
int proxy_copy_headers(const char *hdr, size_t len, unsigned drop, buf_t *out);

#endif
