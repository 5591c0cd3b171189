#include "transport.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tlsid.h"
#include "util.h"
#include "wire.h"

#define ALPN "mesh-llm/1"
#define SCID_LEN 16
#define MAX_CIDS 10
#define CID_BUCKETS 4096
#define MAX_PKT 1452
#define BATCH 32
#define CHUNK_MIN 16384
#define MAX_UNADMITTED 64
#define RBUF_SLOTS 32 /* libuv's recvmmsg gives each datagram a 64 KiB slot */
#define APP_ERR_ADMISSION 0x101
#define APP_ERR_DUPLICATE 0x102
#define APP_ERR_SHUTDOWN 0x103

typedef struct chunk {
    struct chunk *next;
    size_t len, cap;
    uint8_t data[];
} chunk_t;

struct tp_stream {
    tp_conn_t *conn;
    struct tp_stream *prev, *next; /* conn->streams */
    struct tp_stream *sq_next;     /* conn->sendq */
    int64_t id;                    /* -1 until opened */
    const tp_stream_cb_t *cb;
    void *data;
    chunk_t *head, *tail, *cur;
    size_t head_acked, cur_off, unacked, unsent;
    bool in_sendq, blocked, fin_queued, fin_sent, above_hw, closed, internal, held, reset_pending;
    buf_t held_data; /* bytes that arrived before the connection was ready (dialer side) */
    bool held_fin;
};

struct tp_conn {
    tp_endpoint_t *ep;
    struct tp_conn *prev, *next;
    struct tp_conn *dirty_next;
    bool dirty;
    ngtcp2_conn *q;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    uv_timer_t timer;
    struct sockaddr_storage remote;
    socklen_t remote_len;
    ngtcp2_cid cids[MAX_CIDS];
    size_t n_cids;
    bool outbound, handshake_done, ready, closing, close_requested, freed, open_pending;
    uint64_t created_ms, ready_seq;
    char peer_id[ID_HEX_LEN + 1];
    uint8_t peer_pk[32];
    tp_stream_t *streams;
    tp_stream_t *sendq_head, *sendq_tail;
    tp_stream_t *admit;
    wire_reader_t admit_rd;
    ngtcp2_connection_close_error ccerr;
    int close_err;
    char close_why[160];
    void *data;
};

typedef struct cid_ent {
    struct cid_ent *next;
    ngtcp2_cid cid;
    tp_conn_t *c;
} cid_ent_t;

struct tp_endpoint {
    uv_loop_t *loop;
    uv_udp_t udp;
    uv_idle_t idle;
    const identity_t *id;
    uint8_t secret[32];
    gnutls_certificate_credentials_t cred;
    tp_config_t cfg;
    tp_callbacks_t cb;
    struct sockaddr_storage local;
    socklen_t local_len;
    int port;
    tp_conn_t *conns;
    size_t n_conns;
    tp_conn_t *dirty;
    cid_ent_t *buckets[CID_BUCKETS];
    uint64_t ready_counter;
    tp_stats_t stats;
    uint8_t *rbuf; /* RBUF_SLOTS datagrams per recvmmsg */
    uint8_t sbuf[BATCH][MAX_PKT];
    size_t slen[BATCH];
    bool closing, no_gso;
    int pending_closes;
    void (*close_cb)(void *data);
    void *close_data;
};

static const char priority[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+SIGN-EDDSA-ED25519:"
                               "%DISABLE_TLS13_COMPAT_MODE";

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

void tp_config_default(tp_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->handshake_timeout_ms = env_ms("MESH_LLM_HANDSHAKE_MS", 5000);
    cfg->idle_timeout_ms = env_ms("MESH_LLM_QUIC_IDLE_MS", 30000);
    cfg->keepalive_ms = cfg->idle_timeout_ms / 3;
    cfg->max_conns = 1024;
    cfg->stream_window = 1 << 20;
    cfg->high_water = 1 << 20;
}

/* ---- connection-id table ---- */

static size_t cid_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return (size_t)(h % CID_BUCKETS);
}

static tp_conn_t *cid_find(tp_endpoint_t *ep, const uint8_t *p, size_t n)
{
    for (cid_ent_t *e = ep->buckets[cid_hash(p, n)]; e; e = e->next)
        if (e->cid.datalen == n && memcmp(e->cid.data, p, n) == 0) return e->c;
    return NULL;
}

static int cid_add(tp_conn_t *c, const ngtcp2_cid *cid)
{
    if (c->n_cids == MAX_CIDS) return -ENOSPC;
    cid_ent_t *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    e->cid = *cid;
    e->c = c;
    size_t b = cid_hash(cid->data, cid->datalen);
    e->next = c->ep->buckets[b];
    c->ep->buckets[b] = e;
    c->cids[c->n_cids++] = *cid;
    return 0;
}

static void cid_remove(tp_conn_t *c, const ngtcp2_cid *cid)
{
    size_t b = cid_hash(cid->data, cid->datalen);
    for (cid_ent_t **pp = &c->ep->buckets[b]; *pp; pp = &(*pp)->next) {
        cid_ent_t *e = *pp;
        if (e->c == c && ngtcp2_cid_eq(&e->cid, cid)) {
            *pp = e->next;
            free(e);
            break;
        }
    }
    for (size_t i = 0; i < c->n_cids; i++)
        if (ngtcp2_cid_eq(&c->cids[i], cid)) {
            c->cids[i] = c->cids[--c->n_cids];
            break;
        }
}

/* ---- scheduling ---- */

static void idle_cb(uv_idle_t *h);

static void mark_dirty(tp_conn_t *c)
{
    if (c->dirty || c->freed) return;
    c->dirty = true;
    c->dirty_next = c->ep->dirty;
    c->ep->dirty = c;
    if (!uv_is_active((uv_handle_t *)&c->ep->idle)) uv_idle_start(&c->ep->idle, idle_cb);
}

static void dirty_unlink(tp_conn_t *c)
{
    if (!c->dirty) return;
    for (tp_conn_t **pp = &c->ep->dirty; *pp; pp = &(*pp)->dirty_next)
        if (*pp == c) {
            *pp = c->dirty_next;
            break;
        }
    c->dirty = false;
}

static void sendq_push(tp_stream_t *s)
{
    tp_conn_t *c = s->conn;
    if (s->in_sendq || s->blocked || s->id < 0 || s->closed) return;
    if (s->unsent == 0 && !(s->fin_queued && !s->fin_sent)) return;
    s->in_sendq = true;
    s->sq_next = NULL;
    if (c->sendq_tail)
        c->sendq_tail->sq_next = s;
    else
        c->sendq_head = s;
    c->sendq_tail = s;
}

