/* ws_client — a WebSocket client on the libuv loop (ws:// over TCP, wss:// over GnuTLS).
 *
 * Framing is wslay's (no hand-written framing); the opening handshake is checked
 * (101 + Sec-WebSocket-Accept); TLS verifies the relay's certificate against the system trust
 * store and its host name (plus the PEM file ws_opts_t.ca_file when set, for tests).
 * Every input is bounded: the handshake answer (8 KiB), a message (max_msg, over it wslay closes
 * with 1009), bytes waiting to be written (1 MiB). A connection that is not open within
 * open_timeout_ms fails.
 *
 * Lifecycle: ws_connect → on_open → on_text… → on_close (once, with why); after on_close the
 * client frees itself: the owner forgets its pointer. ws_close ends it early without callbacks.
 * Nothing is freed inside a callback. */
#ifndef MESH_WS_CLIENT_H
#define MESH_WS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct ws_client ws_client_t;

typedef struct {
    void (*on_open)(ws_client_t *c, void *data);
    void (*on_text)(ws_client_t *c, const char *msg, size_t len, void *data);
    void (*on_close)(ws_client_t *c, const char *why, void *data);
    void *data;
    size_t max_msg;           /* 0: 256 KiB */
    uint64_t open_timeout_ms; /* 0: 10 s */
    /* a PEM file of extra certificate authorities for wss:// (tests; the node's
     * MESH_LLM_NOSTR_CA_FILE); NULL or "": none. Borrowed until the client is closed. */
    const char *ca_file;
} ws_opts_t;

#define WS_URL_MAX 512

/* Start connecting to url (ws://host[:port][/path] or wss://…). -EINVAL for a URL that is not
 * one of those (err says why), -ENOMEM. */
int ws_connect(ws_client_t **out, uv_loop_t *loop, const char *url, const ws_opts_t *o, char *err,
               size_t errlen);
/* Queue a text message (copied); -ENOTCONN before on_open or after close, -ENOBUFS when too
 * much is waiting to be written. */
int ws_send_text(ws_client_t *c, const char *msg, size_t len);
/* Close now: no more callbacks, memory freed once libuv lets go of the handles. */
void ws_close(ws_client_t *c);

/* Split a ws:// or wss:// URL (pure). */
int ws_parse_url(const char *url, int *tls, char *host, size_t hostlen, int *port, char *path,
                 size_t pathlen);

#endif
