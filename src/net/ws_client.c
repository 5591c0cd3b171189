/* WebSocket client: libuv TCP, optional GnuTLS on memory buffers, wslay framing. */
#include "ws_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <wslay/wslay.h>

#include "util.h"

#define WS_HANDSHAKE_MAX 8192
#define WS_WRITE_MAX (1024 * 1024)
#define WS_HOST_MAX 256

typedef enum { ST_RESOLVE, ST_CONNECT, ST_TLS, ST_UPGRADE, ST_OPEN, ST_DONE } ws_state_t;

struct ws_client {
    uv_loop_t *loop;
    ws_opts_t o;
    ws_state_t st;
    int tls;
    char host[WS_HOST_MAX], path[WS_URL_MAX];
    int port;
    uv_getaddrinfo_t gai;
    uv_connect_t conn;
    uv_tcp_t tcp;
    uv_timer_t timer;
    bool tcp_open, timer_open;
    int refs;    /* libuv requests and handles still holding this struct */
    bool closed; /* no more callbacks; free when refs reach 0 */
    gnutls_session_t sess;
    gnutls_certificate_credentials_t cred;
    buf_t tls_in; /* ciphertext from the socket */
    buf_t in;     /* plaintext: handshake answer, then WebSocket bytes */
    char key[32]; /* Sec-WebSocket-Key */
    wslay_event_context_ptr ws;
    int in_cb; /* inside a user callback: no freeing */
};

typedef struct {
    uv_write_t req;
    ws_client_t *c;
    char data[];
} wreq_t;

int ws_parse_url(const char *url, int *tls, char *host, size_t hostlen, int *port, char *path,
                 size_t pathlen)
{
    const char *p;
    if (strncasecmp(url, "ws://", 5) == 0) {
        *tls = 0;
        *port = 80;
        p = url + 5;
    } else if (strncasecmp(url, "wss://", 6) == 0) {
        *tls = 1;
        *port = 443;
        p = url + 6;
    } else {
        return -EINVAL;
    }
    if (strlen(url) >= WS_URL_MAX) return -EINVAL;
    size_t hl = strcspn(p, ":/?#");
    if (*p == '[') { /* [v6] */
        const char *e = strchr(p, ']');
        if (!e) return -EINVAL;
        hl = (size_t)(e - p) + 1;
    }
    if (hl == 0 || hl >= hostlen) return -EINVAL;
    if (*p == '[') {
        if (hl < 3) return -EINVAL;
        memcpy(host, p + 1, hl - 2);
        host[hl - 2] = 0;
    } else {
        memcpy(host, p, hl);
        host[hl] = 0;
    }
    p += hl;
    if (*p == ':') {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v < 1 || v > 65535) return -EINVAL;
        *port = (int)v;
        p = end;
    }
    if (*p == '#') p += strlen(p);
    const char *path_start = *p ? p : "/";
    size_t pl = strcspn(path_start, "#");
    if (pl >= pathlen) return -EINVAL;
    if (*path_start == '?') { /* "host?x" → "/?x" */
        if (pl + 1 >= pathlen) return -EINVAL;
        path[0] = '/';
        memcpy(path + 1, path_start, pl);
        path[pl + 1] = 0;
    } else {
        memcpy(path, path_start, pl);
        path[pl] = 0;
    }
    for (const char *s = host; *s; s++)
        if (*s <= ' ' || *s == '@') return -EINVAL;
    for (const char *s = path; *s; s++)
        if (*s <= ' ' || *s == 0x7f) return -EINVAL;
    return 0;
}

static void maybe_free(ws_client_t *c)
{
    if (!c->closed || c->refs > 0 || c->in_cb) return;
    if (c->ws) wslay_event_context_free(c->ws);
    if (c->sess) gnutls_deinit(c->sess);
    if (c->cred) gnutls_certificate_free_credentials(c->cred);
    buf_free(&c->tls_in);
    buf_free(&c->in);
    free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
    ws_client_t *c = h->data;
    c->refs--;
    maybe_free(c);
}