static tp_stream_t *sendq_pop(tp_conn_t *c)
{
    tp_stream_t *s = c->sendq_head;
    if (!s) return NULL;
    c->sendq_head = s->sq_next;
    if (!c->sendq_head) c->sendq_tail = NULL;
    s->in_sendq = false;
    s->sq_next = NULL;
    return s;
}

static void sendq_remove(tp_stream_t *s)
{
    if (!s->in_sendq) return;
    tp_conn_t *c = s->conn;
    tp_stream_t *prev = NULL;
    for (tp_stream_t *x = c->sendq_head; x; prev = x, x = x->sq_next) {
        if (x != s) continue;
        if (prev)
            prev->sq_next = x->sq_next;
        else
            c->sendq_head = x->sq_next;
        if (c->sendq_tail == x) c->sendq_tail = prev;
        break;
    }
    s->in_sendq = false;
}

/* ---- streams ---- */

static tp_stream_t *stream_new(tp_conn_t *c, int64_t id)
{
    tp_stream_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->conn = c;
    s->id = id;
    buf_init(&s->held_data, c->ep->cfg.stream_window + 4096);
    s->next = c->streams;
    if (c->streams) c->streams->prev = s;
    c->streams = s;
    return s;
}

static void stream_free(tp_stream_t *s)
{
    tp_conn_t *c = s->conn;
    sendq_remove(s);
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    for (chunk_t *k = s->head; k;) {
        chunk_t *n = k->next;
        free(k);
        k = n;
    }
    buf_free(&s->held_data);
    if (c->admit == s) c->admit = NULL;
    free(s);
}

/* Close callbacks run once; the struct goes right after. */
static void stream_finish(tp_stream_t *s, int err)
{
    if (!s->closed) {
        s->closed = true;
        if (s->cb && s->cb->on_close && !s->internal && !s->held) s->cb->on_close(s, err);
    }
    stream_free(s);
}

int tp_stream_write(tp_stream_t *s, const void *p, size_t n)
{
    if (s->closed || s->fin_queued || s->conn->closing) return -EPIPE;
    const uint8_t *src = p;
    bool was_idle = s->unsent == 0;
    chunk_t *first_new = NULL;
    size_t first_off = 0;
    while (n > 0) {
        chunk_t *t = s->tail;
        if (!t || t->len == t->cap) {
            size_t cap = n > CHUNK_MIN ? (n < 65536 ? n : 65536) : CHUNK_MIN;
            t = malloc(sizeof *t + cap);
            if (!t) return -ENOMEM;
            t->next = NULL;
            t->len = 0;
            t->cap = cap;
            if (s->tail)
                s->tail->next = t;
            else
                s->head = t;
            s->tail = t;
        }
        if (!first_new) {
            first_new = t;
            first_off = t->len;
        }
        size_t take = t->cap - t->len < n ? t->cap - t->len : n;
        memcpy(t->data + t->len, src, take);
        t->len += take;
        src += take;
        n -= take;
        s->unacked += take;
        s->unsent += take;
    }
    if (was_idle && first_new) {
        s->cur = first_new;
        s->cur_off = first_off;
    }
    if (s->unacked > s->conn->ep->cfg.high_water) s->above_hw = true;
    sendq_push(s);
    mark_dirty(s->conn);
    return 0;
}

size_t tp_stream_buffered(const tp_stream_t *s)
{
    return s->unacked;
}

bool tp_stream_over_high_water(const tp_stream_t *s)
{
    return s->unacked > s->conn->ep->cfg.high_water;
}

void tp_stream_shutdown(tp_stream_t *s)
{
    if (s->closed || s->fin_queued) return;
    s->fin_queued = true;
    sendq_push(s);
    mark_dirty(s->conn);
}

void tp_stream_reset(tp_stream_t *s, uint64_t app_error)
{
    if (s->closed) return;
    if (s->id >= 0 && s->conn->q) {
        ngtcp2_conn_shutdown_stream(s->conn->q, s->id, app_error);
        sendq_remove(s);
        mark_dirty(s->conn);
    } else {
        s->reset_pending = true; /* never opened: nothing to tell the peer */
        s->conn->open_pending = true;
        mark_dirty(s->conn);
    }
}

void tp_stream_consumed(tp_stream_t *s, size_t n)
{
    if (s->closed || s->id < 0 || n == 0) return;
    ngtcp2_conn_extend_max_stream_offset(s->conn->q, s->id, n);
    ngtcp2_conn_extend_max_offset(s->conn->q, n);
    mark_dirty(s->conn);
}

void tp_stream_set_cb(tp_stream_t *s, const tp_stream_cb_t *cb, void *data)
{
    s->cb = cb;
    s->data = data;
}

void *tp_stream_data(const tp_stream_t *s)
{
    return s->data;
}

tp_conn_t *tp_stream_conn(const tp_stream_t *s)
{
    return s->conn;
}

static int stream_open_now(tp_stream_t *s)
{
    int64_t id;
    int rv = ngtcp2_conn_open_bidi_stream(s->conn->q, &id, s);
    if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) return -EAGAIN;
    if (rv != 0) return -EIO;
    s->id = id;
    sendq_push(s);
    return 0;
}

int tp_stream_open(tp_conn_t *c, const tp_stream_cb_t *cb, void *data, tp_stream_t **out)
{
    if (!c->ready || c->closing || c->close_requested) return -ENOTCONN;
    tp_stream_t *s = stream_new(c, -1);
    if (!s) return -ENOMEM;
    s->cb = cb;
    s->data = data;
    int rc = stream_open_now(s);
    if (rc == -EAGAIN) {
        c->open_pending = true;
    } else if (rc) {
        stream_free(s);
        return rc;
    }
    mark_dirty(c);
    *out = s;
    return 0;
}

static void open_pending_streams(tp_conn_t *c)
{
    if (!c->open_pending) return;
    c->open_pending = false;
    for (tp_stream_t *s = c->streams, *n; s; s = n) {
        n = s->next;
        if (s->reset_pending && s->id < 0) {
            stream_finish(s, -ECONNRESET);
            continue;
        }
        if (s->id >= 0 || s->closed) continue;
        if (stream_open_now(s) == -EAGAIN) {
            c->open_pending = true;
            break;
        }
    }
}

/* ---- packets out ---- */

/* Send packets sbuf[0..n) to c's peer. Runs of equal-sized packets (plus one shorter tail) go
 * out as one UDP GSO message (the kernel cuts it into datagrams); the groups of a batch go in
 * one sendmmsg. Without kernel GSO support, one datagram per message. */
static void send_batch(tp_endpoint_t *ep, tp_conn_t *c, size_t n)
{
    if (n == 0) return;
    int fd;
    if (uv_fileno((uv_handle_t *)&ep->udp, &fd) != 0) return;
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[BATCH];
    size_t nm = 0, counts[BATCH];
    memset(msgs, 0, sizeof msgs);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        if (!ep->no_gso) {
            while (j < n && ep->slen[j] == ep->slen[i])
                j++;
            if (j < n && ep->slen[j] < ep->slen[i]) j++;
        }
        struct msghdr *h = &msgs[nm].msg_hdr;
        for (size_t k = i; k < j; k++) {
            iov[k].iov_base = ep->sbuf[k];
            iov[k].iov_len = ep->slen[k];
        }
        h->msg_name = &c->remote;
        h->msg_namelen = c->remote_len;
        h->msg_iov = &iov[i];
        h->msg_iovlen = j - i;
        if (j - i > 1) {
            memset(&ctl[nm], 0, sizeof ctl[nm]);
            h->msg_control = ctl[nm].buf;
            h->msg_controllen = sizeof ctl[nm].buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(h);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t seg = (uint16_t)ep->slen[i];
            memcpy(CMSG_DATA(cm), &seg, sizeof seg);
        }
        counts[nm++] = j - i;
        i = j;
    }
    size_t done = 0;
    while (done < nm) {
        int r = sendmmsg(fd, msgs + done, (unsigned)(nm - done), 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            if ((errno == EIO || errno == EINVAL || errno == ENOPROTOOPT) && !ep->no_gso) {
                ep->no_gso = true; /* no UDP GSO here: resend one datagram per message */
                size_t skip = 0;
                for (size_t k = 0; k < done; k++)
                    skip += counts[k];
                for (size_t k = skip; k < n; k++) {
                    memmove(ep->sbuf[k - skip], ep->sbuf[k], ep->slen[k]);
                    ep->slen[k - skip] = ep->slen[k];
                }
                send_batch(ep, c, n - skip);
                return;
            }
            for (size_t k = done; k < nm; k++)
                ep->stats.dropped += counts[k];
            break; /* EAGAIN/ENOBUFS: QUIC recovers from the loss */
        }
        for (int k = 0; k < r; k++)
            ep->stats.datagrams_out += counts[done + (size_t)k];
        done += (size_t)r;
    }
}

static void conn_request_close(tp_conn_t *c, int err, const char *why);
static void ep_handle_closed(uv_handle_t *h);

static void stream_advance(tp_stream_t *s, size_t n)
{
    s->unsent -= n;
    while (n > 0 && s->cur) {
        size_t avail = s->cur->len - s->cur_off;
        size_t take = avail < n ? avail : n;
        s->cur_off += take;
        n -= take;
        if (s->cur_off == s->cur->len && s->cur->next) {
            s->cur = s->cur->next;
            s->cur_off = 0;
        }
    }
}

static void conn_flush(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    if (c->freed || c->closing || !c->q) return;
    if (ngtcp2_conn_is_in_closing_period(c->q) || ngtcp2_conn_is_in_draining_period(c->q)) return;
    open_pending_streams(c);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint64_t ts = now_ns();
    size_t npk = 0, budget = 256, spins = 0;
    size_t maxsz = ngtcp2_conn_get_max_tx_udp_payload_size(c->q);
    if (maxsz > MAX_PKT) maxsz = MAX_PKT;
    tp_stream_t *s = NULL;
    while (budget > 0 && spins++ < 4096) {
        if (!s) s = sendq_pop(c);
        ngtcp2_vec vec[16];
        size_t nv = 0;
        int64_t sid = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        if (s) {
            sid = s->id;
            chunk_t *k = s->cur;
            size_t off = s->cur_off, left = s->unsent;
            while (k && left > 0 && nv < 16) {
                size_t l = k->len - off;
                if (l > left) l = left;
                if (l > 0) {
                    vec[nv].base = k->data + off;
                    vec[nv].len = l;
                    nv++;
                    left -= l;
                }
                k = k->next;
                off = 0;
            }
            if (s->fin_queued && !s->fin_sent && left == 0) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        }
        ngtcp2_ssize ndatalen = -1;
        ngtcp2_ssize nw = ngtcp2_conn_writev_stream(c->q, &ps.path, &pi, ep->sbuf[npk], maxsz,
                                                    &ndatalen, flags, sid, vec, nv, ts);
        if (s && ndatalen >= 0) {
            stream_advance(s, (size_t)ndatalen);
            if ((flags & NGTCP2_WRITE_STREAM_FLAG_FIN) && s->unsent == 0) s->fin_sent = true;
        }
        if (nw < 0) {
            if (nw == NGTCP2_ERR_WRITE_MORE) {
                if (s && (s->unsent > 0 || (s->fin_queued && !s->fin_sent))) sendq_push(s);
                s = NULL;
                continue;
            }
            if (nw == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                if (s) s->blocked = true;
                s = NULL;
                continue;
            }
            if (nw == NGTCP2_ERR_STREAM_SHUT_WR || nw == NGTCP2_ERR_STREAM_NOT_FOUND) {
                s = NULL;
                continue;
            }
            ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, (int)nw, NULL, 0);
            conn_request_close(c, -EIO, ngtcp2_strerror((int)nw));
            break;
        }
        if (s) {
            if (s->unsent > 0 || (s->fin_queued && !s->fin_sent)) sendq_push(s);
            s = NULL;
        }
        if (nw == 0) break;
        ep->slen[npk++] = (size_t)nw;
        budget--;
        if (npk == BATCH) {
            send_batch(ep, c, npk);
            npk = 0;
        }
    }
    send_batch(ep, c, npk);
    if (budget == 0) mark_dirty(c); /* more to send: continue next loop turn, after reads */
}

/* ---- timers and closing ---- */

static void timer_cb(uv_timer_t *t);

static void conn_arm_timer(tp_conn_t *c)
{
    if (c->freed || c->closing) return;
    uint64_t exp = ngtcp2_conn_get_expiry(c->q), now = now_ns();
    uint64_t ms = exp == UINT64_MAX ? 3600000 : exp <= now ? 0 : (exp - now + 999999) / 1000000;
    if (!c->ready) {
        uint64_t dl = c->created_ms + c->ep->cfg.handshake_timeout_ms, n = uv_now(c->ep->loop);
        uint64_t left = dl > n ? dl - n : 0;
        if (left < ms) ms = left;
    }
    uv_timer_start(&c->timer, timer_cb, ms, 0);
}

static void ep_release(tp_endpoint_t *ep);

static void conn_free_cb(uv_handle_t *h)
{
    tp_conn_t *c = h->data;
    tp_endpoint_t *ep = c->ep;
    if (c->q) ngtcp2_conn_del(c->q);
    if (c->tls) gnutls_deinit(c->tls);
    wire_reader_free(&c->admit_rd);
    free(c);
    ep_release(ep);
}