static void release(ws_client_t *c)
{
    c->closed = true;
    if (c->st == ST_RESOLVE) uv_cancel((uv_req_t *)&c->gai);
    c->st = ST_DONE;
    if (c->tcp_open) {
        c->tcp_open = false;
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    }
    if (c->timer_open) {
        c->timer_open = false;
        uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    }
    maybe_free(c);
}

static void fail(ws_client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(ws_client_t *c, const char *fmt, ...)
{
    if (c->closed) return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    c->closed = true; /* no more callbacks */
    if (c->o.on_close) {
        c->in_cb++;
        c->o.on_close(c, why, c->o.data);
        c->in_cb--;
    }
    release(c);
}

void ws_close(ws_client_t *c)
{
    if (!c || c->closed) return;
    c->closed = true;
    release(c);
}

static void on_written(uv_write_t *req, int status)
{
    wreq_t *w = (wreq_t *)req;
    ws_client_t *c = w->c;
    free(w);
    c->refs--;
    if (status < 0 && status != UV_ECANCELED) fail(c, "write: %s", uv_strerror(status));
    maybe_free(c);
}

/* Bytes to the socket (ciphertext or plain). */
static int tcp_write(ws_client_t *c, const void *data, size_t len)
{
    if (!c->tcp_open) return -ENOTCONN;
    if (c->tcp.write_queue_size + len > WS_WRITE_MAX) return -ENOBUFS;
    wreq_t *w = malloc(sizeof *w + len);
    if (!w) return -ENOMEM;
    memcpy(w->data, data, len);
    w->c = c;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc) {
        free(w);
        return rc;
    }
    c->refs++;
    return 0;
}

/* Plaintext bytes out, through TLS when wss. */
static int app_write(ws_client_t *c, const void *data, size_t len)
{
    if (!c->tls) return tcp_write(c, data, len);
    const char *p = data;
    while (len > 0) {
        ssize_t n = gnutls_record_send(c->sess, p, len);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) continue;
        if (n < 0) return -EIO;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static ssize_t tls_push(gnutls_transport_ptr_t p, const void *data, size_t len)
{
    ws_client_t *c = p;
    if (tcp_write(c, data, len) != 0) {
        gnutls_transport_set_errno(c->sess, EIO);
        return -1;
    }
    return (ssize_t)len;
}

static ssize_t tls_pull(gnutls_transport_ptr_t p, void *data, size_t len)
{
    ws_client_t *c = p;
    if (c->tls_in.len == 0) {
        gnutls_transport_set_errno(c->sess, EAGAIN);
        return -1;
    }
    size_t n = len < c->tls_in.len ? len : c->tls_in.len;
    memcpy(data, c->tls_in.data, n);
    buf_consume(&c->tls_in, n);
    return (ssize_t)n;
}

/* --- wslay callbacks --- */
static ssize_t ws_recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
                          void *ud)
{
    ws_client_t *c = ud;
    (void)flags;
    if (c->in.len == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = len < c->in.len ? len : c->in.len;
    memcpy(buf, c->in.data, n);
    buf_consume(&c->in, n);
    return (ssize_t)n;
}

static ssize_t ws_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                          void *ud)
{
    ws_client_t *c = ud;
    (void)flags;
    if (app_write(c, data, len) != 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)len;
}

static int ws_genmask_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *ud)
{
    (void)ctx;
    (void)ud;
    randombytes_buf(buf, len);
    return 0;
}

static void ws_msg_cb(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *a,
                      void *ud)
{
    ws_client_t *c = ud;
    (void)ctx;
    if (c->closed) return;
    if (a->opcode == WSLAY_TEXT_FRAME && c->o.on_text) {
        c->in_cb++;
        c->o.on_text(c, (const char *)a->msg, a->msg_length, c->o.data);
        c->in_cb--;
    } else if (a->opcode == WSLAY_CONNECTION_CLOSE) {
        fail(c, "closed by the relay (status %u)", a->status_code);
    }
}