static void conn_close_now(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    if (c->closing) return;
    c->closing = true;
    if (c->q && !ngtcp2_conn_is_in_closing_period(c->q) &&
        !ngtcp2_conn_is_in_draining_period(c->q) && c->close_err != -ECONNRESET &&
        c->close_err != -ETIMEDOUT) {
        ngtcp2_path_storage ps;
        ngtcp2_path_storage_zero(&ps);
        ngtcp2_pkt_info pi;
        ngtcp2_ssize nw = ngtcp2_conn_write_connection_close(c->q, &ps.path, &pi, ep->sbuf[0],
                                                             MAX_PKT, &c->ccerr, now_ns());
        if (nw > 0) {
            ep->slen[0] = (size_t)nw;
            send_batch(ep, c, 1);
        }
    }
    while (c->streams)
        stream_finish(c->streams, c->close_err ? c->close_err : -ECONNRESET);
    dirty_unlink(c);
    while (c->n_cids)
        cid_remove(c, &c->cids[c->n_cids - 1]);
    if (c->prev)
        c->prev->next = c->next;
    else
        ep->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    ep->n_conns--;
    if (ep->cb.on_conn_closed)
        ep->cb.on_conn_closed(ep, c, c->ready, c->close_err,
                              c->close_why[0] ? c->close_why : "closed");
    c->freed = true;
    ep->pending_closes++;
    uv_close((uv_handle_t *)&c->timer, conn_free_cb);
}

static void conn_request_close(tp_conn_t *c, int err, const char *why)
{
    if (c->close_requested || c->closing) return;
    c->close_requested = true;
    c->close_err = err;
    snprintf(c->close_why, sizeof c->close_why, "%s", why);
    mark_dirty(c);
}

void tp_conn_close(tp_conn_t *c, int app_error, const char *why)
{
    if (c->close_requested || c->closing) return;
    conn_request_close(c, 0, why);
    /* the reason must outlive the deferred close: point at our copy */
    ngtcp2_connection_close_error_set_application_error(
        &c->ccerr, (uint64_t)app_error, (const uint8_t *)c->close_why, strlen(c->close_why));
}

/* Work after any event on a connection (never from inside ngtcp2 callbacks). */
static void conn_after(tp_conn_t *c)
{
    if (c->freed) return;
    if (c->close_requested) {
        conn_close_now(c);
        return;
    }
    conn_flush(c);
    if (c->close_requested) {
        conn_close_now(c);
        return;
    }
    conn_arm_timer(c);
}

static void idle_cb(uv_idle_t *h)
{
    tp_endpoint_t *ep = h->data;
    uv_idle_stop(h);
    while (ep->dirty) {
        tp_conn_t *c = ep->dirty;
        ep->dirty = c->dirty_next;
        c->dirty = false;
        conn_after(c);
    }
}

static void timer_cb(uv_timer_t *t)
{
    tp_conn_t *c = t->data;
    if (c->freed || c->closing) return;
    if (!c->ready && uv_now(c->ep->loop) >= c->created_ms + c->ep->cfg.handshake_timeout_ms) {
        c->close_err = -ETIMEDOUT;
        snprintf(c->close_why, sizeof c->close_why, "%s",
                 c->handshake_done ? "admission timed out" : "handshake timed out");
        conn_close_now(c);
        return;
    }
    int rv = ngtcp2_conn_handle_expiry(c->q, now_ns());
    if (rv != 0) {
        c->close_err = rv == NGTCP2_ERR_IDLE_CLOSE ? -ETIMEDOUT : -EIO;
        snprintf(c->close_why, sizeof c->close_why, "%s",
                 rv == NGTCP2_ERR_IDLE_CLOSE ? "idle timeout (peer unreachable)"
                                             : ngtcp2_strerror(rv));
        if (rv != NGTCP2_ERR_IDLE_CLOSE)
            ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, rv, NULL, 0);
        conn_close_now(c);
        return;
    }
    conn_after(c);
}

/* ---- one connection per pair ---- */

/* Which of two ready connections to the same peer is preferred: the one dialled by the larger
 * node id; between two dialled by the same side, the one ready first. */
static bool conn_better(const tp_conn_t *a, const tp_conn_t *b)
{
    const char *self = a->ep->id->id;
    bool peer_larger = strcmp(a->peer_id, self) > 0;
    bool a_by_larger = a->outbound != peer_larger, b_by_larger = b->outbound != peer_larger;
    if (a_by_larger != b_by_larger) return a_by_larger;
    return a->ready_seq < b->ready_seq;
}

tp_conn_t *tp_find(tp_endpoint_t *ep, const char *peer_id)
{
    tp_conn_t *best = NULL;
    for (tp_conn_t *c = ep->conns; c; c = c->next) {
        if (!c->ready || c->closing || c->close_requested) continue;
        if (strcmp(c->peer_id, peer_id) != 0) continue;
        if (!best || conn_better(c, best)) best = c;
    }
    return best;
}

/* Close our own outbound duplicates that lost, once they carry no streams. */
static void prune_duplicates(tp_endpoint_t *ep, const char *peer_id)
{
    tp_conn_t *best = tp_find(ep, peer_id);
    if (!best) return;
    for (tp_conn_t *c = ep->conns; c; c = c->next) {
        if (c == best || !c->ready || !c->outbound || c->closing || c->close_requested) continue;
        if (strcmp(c->peer_id, peer_id) != 0 || c->streams) continue;
        tp_conn_close(c, APP_ERR_DUPLICATE, "duplicate connection");
    }
}

static void conn_ready(tp_conn_t *c)
{
    c->ready = true;
    c->ready_seq = ++c->ep->ready_counter;
    LOGD("quic", "%s connection with %.12s ready", c->outbound ? "outbound" : "inbound",
         c->peer_id);
    /* streams the peer opened while we were waiting for its proof */
    for (tp_stream_t *s = c->streams; s; s = s->next) {
        if (!s->held) continue;
        s->held = false;
        if (c->ep->cb.on_stream) c->ep->cb.on_stream(c->ep, c, s);
        if (!s->cb) {
            s->internal = true;
            ngtcp2_conn_shutdown_stream(c->q, s->id, 0);
        }
    }
    if (c->ep->cb.on_conn_ready) c->ep->cb.on_conn_ready(c->ep, c);
    for (tp_stream_t *s = c->streams, *n; s; s = n) {
        n = s->next;
        if (s->cb && s->held_data.len && s->cb->on_data)
            s->cb->on_data(s, (const uint8_t *)s->held_data.data, s->held_data.len);
        buf_free(&s->held_data);
        if (s->held_fin && s->cb && s->cb->on_fin) s->cb->on_fin(s);
        s->held_fin = false;
    }
    prune_duplicates(c->ep, c->peer_id);
}