static void ws_pump(ws_client_t *c)
{
    if (c->closed) return;
    if (wslay_event_recv(c->ws) != 0) {
        fail(c, "WebSocket protocol error");
        return;
    }
    if (c->closed) return;
    if (wslay_event_send(c->ws) != 0) {
        fail(c, "WebSocket write failed");
        return;
    }
    if (!wslay_event_want_read(c->ws) && !wslay_event_want_write(c->ws))
        fail(c, "WebSocket closed (message over %zu bytes, or a close frame)", c->o.max_msg);
}

static int start_upgrade(ws_client_t *c)
{
    uint8_t nonce[16];
    randombytes_buf(nonce, sizeof nonce);
    sodium_bin2base64(c->key, sizeof c->key, nonce, sizeof nonce, sodium_base64_VARIANT_ORIGINAL);
    char req[WS_URL_MAX + WS_HOST_MAX + 256];
    int def = c->tls ? 443 : 80;
    char hostport[WS_HOST_MAX + 16];
    if (c->port == def)
        snprintf(hostport, sizeof hostport, strchr(c->host, ':') ? "[%s]" : "%s", c->host);
    else
        snprintf(hostport, sizeof hostport, strchr(c->host, ':') ? "[%s]:%d" : "%s:%d", c->host,
                 c->port);
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                     "User-Agent: mesh-llm/" MESH_VERSION "\r\n\r\n",
                     c->path, hostport, c->key);
    c->st = ST_UPGRADE;
    return app_write(c, req, (size_t)n);
}

/* The expected Sec-WebSocket-Accept: base64(sha1(key + GUID)). */
static void accept_value(const char *key, char *out, size_t outlen)
{
    char cat[128];
    int n = snprintf(cat, sizeof cat, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
    uint8_t sha[20];
    gnutls_hash_fast(GNUTLS_DIG_SHA1, cat, (size_t)n, sha);
    sodium_bin2base64(out, outlen, sha, sizeof sha, sodium_base64_VARIANT_ORIGINAL);
}

static bool header_has(const char *hdrs, const char *name, const char *want)
{
    size_t nl = strlen(name);
    for (const char *l = strstr(hdrs, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
        const char *h = l + 2;
        if (strncasecmp(h, name, nl) != 0 || h[nl] != ':') continue;
        const char *v = h + nl + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vl = strcspn(v, "\r");
        while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        if (vl == strlen(want) && strncasecmp(v, want, vl) == 0) return true;
    }
    return false;
}

static void handle_upgrade_answer(ws_client_t *c)
{
    if (c->in.len == 0) return;
    char *end = memmem(c->in.data, c->in.len, "\r\n\r\n", 4);
    if (!end) {
        if (c->in.len >= WS_HANDSHAKE_MAX)
            fail(c, "handshake answer over %d bytes", WS_HANDSHAKE_MAX);
        return;
    }
    size_t hlen = (size_t)(end - c->in.data) + 4;
    char *h = malloc(hlen + 1);
    if (!h) {
        fail(c, "out of memory");
        return;
    }
    memcpy(h, c->in.data, hlen);
    h[hlen] = 0;
    char acc[64];
    accept_value(c->key, acc, sizeof acc);
    bool ok101 = strncmp(h, "HTTP/1.1 101", 12) == 0;
    bool ok = ok101 && header_has(h, "Sec-WebSocket-Accept", acc) &&
              header_has(h, "Upgrade", "websocket");
    char first[80];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(h, "\r\n"), h);
    free(h);
    if (!ok) {
        fail(c,
             ok101 ? "bad Sec-WebSocket-Accept or Upgrade in the answer"
                   : "not a WebSocket upgrade: %s",
             first);
        return;
    }
    buf_consume(&c->in, hlen);
    struct wslay_event_callbacks cb = {.recv_callback = ws_recv_cb,
                                       .send_callback = ws_send_cb,
                                       .genmask_callback = ws_genmask_cb,
                                       .on_msg_recv_callback = ws_msg_cb};
    if (wslay_event_context_client_init(&c->ws, &cb, c) != 0) {
        fail(c, "out of memory");
        return;
    }
    wslay_event_config_set_max_recv_msg_length(c->ws, c->o.max_msg);
    c->st = ST_OPEN;
    if (c->timer_open) uv_timer_stop(&c->timer);
    if (c->o.on_open) {
        c->in_cb++;
        c->o.on_open(c, c->o.data);
        c->in_cb--;
    }
    if (!c->closed && c->in.len) ws_pump(c);
}

static void on_plain(ws_client_t *c)
{
    if (c->st == ST_UPGRADE)
        handle_upgrade_answer(c);
    else if (c->st == ST_OPEN)
        ws_pump(c);
}

static void tls_progress(ws_client_t *c)
{
    if (c->st == ST_TLS) {
        int rc = gnutls_handshake(c->sess);
        if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) return;
        if (rc < 0) {
            fail(c, "TLS handshake with %s: %s", c->host, gnutls_strerror(rc));
            return;
        }
        if (start_upgrade(c) != 0) {
            fail(c, "cannot send the upgrade request");
            return;
        }
    }
    char tmp[16384];
    for (;;) {
        size_t before = c->tls_in.len;
        ssize_t n = gnutls_record_recv(c->sess, tmp, sizeof tmp);
        /* a post-handshake message (TLS 1.3 session tickets) also ends in E_AGAIN: go on while
         * the call consumed input and some is left */
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
            if (c->tls_in.len > 0 && c->tls_in.len < before) continue;
            break;
        }
        if (n == 0) {
            fail(c, "TLS connection closed");
            return;
        }
        if (n < 0) {
            fail(c, "TLS: %s", gnutls_strerror((int)n));
            return;
        }
        if (buf_append(&c->in, tmp, (size_t)n) != 0) {
            fail(c, "input over its cap");
            return;
        }
    }
    on_plain(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    static char slab[65536]; /* the loop is single-threaded; data is copied out at once */
    (void)h;
    (void)hint;
    b->base = slab;
    b->len = sizeof slab;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    ws_client_t *c = s->data;
    if (c->closed) return;
    if (nread < 0) {
        fail(c, nread == UV_EOF ? "connection closed by the relay" : "read: %s",
             uv_strerror((int)nread));
        return;
    }
    if (nread == 0) return;
    buf_t *dst = c->tls ? &c->tls_in : &c->in;
    if (buf_append(dst, b->base, (size_t)nread) != 0) {
        fail(c, "input over its cap");
        return;
    }
    c->refs++; /* a callback below may close: keep the struct until we return */
    if (c->tls)
        tls_progress(c);
    else
        on_plain(c);
    c->refs--;
    maybe_free(c);
}