/* ---- admission ---- */

static int admission_send(tp_conn_t *c, tp_stream_t *s, bool with_type)
{
    uint8_t mac[32];
    char hex[65];
    identity_admission_mac(c->ep->secret, c->ep->id->pk, c->peer_pk, mac);
    hex_encode(mac, sizeof mac, hex);
    json_t *f = json_pack("{s:i,s:s,s:s}", "v", 1, "type", "admit", "proof", hex);
    buf_t b;
    buf_init(&b, 4096);
    int rc = f ? wire_write(&b, with_type ? WIRE_GOSSIP : -1, f) : -ENOMEM;
    json_decref(f);
    if (rc == 0) rc = tp_stream_write(s, b.data, b.len);
    buf_free(&b);
    return rc;
}

static bool admission_check(tp_conn_t *c, json_t *f)
{
    const char *type = json_string_value(json_object_get(f, "type"));
    const char *proof = json_string_value(json_object_get(f, "proof"));
    uint8_t got[32], want[32];
    if (!type || strcmp(type, "admit") != 0 || !proof ||
        hex_decode(proof, strlen(proof), got, sizeof got) != 0)
        return false;
    identity_admission_mac(c->ep->secret, c->peer_pk, c->ep->id->pk, want);
    return crypto_verify_32(got, want) == 0;
}

/* Admission bytes (either side). Returns an ngtcp2 callback result. */
static int admission_data(tp_conn_t *c, tp_stream_t *s, const uint8_t *p, size_t n)
{
    while (n > 0) {
        json_t *f = NULL;
        ssize_t used = wire_read(&c->admit_rd, p, n, &f);
        if (used < 0) {
            conn_request_close(c, -EACCES, "malformed admission frame");
            return 0;
        }
        p += used;
        n -= (size_t)used;
        if (!f) continue;
        bool ok = admission_check(c, f);
        json_decref(f);
        if (!ok) {
            c->ep->stats.conns_refused++;
            LOGW("quic", "refused %.12s: bad admission proof (wrong mesh secret)", c->peer_id);
            ngtcp2_connection_close_error_set_application_error(
                &c->ccerr, APP_ERR_ADMISSION,
                (const uint8_t *)"admission refused (wrong mesh secret)", 36);
            conn_request_close(c, -EACCES, "admission refused: wrong mesh secret");
            return 0;
        }
        if (!c->outbound) {
            admission_send(c, s, false);
            tp_stream_shutdown(s);
        }
        conn_ready(c);
        return 0;
    }
    return 0;
}

/* ---- ngtcp2 callbacks ---- */

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    randombytes_buf(dest, len);
}