static int tls_setup(ws_client_t *c)
{
    if (gnutls_certificate_allocate_credentials(&c->cred) < 0) return -ENOMEM;
    gnutls_certificate_set_x509_system_trust(c->cred);
    const char *ca = c->o.ca_file;
    if (ca && *ca) gnutls_certificate_set_x509_trust_file(c->cred, ca, GNUTLS_X509_FMT_PEM);
    if (gnutls_init(&c->sess, GNUTLS_CLIENT | GNUTLS_NONBLOCK) < 0) return -ENOMEM;
    if (gnutls_set_default_priority(c->sess) < 0 ||
        gnutls_credentials_set(c->sess, GNUTLS_CRD_CERTIFICATE, c->cred) < 0)
        return -EIO;
    unsigned char ip[16];
    bool literal = inet_pton(AF_INET, c->host, ip) == 1 || inet_pton(AF_INET6, c->host, ip) == 1;
    if (!literal) /* SNI names hosts, never addresses (RFC 6066) */
        gnutls_server_name_set(c->sess, GNUTLS_NAME_DNS, c->host, strlen(c->host));
    gnutls_session_set_verify_cert(c->sess, c->host, 0);
    gnutls_transport_set_ptr(c->sess, c);
    gnutls_transport_set_push_function(c->sess, tls_push);
    gnutls_transport_set_pull_function(c->sess, tls_pull);
    return 0;
}