static int new_cid_cb(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *ud)
{
    tp_conn_t *c = ud;
    randombytes_buf(cid->data, cidlen);
    cid->datalen = cidlen;
    randombytes_buf(token, NGTCP2_STATELESS_RESET_TOKENLEN);
    return cid_add(c, cid) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int remove_cid_cb(ngtcp2_conn *q, const ngtcp2_cid *cid, void *ud)
{
    cid_remove(ud, cid);
    return 0;
}

static int handshake_completed_cb(ngtcp2_conn *q, void *ud)
{
    tp_conn_t *c = ud;
    uint8_t pk[32];
    if (tlsid_peer_key(c->tls, pk) != 0) {
        snprintf(c->close_why, sizeof c->close_why, "peer presented no Ed25519 certificate");
        c->close_err = -EACCES;
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    if (c->outbound) {
        if (sodium_memcmp(pk, c->peer_pk, 32) != 0) {
            char got[65];
            hex_encode(pk, 32, got);
            snprintf(c->close_why, sizeof c->close_why,
                     "peer at this address is %.12s…, not the node %.12s… we dialled", got,
                     c->peer_id);
            c->close_err = -EACCES;
            c->ep->stats.conns_refused++;
            return NGTCP2_ERR_CALLBACK_FAILURE;
        }
    } else {
        memcpy(c->peer_pk, pk, 32);
        hex_encode(pk, 32, c->peer_id);
        if (strcmp(c->peer_id, c->ep->id->id) == 0) {
            snprintf(c->close_why, sizeof c->close_why, "peer uses our own key");
            c->close_err = -EACCES;
            return NGTCP2_ERR_CALLBACK_FAILURE;
        }
    }
    c->handshake_done = true;
    if (c->outbound) {
        tp_stream_t *s = stream_new(c, -1);
        if (!s) return NGTCP2_ERR_CALLBACK_FAILURE;
        s->internal = true;
        c->admit = s;
        if (admission_send(c, s, true) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
        tp_stream_shutdown(s);
        c->open_pending = true;
    }
    mark_dirty(c);
    return 0;
}

static int stream_open_cb(ngtcp2_conn *q, int64_t id, void *ud)
{
    tp_conn_t *c = ud;
    if (ngtcp2_is_bidi_stream(id) == 0) return 0;
    tp_stream_t *s = stream_new(c, id);
    if (!s) return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_set_stream_user_data(q, id, s);
    if (!c->ready) {
        if (!c->outbound && !c->admit) {
            s->internal = true; /* the dialer's first stream: its admission proof */
            c->admit = s;
            return 0;
        }
        if (!c->outbound) {
            conn_request_close(c, -EPROTO, "stream before admission");
            s->internal = true;
            return 0;
        }
        s->held = true; /* acceptor's stream racing ahead of its proof */
        return 0;
    }
    if (c->ep->cb.on_stream) c->ep->cb.on_stream(c->ep, c, s);
    if (!s->cb) {
        s->internal = true;
        ngtcp2_conn_shutdown_stream(q, id, 0);
    }
    return 0;
}

static int recv_stream_data_cb(ngtcp2_conn *q, uint32_t flags, int64_t id, uint64_t off,
                               const uint8_t *data, size_t len, void *ud, void *sud)
{
    tp_conn_t *c = ud;
    tp_stream_t *s = sud;
    if (!s) return 0;
    if (s == c->admit) {
        ngtcp2_conn_extend_max_stream_offset(q, id, len);
        ngtcp2_conn_extend_max_offset(q, len);
        return admission_data(c, s, data, len);
    }
    if (s->internal) {
        ngtcp2_conn_extend_max_stream_offset(q, id, len);
        ngtcp2_conn_extend_max_offset(q, len);
        return 0;
    }
    if (s->held) {
        if (len && buf_append(&s->held_data, data, len) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
        if (flags & NGTCP2_STREAM_DATA_FLAG_FIN) s->held_fin = true;
        return 0;
    }
    if (len && s->cb && s->cb->on_data) s->cb->on_data(s, data, len);
    if ((flags & NGTCP2_STREAM_DATA_FLAG_FIN) && !s->closed && s->cb && s->cb->on_fin)
        s->cb->on_fin(s);
    return 0;
}

static int acked_cb(ngtcp2_conn *q, int64_t id, uint64_t off, uint64_t len, void *ud, void *sud)
{
    tp_stream_t *s = sud;
    if (!s) return 0;
    s->unacked -= len < s->unacked ? len : s->unacked;
    while (len > 0 && s->head) {
        chunk_t *h = s->head;
        size_t avail = h->len - s->head_acked;
        size_t take = avail < len ? avail : (size_t)len;
        s->head_acked += take;
        len -= take;
        if (s->head_acked == h->len && (h->next || (s->cur == h && s->cur_off == h->len))) {
            if (s->cur == h) {
                s->cur = h->next;
                s->cur_off = 0;
            }
            s->head = h->next;
            if (!s->head) s->tail = NULL;
            s->head_acked = 0;
            free(h);
        } else if (take == 0) {
            break;
        }
    }
    if (s->above_hw && s->unacked <= s->conn->ep->cfg.high_water / 2) {
        s->above_hw = false;
        if (s->cb && s->cb->on_drain && !s->internal) s->cb->on_drain(s);
    }
    return 0;
}

static int stream_close_cb(ngtcp2_conn *q, uint32_t flags, int64_t id, uint64_t app_error, void *ud,
                           void *sud)
{
    tp_conn_t *c = ud;
    tp_stream_t *s = sud;
    if (!ngtcp2_conn_is_local_stream(q, id)) ngtcp2_conn_extend_max_streams_bidi(q, 1);
    if (s) stream_finish(s, app_error ? -ECONNRESET : 0);
    if (c->ready && !c->streams) prune_duplicates(c->ep, c->peer_id);
    return 0;
}

static int stream_reset_cb(ngtcp2_conn *q, int64_t id, uint64_t final_size, uint64_t app_error,
                           void *ud, void *sud)
{
    ngtcp2_conn_shutdown_stream(q, id, app_error);
    return 0;
}

static int extend_max_stream_data_cb(ngtcp2_conn *q, int64_t id, uint64_t max, void *ud, void *sud)
{
    tp_stream_t *s = sud;
    if (s && s->blocked) {
        s->blocked = false;
        sendq_push(s);
        mark_dirty(s->conn);
    }
    return 0;
}

static int extend_max_local_streams_cb(ngtcp2_conn *q, uint64_t max, void *ud)
{
    tp_conn_t *c = ud;
    if (c->open_pending) mark_dirty(c);
    return 0;
}

static ngtcp2_conn *get_conn_cb(ngtcp2_crypto_conn_ref *ref)
{
    tp_conn_t *c = ref->user_data;
    return c->q;
}

/* The callbacks both sides share; client and server add their initial-packet handlers. */
static void callbacks(ngtcp2_callbacks *cb, bool client)
{
    memset(cb, 0, sizeof *cb);
    if (client) {
        cb->client_initial = ngtcp2_crypto_client_initial_cb;
        cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
    } else {
        cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    }
    cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
    cb->handshake_completed = handshake_completed_cb;
    cb->encrypt = ngtcp2_crypto_encrypt_cb;
    cb->decrypt = ngtcp2_crypto_decrypt_cb;
    cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
    cb->recv_stream_data = recv_stream_data_cb;
    cb->acked_stream_data_offset = acked_cb;
    cb->stream_open = stream_open_cb;
    cb->stream_close = stream_close_cb;
    cb->extend_max_local_streams_bidi = extend_max_local_streams_cb;
    cb->rand = rand_cb;
    cb->get_new_connection_id = new_cid_cb;
    cb->remove_connection_id = remove_cid_cb;
    cb->update_key = ngtcp2_crypto_update_key_cb;
    cb->stream_reset = stream_reset_cb;
    cb->extend_max_stream_data = extend_max_stream_data_cb;
    cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
    cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
    cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
    cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
}

/* ---- connection setup ---- */

static tp_conn_t *conn_alloc(tp_endpoint_t *ep, const struct sockaddr *remote, bool outbound)
{
    tp_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ep = ep;
    c->outbound = outbound;
    c->created_ms = uv_now(ep->loop);
    c->remote_len =
        remote->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    memcpy(&c->remote, remote, c->remote_len);
    c->ref.get_conn = get_conn_cb;
    c->ref.user_data = c;
    ngtcp2_connection_close_error_default(&c->ccerr);
    wire_reader_init(&c->admit_rd, !outbound);
    uv_timer_init(ep->loop, &c->timer);
    c->timer.data = c;
    c->next = ep->conns;
    if (ep->conns) ep->conns->prev = c;
    ep->conns = c;
    ep->n_conns++;
    return c;
}

/* Undo conn_alloc for a connection that never got going (no callbacks). */
static void conn_discard(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    while (c->n_cids)
        cid_remove(c, &c->cids[c->n_cids - 1]);
    if (c->prev)
        c->prev->next = c->next;
    else
        ep->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    ep->n_conns--;
    dirty_unlink(c);
    c->freed = true;
    c->closing = true;
    ep->pending_closes++;
    uv_close((uv_handle_t *)&c->timer, conn_free_cb);
}

static int tls_setup(tp_conn_t *c)
{
    tp_endpoint_t *ep = c->ep;
    unsigned flags = c->outbound ? GNUTLS_CLIENT : GNUTLS_SERVER;
    if (gnutls_init(&c->tls, flags | GNUTLS_NO_END_OF_EARLY_DATA) != 0) return -ENOMEM;
    int rv = c->outbound ? ngtcp2_crypto_gnutls_configure_client_session(c->tls)
                         : ngtcp2_crypto_gnutls_configure_server_session(c->tls);
    if (rv != 0) return -EIO;
    if (gnutls_priority_set_direct(c->tls, priority, NULL) != 0) return -EIO;
    if (gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, ep->cred) != 0) return -EIO;
    gnutls_datum_t alpn = {(unsigned char *)ALPN, sizeof ALPN - 1};
    gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
    if (c->outbound)
        gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, "mesh-llm", 8);
    else
        gnutls_certificate_server_set_request(c->tls, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_ptr(c->tls, &c->ref);
    return 0;
}

static void settings_params(tp_endpoint_t *ep, ngtcp2_settings *st, ngtcp2_transport_params *tp)
{
    ngtcp2_settings_default(st);
    st->initial_ts = now_ns();
    st->handshake_timeout = ep->cfg.handshake_timeout_ms * NGTCP2_MILLISECONDS;
    st->max_tx_udp_payload_size = MAX_PKT;
    st->max_window = 64 * ep->cfg.stream_window;
    st->max_stream_window = 4 * ep->cfg.stream_window;
    ngtcp2_transport_params_default(tp);
    tp->initial_max_stream_data_bidi_local = ep->cfg.stream_window;
    tp->initial_max_stream_data_bidi_remote = ep->cfg.stream_window;
    tp->initial_max_data = 16 * ep->cfg.stream_window;
    tp->initial_max_streams_bidi = 256;
    tp->initial_max_streams_uni = 0;
    tp->max_idle_timeout = ep->cfg.idle_timeout_ms * NGTCP2_MILLISECONDS;
}

int tp_dial(tp_endpoint_t *ep, const char *peer_id, const struct sockaddr *addr, tp_conn_t **out)
{
    if (ep->closing) return -ESHUTDOWN;
    if (ep->n_conns >= ep->cfg.max_conns) return -EMFILE;
    if (strlen(peer_id) != ID_HEX_LEN) return -EINVAL;
    if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return -EAFNOSUPPORT;
    if (ep->local.ss_family != addr->sa_family) return -EAFNOSUPPORT;
    tp_conn_t *c = conn_alloc(ep, addr, true);
    if (!c) return -ENOMEM;
    int rc = -EIO;
    memcpy(c->peer_id, peer_id, ID_HEX_LEN + 1);
    if (hex_decode(peer_id, ID_HEX_LEN, c->peer_pk, 32) != 0) {
        rc = -EINVAL;
        goto fail;
    }
    ngtcp2_cid dcid, scid;
    dcid.datalen = 18;
    randombytes_buf(dcid.data, dcid.datalen);
    scid.datalen = SCID_LEN;
    randombytes_buf(scid.data, scid.datalen);
    ngtcp2_settings st;
    ngtcp2_transport_params tp;
    settings_params(ep, &st, &tp);
    ngtcp2_path path = {{(struct sockaddr *)&ep->local, ep->local_len},
                        {(struct sockaddr *)&c->remote, c->remote_len},
                        NULL};
    ngtcp2_callbacks cbs;
    callbacks(&cbs, true);
    if (ngtcp2_conn_client_new(&c->q, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cbs, &st, &tp,
                               NULL, c) != 0)
        goto fail;
    if ((rc = tls_setup(c)) != 0) goto fail;
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    ngtcp2_conn_set_keep_alive_timeout(c->q, ep->cfg.keepalive_ms * NGTCP2_MILLISECONDS);
    if ((rc = cid_add(c, &scid)) != 0) goto fail;
    mark_dirty(c);
    if (out) *out = c;
    return 0;
fail:
    conn_discard(c);
    return rc;
}

static void accept_conn(tp_endpoint_t *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *addr,
                        const uint8_t *data, size_t n)
{
    size_t unadmitted = 0;
    for (tp_conn_t *x = ep->conns; x; x = x->next)
        if (!x->ready) unadmitted++;
    if (ep->closing || ep->n_conns >= ep->cfg.max_conns || unadmitted >= MAX_UNADMITTED) {
        ep->stats.dropped++;
        return;
    }
    tp_conn_t *c = conn_alloc(ep, addr, false);
    if (!c) return;
    ngtcp2_cid scid;
    scid.datalen = SCID_LEN;
    randombytes_buf(scid.data, scid.datalen);
    ngtcp2_settings st;
    ngtcp2_transport_params tp;
    settings_params(ep, &st, &tp);
    tp.original_dcid = hd->dcid;
    tp.stateless_reset_token_present = 1;
    randombytes_buf(tp.stateless_reset_token, sizeof tp.stateless_reset_token);
    ngtcp2_path path = {{(struct sockaddr *)&ep->local, ep->local_len},
                        {(struct sockaddr *)&c->remote, c->remote_len},
                        NULL};
    ngtcp2_callbacks cbs;
    callbacks(&cbs, false);
    if (ngtcp2_conn_server_new(&c->q, &hd->scid, &scid, &path, hd->version, &cbs, &st, &tp, NULL,
                               c) != 0 ||
        tls_setup(c) != 0 || cid_add(c, &scid) != 0 || cid_add(c, &hd->dcid) != 0) {
        conn_discard(c);
        return;
    }
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    ngtcp2_conn_set_keep_alive_timeout(c->q, ep->cfg.keepalive_ms * NGTCP2_MILLISECONDS);
    ep->stats.conns_accepted++;
}

/* ---- packets in ---- */

static void conn_read(tp_conn_t *c, const struct sockaddr *from, const uint8_t *data, size_t n)
{
    if (c->closing || c->freed) return;
    ngtcp2_path path = {{(struct sockaddr *)&c->ep->local, c->ep->local_len},
                        {(struct sockaddr *)from, from->sa_family == AF_INET6
                                                      ? sizeof(struct sockaddr_in6)
                                                      : sizeof(struct sockaddr_in)},
                        NULL};
    ngtcp2_pkt_info pi = {0};
    int rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, data, n, now_ns());
    if (rv != 0) {
        switch (rv) {
        case NGTCP2_ERR_DRAINING: {
            ngtcp2_connection_close_error pe;
            ngtcp2_conn_get_connection_close_error(c->q, &pe);
            c->close_err = -ECONNRESET;
            if (pe.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION &&
                pe.error_code == APP_ERR_ADMISSION)
                c->close_err = -EACCES;
            if (!c->close_why[0])
                snprintf(c->close_why, sizeof c->close_why, "closed by peer%s%.*s",
                         pe.reasonlen ? ": " : "", (int)(pe.reasonlen < 100 ? pe.reasonlen : 100),
                         pe.reason ? (const char *)pe.reason : "");
            break;
        }
        case NGTCP2_ERR_DROP_CONN:
            c->close_err = -ECONNRESET;
            break;
        case NGTCP2_ERR_CRYPTO:
            ngtcp2_connection_close_error_set_transport_error_tls_alert(
                &c->ccerr, ngtcp2_conn_get_tls_alert(c->q), NULL, 0);
            if (!c->close_err) c->close_err = -EACCES;
            if (!c->close_why[0])
                snprintf(c->close_why, sizeof c->close_why, "TLS handshake failed (alert %u)",
                         ngtcp2_conn_get_tls_alert(c->q));
            break;
        default:
            if (c->ccerr.error_code == 0 &&
                c->ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT)
                ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, rv, NULL, 0);
            if (!c->close_err) c->close_err = -EIO;
            if (!c->close_why[0])
                snprintf(c->close_why, sizeof c->close_why, "%s", ngtcp2_strerror(rv));
        }
        conn_close_now(c);
        return;
    }
    /* flush (ACKs, answers) once per batch of datagrams, in the idle phase of this loop turn */
    mark_dirty(c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    tp_endpoint_t *ep = h->data;
    buf->base = (char *)ep->rbuf;
    buf->len = RBUF_SLOTS * 65536;
}

static void recv_cb(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *addr,
                    unsigned flags)
{
    tp_endpoint_t *ep = h->data;
    if (nread <= 0 || !addr || ep->closing) return; /* includes the final UV_UDP_MMSG_FREE */
    ep->stats.datagrams_in++;
    if (flags & UV_UDP_PARTIAL) {
        ep->stats.dropped++;
        return;
    }
    const uint8_t *data = (const uint8_t *)buf->base;
    size_t n = (size_t)nread;
    ngtcp2_version_cid vc;
    if (ngtcp2_pkt_decode_version_cid(&vc, data, n, SCID_LEN) != 0) {
        ep->stats.dropped++;
        return;
    }
    tp_conn_t *c = cid_find(ep, vc.dcid, vc.dcidlen);
    if (c) {
        conn_read(c, addr, data, n);
        return;
    }
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, data, n) != 0) {
        ep->stats.dropped++;
        return;
    }
    accept_conn(ep, &hd, addr, data, n);
    c = cid_find(ep, vc.dcid, vc.dcidlen);
    if (c)
        conn_read(c, addr, data, n);
    else
        ep->stats.dropped++;
}