static void on_connect(uv_connect_t *req, int status)
{
    ws_client_t *c = req->data;
    c->refs--;
    if (c->closed) {
        maybe_free(c);
        return;
    }
    if (status < 0) {
        fail(c, "connect to %s:%d: %s", c->host, c->port, uv_strerror(status));
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (c->tls) {
        c->st = ST_TLS;
        if (tls_setup(c) != 0) {
            fail(c, "TLS setup failed");
            return;
        }
        tls_progress(c);
    } else if (start_upgrade(c) != 0) {
        fail(c, "cannot send the upgrade request");
    }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    ws_client_t *c = req->data;
    c->refs--;
    if (c->closed) {
        uv_freeaddrinfo(res);
        maybe_free(c);
        return;
    }
    if (status < 0 || !res) {
        uv_freeaddrinfo(res);
        fail(c, "cannot resolve %s: %s", c->host, uv_strerror(status));
        return;
    }
    c->st = ST_CONNECT;
    uv_tcp_init(c->loop, &c->tcp);
    c->tcp.data = c;
    c->tcp_open = true;
    c->refs++; /* the tcp handle */
    uv_tcp_nodelay(&c->tcp, 1);
    c->conn.data = c;
    /* IPv4 first: an IPv6 address listed first is often unreachable from an IPv4-only host */
    const struct addrinfo *ai = res;
    for (const struct addrinfo *x = res; x; x = x->ai_next)
        if (x->ai_family == AF_INET) {
            ai = x;
            break;
        }
    int rc = uv_tcp_connect(&c->conn, &c->tcp, ai->ai_addr, on_connect);
    uv_freeaddrinfo(res);
    if (rc) {
        fail(c, "connect to %s:%d: %s", c->host, c->port, uv_strerror(rc));
        return;
    }
    c->refs++;
}

static void on_timeout(uv_timer_t *t)
{
    ws_client_t *c = t->data;
    if (c->st != ST_OPEN)
        fail(c, "not open after %llu ms", (unsigned long long)c->o.open_timeout_ms);
}

int ws_connect(ws_client_t **out, uv_loop_t *loop, const char *url, const ws_opts_t *o, char *err,
               size_t errlen)
{
    ws_client_t *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->loop = loop;
    c->o = *o;
    if (!c->o.max_msg) c->o.max_msg = 256 * 1024;
    if (!c->o.open_timeout_ms) c->o.open_timeout_ms = 10000;
    if (ws_parse_url(url, &c->tls, c->host, sizeof c->host, &c->port, c->path, sizeof c->path)) {
        snprintf(err, errlen, "'%s' is not a ws:// or wss:// URL", url);
        free(c);
        return -EINVAL;
    }
    buf_init(&c->in, c->o.max_msg + 65536);
    buf_init(&c->tls_in, c->o.max_msg + 65536);
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    c->timer_open = true;
    c->refs++;
    uv_timer_start(&c->timer, on_timeout, c->o.open_timeout_ms, 0);
    char port[8];
    snprintf(port, sizeof port, "%d", c->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    c->gai.data = c;
    c->st = ST_RESOLVE;
    int rc = uv_getaddrinfo(loop, &c->gai, on_resolved, c->host, port, &hints);
    if (rc) {
        snprintf(err, errlen, "cannot resolve %s: %s", c->host, uv_strerror(rc));
        c->closed = true;
        release(c);
        return rc;
    }
    c->refs++;
    *out = c;
    return 0;
}

int ws_send_text(ws_client_t *c, const char *msg, size_t len)
{
    if (!c || c->closed || c->st != ST_OPEN) return -ENOTCONN;
    if (c->tcp.write_queue_size + len > WS_WRITE_MAX) return -ENOBUFS;
    struct wslay_event_msg m = {
        .opcode = WSLAY_TEXT_FRAME, .msg = (const uint8_t *)msg, .msg_length = len};
    if (wslay_event_queue_msg(c->ws, &m) != 0) return -ENOMEM;
    if (wslay_event_send(c->ws) != 0) {
        fail(c, "WebSocket write failed");
        return -EIO;
    }
    return 0;
}