/* ---- endpoint ---- */

int tp_endpoint_new(tp_endpoint_t **out, uv_loop_t *loop, const identity_t *id,
                    const uint8_t secret[32], const char *host, int port, const tp_config_t *cfg,
                    const tp_callbacks_t *cb)
{
    tp_endpoint_t *ep = calloc(1, sizeof *ep);
    if (!ep) return -ENOMEM;
    ep->loop = loop;
    ep->id = id;
    memcpy(ep->secret, secret, 32);
    if (cfg)
        ep->cfg = *cfg;
    else
        tp_config_default(&ep->cfg);
    ep->cb = *cb;
    int rc = tlsid_credentials(id, &ep->cred);
    if (rc) goto fail;
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        rc = -EINVAL;
        goto fail;
    }
    ep->rbuf = malloc((size_t)RBUF_SLOTS * 65536);
    if (!ep->rbuf) {
        rc = -ENOMEM;
        goto fail;
    }
    uv_udp_init_ex(loop, &ep->udp, AF_UNSPEC | UV_UDP_RECVMMSG);
    ep->udp.data = ep;
    uv_idle_init(loop, &ep->idle);
    ep->idle.data = ep;
    rc = uv_udp_bind(&ep->udp, (struct sockaddr *)&ss, 0);
    if (rc == 0) {
        int len = sizeof ep->local;
        rc = uv_udp_getsockname(&ep->udp, (struct sockaddr *)&ep->local, &len);
        ep->local_len = (socklen_t)len;
    }
    if (rc == 0) {
        int sz = 4 << 20;
        uv_recv_buffer_size((uv_handle_t *)&ep->udp, &sz);
        sz = 4 << 20;
        uv_send_buffer_size((uv_handle_t *)&ep->udp, &sz);
        rc = uv_udp_recv_start(&ep->udp, alloc_cb, recv_cb);
    }
    if (rc) {
        gnutls_certificate_free_credentials(ep->cred);
        ep->cred = NULL;
        ep->closing = true;
        ep->pending_closes = 2;
        uv_close((uv_handle_t *)&ep->idle, ep_handle_closed);
        uv_close((uv_handle_t *)&ep->udp, ep_handle_closed);
        return rc;
    }
    ep->port = ep->local.ss_family == AF_INET6
                   ? ntohs(((struct sockaddr_in6 *)&ep->local)->sin6_port)
                   : ntohs(((struct sockaddr_in *)&ep->local)->sin_port);
    *out = ep;
    return 0;
fail:
    if (ep->cred) gnutls_certificate_free_credentials(ep->cred);
    free(ep->rbuf);
    free(ep);
    return rc;
}

int tp_endpoint_port(const tp_endpoint_t *ep)
{
    return ep->port;
}

void *tp_endpoint_data(const tp_endpoint_t *ep)
{
    return ep->cb.data;
}

/* One pending handle close finished; the endpoint goes when it is closing and none is left. */
static void ep_release(tp_endpoint_t *ep)
{
    if (--ep->pending_closes > 0 || !ep->closing) return;
    void (*cb)(void *) = ep->close_cb;
    void *d = ep->close_data;
    for (size_t i = 0; i < CID_BUCKETS; i++)
        for (cid_ent_t *e = ep->buckets[i]; e;) {
            cid_ent_t *n = e->next;
            free(e);
            e = n;
        }
    if (ep->cred) gnutls_certificate_free_credentials(ep->cred);
    free(ep->rbuf);
    free(ep);
    if (cb) cb(d);
}

static void ep_handle_closed(uv_handle_t *h)
{
    ep_release(h->data);
}

void tp_endpoint_close(tp_endpoint_t *ep, void (*cb)(void *data), void *data)
{
    if (ep->closing) return;
    ep->closing = true;
    ep->close_cb = cb;
    ep->close_data = data;
    while (ep->conns) {
        tp_conn_t *c = ep->conns;
        if (!c->close_err && !c->ccerr.error_code)
            ngtcp2_connection_close_error_set_application_error(
                &c->ccerr, APP_ERR_SHUTDOWN, (const uint8_t *)"shutting down", 13);
        if (!c->close_why[0]) snprintf(c->close_why, sizeof c->close_why, "shutting down");
        conn_close_now(c);
    }
    /* connections' timers close first (pending_closes counts them), then these two */
    ep->pending_closes += 2;
    uv_close((uv_handle_t *)&ep->idle, ep_handle_closed);
    uv_close((uv_handle_t *)&ep->udp, ep_handle_closed);
}

const char *tp_conn_peer_id(const tp_conn_t *c)
{
    return c->peer_id;
}

bool tp_conn_is_ready(const tp_conn_t *c)
{
    return c->ready && !c->closing && !c->close_requested;
}

bool tp_conn_outbound(const tp_conn_t *c)
{
    return c->outbound;
}

double tp_conn_rtt_ms(const tp_conn_t *c)
{
    if (!c->q) return 0;
    ngtcp2_conn_stat st;
    ngtcp2_conn_get_conn_stat(c->q, &st);
    return (double)st.smoothed_rtt / (double)NGTCP2_MILLISECONDS;
}

void tp_conn_set_data(tp_conn_t *c, void *data)
{
    c->data = data;
}

void *tp_conn_data(const tp_conn_t *c)
{
    return c->data;
}

const tp_stats_t *tp_stats(const tp_endpoint_t *ep)
{
    return &ep->stats;
}

size_t tp_conn_count(const tp_endpoint_t *ep)
{
    return ep->n_conns;
}
